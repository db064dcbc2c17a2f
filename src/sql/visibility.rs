//! Historic MVCC at the SQL level: the catalog snapshot a slot's decoder holds at an
//! LSN (`snapbuild_historic_snapshot`, `snapbuild_historic_snapshot_from_file`), every
//! tuple of a relation judged by the core and by the server under it
//! (`snapbuild_visibility`), and a pure what-if of the rule
//! (`snapbuild_historic_visible`).

use pgrx::prelude::*;
use snapbuild_core::access::heapam_visibility::satisfies_historic_mvcc;
use snapbuild_core::include::htup_details::TupleHeader;
use snapbuild_core::include::reorderbuffer::{TupleCidEnt, TupleCidKey};
use snapbuild_core::include::server_lookups::{LookupError, ServerLookups};
use snapbuild_core::include::snapbuild::SnapshotOrigin;
use snapbuild_core::include::snapshot::{HistoricSnapshot, INVALID_COMMAND_ID};
use snapbuild_core::replication::reorderbuffer::{historic_view, HistoricView};
use snapbuild_core::replication::reorderbuffer::{CidResolver, TupleCidHash};
use snapbuild_core::{Lsn, SnapBuildState};

use crate::adapter::heap::tid;
use crate::adapter::heap::{judge_relation, Server};
use crate::adapter::snapfiles;
use crate::adapter::{raise, raise_with_detail, server_version};
use crate::context::{self, DecodingContext};
use crate::sql::types::{xids, PgLsn, PgName, RegClass, Xid};

/// The historic view of the decoder of `slot_name` at `at_lsn` (the last record ending at
/// or before it; the end of flushed WAL when NULL) for the decoding transaction `xid`.
struct SlotView {
    view: HistoricView,
    at: Lsn,
    restored_from: Option<Lsn>,
    state: SnapBuildState,
}

fn slot_view(slot_name: &str, at_lsn: Option<PgLsn>, xid: Option<Xid>) -> SlotView {
    let input = context::for_slot(slot_name, false);
    if let Some(at) = at_lsn {
        if at.0 < input.start.0 {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "at_lsn {} precedes the restart_lsn {} of replication slot \"{slot_name}\"",
                    Lsn(at.0),
                    input.start
                ),
            );
        }
    }
    let mut ctx = DecodingContext::start(input);
    // Keep the decoding transaction's view even once it has ended.
    ctx.replay.builder.reorder.remember = xid.map(|x| x.0);
    let cap = ctx.run_capturing(at_lsn.map(|l| Lsn(l.0)));
    let base = cap.base.unwrap_or_else(|state| {
        raise_with_detail(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "no historic snapshot at {}: the snapshot builder of replication slot \"{slot_name}\" is in state \"{}\"",
                cap.at,
                state.as_str()
            ),
            "Logical decoding builds a historic snapshot only once the builder reaches FULL_SNAPSHOT (SnapBuildBuildSnapshot).",
        )
    });
    let decoding = xid
        .filter(|x| x.0 != 0)
        .map(|x| cap.replay.builder.reorder.decoding_txn(x.0));
    SlotView {
        view: historic_view(base, decoding, cap.last_record.unwrap_or(Lsn(0))),
        at: cap.at,
        restored_from: cap.restored_from,
        state: cap.state,
    }
}

fn source_text(v: &SlotView) -> String {
    let b = &v.view.base;
    match (b.origin, b.built_at) {
        (SnapshotOrigin::Restored, Some(at)) => {
            format!("restored file {}", snapfiles::path_for(at))
        }
        (SnapshotOrigin::CatalogCommit(x), Some(at)) => {
            format!("replay: built at the catalog-modifying commit of {x} at {at}")
        }
        (SnapshotOrigin::FirstChange(x), Some(at)) => {
            format!("replay: built at the first decoded change of {x} at {at}")
        }
        _ => match v.restored_from {
            Some(f) => format!(
                "replay: built from the builder's state (restored from {})",
                snapfiles::path_for(f)
            ),
            None => "replay: built from the builder's state".to_owned(),
        },
    }
}

