//! Fidelity checks against the server log's own lines, in every format it writes: each
//! builder line the server logged is matched to the trace row it is about.
//!
//! - f6: the server log in the logging collector's formats (csvlog on every major, jsonlog
//!   on 15+): the server restarts with that log_destination, a slot is created while a
//!   transaction is open (c-1 … c-3), and each LOG-level builder row of the trace agrees from
//!   the creating backend's own line (`server log: pid P`), read from the collector's file.
//! - f7: every builder line the server wrote for a traced range, LOG and DEBUG1
//!   (log_min_messages = debug1), under stderr, csvlog and (15+) jsonlog, is matched to
//!   exactly one row, labelled by pid and time, across several decoders passing the same
//!   records (two creations and three `pg_logical_slot_get_changes` in other backends, the
//!   third restoring a `.snap` file), and every row whose record a decoder that started as
//!   the replay did logged has `agrees = t` from that line.

use pg_snapbuild_tests::*;
use postgres::Client;

/// `ALTER SYSTEM` settings for the logging collector, undone (and the server restarted with
/// its usual stderr log) when dropped.
struct CollectorLog<'e> {
    env: &'e Env,
}

impl<'e> CollectorLog<'e> {
    fn start(env: &'e Env, c: &mut Client, destination: &str) -> CollectorLog<'e> {
        // one statement per call: ALTER SYSTEM refuses a multi-statement (implicit) block
        c.batch_execute("ALTER SYSTEM SET logging_collector = on")
            .unwrap();
        c.batch_execute(&format!(
            "ALTER SYSTEM SET log_destination = '{destination}'"
        ))
        .unwrap();
        let g = CollectorLog { env };
        env.restart(false).unwrap();
        g
    }
}

impl Drop for CollectorLog<'_> {
    fn drop(&mut self) {
        let mut c = self.env.connect("pgsnap-fid-log");
        let _ = c.batch_execute("ALTER SYSTEM RESET logging_collector");
        let _ = c.batch_execute("ALTER SYSTEM RESET log_destination");
        let _ = self.env.restart(false);
    }
}

#[test]
fn f6_builder_lines_read_from_csvlog_and_jsonlog() {
    let Some((_g, env, _)) = start() else {
        return;
    };
    let formats: &[&str] = if env.major >= 15 {
        &["csvlog", "jsonlog"]
    } else {
        &["csvlog"]
    };
    for format in formats {
        let log = CollectorLog::start(&env, &mut env.connect("pgsnap-fid-log"), format);
        let mut c = env.connect("pgsnap-fid-log");
        let current: String = c
            .query_one("SELECT coalesce(pg_current_logfile(), '')", &[])
            .unwrap()
            .get(0);
        let slot = format!("pgsnap_fid_{format}");
        let _slot = SlotGuard::new(&env, &slot);
        let open = OpenXact::begin(&env, "pgsnap-fid-open");
        let creation = Creation::start(&env, &slot, "test_decoding");
        let creator = creation.pid;
        wait_for(
            "the creation to wait for the open transaction",
            std::time::Duration::from_secs(30),
            || waits_for_xid(&mut c, creator, open.xid),
        );
        open.commit();
        env.log_standby_snapshot(&mut c);
        creation.wait(std::time::Duration::from_secs(60));
        let rows = trace(&mut c, &slot).unwrap();
        let logged: Vec<&TraceRow> = rows
            .iter()
            .filter(|r| {
                r.level.as_deref() == Some("LOG")
                    && r.message
                        .as_deref()
                        .is_some_and(|m| m.starts_with("logical decoding found"))
            })
            .collect();
        let by_creator = format!("server log: pid {creator} ");
        let agreeing = logged
            .iter()
            .filter(|r| {
                r.agrees == Some(true)
                    && js(&r.raw, "server_source").is_some_and(|s| s.contains(&by_creator))
            })
            .count();
        println!(
            "pgsnap-counts: f6 PG{} {format} ({current}): creator pid {creator}, builder rows {} agreeing from its line {agreeing}",
            env.major,
            logged.len()
        );
        assert!(
            current.ends_with(if *format == "csvlog" { ".csv" } else { ".json" }),
            "the server should log to a {format} file, pg_current_logfile() = {current:?}"
        );
        assert!(
            logged.len() >= 2,
            "c-1 and a consistent point expected:\n{}",
            dump(&rows)
        );
        assert_eq!(
            agreeing,
            logged.len(),
            "every builder row should agree from pid {creator}'s {format} line:\n{}",
            dump(&rows)
        );
        drop(c);
        drop(log);
    }
}

