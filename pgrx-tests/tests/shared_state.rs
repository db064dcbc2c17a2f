//! The slots' replays in shared memory (`shared_preload_libraries = 'pg_snapbuild'`, as
//! the test clusters run): a new session's `snapbuild_slot_health` and `snapbuild_diagnose`
//! resume what another session left there, and must give exactly what a full replay of
//! the same WAL gives (a session with `pg_snapbuild.shared_state = off`, which replays every
//! slot from its restart_lsn), compared at one flush position:
//!
//! - sh1: three slots at three restart_lsns, one held by an open transaction. A new
//!   session after another one scraped reads only the WAL flushed since (`replay_state` =
//!   `shared`), and its health rows and diagnoses equal the full replay's; again after
//!   churn (the holder commits, a slot dropped and created again, another consumed so its
//!   restart_lsn moves); with four sessions scraping at once; and after a crash restart
//!   (the area is made anew and filled again by the next scrape).
//! - sh2: the same server restarted without the preload. On PostgreSQL 17 and later the
//!   replays go to a named dynamic shared memory segment the first session makes: a new
//!   session resumes them (`shared`, reading only what was flushed since) and its rows
//!   equal a full replay's, also after churn. On 14 to 16 every session replays on its
//!   own and the view says `backend`. On 17+ the same on a standby without the preload
//!   (the segment is the standby's own): a new session there resumes what another left
//!   and equals a full replay at one replay position. The preload is put back (a restart)
//!   at the end.
//! - sh3: a slot dropped and made again with the same name, restart_lsn and confirmed_flush
//!   (`pg_copy_logical_replication_slot` of one source) but another output plugin, and on
//!   18 the same slot switched to two-phase (`ALTER_REPLICATION_SLOT … (TWO_PHASE true)`),
//!   is replayed anew by the next session (it reads the whole backlog, where resuming
//!   the other decoder's replay would read nothing) and equals a full replay.
//! - sh4 (17+, not preloaded): `pg_snapbuild.shared_state_size` changed by ten reloads,
//!   each followed by a new session's scrape: the sessions share one area, and the
//!   server's `/dev/shm` holds no more segments than after the first scrape; a session
//!   that cannot make or find the segment (`pg_snapbuild.debug_shared_segment_error`)
//!   gets one WARNING, replays on its own (`backend`) and equals a full replay.

use pg_snapbuild_tests::*;
use postgres::Client;

const SLOTS: [&str; 3] = ["pgsnap_sh1_a", "pgsnap_sh1_b", "pgsnap_sh1_c"];

