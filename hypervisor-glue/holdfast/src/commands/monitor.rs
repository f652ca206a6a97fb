//! `holdfast monitor up|down`: the exporter and a Prometheus that scrapes it and evaluates
//! monitoring/rules, as background processes, in `<state directory>/.monitor` (a name no
//! VM can take): their pids, logs, the generated configuration and Prometheus's data.
//! `up` on a running pair prints their URLs again; `down` with nothing running says so.
//! Both exit 0 then: they are idempotent.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::cli::{MonitorCommand, MonitorUpArguments};
use crate::failure::Failure;
use crate::loopback_http;
use crate::paths;

/// The rules, built into the binary so that `monitor up` needs no source tree.
const RULES: &str = include_str!("../../../../monitoring/rules/holdfast.rules.yml");

/// How long each process may take to answer on its port after it starts.
const START_TIME_LIMIT: Duration = Duration::from_secs(60);
/// How long `down` waits for SIGTERM before SIGKILL.
const STOP_TIME_LIMIT: Duration = Duration::from_secs(10);

/// One of the two processes: its name in messages and pid files, and what /proc says its
/// command is (a stale pid may name another program by now).
struct Part {
    name: &'static str,
    command_name: &'static str,
}

const EXPORTER: Part = Part { name: "exporter", command_name: "holdfast" };
const PROMETHEUS: Part = Part { name: "prometheus", command_name: "prometheus" };

pub fn run(command: MonitorCommand) -> Result<ExitCode, Failure> {
    let directory = paths::state_dir()?.join(".monitor");
    match command {
        MonitorCommand::Up(arguments) => up(&directory, &arguments),
        MonitorCommand::Down => down(&directory),
        MonitorCommand::Snapshot(arguments) => {
            // The running Prometheus's URL, from what `up` wrote.
            let urls = std::fs::read_to_string(directory.join("urls")).unwrap_or_default();
            let running = urls.lines().find_map(|line| {
                let url = line.strip_prefix("prometheus")?.split_whitespace().next()?;
                Some(url.trim_end_matches('/').to_owned())
            });
            super::snapshot::run(&arguments, running)
        }
    }
}

fn up(directory: &Path, arguments: &MonitorUpArguments) -> Result<ExitCode, Failure> {
    let exporter_running = running(directory, &EXPORTER);
    let prometheus_running = running(directory, &PROMETHEUS);
    if exporter_running.is_some() && prometheus_running.is_some() {
        let urls = std::fs::read_to_string(directory.join("urls")).unwrap_or_default();
        print!("monitoring is already running\n{urls}");
        return Ok(ExitCode::SUCCESS);
    }
    // Half of it running (one process died): start both afresh.
    stop_all(directory)?;
    if arguments.scrape_interval_seconds == 0 {
        return Err(Failure::input("--scrape-interval-seconds must be at least 1"));
    }
    std::fs::create_dir_all(directory)
        .map_err(|error| Failure::other(format!("cannot create '{}': {error}", directory.display())))?;
    let exporter_port = port_or_free(arguments.exporter_port, "--exporter-port")?;
    let prometheus_port = port_or_free(arguments.prometheus_port, "--prometheus-port")?;

    let rules = directory.join("holdfast.rules.yml");
    let config = directory.join("prometheus.yml");
    let interval = arguments.scrape_interval_seconds;
    write(&rules, RULES)?;
    write(
        &config,
        &format!(
            "# Written by `holdfast monitor up`; rewritten by the next.\n\
             global:\n  scrape_interval: {interval}s\n  evaluation_interval: {interval}s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: holdfast\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n",
            rules.display()
        ),
    )?;

    let exe = std::env::current_exe().map_err(|error| Failure::other(format!("cannot find this program: {error}")))?;
    let mut exporter = Command::new(exe);
    exporter.args(["exporter", "--listen", &format!("127.0.0.1:{exporter_port}")]);
    let exporter = start(directory, &EXPORTER, &mut exporter)?;
    let mut prometheus = Command::new("prometheus");
    prometheus
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", directory.join("data").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{prometheus_port}"));
    let prometheus = match start(directory, &PROMETHEUS, &mut prometheus) {
        Ok(child) => child,
        Err(failure) => {
            stop_all(directory)?;
            return Err(failure);
        }
    };

    for (part, mut child, port, path) in
        [(&EXPORTER, exporter, exporter_port, "/metrics"), (&PROMETHEUS, prometheus, prometheus_port, "/-/ready")]
    {
        if let Err(failure) = wait_until_answering(directory, part, &mut child, port, path) {
            stop_all(directory)?;
            return Err(failure);
        }
    }
    let urls = format!(
        "exporter    http://127.0.0.1:{exporter_port}/metrics\n\
         prometheus  http://127.0.0.1:{prometheus_port}/ (alerts: http://127.0.0.1:{prometheus_port}/alerts)\n\
         logs        {}\n",
        directory.display()
    );
    write(&directory.join("urls"), &urls)?;
    print!("monitoring started\n{urls}");
    Ok(ExitCode::SUCCESS)
}

