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
            super::position::flush_ptr()
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
