//! What the WAL reader needs that differs between PostgreSQL 14 and 15+: the page reader
//! that stops at the end of flushed WAL instead of waiting (15's
//! read_local_xlog_page_no_wait, or its equivalent on 14), finding the first record,
//! where the decoded record's fields live and the resource manager table. What is the
//! same on every major (allocating the reader, its end-of-WAL flag) is written once here;
//! each major's own part is in `pg15_up` or `pg14`. (How far WAL can be read is
//! `position.rs`'s.)

use super::read_ahead::{self, Private};
use pgrx::pg_sys;

#[cfg(not(feature = "pg14"))]
pub use pg15_up::{current, find_first, rmgr, Server};

#[cfg(feature = "pg14")]
pub use pg14::{current, find_first, rmgr, Server};

/// The fields of the current record, read from whichever struct this major keeps them in.
pub struct Current {
    pub info: u8,
    pub rmid: u8,
    pub xid: u32,
    pub top_xid: u32,
    pub main_data: *mut std::ffi::c_char,
    pub main_data_len: u32,
    /// `XLogRecGetOrigin`: the replication origin the record came from (0: this node).
    pub origin: u16,
}

// The XLogReader callbacks must be the server's C functions themselves (pgrx's bindings are
// Rust wrappers), so they are declared by their C symbols: the segment callbacks here, the
// page readers in each major's part.
unsafe extern "C-unwind" {
    fn wal_segment_open(
        state: *mut pgrx::pg_sys::XLogReaderState,
        next_seg_no: pgrx::pg_sys::XLogSegNo,
        tli_p: *mut pgrx::pg_sys::TimeLineID,
    );
    fn wal_segment_close(state: *mut pgrx::pg_sys::XLogReaderState);
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

pub unsafe fn end_of_wal(reader: *mut pg_sys::XLogReaderState) -> bool {
    let private = (*reader).private_data as *mut Private<Server>;
    (*private).server.end_of_wal
}

/// The database of the relation of the current record's block reference `block`, if it
/// has one (XLogRecGetBlockTagExtended's, read from the decoded record). 16+: 14 and 15
/// never invalidate slots in recovery.
#[cfg(not(any(feature = "pg14", feature = "pg15")))]
pub unsafe fn block_db(reader: *mut pg_sys::XLogReaderState, block: u8) -> Option<u32> {
    decoded_block(reader, block).map(|b| block_tag(b)[1])
}

/// Block 0 of the current record: its data (None without any) and its relation's
/// tablespace, database and relfilenumber (zeros without a block 0). Read from the
/// decoded record's fields as XLogRecGetBlockData and XLogRecGetBlockTagExtended read
/// them (no call into the server: this runs for every heap change of a batch).
pub unsafe fn block0<'a>(reader: *mut pg_sys::XLogReaderState) -> (Option<&'a [u8]>, [u32; 3]) {
    let Some(b) = decoded_block(reader, 0) else {
        return (None, [0; 3]);
    };
    let data = (b.has_data && !b.data.is_null())
        .then(|| std::slice::from_raw_parts(b.data as *const u8, b.data_len as usize));
    (data, block_tag(b))
}

/// Block reference `id` of the decoded record, when it is in use (XLogRecHasBlockRef).
#[cfg(not(feature = "pg14"))]
unsafe fn decoded_block<'a>(
    reader: *mut pg_sys::XLogReaderState,
    id: u8,
) -> Option<&'a pg_sys::DecodedBkpBlock> {
    let d = (*reader).record;
    if d.is_null() || (*d).max_block_id < id as i32 {
        return None;
    }
    let b = &*(*d).blocks.as_ptr().add(id as usize);
    b.in_use.then_some(b)
}

#[cfg(feature = "pg14")]
unsafe fn decoded_block<'a>(
    reader: *mut pg_sys::XLogReaderState,
    id: u8,
) -> Option<&'a pg_sys::DecodedBkpBlock> {
    let r = &*reader;
    if r.max_block_id < id as i32 {
        return None;
    }
    let b = r.blocks.get(id as usize)?;
    b.in_use.then_some(b)
}

#[cfg(not(any(feature = "pg14", feature = "pg15")))]
fn block_tag(b: &pg_sys::DecodedBkpBlock) -> [u32; 3] {
    let l = &b.rlocator;
    [l.spcOid.to_u32(), l.dbOid.to_u32(), l.relNumber.to_u32()]
}

#[cfg(any(feature = "pg14", feature = "pg15"))]
fn block_tag(b: &pg_sys::DecodedBkpBlock) -> [u32; 3] {
    let n = &b.rnode;
    [n.spcNode.to_u32(), n.dbNode.to_u32(), n.relNode.to_u32()]
}

/// 14 and 15 never invalidate slots in recovery.
#[cfg(any(feature = "pg14", feature = "pg15"))]
pub unsafe fn block_db(_reader: *mut pg_sys::XLogReaderState, _block: u8) -> Option<u32> {
    None
}

#[cfg(not(feature = "pg14"))]
mod pg15_up {
    //! 15+: `read_local_xlog_page_no_wait` and `XLogFindNextRecord` exist in the backend,
    //! and the decoded record lives in `state->record`.
    use super::super::read_ahead::{self, ServerPageRead};
    use super::Current;
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

    /// The first valid record at or after `start`, 0 if none.
    pub unsafe fn find_first(reader: *mut pg_sys::XLogReaderState, start: u64) -> u64 {
        pg_sys::XLogFindNextRecord(reader, start)
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
            origin: (*d).record_origin,
        }
    }

    /// rm_name and rm_identify of a resource manager, if it exists.
    pub unsafe fn rmgr(rmid: u8) -> Option<pg_sys::RmgrData> {
        pg_sys::RmgrIdExists(rmid as pg_sys::RmgrId)
            .then(|| pg_sys::GetRmgr(rmid as pg_sys::RmgrId))
    }
}

#[cfg(feature = "pg14")]
mod pg14 {
    //! 14: no no-wait page reader and no backend XLogFindNextRecord; the decoded record's
    //! fields sit in the reader itself. The page callback stops at the flushed end of WAL
    //! instead of waiting there, as 15's read_local_xlog_page_no_wait does.
    use super::super::position::flush_ptr;
    use super::super::read_ahead::{self, Private, ServerPageRead};
    use super::Current;
    use pgrx::pg_sys;

    /// The private data of the page reader below: its end-of-WAL flag.
    #[repr(C)]
    pub struct Server {
        pub end_of_wal: bool,
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

    /// 14's backend cannot search for a record boundary: start must be one (a slot's
    /// restart_lsn always is).
    pub unsafe fn find_first(reader: *mut pg_sys::XLogReaderState, start: u64) -> u64 {
        pg_sys::XLogBeginRead(reader, start);
        start
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
            origin: r.record_origin,
        }
    }

    pub unsafe fn rmgr(rmid: u8) -> Option<pg_sys::RmgrData> {
        ((rmid as u32) < pg_sys::RmgrIds::RM_NEXT_ID as u32)
            .then(|| *pg_sys::RmgrTable.as_ptr().add(rmid as usize))
    }
}
