//! `snapbuild_trace(slot_name)`: replays the slot's snapshot builder over real WAL and
//! puts the server's verdict beside each step.

use pgrx::prelude::*;
use snapbuild_core::replay::{compare_with_server, Replay, TraceRow};
use snapbuild_core::snapbuild::RestoreResult;
use snapbuild_core::{BuilderParams, Lsn, SnapBuildState};

use crate::adapter::server_major;
use crate::adapter::slots::{find_slot, SlotCopy};
use crate::adapter::snapfiles::{self, SnapFileError};
use crate::adapter::wal::WalReader;
use crate::sql::types::{xids, PgLsn, PgName, Xid};

type Row = (
    PgLsn,
    Option<PgLsn>,
    String,
    Option<Xid>,
    Option<String>,
    Option<String>,
    String,
    Xid,
    Xid,
    Xid,
    PgLsn,
    Option<Vec<Xid>>,
    Option<Vec<Xid>>,
    Option<String>,
    Option<String>,
    Option<String>,
    Xid,
    bool,
    Option<String>,
    Option<String>,
    Option<bool>,
    Option<String>,
);

/// The server's verdict for one replayed step: (server_state, server_source, agrees,
/// disagreement).
type Verdict = (Option<String>, Option<String>, Option<bool>, Option<String>);

/// AllocateSnapshotBuilder's parameters as logical.c derives them from the slot: while
/// the slot is being created (CreateInitDecodingContext) its catalog_xmin is the
/// initial xmin horizon and in_slot_creation is set; once created
/// (CreateDecodingContext) decoding starts at confirmed_flush.
pub fn params_for_slot(slot: &SlotCopy) -> BuilderParams {
    let creating = slot.in_creation();
    BuilderParams {
        major: server_major(),
        initial_xmin_horizon: if creating { slot.catalog_xmin } else { 0 },
        start_decoding_at: Lsn(if creating { 0 } else { slot.confirmed_flush }),
        building_full_snapshot: false,
        in_slot_creation: creating,
        two_phase_at: Lsn(slot.two_phase_at),
    }
}

fn verdict(row: &TraceRow, slot: &SlotCopy, version: u32) -> Verdict {
    // A file the server wrote at this LSN.
    if let Some(pred) = &row.serialized {
        return match snapfiles::read_snapshot(row.lsn, version) {
            Ok(Some(file)) => {
                let diffs = compare_with_server(pred, &file);
                (
                    Some(crate::sql::snapshot_files::state_name(file.builder.state)),
                    Some(snapfiles::path_for(row.lsn)),
                    Some(diffs.is_empty()),
                    (!diffs.is_empty()).then(|| diffs.join("; ")),
                )
            }
            Ok(None) => (None, None, None, None),
            Err(e) => (
                None,
                Some(snapfiles::path_for(row.lsn)),
                Some(false),
                Some(e.text()),
            ),
        };
    }
    if let Some(at) = row.restored_from {
        return (
            Some("consistent".into()),
            Some(snapfiles::path_for(at)),
            Some(row.state == SnapBuildState::Consistent),
            None,
        );
    }
    // The record that made the builder consistent ends where a freshly created slot's
    // confirmed_flush_lsn points (DecodingContextFindStartpoint stores EndRecPtr).
    let became_consistent =
        row.state_before < SnapBuildState::Consistent && row.state == SnapBuildState::Consistent;
    if became_consistent && !slot.in_creation() {
        let cf = slot.confirmed_flush;
        if row.end_lsn.0 == cf {
            return (
                Some("consistent".into()),
                Some("slot confirmed_flush_lsn".into()),
                Some(true),
                None,
            );
        }
        if row.end_lsn.0 > cf {
            return (
                Some("consistent".into()),
                Some("slot confirmed_flush_lsn".into()),
                Some(false),
                Some(format!(
                    "the server was consistent by {} but the replay only at {}",
                    Lsn(cf),
                    row.end_lsn
                )),
            );
        }
    }
    (None, None, None, None)
}

fn to_row(r: &TraceRow, p: &BuilderParams, v: Verdict) -> Row {
    (
        r.lsn.into(),
        Some(r.end_lsn.into()),
        r.record.to_owned(),
        r.xid.map(Xid),
        r.branch.map(str::to_owned),
        Some(r.state_before.as_str().to_owned()),
        r.state.as_str().to_owned(),
        Xid(r.xmin),
        Xid(r.xmax),
        Xid(r.next_phase_at),
        r.start_decoding_at.into(),
        r.running_xids.as_deref().map(xids),
        r.wait_xids.as_deref().map(xids),
        r.level.map(str::to_owned),
        r.message.clone(),
        r.detail.clone(),
        Xid(p.initial_xmin_horizon),
        p.in_slot_creation,
        v.0,
        v.1,
        v.2,
        v.3,
    )
}

