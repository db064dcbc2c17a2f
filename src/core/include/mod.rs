//! Shared types in the role of PostgreSQL's headers (`src/include/...`).
//!
//! Each file is named after the header it mirrors and holds the types, constants and
//! small inline rules (the header's macros and `static inline` functions) that the logic
//! modules share. A header module refers only to other header modules, never to the
//! logic modules (`replication`, `access`, `storage`, `verdict`); the crate's
//! `tests/layering.rs` checks that.

pub mod heapam_xlog;
pub mod htup_details;
pub mod relfilelocator;
pub mod reorderbuffer;
pub mod rmgrlist;
pub mod server_lookups;
pub mod snapbuild;
pub mod snapshot;
pub mod standbydefs;
pub mod timestamp;
pub mod transam;
pub mod version;
pub mod xact;
pub mod xlogdefs;
pub mod xlogrecord;