/// (replayed_bytes, replay_state) of [`SLOTS`] in one scrape.
fn scrape_meta(c: &mut Client) -> Vec<(i64, Option<String>)> {
    let names: Vec<String> = SLOTS.iter().map(|s| s.to_string()).collect();
    c.query(
        "SELECT replayed_bytes, replay_state FROM snapbuild_slot_health
          WHERE slot_name = ANY($1) ORDER BY slot_name",
        &[&names],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// `snapbuild_diagnose(slot)` as row texts (every column but the time-dependent `since`).
fn diagnose_rows(c: &mut Client, slot: &str) -> Vec<String> {
    query_column(
        c,
        "SELECT format('%s|%s|%s|%s|%s|%s|%s', kind, finding, xid, pid, lsn, bytes, remedy)
           FROM snapbuild_diagnose($1)",
        &[&slot],
        &format!("snapbuild_diagnose({slot})"),
    )
}

/// Three rounds of: a RUNNING_XACTS, then `pg_logical_slot_get_changes` to the end.
fn advance(env: &Env, c: &mut Client, slot: &str) {
    for _ in 0..3 {
        env.log_standby_snapshot_flushed(c, "pgsnap_sh1_t", "0");
        consume_changes(c, slot);
    }
}

/// What a new shared session and a full replay give at one flush position: the shared
/// session's (bytes, replay_state) per slot, and the number of diagnosis rows compared.
/// Panics if they differ.
fn compare(env: &Env, c: &mut Client, round: &str) -> (Vec<(i64, Option<String>)>, usize) {
    for _ in 0..5 {
        let f0 = flush_lsn(c);
        let mut shared = env.connect("pgsnap-sh1-shared");
        let meta = scrape_meta(&mut shared);
        let rows = health_rows(&mut shared, &SLOTS);
        let diags: Vec<Vec<String>> = SLOTS
            .iter()
            .map(|s| diagnose_rows(&mut shared, s))
            .collect();
        let mut full = env.connect_unshared("pgsnap-sh1-full");
        let full_rows = health_rows(&mut full, &SLOTS);
        let full_diags: Vec<Vec<String>> =
            SLOTS.iter().map(|s| diagnose_rows(&mut full, s)).collect();
        if flush_lsn(c) != f0 {
            continue;
        }
        assert_eq!(rows.len(), SLOTS.len(), "{round}: {rows:#?}");
        assert_eq!(rows, full_rows, "{round}: shared vs full replay (health)");
        assert_eq!(
            diags, full_diags,
            "{round}: shared vs full replay (diagnosis)"
        );
        return (meta, diags.iter().map(Vec::len).sum());
    }
    panic!("{round}: no flush position stood still across the scrapes");
}

/// [`SLOTS`] created about 1 MB of WAL apart (three restart_lsns), then a transaction of
/// session `holder` left open and the second slot consumed past it: three builders, one
/// held. Returns the slots' guards and the holder.
fn three_slots(env: &Env, c: &mut Client, holder: &str) -> (Vec<SlotGuard>, OpenXact) {
    let guards: Vec<SlotGuard> = SLOTS.iter().map(|s| SlotGuard::new(env, s)).collect();
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_sh1_t (i int)")
        .unwrap();
    create_slot(env, SLOTS[0]);
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    create_slot(env, SLOTS[1]);
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    create_slot(env, SLOTS[2]);
    let mut h = OpenXact::begin(env, holder);
    h.exec("INSERT INTO pgsnap_sh1_t VALUES (1)");
    advance(env, c, SLOTS[1]);
    (guards, h)
}

/// Churn: the holder commits, the third slot is dropped and created again (a later
/// restart_lsn), the first consumed (its restart_lsn moves).
fn churn(env: &Env, c: &mut Client, holder: OpenXact) {
    holder.commit();
    c.execute("SELECT pg_drop_replication_slot($1)", &[&SLOTS[2]])
        .unwrap();
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    create_slot(env, SLOTS[2]);
    advance(env, c, SLOTS[0]);
}

#[test]
fn sh1_new_sessions_resume_the_shared_replays_and_match_a_full_one() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let preload: String = c
        .query_one("SHOW shared_preload_libraries", &[])
        .unwrap()
        .get(0);
    assert!(
        preload.contains("pg_snapbuild"),
        "the test clusters preload pg_snapbuild (scripts/cluster.sh); shared_preload_libraries = '{preload}'"
    );
    let (_guards, h) = three_slots(&env, &mut c, "pgsnap-sh1-holder");

    // A first session scrapes: the replays go to the shared area.
    let mut first = env.connect("pgsnap-sh1-first");
    let meta = scrape_meta(&mut first);
    assert!(
        meta.iter().all(|(_, s)| s.as_deref() == Some("shared")),
        "{meta:?}"
    );
    let f_first = flush_lsn(&mut c);
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();

    let (resumed, n_diag) = compare(&env, &mut c, "three slots");
    // The new session read only what was flushed after the first scrape.
    let since = (flush_lsn(&mut c) - f_first) as i64;
    for (i, (bytes, state)) in resumed.iter().enumerate() {
        assert_eq!(state.as_deref(), Some("shared"), "{}", SLOTS[i]);
        assert!(
            *bytes <= since + 8192,
            "{}: a new session took {bytes} bytes; {since} were flushed since the first scrape",
            SLOTS[i]
        );
    }
    let rl0 = server_slot(&mut c, SLOTS[0]).restart_lsn;
    let full0: i64 = env
        .connect_unshared("pgsnap-sh1-bytes")
        .query_one(
            "SELECT replayed_bytes FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&SLOTS[0]],
        )
        .unwrap()
        .get(0);
    assert!(
        full0 > since + 8192 && full0 as u64 <= flush_lsn(&mut c) - rl0,
        "a full replay of {} takes its backlog: {full0} bytes",
        SLOTS[0]
    );

    // Churn: the holder ends, the third slot is dropped and created again, the first
    // consumed (its restart_lsn moves).
    churn(&env, &mut c, h);
    assert_ne!(server_slot(&mut c, SLOTS[0]).restart_lsn, rl0);
    let (_, n_churn) = compare(&env, &mut c, "after churn");

    // Four sessions at once, after more WAL.
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 30000)")
        .unwrap();
    let mut together = 0;
    for _ in 0..5 {
        let f0 = flush_lsn(&mut c);
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let env = env.clone();
                std::thread::spawn(move || {
                    health_rows(&mut env.connect(&format!("pgsnap-sh1-many-{i}")), &SLOTS)
                })
            })
            .collect();
        let got: Vec<Vec<String>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let full = health_rows(&mut env.connect_unshared("pgsnap-sh1-full"), &SLOTS);
        if flush_lsn(&mut c) != f0 {
            continue;
        }
        for g in &got {
            assert_eq!(
                g, &full,
                "a session scraping beside three others vs a full replay"
            );
        }
        together = got.len();
        break;
    }
    assert_eq!(
        together, 4,
        "no flush position stood still across the scrapes"
    );

    // A crash restart: the area is made anew.
    let mut c = env.crash_restart("pgsnap-sh1-after-crash");
    let (meta, n_crash) = compare(&env, &mut c, "after a crash restart");
    assert!(
        meta.iter().all(|(_, s)| s.as_deref() == Some("shared")),
        "{meta:?}"
    );
    println!(
        "pgsnap-counts: sh1 shared = full replay: {n_diag} diagnosis rows and 3 health rows; after churn {n_churn} rows; 4 sessions at once; after a crash restart {n_crash} rows; a new session took {:?} bytes where a full replay took {full0} for {}",
        resumed.iter().map(|m| m.0).collect::<Vec<_>>(),
        SLOTS[0]
    );
}

