//! Reliability of the SQL functions inside a backend: the long loops stop promptly on
//! `statement_timeout` and `pg_cancel_backend` (SQLSTATE 57014 within a second), and the
//! backend, and every other session, goes on afterwards.
//!
//! The WAL the loops read is made long on purpose: a slot, then a million logical messages
//! and a table of a million rows written after it, so each function below has most of a
//! second or more of work (its replay from the slot's restart_lsn, or the heap
//! scan of `snapbuild_visibility`). A call that finishes before its timeout fails the test
//! (the workload would be too small to show anything).
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

const SLOT: &str = "pgsnap_rel";
const TABLE: &str = "pgsnap_rel_big";
/// How late 57014 may come after the timeout fired or the cancel was sent.
const PROMPT: Duration = Duration::from_secs(1);

/// Logical messages and rows written after the slot: PGSNAP_REL_RECORDS (default 1000000,
/// about 130 MB of WAL; the fastest replay, `snapbuild_slot_health`, then reads for about
/// 0.7 s on an idle machine).
fn records() -> i64 {
    std::env::var("PGSNAP_REL_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// The slot, then lots of WAL after it; returns the LSNs around the workload.
fn long_wal(env: &Env, c: &mut Client) -> (String, String) {
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (a int, b text)"
    ))
    .unwrap();
    create_slot(env, SLOT);
    let start: String = c
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    let n = records();
    let t = Instant::now();
    c.execute(
        "SELECT count(pg_logical_emit_message(false, 'pgsnap_rel', 'm')) FROM generate_series(1, $1::bigint)",
        &[&n],
    )
    .unwrap();
    c.execute(
        &format!("INSERT INTO {TABLE} SELECT g, 'row ' || g FROM generate_series(1, $1::bigint) g"),
        &[&n],
    )
    .unwrap();
    // A commit and a RUNNING_XACTS after the workload, so the replay has an end to reach.
    env.log_standby_snapshot_flushed(c, TABLE, "0, 'end'");
    let end: String = c
        .query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
        .unwrap()
        .get(0);
    println!(
        "pgsnap-counts: reliability PG{} workload: {n} messages + {n} rows, WAL {start} .. {end} ({} MB) in {:?}",
        env.major,
        (parse_lsn(&end) - parse_lsn(&start)) >> 20,
        t.elapsed()
    );
    (start, end)
}

/// The calls with long loops, as `SELECT count(*) FROM …` (every row pulled).
fn calls(start: &str, end: &str, confirmed: &str) -> Vec<(&'static str, String)> {
    vec![
        (
            "snapbuild_trace_range (all_records)",
            format!("SELECT count(*) FROM snapbuild_trace_range('{start}', '{end}', in_slot_creation => false, all_records => true)"),
        ),
        (
            "snapbuild_trace (all_records)",
            format!("SELECT count(*) FROM snapbuild_trace('{SLOT}', true)"),
        ),
        (
            "snapbuild_trace_json (all_records)",
            format!("SELECT length(snapbuild_trace_json('{SLOT}', true)::text)"),
        ),
        (
            "snapbuild_slot_health",
            "SELECT count(*) FROM snapbuild_slot_health()".to_string(),
        ),
        (
            "snapbuild_slot_prediction",
            format!("SELECT count(*) FROM snapbuild_slot_prediction('{SLOT}')"),
        ),
        (
            "snapbuild_diagnose",
            format!("SELECT count(*) FROM snapbuild_diagnose('{SLOT}')"),
        ),
        (
            "snapbuild_historic_snapshot",
            format!("SELECT count(*) FROM snapbuild_historic_snapshot('{SLOT}')"),
        ),
        (
            // the replay stops at the slot's confirmed_flush (short); the heap scan is long
            "snapbuild_visibility (heap scan)",
            format!("SELECT count(*) FROM snapbuild_visibility('{TABLE}', '{SLOT}', '{confirmed}')"),
        ),
    ]
}

/// The session still answers, and so does a bystander.
fn alive(c: &mut Client, bystander: &mut Client, what: &str) {
    let one: i32 = c
        .query_one("SELECT 1", &[])
        .unwrap_or_else(|e| panic!("{what}: the session is gone after 57014: {}", err_text(&e)))
        .get(0);
    assert_eq!(one, 1);
    bystander
        .query_one("SELECT count(*) FROM pg_class", &[])
        .unwrap_or_else(|e| panic!("{what}: a bystander session failed: {}", err_text(&e)));
}

/// `statement_timeout = '200ms'` on each long call: 57014 no later than 200 ms + 1 s.
#[test]
fn r1_statement_timeout_stops_every_long_loop() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let _slot = SlotGuard::new(&env, SLOT);
    let (start, end) = long_wal(&env, &mut c);
    let confirmed = fmt_lsn(
        server_slot(&mut c, SLOT)
            .confirmed_flush
            .expect("confirmed_flush"),
    );
    let mut bystander = env.connect("pgsnap-rel-bystander");
    let timeout = Duration::from_millis(200);
    let mut report = Vec::new();
    for (what, sql) in calls(&start, &end, &confirmed) {
        // a fresh backend each time: snapbuild_slot_health keeps a replay per slot
        let mut s = env.connect("pgsnap-rel-timeout");
        s.batch_execute("SET statement_timeout = '200ms'").unwrap();
        let t = Instant::now();
        let r = s.simple_query(&sql);
        let took = t.elapsed();
        expect_canceled(
            what,
            r.map(|_| ()),
            took,
            timeout + PROMPT,
            "the call began (statement_timeout 200 ms)",
        );
        alive(&mut s, &mut bystander, what);
        report.push(format!("{what} {}ms", took.as_millis()));
    }
    c.batch_execute(&format!("DROP TABLE {TABLE}")).unwrap();
    println!(
        "pgsnap-counts: r1 PG{} 57014 after: {}",
        env.major,
        report.join(", ")
    );
}

