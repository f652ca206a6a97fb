//! The TP1 services' tokens: pages written by the admin service (`holdfast tp1 token`)
//! through guarded journal writes and read by the TP1 services (read-only) to check every
//! request's token. A token is a 128-bit sparse capability (Mungi's password capabilities):
//! whoever shows its bytes holds the right, so a page is the list of who may.
//!
//! Each token opens one database: the appliance's own, or a tenant's (its own TP1 service,
//! made for it by a constructor). The appliance's page holds every owner's tokens: the
//! appliance's service serves its own and hands a connection whose first request carries a
//! tenant's token to that tenant's service. Each tenant's service reads a page of its own
//! instead, which holds only that tenant's tokens (the admin service mints a tenant's token
//! into both pages, the tenant's first, so that a token that routes is always served): a
//! tenant's service can read no other owner's token. Revoking a tenant clears its entries
//! from both ([`revoke`]).
//!
//! Layout: magic `u64` at 0, the guard (writes made, a `u64`) at 8; entry `i` at
//! `64 + 64 i`: token 16 bytes, kind `u8` (0 empty, 1 client, 2 admin), name length `u8`,
//! name 32 bytes, owner `u8` (0 the appliance, `n + 1` the tenant of compartment `n`), 13
//! zero.

pub const PAGE_BYTES: usize = 4096;
pub const ENTRIES_MAX: usize = 63;
pub const NAME_BYTES_MAX: usize = 32;
const MAGIC: u64 = u64::from_le_bytes(*b"HFTP1TOK");
/// The guard of the admin service's writes: how many it has made.
pub const GUARD_OFFSET: u64 = 8;
const ENTRIES_OFFSET: usize = 64;
const ENTRY_BYTES: usize = 64;
const KIND_AT: usize = 16;
const NAME_LENGTH_AT: usize = 17;
const NAME_AT: usize = 18;
const OWNER_AT: usize = NAME_AT + NAME_BYTES_MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// May run transactions and read.
    Client = 1,
    /// May also load.
    Admin = 2,
}

/// Whose database a token opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The appliance's own TP1 service's.
    Appliance,
    /// The tenant of this compartment number's (services/keysafe).
    Tenant(u8),
}

impl Owner {
    /// The entry's owner byte; `None` for compartment 255, which has none (n + 1 would
    /// wrap to the appliance's 0).
    fn encode(self) -> Option<u8> {
        match self {
            Owner::Appliance => Some(0),
            Owner::Tenant(compartment) => compartment.checked_add(1),
        }
    }

    fn decode(byte: u8) -> Self {
        match byte {
            0 => Owner::Appliance,
            byte => Owner::Tenant(byte - 1),
        }
    }
}

/// What a valid token may do, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub kind: Kind,
    pub owner: Owner,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MintError {
    /// The name is empty, longer than [`NAME_BYTES_MAX`], or not printable ASCII without spaces.
    BadName,
    /// Every entry holds a token.
    Full,
    /// A tenant's compartment number is above 254.
    BadOwner,
}

/// The valid tokens in `page`, in entry order, into `tokens`, and what each grants into
/// `grants`; returns how many. A page without the magic (never written) holds none.
pub fn valid(page: &[u8; PAGE_BYTES], tokens: &mut [[u8; 16]; ENTRIES_MAX], grants: &mut [Grant; ENTRIES_MAX]) -> usize {
    if u64::from_le_bytes(page[..8].try_into().expect("8 bytes")) != MAGIC {
        return 0;
    }
    let mut count = 0;
    for entry in page[ENTRIES_OFFSET..].chunks_exact(ENTRY_BYTES) {
        let kind = match entry[KIND_AT] {
            1 => Kind::Client,
            2 => Kind::Admin,
            _ => continue,
        };
        tokens[count] = entry[..16].try_into().expect("16 bytes");
        grants[count] = Grant { kind, owner: Owner::decode(entry[OWNER_AT]) };
        count += 1;
    }
    count
}

/// The guard's value now (see [`mint`]).
pub fn guard(page: &[u8; PAGE_BYTES]) -> u64 {
    u64::from_le_bytes(page[8..16].try_into().expect("8 bytes"))
}

/// The pieces (offset in the page, bytes) of one write: the header (magic, guard + 1) and
/// one entry.
pub type Pieces = [(u64, [u8; ENTRY_BYTES]); 2];

fn pieces(page: &[u8; PAGE_BYTES], slot: usize, entry: [u8; ENTRY_BYTES]) -> Pieces {
    let mut header = [0u8; ENTRY_BYTES];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[8..16].copy_from_slice(&(guard(page) + 1).to_le_bytes());
    [(0, header), ((ENTRIES_OFFSET + slot * ENTRY_BYTES) as u64, entry)]
}

