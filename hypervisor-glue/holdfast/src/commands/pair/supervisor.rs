//! `holdfast pair up`: the supervisor. One thread owns the pair's state and acts on events
//! from the others: each VM's thread (its console lines, its QEMU's exit), each link
//! socket's relay (the heartbeats it reads in passing), and the control socket (the other
//! `pair` verbs). Every tick it asks [`super::detect::decide`] what to do.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::ops::ControlFlow;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use holdfast_image_builder::ImageDir;
use holdfast_libvirt::{DomainHandle, DomainSpec, Hypervisor};
use holdfast_qemu::{Accelerator, Boot, LinkConnect, NetConnect, QemuBinary, RunningVm, VmSpec};
use holdfast_replication::wire::{HEARTBEAT_INTERVAL_MS, Kind, Message, Mode, Role, StandbyState, Status, WireError};
use serde_json::{Value, json};

use super::detect::{self, Action, Episode, NodeHealth, Policy};
use crate::commands::endpoint::{self, Endpoint};
use super::relay::{Damage, Link, LinkSettings, Outbox};
use super::state::{PairState, Promotion, STATE_VERSION, unix_ms_now, utc_text};
use super::{PairPaths, mode_of};
use crate::cli::PairUpArguments;
use crate::commands::accel;
use crate::commands::run::{QmpSocket, check_disk_images, report_host_disk_errors};
use crate::commands::run_libvirt;
use crate::failure::{Failure, exit_status};
use crate::paths;

/// How often detection runs when nothing else happens: a sixth of the default heartbeat
/// timeout, so a failure is acted on within about 350 ms of the last heartbeat.
const TICK: Duration = Duration::from_millis(50);
/// How long a fenced QEMU may take to be gone after SIGKILL before the supervisor gives up
/// on the promotion (it never promotes while the old primary might still run).
const FENCE_TIME_LIMIT: Duration = Duration::from_secs(30);
/// How long a switchover waits for the standby to hold everything the primary streamed.
const SWITCHOVER_TIME_LIMIT: Duration = Duration::from_secs(20);
/// The lag bound when neither the command line nor pair.json gives one.
const LAG_BYTES_MAX_DEFAULT: u64 = 16 << 20;
/// Console lines that say the TP1 appliance serves: its first boot, a restart.
const SERVING_LINES: [&str; 2] = ["tp1: serving on 7100", "net: the system restarted"];

/// Whether a promotion kills the old primary first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    Kill,
    /// `failover --no-fence`: a test aid.
    Skip,
}

/// What the other threads tell the supervisor.
enum Event {
    Line { node: usize, text: String },
    /// `launch` says which of the node's QEMUs it was: one that a rejoin replaced is not
    /// the node's news.
    Exited { node: usize, launch: u64, ending: String },
    LinkUp { node: usize },
    LinkDown { node: usize, why: String },
    /// Frames from the node that are not link messages: the first of a connection at once,
    /// then at most one report per `DAMAGE_REPORT_INTERVAL`, with the count since the last.
    /// `other_version`: the frame was a link message of another protocol version.
    LinkDamaged { node: usize, why: String, frames: u64, other_version: bool },
    /// `written` says when the answer is on the socket: the supervisor waits for it before
    /// it exits on `down`, so that the client gets its answer.
    Request { line: String, reply: Sender<Value>, written: mpsc::Receiver<()> },
}

/// Each node's newest heartbeat, as its relay thread read it: shared rather than queued,
/// so that detection never takes heartbeats waiting behind console lines for silence.
type Heartbeats = Arc<[HeartbeatSlot; 2]>;

#[derive(Default)]
struct HeartbeatSlot {
    newest: Mutex<Option<(Instant, Status)>>,
    /// When the previous heartbeat on this link connection came.
    previous_at: Mutex<Option<Instant>>,
    /// Heartbeats that did not come: counted by the relay thread, which sees every one, from
    /// the gaps between them (a gap of n intervals is n - 1 missed), so that a slow link or
    /// a paused VM shows before the timeout fails it.
    missed_total: std::sync::atomic::AtomicU64,
}

