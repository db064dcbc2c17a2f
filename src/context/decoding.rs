//! [`DecodingContext`]: one WAL reader, one replay, one record loop.

use pgrx::prelude::*;
use snapbuild_core::include::snapbuild::BuiltSnapshot;
use snapbuild_core::replication::decode::{Payload, RecordHead, ReplayError};
use snapbuild_core::replication::reorder_memory::ChangeRecord;
use snapbuild_core::replication::reorder_memory::{MemoryRules, ReorderMemory};
use snapbuild_core::replication::slot_invalidation::{
    detail, determine_cause, Cause, Conflict, Judgement, SlotFacts,
};
use snapbuild_core::{Lsn, SnapBuildState};
use snapbuild_core::{Replay, RestoreResult, TraceRow};

use crate::adapter::raise;
use crate::adapter::snapfiles::{self, SnapFileError};
use crate::adapter::wal::{self, LeanHead, WalReader};
use crate::context::input::ReplayInput;

/// What one turn of the record loop gives: a row (boxed, so that the record loop moves a
/// pointer, not a row, per record), no row, or the ERROR the server would raise there.
pub type RowResult = Result<Option<Box<TraceRow>>, Box<ReplayError>>;

/// Why the record loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The end of flushed WAL was reached.
    EndOfWal,
    /// The next record ends after the input's `end`.
    EndLsn,
    /// No complete record exists at or after the start yet (a slot created a moment
    /// ago, or a standby that has not received WAL past it).
    NothingFlushedYet,
    /// The replay raised the ERROR the server would raise (a broken `.snap` file).
    Error,
    /// The record that invalidated the slot on this standby was replayed: the server
    /// decodes nothing after it.
    Invalidated,
}

impl Stop {
    /// A sentence for the first row or a diagnosis.
    pub fn text(self) -> &'static str {
        match self {
            Stop::EndOfWal => "stopped at the end of flushed WAL",
            Stop::EndLsn => "stopped at end_lsn",
            Stop::NothingFlushedYet => {
                "no complete WAL record after the start position has been flushed yet"
            }
            Stop::Error => "stopped at an ERROR the server would raise too",
            Stop::Invalidated => "stopped at the record whose redo invalidated the slot",
        }
    }
}

/// A running replay (the role of logical.c's LogicalDecodingContext): the WAL reader
/// positioned after the last record fed, the replayed decoder, and where it stands.
pub struct DecodingContext {
    pub input: ReplayInput,
    pub replay: Replay,
    reader: Option<WalReader>,
    /// The reader's record was read but not fed yet (it ends after a limit given to
    /// `next_row_upto`).
    pending: bool,
    /// Records that need only their head are fed as the reader reads them, under one
    /// guard per run of them ([`DecodingContext::read_heads_in_batches`]): for consumers
    /// that only look at rows (the traces), not at the position after each record.
    batch_heads: bool,
    /// The memory context the reader was allocated in (for set-returning functions the
    /// multi-call context): every read runs in it, since per-call contexts are reset.
    mcx: pg_sys::MemoryContext,
    /// SNAPBUILD_VERSION of this server, for `.snap` files restored on branch b.
    version: u32,
    /// The end of the last record fed (the start position before any).
    pub last_end: Lsn,
    /// The start of the last record fed.
    pub last_record: Option<Lsn>,
    /// Records fed so far.
    pub records: u64,
    /// Set once the loop has ended, with the reason.
    pub stopped: Option<Stop>,
    /// An unreadable `.snap` file is taken as absent instead of raising (replays of other
    /// possible writers, which must never end the trace).
    tolerant: bool,
    /// Looks for the record whose redo invalidated the slot (see
    /// [`DecodingContext::watch_invalidation`]).
    pub invalidation: Option<InvalidationWatch>,
}

/// The search for the record that invalidated a slot on a hot standby
/// (`snapbuild_core::replication::slot_invalidation`).
#[derive(Clone, Debug)]
pub struct InvalidationWatch {
    pub slot_name: String,
    /// The server's reason (pg_replication_slots.invalidation_reason).
    pub cause: Cause,
    pub facts: SlotFacts,
    /// The record found (its start, `RMGR/TYPE`), once found.
    pub found: Option<(Lsn, String)>,
    /// Records met before it that may have invalidated the slot but whose horizon the
    /// replay does not read: (start, why).
    pub undecided: Vec<(Lsn, String)>,
}

