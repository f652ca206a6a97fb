//! The boot sequence, from the boot loader's jump to the first process: the CPU, memory,
//! time and devices; the store opened and the system restored from its newest checkpoint,
//! or the initial system of the image built on a fresh or absent store; then the
//! processes run, with checkpoints when there is a store ([`crate::idle`]) and the
//! self-test's report when there is none ([`crate::selftest`]).
//!
//! The handlers `arch` calls up to are registered here: the system call
//! ([`crate::ipc::system_call`]) and ring 3's interrupts and faults ([`crate::traps`]).

use holdfast_abi as abi;
use holdfast_boot_image::Image;

use crate::arch::{self, timer};
use crate::bootinfo::{self, BootInformation};
use crate::persistence::{self, Opened};
use crate::selftest::{self, check, finish};
use crate::{console, control, drivers, idle, initial_system, ipc, memory, network, pair, println, process, space, traps};

/// Called from `start64_low` (`arch::boot`) on the kernel stack: the kernel's entry, by
/// symbol, so that `arch` names nothing above it.
#[unsafe(no_mangle)]
extern "C" fn kernel_entry_from_boot(boot_magic: u32, boot_information_physical: u32) -> ! {
    kernel_main(boot_magic, boot_information_physical as u64)
}

/// What the command line asks of this boot (`holdfast.<key>=<value>` words).
pub struct BootOptions {
    /// Stay up after the self-test (for control over QMP) instead of exiting.
    pub stay_up: bool,
    /// A deliberate kernel fault, to show the fault report: `ud`, `page`, or a W^X
    /// violation: `user-read` (SMAP), `user-exec` (SMEP), `data-exec` (no-execute data).
    pub kernel_fault: Option<&'static str>,
    /// How often a checkpoint is taken when the disk holds a store.
    pub checkpoint_interval_ms: u64,
    /// Exercise the devices at boot (`holdfast.device-selftest`, set by the test harness):
    /// write a test disk's sectors and ping the network. A production boot does neither.
    pub device_selftest: bool,
    /// `holdfast.recover=truncate`: start a store whose log is damaged past repair from its
    /// last intact point (the store refuses otherwise, naming what would be lost).
    pub recover: holdfast_store::Recover,
    /// The whole command line, for the boot numbers the image's system table asks for
    /// ([`Self::boot_number`]).
    command_line: &'static str,
}

impl BootOptions {
    fn parse(command_line: &'static str) -> Self {
        let mut options = Self {
            stay_up: false,
            kernel_fault: None,
            checkpoint_interval_ms: persistence::DEFAULT_INTERVAL_MS,
            device_selftest: false,
            recover: holdfast_store::Recover::Refuse,
            command_line,
        };
        for word in command_line.split_ascii_whitespace() {
            if word == "holdfast.device-selftest" {
                options.device_selftest = true;
            }
            match word.split_once('=') {
                Some(("holdfast.after", "stay")) => options.stay_up = true,
                Some(("holdfast.kernel-fault", kind)) => options.kernel_fault = Some(kind),
                Some(("holdfast.recover", "truncate")) => options.recover = holdfast_store::Recover::Truncate,
                Some(("holdfast.checkpoint-interval-ms", value)) => match value.parse() {
                    Ok(milliseconds) if milliseconds > 0 => {
                        options.checkpoint_interval_ms = milliseconds;
                    }
                    _ => println!("holdfast: ignoring {word}: not a positive number of milliseconds"),
                },
                Some(("holdfast.disk-answer-limit-ms", value)) => match value.parse() {
                    Ok(milliseconds) if milliseconds > 0 => drivers::set_answer_time_limit_ms(milliseconds),
                    _ => println!("holdfast: ignoring {word}: not a positive number of milliseconds"),
                },
                // Test scaffolding (hypervisor-glue/holdfast/tests/persistence.rs):
                // checkpoint G fails once, to show that a failed checkpoint is retried.
                Some(("holdfast.test-checkpoint-failure", value)) => match value.parse() {
                    Ok(generation) => persistence::inject_failure(generation),
                    _ => println!("holdfast: ignoring {word}: not a checkpoint generation"),
                },
                // Test scaffolding (tests/persistence.rs): checkpoints taken in page faults.
                Some(("holdfast.test-dirty-pages-max", value)) => match value.parse() {
                    Ok(pages) if pages > 0 => persistence::set_test_dirty_pages_max(pages),
                    _ => println!("holdfast: ignoring {word}: not a positive number of pages"),
                },
                _ => {}
            }
        }
        options
    }

