//! The SQL functions: thin wrappers that fetch inputs through `adapter` and run the core.

pub mod backlog;
pub mod diagnose;
pub mod slot_prediction;
pub mod slots;
pub mod snapshot_files;
pub mod srf;
pub mod trace;
pub mod types;
pub mod visibility;
