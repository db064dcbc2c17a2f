//! The server's verdict beside a replayed row: does the `.snap` file the replay predicts
//! agree with the one the server wrote at the same LSN, do the builder's messages agree
//! with the lines the server's decoders logged, and if not, why not.
//!
//! Not a PostgreSQL file: the server never compares two serialized snapshots. This is the
//! project's judgement of the replay against the server. The server's facts come in as
//! plain inputs ([`RowFacts`]: its file, decoded by `replication::snapbuild_ondisk`, the
//! slot's positions, the server log's lines), beside the file the replay predicts and the
//! [`SerializeContext`](crate::replication::snapbuild::SerializeContext) the replay
//! recorded for it. [`judge_row`] turns that into the verdict columns of a trace row.
//!
//! - `snap_file`: the replay's `.snap` file against the server's (writer-dependent fields,
//!   the writers the server log names).
//! - `log_lines`: the builder's LOG messages against the server log.
//! - `debug_lines`: the server log's DEBUG1 lines (catalog-changing subtransactions,
//!   `serializing snapshot to`, the pre-filter skip, slot candidates).
//! - `invalidation`: where a slot was invalidated on a hot standby ([`judge_invalidation`]).

use crate::include::snapbuild::SnapBuildState;
use crate::include::xlogdefs::Lsn;
use crate::replication::decode::TraceRow;
use crate::replication::snapbuild_ondisk::SnapBuildOnDisk;

pub mod debug_lines;
pub mod invalidation;
pub mod log_lines;
pub mod snap_file;
pub use debug_lines::DebugLines;
pub use invalidation::judge_invalidation;
pub use log_lines::LogLines;
pub use snap_file::{
    bytes_with_writer_fields, compare_with_server, writes_same_file, FileComparison, FileFact,
    LogWriters, LoggedWriter,
};

/// The server's verdict beside one replayed step (the trace's `server_*`, `agrees`,
/// `disagreement` and `bytes_agree` columns).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// The state the server recorded (`start|building|full|consistent`).
    pub server_state: Option<String>,
    /// Where it was read: a `.snap` path, or `slot confirmed_flush_lsn`.
    pub server_source: Option<String>,
    /// `Some(true)`: every compared field agrees; `Some(false)`: one that any builder
    /// must agree on differs; `None`: nothing to compare, or only fields that depend on
    /// how the writing decoder got here differ, which the replay cannot decide
    /// (`disagreement` then says which, prefixed `undecided:`).
    pub agrees: Option<bool>,
    pub disagreement: Option<String>,
    /// Serialize rows with a server file: the replay's bytes (writer-dependent fields
    /// taken from the file) equal the file's bytes.
    pub bytes_agree: Option<bool>,
}

/// The facts the server left about one trace row, that the row can be compared with: the
/// `.snap` file at its LSN, the slot's positions, the server log's lines about its record.
#[derive(Clone, Debug)]
pub struct RowFacts {
    /// The file's path as the server names it (`pg_logical/snapshots/%X-%X.snap`).
    pub path: String,
    /// The file at the row's LSN (looked up for rows that serialize or restore).
    pub file: FileFact,
    /// The traced slot's confirmed_flush, once created (not while in creation).
    pub confirmed_flush: Option<u64>,
    /// Where the replay started (the slot's restart_lsn).
    pub replay_start: Option<Lsn>,
    /// Files other decoders would write at this LSN: `(start, file)` for a decoder that
    /// restarted at `start` (an earlier serialization point) and read the same WAL. Asked
    /// for only when the replay's own file differs from the server's in writer-dependent
    /// fields alone.
    pub other_writers: Vec<(Lsn, SnapBuildOnDisk)>,
    /// The decoders the server log shows could have written the file, each replayed as
    /// that decoder ([`LogWriters`]). Asked for only when the replay's own file is not
    /// plainly equal to the server's.
    pub log_writers: LogWriters,
    /// The server log's builder lines for the row's record (rows with a builder LOG
    /// message, or the DEBUG1 pre-filter skip).
    pub log_lines: LogLines,
    /// The server log's DEBUG1 lines for the row's record (slot candidates) and whether
    /// the server logs DEBUG1 at all.
    pub debug_lines: DebugLines,
}

/// Whether no server fact can give `row` a verdict: no builder message, step, branch,
/// commit, RUNNING_XACTS, `.snap` file, slot candidate or state change (most records of
/// an `all_records` trace: heap, btree, full-page images). [`judge_row`] returns
/// `Verdict::default()` for such a row whatever the facts, so they need not be gathered.
pub fn nothing_to_judge(row: &TraceRow) -> bool {
    row.branch.is_none() && row.commit.is_none() && row.decode.is_none() && no_record_fact(row)
}

/// No builder message, RUNNING_XACTS, `.snap` file, slot candidate or state change: what
/// [`nothing_to_judge`] and [`judged_only_by_subtransaction_lines`] both ask of a row.
fn no_record_fact(row: &TraceRow) -> bool {
    row.message.is_none()
        && row.running_xids.is_none()
        && row.serialized.is_none()
        && row.restored_from.is_none()
        && row.candidate_xmin.is_none()
        && row.candidate_restart.is_none()
        && row.state_before == row.state
}

