//! Re-runs replication/logical/decode.c: LogicalDecodingProcessRecord's dispatch of
//! each decoded WAL record to the snapshot builder and the reorder buffer
//! ([`Replay::feed`]), xact_decode's COMMIT / PREPARE / ABORT paths (DecodeCommit,
//! DecodePrepare, DecodeAbort, DecodeTXNNeedSkip, FilterPrepare) with what they made the
//! output plugin send ([`DecodeVerdict::sends`]), and one [`TraceRow`] per record for the
//! trace.

use crate::include::heapam_xlog::{NewCid, XLOG_HEAP_OPMASK};
use crate::include::rmgrlist::{
    RM_HEAP2_ID, RM_HEAP_ID, RM_LOGICALMSG_ID, RM_STANDBY_ID, RM_XACT_ID, RM_XLOG_ID,
};
use crate::include::snapbuild::SnapBuildState;
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::{self, TransactionId};
use crate::include::xact::XLOG_XACT_OPMASK;
use crate::include::xlogdefs::{Lsn, INVALID_LSN};
use crate::include::xlogrecord::XLR_INFO_MASK;
use crate::replication::reorderbuffer::{historic_view, HistoricView, TxnStatus};
use crate::replication::snapbuild::{
    Branch, BuilderParams, CommitVerdict, Level, RestoreResult, SerializeContext, SnapBuild, Step,
};
use crate::replication::snapbuild_ondisk::{OnDiskError, SnapBuildOnDisk};

/// The records decode.c passes on to snapbuild.c or the reorder-buffer bookkeeping it
/// depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RecordKind {
    /// STANDBY `XLOG_RUNNING_XACTS` (0x10).
    RunningXacts,
    /// XLOG `XLOG_CHECKPOINT_SHUTDOWN` (0x00).
    CheckpointShutdown,
    /// XLOG `XLOG_END_OF_RECOVERY` (0x90).
    EndOfRecovery,
    /// XACT `XLOG_XACT_COMMIT` (0x00).
    Commit,
    /// XACT `XLOG_XACT_PREPARE` (0x10).
    Prepare,
    /// XACT `XLOG_XACT_ABORT` (0x20).
    Abort,
    /// XACT `XLOG_XACT_COMMIT_PREPARED` (0x30).
    CommitPrepared,
    /// XACT `XLOG_XACT_ABORT_PREPARED` (0x40).
    AbortPrepared,
    /// XACT `XLOG_XACT_ASSIGNMENT` (0x50).
    Assignment,
    /// XACT `XLOG_XACT_INVALIDATIONS` (0x60).
    Invalidations,
    /// HEAP2 `XLOG_HEAP2_NEW_CID` (0x70).
    NewCid,
    /// A data change that goes through SnapBuildProcessChange: HEAP INSERT (0x00),
    /// DELETE (0x10), UPDATE (0x20), TRUNCATE (0x30), HOT_UPDATE (0x40), CONFIRM (0x50);
    /// HEAP2 MULTI_INSERT (0x50).
    Change,
    /// LOGICALMSG `XLOG_LOGICAL_MESSAGE` (only transactional ones count as changes).
    LogicalMessage,
    /// Anything else (only its xid matters: ReorderBufferProcessXid).
    Other,
}

impl RecordKind {
    /// Classifies a record by resource manager id and `xl_info`.
    pub fn classify(rmid: u8, info: u8) -> Self {
        match rmid {
            RM_XLOG_ID => match info & !XLR_INFO_MASK {
                0x00 => RecordKind::CheckpointShutdown,
                0x90 => RecordKind::EndOfRecovery,
                _ => RecordKind::Other,
            },
            RM_XACT_ID => match info & XLOG_XACT_OPMASK {
                0x00 => RecordKind::Commit,
                0x10 => RecordKind::Prepare,
                0x20 => RecordKind::Abort,
                0x30 => RecordKind::CommitPrepared,
                0x40 => RecordKind::AbortPrepared,
                0x50 => RecordKind::Assignment,
                0x60 => RecordKind::Invalidations,
                _ => RecordKind::Other,
            },
            RM_STANDBY_ID if info & !XLR_INFO_MASK == 0x10 => RecordKind::RunningXacts,
            RM_HEAP2_ID => match info & XLOG_HEAP_OPMASK {
                0x70 => RecordKind::NewCid,
                0x50 => RecordKind::Change,
                _ => RecordKind::Other,
            },
            RM_HEAP_ID => match info & XLOG_HEAP_OPMASK {
                0x00 | 0x10 | 0x20 | 0x30 | 0x40 | 0x50 => RecordKind::Change,
                _ => RecordKind::Other,
            },
            RM_LOGICALMSG_ID if info & !XLR_INFO_MASK == 0x00 => RecordKind::LogicalMessage,
            _ => RecordKind::Other,
        }
    }

    /// The record's name as pg_waldump prints it.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::RunningXacts => "RUNNING_XACTS",
            RecordKind::CheckpointShutdown => "CHECKPOINT_SHUTDOWN",
            RecordKind::EndOfRecovery => "END_OF_RECOVERY",
            RecordKind::Commit => "COMMIT",
            RecordKind::Prepare => "PREPARE",
            RecordKind::Abort => "ABORT",
            RecordKind::CommitPrepared => "COMMIT_PREPARED",
            RecordKind::AbortPrepared => "ABORT_PREPARED",
            RecordKind::Assignment => "ASSIGNMENT",
            RecordKind::Invalidations => "INVALIDATION",
            RecordKind::NewCid => "NEW_CID",
            RecordKind::Change => "CHANGE",
            RecordKind::LogicalMessage => "MESSAGE",
            RecordKind::Other => "OTHER",
        }
    }

    /// Whether the adapter must parse the commit/abort body (subxacts, xinfo).
    pub fn needs_xact_parse(self) -> bool {
        matches!(
            self,
            RecordKind::Commit
                | RecordKind::CommitPrepared
                | RecordKind::Abort
                | RecordKind::AbortPrepared
        )
    }
}

/// The header facts of one WAL record the replay needs.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RecordHead {
    /// Start of the record (`ReadRecPtr`, decode.c's `origptr`).
    pub lsn: Lsn,
    /// End of the record (`EndRecPtr`).
    pub end_lsn: Lsn,
    /// `XLogRecGetXid`.
    pub xid: TransactionId,
    /// `XLogRecGetTopXid` (valid only on the first record of a subtransaction).
    pub top_xid: TransactionId,
    /// `XLogRecGetRmid`.
    pub rmid: u8,
    pub kind: RecordKind,
    /// pg_waldump's `rmgr/TYPE` name, when the adapter supplies it (the adapter keeps one
    /// copy per distinct name for the backend's life, so a row per record costs no string).
    pub name: Option<&'static str>,
}

/// The parsed body of the records whose body matters.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Payload {
    None,
    RunningXacts(RunningXacts),
    /// Commit / commit prepared: the xid (the 2PC xid when prepared), subxacts, whether
    /// xinfo has `XACT_XINFO_HAS_INVALS`, the database (0 when not recorded) and the gid
    /// of a prepared transaction (empty otherwise).
    Commit {
        xid: TransactionId,
        subxacts: Vec<TransactionId>,
        has_invals: bool,
        db_id: u32,
        gid: String,
    },
    /// Abort / abort prepared: likewise.
    Abort {
        xid: TransactionId,
        subxacts: Vec<TransactionId>,
        db_id: u32,
        gid: String,
    },
    /// PREPARE TRANSACTION: the prepared xid, its subxacts, database and gid.
    Prepare {
        xid: TransactionId,
        subxacts: Vec<TransactionId>,
        db_id: u32,
        gid: String,
    },
    /// A logical decoding message (`xl_logical_message`): transactional or not, and the
    /// database it was emitted in.
    Message {
        transactional: bool,
        db_id: u32,
    },
    /// HEAP2 NEW_CID: the catalog tuple and command ids.
    NewCid(NewCid),
}

impl Payload {
    /// The payload of a parsed commit, commit prepared, abort, abort prepared or prepare
    /// record of kind `kind` (xact_decode's view of it): its xid is the two-phase xid of
    /// a prepared transaction, else `record_xid` (the record header's).
    pub fn from_xact(
        kind: RecordKind,
        p: crate::access::xactdesc::ParsedXact,
        record_xid: TransactionId,
    ) -> Payload {
        let xid = if p.twophase_xid != 0 {
            p.twophase_xid
        } else {
            record_xid
        };
        match kind {
            RecordKind::Commit | RecordKind::CommitPrepared => Payload::Commit {
                xid,
                has_invals: p.has_invals(),
                subxacts: p.subxacts,
                db_id: p.db_id,
                gid: p.gid,
            },
            RecordKind::Prepare => Payload::Prepare {
                xid,
                subxacts: p.subxacts,
                db_id: p.db_id,
                gid: p.gid,
            },
            _ => Payload::Abort {
                xid,
                subxacts: p.subxacts,
                db_id: p.db_id,
                gid: p.gid,
            },
        }
    }
}

