//! Fidelity checks against the server: shapes where a replay can easily say `agrees = t`
//! wrongly, predict wrongly or fail, each compared with what the server itself did or
//! wrote.
//!
//! - f1: a transactional logical message emitted in another database, open across
//!   RUNNING_XACTS: the server gives that transaction no base snapshot, so the slot's
//!   catalog_xmin after `pg_logical_slot_get_changes` is what `snapbuild_slot_prediction`
//!   said (not one lower).
//! - f2: a replay from a position after which no complete record has been flushed is
//!   answered with its first row, not SQLSTATE 22023.
//! - f3: a `.snap` file the server wrote, with a wrong xmax injected (a writer-dependent
//!   field, CRC recomputed, the file's modification time kept): the decoders the server log
//!   shows could have written it, replayed as they ran, write another xmax, so the trace
//!   says `agrees = f` and names xmax; with the server's own bytes back its verdict returns.
//! - f4: a `.snap` file whose committed count needs more than MaxAllocSize: the server's
//!   error (pg_logicalinspect on 18), SQLSTATE XX000 "invalid memory alloc request size".
//! - f5: a target inside a record that crosses a page (a flush position the WAL writer
//!   can leave): `pg_replication_slot_advance` confirms the target itself, get_changes the
//!   end of the record it read; `snapbuild_slot_prediction` (with and without
//!   `by_advance`) predicts each slot's confirmed_flush as the server then sets it.
//!
//! - f6: the server log in the logging collector's formats (csvlog on every major, jsonlog
//!   on 15+): the server restarts with that log_destination, a slot is created while a
//!   transaction is open (c-1 … c-3), and each LOG-level builder row of the trace agrees from
//!   the creating backend's own line (`server log: pid P`), read from the collector's file.
//!
//! The overflowed-subtransaction shape of the same family is scenario c2
//! (`tests/scenarios.rs`).

use pg_snapbuild_tests::*;
use postgres::Client;

/// The slot's catalog_xmin, restart_lsn and catalog xmin candidate as shared memory holds
/// them (`snapbuild_slots()`: the candidate is not in `pg_replication_slots`).
type SlotXmins = (Option<String>, Option<String>, Option<String>);

fn slot_xmins(c: &mut Client, slot: &str) -> SlotXmins {
    let r = c
        .query_one(
            "SELECT catalog_xmin::text, restart_lsn::text, nullif(candidate_catalog_xmin::text, '0') FROM snapbuild_slots() WHERE slot_name = $1",
            &[&slot],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

fn other_database(env: &Env, c: &mut Client, name: &str) -> Client {
    let exists = c
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .unwrap()
        .is_some();
    if !exists {
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    }
    let mut cfg = postgres::Config::new();
    cfg.host(&env.host)
        .port(env.port)
        .user(&env.user)
        .dbname(name)
        .application_name("pgsnap-fid-other");
    cfg.connect(postgres::NoTls).unwrap()
}

#[test]
fn f1_message_from_another_database_gives_no_base_snapshot() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (slot, tab) = ("pgsnap_fid_msg", "pgsnap_fid_msg_t");
    let _slot = SlotGuard::new(&env, slot);
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {tab}; CREATE TABLE {tab} (a int)"
    ))
    .unwrap();
    create_slot(&env, slot);
    // t0 (this database) runs when the builder reads a RUNNING_XACTS, so the builder's
    // xmin is t0's xid when the other database's transaction emits its message.
    let mut t0 = OpenXact::begin(&env, "pgsnap-fid-t0");
    t0.exec(&format!("INSERT INTO {tab} VALUES (0)"));
    let t0_xid = t0.xid;
    env.log_standby_snapshot_flushed(&mut c, tab, "1");
    let mut other = other_database(&env, &mut c, "pgsnap_fid_other");
    other
        .batch_execute("BEGIN; SELECT pg_logical_emit_message(true, 'p', 'm')")
        .unwrap();
    let msg_xid: String = other
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .unwrap()
        .get(0);
    // t0 ends; the next RUNNING_XACTS has the message's transaction as the oldest running.
    // A base snapshot for it would hold the builder's xmin from before (t0's xid) as the
    // slot's candidate catalog_xmin; without one the candidate is oldestRunningXid.
    t0.commit();
    env.log_standby_snapshot_flushed(&mut c, tab, "2");
    env.log_standby_snapshot_flushed(&mut c, tab, "3");
    let upto = fmt_lsn(flush_lsn(&mut c));
    let predicted = c
        .query_one(
            "SELECT predicted_catalog_xmin::text, predicted_restart_lsn::text, predicted_candidate_catalog_xmin::text FROM snapbuild_slot_prediction($1, $2::text::pg_lsn)",
            &[&slot, &upto],
        )
        .unwrap();
    let predicted: SlotXmins = (predicted.get(0), predicted.get(1), predicted.get(2));
    c.query(
        "SELECT count(*) FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL)",
        &[&slot, &upto],
    )
    .unwrap();
    let server = slot_xmins(&mut c, slot);
    other.batch_execute("COMMIT").unwrap();
    c.batch_execute(&format!("DROP TABLE {tab}")).unwrap();
    println!(
        "pgsnap-counts: f1 PG{} t0 {t0_xid}, message xid {msg_xid} in another database; predicted (catalog_xmin, restart_lsn, candidate) {predicted:?}, server after get_changes {server:?}",
        env.major
    );
    assert_eq!(
        predicted, server,
        "snapbuild_slot_prediction vs the slot after pg_logical_slot_get_changes (message xid {msg_xid} in another database)"
    );
}

