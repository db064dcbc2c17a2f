//! The watcher (the background worker `shared_preload_libraries = 'pg_snapbuild'` starts)
//! against the server: what it writes to the server log must name what the server proves.
//!
//! - w1: a slot creation hangs on an idle-in-transaction session. With
//!   `pg_snapbuild.log_waits_after = 1s` (set by a reload), the watcher writes one LOG line
//!   about it whose DETAIL names the blocker's pid and xid (from `pg_backend_pid()` and
//!   `pg_current_xact_id()` of that session) and the same pids `snapbuild_diagnose`
//!   names; no second line within the minute; committing the blocker lets the creation
//!   return. With `log_waits_after = 0` (another reload) a second hung creation gets no line.
//! - w2: a created slot whose restart_lsn and catalog_xmin an open transaction holds
//!   (consumed past it): with `log_holds_after = 1s`, one line for each, naming that xid,
//!   and no repeat.
//! - w3: after a crash restart (a backend killed with SIGKILL: the postmaster restarts
//!   every process) a new watcher process starts, and logs a new hung creation naming its
//!   blocker.
//! - w4: on a hot standby (16+) a creation waiting for a transaction of the primary gets a
//!   line whose DETAIL names that xid and whose HINT's query, run on the primary, finds its
//!   session; after a promotion the same watcher process goes on and logs a creation on
//!   the new primary naming its local blocker, and the slots' shared replays there give
//!   what a full replay gives.
//!
//! The test clusters (scripts/cluster.sh) preload the library with both settings at 0 (the
//! watcher idles); each test turns on what it checks and puts it back.

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

/// Waits until the creating backend `pid` waits for `xid` in pg_locks.
fn creator_waits(c: &mut Client, pid: i32, xid: u64) {
    wait_for(
        &format!("pid {pid} waiting for xid {xid} in pg_locks"),
        Duration::from_secs(30),
        || waits_for_xid(c, pid, xid),
    );
}

/// The pids `snapbuild_diagnose` names as what the creation waits for.
fn diagnosed_blockers(c: &mut Client, slot: &str) -> Vec<i32> {
    query_column(
        c,
        "SELECT pid FROM snapbuild_diagnose($1) WHERE kind LIKE 'waiting for%' AND pid IS NOT NULL ORDER BY pid",
        &[&slot],
        &format!("snapbuild_diagnose({slot})"),
    )
}

#[test]
fn w1_a_waiting_creation_is_logged_with_its_blocker() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let _fast = env.set_reloaded("pg_snapbuild.watch_interval", "'200ms'");
    let _waits = env.set_reloaded("pg_snapbuild.log_waits_after", "'1s'");
    let watcher = watcher_pid(&mut c, Duration::from_secs(30));
    let slot = "pgsnap_watch_w1";
    let _guard = SlotGuard::new(&env, slot);
    let offset = log_offset(&env);

    let x = OpenXact::begin(&env, "pgsnap-watch-blocker");
    let (x_xid, x_pid) = (x.xid, x.pid);
    let creation = Creation::start(&env, slot, "test_decoding");
    creator_waits(&mut c, creation.pid, x_xid);
    let prefix = format!("creation of logical replication slot \"{slot}\" has waited at least");
    let started = Instant::now();
    let lines = wait_for_lines(&env, offset, watcher, &prefix, Duration::from_secs(30));
    println!(
        "pgsnap-watch: w1: {:#?} after {:?}",
        lines,
        started.elapsed()
    );
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let detail = lines[0].detail.clone().expect("the line has a DETAIL");
    assert!(
        detail.contains(&format!("waits for xid {x_xid}")),
        "the DETAIL must name x's xid {x_xid}: {detail}"
    );
    // The pids the line names are the server's blocker, and those the diagnosis names.
    assert_eq!(named_pids(&detail), vec![x_pid], "{detail}");
    assert_eq!(diagnosed_blockers(&mut c, slot), vec![x_pid]);

    // At most one line a minute while it waits.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(watcher_lines(&env, offset, watcher, &prefix).len(), 1);

    x.commit();
    creation.wait(Duration::from_secs(60));

    // log_waits_after = 0: no line.
    let _off = env.set_reloaded("pg_snapbuild.log_waits_after", "0");
    let slot2 = "pgsnap_watch_w1b";
    let _guard2 = SlotGuard::new(&env, slot2);
    let offset = log_offset(&env);
    let y = OpenXact::begin(&env, "pgsnap-watch-blocker");
    let creation = Creation::start(&env, slot2, "test_decoding");
    creator_waits(&mut c, creation.pid, y.xid);
    std::thread::sleep(Duration::from_secs(3));
    let prefix2 = format!("creation of logical replication slot \"{slot2}\"");
    assert!(watcher_lines(&env, offset, watcher, &prefix2).is_empty());
    y.commit();
    creation.wait(Duration::from_secs(60));
}