/// f7: every builder line the server wrote for a traced range, LOG and DEBUG1
/// (log_min_messages = debug1), is matched to exactly one row, labelled by pid and time,
/// across several decoders passing the same records, and every row whose record a decoder
/// that started as the replay did logged has `agrees = t` from that line.
///
/// Slot A is created while a transaction is open, slot B concurrently (both wait for it);
/// then catalog changes (one in a subtransaction) between standby snapshots;
/// `pg_logical_slot_get_changes(A)` three times, each in another backend, each restarted
/// where the one before moved restart_lsn (a transaction with an xid and no record, open
/// from after the creations on, makes the third restart restore the `.snap` file there:
/// branch b). Replayed three times with `snapbuild_trace_range`, from each restart point
/// with that decoder's start_decoding_at (the creation of A started where the first
/// did). With stderr (`pg_ctl -l`), and the logging collector's csvlog
/// (and jsonlog on 15+) beside a stderr file the test reads the server's lines from.
#[test]
fn f7_every_log_line_matched_to_one_row_across_decoders() {
    let Some((_g, env, _)) = start() else {
        return;
    };
    let mut formats: Vec<&str> = vec!["stderr", "csvlog"];
    if env.major >= 15 {
        formats.push("jsonlog");
    }
    for format in formats {
        let collector = (format != "stderr").then(|| {
            CollectorLog::start(
                &env,
                &mut env.connect("pgsnap-f7"),
                &format!("stderr,{format}"),
            )
        });
        let mut c = env.connect("pgsnap-f7");
        let debug1 = env.set_reloaded("log_min_messages", "debug1");
        let (log_path, offset) = if collector.is_some() {
            let p: String = c
                .query_one("SELECT pg_current_logfile('stderr')", &[])
                .unwrap()
                .get(0);
            let p = env.pgdata.join(p);
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        } else {
            (env.log.clone(), log_offset(&env))
        };
        let (a, b) = ("pgsnap_f7_a", "pgsnap_f7_b");
        let _ga = SlotGuard::new(&env, a);
        let _gb = SlotGuard::new(&env, b);
        let open = OpenXact::begin(&env, "pgsnap-f7-open");
        let ca = Creation::start(&env, a, "test_decoding");
        let pid_a = ca.pid;
        wait_for("A to wait", std::time::Duration::from_secs(30), || {
            waits_for_xid(&mut c, pid_a, open.xid)
        });
        let cb = Creation::start(&env, b, "test_decoding");
        let pid_b = cb.pid;
        wait_for("B to wait", std::time::Duration::from_secs(30), || {
            waits_for_xid(&mut c, pid_b, open.xid)
        });
        open.commit();
        env.log_standby_snapshot(&mut c);
        ca.wait(std::time::Duration::from_secs(60));
        cb.wait(std::time::Duration::from_secs(60));
        let slot_pos = |c: &mut Client| -> (String, String) {
            let r = c
                .query_one(
                    "SELECT restart_lsn::text, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
                    &[&a],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        let (r0, c0) = slot_pos(&mut c);
        // A transaction with an xid and no record yet, open from here to the end: every
        // later RUNNING_XACTS lists it while the decoders' reorder buffers do not know
        // it, so the first get_changes moves restart_lsn to a serialization point that is
        // not branch a, and the second restores the `.snap` file there (branch b).
        let holder = OpenXact::begin(&env, "pgsnap-f7-hold");
        c.batch_execute("DROP TABLE IF EXISTS pgsnap_f7_t").unwrap();
        // The commit of the transaction whose subtransaction changes the catalog lies in
        // [ddl_from, ddl_to] (the server's `found subtransaction` lines name no record).
        let ddl_from = insert_lsn(&mut c);
        c.batch_execute(
            "BEGIN; SAVEPOINT s; CREATE TABLE pgsnap_f7_t(a int); RELEASE s; COMMIT; \
             INSERT INTO pgsnap_f7_t VALUES (1)",
        )
        .unwrap();
        let ddl_to = insert_lsn(&mut c);
        env.log_standby_snapshot(&mut c);
        c.batch_execute("INSERT INTO pgsnap_f7_t VALUES (2)")
            .unwrap();
        env.log_standby_snapshot(&mut c);
        let get = |app: &str| -> (i32, i64) {
            let mut g = env.connect(app);
            let pid = backend_pid(&mut g);
            let n: i64 = g
                .query_one(
                    "SELECT count(*) FROM pg_logical_slot_get_changes($1, NULL, NULL)",
                    &[&a],
                )
                .unwrap()
                .get(0);
            (pid, n)
        };
        // g0 consumes the standby snapshots logged before the holder began.
        let (pid_g0, _) = get("pgsnap-f7-get0");
        let (r1, c1) = slot_pos(&mut c);
        assert_ne!(r0, r1, "the first get_changes should move restart_lsn");
        c.batch_execute("INSERT INTO pgsnap_f7_t VALUES (4)")
            .unwrap();
        env.log_standby_snapshot(&mut c);
        let (pid_g1, _) = get("pgsnap-f7-get1");
        let (r2, c2) = slot_pos(&mut c);
        assert_ne!(r1, r2, "the second get_changes should move restart_lsn");
        c.batch_execute(
            "ALTER TABLE pgsnap_f7_t ADD COLUMN b int; INSERT INTO pgsnap_f7_t VALUES (3, 3)",
        )
        .unwrap();
        env.log_standby_snapshot(&mut c);
        let (pid_g2, _) = get("pgsnap-f7-get2");
        holder.commit();
        // The stderr file the server's lines are read from is written by the collector.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let entries = log_entries_in(&log_path, offset);
        let pids = [pid_a, pid_b, pid_g0, pid_g1, pid_g2];
        let lines: Vec<(u64, &LogEntry)> = entries
            .iter()
            .filter(|e| pids.contains(&e.pid))
            .filter_map(|e| builder_line_lsn(e).map(|l| (l, e)))
            .collect();
        assert!(
            lines.iter().any(|(_, e)| e.level == "DEBUG"),
            "DEBUG1 lines expected at log_min_messages = debug1"
        );
        assert!(
            lines.iter().any(|(_, e)| e.pid == pid_g2
                && e.detail.as_deref()
                    == Some("Logical decoding will begin using saved snapshot.")),
            "the third get_changes should restore a .snap file"
        );
        let mut total = (0, 0, 0);
        for (start, after, same) in [
            (&r0, &c0, vec![pid_a, pid_g0]),
            (&r1, &c1, vec![pid_g1]),
            (&r2, &c2, vec![pid_g2]),
        ] {
            let rows = trace_rows(
                json_rows(
                    &mut c,
                    "SELECT * FROM snapbuild_trace_range($1::text::pg_lsn, NULL, in_slot_creation => false, start_decoding_at => $2::text::pg_lsn)",
                    &[start, after],
                )
                .unwrap(),
            );
            let first = rows.first().and_then(|r| r.lsn).unwrap();
            let last = rows.last().and_then(|r| r.lsn).unwrap();
            let mut fails = Vec::new();
            let (mut matched, mut agreeing) = (0, 0);
            for (lsn, e) in lines.iter().filter(|(l, _)| (first..=last).contains(l)) {
                let holders = rows_naming(&rows, *lsn, e);
                if holders.len() != 1 {
                    fails.push(format!(
                        "{} [{}] {} {:?}: matched to {} rows",
                        e.at,
                        e.pid,
                        e.message,
                        e.detail,
                        holders.len()
                    ));
                    continue;
                }
                matched += 1;
                if same.contains(&e.pid) {
                    if holders[0].agrees == Some(true) {
                        agreeing += 1;
                    } else {
                        fails.push(format!(
                            "{} [{}] {}: the row of a decoder that started as the replay did has agrees = {:?} ({:?})",
                            e.at, e.pid, e.message, holders[0].agrees, holders[0].disagreement
                        ));
                    }
                }
            }
            // `found subtransaction X:S` lines: named by the commit row of X, found by
            // the line's label anywhere in the trace.
            let (inside, outside) = (
                ddl_from >= first && ddl_to <= last,
                ddl_to < first || ddl_from > last,
            );
            let mut sub_lines = 0;
            for e in entries.iter().filter(|e| pids.contains(&e.pid)) {
                let Some((top, _)) = subtransaction_line(e) else {
                    continue;
                };
                let holders = rows_naming_anywhere(&rows, e);
                let want = if inside {
                    1
                } else if outside {
                    0
                } else {
                    holders.len().min(1)
                };
                if holders.len() != want {
                    fails.push(format!(
                        "{} [{}] {}: matched to {} rows, expected {want} (commit in {}..{})",
                        e.at,
                        e.pid,
                        e.message,
                        holders.len(),
                        fmt_lsn(ddl_from),
                        fmt_lsn(ddl_to)
                    ));
                    continue;
                }
                let Some(h) = holders.first() else {
                    continue;
                };
                sub_lines += 1;
                matched += 1;
                if h.record != "COMMIT"
                    || h.xid != Some(top)
                    || !h.lsn.is_some_and(|l| (ddl_from..=ddl_to).contains(&l))
                {
                    fails.push(format!(
                        "{} [{}] {}: named by {} of {:?} at {:?}, not the commit of {top}",
                        e.at, e.pid, e.message, h.record, h.xid, h.lsn
                    ));
                } else if same.contains(&e.pid) {
                    if h.agrees == Some(true) {
                        agreeing += 1;
                    } else {
                        fails.push(format!(
                            "{} [{}] {}: the commit row of a same-start decoder has agrees = {:?} ({:?})",
                            e.at, e.pid, e.message, h.agrees, h.disagreement
                        ));
                    }
                }
            }
            let in_range = lines
                .iter()
                .filter(|(l, _)| (first..=last).contains(l))
                .count()
                + sub_lines;
            println!(
                "pgsnap-counts: f7 PG{} {format} from {start}: {in_range} server lines in range ({} DEBUG: {sub_lines} found subtransaction, {} serializing snapshot), {matched} matched to one row, {agreeing} rows agreeing from a same-start decoder's line",
                env.major,
                lines
                    .iter()
                    .filter(|(l, e)| (first..=last).contains(l) && e.level == "DEBUG")
                    .count()
                    + sub_lines,
                lines
                    .iter()
                    .filter(|(l, e)| (first..=last).contains(l)
                        && e.message.starts_with("serializing snapshot to"))
                    .count()
            );
            total = (total.0 + in_range, total.1 + matched, total.2 + agreeing);
            assert!(
                fails.is_empty(),
                "PG{} {format}, replay from {start}:\n{}\nserver lines:\n{}\nrows:\n{}",
                env.major,
                fails.join("\n"),
                lines
                    .iter()
                    .map(|(l, e)| format!(
                        "  {} {} [{}] {}: {} / {:?}\n",
                        fmt_lsn(*l),
                        e.at,
                        e.pid,
                        e.level,
                        e.message,
                        e.detail
                    ))
                    .collect::<String>(),
                dump_with_sources(&rows)
            );
        }
        assert!(total.2 > 0, "some rows should agree from a same-start line");
        assert!(
            entries
                .iter()
                .any(|e| pids.contains(&e.pid) && subtransaction_line(e).is_some()),
            "a decoder should log the catalog-changing subtransaction at DEBUG1"
        );
        drop(debug1);
        c.batch_execute("DROP TABLE IF EXISTS pgsnap_f7_t").unwrap();
        drop(c);
        drop(collector);
    }
}
