//! `holdfast bench store --quick`'s program (see `bench_store/program.rs`): 1 GiB
//! resident and 3 rounds of checkpoints of every page, as the full run, which boots it
//! three times.
#![no_std]
#![no_main]

#[path = "bench_store/program.rs"]
mod program;

const RESIDENT_PAGES: usize = 1024 * 256;
const ROUNDS: u64 = 3;

/// In .bss: the loader puts every page in the space tree, resident from the start.
static mut RESIDENT: [[u8; program::PAGE_BYTES]; RESIDENT_PAGES] =
    [[0; program::PAGE_BYTES]; RESIDENT_PAGES];

fn main() -> u64 {
    program::main(
        core::ptr::addr_of_mut!(RESIDENT).cast(),
        RESIDENT_PAGES,
        ROUNDS,
    )
}

holdfast_userlib::entry!(main);
