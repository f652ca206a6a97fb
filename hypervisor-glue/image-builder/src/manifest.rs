//! The manifest: the initial system, written in TOML (`services/manifest.toml` by default).
//! The schema is in this crate's README. [`Manifest::load`] reads and checks everything
//! that does not need the guest build (syntax, names, references, ranges, page contents);
//! the programs are checked when the image is made ([`crate::initial_image`]).
//!
//! Every problem is one [`ManifestError`] line naming the file, the entry and what is wrong:
//! `services/manifest.toml: process 'echo' register 3: no node named 'scratch'`.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};

use holdfast_boot_image::system_table::{
    BOOT_NUMBER_KEY_BYTES_MAX, BootNumberKey, CAPABILITY_REGISTER_COUNT, Capability, NODE_SLOT_COUNT, PAGE_BYTES,
    PROCESS_NAME_BYTES, Rights, SPACE_HEIGHT_MAX, Target,
};
use serde::Deserialize;

/// The default manifest, relative to the source tree.
pub const DEFAULT_MANIFEST: &str = "services/manifest.toml";

/// One problem with a manifest, as the user reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    /// The entry, and the part of it, that is wrong (`process 'echo' register 3`); or the
    /// line and column of a syntax error.
    pub place: String,
    pub problem: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.place,
            self.problem
        )
    }
}

impl std::error::Error for ManifestError {}

/// A process of the initial system, its capabilities resolved to indexes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSpec {
    pub name: String,
    /// The binary name of a program of the guest build.
    pub program: String,
    pub keeper: Capability,
    pub meter: Capability,
    pub registers: [Capability; CAPABILITY_REGISTER_COUNT],
    /// Made, never started: a constructor's template.
    pub template: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeterSpec {
    pub microseconds: u64,
    /// The index of the parent meter, an earlier entry.
    pub parent: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageSpec {
    pub contents: Vec<u8>,
    pub fill: u8,
}

/// A checked manifest. Object indexes in capabilities count in the order entries appear.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub file: PathBuf,
    pub processes: Vec<ProcessSpec>,
    pub nodes: Vec<[Capability; NODE_SLOT_COUNT]>,
    pub pages: Vec<PageSpec>,
    pub meters: Vec<MeterSpec>,
}

