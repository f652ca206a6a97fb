//! What can go wrong, sorted by whose fault it is, which decides the exit status.

use std::fmt;

/// A command's failure: one line for the user.
#[derive(Debug)]
pub enum Failure {
    /// Something the user gave is wrong: a flag, a file, a name.
    Input(String),
    /// Anything else: the host lacks something, QEMU died, the VM timed out.
    Other(String),
}

impl Failure {
    pub fn input(message: impl fmt::Display) -> Self {
        Self::Input(message.to_string())
    }

    pub fn other(message: impl fmt::Display) -> Self {
        Self::Other(message.to_string())
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(message) | Self::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Failure {}

/// Lower-level errors with complete messages of their own are failures of the second kind
/// unless a command says otherwise.
impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Self::Other(format!("{error:#}"))
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        Self::Other(error.to_string())
    }
}

pub mod exit_status {
    use super::Failure;

    /// The guest passed its self-test (QEMU exit status 33).
    pub const GUEST_PASSED: u8 = 0;
    /// The guest reported failure (QEMU exit status 35).
    pub const GUEST_FAILED: u8 = 1;
    /// A usage or input error: a bad flag, a missing or invalid file, an unknown VM name.
    pub const INPUT_ERROR: u8 = 2;
    /// Any other failure: QEMU missing or dying, the time limit passing, a failed build.
    pub const OTHER_FAILURE: u8 = 3;

    pub fn of(failure: &Failure) -> u8 {
        match failure {
            Failure::Input(_) => INPUT_ERROR,
            Failure::Other(_) => OTHER_FAILURE,
        }
    }
}
