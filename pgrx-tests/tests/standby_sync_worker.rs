//! The standby's slot sync worker (`sync_replication_slots = on`, PostgreSQL 17+): its
//! copies of failover slots, temporary or persistent, against their traces, the diagnosis
//! and the health view there, and the standby's LOG lines:
//!
//! - st8: a copy kept temporary because the remote slot is behind the standby's
//!   reservation (the REPLAY START and the `sync pending` row give the positions the
//!   standby's `could not synchronize` DETAIL names), then persisted once the primary's
//!   consumer settles (the replay is consistent before confirmed_flush, the standby logged
//!   `is sync-ready now`); a copy whose restart_lsn runs a transaction of the primary is
//!   kept temporary without a consistent snapshot, then persisted.
//! - st13: a copy kept temporary while a transaction of the primary runs: the diagnosis
//!   gives the positions the worker logs, names the transaction (its remedy's query, run on
//!   the primary, finds the session), never says healthy and shows no 0/0; following the
//!   remedy makes the copy persistent.
//!
//! The standby is made from the test cluster with `pg_basebackup -R` ([`Env::standby`]).
//! Before 17 the tests print `SKIPPED:`.

use pg_snapbuild_tests::*;
// The standby tests wait longer than the others (see STANDBY_WAIT).
use pg_snapbuild_tests::STANDBY_WAIT as WAIT;
use postgres::Client;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// st8: the slot sync worker (17+): synced copies, temporary or persistent, against the
// trace of the copy and the standby's LOG lines
// ---------------------------------------------------------------------------------------

/// `ALTER_REPLICATION_SLOT slot (FAILOVER true)` on the primary, through psql's
/// replication connection (the SQL functions cannot change it).
fn set_failover(env: &Env, slot: &str) {
    let out = std::process::Command::new("psql")
        .arg(format!(
            "host={} port={} user={} dbname={} replication=database",
            env.host, env.port, env.user, env.dbname
        ))
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-c"])
        .arg(format!("ALTER_REPLICATION_SLOT {slot} (FAILOVER true)"))
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "ALTER_REPLICATION_SLOT: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Turns the standby's slot sync worker off again (ALTER SYSTEM RESET, reload, wait
/// until it is gone), also on panic.
struct SyncWorkerOff<'a>(&'a Standby);

impl Drop for SyncWorkerOff<'_> {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.try_connect() {
            let _ = c.batch_execute("ALTER SYSTEM RESET sync_replication_slots");
            let _ = c.batch_execute("SELECT pg_reload_conf()");
            for _ in 0..100 {
                let n: i64 = c
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'slotsync worker'",
                        &[],
                    )
                    .map(|r| r.get(0))
                    .unwrap_or(0);
                if n == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Turns the standby's slot sync worker on (ALTER SYSTEM, reload) and waits until it runs;
/// off again when the returned guard is dropped.
fn sync_worker_on<'a>(sb: &'a Standby, sc: &mut Client) -> SyncWorkerOff<'a> {
    sc.batch_execute("ALTER SYSTEM SET sync_replication_slots = on")
        .unwrap();
    sc.batch_execute("SELECT pg_reload_conf()").unwrap();
    let off = SyncWorkerOff(sb);
    wait_for("the slot sync worker to start", WAIT, || {
        sc.query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'slotsync worker'",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0)
            == 1
    });
    off
}

/// The standby's copy of a synced slot with the process using it:
/// (temporary, restart_lsn, confirmed_flush or 0, catalog_xmin, active_pid).
fn synced_copy(sc: &mut Client, slot: &str) -> Option<(bool, u64, u64, u64, Option<i32>)> {
    sc.query_opt(
        "SELECT temporary, restart_lsn::text, coalesce(confirmed_flush_lsn, '0/0')::text, \
         catalog_xmin::text, active_pid FROM pg_replication_slots WHERE slot_name = $1 AND synced",
        &[&slot],
    )
    .unwrap()
    .map(|r| {
        (
            r.get(0),
            parse_lsn(&r.get::<_, String>(1)),
            parse_lsn(&r.get::<_, String>(2)),
            r.get::<_, Option<String>>(3)
                .map_or(0, |x| x.parse().unwrap()),
            r.get(4),
        )
    })
}

/// What one look at a synced copy found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Temporary, never advanced: the remote slot is behind the standby's reservation.
    RemoteBehind,
    /// Temporary, advanced to the remote confirmed_flush without a consistent snapshot.
    NotConsistent,
    Persistent,
}

