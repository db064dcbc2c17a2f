//! The watcher is as safe to preload as pg_stat_statements: it comes back after a
//! terminate, stops at once whatever it is reading, holds no snapshot while it reads WAL
//! (so it never holds back VACUUM, and a standby's replay never cancels it), keeps what
//! it has seen across an ERROR and a terminate, and on a node that cannot decode says so
//! once and goes on. Truths: `pg_stat_activity` (its pid, `backend_xmin`, `backend_xid`,
//! what it does), `pg_ctl`'s own time to stop, the server's LOG lines (its FATAL, the
//! postmaster's exit code and restart), `pg_stat_database_conflicts` and a control session
//! that a recovery conflict does cancel.
//!
//! - ws1: `pg_terminate_backend` on the watcher: PostgreSQL's FATAL "terminating
//!   background worker … due to administrator command", exit code 1, and a new watcher
//!   within the restart interval (10 s).
//! - ws2: a look made long (a backlog read with `pg_snapbuild.debug_read_delay`): while it
//!   reads WAL its `backend_xmin` and `backend_xid` are NULL at every sample; a terminate
//!   ends it within 1 s; the progress it made is in the shared area (a new session resumes
//!   it: it reads less than the backlog, and its rows equal a full replay's).
//! - ws3: `pg_ctl stop -m fast` in the middle of such a look takes no more than 1 s more
//!   than with the watcher idle.
//! - ws4: a hold seen while every other look raises an ERROR
//!   (`pg_snapbuild.debug_look_error_every = 2`) is still logged at `log_holds_after`, by
//!   the same process; a hold seen before a terminate is logged by the next watcher at
//!   its first look, counted from the first sighting.
//! - ws5 (16+): on a standby with `max_standby_streaming_delay = 1s` and no feedback, the
//!   primary's VACUUM cancels a control session holding a snapshot, never the watcher in
//!   the middle of its long read.
//! - ws6: a standby holding a logical slot copied from the primary (as a file-level
//!   backup would): the watcher does not exit or restart; on 14 and 15 (no decoding on a
//!   standby) it says so once, and `snapbuild_slot_health` there lists the slot.

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

/// The restart interval the watcher registers with (worker.rs RESTART_INTERVAL).
const RESTART_INTERVAL: Duration = Duration::from_secs(10);

/// A logical slot created while the watcher idles, then `rows` rows inserted one heap
/// record each: a backlog the watcher's first look must read. Returns the slot's guard
/// and the backlog in bytes.
fn slot_with_backlog(env: &Env, c: &mut Client, slot: &str, rows: u32) -> (SlotGuard, u64) {
    let guard = SlotGuard::new(env, slot);
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_ws_t (i int)")
        .unwrap();
    create_slot(env, slot);
    c.batch_execute(&format!(
        "INSERT INTO pgsnap_ws_t SELECT generate_series(1, {rows})"
    ))
    .unwrap();
    let restart = server_slot(c, slot).restart_lsn;
    (guard, flush_lsn(c) - restart)
}

/// The settings that start a slow look: every 1024 records read wait `delay`, looks every
/// 200 ms, holds logged after an hour (so that looks run and log nothing).
fn slow_looks<'e>(env: &'e Env, delay: &str) -> Vec<ReloadedSetting<'e>> {
    vec![
        env.set_reloaded("pg_snapbuild.debug_read_delay", &format!("'{delay}'")),
        env.set_reloaded("pg_snapbuild.watch_interval", "'200ms'"),
        env.set_reloaded("pg_snapbuild.log_holds_after", "'1h'"),
    ]
}

/// Waits until no process `pid` is in `pg_stat_activity`; returns how long that took.
fn gone(c: &mut Client, pid: i32, timeout: Duration) -> Duration {
    let t0 = Instant::now();
    wait_for(&format!("pid {pid} to end"), timeout, || {
        c.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
            &[&pid],
        )
        .unwrap()
        .get::<_, i64>(0)
            == 0
    });
    t0.elapsed()
}

/// The server's own lines about watcher `pid` ending after a terminate: its FATAL and the
/// postmaster's exit code.
fn assert_terminated_lines(env: &Env, offset: u64, pid: i32) {
    let exit =
        format!("background worker \"pg_snapbuild watcher\" (PID {pid}) exited with exit code 1");
    // The postmaster logs the exit once it has reaped the process.
    wait_for(
        &format!("the line \"{exit}\""),
        Duration::from_secs(10),
        || {
            log_entries_since(env, offset)
                .iter()
                .any(|e| e.message == exit)
        },
    );
    let entries = log_entries_since(env, offset);
    assert!(
        entries.iter().any(|e| e.pid == pid
            && e.level == "FATAL"
            && e.message
                == "terminating background worker \"pg_snapbuild watcher\" due to administrator command"),
        "no FATAL line for the watcher {pid}: {entries:#?}"
    );
}

