//! What the CLI and the metrics exporter ask of a store: counters, an inspection summary
//! and a full check (`holdfast store inspect/check`).

use alloc::vec::Vec;

use crate::device::{BLOCK_SIZE, BlockDevice};
use crate::error::{Check, Corruption, LogLoss, Region, StoreError};
use crate::format::home_table::HomeTable;
use crate::format::log_record::{BlockKind, LogHeader, RecordKind};
use crate::format::superblock::{LogCursor, LogTruncation, Superblock};
use crate::format::{as_block, checksum, sealed_checksum, zeroed_block};
use crate::geometry::{Geometry, Layout};
use crate::histogram::SecondsHistogram;
use crate::home::{data_region, table_region};
use crate::phase::CheckpointPhase;
use crate::store::{MirrorStatus, Store};

/// Counters for the Prometheus exporter; names follow its conventions (base units,
/// `_total` for counters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StoreCounters {
    /// The newest committed checkpoint generation.
    pub checkpoint_generation: u64,
    /// Nodes and pages written into checkpoints since open.
    pub checkpoint_objects_written_total: u64,
    /// The last stabilization time the caller noted (the store has no clock).
    pub checkpoint_stabilization_last_seconds: f64,
    /// Every stabilization time the caller noted since open.
    pub checkpoint_stabilization_seconds: SecondsHistogram,
    pub log_fill_ratio: f64,
    /// Log-resident blocks (node pots and pages) the current migration still has to move.
    pub migration_backlog_objects: u64,
    pub migrated_blocks_total: u64,
    pub journal_commits_total: u64,
    pub device_written_bytes_total: u64,
    /// Bad or stale copies replaced by a good one from the other mirror.
    pub mirror_repaired_blocks_total: u64,
    /// 1 while a mirror is missing, failed or resilvering.
    pub mirror_degraded: u64,
    /// Scrubs that checked every home block's copies on every mirror to the end.
    pub scrub_passes_total: u64,
}

