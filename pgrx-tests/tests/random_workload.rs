//! A seeded random workload against the live server: several sessions run DDL, DML,
//! savepoints, rollbacks and prepared transactions while logical slots are created,
//! consumed and restarted. At the end every verdict of the replay is checked against
//! what the server did:
//!
//! - every `get_changes` is preceded by `snapbuild_slot_prediction`, and the slot the
//!   server leaves must be the prediction;
//! - a slot created during the run and never consumed: replaying its creation
//!   (`snapbuild_trace_range` with the slot's catalog_xmin as initial_xmin_horizon and
//!   in_slot_creation) becomes consistent on the record ending at the LSN the creation
//!   returned;
//! - every slot: the commits the replay says are decoded are exactly the xids
//!   `test_decoding` emits for the same WAL (`include-xids`, `skip-empty-xacts` off);
//! - every `.snap` file the server wrote at a serialization point of the replay agrees
//!   with the replay's prediction (`agrees`, `bytes_agree`), and no row disagrees.
//!
//! `PGSNAP_SEEDS` (default `1,2,3`) and `PGSNAP_TXNS` (default 300 transactions per seed)
//! size it.
//!
//! The workload is recorded as a list of [`Step`]s (a session's statement, or an admin
//! action: slot creation start/finish, peek, get, RUNNING_XACTS, COMMIT/ROLLBACK
//! PREPARED), grouped in [`Unit`]s (a whole transaction with its later COMMIT PREPARED,
//! an autocommit statement, a slot's creation, one peek or get, one RUNNING_XACTS). One
//! executor ([`Exec`]) runs the steps for the random run and for replays alike, on one
//! driver thread in list order, so a step list re-runs the same way. The checks are
//! functions over (step list, [`Outcome`]) listed in [`CHECKS`]. On a disagreement the
//! step list is minimized by delta debugging ([`minimize`]): candidate lists are re-run on
//! the same cluster with fresh names (`rw<seed>m<attempt>_…`), a candidate counts as
//! failing if the same check fails, and the smallest failing list is written as a SQL
//! script (`$TMPDIR/pgsnap-random-seed<N>-min.sql`) and printed in the panic message;
//! the full log stays in `$TMPDIR/pgsnap-random-seed<N>.sql`.
//!
//! `PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]` (default `60,300`; `0` turns minimizing off)
//! bounds it. `PGSNAP_INJECT_DISAGREEMENT=ddl-commit|commit-prepared` adds a check that
//! flags something every workload does (a decoded commit with catalog changes, a decoded
//! COMMIT PREPARED), to exercise the minimizer; `minimizer_reduces_injected_disagreement`
//! (ignored by default) does that and asserts a real reduction.

use pg_snapbuild_tests::*;
use postgres::Client;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

const SESSIONS: usize = 4;
const SLOTS: usize = 3;
const TABLES: usize = 3;
/// Stands for the run's name prefix (`rw<seed>`, `rw<seed>m<attempt>`) in recorded SQL.
const P: &str = "{P}";

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

// ---------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------

/// One thing the driver thread does. SQL holds [`P`] where the run's prefix goes.
#[derive(Clone, Debug, PartialEq)]
enum Action {
    /// Session `s` (0-based) runs `sql`.
    Sql { s: usize, sql: String },
    /// The admin session runs `sql` (COMMIT / ROLLBACK PREPARED).
    Admin(String),
    /// A RUNNING_XACTS record: `pg_log_standby_snapshot()` (16+), `CHECKPOINT` (15).
    StandbySnapshot,
    /// `pg_create_logical_replication_slot` of slot i starts in a session of its own.
    CreateStart(usize),
    /// Slot i's creation is collected (it had returned here in the recorded run).
    CreateFinish(usize),
    /// `pg_logical_slot_peek_changes` of slot i.
    Peek(usize),
    /// `snapbuild_slot_prediction` then `pg_logical_slot_get_changes` of slot i, up to
    /// the flush position, then the slot's state.
    Get(usize),
}

#[derive(Clone, Debug)]
struct Step {
    unit: usize,
    action: Action,
}

/// Steps that are kept or removed together; `needs`: removed when that unit is.
#[derive(Clone, Debug)]
struct Unit {
    what: &'static str,
    needs: Option<usize>,
}

#[derive(Clone, Debug, Default)]
struct Recording {
    seed: u64,
    txns: u64,
    steps: Vec<Step>,
    units: Vec<Unit>,
}

impl Recording {
    fn unit(&mut self, what: &'static str, needs: Option<usize>) -> usize {
        self.units.push(Unit { what, needs });
        self.units.len() - 1
    }

    /// The steps (indices) a candidate keeps: those of kept units whose needed unit is
    /// kept too, minus single dropped statements.
    fn select(&self, units: &BTreeSet<usize>, dropped: &BTreeSet<usize>) -> Vec<usize> {
        (0..self.steps.len())
            .filter(|k| !dropped.contains(k))
            .filter(|&k| {
                let u = self.steps[k].unit;
                units.contains(&u) && self.units[u].needs.is_none_or(|d| units.contains(&d))
            })
            .collect()
    }

