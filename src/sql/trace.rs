//! `snapbuild_trace`, `snapbuild_trace_range` and `snapbuild_trace_json`: replay the
//! snapshot builder over real WAL and put the server's verdict beside each step.

use pgrx::prelude::*;
use snapbuild_core::compare::{bytes_with_writer_fields, compare_with_server};
use snapbuild_core::include::snapbuild::BuiltSnapshot;
use snapbuild_core::replication::decode::{Replay, TraceRow, TwoPhaseDecoding};
use snapbuild_core::replication::snapbuild::{CommitVerdict, RestoreResult};
use snapbuild_core::{BuilderParams, Lsn, SnapBuildState};

use crate::adapter::slots::{find_slot, SlotCopy};
use crate::adapter::snapfiles::{self, SnapFileError};
use crate::adapter::wal::WalReader;
use crate::adapter::{raise, server_major};
use crate::sql::types::{xids, PgLsn, PgName, Xid};

/// The server's verdict beside one replayed step.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Verdict {
    /// The state the server recorded (`start|building|full|consistent`).
    pub server_state: Option<String>,
    /// Where it was read: a `.snap` path, or `slot confirmed_flush_lsn`.
    pub server_source: Option<String>,
    pub agrees: Option<bool>,
    pub disagreement: Option<String>,
    /// Serialize rows with a server file: the replay's bytes (writer-dependent fields
    /// taken from the file) equal the file's bytes.
    pub bytes_agree: Option<bool>,
}

/// A trace row with its verdict and the starting parameters, as both the SQL and the
/// JSON forms show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Traced {
    #[serde(flatten)]
    pub row: TraceRow,
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// What to replay and against which server facts.
pub struct TraceInput {
    pub params: BuilderParams,
    /// The decoding slot's database (DecodeTXNNeedSkip).
    pub slot_db: u32,
    pub start: Lsn,
    /// Stop after the record ending at or before this LSN (None: end of flushed WAL).
    pub end: Option<Lsn>,
    /// The slot, when tracing one (its confirmed_flush is a server verdict).
    pub slot: Option<SlotCopy>,
    /// How prepared transactions are decoded (the slot's `two_phase` and plugin).
    pub two_phase: TwoPhaseDecoding,
    pub all_records: bool,
    /// Text of the first row.
    pub label: String,
}

/// AllocateSnapshotBuilder's parameters as logical.c derives them from the slot: while
/// the slot is being created (CreateInitDecodingContext) its catalog_xmin is the
/// initial xmin horizon and in_slot_creation is set; once created
/// (CreateDecodingContext) decoding starts at confirmed_flush. `need_full_snapshot`
/// cannot be read from shared memory and is taken as false (as for the SQL functions).
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

