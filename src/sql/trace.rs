//! `snapbuild_trace`, `snapbuild_trace_range` and `snapbuild_trace_json`: replay the
//! snapshot builder over real WAL and put the server's verdict beside each step.
//!
//! The three functions are consumers of the decoding context's record loop; the OUT
//! columns of the two set-returning ones are declared once ([`with_trace_columns`]).

use pgrx::prelude::*;
use snapbuild_core::replication::snapbuild::CommitVerdict;
use snapbuild_core::verdict::judge_invalidation;
use snapbuild_core::{BuilderParams, TraceRow};

use crate::adapter::{raise, raise_with_hint};
use crate::context::{self, judge, DecodingContext, OtherWriters, RangeArgs, ReplayInput, Traced};
use crate::sql::srf::{RowSlots, TableIterator};
use crate::sql::types::{xids, JsonText, PgLsn, PgName, StaticText, StaticTexts, Xid};

/// The replay of a [`ReplayInput`], run lazily: each `next()` runs the record loop until
/// a record yields a row, so a trace holds the builder's state and one record at a time,
/// never the WAL it has passed (the set-returning functions hand each row to the
/// executor's tuplestore, which spills to disk past `work_mem`, before the next).
pub struct TraceIter {
    ctx: DecodingContext,
    start_row: Option<Traced>,
    writers: OtherWriters,
    /// The closing row of an invalidated slot's trace was given (or is not due).
    closed: bool,
}

impl TraceIter {
    /// Starts the replay described by `input`.
    ///
    /// Errors: `undefined_file` when WAL at the start has been removed; WAL read errors
    /// as the server raises them. A broken `.snap` file met on branch b ends the replay
    /// with an `ERROR` row (the server would fail there too).
    pub fn start(input: ReplayInput) -> Self {
        let mut ctx = DecodingContext::start(input);
        ctx.watch_invalidation();
        ctx.read_heads_in_batches();
        let writers = OtherWriters::new(&ctx);
        let start_row = Some(Traced {
            row: Box::new(ctx.start_row()),
            verdict: Default::default(),
        });
        TraceIter {
            closed: ctx.invalidation.is_none(),
            ctx,
            start_row,
            writers,
        }
    }

    /// The server's verdict on an `invalidated` row (the standby's log line for the slot
    /// and the record it names in its CONTEXT).
    fn judge_invalidated(&mut self, row: Box<TraceRow>) -> Traced {
        let w = self.ctx.invalidation.clone().expect("watching");
        let lines = self.writers.invalidation_lines(&w.slot_name);
        let detail = row.detail.clone().unwrap_or_default();
        let verdict = judge_invalidation(
            Some((row.lsn, &row.record, &detail)),
            &w.undecided,
            self.ctx.input.start,
            lines.as_deref().map_err(String::as_str),
        );
        self.closed = true;
        Traced { row, verdict }
    }

    /// The closing row of an invalidated slot's trace when no record read invalidates it:
    /// at the record the server log names (or the end of what was read), saying so.
    fn not_found_row(&mut self) -> Option<Traced> {
        if std::mem::replace(&mut self.closed, true) {
            return None;
        }
        let w = self.ctx.invalidation.clone()?;
        if w.found.is_some() || self.ctx.stopped != Some(context::Stop::EndOfWal) {
            return None;
        }
        let lines = self.writers.invalidation_lines(&w.slot_name);
        let verdict = judge_invalidation(
            None,
            &w.undecided,
            self.ctx.input.start,
            lines.as_deref().map_err(String::as_str),
        );
        let mut row = self.ctx.replay.builder_row_at(self.ctx.last_end);
        row.record = "INVALIDATION".into();
        row.end_lsn = self.ctx.last_end;
        row.branch = Some("invalidated");
        row.interesting = true;
        row.message = Some(format!(
            "replication slot \"{}\" is invalidated ({}), but no record read up to {} invalidates it in the replay{}",
            w.slot_name,
            w.cause.name(),
            self.ctx.last_end,
            if w.undecided.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} records may have (their horizon is not read), the first at {}",
                    w.undecided.len(),
                    w.undecided[0].0
                )
            }
        ));
        Some(Traced {
            row: Box::new(row),
            verdict,
        })
    }
}

