//! The initial image format (`holdfast-boot-image`, which depends on nothing so that the
//! kernel reads it early) keeps its own copy of the capability type codes and the number of
//! capability registers: they must be the interface's.

use holdfast_abi::interface::Type;
use holdfast_boot_image::system_table::{CAPABILITY_REGISTER_COUNT, type_code};

#[test]
fn the_boot_image_type_codes_are_the_interface_codes() {
    for (code, type_) in [
        (type_code::VOID, Type::Void),
        (type_code::NUMBER, Type::Number),
        (type_code::PAGE, Type::Page),
        (type_code::NODE, Type::Node),
        (type_code::SPACE, Type::Space),
        (type_code::PROCESS, Type::Process),
        (type_code::START, Type::Start),
        (type_code::METER, Type::Meter),
        (type_code::INDIRECTOR, Type::Indirector),
        (type_code::CONSOLE, Type::Console),
        (type_code::CLOCK, Type::Clock),
        (type_code::CHECKPOINT, Type::Checkpoint),
        (type_code::JOURNAL, Type::Journal),
        (type_code::CONTROL, Type::Control),
    ] {
        assert_eq!(u64::from(code), type_.code(), "{type_:?}");
    }
    assert_eq!(CAPABILITY_REGISTER_COUNT, holdfast_abi::CAPABILITY_REGISTER_COUNT);
}
