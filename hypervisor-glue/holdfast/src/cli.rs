//! The command line, as clap derives it: these doc comments are the `--help` text.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use holdfast_qemu::NetConnect;

use crate::failure::exit_status;

/// Holdfast: a persistent capability operating system packaged as a QEMU appliance.
///
/// Build the image once (`holdfast image build`), then boot it (`holdfast run`).
#[derive(Debug, Parser)]
#[command(name = "holdfast", version, propagate_version = true)]
#[command(after_help = EXIT_STATUS_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

const EXIT_STATUS_HELP: &str = "\
Exit status: 0 success (for `run`: the guest passed its self-test), 1 the guest reported \
failure, 2 a usage or input error, 3 any other failure (QEMU missing or dying, time limit).";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the appliance image: kernel, initial image, GRUB boot disk.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Boot a Holdfast VM under QEMU; its serial console is copied to stdout.
    #[command(after_help = EXIT_STATUS_HELP)]
    Run(RunArguments),
    /// List the VMs started with `holdfast run --name NAME` and control one over its QMP
    /// socket.
    #[command(subcommand)]
    Vm(VmCommand),
    /// Say whether VMs run under KVM or TCG on this host, and why.
    Accel(AccelArguments),
    /// Benchmarks: print tables of figures against peers measured in the same run.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The single-level store on disk images (the layout is in docs/disk-format.md).
    #[command(subcommand, after_help = STORE_EXIT_STATUS_HELP)]
    Store(StoreCommand),
    /// The checkpoints of a running VM (`holdfast run --name NAME` with a store disk), over
    /// its control channel; the VM's system must run the admin service.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// TP1 (TPC-B) transactions against the Holdfast TP1 service or PostgreSQL: load the
    /// data, run load on it and measure, check that nothing was lost or applied twice.
    #[command(subcommand, after_help = TP1_HELP)]
    Tp1(Tp1Command),
    /// Tenants of a running appliance, each a compartment of its reference monitor
    /// (services/keysafe), through its admin service.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Serve every running VM's counters to Prometheus on 127.0.0.1 (`/metrics`), labelled
    /// by VM, with the exporter's own health; polls each VM's admin service on its own.
    Exporter(ExporterArguments),
    /// Prometheus (with monitoring/rules' alerts) and the exporter, started or stopped in one
    /// command, in the background; both verbs may be repeated.
    #[command(subcommand)]
    Monitor(MonitorCommand),
    /// A hot-standby pair of TP1 appliances: a supervisor that starts both VMs, relays the
    /// replication link between them, watches them and fails over; and the verbs that ask
    /// it what it sees and tell it what to do.
    #[command(subcommand, after_help = PAIR_HELP)]
    Pair(PairCommand),
}

const PAIR_HELP: &str = "\
A pair NAME keeps its state in pairs/NAME in the state directory ($HOLDFAST_STATE_DIR, else \
$XDG_STATE_HOME/holdfast, else ~/.local/state/holdfast): each node's two store mirrors \
(node-1/, node-2/), its console log, pair.json (which node is the primary, the term, the \
mode, the history of promotions) and supervisor.sock, where `pair up` answers the other \
verbs. The VMs are named NAME-1 and NAME-2, so that `holdfast vm` and `holdfast tp1 token` \
reach them.

Exit status: 0 done, 2 a usage error or no such pair, 3 the supervisor refused or failed \
(its reason is printed).";

#[derive(Debug, Subcommand)]
pub enum PairCommand {
    /// Start the pair and supervise it in the foreground until `pair down` (or a signal,
    /// which ends both VMs with it): formats the stores the first time (node 1's as a
    /// store, node 2's blank: it gets a full copy over the link), boots the primary and the
    /// standby, relays the link, serves the client endpoint, prints each VM's console
    /// (prefixed NAME-N:) and every event of the pair (prefixed `pair NAME:`).
    #[command(after_help = PAIR_UP_HELP)]
    Up(PairUpArguments),
    /// Per node: role, state, checkpoint generation, journal position, lag in bytes and
    /// milliseconds, and how long ago its last heartbeat came; the link's counters.
    Status(PairStatusArguments),
    /// Fence the primary (SIGKILL to its QEMU, or virDomainDestroy of its domain under
    /// --libvirt, and wait until it is gone) and promote the standby now. Refused, with the
    /// reason, unless the standby holds a whole copy.
    Failover(PairFailoverArguments),
    /// A planned change of primary that loses no acknowledged commit in any mode: the
    /// primary is made synchronous for the change, the standby waited for (at most 20 s;
    /// if it does not catch up nothing changes), then the primary is fenced, the standby
    /// promoted, and the old primary rejoins as the standby.
    Switchover(PairName),
    /// Start the node that is not the primary (fenced, deposed, or a standby whose QEMU
    /// ended) again as the standby, on its own disks: it gets a full copy of the primary's store over
    /// the link and can take over once `status` says it is consistent.
    Rejoin(PairName),
    /// Failover drills under TP1 load: for each, fail the primary at a random moment
    /// (kill: SIGKILL of its QEMU; freeze: QMP stop; cut: isolate it on the link), wait for
    /// the promotion, check the new primary with the generator's ledger, rejoin the old
    /// one; print detection, promotion and client-visible outage times and transactions
    /// lost. Returns once the last old primary is a consistent standby again. Exit status 3 if any acknowledged transaction was lost or the TP1 invariant
    /// failed.
    #[command(after_help = PAIR_DRILL_HELP)]
    Drill(PairDrillArguments),
    /// Switch the primary's replication mode at run time (recorded for the next `up`)
    Mode(PairModeArguments),
    /// The promotions so far: time, reason, term, journal position, the new primary (read
    /// from pair.json: works when the pair is down too)
    History(PairHistoryArguments),
    /// End both VMs and the supervisor (the stores stay: `pair up` starts from them again)
    Down(PairName),
    /// Test aid, not for production: on the host side of the link, drop every frame
    /// between the VMs (cut), cut one VM off from the other and the supervisor (isolate N),
    /// relay everything again (restore), or delay each frame by N ms (hold-ms N)
    Link(PairLinkArguments),
}

