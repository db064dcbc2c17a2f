//! A seeded random workload against the live server: several sessions run DDL, DML,
//! savepoints, rollbacks and prepared transactions while logical slots are created,
//! consumed and restarted. At the end every verdict of the replay is checked against
//! what the server did:
//!
//! - a slot created during the run and never consumed: replaying its creation
//!   (`snapbuild_trace_range` with the slot's catalog_xmin as initial_xmin_horizon and
//!   in_slot_creation) becomes consistent on the record ending at the LSN the creation
//!   returned;
//! - every slot: the commits the replay says are decoded are exactly the xids
//!   `test_decoding` emits for the same WAL (`include-xids`, `skip-empty-xacts` off);
//! - every `.snap` file the server wrote at a serialization point of the replay agrees
//!   with the replay's prediction (`agrees`), and no row disagrees.
//!
//! `PGSNAP_SEEDS` (default `1,2,3`) and `PGSNAP_TXNS` (default 300 transactions per seed)
//! size it. A failure prints the seed and the SQL each session ran, in order, as a
//! reproducer.

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::BTreeSet;
use std::time::Duration;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One worker session and what it has open.
struct Session {
    c: Client,
    in_txn: bool,
    savepoints: u32,
    stmts: u32,
}

struct Run {
    seed: u64,
    env: Env,
    log: Vec<String>,
    tables: Vec<String>,
    next_col: u32,
}

impl Run {
    /// Runs `sql` on session `i`, logging it; errors (e.g. a column that a concurrent
    /// DROP removed) abort the transaction, which is then rolled back.
    fn exec(&mut self, s: &mut Session, i: usize, sql: &str) -> bool {
        self.log.push(format!("-- s{i}\n{sql};"));
        match s.c.batch_execute(sql) {
            Ok(()) => true,
            Err(e) => {
                self.log.push(format!("-- s{i} error: {}", err_text(&e)));
                if s.in_txn {
                    let _ = s.c.batch_execute("ROLLBACK");
                    self.log.push(format!("-- s{i}\nROLLBACK;"));
                    s.in_txn = false;
                    s.savepoints = 0;
                }
                false
            }
        }
    }

    fn table(&mut self, rng: &mut Rng) -> String {
        self.tables[rng.below(self.tables.len() as u64) as usize].clone()
    }

    fn reproducer(&self) -> String {
        format!("-- seed {}\n{}", self.seed, self.log.join("\n"))
    }
}

#[test]
fn random_workload_agrees_with_server() {
    let _g = serial();
    let Some(env) = env() else { return };
    let _ = env.setup();
    let seeds: Vec<u64> = std::env::var("PGSNAP_SEEDS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("PGSNAP_SEEDS: comma-separated numbers")
        })
        .collect();
    let txns: u64 = std::env::var("PGSNAP_TXNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    for seed in seeds {
        run_seed(&env, seed, txns);
    }
}