impl HeartbeatSlot {
    /// Records one heartbeat that arrived at `at`.
    fn record(&self, at: Instant, status: Status) {
        if let Some(previous) = self.previous_at.lock().expect("heartbeat slot").replace(at) {
            let intervals = at.saturating_duration_since(previous).as_millis() as u64 / HEARTBEAT_INTERVAL_MS;
            // One interval late is scheduling; two or more is a heartbeat that was not sent
            // or not relayed.
            if intervals >= 2 {
                self.missed_total.fetch_add(intervals - 1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        *self.newest.lock().expect("heartbeat slot") = Some((at, status));
    }

    /// A new link connection (a VM started again): the time it was down is not counted.
    fn connected(&self) {
        *self.previous_at.lock().expect("heartbeat slot") = None;
    }
}

/// Whether a VM's QEMU is gone, for the fence to wait on.
#[derive(Default)]
struct Gone {
    gone: Mutex<bool>,
    changed: Condvar,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeRole {
    Primary,
    Standby,
    /// Killed by the supervisor before a promotion; `rejoin` starts it again as the standby.
    Fenced,
    /// Promoted past without being killed (`failover --no-fence`, a test aid standing for a
    /// partition the supervisor cannot fence through): it still runs, and must acknowledge
    /// nothing more. `rejoin` kills it first.
    Deposed,
    /// Its QEMU ended of itself.
    Exited,
}

impl NodeRole {
    fn name(self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Standby => "standby",
            Self::Fenced => "fenced",
            Self::Deposed => "deposed",
            Self::Exited => "exited",
        }
    }
}

struct Node {
    number: u8,
    vm_name: String,
    /// Its libvirt domain's name, under `--libvirt`.
    domain: Option<String>,
    tp1_port: u16,
    role: NodeRole,
    process: Arc<Mutex<Option<Process>>>,
    gone: Arc<Gone>,
    health: NodeHealth,
    /// After a promotion: heartbeats count only once they say "primary" (the VM restarts
    /// in between, and its silence then is not a failure).
    awaiting_primary_heartbeat: bool,
    serving: bool,
    link_connected: bool,
    heartbeats_total: u64,
    /// QEMUs started for this node so far.
    launches: u64,
    /// The newest heartbeat taken from the shared slot.
    seen_at: Option<Instant>,
    console: Option<File>,
    ending: Option<String>,
}

/// What the supervisor needs to start a VM again (`rejoin`, `switchover`).
struct Launcher {
    qemu: QemuBinary,
    image_dir: ImageDir,
    accelerator: Accelerator,
    memory_mib: u32,
    link_ports: [u16; 2],
    append: Option<String>,
    events: Sender<Event>,
    /// Under `--libvirt`: each VM a libvirt domain.
    libvirt: Option<Arc<LibvirtDomains>>,
}

/// `pair up --libvirt URI`: where and how the domains run, and what to undefine when the
/// supervisor ends (by `down` or otherwise: the domains are auto-destroyed with its
/// connections, and their definitions go too).
struct LibvirtDomains {
    uri: String,
    emulator: std::path::PathBuf,
    run_as: (u32, u32),
    names: [String; 2],
    /// pairs/NAME/libvirt.json: the URI and the domains, so that `pair down` can undefine
    /// them when the supervisor was killed before it could.
    record: std::path::PathBuf,
}

impl LibvirtDomains {
    /// Destroys and undefines both domains; the names of those libvirt knew.
    fn undefine(&self) -> Result<Vec<String>, String> {
        let undefined = undefine_domains(&self.uri, &self.names)?;
        let _ = std::fs::remove_file(&self.record);
        Ok(undefined)
    }
}

impl Drop for LibvirtDomains {
    fn drop(&mut self) {
        // Nothing more can be done about a failure here; `pair down` tries again from the
        // record.
        let _ = self.undefine();
    }
}

/// Destroys and undefines the domains `names` at `uri`; the names of those libvirt knew.
pub fn undefine_domains(uri: &str, names: &[String]) -> Result<Vec<String>, String> {
    let hypervisor = Hypervisor::connect(uri).map_err(|error| error.to_string())?;
    let mut undefined = Vec::new();
    for name in names {
        if hypervisor.undefine(name).map_err(|error| error.to_string())? {
            undefined.push(name.clone());
        }
    }
    Ok(undefined)
}

struct Supervisor {
    name: String,
    launcher: Launcher,
    paths: PairPaths,
    state: PairState,
    nodes: [Node; 2],
    primary: usize,
    standby: Option<usize>,
    policy: Policy,
    link: Arc<Link>,
    endpoint: Endpoint,
    episode: Episode,
    supervisor_sequence: u64,
    started_at: Instant,
    /// Set by SIGTERM or SIGINT: the supervisor goes down as `pair down` takes it.
    stop_requested: Arc<std::sync::atomic::AtomicBool>,
    heartbeats: Heartbeats,
}

pub fn up(arguments: PairUpArguments) -> Result<ExitCode, Failure> {
    let paths = PairPaths::of(&arguments.name)?;
    std::fs::create_dir_all(&paths.dir)
        .map_err(|error| Failure::other(format!("cannot create '{}': {error}", paths.dir.display())))?;
    let control = claim_control_socket(&arguments.name, &paths.socket)?;
    let image_dir = ImageDir::new(arguments.image_dir.clone().unwrap_or_else(|| paths::source_dir().join("build/tp1-image")));
    image_dir.check_for_pvh_boot().map_err(Failure::input)?;
    let mut state = match PairState::read(&paths.dir).map_err(Failure::input)? {
        Some(state) => state,
        None => PairState {
            version: STATE_VERSION,
            primary: 1,
            term: 0,
            mode: Mode::SynchronousDurable.name().into(),
            lag_bytes_max: LAG_BYTES_MAX_DEFAULT,
            on_standby_loss: arguments.on_standby_loss,
            store_mib: arguments.store_mib,
            promotions: Vec::new(),
        },
    };
    if let Some(mode) = arguments.mode {
        state.mode = mode_of(mode).name().into();
    }
    if let Some(lag_bytes_max) = arguments.lag_bytes_max {
        state.lag_bytes_max = lag_bytes_max;
    }
    state.on_standby_loss = arguments.on_standby_loss;
    let primary = usize::from(state.primary - 1);
    prepare_stores(&paths, primary, state.store_mib)?;
    state.write(&paths.dir).map_err(Failure::other)?;

    let qemu = QemuBinary::find().map_err(Failure::other)?;
    let accelerator = accel::resolve(arguments.accel, &qemu, &image_dir.kernel())?;
    // A service manager's stop, or Ctrl-C, is a `pair down`: both VMs fenced and, under
    // libvirt, their domains undefined, rather than the supervisor dying under them.
    let stop_requested = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop_requested))
            .map_err(|error| Failure::other(format!("cannot handle signal {signal}: {error}")))?;
    }
    let libvirt = match &arguments.libvirt {
        Some(uri) => Some(Arc::new(claim_domains(&paths, uri, &qemu)?)),
        None => None,
    };
    let link = Arc::new(Link::default());
    let heartbeats: Heartbeats = Arc::default();
    let (events, inbox) = mpsc::channel();
    let endpoint_listener = TcpListener::bind(("127.0.0.1", arguments.tp1_port)).map_err(|error| {
        Failure::input(format!("cannot listen on 127.0.0.1:{} for the pair's clients: {error}", arguments.tp1_port))
    })?;
    let endpoint = Endpoint::start(endpoint_listener, endpoint::HOLD_TIME_LIMIT)?;
    let mut link_ports = [0u16; 2];
    for (index, port) in link_ports.iter_mut().enumerate() {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|error| Failure::other(format!("cannot listen on 127.0.0.1 for a link socket: {error}")))?;
        *port = listener.local_addr()?.port();
        serve_link(index, listener, Arc::clone(&link), Arc::clone(&heartbeats), events.clone())?;
    }
    serve_control(control, events.clone())?;

    let nodes = [0usize, 1].map(|index| Node {
        number: index as u8 + 1,
        vm_name: paths.vm_name(index),
        domain: libvirt.as_ref().map(|libvirt| libvirt.names[index].clone()),
        tp1_port: 0,
        role: if index == primary { NodeRole::Primary } else { NodeRole::Standby },
        process: Arc::default(),
        gone: Arc::default(),
        health: NodeHealth::default(),
        awaiting_primary_heartbeat: false,
        serving: false,
        link_connected: false,
        heartbeats_total: 0,
        launches: 0,
        seen_at: None,
        console: OpenOptions::new().create(true).append(true).open(paths.console_log(index)).ok(),
        ending: None,
    });
    let mut supervisor = Supervisor {
        name: arguments.name.clone(),
        launcher: Launcher {
            qemu,
            image_dir,
            accelerator,
            memory_mib: arguments.memory_mib,
            link_ports,
            append: arguments.append.clone(),
            events,
            libvirt,
        },
        policy: Policy {
            heartbeat_timeout: Duration::from_millis(arguments.heartbeat_timeout_ms),
            on_standby_loss: arguments.on_standby_loss,
        },
        paths,
        state,
        nodes,
        primary,
        standby: Some(1 - primary),
        link,
        endpoint,
        episode: Episode::default(),
        supervisor_sequence: 0,
        started_at: Instant::now(),
        stop_requested,
        heartbeats,
    };
    supervisor.say(&format!("endpoint 127.0.0.1:{}", supervisor.endpoint.address().port()));
    if let Some(libvirt) = &supervisor.launcher.libvirt {
        supervisor.say(&format!("libvirt {}: domains {} and {}", libvirt.uri, libvirt.names[0], libvirt.names[1]));
    }
    if let Some(listen) = arguments.exporter {
        let address = crate::commands::exporter::start_beside(listen)?;
        supervisor.say(&format!("exporter on http://{address}/metrics"));
    }
    for index in [primary, 1 - primary] {
        supervisor.start_node(index)?;
    }
    supervisor.run(inbox)
}

