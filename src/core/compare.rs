//! Does the `.snap` file the replay predicts agree with the one the server wrote at the
//! same LSN, and if not, why not.
//!
//! Not a PostgreSQL file: the server never compares two serialized snapshots. This is the
//! project's judgement of the replay against the server. The server's facts come in as
//! plain inputs (its file, decoded by `replication::snapbuild_ondisk`), beside the file
//! the replay predicts and the [`SerializeContext`] the replay recorded for it.
//! [`judge_row`] turns that into the verdict columns of a trace row.

use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::decode::TraceRow;
use crate::replication::snapbuild::SerializeContext;
use crate::replication::snapbuild_ondisk::SnapBuildOnDisk;

/// How a predicted `.snap` compares with the one the server wrote at the same LSN.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileComparison {
    /// Fields any consistent builder must agree on at this LSN: state, next_phase_at, the
    /// catchange xids (the running catalog-modifying transactions), and xmin whenever both
    /// the replay and the writer took it from the previous RUNNING_XACTS record.
    pub differences: Vec<String>,
    /// Fields that depend on how the writing decoder got here: xmin after a restore
    /// (branch b keeps the file's older xmin until the next record), xmax (moved only by
    /// catalog commits seen since the decoder became consistent, or set by branch a) and
    /// the committed xids (collected since then). They match when the replay and the
    /// writer started alike; otherwise they are reported here, not held against the
    /// replay.
    pub writer_dependent: Vec<String>,
    /// The writer's xmin when the replay can tell it although its own differs (the
    /// replay restored at the previous RUNNING_XACTS, the writer was consistent there);
    /// the committed xids are then compared as that writer purged them.
    pub writer_xmin: Option<TransactionId>,
    /// The committed xids are equal only once purged at `writer_xmin` (which assumes the
    /// writer's state at that record was the restored file's: not proven).
    pub committed_as_purged: bool,
}

impl FileComparison {
    /// No difference in the fields every builder must agree on.
    pub fn agrees(&self) -> bool {
        self.differences.is_empty()
    }

    /// Something differs, and only in what depends on the writing decoder's history:
    /// the writer-dependent fields, or the catchange xids (a decoder that read the
    /// assignment of a catalog-changing subtransaction flags its top-level transaction
    /// too). Another decoder writing exactly the server's file then settles it.
    pub fn other_writers_may_settle(&self) -> bool {
        (!self.differences.is_empty() || !self.writer_dependent.is_empty())
            && self.differences.iter().all(|d| d.starts_with("catchange "))
    }
}

/// Compares the file the replay predicts with the file the server wrote at the same LSN.
/// `ctx` says where the predicted xmin came from.
///
/// Not compared at all, because they describe the process that wrote the file rather
/// than the WAL position: start_decoding_at, last_serialized_snapshot, in_slot_creation,
/// building_full_snapshot, initial_xmin_horizon, two_phase_at, committed.xcnt_space and
/// includes_all_transactions.
pub fn compare_with_server(
    predicted: &SnapBuildOnDisk,
    server: &SnapBuildOnDisk,
    ctx: Option<SerializeContext>,
) -> FileComparison {
    let (p, s) = (&predicted.builder, &server.builder);
    let mut c = FileComparison::default();
    if p.state != s.state {
        c.differences
            .push(format!("state {} vs {}", p.state, s.state));
    }
    if p.xmin != s.xmin {
        // The writer serialized at the previous RUNNING_XACTS, so it was consistent there
        // and took that record's oldestRunningXid as its xmin (SnapBuildSerialize alone sets
        // last_serialized_snapshot; a restore does not).
        let writer_from_record = ctx.filter(|x| {
            x.prev_running_xacts.is_valid() && s.last_serialized_snapshot == x.prev_running_xacts
        });
        let d = format!("xmin {} vs {}", p.xmin, s.xmin);
        match writer_from_record {
            // So did we: the xmins must be equal.
            Some(x) if !x.xmin_from_restore => c.differences.push(d),
            // We restored there (and keep the file's xmin until the next record); the
            // writer's xmin is still that record's oldestRunningXid.
            Some(x) if s.xmin == x.prev_oldest_running_xid => c.writer_xmin = Some(s.xmin),
            Some(x) => c.differences.push(format!(
                "{d} (a decoder consistent at {} takes its oldestRunningXid {})",
                x.prev_running_xacts, x.prev_oldest_running_xid
            )),
            None => c.writer_dependent.push(d),
        }
    }
    if p.next_phase_at != s.next_phase_at {
        c.differences.push(format!(
            "next_phase_at {} vs {}",
            p.next_phase_at, s.next_phase_at
        ));
    }
    if predicted.catchange_xip != server.catchange_xip {
        c.differences.push(format!(
            "catchange {:?} vs {:?}",
            predicted.catchange_xip, server.catchange_xip
        ));
    }
    if p.xmax != s.xmax {
        c.writer_dependent
            .push(format!("xmax {} vs {}", p.xmax, s.xmax));
    }
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    // A writer consistent at the previous RUNNING_XACTS purged the committed xids older
    // than that record's oldestRunningXid there (SnapBuildPurgeOlderTxn); the replay, which
    // restored there, keeps them until the next record. Were the writer's state at that
    // record the restored file's, it holds exactly these.
    let committed = match c.writer_xmin {
        Some(x) => predicted
            .committed_xip
            .iter()
            .copied()
            .filter(|v| !transam::normal_precedes(*v, x))
            .collect(),
        None => predicted.committed_xip.clone(),
    };
    if sorted(&committed) != sorted(&server.committed_xip) {
        c.writer_dependent.push(format!(
            "committed {:?} vs {:?}",
            predicted.committed_xip, server.committed_xip
        ));
    } else if sorted(&predicted.committed_xip) != sorted(&server.committed_xip) {
        c.committed_as_purged = true;
    }
    c
}

/// The bytes the replay would write at this LSN, with the fields that describe the
/// writing decoder taken from the server's file, and likewise xmin, xmax or the committed
/// xids where `cmp` found them writer-dependent (the committed xids otherwise in the
/// writer's insertion order). If the result equals the file byte for byte, every other
/// field, the layout, the padding and the CRC-32C agree. `None` for a version without a
/// known layout.
pub fn bytes_with_writer_fields(
    predicted: &SnapBuildOnDisk,
    server: &SnapBuildOnDisk,
    cmp: &FileComparison,
) -> Option<Vec<u8>> {
    let mut p = predicted.clone();
    let (b, s) = (&mut p.builder, &server.builder);
    b.start_decoding_at = s.start_decoding_at;
    b.last_serialized_snapshot = s.last_serialized_snapshot;
    b.in_slot_creation = s.in_slot_creation;
    b.building_full_snapshot = s.building_full_snapshot;
    b.initial_xmin_horizon = s.initial_xmin_horizon;
    b.two_phase_at = s.two_phase_at;
    b.committed_xcnt_space = s.committed_xcnt_space;
    b.includes_all_transactions = s.includes_all_transactions;
    let flagged = |field: &str| cmp.writer_dependent.iter().any(|d| d.starts_with(field));
    if flagged("xmin ") {
        b.xmin = s.xmin;
    }
    if let Some(x) = cmp.writer_xmin {
        b.xmin = x;
    }
    if flagged("xmax ") {
        b.xmax = s.xmax;
    }
    let sorted = |v: &[u32]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v
    };
    // Unflagged with a known writer xmin: the writer's purged list equals the server's.
    if flagged("committed ")
        || cmp.writer_xmin.is_some()
        || sorted(&p.committed_xip) == sorted(&server.committed_xip)
    {
        p.committed_xip = server.committed_xip.clone();
    }
    p.encode()
}

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

