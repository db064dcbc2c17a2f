//! Where WAL stands on this server: how far it can be read (the flush position, or the
//! replay position on a standby, as xlogutils.c read_local_xlog_page_guts bounds its
//! reads), whether a segment is still in pg_wal (XLogGetLastRemovedSegno), when a
//! segment was last written, and whether the server is in recovery.

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode as C;
use snapbuild_core::Lsn;

use crate::adapter::raise;

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
    Lsn(unsafe { flush_ptr() })
}

/// How far WAL can be read, as an `XLogRecPtr`: `GetFlushRecPtr` on a primary,
/// `GetXLogReplayRecPtr` on a standby (as read_local_xlog_page_guts and pg_walinspect's
/// GetCurrentLSN choose; on 14, read_local_xlog_page).
pub unsafe fn flush_ptr() -> u64 {
    unsafe {
        if pg_sys::RecoveryInProgress() {
            pg_sys::GetXLogReplayRecPtr(std::ptr::null_mut())
        } else {
            flush_rec_ptr()
        }
    }
}

/// The flush position on a primary (15+ also gives the insert timeline, not wanted).
#[cfg(not(feature = "pg14"))]
unsafe fn flush_rec_ptr() -> u64 {
    unsafe { pg_sys::GetFlushRecPtr(std::ptr::null_mut()) }
}

/// The flush position on a primary (14's GetFlushRecPtr takes no argument).
#[cfg(feature = "pg14")]
unsafe fn flush_rec_ptr() -> u64 {
    unsafe extern "C-unwind" {
        fn GetFlushRecPtr() -> pg_sys::XLogRecPtr;
    }
    unsafe { GetFlushRecPtr() }
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
