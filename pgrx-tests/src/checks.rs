//! The checks every trace gets against the server's WAL and log, and collected failures.

use crate::server_log::{decoding_msg_re, dump_log, LogEntry};
use crate::trace::{dump, TraceRow};
use crate::values::{fmt_lsn, parse_lsn};
use crate::wal::{wal_running_xacts, WalRunningXacts};
use postgres::Client;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default, Debug, Clone, Copy)]
pub struct TraceStats {
    pub rows: usize,
    pub running_xacts_rows: usize,
    pub wal_records_matched: usize,
    pub agrees_true: usize,
    pub agrees_false: usize,
    pub agrees_null: usize,
}

/// "trace rows R running_xacts rows matched to WAL W agrees t/f/null T/F/N", for the tests'
/// `pgsnap-counts:` lines.
impl std::fmt::Display for TraceStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{}",
            self.rows,
            self.wal_records_matched,
            self.agrees_true,
            self.agrees_false,
            self.agrees_null
        )
    }
}

impl std::ops::AddAssign for TraceStats {
    fn add_assign(&mut self, o: Self) {
        self.rows += o.rows;
        self.running_xacts_rows += o.running_xacts_rows;
        self.wal_records_matched += o.wal_records_matched;
        self.agrees_true += o.agrees_true;
        self.agrees_false += o.agrees_false;
        self.agrees_null += o.agrees_null;
    }
}

/// Checks a trace against what the server wrote to its WAL and slot catalog:
/// * the REPLAY START row starts at the slot's restart_lsn (pg_replication_slots);
/// * every RUNNING_XACTS row is a RUNNING_XACTS record in the WAL at the same
///   [lsn, end_lsn), with the same running xids; every such record in the WAL between
///   restart_lsn and `flush_before` (taken before the trace call) is a row;
/// * c-1/c-2 rows wait for exactly the record's xids (SnapBuildWaitSnapshot, cutoff nextXid);
/// * before consistency, branch a is taken exactly when the record has oldestRunningXid ==
///   nextXid (a is tested first in SnapBuildFindSnapshot);
/// * a LOG/DEBUG1 message names the row's own LSN;
/// * no row says agrees = false.
pub fn check_trace_against_wal(
    c: &mut Client,
    slot_restart_lsn: u64,
    flush_before: u64,
    rows: &[TraceRow],
) -> TraceStats {
    check_replay_start(slot_restart_lsn, rows);
    let end = rows
        .iter()
        .filter_map(|r| r.end_lsn.or(r.lsn))
        .max()
        .unwrap_or(slot_restart_lsn)
        .max(flush_before);
    let wal: BTreeMap<u64, WalRunningXacts> = wal_running_xacts(c, slot_restart_lsn, end)
        .into_iter()
        .map(|w| (w.start, w))
        .collect();
    let mut st = TraceStats {
        rows: rows.len(),
        ..Default::default()
    };
    let mut prev_lsn = 0u64;
    let mut seen = BTreeSet::new();
    for r in rows {
        st.count_agrees(r);
        if let Some(l) = r.lsn {
            check_lsn_order_and_message(r, l, prev_lsn, rows);
            prev_lsn = l;
        }
        if r.record != "RUNNING_XACTS" {
            continue;
        }
        st.running_xacts_rows += 1;
        let l = r.lsn.expect("RUNNING_XACTS row without lsn");
        let w = wal.get(&l).unwrap_or_else(|| {
            panic!(
                "trace row at {} is not a RUNNING_XACTS record in the server's WAL (pg_walinspect):\n{}",
                fmt_lsn(l),
                dump(rows)
            )
        });
        seen.insert(l);
        st.wal_records_matched += 1;
        check_running_xacts_row(r, l, w, rows);
    }
    check_every_record_has_a_row(&wal, &seen, slot_restart_lsn, flush_before, rows);
    check_no_row_disagrees(rows);
    st
}

impl TraceStats {
    fn count_agrees(&mut self, r: &TraceRow) {
        match r.agrees {
            Some(true) => self.agrees_true += 1,
            Some(false) => self.agrees_false += 1,
            None => self.agrees_null += 1,
        }
    }
}