impl Iterator for TraceIter {
    type Item = Traced;

    fn next(&mut self) -> Option<Traced> {
        if let Some(r) = self.start_row.take() {
            return Some(r);
        }
        let version = self.ctx.input.params.version.snapbuild_version();
        loop {
            let Some(next) = self.ctx.next_row() else {
                return self.not_found_row();
            };
            match next {
                Ok(None) => {}
                Ok(Some(row)) if row.branch == Some("invalidated") => {
                    return Some(self.judge_invalidated(row));
                }
                Ok(Some(row)) => {
                    if row.interesting || self.ctx.input.all_records {
                        return Some(judge(
                            row,
                            self.ctx.input.slot.as_ref(),
                            version,
                            &mut self.writers,
                        ));
                    }
                }
                Err(e) => {
                    let mut row = e.row;
                    row.level = Some("ERROR");
                    row.message = Some(
                        e.error
                            .message(&crate::adapter::snapfiles::path_for(row.lsn)),
                    );
                    row.detail = None;
                    return Some(Traced {
                        row: Box::new(row),
                        verdict: Default::default(),
                    });
                }
            }
        }
    }
}

/// Hands the trace's OUT columns, `name: [type]` each, to the macro `$then` (after the
/// tokens `$args`): the one place they are written.
macro_rules! with_trace_columns {
    ($then:ident ! { $($args:tt)* }) => {
        $then! { { $($args)* } [
            lsn: [PgLsn],
            end_lsn: [Option<PgLsn>],
            record: [StaticText],
            xid: [Option<Xid>],
            branch: [Option<StaticText>],
            state_before: [Option<StaticText>],
            state: [StaticText],
            xmin: [Xid],
            xmax: [Xid],
            next_phase_at: [Xid],
            start_decoding_at: [PgLsn],
            running_xids: [Option<Vec<Xid>>],
            wait_xids: [Option<Vec<Xid>>],
            level: [Option<StaticText>],
            message: [Option<String>],
            detail: [Option<String>],
            verdict: [Option<StaticText>],
            decoded: [Option<bool>],
            timetravel: [Option<bool>],
            candidate_catalog_xmin: [Option<Xid>],
            candidate_restart_lsn: [Option<PgLsn>],
            initial_xmin_horizon: [Xid],
            in_slot_creation: [bool],
            server_state: [Option<String>],
            server_source: [Option<String>],
            agrees: [Option<bool>],
            disagreement: [Option<String>],
            bytes_agree: [Option<bool>],
            serialized_xmin: [Option<Xid>],
            serialized_xmax: [Option<Xid>],
            serialized_committed_xip: [Option<Vec<Xid>>],
            serialized_catchange_xip: [Option<Vec<Xid>>],
        ] }
    };
}

/// `type Columns = (…)`: the column types as one tuple.
macro_rules! columns_type {
    ({} [ $($col:ident : [$($ty:tt)*]),* $(,)? ]) => {
        type Columns = ( $( $($ty)* ),* );
    };
}
with_trace_columns!(columns_type! {});

/// `fn put_columns`: one row's columns into the row's slots, in the declared order.
macro_rules! put_columns_fn {
    ({} [ $($col:ident : [$($ty:tt)*]),* $(,)? ]) => {
        fn put_columns(c: Columns, slots: &mut RowSlots) {
            let ( $($col),* ) = c;
            // Unrolled: each column's NULL test is a branch of its own, which follows the
            // kind of row (one loop's branch over all columns would not).
            let mut i = 0;
            let mut mask = 0u64;
            $(
                mask |= u64::from(slots.put(i, $col.into_datum())) << i;
                i += 1;
            )*
            debug_assert_eq!(i, 32);
            slots.null_mask(mask);
        }
    };
}
with_trace_columns!(put_columns_fn! {});

