//! The random run: a seeded generator that drives the executor and records every step.

use crate::exec::{Exec, Outcome};
use crate::steps::{Action, Recording, Step};
use crate::{session_db, two_phase, P, SESSIONS, SLOTS, TABLES};
use pg_snapbuild_tests::*;

/// A run restarts the server at most this often (each costs a second or two).
const MAX_RESTARTS: u32 = 2;

pub struct Rng(u64);
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

#[derive(Clone, Copy, Default)]
struct Sess {
    /// The transaction unit open in this session.
    unit: Option<usize>,
    savepoints: u32,
}

/// The generator's state: the recording so far, the executor, the sessions, the slots'
/// life cycle and the prepared transactions waiting for their end.
struct Gen<'e> {
    rec: Recording,
    ex: Exec<'e>,
    sess: [Sess; SESSIONS],
    rng: Rng,
    /// Per slot: the unit of its creation.
    slot_unit: [usize; SLOTS],
    /// How many creations were started; those not returned yet; those returned.
    started: usize,
    pending: Vec<usize>,
    created: Vec<usize>,
    /// Prepared transactions not ended yet: (gid, unit, database).
    prepared: Vec<(String, usize, usize)>,
    /// Server restarts so far (at most [`MAX_RESTARTS`] a run).
    restarts: u32,
    done_txns: u64,
    round: u64,
    next_col: u32,
}