    /// The value of `holdfast.<key>=<value>` (a decimal u64), for a boot number of the
    /// system table (`holdfast.fuzz-seed` for the hostile program): how a boot option
    /// reaches ring 3, as a number capability. The last such word wins; one whose value is
    /// not a number is ignored, with a line saying so.
    pub fn boot_number(&self, key: &str) -> Option<u64> {
        let mut found = None;
        for word in self.command_line.split_ascii_whitespace() {
            let Some(value) = word.strip_prefix("holdfast.").and_then(|rest| rest.strip_prefix(key)).and_then(|rest| rest.strip_prefix('=')) else {
                continue;
            };
            match value.parse() {
                Ok(number) => found = Some(number),
                Err(_) => println!("holdfast: ignoring {word}: not a decimal number below 2^64"),
            }
        }
        found
    }
}

pub fn kernel_main(boot_magic: u32, boot_information_physical: u64) -> ! {
    console::init();
    control::init();
    // SAFETY: these are the registers the boot loader handed to `start32`.
    let boot = unsafe { bootinfo::read(boot_magic, boot_information_physical) };
    if boot
        .command_line
        .split_ascii_whitespace()
        .any(|word| word == "holdfast.probe")
    {
        selftest::accelerator_probe();
    }
    println!(
        "holdfast: kernel {} (abi {}) booted by {}",
        env!("CARGO_PKG_VERSION"),
        abi::ABI_VERSION,
        boot.protocol.name()
    );
    let options = BootOptions::parse(boot.command_line);
    arch::protection::init();
    arch::gdt::init();
    arch::idt::init(arch::idt::UserModeHandlers {
        timer: traps::timer_in_user_mode,
        fault: traps::fault_in_user_mode,
        network: traps::network_in_user_mode,
    });
    arch::syscall::init(ipc::system_call);
    let kernel_end_physical = memory::virtual_to_physical(arch::boot::kernel_end_address());
    let mut reserved = [(0, 0); bootinfo::RANGES_MAX + 1];
    reserved[0] = (0, kernel_end_physical);
    reserved[1..=boot.reserved_ranges().len()].copy_from_slice(boot.reserved_ranges());
    memory::init_heap(
        boot.usable_ranges(),
        &reserved[..=boot.reserved_ranges().len()],
    );
    space::init_live_root();
    let calibration = arch::timer::init();
    let devices = drivers::probe();
    let ready_us = arch::timer::tsc_to_microseconds(arch::read_tsc() - arch::boot::tsc_at_entry());
    println!("{} {ready_us}", abi::serial::READY_MARKER);
    x86_64::instructions::interrupts::enable();

    if let Some(kind) = options.kernel_fault {
        selftest::kernel_fault(kind);
    }
    run(&boot, &calibration, devices, options)
}