/// Where the record loop stops: the earlier of the input's end and a call's limit.
fn bound(end: Option<Lsn>, limit: Option<Lsn>) -> Option<Lsn> {
    match (end, limit) {
        (Some(e), Some(l)) => Some(e.min(l)),
        (e, l) => e.or(l),
    }
}

/// Feeds one record that needs only its head and moves the loop's position past it.
#[inline]
pub(crate) fn feed_head(
    replay: &mut Replay,
    records: &mut u64,
    last_end: &mut Lsn,
    last_record: &mut Option<Lsn>,
    h: &LeanHead,
) {
    if let Some(m) = replay.builder.reorder.memory.as_mut() {
        // the memory accounting counts every record's bytes to its transaction
        m.count_record(h.xid, Lsn(h.lsn), h.end_lsn.saturating_sub(h.lsn));
    }
    #[cfg(not(feature = "ablation-no-lean-feed"))]
    replay.feed_head_only(h.kind, h.rmid, h.xid, Lsn(h.lsn));
    #[cfg(feature = "ablation-no-lean-feed")]
    let _ = (replay, std::hint::black_box(h.xid));
    *records += 1;
    *last_end = Lsn(h.end_lsn);
    *last_record = Some(Lsn(h.lsn));
}

/// [`feed_head`] for a heap change read with its body (the memory accounting's reads):
/// the replay queues its changes.
pub(crate) fn feed_change(
    replay: &mut Replay,
    records: &mut u64,
    last_end: &mut Lsn,
    last_record: &mut Option<Lsn>,
    h: &LeanHead,
    rec: ChangeRecord,
) {
    let head = RecordHead {
        lsn: Lsn(h.lsn),
        end_lsn: Lsn(h.end_lsn),
        xid: h.xid,
        top_xid: 0,
        rmid: h.rmid,
        kind: h.kind,
        name: None,
    };
    // a change restores no `.snap` file and raises nothing
    let _ = replay.feed_lean(&head, &Payload::Change(rec), &mut |_| Ok(None));
    *records += 1;
    *last_end = Lsn(h.end_lsn);
    *last_record = Some(Lsn(h.lsn));
}

/// Where a reader must be opened to go on with a replay that started at `start` and has
/// fed `records` records, the last ending at `last_end`: `start` before any record, else
/// `last_end` MAXALIGNed (a record starts on an 8-byte boundary, as xlogreader.c's
/// NextRecPtr).
pub(crate) fn resume_at(start: Lsn, last_end: Lsn, records: u64) -> Lsn {
    if records == 0 {
        start
    } else {
        Lsn(last_end.0.div_ceil(8) * 8)
    }
}

/// SnapBuildRestore's file access: the `.snap` file for `lsn`, absent, or broken (the
/// broken file becomes the replay's ERROR row); other I/O errors are raised.
pub(crate) fn restore_snapshot(lsn: Lsn, version: u32, tolerant: bool) -> RestoreResult {
    match snapfiles::read_snapshot(lsn, version) {
        Ok(f) => Ok(f),
        Err(SnapFileError::Corrupt { err, .. }) => Err(err),
        // A replay of another possible writer does not end the trace: it goes on as if
        // the unreadable file were not there.
        Err(_) if tolerant => Ok(None),
        Err(e) => e.raise(),
    }
}

impl DecodingContext {
    /// Starts the replay described by `input`: checks that the WAL at its start still
    /// exists and opens PostgreSQL's XLogReader at the first valid record at or after it.
    /// A start with no complete record after it yet is not an error: the loop then
    /// yields nothing and [`DecodingContext::stopped`] says why.
    ///
    /// Errors: `undefined_file` (58P01) when the WAL at the start has been removed.
    pub fn start(input: ReplayInput) -> Self {
        Self::start_in(input, unsafe { pg_sys::CurrentMemoryContext })
    }