fn verdict(row: &TraceRow, slot: Option<&SlotCopy>, version: u32) -> Verdict {
    // A file the server wrote at this LSN.
    if let Some(pred) = &row.serialized {
        return match snapfiles::read_snapshot(row.lsn, version) {
            Ok(Some(file)) => {
                let cmp = compare_with_server(pred, &file, row.serialize_context);
                let mut text: Vec<String> = cmp.differences.clone();
                text.extend(
                    cmp.writer_dependent
                        .iter()
                        .map(|d| format!("writer-dependent: {d}")),
                );
                let raw = std::fs::read(snapfiles::path_for(row.lsn)).ok();
                let ours = bytes_with_writer_fields(pred, &file, &cmp);
                Verdict {
                    server_state: Some(crate::sql::snapshot_files::state_name(file.builder.state)),
                    server_source: Some(snapfiles::path_for(row.lsn)),
                    agrees: Some(cmp.agrees()),
                    disagreement: (!text.is_empty()).then(|| text.join("; ")),
                    bytes_agree: raw.zip(ours).map(|(raw, ours)| raw == ours),
                }
            }
            Ok(None) => Verdict::default(),
            Err(e) => Verdict {
                server_state: None,
                server_source: Some(snapfiles::path_for(row.lsn)),
                agrees: Some(false),
                disagreement: Some(e.text()),
                bytes_agree: None,
            },
        };
    }
    if let Some(at) = row.restored_from {
        return Verdict {
            server_state: Some("consistent".into()),
            server_source: Some(snapfiles::path_for(at)),
            agrees: Some(row.state == SnapBuildState::Consistent),
            disagreement: None,
            bytes_agree: None,
        };
    }
    // The record that made the builder consistent ends where a freshly created slot's
    // confirmed_flush_lsn points (DecodingContextFindStartpoint stores EndRecPtr).
    let became_consistent =
        row.state_before < SnapBuildState::Consistent && row.state == SnapBuildState::Consistent;
    if let Some(slot) = slot.filter(|s| became_consistent && !s.in_creation()) {
        let cf = slot.confirmed_flush;
        let source = Some("slot confirmed_flush_lsn".to_owned());
        if row.end_lsn.0 == cf {
            return Verdict {
                server_state: Some("consistent".into()),
                server_source: source,
                agrees: Some(true),
                disagreement: None,
                bytes_agree: None,
            };
        }
        // Later restarts begin at restart_lsn and may become consistent anywhere up to
        // or past confirmed_flush (changes before it are skipped): no verdict then.
    }
    Verdict::default()
}

/// The replay described by a [`TraceInput`], run lazily over local WAL: each `next()`
/// reads records until one yields a row, so a trace holds the builder's state and one
/// record at a time, never the WAL it has passed (the set-returning functions stream it
/// row by row).
pub struct TraceIter {
    input: TraceInput,
    version: u32,
    replay: Replay,
    reader: WalReader,
    /// The memory context the reader was allocated in (the SRF's multi-call context):
    /// every read runs in it, since the per-call context is reset between rows.
    mcx: pg_sys::MemoryContext,
    start_row: Option<Traced>,
    done: bool,
}

/// Starts the replay described by `input`.
///
/// Errors: `undefined_file` when WAL at the start has been removed; WAL read errors as
/// the server raises them. A broken `.snap` file met on branch b ends the replay with an
/// `ERROR` row (the server would fail there too).
pub fn run_trace(input: TraceInput) -> TraceIter {
    let p = &input.params;
    let version = p.major.snapbuild_version();
    check_wal_available(input.start);
    let mut start_row = Replay::new(p, input.slot_db).builder_row_at(input.start);
    start_row.record = "REPLAY START".into();
    start_row.message = Some(input.label.clone());
    start_row.interesting = true;
    let mut replay = Replay::new(p, input.slot_db);
    replay.two_phase = input.two_phase.clone();
    let mut reader = WalReader::open(input.start);
    reader.with_names = input.all_records;
    TraceIter {
        version,
        replay,
        reader,
        mcx: unsafe { pg_sys::CurrentMemoryContext },
        start_row: Some(Traced {
            row: start_row,
            verdict: Verdict::default(),
        }),
        done: false,
        input,
    }
}

impl TraceIter {
    fn step(&mut self) -> Option<Traced> {
        let version = self.version;
        let mut restore = |lsn: Lsn| -> RestoreResult {
            match snapfiles::read_snapshot(lsn, version) {
                Ok(f) => Ok(f),
                Err(SnapFileError::Corrupt { err, .. }) => Err(err),
                Err(e) => e.raise(),
            }
        };
        while let Some(rec) = self.reader.next_record() {
            if self.input.end.is_some_and(|end| rec.head.end_lsn > end) {
                break;
            }
            match self.replay.feed(&rec.head, &rec.payload, &mut restore) {
                Ok(row) => {
                    if row.interesting || self.input.all_records {
                        let verdict = verdict(&row, self.input.slot.as_ref(), version);
                        return Some(Traced { row, verdict });
                    }
                }
                Err(e) => {
                    let mut row = e.row;
                    row.level = Some("ERROR");
                    row.message = Some(e.error.message(&snapfiles::path_for(row.lsn)));
                    row.detail = None;
                    self.done = true;
                    return Some(Traced {
                        row,
                        verdict: Verdict::default(),
                    });
                }
            }
        }
        self.done = true;
        None
    }
}

