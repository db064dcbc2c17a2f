//! Slot creation and decoding on a hot standby (PostgreSQL 16+): pg_snapbuild run on the
//! standby against the standby's own verdicts.
//!
//! - st1: a slot created on the standby while transactions of the primary run and end:
//!   the standby's creating backend logs c-1, c-2 and c-3, and the trace there matches
//!   its LOG lines and its WAL; the diagnosis names the primary's transactions (never as
//!   ended while they run), and the query in each remedy, run on the primary, finds their
//!   sessions; then DDL and DML on the primary are decoded on the standby as the replay's
//!   verdicts say, and the trace agrees with the `.snap` files the standby writes.
//! - st10: st1's story on a cascading standby (a standby of the standby), against its own
//!   log, WAL, slot and test_decoding output.
//! - st2: a creation waiting for the primary's next RUNNING_XACTS: the trace and the
//!   diagnosis say it waits for WAL, and the remedy they name, run on the primary, lets it
//!   return.
//! - st3: what needs decoding is a clear ERROR on a 14/15 standby, with the SQLSTATE the
//!   server gives its own refusal of a logical slot there; on 16+ it works, and a start
//!   past the replay position is refused naming the replayed WAL.
//! - st4: a slot created on the standby, the standby promoted: the trace goes on on the new
//!   timeline and test_decoding there emits what the verdicts say.
//!
//! The standby is made from the test cluster with `pg_basebackup -R` ([`Env::standby`]).
//! Transactions run on the primary; RUNNING_XACTS records come from the primary
//! (`pg_log_standby_snapshot()`), and the standby's creating backend logs its builder
//! messages into the standby's log. Every comparison is with the standby: its LOG lines,
//! its `pg_replication_slots`, the `.snap` files it writes, what `test_decoding` emits
//! there; the xids and pids named by the diagnosis are the primary's sessions, found by
//! running the diagnosis's own query on the primary.
//!
//! On 14 and 15 (no decoding on a standby) only `st3` runs: functions that would decode
//! raise the server's SQLSTATE for that (0A000) there. The others print `SKIPPED:` with
//! the reason.

use pg_snapbuild_tests::*;
// The standby tests wait longer than the others (see STANDBY_WAIT).
use pg_snapbuild_tests::STANDBY_WAIT as WAIT;
use postgres::Client;
use std::collections::BTreeSet;
use std::time::Duration;

/// The builder's messages of the standby's creating backend so far.
fn messages(sb: &Standby, off: u64, pid: i32) -> Vec<(u64, LogEntry)> {
    builder_messages(&log_entries_since(&sb.env, off), pid)
}

/// Waits until the standby's creating backend has logged a builder message of kind `k`.
fn wait_logged(sb: &Standby, off: u64, pid: i32, k: &str) -> Vec<(u64, LogEntry)> {
    let mut msgs = Vec::new();
    wait_for(
        &format!("the standby's creating backend to log {k}"),
        WAIT,
        || {
            msgs = messages(sb, off, pid);
            kinds(&msgs).contains(&k)
        },
    );
    msgs
}

/// The standby's trace of `slot`, checked against the standby's WAL (pg_walinspect there)
/// and its log lines `msgs` so far.
fn check_standby_trace(
    sc: &mut Client,
    slot: &str,
    msgs: &[(u64, LogEntry)],
    stats: &mut TraceStats,
) -> Vec<TraceRow> {
    let ss = server_slot(sc, slot);
    let replayed = replay_lsn(sc);
    let rows = trace_ok(sc, slot);
    *stats += check_trace_against_wal(sc, ss.restart_lsn, replayed, &rows);
    compare_log_with_trace(msgs, &rows, None);
    rows
}

// ---------------------------------------------------------------------------------------
// st1: c-1 / c-2 / c-3 on the standby, the diagnosis, decoding and .snap files there
// ---------------------------------------------------------------------------------------

#[test]
fn st1_standby_creation_c1_c2_c3_then_decoding() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_on_standby("st1") else {
        return;
    };
    creation_c1_c2_c3_then_decoding("st1", "standby", &env, &mut pc, &sb, &mut sc);
}

