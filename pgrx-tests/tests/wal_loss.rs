//! The WAL loss forecast (`snapbuild_slot_health`'s `wal_loss_*` columns, the `wal loss
//! forecast` finding, the watcher's line) against what the server really does.
//!
//! - w1: with `max_slot_wal_keep_size = 64MB` and a slot nobody consumes, WAL is written
//!   up to several positions below the predicted `wal_loss_lsn` (the last one a few kB
//!   below) and a `CHECKPOINT` taken at each: every checkpoint whose record starts below
//!   it leaves the slot valid, and `wal_status` is `reserved` or `extended` while the
//!   write position is below it; past it `wal_status` is `unreserved`, and the first
//!   checkpoint invalidates the slot (`invalidation_reason = 'wal_removed'` on 17+,
//!   `wal_status = 'lost'` on 14–16). Where the server shows `safe_wal_size`, the write
//!   position plus it is the predicted LSN.
//! - w2: at a steady rate of transactions (each commit dates the WAL), the predicted
//!   `wal_loss_in_s` is within 25 % of the time the server takes to turn the slot
//!   `unreserved`; the watcher logs the forecast once; a checkpoint then invalidates it.
//! - w3 (18): with `idle_replication_slot_timeout`, the predicted time is the server's
//!   `inactive_since` plus the timeout; a checkpoint before it leaves the slot valid, the
//!   first one after it invalidates it (`idle_timeout`).
//!
//! Each comparison is counted and the counts printed (`--nocapture`).

use pg_snapbuild_tests::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEG: u64 = 16 << 20;

/// Server settings changed by a test (ALTER SYSTEM), reset when it ends.
struct Settings {
    env: Env,
    names: Vec<&'static str>,
}