/// The first row is REPLAY START, at the slot's restart_lsn when it names an LSN.
fn check_replay_start(slot_restart_lsn: u64, rows: &[TraceRow]) {
    assert!(!rows.is_empty(), "empty trace");
    let first = &rows[0];
    assert_eq!(
        first.record,
        "REPLAY START",
        "first trace row must be REPLAY START:\n{}",
        dump(rows)
    );
    if let Some(l) = first.lsn {
        assert_eq!(
            l,
            slot_restart_lsn,
            "REPLAY START at {} but the slot's restart_lsn (pg_replication_slots) is {}",
            fmt_lsn(l),
            fmt_lsn(slot_restart_lsn)
        );
    }
}

/// Rows in LSN order; a builder message names its row's own LSN.
fn check_lsn_order_and_message(r: &TraceRow, l: u64, prev_lsn: u64, rows: &[TraceRow]) {
    assert!(
        l >= prev_lsn,
        "trace rows out of LSN order at {}:\n{}",
        fmt_lsn(l),
        dump(rows)
    );
    if let Some(m) = r.message.as_deref() {
        if let Some(cap) = decoding_msg_re().captures(m) {
            assert_eq!(
                parse_lsn(&cap[1]),
                l,
                "message names another LSN than its row: {}",
                r.show()
            );
        }
    }
}

/// A RUNNING_XACTS row against its record `w` in the WAL (at `l`): end, running xids,
/// the xids c-1/c-2 wait for, branch a exactly when nothing runs.
fn check_running_xacts_row(r: &TraceRow, l: u64, w: &WalRunningXacts, rows: &[TraceRow]) {
    let ctx = || dump(rows);
    assert_eq!(
        r.end_lsn,
        Some(w.end),
        "end_lsn of {} differs from the WAL's ({}):\n{}",
        fmt_lsn(l),
        fmt_lsn(w.end),
        ctx()
    );
    let mut theirs = w.xacts.clone();
    theirs.sort_unstable();
    check_running_xids(r, l, w, &theirs, rows);
    if r.branch_is("c-1") || r.branch_is("c-2") {
        let mut wait = r.wait_xids.clone().unwrap_or_default();
        wait.sort_unstable();
        let mut expect: Vec<u64> = theirs
            .iter()
            .copied()
            .filter(|x| *x <= w.next_xid)
            .collect();
        expect.sort_unstable();
        assert_eq!(
            wait,
            expect,
            "wait_xids at {} ({}):\n{}",
            fmt_lsn(l),
            w.description,
            ctx()
        );
    }
    if r.state_before.as_deref() != Some("consistent") && !r.branch_is("xmin horizon too low") {
        let nothing_running = w.oldest_running_xid == w.next_xid;
        assert_eq!(
            r.branch_is("a"),
            nothing_running,
            "at {} the WAL says '{}' but the trace took branch {:?}:\n{}",
            fmt_lsn(l),
            w.description,
            r.branch,
            ctx()
        );
    }
}

/// The row lists the record's top-level xids and subxids. The description has both from
/// 16 on; before that only the top-level ones (`theirs`, sorted), which must all be in
/// the row.
fn check_running_xids(
    r: &TraceRow,
    l: u64,
    w: &WalRunningXacts,
    theirs: &[u64],
    rows: &[TraceRow],
) {
    let mut ours = r.running_xids.clone().unwrap_or_default();
    ours.sort_unstable();
    if w.lists_subxacts {
        let mut all: Vec<u64> = theirs.iter().chain(&w.subxacts).copied().collect();
        all.sort_unstable();
        assert_eq!(
            ours,
            all,
            "running_xids at {} differ from the WAL record ({}):\n{}",
            fmt_lsn(l),
            w.description,
            dump(rows)
        );
    } else {
        let missing: Vec<u64> = theirs
            .iter()
            .filter(|x| ours.binary_search(x).is_err())
            .copied()
            .collect();
        assert!(
            missing.is_empty(),
            "running_xids at {} lack {missing:?} of the WAL record ({}):\n{}",
            fmt_lsn(l),
            w.description,
            dump(rows)
        );
    }
}

/// Every RUNNING_XACTS record from restart_lsn that was flushed before the trace call
/// is a row.
fn check_every_record_has_a_row(
    wal: &BTreeMap<u64, WalRunningXacts>,
    seen: &BTreeSet<u64>,
    slot_restart_lsn: u64,
    flush_before: u64,
    rows: &[TraceRow],
) {
    for (l, w) in wal {
        if w.end <= flush_before && *l >= slot_restart_lsn {
            assert!(
                seen.contains(l),
                "the WAL has RUNNING_XACTS at {} ({}) (flushed before the trace call) but the trace has no row for it:\n{}",
                fmt_lsn(*l),
                w.description,
                dump(rows)
            );
        }
    }
}