const PAIR_UP_HELP: &str = "\
Failure detection: a VM whose QEMU exits, or whose heartbeats (one every 50 ms on the link) \
stop for more than --heartbeat-timeout-ms once it has sent one, is failed. A failed primary \
with a standby that holds a whole copy is fenced (its QEMU killed, and gone) before the \
standby is promoted (Promote with the next term); then the endpoint moves to it, and the \
promotion is written to pair.json before it is printed. A standby that does not hold a whole \
copy is not promoted: the supervisor says why; nor, under a synchronous mode, one the primary \
last said was out of step or degraded (it acknowledged commits the standby may lack). A \
failed standby under a synchronous mode \
makes the primary acknowledge without it (--on-standby-loss degrade, printed as DEGRADED) or \
wait for it (wait, printed too).

Runs in the foreground, as `holdfast run` does: QEMU dies with the process that started it, \
so the VMs never outlive their supervisor (under --libvirt, libvirtd destroys the domains when \
the supervisor's connection closes); run it under a service manager, or with --detach. \
SIGTERM or SIGINT (Ctrl-C) takes it down as `pair down` does.

--detach prints, once the pair serves:
  pair NAME: endpoint 127.0.0.1:PORT
  pair NAME: supervisor pid PID, log PATH
  pair NAME: serving: primary node N, standby node M (STATE)
then `pair status NAME --json` says the rest.

Exit status: 0 after `pair down` (with --detach: once the pair serves), 2 a usage error or the \
pair is already up, 3 a VM could not be started, both failed, or (--detach) the pair did not \
serve in time.";

/// The replication modes (`holdfast.pair-mode=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PairMode {
    /// A commit is acknowledged once durable on the primary and on the standby's disks
    SyncDurable,
    /// A commit is acknowledged once durable on the primary and received by the standby
    SyncReceived,
    /// A commit is acknowledged once durable on the primary; the standby lags by at most
    /// --lag-bytes-max
    Async,
}

#[derive(Debug, Args)]
pub struct PairName {
    /// The pair's name (as given to `pair up`)
    pub name: String,
}

#[derive(Debug, Args)]
pub struct PairUpArguments {
    /// The pair's name: 1 to 62 letters, digits, '-', '_' or '.'
    pub name: String,
    /// Replication mode [default: the one recorded for the pair, else sync-durable]
    #[arg(long, value_enum)]
    pub mode: Option<PairMode>,
    /// The asynchronous mode's lag bound in bytes [default: the one recorded, else 16 MiB]
    #[arg(long, value_name = "N")]
    pub lag_bytes_max: Option<u64>,
    /// Size of each store mirror in MiB, when the stores are made (the first `up`)
    #[arg(long, value_name = "N", default_value_t = 2048,
          value_parser = clap::value_parser!(u64).range(4..=1_048_576))]
    pub store_mib: u64,
    /// The client endpoint's port on 127.0.0.1 (0: a free one); printed
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub tp1_port: u16,
    /// Directory made by `holdfast image build --manifest services/tp1-manifest.toml`
    /// [default: build/tp1-image in the source tree]
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
    /// Accelerator for both VMs
    #[arg(long, value_enum, default_value_t = AccelArgument::Auto)]
    pub accel: AccelArgument,
    /// Guest memory in MiB, for each VM
    #[arg(long, value_name = "N", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(128..=1_048_576))]
    pub memory_mib: u32,
    /// A VM whose heartbeats stop for longer than this is failed (a QEMU that exits is
    /// failed at once). Under TCG on a loaded host a VM busy copying went 700 ms without one,
    /// and a healthy primary taken for dead is fenced: hence two seconds
    #[arg(long, value_name = "MS", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub heartbeat_timeout_ms: u64,
    /// Also serve the exporter (`holdfast exporter`: every VM and pair under the state
    /// directory) from the supervisor, on ADDRESS (a loopback address; port 0 picks a free
    /// one) [default with no ADDRESS: 127.0.0.1:9717]; the address is printed
    #[arg(long, value_name = "ADDRESS", num_args = 0..=1, default_missing_value = crate::commands::exporter::DEFAULT_LISTEN)]
    pub exporter: Option<std::net::SocketAddr>,
    /// What a synchronous primary does when the standby fails
    #[arg(long, value_enum, default_value_t = crate::commands::pair::StandbyLoss::Degrade)]
    pub on_standby_loss: crate::commands::pair::StandbyLoss,
    /// Extra kernel command-line words for both VMs
    #[arg(long, value_name = "WORDS")]
    pub append: Option<String>,
    /// Run the supervisor in the background (a new session, its output appended to
    /// supervisor.log in the pair's state directory) and return once the pair serves: the
    /// primary serving on the endpoint and the standby heard from. Exit 0 with the
    /// endpoint and the supervisor's pid printed, else non-zero with the log's tail (a
    /// supervisor that did not come up in time is stopped). `pair down` stops it
    #[arg(long)]
    pub detach: bool,
    /// With --detach: how long the pair may take to serve before `up` gives up and stops it
    #[arg(long, value_name = "N", default_value_t = 600, requires = "detach",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub ready_timeout_seconds: u64,
    /// Run each VM as a libvirt domain under libvirtd at this URI (`qemu:///system`)
    /// instead of as a QEMU child: domains `holdfast-pair-NAME-N-HASH` (HASH from the state
    /// directory, so that pairs of the same name in two state directories do not meet),
    /// defined, started with auto-destroy (they end with the supervisor), fenced with
    /// virDomainDestroy, undefined by `pair down`. No libvirt network: the TP1 port is
    /// forwarded from 127.0.0.1 and the link is a TCP socket on 127.0.0.1, as without it
    #[arg(long, value_name = "URI")]
    pub libvirt: Option<String>,
}