/// One row of `snapbuild_trace`: what the replayed builder did on one record.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TraceRow {
    pub lsn: Lsn,
    pub end_lsn: Lsn,
    /// The record's name: `RecordKind::name` (static), or pg_waldump's `rmgr/TYPE` when the
    /// reader names every record (`all_records`).
    pub record: &'static str,
    pub xid: Option<TransactionId>,
    pub branch: Option<&'static str>,
    pub state_before: SnapBuildState,
    pub state: SnapBuildState,
    pub xmin: TransactionId,
    pub xmax: TransactionId,
    pub next_phase_at: TransactionId,
    pub start_decoding_at: Lsn,
    pub running_xids: Option<Vec<TransactionId>>,
    pub wait_xids: Option<Vec<TransactionId>>,
    pub level: Option<&'static str>,
    pub message: Option<String>,
    pub detail: Option<String>,
    /// The file SnapBuildSerialize writes at this LSN (serialize rows).
    pub serialized: Option<Box<SnapBuildOnDisk>>,
    /// What the serialized xmin rests on (serialize rows).
    pub serialize_context: Option<SerializeContext>,
    /// Where a restored snapshot came from (branch b).
    pub restored_from: Option<Lsn>,
    /// SnapBuildCommitTxn's verdict, on commit rows.
    pub commit: Option<CommitVerdict>,
    /// What decode.c did with a commit, on commit rows.
    pub decode: Option<DecodeVerdict>,
    /// LogicalIncreaseXminForSlot's arguments, on RUNNING_XACTS rows.
    pub candidate_xmin: Option<(Lsn, TransactionId)>,
    /// LogicalIncreaseRestartDecodingForSlot's arguments, on RUNNING_XACTS rows.
    pub candidate_restart: Option<(Lsn, Lsn)>,
    /// Whether the default trace shows this row (RUNNING_XACTS, serialization points,
    /// commits, and anything that changed the builder's state or tracked sets).
    pub interesting: bool,
    /// A known PostgreSQL behaviour this row runs into (the replay does what the server
    /// does; the note says why that may surprise): see [`NOTE_CATALOG_CHANGE_BEFORE_FULL`].
    pub note: Option<String>,
}

/// The note on a row where the output plugin would be called while the slot is being
/// created: only a ROLLBACK PREPARED can get there (two-phase slot, builder in
/// FULL_SNAPSHOT; commits in FULL_SNAPSHOT move start_decoding_at past themselves, aborts do
/// not). pg_create_logical_replication_slot gives the plugin no writer, and its
/// rollback_prepared callback crashes the backend (SIGSEGV, the postmaster restarts every
/// session). Observed on 14.22, 15.19, 16.15, 17.11 and 18.6 with test_decoding (pgrx-tests
/// `scenarios`, `g_rollback_prepared_during_two_phase_creation`, opt-in).
pub const NOTE_CALLBACK_DURING_CREATION: &str = "postgres-behaviour: output plugin called during slot creation; \
     pg_create_logical_replication_slot has no writer for it and the server process crashes (SIGSEGV)";

/// The note on a commit, seen in FULL_SNAPSHOT, of a transaction whose catalog changes
/// were written before the builder reached FULL_SNAPSHOT (its commit record carries
/// invalidations, yet nothing marked it catalog-changing: decode.c hands those records to
/// the builder only from FULL_SNAPSHOT on). SnapBuildCommitTxn then does not add it to
/// `committed`, and until the builder's xmin passes it every historic snapshot treats it as
/// running: changes decoded meanwhile use the catalog without its DDL. Observed on 14.22,
/// 15.19, 16.15, 17.11 and 18.6 (pgrx-tests `scenarios`, e); discussed on pgsql-hackers in
/// November 2025 as "Fix logical decoding not track transaction during
/// SNAPBUILD_BUILDING_SNAPSHOT".
pub const NOTE_CATALOG_CHANGE_BEFORE_FULL: &str =
    "postgres-behaviour: catalog change made before FULL_SNAPSHOT, committed in FULL_SNAPSHOT: \
     not time-travel; historic snapshots treat the transaction as running until xmin passes it";

