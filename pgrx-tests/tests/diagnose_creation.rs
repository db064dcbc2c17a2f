//! `snapbuild_diagnose` against the server while a slot creation hangs on a transaction:
//! the diagnosis must name what holds it, and the server must prove the name right: ending
//! a session the diagnosis does not name leaves the creation waiting, ending the one it
//! names lets the creation return within seconds.
//!
//! - d1: an idle-in-transaction backend in another database, beside a second waited-for
//!   transaction and a session with a snapshot but no xid (not waited for): ending the
//!   snapshot session and then the second transaction leaves the creation waiting (the
//!   ended one is reported as ended), ending the other database's session finishes it.
//! - d2: a prepared transaction (gid, database): COMMIT PREPARED finishes the creation.
//! - d3: a transaction whose changes are in a subtransaction (SAVEPOINT, INSERT): named by
//!   its top-level xid and backend, not by the subxid.
//! - d4: a creation through the replication protocol (`CREATE_REPLICATION_SLOT … LOGICAL`
//!   from psql with `replication=database`, as CDC tools do): the walsender's slot
//!   names the blocker; committing it ends psql successfully.
//! - d6: the health view while the creation waits names the blocker's pid; after it, a
//!   repeated scrape in the same session resumes its replay, and a session that keeps its
//!   replays to itself (`pg_snapbuild.shared_state = off`, a full replay from restart_lsn)
//!   reads it all again.
//!
//! The truths come from the server: pids from `pg_backend_pid()` of the sessions opened
//! here, xids from `pg_current_xact_id()`, gids from the PREPARE, the creator's lock wait
//! in `pg_locks`, and the creation returning.

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

/// Waits until backend `pid` waits for the transaction lock of `xid` (the creation's
/// SnapBuildWaitSnapshot), as pg_locks shows it.
fn wait_until_creator_waits(c: &mut Client, pid: i32, xid: u64) {
    wait_until_creator_waits_any(c, pid, &[xid]);
}

/// [`wait_until_creator_waits`] for one of `xids` (SnapBuildWaitSnapshot takes the
/// record's xids in the order the record lists them).
fn wait_until_creator_waits_any(c: &mut Client, pid: i32, xids: &[u64]) {
    wait_for(
        &format!("pid {pid} waiting for one of xids {xids:?} in pg_locks"),
        Duration::from_secs(30),
        || xids.iter().any(|x| waits_for_xid(c, pid, *x)),
    );
}

/// The creation has not returned after `ms` milliseconds.
fn still_waiting(cr: &mut Creation, ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
    assert!(
        !cr.try_done(),
        "the creation of {} returned although its named blocker is still open",
        cr.slot
    );
}

/// Asserts the diagnosis of a hung creation: a `creation waiting` row, and `kind` rows
/// naming exactly `want` among the xids of `ours` (the sessions this test opened).
fn assert_names(d: &[Diag], kind: &str, want: &[u64], ours: &[u64]) {
    assert_eq!(
        of_kind(d, "creation waiting").len(),
        1,
        "one creation waiting row: {d:#?}"
    );
    let named: Vec<u64> = of_kind(d, kind)
        .iter()
        .filter_map(|r| r.xid)
        .filter(|x| ours.contains(x))
        .collect();
    let mut named_sorted = named.clone();
    named_sorted.sort();
    let mut want_sorted = want.to_vec();
    want_sorted.sort();
    assert_eq!(named_sorted, want_sorted, "{kind} rows: {d:#?}");
}