/// Re-runs, in Rust, what the server's snapshot builder does for `slot_name` with the
/// WAL from the slot's restart_lsn to the end of flushed WAL (snapbuild.c
/// SnapBuildProcessRunningXacts / SnapBuildFindSnapshot / SnapBuildSerialize /
/// SnapBuildCommitTxn, fed as decode.c dispatches records).
///
/// Rows: a first `REPLAY START` row with the starting parameters, then one per
/// RUNNING_XACTS, shutdown checkpoint or end-of-recovery record, and one per commit that
/// became timetravel-tracked. `message`/`detail` are the texts the server logs on that
/// branch. `server_state`/`server_source`/`agrees` compare with what the server left
/// behind: the `.snap` file written at that LSN, or the slot's confirmed_flush_lsn for
/// the record that made the builder consistent.
///
/// Errors: `undefined_object` (no such slot), `object_not_in_prerequisite_state`
/// (physical slot, or no restart_lsn); WAL read errors as the server raises them.
#[pg_extern(strict)]
#[allow(clippy::type_complexity)]
fn snapbuild_trace(
    slot_name: PgName,
) -> TableIterator<
    'static,
    (
        name!(lsn, PgLsn),
        name!(end_lsn, Option<PgLsn>),
        name!(record, String),
        name!(xid, Option<Xid>),
        name!(branch, Option<String>),
        name!(state_before, Option<String>),
        name!(state, String),
        name!(xmin, Xid),
        name!(xmax, Xid),
        name!(next_phase_at, Xid),
        name!(start_decoding_at, PgLsn),
        name!(running_xids, Option<Vec<Xid>>),
        name!(wait_xids, Option<Vec<Xid>>),
        name!(level, Option<String>),
        name!(message, Option<String>),
        name!(detail, Option<String>),
        name!(initial_xmin_horizon, Xid),
        name!(in_slot_creation, bool),
        name!(server_state, Option<String>),
        name!(server_source, Option<String>),
        name!(agrees, Option<bool>),
        name!(disagreement, Option<String>),
    ),
> {
    let slot = find_slot(&slot_name.0);
    if !slot.logical {
        crate::adapter::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("replication slot \"{}\" is not a logical slot", slot.name),
        );
    }
    if slot.restart_lsn == 0 {
        crate::adapter::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("replication slot \"{}\" has no restart_lsn", slot.name),
        );
    }
    let params = params_for_slot(&slot);
    let version = params.major.snapbuild_version();
    let mut rows: Vec<Row> = Vec::new();
    rows.push((
        PgLsn(slot.restart_lsn),
        None,
        "REPLAY START".to_owned(),
        None,
        None,
        None,
        SnapBuildState::Start.as_str().to_owned(),
        Xid(0),
        Xid(0),
        Xid(0),
        params.start_decoding_at.into(),
        None,
        None,
        None,
        Some(format!(
            "replaying slot \"{}\" from restart_lsn {} as {} decoding would (PostgreSQL {} rules)",
            slot.name,
            Lsn(slot.restart_lsn),
            if params.in_slot_creation {
                "slot creation"
            } else {
                "restarted"
            },
            params.major.0
        )),
        None,
        Xid(params.initial_xmin_horizon),
        params.in_slot_creation,
        None,
        None,
        None,
        None,
    ));
    let mut replay = Replay::new(&params);
    let mut reader = WalReader::open(Lsn(slot.restart_lsn));
    let mut restore = |lsn: Lsn| -> RestoreResult {
        match snapfiles::read_snapshot(lsn, version) {
            Ok(f) => Ok(f),
            Err(SnapFileError::Corrupt { err, .. }) => Err(err),
            Err(e) => e.raise(),
        }
    };
    while let Some(rec) = reader.next_record() {
        match replay.feed(&rec.head, &rec.payload, &mut restore) {
            Ok(Some(row)) => {
                let v = verdict(&row, &slot, version);
                rows.push(to_row(&row, &params, v));
            }
            Ok(None) => {}
            Err(e) => {
                // The server raises this ERROR here and decoding stops; so does the replay.
                let mut row = to_row(&e.row, &params, (None, None, None, None));
                row.13 = Some("ERROR".into());
                row.14 = Some(e.error.message(&snapfiles::path_for(e.row.lsn)));
                rows.push(row);
                break;
            }
        }
    }
    TableIterator::new(rows)
}