impl Supervisor {
    fn say(&self, text: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "pair {}: {text}", self.name);
        let _ = stdout.flush();
    }

    fn mode(&self) -> Mode {
        Mode::from_name(&self.state.mode).unwrap_or(Mode::SynchronousDurable)
    }

    /// Starts node `index`'s VM in its role, on a new TP1 port.
    fn start_node(&mut self, index: usize) -> Result<(), Failure> {
        let port = crate::commands::run::free_port()?;
        self.nodes[index].tp1_port = port;
        self.nodes[index].launches += 1;
        let spec = self.vm_spec(index);
        match &self.launcher.libvirt {
            Some(libvirt) => launch_domain(&self.nodes[index], libvirt, spec, self.launcher.events.clone())?,
            None => launch(&self.nodes[index], &self.launcher.qemu, spec, self.launcher.events.clone())?,
        }
        let node = &self.nodes[index];
        self.say(&format!(
            "node {} ({}) starting as the {}: TP1 at 127.0.0.1:{port}, term {}, mode {}",
            node.number,
            node.vm_name,
            node.role.name(),
            self.state.term,
            self.state.mode
        ));
        Ok(())
    }

    fn vm_spec(&self, index: usize) -> VmSpec {
        let Launcher { image_dir, accelerator, memory_mib, link_ports, append, .. } = &self.launcher;
        let (accelerator, memory_mib, link_port) = (*accelerator, *memory_mib, link_ports[index]);
        let node = &self.nodes[index];
        let role = if node.role == NodeRole::Primary { "primary" } else { "standby" };
        let mut words = vec![
            format!("holdfast.pair-role={role}"),
            format!("holdfast.pair-mode={}", self.state.mode),
            format!("holdfast.pair-term={}", self.state.term),
            format!("holdfast.pair-lag-bytes-max={}", self.state.lag_bytes_max),
        ];
        words.extend(append.as_deref().unwrap_or_default().split_whitespace().map(str::to_owned));
        let qmp_socket = paths::qmp_socket_of(&node.vm_name).ok();
        VmSpec {
            boot: Boot::Pvh {
                kernel: image_dir.kernel(),
                initial_image: Some(image_dir.initial_image()),
                command_line: words.join(" "),
            },
            disks: self.paths.store_images(index).to_vec(),
            blkdebug: Vec::new(),
            net_connect: None,
            link_connect: Some(LinkConnect {
                connect: NetConnect { host: "127.0.0.1".into(), port: link_port },
                node: node.number,
            }),
            tp1_port: Some(node.tp1_port),
            accelerator,
            memory_mib,
            control_socket: qmp_socket.as_deref().map(paths::control_socket_beside),
            event_socket: qmp_socket.as_deref().map(paths::event_socket_beside),
            qmp_socket,
        }
    }

    fn run(mut self, inbox: Receiver<Event>) -> Result<ExitCode, Failure> {
        loop {
            match inbox.recv_timeout(TICK) {
                Ok(event) => {
                    if let ControlFlow::Break(code) = self.handle(event) {
                        return Ok(code);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failure::other("the supervisor's threads all ended"));
                }
            }
            if self.stop_requested.swap(false, std::sync::atomic::Ordering::Relaxed) {
                self.say("stop requested (SIGTERM or SIGINT): going down");
                let (answer, flow) = self.request("down");
                if let ControlFlow::Break(code) = flow {
                    return Ok(code);
                }
                self.say(&format!("down failed: {}", answer["error"].as_str().unwrap_or("refused")));
                return Ok(ExitCode::from(exit_status::OTHER_FAILURE));
            }
            for index in 0..2 {
                let newest = *self.heartbeats[index].newest.lock().expect("heartbeat slot");
                if let Some((at, status)) = newest
                    && self.nodes[index].seen_at.is_none_or(|seen| at > seen)
                {
                    self.nodes[index].seen_at = Some(at);
                    self.heartbeat(index, status, at);
                }
            }
            self.detect();
            if self.nodes.iter().all(|node| node.health.gone) {
                self.say("both VMs are gone: the supervisor ends");
                return Ok(ExitCode::from(exit_status::OTHER_FAILURE));
            }
        }
    }

    fn handle(&mut self, event: Event) -> ControlFlow<ExitCode> {
        match event {
            Event::Line { node, text } => {
                let entry = &mut self.nodes[node];
                if let Some(console) = &mut entry.console {
                    let _ = writeln!(console, "{text}");
                }
                println!("{}: {text}", entry.vm_name);
                if !entry.serving && SERVING_LINES.iter().any(|line| text.starts_with(line)) {
                    entry.serving = true;
                    let (number, name, role, port) = (entry.number, entry.vm_name.clone(), entry.role, entry.tp1_port);
                    if role == NodeRole::Primary {
                        self.endpoint.switch(Some(SocketAddr::from(([127, 0, 0, 1], port))));
                    }
                    self.say(&format!(
                        "node {number} ({name}) ready, {}: TP1 at 127.0.0.1:{port}, endpoint 127.0.0.1:{}",
                        role.name(),
                        self.endpoint.address().port()
                    ));
                }
            }
            Event::Exited { node, launch, .. } if launch != self.nodes[node].launches => {}
            Event::Exited { node, ending, .. } => {
                let entry = &mut self.nodes[node];
                entry.health.gone = true;
                if entry.role != NodeRole::Fenced && entry.role != NodeRole::Deposed {
                    entry.role = NodeRole::Exited;
                }
                entry.ending = Some(ending.clone());
                let (number, name) = (entry.number, entry.vm_name.clone());
                self.say(&format!("node {number} ({name}) ended: {ending}"));
            }
            Event::LinkUp { node } => {
                self.nodes[node].link_connected = true;
                let entry = &self.nodes[node];
                self.say(&format!("node {} ({}) link connected", entry.number, entry.vm_name));
            }
            Event::LinkDown { node, why } => {
                self.nodes[node].link_connected = false;
                let entry = &self.nodes[node];
                if !entry.health.gone {
                    self.say(&format!("node {} ({}) link closed: {why}", entry.number, entry.vm_name));
                }
            }
            Event::LinkDamaged { node, why, frames, other_version } => {
                let entry = &self.nodes[node];
                self.say(&format!(
                    "node {} ({}) sent {frames} link frame(s) that are not link messages ({why}); they are dropped, \
                     not relayed{}",
                    entry.number,
                    entry.vm_name,
                    if other_version {
                        ": the image and this CLI speak different replication protocols; build both from one tree"
                    } else {
                        ""
                    }
                ));
            }
            Event::Request { line, reply, written } => {
                let (answer, flow) = self.request(&line);
                let _ = reply.send(answer);
                if flow.is_break() {
                    let _ = written.recv_timeout(Duration::from_secs(2));
                }
                return flow;
            }
        }
        ControlFlow::Continue(())
    }

    fn heartbeat(&mut self, index: usize, status: Status, at: Instant) {
        let previous = self.nodes[index].health.status;
        let node = &mut self.nodes[index];
        node.heartbeats_total += 1;
        node.health.status = Some(status);
        if node.awaiting_primary_heartbeat {
            if status.role != Role::Primary {
                return;
            }
            node.awaiting_primary_heartbeat = false;
            // A promoted standby starts in the mode it booted with: the pair's may have
            // changed since (`pair mode`, a switchover's temporary synchronous mode).
            if status.mode != self.mode() {
                let (mode, lag_bytes_max) = (self.mode(), self.state.lag_bytes_max);
                self.send(index, Kind::SetMode, lag_bytes_max, mode as u64);
            }
        }
        let node = &mut self.nodes[index];
        node.health.heard_at = Some(at);
        let (number, name) = (node.number, node.vm_name.clone());
        if previous.map(|previous| (previous.role, previous.standby_state)) != Some((status.role, status.standby_state))
            && status.role == Role::Standby
        {
            self.say(&format!(
                "node {number} ({name}) standby: {}{}",
                detect::standby_state_name(status.standby_state),
                if status.standby_state == StandbyState::Consistent { ", it can take over" } else { "" }
            ));
        }
        if previous.is_none_or(|previous| !previous.fenced) && status.fenced {
            self.say(&format!("node {number} ({name}) says it is FENCED: a later term spoke; it acknowledges nothing more"));
        }
        if previous.is_some_and(|previous| !previous.degraded) && status.degraded {
            self.say(&format!("node {number} ({name}) says it is DEGRADED: it acknowledges without the standby"));
        }
    }

    fn detect(&mut self) {
        let primary = &self.nodes[self.primary].health;
        let standby = self.standby.map(|index| &self.nodes[index].health);
        let mode = self.mode();
        match detect::decide(primary, standby, mode, self.policy, &mut self.episode, Instant::now()) {
            Action::Nothing => {}
            Action::FenceAndPromote { reason } => {
                if let Err(why) = self.fence_and_promote(&reason, Fence::Kill) {
                    self.say(&format!("FAILOVER FAILED: {why}"));
                }
            }
            Action::RefusePromotion { reason } => self.say(&format!("NOT PROMOTING: {reason}")),
            Action::Degrade { reason } => {
                let sent = self.send(self.primary, Kind::Degrade, 0, 0);
                self.say(&format!(
                    "DEGRADED: {reason}{}",
                    if sent { "" } else { " (but the primary's link socket is closed: not told)" }
                ));
            }
            Action::ReportStandbyLoss { reason } => self.say(&reason),
        }
    }

    /// Sends one supervisor message to node `index`; false if its link is not connected.
    fn send(&mut self, index: usize, kind: Kind, sequence: u64, argument: u64) -> bool {
        self.supervisor_sequence += 1;
        let sequence = if sequence == 0 { self.supervisor_sequence } else { sequence };
        self.link.send_from_supervisor(index, &Message::new(kind, 0, sequence, argument))
    }

    /// Fences the primary (unless `fence` is [`Fence::Skip`]), promotes the standby, moves the
    /// endpoint, records the promotion.
    fn fence_and_promote(&mut self, reason: &str, fence: Fence) -> Result<(), String> {
        let detected_at = Instant::now();
        let Some(standby) = self.standby else {
            return Err("the pair has no standby".into());
        };
        let old = self.primary;
        let (old_role, fenced) = match fence {
            Fence::Kill => (NodeRole::Fenced, format!("fenced (gone {} ms after SIGKILL)", self.fence(old)?)),
            Fence::Skip => (NodeRole::Deposed, "NOT fenced (--no-fence): it still runs".to_owned()),
        };
        let old_status = self.nodes[old].health.status;
        let standby_status = self.nodes[standby].health.status;
        let term = self.state.term + 1;
        if !self.send(standby, Kind::Promote, 0, term) {
            // Left as it is, the pair has no primary: say so, and try again next tick.
            self.nodes[old].role = old_role;
            return Err(format!(
                "node {} fenced, but node {}'s link socket is closed: Promote not sent (retrying)",
                self.nodes[old].number, self.nodes[standby].number
            ));
        }
        let takeover_ms = detected_at.elapsed().as_millis() as u64;
        self.nodes[old].role = old_role;
        let new = &mut self.nodes[standby];
        new.role = NodeRole::Primary;
        new.awaiting_primary_heartbeat = true;
        new.serving = false;
        new.health.heard_at = None;
        self.primary = standby;
        self.standby = None;
        self.episode = Episode::default();
        let new_port = self.nodes[standby].tp1_port;
        // Clients are held until the new primary serves (see `handle`).
        self.endpoint.switch(None);
        let now_ms = unix_ms_now();
        let promotion = Promotion {
            time_unix_ms: now_ms,
            time: utc_text(now_ms),
            reason: reason.to_owned(),
            term,
            old_primary: self.nodes[old].number,
            new_primary: self.nodes[standby].number,
            checkpoint_generation: old_status.map_or(0, |status| status.checkpoint_generation),
            journal_ticket_next: old_status.map_or(0, |status| status.journal_ticket_next),
            standby_received: standby_status.map_or(0, |status| status.received),
            standby_durable: standby_status.map_or(0, |status| status.durable),
            takeover_ms,
        };
        self.state.term = term;
        self.state.primary = self.nodes[standby].number;
        self.state.promotions.push(promotion.clone());
        let recorded = self.state.write(&self.paths.dir);
        self.say(&format!(
            "FAILOVER: {reason}; node {} {fenced}; node {} ({}) promoted, term {term}, \
             at journal ticket {} / standby durable {}; endpoint to 127.0.0.1:{new_port} once it serves; {takeover_ms} ms from detection",
            promotion.old_primary, promotion.new_primary, self.nodes[standby].vm_name, promotion.journal_ticket_next, promotion.standby_durable
        ));
        recorded.map_err(|why| format!("the promotion happened but was not recorded: {why}"))
    }

    /// Starts the node that is not the primary again, as the standby (it was fenced, deposed,
    /// or a standby whose QEMU ended): the
    /// primary's stream is not one it follows, so a full copy comes over the link. Returns
    /// its index.
    fn rejoin(&mut self) -> Result<usize, String> {
        let index = 1 - self.primary;
        if self.standby.is_some() && !self.nodes[index].health.gone {
            return Err(format!("the pair has a standby already (node {}, running)", self.nodes[index].number));
        }
        if !self.nodes[index].health.gone {
            // A deposed primary still runs: it may not serve, nor be copied over while it does.
            self.fence(index)?;
        }
        let node = &mut self.nodes[index];
        node.role = NodeRole::Standby;
        node.process = Arc::default();
        node.gone = Arc::default();
        node.health = NodeHealth::default();
        node.awaiting_primary_heartbeat = false;
        node.serving = false;
        node.ending = None;
        if let Err(failure) = self.start_node(index) {
            // Nothing runs for the node: it is gone, so that `down` and the next `rejoin`
            // do not wait for a VM that never started.
            let node = &mut self.nodes[index];
            node.role = NodeRole::Exited;
            node.health.gone = true;
            *node.gone.gone.lock().expect("gone flag") = true;
            node.ending = Some(format!("did not start: {failure}"));
            return Err(failure.to_string());
        }
        self.standby = Some(index);
        self.episode = Episode::default();
        let node = &self.nodes[index];
        self.say(&format!("node {} ({}) rejoins as the standby: a full copy comes over the link", node.number, node.vm_name));
        Ok(index)
    }

    /// A planned change of primary that loses nothing in any mode: the primary is made
    /// synchronous (if it is not), the standby is waited for until it holds, durably, all
    /// the primary had put in the stream once it was, then the primary is fenced, the
    /// standby promoted and the old primary rejoins as the standby. Refused, with nothing
    /// changed, if the standby does not catch up in time.
    fn switchover(&mut self) -> Result<(), String> {
        let Some(standby) = self.standby else {
            return Err("the pair has no standby to switch over to".into());
        };
        let now = Instant::now();
        for (index, what) in [(self.primary, "primary"), (standby, "standby")] {
            if let Some(why) = self.nodes[index].health.failure(now, self.policy.heartbeat_timeout) {
                return Err(format!("the {what} (node {}) has failed: {why}", self.nodes[index].number));
            }
        }
        if !self.nodes[standby].health.consistent_standby() {
            return Err(format!("the standby (node {}) holds no whole copy yet", self.nodes[standby].number));
        }
        let mode = self.mode();
        let asked_at = Instant::now();
        if mode == Mode::Asynchronous && !self.send(self.primary, Kind::SetMode, self.state.lag_bytes_max, Mode::SynchronousDurable as u64) {
            return Err("the primary's link socket is closed".into());
        }
        // Waits here, not in the loop: detection pauses for as long (at most the limit),
        // which a planned change may ask.
        let mut stream_end = None;
        let caught_up = loop {
            if asked_at.elapsed() > SWITCHOVER_TIME_LIMIT {
                break false;
            }
            let newest = *self.heartbeats[self.primary].newest.lock().expect("heartbeat slot");
            if let Some((at, status)) = newest
                && at > asked_at
                && status.mode != Mode::Asynchronous
                && !status.degraded
                && !status.fenced
            {
                // Everything acknowledged so far is in the stream up to here; everything
                // acknowledged from now on is on the standby before it is acknowledged.
                let end = *stream_end.get_or_insert(status.sequence);
                if status.durable >= end {
                    break true;
                }
            }
            thread::sleep(Duration::from_millis(10));
        };
        if !caught_up {
            if mode == Mode::Asynchronous {
                self.send(self.primary, Kind::SetMode, self.state.lag_bytes_max, mode as u64);
            }
            return Err(format!(
                "the standby did not hold all the primary had streamed within {} s: nothing changed",
                SWITCHOVER_TIME_LIMIT.as_secs()
            ));
        }
        self.fence_and_promote("switchover requested", Fence::Kill)?;
        self.rejoin().map(|_| ())
    }

    /// Kills node `index`'s QEMU and waits until it is gone; returns how long that took.
    fn fence(&mut self, index: usize) -> Result<u64, String> {
        let started = Instant::now();
        let node = &self.nodes[index];
        let gone = node.gone.gone.lock().expect("gone flag");
        if !*gone
            && let Some(process) = node.process.lock().expect("process").as_ref()
        {
            process.kill().map_err(|error| format!("fencing node {} ({}): {error}", node.number, process.describe()))?;
        }
        let (gone, timeout) = node
            .gone
            .changed
            .wait_timeout_while(gone, FENCE_TIME_LIMIT, |gone| !*gone)
            .expect("gone flag");
        if timeout.timed_out() && !*gone {
            return Err(format!(
                "node {}'s QEMU was not gone {} s after SIGKILL: not promoting while it may run",
                node.number,
                FENCE_TIME_LIMIT.as_secs()
            ));
        }
        drop(gone);
        self.nodes[index].health.gone = true;
        Ok(started.elapsed().as_millis() as u64)
    }

    fn request(&mut self, line: &str) -> (Value, ControlFlow<ExitCode>) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let refuse = |why: String| (json!({ "ok": false, "error": why }), ControlFlow::Continue(()));
        match words.as_slice() {
            ["status"] => (self.status(), ControlFlow::Continue(())),
            ["failover"] | ["failover", "no-fence"] => {
                let fence = if words.len() == 2 { Fence::Skip } else { Fence::Kill };
                let Some(standby) = self.standby else {
                    return refuse("the pair has no standby to promote".into());
                };
                let node = &self.nodes[standby];
                if let Some(why) = node.health.failure(Instant::now(), self.policy.heartbeat_timeout) {
                    return refuse(format!("the standby (node {}) has failed: {why}", node.number));
                }
                if !node.health.consistent_standby() {
                    let state = node.health.status.map_or("not heard from yet", |status| detect::standby_state_name(status.standby_state));
                    return refuse(format!("the standby (node {}) holds no whole copy ({state}): promoting it would lose data", node.number));
                }
                let reason = if fence == Fence::Skip { "failover requested, without fencing" } else { "failover requested" };
                match self.fence_and_promote(reason, fence) {
                    Ok(()) => (json!({ "ok": true, "primary": self.nodes[self.primary].number, "term": self.state.term }), ControlFlow::Continue(())),
                    Err(why) => refuse(why),
                }
            }
            ["switchover"] => match self.switchover() {
                Ok(()) => (
                    json!({ "ok": true, "primary": self.nodes[self.primary].number, "term": self.state.term, "standby": self.standby.map(|index| self.nodes[index].number) }),
                    ControlFlow::Continue(()),
                ),
                Err(why) => refuse(why),
            },
            ["rejoin"] => match self.rejoin() {
                Ok(index) => (json!({ "ok": true, "standby": self.nodes[index].number }), ControlFlow::Continue(())),
                Err(why) => refuse(why),
            },
            ["mode", name, lag] => {
                let (Some(mode), Ok(lag_bytes_max)) = (Mode::from_name(name), lag.parse::<u64>()) else {
                    return refuse(format!("'{line}' is not a mode request"));
                };
                let sent = self.send(self.primary, Kind::SetMode, lag_bytes_max, mode as u64);
                if !sent {
                    return refuse(format!("the primary (node {})'s link socket is closed: mode not sent", self.nodes[self.primary].number));
                }
                self.state.mode = mode.name().into();
                self.state.lag_bytes_max = lag_bytes_max;
                if let Err(why) = self.state.write(&self.paths.dir) {
                    return refuse(format!("the mode was sent but not recorded: {why}"));
                }
                self.say(&format!("mode {} (lag bound {lag_bytes_max} bytes) sent to the primary", mode.name()));
                (json!({ "ok": true, "mode": mode.name(), "lag_bytes_max": lag_bytes_max }), ControlFlow::Continue(()))
            }
            ["link", "cut"] => self.link_settings(LinkSettings { cut: true, ..self.link.settings() }),
            ["link", "restore"] => self.link_settings(LinkSettings::default()),
            ["link", "isolate", number] => match number.parse::<usize>() {
                Ok(number @ 1..=2) => self.link_settings(LinkSettings { isolated: Some(number - 1), ..self.link.settings() }),
                _ => refuse(format!("'{number}' is not a node number (1 or 2)")),
            },
            ["link", "hold-ms", milliseconds] => match milliseconds.parse() {
                Ok(hold_ms) => self.link_settings(LinkSettings { hold_ms, ..self.link.settings() }),
                Err(_) => refuse(format!("'{milliseconds}' is not a number of milliseconds")),
            },
            ["down"] => {
                for index in [self.primary, 1 - self.primary] {
                    if let Err(why) = self.fence(index) {
                        return refuse(why);
                    }
                }
                let undefined = match &self.launcher.libvirt {
                    Some(libvirt) => match libvirt.undefine() {
                        Ok(undefined) => undefined,
                        Err(why) => return refuse(format!("both VMs ended, but their domains were not undefined: {why}")),
                    },
                    None => Vec::new(),
                };
                if undefined.is_empty() {
                    self.say("down: both VMs ended");
                } else {
                    self.say(&format!("down: both VMs ended; domains {} undefined", undefined.join(" and ")));
                }
                (json!({ "ok": true, "undefined": undefined }), ControlFlow::Break(ExitCode::SUCCESS))
            }
            _ => refuse(format!("unknown request '{line}'")),
        }
    }

    fn link_settings(&mut self, settings: LinkSettings) -> (Value, ControlFlow<ExitCode>) {
        self.link.set(settings);
        self.say(&format!("link: {}", settings.describe()));
        let isolated = settings.isolated.map(|index| index + 1);
        (json!({ "ok": true, "cut": settings.cut, "hold_ms": settings.hold_ms, "isolated": isolated }), ControlFlow::Continue(()))
    }

    fn status(&self) -> Value {
        let now = Instant::now();
        let primary_status = self.nodes[self.primary].health.status;
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let state = if node.health.gone {
                    node.role.name().to_owned()
                } else if let Some(why) = node.health.failure(now, self.policy.heartbeat_timeout) {
                    format!("failed: {why}")
                } else if node.role == NodeRole::Primary {
                    if node.awaiting_primary_heartbeat {
                        "promoting".into()
                    } else if primary_status.is_some_and(|status| status.degraded) {
                        "serving, degraded".into()
                    } else if node.serving {
                        "serving".into()
                    } else {
                        "starting".into()
                    }
                } else {
                    node.health
                        .status
                        .map_or("starting".into(), |status| detect::standby_state_name(status.standby_state).to_owned())
                };
                // The lag is the primary's view of its standby: shown on the standby's row.
                let lag = (Some(index) == self.standby).then_some(primary_status).flatten();
                json!({
                    "node": node.number,
                    "vm": node.vm_name,
                    "role": node.role.name(),
                    "state": state,
                    "tp1": format!("127.0.0.1:{}", node.tp1_port),
                    "pid": node.process.lock().expect("process").as_ref().and_then(|process| process.pid()),
                    "domain": node.domain,
                    "link_connected": node.link_connected,
                    "heartbeats_seen": node.heartbeats_total,
                    "heartbeats_missed": self.heartbeats[index].missed_total.load(std::sync::atomic::Ordering::Relaxed),
                    "heartbeat_age_ms": node.health.heard_at.map(|at| now.saturating_duration_since(at).as_millis() as u64),
                    "lag_bytes": lag.map(|status| status.lag_bytes),
                    "lag_ms": lag.map(|status| status.lag_ms),
                    "status": node.health.status.map(status_json),
                    "ended": node.ending,
                })
            })
            .collect();
        let settings = self.link.settings();
        let counter = |value: &std::sync::atomic::AtomicU64| value.load(std::sync::atomic::Ordering::Relaxed);
        json!({
            "ok": true,
            "name": self.name,
            "libvirt": self.launcher.libvirt.as_ref().map(|libvirt| libvirt.uri.clone()),
            "endpoint": self.endpoint.address().to_string(),
            "endpoint_target": self.endpoint.target().map(|target| target.to_string()),
            "endpoint_connections": self.endpoint.open_connections(),
            "endpoint_forwarded_total": self.endpoint.forwarded_total(),
            "term": self.state.term,
            "mode": self.state.mode,
            "lag_bytes_max": self.state.lag_bytes_max,
            "heartbeat_timeout_ms": self.policy.heartbeat_timeout.as_millis() as u64,
            "promotions": self.state.promotions.len(),
            "primary": self.nodes[self.primary].number,
            "uptime_ms": self.started_at.elapsed().as_millis() as u64,
            "link": {
                "cut": settings.cut,
                "hold_ms": settings.hold_ms,
                "isolated": settings.isolated.map(|index| index + 1),
                "relayed_frames": counter(&self.link.counters.relayed),
                "cut_frames": counter(&self.link.counters.cut),
                "damaged_frames": counter(&self.link.counters.damaged),
                "undeliverable_frames": counter(&self.link.counters.undeliverable),
            },
            "nodes": nodes,
        })
    }
}

