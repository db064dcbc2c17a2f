//! The WAL reader: an XLogReader over local WAL opened as pg_walinspect's
//! InitXLogReaderState opens one, each record read into a [`WalRecord`] of plain values
//! for the core, and the batches that read records needing only their head under one
//! guard ([`LeanHead`]).

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode as C;
use snapbuild_core::access::xactdesc;
use snapbuild_core::include::heapam_xlog::NewCid;
use snapbuild_core::include::transam;
use snapbuild_core::replication::decode::{Payload, RecordHead, RecordKind};
use snapbuild_core::replication::message::LogicalMessage;
use snapbuild_core::replication::reorder_memory::ChangeRecord;
use snapbuild_core::replication::slot_invalidation::{record_conflict, Conflict};
use snapbuild_core::{Lsn, RunningXacts};

use crate::adapter::raise;

use super::compat;
use super::names::RecordNames;
use super::read_ahead;

/// An open XLogReader positioned at the first valid record at or after a start LSN.
pub struct WalReader {
    reader: *mut pg_sys::XLogReaderState,
    /// Fill `RecordHead::name` with pg_waldump's `rmgr/TYPE` for every record.
    pub with_names: bool,
    /// Read the recovery conflict each record carries ([`WalRecord::conflict`]).
    pub with_conflicts: bool,
    /// Read records that need only their head in batches ([`WalReader::read_batch`]).
    pub batch_heads: bool,
    /// Parse heap changes and XACT INVALIDATIONS into their payloads (the memory
    /// accounting of `snapbuild_backlog` / `snapbuild_decoding_cost`).
    pub with_changes: bool,
    /// A batch stops after the first record ending past this LSN.
    pub batch_bound: Lsn,
    /// The record [`WalReader::next_record`] read last, filled in place (a record is
    /// a hundred-odd bytes; moving one out per record would copy it each time).
    pub rec: WalRecord,
    /// Lean records read by the last batch and not yet handed out, from `lean_at` on.
    lean: heapless::Vec<LeanHead, BATCH>,
    lean_at: usize,
    /// What follows them.
    held: Held,
    /// The names of the records read last.
    names: RecordNames,
}

/// One record, decoded far enough for the snapshot builder.
#[derive(Clone, Debug)]
pub struct WalRecord {
    pub head: RecordHead,
    pub payload: Payload,
    /// What redoing it on a hot standby asks of the logical slots (only with
    /// `with_conflicts`; `RecordHead::name` is then filled for such a record).
    pub conflict: Option<Conflict>,
}

// Called only inside one `pg_guard_ffi_boundary` around a whole batch (see
// [`WalReader::read_batch`]): an ERROR in them returns to that guard, as it would to the
// guard pgrx puts around each call of its own bindings.
unsafe extern "C-unwind" {
    #[link_name = "XLogReadRecord"]
    fn xlog_read_record_in_batch(
        state: *mut pgrx::pg_sys::XLogReaderState,
        errormsg: *mut *mut std::ffi::c_char,
    ) -> *mut pgrx::pg_sys::XLogRecord;
    #[link_name = "ProcessInterrupts"]
    fn process_interrupts_in_batch();
}

/// Records read ahead at most under one guard (see [`WalReader::read_batch`]; a batch
/// that feeds them as it reads, [`WalReader::read_batch_feeding`], keeps none and has no
/// such bound).
const BATCH: usize = 64;

/// The head of a record whose head is all the replay needs (a heap change, or a record
/// only its xid matters of): LSNs as plain `XLogRecPtr` values, the record's xid, rmgr and
/// kind; read ahead in a batch, or handed to the caller as it is read.
#[derive(Clone, Copy)]
pub struct LeanHead {
    pub lsn: u64,
    pub end_lsn: u64,
    pub xid: u32,
    pub rmid: u8,
    pub kind: RecordKind,
}

/// What the batch loop does with a lean record within its bound.
#[derive(Clone, Copy)]
enum Consume {
    /// Taken by the caller: read on.
    Taken,
    /// Kept in `lean` for the record loop.
    Keep,
    /// Taken, and the batch ends here (nothing more is read).
    Stop,
}

