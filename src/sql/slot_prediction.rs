//! `snapbuild_slot_prediction(slot_name, upto_lsn)`: where the slot's catalog_xmin,
//! restart_lsn and candidates will stand after one more `pg_logical_slot_get_changes`.

use pgrx::prelude::*;
use snapbuild_core::replication::decode::{Replay, TwoPhaseDecoding};
use snapbuild_core::replication::logical::SlotModel;
use snapbuild_core::replication::snapbuild::RestoreResult;
use snapbuild_core::Lsn;

use crate::adapter::raise;
use crate::adapter::slots::find_slot;
use crate::adapter::snapfiles::{self, SnapFileError};
use crate::adapter::wal::{flush_lsn, WalReader};
use crate::sql::trace::params_for_slot;
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
/// Errors: as `snapbuild_trace`; `object_not_in_prerequisite_state` for a slot still
/// being created.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_slot_prediction(
    slot_name: PgName,
    upto_lsn: default!(Option<PgLsn>, "NULL"),
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
    let slot = find_slot(&slot_name.0);
    if !slot.logical || slot.in_creation() || slot.restart_lsn == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "replication slot \"{}\" is not a created logical slot",
                slot.name
            ),
        );
    }
    let params = params_for_slot(&slot);
    let version = params.major.snapbuild_version();
    let mut model = SlotModel {
        catalog_xmin: slot.catalog_xmin,
        effective_catalog_xmin: slot.effective_catalog_xmin,
        restart_lsn: Lsn(slot.restart_lsn),
        confirmed_flush: Lsn(slot.confirmed_flush),
        candidate_catalog_xmin: slot.candidate_catalog_xmin,
        candidate_xmin_lsn: Lsn(slot.candidate_xmin_lsn),
        candidate_restart_valid: Lsn(slot.candidate_restart_valid),
        candidate_restart_lsn: Lsn(slot.candidate_restart_lsn),
    };
    let current = model;
    let upto = upto_lsn.map(|l| Lsn(l.0));
    let mut replay = Replay::new(&params, slot.datoid);
    replay.two_phase = TwoPhaseDecoding::for_slot(slot.two_phase, &slot.plugin);
    let mut reader = WalReader::open(Lsn(slot.restart_lsn));
    let mut restore = |lsn: Lsn| -> RestoreResult {
        match snapfiles::read_snapshot(lsn, version) {
            Ok(f) => Ok(f),
            Err(SnapFileError::Corrupt { err, .. }) => Err(err),
            Err(e) => e.raise(),
        }
    };
    // pg_logical_slot_get_changes reads while the last record ended before the flush
    // position it saw at its start (waiting for a record that crosses it), and stops early
    // at the first record ending at or after upto_lsn.
    let end_of_wal = flush_lsn();
    let (mut last_end, mut records) = (Lsn(0), 0i64);
    let mut waited_ms = 0;
    loop {
        let Some(rec) = reader.next_record() else {
            // The no-wait reader stopped at the flushed end. The server's reader would wait
            // for the record that crosses end_of_wal: do the same, briefly.
            if last_end >= end_of_wal || upto.is_some_and(|u| u <= last_end) || waited_ms >= 10_000
            {
                break;
            }
            unsafe { pg_sys::pg_usleep(10_000) };
            waited_ms += 10;
            pgrx::check_for_interrupts!();
            if flush_lsn() > last_end {
                let from = if last_end.is_valid() {
                    Lsn(last_end.0.div_ceil(8) * 8)
                } else {
                    Lsn(slot.restart_lsn)
                };
                // The next record may still be only partly flushed: keep waiting then.
                if let Some(r) = WalReader::try_open(from) {
                    reader = r;
                }
            }
            continue;
        };
        records += 1;
        last_end = rec.head.end_lsn;
        match replay.feed(&rec.head, &rec.payload, &mut restore) {
            Ok(row) => {
                if let Some((lsn, xmin)) = row.candidate_xmin {
                    model.increase_xmin(lsn, xmin);
                }
                if let Some((lsn, restart)) = row.candidate_restart {
                    model.increase_restart(lsn, restart);
                }
            }
            Err(e) => raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                e.error.message(&snapfiles::path_for(e.row.lsn)),
            ),
        }
        if upto.is_some_and(|u| u <= last_end) || last_end >= end_of_wal {
            break;
        }
    }
    if last_end.is_valid() {
        model.confirm(last_end);
    }
    TableIterator::once((
        opt_lsn(last_end),
        records,
        opt_xid(current.catalog_xmin),
        opt_lsn(current.restart_lsn),
        opt_lsn(current.confirmed_flush),
        opt_xid(model.catalog_xmin),
        opt_lsn(model.restart_lsn),
        opt_lsn(model.confirmed_flush),
        opt_xid(model.candidate_catalog_xmin),
        opt_lsn(model.candidate_xmin_lsn),
        opt_lsn(model.candidate_restart_valid),
        opt_lsn(model.candidate_restart_lsn),
    ))
}
