//! The TP1 service's counters: one page the service writes (after each round of work) and
//! the admin service reads and renders in the Prometheus text format with the kernel's
//! (`holdfast vm counters`, `holdfast_tp1_*`).
//!
//! Layout: little-endian `u64`s: magic; transactions acknowledged; errors by status code
//! (10); commits (batches written); commit latency: sum in nanoseconds, then a count per
//! bucket of [`COMMIT_BUCKETS_SECONDS`] (not cumulative) and one above the last; open
//! connections.

pub const PAGE_BYTES: usize = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"HFTP1CN2");
/// Status codes 0..=9 of docs/tp1-protocol.md (0, ok, is never counted as an error).
pub const STATUS_CODES: usize = 10;
/// Upper bounds of the commit-latency histogram's buckets.
pub const COMMIT_BUCKETS_SECONDS: [f64; 11] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];
const WORDS: usize = 1 + 1 + STATUS_CODES + 1 + 1 + COMMIT_BUCKETS_SECONDS.len() + 1 + 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub transactions_total: u64,
    pub errors_total: [u64; STATUS_CODES],
    pub commits_total: u64,
    pub commit_nanoseconds_sum: u64,
    /// Per bucket, then the one above the last bound.
    pub commit_buckets: [u64; COMMIT_BUCKETS_SECONDS.len() + 1],
    pub connections_open: u64,
}

impl Counters {
    pub fn commit_took(&mut self, nanoseconds: u64) {
        self.commits_total += 1;
        self.commit_nanoseconds_sum += nanoseconds;
        let seconds = nanoseconds as f64 / 1e9;
        let bucket = COMMIT_BUCKETS_SECONDS.iter().position(|&bound| seconds <= bound).unwrap_or(COMMIT_BUCKETS_SECONDS.len());
        self.commit_buckets[bucket] += 1;
    }

    pub fn encode(&self) -> [u8; WORDS * 8] {
        let mut words = [0u64; WORDS];
        words[0] = MAGIC;
        words[1] = self.transactions_total;
        words[2..2 + STATUS_CODES].copy_from_slice(&self.errors_total);
        let at = 2 + STATUS_CODES;
        words[at] = self.commits_total;
        words[at + 1] = self.commit_nanoseconds_sum;
        words[at + 2..at + 2 + self.commit_buckets.len()].copy_from_slice(&self.commit_buckets);
        words[WORDS - 1] = self.connections_open;
        let mut bytes = [0u8; WORDS * 8];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }

    /// The counters in `page`, or `None` if the service has not written it.
    pub fn decode(page: &[u8; PAGE_BYTES]) -> Option<Self> {
        let word = |index: usize| u64::from_le_bytes(page[index * 8..index * 8 + 8].try_into().expect("8 bytes"));
        if word(0) != MAGIC {
            return None;
        }
        let mut counters = Counters { transactions_total: word(1), ..Counters::default() };
        for (code, count) in counters.errors_total.iter_mut().enumerate() {
            *count = word(2 + code);
        }
        let at = 2 + STATUS_CODES;
        counters.commits_total = word(at);
        counters.commit_nanoseconds_sum = word(at + 1);
        for (bucket, count) in counters.commit_buckets.iter_mut().enumerate() {
            *count = word(at + 2 + bucket);
        }
        counters.connections_open = word(WORDS - 1);
        Some(counters)
    }

    /// The counters as Prometheus text lines, each through `line` (base units; the
    /// histogram's buckets cumulative, as the format has them). `status_name` names a
    /// status code for the `code` label.
    pub fn render(&self, status_name: impl Fn(usize) -> &'static str, mut line: impl FnMut(&[&str], f64)) {
        line(&["holdfast_tp1_transactions_total"], self.transactions_total as f64);
        for (code, &count) in self.errors_total.iter().enumerate().skip(1) {
            line(&["holdfast_tp1_errors_total{code=\"", status_name(code), "\"}"], count as f64);
        }
        let mut cumulative = 0;
        let mut bound_text = [0u8; 16];
        for (bucket, &count) in self.commit_buckets.iter().enumerate() {
            cumulative += count;
            let bound = match COMMIT_BUCKETS_SECONDS.get(bucket) {
                Some(&bound) => format_bound(bound, &mut bound_text),
                None => "+Inf",
            };
            line(&["holdfast_tp1_commit_seconds_bucket{le=\"", bound, "\"}"], cumulative as f64);
        }
        line(&["holdfast_tp1_commit_seconds_sum"], self.commit_nanoseconds_sum as f64 / 1e9);
        line(&["holdfast_tp1_commit_seconds_count"], self.commits_total as f64);
        line(&["holdfast_tp1_connections_open"], self.connections_open as f64);
    }
}

/// A bucket bound in the shortest decimal that names it (`0.0005`, `1`).
fn format_bound(bound: f64, text: &mut [u8; 16]) -> &str {
    let micros = (bound * 1e6 + 0.5) as u64;
    let (whole, fraction) = (micros / 1_000_000, micros % 1_000_000);
    let mut length = 0;
    let mut push = |byte: u8| {
        text[length] = byte;
        length += 1;
    };
    push(b'0' + whole as u8);
    if fraction != 0 {
        push(b'.');
        let mut digits = [0u8; 6];
        for (index, digit) in digits.iter_mut().enumerate() {
            *digit = (fraction / 10u64.pow(5 - index as u32) % 10) as u8;
        }
        let last = digits.iter().rposition(|&digit| digit != 0).expect("fraction not 0");
        for &digit in &digits[..=last] {
            push(b'0' + digit);
        }
    }
    core::str::from_utf8(&text[..length]).expect("ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    #[test]
    fn counters_round_trip_and_render_a_cumulative_histogram() {
        let mut counters = Counters { transactions_total: 10, connections_open: 3, ..Counters::default() };
        counters.errors_total[4] = 2;
        counters.commit_took(300_000);
        counters.commit_took(1_500_000);
        counters.commit_took(3_000_000_000);
        let mut page = [0u8; PAGE_BYTES];
        page[..counters.encode().len()].copy_from_slice(&counters.encode());
        assert_eq!(Counters::decode(&page), Some(counters));
        assert_eq!(Counters::decode(&[0; PAGE_BYTES]), None);
        let mut lines = Vec::new();
        counters.render(|code| ["ok", "a", "b", "c", "bad_token", "e", "f", "g", "h", "i"][code], |parts, value| {
            lines.push(std::format!("{} {value}", parts.concat()));
        });
        let text: String = lines.join("\n");
        assert!(text.contains("holdfast_tp1_transactions_total 10\n"), "{text}");
        assert!(text.contains("holdfast_tp1_errors_total{code=\"bad_token\"} 2\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"0.0005\"} 1\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"0.002\"} 2\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"1\"} 2\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_count 3\n"), "{text}");
        assert!(text.ends_with("holdfast_tp1_connections_open 3"), "{text}");
    }
}