fn down(directory: &Path) -> Result<ExitCode, Failure> {
    if stop_all(directory)? {
        println!("monitoring stopped");
    } else {
        println!("monitoring was not running");
    }
    Ok(ExitCode::SUCCESS)
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text).map_err(|error| Failure::other(format!("cannot write '{}': {error}", path.display())))
}

fn pid_file(directory: &Path, part: &Part) -> PathBuf {
    directory.join(format!("{}.pid", part.name))
}

fn log_file(directory: &Path, part: &Part) -> PathBuf {
    directory.join(format!("{}.log", part.name))
}

/// The pid of `part` if its pid file names a live process with its command name.
fn running(directory: &Path, part: &Part) -> Option<libc::pid_t> {
    let pid: libc::pid_t = std::fs::read_to_string(pid_file(directory, part)).ok()?.trim().parse().ok()?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    // A zombie (exited, not yet reaped) is not running.
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let zombie = status.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
    (command.trim() == part.command_name && !zombie).then_some(pid)
}

/// `port`, or a free one for 0. A port that is taken is an input error naming its flag.
fn port_or_free(port: u16, flag: &str) -> Result<u16, Failure> {
    match TcpListener::bind(("127.0.0.1", port)) {
        Ok(listener) => Ok(listener.local_addr()?.port()),
        Err(error) => Err(Failure::input(format!("127.0.0.1:{port} is not free ({error}): choose another with {flag}"))),
    }
}

/// Starts `command` in its own process group (a Ctrl-C in the shell that ran `monitor up`
/// does not reach it), its output in its log, and records its pid. The child is not waited
/// for: once `monitor up` exits, init reaps it.
fn start(directory: &Path, part: &Part, command: &mut Command) -> Result<Child, Failure> {
    let log_path = log_file(directory, part);
    let log = std::fs::File::create(&log_path)
        .map_err(|error| Failure::other(format!("cannot create '{}': {error}", log_path.display())))?;
    let log_too = log.try_clone()?;
    let child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_too)
        .process_group(0)
        .spawn()
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => Failure::other(format!(
                "cannot start {}: '{}' is not installed (Debian package `prometheus`; ci/setup.sh installs it)",
                part.name, part.command_name
            )),
            _ => Failure::other(format!("cannot start {}: {error}", part.name)),
        })?;
    write(&pid_file(directory, part), &format!("{}\n", child.id()))?;
    Ok(child)
}

/// Waits until `child` answers `GET path` on `port`. Its exit is watched through the child
/// itself: between fork and exec /proc still names it `holdfast`.
fn wait_until_answering(directory: &Path, part: &Part, child: &mut Child, port: u16, path: &str) -> Result<(), Failure> {
    let deadline = Instant::now() + START_TIME_LIMIT;
    loop {
        if matches!(loopback_http::get(port, path, Duration::from_secs(5)), Ok((200, _))) {
            return Ok(());
        }
        let log = || std::fs::read_to_string(log_file(directory, part)).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Failure::other(format!("{} stopped as it started ({status}); its log:\n{}", part.name, log().trim_end())));
        }
        if Instant::now() > deadline {
            return Err(Failure::other(format!(
                "{} did not answer on 127.0.0.1:{port} within {} s; its log:\n{}",
                part.name,
                START_TIME_LIMIT.as_secs(),
                log().trim_end()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops both processes (SIGTERM, then SIGKILL after a while); true if any was running.
fn stop_all(directory: &Path) -> Result<bool, Failure> {
    let mut any = false;
    for part in [&PROMETHEUS, &EXPORTER] {
        if let Some(pid) = running(directory, part) {
            any = true;
            signal(pid, libc::SIGTERM)?;
            let deadline = Instant::now() + STOP_TIME_LIMIT;
            while running(directory, part).is_some() {
                if Instant::now() > deadline {
                    signal(pid, libc::SIGKILL)?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = std::fs::remove_file(pid_file(directory, part));
    }
    let _ = std::fs::remove_file(directory.join("urls"));
    Ok(any)
}

fn signal(pid: libc::pid_t, signal: libc::c_int) -> Result<(), Failure> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } != 0 {
        let error = std::io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::ESRCH) {
            return Err(Failure::other(format!("cannot signal pid {pid}: {error}")));
        }
    }
    Ok(())
}
