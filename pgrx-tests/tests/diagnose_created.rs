//! `snapbuild_diagnose` and `snapbuild_slot_health` on created slots, against the server:
//! its slot catalog, its WAL, VACUUM's cutoff and the sessions opened here.
//!
//! - d5, d7: a created slot held by an open transaction (restart_lsn and catalog_xmin
//!   stand where the diagnosis says they are held; ending the named session moves both),
//!   an invalidated slot.
//! - d8: the forecast. x and then y hold a created slot; the diagnosis forecasts where
//!   restart_lsn and catalog_xmin go when x ends; x commits, a RUNNING_XACTS is logged,
//!   the consumer decodes past it and confirms, and pg_replication_slots must show
//!   exactly those values (restart_lsn's move = the
//!   forecast bytes). Then y alone: the forecast says "the RUNNING_XACTS logged after
//!   it", and the server's restart_lsn becomes the first RUNNING_XACTS in the WAL after
//!   y's commit.
//! - d9: the catalog horizon: with nothing older, the slot's catalog_xmin is the
//!   cluster's oldest, and `VACUUM (VERBOSE) pg_class` reports that xid as its removable
//!   cutoff; a REPEATABLE READ session whose snapshot predates the slot holds an older
//!   one: the diagnosis names that pid and xmin, and VACUUM's cutoff is that xmin.
//! - d10: the health view's `running_xacts_age_s` after a RUNNING_XACTS and a pause
//!   with no WAL written: at least the pause.
//! - d11: `snapbuild_diagnose` resumes this session's kept replay: called again after
//!   more WAL, it gives exactly the rows a new session's full replay gives, and a health
//!   scrape after it in the same session has nothing left to read.
//! - d12: three slots at three restart_lsns, one held: one scrape replays them from one
//!   read of the WAL (replays that came to the same state fed as one), and its health rows
//!   and diagnoses equal each slot's replayed alone; after churn a session that scraped
//!   before resumes what it can and equals a new session.
//!
//! The sessions d11 and d12 compare against ("a new session", "alone") keep their replays
//! to themselves (`pg_snapbuild.shared_state = off`): theirs are full replays from
//! restart_lsn, whatever the shared area holds (tests/shared_state.rs checks that area).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

/// The slot's catalog_xmin and restart_lsn in pg_replication_slots.
fn slot_horizons(c: &mut Client, slot: &str) -> (u64, u64) {
    let s = server_slot(c, slot);
    (s.catalog_xmin.expect("catalog_xmin"), s.restart_lsn)
}

/// Three rounds of: a RUNNING_XACTS record, then `pg_logical_slot_get_changes` to the end
/// (a candidate is proposed at a RUNNING_XACTS and taken once confirmed past it).
fn advance(env: &Env, c: &mut Client, slot: &str) {
    for _ in 0..3 {
        env.log_standby_snapshot_flushed(c, "pgsnap_diag_held", "0");
        consume_changes(c, slot);
    }
}

