//! pg_snapbuild's verdicts against the real server's, with several real sessions.
//!
//! Every assertion compares our SQL functions with something the server produced: the
//! LSN `pg_create_logical_replication_slot` returned (= confirmed_flush), the LOG/DETAIL
//! lines the server wrote to `PGSNAP_LOG`, the RUNNING_XACTS records in its WAL
//! (`pg_walinspect`), its slot catalog, the `.snap` files it wrote (read through
//! `pg_logicalinspect` on 18), the xids it assigned and the xids `test_decoding` emitted.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).
//! Scenarios run one at a time (slot creation waits for every running transaction of the
//! cluster); each uses its own slot and drops it, even on failure.
//!
//! Counts are printed on lines starting with `pgsnap-counts:` (run with --nocapture).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(30);
const CREATE_TIMEOUT: Duration = Duration::from_secs(90);

/// PGSNAP_VERBOSE=1 prints whole traces.
fn verbose(what: &str, rows: &[TraceRow]) {
    if std::env::var("PGSNAP_VERBOSE").as_deref() == Ok("1") {
        println!("{what}:\n{}", dump(rows));
    }
}

fn trace_ok(c: &mut Client, slot: &str) -> Vec<TraceRow> {
    trace(c, slot).unwrap_or_else(|e| panic!("snapbuild_trace('{slot}') failed: {}", err_text(&e)))
}

/// snapbuild_slots() against pg_replication_slots, column by column (IS NOT DISTINCT
/// FROM); returns the number of columns compared. All differing columns are reported
/// with both values.
fn check_slots_view(
    env: &Env,
    c: &mut Client,
    slot: &str,
    in_creation: bool,
    fails: &mut Failures,
) -> usize {
    let mut cols: Vec<(&str, &str)> = vec![
        ("plugin", "plugin"),
        ("slot_type", "slot_type"),
        ("datoid", "datoid"),
        ("active_pid", "active_pid"),
        ("xmin", "xmin"),
        ("catalog_xmin", "catalog_xmin"),
        ("restart_lsn", "restart_lsn"),
        ("confirmed_flush", "confirmed_flush_lsn"),
    ];
    // pg_replication_slots shows invalidation_reason from 17, two_phase_at from 18.
    if env.major >= 17 {
        cols.push(("invalidation_reason", "invalidation_reason"));
    }
    if env.major >= 18 {
        cols.push(("two_phase_at", "two_phase_at"));
    }
    let sql = format!(
        "SELECT o.in_creation, {} FROM snapbuild_slots() o JOIN pg_replication_slots p USING (slot_name) \
         WHERE slot_name = $1",
        cols.iter()
            .map(|(o, p)| format!("(o.{o} IS NOT DISTINCT FROM p.{p}) AS \"same_{o}\", o.{o} AS \"ours_{o}\", p.{p} AS \"server_{o}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let rows = json_rows(c, &sql, &[&slot])
        .unwrap_or_else(|e| panic!("snapbuild_slots(): {}", err_text(&e)));
    assert_eq!(
        rows.len(),
        1,
        "snapbuild_slots() must list slot {slot} once"
    );
    let r = &rows[0];
    assert_eq!(
        jb(r, "in_creation"),
        Some(in_creation),
        "in_creation of {slot}: {}",
        show(r)
    );
    let diffs: Vec<String> = cols
        .iter()
        .filter(|(o, _)| jb(r, &format!("same_{o}")) != Some(true))
        .map(|(o, p)| {
            format!(
                "{o}: snapbuild_slots {:?} vs pg_replication_slots.{p} {:?}",
                r.get(&format!("ours_{o}")),
                r.get(&format!("server_{o}"))
            )
        })
        .collect();
    fails.check(diffs.is_empty(), || {
        format!(
            "snapbuild_slots() differs from pg_replication_slots for {slot} (in creation: {in_creation}):\n{}",
            diffs.join("\n")
        )
    });
    cols.len() - diffs.len()
}

fn kinds(msgs: &[(u64, LogEntry)]) -> Vec<&'static str> {
    msgs.iter().map(|(_, e)| log_branch(e)).collect()
}

// ---------------------------------------------------------------------------------------
// Shared by the creations of 1-4
// ---------------------------------------------------------------------------------------

/// The REPLAY START row of a created slot: outside creation, start_decoding_at =
/// confirmed_flush (what pg_create_logical_replication_slot returned).
fn check_replay_start_of_created(rows: &[TraceRow], ret: u64) {
    assert_eq!(
        rows[0].in_slot_creation,
        Some(false),
        "created slot replays outside creation:\n{}",
        dump(rows)
    );
    assert_eq!(
        rows[0].start_decoding_at,
        Some(ret),
        "REPLAY START start_decoding_at must be confirmed_flush:\n{}",
        dump(rows)
    );
}

/// The row where the replay became consistent: at `server_lsn` (where the server logged
/// its consistent point), by the server's `branch` when given, on the record ending at
/// `ret`; the LOG rows up to it are the server's `msgs`.
fn check_consistent_row<'a>(
    rows: &'a [TraceRow],
    msgs: &[(u64, LogEntry)],
    server_lsn: u64,
    branch: Option<&str>,
    ret: u64,
) -> &'a TraceRow {
    let crow = consistent_row(rows)
        .unwrap_or_else(|| panic!("trace never becomes consistent:\n{}", dump(rows)));
    assert_eq!(
        crow.lsn,
        Some(server_lsn),
        "server found the consistent point at {}:\n{}{}",
        fmt_lsn(server_lsn),
        dump_log(msgs),
        dump(rows)
    );
    if let Some(b) = branch {
        assert_eq!(
            crow.branch.as_deref(),
            Some(b),
            "server's branch {b}:\n{}",
            dump(rows)
        );
    }
    assert_eq!(
        crow.end_lsn,
        Some(ret),
        "consistent row ends at {:?}, pg_create_logical_replication_slot returned {}:\n{}",
        crow.end_lsn.map(fmt_lsn),
        fmt_lsn(ret),
        dump(rows)
    );
    compare_log_with_trace(msgs, rows, crow.lsn);
    crow
}

/// The state of the builder after the last record of a trace.
fn last_state(rows: &[TraceRow]) -> Option<&str> {
    rows.iter()
        .rev()
        .find(|r| r.state.is_some() && r.record != "REPLAY START")
        .unwrap()
        .state
        .as_deref()
}

/// The server's `confirmed_flush_lsn` is what the creation returned.
fn check_confirmed_flush(c: &mut Client, slot: &str, ret: u64) -> ServerSlot {
    let ss = server_slot(c, slot);
    assert_eq!(
        ss.confirmed_flush,
        Some(ret),
        "server: function result vs confirmed_flush_lsn"
    );
    ss
}

// ---------------------------------------------------------------------------------------
// 1. no running transaction → branch a, end_lsn = confirmed_flush
// ---------------------------------------------------------------------------------------

#[test]
fn s1_no_running_transaction_branch_a() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slot = "pgsnap_s1";
    let guard = SlotGuard::new(&env, slot);
    let (ret, msgs) = create_taking_branch_a(&env, &guard);
    let ss = check_confirmed_flush(&mut c, slot, ret);
    let flush = flush_lsn(&mut c);
    let rows = trace_ok(&mut c, slot);
    let st = check_trace_against_wal(&mut c, ss.restart_lsn, flush, &rows);
    check_replay_start_of_created(&rows, ret);
    check_consistent_row(&rows, &msgs, msgs[0].0, Some("a"), ret);
    let mut fails = Failures::default();
    let cols = check_slots_view(&env, &mut c, slot, false, &mut fails);
    println!(
        "pgsnap-counts: s1 PG{} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{} log lines matched {} slot columns equal {}",
        env.major, st.rows, st.wal_records_matched, st.agrees_true, st.agrees_false, st.agrees_null, msgs.len(), cols
    );
    fails.finish("s1");
}

