//! Re-runs replication/logical/snapbuild.c: the snapshot builder's state machine on
//! decoded records.
//!
//! [`SnapBuild`] holds what the server's `struct SnapBuild` holds, with the reorder buffer
//! it consults through `builder->reorder` ([`ReorderModel`]: which transactions exist,
//! their subtransactions, and which have catalog changes). Each entry point mirrors one
//! function of snapbuild.c and returns what it decided, so a trace can show the branch,
//! the texts the server logs, and the xids it would wait for. decode.c's paths that drive
//! it (DecodeCommit, DecodePrepare, DecodeAbort) are in `replication::decode`, the `.snap`
//! byte layout in `replication::snapbuild_ondisk`.
//!
//! This file holds the types a step is described with ([`Branch`], [`Level`],
//! [`ServerMessage`], [`CommitVerdict`], [`SerializeContext`], [`Step`]), the builder's
//! parameters ([`BuilderParams`]) and the builder itself (AllocateSnapshotBuilder). The
//! entry points are methods of [`SnapBuild`], one job per file:
//!
//! - `running_xacts.rs`: SnapBuildProcessRunningXacts, SnapBuildFindSnapshot with its
//!   branches a / b / c-1 / c-2 / c-3, SnapBuildWaitSnapshot's xids, SnapBuildPurgeOlderTxn
//!   and the candidates the slot is offered;
//! - `serialize.rs`: snapbuild.c's snapshot serialization support: SnapBuildRestore,
//!   SnapBuildSerializationPoint and SnapBuildSerialize;
//! - `commit.rs`: SnapBuildCommitTxn, SnapBuildAddCommittedTxn and the catalog-change
//!   tracking (SnapBuildXidHasCatalogChanges, SnapBuildXidSetCatalogChanges,
//!   SnapBuildProcessNewCid);
//! - `snapshot.rs`: the historic snapshot: SnapBuildBuildSnapshot,
//!   SnapBuildGetOrBuildSnapshot and SnapBuildProcessChange (a transaction's base
//!   snapshot).

use crate::include::snapbuild::{BuiltSnapshot, SnapBuildState};
use crate::include::transam::{TransactionId, INVALID_TRANSACTION_ID};
use crate::include::version::PgVersion;
use crate::include::xlogdefs::{Lsn, INVALID_LSN};
use crate::replication::reorderbuffer::ReorderModel;
use crate::replication::snapbuild_ondisk::{OnDiskError, SnapBuildOnDisk};

mod commit;
mod running_xacts;
mod serialize;
mod snapshot;

/// Which way SnapBuildFindSnapshot (or the code around it) went on one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Branch {
    /// The pre-filter: `oldestRunningXid` precedes `initial_xmin_horizon`.
    XminHorizonTooLow,
    /// a) no transaction running: consistent at once.
    A,
    /// b) a serialized consistent snapshot was restored.
    B,
    /// c) START → BUILDING_SNAPSHOT.
    C1,
    /// c) BUILDING_SNAPSHOT → FULL_SNAPSHOT.
    C2,
    /// c) FULL_SNAPSHOT → CONSISTENT.
    C3,
    /// Not consistent and no transition: keep waiting.
    FallThrough,
    /// Already consistent: SnapBuildSerialize writes the state.
    Serialize,
    /// A shutdown checkpoint / end of recovery while not consistent: try a restore.
    SerializationPointRestore,
    /// A shutdown checkpoint / end of recovery while consistent: serialize.
    SerializationPointSerialize,
    /// A commit the builder did not act on (see [`CommitVerdict`]).
    Commit,
}

impl Branch {
    /// Short label used in the SQL `branch` column.
    pub fn label(self) -> &'static str {
        match self {
            Branch::XminHorizonTooLow => "xmin horizon too low",
            Branch::A => "a",
            Branch::B => "b",
            Branch::C1 => "c-1",
            Branch::C2 => "c-2",
            Branch::C3 => "c-3",
            Branch::FallThrough => "fall-through",
            Branch::Serialize => "serialize",
            Branch::SerializationPointRestore => "serialization point: restore",
            Branch::SerializationPointSerialize => "serialization point: serialize",
            Branch::Commit => "commit",
        }
    }
}

/// Message severity, as the server would log it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Level {
    Debug1,
    Log,
}

impl Level {
    /// `DEBUG1` / `LOG`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug1 => "DEBUG1",
            Level::Log => "LOG",
        }
    }
}