#[test]
fn f2_nothing_flushed_after_the_start_is_an_answer() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let rows = json_rows(
        &mut c,
        "SELECT * FROM snapbuild_trace_range(pg_current_wal_flush_lsn(), in_slot_creation => false)",
        &[],
    )
    .unwrap_or_else(|e| panic!("snapbuild_trace_range at the flush position failed: {}", err_text(&e)));
    let first = rows.first().expect("a REPLAY START row");
    assert_eq!(js(first, "record").as_deref(), Some("REPLAY START"));
    // Nothing else wrote WAL meanwhile: the start row says why nothing follows (14's
    // reader cannot look ahead for a record, so there the loop just ends).
    if rows.len() == 1 && env.major >= 15 {
        let m = js(first, "message").unwrap_or_default();
        assert!(m.contains("no complete WAL record"), "{m}");
    }
    println!("pgsnap-counts: f2 PG{} rows {}", env.major, rows.len());
}

/// A `.snap` file rewritten in place, put back when dropped.
struct Rewritten {
    path: std::path::PathBuf,
    original: Vec<u8>,
}

/// Writes `bytes` to `path` and gives it back its modification time (the time the server
/// wrote it, which says which decoders could have written it).
fn write_keeping_mtime(path: &std::path::Path, bytes: &[u8]) {
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    std::fs::write(path, bytes).unwrap();
    if let Some(t) = mtime {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_modified(t).unwrap();
    }
}

impl Drop for Rewritten {
    fn drop(&mut self) {
        write_keeping_mtime(&self.path, &self.original);
    }
}

/// Offsets in a .snap file: checksum (after magic), and the builder's xmax (20 bytes into
/// the builder, which starts after the 16-byte constant part).
const CHECKSUM_AT: usize = 4;
const XMAX_AT: usize = 16 + 20;

