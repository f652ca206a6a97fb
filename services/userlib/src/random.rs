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