fn cid_i32(c: u32) -> i32 {
    c as i32
}

type SnapshotRow = (
    Xid,
    Xid,
    Vec<Xid>,
    Vec<Xid>,
    i32,
    PgLsn,
    String,
    Option<PgLsn>,
    String,
    Option<Xid>,
    Option<String>,
    Option<i32>,
);

fn snapshot_row(v: &SlotView) -> SnapshotRow {
    let s = &v.view.snapshot;
    let d = v.view.decoding.as_ref();
    (
        Xid(s.xmin),
        Xid(s.xmax),
        xids(&s.xip),
        xids(&s.subxip),
        cid_i32(s.curcid),
        v.at.into(),
        source_text(v),
        v.view.base.built_at.map(Into::into),
        v.state.as_str().to_owned(),
        d.map(|d| Xid(d.top)),
        d.map(|d| d.status.label()),
        v.view.tuplecids.as_ref().map(|t| t.len() as i32),
    )
}

/// The historic (catalog) snapshot of the decoder of `slot_name` at `at_lsn` (default:
/// the end of flushed WAL), replaying the WAL from the slot's restart_lsn.
///
/// `xmin`, `xmax` and `xip` are the builder's snapshot there as SnapBuildBuildSnapshot
/// hands it out (`xip` sorted): the one built at the last catalog-modifying commit, at
/// the first decoded change, or at a restore. Its xmin is the builder's xmin at that
/// moment (an oldestRunningXid), not the slot's initial xmin horizon.
///
/// With `xid` (a top-level xid or one of its subtransactions) the snapshot is the one
/// ReorderBufferProcessTXN holds once its replay of that transaction has reached
/// `at_lsn`. Replay makes a private copy (ReorderBufferCopySnap) at the first command-id
/// change: `subxip` is the top-level xid and the subtransactions still attached when
/// the transaction is replayed (so as far as the flushed WAL shows; aborted ones are
/// gone), and `curcid` is the largest command id its NEW_CID records queued at or before
/// `at_lsn`. Before the first such change the snapshot stays shared: no `subxip`,
/// `curcid` 0. The tuple-cid hash is built from all its NEW_CID records
/// (`tuplecids` counts them; NULL: no hash is built), so a later DDL step of the same
/// transaction is "at or after curcid" at an earlier `at_lsn`.
///
/// `lsn` is the end of the last record replayed up to `at_lsn`; `source` says where the
/// snapshot came from (`built_at`: the record); `decoding_status` what the flushed WAL
/// says of the transaction.
///
/// Errors: `object_not_in_prerequisite_state` before the builder is FULL_SNAPSHOT at
/// `at_lsn` (there is no historic snapshot yet), for a physical slot or a slot without
/// restart_lsn; `undefined_object` for an unknown slot; `invalid_parameter_value` when
/// `at_lsn` precedes the slot's restart_lsn.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_historic_snapshot(
    slot_name: Option<PgName>,
    at_lsn: default!(Option<PgLsn>, "NULL"),
    xid: default!(Option<Xid>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(xmin, Xid),
        name!(xmax, Xid),
        name!(xip, Vec<Xid>),
        name!(subxip, Vec<Xid>),
        name!(curcid, i32),
        name!(lsn, PgLsn),
        name!(source, String),
        name!(built_at, Option<PgLsn>),
        name!(builder_state, String),
        name!(decoding_xid, Option<Xid>),
        name!(decoding_status, Option<String>),
        name!(tuplecids, Option<i32>),
    ),
> {
    let Some(slot) = slot_name else {
        return TableIterator::new(Vec::new());
    };
    let v = slot_view(&slot.0, at_lsn, xid);
    TableIterator::new(vec![snapshot_row(&v)])
}

