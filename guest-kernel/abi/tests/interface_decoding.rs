//! The generated decoders accept what the interface allows and answer everything else with
//! the error the interface names.

use holdfast_abi::interface::{
    InvocationError, Message, ObjectError, Type, meter, node, page, process, space,
};
use holdfast_abi::METER_PERIOD_MICROSECONDS;

fn message(order: u64, words: [u64; 4]) -> Message {
    Message {
        order,
        words,
        string_length: 0,
        capability_count: 0,
    }
}

#[test]
fn an_unknown_order_is_invalid_order() {
    assert_eq!(
        node::Request::decode(&message(99, [0; 4])),
        Err(ObjectError::InvalidOrder)
    );
    assert_eq!(
        page::Request::decode(&message(u64::MAX, [0; 4])),
        Err(ObjectError::InvalidOrder)
    );
}

#[test]
fn identify_is_order_zero_on_every_decoded_type() {
    assert_eq!(
        node::Request::decode(&message(0, [0; 4])),
        Ok(node::Request::Identify)
    );
    assert_eq!(
        process::Request::decode(&message(0, [0; 4])),
        Ok(process::Request::Identify)
    );
}

#[test]
fn node_slots_are_0_to_31() {
    for order in [node::order::FETCH, node::order::SWAP, node::order::CLEAR] {
        assert!(node::Request::decode(&message(order, [31, 0, 0, 0])).is_ok());
        assert_eq!(
            node::Request::decode(&message(order, [32, 0, 0, 0])),
            Err(ObjectError::InvalidSlot)
        );
    }
    assert_eq!(
        node::Request::decode(&message(node::order::FETCH, [7, 1, 2, 3])),
        Ok(node::Request::Fetch { slot: 7 })
    );
}

#[test]
fn make_space_checks_height_and_flags() {
    let make_space = |height, flags| {
        node::Request::decode(&message(node::order::MAKE_SPACE, [height, flags, 0, 0]))
    };
    assert_eq!(
        make_space(7, 1),
        Ok(node::Request::MakeSpace {
            height: 7,
            flags: 1
        })
    );
    assert_eq!(make_space(8, 0), Err(ObjectError::OutOfRange));
    assert_eq!(make_space(0, 2), Err(ObjectError::OutOfRange));
}

#[test]
fn page_reads_stay_within_the_page() {
    let read =
        |offset, length| page::Request::decode(&message(page::order::READ, [offset, length, 0, 0]));
    assert_eq!(
        read(4000, 96),
        Ok(page::Request::Read {
            offset: 4000,
            length: 96
        })
    );
    assert_eq!(read(4000, 97), Err(ObjectError::OutOfRange));
    assert_eq!(read(4097, 0), Err(ObjectError::OutOfRange));
    assert_eq!(read(0, u64::MAX), Err(ObjectError::OutOfRange));
}

#[test]
fn page_writes_count_the_string_length() {
    let write = |offset, string_length| {
        page::Request::decode(&Message {
            string_length,
            ..message(page::order::WRITE, [offset, 0, 0, 0])
        })
    };
    assert_eq!(write(4095, 1), Ok(page::Request::Write { offset: 4095 }));
    assert_eq!(write(4095, 2), Err(ObjectError::OutOfRange));
    assert_eq!(write(u64::MAX, 1), Err(ObjectError::OutOfRange));
}

#[test]
fn a_required_capability_not_sent_is_the_wrong_type() {
    let set_space = |capability_count| {
        process::Request::decode(&Message {
            capability_count,
            ..message(process::order::SET_SPACE, [0; 4])
        })
    };
    assert_eq!(set_space(0), Err(ObjectError::WrongType));
    assert_eq!(set_space(1), Ok(process::Request::SetSpace));
    // A keeper may be void, so sending none clears it.
    assert_eq!(
        process::Request::decode(&message(process::order::SET_KEEPER, [0; 4])),
        Ok(process::Request::SetKeeper)
    );
    // Swapping in nothing stores void, which a space slot accepts.
    assert_eq!(
        space::Request::decode(&message(space::order::SWAP, [3, 0, 0, 0])),
        Ok(space::Request::Swap { slot: 3 })
    );
}

#[test]
fn process_capability_registers_are_0_to_15() {
    let fetch_register = |index| {
        process::Request::decode(&message(process::order::FETCH_REGISTER, [index, 0, 0, 0]))
    };
    assert_eq!(
        fetch_register(15),
        Ok(process::Request::FetchRegister { index: 15 })
    );
    assert_eq!(fetch_register(16), Err(ObjectError::InvalidSlot));
}

#[test]
fn codes_round_trip_and_kinds_do_not_overlap() {
    for code in 0..=16 {
        assert_eq!(Type::from_code(code).map(Type::code), Some(code));
    }
    assert_eq!(Type::from_code(17), None);
    for code in 1..=7 {
        let error = ObjectError::from_code(code).expect("object error");
        assert_eq!(error.code(), code);
        assert!(!error.description().is_empty());
        assert_eq!(InvocationError::from_code(code), None);
    }
    for offset in 0..=3 {
        let code = (1 << 63) + offset;
        let error = InvocationError::from_code(code).expect("invocation error");
        assert_eq!(error.code(), code);
        assert_eq!(ObjectError::from_code(code), None);
    }
    assert_eq!(InvocationError::Void.code(), 1 << 63);
}

#[test]
fn network_device_notify_needs_a_capability_and_takes_any_deadline() {
    use holdfast_abi::interface::network_device;
    let mut notify = message(network_device::order::NOTIFY, [u64::MAX, 0, 0, 0]);
    assert_eq!(network_device::Request::decode(&notify), Err(ObjectError::WrongType));
    notify.capability_count = 1;
    assert_eq!(
        network_device::Request::decode(&notify),
        Ok(network_device::Request::Notify { deadline_us: u64::MAX })
    );
    assert_eq!(
        network_device::Request::decode(&message(network_device::order::RECEIVE, [0; 4])),
        Ok(network_device::Request::Receive)
    );
    assert_eq!(network_device::Request::decode(&message(5, [0; 4])), Err(ObjectError::InvalidOrder));
}

#[test]
fn a_meter_share_is_at_most_the_period_the_abi_names() {
    let set_share = |microseconds| {
        meter::Request::decode(&message(meter::order::SET_SHARE, [microseconds, 0, 0, 0]))
    };
    assert_eq!(
        set_share(METER_PERIOD_MICROSECONDS),
        Ok(meter::Request::SetShare { microseconds: METER_PERIOD_MICROSECONDS })
    );
    assert_eq!(set_share(METER_PERIOD_MICROSECONDS + 1), Err(ObjectError::OutOfRange));
}