fn with_checksum(mut b: Vec<u8>) -> Vec<u8> {
    // The checksum covers everything after magic and checksum; the file's length tells
    // where the contents end (the server reads exactly that much).
    let crc = crc32c::crc32c(&b[8..]);
    b[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn f3_injected_writer_dependent_difference_is_found_false() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (slot, tab) = ("pgsnap_fid_inj", "pgsnap_fid_inj_t");
    let _slot = SlotGuard::new(&env, slot);
    real_snap_file(&env, &mut c, slot, tab);
    // Two more RUNNING_XACTS, serialized by a peeking decoder (restart_lsn stays).
    env.log_standby_snapshot_flushed(&mut c, tab, "7");
    env.log_standby_snapshot_flushed(&mut c, tab, "8");
    c.query(
        "SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL)",
        &[&slot],
    )
    .unwrap();
    // A serialize row after the restart point whose file the server wrote and the trace
    // agrees with (the row at restart_lsn itself is the restore, branch b); its writer may
    // have started before the slot's restart point (a peek moves restart_lsn too), which the
    // trace then reproduces.
    let before = trace(&mut c, slot)
        .unwrap()
        .into_iter()
        .rev()
        .find(|r| r.branch_is("serialize") && r.agrees_or_possible_writer())
        .unwrap_or_else(|| {
            panic!("the trace of {slot} has no serialize row agreeing with a server file")
        });
    let lsn = before.lsn.unwrap();
    let name = snap_name(lsn);
    let bytes = std::fs::read(env.snapshots_dir().join(&name)).unwrap();
    let row_at = |c: &mut Client| {
        trace(c, slot)
            .unwrap()
            .into_iter()
            .find(|r| r.lsn == Some(lsn) && r.branch_is("serialize"))
    };
    assert_eq!(
        with_checksum(bytes.clone()),
        bytes,
        "the test's checksum must reproduce the server's"
    );
    let xmax = u32::from_le_bytes(bytes[XMAX_AT..XMAX_AT + 4].try_into().unwrap());
    let info_xmax: String = c
        .query_one(
            "SELECT xmax::text FROM snapbuild_snapshot_info($1)",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(xmax.to_string(), info_xmax, "xmax offset");
    let mut injected = bytes.clone();
    injected[XMAX_AT..XMAX_AT + 4].copy_from_slice(&(xmax + 1000).to_le_bytes());
    let path = env.snapshots_dir().join(&name);
    let guard = Rewritten {
        path: path.clone(),
        original: bytes.clone(),
    };
    write_keeping_mtime(&path, &with_checksum(injected));
    let after = row_at(&mut c).expect("the serialize row");
    drop(guard);
    let restored = row_at(&mut c).expect("the serialize row");
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_2"))
        .unwrap();
    println!(
        "pgsnap-counts: f3 PG{} file {name} xmax {xmax} -> {}: agrees {:?} ({:?}); restored: agrees {:?}",
        env.major,
        xmax + 1000,
        after.agrees,
        after.disagreement,
        restored.agrees
    );
    // The server log names the decoders that could have written the file (the peek's):
    // replayed as they ran, none writes the injected xmax, so the verdict is a hard false.
    assert_eq!(
        after.agrees,
        Some(false),
        "an injected xmax was not found false: {}",
        after.show()
    );
    assert!(
        after
            .disagreement
            .as_deref()
            .is_some_and(|d| d.contains("the server log shows the decoders")),
        "the verdict does not come from the writers the server log names: {}",
        after.show()
    );
    assert!(
        after
            .disagreement
            .as_deref()
            .is_some_and(|d| d.contains("xmax")),
        "the injected xmax is not named: {}",
        after.show()
    );
    assert_eq!(restored.agrees, before.agrees, "{}", restored.show());
    assert!(restored.agrees_or_possible_writer(), "{}", restored.show());
}

#[test]
fn f4_count_past_max_alloc_size_is_the_servers_error() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (slot, tab) = ("pgsnap_fid_alloc", "pgsnap_fid_alloc_t");
    let _slot = SlotGuard::new(&env, slot);
    let (_, bytes) = real_snap_file(&env, &mut c, slot, tab);
    // builder.committed.xcnt (size_t) sits 80 bytes into the builder.
    let mut huge = bytes.clone();
    let count: u64 = 1 << 40;
    huge[16 + 80..16 + 88].copy_from_slice(&count.to_le_bytes());
    let name = "FFFFFFFF-A.snap";
    let mut planted = PlantedFiles(Vec::new());
    plant(&env, &mut planted, name, &huge);
    let ours = c
        .query("SELECT * FROM snapbuild_snapshot_info($1)", &[&name])
        .err()
        .map(|e| db_err(&e));
    let want_text = format!("invalid memory alloc request size {}", count * 4);
    let server = env.has_logicalinspect().then(|| {
        c.query("SELECT * FROM pg_get_logical_snapshot_meta($1)", &[&name])
            .err()
            .map(|e| db_err(&e))
    });
    drop(planted);
    c.batch_execute(&format!("DROP TABLE IF EXISTS {tab}, {tab}_2"))
        .unwrap();
    println!(
        "pgsnap-counts: f4 PG{} ours {ours:?} pg_logicalinspect {server:?}",
        env.major
    );
    assert_eq!(ours, Some(("XX000".to_string(), want_text)));
    if let Some(server) = server {
        assert_eq!(server, ours, "pg_logicalinspect's error for the same file");
    }
}

/// The slot's confirmed_flush as `pg_replication_slots` shows it.
fn confirmed_flush(c: &mut Client, slot: &str) -> String {
    c.query_one(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
        &[&slot],
    )
    .unwrap()
    .get(0)
}

#[test]
fn f5_advance_confirms_its_target_get_changes_the_record_end() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (by_get, by_advance) = ("pgsnap_fid_get", "pgsnap_fid_adv");
    let _s1 = SlotGuard::new(&env, by_get);
    let _s2 = SlotGuard::new(&env, by_advance);
    create_slot(&env, by_get);
    create_slot(&env, by_advance);
    // A 20 kB non-transactional message: one record crossing at least two page
    // boundaries. pg_logical_emit_message returns where its record ends; the record starts
    // 20 kB or more before that, so the last page boundary before its end lies inside it.
    let big: String = c
        .query_one(
            "SELECT pg_logical_emit_message(false, 'p', repeat('x', 20000))::text",
            &[],
        )
        .unwrap()
        .get(0);
    // A commit that wrote WAL flushes it (one that only took an xid does not).
    c.batch_execute("BEGIN; SELECT pg_logical_emit_message(true, 'p', 'flush'); COMMIT")
        .unwrap();
    let end = parse_lsn(&big);
    let target = (end - 1) / 8192 * 8192;
    assert!(end - target <= 8192 && target % 8192 == 0);
    let t = fmt_lsn(target);
    let what = format!("message record ending at {big}, target {t}");
    let (get, advance) = predict_then_consume(&mut c, by_get, by_advance, &t);
    println!(
        "pgsnap-counts: f5 PG{} {what}: get_changes predicted {} server {}; advance predicted {} server {}",
        env.major, get.0, get.1, advance.0, advance.1
    );
    assert_ne!(
        get.1, advance.1,
        "the shape: the two ways of consuming should confirm different positions"
    );
    assert_eq!(get.0, get.1, "confirmed_flush after get_changes");
    assert_eq!(
        advance.0, advance.1,
        "confirmed_flush after pg_replication_slot_advance"
    );
}

