extern crate std;

use std::boxed::Box;
use std::vec::Vec;

use super::*;

fn accounts(page_limit: u64, node_limit: u64) -> Box<Accounts> {
    // Made in place: `Box::new(Accounts::empty())` builds its megabytes on the test
    // thread's stack first.
    // SAFETY: `Accounts` holds only integers, bools and arrays of them, for which zero bytes
    // are valid values, and `Accounts::empty()` sets every one to 0 or false: zeroed memory
    // is that value.
    let mut accounts = unsafe { Box::<Accounts>::new_zeroed().assume_init() };
    accounts.open_prime(page_limit, node_limit);
    accounts
}

/// Sells `count` objects of `kind` from `bank`, ids from `first`; stops at the first refusal.
fn sell(accounts: &mut Accounts, bank: u32, kind: Kind, first: u64, count: u64) -> Result<(), Refusal> {
    for id in first..first + count {
        accounts.may_sell(bank, kind)?;
        accounts.record_sale(bank, kind, id, false);
    }
    Ok(())
}

#[test]
fn a_bank_sells_up_to_its_limit_and_every_ancestor_counts() {
    let mut accounts = accounts(100, 100);
    let tenant = accounts.open(PRIME, 10, 5).unwrap();
    let child = accounts.open(tenant, 50, 50).unwrap();
    // The child's own limit is higher, but its parent's bounds it.
    assert_eq!(sell(&mut accounts, child, Kind::Page, 1, 10), Ok(()));
    assert_eq!(accounts.may_sell(child, Kind::Page), Err(Refusal::LimitReached));
    assert_eq!(accounts.may_sell(tenant, Kind::Page), Err(Refusal::LimitReached));
    assert_eq!(accounts.may_sell(child, Kind::Node), Ok(()));
    assert_eq!((accounts.bank(child).pages, accounts.bank(tenant).pages, accounts.bank(PRIME).pages), (10, 10, 10));
    // Another tenant is not touched by the first's exhaustion.
    let other = accounts.open(PRIME, 10, 5).unwrap();
    assert_eq!(sell(&mut accounts, other, Kind::Page, 100, 10), Ok(()));
}

#[test]
fn selling_back_is_checked_and_frees_the_count_and_the_id() {
    let mut accounts = accounts(100, 100);
    let a = accounts.open(PRIME, 10, 10).unwrap();
    let b = accounts.open(PRIME, 10, 10).unwrap();
    sell(&mut accounts, a, Kind::Node, 7, 1).unwrap();
    assert_eq!(accounts.check_return(b, Kind::Node, 7), Err(Refusal::NotOwned));
    assert_eq!(accounts.check_return(a, Kind::Page, 7), Err(Refusal::NotOwned), "kinds are apart");
    assert_eq!(accounts.check_return(a, Kind::Node, 7), Ok(()));
    accounts.forget(Kind::Node, 7);
    assert_eq!(accounts.bank(a).nodes, 0);
    assert_eq!(accounts.owner(Kind::Node, 7), None);
    assert_eq!(accounts.reusable_id(Kind::Node), Some(7));
    assert_eq!(accounts.reusable_id(Kind::Node), None);
}

