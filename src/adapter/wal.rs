//! Reads WAL with PostgreSQL's own XLogReader, the way contrib pg_walinspect does
//! (`read_local_xlog_page_no_wait`: stop at the end of flushed WAL, never wait), and
//! hands each record to the core as plain values.

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode as C;
use snapbuild_core::records::RecordKind;
use snapbuild_core::replay::{Payload, RecordHead};
use snapbuild_core::{Lsn, RunningXacts};

// The XLogReader callbacks must be the server's C functions themselves (pgrx's
// bindings are Rust wrappers), so they are declared here by their C symbols.
unsafe extern "C-unwind" {
    fn read_local_xlog_page_no_wait(
        state: *mut pg_sys::XLogReaderState,
        target_page_ptr: pg_sys::XLogRecPtr,
        req_len: std::ffi::c_int,
        target_rec_ptr: pg_sys::XLogRecPtr,
        cur_page: *mut std::ffi::c_char,
    ) -> std::ffi::c_int;
    fn wal_segment_open(
        state: *mut pg_sys::XLogReaderState,
        next_seg_no: pg_sys::XLogSegNo,
        tli_p: *mut pg_sys::TimeLineID,
    );
    fn wal_segment_close(state: *mut pg_sys::XLogReaderState);
}

/// An open XLogReader positioned at the first valid record at or after a start LSN.
pub struct WalReader {
    reader: *mut pg_sys::XLogReaderState,
    /// Fill `RecordHead::name` with pg_waldump's `rmgr/TYPE` for every record.
    pub with_names: bool,
}

/// One record, decoded far enough for the snapshot builder.
pub struct WalRecord {
    pub head: RecordHead,
    pub payload: Payload,
}

impl WalReader {
    /// Mirrors pg_walinspect's InitXLogReaderState: allocate a reader over local WAL
    /// and find the first valid record at or after `start`.
    ///
    /// Errors: `invalid_parameter_value` when `start` is below the first page or no
    /// record can be found after it; whatever the WAL segment reader raises (e.g. a
    /// removed segment) propagates with the server's own SQLSTATE.
    pub fn open(start: Lsn) -> Self {
        if start.0 < pg_sys::XLOG_BLCKSZ as u64 {
            crate::adapter::raise(
                C::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("could not read WAL at LSN {start}"),
            );
        }
        unsafe {
            let private =
                pg_sys::palloc0(std::mem::size_of::<pg_sys::ReadLocalXLogPageNoWaitPrivate>());
            let mut routine = pg_sys::XLogReaderRoutine {
                page_read: Some(read_local_xlog_page_no_wait),
                segment_open: Some(wal_segment_open),
                segment_close: Some(wal_segment_close),
            };
            let reader = pg_sys::XLogReaderAllocate(
                pg_sys::wal_segment_size,
                std::ptr::null(),
                &mut routine,
                private,
            );
            if reader.is_null() {
                crate::adapter::raise(
                    C::ERRCODE_OUT_OF_MEMORY,
                    "out of memory while allocating a WAL reading processor",
                );
            }
            let this = WalReader {
                reader,
                with_names: false,
            };
            let first = pg_sys::XLogFindNextRecord(reader, start.0);
            if first == 0 {
                crate::adapter::raise(
                    C::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("could not find a valid record after {start}"),
                );
            }
            this
        }
    }

