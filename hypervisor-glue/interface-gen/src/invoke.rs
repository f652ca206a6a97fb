//! The system call itself as `interface.toml` describes it: which register carries what, the
//! descriptor's bit layout with worked examples, keeper messages and the run states a
//! process's root node holds. Validated here, once, like the rest of the description.

use crate::description::{CAPABILITIES_MAX, unique};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Registers a program may hand to `syscall` (not rsp, which the kernel does not take).
const GENERAL_REGISTERS: &[&str] = &[
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15",
];
/// What `syscall` itself overwrites: the return address and rflags.
const SYSCALL_CLOBBERS: &[&str] = &["rcx", "r11"];

const IN_ROLES: &[&str] = &[
    "descriptor",
    "code",
    "word0",
    "word1",
    "word2",
    "word3",
    "string_address",
    "string_length",
    "buffer_address",
    "buffer_capacity",
];
const OUT_ROLES: &[&str] = &[
    "result",
    "word0",
    "word1",
    "word2",
    "word3",
    "badge",
    "received_length",
];
pub const CLOBBERED: &str = "clobbered";

/// The descriptor's fields, by the names the generators and the kernel's decoder use.
const DESCRIPTOR_FIELDS: &[&str] = &[
    "target",
    "kind",
    "send_registers",
    "send_count",
    "receive_registers",
    "receive_count",
    "resume_register",
    "receives_resume",
];
const INVOCATION_KINDS: &[&str] = &["call", "return", "send"];
/// Bits that name one of the 16 capability registers.
const REGISTER_INDEX_BITS: u32 = 4;
const CAPABILITY_REGISTER_COUNT: u8 = 16;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    pub name: String,
    #[serde(rename = "in")]
    pub input: Option<String>,
    #[serde(rename = "out")]
    pub output: Option<String>,
    pub in_doc: Option<String>,
    pub out_doc: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvocationKind {
    pub name: String,
    pub value: u64,
    pub doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorField {
    pub name: String,
    pub first_bit: u32,
    pub bits: u32,
    pub doc: String,
}

impl DescriptorField {
    /// The field's mask once shifted down to bit 0.
    pub fn mask(&self) -> u64 {
        u64::MAX >> (64 - self.bits)
    }

    /// The bits the field covers in the descriptor.
    pub fn bits_covered(&self) -> u64 {
        self.mask() << self.first_bit
    }

    pub fn last_bit(&self) -> u32 {
        self.first_bit + self.bits - 1
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorExample {
    pub doc: String,
    pub target: u8,
    pub kind: String,
    #[serde(default)]
    pub send: Vec<u8>,
    #[serde(default)]
    pub receive: Vec<u8>,
    pub resume: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeeperMessage {
    pub name: String,
    pub code: u64,
    pub doc: String,
    pub words: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStateLayout {
    pub code_bits: [u32; 2],
    pub flag_bits: [u32; 2],
    pub fault_vector_bits: [u32; 2],
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunState {
    pub name: String,
    pub code: u64,
    pub doc: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStateFlag {
    pub name: String,
    pub bit: u32,
    pub doc: String,
}

/// The system-call part of the description.
#[derive(Debug)]
pub struct Invoke<'a> {
    pub register_file: &'a [String],
    pub registers: &'a [Register],
    pub kinds: &'a [InvocationKind],
    pub fields: &'a [DescriptorField],
}

impl Invoke<'_> {
    pub fn field(&self, name: &str) -> &DescriptorField {
        self.fields
            .iter()
            .find(|field| field.name == name)
            .expect("validated: every descriptor field is described")
    }

    pub fn kind_value(&self, name: &str) -> Option<u64> {
        self.kinds
            .iter()
            .find(|kind| kind.name == name)
            .map(|kind| kind.value)
    }

    /// Where `register` lies in the register file, in words.
    pub fn register_file_index(&self, register: &str) -> usize {
        self.register_file
            .iter()
            .position(|name| name == register)
            .expect("validated: every register is in the register file")
    }

    /// The register whose `in` (or `out`) role is `role`.
    pub fn register_in(&self, role: &str) -> Option<&Register> {
        self.registers
            .iter()
            .find(|register| register.input.as_deref() == Some(role))
    }

    /// The descriptor word an example means, by the described layout.
    pub fn encode(&self, example: &DescriptorExample) -> u64 {
        let packed = |registers: &[u8]| {
            registers
                .iter()
                .enumerate()
                .fold(0u64, |word, (position, &index)| {
                    word | u64::from(index) << (REGISTER_INDEX_BITS as usize * position)
                })
        };
        let put = |name: &str, value: u64| value << self.field(name).first_bit;
        put("target", u64::from(example.target))
            | put(
                "kind",
                self.kind_value(&example.kind).expect("validated kind"),
            )
            | put("send_registers", packed(&example.send))
            | put("send_count", example.send.len() as u64)
            | put("receive_registers", packed(&example.receive))
            | put("receive_count", example.receive.len() as u64)
            | example.resume.map_or(0, |register| {
                put("resume_register", u64::from(register)) | put("receives_resume", 1)
            })
    }

    /// Every bit some field covers.
    pub fn defined_bits(&self) -> u64 {
        self.fields
            .iter()
            .fold(0, |bits, field| bits | field.bits_covered())
    }

    pub fn validate(&self, examples: &[DescriptorExample]) -> Result<(), String> {
        self.validate_registers()?;
        self.validate_fields()?;
        let kind_field = self.field("kind");
        let mut names = BTreeMap::new();
        let mut values = BTreeMap::new();
        for kind in self.kinds {
            let entry = format!("invocation kind `{}`", kind.name);
            if !INVOCATION_KINDS.contains(&kind.name.as_str()) {
                return Err(format!(
                    "{entry}: not one of {}",
                    INVOCATION_KINDS.join(", ")
                ));
            }
            unique(&mut names, &kind.name, &entry, "name")?;
            unique(&mut values, &kind.value, &entry, "value")?;
            if kind.value > kind_field.mask() {
                return Err(format!(
                    "{entry}: value {} does not fit the {}-bit `kind` field",
                    kind.value, kind_field.bits
                ));
            }
        }
        for name in INVOCATION_KINDS {
            if !names.contains_key(*name) {
                return Err(format!("invocation kind `{name}` is missing"));
            }
        }
        for (index, example) in examples.iter().enumerate() {
            let entry = format!("descriptor example {}", index + 1);
            if self.kind_value(&example.kind).is_none() {
                return Err(format!("{entry}: unknown kind `{}`", example.kind));
            }
            let registers = example
                .send
                .iter()
                .chain(&example.receive)
                .chain(&example.resume)
                .chain([&example.target]);
            if let Some(index) = registers
                .into_iter()
                .find(|&&index| index >= CAPABILITY_REGISTER_COUNT)
            {
                return Err(format!("{entry}: {index} is not a capability register"));
            }
            if example.send.len() > CAPABILITIES_MAX || example.receive.len() > CAPABILITIES_MAX {
                return Err(format!(
                    "{entry}: an invocation sends and receives at most {CAPABILITIES_MAX} capabilities"
                ));
            }
        }
        Ok(())
    }

    fn validate_registers(&self) -> Result<(), String> {
        let mut names = BTreeMap::new();
        let mut inputs = BTreeMap::new();
        let mut outputs = BTreeMap::new();
        for register in self.registers {
            let entry = format!("register `{}`", register.name);
            if !GENERAL_REGISTERS.contains(&register.name.as_str()) {
                return Err(format!("{entry}: not a general register a program can set"));
            }
            unique(&mut names, &register.name, &entry, "name")?;
            if !self.register_file.contains(&register.name) {
                return Err(format!("{entry}: not in `register_file`"));
            }
            if let Some(role) = &register.input {
                if !IN_ROLES.contains(&role.as_str()) {
                    return Err(format!("{entry}: unknown role in `{role}`"));
                }
                unique(&mut inputs, role, &entry, "role in")?;
            }
            if let Some(role) = &register.output
                && role != CLOBBERED
            {
                if !OUT_ROLES.contains(&role.as_str()) {
                    return Err(format!("{entry}: unknown role out `{role}`"));
                }
                unique(&mut outputs, role, &entry, "role out")?;
            }
            if register.input.is_some() != register.in_doc.is_some()
                || register.output.is_some() != register.out_doc.is_some()
            {
                return Err(format!(
                    "{entry}: `in_doc` goes with `in`, `out_doc` with `out`"
                ));
            }
            let clobbered_by_syscall = SYSCALL_CLOBBERS.contains(&register.name.as_str());
            if clobbered_by_syscall
                && (register.input.is_some() || register.output.as_deref() != Some(CLOBBERED))
            {
                return Err(format!(
                    "{entry}: `syscall` overwrites it, so it carries nothing and is `clobbered`"
                ));
            }
        }
        for role in IN_ROLES {
            if !inputs.contains_key(*role) {
                return Err(format!("no register carries role in `{role}`"));
            }
        }
        for role in OUT_ROLES {
            if !outputs.contains_key(*role) {
                return Err(format!("no register carries role out `{role}`"));
            }
        }
        for name in SYSCALL_CLOBBERS {
            if !names.contains_key(*name) {
                return Err(format!(
                    "register `{name}` is missing (`syscall` clobbers it)"
                ));
            }
        }
        Ok(())
    }

    fn validate_fields(&self) -> Result<(), String> {
        let mut names = BTreeMap::new();
        let mut covered = 0u64;
        for field in self.fields {
            let entry = format!("descriptor field `{}`", field.name);
            if !DESCRIPTOR_FIELDS.contains(&field.name.as_str()) {
                return Err(format!(
                    "{entry}: not one of {}",
                    DESCRIPTOR_FIELDS.join(", ")
                ));
            }
            unique(&mut names, &field.name, &entry, "name")?;
            if field.bits == 0 || field.first_bit + field.bits > 64 {
                return Err(format!(
                    "{entry}: bits {} from {} are not within 0..64",
                    field.bits, field.first_bit
                ));
            }
            if covered & field.bits_covered() != 0 {
                return Err(format!("{entry}: overlaps another field"));
            }
            covered |= field.bits_covered();
        }
        for name in DESCRIPTOR_FIELDS {
            if !names.contains_key(*name) {
                return Err(format!("descriptor field `{name}` is missing"));
            }
        }
        // What the decoder's packing of register lists and counts takes for granted.
        let list_bits = REGISTER_INDEX_BITS * CAPABILITIES_MAX as u32;
        for (name, bits) in [
            ("target", REGISTER_INDEX_BITS),
            ("resume_register", REGISTER_INDEX_BITS),
            ("send_registers", list_bits),
            ("receive_registers", list_bits),
            ("receives_resume", 1),
        ] {
            if self.field(name).bits != bits {
                return Err(format!("descriptor field `{name}`: must be {bits} bits"));
            }
        }
        for name in ["send_count", "receive_count"] {
            if self.field(name).mask() < CAPABILITIES_MAX as u64 {
                return Err(format!(
                    "descriptor field `{name}`: cannot count {CAPABILITIES_MAX} capabilities"
                ));
            }
        }
        Ok(())
    }
}

/// The keeper messages, run states and flags.
pub fn validate_keepers_and_run_states(
    keeper_messages: &[KeeperMessage],
    layout: Option<&RunStateLayout>,
    run_states: &[RunState],
    run_state_flags: &[RunStateFlag],
) -> Result<(), String> {
    let mut names = BTreeMap::new();
    let mut codes = BTreeMap::new();
    for message in keeper_messages {
        let entry = format!("keeper message `{}`", message.name);
        unique(&mut names, &message.name, &entry, "name")?;
        unique(&mut codes, &message.code, &entry, "code")?;
        if message.words.len() > crate::description::WORDS_MAX {
            return Err(format!("{entry}: more words than an invocation carries"));
        }
    }
    if run_states.is_empty() && run_state_flags.is_empty() {
        return Ok(());
    }
    let Some(layout) = layout else {
        return Err("run states without a `run_state_layout`".to_owned());
    };
    let ranges = [
        ("code_bits", layout.code_bits),
        ("flag_bits", layout.flag_bits),
        ("fault_vector_bits", layout.fault_vector_bits),
    ];
    for (index, (name, [first, last])) in ranges.iter().enumerate() {
        if first > last || *last >= 64 {
            return Err(format!(
                "run_state_layout: {name} [{first}, {last}] is not a range within 0..64"
            ));
        }
        for (other, [other_first, other_last]) in &ranges[index + 1..] {
            if first <= other_last && other_first <= last {
                return Err(format!("run_state_layout: {name} overlaps {other}"));
            }
        }
    }
    let code_max = (1u64 << (layout.code_bits[1] - layout.code_bits[0] + 1)) - 1;
    let mut names = BTreeMap::new();
    let mut codes = BTreeMap::new();
    for state in run_states {
        let entry = format!("run state `{}`", state.name);
        unique(&mut names, &state.name, &entry, "name")?;
        unique(&mut codes, &state.code, &entry, "code")?;
        if state.code == 0 || state.code > code_max {
            return Err(format!(
                "{entry}: code {} is not in 1..={code_max}",
                state.code
            ));
        }
    }
    let mut bits = BTreeMap::new();
    for flag in run_state_flags {
        let entry = format!("run state flag `{}`", flag.name);
        unique(&mut names, &flag.name, &entry, "name")?;
        unique(&mut bits, &flag.bit, &entry, "bit")?;
        if !(layout.flag_bits[0]..=layout.flag_bits[1]).contains(&flag.bit) {
            return Err(format!(
                "{entry}: bit {} is outside flag_bits {:?}",
                flag.bit, layout.flag_bits
            ));
        }
    }
    Ok(())
}