#[derive(Debug, Args)]
pub struct PairStatusArguments {
    /// The pair's name
    pub name: String,
    /// Print the supervisor's answer as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Print it again every second until interrupted
    #[arg(long)]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub struct PairModeArguments {
    /// The pair's name
    pub name: String,
    #[arg(value_enum)]
    pub mode: PairMode,
    /// The asynchronous mode's lag bound in bytes [default: the pair's current one]
    #[arg(long, value_name = "N")]
    pub lag_bytes_max: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PairHistoryArguments {
    /// The pair's name
    pub name: String,
    /// Print the promotions as a JSON array
    #[arg(long)]
    pub json: bool,
}

/// What `pair link` does to the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PairLinkAction {
    /// Drop every frame between the VMs
    Cut,
    /// Relay every frame again, at once
    Restore,
    /// Delay each frame by MS milliseconds (0: none)
    HoldMs,
    /// Cut node N (1 or 2) off from the other and from the supervisor, as a partition of
    /// its host would: the supervisor fails it once its heartbeats are missed
    Isolate,
}

#[derive(Debug, Args)]
pub struct PairLinkArguments {
    /// The pair's name
    pub name: String,
    #[arg(value_enum)]
    pub action: PairLinkAction,
    /// For hold-ms: the delay, 0 to 60000; for isolate: the node, 1 or 2
    #[arg(value_name = "MS|NODE", value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub milliseconds: Option<u64>,
}

#[derive(Debug, Args)]
pub struct PairFailoverArguments {
    /// The pair's name
    pub name: String,
    /// Test aid, not for production: promote without killing the old primary, as a
    /// supervisor cut off from its host would have to; it keeps running (shown as
    /// "deposed") and must acknowledge no commit from then on
    #[arg(long)]
    pub no_fence: bool,
}

const PAIR_DRILL_HELP: &str = "\
Each drill waits until the primary serves and the standby is consistent, runs TP1 load \
through the pair's endpoint, fails the primary 1 to 3 s into it (chosen from --seed), and \
reports: detection (from the fault to the supervisor's decision), promotion (the decision \
to the Promote sent), ready (the fault to the new primary serving), the outage the clients \
saw (the longest time without any acknowledgement), transactions acknowledged and lost \
(`tp1 check` on the new primary against the ledger of every drill so far) and whether the \
TP1 invariant holds. Then the old primary rejoins as the standby.

The drills keep one ledger of every transaction sent, pairs/NAME/drill-ledger. If the \
appliance holds no TP1 data, the drill loads it at --scale and empties that ledger; if it \
does, the ledger must be the one its transactions were recorded in (`holdfast tp1 load` and \
`tp1 run` with --state-dir pairs/NAME/drill-ledger), else the drill refuses. A freeze or a cut is detected only after \
--heartbeat-timeout-ms (the supervisor's), so their outage includes it.";

/// What a drill does to the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DrillKind {
    /// SIGKILL to the primary's QEMU
    Kill,
    /// QMP `stop`: the primary's VM is frozen, its QEMU alive
    Freeze,
    /// The primary is isolated on the link: neither the standby nor the supervisor hears it
    Cut,
}

#[derive(Debug, Args)]
pub struct PairDrillArguments {
    /// The pair's name (it must be up)
    pub name: String,
    /// How many drills
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: u32,
    /// The faults, taken in turn (e.g. kill,freeze,cut)
    #[arg(long, value_enum, value_delimiter = ',', default_value = "kill")]
    pub kinds: Vec<DrillKind>,
    /// TP1 client connections
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: u32,
    /// TP1 scale, if the drill has to load the appliance
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub scale: u32,
    /// Seed for the moments and the load [default: random, printed]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum MonitorCommand {
    /// Start the exporter and a Prometheus that scrapes it and evaluates the alert rules
    /// (Debian package `prometheus`); print their URLs. If they run already, print them.
    Up(MonitorUpArguments),
    /// Stop what `monitor up` started (nothing to stop is not an error)
    Down,
    /// Draw the Grafana dashboards' panels from Prometheus's data into an HTML page and a
    /// PNG of it (headless Chromium: Debian package `chromium-headless-shell`)
    Snapshot(MonitorSnapshotArguments),
}

#[derive(Debug, Args)]
pub struct MonitorSnapshotArguments {
    /// The PNG to write (the page goes beside it, with .html)
    #[arg(long, default_value = "holdfast-monitoring.png")]
    pub out: PathBuf,
    /// The Prometheus to ask (http://127.0.0.1:PORT); default: the one `monitor up` started
    #[arg(long)]
    pub prometheus_url: Option<String>,
    /// How far back the charts go
    #[arg(long, default_value_t = 15)]
    pub minutes: u32,
}

#[derive(Debug, Args)]
pub struct MonitorUpArguments {
    /// The exporter's port on 127.0.0.1 (0: a free one)
    #[arg(long, default_value_t = 9717)]
    pub exporter_port: u16,
    /// Prometheus's port on 127.0.0.1 (0: a free one)
    #[arg(long, default_value_t = 9090)]
    pub prometheus_port: u16,
    /// How often Prometheus scrapes the exporter and evaluates the rules
    #[arg(long, default_value_t = 5)]
    pub scrape_interval_seconds: u32,
}

#[derive(Debug, Args)]
pub struct ExporterArguments {
    /// Where to serve `/metrics`: a loopback address (port 0 picks a free port; the address
    /// is printed on stderr)
    #[arg(long, default_value = crate::commands::exporter::DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,
    /// How often each VM's admin service is asked for its counters, however often
    /// Prometheus scrapes
    #[arg(long, default_value_t = crate::commands::exporter::DEFAULT_POLL_INTERVAL_MS)]
    pub poll_interval_ms: u64,
    /// How long a VM may take to answer a poll before it counts as down for that poll
    #[arg(long, default_value_t = crate::commands::exporter::DEFAULT_ANSWER_TIME_LIMIT_MS)]
    pub answer_time_limit_ms: u64,
}

