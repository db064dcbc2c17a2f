//! `snapbuild_diagnose(slot_name)`: "why is my slot stuck?" in plain words, one row per
//! finding, with the facts behind each as typed columns.

use pgrx::prelude::*;
use snapbuild_core::diagnose::Finding;

use crate::adapter::raise;
use crate::adapter::slots::find_slot;
use crate::context::diagnose::diagnose_slot;
use crate::sql::types::{PgLsn, PgName, Xid};

type DiagnoseRow = (
    String,
    String,
    Option<Xid>,
    Option<i32>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<PgLsn>,
    Option<i64>,
    Option<TimestampWithTimeZone>,
    Option<String>,
);

fn tstz(v: Option<i64>) -> Option<TimestampWithTimeZone> {
    v.and_then(|t| TimestampWithTimeZone::try_from(t).ok())
}

fn row(f: Finding) -> DiagnoseRow {
    let b = f.backend.unwrap_or_default();
    let has_backend = b.pid != 0;
    let p = f.prepared;
    (
        f.kind.map(|k| k.as_str()).unwrap_or("").to_owned(),
        f.finding,
        f.xid.map(Xid),
        has_backend.then_some(b.pid),
        b.datname
            .or_else(|| p.as_ref().and_then(|p| p.database.clone())),
        b.usename
            .or_else(|| p.as_ref().and_then(|p| p.owner.clone())),
        b.application_name,
        b.client_addr,
        b.state,
        tstz(b.xact_start),
        b.wait_event,
        b.query,
        p.map(|p| p.gid),
        f.lsn.map(PgLsn::from),
        f.bytes,
        tstz(f.since),
        f.remedy,
    )
}

/// Why logical slot `slot_name` is stuck, one row per finding, most important first:
///
/// - `invalidated`: the slot was invalidated (slot.c's cause: `wal_removed`,
///   `rows_removed`, `wal_level_insufficient`, `idle_timeout`; `wal_status = 'lost'` on
///   14/15); the only row then.
/// - While the slot is being created (pg_create_logical_replication_slot or
///   CREATE_REPLICATION_SLOT has not returned): `creation waiting` (the snapshot builder's
///   phase after a replay from restart_lsn to the flush position, as snapbuild.c
///   SnapBuildFindSnapshot runs it: START, BUILDING_SNAPSHOT or FULL_SNAPSHOT, the
///   `next_phase_at` cutoff in `xid`, the last RUNNING_XACTS in `lsn`), then per xid it
///   waits for (the last RUNNING_XACTS's top-level xids before the cutoff)
///   `waiting for transaction` (the backend holding it in pg_locks: `pid` and
///   pg_stat_activity's columns), `waiting for prepared transaction` (`gid`, owner as
///   `usename`, `datname`, prepared at as `since`) or `waiting for ended transaction`; and
///   `waiting for WAL` when no live transaction is left (remedy: `pg_log_standby_snapshot()`
///   on 16+, `CHECKPOINT` on 14/15; `bytes`: WAL flushed after the last record read).
/// - A created slot: `restart_lsn held` (the reorder buffer's oldest running transaction
///   and the LSN of its first change), `catalog_xmin held` (the oldest xid running at the
///   last RUNNING_XACTS, still held), `pending restart candidate` (candidate_restart_lsn
///   waits until the consumer confirms candidate_restart_valid), `no consumer` (no active
///   pid; `since` = inactive_since on 17+), `consumer lag` and `retained WAL` (`bytes`
///   behind the flush position), `healthy` when nothing holds it back.
///
/// Columns: `kind`, `finding` (text), `xid`, `pid` (int4), `datname`, `usename`,
/// `application_name`, `client_addr`, `state`, `xact_start` (timestamptz), `wait_event`
/// (`type:event`), `query`, `gid`, `lsn` (pg_lsn), `bytes` (int8, WAL bytes), `since`
/// (timestamptz), `remedy` (text: the SQL to run or what to do).
///
/// Read-only. Errors: `null_value_not_allowed` (22004) for a NULL slot_name;
/// `undefined_object` (42704) for no such slot; `object_not_in_prerequisite_state`
/// (55000) for a physical slot.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_diagnose(
    slot_name: Option<PgName>,
) -> TableIterator<
    'static,
    (
        name!(kind, String),
        name!(finding, String),
        name!(xid, Option<Xid>),
        name!(pid, Option<i32>),
        name!(datname, Option<String>),
        name!(usename, Option<String>),
        name!(application_name, Option<String>),
        name!(client_addr, Option<String>),
        name!(state, Option<String>),
        name!(xact_start, Option<TimestampWithTimeZone>),
        name!(wait_event, Option<String>),
        name!(query, Option<String>),
        name!(gid, Option<String>),
        name!(lsn, Option<PgLsn>),
        name!(bytes, Option<i64>),
        name!(since, Option<TimestampWithTimeZone>),
        name!(remedy, Option<String>),
    ),
> {
    let Some(slot_name) = slot_name else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "slot_name must not be NULL",
        )
    };
    let slot = find_slot(&slot_name.0);
    if !slot.logical {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("replication slot \"{}\" is not a logical slot", slot.name),
        );
    }
    let findings = diagnose_slot(&slot).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
            format!("replication slot \"{}\" does not exist", slot.name),
        )
    });
    TableIterator::new(findings.into_iter().map(row))
}
