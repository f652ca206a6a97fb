//! The network in ring 3, from the host: `holdfast run --tp1-port` forwards a port on
//! 127.0.0.1 to the guest, where the network service (services/net, smoltcp on the kernel's
//! network device) hands TCP to `tcp-echo` (services/selftest/src/tcp_echo.rs), which sends
//! every byte back. Real QEMU (user-mode networking), real smoltcp, real TCP: several
//! connections at once are served while a client floods without reading and others hold
//! connections open without sending; connections that ask for it are handed over, with
//! what they sent first, to another server (`tcp-upper`, which answers in upper case) on a
//! private listener, beside others echoed as before; connections handed to a private
//! listener that is then shut are reset; hand-overs to what is no listener, and orders to a
//! shut one, are refused; after a kill the restarted system serves and hands over new
//! connections again. Every host socket is on 127.0.0.1.

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use support::{LineReader, build_image, holdfast, run_holdfast, scratch_dir, source_dir, spawn_reading_lines};

/// Lines that end a test at once: a kernel fault or a ring-3 panic.
const BAD: [&str; 3] = ["kernel fault", "panic", "FAILED"];
/// How long a boot or a restart may take under TCG on a loaded host.
const BOOT_LIMIT: Duration = Duration::from_secs(120);
/// How long the echoes of one test may take.
const ECHO_LIMIT: Duration = Duration::from_secs(60);

/// Waits for a line containing `wanted`, failing with the lines seen if none comes within
/// `limit` or one contains a word of [`BAD`].
fn wait_for_line(lines: &Receiver<String>, seen: &mut Vec<String>, limit: Duration, wanted: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            panic!("no line with '{wanted}' within {limit:?}:\n{}", seen.join("\n"));
        };
        seen.push(line.clone());
        if let Some(word) = BAD.iter().find(|word| line.contains(*word)) {
            panic!("'{word}' printed:\n{}", seen.join("\n"));
        }
        if line.contains(wanted) {
            return;
        }
    }
}

/// A port on 127.0.0.1 that is free now (the kernel's choice), for the forward.
fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).expect("bind 127.0.0.1:0").local_addr().expect("local address").port()
}

/// The image (network service, tcp-echo, admin) and a fresh store for `test_name`.
fn net_system(test_name: &str) -> (PathBuf, PathBuf) {
    let image_dir = build_image("net-image", Some(&source_dir().join("services/net-manifest.toml")));
    let store = scratch_dir(test_name).join("store.img");
    let format = run_holdfast(&["store", "format", "--size-mib", "64", "--force", store.to_str().expect("UTF-8 path")]);
    assert_eq!(format.status, Some(0), "{}", format.transcript());
    (image_dir, store)
}

fn run_vm(name: &str, image_dir: &Path, store: &Path, port: u16) -> LineReader {
    spawn_reading_lines(
        holdfast()
            .args(["run", "--name", name, "--accel", "tcg", "--timeout-seconds", "600"])
            .arg("--image-dir")
            .arg(image_dir)
            .arg("--disk")
            .arg(store)
            .args(["--tp1-port", &port.to_string()]),
    )
}

/// Bytes that tell connections and positions apart, so that a misplaced byte is seen.
fn payload(connection: usize, length: usize) -> Vec<u8> {
    (0..length).map(|at| (at * 31 + connection * 7 + at / 251) as u8).collect()
}