/// st1's story on `sb` (a standby of `env`'s primary, or a cascading standby): slot
/// `pgsnap_TEST`, table `pgsnap_TEST_t`, sessions `pgsnap-TEST-x` on the primary; `pc` is a
/// session on the primary, `sc` one on `sb`; `where_` names `sb` in the counts line.
fn creation_c1_c2_c3_then_decoding(
    test: &str,
    where_: &str,
    env: &Env,
    pc: &mut Client,
    sb: &Standby,
    sc: &mut Client,
) {
    let slot = &format!("pgsnap_{test}");
    let t = format!("pgsnap_{test}_t");
    let _guard = SlotGuard::new(&sb.env, slot);
    pc.batch_execute(&format!(
        "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (id int)"
    ))
    .unwrap();
    let xa = OpenXact::begin(env, &format!("pgsnap-{test}-a"));
    let xb = OpenXact::begin(env, &format!("pgsnap-{test}-b"));
    let (a, b) = (xa.xid, xb.xid);
    sb.wait_replayed(pc);
    let off = log_offset(&sb.env);
    let cr = Creation::start(&sb.env, slot, "test_decoding");
    sb.wait_slot_listed(sc, slot, WAIT);
    let mut stats = TraceStats::default();

    // --- c-1: the primary's RUNNING_XACTS runs a and b
    env.log_standby_snapshot(pc);
    let msgs = wait_logged(&sb, off, cr.pid, "c-1");
    let rows = check_standby_trace(sc, slot, &msgs, &mut stats);
    let c1 = branch_row(&rows, "c-1");
    let wx = c1.wait_xids.clone().unwrap_or_default();
    assert!(
        wx.contains(&a) && wx.contains(&b),
        "c-1 waits for the primary's a={a} and b={b}:\n{}",
        dump(&rows)
    );
    // The diagnosis on the standby: a and b are the primary's; its query finds their
    // sessions there.
    let d = diagnosis(sc, slot);
    let primary_rows: Vec<_> = d
        .iter()
        .filter(|r| r.0 == "waiting for primary transaction")
        .collect();
    let named: BTreeSet<u64> = primary_rows.iter().filter_map(|r| r.1).collect();
    assert!(
        named.contains(&a) && named.contains(&b),
        "the diagnosis names a={a} and b={b} as the primary's:\n{d:#?}"
    );
    assert!(
        !d.iter().any(|r| r.0 == "waiting for ended transaction"),
        "on a standby no xid is called ended for want of a local holder:\n{d:#?}"
    );
    let mut found = 0;
    for r in &primary_rows {
        let remedy = r.3.as_deref().unwrap();
        assert!(
            remedy.contains("SELECT pg_log_standby_snapshot() on the primary"),
            "{remedy}"
        );
        let pid = pid_by_remedy(pc, remedy);
        if r.1 == Some(a) {
            assert_eq!(pid, Some(xa.pid), "the remedy's query finds a's session");
            found += 1;
        } else if r.1 == Some(b) {
            assert_eq!(pid, Some(xb.pid), "the remedy's query finds b's session");
            found += 1;
        }
    }

    // --- c-2: d begins after the first record; a and b end; a new record
    let xd = OpenXact::begin(env, &format!("pgsnap-{test}-d"));
    let dx = xd.xid;
    xa.commit();
    xb.commit();
    // Their ends replayed here, no newer RUNNING_XACTS yet: the standby knows them ended
    // (pg_xact_status says committed), and so does the diagnosis; it waits for WAL.
    sb.wait_replayed(pc);
    let d = diagnosis(sc, slot);
    let statuses: Vec<String> = [a, b]
        .iter()
        .map(|x| {
            sc.query_one("SELECT pg_xact_status($1::text::xid8)", &[&x.to_string()])
                .unwrap()
                .get(0)
        })
        .collect();
    let moved_meanwhile = kinds(&messages(&sb, off, cr.pid)).contains(&"c-2");
    let mut ended_named = 0;
    if moved_meanwhile {
        println!(
            "{test}: a RUNNING_XACTS of the primary's own arrived first: ended rows not checked"
        );
    } else {
        assert_eq!(statuses, ["committed", "committed"]);
        let ended: BTreeSet<u64> = d
            .iter()
            .filter(|r| r.0 == "waiting for ended transaction")
            .filter_map(|r| r.1)
            .collect();
        assert!(
            ended.contains(&a) && ended.contains(&b),
            "a={a} and b={b} ended on the primary, as the standby replayed:\n{d:#?}"
        );
        assert!(
            !d.iter()
                .any(|r| r.0 == "waiting for primary transaction"
                    && (r.1 == Some(a) || r.1 == Some(b))),
            "{d:#?}"
        );
        assert!(d.iter().any(|r| r.0 == "waiting for WAL"), "{d:#?}");
        ended_named = ended.len();
    }
    env.log_standby_snapshot(pc);
    let msgs = wait_logged(&sb, off, cr.pid, "c-2");
    let rows = check_standby_trace(sc, slot, &msgs, &mut stats);
    let c2 = branch_row(&rows, "c-2");
    assert!(
        c2.wait_xids.clone().unwrap_or_default().contains(&dx),
        "c-2 waits for d={dx}:\n{}",
        dump(&rows)
    );

    // --- c-3: e begins after FULL; d ends; a new record runs e
    let xe = OpenXact::begin(env, &format!("pgsnap-{test}-e"));
    let e = xe.xid;
    xd.commit();
    env.log_standby_snapshot(pc);
    let cpid = cr.pid;
    let ret = cr.wait(CREATE_TIMEOUT);
    let msgs = messages(&sb, off, cpid);
    let k = kinds(&msgs);
    assert_eq!(
        k.last(),
        Some(&"c-3"),
        "e was running: the standby takes c-3:\n{}",
        dump_log(&msgs)
    );
    let ss = server_slot(sc, slot);
    assert_eq!(
        ss.confirmed_flush,
        Some(ret),
        "creation result = confirmed_flush"
    );
    let rows = check_standby_trace(sc, slot, &msgs, &mut stats);
    let crow =
        consistent_row(&rows).unwrap_or_else(|| panic!("never consistent:\n{}", dump(&rows)));
    assert_eq!(
        crow.lsn,
        Some(msgs.last().unwrap().0),
        "consistent where the standby logged it:\n{}",
        dump(&rows)
    );
    assert_eq!(
        crow.end_lsn,
        Some(ret),
        "consistent row ends at the creation's result:\n{}",
        dump(&rows)
    );
    assert!(crow.branch_is("c-3"), "{}", dump(&rows));
    assert!(
        crow.running_xids.clone().unwrap_or_default().contains(&e),
        "c-3 record runs e={e}:\n{}",
        dump(&rows)
    );
    assert_eq!(rows[0].start_decoding_at, Some(ret));
    xe.commit();

    // --- decoding on the standby: DDL and DML on the primary, a RUNNING_XACTS between
    let xk = OpenXact::begin(env, &format!("pgsnap-{test}-k"));
    pc.batch_execute(&format!(
        "INSERT INTO {t} VALUES (1); \
         BEGIN; ALTER TABLE {t} ADD COLUMN b2 int; INSERT INTO {t} VALUES (2, 2); COMMIT"
    ))
    .unwrap();
    env.log_standby_snapshot(pc);
    pc.batch_execute(&format!("INSERT INTO {t} VALUES (3, 3)"))
        .unwrap();
    xk.commit();
    env.log_standby_snapshot(pc);
    pc.batch_execute(&format!("INSERT INTO {t} VALUES (4, 4)"))
        .unwrap();
    let upto = sb.wait_replayed(pc);
    let upto = upto.min(replay_lsn(sc));
    let rows = trace_ok(sc, slot);
    let replay = emitted_by_replay(&rows, upto);
    let emitted = emitted_by_test_decoding(sc, slot, upto);
    assert_eq!(
        replay,
        emitted,
        "what test_decoding emitted on the standby vs the replay's verdicts up to {}:\n{}",
        fmt_lsn(upto),
        dump(&rows)
    );
    let changes = slot_changes(sc, slot, true);
    assert!(
        changes.iter().any(|l| l.contains("b2[integer]:4")),
        "the standby decodes the column added on the primary:\n{changes:#?}"
    );
    // The consuming decoder serialized its snapshots on the standby.
    let files = server_snap_files(sc);
    let rows = trace_ok(sc, slot);
    let ss = server_slot(sc, slot);
    let replayed = replay_lsn(sc);
    stats += check_trace_against_wal(sc, ss.restart_lsn, replayed, &rows);
    let with_file = rows
        .iter()
        .filter(|r| {
            r.lsn.is_some_and(|l| files.contains_key(&snap_name(l))) && r.file_claim().is_some()
        })
        .count();
    println!(
        "pgsnap-counts: {test} PG{} {where_} xids a={a} b={b} d={dx} e={e} server branches {k:?} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{} diagnosis pids found on the primary {found}, ended xids named after their replayed commits {ended_named}, pairs emitted {} .snap files there {} rows at them {with_file}",
        env.major,
        stats.rows,
        stats.wal_records_matched,
        stats.agrees_true,
        stats.agrees_false,
        stats.agrees_null,
        emitted.len(),
        files.len()
    );
    pc.batch_execute(&format!("DROP TABLE {t}")).unwrap();
}