/// Restarted with `shared_preload_libraries = 'plpgsql'` (ALTER SYSTEM, a fast restart:
/// pg_snapbuild not preloaded; an empty list would be written as one empty name); put
/// back the same way when dropped, also on panic.
struct WithoutPreload<'e>(&'e Env);

impl<'e> WithoutPreload<'e> {
    fn new(env: &'e Env) -> Self {
        let mut c = env.connect("pgsnap-sh2-setup");
        c.batch_execute("ALTER SYSTEM SET shared_preload_libraries = 'plpgsql'")
            .unwrap();
        env.restart(false).expect("restart without the preload");
        WithoutPreload(env)
    }
}

impl Drop for WithoutPreload<'_> {
    fn drop(&mut self) {
        let mut c = self.0.connect("pgsnap-sh2-reset");
        let _ = c.batch_execute("ALTER SYSTEM RESET shared_preload_libraries");
        drop(c);
        if let Err(e) = self.0.restart(false) {
            eprintln!("sh2: restart with the preload again: {e}");
        }
    }
}

#[test]
fn sh2_without_the_preload_a_named_segment_on_17_and_later() {
    let Some((_g, env, c)) = start() else {
        return;
    };
    drop(c);
    let restore = WithoutPreload::new(&env);
    let mut c = env.connect("pgsnap-sh2");
    let preload: String = c
        .query_one("SHOW shared_preload_libraries", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        preload, "plpgsql",
        "restarted without pg_snapbuild preloaded"
    );
    let version: i32 = c
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .unwrap()
        .get(0);
    let segment = version >= 170000;
    let (_guards, h) = three_slots(&env, &mut c, "pgsnap-sh2-holder");

    let want = if segment { "shared" } else { "backend" };
    let meta = scrape_meta(&mut env.connect("pgsnap-sh2-first"));
    assert!(
        meta.iter().all(|(_, s)| s.as_deref() == Some(want)),
        "PostgreSQL {version} without the preload: {meta:?}"
    );
    let f_first = flush_lsn(&mut c);
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    let (resumed, n_diag) = compare(&env, &mut c, "without the preload");
    let since = (flush_lsn(&mut c) - f_first) as i64;
    let rl0 = server_slot(&mut c, SLOTS[0]).restart_lsn;
    let backlog = (flush_lsn(&mut c) - rl0) as i64;
    for (i, (bytes, state)) in resumed.iter().enumerate() {
        assert_eq!(state.as_deref(), Some(want), "{}", SLOTS[i]);
        if segment {
            assert!(
                *bytes <= since + 8192,
                "{}: a new session took {bytes} bytes; {since} were flushed since the first scrape",
                SLOTS[i]
            );
        }
    }
    if !segment {
        // each session replays the oldest slot's whole backlog again
        assert!(
            resumed[0].0 > since + 8192 && resumed[0].0 <= backlog,
            "{resumed:?}"
        );
    }

    churn(&env, &mut c, h);
    let (meta, n_churn) = compare(&env, &mut c, "without the preload, after churn");
    assert!(
        meta.iter().all(|(_, s)| s.as_deref() == Some(want)),
        "{meta:?}"
    );
    let n_standby = if segment {
        standby_without_preload(&env, &mut c)
    } else {
        0
    };
    drop(c);
    drop(_guards);
    drop(restore);
    let mut c = env.connect("pgsnap-sh2-after");
    let preload: String = c
        .query_one("SHOW shared_preload_libraries", &[])
        .unwrap()
        .get(0);
    assert!(
        preload.contains("pg_snapbuild"),
        "the preload is back: '{preload}'"
    );
    println!(
        "pgsnap-counts: sh2 PostgreSQL {version} without the preload: replay_state {want}; {} = full replay: {n_diag} diagnosis rows and 3 health rows, after churn {n_churn}; a new session took {:?} bytes ({since} flushed since the first scrape, backlog {backlog}); on a standby {n_standby} health rows",
        if segment { "named segment" } else { "own replays" },
        resumed.iter().map(|m| m.0).collect::<Vec<_>>()
    );
}