/// What ended a batch, after its lean heads: the reader's current record (read, not yet
/// taken), the end of WAL or a read error (XLogReadRecord's NULL and its message), or
/// nothing (the batch was full).
#[derive(Clone, Copy)]
enum Held {
    Nothing,
    Record,
    Null(*mut std::ffi::c_char),
}

impl WalReader {
    /// Mirrors pg_walinspect's InitXLogReaderState: allocate a reader over local WAL
    /// and find the first valid record at or after `start` (on 14, `start` itself).
    ///
    /// Errors: `invalid_parameter_value` when `start` is below the first page or no
    /// record can be found after it; whatever the WAL segment reader raises (e.g. a
    /// removed segment) propagates with the server's own SQLSTATE.
    pub fn open(start: Lsn) -> Self {
        if start.0 < pg_sys::XLOG_BLCKSZ as u64 {
            raise(
                C::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("could not read WAL at LSN {start}"),
            );
        }
        let this = WalReader::allocate();
        if unsafe { compat::find_first(this.reader, start.0) } == 0 {
            raise(
                C::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("could not find a valid record after {start}"),
            );
        }
        this
    }

    /// Like [`WalReader::open`], but `None` (not an ERROR) when no complete record can be
    /// found at or after `start` yet (e.g. the next one is not entirely flushed).
    pub fn try_open(start: Lsn) -> Option<Self> {
        if start.0 < pg_sys::XLOG_BLCKSZ as u64 {
            return None;
        }
        let this = WalReader::allocate();
        (unsafe { compat::find_first(this.reader, start.0) } != 0).then_some(this)
    }

    /// A reader over local WAL, positioned nowhere yet.
    ///
    /// Errors: `out_of_memory` when the server cannot allocate it.
    fn allocate() -> Self {
        let reader = unsafe { compat::allocate() };
        if reader.is_null() {
            raise(
                C::ERRCODE_OUT_OF_MEMORY,
                "out of memory while allocating a WAL reading processor",
            );
        }
        WalReader::new(reader)
    }

    fn new(reader: *mut pg_sys::XLogReaderState) -> Self {
        WalReader {
            reader,
            with_names: false,
            with_conflicts: false,
            with_changes: false,
            batch_heads: false,
            batch_bound: Lsn(u64::MAX),
            rec: WalRecord {
                head: RecordHead {
                    lsn: Lsn(0),
                    end_lsn: Lsn(0),
                    xid: 0,
                    top_xid: 0,
                    rmid: 0,
                    kind: RecordKind::Other,
                    name: None,
                },
                payload: Payload::None,
                conflict: None,
            },
            lean: heapless::Vec::new(),
            lean_at: 0,
            held: Held::Nothing,
            names: RecordNames([(0, ""); 64]),
        }
    }

    /// Reads records under one guard (one sigsetjmp for up to [`BATCH`] records instead of
    /// one per record) while each needs nothing but its head: their heads go to `lean`,
    /// and `held` says what stopped the batch. Only when asked for (`batch_heads`) and
    /// neither names nor conflicts are (both need the record itself); it stops after the
    /// first record ending past `batch_bound`.
    ///
    /// Nothing in the loop owns memory or needs dropping, so an ERROR (raised by the
    /// page reader or by ProcessInterrupts) may leave it by longjmp to the guard, which
    /// re-raises it as pgrx does for a single call.
    fn read_batch(&mut self) {
        self.read_batch_with(|_, _| Consume::Keep);
    }