// ---------------------------------------------------------------------------------------
// st10: st1 on a cascading standby (a standby of the standby)
// ---------------------------------------------------------------------------------------

/// st1's c-1 / c-2 / c-3 creation, diagnosis and decoding on a cascading standby: the
/// RUNNING_XACTS records reach it through the standby's walsender, and every verdict is
/// checked against the cascading standby's own log, WAL, slot and test_decoding output.
#[test]
fn st10_cascading_standby_creation_c1_c2_c3_then_decoding() {
    let Some((_g, env, mut pc, sb, _sc)) = start_on_standby("st10") else {
        return;
    };
    let cs = sb.cascade();
    let mut cc = cs.connect("pgsnap-st10");
    // It streams from the standby, not from the primary.
    let sender: i32 = cc
        .query_one(
            "SELECT sender_port FROM pg_stat_wal_receiver WHERE status = 'streaming'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        sender as u16, sb.env.port,
        "the cascading standby's upstream"
    );
    creation_c1_c2_c3_then_decoding("st10", "cascading standby", &env, &mut pc, &cs, &mut cc);
}

// ---------------------------------------------------------------------------------------
// st2: a creation waiting for the primary's next RUNNING_XACTS
// ---------------------------------------------------------------------------------------

#[test]
fn st2_standby_creation_waits_for_the_primarys_running_xacts() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_on_standby("st2") else {
        return;
    };
    let slot = "pgsnap_st2";
    let guard = SlotGuard::new(&sb.env, slot);
    let mut attempt = 0;
    let (cr, off) = loop {
        attempt += 1;
        sb.wait_replayed(&mut pc);
        let off = log_offset(&sb.env);
        let mut cr = Creation::start(&sb.env, slot, "test_decoding");
        wait_for("the slot to appear on the standby", WAIT, || {
            cr.try_done()
                || sc
                    .query_one(
                        "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                        &[&slot],
                    )
                    .unwrap()
                    .get::<_, i64>(0)
                    == 1
        });
        // The trace and the diagnosis of a slot with no WAL replayed past its restart_lsn.
        let rows = trace_ok(&mut sc, slot);
        let d = diagnosis(&mut sc, slot);
        if cr.try_done() || rows.len() > 1 {
            // The primary's background writer logged a RUNNING_XACTS meanwhile.
            assert!(attempt < 4, "3 creations in a row met a RUNNING_XACTS");
            println!(
                "st2: a RUNNING_XACTS arrived before the checks (attempt {attempt}), retrying"
            );
            let _ = cr.result(CREATE_TIMEOUT);
            guard.drop_now();
            continue;
        }
        let start = rows[0].message.clone().unwrap_or_default();
        assert!(
            start.contains("has been replayed on this standby yet")
                && start.contains("this server is a standby")
                && start.contains("walreceiver streaming"),
            "REPLAY START says why nothing is read: {start}"
        );
        let k: Vec<&str> = d.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(k, ["creation waiting", "waiting for WAL"], "{d:#?}");
        assert!(d[1].2.contains("this server is a standby"), "{}", d[1].2);
        assert!(
            d[1].3
                .as_deref()
                .unwrap()
                .starts_with("SELECT pg_log_standby_snapshot() on the primary"),
            "{:?}",
            d[1].3
        );
        // Nothing happens on the primary: the creation is still waiting 1 s later.
        std::thread::sleep(Duration::from_secs(1));
        if cr.try_done() {
            assert!(attempt < 4, "3 creations in a row met a RUNNING_XACTS");
            let _ = cr.result(CREATE_TIMEOUT);
            guard.drop_now();
            continue;
        }
        break (cr, off);
    };
    // The remedy, on the primary: the creation returns.
    env.log_standby_snapshot(&mut pc);
    let pid = cr.pid;
    let ret = cr.wait(Duration::from_secs(20));
    let msgs = messages(&sb, off, pid);
    let mut stats = TraceStats::default();
    let rows = check_standby_trace(&mut sc, slot, &msgs, &mut stats);
    let crow =
        consistent_row(&rows).unwrap_or_else(|| panic!("never consistent:\n{}", dump(&rows)));
    assert_eq!(crow.lsn, Some(msgs.last().unwrap().0), "{}", dump(&rows));
    assert_eq!(crow.end_lsn, Some(ret), "{}", dump(&rows));
    let ss = server_slot(&mut sc, slot);
    assert_eq!(ss.confirmed_flush, Some(ret));
    let d = diagnosis(&mut sc, slot);
    assert!(
        !d.iter()
            .any(|r| r.0.starts_with("creation") || r.0.starts_with("waiting")),
        "a created slot has no creation rows:\n{d:#?}"
    );
    println!(
        "pgsnap-counts: st2 PG{} attempts {attempt} server branches {:?} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{}",
        env.major,
        kinds(&msgs),
        stats.rows,
        stats.wal_records_matched,
        stats.agrees_true,
        stats.agrees_false,
        stats.agrees_null
    );
}

