//! What a replay runs over: the slot or LSN range, AllocateSnapshotBuilder's parameters
//! and the server facts the verdicts compare with. Arguments are validated here, once,
//! after logical.c's CheckLogicalDecodingRequirements rule on recovery
//! ([`check_decoding_possible`]).

use pgrx::prelude::*;
use snapbuild_core::replication::decode::TwoPhaseDecoding;
use snapbuild_core::{BuilderParams, Lsn};

use crate::adapter::slots::{find_slot, SlotCopy};
use crate::adapter::wal::{flush_lsn, in_recovery};
use crate::adapter::{raise, server_version};

/// What to replay and against which server facts.
pub struct ReplayInput {
    pub params: BuilderParams,
    /// The decoding slot's database (DecodeTXNNeedSkip, logical messages).
    pub slot_db: u32,
    /// Where reading starts (the first valid record at or after it).
    pub start: Lsn,
    /// Stop after the record ending at or before this LSN (None: end of flushed WAL).
    pub end: Option<Lsn>,
    /// The slot, when replaying one (its confirmed_flush is a server verdict).
    pub slot: Option<SlotCopy>,
    /// How prepared transactions are decoded (the slot's `two_phase` and plugin).
    pub two_phase: TwoPhaseDecoding,
    /// One row per record read, not only the rows the default trace shows.
    pub all_records: bool,
    /// Decode as `pg_replication_slot_advance` does (logical.c `fast_forward`).
    pub fast_forward: bool,
    /// Text of the first (`REPLAY START`) row.
    pub label: String,
}

/// The logical slot `slot_name`, created (not being created) and with a restart_lsn: what
/// a decoder can be started for.
///
/// Errors: `undefined_object` (42704) for no such slot; `object_not_in_prerequisite_state`
/// (55000) for a physical slot, one being created or without restart_lsn.
pub fn created_logical_slot(slot_name: &str) -> SlotCopy {
    let slot = find_slot(slot_name);
    if !slot.logical || slot.in_creation() || slot.restart_lsn == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "replication slot \"{}\" is not a created logical slot",
                slot.name
            ),
        );
    }
    slot
}

/// AllocateSnapshotBuilder's parameters as logical.c derives them from the slot: while
/// the slot is being created (CreateInitDecodingContext) its catalog_xmin is the
/// initial xmin horizon and in_slot_creation is set; once created
/// (CreateDecodingContext) decoding starts at confirmed_flush. `need_full_snapshot`
/// cannot be read from shared memory and is taken as false (as for the SQL functions).
pub fn params_for_slot(slot: &SlotCopy) -> BuilderParams {
    let creating = slot.in_creation();
    BuilderParams {
        version: server_version(),
        initial_xmin_horizon: if creating { slot.catalog_xmin } else { 0 },
        start_decoding_at: Lsn(if creating { 0 } else { slot.confirmed_flush }),
        building_full_snapshot: false,
        in_slot_creation: creating,
        two_phase_at: Lsn(slot.two_phase_at),
    }
}

/// The replay of logical slot `slot_name` from its restart_lsn, as a decoder created for
/// it now would run (logical.c CreateDecodingContext, or CreateInitDecodingContext while
/// the slot is still being created).
///
/// Errors: `undefined_object` (42704) for no such slot; `object_not_in_prerequisite_state`
/// (55000) for a physical slot or one without restart_lsn.
pub fn for_slot(slot_name: &str, all_records: bool) -> ReplayInput {
    for_slot_copy(find_slot(slot_name), all_records)
}

/// [`for_slot`] for a slot already copied out of shared memory.
///
/// Errors: `object_not_in_prerequisite_state` (55000) for a physical slot or one without
/// restart_lsn; `feature_not_supported` (0A000) on a standby of PostgreSQL 14 or 15 (no
/// decoding in recovery there).
pub fn for_slot_copy(slot: SlotCopy, all_records: bool) -> ReplayInput {
    check_decoding_possible("replaying a slot");
    if !slot.logical {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("replication slot \"{}\" is not a logical slot", slot.name),
        );
    }
    if slot.restart_lsn == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("replication slot \"{}\" has no restart_lsn", slot.name),
        );
    }
    let params = params_for_slot(&slot);
    let label = format!(
        "replaying slot \"{}\" from restart_lsn {} as {} decoding would (PostgreSQL {} rules)",
        slot.name,
        Lsn(slot.restart_lsn),
        if params.in_slot_creation {
            "slot creation"
        } else {
            "restarted"
        },
        params.version.major
    );
    let label = match synced_note(&slot) {
        Some(note) => format!("{label}; {note}"),
        None => label,
    };
    let label = match &slot.invalidation_reason {
        Some(reason) => format!(
            "{label}; the slot is invalidated ({reason}): the server decodes nothing from it any more, the rows are what a decoder would have done"
        ),
        None => label,
    };
    ReplayInput {
        slot_db: slot.datoid,
        start: Lsn(slot.restart_lsn),
        end: None,
        params,
        two_phase: TwoPhaseDecoding::for_slot(slot.two_phase, &slot.plugin),
        slot: Some(slot),
        all_records,
        fast_forward: false,
        label,
    }
}