fn entries(page: &[u8; PAGE_BYTES]) -> impl Iterator<Item = (usize, &[u8])> {
    page[ENTRIES_OFFSET..].chunks_exact(ENTRY_BYTES).enumerate()
}

/// The pieces that mint `token` for `name` of `owner`: into the entry of that owner that has
/// the name already (minting a name again revokes its old token), else the first empty one.
/// Write them with the guard at [`GUARD_OFFSET`] expecting [`guard`]'s value.
pub fn mint(page: &[u8; PAGE_BYTES], name: &[u8], kind: Kind, owner: Owner, token: [u8; 16]) -> Result<Pieces, MintError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX || !name.iter().all(|byte| byte.is_ascii_graphic()) {
        return Err(MintError::BadName);
    }
    let Some(owner_byte) = owner.encode() else {
        return Err(MintError::BadOwner);
    };
    let named = |entry: &[u8]| {
        entry[KIND_AT] != 0
            && entry[OWNER_AT] == owner_byte
            && &entry[NAME_AT..NAME_AT + usize::from(entry[NAME_LENGTH_AT]).min(NAME_BYTES_MAX)] == name
    };
    let slot = entries(page)
        .find(|(_, entry)| named(entry))
        .or_else(|| entries(page).find(|(_, entry)| entry[KIND_AT] == 0))
        .map(|(slot, _)| slot)
        .ok_or(MintError::Full)?;
    let mut entry = [0u8; ENTRY_BYTES];
    entry[..16].copy_from_slice(&token);
    entry[KIND_AT] = kind as u8;
    entry[NAME_LENGTH_AT] = name.len() as u8;
    entry[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
    entry[OWNER_AT] = owner_byte;
    Ok(pieces(page, slot, entry))
}