impl StoreCounters {
    /// The histograms with their metric names (the lines [`SecondsHistogram::write_text`]
    /// writes).
    pub fn histograms(&self) -> [(&'static str, &SecondsHistogram); 1] {
        [(
            "holdfast_checkpoint_stabilization_seconds",
            &self.checkpoint_stabilization_seconds,
        )]
    }

    /// Every counter but the histograms with its metric name, for the text exposition
    /// format.
    pub fn metrics(&self) -> [(&'static str, f64); 11] {
        [
            (
                "holdfast_checkpoint_generation",
                self.checkpoint_generation as f64,
            ),
            (
                "holdfast_checkpoint_objects_written_total",
                self.checkpoint_objects_written_total as f64,
            ),
            (
                "holdfast_checkpoint_stabilization_last_seconds",
                self.checkpoint_stabilization_last_seconds,
            ),
            ("holdfast_store_log_fill_ratio", self.log_fill_ratio),
            (
                "holdfast_migration_backlog_objects",
                self.migration_backlog_objects as f64,
            ),
            (
                "holdfast_migrated_blocks_total",
                self.migrated_blocks_total as f64,
            ),
            (
                "holdfast_journal_commits_total",
                self.journal_commits_total as f64,
            ),
            (
                "holdfast_store_written_bytes_total",
                self.device_written_bytes_total as f64,
            ),
            (
                "holdfast_mirror_repaired_blocks_total",
                self.mirror_repaired_blocks_total as f64,
            ),
            ("holdfast_mirror_degraded", self.mirror_degraded as f64),
            ("holdfast_scrub_passes_total", self.scrub_passes_total as f64),
        ]
    }
}

/// A summary of an open store (`holdfast store inspect`).
#[derive(Clone, Debug, PartialEq)]
pub struct Inspection {
    pub geometry: Geometry,
    pub layout: Layout,
    pub superblock_generation: u64,
    pub boot_count: u64,
    pub checkpoint_generation: u64,
    /// The checkpoint whose objects are all home.
    pub home_generation: u64,
    pub phase: CheckpointPhase,
    pub log_used_blocks: u64,
    pub log_fill_ratio: f64,
    /// Blocks whose newest committed copy is in the log.
    pub log_resident_node_pots: u64,
    pub log_resident_pages: u64,
    pub journal_queued_commits: usize,
    pub mirrors: MirrorStatus,
    /// Superblock slots that open found bad or stale on a mirror it kept, and whether it
    /// repaired them (see [`Store::recovery_findings`]).
    pub recovery_findings: Vec<Finding>,
    /// See [`Store::recovery_notes`].
    pub recovery_notes: Vec<RecoveryNote>,
}

/// What recovery found in the log and between the mirrors ([`Store::recovery_notes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryNote {
    /// Records no later record says were durable, so never acknowledged, that a crash left
    /// whole on another mirror but not on this one: copied over at a read-write open. Not a
    /// problem: the crash cut the newest writes.
    TornTail {
        mirror: usize,
        first_sequence: u64,
        last_sequence: u64,
        remedy: Remedy,
    },
    /// A durable log record is bad on every mirror (found by a read-only open; a read-write
    /// open refuses, or truncates when told to).
    LogDamaged(LogLoss),
    /// The mirrors ran apart (each was booted alone): the history with more superblock
    /// writes was kept and this mirror's, from `diverged_generation` on, is discarded (the
    /// mirror is resilvered from the kept one).
    HistoryDiscarded {
        mirror: usize,
        diverged_generation: u64,
        /// The discarded history's newest superblock generation, its boot count and the
        /// newest checkpoint it had begun.
        discarded_generation: u64,
        discarded_boot_count: u64,
        discarded_checkpoint_generation: u64,
        /// The kept history's superblock generation.
        kept_generation: u64,
        remedy: Remedy,
    },
    /// The operator started the store from the last intact point of a damaged log
    /// (`holdfast.recover=truncate`); recorded in the superblock for good.
    Truncated(LogTruncation),
}

impl RecoveryNote {
    /// Whether `holdfast store check` counts it as a problem (exit 1): damage that is not
    /// repaired yet. A torn tail and a recorded truncation are notes.
    pub fn is_problem(&self) -> bool {
        match self {
            Self::LogDamaged(_) => true,
            Self::HistoryDiscarded { remedy, .. } => *remedy == Remedy::NextOpen,
            Self::TornTail { .. } | Self::Truncated(_) => false,
        }
    }
}

impl core::fmt::Display for RecoveryNote {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TornTail {
                mirror,
                first_sequence,
                last_sequence,
                remedy,
            } => {
                write!(
                    f,
                    "torn tail: log records {first_sequence}..={last_sequence}, never acknowledged, reached another mirror but not mirror {mirror} before a crash"
                )?;
                match remedy {
                    Remedy::Repaired => f.write_str(" — copied to it at open"),
                    Remedy::NextOpen => f.write_str(" — the next read-write open copies them"),
                }
            }
            Self::LogDamaged(loss) => write!(f, "{loss}"),
            Self::HistoryDiscarded {
                mirror,
                diverged_generation,
                discarded_generation,
                discarded_boot_count,
                discarded_checkpoint_generation,
                kept_generation,
                remedy,
            } => {
                write!(
                    f,
                    "split brain: the mirrors ran apart at superblock generation {diverged_generation}; mirror {mirror}'s history (superblock generations {diverged_generation}..={discarded_generation}, boot {discarded_boot_count}, checkpoint {discarded_checkpoint_generation}) is discarded and the longer one (to generation {kept_generation}) kept"
                )?;
                match remedy {
                    Remedy::Repaired => f.write_str(" — the mirror is resilvered from it"),
                    Remedy::NextOpen => f.write_str(" — at the next read-write open"),
                }
            }
            Self::Truncated(truncation) => write!(
                f,
                "log truncated at boot {} by holdfast.recover=truncate: records {}..={} were discarded",
                truncation.boot_count, truncation.first_sequence, truncation.last_sequence
            ),
        }
    }
}

/// What becomes of a bad copy that recovery or a check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remedy {
    /// A read-write open rewrote it from the superblock it recovered.
    Repaired,
    /// Left as it is (the store was opened read-only, or the damage came after open); the
    /// next read-write open rewrites it.
    NextOpen,
}