impl Iterator for TraceIter {
    type Item = Traced;

    fn next(&mut self) -> Option<Traced> {
        if let Some(r) = self.start_row.take() {
            return Some(r);
        }
        if self.done {
            return None;
        }
        let mcx = self.mcx;
        unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| self.step()) }
    }
}

/// A replay run over all flushed WAL, with the builder's snapshot taken at one point.
pub struct Captured {
    /// The builder's historic snapshot at the capture point (SnapBuildBuildSnapshot's, as
    /// `builder->snapshot` holds it), or the builder's state when it had none yet.
    pub base: Result<BuiltSnapshot, SnapBuildState>,
    /// The builder's state at the capture point.
    pub state: SnapBuildState,
    /// The end of the last record fed before the capture (the start LSN when none was).
    pub at: Lsn,
    /// The start of that record.
    pub last_record: Option<Lsn>,
    /// The last `.snap` file adopted before the capture (branch b or a serialization
    /// point), if any.
    pub restored_from: Option<Lsn>,
    /// The replay after all flushed WAL: the reorder buffer as it ends up.
    pub replay: Replay,
}

/// [`Captured`] without the replay.
struct Captured0 {
    base: Result<BuiltSnapshot, SnapBuildState>,
    state: SnapBuildState,
    at: Lsn,
    last_record: Option<Lsn>,
    restored_from: Option<Lsn>,
}

/// Runs the replay of `input` over all flushed WAL and takes the builder's snapshot once
/// the next record would end after `capture_at` (at the end when it is `None` or beyond).
///
/// Errors: as [`run_trace`]; a broken `.snap` file met on branch b is the server's
/// `data_corrupted` ERROR here (the server's decoder would fail there too).
pub fn replay_capturing(
    input: &TraceInput,
    capture_at: Option<Lsn>,
    remember: Option<u32>,
) -> Captured {
    let p = &input.params;
    let version = p.major.snapbuild_version();
    check_wal_available(input.start);
    let mut replay = Replay::new(p, input.slot_db);
    replay.two_phase = input.two_phase.clone();
    replay.builder.reorder.remember = remember;
    let mut at = input.start;
    let mut last_record = None;
    let mut restored_from = None;
    let mut captured: Option<Captured0> = None;
    let mut reader = WalReader::open(input.start);
    let mut restore = |lsn: Lsn| -> RestoreResult {
        match snapfiles::read_snapshot(lsn, version) {
            Ok(f) => Ok(f),
            Err(SnapFileError::Corrupt { err, .. }) => Err(err),
            Err(e) => e.raise(),
        }
    };
    while let Some(rec) = reader.next_record() {
        if input.end.is_some_and(|e| rec.head.end_lsn > e) {
            break;
        }
        if captured.is_none() && capture_at.is_some_and(|c| rec.head.end_lsn > c) {
            captured = Some(Captured0 {
                base: replay.builder.historic_snapshot(),
                state: replay.builder.state,
                at,
                last_record,
                restored_from,
            });
        }
        match replay.feed(&rec.head, &rec.payload, &mut restore) {
            Ok(row) => {
                if row.restored_from.is_some() {
                    restored_from = row.restored_from;
                }
            }
            Err(e) => raise(
                PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
                e.error.message(&snapfiles::path_for(e.row.lsn)),
            ),
        }
        at = rec.head.end_lsn;
        last_record = Some(rec.head.lsn);
    }
    let c = captured.unwrap_or(Captured0 {
        base: replay.builder.historic_snapshot(),
        state: replay.builder.state,
        at,
        last_record,
        restored_from,
    });
    Captured {
        base: c.base,
        state: c.state,
        at: c.at,
        last_record: c.last_record,
        restored_from: c.restored_from,
        replay,
    }
}

