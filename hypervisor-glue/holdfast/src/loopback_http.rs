//! HTTP/1.0 GETs to the services `holdfast monitor` runs on 127.0.0.1 (Prometheus, the
//! exporter): waiting until they answer, and Prometheus's queries for `monitor snapshot`.
//! HTTP/1.0, so the body ends with the connection and is never chunked.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET path` on 127.0.0.1:`port`, each read waiting at most `timeout`: the status and the body.
pub fn get(port: u16, path: &str, timeout: Duration) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(timeout))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body).to_owned();
    Ok((status, body))
}

/// `text` for a query string: RFC 3986's unreserved characters as they are, every other byte
/// percent-encoded.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}