/// No row says agrees = false.
fn check_no_row_disagrees(rows: &[TraceRow]) {
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| r.agrees == Some(false))
        .map(|r| {
            format!(
                "{} {:?}: {:?}",
                r.lsn.map(fmt_lsn).unwrap_or_default(),
                r.record,
                r.disagreement
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "trace rows disagree with the server:\n{}\n{}",
        bad.join("\n"),
        dump(rows)
    );
}

/// The server's builder messages (LOG lines of `pid`) and the trace's LOG-level rows up to
/// and including consistency must be the same (lsn, message, detail) triples, and each
/// such row must carry the server's line as its verdict ([`check_rows_carry_server_log`]).
pub fn compare_log_with_trace(server: &[(u64, LogEntry)], rows: &[TraceRow], upto: Option<u64>) {
    compare_log_with_earlier_trace(server, rows, upto);
    check_rows_carry_server_log(server, rows, upto);
}

/// [`compare_log_with_trace`]'s first half, for rows traced before the server logged
/// `server` (the trace could not have read those lines yet): the LOG-level builder
/// messages (LSN, message, detail) equal the server's.
pub fn compare_log_with_earlier_trace(
    server: &[(u64, LogEntry)],
    rows: &[TraceRow],
    upto: Option<u64>,
) {
    let theirs: Vec<(u64, String, Option<String>)> = server
        .iter()
        .filter(|(_, e)| e.level == "LOG")
        .map(|(l, e)| (*l, e.message.clone(), e.detail.clone()))
        .collect();
    let ours: Vec<(u64, String, Option<String>)> = rows
        .iter()
        .filter(|r| r.level.as_deref() == Some("LOG") && r.message.is_some() && r.lsn.is_some())
        .filter(|r| upto.is_none_or(|u| r.lsn.unwrap() <= u))
        .filter(|r| r.record != "REPLAY START")
        .map(|r| {
            (
                r.lsn.unwrap(),
                r.message.clone().unwrap(),
                r.detail.clone().filter(|d| !d.is_empty()),
            )
        })
        .collect();
    assert_eq!(
        ours,
        theirs,
        "LOG-level builder messages differ.\nserver log:\n{}trace:\n{}",
        dump_log(server),
        dump(rows)
    );
}

/// [`compare_log_with_trace`]'s second half: the trace reads the same log itself, so each
/// LOG-level builder row carries the server's line (`server log: pid P …` in
/// server_source, a pid this harness found logging that message) and agrees.
pub fn check_rows_carry_server_log(
    server: &[(u64, LogEntry)],
    rows: &[TraceRow],
    upto: Option<u64>,
) {
    for r in rows
        .iter()
        .filter(|r| r.level.as_deref() == Some("LOG") && r.message.is_some() && r.lsn.is_some())
        .filter(|r| upto.is_none_or(|u| r.lsn.unwrap() <= u))
        .filter(|r| r.record != "REPLAY START")
    {
        let pids: Vec<i32> = server
            .iter()
            .filter(|(_, e)| e.level == "LOG" && Some(&e.message) == r.message.as_ref())
            .map(|(_, e)| e.pid)
            .collect();
        let source = crate::js(&r.raw, "server_source").unwrap_or_default();
        assert!(
            r.agrees == Some(true) && pids.iter().any(|p| source.contains(&format!("server log: pid {p} "))),
            "trace row {} {:?} should agree from the server log line of pid {pids:?}: agrees {:?}, server_source {source:?}, disagreement {:?}",
            r.record,
            r.message,
            r.agrees,
            r.disagreement
        );
    }
}

/// Failures collected so that one test reports every disagreement it finds, not only the
/// first; `finish` fails the test if there is any.
#[derive(Default, Debug)]
pub struct Failures(pub Vec<String>);

impl Failures {
    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let w = what();
            println!("FAILURE: {w}");
            self.0.push(w);
        }
    }

    pub fn finish(self, test: &str) {
        assert!(
            self.0.is_empty(),
            "{test}: {} failure(s):\n{}",
            self.0.len(),
            self.0.join("\n---\n")
        );
    }
}