pub fn status_json(status: Status) -> Value {
    json!({
        "role": match status.role { Role::Primary => "primary", Role::Standby => "standby" },
        "term": status.term,
        "checkpoint_generation": status.checkpoint_generation,
        "journal_ticket_next": status.journal_ticket_next,
        "mode": status.mode.name(),
        "sequence": status.sequence,
        "received": status.received,
        "durable": status.durable,
        "lag_bytes": status.lag_bytes,
        "lag_ms": status.lag_ms,
        "standby_state": detect::standby_state_name(status.standby_state),
        "degraded": status.degraded,
        "standby_heard": status.standby_heard,
        "fenced": status.fenced,
    })
}

/// The first `up` makes each node's two mirrors: the primary's a formatted store, the
/// standby's blank files of the same size (its first full copy comes over the link). Later
/// ones find them, both or neither.
fn prepare_stores(paths: &PairPaths, primary: usize, store_mib: u64) -> Result<(), Failure> {
    for index in [primary, 1 - primary] {
        let images = paths.store_images(index);
        let present = images.iter().filter(|image| image.exists()).count();
        match present {
            2 => {}
            0 => {
                let dir = images[0].parent().expect("in the node's directory");
                std::fs::create_dir_all(dir).map_err(|error| Failure::other(format!("cannot create '{}': {error}", dir.display())))?;
                if index == primary {
                    println!("pair: formatting node {}'s store ({store_mib} MiB a mirror)", index + 1);
                    crate::commands::store::format_images(&images, store_mib, false)?;
                } else {
                    for image in &images {
                        File::create_new(image)
                            .and_then(|file| file.set_len(store_mib * 1024 * 1024))
                            .map_err(|error| Failure::other(format!("cannot make '{}': {error}", image.display())))?;
                    }
                }
            }
            _ => {
                return Err(Failure::input(format!(
                    "node {}'s store has one of its two mirrors ({} and {}): put the other back, or remove both to start that node blank",
                    index + 1,
                    images[0].display(),
                    images[1].display()
                )));
            }
        }
        check_disk_images(&images)?;
    }
    Ok(())
}

