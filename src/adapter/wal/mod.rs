//! Reads WAL with PostgreSQL's own XLogReader, the way contrib pg_walinspect does
//! (stop at the end of flushed WAL, never wait), and hands each record to the core as
//! plain values.
//!
//! - `reader`: the reader ([`WalReader`]), its records ([`WalRecord`]) and the batches of
//!   records that need only their head ([`LeanHead`]).
//! - `read_ahead`: reads the rest of a segment at once in front of the server's page
//!   reader.
//! - `compat`: what differs between PostgreSQL 14 and 15+ (the no-wait page reader,
//!   finding the first record, the decoded record's fields, the resource managers).
//! - `names`: pg_waldump's `rmgr/TYPE` names of records.
//! - `position`: how far WAL can be read, whether a segment is still there, recovery.
//! - `xact_check` (pg_test only): the core's xact record parsers checked against
//!   xactdesc.c's.

mod compat;
mod names;
mod position;
mod read_ahead;
mod reader;
#[cfg(any(test, feature = "pg_test"))]
pub mod xact_check;

pub use position::{
    check_available, flush_lsn, in_recovery, is_available, replay_position, segment_written_at,
};
pub use reader::{LeanHead, WalReader, WalRecord};
