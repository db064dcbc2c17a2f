//! The SQL functions: thin wrappers that fetch inputs through `adapter` and run the core.

pub mod slots;
pub mod snapshot_files;
pub mod trace;
pub mod types;