const TP1_HELP: &str = "\
Both targets get the same transactions (TPC-B: a branch and a teller uniformly, the account \
85 % from the teller's branch, a delta in ±999,999, a random 128-bit transaction id from \
the seed). The Holdfast target speaks the TP1 wire protocol (docs/tp1-protocol.md) to \
--address; the PostgreSQL target runs pgbench's tpcb-like SQL (prepared statements) on \
pgbench's tables, with a unique transaction-id column on pgbench_history so that a retried \
id returns its first result. Only 127.0.0.1 (or a local Unix socket for --pg) is reached.

`run` records every transaction id it sends, and every acknowledgement, in a ledger under \
--state-dir; `load` empties it; `check` compares it with the target's history.";

/// Which system `holdfast tp1` drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tp1TargetKind {
    /// The Holdfast TP1 service, over its wire protocol (needs --address and --token)
    Holdfast,
    /// PostgreSQL, with pgbench's TPC-B tables and SQL (needs --pg)
    Postgres,
}

#[derive(Debug, Subcommand)]
pub enum Tp1Command {
    /// Make fresh TPC-B data (per scale unit 1 branch, 10 tellers, 100,000 accounts, every
    /// balance 0, history empty) and empty the ledger. Holdfast needs an admin token.
    #[command(
        after_help = "Exit status: 0 loaded, 2 a usage error, 3 the target failed or refused."
    )]
    Load(Tp1LoadArguments),
    /// Send transactions for a duration, closed loop (default) or open loop (--rate); print a
    /// progress line each second on stderr and a report (or --json) on stdout.
    #[command(after_help = TP1_RUN_HELP)]
    Run(Tp1RunArguments),
    /// Compare the target's data with itself and with the ledger: every acknowledged id in
    /// history exactly once and at its acknowledged index, every history id sent, accounts =
    /// tellers = branches = Σ history deltas in total and per branch. Prints what differs.
    #[command(
        after_help = "Exit status: 0 no difference, 1 differences (each printed), 2 a usage error, 3 the target could not be read."
    )]
    Check(Tp1CheckArguments),
    /// Mint a token for the TP1 service of a running appliance (`holdfast run --name VM` with
    /// the TP1 manifest), or with --tenant for that tenant's own TP1 service: its admin
    /// service draws 128 bits from RDRAND, commits them to the tokens page through the
    /// journal (a tenant's to its own tokens page, which only its service reads, then to
    /// the appliance's, which routes by it), and the token is printed (32 hexadecimal
    /// digits). Minting a NAME again (for the same tenant) revokes its old token. A tenant's
    /// token opens only its database: clients use the same port, and the appliance's TP1
    /// service hands their connections to the tenant's.
    #[command(
        after_help = "Exit status: 0 minted, 2 a usage error, no such VM, no such tenant or a tenant without a TP1 service, 3 the appliance refused (its reason is printed)."
    )]
    Token(Tp1TokenArguments),
}

#[derive(Debug, Args)]
pub struct Tp1TokenArguments {
    /// The VM's name (`holdfast run --name`)
    pub vm: String,
    /// Who the token is for: 1 to 32 printable characters without spaces
    pub name: String,
    /// An admin token, which may also `load`
    #[arg(long)]
    pub admin: bool,
    /// For this tenant's own TP1 service (`holdfast tenant create --tp1`)
    #[arg(long, value_name = "TENANT")]
    pub tenant: Option<String>,
}

const TP1_RUN_HELP: &str = "\
Closed loop: each client keeps --pipeline transactions in flight (1 by default) and sends \
the next when one is acknowledged; latency is from send to acknowledgement. Open loop \
(--rate R): transaction k of client i has an intended send time of (k × clients + i) / R \
seconds after the start; it is sent then, or as soon as the client has fewer than \
--pipeline in flight, and its latency is measured from the intended time, so a target that \
falls behind shows it in its latency (no coordinated omission). Intended times that pass \
with the pipeline full to the end are counted as not sent. A lost connection is made again \
and its transactions retried with the same ids, until --drain seconds after the run; those \
still waiting then count as unfinished. The same --seed gives the same transactions, and so \
the same ids: a repeated run retries the ids that an earlier one sent.

Exit status: 0 the run finished (whatever the target refused), 2 a usage error, 3 the target \
could not be reached or the ledger not written.";

