//! The link relay: each VM's replication NIC is a QEMU `-netdev stream` client of a socket
//! the supervisor listens on, and the supervisor copies every frame from one VM to the
//! other, reading each in passing (heartbeats are what `pair status` shows and what failure
//! detection watches) and never altering it.
//!
//! On the socket QEMU frames each Ethernet frame as a 4-byte big-endian length, then the
//! frame. A link frame is a 14-byte Ethernet header (broadcast destination, the sender's
//! link MAC, EtherType [`wire::ETHERTYPE`]) and one replication message.
//!
//! Test aids (`holdfast pair link NAME cut|restore|hold-ms N`) act here, on the host side
//! of the link: a cut drops every frame between the VMs, a hold delays each by N ms. The
//! supervisor's own messages (Promote, SetMode, Degrade) are not subject to either: they
//! stand for the supervisor's path to each VM, not the link between them.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use holdfast_replication::wire::{self, Message};

pub const ETHERNET_HEADER_BYTES: usize = 14;
/// The link MAC addresses' first five bytes (`holdfast_qemu::command_line::LINK_MAC_PREFIX`);
/// the sixth is the node (1, 2), or 0 for the supervisor.
const LINK_MAC_PREFIX: [u8; 5] = [0x52, 0x54, 0x00, 0x48, 0x46];
const BROADCAST: [u8; 6] = [0xff; 6];
/// The longest frame the relay accepts: QEMU's stream netdev sends at most its 68 KiB
/// buffer; a length above this is a stream out of step, not a frame, and ends the
/// connection.
pub const FRAME_BYTES_MAX: usize = 69_632;

pub fn link_mac(node: u8) -> [u8; 6] {
    let mut mac = [0u8; 6];
    mac[..5].copy_from_slice(&LINK_MAC_PREFIX);
    mac[5] = node;
    mac
}

/// `message` as a link frame from the supervisor (MAC `...:00`), without the stream's
/// length prefix.
pub fn supervisor_frame(message: &Message) -> Vec<u8> {
    let mut frame = vec![0u8; ETHERNET_HEADER_BYTES + wire::MESSAGE_BYTES_MAX];
    frame[0..6].copy_from_slice(&BROADCAST);
    frame[6..12].copy_from_slice(&link_mac(0));
    frame[12..14].copy_from_slice(&wire::ETHERTYPE.to_be_bytes());
    let length = message.encode(&mut frame[ETHERNET_HEADER_BYTES..]);
    frame.truncate(ETHERNET_HEADER_BYTES + length);
    frame
}

/// `frame` with the stream socket's length prefix.
pub fn length_prefixed(frame: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(4 + frame.len());
    bytes.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    bytes.extend_from_slice(frame);
    bytes
}

/// Why a frame is not a link message.
#[derive(Debug, PartialEq, Eq)]
pub enum Damage {
    Ethernet(&'static str),
    Message(wire::WireError),
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ethernet(why) => f.write_str(why),
            Self::Message(error) => write!(f, "{error}"),
        }
    }
}

/// The message a link frame carries, or why it carries none.
pub fn inspect(frame: &[u8]) -> Result<Message<'_>, Damage> {
    if frame.len() < ETHERNET_HEADER_BYTES {
        return Err(Damage::Ethernet("shorter than an Ethernet header"));
    }
    if u16::from_be_bytes([frame[12], frame[13]]) != wire::ETHERTYPE {
        return Err(Damage::Ethernet("not the replication EtherType"));
    }
    Message::decode(&frame[ETHERNET_HEADER_BYTES..]).map_err(Damage::Message)
}

/// Splits the bytes of a stream socket into frames, however the reads cut them.
#[derive(Default)]
pub struct FrameReader {
    buffer: Vec<u8>,
}

impl FrameReader {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole frame, `None` until one has arrived, or an error for a length no
    /// frame has (the stream is out of step: nothing after it can be trusted).
    pub fn next_frame(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(prefix) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let length = u32::from_be_bytes(prefix.try_into().expect("4 bytes")) as usize;
        if length > FRAME_BYTES_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a frame length of {length} bytes (at most {FRAME_BYTES_MAX})"),
            ));
        }
        if self.buffer.len() < 4 + length {
            return Ok(None);
        }
        let frame = self.buffer[4..4 + length].to_vec();
        self.buffer.drain(..4 + length);
        Ok(Some(frame))
    }
}

/// What the link's test aids do now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkSettings {
    pub cut: bool,
    pub hold_ms: u64,
    /// A node (by index) cut off from everything: its frames are dropped before the
    /// supervisor reads them, and nothing reaches it, as in a partition of its host.
    pub isolated: Option<usize>,
}