/// The historic snapshot SnapBuildRestore builds from one `pg_logical/snapshots` file
/// (SnapBuildBuildSnapshot over the file's xmin, xmax and committed xids): `subxip`
/// empty, `curcid` 0, `lsn` the file's LSN.
///
/// Errors: as `snapbuild_snapshot_info`; `object_not_in_prerequisite_state` for a file
/// whose state is before FULL_SNAPSHOT.
#[pg_extern(strict)]
#[allow(clippy::type_complexity)]
fn snapbuild_historic_snapshot_from_file(
    filename: &str,
) -> TableIterator<
    'static,
    (
        name!(xmin, Xid),
        name!(xmax, Xid),
        name!(xip, Vec<Xid>),
        name!(subxip, Vec<Xid>),
        name!(curcid, i32),
        name!(lsn, PgLsn),
        name!(source, String),
        name!(builder_state, String),
    ),
> {
    let version = server_version().snapbuild_version();
    let (lsn, file) = snapfiles::read_named(filename, version).unwrap_or_else(|e| e.raise());
    let state = SnapBuildState::from_raw(file.builder.state);
    if state.is_none_or(|s| s < SnapBuildState::FullSnapshot) {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "no historic snapshot in \"{}\": its state is {}",
                snapfiles::path_for(lsn),
                SnapBuildState::name_of_raw(file.builder.state)
            ),
        );
    }
    let s = HistoricSnapshot::build(file.builder.xmin, file.builder.xmax, &file.committed_xip);
    TableIterator::new(vec![(
        Xid(s.xmin),
        Xid(s.xmax),
        xids(&s.xip),
        xids(&s.subxip),
        cid_i32(s.curcid),
        lsn.into(),
        format!("restored file {}", snapfiles::path_for(lsn)),
        SnapBuildState::name_of_raw(file.builder.state).to_owned(),
    )])
}

#[allow(clippy::type_complexity)]
type VisRow = (
    pg_sys::ItemPointerData,
    i32,
    Xid,
    Xid,
    Option<Xid>,
    Vec<&'static str>,
    i32,
    Option<i32>,
    Option<i32>,
    bool,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Option<bool>,
    bool,
    Option<bool>,
);

/// Which verdicts `snapbuild_visibility` computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdicts {
    Both,
    ServerOnly,
}

fn parse_verdicts(v: Option<&str>) -> Verdicts {
    match v {
        Some("both") => Verdicts::Both,
        Some("server") => Verdicts::ServerOnly,
        other => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            match other {
                Some(t) => format!("verdicts must be 'both' or 'server', not \"{t}\""),
                None => "verdicts must be 'both' or 'server', not NULL".to_owned(),
            },
        ),
    }
}