/// Runs the seeded random workload, recording it. Returns the recording, what it
/// produced and the number of transactions ended.
pub fn generate(env: &Env, seed: u64, txns: u64) -> (Recording, Outcome, u64) {
    let keep = std::env::var("PGSNAP_KEEP_SLOTS").as_deref() == Ok("1");
    let mut g = Gen {
        rec: Recording {
            seed,
            txns,
            ..Recording::default()
        },
        ex: Exec::new(env, &format!("rw{seed}"), false, keep),
        sess: [Sess::default(); SESSIONS],
        rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
        slot_unit: [usize::MAX; SLOTS],
        started: 0,
        pending: Vec::new(),
        created: Vec::new(),
        prepared: Vec::new(),
        restarts: 0,
        done_txns: 0,
        round: 0,
        next_col: 0,
    };
    while g.done_txns < txns {
        g.round += 1;
        g.slot_life_cycle();
        g.end_a_prepared_transaction();
        let i = g.rng.below(SESSIONS as u64) as usize;
        if g.sess[i].unit.is_none() {
            g.begin_or_autocommit(i);
            continue;
        }
        g.in_transaction(i);
        g.collect_creations();
    }
    g.finish()
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

    /// One of the run's tables, at random.
    fn table(&mut self) -> String {
        format!("{P}_t{}", self.rng.below(TABLES as u64))
    }

    /// Slot life cycle: start creations, log RUNNING_XACTS, peek or consume a created
    /// slot.
    fn slot_life_cycle(&mut self) {
        if self.rng.chance(2) && self.started < SLOTS {
            let u = self.rec.unit("slot creation", None);
            self.slot_unit[self.started] = u;
            self.admin(u, Action::CreateStart(self.started));
            self.pending.push(self.started);
            self.started += 1;
        }
        if self.rng.chance(3) {
            let u = self.rec.unit("RUNNING_XACTS", None);
            self.admin(u, Action::StandbySnapshot);
        }
        if self.rng.chance(3) && !self.created.is_empty() {
            let idx = self.created[self.rng.below(self.created.len() as u64) as usize];
            let (what, action) = match self.rng.below(100) {
                0..=49 => ("peek", Action::Peek(idx)),
                50..=79 => ("get", Action::Get(idx)),
                _ => ("advance", Action::Advance(idx)),
            };
            let u = self.rec.unit(what, Some(self.slot_unit[idx]));
            self.admin(u, action);
        }
        if self.rng.chance(1) && self.restarts < MAX_RESTARTS && self.pending.is_empty() {
            self.restart();
        }
    }

    /// The sessions' open transactions end (COMMIT: their statements stay in the run),
    /// then the server restarts, cleanly or by a crash; prepared transactions survive it.
    fn restart(&mut self) {
        for i in 0..SESSIONS {
            if self.sess[i].unit.is_some() {
                if self.sql(i, "COMMIT") {
                    self.done_txns += 1;
                }
                self.sess[i] = Sess::default();
            }
        }
        self.restarts += 1;
        let immediate = self.rng.chance(50);
        let u = self.rec.unit("restart", None);
        self.admin(u, Action::Restart { immediate });
    }

    /// Prepared transactions end from another session after a while.
    fn end_a_prepared_transaction(&mut self) {
        if self.prepared.is_empty() || !self.rng.chance(20) {
            return;
        }
        let (gid, u, db) = self.prepared.remove(0);
        let mut verb = if self.rng.chance(75) {
            "COMMIT"
        } else {
            "ROLLBACK"
        };
        // A ROLLBACK PREPARED decoded while a two-phase slot is being created (builder in
        // FULL_SNAPSHOT) crashes the creating backend (a PostgreSQL bug, README "Known
        // PostgreSQL problems"): never while the two-phase slot's creation is pending.
        if self.pending.iter().any(|&p| two_phase(p)) {
            verb = "COMMIT";
        }
        let sql = format!("{verb} PREPARED '{gid}'");
        self.admin(u, Action::Admin { db, sql });
    }

    /// An idle session runs an autocommit insert or begins a transaction.
    fn begin_or_autocommit(&mut self, i: usize) {
        if self.rng.chance(25) {
            let t = self.table();
            let v = self.rng.below(1000);
            let sql = format!("INSERT INTO {t}(a, b) VALUES ({v}, 'auto')");
            if self.sql(i, sql) {
                self.done_txns += 1;
            }
        } else {
            let u = self.rec.unit("transaction", None);
            self.sess[i] = Sess {
                unit: Some(u),
                savepoints: 0,
            };
            self.sql(i, "BEGIN");
            if self.rng.chance(50) {
                self.sql(i, "SELECT pg_current_xact_id()");
            }
        }
    }

    /// A session in a transaction runs a statement, or ends the transaction.
    fn in_transaction(&mut self, i: usize) {
        let roll = self.rng.below(100);
        let t = self.table();
        let sp = self.sess[i].savepoints;
        match roll {
            0..=34 => {
                let v = self.rng.below(1000);
                self.sql(i, format!("INSERT INTO {t}(a, b) VALUES ({v}, 'x')"));
            }
            35..=44 => {
                let v = self.rng.below(7);
                self.sql(i, format!("UPDATE {t} SET a = a + 1 WHERE a % 7 = {v}"));
            }
            45..=49 => {
                let v = self.rng.below(11);
                self.sql(i, format!("DELETE FROM {t} WHERE a % 11 = {v}"));
            }
            50..=55 => {
                self.next_col += 1;
                let col = self.next_col;
                self.sql(i, format!("ALTER TABLE {t} ADD COLUMN c{col} int"));
            }
            56..=58 => {
                let tmp = format!("{P}_tmp{}", self.rng.below(4));
                self.sql(i, format!("CREATE TABLE IF NOT EXISTS {tmp}(x int)"));
            }
            59..=60 => {
                let tmp = format!("{P}_tmp{}", self.rng.below(4));
                self.sql(i, format!("DROP TABLE IF EXISTS {tmp}"));
            }
            61..=66 => {
                self.sess[i].savepoints += 1;
                self.sql(i, format!("SAVEPOINT sp{}", sp + 1));
            }
            67..=70 if sp > 0 => {
                self.sql(i, format!("ROLLBACK TO SAVEPOINT sp{sp}"));
            }
            71..=72 if sp > 0 => {
                if self.sql(i, format!("RELEASE SAVEPOINT sp{sp}")) {
                    self.sess[i].savepoints -= 1;
                }
            }
            73..=74 => {
                // transactional logical message
                self.sql(i, "SELECT pg_logical_emit_message(true, 'rw', 'm')");
            }
            75 => {
                // non-transactional logical message (decoded at once, if consistent)
                self.sql(i, "SELECT pg_logical_emit_message(false, 'rw', 'n')");
            }
            76 => {
                // 70 subtransactions, so the subxid cache overflows (RUNNING_XACTS then
                // lists the top level alone), the last one changing the catalog
                self.next_col += 1;
                let col = self.next_col;
                self.sql(
                    i,
                    format!(
                        "DO $$ BEGIN FOR i IN 1..70 LOOP BEGIN INSERT INTO {t}(a, b) VALUES (i, 'o'); \
                         EXCEPTION WHEN others THEN RAISE; END; END LOOP; \
                         BEGIN ALTER TABLE {t} ADD COLUMN c{col} int; EXCEPTION WHEN others THEN RAISE; END; END $$"
                    ),
                );
            }
            77 => {
                // a large insert: more than logical_decoding_work_mem's minimum (64kB)
                // of changes, so a streaming decoder streams it on 14/15 too
                self.sql(
                    i,
                    format!(
                        "INSERT INTO {t}(a, b) SELECT g, repeat('s', 200) FROM generate_series(1, 400) g"
                    ),
                );
            }
            _ => self.end_transaction(i),
        }
    }

    /// COMMIT (75%), ROLLBACK (12%) or PREPARE TRANSACTION (while fewer than 5 wait).
    fn end_transaction(&mut self, i: usize) {
        let end = self.rng.below(100);
        let u = self.sess[i].unit.unwrap();
        let mut gid = None;
        let stmt = if end < 75 {
            "COMMIT".to_owned()
        } else if end < 87 {
            "ROLLBACK".to_owned()
        } else if self.prepared.len() < 5 {
            // Every fourth gid is one test_decoding's filter_prepare filters on the
            // two-phase slot (decoded as a plain commit there).
            let id = if self.round % 4 == 0 {
                format!("{P}_g{}_nodecode", self.round)
            } else {
                format!("{P}_g{}", self.round)
            };
            let s = format!("PREPARE TRANSACTION '{id}'");
            gid = Some(id);
            s
        } else {
            "COMMIT".to_owned()
        };
        if self.sql(i, stmt) {
            self.done_txns += 1;
            if let Some(id) = gid {
                self.prepared.push((id, u, session_db(i)));
            }
        }
        self.sess[i] = Sess::default();
    }

    /// Collect creations that finished.
    fn collect_creations(&mut self) {
        let mut k = 0;
        while k < self.pending.len() {
            let idx = self.pending[k];
            if self.ex.creation_returned(idx) {
                self.pending.remove(k);
                self.admin(self.slot_unit[idx], Action::CreateFinish(idx));
                self.created.push(idx);
            } else {
                k += 1;
            }
        }
    }

    /// End everything still open so pending creations can finish; the executor's
    /// epilogue observes the slots.
    fn finish(mut self) -> (Recording, Outcome, u64) {
        for i in 0..SESSIONS {
            if self.sess[i].unit.is_some() {
                self.sql(i, "COMMIT");
                self.sess[i] = Sess::default();
            }
        }
        for (gid, u, db) in std::mem::take(&mut self.prepared) {
            let sql = format!("COMMIT PREPARED '{gid}'");
            self.admin(u, Action::Admin { db, sql });
        }
        let Gen {
            rec, ex, done_txns, ..
        } = self;
        let out = ex.finish();
        (rec, out, done_txns)
    }
}
