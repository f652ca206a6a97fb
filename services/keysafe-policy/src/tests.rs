extern crate std;
use std::string::String;
use std::vec::Vec;

use crate::audit::{self, AuditError, Event, Record};
use crate::{COMPARTMENTS_MAX, Compartments, Name, REFUSALS_LOGGED_MAX, Refusal, kind_bit};

const PAGE: u64 = 2;
const NODE: u64 = 3;
const START: u64 = 6;

fn name(text: &str) -> Name {
    Name::parse(text.as_bytes()).expect("a good name")
}

#[test]
fn names_are_short_printable_and_without_spaces() {
    assert_eq!(Name::parse(b""), Err(Refusal::BadName));
    assert_eq!(Name::parse(b"a b"), Err(Refusal::BadName));
    assert_eq!(Name::parse(&[b'x'; 17]), Err(Refusal::BadName));
    assert_eq!(Name::parse(b"tenant\x01"), Err(Refusal::BadName));
    assert_eq!(name("sixteen-letters!").as_bytes(), b"sixteen-letters!");
}

#[test]
fn the_policy_allows_only_the_kinds_it_names_in_the_direction_it_names() {
    let mut compartments = Compartments::empty();
    let a = compartments.create(name("A")).unwrap();
    let b = compartments.create(name("B")).unwrap();
    assert_eq!(compartments.create(name("A")), Err(Refusal::NameTaken));
    assert_eq!(compartments.check(a, b, PAGE), Err(Refusal::Forbidden), "nothing is allowed by default");
    compartments.set_policy(a, b, kind_bit(PAGE) | kind_bit(START)).unwrap();
    assert_eq!(compartments.check(a, b, PAGE), Ok(()));
    assert_eq!(compartments.check(a, b, START), Ok(()));
    assert_eq!(compartments.check(a, b, NODE), Err(Refusal::Forbidden));
    assert_eq!(compartments.check(b, a, PAGE), Err(Refusal::Forbidden), "the policy has a direction");
    assert_eq!(compartments.check(a, b, 99), Err(Refusal::Forbidden), "a code no kind has");
}

#[test]
fn a_revoked_compartment_loses_its_policy_and_its_badge_names_no_successor() {
    let mut compartments = Compartments::empty();
    let a = compartments.create(name("A")).unwrap();
    let b = compartments.create(name("B")).unwrap();
    compartments.set_policy(a, b, kind_bit(PAGE)).unwrap();
    compartments.set_policy(b, a, kind_bit(PAGE)).unwrap();
    let old_badge = compartments.badge(a);
    assert_eq!(compartments.from_badge(old_badge), Ok(a));
    let revoked = compartments.revoke(a).unwrap();
    assert_eq!(revoked.name, name("A"));
    assert_eq!(compartments.revoke(a), Err(Refusal::NoSuchCompartment));
    assert_eq!(compartments.check(b, a, PAGE), Err(Refusal::NoSuchCompartment));
    assert_eq!(compartments.from_badge(old_badge), Err(Refusal::NoSuchCompartment));
    // The entry is made again: same number, new generation, no policy carried over.
    let again = compartments.create(name("A")).unwrap();
    assert_eq!(again, a);
    assert_eq!(compartments.from_badge(old_badge), Err(Refusal::NoSuchCompartment));
    assert_eq!(compartments.from_badge(compartments.badge(again)), Ok(again));
    assert_eq!(compartments.check(b, again, PAGE), Err(Refusal::Forbidden));
    assert_eq!(compartments.from_badge(0), Err(Refusal::NoSuchCompartment), "badge 0 is the control capability");
}

#[test]
fn the_table_is_bounded_and_refuses_beyond_it() {
    let mut compartments = Compartments::empty();
    for index in 0..COMPARTMENTS_MAX {
        compartments.create(name(&std::format!("c{index}"))).unwrap();
    }
    assert_eq!(compartments.create(name("one-more")), Err(Refusal::TooManyCompartments));
    assert_eq!(compartments.set_policy(COMPARTMENTS_MAX, 0, 1), Err(Refusal::NoSuchCompartment));
    assert_eq!(compartments.from_badge(u64::from(u32::MAX) << 16 | 0xffff), Err(Refusal::NoSuchCompartment));
}

fn granted(sequence: u64) -> Record {
    Record {
        event: Event::Granted,
        type_code: PAGE as u8,
        code: 0,
        from: 0,
        to: 1,
        sequence,
        boot: 3,
        from_name: name("A"),
        to_name: name("B"),
        detail: 0,
    }
}

fn line(record: &Record) -> String {
    let mut bytes = Vec::new();
    record.render(&mut |part| bytes.extend_from_slice(part));
    String::from_utf8(bytes).unwrap()
}

#[test]
fn records_round_trip_and_render_as_lines() {
    let record = granted(7);
    assert_eq!(Record::decode(&record.encode(), 7), Ok(record));
    assert_eq!(line(&record), "7 boot 3 granted A -> B page");
    let refused = Record { event: Event::Refused, type_code: NODE as u8, code: 401, ..granted(8) };
    assert_eq!(line(&refused), "8 boot 3 refused A -> B node code 401");
    let revoked = Record { event: Event::Revoked, to: audit::NONE, to_name: Name::EMPTY, detail: 2, ..granted(9) };
    assert_eq!(Record::decode(&revoked.encode(), 9), Ok(revoked));
    assert_eq!(line(&revoked), "9 boot 3 revoked A generation 2");
    let policy = Record { event: Event::Policy, detail: (kind_bit(PAGE) | kind_bit(START)), ..granted(10) };
    assert_eq!(line(&policy), "10 boot 3 policy A -> B kinds page,start");
    assert!(record.involves(&name("A")) && record.involves(&name("B")) && !record.involves(&name("C")));
    assert!(!revoked.involves(&Name::EMPTY) || revoked.from_name == Name::EMPTY);
}