// ---------------------------------------------------------------------------------------
// st3: what needs decoding on a 14/15 standby is a clear ERROR; on 16+ it works
// ---------------------------------------------------------------------------------------

#[test]
fn st3_functions_on_a_standby_by_major() {
    let Some((_g, env, mut pc)) = start() else {
        return;
    };
    let sb = env.standby();
    let mut sc = sb.connect("pgsnap-st3");
    sb.wait_replayed(&mut pc);
    let replayed = replay_lsn(&mut sc);
    // The standby's last restartpoint: its WAL is there.
    let start: String = sc
        .query_one("SELECT redo_lsn::text FROM pg_control_checkpoint()", &[])
        .unwrap()
        .get(0);
    let r = sc.query(
        "SELECT count(*) FROM snapbuild_trace_range($1::text::pg_lsn, NULL)",
        &[&start],
    );
    if env.major < 16 {
        // The server itself: a logical slot cannot be created on this standby before 16.
        let server = sc.query(
            "SELECT pg_create_logical_replication_slot('pgsnap_st3', 'test_decoding')",
            &[],
        );
        let e = r.expect_err("trace_range on a 14/15 standby must fail");
        let db = e.as_db_error().expect("a server error");
        assert_eq!(
            db.message(),
            "logical decoding on a standby needs PostgreSQL 16 or later"
        );
        // The server's SQLSTATE for the same condition.
        let se = server.expect_err("the server refuses a logical slot on a 14/15 standby");
        let sdb = se.as_db_error().expect("a server error");
        assert_eq!(
            sdb.message(),
            "logical decoding cannot be used while in recovery"
        );
        assert_eq!(
            db.code(),
            sdb.code(),
            "ours: {}; the server's: {}",
            err_text(&e),
            err_text(&se)
        );
        println!(
            "st3: the server says: {}; we say: {}",
            err_text(&se),
            err_text(&e)
        );
        // Functions that do not decode still answer.
        let n: i64 = sc
            .query_one("SELECT count(*) FROM snapbuild_slot_health()", &[])
            .unwrap()
            .get(0);
        assert_eq!(n, 0);
        sc.query_one("SELECT count(*) FROM snapbuild_snapshot_files()", &[])
            .unwrap();
    } else {
        let n: i64 =
            r.unwrap_or_else(|e| panic!("trace_range on a standby: {}", err_text(&e)))[0].get(0);
        assert!(n >= 1);
        // The server itself creates a slot here. On a standby the creation waits for the
        // primary's next RUNNING_XACTS after its start: log them until it returns (the
        // background writer logs one only after other WAL, which a quiet primary may not
        // write: seen once, a creation waiting out its 120 s statement_timeout).
        let _guard = SlotGuard::new(&sb.env, "pgsnap_st3");
        let mut cr = Creation::start(&sb.env, "pgsnap_st3", "test_decoding");
        wait_for("the slot's creation on the standby to return", WAIT, || {
            env.log_standby_snapshot(&mut pc);
            std::thread::sleep(Duration::from_millis(200));
            cr.try_done()
        });
        cr.result(WAIT)
            .unwrap_or_else(|e| panic!("slot on the standby: {e}"));
        sc.batch_execute("SELECT pg_drop_replication_slot('pgsnap_st3')")
            .unwrap();
        // A start past what the standby has replayed: the error says so.
        let e = sc
            .query(
                "SELECT count(*) FROM snapbuild_trace_range($1::text::pg_lsn, NULL)",
                &[&fmt_lsn(replayed + 0x1000000)],
            )
            .expect_err("a start past the replay position");
        assert!(
            err_text(&e).contains("past the end of replayed WAL")
                && err_text(&e).contains("this server is a standby"),
            "{}",
            err_text(&e)
        );
    }
    println!("pgsnap-counts: st3 PG{} checked", env.major);
}

