//! Failover slots synchronized to a hot standby with `pg_sync_replication_slots()`
//! (PostgreSQL 17+), each sync's verdict against the replay's:
//!
//! - st5: a copy the standby persists (it logs `… is sync-ready now`) has a replay from the
//!   primary slot's restart_lsn consistent on a record before its confirmed_flush; a copy
//!   refused for want of a consistent snapshot has not. A sync whose decoder waits for a
//!   transaction of the primary (the slot's restart_lsn runs it) still waits 1 s after the
//!   standby logged it and returns once it commits.
//! - st9: a synced slot after the standby's promotion: an ordinary slot there (no
//!   synchronization rows in the diagnosis), whose trace goes on across the timeline switch
//!   from its confirmed_flush, and test_decoding there emits what the verdicts say.
//!
//! The standby is made from the test cluster with `pg_basebackup -R` ([`Env::standby`]).
//! Before 17 (no failover slots, no slot sync) the tests print `SKIPPED:`.

use pg_snapbuild_tests::*;
// The standby tests wait longer than the others (see STANDBY_WAIT).
use pg_snapbuild_tests::STANDBY_WAIT as WAIT;
use postgres::Client;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// st5: failover slots synchronized to the standby (17+)
// ---------------------------------------------------------------------------------------

/// The standby's copy of a synced slot: (synced, temporary, restart_lsn, confirmed_flush).
fn synced_slot(sc: &mut Client, slot: &str) -> Option<(bool, bool, u64, u64)> {
    sc.query_opt(
        "SELECT synced, temporary, restart_lsn::text, confirmed_flush_lsn::text \
         FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .unwrap()
    .map(|r| {
        (
            r.get(0),
            r.get(1),
            parse_lsn(&r.get::<_, String>(2)),
            parse_lsn(&r.get::<_, String>(3)),
        )
    })
}

/// How one synchronization ended on the standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// The synced copy became persistent (sync-ready) in this sync.
    Persisted,
    /// The copy was persistent before: a sync then checks no snapshot.
    AlreadyPersistent,
    /// Not persisted: the standby's builder found no consistent snapshot.
    NotConsistent,
    /// Not persisted: the remote slot's restart_lsn or catalog_xmin is behind what the
    /// standby can reserve (slotsync.c's "remote slot precedes"; not the builder's matter).
    RemoteBehind,
}

/// One `pg_sync_replication_slots()` on the standby (after it replayed the primary's WAL),
/// the server's verdict beside the replay. The server's fast-forward decoder
/// (LogicalSlotAdvanceAndCheckSnapState) reads from restart_lsn while the last record ended
/// before the remote confirmed_flush and persists the copy iff its builder is then
/// CONSISTENT; a copy not persisted is a temporary slot the function drops again, and the
/// standby's LOG line says why. So the replay from the same restart_lsn (the persisted
/// copy's `snapbuild_trace`, else `snapbuild_trace_range` from the primary slot's
/// restart_lsn with start_decoding_at = its confirmed_flush) must have a consistent row on a
/// record starting before confirmed_flush exactly when the server persisted the copy.
fn sync_and_compare(
    sb: &Standby,
    pc: &mut Client,
    sc: &mut Client,
    slot: &str,
    stats: &mut TraceStats,
) -> Sync {
    sync_and_compare_blocked(sb, pc, sc, slot, stats, None)
}