/// A copy of a block that failed a check, on one mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The mirror's index, in the order the devices were given.
    pub mirror: usize,
    pub corruption: Corruption,
    /// `None` when the finding says nothing of repair.
    pub remedy: Option<Remedy>,
}

impl Finding {
    /// A superblock slot (block 0 or 1) that failed `check` on `mirror`.
    pub(crate) fn superblock_slot(mirror: usize, slot: u64, check: Check, remedy: Remedy) -> Self {
        Self {
            mirror,
            corruption: Corruption {
                region: Region::Superblock,
                block: slot,
                check,
            },
            remedy: Some(remedy),
        }
    }
}

/// What [`Store::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub mirrors_checked: usize,
    pub blocks_checked: u64,
    pub log_records_checked: u64,
    /// Home blocks ever written, per mirror checked.
    pub home_node_pots_written: u64,
    pub home_pages_written: u64,
    /// Every problem found, up to [`CHECK_FINDINGS_MAX`].
    pub findings: Vec<Finding>,
    pub finding_count: u64,
    /// What recovery said ([`Store::recovery_notes`]); those that are problems make the
    /// report unclean.
    pub notes: Vec<RecoveryNote>,
}

pub const CHECK_FINDINGS_MAX: usize = 64;

impl CheckReport {
    fn find(&mut self, mirror: usize, region: Region, block: u64, check: Check) {
        self.push(Finding {
            mirror,
            corruption: Corruption {
                region,
                block,
                check,
            },
            remedy: None,
        });
    }

    fn push(&mut self, finding: Finding) {
        self.finding_count += 1;
        if self.findings.len() < CHECK_FINDINGS_MAX {
            self.findings.push(finding);
        }
    }

    pub fn is_clean(&self) -> bool {
        self.finding_count == 0 && !self.notes.iter().any(RecoveryNote::is_problem)
    }
}

impl<D: BlockDevice> Store<D> {
    pub fn counters(&self) -> StoreCounters {
        let migration_backlog_objects = match self.checkpoint_phase() {
            CheckpointPhase::Migrating { backlog_blocks } => backlog_blocks,
            _ => 0,
        };
        StoreCounters {
            checkpoint_generation: self.checkpoint_generation,
            checkpoint_objects_written_total: self.totals.checkpoint_objects_written,
            checkpoint_stabilization_last_seconds: self
                .totals
                .checkpoint_stabilization_seconds_last,
            checkpoint_stabilization_seconds: self.totals.checkpoint_stabilization_seconds,
            log_fill_ratio: self.log_fill_ratio(),
            migration_backlog_objects,
            migrated_blocks_total: self.totals.migrated_blocks,
            journal_commits_total: self.totals.journal_commits,
            device_written_bytes_total: self.mirrors.written_bytes_total,
            mirror_repaired_blocks_total: self.mirrors.repaired_blocks_total,
            mirror_degraded: u64::from(self.mirror_status().degraded),
            scrub_passes_total: self.totals.scrub_passes,
        }
    }

    pub fn inspect(&self) -> Inspection {
        let log_resident_node_pots = self
            .directory
            .iter()
            .filter(|((kind, _), _)| *kind == BlockKind::NodePot)
            .count() as u64;
        Inspection {
            geometry: self.geometry,
            layout: self.layout,
            superblock_generation: self.superblock.generation,
            boot_count: self.superblock.boot_count,
            checkpoint_generation: self.checkpoint_generation,
            home_generation: self.superblock.home_generation,
            phase: self.checkpoint_phase(),
            log_used_blocks: self.log_used_blocks(),
            log_fill_ratio: self.log_fill_ratio(),
            log_resident_node_pots,
            log_resident_pages: self.directory.len() as u64 - log_resident_node_pots,
            journal_queued_commits: self.journal_queued_commits(),
            mirrors: self.mirror_status(),
            recovery_findings: self.recovery_findings.clone(),
            recovery_notes: self.recovery_notes.clone(),
        }
    }

