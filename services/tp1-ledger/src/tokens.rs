//! The TP1 service's tokens: one page, written by the admin service (`holdfast tp1 token`)
//! through guarded journal writes and read by the TP1 service (read-only) to check every
//! request's token. A token is a 128-bit sparse capability (Mungi's password capabilities):
//! whoever shows its bytes holds the right, so the page is the list of who may.
//!
//! Layout: magic `u64` at 0, the guard (tokens minted, a `u64`) at 8; entry `i` at
//! `64 + 64 i`: token 16 bytes, kind `u8` (0 empty, 1 client, 2 admin), name length `u8`,
//! name 32 bytes, 14 zero.

pub const PAGE_BYTES: usize = 4096;
pub const ENTRIES_MAX: usize = 63;
pub const NAME_BYTES_MAX: usize = 32;
const MAGIC: u64 = u64::from_le_bytes(*b"HFTP1TOK");
/// The guard of the admin service's writes: how many tokens it has minted.
pub const GUARD_OFFSET: u64 = 8;
const ENTRIES_OFFSET: usize = 64;
const ENTRY_BYTES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// May run transactions and read.
    Client = 1,
    /// May also load.
    Admin = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MintError {
    /// The name is empty, longer than [`NAME_BYTES_MAX`], or not printable ASCII without spaces.
    BadName,
    /// Every entry holds a token.
    Full,
}

/// The tokens in `page` of `kind`, in entry order, into `out`; returns how many. A page
/// without the magic (never written) holds none.
pub fn valid(page: &[u8; PAGE_BYTES], kind: Kind, out: &mut [[u8; 16]; ENTRIES_MAX]) -> usize {
    if u64::from_le_bytes(page[..8].try_into().expect("8 bytes")) != MAGIC {
        return 0;
    }
    let mut count = 0;
    for entry in page[ENTRIES_OFFSET..].chunks_exact(ENTRY_BYTES) {
        if entry[16] == kind as u8 {
            out[count] = entry[..16].try_into().expect("16 bytes");
            count += 1;
        }
    }
    count
}

/// The guard's value now (see [`mint`]).
pub fn guard(page: &[u8; PAGE_BYTES]) -> u64 {
    u64::from_le_bytes(page[8..16].try_into().expect("8 bytes"))
}

/// The pieces (offset in the page, bytes) that mint `token` for `name`: into the entry that
/// has the name already (minting a name again revokes its old token), else the first empty
/// one; with the header (magic, guard + 1). Write them with the guard at [`GUARD_OFFSET`]
/// expecting [`guard`]'s value.
pub fn mint(
    page: &[u8; PAGE_BYTES],
    name: &[u8],
    kind: Kind,
    token: [u8; 16],
) -> Result<[(u64, [u8; ENTRY_BYTES]); 2], MintError> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX || !name.iter().all(|byte| byte.is_ascii_graphic()) {
        return Err(MintError::BadName);
    }
    let entries = || page[ENTRIES_OFFSET..].chunks_exact(ENTRY_BYTES).enumerate();
    let named = |entry: &[u8]| entry[16] != 0 && &entry[18..18 + usize::from(entry[17]).min(NAME_BYTES_MAX)] == name;
    let slot = entries()
        .find(|(_, entry)| named(entry))
        .or_else(|| entries().find(|(_, entry)| entry[16] == 0))
        .map(|(slot, _)| slot)
        .ok_or(MintError::Full)?;
    let mut entry = [0u8; ENTRY_BYTES];
    entry[..16].copy_from_slice(&token);
    entry[16] = kind as u8;
    entry[17] = name.len() as u8;
    entry[18..18 + name.len()].copy_from_slice(name);
    let mut header = [0u8; ENTRY_BYTES];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[8..16].copy_from_slice(&(guard(page) + 1).to_le_bytes());
    Ok([(0, header), ((ENTRIES_OFFSET + slot * ENTRY_BYTES) as u64, entry)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(page: &mut [u8; PAGE_BYTES], pieces: &[(u64, [u8; ENTRY_BYTES]); 2]) {
        for (offset, bytes) in pieces {
            page[*offset as usize..*offset as usize + ENTRY_BYTES].copy_from_slice(bytes);
        }
    }

    #[test]
    fn minting_adds_replaces_by_name_and_fills_up() {
        let mut page = [0u8; PAGE_BYTES];
        let mut out = [[0; 16]; ENTRIES_MAX];
        assert_eq!(valid(&page, Kind::Client, &mut out), 0);
        let pieces = mint(&page, b"alice", Kind::Client, [1; 16]).unwrap();
        apply(&mut page, &pieces);
        let pieces = mint(&page, b"root", Kind::Admin, [2; 16]).unwrap();
        apply(&mut page, &pieces);
        assert_eq!(guard(&page), 2);
        assert_eq!((valid(&page, Kind::Client, &mut out), out[0]), (1, [1; 16]));
        assert_eq!((valid(&page, Kind::Admin, &mut out), out[0]), (1, [2; 16]));
        // Again for alice: her old token is gone.
        let pieces = mint(&page, b"alice", Kind::Client, [3; 16]).unwrap();
        apply(&mut page, &pieces);
        assert_eq!((valid(&page, Kind::Client, &mut out), out[0]), (1, [3; 16]));
        for name in [&b""[..], b"has space", &[b'x'; 33]] {
            assert_eq!(mint(&page, name, Kind::Client, [4; 16]), Err(MintError::BadName));
        }
        for index in 0..ENTRIES_MAX - 2 {
            let name = std::format!("tenant-{index}");
            let pieces = mint(&page, name.as_bytes(), Kind::Client, [5; 16]).unwrap();
        apply(&mut page, &pieces);
        }
        assert_eq!(mint(&page, b"one-more", Kind::Client, [6; 16]), Err(MintError::Full));
        assert_eq!(valid(&page, Kind::Client, &mut out), ENTRIES_MAX - 1);
    }
}