/// The supervisor's socket for the other verbs: refused if a supervisor answers there.
fn claim_control_socket(name: &str, socket: &Path) -> Result<UnixListener, Failure> {
    if UnixStream::connect(socket).is_ok() {
        return Err(Failure::input(format!("pair '{name}' is already up (its supervisor answers on {})", socket.display())));
    }
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(Failure::other(format!("cannot remove '{}': {error}", socket.display()))),
    }
    UnixListener::bind(socket).map_err(|error| Failure::other(format!("cannot listen on '{}': {error}", socket.display())))
}

/// Answers the other verbs: one request line in, one JSON line out, per connection.
fn serve_control(listener: UnixListener, events: Sender<Event>) -> Result<(), Failure> {
    thread::Builder::new().name("pair-control".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let events = events.clone();
            let _ = thread::Builder::new().name("pair-control-conn".into()).spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let mut line = String::new();
                let Ok(mut writer) = stream.try_clone() else { return };
                if BufReader::new(stream).read_line(&mut line).is_err() {
                    return;
                }
                let (reply, answer) = mpsc::channel();
                let (written_sender, written) = mpsc::channel();
                if events.send(Event::Request { line: line.trim().to_owned(), reply, written }).is_err() {
                    return;
                }
                if let Ok(answer) = answer.recv() {
                    let _ = writeln!(writer, "{answer}");
                    let _ = writer.flush();
                    let _ = written_sender.send(());
                }
            });
        }
    })?;
    Ok(())
}