/// Creates the guarded slot until the server logs branch a alone (≤ 5 tries: autovacuum
/// may run meanwhile); what the creation returned and the builder's messages.
fn create_taking_branch_a(env: &Env, guard: &SlotGuard) -> (u64, Vec<(u64, LogEntry)>) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let off = log_offset(env);
        let (pid, ret) = create_slot(env, &guard.name);
        let msgs = builder_messages(&log_entries_since(env, off), pid);
        if kinds(&msgs) == ["a"] {
            return (ret, msgs);
        }
        assert!(
            attempt < 5,
            "5 creations in a row met running transactions:\n{}",
            dump_log(&msgs)
        );
        println!(
            "s1: another transaction ran during creation (attempt {attempt}), retrying:\n{}",
            dump_log(&msgs)
        );
        guard.drop_now();
    }
}

// ---------------------------------------------------------------------------------------
// 2./3. open transactions ending in turn while creation waits: c-1, c-2, then a or c-3
// ---------------------------------------------------------------------------------------

/// A creation being watched: its slot, its backend, where the server log stood before it.
struct Watched<'a> {
    env: &'a Env,
    slot: &'a str,
    pid: i32,
    off: u64,
}

impl Watched<'_> {
    fn messages(&self) -> Vec<(u64, LogEntry)> {
        builder_messages(&log_entries_since(self.env, self.off), self.pid)
    }
}

fn waits_scenario(tag: &str, slot: &str, with_c3: bool) {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let _guard = SlotGuard::new(&env, slot);
    let xa = OpenXact::begin(&env, "pgsnap-a");
    let xb = OpenXact::begin(&env, "pgsnap-b");
    let (a, b) = (xa.xid, xb.xid);
    let off = log_offset(&env);
    let cr = Creation::start(&env, slot, "test_decoding");
    let w = Watched {
        env: &env,
        slot,
        pid: cr.pid,
        off,
    };
    wait_for(
        "the creating backend to wait for a or b (c-1)",
        WAIT,
        || waits_for_xid(&mut c, w.pid, a) || waits_for_xid(&mut c, w.pid, b),
    );
    let mut stats = TraceStats::default();
    let mut fails = Failures::default();
    let (restart_lsn, mut cols) = check_during_c1(&w, &mut c, (a, b), &mut stats, &mut fails);

    // --- d begins after the first RUNNING_XACTS; a and b end; creation then waits for d
    let xd = OpenXact::begin(&env, "pgsnap-d");
    let d = xd.xid;
    xa.commit();
    xb.commit();
    wait_for("the creating backend to wait for d (c-2)", WAIT, || {
        waits_for_xid(&mut c, w.pid, d)
    });
    check_during_c2(&w, &mut c, restart_lsn, &mut stats);

    // --- e begins after FULL; d ends
    let xe = with_c3.then(|| OpenXact::begin(&env, "pgsnap-e"));
    let e = xe.as_ref().map(|x| x.xid);
    xd.commit();
    let ret = cr.wait(CREATE_TIMEOUT);
    if let Some(x) = xe {
        x.commit();
    }

    let msgs = w.messages();
    let (k, final_kind) = check_final_server_log(tag, &msgs, with_c3);
    let ss = check_confirmed_flush(&mut c, slot, ret);
    let flush = flush_lsn(&mut c);
    let rows = trace_ok(&mut c, slot);
    stats += check_trace_against_wal(&mut c, ss.restart_lsn, flush, &rows);
    check_replay_start_of_created(&rows, ret);
    let (cons_lsn, _) = msgs.last().unwrap();
    let crow = check_consistent_row(&rows, &msgs, *cons_lsn, Some(final_kind), ret);
    check_rows_before_consistency(&rows, crow, (a, b, d), e);
    cols += check_slots_view(&env, &mut c, slot, false, &mut fails);
    println!(
        "pgsnap-counts: {tag} PG{} xids a={a} b={b} d={d} e={e:?} server branches {:?} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{} log lines matched {} slot columns equal {}",
        env.major, k, stats.rows, stats.wal_records_matched, stats.agrees_true, stats.agrees_false, stats.agrees_null, msgs.len(), cols
    );
    fails.finish(tag);
}

/// While the slot is in creation, after c-1 (a and b open): the server logged c-1 and
/// nothing else of consequence; the trace during creation matches it, c-1 waits for a
/// and b, the builder is BUILDING. Returns the slot's restart_lsn and the slot view's
/// equal columns.
fn check_during_c1(
    w: &Watched,
    c: &mut Client,
    (a, b): (u64, u64),
    stats: &mut TraceStats,
    fails: &mut Failures,
) -> (u64, usize) {
    let msgs1 = w.messages();
    assert_eq!(
        kinds(&msgs1).first(),
        Some(&"c-1"),
        "server log after c-1:\n{}",
        dump_log(&msgs1)
    );
    let ss = server_slot(c, w.slot);
    assert_eq!(ss.active_pid, Some(w.pid));
    assert_eq!(
        ss.restart_lsn, msgs1[0].0,
        "server: restart_lsn is the first RUNNING_XACTS"
    );
    let flush = flush_lsn(c);
    let rows = trace_ok(c, w.slot);
    *stats += check_trace_against_wal(c, ss.restart_lsn, flush, &rows);
    assert_eq!(
        rows[0].in_slot_creation,
        Some(true),
        "slot in creation:\n{}",
        dump(&rows)
    );
    assert_eq!(
        rows[0].initial_xmin_horizon,
        ss.catalog_xmin,
        "initial_xmin_horizon = catalog_xmin:\n{}",
        dump(&rows)
    );
    compare_log_with_trace(&msgs1, &rows, None);
    let c1 = branch_row(&rows, "c-1");
    let wx = c1.wait_xids.clone().unwrap_or_default();
    assert!(
        wx.contains(&a) && wx.contains(&b),
        "c-1 must wait for {a} and {b}:\n{}",
        dump(&rows)
    );
    assert_eq!(
        last_state(&rows),
        Some("building"),
        "a and b are still open: the builder is BUILDING:\n{}",
        dump(&rows)
    );
    let cols = check_slots_view(w.env, c, w.slot, true, fails);
    (ss.restart_lsn, cols)
}

/// While the creation waits for d (c-2): the server logged c-2, the trace matches the
/// log so far and the builder is FULL.
fn check_during_c2(w: &Watched, c: &mut Client, restart_lsn: u64, stats: &mut TraceStats) {
    let msgs2 = w.messages();
    assert!(
        kinds(&msgs2).contains(&"c-2"),
        "server log after c-2:\n{}",
        dump_log(&msgs2)
    );
    let flush = flush_lsn(c);
    let rows = trace_ok(c, w.slot);
    *stats += check_trace_against_wal(c, restart_lsn, flush, &rows);
    compare_log_with_trace(&msgs2, &rows, None);
    assert_eq!(
        last_state(&rows),
        Some("full"),
        "d is still open: the builder is FULL:\n{}",
        dump(&rows)
    );
}

/// The server's builder lines of the whole creation: c-1 first, one c-2, and c-3 when e
/// was running (else a, or c-3 if another transaction was). Their kinds and the last one.
fn check_final_server_log(
    tag: &str,
    msgs: &[(u64, LogEntry)],
    with_c3: bool,
) -> (Vec<&'static str>, &'static str) {
    let k = kinds(msgs);
    assert_eq!(k.first(), Some(&"c-1"), "server log:\n{}", dump_log(msgs));
    assert_eq!(
        k.iter().filter(|x| **x == "c-2").count(),
        1,
        "server log:\n{}",
        dump_log(msgs)
    );
    let final_kind = *k.last().unwrap();
    if with_c3 {
        assert_eq!(
            final_kind,
            "c-3",
            "e was running: the server must take c-3:\n{}",
            dump_log(msgs)
        );
    } else {
        assert!(
            final_kind == "a" || final_kind == "c-3",
            "server log:\n{}",
            dump_log(msgs)
        );
        if final_kind == "c-3" {
            println!(
                "{tag}: another transaction was running at the last record: the server took c-3"
            );
        }
    }
    (k, final_kind)
}