/// The pieces that clear one token of `owner`'s, if any is left: write them as [`mint`]'s,
/// and again until this says `None` (a revoked tenant's tokens).
pub fn revoke(page: &[u8; PAGE_BYTES], owner: Owner) -> Option<Pieces> {
    let owner_byte = owner.encode()?;
    let (slot, _) = entries(page).find(|(_, entry)| entry[KIND_AT] != 0 && entry[OWNER_AT] == owner_byte)?;
    Some(pieces(page, slot, [0; ENTRY_BYTES]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(page: &mut [u8; PAGE_BYTES], pieces: &Pieces) {
        for (offset, bytes) in pieces {
            page[*offset as usize..*offset as usize + ENTRY_BYTES].copy_from_slice(bytes);
        }
    }

    fn read(page: &[u8; PAGE_BYTES]) -> std::vec::Vec<([u8; 16], Grant)> {
        let mut tokens = [[0; 16]; ENTRIES_MAX];
        let mut grants = [Grant { kind: Kind::Client, owner: Owner::Appliance }; ENTRIES_MAX];
        let count = valid(page, &mut tokens, &mut grants);
        tokens.into_iter().zip(grants).take(count).collect()
    }

    const CLIENT: Grant = Grant { kind: Kind::Client, owner: Owner::Appliance };
    const ADMIN: Grant = Grant { kind: Kind::Admin, owner: Owner::Appliance };

    #[test]
    fn minting_adds_replaces_by_name_and_fills_up() {
        let mut page = [0u8; PAGE_BYTES];
        assert!(read(&page).is_empty());
        let pieces = mint(&page, b"alice", Kind::Client, Owner::Appliance, [1; 16]).unwrap();
        apply(&mut page, &pieces);
        let pieces = mint(&page, b"root", Kind::Admin, Owner::Appliance, [2; 16]).unwrap();
        apply(&mut page, &pieces);
        assert_eq!(guard(&page), 2);
        assert_eq!(read(&page), [([1; 16], CLIENT), ([2; 16], ADMIN)]);
        // Again for alice: her old token is gone.
        let pieces = mint(&page, b"alice", Kind::Client, Owner::Appliance, [3; 16]).unwrap();
        apply(&mut page, &pieces);
        assert_eq!(read(&page), [([3; 16], CLIENT), ([2; 16], ADMIN)]);
        for name in [&b""[..], b"has space", &[b'x'; 33]] {
            assert_eq!(mint(&page, name, Kind::Client, Owner::Appliance, [4; 16]), Err(MintError::BadName));
        }
        for index in 0..ENTRIES_MAX - 2 {
            let name = std::format!("tenant-{index}");
            let pieces = mint(&page, name.as_bytes(), Kind::Client, Owner::Appliance, [5; 16]).unwrap();
            apply(&mut page, &pieces);
        }
        assert_eq!(mint(&page, b"one-more", Kind::Client, Owner::Appliance, [6; 16]), Err(MintError::Full));
        assert_eq!(read(&page).len(), ENTRIES_MAX);
    }

    #[test]
    fn a_tenants_tokens_are_its_own_and_go_with_it() {
        let mut page = [0u8; PAGE_BYTES];
        let acme = Owner::Tenant(0);
        let globex = Owner::Tenant(3);
        let pieces = mint(&page, b"alice", Kind::Client, Owner::Appliance, [1; 16]).unwrap();
        apply(&mut page, &pieces);
        // The same name for two owners: two entries, neither replacing the other.
        let pieces = mint(&page, b"alice", Kind::Admin, acme, [2; 16]).unwrap();
        apply(&mut page, &pieces);
        let pieces = mint(&page, b"bob", Kind::Client, acme, [3; 16]).unwrap();
        apply(&mut page, &pieces);
        let pieces = mint(&page, b"carol", Kind::Client, globex, [4; 16]).unwrap();
        apply(&mut page, &pieces);
        assert_eq!(
            read(&page),
            [
                ([1; 16], CLIENT),
                ([2; 16], Grant { kind: Kind::Admin, owner: acme }),
                ([3; 16], Grant { kind: Kind::Client, owner: acme }),
                ([4; 16], Grant { kind: Kind::Client, owner: globex }),
            ]
        );
        let mut writes = 0;
        while let Some(pieces) = revoke(&page, acme) {
            apply(&mut page, &pieces);
            writes += 1;
        }
        assert_eq!(writes, 2);
        assert_eq!(guard(&page), 6);
        assert_eq!(read(&page), [([1; 16], CLIENT), ([4; 16], Grant { kind: Kind::Client, owner: globex })]);
        // Its freed entries are reused.
        let pieces = mint(&page, b"dave", Kind::Client, globex, [5; 16]).unwrap();
        apply(&mut page, &pieces);
        assert_eq!(read(&page)[1].0, [5; 16]);
        assert_eq!(mint(&page, b"eve", Kind::Client, Owner::Tenant(u8::MAX), [6; 16]), Err(MintError::BadOwner));
        // Compartment 255 owns nothing: revoking it never touches the appliance's tokens.
        assert_eq!(revoke(&page, Owner::Tenant(u8::MAX)), None);
    }

    /// The admin service's writes for two tenants and the appliance, each tenant's token
    /// minted into its own page and then the appliance's: a tenant's page holds its own
    /// tokens only, the appliance's all of them (it routes by them), and a revocation
    /// clears the tenant's from both.
    #[test]
    fn a_tenants_own_page_holds_its_tokens_only() {
        let acme = Owner::Tenant(0);
        let globex = Owner::Tenant(1);
        let mut shared = [0u8; PAGE_BYTES];
        let mut pages = [[0u8; PAGE_BYTES]; 2];
        let mut mint_both = |name: &[u8], kind: Kind, owner: Owner, token: [u8; 16]| {
            if let Owner::Tenant(number) = owner {
                let own = &mut pages[usize::from(number)];
                let pieces = mint(own, name, kind, owner, token).unwrap();
                apply(own, &pieces);
            }
            let pieces = mint(&shared, name, kind, owner, token).unwrap();
            apply(&mut shared, &pieces);
        };
        mint_both(b"root", Kind::Admin, Owner::Appliance, [1; 16]);
        mint_both(b"root", Kind::Admin, acme, [2; 16]);
        mint_both(b"root", Kind::Admin, globex, [3; 16]);
        mint_both(b"alice", Kind::Client, acme, [4; 16]);
        // Again for acme's root: replaced in both pages, not added to either.
        mint_both(b"root", Kind::Admin, acme, [5; 16]);
        let [mut acme_page, globex_page] = pages;
        assert_eq!(read(&acme_page), [([5; 16], Grant { kind: Kind::Admin, owner: acme }), ([4; 16], Grant { kind: Kind::Client, owner: acme })]);
        assert_eq!(read(&globex_page), [([3; 16], Grant { kind: Kind::Admin, owner: globex })]);
        assert_eq!(read(&shared).len(), 4);
        assert!(read(&shared).iter().any(|(token, _)| *token == [3; 16]));
        for page in [&mut shared, &mut acme_page] {
            while let Some(pieces) = revoke(page, acme) {
                apply(page, &pieces);
            }
        }
        assert!(read(&acme_page).is_empty());
        assert_eq!(read(&shared), [([1; 16], ADMIN), ([3; 16], Grant { kind: Kind::Admin, owner: globex })]);
        assert_eq!(read(&globex_page).len(), 1);
    }
}
