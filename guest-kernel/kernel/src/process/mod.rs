//! Ring-3 processes: each is a root node (DESIGN.md; slots in
//! `holdfast_objects::node::process_root`) holding its capability registers and its address
//! space, a tree of nodes and pages. It runs at CPL 3 and enters the kernel only through
//! `syscall` (invocation) or by faulting ([`crate::traps`]). A fault the space tree cannot
//! resolve stops the faulting process and the kernel goes on with the next one.
//!
//! The process table here is a cache: capability registers and the space are read from the
//! root node at each use, and page tables are filled lazily from the space tree (see
//! [`crate::space`]). Registers and the run state are cached here and written back to the
//! root node at each snapshot ([`write_back`]); a restart rebuilds the table from the root
//! nodes ([`restore`]).
//!
//! - [`table`]: the process table and the scheduler's state (run states, groups, waits);
//! - [`switch`]: entering a process and the page tables it runs on (on the IPC path);
//! - [`loader`]: ELF executables of the initial image made into processes;
//! - [`meters`]: CPU time charged to meters;
//! - [`root_node`]: registers and run state written to root nodes and read back at a restart.
//!
//! Everything is re-exported here: callers name `process::enter`, not the file.

pub mod loader;
pub mod meters;
pub mod root_node;
pub mod switch;
pub mod table;

pub use loader::*;
pub use meters::*;
pub use root_node::*;
pub use switch::*;
pub use table::*;