/// [`sync_and_compare`], with `blocker` a primary transaction the standby's builder waits
/// for at c-1 (SnapBuildWaitSnapshot runs in the sync's decoder too): the sync runs in its
/// own session, must still wait 1 s after the standby logged the wait, and returns once the
/// blocker commits on the primary.
fn sync_and_compare_blocked(
    sb: &Standby,
    pc: &mut Client,
    sc: &mut Client,
    slot: &str,
    stats: &mut TraceStats,
    blocker: Option<OpenXact>,
) -> Sync {
    sb.wait_replayed(pc);
    let remote = server_slot(pc, slot);
    let off = log_offset(&sb.env);
    match blocker {
        None => sc
            .batch_execute("SELECT pg_sync_replication_slots()")
            .unwrap_or_else(|e| panic!("pg_sync_replication_slots(): {}", err_text(&e))),
        Some(x) => {
            let mut bg = sb.connect("pgsnap-sync");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let r = bg
                    .batch_execute("SELECT pg_sync_replication_slots()")
                    .map_err(|e| err_text(&e));
                let _ = tx.send(r);
            });
            // The sync returns at once, without building a snapshot, when the standby
            // reserves a newer catalog_xmin than the remote slot's (on a standby that is
            // the next xid its replay has seen, which other writers on the primary move
            // on): then there is nothing to wait for, and the verdict is judged below.
            let mut early = None;
            wait_for(
                "the sync's builder to wait for the primary's transaction",
                WAIT,
                || {
                    if let Ok(r) = rx.try_recv() {
                        early = Some(r);
                        return true;
                    }
                    log_entries_since(&sb.env, off).iter().any(|e| {
                        e.message
                            .starts_with("logical decoding found initial starting point")
                    })
                },
            );
            match early {
                Some(r) => {
                    r.unwrap_or_else(|e| panic!("pg_sync_replication_slots(): {e}"));
                    x.commit();
                }
                None => {
                    std::thread::sleep(Duration::from_secs(1));
                    assert!(rx.try_recv().is_err(), "the sync waits for xid {}", x.xid);
                    x.commit();
                    rx.recv_timeout(WAIT)
                        .expect("the sync returns once the blocker committed")
                        .unwrap_or_else(|e| panic!("pg_sync_replication_slots(): {e}"));
                }
            }
        }
    }
    let copy = synced_slot(sc, slot);
    let log: Vec<LogEntry> = log_entries_since(&sb.env, off)
        .into_iter()
        .filter(|e| e.message.contains(&format!("\"{slot}\"")))
        .collect();
    let said = |m: &str| log.iter().any(|e| e.message.contains(m));
    let verdict = match copy {
        Some((synced, false, _, _)) => {
            assert!(synced, "pg_replication_slots.synced on the standby");
            if !said("is sync-ready now") {
                // Persisted by an earlier sync: this one checked no snapshot.
                return Sync::AlreadyPersistent;
            }
            Sync::Persisted
        }
        _ => {
            assert!(
                said("could not synchronize replication slot"),
                "no copy and no reason in the standby's log: {log:?}"
            );
            if log.iter().any(|e| {
                e.detail
                    .as_deref()
                    .is_some_and(|d| d.contains("catalog xmin"))
            }) {
                Sync::RemoteBehind
            } else {
                Sync::NotConsistent
            }
        }
    };
    let (restart, confirmed, rows) = match copy {
        Some((_, false, restart, confirmed)) => (restart, confirmed, trace_ok(sc, slot)),
        _ => {
            let confirmed = remote.confirmed_flush.unwrap();
            let rows = trace_rows(
                json_rows(
                    sc,
                    "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, NULL, \
                     start_decoding_at => $2::text::pg_lsn)",
                    &[&fmt_lsn(remote.restart_lsn), &fmt_lsn(confirmed)],
                )
                .unwrap_or_else(|e| panic!("snapbuild_trace_range: {}", err_text(&e))),
            );
            (remote.restart_lsn, confirmed, rows)
        }
    };
    let replayed = replay_lsn(sc);
    *stats += check_trace_against_wal(sc, restart, replayed, &rows);
    if verdict == Sync::RemoteBehind {
        return verdict;
    }
    let ours = consistent_row(&rows).is_some_and(|r| r.lsn.is_some_and(|l| l < confirmed));
    assert_eq!(
        ours,
        verdict == Sync::Persisted,
        "the server: {verdict:?} (log: {log:?}); the replay from restart_lsn {} is {}consistent before confirmed_flush {}:\n{}",
        fmt_lsn(restart),
        if ours { "" } else { "not " },
        fmt_lsn(confirmed),
        dump(&rows)
    );
    verdict
}