/// The `.snap` file the server left at a row's LSN, as plain input.
#[derive(Clone, Debug)]
pub enum FileFact {
    /// There is none (never written, or removed since).
    Absent,
    /// Its decoded contents and raw bytes.
    Read { file: SnapBuildOnDisk, raw: Vec<u8> },
    /// It could not be decoded: the server's error text.
    Broken(String),
    /// It could not be read (permissions, I/O): the error text. Says nothing of the file.
    Unreadable(String),
}

/// What the server left behind that a trace row can be compared with.
#[derive(Clone, Debug)]
pub struct ServerFacts {
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

/// What the server log says at DEBUG1 about a row's record.
#[derive(Clone, Debug, Default)]
pub enum DebugLines {
    /// Not looked at (no DEBUG1 question on the row, or the log could not be read: then
    /// [`LogLines::Unreadable`] says why).
    #[default]
    NotAsked,
    /// What the log holds for the row.
    Lines {
        /// The slot-candidate lines decoders logged for the row's record
        /// (`server_log::candidate_lines_for`).
        candidates: Vec<crate::server_log::LogLineMatch>,
        /// On a commit row: the `found subtransaction X:S with catalog changes` lines
        /// decoders logged for its transaction (`server_log::subtransaction_lines_for`).
        subtransactions: Vec<crate::server_log::LogLineMatch>,
        /// On a row that may serialize (RUNNING_XACTS, serialization points): the
        /// `serializing snapshot to` lines of the decoders that wrote the `.snap` file of
        /// its record (`server_log::serializing_lines_for`).
        serializing: Vec<crate::server_log::LogLineMatch>,
        /// A decoder whose lines may refute the replay logged a DEBUG1 line about a later
        /// record (`server_log::same_start_logged_debug_past`): a DEBUG1 line it would
        /// print for this record would be in the log.
        same_start_passed: bool,
        /// A decoder that started as the replay did logged at DEBUG1.
        same_start_logs_debug: bool,
        /// The server's `log_min_messages` when it is above debug1 (`warning`, …): its
        /// decoders log no DEBUG1 line.
        level_above_debug1: Option<String>,
    },
}

/// What the server log says about a row's builder message.
#[derive(Clone, Debug, Default)]
pub enum LogLines {
    /// Not looked at (no builder message on the row).
    #[default]
    NotAsked,
    /// The log could not be read: why.
    Unreadable(String),
    /// The lines decoders logged for the row's record.
    Lines(Vec<crate::server_log::LogLineMatch>),
}

/// One decoder the server log shows could have written a `.snap` file, and the file a
/// replay started as it would (same restart point, start_decoding_at and two_phase_at)
/// writes at that LSN (`None`: the replay could not follow it there, e.g. its WAL is gone).
#[derive(Clone, Debug)]
pub struct LoggedWriter {
    pub restart: Lsn,
    pub slot: String,
    pub pid: Option<i32>,
    /// It was `pg_replication_slot_advance` (fast-forward decoding).
    pub fast_forward: bool,
    pub file: Option<SnapBuildOnDisk>,
}

impl LoggedWriter {
    fn name(&self) -> String {
        match self.pid {
            Some(pid) => format!(
                "slot {}'s decoder (pid {pid}) restarted at {}",
                self.slot, self.restart
            ),
            None => format!("slot {}'s decoder restarted at {}", self.slot, self.restart),
        }
    }
}

/// What the server log says about the writer of a row's file.
#[derive(Clone, Debug, Default)]
pub enum LogWriters {
    /// Not looked at (the replay's own file settles the row).
    #[default]
    NotAsked,
    /// The log cannot tell (not readable, incomplete, no such decoder): why.
    Unknown(String),
    /// Every decoder that could have written the file, per the log.
    Known(Vec<LoggedWriter>),
}

/// Whether `other` (a file some decoder would write) equals `server` in every field the
/// comparison looks at, writer-dependent ones included.
pub fn writes_same_file(other: &SnapBuildOnDisk, server: &SnapBuildOnDisk) -> bool {
    let c = compare_with_server(other, server, None);
    c.differences.is_empty()
        && c.writer_dependent.is_empty()
        && other.builder.xmin == server.builder.xmin
}

/// What the writers the server log names say about a file.
enum ByLog {
    /// All of them write it (true) or none does (false).
    Decided(Verdict),
    /// Some do and some do not: the row cannot be false; the note names them.
    Mixed(String),
    /// The log does not settle it: the replay's own file is judged.
    NoInfo,
}

/// The verdict on a server file when the log names every decoder that could have
/// written it and each was replayed: `true` when all of them write exactly the file,
/// `false` when none does (with how the first one differs), mixed when some do and some
/// do not.
fn judge_by_logged_writers(file: &SnapBuildOnDisk, raw: &[u8], facts: &ServerFacts) -> ByLog {
    let LogWriters::Known(ws) = &facts.log_writers else {
        return ByLog::NoInfo;
    };
    if ws.is_empty() || ws.iter().any(|w| w.file.is_none()) {
        return ByLog::NoInfo;
    }
    let (same, other): (Vec<&LoggedWriter>, Vec<&LoggedWriter>) = ws
        .iter()
        .partition(|w| writes_same_file(w.file.as_ref().unwrap(), file));
    let names = |v: &[&LoggedWriter]| v.iter().map(|w| w.name()).collect::<Vec<_>>().join(", ");
    let base = Verdict {
        server_state: Some(state_name(file.builder.state)),
        server_source: Some(facts.path.clone()),
        ..Verdict::default()
    };
    if other.is_empty() {
        // The writer's own fields (start_decoding_at, last_serialized_snapshot, the
        // committed array's allocated size, …) come from the server's file, as for the
        // replay's own prediction.
        let w = same[0].file.as_ref().unwrap();
        let bytes = bytes_with_writer_fields(w, file, &compare_with_server(w, file, None));
        ByLog::Decided(Verdict {
            agrees: Some(true),
            bytes_agree: bytes.map(|b| b == raw),
            ..base
        })
    } else if same.is_empty() {
        let w = other[0];
        let cmp = compare_with_server(w.file.as_ref().unwrap(), file, None);
        let mut diffs = cmp.differences.clone();
        diffs.extend(cmp.writer_dependent.iter().cloned());
        if file.builder.xmin != w.file.as_ref().unwrap().builder.xmin
            && !diffs.iter().any(|d| d.starts_with("xmin "))
        {
            diffs.push(format!(
                "xmin {} vs {}",
                w.file.as_ref().unwrap().builder.xmin,
                file.builder.xmin
            ));
        }
        ByLog::Decided(Verdict {
            agrees: Some(false),
            disagreement: Some(format!(
                "{}; the server log shows the decoders that could have written this file ({}), and none writes it",
                diffs.join("; "),
                names(&other)
            )),
            bytes_agree: Some(false),
            ..base
        })
    } else {
        ByLog::Mixed(format!(
            "undecided: of the decoders the server log shows could have written this file, {} write it and {} do not",
            names(&same),
            names(&other)
        ))
    }
}

/// The name pg_logicalinspect gives a raw SnapBuildState value (`unknown state` for any
/// other value).
pub fn state_name(raw: i32) -> String {
    SnapBuildState::from_raw(raw)
        .map(|s| s.as_str())
        .unwrap_or("unknown state")
        .to_owned()
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
        && replay_catalog_subxacts(row).is_empty()
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
pub fn judge_row(row: &TraceRow, facts: &ServerFacts) -> Verdict {
    let v = judge_row_without_log_lines(row, facts);
    let v = with_log_lines(row, v, &facts.log_lines);
    with_debug_lines(row, v, facts)
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

/// Why a DEBUG1 line the replay expects from a decoder that started as it did is not in
/// the log, when that is no statement: the server logs above debug1, no such decoder logged
/// at DEBUG1, or it logged nothing there (`what`: the record or commit), for `undecided: …`.
fn debug_silence(debug: &DebugLines, what: &str) -> Option<String> {
    match debug {
        DebugLines::Lines {
            level_above_debug1: Some(level),
            same_start_logs_debug: false,
            ..
        } => Some(format!(
            "undecided: log_min_messages above debug1 ({level}): the server does not log this DEBUG1 line"
        )),
        DebugLines::Lines {
            same_start_logs_debug: false,
            ..
        } => Some("undecided: no decoder that started as the replay did logged at DEBUG1".into()),
        DebugLines::Lines { .. } => Some(format!(
            "undecided: the server's decoder that started as the replay did logged no line for this {what}"
        )),
        DebugLines::NotAsked => None,
    }
}

/// `server_source` entries naming DEBUG1 lines: `server log: pid P at T (DEBUG "…")`
/// (`elsewhere: ` first for a decoder that started elsewhere), at most `max`, then how
/// many more.
fn name_debug_lines(lines: &[crate::server_log::LogLineMatch], max: usize) -> Vec<String> {
    lines
        .iter()
        .take(max)
        .map(|m| {
            format!(
                "{}{} (DEBUG \"{}\")",
                if m.same_start { "" } else { "elsewhere: " },
                log_who(m),
                m.line.message
            )
        })
        .chain((lines.len() > max).then(|| format!("{} more DEBUG lines", lines.len() - max)))
        .collect()
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

/// The subtransactions a commit row's replay found catalog-changing (snapbuild.c
/// SnapBuildCommitTxn).
fn replay_catalog_subxacts(row: &TraceRow) -> &[u32] {
    match &row.commit {
        Some(crate::replication::snapbuild::CommitVerdict::Timetravel {
            catalog_subxacts, ..
        }) => catalog_subxacts,
        _ => &[],
    }
}

/// Judges a commit row by the `found subtransaction X:S with catalog changes` lines
/// (DEBUG1) decoders logged for its transaction: each is named in `server_source`; the set
/// of S a decoder that started as the replay did logged must be the set the replay found
/// (`false` naming both when not, an empty set included once that decoder logged at
/// DEBUG1 past the commit); when the sets are equal a row with no other verdict is `true`;
/// a replay that finds some where no such decoder logged any stays NULL with
/// [`debug_silence`]'s reason.
fn with_subtransaction_lines(row: &TraceRow, mut v: Verdict, facts: &ServerFacts) -> Verdict {
    let DebugLines::Lines {
        subtransactions,
        same_start_passed,
        ..
    } = &facts.debug_lines
    else {
        return v;
    };
    let Some(top) = row.xid else {
        return v;
    };
    // Most commits: no line and none found, nothing to say (and nothing to build).
    if subtransactions.is_empty() && replay_catalog_subxacts(row).is_empty() {
        return v;
    }
    let want: std::collections::BTreeSet<u32> =
        replay_catalog_subxacts(row).iter().copied().collect();
    add_sources(&mut v, name_debug_lines(subtransactions, 16));
    // pid -> the subtransactions its decoder logged (one decoder per pid passes a commit,
    // except one session decoding twice: both then found the same set).
    let mut logged: std::collections::BTreeMap<Option<i32>, std::collections::BTreeSet<u32>> =
        std::collections::BTreeMap::new();
    for m in subtransactions
        .iter()
        .filter(|m| m.same_start && m.may_refute)
    {
        if let Some((_, sub)) = crate::server_log::subtransaction(&m.line.message) {
            logged.entry(m.line.pid).or_default().insert(sub);
        }
    }
    let list = |s: &std::collections::BTreeSet<u32>| {
        if s.is_empty() {
            "none".to_string()
        } else {
            s.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    if let Some((pid, got)) = logged.iter().find(|(_, got)| **got != want) {
        add_disagreement(
            &mut v,
            format!(
                "the server's decoder that started as the replay did (pid {}) found subtransactions {} of {top} with catalog changes, the replay {}",
                pid.map_or("?".to_string(), |p| p.to_string()),
                list(got),
                list(&want)
            ),
        );
        v.agrees = Some(false);
    } else if !logged.is_empty() {
        if v.agrees.is_none() && v.disagreement.is_none() {
            v.agrees = Some(true);
        }
    } else if !want.is_empty() {
        if *same_start_passed {
            add_disagreement(
                &mut v,
                format!(
                    "the server's decoder that started as the replay did logged at DEBUG1 past this commit but no subtransaction of {top} with catalog changes, the replay {}",
                    list(&want)
                ),
            );
            v.agrees = Some(false);
        } else if v.agrees.is_none() {
            if let Some(why) = debug_silence(&facts.debug_lines, "commit") {
                add_disagreement(&mut v, why);
            }
        }
    }
    v
}

/// Judges a row that may serialize by the `serializing snapshot to` lines (DEBUG1) of the
/// decoders that wrote the `.snap` file of its record: each is named in `server_source`
/// (so the file's writer is named for certain); one from a decoder that started as the
/// replay did where the replay does not serialize is `false`; where it does, a row with no
/// other verdict is `true`. Silence says nothing (a decoder that finds the file written
/// logs no line); a serialize row with no verdict gets [`debug_silence`]'s reason.
fn with_serializing_lines(row: &TraceRow, mut v: Verdict, facts: &ServerFacts) -> Verdict {
    let DebugLines::Lines { serializing, .. } = &facts.debug_lines else {
        return v;
    };
    add_sources(&mut v, name_debug_lines(serializing, 16));
    let same: Vec<_> = serializing
        .iter()
        .filter(|m| m.same_start && m.may_refute)
        .collect();
    if let Some(m) = same.iter().find(|m| !m.equal) {
        add_disagreement(
            &mut v,
            format!(
                "the server's decoder that started as the replay did logged \"{}\" here ({}), the replay does not serialize at this record",
                m.line.message,
                log_who(m)
            ),
        );
        v.agrees = Some(false);
    } else if !same.is_empty() {
        if v.agrees.is_none() && v.disagreement.is_none() {
            v.agrees = Some(true);
        }
    } else if row.serialized.is_some()
        && v.agrees.is_none()
        && v.disagreement.is_none()
        && serializing.is_empty()
    {
        if let Some(why) = debug_silence(&facts.debug_lines, "record") {
            add_disagreement(&mut v, why);
        }
    }
    v
}

/// Adds what the server log says at DEBUG1 about the row.
///
/// - A commit row: [`with_subtransaction_lines`] (`found subtransaction X:S with catalog
///   changes`).
/// - A row that may serialize: [`with_serializing_lines`] (`serializing snapshot to …`).
/// - The pre-filter skip (`skipping snapshot at …`, DEBUG1): judged by
///   [`with_log_lines`] as the LOG lines are; where no decoder that started as the replay
///   did logged a line for the record, `agrees` stays NULL and `disagreement` says why
///   (`log_min_messages above debug1`, or no such decoder logged at DEBUG1, or it logged
///   nothing there) — never a difference.
/// - The slot candidates of a RUNNING_XACTS row: each candidate line a decoder logged for
///   the record is named in `server_source` (`server log: pid P at T (DEBUG "…")`); a line
///   of a decoder that started as the replay did naming another value (or a proposal where
///   the replay makes none) is `agrees = false`; lines naming the replay's values make a
///   row with no other verdict `true`, and leave any other verdict as it is (an undecided
///   row stays undecided).
fn with_debug_lines(row: &TraceRow, v: Verdict, facts: &ServerFacts) -> Verdict {
    let v = with_subtransaction_lines(row, v, facts);
    let v = with_serializing_lines(row, v, facts);
    with_skip_and_candidate_lines(row, v, facts)
}

/// The pre-filter skip and the slot candidates of [`with_debug_lines`].
fn with_skip_and_candidate_lines(row: &TraceRow, mut v: Verdict, facts: &ServerFacts) -> Verdict {
    let is_skip = row
        .message
        .as_deref()
        .is_some_and(|m| m.starts_with(crate::server_log::SKIPPING));
    if is_skip && v.agrees.is_none() {
        let judged_elsewhere = v
            .disagreement
            .as_deref()
            .is_some_and(|d| d.contains("the server's decoder that started where the replay does"));
        let why = match &facts.log_lines {
            _ if judged_elsewhere => None,
            LogLines::Unreadable(why) => {
                Some(format!("undecided: the server log is not read ({why})"))
            }
            _ => debug_silence(&facts.debug_lines, "record"),
        };
        if let Some(why) = why {
            add_disagreement(&mut v, why);
        }
    }
    let DebugLines::Lines { candidates, .. } = &facts.debug_lines else {
        return v;
    };
    if candidates.is_empty() {
        return v;
    }
    add_sources(&mut v, name_debug_lines(candidates, 6));
    let same: Vec<_> = candidates.iter().filter(|m| m.same_start).collect();
    if let Some(m) = same.iter().find(|m| !m.equal && m.may_refute) {
        let proposes = |what: &str, x: Option<String>| {
            x.map_or(format!("no {what}"), |x| format!("{what} {x}"))
        };
        add_disagreement(
            &mut v,
            format!(
                "the server's decoder that started as the replay did logged \"{}\" here ({}), the replay proposes {} and {}",
                m.line.message,
                log_who(m),
                proposes("catalog xmin", row.candidate_xmin.map(|(_, x)| x.to_string())),
                proposes("restart lsn", row.candidate_restart.map(|(_, r)| r.to_string())),
            ),
        );
        v.agrees = Some(false);
    } else if same.iter().any(|m| m.equal)
        && v.agrees.is_none()
        && v.disagreement.is_none()
        && row.serialized.is_none()
        && row.restored_from.is_none()
    {
        v.agrees = Some(true);
    }
    v
}

/// The state a builder LOG message reports.
fn state_of_message(message: &str) -> Option<&'static str> {
    if message.starts_with("logical decoding found consistent point") {
        Some("consistent")
    } else if message.starts_with("logical decoding found initial consistent point") {
        Some("full")
    } else if message.starts_with("logical decoding found initial starting point") {
        Some("building")
    } else {
        None
    }
}

/// Adds what the server log says about the row's builder message: a decoder that started
/// as the replay did logged the same message and detail for this record (true), or
/// another one (false); lines of decoders that started elsewhere are named, not judged.
fn with_log_lines(row: &TraceRow, mut v: Verdict, lines: &LogLines) -> Verdict {
    let LogLines::Lines(lines) = lines else {
        return v;
    };
    if lines.is_empty() {
        return v;
    }
    // A row without a builder message (a RUNNING_XACTS the replay passes silently) is
    // asked only about other decoders' lines there: none equals it.
    let message = row.message.as_deref().unwrap_or("nothing");
    let who = |m: &crate::server_log::LogLineMatch| {
        format!(
            "server log: pid {} at {}",
            m.line.pid.map_or("?".to_string(), |p| p.to_string()),
            crate::server_log::format_ms(m.line.at_ms)
        )
    };
    let same: Vec<_> = lines.iter().filter(|m| m.same_start).collect();
    // A restore on one side only means the .snap files differ from when that decoder ran
    // (a file written later): not the replay's error.
    let saved = |d: Option<&str>| d.is_some_and(|d| d.contains("saved snapshot"));
    let restore_differs = |m: &&crate::server_log::LogLineMatch| {
        saved(m.line.detail.as_deref()) != saved(row.detail.as_deref())
    };
    let refuting: Vec<_> = same
        .iter()
        .filter(|m| !m.equal && m.may_refute && !restore_differs(m))
        .copied()
        .collect();
    let verdict = if same.iter().any(|m| m.equal) {
        Some(true)
    } else if !refuting.is_empty() {
        Some(false)
    } else {
        if let Some(m) = same.first() {
            let why = if restore_differs(m) {
                "the .snap files differ from when it ran"
            } else {
                "it was creating the slot; the replay runs as restarted decoding"
            };
            let text = format!(
                "undecided: the server's decoder that started where the replay does logged \"{}\" here ({}), not judged: {why}",
                m.line.message,
                who(m)
            );
            v.disagreement = Some(match v.disagreement.take() {
                Some(d) => format!("{d}; {text}"),
                None => text,
            });
        }
        None
    };
    // Lines of decoders that started elsewhere: named (at most 3), never judged.
    let others: Vec<_> = lines.iter().filter(|m| !m.same_start).collect();
    let others_text = (!others.is_empty()).then(|| {
        let mut t: Vec<String> = others
            .iter()
            .take(3)
            .map(|m| format!("{} (\"{}\")", who(m), m.line.message))
            .collect();
        if others.len() > 3 {
            t.push(format!("{} more", others.len() - 3));
        }
        format!("decoders that started elsewhere: {}", t.join(", "))
    });
    let Some(ok) = verdict else {
        if let Some(t) = others_text {
            let mut sources: Vec<String> = v.server_source.take().into_iter().collect();
            sources.push(t);
            v.server_source = Some(sources.join("; "));
        }
        return v;
    };
    let mut sources: Vec<String> = v.server_source.take().into_iter().collect();
    sources.extend(
        same.iter()
            .filter(|m| if ok { m.equal } else { refuting.contains(m) })
            .map(|m| who(m)),
    );
    sources.extend(others_text);
    v.server_source = Some(sources.join("; "));
    if v.server_state.is_none() {
        v.server_state = same
            .iter()
            .find(|m| if ok { m.equal } else { refuting.contains(m) })
            .and_then(|m| state_of_message(&m.line.message))
            .map(str::to_owned);
    }
    let restored_undecided = row.restored_from.is_some() && v.agrees.is_none();
    v.agrees = match v.agrees {
        Some(a) => Some(a && ok),
        None => Some(ok),
    };
    if restored_undecided {
        // The log settles what the file alone could not.
        v.disagreement = None;
    }
    if !ok {
        let m = refuting[0];
        let text = format!(
            "the server's decoder that started as the replay did logged \"{}\"{} here ({}), the replay \"{}\"{}",
            m.line.message,
            m.line.detail.as_deref().map(|d| format!(" / \"{d}\"")).unwrap_or_default(),
            who(m),
            message,
            row.detail.as_deref().map(|d| format!(" / \"{d}\"")).unwrap_or_default()
        );
        v.disagreement = Some(match v.disagreement.take() {
            Some(d) => format!("{d}; {text}"),
            None => text,
        });
    }
    v
}

fn judge_row_without_log_lines(row: &TraceRow, facts: &ServerFacts) -> Verdict {
    if let Some(pred) = &row.serialized {
        return match &facts.file {
            FileFact::Read { file, raw } => {
                let mixed = match judge_by_logged_writers(file, raw, facts) {
                    ByLog::Decided(v) => return v,
                    ByLog::Mixed(note) => Some(note),
                    ByLog::NoInfo => None,
                };
                let cmp = compare_with_server(pred, file, row.serialize_context);
                let mut text: Vec<String> = cmp.differences.clone();
                text.extend(
                    cmp.writer_dependent
                        .iter()
                        .map(|d| format!("undecided: writer-dependent {d}")),
                );
                let ours = bytes_with_writer_fields(pred, file, &cmp);
                // A decoder that restarted elsewhere and writes exactly the server's file
                // settles the writer-dependent fields, and a catchange difference (a
                // decoder that read a subtransaction's assignment flags its top level
                // too; one that started after it cannot).
                let writer = cmp
                    .other_writers_may_settle()
                    .then(|| {
                        facts
                            .other_writers
                            .iter()
                            .find(|(_, f)| writes_same_file(f, file))
                            .map(|(start, _)| *start)
                    })
                    .flatten();
                // Only what the replay can prove is true or false: a possible writer found
                // elsewhere, or a committed list equal only once purged as such a writer
                // would have, leaves the row undecided, with that writer named.
                let agrees = if !cmp.agrees() && writer.is_none() {
                    Some(false)
                } else if writer.is_some()
                    || cmp.committed_as_purged
                    || !cmp.writer_dependent.is_empty()
                {
                    None
                } else {
                    Some(true)
                };
                if !cmp.agrees() && writer.is_some() {
                    text = text
                        .into_iter()
                        .map(|d| {
                            if d.starts_with("undecided:") {
                                d
                            } else {
                                format!("undecided: {d}")
                            }
                        })
                        .collect();
                }
                if cmp.committed_as_purged {
                    text.push(format!(
                        "undecided: committed {:?} vs {:?} equal once purged at xmin {}, as a decoder that was consistent at the previous RUNNING_XACTS with the restored file's state would have",
                        pred.committed_xip,
                        file.committed_xip,
                        cmp.writer_xmin.unwrap_or(0)
                    ));
                }
                if let LogWriters::Unknown(why) = &facts.log_writers {
                    if agrees != Some(true) {
                        text.push(format!("the server log does not settle it: {why}"));
                    }
                }
                if let Some(start) = writer {
                    text.push(format!(
                        "consistent with a decoder restarted at {start} (the writer's restart point is not known)"
                    ));
                } else if agrees.is_none() && cmp.other_writers_may_settle() {
                    text.push(format!(
                        "no decoder restarted at an earlier serialization point ({} tried) writes this file",
                        facts.other_writers.len()
                    ));
                }
                // Some of the writers the log names write the file and some do not: not
                // false, whatever the replay's own file says.
                let agrees = match &mixed {
                    Some(note) => {
                        text = text
                            .into_iter()
                            .map(|d| {
                                if d.starts_with("undecided:") {
                                    d
                                } else {
                                    format!("undecided: {d}")
                                }
                            })
                            .collect();
                        text.push(note.clone());
                        None
                    }
                    None => agrees,
                };
                Verdict {
                    server_state: Some(state_name(file.builder.state)),
                    server_source: Some(facts.path.clone()),
                    agrees,
                    disagreement: (!text.is_empty()).then(|| text.join("; ")),
                    bytes_agree: ours.map(|ours| *raw == ours),
                }
            }
            FileFact::Absent => Verdict::default(),
            FileFact::Unreadable(text) => Verdict {
                server_source: Some(facts.path.clone()),
                disagreement: Some(format!("undecided: {text}")),
                ..Verdict::default()
            },
            FileFact::Broken(text) => Verdict {
                server_source: Some(facts.path.clone()),
                agrees: Some(false),
                disagreement: Some(text.clone()),
                ..Verdict::default()
            },
        };
    }
    if row.restored_from.is_some() {
        // The replay restored the file; whether the server's decoder did is not in the file.
        let server_state = match &facts.file {
            FileFact::Read { file, .. } => Some(state_name(file.builder.state)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::version::PgVersion;
    use crate::replication::decode::{Payload, RecordHead, RecordKind, Replay};
    use crate::replication::snapbuild::{BuilderParams, RestoreResult};

    fn head(lsn: u64, xid: u32, kind: RecordKind) -> RecordHead {
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
    fn consistent_replay() -> Replay {
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
    fn serialize_row() -> TraceRow {
        consistent_replay()
            .feed(
                &head(200, 0, RecordKind::CheckpointShutdown),
                &Payload::None,
                &mut |_: Lsn| -> RestoreResult { Ok(None) },
            )
            .unwrap()
    }

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

    fn facts(file: FileFact) -> ServerFacts {
        ServerFacts {
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
            let f = ServerFacts {
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
            let f = ServerFacts {
                debug_lines,
                ..facts(FileFact::Absent)
            };
            assert_eq!(judge_row(&commit, &f), Verdict::default());
        }
        let mut became_consistent = quiet.clone();
        became_consistent.state_before = SnapBuildState::FullSnapshot;
        assert!(!nothing_to_judge(&became_consistent));
    }

    #[test]
    fn identical_file_agrees_byte_for_byte() {
        let row = serialize_row();
        let f = *row.serialized.clone().unwrap();
        assert_eq!(compare_with_server(&f, &f, None), FileComparison::default());
        assert_eq!(
            bytes_with_writer_fields(&f, &f, &FileComparison::default()),
            f.encode()
        );
        let raw = f.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: f, raw }));
        assert_eq!(v.agrees, Some(true));
        assert_eq!(v.bytes_agree, Some(true));
        assert_eq!(v.disagreement, None);
    }

    /// A writer-dependent difference is never "agrees = true": it is undecided (NULL)
    /// with the field named, and a hard field difference is false.
    #[test]
    fn writer_dependent_difference_is_undecided_not_true() {
        let row = serialize_row();
        let mut server = *row.serialized.clone().unwrap();
        server.builder.xmax += 5;
        let raw = server.encode().unwrap();
        let v = judge_row(
            &row,
            &facts(FileFact::Read {
                file: server.clone(),
                raw,
            }),
        );
        assert_eq!(v.agrees, None);
        let d = v.disagreement.unwrap();
        assert!(d.starts_with("undecided: writer-dependent xmax"), "{d}");
        // A decoder restarted elsewhere that writes exactly the server's file decides it.
        let mut f = facts(FileFact::Read {
            file: server.clone(),
            raw: server.encode().unwrap(),
        });
        f.other_writers = vec![
            (Lsn(50), (*row.serialized.clone().unwrap())),
            (Lsn(40), server.clone()),
        ];
        // A possible writer is named, but nothing proves it was the writer: undecided.
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .contains("consistent with a decoder restarted at 0/28"));
        // A catchange difference alone is false unless another writer reproduces it.
        let mut cat = *row.serialized.clone().unwrap();
        cat.catchange_xip = vec![650];
        let raw = cat.encode().unwrap();
        let v = judge_row(
            &row,
            &facts(FileFact::Read {
                file: cat.clone(),
                raw: raw.clone(),
            }),
        );
        assert_eq!(v.agrees, Some(false));
        let mut f = facts(FileFact::Read {
            file: cat.clone(),
            raw,
        });
        f.other_writers = vec![(Lsn(40), cat)];
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v.disagreement.unwrap().starts_with("undecided: catchange"));
        server.builder.next_phase_at += 1;
        let raw = server.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: server, raw }));
        assert_eq!(v.agrees, Some(false));
    }

    /// The replay restored at the previous RUNNING_XACTS (keeping the file's xmin); a
    /// writer whose last_serialized_snapshot is that record was consistent there and took
    /// its oldestRunningXid: decided, not writer-dependent.
    #[test]
    fn xmin_of_a_writer_consistent_at_the_previous_record_is_decided() {
        let row = serialize_row();
        let pred = *row.serialized.clone().unwrap();
        let ctx = SerializeContext {
            prev_running_xacts: Lsn(100),
            xmin_from_restore: true,
            prev_oldest_running_xid: pred.builder.xmin + 2,
        };
        let mut server = pred.clone();
        server.builder.last_serialized_snapshot = Lsn(100);
        server.builder.xmin = pred.builder.xmin + 2;
        let c = compare_with_server(&pred, &server, Some(ctx));
        assert!(
            c.differences.is_empty() && c.writer_dependent.is_empty(),
            "{c:?}"
        );
        assert_eq!(c.writer_xmin, Some(server.builder.xmin));
        assert_eq!(
            bytes_with_writer_fields(&pred, &server, &c),
            server.encode()
        );
        // Committed xids older than that xmin were purged by the writer there.
        let mut pred2 = pred.clone();
        pred2.committed_xip = vec![pred.builder.xmin, pred.builder.xmin + 3];
        let mut server2 = server.clone();
        server2.committed_xip = vec![pred.builder.xmin + 3];
        let c = compare_with_server(&pred2, &server2, Some(ctx));
        assert!(
            c.differences.is_empty() && c.writer_dependent.is_empty(),
            "{c:?}"
        );
        assert!(c.committed_as_purged);
        assert_eq!(
            bytes_with_writer_fields(&pred2, &server2, &c),
            server2.encode()
        );
        server.builder.xmin += 1;
        let c = compare_with_server(&pred, &server, Some(ctx));
        assert_eq!(c.differences.len(), 1, "{c:?}");
        // Another last_serialized_snapshot: the writer's history is unknown.
        server.builder.last_serialized_snapshot = Lsn(90);
        let c = compare_with_server(&pred, &server, Some(ctx));
        assert!(
            c.differences.is_empty() && c.writer_dependent.len() == 1,
            "{c:?}"
        );
    }

    /// A hard difference stays false even when the committed list would be explained by
    /// a purge (not NULL).
    #[test]
    fn hard_difference_beats_an_explained_committed_list() {
        let mut row = serialize_row();
        let pred = *row.serialized.clone().unwrap();
        row.serialize_context = Some(SerializeContext {
            prev_running_xacts: Lsn(100),
            xmin_from_restore: true,
            prev_oldest_running_xid: pred.builder.xmin + 2,
        });
        let mut p2 = pred.clone();
        p2.committed_xip = vec![pred.builder.xmin, pred.builder.xmin + 3];
        row.serialized = Some(Box::new(p2));
        let mut server = pred.clone();
        server.builder.last_serialized_snapshot = Lsn(100);
        server.builder.xmin = pred.builder.xmin + 2;
        server.committed_xip = vec![pred.builder.xmin + 3];
        server.builder.next_phase_at = 7;
        let raw = server.encode().unwrap();
        let v = judge_row(&row, &facts(FileFact::Read { file: server, raw }));
        assert_eq!(v.agrees, Some(false), "{v:?}");
    }

    /// A restore row is undecided: the file says nothing of whether the server restored it.
    /// The writers the server log names decide a file the replay's own history cannot:
    /// all write it → true, none → false naming the field, some → undecided (never
    /// false), one that could not be replayed → the replay's own judgement.
    #[test]
    fn writers_named_by_the_log_decide() {
        let row = serialize_row();
        let ours = *row.serialized.clone().unwrap();
        let mut server = ours.clone();
        server.builder.xmax += 5;
        let raw = server.encode().unwrap();
        let writer = |restart: u64, file: Option<&SnapBuildOnDisk>| LoggedWriter {
            restart: Lsn(restart),
            slot: "s".into(),
            pid: Some(7),
            fast_forward: false,
            file: file.cloned(),
        };
        let with = |ws: Vec<LoggedWriter>| {
            let mut f = facts(FileFact::Read {
                file: server.clone(),
                raw: raw.clone(),
            });
            f.log_writers = LogWriters::Known(ws);
            judge_row(&row, &f)
        };
        let v = with(vec![writer(40, Some(&server)), writer(50, Some(&server))]);
        assert_eq!(
            (v.agrees, v.bytes_agree, v.disagreement),
            (Some(true), Some(true), None)
        );
        let v = with(vec![writer(40, Some(&ours))]);
        assert_eq!(v.agrees, Some(false));
        let d = v.disagreement.unwrap();
        assert!(d.contains("xmax") && d.contains("none writes it"), "{d}");
        let v = with(vec![writer(40, Some(&ours)), writer(50, Some(&server))]);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .contains("restarted at 0/32 write it"));
        // A hard difference in the replay's own file is not false when a named writer
        // writes the file.
        let mut cat = server.clone();
        cat.catchange_xip = vec![650];
        let mut f = facts(FileFact::Read {
            file: cat.clone(),
            raw: cat.encode().unwrap(),
        });
        f.log_writers = LogWriters::Known(vec![writer(40, Some(&ours)), writer(50, Some(&cat))]);
        assert_eq!(judge_row(&row, &f).agrees, None);
        let v = with(vec![writer(40, None), writer(50, Some(&server))]);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .starts_with("undecided: writer-dependent xmax"));
    }

    /// A DEBUG1 line of pid 17085 saying `msg`, as matched to a row: from a decoder that
    /// started as the replay did (which may then refute it) or not, equal to the replay's
    /// value or not.
    fn debug1_line(msg: &str, same_start: bool, equal: bool) -> crate::server_log::LogLineMatch {
        use crate::server_log::{BuilderLine, LineLevel, LogLineMatch};
        LogLineMatch {
            line: BuilderLine::new(1_796_153_690_098, Some(17085), LineLevel::Debug1, msg),
            same_start,
            equal,
            may_refute: same_start,
        }
    }

    /// DEBUG1: a pre-filter skip row is undecided (never false) when the server logs above
    /// debug1; slot-candidate lines of a decoder that started as the replay did judge a
    /// row that has no other verdict, refute any row when they name other values, and are
    /// only named when they come from decoders that started elsewhere.
    #[test]
    fn debug1_lines_judge_skips_and_candidates() {
        use crate::server_log::LogLineMatch;
        let line = debug1_line;
        let mut row = serialize_row();
        row.serialized = None;
        row.message = Some(
            "skipping snapshot at 0/64 while building logical decoding snapshot, xmin horizon too low"
                .into(),
        );
        let mut f = facts(FileFact::Absent);
        f.log_lines = LogLines::Lines(Vec::new());
        f.debug_lines = DebugLines::Lines {
            candidates: Vec::new(),
            subtransactions: Vec::new(),
            serializing: Vec::new(),
            same_start_passed: false,
            same_start_logs_debug: false,
            level_above_debug1: Some("warning".into()),
        };
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .starts_with("undecided: log_min_messages above debug1 (warning)"));

        // A RUNNING_XACTS row without another verdict, candidates at 0/1718440.
        let mut row = serialize_row();
        row.serialized = None;
        row.candidate_xmin = Some((Lsn(0x1718440), 757));
        row.candidate_restart = Some((Lsn(0x1718440), Lsn(0x1718440)));
        let xmin = "got new catalog xmin 757 at 0/1718440";
        f.log_lines = LogLines::NotAsked;
        let with = |c: Vec<LogLineMatch>| DebugLines::Lines {
            candidates: c,
            subtransactions: Vec::new(),
            serializing: Vec::new(),
            same_start_passed: false,
            same_start_logs_debug: true,
            level_above_debug1: None,
        };
        f.debug_lines = with(vec![line(xmin, true, true)]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(true));
        assert_eq!(
            v.server_source.as_deref(),
            Some("server log: pid 17085 at 2026-12-01 19:34:50.098 UTC (DEBUG \"got new catalog xmin 757 at 0/1718440\")")
        );
        f.debug_lines = with(vec![line(xmin, true, false)]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(false));
        assert!(v
            .disagreement
            .unwrap()
            .contains("the replay proposes catalog xmin 757"));
        f.debug_lines = with(vec![line(xmin, false, false)]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v
            .server_source
            .unwrap()
            .starts_with("elsewhere: server log: pid 17085"));
        // An undecided row stays undecided when the candidates agree.
        f.debug_lines = with(vec![line(xmin, true, true)]);
        let row_b = TraceRow {
            restored_from: Some(Lsn(0x64)),
            ..row.clone()
        };
        assert_eq!(judge_row(&row_b, &f).agrees, None);
    }

