//! A14: `snapbuild_decoding_cost` and `snapbuild_backlog` against the server's own
//! counters. For each workload: the slot's statistics are reset
//! (`pg_stat_reset_replication_slot`), the prediction for [restart_lsn, L] is taken, the
//! slot is decoded to L (`pg_logical_slot_get_changes(slot, L, NULL, ...)`, with
//! `'stream-changes', 'on'` when streaming; pgoutput through
//! `pg_logical_slot_get_binary_changes`), and the eight counters of
//! `pg_stat_replication_slots` are compared with the prediction once the server has
//! reported them. `logical_decoding_work_mem` is 64kB in the decoding session (and given
//! to the prediction as `work_mem_kb`), so that small workloads spill.
//!
//! Every comparison prints a `pgsnap-counts: decoding_cost` line (run with --nocapture).

use pg_snapbuild_tests::*;
use postgres::Client;

/// How a comparison decodes.
#[derive(Clone, Copy)]
struct Decode {
    work_mem_kb: i32,
    streaming: bool,
    pgoutput: bool,
}

const SPILL: Decode = Decode {
    work_mem_kb: 64,
    streaming: false,
    pgoutput: false,
};
const STREAM: Decode = Decode {
    work_mem_kb: 64,
    streaming: true,
    pgoutput: false,
};

/// Totals over a run, printed at the end.
#[derive(Default)]
struct Tally {
    calls: u32,
    counters_compared: u32,
    counters_wrong: u32,
    undecided: u32,
    /// Decodes where one transaction carried all of total_bytes.
    single_txn: u32,
    wrong: Vec<String>,
}

/// Predicts, decodes to `upto` (the insert position now when None) and compares.
fn compare(
    c: &mut Client,
    env: &Env,
    slot: &str,
    what: &str,
    d: Decode,
    upto: Option<u64>,
    tally: &mut Tally,
) {
    // the decode stops after the record ending at or after `upto`; it must be flushed
    c.batch_execute("SELECT pg_current_wal_flush_lsn()")
        .unwrap();
    let upto = upto.unwrap_or_else(|| flush_lsn(c));
    let upto_s = fmt_lsn(upto);
    reset_slot_counters(c, slot).unwrap();
    let p = c
        .query_one(
            &format!(
                "SELECT {}, undecided, records FROM snapbuild_decoding_cost($1, '{upto_s}', $2, $3)",
                SLOT_COUNTERS.join(", ")
            ),
            &[&slot, &d.work_mem_kb, &d.streaming],
        )
        .unwrap_or_else(|e| panic!("{what}: snapbuild_decoding_cost: {}", err_text(&e)));
    let predicted: Vec<Option<i64>> = (0..8).map(|i| p.get(i)).collect();
    let undecided: Option<String> = p.get(8);
    // the same decode, transaction by transaction
    let backlog: Vec<(String, i64)> = c
        .query(
            &format!("SELECT decoder, total_bytes FROM snapbuild_backlog($1, '{upto_s}', $2, $3)"),
            &[&slot, &d.work_mem_kb, &d.streaming],
        )
        .unwrap_or_else(|e| panic!("{what}: snapbuild_backlog: {}", err_text(&e)))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut dc = env.connect("pgsnap-decode");
    dc.batch_execute(&format!(
        "SET logical_decoding_work_mem = '{}kB'",
        d.work_mem_kb
    ))
    .unwrap();
    if d.pgoutput {
        let proto = if d.streaming { "2" } else { "1" };
        let mut opts = format!("'proto_version', '{proto}', 'publication_names', 'pgsnap_a14'");
        if d.streaming {
            opts.push_str(", 'streaming', 'on'");
        }
        dc.batch_execute(&format!(
            "SELECT count(*) FROM pg_logical_slot_get_binary_changes('{slot}', '{upto_s}', NULL, {opts})"
        ))
        .unwrap_or_else(|e| panic!("{what}: decoding: {}", err_text(&e)));
    } else {
        let stream = if d.streaming {
            ", 'stream-changes', 'on'"
        } else {
            ""
        };
        dc.batch_execute(&format!(
            "SELECT count(*) FROM pg_logical_slot_get_changes('{slot}', '{upto_s}', NULL, \
             'include-xids', '1'{stream})"
        ))
        .unwrap_or_else(|e| panic!("{what}: decoding: {}", err_text(&e)));
    }
    drop(dc);
    let server = settled_slot_counters(c, slot, &predicted).unwrap();
    tally.calls += 1;
    let mut wrong = Vec::new();
    match &undecided {
        Some(why) => {
            tally.undecided += 1;
            assert!(
                predicted.iter().all(|v| v.is_none()),
                "{what}: undecided ({why}) but counters given"
            );
        }
        None => {
            for (i, name) in SLOT_COUNTERS.iter().enumerate() {
                tally.counters_compared += 1;
                if predicted[i] != Some(server[i]) {
                    tally.counters_wrong += 1;
                    wrong.push(format!(
                        "{name} predicted {:?} server {}",
                        predicted[i], server[i]
                    ));
                }
            }
        }
    }
    // every byte of total_bytes belongs to one transaction of the backlog; with a single
    // transaction sent, the server's total_bytes is that transaction's row
    if undecided.is_none() {
        let sum: i64 = backlog.iter().map(|b| b.1).sum();
        tally.counters_compared += 1;
        if sum != server[1] {
            tally.counters_wrong += 1;
            wrong.push(format!(
                "backlog rows add up to {sum} bytes, server total_bytes {}",
                server[1]
            ));
        }
        let sent: Vec<&(String, i64)> = backlog.iter().filter(|b| b.1 > 0).collect();
        if sent.len() == 1 {
            tally.single_txn += 1;
        }
    }
    println!(
        "pgsnap-counts: decoding_cost {what} major={} work_mem={}kB streaming={} pgoutput={} \
         predicted={predicted:?} server={server:?} undecided={undecided:?}",
        env.major, d.work_mem_kb, d.streaming, d.pgoutput
    );
    if !wrong.is_empty() {
        tally.wrong.push(format!("{what}: {}", wrong.join("; ")));
    }
}