#[test]
fn st5_failover_slot_synced_to_the_standby() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_synced("st5") else {
        return;
    };
    let (sa, sbn) = ("pgsnap_st5a", "pgsnap_st5b");
    let _ga = SlotGuard::new(&env, sa);
    let _gb = SlotGuard::new(&env, sbn);
    // Copies synced by an interrupted earlier run go now (their primary slots are gone).
    sb.wait_replayed(&mut pc);
    let _ = sc.batch_execute("SELECT pg_sync_replication_slots()");
    pc.batch_execute("DROP TABLE IF EXISTS pgsnap_st5_t; CREATE TABLE pgsnap_st5_t (id int)")
        .unwrap();
    let create = |pc: &mut Client, slot: &str| {
        pc.execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding', false, false, true)",
            &[&slot],
        )
        .unwrap();
    };
    let mut stats = TraceStats::default();
    let mut verdicts = Vec::new();
    // A: synced right after its creation (the standby may reserve a newer catalog_xmin
    // than the slot's: the remote is behind, nothing to compare), then after consumption
    // brought its catalog_xmin to the next xid: sync-ready
    create(&mut pc, sa);
    verdicts.push(sync_and_compare(&sb, &mut pc, &mut sc, sa, &mut stats));
    pc.batch_execute("INSERT INTO pgsnap_st5_t VALUES (0)")
        .unwrap();
    settle(&env, &mut pc, sa);
    verdicts.push(sync_and_compare(&sb, &mut pc, &mut sc, sa, &mut stats));
    // B: k stays open while B is consumed until its restart_lsn is a RUNNING_XACTS that
    // runs k (the primary's decoder restarts there from its .snap file; the standby has
    // none and its builder must wait for k): not sync-ready. Then k ends: sync-ready.
    create(&mut pc, sbn);
    let (xk, moved, runs_k) = restart_while_k_runs(&env, &mut pc, sbn, "pgsnap-st5-k");
    assert!(moved, "B's restart_lsn moved while k runs");
    let k = xk.xid;
    verdicts.push(sync_and_compare_blocked(
        &sb,
        &mut pc,
        &mut sc,
        sbn,
        &mut stats,
        Some(xk),
    ));
    settle(&env, &mut pc, sbn);
    verdicts.push(sync_and_compare(&sb, &mut pc, &mut sc, sbn, &mut stats));
    println!(
        "pgsnap-counts: st5 PG{} syncs {verdicts:?} (B's restart_lsn runs k={k}: {runs_k}) {stats}",
        env.major
    );
    // The builder's "not consistent" verdict is met unless the standby's next xid had
    // already passed B's catalog_xmin (the remote is behind: no snapshot is built).
    assert!(
        verdicts.contains(&Sync::Persisted)
            && (verdicts.contains(&Sync::NotConsistent) || verdicts[2] == Sync::RemoteBehind),
        "both of the builder's verdicts met: {verdicts:?}"
    );
    // The synced copies go with the primary's slots at the next sync.
    drop(_ga);
    drop(_gb);
    sb.wait_replayed(&mut pc);
    let _ = sc.batch_execute("SELECT pg_sync_replication_slots()");
    pc.batch_execute("DROP TABLE pgsnap_st5_t").unwrap();
}

// ---------------------------------------------------------------------------------------
// st9: a synced failover slot after the standby's promotion: the trace goes on on the new
// timeline and test_decoding there emits what the verdicts say
// ---------------------------------------------------------------------------------------