/// How often a node's damaged link frames are reported at most.
const DAMAGE_REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// Accepts node `index`'s link connections (QEMU's, one at a time) and relays each until it
/// closes.
fn serve_link(index: usize, listener: TcpListener, link: Arc<Link>, heartbeats: Heartbeats, events: Sender<Event>) -> Result<(), Failure> {
    thread::Builder::new().name("pair-link".into()).spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let _ = stream.set_nodelay(true);
            let Ok(writer) = stream.try_clone() else { continue };
            let Ok(outbox) = Outbox::start(writer) else { continue };
            link.attach(index, Some(outbox));
            heartbeats[index].connected();
            let _ = events.send(Event::LinkUp { node: index });
            let (mut damaged_unreported, mut damage_reported_at) = (0u64, None::<Instant>);
            let observe = |message: &Message| {
                if message.kind == Kind::Heartbeat
                    && let Some(status) = Status::decode(message.payload)
                {
                    heartbeats[index].record(Instant::now(), status);
                }
            };
            // Loud, because a damaged frame is never relayed: a node whose every frame is
            // damaged (an image of another protocol version, say) replicates nothing.
            let why = link.relay_from(index, stream, observe, |damage| {
                damaged_unreported += 1;
                if damage_reported_at.is_none_or(|at| at.elapsed() >= DAMAGE_REPORT_INTERVAL) {
                    damage_reported_at = Some(Instant::now());
                    let frames = std::mem::take(&mut damaged_unreported);
                    let other_version = matches!(damage, Damage::Message(WireError::Version(_)));
                    let _ = events.send(Event::LinkDamaged { node: index, why: damage.to_string(), frames, other_version });
                }
            });
            link.attach(index, None);
            let _ = events.send(Event::LinkDown { node: index, why: why.to_string() });
        }
    })?;
    Ok(())
}

