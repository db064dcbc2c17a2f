//! The checks: functions over (step list, outcome), each a comparison with the server.

use crate::exec::{Outcome, SlotObs};
use crate::steps::Step;
use pg_snapbuild_tests::*;
use std::collections::BTreeSet;

/// One comparison with the server. `run` returns one text per disagreement; `how` says
/// how to look at it by hand (`{slot}` = the slot's name), for the reproducer.
#[derive(Clone, Copy)]
pub struct Check {
    pub name: &'static str,
    pub how: &'static str,
    pub run: fn(&[&Step], &Outcome) -> Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub check: &'static str,
    pub detail: String,
}

/// The checks every run gets; a new one is a function and a line here.
pub const CHECKS: &[Check] = &[
    Check {
        name: "slot prediction",
        how: "SELECT * FROM snapbuild_slot_prediction('{slot}', <upto>) before pg_logical_slot_get_changes('{slot}', <upto>, NULL), \
              then SELECT * FROM snapbuild_slots() WHERE slot_name = '{slot}'",
        run: check_predictions,
    },
    Check {
        name: "decoding cost",
        how: "SELECT pg_stat_reset_replication_slot('{slot}'); SET logical_decoding_work_mem = '64kB'; \
              SELECT * FROM snapbuild_decoding_cost('{slot}', <upto>) before pg_logical_slot_get_changes('{slot}', <upto>, NULL), \
              then SELECT * FROM pg_stat_replication_slots WHERE slot_name = '{slot}'",
        run: check_decoding_cost,
    },
    Check {
        name: "creation consistency LSN",
        how: "SELECT end_lsn, branch FROM snapbuild_trace_range(<restart_lsn>, NULL, <catalog_xmin>, true) \
              WHERE state_before <> 'consistent' AND state = 'consistent' (the first) = the LSN the creation returned",
        run: check_creation,
    },
    Check {
        name: "trace error",
        how: "SELECT * FROM snapbuild_trace('{slot}')",
        run: check_trace_errors,
    },
    Check {
        name: "decoded xids",
        how: "SELECT xid FROM snapbuild_trace('{slot}') WHERE decoded  vs  SELECT data FROM pg_logical_slot_peek_changes('{slot}', NULL, NULL, \
              'include-xids', '1', 'skip-empty-xacts', '0') WHERE data LIKE 'COMMIT %'",
        run: check_decoded,
    },
    Check {
        name: "streamed xids",
        how: "the transaction ends test_decoding emits with 'stream-changes' on (logical_decoding_work_mem 64kB, \
              debug_logical_replication_streaming = immediate on 16+; committing/preparing streamed transaction \
              counted as COMMIT/PREPARE) = those it emits without streaming = the replay's decoded rows",
        run: check_streamed,
    },
    Check {
        name: "subscription slot",
        how: "SELECT * FROM snapbuild_trace('<prefix>_sub') while the subscription's walsender holds the slot: \
              no error, no row with agrees = false",
        run: check_subscription,
    },
    Check {
        name: ".snap row disagreement",
        how: "SELECT * FROM snapbuild_trace('{slot}') WHERE NOT agrees (after a peek wrote the .snap files)",
        run: check_rows,
    },
    Check {
        name: ".snap bytes",
        how: "SELECT * FROM snapbuild_trace('{slot}') WHERE NOT bytes_agree (after a peek wrote the .snap files)",
        run: check_bytes,
    },
];

/// The prediction's fields that rest on catalog_xmin candidates (NULL for an advance on
/// 14-16, where they are not predicted).
const XMIN_FIELDS: [&str; 3] = [
    "catalog_xmin",
    "candidate_catalog_xmin",
    "candidate_xmin_lsn",
];