    /// DEBUG1 `found subtransaction X:S with catalog changes`: a commit row is true when
    /// the decoder that started as the replay did logged exactly the set the replay found,
    /// false when it logged another set (or none though it logged at DEBUG1 past the
    /// commit), NULL with the reason when the server logs above debug1. `serializing
    /// snapshot to`: names the file's writer; a same-start writer where the replay does not
    /// serialize is false.
    #[test]
    fn debug1_subtransaction_and_serializing_lines() {
        use crate::replication::snapbuild::CommitVerdict;
        use crate::server_log::LogLineMatch;
        let line = debug1_line;
        let lines =
            |sub: Vec<LogLineMatch>, ser: Vec<LogLineMatch>, passed: bool, level: Option<&str>| {
                DebugLines::Lines {
                    candidates: Vec::new(),
                    subtransactions: sub,
                    serializing: ser,
                    same_start_passed: passed,
                    same_start_logs_debug: level.is_none(),
                    level_above_debug1: level.map(str::to_owned),
                }
            };
        let mut row = serialize_row();
        row.serialized = None;
        row.running_xids = None;
        row.xid = Some(754);
        row.commit = Some(CommitVerdict::Timetravel {
            xmax_advanced: true,
            forced: true,
            catalog_subxacts: vec![755, 757],
        });
        let (s755, s756, s757) = (
            "found subtransaction 754:755 with catalog changes",
            "found subtransaction 754:756 with catalog changes",
            "found subtransaction 754:757 with catalog changes",
        );
        let mut f = facts(FileFact::Absent);
        f.debug_lines = lines(
            vec![line(s755, true, true), line(s757, true, true)],
            vec![],
            false,
            None,
        );
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(true), "{v:?}");
        assert_eq!(
            v.server_source.as_deref(),
            Some("server log: pid 17085 at 2026-12-01 19:34:50.098 UTC (DEBUG \"found subtransaction 754:755 with catalog changes\"); server log: pid 17085 at 2026-12-01 19:34:50.098 UTC (DEBUG \"found subtransaction 754:757 with catalog changes\")")
        );
        // A set missing one, or with another, differs.
        f.debug_lines = lines(vec![line(s755, true, true)], vec![], false, None);
        assert_eq!(judge_row(&row, &f).agrees, Some(false));
        f.debug_lines = lines(
            vec![
                line(s755, true, true),
                line(s756, true, false),
                line(s757, true, true),
            ],
            vec![],
            false,
            None,
        );
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(false));
        assert!(v.disagreement.unwrap().contains(
            "found subtransactions 755, 756, 757 of 754 with catalog changes, the replay 755, 757"
        ));
        // Another decoder's lines are named only.
        f.debug_lines = lines(vec![line(s756, false, false)], vec![], false, None);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v
            .server_source
            .unwrap()
            .starts_with("elsewhere: server log: pid 17085"));
        // None logged: above debug1 undecided, past the commit at DEBUG1 false.
        f.debug_lines = lines(vec![], vec![], false, Some("warning"));
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v
            .disagreement
            .unwrap()
            .starts_with("undecided: log_min_messages above debug1 (warning)"));
        f.debug_lines = lines(vec![], vec![], true, None);
        assert_eq!(judge_row(&row, &f).agrees, Some(false));
        // A commit the replay finds without catalog-changing subtransactions: a same-start
        // line is a difference, no line no statement.
        row.commit = Some(CommitVerdict::NotCatalogChanging);
        f.debug_lines = lines(vec![line(s755, true, false)], vec![], false, None);
        assert_eq!(judge_row(&row, &f).agrees, Some(false));
        f.debug_lines = lines(vec![], vec![], true, Some("warning"));
        let v = judge_row(&row, &f);
        assert_eq!((v.agrees, v.disagreement), (None, None));

        // serializing: a RUNNING_XACTS row the replay does not serialize at.
        let mut row = serialize_row();
        row.serialized = None;
        let ser = "serializing snapshot to pg_logical/snapshots/0-64.snap";
        f.debug_lines = lines(vec![], vec![line(ser, true, false)], false, None);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(false));
        assert!(v
            .disagreement
            .unwrap()
            .contains("the replay does not serialize at this record"));
        f.debug_lines = lines(vec![], vec![line(ser, false, false)], false, None);
        assert_eq!(judge_row(&row, &f).agrees, None);
    }

    /// A builder message is judged by the line a decoder that started as the replay did
    /// logged for the same record; other decoders' lines do not judge it.
    #[test]
    fn builder_messages_judged_by_the_log() {
        use crate::server_log::{BuilderLine, LogLineMatch};
        let mut row = serialize_row();
        row.serialized = None;
        row.message = Some("logical decoding found consistent point at 0/64".into());
        row.detail = Some("There are no running transactions.".into());
        let line = |msg: &str, same_start: bool, equal: bool| LogLineMatch {
            line: BuilderLine::new(
                1_796_131_110_089,
                Some(42),
                crate::server_log::LineLevel::Log,
                msg,
            ),
            same_start,
            equal,
            may_refute: same_start,
        };
        let mut f = facts(FileFact::Absent);
        f.log_lines = LogLines::Lines(vec![line(
            "logical decoding found consistent point at 0/64",
            true,
            true,
        )]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(true));
        assert_eq!(v.server_state.as_deref(), Some("consistent"));
        assert_eq!(
            v.server_source.as_deref(),
            Some("server log: pid 42 at 2026-12-01 13:18:30.089 UTC")
        );
        f.log_lines = LogLines::Lines(vec![line(
            "logical decoding found initial starting point at 0/64",
            true,
            false,
        )]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, Some(false));
        assert!(v.disagreement.unwrap().contains("initial starting point"));
        f.log_lines = LogLines::Lines(vec![line(
            "logical decoding found initial starting point at 0/64",
            false,
            false,
        )]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert_eq!(
            v.server_source.as_deref(),
            Some("decoders that started elsewhere: server log: pid 42 at 2026-12-01 13:18:30.089 UTC (\"logical decoding found initial starting point at 0/64\")")
        );
        // A creating decoder's different line confirms nothing and refutes nothing.
        let mut creation = line(
            "logical decoding found initial starting point at 0/64",
            true,
            false,
        );
        creation.may_refute = false;
        f.log_lines = LogLines::Lines(vec![creation.clone()]);
        let v = judge_row(&row, &f);
        assert_eq!(v.agrees, None);
        assert!(v.disagreement.unwrap().contains("it was creating the slot"));
        // A restore on one side only: the .snap files changed since that decoder ran.
        let mut restored = row.clone();
        restored.detail = Some("Logical decoding will begin using saved snapshot.".into());
        creation.may_refute = true;
        f.log_lines = LogLines::Lines(vec![creation]);
        let v = judge_row(&restored, &f);
        assert_eq!(v.agrees, None);
        assert!(v.disagreement.unwrap().contains("the .snap files differ"));
        f.log_lines = LogLines::Unreadable("no log".into());
        assert_eq!(judge_row(&row, &f), Verdict::default());
    }

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

    #[test]
    fn broken_and_absent_files() {
        let row = serialize_row();
        let v = judge_row(&row, &facts(FileFact::Broken("bad magic".into())));
        assert_eq!(
            (v.agrees, v.disagreement.as_deref()),
            (Some(false), Some("bad magic"))
        );
        assert_eq!(
            judge_row(&row, &facts(FileFact::Absent)),
            Verdict::default()
        );
    }
}