    /// [`DecodingContext::start`] with the reader living in memory context `mcx` (which
    /// must outlive the context), e.g. a set-returning function's multi-call context
    /// when started while a per-call context is current.
    pub fn start_in(input: ReplayInput, mcx: pg_sys::MemoryContext) -> Self {
        wal::check_available(input.start);
        let mut replay = Replay::new(&input.params, input.slot_db);
        replay.two_phase = input.two_phase.clone();
        replay.fast_forward = input.fast_forward;
        let opened = unsafe {
            pgrx::PgMemoryContexts::For(mcx).switch_to(|_| WalReader::try_open(input.start))
        };
        let reader = opened.map(|mut r| {
            r.with_names = input.all_records;
            r
        });
        let stopped = reader.is_none().then_some(Stop::NothingFlushedYet);
        DecodingContext {
            version: input.params.version.snapbuild_version(),
            last_end: input.start,
            input,
            replay,
            reader,
            pending: false,
            batch_heads: false,
            mcx,
            last_record: None,
            records: 0,
            stopped,
            tolerant: false,
            invalidation: None,
        }
    }

    /// For a slot that the server invalidated while redoing WAL (`rows_removed`,
    /// `wal_level_insufficient`): every record is also judged as the standby's startup
    /// process judged it (slot.c DetermineSlotInvalidationCause), and the loop ends with
    /// the row of the first record that invalidates the slot ([`Stop::Invalidated`]). The
    /// slot's xmin and catalog_xmin are taken as they are now: an invalidated slot no
    /// longer moves, and before its invalidation they only grew, so the first record
    /// that conflicts with today's values is the first that conflicted with the values
    /// of its time. Does nothing for other slots.
    pub fn watch_invalidation(&mut self) {
        let Some(slot) = self.input.slot.as_ref() else {
            return;
        };
        let Some(cause) = slot
            .invalidation_reason
            .as_deref()
            .and_then(Cause::from_name)
        else {
            return;
        };
        self.invalidation = Some(InvalidationWatch {
            slot_name: slot.name.clone(),
            cause,
            facts: SlotFacts {
                database: slot.datoid,
                effective_xmin: slot.effective_xmin,
                effective_catalog_xmin: slot.effective_catalog_xmin,
            },
            found: None,
            undecided: Vec::new(),
        });
        if let Some(r) = self.reader.as_mut() {
            r.with_conflicts = true;
        }
    }

    /// The invalidation judgement of a fed record, written into its row.
    fn judge_invalidation(&mut self, conflict: &Conflict, row: &mut TraceRow) {
        let Some(w) = self.invalidation.as_mut() else {
            return;
        };
        if w.found.is_some() {
            return;
        }
        let name = row.record.to_string();
        match determine_cause(conflict, &w.facts) {
            Judgement::No => {}
            Judgement::Undecided(why) => {
                row.interesting = true;
                row.message = Some(format!(
                    "replication slot \"{}\" may have been invalidated here ({}): {why}",
                    w.slot_name,
                    w.cause.name()
                ));
                w.undecided.push((row.lsn, why));
            }
            Judgement::Invalidates(cause) => {
                let horizon = match conflict {
                    Conflict::Horizon { horizon, .. } => Some(*horizon),
                    _ => None,
                };
                row.interesting = true;
                row.branch = Some("invalidated");
                row.level = Some("LOG");
                row.message = Some(format!(
                    "invalidating obsolete replication slot \"{}\"",
                    w.slot_name
                ));
                row.detail = Some(detail(cause, self.input.params.version, horizon));
                if cause != w.cause {
                    row.note = Some(format!(
                        "the replay invalidates the slot here for {}, the server says {}",
                        cause.name(),
                        w.cause.name()
                    ));
                }
                w.found = Some((row.lsn, name));
                self.stopped = Some(Stop::Invalidated);
            }
        }
    }

    /// [`DecodingContext::start_in`] for a replay that must not end the caller's work: `None`
    /// when the WAL at the start has been removed, and unreadable `.snap` files are taken
    /// as absent.
    pub fn try_start_tolerant(input: ReplayInput, mcx: pg_sys::MemoryContext) -> Option<Self> {
        if !wal::is_available(input.start) {
            return None;
        }
        let mut ctx = Self::start_in(input, mcx);
        ctx.tolerant = true;
        Some(ctx)
    }

    /// The memory context the reader lives in.
    pub fn memory_context(&self) -> pg_sys::MemoryContext {
        self.mcx
    }

