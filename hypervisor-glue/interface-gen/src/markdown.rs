//! `docs/interface.md`: the reference a person reads.

use crate::description::{Description, Kind, Method, Value};
use std::fmt::Write;

pub fn generate(description: &Description, header: &str) -> String {
    let mut out = String::new();
    out += header;
    writeln!(
        out,
        "\n# The Holdfast kernel interface, ABI version {}\n\n\
         Every capability type, its methods and their errors; then the one system call (which\n\
         register carries what, the descriptor's bits, worked descriptors), what keepers receive\n\
         and the run states a process's root node holds. Programs name capabilities by\n\
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
    system_call(&mut out, description);
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

/// The heading of the examples table, which `descriptor_example_lines` finds.
pub const DESCRIPTOR_EXAMPLES_HEADING: &str = "### Descriptor examples";

/// `word` as a Rust literal in groups of four hex digits: `0x01c1_0009_0000_001c`.
pub fn hex_grouped(word: u64) -> String {
    let digits = format!("{word:016x}");
    let groups: Vec<&str> = (0..4)
        .map(|index| &digits[4 * index..4 * index + 4])
        .collect();
    format!("0x{}", groups.join("_"))
}

fn register_list(registers: &[u8]) -> String {
    if registers.is_empty() {
        "—".to_owned()
    } else {
        registers
            .iter()
            .map(u8::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn system_call(out: &mut String, description: &Description) {
    let invoke = description.invoke();
    *out += "
## System call `invoke`

Invocation is the only system call, entered with the `syscall` instruction. Which register
carries what (a register not listed is kept):

| register | in | out |
|---|---|---|
";
    for register in &description.registers {
        writeln!(
            out,
            "| `{}` | {} | {} |",
            register.name,
            register.in_doc.as_deref().unwrap_or("—"),
            register.out_doc.as_deref().unwrap_or("kept")
        )
        .unwrap();
    }
    *out += "\nThe kinds of invocation:\n\n| kind | value | |\n|---|---:|---|\n";
    for kind in &description.invocation_kinds {
        writeln!(out, "| {} | {} | {} |", kind.name, kind.value, kind.doc).unwrap();
    }
    writeln!(
        out,
        "\n### The descriptor (`{}`)\n\n\
         Every bit no field covers must be zero, else the invocation fails with\n\
         `malformed_descriptor`: the defined bits are `{}`.\n\n\
         | bits | field | |\n|---|---|---|",
        invoke
            .register_in("descriptor")
            .map_or("rdi", |register| register.name.as_str()),
        hex_grouped(invoke.defined_bits())
    )
    .unwrap();
    for field in &description.descriptor_fields {
        let bits = if field.bits == 1 {
            field.first_bit.to_string()
        } else {
            format!("{}..={}", field.first_bit, field.last_bit())
        };
        writeln!(out, "| {bits} | `{}` | {} |", field.name, field.doc).unwrap();
    }
    writeln!(
        out,
        "\n{DESCRIPTOR_EXAMPLES_HEADING}\n\n\
         Each descriptor below, decoded: the register invoked, the kind, the capability registers\n\
         sent and those that receive (in order), and the register that receives a call's resume\n\
         capability (bit 56 set), or — (bit 56 clear).\n\n\
         The fields column shows how the word breaks down: each field that is not zero, as\n\
         `name=value` (register lists in hex, a nibble per register).\n\n\
         | descriptor | fields | target | kind | sends | receives into | resume into | |\n\
         |---|---|---:|---|---|---|---|---|"
    )
    .unwrap();
    for example in &description.descriptor_examples {
        let word = invoke.encode(example);
        let fields: Vec<String> = description
            .descriptor_fields
            .iter()
            .map(|field| (field, (word >> field.first_bit) & field.mask()))
            .filter(|&(_, value)| value != 0)
            .map(|(field, value)| match field.name.as_str() {
                "send_registers" | "receive_registers" => format!("{}={value:#x}", field.name),
                _ => format!("{}={value}", field.name),
            })
            .collect();
        writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
            hex_grouped(word),
            fields.join(" "),
            example.target,
            example.kind,
            register_list(&example.send),
            register_list(&example.receive),
            example
                .resume
                .map_or("—".to_owned(), |register| register.to_string()),
            example.doc
        )
        .unwrap();
    }

    *out += "\n## Keepers\n\n\
             A keeper is called with one of these order codes and the words listed; capability\n\
             registers receive as its descriptor asks.\n\n\
             | code | message | | words |\n|---:|---|---|---|\n";
    for message in &description.keeper_messages {
        let words = if message.words.is_empty() {
            "none".to_owned()
        } else {
            message
                .words
                .iter()
                .enumerate()
                .map(|(index, word)| format!("{index}: {word}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(
            out,
            "| {} | `{}` | {} | {words} |",
            message.code, message.name, message.doc
        )
        .unwrap();
    }

    if let Some(layout) = &description.run_state_layout {
        writeln!(
            out,
            "\n## Run states\n\n\
             A process's root node holds its run state in slot 19, a number. Its first word holds\n\
             the code (bits {}..={}), flags (bits {}..={}) and a fault's vector (bits {}..={});\n\
             its second word the exit code (stopped) or the fault's rip (faulted). Slots 20..=31\n\
             hold the 18 registers in the order of `process.read_registers`, then a fault's error\n\
             code and address, then the invocation count.\n\n\
             | code | run state | |\n|---:|---|---|",
            layout.code_bits[0],
            layout.code_bits[1],
            layout.flag_bits[0],
            layout.flag_bits[1],
            layout.fault_vector_bits[0],
            layout.fault_vector_bits[1]
        )
        .unwrap();
        for state in &description.run_states {
            writeln!(out, "| {} | `{}` | {} |", state.code, state.name, state.doc).unwrap();
        }
        *out += "\n| bit | flag | |\n|---:|---|---|\n";
        for flag in &description.run_state_flags {
            writeln!(out, "| {} | `{}` | {} |", flag.bit, flag.name, flag.doc).unwrap();
        }
    }
}
