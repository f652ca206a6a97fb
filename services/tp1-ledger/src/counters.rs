//! The TP1 service's counters: one page the service writes (after each round of work) and
//! the admin service reads and renders in the Prometheus text format with the kernel's
//! (`holdfast vm counters`, `holdfast_tp1_*`). Each tenant's service writes a page of its
//! own, which the admin service bought from the tenant's bank; its samples carry the label
//! `tenant="<name>"`.
//!
//! Layout: little-endian `u64`s: magic; transactions acknowledged; errors by status code
//! (10); commits (batches written); commit latency: sum in nanoseconds, then a count per
//! bucket of [`COMMIT_BUCKETS_SECONDS`] (not cumulative) and one above the last; open
//! connections; valid tokens in the tokens page the service reads (the appliance's: every
//! owner's, which it routes by; a tenant's: its page of its own, so only the tenant's).

pub const PAGE_BYTES: usize = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"HFTP1CN3");
/// Status codes 0..=9 of docs/tp1-protocol.md (0, ok, is never counted as an error).
pub const STATUS_CODES: usize = 10;
/// Upper bounds of the commit-latency histogram's buckets.
pub const COMMIT_BUCKETS_SECONDS: [f64; 11] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];
const WORDS: usize = 1 + 1 + STATUS_CODES + 1 + 1 + COMMIT_BUCKETS_SECONDS.len() + 1 + 1 + 1;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub transactions_total: u64,
    pub errors_total: [u64; STATUS_CODES],
    pub commits_total: u64,
    pub commit_nanoseconds_sum: u64,
    /// Per bucket, then the one above the last bound.
    pub commit_buckets: [u64; COMMIT_BUCKETS_SECONDS.len() + 1],
    pub connections_open: u64,
    /// The valid tokens the service can see: a tenant's service sees only its own.
    pub tokens: u64,
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
        words[WORDS - 2] = self.connections_open;
        words[WORDS - 1] = self.tokens;
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
        counters.connections_open = word(WORDS - 2);
        counters.tokens = word(WORDS - 1);
        Some(counters)
    }
}

/// One TP1 service's counters, and the tenant whose service it is (`None`: the
/// appliance's own).
pub type Source<'a> = (Option<&'a str>, Counters);

/// Where [`render`] sends each sample: its name, its labels (key, value) and its value.
pub type Line<'a> = dyn FnMut(&str, &[(&str, &str)], f64) + 'a;

/// The counters of `sources` as Prometheus text samples, each through `line` as a name,
/// its labels and its value: family by family, as the text format wants each family's
/// samples together, and within one a sample per source, labelled `tenant` for a tenant's
/// service (base units; the histogram's buckets cumulative, as the format has them).
/// `status_name` names a status code for the `code` label.
pub fn render(sources: &[Source<'_>], status_name: impl Fn(usize) -> &'static str, mut line: impl FnMut(&str, &[(&str, &str)], f64)) {
    // A sample per source, labelled with its tenant (if any), then `extra`.
    let each = |line: &mut Line<'_>, name: &str, extra: Option<(&str, &str)>, value: &dyn Fn(&Counters) -> f64| {
        for (tenant, counters) in sources {
            with_labels(*tenant, extra, |labels| line(name, labels, value(counters)));
        }
    };
    each(&mut line, "holdfast_tp1_transactions_total", None, &|counters| counters.transactions_total as f64);
    for code in 1..STATUS_CODES {
        each(&mut line, "holdfast_tp1_errors_total", Some(("code", status_name(code))), &|counters| counters.errors_total[code] as f64);
    }
    // The histogram series by series: its buckets, sum and count, as client libraries
    // write them.
    let mut bound_text = [0u8; 16];
    for (tenant, counters) in sources {
        let mut cumulative = 0;
        for (bucket, &count) in counters.commit_buckets.iter().enumerate() {
            cumulative += count;
            let bound = match COMMIT_BUCKETS_SECONDS.get(bucket) {
                Some(&bound) => format_bound(bound, &mut bound_text),
                None => "+Inf",
            };
            with_labels(*tenant, Some(("le", bound)), |labels| line("holdfast_tp1_commit_seconds_bucket", labels, cumulative as f64));
        }
        with_labels(*tenant, None, |labels| {
            line("holdfast_tp1_commit_seconds_sum", labels, counters.commit_nanoseconds_sum as f64 / 1e9);
            line("holdfast_tp1_commit_seconds_count", labels, counters.commits_total as f64);
        });
    }
    each(&mut line, "holdfast_tp1_connections_open", None, &|counters| counters.connections_open as f64);
    each(&mut line, "holdfast_tp1_tokens", None, &|counters| counters.tokens as f64);
}

