//! `holdfast pair`: a hot-standby pair of TP1 appliances (DESIGN.md, "The pair and
//! failover").
//!
//! - [`detach`]: `pair up --detach`, the supervisor in the background;
//! - [`supervisor`]: `pair up`, the supervisor: both VMs, the link relay, failure detection,
//!   fencing and promotion, the client endpoint, the control socket;
//! - [`relay`]: the link between the VMs, relayed frame by frame and read in passing;
//! - [`crate::commands::endpoint`]: the client endpoint, switched to each new primary;
//! - [`detect`]: failure detection without I/O;
//! - [`state`]: pair.json, the pair's state and history, written durably;
//! - here: the verbs that ask the running supervisor over its socket (`status`, `failover`,
//!   `mode`, `switchover`, `rejoin`, `down`, `link`) and `history`, which reads pair.json;
//! - [`drill`]: `pair drill`, failover drills under TP1 load, driven through those verbs.

pub mod detach;
pub mod detect;
pub mod drill;
pub mod relay;
pub mod state;
pub mod supervisor;

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use holdfast_replication::wire::Mode;
use serde_json::Value;

pub use detect::StandbyLoss;

use crate::cli::{PairCommand, PairLinkAction, PairMode};
use crate::failure::Failure;
use crate::paths;

/// How long the supervisor may take to answer: a failover waits for the fenced QEMU to be
/// gone (at most 30 s) before it answers.
const ANSWER_TIME_LIMIT: Duration = Duration::from_secs(45);

