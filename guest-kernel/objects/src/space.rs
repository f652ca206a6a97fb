//! Address spaces as trees of nodes with pages as leaves (EROS 4.2): the walk that
//! translates an address, shared by the kernel's page-fault path and its reads of user
//! memory. Page tables are only a cache of what [`walk`] finds.
//!
//! A space capability of height h names a node whose slot i covers the i-th 4 KiB × 32^(h-1)
//! of its 4 KiB × 32^h bytes; a slot of a height-1 node holds a page. A space capability
//! with the keeper flag names a keeper node: slot 0 holds the inner space (same height),
//! slot 1 the start capability of the keeper that faults under it go to.

use crate::capability::SPACE_HEIGHT_MAX;
use crate::{CapType, Capability, ObjectCache, ObjectId, Slot, Translators};

/// log2 of the slots per node: each level of the tree resolves 5 bits of the address.
const SLOT_BITS: u32 = 5;
const PAGE_BITS: u32 = 12;

/// Where a walk of a space tree ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// A page, and whether every capability on the path allowed writing. `page` carries
    /// the rights of the whole path: [`Capability::may_execute`] tells whether it may be
    /// mapped executable. `keeper` is as for [`Walk::Missing`]: an access the page does not
    /// allow (a write to a read-only page: a virtual copy's shared page) is its business.
    Page { page: Capability, writable: bool, keeper: Option<Capability> },
    /// No page there (a void or revoked slot, a malformed tree, an address beyond the
    /// space); `keeper` is the start capability in the innermost keeper node on the path, if
    /// any and if no no-call capability on the way hid it.
    Missing { keeper: Option<Capability> },
}

/// The slot of a height-`height` space node that covers `address`.
pub fn slot_for(height: u8, address: u64) -> Slot {
    let shift = PAGE_BITS + SLOT_BITS * (u32::from(height) - 1);
    Slot::new((address >> shift) & 0x1f).expect("five bits")
}

/// Each step of a walk descends a level or unwraps a keeper node, so twice the levels bound
/// a walk's nodes whatever a program put in its nodes.
const WALK_NODES_MAX: usize = 2 * (SPACE_HEIGHT_MAX as usize + 1);

/// Walks `space` down to the page holding `address`, for a write if `write`, for a
/// translation in the page tables of `translators` (none: a look-up that maps nothing). If
/// it finds the page, every node passed is marked as one their translation depends on
/// ([`ObjectCache::mark_translated`]), and the page as mapped by them
/// ([`ObjectCache::mark_page_translated`]) — unless the walk is for a write the path does
/// not allow, which maps nothing: a virtual copy's keeper changes that path next, and marks
/// left by its write faults made each of its changes drop every process's translations.
pub fn walk<F>(cache: &ObjectCache<F>, space: Capability, address: u64, write: bool, translators: Translators) -> Walk {
    let mut capability = space;
    // The part of the address the current level resolves; each descent drops the bits of
    // the slot taken.
    let mut offset = address;
    let mut writable = true;
    let mut keeper = None;
    // The nodes passed and the slots read: marked as translated only if the walk reaches a
    // page, since a failed walk leaves no page-table entry that depends on them.
    let mut passed = [(ObjectId(0), 0u32); WALK_NODES_MAX];
    for step in 0..WALK_NODES_MAX {
        writable &= capability.may_write();
        let Some((height, is_keeper_node)) = capability.space_shape() else {
            if capability.kind() == CapType::Page && cache.check(&capability).is_ok() {
                if !write || writable {
                    for &(node, slots) in &passed[..step] {
                        cache.mark_translated(node, slots, translators);
                    }
                    cache.mark_page_translated(capability.object(), translators);
                }
                return Walk::Page {
                    page: capability,
                    writable,
                    keeper,
                };
            }
            break;
        };
        // One lookup checks the capability and finds the node.
        let Ok(node) = cache.node(&capability) else {
            break;
        };
        if is_keeper_node {
            passed[step] = (capability.object(), 0b11);
            let keeper_start = node.get(slot(1));
            keeper = (capability.may_call() && keeper_start.kind() == CapType::Start)
                .then_some(keeper_start);
            let inner = node.get(slot(0));
            // A keeper node wraps a space of its own height; anything else is malformed.
            if inner.space_shape() != Some((height, false)) {
                break;
            }
            capability = inner.restricted(capability.rights());
            continue;
        }
        let covered_bits = PAGE_BITS + SLOT_BITS * u32::from(height);
        if height == 0 || offset >> covered_bits != 0 {
            break;
        }
        let taken = slot_for(height, offset);
        passed[step] = (capability.object(), 1 << taken.index());
        let child = node.get(taken);
        offset &= (1 << (covered_bits - SLOT_BITS)) - 1;
        let child_fits = match child.space_shape() {
            Some((child_height, _)) => child_height == height - 1,
            None => child.kind() == CapType::Page && height == 1,
        };
        if !child_fits {
            break;
        }
        capability = child.restricted(capability.rights());
    }
    Walk::Missing { keeper }
}

