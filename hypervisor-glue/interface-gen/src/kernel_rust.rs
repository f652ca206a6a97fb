//! `guest-kernel/abi/src/interface.rs`: type codes, order codes, errors, and for each type
//! the decoding of an invocation into a `Request` the kernel matches on.

use crate::description::{Description, Kind, Method, Value, camel_case};
use std::fmt::Write;

pub fn generate(description: &Description, header: &str) -> String {
    let mut out = String::new();
    out += header;
    writeln!(
        out,
        "\n//! The kernel interface, ABI version {}: capability types, order codes, errors, and the\n\
         //! decoding of each invocation of a kernel object into a request (see\n\
         //! `docs/interface.md`). Requests are plain data; the kernel matches on them.\n",
        description.abi_version
    )
    .unwrap();
    out += "//! Which register carries what in and out of the `invoke` system call (entered with\n\
            //! `syscall`); a register not listed is kept. Ring 3's `syscall` is generated from the\n\
            //! same table (`holdfast_userlib::interface::system_call`).\n//!\n\
            //! | register | in | out |\n//! |---|---|---|\n";
    for register in &description.registers {
        writeln!(
            out,
            "//! | `{}` | {} | {} |",
            register.name,
            register.in_doc.as_deref().unwrap_or("—"),
            register.out_doc.as_deref().unwrap_or("kept")
        )
        .unwrap();
    }
    out += "\n";
    writeln!(
        out,
        "/// The ABI version: the kernel prints it at boot and loads only programs whose ELF note\n\
         /// names it.\n\
         pub const ABI_VERSION: u32 = {};\n",
        description.abi_version
    )
    .unwrap();
    system_call(&mut out, description);

    out += "/// Capability types.\n";
    out += "#[repr(u64)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub enum Type {\n";
    for type_ in &description.types {
        writeln!(
            out,
            "/// {}\n{} = {},",
            type_.doc,
            camel_case(&type_.name),
            type_.code
        )
        .unwrap();
    }
    out += "}\n\n";
    let types: Vec<(String, u64, &str)> = description
        .types
        .iter()
        .map(|type_| (camel_case(&type_.name), type_.code, type_.name.as_str()))
        .collect();
    code_impl(
        &mut out,
        "Type",
        &types,
        "name",
        "Its name in the interface description.",
    );

    writeln!(
        out,
        "/// Codes of invocation errors start here, so that they never collide with a server's\n\
         /// reply codes.\n\
         pub const INVOCATION_ERROR_CODE_MIN: u64 = {};\n",
        code_literal(crate::description::INVOCATION_ERROR_CODE_MIN)
    )
    .unwrap();
    out += "/// Kernel errors about an invocation itself, whatever its target.\n";
    out +=
        "#[repr(u64)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub enum InvocationError {\n";
    for error in &description.invocation_errors {
        writeln!(
            out,
            "/// {}\n{} = {},",
            error.doc,
            camel_case(&error.name),
            code_literal(error.code())
        )
        .unwrap();
    }
    out += "}\n\n";
    let invocation_errors: Vec<(String, u64, &str)> = description
        .invocation_errors
        .iter()
        .map(|error| (camel_case(&error.name), error.code(), error.doc.as_str()))
        .collect();
    code_impl(
        &mut out,
        "InvocationError",
        &invocation_errors,
        "description",
        "What the error means.",
    );

    out += "/// Errors returned by kernel objects.\n";
    out += "#[repr(u64)]\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub enum ObjectError {\n";
    for error in &description.object_errors {
        writeln!(
            out,
            "/// {}\n{} = {},",
            error.doc,
            camel_case(&error.name),
            error.code
        )
        .unwrap();
    }
    out += "}\n\n";
    let object_errors: Vec<(String, u64, &str)> = description
        .object_errors
        .iter()
        .map(|error| (camel_case(&error.name), error.code, error.doc.as_str()))
        .collect();
    code_impl(
        &mut out,
        "ObjectError",
        &object_errors,
        "description",
        "What the error means.",
    );

    out += "/// What the decoders look at in an invocation.\n\
            #[derive(Clone, Copy, Debug, PartialEq, Eq)]\n\
            pub struct Message {\n\
            /// The order code.\n\
            pub order: u64,\n\
            /// Words 0..=3.\n\
            pub words: [u64; 4],\n\
            /// Length of the string sent, in bytes (0: none).\n\
            pub string_length: u64,\n\
            /// Number of capabilities sent (0..=4); a capability argument not sent is void.\n\
            pub capability_count: u64,\n\
            }\n\n";

    out += "/// Order codes of the methods every type with a module below has.\npub mod common_order {\n";
    for method in &description.common_methods {
        writeln!(
            out,
            "/// {}\npub const {}: u64 = {};",
            method.doc,
            method.name.to_ascii_uppercase(),
            method.order
        )
        .unwrap();
    }
    out += "}\n\n";

    for (type_, methods) in description.dispatched_types() {
        writeln!(out, "/// {}\npub mod {} {{", type_.doc, type_.name).unwrap();
        out += "use super::{Message, ObjectError};\n\n";
        out += "/// Order codes.\npub mod order {\n";
        for method in &methods {
            writeln!(
                out,
                "/// {}\npub const {}: u64 = {};",
                method.doc,
                method.name.to_ascii_uppercase(),
                method.order
            )
            .unwrap();
        }
        out += "}\n\n";

        writeln!(
            out,
            "/// An invocation of a {} capability, decoded and with its arguments checked\n\
             /// against the ranges the interface names. Capability arguments are the\n\
             /// capabilities sent, in order.\n\
             #[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub enum Request {{",
            type_.name
        )
        .unwrap();
        for method in &methods {
            writeln!(out, "/// {}", method.doc).unwrap();
            let words: Vec<&Value> = method.arguments_of(Kind::Word).collect();
            if words.is_empty() {
                writeln!(out, "{},", camel_case(&method.name)).unwrap();
            } else {
                writeln!(out, "{} {{", camel_case(&method.name)).unwrap();
                for word in words {
                    writeln!(out, "/// {}\n{}: u64,", word.doc, word.name).unwrap();
                }
                out += "},\n";
            }
        }
        out += "}\n\n";

        out += "impl Request {\n\
                /// Decodes `message`, or says which object error the invoker gets.\n\
                pub fn decode(message: &Message) -> Result<Self, ObjectError> {\n\
                match message.order {\n";
        for method in &methods {
            decode_arm(&mut out, method);
        }
        out += "_ => Err(ObjectError::InvalidOrder),\n}\n}\n}\n}\n\n";
    }
    out
}