    /// Verifies every copy of everything reachable, mirror by mirror, without repairing:
    /// both superblock slots, every live log record and its data, both table slots of every
    /// group, and every home block a table lists as written. Reads the whole store.
    ///
    /// It reports what is on the disks now: after [`Store::open`], superblock slots that
    /// recovery repaired are in [`Store::recovery_findings`], not here; after
    /// [`Store::open_read_only`] they are still on disk, so here (marked
    /// [`Remedy::NextOpen`]) as well as there.
    pub fn check(&mut self) -> Result<CheckReport, StoreError> {
        let mut report = CheckReport {
            notes: self.recovery_notes.clone(),
            ..CheckReport::default()
        };
        for mirror in self.mirrors.readable(0, self.layout.block_count) {
            report.mirrors_checked += 1;
            self.check_superblocks(mirror, &mut report);
            self.check_log(mirror, &mut report);
            for kind in [BlockKind::NodePot, BlockKind::Page] {
                for group in 0..self.range_layout(kind).group_count {
                    self.check_group(mirror, kind, group, &mut report);
                }
            }
        }
        if report.mirrors_checked == 0 {
            return Err(StoreError::NoMirror);
        }
        Ok(report)
    }

    /// Both slots must decode, and the current one must hold the current superblock: any
    /// other copy is what a read-write open rewrites (see [`Store::open`]).
    fn check_superblocks(&mut self, mirror: usize, report: &mut CheckReport) {
        for slot in 0..2u64 {
            let mut block = zeroed_block();
            report.blocks_checked += 1;
            match self.mirrors.read_from(mirror, slot, &mut block[..]) {
                Ok(()) => match Superblock::decode(&block, slot) {
                    Ok(found)
                        if slot == self.superblock.slot()
                            && found.generation != self.superblock.generation =>
                    {
                        report.push(Finding::superblock_slot(
                            mirror,
                            slot,
                            Check::Sequence,
                            Remedy::NextOpen,
                        ));
                    }
                    Ok(_) => {}
                    Err(check) => report.push(Finding::superblock_slot(
                        mirror,
                        slot,
                        check,
                        Remedy::NextOpen,
                    )),
                },
                Err(_) => report.find(mirror, Region::Superblock, slot, Check::Bounds),
            }
        }
    }

    fn check_log(&mut self, mirror: usize, report: &mut CheckReport) {
        let mut cursor: LogCursor = self.tail;
        while cursor.sequence < self.head.sequence {
            let device_block = self.layout.log_first_block + cursor.position;
            let expected = self.expected_at(&cursor);
            let mut block = zeroed_block();
            report.blocks_checked += 1;
            if self
                .mirrors
                .read_from(mirror, device_block, &mut block[..])
                .is_err()
            {
                report.find(mirror, Region::LogHeader, device_block, Check::Bounds);
                return;
            }
            // A record not yet known durable that a mirror lacks is a torn tail: recovery
            // noted it, and the next read-write open copies it.
            let torn_tail = cursor.sequence >= self.durable_sequence_next;
            let header = match LogHeader::decode(&block, &expected) {
                Ok(header) => header,
                Err(check) => {
                    // The rest of the chain cannot be followed on this mirror.
                    if !torn_tail {
                        report.find(mirror, Region::LogHeader, device_block, check);
                    }
                    return;
                }
            };
            report.log_records_checked += 1;
            if header.kind != RecordKind::Padding && !torn_tail {
                for (index, entry) in header.entries.iter().enumerate() {
                    let data_block = device_block + 1 + index as u64;
                    let mut data = zeroed_block();
                    report.blocks_checked += 1;
                    let good = self
                        .mirrors
                        .read_from(mirror, data_block, &mut data[..])
                        .is_ok()
                        && checksum(&data[..]) == entry.checksum;
                    if !good {
                        report.find(mirror, Region::LogData, data_block, Check::DataChecksum);
                    }
                }
            }
            cursor = LogCursor {
                position: (cursor.position + header.block_count()) % self.layout.log_block_count,
                sequence: cursor.sequence + 1,
                previous_header_checksum: sealed_checksum(&block),
            };
        }
    }

