#!/usr/bin/env python3
"""Checks the kernel's module layering (guest-kernel/kernel/README.md draws it).

Reads every kernel source file's `use crate::...` lines, `crate::x::...` paths,
`super::...` paths and uses of the crate's exported macros (`println!`), builds two graphs,
one of the top-level modules (a file or a directory under src/; main.rs is the crate root)
and one of the files, and fails, naming the files and lines, on
- any import cycle among the top-level modules, or among the files (a path through a
  directory's re-exports, `crate::process::enter`, counts as naming its mod.rs, which names
  no sibling: within a directory, files name each other by `super::file::item`), and
- any import by a low module of something not below it (LOWER_ONLY: arch/ and drivers/
  call up only through handlers registered at init, never by name), and
- any import that goes up or sideways in LAYERS, the rows that guest-kernel/kernel/README.md
  draws (a module in no row is an error too: a new module is placed in the drawing).

`--self-test` runs the check on small made-up trees (one with a cycle, one where arch
imports from above, one clean) and fails unless it tells them apart.
"""

import os
import re
import sys
import tempfile

# What each low module may import besides itself. Whatever these name must itself be in
# this table, so that "below" stays below all the way down.
LOWER_ONLY = {
    "console": set(),
    "memory": set(),
    "arch": {"console", "memory"},
    "drivers": {"arch", "console", "memory"},
}

# The rows of guest-kernel/kernel/README.md's drawing, top first: a module imports only from
# rows below its own, and from its own row only along ARROWS.
LAYERS = [
    ["main"],
    ["boot"],
    ["idle", "selftest", "traps"],
    ["ipc", "services", "methods"],
    ["user_memory", "range"],
    ["persistence", "control", "initial_system", "network"],
    ["pair"],
    ["process"],
    ["objects", "space", "bootinfo", "message"],
    ["drivers"],
    ["arch"],
    ["console", "memory"],
]
ARROWS = {("ipc", "services"), ("ipc", "methods"), ("services", "methods")}

ROOT = "main"


def module_of(relative_path):
    """The module path of a source file: ['arch', 'idt'] for arch/idt.rs, [] for main.rs."""
    parts = relative_path[: -len(".rs")].split(os.sep)
    if parts == ["main"] or parts == ["lib"]:
        return []
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", line) for line in text.split("\n"))


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (`self` names the prefix)."""
    tree = tree.strip()
    if "{" not in tree:
        return [re.sub(r"\s+as\s+\w+$", "", tree).strip()]
    brace = tree.index("{")
    prefix = tree[:brace].rstrip(":").strip()
    body = tree[brace + 1 : tree.rindex("}")]
    items, depth, start = [], 0, 0
    for index, char in enumerate(body):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(body[start:index])
            start = index + 1
    items.append(body[start:])
    paths = []
    for item in items:
        if not item.strip():
            continue
        for path in expand_use_tree(item):
            if path == "self":
                paths.append(prefix)
            elif path.startswith("self::"):
                paths.append(prefix + path[len("self") :])
            else:
                paths.append(prefix + "::" + path if prefix else path)
    return paths


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def references(text, module):
    """(absolute path, line) for each path into the crate that `text` names."""
    found = []
    # `use` trees, braces and all, relative to the crate or to this module's parent.
    for match in re.finditer(r"\buse\s+((?:crate|super)\s*::[^;]*);", text, flags=re.S):
        for path in expand_use_tree(match.group(1)):
            found.append((path, line_of(text, match.start())))
    text_without_uses = re.sub(
        r"\buse\s+(?:crate|super)\s*::[^;]*;", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S
    )
    for match in re.finditer(r"(?<![\w$])((?:crate|super)(?:::\w+)+)", text_without_uses):
        found.append((match.group(1), line_of(text_without_uses, match.start())))
    resolved = []
    for path, line in found:
        parts = path.split("::")
        if parts[0] == "super":
            base = module[:-1]
            parts = parts[1:]
            while parts and parts[0] == "super":
                base, parts = base[:-1], parts[1:]
            parts = base + parts
        else:
            parts = parts[1:]
        resolved.append((parts, line))
    return resolved


def build_graph(source_root, per_file=False):
    """{top-level module: {imported top-level module: [(file, line), ...]}}; with
    `per_file`, the same among modules ('process::switch'), each a file."""
    files = {}
    for directory, _, names in os.walk(source_root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, source_root)
                with open(path, encoding="utf-8") as source:
                    files[relative] = strip_comments(source.read())
    modules = {tuple(module_of(relative)) for relative in files}
    # `#[macro_export]` macros live at the crate root but belong to the file defining them.
    macros = {}
    for relative, text in files.items():
        for match in re.finditer(r"#\[macro_export\]\s*macro_rules!\s*(\w+)", text):
            macros[match.group(1)] = module_of(relative)

    def top(parts):
        if per_file:
            for length in range(len(parts), 0, -1):
                if tuple(parts[:length]) in modules:
                    return "::".join(parts[:length])
            return ROOT
        return parts[0] if parts else ROOT

    graph = {top(list(module)): {} for module in modules}
    for relative, text in sorted(files.items()):
        module = module_of(relative)
        targets = []
        for parts, line in references(text, module):
            if parts and parts[0] in macros:
                parts = macros[parts[0]]
            elif not parts or (parts[0],) not in modules:
                parts = []  # an item of the crate root
            targets.append((parts, line))
        if not module:
            # In the crate root a module's items are named without `crate::`.
            for match in re.finditer(r"(?<![\w:$])(\w+)::", text):
                if (match.group(1),) in modules:
                    targets.append(([match.group(1)], line_of(text, match.start())))
        for name, owner in macros.items():
            for match in re.finditer(r"(?<![\w:])" + name + r"!", text):
                targets.append((owner, line_of(text, match.start())))
        for parts, line in targets:
            source, target = top(module), top(parts)
            if source != target:
                graph[source].setdefault(target, []).append((relative, line))
    return graph


def find_cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, {})):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def cycle_in(graph, component):
    """One cycle through the component's first module, as a list of modules."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, {})):
                if target not in members:
                    continue
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    return component


