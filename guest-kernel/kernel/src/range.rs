//! The range capability: making and destroying pages and nodes (KeyKOS's prime range key,
//! EROS's range capability). The kernel hands out each object id once; the space bank
//! (`services/space-bank`), the range's one holder, keeps which objects each bank bought,
//! destroys them (`rescind`: the version moves on, so every capability to the object is void
//! at once, wherever it is held) and uses a destroyed object's id again (`reissue`) before
//! asking for a new one. All the bookkeeping of who owns what is the bank's, in ring 3; the
//! kernel only keeps versions, as it does for every object.

use holdfast_abi::interface::{ObjectError, range};
use holdfast_objects::capability::ObjectKind;
use holdfast_objects::{CapType, Capability, ObjectId, Slot};

use crate::message::Message;
use crate::objects::Objects;
use crate::{persistence, process};

type MethodResult = Result<Message, ObjectError>;

fn with_capability(capability: Capability, words: [u64; 4]) -> MethodResult {
    let mut reply = Message::reply(0, words);
    reply.capabilities.push(capability);
    Ok(reply)
}

fn kind_of(word: u64) -> ObjectKind {
    // The decoder checked the range 0..=1.
    if word == 0 { ObjectKind::Page } else { ObjectKind::Node }
}

/// Ids below the next one handed out, but never a checkpoint directory page (kernel state)
/// nor id 0 (no object).
fn made_id(objects: &Objects, kind: ObjectKind, id: u64) -> Result<ObjectId, ObjectError> {
    let (next_node, next_page) = objects.next_ids();
    let next = if kind == ObjectKind::Page { next_page } else { next_node };
    let id = ObjectId(id);
    if id.0 == 0 || id.0 >= next || (kind == ObjectKind::Page && persistence::is_directory_page(id)) {
        return Err(ObjectError::OutOfRange);
    }
    Ok(id)
}

/// Pages and nodes `create_page` and `create_node` can still make.
fn capacity(objects: &Objects) -> (u64, u64) {
    let (next_node, next_page) = objects.next_ids();
    match persistence::object_capacity() {
        Some((pages, nodes)) => (pages.saturating_sub(next_page), nodes.saturating_sub(next_node)),
        None => (u64::MAX, u64::MAX),
    }
}

/// A capability to object `id` at its version now.
fn current(objects: &Objects, kind: ObjectKind, id: ObjectId) -> Result<Capability, ObjectError> {
    let capability = match kind {
        ObjectKind::Page => objects.cache.page_capability(id),
        ObjectKind::Node => objects.cache.node_capability(CapType::Node, id),
    };
    capability.ok_or(ObjectError::Unavailable)
}

/// Destroys object `id`: zeroes it (a page) or voids its slots (a node) so that a reissued
/// id starts empty, destroys the process it is the root of, then moves its version on.
/// Returns whether that process is the invoker.
fn rescind(objects: &mut Objects, kind: ObjectKind, id: ObjectId) -> Result<bool, ObjectError> {
    let mut invoker_destroyed = false;
    let object = current(objects, kind, id)?;
    let translators = match kind {
        ObjectKind::Page => objects.cache.page_translators(id),
        ObjectKind::Node => objects.cache.node_translators(id),
    };
    match kind {
        ObjectKind::Page => {
            objects.ensure_resident(&[id], true).map_err(|_| ObjectError::Unavailable)?;
            persistence::before_page_write(&objects.cache, id);
            let frame = objects.cache.page_mut(&object).map_err(|_| ObjectError::Unavailable)?;
            frame.bytes_mut().fill(0);
            objects.cache.rescind_page(id);
        }
        ObjectKind::Node => {
            invoker_destroyed = process::destroy(id);
            let node = objects.cache.node_mut(&object).map_err(|_| ObjectError::Unavailable)?;
            for slot in (0..holdfast_objects::NODE_SLOT_COUNT as u64).filter_map(Slot::new) {
                node.swap(slot, Capability::VOID);
            }
            objects.cache.rescind_node(id);
        }
    }
    // A page mapped, or a node some mapping went through: the page tables of the processes
    // that translated through it are dropped (they refill lazily); a process's own objects,
    // which a bank destroys with it, were translated by that process alone.
    process::drop_translations(objects, translators);
    Ok(invoker_destroyed)
}

/// Runs `message.code` on the range; `invoker_destroyed` is set when a `rescind` destroyed
/// the invoker's own process, which then gets no reply.
pub fn invoke(objects: &mut Objects, target: Capability, message: &Message, invoker_destroyed: &mut bool) -> MethodResult {
    match range::Request::decode(&message.header())? {
        range::Request::Identify => {
            Ok(Message::reply(0, [target.kind() as u64, u64::from(target.rights().bits()), 0, 0]))
        }
        range::Request::CreatePage => {
            if capacity(objects).0 == 0 {
                return Err(ObjectError::Exhausted);
            }
            let page = objects.create_resident_page().map_err(|_| ObjectError::Exhausted)?;
            with_capability(page, [page.object().0, 0, 0, 0])
        }
        range::Request::CreateNode => {
            if capacity(objects).1 == 0 || !persistence::room_for_process(objects) {
                return Err(ObjectError::Exhausted);
            }
            let node = objects.create_node(CapType::Node);
            with_capability(node, [node.object().0, 0, 0, 0])
        }
        range::Request::Rescind { kind, id } => {
            let kind = kind_of(kind);
            let id = made_id(objects, kind, id)?;
            *invoker_destroyed = rescind(objects, kind, id)?;
            Ok(Message::reply(0, [0; 4]))
        }
        range::Request::Reissue { kind, id } => {
            let kind = kind_of(kind);
            let id = made_id(objects, kind, id)?;
            with_capability(current(objects, kind, id)?, [0; 4])
        }
        range::Request::ObjectId => {
            let object = message.capabilities.first().copied().unwrap_or(Capability::VOID);
            let kind = object.kind().object_kind().ok_or(ObjectError::WrongType)?;
            objects.cache.check(&object).map_err(|_| ObjectError::WrongType)?;
            let code = if kind == ObjectKind::Page { 0 } else { 1 };
            Ok(Message::reply(0, [code, object.object().0, 0, 0]))
        }
        range::Request::Capacity => {
            let (pages, nodes) = capacity(objects);
            Ok(Message::reply(0, [pages, nodes, 0, 0]))
        }
    }
}