fn finish(tally: Tally, what: &str) {
    println!(
        "pgsnap-counts: decoding_cost_total {what} calls={} counters_compared={} wrong={} undecided={} single_transaction_decodes={}",
        tally.calls, tally.counters_compared, tally.counters_wrong, tally.undecided, tally.single_txn
    );
    assert!(
        tally.wrong.is_empty(),
        "{what}: counters the server disagrees with:\n{}",
        tally.wrong.join("\n")
    );
}

/// A table of text rows; `n` rows of `len` characters inserted by one statement.
fn rows(table: &str, n: i32, len: i32) -> String {
    format!("INSERT INTO {table} SELECT g, repeat(md5(g::text), {len} / 32 + 1)::varchar({len}) FROM generate_series(1, {n}) g")
}

/// Rolls back the prepared transactions a test left (a failed test must not leave one:
/// it would hold every later slot creation).
struct PreparedGuard(Env);

impl Drop for PreparedGuard {
    fn drop(&mut self) {
        let mut c = self.0.connect("pgsnap-a14-cleanup");
        for gid in ["pgsnap_a14_g1", "pgsnap_a14_g2"] {
            let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'"));
        }
    }
}

fn setup_tables(c: &mut Client, tables: &[&str]) {
    for t in tables {
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS {t}; CREATE TABLE {t} (i int, t text)"
        ))
        .unwrap();
    }
}