#[derive(Debug, Args)]
pub struct Tp1TargetArguments {
    /// The system to drive
    #[arg(long, value_enum, default_value_t = Tp1TargetKind::Holdfast)]
    pub target: Tp1TargetKind,
    /// The TP1 service's forwarded port on the host (a loopback address only; for
    /// --target holdfast)
    #[arg(long, value_name = "127.0.0.1:PORT")]
    pub address: Option<std::net::SocketAddr>,
    /// The token every request carries, 32 hexadecimal digits (for --target holdfast;
    /// `load` needs an admin token)
    #[arg(long, value_name = "HEX")]
    pub token: Option<String>,
    /// PostgreSQL connection string, URL or key=value (for --target postgres), e.g.
    /// postgresql://postgres@127.0.0.1:5432/postgres; its host must be 127.0.0.1, ::1,
    /// localhost or a Unix socket directory
    #[arg(long, value_name = "URL")]
    pub pg: Option<String>,
    /// Where the ledger of sent and acknowledged transaction ids is kept [default:
    /// tp1/<target> in the state directory ($HOLDFAST_STATE_DIR, else
    /// $XDG_STATE_HOME/holdfast, else ~/.local/state/holdfast)]
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct Tp1LoadArguments {
    #[command(flatten)]
    pub target: Tp1TargetArguments,
    /// Scale: branches (each with 10 tellers and 100,000 accounts)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub scale: u32,
    /// Replace data that exists (else the load is refused)
    #[arg(long)]
    pub replace: bool,
}

#[derive(Debug, Args)]
pub struct Tp1RunArguments {
    #[command(flatten)]
    pub target: Tp1TargetArguments,
    /// Client connections
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub clients: u32,
    /// Open loop at R transactions per second in all (spread evenly over the clients);
    /// without it, closed loop
    #[arg(long, value_name = "R")]
    pub rate: Option<f64>,
    /// Transactions in flight per client connection at most (Holdfast pipelines; PostgreSQL
    /// runs one transaction at a time per connection, so only 1)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub pipeline: u32,
    /// How long to start new transactions, in seconds (a number, or with s or m: 30s, 2m)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: std::time::Duration,
    /// After the run, how long transactions in flight (and reconnects to a restarting
    /// target) may still take before they count as unfinished
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub drain: std::time::Duration,
    /// Seed of the transactions and their ids [default: a random one, printed in the report]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Print the report as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
    /// No progress line each second
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct Tp1CheckArguments {
    #[command(flatten)]
    pub target: Tp1TargetArguments,
    /// Print the findings as one JSON object on stdout
    #[arg(long)]
    pub json: bool,
}

/// `30`, `30s`, `2m`, `0.5s`: seconds unless the suffix says minutes.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let (number, unit_seconds) = match text.strip_suffix('m') {
        Some(minutes) => (minutes, 60.0),
        None => (text.strip_suffix('s').unwrap_or(text), 1.0),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (30, 30s, 2m)"))?;
    let seconds = value * unit_seconds;
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0) {
        return Err(format!(
            "{text:?}: a duration is more than 0 and at most a day"
        ));
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Print the reference monitor's audit records about tenant NAME, oldest first: each
    /// compartment made, policy set, capability granted or refused, and revocation, a line
    /// each (`<sequence> boot <boot count> granted A -> B page`). The log is committed
    /// through the journal, so it survives any crash; each record is checked (format
    /// version, position, CRC-32C) and a corrupt one is reported, never printed as good.
    #[command(
        after_help = "Exit status: 0 printed, 2 a usage error, no such VM, or no record names the tenant, 3 the appliance refused or a record is corrupt (the reason is printed)."
    )]
    Audit(TenantAuditArguments),
    /// List the live tenants: name, compartment number and generation, their bank's pages
    /// and nodes held against its limits, their meter's CPU share, and on the TP1 appliance
    /// whether each has a TP1 service of its own (`tp1 yes`).
    #[command(after_help = "Exit status: 0 listed, 2 no such VM, 3 the appliance refused (the reason is printed).")]
    List(VmName),
    /// Revoke tenant NAME: its TP1 tokens are cleared and its TP1 service's connections
    /// reset, then its bank is destroyed, so its TP1 service and database, every forwarder
    /// granted to or from it, and its capability to the monitor, are gone at once; the
    /// revocation is committed to the audit log through the journal before the reply.
    #[command(
        after_help = "Exit status: 0 revoked, 2 a usage error, no such VM or no such tenant, 3 the appliance refused (the reason is printed)."
    )]
    Revoke(TenantAuditArguments),
    /// Make tenant NAME: a compartment of the reference monitor with a bank of its own
    /// (below the monitor's) limited to --pages pages and --nodes nodes, and a meter of its
    /// own (below the monitor's meter for all tenants) that gives what the tenant runs
    /// --cpu-percent of every 100 ms period and no more. With --tp1, a TP1 service of its
    /// own too, made by the appliance's TP1 constructor on the tenant's bank and meter, with
    /// a database of its own (`holdfast tp1 token --tenant NAME`, then `holdfast tp1 load`
    /// with that token). Its creation is committed to the audit log before the reply; the
    /// command then has checkpoints taken and returns once one that holds the tenant has
    /// committed, so that a tenant it reports made survives any crash.
    #[command(
        after_help = "Exit status: 0 made and durable, 2 a usage error, no such VM or a tenant of that name exists, 3 the appliance refused (its bank too small for a TP1 service, say) or no checkpoint committed within 60 s (the reason is printed)."
    )]
    Create(TenantCreateArguments),
    /// Set the page and node limits of tenant NAME's bank and its meter's CPU share. A
    /// limit below what the tenant holds stops its purchases of that kind until it holds
    /// less; nothing it holds is taken back. Returns once a checkpoint that holds the new
    /// quota has committed.
    #[command(
        after_help = "Exit status: 0 set and durable, 2 a usage error, no such VM or no such tenant, 3 the appliance refused or no checkpoint committed within 60 s (the reason is printed)."
    )]
    Quota(TenantLimitsArguments),
}

#[derive(Debug, Args)]
pub struct TenantLimitsArguments {
    /// The VM's name (`holdfast run --name`)
    pub vm: String,
    /// The tenant (compartment): 1 to 16 printable characters without spaces
    pub name: String,
    /// The most pages the tenant's bank may hold
    #[arg(long, value_name = "N")]
    pub pages: u64,
    /// The most nodes the tenant's bank may hold: at least 4 (its bank's forwarder, its
    /// capability to the monitor, its inbox and its meter)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(4..))]
    pub nodes: u64,
    /// The tenant's CPU share: percent of every 100 ms period its meter gives what it runs
    /// (charged a 10 ms timer tick at a time, so a share below 10 percent gets about a tick)
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u64).range(1..=100))]
    pub cpu_percent: u64,
}

#[derive(Debug, Args)]
pub struct TenantCreateArguments {
    #[command(flatten)]
    pub limits: TenantLimitsArguments,
    /// Give the tenant a TP1 service and database of its own. The service is a
    /// copy-on-write copy of the TP1 program: each page it writes, up to about 4,100, is
    /// bought from the tenant's bank, which must have room for them all (--pages 4100 at
    /// least), and its database is bought from the same bank when loaded (8,847 pages at
    /// scale 1)
    #[arg(long)]
    pub tp1: bool,
}

