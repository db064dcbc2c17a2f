//! # snapbuild-core
//!
//! A pure-Rust model of PostgreSQL's logical decoding snapshot builder: xid and LSN
//! arithmetic, the `.snap` on-disk layouts, the RUNNING_XACTS record, and the
//! state machine of `snapbuild.c`, and the historic MVCC rule decoding applies to catalog
//! tuples (`HeapTupleSatisfiesHistoricMVCC`). No FFI and no server: every input is bytes or plain
//! values handed in by an adapter, so it is unit-tested and fuzzed on its own.
//!
//! The modules follow PostgreSQL's source tree: a function is found in the file named
//! after the one it re-runs.
//!
//! * `include/`: shared types in the role of the headers (transam.h, xlogdefs.h,
//!   snapbuild.h, snapshot.h, htup_details.h, standbydefs.h, heapam_xlog.h, …) and the
//!   major-version seam. They refer only to each other.
//! * `replication/`: src/backend/replication/logical/. `decode` (decode.c), `snapbuild`
//!   (snapbuild.c), `snapbuild_ondisk` (the `.snap` file), `reorderbuffer`
//!   (reorderbuffer.c), `logical` (logical.c's slot candidates).
//! * `access/`: `heapam_visibility` (heapam_visibility.c), `rewriteheap` (rewrite mapping
//!   files).
//! * `storage/`: `bufpage` (page header and line pointers).
//! * `verdict/`: not a PostgreSQL file; the server's verdict beside a replayed row:
//!   `snap_file` (the replay's `.snap` against the server's), `log_lines` and `debug_lines`
//!   (the builder's messages against the server log), `invalidation` (where a standby's
//!   slot was invalidated).
//! * `server_log`: not a PostgreSQL file; the server log's lines about decoders (which
//!   ones could have written a `.snap` file).
//! * `diagnose`: not a PostgreSQL file; "why is my slot stuck?" findings from a replay.
//!
//! `tests/layering.rs` checks that the headers stay headers and that the module graph
//! has no cycle.

pub mod access;
pub mod diagnose;
pub mod include;
pub mod replication;
pub mod server_log;
pub mod storage;
pub mod verdict;

pub use include::snapbuild::SnapBuildState;
pub use include::snapshot::HistoricSnapshot;
pub use include::standbydefs::RunningXacts;
pub use include::timestamp::timestamp_from_unix_ms;
pub use include::transam::TransactionId;
pub use include::version::PgVersion;
pub use include::xlogdefs::Lsn;
pub use replication::decode::{Replay, TraceRow};
pub use replication::snapbuild::{Branch, BuilderParams, RestoreResult, SnapBuild};
pub use replication::snapbuild_ondisk::{OnDiskError, SnapBuildOnDisk};