/// The DEBUG1 lines snapbuild.c SnapBuildCommitTxn logs for the catalog-changing
/// subtransactions `subs` of committing `top`, one per line in the commit record's order
/// (`found subtransaction X:S with catalog changes`).
pub fn subtransaction_messages(top: TransactionId, subs: &[TransactionId]) -> String {
    subs.iter()
        .map(|s| format!("found subtransaction {top}:{s} with catalog changes"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why the replay stopped early: the server would have raised this ERROR here.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplayError {
    pub row: TraceRow,
    pub error: OnDiskError,
}

/// How the decoding context treats prepared transactions: logical.c's `ctx->twophase`
/// (the slot has `two_phase` and the output plugin has the two-phase callbacks) and the
/// plugin's filter_prepare callback.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TwoPhaseDecoding {
    /// `ctx->twophase`: PREPARE is decoded on its own.
    pub enabled: bool,
    /// filter_prepare: gids containing this text are filtered at PREPARE (test_decoding
    /// filters `_nodecode`); `None` when the plugin has no filter.
    pub filter_gid_containing: Option<String>,
}

impl TwoPhaseDecoding {
    /// As logical.c sets it up for a slot with `two_phase` decoded by `plugin`: the
    /// in-core plugins test_decoding and pgoutput have the two-phase callbacks;
    /// test_decoding's filter_prepare filters gids containing `_nodecode`. Other plugins
    /// are assumed to have the callbacks and no filter.
    pub fn for_slot(slot_two_phase: bool, plugin: &str) -> Self {
        TwoPhaseDecoding {
            enabled: slot_two_phase,
            filter_gid_containing: (slot_two_phase && plugin == "test_decoding")
                .then(|| "_nodecode".to_owned()),
        }
    }

    /// Re-runs decode.c FilterPrepare: true when the transaction is decoded as a plain one
    /// at COMMIT PREPARED instead of at PREPARE.
    pub fn filter_prepare(&self, gid: &str) -> bool {
        !self.enabled
            || self
                .filter_gid_containing
                .as_deref()
                .is_some_and(|f| gid.contains(f))
    }
}

/// A replay in progress. Serialized (serde) to share it between processes: every field
/// but a spare row box, which holds nothing a later record reads.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Replay {
    pub builder: SnapBuild,
    /// The slot's database (`ctx->slot->data.database`), for DecodeTXNNeedSkip.
    pub slot_db: u32,
    /// Two-phase decoding (off unless set after [`Replay::new`]).
    pub two_phase: TwoPhaseDecoding,
    /// logical.c's `fast_forward` (`pg_replication_slot_advance`): NEW_CID records are not
    /// processed and, up to 16, changes give no base snapshot
    /// ([`PgVersion::fast_forward_builds_base_snapshots`]). Off unless set after
    /// [`Replay::new`].
    ///
    /// [`PgVersion::fast_forward_builds_base_snapshots`]: crate::include::version::PgVersion::fast_forward_builds_base_snapshots
    pub fast_forward: bool,
    /// The last RUNNING_XACTS record fed, as (start LSN, end LSN, record): what a
    /// diagnosis reads the waited-for and oldest running xids from.
    pub last_running_xacts: Option<(Lsn, Lsn, RunningXacts)>,
    /// A row's box given back once the row was used ([`Replay::give_back`]), for the next
    /// row: a trace makes a row per commit, or per record.
    #[serde(skip)]
    spare_row: Option<Box<TraceRow>>,
    /// Set by a caller that needs the builder's state, not rows (the slots' health and
    /// diagnosis): [`Replay::feed_lean`] then makes no row for a commit, nor for a record
    /// that only changed the builder's tracked sets (it does everything else the same).
    /// Not serialized (off when read back).
    #[serde(skip)]
    pub quiet: bool,
}

/// The builder's tracked sets, to tell whether a record changed them.
fn fingerprint(
    b: &SnapBuild,
) -> (
    SnapBuildState,
    TransactionId,
    TransactionId,
    TransactionId,
    usize,
    usize,
    Lsn,
) {
    (
        b.state,
        b.xmin,
        b.xmax,
        b.next_phase_at,
        b.committed_xip.len(),
        b.catchange_xip.len(),
        b.start_decoding_at,
    )
}

impl Replay {
    /// Starts a replay with AllocateSnapshotBuilder's parameters, decoding for a slot
    /// of database `slot_db`.
    pub fn new(p: &BuilderParams, slot_db: u32) -> Self {
        Replay {
            builder: SnapBuild::new(p),
            slot_db,
            two_phase: TwoPhaseDecoding::default(),
            fast_forward: false,
            last_running_xacts: None,
            spare_row: None,
            quiet: false,
        }
    }

    /// Carries this replay over to a decoder of the same slot whose start_decoding_at
    /// moved forward from `old` to `new` (its consumer confirmed further; everything else
    /// the same): true, with the builder's start_decoding_at where a replay begun with
    /// `new` would have it, when nothing the replay did depended on the start between
    /// them; false (nothing changed) otherwise, and the caller replays anew.
    ///
    /// What the start decides is DecodeTXNNeedSkip's answer for each transaction end read
    /// in `[old, new)`. For a commit or an abort it changes only the verdict: the reorder
    /// buffer lets go of the transaction either way. A PREPARE that a two-phase decoder
    /// did not skip leaves its transaction holding its subtransactions until COMMIT or
    /// ROLLBACK PREPARED: so false while a transaction prepared in `[old, new)` is held.
    pub fn move_start_decoding_at(&mut self, old: Lsn, new: Lsn) -> bool {
        if new < old || self.builder.reorder.prepared_between(old, new) {
            return false;
        }
        self.builder.start_decoding_at = self.builder.start_decoding_at.max(new);
        true
    }

    /// A copy of this replay (without the spare row box), for a replay that goes on
    /// from here as this one does (a replay that follows another's, `converged.rs`).
    pub fn duplicate(&self) -> Replay {
        Replay {
            builder: self.builder.clone(),
            slot_db: self.slot_db,
            two_phase: self.two_phase.clone(),
            fast_forward: self.fast_forward,
            last_running_xacts: self.last_running_xacts.clone(),
            spare_row: None,
            quiet: self.quiet,
        }
    }

    /// `row` in a box: the one given back last, if any.
    fn boxed(&mut self, row: TraceRow) -> Box<TraceRow> {
        match self.spare_row.take() {
            Some(mut b) => {
                *b = row;
                b
            }
            None => Box::new(row),
        }
    }

    /// Gives a row's box back once the row has been used, for the next row.
    pub fn give_back(&mut self, row: Box<TraceRow>) {
        self.spare_row = Some(row);
    }

    /// [`Replay::quiet_row`], boxed.
    pub fn quiet_row_boxed(&mut self, head: &RecordHead) -> Box<TraceRow> {
        let row = self.quiet_row(head);
        self.boxed(row)
    }

    /// Whether a change (heap, heap2, transactional message) reaches
    /// SnapBuildProcessChange: always, except in fast-forward mode up to 16.
    fn change_gives_base_snapshot(&self) -> bool {
        !self.fast_forward || self.builder.version.fast_forward_builds_base_snapshots()
    }

    /// A row describing the builder as it stands, at `lsn` (for the first trace row).
    pub fn builder_row_at(&self, lsn: Lsn) -> TraceRow {
        let head = RecordHead {
            lsn,
            end_lsn: lsn,
            xid: 0,
            top_xid: 0,
            rmid: 0,
            kind: RecordKind::Other,
            name: None,
        };
        self.row(&head, self.builder.state, None)
    }

    fn row(&self, head: &RecordHead, before: SnapBuildState, step: Option<Step>) -> TraceRow {
        let b = &self.builder;
        let mut row = TraceRow {
            lsn: head.lsn,
            end_lsn: head.end_lsn,
            record: head.name.unwrap_or(head.kind.name()),
            xid: transam::is_valid(head.xid).then_some(head.xid),
            branch: None,
            state_before: before,
            state: b.state,
            xmin: b.xmin,
            xmax: b.xmax,
            next_phase_at: b.next_phase_at,
            start_decoding_at: b.start_decoding_at,
            running_xids: None,
            wait_xids: None,
            level: None,
            message: None,
            detail: None,
            serialized: None,
            serialize_context: None,
            restored_from: None,
            commit: None,
            decode: None,
            candidate_xmin: None,
            candidate_restart: None,
            interesting: false,
            note: None,
        };
        if let Some(s) = step {
            row.branch = Some(s.branch.label());
            if let Some(m) = s.message {
                row.level = Some(m.level.as_str());
                row.message = Some(m.message.as_str().to_owned());
                row.detail = (!m.detail.is_empty()).then(|| m.detail.as_str().to_owned());
            }
            row.wait_xids = Some(s.wait_xids);
            row.serialized = s.serialized.map(Box::new);
            row.serialize_context = s.serialize_context;
            row.restored_from = s.restored_from;
            row.commit = s.commit;
            row.candidate_xmin = s.candidate_xmin;
            row.candidate_restart = s.candidate_restart;
            row.interesting = true;
        }
        row
    }

    /// Re-runs decode.c LogicalDecodingProcessRecord for one record and returns its row
    /// (with `interesting` set for the rows the default trace shows), or the ERROR the
    /// server would raise.
    pub fn feed(
        &mut self,
        head: &RecordHead,
        payload: &Payload,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<TraceRow, ReplayError> {
        let before = self.builder.state;
        Ok(
            match self.feed_lean(head, payload, restore).map_err(|e| *e)? {
                Some(row) => *row,
                None => self.row(head, before, None),
            },
        )
    }

    /// The row of a record [`Replay::feed_lean`] fed quietly (`Ok(None)`): the record and
    /// the builder as it stands, nothing else; what [`Replay::feed`] returns for it.
    pub fn quiet_row(&self, head: &RecordHead) -> TraceRow {
        self.row(head, self.builder.state, None)
    }

    /// [`Replay::feed_lean`] of a record of kind `Change` or `Other` from resource manager
    /// `rmid` with xid `xid` at `lsn` and no top-level xid (the first record of a
    /// subtransaction has one): such a record only makes its xid known to the reorder
    /// buffer (ReorderBufferProcessXid) and, a change, reaches SnapBuildProcessChange; it
    /// never makes a row. Panics in debug builds for any other kind.
    #[inline]
    pub fn feed_head_only(&mut self, kind: RecordKind, rmid: u8, xid: TransactionId, lsn: Lsn) {
        debug_assert!(matches!(kind, RecordKind::Change | RecordKind::Other));
        if rmid != RM_XACT_ID {
            self.builder.reorder.process_xid(xid, lsn);
        }
        if kind == RecordKind::Change && self.change_gives_base_snapshot() {
            self.builder.process_change(xid, lsn);
        }
    }

    /// [`Replay::feed`] for the hot loop: `Ok(None)` for a record that left nothing a row
    /// would show beyond the builder as it stands (no branch, verdict or tracked set
    /// changed; the row [`Replay::quiet_row`] builds), so that most records (heap, btree,
    /// full-page images) cost no row at all. Same effects on the replay as `feed`.
    ///
    /// With [`Replay::quiet`] set, commits and records that only changed the tracked sets
    /// give `Ok(None)` (the same effects on the replay, no row made).
    ///
    /// The row and the error come boxed, and are boxed where they are made: an enum moves
    /// whole whatever its variant, so an `Option<TraceRow>` (300-odd bytes) moved up
    /// through the record loop would be copied for every record, rows or not.
    pub fn feed_lean(
        &mut self,
        head: &RecordHead,
        payload: &Payload,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<Option<Box<TraceRow>>, Box<ReplayError>> {
        // Most records: a heap change or a record only its xid matters of. Neither can
        // change what the fingerprint below looks at, nor make a row.
        if matches!(head.kind, RecordKind::Change | RecordKind::Other)
            && !transam::is_valid(head.top_xid)
        {
            self.feed_head_only(head.kind, head.rmid, head.xid, head.lsn);
            return Ok(None);
        }
        let before = self.builder.state;
        let fp = fingerprint(&self.builder);
        if transam::is_valid(head.top_xid) {
            self.builder
                .reorder
                .assign_child(head.top_xid, head.xid, head.lsn);
        }
        // Every rmgr's decode routine (or the generic path for rmgrs without one) makes
        // the record's xid known, except xact_decode, which does so only for PREPARE.
        if head.rmid != RM_XACT_ID {
            self.builder.reorder.process_xid(head.xid, head.lsn);
        }
        let fail = |s: &Self, step: Step, error: OnDiskError| {
            Box::new(ReplayError {
                row: s.row(head, before, Some(step)),
                error,
            })
        };
        let mut row = match (head.kind, payload) {
            (RecordKind::RunningXacts, Payload::RunningXacts(running)) => {
                match self
                    .builder
                    .process_running_xacts(head.lsn, running, restore)
                {
                    Ok(step) => {
                        let row = self.row(head, before, Some(step));
                        let mut row = self.boxed(row);
                        row.running_xids = Some(running.xids.clone());
                        self.last_running_xacts = Some((head.lsn, head.end_lsn, running.clone()));
                        Some(row)
                    }
                    Err((step, e)) => return Err(fail(self, step, e)),
                }
            }
            (RecordKind::CheckpointShutdown | RecordKind::EndOfRecovery, _) => {
                match self.builder.serialization_point(head.lsn, restore) {
                    Ok(step) => {
                        let row = self.row(head, before, Some(step));
                        Some(self.boxed(row))
                    }
                    Err((step, e)) => return Err(fail(self, step, e)),
                }
            }
            (
                RecordKind::Commit | RecordKind::CommitPrepared,
                Payload::Commit {
                    xid: x,
                    subxacts,
                    has_invals,
                    db_id,
                    gid,
                },
            ) => {
                let two_phase =
                    head.kind == RecordKind::CommitPrepared && !self.two_phase.filter_prepare(gid);
                let (v, d) = self.builder.decode_commit(
                    head.lsn,
                    *x,
                    subxacts,
                    *has_invals,
                    *db_id,
                    self.slot_db,
                    two_phase,
                );
                if self.quiet {
                    return Ok(None);
                }
                let row = self.row(head, before, None);
                let mut row = self.boxed(row);
                row.branch = Some(Branch::Commit.label());
                row.xid = Some(*x);
                if *has_invals
                    && before == SnapBuildState::FullSnapshot
                    && v == CommitVerdict::NotCatalogChanging
                {
                    row.note = Some(NOTE_CATALOG_CHANGE_BEFORE_FULL.to_owned());
                }
                if let CommitVerdict::Timetravel {
                    catalog_subxacts, ..
                } = &v
                {
                    if !catalog_subxacts.is_empty() {
                        row.level = Some(Level::Debug1.as_str());
                        row.message = Some(subtransaction_messages(*x, catalog_subxacts));
                    }
                }
                row.commit = Some(v);
                row.decode = Some(d);
                row.interesting = d != DecodeVerdict::NotSeenBeforeFull;
                Some(row)
            }
            (
                RecordKind::Abort | RecordKind::AbortPrepared,
                Payload::Abort {
                    xid: x,
                    subxacts,
                    db_id,
                    gid,
                },
            ) => {
                let two_phase =
                    head.kind == RecordKind::AbortPrepared && !self.two_phase.filter_prepare(gid);
                let d = if two_phase {
                    self.builder
                        .decode_abort_prepared(head.lsn, *x, subxacts, *db_id, self.slot_db)
                } else {
                    self.builder.abort_at(*x, subxacts, head.lsn);
                    None
                };
                d.map(|d| {
                    let row = self.row(head, before, None);
                    let mut row = self.boxed(row);
                    row.xid = Some(*x);
                    row.decode = Some(d);
                    row.interesting = true;
                    row
                })
            }
            (
                RecordKind::Prepare,
                Payload::Prepare {
                    xid: x,
                    subxacts,
                    db_id,
                    gid,
                },
            ) => {
                let d = if self.builder.state < SnapBuildState::FullSnapshot {
                    None
                } else if self.two_phase.filter_prepare(gid) {
                    // Decoded as a plain transaction at COMMIT PREPARED; the PREPARE
                    // only makes the xid known.
                    self.builder.reorder.process_xid(*x, head.lsn);
                    self.two_phase
                        .enabled
                        .then_some(DecodeVerdict::PrepareFiltered)
                } else {
                    self.builder
                        .decode_prepare(head.lsn, *x, subxacts, *db_id, self.slot_db)
                };
                d.map(|d| {
                    let row = self.row(head, before, None);
                    let mut row = self.boxed(row);
                    row.xid = Some(*x);
                    row.decode = Some(d);
                    row.interesting = true;
                    row
                })
            }
            (RecordKind::Prepare, _) => {
                if self.builder.state >= SnapBuildState::FullSnapshot {
                    self.builder.reorder.process_xid(head.xid, head.lsn);
                }
                None
            }
            (RecordKind::NewCid, Payload::NewCid(_)) if self.fast_forward => {
                // heap2_decode skips NEW_CID in fast-forward mode
                None
            }
            (RecordKind::NewCid, Payload::NewCid(rec)) => {
                self.builder.process_new_cid(head.xid, head.lsn, rec);
                None
            }
            (RecordKind::NewCid | RecordKind::Invalidations, _) => {
                self.builder.mark_catalog_changes(head.xid, head.lsn);
                None
            }
            (RecordKind::Change, _) => {
                if self.change_gives_base_snapshot() {
                    self.builder.process_change(head.xid, head.lsn);
                }
                None
            }
            // decode.c logicalmsg_decode: the xid is known (above); before FULL_SNAPSHOT,
            // or for a message of another database, nothing else happens. Only then does
            // a transactional message give its transaction a base snapshot.
            (
                RecordKind::LogicalMessage,
                Payload::Message {
                    transactional: true,
                    db_id,
                },
            ) => {
                if *db_id == self.slot_db && self.change_gives_base_snapshot() {
                    self.builder.process_change(head.xid, head.lsn);
                }
                None
            }
            _ => None,
        };
        if fingerprint(&self.builder) != fp && !(self.quiet && row.is_none()) {
            if row.is_none() {
                let r = self.row(head, before, None);
                row = Some(self.boxed(r));
            }
            if let Some(r) = row.as_mut() {
                r.interesting = true;
            }
        }
        if let Some(row) = row.as_mut() {
            // DecodingContextFindStartpoint stops reading once the builder is CONSISTENT:
            // a record reached after that is not part of the creation any more (the
            // slot's first decoder, with its writer, meets it).
            if self.builder.in_slot_creation
                && before < SnapBuildState::Consistent
                && row.decode.is_some_and(|d| d.decoded())
            {
                row.note = Some(NOTE_CALLBACK_DURING_CREATION.to_owned());
            }
        }
        Ok(row)
    }
}

/// What decode.c did with a commit, an abort or a PREPARE of a prepared transaction, and
/// so which output plugin callbacks ran ([`DecodeVerdict::sends`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DecodeVerdict {
    /// xact_decode bails out before FULL_SNAPSHOT.
    NotSeenBeforeFull,
    /// DecodeTXNNeedSkip: the record lies before start_decoding_at.
    SkippedBeforeStartDecodingAt,
    /// DecodeTXNNeedSkip: the transaction belongs to another database.
    SkippedOtherDatabase,
    /// ReorderBufferCommit / ReorderBufferRememberPrepareInfo /
    /// ReorderBufferFinishPrepared: the reorder buffer never saw the transaction.
    UnknownTransaction,
    /// ReorderBufferReplay: no base snapshot, no change decoded — nothing to send.
    NoChanges,
    /// Sent to the output plugin (BEGIN … COMMIT).
    Decoded,
    /// Two-phase decoding, PREPARE: the plugin's filter_prepare callback filtered the gid;
    /// the transaction is sent as a plain one at COMMIT PREPARED.
    PrepareFiltered,
    /// Two-phase decoding, PREPARE before the builder is CONSISTENT
    /// (ReorderBufferSkipPrepare): sent whole at COMMIT PREPARED if that comes after
    /// `two_phase_at`.
    PrepareSkippedNotConsistent,
    /// Two-phase decoding, PREPARE replayed: BEGIN PREPARE … PREPARE TRANSACTION.
    Prepared,
    /// Two-phase decoding, COMMIT PREPARED of a transaction whose PREPARE was decoded:
    /// ReorderBufferFinishPrepared sends COMMIT PREPARED. (A transaction without changes
    /// gets it only on some releases, see [`PgVersion::finishes_prepared_without_changes`].)
    ///
    /// [`PgVersion::finishes_prepared_without_changes`]: crate::include::version::PgVersion::finishes_prepared_without_changes
    CommitPrepared,
    /// Two-phase decoding, COMMIT PREPARED of a transaction prepared before `two_phase_at`:
    /// ReorderBufferFinishPrepared replays it as a prepared transaction first
    /// (BEGIN PREPARE … PREPARE TRANSACTION), then sends COMMIT PREPARED.
    PreparedAndCommitPrepared,
    /// Two-phase decoding, ROLLBACK PREPARED of a known transaction.
    RollbackPrepared,
}

impl DecodeVerdict {
    /// Short text for the SQL `verdict` column.
    pub fn label(self) -> &'static str {
        match self {
            DecodeVerdict::NotSeenBeforeFull => "skipped: before FULL_SNAPSHOT",
            DecodeVerdict::SkippedBeforeStartDecodingAt => "skipped: before start_decoding_at",
            DecodeVerdict::SkippedOtherDatabase => "skipped: other database",
            DecodeVerdict::UnknownTransaction => "skipped: unknown transaction",
            DecodeVerdict::NoChanges => "skipped: no decoded changes",
            DecodeVerdict::Decoded => "decoded",
            DecodeVerdict::PrepareFiltered => "prepare filtered: decoded at COMMIT PREPARED",
            DecodeVerdict::PrepareSkippedNotConsistent => "prepare skipped: not yet consistent",
            DecodeVerdict::Prepared => "prepared",
            DecodeVerdict::CommitPrepared => "commit prepared",
            DecodeVerdict::PreparedAndCommitPrepared => "prepared and commit prepared",
            DecodeVerdict::RollbackPrepared => "rollback prepared",
        }
    }

    /// The transaction-ending callbacks of the output plugin this record ran, in order:
    /// `commit`, `prepare`, `commit_prepared`, `rollback_prepared` (the names of
    /// OutputPluginCallbacks' `*_cb` members without `_cb`).
    pub fn sends(self) -> &'static [&'static str] {
        match self {
            DecodeVerdict::Decoded => &["commit"],
            DecodeVerdict::Prepared => &["prepare"],
            DecodeVerdict::CommitPrepared => &["commit_prepared"],
            DecodeVerdict::PreparedAndCommitPrepared => &["prepare", "commit_prepared"],
            DecodeVerdict::RollbackPrepared => &["rollback_prepared"],
            _ => &[],
        }
    }

    /// Whether the output plugin was called for the transaction at this record.
    pub fn decoded(self) -> bool {
        !self.sends().is_empty()
    }
}