#[derive(Debug, Args)]
pub struct TenantAuditArguments {
    /// The VM's name (`holdfast run --name`)
    pub vm: String,
    /// The tenant (compartment): 1 to 16 printable characters without spaces
    pub name: String,
}

#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Print the newest committed checkpoint, the interval, how full the log is and
    /// whether a mirror is missing
    Status(VmName),
    /// Set how often the VM takes a checkpoint (it also takes one whenever its log is 65 %
    /// full)
    Interval(CheckpointIntervalArguments),
    /// Take a checkpoint now instead of at the end of the interval
    Now(VmName),
}

#[derive(Debug, Args)]
pub struct CheckpointIntervalArguments {
    /// The name given to `holdfast run --name`
    pub name: String,
    /// The interval, 10 to 86400000 milliseconds
    pub milliseconds: u64,
}

const STORE_EXIT_STATUS_HELP: &str = "\
`inspect` and `check` only read the images: they recover the store in memory, repair nothing \
and leave the boot count as it is; what they find stays on disk until the store is next \
opened read-write (at boot), which repairs what it can.

Exit status: 0 success (`inspect`: whatever it lists; `check`: no problem found, and a store \
missing a mirror is still 0 and says `degraded`), 1 `check` found problems, each printed on \
one line with its mirror, block and check; a bad superblock slot adds \"will be rewritten at \
the next read-write open\" and counts as a problem too (the store still opens from the other \
slot or mirror, but the disk was damaged or a write was cut off), 2 an image is missing, \
foreign or too damaged to open (one line naming the block and the check), 3 any other \
failure.";

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Make a new, empty store on one image, or mirrored on two; prints its summary.
    Format(StoreFormatArguments),
    /// Recover the store read-only (as at boot, writing nothing) and print its geometry,
    /// generations, log fill and mirrors, and any superblock slot recovery found bad.
    Inspect(StoreImages),
    /// Recover the store read-only and verify every checksum of every copy on every mirror;
    /// repairs nothing, prints the problems found (the first 64, then how many more).
    Check(StoreImages),
}

#[derive(Debug, Args)]
pub struct StoreImages {
    /// The store's disk images: one, or two mirrors in order
    #[arg(value_name = "IMAGE", required = true, num_args = 1..=2)]
    pub images: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StoreFormatArguments {
    /// The images to create: one, or two mirrors
    #[arg(value_name = "IMAGE", required = true, num_args = 1..=2)]
    pub images: Vec<PathBuf>,
    /// Size of each image in MiB: an eighth is log, a sixteenth nodes, the rest pages
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub size_mib: u64,
    /// Overwrite images that exist
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Check the manifest, build the guest crates (cargo, release, x86_64-unknown-none) and
    /// write holdfast-kernel.elf, initial.hfi (the manifest's programs and system table) and
    /// holdfast-boot.img (a BIOS disk made with grub-mkrescue) into the output directory.
    Build(ImageBuildArguments),
}

#[derive(Debug, Args)]
pub struct ImageBuildArguments {
    /// Output directory [default: build/image in the source tree]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The manifest of the initial system: its processes, the programs they run, their
    /// nodes, pages and meters, and the capabilities each holds (TOML; schema in
    /// hypervisor-glue/image-builder/README.md) [default: services/manifest.toml in the
    /// source tree]
    #[arg(long, value_name = "PATH")]
    pub manifest: Option<PathBuf>,
    /// Kernel command-line words fixed in the boot disk's grub.cfg (a GRUB boot cannot be
    /// given a command line at run time)
    #[arg(long, value_name = "WORDS", default_value = "")]
    pub grub_append: String,
}

/// How the kernel is loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BootMethod {
    /// QEMU loads the kernel ELF directly (-kernel, -initrd, -append)
    Pvh,
    /// The firmware boots holdfast-boot.img; GRUB loads the kernel by multiboot2
    Grub,
}

/// Which QEMU accelerator to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccelArgument {
    /// KVM if a timed probe shows it is fast here, else TCG (the verdict is cached)
    Auto,
    /// KVM, with the host's CPU model
    Kvm,
    /// TCG, QEMU's binary translator
    Tcg,
}