#[test]
fn d5_created_slot_held_by_an_open_transaction() {
    let slot = "pgsnap_diag_d5";
    let Some((_g, env, mut c, _guard)) = start_with_created_slot(slot, "pgsnap_diag_held") else {
        return;
    };
    // Consumed past serialized RUNNING_XACTS first: the decoder restarted there restores
    // a snapshot and has a restart point when h begins.
    advance(&env, &mut c, slot);
    let mut h = OpenXact::begin(&env, "pgsnap-diag-holder");
    h.exec("INSERT INTO pgsnap_diag_held VALUES (1)");
    let (h_xid, h_pid) = (h.xid, h.pid);
    let mut decoy = snapshot_only(&env);
    let decoy_pid = backend_pid(&mut decoy);
    advance(&env, &mut c, slot);
    let (cx, rl) = slot_horizons(&mut c, slot);

    let d = diagnose(&mut c, slot);
    let held = of_kind(&d, "restart_lsn held");
    assert_eq!(held.len(), 1, "{d:#?}");
    assert_eq!((held[0].xid, held[0].pid), (Some(h_xid), Some(h_pid)));
    let held_at: String = c
        .query_one(
            "SELECT lsn::text FROM snapbuild_diagnose($1) WHERE kind = 'restart_lsn held'",
            &[&slot],
        )
        .unwrap()
        .get(0);
    // The server's restart_lsn stands exactly where the diagnosis says it is held.
    assert_eq!(fmt_lsn(rl), held_at, "restart_lsn vs the diagnosis");
    let cat = of_kind(&d, "catalog_xmin held");
    assert_eq!(cat.len(), 1, "{d:#?}");
    assert_eq!((cat[0].xid, cat[0].pid), (Some(h_xid), Some(h_pid)));
    // The server's catalog_xmin stands where the diagnosis says it is held.
    let held_text: String = c
        .query_one(
            "SELECT substring(finding from 'is held at ([0-9]+)') FROM snapbuild_diagnose($1) WHERE kind = 'catalog_xmin held'",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(cx.to_string(), held_text, "catalog_xmin vs the diagnosis");
    assert!(d.iter().all(|r| r.pid != Some(decoy_pid)), "{d:#?}");

    // Ending the session not named moves nothing.
    decoy.batch_execute("COMMIT").unwrap();
    advance(&env, &mut c, slot);
    assert_eq!(
        slot_horizons(&mut c, slot),
        (cx, rl),
        "moved without the holder ending"
    );
    // Ending the named one: both move on.
    h.commit();
    advance(&env, &mut c, slot);
    let (cx2, rl2) = slot_horizons(&mut c, slot);
    assert!(
        cx2 > cx && rl2 > rl,
        "catalog_xmin {cx} -> {cx2}, restart_lsn {} -> {}",
        fmt_lsn(rl),
        fmt_lsn(rl2)
    );
    let d = diagnose(&mut c, slot);
    assert!(
        d.iter()
            .all(|r| r.kind != "restart_lsn held" && r.kind != "catalog_xmin held"),
        "{d:#?}"
    );
    println!(
        "pgsnap-counts: d5 held at catalog_xmin {cx} restart_lsn {}; after the holder: {cx2} {}",
        fmt_lsn(rl),
        fmt_lsn(rl2)
    );
}

/// Puts `max_slot_wal_keep_size` back when the test ends.
struct KeepSizeGuard(Env);

impl Drop for KeepSizeGuard {
    fn drop(&mut self) {
        if let Ok(mut c) = std::panic::catch_unwind(|| self.0.connect("pgsnap-diag-cleanup")) {
            let _ = c.batch_execute("ALTER SYSTEM RESET max_slot_wal_keep_size");
            let _ = c.batch_execute("SELECT pg_reload_conf()");
        }
    }
}

#[test]
fn d7_invalidated_slot_is_the_only_finding() {
    let slot = "pgsnap_diag_d7";
    let Some((_g, env, mut c, _guard)) = start_with_created_slot(slot, "pgsnap_diag_held") else {
        return;
    };
    let _keep = KeepSizeGuard(env.clone());
    c.batch_execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    // The server removes the WAL the slot needs at a checkpoint once it is past the limit.
    wait_for(
        "the slot's wal_status to be lost",
        Duration::from_secs(60),
        || {
            for sql in [
                "INSERT INTO pgsnap_diag_held SELECT generate_series(1, 20000)",
                "SELECT pg_switch_wal()",
                "CHECKPOINT",
            ] {
                c.batch_execute(sql).unwrap();
            }
            let st: Option<String> = c
                .query_one(
                    "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1",
                    &[&slot],
                )
                .unwrap()
                .get(0);
            st.as_deref() == Some("lost")
        },
    );
    let reason: Option<String> = if env.major >= 17 {
        c.query_one(
            "SELECT invalidation_reason FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0)
    } else {
        Some("wal_removed".into())
    };
    let d = diagnose(&mut c, slot);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].kind, "invalidated");
    let finding: String = c
        .query_one("SELECT finding FROM snapbuild_diagnose($1)", &[&slot])
        .unwrap()
        .get(0);
    let reason = reason.expect("the server's invalidation_reason");
    assert!(
        finding.contains(&reason),
        "{finding} vs the server's {reason}"
    );
    let state: Option<String> = c
        .query_one(
            "SELECT state FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    assert_eq!(state.as_deref(), Some("invalidated"));
    println!("pgsnap-counts: d7 invalidated ({reason}): {finding}");
}

/// The `forecast` row of `snapbuild_diagnose` for `xid`: (lsn, bytes, forecast
/// catalog_xmin, finding).
fn forecast_row(
    c: &mut Client,
    slot: &str,
    xid: u64,
) -> (Option<u64>, Option<i64>, Option<u64>, String) {
    let rows = c
        .query(
            "SELECT lsn::text, bytes, forecast_catalog_xmin::text, finding
               FROM snapbuild_diagnose($1) WHERE kind = 'forecast' AND xid::text = $2",
            &[&slot, &xid.to_string()],
        )
        .unwrap();
    assert_eq!(rows.len(), 1, "one forecast row for xid {xid}: {rows:?}");
    let r = &rows[0];
    let out = (
        r.get::<_, Option<String>>(0).map(|l| parse_lsn(&l)),
        r.get(1),
        r.get::<_, Option<String>>(2).map(|x| x.parse().unwrap()),
        r.get::<_, String>(3),
    );
    println!("pgsnap-forecast: {slot}: xid {xid}: {}", out.3);
    out
}

#[test]
fn d8_forecast_matches_the_slot_after_the_holder_ends() {
    let slot = "pgsnap_diag_d8";
    let Some((_g, env, mut c, _guard)) = start_with_created_slot(slot, "pgsnap_diag_held") else {
        return;
    };
    advance(&env, &mut c, slot);
    // x writes first; after a serialized RUNNING_XACTS y writes too: y's restart point is
    // later than x's.
    let mut x = OpenXact::begin(&env, "pgsnap-diag-forecast-x");
    x.exec("INSERT INTO pgsnap_diag_held VALUES (1)");
    advance(&env, &mut c, slot);
    let mut y = OpenXact::begin(&env, "pgsnap-diag-forecast-y");
    y.exec("INSERT INTO pgsnap_diag_held VALUES (2)");
    advance(&env, &mut c, slot);
    let (cx, rl) = slot_horizons(&mut c, slot);
    let d = diagnose(&mut c, slot);
    assert_eq!(
        of_kind(&d, "restart_lsn held")[0].xid,
        Some(x.xid),
        "{d:#?}"
    );
    let (f_lsn, f_bytes, f_cat, f_text) = forecast_row(&mut c, slot, x.xid);
    let f_lsn = f_lsn.unwrap_or_else(|| panic!("a known restart_lsn target: {f_text}"));
    assert!(f_lsn > rl, "{f_text}");

    // x ends; the consumer confirms past the RUNNING_XACTS records logged after it.
    let x_xid = x.xid;
    x.commit();
    // One decoding session (as a walsender consumer keeps running): the forecast's
    // scope. A decoder restarted at the new restart_lsn takes base snapshots from the
    // .snap file there, which can move catalog_xmin on (the forecast says so).
    env.log_standby_snapshot_flushed(&mut c, "pgsnap_diag_held", "0");
    consume_changes(&mut c, slot);
    let (cx2, rl2) = slot_horizons(&mut c, slot);
    assert_eq!(
        fmt_lsn(rl2),
        fmt_lsn(f_lsn),
        "restart_lsn after x ended vs the forecast ({f_text})"
    );
    assert_eq!(
        f_bytes,
        Some((rl2 - rl) as i64),
        "bytes vs restart_lsn's move"
    );
    assert_eq!(
        Some(cx2),
        f_cat,
        "catalog_xmin after x ended (was {cx}) vs the forecast ({f_text})"
    );

    // y alone: the target is the RUNNING_XACTS logged after it ends.
    let (f_lsn, f_bytes, f_cat, f_text) = forecast_row(&mut c, slot, y.xid);
    assert_eq!((f_lsn, f_bytes, f_cat), (None, None, None), "{f_text}");
    assert!(f_text.contains("to that RUNNING_XACTS record"), "{f_text}");
    let next_xid = c
        .query_one(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::int8",
            &[],
        )
        .unwrap()
        .get::<_, i64>(0) as u64;
    let y_xid = y.xid;
    let ended_at = {
        let l = y.insert_lsn();
        y.commit();
        l
    };
    env.log_standby_snapshot_flushed(&mut c, "pgsnap_diag_held", "3");
    consume_changes(&mut c, slot);
    let (cx3, rl3) = slot_horizons(&mut c, slot);
    let to = flush_lsn(&mut c);
    let after = wal_running_xacts(&mut c, ended_at, to);
    let first = after
        .first()
        .expect("a RUNNING_XACTS after y's commit in the WAL");
    assert_eq!(
        fmt_lsn(rl3),
        fmt_lsn(first.start),
        "restart_lsn after y ended vs the first RUNNING_XACTS after it ({f_text})"
    );
    assert_eq!(
        cx3, first.oldest_running_xid,
        "catalog_xmin after y ended vs that record's oldestRunningXid"
    );
    assert!(
        cx3 >= next_xid,
        "catalog_xmin {cx3} is at least the next xid {next_xid} then"
    );
    println!(
        "pgsnap-counts: d8 forecast for x {x_xid}: restart_lsn {} -> {} (= forecast), catalog_xmin {cx} -> {cx2} (= forecast); for y {y_xid}: restart_lsn -> {} (the first RUNNING_XACTS after its commit)",
        fmt_lsn(rl),
        fmt_lsn(rl2),
        fmt_lsn(rl3)
    );
}

/// `VACUUM (VERBOSE) pg_catalog.pg_class` in a new session: the removable cutoff it
/// reports (15+: `removable cutoff: N`; 14: `oldest xmin: N`).
fn vacuum_cutoff(env: &Env) -> u64 {
    let notices = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = notices.clone();
    let mut cfg = postgres::Config::new();
    cfg.host(&env.host)
        .port(env.port)
        .user(&env.user)
        .dbname(&env.dbname)
        .application_name("pgsnap-diag-vacuum")
        .notice_callback(move |n| {
            // 14 puts the cutoff in the DETAIL
            let text = format!("{}\n{}", n.message(), n.detail().unwrap_or(""));
            sink.lock().unwrap().push(text)
        });
    let mut v = cfg.connect(postgres::NoTls).unwrap();
    v.batch_execute("VACUUM (VERBOSE) pg_catalog.pg_class")
        .unwrap();
    let re = regex::Regex::new(r"(?:removable cutoff|oldest xmin): (\d+)").unwrap();
    let all = notices.lock().unwrap().join("\n");
    let m = re
        .captures(&all)
        .unwrap_or_else(|| panic!("no cutoff in VACUUM VERBOSE's output: {all}"));
    m[1].parse().unwrap()
}

/// The `catalog horizon` row: (xid, finding).
fn horizon_row(c: &mut Client, slot: &str) -> (u64, String) {
    let r = c
        .query_one(
            "SELECT xid::text, finding FROM snapbuild_diagnose($1) WHERE kind = 'catalog horizon'",
            &[&slot],
        )
        .unwrap();
    let out = (r.get::<_, String>(0).parse().unwrap(), r.get(1));
    println!("pgsnap-horizon: {slot}: {}", out.1);
    out
}

#[test]
fn d9_catalog_horizon_is_vacuums_cutoff() {
    let slot = "pgsnap_diag_d9";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    // A snapshot taken before the slot exists, with xids assigned after it.
    let mut old = env.connect("pgsnap-diag-old-snapshot");
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class")
        .unwrap();
    let old_pid = backend_pid(&mut old);
    let old_xmin = c
        .query_one(
            "SELECT backend_xmin::text::int8 FROM pg_stat_activity WHERE pid = $1",
            &[&old_pid],
        )
        .unwrap()
        .get::<_, i64>(0) as u64;
    for _ in 0..3 {
        c.batch_execute("SELECT pg_current_xact_id()").unwrap();
    }
    create_slot(&env, slot);
    let (cx, _) = slot_horizons(&mut c, slot);
    assert!(
        cx > old_xmin,
        "catalog_xmin {cx} vs the old snapshot's xmin {old_xmin}"
    );
    let (h_xid, h_text) = horizon_row(&mut c, slot);
    assert_eq!(h_xid, old_xmin, "{h_text}");
    assert!(
        h_text.contains("is not the cluster's oldest horizon")
            && h_text.contains(&format!("pid {old_pid} ")),
        "{h_text}"
    );
    let cutoff = vacuum_cutoff(&env);
    assert_eq!(
        cutoff, old_xmin,
        "VACUUM's cutoff vs the older snapshot's xmin"
    );

    // The old snapshot ends: the slot's catalog_xmin is the oldest, and VACUUM stops there.
    old.batch_execute("COMMIT").unwrap();
    let (h_xid, h_text) = horizon_row(&mut c, slot);
    assert_eq!(h_xid, cx, "{h_text}");
    assert!(
        h_text.contains("is the cluster's oldest xmin horizon"),
        "{h_text}"
    );
    let cutoff2 = vacuum_cutoff(&env);
    assert_eq!(cutoff2, cx, "VACUUM's cutoff vs the slot's catalog_xmin");
    println!(
        "pgsnap-counts: d9 VACUUM cutoff {cutoff} = pid {old_pid}'s xmin (named), then {cutoff2} = the slot's catalog_xmin (named)"
    );
}

#[test]
fn d10_running_xacts_age_counts_the_pause() {
    let slot = "pgsnap_diag_d10";
    let Some((_g, env, mut c, _guard)) = start_with_created_slot(slot, "pgsnap_diag_held") else {
        return;
    };
    let mut m = env.connect("pgsnap-diag-monitor");
    let f0 = flush_lsn(&mut c);
    env.log_standby_snapshot_flushed(&mut c, "pgsnap_diag_held", "4");
    let f1 = flush_lsn(&mut c);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    let r = m
        .query_one(
            "SELECT last_running_xacts::text, running_xacts_age_s FROM snapbuild_slot_health
              WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap();
    let elapsed = t0.elapsed().as_secs_f64();
    let last = parse_lsn(&r.get::<_, String>(0));
    let age: f64 = r.get(1);
    let f2 = flush_lsn(&mut c);
    println!(
        "pgsnap-counts: d10 RUNNING_XACTS at {} age {age:.2} s after a pause of {elapsed:.2} s (WAL flushed meanwhile: {} bytes)",
        fmt_lsn(last),
        f2 - f1
    );
    assert!(age >= 0.0 && age <= elapsed + 3.0, "age {age} vs {elapsed}");
    if f2 == f1 && last >= f0 && last < f1 {
        // Nothing was written after our record: its segment was last written with it.
        assert!(age >= 2.0, "age {age} after a pause of {elapsed:.2} s");
    } else {
        println!("pgsnap-undecided: d10 WAL was written during the pause; only the upper bound is checked");
    }
}

/// Every row of `snapbuild_diagnose`, all its columns as one text, in row order.
fn diagnose_rows(c: &mut Client, slot: &str) -> Vec<String> {
    query_column(
        c,
        "SELECT d::text FROM snapbuild_diagnose($1) d",
        &[&slot],
        &format!("snapbuild_diagnose({slot})"),
    )
}

#[test]
fn d11_diagnose_resumes_the_kept_replay_and_matches_a_full_one() {
    let slot = "pgsnap_diag_d11";
    let Some((_g, env, mut c, _guard)) = start_with_created_slot(slot, "pgsnap_diag_held") else {
        return;
    };
    advance(&env, &mut c, slot);
    let mut h = OpenXact::begin(&env, "pgsnap-diag-resume-holder");
    h.exec("INSERT INTO pgsnap_diag_held VALUES (1)");
    advance(&env, &mut c, slot);
    let mut m = env.connect("pgsnap-diag-resume");
    let cold = diagnose_rows(&mut m, slot);
    assert!(
        cold.iter()
            .any(|r| r.starts_with("(\"restart_lsn held\",") && r.contains(&format!(",{},", h.xid))),
        "{cold:#?}"
    );
    // About 4 MB more, then the same session asks again, and a new one.
    c.batch_execute("INSERT INTO pgsnap_diag_held SELECT generate_series(1, 60000)")
        .unwrap();
    // Compared at one flush position (a background RUNNING_XACTS may come between).
    let mut compared = None;
    for _ in 0..5 {
        let f0 = flush_lsn(&mut c);
        let warm = diagnose_rows(&mut m, slot);
        let mut m2 = env.connect_unshared("pgsnap-diag-resume-new");
        let full = diagnose_rows(&mut m2, slot);
        if flush_lsn(&mut c) == f0 {
            assert_eq!(warm, full, "resumed vs full replay of the same WAL");
            compared = Some((f0, warm.len()));
            break;
        }
    }
    let (f0, n) = compared.expect("no flush position stood still across two diagnoses");
    // The kept replay is the one the health view resumes: nothing new to read.
    let left: i64 = m
        .query_one(
            "SELECT replayed_bytes FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    let flushed_since = (flush_lsn(&mut c) - f0) as i64;
    assert!(
        left <= flushed_since + 8192,
        "the health scrape after the diagnosis read {left} bytes; {flushed_since} flushed since"
    );
    h.commit();
    println!(
        "pgsnap-counts: d11 {n} rows of the resumed diagnosis = a new session's full replay; the health scrape after it read {left} bytes"
    );
}

#[test]
fn d12_one_read_for_all_slots_gives_each_slots_own_replay() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let slots = ["pgsnap_diag_d12a", "pgsnap_diag_d12b", "pgsnap_diag_d12c"];
    let _guards: Vec<SlotGuard> = slots.iter().map(|s| SlotGuard::new(&env, s)).collect();
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_diag_held (i int)")
        .unwrap();
    // Three slots created about 1 MB of WAL apart, the second consumed past a
    // transaction left open: three restart_lsns, three builders, one held.
    create_slot(&env, slots[0]);
    c.batch_execute("INSERT INTO pgsnap_diag_held SELECT generate_series(1, 15000)")
        .unwrap();
    create_slot(&env, slots[1]);
    c.batch_execute("INSERT INTO pgsnap_diag_held SELECT generate_series(1, 15000)")
        .unwrap();
    create_slot(&env, slots[2]);
    let mut h = OpenXact::begin(&env, "pgsnap-diag-d12-holder");
    h.exec("INSERT INTO pgsnap_diag_held VALUES (1)");
    advance(&env, &mut c, slots[1]);
    c.batch_execute("INSERT INTO pgsnap_diag_held SELECT generate_series(1, 15000)")
        .unwrap();
    // A RUNNING_XACTS past the second slot's confirmed_flush: there its replay and the
    // third's hold the same things (the first's holds the open transaction with an older
    // base snapshot), and one read feeds them as one from there.
    env.log_standby_snapshot_flushed(&mut c, "pgsnap_diag_held", "0");
    let compare = |c: &mut Client, round: &str| {
        for _ in 0..5 {
            let f0 = flush_lsn(c);
            // One scrape replays all three from one read of the WAL, those that came
            // to the same state fed as one (the server log's DEBUG1 line counts them);
            // the diagnoses after it in the same session resume those replays.
            let mut all = env.connect_unshared("pgsnap-diag-d12-all");
            all.batch_execute("SET pg_snapbuild.join_replays = on; SET log_min_messages = debug1")
                .unwrap();
            let log0 = log_offset(&env);
            let bytes = replayed_bytes(&mut all, &slots);
            all.batch_execute("RESET log_min_messages").unwrap();
            let followed = log_entries_since(&env, log0)
                .iter()
                .filter_map(|e| {
                    let m = e.message.strip_prefix("pg_snapbuild: ")?;
                    m.contains("followed another's")
                        .then(|| m.split(' ').next()?.parse::<usize>().ok())?
                })
                .sum::<usize>();
            let one_pass = health_rows(&mut all, &slots);
            let warm: Vec<Vec<String>> = slots.iter().map(|s| diagnose_rows(&mut all, s)).collect();
            // Each slot alone, in a session of its own: its own read of the WAL.
            let alone: Vec<Vec<String>> = slots
                .iter()
                .map(|s| diagnose_rows(&mut env.connect_unshared("pgsnap-diag-d12-one"), s))
                .collect();
            // The health numbers after the three single replays, in one session.
            let mut each = env.connect_unshared("pgsnap-diag-d12-each");
            for s in slots {
                diagnose_rows(&mut each, s);
            }
            let after_each = health_rows(&mut each, &slots);
            if flush_lsn(c) != f0 {
                continue;
            }
            assert_eq!(one_pass.len(), 3, "{one_pass:#?}");
            assert_eq!(
                one_pass, after_each,
                "{round}: health from one read vs per slot"
            );
            for (i, s) in slots.iter().enumerate() {
                assert_eq!(
                    warm[i], alone[i],
                    "{round}: {s}: diagnosis from one read vs alone"
                );
            }
            return (f0, bytes, warm, followed);
        }
        panic!("{round}: no flush position stood still across the scrapes");
    };
    let (f0, bytes, warm, followed) = compare(&mut c, "three slots");
    // From 15 on, the comparison above covered a replay that followed another's. On 14
    // every slot keeps the point where it became consistent (initial_consistent_point,
    // which 15 keeps, as two_phase_at, for two-phase slots only) and its builder carries
    // it, so two slots' replays never come to the same state; the comparison holds all
    // the same.
    if env.major >= 15 {
        assert!(followed >= 1, "no replay followed another's");
    }
    // The held one names the open transaction; each replay took its own slot's WAL.
    assert!(
        warm[1]
            .iter()
            .any(|r| r.starts_with("(\"restart_lsn held\",") && r.contains(&format!(",{},", h.xid))),
        "{:#?}",
        warm[1]
    );
    for (i, s) in slots.iter().enumerate() {
        let rl = server_slot(&mut c, s).restart_lsn;
        assert!(
            bytes[i] > 0 && bytes[i] <= (f0 - rl) as i64,
            "{s}: took {} bytes, {} from restart_lsn to the flush position",
            bytes[i],
            f0 - rl
        );
    }
    assert!(bytes[0] > bytes[2], "{bytes:?}");
    // Churn: the holder ends, the third slot is dropped and created again (a later
    // restart_lsn), the first consumed (its restart_lsn moves): a session that scraped
    // before resumes what it can.
    let mut kept = env.connect_unshared("pgsnap-diag-d12-kept");
    kept.batch_execute("SET pg_snapbuild.join_replays = on")
        .unwrap();
    health_rows(&mut kept, &slots);
    h.commit();
    c.execute("SELECT pg_drop_replication_slot($1)", &[&slots[2]])
        .unwrap();
    c.batch_execute("INSERT INTO pgsnap_diag_held SELECT generate_series(1, 15000)")
        .unwrap();
    create_slot(&env, slots[2]);
    advance(&env, &mut c, slots[0]);
    let mut compared = false;
    for _ in 0..5 {
        let f1 = flush_lsn(&mut c);
        let resumed = health_rows(&mut kept, &slots);
        let fresh = health_rows(&mut env.connect_unshared("pgsnap-diag-d12-fresh"), &slots);
        if flush_lsn(&mut c) == f1 {
            assert_eq!(resumed, fresh, "after churn: resumed vs a new session");
            compared = true;
            break;
        }
    }
    assert!(compared, "no flush position stood still across two scrapes");
    println!(
        "pgsnap-counts: d12 3 slots: one read ({followed} replays following another's) = each alone ({} diagnosis rows), health equal; bytes taken {bytes:?}; after drop/create and a restart_lsn move: resumed = new session",
        warm.iter().map(Vec::len).sum::<usize>()
    );
}