/// The call `what` ended with `query_canceled` (57014) no later than `limit` after `cause`
/// (`took` is how long after it the error came); finishing first means the WAL was too
/// short to test it.
fn expect_canceled(
    what: &str,
    r: Result<(), postgres::Error>,
    took: Duration,
    limit: Duration,
    cause: &str,
) {
    match r {
        Ok(()) => {
            panic!("{what} finished before {cause} reached it ({took:?}): raise PGSNAP_REL_RECORDS")
        }
        Err(e) => {
            let (code, msg) = db_err(&e);
            assert_eq!(code, "57014", "{what}: {msg}");
            assert!(
                took <= limit,
                "{what}: 57014 came {took:?} after {cause} (limit {limit:?})"
            );
        }
    }
}

/// `pg_cancel_backend` from another session while the call runs: 57014 within 1 s of the
/// cancel.
#[test]
fn r2_pg_cancel_backend_stops_every_long_loop() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let _slot = SlotGuard::new(&env, SLOT);
    let (start, end) = long_wal(&env, &mut c);
    let confirmed = fmt_lsn(
        server_slot(&mut c, SLOT)
            .confirmed_flush
            .expect("confirmed_flush"),
    );
    let mut bystander = env.connect("pgsnap-rel-bystander");
    let mut report = Vec::new();
    for (what, sql) in calls(&start, &end, &confirmed) {
        let mut s = env.connect("pgsnap-rel-cancel");
        let pid = backend_pid(&mut s);
        let worker = std::thread::spawn(move || {
            let r = s.simple_query(&sql).map(|_| ());
            let at = Instant::now();
            (s, r, at)
        });
        // Running (in the function, not waiting for a lock) for 50 ms: cancel it.
        wait_for("the call to be running", Duration::from_secs(30), || {
            c.query_one(
                "SELECT state = 'active' AND query LIKE '%snapbuild_%' FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .map(|r| r.get::<_, Option<bool>>(0) == Some(true))
            .unwrap_or(false)
        });
        std::thread::sleep(Duration::from_millis(50));
        let sent = Instant::now();
        let ok: bool = c
            .query_one("SELECT pg_cancel_backend($1)", &[&pid])
            .unwrap()
            .get(0);
        assert!(ok, "{what}: pg_cancel_backend({pid}) returned false");
        let (mut s, r, ended) = worker.join().expect("the calling thread");
        let late = ended.saturating_duration_since(sent);
        expect_canceled(what, r, late, PROMPT, "the cancel");
        alive(&mut s, &mut bystander, what);
        report.push(format!("{what} {}ms", late.as_millis()));
    }
    c.batch_execute(&format!("DROP TABLE {TABLE}")).unwrap();
    println!(
        "pgsnap-counts: r2 PG{} 57014 after the cancel: {}",
        env.major,
        report.join(", ")
    );
}

/// Legal logical messages of odd shapes (empty prefix and payload, a 1000-byte prefix and
/// a 1 MB payload, NUL bytes in the payload, transactional and not) are read by the
/// replay's message parser without an ERROR: each is a MESSAGE row of an `all_records`
/// trace.
#[test]
fn r3_odd_logical_messages_are_read() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let start: String = c
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    c.batch_execute(
        "SELECT pg_logical_emit_message(false, '', '');
         SELECT pg_logical_emit_message(false, repeat('p', 1000), repeat('m', 1000000));
         BEGIN;
         SELECT pg_logical_emit_message(true, '', 'x');
         SELECT pg_logical_emit_message(true, 'nul', '\\x00ff00'::bytea);
         COMMIT;",
    )
    .unwrap();
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (a int, b text)"
    ))
    .unwrap();
    env.log_standby_snapshot_flushed(&mut c, TABLE, "0, 'end'");
    let rows = json_rows(
        &mut c,
        "SELECT record, level, message FROM snapbuild_trace_range($1::text::pg_lsn, in_slot_creation => false, all_records => true)",
        &[&start],
    )
    .unwrap_or_else(|e| panic!("snapbuild_trace_range over odd messages: {}", err_text(&e)));
    let errors: Vec<String> = rows
        .iter()
        .filter(|r| js(r, "level").as_deref() == Some("ERROR"))
        .map(|r| js(r, "message").unwrap_or_default())
        .collect();
    assert!(errors.is_empty(), "ERROR rows: {errors:?}");
    let messages = rows
        .iter()
        .filter(|r| js(r, "record").is_some_and(|n| n.contains("MESSAGE")))
        .count();
    assert_eq!(messages, 4, "MESSAGE rows of {} rows", rows.len());
    c.batch_execute(&format!("DROP TABLE {TABLE}")).unwrap();
    println!(
        "pgsnap-counts: r3 PG{} {messages} odd logical messages read, {} rows",
        env.major,
        rows.len()
    );
}