#[test]
fn a14_small_large_concurrent_and_aborted() {
    let slot = "pgsnap_a14a";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    setup_tables(&mut c, &["pgsnap_a14a"]);
    create_slot(&env, slot);
    let mut tally = Tally::default();
    let t = "pgsnap_a14a";

    // many small transactions
    for i in 0..200 {
        c.batch_execute(&format!("INSERT INTO {t} VALUES ({i}, 'x')"))
            .unwrap();
    }
    compare(&mut c, &env, slot, "small", SPILL, None, &mut tally);

    // one transaction larger than the memory limit
    c.batch_execute(&format!("BEGIN; {}; COMMIT", rows(t, 3000, 100)))
        .unwrap();
    compare(&mut c, &env, slot, "large", SPILL, None, &mut tally);

    // several concurrent medium ones, interleaved
    let mut xs: Vec<OpenXact> = (0..3)
        .map(|k| OpenXact::begin(&env, &format!("pgsnap-a14-{k}")))
        .collect();
    for round in 0..4 {
        for (k, x) in xs.iter_mut().enumerate() {
            x.exec(&rows(t, 60 + 10 * k as i32 + round, 64));
        }
    }
    for x in xs.drain(..) {
        x.commit();
    }
    compare(&mut c, &env, slot, "concurrent", SPILL, None, &mut tally);

    // an aborted large transaction, and a small committed one after it
    let mut x = OpenXact::begin(&env, "pgsnap-a14-abort");
    x.exec(&rows(t, 2500, 100));
    x.rollback();
    c.batch_execute(&format!("INSERT INTO {t} VALUES (1, 'after')"))
        .unwrap();
    compare(&mut c, &env, slot, "aborted", SPILL, None, &mut tally);

    // the same kinds, streamed
    c.batch_execute(&format!("BEGIN; {}; COMMIT", rows(t, 3000, 100)))
        .unwrap();
    let mut xs: Vec<OpenXact> = (0..3)
        .map(|k| OpenXact::begin(&env, &format!("pgsnap-a14-s{k}")))
        .collect();
    for round in 0..4 {
        for (k, x) in xs.iter_mut().enumerate() {
            x.exec(&rows(t, 60 + 10 * k as i32 + round, 64));
        }
    }
    for x in xs.drain(..) {
        x.commit();
    }
    compare(
        &mut c,
        &env,
        slot,
        "large+concurrent streamed",
        STREAM,
        None,
        &mut tally,
    );
    finish(tally, "a14a");
}

#[test]
fn a14_subtransactions_truncate_messages_ddl() {
    let slot = "pgsnap_a14b";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let t = "pgsnap_a14b";
    setup_tables(&mut c, &[t]);
    create_slot(&env, slot);
    let mut tally = Tally::default();

    // subtransactions, some rolled back
    c.batch_execute(&format!(
        "BEGIN; INSERT INTO {t} VALUES (0, 'top');
         SAVEPOINT a; {}; ROLLBACK TO a;
         SAVEPOINT b; {}; RELEASE b;
         SAVEPOINT c; {}; SAVEPOINT d; {}; ROLLBACK TO d; RELEASE c;
         COMMIT",
        rows(t, 800, 100),
        rows(t, 900, 100),
        rows(t, 50, 10),
        rows(t, 700, 100)
    ))
    .unwrap();
    compare(&mut c, &env, slot, "subxacts", SPILL, None, &mut tally);

    // TRUNCATE, and logical messages
    c.batch_execute(&format!(
        "BEGIN; TRUNCATE {t}; INSERT INTO {t} VALUES (1, 'a'); COMMIT;
         SELECT pg_logical_emit_message(true, 'pgsnap', repeat('m', 5000));
         SELECT pg_logical_emit_message(false, 'pgsnap', repeat('n', 3000));
         BEGIN; SELECT pg_logical_emit_message(true, 'pgsnap-p', 'in a transaction');
         INSERT INTO {t} VALUES (2, 'b'); COMMIT"
    ))
    .unwrap();
    compare(
        &mut c,
        &env,
        slot,
        "truncate+messages",
        SPILL,
        None,
        &mut tally,
    );

    // DDL, and DDL committing while a data transaction is open (a snapshot and
    // invalidations distributed to it)
    let mut x = OpenXact::begin(&env, "pgsnap-a14-open");
    x.exec(&rows(t, 200, 50));
    c.batch_execute(
        "DROP TABLE IF EXISTS pgsnap_a14b_n;
         BEGIN; CREATE TABLE pgsnap_a14b_n (k int); ALTER TABLE pgsnap_a14b_n ADD COLUMN extra int;
         INSERT INTO pgsnap_a14b_n VALUES (1, 2); COMMIT;
         DROP TABLE pgsnap_a14b_n",
    )
    .unwrap();
    x.exec(&rows(t, 200, 50));
    x.commit();
    compare(&mut c, &env, slot, "ddl", SPILL, None, &mut tally);
    compare(&mut c, &env, slot, "nothing new", SPILL, None, &mut tally);
    finish(tally, "a14b");
}