/// A column's value in `snapbuild_trace_json`: what `row_to_json` gives for the SQL
/// column (`pg_lsn` and `xid` as their text, NULL as null).
trait JsonValue {
    fn json(self) -> serde_json::Value;
}

impl JsonValue for PgLsn {
    fn json(self) -> serde_json::Value {
        snapbuild_core::Lsn(self.0).to_string().into()
    }
}

impl JsonValue for Xid {
    fn json(self) -> serde_json::Value {
        self.0.to_string().into()
    }
}

impl JsonValue for StaticText {
    fn json(self) -> serde_json::Value {
        self.text().into()
    }
}

impl JsonValue for bool {
    fn json(self) -> serde_json::Value {
        self.into()
    }
}

impl JsonValue for String {
    fn json(self) -> serde_json::Value {
        self.into()
    }
}

impl<T: JsonValue> JsonValue for Option<T> {
    fn json(self) -> serde_json::Value {
        self.map_or(serde_json::Value::Null, JsonValue::json)
    }
}

impl<T: JsonValue> JsonValue for Vec<T> {
    fn json(self) -> serde_json::Value {
        serde_json::Value::Array(self.into_iter().map(JsonValue::json).collect())
    }
}

/// `fn json_columns`: one row's columns as a JSON object keyed by the columns' names.
macro_rules! json_columns_fn {
    ({} [ $($col:ident : [$($ty:tt)*]),* $(,)? ]) => {
        fn json_columns(c: Columns) -> serde_json::Map<String, serde_json::Value> {
            let ( $($col),* ) = c;
            let mut m = serde_json::Map::new();
            $( m.insert(stringify!($col).to_owned(), $col.json()); )*
            m
        }
    };
}
with_trace_columns!(json_columns_fn! {});

/// One trace row as `snapbuild_trace_json` gives it: the SQL row's columns under their
/// names, with what they show of the row in more detail beside them: `commit_verdict`
/// (SnapBuildCommitTxn's verdict, whole), `serialized` (the `.snap` file the replay
/// writes, whole), `serialize_context` (what its xmin rests on), `restored_from` (the
/// file restored on branch b), `candidate_xmin_lsn` and `candidate_restart_valid` (the
/// LSNs of the slot candidates), `interesting` (whether the default trace shows the row).
fn json_row(t: &Traced, p: &BuilderParams, texts: &mut StaticTexts) -> serde_json::Value {
    let mut m = json_columns(columns(t, p, texts));
    let r = &t.row;
    let mut put = |k: &str, v: serde_json::Result<serde_json::Value>| {
        m.insert(k.to_owned(), v.unwrap_or(serde_json::Value::Null));
    };
    put("commit_verdict", serde_json::to_value(&r.commit));
    put("serialized", serde_json::to_value(&r.serialized));
    put(
        "serialize_context",
        serde_json::to_value(&r.serialize_context),
    );
    put("restored_from", serde_json::to_value(r.restored_from));
    put(
        "candidate_xmin_lsn",
        serde_json::to_value(r.candidate_xmin.map(|c| c.0)),
    );
    put(
        "candidate_restart_valid",
        serde_json::to_value(r.candidate_restart.map(|c| c.0)),
    );
    put("interesting", Ok(r.interesting.into()));
    serde_json::Value::Object(m)
}

