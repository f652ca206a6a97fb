//! The kernel services that are not objects on the store: checkpoint control, the journal,
//! the control channel and the network device (DESIGN.md: kernel services). Each capability names the service
//! alone; holding it is the authority to use it.

use alloc::vec::Vec;
use holdfast_abi::interface::{ObjectError, checkpoint, control, journal, network_device};
use holdfast_objects::{CapType, Capability};

use crate::message::Message;
use crate::methods::{self, writable};
use crate::objects::Objects;
use crate::drivers::SendError;
use crate::user_memory::{self, GuardedWriteError};
use crate::{control as channel, network, persistence as store};

/// How an invocation of a service ends.
// Returned once per invocation and taken apart at once: boxing the reply would allocate.
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    Reply(Message),
    /// Nothing to read yet: the invoker waits and runs its `read` again once input arrives.
    WaitForInput,
    /// The invoker waits until journal commit `ticket` is durable, then gets its reply.
    WaitUntilDurable(u64),
}

/// The page of `checkpoint.counters` that starts at family `first_family`: as many whole
/// families as fit one invocation's string, and the first family after them. `None` if the
/// first does not fit alone.
fn counters_page(families: &[alloc::string::String], first_family: u64) -> Option<(u64, Vec<u8>)> {
    let lengths: Vec<usize> = families.iter().map(alloc::string::String::len).collect();
    let first = usize::try_from(first_family).unwrap_or(usize::MAX).min(families.len());
    let end = holdfast_abi::counters_page_end(&lengths, first)?;
    let page = families[first..end].iter().flat_map(|family| family.bytes()).collect();
    Some((end as u64, page))
}

fn reply(result: Result<[u64; 4], ObjectError>) -> Outcome {
    Outcome::Reply(match result {
        Ok(words) => Message::reply(0, words),
        Err(error) => Message::reply(error as u64, [0; 4]),
    })
}

/// Commits `pages` through the journal: at once if the commit was written on this path,
/// else the invoker waits until it is durable.
fn commit(objects: &mut Objects, pages: &[Capability]) -> Outcome {
    match store::journal_commit(objects, pages) {
        // The reply a waiting committer gets (`process::journal_durable`).
        Some(store::JournalCommit::Durable(ticket)) => reply(Ok([ticket, 0, 0, 0])),
        Some(store::JournalCommit::Queued(ticket)) => Outcome::WaitUntilDurable(ticket),
        None => reply(Err(ObjectError::Unavailable)),
    }
}

/// A journal `write`'s pieces (interface.toml): each a little-endian u64 address, a u16
/// length and that many bytes; `None` if the string does not divide into them exactly.
fn journal_pieces(mut string: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    let mut pieces = Vec::new();
    while !string.is_empty() {
        let (address, rest) = string.split_first_chunk::<8>()?;
        let (length, rest) = rest.split_first_chunk::<2>()?;
        let length = usize::from(u16::from_le_bytes(*length));
        if rest.len() < length {
            return None;
        }
        let (bytes, rest) = rest.split_at(length);
        pieces.push((u64::from_le_bytes(*address), bytes));
        string = rest;
    }
    Some(pieces)
}