/// Starts node's QEMU from a thread of its own, which follows its console and lives as long
/// as it does (QEMU dies with the thread that launched it).
fn launch(node: &Node, qemu: &QemuBinary, spec: VmSpec, events: Sender<Event>) -> Result<(), Failure> {
    let qmp_socket = QmpSocket::claim(Some(&node.vm_name))?;
    let (index, launch) = (usize::from(node.number - 1), node.launches);
    let (process_slot, gone) = (Arc::clone(&node.process), Arc::clone(&node.gone));
    let qemu = qemu.clone();
    let (started, start_result) = mpsc::channel();
    thread::Builder::new().name(format!("pair-vm-{}", node.number)).spawn(move || {
        let vm = match RunningVm::launch(&qemu, &spec) {
            Ok(vm) => vm,
            Err(error) => {
                let _ = started.send(Err(Failure::other(format!("cannot start QEMU ({}): {error}", qemu.path().display()))));
                return;
            }
        };
        *process_slot.lock().expect("process") = Some(Process::of(vm.pid()));
        let recorded = qmp_socket
            .record_pid(vm.pid())
            .and_then(|()| qmp_socket.record_disks(&spec.disks))
            .and_then(|()| report_host_disk_errors(&qmp_socket.path, &spec.disks));
        let _ = started.send(recorded);
        let report = vm.wait(None, |line| {
            let _ = events.send(Event::Line { node: index, text: line.text.clone() });
            ControlFlow::Continue(())
        });
        // Its files go before the fence hears it is gone: a rejoin starts the VM again at
        // once, under the same name, and must not have them removed under it.
        drop(qmp_socket);
        {
            let mut flag = gone.gone.lock().expect("gone flag");
            *flag = true;
            gone.changed.notify_all();
        }
        let ending = match report {
            Ok(report) => {
                let said: Vec<&str> = report.qemu_stderr.lines().filter(|line| !line.trim().is_empty()).collect();
                if said.is_empty() { report.ending.to_string() } else { format!("{}: {}", report.ending, said.join("; ")) }
            }
            Err(error) => format!("lost track of QEMU: {error}"),
        };
        let _ = events.send(Event::Exited { node: index, launch, ending });
    })?;
    start_result.recv().map_err(|_| Failure::other("the VM's thread ended before QEMU started"))?
}

/// A VM to be fenced: its QEMU, or under `--libvirt` its domain.
enum Process {
    /// The pid file descriptor, opened while the thread that reaps QEMU cannot yet have done
    /// so, names that process and no other even after it is reaped, so that a fence never
    /// hits a process that took its pid.
    Qemu { pid: u32, descriptor: Option<std::os::fd::OwnedFd> },
    /// Fenced by virDomainDestroy; `pid` is its QEMU's, when it was found.
    Domain { handle: DomainHandle, pid: Option<u32> },
}

impl Process {
    fn of(pid: u32) -> Self {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1;
        // it touches no memory of ours.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        // SAFETY: a non-negative result is a descriptor that nothing else owns.
        let descriptor = (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) });
        Self::Qemu { pid, descriptor }
    }

    fn pid(&self) -> Option<u32> {
        match self {
            Self::Qemu { pid, .. } => Some(*pid),
            Self::Domain { pid, .. } => *pid,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Qemu { pid, .. } => format!("SIGKILL to its QEMU, pid {pid}"),
            Self::Domain { handle, .. } => format!("virDomainDestroy of domain '{}'", handle.name()),
        }
    }

    /// Whether the process has exited (its pid descriptor readable), reaped or not; false
    /// if that cannot be told.
    fn has_exited(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Self::Qemu { descriptor: Some(descriptor), .. } = self else { return false };
        let mut poll = libc::pollfd { fd: descriptor.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll(2) on one pollfd that lives on this stack frame for the call, with no
        // wait.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready == 1 && poll.revents & libc::POLLIN != 0
    }

    fn kill(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let (pid, descriptor) = match self {
            Self::Qemu { pid, descriptor } => (*pid, descriptor),
            // It returns once the domain's QEMU is gone.
            Self::Domain { handle, .. } => return handle.destroy().map_err(std::io::Error::other),
        };
        let result = match descriptor {
            // SAFETY: pidfd_send_signal(2) with a descriptor we own, a signal number, no
            // siginfo (null, allowed) and no flags.
            Some(descriptor) => unsafe {
                libc::syscall(libc::SYS_pidfd_send_signal, descriptor.as_raw_fd(), libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0)
            },
            // A host kernel older than 5.3: the pid, which its thread has not reaped unless
            // `gone` (held by the caller) would say so but for the moment between the two.
            // SAFETY: kill(2) takes plain integers and touches no memory of ours.
            None => i64::from(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }),
        };
        match result {
            0 => Ok(()),
            _ => match std::io::Error::last_os_error() {
                // Already dead (exited and reaped): what a fence wants.
                error if error.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                error => Err(error),
            },
        }
    }
}

/// `--libvirt URI`: connects (so that a missing daemon or a refused user is said before
/// anything starts), refuses if either domain runs already, and records the domains for
/// `pair down`.
fn claim_domains(paths: &PairPaths, uri: &str, qemu: &QemuBinary) -> Result<LibvirtDomains, Failure> {
    let names = [paths.domain_name(0), paths.domain_name(1)];
    let hypervisor = Hypervisor::connect(uri).map_err(Failure::other)?;
    for name in &names {
        if run_libvirt::libvirt_error(hypervisor.is_running(name))? {
            return Err(Failure::input(format!(
                "pair '{}' is already up: its domain '{name}' runs under libvirt at {uri} ('virsh -c {uri} destroy {name}' if nothing watches it)",
                paths.name
            )));
        }
    }
    let record = paths.dir.join(LIBVIRT_RECORD);
    let text = json!({ "uri": uri, "domains": names }).to_string();
    std::fs::write(&record, text).map_err(|error| Failure::other(format!("cannot write '{}': {error}", record.display())))?;
    Ok(LibvirtDomains {
        uri: uri.to_owned(),
        emulator: run_libvirt::absolute(qemu.path())?,
        run_as: run_libvirt::current_user(),
        names,
        record,
    })
}