pub fn check_predictions(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for p in &o.predictions {
        match &p.fields {
            Err(e) => f.push(format!(
                "{}: snapbuild_slot_prediction up to {} failed: {e}",
                p.slot, p.upto
            )),
            Ok(fields) => {
                let all = fields
                    .iter()
                    .map(|(n, p, s)| format!("{n} {p:?}/{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                for (name, pred, server) in fields {
                    // 14-16: an advance's catalog_xmin fields are not predicted: they
                    // must be NULL, and are not compared
                    if !p.xmin_predicted && XMIN_FIELDS.contains(name) {
                        if pred.is_some() {
                            f.push(format!(
                                "{}: an advance's {name} should not be predicted on this major, got {pred:?}",
                                p.slot
                            ));
                        }
                        continue;
                    }
                    if pred != server {
                        f.push(format!(
                            "{} after {} up to {}: {name} predicted {pred:?}, server {server:?} (predicted/server: {all})",
                            p.slot,
                            if p.advance {
                                "pg_replication_slot_advance"
                            } else {
                                "get_changes"
                            },
                            p.upto
                        ));
                    }
                }
            }
        }
    }
    f
}

/// `snapbuild_decoding_cost` against `pg_stat_replication_slots` for every get_changes
/// (an undecided prediction has all eight counters NULL and is not compared).
pub fn check_decoding_cost(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for p in &o.predictions {
        match &p.cost {
            None => {}
            Some(Err(e)) => f.push(format!(
                "{}: snapbuild_decoding_cost up to {} failed: {e}",
                p.slot, p.upto
            )),
            Some(Ok((pred, why, server))) => {
                if why.is_some() {
                    if pred.iter().any(Option::is_some) {
                        f.push(format!(
                            "{}: undecided ({why:?}) but counters given",
                            p.slot
                        ));
                    }
                    continue;
                }
                let wrong: Vec<String> = SLOT_COUNTERS
                    .iter()
                    .zip(pred.iter().zip(server))
                    .filter(|(_, (p, s))| **p != Some(**s))
                    .map(|(n, (p, s))| format!("{n} predicted {p:?} server {s}"))
                    .collect();
                if !wrong.is_empty() {
                    f.push(format!(
                        "{} after get_changes up to {}: {}",
                        p.slot,
                        p.upto,
                        wrong.join(", ")
                    ));
                }
            }
        }
    }
    f
}

pub fn check_creation(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        match &s.creation_consistent_at {
            None => {}
            Some(Err(e)) => f.push(format!(
                "{}: snapbuild_trace_range of the creation: {e}",
                s.name
            )),
            Some(Ok(first)) if *first != Some(s.created_at) => f.push(format!(
                "{}: replayed creation became consistent at {:?}, the server at {}",
                s.name,
                first.map(fmt_lsn),
                fmt_lsn(s.created_at)
            )),
            Some(Ok(_)) => {}
        }
    }
    f
}

pub fn check_trace_errors(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for (what, r) in [
            ("trace", &s.trace),
            ("trace after the peek", &s.trace_after_peek),
        ] {
            if let Err(e) = r {
                f.push(format!("{}: {what}: {e}", s.name));
            }
        }
        if let Err(e) = &s.decoded {
            f.push(format!("{}: test_decoding: {e}", s.name));
        }
    }
    f
}

/// What `test_decoding` emitted that ends a transaction, as (callback, xid), sorted:
/// `COMMIT x` → commit, `PREPARE TRANSACTION 'g', txid x` → prepare, `COMMIT PREPARED …`
/// → commit_prepared, `ROLLBACK PREPARED …` → rollback_prepared ([`emitted_kind`]).
pub fn server_commits(s: &SlotObs) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = s
        .decoded
        .as_ref()
        .map(|lines| lines.iter().filter_map(|(_, d)| emitted_kind(d)).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// The output plugin callbacks a trace verdict stands for (DecodeVerdict::sends). Unlike
/// the lib's `emits_for_verdict` it does not count `prepared: no changes` (18) as a prepare.
pub fn verdict_sends(label: &str) -> &'static [&'static str] {
    match label {
        "decoded" => &["commit"],
        "prepared" => &["prepare"],
        "commit prepared" => &["commit_prepared"],
        "prepared and commit prepared" => &["prepare", "commit_prepared"],
        "rollback prepared" => &["rollback_prepared"],
        _ => &[],
    }
}