/// The RUNNING_XACTS rows up to consistency: only c-1, c-2, c-3, a or fall-through, c-1
/// first, one c-2 that runs d (not a, b) and waits for it; the c-3 record runs e, which
/// began after FULL.
fn check_rows_before_consistency(
    rows: &[TraceRow],
    crow: &TraceRow,
    (a, b, d): (u64, u64, u64),
    e: Option<u64>,
) {
    let rx: Vec<&TraceRow> = rows
        .iter()
        .filter(|r| r.is("RUNNING_XACTS") && r.lsn <= crow.lsn)
        .collect();
    for r in &rx {
        let ok = ["c-1", "c-2", "c-3", "a", "fall-through"]
            .iter()
            .any(|b| r.branch_is(b));
        assert!(
            ok,
            "unexpected branch before consistency: {}\n{}",
            r.show(),
            dump(rows)
        );
    }
    assert!(
        rx[0].branch_is("c-1"),
        "first record must take c-1:\n{}",
        dump(rows)
    );
    let c2: Vec<&&TraceRow> = rx.iter().filter(|r| r.branch_is("c-2")).collect();
    assert_eq!(c2.len(), 1, "one c-2 row:\n{}", dump(rows));
    let run2 = c2[0].running_xids.clone().unwrap_or_default();
    assert!(
        run2.contains(&d) && !run2.contains(&a) && !run2.contains(&b),
        "c-2 record runs d={d} only of ours:\n{}",
        dump(rows)
    );
    assert!(
        c2[0].wait_xids.clone().unwrap_or_default().contains(&d),
        "c-2 waits for d:\n{}",
        dump(rows)
    );
    if let Some(e) = e {
        let run = crow.running_xids.clone().unwrap_or_default();
        assert!(run.contains(&e), "c-3 record runs e={e}:\n{}", dump(rows));
        assert!(e >= c2[0].next_phase_at.unwrap(), "e began after FULL");
    }
}

#[test]
fn s2_two_transactions_end_in_turn_c1_c2_a() {
    waits_scenario("s2", "pgsnap_s2", false);
}

#[test]
fn s3_transaction_begun_after_full_c3() {
    waits_scenario("s3", "pgsnap_s3", true);
}

// ---------------------------------------------------------------------------------------
// 4. a transaction open across two RUNNING_XACTS → fall-through
// ---------------------------------------------------------------------------------------

#[test]
fn s4_open_across_two_running_xacts_falls_through() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slot = "pgsnap_s4";
    let _guard = SlotGuard::new(&env, slot);
    let xa = OpenXact::begin(&env, "pgsnap-a");
    let a = xa.xid;
    let off = log_offset(&env);
    let cr = Creation::start(&env, slot, "test_decoding");
    let pid = cr.pid;
    wait_for("the creating backend to wait for a (c-1)", WAIT, || {
        waits_for_xid(&mut c, pid, a)
    });
    let r2_end = env.log_standby_snapshot(&mut c);
    let after_r2 = flush_lsn(&mut c).max(r2_end.unwrap_or(0));
    xa.commit();
    let ret = cr.wait(CREATE_TIMEOUT);
    let msgs = builder_messages(&log_entries_since(&env, off), pid);
    assert_eq!(
        kinds(&msgs).first(),
        Some(&"c-1"),
        "server log:\n{}",
        dump_log(&msgs)
    );
    let r1 = server_slot(&mut c, slot).restart_lsn;
    let r2 = second_record(&mut c, r1, after_r2, r2_end, a);

    let flush = flush_lsn(&mut c);
    let rows = trace_ok(&mut c, slot);
    let st = check_trace_against_wal(&mut c, r1, flush, &rows);
    check_consistent_row(&rows, &msgs, msgs.last().unwrap().0, None, ret);
    check_fall_through_row(&rows, &r2);
    let falls = rows.iter().filter(|r| r.branch_is("fall-through")).count();
    println!(
        "pgsnap-counts: s4 PG{} a={a} fall-through at {} ({}) server branches {:?} fall-through rows {falls} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{}",
        env.major, fmt_lsn(r2.start), r2.description, kinds(&msgs), st.rows, st.wal_records_matched, st.agrees_true, st.agrees_false, st.agrees_null
    );
}

/// The record logged while a was open (after the first, at `r1`), as the server wrote
/// it: the one ending at `r2_end` (16+), or the one running a (CHECKPOINT on 15).
fn second_record(
    c: &mut Client,
    r1: u64,
    after_r2: u64,
    r2_end: Option<u64>,
    a: u64,
) -> WalRunningXacts {
    let wal = wal_running_xacts(c, r1 + 1, after_r2 + 1);
    let r2 = match r2_end {
        Some(end) => wal
            .iter()
            .find(|w| w.end == end)
            .unwrap_or_else(|| panic!("no RUNNING_XACTS ends at {}", fmt_lsn(end))),
        None => wal
            .iter()
            .find(|w| w.xacts.contains(&a))
            .expect("CHECKPOINT logged no RUNNING_XACTS with a running"),
    }
    .clone();
    assert!(
        r2.xacts.contains(&a),
        "server: {} runs a={a}",
        r2.description
    );
    r2
}

/// The trace row of `r2`: a fall-through, BUILDING → BUILDING, no LOG, xmin = the
/// record's oldestRunningXid.
fn check_fall_through_row(rows: &[TraceRow], r2: &WalRunningXacts) {
    let row2 = rows
        .iter()
        .find(|r| r.is("RUNNING_XACTS") && r.lsn == Some(r2.start))
        .unwrap_or_else(|| panic!("no row at {}:\n{}", fmt_lsn(r2.start), dump(rows)));
    assert_eq!(
        row2.branch.as_deref(),
        Some("fall-through"),
        "record at {} ({}):\n{}",
        fmt_lsn(r2.start),
        r2.description,
        dump(rows)
    );
    assert_eq!(
        row2.state_before.as_deref(),
        Some("building"),
        "{}",
        row2.show()
    );
    assert_eq!(row2.state.as_deref(), Some("building"), "{}", row2.show());
    assert!(
        row2.level.as_deref() != Some("LOG"),
        "the server logs nothing on fall-through: {}",
        row2.show()
    );
    // after a fall-through the builder's xmin is the record's oldestRunningXid
    assert_eq!(
        row2.xmin,
        Some(r2.oldest_running_xid),
        "xmin after fall-through ({}): {}",
        r2.description,
        row2.show()
    );
}

// ---------------------------------------------------------------------------------------
// 5. restart from a saved snapshot (branch b)
// ---------------------------------------------------------------------------------------

/// The xids `test_decoding` emits a `COMMIT <xid>` for (a peek from confirmed_flush).
fn test_decoding_commits(c: &mut Client, slot: &str) -> Vec<u64> {
    slot_changes(c, slot, false)
        .iter()
        .filter_map(|l| emitted_kind(l))
        .filter(|(kind, _)| kind == "commit")
        .map(|(_, x)| x)
        .collect()
}