fn slot(index: u64) -> Slot {
    Slot::new(index).expect("index below 32")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Node, ObjectId, Rights, Version};

    /// A cache with a height-2 space holding one page at `address`; returns the space, the
    /// node of height 1 on the way, and the page.
    fn two_level_space(address: u64) -> (ObjectCache<()>, Capability, Capability, Capability) {
        let mut cache = ObjectCache::new();
        for id in [1, 2] {
            cache.insert_node(ObjectId(id), Version(0), Node::default());
        }
        cache.insert_page(ObjectId(1), Version(0), ()).unwrap();
        let top = Capability::space(ObjectId(1), Version(0), 2, false).unwrap();
        let leaf = Capability::space(ObjectId(2), Version(0), 1, false).unwrap();
        let page = cache.page_capability(ObjectId(1)).unwrap();
        cache
            .node_mut(&top)
            .unwrap()
            .swap(slot_for(2, address), leaf);
        cache
            .node_mut(&leaf)
            .unwrap()
            .swap(slot_for(1, address), page);
        (cache, top, leaf, page)
    }

    const ADDRESS: u64 = (3 << 17) | (5 << 12) | 0x123;

    #[test]
    fn a_walk_finds_the_page_and_marks_the_nodes_passed() {
        let (mut cache, top, _, page) = two_level_space(ADDRESS);
        cache.insert_node(ObjectId(3), Version(0), Node::default());
        let (top_slot, leaf_slot) = (slot_for(2, ADDRESS), slot_for(1, ADDRESS));
        let marked = |cache: &ObjectCache<()>| {
            [(1, top_slot), (2, leaf_slot), (3, leaf_slot)].map(|(id, slot)| cache.is_translated(ObjectId(id), slot))
        };
        assert_eq!(marked(&cache), [false; 3]);
        assert!(!cache.is_page_translated(page.object()) && !cache.is_node_translated(ObjectId(2)));
        let found = walk(&cache, top, ADDRESS, false, 1);
        assert_eq!(
            found,
            Walk::Page {
                page,
                writable: true,
                keeper: None
            }
        );
        assert_eq!(marked(&cache), [true, true, false]);
        let other = slot(if leaf_slot.index() == 0 { 1 } else { 0 });
        assert!(!cache.is_translated(ObjectId(2), other), "only the slot read is marked");
        // Destroying the page or a node passed must drop the translation; node 3, never
        // passed, need not.
        assert!(cache.is_page_translated(page.object()), "the page reached is mapped");
        assert_eq!([1, 2, 3].map(|id| cache.is_node_translated(ObjectId(id))), [true, true, false]);
        // By the process the walk was for (bit 0), and by another's walk too (bit 5).
        assert_eq!((cache.node_translators(ObjectId(2)), cache.page_translators(page.object())), (1, 1));
        walk(&cache, top, ADDRESS, false, 1 << 5);
        assert_eq!(cache.slot_translators(ObjectId(1), top_slot), 1 | 1 << 5);
        assert_eq!(cache.page_translators(page.object()), 1 | 1 << 5);
        cache.forget_translations();
        assert_eq!(marked(&cache), [false; 3]);
        assert!(!cache.is_page_translated(page.object()) && !cache.is_node_translated(ObjectId(1)));
    }

    #[test]
    fn other_addresses_and_addresses_beyond_the_space_miss() {
        let (cache, top, _, page) = two_level_space(ADDRESS);
        let missing = Walk::Missing { keeper: None };
        for address in [ADDRESS + 4096, ADDRESS - (1 << 17), 1 << 22, u64::MAX] {
            assert_eq!(
                walk(&cache, top, address, false, 1),
                missing,
                "{address:#x}"
            );
        }
        // No page-table entry comes of a failed walk: no node is marked, nor the page.
        for slot in (0..32).map(slot) {
            assert!(!cache.is_translated(ObjectId(1), slot));
            assert!(!cache.is_translated(ObjectId(2), slot));
        }
        assert!(!cache.is_page_translated(page.object()));
    }

    #[test]
    fn a_read_only_capability_anywhere_on_the_path_makes_the_page_read_only() {
        let (mut cache, top, leaf, page) = two_level_space(ADDRESS);
        let read_only_leaf = leaf.restricted(Rights::READ_ONLY);
        cache
            .node_mut(&top)
            .unwrap()
            .swap(slot_for(2, ADDRESS), read_only_leaf);
        assert_eq!(
            walk(&cache, top, ADDRESS, false, 1),
            Walk::Page {
                page: page.restricted(Rights::READ_ONLY),
                writable: false,
                keeper: None
            }
        );
    }

    #[test]
    fn a_write_the_path_does_not_allow_marks_nothing() {
        let (mut cache, top, leaf, page) = two_level_space(ADDRESS);
        cache.node_mut(&top).unwrap().swap(slot_for(2, ADDRESS), leaf.restricted(Rights::READ_ONLY));
        let Walk::Page { writable: false, .. } = walk(&cache, top, ADDRESS, true, 1) else { panic!("a page") };
        assert!(!cache.is_node_translated(ObjectId(1)) && !cache.is_page_translated(page.object()));
        walk(&cache, top, ADDRESS, false, 1);
        assert!(cache.is_node_translated(ObjectId(1)) && cache.is_page_translated(page.object()), "a read maps it");
    }

    #[test]
    fn a_no_execute_capability_anywhere_on_the_path_makes_the_page_not_executable() {
        let (mut cache, top, leaf, page) = two_level_space(ADDRESS);
        let Walk::Page { page: found, .. } = walk(&cache, top, ADDRESS, false, 1) else { panic!("a page") };
        assert!(found.may_execute());
        cache
            .node_mut(&top)
            .unwrap()
            .swap(slot_for(2, ADDRESS), leaf.restricted(Rights::NO_EXECUTE));
        assert_eq!(
            walk(&cache, top, ADDRESS, false, 1),
            Walk::Page {
                page: page.restricted(Rights::NO_EXECUTE),
                writable: true,
                keeper: None
            }
        );
        let Walk::Page { page: found, .. } = walk(&cache, top, ADDRESS, false, 1) else { panic!("a page") };
        assert!(!found.may_execute());
    }

    #[test]
    fn a_changed_slot_is_seen_by_the_next_walk() {
        let (mut cache, top, leaf, _) = two_level_space(ADDRESS);
        cache
            .node_mut(&leaf)
            .unwrap()
            .swap(slot_for(1, ADDRESS), Capability::VOID);
        assert_eq!(
            walk(&cache, top, ADDRESS, false, 1),
            Walk::Missing { keeper: None }
        );
    }

    #[test]
    fn a_revoked_page_or_node_ends_the_walk() {
        let (mut cache, top, _, _) = two_level_space(ADDRESS);
        cache.rescind_node(ObjectId(2));
        assert_eq!(
            walk(&cache, top, ADDRESS, false, 1),
            Walk::Missing { keeper: None }
        );
        let (mut cache, top, _, _) = two_level_space(ADDRESS);
        cache.rescind_page(ObjectId(1));
        assert_eq!(
            walk(&cache, top, ADDRESS, false, 1),
            Walk::Missing { keeper: None }
        );
    }

    #[test]
    fn a_miss_under_a_keeper_node_names_its_keeper_unless_no_call_hides_it() {
        let (mut cache, top, _, _) = two_level_space(ADDRESS);
        cache.insert_node(ObjectId(3), Version(0), Node::default());
        let keeper = Capability::new(CapType::Start, ObjectId(9), Version(0));
        let wrapper = Capability::space(ObjectId(3), Version(0), 2, true).unwrap();
        let wrapper_node = cache.node_mut(&wrapper).unwrap();
        wrapper_node.swap(slot(0), top);
        wrapper_node.swap(slot(1), keeper);
        let elsewhere = ADDRESS + 4096;
        assert_eq!(
            walk(&cache, wrapper, elsewhere, false, 1),
            Walk::Missing {
                keeper: Some(keeper)
            }
        );
        assert!(matches!(
            walk(&cache, wrapper, ADDRESS, false, 1),
            Walk::Page { keeper: Some(found), .. } if found == keeper
        ));
        let no_call = wrapper.restricted(Rights::NO_CALL);
        assert_eq!(
            walk(&cache, no_call, elsewhere, false, 1),
            Walk::Missing { keeper: None }
        );
    }

    #[test]
    fn a_cycle_of_nodes_ends_the_walk() {
        let mut cache: ObjectCache<()> = ObjectCache::new();
        cache.insert_node(ObjectId(1), Version(0), Node::default());
        let wrapper = Capability::space(ObjectId(1), Version(0), 3, true).unwrap();
        cache.node_mut(&wrapper).unwrap().swap(slot(0), wrapper);
        assert_eq!(
            walk(&cache, wrapper, 0, false, 1),
            Walk::Missing { keeper: None }
        );
    }
}