// The file as serde reads it. Entries are kept as tables here and read one by one, so that
// a problem inside one can name it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    #[serde(default)]
    process: Vec<toml::Table>,
    #[serde(default)]
    node: Vec<toml::Table>,
    #[serde(default)]
    page: Vec<toml::Table>,
    #[serde(default)]
    meter: Vec<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessEntry {
    name: String,
    program: String,
    keeper: Option<String>,
    meter: Option<String>,
    #[serde(default)]
    registers: BTreeMap<String, toml::Value>,
    /// Made but never started: what a constructor copies (`services/constructor`).
    #[serde(default)]
    template: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeEntry {
    name: String,
    #[serde(default)]
    slots: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PageEntry {
    name: String,
    fill: Option<u8>,
    /// A file whose bytes start the page, relative to the manifest's folder.
    contents: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MeterEntry {
    name: String,
    microseconds: u64,
    /// An earlier meter, which is charged whatever this one is (a tree of meters).
    parent: Option<String>,
}

/// `{}`: the kinds that designate no object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoObject {}

/// A capability as written: exactly one kind key, plus the options that kind takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CapabilityEntry {
    console: Option<NoObject>,
    clock: Option<NoObject>,
    checkpoint: Option<NoObject>,
    journal: Option<NoObject>,
    control: Option<NoObject>,
    network_device: Option<NoObject>,
    range: Option<NoObject>,
    own_process: Option<NoObject>,
    process: Option<String>,
    start: Option<String>,
    node: Option<String>,
    space: Option<String>,
    page: Option<String>,
    meter: Option<String>,
    number: Option<[u64; 2]>,
    boot_number: Option<String>,
    indirector: Option<String>,
    badge: Option<u64>,
    height: Option<u8>,
    #[serde(default)]
    rights: Vec<Right>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Right {
    ReadOnly,
    Weak,
    NoCall,
}

/// The one program that may hold the range (`services/space-bank`).
const RANGE_HOLDER: &str = "space-bank";

const CAPABILITY_KINDS: &str = "console, clock, checkpoint, journal, control, network-device, range, own-process, process, start, node, space, page, meter, number, boot-number, indirector";

/// The entries' names, by kind, to resolve references.
struct Names<'a> {
    processes: HashMap<&'a str, usize>,
    nodes: HashMap<&'a str, usize>,
    pages: HashMap<&'a str, usize>,
    meters: HashMap<&'a str, usize>,
}

impl Manifest {
    /// Reads and checks the manifest at `file`.
    pub fn load(file: &Path) -> Result<Self, ManifestError> {
        let error = |place: &str, problem: String| ManifestError {
            file: file.to_owned(),
            place: place.to_owned(),
            problem,
        };
        let text = std::fs::read_to_string(file)
            .map_err(|source| error("cannot read it", source.to_string()))?;
        let folder = file.parent().unwrap_or(Path::new("."));
        Self::parse(&text, file, folder)
    }

    /// Checks manifest `text`; `file` names it in errors, and page contents are read
    /// relative to `folder`.
    pub fn parse(text: &str, file: &Path, folder: &Path) -> Result<Self, ManifestError> {
        let error = |place: String, problem: String| ManifestError {
            file: file.to_owned(),
            place,
            problem,
        };
        let parsed: ManifestFile = toml::from_str(text).map_err(|syntax| {
            let place = match syntax.span() {
                Some(span) => line_and_column(text, span.start),
                None => "syntax".to_owned(),
            };
            // toml puts what it expected on lines of their own; one line is what the user
            // gets.
            let message: Vec<_> = syntax.message().lines().map(str::trim).collect();
            error(place, message.join(": "))
        })?;

        let processes: Vec<ProcessEntry> = read_entries("process", parsed.process, &error)?;
        let nodes: Vec<NodeEntry> = read_entries("node", parsed.node, &error)?;
        let pages: Vec<PageEntry> = read_entries("page", parsed.page, &error)?;
        let meters: Vec<MeterEntry> = read_entries("meter", parsed.meter, &error)?;

        let names = Names {
            processes: index_names("process", processes.iter().map(|p| &p.name[..]), &error)?,
            nodes: index_names("node", nodes.iter().map(|n| &n.name[..]), &error)?,
            pages: index_names("page", pages.iter().map(|p| &p.name[..]), &error)?,
            meters: index_names("meter", meters.iter().map(|m| &m.name[..]), &error)?,
        };

        let mut process_specs = Vec::with_capacity(processes.len());
        for (index, process) in processes.iter().enumerate() {
            let entry = format!("process '{}'", process.name);
            if process.name.len() > PROCESS_NAME_BYTES {
                return Err(error(
                    entry,
                    format!("name is longer than {PROCESS_NAME_BYTES} bytes"),
                ));
            }
            let keeper = match &process.keeper {
                None => Capability::VOID,
                Some(keeper) => Capability::new(Target::Start {
                    process: lookup(&names.processes, "process", keeper)
                        .map_err(|problem| error(format!("{entry} keeper"), problem))?,
                    badge: 0,
                }),
            };
            let meter = match &process.meter {
                None => Capability::VOID,
                Some(meter) => Capability::new(Target::Meter(
                    lookup(&names.meters, "meter", meter)
                        .map_err(|problem| error(format!("{entry} meter"), problem))?,
                )),
            };
            let registers = resolve_capabilities::<CAPABILITY_REGISTER_COUNT>(
                &process.registers,
                "register",
                &entry,
                Some(index),
                &names,
                &error,
            )?;
            // Every other program buys storage from a bank (KeyKOS's prime range key is the
            // prime bank's alone): the range is where the kernel's storage comes from.
            let holds_range = registers.iter().position(|capability| capability.target == Target::Range);
            if let Some(register) = holds_range
                && process.program != RANGE_HOLDER
            {
                return Err(error(
                    format!("{entry} register {register}"),
                    format!("only a process running '{RANGE_HOLDER}' may hold the range (others buy storage from a bank)"),
                ));
            }
            process_specs.push(ProcessSpec {
                name: process.name.clone(),
                program: process.program.clone(),
                keeper,
                meter,
                registers,
                template: process.template,
            });
        }

        let mut node_specs = Vec::with_capacity(nodes.len());
        for node in &nodes {
            let entry = format!("node '{}'", node.name);
            node_specs.push(resolve_capabilities::<NODE_SLOT_COUNT>(
                &node.slots,
                "slot",
                &entry,
                None,
                &names,
                &error,
            )?);
        }

        let mut page_specs = Vec::with_capacity(pages.len());
        for page in &pages {
            let entry = format!("page '{}'", page.name);
            let contents = match &page.contents {
                None => Vec::new(),
                Some(path) => {
                    let place = format!("{entry} contents '{}'", path.display());
                    let bytes = std::fs::read(folder.join(path))
                        .map_err(|source| error(place.clone(), source.to_string()))?;
                    if bytes.len() > PAGE_BYTES {
                        return Err(error(
                            place,
                            format!(
                                "{} bytes is more than a page ({PAGE_BYTES} bytes)",
                                bytes.len()
                            ),
                        ));
                    }
                    bytes
                }
            };
            page_specs.push(PageSpec {
                contents,
                fill: page.fill.unwrap_or(0),
            });
        }

        let mut meter_specs = Vec::with_capacity(meters.len());
        for (index, meter) in meters.iter().enumerate() {
            let parent = match &meter.parent {
                None => None,
                Some(parent) => {
                    let place = format!("meter '{}' parent", meter.name);
                    let found = lookup(&names.meters, "meter", parent).map_err(|problem| error(place.clone(), problem))?;
                    if found as usize >= index {
                        return Err(error(place, format!("'{parent}' must come before it (meters form a tree)")));
                    }
                    Some(found)
                }
            };
            meter_specs.push(MeterSpec { microseconds: meter.microseconds, parent });
        }

        Ok(Self {
            file: file.to_owned(),
            processes: process_specs,
            nodes: node_specs,
            pages: page_specs,
            meters: meter_specs,
        })
    }

    /// An error about this manifest's entry `place`.
    pub fn error(&self, place: String, problem: String) -> ManifestError {
        ManifestError {
            file: self.file.clone(),
            place,
            problem,
        }
    }
}

/// `line 3, column 7` (both from 1) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    format!("line {line}, column {column}")
}

/// Reads each `[[kind]]` table as `Entry`. An entry with no usable name is named by its
/// place among its kind: `process #2`.
fn read_entries<Entry: serde::de::DeserializeOwned>(
    kind: &str,
    tables: Vec<toml::Table>,
    error: &dyn Fn(String, String) -> ManifestError,
) -> Result<Vec<Entry>, ManifestError> {
    tables
        .into_iter()
        .enumerate()
        .map(|(index, table)| {
            let entry = match table.get("name").and_then(toml::Value::as_str) {
                Some(name) => format!("{kind} '{name}'"),
                None => format!("{kind} #{}", index + 1),
            };
            toml::Value::Table(table)
                .try_into()
                .map_err(|problem: toml::de::Error| error(entry, problem.message().to_owned()))
        })
        .collect()
}

/// Each name's index among its kind; a name given twice or an empty one is an error.
fn index_names<'a>(
    kind: &str,
    names: impl Iterator<Item = &'a str>,
    error: &dyn Fn(String, String) -> ManifestError,
) -> Result<HashMap<&'a str, usize>, ManifestError> {
    let mut indexes = HashMap::new();
    for (index, name) in names.enumerate() {
        if name.is_empty() {
            return Err(error(
                format!("{kind} #{}", index + 1),
                "name is empty".to_owned(),
            ));
        }
        if let Some(first) = indexes.insert(name, index) {
            return Err(error(
                format!("{kind} '{name}'"),
                format!(
                    "name used twice ({kind} entries {} and {})",
                    first + 1,
                    index + 1
                ),
            ));
        }
    }
    Ok(indexes)
}