#[test]
fn s5_restart_from_saved_snapshot_branch_b() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slot = "pgsnap_s5";
    let tab = "pgsnap_s5_tab";
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}"))
        .unwrap();
    let (_pid, ret) = create_slot(&env, slot);
    let (x_ddl, x_ins, mut st) = check_commits_after_consistency(&mut c, slot, tab, ret);

    // an open transaction with an xid but no WAL: RUNNING_XACTS list it, the reorder
    // buffer does not know it, so restart_lsn moves to a serialized snapshot where a
    // cannot apply
    let xk = OpenXact::begin(&env, "pgsnap-k");
    let ss = consume_until_restart_at_a_snap_running(&env, &mut c, slot, tab, xk.xid);
    let flush = flush_lsn(&mut c);
    let rows = trace_ok(&mut c, slot);
    verbose("s5 trace", &rows);
    st += check_trace_against_wal(&mut c, ss.restart_lsn, flush, &rows);
    let first_rx = check_restart_takes_b(&rows, &ss, xk.xid);
    // the server restarting from there says the same
    let mut c2 = check_server_restart(&env, slot, &rows, &ss, first_rx);

    // k ends; two more RUNNING_XACTS (not consumed): at the first the builder's xmin moves
    // from k to nextXid. A peek makes the server restart at restart_lsn (b) again and
    // serialize them, so the trace has 'serialize' rows with a file the server wrote.
    xk.commit();
    for _ in 0..2 {
        env.log_standby_snapshot_flushed(&mut c, tab, "200");
    }
    let flush = flush_lsn(&mut c);
    let rows = trace_ok(&mut c, slot);
    verbose("s5 trace after k ended", &rows);
    st += check_trace_against_wal(&mut c, ss.restart_lsn, flush, &rows);
    let _ = slot_changes(&mut c2, slot, false);
    // The server has now written the files of those records: trace again so each
    // serialize row carries the server's verdict.
    let rows = trace_ok(&mut c, slot);

    // rows at LSNs where the server wrote or read a .snap file: same state/xmin/xmax
    let files = server_snap_files(&mut c);
    let (compared, mismatches) = compare_rows_with_snap_files(&env, &mut c, &rows, &files);
    assert!(
        compared >= 2,
        "no trace row at a .snap LSN ({files:?}):\n{}",
        dump(&rows)
    );
    let mut fails = Failures::default();
    fails.check(mismatches.is_empty(), || {
        format!(
            "trace rows differ from the .snap files the server wrote at their LSN:\n{}\n{}",
            mismatches.join("\n"),
            dump(&rows)
        )
    });
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}"))
        .unwrap();
    println!(
        "pgsnap-counts: s5 PG{} ddl xid {x_ddl} insert xids {x_ins:?} restart_lsn {} branch b confirmed by server log; .snap files compared with trace rows {compared} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{}",
        env.major, fmt_lsn(ss.restart_lsn), st.rows, st.wal_records_matched, st.agrees_true, st.agrees_false, st.agrees_null
    );
    fails.finish("s5");
}

/// A catalog-modifying transaction and a few data ones, after consistency: test_decoding
/// emits them all; the DDL commit is a COMMIT row (consistent, xmax beyond its xid);
/// every COMMIT row after confirmed_flush (`ret`) was emitted. The DDL's and the
/// inserts' xids.
fn check_commits_after_consistency(
    c: &mut Client,
    slot: &str,
    tab: &str,
    ret: u64,
) -> (u64, Vec<u64>, TraceStats) {
    c.batch_execute("BEGIN").unwrap();
    c.batch_execute(&format!("CREATE TABLE {tab} (a int)"))
        .unwrap();
    let x_ddl = current_xid(c);
    c.batch_execute("COMMIT").unwrap();
    let mut x_ins = Vec::new();
    for i in 0..3 {
        c.batch_execute(&format!("BEGIN; INSERT INTO {tab} VALUES ({i})"))
            .unwrap();
        x_ins.push(current_xid(c));
        c.batch_execute("COMMIT").unwrap();
    }
    let ss = server_slot(c, slot);
    let flush = flush_lsn(c);
    let rows = trace_ok(c, slot);
    let st = check_trace_against_wal(c, ss.restart_lsn, flush, &rows);
    let emitted = test_decoding_commits(c, slot);
    assert!(
        emitted.contains(&x_ddl) && x_ins.iter().all(|x| emitted.contains(x)),
        "test_decoding emitted {emitted:?}"
    );
    let commit_rows: Vec<&TraceRow> = rows.iter().filter(|r| r.is("COMMIT")).collect();
    let ddl = commit_rows
        .iter()
        .find(|r| r.xid == Some(x_ddl))
        .unwrap_or_else(|| {
            panic!(
                "the catalog-modifying commit {x_ddl} changes the builder, no COMMIT row:\n{}",
                dump(&rows)
            )
        });
    assert_eq!(ddl.state.as_deref(), Some("consistent"), "{}", ddl.show());
    assert!(
        ddl.xmax.unwrap() > x_ddl,
        "xmax after committing catalog xid {x_ddl} must follow it: {}",
        ddl.show()
    );
    for r in &commit_rows {
        if r.lsn.unwrap() >= ret {
            assert!(emitted.contains(&r.xid.unwrap()), "COMMIT row {} after confirmed_flush but test_decoding did not emit it ({emitted:?})", r.show());
        }
    }
    (x_ddl, x_ins, st)
}

/// Logs RUNNING_XACTS and consumes the slot until its restart_lsn is a RUNNING_XACTS
/// record with a `.snap` file that runs `k`; the slot then.
fn consume_until_restart_at_a_snap_running(
    env: &Env,
    c: &mut Client,
    slot: &str,
    tab: &str,
    k: u64,
) -> ServerSlot {
    for _ in 0..10 {
        env.log_standby_snapshot_flushed(c, tab, "100");
        consume_changes(c, slot);
        let ss = server_slot(c, slot);
        let files = server_snap_files(c);
        let w = wal_running_xacts_at(c, ss.restart_lsn);
        if files.contains_key(&snap_name(ss.restart_lsn)) && w.is_some_and(|w| w.xacts.contains(&k))
        {
            return ss;
        }
    }
    panic!("restart_lsn never reached a serialized RUNNING_XACTS with k running");
}

/// The replay from restart_lsn restores the `.snap` there: its first RUNNING_XACTS row
/// is at restart_lsn and takes branch b; REPLAY START's start_decoding_at is the slot's
/// confirmed_flush. Returns that row's LSN.
fn check_restart_takes_b(rows: &[TraceRow], ss: &ServerSlot, k: u64) -> Option<u64> {
    let first_rx = rows
        .iter()
        .find(|r| r.is("RUNNING_XACTS"))
        .unwrap_or_else(|| panic!("no RUNNING_XACTS row:\n{}", dump(rows)));
    assert_eq!(first_rx.lsn, Some(ss.restart_lsn), "{}", dump(rows));
    assert_eq!(
        first_rx.branch.as_deref(),
        Some("b"),
        "a .snap exists at restart_lsn {} and k={k} runs:\n{}",
        fmt_lsn(ss.restart_lsn),
        dump(rows)
    );
    assert_eq!(
        rows[0].start_decoding_at,
        ss.confirmed_flush,
        "REPLAY START start_decoding_at:\n{}",
        dump(rows)
    );
    first_rx.lsn
}

/// A new session peeks the slot: the server logs `starting logical decoding …` with the
/// replay's start and its builder's first line (branch b) is the trace's. Returns that
/// session.
fn check_server_restart(
    env: &Env,
    slot: &str,
    rows: &[TraceRow],
    ss: &ServerSlot,
    first_rx: Option<u64>,
) -> Client {
    let off = log_offset(env);
    let mut c2 = env.connect("pgsnap-restart");
    let pid2 = backend_pid(&mut c2);
    let _ = slot_changes(&mut c2, slot, false);
    let ents = log_entries_since(env, off);
    let start = ents
        .iter()
        .find(|e| {
            e.pid == pid2 && e.message == format!("starting logical decoding for slot \"{slot}\"")
        })
        .unwrap_or_else(|| {
            panic!("server log has no 'starting logical decoding' from {pid2}: {ents:?}")
        });
    assert_eq!(
        start.detail.as_deref(),
        Some(
            format!(
                "Streaming transactions committing after {}, reading WAL from {}.",
                fmt_lsn(rows[0].start_decoding_at.unwrap()),
                fmt_lsn(rows[0].lsn.unwrap_or(ss.restart_lsn))
            )
            .as_str()
        ),
        "REPLAY START vs the server's own start"
    );
    let msgs = builder_messages(&ents, pid2);
    assert_eq!(
        kinds(&msgs).first(),
        Some(&"b"),
        "server restart:\n{}",
        dump_log(&msgs)
    );
    // `rows` were traced before this peek: its line is compared with them; traced again,
    // the b row carries that line itself (server_source names pid2) and agrees.
    compare_log_with_earlier_trace(&msgs[..1], rows, first_rx);
    let again = trace_ok(&mut c2, slot);
    compare_log_with_trace(&msgs[..1], &again, first_rx);
    c2
}

