//! The store's counters, read whole: `checkpoint.counters` gives them a page of whole
//! families at a time, as the text is longer than one invocation's string.

use crate::abi::methods::ObjectError;
use crate::interface::checkpoint;
use crate::syscall::{CapReg, Error};

/// Calls `page` with each page of the counters' text, in order, until the last family.
/// A kernel that does not move on from a page (which it never does) is `unavailable`
/// rather than a loop without end.
pub fn read_pages(checkpoint: CapReg, mut page: impl FnMut(&[u8])) -> Result<(), Error> {
    let mut text = [0u8; crate::abi::INVOCATION_STRING_BYTES_MAX];
    let mut first_family = 0;
    loop {
        let reply = checkpoint::counters(checkpoint, first_family, &mut text)?;
        page(&text[..reply.text_length.min(text.len())]);
        if reply.next_family >= reply.family_count {
            return Ok(());
        }
        if reply.next_family <= first_family {
            return Err(Error::Object(ObjectError::Unavailable));
        }
        first_family = reply.next_family;
    }
}