/// sh2 on a standby (17+): restarted with `shared_preload_libraries = 'plpgsql'`, a slot
/// created there; a first session scrapes, the primary writes 1 MB, a new session resumes
/// (`shared`, at most the WAL replayed since) and equals a full replay at one replay
/// position. The standby's setting is reset and the standby stopped at the end (the next
/// test that wants a standby starts it again, preloading). Returns the rows compared.
fn standby_without_preload(env: &Env, pc: &mut Client) -> usize {
    let sb = env.standby();
    let mut sc = sb.connect("pgsnap-sh2-standby");
    sc.batch_execute("ALTER SYSTEM SET shared_preload_libraries = 'plpgsql'")
        .unwrap();
    drop(sc);
    sb.stop();
    sb.start()
        .expect("the standby restarted without the preload");
    let slot = "pgsnap_sh2_standby";
    let guard = SlotGuard::new(&sb.env, slot);
    let creation = Creation::start(&sb.env, slot, "test_decoding");
    let mut sc = sb.connect("pgsnap-sh2-standby");
    sb.wait_slot_listed(&mut sc, slot, std::time::Duration::from_secs(90));
    env.log_standby_snapshot(pc);
    creation.wait(std::time::Duration::from_secs(90));
    pc.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    env.log_standby_snapshot(pc);
    sb.wait_replayed(pc);
    let meta = |c: &mut Client| -> (i64, Option<String>) {
        let r = c
            .query_one(
                "SELECT replayed_bytes, replay_state FROM snapbuild_slot_health WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let first = meta(&mut sb.connect("pgsnap-sh2-standby-first"));
    assert_eq!(first.1.as_deref(), Some("shared"), "standby, first scrape");
    let r_first = replay_lsn(&mut sc);
    pc.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    sb.wait_replayed(pc);
    let mut compared = 0;
    for _ in 0..5 {
        let r0 = replay_lsn(&mut sc);
        let mut shared = sb.connect("pgsnap-sh2-standby-shared");
        let resumed = meta(&mut shared);
        let rows = health_rows(&mut shared, &[slot]);
        let full = health_rows(
            &mut sb.env.connect_unshared("pgsnap-sh2-standby-full"),
            &[slot],
        );
        if replay_lsn(&mut sc) != r0 {
            continue;
        }
        let since = (r0 - r_first) as i64;
        assert_eq!(resumed.1.as_deref(), Some("shared"), "standby, new session");
        assert!(
            resumed.0 <= since + 8192 && since > 8192,
            "standby: a new session took {} bytes; {since} were replayed since the first scrape",
            resumed.0
        );
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows, full, "standby: shared segment vs full replay");
        compared = rows.len();
        break;
    }
    assert_eq!(
        compared, 1,
        "no replay position stood still across the scrapes"
    );
    drop(guard);
    let _ = sc.batch_execute("ALTER SYSTEM RESET shared_preload_libraries");
    drop(sc);
    sb.stop();
    compared
}

/// (replayed_bytes, replay_state) of slot `slot` in one scrape of a new session.
fn slot_meta(env: &Env, slot: &str) -> (i64, Option<String>) {
    let r = env
        .connect("pgsnap-sh3-meta")
        .query_one(
            "SELECT replayed_bytes, replay_state FROM snapbuild_slot_health WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap();
    (r.get(0), r.get(1))
}

/// What a new shared session says of `slot` (bytes read, health row), and a full
/// replay's health row, at one flush position.
fn resumed_and_full(env: &Env, c: &mut Client, slot: &str) -> (i64, Vec<String>, Vec<String>) {
    for _ in 0..5 {
        let f0 = flush_lsn(c);
        let (bytes, state) = slot_meta(env, slot);
        assert_eq!(state.as_deref(), Some("shared"));
        let shared = health_rows(&mut env.connect("pgsnap-sh3-shared"), &[slot]);
        let full = health_rows(&mut env.connect_unshared("pgsnap-sh3-full"), &[slot]);
        if flush_lsn(c) == f0 {
            return (bytes, shared, full);
        }
    }
    panic!("no flush position stood still across the scrapes");
}

#[test]
fn sh3_a_slot_of_the_same_name_and_position_with_another_decoder_is_replayed_anew() {
    let (src, slot) = ("pgsnap_sh3_src", "pgsnap_sh3");
    let Some((_g, env, mut c, _src_guard)) = start_with_slot(src) else {
        return;
    };
    let _guard = SlotGuard::new(&env, slot);
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_sh1_t (i int)")
        .unwrap();
    create_slot(&env, src);
    c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 15000)")
        .unwrap();
    let copy = |c: &mut Client, plugin: &str| {
        c.execute(
            "SELECT pg_copy_logical_replication_slot($1, $2, false, $3)",
            &[&src, &slot, &plugin],
        )
        .unwrap_or_else(|e| panic!("copying the slot: {}", err_text(&e)));
    };
    copy(&mut c, "test_decoding");
    let first = server_slot(&mut c, slot);
    // A first session replays it (test_decoding) into the shared area.
    let (_, state) = slot_meta(&env, slot);
    assert_eq!(state.as_deref(), Some("shared"));
    let (again, _, _) = resumed_and_full(&env, &mut c, slot);
    assert!(again < 8192, "the same decoder is resumed: {again} bytes");

    // The same name, restart_lsn and confirmed_flush, another plugin.
    c.execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .unwrap();
    copy(&mut c, "pgoutput");
    let second = server_slot(&mut c, slot);
    assert_eq!(
        (second.restart_lsn, second.confirmed_flush),
        (first.restart_lsn, first.confirmed_flush)
    );
    let backlog = (flush_lsn(&mut c) - second.restart_lsn) as i64;
    let (bytes, shared, full) = resumed_and_full(&env, &mut c, slot);
    assert_eq!(shared, full, "another plugin: shared vs full replay");
    assert!(
        bytes > backlog / 2,
        "another plugin: a new session read {bytes} bytes of a {backlog}-byte backlog; it resumed the other decoder's replay"
    );
    let mut counts = format!("plugin: {bytes} of {backlog} bytes read anew");

    // 18: the same slot switched to two-phase decoding.
    if env.major >= 18 {
        let (again, _, _) = resumed_and_full(&env, &mut c, slot);
        assert!(again < 8192, "{again}");
        let conninfo = format!(
            "host={} port={} user={} dbname={} replication=database",
            env.host, env.port, env.user, env.dbname
        );
        let out = std::process::Command::new("psql")
            .args([&conninfo, "-X", "-v", "ON_ERROR_STOP=1", "-c"])
            .arg(format!("ALTER_REPLICATION_SLOT {slot} (TWO_PHASE true)"))
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "ALTER_REPLICATION_SLOT: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let two_phase: bool = c
            .query_one(
                "SELECT two_phase FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap()
            .get(0);
        assert!(two_phase);
        let backlog = (flush_lsn(&mut c) - second.restart_lsn) as i64;
        let (bytes, shared, full) = resumed_and_full(&env, &mut c, slot);
        assert_eq!(shared, full, "two_phase: shared vs full replay");
        assert!(
            bytes > backlog / 2,
            "two_phase: a new session read {bytes} bytes of a {backlog}-byte backlog"
        );
        counts.push_str(&format!(
            "; two_phase: {bytes} of {backlog} bytes read anew"
        ));
    }
    println!("pgsnap-counts: sh3 {counts}; rows equal a full replay");
}

/// The dynamic shared memory segments the server holds now (`/dev/shm/PostgreSQL.*`,
/// dynamic_shared_memory_type = posix).
fn shm_segments() -> usize {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("PostgreSQL."))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn sh4_without_the_preload_one_segment_whatever_the_reloads_and_a_fallback() {
    let Some((_g, env, c)) = start() else {
        return;
    };
    if env.major < 17 {
        println!(
            "SKIPPED: sh4: PostgreSQL {} shares replays only when preloaded (named segments are 17+)",
            env.major
        );
        return;
    }
    drop(c);
    let restore = WithoutPreload::new(&env);
    let mut c = env.connect("pgsnap-sh4");
    let dsm: String = c
        .query_one("SHOW dynamic_shared_memory_type", &[])
        .unwrap()
        .get(0);
    assert_eq!(dsm, "posix");
    let slot = "pgsnap_sh4";
    let guard = SlotGuard::new(&env, slot);
    c.batch_execute("CREATE TABLE IF NOT EXISTS pgsnap_sh1_t (i int)")
        .unwrap();
    create_slot(&env, slot);
    let (_, state) = slot_meta(&env, slot);
    assert_eq!(state.as_deref(), Some("shared"));
    let after_first = shm_segments();
    for i in 1..=10 {
        let _size = env.set_reloaded(
            "pg_snapbuild.shared_state_size",
            &format!("'{}kB'", 8192 + 64 * i),
        );
        c.batch_execute("INSERT INTO pgsnap_sh1_t SELECT generate_series(1, 1000)")
            .unwrap();
        let (bytes, state) = slot_meta(&env, slot);
        assert_eq!(state.as_deref(), Some("shared"), "reload {i}");
        assert!(
            bytes < 256 * 1024,
            "reload {i}: {bytes} bytes: the replay was not resumed"
        );
    }
    let after_reloads = shm_segments();
    assert!(
        after_reloads <= after_first,
        "ten reloads of pg_snapbuild.shared_state_size: {after_first} segments after the first scrape, {after_reloads} after"
    );

    // A session that cannot make or find the segment: one WARNING, its own replays.
    let (mut w, notices) = env.connect_with_notices("pgsnap-sh4-fallback");
    // A new backend has not attached yet; the setting makes its first attempt fail.
    w.batch_execute("SET pg_snapbuild.debug_shared_segment_error = on")
        .unwrap();
    let (state, rows) = {
        let st: Option<String> = w
            .query_one(
                "SELECT replay_state FROM snapbuild_slot_health WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap()
            .get(0);
        (st, health_rows(&mut w, &[slot]))
    };
    let full = health_rows(&mut env.connect_unshared("pgsnap-sh4-full"), &[slot]);
    assert_eq!(state.as_deref(), Some("backend"));
    assert_eq!(rows, full, "the fallback equals a full replay");
    let warnings: Vec<String> = notices
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n.starts_with("WARNING"))
        .cloned()
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one WARNING for two calls: {warnings:#?}"
    );
    assert!(
        warnings[0].contains("could not find or make the shared memory"),
        "{warnings:?}"
    );
    drop(w);
    drop(c);
    drop(guard);
    drop(restore);
    println!(
        "pgsnap-counts: sh4 PostgreSQL {}: {after_first} segments after the first scrape, {after_reloads} after 10 reloads of shared_state_size; the fallback: one WARNING, backend replays equal to a full replay",
        env.major
    );
}
