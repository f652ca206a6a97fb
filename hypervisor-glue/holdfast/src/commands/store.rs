//! `holdfast store format|inspect|check`: the single-level store on disk images, through
//! the same `holdfast-store` code the kernel runs, over files instead of virtio-blk.
//! `inspect` and `check` open the images read-only (the files as well as the store): they
//! recover the store in memory and report what the next read-write open would repair.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use holdfast_store::format::log_record::LOG_RECORD_DATA_BLOCKS_MAX;
use holdfast_store::{BLOCK_SIZE, BlockDevice, DeviceError, Geometry, NODES_PER_POT, Store};

use crate::cli::{StoreCommand, StoreFormatArguments, StoreImages};
use crate::failure::Failure;

pub fn run(command: StoreCommand) -> Result<ExitCode, Failure> {
    match command {
        StoreCommand::Format(arguments) => format(&arguments),
        StoreCommand::Inspect(images) => {
            let store = open(&images)?;
            println!("{}", store.inspect());
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Check(images) => check(&images),
    }
}

/// Writes `length` zero bytes at `offset` of `file`, calling `progress` with the bytes
/// written so far after each chunk.
fn write_zeros(
    file: &File,
    offset: u64,
    length: u64,
    mut progress: impl FnMut(u64),
) -> std::io::Result<()> {
    const CHUNK_BYTES: u64 = 1024 * 1024;
    let zeros = vec![0u8; CHUNK_BYTES as usize];
    let mut done = 0;
    while done < length {
        let chunk = (length - done).min(CHUNK_BYTES);
        file.write_all_at(&zeros[..chunk as usize], offset + done)?;
        done += chunk;
        progress(done);
    }
    Ok(())
}

/// Progress of a long format on standard error: a line when it starts and then at most one
/// a second, only when there is more than [`Self::QUIET_BYTES_MAX`] to write (a small store
/// formats in the blink of an eye, and tests and scripts read its output).
struct FormatProgress {
    total_bytes: u64,
    started: std::time::Instant,
    last_shown: std::time::Instant,
}

impl FormatProgress {
    const QUIET_BYTES_MAX: u64 = 256 * 1024 * 1024;
    const INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

    fn start(total_bytes: u64, image_count: usize) -> Self {
        let now = std::time::Instant::now();
        let progress = Self { total_bytes, started: now, last_shown: now };
        if progress.shown() {
            eprintln!(
                "holdfast: store format: writing {} MiB of log (zeros, so that commits never wait for the host to allocate) on {image_count} image(s)",
                total_bytes / (1024 * 1024)
            );
        }
        progress
    }

    fn shown(&self) -> bool {
        self.total_bytes > Self::QUIET_BYTES_MAX
    }

    fn show(&mut self, done_bytes: u64) {
        if !self.shown() || self.last_shown.elapsed() < Self::INTERVAL {
            return;
        }
        self.last_shown = std::time::Instant::now();
        eprintln!(
            "holdfast: store format: {} of {} MiB written ({}%, {:.0} s)",
            done_bytes / (1024 * 1024),
            self.total_bytes / (1024 * 1024),
            done_bytes * 100 / self.total_bytes,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// A disk image as a block device: 4096-byte blocks at their offsets in the file.
pub struct ImageFile {
    file: File,
    block_count: u64,
}

impl ImageFile {
    fn open(path: &Path, writable: bool) -> Result<Self, Failure> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|error| Failure::input(format!("{}: {error}", path.display())))?;
        let bytes = file
            .metadata()
            .map_err(|error| Failure::input(format!("{}: {error}", path.display())))?
            .len();
        Ok(Self {
            file,
            block_count: bytes / BLOCK_SIZE as u64,
        })
    }
}

impl BlockDevice for ImageFile {
    fn block_count(&self) -> u64 {
        self.block_count
    }

    fn read(&mut self, first_block: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        holdfast_store::device::check_request(self.block_count, first_block, buffer.len())?;
        self.file
            .read_exact_at(buffer, first_block * BLOCK_SIZE as u64)
            .map_err(|_| DeviceError::Io)
    }

    fn write(&mut self, first_block: u64, data: &[u8]) -> Result<(), DeviceError> {
        holdfast_store::device::check_request(self.block_count, first_block, data.len())?;
        self.file
            .write_all_at(data, first_block * BLOCK_SIZE as u64)
            .map_err(|_| DeviceError::Io)
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        self.file.sync_data().map_err(|_| DeviceError::Io)
    }
}

/// The images as block devices, in mirror order.
fn image_files(paths: &[PathBuf], writable: bool) -> Result<Vec<ImageFile>, Failure> {
    paths
        .iter()
        .map(|path| ImageFile::open(path, writable))
        .collect()
}

/// The images as the store's mirrors, in order, opened read-only, with an error that names
/// them.
fn open(images: &StoreImages) -> Result<Store<ImageFile>, Failure> {
    Store::open_read_only(image_files(&images.images, false)?)
        .map_err(|error| Failure::input(format!("{}: {error}", named(&images.images))))
}

fn named(images: &[PathBuf]) -> String {
    let names: Vec<String> = images
        .iter()
        .map(|path| path.display().to_string())
        .collect();
    names.join(" + ")
}

fn check(images: &StoreImages) -> Result<ExitCode, Failure> {
    let mut store = open(images)?;
    let report = store
        .check()
        .map_err(|error| Failure::input(format!("{}: {error}", named(&images.images))))?;
    let problem_notes = report.notes.iter().filter(|note| note.is_problem()).count() as u64;
    println!(
        "{}: {} mirror(s), {} blocks, {} log records checked; {} problem(s)",
        named(&images.images),
        report.mirrors_checked,
        report.blocks_checked,
        report.log_records_checked,
        report.finding_count + problem_notes
    );
    // Recovery's word first: damage it could not repair and discarded histories are
    // problems; a torn tail (a crash cut writes never acknowledged) and a recorded
    // truncation are notes.
    for note in &report.notes {
        let kind = if note.is_problem() { "problem" } else { "note" };
        println!("{kind}: {note}");
    }
    for finding in &report.findings {
        println!(
            "mirror {} ({}): {finding}",
            finding.mirror,
            images.images[finding.mirror].display()
        );
    }
    if report.finding_count > report.findings.len() as u64 {
        println!(
            "... and {} more",
            report.finding_count - report.findings.len() as u64
        );
    }
    let status = store.mirror_status();
    if status.degraded {
        println!("degraded: {status:?}");
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The smallest log `format` makes: a checkpoint's largest record (a header and its data
/// blocks), the directory and the commit must fit below the 65 % fill at which the kernel
/// forces a checkpoint (0.65 × 128 = 83 blocks, against 74). A smaller log makes a store
/// that boots but can never take a checkpoint.
const FORMAT_LOG_BLOCK_COUNT_MIN: u64 = 128;
const _: () = assert!(FORMAT_LOG_BLOCK_COUNT_MIN * 65 / 100 >= LOG_RECORD_DATA_BLOCKS_MAX as u64 + 3);

/// A geometry that fills `block_count` blocks: an eighth for the log, a sixteenth for
/// nodes (four to a block), the rest for pages and the checksum tables.
fn geometry_for(block_count: u64, store_id: u64) -> Result<Geometry, Failure> {
    let log_block_count = block_count / 8;
    if log_block_count < FORMAT_LOG_BLOCK_COUNT_MIN {
        let size_mib_min = (FORMAT_LOG_BLOCK_COUNT_MIN * 8 * BLOCK_SIZE as u64).div_ceil(1024 * 1024);
        return Err(Failure::input(format!(
            "a store of {} MiB is too small: its log (an eighth) would hold {log_block_count} blocks, \
             and a checkpoint needs {FORMAT_LOG_BLOCK_COUNT_MIN}; use --size-mib {size_mib_min} or more",
            block_count * BLOCK_SIZE as u64 / (1024 * 1024)
        )));
    }
    let node_count = (block_count / 16).max(1) * NODES_PER_POT;
    let mut geometry = Geometry {
        store_id,
        node_count,
        page_count: block_count.saturating_sub(log_block_count + node_count / NODES_PER_POT),
        log_block_count,
    };
    // The tables and superblocks take some of the pages' room: shrink until it fits.
    loop {
        let needed = geometry
            .layout()
            .map_err(|error| Failure::input(format!("cannot lay out a store: {error}")))?
            .block_count;
        if needed <= block_count {
            return Ok(geometry);
        }
        let excess = needed - block_count;
        if geometry.page_count <= excess {
            return Err(Failure::input(format!(
                "{block_count} blocks are too few for a store"
            )));
        }
        geometry.page_count -= excess;
    }
}

fn format(arguments: &StoreFormatArguments) -> Result<ExitCode, Failure> {
    let store = format_images(&arguments.images, arguments.size_mib, arguments.force)?;
    println!("{}", store.inspect());
    Ok(ExitCode::SUCCESS)
}

/// Creates `images` (mirrors) of `size_mib` each, as files of that size, sparse but for the
/// log, and formats a store on them: what `holdfast store format` does, and `holdfast bench
/// store` before each boot.
///
/// The log is written with zeros (and flushed with the store's format), so that the host
/// has its blocks before the store appends to them. On a sparse file, each journal commit
/// in the first pass over the log allocated blocks on the host, and its flush (the host's
/// `fdatasync`) had to commit the host file system's journal with them: 0.5 ms to over
/// 10 ms when other programs wrote to that file system, against 0.25 ms for a flush of
/// blocks the file already had (PostgreSQL zero-fills its write-ahead log for the same
/// reason). Home ranges stay sparse: they are written only by migration, in bulk.
pub fn format_images(
    images: &[PathBuf],
    size_mib: u64,
    force: bool,
) -> Result<Store<ImageFile>, Failure> {
    let bytes = size_mib * 1024 * 1024;
    let store_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |since| since.as_nanos() as u64 | 1);
    let geometry = geometry_for(bytes / BLOCK_SIZE as u64, store_id)?;
    let layout = geometry
        .layout()
        .map_err(|error| Failure::input(format!("cannot lay out a store: {error}")))?;
    if images.len() == 2 && same_file(&images[0], &images[1]) {
        return Err(Failure::input(format!(
            "{} and {} are the same file: each mirror must be its own image",
            images[0].display(),
            images[1].display()
        )));
    }
    for path in images {
        if path.exists() && !force {
            return Err(Failure::input(format!(
                "{}: exists; formatting destroys it (add --force)",
                path.display()
            )));
        }
    }
    // What this format created is removed if it fails: a half-written image must not be
    // mistaken for a store later.
    let mut created = CreatedImages(Vec::with_capacity(images.len()));
    let log_bytes = layout.log_block_count * BLOCK_SIZE as u64;
    let mut progress = FormatProgress::start(log_bytes * images.len() as u64, images.len());
    for (index, path) in images.iter().enumerate() {
        let file = File::create(path)
            .map_err(|error| Failure::input(format!("{}: {error}", path.display())))?;
        created.0.push(path.clone());
        let already_bytes = log_bytes * index as u64;
        file.set_len(bytes)
            .and_then(|()| {
                write_zeros(&file, layout.log_first_block * BLOCK_SIZE as u64, log_bytes, |done| {
                    progress.show(already_bytes + done);
                })
            })
            .map_err(|error| Failure::other(format!("{}: {error}", path.display())))?;
    }
    let store = Store::format(image_files(images, true)?, geometry)
        .map_err(|error| Failure::input(format!("{}: {error}", named(images))))?;
    created.0.clear();
    Ok(store)
}

/// Images written by a format under way, removed when it is dropped before it finished
/// (an image that existed was destroyed by `--force` already).
struct CreatedImages(Vec<PathBuf>);

impl Drop for CreatedImages {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Whether `a` and `b` name the same file (the same device and inode), where both exist.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => a == b,
    }
}
