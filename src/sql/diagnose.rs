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
    Option<Xid>,
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
        f.forecast_catalog_xmin.map(Xid),
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
///   `usename`, `datname`, prepared at as `since`), `waiting for primary transaction` (on
///   a standby: no holder is visible there; the remedy is the query to run on the primary)
///   or `waiting for ended transaction`; and
///   `waiting for WAL` when no live transaction is left (remedy: `pg_log_standby_snapshot()`
///   on 16+, `CHECKPOINT` on 14/15; `bytes`: WAL flushed after the last record read).
/// - A created slot: `restart_lsn held` (the reorder buffer's oldest running transaction
///   and the LSN of its first change), `catalog_xmin held` (the oldest xid running at the
///   last RUNNING_XACTS, still held), `pending restart candidate` (candidate_restart_lsn
///   waits until the consumer confirms candidate_restart_valid), `no consumer` (no active
///   pid; `since` = inactive_since on 17+), `consumer lag` and `retained WAL` (`bytes`
///   behind the flush position), `healthy` when nothing holds it back.
/// - `forecast` (a created slot, one row per xid holding restart_lsn or catalog_xmin):
///   what ending that transaction does once the consumer confirms past the next
///   RUNNING_XACTS record, re-run on a copy of the replay (snapbuild.c
///   SnapBuildProcessRunningXacts, logical.c LogicalIncreaseRestartDecodingForSlot /
///   LogicalIncreaseXminForSlot / LogicalConfirmReceivedLocation): `xid` the ending
///   transaction, `lsn` restart_lsn afterwards (NULL when it is that RUNNING_XACTS record
///   itself, whose LSN is not known yet), `bytes` the WAL released (restart_lsn's move),
///   `forecast_catalog_xmin` catalog_xmin afterwards (NULL: the next xid then).
/// - `wal loss forecast` (a created slot whose restart_lsn something holds back, or that
///   is past the loss position, or on 18 an unused slot with
///   idle_replication_slot_timeout set): when the server will invalidate it if
///   restart_lsn stays: `lsn` the position past which the next checkpoint invalidates it
///   (xlog.c KeepLogSeg), `since` the predicted time, `bytes` the WAL left before it; the
///   holder's columns and remedy are those of the row that holds restart_lsn.
/// - `catalog horizon` (informational): whether the slot's catalog_xmin is the oldest
///   xmin horizon of the cluster (VACUUM keeps catalog rows deleted from there on) or
///   which slot, backend or prepared transaction holds an older one (`xid`).
///
/// Columns: `kind`, `finding` (text), `xid`, `pid` (int4), `datname`, `usename`,
/// `application_name`, `client_addr`, `state`, `xact_start` (timestamptz), `wait_event`
/// (`type:event`), `query`, `gid`, `lsn` (pg_lsn), `bytes` (int8, WAL bytes), `since`
/// (timestamptz), `remedy` (text: the SQL to run or what to do), `forecast_catalog_xmin`
/// (xid). On `waiting for WAL`, `since` is when the last RUNNING_XACTS was written at the
/// latest (its WAL segment file's modification time).
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
        name!(forecast_catalog_xmin, Option<Xid>),
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

fn state_text(h: &snapbuild_core::diagnose::Health) -> Option<String> {
    use snapbuild_core::SnapBuildState as S;
    if h.invalidated {
        return Some("invalidated".into());
    }
    if h.sync_pending {
        return Some("sync pending".into());
    }
    h.state.map(|s| {
        match s {
            S::Start => "start",
            S::BuildingSnapshot => "building",
            S::FullSnapshot => "full",
            S::Consistent => "consistent",
        }
        .to_owned()
    })
}