fn run_seed(env: &Env, seed: u64, txns: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut run = Run {
        seed,
        env: env.clone(),
        log: Vec::new(),
        tables: Vec::new(),
        next_col: 0,
    };
    let mut admin = env.connect("pgsnap-rw-admin");
    let prefix = format!("rw{seed}");
    admin
        .batch_execute(&format!(
            "DO $$ DECLARE r record; BEGIN
               FOR r IN SELECT gid FROM pg_prepared_xacts WHERE gid LIKE '{prefix}_%' LOOP
                 EXECUTE format('ROLLBACK PREPARED %L', r.gid); END LOOP;
               FOR r IN SELECT tablename FROM pg_tables WHERE tablename LIKE '{prefix}_%' LOOP
                 EXECUTE format('DROP TABLE %I', r.tablename); END LOOP; END $$"
        ))
        .unwrap();
    for t in 0..3 {
        let name = format!("{prefix}_t{t}");
        admin
            .batch_execute(&format!("CREATE TABLE {name}(a int, b text)"))
            .unwrap();
        run.tables.push(name);
    }
    let slot_names: Vec<String> = (0..3).map(|i| format!("{prefix}_slot{i}")).collect();
    let guards: Vec<SlotGuard> = slot_names.iter().map(|n| SlotGuard::new(env, n)).collect();
    // One driver thread runs all sessions, so a statement that waits for another
    // session's lock would wait forever: lock_timeout turns that into an error (and a
    // rollback), which is part of the workload.
    let mut sessions: Vec<Session> = (0..4)
        .map(|i| {
            let mut c = env.connect(&format!("pgsnap-rw-{i}"));
            c.batch_execute("SET lock_timeout = '100ms'").unwrap();
            Session {
                c,
                in_txn: false,
                savepoints: 0,
                stmts: 0,
            }
        })
        .collect();
    let mut creations: Vec<(usize, Creation)> = Vec::new();
    let mut created: Vec<(usize, u64)> = Vec::new(); // slot index, LSN creation returned
    let mut consumed = vec![false; slot_names.len()];
    let mut prepared: Vec<String> = Vec::new();
    let mut done_txns = 0u64;
    let mut slot_predictions = 0usize;
    let mut prediction_failures: Vec<String> = Vec::new();
    let mut step = 0u64;
    while done_txns < txns {
        step += 1;
        // Slot life cycle: start creations, collect them, consume some.
        if rng.chance(2) && creations.len() + created.len() < slot_names.len() {
            let idx = creations.len() + created.len();
            run.log
                .push(format!("-- creation of {} starts", slot_names[idx]));
            creations.push((idx, Creation::start(env, &slot_names[idx], "test_decoding")));
        }
        if rng.chance(3) {
            env.log_standby_snapshot(&mut admin);
        }
        if rng.chance(3) && !created.is_empty() {
            let (idx, _) = created[rng.below(created.len() as u64) as usize];
            let f = if rng.chance(50) { "get" } else { "peek" };
            if f == "get" {
                consumed[idx] = true;
                // The slot after this get_changes, as the replay predicts it (logical.c's
                // candidate handling and the final confirm), against what the server left.
                let upto = fmt_lsn(flush_lsn(&mut admin));
                let fields = "catalog_xmin::text, restart_lsn::text, confirmed_flush::text, \
                              candidate_catalog_xmin::text, candidate_xmin_lsn::text, \
                              candidate_restart_valid::text, candidate_restart_lsn::text";
                let pred_fields = fields
                    .split(", ")
                    .map(|f| format!("predicted_{}", f.trim()))
                    .collect::<Vec<_>>()
                    .join(", ");
                let predicted = admin
                    .query_one(
                        &format!("SELECT {pred_fields} FROM snapbuild_slot_prediction($1::name, $2::text::pg_lsn)"),
                        &[&slot_names[idx], &upto],
                    )
                    .unwrap_or_else(|e| panic!("seed {seed}: snapbuild_slot_prediction: {}", err_text(&e)));
                admin
                    .execute(
                        "SELECT count(*) FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL)",
                        &[&slot_names[idx], &upto],
                    )
                    .unwrap();
                let actual = admin
                    .query_one(
                        &format!("SELECT {fields} FROM snapbuild_slots() WHERE slot_name = $1"),
                        &[&slot_names[idx]],
                    )
                    .unwrap();
                slot_predictions += 1;
                for k in 0..7 {
                    let (p, a): (Option<String>, Option<String>) =
                        (predicted.get(k), actual.get(k));
                    if p != a {
                        prediction_failures.push(format!(
                            "{} after get_changes up to {upto}: {} predicted {p:?}, server {a:?}",
                            slot_names[idx],
                            fields.split(", ").nth(k).unwrap_or("?").trim()
                        ));
                    }
                }
            } else {
                admin
                    .batch_execute(&format!(
                        "SELECT count(*) FROM pg_logical_slot_peek_changes('{}', NULL, NULL)",
                        slot_names[idx]
                    ))
                    .unwrap();
            }
        }
        // Prepared transactions end from another session after a while.
        if !prepared.is_empty() && rng.chance(20) {
            let gid = prepared.remove(0);
            let verb = if rng.chance(75) { "COMMIT" } else { "ROLLBACK" };
            run.log.push(format!("-- admin\n{verb} PREPARED '{gid}';"));
            admin
                .batch_execute(&format!("{verb} PREPARED '{gid}'"))
                .unwrap();
        }
        let i = rng.below(sessions.len() as u64) as usize;
        let s = &mut sessions[i];
        if !s.in_txn {
            if rng.chance(25) {
                // autocommit statement
                let t = run.table(&mut rng);
                if run.exec(
                    s,
                    i,
                    &format!("INSERT INTO {t}(a, b) VALUES ({}, 'auto')", rng.below(1000)),
                ) {
                    done_txns += 1;
                }
            } else {
                run.exec(s, i, "BEGIN");
                s.in_txn = true;
                s.stmts = 0;
                if rng.chance(50) {
                    run.exec(s, i, "SELECT pg_current_xact_id()");
                }
            }
            continue;
        }
        s.stmts += 1;
        let roll = rng.below(100);
        let t = run.table(&mut rng);
        match roll {
            0..=34 => {
                run.exec(
                    s,
                    i,
                    &format!("INSERT INTO {t}(a, b) VALUES ({}, 'x')", rng.below(1000)),
                );
            }
            35..=44 => {
                run.exec(
                    s,
                    i,
                    &format!("UPDATE {t} SET a = a + 1 WHERE a % 7 = {}", rng.below(7)),
                );
            }
            45..=49 => {
                run.exec(
                    s,
                    i,
                    &format!("DELETE FROM {t} WHERE a % 11 = {}", rng.below(11)),
                );
            }
            50..=55 => {
                run.next_col += 1;
                let col = format!("c{}", run.next_col);
                run.exec(s, i, &format!("ALTER TABLE {t} ADD COLUMN {col} int"));
            }
            56..=58 => {
                let tmp = format!("{prefix}_tmp{}", rng.below(4));
                run.exec(s, i, &format!("CREATE TABLE IF NOT EXISTS {tmp}(x int)"));
            }
            59..=60 => {
                let tmp = format!("{prefix}_tmp{}", rng.below(4));
                run.exec(s, i, &format!("DROP TABLE IF EXISTS {tmp}"));
            }
            61..=66 => {
                s.savepoints += 1;
                run.exec(s, i, &format!("SAVEPOINT sp{}", s.savepoints));
            }
            67..=70 if s.savepoints > 0 => {
                run.exec(s, i, &format!("ROLLBACK TO SAVEPOINT sp{}", s.savepoints));
            }
            71..=72 if s.savepoints > 0 => {
                run.exec(s, i, &format!("RELEASE SAVEPOINT sp{}", s.savepoints));
                s.savepoints -= 1;
            }
            73..=75 => {
                // transactional logical message
                run.exec(s, i, "SELECT pg_logical_emit_message(true, 'rw', 'm')");
            }
            _ => {
                let end = rng.below(100);
                let stmt = if end < 75 {
                    "COMMIT".to_owned()
                } else if end < 87 {
                    "ROLLBACK".to_owned()
                } else if prepared.len() < 5 {
                    let gid = format!("{prefix}_g{step}");
                    prepared.push(gid.clone());
                    format!("PREPARE TRANSACTION '{gid}'")
                } else {
                    "COMMIT".to_owned()
                };
                if run.exec(s, i, &stmt) {
                    done_txns += 1;
                } else if stmt.starts_with("PREPARE") {
                    prepared.pop();
                }
                s.in_txn = false;
                s.savepoints = 0;
            }
        }
        // Collect creations that finished.
        let mut k = 0;
        while k < creations.len() {
            if creations[k].1.try_done() {
                let (idx, cr) = creations.remove(k);
                let lsn = cr.wait(Duration::from_secs(1));
                run.log.push(format!(
                    "-- creation of {} returned {}",
                    slot_names[idx],
                    fmt_lsn(lsn)
                ));
                created.push((idx, lsn));
            } else {
                k += 1;
            }
        }
    }
    // End everything still open so pending creations can finish.
    for (i, s) in sessions.iter_mut().enumerate() {
        if s.in_txn {
            run.exec(s, i, "COMMIT");
            s.in_txn = false;
        }
    }
    for gid in prepared.drain(..) {
        run.log.push(format!("-- admin\nCOMMIT PREPARED '{gid}';"));
        admin
            .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
            .unwrap();
    }
    for _ in 0..3 {
        env.log_standby_snapshot(&mut admin);
        admin
            .batch_execute(&format!("INSERT INTO {prefix}_t0 VALUES (0, 'flush')"))
            .unwrap();
    }
    for (idx, cr) in creations.drain(..) {
        let lsn = cr.wait(Duration::from_secs(120));
        created.push((idx, lsn));
    }
    assert!(
        !created.is_empty() || txns < 50,
        "seed {seed}: no slot was created"
    );

    let mut failures = prediction_failures;
    let (mut decoded_total, mut files_agreeing, mut commits_seen, mut writer_dependent) =
        (0usize, 0usize, 0usize, 0usize);
    let mut files_byte_equal = 0usize;
    for &(idx, created_at) in &created {
        let slot = &slot_names[idx];
        // 1. The creation, replayed: consistent on the record ending at the returned LSN.
        if !consumed[idx] {
            let ss = server_slot(&mut admin, slot);
            let rows = json_rows(
                &mut admin,
                "SELECT end_lsn::text AS end_lsn, branch FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, true)
                  WHERE state_before <> 'consistent' AND state = 'consistent'",
                &[&fmt_lsn(ss.restart_lsn), &ss.catalog_xmin.unwrap_or(0).to_string()],
            )
            .unwrap();
            let first = rows.first().and_then(|r| jlsn(r, "end_lsn"));
            if first != Some(created_at) {
                failures.push(format!(
                    "{slot}: replayed creation became consistent at {:?}, the server at {}",
                    first.map(fmt_lsn),
                    fmt_lsn(created_at)
                ));
            }
        }
        // 2. Decode verdicts against test_decoding on the same WAL.
        let flush = flush_lsn(&mut admin);
        let rows = trace(&mut admin, slot)
            .unwrap_or_else(|e| panic!("seed {seed}: trace {slot}: {}", err_text(&e)));
        let ours: BTreeSet<u64> = rows
            .iter()
            .filter(|r| r.end_lsn.is_some_and(|e| e <= flush))
            .filter(|r| r.raw.get("decoded").and_then(|v| v.as_bool()) == Some(true))
            .filter_map(|r| r.xid)
            .collect();
        commits_seen += rows
            .iter()
            .filter(|r| r.raw.get("decoded").is_some_and(|v| !v.is_null()))
            .count();
        let server: BTreeSet<u64> = admin
            .query(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes($1, $2::text::pg_lsn, NULL,
                        'include-xids', '1', 'skip-empty-xacts', '0')
                  WHERE data LIKE 'COMMIT %'",
                &[slot, &fmt_lsn(flush)],
            )
            .unwrap()
            .iter()
            .filter(|r| parse_lsn(&r.get::<_, String>(0)) <= flush)
            .filter_map(|r| r.get::<_, String>(1).split_whitespace().nth(1).and_then(|x| x.parse().ok()))
            .collect();
        decoded_total += server.len();
        if ours != server {
            let differing: Vec<String> = ours
                .symmetric_difference(&server)
                .map(|x| x.to_string())
                .collect();
            let detail = admin
                .query(
                    "SELECT lsn::text, record, coalesce(verdict, ''), state FROM snapbuild_trace($1::name, true)
                      WHERE xid::text = ANY($2)",
                    &[slot, &differing],
                )
                .map(|rows| {
                    rows.iter()
                        .map(|r| {
                            format!(
                                "  {} {} {} {}",
                                r.get::<_, String>(0),
                                r.get::<_, String>(1),
                                r.get::<_, String>(2),
                                r.get::<_, String>(3)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            failures.push(format!(
                "{slot}: decoded xids differ up to {}: replay only {:?}, test_decoding only {:?}; their records:\n{detail}",
                fmt_lsn(flush),
                ours.difference(&server).collect::<Vec<_>>(),
                server.difference(&ours).collect::<Vec<_>>()
            ));
        }
        // 3. The peek wrote .snap files at the serialization points: trace again and check.
        let rows = trace(&mut admin, slot).unwrap();
        for r in &rows {
            if r.agrees == Some(false) {
                failures.push(format!(
                    "{slot}: row {} {:?} disagrees: {:?}",
                    r.record, r.branch, r.disagreement
                ));
            }
            match r.raw.get("bytes_agree").and_then(|v| v.as_bool()) {
                Some(true) => files_byte_equal += 1,
                Some(false) => failures.push(format!(
                    "{slot}: row {} at {:?}: the replay's bytes differ from the server's file ({:?})",
                    r.record,
                    r.lsn.map(fmt_lsn),
                    r.disagreement
                )),
                None => {}
            }
            if r.branch_is("serialize") && r.agrees == Some(true) {
                files_agreeing += 1;
                if r.disagreement.is_some() {
                    writer_dependent += 1;
                }
            }
        }
    }
    println!(
        "pgsnap-counts: random seed {seed} PG{} transactions {done_txns} statements {} slots created {} \
         slot states predicted {slot_predictions} commits traced {commits_seen} decoded by test_decoding {decoded_total} .snap files agreeing {files_agreeing} \
         (of which xmax/committed written by a decoder that started elsewhere {writer_dependent}; byte for byte {files_byte_equal}) failures {}",
        env.major,
        run.log.len(),
        created.len(),
        failures.len()
    );
    if std::env::var("PGSNAP_KEEP_SLOTS").as_deref() == Ok("1") {
        // Left for inspection after a failure (the next run drops them first).
        std::mem::forget(guards);
    } else {
        drop(guards);
    }
    if !failures.is_empty() {
        let path = std::env::temp_dir().join(format!("pgsnap-random-seed{seed}.sql"));
        let _ = std::fs::write(&path, run.reproducer());
        panic!(
            "seed {seed}: {} disagreement(s) with the server:\n{}\nreproducer (SQL per session, in order): {}",
            failures.len(),
            failures.join("\n"),
            path.display()
        );
    }
    let _ = &run.env;
}
