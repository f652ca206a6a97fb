//! What a pair keeps across supervisor runs, in `pair.json` in its state directory: which
//! node is the primary, the term, the mode, and the history of promotions. Written whole
//! to a temporary file, flushed, renamed over the old one and the directory flushed, so
//! that a crash leaves the old state or the new, never half of one: a promotion is
//! recorded before the supervisor says it happened.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::detect::StandbyLoss;

/// Bumped on any change to the file's fields.
pub const STATE_VERSION: u32 = 1;
pub const STATE_FILE: &str = "pair.json";

/// One promotion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promotion {
    /// Milliseconds since the Unix epoch, and the same as UTC text.
    pub time_unix_ms: u64,
    pub time: String,
    /// Why: the failure detected, or `failover requested`.
    pub reason: String,
    /// The term the new primary serves in.
    pub term: u64,
    pub old_primary: u8,
    pub new_primary: u8,
    /// Where the stream stood, from the newest heartbeats: the old primary's checkpoint
    /// generation and next journal ticket, the standby's received and durable sequence.
    pub checkpoint_generation: u64,
    pub journal_ticket_next: u64,
    pub standby_received: u64,
    pub standby_durable: u64,
    /// From the failure's detection to the Promote message sent, in milliseconds.
    pub takeover_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairState {
    pub version: u32,
    /// The node (1 or 2) that is the primary.
    pub primary: u8,
    pub term: u64,
    /// The replication mode's name (`wire::Mode::name`).
    pub mode: String,
    pub lag_bytes_max: u64,
    pub on_standby_loss: StandbyLoss,
    pub store_mib: u64,
    pub promotions: Vec<Promotion>,
}

impl PairState {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// The state in `dir`, `Ok(None)` if there is none yet.
    pub fn read(dir: &Path) -> Result<Option<Self>, String> {
        let path = Self::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read '{}': {error}", path.display())),
        };
        let version = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|value| value.get("version")?.as_u64());
        if version != Some(u64::from(STATE_VERSION)) {
            return Err(format!(
                "'{}' is not a pair state of version {STATE_VERSION} (version {})",
                path.display(),
                version.map_or("missing".to_owned(), |version| version.to_string())
            ));
        }
        let state: Self =
            serde_json::from_str(&text).map_err(|error| format!("'{}' is damaged: {error}", path.display()))?;
        if !matches!(state.primary, 1 | 2) {
            return Err(format!("'{}' names node {} the primary: a pair has nodes 1 and 2", path.display(), state.primary));
        }
        Ok(Some(state))
    }

    /// Writes the state durably (see the module's comment).
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let path = Self::path(dir);
        let temporary = dir.join(format!("{STATE_FILE}.new"));
        let text = serde_json::to_string_pretty(self).expect("the state serializes");
        let written = File::create(&temporary)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())?;
                file.write_all(b"\n")?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&temporary, &path))
            .and_then(|()| File::open(dir)?.sync_all());
        written.map_err(|error| format!("cannot write '{}': {error}", path.display()))
    }
}

/// Milliseconds since the Unix epoch now.
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// `2026-11-26T17:40:05.123Z` for a time in milliseconds since the epoch.
pub fn utc_text(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, second_of_day) = (seconds / 86_400, seconds % 86_400);
    // Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("holdfast-pair-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn state() -> PairState {
        PairState {
            version: STATE_VERSION,
            primary: 2,
            term: 1,
            mode: "sync-durable".into(),
            lag_bytes_max: 1 << 24,
            on_standby_loss: StandbyLoss::Degrade,
            store_mib: 2048,
            promotions: vec![Promotion {
                time_unix_ms: 1_795_000_000_123,
                time: utc_text(1_795_000_000_123),
                reason: "the primary failed: its QEMU exited".into(),
                term: 1,
                old_primary: 1,
                new_primary: 2,
                checkpoint_generation: 12,
                journal_ticket_next: 4321,
                standby_received: 999,
                standby_durable: 998,
                takeover_ms: 4,
            }],
        }
    }

    #[test]
    fn the_state_and_its_history_survive_a_round_trip() {
        let dir = scratch("round-trip");
        assert_eq!(PairState::read(&dir), Ok(None));
        state().write(&dir).unwrap();
        assert_eq!(PairState::read(&dir), Ok(Some(state())));
        let mut next = state();
        next.promotions.push(next.promotions[0].clone());
        next.write(&dir).unwrap();
        assert_eq!(PairState::read(&dir).unwrap().unwrap().promotions.len(), 2);
        assert!(!dir.join("pair.json.new").exists(), "the temporary file was renamed");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_or_foreign_state_is_refused_with_its_reason() {
        let dir = scratch("damaged");
        std::fs::write(PairState::path(&dir), "{\"version\": 1, \"primary\": ").unwrap();
        assert!(PairState::read(&dir).unwrap_err().contains("not a pair state of version 1"));
        std::fs::write(PairState::path(&dir), "{\"version\": 7}").unwrap();
        assert!(PairState::read(&dir).unwrap_err().contains("(version 7)"));
        let mut wrong = serde_json::to_value(state()).unwrap();
        wrong["primary"] = 3.into();
        std::fs::write(PairState::path(&dir), wrong.to_string()).unwrap();
        assert!(PairState::read(&dir).unwrap_err().contains("names node 3 the primary"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn times_are_utc_text() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc_text(951_782_400_005), "2000-02-29T00:00:00.005Z");
        assert_eq!(utc_text(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
