//! A newc ("SVR4 new ASCII") cpio archive, the format Linux unpacks as its initramfs.
//!
//! The archive is built in memory and is deterministic (inode numbers in order, mtime 0,
//! owner root), so the same inputs give the same bytes and a cached copy can be compared
//! byte for byte.

use std::io::{self, Write};

use cpio::newc::{Builder, ModeFileType, trailer};

/// What one archive member is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File { contents: Vec<u8> },
    CharacterDevice { major: u32, minor: u32 },
}

/// One archive member. `path` is relative to the root, without a leading `/`, and its
/// parent directories must come earlier in the archive: Linux's unpacker does not create
/// missing parents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    /// Permission bits only (`0o755`); the file type comes from `kind`.
    pub permissions: u32,
    pub kind: EntryKind,
}

impl Entry {
    pub fn directory(path: &str, permissions: u32) -> Self {
        Self {
            path: path.to_owned(),
            permissions,
            kind: EntryKind::Directory,
        }
    }

    pub fn file(path: &str, permissions: u32, contents: Vec<u8>) -> Self {
        Self {
            path: path.to_owned(),
            permissions,
            kind: EntryKind::File { contents },
        }
    }

    pub fn character_device(path: &str, permissions: u32, major: u32, minor: u32) -> Self {
        Self {
            path: path.to_owned(),
            permissions,
            kind: EntryKind::CharacterDevice { major, minor },
        }
    }
}