/// decode.c's transaction-ending paths (xact_decode's COMMIT, PREPARE, ABORT cases), as
/// methods of the builder they drive: decode.c reaches the builder and the reorder buffer
/// through the decoding context, here through the builder and its `reorder`.
impl SnapBuild {
    /// Re-runs decode.c xact_decode + DecodeCommit + snapbuild.c SnapBuildCommitTxn for a
    /// commit (record at `lsn`) of `xid` with `subxacts`; `has_invals` is
    /// `XACT_XINFO_HAS_INVALS`; `db_id` the commit's database (0 if the record has none)
    /// and `slot_db` the decoding slot's. A COMMIT PREPARED a two-phase decoder did not
    /// filter goes through [`SnapBuild::decode_commit`] with `two_phase` instead.
    pub fn commit(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        has_invals: bool,
        db_id: u32,
        slot_db: u32,
    ) -> (CommitVerdict, DecodeVerdict) {
        self.decode_commit(lsn, x, subxacts, has_invals, db_id, slot_db, false)
    }

    /// Re-runs decode.c DecodeTXNNeedSkip for a transaction-ending record at `lsn`.
    fn decode_txn_need_skip(&self, lsn: Lsn, db_id: u32, slot_db: u32) -> Option<DecodeVerdict> {
        if lsn < self.start_decoding_at {
            Some(DecodeVerdict::SkippedBeforeStartDecodingAt)
        } else if db_id != 0 && db_id != slot_db {
            Some(DecodeVerdict::SkippedOtherDatabase)
        } else {
            None
        }
    }