/// ERROR `undefined_file` naming `start` if its WAL segment was already removed.
fn check_wal_available(start: Lsn) {
    unsafe {
        let seg_size = pg_sys::wal_segment_size as u64;
        if seg_size == 0 {
            return;
        }
        let last_removed = pg_sys::XLogGetLastRemovedSegno();
        if start.0 / seg_size <= last_removed {
            raise(
                PgSqlErrorCode::ERRCODE_UNDEFINED_FILE,
                format!("WAL at {start} has already been removed"),
            );
        }
    }
}

type Row = (
    (
        PgLsn,
        Option<PgLsn>,
        String,
        Option<Xid>,
        Option<String>,
        Option<String>,
        String,
    ),
    (Xid, Xid, Xid, PgLsn, Option<Vec<Xid>>, Option<Vec<Xid>>),
    (Option<String>, Option<String>, Option<String>),
    (
        Option<String>,
        Option<bool>,
        Option<bool>,
        Option<Xid>,
        Option<PgLsn>,
    ),
    (Xid, bool),
    (
        Option<String>,
        Option<String>,
        Option<bool>,
        Option<String>,
        Option<bool>,
    ),
    (Option<Xid>, Option<Xid>, Option<Vec<Xid>>, Option<Vec<Xid>>),
);

fn flatten(t: &Traced, p: &BuilderParams) -> Row {
    let r = &t.row;
    let is_start = r.record == "REPLAY START";
    let timetravel = r
        .commit
        .as_ref()
        .map(|c| matches!(c, CommitVerdict::Timetravel { .. }));
    (
        (
            r.lsn.into(),
            (!is_start).then(|| r.end_lsn.into()),
            r.record.clone(),
            r.xid.map(Xid),
            r.branch.map(str::to_owned),
            (!is_start).then(|| r.state_before.as_str().to_owned()),
            r.state.as_str().to_owned(),
        ),
        (
            Xid(r.xmin),
            Xid(r.xmax),
            Xid(r.next_phase_at),
            r.start_decoding_at.into(),
            r.running_xids.as_deref().map(xids),
            r.wait_xids.as_deref().map(xids),
        ),
        (
            r.level.map(str::to_owned),
            r.message.clone(),
            r.detail.clone(),
        ),
        (
            r.decode.map(|d| d.label().to_owned()),
            r.decode.map(|d| d.decoded()),
            timetravel,
            r.candidate_xmin.map(|c| Xid(c.1)),
            r.candidate_restart.map(|c| c.1.into()),
        ),
        (Xid(p.initial_xmin_horizon), p.in_slot_creation),
        (
            t.verdict.server_state.clone(),
            t.verdict.server_source.clone(),
            t.verdict.agrees,
            t.verdict.disagreement.clone().or_else(|| r.note.clone()),
            t.verdict.bytes_agree,
        ),
        match &r.serialized {
            Some(f) => (
                Some(Xid(f.builder.xmin)),
                Some(Xid(f.builder.xmax)),
                Some(xids(&f.committed_xip)),
                Some(xids(&f.catchange_xip)),
            ),
            None => (None, None, None, None),
        },
    )
}

/// The column types of the trace functions (each `#[pg_extern]` spells out the names,
/// which its macro needs literally; keep the three signatures in step with this).
type Columns = (
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
    Option<String>,
    Option<bool>,
    Option<bool>,
    Option<Xid>,
    Option<PgLsn>,
    Xid,
    bool,
    Option<String>,
    Option<String>,
    Option<bool>,
    Option<String>,
    Option<bool>,
    Option<Xid>,
    Option<Xid>,
    Option<Vec<Xid>>,
    Option<Vec<Xid>>,
);