#[test]
fn st9_synced_slot_after_promotion() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_synced("st9") else {
        return;
    };
    let slot = "pgsnap_st9";
    let _g = SlotGuard::new(&env, slot);
    pc.batch_execute("DROP TABLE IF EXISTS pgsnap_st9_t; CREATE TABLE pgsnap_st9_t (id int)")
        .unwrap();
    sb.wait_replayed(&mut pc);
    let _ = sc.batch_execute("SELECT pg_sync_replication_slots()");
    pc.execute(
        "SELECT pg_create_logical_replication_slot($1, 'test_decoding', false, false, true)",
        &[&slot],
    )
    .unwrap();
    let mut stats = TraceStats::default();
    // Synced and persisted (the primary's consumer settles its catalog_xmin first).
    let mut persisted = false;
    for _ in 0..5 {
        pc.batch_execute("INSERT INTO pgsnap_st9_t VALUES (0)")
            .unwrap();
        settle(&env, &mut pc, slot);
        let v = sync_and_compare(&sb, &mut pc, &mut sc, slot, &mut stats);
        if matches!(v, Sync::Persisted | Sync::AlreadyPersistent) {
            persisted = true;
            break;
        }
    }
    assert!(persisted, "the copy of {slot} became sync-ready");
    // Changes the primary's consumer has not confirmed: x1 with DDL, x2; replayed, the
    // copy synced once more (its confirmed_flush is the primary slot's, before x1).
    let xid = |c: &mut Client, sql: &str| -> u64 {
        c.query_one(sql, &[])
            .unwrap()
            .get::<_, String>(0)
            .parse()
            .unwrap()
    };
    let x1 = xid(
        &mut pc,
        "WITH i AS (INSERT INTO pgsnap_st9_t VALUES (1) RETURNING 1) SELECT pg_current_xact_id()::xid::text FROM i",
    );
    pc.batch_execute("BEGIN; ALTER TABLE pgsnap_st9_t ADD COLUMN b2 int; INSERT INTO pgsnap_st9_t VALUES (2, 2); COMMIT")
        .unwrap();
    env.log_standby_snapshot(&mut pc);
    sb.wait_replayed(&mut pc);
    sc.batch_execute("SELECT pg_sync_replication_slots()")
        .unwrap();
    let copy = server_slot(&mut sc, slot);
    let remote = server_slot(&mut pc, slot);
    assert_eq!(
        copy.confirmed_flush, remote.confirmed_flush,
        "synced confirmed_flush"
    );
    let tli_before: i32 = sc
        .query_one("SELECT received_tli FROM pg_stat_wal_receiver", &[])
        .unwrap()
        .get(0);
    drop(pc);
    sb.promote().unwrap_or_else(|e| panic!("{e}"));
    wait_for("the promoted server to leave recovery", WAIT, || {
        !sc.query_one("SELECT pg_is_in_recovery()", &[])
            .unwrap()
            .get::<_, bool>(0)
    });
    let x3 = xid(
        &mut sc,
        "WITH i AS (INSERT INTO pgsnap_st9_t VALUES (3, 3) RETURNING 1) SELECT pg_current_xact_id()::xid::text FROM i",
    );
    sc.batch_execute("CHECKPOINT").unwrap();
    let tli_after: i32 = sc
        .query_one("SELECT timeline_id FROM pg_control_checkpoint()", &[])
        .unwrap()
        .get(0);
    assert!(tli_after > tli_before, "{tli_before} -> {tli_after}");
    let synced_after: bool = sc
        .query_one(
            "SELECT synced FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    // After the promotion the copy is an ordinary slot: no synchronization rows, and
    // (no consumer uses it) the diagnosis says so.
    let d = diag_rows(&mut sc, slot);
    assert!(
        !d.iter()
            .any(|r| r.kind == "synchronized" || r.kind == "sync pending"),
        "{d:#?}"
    );
    assert!(d.iter().any(|r| r.kind == "no consumer"), "{d:#?}");
    assert_no_zero_lsn(&d);
    let upto = flush_lsn(&mut sc);
    let ss = server_slot(&mut sc, slot);
    let rows = trace_ok(&mut sc, slot);
    stats += check_trace_against_wal(&mut sc, ss.restart_lsn, upto, &rows);
    assert_eq!(rows[0].start_decoding_at, ss.confirmed_flush);
    let replay = emitted_by_replay(&rows, upto);
    let emitted = emitted_by_test_decoding(&mut sc, slot, upto);
    assert_eq!(
        replay,
        emitted,
        "test_decoding from the promoted synced slot vs the replay's verdicts:\n{}",
        dump(&rows)
    );
    assert!(
        emitted.contains(&("commit".into(), x1)) && emitted.contains(&("commit".into(), x3)),
        "x1={x1} (before) and x3={x3} (after the promotion) decoded: {emitted:?}"
    );
    let changes = slot_changes(&mut sc, slot, true);
    println!(
        "pgsnap-counts: st9 PG{} timeline {tli_before} -> {tli_after} synced after promotion {synced_after} trace rows {} running_xacts rows matched to WAL {} agrees t/f/null {}/{}/{} pairs emitted {} ({emitted:?}) changes left {}",
        env.major,
        stats.rows,
        stats.wal_records_matched,
        stats.agrees_true,
        stats.agrees_false,
        stats.agrees_null,
        emitted.len(),
        changes.len()
    );
    sc.batch_execute(&format!("SELECT pg_drop_replication_slot('{slot}')"))
        .unwrap();
    env.connect("pgsnap-st9")
        .batch_execute("DROP TABLE pgsnap_st9_t")
        .unwrap();
}