/// Predicts (`snapbuild_slot_prediction`) the confirmed_flush after consuming slot `by_get`
/// up to `target` with pg_logical_slot_get_changes and slot `by_advance` with
/// pg_replication_slot_advance, then consumes them so: (predicted, the server's) for each.
fn predict_then_consume(
    c: &mut Client,
    by_get: &str,
    by_advance: &str,
    target: &str,
) -> ((String, String), (String, String)) {
    let predict = |c: &mut Client, slot: &str, advance: bool| -> String {
        c.query_one(
            "SELECT predicted_confirmed_flush::text FROM snapbuild_slot_prediction($1, $2::text::pg_lsn, $3)",
            &[&slot, &target, &advance],
        )
        .unwrap()
        .get(0)
    };
    let predicted_get = predict(c, by_get, false);
    let predicted_advance = predict(c, by_advance, true);
    c.query(
        "SELECT count(*) FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL)",
        &[&by_get, &target],
    )
    .unwrap();
    c.query(
        "SELECT * FROM pg_replication_slot_advance($1, $2::text::pg_lsn)",
        &[&by_advance, &target],
    )
    .unwrap();
    (
        (predicted_get, confirmed_flush(c, by_get)),
        (predicted_advance, confirmed_flush(c, by_advance)),
    )
}

/// A target inside a run of heap records (one INSERT of 3000 rows: 3000 heap records in a
/// row, a few pages of WAL): both ways of consuming stop at the first record ending at or
/// after it, and so must the prediction. (The traces read such runs in batches, many
/// records per step of the record loop; a first version did so in the prediction too and
/// would have stopped up to 64 records late.)
#[test]
fn f5b_prediction_stops_inside_a_run_of_heap_records() {
    let Some((_g, env, mut c)) = start() else {
        return;
    };
    let (by_get, by_advance) = ("pgsnap_fid_get_run", "pgsnap_fid_adv_run");
    let _s1 = SlotGuard::new(&env, by_get);
    let _s2 = SlotGuard::new(&env, by_advance);
    c.batch_execute("DROP TABLE IF EXISTS pgsnap_fid_run; CREATE TABLE pgsnap_fid_run (a int)")
        .unwrap();
    create_slot(&env, by_get);
    create_slot(&env, by_advance);
    let before = insert_lsn(&mut c);
    c.batch_execute("INSERT INTO pgsnap_fid_run SELECT g FROM generate_series(1, 3000) g")
        .unwrap();
    let after = insert_lsn(&mut c);
    // A commit that wrote WAL flushes it (the INSERT's did).
    let target = (before + (after - before) / 2) / 8 * 8;
    let t = fmt_lsn(target);
    let (get, advance) = predict_then_consume(&mut c, by_get, by_advance, &t);
    c.batch_execute("DROP TABLE pgsnap_fid_run").unwrap();
    println!(
        "pgsnap-counts: f5b PG{} heap records {} .. {}, target {t}: get_changes predicted {} server {}; advance predicted {} server {}",
        env.major,
        fmt_lsn(before),
        fmt_lsn(after),
        get.0,
        get.1,
        advance.0,
        advance.1
    );
    // The server stopped inside the run: neither reached the commit.
    assert!(
        parse_lsn(&get.1) < after && parse_lsn(&advance.1) < after,
        "the shape"
    );
    assert_eq!(get.0, get.1, "confirmed_flush after get_changes");
    assert_eq!(
        advance.0, advance.1,
        "confirmed_flush after pg_replication_slot_advance"
    );
}

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