/// Looks at the standby's copy of `slot` (unchanged around the trace) and checks the
/// trace against the server:
/// - persistent: the replay from restart_lsn is consistent on a record before
///   confirmed_flush, and the standby logged `… "slot" is sync-ready now`;
/// - temporary, confirmed_flush invalid: REPLAY START says the remote slot is behind, with
///   the copy's restart_lsn and catalog_xmin, which the standby's `could not synchronize`
///   DETAIL names as what "the standby has";
/// - temporary, confirmed_flush set: the replay is not consistent before it, and the
///   standby logged `could not synchronize` (on 18 with "could not build a consistent
///   snapshot").
///
/// `None` when the copy changed meanwhile, or is temporary and not advanced without the
/// standby having logged why yet (its decoder may still be on its way).
fn look_at_copy(
    env: &Env,
    sb: &Standby,
    sc: &mut Client,
    slot: &str,
    off: u64,
    stats: &mut TraceStats,
) -> Option<Seen> {
    let before = synced_copy(sc, slot)?;
    let rows = trace_ok(sc, slot);
    let d = diag_rows(sc, slot);
    let after = synced_copy(sc, slot)?;
    if after != before {
        return None;
    }
    let (temporary, restart, confirmed, catalog_xmin, _) = before;
    assert_no_zero_lsn(&d);
    assert!(
        !temporary || !d.iter().any(|r| r.kind == "healthy"),
        "a temporary copy is never healthy:\n{d:#?}"
    );
    let replayed = replay_lsn(sc);
    *stats += check_trace_against_wal(sc, restart, replayed, &rows);
    let start = rows[0].message.clone().unwrap_or_default();
    let logged = |m: &str| -> Vec<LogEntry> {
        log_entries_since(&sb.env, off)
            .into_iter()
            .filter(|e| e.message.contains(&format!("\"{slot}\"")) && e.message.contains(m))
            .collect()
    };
    let consistent_before =
        consistent_row(&rows).is_some_and(|r| r.lsn.is_some_and(|l| l < confirmed));
    let seen = match (temporary, confirmed) {
        (false, _) => {
            assert!(start.contains("persistent (sync-ready)"), "{start}");
            assert!(
                consistent_before,
                "persisted by the standby: the replay from {} is consistent before confirmed_flush {}:\n{}",
                fmt_lsn(restart),
                fmt_lsn(confirmed),
                dump(&rows)
            );
            assert!(
                !logged("is sync-ready now").is_empty(),
                "the standby logged the copy sync-ready"
            );
            assert_eq!(d[0].kind, "synchronized", "{d:#?}");
            Seen::Persistent
        }
        (true, 0) => {
            assert!(start.contains("has not advanced it"), "{start}");
            let standby_has = format!(
                "the standby has LSN {} and catalog xmin {catalog_xmin}",
                fmt_lsn(restart)
            );
            assert!(
                start.contains(&format!(
                    "restart_lsn {}, catalog_xmin {catalog_xmin}",
                    fmt_lsn(restart)
                )),
                "{start}"
            );
            // Not advanced yet: the remote behind (the standby says so, with the copy's
            // positions), or its decoder still on the way (nothing logged yet).
            let said = logged("could not synchronize").iter().any(|e| {
                e.detail
                    .as_deref()
                    .is_some_and(|d| d.contains(&standby_has))
            });
            if !said {
                return None;
            }
            assert_eq!(d[0].kind, "sync pending", "{d:#?}");
            assert_eq!(d[0].lsn.as_deref(), Some(fmt_lsn(restart).as_str()));
            assert_eq!(d[0].xid, Some(catalog_xmin));
            Seen::RemoteBehind
        }
        (true, _) => {
            assert!(start.contains("found no consistent snapshot"), "{start}");
            assert!(
                !consistent_before,
                "kept temporary by the standby: the replay from {} must not be consistent before confirmed_flush {}:\n{}",
                fmt_lsn(restart),
                fmt_lsn(confirmed),
                dump(&rows)
            );
            let lines = logged("could not synchronize");
            assert!(!lines.is_empty(), "the standby logged why");
            assert_eq!(d[0].kind, "sync pending", "{d:#?}");
            assert!(
                d[0].finding.contains(&format!(
                    "advanced it to the remote confirmed_flush {}",
                    fmt_lsn(confirmed)
                )),
                "{}",
                d[0].finding
            );
            if env.major >= 18 {
                assert!(
                    lines.iter().any(|e| e
                        .detail
                        .as_deref()
                        .is_some_and(|d| d.contains("could not build a consistent snapshot"))),
                    "{lines:?}"
                );
            }
            Seen::NotConsistent
        }
    };
    Some(seen)
}