    fn check_group(
        &mut self,
        mirror: usize,
        kind: BlockKind,
        group: u64,
        report: &mut CheckReport,
    ) {
        let range = self.range_layout(kind);
        let mut newest: Option<HomeTable> = None;
        for slot in 0..2u8 {
            let device_block = range.table_block(group, slot);
            let mut block = zeroed_block();
            report.blocks_checked += 1;
            if self
                .mirrors
                .read_from(mirror, device_block, &mut block[..])
                .is_err()
            {
                report.find(mirror, table_region(kind), device_block, Check::Bounds);
                continue;
            }
            match HomeTable::decode(&block, &self.table_place(kind, group, slot)) {
                Ok(table) => {
                    if newest
                        .as_ref()
                        .is_none_or(|current| current.sequence < table.sequence)
                    {
                        newest = Some(table);
                    }
                }
                Err(check) => report.find(mirror, table_region(kind), device_block, check),
            }
        }
        let Some(table) = newest else {
            return;
        };
        let first_index = group * crate::format::home_table::TABLE_ENTRIES_MAX as u64;
        let mut run = alloc::vec![0u8; table.entries.len() * BLOCK_SIZE];
        let first_block = range.data_first_block + first_index;
        if table.entries.iter().any(|entry| entry.written)
            && self
                .mirrors
                .read_from(mirror, first_block, &mut run)
                .is_err()
        {
            report.find(mirror, data_region(kind), first_block, Check::Bounds);
            return;
        }
        for (index, entry) in table
            .entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.written)
        {
            // A block the log holds newer is read from the log; its home copy may be half
            // way through a migration that a crash cut short, which the next open redoes.
            if self.directory.contains_key(&(kind, first_index + index as u64)) {
                continue;
            }
            report.blocks_checked += 1;
            match kind {
                BlockKind::NodePot => report.home_node_pots_written += 1,
                BlockKind::Page => report.home_pages_written += 1,
            }
            let bytes = as_block(&run[index * BLOCK_SIZE..(index + 1) * BLOCK_SIZE]);
            if checksum(bytes) != entry.checksum {
                report.find(
                    mirror,
                    data_region(kind),
                    first_block + index as u64,
                    Check::DataChecksum,
                );
            }
        }
    }
}

impl core::fmt::Display for Inspection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(f, "store id            {:#018x}", self.geometry.store_id)?;
        writeln!(f, "format version      {}", crate::FORMAT_VERSION)?;
        writeln!(
            f,
            "geometry            {} nodes, {} pages, log {} blocks, {} blocks per device",
            self.geometry.node_count,
            self.geometry.page_count,
            self.geometry.log_block_count,
            self.layout.block_count
        )?;
        writeln!(
            f,
            "superblock          generation {}, boot {}",
            self.superblock_generation, self.boot_count
        )?;
        writeln!(
            f,
            "checkpoint          generation {} committed, {} home, phase {:?}",
            self.checkpoint_generation, self.home_generation, self.phase
        )?;
        writeln!(
            f,
            "log                 {} blocks used ({:.1} %), {} node pots and {} pages resident",
            self.log_used_blocks,
            self.log_fill_ratio * 100.0,
            self.log_resident_node_pots,
            self.log_resident_pages
        )?;
        write!(
            f,
            "mirrors             {:?}{}",
            self.mirrors.mirrors,
            if self.mirrors.degraded {
                " DEGRADED"
            } else {
                ""
            }
        )?;
        for finding in &self.recovery_findings {
            write!(
                f,
                "\nrecovery finding    mirror {}: {finding}",
                finding.mirror
            )?;
        }
        for note in &self.recovery_notes {
            write!(f, "\nrecovery note       {note}")?;
        }
        Ok(())
    }
}

impl core::fmt::Display for Remedy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Repaired => "repaired at open",
            Self::NextOpen => "will be rewritten at the next read-write open",
        })
    }
}

/// The block and the check, and what becomes of it; the mirror is left to the caller, who
/// can name its device.
impl core::fmt::Display for Finding {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let Corruption {
            region,
            block,
            check,
        } = self.corruption;
        match region {
            Region::Superblock => write!(
                f,
                "superblock slot {block} (block {block}) failed the {check} check"
            )?,
            _ => write!(f, "{}", self.corruption)?,
        }
        match self.remedy {
            Some(remedy) => write!(f, " — {remedy}"),
            None => Ok(()),
        }
    }
}
