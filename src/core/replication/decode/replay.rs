//! decode.c's LogicalDecodingProcessRecord: a [`Replay`] (the snapshot builder with its
//! reorder buffer, and the decoding context's settings) fed one WAL record at a time, each
//! dispatched as the rmgr decode routines do to the builder, the reorder buffer and the
//! transaction-ending paths (`xact.rs`), giving the record's [`TraceRow`] or the ERROR the
//! server would raise ([`ReplayError`]); and what a replay offers around that: row boxes
//! given back, the quiet mode, the historic view where it stands, a copy, and carrying it
//! to a later start_decoding_at.

use crate::include::rmgrlist::RM_XACT_ID;
use crate::include::snapbuild::SnapBuildState;
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::decode::record::{Payload, RecordHead, RecordKind, TwoPhaseDecoding};
use crate::replication::decode::trace::{DecodeVerdict, TraceRow, NOTE_CALLBACK_DURING_CREATION};
use crate::replication::reorder_memory::{Change, ChangeAction, ChangeRecord};
use crate::replication::reorderbuffer::{historic_view, HistoricView};
use crate::replication::snapbuild::{BuilderParams, RestoreResult, SnapBuild, Step};
use crate::replication::snapbuild_ondisk::OnDiskError;

/// Why the replay stopped early: the server would have raised this ERROR here.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplayError {
    pub row: TraceRow,
    pub error: OnDiskError,
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
    /// Quiet mode: [`Replay::feed_lean`] makes no row for a commit, nor for a record that
    /// only changed the builder's tracked sets, and does everything else the same. Set by
    /// a caller that needs the builder's state, not rows (the slots' health and
    /// diagnosis). Not serialized (off when read back).
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

    /// The lean feed: [`Replay::feed`] for the hot loop, making a row only for a record
    /// that left something to show. `Ok(None)` for a record that left nothing a row
    /// would show beyond the builder as it stands (no branch, verdict or tracked set
    /// changed; the row [`Replay::quiet_row`] builds), so that most records (heap, btree,
    /// full-page images: those that need only their head) cost no row at all. Same
    /// effects on the replay as `feed`.
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
        if let Some(m) = self.builder.reorder.memory.as_mut() {
            // reorderbuffer.c ReorderBufferCanStartStreaming, for this record
            let at = if self.builder.version.major < 15 {
                head.end_lsn
            } else {
                head.lsn
            };
            m.at = (head.lsn, head.end_lsn);
            if head.rmid != RM_XACT_ID || m.knows(head.xid) {
                m.count_record(
                    head.xid,
                    head.lsn,
                    head.end_lsn.0.saturating_sub(head.lsn.0),
                );
            }
            m.can_start_streaming = self.builder.state == SnapBuildState::Consistent
                && at >= self.builder.start_decoding_at;
        }
        if matches!(head.kind, RecordKind::Change | RecordKind::Other)
            && !transam::is_valid(head.top_xid)
            && !matches!(payload, Payload::Change(_))
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
                row.set_commit(*x, *has_invals, before, v, d);
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
                if let Payload::Invalidations { nmsgs } = payload {
                    // ReorderBufferAddInvalidations (xact_decode, FULL_SNAPSHOT on)
                    let full = self.builder.state >= SnapBuildState::FullSnapshot;
                    if full && transam::is_valid(head.xid) && !self.fast_forward {
                        if let Some(m) = self.builder.reorder.memory.as_mut() {
                            m.add_invalidations(head.xid, head.lsn, *nmsgs);
                        }
                    }
                }
                self.builder.mark_catalog_changes(head.xid, head.lsn);
                None
            }
            (RecordKind::Change, _) => {
                if self.change_gives_base_snapshot()
                    && self.builder.process_change(head.xid, head.lsn)
                    && !self.fast_forward
                {
                    if let Payload::Change(rec) = payload {
                        self.queue_changes(head, rec);
                    }
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
                    prefix_len,
                    content_len,
                },
            ) => {
                if *db_id == self.slot_db
                    && self.change_gives_base_snapshot()
                    && self.builder.process_change(head.xid, head.lsn)
                    && !self.fast_forward
                {
                    // ReorderBufferQueueMessage, at the record's end
                    if let Some(m) = self.builder.reorder.memory.as_mut() {
                        let size = m.rules.sizes.change + prefix_len + 1 + content_len + 16;
                        let c = Change::plain(ChangeAction::Message, size);
                        m.queue_change(head.xid, head.end_lsn, c, false);
                    }
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

impl Replay {
    /// Re-runs decode.c DecodeInsert / DecodeUpdate / DecodeDelete / DecodeTruncate /
    /// DecodeMultiInsert / DecodeSpecConfirm's queueing, for the memory accounting: the
    /// record's changes go to its xid unless they belong to another database.
    fn queue_changes(&mut self, head: &RecordHead, rec: &ChangeRecord) {
        let Some(m) = self.builder.reorder.memory.as_mut() else {
            return;
        };
        if rec.db_oid != self.slot_db {
            return;
        }
        if rec.origin != 0 {
            // decode.c FilterByOrigin: whether the plugin skips it depends on its options
            m.undecided.get_or_insert_with(|| {
                format!(
                    "the change at {} came from replication origin {}: whether the output plugin filters it (pgoutput's origin = none, test_decoding's only-local) depends on the consumer's options",
                    head.lsn, rec.origin
                )
            });
        }
        let sizes = m.rules.sizes;
        for rc in &rec.changes {
            let toast_growth = m.toast_growth(head.xid, head.lsn, rec, rc);
            let toast_chunk = rec.toast_insert && rc.action == ChangeAction::Insert;
            let tuple_change = matches!(
                rc.action,
                ChangeAction::Insert | ChangeAction::Update | ChangeAction::Delete
            );
            let c = Change {
                action: rc.action,
                size: rc.size(&sizes),
                toast_chunk,
                toast_other: false,
                clear_toast: rc.clear_toast,
                tupleless: tuple_change && rc.new_len.is_none() && rc.old_len.is_none(),
                toast_growth,
            };
            m.queue_change(head.xid, head.lsn, c, rec.toast_insert);
        }
    }

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

/// Replays and records the decode tests start from.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use crate::include::version::PgVersion;

    pub(crate) fn params(major: u32, in_slot_creation: bool, two_phase_at: u64) -> BuilderParams {
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
    pub(crate) fn record(
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

    pub(crate) fn head(lsn: u64, kind: RecordKind, xid: TransactionId) -> RecordHead {
        record(lsn, kind, xid, 0)
    }

    pub(crate) fn commit_payload(
        x: TransactionId,
        db_id: u32,
        has_invals: bool,
        gid: &str,
    ) -> Payload {
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
    pub(crate) fn restarted(major: u32, running: &[TransactionId]) -> Replay {
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
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::include::heapam_xlog::NewCid;
    use crate::replication::reorderbuffer::TxnStatus;

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
            prefix_len: 1,
            content_len: 1,
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
                prefix_len: 1,
                content_len: 1,
            };
            let mut h = head(0x700, RecordKind::LogicalMessage, 961);
            h.rmid = crate::include::rmgrlist::RM_LOGICALMSG_ID;
            r.feed(&h, &msg, &mut none).unwrap();
            assert_eq!(r.builder.reorder.has_base_snapshot(961), base, "PG {major}");
        }
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
}