impl LinkSettings {
    pub fn describe(&self) -> String {
        let mut text = if self.cut { "CUT".to_owned() } else { format!("relaying, each frame held {} ms", self.hold_ms) };
        if let Some(index) = self.isolated {
            text.push_str(&format!("; node {} ISOLATED", index + 1));
        }
        text
    }
}

/// The frames the relay has seen, by fate.
#[derive(Default)]
pub struct LinkCounters {
    pub relayed: AtomicU64,
    /// Dropped by a cut or an isolation.
    pub cut: AtomicU64,
    /// Not a link message (bad Ethernet header, bad checksum, another version...).
    pub damaged: AtomicU64,
    /// For a VM whose link socket is not connected (not yet, or no more).
    pub undeliverable: AtomicU64,
}

/// A frame on its way to one VM: when to write it, and its bytes with the length prefix.
type Queued = (Instant, Vec<u8>);

/// The writer of one VM's link socket: a thread that writes each frame at its time, in
/// order.
pub struct Outbox {
    queue: Sender<Queued>,
    alive: Arc<AtomicBool>,
}

/// Bytes of frames an outbox writes at once at most: the frames queued and due when it
/// wakes go out in one write, so that a checkpoint's burst of block frames costs a system
/// call (and a wakeup of the VM's QEMU) per batch rather than per 4 KiB frame.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;