#[test]
fn w2_a_held_restart_lsn_and_catalog_xmin_are_logged_once() {
    let slot = "pgsnap_watch_w2";
    let Some((_g, env, mut c, _guard)) = start_with_created_slot(slot, "pgsnap_watch_held") else {
        return;
    };
    let advance = |c: &mut Client| {
        for _ in 0..3 {
            env.log_standby_snapshot_flushed(c, "pgsnap_watch_held", "0");
            consume_changes(c, slot);
        }
    };
    advance(&mut c);
    let mut h = OpenXact::begin(&env, "pgsnap-watch-holder");
    h.exec("INSERT INTO pgsnap_watch_held VALUES (1)");
    advance(&mut c);
    let held: Vec<(String, Option<String>)> = c
        .query(
            "SELECT kind, xid::text FROM snapbuild_diagnose($1) WHERE kind IN ('restart_lsn held', 'catalog_xmin held') ORDER BY kind",
            &[&slot],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let hx = Some(h.xid.to_string());
    assert_eq!(
        held,
        vec![
            ("catalog_xmin held".to_string(), hx.clone()),
            ("restart_lsn held".to_string(), hx)
        ]
    );

    let watcher = watcher_pid(&mut c, Duration::from_secs(30));
    let offset = log_offset(&env);
    let _fast = env.set_reloaded("pg_snapbuild.watch_interval", "'200ms'");
    let _holds = env.set_reloaded("pg_snapbuild.log_holds_after", "'1s'");
    for what in ["restart_lsn", "catalog_xmin"] {
        let prefix = format!(
            "{what} of logical replication slot \"{slot}\" has been held by transaction {} for at least",
            h.xid
        );
        let lines = wait_for_lines(&env, offset, watcher, &prefix, Duration::from_secs(30));
        println!("pgsnap-watch: w2: {lines:#?}");
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0]
                .detail
                .as_deref()
                .is_some_and(|d| d.contains(&format!("pid {}", h.pid))),
            "the DETAIL must name the holder's pid {}: {lines:#?}",
            h.pid
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let all = watcher_lines(&env, offset, watcher, "");
    assert_eq!(all.len(), 2, "one line each, no repeat: {all:#?}");
    h.commit();
}

#[test]
fn w3_after_a_crash_restart_a_new_watcher_logs() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let before = watcher_pid(&mut c, Duration::from_secs(30));
    let offset = log_offset(&env);
    let mut c = env.crash_restart("pgsnap-watch-after-crash");
    let restarted = log_entries_since(&env, offset).iter().any(|e| {
        e.message
            .contains("all server processes terminated; reinitializing")
    });
    assert!(
        restarted,
        "the server must have gone through a crash restart"
    );
    let after = watcher_pid(&mut c, Duration::from_secs(60));
    assert_ne!(before, after, "a new watcher process");

    let _fast = env.set_reloaded("pg_snapbuild.watch_interval", "'200ms'");
    let _waits = env.set_reloaded("pg_snapbuild.log_waits_after", "'1s'");
    let slot = "pgsnap_watch_w3";
    let _guard = SlotGuard::new(&env, slot);
    let x = OpenXact::begin(&env, "pgsnap-watch-blocker");
    let creation = Creation::start(&env, slot, "test_decoding");
    creator_waits(&mut c, creation.pid, x.xid);
    let prefix = format!("creation of logical replication slot \"{slot}\" has waited at least");
    let lines = wait_for_lines(&env, offset, after, &prefix, Duration::from_secs(30));
    let detail = lines[0].detail.clone().unwrap_or_default();
    assert_eq!(named_pids(&detail), vec![x.pid], "{detail}");
    x.commit();
    creation.wait(Duration::from_secs(60));
}

/// The HINT lines backend `pid` logged since `offset`, in order.
fn hints(log: &std::path::Path, offset: u64, pid: i32) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut text = String::new();
    f.read_to_string(&mut text).unwrap();
    let tag = format!("[{pid}] HINT:  ");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, h)| h.to_string()))
        .collect()
}

