//! `snapbuild_slot_prediction(slot_name, upto_lsn, by_advance)`: where the slot's
//! catalog_xmin, restart_lsn and candidates will stand after one more
//! `pg_logical_slot_get_changes` (or `pg_replication_slot_advance`).

use pgrx::prelude::*;
use snapbuild_core::Lsn;

use crate::adapter::raise;
use crate::adapter::wal::flush_lsn;
use crate::context::{self, DecodingContext};
use crate::sql::types::{PgLsn, PgName, Xid};

fn opt_xid(x: u32) -> Option<Xid> {
    (x != 0).then_some(Xid(x))
}
fn opt_lsn(l: Lsn) -> Option<PgLsn> {
    l.is_valid().then_some(PgLsn(l.0))
}

/// Predicts what `pg_logical_slot_get_changes(slot_name, upto_lsn, NULL)` would leave in
/// the slot: decoding from restart_lsn (replayed as in `snapbuild_trace`), the builder
/// proposes candidates at each RUNNING_XACTS (logical.c LogicalIncreaseXminForSlot /
/// LogicalIncreaseRestartDecodingForSlot), decoding stops at the first record ending at or
/// after `upto_lsn` or after the flush position seen at the start (as logicalfuncs.c
/// pg_logical_slot_get_changes_guts does, waiting up to 10 s for a record that crosses
/// it), and the end of that record is confirmed (LogicalConfirmReceivedLocation). One row: the slot now (`current_*`) and
/// predicted (`predicted_*`), the position decoded to, and records read.
///
/// With `by_advance` it predicts `pg_replication_slot_advance(slot_name, upto_lsn)` instead
/// (logical.c LogicalSlotAdvanceAndCheckSnapState, a fast-forward decoder: NEW_CID is not
/// processed and, up to 16, no transaction gets a base snapshot): the target is
/// `upto_lsn` capped at the flush position (the flush position when NULL), records are read
/// while the last one ends before the target (again waiting for one that crosses it), and
/// the target itself is confirmed, not the end of the last record read. The two differ
/// when the target falls inside a record (a flush position in the middle of a record that
/// crosses a page). On 14–16 the catalog_xmin columns of an advance prediction are NULL:
/// not predicted (see the README's known limits).
///
/// Errors: as `snapbuild_trace`; `object_not_in_prerequisite_state` for a slot still
/// being created; `null_value_not_allowed` (22004) for a NULL slot_name or by_advance.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_slot_prediction(
    slot_name: Option<PgName>,
    upto_lsn: default!(Option<PgLsn>, "NULL"),
    by_advance: default!(Option<bool>, false),
) -> TableIterator<
    'static,
    (
        name!(decoded_to, Option<PgLsn>),
        name!(records, i64),
        name!(current_catalog_xmin, Option<Xid>),
        name!(current_restart_lsn, Option<PgLsn>),
        name!(current_confirmed_flush, Option<PgLsn>),
        name!(predicted_catalog_xmin, Option<Xid>),
        name!(predicted_restart_lsn, Option<PgLsn>),
        name!(predicted_confirmed_flush, Option<PgLsn>),
        name!(predicted_candidate_catalog_xmin, Option<Xid>),
        name!(predicted_candidate_xmin_lsn, Option<PgLsn>),
        name!(predicted_candidate_restart_valid, Option<PgLsn>),
        name!(predicted_candidate_restart_lsn, Option<PgLsn>),
    ),
> {
    let Some(slot_name) = slot_name else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "slot_name must not be NULL",
        )
    };
    let Some(by_advance) = by_advance else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "by_advance must not be NULL",
        )
    };
    let slot = context::input::created_logical_slot(&slot_name.0);
    let mut model = slot.model();
    let current = model;
    let upto = upto_lsn.map(|l| Lsn(l.0));
    let mut input = context::input::for_slot_copy(slot, false);
    // pg_replication_slot_advance decodes in fast-forward mode (up to 16 changes then give
    // no base snapshot, which moves the catalog_xmin candidate)
    input.fast_forward = by_advance;
    let mut ctx = DecodingContext::start(input);
    // pg_logical_slot_get_changes reads while the last record ended before the flush
    // position it saw at its start (waiting for a record that crosses it), and stops early
    // at the first record ending at or after upto_lsn.
    let end_of_wal = flush_lsn();
    // pg_replication_slot_advance: the target, capped at the flush position; decoding goes
    // on while the last record ended before it.
    let moveto = by_advance.then(|| upto.map_or(end_of_wal, |u| u.min(end_of_wal)));
    let done = |last_end: Lsn| match moveto {
        Some(m) => last_end >= m,
        None => upto.is_some_and(|u| u <= last_end) || last_end >= end_of_wal,
    };
    let mut waited_ms = 0;
    loop {
        let Some(row) = ctx.next_row_or_raise(None) else {
            // The no-wait reader stopped at the flushed end. The server's reader would wait
            // for the record that crosses end_of_wal: do the same, briefly.
            let last_end = if ctx.records > 0 {
                ctx.last_end
            } else {
                Lsn(0)
            };
            if done(last_end) || waited_ms >= 10_000 {
                break;
            }
            let before = std::time::Instant::now();
            let more = ctx.wait_for_record(10_000 - waited_ms);
            waited_ms += before.elapsed().as_millis().max(10) as u64;
            if !more {
                break;
            }
            continue;
        };
        if let Some(row) = row {
            if let Some((lsn, xmin)) = row.candidate_xmin {
                model.increase_xmin(lsn, xmin);
            }
            if let Some((lsn, restart)) = row.candidate_restart {
                model.increase_restart(lsn, restart);
            }
        }
        if done(ctx.last_end) {
            break;
        }
    }
    let (last_end, records) = if ctx.records > 0 {
        (ctx.last_end, ctx.records as i64)
    } else {
        (Lsn(0), 0)
    };
    if last_end.is_valid() {
        // get_changes confirms the end of the last record read; advance, its target
        model.confirm(moveto.unwrap_or(last_end));
    }
    // Up to 16 a fast-forward decoder's catalog_xmin candidates are not predicted: the
    // random workload found them off in both directions there (they rest on base
    // snapshots that 14-16's fast-forward decoding handles otherwise); NULL, not a guess.
    let xmin_known =
        !by_advance || crate::adapter::server_version().fast_forward_builds_base_snapshots();
    TableIterator::once((
        opt_lsn(last_end),
        records,
        opt_xid(current.catalog_xmin),
        opt_lsn(current.restart_lsn),
        opt_lsn(current.confirmed_flush),
        opt_xid(model.catalog_xmin).filter(|_| xmin_known),
        opt_lsn(model.restart_lsn),
        opt_lsn(model.confirmed_flush),
        opt_xid(model.candidate_catalog_xmin).filter(|_| xmin_known),
        opt_lsn(model.candidate_xmin_lsn).filter(|_| xmin_known),
        opt_lsn(model.candidate_restart_valid),
        opt_lsn(model.candidate_restart_lsn),
    ))
}