/// (state, xmin, xmax) of a `.snap` file.
type FileState = (Option<String>, Option<u64>, Option<u64>);

/// Trace rows at LSNs where the server wrote or read one of `files` against the file:
/// the row's claim ([`TraceRow::file_claim`]) is the file's state/xmin/xmax
/// (pg_logicalinspect on 18, else the file as `snapbuild_snapshot_info` reads it), and
/// on 18 a serialize row agrees. The rows compared and the mismatches.
fn compare_rows_with_snap_files(
    env: &Env,
    c: &mut Client,
    rows: &[TraceRow],
    files: &BTreeMap<String, i64>,
) -> (usize, Vec<String>) {
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for r in rows.iter().filter(|r| r.record != "REPLAY START") {
        let Some(l) = r.lsn else { continue };
        let name = snap_name(l);
        if !files.contains_key(&name) {
            continue;
        }
        let Some(got) = r.file_claim() else {
            continue;
        };
        let (source, want) = if env.has_logicalinspect() {
            if r.branch_is("serialize") && !r.agrees_or_undecided_writer() {
                mismatches.push(format!(
                    "{name}: serialize row has agrees {:?} ({:?})",
                    r.agrees, r.disagreement
                ));
            }
            ("pg_logicalinspect", logicalinspect_state(c, &name))
        } else {
            (
                "file (snapbuild_snapshot_info)",
                file_state_as_we_read_it(c, &name),
            )
        };
        if want != got {
            mismatches.push(format!(
                "{name}: {source} state/xmin/xmax {want:?}, trace row {} {:?} has {got:?}",
                r.record, r.branch
            ));
        }
        compared += 1;
    }
    (compared, mismatches)
}

fn logicalinspect_state(c: &mut Client, name: &str) -> FileState {
    let f = json_rows(
        c,
        "SELECT state, xmin, xmax FROM pg_get_logical_snapshot_info($1)",
        &[&name],
    )
    .unwrap();
    let f = &f[0];
    (js(f, "state"), jxid(f, "xmin"), jxid(f, "xmax"))
}

/// No pg_logicalinspect before 18: the file as our decoder reads it (checksum ok,
/// consistent).
fn file_state_as_we_read_it(c: &mut Client, name: &str) -> FileState {
    let f =
        json_rows(c, "SELECT * FROM snapbuild_snapshot_info($1)", &[&name]).unwrap_or_else(|e| {
            panic!(
                "snapbuild_snapshot_info({name}) of a server-written file: {}",
                err_text(&e)
            )
        });
    assert_eq!(jb(&f[0], "checksum_ok"), Some(true), "{}", show(&f[0]));
    assert_eq!(
        js(&f[0], "state").as_deref(),
        Some("consistent"),
        "{}",
        show(&f[0])
    );
    let f = &f[0];
    (js(f, "state"), jxid(f, "xmin"), jxid(f, "xmax"))
}

// ---------------------------------------------------------------------------------------
// 6. corrupt copies of a real .snap file
// ---------------------------------------------------------------------------------------

/// A file's path as the server's messages name it.
fn snap_path(n: &str) -> String {
    format!("pg_logical/snapshots/{n}")
}

/// A corrupt copy: (name, bytes, the server's message for it as a regex).
type Corrupt = (String, Vec<u8>, String);

/// Copies of `bytes` truncated (10 bytes, −4 bytes), with one bit flipped, with a wrong
/// magic and a wrong version, with the committed count one too high, and empty; the
/// messages carry the real file's magic, checksum and version.
fn corrupt_copies(bytes: &[u8]) -> Vec<Corrupt> {
    let u32le = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let (magic, stored_crc, version) = (u32le(0), u32le(4), u32le(8));
    let quoted = |n: &str| regex::escape(&format!("\"{}\"", snap_path(n)));
    let mut cases: Vec<Corrupt> = Vec::new();
    let n1 = "FFFFFFFF-1.snap".to_string();
    let re = format!(r"^could not read file {}: read 10 of \d+$", quoted(&n1));
    cases.push((n1, bytes[..10].to_vec(), re));
    let n2 = "FFFFFFFF-2.snap".to_string();
    let cut = bytes.len() - 4;
    let re = format!(r"^could not read file {}: read \d+ of \d+$", quoted(&n2));
    cases.push((n2, bytes[..cut].to_vec(), re));
    let n3 = "FFFFFFFF-3.snap".to_string();
    let mut flipped = bytes.to_vec();
    flipped[16] ^= 0x01; // builder.state: checksummed, not used to size the reads
    let re = format!(
        r"^checksum mismatch for snapbuild state file {}: is \d+, should be {stored_crc}$",
        quoted(&n3)
    );
    cases.push((n3, flipped, re));
    let n4 = "FFFFFFFF-4.snap".to_string();
    let mut bad_magic = bytes.to_vec();
    bad_magic[0..4].copy_from_slice(&0xDEADBEEFu32.to_le_bytes());
    let re = format!(
        "^{}$",
        regex::escape(&format!(
            "snapbuild state file \"{}\" has wrong magic number: {} instead of {magic}",
            snap_path(&n4),
            0xDEADBEEFu32
        ))
    );
    cases.push((n4, bad_magic, re));
    let n5 = "FFFFFFFF-5.snap".to_string();
    let mut bad_version = bytes.to_vec();
    bad_version[8..12].copy_from_slice(&99u32.to_le_bytes());
    let re = format!(
        "^{}$",
        regex::escape(&format!(
            "snapbuild state file \"{}\" has unsupported version: 99 instead of {version}",
            snap_path(&n5)
        ))
    );
    cases.push((n5, bad_version, re));
    // The fuzzer's structure-aware edits (fuzz/): the committed count one too high (the
    // array read comes up short before the checksum is looked at), and an empty file.
    let n8 = "FFFFFFFF-8.snap".to_string();
    let mut count_plus_one = bytes.to_vec();
    let at = 16 + 80; // SnapBuildOnDisk.builder.committed.xcnt (size_t)
    let xcnt = u64::from_le_bytes(count_plus_one[at..at + 8].try_into().unwrap());
    count_plus_one[at..at + 8].copy_from_slice(&(xcnt + 1).to_le_bytes());
    let re = format!(r"^could not read file {}: read \d+ of \d+$", quoted(&n8));
    cases.push((n8, count_plus_one, re));
    let n9 = "FFFFFFFF-9.snap".to_string();
    let re = format!(r"^could not read file {}: read 0 of 16$", quoted(&n9));
    cases.push((n9, Vec::new(), re));
    cases
}