fn lookup(names: &HashMap<&str, usize>, kind: &str, name: &str) -> Result<u32, String> {
    names
        .get(name)
        .map(|&index| index as u32)
        .ok_or_else(|| format!("no {kind} named '{name}'"))
}

/// Resolves a table of `index = capability` (a process's registers, a node's slots).
fn resolve_capabilities<const COUNT: usize>(
    written: &BTreeMap<String, toml::Value>,
    index_word: &str,
    entry: &str,
    own_process: Option<usize>,
    names: &Names<'_>,
    error: &dyn Fn(String, String) -> ManifestError,
) -> Result<[Capability; COUNT], ManifestError> {
    let mut capabilities = [Capability::VOID; COUNT];
    for (key, value) in written {
        let place = format!("{entry} {index_word} {key}");
        let index: usize = key.parse().map_err(|_| {
            error(
                format!("{entry} {index_word} '{key}'"),
                format!("not a {index_word} number (0..={})", COUNT - 1),
            )
        })?;
        if index >= COUNT {
            return Err(error(
                place,
                format!("out of range ({index_word}s are 0..={})", COUNT - 1),
            ));
        }
        let capability: CapabilityEntry = value
            .clone()
            .try_into()
            .map_err(|problem: toml::de::Error| error(place.clone(), problem.message().into()))?;
        capabilities[index] = resolve_capability(&capability, own_process, names)
            .map_err(|problem| error(place, problem))?;
    }
    Ok(capabilities)
}