    /// Re-runs decode.c DecodeCommit: SnapBuildCommitTxn, DecodeTXNNeedSkip, then
    /// ReorderBufferCommit, or with `two_phase` (COMMIT PREPARED, two-phase decoding on,
    /// gid not filtered) reorderbuffer.c ReorderBufferFinishPrepared against the builder's
    /// `two_phase_at`.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_commit(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        has_invals: bool,
        db_id: u32,
        slot_db: u32,
        two_phase: bool,
    ) -> (CommitVerdict, DecodeVerdict) {
        if self.state < SnapBuildState::FullSnapshot {
            // xact_decode bails out before the builder sees it; the transaction stays in
            // the reorder buffer until ReorderBufferAbortOld.
            return (
                CommitVerdict::NotSeenBeforeFull,
                DecodeVerdict::NotSeenBeforeFull,
            );
        }
        if has_invals && self.version.remembers_initial_running_xacts() {
            self.xid_set_catalog_changes(x, subxacts, lsn);
        }
        let v = self.commit_txn(lsn, x, subxacts, has_invals);
        // DecodeTXNNeedSkip, then ReorderBufferCommitChild and ReorderBufferCommit /
        // ReorderBufferFinishPrepared.
        let d = if let Some(skip) = self.decode_txn_need_skip(lsn, db_id, slot_db) {
            skip
        } else {
            for s in subxacts {
                if self.reorder.knows(*s) {
                    self.reorder.assign_child(x, *s, lsn);
                }
            }
            if !self.reorder.knows(x) {
                DecodeVerdict::UnknownTransaction
            } else if two_phase {
                if !self.reorder.has_base_snapshot(x) {
                    // Nothing was (or is now) replayed for it.
                    if self.version.finishes_prepared_without_changes() {
                        DecodeVerdict::CommitPrepared
                    } else {
                        DecodeVerdict::NoChanges
                    }
                } else if self.reorder.prepare_lsn(x) < self.two_phase_at {
                    // Prepared before two_phase_at (or its PREPARE never read by a
                    // two-phase decoder): replayed now as a prepared transaction.
                    DecodeVerdict::PreparedAndCommitPrepared
                } else {
                    DecodeVerdict::CommitPrepared
                }
            } else if !self.reorder.has_base_snapshot(x) {
                DecodeVerdict::NoChanges
            } else {
                DecodeVerdict::Decoded
            }
        };
        self.reorder
            .remember_finished(x, subxacts, TxnStatus::Committed(lsn));
        for s in subxacts {
            self.reorder.cleanup(*s);
        }
        self.reorder.cleanup(x);
        (v, d)
    }

    /// Re-runs decode.c DecodePrepare for the PREPARE (record at `lsn`) of `x` with
    /// `subxacts`, when two-phase decoding is on and the gid is not filtered (FilterPrepare
    /// false): ReorderBufferRememberPrepareInfo, then skipped before CONSISTENT or by
    /// DecodeTXNNeedSkip (ReorderBufferSkipPrepare), else ReorderBufferPrepare. `None`
    /// before FULL_SNAPSHOT (xact_decode bails out).
    pub fn decode_prepare(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        db_id: u32,
        slot_db: u32,
    ) -> Option<DecodeVerdict> {
        if self.state < SnapBuildState::FullSnapshot {
            return None;
        }
        if !self.reorder.remember_prepare_info(x, lsn) {
            return Some(DecodeVerdict::UnknownTransaction);
        }
        if self.state < SnapBuildState::Consistent {
            return Some(DecodeVerdict::PrepareSkippedNotConsistent);
        }
        if let Some(skip) = self.decode_txn_need_skip(lsn, db_id, slot_db) {
            return Some(skip);
        }
        for s in subxacts {
            if self.reorder.knows(*s) {
                self.reorder.assign_child(x, *s, lsn);
            }
        }
        Some(
            if self.reorder.has_base_snapshot(x) || self.version.prepares_without_changes() {
                DecodeVerdict::Prepared
            } else {
                DecodeVerdict::NoChanges
            },
        )
    }

    /// Re-runs decode.c DecodeAbort with `two_phase` set (ROLLBACK PREPARED, two-phase
    /// decoding on, gid not filtered): unless DecodeTXNNeedSkip,
    /// ReorderBufferFinishPrepared sends ROLLBACK PREPARED for a known transaction (with
    /// changes, except on the releases of [`PgVersion::finishes_prepared_without_changes`]);
    /// either way the reorder buffer lets go of it. `None` before
    /// FULL_SNAPSHOT.
    pub fn decode_abort_prepared(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        db_id: u32,
        slot_db: u32,
    ) -> Option<DecodeVerdict> {
        if self.state < SnapBuildState::FullSnapshot {
            return None;
        }
        let d = match self.decode_txn_need_skip(lsn, db_id, slot_db) {
            Some(skip) => skip,
            None if !self.reorder.knows(x) => DecodeVerdict::UnknownTransaction,
            None if self.reorder.has_base_snapshot(x)
                || self.version.finishes_prepared_without_changes() =>
            {
                DecodeVerdict::RollbackPrepared
            }
            None => DecodeVerdict::NoChanges,
        };
        self.abort_at(x, subxacts, lsn);
        Some(d)
    }

    /// Re-runs decode.c DecodeAbort: the reorder buffer forgets `xid` and `subxacts` (the
    /// builder itself is not told; xact_decode bails before FULL_SNAPSHOT).
    pub fn abort(&mut self, x: TransactionId, subxacts: &[TransactionId]) {
        self.abort_at(x, subxacts, INVALID_LSN)
    }

    /// [`SnapBuild::abort`] for an abort record at `lsn` (remembered as the status of a
    /// top-level transaction).
    pub fn abort_at(&mut self, x: TransactionId, subxacts: &[TransactionId], lsn: Lsn) {
        if self.state < SnapBuildState::FullSnapshot {
            return;
        }
        self.reorder
            .remember_finished(x, subxacts, TxnStatus::Aborted(lsn));
        for s in subxacts {
            self.reorder.cleanup(*s);
        }
        self.reorder.cleanup(x);
    }
}