    /// A statement inside a transaction that can go without its transaction: not the
    /// BEGIN, COMMIT, ROLLBACK or PREPARE TRANSACTION that delimit it.
    fn is_inner(&self, k: usize) -> bool {
        let st = &self.steps[k];
        match &st.action {
            Action::Sql { sql, .. } => {
                self.units[st.unit].what == "transaction"
                    && !matches!(sql.as_str(), "BEGIN" | "COMMIT" | "ROLLBACK")
                    && !sql.starts_with("PREPARE TRANSACTION")
            }
            _ => false,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running steps
// ---------------------------------------------------------------------------------------

/// One slot field: (name, predicted, what the server left).
type FieldPair = (&'static str, Option<String>, Option<String>);

/// A `get_changes` and what the replay predicted for the slot it leaves behind.
#[derive(Clone, Debug)]
struct Prediction {
    slot: String,
    upto: String,
    /// (field, predicted, server) or the error of `snapbuild_slot_prediction`.
    fields: Result<Vec<FieldPair>, String>,
}

/// A creation that returned: the LSN it returned and the slot right then (a peek can
/// move restart_lsn and catalog_xmin later: LogicalIncreaseRestartDecodingForSlot and
/// LogicalIncreaseXminForSlot confirm at once what lies before confirmed_flush).
#[derive(Clone, Copy, Debug)]
struct Created {
    lsn: u64,
    restart_lsn: u64,
    catalog_xmin: Option<u64>,
}

/// What the server and the replay said about one slot after the last step.
#[derive(Clone, Debug)]
struct SlotObs {
    name: String,
    created_at: u64,
    /// Never consumed: the `end_lsn` of the first consistent row of the replayed creation
    /// (from the restart_lsn, with the catalog_xmin the slot had when it returned).
    creation_consistent_at: Option<Result<Option<u64>, String>>,
    flush: u64,
    trace: Result<Vec<TraceRow>, String>,
    /// `test_decoding` (`include-xids`, `skip-empty-xacts` off) up to `flush`: every line
    /// that is not a row change (BEGIN, COMMIT, messages, …), with its LSN.
    decoded: Result<Vec<(u64, String)>, String>,
    /// The trace again after that peek wrote the `.snap` files.
    trace_after_peek: Result<Vec<TraceRow>, String>,
}

/// Everything a run produced that the checks read.
#[derive(Clone, Debug, Default)]
struct Outcome {
    prefix: String,
    /// Per step index: what happened when it did not simply succeed.
    notes: HashMap<usize, String>,
    /// What the executor did after the last step, besides the fixed epilogue.
    epilogue: Vec<String>,
    /// Per slot: its creation, once returned.
    created: Vec<Option<Created>>,
    consumed: Vec<bool>,
    predictions: Vec<Prediction>,
    slots: Vec<SlotObs>,
}

const PRED_FIELDS: [&str; 7] = [
    "catalog_xmin",
    "restart_lsn",
    "confirmed_flush",
    "candidate_catalog_xmin",
    "candidate_xmin_lsn",
    "candidate_restart_valid",
    "candidate_restart_lsn",
];

/// Runs steps against the cluster with names under one prefix; cleans up (slots,
/// prepared transactions, tables of the prefix) when dropped unless told to keep them.
struct Exec<'e> {
    env: &'e Env,
    prefix: String,
    replay: bool,
    keep: bool,
    admin: Client,
    sessions: Vec<Client>,
    creations: Vec<Option<Creation>>,
    guards: Vec<SlotGuard>,
    out: Outcome,
}

fn slot_name(prefix: &str, i: usize) -> String {
    format!("{prefix}_slot{i}")
}

/// Prepared transactions and tables of a prefix go (the `_` escaped for LIKE).
fn cleanup_prefix(c: &mut Client, prefix: &str) -> Vec<String> {
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
    fn new(env: &'e Env, prefix: &str, replay: bool, keep: bool) -> Exec<'e> {
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

    fn creation_returned(&mut self, i: usize) -> bool {
        self.creations[i].as_mut().is_some_and(|c| c.try_done())
    }

    /// Runs step `k` (its index in the recording); an error is noted and returned, the
    /// run goes on (a replay runs the recorded ROLLBACK or end of the transaction next).
    fn run(&mut self, k: usize, a: &Action) -> Result<(), String> {
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
            Action::StandbySnapshot => {
                let sql = if self.env.major >= 16 {
                    "SELECT pg_log_standby_snapshot()"
                } else {
                    "CHECKPOINT"
                };
                self.admin.batch_execute(sql).map_err(e)
            }
            Action::CreateStart(i) => {
                let cr =
                    Creation::start_with(self.env, &self.slot(*i), "test_decoding", two_phase(*i));
                self.creations[*i] = Some(cr);
                Ok(())
            }
            Action::CreateFinish(i) => {
                // In the recorded run the creation had returned here; a replay gives it a
                // moment, and otherwise collects it after the last step.
                let wait = Duration::from_secs(if self.replay { 3 } else { 1 });
                let t0 = Instant::now();
                while !self.creation_returned(*i) {
                    if t0.elapsed() > wait || self.creations[*i].is_none() {
                        return Err(
                            "the creation has not returned here (collected after the last step)"
                                .into(),
                        );
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let cr = self.creations[*i].take().unwrap();
                self.collect(*i, cr, Duration::from_secs(1));
                Ok(())
            }
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
            Action::Get(i) => {
                if self.out.created[*i].is_none() {
                    return Err("skipped: the slot's creation has not returned".into());
                }
                let slot = self.slot(*i);
                self.out.consumed[*i] = true;
                // The slot after this get_changes, as the replay predicts it (logical.c's
                // candidate handling and the final confirm), against what the server left.
                // A committed transaction with an xid flushes the WAL to its commit's end, so
                // the flush position is a record boundary: otherwise it can sit in the middle
                // of a record that crosses a page (the WAL writer flushes full pages only),
                // which get_changes waits for however long it takes and the prediction only
                // briefly.
                self.admin
                    .batch_execute("BEGIN; SELECT pg_current_xact_id(); COMMIT")
                    .map_err(e)?;
                let upto = fmt_lsn(flush_lsn(&mut self.admin));
                let pred_cols = PRED_FIELDS
                    .iter()
                    .map(|f| format!("predicted_{f}::text"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let predicted = self
                    .admin
                    .query_one(
                        &format!("SELECT {pred_cols} FROM snapbuild_slot_prediction($1::name, $2::text::pg_lsn)"),
                        &[&slot, &upto],
                    )
                    .map_err(e);
                self.admin
                    .execute(
                        "SELECT count(*) FROM pg_logical_slot_get_changes($1, $2::text::pg_lsn, NULL)",
                        &[&slot, &upto],
                    )
                    .map_err(e)?;
                let cols = PRED_FIELDS
                    .iter()
                    .map(|f| format!("{f}::text"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let actual = self
                    .admin
                    .query_one(
                        &format!("SELECT {cols} FROM snapbuild_slots() WHERE slot_name = $1"),
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
        }
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
    fn finish(mut self) -> Outcome {
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
            self.env.log_standby_snapshot(&mut self.admin);
            self.admin
                .batch_execute(&format!(
                    "INSERT INTO {}_t0 VALUES (0, 'flush')",
                    self.prefix
                ))
                .unwrap();
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

// ---------------------------------------------------------------------------------------
// The random run
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Default)]
struct Sess {
    /// The transaction unit open in this session.
    unit: Option<usize>,
    savepoints: u32,
}

struct Gen<'e> {
    rec: Recording,
    ex: Exec<'e>,
    sess: [Sess; SESSIONS],
}

impl Gen<'_> {
    fn step(&mut self, unit: usize, action: Action) -> Result<(), String> {
        let k = self.rec.steps.len();
        self.rec.steps.push(Step {
            unit,
            action: action.clone(),
        });
        self.ex.run(k, &action)
    }

    fn admin(&mut self, unit: usize, action: Action) {
        if let Err(e) = self.step(unit, action.clone()) {
            panic!("seed {}: {action:?}: {e}", self.rec.seed);
        }
    }

    /// Session `i` runs `sql` (in its open transaction, or as an autocommit unit); an
    /// error (e.g. a lock timeout) rolls the transaction back.
    fn sql(&mut self, i: usize, sql: impl Into<String>) -> bool {
        let unit = match self.sess[i].unit {
            Some(u) => u,
            None => self.rec.unit("autocommit", None),
        };
        let ok = self
            .step(
                unit,
                Action::Sql {
                    s: i,
                    sql: sql.into(),
                },
            )
            .is_ok();
        if !ok && self.sess[i].unit.is_some() {
            let _ = self.step(
                unit,
                Action::Sql {
                    s: i,
                    sql: "ROLLBACK".into(),
                },
            );
            self.sess[i] = Sess::default();
        }
        ok
    }
}

/// Runs the seeded random workload, recording it. Returns the recording, what it
/// produced and the number of transactions ended.
fn generate(env: &Env, seed: u64, txns: u64) -> (Recording, Outcome, u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let keep = std::env::var("PGSNAP_KEEP_SLOTS").as_deref() == Ok("1");
    let mut g = Gen {
        rec: Recording {
            seed,
            txns,
            ..Recording::default()
        },
        ex: Exec::new(env, &format!("rw{seed}"), false, keep),
        sess: [Sess::default(); SESSIONS],
    };
    let tables: Vec<String> = (0..TABLES).map(|t| format!("{P}_t{t}")).collect();
    let table = |rng: &mut Rng| tables[rng.below(TABLES as u64) as usize].clone();
    let mut slot_unit = [usize::MAX; SLOTS];
    let (mut started, mut pending, mut created) = (0usize, Vec::new(), Vec::new());
    let mut prepared: Vec<(String, usize)> = Vec::new();
    let (mut done_txns, mut step, mut next_col) = (0u64, 0u64, 0u32);
    while done_txns < txns {
        step += 1;
        // Slot life cycle: start creations, collect them, consume some.
        if rng.chance(2) && started < SLOTS {
            let u = g.rec.unit("slot creation", None);
            slot_unit[started] = u;
            g.admin(u, Action::CreateStart(started));
            pending.push(started);
            started += 1;
        }
        if rng.chance(3) {
            let u = g.rec.unit("RUNNING_XACTS", None);
            g.admin(u, Action::StandbySnapshot);
        }
        if rng.chance(3) && !created.is_empty() {
            let idx = created[rng.below(created.len() as u64) as usize];
            let get = rng.chance(50);
            let u = g
                .rec
                .unit(if get { "get" } else { "peek" }, Some(slot_unit[idx]));
            g.admin(
                u,
                if get {
                    Action::Get(idx)
                } else {
                    Action::Peek(idx)
                },
            );
        }
        // Prepared transactions end from another session after a while.
        if !prepared.is_empty() && rng.chance(20) {
            let (gid, u) = prepared.remove(0);
            let mut verb = if rng.chance(75) { "COMMIT" } else { "ROLLBACK" };
            // A ROLLBACK PREPARED decoded while a two-phase slot is being created (builder in
            // FULL_SNAPSHOT) crashes the creating backend (a PostgreSQL bug, README "Known
            // PostgreSQL problems"): never while the two-phase slot's creation is pending.
            if pending.iter().any(|&p| two_phase(p)) {
                verb = "COMMIT";
            }
            g.admin(u, Action::Admin(format!("{verb} PREPARED '{gid}'")));
        }
        let i = rng.below(SESSIONS as u64) as usize;
        if g.sess[i].unit.is_none() {
            if rng.chance(25) {
                let t = table(&mut rng);
                let sql = format!("INSERT INTO {t}(a, b) VALUES ({}, 'auto')", rng.below(1000));
                if g.sql(i, sql) {
                    done_txns += 1;
                }
            } else {
                let u = g.rec.unit("transaction", None);
                g.sess[i] = Sess {
                    unit: Some(u),
                    savepoints: 0,
                };
                g.sql(i, "BEGIN");
                if rng.chance(50) {
                    g.sql(i, "SELECT pg_current_xact_id()");
                }
            }
            continue;
        }
        let roll = rng.below(100);
        let t = table(&mut rng);
        let sp = g.sess[i].savepoints;
        match roll {
            0..=34 => {
                g.sql(
                    i,
                    format!("INSERT INTO {t}(a, b) VALUES ({}, 'x')", rng.below(1000)),
                );
            }
            35..=44 => {
                g.sql(
                    i,
                    format!("UPDATE {t} SET a = a + 1 WHERE a % 7 = {}", rng.below(7)),
                );
            }
            45..=49 => {
                g.sql(
                    i,
                    format!("DELETE FROM {t} WHERE a % 11 = {}", rng.below(11)),
                );
            }
            50..=55 => {
                next_col += 1;
                g.sql(i, format!("ALTER TABLE {t} ADD COLUMN c{next_col} int"));
            }
            56..=58 => {
                let tmp = format!("{P}_tmp{}", rng.below(4));
                g.sql(i, format!("CREATE TABLE IF NOT EXISTS {tmp}(x int)"));
            }
            59..=60 => {
                let tmp = format!("{P}_tmp{}", rng.below(4));
                g.sql(i, format!("DROP TABLE IF EXISTS {tmp}"));
            }
            61..=66 => {
                g.sess[i].savepoints += 1;
                g.sql(i, format!("SAVEPOINT sp{}", sp + 1));
            }
            67..=70 if sp > 0 => {
                g.sql(i, format!("ROLLBACK TO SAVEPOINT sp{sp}"));
            }
            71..=72 if sp > 0 => {
                if g.sql(i, format!("RELEASE SAVEPOINT sp{sp}")) {
                    g.sess[i].savepoints -= 1;
                }
            }
            73..=75 => {
                // transactional logical message
                g.sql(i, "SELECT pg_logical_emit_message(true, 'rw', 'm')");
            }
            _ => {
                let end = rng.below(100);
                let u = g.sess[i].unit.unwrap();
                let mut gid = None;
                let stmt = if end < 75 {
                    "COMMIT".to_owned()
                } else if end < 87 {
                    "ROLLBACK".to_owned()
                } else if prepared.len() < 5 {
                    // Every fourth gid is one test_decoding's filter_prepare filters on
                    // the two-phase slot (decoded as a plain commit there).
                    let id = if step % 4 == 0 {
                        format!("{P}_g{step}_nodecode")
                    } else {
                        format!("{P}_g{step}")
                    };
                    let s = format!("PREPARE TRANSACTION '{id}'");
                    gid = Some(id);
                    s
                } else {
                    "COMMIT".to_owned()
                };
                if g.sql(i, stmt) {
                    done_txns += 1;
                    if let Some(id) = gid {
                        prepared.push((id, u));
                    }
                }
                g.sess[i] = Sess::default();
            }
        }
        // Collect creations that finished.
        let mut k = 0;
        while k < pending.len() {
            let idx = pending[k];
            if g.ex.creation_returned(idx) {
                pending.remove(k);
                g.admin(slot_unit[idx], Action::CreateFinish(idx));
                created.push(idx);
            } else {
                k += 1;
            }
        }
    }
    // End everything still open so pending creations can finish.
    for i in 0..SESSIONS {
        if g.sess[i].unit.is_some() {
            g.sql(i, "COMMIT");
            g.sess[i] = Sess::default();
        }
    }
    for (gid, u) in prepared.drain(..) {
        g.admin(u, Action::Admin(format!("COMMIT PREPARED '{gid}'")));
    }
    let Gen { rec, ex, .. } = g;
    let out = ex.finish();
    (rec, out, done_txns)
}

// ---------------------------------------------------------------------------------------
// Checks: functions over (step list, outcome)
// ---------------------------------------------------------------------------------------

/// One comparison with the server. `run` returns one text per disagreement; `how` says
/// how to look at it by hand (`{slot}` = the slot's name), for the reproducer.
#[derive(Clone, Copy)]
struct Check {
    name: &'static str,
    how: &'static str,
    run: fn(&[&Step], &Outcome) -> Vec<String>,
}

#[derive(Clone, Debug)]
struct Failure {
    check: &'static str,
    detail: String,
}

/// The checks every run gets; a new one is a function and a line here.
const CHECKS: &[Check] = &[
    Check {
        name: "slot prediction",
        how: "SELECT * FROM snapbuild_slot_prediction('{slot}', <upto>) before pg_logical_slot_get_changes('{slot}', <upto>, NULL), \
              then SELECT * FROM snapbuild_slots() WHERE slot_name = '{slot}'",
        run: check_predictions,
    },
    Check {
        name: "creation consistency LSN",
        how: "SELECT end_lsn, branch FROM snapbuild_trace_range(<restart_lsn>, NULL, <catalog_xmin>, true) \
              WHERE state_before <> 'consistent' AND state = 'consistent' (the first) = the LSN the creation returned",
        run: check_creation,
    },
    Check {
        name: "trace error",
        how: "SELECT * FROM snapbuild_trace('{slot}')",
        run: check_trace_errors,
    },
    Check {
        name: "decoded xids",
        how: "SELECT xid FROM snapbuild_trace('{slot}') WHERE decoded  vs  SELECT data FROM pg_logical_slot_peek_changes('{slot}', NULL, NULL, \
              'include-xids', '1', 'skip-empty-xacts', '0') WHERE data LIKE 'COMMIT %'",
        run: check_decoded,
    },
    Check {
        name: ".snap row disagreement",
        how: "SELECT * FROM snapbuild_trace('{slot}') WHERE NOT agrees (after a peek wrote the .snap files)",
        run: check_rows,
    },
    Check {
        name: ".snap bytes",
        how: "SELECT * FROM snapbuild_trace('{slot}') WHERE NOT bytes_agree (after a peek wrote the .snap files)",
        run: check_bytes,
    },
];

fn check_predictions(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for p in &o.predictions {
        match &p.fields {
            Err(e) => f.push(format!(
                "{}: snapbuild_slot_prediction up to {} failed: {e}",
                p.slot, p.upto
            )),
            Ok(fields) => {
                for (name, pred, server) in fields {
                    if pred != server {
                        f.push(format!(
                            "{} after get_changes up to {}: {name} predicted {pred:?}, server {server:?}",
                            p.slot, p.upto
                        ));
                    }
                }
            }
        }
    }
    f
}

fn check_creation(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        match &s.creation_consistent_at {
            None => {}
            Some(Err(e)) => f.push(format!(
                "{}: snapbuild_trace_range of the creation: {e}",
                s.name
            )),
            Some(Ok(first)) if *first != Some(s.created_at) => f.push(format!(
                "{}: replayed creation became consistent at {:?}, the server at {}",
                s.name,
                first.map(fmt_lsn),
                fmt_lsn(s.created_at)
            )),
            Some(Ok(_)) => {}
        }
    }
    f
}

fn check_trace_errors(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for (what, r) in [
            ("trace", &s.trace),
            ("trace after the peek", &s.trace_after_peek),
        ] {
            if let Err(e) = r {
                f.push(format!("{}: {what}: {e}", s.name));
            }
        }
        if let Err(e) = &s.decoded {
            f.push(format!("{}: test_decoding: {e}", s.name));
        }
    }
    f
}

/// Slot 1 of every run decodes prepared transactions at PREPARE (created with twophase).
fn two_phase(slot: usize) -> bool {
    slot == 1
}

/// What `test_decoding` emitted that ends a transaction, as (callback, xid), sorted:
/// `COMMIT x` → commit, `PREPARE TRANSACTION 'g', txid x` → prepare, `COMMIT PREPARED …`
/// → commit_prepared, `ROLLBACK PREPARED …` → rollback_prepared.
fn server_commits(s: &SlotObs) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = s
        .decoded
        .as_ref()
        .map(|lines| {
            lines
                .iter()
                .filter_map(|(_, d)| {
                    let txid = || {
                        d.rsplit(", txid ")
                            .next()
                            .and_then(|x| x.trim().parse().ok())
                    };
                    let kind = if d.starts_with("PREPARE TRANSACTION ") {
                        "prepare"
                    } else if d.starts_with("COMMIT PREPARED ") {
                        "commit_prepared"
                    } else if d.starts_with("ROLLBACK PREPARED ") {
                        "rollback_prepared"
                    } else if d.starts_with("COMMIT ") {
                        return d
                            .split_whitespace()
                            .nth(1)
                            .and_then(|x| x.parse().ok())
                            .map(|x| ("commit".to_owned(), x));
                    } else {
                        return None;
                    };
                    txid().map(|x| (kind.to_owned(), x))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The output plugin callbacks a trace verdict stands for (DecodeVerdict::sends).
fn verdict_sends(label: &str) -> &'static [&'static str] {
    match label {
        "decoded" => &["commit"],
        "prepared" => &["prepare"],
        "commit prepared" => &["commit_prepared"],
        "prepared and commit prepared" => &["prepare", "commit_prepared"],
        "rollback prepared" => &["rollback_prepared"],
        _ => &[],
    }
}

/// The same from the replay: the rows up to the flush position, by their verdicts.
fn replay_decoded(s: &SlotObs) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = s
        .trace
        .as_ref()
        .map(|rows| {
            rows.iter()
                .filter(|r| r.end_lsn.is_some_and(|e| e <= s.flush))
                .flat_map(|r| {
                    let sends = verdict_sends(&js(&r.raw, "verdict").unwrap_or_default());
                    let decoded = r.raw.get("decoded").and_then(|v| v.as_bool()) == Some(true);
                    // `decoded` is true exactly for the verdicts that send something; a
                    // row where it is not shows up as a difference of its own.
                    let mismatch: &[&str] = if decoded == !sends.is_empty() {
                        &[]
                    } else {
                        &["decoded column contradicts the verdict"]
                    };
                    sends
                        .iter()
                        .chain(mismatch)
                        .filter_map(|k| r.xid.map(|x| ((*k).to_owned(), x)))
                        .collect::<Vec<_>>()
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn check_decoded(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        let (Ok(rows), Ok(_)) = (&s.trace, &s.decoded) else {
            continue;
        };
        let (ours, server) = (replay_decoded(s), server_commits(s));
        if ours == server {
            continue;
        }
        let only = |a: &[(String, u64)], b: &[(String, u64)]| -> Vec<(String, u64)> {
            let mut rest = b.to_vec();
            a.iter()
                .filter(|x| match rest.iter().position(|y| y == *x) {
                    Some(p) => {
                        rest.remove(p);
                        false
                    }
                    None => true,
                })
                .cloned()
                .collect()
        };
        let (ours_only, server_only) = (only(&ours, &server), only(&server, &ours));
        let differing: BTreeSet<u64> = ours_only.iter().chain(&server_only).map(|x| x.1).collect();
        let detail: Vec<String> = rows
            .iter()
            .filter(|r| r.xid.is_some_and(|x| differing.contains(&x)))
            .map(|r| {
                format!(
                    "  {} {} {} {}",
                    r.lsn.map(fmt_lsn).unwrap_or_default(),
                    r.record,
                    js(&r.raw, "verdict").unwrap_or_default(),
                    r.state.as_deref().unwrap_or_default()
                )
            })
            .collect();
        f.push(format!(
            "{}: decoded xids differ up to {}: replay only {:?}, test_decoding only {:?}; their rows \
             (all their records: snapbuild_trace('{}', true)):\n{}",
            s.name,
            fmt_lsn(s.flush),
            ours_only,
            server_only,
            s.name,
            detail.join("\n")
        ));
    }
    f
}

fn check_rows(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for r in s.trace_after_peek.iter().flatten() {
            if r.agrees == Some(false) {
                f.push(format!(
                    "{}: row {} {:?} disagrees: {:?}",
                    s.name, r.record, r.branch, r.disagreement
                ));
            }
        }
    }
    f
}

fn check_bytes(_: &[&Step], o: &Outcome) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for r in s.trace_after_peek.iter().flatten() {
            if r.raw.get("bytes_agree").and_then(|v| v.as_bool()) == Some(false) {
                f.push(format!(
                    "{}: row {} at {:?}: the replay's bytes differ from the server's file ({:?})",
                    s.name,
                    r.record,
                    r.lsn.map(fmt_lsn),
                    r.disagreement
                ));
            }
        }
    }
    f
}

/// A deliberate "disagreement" that real workloads hit, to exercise the minimizer
/// (`PGSNAP_INJECT_DISAGREEMENT`).
#[derive(Clone, Copy, Debug)]
enum Inject {
    /// A decoded commit with catalog changes (ALTER/CREATE/DROP TABLE in the transaction).
    DdlCommit,
    /// A decoded COMMIT PREPARED.
    CommitPrepared,
}

impl Inject {
    fn from_env() -> Option<Inject> {
        let v = std::env::var("PGSNAP_INJECT_DISAGREEMENT").ok()?;
        match v.as_str() {
            "" => None,
            "ddl-commit" => Some(Inject::DdlCommit),
            "commit-prepared" => Some(Inject::CommitPrepared),
            _ => panic!("PGSNAP_INJECT_DISAGREEMENT={v:?}: ddl-commit or commit-prepared"),
        }
    }

    fn check(self) -> Check {
        match self {
            Inject::DdlCommit => Check {
                name: "injected: ddl-commit",
                how: "SELECT * FROM snapbuild_trace('{slot}') WHERE decoded AND timetravel",
                run: injected_ddl_commit,
            },
            Inject::CommitPrepared => Check {
                name: "injected: commit-prepared",
                how: "SELECT * FROM snapbuild_trace('{slot}') WHERE decoded AND record = 'COMMIT_PREPARED'",
                run: injected_commit_prepared,
            },
        }
    }
}

fn injected_rows(o: &Outcome, what: &str, pick: impl Fn(&TraceRow) -> bool) -> Vec<String> {
    let mut f = Vec::new();
    for s in &o.slots {
        for r in s.trace.iter().flatten() {
            if r.raw.get("decoded").and_then(|v| v.as_bool()) == Some(true) && pick(r) {
                f.push(format!(
                    "{}: {what} (injected): {} of xid {} at {}",
                    s.name,
                    r.record,
                    r.xid.map(|x| x.to_string()).unwrap_or_default(),
                    r.lsn.map(fmt_lsn).unwrap_or_default()
                ));
            }
        }
    }
    f
}

fn injected_ddl_commit(_: &[&Step], o: &Outcome) -> Vec<String> {
    injected_rows(o, "decoded commit with catalog changes", |r| {
        r.raw.get("timetravel").and_then(|v| v.as_bool()) == Some(true)
    })
}

fn injected_commit_prepared(_: &[&Step], o: &Outcome) -> Vec<String> {
    injected_rows(o, "decoded COMMIT PREPARED", |r| r.is("COMMIT_PREPARED"))
}

fn all_checks(inject: Option<Inject>) -> Vec<Check> {
    let mut c = CHECKS.to_vec();
    c.extend(inject.map(Inject::check));
    c
}

fn run_checks(checks: &[Check], steps: &[&Step], out: &Outcome) -> Vec<Failure> {
    checks
        .iter()
        .flat_map(|c| {
            (c.run)(steps, out).into_iter().map(|detail| Failure {
                check: c.name,
                detail,
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Minimizing
// ---------------------------------------------------------------------------------------

/// Delta debugging (ddmin, complement form): a sublist of `elems` (kept in order) for
/// which `fails` still holds. Chunks of the current list are removed one after the other,
/// with chunk sizes halving from half the list (the whole list with `allow_empty`) down to
/// single elements; a removal that still fails is kept and the scan goes on at the same
/// place. Costs about 2·k·log2(n) tests when k elements are needed. `fails` returns `None`
/// once the budget is spent: the smallest failing list so far is returned then.
fn ddmin(
    elems: Vec<usize>,
    allow_empty: bool,
    mut fails: impl FnMut(&[usize]) -> Option<bool>,
) -> Vec<usize> {
    let mut c = elems;
    if c.is_empty() {
        return c;
    }
    let mut size = if allow_empty {
        c.len()
    } else {
        c.len().div_ceil(2)
    };
    loop {
        let mut i = 0;
        while i < c.len() {
            let end = (i + size).min(c.len());
            if !allow_empty && end - i == c.len() {
                break;
            }
            let cand: Vec<usize> = c[..i].iter().chain(&c[end..]).copied().collect();
            match fails(&cand) {
                Some(true) => c = cand,
                Some(false) => i = end,
                None => return c,
            }
        }
        if size == 1 || c.is_empty() {
            return c;
        }
        size = size.div_ceil(2).min(c.len());
    }
}

/// `PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]`: replays at most RUNS step lists (confirmation
/// replays included) and starts none after SECONDS. Default 60 and 300 (ddmin needs about
/// 44 tests for 3 needed units of 400, 26 for 2; small lists replay in well under a
/// second); 0 turns it off.
#[derive(Clone, Copy, Debug)]
struct Budget {
    runs: usize,
    time: Duration,
}

fn budget() -> Option<Budget> {
    let v = std::env::var("PGSNAP_MINIMIZE_BUDGET").unwrap_or_default();
    let mut it = v.split(',').map(str::trim);
    let runs = match it.next() {
        None | Some("") => 60,
        Some(s) => s.parse().expect("PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]"),
    };
    let secs = match it.next() {
        None | Some("") => 300,
        Some(s) => s.parse().expect("PGSNAP_MINIMIZE_BUDGET=RUNS[,SECONDS]"),
    };
    (runs > 0).then(|| Budget {
        runs,
        time: Duration::from_secs(secs),
    })
}

/// Replays of the final list after minimizing, to say how reliably it fails.
const CONFIRM: usize = 2;

/// Runs the steps `idx` of `rec` under `prefix` and checks the outcome; a panic (e.g. a
/// creation that failed) is an error, not a failing check.
fn replay(
    env: &Env,
    rec: &Recording,
    idx: &[usize],
    prefix: &str,
    checks: &[Check],
) -> Result<(Outcome, Vec<Failure>), String> {
    catch_unwind(AssertUnwindSafe(|| {
        let mut ex = Exec::new(env, prefix, true, false);
        for &k in idx {
            let _ = ex.run(k, &rec.steps[k].action);
        }
        let out = ex.finish();
        let steps: Vec<&Step> = idx.iter().map(|&k| &rec.steps[k]).collect();
        let f = run_checks(checks, &steps, &out);
        (out, f)
    }))
    .map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

struct Minimizer<'a> {
    env: &'a Env,
    rec: &'a Recording,
    checks: &'a [Check],
    target: &'static str,
    budget: Budget,
    t0: Instant,
    runs: usize,
    exhausted: bool,
    /// By selected step indices: whether that list failed.
    cache: HashMap<Vec<usize>, bool>,
    /// The last failing replay: its steps, outcome and failures.
    last_fail: Option<(Vec<usize>, Outcome, Vec<Failure>)>,
}

impl Minimizer<'_> {
    /// Replays `idx` once (no budget check, no cache).
    fn replay(&mut self, idx: &[usize]) -> bool {
        self.runs += 1;
        let prefix = format!("rw{}m{}", self.rec.seed, self.runs);
        let t = Instant::now();
        let r = replay(self.env, self.rec, idx, &prefix, self.checks);
        let (fails, what) = match r {
            Ok((out, f)) => {
                let hit = f.iter().any(|x| x.check == self.target);
                let kinds: BTreeSet<&str> = f.iter().map(|x| x.check).collect();
                if hit {
                    self.last_fail = Some((idx.to_vec(), out, f));
                }
                (hit, format!("failing checks {kinds:?}"))
            }
            Err(p) => (false, format!("the replay panicked: {p}")),
        };
        println!(
            "pgsnap-minimize: replay {} ({} steps, {:.1}s): {} -> {}",
            self.runs,
            idx.len(),
            t.elapsed().as_secs_f64(),
            what,
            if fails { "still fails" } else { "passes" }
        );
        self.cache.insert(idx.to_vec(), fails);
        fails
    }

    fn test(&mut self, idx: Vec<usize>) -> Option<bool> {
        if let Some(&r) = self.cache.get(&idx) {
            return Some(r);
        }
        if self.runs + CONFIRM >= self.budget.runs || self.t0.elapsed() >= self.budget.time {
            self.exhausted = true;
            return None;
        }
        Some(self.replay(&idx))
    }
}

struct Minimized {
    target: &'static str,
    /// The smallest failing step list (indices into the recording).
    steps: Vec<usize>,
    reproduced: bool,
    exhausted: bool,
    runs: usize,
    elapsed: Duration,
    /// This list failed in `failed` of `tried` replays.
    failed: usize,
    tried: usize,
    /// The last failing replay of `steps`.
    shown: Option<(Outcome, Vec<Failure>)>,
}

/// Delta-debugs the recording for a list that still fails `target`: first over units
/// (transactions with their COMMIT PREPARED, slot creations, peeks/gets, RUNNING_XACTS),
/// then over single statements inside the kept transactions; then replays the result
/// [`CONFIRM`] more times.
fn minimize(
    env: &Env,
    rec: &Recording,
    checks: &[Check],
    target: &'static str,
    budget: Budget,
) -> Minimized {
    let mut m = Minimizer {
        env,
        rec,
        checks,
        target,
        budget,
        t0: Instant::now(),
        runs: 0,
        exhausted: false,
        cache: HashMap::new(),
        last_fail: None,
    };
    let none = BTreeSet::new();
    let all_units: Vec<usize> = (0..rec.units.len()).collect();
    let full = rec.select(&all_units.iter().copied().collect(), &none);
    // The recorded run against a replay of its list: twice at most.
    let mut reproduced = false;
    for _ in 0..2 {
        if m.runs < budget.runs && m.replay(&full) {
            reproduced = true;
            break;
        }
    }
    if !reproduced {
        return Minimized {
            target,
            steps: full,
            reproduced,
            exhausted: false,
            runs: m.runs,
            elapsed: m.t0.elapsed(),
            failed: 0,
            tried: m.runs,
            shown: None,
        };
    }
    // Units that have a step in the list (a peek of a slot whose creation is not kept
    // has none).
    let effective = |units: &BTreeSet<usize>| -> Vec<usize> {
        let mut u: Vec<usize> = rec
            .select(units, &none)
            .iter()
            .map(|&k| rec.steps[k].unit)
            .collect();
        u.dedup();
        u.sort_unstable();
        u.dedup();
        u
    };
    let units = ddmin(all_units, false, |els| {
        m.test(rec.select(&els.iter().copied().collect(), &none))
    });
    let units: BTreeSet<usize> = effective(&units.into_iter().collect())
        .into_iter()
        .collect();
    let inner: Vec<usize> = rec
        .select(&units, &none)
        .into_iter()
        .filter(|&k| rec.is_inner(k))
        .collect();
    let kept_inner = ddmin(inner.clone(), true, |els| {
        let keep: BTreeSet<usize> = els.iter().copied().collect();
        let dropped = inner
            .iter()
            .copied()
            .filter(|k| !keep.contains(k))
            .collect();
        m.test(rec.select(&units, &dropped))
    });
    let keep: BTreeSet<usize> = kept_inner.into_iter().collect();
    let dropped = inner
        .iter()
        .copied()
        .filter(|k| !keep.contains(k))
        .collect();
    let steps = rec.select(&units, &dropped);
    let (mut failed, mut tried) = (1, 1);
    for _ in 0..CONFIRM {
        if m.runs >= budget.runs {
            break;
        }
        tried += 1;
        if m.replay(&steps) {
            failed += 1;
        }
    }
    let shown = m
        .last_fail
        .take()
        .filter(|(s, _, _)| *s == steps)
        .map(|(_, o, f)| (o, f));
    Minimized {
        target,
        steps,
        reproduced,
        exhausted: m.exhausted,
        runs: m.runs,
        elapsed: m.t0.elapsed(),
        failed,
        tried,
        shown,
    }
}

// ---------------------------------------------------------------------------------------
// Reproducers
// ---------------------------------------------------------------------------------------

/// The steps `idx` as a SQL script, in order, one block per step (`-- sN` for session
/// N, `-- admin…` for the admin session), with what happened as `-- ^` notes.
fn render_steps(env: &Env, rec: &Recording, idx: &[usize], out: &Outcome) -> String {
    let p = &out.prefix;
    let slot = |i: usize| slot_name(p, i);
    let mut s = String::new();
    let _ = writeln!(s, "-- setup (admin)");
    for t in 0..TABLES {
        let _ = writeln!(s, "CREATE TABLE {p}_t{t}(a int, b text);");
    }
    for &k in idx {
        let _ = match &rec.steps[k].action {
            Action::Sql { s: i, sql } => {
                writeln!(s, "-- s{}\n{};", i + 1, sql.replace(P, p))
            }
            Action::Admin(sql) => writeln!(s, "-- admin\n{};", sql.replace(P, p)),
            Action::StandbySnapshot => writeln!(
                s,
                "-- admin\n{};",
                if env.major >= 16 {
                    "SELECT pg_log_standby_snapshot()"
                } else {
                    "CHECKPOINT"
                }
            ),
            Action::CreateStart(i) => writeln!(
                s,
                "-- admin: create slot {} starts (in a session of its own; returns once the slot is consistent)\n\
                 SELECT lsn FROM pg_create_logical_replication_slot('{}', 'test_decoding', false, {});",
                slot(*i),
                slot(*i),
                two_phase(*i)
            ),
            Action::CreateFinish(i) => writeln!(
                s,
                "-- admin: creation of {} returned{}",
                slot(*i),
                out.created[*i]
                    .filter(|_| !out.notes.contains_key(&k))
                    .map(|c| format!(" {}", fmt_lsn(c.lsn)))
                    .unwrap_or_default()
            ),
            Action::Peek(i) => writeln!(
                s,
                "-- admin: peek\nSELECT count(*) FROM pg_logical_slot_peek_changes('{}', NULL, NULL);",
                slot(*i)
            ),
            Action::Get(i) => writeln!(
                s,
                "-- admin: get, after the replay's prediction\n\
                 BEGIN; SELECT pg_current_xact_id(); COMMIT;\n\
                 SELECT pg_current_wal_flush_lsn() AS upto \\gset\n\
                 SELECT * FROM snapbuild_slot_prediction('{0}', :'upto');\n\
                 SELECT count(*) FROM pg_logical_slot_get_changes('{0}', :'upto', NULL);\n\
                 SELECT * FROM snapbuild_slots() WHERE slot_name = '{0}';",
                slot(*i)
            ),
        };
        if let Some(n) = out.notes.get(&k) {
            let _ = writeln!(s, "-- ^ {n}");
        }
    }
    let _ = writeln!(
        s,
        "-- epilogue (admin): anything left open is ended, then 3 x (RUNNING_XACTS; INSERT INTO {p}_t0 VALUES (0, 'flush')), \
         then every creation still running returns"
    );
    for e in &out.epilogue {
        let _ = writeln!(s, "-- ^ {e}");
    }
    s
}

fn header(env: &Env, rec: &Recording) -> String {
    format!(
        "-- pg_snapbuild random workload (pgrx-tests/tests/random_workload.rs), seed {}, PGSNAP_TXNS={}, PostgreSQL {}\n",
        rec.seed, rec.txns, env.major
    )
}

fn comment(text: &str) -> String {
    text.lines().map(|l| format!("--   {l}\n")).collect()
}

fn render_minimized(
    env: &Env,
    rec: &Recording,
    checks: &[Check],
    m: &Minimized,
    full_log: &std::path::Path,
) -> String {
    let mut s = header(env, rec);
    let units: BTreeSet<usize> = m.steps.iter().map(|&k| rec.steps[k].unit).collect();
    let how = checks
        .iter()
        .find(|c| c.name == m.target)
        .map(|c| c.how)
        .unwrap_or_default();
    let _ = writeln!(s, "-- failing check: {}", m.target);
    if !m.reproduced {
        let _ = writeln!(
            s,
            "-- NOT MINIMIZED: replaying the recorded list ({} times) did not fail this check (the server's timing \
             differs between runs); the whole run is in {}",
            m.runs,
            full_log.display()
        );
        return s;
    }
    let _ = write!(
        s,
        "-- minimized from {} steps ({} units) to {} steps ({} units) by {} replays on the same cluster in {:.0} s{}\n\
         -- confirmed: this list failed the check in {} of {} replays (a live server: timing may differ)\n\
         -- full log of the original run: {}\n",
        rec.steps.len(),
        rec.units.len(),
        m.steps.len(),
        units.len(),
        m.runs,
        m.elapsed.as_secs_f64(),
        if m.exhausted {
            " (budget PGSNAP_MINIMIZE_BUDGET spent: may not be minimal)"
        } else {
            ""
        },
        m.failed,
        m.tried,
        full_log.display(),
    );
    let Some((out, failures)) = &m.shown else {
        return s;
    };
    // The checks name the slot first: "<slot>: …".
    let slot = failures
        .iter()
        .filter(|f| f.check == m.target)
        .find_map(|f| {
            f.detail
                .split(':')
                .next()
                .filter(|n| n.starts_with(&out.prefix))
        })
        .unwrap_or("<slot>");
    let _ = writeln!(s, "-- how to look: {}", how.replace("{slot}", slot));
    let _ = writeln!(s, "-- what the last failing replay of this list said:");
    for f in failures.iter().filter(|f| f.check == m.target) {
        s.push_str(&comment(&f.detail));
    }
    let others: BTreeSet<&str> = failures
        .iter()
        .map(|f| f.check)
        .filter(|c| *c != m.target)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(s, "-- (it also failed: {others:?})");
    }
    let _ = writeln!(
        s,
        "-- \"-- sN\": run in session N (psql, with SET lock_timeout = '100ms'); \"-- admin\": another session.\n\
         -- Names carry the prefix of that replay, {}.",
        out.prefix
    );
    s.push_str(&render_steps(env, rec, &m.steps, out));
    s
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

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
    let inject = Inject::from_env();
    for seed in seeds {
        if let Some(msg) = run_seed(&env, seed, txns(), inject, budget()) {
            panic!("{msg}");
        }
    }
}

fn txns() -> u64 {
    std::env::var("PGSNAP_TXNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

/// What one seed found, for the self-test.
struct SeedReport {
    steps: usize,
    units: usize,
    min: Option<Minimized>,
    min_path: std::path::PathBuf,
    message: String,
}

/// Runs one seed; on a disagreement minimizes (with `budget`) and returns the panic
/// message.
fn run_seed(
    env: &Env,
    seed: u64,
    txns: u64,
    inject: Option<Inject>,
    budget: Option<Budget>,
) -> Option<String> {
    run_seed_report(env, seed, txns, inject, budget).map(|r| r.message)
}

fn run_seed_report(
    env: &Env,
    seed: u64,
    txns: u64,
    inject: Option<Inject>,
    budget: Option<Budget>,
) -> Option<SeedReport> {
    let t0 = Instant::now();
    let checks = all_checks(inject);
    let (rec, out, done_txns) = generate(env, seed, txns);
    let created = out.created.iter().flatten().count();
    assert!(created > 0 || txns < 50, "seed {seed}: no slot was created");
    let all: Vec<&Step> = rec.steps.iter().collect();
    let failures = run_checks(&checks, &all, &out);

    let (mut decoded_total, mut files_agreeing, mut commits_seen, mut writer_dependent) =
        (0usize, 0usize, 0usize, 0usize);
    let mut files_byte_equal = 0usize;
    // The two-phase slot: what test_decoding emitted by kind, and the replay's verdicts on
    // prepared transactions (so a run shows which two-phase paths it went through).
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for s in &out.slots {
        for (k, _) in server_commits(s) {
            *kinds.entry(k).or_default() += 1;
        }
        for r in s.trace.iter().flatten() {
            if let Some(v) = js(&r.raw, "verdict") {
                if matches!(
                    r.record.as_str(),
                    "PREPARE" | "COMMIT_PREPARED" | "ABORT_PREPARED"
                ) {
                    *kinds.entry(format!("{} {v}", r.record)).or_default() += 1;
                }
            }
        }
    }
    for s in &out.slots {
        decoded_total += server_commits(s).len();
        commits_seen += s
            .trace
            .iter()
            .flatten()
            .filter(|r| r.raw.get("decoded").is_some_and(|v| !v.is_null()))
            .count();
        for r in s.trace_after_peek.iter().flatten() {
            if r.raw.get("bytes_agree").and_then(|v| v.as_bool()) == Some(true) {
                files_byte_equal += 1;
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
        "pgsnap-counts: random seed {seed} PG{} transactions {done_txns} steps {} units {} slots created {created} \
         slot states predicted {} commits traced {commits_seen} decoded by test_decoding {decoded_total} ({kinds:?}) .snap files agreeing {files_agreeing} \
         (of which xmax/committed written by a decoder that started elsewhere {writer_dependent}; byte for byte {files_byte_equal}) failures {} ({:.1}s)",
        env.major,
        rec.steps.len(),
        rec.units.len(),
        out.predictions.len(),
        failures.len(),
        t0.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        return None;
    }
    let tmp = std::env::temp_dir();
    let path = tmp.join(format!("pgsnap-random-seed{seed}.sql"));
    let idx: Vec<usize> = (0..rec.steps.len()).collect();
    let full = format!(
        "{}-- the whole run; failing checks:\n{}{}",
        header(env, &rec),
        failures
            .iter()
            .map(|f| comment(&format!("[{}] {}", f.check, f.detail)))
            .collect::<String>(),
        render_steps(env, &rec, &idx, &out)
    );
    let _ = std::fs::write(&path, full);
    let mut message = format!(
        "seed {seed}: {} disagreement(s) with the server:\n{}\nfull log (SQL per session, in order): {}",
        failures.len(),
        failures
            .iter()
            .map(|f| format!("[{}] {}", f.check, f.detail))
            .collect::<Vec<_>>()
            .join("\n"),
        path.display()
    );
    let min_path = tmp.join(format!("pgsnap-random-seed{seed}-min.sql"));
    let target = failures[0].check;
    let min = budget.map(|b| {
        println!(
            "pgsnap-minimize: seed {seed}: minimizing for check {target:?} ({} steps, {} units; budget {} replays, {} s)",
            rec.steps.len(),
            rec.units.len(),
            b.runs,
            b.time.as_secs()
        );
        let m = minimize(env, &rec, &checks, target, b);
        let script = render_minimized(env, &rec, &checks, &m, &path);
        let _ = std::fs::write(&min_path, &script);
        let lines: Vec<&str> = script.lines().collect();
        let _ = write!(
            message,
            "\nminimal reproducer ({}, {} steps, failed {} of {} replays):\n{}{}",
            min_path.display(),
            m.steps.len(),
            m.failed,
            m.tried,
            lines.iter().take(150).map(|l| format!("{l}\n")).collect::<String>(),
            if lines.len() > 150 {
                format!("… ({} more lines in the file)\n", lines.len() - 150)
            } else {
                String::new()
            }
        );
        m
    });
    if min.is_none() {
        message.push_str("\n(minimizing is off: PGSNAP_MINIMIZE_BUDGET=0)");
    }
    Some(SeedReport {
        steps: rec.steps.len(),
        units: rec.units.len(),
        min,
        min_path,
        message,
    })
}

/// The minimizer on a deliberate disagreement: `PGSNAP_INJECT_DISAGREEMENT` (default
/// ddl-commit) flags something every run does; the 300-transaction run must shrink to a
/// handful of steps that still fail it.
#[test]
#[ignore = "minimizer self-test, minutes: cargo test … -- --ignored minimizer"]
fn minimizer_reduces_injected_disagreement() {
    let _g = serial();
    let Some(env) = env() else { return };
    let _ = env.setup();
    let seed: u64 = std::env::var("PGSNAP_SEEDS")
        .ok()
        .and_then(|s| s.split(',').next().and_then(|x| x.trim().parse().ok()))
        .unwrap_or(1);
    let inject = Inject::from_env().unwrap_or(Inject::DdlCommit);
    let b = budget().expect("the self-test needs a budget (PGSNAP_MINIMIZE_BUDGET > 0)");
    let t0 = Instant::now();
    let r = run_seed_report(&env, seed, txns(), Some(inject), Some(b))
        .unwrap_or_else(|| panic!("seed {seed}: the injected check {inject:?} flagged nothing"));
    let m = r.min.expect("minimized");
    println!("{}", r.message);
    println!(
        "pgsnap-minimize: seed {seed} {inject:?}: {} steps ({} units) -> {} steps in {} replays, {:.0}s \
         (whole test {:.0}s); failed {} of {}; reproducer {}",
        r.steps,
        r.units,
        m.steps.len(),
        m.runs,
        m.elapsed.as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        m.failed,
        m.tried,
        r.min_path.display()
    );
    assert!(m.reproduced, "the replayed list did not fail {inject:?}");
    assert!(
        m.steps.len() <= 12 && m.steps.len() * 20 <= r.steps,
        "{} steps left of {}",
        m.steps.len(),
        r.steps
    );
    assert!(m.failed >= 1 && m.shown.is_some());
}

/// ddmin itself, without a server: needs {37, 212} plus one of a few, within the budget
/// the workload gets.
#[test]
fn ddmin_finds_the_needed_elements() {
    let needed = |c: &[usize]| {
        c.contains(&37) && c.contains(&212) && c.iter().any(|x| [250, 300, 301].contains(x))
    };
    let mut tests = 0;
    let r = ddmin((0..400).collect(), false, |c| {
        tests += 1;
        Some(needed(c))
    });
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(needed(&r));
    println!("ddmin: 400 -> {r:?} in {tests} tests");
    assert!(tests <= 60, "{tests} tests");
    // budget spent: the smallest failing list so far
    let mut left = 5;
    let r = ddmin((0..400).collect(), false, |c| {
        left -= 1;
        (left > 0).then(|| needed(c))
    });
    assert!(needed(&r) && r.len() < 400, "{}", r.len());
    // two needed of 400 (the injected check: a slot and a DDL transaction after it)
    let mut tests = 0;
    let r = ddmin((0..400).collect(), false, |c| {
        tests += 1;
        Some(c.contains(&12) && c.iter().any(|&x| x > 12 && x % 17 == 0))
    });
    println!("ddmin: 400 -> {r:?} in {tests} tests");
    assert_eq!(r.len(), 2);
    // the empty list when nothing is needed, and never without allow_empty
    assert!(ddmin(vec![1, 2], true, |_| Some(true)).is_empty());
    assert_eq!(ddmin(vec![1, 2], false, |_| Some(true)).len(), 1);
}
