//! What the generator sent and what was acknowledged, kept in files under a state directory
//! so that `check` can compare them with the target's history after any run, crash or
//! restart: `sent` gets a transaction's id before its first attempt goes out, `acknowledged`
//! its id, history index and balance once a reply says it is durable. One line each, in
//! hexadecimal, appended with one write(2) (no buffering in this process, so a killed
//! generator loses nothing it has sent).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
use holdfast_tp1_protocol::{TransactionId, TransactionResult};

const SENT_FILE: &str = "sent";
const ACKNOWLEDGED_FILE: &str = "acknowledged";

/// The ledger files of one target, open for appending.
pub struct Ledger {
    sent: Mutex<File>,
    acknowledged: Mutex<File>,
}

impl Ledger {
    /// Opens (creating) the ledger in `dir`.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let open = |name: &str| {
            let path = dir.join(name);
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))
        };
        Ok(Ledger {
            sent: Mutex::new(open(SENT_FILE)?),
            acknowledged: Mutex::new(open(ACKNOWLEDGED_FILE)?),
        })
    }

    /// Empties the ledger in `dir`: after `load`, nothing has been sent to the new data.
    pub fn reset(dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for name in [SENT_FILE, ACKNOWLEDGED_FILE] {
            let path = dir.join(name);
            File::create(&path).with_context(|| format!("emptying {}", path.display()))?;
        }
        Ok(())
    }

    pub fn record_sent(&self, id: &TransactionId) -> anyhow::Result<()> {
        let line = format!("{id}\n");
        lock(&self.sent)
            .write_all(line.as_bytes())
            .context("writing the sent ledger")
    }

    pub fn record_acknowledged(
        &self,
        id: &TransactionId,
        result: &TransactionResult,
    ) -> anyhow::Result<()> {
        let line = format!("{id} {} {}\n", result.history_index, result.account_balance);
        lock(&self.acknowledged)
            .write_all(line.as_bytes())
            .context("writing the acknowledged ledger")
    }
}

fn lock(file: &Mutex<File>) -> std::sync::MutexGuard<'_, File> {
    file.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// An id acknowledged twice with different results: the id, the first, the second.
pub type Disagreement = (TransactionId, TransactionResult, TransactionResult);

/// A ledger read back for `check`.
#[derive(Debug, Default)]
pub struct LedgerContents {
    /// Every id sent, once each (a retry is not written again).
    pub sent: Vec<TransactionId>,
    /// Every acknowledgement, in order; an id acknowledged twice (a retry after a lost
    /// reply) appears twice, and both must agree.
    pub acknowledged: Vec<(TransactionId, TransactionResult)>,
}

impl LedgerContents {
    /// Reads the ledger in `dir`. A last line cut short (a generator killed mid-write) is
    /// skipped; any other bad line is an error naming it.
    pub fn read(dir: &Path) -> anyhow::Result<Self> {
        let mut contents = LedgerContents::default();
        for (line_number, line, last) in lines(&dir.join(SENT_FILE))? {
            match parse_id(&line) {
                Some(id) => contents.sent.push(id),
                None if last => {}
                None => bail!(
                    "{}:{line_number}: not a transaction id: {line:?}",
                    dir.join(SENT_FILE).display()
                ),
            }
        }
        for (line_number, line, last) in lines(&dir.join(ACKNOWLEDGED_FILE))? {
            let mut words = line.split(' ');
            let parsed = (|| {
                let id = parse_id(words.next()?)?;
                let history_index = words.next()?.parse().ok()?;
                let account_balance = words.next()?.parse().ok()?;
                words.next().is_none().then_some((
                    id,
                    TransactionResult {
                        account_balance,
                        history_index,
                    },
                ))
            })();
            match parsed {
                Some(entry) => contents.acknowledged.push(entry),
                None if last => {}
                None => bail!(
                    "{}:{line_number}: not 'id history_index balance': {line:?}",
                    dir.join(ACKNOWLEDGED_FILE).display()
                ),
            }
        }
        Ok(contents)
    }

    /// Each acknowledged id's result; an id acknowledged twice with different results is
    /// listed in the second value (the target answered a retry differently).
    pub fn acknowledged_by_id(
        &self,
    ) -> (HashMap<TransactionId, TransactionResult>, Vec<Disagreement>) {
        let mut by_id = HashMap::with_capacity(self.acknowledged.len());
        let mut disagreements = Vec::new();
        for (id, result) in &self.acknowledged {
            if let Some(first) = by_id.insert(*id, *result)
                && first != *result
            {
                disagreements.push((*id, first, *result));
            }
        }
        (by_id, disagreements)
    }
}

/// The lines of `path` (none if it does not exist), numbered from 1, each with whether it
/// is the last and lacks its newline.
fn lines(path: &PathBuf) -> anyhow::Result<Vec<(usize, String, bool)>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).with_context(|| format!("opening {}", path.display())),
    };
    let text = std::io::read_to_string(BufReader::new(file))
        .with_context(|| format!("reading {}", path.display()))?;
    let complete = text.ends_with('\n');
    let all: Vec<&str> = text.lines().collect();
    let count = all.len();
    Ok(all
        .into_iter()
        .enumerate()
        .map(|(index, line)| (index + 1, line.to_owned(), index + 1 == count && !complete))
        .collect())
}

fn parse_id(text: &str) -> Option<TransactionId> {
    if text.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (byte, index) in bytes.iter_mut().zip((0..32).step_by(2)) {
        *byte = u8::from_str_radix(text.get(index..index + 2)?, 16).ok()?;
    }
    Some(TransactionId(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_round_trips_and_a_cut_last_line_is_skipped() {
        let dir = std::env::temp_dir().join(format!("holdfast-tp1-ledger-{}", std::process::id()));
        Ledger::reset(&dir).unwrap();
        let ledger = Ledger::open(&dir).unwrap();
        let first = TransactionId([0xab; 16]);
        let second = TransactionId([0x01; 16]);
        ledger.record_sent(&first).unwrap();
        ledger.record_sent(&second).unwrap();
        let result = TransactionResult {
            account_balance: -12,
            history_index: 7,
        };
        ledger.record_acknowledged(&first, &result).unwrap();
        drop(ledger);
        let mut sent = OpenOptions::new()
            .append(true)
            .open(dir.join(SENT_FILE))
            .unwrap();
        sent.write_all(b"0123").unwrap();
        let contents = LedgerContents::read(&dir).unwrap();
        assert_eq!(contents.sent, vec![first, second]);
        assert_eq!(contents.acknowledged, vec![(first, result)]);
        std::fs::write(
            dir.join(SENT_FILE),
            "zz\nabababababababababababababababab\n",
        )
        .unwrap();
        let error = LedgerContents::read(&dir).unwrap_err().to_string();
        assert!(error.contains("sent:1: not a transaction id"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