/// One row per logical slot, numbers only, for monitoring (the view
/// `snapbuild_slot_health` selects from it): `slot_name`, `state` (the snapshot
/// builder's state after replaying the slot to the flush position: `start`, `building`,
/// `full`, `consistent`; `invalidated`; NULL when its WAL is gone), `in_creation`,
/// `waiting_xids` (int4: xids a creation waits for), `oldest_blocking_pid` (int4: the
/// backend `snapbuild_diagnose` names first as holding the creation, restart_lsn or
/// catalog_xmin), `restart_lsn_lag_bytes` and `confirmed_flush_lag_bytes` (int8: the flush
/// position minus restart_lsn / confirmed_flush), `catalog_xmin_age` (int4: xids),
/// `last_running_xacts` (pg_lsn: the last RUNNING_XACTS record read),
/// `wal_since_running_xacts_bytes` (int8), `replayed_bytes` (int8: WAL the slot's replay took
/// in this call),
/// `running_xacts_age_s` (float8: seconds since the last RUNNING_XACTS was written, at
/// least: now minus its WAL segment file's modification time), `releasable_bytes` (int8:
/// WAL bytes restart_lsn moves by when the transaction holding it ends and the consumer
/// confirms, per the `forecast` of `snapbuild_diagnose`; at least the WAL up to the flush
/// position when the target is the next RUNNING_XACTS; 0 when it would not move; NULL
/// without a forecast), `replay_state` (text: where the slot's replay is kept for the next
/// call: `shared`, in shared memory, resumed by every session and the watcher; `backend`,
/// in this backend only; NULL when not replayed), `consumer_attached` (the slot has an
/// active_pid: a consumer, walsender or the creating backend uses it), and the WAL loss
/// forecast if restart_lsn stays where it is (see `snapbuild_core::diagnose::wal_loss`):
/// `wal_loss_lsn` (pg_lsn: the position past which the next checkpoint invalidates the
/// slot, re-running xlog.c KeepLogSeg with max_slot_wal_keep_size and wal_keep_size;
/// NULL when max_slot_wal_keep_size is -1, the slot is invalidated or has no
/// restart_lsn), `wal_loss_at` (timestamptz: when the WAL reaches it at the rate
/// measured from the commit times in the WAL, now when it is past; on 18 for an unused
/// slot inactive_since plus idle_replication_slot_timeout, if earlier; NULL when
/// unknown), `wal_loss_in_s` (float8: seconds from now to `wal_loss_at`, 0 when past:
/// the next checkpoint invalidates it), `wal_loss_cause` (`wal_removed` or
/// `idle_timeout`, slot.c's names; NULL when none is predicted).
///
/// The WAL is read once for all slots, from the earliest position any of their replays
/// needs (see `context::group`). Each slot's replay is kept between calls (until the
/// slot's restart_lsn moves, or its creation ends, or it is dropped), shared with
/// `snapbuild_diagnose`: in shared memory when the library is preloaded (every session
/// resumes it; `pg_snapbuild.shared_state`), else in this backend. A call reads only the
/// WAL flushed since the replays were last brought forward. A slot that vanishes meanwhile is skipped. Physical slots are
/// not listed. Read-only; no errors of its own.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_slot_health() -> TableIterator<
    'static,
    (
        name!(slot_name, PgName),
        name!(state, Option<String>),
        name!(in_creation, bool),
        name!(waiting_xids, i32),
        name!(oldest_blocking_pid, Option<i32>),
        name!(restart_lsn_lag_bytes, Option<i64>),
        name!(confirmed_flush_lag_bytes, Option<i64>),
        name!(catalog_xmin_age, Option<i32>),
        name!(last_running_xacts, Option<PgLsn>),
        name!(wal_since_running_xacts_bytes, Option<i64>),
        name!(replayed_bytes, i64),
        name!(running_xacts_age_s, Option<f64>),
        name!(releasable_bytes, Option<i64>),
        name!(replay_state, Option<String>),
        name!(consumer_attached, bool),
        name!(wal_loss_lsn, Option<PgLsn>),
        name!(wal_loss_at, Option<TimestampWithTimeZone>),
        name!(wal_loss_in_s, Option<f64>),
        name!(wal_loss_cause, Option<String>),
    ),
> {
    let slots: Vec<_> = crate::adapter::slots::copy_slots()
        .into_iter()
        .filter(|s| s.logical)
        .collect();
    let mut rows = Vec::new();
    for (name, h, judged) in crate::context::diagnose::slots_health(&slots) {
        rows.push((
            PgName(name),
            state_text(&h),
            h.in_creation,
            h.waiting_xids,
            h.oldest_blocking_pid,
            h.restart_lsn_lag_bytes,
            h.confirmed_flush_lag_bytes,
            h.catalog_xmin_age,
            h.last_running_xacts.map(PgLsn::from),
            h.wal_since_running_xacts_bytes,
            judged.bytes as i64,
            h.running_xacts_age_s,
            h.releasable_bytes,
            judged.replay.text().map(str::to_owned),
            h.consumer_attached,
            h.wal_loss.lsn.map(PgLsn::from),
            tstz(h.wal_loss.at),
            h.wal_loss.in_s,
            h.wal_loss.cause.map(|c| c.as_str().to_owned()),
        ));
    }
    TableIterator::new(rows)
}

pgrx::extension_sql!(
    r#"
CREATE VIEW snapbuild_slot_health AS SELECT * FROM snapbuild_slot_health();
"#,
    name = "snapbuild_slot_health_view",
    requires = [snapbuild_slot_health]
);