/// Whether only `found subtransaction X:S with catalog changes` lines (DEBUG1) in the
/// log could give `row` a verdict: a commit row whose replay found no catalog-changing
/// subtransaction, with nothing else to judge ([`nothing_to_judge`] but for the commit).
/// With no such line for its transaction, [`judge_row`] gives it no verdict.
pub fn judged_only_by_subtransaction_lines(row: &TraceRow) -> bool {
    row.commit.is_some()
        && debug_lines::replay_catalog_subxacts(row).is_empty()
        && row
            .branch
            .is_none_or(|b| b == crate::replication::snapbuild::Branch::Commit.label())
        && no_record_fact(row)
}

/// Judges one replayed row against the server's facts.
///
/// - A serialize row with a file: [`compare_with_server`]. A difference in a field every
///   builder agrees on is `agrees = false`; differences only in writer-dependent fields
///   are `agrees = NULL` (undecided, never true), named in `disagreement`. `bytes_agree`:
///   the file's bytes equal the replay's once the writer's own fields are taken from it.
/// - A broken file: `agrees = false` with the server's error text.
/// - A branch b (restore) row: the restored file is consistent, so must the replay be.
/// - The record that made a created slot's builder consistent: it must end at the slot's
///   confirmed_flush_lsn (DecodingContextFindStartpoint stores EndRecPtr there).
/// - Anything else: no verdict (all NULL).
pub fn judge_row(row: &TraceRow, facts: &RowFacts) -> Verdict {
    let v = judge_row_without_log_lines(row, facts);
    let v = log_lines::with_log_lines(row, v, &facts.log_lines);
    debug_lines::with_debug_lines(row, v, facts)
}

/// [`judge_row`] from the `.snap` file and the slot alone, before the server log's lines.
fn judge_row_without_log_lines(row: &TraceRow, facts: &RowFacts) -> Verdict {
    if let Some(pred) = &row.serialized {
        return snap_file::judge_serialized(row, pred, facts);
    }
    if row.restored_from.is_some() {
        // The replay restored the file; whether the server's decoder did is not in the file.
        let server_state = match &facts.file {
            FileFact::Read { file, .. } => {
                Some(SnapBuildState::name_of_raw(file.builder.state).to_owned())
            }
            _ => None,
        };
        return Verdict {
            server_state,
            server_source: Some(facts.path.clone()),
            agrees: None,
            disagreement: Some(
                "undecided: the replay restored this file (branch b); the server's log says whether its decoder did".into(),
            ),
            ..Verdict::default()
        };
    }
    let became_consistent =
        row.state_before < SnapBuildState::Consistent && row.state == SnapBuildState::Consistent;
    // A decoder restarted at a serialized RUNNING_XACTS becomes consistent on that record
    // (branch a or b), which a consumer may have confirmed exactly: only a record after
    // the replay's start can be the creation's consistent point.
    let after_start = facts.replay_start.is_some_and(|st| row.lsn > st);
    if let Some(cf) = facts
        .confirmed_flush
        .filter(|_| became_consistent && after_start)
    {
        if row.end_lsn.0 == cf {
            return Verdict {
                server_state: Some("consistent".into()),
                server_source: Some("slot confirmed_flush_lsn".to_owned()),
                agrees: Some(true),
                ..Verdict::default()
            };
        }
        // Later restarts begin at restart_lsn and may become consistent anywhere up to
        // or past confirmed_flush (changes before it are skipped): no verdict then.
    }
    Verdict::default()
}

/// `server log: pid P at T`.
fn log_who(m: &crate::server_log::LogLineMatch) -> String {
    format!(
        "server log: pid {} at {}",
        m.line.pid.map_or("?".to_string(), |p| p.to_string()),
        crate::server_log::format_ms(m.line.at_ms)
    )
}

/// Appends `text` to the row's disagreement.
fn add_disagreement(v: &mut Verdict, text: String) {
    v.disagreement = Some(match v.disagreement.take() {
        Some(d) => format!("{d}; {text}"),
        None => text,
    });
}

/// Appends `names` to the row's `server_source`.
fn add_sources(v: &mut Verdict, names: Vec<String>) {
    if names.is_empty() {
        return;
    }
    let mut sources: Vec<String> = v.server_source.take().into_iter().collect();
    sources.extend(names);
    v.server_source = Some(sources.join("; "));
}