/// The newc archive holding `entries` in order, followed by the `TRAILER!!!` member.
pub fn newc_archive(entries: &[Entry]) -> io::Result<Vec<u8>> {
    let mut archive = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry.path.is_empty() || entry.path.starts_with('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "archive path {:?} must be relative and non-empty",
                    entry.path
                ),
            ));
        }
        if entry.permissions & !0o7777 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: permissions {:o} carry file-type bits",
                    entry.path, entry.permissions
                ),
            ));
        }
        // Inode 0 is avoided: some unpackers treat it as "no inode".
        let ino = u32::try_from(index + 1).map_err(|_| io::Error::other("too many entries"))?;
        let builder = Builder::new(&entry.path)
            .ino(ino)
            .mode(entry.permissions)
            .uid(0)
            .gid(0)
            .mtime(0);
        let (builder, contents): (Builder, &[u8]) = match &entry.kind {
            // A directory's link count is 2 (itself and its "."), as `cpio -o` records it.
            EntryKind::Directory => (
                builder.set_mode_file_type(ModeFileType::Directory).nlink(2),
                &[],
            ),
            EntryKind::File { contents } => (
                builder.set_mode_file_type(ModeFileType::Regular),
                contents.as_slice(),
            ),
            EntryKind::CharacterDevice { major, minor } => (
                builder
                    .set_mode_file_type(ModeFileType::Char)
                    .rdev_major(*major)
                    .rdev_minor(*minor),
                &[],
            ),
        };
        let size = u32::try_from(contents.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is over 4 GiB", entry.path),
            )
        })?;
        let mut writer = builder.write(archive, size);
        writer.write_all(contents)?;
        archive = writer.finish()?;
    }
    trailer(archive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// One member as read back by the crate's reader, the way the kernel would see it.
    #[derive(Debug, PartialEq, Eq)]
    struct ReadBack {
        name: String,
        mode: u32,
        rdev: (u32, u32),
        nlink: u32,
        contents: Vec<u8>,
    }

    fn read_back(archive: &[u8]) -> Vec<ReadBack> {
        let mut members = Vec::new();
        let mut rest = archive;
        loop {
            let mut reader = cpio::newc::Reader::new(rest).expect("a valid header");
            if reader.entry().is_trailer() {
                break;
            }
            let entry = reader.entry().clone();
            let mut contents = Vec::new();
            reader.read_to_end(&mut contents).expect("member data");
            members.push(ReadBack {
                name: entry.name().to_owned(),
                mode: entry.mode(),
                rdev: (entry.rdev_major(), entry.rdev_minor()),
                nlink: entry.nlink(),
                contents,
            });
            rest = reader.finish().expect("member padding");
        }
        members
    }

    fn sample() -> Vec<Entry> {
        vec![
            Entry::directory("dev", 0o755),
            Entry::character_device("dev/console", 0o600, 5, 1),
            Entry::file("init", 0o755, b"#!/bin/sh\necho hi\n".to_vec()),
            Entry::file("odd", 0o644, b"abcde".to_vec()),
        ]
    }

    #[test]
    fn members_read_back_with_type_permissions_device_numbers_and_contents() {
        let archive = newc_archive(&sample()).unwrap();
        let members = read_back(&archive);
        assert_eq!(
            members,
            vec![
                ReadBack {
                    name: "dev".into(),
                    mode: 0o040755,
                    rdev: (0, 0),
                    nlink: 2,
                    contents: vec![]
                },
                ReadBack {
                    name: "dev/console".into(),
                    mode: 0o020600,
                    rdev: (5, 1),
                    nlink: 1,
                    contents: vec![]
                },
                ReadBack {
                    name: "init".into(),
                    mode: 0o100755,
                    rdev: (0, 0),
                    nlink: 1,
                    contents: b"#!/bin/sh\necho hi\n".to_vec()
                },
                ReadBack {
                    name: "odd".into(),
                    mode: 0o100644,
                    rdev: (0, 0),
                    nlink: 1,
                    contents: b"abcde".to_vec()
                },
            ]
        );
    }

    /// Checks the raw layout independently of the crate's reader: every header starts on a
    /// 4-byte boundary with the newc magic, hex fields say what we asked for, and the archive
    /// ends with the trailer padded to 4 bytes.
    #[test]
    fn byte_layout_follows_the_newc_format() {
        let archive = newc_archive(&sample()).unwrap();
        let field = |header: &[u8], index: usize| -> u32 {
            let at = 6 + 8 * index;
            u32::from_str_radix(std::str::from_utf8(&header[at..at + 8]).unwrap(), 16).unwrap()
        };
        let round_up_4 = |n: usize| n.div_ceil(4) * 4;
        let mut offset = 0;
        let mut names = Vec::new();
        let mut inodes = Vec::new();
        while offset < archive.len() {
            assert_eq!(offset % 4, 0, "header at {offset} is not 4-aligned");
            let header = &archive[offset..offset + 110];
            assert_eq!(&header[..6], b"070701", "newc magic at {offset}");
            let file_size = field(header, 6) as usize;
            let name_size = field(header, 11) as usize;
            assert_eq!(
                field(header, 12),
                0,
                "newc (not crc) carries a zero checksum"
            );
            assert_eq!(field(header, 2), 0, "uid");
            assert_eq!(field(header, 5), 0, "mtime");
            let name = &archive[offset + 110..offset + 110 + name_size];
            assert_eq!(name.last(), Some(&0), "name is NUL-terminated");
            let name = std::str::from_utf8(&name[..name_size - 1])
                .unwrap()
                .to_owned();
            if name == "dev/console" {
                assert_eq!(field(header, 1), 0o020600);
                assert_eq!((field(header, 9), field(header, 10)), (5, 1));
            }
            inodes.push(field(header, 0));
            names.push(name);
            let data = round_up_4(offset + 110 + name_size);
            offset = round_up_4(data + file_size);
        }
        assert_eq!(
            offset,
            archive.len(),
            "no bytes after the trailer's padding"
        );
        assert_eq!(names, ["dev", "dev/console", "init", "odd", "TRAILER!!!"]);
        assert_eq!(&inodes[..4], &[1, 2, 3, 4]);
    }

    #[test]
    fn same_entries_give_the_same_bytes() {
        assert_eq!(
            newc_archive(&sample()).unwrap(),
            newc_archive(&sample()).unwrap()
        );
    }

    #[test]
    fn absolute_paths_and_type_bits_are_refused() {
        assert!(newc_archive(&[Entry::directory("/dev", 0o755)]).is_err());
        assert!(newc_archive(&[Entry::file("init", 0o100755, vec![])]).is_err());
    }
}