fn to_table(rows: TraceIter) -> TableIterator<'static, Columns> {
    let p = rows.input.params.clone();
    TableIterator::new(rows.map(move |t| {
        let (a, b, c, d, e, f, g) = flatten(&t, &p);
        (
            a.0, a.1, a.2, a.3, a.4, a.5, a.6, b.0, b.1, b.2, b.3, b.4, b.5, c.0, c.1, c.2, d.0,
            d.1, d.2, d.3, d.4, e.0, e.1, f.0, f.1, f.2, f.3, f.4, g.0, g.1, g.2, g.3,
        )
    }))
}

pub(crate) fn slot_input(slot_name: &str, all_records: bool) -> TraceInput {
    let slot = find_slot(slot_name);
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
        params.major.0
    );
    TraceInput {
        slot_db: slot.datoid,
        start: Lsn(slot.restart_lsn),
        end: None,
        params,
        two_phase: TwoPhaseDecoding::for_slot(slot.two_phase, &slot.plugin),
        slot: Some(slot),
        all_records,
        label,
    }
}

/// Re-runs, in Rust, what the server's snapshot builder does for `slot_name` with the
/// WAL from the slot's restart_lsn to the end of flushed WAL (snapbuild.c
/// SnapBuildProcessRunningXacts / SnapBuildFindSnapshot / SnapBuildSerialize /
/// SnapBuildCommitTxn, fed as decode.c LogicalDecodingProcessRecord dispatches records).
///
/// Rows: a first `REPLAY START` row with the starting parameters; then, by default, one
/// per RUNNING_XACTS, shutdown checkpoint or end-of-recovery record, one per commit seen
/// once the builder is FULL (with `verdict`: decoded or why skipped, and `timetravel`),
/// and any record that changed the builder's state or tracked sets; with `all_records`
/// one row per record read. `message`/`detail` are the texts the server logs on that
/// branch; `candidate_*` what the builder asks the slot to advance to. State columns
/// (`state`, `xmin`, `xmax`, …) describe the builder after the record; on serialize rows
/// `serialized_*` give what SnapBuildSerialize wrote, which is taken before the record
/// moves xmin (the `.snap` file at that LSN holds these).
/// `server_state`/`server_source`/`agrees` compare with what the server left behind: the
/// `.snap` file written at that LSN, or the slot's confirmed_flush_lsn for the record that
/// made the builder consistent.
///
/// Errors: `undefined_object` (no such slot), `object_not_in_prerequisite_state`
/// (physical slot, or no restart_lsn), `undefined_file` (WAL already removed).
#[pg_extern(strict)]
fn snapbuild_trace(
    slot_name: PgName,
    all_records: default!(bool, false),
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
        name!(verdict, Option<String>),
        name!(decoded, Option<bool>),
        name!(timetravel, Option<bool>),
        name!(candidate_catalog_xmin, Option<Xid>),
        name!(candidate_restart_lsn, Option<PgLsn>),
        name!(initial_xmin_horizon, Xid),
        name!(in_slot_creation, bool),
        name!(server_state, Option<String>),
        name!(server_source, Option<String>),
        name!(agrees, Option<bool>),
        name!(disagreement, Option<String>),
        name!(bytes_agree, Option<bool>),
        name!(serialized_xmin, Option<Xid>),
        name!(serialized_xmax, Option<Xid>),
        name!(serialized_committed_xip, Option<Vec<Xid>>),
        name!(serialized_catchange_xip, Option<Vec<Xid>>),
    ),
> {
    to_table(run_trace(slot_input(&slot_name.0, all_records)))
}

/// The same replay as `snapbuild_trace`, as one JSON array (serde_json) for tools.
#[pg_extern(strict)]
fn snapbuild_trace_json(slot_name: PgName, all_records: default!(bool, false)) -> pgrx::Json {
    let rows: Vec<Traced> = run_trace(slot_input(&slot_name.0, all_records)).collect();
    pgrx::Json(serde_json::to_value(&rows).unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("could not serialize trace: {e}"),
        )
    }))
}

