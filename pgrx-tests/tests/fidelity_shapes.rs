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
//! - f5b: a target inside a run of heap records: both ways of consuming stop at the first
//!   record ending at or after it, and so must the prediction.
//!
//! The builder lines of the server log in other shapes are checked in
//! `tests/fidelity_log_formats.rs` and `tests/fidelity_debug1_lines.rs`; the
//! overflowed-subtransaction shape of the same family is scenario c2
//! (`tests/scenarios_serialization.rs`).

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

#[test]
fn f1_message_from_another_database_gives_no_base_snapshot() {
    let (slot, tab) = ("pgsnap_fid_msg", "pgsnap_fid_msg_t");
    let Some((_g, env, mut c, _slot)) = start_with_slot(slot) else {
        return;
    };
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
    let mut other = connect_db(&env, &mut c, "pgsnap_fid_other", "pgsnap-fid-other");
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
    let (slot, tab) = ("pgsnap_fid_inj", "pgsnap_fid_inj_t");
    let Some((_g, env, mut c, _slot)) = start_with_slot(slot) else {
        return;
    };
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
    let (slot, tab) = ("pgsnap_fid_alloc", "pgsnap_fid_alloc_t");
    let Some((_g, env, mut c, _slot)) = start_with_slot(slot) else {
        return;
    };
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
    let (by_get, by_advance) = ("pgsnap_fid_get", "pgsnap_fid_adv");
    let Some((_g, env, mut c, _s1)) = start_with_slot(by_get) else {
        return;
    };
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
    let (by_get, by_advance) = ("pgsnap_fid_get_run", "pgsnap_fid_adv_run");
    let Some((_g, env, mut c, _s1)) = start_with_slot(by_get) else {
        return;
    };
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