def evidence(graph, source, target):
    relative, line = graph[source][target][0]
    return f"{relative}:{line}"


def check(source_root, out=sys.stdout, layers=None, arrows=frozenset()):
    """Prints what is wrong; returns the number of problems. With `layers` (rows, top
    first), also every import that does not go down a row or along `arrows`."""
    graph = build_graph(source_root)
    problems = 0
    if layers is not None:
        row = {module: index for index, members in enumerate(layers) for module in members}
        for module in sorted(graph):
            if module not in row:
                print(f"kernel layers: {module} is in no row of LAYERS (place it, and in the README's drawing)", file=out)
                problems += 1
        for source in sorted(graph):
            for target in sorted(graph[source]):
                if source in row and target in row and row[target] <= row[source] and (source, target) not in arrows:
                    print(
                        f"kernel layers: {source} imports {target} ({evidence(graph, source, target)}), "
                        f"which is not in a row below it",
                        file=out,
                    )
                    problems += 1
    for what, cycles_graph in [("modules", graph), ("files", build_graph(source_root, per_file=True))]:
        for component in find_cycles(cycles_graph):
            if what == "files" and len({member.split("::")[0] for member in component}) > 1:
                continue  # reported among the modules already
            cycle = cycle_in(cycles_graph, component)
            steps = ", ".join(
                f"{a} -> {b} ({evidence(cycles_graph, a, b)})" for a, b in zip(cycle, cycle[1:])
            )
            print(f"kernel layers: import cycle among {what} {{{', '.join(component)}}}: {steps}", file=out)
            problems += 1
    for low, allowed in sorted(LOWER_ONLY.items()):
        for target in sorted(graph.get(low, {})):
            if target not in allowed:
                print(
                    f"kernel layers: {low} imports {target}, which is not below it "
                    f"({evidence(graph, low, target)}); it may import only {sorted(allowed) or 'nothing of the kernel'}",
                    file=out,
                )
                problems += 1
    return problems


def self_test():
    """Runs the check on made-up trees and returns whether it judged each right."""
    trees = {
        "clean": {
            "main.rs": "mod arch; mod process;\nfn main() { process::run(); println!(\"x\"); }",
            "console.rs": "#[macro_export]\nmacro_rules! println { () => { $crate::console::p() } }",
            "memory.rs": "pub fn page() {}",
            "arch/mod.rs": "pub mod idt;\nuse crate::memory;",
            "arch/idt.rs": "use super::mod_item; fn f() { crate::memory::page(); println!(\"x\"); }",
            "process/mod.rs": "use crate::arch::{self, idt::{A, B}};\npub mod table;",
            "process/table.rs": "use super::super::arch::idt; // crate::ipc::x in a comment",
        },
        "cycle": {
            "main.rs": "mod ipc; mod process;",
            "ipc.rs": "use crate::process::SCHEDULER;",
            "process/mod.rs": "pub mod faults;",
            "process/faults.rs": "fn f() { crate::ipc::invoke_keeper(); }",
        },
        "arch calls up": {
            "main.rs": "mod arch; mod process;",
            "arch/idt.rs": "fn f() { crate::process::fault_in_user_mode(); }",
            "process.rs": "use crate::arch::idt;",
        },
        "files in a directory": {
            "main.rs": "mod process;",
            "process/mod.rs": "mod switch; mod table; pub use switch::*;",
            "process/switch.rs": "use super::table::Scheduler;",
            "process/table.rs": "fn run() { super::switch::enter() }",
        },
        "up a row": {
            "main.rs": "mod ipc; mod process;",
            "ipc.rs": "fn f() {}",
            "process.rs": "fn f() { crate::ipc::f() }",
        },
        "root item": {
            "main.rs": "mod boot; pub struct BootOptions; fn main() { boot::run() }",
            "boot.rs": "use crate::BootOptions;",
        },
    }
    expected = {"clean": 0, "cycle": 1, "arch calls up": 1, "files in a directory": 1, "up a row": 1, "root item": 1}
    layers = {"up a row": [["main"], ["ipc"], ["process"]]}
    passed = True
    for name, tree in trees.items():
        with tempfile.TemporaryDirectory() as root:
            for relative, text in tree.items():
                path = os.path.join(root, relative)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as file:
                    file.write(text)
            with open(os.devnull, "w") as quiet:
                problems = check(root, out=quiet, layers=layers.get(name))
            verdict = "ok" if problems == expected[name] else "WRONG"
            passed &= problems == expected[name]
            print(f"check-kernel-layers self-test: {name}: {problems} problems, expected {expected[name]} [{verdict}]")
    return passed


def main():
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(0 if self_test() else 1)
    here = os.path.dirname(os.path.abspath(__file__))
    source_root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "guest-kernel", "kernel", "src")
    problems = check(source_root, layers=LAYERS, arrows=ARROWS)
    if problems:
        sys.exit(1)
    graph = build_graph(source_root)
    files = len(build_graph(source_root, per_file=True))
    print(
        f"kernel layers: {len(graph)} top-level modules in {files} files, no import cycle among "
        "them, each imports only from the rows below it (LAYERS), arch/ and drivers/ import nothing above them"
    )


if __name__ == "__main__":
    main()