/// "What if a slot were created here?": the replay of `snapbuild_trace` without a slot,
/// from the first record at or after `start_lsn` to `end_lsn` (default: end of flushed
/// WAL), with AllocateSnapshotBuilder's parameters given explicitly. Decoding is for the
/// current database. Verdicts come from `.snap` files only. `two_phase` decodes as a slot
/// created with `twophase` (its `two_phase_at` = `start_decoding_at`; none while
/// `in_slot_creation`), with no filter_prepare.
///
/// Errors: `undefined_file` (WAL at `start_lsn` already removed),
/// `invalid_parameter_value` (start_lsn 0/0 or past the end of flushed WAL, on every major; end_lsn before
/// start_lsn), `null_value_not_allowed` (start_lsn NULL).
#[pg_extern]
#[allow(clippy::too_many_arguments)]
fn snapbuild_trace_range(
    start_lsn: Option<PgLsn>,
    end_lsn: default!(Option<PgLsn>, "NULL"),
    initial_xmin_horizon: default!(Option<Xid>, "NULL"),
    in_slot_creation: default!(bool, true),
    building_full_snapshot: default!(bool, false),
    start_decoding_at: default!(Option<PgLsn>, "NULL"),
    all_records: default!(bool, false),
    two_phase: default!(bool, false),
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
        name!(verdict, Option<String>),
        name!(decoded, Option<bool>),
        name!(timetravel, Option<bool>),
        name!(candidate_catalog_xmin, Option<Xid>),
        name!(candidate_restart_lsn, Option<PgLsn>),
        name!(initial_xmin_horizon, Xid),
        name!(in_slot_creation, bool),
        name!(server_state, Option<String>),
        name!(server_source, Option<String>),
        name!(agrees, Option<bool>),
        name!(disagreement, Option<String>),
        name!(bytes_agree, Option<bool>),
        name!(serialized_xmin, Option<Xid>),
        name!(serialized_xmax, Option<Xid>),
        name!(serialized_committed_xip, Option<Vec<Xid>>),
        name!(serialized_catchange_xip, Option<Vec<Xid>>),
    ),
> {
    let Some(start_lsn) = start_lsn else {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "start_lsn must not be NULL",
        )
    };
    if start_lsn.0 == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "start_lsn 0/0 is not a WAL position",
        );
    }
    let flushed = crate::adapter::wal::flush_lsn();
    if start_lsn.0 > flushed.0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "start_lsn {} is past the end of flushed WAL ({flushed})",
                Lsn(start_lsn.0)
            ),
        );
    }
    if let Some(end) = end_lsn.filter(|e| e.0 < start_lsn.0) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "end_lsn {} is before start_lsn {}",
                Lsn(end.0),
                Lsn(start_lsn.0)
            ),
        );
    }
    let params = BuilderParams {
        major: server_major(),
        initial_xmin_horizon: initial_xmin_horizon.map(|x| x.0).unwrap_or(0),
        start_decoding_at: Lsn(start_decoding_at.map(|l| l.0).unwrap_or(0)),
        building_full_snapshot,
        in_slot_creation,
        // A two-phase slot's two_phase_at is its consistent point (confirmed_flush); while
        // it is being created the builder has none yet.
        two_phase_at: Lsn(match (two_phase, in_slot_creation) {
            (true, false) => start_decoding_at.map(|l| l.0).unwrap_or(0),
            _ => 0,
        }),
    };
    let input = TraceInput {
        slot_db: unsafe { pg_sys::MyDatabaseId.to_u32() },
        start: Lsn(start_lsn.0),
        end: end_lsn.map(|l| Lsn(l.0)),
        label: format!(
            "replaying from {} with explicit parameters (PostgreSQL {} rules)",
            Lsn(start_lsn.0),
            params.major.0
        ),
        params,
        slot: None,
        // The plugin is unknown: no filter_prepare.
        two_phase: TwoPhaseDecoding {
            enabled: two_phase,
            filter_gid_containing: None,
        },
        all_records,
    };
    to_table(run_trace(input))
}
