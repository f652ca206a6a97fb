//! `docs/interface.md` is what a programmer follows: every descriptor example in it, decoded
//! by the kernel's decoder, must mean what the line says, and its table of descriptor bits
//! must cover exactly the bits the decoder accepts (bit 56, the resume capability, included).

use holdfast_abi::descriptor::{Descriptor, Kind, Registers};
use std::collections::BTreeSet;

const REFERENCE: &str = include_str!("../../../docs/interface.md");

/// The rows of the Markdown table that follows `heading`, split into trimmed cells
/// (the header and separator rows left out).
fn table_after(heading: &str) -> Vec<Vec<String>> {
    let start = REFERENCE
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/interface.md has no `{heading}`"));
    REFERENCE[start..]
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

fn registers(cell: &str) -> Vec<u8> {
    if cell == "—" {
        return Vec::new();
    }
    cell.split(", ")
        .map(|index| {
            index
                .parse()
                .unwrap_or_else(|_| panic!("register {index:?}"))
        })
        .collect()
}

fn parse_hex(cell: &str) -> u64 {
    let digits = cell
        .trim_matches('`')
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("{cell:?} is not hex"))
        .replace('_', "");
    u64::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("{cell:?} is not hex"))
}

/// The descriptor's nonzero fields as the reference lists them, by the generated layout.
fn fields_of(word: u64) -> String {
    use holdfast_abi::interface::descriptor_field as field;
    [
        ("target", field::TARGET_SHIFT, field::TARGET_MASK),
        ("kind", field::KIND_SHIFT, field::KIND_MASK),
        (
            "send_registers",
            field::SEND_REGISTERS_SHIFT,
            field::SEND_REGISTERS_MASK,
        ),
        (
            "send_count",
            field::SEND_COUNT_SHIFT,
            field::SEND_COUNT_MASK,
        ),
        (
            "receive_registers",
            field::RECEIVE_REGISTERS_SHIFT,
            field::RECEIVE_REGISTERS_MASK,
        ),
        (
            "receive_count",
            field::RECEIVE_COUNT_SHIFT,
            field::RECEIVE_COUNT_MASK,
        ),
        (
            "resume_register",
            field::RESUME_REGISTER_SHIFT,
            field::RESUME_REGISTER_MASK,
        ),
        (
            "receives_resume",
            field::RECEIVES_RESUME_SHIFT,
            field::RECEIVES_RESUME_MASK,
        ),
    ]
    .into_iter()
    .map(|(name, shift, mask)| (name, (word >> shift) & mask))
    .filter(|&(_, value)| value != 0)
    .map(|(name, value)| match name {
        "send_registers" | "receive_registers" => format!("{name}={value:#x}"),
        _ => format!("{name}={value}"),
    })
    .collect::<Vec<_>>()
    .join(" ")
}

#[test]
fn every_documented_descriptor_decodes_to_its_documented_meaning() {
    let rows = table_after("### Descriptor examples");
    let mut kinds = BTreeSet::new();
    let (mut sending, mut receiving, mut resuming) = (0, 0, 0);
    for row in &rows {
        let [word, fields, target, kind, sends, receives, resume, _doc] = row.as_slice() else {
            panic!("example row with {} cells: {row:?}", row.len());
        };
        assert_eq!(fields_of(parse_hex(word)), *fields, "{word}: fields");
        let decoded = Descriptor::decode(parse_hex(word))
            .unwrap_or_else(|_| panic!("{word} is refused by the kernel's decoder"));
        assert_eq!(decoded.target.to_string(), *target, "{word}: target");
        let kind_name = match decoded.kind {
            Kind::Call => "call",
            Kind::Return => "return",
            Kind::Send => "send",
        };
        assert_eq!(kind_name, kind, "{word}: kind");
        assert_eq!(
            decoded.send.iter().collect::<Vec<_>>(),
            registers(sends),
            "{word}: sends"
        );
        assert_eq!(
            decoded.receive.iter().collect::<Vec<_>>(),
            registers(receives),
            "{word}: receives"
        );
        let resume_documented = (resume != "—").then(|| resume.parse::<u8>().expect("register"));
        assert_eq!(decoded.resume, resume_documented, "{word}: resume into");
        kinds.insert(kind_name);
        sending += usize::from(!decoded.send.is_empty());
        receiving += usize::from(!decoded.receive.is_empty());
        resuming += usize::from(decoded.resume.is_some());
    }
    // The examples show every kind, and capabilities sent, received and a resume received.
    assert_eq!(kinds.len(), 3, "kinds shown: {kinds:?}");
    assert!(sending > 0 && receiving > 0 && resuming > 0, "{rows:?}");
}

#[test]
fn the_documented_bits_are_the_bits_the_decoder_accepts() {
    let mut documented = 0u64;
    for row in table_after("### The descriptor (`rdi`)") {
        let (first, last) = match row[0].split_once("..=") {
            Some((first, last)) => (first.parse::<u32>().unwrap(), last.parse::<u32>().unwrap()),
            None => {
                let bit = row[0].parse::<u32>().unwrap();
                (bit, bit)
            }
        };
        let bits = (u64::MAX >> (63 - (last - first))) << first;
        assert_eq!(documented & bits, 0, "{row:?} overlaps another field");
        documented |= bits;
    }
    assert_ne!(
        documented & 1 << 56,
        0,
        "bit 56 (a resume capability received) is documented"
    );
    for bit in 0..64 {
        let word = 1u64 << bit;
        if documented & word == 0 {
            assert!(
                Descriptor::decode(word).is_err(),
                "undocumented bit {bit} is accepted"
            );
        }
    }
    // Every documented bit is accepted in some descriptor: the one with all fields at their
    // largest valid values (four registers 15 each way, resume into 15).
    let all = Descriptor {
        target: 15,
        kind: Kind::Send,
        send: Registers::new(&[15; 4]).unwrap(),
        receive: Registers::new(&[15; 4]).unwrap(),
        resume: Some(15),
    }
    .encode();
    assert!(Descriptor::decode(all).is_ok());
    // Kind 3 and counts above 4 are refused: the kind's and the counts' low bits are
    // accepted in a return and in counts of 3.
    let (low_kind, counts_of_three) = (1 << 4, 3 << 24 | 0xfff << 8 | 3 << 48 | 0xfff << 32);
    assert!(Descriptor::decode(low_kind).is_ok() && Descriptor::decode(counts_of_three).is_ok());
    assert_eq!(all | low_kind | counts_of_three, documented);
}

#[test]
fn results_are_documented_in_rax() {
    let rows = table_after("## System call `invoke`");
    let rax = rows
        .iter()
        .find(|row| row[0] == "`rax`")
        .expect("a row for rax");
    assert!(rax[2].starts_with("The result code"), "{rax:?}");
    assert!(
        rows.iter()
            .all(|row| row[0] == "`rax`" || !row[2].contains("result code")),
        "only rax carries the result code: {rows:?}"
    );
}
