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
//! r4 shows `snapbuild_trace_json`'s bound (54000 past 64 MiB of JSON, with the backend's
//! memory bounded), r5 the cancel of the wait for a record to be flushed, r6 that the traces'
//! fast path (heads fed as the reader reads them) replays what the record-by-record path does.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

const SLOT: &str = "pgsnap_rel";
const TABLE: &str = "pgsnap_rel_big";
/// How late 57014 may come after the timeout fired or the cancel was sent.
const PROMPT: Duration = Duration::from_secs(1);

/// Logical messages and rows written after the slot: PGSNAP_REL_RECORDS (default 3000000,
/// about 390 MB of WAL, so that every call still reads for well over the 200 ms timeout: the
/// traces read batches of heap records at 700 MB/s and more, and over 1000000 (130 MB)
/// `snapbuild_trace_json` can finish in under 200 ms on PostgreSQL 14).
fn records() -> i64 {
    std::env::var("PGSNAP_REL_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000_000)
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
            // without all_records: the few rows fit the 64 MiB bound (r4), the replay is long
            "snapbuild_trace_json",
            format!("SELECT length(snapbuild_trace_json('{SLOT}', false)::text)"),
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
    let Some((_g, env, mut c, _slot)) = start_with_slot(SLOT) else {
        return;
    };
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
    let Some((_g, env, mut c, _slot)) = start_with_slot(SLOT) else {
        return;
    };
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

/// The backend's `VmHWM` (peak RSS), KiB, from /proc (the tests run on the server's host).
fn backend_hwm_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// `snapbuild_trace_json` builds one JSON text and stops at 64 MiB: an `all_records` trace
/// of 300 000 logical messages (each a row of several hundred bytes) ends with 54000
/// (program_limit_exceeded), its DETAIL counting the rows that fitted (fewer than the
/// set-returning `snapbuild_trace` streams, whose row count is checked against the
/// server's own count of the messages, test_decoding's), its HINT naming `snapbuild_trace`;
/// the backend's peak RSS grew by less than 4 x 64 MiB. Without `all_records` the same slot's trace fits,
/// and is the set-returning trace row for row.
#[test]
fn r4_trace_json_is_bounded() {
    let slot = "pgsnap_rel_json";
    let Some((_g, env, mut c, _slot)) = start_with_slot(slot) else {
        return;
    };
    create_slot(&env, slot);
    let n: i64 = 300_000;
    c.execute(
        "SELECT count(pg_logical_emit_message(false, 'pgsnap_rel_json', 'm')) FROM generate_series(1, $1::bigint)",
        &[&n],
    )
    .unwrap();
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {TABLE}; CREATE TABLE {TABLE} (a int, b text)"
    ))
    .unwrap();
    env.log_standby_snapshot_flushed(&mut c, TABLE, "0, 'end'");

    // the server's count of the messages: test_decoding emits one line per message
    let server_messages: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL) WHERE data LIKE 'message:%prefix: pgsnap_rel_json%'",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(server_messages, n, "test_decoding's message lines");
    let streamed: i64 = c
        .query_one(
            "SELECT count(*) FROM snapbuild_trace($1, true) WHERE record LIKE '%MESSAGE%'",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        streamed, server_messages,
        "MESSAGE rows of snapbuild_trace(all_records)"
    );

    let mut s = env.connect("pgsnap-rel-json");
    let pid = backend_pid(&mut s);
    let before = backend_hwm_kib(pid);
    let e = s
        .query_one(
            "SELECT length(snapbuild_trace_json($1, true)::text)",
            &[&slot],
        )
        .map(|r| r.get::<_, i32>(0))
        .expect_err("an all_records trace of 300 000 messages fits 64 MiB of JSON");
    let d = e.as_db_error().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(d.code().code(), "54000", "{}", d.message());
    assert!(d.message().contains("64 MiB"), "{}", d.message());
    assert!(
        d.hint().is_some_and(|h| h.contains("snapbuild_trace(")),
        "hint: {:?}",
        d.hint()
    );
    let fitted: i64 = d
        .detail()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("detail: {:?}", d.detail()));
    assert!(
        fitted > 1000 && fitted < streamed,
        "{fitted} rows fitted of {streamed}"
    );
    let grew_mib = (backend_hwm_kib(pid).saturating_sub(before)) >> 10;
    assert!(
        grew_mib < 256,
        "the backend's peak RSS grew by {grew_mib} MiB"
    );
    let one: i32 = s.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);

    // without all_records: one array, the set-returning trace row for row
    let (len, rows): (i32, i64) = {
        let r = s
            .query_one(
                "SELECT json_array_length(snapbuild_trace_json($1, false)), (SELECT count(*) FROM snapbuild_trace($1, false))",
                &[&slot],
            )
            .unwrap_or_else(|e| panic!("snapbuild_trace_json(false): {}", err_text(&e)));
        (r.get(0), r.get(1))
    };
    // Both read to the end of flushed WAL, which may have grown between the two calls (a
    // RUNNING_XACTS the background writer logs): the later trace may have more rows, and
    // its first ones must be the JSON's. The comparison below calls both again, so it
    // takes the first `len` rows of each (a JSON longer than `len` there is possible too).
    assert!(
        (len as i64) <= rows && rows <= len as i64 + 2,
        "array elements {len} vs snapbuild_trace rows {rows}"
    );
    // One vocabulary: each JSON object is snapbuild_trace's row as row_to_json gives it
    // (the same keys, the same values, NULL as null), with its details beside it. The
    // columns that read the server's log and files at call time are left out (a file
    // written between the two calls would change them, not the replay).
    let at_call_time = "'{server_state,server_source,agrees,disagreement,bytes_agree}'::text[]";
    let details = "'{commit_verdict,serialized,serialize_context,restored_from,candidate_xmin_lsn,candidate_restart_valid,interesting}'::text[]";
    let (differ, compared): (i64, i64) = {
        let r = s
            .query_one(
                &format!(
                    "SELECT count(*) FILTER (WHERE (a.e::jsonb - {details} - {at_call_time}) IS DISTINCT FROM (to_jsonb(t) - 'ordinality' - {at_call_time})), count(*)
                       FROM json_array_elements(snapbuild_trace_json($1, false)) WITH ORDINALITY AS a(e, o)
                       JOIN snapbuild_trace($1, false) WITH ORDINALITY AS t ON t.ordinality = a.o
                      WHERE a.o <= $2"
                ),
                &[&slot, &(len as i64)],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert_eq!(compared, len as i64);
    let same = differ == 0;
    assert!(
        same,
        "{differ} of {compared} JSON rows differ from snapbuild_trace's rows as row_to_json gives them"
    );
    c.batch_execute(&format!("DROP TABLE {TABLE}")).unwrap();
    println!(
        "pgsnap-counts: r4 PG{} trace_json all_records: 54000 after {fitted} of {streamed} rows (server: {server_messages} messages), peak RSS +{grew_mib} MiB; without all_records {len} rows",
        env.major
    );
}

/// A non-transactional logical message of 400 kB in a transaction kept open: its pages
/// are written, and the WAL writer flushes the complete ones (XLogBackgroundFlush backs off
/// to a page boundary while no commit asks for more), so the flush position stays inside
/// the record. `snapbuild_slot_prediction` then waits for that record to be flushed, as
/// `pg_logical_slot_peek_changes` does (shown: the server's call times out there too).
/// `statement_timeout` and `pg_cancel_backend` end the wait with 57014 within a second; after
/// COMMIT flushes it the prediction returns and has read past the message. The state may be
/// undone by a RUNNING_XACTS the background writer logs (every 15 s, flushed at once): then
/// the attempt is repeated, up to 5 times.
#[test]
fn r5_flush_wait_stops_on_timeout_and_cancel() {
    let slot = "pgsnap_rel_wait";
    let Some((_g, env, mut c, _slot)) = start_with_slot(slot) else {
        return;
    };
    create_slot(&env, slot);
    let mut bystander = env.connect("pgsnap-rel-bystander");
    let timeout = Duration::from_millis(500);
    let prediction = format!("SELECT count(*) FROM snapbuild_slot_prediction('{slot}')");
    for attempt in 1..=5 {
        // the WAL before the message is flushed and the slot is consumed to it
        c.batch_execute(&format!(
            "SELECT pg_replication_slot_advance('{slot}', pg_current_wal_flush_lsn())"
        ))
        .unwrap();
        let mut h = env.connect("pgsnap-rel-holder");
        h.batch_execute("BEGIN").unwrap();
        let before = parse_lsn(
            &h.query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
                .unwrap()
                .get::<_, String>(0),
        );
        let end = parse_lsn(
            &h.query_one(
                "SELECT pg_logical_emit_message(false, 'pgsnap_rel_wait', repeat('w', 400000))::text",
                &[],
            )
            .unwrap()
            .get::<_, String>(0),
        );
        let inside = |c: &mut Client| {
            let f = flush_lsn(c);
            f > before && f < end
        };
        wait_for(
            "the WAL writer to flush part of the message",
            Duration::from_secs(10),
            || flush_lsn(&mut c) > before,
        );
        if !inside(&mut c) {
            h.batch_execute("COMMIT").unwrap();
            println!("r5 attempt {attempt}: the message got flushed whole; again");
            continue;
        }
        // the server's decoder waits there too
        let mut srv = env.connect("pgsnap-rel-server");
        srv.batch_execute("SET statement_timeout = '500ms'")
            .unwrap();
        let server = srv.query(
            &format!("SELECT count(*) FROM pg_logical_slot_peek_changes('{slot}', NULL, NULL)"),
            &[],
        );
        // statement_timeout
        let mut s = env.connect("pgsnap-rel-wait-timeout");
        s.batch_execute("SET statement_timeout = '500ms'").unwrap();
        let t = Instant::now();
        let r1 = s.simple_query(&prediction).map(|_| ());
        let took1 = t.elapsed();
        // pg_cancel_backend
        let mut s2 = env.connect("pgsnap-rel-wait-cancel");
        let pid = backend_pid(&mut s2);
        let sql = prediction.clone();
        let worker = std::thread::spawn(move || {
            let r = s2.simple_query(&sql).map(|_| ());
            (s2, r, Instant::now())
        });
        // Running, or already returned: a background RUNNING_XACTS flushed after the
        // message ends the wait at once (then the flush is past the message: again).
        wait_for(
            "the prediction to be running",
            Duration::from_secs(30),
            || {
                worker.is_finished()
                    || c.query_one(
                "SELECT state = 'active' AND query LIKE '%snapbuild_slot_prediction%' FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .map(|r| r.get::<_, Option<bool>>(0) == Some(true))
            .unwrap_or(false)
            },
        );
        if worker.is_finished() && !inside(&mut c) {
            let _ = worker.join();
            h.batch_execute("COMMIT").unwrap();
            println!(
                "r5 attempt {attempt}: the flush moved past the message before the cancel; again"
            );
            continue;
        }
        std::thread::sleep(Duration::from_millis(300));
        let sent = Instant::now();
        let ok: bool = c
            .query_one("SELECT pg_cancel_backend($1)", &[&pid])
            .unwrap()
            .get(0);
        assert!(ok, "pg_cancel_backend({pid})");
        let (mut s2, r2, ended) = worker.join().expect("the calling thread");
        let late = ended.saturating_duration_since(sent);
        if !inside(&mut c) {
            h.batch_execute("COMMIT").unwrap();
            println!("r5 attempt {attempt}: the flush moved past the message meanwhile; again");
            continue;
        }
        match server {
            Ok(_) => panic!("pg_logical_slot_peek_changes returned with the flush inside a record"),
            Err(e) => assert_eq!(db_err(&e).0, "57014", "the server's peek: {}", err_text(&e)),
        }
        expect_canceled(
            "snapbuild_slot_prediction (flush wait)",
            r1,
            took1,
            timeout + PROMPT,
            "the call began (statement_timeout 500 ms)",
        );
        assert!(
            took1 >= timeout,
            "57014 after {took1:?}, before statement_timeout"
        );
        expect_canceled(
            "snapbuild_slot_prediction (flush wait)",
            r2,
            late,
            PROMPT,
            "the cancel",
        );
        alive(&mut s, &mut bystander, "flush wait (timeout)");
        alive(&mut s2, &mut bystander, "flush wait (cancel)");
        // COMMIT flushes the message (an asynchronous commit: the WAL writer, soon)
        h.batch_execute("COMMIT").unwrap();
        wait_for("the message to be flushed", Duration::from_secs(10), || {
            flush_lsn(&mut c) >= end
        });
        let decoded_to = parse_lsn(
            &s2.query_one(
                &format!("SELECT decoded_to::text FROM snapbuild_slot_prediction('{slot}')"),
                &[],
            )
            .unwrap_or_else(|e| panic!("the prediction after COMMIT: {}", err_text(&e)))
            .get::<_, String>(0),
        );
        assert!(
            decoded_to >= end,
            "decoded to {decoded_to:X}, the message ends at {end:X}"
        );
        println!(
            "pgsnap-counts: r5 PG{} flush wait (attempt {attempt}): 57014 {}ms after the call began (statement_timeout 500 ms), {}ms after the cancel; the server's peek timed out too",
            env.major,
            took1.as_millis(),
            late.as_millis()
        );
        return;
    }
    panic!("in 5 attempts the flush position did not stay inside the message");
}

/// The traces' fast path (records that need only their head fed as the reader reads them,
/// under one guard per run of such records: `WalReader::read_batch_feeding`) replays
/// exactly what the record-by-record path of `all_records` replays: on WAL the server
/// wrote with four sessions' transactions interleaved (savepoints, a DDL, RUNNING_XACTS
/// between them, one transaction of 20 000 rows), every row of the default trace is the
/// `all_records` row of the same record, column for column (the record's name aside:
/// `all_records` spells it as pg_waldump does); the `all_records` trace has one row per
/// record pg_walinspect reads over the range (15+); and a trace cut at `end_lsn` (at record
/// ends and inside records) is the full trace's rows up to there.
#[test]
fn r6_batched_trace_equals_record_by_record() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let tab = "pgsnap_rel_batch";
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {tab}, {tab}_ddl; CREATE TABLE {tab} (a int, b text)"
    ))
    .unwrap();
    // a physical slot keeps the range's WAL from a checkpoint until the test ends
    let _keep = SlotGuard::new(&env, "pgsnap_rel_batch_keep");
    c.batch_execute("SELECT pg_create_physical_replication_slot('pgsnap_rel_batch_keep', true)")
        .unwrap();
    let start: String = c
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    env.log_standby_snapshot(&mut c);
    let mut sessions: Vec<Client> = (0..4)
        .map(|i| env.connect(&format!("pgsnap-rel-batch-{i}")))
        .collect();
    for s in sessions.iter_mut() {
        s.batch_execute("BEGIN").unwrap();
    }
    for i in 0..600 {
        let s = &mut sessions[i % 4];
        s.batch_execute(&format!("INSERT INTO {tab} VALUES ({i}, 'row {i}')"))
            .unwrap();
        if i % 7 == 0 {
            s.batch_execute(&format!(
                "SAVEPOINT s; INSERT INTO {tab} VALUES (-{i}, 'sub'); RELEASE s"
            ))
            .unwrap();
        }
        if i % 3 == 0 {
            s.batch_execute("COMMIT; BEGIN").unwrap();
        }
        if i % 97 == 0 {
            env.log_standby_snapshot(&mut c);
        }
        if i == 300 {
            c.batch_execute(&format!("CREATE TABLE {tab}_ddl (a int)"))
                .unwrap();
        }
    }
    for s in sessions.iter_mut() {
        s.batch_execute("COMMIT").unwrap();
    }
    c.batch_execute(&format!(
        "INSERT INTO {tab} SELECT g, 'bulk' FROM generate_series(1, 20000) g"
    ))
    .unwrap();
    env.log_standby_snapshot_flushed(&mut c, tab, "0, 'end'");
    let end = fmt_lsn(flush_lsn(&mut c));

    // Every column but `record`, as one text per row, with the row's LSNs.
    let rows = |c: &mut Client, upto: &str, all: bool| -> Vec<(u64, u64, String)> {
        c.query(
            "SELECT lsn::text, end_lsn::text, (lsn, end_lsn, xid, branch, state_before, state, xmin, xmax, \
             next_phase_at, start_decoding_at, running_xids, wait_xids, level, message, detail, verdict, \
             decoded, timetravel, candidate_catalog_xmin, candidate_restart_lsn, initial_xmin_horizon, \
             in_slot_creation, server_state, server_source, agrees, disagreement, bytes_agree, \
             serialized_xmin, serialized_xmax, serialized_committed_xip, serialized_catchange_xip)::text \
             FROM snapbuild_trace_range($1::text::pg_lsn, $2::text::pg_lsn, all_records => $3) \
             WHERE record <> 'REPLAY START'",
            &[&start, &upto, &all],
        )
        .unwrap()
        .iter()
        .map(|r| {
            let end: Option<String> = r.get(1);
            (
                parse_lsn(r.get::<_, &str>(0)),
                end.as_deref().map_or(0, parse_lsn),
                r.get(2),
            )
        })
        .collect()
    };
    let batched = rows(&mut c, &end, false);
    let all = rows(&mut c, &end, true);
    let by_lsn: std::collections::HashMap<u64, &String> =
        all.iter().map(|(l, _, t)| (*l, t)).collect();
    let commits = batched
        .iter()
        .filter(|(_, _, t)| t.contains(",commit,"))
        .count();
    println!(
        "pgsnap-counts: r6 PG{} {} .. {end}: {} rows batched ({commits} commit rows), {} rows record by record",
        env.major,
        start,
        batched.len(),
        all.len()
    );
    assert!(
        commits >= 150,
        "too few commit rows to show anything: {commits}"
    );
    for (lsn, _, text) in &batched {
        assert_eq!(
            Some(&text),
            by_lsn.get(lsn),
            "the default trace's row at {} differs from the all_records row of that record",
            fmt_lsn(*lsn)
        );
    }
    if env.major >= 15 {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn)",
                &[&start, &end],
            )
            .unwrap()
            .get(0);
        // Both read from the first record at or after start to the last ending by end.
        assert_eq!(
            n as usize,
            all.len(),
            "pg_walinspect reads {n} records, the all_records trace has {} rows",
            all.len()
        );
    }
    // Cuts at record ends and inside records, spread over the range.
    for k in 1..=6 {
        let (lsn, rec_end, _) = &all[all.len() * k / 7];
        for cut in [*rec_end, lsn + 1] {
            let cut_text = fmt_lsn(cut);
            let part = rows(&mut c, &cut_text, false);
            let expected: Vec<&(u64, u64, String)> =
                batched.iter().filter(|(_, e, _)| *e <= cut).collect();
            assert_eq!(
                part.iter().collect::<Vec<_>>(),
                expected,
                "the trace cut at {cut_text} is not the full trace's rows up to there"
            );
        }
    }
    c.batch_execute(&format!("DROP TABLE {tab}, {tab}_ddl"))
        .unwrap();
}
