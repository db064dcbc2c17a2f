//! Fidelity checks against the server's DEBUG1 builder lines (log_min_messages = debug1),
//! each matched to the trace row it is about, and what the trace says without them:
//!
//! - f8: the DEBUG1 pre-filter skip, forced (`fsync = on`, short transactions from six
//!   sessions while slots are created): the replay of the creation whose backend logged
//!   `skipping snapshot at … xmin horizon too low` has the skip row with the server's
//!   message and DETAIL and `agrees = t`, and every builder line of that backend is named
//!   by exactly one row; at log_min_messages = warning a creation's skip row stays
//!   `agrees` NULL, saying `log_min_messages above debug1`.
//! - f9: the DEBUG1 lines that name no record LSN of their own: `found subtransaction X:S
//!   with catalog changes` (named by the commit row of X, with the set of S the server
//!   logged) and `serializing snapshot to pg_logical/snapshots/X-Y.snap` (named by the
//!   serialize row at X/Y, the file on disk); at warning the commit row is `agrees` NULL
//!   and no row names a DEBUG1 line.

use pg_snapbuild_tests::*;
use postgres::Client;

/// Short transactions committing in autocommit from `n` sessions, and a standby snapshot
/// every 100 ms, until dropped.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(env: &Env, n: usize) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        for i in 0..=n {
            let (env, stop) = (env.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut c = env.connect("pgsnap-f8-load");
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if i == n {
                        env.log_standby_snapshot(&mut c);
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    } else if c
                        .batch_execute("INSERT INTO pgsnap_f8_t VALUES (1)")
                        .is_err()
                    {
                        return;
                    }
                }
            }));
        }
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Creates slots `pgsnap_f8_N` under [`Load`] until `found(pid, slot)` says yes (at most
/// 40); the slots it says no to are dropped. Returns the creating pid and the slot.
fn create_until(
    env: &Env,
    mut found: impl FnMut(i32, &str) -> bool,
) -> Option<(i32, String, SlotGuard)> {
    for i in 0..40 {
        let slot = format!("pgsnap_f8_{i}");
        let guard = SlotGuard::new(env, &slot);
        let (pid, _) = create_slot(env, &slot);
        if found(pid, &slot) {
            return Some((pid, slot, guard));
        }
        drop(guard);
    }
    None
}

/// f8: the DEBUG1 pre-filter skip, forced. A slot's creation skips a
/// RUNNING_XACTS when a transaction it lists ends before the creating backend computes
/// its xmin horizon (between them it flushes that record: with fsync = on and clients
/// committing short transactions it happens often). At log_min_messages = debug1 the
/// replay of the creation (`snapbuild_trace_range` from the slot's restart_lsn with its
/// catalog_xmin as initial_xmin_horizon, in creation mode) has a skip row with the
/// server's message and DETAIL, `agrees = t` from the creating backend's DEBUG line, and
/// every builder line of that backend (LOG and DEBUG1) is named by exactly one row; at
/// log_min_messages = warning a creation's skip row stays `agrees` NULL, saying
/// `log_min_messages above debug1`.
#[test]
fn f8_xmin_horizon_skip_from_the_debug1_line() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    c.batch_execute("DROP TABLE IF EXISTS pgsnap_f8_t; CREATE TABLE pgsnap_f8_t(a int)")
        .unwrap();
    // Another slot's catalog_xmin would hold every horizon back: none may exist.
    let others: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE catalog_xmin IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(others, 0, "no other logical slot may exist for this test");
    for set in [
        "ALTER SYSTEM SET fsync = on",
        "ALTER SYSTEM SET log_min_messages = debug1",
        "SELECT pg_reload_conf()",
    ] {
        c.batch_execute(set).unwrap();
    }
    struct Reset<'e>(&'e Env);
    impl Drop for Reset<'_> {
        fn drop(&mut self) {
            let mut c = self.0.connect("pgsnap-f8");
            let _ = c.batch_execute("ALTER SYSTEM RESET fsync");
            let _ = c.batch_execute("ALTER SYSTEM RESET log_min_messages");
            let _ = c.batch_execute("SELECT pg_reload_conf()");
            let _ = c.batch_execute("DROP TABLE IF EXISTS pgsnap_f8_t");
        }
    }
    let _reset = Reset(&env);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let replay = |c: &mut Client, slot: &str| -> Vec<TraceRow> {
        trace_rows(
            json_rows(
                c,
                "SELECT t.* FROM pg_replication_slots s, snapbuild_trace_range(s.restart_lsn, s.confirmed_flush_lsn, s.catalog_xmin, in_slot_creation => true) t WHERE s.slot_name = $1",
                &[&slot],
            )
            .unwrap(),
        )
    };

    // At debug1: the server's own skip line.
    let offset = log_offset(&env);
    let load = Load::start(&env, 6);
    let skipped = |pid: i32, _: &str| {
        log_entries_since(&env, offset)
            .iter()
            .any(|e| e.pid == pid && e.message.starts_with("skipping snapshot at"))
    };
    let found = create_until(&env, skipped);
    drop(load);
    let (pid, slot, _guard) = found.expect("no creation skipped a snapshot in 40 tries");
    let entries = log_entries_since(&env, offset);
    let lines: Vec<(u64, &LogEntry)> = entries
        .iter()
        .filter(|e| e.pid == pid)
        .filter_map(|e| builder_line_lsn(e).map(|l| (l, e)))
        .collect();
    let rows = replay(&mut c, &slot);
    let mut fails = Vec::new();
    let mut skips = 0;
    for (lsn, e) in &lines {
        let holders = rows_naming(&rows, *lsn, e);
        match holders.as_slice() {
            [r] if r.agrees == Some(true) => {
                if e.message.starts_with("skipping") {
                    skips += 1;
                    if r.branch.as_deref() != Some("xmin horizon too low")
                        || r.message.as_deref() != Some(e.message.as_str())
                        || r.detail != e.detail
                    {
                        fails.push(format!("the skip row differs from {e:?}"));
                    }
                }
            }
            _ => fails.push(format!(
                "{} [{}] {} {:?}: {} rows, agrees {:?}",
                e.at,
                e.pid,
                e.message,
                e.detail,
                holders.len(),
                holders.iter().map(|r| r.agrees).collect::<Vec<_>>()
            )),
        }
    }
    println!(
        "pgsnap-counts: f8 PG{}: creation pid {pid} ({slot}): {} builder lines ({} DEBUG), {skips} skip(s), all matched and agreeing: {}",
        env.major,
        lines.len(),
        lines.iter().filter(|(_, e)| e.level == "DEBUG").count(),
        fails.is_empty()
    );
    assert!(
        fails.is_empty() && skips > 0,
        "PG{}:\n{}\nserver lines:\n{}\nrows:\n{}",
        env.major,
        fails.join("\n"),
        lines
            .iter()
            .map(|(l, e)| format!(
                "  {} {} {}: {} / {:?}\n",
                fmt_lsn(*l),
                e.at,
                e.level,
                e.message,
                e.detail
            ))
            .collect::<String>(),
        dump_with_sources(&rows)
    );
    drop(_guard);

    // Above debug1: a skip the replay finds is undecided, with the reason.
    c.batch_execute("ALTER SYSTEM SET log_min_messages = warning")
        .unwrap();
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let load = Load::start(&env, 6);
    let mut skip_row = None;
    let found = create_until(&env, |_, slot| {
        let mut c = env.connect("pgsnap-f8");
        skip_row = replay(&mut c, slot)
            .into_iter()
            .find(|r| r.branch.as_deref() == Some("xmin horizon too low"));
        skip_row.is_some()
    });
    drop(load);
    assert!(
        found.is_some(),
        "no creation's replay skipped a snapshot in 40 tries"
    );
    let r = skip_row.unwrap();
    println!(
        "pgsnap-counts: f8 PG{} at warning: skip row agrees {:?}, {:?}",
        env.major, r.agrees, r.disagreement
    );
    assert_eq!(r.agrees, None);
    assert!(
        r.disagreement
            .as_deref()
            .is_some_and(|d| d.contains("log_min_messages above debug1 (warning)")),
        "{:?}",
        r.disagreement
    );
}

