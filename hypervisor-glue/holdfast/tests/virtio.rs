//! The kernel's virtio drivers, seen from the host: `holdfast run` with a test disk and a
//! network peer, checking what the guest did to each.
//!
//! The contracts (the guest side is `guest-kernel/kernel/src/drivers/{block,net}.rs`):
//! - A disk whose sector 0 starts with `HOLDFAST-DISK-TEST` and a little-endian u64 seed is
//!   a test disk: the guest writes sectors 1..=64 with `test_disk::pattern_byte`, flushes and reads
//!   them back. Any other disk is never written.
//! - The guest broadcasts an Ethernet frame of EtherType 0x88B5 with payload
//!   `HOLDFAST-NET-PING <nonce>` and expects `HOLDFAST-NET-PONG <nonce>` back within 3 s.
//!   QEMU's `-netdev stream` carries each frame as a 4-byte big-endian length and the bytes.
//! - Both happen only on a boot with `holdfast.device-selftest` ([`DEVICE_SELFTEST`], the test
//!   harness's word): a production boot writes no test disk and sends no frame.

mod support;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use holdfast_abi::test_disk;
use support::{DEVICE_SELFTEST, Run, boot, scratch_dir};

const SECTOR_BYTES: usize = test_disk::SECTOR_BYTES as usize;
const DISK_BYTES: usize = 1 << 20;
const TEST_MAGIC: &[u8] = test_disk::MAGIC;
const TEST_SECTORS: u64 = test_disk::SECTORS;
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const HOST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x00, 0x00, 0x01];

fn random_u64() -> u64 {
    RandomState::new().build_hasher().finish()
}

fn run_with_disk(disk: &Path) -> Run {
    boot(&["--append", DEVICE_SELFTEST, "--disk", disk.to_str().expect("UTF-8 path")])
}

/// A test disk: the magic header with `seed`, zeros after it.
fn test_disk_image(seed: u64) -> Vec<u8> {
    let mut image = vec![0u8; DISK_BYTES];
    image[..TEST_MAGIC.len()].copy_from_slice(TEST_MAGIC);
    image[TEST_MAGIC.len()..TEST_MAGIC.len() + 8].copy_from_slice(&seed.to_le_bytes());
    image
}

/// The first line of the run's stdout that starts with `prefix`.
fn line_from(run: &Run, prefix: &str) -> Option<String> {
    run.stdout
        .lines()
        .find(|line| line.starts_with(prefix))
        .map(str::to_owned)
}

#[test]
fn guest_writes_the_pattern_to_a_test_disk() {
    let directory = scratch_dir("test-disk");
    let disk = directory.join("disk.img");
    let seed = random_u64();
    let image = test_disk_image(seed);
    std::fs::write(&disk, &image).unwrap();

    let output = run_with_disk(&disk);
    let expected = format!(
        "selftest: virtio-blk: {} sectors, read host header (seed {seed}), wrote and read back 64 sectors, then read 66000 sectors 32 at a time [ok]",
        DISK_BYTES / SECTOR_BYTES
    );
    assert_eq!(
        line_from(&output, "selftest: virtio-blk:").as_deref(),
        Some(expected.as_str()),
        "{}",
        output.transcript()
    );

    let after = std::fs::read(&disk).unwrap();
    assert_eq!(after.len(), DISK_BYTES);
    assert_eq!(
        after[..SECTOR_BYTES],
        image[..SECTOR_BYTES],
        "the guest changed sector 0"
    );
    for sector in 1..=TEST_SECTORS {
        let start = sector as usize * SECTOR_BYTES;
        for offset in 0..SECTOR_BYTES {
            assert_eq!(
                after[start + offset],
                test_disk::pattern_byte(seed, sector, offset as u64),
                "sector {sector} offset {offset} (seed {seed})"
            );
        }
    }
    let beyond = (TEST_SECTORS as usize + 1) * SECTOR_BYTES;
    assert!(
        after[beyond..].iter().all(|&byte| byte == 0),
        "the guest wrote beyond sector 64"
    );
}

#[test]
fn guest_leaves_other_disks_untouched() {
    let directory = scratch_dir("plain-disk");
    let disk = directory.join("disk.img");
    let image: Vec<u8> = (0..DISK_BYTES)
        .map(|index| (index * 7 % 251) as u8)
        .collect();
    std::fs::write(&disk, &image).unwrap();

    let output = run_with_disk(&disk);
    let expected = format!(
        "selftest: virtio-blk: {} sectors, not a test disk (left untouched) [ok]",
        DISK_BYTES / SECTOR_BYTES
    );
    assert_eq!(
        line_from(&output, "selftest: virtio-blk:").as_deref(),
        Some(expected.as_str()),
        "{}",
        output.transcript()
    );
    assert!(
        std::fs::read(&disk).unwrap() == image,
        "the guest wrote to a disk that is not a test disk"
    );
}

/// What the host's end of the link saw.
#[derive(Debug, Default)]
struct PeerReport {
    connected: bool,
    /// Nonces of the well-formed pings, each answered with a pong.
    pings: Vec<String>,
    /// Frames that were not a well-formed ping, described.
    other_frames: Vec<String>,
    error: Option<String>,
}

/// Reads one stream-framed Ethernet frame; `None` at a clean end of stream.
fn read_frame(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut length = [0u8; 4];
    match stream.read_exact(&mut length) {
        Err(error) if error.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        result => result?,
    }
    let mut frame = vec![0u8; u32::from_be_bytes(length) as usize];
    stream.read_exact(&mut frame)?;
    Ok(Some(frame))
}

