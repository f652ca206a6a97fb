//! The TP1 appliance end to end (services/tp1-manifest.toml: the network service, the TP1
//! service, the space bank, the reference monitor, the admin service) under TCG, driven only from 127.0.0.1 through
//! `holdfast run --tp1-port`:
//!
//! - tokens minted by `holdfast tp1 token`; `load` needs an admin token and loads once;
//!   `holdfast tp1 run` and `check` pass;
//! - a tenant made by `holdfast tenant create` is there after every kill;
//! - a fuzzer sends at least 100,000 malformed or unauthorised requests (seeded: it prints
//!   its seed, `HOLDFAST_TP1_FUZZ_SEED=N` repeats one) over several connections, each
//!   answered with the status it deserves, frames that cannot be framed answered and the
//!   connection closed, a hundred idle connections and slowloris clients sitting on partial
//!   frames meanwhile; then the database is exactly as it was, the service still commits,
//!   and its counters (`holdfast vm counters`) say what it saw;
//! - QEMU is SIGKILLed at uniformly random moments under load (`HOLDFAST_TP1_KILLS`, 50 by
//!   default; 1,000 on demand) and restarted; the generator reconnects and retries its
//!   transactions with the same ids; `check` passes after every ten kills and at the end:
//!   every acknowledged transaction is in history once, none was applied twice, and the
//!   sums agree;
//! - scale 10 (1,000,000 accounts) loads in under a minute and passes `check` after load;
//!   a load that the service's space bank cannot hold is refused as `no_space`, nothing
//!   loaded, and the service goes on;
//! - tenants made with `--tp1` have a TP1 service and database each, reached through the
//!   same port by their own tokens only, kept across a kill, and gone with a revocation
//!   that leaves the other tenant's as it was.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use holdfast_tp1_protocol::request::{FLAG_ADMIN_TOKEN, Operation, Transaction, TransactionId};
use holdfast_tp1_protocol::{ReplyFrameDecoder, Reply, Request, Status, Token};
use support::*;

const KILLS_DEFAULT: usize = 50;
/// History records the kills may fill, below the region's 524,288 (holdfast-tp1-ledger's
/// `HISTORY_CAPACITY`), beyond which new transactions are refused as busy.
const KILLS_HISTORY_BUDGET: usize = 400_000;
/// Seconds of load per kill (the kill comes in the last two).
const KILL_LOAD_SECONDS: usize = 3;
/// What 8 clients' closed loop runs at under TCG, about: below this rate the kills pace
/// the load instead.
const CLOSED_LOOP_TPS: usize = 2_000;
const FUZZ_REQUESTS_MIN: usize = 100_000;
const STORE_MIB: &str = "2048";
/// Stands for "any status but ok" among the statuses the fuzzer expects.
const ANY_REFUSAL: Status = Status::Internal;
const MEMORY_MIB: &str = "512";

/// xorshift64*: reproducible from a printed seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.next() as u8)
    }
}

fn seed_from(variable: &str) -> u64 {
    std::env::var(variable).ok().and_then(|value| value.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_nanos() as u64 | 1
    })
}

/// A free TCP port on 127.0.0.1 for the appliance's forward.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0").local_addr().expect("bound").port()
}

struct Appliance {
    name: String,
    image_dir: PathBuf,
    store: PathBuf,
    port: u16,
    /// Where `holdfast run --exporter` serves every VM's counters.
    exporter_port: u16,
    vm: Option<LineReader>,
}

