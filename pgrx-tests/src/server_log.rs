//! The server log (`PGSNAP_LOG`): messages with their DETAIL, the snapshot builder's lines.

use crate::cluster::Env;
use crate::values::{fmt_lsn, parse_lsn};
use regex::Regex;
use std::io::{Read, Seek, SeekFrom};
use std::sync::OnceLock;

/// One server log message with the DETAIL that followed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// The line's `%m` timestamp as printed (`2026-12-01 19:34:50.098 UTC`).
    pub at: String,
    pub pid: i32,
    pub level: String,
    pub message: String,
    pub detail: Option<String>,
}

pub fn log_offset(env: &Env) -> u64 {
    std::fs::metadata(&env.log).unwrap().len()
}

fn log_line_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // default log_line_prefix '%m [%p] ': "2026-11-29 13:03:51.356 UTC [12754] LOG:  ..."
    RE.get_or_init(|| Regex::new(r"^(\S+ \S+(?: \S+)?) \[(\d+)\] ([A-Z0-9]+):  (.*)$").unwrap())
}

/// Messages logged since `offset`, with their DETAIL lines attached.
pub fn log_entries_since(env: &Env, offset: u64) -> Vec<LogEntry> {
    log_entries_in(&env.log, offset)
}

/// Messages of the stderr-format log file `path` from `offset` on, with their DETAIL
/// lines attached.
pub fn log_entries_in(path: &std::path::Path, offset: u64) -> Vec<LogEntry> {
    let mut f = std::fs::File::open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf);
    let mut out: Vec<LogEntry> = Vec::new();
    // which field a continuation line belongs to: 0 message, 1 detail, 2 other
    let mut last_field = 2;
    for line in text.lines() {
        if let Some(m) = log_line_re().captures(line) {
            let at = m[1].to_string();
            let pid: i32 = m[2].parse().unwrap();
            let level = m[3].to_string();
            let body = m[4].to_string();
            match level.as_str() {
                "DETAIL" => {
                    if let Some(e) = out.iter_mut().rev().find(|e| e.pid == pid) {
                        if e.detail.is_none() {
                            e.detail = Some(body);
                        }
                    }
                    last_field = 1;
                }
                "HINT" | "CONTEXT" | "STATEMENT" | "QUERY" | "LOCATION" => last_field = 2,
                _ => {
                    out.push(LogEntry {
                        at,
                        pid,
                        level,
                        message: body,
                        detail: None,
                    });
                    last_field = 0;
                }
            }
        } else if let Some(cont) = line.strip_prefix('\t') {
            if let Some(e) = out.last_mut() {
                match last_field {
                    0 => {
                        e.message.push('\n');
                        e.message.push_str(cont);
                    }
                    1 => {
                        if let Some(d) = e.detail.as_mut() {
                            d.push('\n');
                            d.push_str(cont);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

pub(crate) fn decoding_msg_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"^(?:logical decoding found (?:initial starting point|initial consistent point|consistent point) at|skipping snapshot at) ([0-9A-F]+/[0-9A-F]+)",
        )
        .unwrap()
    })
}

/// The snapshot builder's messages (`logical decoding found ... at L`) a backend logged,
/// with the LSN they name.
pub fn builder_messages(entries: &[LogEntry], pid: i32) -> Vec<(u64, LogEntry)> {
    entries
        .iter()
        .filter(|e| e.pid == pid)
        .filter_map(|e| {
            decoding_msg_re()
                .captures(&e.message)
                .map(|m| (parse_lsn(&m[1]), e.clone()))
        })
        .collect()
}

/// The snapshot builder branch a server LOG line of slot creation or restart names: `c-1`,
/// `c-2`, `a`, `b`, `c-3` (the DETAIL tells a, b and c-3 apart), `xmin horizon too low`
/// (the "skipping snapshot" line), `?` for anything else.
pub fn log_branch(e: &LogEntry) -> &'static str {
    let m = &e.message;
    if m.starts_with("logical decoding found initial starting point") {
        "c-1"
    } else if m.starts_with("logical decoding found initial consistent point") {
        "c-2"
    } else if m.starts_with("logical decoding found consistent point") {
        match e.detail.as_deref() {
            Some("There are no running transactions.") => "a",
            Some("There are no old transactions anymore.") => "c-3",
            Some("Logical decoding will begin using saved snapshot.") => "b",
            _ => "?",
        }
    } else if m.starts_with("skipping snapshot") {
        "xmin horizon too low"
    } else {
        "?"
    }
}

/// The branches ([`log_branch`]) of builder messages, in order.
pub fn kinds(msgs: &[(u64, LogEntry)]) -> Vec<&'static str> {
    msgs.iter().map(|(_, e)| log_branch(e)).collect()
}

pub fn dump_log(entries: &[(u64, LogEntry)]) -> String {
    entries
        .iter()
        .map(|(l, e)| {
            format!(
                "  {} [{}] {}: {} / {:?}\n",
                fmt_lsn(*l),
                e.pid,
                e.level,
                e.message,
                e.detail
            )
        })
        .collect()
}

/// The standby's own account of a slot invalidation, read from its log since `offset`:
/// for the last `invalidating obsolete replication slot "SLOT"` line, its DETAIL and the
/// record its process was redoing (`CONTEXT:  WAL redo at X/Y for RMGR/TYPE: …`) as (LSN,
/// `RMGR/TYPE`). Parsed here, independently of the extension's log reader.
pub fn logged_invalidation(
    env: &Env,
    offset: u64,
    slot: &str,
) -> Option<(Option<String>, Option<(u64, String)>)> {
    let mut f = std::fs::File::open(&env.log).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf);
    let want = format!("invalidating obsolete replication slot \"{slot}\"");
    let redo = Regex::new(r"^WAL redo at ([0-9A-F]+/[0-9A-F]+) for ([^ :]+)").unwrap();
    let mut found: Option<(i32, Option<String>, Option<(u64, String)>)> = None;
    let mut open = false;
    for line in text.lines() {
        let Some(m) = log_line_re().captures(line) else {
            continue;
        };
        let pid: i32 = m[2].parse().unwrap();
        match (&m[3], open) {
            ("LOG", _) => {
                open = m[4] == want;
                if open {
                    found = Some((pid, None, None));
                }
            }
            ("DETAIL", true) => {
                if let Some(f) = found.as_mut().filter(|f| f.0 == pid) {
                    f.1 = Some(m[4].to_string());
                }
            }
            ("CONTEXT", true) => {
                if let (Some(f), Some(r)) =
                    (found.as_mut().filter(|f| f.0 == pid), redo.captures(&m[4]))
                {
                    f.2 = Some((crate::values::parse_lsn(&r[1]), r[2].to_string()));
                }
            }
            _ => {}
        }
    }
    found.map(|(_, d, r)| (d, r))
}