/// What a copy synced from the primary's failover slot is (17+, slotsync.c), for the
/// `REPLAY START` row: persistent (sync-ready), or kept temporary and why. slotsync.c
/// update_local_synced_slot leaves a new copy's confirmed_flush invalid while the remote
/// slot's restart_lsn or catalog_xmin is behind what the standby reserved for it (it logs
/// `could not synchronize replication slot` with both positions); once the remote has
/// passed them it advances the copy to the remote's confirmed_flush with a fast-forward
/// decoder (LogicalSlotAdvanceAndCheckSnapState) and persists it only when that
/// decoder's builder was consistent there (update_and_persist_local_synced_slot).
pub fn synced_note(slot: &SlotCopy) -> Option<String> {
    if !slot.synced {
        return None;
    }
    Some(match (slot.persistency, slot.confirmed_flush) {
        ("persistent", _) => {
            "a copy synced from the primary's failover slot, persistent (sync-ready)".into()
        }
        (_, 0) => format!(
            "a copy synced from the primary's failover slot, kept {}: the slot synchronization has not advanced it yet: the remote slot's restart_lsn or catalog_xmin is behind what this standby reserved for it (restart_lsn {}, catalog_xmin {}; the standby then logs \"could not synchronize replication slot\" with both), or the remote confirmed_flush is past the WAL flushed here, or the synchronization's decoder is still on its way there (a temporary copy stays owned by the synchronizing process)",
            slot.persistency,
            Lsn(slot.restart_lsn),
            slot.catalog_xmin
        ),
        (_, confirmed) => format!(
            "a copy synced from the primary's failover slot, kept {}: the standby's fast-forward decoder, run from restart_lsn to the remote confirmed_flush {}, found no consistent snapshot there (the rows show where the builder stands; it is persisted at the first synchronization whose decoder is consistent before the remote confirmed_flush)",
            slot.persistency,
            Lsn(confirmed)
        ),
    })
}

/// Checks a WAL range the way pg_walinspect's ValidateInputLSNs does, with this
/// project's SQLSTATEs, and returns `(start, end)`.
///
/// Errors: `null_value_not_allowed` (22004) for a NULL start; `invalid_parameter_value`
/// (22023) for start 0/0, a start past the end of flushed WAL (on a standby: of replayed
/// WAL), or an end before the start.
pub fn validate_input_lsns(start: Option<u64>, end: Option<u64>) -> (Lsn, Option<Lsn>) {
    let Some(start) = start else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "start_lsn must not be NULL",
        )
    };
    if start == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "start_lsn 0/0 is not a WAL position",
        );
    }
    let flushed = flush_lsn();
    if start > flushed.0 {
        let what = match crate::adapter::activity::standby_note() {
            Some(note) => format!("replayed WAL ({flushed}); {note}"),
            None => format!("flushed WAL ({flushed})"),
        };
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("start_lsn {} is past the end of {what}", Lsn(start)),
        );
    }
    if let Some(end) = end.filter(|e| *e < start) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("end_lsn {} is before start_lsn {}", Lsn(end), Lsn(start)),
        );
    }
    (Lsn(start), end.map(Lsn))
}

/// Whether this node can run a logical decoder (logical.c CheckLogicalDecodingRequirements
/// in recovery): not a standby of PostgreSQL 14 or 15.
pub fn decoding_possible() -> bool {
    server_version().major >= 16 || !in_recovery()
}

/// ERROR `feature_not_supported` (0A000, the SQLSTATE logical.c
/// CheckLogicalDecodingRequirements raises for "logical decoding cannot be used while in
/// recovery" before 16) on a standby of PostgreSQL 14 or 15, which cannot decode in
/// recovery: a replay there would describe a decoder the server can never run. `what`
/// names the function's subject.
pub fn check_decoding_possible(what: &str) {
    if !decoding_possible() {
        let v = server_version();
        crate::adapter::raise_with_detail(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "logical decoding on a standby needs PostgreSQL 16 or later",
            format!(
                "This server (PostgreSQL {}) is in recovery; {what} replays a logical decoder, which PostgreSQL {} cannot run on a standby. Run it on the primary.",
                v.major, v.major
            ),
        );
    }
}

/// The what-if arguments of `snapbuild_trace_range` (AllocateSnapshotBuilder's
/// parameters given explicitly; LSNs as raw `XLogRecPtr`, xids as raw 32-bit values).
pub struct RangeArgs {
    pub start_lsn: Option<u64>,
    pub end_lsn: Option<u64>,
    pub initial_xmin_horizon: Option<u32>,
    pub in_slot_creation: bool,
    pub building_full_snapshot: bool,
    pub start_decoding_at: Option<u64>,
    pub all_records: bool,
    pub two_phase: bool,
}

/// The replay of an LSN range without a slot, decoding for the current database.
///
/// Errors: as [`validate_input_lsns`]; `feature_not_supported` (0A000) on a standby of
/// PostgreSQL 14 or 15 (no decoding in recovery there).
pub fn for_range(a: RangeArgs) -> ReplayInput {
    check_decoding_possible("snapbuild_trace_range");
    let (start, end) = validate_input_lsns(a.start_lsn, a.end_lsn);
    let params = BuilderParams {
        version: server_version(),
        initial_xmin_horizon: a.initial_xmin_horizon.unwrap_or(0),
        start_decoding_at: Lsn(a.start_decoding_at.unwrap_or(0)),
        building_full_snapshot: a.building_full_snapshot,
        in_slot_creation: a.in_slot_creation,
        // A two-phase slot's two_phase_at is its consistent point (confirmed_flush); while
        // it is being created the builder has none yet.
        two_phase_at: Lsn(match (a.two_phase, a.in_slot_creation) {
            (true, false) => a.start_decoding_at.unwrap_or(0),
            _ => 0,
        }),
    };
    ReplayInput {
        slot_db: unsafe { pg_sys::MyDatabaseId.to_u32() },
        start,
        end,
        label: format!(
            "replaying from {start} with explicit parameters (PostgreSQL {} rules)",
            params.version.major
        ),
        params,
        slot: None,
        // The plugin is unknown: no filter_prepare.
        two_phase: TwoPhaseDecoding {
            enabled: a.two_phase,
            filter_gid_containing: None,
        },
        all_records: a.all_records,
        fast_forward: false,
    }
}