#[derive(Debug, Args)]
pub struct RunArguments {
    /// Directory made by `holdfast image build` [default: build/image in the source tree]
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
    /// How to boot
    #[arg(long, value_enum, default_value_t = BootMethod::Pvh)]
    pub boot: BootMethod,
    /// A raw disk image to attach as a virtio-blk PCI device (repeatable; in order)
    #[arg(long = "disk", value_name = "FILE")]
    pub disks: Vec<PathBuf>,
    /// Test aid, not for production: pass --disk number N (from 0) through QEMU's
    /// error-injecting blkdebug driver with this configuration file (repeatable)
    #[arg(long, value_name = "N=CONFIG")]
    pub disk_blkdebug: Vec<String>,
    /// Connect a virtio-net device to this TCP endpoint (QEMU -netdev stream)
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "tp1_port")]
    pub net_connect: Option<NetConnect>,
    /// Put the guest on QEMU user-mode networking and forward 127.0.0.1:PORT on the host to
    /// the guest's TCP port 7100 (10.0.2.15, the network service's address; nothing else is
    /// bound, and the guest reaches nothing outside QEMU). Without PORT, or with 0, a free
    /// port is chosen at start and printed on stderr (`holdfast: tp1 port 127.0.0.1:N`),
    /// so that several appliances can run side by side; a PORT already taken fails the start.
    /// Clients reach QEMU's forward (under --libvirt too) through an endpoint in this process
    /// that connects one at a time (docs/net-service.md says why)
    #[arg(long, value_name = "PORT", num_args = 0..=1, default_missing_value = "0")]
    pub tp1_port: Option<u16>,
    /// Accelerator
    #[arg(long, value_enum, default_value_t = AccelArgument::Auto)]
    pub accel: AccelArgument,
    /// Guest memory in MiB
    #[arg(long, value_name = "N", default_value_t = holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
          value_parser = clap::value_parser!(u32).range(32..=1_048_576))]
    pub memory_mib: u32,
    /// Extra kernel command-line words (PVH boot only: GRUB's command line is in grub.cfg)
    #[arg(long, value_name = "WORDS")]
    pub append: Option<String>,
    /// Also serve the exporter (`holdfast exporter`: every VM and pair under the state
    /// directory) from this process, on ADDRESS (a loopback address; port 0 picks a free
    /// one) [default with no ADDRESS: 127.0.0.1:9717]; the address is printed on stderr
    #[arg(long, value_name = "ADDRESS", num_args = 0..=1, default_missing_value = crate::commands::exporter::DEFAULT_LISTEN)]
    pub exporter: Option<std::net::SocketAddr>,
    /// Keep the VM running after its self-test (adds holdfast.after=stay; PVH boot only);
    /// stop it with `holdfast vm quit NAME`
    #[arg(long)]
    pub stay_up: bool,
    /// Name the VM, so that `holdfast vm ... NAME` can reach its QMP socket
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Kill the VM if it has not finished after this many seconds [default: 120 for a
    /// self-test boot; no limit with --stay-up or a store disk (--disk): an appliance runs
    /// until it is stopped]
    #[arg(long, value_name = "N")]
    pub timeout_seconds: Option<u64>,
    /// Run the VM under libvirtd at this URI (`qemu:///system`) instead of as a QEMU child:
    /// a transient domain `holdfast-NAME` (or `holdfast-run-PID`), PVH boot only, which ends
    /// with this command. Ctrl-C or SIGTERM stops it: a final checkpoint (with a store and
    /// the admin service), then QEMU's orderly exit, then a forced one. The paths given
    /// must be valid where libvirtd runs
    #[arg(long, value_name = "URI", conflicts_with_all = ["net_connect", "disk_blkdebug"])]
    pub libvirt: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum VmCommand {
    /// List the VMs running under the state directory: name, run state, store disks
    List,
    /// Print the VM's run state (running, paused, ...)
    Status(VmName),
    /// Stop the VM's virtual CPUs
    Pause(VmName),
    /// Restart the VM's virtual CPUs
    Resume(VmName),
    /// End the VM (QEMU exits; `holdfast run` returns)
    Quit(VmName),
    /// Kill the VM's QEMU with SIGKILL, as a crash would: nothing is flushed or shut down
    /// (for crash and failover drills)
    Kill(VmName),
    /// Print the VM's counters (Prometheus text format) over its control channel: the
    /// kernel's and store's, and on the TP1 appliance its TP1 service's and each tenant's
    /// own (labelled tenant="NAME"); its system must run the admin service
    Counters(VmName),
}

#[derive(Debug, Args)]
pub struct VmName {
    /// The name given to `holdfast run --name`
    pub name: String,
}

#[derive(Debug, Args)]
pub struct AccelArguments {
    /// Probe KVM again instead of using the cached verdict
    #[arg(long)]
    pub reprobe: bool,
    /// Directory whose kernel runs the probe [default: build/image in the source tree]
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Time to "ready" of Holdfast booted by PVH and by GRUB, against a Linux peer booted in
    /// the same QEMU, interleaved; prints a table.
    Boot(BenchBootArguments),
    /// Holdfast's trivial invocation, IPC and fault paths against getppid, a pipe round
    /// trip and page faults in a Linux guest (mitigations=off) booted in the same QEMU;
    /// builds the guest crates first; prints a table.
    Micro(BenchMicroArguments),
    /// The services of issue 17: process creation by a constructor against Linux's fork
    /// and exec of a static binary, a space bank's page against mmap and first touch (in a
    /// Linux guest booted in the same QEMU), a call through a forwarder against a direct
    /// call; builds the guest crates first; prints a table.
    Services(BenchServicesArguments),
    /// The single-level store: snapshot pause per GiB resident, stabilization throughput
    /// and journal commit against the same disk written raw by a Linux peer in the same
    /// QEMU, and restart to serving; builds the guest crates first; prints a table.
    Store(BenchStoreArguments),
    /// TP1 (TPC-B) transactions: the Holdfast appliance in a guest against PostgreSQL 15
    /// in a Debian guest under the same QEMU (its image built by
    /// bench/peers/postgres-guest/build-image.sh and cached) and PostgreSQL 15 on the host,
    /// with the same load generator, scale, clients and durations; prints a table.
    Tp1(BenchTp1Arguments),
    /// A hot-standby pair under TP1 load: throughput and latency of the single appliance and
    /// of one pair in sync-durable, sync-received and async mode (switched at run time), the
    /// replication lag under that load, and a failover drill (SIGKILL of the primary): the
    /// clients' outage and acknowledged transactions lost; prints a table.
    Pair(BenchPairArguments),
}

#[derive(Debug, Args)]
pub struct BenchPairArguments {
    /// Scale 1, three rounds of 5 s runs, an 8 s drill (for CI)
    #[arg(long)]
    pub quick: bool,
    /// Accelerator for every VM (the outage goal is set for TCG)
    #[arg(long, value_enum, default_value_t = AccelArgument::Tcg)]
    pub accel: AccelArgument,
    /// Print the figures as one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Guest memory in MiB, for every VM
    #[arg(long, value_name = "N", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(128..=1_048_576))]
    pub memory_mib: u32,
    /// Client connections in every run, the drill's too [default: 16]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub clients: Option<u32>,
    /// TPC-B scale [default: 10, or 1 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub scale: Option<u32>,
    /// Seconds each throughput run lasts [default: 30, or 5 with --quick]
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub duration_s: Option<u32>,
    /// Rounds, each a run on the single appliance and one on the pair in each mode
    /// [default: 3]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: Option<u32>,
    /// The transactions' seed [default: random, printed in the title]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

#[derive(Debug, Args)]
pub struct BenchTp1Arguments {
    /// Scale 1, closed loop at 1 and 64 clients, 5 s a run (for CI)
    #[arg(long)]
    pub quick: bool,
    /// Accelerator for both guests (the goals are set for TCG)
    #[arg(long, value_enum, default_value_t = AccelArgument::Tcg)]
    pub accel: AccelArgument,
    /// Guest memory in MiB, for both guests (the appliance's database, sized for scale 10,
    /// is about 140 MiB of pages)
    #[arg(long, value_name = "N", default_value_t = 512,
          value_parser = clap::value_parser!(u32).range(128..=1_048_576))]
    pub memory_mib: u32,
    /// TPC-B scale for every system [default: 10, or 1 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    pub scale: Option<u32>,
    /// Seconds each run lasts [default: 30, or 5 with --quick]
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub duration_s: Option<u32>,
    /// Leave out PostgreSQL in the guest (its image takes minutes to build the first time)
    #[arg(long)]
    pub no_guest: bool,
    /// The transactions' seed [default: random, printed in the title]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
}

