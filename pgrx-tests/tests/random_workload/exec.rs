//! The executor: runs steps against the cluster (sessions, admin session, slot
//! creations in their own threads) and observes what the server and the replay say.

use crate::steps::Action;
use crate::subscription::{Subscription, SubscriptionObs};
use crate::{session_db, slot_db, two_phase, P, SECOND_DB, SESSIONS, SLOTS, TABLES};
use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// One slot field: (name, predicted, what the server left).
pub type FieldPair = (&'static str, Option<String>, Option<String>);

/// A `get_changes` and what the replay predicted for the slot it leaves behind.
#[derive(Clone, Debug)]
pub struct Prediction {
    pub slot: String,
    pub upto: String,
    /// By `pg_replication_slot_advance` (else `pg_logical_slot_get_changes`).
    pub advance: bool,
    /// Whether the catalog_xmin fields are predicted (not for an advance on 14-16, where
    /// `snapbuild_slot_prediction` leaves them NULL).
    pub xmin_predicted: bool,
    /// (field, predicted, server) or the error of `snapbuild_slot_prediction`.
    pub fields: Result<Vec<FieldPair>, String>,
    /// For a `get_changes`: `snapbuild_decoding_cost`'s eight counters (NULL when
    /// undecided, with why) and `pg_stat_replication_slots`' after the decode (the slot's
    /// statistics reset before), or an error.
    pub cost: Option<Result<CostPair, String>>,
}

/// The eight counters predicted (with `undecided`) and the server's.
pub type CostPair = (Vec<Option<i64>>, Option<String>, Vec<i64>);

/// A creation that returned: the LSN it returned and the slot right then (a peek can
/// move restart_lsn and catalog_xmin later: LogicalIncreaseRestartDecodingForSlot and
/// LogicalIncreaseXminForSlot confirm at once what lies before confirmed_flush).
#[derive(Clone, Copy, Debug)]
pub struct Created {
    pub lsn: u64,
    pub restart_lsn: u64,
    pub catalog_xmin: Option<u64>,
}

/// What the server and the replay said about one slot after the last step.
#[derive(Clone, Debug)]
pub struct SlotObs {
    pub name: String,
    pub created_at: u64,
    /// Never consumed: the `end_lsn` of the first consistent row of the replayed creation
    /// (from the restart_lsn, with the catalog_xmin the slot had when it returned).
    pub creation_consistent_at: Option<Result<Option<u64>, String>>,
    pub flush: u64,
    pub trace: Result<Vec<TraceRow>, String>,
    /// `test_decoding` (`include-xids`, `skip-empty-xacts` off) up to `flush`: every line
    /// that is not a row change (BEGIN, COMMIT, messages, …), with its LSN.
    pub decoded: Result<Vec<(u64, String)>, String>,
    /// The same peek with `stream-changes` on, in a session whose
    /// `logical_decoding_work_mem` is the minimum (64kB) and, on 16+,
    /// `debug_logical_replication_streaming = immediate`: in-progress transactions are
    /// streamed.
    pub decoded_streamed: Result<Vec<(u64, String)>, String>,
    /// The trace again after that peek wrote the `.snap` files.
    pub trace_after_peek: Result<Vec<TraceRow>, String>,
}

/// Everything a run produced that the checks read.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub prefix: String,
    /// Per step index: what happened when it did not simply succeed.
    pub notes: HashMap<usize, String>,
    /// What the executor did after the last step, besides the fixed epilogue.
    pub epilogue: Vec<String>,
    /// Per slot: its creation, once returned.
    pub created: Vec<Option<Created>>,
    pub consumed: Vec<bool>,
    pub predictions: Vec<Prediction>,
    pub slots: Vec<SlotObs>,
    /// The subscription's slot, traced while its walsender held it.
    pub subscription: Option<SubscriptionObs>,
}

pub const PRED_FIELDS: [&str; 7] = [
    "catalog_xmin",
    "restart_lsn",
    "confirmed_flush",
    "candidate_catalog_xmin",
    "candidate_xmin_lsn",
    "candidate_restart_valid",
    "candidate_restart_lsn",
];