    /// The `REPLAY START` row: the builder before any record, with the input's label
    /// (and why nothing can be read, when nothing can).
    pub fn start_row(&self) -> TraceRow {
        let mut row =
            Replay::new(&self.input.params, self.input.slot_db).builder_row_at(self.input.start);
        row.record = "REPLAY START";
        let mut label = self.input.label.clone();
        let standby = crate::adapter::activity::standby_note();
        if self.stopped == Some(Stop::NothingFlushedYet) {
            label.push_str(&format!(
                "; {}",
                if standby.is_some() {
                    "no complete WAL record after the start position has been replayed on this standby yet"
                } else {
                    Stop::NothingFlushedYet.text()
                }
            ));
        }
        if let Some(note) = standby {
            label.push_str(&format!("; {note}"));
        }
        row.message = Some(label);
        row.interesting = true;
        row
    }

    /// Reads the next record, within the input's `end`, and keeps it unfed while it ends
    /// after `limit`.
    fn read(&mut self, limit: Option<Lsn>) -> bool {
        if self.stopped.is_some() {
            return false;
        }
        let Some(reader) = self.reader.as_mut() else {
            return false;
        };
        if !std::mem::take(&mut self.pending) {
            // A batch reads no further than the first record past where this loop stops.
            reader.batch_bound = bound(self.input.end, limit).unwrap_or(Lsn(u64::MAX));
            let mcx = self.mcx;
            let more =
                unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| reader.next_record()) };
            if !more {
                self.stopped = Some(Stop::EndOfWal);
                return false;
            }
        }
        let end = reader.rec.head.end_lsn;
        if self.input.end.is_some_and(|e| end > e) {
            self.stopped = Some(Stop::EndLsn);
            return false;
        }
        if limit.is_some_and(|l| end > l) {
            self.pending = true;
            return false;
        }
        true
    }

    /// Feeds the records the reader has read ahead that need only their head (heap
    /// changes, records only the xid matters of: most records), in a loop of their own:
    /// none makes a row unless every record does (`all_records`, not here). Stops before
    /// one ending past `limit` or the input's end, which the record loop then meets.
    fn feed_read_ahead_heads(&mut self, limit: Option<Lsn>) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let upto = bound(self.input.end, limit);
        while let Some(h) = reader.peek_lean() {
            if upto.is_some_and(|u| h.end_lsn > u.0) {
                return;
            }
            reader.skip_lean();
            feed_head(
                &mut self.replay,
                &mut self.records,
                &mut self.last_end,
                &mut self.last_record,
                &h,
            );
        }
    }

    /// Reads records and feeds those that need only their head as they are read, under
    /// one guard, until one needs more (a commit, a RUNNING_XACTS, ...), the end of WAL
    /// or the first record ending past `limit` or the input's end, which the record loop
    /// then meets ([`WalReader::read_batch_feeding`]). Most records never leave the reader
    /// loop: no head is kept, handed out or looked at twice.
    fn feed_while_reading(&mut self, limit: Option<Lsn>) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        if !reader.feeding_is_due() {
            return;
        }
        reader.batch_bound = bound(self.input.end, limit).unwrap_or(Lsn(u64::MAX));
        pgrx::check_for_interrupts!();
        let replay = &mut self.replay;
        let records = &mut self.records;
        let last_end = &mut self.last_end;
        let last_record = &mut self.last_record;
        unsafe {
            pgrx::PgMemoryContexts::For(self.mcx).switch_to(|_| {
                reader.read_batch_feeding(|h, change| {
                    match change {
                        Some(rec) => feed_change(replay, records, last_end, last_record, h, rec),
                        None => feed_head(replay, records, last_end, last_record, h),
                    }
                    true
                })
            });
        }
    }

    /// Counts the reorder buffer's memory as the decoder would (`rules`): heap changes,
    /// invalidations and messages are read whole and queued into the replay's
    /// [`ReorderMemory`]. Before the first record.
    pub fn count_reorder_memory(&mut self, rules: MemoryRules) {
        self.replay.builder.reorder.memory = Some(Box::new(ReorderMemory::new(rules)));
        if let Some(r) = self.reader.as_mut() {
            r.with_changes = true;
        }
    }

    /// Goes back to reading one record at a time (after [`DecodingContext::read_heads_in_batches`]):
    /// the next call feeds exactly the next record.
    pub fn stop_batches(&mut self) {
        self.batch_heads = false;
        if let Some(r) = self.reader.as_mut() {
            r.batch_heads = false;
        }
    }

    /// The memory accounting [`DecodingContext::count_reorder_memory`] set up.
    pub fn reorder_memory(&mut self) -> Option<&mut ReorderMemory> {
        self.replay.builder.reorder.memory.as_deref_mut()
    }

    /// Reads the records that need only their head (heap changes, records only the xid
    /// matters of: most records) as the reader reads them, under one guard per run of
    /// them: one call of the record loop may then feed many of them before the record it
    /// returns, so `last_end` and `records` move by more than one record per call. For
    /// consumers that only look at rows (the traces); never for those that stop at a
    /// position after any record (slot prediction).
    pub fn read_heads_in_batches(&mut self) {
        self.batch_heads = true;
        if let Some(r) = self.reader.as_mut() {
            r.batch_heads = true;
        }
    }

    /// The record loop: reads the next record and re-runs decode.c
    /// LogicalDecodingProcessRecord on it. `None` at the end (see
    /// [`DecodingContext::stopped`]); `Some(Err)` for the ERROR the server would raise
    /// there (a broken `.snap` file on branch b), after which the loop ends;
    /// `Some(Ok(None))` for a record that changed nothing a row would show (most records:
    /// heap, btree, full-page images) unless the input asks for `all_records`, which gets
    /// a row for every record.
    pub fn next_row(&mut self) -> Option<RowResult> {
        self.next_row_upto(None)
    }

    /// [`DecodingContext::next_row`], but only for a record ending at or before `limit`
    /// (a later one stays unread for the next call).
    pub fn next_row_upto(&mut self, limit: Option<Lsn>) -> Option<RowResult> {
        if self.batch_heads && !self.input.all_records && !self.pending && self.stopped.is_none() {
            self.feed_read_ahead_heads(limit);
            self.feed_while_reading(limit);
        }
        if !self.read(limit) {
            return None;
        }
        let rec = &self.reader.as_ref().expect("a record was read").rec;
        let (version, tolerant, mcx) = (self.version, self.tolerant, self.mcx);
        // The replay itself allocates nothing in PostgreSQL's memory; reading a `.snap`
        // file does, in the reader's context (per-call contexts are reset).
        let mut restore = |lsn: Lsn| unsafe {
            pgrx::PgMemoryContexts::For(mcx).switch_to(|_| restore_snapshot(lsn, version, tolerant))
        };
        let fed = self.replay.feed_lean(&rec.head, &rec.payload, &mut restore);
        self.records += 1;
        self.last_end = rec.head.end_lsn;
        self.last_record = Some(rec.head.lsn);
        if rec.conflict.is_none() {
            return Some(match fed {
                Ok(None) if self.input.all_records => {
                    Ok(Some(self.replay.quiet_row_boxed(&rec.head)))
                }
                Ok(row) => Ok(row),
                Err(e) => {
                    self.stopped = Some(Stop::Error);
                    Err(e)
                }
            });
        }
        // A record that may invalidate the watched slot is judged on a row of its own.
        let (conflict, name) = (rec.conflict.clone(), rec.head.name);
        let fed = match fed {
            Ok(None) => Ok(Some(self.replay.quiet_row_boxed(&rec.head))),
            other => other,
        };
        match (fed, &conflict) {
            (Ok(Some(mut row)), Some(c)) => {
                if let Some(n) = name {
                    row.record = n;
                }
                self.judge_invalidation(c, &mut row);
                let shown = row.interesting || self.input.all_records;
                Some(Ok(shown.then_some(row)))
            }
            (Ok(row), _) => Some(Ok(row)),
            (Err(e), _) => {
                self.stopped = Some(Stop::Error);
                Some(Err(e))
            }
        }
    }

    /// [`DecodingContext::next_row`] that raises the replay's ERROR (`data_corrupted`,
    /// XX001) instead of returning it, for consumers that produce no per-record rows.
    pub fn next_row_or_raise(&mut self, limit: Option<Lsn>) -> Option<Option<Box<TraceRow>>> {
        match self.next_row_upto(limit)? {
            Ok(row) => Some(row),
            Err(e) => raise(
                if e.error.is_internal_error() {
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR
                } else {
                    PgSqlErrorCode::ERRCODE_DATA_CORRUPTED
                },
                e.error.message(&snapfiles::path_for(e.row.lsn)),
            ),
        }
    }

    /// After the loop stopped at the end of flushed WAL: waits (polling every 10 ms,
    /// checking for interrupts) until a complete record following the last one has been
    /// flushed, at most `max_ms` milliseconds, and re-opens the reader there, as the
    /// server's page reader waits for WAL (read_local_xlog_page). True when there is a
    /// record to read again.
    pub fn wait_for_record(&mut self, max_ms: u64) -> bool {
        if self.stopped != Some(Stop::EndOfWal) && self.stopped != Some(Stop::NothingFlushedYet) {
            return false;
        }
        let mut waited = 0;
        while waited < max_ms {
            unsafe { pg_sys::pg_usleep(10_000) };
            waited += 10;
            pgrx::check_for_interrupts!();
            if self.resume() {
                return true;
            }
        }
        false
    }

    /// After the loop stopped at the end of flushed WAL: when a complete record following
    /// the last one has been flushed since, re-opens the reader there (without waiting) so
    /// that the loop goes on where it stopped. True when there is a record to read again.
    pub fn resume(&mut self) -> bool {
        if self.stopped != Some(Stop::EndOfWal) && self.stopped != Some(Stop::NothingFlushedYet) {
            return false;
        }
        if wal::flush_lsn() <= self.last_end {
            return false;
        }
        // The next record may still be only partly flushed: then nothing is re-opened.
        let from = resume_at(self.input.start, self.last_end, self.records);
        let mcx = self.mcx;
        let opened =
            unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| WalReader::try_open(from)) };
        match opened {
            Some(mut r) => {
                r.with_names = self.input.all_records;
                r.with_conflicts = self.invalidation.is_some();
                r.with_changes = self.replay.builder.reorder.memory.is_some();
                r.batch_heads = self.batch_heads;
                self.reader = Some(r);
                self.pending = false;
                self.stopped = None;
                true
            }
            None => false,
        }
    }

    /// Runs the loop to its end and takes the builder's snapshot once the next record
    /// would end after `capture_at` (at the end when it is `None` or beyond).
    ///
    /// Errors: a broken `.snap` file met on branch b is the server's `data_corrupted`
    /// ERROR here (the server's decoder would fail there too).
    pub fn run_capturing(mut self, capture_at: Option<Lsn>) -> Captured {
        let mut restored_from = None;
        while let Some(row) = self.next_row_or_raise(capture_at) {
            if let Some(row) = row {
                restored_from = row.restored_from.or(restored_from);
            }
        }
        let captured = CapturePoint {
            base: self.replay.builder.historic_snapshot(),
            state: self.replay.builder.state,
            at: self.last_end,
            last_record: self.last_record,
            restored_from,
        };
        // The rest of the flushed WAL still shapes the reorder buffer (a transaction's
        // later NEW_CID records and its fate).
        if self.stopped.is_none() {
            while self.next_row_or_raise(None).is_some() {}
        }
        Captured {
            base: captured.base,
            state: captured.state,
            at: captured.at,
            last_record: captured.last_record,
            restored_from: captured.restored_from,
            replay: self.replay,
        }
    }
}

struct CapturePoint {
    base: Result<BuiltSnapshot, SnapBuildState>,
    state: SnapBuildState,
    at: Lsn,
    last_record: Option<Lsn>,
    restored_from: Option<Lsn>,
}

/// A replay run over all flushed WAL, with the builder's snapshot taken at one point.
pub struct Captured {
    /// The builder's historic snapshot at the capture point (SnapBuildBuildSnapshot's, as
    /// `builder->snapshot` holds it), or the builder's state when it had none yet.
    pub base: Result<BuiltSnapshot, SnapBuildState>,
    /// The builder's state at the capture point.
    pub state: SnapBuildState,
    /// The end of the last record fed before the capture (the start LSN when none was).
    pub at: Lsn,
    /// The start of that record.
    pub last_record: Option<Lsn>,
    /// The last `.snap` file adopted before the capture (branch b or a serialization
    /// point), if any.
    pub restored_from: Option<Lsn>,
    /// The replay after all flushed WAL: the reorder buffer as it ends up.
    pub replay: Replay,
}
