//! A seeded random workload against the live server: several sessions (in two databases)
//! run DDL, DML, large inserts, savepoints, rollbacks, logical messages, a 70-subtransaction
//! DDL block and prepared transactions while logical slots are created, peeked, consumed
//! (`pg_logical_slot_get_changes`) or advanced (`pg_replication_slot_advance`), the server
//! restarts (fast or immediate) and a built-in subscription's walsender decodes beside them
//! (`subscription`). At the end every verdict of the replay is checked against what the
//! server did:
//!
//! - every `get_changes` is preceded by `snapbuild_slot_prediction`, and the slot the
//!   server leaves must be the prediction;
//! - a slot created during the run and never consumed: replaying its creation
//!   (`snapbuild_trace_range` with the slot's catalog_xmin as initial_xmin_horizon and
//!   in_slot_creation) becomes consistent on the record ending at the LSN the creation
//!   returned;
//! - every slot: the commits the replay says are decoded are exactly the xids
//!   `test_decoding` emits for the same WAL (`include-xids`, `skip-empty-xacts` off);
//! - with `stream-changes` on, test_decoding ends the same transactions as without;
//! - every `.snap` file the server wrote at a serialization point of the replay agrees
//!   with the replay's prediction (`agrees`, `bytes_agree`), and no row disagrees;
//! - the subscription's slot, traced while its walsender holds it, has no disagreeing row.
//!
//! `PGSNAP_SEEDS` (default `1,2,3`) and `PGSNAP_TXNS` (default 300 transactions per seed)
//! size it.
//!
//! The workload is recorded as a list of steps (a session's statement, or an admin
//! action: slot creation start/finish, peek, get, RUNNING_XACTS, COMMIT/ROLLBACK
//! PREPARED), grouped in units (a whole transaction with its later COMMIT PREPARED, an
//! autocommit statement, a slot's creation, one peek or get, one RUNNING_XACTS). One
//! executor runs the steps for the random run and for replays alike, on one driver thread
//! in list order, so a step list re-runs the same way. The checks are functions over
//! (step list, outcome) listed in `CHECKS`. On a disagreement the step list is minimized
//! by delta debugging: candidate lists are re-run on the same cluster with fresh names
//! (`rw<seed>m<attempt>_…`), a candidate counts as failing if the same check fails, and
//! the smallest failing list is written as a SQL script
//! (`$TMPDIR/pgsnap-random-seed<N>-min.sql`) and printed in the panic message; the full
//! log stays in `$TMPDIR/pgsnap-random-seed<N>.sql`.
//!
//! Modules: `steps` (Action, Step, Unit, Recording), `exec` (the executor `Exec` and the
//! `Outcome` it observes), `generate` (the seeded generator), `checks` (`CHECKS`, the
//! injected checks), `minimize` (ddmin, the budget, replays), `reproducer` (step lists
//! as SQL scripts), `subscription` (the publication, subscription and their slot). This file: the tests and what one seed does.
//!
//! `PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]` (default `60,300`; `0` turns minimizing off)
//! bounds it. `PGSNAP_INJECT_DISAGREEMENT=ddl-commit|commit-prepared` adds a check that
//! flags something every workload does (a decoded commit with catalog changes, a decoded
//! COMMIT PREPARED), to exercise the minimizer; `minimizer_reduces_injected_disagreement`
//! (ignored by default) does that and asserts a real reduction.

mod checks;
mod exec;
mod generate;
mod minimize;
mod reproducer;
mod steps;
mod subscription;

use checks::{all_checks, run_checks, server_commits, Check, Failure, Inject};
use exec::Outcome;
use generate::generate;
use minimize::{budget, ddmin, minimize, Budget, Minimized};
use pg_snapbuild_tests::*;
use reproducer::{comment, header, render_minimized, render_steps};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;
use steps::{Recording, Step};

const SESSIONS: usize = 4;
const SLOTS: usize = 3;
const TABLES: usize = 3;
/// Stands for the run's name prefix (`rw<seed>`, `rw<seed>m<attempt>`) in recorded SQL.
const P: &str = "{P}";

/// Slot 1 of every run decodes prepared transactions at PREPARE (created with twophase).
fn two_phase(slot: usize) -> bool {
    slot == 1
}

