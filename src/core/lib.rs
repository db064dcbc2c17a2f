//! # snapbuild-core
//!
//! A pure-Rust model of PostgreSQL's logical decoding snapshot builder: xid and LSN
//! arithmetic, the `.snap` on-disk layouts, the RUNNING_XACTS record, and the
//! state machine of `snapbuild.c`, and the historic MVCC rule decoding applies to catalog
//! tuples (`HeapTupleSatisfiesHistoricMVCC`). No FFI and no server: every input is bytes or plain
//! values handed in by an adapter, so it is unit-tested and fuzzed on its own.

pub mod access;
pub mod compare;
pub mod include;
pub mod replication;
pub mod storage;

pub use include::snapbuild::SnapBuildState;
pub use include::standbydefs::RunningXacts;
pub use include::transam::TransactionId;
pub use include::version::PgMajor;
pub use include::xlogdefs::Lsn;
pub use replication::snapbuild::{Branch, BuilderParams, SnapBuild};
pub use replication::snapbuild_ondisk::{OnDiskError, SnapBuildOnDisk};