/// Connects to the forward and echoes `messages` (each sent whole, then read back whole),
/// retrying the connection until `deadline` while the guest is not serving yet (QEMU
/// accepts on the host side first, then closes when the guest refuses). Returns the
/// connection's time from the first byte sent to the last byte back.
fn echo_session(port: u16, connection: usize, sizes: &[usize], deadline: Instant) -> Result<Duration, String> {
    let mut last_error = String::from("never tried");
    while Instant::now() < deadline {
        match try_echo(port, connection, sizes) {
            Ok(elapsed) => return Ok(elapsed),
            Err(error) => {
                eprintln!("connection {connection}: {error}; trying again");
                last_error = error;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("connection {connection}: {last_error}"))
}

fn try_echo(port: u16, connection: usize, sizes: &[usize]) -> Result<Duration, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| format!("connect: {error}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20))).map_err(|error| error.to_string())?;
    stream.set_nodelay(true).map_err(|error| error.to_string())?;
    let started = Instant::now();
    for (round, &size) in sizes.iter().enumerate() {
        let sent = payload(connection + round, size);
        stream.write_all(&sent).map_err(|error| format!("send {size} bytes: {error}"))?;
        let mut back = vec![0u8; size];
        stream.read_exact(&mut back).map_err(|error| format!("read {size} bytes back: {error}"))?;
        if back != sent {
            let at = back.iter().zip(&sent).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!("round {round}: the echo differs at byte {at} of {size}"));
        }
    }
    let elapsed = started.elapsed();
    close_and_expect_close(&mut stream, "the echo")?;
    Ok(elapsed)
}

/// Closes the client's side of `stream` and expects the server to close its own once it
/// has seen that, with nothing more sent after `last`.
fn close_and_expect_close(stream: &mut TcpStream, last: &str) -> Result<(), String> {
    stream.shutdown(Shutdown::Write).map_err(|error| error.to_string())?;
    let mut rest = [0u8; 16];
    match stream.read(&mut rest) {
        Ok(0) => Ok(()),
        Ok(count) => Err(format!("{count} bytes after {last}")),
        Err(error) => Err(format!("waiting for the close: {error}")),
    }
}

/// How long a session waits between the two writes of a message, so that `tcp-echo` sees
/// the first bytes alone and must keep them until the rest decides (it says so on its
/// console, and the first test checks that it did at least once).
const BETWEEN_WRITES: Duration = Duration::from_millis(300);

/// A connection that `tcp-echo` hands over to `tcp-upper` (its first bytes say `upper:`),
/// the guest already serving: every message comes back in upper case, the first one too,
/// which `tcp-echo` read before handing it over. Each message goes in two writes, the
/// prefix cut, so that `tcp-echo` sees the first bytes of the connection before it can
/// decide and keeps them until it hands the connection over; then the server closes its
/// side once it has seen ours.
fn upper_session(port: u16, messages: &[&[u8]]) -> Result<(), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| format!("connect: {error}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20))).map_err(|error| error.to_string())?;
    stream.set_nodelay(true).map_err(|error| error.to_string())?;
    for message in messages {
        let (head, tail) = message.split_at(message.len().min(3));
        stream.write_all(head).map_err(|error| format!("send: {error}"))?;
        std::thread::sleep(BETWEEN_WRITES);
        stream.write_all(tail).map_err(|error| format!("send: {error}"))?;
        let mut back = vec![0u8; message.len()];
        stream.read_exact(&mut back).map_err(|error| format!("read back: {error}"))?;
        if back != message.to_ascii_uppercase() {
            return Err(format!("sent {:?}, got {:?}", String::from_utf8_lossy(message), String::from_utf8_lossy(&back)));
        }
    }
    close_and_expect_close(&mut stream, "the last message")
}

/// A connection `tcp-echo` hands to a private listener and then shuts (its first bytes say
/// `drop:`): it is reset or closed, and nothing comes back.
fn dropped_session(port: u16) -> Result<(), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|error| format!("connect: {error}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20))).map_err(|error| error.to_string())?;
    stream.write_all(b"drop: this one").map_err(|error| format!("send: {error}"))?;
    let mut back = [0u8; 64];
    match stream.read(&mut back) {
        Ok(0) => Ok(()),
        Err(error) if matches!(error.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted) => Ok(()),
        Ok(count) => Err(format!("a dropped connection got {:?}", String::from_utf8_lossy(&back[..count]))),
        Err(error) => Err(format!("a dropped connection was neither reset nor closed: {error}")),
    }
}

/// Hands over `clients` connections at once to `tcp-upper` and as many to a listener that
/// is shut, beside as many echoed ones; panics naming every one that failed.
fn hand_over_concurrently(port: u16, clients: usize, deadline: Instant) {
    let long: &'static [u8] = Box::leak(b"a longer message, ".repeat(200).into_boxed_slice());
    let threads: Vec<_> = (0..clients)
        .map(|_| std::thread::spawn(move || upper_session(port, &[b"upper: handed over", b"and then more", long])))
        .chain((0..clients).map(|_| std::thread::spawn(move || dropped_session(port))))
        .chain((0..clients).map(|connection| {
            std::thread::spawn(move || echo_session(port, connection * 100, &[100, 5_000], deadline).map(|_| ()))
        }))
        .collect();
    let failures: Vec<_> = threads.into_iter().filter_map(|thread| thread.join().expect("client thread").err()).collect();
    assert!(failures.is_empty(), "{} of {} connections failed: {failures:#?}", failures.len(), 3 * clients);
}

/// Echoes on `clients` connections at once; panics naming every one that failed.
fn echo_concurrently(port: u16, clients: usize, sizes: &'static [usize], deadline: Instant) -> Vec<Duration> {
    let threads: Vec<_> = (0..clients)
        .map(|connection| std::thread::spawn(move || echo_session(port, connection * 100, sizes, deadline)))
        .collect();
    let results: Vec<_> = threads.into_iter().map(|thread| thread.join().expect("client thread")).collect();
    let failures: Vec<_> = results.iter().filter_map(|result| result.as_ref().err()).collect();
    assert!(failures.is_empty(), "{} of {clients} connections failed: {failures:#?}", failures.len());
    results.into_iter().map(Result::unwrap).collect()
}

/// Connects once the guest serves (an echo of one byte), so that what follows measures
/// serving, not booting.
fn wait_until_serving(port: u16) {
    echo_session(port, 9999, &[1], Instant::now() + BOOT_LIMIT).expect("the guest echoes a byte");
}

#[test]
fn several_connections_are_echoed_at_once_while_a_client_floods_and_others_stall() {
    let (image_dir, store) = net_system("net-echo");
    let port = free_port();
    let name = format!("net-echo-{}", std::process::id());
    let vm = run_vm(&name, &image_dir, &store, port);
    let mut seen = Vec::new();
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "tcp-echo: hand-overs to no listener refused");
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "tcp-echo: listening on 7100");
    wait_until_serving(port);
    let started = Instant::now();
    hand_over_concurrently(port, 3, started + ECHO_LIMIT);
    // The split writes did what they are for: tcp-echo kept a first `upp` it could not
    // decide on, and handed it over with the rest.
    wait_for_line(&vm.lines, &mut seen, ECHO_LIMIT, "tcp-echo: first bytes kept undecided: 1");
    eprintln!("3 connections handed over, 3 dropped and 3 echoed, at once, in {:?}", started.elapsed());
    // A client that sends and shuts its side at once: its bytes come back, handed over or
    // not, and then the end of the connection (the service tells the server its peer ended,
    // and the server closes once it has answered).
    for message in [&b"upper: and shut"[..], b"echoed, and shut"] {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(ECHO_LIMIT)).expect("timeout");
        stream.write_all(message).expect("send");
        stream.shutdown(Shutdown::Write).expect("shut the sending side");
        let mut back = Vec::new();
        stream.read_to_end(&mut back).expect("read until the server closes");
        let expected = if message.starts_with(b"upper:") { message.to_ascii_uppercase() } else { message.to_vec() };
        assert_eq!(String::from_utf8_lossy(&back), String::from_utf8_lossy(&expected), "a half-closed client's bytes");
    }

    // Slowloris: connections that send nothing for a long while, opened in a burst of more
    // than the service keeps listening at a time (it replenishes between frames).
    let stalled: Vec<TcpStream> = (0..12)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("a stalled client connects"))
        .collect();
    // A flood: garbage as fast as the connection takes it, never reading the echo.
    let flood = std::thread::spawn(move || {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
            return 0;
        };
        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
        let garbage: Vec<u8> = (0..16_384u32).map(|at| (at.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut sent = 0usize;
        let until = Instant::now() + Duration::from_secs(15);
        while Instant::now() < until {
            match stream.write(&garbage) {
                Ok(count) => sent += count,
                // The service stopped reading (its window is full) or closed it: the
                // flood is held off, which is the point.
                Err(_) => break,
            }
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(500));

    static SIZES: [usize; 3] = [100, 5_000, 20_000];
    let started = Instant::now();
    let times = echo_concurrently(port, 8, &SIZES, started + ECHO_LIMIT);
    let slowest = times.iter().max().expect("eight clients");
    eprintln!("8 connections echoed {} bytes each, at once, beside a flood and 12 stalled clients: slowest {slowest:?}, all in {:?}", SIZES.iter().sum::<usize>(), started.elapsed());
    for mut stream in stalled {
        // Still open and still served: a byte comes back.
        stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
        stream.write_all(b"?").expect("a stalled client sends a byte");
        let mut back = [0u8; 1];
        stream.read_exact(&mut back).expect("the stalled client's byte comes back");
        assert_eq!(&back, b"?");
    }
    let flooded = flood.join().expect("flood thread");
    eprintln!("the flood sent {flooded} bytes");
    // The system is still whole and serving.
    echo_concurrently(port, 2, &SIZES, Instant::now() + ECHO_LIMIT);
    while let Ok(line) = vm.lines.try_recv() {
        seen.push(line.clone());
        assert!(!BAD.iter().any(|word| line.contains(word)), "{}", seen.join("\n"));
    }
    support::kill_and_wait(&name, vm);
}

#[test]
fn after_a_kill_and_a_restart_from_the_store_new_connections_are_echoed() {
    let (image_dir, store) = net_system("net-restart");
    let port = free_port();
    let name = format!("net-restart-{}", std::process::id());
    let vm = run_vm(&name, &image_dir, &store, port);
    let mut seen = Vec::new();
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "tcp-echo: listening on 7100");
    static SIZES: [usize; 2] = [10, 3_000];
    echo_concurrently(port, 3, &SIZES, Instant::now() + BOOT_LIMIT);
    // A connection open across the kill, and a checkpoint that holds it.
    let mut open = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    open.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    open.write_all(b"held").expect("send");
    let mut back = [0u8; 4];
    open.read_exact(&mut back).expect("echo");
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "committed");
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "committed");
    support::kill_and_wait(&name, vm);
    drop(open);

    let vm = run_vm(&name, &image_dir, &store, port);
    let mut seen = Vec::new();
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "holdfast: restarted from checkpoint");
    // The service was checkpointed with a connection open: it notices the fresh device.
    wait_for_line(&vm.lines, &mut seen, BOOT_LIMIT, "net: the system restarted");
    let started = Instant::now();
    let times = echo_concurrently(port, 4, &SIZES, started + BOOT_LIMIT);
    eprintln!("after the restart, 4 connections at once echoed within {:?} of the restart line, slowest echo {:?}", started.elapsed(), times.iter().max());
    // The private listener and its server came back with the rest.
    hand_over_concurrently(port, 1, Instant::now() + ECHO_LIMIT);
    support::kill_and_wait(&name, vm);
}