/// `{prefix}<field>::text` for each of [`PRED_FIELDS`], comma-separated.
fn pred_columns(prefix: &str) -> String {
    PRED_FIELDS
        .iter()
        .map(|f| format!("{prefix}{f}::text"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs steps against the cluster with names under one prefix; cleans up (slots,
/// prepared transactions, tables of the prefix) when dropped unless told to keep them.
pub struct Exec<'e> {
    env: &'e Env,
    /// The environment of each database ([`session_db`], [`slot_db`]): the test's, then
    /// [`SECOND_DB`].
    dbs: Vec<Env>,
    pub prefix: String,
    replay: bool,
    keep: bool,
    admin: Client,
    /// The admin session of database 1.
    admin_b: Client,
    sessions: Vec<Client>,
    creations: Vec<Option<Creation>>,
    guards: Vec<SlotGuard>,
    subscription: Option<Subscription>,
    out: Outcome,
}

pub fn slot_name(prefix: &str, i: usize) -> String {
    format!("{prefix}_slot{i}")
}

/// Prepared transactions and tables of a prefix go (the `_` escaped for LIKE).
pub fn cleanup_prefix(c: &mut Client, prefix: &str) -> Vec<String> {
    let like = format!("{prefix}\\_%");
    let mut gone = Vec::new();
    let _ = c.batch_execute("SET lock_timeout = '10s'");
    if let Ok(rows) = c.query(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE $1",
        &[&like],
    ) {
        for r in rows {
            let gid: String = r.get(0);
            if c.batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
                .is_ok()
            {
                gone.push(gid);
            }
        }
    }
    let _ = c.batch_execute(&format!(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT tablename FROM pg_tables
                     WHERE schemaname = current_schema() AND tablename LIKE '{like}' LOOP
             EXECUTE format('DROP TABLE %I', r.tablename); END LOOP; END $$"
    ));
    let _ = c.batch_execute("RESET lock_timeout");
    gone
}

impl<'e> Exec<'e> {
    pub fn new(env: &'e Env, prefix: &str, replay: bool, keep: bool) -> Exec<'e> {
        let dbs = vec![env.clone(), env.in_database(SECOND_DB)];
        let mut admin = env.connect("pgsnap-rw-admin");
        let mut admin_b = dbs[1].connect("pgsnap-rw-admin-b");
        let guards: Vec<SlotGuard> = (0..SLOTS)
            .map(|i| SlotGuard::new(env, &slot_name(prefix, i)))
            .collect();
        for c in [&mut admin, &mut admin_b] {
            cleanup_prefix(c, prefix);
            for t in 0..TABLES {
                c.batch_execute(&format!("CREATE TABLE {prefix}_t{t}(a int, b text)"))
                    .unwrap();
            }
        }
        let subscription = Some(Subscription::create(env, &mut admin, &mut admin_b, prefix));
        let sessions = Self::connect_sessions(&dbs);
        Exec {
            env,
            dbs,
            prefix: prefix.to_owned(),
            replay,
            keep,
            admin,
            admin_b,
            sessions,
            creations: (0..SLOTS).map(|_| None).collect(),
            guards,
            subscription,
            out: Outcome {
                prefix: prefix.to_owned(),
                created: vec![None; SLOTS],
                consumed: vec![false; SLOTS],
                ..Outcome::default()
            },
        }
    }

    /// The sessions, each in its database. One driver thread runs all sessions, so a
    /// statement that waits for another session's lock would wait forever: lock_timeout
    /// turns that into an error (and a rollback), which is part of the workload.
    fn connect_sessions(dbs: &[Env]) -> Vec<Client> {
        (0..SESSIONS)
            .map(|i| {
                let mut c = dbs[session_db(i)].connect(&format!("pgsnap-rw-{i}"));
                c.batch_execute("SET lock_timeout = '100ms'").unwrap();
                c
            })
            .collect()
    }

    /// The admin session of database `db`.
    fn admin_in(&mut self, db: usize) -> &mut Client {
        if db == 0 {
            &mut self.admin
        } else {
            &mut self.admin_b
        }
    }

    /// Restarts the server (see [`Env::restart`]) and reconnects every session. Refused
    /// while a creation runs (its session would die with an error, not a verdict).
    fn restart(&mut self, immediate: bool) -> Result<(), String> {
        if self.creations.iter().any(Option::is_some) {
            return Err("skipped: a slot's creation is running".into());
        }
        self.env.restart(immediate)?;
        self.admin = self.dbs[0].connect("pgsnap-rw-admin");
        self.admin_b = self.dbs[1].connect("pgsnap-rw-admin-b");
        self.sessions = Self::connect_sessions(&self.dbs);
        Ok(())
    }

    fn sql(&self, s: &str) -> String {
        s.replace(P, &self.prefix)
    }

    fn slot(&self, i: usize) -> String {
        slot_name(&self.prefix, i)
    }

    pub fn creation_returned(&mut self, i: usize) -> bool {
        self.creations[i].as_mut().is_some_and(|c| c.try_done())
    }

    /// Runs step `k` (its index in the recording); an error is noted and returned, the
    /// run goes on (a replay runs the recorded ROLLBACK or end of the transaction next).
    pub fn run(&mut self, k: usize, a: &Action) -> Result<(), String> {
        let r = self.run_inner(a);
        if let Err(e) = &r {
            self.out.notes.insert(k, e.clone());
        }
        r
    }

    fn run_inner(&mut self, a: &Action) -> Result<(), String> {
        let e = |e: postgres::Error| err_text(&e);
        match a {
            Action::Sql { s, sql } => {
                let sql = self.sql(sql);
                self.sessions[*s].batch_execute(&sql).map_err(e)
            }
            Action::Admin { db, sql } => {
                let sql = self.sql(sql);
                self.admin_in(*db).batch_execute(&sql).map_err(e)
            }
            Action::StandbySnapshot => self
                .admin
                .batch_execute(self.env.standby_snapshot_sql())
                .map_err(e),
            Action::CreateStart(i) => {
                let cr = Creation::start_with(
                    &self.dbs[slot_db(*i)],
                    &self.slot(*i),
                    "test_decoding",
                    two_phase(*i),
                );
                self.creations[*i] = Some(cr);
                Ok(())
            }
            Action::CreateFinish(i) => self.create_finish(*i),
            Action::Peek(i) => {
                if self.out.created[*i].is_none() {
                    return Err("skipped: the slot's creation has not returned".into());
                }
                let sql = format!(
                    "SELECT count(*) FROM pg_logical_slot_peek_changes('{}', NULL, NULL)",
                    self.slot(*i)
                );
                self.admin_in(slot_db(*i)).batch_execute(&sql).map_err(e)
            }
            Action::Get(i) => self.get(*i, false),
            Action::Advance(i) => self.get(*i, true),
            Action::Restart { immediate } => self.restart(*immediate),
        }
    }

    /// In the recorded run the creation had returned here; a replay gives it a moment,
    /// and otherwise collects it after the last step.
    fn create_finish(&mut self, i: usize) -> Result<(), String> {
        let wait = Duration::from_secs(if self.replay { 3 } else { 1 });
        let t0 = Instant::now();
        while !self.creation_returned(i) {
            if t0.elapsed() > wait || self.creations[i].is_none() {
                return Err(
                    "the creation has not returned here (collected after the last step)".into(),
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let cr = self.creations[i].take().unwrap();
        self.collect(i, cr, Duration::from_secs(1));
        Ok(())
    }

    /// `get_changes` (or, `advance`, `pg_replication_slot_advance`: a fast-forward decoder
    /// confirming the target) of slot i up to the flush position, after the replay's
    /// prediction of the slot it leaves behind (logical.c's candidate handling and the
    /// final confirm), which is recorded beside what the server left.
    fn get(&mut self, i: usize, advance: bool) -> Result<(), String> {
        let e = |e: postgres::Error| err_text(&e);
        if self.out.created[i].is_none() {
            return Err("skipped: the slot's creation has not returned".into());
        }
        let slot = self.slot(i);
        self.out.consumed[i] = true;
        let admin = self.admin_in(slot_db(i));
        // A transaction that only takes an xid writes no WAL before its commit record, so
        // its commit does not wait for a flush: the flush position is where the WAL writer
        // left it, often inside a record that crosses a page (it flushes full pages). That
        // is kept on purpose: get_changes then reads the record that crosses it (waiting
        // for it, as the prediction does for up to 10 s) and confirms its end, while
        // pg_replication_slot_advance confirms the target itself (pgrx-tests fidelity f5).
        admin
            .batch_execute("BEGIN; SELECT pg_current_xact_id(); COMMIT")
            .map_err(e)?;
        let upto = fmt_lsn(flush_lsn(admin));
        let predicted = admin
            .query_one(
                &format!(
                    "SELECT {} FROM snapbuild_slot_prediction($1::name, $2::text::pg_lsn, $3)",
                    pred_columns("predicted_")
                ),
                &[&slot, &upto, &advance],
            )
            .map_err(e);
        // the decoding cost of the same get_changes, under the smallest memory limit so
        // that transactions spill; the slot's statistics are reset first
        let cost = (!advance).then(|| -> Result<(Vec<Option<i64>>, Option<String>), String> {
            admin
                .batch_execute("SET logical_decoding_work_mem = '64kB'")
                .map_err(e)?;
            reset_slot_counters(admin, &slot)?;
            let r = admin
                .query_one(
                    &format!(
                        "SELECT {}, undecided FROM snapbuild_decoding_cost($1::name, $2::text::pg_lsn)",
                        SLOT_COUNTERS.join(", ")
                    ),
                    &[&slot, &upto],
                )
                .map_err(e)?;
            Ok(((0..8).map(|k| r.get(k)).collect(), r.get(8)))
        });
        let consume = if advance {
            "SELECT count(*) FROM pg_replication_slot_advance($1, $2::text::pg_lsn)"
        } else {
            "SELECT count(*) FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL)"
        };
        let consumed = admin.execute(consume, &[&slot, &upto]).map_err(e);
        // the other steps decode with the server's setting
        if cost.is_some() {
            admin
                .batch_execute("RESET logical_decoding_work_mem")
                .map_err(e)?;
        }
        consumed?;
        let cost = cost.map(|c| {
            c.and_then(|(pred, why)| {
                let server = settled_slot_counters(admin, &slot, &pred)?;
                Ok((pred, why, server))
            })
        });
        let actual = admin
            .query_one(
                &format!(
                    "SELECT {} FROM snapbuild_slots() WHERE slot_name = $1",
                    pred_columns("")
                ),
                &[&slot],
            )
            .map_err(e)?;
        let fields = predicted.map(|p| {
            (0..PRED_FIELDS.len())
                .map(|k| (PRED_FIELDS[k], p.get(k), actual.get(k)))
                .collect()
        });
        let xmin_predicted = !advance || self.env.major >= 17;
        self.out.predictions.push(Prediction {
            slot,
            upto,
            advance,
            xmin_predicted,
            fields,
            cost,
        });
        Ok(())
    }

    /// The creation's result and the slot as it returned.
    fn collect(&mut self, i: usize, cr: Creation, timeout: Duration) -> u64 {
        let lsn = cr.wait(timeout);
        let name = self.slot(i);
        let ss = server_slot(&mut self.admin, &name);
        self.out.created[i] = Some(Created {
            lsn,
            restart_lsn: ss.restart_lsn,
            catalog_xmin: ss.catalog_xmin,
        });
        lsn
    }

    /// After the last step: whatever a replay left open is ended, three RUNNING_XACTS
    /// with a commit after each let pending creations finish, then every created slot
    /// is observed.
    pub fn finish(mut self) -> Outcome {
        for c in &mut self.sessions {
            // Only a replay can leave one open (the recorded run ended them all).
            let _ = c.batch_execute("ROLLBACK");
        }
        let like = format!("{}\\_%", self.prefix);
        for db in 0..2 {
            let admin = if db == 0 {
                &mut self.admin
            } else {
                &mut self.admin_b
            };
            let gids: Vec<String> = query_column(
                admin,
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE $1",
                &[&like],
                "pg_prepared_xacts",
            );
            for gid in gids {
                let _ = admin.batch_execute(&format!("ROLLBACK PREPARED '{gid}'"));
                self.out.epilogue.push(format!(
                    "ROLLBACK PREPARED '{gid}' (left prepared by this list, database {db})"
                ));
            }
        }
        for _ in 0..3 {
            let t0 = format!("{}_t0", self.prefix);
            self.env
                .log_standby_snapshot_flushed(&mut self.admin, &t0, "0, 'flush'");
        }
        for i in 0..SLOTS {
            if let Some(cr) = self.creations[i].take() {
                let lsn = self.collect(i, cr, Duration::from_secs(120));
                self.out.epilogue.push(format!(
                    "creation of {} returned {} after the last step",
                    self.slot(i),
                    fmt_lsn(lsn)
                ));
            }
        }
        for i in 0..SLOTS {
            if let Some(at) = self.out.created[i] {
                let o = self.observe(i, at);
                self.out.slots.push(o);
            }
        }
        if let Some(sub) = &self.subscription {
            self.out.subscription = Some(sub.observe(&mut self.admin));
        }
        std::mem::take(&mut self.out)
    }

    fn observe(&mut self, idx: usize, created: Created) -> SlotObs {
        let name = self.slot(idx);
        let db = slot_db(idx);
        let e = |e: postgres::Error| err_text(&e);
        let creation_consistent_at = (!self.out.consumed[idx]).then(|| {
            json_rows(
                self.admin_in(db),
                "SELECT end_lsn::text AS end_lsn, branch FROM snapbuild_trace_range($1::text::pg_lsn, NULL, $2::text::xid, true)
                  WHERE state_before <> 'consistent' AND state = 'consistent'",
                &[
                    &fmt_lsn(created.restart_lsn),
                    &created.catalog_xmin.unwrap_or(0).to_string(),
                ],
            )
            .map(|rows| rows.first().and_then(|r| jlsn(r, "end_lsn")))
            .map_err(e)
        });
        let flush = flush_lsn(self.admin_in(db));
        let trace1 = trace(self.admin_in(db), &name).map_err(e);
        let decoded = self
            .admin_in(db)
            .query(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes($1, $2::text::pg_lsn, NULL,
                        'include-xids', '1', 'skip-empty-xacts', '0')
                  WHERE data NOT LIKE 'table %'",
                &[&name, &fmt_lsn(flush)],
            )
            .map(|rows| {
                rows.iter()
                    .map(|r| (parse_lsn(&r.get::<_, String>(0)), r.get::<_, String>(1)))
                    .filter(|(l, _)| *l <= flush)
                    .collect()
            })
            .map_err(e);
        let decoded_streamed = self.peek_streamed(db, &name, flush);
        let trace_after_peek = trace(self.admin_in(db), &name).map_err(e);
        SlotObs {
            name,
            created_at: created.lsn,
            creation_consistent_at,
            flush,
            trace: trace1,
            decoded,
            decoded_streamed,
            trace_after_peek,
        }
    }

    /// [`SlotObs::decoded_streamed`]: test_decoding with `stream-changes` up to `flush`.
    fn peek_streamed(
        &mut self,
        db: usize,
        name: &str,
        flush: u64,
    ) -> Result<Vec<(u64, String)>, String> {
        let e = |e: postgres::Error| err_text(&e);
        let major = self.env.major;
        let c = self.admin_in(db);
        c.batch_execute("SET logical_decoding_work_mem = '64kB'")
            .map_err(e)?;
        if major >= 16 {
            c.batch_execute("SET debug_logical_replication_streaming = immediate")
                .map_err(e)?;
        }
        let rows = c
            .query(
                "SELECT lsn::text, data FROM pg_logical_slot_peek_changes($1, $2::text::pg_lsn, NULL,
                        'include-xids', '1', 'skip-empty-xacts', '0', 'stream-changes', '1')
                  WHERE data NOT LIKE 'table %' AND data NOT LIKE 'streaming change %'",
                &[&name, &fmt_lsn(flush)],
            )
            .map(|rows| {
                rows.iter()
                    .map(|r| (parse_lsn(&r.get::<_, String>(0)), r.get::<_, String>(1)))
                    .filter(|(l, _)| *l <= flush)
                    .collect()
            })
            .map_err(e);
        let _ = c.batch_execute("RESET logical_decoding_work_mem");
        if major >= 16 {
            let _ = c.batch_execute("RESET debug_logical_replication_streaming");
        }
        rows
    }
}

impl Drop for Exec<'_> {
    fn drop(&mut self) {
        self.sessions.clear();
        if let Some(sub) = self.subscription.take() {
            if self.keep {
                std::mem::forget(sub);
            } else {
                sub.drop_all(&mut self.admin, &mut self.admin_b, &self.prefix);
            }
        }
        if self.keep {
            // Left for inspection (the next run with this prefix drops them first).
            std::mem::forget(std::mem::take(&mut self.guards));
            return;
        }
        self.guards.clear();
        cleanup_prefix(&mut self.admin, &self.prefix);
        cleanup_prefix(&mut self.admin_b, &self.prefix);
    }
}
