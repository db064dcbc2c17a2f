//! The recorded workload: steps (what the driver thread does) grouped in units (kept or
//! removed together by the minimizer).

use std::collections::BTreeSet;

/// One thing the driver thread does. SQL holds [`crate::P`] where the run's prefix goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Session `s` (0-based) runs `sql`.
    Sql { s: usize, sql: String },
    /// The admin session of database `db` ([`crate::session_db`]) runs `sql` (COMMIT /
    /// ROLLBACK PREPARED, which must run in the database that prepared).
    Admin { db: usize, sql: String },
    /// A RUNNING_XACTS record: `pg_log_standby_snapshot()` (16+), `CHECKPOINT` (15).
    StandbySnapshot,
    /// `pg_create_logical_replication_slot` of slot i starts in a session of its own.
    CreateStart(usize),
    /// Slot i's creation is collected (it had returned here in the recorded run).
    CreateFinish(usize),
    /// `pg_logical_slot_peek_changes` of slot i.
    Peek(usize),
    /// `snapbuild_slot_prediction` then `pg_replication_slot_advance` of slot i (a
    /// fast-forward decoder) to the flush position, then the slot's state.
    Advance(usize),
    /// The server restarts: `pg_ctl restart -m fast` or, `immediate`, a crash and
    /// recovery. Sessions reconnect; prepared transactions survive.
    Restart { immediate: bool },
    /// `snapbuild_slot_prediction` then `pg_logical_slot_get_changes` of slot i, up to
    /// the flush position, then the slot's state.
    Get(usize),
}

#[derive(Clone, Debug)]
pub struct Step {
    pub unit: usize,
    pub action: Action,
}

/// Steps that are kept or removed together; `needs`: removed when that unit is.
#[derive(Clone, Debug)]
pub struct Unit {
    pub what: &'static str,
    pub needs: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct Recording {
    pub seed: u64,
    pub txns: u64,
    pub steps: Vec<Step>,
    pub units: Vec<Unit>,
}

impl Recording {
    pub fn unit(&mut self, what: &'static str, needs: Option<usize>) -> usize {
        self.units.push(Unit { what, needs });
        self.units.len() - 1
    }

    /// The steps (indices) a candidate keeps: those of kept units whose needed unit is
    /// kept too, minus single dropped statements.
    pub fn select(&self, units: &BTreeSet<usize>, dropped: &BTreeSet<usize>) -> Vec<usize> {
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
    pub fn is_inner(&self, k: usize) -> bool {
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