#[derive(Debug, Args)]
pub struct BenchStoreArguments {
    /// One run instead of three (for CI)
    #[arg(long)]
    pub quick: bool,
    /// Runs (each: a first boot, two restarts, a Linux peer boot) [default: 3, or 1 with
    /// --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Accelerator for both guests
    #[arg(long, value_enum, default_value_t = AccelArgument::Auto)]
    pub accel: AccelArgument,
}

#[derive(Debug, Args)]
pub struct BenchServicesArguments {
    /// One boot per guest (for CI)
    #[arg(long)]
    pub quick: bool,
    /// Boots per guest [default: 3, or 1 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Accelerator for both guests
    #[arg(long, value_enum, default_value_t = AccelArgument::Auto)]
    pub accel: AccelArgument,
    /// Guest memory in MiB, for both guests
    #[arg(long, value_name = "N", default_value_t = holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
          value_parser = clap::value_parser!(u32).range(32..=1_048_576))]
    pub memory_mib: u32,
}

#[derive(Debug, Args)]
pub struct BenchMicroArguments {
    /// Fewer boots per guest (for CI)
    #[arg(long)]
    pub quick: bool,
    /// Boots per guest [default: 3, or 1 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Accelerator for both guests
    #[arg(long, value_enum, default_value_t = AccelArgument::Auto)]
    pub accel: AccelArgument,
    /// Guest memory in MiB, for both guests
    #[arg(long, value_name = "N", default_value_t = holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
          value_parser = clap::value_parser!(u32).range(32..=1_048_576))]
    pub memory_mib: u32,
}

#[derive(Debug, Args)]
pub struct BenchBootArguments {
    /// Fewer boots per guest (for CI)
    #[arg(long)]
    pub quick: bool,
    /// Boots per guest [default: 5, or 3 with --quick]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// Directory made by `holdfast image build` [default: build/image in the source tree]
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
    /// Accelerator for every guest
    #[arg(long, value_enum, default_value_t = AccelArgument::Auto)]
    pub accel: AccelArgument,
    /// Guest memory in MiB, for every guest
    #[arg(long, value_name = "N", default_value_t = holdfast_qemu::command_line::DEFAULT_MEMORY_MIB,
          value_parser = clap::value_parser!(u32).range(32..=1_048_576))]
    pub memory_mib: u32,
}

/// Prints clap's verdict on a bad command line. Help and version go out as clap formats
/// them; an error becomes one line naming the command's help.
pub fn report_parse_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            // Printing help can only fail on a closed stdout; nothing to tell then.
            let _ = error.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            ExitCode::from(exit_status::INPUT_ERROR)
        }
        _ => {
            let message = first_paragraph(&error.render().to_string());
            let command = subcommand_path(std::env::args().skip(1));
            eprintln!("holdfast: {message} (see '{command} --help')");
            ExitCode::from(exit_status::INPUT_ERROR)
        }
    }
}

/// clap's error message without its `error: ` prefix, its indented continuation lines
/// (`the following required arguments were not provided:` / `  <NAME>`) joined on.
fn first_paragraph(rendered: &str) -> String {
    let mut lines = rendered.lines();
    let first_line = lines.next().unwrap_or("invalid command line");
    let mut message = first_line
        .strip_prefix("error: ")
        .unwrap_or(first_line)
        .to_owned();
    for continuation in lines.take_while(|line| line.starts_with(' ')) {
        message.push(' ');
        message.push_str(continuation.trim());
    }
    message
}

/// `holdfast vm status` for the arguments `vm status --bad`: the subcommands named before
/// the first word that is not one.
fn subcommand_path(arguments: impl Iterator<Item = String>) -> String {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut path = vec![command.get_name().to_owned()];
    for argument in arguments {
        let Some(subcommand) = command.find_subcommand(&argument).cloned() else {
            break;
        };
        path.push(subcommand.get_name().to_owned());
        command = subcommand;
    }
    path.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn durations_parse_in_seconds_or_minutes() {
        use std::time::Duration;
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("1h").is_err());
    }

    #[test]
    fn command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn error_continuation_lines_are_joined() {
        let rendered =
            "error: the following required arguments were not provided:\n  <NAME>\n\nUsage: x\n";
        assert_eq!(
            first_paragraph(rendered),
            "the following required arguments were not provided: <NAME>"
        );
        assert_eq!(
            first_paragraph("error: unexpected argument '--x' found\n\n  tip: y\n"),
            "unexpected argument '--x' found"
        );
    }

    #[test]
    fn subcommand_path_stops_at_the_first_other_word() {
        let words = |text: &str| {
            text.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
                .into_iter()
        };
        assert_eq!(subcommand_path(words("run --frobnicate")), "holdfast run");
        assert_eq!(
            subcommand_path(words("vm status x --bad")),
            "holdfast vm status"
        );
        assert_eq!(subcommand_path(words("--bad run")), "holdfast");
    }
}