/// The run's second database (slots are per database: decoding skips the other's
/// transactions and messages, but waits for them while building its snapshot).
const SECOND_DB: &str = "pgsnap_rw_b";

/// Session `s` works in database 1 (the last session) or 0 (the test's database).
fn session_db(s: usize) -> usize {
    usize::from(s == SESSIONS - 1)
}

/// Slot `i` lives in database 1 (the last slot) or 0.
fn slot_db(i: usize) -> usize {
    usize::from(i == SLOTS - 1)
}

#[test]
fn random_workload_agrees_with_server() {
    let _g = serial();
    let Some(env) = env() else { return };
    let _ = env.setup();
    let seeds: Vec<u64> = std::env::var("PGSNAP_SEEDS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("PGSNAP_SEEDS: comma-separated numbers")
        })
        .collect();
    let inject = Inject::from_env();
    for seed in seeds {
        if let Some(msg) = run_seed(&env, seed, txns(), inject, budget()) {
            panic!("{msg}");
        }
    }
}

fn txns() -> u64 {
    std::env::var("PGSNAP_TXNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

/// What one seed found, for the self-test.
struct SeedReport {
    steps: usize,
    units: usize,
    min: Option<Minimized>,
    min_path: std::path::PathBuf,
    message: String,
}

/// Runs one seed; on a disagreement minimizes (with `budget`) and returns the panic
/// message.
fn run_seed(
    env: &Env,
    seed: u64,
    txns: u64,
    inject: Option<Inject>,
    budget: Option<Budget>,
) -> Option<String> {
    run_seed_report(env, seed, txns, inject, budget).map(|r| r.message)
}

fn run_seed_report(
    env: &Env,
    seed: u64,
    txns: u64,
    inject: Option<Inject>,
    budget: Option<Budget>,
) -> Option<SeedReport> {
    let t0 = Instant::now();
    let checks = all_checks(inject);
    let (rec, out, done_txns) = generate(env, seed, txns);
    let created = out.created.iter().flatten().count();
    assert!(created > 0 || txns < 50, "seed {seed}: no slot was created");
    let all: Vec<&Step> = rec.steps.iter().collect();
    let failures = run_checks(&checks, &all, &out);
    print_counts(env, seed, (&rec, &out), (done_txns, created), &failures, t0);
    if failures.is_empty() {
        return None;
    }
    let tmp = std::env::temp_dir();
    let path = tmp.join(format!("pgsnap-random-seed{seed}.sql"));
    let idx: Vec<usize> = (0..rec.steps.len()).collect();
    let full = format!(
        "{}-- the whole run; failing checks:\n{}{}",
        header(env, &rec),
        failures
            .iter()
            .map(|f| comment(&format!("[{}] {}", f.check, f.detail)))
            .collect::<String>(),
        render_steps(env, &rec, &idx, &out)
    );
    let _ = std::fs::write(&path, full);
    let mut message = format!(
        "seed {seed}: {} disagreement(s) with the server:\n{}\nfull log (SQL per session, in order): {}",
        failures.len(),
        failures
            .iter()
            .map(|f| format!("[{}] {}", f.check, f.detail))
            .collect::<Vec<_>>()
            .join("\n"),
        path.display()
    );
    let min_path = tmp.join(format!("pgsnap-random-seed{seed}-min.sql"));
    let target = failures[0].check;
    let min = budget.map(|b| {
        let (m, script) = minimize_and_write(env, &rec, &checks, target, b, (&path, &min_path));
        append_reproducer(&mut message, &m, &script, &min_path);
        m
    });
    if min.is_none() {
        message.push_str("\n(minimizing is off: PGSNAP_MINIMIZE_BUDGET=0)");
    }
    Some(SeedReport {
        steps: rec.steps.len(),
        units: rec.units.len(),
        min,
        min_path,
        message,
    })
}

/// The `pgsnap-counts:` line of a seed.
fn print_counts(
    env: &Env,
    seed: u64,
    (rec, out): (&Recording, &Outcome),
    (done_txns, created): (u64, usize),
    failures: &[Failure],
    t0: Instant,
) {
    let (mut decoded_total, mut files_agreeing, mut commits_seen, mut writer_dependent) =
        (0usize, 0usize, 0usize, 0usize);
    let (mut files_byte_equal, mut undecided, mut streamed) = (0usize, 0usize, 0usize);
    let kinds = two_phase_kinds(out);
    for s in &out.slots {
        decoded_total += server_commits(s).len();
        streamed += checks::streamed_xids(s);
        commits_seen += s
            .trace
            .iter()
            .flatten()
            .filter(|r| r.raw.get("decoded").is_some_and(|v| !v.is_null()))
            .count();
        for r in s.trace_after_peek.iter().flatten() {
            if r.flag("bytes_agree") == Some(true) {
                files_byte_equal += 1;
            }
            if r.branch_is("serialize") && r.agrees == Some(true) {
                files_agreeing += 1;
            }
            if r.branch_is("serialize")
                && r.agrees.is_none()
                && r.disagreement.as_deref().is_some_and(|d| {
                    d.contains("consistent with a decoder restarted at")
                        || d.contains("equal once purged")
                })
            {
                writer_dependent += 1;
            }
            if r.branch_is("serialize")
                && r.agrees.is_none()
                && r.raw.get("server_source").is_some_and(|v| !v.is_null())
            {
                undecided += 1;
                println!(
                    "pgsnap-undecided: seed {seed} PG{} {} at {}: {}",
                    env.major,
                    s.name,
                    r.lsn.map(fmt_lsn).unwrap_or_default(),
                    r.disagreement.as_deref().unwrap_or_default()
                );
            }
        }
    }
    println!(
        "pgsnap-counts: random seed {seed} PG{} transactions {done_txns} steps {} units {} slots created {created} \
         slot states predicted {} (by advance {}, catalog_xmin not predicted {}) decoding costs compared {} (undecided {}) restarts {} commits traced {commits_seen} decoded by test_decoding {decoded_total} ({kinds:?}) streamed before their end {streamed} .snap files agreeing {files_agreeing} \
         (byte for byte {files_byte_equal}) undecided {undecided} (of which with a possible writer {writer_dependent}) \
         subscription slot traced while active {} rows {} agreeing {} failures {} ({:.1}s)",
        env.major,
        rec.steps.len(),
        rec.units.len(),
        out.predictions.len(),
        out.predictions.iter().filter(|p| p.advance).count(),
        out.predictions.iter().filter(|p| !p.xmin_predicted).count(),
        out.predictions
            .iter()
            .filter(|p| matches!(&p.cost, Some(Ok((_, None, _)))))
            .count(),
        out.predictions
            .iter()
            .filter(|p| matches!(&p.cost, Some(Ok((_, Some(_), _)))))
            .count(),
        rec.steps
            .iter()
            .filter(|s| matches!(s.action, steps::Action::Restart { .. }))
            .count(),
        out.subscription.as_ref().is_some_and(|s| s.active),
        out.subscription
            .as_ref()
            .and_then(|s| s.trace.as_ref().ok())
            .map_or(0, Vec::len),
        out.subscription
            .as_ref()
            .and_then(|s| s.trace.as_ref().ok())
            .map_or(0, |rows| rows.iter().filter(|r| r.agrees == Some(true)).count()),
        failures.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// What test_decoding emitted by kind, and the replay's verdicts on prepared transactions
/// (so a run shows which two-phase paths it went through).
fn two_phase_kinds(out: &Outcome) -> BTreeMap<String, usize> {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for s in &out.slots {
        for (k, _) in server_commits(s) {
            *kinds.entry(k).or_default() += 1;
        }
        for r in s.trace.iter().flatten() {
            if let Some(v) = js(&r.raw, "verdict") {
                if matches!(
                    r.record.as_str(),
                    "PREPARE" | "COMMIT_PREPARED" | "ABORT_PREPARED"
                ) {
                    *kinds.entry(format!("{} {v}", r.record)).or_default() += 1;
                }
            }
        }
    }
    kinds
}

/// Minimizes the recording for `target` and writes the reproducer to `min_path` (the
/// full log is at `path`); the result and the reproducer.
fn minimize_and_write(
    env: &Env,
    rec: &Recording,
    checks: &[Check],
    target: &'static str,
    b: Budget,
    (path, min_path): (&std::path::Path, &std::path::Path),
) -> (Minimized, String) {
    println!(
        "pgsnap-minimize: seed {}: minimizing for check {target:?} ({} steps, {} units; budget {} replays, {} s)",
        rec.seed,
        rec.steps.len(),
        rec.units.len(),
        b.runs,
        b.time.as_secs()
    );
    let m = minimize(env, rec, checks, target, b);
    let script = render_minimized(env, rec, checks, &m, path);
    let _ = std::fs::write(min_path, &script);
    (m, script)
}

/// The reproducer (its first 150 lines) for the panic message.
fn append_reproducer(
    message: &mut String,
    m: &Minimized,
    script: &str,
    min_path: &std::path::Path,
) {
    let lines: Vec<&str> = script.lines().collect();
    let _ = write!(
        message,
        "\nminimal reproducer ({}, {} steps, failed {} of {} replays):\n{}{}",
        min_path.display(),
        m.steps.len(),
        m.failed,
        m.tried,
        lines
            .iter()
            .take(150)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
        if lines.len() > 150 {
            format!("… ({} more lines in the file)\n", lines.len() - 150)
        } else {
            String::new()
        }
    );
}
#[test]
#[ignore = "minimizer self-test, minutes: cargo test … -- --ignored minimizer"]
fn minimizer_reduces_injected_disagreement() {
    let _g = serial();
    let Some(env) = env() else { return };
    let _ = env.setup();
    let seed: u64 = std::env::var("PGSNAP_SEEDS")
        .ok()
        .and_then(|s| s.split(',').next().and_then(|x| x.trim().parse().ok()))
        .unwrap_or(1);
    let inject = Inject::from_env().unwrap_or(Inject::DdlCommit);
    let b = budget().expect("the self-test needs a budget (PGSNAP_MINIMIZE_BUDGET > 0)");
    let t0 = Instant::now();
    let r = run_seed_report(&env, seed, txns(), Some(inject), Some(b))
        .unwrap_or_else(|| panic!("seed {seed}: the injected check {inject:?} flagged nothing"));
    let m = r.min.expect("minimized");
    println!("{}", r.message);
    println!(
        "pgsnap-minimize: seed {seed} {inject:?}: {} steps ({} units) -> {} steps in {} replays, {:.0}s \
         (whole test {:.0}s); failed {} of {}; reproducer {}",
        r.steps,
        r.units,
        m.steps.len(),
        m.runs,
        m.elapsed.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        m.failed,
        m.tried,
        r.min_path.display()
    );
    assert!(m.reproduced, "the replayed list did not fail {inject:?}");
    assert!(
        m.steps.len() <= 12 && m.steps.len() * 20 <= r.steps,
        "{} steps left of {}",
        m.steps.len(),
        r.steps
    );
    assert!(m.failed >= 1 && m.shown.is_some());
}

/// ddmin itself, without a server: needs {37, 212} plus one of a few, within the budget
/// the workload gets.
#[test]
fn ddmin_finds_the_needed_elements() {
    let needed = |c: &[usize]| {
        c.contains(&37) && c.contains(&212) && c.iter().any(|x| [250, 300, 301].contains(x))
    };
    let mut tests = 0;
    let r = ddmin((0..400).collect(), false, |c| {
        tests += 1;
        Some(needed(c))
    });
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(needed(&r));
    println!("ddmin: 400 -> {r:?} in {tests} tests");
    assert!(tests <= 60, "{tests} tests");
    // budget spent: the smallest failing list so far
    let mut left = 5;
    let r = ddmin((0..400).collect(), false, |c| {
        left -= 1;
        (left > 0).then(|| needed(c))
    });
    assert!(needed(&r) && r.len() < 400, "{}", r.len());
    // two needed of 400 (the injected check: a slot and a DDL transaction after it)
    let mut tests = 0;
    let r = ddmin((0..400).collect(), false, |c| {
        tests += 1;
        Some(c.contains(&12) && c.iter().any(|&x| x > 12 && x % 17 == 0))
    });
    println!("ddmin: 400 -> {r:?} in {tests} tests");
    assert_eq!(r.len(), 2);
    // the empty list when nothing is needed, and never without allow_empty
    assert!(ddmin(vec![1, 2], true, |_| Some(true)).is_empty());
    assert_eq!(ddmin(vec![1, 2], false, |_| Some(true)).len(), 1);
}