#[test]
fn destroying_a_bank_destroys_everything_below_it_and_voids_its_badges() {
    let mut accounts = accounts(1000, 1000);
    let tenant = accounts.open(PRIME, 100, 100).unwrap();
    let child = accounts.open(tenant, 100, 100).unwrap();
    let grandchild = accounts.open(child, 100, 100).unwrap();
    let bystander = accounts.open(PRIME, 100, 100).unwrap();
    accounts.may_sell(child, Kind::Node).unwrap();
    accounts.record_sale(child, Kind::Node, 1, true);
    sell(&mut accounts, child, Kind::Page, 10, 5).unwrap();
    sell(&mut accounts, grandchild, Kind::Page, 20, 5).unwrap();
    sell(&mut accounts, tenant, Kind::Page, 30, 5).unwrap();
    sell(&mut accounts, bystander, Kind::Page, 40, 5).unwrap();
    let old_badge = accounts.badge(child);

    let mut destroyed = Vec::new();
    let count = accounts.destroy(child, |kind, id| destroyed.push((kind, id))).unwrap();
    destroyed.sort_by_key(|&(kind, id)| (kind.range_word(), id));
    let mut expected: Vec<_> = (10..15).chain(20..25).map(|id| (Kind::Page, id)).collect();
    expected.push((Kind::Node, 1));
    assert_eq!((count, destroyed), (11, expected));
    assert_eq!(accounts.bank_of(old_badge), Err(Refusal::NoSuchBank));
    assert!(!accounts.bank(grandchild).live);
    assert_eq!((accounts.bank(tenant).pages, accounts.bank(tenant).nodes), (5, 0));
    assert_eq!(accounts.bank(bystander).pages, 5);
    assert_eq!(accounts.owner(Kind::Page, 30), Some((tenant, false)));
    // The slot is used again, under a new generation: the old badge still names nothing.
    let again = accounts.open(PRIME, 1, 1).unwrap();
    assert_ne!(accounts.badge(again), old_badge);
    assert_eq!(accounts.bank_of(old_badge), Err(Refusal::NoSuchBank));
    assert_eq!(accounts.destroy(PRIME, |_, _| {}), Err(Refusal::Prime));
}

#[test]
fn forwarders_are_never_sold_back() {
    let mut accounts = accounts(10, 10);
    let bank = accounts.open(PRIME, 10, 10).unwrap();
    accounts.record_sale(bank, Kind::Node, 3, true);
    assert_eq!(accounts.check_return(bank, Kind::Node, 3), Err(Refusal::NotOwned));
}

#[test]
fn the_record_table_refuses_when_full_and_lookups_pass_removed_records() {
    let mut accounts = accounts(u64::MAX, u64::MAX);
    let bank = accounts.open(PRIME, u64::MAX, u64::MAX).unwrap();
    sell(&mut accounts, bank, Kind::Page, 1, OBJECTS_MAX as u64).unwrap();
    assert_eq!(accounts.may_sell(bank, Kind::Page), Err(Refusal::TooManyObjects));
    for id in (1..=OBJECTS_MAX as u64).step_by(2) {
        accounts.forget(Kind::Page, id);
    }
    for id in (2..=OBJECTS_MAX as u64).step_by(2) {
        assert_eq!(accounts.owner(Kind::Page, id), Some((bank, false)), "id {id}");
    }
    assert_eq!(accounts.bank(bank).pages, OBJECTS_MAX as u64 / 2);
}

#[test]
fn too_many_banks_is_a_refusal() {
    let mut accounts = accounts(10, 10);
    for _ in 1..BANKS_MAX {
        accounts.open(PRIME, 1, 1).unwrap();
    }
    assert_eq!(accounts.open(PRIME, 1, 1), Err(Refusal::TooManyBanks));
}

#[test]
fn a_destroyed_bank_gives_up_what_it_holds_after_sales_back_in_any_order() {
    let mut accounts = accounts(u64::MAX, u64::MAX);
    let doomed = accounts.open(PRIME, u64::MAX, u64::MAX).unwrap();
    let kept = accounts.open(PRIME, u64::MAX, u64::MAX).unwrap();
    // Interleaved sales, so that the two banks' records lie side by side in the table (ids
    // from 1: the kernel's first object id).
    for id in 1..1000 {
        sell(&mut accounts, if id % 3 == 0 { kept } else { doomed }, Kind::Page, id, 1).unwrap();
    }
    // Sold back from the head, the tail and the middle of the doomed bank's list.
    let sold_back = [998, 1, 500, 997, 2];
    for id in sold_back {
        accounts.check_return(doomed, Kind::Page, id).unwrap();
        accounts.forget(Kind::Page, id);
    }
    let mut destroyed = Vec::new();
    accounts.destroy(doomed, |_, id| destroyed.push(id)).unwrap();
    destroyed.sort_unstable();
    let expected: Vec<u64> = (1..1000).filter(|id| id % 3 != 0 && !sold_back.contains(id)).collect();
    assert_eq!(destroyed, expected);
    assert_eq!(accounts.bank(kept).pages, 333);
    assert!((3..1000).step_by(3).all(|id| accounts.owner(Kind::Page, id) == Some((kept, false))));
}

