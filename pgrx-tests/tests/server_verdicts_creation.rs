//! pg_snapbuild's verdicts on slot creations against the real server's, with several real
//! sessions:
//!
//! - s1: no transaction running: the server takes branch a, and so does the trace, at the
//!   LSN the creation returned; `snapbuild_slots()` is `pg_replication_slots`.
//! - s2, s3: transactions ending in turn while the creation waits: c-1, c-2, then a, or c-3
//!   when a transaction began after FULL; the trace during the creation matches the LOG
//!   lines so far, and the whole trace matches them line for line.
//! - s4: a transaction open across two RUNNING_XACTS: the second is a fall-through.
//!
//! Every assertion compares our SQL functions with something the server produced: the
//! LSN `pg_create_logical_replication_slot` returned (= confirmed_flush), the LOG/DETAIL
//! lines the server wrote to `PGSNAP_LOG`, the RUNNING_XACTS records in its WAL
//! (`pg_walinspect`), its slot catalog and the xids it assigned.
//!
//! Needs the environment of `scripts/cluster.sh env MAJOR` (see pgrx-tests/README.md).
//! Scenarios run one at a time (slot creation waits for every running transaction of the
//! cluster); each uses its own slot and drops it, even on failure.
//!
//! Counts are printed on lines starting with `pgsnap-counts:` (run with --nocapture).

use pg_snapbuild_tests::*;
use postgres::Client;

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
    let slot = "pgsnap_s1";
    let Some((_g, env, mut c, guard)) = start_with_slot(slot) else {
        return;
    };
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
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
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
    let slot = "pgsnap_s4";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
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
