//! `snapbuild_backlog(slot_name, upto)` and `snapbuild_decoding_cost(slot_name, upto,
//! work_mem_kb, streaming)`: what the slot's next decode will meet, transaction by
//! transaction, and what it will add to `pg_stat_replication_slots`.

use pgrx::prelude::*;
use snapbuild_core::diagnose::HolderKind;
use snapbuild_core::replication::reorder_memory::TxnOutcome;
use snapbuild_core::Lsn;

use crate::adapter::raise;
use crate::context::backlog;
use crate::sql::types::{PgLsn, PgName, Xid};

fn lsn_or_null(l: Lsn) -> Option<PgLsn> {
    l.is_valid().then_some(PgLsn(l.0))
}

fn slot_arg(slot_name: Option<PgName>) -> String {
    match slot_name {
        Some(n) => n.0,
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "slot_name must not be NULL",
        ),
    }
}

/// One row per top-level transaction the slot's next decode will meet: a decoder
/// restarted now (`pg_logical_slot_get_changes(slot_name, upto, NULL)`) reads from
/// restart_lsn through the first record ending at or after `upto` (the flush position
/// when NULL), replayed as `snapbuild_trace` does with reorderbuffer.c's memory
/// accounting on, under `logical_decoding_work_mem` = `work_mem_kb` (the server's setting
/// when NULL) with the consumer streaming or not (`streaming`, default false), as
/// `snapbuild_decoding_cost` counts it.
///
/// Columns: `xid`; `first_lsn` (its first record read) and `end_lsn` (its commit, abort
/// or prepare; NULL while open); `outcome` (text): `committed`, `aborted`, `prepared`,
/// `in progress`, `ended without a record` (ReorderBufferAbortOld); `pid` (int4) and `gid`
/// of what holds an open one; `database` (oid, from its ending record; NULL when not
/// named); `subxacts` (int4); the changes queued by kind (int8): `inserts`, `updates`,
/// `deletes`, `truncates`, `messages` (transactional), `invalidations`, `other`
/// (snapshots, command ids, speculative confirms and aborts); `wal_bytes` (int8: its
/// records and its subtransactions'); `queued_bytes` (int8: the changes as
/// ReorderBufferChangeSize counts them); `total_bytes` (int8: what replaying it adds to
/// `pg_stat_replication_slots.total_bytes`); `decoder` (text: `sent`, `skipped: committed
/// before the start point`, `skipped: another database`, `skipped: no changes`, `skipped:
/// aborted`, `skipped: ended without a record`, `sent at prepare`, `pending`); `spill_count`
/// and `spill_bytes` (int8); `spilled` (bool).
///
/// Errors: `null_value_not_allowed` (22004) for a NULL slot_name; `undefined_object`
/// (42704) for no such slot; `object_not_in_prerequisite_state` (55000) for a physical
/// slot, one being created or without restart_lsn; as `snapbuild_trace` otherwise.
/// Read-only.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_backlog(
    slot_name: Option<PgName>,
    upto: default!(Option<PgLsn>, "NULL"),
    work_mem_kb: default!(Option<i32>, "NULL"),
    streaming: default!(Option<bool>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(xid, Xid),
        name!(first_lsn, PgLsn),
        name!(end_lsn, Option<PgLsn>),
        name!(outcome, &'static str),
        name!(pid, Option<i32>),
        name!(gid, Option<String>),
        name!(database, Option<pg_sys::Oid>),
        name!(subxacts, i32),
        name!(inserts, i64),
        name!(updates, i64),
        name!(deletes, i64),
        name!(truncates, i64),
        name!(messages, i64),
        name!(invalidations, i64),
        name!(other, i64),
        name!(wal_bytes, i64),
        name!(queued_bytes, i64),
        name!(total_bytes, i64),
        name!(decoder, &'static str),
        name!(spill_count, i64),
        name!(spill_bytes, i64),
        name!(spilled, bool),
        name!(stream_count, i64),
        name!(stream_bytes, i64),
    ),
> {
    let slot = slot_arg(slot_name);
    let streaming = streaming.unwrap_or(false);
    let run = backlog::run(&slot, upto.map(|l| Lsn(l.0)), work_mem_kb, streaming, true);
    let open: Vec<_> = run
        .accounts
        .iter()
        .filter(|a| matches!(a.outcome, TxnOutcome::InProgress | TxnOutcome::Prepared))
        .map(|a| a.xid)
        .collect();
    let holders = crate::adapter::activity::holders(&open);
    // rows made as they are asked for, from the accounts (no second copy)
    let rows = run.accounts.into_iter().map(move |a| {
        let holder = holders.iter().find(|h| h.xid == a.xid);
        let (pid, gid) = match holder.map(|h| &h.kind) {
            Some(HolderKind::Backend(b)) => (Some(b.pid), None),
            Some(HolderKind::Prepared(p)) => (None, Some(p.gid.clone())),
            None => (None, None),
        };
        let outcome = match a.outcome {
            TxnOutcome::Sent
            | TxnOutcome::SkippedBeforeStart
            | TxnOutcome::SkippedOtherDatabase
            | TxnOutcome::NoChanges
            | TxnOutcome::FinishedPrepared => "committed",
            TxnOutcome::Aborted => "aborted",
            TxnOutcome::ForgottenAsOld => "ended without a record",
            TxnOutcome::Prepared => "prepared",
            TxnOutcome::InProgress if gid.is_some() => "prepared",
            TxnOutcome::InProgress => "in progress",
        };
        let c = |k: usize| a.changes[k] as i64;
        (
            Xid(a.xid),
            PgLsn(a.first_lsn.0),
            a.end_lsn.map(|l| PgLsn(l.0)),
            outcome,
            pid,
            gid,
            (a.database != 0).then(|| pg_sys::Oid::from(a.database)),
            a.subxacts as i32,
            c(0),
            c(1),
            c(2),
            c(3),
            c(4),
            c(5),
            c(6),
            a.wal_bytes as i64,
            a.queued_bytes as i64,
            a.total_bytes as i64,
            a.outcome.label(),
            a.spill_count as i64,
            a.spill_bytes as i64,
            a.spilled,
            a.stream_count as i64,
            a.stream_bytes as i64,
        )
    });
    TableIterator::new(rows)
}

/// One row: what the slot's next decode (as `snapbuild_backlog` describes it) will add to
/// `pg_stat_replication_slots`, under `logical_decoding_work_mem` = `work_mem_kb` (the
/// server's setting when NULL) with the consumer streaming in-progress transactions or
/// not (`streaming`, default false: test_decoding's and pgoutput's default).
///
/// Columns: `decoded_from` and `decoded_to` (pg_lsn: restart_lsn and the end of the last
/// record read); `records` and `wal_bytes` (int8: read); `work_mem_kb` (int4) and
/// `streaming` (bool) used; the eight counters (int8) `total_txns`, `total_bytes`,
/// `spill_txns`, `spill_count`, `spill_bytes`, `stream_txns`, `stream_count`,
/// `stream_bytes`, NULL when the server's choice cannot be told (then `undecided` says
/// why); transactions and their WAL bytes by what the decoder does with them:
/// `sent_txns`, `sent_wal_bytes`, `skipped_before_start_txns`,
/// `skipped_before_start_wal_bytes`, `skipped_aborted_txns`, `skipped_aborted_wal_bytes`,
/// `skipped_other_db_txns` (another database, or no change for the decoder),
/// `skipped_other_db_wal_bytes`, `pending_txns`, `pending_wal_bytes` (still open);
/// `largest_xid` (xid) and `largest_bytes` (int8: the transaction with the most bytes
/// queued); `peak_memory_bytes` (int8: the most the reorder buffer held); `undecided`
/// (text).
///
/// Errors: as `snapbuild_backlog`; `invalid_parameter_value` (22023) for `work_mem_kb`
/// below 64 (`logical_decoding_work_mem`'s minimum). A NULL `streaming` means false, as
/// when it is left out. Read-only.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_decoding_cost(
    slot_name: Option<PgName>,
    upto: default!(Option<PgLsn>, "NULL"),
    work_mem_kb: default!(Option<i32>, "NULL"),
    streaming: default!(Option<bool>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(decoded_from, Option<PgLsn>),
        name!(decoded_to, Option<PgLsn>),
        name!(records, i64),
        name!(wal_bytes, i64),
        name!(work_mem_kb, i32),
        name!(streaming, bool),
        name!(total_txns, Option<i64>),
        name!(total_bytes, Option<i64>),
        name!(spill_txns, Option<i64>),
        name!(spill_count, Option<i64>),
        name!(spill_bytes, Option<i64>),
        name!(stream_txns, Option<i64>),
        name!(stream_count, Option<i64>),
        name!(stream_bytes, Option<i64>),
        name!(sent_txns, i64),
        name!(sent_wal_bytes, i64),
        name!(skipped_before_start_txns, i64),
        name!(skipped_before_start_wal_bytes, i64),
        name!(skipped_aborted_txns, i64),
        name!(skipped_aborted_wal_bytes, i64),
        name!(skipped_other_db_txns, i64),
        name!(skipped_other_db_wal_bytes, i64),
        name!(pending_txns, i64),
        name!(pending_wal_bytes, i64),
        name!(largest_xid, Option<Xid>),
        name!(largest_bytes, Option<i64>),
        name!(peak_memory_bytes, i64),
        name!(undecided, Option<String>),
    ),
> {
    let slot = slot_arg(slot_name);
    let streaming = streaming.unwrap_or(false);
    let run = backlog::run(&slot, upto.map(|l| Lsn(l.0)), work_mem_kb, streaming, false);
    let decided = run.undecided.is_none();
    let n = |v: u64| decided.then_some(v as i64);
    let s = &run.stats;
    let m = &run.summary;
    let wal_bytes = run.decoded_to.0.saturating_sub(run.decoded_from.0) as i64;
    TableIterator::once((
        lsn_or_null(run.decoded_from),
        lsn_or_null(run.decoded_to),
        run.records as i64,
        wal_bytes,
        run.work_mem_kb,
        run.streaming,
        n(s.total_txns),
        n(s.total_bytes),
        n(s.spill_txns),
        n(s.spill_count),
        n(s.spill_bytes),
        n(s.stream_txns),
        n(s.stream_count),
        n(s.stream_bytes),
        m.sent_txns as i64,
        m.sent_wal_bytes as i64,
        m.skipped_before_start_txns as i64,
        m.skipped_before_start_wal_bytes as i64,
        m.skipped_aborted_txns as i64,
        m.skipped_aborted_wal_bytes as i64,
        m.skipped_other_db_txns as i64,
        m.skipped_other_db_wal_bytes as i64,
        m.pending_txns as i64,
        m.pending_wal_bytes as i64,
        m.largest.map(|l| Xid(l.0)),
        m.largest.map(|l| l.1 as i64),
        run.peak as i64,
        run.undecided,
    ))
}
