//! The interface description as read from `interface.toml`, and its validation: everything
//! the generators rely on (unique names and codes, known references, what fits in the
//! registers of one invocation) is checked here, once.

use crate::invoke::{
    DescriptorExample, DescriptorField, InvocationKind, Invoke, KeeperMessage, Register, RunState,
    RunStateFlag, RunStateLayout,
};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Codes of invocation errors are this plus their offset, so that they never collide with
/// the reply codes of servers.
pub const INVOCATION_ERROR_CODE_MIN: u64 = 1 << 63;
/// Words, strings and capabilities one invocation carries each way.
pub const WORDS_MAX: usize = 4;
pub const STRINGS_MAX: usize = 1;
pub const CAPABILITIES_MAX: usize = 4;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Description {
    pub abi_version: u32,
    /// A process's registers in the order of `process.read_registers`.
    #[serde(default)]
    pub register_file: Vec<String>,
    /// Which register carries what in and out of `invoke`.
    #[serde(rename = "register", default)]
    pub registers: Vec<Register>,
    #[serde(rename = "invocation_kind", default)]
    pub invocation_kinds: Vec<InvocationKind>,
    /// The descriptor's bit layout.
    #[serde(rename = "descriptor_field", default)]
    pub descriptor_fields: Vec<DescriptorField>,
    /// Descriptors worked out in the reference, from their meaning.
    #[serde(rename = "descriptor_example", default)]
    pub descriptor_examples: Vec<DescriptorExample>,
    #[serde(rename = "keeper_message", default)]
    pub keeper_messages: Vec<KeeperMessage>,
    pub run_state_layout: Option<RunStateLayout>,
    #[serde(rename = "run_state", default)]
    pub run_states: Vec<RunState>,
    #[serde(rename = "run_state_flag", default)]
    pub run_state_flags: Vec<RunStateFlag>,
    #[serde(rename = "invocation_error", default)]
    pub invocation_errors: Vec<InvocationError>,
    #[serde(rename = "object_error", default)]
    pub object_errors: Vec<ObjectError>,
    /// Methods of every type with `dispatch = true`.
    #[serde(rename = "common_method", default)]
    pub common_methods: Vec<Method>,
    #[serde(rename = "type", default)]
    pub types: Vec<Type>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationError {
    pub name: String,
    pub offset: u64,
    pub doc: String,
}

impl InvocationError {
    pub fn code(&self) -> u64 {
        INVOCATION_ERROR_CODE_MIN + self.offset
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectError {
    pub name: String,
    pub code: u64,
    pub doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Type {
    pub name: String,
    pub code: u64,
    pub doc: String,
    /// False for types whose invocations the kernel does not decode: they go through to a
    /// target or fail.
    #[serde(default = "dispatch_default")]
    pub dispatch: bool,
    #[serde(rename = "method", default)]
    pub methods: Vec<Method>,
}

fn dispatch_default() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Method {
    pub name: String,
    pub order: u64,
    pub doc: String,
    #[serde(default)]
    pub arguments: Vec<Value>,
    #[serde(default)]
    pub results: Vec<Value>,
    /// Object errors the kernel returns beyond those the checks below imply.
    #[serde(default)]
    pub errors: Vec<String>,
    pub sum_at_most: Option<SumAtMost>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Value {
    pub name: String,
    pub kind: Kind,
    pub doc: String,
    /// Inclusive bounds the decoder checks (word arguments only).
    pub range: Option<[u64; 2]>,
    /// The object error for a value outside `range`; `out_of_range` if not given.
    pub range_error: Option<String>,
    /// Types a capability argument may have; any type if empty.
    #[serde(default)]
    pub types: Vec<String>,
}

impl Value {
    pub fn range_error(&self) -> &str {
        self.range_error.as_deref().unwrap_or(OUT_OF_RANGE)
    }

    /// Whether a capability argument may be void, which is what the kernel sees when the
    /// invoker sent fewer capabilities than the method takes.
    pub fn accepts_void(&self) -> bool {
        self.types.is_empty() || self.types.iter().any(|name| name == "void")
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Word,
    String,
    Capability,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SumAtMost {
    /// Word arguments, or the string argument (counted as its length).
    pub arguments: Vec<String>,
    pub max: u64,
}

const OUT_OF_RANGE: &str = "out_of_range";
const WRONG_TYPE: &str = "wrong_type";
const INVALID_ORDER: &str = "invalid_order";

impl Method {
    /// Every object error the method can return, in the order the description lists object
    /// errors: those its checks imply and those it names. (`invalid_order` is the type's
    /// answer to an order that is no method.)
    pub fn object_errors<'a>(&'a self, description: &'a Description) -> Vec<&'a ObjectError> {
        let mut names: Vec<&str> = Vec::new();
        for argument in &self.arguments {
            if argument.range.is_some() {
                names.push(argument.range_error());
            }
            if !argument.types.is_empty() {
                names.push(WRONG_TYPE);
            }
        }
        if self.sum_at_most.is_some() {
            names.push(OUT_OF_RANGE);
        }
        names.extend(self.errors.iter().map(String::as_str));
        description
            .object_errors
            .iter()
            .filter(|error| names.contains(&error.name.as_str()))
            .collect()
    }

    pub fn arguments_of(&self, kind: Kind) -> impl Iterator<Item = &Value> {
        self.arguments
            .iter()
            .filter(move |value| value.kind == kind)
    }

    pub fn results_of(&self, kind: Kind) -> impl Iterator<Item = &Value> {
        self.results.iter().filter(move |value| value.kind == kind)
    }
}

impl Description {
    pub fn parse(text: &str) -> Result<Self, String> {
        let description: Self = toml::from_str(text).map_err(|error| {
            // toml's message spans several lines (the offending source line and a caret);
            // its first line says where and the last what.
            let message = error.to_string();
            let mut lines = message.lines().filter(|line| !line.trim().is_empty());
            let first = lines.next().unwrap_or_default().to_owned();
            match lines.next_back() {
                Some(last) => format!("{first} {}", last.trim()),
                None => first,
            }
        })?;
        description.validate()?;
        Ok(description)
    }

    /// The types whose invocations the kernel decodes, with all their methods (the common
    /// ones first).
    pub fn dispatched_types(&self) -> impl Iterator<Item = (&Type, Vec<&Method>)> {
        self.types
            .iter()
            .filter(|type_| type_.dispatch)
            .map(|type_| {
                let methods = self.common_methods.iter().chain(&type_.methods).collect();
                (type_, methods)
            })
    }

    /// The system call: registers, invocation kinds and the descriptor's layout.
    pub fn invoke(&self) -> Invoke<'_> {
        Invoke {
            register_file: &self.register_file,
            registers: &self.registers,
            kinds: &self.invocation_kinds,
            fields: &self.descriptor_fields,
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.invoke().validate(&self.descriptor_examples)?;
        crate::invoke::validate_keepers_and_run_states(
            &self.keeper_messages,
            self.run_state_layout.as_ref(),
            &self.run_states,
            &self.run_state_flags,
        )?;
        let mut error_names = BTreeMap::new();
        let mut invocation_offsets = BTreeMap::new();
        for error in &self.invocation_errors {
            let entry = format!("invocation error `{}`", error.name);
            check_identifier(&entry, &error.name)?;
            unique(&mut error_names, &error.name, &entry, "name")?;
            unique(&mut invocation_offsets, &error.offset, &entry, "offset")?;
            if error.offset >= INVOCATION_ERROR_CODE_MIN {
                return Err(format!("{entry}: offset {} is 2^63 or more", error.offset));
            }
        }
        let mut object_codes = BTreeMap::new();
        for error in &self.object_errors {
            let entry = format!("object error `{}`", error.name);
            check_identifier(&entry, &error.name)?;
            unique(&mut error_names, &error.name, &entry, "name")?;
            unique(&mut object_codes, &error.code, &entry, "code")?;
            if error.code == 0 || error.code >= INVOCATION_ERROR_CODE_MIN {
                return Err(format!(
                    "{entry}: code {} is not in 1..2^63 (0 is success)",
                    error.code
                ));
            }
        }
        for required in [INVALID_ORDER, OUT_OF_RANGE, WRONG_TYPE] {
            if !self
                .object_errors
                .iter()
                .any(|error| error.name == required)
            {
                return Err(format!(
                    "object error `{required}` is missing; the decoder returns it"
                ));
            }
        }

        let mut type_names = BTreeMap::new();
        let mut type_codes = BTreeMap::new();
        for type_ in &self.types {
            let entry = format!("type `{}`", type_.name);
            check_identifier(&entry, &type_.name)?;
            unique(&mut type_names, &type_.name, &entry, "name")?;
            unique(&mut type_codes, &type_.code, &entry, "code")?;
            if !type_.dispatch && !type_.methods.is_empty() {
                return Err(format!(
                    "{entry}: has methods but `dispatch = false` (its invocations are not decoded)"
                ));
            }
        }

        let mut common_names = BTreeMap::new();
        let mut common_orders = BTreeMap::new();
        for method in &self.common_methods {
            let entry = format!("common method `{}`", method.name);
            unique(&mut common_names, &method.name, &entry, "name")?;
            unique(&mut common_orders, &method.order, &entry, "order")?;
            self.validate_method(&entry, "target", method)?;
        }
        for type_ in &self.types {
            let mut names = common_names.clone();
            let mut orders = common_orders.clone();
            for method in &type_.methods {
                let entry = format!("type `{}`, method `{}`", type_.name, method.name);
                unique(&mut names, &method.name, &entry, "name")?;
                unique(&mut orders, &method.order, &entry, "order")?;
                self.validate_method(&entry, &type_.name, method)?;
            }
        }
        Ok(())
    }

    /// `target` is the name the stub gives its target capability register.
    fn validate_method(&self, entry: &str, target: &str, method: &Method) -> Result<(), String> {
        check_identifier(entry, &method.name)?;
        // The stub's parameters: the target, then the arguments, then where results go.
        let mut parameters = BTreeMap::from([(target.to_owned(), "the target".to_owned())]);
        for argument in &method.arguments {
            let value_entry = format!("{entry}, argument `{}`", argument.name);
            check_identifier(&value_entry, &argument.name)?;
            unique(&mut parameters, &argument.name, &value_entry, "name")?;
            if let Some([min, max]) = argument.range {
                if argument.kind != Kind::Word {
                    return Err(format!("{value_entry}: only a word argument has a range"));
                }
                if min > max {
                    return Err(format!("{value_entry}: range [{min}, {max}] is empty"));
                }
            }
            if let Some(error) = &argument.range_error {
                if argument.range.is_none() {
                    return Err(format!("{value_entry}: `range_error` without a `range`"));
                }
                self.check_object_error(&value_entry, error)?;
            }
            if !argument.types.is_empty() && argument.kind != Kind::Capability {
                return Err(format!(
                    "{value_entry}: only a capability argument has `types`"
                ));
            }
            for type_name in &argument.types {
                if !self.types.iter().any(|type_| &type_.name == type_name) {
                    return Err(format!("{value_entry}: unknown type `{type_name}`"));
                }
            }
        }
        let capability_results = method.results_of(Kind::Capability).count();
        for result in &method.results {
            let value_entry = format!("{entry}, result `{}`", result.name);
            check_identifier(&value_entry, &result.name)?;
            if result.range.is_some() || result.range_error.is_some() || !result.types.is_empty() {
                return Err(format!(
                    "{value_entry}: `range`, `range_error` and `types` are for arguments"
                ));
            }
            // Strings are received into a buffer parameter and capabilities into a register
            // parameter, both named after the result (`into` when there is one capability).
            let parameter = match result.kind {
                Kind::Word => continue,
                Kind::String => result.name.clone(),
                Kind::Capability if capability_results == 1 => "into".to_owned(),
                Kind::Capability => format!("{}_into", result.name),
            };
            unique(&mut parameters, &parameter, &value_entry, "stub parameter")?;
        }
        for (values, direction) in [
            (&method.arguments, "arguments"),
            (&method.results, "results"),
        ] {
            for (kind, max) in [
                (Kind::Word, WORDS_MAX),
                (Kind::String, STRINGS_MAX),
                (Kind::Capability, CAPABILITIES_MAX),
            ] {
                let count = values.iter().filter(|value| value.kind == kind).count();
                if count > max {
                    return Err(format!(
                        "{entry}: {count} {} {direction}; an invocation carries at most {max}",
                        kind_name(kind)
                    ));
                }
            }
        }
        for error in &method.errors {
            self.check_object_error(entry, error)?;
        }
        if let Some(sum) = &method.sum_at_most {
            if sum.arguments.len() < 2 {
                return Err(format!(
                    "{entry}: `sum_at_most` names fewer than two arguments"
                ));
            }
            for name in &sum.arguments {
                match method
                    .arguments
                    .iter()
                    .find(|argument| &argument.name == name)
                {
                    Some(argument) if argument.kind != Kind::Capability => {}
                    Some(_) => {
                        return Err(format!(
                            "{entry}: `sum_at_most` names capability argument `{name}`"
                        ));
                    }
                    None => {
                        return Err(format!(
                            "{entry}: `sum_at_most` names unknown argument `{name}`"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn check_object_error(&self, entry: &str, name: &str) -> Result<(), String> {
        if self.object_errors.iter().any(|error| error.name == name) {
            Ok(())
        } else {
            Err(format!("{entry}: unknown object error `{name}`"))
        }
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Word => "word",
        Kind::String => "string",
        Kind::Capability => "capability",
    }
}

/// Records `key` for `entry`, or says which entry already has it.
pub(crate) fn unique<K: Ord + Clone + std::fmt::Display>(
    seen: &mut BTreeMap<K, String>,
    key: &K,
    entry: &str,
    what: &str,
) -> Result<(), String> {
    match seen.get(key) {
        Some(first) => Err(format!("{entry}: {what} {key} is already used by {first}")),
        None => {
            seen.insert(key.clone(), entry.to_owned());
            Ok(())
        }
    }
}

/// Lower-case Rust keywords, strict and reserved (edition 2024), which cannot name a module,
/// function or parameter.
const RUST_KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "static", "struct", "super", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Names become Rust identifiers (modules, functions, enum variants) and Markdown anchors.
fn check_identifier(entry: &str, name: &str) -> Result<(), String> {
    let mut characters = name.chars();
    let valid = characters
        .next()
        .is_some_and(|first| first.is_ascii_lowercase())
        && characters.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if RUST_KEYWORDS.contains(&name) {
        Err(format!("{entry}: name `{name}` is a Rust keyword"))
    } else if valid {
        Ok(())
    } else {
        Err(format!(
            "{entry}: name `{name}` is not lower snake case ([a-z][a-z0-9_]*)"
        ))
    }
}

/// `snake_case` to `CamelCase`.
pub fn camel_case(name: &str) -> String {
    name.split('_')
        .map(|part| {
            let mut characters = part.chars();
            match characters.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + characters.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small valid description; each test breaks it in one place.
    const VALID: &str = r#"
abi_version = 2
register_file = ["rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip", "rsp", "rflags"]
register = [
    { name = "rdi", in = "descriptor", in_doc = "D." },
    { name = "rsi", in = "code", in_doc = "C." },
    { name = "rax", out = "result", out_doc = "R." },
    { name = "rdx", in = "word0", out = "word0", in_doc = "W.", out_doc = "W." },
    { name = "r10", in = "word1", out = "word1", in_doc = "W.", out_doc = "W." },
    { name = "r8", in = "word2", out = "word2", in_doc = "W.", out_doc = "W." },
    { name = "r9", in = "word3", out = "word3", in_doc = "W.", out_doc = "W." },
    { name = "r12", in = "string_address", out = "badge", in_doc = "S.", out_doc = "B." },
    { name = "r13", in = "string_length", out = "received_length", in_doc = "S.", out_doc = "L." },
    { name = "r14", in = "buffer_address", in_doc = "B." },
    { name = "r15", in = "buffer_capacity", in_doc = "B." },
    { name = "rcx", out = "clobbered", out_doc = "C." },
    { name = "r11", out = "clobbered", out_doc = "C." },
]
invocation_kind = [
    { name = "call", value = 0, doc = "C." },
    { name = "return", value = 1, doc = "R." },
    { name = "send", value = 2, doc = "S." },
]
descriptor_field = [
    { name = "target", first_bit = 0, bits = 4, doc = "T." },
    { name = "kind", first_bit = 4, bits = 2, doc = "K." },
    { name = "send_registers", first_bit = 8, bits = 16, doc = "S." },
    { name = "send_count", first_bit = 24, bits = 3, doc = "S." },
    { name = "receive_registers", first_bit = 32, bits = 16, doc = "R." },
    { name = "receive_count", first_bit = 48, bits = 3, doc = "R." },
    { name = "resume_register", first_bit = 52, bits = 4, doc = "R." },
    { name = "receives_resume", first_bit = 56, bits = 1, doc = "R." },
]
descriptor_example = [
    { doc = "E.", target = 12, kind = "return", receive = [9], resume = 12 },
]
keeper_message = [{ name = "exception", code = 1, doc = "E.", words = ["V."] }]
run_state_layout = { code_bits = [0, 7], flag_bits = [8, 15], fault_vector_bits = [16, 23] }
run_state = [{ name = "runnable", code = 1, doc = "R." }]
run_state_flag = [{ name = "waiting_for_keeper", bit = 8, doc = "W." }]

[[invocation_error]]
name = "void"
offset = 0
doc = "Void."

[[object_error]]
name = "invalid_order"
code = 1
doc = "No such order."

[[object_error]]
name = "out_of_range"
code = 2
doc = "Out of range."

[[object_error]]
name = "wrong_type"
code = 3
doc = "Wrong type."

[[common_method]]
name = "identify"
order = 0
doc = "Identifies."
results = [{ name = "type_code", kind = "word", doc = "Type." }]

[[type]]
name = "node"
code = 3
doc = "A node."

[[type.method]]
name = "fetch"
order = 1
doc = "Fetches."
arguments = [{ name = "slot", kind = "word", doc = "Slot.", range = [0, 31] }]
results = [{ name = "fetched", kind = "capability", doc = "Fetched." }]

[[type]]
name = "start"
code = 6
doc = "A start capability."
dispatch = false
"#;

    fn error_after(from: &str, to: &str) -> String {
        assert!(VALID.contains(from), "fixture lacks {from:?}");
        Description::parse(&VALID.replacen(from, to, 1)).expect_err("invalid description")
    }

    #[test]
    fn the_fixture_is_valid() {
        let description = Description::parse(VALID).expect("valid");
        assert_eq!(description.dispatched_types().count(), 1);
    }

    #[test]
    fn duplicate_names_and_codes_name_both_entries() {
        assert_eq!(
            error_after("name = \"out_of_range\"", "name = \"invalid_order\""),
            "object error `invalid_order`: name invalid_order is already used by object error `invalid_order`"
        );
        assert_eq!(
            error_after("name = \"out_of_range\"", "name = \"void\""),
            "object error `void`: name void is already used by invocation error `void`"
        );
        assert_eq!(
            error_after("code = 2", "code = 1"),
            "object error `out_of_range`: code 1 is already used by object error `invalid_order`"
        );
        assert_eq!(
            error_after("code = 6", "code = 3"),
            "type `start`: code 3 is already used by type `node`"
        );
        assert_eq!(
            error_after("name = \"start\"", "name = \"node\""),
            "type `node`: name node is already used by type `node`"
        );
        assert_eq!(
            error_after("order = 1", "order = 0"),
            "type `node`, method `fetch`: order 0 is already used by common method `identify`"
        );
        assert_eq!(
            error_after("name = \"fetch\"", "name = \"identify\""),
            "type `node`, method `identify`: name identify is already used by common method `identify`"
        );
    }

    #[test]
    fn unknown_references_are_named() {
        assert_eq!(
            error_after(
                "range = [0, 31] }",
                "range = [0, 31], range_error = \"invalid_slot\" }"
            ),
            "type `node`, method `fetch`, argument `slot`: unknown object error `invalid_slot`"
        );
        assert_eq!(
            error_after(
                "range = [0, 31] }",
                "range = [0, 31] }, { name = \"space\", kind = \"capability\", doc = \"S.\", types = [\"space\"] }"
            ),
            "type `node`, method `fetch`, argument `space`: unknown type `space`"
        );
        assert_eq!(
            error_after(
                "doc = \"Fetches.\"",
                "doc = \"Fetches.\"\nerrors = [\"busy\"]"
            ),
            "type `node`, method `fetch`: unknown object error `busy`"
        );
        assert_eq!(
            error_after(
                "doc = \"Fetches.\"",
                "doc = \"Fetches.\"\nsum_at_most = { arguments = [\"slot\", \"offset\"], max = 4096 }"
            ),
            "type `node`, method `fetch`: `sum_at_most` names unknown argument `offset`"
        );
        assert_eq!(
            error_after(
                "doc = \"Fetches.\"",
                "doc = \"Fetches.\"\nsum_at_most = { arguments = [\"slot\"], max = 4096 }"
            ),
            "type `node`, method `fetch`: `sum_at_most` names fewer than two arguments"
        );
    }

    #[test]
    fn values_that_do_not_fit_are_refused() {
        assert_eq!(
            error_after("range = [0, 31]", "range = [31, 0]"),
            "type `node`, method `fetch`, argument `slot`: range [31, 0] is empty"
        );
        assert_eq!(
            error_after(
                "kind = \"word\", doc = \"Slot.\"",
                "kind = \"string\", doc = \"Slot.\""
            ),
            "type `node`, method `fetch`, argument `slot`: only a word argument has a range"
        );
        let five_words = (0..5)
            .map(|index| format!("{{ name = \"w{index}\", kind = \"word\", doc = \"W.\" }}"))
            .collect::<Vec<_>>()
            .join(", ");
        assert_eq!(
            error_after(
                "results = [{ name = \"type_code\", kind = \"word\", doc = \"Type.\" }]",
                &format!("results = [{five_words}]")
            ),
            "common method `identify`: 5 word results; an invocation carries at most 4"
        );
        assert_eq!(
            error_after("name = \"slot\"", "name = \"node\""),
            "type `node`, method `fetch`, argument `node`: name node is already used by the target"
        );
        assert_eq!(
            error_after("name = \"fetched\"", "name = \"Fetched\""),
            "type `node`, method `fetch`, result `Fetched`: name `Fetched` is not lower snake case ([a-z][a-z0-9_]*)"
        );
        assert_eq!(
            error_after("name = \"slot\"", "name = \"type\""),
            "type `node`, method `fetch`, argument `type`: name `type` is a Rust keyword"
        );
        assert_eq!(
            error_after("code = 1\n", "code = 0\n"),
            "object error `invalid_order`: code 0 is not in 1..2^63 (0 is success)"
        );
        assert_eq!(
            error_after(
                "dispatch = false",
                "dispatch = false\n[[type.method]]\nname = \"call\"\norder = 1\ndoc = \"C.\""
            ),
            "type `start`: has methods but `dispatch = false` (its invocations are not decoded)"
        );
    }

    #[test]
    fn the_example_encodes_by_the_described_layout() {
        let description = Description::parse(VALID).expect("valid");
        let invoke = description.invoke();
        // Target 12, kind 1, one register received (9), resume into 12.
        assert_eq!(
            invoke.encode(&description.descriptor_examples[0]),
            0x1c1_0009_0000_001c
        );
        assert_eq!(invoke.defined_bits(), 0x1f7_ffff_07ff_ff3f);
    }

    #[test]
    fn the_system_call_description_is_checked() {
        assert_eq!(
            error_after("first_bit = 52, bits = 4", "first_bit = 50, bits = 4"),
            "descriptor field `resume_register`: overlaps another field"
        );
        assert_eq!(
            error_after(
                "{ name = \"receives_resume\", first_bit = 56, bits = 1, doc = \"R.\" },",
                ""
            ),
            "descriptor field `receives_resume` is missing"
        );
        assert_eq!(
            error_after("first_bit = 24, bits = 3", "first_bit = 24, bits = 2"),
            "descriptor field `send_count`: cannot count 4 capabilities"
        );
        assert_eq!(
            error_after(
                "{ name = \"rax\", out = \"result\", out_doc = \"R.\" },",
                ""
            ),
            "no register carries role out `result`"
        );
        assert_eq!(
            error_after(
                "name = \"rcx\", out = \"clobbered\"",
                "name = \"rcx\", out = \"badge\""
            ),
            "register `rcx`: role out badge is already used by register `r12`"
        );
        assert_eq!(
            error_after(
                "{ name = \"rsi\", in = \"code\"",
                "{ name = \"rsp\", in = \"code\""
            ),
            "register `rsp`: not a general register a program can set"
        );
        assert_eq!(
            error_after("resume = 12 }", "resume = 16 }"),
            "descriptor example 1: 16 is not a capability register"
        );
        assert_eq!(
            error_after("kind = \"return\", receive", "kind = \"reply\", receive"),
            "descriptor example 1: unknown kind `reply`"
        );
        assert_eq!(
            error_after("keeper\", bit = 8,", "keeper\", bit = 16,"),
            "run state flag `waiting_for_keeper`: bit 16 is outside flag_bits [8, 15]"
        );
        assert_eq!(
            error_after("code = 1, doc = \"R.\"", "code = 256, doc = \"R.\""),
            "run state `runnable`: code 256 is not in 1..=255"
        );
    }

    #[test]
    fn syntax_errors_say_where_and_what_on_one_line() {
        let error = error_after("code = 6", "code = \"six\"");
        assert!(!error.contains('\n'), "{error}");
        assert!(error.starts_with("TOML parse error at line"), "{error}");
        assert!(
            error.ends_with("invalid type: string \"six\", expected u64"),
            "{error}"
        );
    }

    #[test]
    fn camel_case_joins_words() {
        assert_eq!(camel_case("make_space"), "MakeSpace");
        assert_eq!(camel_case("word0"), "Word0");
    }
}