/// Looks at the copy of `slot` every 200 ms (see [`look_at_copy`]) until `until` was
/// seen (at most 90 s); every state seen, in order, without repeats.
fn watch_copy(
    env: &Env,
    sb: &Standby,
    sc: &mut Client,
    slot: &str,
    off: u64,
    stats: &mut TraceStats,
    until: Seen,
) -> Vec<Seen> {
    let mut seen: Vec<Seen> = Vec::new();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(90) {
        if let Some(s) = look_at_copy(env, sb, sc, slot, off, stats) {
            if seen.last() != Some(&s) {
                seen.push(s);
            }
            if s == until {
                return seen;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the copy of {slot} never became {until:?} within 90 s (seen {seen:?})");
}

#[test]
fn st8_slot_sync_worker_temporary_and_persistent_copies() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_synced("st8") else {
        return;
    };
    let (sa, sbn) = ("pgsnap_st8a", "pgsnap_st8b");
    let _ga = SlotGuard::new(&env, sa);
    let _gb = SlotGuard::new(&env, sbn);
    pc.batch_execute("DROP TABLE IF EXISTS pgsnap_st8_t; CREATE TABLE pgsnap_st8_t (id int)")
        .unwrap();
    sb.wait_replayed(&mut pc);
    let off = log_offset(&sb.env);
    let _off = sync_worker_on(&sb, &mut sc);
    let create = |pc: &mut Client, slot: &str| {
        pc.execute(
            "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&slot],
        )
        .unwrap();
    };
    let mut stats = TraceStats::default();
    // A: a failover slot from the moment x (an xid after A's catalog_xmin) runs: the
    // standby reserves x as catalog_xmin for its copy, the remote slot is behind: kept
    // temporary. x ends and A's consumer settles its catalog_xmin: the worker persists it.
    create(&mut pc, sa);
    pc.batch_execute("INSERT INTO pgsnap_st8_t VALUES (0)")
        .unwrap();
    let xx = OpenXact::begin(&env, "pgsnap-st8-x");
    set_failover(&env, sa);
    sb.wait_replayed(&mut pc);
    wait_for("the worker to sync A", Duration::from_secs(60), || {
        synced_copy(&mut sc, sa).is_some()
    });
    let mut seen_a = watch_copy(&env, &sb, &mut sc, sa, off, &mut stats, Seen::RemoteBehind);
    xx.commit();
    settle(&env, &mut pc, sa);
    for s in watch_copy(&env, &sb, &mut sc, sa, off, &mut stats, Seen::Persistent) {
        if seen_a.last() != Some(&s) {
            seen_a.push(s);
        }
    }
    // B: a failover slot once its restart_lsn is a RUNNING_XACTS that runs k: the worker's
    // decoder waits for k (the copy is active meanwhile) and, once k ended, is not
    // consistent before B's confirmed_flush: kept temporary; a later RUNNING_XACTS consumed
    // on the primary moves B past k and the worker persists the copy.
    create(&mut pc, sbn);
    let (xk, _, runs_k) = restart_while_k_runs(&env, &mut pc, sbn, "pgsnap-st8-k");
    set_failover(&env, sbn);
    sb.wait_replayed(&mut pc);
    wait_for("the worker to sync B", Duration::from_secs(60), || {
        synced_copy(&mut sc, sbn).is_some()
    });
    std::thread::sleep(Duration::from_secs(2));
    let k = xk.xid;
    xk.commit();
    let mut seen_b = vec![];
    let t0 = std::time::Instant::now();
    // Until the copy is seen temporary after an advance, or persistent.
    while t0.elapsed() < Duration::from_secs(30) {
        if let Some(s) = look_at_copy(&env, &sb, &mut sc, sbn, off, &mut stats) {
            if seen_b.last() != Some(&s) {
                seen_b.push(s);
            }
            if s != Seen::RemoteBehind {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    settle(&env, &mut pc, sbn);
    for s in watch_copy(&env, &sb, &mut sc, sbn, off, &mut stats, Seen::Persistent) {
        if seen_b.last() != Some(&s) {
            seen_b.push(s);
        }
    }
    println!(
        "pgsnap-counts: st8 PG{} copies seen A {seen_a:?} B {seen_b:?} (B's restart_lsn runs k={k}: {runs_k}) {stats}",
        env.major
    );
    let all: Vec<Seen> = seen_a.iter().chain(&seen_b).copied().collect();
    assert!(
        seen_a.contains(&Seen::RemoteBehind) && all.contains(&Seen::Persistent),
        "temporary and persistent copies compared: {all:?}"
    );
    // B's restart_lsn ran k: the standby's decoder from there was not consistent before
    // B's confirmed_flush once k ended (as st5 saw with pg_sync_replication_slots()).
    assert!(
        !runs_k || seen_b.contains(&Seen::NotConsistent),
        "B kept temporary without a consistent snapshot: {seen_b:?}"
    );
    drop(_off);
    drop(_ga);
    drop(_gb);
    sb.wait_replayed(&mut pc);
    let _ = sc.batch_execute("SELECT pg_sync_replication_slots()");
    pc.batch_execute("DROP TABLE pgsnap_st8_t").unwrap();
}

// ---------------------------------------------------------------------------------------
// st13: a synced copy kept temporary while a transaction of the primary runs: the
// diagnosis gives the positions the slot sync worker logs, names the transaction, never
// says healthy, shows no 0/0; following its remedy makes the copy persistent
// ---------------------------------------------------------------------------------------

/// The two (LSN, catalog xmin) pairs of a `could not synchronize` DETAIL: the remote
/// slot's, then the standby's.
fn skip_pairs(detail: &str) -> Option<((u64, u64), (u64, u64))> {
    let mut lsns = Vec::new();
    let mut xmins = Vec::new();
    for w in detail.split([' ', ',', '(', ')']) {
        let w = w.trim_end_matches('.');
        if w.contains('/') && w.chars().all(|c| c.is_ascii_hexdigit() || c == '/') {
            lsns.push(parse_lsn(w));
        }
    }
    let mut rest = detail;
    while let Some(p) = rest.find("catalog xmin ") {
        rest = &rest[p + 13..];
        let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        xmins.push(n.parse().ok()?);
    }
    match (lsns.as_slice(), xmins.as_slice()) {
        ([a, l], [x, y]) => Some(((*a, *x), (*l, *y))),
        _ => None,
    }
}

#[test]
fn st13_synced_copy_kept_temporary_by_a_primary_transaction() {
    let Some((_g, env, mut pc, sb, mut sc)) = start_synced("st13") else {
        return;
    };
    let slot = "pgsnap_st13";
    let _ga = SlotGuard::new(&env, slot);
    pc.batch_execute("DROP TABLE IF EXISTS pgsnap_st13_t; CREATE TABLE pgsnap_st13_t (id int)")
        .unwrap();
    sb.wait_replayed(&mut pc);
    let off = log_offset(&sb.env);
    let _off = sync_worker_on(&sb, &mut sc);
    pc.execute(
        "SELECT pg_create_logical_replication_slot($1, 'test_decoding')",
        &[&slot],
    )
    .unwrap();
    // x writes and stays open on the primary; the slot's consumer there confirms past a
    // RUNNING_XACTS that lists it (the primary's catalog_xmin is then held at x); a later
    // transaction commits (the standby's next xid passes x); then the slot becomes a
    // failover slot: the standby reserves a catalog_xmin after x for its copy.
    let mut x = OpenXact::begin(&env, "pgsnap-st13-x");
    x.exec("INSERT INTO pgsnap_st13_t VALUES (1)");
    settle(&env, &mut pc, slot);
    pc.batch_execute("INSERT INTO pgsnap_st13_t VALUES (2)")
        .unwrap();
    env.log_standby_snapshot(&mut pc);
    assert_eq!(
        server_slot(&mut pc, slot).catalog_xmin,
        Some(xid32(x.xid)),
        "the primary's slot is held at x"
    );
    set_failover(&env, slot);
    sb.wait_replayed(&mut pc);
    // The worker keeps the copy temporary and says why, with the copy's positions.
    let mut said = None;
    wait_for("the worker to log why the copy is temporary", WAIT, || {
        let Some((true, l, 0, y, _)) = synced_copy(&mut sc, slot) else {
            return false;
        };
        said = log_entries_since(&sb.env, off)
            .into_iter()
            .filter(|e| {
                e.message.contains(&format!("\"{slot}\""))
                    && e.message.starts_with("could not sync")
            })
            .filter_map(|e| skip_pairs(e.detail.as_deref()?))
            .filter(|(_, standby)| *standby == (l, y))
            .last();
        said.is_some()
    });
    let ((a, rx), (l, y)) = said.unwrap();
    assert!(
        y > xid32(x.xid),
        "the copy's catalog_xmin {y} is after x {}",
        x.xid
    );
    assert_eq!(xact_status(&mut sc, x.xid), "in progress");
    let x32 = xid32(x.xid);
    let check_pending = |sc: &mut Client, x_running: bool| {
        let d = diag_rows(sc, slot);
        assert_no_zero_lsn(&d);
        assert_eq!(d[0].kind, "sync pending", "{d:#?}");
        assert_eq!(d[0].lsn.as_deref(), Some(fmt_lsn(l).as_str()));
        assert_eq!(d[0].xid, Some(y));
        let pairs = format!(
            "the remote slot needs WAL at LSN {} and catalog xmin {rx}, but the standby has LSN {} and catalog xmin {y}",
            fmt_lsn(a),
            fmt_lsn(l)
        );
        assert!(d[0].finding.contains(&pairs), "{pairs}:\n{}", d[0].finding);
        for k in ["healthy", "consumer lag", "no consumer", "forecast"] {
            assert!(
                !d.iter().any(|r| r.kind == k),
                "no {k} row for a temporary copy:\n{d:#?}"
            );
        }
        let named: Vec<&DiagRow> = d
            .iter()
            .filter(|r| r.kind == "sync pending" && r.xid == Some(x32))
            .collect();
        assert_eq!(named.len(), usize::from(x_running), "{d:#?}");
        let (state, lag): (Option<String>, Option<i64>) = sc
            .query_one(
                "SELECT state, confirmed_flush_lag_bytes FROM snapbuild_slot_health WHERE slot_name = $1",
                &[&slot],
            )
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        assert_eq!(state.as_deref(), Some("sync pending"));
        assert_eq!(lag, None, "no confirmed_flush: no lag");
        let cf: Option<String> = sc
            .query_one(
                "SELECT confirmed_flush::text FROM snapbuild_slots() WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap()
            .get(0);
        assert_eq!(cf, None);
        named.first().map(|r| r.remedy.clone().unwrap())
    };
    let remedy = check_pending(&mut sc, true).unwrap();
    assert_eq!(
        pid_by_remedy(&mut pc, &remedy),
        Some(x.pid),
        "the remedy's query, run on the primary, finds x's session: {remedy}"
    );
    // The remedy, first half: x ends. The server keeps the copy temporary until the
    // slot's consumer on the primary confirms; the diagnosis still says so.
    let x_full = x.xid;
    x.commit();
    sb.wait_replayed(&mut pc);
    std::thread::sleep(Duration::from_secs(1));
    let before = synced_copy(&mut sc, slot).expect("the copy");
    assert!(before.0, "still temporary before the consumer confirms");
    check_pending(&mut sc, false);
    assert_eq!(xact_status(&mut sc, x_full), "committed");
    // Second half: the consumer on the primary confirms past RUNNING_XACTS records
    // logged after x ended; the worker persists the copy.
    let mut persistent = false;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(90) && !persistent {
        settle(&env, &mut pc, slot);
        sb.wait_replayed(&mut pc);
        for _ in 0..20 {
            if synced_copy(&mut sc, slot).is_some_and(|c| !c.0) {
                persistent = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    assert!(persistent, "the copy became persistent after the remedy");
    let d = diag_rows(&mut sc, slot);
    assert_eq!(d[0].kind, "synchronized", "{d:#?}");
    assert!(!d.iter().any(|r| r.kind == "sync pending"), "{d:#?}");
    let state: Option<String> = sc
        .query_one(
            "SELECT state FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_ne!(state.as_deref(), Some("sync pending"));
    println!(
        "pgsnap-counts: st13 PG{}: copy kept temporary at LSN {} catalog xmin {y} (remote {} / {rx}, = the worker's DETAIL); x={} named with its pid on the primary; persistent after x ended and the consumer confirmed",
        env.major,
        fmt_lsn(l),
        fmt_lsn(a),
        xid32(x_full)
    );
    drop(_off);
    drop(_ga);
    sb.wait_replayed(&mut pc);
    let _ = sc.batch_execute("SELECT pg_sync_replication_slots()");
    pc.batch_execute("DROP TABLE pgsnap_st13_t").unwrap();
}