fn resolve_capability(
    written: &CapabilityEntry,
    own_process: Option<usize>,
    names: &Names<'_>,
) -> Result<Capability, String> {
    let mut kinds = Vec::new();
    let mut add = |kind: &'static str, present: bool| {
        if present {
            kinds.push(kind);
        }
    };
    add("console", written.console.is_some());
    add("clock", written.clock.is_some());
    add("checkpoint", written.checkpoint.is_some());
    add("journal", written.journal.is_some());
    add("control", written.control.is_some());
    add("network-device", written.network_device.is_some());
    add("range", written.range.is_some());
    add("own-process", written.own_process.is_some());
    add("process", written.process.is_some());
    add("start", written.start.is_some());
    add("node", written.node.is_some());
    add("space", written.space.is_some());
    add("page", written.page.is_some());
    add("meter", written.meter.is_some());
    add("number", written.number.is_some());
    add("boot-number", written.boot_number.is_some());
    add("indirector", written.indirector.is_some());
    let kind = match kinds[..] {
        [kind] => kind,
        [] => return Err(format!("no capability kind (one of {CAPABILITY_KINDS})")),
        [first, second, ..] => {
            return Err(format!(
                "two capability kinds, '{first}' and '{second}' (a capability has one)"
            ));
        }
    };
    if kind == "range" && own_process.is_none() {
        return Err(format!("the range is held only in the registers of a '{RANGE_HOLDER}' process, never in a node"));
    }
    let takes_badge = matches!(kind, "start" | "indirector");
    if written.badge.is_some() && !takes_badge {
        return Err(format!(
            "a {kind} capability has no badge (only start and indirector have one)"
        ));
    }
    if written.height.is_some() && kind != "space" {
        return Err(format!(
            "a {kind} capability has no height (only space has one)"
        ));
    }
    let badge = written.badge.unwrap_or(0);
    let name = |name: &Option<String>| name.clone().unwrap_or_default();
    let target = match kind {
        "console" => Target::Console,
        "clock" => Target::Clock,
        "checkpoint" => Target::Checkpoint,
        "journal" => Target::Journal,
        "control" => Target::Control,
        "network-device" => Target::NetworkDevice,
        "range" => Target::Range,
        "own-process" => {
            let process = own_process
                .ok_or("own-process is only for a process's registers (a node has no owner)")?;
            Target::Process(process as u32)
        }
        "process" => Target::Process(lookup(
            &names.processes,
            "process",
            &name(&written.process),
        )?),
        "start" => Target::Start {
            process: lookup(&names.processes, "process", &name(&written.start))?,
            badge,
        },
        "node" => Target::Node(lookup(&names.nodes, "node", &name(&written.node))?),
        "space" => {
            let height = written.height.ok_or(format!(
                "a space capability needs a height (0..={SPACE_HEIGHT_MAX})"
            ))?;
            if height > SPACE_HEIGHT_MAX {
                return Err(format!(
                    "space height {height} is out of range (0..={SPACE_HEIGHT_MAX})"
                ));
            }
            Target::Space {
                node: lookup(&names.nodes, "node", &name(&written.space))?,
                height,
            }
        }
        "page" => Target::Page(lookup(&names.pages, "page", &name(&written.page))?),
        "meter" => Target::Meter(lookup(&names.meters, "meter", &name(&written.meter))?),
        "number" => Target::Number(written.number.unwrap_or_default()),
        "boot-number" => {
            let key = name(&written.boot_number);
            Target::BootNumber(BootNumberKey::new(&key).ok_or(format!(
                "boot-number key '{key}' is not 1 to {BOOT_NUMBER_KEY_BYTES_MAX} bytes of a-z, 0-9 and -"
            ))?)
        }
        // The one kind left of the list above.
        _ => Target::Indirector {
            node: lookup(&names.nodes, "node", &name(&written.indirector))?,
            badge,
        },
    };
    let rights = written.rights.iter().fold(Rights::NONE, |rights, right| {
        rights.union(match right {
            Right::ReadOnly => Rights::READ_ONLY,
            Right::Weak => Rights::WEAK,
            Right::NoCall => Rights::NO_CALL,
        })
    });
    Ok(Capability { target, rights })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "services/manifest.toml";

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, Path::new(FILE), &std::env::temp_dir())
    }

    /// The one line a bad manifest gets.
    fn message(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    const TWO_PROCESSES: &str = r#"
        [[process]]
        name = "echo"
        program = "hello"
        keeper = "keeper"
        meter = "cpu"
        registers = { 0 = { console = {} }, 1 = { own-process = {} }, 2 = { node = "scratch", rights = ["read-only", "weak"] }, 3 = { space = "scratch", height = 1 }, 4 = { start = "keeper", badge = 7 }, 5 = { number = [1, 2] }, 6 = { page = "greeting" }, 7 = { indirector = "scratch" }, 8 = { clock = {} }, 9 = { meter = "cpu" }, 10 = { boot-number = "fuzz-seed" }, 15 = { process = "keeper" } }

        [[process]]
        name = "keeper"
        program = "ticker"

        [[node]]
        name = "scratch"
        slots = { 31 = { start = "echo", rights = ["no-call"] } }

        [[page]]
        name = "greeting"
        fill = 0xa5

        [[meter]]
        name = "cpu"
        microseconds = 10000
    "#;

    #[test]
    fn every_capability_kind_resolves_to_its_object() {
        let manifest = parse(TWO_PROCESSES).unwrap();
        let echo = &manifest.processes[0];
        assert_eq!(echo.program, "hello");
        assert_eq!(
            echo.keeper,
            Capability::new(Target::Start {
                process: 1,
                badge: 0
            })
        );
        assert_eq!(echo.meter, Capability::new(Target::Meter(0)));
        let targets: Vec<_> = echo.registers.iter().map(|c| c.target).collect();
        assert_eq!(
            targets[..11],
            [
                Target::Console,
                Target::Process(0),
                Target::Node(0),
                Target::Space { node: 0, height: 1 },
                Target::Start {
                    process: 1,
                    badge: 7
                },
                Target::Number([1, 2]),
                Target::Page(0),
                Target::Indirector { node: 0, badge: 0 },
                Target::Clock,
                Target::Meter(0),
                Target::BootNumber(BootNumberKey::new("fuzz-seed").unwrap()),
            ]
        );
        assert_eq!(targets[15], Target::Process(1));
        assert_eq!(echo.registers[2].rights, Rights(3));
        assert_eq!(
            manifest.nodes[0][31],
            Capability {
                target: Target::Start {
                    process: 0,
                    badge: 0
                },
                rights: Rights::NO_CALL
            }
        );
        assert_eq!(
            manifest.pages,
            [PageSpec {
                contents: vec![],
                fill: 0xa5
            }]
        );
        assert_eq!(manifest.meters, [MeterSpec { microseconds: 10_000, parent: None }]);
    }

    #[test]
    fn the_default_manifest_describes_the_selftest_system() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../services/manifest.toml");
        let manifest = Manifest::load(&path).unwrap();
        // `ticker` first, so that it runs while the others fault.
        assert_eq!(manifest.processes[0].name, "ticker");
        for (index, process) in manifest.processes.iter().enumerate() {
            assert_eq!(process.program, process.name);
            assert_eq!(process.registers[0], Capability::new(Target::Console));
            assert_eq!(
                process.registers[1],
                Capability::new(Target::Process(index as u32))
            );
        }
    }

    #[test]
    fn syntax_error_names_line_and_column() {
        assert_eq!(
            message("[[process]]\nname = \"echo\nprogram = \"hello\"\n"),
            "services/manifest.toml: line 2, column 13: invalid basic string"
        );
    }

    #[test]
    fn syntax_error_with_an_expectation_is_one_line() {
        assert_eq!(
            message("[[process]\n"),
            "services/manifest.toml: line 1, column 10: invalid table header: expected `.`, `]]`"
        );
    }

    #[test]
    fn unknown_table() {
        assert_eq!(
            message("[[proces]]\nname = \"echo\"\n"),
            "services/manifest.toml: line 1, column 3: unknown field `proces`, expected one of `process`, `node`, `page`, `meter`"
        );
    }

    #[test]
    fn unknown_field_of_an_entry() {
        assert_eq!(
            message("[[process]]\nname = \"echo\"\nprogram = \"hello\"\nkeper = \"x\"\n"),
            "services/manifest.toml: process 'echo': unknown field `keper`, expected one of `name`, `program`, `keeper`, `meter`, `registers`, `template`"
        );
    }

    #[test]
    fn missing_field_names_the_entry_by_position() {
        assert_eq!(
            message(
                "[[process]]\nname = \"a\"\nprogram = \"hello\"\n[[process]]\nprogram = \"hello\"\n"
            ),
            "services/manifest.toml: process #2: missing field `name`"
        );
    }

    #[test]
    fn duplicate_name() {
        assert_eq!(
            message("[[node]]\nname = \"n\"\n[[node]]\nname = \"m\"\n[[node]]\nname = \"n\"\n"),
            "services/manifest.toml: node 'n': name used twice (node entries 1 and 3)"
        );
    }

    #[test]
    fn empty_name() {
        assert_eq!(
            message("[[meter]]\nname = \"\"\nmicroseconds = 1\n"),
            "services/manifest.toml: meter #1: name is empty"
        );
    }

    #[test]
    fn process_name_too_long() {
        assert_eq!(
            message(
                "[[process]]\nname = \"a-process-name-of-more-than-32-bytes\"\nprogram = \"hello\"\n"
            ),
            "services/manifest.toml: process 'a-process-name-of-more-than-32-bytes': name is longer than 32 bytes"
        );
    }

    fn with_register(capability: &str) -> String {
        format!(
            "[[process]]\nname = \"echo\"\nprogram = \"hello\"\nregisters = {{ 3 = {capability} }}\n"
        )
    }

    #[test]
    fn dangling_node_reference() {
        assert_eq!(
            message(&with_register("{ node = \"scratch\" }")),
            "services/manifest.toml: process 'echo' register 3: no node named 'scratch'"
        );
    }

    #[test]
    fn dangling_process_page_and_meter_references() {
        assert_eq!(
            message(&with_register("{ start = \"server\", badge = 7 }")),
            "services/manifest.toml: process 'echo' register 3: no process named 'server'"
        );
        assert_eq!(
            message(&with_register("{ page = \"buffer\" }")),
            "services/manifest.toml: process 'echo' register 3: no page named 'buffer'"
        );
        assert_eq!(
            message(&with_register("{ meter = \"cpu\" }")),
            "services/manifest.toml: process 'echo' register 3: no meter named 'cpu'"
        );
    }

    #[test]
    fn dangling_keeper_and_meter() {
        assert_eq!(
            message("[[process]]\nname = \"echo\"\nprogram = \"hello\"\nkeeper = \"pager\"\n"),
            "services/manifest.toml: process 'echo' keeper: no process named 'pager'"
        );
        assert_eq!(
            message("[[process]]\nname = \"echo\"\nprogram = \"hello\"\nmeter = \"cpu\"\n"),
            "services/manifest.toml: process 'echo' meter: no meter named 'cpu'"
        );
    }

    #[test]
    fn register_out_of_range() {
        assert_eq!(
            message(
                "[[process]]\nname = \"echo\"\nprogram = \"hello\"\nregisters = { 16 = { console = {} } }\n"
            ),
            "services/manifest.toml: process 'echo' register 16: out of range (registers are 0..=15)"
        );
    }

    #[test]
    fn register_that_is_not_a_number() {
        assert_eq!(
            message(
                "[[process]]\nname = \"echo\"\nprogram = \"hello\"\nregisters = { first = { console = {} } }\n"
            ),
            "services/manifest.toml: process 'echo' register 'first': not a register number (0..=15)"
        );
    }

    #[test]
    fn slot_out_of_range() {
        assert_eq!(
            message("[[node]]\nname = \"scratch\"\nslots = { 32 = { clock = {} } }\n"),
            "services/manifest.toml: node 'scratch' slot 32: out of range (slots are 0..=31)"
        );
    }

    #[test]
    fn boot_number_key_must_be_plain() {
        assert_eq!(
            message(&with_register("{ boot-number = \"Fuzz seed\" }")),
            "services/manifest.toml: process 'echo' register 3: boot-number key 'Fuzz seed' is not 1 to 16 bytes of a-z, 0-9 and -"
        );
    }

    #[test]
    fn unknown_capability_kind() {
        assert_eq!(
            message(&with_register("{ consol = {} }")),
            "services/manifest.toml: process 'echo' register 3: unknown field `consol`, expected one of `console`, `clock`, `checkpoint`, `journal`, `control`, `network-device`, `range`, `own-process`, `process`, `start`, `node`, `space`, `page`, `meter`, `number`, `boot-number`, `indirector`, `badge`, `height`, `rights`"
        );
    }

    #[test]
    fn a_meter_parent_must_come_before_it() {
        assert_eq!(
            message("[[meter]]\nname = \"a\"\nmicroseconds = 1\nparent = \"b\"\n\n[[meter]]\nname = \"b\"\nmicroseconds = 1\n"),
            "services/manifest.toml: meter 'a' parent: 'b' must come before it (meters form a tree)"
        );
        assert_eq!(
            message("[[meter]]\nname = \"a\"\nmicroseconds = 1\nparent = \"c\"\n"),
            "services/manifest.toml: meter 'a' parent: no meter named 'c'"
        );
    }

    #[test]
    fn only_the_space_bank_holds_the_range() {
        assert_eq!(
            message(&with_register("{ range = {} }")),
            "services/manifest.toml: process 'echo' register 3: only a process running 'space-bank' may hold the range (others buy storage from a bank)"
        );
        assert_eq!(
            message("[[node]]\nname = \"n\"\nslots = { 0 = { range = {} } }\n"),
            "services/manifest.toml: node 'n' slot 0: the range is held only in the registers of a 'space-bank' process, never in a node"
        );
    }

    #[test]
    fn unknown_right() {
        assert_eq!(
            message(&with_register("{ console = {}, rights = [\"strong\"] }")),
            "services/manifest.toml: process 'echo' register 3: unknown variant `strong`, expected one of `read-only`, `weak`, `no-call`"
        );
    }

    #[test]
    fn no_capability_kind() {
        assert_eq!(
            message(&with_register("{ badge = 3 }")),
            "services/manifest.toml: process 'echo' register 3: no capability kind (one of console, clock, checkpoint, journal, control, network-device, range, own-process, process, start, node, space, page, meter, number, boot-number, indirector)"
        );
    }

    #[test]
    fn two_capability_kinds() {
        assert_eq!(
            message(&with_register("{ console = {}, clock = {} }")),
            "services/manifest.toml: process 'echo' register 3: two capability kinds, 'console' and 'clock' (a capability has one)"
        );
    }

    #[test]
    fn badge_and_height_where_they_do_not_apply() {
        assert_eq!(
            message(&with_register("{ console = {}, badge = 1 }")),
            "services/manifest.toml: process 'echo' register 3: a console capability has no badge (only start and indirector have one)"
        );
        assert_eq!(
            message(&with_register("{ clock = {}, height = 1 }")),
            "services/manifest.toml: process 'echo' register 3: a clock capability has no height (only space has one)"
        );
    }

    #[test]
    fn space_height() {
        let with_node =
            |capability: &str| format!("{}[[node]]\nname = \"top\"\n", with_register(capability));
        assert_eq!(
            message(&with_node("{ space = \"top\" }")),
            "services/manifest.toml: process 'echo' register 3: a space capability needs a height (0..=7)"
        );
        assert_eq!(
            message(&with_node("{ space = \"top\", height = 8 }")),
            "services/manifest.toml: process 'echo' register 3: space height 8 is out of range (0..=7)"
        );
    }

    #[test]
    fn own_process_in_a_node() {
        assert_eq!(
            message("[[node]]\nname = \"scratch\"\nslots = { 0 = { own-process = {} } }\n"),
            "services/manifest.toml: node 'scratch' slot 0: own-process is only for a process's registers (a node has no owner)"
        );
    }

    #[test]
    fn page_contents() {
        let folder = std::env::temp_dir().join(format!("holdfast-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("greeting.txt"), b"hello").unwrap();
        std::fs::write(folder.join("big.bin"), [0u8; 4097]).unwrap();
        let page = |file: &str| {
            Manifest::parse(
                &format!("[[page]]\nname = \"p\"\ncontents = \"{file}\"\n"),
                Path::new(FILE),
                &folder,
            )
        };
        assert_eq!(page("greeting.txt").unwrap().pages[0].contents, b"hello");
        assert_eq!(
            page("big.bin").unwrap_err().to_string(),
            "services/manifest.toml: page 'p' contents 'big.bin': 4097 bytes is more than a page (4096 bytes)"
        );
        assert_eq!(
            page("absent.bin").unwrap_err().to_string(),
            "services/manifest.toml: page 'p' contents 'absent.bin': No such file or directory (os error 2)"
        );
        std::fs::remove_dir_all(folder).unwrap();
    }

    #[test]
    fn unreadable_manifest() {
        assert_eq!(
            Manifest::load(Path::new("/nonexistent/manifest.toml"))
                .unwrap_err()
                .to_string(),
            "/nonexistent/manifest.toml: cannot read it: No such file or directory (os error 2)"
        );
    }
}
