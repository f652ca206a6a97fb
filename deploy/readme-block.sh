#!/usr/bin/env bash
# Prints the shell block of deploy/README.md marked `<!-- deploy-test: NAME ... -->` (the
# first ```sh block after the marker), so that the tests run the README's commands rather
# than a copy of them. Exit 1 if there is no such block.
set -euo pipefail
name="${1:?usage: deploy/readme-block.sh NAME}"
readme="$(dirname "${BASH_SOURCE[0]}")/README.md"
awk -v name="$name" '
    $0 ~ "^<!-- deploy-test: " name "( |-->)" { marked = 1; next }
    marked && /^```sh$/ { inside = 1; next }
    inside && /^```$/ { found = 1; exit }
    inside { print }
    END { exit found ? 0 : 1 }
' "$readme" || { echo "deploy/readme-block.sh: no block marked deploy-test: $name in $readme" >&2; exit 1; }