/// A message the server emits on a branch, with its DETAIL. Bounded, allocation-free
/// text: the longest server message here is well under 160 bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerMessage {
    pub level: Level,
    pub message: heapless::String<160>,
    pub detail: heapless::String<160>,
}

fn msg(
    level: Level,
    message: core::fmt::Arguments<'_>,
    detail: core::fmt::Arguments<'_>,
) -> ServerMessage {
    use core::fmt::Write;
    let mut m = heapless::String::new();
    let mut d = heapless::String::new();
    // Writes that would overflow the bound truncate rather than fail the replay.
    let _ = m.write_fmt(message);
    let _ = d.write_fmt(detail);
    ServerMessage {
        level,
        message: m,
        detail: d,
    }
}

/// The parameters AllocateSnapshotBuilder receives (logical.c fills them from the slot).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuilderParams {
    /// Rules of this major version.
    pub version: PgVersion,
    /// `xmin_horizon`: the slot's catalog_xmin during creation, else invalid.
    pub initial_xmin_horizon: TransactionId,
    /// `start_lsn`: a created slot's confirmed_flush, else invalid.
    pub start_decoding_at: Lsn,
    /// `need_full_snapshot` (exported / used snapshot at creation).
    pub building_full_snapshot: bool,
    /// `in_slot_creation`.
    pub in_slot_creation: bool,
    /// The slot's `two_phase_at`.
    pub two_phase_at: Lsn,
}

impl BuilderParams {
    /// The parameters of a decoder with no slot-specific positions: no initial xmin
    /// horizon, start_decoding_at and two_phase_at invalid, no full snapshot (as
    /// AllocateSnapshotBuilder gets them for a range replay; a test's starting point).
    pub fn plain(version: PgVersion, in_slot_creation: bool) -> Self {
        BuilderParams {
            version,
            initial_xmin_horizon: INVALID_TRANSACTION_ID,
            start_decoding_at: INVALID_LSN,
            building_full_snapshot: false,
            in_slot_creation,
            two_phase_at: INVALID_LSN,
        }
    }
}

/// What SnapBuildCommitTxn decided for one commit.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CommitVerdict {
    /// State START, or BUILDING and the xid precedes next_phase_at (not reachable
    /// through decode.c, which drops commits before FULL_SNAPSHOT; kept for fidelity).
    SkippedBeforeBuilding,
    /// decode.c does not pass commits to the builder before FULL_SNAPSHOT.
    NotSeenBeforeFull,
    /// Not catalog-modifying: `includes_all_transactions` becomes false.
    NotCatalogChanging,
    /// Added to `committed` (time travel); `xmax_advanced` says whether xmax moved.
    /// `catalog_subxacts`: the subtransactions SnapBuildCommitTxn found catalog-changing,
    /// in the commit record's order (one DEBUG1 `found subtransaction X:S with catalog
    /// changes` line each, logged before the top-level transaction is looked at).
    Timetravel {
        xmax_advanced: bool,
        forced: bool,
        catalog_subxacts: Vec<TransactionId>,
    },
}

/// What the serialized xmin rests on: the last RUNNING_XACTS the builder processed, and
/// whether its xmin was taken from a restored file since then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SerializeContext {
    pub prev_running_xacts: Lsn,
    pub xmin_from_restore: bool,
    /// oldestRunningXid of the RUNNING_XACTS at `prev_running_xacts`: the xmin of any
    /// decoder that was already consistent there.
    pub prev_oldest_running_xid: TransactionId,
}

/// The outcome of one record, for the trace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Step {
    pub branch: Branch,
    pub state_before: SnapBuildState,
    pub message: Option<ServerMessage>,
    /// Xids SnapBuildWaitSnapshot would wait for (top-level xids not after the cutoff).
    pub wait_xids: Vec<TransactionId>,
    /// The LSN of a restored snapshot file (branch b / serialization point).
    pub restored_from: Option<Lsn>,
    /// The file SnapBuildSerialize would write here.
    pub serialized: Option<SnapBuildOnDisk>,
    /// Where the serialized xmin came from (for judging it against another writer's file).
    pub serialize_context: Option<SerializeContext>,
    /// For commit rows.
    pub commit: Option<CommitVerdict>,
    /// What SnapBuildProcessRunningXacts asks of the slot: LogicalIncreaseXminForSlot
    /// (lsn, xmin) and LogicalIncreaseRestartDecodingForSlot (lsn, restart_lsn).
    pub candidate_xmin: Option<(Lsn, TransactionId)>,
    pub candidate_restart: Option<(Lsn, Lsn)>,
}