pub fn run(command: PairCommand) -> Result<ExitCode, Failure> {
    match command {
        PairCommand::Up(arguments) if arguments.detach => detach::up(&arguments),
        PairCommand::Up(arguments) => supervisor::up(arguments),
        PairCommand::Status(arguments) => loop {
            let answer = ask(&arguments.name, "status")?;
            if arguments.json {
                println!("{answer}");
            } else {
                print!("{}", render_status(&answer));
            }
            if !arguments.watch {
                return Ok(ExitCode::SUCCESS);
            }
            println!();
            std::thread::sleep(Duration::from_secs(1));
        },
        PairCommand::Failover(arguments) => {
            let answer = ask(&arguments.name, if arguments.no_fence { "failover no-fence" } else { "failover" })?;
            println!("{}: node {} is the primary, term {}", arguments.name, answer["primary"], answer["term"]);
            Ok(ExitCode::SUCCESS)
        }
        PairCommand::Switchover(pair) => {
            let answer = ask(&pair.name, "switchover")?;
            println!(
                "{}: node {} is the primary, term {}; node {} rejoins as the standby",
                pair.name, answer["primary"], answer["term"], answer["standby"]
            );
            Ok(ExitCode::SUCCESS)
        }
        PairCommand::Rejoin(pair) => {
            let answer = ask(&pair.name, "rejoin")?;
            println!("{}: node {} rejoins as the standby (a full copy comes over the link)", pair.name, answer["standby"]);
            Ok(ExitCode::SUCCESS)
        }
        PairCommand::Drill(arguments) => drill::run(&arguments),
        PairCommand::Mode(arguments) => {
            let lag_bytes_max = match arguments.lag_bytes_max {
                Some(lag_bytes_max) => lag_bytes_max,
                None => ask(&arguments.name, "status")?["lag_bytes_max"]
                    .as_u64()
                    .ok_or_else(|| Failure::other("the supervisor's status has no lag_bytes_max"))?,
            };
            let mode = mode_of(arguments.mode);
            let answer = ask(&arguments.name, &format!("mode {} {lag_bytes_max}", mode.name()))?;
            println!("{}: mode {} (lag bound {} bytes)", arguments.name, mode.name(), answer["lag_bytes_max"]);
            Ok(ExitCode::SUCCESS)
        }
        PairCommand::History(arguments) => history(&arguments.name, arguments.json),
        PairCommand::Down(pair) => down(&pair.name),
        PairCommand::Link(arguments) => {
            let request = match (arguments.action, arguments.milliseconds) {
                (PairLinkAction::Cut, None) => "link cut".to_owned(),
                (PairLinkAction::Restore, None) => "link restore".to_owned(),
                (PairLinkAction::HoldMs, Some(milliseconds)) => format!("link hold-ms {milliseconds}"),
                (PairLinkAction::HoldMs, None) => return Err(Failure::input("hold-ms needs a number of milliseconds")),
                (PairLinkAction::Isolate, Some(node @ 1..=2)) => format!("link isolate {node}"),
                (PairLinkAction::Isolate, _) => return Err(Failure::input("isolate needs a node number, 1 or 2")),
                (_, Some(_)) => return Err(Failure::input("only hold-ms (milliseconds) and isolate (a node) take a number")),
            };
            let answer = ask(&arguments.name, &request)?;
            let mut text = if answer["cut"] == true { "cut".to_owned() } else { format!("relaying, each frame held {} ms", answer["hold_ms"]) };
            if let Some(node) = answer["isolated"].as_u64() {
                text.push_str(&format!("; node {node} isolated"));
            }
            println!("{}: link {text}", arguments.name);
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub fn mode_of(mode: PairMode) -> Mode {
    match mode {
        PairMode::SyncDurable => Mode::SynchronousDurable,
        PairMode::SyncReceived => Mode::SynchronousReceived,
        PairMode::Async => Mode::Asynchronous,
    }
}

/// Where a pair keeps its things: `pairs/NAME` in the state directory.
pub struct PairPaths {
    pub name: String,
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl PairPaths {
    pub fn of(name: &str) -> Result<Self, Failure> {
        // The VMs are NAME-1 and NAME-2, which must be VM names too.
        if name.len() > 62 {
            return Err(Failure::input(format!("'{name}' is not a pair name: at most 62 characters")));
        }
        paths::check_vm_name(name).map_err(|_| {
            Failure::input(format!(
                "'{name}' is not a pair name: use 1 to 62 letters, digits, '-', '_' or '.', not starting with '.' or '-'"
            ))
        })?;
        let dir = paths::state_dir()?.join("pairs").join(name);
        let socket = dir.join("supervisor.sock");
        // sun_path holds 107 bytes and a NUL.
        if socket.as_os_str().len() > 107 {
            return Err(Failure::input(format!(
                "the supervisor's socket path '{}' is longer than 107 bytes: set HOLDFAST_STATE_DIR to a shorter directory",
                socket.display()
            )));
        }
        // Each VM's QMP socket must fit too.
        paths::qmp_socket_of(&format!("{name}-1"))?;
        Ok(Self { name: name.to_owned(), dir, socket })
    }

    /// Node `index` (0, 1)'s libvirt domain under `pair up --libvirt`:
    /// `holdfast-pair-NAME-N-HASH`, HASH (FNV-1a of the pair's directory) keeping pairs of
    /// the same name in two state directories (two users, two test runs) apart on one
    /// libvirtd, and `holdfast-pair-` apart from `holdfast run --libvirt`'s `holdfast-NAME`.
    pub fn domain_name(&self, index: usize) -> String {
        let directory = std::path::absolute(&self.dir).unwrap_or_else(|_| self.dir.clone());
        let hash = directory.as_os_str().as_encoded_bytes().iter().fold(0x811c_9dc5_u32, |hash, byte| {
            (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
        });
        format!("holdfast-pair-{}-{}-{hash:08x}", self.name, index + 1)
    }

    /// Node `index` (0, 1)'s VM name: NAME-1, NAME-2.
    pub fn vm_name(&self, index: usize) -> String {
        format!("{}-{}", self.name, index + 1)
    }

    pub fn store_images(&self, index: usize) -> [PathBuf; 2] {
        let node = self.dir.join(format!("node-{}", index + 1));
        [node.join("store-a.img"), node.join("store-b.img")]
    }

    pub fn console_log(&self, index: usize) -> PathBuf {
        self.dir.join(format!("node-{}", index + 1)).join("console.log")
    }
}

/// Sends `request` to pair `name`'s supervisor and returns its answer, or its refusal as a
/// failure.
pub fn ask(name: &str, request: &str) -> Result<Value, Failure> {
    let paths = PairPaths::of(name)?;
    let stream = UnixStream::connect(&paths.socket).map_err(|error| match error.kind() {
        ErrorKind::NotFound | ErrorKind::ConnectionRefused => Failure::input(format!(
            "pair '{name}' is not up (no supervisor answers on {})",
            paths.socket.display()
        )),
        _ => Failure::other(format!("pair '{name}': connecting to {}: {error}", paths.socket.display())),
    })?;
    let failed = |error: std::io::Error| Failure::other(format!("pair '{name}': {error}"));
    stream.set_read_timeout(Some(ANSWER_TIME_LIMIT)).map_err(failed)?;
    let mut writer = stream.try_clone().map_err(failed)?;
    writeln!(writer, "{request}").map_err(failed)?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).map_err(failed)?;
    if line.is_empty() {
        return Err(Failure::other(format!("pair '{name}': the supervisor closed the connection without answering")));
    }
    let answer: Value = serde_json::from_str(&line)
        .map_err(|error| Failure::other(format!("pair '{name}': the supervisor's answer is not JSON: {error}")))?;
    if answer["ok"] != true {
        return Err(Failure::other(format!("pair '{name}': {}", answer["error"].as_str().unwrap_or("refused"))));
    }
    Ok(answer)
}

/// `pair status` as a table.
fn render_status(status: &Value) -> String {
    let text = |value: &Value| match value {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let link = &status["link"];
    let mut out = format!(
        "pair {}: endpoint {}, primary node {}, mode {}, term {}, promotions {}\n\
         link: {}, {} frames relayed, {} dropped by a cut, {} damaged, {} undeliverable\n",
        text(&status["name"]),
        text(&status["endpoint"]),
        text(&status["primary"]),
        text(&status["mode"]),
        text(&status["term"]),
        text(&status["promotions"]),
        if link["cut"] == true { "CUT".to_owned() } else { format!("held {} ms", text(&link["hold_ms"])) },
        text(&link["relayed_frames"]),
        text(&link["cut_frames"]),
        text(&link["damaged_frames"]),
        text(&link["undeliverable_frames"]),
    );
    let header = ["NODE", "VM", "ROLE", "STATE", "GENERATION", "JOURNAL", "RECEIVED/DURABLE", "LAG-BYTES", "LAG-MS", "HEARD-MS-AGO"];
    let mut rows = vec![header.map(str::to_owned).to_vec()];
    for node in status["nodes"].as_array().into_iter().flatten() {
        let reported = &node["status"];
        let journal_or_dash = |key: &str| if reported.is_null() { "-".to_owned() } else { text(&reported[key]) };
        rows.push(vec![
            text(&node["node"]),
            text(&node["vm"]),
            text(&node["role"]),
            text(&node["state"]),
            journal_or_dash("checkpoint_generation"),
            journal_or_dash("journal_ticket_next"),
            if reported.is_null() { "-".to_owned() } else { format!("{}/{}", text(&reported["received"]), text(&reported["durable"])) },
            text(&node["lag_bytes"]),
            text(&node["lag_ms"]),
            text(&node["heartbeat_age_ms"]),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0)).collect();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:width$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// `pair history`: from pair.json, so that it answers with the pair down.
fn history(name: &str, json: bool) -> Result<ExitCode, Failure> {
    let paths = PairPaths::of(name)?;
    let Some(state) = state::PairState::read(&paths.dir).map_err(Failure::other)? else {
        return Err(Failure::input(format!("there is no pair '{name}' (no {})", state::PairState::path(&paths.dir).display())));
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&state.promotions).expect("promotions serialize"));
        return Ok(ExitCode::SUCCESS);
    }
    if state.promotions.is_empty() {
        println!("{name}: no promotions; node {} is the primary, term {}", state.primary, state.term);
        return Ok(ExitCode::SUCCESS);
    }
    println!("TIME                      TERM  OLD  NEW  GENERATION  JOURNAL  STANDBY-DURABLE  TAKEOVER-MS  REASON");
    for promotion in &state.promotions {
        println!(
            "{:24}  {:4}  {:3}  {:3}  {:10}  {:7}  {:15}  {:11}  {}",
            promotion.time,
            promotion.term,
            promotion.old_primary,
            promotion.new_primary,
            promotion.checkpoint_generation,
            promotion.journal_ticket_next,
            promotion.standby_durable,
            promotion.takeover_ms,
            promotion.reason
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `pair down`: asks the supervisor to end the pair. With no supervisor, a pair that ran
/// under libvirt may have left its domains defined (its supervisor was killed): they are
/// destroyed and undefined from the record `up` left.
fn down(name: &str) -> Result<ExitCode, Failure> {
    let paths = PairPaths::of(name)?;
    let record = paths.dir.join(supervisor::LIBVIRT_RECORD);
    let supervisor_answers = std::os::unix::net::UnixStream::connect(&paths.socket).is_ok();
    if supervisor_answers || !record.exists() {
        // A supervisor's word stands, a refusal included (the domains are its to undefine);
        // with neither a supervisor nor a record, this says the pair is not up.
        let answer = ask(name, "down")?;
        let undefined: Vec<&str> = answer["undefined"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if undefined.is_empty() {
            println!("{name}: down");
        } else {
            println!("{name}: down; domains {} undefined", undefined.join(" and "));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let text = std::fs::read_to_string(&record).map_err(|error| Failure::other(format!("cannot read '{}': {error}", record.display())))?;
    let recorded: Value =
        serde_json::from_str(&text).map_err(|error| Failure::other(format!("'{}' is damaged: {error}", record.display())))?;
    let uri = recorded["uri"].as_str().ok_or_else(|| Failure::other(format!("'{}' names no URI", record.display())))?;
    let names: Vec<String> = recorded["domains"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect();
    let undefined = supervisor::undefine_domains(uri, &names).map_err(Failure::other)?;
    let _ = std::fs::remove_file(&record);
    if undefined.is_empty() {
        println!("{name}: down (no supervisor ran, and libvirt at {uri} had none of its domains)");
    } else {
        println!("{name}: down (no supervisor ran); domains {} undefined", undefined.join(" and "));
    }
    Ok(ExitCode::SUCCESS)
}
