//! What the findings propose: ending a backend's transaction or a prepared one, finding
//! and ending the primary's holder of a transaction from a standby, and getting a newer
//! RUNNING_XACTS record logged (CHECKPOINT, or pg_log_standby_snapshot() from 16 on).
//!
//! Not a PostgreSQL file. The RUNNING_XACTS remedies follow the callers of standby.c's
//! LogStandbySnapshot: checkpoints, the background writer (every 15 s while WAL is
//! written) and pg_log_standby_snapshot().

use super::facts::{Backend, Prepared, ServerFacts};
use crate::include::transam::TransactionId;

/// How to get a newer RUNNING_XACTS record on this major.
pub(super) fn wal_remedy(server: &ServerFacts) -> String {
    let on = if server.in_recovery {
        " on the primary"
    } else {
        ""
    };
    if server.version.major >= 16 {
        format!("SELECT pg_log_standby_snapshot(){on} (logs a RUNNING_XACTS record now; the background writer logs one every 15 s while WAL is written)")
    } else {
        format!("CHECKPOINT{on} (logs a RUNNING_XACTS record; the background writer logs one every 15 s while WAL is written)")
    }
}

/// On a standby: how to find the primary's holder of `xid` (its pid, application and
/// state) and end it there, then log a RUNNING_XACTS there, then `then` (what else must
/// happen, e.g. a consumer confirming; empty for nothing).
pub(super) fn primary_remedy(xid: TransactionId, server: &ServerFacts, then: &str) -> String {
    format!(
        "on the primary, find its holder: SELECT l.pid, a.application_name, a.usename, a.datname, a.state, a.xact_start, a.query, p.gid FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid LEFT JOIN pg_prepared_xacts p ON p.transaction = l.transactionid WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.transactionid = '{xid}'::xid; end it there (COMMIT or ROLLBACK in that session, pg_terminate_backend(pid), or COMMIT/ROLLBACK PREPARED 'gid'); then {}{then}",
        wal_remedy(server)
    )
}

/// What to do about a backend holding a transaction.
pub(super) fn backend_remedy(b: &Backend) -> String {
    match b.backend_type.as_deref() {
        Some("autovacuum worker") => format!(
            "SELECT pg_cancel_backend({}) (an autovacuum worker; it is started again later)",
            b.pid
        ),
        Some("walsender") => format!(
            "end the replication client's transaction, or SELECT pg_terminate_backend({}) (a walsender)",
            b.pid
        ),
        _ => format!(
            "COMMIT or ROLLBACK in that session, or SELECT pg_terminate_backend({})",
            b.pid
        ),
    }
}

pub(super) fn prepared_remedy(p: &Prepared) -> String {
    let db = p
        .database
        .as_ref()
        .map(|d| format!(" (connected to database {d})"))
        .unwrap_or_default();
    format!(
        "COMMIT PREPARED '{}' or ROLLBACK PREPARED '{}'{db}",
        p.gid.replace('\'', "''"),
        p.gid.replace('\'', "''")
    )
}

/// What a copy's remedies add: the primary slot's consumer confirms, the
/// synchronization copies.
pub(super) const CONFIRM_ON_PRIMARY_COPY: &str =
    ", then let the slot's consumer on the primary confirm past that record (the synchronization then copies its positions here)";
