//! Reproducers: a step list as a SQL script, one block per step, and the minimized
//! list with what failed and how to look at it.

use crate::checks::Check;
use crate::exec::{slot_name, Outcome};
use crate::minimize::Minimized;
use crate::steps::{Action, Recording};
use crate::{session_db, slot_db, two_phase, P, SECOND_DB, TABLES};
use pg_snapbuild_tests::*;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The steps `idx` as a SQL script, in order, one block per step (`-- sN` for session
/// N, `-- admin…` for the admin session), with what happened as `-- ^` notes.
pub fn render_steps(env: &Env, rec: &Recording, idx: &[usize], out: &Outcome) -> String {
    let p = &out.prefix;
    let mut s = String::new();
    let _ = writeln!(s, "-- setup (admin)");
    for t in 0..TABLES {
        let _ = writeln!(s, "CREATE TABLE {p}_t{t}(a int, b text);");
    }
    for &k in idx {
        render_action(&mut s, env, k, &rec.steps[k].action, out);
        if let Some(n) = out.notes.get(&k) {
            let _ = writeln!(s, "-- ^ {n}");
        }
    }
    let _ = writeln!(
        s,
        "-- epilogue (admin): anything left open is ended, then 3 x (RUNNING_XACTS; INSERT INTO {p}_t0 VALUES (0, 'flush')), \
         then every creation still running returns"
    );
    for e in &out.epilogue {
        let _ = writeln!(s, "-- ^ {e}");
    }
    s
}

/// Step `k` (`action`) as the SQL that does it, under the prefix of `out`.
fn render_action(s: &mut String, env: &Env, k: usize, action: &Action, out: &Outcome) {
    let p = &out.prefix;
    let slot = |i: usize| slot_name(p, i);
    let _ = match action {
        Action::Sql { s: i, sql } => {
            writeln!(s, "-- s{}{}\n{};", i + 1, in_db(session_db(*i)), sql.replace(P, p))
        }
        Action::Admin { db, sql } => {
            writeln!(s, "-- admin{}\n{};", in_db(*db), sql.replace(P, p))
        }
        Action::Restart { immediate } => writeln!(
            s,
            "-- restart: pg_ctl restart -m {} (every session reconnects)",
            if *immediate { "immediate" } else { "fast" }
        ),
        Action::Advance(i) => writeln!(
            s,
            "-- admin{}: advance, after the replay's prediction\n\
             BEGIN; SELECT pg_current_xact_id(); COMMIT;\n\
             SELECT pg_current_wal_flush_lsn() AS upto \\gset\n\
             SELECT * FROM snapbuild_slot_prediction('{1}', :'upto', by_advance => true);\n\
             SELECT * FROM pg_replication_slot_advance('{1}', :'upto');\n\
             SELECT * FROM snapbuild_slots() WHERE slot_name = '{1}';",
            in_db(slot_db(*i)),
            slot(*i)
        ),
        Action::StandbySnapshot => writeln!(s, "-- admin\n{};", env.standby_snapshot_sql()),
        Action::CreateStart(i) => writeln!(
            s,
            "-- admin{}: create slot {} starts (in a session of its own; returns once the slot is consistent)\n\
             SELECT lsn FROM pg_create_logical_replication_slot('{}', 'test_decoding', false, {});",
            in_db(slot_db(*i)),
            slot(*i),
            slot(*i),
            two_phase(*i)
        ),
        Action::CreateFinish(i) => writeln!(
            s,
            "-- admin: creation of {} returned{}",
            slot(*i),
            out.created[*i]
                .filter(|_| !out.notes.contains_key(&k))
                .map(|c| format!(" {}", fmt_lsn(c.lsn)))
                .unwrap_or_default()
        ),
        Action::Peek(i) => writeln!(
            s,
            "-- admin{}: peek\nSELECT count(*) FROM pg_logical_slot_peek_changes('{}', NULL, NULL);",
            in_db(slot_db(*i)),
            slot(*i)
        ),
        Action::Get(i) => writeln!(
            s,
            "-- admin{1}: get, after the replay's prediction\n\
             BEGIN; SELECT pg_current_xact_id(); COMMIT;\n\
             SELECT pg_current_wal_flush_lsn() AS upto \\gset\n\
             SELECT * FROM snapbuild_slot_prediction('{0}', :'upto');\n\
             SELECT count(*) FROM pg_logical_slot_get_changes('{0}', :'upto', NULL);\n\
             SELECT * FROM snapbuild_slots() WHERE slot_name = '{0}';",
            slot(*i),
            in_db(slot_db(*i))
        ),
    };
}

/// A note on the database a session works in, when it is not the test's own.
fn in_db(db: usize) -> String {
    if db == 0 {
        String::new()
    } else {
        format!(" (database {SECOND_DB}: \\c {SECOND_DB})")
    }
}

pub fn header(env: &Env, rec: &Recording) -> String {
    format!(
        "-- pg_snapbuild random workload (pgrx-tests/tests/random_workload/), seed {}, PGSNAP_TXNS={}, PostgreSQL {}\n",
        rec.seed, rec.txns, env.major
    )
}

pub fn comment(text: &str) -> String {
    text.lines().map(|l| format!("--   {l}\n")).collect()
}

/// The minimized list as a script: what it was minimized from and how reliably it fails,
/// how to look at the failing check, what the last failing replay said, the steps.
pub fn render_minimized(
    env: &Env,
    rec: &Recording,
    checks: &[Check],
    m: &Minimized,
    full_log: &std::path::Path,
) -> String {
    let mut s = header(env, rec);
    let units: BTreeSet<usize> = m.steps.iter().map(|&k| rec.steps[k].unit).collect();
    let _ = writeln!(s, "-- failing check: {}", m.target);
    if !m.reproduced {
        let _ = writeln!(
            s,
            "-- NOT MINIMIZED: replaying the recorded list ({} times) did not fail this check (the server's timing \
             differs between runs); the whole run is in {}",
            m.runs,
            full_log.display()
        );
        return s;
    }
    let _ = write!(
        s,
        "-- minimized from {} steps ({} units) to {} steps ({} units) by {} replays on the same cluster in {:.0} s{}\n\
         -- confirmed: this list failed the check in {} of {} replays (a live server: timing may differ)\n\
         -- full log of the original run: {}\n",
        rec.steps.len(),
        rec.units.len(),
        m.steps.len(),
        units.len(),
        m.runs,
        m.elapsed.as_secs_f64(),
        if m.exhausted {
            " (budget PGSNAP_MINIMIZE_BUDGET spent: may not be minimal)"
        } else {
            ""
        },
        m.failed,
        m.tried,
        full_log.display(),
    );
    let Some((out, _)) = &m.shown else {
        return s;
    };
    render_failing_replay(&mut s, checks, m);
    let _ = writeln!(
        s,
        "-- \"-- sN\": run in session N (psql, with SET lock_timeout = '100ms'); \"-- admin\": another session.\n\
         -- Names carry the prefix of that replay, {}.",
        out.prefix
    );
    s.push_str(&render_steps(env, rec, &m.steps, out));
    s
}

/// How to look at the failing check (its `how`, with the slot the failure names), what
/// the last failing replay said, and which other checks it failed.
fn render_failing_replay(s: &mut String, checks: &[Check], m: &Minimized) {
    let Some((out, failures)) = &m.shown else {
        return;
    };
    let how = checks
        .iter()
        .find(|c| c.name == m.target)
        .map(|c| c.how)
        .unwrap_or_default();
    // The checks name the slot first: "<slot>: …".
    let slot = failures
        .iter()
        .filter(|f| f.check == m.target)
        .find_map(|f| {
            f.detail
                .split(':')
                .next()
                .filter(|n| n.starts_with(&out.prefix))
        })
        .unwrap_or("<slot>");
    let _ = writeln!(s, "-- how to look: {}", how.replace("{slot}", slot));
    let _ = writeln!(s, "-- what the last failing replay of this list said:");
    for f in failures.iter().filter(|f| f.check == m.target) {
        s.push_str(&comment(&f.detail));
    }
    let others: BTreeSet<&str> = failures
        .iter()
        .map(|f| f.check)
        .filter(|c| *c != m.target)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(s, "-- (it also failed: {others:?})");
    }
}