/// Runs `message.code` on the service `target` names (checkpoint, journal, control or the
/// network device).
pub fn invoke(objects: &mut Objects, target: Capability, message: &Message) -> Outcome {
    let header = message.header();
    let identify = methods::identity(&target);
    let unavailable = ObjectError::Unavailable;
    match target.kind() {
        CapType::Checkpoint => reply(match checkpoint::Request::decode(&header) {
            Ok(checkpoint::Request::Identify) => Ok(identify),
            Ok(checkpoint::Request::SetInterval { milliseconds }) => writable(&target)
                .and_then(|()| store::set_interval(milliseconds).ok_or(unavailable))
                .map(|()| [0; 4]),
            Ok(checkpoint::Request::Status) => store::status().ok_or(unavailable),
            Ok(checkpoint::Request::Failures) => store::failures().ok_or(unavailable),
            Ok(checkpoint::Request::Take) => writable(&target)
                .and_then(|()| store::request_now().ok_or(unavailable))
                .map(|()| [0; 4]),
            Ok(checkpoint::Request::Counters { first_family }) => {
                let Some(families) = store::counters_families() else {
                    return reply(Err(unavailable));
                };
                let Some((next_family, page)) = counters_page(&families, first_family) else {
                    // A family longer than a page: never cut, so never sent. Each family
                    // is a line or a histogram of at most 16 buckets, well under a page.
                    crate::println!("holdfast: counters family {first_family} is longer than a page; refused");
                    return reply(Err(unavailable));
                };
                let mut message = Message::reply(0, [next_family, families.len() as u64, 0, 0]);
                message.string = page.into();
                return Outcome::Reply(message);
            }
            Err(error) => Err(error),
        }),
        CapType::Journal => match journal::Request::decode(&header) {
            Ok(journal::Request::Identify) => reply(Ok(identify)),
            Ok(journal::Request::Commit) => {
                let (first, others) = message.capabilities.split_first().expect("the decoder checked the count");
                let pages_only = first.kind() == CapType::Page
                    && others.iter().all(|page| matches!(page.kind(), CapType::Page | CapType::Void));
                if !pages_only {
                    return reply(Err(ObjectError::WrongType));
                }
                let pages: Vec<Capability> = message.capabilities.iter().copied().filter(|page| !page.is_void()).collect();
                let ids: Vec<_> = pages.iter().map(Capability::object).collect();
                if objects.ensure_resident(&ids, true).is_err() {
                    return reply(Err(unavailable));
                }
                commit(objects, &pages)
            }
            Ok(journal::Request::Write { guard_address, guard_expected }) => {
                let space = message.capabilities[0];
                if space.kind() != CapType::Space {
                    return reply(Err(ObjectError::WrongType));
                }
                let Some(pieces) = journal_pieces(&message.string) else {
                    return reply(Err(ObjectError::OutOfRange));
                };
                match user_memory::guarded_write(objects, space, (guard_address, guard_expected), &pieces) {
                    Ok(pages) => commit(objects, &pages),
                    Err(GuardedWriteError::Changed) => reply(Err(ObjectError::Changed)),
                    Err(GuardedWriteError::BadAddress) => reply(Err(ObjectError::OutOfRange)),
                    Err(GuardedWriteError::Unavailable) => reply(Err(unavailable)),
                }
            }
            Err(error) => reply(Err(error)),
        },
        CapType::Control if !channel::present() => reply(Err(unavailable)),
        CapType::Control => match control::Request::decode(&header) {
            Ok(control::Request::Identify) => reply(Ok(identify)),
            Ok(control::Request::Read { length }) => {
                let mut bytes = alloc::vec![0u8; length as usize];
                let count = channel::read(&mut bytes);
                if count == 0 {
                    return Outcome::WaitForInput;
                }
                bytes.truncate(count);
                let mut message = Message::reply(0, [count as u64, 0, 0, 0]);
                message.string = bytes.into();
                Outcome::Reply(message)
            }
            Ok(control::Request::Write) => {
                channel::write(&message.string);
                reply(Ok([message.string.len() as u64, 0, 0, 0]))
            }
            Err(error) => reply(Err(error)),
        },
        CapType::NetworkDevice if !network::present() => reply(Err(unavailable)),
        CapType::NetworkDevice => network_device(target, message),
        _ => unreachable!("only services come here"),
    }
}

/// The network device's methods. Every result ends with `boot`, the system's start the
/// device belongs to, so that its holder sees a restart in any answer.
fn network_device(target: Capability, message: &Message) -> Outcome {
    let boot = store::boot_count();
    let unavailable = ObjectError::Unavailable;
    match network_device::Request::decode(&message.header()) {
        Ok(network_device::Request::Identify) => reply(Ok(methods::identity(&target))),
        Ok(network_device::Request::Send) => reply(match network::send(&message.string) {
            Some(Ok(())) => Ok([boot, 0, 0, 0]),
            Some(Err(SendError::Length)) => Err(ObjectError::OutOfRange),
            Some(Err(SendError::Busy)) => Err(ObjectError::Exhausted),
            Some(Err(SendError::Device(why))) => {
                crate::println!("holdfast: virtio-net: {why}");
                Err(unavailable)
            }
            None => Err(unavailable),
        }),
        Ok(network_device::Request::Receive) => match network::receive() {
            Some(Ok(frame)) => {
                let frame = frame.unwrap_or_default();
                let mut message = Message::reply(0, [frame.len() as u64, boot, 0, 0]);
                message.string = frame.into();
                Outcome::Reply(message)
            }
            Some(Err(why)) => {
                crate::println!("holdfast: virtio-net: {why}");
                reply(Err(unavailable))
            }
            None => reply(Err(unavailable)),
        },
        Ok(network_device::Request::MacAddress) => reply(
            network::mac_address()
                .map(|mac| {
                    let word = mac.iter().rev().fold(0u64, |word, &byte| word << 8 | u64::from(byte));
                    [word, boot, 0, 0]
                })
                .ok_or(unavailable),
        ),
        Ok(network_device::Request::Notify { deadline_us }) => {
            let notified = message.capabilities[0];
            if notified.kind() != CapType::Start {
                return reply(Err(ObjectError::WrongType));
            }
            network::arm(notified, deadline_us);
            reply(Ok([boot, 0, 0, 0]))
        }
        Err(error) => reply(Err(error)),
    }
}
