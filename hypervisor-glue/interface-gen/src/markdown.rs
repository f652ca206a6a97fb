//! `docs/interface.md`: the reference a person reads.

use crate::description::{Description, Kind, Method, Value};
use std::fmt::Write;

pub fn generate(description: &Description, header: &str) -> String {
    let mut out = String::new();
    out += header;
    writeln!(
        out,
        "\n# The Holdfast kernel interface, ABI version {}\n\n\
         Every capability type, its methods and their errors. Programs name capabilities by\n\
         capability register (0..=15) or node slot (0..=31); they never see a capability's bits.\n\
         Ring-3 programs call the methods through the stubs in `holdfast-userlib`\n\
         (`services/userlib/src/interface.rs`); the kernel decodes invocations with\n\
         `holdfast_abi::interface` (`guest-kernel/abi/src/interface.rs`).\n",
        description.abi_version
    )
    .unwrap();

    out += "## Types\n\n| code | type | |\n|---:|---|---|\n";
    for type_ in &description.types {
        let name = if type_.dispatch {
            format!("[{0}](#{0})", type_.name)
        } else {
            type_.name.clone()
        };
        writeln!(out, "| {} | {name} | {} |", type_.code, type_.doc).unwrap();
    }

    out += "\n## Methods of every type\n\nEvery type in the table above that has a section below \
            also has these methods.\n\n";
    for method in &description.common_methods {
        method_section(&mut out, description, method);
    }
    for (type_, _) in description.dispatched_types() {
        writeln!(
            out,
            "## {}\n\n{} An order that is none of these methods gets `invalid_order`.\n",
            type_.name, type_.doc
        )
        .unwrap();
        for method in &type_.methods {
            method_section(&mut out, description, method);
        }
    }

    out += "## Errors\n\n\
            An invocation returns a result code in `rax`: 0 for success; for a call through a start\n\
            capability, the code the server replies with; otherwise one of these errors. Invocation\n\
            errors can come from any invocation and are 2^63 or more, so that they never collide\n\
            with a server's reply codes.\n\n\
            | code | error | kind | meaning |\n|---:|---|---|---|\n";
    for error in &description.invocation_errors {
        writeln!(
            out,
            "| {:#x} | `{}` | invocation | {} |",
            error.code(),
            error.name,
            error.doc
        )
        .unwrap();
    }
    for error in &description.object_errors {
        writeln!(
            out,
            "| {} | `{}` | object | {} |",
            error.code, error.name, error.doc
        )
        .unwrap();
    }
    out += REGISTER_CONVENTION;
    out
}

fn method_section(out: &mut String, description: &Description, method: &Method) {
    writeln!(
        out,
        "### `{}` (order {})\n\n{}\n",
        method.name, method.order, method.doc
    )
    .unwrap();
    values_table(
        out,
        "Argument",
        &method.arguments,
        |kind, index| match kind {
            Kind::Word => format!("word {index}"),
            Kind::String => "string sent".to_owned(),
            Kind::Capability => format!("capability sent {index}"),
        },
    );
    values_table(out, "Result", &method.results, |kind, index| match kind {
        Kind::Word => format!("word {index}"),
        Kind::String => "string received".to_owned(),
        Kind::Capability => format!("capability received {index}"),
    });
    if let Some(sum) = &method.sum_at_most {
        let terms: Vec<String> = sum
            .arguments
            .iter()
            .map(|name| format!("`{name}`"))
            .collect();
        writeln!(
            out,
            "{} together are at most {} (a string counts as its length).\n",
            terms.join(" + "),
            sum.max
        )
        .unwrap();
    }
    let errors: Vec<String> = method
        .object_errors(description)
        .iter()
        .map(|error| format!("`{}`", error.name))
        .collect();
    if errors.is_empty() {
        out.push_str("Errors: none but invocation errors.\n\n");
    } else {
        writeln!(
            out,
            "Errors: {}; and invocation errors.\n",
            errors.join(", ")
        )
        .unwrap();
    }
}

fn values_table(
    out: &mut String,
    heading: &str,
    values: &[Value],
    place: impl Fn(Kind, usize) -> String,
) {
    if values.is_empty() {
        writeln!(out, "{heading}s: none.\n").unwrap();
        return;
    }
    writeln!(out, "| {heading} | in | |\n|---|---|---|").unwrap();
    let mut counts = [0; 3];
    for value in values {
        let counter = &mut counts[value.kind as usize];
        let mut notes = String::new();
        if let Some([min, max]) = value.range {
            write!(
                notes,
                " Range {min}..={max}, else `{}`.",
                value.range_error()
            )
            .unwrap();
        }
        if !value.types.is_empty() {
            write!(
                notes,
                " Type {}, else `wrong_type`.",
                value.types.join(" or ")
            )
            .unwrap();
        }
        writeln!(
            out,
            "| `{}` | {} | {}{notes} |",
            value.name,
            place(value.kind, *counter),
            value.doc
        )
        .unwrap();
        *counter += 1;
    }
    out.push('\n');
}

const REGISTER_CONVENTION: &str = "
## System call `invoke`

Invocation is the only system call, entered with the `syscall` instruction. Its kind is call
(wait for the reply), return (reply, then wait for the next invocation) or send (no wait).

| register | in |
|---|---|
| `rdi` | bits 0..=3 target capability register; bits 4..=5 kind (0 call, 1 return, 2 send); bits 8..=23 four send capability registers (4 bits each, first in bits 8..=11); bits 24..=26 send capability count (0..=4); bits 32..=47 four receive capability registers; bits 48..=50 receive capability count; bits 52..=55 the register that receives the resume capability |
| `rsi` | order code (call, send) or reply code (return) |
| `rdx`, `r10`, `r8`, `r9` | words 0..=3 |
| `r12`, `r13` | send string address and length (length 0: no string) |
| `r14`, `r15` | receive buffer address and capacity |

| register | out |
|---|---|
| `rax` | result code: 0 for success, a reply code, or an error above |
| `rdx`, `r10`, `r8`, `r9` | words 0..=3 |
| `r12` | the badge of the capability invoked (seen by a server receiving) |
| `r13` | length of the string received (never more than the capacity; the rest is dropped) |

`rcx` and `r11` are clobbered by `syscall`; every other register is kept.
";
