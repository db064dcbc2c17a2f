//! Test support for the multi-session server tests in `tests/` (see pgrx-tests/README.md).
//!
//! Everything a test compares against comes from the running server: its log file
//! (`PGSNAP_LOG`), its WAL (read with `pg_walinspect`), its slot catalog
//! (`pg_replication_slots`), the `.snap` files it wrote (`pg_ls_logicalsnapdir`, and on
//! PG 18 `pg_logicalinspect`), the xids it handed out (`pg_current_xact_id`) and the xids
//! `test_decoding` emitted.
//!
//! Environment (set by `scripts/cluster.sh env MAJOR`): `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, `PGSNAP_LOG`, `PGSNAP_PGDATA`, `PGSNAP_MAJOR`. When `PGSNAP_MAJOR` is unset
//! the tests fail, unless `PGSNAP_SKIP_LIVE=1` says explicitly to skip them.
//!
//! Modules, by concern (all re-exported here, so tests `use pg_snapbuild_tests::*`):
//! [`cluster`] (environment, serialization, connections, waiting), [`sessions`] (open
//! transactions, slot creations, slot guards, `pg_replication_slots`), [`values`] (LSNs,
//! errors, a query's first column, JSON rows), [`server_log`] (the log file, builder
//! messages), [`log_lines`] (builder lines matched to the trace rows that name them),
//! [`wal`] (RUNNING_XACTS records), [`snapfiles`] (`.snap` files), [`trace`] (trace rows),
//! [`checks`] (what every trace is checked against, collected failures), [`decoding`]
//! (what test_decoding emitted and what the replay says it emits), [`diagnosis`]
//! (`snapbuild_diagnose`'s rows), [`historic`] (historic MVCC judged tuple by tuple),
//! [`scenario`] (a named scenario checked at every step), [`standby`] (a hot standby of
//! the cluster: `Env::standby`, a test's start on it), [`slotsync`] (failover slots synced
//! to it), [`slot_stats`] (a slot's counters in `pg_stat_replication_slots`), [`watcher`] (the
//! watcher's pid, activity and LOG lines).

pub mod checks;
pub mod cluster;
pub mod decoding;
pub mod diagnosis;
pub mod historic;
pub mod log_lines;
pub mod scenario;
pub mod server_log;
pub mod sessions;
pub mod slot_stats;
pub mod slotsync;
pub mod snapfiles;
pub mod standby;
pub mod trace;
pub mod values;
pub mod wal;
pub mod watcher;

pub use checks::*;
pub use cluster::*;
pub use decoding::*;
pub use diagnosis::*;
pub use historic::*;
pub use log_lines::*;
pub use scenario::*;
pub use server_log::*;
pub use sessions::*;
pub use slot_stats::*;
pub use slotsync::*;
pub use snapfiles::*;
pub use standby::*;
pub use trace::*;
pub use values::*;
pub use wal::*;
pub use watcher::*;