impl Replay {
    /// [`historic_view`] with everything taken from where the replay stands now: the
    /// builder's snapshot, and the decoding transaction `xid` as the reorder buffer holds
    /// (or last held) it. `Err(state)` before FULL_SNAPSHOT: there is no historic
    /// snapshot yet.
    pub fn historic_view(
        &self,
        xid: Option<TransactionId>,
    ) -> Result<HistoricView, SnapBuildState> {
        let base = self.builder.historic_snapshot()?;
        let d = xid
            .filter(|x| transam::is_valid(*x))
            .map(|x| self.builder.reorder.decoding_txn(x));
        Ok(historic_view(base, d, Lsn(u64::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::version::PgVersion;

    #[test]
    fn classification() {
        assert_eq!(
            RecordKind::classify(RM_STANDBY_ID, 0x10),
            RecordKind::RunningXacts
        );
        assert_eq!(RecordKind::classify(RM_STANDBY_ID, 0x00), RecordKind::Other); // STANDBY_LOCK
        assert_eq!(
            RecordKind::classify(RM_XLOG_ID, 0x00),
            RecordKind::CheckpointShutdown
        );
        assert_eq!(RecordKind::classify(RM_XLOG_ID, 0x10), RecordKind::Other); // ONLINE
        assert_eq!(RecordKind::classify(RM_XACT_ID, 0x80), RecordKind::Commit); // HAS_INFO bit
        assert_eq!(RecordKind::classify(RM_XACT_ID, 0x20), RecordKind::Abort);
        assert_eq!(RecordKind::classify(RM_HEAP2_ID, 0x70), RecordKind::NewCid);
        assert_eq!(RecordKind::classify(RM_HEAP2_ID, 0x00), RecordKind::Other);
        assert_eq!(RecordKind::classify(RM_HEAP2_ID, 0x50), RecordKind::Change);
        assert_eq!(RecordKind::classify(RM_HEAP_ID, 0x80), RecordKind::Change); // INIT_PAGE insert
        assert_eq!(RecordKind::classify(RM_HEAP_ID, 0x60), RecordKind::Other); // LOCK
        assert_eq!(RecordKind::classify(RM_HEAP_ID, 0x70), RecordKind::Other); // INPLACE
    }

    fn params(major: u32, in_slot_creation: bool, two_phase_at: u64) -> BuilderParams {
        BuilderParams {
            version: PgVersion::newest(major),
            initial_xmin_horizon: 0,
            start_decoding_at: Lsn(0),
            building_full_snapshot: false,
            in_slot_creation,
            two_phase_at: Lsn(two_phase_at),
        }
    }

    /// A record 8 bytes long of `kind` with the rmgr decode.c dispatches it by.
    fn record(
        lsn: u64,
        kind: RecordKind,
        xid: TransactionId,
        top_xid: TransactionId,
    ) -> RecordHead {
        RecordHead {
            lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
            xid,
            top_xid,
            rmid: match kind {
                RecordKind::RunningXacts => crate::include::rmgrlist::RM_STANDBY_ID,
                RecordKind::NewCid => crate::include::rmgrlist::RM_HEAP2_ID,
                RecordKind::Change | RecordKind::Other => crate::include::rmgrlist::RM_HEAP_ID,
                RecordKind::CheckpointShutdown => crate::include::rmgrlist::RM_XLOG_ID,
                _ => RM_XACT_ID,
            },
            kind,
            name: None,
        }
    }

    fn head(lsn: u64, kind: RecordKind, xid: TransactionId) -> RecordHead {
        record(lsn, kind, xid, 0)
    }

    fn commit_payload(x: TransactionId, db_id: u32, has_invals: bool, gid: &str) -> Payload {
        Payload::Commit {
            xid: x,
            subxacts: vec![],
            has_invals,
            db_id,
            gid: gid.into(),
        }
    }

    /// A decoder restarted (branch b) at a RUNNING_XACTS listing `running` as running,
    /// from a consistent file with xmin 900, xmax 901.
    fn restarted(major: u32, running: &[TransactionId]) -> Replay {
        let mut file_builder = SnapBuild::new(&params(major, false, 0));
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        file_builder
            .process_running_xacts(Lsn(1), &RunningXacts::new(900, 900, &[]), &mut none)
            .unwrap();
        file_builder.xmax = 901;
        let file = file_builder.serialize(Lsn(0x500));
        let mut r = Replay::new(&params(major, false, 0), 5);
        let mut with_file = |_: Lsn| -> RestoreResult { Ok(Some(file.clone())) };
        let rx = RunningXacts::new(running[0], 990, running);
        r.feed(
            &head(0x500, RecordKind::RunningXacts, 0),
            &Payload::RunningXacts(rx),
            &mut with_file,
        )
        .unwrap();
        assert_eq!(r.builder.state, SnapBuildState::Consistent);
        r
    }

    /// A decoder restarted from a file with x (and its subtransaction s, whose first
    /// change lies before the restart point) running; s changes again (known as
    /// top-level), x is prepared at 0x620. A two-phase decoder that started decoding at
    /// 0 assigns s to x at the PREPARE; one that starts at 0x700 skips the PREPARE and
    /// leaves s apart. A replay begun with the first start cannot be carried over to the
    /// second while x stays prepared; it can once x is finished, or without a PREPARE in
    /// between.
    #[test]
    fn a_replay_is_not_carried_past_a_prepare_it_decoded() {
        let (x, s) = (950, 951);
        let prepare = Payload::Prepare {
            xid: x,
            subxacts: vec![s],
            db_id: 5,
            gid: "g".into(),
        };
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        for major in [14, 16, 18] {
            let run = |start: u64| {
                let mut r = restarted(major, &[x, s]);
                r.builder.start_decoding_at = Lsn(start);
                r.two_phase = TwoPhaseDecoding {
                    enabled: true,
                    filter_gid_containing: None,
                };
                r
            };
            let (mut kept, mut fresh) = (run(0), run(0x700));
            for r in [&mut kept, &mut fresh] {
                r.feed(
                    &record(0x600, RecordKind::Change, s, 0),
                    &Payload::None,
                    &mut none,
                )
                .unwrap();
                r.feed(
                    &record(0x610, RecordKind::Change, x, 0),
                    &Payload::None,
                    &mut none,
                )
                .unwrap();
                r.feed(&head(0x620, RecordKind::Prepare, x), &prepare, &mut none)
                    .unwrap();
            }
            // The PREPARE left their reorder buffers apart (beyond their starts).
            let reorder = |r: &Replay| serde_json::to_value(&r.builder.reorder).ok();
            assert_ne!(reorder(&kept), reorder(&fresh), "PG {major}");
            let mut carried = kept.duplicate();
            assert!(
                !carried.move_start_decoding_at(Lsn(0), Lsn(0x700)),
                "PG {major}"
            );
            // Past the prepare's start it makes no difference.
            assert!(
                carried.move_start_decoding_at(Lsn(0x621), Lsn(0x700)),
                "PG {major}"
            );
        }
    }

    /// 14 and 15: a transaction running at the restart point whose subxid cache
    /// overflowed (RUNNING_XACTS lists only its top-level xid) commits with invalidations:
    /// SnapBuildXidSetCatalogChanges flags the top level and every subxact of the commit
    /// record, so all of them become committed catalog changers and xmax passes the last
    /// subxid (seen on 14.22 and 15.19: 71 committed xids for 70 subtransactions). An
    /// earlier flag on the top level (a DDL decoded after the restart) skips that.
    #[test]
    fn initial_running_xacts_flag_every_listed_subxact_on_14_and_15() {
        let top = 950;
        let subs: Vec<TransactionId> = (951..=1020).collect();
        let commit = Payload::Commit {
            xid: top,
            subxacts: subs.clone(),
            has_invals: true,
            db_id: 5,
            gid: String::new(),
        };
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        for major in [14, 15] {
            let mut r = restarted(major, &[top]);
            r.feed(&head(0x600, RecordKind::Commit, top), &commit, &mut none)
                .unwrap();
            let mut committed = r.builder.committed_xip.clone();
            committed.sort_unstable();
            let mut want = subs.clone();
            want.push(top);
            want.sort_unstable();
            assert_eq!(committed, want, "PG {major}");
            assert_eq!(r.builder.xmax, 1021, "PG {major}");

            // Already flagged (its DDL after the restart point was decoded): only the
            // top level counts.
            let mut r = restarted(major, &[top]);
            r.builder.reorder.set_catalog_changes(top, Lsn(0x580));
            r.feed(&head(0x600, RecordKind::Commit, top), &commit, &mut none)
                .unwrap();
            assert_eq!(r.builder.committed_xip, vec![top], "PG {major}");
            assert_eq!(r.builder.xmax, top + 1, "PG {major}");
        }
        // Not listed at the restart point: nothing is flagged.
        let mut r = restarted(15, &[940]);
        r.feed(&head(0x600, RecordKind::Commit, top), &commit, &mut none)
            .unwrap();
        assert!(r.builder.committed_xip.is_empty());
    }

    /// decode.c logicalmsg_decode returns for a message of another database before
    /// SnapBuildProcessChange: no base snapshot for its transaction (so nothing holds the
    /// slot's catalog_xmin back); one of the slot's own database gets one.
    #[test]
    fn transactional_message_of_another_database_gets_no_base_snapshot() {
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        let mut r = restarted(18, &[899]);
        let msg = |db_id| Payload::Message {
            transactional: true,
            db_id,
        };
        let mut h = head(0x600, RecordKind::LogicalMessage, 960);
        h.rmid = crate::include::rmgrlist::RM_LOGICALMSG_ID;
        r.feed(&h, &msg(6), &mut none).unwrap();
        assert!(r.builder.reorder.knows(960));
        assert!(!r.builder.reorder.has_base_snapshot(960));
        assert_eq!(r.builder.reorder.oldest_xmin(), None);
        let mut h = head(0x700, RecordKind::LogicalMessage, 961);
        h.rmid = crate::include::rmgrlist::RM_LOGICALMSG_ID;
        r.feed(&h, &msg(5), &mut none).unwrap();
        assert!(r.builder.reorder.has_base_snapshot(961));
    }

    /// A fast-forward decoder (pg_replication_slot_advance): up to 16 a change gives its
    /// transaction no base snapshot, from 17 it does; NEW_CID is skipped on every major.
    #[test]
    fn fast_forward_base_snapshots_by_major() {
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        for (major, base) in [(16, false), (17, true), (18, true)] {
            let mut r = restarted(major, &[899]);
            r.fast_forward = true;
            let mut h = head(0x600, RecordKind::Change, 960);
            h.rmid = crate::include::rmgrlist::RM_HEAP_ID;
            r.feed(&h, &Payload::None, &mut none).unwrap();
            assert!(r.builder.reorder.knows(960), "PG {major}");
            assert_eq!(r.builder.reorder.has_base_snapshot(960), base, "PG {major}");
            let msg = Payload::Message {
                transactional: true,
                db_id: 5,
            };
            let mut h = head(0x700, RecordKind::LogicalMessage, 961);
            h.rmid = crate::include::rmgrlist::RM_LOGICALMSG_ID;
            r.feed(&h, &msg, &mut none).unwrap();
            assert_eq!(r.builder.reorder.has_base_snapshot(961), base, "PG {major}");
        }
    }

    /// decode.c's two-phase paths (DecodePrepare, FilterPrepare, ReorderBufferFinishPrepared)
    /// on a consistent builder whose slot has two_phase, `two_phase_at` = 150.
    #[test]
    fn two_phase_decoding() {
        for major in [14, 18] {
            let p = params(major, false, 150);
            let mut r = Replay::new(&p, 5);
            r.two_phase = TwoPhaseDecoding::for_slot(true, "test_decoding");
            let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
            let rx = RunningXacts::new(600, 600, &[]);
            r.feed(
                &head(100, RecordKind::RunningXacts, 0),
                &Payload::RunningXacts(rx),
                &mut none,
            )
            .unwrap();
            assert_eq!(r.builder.state, SnapBuildState::Consistent);
            let prepare = |x, gid: &str| Payload::Prepare {
                xid: x,
                subxacts: vec![],
                db_id: 5,
                gid: gid.into(),
            };
            let commit = |x, gid: &str| commit_payload(x, 5, false, gid);
            let abort = |x, gid: &str| Payload::Abort {
                xid: x,
                subxacts: vec![],
                db_id: 5,
                gid: gid.into(),
            };
            let mut feed = |lsn, kind, x, payload: &Payload| {
                r.feed(&head(lsn, kind, x), payload, &mut none)
                    .unwrap()
                    .decode
            };
            use DecodeVerdict as D;
            use RecordKind as K;
            // 600 changed a row before two_phase_at and prepared before it too: the
            // PREPARE is decoded then (the builder is consistent), and again sent whole
            // at COMMIT PREPARED because its PREPARE lies before two_phase_at.
            feed(110, K::Change, 600, &Payload::None);
            assert_eq!(
                feed(120, K::Prepare, 600, &prepare(600, "a")),
                Some(D::Prepared)
            );
            // 601: changes, PREPARE after two_phase_at: prepared, then commit prepared.
            feed(200, K::Change, 601, &Payload::None);
            assert_eq!(
                feed(210, K::Prepare, 601, &prepare(601, "b")),
                Some(D::Prepared)
            );
            // 602: filtered by test_decoding's gid rule: a plain commit later.
            feed(220, K::Change, 602, &Payload::None);
            assert_eq!(
                feed(230, K::Prepare, 602, &prepare(602, "c_nodecode")),
                Some(D::PrepareFiltered)
            );
            // 603 only locked a row (known, no base snapshot); 604 is unknown.
            feed(240, K::Other, 603, &Payload::None);
            assert_eq!(
                feed(250, K::Prepare, 603, &prepare(603, "d")),
                Some(D::NoChanges)
            );
            assert_eq!(
                feed(260, K::Prepare, 604, &prepare(604, "e")),
                Some(D::UnknownTransaction)
            );
            feed(270, K::Change, 605, &Payload::None);
            assert_eq!(
                feed(280, K::Prepare, 605, &prepare(605, "f")),
                Some(D::Prepared)
            );
            assert_eq!(
                feed(300, K::CommitPrepared, 600, &commit(600, "a")),
                Some(D::PreparedAndCommitPrepared)
            );
            assert_eq!(
                feed(310, K::CommitPrepared, 601, &commit(601, "b")),
                Some(D::CommitPrepared)
            );
            assert_eq!(
                feed(320, K::CommitPrepared, 602, &commit(602, "c_nodecode")),
                Some(D::Decoded)
            );
            let lock_only = if major == 14 {
                D::CommitPrepared
            } else {
                D::NoChanges
            };
            assert_eq!(
                feed(330, K::CommitPrepared, 603, &commit(603, "d")),
                Some(lock_only)
            );
            assert_eq!(
                feed(340, K::CommitPrepared, 604, &commit(604, "e")),
                Some(D::UnknownTransaction)
            );
            assert_eq!(
                feed(350, K::AbortPrepared, 605, &abort(605, "f")),
                Some(D::RollbackPrepared)
            );
            assert_eq!(
                D::PreparedAndCommitPrepared.sends(),
                ["prepare", "commit_prepared"]
            );
            assert!(!D::PrepareFiltered.decoded());
        }
        // Without two_phase on the slot every gid is filtered: PREPARE has no verdict
        // and COMMIT PREPARED is a plain commit.
        let off = TwoPhaseDecoding::for_slot(false, "test_decoding");
        assert!(off.filter_prepare("x"));
        assert_eq!(off.filter_gid_containing, None);
        let pgoutput = TwoPhaseDecoding::for_slot(true, "pgoutput");
        assert!(!pgoutput.filter_prepare("x_nodecode"));
    }

    /// A creation ends at CONSISTENT (DecodingContextFindStartpoint): a commit decoded
    /// after that is sent by the slot's first decoder, not during the creation, so it
    /// carries no "output plugin called during slot creation" note; a ROLLBACK PREPARED
    /// decoded while the builder is still FULL_SNAPSHOT does.
    #[test]
    fn creation_note_only_before_consistent() {
        for major in [14, 18] {
            let mut r = Replay::new(&params(major, true, 0), 5);
            let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
            r.feed(
                &head(100, RecordKind::RunningXacts, 0),
                &Payload::RunningXacts(RunningXacts::new(600, 600, &[])),
                &mut none,
            )
            .unwrap();
            assert_eq!(r.builder.state, SnapBuildState::Consistent);
            r.feed(
                &head(110, RecordKind::Change, 600),
                &Payload::None,
                &mut none,
            )
            .unwrap();
            let row = r
                .feed(
                    &head(120, RecordKind::Commit, 600),
                    &commit_payload(600, 5, false, ""),
                    &mut none,
                )
                .unwrap();
            assert_eq!(row.decode, Some(DecodeVerdict::Decoded));
            assert_eq!(row.state_before, SnapBuildState::Consistent);
            assert_eq!(row.note, None, "{major}: {row:?}");
        }
    }

    #[test]
    fn feed_runs_the_dispatch() {
        let p = params(18, true, 0);
        let mut r = Replay::new(&p, 5);
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        let commit = |x, db| commit_payload(x, db, true, "");
        let rx = RunningXacts::new(600, 600, &[]);
        let row = r
            .feed(
                &head(100, RecordKind::RunningXacts, 0),
                &Payload::RunningXacts(rx),
                &mut none,
            )
            .unwrap();
        assert_eq!(row.branch, Some("a"));
        assert_eq!(row.state, SnapBuildState::Consistent);
        // A catalog change with a row change, and its commit: timetravel and decoded.
        r.feed(
            &head(200, RecordKind::NewCid, 600),
            &Payload::None,
            &mut none,
        )
        .unwrap();
        r.feed(
            &head(210, RecordKind::Change, 600),
            &Payload::None,
            &mut none,
        )
        .unwrap();
        let row = r
            .feed(
                &head(300, RecordKind::Commit, 600),
                &commit(600, 5),
                &mut none,
            )
            .unwrap();
        assert_eq!(row.xmax, 601);
        assert_eq!(row.decode, Some(DecodeVerdict::Decoded));
        // No change: nothing to send. Another database: skipped.
        let row = r
            .feed(
                &head(310, RecordKind::Commit, 601),
                &commit(601, 5),
                &mut none,
            )
            .unwrap();
        assert_eq!(row.decode, Some(DecodeVerdict::UnknownTransaction));
        r.feed(
            &head(320, RecordKind::Change, 602),
            &Payload::None,
            &mut none,
        )
        .unwrap();
        let row = r
            .feed(
                &head(330, RecordKind::Commit, 602),
                &commit(602, 7),
                &mut none,
            )
            .unwrap();
        assert_eq!(row.decode, Some(DecodeVerdict::SkippedOtherDatabase));
        // A shutdown checkpoint serializes.
        let row = r
            .feed(
                &head(400, RecordKind::CheckpointShutdown, 0),
                &Payload::None,
                &mut none,
            )
            .unwrap();
        let f = row.serialized.unwrap();
        assert_eq!(f.committed_xip, vec![600]);
    }

    /// NEW_CID records through the dispatch: the decoding transaction's snapshot copy,
    /// curcid along its replay, subtransactions (a rolled-back one leaves with its
    /// command ids), the tuple-cid list, and what is kept once it commits.
    #[test]
    fn new_cid_records_give_the_historic_view() {
        use crate::include::relfilelocator::RelFileLocator;
        use crate::include::reorderbuffer::TupleCidKey;
        use crate::include::snapbuild::SnapshotOrigin;
        use crate::include::snapshot::INVALID_COMMAND_ID;
        let p = params(18, false, 0);
        let mut r = Replay::new(&p, 5);
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        let new_cid = |top, offset, cmin, cmax| {
            Payload::NewCid(NewCid {
                top_xid: top,
                cmin,
                cmax,
                combocid: INVALID_COMMAND_ID,
                target: TupleCidKey {
                    locator: RelFileLocator {
                        spc_oid: 1663,
                        db_oid: 5,
                        rel_number: 1259,
                    },
                    block: 0,
                    offset,
                },
            })
        };
        // Before FULL_SNAPSHOT there is no historic snapshot.
        assert_eq!(r.historic_view(None).unwrap_err(), SnapBuildState::Start);
        let rx = RunningXacts::new(700, 700, &[]);
        r.feed(
            &record(100, RecordKind::RunningXacts, 0, 0),
            &Payload::RunningXacts(rx),
            &mut none,
        )
        .unwrap();
        let v = r.historic_view(None).unwrap();
        assert_eq!(v.base.origin, SnapshotOrigin::BuiltNow);
        assert_eq!(
            (v.snapshot.xmin, v.snapshot.xmax, v.snapshot.curcid),
            (700, 700, 0)
        );
        // 700: command 0 inserts (0,1); subtransaction 701 (command 1) inserts (0,2) and
        // is rolled back; command 2 updates (0,1).
        let inv = INVALID_COMMAND_ID;
        r.feed(
            &record(200, RecordKind::NewCid, 700, 0),
            &new_cid(700, 1, 0, inv),
            &mut none,
        )
        .unwrap();
        r.feed(
            &record(210, RecordKind::NewCid, 701, 700),
            &new_cid(700, 2, 1, inv),
            &mut none,
        )
        .unwrap();
        let v = r.historic_view(Some(701)).unwrap();
        assert_eq!(v.snapshot.subxip, vec![700, 701]);
        assert_eq!(v.snapshot.curcid, 2);
        r.feed(
            &record(220, RecordKind::Abort, 701, 0),
            &Payload::Abort {
                xid: 701,
                subxacts: vec![],
                db_id: 5,
                gid: String::new(),
            },
            &mut none,
        )
        .unwrap();
        r.feed(
            &record(230, RecordKind::NewCid, 700, 0),
            &new_cid(700, 1, 0, 2),
            &mut none,
        )
        .unwrap();
        let d = r.builder.reorder.decoding_txn(700);
        assert_eq!(d.status, TxnStatus::InProgress);
        assert!(d.subxacts.is_empty());
        // The rolled-back subtransaction's command id went with it; its mapping did not.
        assert_eq!(d.command_ids, vec![(Lsn(200), 1), (Lsn(230), 3)]);
        assert_eq!(d.tuplecids.len(), 3);
        // Along the replay: after the first record curcid 1, at the end 3; the hash is
        // the whole list either way.
        let base = r.builder.historic_snapshot().unwrap();
        let at_first = historic_view(base.clone(), Some(d.clone()), Lsn(200));
        assert_eq!(
            (at_first.snapshot.curcid, at_first.snapshot.subxip.clone()),
            (1, vec![700])
        );
        assert_eq!(at_first.tuplecids.as_ref().map(Vec::len), Some(3));
        let before = historic_view(base.clone(), Some(d.clone()), Lsn(199));
        assert_eq!((before.snapshot.curcid, before.snapshot.copied), (0, false));
        assert!(before.snapshot.subxip.is_empty());
        // Commit: 700 enters xip, the snapshot is rebuilt there, and 700's view is kept
        // (the question about 700 is registered; nothing else is remembered).
        r.builder.reorder.remember = Some(700);
        r.feed(
            &record(300, RecordKind::Commit, 700, 0),
            &Payload::Commit {
                xid: 700,
                subxacts: vec![],
                has_invals: true,
                db_id: 5,
                gid: String::new(),
            },
            &mut none,
        )
        .unwrap();
        let v = r.historic_view(Some(700)).unwrap();
        assert_eq!(v.base.origin, SnapshotOrigin::CatalogCommit(700));
        assert_eq!(v.base.built_at, Some(Lsn(300)));
        assert_eq!((v.snapshot.xip.clone(), v.snapshot.xmax), (vec![700], 701));
        assert_eq!(v.snapshot.subxip, vec![700]);
        assert_eq!(v.snapshot.curcid, 3);
        assert_eq!(
            v.decoding.as_ref().map(|d| d.status),
            Some(TxnStatus::Committed(Lsn(300)))
        );
        // Asked through the rolled-back subtransaction: unknown now.
        let d = r.builder.reorder.decoding_txn(701);
        assert_eq!(d.status, TxnStatus::Unknown);
    }

    #[test]
    fn catalog_commit_advances_xmax_and_is_purged_later() {
        let mut no_file = |_: Lsn| -> RestoreResult { Ok(None) };
        let mut b = SnapBuild::new(&params(18, true, 0));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(700, 700, &[]), &mut no_file)
            .unwrap();
        b.reorder.process_xid(702, Lsn(9));
        b.mark_catalog_changes(702, Lsn(9));
        let (v, _) = b.commit(Lsn(10), 702, &[], true, 0, 5);
        assert_eq!(
            v,
            CommitVerdict::Timetravel {
                xmax_advanced: true,
                forced: false,
                catalog_subxacts: Vec::new(),
            }
        );
        assert_eq!(b.xmax, 703);
        assert_eq!(b.committed_xip, vec![702]);
        let (v, _) = b.commit(Lsn(11), 704, &[], false, 0, 5);
        assert_eq!(v, CommitVerdict::NotCatalogChanging);
        assert!(!b.includes_all_transactions);
        b.process_running_xacts(Lsn(20), &RunningXacts::new(705, 705, &[]), &mut no_file)
            .unwrap();
        assert!(b.committed_xip.is_empty());
    }

    #[test]
    fn subtransaction_catalog_change_forces_parent() {
        let mut no_file = |_: Lsn| -> RestoreResult { Ok(None) };
        let mut b = SnapBuild::new(&params(18, true, 0));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(700, 700, &[]), &mut no_file)
            .unwrap();
        b.reorder.assign_child(710, 711, Lsn(2));
        b.mark_catalog_changes(711, Lsn(3));
        assert!(b.reorder.has_catalog_changes(710));
        // Serialized while running: both are in catchange.
        assert_eq!(b.reorder.catalog_changes_xacts(), vec![710, 711]);
        b.reorder.assign_child(710, 712, Lsn(4));
        let (v, _) = b.commit(Lsn(5), 710, &[712, 711], true, 0, 5);
        // Only 711 changed the catalog: the server logs `found subtransaction 710:711`.
        assert!(matches!(
            v,
            CommitVerdict::Timetravel { ref catalog_subxacts, .. } if *catalog_subxacts == [711]
        ));
        assert_eq!(b.committed_xip, vec![711, 710]);
        assert_eq!(b.xmax, 712);
        assert!(b.reorder.is_empty());
    }
}