#[test]
fn d1_idle_in_transaction_in_another_database() {
    let slot = "pgsnap_diag_d1";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    // o: idle in transaction in another database; u: a second one here.
    let mut o = connect_db(&env, &mut c, "pgsnap_diag_other", "pgsnap-diag-other");
    let o_pid = backend_pid(&mut o);
    o.batch_execute("BEGIN").unwrap();
    let o_xid = current_xid(&mut o);
    let u = OpenXact::begin(&env, "pgsnap-diag-u");
    let mut decoy = snapshot_only(&env);
    let decoy_pid = backend_pid(&mut decoy);
    let mut cr = Creation::start(&env, slot, "test_decoding");
    wait_until_creator_waits_any(&mut c, cr.pid, &[o_xid, u.xid]);

    let d = diagnose(&mut c, slot);
    let ours = [o_xid, u.xid];
    assert_names(&d, "waiting for transaction", &[o_xid, u.xid], &ours);
    let row_o = of_kind(&d, "waiting for transaction")
        .into_iter()
        .find(|r| r.xid == Some(o_xid))
        .unwrap()
        .clone();
    assert_eq!(row_o.pid, Some(o_pid), "{row_o:?}");
    assert_eq!(row_o.datname.as_deref(), Some("pgsnap_diag_other"));
    assert!(
        row_o
            .remedy
            .as_deref()
            .unwrap_or("")
            .contains(&format!("pg_terminate_backend({o_pid})")),
        "{row_o:?}"
    );
    let row_u = of_kind(&d, "waiting for transaction")
        .into_iter()
        .find(|r| r.xid == Some(u.xid))
        .unwrap()
        .clone();
    assert_eq!(row_u.pid, Some(u.pid));
    assert!(
        d.iter().all(|r| r.pid != Some(decoy_pid)),
        "the snapshot-only session is named: {d:#?}"
    );

    // Ending the session the diagnosis does not name changes nothing.
    decoy.batch_execute("COMMIT").unwrap();
    still_waiting(&mut cr, 1500);
    // Ending one of the two named: still waiting, now for o alone; u is reported as ended.
    let u_xid = u.xid;
    u.commit();
    still_waiting(&mut cr, 1500);
    let d = diagnose(&mut c, slot);
    assert_names(&d, "waiting for transaction", &[o_xid], &ours);
    assert!(
        of_kind(&d, "waiting for ended transaction")
            .iter()
            .any(|r| r.xid == Some(u_xid))
            || of_kind(&d, "waiting for transaction")
                .iter()
                .all(|r| r.xid != Some(u_xid)),
        "{d:#?}"
    );
    // Ending the named one: the creation returns within seconds.
    let t0 = Instant::now();
    o.batch_execute("COMMIT").unwrap();
    let lsn = cr.wait(Duration::from_secs(20));
    println!(
        "pgsnap-counts: d1 creation returned {} {:?} after the named blocker ended",
        fmt_lsn(lsn),
        t0.elapsed()
    );
    // The created slot: no creation rows any more.
    let d = diagnose(&mut c, slot);
    assert!(
        d.iter()
            .all(|r| !r.kind.contains("creation") && !r.kind.starts_with("waiting")),
        "{d:#?}"
    );
}

/// Rolls back prepared transaction `gid` if it still exists (cleanup on failure).
struct PreparedGuard {
    env: Env,
    gid: String,
}

impl Drop for PreparedGuard {
    fn drop(&mut self) {
        if let Ok(mut c) = std::panic::catch_unwind(|| self.env.connect("pgsnap-diag-cleanup")) {
            let exists = c
                .query_opt(
                    "SELECT 1 FROM pg_prepared_xacts WHERE gid = $1",
                    &[&self.gid],
                )
                .ok()
                .flatten()
                .is_some();
            if exists {
                let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{}'", self.gid));
            }
        }
    }
}

#[test]
fn d2_prepared_transaction() {
    let (slot, gid) = ("pgsnap_diag_d2", "pgsnap_diag_gid_d2");
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let _pg = PreparedGuard {
        env: env.clone(),
        gid: gid.into(),
    };
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_diag_prep (i int)")
        .unwrap();
    let mut p = OpenXact::begin(&env, "pgsnap-diag-prep");
    p.exec("INSERT INTO pgsnap_diag_prep VALUES (1)");
    let p_xid = p.xid;
    p.prepare(gid);
    let mut cr = Creation::start(&env, slot, "test_decoding");
    wait_until_creator_waits(&mut c, cr.pid, p_xid);

    let d = diagnose(&mut c, slot);
    assert_names(&d, "waiting for prepared transaction", &[p_xid], &[p_xid]);
    let r = of_kind(&d, "waiting for prepared transaction")[0].clone();
    assert_eq!(r.gid.as_deref(), Some(gid), "{r:?}");
    assert_eq!(r.pid, None);
    assert_eq!(r.datname.as_deref(), Some(env.dbname.as_str()));
    assert!(
        r.remedy
            .as_deref()
            .unwrap_or("")
            .contains(&format!("COMMIT PREPARED '{gid}'")),
        "{r:?}"
    );
    still_waiting(&mut cr, 1000);
    c.batch_execute(&format!("COMMIT PREPARED '{gid}'"))
        .unwrap();
    let t0 = Instant::now();
    let lsn = cr.wait(Duration::from_secs(20));
    println!(
        "pgsnap-counts: d2 creation returned {} {:?} after COMMIT PREPARED of the named gid",
        fmt_lsn(lsn),
        t0.elapsed()
    );
}