impl Outbox {
    pub fn start(mut socket: impl Write + Send + 'static) -> io::Result<Self> {
        let (queue, frames): (Sender<Queued>, Receiver<Queued>) = mpsc::channel();
        let alive = Arc::new(AtomicBool::new(true));
        let writer_alive = Arc::clone(&alive);
        thread::Builder::new().name("pair-link-out".into()).spawn(move || {
            let mut batch = Vec::with_capacity(WRITE_BATCH_BYTES_MAX);
            let mut next = frames.recv().ok();
            while let Some((due, bytes)) = next.take() {
                let wait = due.saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    thread::sleep(wait);
                }
                batch.clear();
                batch.extend_from_slice(&bytes);
                // Frames queued behind it that are due too; one not yet due (a hold) waits
                // for its own turn.
                while batch.len() < WRITE_BATCH_BYTES_MAX {
                    match frames.try_recv() {
                        Ok((due, bytes)) if due <= Instant::now() => batch.extend_from_slice(&bytes),
                        Ok(later) => {
                            next = Some(later);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                if socket.write_all(&batch).and_then(|()| socket.flush()).is_err() {
                    break;
                }
                if next.is_none() {
                    next = frames.recv().ok();
                }
            }
            writer_alive.store(false, Ordering::Release);
        })?;
        Ok(Self { queue, alive })
    }

    /// Queues `frame` (without its prefix) to be written at `due`; false if the socket is
    /// gone.
    pub fn send(&self, due: Instant, frame: &[u8]) -> bool {
        self.alive.load(Ordering::Acquire) && self.queue.send((due, length_prefixed(frame))).is_ok()
    }
}

/// The link between the two VMs of a pair: their outboxes, the test aids and the counters.
/// Nodes are numbered by index, 0 and 1 (the VMs' numbers 1 and 2).
#[derive(Default)]
pub struct Link {
    outboxes: [Mutex<Option<Outbox>>; 2],
    settings: Mutex<LinkSettings>,
    pub counters: LinkCounters,
}

impl Link {
    pub fn settings(&self) -> LinkSettings {
        *self.settings.lock().expect("link settings")
    }

    pub fn set(&self, settings: LinkSettings) {
        *self.settings.lock().expect("link settings") = settings;
    }

    /// The writer of node `index`'s socket, once it has connected (`None`: it is gone).
    pub fn attach(&self, index: usize, outbox: Option<Outbox>) {
        *self.outboxes[index].lock().expect("outbox") = outbox;
    }

    /// Sends a frame of the supervisor's to node `index` at once (neither cut nor held).
    pub fn send_from_supervisor(&self, index: usize, message: &Message) -> bool {
        let frame = supervisor_frame(message);
        self.deliver(index, Instant::now(), &frame)
    }

    fn deliver(&self, index: usize, due: Instant, frame: &[u8]) -> bool {
        if self.settings().isolated == Some(index) {
            self.counters.cut.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let outbox = self.outboxes[index].lock().expect("outbox");
        let sent = outbox.as_ref().is_some_and(|outbox| outbox.send(due, frame));
        if !sent {
            self.counters.undeliverable.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Reads node `from`'s frames from `source` until it closes, hands each message to
    /// `observe` and relays the frame to the other node, unless it is damaged (counted, handed
    /// to `damaged` and not relayed) or the link is cut (dropped). Returns why it stopped.
    pub fn relay_from(
        &self,
        from: usize,
        mut source: impl Read,
        mut observe: impl FnMut(&Message),
        mut damaged: impl FnMut(&Damage),
    ) -> io::Error {
        let to = 1 - from;
        let mut reader = FrameReader::default();
        // Large enough for a burst of block frames in one read.
        let mut buffer = vec![0u8; 256 * 1024];
        loop {
            let length = match source.read(&mut buffer) {
                Ok(0) => return io::Error::new(io::ErrorKind::UnexpectedEof, "the VM closed its link socket"),
                Ok(length) => length,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return error,
            };
            let received_at = Instant::now();
            reader.push(&buffer[..length]);
            loop {
                let frame = match reader.next_frame() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(error) => return error,
                };
                if self.settings().isolated == Some(from) {
                    self.counters.cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                match inspect(&frame) {
                    Ok(message) => observe(&message),
                    Err(damage) => {
                        self.counters.damaged.fetch_add(1, Ordering::Relaxed);
                        damaged(&damage);
                        continue;
                    }
                }
                let settings = self.settings();
                if settings.cut {
                    self.counters.cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let due = received_at + Duration::from_millis(settings.hold_ms);
                if self.deliver(to, due, &frame) {
                    self.counters.relayed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_replication::wire::Kind;

    fn frame_from(node: u8, message: &Message) -> Vec<u8> {
        let mut frame = supervisor_frame(message);
        frame[6..12].copy_from_slice(&link_mac(node));
        frame
    }

    /// A reader that hands out its bytes a few at a time, as a socket may.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.step = self.step % 7 + 1;
            let length = self.step.min(out.len()).min(self.bytes.len() - self.at);
            out[..length].copy_from_slice(&self.bytes[self.at..self.at + length]);
            self.at += length;
            Ok(length)
        }
    }

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        /// The frames written so far, waiting up to `within` for at least `count`.
        fn frames(&self, count: usize, within: Duration) -> Vec<Vec<u8>> {
            let deadline = Instant::now() + within;
            loop {
                let mut reader = FrameReader::default();
                reader.push(&self.0.lock().unwrap());
                let mut frames = Vec::new();
                while let Some(frame) = reader.next_frame().unwrap() {
                    frames.push(frame);
                }
                if frames.len() >= count || Instant::now() >= deadline {
                    return frames;
                }
                thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn link_to_node_1() -> (Link, Shared) {
        let link = Link::default();
        let written = Shared::default();
        link.attach(1, Some(Outbox::start(written.clone()).unwrap()));
        (link, written)
    }

    fn stream_of(frames: &[Vec<u8>]) -> Vec<u8> {
        frames.iter().flat_map(|frame| length_prefixed(frame)).collect()
    }

    #[test]
    fn frames_cut_anywhere_by_reads_are_relayed_whole_and_observed() {
        let (link, written) = link_to_node_1();
        let frames: Vec<Vec<u8>> = (0..20u64).map(|sequence| frame_from(1, &Message::new(Kind::Flush, 7, sequence, 0))).collect();
        let mut seen = Vec::new();
        let stopped = link.relay_from(0, Trickle { bytes: stream_of(&frames), at: 0, step: 0 }, |message| seen.push(message.sequence), |_| {});
        assert_eq!(stopped.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert_eq!(written.frames(20, Duration::from_secs(10)), frames);
        assert_eq!(link.counters.relayed.load(Ordering::Relaxed), 20);
    }

    #[test]
    fn a_damaged_frame_is_counted_reported_with_its_reason_and_not_relayed() {
        let (link, written) = link_to_node_1();
        let good = frame_from(1, &Message::new(Kind::Ack, 1, 2, 3));
        let mut damaged = good.clone();
        *damaged.last_mut().unwrap() ^= 0x40;
        let mut other_ethertype = good.clone();
        other_ethertype[12] = 0x08;
        let frames = [damaged, good.clone(), other_ethertype, vec![1, 2, 3]];
        let (mut observed, mut reasons) = (0, Vec::new());
        link.relay_from(0, io::Cursor::new(stream_of(&frames)), |_| observed += 1, |damage| reasons.push(damage.to_string()));
        assert_eq!(observed, 1);
        assert_eq!(link.counters.damaged.load(Ordering::Relaxed), 3);
        assert_eq!(reasons, ["checksum mismatch", "not the replication EtherType", "shorter than an Ethernet header"]);
        assert_eq!(written.frames(1, Duration::from_secs(10)), vec![good]);
    }

    #[test]
    fn a_cut_drops_frames_but_the_supervisor_still_reads_them() {
        let (link, written) = link_to_node_1();
        link.set(LinkSettings { cut: true, ..LinkSettings::default() });
        let heartbeat = frame_from(1, &Message::new(Kind::Heartbeat, 1, 0, 0));
        let mut observed = 0;
        link.relay_from(0, io::Cursor::new(stream_of(&[heartbeat.clone(), heartbeat.clone()])), |_| observed += 1, |_| {});
        assert_eq!(observed, 2);
        assert_eq!(link.counters.cut.load(Ordering::Relaxed), 2);
        // The supervisor's own messages still go through.
        assert!(link.send_from_supervisor(1, &Message::new(Kind::Degrade, 0, 1, 0)));
        let frames = written.frames(1, Duration::from_secs(10));
        assert_eq!(frames.len(), 1);
        assert_eq!(inspect(&frames[0]).unwrap().kind, Kind::Degrade);
        assert_eq!(&frames[0][6..12], &link_mac(0));

        link.set(LinkSettings::default());
        link.relay_from(0, io::Cursor::new(stream_of(&[heartbeat])), |_| {}, |_| {});
        assert_eq!(written.frames(2, Duration::from_secs(10)).len(), 2, "a restored link relays again");
    }

    #[test]
    fn an_isolated_node_is_heard_by_no_one_and_reached_by_nothing() {
        let (link, written) = link_to_node_1();
        let heartbeat = frame_from(1, &Message::new(Kind::Heartbeat, 1, 0, 0));
        link.set(LinkSettings { isolated: Some(0), ..LinkSettings::default() });
        let mut observed = 0;
        link.relay_from(0, io::Cursor::new(stream_of(std::slice::from_ref(&heartbeat))), |_| observed += 1, |_| {});
        assert_eq!(observed, 0, "the supervisor must not hear an isolated node");
        // Node 1 is not isolated: it is heard, but nothing of it reaches node 0.
        link.set(LinkSettings { isolated: Some(1), ..LinkSettings::default() });
        assert!(!link.send_from_supervisor(1, &Message::new(Kind::Degrade, 0, 1, 0)));
        link.relay_from(0, io::Cursor::new(stream_of(&[heartbeat])), |_| observed += 1, |_| {});
        assert_eq!(observed, 1);
        assert_eq!(link.counters.cut.load(Ordering::Relaxed), 3);
        assert!(written.frames(1, Duration::from_millis(300)).is_empty());
    }

    #[test]
    fn a_hold_delays_each_frame_in_order() {
        let (link, written) = link_to_node_1();
        link.set(LinkSettings { hold_ms: 300, ..LinkSettings::default() });
        let frames: Vec<Vec<u8>> = (0..3u64).map(|sequence| frame_from(1, &Message::new(Kind::Flush, 7, sequence, 0))).collect();
        let started = Instant::now();
        link.relay_from(0, io::Cursor::new(stream_of(&frames)), |_| {}, |_| {});
        assert!(written.frames(1, Duration::ZERO).is_empty(), "a held frame went out at once");
        assert_eq!(written.frames(3, Duration::from_secs(10)), frames);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    /// A socket that counts its writes and takes its time over the first.
    #[derive(Clone, Default)]
    struct Slow {
        written: Shared,
        writes: Arc<AtomicU64>,
    }

    impl Write for Slow {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            if self.writes.fetch_add(1, Ordering::Relaxed) == 0 {
                thread::sleep(Duration::from_millis(200));
            }
            self.written.write(bytes)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn frames_queued_while_a_write_is_under_way_go_out_together_in_order() {
        let socket = Slow::default();
        let link = Link::default();
        link.attach(1, Some(Outbox::start(socket.clone()).unwrap()));
        let frames: Vec<Vec<u8>> = (0..50u64).map(|sequence| frame_from(1, &Message::new(Kind::Flush, 7, sequence, 0))).collect();
        link.relay_from(0, io::Cursor::new(stream_of(&frames)), |_| {}, |_| {});
        assert_eq!(socket.written.frames(50, Duration::from_secs(10)), frames);
        // The first write takes what was queued when the writer woke (at least the first
        // frame); the next takes everything queued behind it meanwhile.
        let writes = socket.writes.load(Ordering::Relaxed);
        assert!((1..=2).contains(&writes), "50 frames in {writes} writes");
    }

    #[test]
    fn frames_for_a_vm_not_connected_are_counted() {
        let link = Link::default();
        let frame = frame_from(1, &Message::new(Kind::Flush, 7, 1, 0));
        link.relay_from(0, io::Cursor::new(stream_of(&[frame])), |_| {}, |_| {});
        assert_eq!(link.counters.undeliverable.load(Ordering::Relaxed), 1);
        assert_eq!(link.counters.relayed.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_length_no_frame_has_ends_the_stream() {
        let mut reader = FrameReader::default();
        reader.push(&u32::MAX.to_be_bytes());
        assert_eq!(reader.next_frame().unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