impl Settings {
    fn set(env: &Env, c: &mut Client, values: &[(&'static str, &str)]) -> Settings {
        let mut names = Vec::new();
        for (k, v) in values {
            c.batch_execute(&format!("ALTER SYSTEM SET {k} = '{v}'"))
                .unwrap();
            names.push(*k);
        }
        reload(c);
        for (k, v) in values {
            let got: String = c
                .query_one(&format!("SELECT current_setting('{k}')"), &[])
                .unwrap()
                .get(0);
            assert!(
                got.eq_ignore_ascii_case(v) || got == format!("{v}B"),
                "{k} = {got}, wanted {v}"
            );
        }
        Settings {
            env: env.clone(),
            names,
        }
    }
}

impl Drop for Settings {
    fn drop(&mut self) {
        let mut c = self.env.connect("pgsnap-wal-loss-reset");
        for k in &self.names {
            let _ = c.batch_execute(&format!("ALTER SYSTEM RESET {k}"));
        }
        reload(&mut c);
    }
}

/// Reloads the configuration and gives the checkpointer time to take it.
fn reload(c: &mut Client) {
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(Duration::from_millis(700));
}

/// The forecast columns of the slot's health row.
#[derive(Debug)]
struct Loss {
    lsn: Option<u64>,
    in_s: Option<f64>,
    at_epoch: Option<f64>,
    cause: Option<String>,
    consumer_attached: bool,
}

fn loss(c: &mut Client, slot: &str) -> Loss {
    let r = c
        .query_one(
            "SELECT wal_loss_lsn::text, wal_loss_in_s, extract(epoch FROM wal_loss_at)::float8, \
             wal_loss_cause, consumer_attached FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap();
    Loss {
        lsn: r.get::<_, Option<String>>(0).map(|s| parse_lsn(&s)),
        in_s: r.get(1),
        at_epoch: r.get(2),
        cause: r.get(3),
        consumer_attached: r.get(4),
    }
}

/// The server's verdict on the slot: `wal_status`, and whether it is invalidated
/// (`invalidation_reason` on 17+, `wal_status = 'lost'` before), with the reason.
fn server_state(env: &Env, c: &mut Client, slot: &str) -> (Option<String>, Option<String>) {
    let sql = if env.major >= 17 {
        "SELECT wal_status, invalidation_reason FROM pg_replication_slots WHERE slot_name = $1"
    } else {
        "SELECT wal_status, CASE WHEN wal_status = 'lost' THEN 'wal_removed' END FROM pg_replication_slots WHERE slot_name = $1"
    };
    let r = c.query_one(sql, &[&slot]).unwrap();
    (r.get(0), r.get(1))
}

/// Writes WAL (non-transactional logical messages) until the insert position is at
/// `target` or just below it.
fn advance_to(c: &mut Client, target: u64) {
    loop {
        let at = insert_lsn(c);
        if at + 512 >= target {
            return;
        }
        let n = ((target - at) * 98 / 100)
            .saturating_sub(256)
            .clamp(64, 1 << 20);
        c.query_one(
            "SELECT pg_logical_emit_message(false, 'pgsnap_wal_loss', repeat('x', $1))",
            &[&(n as i32)],
        )
        .unwrap();
    }
}

/// CHECKPOINT; the start of its record.
fn checkpoint(c: &mut Client) -> u64 {
    c.batch_execute("CHECKPOINT").unwrap();
    let s: String = c
        .query_one(
            "SELECT checkpoint_lsn::text FROM pg_control_checkpoint()",
            &[],
        )
        .unwrap()
        .get(0);
    parse_lsn(&s)
}

/// Comparisons of a prediction with the server, and the wrong ones.
#[derive(Default)]
struct Tally {
    compared: u32,
    wrong: Vec<String>,
}

impl Tally {
    fn check(&mut self, ok: bool, what: String) {
        self.compared += 1;
        if !ok {
            self.wrong.push(what);
        }
    }

    fn finish(self, test: &str, major: u32) {
        println!(
            "{test} on {major}: {} predictions compared with the server, {} wrong",
            self.compared,
            self.wrong.len()
        );
        assert!(self.wrong.is_empty(), "{:#?}", self.wrong);
    }
}

/// Compares `wal_status` with the write position against the predicted LSN:
/// `unreserved` exactly from it on (GetWALAvailability), `reserved`/`extended` before.
fn check_status(env: &Env, c: &mut Client, slot: &str, lsn: u64, t: &mut Tally) {
    let write: String = c
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    let write = parse_lsn(&write);
    let (status, _) = server_state(env, c, slot);
    let status = status.unwrap_or_default();
    let want_unreserved = write >= lsn;
    let ok = if want_unreserved {
        status == "unreserved"
    } else {
        status == "reserved" || status == "extended"
    };
    t.check(
        ok,
        format!(
            "wal_status {status} at write position {} (predicted loss LSN {})",
            fmt_lsn(write),
            fmt_lsn(lsn)
        ),
    );
}

#[test]
fn w1_the_first_checkpoint_past_the_loss_lsn_invalidates_the_slot() {
    let slot = "pgsnap_wal_loss_w1";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let _settings = Settings::set(
        &env,
        &mut c,
        &[("max_slot_wal_keep_size", "64MB"), ("wal_keep_size", "0")],
    );
    create_slot(&env, slot);
    let mut t = Tally::default();
    let l = loss(&mut c, slot);
    assert_eq!(l.cause.as_deref(), Some("wal_removed"), "{l:?}");
    assert!(!l.consumer_attached, "{l:?}");
    let lsn = l.lsn.expect("wal_loss_lsn");
    let restart = server_slot(&mut c, slot).restart_lsn;
    assert!(lsn > restart, "{l:?}");

    // The server's own count, where it gives one (after a checkpoint removed a segment).
    for _ in 0..3 {
        let r = c
            .query_one(
                "SELECT (pg_current_wal_lsn() + safe_wal_size)::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap();
        if let Some(s) = r.get::<_, Option<String>>(0) {
            let server = parse_lsn(&s);
            if server == lsn {
                t.check(true, String::new());
                break;
            }
            // WAL written between the two reads: try again.
            if server != lsn && t.compared == 0 {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        break;
    }

    // Checkpoints below it: the slot stays.
    for below in [3 * SEG, 2 * SEG, SEG - 65536, 16384] {
        let target = lsn.saturating_sub(below);
        if target <= insert_lsn(&mut c) {
            continue;
        }
        advance_to(&mut c, target);
        check_status(&env, &mut c, slot, lsn, &mut t);
        let cp = checkpoint(&mut c);
        let (_, invalidated) = server_state(&env, &mut c, slot);
        if cp + 1024 > lsn {
            // The checkpoint's record may end past it: no claim either way.
            continue;
        }
        t.check(
            invalidated.is_none(),
            format!(
                "a checkpoint at {} (below the predicted {}) invalidated the slot: {invalidated:?}",
                fmt_lsn(cp),
                fmt_lsn(lsn)
            ),
        );
        // Still predicted at the same position.
        let again = loss(&mut c, slot);
        t.check(
            again.lsn == Some(lsn),
            format!("the forecast moved: {again:?}"),
        );
    }

    // Past it: unreserved, and the next checkpoint invalidates the slot.
    advance_to(&mut c, lsn + 16384);
    check_status(&env, &mut c, slot, lsn, &mut t);
    let past = loss(&mut c, slot);
    t.check(
        past.in_s == Some(0.0),
        format!("past the loss LSN, wal_loss_in_s is {:?}", past.in_s),
    );
    let cp = checkpoint(&mut c);
    let (status, invalidated) = server_state(&env, &mut c, slot);
    t.check(
        cp >= lsn && invalidated.as_deref() == Some("wal_removed"),
        format!(
            "the checkpoint at {} (past the predicted {}) left the slot {status:?} {invalidated:?}",
            fmt_lsn(cp),
            fmt_lsn(lsn)
        ),
    );
    // Invalidated: no forecast any more.
    let gone = loss(&mut c, slot);
    assert_eq!((gone.lsn, gone.cause.as_deref()), (None, None), "{gone:?}");
    t.finish("w1", env.major);
}

#[test]
fn w2_the_predicted_time_at_a_steady_rate() {
    let slot = "pgsnap_wal_loss_w2";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let _settings = Settings::set(
        &env,
        &mut c,
        &[
            ("max_slot_wal_keep_size", "32MB"),
            ("wal_keep_size", "0"),
            // the test clusters keep the watcher idle (scripts/cluster.sh)
            ("pg_snapbuild.log_loss_within", "1h"),
        ],
    );
    let offset = server_log_offset(&env);
    create_slot(&env, slot);
    // About 1.5 MB/s, in transactions of 50 kB paced every 100 ms.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let mut w = env.connect("pgsnap-wal-loss-load");
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut tick = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..3 {
                    w.batch_execute(
                        "SELECT pg_logical_emit_message(true, 'pgsnap_wal_loss', repeat('x', 50000))",
                    )
                    .unwrap();
                }
                tick += 1;
                let next = t0 + Duration::from_millis(100) * tick;
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
            }
        })
    };
    std::thread::sleep(Duration::from_secs(12));
    let asked = Instant::now();
    let l = loss(&mut c, slot);
    let mut t = Tally::default();
    let lsn = l.lsn.expect("wal_loss_lsn");
    let predicted = l.in_s.unwrap_or_else(|| panic!("no predicted time: {l:?}"));
    assert_eq!(l.cause.as_deref(), Some("wal_removed"));
    // The server turns the slot unreserved when the write position reaches it.
    let mut status = String::new();
    wait_for(
        "the slot to be unreserved",
        Duration::from_secs(120),
        || {
            status = server_state(&env, &mut c, slot).0.unwrap_or_default();
            if status == "unreserved" || status == "lost" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
            false
        },
    );
    let observed = asked.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    t.check(
        (predicted - observed).abs() <= 0.25 * observed,
        format!("predicted {predicted:.1} s, the server took {observed:.1} s"),
    );
    println!(
        "w2 on {}: predicted {predicted:.1} s, observed {observed:.1} s",
        env.major
    );
    let write: String = c
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .unwrap()
        .get(0);
    t.check(
        parse_lsn(&write) >= lsn,
        format!(
            "unreserved at {write}, below the predicted {}",
            fmt_lsn(lsn)
        ),
    );
    // The diagnosis' row.
    let d = json_rows(
        &mut c,
        "SELECT lsn::text AS lsn, finding, remedy FROM snapbuild_diagnose($1) WHERE kind = 'wal loss forecast'",
        &[&slot],
    )
    .unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(jlsn(&d[0], "lsn"), Some(lsn));
    let finding = js(&d[0], "finding").unwrap();
    assert!(finding.contains("no process is using slot"), "{finding}");
    // The watcher's line, once, where the watcher runs.
    if let Some(pid) = watcher(&mut c) {
        let prefix =
            format!("logical replication slot \"{slot}\" will be invalidated (wal_removed)");
        let lines = wait_for_lines(&env, offset, pid, &prefix, Duration::from_secs(30));
        std::thread::sleep(Duration::from_secs(6));
        let lines2 = watcher_lines(&env, offset, pid, &prefix);
        assert_eq!(lines2.len(), 1, "{lines:?} {lines2:?}");
    }
    let cp = checkpoint(&mut c);
    let (_, invalidated) = server_state(&env, &mut c, slot);
    t.check(
        invalidated.as_deref() == Some("wal_removed"),
        format!("the checkpoint at {} left the slot valid", fmt_lsn(cp)),
    );
    t.finish("w2", env.major);
}

/// The watcher's pid, if it runs.
fn watcher(c: &mut Client) -> Option<i32> {
    c.query_opt(
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher'",
        &[],
    )
    .unwrap()
    .map(|r| r.get(0))
}

fn server_log_offset(env: &Env) -> u64 {
    log_offset(env)
}

#[test]
fn w3_idle_timeout_of_18() {
    let slot = "pgsnap_wal_loss_w3";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    if env.major < 18 {
        println!("w3: idle_replication_slot_timeout is 18's");
        return;
    }
    let _settings = Settings::set(
        &env,
        &mut c,
        &[
            ("max_slot_wal_keep_size", "-1"),
            ("idle_replication_slot_timeout", "8s"),
        ],
    );
    create_slot(&env, slot);
    let mut t = Tally::default();
    let l = loss(&mut c, slot);
    let since: f64 = c
        .query_one(
            "SELECT extract(epoch FROM inactive_since)::float8 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap()
        .get(0);
    let at = l.at_epoch.expect("wal_loss_at");
    t.check(
        l.cause.as_deref() == Some("idle_timeout") && (at - (since + 8.0)).abs() < 1e-3,
        format!("{l:?}: inactive_since {since} + 8 s"),
    );
    assert_eq!(l.lsn, None, "{l:?}");
    // Before it: a checkpoint leaves the slot.
    let now: f64 = c
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0);
    if now < at - 2.0 {
        checkpoint(&mut c);
        let (_, invalidated) = server_state(&env, &mut c, slot);
        t.check(
            invalidated.is_none(),
            format!(
                "a checkpoint {:.1} s before the predicted time invalidated it",
                at - now
            ),
        );
    }
    // After it: the first checkpoint invalidates it.
    let now: f64 = c
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .unwrap()
        .get(0);
    std::thread::sleep(Duration::from_secs_f64((at - now).max(0.0) + 1.0));
    let past = loss(&mut c, slot);
    t.check(past.in_s == Some(0.0), format!("past the time: {past:?}"));
    checkpoint(&mut c);
    let (_, invalidated) = server_state(&env, &mut c, slot);
    t.check(
        invalidated.as_deref() == Some("idle_timeout"),
        format!("the checkpoint after the predicted time: {invalidated:?}"),
    );
    t.finish("w3", env.major);
}