impl Appliance {
    fn new(test: &str) -> Self {
        Self::of_image(test, build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml"))))
    }

    fn of_image(test: &str, image_dir: PathBuf) -> Self {
        let directory = scratch_dir(test);
        let store = directory.join("store.img");
        let format = run_holdfast(&["store", "format", "--size-mib", STORE_MIB, store.to_str().expect("UTF-8 path")]);
        assert_eq!(format.status, Some(0), "{}", format.transcript());
        Self { name: format!("{test}-{}", std::process::id()), image_dir, store, port: free_port(), exporter_port: free_port(), vm: None }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Boots (or restarts from the store) and waits until the TP1 service is reachable: on
    /// the first boot its own line, on a restart the network service's.
    fn start(&mut self) {
        let port = self.port.to_string();
        let exporter = format!("127.0.0.1:{}", self.exporter_port);
        let vm = spawn_reading_lines(
            holdfast()
                .args(["run", "--name", &self.name, "--accel", "tcg", "--memory-mib", MEMORY_MIB, "--tp1-port", &port])
                .args(["--exporter", &exporter])
                .arg("--disk")
                .arg(&self.store)
                .arg("--image-dir")
                .arg(&self.image_dir),
        );
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut seen = Vec::new();
        loop {
            match vm.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    let ready = line == "tp1: serving on 7100" || line.starts_with("net: the system restarted");
                    for bad in ["kernel panic", "STORE LOST", "MISMATCH", "tp1: "] {
                        assert!(!line.starts_with(bad) || ready, "{line}\n{}", seen.join("\n"));
                    }
                    seen.push(line);
                    if ready {
                        break;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    panic!("the appliance did not serve within 180 s:\n{}", seen.join("\n"))
                }
            }
        }
        self.vm = Some(vm);
    }

    fn kill(&mut self) {
        kill_and_wait(&self.name, self.vm.take().expect("running"));
    }

    fn tp1(&self, arguments: &[&str], token: &str, ledger: &std::path::Path) -> Run {
        let address = self.address();
        let mut command = holdfast();
        command.arg("tp1").args(arguments).args(["--address", &address, "--token", token]);
        command.arg("--state-dir").arg(ledger);
        run_command(&mut command)
    }
}

impl Drop for Appliance {
    fn drop(&mut self) {
        if let Some(vm) = self.vm.take() {
            // A failed test shows the console's last lines, where the guest says what it saw.
            if std::thread::panicking() {
                let lines: Vec<String> = vm.lines.try_iter().collect();
                let tail = &lines[lines.len().saturating_sub(40)..];
                eprintln!("the appliance's console, last lines:\n{}", tail.join("\n"));
            }
            let _ = run_holdfast(&["vm", "kill", &self.name]);
            drop(vm);
        }
    }
}

fn mint(appliance: &Appliance, name: &str, admin: bool) -> String {
    let mut arguments = vec!["tp1", "token", &appliance.name, name];
    if admin {
        arguments.push("--admin");
    }
    let minted = run_holdfast(&arguments);
    assert_eq!(minted.status, Some(0), "{}", minted.transcript());
    let token = minted.stdout.trim().to_owned();
    assert!(Token::from_hex(&token).is_some(), "not a token: {token:?}");
    token
}

/// One request's frame, with the fields the fuzzer then spoils.
fn frame(request_id: u64, token: [u8; 16], operation: Operation, flags: u16) -> Vec<u8> {
    let request = Request { request_id, token: Token(token), admin_token: flags & FLAG_ADMIN_TOKEN != 0, operation };
    let mut out = vec![0u8; 2048];
    let length = request.encode(&mut out).expect("a request fits 2 KiB");
    out.truncate(length);
    out
}

/// A malformed or unauthorised request and the status it must get, or `None` for one that
/// cannot be framed (an error reply with request id 0, then the connection is closed).
fn spoiled(random: &mut Random, request_id: u64, client_token: [u8; 16]) -> (Vec<u8>, Option<Status>) {
    let transaction = |random: &mut Random, account: u32, delta: i64| {
        Operation::Transaction(Transaction {
            transaction_id: TransactionId(random.bytes()),
            branch: 0,
            teller: random.below(10) as u32,
            account,
            delta,
        })
    };
    match random.below(100) {
        // A valid transaction under a wrong token.
        0..=24 => {
            let mut wrong = client_token;
            wrong[random.below(16) as usize] ^= 1 << random.below(8);
            let account = random.below(100_000) as u32;
            (frame(request_id, wrong, transaction(random, account, 5), 0), Some(Status::BadToken))
        }
        25..=34 => {
            let mut bytes = frame(request_id, client_token, Operation::Summary, 0);
            bytes[4] = 2 + random.below(254) as u8;
            (bytes, Some(Status::BadVersion))
        }
        35..=44 => {
            let mut bytes = frame(request_id, client_token, Operation::Summary, 0);
            bytes[5] = [0, 6, 7, 200, 255][random.below(5) as usize];
            (bytes, Some(Status::BadOpcode))
        }
        // A body whose length is not its opcode's.
        45..=54 => {
            let mut bytes = frame(request_id, client_token, Operation::Balance { account: 1 }, 0);
            let extra = 1 + random.below(100) as usize;
            bytes.extend(std::iter::repeat_n(0u8, extra));
            let length = (bytes.len() - 4) as u32;
            bytes[..4].copy_from_slice(&length.to_le_bytes());
            (bytes, Some(Status::BadLength))
        }
        // Accounts, tellers and branches beyond scale 1, with a valid token.
        55..=69 => {
            let account = 100_000 + random.below(900_000) as u32;
            (frame(request_id, client_token, transaction(random, account, 7), 0), Some(Status::BadArgument))
        }
        // Flags no opcode defines.
        70..=74 => {
            let mut bytes = frame(request_id, client_token, Operation::Summary, 0);
            bytes[6] = 0x80;
            (bytes, Some(Status::BadArgument))
        }
        // `load` with a client token (claiming to be an admin's, or not).
        75..=84 => {
            let flags = if random.below(2) == 0 { FLAG_ADMIN_TOKEN } else { 0 };
            (frame(request_id, client_token, Operation::Load { scale: 1, replace: true }, flags), Some(Status::BadToken))
        }
        // Random bytes after the header of a well-formed frame, under a random token:
        // refused (as a bad argument or a bad token, whichever the service finds first).
        85..=98 => {
            let mut bytes = frame(request_id, random.bytes(), transaction(random, 3, 1), 0);
            for byte in &mut bytes[32..] {
                *byte = random.next() as u8;
            }
            (bytes, Some(ANY_REFUSAL))
        }
        // A length no request has: too short or too long.
        _ => {
            let length: u32 = if random.below(2) == 0 { random.below(24) as u32 } else { 1025 + random.below(1 << 20) as u32 };
            (length.to_le_bytes().to_vec(), None)
        }
    }
}

/// One fuzzing connection: sends `count` spoiled requests in pipelined batches and checks
/// each reply. Returns how many requests were sent.
fn fuzz_connection(address: &str, client_token: [u8; 16], seed: u64, count: usize) -> usize {
    let mut random = Random(seed);
    let mut sent = 0;
    let mut stream = None;
    while sent < count {
        let connection: &mut TcpStream = stream.get_or_insert_with(|| {
            let connection = TcpStream::connect(address).expect("connect to the TP1 service");
            connection.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
            connection
        });
        // A batch, in flight together; the batch ends at a frame that cannot be framed.
        let mut expected = Vec::new();
        let mut bytes = Vec::new();
        let mut closes = false;
        while expected.len() < 64 && sent < count {
            let request_id = sent as u64 + 1;
            let (frame, status) = spoiled(&mut random, request_id, client_token);
            bytes.extend_from_slice(&frame);
            sent += 1;
            match status {
                Some(status) => expected.push((request_id, status)),
                None => {
                    expected.push((0, Status::BadLength));
                    closes = true;
                    break;
                }
            }
        }
        connection.write_all(&bytes).expect("send a batch");
        let mut decoder = Box::new(ReplyFrameDecoder::for_replies());
        let mut replies = Vec::new();
        let mut buffer = [0u8; 8192];
        while replies.len() < expected.len() {
            let read = connection.read(&mut buffer).expect("read replies");
            assert!(read > 0, "the service closed the connection after {} of {} replies", replies.len(), expected.len());
            let mut input = &buffer[..read];
            while let Some(body) = decoder.decode(&mut input).expect("replies are well framed") {
                let reply = Reply::decode(body).expect("a reply");
                replies.push((reply.request_id, reply.status));
            }
        }
        replies.sort_by_key(|&(id, _)| id);
        expected.sort_by_key(|&(id, _)| id);
        for (reply, wanted) in replies.iter_mut().zip(&expected) {
            if wanted.1 == ANY_REFUSAL && reply.1 != Status::Ok {
                reply.1 = ANY_REFUSAL;
            }
        }
        assert_eq!(replies, expected, "seed {seed}: replies differ from the statuses expected");
        if closes {
            // The service closes it after the error reply.
            assert!(closed_by_peer(connection), "a connection that could not be framed stays open");
            stream = None;
        }
    }
    sent
}

/// Whether the service closed or reset `connection` (before its read timeout: a timeout is
/// no close).
fn closed_by_peer(connection: &mut TcpStream) -> bool {
    let mut rest = [0u8; 16];
    match connection.read(&mut rest) {
        Ok(read) => read == 0,
        Err(error) => !matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
    }
}

/// `summary`'s totals and history count, as a checker sees them.
fn summary(appliance: &Appliance, token: &str, ledger: &std::path::Path) -> String {
    let check = appliance.tp1(&["check"], token, ledger);
    assert_eq!(check.status, Some(0), "check failed\n{}", check.transcript());
    check.stdout.lines().next().expect("check's first line").to_owned()
}

/// A store whose log cannot take the TP1 system's first checkpoint is refused at boot,
/// saying how large a store it needs. Before, that system booted on a store too small and
/// served, every checkpoint failed "log full" for good, and `tp1 load` still answered
/// success: a kill lost everything. (48 MiB: its home ranges hold the system's pages, about
/// 8,000; its log, an eighth of it, cannot take them all in one checkpoint.)
#[test]
fn a_store_too_small_for_the_first_checkpoint_is_refused_at_boot() {
    let image_dir = build_image("tp1-image", Some(&source_dir().join("services/tp1-manifest.toml")));
    let store = scratch_dir("tp1-small-store").join("store.img");
    let format = run_holdfast(&["store", "format", "--size-mib", "48", "--force", store.to_str().expect("UTF-8 path")]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    let mut command = holdfast();
    command.args(["run", "--accel", "tcg", "--memory-mib", MEMORY_MIB, "--timeout-seconds", "120"]);
    command.arg("--disk").arg(&store).arg("--image-dir").arg(&image_dir);
    let run = run_command(&mut command);
    assert_eq!(run.status, Some(1), "{}", run.transcript());
    let refusal = run.stdout.lines().find(|line| line.starts_with("selftest: store: the system's first checkpoint"));
    let refusal = refusal.unwrap_or_else(|| panic!("no refusal:\n{}", run.transcript()));
    assert!(refusal.contains("format a store of at least") && refusal.ends_with("[FAILED]"), "{refusal}");
    assert!(!run.stdout.contains("tp1: serving"), "{}", run.transcript());
}

#[test]
fn the_appliance_serves_tp1_refuses_bad_input_and_loses_nothing_when_killed() {
    let mut appliance = Appliance::new("tp1");
    appliance.start();
    let ledger = scratch_dir("tp1-ledger");

    // Tokens, and a load that needs an admin's.
    let admin = mint(&appliance, "root", true);
    let client = mint(&appliance, "alice", false);
    let bad_name = run_holdfast(&["tp1", "token", &appliance.name, "has space"]);
    assert_eq!(bad_name.status, Some(2), "{}", bad_name.transcript());
    // A tenant of the appliance (a compartment of its reference monitor), still there after
    // every kill below.
    let tenant = run_holdfast(&["tenant", "create", &appliance.name, "acme", "--pages", "1024", "--nodes", "64", "--cpu-percent", "25"]);
    assert_eq!(tenant.status, Some(0), "{}", tenant.transcript());
    const TENANT_LINE: &str = "acme number 0 generation 1 pages 0/1024 nodes 4/64 cpu 25% refusals 0 logged 0 tp1 no";
    let refused = appliance.tp1(&["load", "--scale", "1"], &client, &ledger);
    assert_eq!(refused.status, Some(3), "a client token loaded\n{}", refused.transcript());
    let loaded = appliance.tp1(&["load", "--scale", "1"], &admin, &ledger);
    assert_eq!(loaded.status, Some(0), "{}", loaded.transcript());
    let again = appliance.tp1(&["load", "--scale", "1", "--replace"], &admin, &ledger);
    assert_eq!(again.status, Some(3), "a loaded database loaded again\n{}", again.transcript());

    let run = appliance.tp1(&["run", "--clients", "8", "--duration", "5", "--quiet"], &client, &ledger);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    assert!(run.stdout.contains(" 0 refused, 0 failed"), "{}", run.stdout);
    let before_fuzz = summary(&appliance, &client, &ledger);

    // The fuzzer, on four connections at once, beside a hundred idle connections and two
    // slowloris clients.
    let idle: Vec<TcpStream> = (0..100).map(|_| TcpStream::connect(appliance.address()).expect("connect")).collect();
    let seed = seed_from("HOLDFAST_TP1_FUZZ_SEED");
    println!("tp1 fuzz: seed {seed} (HOLDFAST_TP1_FUZZ_SEED={seed} repeats it)");
    let client_token = Token::from_hex(&client).expect("a token").0;
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut slowloris = TcpStream::connect(appliance.address()).expect("connect");
        slowloris.write_all(&[60, 0, 0]).expect("a partial length");
        slow.push(slowloris);
    }
    let started = Instant::now();
    let connections = 4;
    let sent: usize = std::thread::scope(|scope| {
        let address = appliance.address();
        let workers: Vec<_> = (0..connections)
            .map(|index| {
                let address = address.clone();
                scope.spawn(move || {
                    fuzz_connection(&address, client_token, seed.wrapping_add(index), FUZZ_REQUESTS_MIN / connections as usize)
                })
            })
            .collect();
        workers.into_iter().map(|worker| worker.join().expect("a fuzzing connection")).sum()
    });
    println!("tp1 fuzz: {sent} requests in {:.1} s", started.elapsed().as_secs_f64());
    assert!(sent >= FUZZ_REQUESTS_MIN);
    drop(slow);
    drop(idle);
    assert_eq!(summary(&appliance, &client, &ledger), before_fuzz, "the fuzz changed the database");
    let after = appliance.tp1(&["run", "--clients", "2", "--duration", "2", "--quiet"], &client, &ledger);
    assert_eq!(after.status, Some(0), "the service no longer commits after the fuzz\n{}", after.transcript());

    // The counters the admin service renders for Prometheus.
    let counters = run_holdfast(&["vm", "counters", &appliance.name]);
    assert_eq!(counters.status, Some(0), "{}", counters.transcript());
    let value = |name: &str| -> f64 {
        let line = counters.stdout.lines().find(|line| line.starts_with(&format!("{name} ")));
        line.and_then(|line| line.rsplit(' ').next()?.parse().ok()).unwrap_or_else(|| panic!("no {name}:\n{}", counters.stdout))
    };
    assert!(value("holdfast_tp1_transactions_total") >= 1.0);
    assert!(value("holdfast_tp1_errors_total{code=\"bad_token\"}") >= (FUZZ_REQUESTS_MIN / 5) as f64, "{}", counters.stdout);
    assert!(value("holdfast_tp1_errors_total{code=\"bad_argument\"}") >= 1.0);
    assert_eq!(value("holdfast_tp1_commit_seconds_bucket{le=\"+Inf\"}"), value("holdfast_tp1_commit_seconds_count"));
    assert!(value("holdfast_tp1_commit_seconds_count") >= 1.0);
    assert!(value("holdfast_journal_commits_per_flush") >= 1.0, "{}", counters.stdout);
    value("holdfast_tp1_connections_open");

    // The same counters from the exporter `holdfast run --exporter` serves beside the VM,
    // labelled with its name, once its poll (every 5 s) has reached the admin service.
    let vm_label = format!("vm=\"{}\"", appliance.name);
    let exported = |body: &str, name: &str| -> Option<f64> {
        let line = body.lines().find(|line| line.starts_with(&format!("{name}{{")) && line.contains(&vm_label))?;
        line.rsplit(' ').next()?.parse().ok()
    };
    let transactions = value("holdfast_tp1_transactions_total");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let scrape = http_get(appliance.exporter_port, "/metrics");
        let body = scrape.as_ref().map_or("", |(_, body)| body.as_str());
        if exported(body, "holdfast_tp1_transactions_total").is_some_and(|served| served >= transactions) {
            assert_eq!(exported(body, "holdfast_exporter_vm_up"), Some(1.0), "{body}");
            assert!(exported(body, "holdfast_checkpoint_generation").is_some_and(|generation| generation >= 1.0), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the exporter did not serve {transactions} transactions for {vm_label} within 60 s: {scrape:?}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // Kills at uniformly random moments under load.
    let kills = std::env::var("HOLDFAST_TP1_KILLS").ok().and_then(|value| value.parse().ok()).unwrap_or(KILLS_DEFAULT);
    let seed = seed_from("HOLDFAST_TP1_KILL_SEED");
    println!("tp1 kills: {kills}, seed {seed} (HOLDFAST_TP1_KILL_SEED={seed} repeats the moments)");
    let mut random = Random(seed);
    let started = Instant::now();
    // Closed loop while the history has room for it at every kill; for more kills (1,000
    // on demand) an open loop at the rate the history has room for.
    let rate = KILLS_HISTORY_BUDGET / kills.max(1) / KILL_LOAD_SECONDS;
    let pace: Vec<String> = if rate >= CLOSED_LOOP_TPS { Vec::new() } else { vec!["--rate".into(), rate.to_string()] };
    for kill in 1..=kills {
        let address = appliance.address();
        let mut generator = KillOnDrop(
            holdfast()
                .args(["tp1", "run", "--clients", "8", "--duration", &KILL_LOAD_SECONDS.to_string(), "--drain", "120"])
                .args(&pace)
                .args(["--address", &address, "--token", &client, "--seed", &random.next().to_string()])
                .arg("--state-dir")
                .arg(&ledger)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start the generator"),
        );
        // Its progress lines (stderr): the first, a second into the run, says the load is on;
        // the kill comes at a uniformly random moment of the two seconds after it.
        let progress = std::io::BufReader::new(generator.0.stderr.take().expect("piped"));
        let (sender, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in progress.lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let first = lines.recv_timeout(Duration::from_secs(60));
        assert!(first.as_deref().is_ok_and(|line| line.starts_with("tp1 ")), "kill {kill}: no load: {first:?}");
        std::thread::sleep(Duration::from_micros(random.below(2_000_000)));
        appliance.kill();
        appliance.start();
        let ended = generator.0.wait().expect("the generator ends");
        reader.join().expect("the progress reader");
        let said: Vec<String> = lines.try_iter().collect();
        assert!(ended.success(), "kill {kill}: the generator failed: {ended}\n{}", said.join("\n"));
        if kill % 10 == 0 || kill == kills {
            let line = summary(&appliance, &client, &ledger);
            println!("tp1 kills: {kill} in {:.0} s; {line}", started.elapsed().as_secs_f64());
        }
    }
    let tenants = run_holdfast(&["tenant", "list", &appliance.name]);
    assert_eq!(tenants.stdout.trim_end(), TENANT_LINE, "{}", tenants.transcript());
    appliance.kill();
}

#[test]
fn scale_10_loads_in_under_a_minute() {
    let mut appliance = Appliance::new("tp1-scale-10");
    appliance.start();
    let ledger = scratch_dir("tp1-scale-10-ledger");
    let admin = mint(&appliance, "root", true);
    let started = Instant::now();
    let loaded = appliance.tp1(&["load", "--scale", "10"], &admin, &ledger);
    let took = started.elapsed();
    assert_eq!(loaded.status, Some(0), "{}", loaded.transcript());
    assert!(took < Duration::from_secs(60), "scale 10 took {took:?} to load");
    let run = appliance.tp1(&["run", "--clients", "4", "--duration", "3", "--quiet"], &admin, &ledger);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let line = summary(&appliance, &admin, &ledger);
    assert!(line.contains("scale 10"), "{line}");
    println!("tp1 scale 10: loaded in {:.1} s; {line}", took.as_secs_f64());
    appliance.kill();
}

/// The database's pages come from the TP1 service's space bank at load (bank 2 of the
/// manifest, which holds scale 10). Here that bank holds 4,096 pages and scale 1 needs
/// 8,847: the load is refused as `no_space`, saying so, nothing is loaded, and the service
/// still answers.
#[test]
fn a_load_its_bank_cannot_hold_is_refused_as_no_space_and_the_service_goes_on() {
    let manifest = std::fs::read_to_string(source_dir().join("services/tp1-manifest.toml")).expect("the TP1 manifest");
    let small = manifest.replace("1 = { number = [32768, 2048] }", "1 = { number = [4096, 2048] }");
    assert_ne!(small, manifest, "the TP1 manifest no longer gives bank 2 as this test expects");
    let small_manifest = scratch_dir("tp1-small-bank-manifest").join("tp1-small-bank.toml");
    std::fs::write(&small_manifest, small).expect("write the manifest");
    let mut appliance = Appliance::of_image("tp1-small-bank", build_image("tp1-small-bank-image", Some(&small_manifest)));
    appliance.start();
    let ledger = scratch_dir("tp1-small-bank-ledger");
    let admin = mint(&appliance, "root", true);
    let refused = appliance.tp1(&["load", "--scale", "1"], &admin, &ledger);
    assert_eq!(refused.status, Some(3), "{}", refused.transcript());
    assert!(refused.stderr.contains("load refused (no_space)"), "{}", refused.transcript());
    let check = appliance.tp1(&["check"], &admin, &ledger);
    assert_eq!(check.status, Some(3), "{}", check.transcript());
    assert!(check.stderr.contains("no TP1 data loaded"), "{}", check.transcript());
    appliance.kill();
}

/// One request on `connection`, a raw client's; the status of its reply.
fn ask(connection: &mut TcpStream, request_id: u64, token: &str, operation: Operation) -> Status {
    let token = Token::from_hex(token).expect("a token").0;
    connection.write_all(&frame(request_id, token, operation, 0)).expect("send a request");
    let mut decoder = Box::new(ReplyFrameDecoder::for_replies());
    let mut buffer = [0u8; 8192];
    loop {
        let read = connection.read(&mut buffer).expect("read a reply");
        assert!(read > 0, "the connection was closed before the reply to request {request_id}");
        let mut input = &buffer[..read];
        if let Some(body) = decoder.decode(&mut input).expect("a well framed reply") {
            let reply = Reply::decode(body).expect("a reply");
            assert_eq!(reply.request_id, request_id);
            return reply.status;
        }
    }
}

/// One request on a new connection whose client then shuts its sending side (a TCP
/// half-close): the status of the reply, and whether the service closed the connection
/// after it.
fn ask_and_shut(appliance: &Appliance, token: &str, operation: Operation) -> (Status, bool) {
    let mut connection = connect(appliance);
    connection.write_all(&frame(1, Token::from_hex(token).expect("a token").0, operation, 0)).expect("send a request");
    connection.shutdown(std::net::Shutdown::Write).expect("shut the sending side");
    let mut received = Vec::new();
    connection.read_to_end(&mut received).expect("read until the service closes");
    let mut decoder = Box::new(ReplyFrameDecoder::for_replies());
    let mut input = &received[..];
    let body = decoder.decode(&mut input).expect("a well framed reply").expect("a whole reply before the end");
    let reply = Reply::decode(body).expect("a reply");
    (reply.status, input.is_empty())
}

fn connect(appliance: &Appliance) -> TcpStream {
    let connection = TcpStream::connect(appliance.address()).expect("connect to the TP1 port");
    connection.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    connection
}

/// `holdfast vm counters VM`'s text.
fn vm_counters(vm: &str) -> String {
    let counters = run_holdfast(&["vm", "counters", vm]);
    assert_eq!(counters.status, Some(0), "{}", counters.transcript());
    counters.stdout
}

/// The value of the sample `series` (its name and labels, as written) in `counters`.
fn sample(counters: &str, series: &str) -> Option<f64> {
    let line = counters.lines().find(|line| line.starts_with(&format!("{series} ")))?;
    line.rsplit(' ').next()?.parse().ok()
}

fn tenant_token(appliance: &Appliance, tenant: &str, name: &str) -> String {
    let minted = run_holdfast(&["tp1", "token", &appliance.name, name, "--admin", "--tenant", tenant]);
    assert_eq!(minted.status, Some(0), "{}", minted.transcript());
    minted.stdout.trim().to_owned()
}

/// Issue 17 point 6: a tenant made with `--tp1` has a TP1 service and database of its own,
/// yielded by the TP1 constructor on its bank and meter. Its tokens reach only its database,
/// through the appliance's one port, and its service reads only its own tokens (no other
/// owner's are in its tokens page); its database survives a kill; revoking it resets its
/// connections, voids its tokens and destroys its service and pages, and the other tenant
/// and the appliance's own database see no change.
#[test]
fn each_tenant_has_its_own_tp1_database_and_revoking_one_leaves_the_others_as_they_were() {
    let mut appliance = Appliance::new("tp1-tenants");
    appliance.start();
    let vm = appliance.name.clone();
    let create = |name: &str, pages: &str| {
        run_holdfast(&["tenant", "create", &vm, name, "--pages", pages, "--nodes", "2048", "--cpu-percent", "40", "--tp1"])
    };
    for name in ["acme", "globex"] {
        let made = create(name, "20000");
        assert_eq!(made.status, Some(0), "{}", made.transcript());
        assert!(made.stdout.contains("its own TP1 service"), "{}", made.transcript());
    }
    // A bank too small for the service's copy: refused, saying why, and no tenant left.
    let tiny = create("tiny", "1000");
    assert_eq!(tiny.status, Some(3), "{}", tiny.transcript());
    assert!(tiny.stderr.contains("the tenant's bank cannot hold it"), "{}", tiny.transcript());
    let unknown = run_holdfast(&["tp1", "token", &vm, "root", "--tenant", "nobody"]);
    assert_eq!(unknown.status, Some(2), "{}", unknown.transcript());

    let acme = tenant_token(&appliance, "acme", "root");
    let globex = tenant_token(&appliance, "globex", "root");
    let own = mint(&appliance, "root", true);
    let acme_ledger = scratch_dir("tp1-tenants-acme");
    let loaded = appliance.tp1(&["load", "--scale", "1"], &acme, &acme_ledger);
    assert_eq!(loaded.status, Some(0), "{}", loaded.transcript());
    let run = appliance.tp1(&["run", "--clients", "4", "--duration", "3", "--quiet"], &acme, &acme_ledger);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let acme_before = summary(&appliance, &acme, &acme_ledger);
    assert!(acme_before.contains("scale 1") && !acme_before.contains(" 0 history records"), "{acme_before}");
    // Each tenant's service counts its own transactions, labelled with its name.
    let counters = vm_counters(&vm);
    let acme_transactions = sample(&counters, "holdfast_tp1_transactions_total{tenant=\"acme\"}");
    assert!(acme_transactions.is_some_and(|count| count >= 1.0), "{counters}");
    assert_eq!(sample(&counters, "holdfast_tp1_transactions_total{tenant=\"globex\"}"), Some(0.0), "{counters}");
    assert_eq!(sample(&counters, "holdfast_tp1_transactions_total"), Some(0.0), "the appliance's own service counted acme's: {counters}");

    // One tenant's clients cannot hold every socket of the network service: past 32 held
    // connections its next one is refused `busy` and closed, and the others' are served.
    let mut held: Vec<TcpStream> = Vec::new();
    for request_id in 0..32 {
        let mut connection = connect(&appliance);
        assert_eq!(ask(&mut connection, request_id, &acme, Operation::Balance { account: 0 }), Status::Ok, "acme's connection {request_id}");
        held.push(connection);
    }
    let mut refused = connect(&appliance);
    assert_eq!(ask(&mut refused, 32, &acme, Operation::Balance { account: 0 }), Status::Busy);
    assert!(closed_by_peer(&mut refused), "a connection refused busy stayed open");
    held.pop();
    // The held connection's socket is free once its close is through.
    let served_again = (0..50).any(|attempt| {
        std::thread::sleep(Duration::from_millis(100));
        let mut connection = connect(&appliance);
        ask(&mut connection, 100 + attempt, &acme, Operation::Balance { account: 0 }) == Status::Ok
    });
    assert!(served_again, "acme was refused after one of its connections closed");

    // Each token reaches its own database only: the others are not loaded.
    for (token, name) in [(&globex, "globex's"), (&own, "the appliance's")] {
        let mut connection = connect(&appliance);
        let status = ask(&mut connection, 1, token, Operation::Balance { account: 0 });
        assert_eq!(status, Status::NotLoaded, "{name} database answered as loaded");
    }
    // Each tenant's service reads a tokens page of its own, which holds its tenant's tokens
    // only: a second token of globex's is served by globex's service, and acme's, which
    // counts the valid tokens it can see, sees none of globex's nor the appliance's. The
    // appliance's service sees every owner's (it routes by them).
    let minted = run_holdfast(&["tp1", "token", &vm, "clerk", "--tenant", "globex"]);
    assert_eq!(minted.status, Some(0), "{}", minted.transcript());
    let globex_clerk = minted.stdout.trim().to_owned();
    for (token, name) in [(&globex_clerk, "globex's clerk's"), (&acme, "acme's")] {
        let mut connection = connect(&appliance);
        let expected = if token == &acme { Status::Ok } else { Status::NotLoaded };
        assert_eq!(ask(&mut connection, 1, token, Operation::Balance { account: 0 }), expected, "{name} token");
    }
    let counters = vm_counters(&vm);
    assert_eq!(sample(&counters, "holdfast_tp1_tokens{tenant=\"acme\"}"), Some(1.0), "acme's service sees other owners' tokens: {counters}");
    assert_eq!(sample(&counters, "holdfast_tp1_tokens{tenant=\"globex\"}"), Some(2.0), "{counters}");
    assert_eq!(sample(&counters, "holdfast_tp1_tokens"), Some(4.0), "{counters}");
    // A client that sends its request and shuts its side gets its reply, routed or not, and
    // then the end of the connection.
    assert_eq!(ask_and_shut(&appliance, &acme, Operation::Balance { account: 0 }), (Status::Ok, true));
    assert_eq!(ask_and_shut(&appliance, &own, Operation::Balance { account: 0 }), (Status::NotLoaded, true));
    // A connection goes to the service its first request's token names, and stays there: a
    // request with another owner's token on it is refused.
    let mut on_acme = connect(&appliance);
    assert_eq!(ask(&mut on_acme, 1, &acme, Operation::Balance { account: 0 }), Status::Ok);
    assert_eq!(ask(&mut on_acme, 2, &own, Operation::Balance { account: 0 }), Status::BadToken);
    assert_eq!(ask(&mut on_acme, 3, &globex, Operation::Balance { account: 0 }), Status::BadToken);
    let mut on_own = connect(&appliance);
    assert_eq!(ask(&mut on_own, 1, &own, Operation::Balance { account: 0 }), Status::NotLoaded);
    assert_eq!(ask(&mut on_own, 2, &acme, Operation::Balance { account: 0 }), Status::BadToken);
    drop((on_acme, on_own, held));

    // A kill loses nothing of the tenant's database.
    appliance.kill();
    appliance.start();
    assert_eq!(summary(&appliance, &acme, &acme_ledger), acme_before, "acme's database changed across the kill");

    // globex's database, loaded now, is what revoking acme must leave alone.
    let globex_ledger = scratch_dir("tp1-tenants-globex");
    let loaded = appliance.tp1(&["load", "--scale", "1"], &globex, &globex_ledger);
    assert_eq!(loaded.status, Some(0), "{}", loaded.transcript());
    let run = appliance.tp1(&["run", "--clients", "2", "--duration", "2", "--quiet"], &globex, &globex_ledger);
    assert_eq!(run.status, Some(0), "{}", run.transcript());
    let globex_before = summary(&appliance, &globex, &globex_ledger);

    let mut open = connect(&appliance);
    assert_eq!(ask(&mut open, 1, &acme, Operation::Balance { account: 0 }), Status::Ok);
    let revoked = run_holdfast(&["tenant", "revoke", &vm, "acme"]);
    assert_eq!(revoked.status, Some(0), "{}", revoked.transcript());
    assert!(closed_by_peer(&mut open), "acme's open connection outlived its revocation");
    let mut after = connect(&appliance);
    assert_eq!(ask(&mut after, 1, &acme, Operation::Balance { account: 0 }), Status::BadToken);
    let list = run_holdfast(&["tenant", "list", &vm]);
    assert_eq!(list.status, Some(0), "{}", list.transcript());
    assert!(list.stdout.starts_with("globex ") && list.stdout.lines().count() == 1, "{}", list.transcript());
    assert!(list.stdout.trim_end().ends_with(" tp1 yes"), "{}", list.transcript());
    assert_eq!(summary(&appliance, &globex, &globex_ledger), globex_before, "revoking acme changed globex's database");
    let counters = vm_counters(&vm);
    assert!(!counters.contains("tenant=\"acme\""), "a revoked tenant's counters are still served: {counters}");
    assert!(sample(&counters, "holdfast_tp1_transactions_total{tenant=\"globex\"}").is_some_and(|count| count >= 1.0), "{counters}");
    // acme's token is gone from the appliance's page; globex's are where they were.
    assert_eq!(sample(&counters, "holdfast_tp1_tokens"), Some(3.0), "{counters}");
    assert_eq!(sample(&counters, "holdfast_tp1_tokens{tenant=\"globex\"}"), Some(2.0), "{counters}");
    let run = appliance.tp1(&["run", "--clients", "2", "--duration", "2", "--quiet"], &globex, &globex_ledger);
    assert_eq!(run.status, Some(0), "globex's service stopped committing\n{}", run.transcript());
    appliance.kill();
}