/// Rows and server facts the unit tests of this folder share.
#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::include::version::PgVersion;
    use crate::replication::decode::{Payload, RecordHead, RecordKind, Replay};
    use crate::replication::snapbuild::{BuilderParams, RestoreResult};

    pub(super) fn head(lsn: u64, xid: u32, kind: RecordKind) -> RecordHead {
        RecordHead {
            lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
            xid,
            top_xid: 0,
            rmid: 0,
            kind,
            name: None,
        }
    }

    /// A replay made consistent (branch a) by a RUNNING_XACTS at 0/64 with nothing running.
    pub(super) fn consistent_replay() -> Replay {
        let p = BuilderParams {
            version: PgVersion::newest(18),
            initial_xmin_horizon: 0,
            start_decoding_at: Lsn(0),
            building_full_snapshot: false,
            in_slot_creation: false,
            two_phase_at: Lsn(0),
        };
        let mut r = Replay::new(&p, 5);
        let running = crate::include::standbydefs::RunningXacts::new(600, 600, &[]);
        r.feed(
            &head(100, 0, RecordKind::RunningXacts),
            &Payload::RunningXacts(running),
            &mut |_: Lsn| -> RestoreResult { Ok(None) },
        )
        .unwrap();
        r
    }

    /// A consistent replay (branch a) that then serializes at a shutdown checkpoint.
    pub(super) fn serialize_row() -> TraceRow {
        consistent_replay()
            .feed(
                &head(200, 0, RecordKind::CheckpointShutdown),
                &Payload::None,
                &mut |_: Lsn| -> RestoreResult { Ok(None) },
            )
            .unwrap()
    }

    pub(super) fn facts(file: FileFact) -> RowFacts {
        RowFacts {
            path: "pg_logical/snapshots/0-C8.snap".into(),
            file,
            confirmed_flush: None,
            replay_start: None,
            other_writers: Vec::new(),
            log_writers: LogWriters::NotAsked,
            log_lines: LogLines::NotAsked,
            debug_lines: DebugLines::NotAsked,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{consistent_replay, facts, head, serialize_row};
    use super::*;
    use crate::replication::decode::{Payload, RecordKind};
    use crate::replication::snapbuild::RestoreResult;

    /// DEBUG1 lines asked for and none found.
    fn no_debug_lines(same_start_logs_debug: bool, level: Option<&str>) -> DebugLines {
        DebugLines::Lines {
            candidates: Vec::new(),
            subtransactions: Vec::new(),
            serializing: Vec::new(),
            same_start_passed: true,
            same_start_logs_debug,
            level_above_debug1: level.map(str::to_owned),
        }
    }

    /// A row `nothing_to_judge` lets go unjudged gets no verdict from `judge_row` whatever
    /// the facts (a `.snap` file at its LSN, the slot's confirmed_flush at its end, log
    /// lines); rows with something to judge are not let go.
    #[test]
    fn nothing_to_judge_means_no_verdict_whatever_the_facts() {
        let row = serialize_row();
        assert!(!nothing_to_judge(&row));
        let file = *row.serialized.clone().unwrap();
        let raw = file.encode().unwrap();
        let mut quiet = row.clone();
        quiet.serialized = None;
        quiet.serialize_context = None;
        quiet.branch = None;
        quiet.message = None;
        quiet.detail = None;
        quiet.running_xids = None;
        quiet.state_before = quiet.state;
        assert!(nothing_to_judge(&quiet));
        for debug_lines in [DebugLines::NotAsked, no_debug_lines(false, Some("warning"))] {
            let f = RowFacts {
                confirmed_flush: Some(quiet.end_lsn.0),
                replay_start: Some(Lsn(1)),
                log_lines: LogLines::Lines(Vec::new()),
                debug_lines,
                ..facts(FileFact::Read {
                    file: file.clone(),
                    raw: raw.clone(),
                })
            };
            assert_eq!(judge_row(&quiet, &f), Verdict::default());
        }
        // A commit row that found no catalog-changing subtransaction: no verdict without
        // such lines.
        let mut r = consistent_replay();
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        let commit = r
            .feed(
                &head(200, 600, RecordKind::Commit),
                &Payload::Commit {
                    xid: 600,
                    subxacts: vec![601],
                    has_invals: false,
                    db_id: 5,
                    gid: String::new(),
                },
                &mut none,
            )
            .unwrap();
        assert!(commit.commit.is_some() && !nothing_to_judge(&commit));
        assert!(judged_only_by_subtransaction_lines(&commit));
        for debug_lines in [DebugLines::NotAsked, no_debug_lines(true, None)] {
            let f = RowFacts {
                debug_lines,
                ..facts(FileFact::Absent)
            };
            assert_eq!(judge_row(&commit, &f), Verdict::default());
        }
        let mut became_consistent = quiet.clone();
        became_consistent.state_before = SnapBuildState::FullSnapshot;
        assert!(!nothing_to_judge(&became_consistent));
    }

    /// A restore row is undecided: the file says nothing of whether the server restored it.
    #[test]
    fn restore_rows_are_undecided() {
        let mut row = serialize_row();
        let f = *row.serialized.take().unwrap();
        row.restored_from = Some(row.lsn);
        let raw = f.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: f, raw }));
        assert_eq!(v.agrees, None);
        assert_eq!(v.server_state.as_deref(), Some("consistent"));
        assert!(v.disagreement.unwrap().starts_with("undecided:"));
    }
}