fn run(
    boot: &BootInformation,
    calibration: &timer::Calibration,
    mut devices: drivers::Devices,
    options: BootOptions,
) -> ! {
    selftest::set_stay_up(options.stay_up);
    println!(
        "selftest: boot protocol {}, command line {:?}",
        boot.protocol.name(),
        boot.command_line
    );
    if options.device_selftest {
        drivers::self_test(&mut devices, check);
    } else {
        println!("selftest: devices: not exercised (no holdfast.device-selftest): only the store's disks are written, no packet is sent");
    }
    if let drivers::Device::Ready(net) = devices.net {
        network::install(net);
    }
    let mut disks = devices
        .blocks
        .into_iter()
        .filter_map(|disk| match disk {
            drivers::Device::Ready(disk) => Some(disk),
            _ => None,
        })
        .collect();
    let mut pair_options = pair::PairOptions::parse(boot.command_line);
    let mut link = match devices.link {
        drivers::Device::Ready(link) => Some(link),
        _ => None,
    };
    if pair_options.role != pair::Role::Single && link.is_none() {
        println!("selftest: pair: a {:?} boot needs the link device (holdfast pair gives it one) [{}]", pair_options.role, check(false));
        finish()
    }
    if pair_options.role == pair::Role::Standby
        && let Some(standby_link) = link.take()
    {
        // Until the supervisor promotes it, a standby only copies the primary's store.
        let (copied_disks, standby_link, term) = pair::standby::run(disks, standby_link, &pair_options);
        disks = copied_disks;
        link = Some(standby_link);
        pair_options.role = pair::Role::Primary;
        pair_options.term = term;
    }
    let mut opened = persistence::open(disks, options.recover);
    if let (pair::Role::Primary, Some(link), Ok(Opened::Checkpointed(store) | Opened::Fresh(store))) =
        (pair_options.role, link, &mut opened)
    {
        pair::primary::install(link, &pair_options, store);
    }
    // A restart serves as soon as it can: the timer's rate was checked when the system was
    // first built (its calibration is still printed, for the benchmarks' TSC conversion).
    selftest::timer_check(calibration, !matches!(opened, Ok(Opened::Checkpointed(_))));
    let persistent = match opened {
        Ok(Opened::NoStore(why)) => {
            println!("holdfast: store: {why}; nothing persists");
            false
        }
        Ok(Opened::Checkpointed(store)) => {
            let generation = store.checkpoint_generation();
            persistence::attach(store, options.checkpoint_interval_ms, ipc::journal_durable);
            match persistence::restore() {
                Ok(count) => {
                    println!(
                        "holdfast: restarted from checkpoint {generation}: {count} processes, boot {}",
                        persistence::boot_count()
                    );
                    ipc::network_restarted();
                }
                Err(error) => {
                    println!("selftest: store: restart from checkpoint {generation}: {error} [{}]", check(false));
                    finish()
                }
            }
            start_checkpoints(options.checkpoint_interval_ms)
        }
        Ok(Opened::Fresh(store)) => {
            persistence::attach(store, options.checkpoint_interval_ms, ipc::journal_durable);
            true
        }
        Err(error) => {
            println!("selftest: store: {error}; not started [{}]", check(false));
            finish()
        }
    };
    build_initial_system(boot, &options);
    if persistent {
        if let Err(error) = persistence::check_capacity() {
            println!("selftest: store: {error} [{}]", check(false));
            finish()
        }
        start_checkpoints(options.checkpoint_interval_ms)
    }
    process::run(selftest::report_processes)
}

/// Runs the system with checkpoints to the store; never ends (the VM is stopped from
/// outside).
fn start_checkpoints(interval_ms: u64) -> ! {
    println!("holdfast: store: checkpoints every {interval_ms} ms");
    process::run(idle::idle)
}

/// Builds the initial system of the image's system table, or reports why not and ends.
fn build_initial_system(boot: &BootInformation, options: &BootOptions) {
    let Some(bytes) = boot.initial_image_bytes() else {
        println!(
            "selftest: initial image: missing (no boot module) [{}]",
            check(false)
        );
        finish()
    };
    let image = match Image::parse(bytes) {
        Ok(image) => image,
        Err(error) => {
            println!("selftest: initial image: {error} [{}]", check(false));
            finish()
        }
    };
    let system = match image.system_table() {
        Some(Ok(system)) => system,
        Some(Err(error)) => {
            println!(
                "selftest: initial image: system table: {error} [{}]",
                check(false)
            );
            finish()
        }
        None => {
            println!(
                "selftest: initial image: no system table [{}]",
                check(false)
            );
            finish()
        }
    };
    println!(
        "selftest: initial image: {} programs, {} bytes [ok]",
        image.programs().count(),
        bytes.len()
    );
    match initial_system::build(&image, &system, &|key| options.boot_number(key)) {
        Ok(count) => println!("selftest: initial system: {count} processes [ok]"),
        Err(error) => {
            println!("selftest: initial system: {error} [{}]", check(false));
            finish()
        }
    }
}