#[test]
fn churn_leaves_no_removed_records_for_lookups_to_pass() {
    let mut accounts = accounts(u64::MAX, u64::MAX);
    // Banks made and destroyed, each holding a process's worth of objects, as a
    // constructor's yields do: ids move on, so the records land all over the table.
    for round in 0..2000u64 {
        let bank = accounts.open(PRIME, u64::MAX, u64::MAX).unwrap();
        sell(&mut accounts, bank, Kind::Node, 1 + round * 40, 40).unwrap();
        accounts.destroy(bank, |_, _| {}).unwrap();
    }
    assert_eq!(accounts.held, 0);
    assert!(accounts.records.iter().all(|record| record.key == 0), "every slot is empty again");
}

#[test]
fn only_the_parent_sets_a_childs_limits_and_a_lower_limit_stops_sales() {
    let mut accounts = accounts(u64::MAX, u64::MAX);
    let parent = accounts.open(PRIME, 100, 100).unwrap();
    let child = accounts.open(parent, 10, 10).unwrap();
    let grandchild = accounts.open(child, 10, 10).unwrap();
    sell(&mut accounts, child, Kind::Page, 1, 4).unwrap();
    // Raised by its parent: the child sells up to the new limit, and its parent's still bounds it.
    accounts.set_limits(parent, child, 200, 20).unwrap();
    assert_eq!((accounts.bank(child).page_limit, accounts.bank(child).node_limit), (200, 20));
    assert_eq!(sell(&mut accounts, child, Kind::Page, 5, 200), Err(Refusal::LimitReached));
    assert_eq!(accounts.bank(parent).pages, 100);
    // Lowered below what it holds: nothing more is sold, nothing held is taken away.
    accounts.set_limits(parent, child, 50, 20).unwrap();
    assert_eq!(accounts.may_sell(child, Kind::Page), Err(Refusal::LimitReached));
    assert_eq!(accounts.bank(child).pages, 100);
    // Not by itself, a grandparent, a sibling or the prime bank's holder of another bank.
    assert_eq!(accounts.set_limits(child, child, 1000, 1000), Err(Refusal::NotOwned));
    assert_eq!(accounts.set_limits(PRIME, child, 1000, 1000), Err(Refusal::NotOwned));
    assert_eq!(accounts.set_limits(grandchild, child, 1000, 1000), Err(Refusal::NotOwned));
    assert_eq!(accounts.set_limits(parent, PRIME, 1000, 1000), Err(Refusal::NotOwned));
    assert_eq!(accounts.bank(child).page_limit, 50);
    // A destroyed bank has no limits to set.
    accounts.destroy(child, |_, _| {}).unwrap();
    assert_eq!(accounts.set_limits(parent, child, 1, 1), Err(Refusal::NoSuchBank));
    assert_eq!(accounts.set_limits(parent, u32::MAX, 1, 1), Err(Refusal::NoSuchBank));
}

#[test]
fn a_banks_forwarder_names_the_bank() {
    let mut accounts = accounts(u64::MAX, u64::MAX);
    let bank = accounts.open(PRIME, 10, 10).unwrap();
    accounts.record_sale(bank, Kind::Node, 7, true);
    accounts.record_sale(bank, Kind::Node, 8, false);
    assert_eq!(accounts.bank_forwarded_by(7), Some(bank));
    assert_eq!(accounts.bank_forwarded_by(8), None, "a node it sold is not its forwarder");
    assert_eq!(accounts.bank_forwarded_by(9), None);
}
