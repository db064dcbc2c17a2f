//! What the server log says at DEBUG1 about a row's record: the catalog-changing
//! subtransactions of a commit (`found subtransaction X:S with catalog changes`), the
//! writers of the record's `.snap` file (`serializing snapshot to …`), the pre-filter skip
//! (`skipping snapshot at …`) and the slot candidates (`got new catalog xmin …`, `got new
//! restart lsn …`).
//!
//! Not a PostgreSQL file; the lines are snapbuild.c's and logical.c's elog(DEBUG1), read
//! from the server log by `server_log`.

use super::{add_disagreement, add_sources, log_who, LogLines, RowFacts, Verdict};
use crate::replication::decode::TraceRow;

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

/// The subtransactions a commit row's replay found catalog-changing (snapbuild.c
/// SnapBuildCommitTxn).
pub(super) fn replay_catalog_subxacts(row: &TraceRow) -> &[u32] {
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
fn with_subtransaction_lines(row: &TraceRow, mut v: Verdict, facts: &RowFacts) -> Verdict {
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
fn with_serializing_lines(row: &TraceRow, mut v: Verdict, facts: &RowFacts) -> Verdict {
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
pub(super) fn with_debug_lines(row: &TraceRow, v: Verdict, facts: &RowFacts) -> Verdict {
    let v = with_subtransaction_lines(row, v, facts);
    let v = with_serializing_lines(row, v, facts);
    with_skip_and_candidate_lines(row, v, facts)
}

/// The pre-filter skip and the slot candidates of [`with_debug_lines`].
fn with_skip_and_candidate_lines(row: &TraceRow, mut v: Verdict, facts: &RowFacts) -> Verdict {
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

#[cfg(test)]
mod tests {
    use super::super::fixtures::{facts, serialize_row};
    use super::super::{judge_row, FileFact};
    use super::*;
    use crate::include::xlogdefs::Lsn;

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
}