/// A session that does not slow its own reads (`debug_read_delay` is set for the whole
/// server, for the watcher).
fn quick(env: &Env, app: &str, shared: bool) -> Client {
    let mut c = if shared {
        env.connect(app)
    } else {
        env.connect_unshared(app)
    };
    c.batch_execute("SET pg_snapbuild.debug_read_delay = 0")
        .unwrap();
    c
}

#[test]
fn ws1_a_terminated_watcher_comes_back_within_the_restart_interval() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let before = watcher_pid(&mut c, Duration::from_secs(30));
    let offset = log_offset(&env);
    let ended: bool = c
        .query_one("SELECT pg_terminate_backend($1)", &[&before])
        .unwrap()
        .get(0);
    assert!(ended);
    let took = gone(&mut c, before, Duration::from_secs(5));
    let t0 = Instant::now();
    let after = watcher_pid(&mut c, RESTART_INTERVAL + Duration::from_secs(10));
    let back = t0.elapsed();
    assert_ne!(after, before, "a new watcher process");
    assert!(
        back <= RESTART_INTERVAL + Duration::from_secs(3),
        "the new watcher came {back:?} after the old one ended"
    );
    assert_terminated_lines(&env, offset, before);
    println!(
        "pgsnap-counts: ws1 terminated watcher {before} ended in {took:?}; watcher {after} started {back:?} later"
    );
}