/// A `.snap` lookup for branch b: `Ok(None)` when no file exists (missing_ok), an
/// error when the file is there but broken (the server would ERROR out).
pub type RestoreResult = Result<Option<SnapBuildOnDisk>, OnDiskError>;

/// The replayed snapshot builder: snapbuild.c's `struct SnapBuild` and the reorder
/// buffer facts it uses.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SnapBuild {
    pub version: PgVersion,
    pub state: SnapBuildState,
    /// All transactions < xmin have committed/aborted.
    pub xmin: TransactionId,
    /// All transactions >= xmax are uncommitted.
    pub xmax: TransactionId,
    pub start_decoding_at: Lsn,
    pub two_phase_at: Lsn,
    pub initial_xmin_horizon: TransactionId,
    pub building_full_snapshot: bool,
    pub in_slot_creation: bool,
    pub last_serialized_snapshot: Lsn,
    pub next_phase_at: TransactionId,
    /// `committed.xip`, in insertion order.
    pub committed_xip: Vec<TransactionId>,
    /// `committed.xcnt_space`.
    pub committed_xcnt_space: u64,
    pub includes_all_transactions: bool,
    /// `catchange.xip` (sorted), from a restored file (16+).
    pub catchange_xip: Vec<TransactionId>,
    /// 14/15: `InitialRunningXacts` (sorted), from the record a restore used.
    pub initial_running_xacts: Vec<TransactionId>,
    pub reorder: ReorderModel,
    /// `builder->snapshot`: whether one is built, and the xmin it was built with
    /// (SnapBuildBuildSnapshot copies the builder's xmin at that moment).
    pub snapshot_xmin: Option<TransactionId>,
    /// `builder->snapshot` itself: the historic snapshot the builder hands out (kept in
    /// step with `snapshot_xmin`), with where and why it was built.
    pub snapshot: Option<BuiltSnapshot>,
    /// The LSN of the last RUNNING_XACTS record processed.
    pub prev_running_xacts: Lsn,
    /// Its oldestRunningXid.
    pub prev_oldest_running_xid: TransactionId,
    /// The xmin came from a restored `.snap` since the last RUNNING_XACTS (branch b or
    /// a serialization point), not from a record's oldestRunningXid.
    pub xmin_from_restore: bool,
}

impl SnapBuild {
    /// Re-runs snapbuild.c AllocateSnapshotBuilder.
    pub fn new(p: &BuilderParams) -> Self {
        SnapBuild {
            version: p.version,
            state: SnapBuildState::Start,
            xmin: INVALID_TRANSACTION_ID,
            xmax: INVALID_TRANSACTION_ID,
            start_decoding_at: p.start_decoding_at,
            two_phase_at: p.two_phase_at,
            initial_xmin_horizon: p.initial_xmin_horizon,
            building_full_snapshot: p.building_full_snapshot,
            in_slot_creation: p.in_slot_creation,
            last_serialized_snapshot: INVALID_LSN,
            next_phase_at: INVALID_TRANSACTION_ID,
            committed_xip: Vec::new(),
            committed_xcnt_space: 128,
            includes_all_transactions: true,
            catchange_xip: Vec::new(),
            initial_running_xacts: Vec::new(),
            reorder: ReorderModel::default(),
            snapshot_xmin: None,
            snapshot: None,
            prev_running_xacts: INVALID_LSN,
            prev_oldest_running_xid: 0,
            xmin_from_restore: false,
        }
    }

    fn step(&self, branch: Branch, state_before: SnapBuildState) -> Step {
        Step {
            branch,
            state_before,
            message: None,
            wait_xids: Vec::new(),
            restored_from: None,
            serialized: None,
            serialize_context: None,
            commit: None,
            candidate_xmin: None,
            candidate_restart: None,
        }
    }
}

/// The builders and lookups the unit tests of this folder start from.
#[cfg(test)]
pub(super) mod fixtures {
    use super::*;
    use crate::include::standbydefs::RunningXacts;

    pub(super) fn params(major: u32) -> BuilderParams {
        BuilderParams::plain(PgVersion::newest(major), true)
    }

    pub(super) fn no_file(_: Lsn) -> RestoreResult {
        Ok(None)
    }

    pub(super) fn consistent_file(xmin: u32, xmax: u32) -> SnapBuildOnDisk {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(xmin, xmin, &[]), &mut no_file)
            .unwrap();
        b.xmax = xmax;
        b.serialize(Lsn(0x500))
    }
}