#[test]
fn a14_two_phase_other_database_and_restart_before_confirmed_flush() {
    let slot = "pgsnap_a14c";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let _prepared = PreparedGuard(env.clone());
    let t = "pgsnap_a14c";
    setup_tables(&mut c, &[t]);
    create_slot(&env, slot);
    let mut tally = Tally::default();

    // two-phase: prepared then committed, prepared then rolled back (the slot is not
    // two-phase: decoded at COMMIT PREPARED)
    let mut x = OpenXact::begin(&env, "pgsnap-a14-2pc1");
    x.exec(&rows(t, 1000, 100));
    x.prepare("pgsnap_a14_g1");
    let mut x = OpenXact::begin(&env, "pgsnap-a14-2pc2");
    x.exec(&rows(t, 300, 100));
    x.prepare("pgsnap_a14_g2");
    c.batch_execute("COMMIT PREPARED 'pgsnap_a14_g1'").unwrap();
    c.batch_execute("ROLLBACK PREPARED 'pgsnap_a14_g2'")
        .unwrap();
    compare(&mut c, &env, slot, "two-phase", SPILL, None, &mut tally);

    // traffic in another database
    let _ = c.batch_execute("DROP DATABASE IF EXISTS pgsnap_a14_other");
    c.batch_execute("CREATE DATABASE pgsnap_a14_other").unwrap();
    {
        let mut o = connect_db(&env, &mut c, "pgsnap_a14_other", "pgsnap-a14-other");
        o.batch_execute(&format!(
            "CREATE TABLE o (i int, t text); BEGIN; {}; COMMIT",
            rows("o", 2000, 100)
        ))
        .unwrap();
    }
    c.batch_execute(&format!("INSERT INTO {t} VALUES (1, 'here')"))
        .unwrap();
    compare(
        &mut c,
        &env,
        slot,
        "other database",
        SPILL,
        None,
        &mut tally,
    );
    c.batch_execute("DROP DATABASE pgsnap_a14_other").unwrap();

    // a decode that stops inside an open transaction: the next one starts at a
    // restart_lsn before it and reads the transactions committed before confirmed_flush
    // again (skipped)
    let mut x = OpenXact::begin(&env, "pgsnap-a14-long");
    x.exec(&rows(t, 500, 100));
    env.log_standby_snapshot(&mut c);
    for i in 0..20 {
        c.batch_execute(&format!("INSERT INTO {t} VALUES ({i}, 'between')"))
            .unwrap();
    }
    let mid = flush_lsn(&mut c);
    compare(
        &mut c,
        &env,
        slot,
        "upto inside",
        SPILL,
        Some(mid),
        &mut tally,
    );
    x.exec(&rows(t, 500, 100));
    x.commit();
    for i in 0..20 {
        c.batch_execute(&format!("INSERT INTO {t} VALUES ({i}, 'after')"))
            .unwrap();
    }
    compare(
        &mut c,
        &env,
        slot,
        "restart before confirmed_flush",
        SPILL,
        None,
        &mut tally,
    );
    finish(tally, "a14c");
}

