//! The snapshot builder's lines of the server log against the trace rows that name them:
//! the record LSN a LOG or DEBUG1 builder line is about ([`builder_line_lsn`]), the `.snap`
//! file a `serializing snapshot` line names ([`serialized_file_lsn`]), the transactions of
//! a `found subtransaction` line ([`subtransaction_line`]), and the rows whose
//! `server_source` or `disagreement` name a line (`server log: pid P at T`:
//! [`rows_naming`], [`rows_naming_anywhere`]).

use crate::server_log::LogEntry;
use crate::trace::TraceRow;
use crate::values::{fmt_lsn, js, parse_lsn};

/// The record LSN a builder line (LOG `logical decoding found … at L`, DEBUG1 `skipping
/// snapshot at L`, `got new catalog xmin X at L`, `got new restart lsn R at L`, `failed to
/// increase restart lsn: proposed R, after L, …`) is about, as the server printed it.
pub fn builder_line_lsn(e: &LogEntry) -> Option<u64> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"^(?:logical decoding found (?:initial starting point|initial consistent point|consistent point) at |skipping snapshot at |got new catalog xmin \d+ at |got new restart lsn [0-9A-F]+/[0-9A-F]+ at |failed to increase restart lsn: proposed [0-9A-F]+/[0-9A-F]+, after )([0-9A-F]+/[0-9A-F]+)",
        )
        .unwrap()
    });
    let ok = match e.level.as_str() {
        "LOG" => e.message.starts_with("logical decoding found"),
        "DEBUG" => !e.message.starts_with("logical decoding found"),
        _ => false,
    };
    if !ok {
        return None;
    }
    if let Some(l) = e
        .level
        .eq("DEBUG")
        .then(|| serialized_file_lsn(&e.message))
        .flatten()
    {
        return Some(l);
    }
    re.captures(&e.message).map(|m| parse_lsn(&m[1]))
}

/// The LSN of the `.snap` file a DEBUG1 `serializing snapshot to
/// pg_logical/snapshots/X-Y.snap` line names (SnapBuildSerialize: the record serialized at).
pub fn serialized_file_lsn(message: &str) -> Option<u64> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"^serializing snapshot to pg_logical/snapshots/([0-9A-F]+)-([0-9A-F]+)\.snap$",
        )
        .unwrap()
    });
    re.captures(message)
        .map(|m| parse_lsn(&format!("{}/{}", &m[1], &m[2])))
}

/// `(X, S)` of a DEBUG1 `found subtransaction X:S with catalog changes` line
/// (SnapBuildCommitTxn), which names transactions rather than a record.
pub fn subtransaction_line(e: &LogEntry) -> Option<(u64, u64)> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"^found subtransaction (\d+):(\d+) with catalog changes$").unwrap()
    });
    (e.level == "DEBUG")
        .then(|| re.captures(&e.message))
        .flatten()
        .map(|m| (m[1].parse().unwrap(), m[2].parse().unwrap()))
}

/// The rows, anywhere in the trace, whose `server_source` names the DEBUG1 line `e`.
pub fn rows_naming_anywhere<'a>(rows: &'a [TraceRow], e: &LogEntry) -> Vec<&'a TraceRow> {
    let label = format!(
        "server log: pid {} at {} (DEBUG \"{}\")",
        e.pid, e.at, e.message
    );
    rows.iter()
        .filter(|r| js(&r.raw, "server_source").is_some_and(|s| s.contains(&label)))
        .collect()
}

/// The trace rows at `lsn` that name the server's log line `e` (as
/// `server log: pid P at T` in `server_source` or `disagreement`; a DEBUG1 slot-candidate
/// line as `… (DEBUG "message")` in `server_source`): exactly one, when the line is matched.
pub fn rows_naming<'a>(rows: &'a [TraceRow], lsn: u64, e: &LogEntry) -> Vec<&'a TraceRow> {
    let label = format!("server log: pid {} at {}", e.pid, e.at);
    let debug_label = format!("{label} (DEBUG \"{}\")", e.message);
    rows.iter()
        .filter(|r| r.lsn == Some(lsn))
        .filter(|r| {
            let src = js(&r.raw, "server_source").unwrap_or_default();
            let dis = r.disagreement.clone().unwrap_or_default();
            if e.level == "DEBUG" && !e.message.starts_with("skipping") {
                src.contains(&debug_label)
            } else {
                src.contains(&label) || dis.contains(&label)
            }
        })
        .collect()
}

/// The rows with their LSN, record, branch, message, `agrees`, `server_source` and
/// `disagreement`, one a line (what the checks of builder lines print on failure).
pub fn dump_with_sources(rows: &[TraceRow]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "  {} {} {:?} {:?} agrees={:?} src={:?} dis={:?}\n",
                r.lsn.map(fmt_lsn).unwrap_or_default(),
                r.record,
                r.branch,
                r.message,
                r.agrees,
                js(&r.raw, "server_source"),
                r.disagreement
            )
        })
        .collect()
}