#[test]
fn ws2_a_long_look_holds_no_snapshot_stops_at_once_and_keeps_its_progress() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slot = "pgsnap_ws2";
    let (_guard, backlog) = slot_with_backlog(&env, &mut c, slot, 150_000);
    let watcher = watcher_pid(&mut c, Duration::from_secs(30));
    let settings = slow_looks(&env, "50ms");
    assert_eq!(
        wait_watcher_doing(&mut c, READING_WAL, Duration::from_secs(30)),
        watcher
    );
    // While it reads: no snapshot, no xid, at every sample. Long enough for the read to
    // save its progress twice (every 2 s).
    let t0 = Instant::now();
    let mut samples = 0;
    while t0.elapsed() < Duration::from_millis(4500) {
        let (pid, query, xmin, xid) = watcher_activity(&mut c).expect("the watcher runs");
        assert_eq!(pid, watcher);
        if query == READING_WAL {
            assert_eq!(
                (xmin.as_deref(), xid.as_deref()),
                (None, None),
                "the watcher holds a snapshot or an xid while it reads WAL"
            );
            samples += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(samples >= 20, "only {samples} samples while it read");
    // No diagnosis names it as what holds a horizon back.
    let named: Vec<String> = query_column(
        &mut quick(&env, "pgsnap-ws2-diagnose", false),
        "SELECT finding FROM snapbuild_diagnose($1) WHERE finding LIKE '%pg_snapbuild watcher%'",
        &[&slot],
        "snapbuild_diagnose",
    );
    assert!(named.is_empty(), "{named:#?}");
    assert_eq!(
        watcher_activity(&mut c).map(|a| a.1).as_deref(),
        Some(READING_WAL),
        "the look must still be reading (make the backlog larger)"
    );

    // A terminate in the middle of the read ends it within a second.
    let offset = log_offset(&env);
    c.execute("SELECT pg_terminate_backend($1)", &[&watcher])
        .unwrap();
    let took = gone(&mut c, watcher, Duration::from_secs(30));
    assert!(
        took <= Duration::from_secs(1),
        "the watcher took {took:?} to stop"
    );
    assert_terminated_lines(&env, offset, watcher);

    // Before the next watcher starts: the progress is in the shared area; a new session
    // resumes it and gives what a full replay gives.
    drop(settings);
    let mut shared = quick(&env, "pgsnap-ws2-shared", true);
    let (bytes, state): (i64, Option<String>) = {
        let r = shared
            .query_one(
                "SELECT replayed_bytes, replay_state FROM snapbuild_slot_health WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let full = health_rows(&mut quick(&env, "pgsnap-ws2-full", false), &[slot]);
    assert_eq!(health_rows(&mut shared, &[slot]), full);
    assert_eq!(state.as_deref(), Some("shared"));
    assert!(
        (bytes as u64) < backlog * 85 / 100,
        "a new session read {bytes} of the {backlog} bytes of backlog: the watcher's progress was not kept"
    );
    let next = watcher_pid(&mut c, RESTART_INTERVAL + Duration::from_secs(10));
    assert_ne!(next, watcher);
    println!(
        "pgsnap-counts: ws2 {samples} samples while reading, backend_xmin NULL in all; terminate took {took:?}; a new session read {bytes} of {backlog} bytes of backlog"
    );
}

#[test]
fn ws3_a_fast_shutdown_does_not_wait_for_a_look() {
    let Some((_g, env, c)) = start() else {
        return;
    };
    drop(c);
    // The watcher idle (the test clusters' settings): the time a fast shutdown takes.
    let idle = env.stop_fast().expect("pg_ctl stop -m fast");
    env.start_server().expect("pg_ctl start");
    let mut c = env.connect("pgsnap-ws3");
    let slot = "pgsnap_ws3";
    let (guard, backlog) = slot_with_backlog(&env, &mut c, slot, 150_000);
    let settings = slow_looks(&env, "100ms");
    let watcher = wait_watcher_doing(&mut c, READING_WAL, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    drop(c);
    let offset = log_offset(&env);
    let busy = env.stop_fast().expect("pg_ctl stop -m fast");
    // Settings and slot are put back on the running server.
    env.start_server().expect("pg_ctl start");
    drop(settings);
    drop(guard);
    assert!(
        busy <= idle + Duration::from_secs(1),
        "a fast shutdown took {busy:?} in the middle of a look, {idle:?} with the watcher idle"
    );
    let stopped = log_entries_since(&env, offset);
    assert!(
        stopped
            .iter()
            .any(|e| e.pid == watcher && e.level == "FATAL"),
        "the watcher {watcher} ended by its FATAL: {stopped:#?}"
    );
    println!(
        "pgsnap-counts: ws3 fast shutdown {idle:?} with the watcher idle, {busy:?} in the middle of a look over {backlog} bytes"
    );
}

/// A consumed slot whose restart_lsn and catalog_xmin an open transaction holds (as in
/// the watcher's w2): the slot's guard and the holder.
fn held_slot(env: &Env, c: &mut Client, slot: &str, app: &str) -> (SlotGuard, OpenXact) {
    let guard = SlotGuard::new(env, slot);
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_ws_t (i int)")
        .unwrap();
    create_slot(env, slot);
    let advance = |c: &mut Client| {
        for _ in 0..3 {
            env.log_standby_snapshot_flushed(c, "pgsnap_ws_t", "0");
            consume_changes(c, slot);
        }
    };
    advance(c);
    let mut h = OpenXact::begin(env, app);
    h.exec("INSERT INTO pgsnap_ws_t VALUES (1)");
    advance(c);
    (guard, h)
}

/// The seconds a hold line says the hold has lasted ("… for at least N s").
fn held_for(line: &LogEntry) -> u64 {
    line.message
        .rsplit("for at least ")
        .next()
        .and_then(|t| t.trim_end_matches(" s").parse().ok())
        .unwrap_or_else(|| panic!("not a hold line: {}", line.message))
}

#[test]
fn ws4_what_the_watcher_saw_survives_an_error_and_a_terminate() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let watcher = watcher_pid(&mut c, Duration::from_secs(30));
    // Not in the middle of a read an earlier test started.
    wait_for(
        "the watcher not reading WAL",
        Duration::from_secs(120),
        || watcher_activity(&mut c).is_some_and(|a| a.1 != READING_WAL),
    );
    let slot = "pgsnap_ws4";
    let (_guard, h) = held_slot(&env, &mut c, slot, "pgsnap-ws4-holder");

    // Every other look fails: the hold is still logged at log_holds_after, by the same
    // process.
    let offset = log_offset(&env);
    let errors = env.set_reloaded("pg_snapbuild.debug_look_error_every", "2");
    let fast = env.set_reloaded("pg_snapbuild.watch_interval", "'200ms'");
    let holds = env.set_reloaded("pg_snapbuild.log_holds_after", "'3s'");
    let t0 = Instant::now();
    let prefix = format!(
        "restart_lsn of logical replication slot \"{slot}\" has been held by transaction {}",
        h.xid
    );
    let lines = wait_for_lines(&env, offset, watcher, &prefix, Duration::from_secs(30));
    let after_errors = t0.elapsed();
    let failed = watcher_lines(
        &env,
        offset,
        watcher,
        "pg_snapbuild watcher: a look at the logical slots failed",
    );
    assert!(
        failed.len() >= 2,
        "the looks failed on purpose: {failed:#?}"
    );
    assert_eq!(
        watcher_pid(&mut c, Duration::from_secs(1)),
        watcher,
        "the same process"
    );
    assert!(
        after_errors <= Duration::from_secs(12),
        "the line came {after_errors:?} after log_holds_after = 3s was set: {lines:#?}"
    );
    drop(errors);
    h.commit();

    // A new hold, seen by the watcher, which is then terminated: the next watcher logs it
    // at its first look (it has lasted longer than log_holds_after by then), counted from
    // the first sighting.
    drop(holds);
    let holds = env.set_reloaded("pg_snapbuild.log_holds_after", "'12s'");
    let mut h2 = OpenXact::begin(&env, "pgsnap-ws4-holder2");
    h2.exec("INSERT INTO pgsnap_ws_t VALUES (2)");
    for _ in 0..3 {
        env.log_standby_snapshot_flushed(&mut c, "pgsnap_ws_t", "0");
        consume_changes(&mut c, slot);
    }
    let held: Option<String> = c
        .query_one(
            "SELECT xid::text FROM snapbuild_diagnose($1) WHERE kind = 'restart_lsn held'",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(held, Some(h2.xid.to_string()));
    let seen_from = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let offset = log_offset(&env);
    c.execute("SELECT pg_terminate_backend($1)", &[&watcher])
        .unwrap();
    gone(&mut c, watcher, Duration::from_secs(5));
    let next = watcher_pid(&mut c, RESTART_INTERVAL + Duration::from_secs(10));
    let prefix = format!(
        "restart_lsn of logical replication slot \"{slot}\" has been held by transaction {}",
        h2.xid
    );
    let lines = wait_for_lines(&env, offset, next, &prefix, Duration::from_secs(30));
    let logged_after = seen_from.elapsed();
    assert!(
        logged_after <= Duration::from_secs(12 + 6),
        "the next watcher logged the hold {logged_after:?} after it began: it counted anew ({lines:#?})"
    );
    assert!(
        held_for(&lines[0]) >= 12,
        "counted from the first sighting: {}",
        lines[0].message
    );
    h2.commit();
    drop(holds);
    drop(fast);
    println!(
        "pgsnap-counts: ws4 hold logged {after_errors:?} after log_holds_after = 3s with {} failed looks in between; after a terminate the next watcher logged \"{}\" {logged_after:?} after the hold began",
        failed.len(),
        lines[0].message
    );
}

#[test]
fn ws5_a_recovery_conflict_never_cancels_the_watcher() {
    let Some((_g, env, mut pc)) = start() else {
        return;
    };
    if env.major < 16 {
        println!(
            "SKIPPED: ws5: PostgreSQL {} cannot decode on a standby (16+)",
            env.major
        );
        return;
    }
    pc.batch_execute(
        "CREATE TABLE IF NOT EXISTS pgsnap_ws_t (i int);
         DROP TABLE IF EXISTS pgsnap_ws5_c; CREATE TABLE pgsnap_ws5_c (i int) WITH (autovacuum_enabled = off)",
    )
    .unwrap();
    let sb = env.standby();
    let _feedback = sb.env.set_reloaded("hot_standby_feedback", "off");
    let _delay = sb.env.set_reloaded("max_standby_streaming_delay", "'1s'");
    // A slot on the standby with a backlog behind it.
    let slot = "pgsnap_ws5";
    let guard = SlotGuard::new(&sb.env, slot);
    let creation = Creation::start(&sb.env, slot, "test_decoding");
    let mut sc = sb.connect("pgsnap-ws5");
    sb.wait_slot_listed(&mut sc, slot, Duration::from_secs(90));
    env.log_standby_snapshot(&mut pc);
    creation.wait(Duration::from_secs(90));
    pc.batch_execute("INSERT INTO pgsnap_ws_t SELECT generate_series(1, 150000)")
        .unwrap();
    sb.wait_replayed(&mut pc);
    let conflicts = |sc: &mut Client| -> i64 {
        sc.query_one(
            "SELECT confl_snapshot FROM pg_stat_database_conflicts WHERE datname = 'postgres'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let before = conflicts(&mut sc);
    let settings = slow_looks(&sb.env, "100ms");
    let watcher = wait_watcher_doing(&mut sc, READING_WAL, Duration::from_secs(60));
    // A control session on the standby holding a snapshot, in the watcher's database.
    let mut control = sb.env.connect("pgsnap-ws5-control");
    control
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pgsnap_ws5_c")
        .unwrap();
    let offset = log_offset(&sb.env);
    // The primary removes rows the standby's snapshots could still see, three times.
    for _ in 0..3 {
        for sql in [
            "INSERT INTO pgsnap_ws5_c SELECT generate_series(1, 1000)",
            "DELETE FROM pgsnap_ws5_c",
            "VACUUM pgsnap_ws5_c",
        ] {
            pc.batch_execute(sql).unwrap();
        }
        sb.wait_replayed(&mut pc);
        std::thread::sleep(Duration::from_millis(1500));
    }
    let control_cancelled = control
        .batch_execute("SELECT count(*) FROM pgsnap_ws5_c")
        .is_err();
    assert!(
        control_cancelled,
        "the primary's VACUUM did not cancel a standby session holding a snapshot: the test shows nothing"
    );
    let (pid, query, xmin, _) = watcher_activity(&mut sc).expect("the watcher runs");
    assert_eq!(pid, watcher, "the watcher was not cancelled or restarted");
    let cancelled: Vec<LogEntry> = log_entries_since(&sb.env, offset)
        .into_iter()
        .filter(|e| e.pid == watcher && e.level != "LOG")
        .collect();
    assert!(cancelled.is_empty(), "{cancelled:#?}");
    let after = conflicts(&mut sc);
    println!(
        "pgsnap-counts: ws5 standby: {} snapshot conflicts (a control session cancelled), none for the watcher {watcher} ({query}, xmin {xmin:?})",
        after - before
    );
    drop(settings);
    drop(guard);
}

#[test]
fn ws6_a_standby_with_a_copied_logical_slot() {
    let Some((_g, env, mut pc)) = start() else {
        return;
    };
    let slot = "pgsnap_ws6";
    let primary_guard = SlotGuard::new(&env, slot);
    create_slot(&env, slot);
    let sb = env.standby();
    sb.copy_slot_from_primary(slot)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut sc = sb.connect("pgsnap-ws6");
    let listed: i64 = sc
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'logical'",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(listed, 1, "the standby restored the copied slot");
    let watcher = watcher_pid(&mut sc, Duration::from_secs(60));
    let offset = log_offset(&sb.env);
    let fast = sb
        .env
        .set_reloaded("pg_snapbuild.watch_interval", "'200ms'");
    let holds = sb.env.set_reloaded("pg_snapbuild.log_holds_after", "'1h'");
    let watch_for = if env.major < 16 {
        Duration::from_secs(25)
    } else {
        Duration::from_secs(5)
    };
    std::thread::sleep(watch_for);
    assert_eq!(
        watcher_pid(&mut sc, Duration::from_secs(1)),
        watcher,
        "the watcher exited or was restarted"
    );
    let entries = log_entries_since(&sb.env, offset);
    let exits: Vec<&LogEntry> = entries
        .iter()
        .filter(|e| {
            e.message.contains("\"pg_snapbuild watcher\"") || (e.pid == watcher && e.level != "LOG")
        })
        .collect();
    assert!(exits.is_empty(), "{exits:#?}");
    let notes: Vec<&LogEntry> = entries
        .iter()
        .filter(|e| e.pid == watcher && e.message.contains("cannot run a logical decoder"))
        .collect();
    let health: Vec<(Option<String>, Option<String>)> = sc
        .query(
            "SELECT state, replay_state FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("snapbuild_slot_health on the standby: {}", err_text(&e)))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(health.len(), 1, "{health:?}");
    if env.major < 16 {
        assert_eq!(
            notes.len(),
            1,
            "one line saying the standby cannot decode: {notes:#?}"
        );
        assert_eq!(health[0], (None, None), "not replayed on a 14/15 standby");
    } else {
        assert!(notes.is_empty(), "{notes:#?}");
    }
    drop(holds);
    drop(fast);
    drop(sc);
    if sb
        .connect("pgsnap-ws6-drop")
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .is_err()
    {
        sb.remove_slot_files(slot).unwrap_or_else(|e| panic!("{e}"));
    }
    drop(primary_guard);
    pc.batch_execute("SELECT 1").unwrap();
    println!(
        "pgsnap-counts: ws6 PostgreSQL {} standby with a copied slot: watcher {watcher} ran {watch_for:?} without exiting, {} note lines; health {health:?}",
        env.major,
        notes.len()
    );
}
