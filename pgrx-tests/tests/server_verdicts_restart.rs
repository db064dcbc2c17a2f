//! pg_snapbuild's verdicts on restarts from serialized snapshots against the real
//! server's, with several real sessions:
//!
//! - s5: a slot consumed until its restart_lsn is a serialized RUNNING_XACTS that runs an
//!   open transaction: the trace takes branch b there, as the server restarting there logs
//!   it, and every trace row at an LSN with a `.snap` file has the file's state, xmin and
//!   xmax; commits after consistency are emitted by test_decoding.
//! - s8: a creation waiting in BUILDING passes records another slot serialized meanwhile:
//!   the server restores none of them, and neither does the replayed creation, which
//!   becomes consistent on the record ending at the LSN the creation returned.
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

/// PGSNAP_VERBOSE=1 prints whole traces.
fn verbose(what: &str, rows: &[TraceRow]) {
    if std::env::var("PGSNAP_VERBOSE").as_deref() == Ok("1") {
        println!("{what}:\n{}", dump(rows));
    }
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
    let slot = "pgsnap_s5";
    let tab = "pgsnap_s5_tab";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
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
    let (sa, sb) = ("pgsnap_s8a", "pgsnap_s8b");
    let Some((_g, env, mut c, _ga)) = start_with_slot(sa) else {
        return;
    };
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
