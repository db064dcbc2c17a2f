//! Reads WAL with PostgreSQL's own XLogReader, the way contrib pg_walinspect does
//! (stop at the end of flushed WAL, never wait), and hands each record to the core as
//! plain values. Version differences of the reader live in `compat`.

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode as C;
use snapbuild_core::access::xactdesc;
use snapbuild_core::include::heapam_xlog::NewCid;
use snapbuild_core::include::transam;
use snapbuild_core::replication::decode::{Payload, RecordHead, RecordKind};
use snapbuild_core::replication::message::LogicalMessage;
use snapbuild_core::replication::slot_invalidation::{record_conflict, Conflict};
use snapbuild_core::{Lsn, RunningXacts};

use crate::adapter::raise;

/// An open XLogReader positioned at the first valid record at or after a start LSN.
pub struct WalReader {
    reader: *mut pg_sys::XLogReaderState,
    /// Fill `RecordHead::name` with pg_waldump's `rmgr/TYPE` for every record.
    pub with_names: bool,
    /// Read the recovery conflict each record carries ([`WalRecord::conflict`]).
    pub with_conflicts: bool,
    /// Read records that need only their head in batches ([`WalReader::read_batch`]).
    pub batch_heads: bool,
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

/// A direct-mapped cache of record names in front of [`record_name`]'s table: a row per
/// record asks for one name per record, nearly always one of a few.
struct RecordNames([(u32, &'static str); 64]);

impl RecordNames {
    #[inline]
    fn get(&mut self, rmid: u8, info: u8) -> &'static str {
        // Key 0 is never a valid one: `rmid << 8 | info` plus one.
        let key = (u32::from(rmid) << 8 | u32::from(info)) + 1;
        let slot = &mut self.0[(usize::from(rmid) * 31 + usize::from(info >> 4)) & 63];
        if slot.0 != key {
            *slot = (key, record_name(rmid, info));
        }
        slot.1
    }
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

/// The fields of the current record, read from whichever struct this major keeps them in.
struct Current {
    info: u8,
    rmid: u8,
    xid: u32,
    top_xid: u32,
    main_data: *mut std::ffi::c_char,
    main_data_len: u32,
}

// The XLogReader callbacks must be the server's C functions themselves (pgrx's bindings are
// Rust wrappers), so they are declared by their C symbols: the segment callbacks here, the
// page readers in each `compat`.
unsafe extern "C-unwind" {
    fn wal_segment_open(
        state: *mut pgrx::pg_sys::XLogReaderState,
        next_seg_no: pgrx::pg_sys::XLogSegNo,
        tli_p: *mut pgrx::pg_sys::TimeLineID,
    );
    fn wal_segment_close(state: *mut pgrx::pg_sys::XLogReaderState);
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

mod read_ahead {
    //! Read-ahead in front of the server's page reader: the XLogReader asks for one 8 kB
    //! page at a time and the server's page readers read each with its own pread (as
    //! pg_waldump does), so a gigabyte of WAL costs over a hundred thousand system calls.
    //! After the server's reader has read a whole page (deciding the timeline and checking
    //! how far WAL is flushed, as always), the rest of that page's segment, up to 128 kB
    //! and never past what is readable on the page's timeline, is read with one WALRead,
    //! and the following pages are served from there: the reader's `readBuf` is pointed at
    //! the page in the read-ahead buffer instead of copying it (every use of `readBuf` in
    //! xlogreader.c, 14 to 18, reads the pointer afresh after each page read, and only
    //! re-reads of the same page happen while it holds a pointer into the page). Before the
    //! server's reader runs, and before XLogReaderFree, `readBuf` is the reader's own again.
    //!
    //! It never reads past the end of the page's segment: the reader's segment
    //! bookkeeping (`seg`, set by ReadPageInternal to the page's segment) and the
    //! timeline decision (XLogReadDetermineTimeline, per segment) stay as the server's
    //! reader left them. Pages it does not hold (the first of each read, partly flushed
    //! ones, any after an error) go to the server's reader, which raises what it raises.
    use pgrx::pg_sys;

    /// Bytes read at once at most: 128 kB (16 pages), few enough to stay in the CPU's
    /// cache while the XLogReader reads them page by page.
    pub const BYTES: usize = 128 << 10;

    /// The pages read ahead: `len` bytes of WAL from LSN `start` in `buf` (allocated on
    /// first use beside the reader's private data, freed with it).
    #[repr(C)]
    pub struct ReadAhead {
        pub buf: *mut u8,
        start: u64,
        len: usize,
        /// The reader's own `readBuf` (XLogReaderAllocate's), null until the first page read.
        own: *mut std::ffi::c_char,
    }

    /// A reader's private data: the server's page reader's own first (that reader casts
    /// the pointer to its own struct), then the read-ahead.
    #[repr(C)]
    pub struct Private<S> {
        pub server: S,
        pub ahead: ReadAhead,
    }

    /// The private data `S` of a server page reader, and that reader.
    pub trait ServerPageRead {
        const READ: PageRead;
    }

    /// The read-ahead buffer of a reader's private data `private` (a `Private<S>`), null
    /// if never used.
    pub unsafe fn buffer<S>(private: *mut std::ffi::c_void) -> *mut u8 {
        unsafe { (*(private as *mut Private<S>)).ahead.buf }
    }

    /// Points `state->readBuf` back at the reader's own buffer (before XLogReaderFree,
    /// which frees it).
    ///
    /// # Safety
    /// `state` is a live reader whose private data is a `Private<S>`.
    pub unsafe fn restore_own_buffer<S>(state: *mut pg_sys::XLogReaderState) {
        unsafe {
            let private = (*state).private_data as *mut Private<S>;
            if !private.is_null() && !(*private).ahead.own.is_null() {
                (*state).readBuf = (*private).ahead.own;
            }
        }
    }

    /// The server's page reader this one stands in front of.
    pub type PageRead = unsafe extern "C-unwind" fn(
        *mut pg_sys::XLogReaderState,
        pg_sys::XLogRecPtr,
        std::ffi::c_int,
        pg_sys::XLogRecPtr,
        *mut std::ffi::c_char,
    ) -> std::ffi::c_int;

    /// The page reader (XLogPageReadCB) of a reader whose private data is a
    /// `Private<S>`: `S::READ` behind the read-ahead.
    ///
    /// # Safety
    /// The XLogReader's page-read callback contract.
    pub unsafe extern "C-unwind" fn page_read<S: ServerPageRead>(
        state: *mut pg_sys::XLogReaderState,
        target_page_ptr: pg_sys::XLogRecPtr,
        req_len: std::ffi::c_int,
        target_rec_ptr: pg_sys::XLogRecPtr,
        cur_page: *mut std::ffi::c_char,
    ) -> std::ffi::c_int {
        const PAGE: u64 = pg_sys::XLOG_BLCKSZ as u64;
        unsafe {
            let a = &raw mut (*((*state).private_data as *mut Private<S>)).ahead;
            if (*a).own.is_null() {
                // The first call: readBuf is still the reader's own.
                (*a).own = cur_page;
            }
            let held = &*a;
            if !held.buf.is_null()
                && target_page_ptr >= held.start
                && target_page_ptr + PAGE <= held.start + held.len as u64
            {
                let off = (target_page_ptr - held.start) as usize;
                (*state).readBuf = held.buf.add(off).cast();
                return PAGE as std::ffi::c_int;
            }
            // The server's reader reads into the reader's own buffer, and the read-ahead
            // buffer is about to be refilled: nothing may point into it any more.
            let own = held.own;
            (*state).readBuf = own;
            (*a).len = 0;
            let primary_before = !pg_sys::RecoveryInProgress();
            let n = S::READ(state, target_page_ptr, req_len, target_rec_ptr, own);
            if n == PAGE as std::ffi::c_int {
                fill(a, state, target_page_ptr + PAGE, primary_before);
            }
            n
        }
    }

    /// Reads the whole pages after `from` that the server's reader would read from the
    /// same segment and timeline as the page before `from`.
    unsafe fn fill(
        a: *mut ReadAhead,
        state: *mut pg_sys::XLogReaderState,
        from: u64,
        primary_before: bool,
    ) {
        const PAGE: u64 = pg_sys::XLOG_BLCKSZ as u64;
        unsafe {
            let s = &*state;
            let seg = s.segcxt.ws_segsize as u64;
            if seg == 0 {
                return;
            }
            // As read_local_xlog_page_guts bounds its reads: a historical timeline up to its
            // switch point, the current one up to the flushed (or, in recovery, replayed)
            // end, the latter only while the timeline the server's reader chose is still the
            // current one.
            let upto = if s.currTLIValidUntil != 0 {
                s.currTLIValidUntil
            } else if primary_before && !pg_sys::RecoveryInProgress() {
                super::compat::flush_ptr()
            } else if pg_sys::RecoveryInProgress() {
                let mut tli: pg_sys::TimeLineID = 0;
                let upto = pg_sys::GetXLogReplayRecPtr(&mut tli);
                if tli != s.currTLI {
                    return;
                }
                upto
            } else {
                return;
            };
            let segment_end = ((from - PAGE) / seg + 1) * seg;
            let end = segment_end.min(upto / PAGE * PAGE).min(from + BYTES as u64);
            if end <= from {
                return;
            }
            if (*a).buf.is_null() {
                // The private data is a palloc'd chunk of its own (`a` lies inside it).
                let cx = pg_sys::GetMemoryChunkContext(s.private_data);
                (*a).buf = pg_sys::MemoryContextAlloc(cx, BYTES).cast();
            }
            let mut err: pg_sys::WALReadError = std::mem::zeroed();
            // A failed read holds nothing: the server's reader meets the page itself.
            if pg_sys::WALRead(
                state,
                (*a).buf.cast(),
                from,
                (end - from) as _,
                s.currTLI,
                &mut err,
            ) {
                (*a).start = from;
                (*a).len = (end - from) as usize;
            }
        }
    }
}

#[cfg(not(feature = "pg14"))]
mod compat {
    //! 15+: `read_local_xlog_page_no_wait` and `XLogFindNextRecord` exist in the backend,
    //! and the decoded record lives in `state->record`.
    use super::read_ahead::{self, Private, ServerPageRead};
    use super::{wal_segment_close, wal_segment_open, Current};
    use pgrx::pg_sys;

    unsafe extern "C-unwind" {
        fn read_local_xlog_page_no_wait(
            state: *mut pg_sys::XLogReaderState,
            target_page_ptr: pg_sys::XLogRecPtr,
            req_len: std::ffi::c_int,
            target_rec_ptr: pg_sys::XLogRecPtr,
            cur_page: *mut std::ffi::c_char,
        ) -> std::ffi::c_int;
    }

    /// The server page reader's private data: its end-of-WAL flag.
    pub type Server = pg_sys::ReadLocalXLogPageNoWaitPrivate;

    impl ServerPageRead for Server {
        const READ: read_ahead::PageRead = read_local_xlog_page_no_wait;
    }

    pub unsafe fn allocate() -> *mut pg_sys::XLogReaderState {
        let private = pg_sys::palloc0(std::mem::size_of::<Private<Server>>());
        let mut routine = pg_sys::XLogReaderRoutine {
            page_read: Some(read_ahead::page_read::<Server>),
            segment_open: Some(wal_segment_open),
            segment_close: Some(wal_segment_close),
        };
        pg_sys::XLogReaderAllocate(
            pg_sys::wal_segment_size,
            std::ptr::null(),
            &mut routine,
            private,
        )
    }

    /// The first valid record at or after `start`, 0 if none.
    pub unsafe fn find_first(reader: *mut pg_sys::XLogReaderState, start: u64) -> u64 {
        pg_sys::XLogFindNextRecord(reader, start)
    }

    pub unsafe fn end_of_wal(reader: *mut pg_sys::XLogReaderState) -> bool {
        let private = (*reader).private_data as *mut Private<Server>;
        (*private).server.end_of_wal
    }

    pub unsafe fn current(reader: *mut pg_sys::XLogReaderState) -> Current {
        let d = (*reader).record;
        Current {
            info: (*d).header.xl_info,
            rmid: (*d).header.xl_rmid,
            xid: (*d).header.xl_xid.into_inner(),
            top_xid: (*d).toplevel_xid.into_inner(),
            main_data: (*d).main_data,
            main_data_len: (*d).main_data_len,
        }
    }

    /// How far WAL can be read: `GetFlushRecPtr` on a primary, `GetXLogReplayRecPtr` on a
    /// standby (as read_local_xlog_page_guts and pg_walinspect's GetCurrentLSN choose).
    pub unsafe fn flush_ptr() -> u64 {
        if pg_sys::RecoveryInProgress() {
            pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut())
        } else {
            pg_sys::GetFlushRecPtr(std::ptr::null_mut())
        }
    }

    /// rm_name and rm_identify of a resource manager, if it exists.
    pub unsafe fn rmgr(rmid: u8) -> Option<pg_sys::RmgrData> {
        pg_sys::RmgrIdExists(rmid as pg_sys::RmgrId)
            .then(|| pg_sys::GetRmgr(rmid as pg_sys::RmgrId))
    }

    /// The database of the relation of the current record's block reference `block`
    /// (XLogRecGetBlockTagExtended), if it has one. 16+ (RelFileLocator); 15 never
    /// invalidates slots in recovery.
    #[cfg(not(feature = "pg15"))]
    pub unsafe fn block_db(reader: *mut pg_sys::XLogReaderState, block: u8) -> Option<u32> {
        let mut loc = pg_sys::RelFileLocator::default();
        pg_sys::XLogRecGetBlockTagExtended(
            reader,
            block,
            &mut loc,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
        .then(|| loc.dbOid.to_u32())
    }

    #[cfg(feature = "pg15")]
    pub unsafe fn block_db(_reader: *mut pg_sys::XLogReaderState, _block: u8) -> Option<u32> {
        None
    }
}

#[cfg(feature = "pg14")]
mod compat {
    //! 14: no no-wait page reader and no backend XLogFindNextRecord; the decoded record's
    //! fields sit in the reader itself. The page callback stops at the flushed end of WAL
    //! instead of waiting there, as 15's read_local_xlog_page_no_wait does.
    use super::read_ahead::{self, Private, ServerPageRead};
    use super::{wal_segment_close, wal_segment_open, Current};
    use pgrx::pg_sys;

    /// The private data of the page reader below: its end-of-WAL flag.
    #[repr(C)]
    pub struct Server {
        end_of_wal: bool,
    }

    impl ServerPageRead for Server {
        const READ: read_ahead::PageRead = read_page_no_wait;
    }

    unsafe extern "C-unwind" {
        fn read_local_xlog_page(
            state: *mut pg_sys::XLogReaderState,
            target_page_ptr: pg_sys::XLogRecPtr,
            req_len: std::ffi::c_int,
            target_rec_ptr: pg_sys::XLogRecPtr,
            cur_page: *mut std::ffi::c_char,
        ) -> std::ffi::c_int;
        fn GetFlushRecPtr() -> pg_sys::XLogRecPtr;
    }

    /// Page reader that reports the end of WAL instead of waiting for more.
    unsafe extern "C-unwind" fn read_page_no_wait(
        state: *mut pg_sys::XLogReaderState,
        target_page_ptr: pg_sys::XLogRecPtr,
        req_len: std::ffi::c_int,
        target_rec_ptr: pg_sys::XLogRecPtr,
        cur_page: *mut std::ffi::c_char,
    ) -> std::ffi::c_int {
        if target_page_ptr + req_len as u64 > flush_ptr() {
            (*((*state).private_data as *mut Private<Server>))
                .server
                .end_of_wal = true;
            return -1;
        }
        read_local_xlog_page(state, target_page_ptr, req_len, target_rec_ptr, cur_page)
    }

    pub unsafe fn allocate() -> *mut pg_sys::XLogReaderState {
        let private = pg_sys::palloc0(std::mem::size_of::<Private<Server>>());
        let mut routine = pg_sys::XLogReaderRoutine {
            page_read: Some(read_ahead::page_read::<Server>),
            segment_open: Some(wal_segment_open),
            segment_close: Some(wal_segment_close),
        };
        pg_sys::XLogReaderAllocate(
            pg_sys::wal_segment_size,
            std::ptr::null(),
            &mut routine,
            private,
        )
    }

    /// 14's backend cannot search for a record boundary: start must be one (a slot's
    /// restart_lsn always is).
    pub unsafe fn find_first(reader: *mut pg_sys::XLogReaderState, start: u64) -> u64 {
        pg_sys::XLogBeginRead(reader, start);
        start
    }

    pub unsafe fn end_of_wal(reader: *mut pg_sys::XLogReaderState) -> bool {
        (*((*reader).private_data as *mut Private<Server>))
            .server
            .end_of_wal
    }

    pub unsafe fn current(reader: *mut pg_sys::XLogReaderState) -> Current {
        let r = &*reader;
        let h = &*r.decoded_record;
        Current {
            info: h.xl_info,
            rmid: h.xl_rmid,
            xid: h.xl_xid.into_inner(),
            top_xid: r.toplevel_xid.into_inner(),
            main_data: r.main_data,
            main_data_len: r.main_data_len,
        }
    }

    /// How far WAL can be read: `GetFlushRecPtr` on a primary, `GetXLogReplayRecPtr` on a
    /// standby (as read_local_xlog_page does).
    pub unsafe fn flush_ptr() -> u64 {
        if pg_sys::RecoveryInProgress() {
            pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut())
        } else {
            GetFlushRecPtr()
        }
    }

    pub unsafe fn rmgr(rmid: u8) -> Option<pg_sys::RmgrData> {
        ((rmid as u32) < pg_sys::RmgrIds::RM_NEXT_ID as u32)
            .then(|| *pg_sys::RmgrTable.as_ptr().add(rmid as usize))
    }

    /// 14 never invalidates slots in recovery.
    pub unsafe fn block_db(_reader: *mut pg_sys::XLogReaderState, _block: u8) -> Option<u32> {
        None
    }
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
        unsafe {
            let reader = compat::allocate();
            if reader.is_null() {
                raise(
                    C::ERRCODE_OUT_OF_MEMORY,
                    "out of memory while allocating a WAL reading processor",
                );
            }
            let this = WalReader::new(reader);
            if compat::find_first(reader, start.0) == 0 {
                raise(
                    C::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("could not find a valid record after {start}"),
                );
            }
            this
        }
    }

    /// Like [`WalReader::open`], but `None` (not an ERROR) when no complete record can be
    /// found at or after `start` yet (e.g. the next one is not entirely flushed).
    pub fn try_open(start: Lsn) -> Option<Self> {
        if start.0 < pg_sys::XLOG_BLCKSZ as u64 {
            return None;
        }
        unsafe {
            let reader = compat::allocate();
            if reader.is_null() {
                raise(
                    C::ERRCODE_OUT_OF_MEMORY,
                    "out of memory while allocating a WAL reading processor",
                );
            }
            let this = WalReader::new(reader);
            (compat::find_first(reader, start.0) != 0).then_some(this)
        }
    }

    fn new(reader: *mut pg_sys::XLogReaderState) -> Self {
        WalReader {
            reader,
            with_names: false,
            with_conflicts: false,
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
        self.read_batch_with(|_| Consume::Keep);
    }

    /// [`WalReader::read_batch`] that hands each lean record ending at or before
    /// `batch_bound` to `feed` as soon as it is read (nothing is kept of it) and goes on
    /// reading, so that the batch ends only at a record that needs more than its head,
    /// the end of WAL, an error, or the first record past the bound (kept in `lean`).
    /// For a caller with nothing to do between such records (the traces' record loop,
    /// [`WalReader::feeding_is_due`] first), or with something to do now and then: `feed`
    /// returns false to end the batch after the record it was given (taken). `feed` runs
    /// inside the guard: it must not raise an ERROR (no PostgreSQL calls); a panic in it
    /// is caught there and resumed once the guard is left.
    pub fn read_batch_feeding(&mut self, mut feed: impl FnMut(&LeanHead) -> bool) {
        let mut panic = None;
        self.read_batch_with(|head| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| feed(head))) {
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
    /// record is held or read ahead, and no record needs more than its head (names,
    /// conflicts).
    pub fn feeding_is_due(&self) -> bool {
        self.batch_heads
            && !self.with_names
            && !self.with_conflicts
            && self.lean_at >= self.lean.len()
            && matches!(self.held, Held::Nothing)
    }

    /// The batch loop: `consume` says what becomes of each lean record ending at or before
    /// the bound (records past it are kept in `lean`).
    fn read_batch_with(&mut self, mut consume: impl FnMut(&LeanHead) -> Consume) {
        let reader = self.reader;
        let bound = self.batch_bound.0;
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
                if head.end_lsn <= bound {
                    match consume(&head) {
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
                    xact_check::compare(kind, &cur, &p, head.lsn);
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
                    },
                    Err(e) => raise(
                        C::ERRCODE_DATA_CORRUPTED,
                        format!("MESSAGE record at {} is malformed: {e}", head.lsn),
                    ),
                },
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
}

/// Whether the WAL segment holding `lsn` has not been removed yet
/// (XLogGetLastRemovedSegno).
pub fn is_available(lsn: Lsn) -> bool {
    unsafe {
        let seg_size = pg_sys::wal_segment_size as u64;
        seg_size == 0 || lsn.0 / seg_size > pg_sys::XLogGetLastRemovedSegno()
    }
}

/// ERROR `undefined_file` (58P01) naming `start` if its WAL segment was already removed.
pub fn check_available(start: Lsn) {
    if !is_available(start) {
        raise(
            C::ERRCODE_UNDEFINED_FILE,
            format!("WAL at {start} has already been removed"),
        );
    }
}

/// When the WAL segment holding `lsn` was last written (its file's modification time in
/// pg_wal, on the newest timeline that has it), microseconds since 2000-01-01 UTC: the
/// record at `lsn` was written no later. `None` when the file is gone or unreadable.
pub fn segment_written_at(lsn: Lsn) -> Option<i64> {
    let seg = snapbuild_core::include::xlogdefs::xlog_file_name_segment(lsn, unsafe {
        pg_sys::wal_segment_size as u64
    });
    let mut best: Option<(String, std::fs::Metadata)> = None;
    for e in std::fs::read_dir("pg_wal").ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.len() == 24 && name.ends_with(&seg) && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            if best.as_ref().is_none_or(|(n, _)| name > *n) {
                if let Ok(m) = e.metadata() {
                    best = Some((name, m));
                }
            }
        }
    }
    let modified = best?.1.modified().ok()?;
    let unix = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(snapbuild_core::include::timestamp::timestamp_from_unix_micros(unix.as_micros() as i64))
}

/// How far WAL can be read now: the flush position on a primary (`GetFlushRecPtr`), the
/// end of the last replayed record on a standby (`GetXLogReplayRecPtr`, on the timeline
/// recovery replays; GetFlushRecPtr is meaningless during recovery). The WAL reader's page
/// callback (xlogutils.c read_local_xlog_page_guts) reads up to the same position.
pub fn flush_lsn() -> Lsn {
    Lsn(unsafe { compat::flush_ptr() })
}

/// Whether this server is in recovery (a standby): `RecoveryInProgress`.
pub fn in_recovery() -> bool {
    unsafe { pg_sys::RecoveryInProgress() }
}

/// On a standby: the end of the last replayed record and its timeline
/// (`GetXLogReplayRecPtr`); `None` on a primary.
pub fn replay_position() -> Option<(Lsn, u32)> {
    unsafe {
        pg_sys::RecoveryInProgress().then(|| {
            let mut tli: pg_sys::TimeLineID = 0;
            let lsn = pg_sys::GetXLogReplayRecPtr(&mut tli);
            (Lsn(lsn), tli)
        })
    }
}

/// ERROR `feature_not_supported` (0A000, the SQLSTATE logical.c
/// CheckLogicalDecodingRequirements raises for "logical decoding cannot be used while in
/// recovery" before 16) on a standby of PostgreSQL 14 or 15, which cannot decode in
/// recovery: a replay there would describe a decoder the server can never run. `what`
/// names the function's subject.
pub fn check_decoding_possible(what: &str) {
    let v = crate::adapter::server_version();
    if v.major < 16 && in_recovery() {
        crate::adapter::raise_with_detail(
            C::ERRCODE_FEATURE_NOT_SUPPORTED,
            "logical decoding on a standby needs PostgreSQL 16 or later",
            format!(
                "This server (PostgreSQL {}) is in recovery; {what} replays a logical decoder, which PostgreSQL {} cannot run on a standby. Run it on the primary.",
                v.major, v.major
            ),
        );
    }
}

/// pg_waldump's `rmgr/TYPE` for a record, from a per-backend table of the names met so
/// far: each distinct (rmgr, info) is named once (rm_name and rm_identify, which depend on
/// nothing else) and kept for the backend's life. At most 256 × 256 names of a few dozen
/// bytes each; WAL holds a few dozen kinds in practice.
fn record_name(rmid: u8, info: u8) -> &'static str {
    thread_local! {
        static NAMES: std::cell::RefCell<rustc_hash::FxHashMap<(u8, u8), &'static str>> =
            std::cell::RefCell::new(Default::default());
    }
    NAMES.with(|names| {
        *names
            .borrow_mut()
            .entry((rmid, info))
            .or_insert_with(|| Box::leak(name_record(rmid, info).into_boxed_str()))
    })
}

/// rm_name/rm_identify of (rmgr, info), as pg_waldump prints it.
fn name_record(rmid: u8, info: u8) -> String {
    unsafe {
        let Some(rmgr) = compat::rmgr(rmid) else {
            return format!("custom {rmid}/{info:02X}");
        };
        let name = if rmgr.rm_name.is_null() {
            format!("{rmid}")
        } else {
            std::ffi::CStr::from_ptr(rmgr.rm_name)
                .to_string_lossy()
                .into_owned()
        };
        let ty = rmgr
            .rm_identify
            .map(|f| f(info))
            .filter(|p| !p.is_null())
            .map(|p| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
            .unwrap_or_else(|| format!("UNKNOWN ({:X})", info & !0x0F));
        format!("{name}/{ty}")
    }
}

/// In-server check of the core's xact record parsers: every commit, abort and prepare
/// record read is parsed by xactdesc.c too, and differences are collected.
#[cfg(any(test, feature = "pg_test"))]
pub mod xact_check {
    use super::*;
    use snapbuild_core::access::xactdesc::ParsedXact;
    use std::cell::RefCell;

    thread_local! {
        /// (records compared, differences found)
        pub static SEEN: RefCell<(usize, Vec<String>)> = const { RefCell::new((0, Vec::new())) };
    }

    fn gid_text(gid: &[std::ffi::c_char]) -> String {
        let bytes: Vec<u8> = gid
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    unsafe fn xid_slice(p: *mut pg_sys::TransactionId, n: std::ffi::c_int) -> Vec<u32> {
        if p.is_null() || n <= 0 {
            return Vec::new();
        }
        std::slice::from_raw_parts(p, n as usize)
            .iter()
            .map(|x| x.into_inner())
            .collect()
    }

    pub(super) unsafe fn compare(kind: RecordKind, cur: &Current, ours: &ParsedXact, lsn: Lsn) {
        let theirs = match kind {
            RecordKind::Commit | RecordKind::CommitPrepared => {
                let mut p: pg_sys::xl_xact_parsed_commit = std::mem::zeroed();
                pg_sys::ParseCommitRecord(
                    cur.info,
                    cur.main_data as *mut pg_sys::xl_xact_commit,
                    &mut p,
                );
                (
                    p.xinfo,
                    p.dbId.to_u32(),
                    xid_slice(p.subxacts, p.nsubxacts),
                    p.twophase_xid.into_inner(),
                    gid_text(&p.twophase_gid),
                )
            }
            RecordKind::Abort | RecordKind::AbortPrepared => {
                let mut p: pg_sys::xl_xact_parsed_abort = std::mem::zeroed();
                pg_sys::ParseAbortRecord(
                    cur.info,
                    cur.main_data as *mut pg_sys::xl_xact_abort,
                    &mut p,
                );
                (
                    p.xinfo,
                    p.dbId.to_u32(),
                    xid_slice(p.subxacts, p.nsubxacts),
                    p.twophase_xid.into_inner(),
                    gid_text(&p.twophase_gid),
                )
            }
            _ => {
                let mut p: pg_sys::xl_xact_parsed_prepare = std::mem::zeroed();
                pg_sys::ParsePrepareRecord(
                    cur.info,
                    cur.main_data as *mut pg_sys::xl_xact_prepare,
                    &mut p,
                );
                let invals = if p.nmsgs > 0 {
                    pg_sys::XACT_XINFO_HAS_INVALS
                } else {
                    0
                };
                (
                    invals,
                    p.dbId.to_u32(),
                    xid_slice(p.subxacts, p.nsubxacts),
                    p.twophase_xid.into_inner(),
                    gid_text(&p.twophase_gid),
                )
            }
        };
        let mine = (
            ours.xinfo,
            ours.db_id,
            ours.subxacts.clone(),
            ours.twophase_xid,
            ours.gid.clone(),
        );
        SEEN.with(|s| {
            let mut s = s.borrow_mut();
            s.0 += 1;
            if mine != theirs {
                s.1.push(format!(
                    "{lsn} {}: ours {mine:?}, xactdesc.c {theirs:?}",
                    kind.name()
                ));
            }
            // A commit or abort record holds exactly its parts.
            if kind != RecordKind::Prepare && ours.parsed_len != cur.main_data_len as usize {
                s.1.push(format!(
                    "{lsn} {}: parts cover {} of {} bytes",
                    kind.name(),
                    ours.parsed_len,
                    cur.main_data_len
                ));
            }
        });
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