    /// [`WalReader::read_batch`] that hands each lean record ending at or before
    /// `batch_bound` to `feed` as soon as it is read (nothing is kept of it) and goes on
    /// reading, so that the batch ends only at a record that needs more than its head,
    /// the end of WAL, an error, or the first record past the bound (kept in `lean`).
    /// With `with_changes`, a heap change is handed over with its parsed body (one past the
    /// bound, or one whose body is malformed, ends the batch as the reader's current
    /// record instead, for [`WalReader::next_record`] to read whole).
    /// For a caller with nothing to do between such records (the traces' record loop,
    /// [`WalReader::feeding_is_due`] first), or with something to do now and then: `feed`
    /// returns false to end the batch after the record it was given (taken). `feed` runs
    /// inside the guard: it must not raise an ERROR (no PostgreSQL calls); a panic in it
    /// is caught there and resumed once the guard is left.
    pub fn read_batch_feeding(
        &mut self,
        mut feed: impl FnMut(&LeanHead, Option<ChangeRecord>) -> bool,
    ) {
        let mut panic = None;
        self.read_batch_with(|head, change| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed(head, change))) {
                Ok(true) => Consume::Taken,
                Ok(false) => Consume::Stop,
                Err(p) => {
                    panic = Some(p);
                    Consume::Stop
                }
            }
        });
        if let Some(p) = panic {
            // Nothing was read after the record whose feed panicked: `Held::Nothing`.
            std::panic::resume_unwind(p);
        }
    }

    /// Whether [`WalReader::read_batch_feeding`] may run now: batches are asked for, no
    /// record is held or read ahead, and no record needs more than its head and body
    /// (names, conflicts).
    pub fn feeding_is_due(&self) -> bool {
        self.batch_heads
            && !self.with_names
            && !self.with_conflicts
            && self.lean_at >= self.lean.len()
            && matches!(self.held, Held::Nothing)
    }

    /// The batch loop: `consume` says what becomes of each lean record ending at or before
    /// the bound (records past it are kept in `lean`; with `with_changes` a heap change is
    /// given with its body, and never kept: it ends the batch as the current record).
    fn read_batch_with(
        &mut self,
        mut consume: impl FnMut(&LeanHead, Option<ChangeRecord>) -> Consume,
    ) {
        let reader = self.reader;
        let bound = self.batch_bound.0;
        let with_changes = self.with_changes;
        let lean = &mut self.lean;
        lean.clear();
        self.lean_at = 0;
        self.held = unsafe {
            pg_sys::ffi::pg_guard_ffi_boundary(|| loop {
                if pg_sys::InterruptPending != 0 {
                    process_interrupts_in_batch();
                }
                let mut errormsg: *mut std::ffi::c_char = std::ptr::null_mut();
                if xlog_read_record_in_batch(reader, &mut errormsg).is_null() {
                    break Held::Null(errormsg);
                }
                let cur = compat::current(reader);
                let kind = RecordKind::classify(cur.rmid, cur.info);
                if !matches!(kind, RecordKind::Change | RecordKind::Other)
                    || transam::is_valid(cur.top_xid)
                {
                    break Held::Record;
                }
                let head = LeanHead {
                    lsn: (*reader).ReadRecPtr,
                    end_lsn: (*reader).EndRecPtr,
                    xid: cur.xid,
                    rmid: cur.rmid,
                    kind,
                };
                if with_changes && kind == RecordKind::Change {
                    if head.end_lsn > bound {
                        break Held::Record;
                    }
                    let data: &[u8] = if cur.main_data.is_null() || cur.main_data_len == 0 {
                        &[]
                    } else {
                        std::slice::from_raw_parts(
                            cur.main_data as *const u8,
                            cur.main_data_len as usize,
                        )
                    };
                    let (block, [spc, db, rel]) = compat::block0(reader);
                    let Ok(change) =
                        ChangeRecord::parse(cur.rmid, cur.info, data, block, db, rel, spc)
                    else {
                        break Held::Record;
                    };
                    let change = change.map(|mut c| {
                        c.origin = cur.origin;
                        c
                    });
                    match consume(&head, change) {
                        Consume::Taken => continue,
                        Consume::Stop => break Held::Nothing,
                        Consume::Keep => break Held::Record,
                    }
                }
                if head.end_lsn <= bound {
                    match consume(&head, None) {
                        Consume::Taken => continue,
                        Consume::Stop => break Held::Nothing,
                        Consume::Keep => {}
                    }
                }
                // Never more than one record past where the record loop stops: reading
                // further could meet an error (a removed segment, another timeline) that
                // reading one record at a time would not have.
                if lean.push(head).is_err() || lean.is_full() || head.end_lsn > bound {
                    break Held::Nothing;
                }
            })
        };
    }

    /// Reads the next record into [`WalReader::rec`]; false at the end of flushed WAL.
    ///
    /// Errors: `internal_error` ("could not read WAL at …") for a broken record,
    /// `data_corrupted` for a malformed RUNNING_XACTS, commit / abort / prepare, NEW_CID or
    /// logical message body.
    pub fn next_record(&mut self) -> bool {
        pgrx::check_for_interrupts!();
        loop {
            if let Some(h) = self.lean.get(self.lean_at).copied() {
                self.lean_at += 1;
                let rec = &mut self.rec;
                rec.head.lsn = Lsn(h.lsn);
                rec.head.end_lsn = Lsn(h.end_lsn);
                rec.head.xid = h.xid;
                rec.head.top_xid = 0;
                rec.head.rmid = h.rmid;
                rec.head.kind = h.kind;
                rec.head.name = None;
                if !matches!(rec.payload, Payload::None) {
                    rec.payload = Payload::None;
                }
                rec.conflict = None;
                return true;
            }
            match std::mem::replace(&mut self.held, Held::Nothing) {
                Held::Record => return unsafe { self.take_current() },
                Held::Null(errormsg) => return unsafe { self.at_null(errormsg) },
                Held::Nothing => {}
            }
            if self.with_names || self.with_conflicts || !self.batch_heads {
                let mut errormsg: *mut std::ffi::c_char = std::ptr::null_mut();
                unsafe {
                    if pg_sys::XLogReadRecord(self.reader, &mut errormsg).is_null() {
                        return self.at_null(errormsg);
                    }
                    return self.take_current();
                }
            }
            self.read_batch();
        }
    }

    /// The next record read ahead in a batch that needs only its head, not yet handed
    /// out (it has no top-level xid). [`WalReader::skip_lean`] hands it out without
    /// filling [`WalReader::rec`].
    #[inline]
    pub fn peek_lean(&self) -> Option<LeanHead> {
        self.lean.get(self.lean_at).copied()
    }

    /// Hands out the record [`WalReader::peek_lean`] gave.
    #[inline]
    pub fn skip_lean(&mut self) {
        self.lean_at += 1;
    }

    /// After XLogReadRecord returned NULL: false at the end of flushed WAL, else the read
    /// error as an ERROR.
    unsafe fn at_null(&mut self, errormsg: *mut std::ffi::c_char) -> bool {
        unsafe {
            if compat::end_of_wal(self.reader) {
                return false;
            }
            let at = Lsn((*self.reader).EndRecPtr);
            let why = if errormsg.is_null() {
                String::new()
            } else {
                format!(": {}", std::ffi::CStr::from_ptr(errormsg).to_string_lossy())
            };
            raise(
                C::ERRCODE_INTERNAL_ERROR,
                format!("could not read WAL at {at}{why}"),
            );
        }
    }

    /// Fills [`WalReader::rec`] from the reader's current record.
    unsafe fn take_current(&mut self) -> bool {
        unsafe {
            let cur = compat::current(self.reader);
            let kind = RecordKind::classify(cur.rmid, cur.info);
            let head = &mut self.rec.head;
            head.lsn = Lsn((*self.reader).ReadRecPtr);
            head.end_lsn = Lsn((*self.reader).EndRecPtr);
            head.xid = cur.xid;
            head.top_xid = cur.top_xid;
            head.rmid = cur.rmid;
            head.kind = kind;
            head.name = if self.with_names {
                Some(self.names.get(cur.rmid, cur.info))
            } else {
                None
            };
            let data: &[u8] = if cur.main_data.is_null() || cur.main_data_len == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(cur.main_data as *const u8, cur.main_data_len as usize)
            };
            let head = &self.rec.head;
            let payload = match kind {
                RecordKind::RunningXacts => match RunningXacts::parse(data) {
                    Ok(rx) => Payload::RunningXacts(rx),
                    Err(e) => raise(
                        C::ERRCODE_DATA_CORRUPTED,
                        format!("RUNNING_XACTS record at {} is malformed: {e}", head.lsn),
                    ),
                },
                // Parsed in the core with every count checked against the data
                // (xactdesc.c's parsers trust them).
                RecordKind::Commit
                | RecordKind::CommitPrepared
                | RecordKind::Abort
                | RecordKind::AbortPrepared
                | RecordKind::Prepare => {
                    let major = crate::adapter::server_version();
                    let parsed = if kind == RecordKind::Prepare {
                        xactdesc::parse_prepare(major, data)
                    } else {
                        xactdesc::parse_commit_or_abort(major, cur.info, data)
                    };
                    let p = parsed.unwrap_or_else(|e| {
                        raise(
                            C::ERRCODE_DATA_CORRUPTED,
                            format!("{} record at {} is malformed: {e}", kind.name(), head.lsn),
                        )
                    });
                    #[cfg(any(test, feature = "pg_test"))]
                    super::xact_check::compare(kind, &cur, &p, head.lsn);
                    Payload::from_xact(kind, p, head.xid)
                }
                RecordKind::NewCid => match NewCid::parse(data) {
                    Ok(n) => Payload::NewCid(n),
                    Err(e) => raise(
                        C::ERRCODE_DATA_CORRUPTED,
                        format!("NEW_CID record at {} is malformed: {e}", head.lsn),
                    ),
                },
                // xl_logical_message, its sizes checked against the data in the core.
                RecordKind::LogicalMessage => match LogicalMessage::parse(data) {
                    Ok(m) => Payload::Message {
                        db_id: m.db_id,
                        transactional: m.transactional,
                        prefix_len: m.prefix.len() as u64,
                        content_len: m.content.len() as u64,
                    },
                    Err(e) => raise(
                        C::ERRCODE_DATA_CORRUPTED,
                        format!("MESSAGE record at {} is malformed: {e}", head.lsn),
                    ),
                },
                RecordKind::Change if self.with_changes => {
                    let (block, [spc, db, rel]) = compat::block0(self.reader);
                    match ChangeRecord::parse(cur.rmid, cur.info, data, block, db, rel, spc) {
                        Ok(Some(mut c)) => {
                            c.origin = cur.origin;
                            Payload::Change(c)
                        }
                        Ok(None) => Payload::None,
                        Err(e) => raise(
                            C::ERRCODE_DATA_CORRUPTED,
                            format!("heap record at {} is malformed: {e}", head.lsn),
                        ),
                    }
                }
                RecordKind::Invalidations if self.with_changes => {
                    let n = data
                        .get(..4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .filter(|n| *n >= 0)
                        .unwrap_or_else(|| {
                            raise(
                                C::ERRCODE_DATA_CORRUPTED,
                                format!("INVALIDATIONS record at {} is malformed", head.lsn),
                            )
                        });
                    Payload::Invalidations { nmsgs: n as u64 }
                }
                _ => Payload::None,
            };
            let conflict = if self.with_conflicts {
                let reader = self.reader;
                record_conflict(
                    crate::adapter::server_version(),
                    cur.rmid,
                    cur.info,
                    data,
                    |block| compat::block_db(reader, block),
                )
            } else {
                None
            };
            let rec = &mut self.rec;
            if conflict.is_some() && rec.head.name.is_none() {
                rec.head.name = Some(self.names.get(cur.rmid, cur.info));
            }
            // Most records have no body to keep, before as now: nothing to drop or move.
            if !matches!((&rec.payload, &payload), (Payload::None, Payload::None)) {
                rec.payload = payload;
            }
            rec.conflict = conflict;
            true
        }
    }

    /// The time a commit or abort record read whole by [`WalReader::next_record`] was
    /// written: its `xact_time` (the first field of xl_xact_commit and xl_xact_abort),
    /// microseconds since 2000-01-01. `None` for any other record.
    pub fn xact_time(&self) -> Option<i64> {
        if !matches!(
            self.rec.head.kind,
            RecordKind::Commit
                | RecordKind::CommitPrepared
                | RecordKind::Abort
                | RecordKind::AbortPrepared
        ) {
            return None;
        }
        // SAFETY: such a record is never a lean one: it is the reader's current record,
        // whose main data stays valid until the next read.
        let cur = unsafe { compat::current(self.reader) };
        if cur.main_data.is_null() || cur.main_data_len < 8 {
            return None;
        }
        let data = unsafe { std::slice::from_raw_parts(cur.main_data as *const u8, 8) };
        Some(i64::from_ne_bytes(data.try_into().ok()?))
    }
}

impl Drop for WalReader {
    fn drop(&mut self) {
        unsafe {
            if !self.reader.is_null() {
                let private = (*self.reader).private_data;
                read_ahead::restore_own_buffer::<compat::Server>(self.reader);
                pg_sys::XLogReaderFree(self.reader);
                if !private.is_null() {
                    let buf = read_ahead::buffer::<compat::Server>(private);
                    if !buf.is_null() {
                        pg_sys::pfree(buf.cast());
                    }
                    pg_sys::pfree(private);
                }
            }
        }
    }
}
