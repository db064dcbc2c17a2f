//! `snapbuild_backlog(slot_name, upto)` and `snapbuild_decoding_cost(slot_name, upto,
//! work_mem_kb, streaming)`: what the slot's next decode will meet, transaction by
//! transaction, and what it will add to `pg_stat_replication_slots`.

use pgrx::prelude::*;
use snapbuild_core::diagnose::HolderKind;
use snapbuild_core::replication::reorder_memory::{TxnAccount, TxnOutcome};
use snapbuild_core::Lsn;

use crate::adapter::raise;
use crate::context::backlog;
use crate::sql::srf::{MaterializedSet, RowSlots};
use crate::sql::types::{PgLsn, PgName, StaticTexts, Xid};

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
/// and `spill_bytes` (int8); `spilled` (bool); `stream_count` and `stream_bytes` (int8).
///
/// Errors: `null_value_not_allowed` (22004) for a NULL slot_name; `invalid_parameter_value`
/// (22023) for `work_mem_kb` below 64; `undefined_object` (42704) for no such slot;
/// `object_not_in_prerequisite_state` (55000) for a physical slot, one being created or
/// without restart_lsn; `feature_not_supported` (0A000) where a set cannot be taken; as
/// `snapbuild_trace` otherwise. Read-only.
///
/// The rows go to a tuplestore as the transactions end (materialize mode: past
/// `work_mem` it spills to a temporary file), so the backend holds the transactions open
/// at once, not every one met.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn snapbuild_backlog_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    unsafe {
        let slot = slot_arg(pgrx::fcinfo::pg_getarg::<PgName>(fcinfo, 0));
        let upto = pgrx::fcinfo::pg_getarg::<PgLsn>(fcinfo, 1);
        let work_mem_kb = pgrx::fcinfo::pg_getarg::<i32>(fcinfo, 2);
        let streaming = pgrx::fcinfo::pg_getarg::<bool>(fcinfo, 3).unwrap_or(false);
        let mut set = MaterializedSet::begin(fcinfo);
        if set.columns() != BACKLOG_COLUMNS {
            raise(
                PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                "snapbuild_backlog's row type is not the one this library returns: run ALTER EXTENSION pg_snapbuild UPDATE",
            );
        }
        let mut texts = StaticTexts::new(set.per_query_memory());
        let mut put_ended = |a: TxnAccount| {
            set.row(|slots| put_backlog_row(slots, &a, None, &mut texts));
        };
        let run = backlog::run(
            &slot,
            upto.map(|l| Lsn(l.0)),
            work_mem_kb,
            streaming,
            Some(&mut put_ended),
        );
        let open: Vec<_> = run.open.iter().map(|a| a.xid).collect();
        let holders = crate::adapter::activity::holders(&open);
        for a in &run.open {
            let holder = holders.iter().find(|h| h.xid == a.xid).map(|h| &h.kind);
            set.row(|slots| put_backlog_row(slots, a, holder, &mut texts));
        }
        pg_sys::Datum::from(0)
    }
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_snapbuild_backlog_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1_API
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION "snapbuild_backlog"(
	"slot_name" name,
	"upto" pg_lsn DEFAULT NULL,
	"work_mem_kb" INT DEFAULT NULL,
	"streaming" bool DEFAULT NULL
) RETURNS TABLE (
	"xid" xid,
	"first_lsn" pg_lsn,
	"end_lsn" pg_lsn,
	"outcome" TEXT,
	"pid" INT,
	"gid" TEXT,
	"database" oid,
	"subxacts" INT,
	"inserts" bigint,
	"updates" bigint,
	"deletes" bigint,
	"truncates" bigint,
	"messages" bigint,
	"invalidations" bigint,
	"other" bigint,
	"wal_bytes" bigint,
	"queued_bytes" bigint,
	"total_bytes" bigint,
	"decoder" TEXT,
	"spill_count" bigint,
	"spill_bytes" bigint,
	"spilled" bool,
	"stream_count" bigint,
	"stream_bytes" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'snapbuild_backlog_wrapper';
"#,
    name = "snapbuild_backlog"
);

/// The number of `snapbuild_backlog`'s columns.
const BACKLOG_COLUMNS: usize = 24;

/// Writes `snapbuild_backlog`'s row for transaction `a`, held by `holder` when still
/// open; always true (a row).
fn put_backlog_row(
    slots: &mut RowSlots,
    a: &TxnAccount,
    holder: Option<&HolderKind>,
    texts: &mut StaticTexts,
) -> bool {
    let (pid, gid) = match holder {
        Some(HolderKind::Backend(b)) => (Some(b.pid), None),
        Some(HolderKind::Prepared(p)) => (None, Some(p.gid.as_str())),
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
    let int8 = |n: u64| Some(pg_sys::Datum::from(n as i64));
    let c = |k: usize| int8(a.changes[k]);
    let values: [Option<pg_sys::Datum>; BACKLOG_COLUMNS] = [
        Xid(a.xid).into_datum(),
        PgLsn(a.first_lsn.0).into_datum(),
        a.end_lsn.and_then(|l| PgLsn(l.0).into_datum()),
        texts.get(outcome).into_datum(),
        pid.and_then(|p: i32| p.into_datum()),
        gid.and_then(|g| g.into_datum()),
        (a.database != 0).then(|| pg_sys::Datum::from(a.database)),
        Some(pg_sys::Datum::from(a.subxacts as i32)),
        c(0),
        c(1),
        c(2),
        c(3),
        c(4),
        c(5),
        c(6),
        int8(a.wal_bytes),
        int8(a.queued_bytes),
        int8(a.total_bytes),
        texts.get(a.outcome.label()).into_datum(),
        int8(a.spill_count),
        int8(a.spill_bytes),
        a.spilled.into_datum(),
        int8(a.stream_count),
        int8(a.stream_bytes),
    ];
    let mut mask = 0u64;
    for (i, v) in values.into_iter().enumerate() {
        if slots.put(i, v) {
            mask |= 1 << i;
        }
    }
    slots.null_mask(mask);
    true
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
    let run = backlog::run(&slot, upto.map(|l| Lsn(l.0)), work_mem_kb, streaming, None);
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
