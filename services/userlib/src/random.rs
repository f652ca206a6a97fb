//! Random words from the CPU's generator (RDRAND), an instruction ring 3 may run: for what
//! must not be guessable from anything else (tokens, which are password capabilities; a
//! hash table's secret key against clients that choose its keys).

/// Why no random words could be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandomError {
    /// The CPU has no RDRAND (CPUID leaf 1, ECX bit 30).
    NoRdrand,
    /// RDRAND kept saying it had no number ready.
    NotReady,
}

impl RandomError {
    pub fn message(self) -> &'static str {
        match self {
            RandomError::NoRdrand => "no entropy source: the CPU has no RDRAND",
            RandomError::NotReady => "RDRAND gave no random number",
        }
    }
}

/// `N` random 64-bit words.
pub fn words<const N: usize>() -> Result<[u64; N], RandomError> {
    use core::arch::x86_64::{__cpuid, _rdrand64_step};
    /// # Safety
    /// The CPU must have RDRAND (CPUID leaf 1, ECX bit 30).
    #[target_feature(enable = "rdrand")]
    unsafe fn rdrand64(value: &mut u64) -> i32 {
        _rdrand64_step(value)
    }
    if __cpuid(1).ecx & (1 << 30) == 0 {
        return Err(RandomError::NoRdrand);
    }
    let mut words = [0u64; N];
    for word in &mut words {
        // Intel's advice: retry a few times; a CPU that keeps failing is broken.
        // SAFETY: CPUID said RDRAND is there.
        if !(0..10).any(|_| unsafe { rdrand64(word) } == 1) {
            return Err(RandomError::NotReady);
        }
    }
    Ok(words)
}

/// A reproducible generator (xorshift64*), for fuzzers whose runs a printed seed repeats:
/// good enough to reach every path, and never for anything that must not be guessed (that
/// is [`words`]).
pub struct Xorshift(u64);

impl Xorshift {
    /// Every seed its own sequence: splitmix64's finalizer (a bijection) spreads the seed,
    /// and xorshift's one forbidden state, 0, becomes another.
    pub fn new(seed: u64) -> Self {
        let mut state = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        state = (state ^ state >> 30).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        state = (state ^ state >> 27).wrapping_mul(0x94d0_49bb_1331_11eb);
        state ^= state >> 31;
        Self(if state == 0 { 0x9e37_79b9_7f4a_7c15 } else { state })
    }

    pub fn word(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number below `bound` (not 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.word() % bound
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}