#[test]
fn a14_toast_and_pgoutput() {
    let slot = "pgsnap_a14d";
    let Some((_g, env, mut c, _guard)) = start_with_slot(slot) else {
        return;
    };
    let t = "pgsnap_a14d";
    setup_tables(&mut c, &[t]);
    let _ = c.batch_execute("DROP PUBLICATION IF EXISTS pgsnap_a14");
    c.batch_execute(&format!("CREATE PUBLICATION pgsnap_a14 FOR TABLE {t}"))
        .unwrap();
    c.query_one(
        "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
        &[&slot],
    )
    .unwrap();
    let mut tally = Tally::default();
    let pg = Decode {
        pgoutput: true,
        ..SPILL
    };
    for i in 0..50 {
        c.batch_execute(&format!("INSERT INTO {t} VALUES ({i}, 'x')"))
            .unwrap();
    }
    c.batch_execute(&format!("BEGIN; {}; COMMIT", rows(t, 2000, 100)))
        .unwrap();
    compare(&mut c, &env, slot, "pgoutput", pg, None, &mut tally);

    // TOAST values: rows with 20 kB of incompressible text
    c.batch_execute(&format!(
        "BEGIN; INSERT INTO {t} SELECT g, (SELECT string_agg(md5(g::text || k::text), '') \
         FROM generate_series(1, 640) k) FROM generate_series(1, 6) g; COMMIT"
    ))
    .unwrap();
    compare(&mut c, &env, slot, "toast", pg, None, &mut tally);

    // TOAST values before an int8 (padding moves when the pointer shrinks), rows updated
    // with and without a new TOAST value, TOAST values in a subtransaction, and enough
    // TOAST rows in one transaction to spill and be read back in several rounds
    c.batch_execute(
        "DROP TABLE IF EXISTS pgsnap_a14d_w; CREATE TABLE pgsnap_a14d_w (t text, n int8, u text);
         ALTER TABLE pgsnap_a14d_w REPLICA IDENTITY FULL",
    )
    .unwrap();
    c.batch_execute("ALTER PUBLICATION pgsnap_a14 ADD TABLE pgsnap_a14d_w")
        .unwrap();
    let big = "(SELECT string_agg(md5(g::text || k::text), '') FROM generate_series(1, 300) k)";
    let big_n = "(SELECT string_agg(md5(n::text || k::text), '') FROM generate_series(1, 300) k)";
    c.batch_execute(&format!(
        "BEGIN; INSERT INTO pgsnap_a14d_w SELECT {big}, g, 'short' FROM generate_series(1, 5) g;
         UPDATE pgsnap_a14d_w SET n = n + 1 WHERE n = 1;
         UPDATE pgsnap_a14d_w SET u = {big_n} WHERE n = 2;
         SAVEPOINT s; INSERT INTO pgsnap_a14d_w SELECT {big}, g, {big} FROM generate_series(6, 8) g;
         RELEASE s; COMMIT"
    ))
    .unwrap();
    compare(
        &mut c,
        &env,
        slot,
        "toast alignment and updates",
        pg,
        None,
        &mut tally,
    );
    c.batch_execute(&format!(
        "BEGIN; INSERT INTO pgsnap_a14d_w SELECT {big}, g, NULL FROM generate_series(1, 700) g; COMMIT"
    ))
    .unwrap();
    compare(&mut c, &env, slot, "toast spilled", pg, None, &mut tally);
    if env.major >= 14 {
        c.batch_execute(&format!("BEGIN; {}; COMMIT", rows(t, 2000, 100)))
            .unwrap();
        compare(
            &mut c,
            &env,
            slot,
            "pgoutput streamed",
            Decode {
                streaming: true,
                ..pg
            },
            None,
            &mut tally,
        );
    }
    c.batch_execute("DROP PUBLICATION pgsnap_a14").unwrap();
    finish(tally, "a14d");
}