/// `code()`, `from_code()` and a `&'static str` for each variant of a `#[repr(u64)]` enum.
fn code_impl(
    out: &mut String,
    enum_name: &str,
    variants: &[(String, u64, &str)],
    text_name: &str,
    text_doc: &str,
) {
    writeln!(
        out,
        "impl {enum_name} {{\n\
         pub const fn code(self) -> u64 {{\nself as u64\n}}\n\n\
         pub const fn from_code(code: u64) -> Option<Self> {{\nSome(match code {{"
    )
    .unwrap();
    for (variant, code, _) in variants {
        writeln!(out, "{} => Self::{variant},", code_literal(*code)).unwrap();
    }
    writeln!(
        out,
        "_ => return None,\n}})\n}}\n\n/// {text_doc}\npub const fn {text_name}(self) -> &'static str {{\nmatch self {{"
    )
    .unwrap();
    for (variant, _, text) in variants {
        writeln!(out, "Self::{variant} => {text:?},").unwrap();
    }
    out.push_str("}\n}\n}\n\n");
}

fn decode_arm(out: &mut String, method: &Method) {
    let variant = camel_case(&method.name);
    let order = method.name.to_ascii_uppercase();
    let words: Vec<&Value> = method.arguments_of(Kind::Word).collect();
    let checks_capabilities = method
        .arguments_of(Kind::Capability)
        .any(|argument| !argument.accepts_void());
    if words.is_empty() && !checks_capabilities && method.sum_at_most.is_none() {
        writeln!(out, "order::{order} => Ok(Self::{variant}),").unwrap();
        return;
    }
    writeln!(out, "order::{order} => {{").unwrap();
    for (index, word) in words.iter().enumerate() {
        writeln!(out, "let {} = message.words[{index}];", word.name).unwrap();
    }
    for word in &words {
        let Some([min, max]) = word.range else {
            continue;
        };
        let error = camel_case(word.range_error());
        let condition = if min == 0 {
            format!("{} > {max}", word.name)
        } else {
            format!("!({min}..={max}).contains(&{})", word.name)
        };
        writeln!(
            out,
            "if {condition} {{\nreturn Err(ObjectError::{error});\n}}"
        )
        .unwrap();
    }
    for (index, capability) in method.arguments_of(Kind::Capability).enumerate() {
        if !capability.accepts_void() {
            writeln!(
                out,
                "// `{}` must be a {}; one not sent is void.\n\
                 if message.capability_count < {} {{\nreturn Err(ObjectError::WrongType);\n}}",
                capability.name,
                capability.types.join(" or "),
                index + 1
            )
            .unwrap();
        }
    }
    if let Some(sum) = &method.sum_at_most {
        let term = |name: &String| {
            let is_string = method
                .arguments
                .iter()
                .any(|argument| &argument.name == name && argument.kind == Kind::String);
            if is_string {
                "message.string_length".to_owned()
            } else {
                name.clone()
            }
        };
        // Validation guarantees at least two terms.
        let terms: Vec<String> = sum.arguments.iter().map(term).collect();
        let mut expression = format!("{}.checked_add({})", terms[0], terms[1]);
        for next in &terms[2..] {
            expression = format!("{expression}.and_then(|sum| sum.checked_add({next}))");
        }
        writeln!(
            out,
            "if {expression}.is_none_or(|sum| sum > {}) {{\nreturn Err(ObjectError::OutOfRange);\n}}",
            sum.max
        )
        .unwrap();
    }
    let fields: Vec<&str> = words.iter().map(|word| word.name.as_str()).collect();
    if fields.is_empty() {
        writeln!(out, "Ok(Self::{variant})\n}}").unwrap();
    } else {
        writeln!(out, "Ok(Self::{variant} {{ {} }})\n}}", fields.join(", ")).unwrap();
    }
}

