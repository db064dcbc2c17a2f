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

use crate::include::heapam_xlog::NewCid;
use crate::include::reorderbuffer::TupleCid;
use crate::include::snapbuild::{BuiltSnapshot, SnapBuildState, SnapshotOrigin};
use crate::include::snapshot::HistoricSnapshot;
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::{self, TransactionId, INVALID_TRANSACTION_ID};
use crate::include::version::PgVersion;
use crate::include::xlogdefs::{Lsn, INVALID_LSN};
use crate::replication::reorderbuffer::ReorderModel;
use crate::replication::snapbuild_ondisk::{
    snap_file_name, OnDiskBuilder, OnDiskError, SnapBuildOnDisk, SNAPBUILD_MAGIC,
};

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

    /// Re-runs snapbuild.c SnapBuildWaitSnapshot's choice: the top-level xids of the
    /// record that do not follow `cutoff` (it waits on each of them).
    pub fn wait_snapshot_xids(running: &RunningXacts, cutoff: TransactionId) -> Vec<TransactionId> {
        running
            .top_xids()
            .iter()
            .copied()
            .filter(|x| !transam::follows(*x, cutoff))
            .collect()
    }

    /// Re-runs snapbuild.c SnapBuildProcessRunningXacts (FindSnapshot or Serialize,
    /// then xmin := oldestRunningXid and the purge), followed by decode.c's
    /// ReorderBufferAbortOld.
    ///
    /// `restore` is asked for the serialized snapshot at `lsn` when branch b is tried.
    pub fn process_running_xacts(
        &mut self,
        lsn: Lsn,
        running: &RunningXacts,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<Step, (Step, OnDiskError)> {
        let mut step = if self.state < SnapBuildState::Consistent {
            let (mut step, cont) = self.find_snapshot(lsn, running, restore)?;
            if cont {
                self.xmin = running.oldest_running_xid;
                self.purge_older_txn();
                self.slot_candidates(lsn, running, &mut step);
            }
            step
        } else {
            let mut step = self.step(Branch::Serialize, self.state);
            let file = self.serialize(lsn);
            step.message = Some(msg(
                Level::Debug1,
                format_args!(
                    "serializing snapshot to pg_logical/snapshots/{}",
                    snap_file_name(lsn)
                ),
                format_args!(""),
            ));
            step.serialized = Some(file);
            step.serialize_context = Some(self.serialize_context());
            self.xmin = running.oldest_running_xid;
            self.xmin_from_restore = false;
            self.purge_older_txn();
            step
        };
        if self.xmin == running.oldest_running_xid {
            self.xmin_from_restore = false;
        }
        self.prev_running_xacts = lsn;
        self.prev_oldest_running_xid = running.oldest_running_xid;
        if step.branch == Branch::Serialize {
            self.slot_candidates(lsn, running, &mut step);
        }
        self.reorder.abort_old(running.oldest_running_xid, lsn);
        Ok(step)
    }

    /// The tail of snapbuild.c SnapBuildProcessRunningXacts: the catalog xmin the slot
    /// may advance to (ReorderBufferGetOldestXmin, else oldestRunningXid) and, once
    /// consistent, where decoding could restart (the oldest transaction's
    /// restart_decoding_lsn, or the last serialized snapshot when nothing is running).
    fn slot_candidates(&self, lsn: Lsn, running: &RunningXacts, step: &mut Step) {
        let xmin = self
            .reorder
            .oldest_xmin()
            .unwrap_or(running.oldest_running_xid);
        step.candidate_xmin = Some((lsn, xmin));
        if self.state < SnapBuildState::Consistent {
            return;
        }
        match self.reorder.oldest_txn() {
            Some((_, restart)) if restart.is_valid() => {
                step.candidate_restart = Some((lsn, restart))
            }
            Some(_) => {}
            None => {
                if self.reorder.current_restart_decoding_lsn.is_valid()
                    && self.last_serialized_snapshot.is_valid()
                {
                    step.candidate_restart = Some((lsn, self.last_serialized_snapshot));
                }
            }
        }
    }

    /// Re-runs snapbuild.c SnapBuildFindSnapshot. Returns the step and whether the
    /// caller continues with xmin/purge (the C function's boolean result).
    fn find_snapshot(
        &mut self,
        lsn: Lsn,
        running: &RunningXacts,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<(Step, bool), (Step, OnDiskError)> {
        let before = self.state;
        // Pre-filter: the record is older than the xmin horizon we can rely on.
        if transam::is_normal(self.initial_xmin_horizon)
            && transam::normal_precedes(running.oldest_running_xid, self.initial_xmin_horizon)
        {
            let mut s = self.step(Branch::XminHorizonTooLow, before);
            s.message = Some(msg(
                Level::Debug1,
                format_args!(
                    "skipping snapshot at {lsn} while building logical decoding snapshot, xmin horizon too low"
                ),
                format_args!(
                    "initial xmin horizon of {} vs the snapshot's {}",
                    self.initial_xmin_horizon, running.oldest_running_xid
                ),
            ));
            s.wait_xids = Self::wait_snapshot_xids(running, self.initial_xmin_horizon);
            return Ok((s, true));
        }

        // a) nothing running: consistent right away.
        if running.oldest_running_xid == running.next_xid {
            if !self.start_decoding_at.is_valid() || self.start_decoding_at <= lsn {
                self.start_decoding_at = Lsn(lsn.0 + 1);
            }
            self.xmin = running.next_xid;
            self.xmax = running.next_xid;
            self.state = SnapBuildState::Consistent;
            self.next_phase_at = INVALID_TRANSACTION_ID;
            let mut s = self.step(Branch::A, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found consistent point at {lsn}"),
                format_args!("There are no running transactions."),
            ));
            return Ok((s, false));
        }

        // b) a usable serialized snapshot, unless building a full snapshot or (18+)
        // creating a slot.
        let may_restore = !self.building_full_snapshot
            && !(self.in_slot_creation && self.version.restore_checks_in_slot_creation());
        if may_restore {
            match self.restore(lsn, restore) {
                Ok(true) => {
                    if self.version.remembers_initial_running_xacts() {
                        let mut v = running.xids.clone();
                        v.sort_by(transam::xid_comparator);
                        self.initial_running_xacts = v;
                    }
                    let mut s = self.step(Branch::B, before);
                    s.restored_from = Some(lsn);
                    s.message = Some(restore_message(lsn));
                    return Ok((s, false));
                }
                Ok(false) => {}
                Err(e) => {
                    let s = self.step(Branch::B, before);
                    return Err((s, e));
                }
            }
        }

        if self.state == SnapBuildState::Start {
            // c) START -> BUILDING_SNAPSHOT
            self.state = SnapBuildState::BuildingSnapshot;
            self.next_phase_at = running.next_xid;
            self.xmin = running.next_xid;
            self.xmax = running.next_xid;
            let mut s = self.step(Branch::C1, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found initial starting point at {lsn}"),
                format_args!(
                    "Waiting for transactions (approximately {}) older than {} to end.",
                    running.xcnt as i32, running.next_xid
                ),
            ));
            s.wait_xids = Self::wait_snapshot_xids(running, running.next_xid);
            Ok((s, true))
        } else if self.state == SnapBuildState::BuildingSnapshot
            && transam::precedes_or_equals(self.next_phase_at, running.oldest_running_xid)
        {
            // c) BUILDING_SNAPSHOT -> FULL_SNAPSHOT
            self.state = SnapBuildState::FullSnapshot;
            self.next_phase_at = running.next_xid;
            let mut s = self.step(Branch::C2, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found initial consistent point at {lsn}"),
                format_args!(
                    "Waiting for transactions (approximately {}) older than {} to end.",
                    running.xcnt as i32, running.next_xid
                ),
            ));
            s.wait_xids = Self::wait_snapshot_xids(running, running.next_xid);
            Ok((s, true))
        } else if self.state == SnapBuildState::FullSnapshot
            && transam::precedes_or_equals(self.next_phase_at, running.oldest_running_xid)
        {
            // c) FULL_SNAPSHOT -> CONSISTENT
            self.state = SnapBuildState::Consistent;
            self.next_phase_at = INVALID_TRANSACTION_ID;
            let mut s = self.step(Branch::C3, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found consistent point at {lsn}"),
                format_args!("There are no old transactions anymore."),
            ));
            Ok((s, true))
        } else {
            Ok((self.step(Branch::FallThrough, before), true))
        }
    }

    /// Re-runs snapbuild.c SnapBuildRestore: adopt a consistent serialized snapshot at
    /// `lsn` if there is one whose xmin is not below `initial_xmin_horizon`.
    fn restore(
        &mut self,
        lsn: Lsn,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<bool, OnDiskError> {
        if self.state == SnapBuildState::Consistent {
            return Ok(false);
        }
        let Some(ondisk) = restore(lsn)? else {
            return Ok(false);
        };
        let b = &ondisk.builder;
        if b.state < SnapBuildState::Consistent.raw() {
            return Ok(false);
        }
        if transam::precedes(b.xmin, self.initial_xmin_horizon) {
            return Ok(false);
        }
        self.next_phase_at = INVALID_TRANSACTION_ID;
        self.xmin = b.xmin;
        self.xmax = b.xmax;
        self.state = SnapBuildState::from_raw(b.state).unwrap_or(SnapBuildState::Consistent);
        if !ondisk.committed_xip.is_empty() {
            self.committed_xcnt_space = ondisk.committed_xip.len() as u64;
            self.committed_xip = ondisk.committed_xip.clone();
        } else {
            self.committed_xip.clear();
        }
        self.catchange_xip = ondisk.catchange_xip.clone();
        self.xmin_from_restore = true;
        self.snapshot_xmin = Some(self.xmin);
        self.snapshot = Some(self.build_snapshot(Some(lsn), SnapshotOrigin::Restored));
        self.reorder.current_restart_decoding_lsn = lsn;
        Ok(true)
    }

    /// Re-runs snapbuild.c SnapBuildSerializationPoint (XLOG_CHECKPOINT_SHUTDOWN and
    /// XLOG_END_OF_RECOVERY): restore when not consistent, serialize when consistent.
    pub fn serialization_point(
        &mut self,
        lsn: Lsn,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<Step, (Step, OnDiskError)> {
        let before = self.state;
        if self.state < SnapBuildState::Consistent {
            let mut s = self.step(Branch::SerializationPointRestore, before);
            match self.restore(lsn, restore) {
                Ok(true) => {
                    s.restored_from = Some(lsn);
                    s.message = Some(restore_message(lsn));
                }
                Ok(false) => {}
                Err(e) => return Err((s, e)),
            }
            Ok(s)
        } else {
            let mut s = self.step(Branch::SerializationPointSerialize, before);
            s.serialize_context = Some(self.serialize_context());
            s.serialized = Some(self.serialize(lsn));
            Ok(s)
        }
    }

    fn serialize_context(&self) -> SerializeContext {
        SerializeContext {
            prev_running_xacts: self.prev_running_xacts,
            xmin_from_restore: self.xmin_from_restore,
            prev_oldest_running_xid: self.prev_oldest_running_xid,
        }
    }

    /// Re-runs snapbuild.c SnapBuildSerialize's content: the file the server writes at
    /// `lsn` (and remembers `lsn` as the last serialization point).
    pub fn serialize(&mut self, lsn: Lsn) -> SnapBuildOnDisk {
        let version = self.version.snapbuild_version();
        let catchange = if self.version.serializes_catchange() {
            self.reorder.catalog_changes_xacts()
        } else {
            Vec::new()
        };
        let file = SnapBuildOnDisk {
            magic: SNAPBUILD_MAGIC,
            checksum: 0,
            version,
            length: 0,
            builder: OnDiskBuilder {
                state: self.state.raw(),
                xmin: self.xmin,
                xmax: self.xmax,
                start_decoding_at: self.start_decoding_at,
                two_phase_at: self.two_phase_at,
                initial_xmin_horizon: self.initial_xmin_horizon,
                building_full_snapshot: self.building_full_snapshot,
                in_slot_creation: (version >= 6).then_some(self.in_slot_creation),
                last_serialized_snapshot: self.last_serialized_snapshot,
                next_phase_at: self.next_phase_at,
                committed_xcnt: self.committed_xip.len() as u64,
                committed_xcnt_space: self.committed_xcnt_space,
                includes_all_transactions: self.includes_all_transactions,
                catchange_xcnt: (version >= 5).then_some(catchange.len() as u64),
            },
            committed_xip: self.committed_xip.clone(),
            catchange_xip: catchange,
        };
        // Fill in checksum and length exactly as written.
        let file = match file.encode() {
            Some(bytes) => SnapBuildOnDisk::decode(&bytes, version).unwrap_or(file),
            None => file,
        };
        self.last_serialized_snapshot = lsn;
        self.reorder.current_restart_decoding_lsn = lsn;
        file
    }

    /// Re-runs snapbuild.c SnapBuildPurgeOlderTxn: forget committed xids older than
    /// xmin (and catchange / initial running xids older than xmin).
    pub fn purge_older_txn(&mut self) {
        if !transam::is_normal(self.xmin) {
            return;
        }
        let xmin = self.xmin;
        self.committed_xip
            .retain(|x| !transam::normal_precedes(*x, xmin));
        if !self.catchange_xip.is_empty() {
            let off = self
                .catchange_xip
                .iter()
                .position(|x| transam::follows_or_equals(*x, xmin))
                .unwrap_or(self.catchange_xip.len());
            self.catchange_xip.drain(..off);
        }
        if !self.initial_running_xacts.is_empty() {
            self.initial_running_xacts
                .retain(|x| !transam::normal_precedes(*x, xmin));
        }
    }

    /// Re-runs snapbuild.c SnapBuildAddCommittedTxn (growth `space * 2 + 1`).
    fn add_committed_txn(&mut self, x: TransactionId) {
        if self.committed_xip.len() as u64 == self.committed_xcnt_space {
            self.committed_xcnt_space = self.committed_xcnt_space * 2 + 1;
        }
        self.committed_xip.push(x);
    }

    /// Re-runs snapbuild.c SnapBuildXidHasCatalogChanges (16+): flagged in the reorder
    /// buffer, or (commit record with invalidations) listed in catchange. On 14 and 15
    /// SnapBuildCommitTxn asks the reorder buffer alone; the InitialRunningXacts list
    /// works earlier, through [`SnapBuild::xid_set_catalog_changes`].
    pub fn xid_has_catalog_changes(&self, x: TransactionId, has_invals: bool) -> bool {
        if self.reorder.has_catalog_changes(x) {
            return true;
        }
        if !has_invals || self.version.remembers_initial_running_xacts() {
            return false;
        }
        self.catchange_xip.binary_search(&x).is_ok()
    }

    /// Re-runs snapbuild.c SnapBuildXidSetCatalogChanges (14, 15; decode.c DecodeCommit
    /// calls it before SnapBuildCommitTxn for a commit record with invalidations): a
    /// top-level `x` listed in InitialRunningXacts and not yet flagged is flagged, and so
    /// is every subtransaction the commit record lists, each assigned to `x` first, since
    /// the record cannot say which of them changed the catalog.
    pub fn xid_set_catalog_changes(
        &mut self,
        x: TransactionId,
        subxacts: &[TransactionId],
        lsn: Lsn,
    ) {
        if self.initial_running_xacts.is_empty() || self.reorder.has_catalog_changes(x) {
            return;
        }
        if self.initial_running_xacts.binary_search(&x).is_err() {
            return;
        }
        self.reorder.set_catalog_changes(x, lsn);
        for &sub in subxacts {
            self.reorder.assign_child(x, sub, lsn);
            self.reorder.set_catalog_changes(sub, lsn);
        }
    }

    /// Re-runs snapbuild.c SnapBuildCommitTxn.
    pub fn commit_txn(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        has_invals: bool,
    ) -> CommitVerdict {
        let mut needs_timetravel = false;
        let mut sub_needs_timetravel = false;
        let mut needs_snapshot = false;
        let mut xmax = x;
        let mut catalog_subxacts = Vec::new();
        if self.state == SnapBuildState::Start
            || (self.state == SnapBuildState::BuildingSnapshot
                && transam::precedes(x, self.next_phase_at))
        {
            if self.start_decoding_at <= lsn {
                self.start_decoding_at = Lsn(lsn.0 + 1);
            }
            return CommitVerdict::SkippedBeforeBuilding;
        }
        if self.state < SnapBuildState::Consistent {
            if self.start_decoding_at <= lsn {
                self.start_decoding_at = Lsn(lsn.0 + 1);
            }
            if self.building_full_snapshot {
                needs_timetravel = true;
            }
        }
        for &sub in subxacts {
            if self.xid_has_catalog_changes(sub, has_invals) {
                sub_needs_timetravel = true;
                needs_snapshot = true;
                // The server logs this subtransaction at DEBUG1 here.
                catalog_subxacts.push(sub);
                self.add_committed_txn(sub);
                if transam::normal_follows(sub, xmax) {
                    xmax = sub;
                }
            } else if needs_timetravel {
                self.add_committed_txn(sub);
                if transam::normal_follows(sub, xmax) {
                    xmax = sub;
                }
            }
        }
        let forced;
        if self.xid_has_catalog_changes(x, has_invals) {
            needs_timetravel = true;
            needs_snapshot = true;
            forced = false;
            self.add_committed_txn(x);
        } else if sub_needs_timetravel || needs_timetravel {
            needs_timetravel = true;
            forced = true;
            self.add_committed_txn(x);
        } else {
            forced = false;
        }
        if !needs_timetravel {
            self.includes_all_transactions = false;
            return CommitVerdict::NotCatalogChanging;
        }
        let mut xmax_advanced = false;
        if !transam::is_valid(self.xmax) || transam::follows_or_equals(xmax, self.xmax) {
            self.xmax = transam::advance(xmax);
            xmax_advanced = true;
        }
        if needs_snapshot && self.state >= SnapBuildState::FullSnapshot {
            // A new historic snapshot is built and becomes the committing transaction's
            // base snapshot if it had none.
            self.snapshot_xmin = Some(self.xmin);
            self.snapshot = Some(self.build_snapshot(Some(lsn), SnapshotOrigin::CatalogCommit(x)));
            if !self.reorder.has_base_snapshot(x) {
                self.reorder.set_base_snapshot(x, lsn, self.xmin);
            }
        }
        CommitVerdict::Timetravel {
            xmax_advanced,
            forced,
            catalog_subxacts,
        }
    }

    /// decode.c: HEAP2 NEW_CID (SnapBuildProcessNewCid) and XACT INVALIDATIONS mark
    /// `xid` catalog-modifying — only once the builder is at least FULL_SNAPSHOT.
    pub fn mark_catalog_changes(&mut self, x: TransactionId, lsn: Lsn) {
        if self.state < SnapBuildState::FullSnapshot || !transam::is_valid(x) {
            return;
        }
        self.reorder.set_catalog_changes(x, lsn);
    }

    /// Re-runs snapbuild.c SnapBuildProcessChange for a data change of `x` at `lsn`:
    /// whether the change is decoded, giving the transaction a base snapshot if needed.
    pub fn process_change(&mut self, x: TransactionId, lsn: Lsn) -> bool {
        if self.state < SnapBuildState::FullSnapshot {
            return false;
        }
        if self.state < SnapBuildState::Consistent && transam::precedes(x, self.next_phase_at) {
            return false;
        }
        if !self.reorder.has_base_snapshot(x) {
            if self.snapshot.is_none() {
                self.snapshot =
                    Some(self.build_snapshot(Some(lsn), SnapshotOrigin::FirstChange(x)));
            }
            let xmin = *self.snapshot_xmin.get_or_insert(self.xmin);
            self.reorder.set_base_snapshot(x, lsn, xmin);
        }
        true
    }

    /// Re-runs snapbuild.c SnapBuildProcessNewCid (decode.c calls it for HEAP2 NEW_CID
    /// once the builder is at least FULL_SNAPSHOT): the record's xid gets catalog changes,
    /// its top-level transaction the tuple mapping, and the record's xid the next command
    /// id (one past the larger valid of cmin and cmax).
    pub fn process_new_cid(&mut self, x: TransactionId, lsn: Lsn, rec: &NewCid) {
        if self.state < SnapBuildState::FullSnapshot {
            return;
        }
        self.mark_catalog_changes(x, lsn);
        self.reorder.add_new_tuple_cids(
            rec.top_xid,
            lsn,
            TupleCid {
                lsn,
                key: rec.target,
                cmin: rec.cmin,
                cmax: rec.cmax,
                combocid: rec.combocid,
            },
        );
        // Neither cmin nor cmax valid: the server raises an ERROR; no command id here.
        if let Some(cid) = rec.command_id() {
            self.reorder.add_new_command_id(x, lsn, cid.wrapping_add(1));
        }
    }

    /// Re-runs snapbuild.c SnapBuildBuildSnapshot on the builder as it stands.
    pub fn build_snapshot(&self, built_at: Option<Lsn>, origin: SnapshotOrigin) -> BuiltSnapshot {
        BuiltSnapshot {
            snapshot: HistoricSnapshot::build(self.xmin, self.xmax, &self.committed_xip),
            built_at,
            origin,
        }
    }

    /// The historic snapshot the builder hands out now: `builder->snapshot` when one is
    /// built, else the one SnapBuildBuildSnapshot would build (SnapBuildGetOrBuildSnapshot).
    /// There is none before FULL_SNAPSHOT: the state is returned instead.
    pub fn historic_snapshot(&self) -> Result<BuiltSnapshot, SnapBuildState> {
        if self.state < SnapBuildState::FullSnapshot {
            return Err(self.state);
        }
        Ok(self
            .snapshot
            .clone()
            .unwrap_or_else(|| self.build_snapshot(None, SnapshotOrigin::BuiltNow)))
    }
}

fn restore_message(lsn: Lsn) -> ServerMessage {
    msg(
        Level::Log,
        format_args!("logical decoding found consistent point at {lsn}"),
        format_args!("Logical decoding will begin using saved snapshot."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(major: u32) -> BuilderParams {
        BuilderParams::plain(PgVersion::newest(major), true)
    }

    fn no_file(_: Lsn) -> RestoreResult {
        Ok(None)
    }

    /// Seed 000 §9.7's worked example, with the branch the server really takes on the
    /// third record (a, not c-3: a is tested first whatever the state).
    #[test]
    fn seed_000_worked_example() {
        let mut b = SnapBuild::new(&params(18));
        let s1 = b
            .process_running_xacts(
                Lsn(0x100),
                &RunningXacts::new(401, 503, &[401, 402]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s1.branch, Branch::C1);
        assert_eq!(b.state, SnapBuildState::BuildingSnapshot);
        assert_eq!(b.next_phase_at, 503);
        assert_eq!((b.xmin, b.xmax), (401, 503)); // xmin := oldestRunningXid after c-1
        assert_eq!(s1.wait_xids, vec![401, 402]);
        assert_eq!(
            s1.message.as_ref().unwrap().detail.as_str(),
            "Waiting for transactions (approximately 2) older than 503 to end."
        );

        let s2 = b
            .process_running_xacts(
                Lsn(0x200),
                &RunningXacts::new(503, 520, &[503, 510]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s2.branch, Branch::C2);
        assert_eq!(b.state, SnapBuildState::FullSnapshot);
        assert_eq!(b.next_phase_at, 520);

        let s3 = b
            .process_running_xacts(Lsn(0x300), &RunningXacts::new(521, 521, &[]), &mut no_file)
            .unwrap();
        assert_eq!(s3.branch, Branch::A);
        assert_eq!(b.state, SnapBuildState::Consistent);
        assert_eq!((b.xmin, b.xmax), (521, 521));
        assert_eq!(b.start_decoding_at, Lsn(0x301));
        assert_eq!(
            s3.message.as_ref().unwrap().message.as_str(),
            "logical decoding found consistent point at 0/300"
        );
        assert_eq!(
            s3.message.as_ref().unwrap().detail.as_str(),
            "There are no running transactions."
        );
    }

    #[test]
    fn c3_needs_a_running_transaction() {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(
            Lsn(1),
            &RunningXacts::new(754, 756, &[754, 755]),
            &mut no_file,
        )
        .unwrap();
        b.process_running_xacts(Lsn(2), &RunningXacts::new(756, 757, &[756]), &mut no_file)
            .unwrap();
        let s = b
            .process_running_xacts(Lsn(3), &RunningXacts::new(757, 758, &[757]), &mut no_file)
            .unwrap();
        assert_eq!(s.branch, Branch::C3);
        assert_eq!(
            s.message.unwrap().detail.as_str(),
            "There are no old transactions anymore."
        );
        assert_eq!(b.xmin, 757);
    }

    #[test]
    fn fall_through_while_waiting() {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(
            Lsn(1),
            &RunningXacts::new(754, 756, &[754, 755]),
            &mut no_file,
        )
        .unwrap();
        let s = b
            .process_running_xacts(
                Lsn(2),
                &RunningXacts::new(755, 757, &[755, 756]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::FallThrough);
        assert_eq!(b.state, SnapBuildState::BuildingSnapshot);
        assert_eq!(b.xmin, 755);
    }

    #[test]
    fn xmin_horizon_prefilter() {
        let mut p = params(18);
        p.initial_xmin_horizon = 800;
        let mut b = SnapBuild::new(&p);
        let s = b
            .process_running_xacts(
                Lsn(1),
                &RunningXacts::new(790, 805, &[790, 801]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::XminHorizonTooLow);
        assert_eq!(s.wait_xids, vec![790]);
        assert_eq!(b.state, SnapBuildState::Start);
    }

    fn consistent_file(xmin: u32, xmax: u32) -> SnapBuildOnDisk {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(xmin, xmin, &[]), &mut no_file)
            .unwrap();
        b.xmax = xmax;
        b.serialize(Lsn(0x500))
    }

    #[test]
    fn branch_b_only_outside_slot_creation() {
        let file = consistent_file(900, 901);
        let mut with_file = |_: Lsn| -> RestoreResult { Ok(Some(file.clone())) };
        let mut creating = SnapBuild::new(&params(18));
        let s = creating
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::C1);

        let mut p = params(18);
        p.in_slot_creation = false;
        let mut restarting = SnapBuild::new(&p);
        let s = restarting
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::B);
        assert_eq!(restarting.state, SnapBuildState::Consistent);
        assert_eq!((restarting.xmin, restarting.xmax), (900, 901));
        assert_eq!(
            s.message.unwrap().detail.as_str(),
            "Logical decoding will begin using saved snapshot."
        );

        // 15 refuses the restore during creation too, and after a restore outside creation
        // remembers the record's running xids (InitialRunningXacts).
        let mut f15 = file.clone();
        f15.version = 4;
        let mut with15 = |_: Lsn| -> RestoreResult { Ok(Some(f15.clone())) };
        let mut creating15 = SnapBuild::new(&params(15));
        let s = creating15
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with15,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::C1);
        let mut p15 = params(15);
        p15.in_slot_creation = false;
        let mut pg15 = SnapBuild::new(&p15);
        let s = pg15
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with15,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::B);
        assert_eq!(pg15.initial_running_xacts, vec![899]);
    }

    #[test]
    fn restore_refuses_xmin_below_horizon_and_inconsistent_files() {
        let file = consistent_file(900, 901);
        let mut p = params(18);
        p.in_slot_creation = false;
        p.initial_xmin_horizon = 950;
        let mut b = SnapBuild::new(&p);
        let mut with_file = |_: Lsn| -> RestoreResult { Ok(Some(file.clone())) };
        let s = b
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(960, 970, &[960]),
                &mut with_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::C1);
    }

    #[test]
    fn consistent_builder_serializes_before_moving_xmin() {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(700, 700, &[]), &mut no_file)
            .unwrap();
        let s = b
            .process_running_xacts(
                Lsn(0x900),
                &RunningXacts::new(705, 710, &[705]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::Serialize);
        let f = s.serialized.unwrap();
        assert_eq!((f.builder.xmin, f.builder.xmax), (700, 700));
        assert_eq!(b.xmin, 705);
        assert_eq!(b.last_serialized_snapshot, Lsn(0x900));
        // The prediction is a valid file.
        let bytes = f.encode().unwrap();
        assert_eq!(bytes.len(), 144);
        assert!(SnapBuildOnDisk::decode(&bytes, 6).is_ok());
    }

    #[test]
    fn committed_space_grows_like_the_server() {
        let mut b = SnapBuild::new(&params(18));
        for x in 0..129u32 {
            b.add_committed_txn(1000 + x);
        }
        assert_eq!(b.committed_xcnt_space, 257);
    }

    #[test]
    fn wraparound_in_the_state_machine() {
        let mut b = SnapBuild::new(&params(18));
        let near = u32::MAX - 1;
        b.process_running_xacts(
            Lsn(1),
            &RunningXacts::new(near, 4, &[near, u32::MAX]),
            &mut no_file,
        )
        .unwrap();
        assert_eq!(b.next_phase_at, 4);
        // oldest 4 >= next_phase_at 4 across the wrap: BUILDING -> FULL.
        let s = b
            .process_running_xacts(Lsn(2), &RunningXacts::new(4, 6, &[4]), &mut no_file)
            .unwrap();
        assert_eq!(s.branch, Branch::C2);
        // An oldest xid just before the wrap does not satisfy the next phase.
        let mut b2 = SnapBuild::new(&params(18));
        b2.process_running_xacts(Lsn(1), &RunningXacts::new(near, 4, &[near]), &mut no_file)
            .unwrap();
        let s = b2
            .process_running_xacts(
                Lsn(2),
                &RunningXacts::new(u32::MAX, 5, &[u32::MAX]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::FallThrough);
    }
}
