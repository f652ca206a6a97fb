//! `services/userlib/src/interface.rs`: one function per method, each a call through
//! `crate::syscall::invoke`.

use crate::description::{Description, Kind, Method, Value, camel_case};
use crate::invoke;
use std::fmt::Write;

pub fn generate(description: &Description, header: &str) -> String {
    let mut out = String::new();
    out += header;
    out += "\n//! Stubs for the methods of kernel objects, one function per method (see\n\
            //! `docs/interface.md`). Each calls its target with [`invoke`]; a capability result\n\
            //! goes to the capability register the caller names, a string result into the\n\
            //! buffer it lends.\n\n\
            use crate::syscall::{CapReg, Error, Invocation, invoke};\n\n";
    system_call(&mut out, description);
    for method in &description.common_methods {
        stub(
            &mut out,
            description,
            method,
            "target",
            "crate::abi::interface::common_order",
        );
    }
    for (type_, _) in description.dispatched_types() {
        writeln!(
            out,
            "/// {}\npub mod {} {{\nuse crate::abi::interface::{}::order;\n\
             use crate::syscall::{{CapReg, Error, Invocation, invoke}};\n",
            type_.doc, type_.name, type_.name
        )
        .unwrap();
        for method in &type_.methods {
            stub(&mut out, description, method, &type_.name, "order");
        }
        out += "}\n\n";
    }
    out
}

/// `orders` is the path of the module holding the method's order constant.
fn stub(out: &mut String, description: &Description, method: &Method, target: &str, orders: &str) {
    let order = format!("{orders}::{}", method.name.to_ascii_uppercase());
    let word_results: Vec<&Value> = method.results_of(Kind::Word).collect();
    let string_result = method.results_of(Kind::String).next();
    let capability_results: Vec<&Value> = method.results_of(Kind::Capability).collect();
    let capability_parameter = |result: &Value| {
        if capability_results.len() == 1 {
            "into".to_owned()
        } else {
            format!("{}_into", result.name)
        }
    };

    // What the stub returns: nothing, the one value, or a struct naming each.
    let returned: Vec<(String, String)> = word_results
        .iter()
        .map(|word| (word.name.clone(), word.doc.clone()))
        .chain(string_result.map(|string| {
            (
                format!("{}_length", string.name),
                format!("Bytes of `{}` received.", string.name),
            )
        }))
        .collect();
    let results_struct = format!("{}Results", camel_case(&method.name));
    let return_type = match returned.len() {
        0 => "()".to_owned(),
        1 if string_result.is_some() => "usize".to_owned(),
        1 => "u64".to_owned(),
        _ => results_struct.clone(),
    };
    if returned.len() > 1 {
        writeln!(
            out,
            "/// What [`{}`] returns.\n#[derive(Clone, Copy, Debug, PartialEq, Eq)]\npub struct {results_struct} {{",
            method.name
        )
        .unwrap();
        for (name, doc) in &returned {
            let field_type =
                if string_result.is_some_and(|string| format!("{}_length", string.name) == *name) {
                    "usize"
                } else {
                    "u64"
                };
            writeln!(out, "/// {doc}\npub {name}: {field_type},").unwrap();
        }
        out.push_str("}\n\n");
    }

    // Doc: what the method does, its parameters, its errors (object errors; invocation
    // errors apply to every call).
    writeln!(out, "/// {}", method.doc).unwrap();
    if !method.arguments.is_empty() || !method.results.is_empty() {
        out.push_str("///\n");
    }
    for argument in &method.arguments {
        let range = match argument.range {
            Some([min, max]) => format!(" Range {min}..={max}."),
            None => String::new(),
        };
        let types = if argument.types.is_empty() {
            String::new()
        } else {
            format!(" Type {}.", argument.types.join(" or "))
        };
        writeln!(
            out,
            "/// - `{}`: {}{range}{types}",
            argument.name, argument.doc
        )
        .unwrap();
    }
    if let Some(string) = string_result {
        writeln!(
            out,
            "/// - `{}`: receives {}",
            string.name,
            lowercase_first(&string.doc)
        )
        .unwrap();
    }
    for capability in &capability_results {
        writeln!(
            out,
            "/// - `{}`: the capability register that receives {}",
            capability_parameter(capability),
            lowercase_first(&capability.doc)
        )
        .unwrap();
    }
    for (name, doc) in &returned {
        if returned.len() == 1 {
            writeln!(out, "///\n/// Returns {}", lowercase_first(doc)).unwrap();
        } else {
            writeln!(out, "/// - returns `{name}`: {doc}").unwrap();
        }
    }

    let errors: Vec<String> = method
        .object_errors(description)
        .iter()
        .map(|error| format!("`{}`", error.name))
        .collect();
    if errors.is_empty() {
        out.push_str("///\n/// Errors: invocation errors only.\n");
    } else {
        writeln!(
            out,
            "///\n/// Errors: {}; and invocation errors.",
            errors.join(", ")
        )
        .unwrap();
    }

    let mut parameters = vec![format!("{target}: CapReg")];
    for argument in &method.arguments {
        let parameter_type = match argument.kind {
            Kind::Word => "u64",
            Kind::String => "&[u8]",
            Kind::Capability => "CapReg",
        };
        parameters.push(format!("{}: {parameter_type}", argument.name));
    }
    if let Some(string) = string_result {
        parameters.push(format!("{}: &mut [u8]", string.name));
    }
    for capability in &capability_results {
        parameters.push(format!("{}: CapReg", capability_parameter(capability)));
    }
    writeln!(
        out,
        "pub fn {}({}) -> Result<{return_type}, Error> {{",
        method.name,
        parameters.join(", ")
    )
    .unwrap();

    let mut fields = Vec::new();
    let words: Vec<&str> = method
        .arguments_of(Kind::Word)
        .map(|word| word.name.as_str())
        .collect();
    if !words.is_empty() {
        let mut all = words.clone();
        all.resize(4, "0");
        fields.push(format!("words: [{}]", all.join(", ")));
    }
    if let Some(string) = method.arguments_of(Kind::String).next() {
        fields.push(format!("string: {}", string.name));
    }
    let sent: Vec<&str> = method
        .arguments_of(Kind::Capability)
        .map(|capability| capability.name.as_str())
        .collect();
    if !sent.is_empty() {
        fields.push(format!("send: &[{}]", sent.join(", ")));
    }
    if !capability_results.is_empty() {
        let received: Vec<String> = capability_results
            .iter()
            .map(|result| capability_parameter(result))
            .collect();
        fields.push(format!("receive: &[{}]", received.join(", ")));
    }
    if let Some(string) = string_result {
        fields.push(format!("buffer: {}", string.name));
    }
    let call = format!("Invocation::call({target}, {order})");
    let invocation = if fields.is_empty() {
        call
    } else {
        format!("Invocation {{ {}, ..{call} }}", fields.join(", "))
    };
    let received_binding = if returned.is_empty() {
        ""
    } else {
        "let received = "
    };
    writeln!(out, "{received_binding}invoke({invocation}).check()?;").unwrap();

    let values: Vec<String> = word_results
        .iter()
        .enumerate()
        .map(|(index, _)| format!("received.words[{index}]"))
        .chain(string_result.map(|_| "received.string_length".to_owned()))
        .collect();
    match values.len() {
        0 => out.push_str("Ok(())\n"),
        1 => writeln!(out, "Ok({})", values[0]).unwrap(),
        _ => {
            let fields: Vec<String> = returned
                .iter()
                .zip(&values)
                .map(|((name, _), value)| format!("{name}: {value}"))
                .collect();
            writeln!(out, "Ok({results_struct} {{ {} }})", fields.join(", ")).unwrap();
        }
    }
    out.push_str("}\n\n");
}