#[test]
fn s6_corrupt_snap_files() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slot = "pgsnap_s6";
    let tab = "pgsnap_s6_tab";
    let _guard = SlotGuard::new(&env, slot);
    let (src, bytes) = real_snap_file(&env, &mut c, slot, tab);
    assert!(bytes.len() >= 64, "{src} is {} bytes", bytes.len());
    let cases = corrupt_copies(&bytes);
    let mut planted = PlantedFiles(Vec::new());
    for (n, b, _) in &cases {
        plant(&env, &mut planted, n, b);
    }
    let good_copy = "FFFFFFFF-6.snap";
    plant(&env, &mut planted, good_copy, &bytes);

    let mut fails = Failures::default();
    let ours_vs_server = check_corrupt_info_errors(&env, &mut c, &cases, &mut fails);
    let (listed, good) = check_listing(&mut c, &cases, &mut fails);
    let info = json_rows(
        &mut c,
        "SELECT checksum_ok, state FROM snapbuild_snapshot_info($1)",
        &[&good_copy],
    )
    .unwrap();
    assert_eq!(jb(&info[0], "checksum_ok"), Some(true));
    check_missing_file(&env, &mut c, &mut fails);
    let bad_names = check_bad_names(&env, &mut c, &mut fails);
    drop(planted);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_2"))
        .unwrap();
    println!(
        "pgsnap-counts: s6 PG{} source {src} ({} bytes) corrupt files {} errors identical to pg_logicalinspect {} listed files {} good files without error {} bad names {bad_names}",
        env.major,
        bytes.len(),
        cases.len(),
        ours_vs_server,
        listed,
        good
    );
    fails.finish("s6");
}

/// snapbuild_snapshot_info on each corrupt copy: XX001 with the server's text; on 18 the
/// same SQLSTATE and text as pg_logicalinspect's two functions. Returns how many equal
/// `pg_get_logical_snapshot_meta`'s.
fn check_corrupt_info_errors(
    env: &Env,
    c: &mut Client,
    cases: &[Corrupt],
    fails: &mut Failures,
) -> usize {
    let mut ours_vs_server = 0;
    for (n, _, re) in cases {
        let e = c
            .query("SELECT * FROM snapbuild_snapshot_info($1)", &[n])
            .err()
            .unwrap_or_else(|| panic!("snapbuild_snapshot_info('{n}') must fail"));
        let (code, msg) = db_err(&e);
        fails.check(code == "XX001", || {
            format!("{n}: SQLSTATE {code}, expected XX001: {msg}")
        });
        fails.check(regex::Regex::new(re).unwrap().is_match(&msg), || {
            format!("{n}: message {msg:?} does not match {re:?}")
        });
        if !env.has_logicalinspect() {
            continue;
        }
        for f in [
            "pg_get_logical_snapshot_meta",
            "pg_get_logical_snapshot_info",
        ] {
            let se = c
                .query(format!("SELECT * FROM {f}($1)").as_str(), &[n])
                .err()
                .unwrap_or_else(|| panic!("{f}('{n}') must fail"));
            let theirs = db_err(&se);
            let same = theirs == (code.clone(), msg.clone());
            fails.check(same, || {
                format!(
                    "{n}: pg_logicalinspect's {f} says {theirs:?}, ours {:?}",
                    (&code, &msg)
                )
            });
            if same && f == "pg_get_logical_snapshot_meta" {
                ours_vs_server += 1;
            }
        }
    }
    ours_vs_server
}

/// snapbuild_snapshot_files: every file the server lists (sizes too), errors only on the
/// corrupt ones. Returns the number of files listed and of those without error.
fn check_listing(c: &mut Client, cases: &[Corrupt], fails: &mut Failures) -> (usize, usize) {
    let server_before = server_snap_files(c);
    let listing = json_rows(
        c,
        "SELECT name, size, error, checksum_ok FROM snapbuild_snapshot_files()",
        &[],
    )
    .unwrap_or_else(|e| panic!("snapbuild_snapshot_files(): {}", err_text(&e)));
    let server_after = server_snap_files(c);
    let ours: BTreeMap<String, (i64, Option<String>)> = listing
        .iter()
        .map(|r| {
            (
                js(r, "name").unwrap(),
                (js(r, "size").unwrap().parse().unwrap(), js(r, "error")),
            )
        })
        .collect();
    // a timed checkpoint may remove old files meanwhile: ours must lie between the
    // server's listings taken before and after it
    for n in ours.keys() {
        assert!(
            server_before.contains_key(n),
            "snapbuild_snapshot_files() lists {n}, pg_ls_logicalsnapdir() did not"
        );
    }
    for (n, size) in &server_after {
        let o = ours.get(n).unwrap_or_else(|| {
            panic!("pg_ls_logicalsnapdir() lists {n}, snapbuild_snapshot_files() did not")
        });
        assert_eq!(o.0, *size, "{n}: size vs pg_ls_logicalsnapdir()");
    }
    for (n, _, re) in cases {
        let err = ours[n]
            .1
            .clone()
            .unwrap_or_else(|| panic!("{n} is corrupt: error must be set"));
        let re2 = regex::Regex::new(&re.replace(['^', '$'], "")).unwrap();
        fails.check(re2.is_match(&err), || {
            format!("{n}: listing error {err:?} vs {re:?}")
        });
    }
    let good: Vec<&String> = ours
        .keys()
        .filter(|n| !cases.iter().any(|(c, _, _)| c == *n))
        .collect();
    for n in &good {
        assert_eq!(
            ours[*n].1, None,
            "{n} was written by the server (or is its exact copy): no error expected"
        );
    }
    (ours.len(), good.len())
}

/// A missing file: 58P01 with the server's text (and pg_logicalinspect's on 18).
fn check_missing_file(env: &Env, c: &mut Client, fails: &mut Failures) {
    let missing = "FFFFFFFF-7.snap";
    let e = c
        .query("SELECT * FROM snapbuild_snapshot_info($1)", &[&missing])
        .expect_err("missing file must fail");
    let (code, msg) = db_err(&e);
    let want = format!(
        "could not open file \"{}\": No such file or directory",
        snap_path(missing)
    );
    fails.check(code == "58P01" && msg == want, || {
        format!(
            "missing file: ours {:?}, expected {:?}",
            (&code, &msg),
            ("58P01", &want)
        )
    });
    if env.has_logicalinspect() {
        let se = c
            .query(
                "SELECT * FROM pg_get_logical_snapshot_meta($1)",
                &[&missing],
            )
            .err()
            .unwrap();
        let theirs = db_err(&se);
        fails.check(theirs == (code.clone(), msg.clone()), || {
            format!(
                "missing file: pg_logicalinspect says {theirs:?}, ours {:?}",
                (&code, &msg)
            )
        });
    }
}

/// Bad names: 22023, with pg_logicalinspect's text on 18. Returns how many were tried.
fn check_bad_names(env: &Env, c: &mut Client, fails: &mut Failures) -> usize {
    let mut bad_names = 0;
    for bad in [
        "foo",
        "../0-1.snap",
        "0-1.snap.123.tmp",
        "0-1",
        "/tmp/0-1.snap",
        "G-1.snap",
        "",
    ] {
        let e = c
            .query("SELECT * FROM snapbuild_snapshot_info($1)", &[&bad])
            .err()
            .unwrap_or_else(|| panic!("bad name {bad:?} must fail"));
        let (code, msg) = db_err(&e);
        fails.check(code == "22023", || {
            format!("bad name {bad:?}: SQLSTATE {code}, expected 22023: {msg}")
        });
        if env.has_logicalinspect() {
            // pg_logicalinspect raises XX000 here; its text is the reference
            let se = c
                .query("SELECT * FROM pg_get_logical_snapshot_meta($1)", &[&bad])
                .err()
                .unwrap();
            let theirs = db_err(&se).1;
            fails.check(theirs == msg, || {
                format!("bad name {bad:?}: pg_logicalinspect says {theirs:?}, ours {msg:?}")
            });
        }
        bad_names += 1;
    }
    bad_names
}

// ---------------------------------------------------------------------------------------
// 7. every .snap file: snapbuild_snapshot_info vs pg_logicalinspect, column by column
// ---------------------------------------------------------------------------------------