    /// Reads the next record; `None` at the end of flushed WAL.
    ///
    /// Errors: `internal_error` ("could not read WAL at …") for a broken record.
    pub fn next_record(&mut self) -> Option<WalRecord> {
        pgrx::check_for_interrupts!();
        unsafe {
            let mut errormsg: *mut std::ffi::c_char = std::ptr::null_mut();
            let rec = pg_sys::XLogReadRecord(self.reader, &mut errormsg);
            if rec.is_null() {
                let private =
                    (*self.reader).private_data as *mut pg_sys::ReadLocalXLogPageNoWaitPrivate;
                if (*private).end_of_wal {
                    return None;
                }
                let at = Lsn((*self.reader).EndRecPtr);
                let why = if errormsg.is_null() {
                    String::new()
                } else {
                    format!(": {}", std::ffi::CStr::from_ptr(errormsg).to_string_lossy())
                };
                crate::adapter::raise(
                    C::ERRCODE_INTERNAL_ERROR,
                    format!("could not read WAL at {at}{why}"),
                );
            }
            let r = self.reader;
            let d = (*r).record;
            let info = (*d).header.xl_info;
            let rmid = (*d).header.xl_rmid;
            let kind = RecordKind::classify(rmid, info);
            let head = RecordHead {
                lsn: Lsn((*r).ReadRecPtr),
                end_lsn: Lsn((*r).EndRecPtr),
                xid: (*d).header.xl_xid.into_inner(),
                top_xid: (*d).toplevel_xid.into_inner(),
                rmid,
                kind,
                name: if self.with_names {
                    Some(record_name(rmid, info))
                } else {
                    None
                },
            };
            let data: &[u8] = if (*d).main_data.is_null() || (*d).main_data_len == 0 {
                &[]
            } else {
                std::slice::from_raw_parts((*d).main_data as *const u8, (*d).main_data_len as usize)
            };
            let payload = match kind {
                RecordKind::RunningXacts => match RunningXacts::parse(data) {
                    Ok(rx) => Payload::RunningXacts(rx),
                    Err(e) => crate::adapter::raise(
                        C::ERRCODE_DATA_CORRUPTED,
                        format!("RUNNING_XACTS record at {} is malformed: {e}", head.lsn),
                    ),
                },
                RecordKind::Commit | RecordKind::CommitPrepared if !data.is_empty() => {
                    let mut parsed: pg_sys::xl_xact_parsed_commit = std::mem::zeroed();
                    pg_sys::ParseCommitRecord(
                        info,
                        (*d).main_data as *mut pg_sys::xl_xact_commit,
                        &mut parsed,
                    );
                    let subxacts = xid_slice(parsed.subxacts, parsed.nsubxacts);
                    let xid = if parsed.twophase_xid != pg_sys::TransactionId::INVALID {
                        parsed.twophase_xid.into_inner()
                    } else {
                        head.xid
                    };
                    Payload::Commit {
                        xid,
                        subxacts,
                        has_invals: parsed.xinfo & pg_sys::XACT_XINFO_HAS_INVALS != 0,
                        db_id: parsed.dbId.to_u32(),
                    }
                }
                RecordKind::Abort | RecordKind::AbortPrepared if !data.is_empty() => {
                    let mut parsed: pg_sys::xl_xact_parsed_abort = std::mem::zeroed();
                    pg_sys::ParseAbortRecord(
                        info,
                        (*d).main_data as *mut pg_sys::xl_xact_abort,
                        &mut parsed,
                    );
                    let subxacts = xid_slice(parsed.subxacts, parsed.nsubxacts);
                    let xid = if parsed.twophase_xid != pg_sys::TransactionId::INVALID {
                        parsed.twophase_xid.into_inner()
                    } else {
                        head.xid
                    };
                    Payload::Abort { xid, subxacts }
                }
                // xl_logical_message: Oid dbId, then bool transactional.
                RecordKind::LogicalMessage if data.len() > 4 => Payload::Message {
                    transactional: data[4] != 0,
                },
                _ => Payload::None,
            };
            Some(WalRecord { head, payload })
        }
    }
}

/// pg_waldump's `rmgr/TYPE` for a record (rm_name and rm_identify).
fn record_name(rmid: u8, info: u8) -> String {
    unsafe {
        if !pg_sys::RmgrIdExists(rmid as pg_sys::RmgrId) {
            return format!("custom {rmid}/{info:02X}");
        }
        let rmgr = pg_sys::GetRmgr(rmid as pg_sys::RmgrId);
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

unsafe fn xid_slice(p: *mut pg_sys::TransactionId, n: std::ffi::c_int) -> Vec<u32> {
    if p.is_null() || n <= 0 {
        return Vec::new();
    }
    std::slice::from_raw_parts(p, n as usize)
        .iter()
        .map(|x| x.into_inner())
        .collect()
}

impl Drop for WalReader {
    fn drop(&mut self) {
        unsafe {
            if !self.reader.is_null() {
                let private = (*self.reader).private_data;
                pg_sys::XLogReaderFree(self.reader);
                if !private.is_null() {
                    pg_sys::pfree(private);
                }
            }
        }
    }
}