#[test]
fn d3_subtransaction_is_named_by_its_top_level() {
    let slot = "pgsnap_diag_d3";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_diag_sub (i int)")
        .unwrap();
    let mut s = env.connect("pgsnap-diag-sub");
    let s_pid = backend_pid(&mut s);
    s.batch_execute("BEGIN; SAVEPOINT a; INSERT INTO pgsnap_diag_sub VALUES (1)")
        .unwrap();
    // The server's xids: the top level (pg_current_xact_id) and the subtransaction's (the
    // inserted row's xmin).
    let top = current_xid(&mut s);
    let sub: u64 = s
        .query_one(
            "SELECT xmin::text FROM pgsnap_diag_sub WHERE xmin::text::int8 <> $1::text::int8 ORDER BY 1 DESC LIMIT 1",
            &[&top.to_string()],
        )
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap();
    assert_ne!(top, sub);
    let mut cr = Creation::start(&env, slot, "test_decoding");
    wait_until_creator_waits(&mut c, cr.pid, top);

    let d = diagnose(&mut c, slot);
    assert_names(&d, "waiting for transaction", &[top], &[top, sub]);
    let r = of_kind(&d, "waiting for transaction")
        .into_iter()
        .find(|r| r.xid == Some(top))
        .unwrap()
        .clone();
    assert_eq!(r.pid, Some(s_pid), "{r:?}");
    assert!(d.iter().all(|r| r.xid != Some(sub)), "{d:#?}");
    still_waiting(&mut cr, 1000);
    s.batch_execute("COMMIT").unwrap();
    let t0 = Instant::now();
    let lsn = cr.wait(Duration::from_secs(20));
    println!(
        "pgsnap-counts: d3 creation returned {} {:?} after the top level (subxid {sub}) committed",
        fmt_lsn(lsn),
        t0.elapsed()
    );
}

