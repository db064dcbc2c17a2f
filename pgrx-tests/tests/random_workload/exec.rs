//! The executor: runs steps against the cluster (sessions, admin session, slot
//! creations in their own threads) and observes what the server and the replay say.

use crate::steps::Action;
use crate::{two_phase, P, SESSIONS, SLOTS, TABLES};
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
    /// (field, predicted, server) or the error of `snapbuild_slot_prediction`.
    pub fields: Result<Vec<FieldPair>, String>,
}

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
    pub prefix: String,
    replay: bool,
    keep: bool,
    admin: Client,
    sessions: Vec<Client>,
    creations: Vec<Option<Creation>>,
    guards: Vec<SlotGuard>,
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
        let mut admin = env.connect("pgsnap-rw-admin");
        let guards: Vec<SlotGuard> = (0..SLOTS)
            .map(|i| SlotGuard::new(env, &slot_name(prefix, i)))
            .collect();
        cleanup_prefix(&mut admin, prefix);
        for t in 0..TABLES {
            admin
                .batch_execute(&format!("CREATE TABLE {prefix}_t{t}(a int, b text)"))
                .unwrap();
        }
        // One driver thread runs all sessions, so a statement that waits for another
        // session's lock would wait forever: lock_timeout turns that into an error (and a
        // rollback), which is part of the workload.
        let sessions = (0..SESSIONS)
            .map(|i| {
                let mut c = env.connect(&format!("pgsnap-rw-{i}"));
                c.batch_execute("SET lock_timeout = '100ms'").unwrap();
                c
            })
            .collect();
        Exec {
            env,
            prefix: prefix.to_owned(),
            replay,
            keep,
            admin,
            sessions,
            creations: (0..SLOTS).map(|_| None).collect(),
            guards,
            out: Outcome {
                prefix: prefix.to_owned(),
                created: vec![None; SLOTS],
                consumed: vec![false; SLOTS],
                ..Outcome::default()
            },
        }
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
            Action::Admin(sql) => {
                let sql = self.sql(sql);
                self.admin.batch_execute(&sql).map_err(e)
            }
            Action::StandbySnapshot => self
                .admin
                .batch_execute(self.env.standby_snapshot_sql())
                .map_err(e),
            Action::CreateStart(i) => {
                let cr =
                    Creation::start_with(self.env, &self.slot(*i), "test_decoding", two_phase(*i));
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
                self.admin.batch_execute(&sql).map_err(e)
            }
            Action::Get(i) => self.get(*i),
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

    /// `get_changes` of slot i up to the flush position, after the replay's prediction of
    /// the slot it leaves behind (logical.c's candidate handling and the final confirm),
    /// which is recorded beside what the server left.
    fn get(&mut self, i: usize) -> Result<(), String> {
        let e = |e: postgres::Error| err_text(&e);
        if self.out.created[i].is_none() {
            return Err("skipped: the slot's creation has not returned".into());
        }
        let slot = self.slot(i);
        self.out.consumed[i] = true;
        // A committed transaction with an xid flushes the WAL to its commit's end, so the
        // flush position is a record boundary: otherwise it can sit in the middle of a
        // record that crosses a page (the WAL writer flushes full pages only), which
        // get_changes waits for however long it takes and the prediction only briefly.
        self.admin
            .batch_execute("BEGIN; SELECT pg_current_xact_id(); COMMIT")
            .map_err(e)?;
        let upto = fmt_lsn(flush_lsn(&mut self.admin));
        let predicted = self
            .admin
            .query_one(
                &format!(
                    "SELECT {} FROM snapbuild_slot_prediction($1::name, $2::text::pg_lsn)",
                    pred_columns("predicted_")
                ),
                &[&slot, &upto],
            )
            .map_err(e);
        self.admin
            .execute(
                "SELECT count(*) FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL)",
                &[&slot, &upto],
            )
            .map_err(e)?;
        let actual = self
            .admin
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
        self.out.predictions.push(Prediction { slot, upto, fields });
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
        let gids: Vec<String> = self
            .admin
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE $1",
                &[&like],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        for gid in gids {
            let _ = self
                .admin
                .batch_execute(&format!("ROLLBACK PREPARED '{gid}'"));
            self.out.epilogue.push(format!(
                "ROLLBACK PREPARED '{gid}' (left prepared by this list)"
            ));
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
        std::mem::take(&mut self.out)
    }

    fn observe(&mut self, idx: usize, created: Created) -> SlotObs {
        let name = self.slot(idx);
        let e = |e: postgres::Error| err_text(&e);
        let creation_consistent_at = (!self.out.consumed[idx]).then(|| {
            json_rows(
                &mut self.admin,
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
        let flush = flush_lsn(&mut self.admin);
        let trace1 = trace(&mut self.admin, &name).map_err(e);
        let decoded = self
            .admin
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
        let trace_after_peek = trace(&mut self.admin, &name).map_err(e);
        SlotObs {
            name,
            created_at: created.lsn,
            creation_consistent_at,
            flush,
            trace: trace1,
            decoded,
            trace_after_peek,
        }
    }
}

impl Drop for Exec<'_> {
    fn drop(&mut self) {
        self.sessions.clear();
        if self.keep {
            // Left for inspection (the next run with this prefix drops them first).
            std::mem::forget(std::mem::take(&mut self.guards));
            return;
        }
        self.guards.clear();
        cleanup_prefix(&mut self.admin, &self.prefix);
    }
}