/// Small codes in decimal, invocation error codes (2^63 and up) in hex.
fn code_literal(code: u64) -> String {
    if code < crate::description::INVOCATION_ERROR_CODE_MIN {
        code.to_string()
    } else {
        format!(
            "{:#x}_{:04x}_{:04x}_{:04x}",
            code >> 48,
            (code >> 32) & 0xffff,
            (code >> 16) & 0xffff,
            code & 0xffff
        )
    }
}

/// The descriptor's layout, the invocation kinds, keeper message codes and run states.
fn system_call(out: &mut String, description: &Description) {
    let invoke = description.invoke();
    *out += "/// Where the register of each role of `invoke` lies in the register file (the order of\n\
            /// `process.read_registers`), in words: the kernel checks its register file against\n\
            /// these at build time.\npub mod register_file_index {\n";
    for register in &description.registers {
        let index = invoke.register_file_index(&register.name);
        for (direction, role) in [("IN", &register.input), ("OUT", &register.output)] {
            if let Some(role) = role
                && role != crate::invoke::CLOBBERED
            {
                writeln!(
                    out,
                    "/// `{}`.\npub const {direction}_{}: usize = {index};",
                    register.name,
                    role.to_ascii_uppercase()
                )
                .unwrap();
            }
        }
    }
    *out += "}\n\n";

    *out += "/// Where each field of the descriptor (`rdi`) lies: `*_SHIFT` is its lowest bit, `*_MASK`\n\
            /// its mask once shifted down.\npub mod descriptor_field {\n";
    for field in &description.descriptor_fields {
        let name = field.name.to_ascii_uppercase();
        writeln!(
            out,
            "/// Bits {}..={}: {}\npub const {name}_SHIFT: u32 = {};\npub const {name}_MASK: u64 = {:#x};",
            field.first_bit,
            field.last_bit(),
            field.doc,
            field.first_bit,
            field.mask()
        )
        .unwrap();
    }
    writeln!(
        out,
        "/// Every bit a field covers; a descriptor with any other bit set is malformed.\n\
         pub const DEFINED_BITS: u64 = {};\n}}\n",
        crate::markdown::hex_grouped(invoke.defined_bits())
    )
    .unwrap();

    *out += "/// Values of the descriptor's `kind` field.\npub mod invocation_kind {\n";
    for kind in &description.invocation_kinds {
        writeln!(
            out,
            "/// {}\npub const {}: u64 = {};",
            kind.doc,
            kind.name.to_ascii_uppercase(),
            kind.value
        )
        .unwrap();
    }
    *out += "}\n\n";

    *out += "/// What keepers receive: the order code of the call says why, the words say where.\n\
            pub mod keeper {\n";
    for message in &description.keeper_messages {
        let words: String = message
            .words
            .iter()
            .enumerate()
            .map(|(index, word)| format!("\n/// - word {index}: {word}"))
            .collect();
        let words = if words.is_empty() {
            words
        } else {
            format!("\n///{words}")
        };
        writeln!(
            out,
            "/// {}{words}\npub const {}: u64 = {};",
            message.doc,
            message.name.to_ascii_uppercase(),
            message.code
        )
        .unwrap();
    }
    *out += "}\n\n";

    if let Some(layout) = &description.run_state_layout {
        let [code_first, code_last] = layout.code_bits;
        writeln!(
            out,
            "/// The run state in a process's root node (slot 19, a number): its first word holds\n\
             /// the code (bits {code_first}..={code_last}), flags (bits {}..={}) and a fault's vector \
             (bits {}..={}).\npub mod run_state {{\n\
             /// The code's bits of the first word, shifted down.\n\
             pub const CODE_MASK: u64 = {:#x};\npub const CODE_SHIFT: u32 = {code_first};\n\
             /// Where a fault's vector lies in the first word.\n\
             pub const FAULT_VECTOR_SHIFT: u32 = {};",
            layout.flag_bits[0],
            layout.flag_bits[1],
            layout.fault_vector_bits[0],
            layout.fault_vector_bits[1],
            u64::MAX >> (63 - (code_last - code_first)),
            layout.fault_vector_bits[0],
        )
        .unwrap();
        for state in &description.run_states {
            writeln!(
                out,
                "/// {}\npub const {}: u64 = {};",
                state.doc,
                state.name.to_ascii_uppercase(),
                state.code
            )
            .unwrap();
        }
        for flag in &description.run_state_flags {
            writeln!(
                out,
                "/// Flag (bit {}): {}\npub const {}: u64 = 1 << {};",
                flag.bit,
                flag.doc,
                flag.name.to_ascii_uppercase(),
                flag.bit
            )
            .unwrap();
        }
        *out += "}\n\n";
    }
}