/// The server's verdict on where a slot was invalidated on a hot standby: `replayed` is
/// the record the replay found (its start and `RMGR/TYPE`, with the DETAIL the replay
/// predicts), `None` when it found none; `undecided` the records met before that may have
/// invalidated it but whose horizon the replay cannot read; `logged` the slot's
/// `invalidating obsolete replication slot` lines from the server log, oldest first (the
/// startup process logs them with the record being redone as CONTEXT), or why the log
/// could not be read. The newest logged line that names a record at or after
/// `replay_start` is the server's answer: equal LSN and DETAIL agree.
pub fn judge_invalidation(
    replayed: Option<(Lsn, &str, &str)>,
    undecided: &[(Lsn, String)],
    replay_start: Lsn,
    logged: Result<&[crate::server_log::InvalidationLine], &str>,
) -> Verdict {
    let mut v = Verdict {
        server_state: Some("invalidated".into()),
        ..Default::default()
    };
    let lines = match logged {
        Ok(l) => l,
        Err(why) => {
            v.disagreement = Some(format!(
                "undecided: the server log could not be read: {why}"
            ));
            return v;
        }
    };
    let server = lines.iter().rev().find_map(|l| {
        l.redo_record()
            .filter(|(at, _)| *at >= replay_start)
            .map(|r| (l, r))
    });
    let Some((line, (at, name))) = server else {
        v.disagreement = Some(
            "undecided: the server log read has no `invalidating obsolete replication slot` line for this slot with the WAL record being redone (CONTEXT: WAL redo at …)"
                .into(),
        );
        return v;
    };
    v.server_source = Some(format!(
        "server log: pid {} at {} (CONTEXT: WAL redo at {at} for {name})",
        line.pid.map_or("?".into(), |p| p.to_string()),
        crate::server_log::format_ms(line.at_ms)
    ));
    match replayed {
        Some((lsn, rname, detail)) => {
            let same_detail = line.detail.as_deref().is_none_or(|d| d == detail);
            if lsn == at && same_detail {
                v.agrees = Some(true);
            } else {
                v.agrees = Some(false);
                v.disagreement = Some(format!(
                    "the server invalidated the slot while redoing {at} ({name}, DETAIL {:?}); the replay at {lsn} ({rname}, DETAIL {detail:?})",
                    line.detail.as_deref().unwrap_or("")
                ));
            }
        }
        None if !undecided.is_empty() && undecided.iter().any(|(l, _)| *l == at) => {
            v.disagreement = Some(format!(
                "undecided: the server invalidated the slot while redoing {at} ({name}), a record whose horizon the replay does not read"
            ));
        }
        None => {
            v.agrees = Some(false);
            v.disagreement = Some(format!(
                "the server invalidated the slot while redoing {at} ({name}); the replay found no record that invalidates it{}",
                if undecided.is_empty() {
                    String::new()
                } else {
                    format!(" ({} records it cannot read were met)", undecided.len())
                }
            ));
        }
    }
    v
}