#[test]
fn d4_creation_through_the_replication_protocol() {
    let slot = "pgsnap_diag_d4";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let b = OpenXact::begin(&env, "pgsnap-diag-walsender-blocker");
    let (b_xid, b_pid) = (b.xid, b.pid);
    let conninfo = format!(
        "host={} port={} user={} dbname={} replication=database application_name=pgsnap-diag-walsender",
        env.host, env.port, env.user, env.dbname
    );
    let mut child = std::process::Command::new("psql")
        .args([
            "-X",
            "-At",
            &conninfo,
            "-c",
            &format!("CREATE_REPLICATION_SLOT {slot} LOGICAL test_decoding"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql on PATH (scripts/cluster.sh env puts it there)");
    let mut walsender = 0;
    wait_for(
        "the walsender's slot in pg_replication_slots",
        Duration::from_secs(30),
        || {
            let r = c
                .query_opt(
                    "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .unwrap();
            if let Some(Some(pid)) = r.map(|r| r.get::<_, Option<i32>>(0)) {
                walsender = pid;
                true
            } else {
                false
            }
        },
    );
    let bt: String = c
        .query_one(
            "SELECT backend_type FROM pg_stat_activity WHERE pid = $1",
            &[&walsender],
        )
        .unwrap()
        .get(0);
    assert_eq!(bt, "walsender");
    wait_until_creator_waits(&mut c, walsender, b_xid);

    let d = diagnose(&mut c, slot);
    assert_names(&d, "waiting for transaction", &[b_xid], &[b_xid]);
    let r = of_kind(&d, "waiting for transaction")[0].clone();
    assert_eq!(r.pid, Some(b_pid), "{r:?}");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(child.try_wait().unwrap().is_none(), "psql returned early");
    b.commit();
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            assert!(
                st.success(),
                "CREATE_REPLICATION_SLOT failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            println!(
                "pgsnap-counts: d4 CREATE_REPLICATION_SLOT returned {:?} after the named blocker committed: {}",
                t0.elapsed(),
                String::from_utf8_lossy(&out.stdout).trim()
            );
            break;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("CREATE_REPLICATION_SLOT did not return within 20 s of the blocker's commit");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One row of the `snapbuild_slot_health` view, the columns the test checks.
#[derive(Debug)]
struct HealthRow {
    state: Option<String>,
    in_creation: bool,
    waiting_xids: i32,
    oldest_blocking_pid: Option<i32>,
    replayed_bytes: i64,
}

fn health(c: &mut Client, slot: &str) -> HealthRow {
    let r = c
        .query_one(
            "SELECT state, in_creation, waiting_xids, oldest_blocking_pid, replayed_bytes
               FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap_or_else(|e| panic!("snapbuild_slot_health {slot}: {}", err_text(&e)));
    let h = HealthRow {
        state: r.get(0),
        in_creation: r.get(1),
        waiting_xids: r.get(2),
        oldest_blocking_pid: r.get(3),
        replayed_bytes: r.get(4),
    };
    println!("pgsnap-health: {slot}: {h:?}");
    h
}

#[test]
fn d6_slot_health_names_the_blocker_and_resumes_its_replay() {
    let slot = "pgsnap_diag_d6";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_diag_held (i int)")
        .unwrap();
    let b = OpenXact::begin(&env, "pgsnap-diag-health-blocker");
    let mut cr = Creation::start(&env, slot, "test_decoding");
    wait_until_creator_waits(&mut c, cr.pid, b.xid);
    // A monitoring session, scraping twice.
    let mut m = env.connect("pgsnap-diag-monitor");
    let h = health(&mut m, slot);
    assert_eq!(h.state.as_deref(), Some("building"));
    assert!(h.in_creation);
    assert_eq!(h.waiting_xids, 1);
    assert_eq!(h.oldest_blocking_pid, Some(b.pid));
    assert!(h.replayed_bytes > 0);
    still_waiting(&mut cr, 500);
    b.commit();
    cr.wait(Duration::from_secs(20));
    // The creation ended: another decoder (restarted at confirmed_flush), replayed afresh.
    let h = health(&mut m, slot);
    assert_eq!(h.state.as_deref(), Some("consistent"));
    assert!(!h.in_creation);
    assert_eq!((h.waiting_xids, h.oldest_blocking_pid), (0, None));
    // About 4 MB of WAL: the first scrape reads it, the next one resumes at its end.
    c.batch_execute("INSERT INTO pgsnap_diag_held SELECT generate_series(1, 60000)")
        .unwrap();
    let f0 = flush_lsn(&mut c);
    let first = health(&mut m, slot);
    let f1 = flush_lsn(&mut c);
    let again = health(&mut m, slot);
    let f2 = flush_lsn(&mut c);
    assert!(
        first.replayed_bytes >= (f0 - server_slot(&mut c, slot).restart_lsn) as i64 - 8192,
        "{first:?}"
    );
    assert!(
        again.replayed_bytes <= (f2 - f1.min(f0)) as i64 + 8192
            && again.replayed_bytes < first.replayed_bytes / 10,
        "the repeated scrape read {} bytes (first {}), WAL flushed meanwhile {}",
        again.replayed_bytes,
        first.replayed_bytes,
        f2 - f0
    );
    // A new session that keeps its replays to itself reads it all again.
    let mut m2 = env.connect_unshared("pgsnap-diag-monitor2");
    let other = health(&mut m2, slot);
    assert!(other.replayed_bytes >= first.replayed_bytes, "{other:?}");
    println!(
        "pgsnap-counts: d6 first scrape {} bytes, repeated {} bytes, another session {} bytes",
        first.replayed_bytes, again.replayed_bytes, other.replayed_bytes
    );
}