const INFO_COLS: &[&str] = &[
    "state",
    "xmin",
    "xmax",
    "start_decoding_at",
    "two_phase_at",
    "initial_xmin_horizon",
    "building_full_snapshot",
    "in_slot_creation",
    "last_serialized_snapshot",
    "next_phase_at",
    "committed_count",
    "committed_xip",
    "catchange_count",
    "catchange_xip",
];
const META_COLS: &[&str] = &["magic", "checksum", "version"];

/// What s7 compared, and every difference.
#[derive(Default)]
struct InfoTally {
    files: usize,
    cols: usize,
    with_committed: usize,
    with_catchange: usize,
    diffs: Vec<String>,
}

#[test]
fn s7_snapshot_info_matches_server() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slot = "pgsnap_s7";
    let tab = "pgsnap_s7_tab";
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_k, {tab}_c"))
        .unwrap();
    c.batch_execute(&format!("CREATE TABLE {tab} (a int)"))
        .unwrap();
    create_slot(&env, slot);
    // files with both arrays in use: k holds an uncommitted catalog change (catchange),
    // a committed DDL after it stays above xmin (committed)
    let mut xk = OpenXact::begin(&env, "pgsnap-k");
    xk.exec(&format!("CREATE TABLE {tab}_k (a int)"));
    c.batch_execute(&format!("CREATE TABLE {tab}_c (a int)"))
        .unwrap();
    produce_snap_files(&env, &mut c, slot, tab);
    produce_snap_files(&env, &mut c, slot, tab);
    xk.commit();
    produce_snap_files(&env, &mut c, slot, tab);

    let mut t = InfoTally::default();
    for name in server_snap_files(&mut c).keys() {
        compare_snapshot_info(&env, &mut c, name, &mut t);
    }
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_k, {tab}_c"))
        .unwrap();
    assert!(t.files >= 1, "no .snap file to compare");
    assert!(
        t.diffs.is_empty(),
        "snapbuild_snapshot_info vs the server:\n{}",
        t.diffs.join("\n")
    );
    assert!(
        t.with_committed >= 1,
        "no file with committed xids: the arrays were not exercised"
    );
    if env.has_logicalinspect() {
        assert!(
            t.with_catchange >= 1,
            "no file with catalog-changing running xids: catchange not exercised"
        );
    }
    println!(
        "pgsnap-counts: s7 PG{} files compared {} columns agreeing {} files with committed xids {} with catchange xids {}",
        env.major, t.files, t.cols, t.with_committed, t.with_catchange
    );
}

/// One server-written file: snapbuild_snapshot_info (checksum ok) against
/// pg_logicalinspect on 18, else against the file's bytes. A file a checkpoint removed
/// meanwhile is skipped.
fn compare_snapshot_info(env: &Env, c: &mut Client, name: &String, t: &mut InfoTally) {
    let ours = match json_rows(c, "SELECT * FROM snapbuild_snapshot_info($1)", &[name]) {
        Ok(r) => r.into_iter().next().unwrap(),
        Err(e) if db_err(&e).0 == "58P01" => return, // removed by a checkpoint meanwhile
        Err(e) => panic!(
            "snapbuild_snapshot_info({name}) of a server-written file: {}",
            err_text(&e)
        ),
    };
    assert_eq!(
        jb(&ours, "checksum_ok"),
        Some(true),
        "{name}: {}",
        show(&ours)
    );
    let compared = if env.has_logicalinspect() {
        compare_with_logicalinspect(c, name, &ours, t)
    } else {
        compare_with_file_bytes(env, name, &ours, t)
    };
    if compared {
        t.files += 1;
    }
}