// ---------------------------------------------------------------------------------------
// st4: a slot created on the standby, the standby promoted: the trace goes on on the new
// timeline and decoding there emits what the verdicts say
// ---------------------------------------------------------------------------------------

#[test]
fn st4_promotion_trace_follows_the_new_timeline() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_on_standby("st4") else {
        return;
    };
    let slot = "pgsnap_st4";
    pc.batch_execute("DROP TABLE IF EXISTS pgsnap_st4_t; CREATE TABLE pgsnap_st4_t (id int)")
        .unwrap();
    sb.wait_replayed(&mut pc);
    let ret = create_on_standby(&env, &sb, &mut pc, slot);
    let tli_before: i32 = sc
        .query_one("SELECT received_tli FROM pg_stat_wal_receiver", &[])
        .unwrap()
        .get(0);
    // x1 on the primary, replayed; then the promotion; x2 on the promoted server.
    let x1: String = pc
        .query_one(
            "WITH i AS (INSERT INTO pgsnap_st4_t VALUES (1) RETURNING 1) SELECT pg_current_xact_id()::xid::text FROM i",
            &[],
        )
        .unwrap()
        .get(0);
    sb.wait_replayed(&mut pc);
    drop(pc);
    sb.promote().unwrap_or_else(|e| panic!("{e}"));
    wait_for("the promoted server to leave recovery", WAIT, || {
        !sc.query_one("SELECT pg_is_in_recovery()", &[])
            .unwrap()
            .get::<_, bool>(0)
    });
    let x2: String = sc
        .query_one(
            "WITH i AS (INSERT INTO pgsnap_st4_t VALUES (2) RETURNING 1) SELECT pg_current_xact_id()::xid::text FROM i",
            &[],
        )
        .unwrap()
        .get(0);
    let (x1, x2): (u64, u64) = (x1.parse().unwrap(), x2.parse().unwrap());
    sc.batch_execute("CHECKPOINT").unwrap();
    let tli_after: i32 = sc
        .query_one("SELECT timeline_id FROM pg_control_checkpoint()", &[])
        .unwrap()
        .get(0);
    assert!(
        tli_after > tli_before,
        "promotion switched timelines: {tli_before} -> {tli_after}"
    );
    let upto = flush_lsn(&mut sc);
    let ss = server_slot(&mut sc, slot);
    let rows = trace_ok(&mut sc, slot);
    let stats = check_trace_against_wal(&mut sc, ss.restart_lsn, upto, &rows);
    assert_eq!(rows[0].start_decoding_at, Some(ret));
    let replay = emitted_by_replay(&rows, upto);
    let emitted = emitted_by_test_decoding(&mut sc, slot, upto);
    assert_eq!(
        replay,
        emitted,
        "test_decoding on the promoted server vs the replay's verdicts:\n{}",
        dump(&rows)
    );
    assert!(
        emitted.contains(&("commit".into(), x1)) && emitted.contains(&("commit".into(), x2)),
        "x1={x1} (before) and x2={x2} (after the promotion) decoded: {emitted:?}"
    );
    let eor = rows
        .iter()
        .filter(|r| r.record.contains("END_OF_RECOVERY") || r.record.contains("end-of-recovery"))
        .count();
    println!(
        "pgsnap-counts: st4 PG{} timeline {tli_before} -> {tli_after} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{} pairs emitted {} end-of-recovery rows {eor}",
        env.major,
        stats.rows,
        stats.wal_records_matched,
        stats.agrees_true,
        stats.agrees_false,
        stats.agrees_null,
        emitted.len()
    );
    sc.batch_execute(&format!("SELECT pg_drop_replication_slot('{slot}')"))
        .unwrap();
    env.connect("pgsnap-st4")
        .batch_execute("DROP TABLE pgsnap_st4_t")
        .unwrap();
}