/// The transaction f9 commits: subtransactions s1 and s3 create tables, s2 only inserts.
/// Returns `(top xid, [s1, s2, s3], commit in from..=to)`, each subtransaction's xid read
/// from the session's own transactionid locks (pg_locks) before its RELEASE.
fn commit_with_subtransactions(env: &Env, tag: &str) -> (u64, Vec<u64>, (u64, u64)) {
    let mut t = env.connect("pgsnap-f9-ddl");
    let locked = |t: &mut Client| -> Vec<u64> {
        t.query(
            "SELECT transactionid::text FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'transactionid'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0).parse().unwrap())
        .collect()
    };
    t.batch_execute("BEGIN").unwrap();
    let top = current_xid(&mut t);
    let mut subs = Vec::new();
    for sql in [
        format!("CREATE TABLE pgsnap_f9_{tag}_a(a int)"),
        format!("INSERT INTO pgsnap_f9_{tag}_a VALUES (1)"),
        format!("CREATE TABLE pgsnap_f9_{tag}_b(a int)"),
    ] {
        // A subtransaction's xid lock is held until RELEASE (subcommit drops it).
        t.batch_execute(&format!("SAVEPOINT s; {sql}")).unwrap();
        let new: Vec<u64> = locked(&mut t).into_iter().filter(|x| *x != top).collect();
        assert_eq!(new.len(), 1, "one subtransaction xid for {sql}");
        subs.push(new[0]);
        t.batch_execute("RELEASE s").unwrap();
    }
    let from = insert_lsn(&mut t);
    t.batch_execute("COMMIT").unwrap();
    let to = insert_lsn(&mut t);
    (top, subs, (from, to))
}

/// f9: the DEBUG1 lines that name no record LSN of their own. A transaction
/// with three subtransactions, two of them creating a table, commits after a slot's
/// creation; standby snapshots follow; `pg_logical_slot_get_changes` decodes it all in one
/// backend; the replay starts where that decoder did (`snapbuild_trace_range` from the
/// creation's restart_lsn with its confirmed_flush as start_decoding_at).
///
/// At log_min_messages = debug1: the server logs `found subtransaction X:S with catalog
/// changes` for exactly the two table-creating subtransactions (their xids read from
/// pg_locks in the committing session), each line is named by exactly one row, the
/// commit row of X (inside the commit's LSN bounds), with `agrees = t`, and the set of S
/// the row's message gives is the set the server logged; every `serializing snapshot to
/// pg_logical/snapshots/X-Y.snap` line of the decoder is named by exactly one row, the
/// replay's serialize row at X/Y, `agrees = t`, and the file is on disk; every other
/// builder line of that decoder (LOG and DEBUG1) is named by exactly one row.
/// At warning: the commit row is `agrees` NULL with `log_min_messages above debug1
/// (warning)`, and no row names a DEBUG1 line.
#[test]
fn f9_subtransaction_and_serializing_lines_name_their_rows() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    struct DropTables<'e>(&'e Env);
    impl Drop for DropTables<'_> {
        fn drop(&mut self) {
            let mut c = self.0.connect("pgsnap-f9");
            for tag in ["debug1", "warning"] {
                let _ = c.batch_execute(&format!(
                    "DROP TABLE IF EXISTS pgsnap_f9_{tag}_a, pgsnap_f9_{tag}_b"
                ));
            }
        }
    }
    let _tables = DropTables(&env);
    for level in ["debug1", "warning"] {
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS pgsnap_f9_{level}_a, pgsnap_f9_{level}_b"
        ))
        .unwrap();
        let _level = env.set_reloaded("log_min_messages", level);
        let offset = log_offset(&env);
        let slot = format!("pgsnap_f9_{level}");
        let _guard = SlotGuard::new(&env, &slot);
        create_slot(&env, &slot);
        let pos = c
            .query_one(
                "SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .unwrap();
        let (r0, c0): (String, String) = (pos.get(0), pos.get(1));
        let (top, subs, (from, to)) = commit_with_subtransactions(&env, level);
        env.log_standby_snapshot(&mut c);
        c.batch_execute(&format!("INSERT INTO pgsnap_f9_{level}_b VALUES (1)"))
            .unwrap();
        env.log_standby_snapshot(&mut c);
        let mut g = env.connect("pgsnap-f9-get");
        let pid = backend_pid(&mut g);
        g.query_one(
            "SELECT count(*) FROM pg_logical_slot_get_changes($1, NULL, NULL)",
            &[&slot],
        )
        .unwrap();
        drop(g);
        let rows = trace_rows(
            json_rows(
                &mut c,
                "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, NULL, in_slot_creation => false, start_decoding_at => $2::text::pg_lsn)",
                &[&r0, &c0],
            )
            .unwrap(),
        );
        let entries = log_entries_since(&env, offset);
        let mine: Vec<&LogEntry> = entries.iter().filter(|e| e.pid == pid).collect();
        let commit_rows: Vec<&TraceRow> = rows
            .iter()
            .filter(|r| r.record == "COMMIT" && r.xid == Some(top))
            .collect();
        assert_eq!(commit_rows.len(), 1, "{}", dump_with_sources(&rows));
        let commit = commit_rows[0];
        assert!(
            commit.lsn.is_some_and(|l| (from..=to).contains(&l)),
            "the commit row lies outside {}..{}",
            fmt_lsn(from),
            fmt_lsn(to)
        );
        let show = || {
            format!(
                "server lines of pid {pid}:\n{}\nrows:\n{}",
                mine.iter()
                    .map(|e| format!("  {} {}: {} / {:?}\n", e.at, e.level, e.message, e.detail))
                    .collect::<String>(),
                dump_with_sources(&rows)
            )
        };
        if level == "warning" {
            println!(
                "pgsnap-counts: f9 PG{} at warning: commit of {top} agrees {:?}, {:?}",
                env.major, commit.agrees, commit.disagreement
            );
            assert!(mine.iter().all(|e| e.level != "DEBUG"), "{}", show());
            assert_eq!(commit.agrees, None, "{}", show());
            assert!(
                commit
                    .disagreement
                    .as_deref()
                    .is_some_and(|d| d.contains("log_min_messages above debug1 (warning)")),
                "{}",
                show()
            );
            assert!(
                rows.iter().all(|r| !js(&r.raw, "server_source")
                    .is_some_and(|s| s.contains(&format!("server log: pid {pid} at"))
                        && s.contains("(DEBUG \""))),
                "{}",
                show()
            );
            continue;
        }
        let mut fails = Vec::new();
        // found subtransaction: the server's set, checked against the subtransactions
        // that created tables, and the commit row's.
        let logged: std::collections::BTreeSet<u64> = mine
            .iter()
            .filter_map(|e| subtransaction_line(e))
            .filter(|(x, _)| *x == top)
            .map(|(_, s)| s)
            .collect();
        assert_eq!(
            logged,
            [subs[0], subs[2]].into_iter().collect(),
            "the server should log the two table-creating subtransactions of {top} ({subs:?})\n{}",
            show()
        );
        let replayed: std::collections::BTreeSet<u64> = commit
            .message
            .as_deref()
            .unwrap_or("")
            .lines()
            .filter_map(|m| {
                subtransaction_line(&LogEntry {
                    at: String::new(),
                    pid: 0,
                    level: "DEBUG".into(),
                    message: m.to_owned(),
                    detail: None,
                })
            })
            .filter(|(x, _)| *x == top)
            .map(|(_, s)| s)
            .collect();
        if replayed != logged {
            fails.push(format!(
                "the commit row's message gives {replayed:?}, the server logged {logged:?}"
            ));
        }
        let (mut named, mut serializing) = (0, 0);
        for e in &mine {
            if let Some((x, _)) = subtransaction_line(e) {
                let holders = rows_naming_anywhere(&rows, e);
                match holders.as_slice() {
                    [h] if x == top && std::ptr::eq(*h, commit) && h.agrees == Some(true) => {
                        named += 1
                    }
                    _ => fails.push(format!(
                        "{} {}: named by {} rows ({:?}), agrees {:?}",
                        e.at,
                        e.message,
                        holders.len(),
                        holders
                            .iter()
                            .map(|h| h.lsn.map(fmt_lsn))
                            .collect::<Vec<_>>(),
                        holders.iter().map(|h| h.agrees).collect::<Vec<_>>()
                    )),
                }
                continue;
            }
            let Some(lsn) = builder_line_lsn(e) else {
                continue;
            };
            let holders = rows_naming(&rows, lsn, e);
            if holders.len() != 1 {
                fails.push(format!(
                    "{} {} {}: named by {} rows",
                    e.at,
                    e.level,
                    e.message,
                    holders.len()
                ));
                continue;
            }
            named += 1;
            if let Some(file_lsn) = serialized_file_lsn(&e.message) {
                serializing += 1;
                let h = holders[0];
                let on_disk = server_snap_files(&mut c).contains_key(&snap_name(file_lsn));
                if !h.branch.as_deref().is_some_and(|b| b.contains("serialize"))
                    || h.agrees != Some(true)
                    || !on_disk
                {
                    fails.push(format!(
                        "{} {}: row {:?} branch {:?} agrees {:?} ({:?}), file on disk {on_disk}",
                        e.at,
                        e.message,
                        h.lsn.map(fmt_lsn),
                        h.branch,
                        h.agrees,
                        h.disagreement
                    ));
                }
            }
        }
        println!(
            "pgsnap-counts: f9 PG{} at debug1: decoder pid {pid}: {} server lines, {named} named by one row; found subtransaction {top}:{logged:?} (subtransactions {subs:?}), commit row agrees {:?}; {serializing} serializing snapshot line(s)",
            env.major,
            mine.iter()
                .filter(|e| subtransaction_line(e).is_some() || builder_line_lsn(e).is_some())
                .count(),
            commit.agrees
        );
        assert!(
            fails.is_empty() && serializing > 0,
            "PG{}:\n{}\n{}",
            env.major,
            fails.join("\n"),
            show()
        );
    }
}