/// The nonce of a well-formed ping from the guest, or what is wrong with the frame.
fn ping_nonce(frame: &[u8]) -> Result<String, String> {
    let describe = || {
        format!(
            "{} bytes: {:02x?}",
            frame.len(),
            &frame[..frame.len().min(64)]
        )
    };
    if frame.len() < 14 || frame[..6] != [0xff; 6] || frame[6..12] != GUEST_MAC {
        return Err(format!(
            "not a broadcast from the guest's MAC: {}",
            describe()
        ));
    }
    if frame[12..14] != ETHERTYPE {
        return Err(format!("EtherType is not 0x88b5: {}", describe()));
    }
    let nonce = frame[14..]
        .strip_prefix(b"HOLDFAST-NET-PING ")
        .ok_or_else(|| format!("payload is not a ping: {}", describe()))?;
    let nonce = std::str::from_utf8(nonce).map_err(|_| describe())?;
    if nonce.is_empty() || !nonce.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(format!("nonce is not decimal: {}", describe()));
    }
    Ok(nonce.to_owned())
}

/// The host's end of the link: accepts QEMU's connection on `listener` (giving up once
/// `guest_done` is set), answers every ping with a pong, and stops at the end of the stream
/// (QEMU exited) or after `limit`.
fn serve_peer(listener: TcpListener, guest_done: &AtomicBool, limit: Duration) -> PeerReport {
    let mut report = PeerReport::default();
    let deadline = Instant::now() + limit;
    // Polled rather than blocking: std's accept has no timeout, and the wait must also end
    // as soon as the guest is done without QEMU having connected.
    listener.set_nonblocking(true).unwrap();
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                if guest_done.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    report.error = Some(String::from("QEMU did not connect"));
                    return report;
                }
                thread::sleep(Duration::from_millis(20));
            }
            Err(error) => {
                report.error = Some(format!("accepting QEMU's connection: {error}"));
                return report;
            }
        }
    };
    report.connected = true;
    stream.set_nonblocking(false).unwrap();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            report.error = Some(format!("still connected after {limit:?}"));
            return report;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        let frame = match read_frame(&mut stream) {
            Ok(Some(frame)) => frame,
            Ok(None) => return report,
            Err(error) => {
                report.error = Some(format!("reading a frame: {error}"));
                return report;
            }
        };
        match ping_nonce(&frame) {
            Ok(nonce) => {
                let mut pong = Vec::new();
                pong.extend_from_slice(&GUEST_MAC);
                pong.extend_from_slice(&HOST_MAC);
                pong.extend_from_slice(&ETHERTYPE);
                pong.extend_from_slice(b"HOLDFAST-NET-PONG ");
                pong.extend_from_slice(nonce.as_bytes());
                let mut message = (pong.len() as u32).to_be_bytes().to_vec();
                message.extend_from_slice(&pong);
                if let Err(error) = stream.write_all(&message) {
                    report.error = Some(format!("sending the pong: {error}"));
                    return report;
                }
                report.pings.push(nonce);
            }
            Err(what) => report.other_frames.push(what),
        }
    }
}

#[test]
fn guest_pings_and_hears_the_pong() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let guest_done = Arc::new(AtomicBool::new(false));
    let peer = thread::spawn({
        let guest_done = Arc::clone(&guest_done);
        move || serve_peer(listener, &guest_done, Duration::from_secs(240))
    });

    let output = boot(&["--append", DEVICE_SELFTEST, "--net-connect", &format!("127.0.0.1:{port}")]);
    guest_done.store(true, Ordering::Relaxed);
    let report = peer.join().expect("the peer thread ends");

    assert!(
        report.connected,
        "QEMU never connected: {report:?}\n{}",
        output.transcript()
    );
    assert!(
        !report.pings.is_empty(),
        "no ping from the guest: {report:?}\n{}",
        output.transcript()
    );
    assert!(
        report.pings.iter().all(|nonce| *nonce == report.pings[0]),
        "the guest's pings carry different nonces: {report:?}"
    );
    assert_eq!(
        line_from(&output, "selftest: virtio-net:").as_deref(),
        Some("selftest: virtio-net: mac 52:54:00:12:34:56, sent ping, received pong [ok]"),
        "peer: {report:?}\n{}",
        output.transcript()
    );
}

#[test]
fn a_production_boot_leaves_a_test_disk_untouched_and_sends_no_frame() {
    let directory = scratch_dir("production-boot");
    let disk = directory.join("disk.img");
    let image = test_disk_image(random_u64());
    std::fs::write(&disk, &image).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let guest_done = Arc::new(AtomicBool::new(false));
    let peer = thread::spawn({
        let guest_done = Arc::clone(&guest_done);
        move || serve_peer(listener, &guest_done, Duration::from_secs(240))
    });

    // No `holdfast.device-selftest`: a boot as production makes it.
    let output = boot(&["--disk", disk.to_str().expect("UTF-8 path"), "--net-connect", &format!("127.0.0.1:{port}")]);
    guest_done.store(true, Ordering::Relaxed);
    let report = peer.join().expect("the peer thread ends");

    assert_eq!(output.status, Some(0), "{}", output.transcript());
    assert!(
        output.stdout.contains("selftest: devices: not exercised (no holdfast.device-selftest)"),
        "{}",
        output.transcript()
    );
    assert_eq!(line_from(&output, "selftest: virtio-"), None, "{}", output.transcript());
    assert!(report.connected, "QEMU never connected: {report:?}\n{}", output.transcript());
    assert!(
        report.pings.is_empty() && report.other_frames.is_empty(),
        "a production boot sent frames nobody asked for: {report:?}"
    );
    assert!(std::fs::read(&disk).unwrap() == image, "a production boot wrote to a test disk");
}