/// The same from the replay: the rows up to the flush position, by their verdicts.
pub fn replay_decoded(s: &SlotObs) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = s
        .trace
        .as_ref()
        .map(|rows| {
            rows.iter()
                .filter(|r| r.end_lsn.is_some_and(|e| e <= s.flush))
                .flat_map(|r| {
                    let sends = verdict_sends(&js(&r.raw, "verdict").unwrap_or_default());
                    let decoded = r.flag("decoded") == Some(true);
                    // `decoded` is true exactly for the verdicts that send something; a
                    // row where it is not shows up as a difference of its own.
                    let mismatch: &[&str] = if decoded == !sends.is_empty() {
                        &[]
                    } else {
                        &["decoded column contradicts the verdict"]
                    };
                    sends
                        .iter()
                        .chain(mismatch)
                        .filter_map(|k| r.xid.map(|x| ((*k).to_owned(), x)))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// [`server_commits`] of the streamed peek.
pub fn server_commits_streamed(s: &SlotObs) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = s
        .decoded_streamed
        .as_ref()
        .map(|lines| lines.iter().filter_map(|(_, d)| emitted_kind(d)).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// How many transactions test_decoding streamed before their end (distinct xids of
/// `opening a streamed block for transaction TXN x`).
pub fn streamed_xids(s: &SlotObs) -> usize {
    let Ok(lines) = &s.decoded_streamed else {
        return 0;
    };
    lines
        .iter()
        .filter_map(|(_, d)| d.strip_prefix("opening a streamed block for transaction TXN "))
        .collect::<BTreeSet<_>>()
        .len()
}

/// Streaming changes when a transaction reaches the plugin, not whether: the transaction
/// ends emitted with streaming equal those without, and so the replay's decoded rows.
pub fn check_streamed(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        match &s.decoded_streamed {
            Err(e) => f.push(format!(
                "{}: test_decoding with stream-changes: {e}",
                s.name
            )),
            Ok(_) => {
                let (streamed, plain) = (server_commits_streamed(s), server_commits(s));
                if streamed != plain {
                    let a: BTreeSet<_> = streamed.iter().collect();
                    let b: BTreeSet<_> = plain.iter().collect();
                    f.push(format!(
                        "{}: transaction ends with stream-changes differ from those without: streamed only {:?}, plain only {:?}",
                        s.name,
                        a.difference(&b).collect::<Vec<_>>(),
                        b.difference(&a).collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    f
}

/// The subscription's slot, traced while active: every row that has a verdict agrees or
/// is undecided, and the walsender did hold it.
pub fn check_subscription(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    let Some(sub) = &o.subscription else {
        return f;
    };
    if !sub.active {
        f.push(format!(
            "{}: the subscription's walsender never held the slot",
            sub.slot
        ));
    }
    match &sub.trace {
        Err(e) => f.push(format!("{}: trace: {e}", sub.slot)),
        Ok(rows) => {
            for r in rows {
                if r.agrees == Some(false) {
                    f.push(format!(
                        "{}: row {} {:?} disagrees: {:?}",
                        sub.slot, r.record, r.branch, r.disagreement
                    ));
                }
            }
        }
    }
    f
}

pub fn check_decoded(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        let (Ok(rows), Ok(_)) = (&s.trace, &s.decoded) else {
            continue;
        };
        let (ours, server) = (replay_decoded(s), server_commits(s));
        if ours == server {
            continue;
        }
        let only = |a: &[(String, u64)], b: &[(String, u64)]| -> Vec<(String, u64)> {
            let mut rest = b.to_vec();
            a.iter()
                .filter(|x| match rest.iter().position(|y| y == *x) {
                    Some(p) => {
                        rest.remove(p);
                        false
                    }
                    None => true,
                })
                .cloned()
                .collect()
        };
        let (ours_only, server_only) = (only(&ours, &server), only(&server, &ours));
        let differing: BTreeSet<u64> = ours_only.iter().chain(&server_only).map(|x| x.1).collect();
        let detail: Vec<String> = rows
            .iter()
            .filter(|r| r.xid.is_some_and(|x| differing.contains(&x)))
            .map(|r| {
                format!(
                    "  {} {} {} {}",
                    r.lsn.map(fmt_lsn).unwrap_or_default(),
                    r.record,
                    js(&r.raw, "verdict").unwrap_or_default(),
                    r.state.as_deref().unwrap_or_default()
                )
            })
            .collect();
        f.push(format!(
            "{}: decoded xids differ up to {}: replay only {:?}, test_decoding only {:?}; their rows \
             (all their records: snapbuild_trace('{}', true)):\n{}",
            s.name,
            fmt_lsn(s.flush),
            ours_only,
            server_only,
            s.name,
            detail.join("\n")
        ));
    }
    f
}

pub fn check_rows(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for r in s.trace_after_peek.iter().flatten() {
            if r.agrees == Some(false) {
                f.push(format!(
                    "{}: row {} {:?} disagrees: {:?}",
                    s.name, r.record, r.branch, r.disagreement
                ));
            }
        }
    }
    f
}

pub fn check_bytes(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for r in s.trace_after_peek.iter().flatten() {
            // An undecided row whose file another decoder history writes exactly (named in
            // the row) differs from the replay's bytes by design: only decided rows count.
            let writer_named = r.agrees.is_none()
                && r.disagreement
                    .as_deref()
                    .is_some_and(|d| d.contains("consistent with a decoder restarted at"));
            if r.flag("bytes_agree") == Some(false) && !writer_named {
                f.push(format!(
                    "{}: row {} at {:?}: the replay's bytes differ from the server's file ({:?})",
                    s.name,
                    r.record,
                    r.lsn.map(fmt_lsn),
                    r.disagreement
                ));
            }
        }
    }
    f
}

/// A deliberate "disagreement" that real workloads hit, to exercise the minimizer
/// (`PGSNAP_INJECT_DISAGREEMENT`).
#[derive(Clone, Copy, Debug)]
pub enum Inject {
    /// A decoded commit with catalog changes (ALTER/CREATE/DROP TABLE in the transaction).
    DdlCommit,
    /// A decoded COMMIT PREPARED.
    CommitPrepared,
}

impl Inject {
    pub fn from_env() -> Option<Inject> {
        let v = std::env::var("PGSNAP_INJECT_DISAGREEMENT").ok()?;
        match v.as_str() {
            "" => None,
            "ddl-commit" => Some(Inject::DdlCommit),
            "commit-prepared" => Some(Inject::CommitPrepared),
            _ => panic!("PGSNAP_INJECT_DISAGREEMENT={v:?}: ddl-commit or commit-prepared"),
        }
    }

    pub fn check(self) -> Check {
        match self {
            Inject::DdlCommit => Check {
                name: "injected: ddl-commit",
                how: "SELECT * FROM snapbuild_trace('{slot}') WHERE decoded AND timetravel",
                run: injected_ddl_commit,
            },
            Inject::CommitPrepared => Check {
                name: "injected: commit-prepared",
                how: "SELECT * FROM snapbuild_trace('{slot}') WHERE decoded AND record = 'COMMIT_PREPARED'",
                run: injected_commit_prepared,
            },
        }
    }
}

pub fn injected_rows(o: &Outcome, what: &str, pick: impl Fn(&TraceRow) -> bool) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for r in s.trace.iter().flatten() {
            if r.flag("decoded") == Some(true) && pick(r) {
                f.push(format!(
                    "{}: {what} (injected): {} of xid {} at {}",
                    s.name,
                    r.record,
                    r.xid.map(|x| x.to_string()).unwrap_or_default(),
                    r.lsn.map(fmt_lsn).unwrap_or_default()
                ));
            }
        }
    }
    f
}

pub fn injected_ddl_commit(_: &[&Step], o: &Outcome) -> Vec<String> {
    injected_rows(o, "decoded commit with catalog changes", |r| {
        r.flag("timetravel") == Some(true)
    })
}

pub fn injected_commit_prepared(_: &[&Step], o: &Outcome) -> Vec<String> {
    injected_rows(o, "decoded COMMIT PREPARED", |r| r.is("COMMIT_PREPARED"))
}

pub fn all_checks(inject: Option<Inject>) -> Vec<Check> {
    let mut c = CHECKS.to_vec();
    c.extend(inject.map(Inject::check));
    c
}

pub fn run_checks(checks: &[Check], steps: &[&Step], out: &Outcome) -> Vec<Failure> {
    checks
        .iter()
        .flat_map(|c| {
            (c.run)(steps, out).into_iter().map(|detail| Failure {
                check: c.name,
                detail,
            })
        })
        .collect()
}