/// A set-returning trace function: the item given, returning the trace's columns.
macro_rules! trace_function {
    ({ $(#[$attr:meta])* fn $name:ident ( $($arg:tt)* ) $body:block }
     [ $($col:ident : [$($ty:tt)*]),* $(,)? ]) => {
        $(#[$attr])*
        fn $name($($arg)*) -> TableIterator<'static, ( $( name!($col, $($ty)*) ),* )> $body
    };
}

/// One trace row as the columns above.
fn columns(t: &Traced, p: &BuilderParams, texts: &mut StaticTexts) -> Columns {
    let r = &t.row;
    let v = &t.verdict;
    let is_start = r.record == "REPLAY START";
    let ser = r.serialized.as_ref();
    (
        r.lsn.into(),
        (!is_start).then(|| r.end_lsn.into()),
        texts.get(r.record),
        r.xid.map(Xid),
        r.branch.map(|b| texts.get(b)),
        (!is_start).then(|| texts.get(r.state_before.as_str())),
        texts.get(r.state.as_str()),
        Xid(r.xmin),
        Xid(r.xmax),
        Xid(r.next_phase_at),
        r.start_decoding_at.into(),
        r.running_xids.as_deref().map(xids),
        r.wait_xids.as_deref().map(xids),
        r.level.map(|l| texts.get(l)),
        r.message.clone(),
        r.detail.clone(),
        r.decode.map(|d| texts.get(d.label())),
        r.decode.map(|d| d.decoded()),
        r.commit
            .as_ref()
            .map(|c| matches!(c, CommitVerdict::Timetravel { .. })),
        r.candidate_xmin.map(|c| Xid(c.1)),
        r.candidate_restart.map(|c| c.1.into()),
        Xid(p.initial_xmin_horizon),
        p.in_slot_creation,
        v.server_state.clone(),
        v.server_source.clone(),
        v.agrees,
        v.disagreement.clone().or_else(|| r.note.clone()),
        v.bytes_agree,
        ser.map(|f| Xid(f.builder.xmin)),
        ser.map(|f| Xid(f.builder.xmax)),
        ser.map(|f| xids(&f.committed_xip)),
        ser.map(|f| xids(&f.catchange_xip)),
    )
}

/// The trace as a materialize-mode set (`srf::TableIterator`): every row goes into the
/// executor's tuplestore in one call.
fn to_table(mut rows: TraceIter) -> TableIterator<'static, Columns> {
    let p = rows.ctx.input.params.clone();
    let mut texts = StaticTexts::new(rows.ctx.memory_context());
    #[cfg(feature = "ablation-no-rows")]
    let mut last_record: &'static str = "";
    TableIterator::new(move |slots| match rows.next() {
        Some(t) => {
            // A row of the same record as the row formed last is that row's tuple again.
            #[cfg(feature = "ablation-no-rows")]
            {
                if t.row.record == last_record && slots.repeat_last() {
                    rows.ctx.replay.give_back(t.row);
                    return true;
                }
                last_record = t.row.record;
            }
            put_columns(columns(&t, &p, &mut texts), slots);
            rows.ctx.replay.give_back(t.row);
            true
        }
        None => false,
    })
}

with_trace_columns!(trace_function! {
    /// Re-runs, in Rust, what the server's snapshot builder does for `slot_name` with the
    /// WAL from the slot's restart_lsn to the end of flushed WAL (snapbuild.c
    /// SnapBuildProcessRunningXacts / SnapBuildFindSnapshot / SnapBuildSerialize /
    /// SnapBuildCommitTxn, fed as decode.c LogicalDecodingProcessRecord dispatches records).
    ///
    /// Rows: a first `REPLAY START` row with the starting parameters (its message also says
    /// when no complete record has been flushed after restart_lsn yet: a slot created a
    /// moment ago has nothing to replay, which is not an error); then, by default, one
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
    fn snapbuild_trace(slot_name: PgName, all_records: default!(bool, false)) {
        to_table(TraceIter::start(context::for_slot(&slot_name.0, all_records)))
    }
});

with_trace_columns!(trace_function! {
    /// "What if a slot were created here?": the replay of `snapbuild_trace` without a slot,
    /// from the first record at or after `start_lsn` to `end_lsn` (default: end of flushed
    /// WAL), with AllocateSnapshotBuilder's parameters given explicitly. Decoding is for the
    /// current database. Verdicts come from `.snap` files only. `two_phase` decodes as a slot
    /// created with `twophase` (its `two_phase_at` = `start_decoding_at`; none while
    /// `in_slot_creation`), with no filter_prepare.
    ///
    /// Errors: `undefined_file` (WAL at `start_lsn` already removed),
    /// `invalid_parameter_value` (start_lsn 0/0 or past the end of flushed WAL, on every major; end_lsn before
    /// start_lsn), `null_value_not_allowed` (start_lsn or a boolean argument NULL).
    #[pg_extern]
    #[allow(clippy::too_many_arguments)]
    fn snapbuild_trace_range(
        start_lsn: Option<PgLsn>,
        end_lsn: default!(Option<PgLsn>, "NULL"),
        initial_xmin_horizon: default!(Option<Xid>, "NULL"),
        in_slot_creation: default!(Option<bool>, "true"),
        building_full_snapshot: default!(Option<bool>, "false"),
        start_decoding_at: default!(Option<PgLsn>, "NULL"),
        all_records: default!(Option<bool>, "false"),
        two_phase: default!(Option<bool>, "false"),
    ) {
        let flag = |v: Option<bool>, name: &str| {
            v.unwrap_or_else(|| {
                raise(
                    PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                    format!("{name} must not be NULL"),
                )
            })
        };
        to_table(TraceIter::start(context::for_range(RangeArgs {
            start_lsn: start_lsn.map(|l| l.0),
            end_lsn: end_lsn.map(|l| l.0),
            initial_xmin_horizon: initial_xmin_horizon.map(|x| x.0),
            in_slot_creation: flag(in_slot_creation, "in_slot_creation"),
            building_full_snapshot: flag(building_full_snapshot, "building_full_snapshot"),
            start_decoding_at: start_decoding_at.map(|l| l.0),
            all_records: flag(all_records, "all_records"),
            two_phase: flag(two_phase, "two_phase"),
        })))
    }
});

/// Largest JSON text `snapbuild_trace_json` builds: 64 MiB. A trace is one JSON value held
/// whole in the backend (the text, then its copy into the result datum), so its length is
/// what bounds the function's memory; past it the call stops with `program_limit_exceeded`
/// instead of growing with the WAL.
pub const TRACE_JSON_MAX_BYTES: usize = 64 << 20;

/// The same replay as `snapbuild_trace`, as one JSON array (serde_json) for tools: one
/// object per trace row, in the row order of `snapbuild_trace`.
///
/// The array is built row by row into one text (never the rows themselves), bounded by
/// [`TRACE_JSON_MAX_BYTES`].
///
/// Errors: as `snapbuild_trace`; `program_limit_exceeded` (54000) when the text would pass
/// 64 MiB (the hint names the set-returning `snapbuild_trace`, which streams).
#[pg_extern(strict)]
fn snapbuild_trace_json(slot_name: PgName, all_records: default!(bool, false)) -> JsonText {
    let rows = TraceIter::start(context::for_slot(&slot_name.0, all_records));
    let p = rows.ctx.input.params.clone();
    let mut texts = StaticTexts::new(rows.ctx.memory_context());
    JsonText(json_array(
        rows.map(|t| (t.row.lsn, json_row(&t, &p, &mut texts))),
        TRACE_JSON_MAX_BYTES,
        &slot_name.0,
        all_records,
    ))
}

/// The rows as one JSON array text, at most `limit` bytes long, else `program_limit_exceeded`.
fn json_array(
    rows: impl Iterator<Item = (snapbuild_core::Lsn, serde_json::Value)>,
    limit: usize,
    slot_name: &str,
    all_records: bool,
) -> String {
    let mut out = String::from("[");
    let mut n = 0u64;
    for (lsn, row) in rows {
        // A Value's object keys come out in one (sorted) order.
        let text = serde_json::to_string(&row).unwrap_or_else(|e| {
            raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("could not serialize trace: {e}"),
            )
        });
        if out.len() + 1 + text.len() + 1 > limit {
            raise_with_hint(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "the trace of slot \"{slot_name}\" is longer than {} MiB of JSON",
                    limit >> 20
                ),
                format!("{n} rows fitted; the next one is at LSN {lsn}."),
                format!(
                    "Read the trace row by row from the set-returning snapbuild_trace('{slot_name}', {all_records}), e.g. SELECT row_to_json(t) FROM snapbuild_trace(...) t, which streams."
                ),
            );
        }
        if n > 0 {
            out.push(',');
        }
        out.push_str(&text);
        n += 1;
    }
    out.push(']');
    out
}