#[test]
fn every_corruption_of_a_record_is_an_error_not_a_panic() {
    let bytes = granted(5).encode();
    for byte in 0..audit::RECORD_BYTES {
        for bit in 0..8 {
            let mut corrupt = bytes;
            corrupt[byte] ^= 1 << bit;
            assert_eq!(Record::decode(&corrupt, 5), Err(AuditError::BadChecksum), "byte {byte} bit {bit}");
        }
    }
    assert_eq!(Record::decode(&bytes, 6), Err(AuditError::Misplaced { expected: 6, found: 5 }));
    assert_eq!(Record::decode(&[0; audit::RECORD_BYTES], 0), Err(AuditError::BadChecksum), "a record never written");
    // A well-checksummed record of another version, or with an unknown event, or a bad name.
    let reseal = |mut bytes: [u8; 64]| {
        let checksum = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI).checksum(&bytes[..60]);
        bytes[60..].copy_from_slice(&checksum.to_le_bytes());
        bytes
    };
    let mut other = bytes;
    other[0] = 2;
    assert_eq!(Record::decode(&reseal(other), 5), Err(AuditError::BadVersion(2)));
    let mut event = bytes;
    event[2] = 77;
    assert_eq!(Record::decode(&reseal(event), 5), Err(AuditError::BadEvent(77)));
    let mut gap = bytes;
    gap[24] = 0; // "A" gone, then nothing: an empty name is allowed; a byte after a 0 is not
    gap[25] = b'x';
    assert_eq!(Record::decode(&reseal(gap), 5), Err(AuditError::BadName));
    for error in [AuditError::BadHeader, AuditError::BadChecksum, AuditError::BadName] {
        assert!(!error.description().is_empty());
    }
}

#[test]
fn the_header_counts_records_within_the_log() {
    let log_bytes = 4 * 4096;
    assert_eq!(audit::capacity(log_bytes), 255);
    assert_eq!(audit::decode_header(&[0; 16], log_bytes), Ok(0));
    assert_eq!(audit::decode_header(&audit::encode_header(255), log_bytes), Ok(255));
    assert_eq!(audit::decode_header(&audit::encode_header(256), log_bytes), Err(AuditError::BadHeader));
    let mut foreign = audit::encode_header(1);
    foreign[0] ^= 1;
    assert_eq!(audit::decode_header(&foreign, log_bytes), Err(AuditError::BadHeader));
    assert_eq!(audit::decode_header(&[0; 4], log_bytes), Err(AuditError::BadHeader));
    assert_eq!(audit::record_offset(0), 64);
    assert_eq!(audit::kind_from_name(b"start"), Some(START));
    assert_eq!(audit::kind_from_name(b"nothing"), None);
}

#[test]
fn the_last_records_are_kept_for_revocations() {
    let log_bytes = 4 * 4096;
    let capacity = audit::capacity(log_bytes);
    let reserved = COMPARTMENTS_MAX as u64;
    assert!(audit::has_room(Event::Granted, capacity - reserved - 1, log_bytes));
    assert!(!audit::has_room(Event::Granted, capacity - reserved, log_bytes));
    assert!(!audit::has_room(Event::Created, capacity - 1, log_bytes));
    // Every live compartment can still be revoked once grants are refused.
    for count in capacity - reserved..capacity {
        assert!(audit::has_room(Event::Revoked, count, log_bytes), "{count}");
    }
    assert!(!audit::has_room(Event::Revoked, capacity, log_bytes));
    assert!(!audit::has_room(Event::Revoked, u64::MAX, log_bytes));
}

/// One compartment's refusals cannot fill the audit log: its first few are logged, the rest
/// counted; every compartment's together leave most of the log for grants; a compartment
/// made again in the same entry starts from none.
#[test]
fn only_a_compartments_first_refusals_are_logged_and_all_are_counted() {
    let mut compartments = Compartments::empty();
    let hostile = compartments.create(name("hostile")).unwrap();
    let other = compartments.create(name("other")).unwrap();
    let mut logged = 0;
    for _ in 0..1000 {
        let to_log = compartments.refusal_to_log(hostile);
        logged += u64::from(to_log);
        compartments.count_refusal(hostile, to_log);
    }
    assert_eq!(logged, REFUSALS_LOGGED_MAX);
    let entry = compartments.get(hostile).unwrap();
    assert_eq!((entry.refusals, entry.refusals_logged), (1000, REFUSALS_LOGGED_MAX));
    assert!(compartments.refusal_to_log(other), "another compartment's refusals are still logged");
    // A refusal the log could not take is counted as not logged.
    compartments.count_refusal(other, false);
    assert!(compartments.refusal_to_log(other));
    assert_eq!(compartments.get(other).unwrap().refusals_logged, 0);

    let room = audit::capacity(8 * 4096) - COMPARTMENTS_MAX as u64;
    assert!(REFUSALS_LOGGED_MAX * COMPARTMENTS_MAX as u64 <= room / 3, "refusals take at most a third of the log");

    compartments.revoke(hostile).unwrap();
    assert!(!compartments.refusal_to_log(hostile), "a revoked compartment logs nothing");
    let again = compartments.create(name("hostile")).unwrap();
    assert_eq!(again, hostile);
    assert!(compartments.refusal_to_log(again));
    assert_eq!(compartments.get(again).unwrap().refusals, 0);
}
