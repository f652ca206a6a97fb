//! A message on its way between processes, or between a process and the kernel: what the
//! invocation path ([`crate::ipc`]) delivers, what kernel objects' methods
//! ([`crate::methods`]) and services ([`crate::services`]) read and reply with, and what a
//! keeper is told. Below all three, so that they share it without importing each other.

use alloc::vec::Vec;
use arrayvec::ArrayVec;
use holdfast_abi as abi;
use holdfast_objects::Capability;

/// A message on its way: what the receiver's registers, buffer and capability registers
/// get.
pub struct Message {
    pub code: u64,
    pub words: [u64; 4],
    pub string: MessageString,
    /// At most four (the descriptor's limit): kept inline, as most messages carry none or
    /// one and a heap allocation costs more than the rest of a call.
    pub capabilities: ArrayVec<Capability, 4>,
    pub badge: u64,
    /// For a call: the capability to reply with.
    pub resume: Option<Capability>,
}

/// A message's string: a `Vec` whose drop is one inline test when it is empty, as it is in
/// most messages (`Vec`'s own drop is a call of three translation blocks under TCG, and
/// every invocation drops two messages).
pub struct MessageString(core::mem::ManuallyDrop<Vec<u8>>);

impl MessageString {
    pub const EMPTY: Self = Self(core::mem::ManuallyDrop::new(Vec::new()));
}

impl From<Vec<u8>> for MessageString {
    fn from(bytes: Vec<u8>) -> Self {
        Self(core::mem::ManuallyDrop::new(bytes))
    }
}

impl core::ops::Deref for MessageString {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for MessageString {
    #[inline]
    fn drop(&mut self) {
        if self.0.capacity() != 0 {
            // SAFETY: the vector is dropped here only, once, and never used again.
            unsafe { core::mem::ManuallyDrop::drop(&mut self.0) }
        }
    }
}

impl Message {
    /// What the generated request decoders read of it.
    pub fn header(&self) -> abi::interface::Message {
        abi::interface::Message {
            order: self.code,
            words: self.words,
            string_length: self.string.len() as u64,
            capability_count: self.capabilities.len() as u64,
        }
    }

    pub fn reply(code: u64, words: [u64; 4]) -> Self {
        Self {
            code,
            words,
            string: MessageString::EMPTY,
            capabilities: ArrayVec::new(),
            badge: 0,
            resume: None,
        }
    }
}

/// What a keeper is told: why (a [`holdfast_abi::keeper`] code) and four words of detail.
pub struct KeeperMessage {
    pub code: u64,
    pub words: [u64; 4],
}