/// Calls `with` with the labels: `tenant="<tenant>"` if a tenant's, then `extra`.
fn with_labels(tenant: Option<&str>, extra: Option<(&str, &str)>, with: impl FnOnce(&[(&str, &str)])) {
    match (tenant.map(|tenant| ("tenant", tenant)), extra) {
        (Some(tenant), Some(extra)) => with(&[tenant, extra]),
        (Some(one), None) | (None, Some(one)) => with(&[one]),
        (None, None) => with(&[]),
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
        let mut counters = Counters { transactions_total: 10, connections_open: 3, tokens: 5, ..Counters::default() };
        counters.errors_total[4] = 2;
        counters.commit_took(300_000);
        counters.commit_took(1_500_000);
        counters.commit_took(3_000_000_000);
        let mut page = [0u8; PAGE_BYTES];
        page[..counters.encode().len()].copy_from_slice(&counters.encode());
        assert_eq!(Counters::decode(&page), Some(counters));
        assert_eq!(Counters::decode(&[0; PAGE_BYTES]), None);
        let mut acme = Counters { transactions_total: 7, tokens: 2, ..Counters::default() };
        acme.commit_took(300_000);
        let sources = [(None, counters), (Some("acme"), acme)];
        let mut lines = Vec::new();
        let status_name = |code: usize| ["ok", "a", "b", "c", "bad_token", "e", "f", "g", "h", "i"][code];
        render(&sources, status_name, |name, labels, value| {
            let labels: Vec<String> = labels.iter().map(|(key, value)| std::format!("{key}=\"{value}\"")).collect();
            let labels = if labels.is_empty() { String::new() } else { std::format!("{{{}}}", labels.join(",")) };
            lines.push(std::format!("{name}{labels} {value}"));
        });
        let text: String = lines.join("\n") + "\n";
        assert!(text.contains("holdfast_tp1_transactions_total 10\nholdfast_tp1_transactions_total{tenant=\"acme\"} 7\n"), "{text}");
        assert!(text.contains("holdfast_tp1_errors_total{code=\"bad_token\"} 2\n"), "{text}");
        assert!(text.contains("holdfast_tp1_errors_total{tenant=\"acme\",code=\"bad_token\"} 0\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"0.0005\"} 1\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"0.002\"} 2\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"1\"} 2\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{le=\"+Inf\"} 3\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_bucket{tenant=\"acme\",le=\"+Inf\"} 1\n"), "{text}");
        assert!(text.contains("holdfast_tp1_commit_seconds_count 3\n"), "{text}");
        // Family by family: every family's samples are together.
        let family = |line: &str| -> String {
            let name = line.split(['{', ' ']).next().unwrap();
            String::from(["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix)).unwrap_or(name))
        };
        let names: Vec<String> = lines.iter().map(|line| family(line)).collect();
        let mut seen = Vec::new();
        for pair in names.windows(2) {
            if pair[0] != pair[1] {
                assert!(!seen.contains(&pair[1]), "{} comes back after other families:\n{text}", pair[1]);
                seen.push(pair[0].clone());
            }
        }
        assert!(text.contains("holdfast_tp1_connections_open 3\nholdfast_tp1_connections_open{tenant=\"acme\"} 0\n"), "{text}");
        assert!(text.ends_with("holdfast_tp1_tokens 5\nholdfast_tp1_tokens{tenant=\"acme\"} 2\n"), "{text}");
    }
}
