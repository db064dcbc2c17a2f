//! The server's verdict beside a replayed row: gathers the server facts for the row (the
//! `.snap` file it wrote at that LSN, the slot's confirmed_flush) and hands them, as
//! plain values, to the core's comparison (`snapbuild_core::verdict::judge_row`).

use snapbuild_core::verdict::{
    compare_with_server, judge_row, judged_only_by_subtransaction_lines, nothing_to_judge,
    FileFact, LogWriters, RowFacts, Verdict,
};
use snapbuild_core::TraceRow;

use crate::adapter::slots::SlotCopy;
use crate::adapter::snapfiles;
use crate::context::writers::OtherWriters;

/// A trace row with its verdict, as both the SQL and the JSON forms show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Traced {
    #[serde(flatten)]
    pub row: Box<TraceRow>,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Reads the server facts for `row`: its `.snap` file on serialize rows (the restored
/// file's path on branch b), the slot's confirmed_flush once created, and, when the
/// replay's file differs from the server's only in writer-dependent fields, the files
/// other possible writers would write there.
pub fn server_facts(
    row: &TraceRow,
    slot: Option<&SlotCopy>,
    version: u32,
    writers: &mut OtherWriters,
) -> RowFacts {
    let file = if row.serialized.is_some() {
        match snapfiles::read_snapshot_bytes(row.lsn, version) {
            Ok(Some((file, raw))) => FileFact::Read { file, raw },
            Ok(None) => FileFact::Absent,
            Err(e @ snapfiles::SnapFileError::Corrupt { .. }) => FileFact::Broken(e.text()),
            Err(e) => FileFact::Unreadable(e.text()),
        }
    } else if let Some(at) = row.restored_from {
        match snapfiles::read_snapshot_bytes(at, version) {
            Ok(Some((file, raw))) => FileFact::Read { file, raw },
            _ => FileFact::Absent,
        }
    } else {
        FileFact::Absent
    };
    // Only rows about a file name one (most rows are commits).
    let path = if row.serialized.is_some() || row.restored_from.is_some() {
        snapfiles::path_for(row.restored_from.unwrap_or(row.lsn))
    } else {
        String::new()
    };
    let (other_writers, log_writers) = match (&file, &row.serialized) {
        (FileFact::Read { file, .. }, Some(pred)) => {
            let cmp = compare_with_server(pred, file, row.serialize_context);
            let plainly_equal =
                cmp.agrees() && cmp.writer_dependent.is_empty() && !cmp.committed_as_purged;
            let log = if plainly_equal {
                LogWriters::NotAsked
            } else {
                writers.logged_writers_at(row, file, &path)
            };
            let others = if cmp.other_writers_may_settle() {
                writers.files_at(row, file)
            } else {
                Vec::new()
            };
            (others, log)
        }
        _ => (Vec::new(), LogWriters::NotAsked),
    };
    RowFacts {
        path,
        file,
        confirmed_flush: slot
            .filter(|s| !s.in_creation() && s.confirmed_flush != 0)
            .map(|s| s.confirmed_flush),
        replay_start: slot.map(|s| snapbuild_core::Lsn(s.restart_lsn)),
        other_writers,
        log_writers,
        log_lines: writers.log_lines_for(row),
        debug_lines: writers.debug_lines_for(row),
    }
}

/// [`server_facts`] then the core's `judge_row`.
pub fn judge(
    row: Box<TraceRow>,
    slot: Option<&SlotCopy>,
    version: u32,
    writers: &mut OtherWriters,
) -> Traced {
    let mut plain_commit = || {
        judged_only_by_subtransaction_lines(&row)
            && !row
                .xid
                .is_some_and(|top| writers.logs_subtransactions_of(top))
    };
    if nothing_to_judge(&row) || plain_commit() {
        return Traced {
            row,
            verdict: Verdict::default(),
        };
    }
    let facts = server_facts(&row, slot, version, writers);
    let verdict = judge_row(&row, &facts);
    Traced { row, verdict }
}