#[test]
fn w4_on_a_standby_then_after_its_promotion() {
    let Some((_g, env, mut pc)) = start() else {
        return;
    };
    if env.major < 16 {
        println!(
            "SKIPPED: w4: PostgreSQL {} cannot create logical slots on a standby (16+)",
            env.major
        );
        return;
    }
    pc.batch_execute("DROP TABLE IF EXISTS pgsnap_watch_w4; CREATE TABLE pgsnap_watch_w4 (id int)")
        .unwrap();
    let sb = env.standby();
    let mut sc = sb.connect("pgsnap-w4");
    let watcher = watcher_pid(&mut sc, Duration::from_secs(60));
    let _fast = sb
        .env
        .set_reloaded("pg_snapbuild.watch_interval", "'200ms'");
    let _waits = sb.env.set_reloaded("pg_snapbuild.log_waits_after", "'1s'");

    // A creation on the standby waits for x, a transaction of the primary.
    let slot = "pgsnap_watch_w4";
    let guard = SlotGuard::new(&sb.env, slot);
    let mut x = OpenXact::begin(&env, "pgsnap-w4-x");
    x.exec("INSERT INTO pgsnap_watch_w4 VALUES (1)");
    sb.wait_replayed(&mut pc);
    let offset = log_offset(&sb.env);
    let creation = Creation::start(&sb.env, slot, "test_decoding");
    sb.wait_slot_listed(&mut sc, slot, Duration::from_secs(90));
    env.log_standby_snapshot(&mut pc);
    let prefix = format!("creation of logical replication slot \"{slot}\" has waited at least");
    let mut lines = Vec::new();
    // The first lines may come before the RUNNING_XACTS is replayed (waiting for WAL):
    // wait for the one that names x (a line a minute at most: up to 90 s).
    wait_for("a watcher line naming x", Duration::from_secs(90), || {
        lines = watcher_lines(&sb.env, offset, watcher, &prefix);
        lines.iter().any(|l| {
            l.detail
                .as_deref()
                .is_some_and(|d| d.contains(&format!("xid {}", x.xid)))
        })
    });
    println!("pgsnap-watch: w4 standby: {lines:#?}");
    let hint = hints(&sb.env.log, offset, watcher)
        .pop()
        .expect("the line has a HINT");
    // Its remedy's query, run on the primary, finds x's session.
    assert_eq!(pid_by_remedy(&mut pc, &hint), Some(x.pid), "{hint}");
    x.commit();
    env.log_standby_snapshot(&mut pc);
    creation.wait(Duration::from_secs(90));
    guard.drop_now();

    // Promoted: the same watcher goes on, now on a primary.
    sb.promote().unwrap_or_else(|e| panic!("{e}"));
    let mut nc = sb.connect("pgsnap-w4-promoted");
    assert_eq!(watcher_pid(&mut nc, Duration::from_secs(30)), watcher);
    let slot = "pgsnap_watch_w4b";
    let offset = log_offset(&sb.env);
    let y = OpenXact::begin(&sb.env, "pgsnap-w4-y");
    let creation = Creation::start(&sb.env, slot, "test_decoding");
    creator_waits(&mut nc, creation.pid, y.xid);
    let prefix = format!("creation of logical replication slot \"{slot}\" has waited at least");
    let lines = wait_for_lines(&sb.env, offset, watcher, &prefix, Duration::from_secs(30));
    let detail = lines[0].detail.clone().unwrap_or_default();
    assert_eq!(named_pids(&detail), vec![y.pid], "{detail}");
    y.commit();
    creation.wait(Duration::from_secs(60));
    // The slots' replays kept in the promoted server's shared memory (filled by the
    // watcher before and after the promotion) give what a full replay gives.
    let rows = |c: &mut Client| -> Vec<String> {
        query_column(
            c,
            "SELECT format('%s %s %s %s %s %s %s', slot_name, state, in_creation, waiting_xids,
                    restart_lsn_lag_bytes, catalog_xmin_age, last_running_xacts)
               FROM snapbuild_slot_health ORDER BY slot_name",
            &[],
            "snapbuild_slot_health",
        )
    };
    let mut compared = false;
    for _ in 0..5 {
        let f0 = flush_lsn(&mut nc);
        let shared = rows(&mut sb.connect("pgsnap-w4-shared"));
        let full = rows(&mut sb.env.connect_unshared("pgsnap-w4-full"));
        if flush_lsn(&mut nc) == f0 {
            assert!(!shared.is_empty());
            assert_eq!(shared, full, "after the promotion: shared vs full replay");
            compared = true;
            break;
        }
    }
    assert!(compared, "no flush position stood still across the scrapes");
    nc.execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .unwrap();
}