/// The record LSN a builder line (LOG `logical decoding found … at L`, DEBUG1 `skipping
/// snapshot at L`, `got new catalog xmin X at L`, `got new restart lsn R at L`, `failed to
/// increase restart lsn: proposed R, after L, …`) is about, as the server printed it.
fn builder_line_lsn(e: &LogEntry) -> Option<u64> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"^(?:logical decoding found (?:initial starting point|initial consistent point|consistent point) at |skipping snapshot at |got new catalog xmin \d+ at |got new restart lsn [0-9A-F]+/[0-9A-F]+ at |failed to increase restart lsn: proposed [0-9A-F]+/[0-9A-F]+, after )([0-9A-F]+/[0-9A-F]+)",
        )
        .unwrap()
    });
    let ok = match e.level.as_str() {
        "LOG" => e.message.starts_with("logical decoding found"),
        "DEBUG" => !e.message.starts_with("logical decoding found"),
        _ => false,
    };
    if !ok {
        return None;
    }
    if let Some(l) = e
        .level
        .eq("DEBUG")
        .then(|| serialized_file_lsn(&e.message))
        .flatten()
    {
        return Some(l);
    }
    re.captures(&e.message).map(|m| parse_lsn(&m[1]))
}

/// The LSN of the `.snap` file a DEBUG1 `serializing snapshot to
/// pg_logical/snapshots/X-Y.snap` line names (SnapBuildSerialize: the record serialized at).
fn serialized_file_lsn(message: &str) -> Option<u64> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"^serializing snapshot to pg_logical/snapshots/([0-9A-F]+)-([0-9A-F]+)\.snap$",
        )
        .unwrap()
    });
    re.captures(message)
        .map(|m| parse_lsn(&format!("{}/{}", &m[1], &m[2])))
}

/// `(X, S)` of a DEBUG1 `found subtransaction X:S with catalog changes` line
/// (SnapBuildCommitTxn), which names transactions rather than a record.
fn subtransaction_line(e: &LogEntry) -> Option<(u64, u64)> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(r"^found subtransaction (\d+):(\d+) with catalog changes$").unwrap()
    });
    (e.level == "DEBUG")
        .then(|| re.captures(&e.message))
        .flatten()
        .map(|m| (m[1].parse().unwrap(), m[2].parse().unwrap()))
}

/// The rows, anywhere in the trace, whose `server_source` names the DEBUG1 line `e`.
fn rows_naming_anywhere<'a>(rows: &'a [TraceRow], e: &LogEntry) -> Vec<&'a TraceRow> {
    let label = format!(
        "server log: pid {} at {} (DEBUG \"{}\")",
        e.pid, e.at, e.message
    );
    rows.iter()
        .filter(|r| js(&r.raw, "server_source").is_some_and(|s| s.contains(&label)))
        .collect()
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
/// The trace rows at `lsn` that name the server's log line `e` (as
/// `server log: pid P at T` in `server_source` or `disagreement`; a DEBUG1 slot-candidate
/// line as `… (DEBUG "message")` in `server_source`): exactly one, when the line is matched.
fn rows_naming<'a>(rows: &'a [TraceRow], lsn: u64, e: &LogEntry) -> Vec<&'a TraceRow> {
    let label = format!("server log: pid {} at {}", e.pid, e.at);
    let debug_label = format!("{label} (DEBUG \"{}\")", e.message);
    rows.iter()
        .filter(|r| r.lsn == Some(lsn))
        .filter(|r| {
            let src = js(&r.raw, "server_source").unwrap_or_default();
            let dis = r.disagreement.clone().unwrap_or_default();
            if e.level == "DEBUG" && !e.message.starts_with("skipping") {
                src.contains(&debug_label)
            } else {
                src.contains(&label) || dis.contains(&label)
            }
        })
        .collect()
}

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

/// The server's WAL insert position now.
fn insert_lsn(c: &mut Client) -> u64 {
    let s: String = c
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    parse_lsn(&s)
}

fn dump_with_sources(rows: &[TraceRow]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "  {} {} {:?} {:?} agrees={:?} src={:?} dis={:?}\n",
                r.lsn.map(fmt_lsn).unwrap_or_default(),
                r.record,
                r.branch,
                r.message,
                r.agrees,
                js(&r.raw, "server_source"),
                r.disagreement
            )
        })
        .collect()
}

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