/// Every heap tuple of `rel` judged under the historic snapshot of
/// `snapbuild_historic_snapshot(slot_name, at_lsn, xid)`, twice: `rust_visible` by
/// pg_snapbuild's re-run of heapam_visibility.c HeapTupleSatisfiesHistoricMVCC, and
/// `server_visible` by the server's own HeapTupleSatisfiesVisibility with a
/// SNAPSHOT_HISTORIC_MVCC snapshot of the same fields and the same tuple-cid hash,
/// installed with SetupHistoricSnapshot as the decoder does, on the same pinned,
/// share-locked buffer. `agrees` compares the two.
///
/// Per tuple: `ctid`, `lp_len`, the raw `t_xmin` and `t_xmax`, `t_xmax_update` (the
/// updating member of a multixact xmax), the infomask flags by name, the raw command id
/// (`t_cid`), the `cmin`/`cmax` the decoding transaction's NEW_CID records give it
/// (ResolveCminCmaxDuringDecoding's map, NULL when absent or invalid), whether that map
/// has the tuple (`cid_resolved`), and `rust_branch` (the xmin branch, then the xmax
/// branch if reached; also split into `xmin_branch` / `xmax_branch`).
///
/// `verdicts` chooses what is computed: `'both'` (the default) as above; `'server'` does
/// the same scan (same snapshot, same tuple-cid hash, same pinned share-locked buffers,
/// the server's HeapTupleSatisfiesVisibility) but skips our verdict, so `xmin_branch`,
/// `rust_branch`, `xmax_branch`, `rust_visible` and `agrees` are NULL, and `cmin`,
/// `cmax`, `cid_resolved` come from the server's tuple-cid hash after its verdict. It is
/// the baseline of `scripts/bench_visibility.sh`.
///
/// Nothing is written: no hint bits are set, by us or by the server's routine on this path.
///
/// Errors: those of `snapbuild_historic_snapshot`; `invalid_parameter_value` for a
/// `verdicts` other than `'both'` or `'server'` (NULL included); `wrong_object_type` for a relation
/// without heap pages; `feature_not_supported` for a temporary relation;
/// `data_corrupted` for a page that cannot be read safely.
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_visibility(
    rel: Option<RegClass>,
    slot_name: Option<PgName>,
    at_lsn: default!(Option<PgLsn>, "NULL"),
    xid: default!(Option<Xid>, "NULL"),
    verdicts: default!(Option<&str>, "'both'"),
) -> TableIterator<
    'static,
    (
        name!(ctid, pg_sys::ItemPointerData),
        name!(lp_len, i32),
        name!(t_xmin, Xid),
        name!(t_xmax, Xid),
        name!(t_xmax_update, Option<Xid>),
        name!(infomask, Vec<&'static str>),
        name!(t_cid, i32),
        name!(cmin, Option<i32>),
        name!(cmax, Option<i32>),
        name!(cid_resolved, bool),
        name!(xmin_branch, Option<&'static str>),
        name!(rust_branch, Option<&'static str>),
        name!(xmax_branch, Option<&'static str>),
        name!(rust_visible, Option<bool>),
        name!(server_visible, bool),
        name!(agrees, Option<bool>),
    ),
> {
    let verdicts = parse_verdicts(verdicts);
    let (Some(rel), Some(slot)) = (rel, slot_name) else {
        return TableIterator::new(Vec::new());
    };
    let v = slot_view(&slot.0, at_lsn, xid);
    let scan = judge_relation(
        rel.0,
        &v.view.snapshot,
        v.view.tuplecids.as_deref(),
        verdicts == Verdicts::Both,
    );
    for f in &scan.applied_mapping_files {
        pgrx::debug1!("applied rewrite mapping file \"{f}\" to the tuple-cid map");
    }
    let valid = |c: u32| (c != INVALID_COMMAND_ID).then_some(c as i32);
    // Rows are made as the executor asks for them: the scan's tuples are held once.
    let rows = scan.tuples.into_iter().map(move |t| -> VisRow {
        let rust = t.rust.as_ref();
        (
            tid(t.block, t.offset),
            t.lp_len as i32,
            Xid(t.header.raw_xmin),
            Xid(t.header.raw_xmax),
            t.update_xid.map(Xid),
            t.header.flag_names(),
            t.header.raw_cid as i32,
            t.cids.and_then(|c| valid(c.cmin)),
            t.cids.and_then(|c| valid(c.cmax)),
            t.cids.is_some(),
            rust.map(|r| r.xmin_branch.label()),
            rust.map(|r| r.branch_str()),
            rust.and_then(|r| r.xmax_branch.map(|b| b.label())),
            rust.map(|r| r.visible),
            t.server_visible,
            rust.map(|r| r.visible == t.server_visible),
        )
    });
    TableIterator::new(rows)
}

/// Lookups for the what-if: the commit log is the list given (or the server's own), the
/// multixact updater is the one given, and there are no rewrite mapping files.
struct WhatIf {
    committed: Option<Vec<u32>>,
    update_xid: Option<u32>,
}

impl ServerLookups for WhatIf {
    fn did_commit(&mut self, x: u32) -> bool {
        match &self.committed {
            Some(v) => x == 1 || x == 2 || v.contains(&x),
            None => PgTryBuilder::new(|| Server.did_commit(x))
                .catch_others(|e| {
                    let text = match e {
                        pg_sys::panic::CaughtError::PostgresError(ref r)
                        | pg_sys::panic::CaughtError::ErrorReport(ref r) => r.message().to_owned(),
                        _ => "unknown failure".to_owned(),
                    };
                    raise(
                        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                        format!(
                            "cannot look up the status of transaction {x} in the commit log: {text} (pass committed => '{{…}}' instead)"
                        ),
                    )
                })
                .execute(),
        }
    }
    fn update_xid(&mut self, multi: u32, _: u16) -> u32 {
        self.update_xid.unwrap_or_else(|| {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("t_xmax {multi} is a multixact with an updater: pass update_xid"),
            )
        })
    }
    fn mapping_file_names(&mut self) -> Result<Vec<String>, LookupError> {
        Ok(Vec::new())
    }
    fn mapping_file(&mut self, name: &str) -> Result<Vec<u8>, LookupError> {
        Err(LookupError::Io(format!(
            "no mapping file \"{name}\" in a what-if"
        )))
    }
}

fn xid_list(v: Vec<Option<Xid>>, what: &str) -> Vec<u32> {
    v.into_iter()
        .map(|x| {
            x.map(|x| x.0).unwrap_or_else(|| {
                raise(
                    PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                    format!("{what} must not contain NULL"),
                )
            })
        })
        .collect()
}

/// What HeapTupleSatisfiesHistoricMVCC (re-run by pg_snapbuild) says of a tuple with
/// `t_xmin`, `t_xmax` and `infomask` under a historic snapshot given by its fields.
///
/// `cid` is the command id the decoding transaction's tuple-cid map holds for the tuple
/// (NULL: no entry, unresolved): its cmin, and its cmax too unless `cmax` is given (-1
/// is InvalidCommandId). `update_xid` is the updating member when `t_xmax` is a
/// multixact that is not only a lock. `committed` lists the xids the commit log would
/// call committed (NULL: ask this server's commit log). Arrays are sorted first, as the
/// server sorts them before searching. The result is pure: nothing is read from pages.
#[pg_extern]
#[allow(clippy::too_many_arguments)]
fn snapbuild_historic_visible(
    t_xmin: Xid,
    t_xmax: Xid,
    infomask: i32,
    cid: Option<i32>,
    snapshot_xmin: Xid,
    snapshot_xmax: Xid,
    xip: Vec<Option<Xid>>,
    subxip: default!(Vec<Option<Xid>>, "'{}'"),
    curcid: default!(i32, 0),
    cmax: default!(Option<i32>, "NULL"),
    update_xid: default!(Option<Xid>, "NULL"),
    committed: default!(Option<Vec<Option<Xid>>>, "NULL"),
) -> TableIterator<'static, (name!(visible, bool), name!(branch, String))> {
    if !(0..=0xFFFF).contains(&infomask) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("infomask {infomask} is not a 16-bit value"),
        );
    }
    let snap = HistoricSnapshot::from_parts(
        snapshot_xmin.0,
        snapshot_xmax.0,
        &xid_list(xip, "xip"),
        &xid_list(subxip, "subxip"),
        curcid as u32,
    );
    let key = TupleCidKey::default();
    let mut resolver = CidResolver {
        hash: cid.map(|c| {
            TupleCidHash::single(
                key,
                TupleCidEnt {
                    cmin: c as u32,
                    cmax: cmax.unwrap_or(c) as u32,
                    combocid: INVALID_COMMAND_ID,
                },
            )
        }),
        ..CidResolver::default()
    };
    let mut lookups = WhatIf {
        committed: committed.map(|v| xid_list(v, "committed")),
        update_xid: update_xid.map(|x| x.0),
    };
    let t = TupleHeader::with(t_xmin.0, t_xmax.0, infomask as u16);
    let v = satisfies_historic_mvcc(&t, &key, &snap, &mut resolver, &mut lookups)
        .unwrap_or_else(|e| crate::adapter::heap::raise_lookup(e));
    TableIterator::new(vec![(v.visible, v.branch_text())])
}
