//! In-server check of the core's xact record parsers: every commit, abort and prepare
//! record read is parsed by xactdesc.c too, and differences are collected.

use pgrx::pg_sys;
use snapbuild_core::access::xactdesc::ParsedXact;
use snapbuild_core::replication::decode::RecordKind;
use snapbuild_core::Lsn;
use std::cell::RefCell;

use super::compat::Current;

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