fn lowercase_first(text: &str) -> String {
    let mut characters = text.chars();
    match characters.next() {
        Some(first) => first.to_ascii_lowercase().to_string() + characters.as_str(),
        None => String::new(),
    }
}

/// `system_call`: the `syscall` instruction with its registers as the description assigns
/// them, so that ring 3 cannot put a value in another register than the kernel reads.
fn system_call(out: &mut String, description: &Description) {
    let input = |role: &str| match role {
        "descriptor" => "descriptor",
        "code" => "code",
        "word0" => "word0",
        "word1" => "word1",
        "word2" => "word2",
        "word3" => "word3",
        "string_address" => "string.as_ptr() as u64",
        "string_length" => "string.len() as u64",
        "buffer_address" => "buffer.as_mut_ptr() as u64",
        "buffer_capacity" => "buffer.len() as u64",
        _ => unreachable!("validated role in `{role}`"),
    };
    let output = |role: &str| match role {
        "result" => "result",
        "word0" => "word0",
        "word1" => "word1",
        "word2" => "word2",
        "word3" => "word3",
        "badge" => "badge",
        "received_length" => "received_length",
        invoke::CLOBBERED => "_",
        _ => unreachable!("validated role out `{role}`"),
    };
    let mut operands = String::new();
    for register in &description.registers {
        let name = &register.name;
        let operand = match (register.input.as_deref(), register.output.as_deref()) {
            (Some(role_in), Some(role_out)) => {
                format!(
                    "inout(\"{name}\") {} => {},",
                    input(role_in),
                    output(role_out)
                )
            }
            (Some(role_in), None) => format!("in(\"{name}\") {},", input(role_in)),
            (None, Some(role_out)) => format!("lateout(\"{name}\") {},", output(role_out)),
            (None, None) => continue,
        };
        // rustfmt leaves the inside of `asm!` as it is: indent it here.
        operands += "    ";
        operands += &operand;
        operands += "\n";
    }
    writeln!(
        out,
        "/// The `invoke` system call: `descriptor` and `code` (the order or reply code), the\n\
         /// words, the string sent and the buffer that receives one, each in the register\n\
         /// `docs/interface.md` names. Always inlined: an invocation's `syscall` stays on its\n\
         /// caller's code page.\n\
         #[inline(always)]\n\
         pub fn system_call(descriptor: u64, code: u64, words: [u64; 4], string: &[u8], buffer: &mut [u8]) -> crate::Reply {{\n\
         let (result, badge, received_length): (u64, u64, u64);\n\
         let [mut word0, mut word1, mut word2, mut word3] = words;\n\
         // SAFETY: `syscall` enters the kernel, which reads the registers named here as inputs\n\
         // and writes only those named as outputs (the CPU clobbers rcx and r11); it writes\n\
         // memory only within `buffer`, borrowed mutably for the call, and reads only\n\
         // `string`, which is borrowed.\n\
         unsafe {{\n\
         core::arch::asm!(\n\
         \x20   \"syscall\",\n\
         {operands}\
         \x20   options(nostack),\n\
         );\n\
         }}\n\
         crate::Reply {{\n\
         code: result,\n\
         words: [word0, word1, word2, word3],\n\
         badge,\n\
         string_length: received_length as usize,\n\
         }}\n\
         }}\n"
    )
    .unwrap();
}