/// Where `pair up --libvirt` records its URI and domains.
pub const LIBVIRT_RECORD: &str = "libvirt.json";

/// Node's VM as a libvirt domain: the same VM as [`Supervisor::vm_spec`] gives QEMU.
fn domain_spec(libvirt: &LibvirtDomains, name: &str, spec: &VmSpec) -> Result<DomainSpec, Failure> {
    let Boot::Pvh { kernel, initial_image, command_line } = &spec.boot else {
        return Err(Failure::input("--libvirt boots by PVH only"));
    };
    let absolute = |path: &std::path::PathBuf| run_libvirt::absolute(path);
    Ok(DomainSpec {
        name: name.to_owned(),
        emulator: libvirt.emulator.clone(),
        accelerator: spec.accelerator,
        memory_mib: spec.memory_mib,
        kernel: absolute(kernel)?,
        initial_image: initial_image.as_ref().map(absolute).transpose()?,
        command_line: command_line.clone(),
        disks: spec.disks.iter().map(absolute).collect::<Result<_, _>>()?,
        tp1_port: spec.tp1_port,
        control_socket: spec.control_socket.as_ref().map(absolute).transpose()?,
        replication_link: spec.link_connect.clone(),
        qmp_socket: spec.qmp_socket.as_ref().map(absolute).transpose()?,
        event_socket: spec.event_socket.as_ref().map(absolute).transpose()?,
        run_as: libvirt.run_as,
    })
}

/// How often a domain's thread asks libvirt whether the domain still runs.
const DOMAIN_STATE_INTERVAL: Duration = Duration::from_millis(250);
/// How often it looks whether the domain's QEMU has exited, between console lines.
const QEMU_EXIT_INTERVAL: Duration = Duration::from_millis(20);
/// How long libvirt may take to say that a domain whose QEMU is gone is shut off. libvirt
/// waits for the process to be reaped: here, where the container's init reaps orphans about
/// once a second, a SIGKILLed QEMU's domain was shut off 3.6 s after the kill.
const DOMAIN_END_TIME_LIMIT: Duration = Duration::from_secs(30);

/// [`launch`] under `--libvirt`: defines node's domain and starts it (auto-destroyed with
/// the thread's connection), from a thread of its own that follows its console and reports
/// the node gone once its QEMU has exited (the process's pid descriptor says so at once,
/// where libvirt runs on this host) or libvirt says the domain is not running.
fn launch_domain(node: &Node, libvirt: &LibvirtDomains, spec: VmSpec, events: Sender<Event>) -> Result<(), Failure> {
    let qmp_socket = QmpSocket::claim(Some(&node.vm_name))?;
    let domain_name = node.domain.clone().expect("a node under --libvirt has a domain");
    let xml = domain_spec(libvirt, &domain_name, &spec)?.to_xml().map_err(Failure::input)?;
    let uri = libvirt.uri.clone();
    let (index, launch) = (usize::from(node.number - 1), node.launches);
    let (process_slot, gone) = (Arc::clone(&node.process), Arc::clone(&node.gone));
    let (started, start_result) = mpsc::channel();
    thread::Builder::new().name(format!("pair-domain-{}", node.number)).spawn(move || {
        let running = Hypervisor::connect(&uri).map_err(Failure::other).and_then(|hypervisor| {
            // A domain whose QEMU was seen gone may not be shut off for libvirt yet.
            let deadline = Instant::now() + DOMAIN_END_TIME_LIMIT;
            while run_libvirt::libvirt_error(hypervisor.is_running(&domain_name))? {
                if Instant::now() >= deadline {
                    return Err(Failure::other(format!(
                        "domain '{domain_name}' still runs for libvirt {} s after its QEMU was gone",
                        DOMAIN_END_TIME_LIMIT.as_secs()
                    )));
                }
                thread::sleep(QEMU_EXIT_INTERVAL);
            }
            hypervisor.define_and_start(&domain_name, &xml).map_err(|error| Failure::other(format!("domain '{domain_name}': {error}")))
        });
        let running = match running {
            Ok(running) => running,
            Err(failure) => {
                let _ = started.send(Err(failure));
                return;
            }
        };
        let handle = running.handle();
        let pid = run_libvirt::qemu_pid_of_domain(&domain_name);
        let exit_watch = pid.map(Process::of);
        *process_slot.lock().expect("process") = Some(Process::Domain { handle: handle.clone(), pid });
        let recorded = pid
            .map_or(Ok(()), |pid| qmp_socket.record_pid(pid))
            .and_then(|()| qmp_socket.record_disks(&spec.disks))
            .and_then(|()| report_host_disk_errors(&qmp_socket.path, &spec.disks));
        let _ = started.send(recorded);
        let qemu_exited = || exit_watch.as_ref().is_some_and(Process::has_exited);
        // libvirt is asked from a thread of its own: while libvirtd handles a QEMU's death it
        // can take seconds to answer (it waits for the process to be reaped), and the pid
        // descriptor, which says so at once, must not wait behind it.
        let shut_off = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watching = Arc::new(std::sync::atomic::AtomicBool::new(true));
        {
            let (handle, shut_off, watching) = (handle.clone(), Arc::clone(&shut_off), Arc::clone(&watching));
            let _ = thread::Builder::new().name("pair-domain-state".into()).spawn(move || {
                while watching.load(std::sync::atomic::Ordering::Relaxed) {
                    if !handle.is_active().unwrap_or(true) {
                        shut_off.store(true, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                    thread::sleep(DOMAIN_STATE_INTERVAL);
                }
            });
        }
        let mut console_open = true;
        // Gone: its QEMU has exited, or libvirt says the domain does not run. A console that
        // ends is not enough (QEMU may yet run), but is no reason to wait for more lines.
        let ending = loop {
            if qemu_exited() {
                break "its QEMU exited";
            }
            if console_open {
                match running.next_line(QEMU_EXIT_INTERVAL) {
                    Ok(line) => {
                        let _ = events.send(Event::Line { node: index, text: line.text });
                    }
                    Err(RecvTimeoutError::Disconnected) => console_open = false,
                    Err(RecvTimeoutError::Timeout) => {}
                }
            } else {
                thread::sleep(QEMU_EXIT_INTERVAL);
            }
            if shut_off.load(std::sync::atomic::Ordering::Relaxed) {
                break "libvirt shut it off";
            }
        };
        watching.store(false, std::sync::atomic::Ordering::Relaxed);
        // Its files go before the fence hears it is gone, as under the QEMU runner.
        drop(qmp_socket);
        {
            let mut flag = gone.gone.lock().expect("gone flag");
            *flag = true;
            gone.changed.notify_all();
        }
        let _ = events.send(Event::Exited { node: index, launch, ending: format!("domain '{domain_name}': {ending}") });
        // libvirt's word that it is shut off, before the connection (and its auto-destroy)
        // goes; the domain is not destroyed from here, since a rejoin may have started it
        // again already (it waits for libvirt's word too).
        let deadline = Instant::now() + DOMAIN_END_TIME_LIMIT;
        while handle.is_active().unwrap_or(false) && Instant::now() < deadline {
            thread::sleep(QEMU_EXIT_INTERVAL);
        }
        running.release();
    })?;
    start_result.recv().map_err(|_| Failure::other("the domain's thread ended before the domain started"))?
}