/// All 17 columns IS NOT DISTINCT FROM pg_get_logical_snapshot_info + _meta.
fn compare_with_logicalinspect(
    c: &mut Client,
    name: &String,
    ours: &Row,
    t: &mut InfoTally,
) -> bool {
    let sql = format!(
        "SELECT {} FROM pg_get_logical_snapshot_info($1) i, pg_get_logical_snapshot_meta($1) m",
        INFO_COLS
            .iter()
            .map(|c| format!("i.{c}"))
            .chain(META_COLS.iter().map(|c| format!("m.{c}")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let theirs = match json_rows(c, &sql, &[name]) {
        Ok(r) => r.into_iter().next().unwrap(),
        Err(e) if db_err(&e).0 == "58P01" => return false,
        Err(e) => panic!("pg_logicalinspect({name}): {}", err_text(&e)),
    };
    // also in SQL, IS NOT DISTINCT FROM on each column
    let sqlcmp = format!(
        "SELECT {} FROM snapbuild_snapshot_info($1) o, pg_get_logical_snapshot_info($1) i, pg_get_logical_snapshot_meta($1) m",
        INFO_COLS
            .iter()
            .map(|c| format!("(o.{c} IS NOT DISTINCT FROM i.{c}) AS {c}"))
            .chain(META_COLS.iter().map(|c| format!("(o.{c} IS NOT DISTINCT FROM m.{c}) AS {c}")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let same = json_rows(c, &sqlcmp, &[name])
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    for col in INFO_COLS.iter().chain(META_COLS) {
        if jb(&same, col) == Some(true) {
            t.cols += 1;
        } else {
            t.diffs.push(format!(
                "{name}.{col}: ours {:?} server {:?}",
                ours.get(*col),
                theirs.get(*col)
            ));
        }
    }
    if js(&theirs, "committed_count").is_some_and(|n| n != "0") {
        t.with_committed += 1;
    }
    if js(&theirs, "catchange_count").is_some_and(|n| n != "0") {
        t.with_catchange += 1;
    }
    true
}

/// Before 18 there is no pg_logicalinspect. Header fields must be the file's own bytes;
/// the size must be the major's layout: 16-byte header plus the serialized builder (112
/// bytes in version 4, up to 15; 128 from 16), plus 4 per committed and catchange xid.
fn compare_with_file_bytes(env: &Env, name: &String, ours: &Row, t: &mut InfoTally) -> bool {
    let bytes = match std::fs::read(env.snapshots_dir().join(name)) {
        Ok(b) => b,
        Err(_) => return false,
    };
    let u32le = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()) as u64;
    for (col, want) in [
        ("magic", u32le(0)),
        ("checksum", u32le(4)),
        ("version", u32le(8)),
    ] {
        let got: u64 = js(ours, col).unwrap().parse::<i64>().unwrap() as u32 as u64;
        if got == want {
            t.cols += 1;
        } else {
            t.diffs
                .push(format!("{name}.{col}: ours {got} file bytes {want}"));
        }
    }
    let cc: usize = js(ours, "committed_count").unwrap().parse().unwrap();
    let ch: usize = js(ours, "catchange_count")
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let fixed = if env.major <= 15 { 128 } else { 144 };
    if bytes.len() == fixed + 4 * (cc + ch) {
        t.cols += 1;
    } else {
        t.diffs.push(format!(
            "{name}: {} bytes but committed_count {cc}, catchange_count {ch}",
            bytes.len()
        ));
    }
    if cc > 0 {
        t.with_committed += 1;
    }
    true
}

// ---------------------------------------------------------------------------------------
// 8. a creation waiting in BUILDING passes records another slot already serialized
// ---------------------------------------------------------------------------------------

/// While a slot is being created and waits for an open transaction (BUILDING), a second,
/// consistent slot decodes past the RUNNING_XACTS records logged meanwhile, so `.snap`
/// files exist at them before the creating builder reads them. The server (14.22, 15.19,
/// 16.15 and 17+ alike) must not restore them during creation: it becomes consistent later,
/// by branch a, at the LSN the creation returns. The replay of the creation
/// (snapbuild_trace_range with in_slot_creation) must take no branch b and reach
/// consistency on the same record.
#[test]
fn s8_creation_does_not_restore_files_written_meanwhile() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (sa, sb) = ("pgsnap_s8a", "pgsnap_s8b");
    let _ga = SlotGuard::new(&env, sa);
    let _gb = SlotGuard::new(&env, sb);
    c.batch_execute("DROP TABLE IF EXISTS pgsnap_s8t; CREATE TABLE pgsnap_s8t(a int)")
        .unwrap();
    create_slot(&env, sa);
    let xa = OpenXact::begin(&env, "pgsnap-s8-x");
    let off = log_offset(&env);
    let cr = Creation::start(&env, sb, "test_decoding");
    let pid = cr.pid;
    wait_for("the creating backend to wait for x (c-1)", WAIT, || {
        waits_for_xid(&mut c, pid, xa.xid)
    });
    let written = files_written_past_the_creation_start(&env, &mut c, sa, sb);
    xa.commit();
    let ret = cr.wait(CREATE_TIMEOUT);
    let msgs = builder_messages(&log_entries_since(&env, off), pid);
    assert!(
        msgs.iter().all(|(_, e)| e.detail.as_deref()
            != Some("Logical decoding will begin using saved snapshot.")),
        "the creating backend restored a snapshot:\n{}",
        dump_log(&msgs)
    );
    let ss = server_slot(&mut c, sb);
    let consistent_end = check_replayed_creation_restores_nothing(&mut c, &ss, ret);
    // Outside creation, the same files are restorable: a replay with in_slot_creation
    // false takes b on the first of them it meets.
    let restart_rows = json_rows(
        &mut c,
        "SELECT branch FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, false) WHERE branch = 'b'",
        &[&fmt_lsn(ss.restart_lsn), &ss.catalog_xmin.unwrap_or(0).to_string()],
    )
    .unwrap();
    c.batch_execute("DROP TABLE pgsnap_s8t").unwrap();
    println!(
        "pgsnap-counts: s8 PG{} files written during the creation {} server restored none; replay consistent at {} = returned {}; \
         outside creation the replay restores {}",
        env.major,
        written.len(),
        fmt_lsn(consistent_end.unwrap_or(0)),
        fmt_lsn(ret),
        restart_rows.len()
    );
}

/// Two RUNNING_XACTS while x runs; the consistent slot `sa` decodes past both and writes
/// their files. The files past the start of `sb`'s creation (at least one).
fn files_written_past_the_creation_start(
    env: &Env,
    c: &mut Client,
    sa: &str,
    sb: &str,
) -> Vec<String> {
    for i in 0..2 {
        env.log_standby_snapshot_flushed(c, "pgsnap_s8t", &i.to_string());
        consume_changes(c, sa);
    }
    let files_before = server_snap_files(c);
    let restart_b = server_slot(c, sb).restart_lsn;
    let written: Vec<String> = files_before
        .keys()
        .filter(|name| snap_lsn(name).is_some_and(|l| l > restart_b))
        .cloned()
        .collect();
    assert!(
        !written.is_empty(),
        "no .snap file was written past the creation's start {}",
        fmt_lsn(restart_b)
    );
    written
}

/// The replayed creation (in_slot_creation, the slot's catalog_xmin) takes no branch b
/// and becomes consistent on the record ending at `ret`; that row's end.
fn check_replayed_creation_restores_nothing(
    c: &mut Client,
    ss: &ServerSlot,
    ret: u64,
) -> Option<u64> {
    let rows = json_rows(
        c,
        "SELECT lsn::text AS lsn, end_lsn::text AS end_lsn, branch, state_before, state
           FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, true)
          WHERE record = 'RUNNING_XACTS'",
        &[
            &fmt_lsn(ss.restart_lsn),
            &ss.catalog_xmin.unwrap_or(0).to_string(),
        ],
    )
    .unwrap();
    let consistent = rows
        .iter()
        .find(|r| {
            js(r, "state_before").as_deref() != Some("consistent")
                && js(r, "state").as_deref() == Some("consistent")
        })
        .unwrap_or_else(|| panic!("the replayed creation never became consistent: {rows:?}"));
    assert_ne!(js(consistent, "branch").as_deref(), Some("b"), "{rows:?}");
    assert_eq!(
        jlsn(consistent, "end_lsn"),
        Some(ret),
        "replayed creation vs the LSN the server returned: {rows:?}"
    );
    jlsn(consistent, "end_lsn")
}

// ---------------------------------------------------------------------------------------
// 9. a corrupt .snap file on the replay's restore path
// ---------------------------------------------------------------------------------------

/// A corrupt `.snap` file (a real one with one bit flipped) named for a RUNNING_XACTS
/// record that runs a transaction, where no decoder wrote one: a replay starting there
/// tries it on branch b (SnapBuildRestore) and ends with the server's `data_corrupted`
/// text in an ERROR row; `snapbuild_historic_snapshot_from_file` raises XX001 on it; the
/// backend goes on, and a session decoding its own slot meanwhile is not disturbed.
#[test]
fn s9_corrupt_snap_file_on_the_restore_path() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (slot, tab) = ("pgsnap_s9", "pgsnap_s9_tab");
    let _guard = SlotGuard::new(&env, slot);
    let (src, bytes) = real_snap_file(&env, &mut c, slot, tab);
    consume_changes(&mut c, slot);
    // k runs across a RUNNING_XACTS record nobody decodes: no file for it.
    let mut k = OpenXact::begin(&env, "pgsnap-s9-k");
    k.exec(&format!("INSERT INTO {tab} VALUES (9)"));
    let before = flush_lsn(&mut c);
    env.log_standby_snapshot_flushed(&mut c, tab, "90");
    let rx = wal_running_xacts(&mut c, before, u64::MAX)
        .into_iter()
        .find(|w| w.xacts.contains(&k.xid))
        .expect("a RUNNING_XACTS record running k");
    let name = snap_name(rx.start);
    assert!(
        !server_snap_files(&mut c).contains_key(&name),
        "{name} exists already"
    );
    let mut corrupt = bytes.clone();
    corrupt[16] ^= 0x01; // builder.state: checksummed
    let stored = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    let mut planted = PlantedFiles(Vec::new());
    plant(&env, &mut planted, &name, &corrupt);
    let k_xid = k.xid;
    k.commit();

    // A bystander decodes its own slot while the replays below fail.
    let mut bystander = env.connect("pgsnap-s9-bystander");
    let want = regex::Regex::new(&format!(
        "^checksum mismatch for snapbuild state file {}: is \\d+, should be {stored}$",
        regex::escape(&format!("\"{}\"", snap_path(&name)))
    ))
    .unwrap();
    let rows = trace_rows(
        json_rows(
            &mut c,
            "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, in_slot_creation => false)",
            &[&fmt_lsn(rx.start)],
        )
        .unwrap_or_else(|e| panic!("snapbuild_trace_range: {}", err_text(&e))),
    );
    let last = rows.last().expect("rows");
    assert_eq!(
        last.lsn,
        Some(rx.start),
        "the replay ends at the corrupt file's record:\n{}",
        dump(&rows)
    );
    assert_eq!(last.level.as_deref(), Some("ERROR"), "{}", dump(&rows));
    let msg = last.message.clone().unwrap_or_default();
    assert!(want.is_match(&msg), "ERROR row {msg:?} vs {want}");
    let e = c
        .query(
            "SELECT * FROM snapbuild_historic_snapshot_from_file($1)",
            &[&name],
        )
        .expect_err("a corrupt file must fail");
    let (code, emsg) = db_err(&e);
    assert_eq!(code, "XX001", "{emsg}");
    assert!(want.is_match(&emsg), "{emsg:?} vs {want}");
    let decoded: i64 = bystander
        .query_one(
            "SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL)",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("the bystander's decoding failed: {}", err_text(&e)))
        .get(0);
    let one: i32 = c.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1, "the backend goes on after the ERRORs");
    drop(planted);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_2"))
        .unwrap();
    println!(
        "pgsnap-counts: s9 PG{} corrupt copy of {src} planted as {name} (k {}): trace ERROR row {msg:?}; bystander peeked {decoded} changes",
        env.major, k_xid
    );
}
