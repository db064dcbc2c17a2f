//! One decode of a slot counted as the reorder buffer counts it: the replay of
//! `snapbuild_slot_prediction` (from restart_lsn, as `pg_logical_slot_get_changes` would
//! read) with the memory accounting on ([`ReorderMemory`]), shared by `snapbuild_backlog`
//! and `snapbuild_decoding_cost`.

use pgrx::prelude::*;
use snapbuild_core::replication::reorder_memory::{
    CostSummary, DecodingStats, MemoryRules, StructSizes, TxnAccount, TxnOutcome, XidStatus,
};
use snapbuild_core::{Lsn, TransactionId};

use crate::adapter::raise;
use crate::adapter::slots::SlotCopy;
use crate::adapter::wal::flush_lsn;
use crate::context::{self, DecodingContext};

/// What one counted decode found.
pub struct BacklogRun {
    pub slot: SlotCopy,
    pub decoded_from: Lsn,
    /// The end of the last record read (0/0 when none).
    pub decoded_to: Lsn,
    pub records: u64,
    pub stats: DecodingStats,
    pub summary: CostSummary,
    /// The largest `rb->size` reached, in bytes.
    pub peak: u64,
    pub undecided: Option<String>,
    /// The top-level transactions still open at the end, in the order they began (when
    /// the ended ones were asked for).
    pub open: Vec<TxnAccount>,
    pub work_mem_kb: i32,
    pub streaming: bool,
}

/// The server's struct sizes ReorderBufferChangeSize adds up.
fn struct_sizes() -> StructSizes {
    StructSizes {
        change: std::mem::size_of::<pg_sys::ReorderBufferChange>() as u64,
        heap_tuple: std::mem::size_of::<pg_sys::HeapTupleData>() as u64,
        snapshot: std::mem::size_of::<pg_sys::SnapshotData>() as u64,
        inval_message: std::mem::size_of::<pg_sys::SharedInvalidationMessage>() as u64,
    }
}

/// TransactionIdIsInProgress / TransactionIdDidCommit, as 18's
/// ReorderBufferCheckAndTruncateAbortedTXN asks them.
fn xid_status(x: TransactionId) -> XidStatus {
    let xid = pg_sys::TransactionId::from(x);
    unsafe {
        if pg_sys::TransactionIdIsInProgress(xid) {
            XidStatus::InProgress
        } else if pg_sys::TransactionIdDidCommit(xid) {
            XidStatus::Committed
        } else {
            XidStatus::Aborted
        }
    }
}

/// The attributes of the relation stored in tablespace `spc`, relfilenumber `rel`, as
/// this database's catalog describes them now (`pg_filenode_relation`, `pg_attribute`);
/// `None` for another database's relation or one that cannot be found.
fn relation_layout(spc: u32, db: u32, rel: u32) -> Option<Vec<(i16, u8)>> {
    if db != unsafe { pg_sys::MyDatabaseId }.to_u32() {
        return None;
    }
    // pg_filenode_relation takes 0 for the database's default tablespace
    let spc = if spc == unsafe { pg_sys::MyDatabaseTableSpace }.to_u32() {
        0
    } else {
        spc
    };
    let sql = format!(
        "SELECT attlen, attalign::text FROM pg_catalog.pg_attribute \
          WHERE attrelid = pg_catalog.pg_filenode_relation({spc}, {rel}) AND attnum > 0 \
          ORDER BY attnum"
    );
    Spi::connect(|c| {
        let rows = c.select(&sql, None, &[]).ok()?;
        let mut v = Vec::new();
        for r in rows {
            let len = r.get::<i16>(1).ok().flatten()?;
            let al = r.get::<String>(2).ok().flatten()?;
            v.push((len, *al.as_bytes().first()?));
        }
        (!v.is_empty()).then_some(v)
    })
}

/// A setting's value as text (NULL when the server has no such setting).
fn setting(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).expect("no NUL");
    unsafe {
        let p = pg_sys::GetConfigOption(c.as_ptr(), true, false);
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// Counts the next decode of logical slot `slot_name`: from its restart_lsn, through
/// the first record ending at or after `upto` or the flush position now, with
/// `logical_decoding_work_mem` = `work_mem_kb` (the server's setting when None) and the
/// consumer streaming or not. With `on_ended`, each transaction's account is handed to it
/// as the transaction ends (in the order they end), and those still open at the end are
/// kept in [`BacklogRun::open`]: what is held does not grow with the transactions ended.
///
/// Errors: `undefined_object` (42704) for no such slot; `object_not_in_prerequisite_state`
/// (55000) for a physical slot, one still being created or without restart_lsn;
/// `invalid_parameter_value` (22023) for `work_mem_kb` below 64; as `snapbuild_trace` for
/// removed WAL or broken `.snap` files.
pub fn run(
    slot_name: &str,
    upto: Option<Lsn>,
    work_mem_kb: Option<i32>,
    streaming: bool,
    mut on_ended: Option<&mut dyn FnMut(TxnAccount)>,
) -> BacklogRun {
    let slot = context::input::created_logical_slot(slot_name);
    let work_mem_kb = match work_mem_kb {
        Some(k) if k < 64 => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "work_mem_kb must be at least 64 (logical_decoding_work_mem's minimum), not {k}"
            ),
        ),
        Some(k) => k,
        None => unsafe { pg_sys::logical_decoding_work_mem },
    };
    let major = crate::adapter::server_version().major;
    let rules = MemoryRules {
        major,
        sizes: struct_sizes(),
        work_mem_bytes: work_mem_kb as u64 * 1024,
        streaming,
        immediate: setting("debug_logical_replication_streaming").as_deref() == Some("immediate"),
        xid_status: Some(xid_status),
        relation_layout: Some(relation_layout),
    };
    let input = context::input::for_slot_copy(slot.clone(), false);
    let decoded_from = input.start;
    let mut ctx = DecodingContext::start(input);
    ctx.count_reorder_memory(rules);
    let end_of_wal = flush_lsn();
    let mut summary = CostSummary::default();
    let mut take = |ctx: &mut DecodingContext| {
        if let Some(m) = ctx.reorder_memory() {
            for a in m.ended.drain(..) {
                summary.add(&a);
                if let Some(f) = on_ended.as_mut() {
                    f(a);
                }
            }
        }
    };
    // As pg_logical_slot_get_changes: through the first record ending at or after upto,
    // or after the flush position seen at the start. Records are read in batches up to
    // there, then the one that crosses it alone.
    let target = upto.map_or(end_of_wal, |u| u.min(end_of_wal));
    ctx.read_heads_in_batches();
    while ctx.next_row_or_raise(Some(target)).is_some() {
        take(&mut ctx);
        if ctx.last_end >= target {
            break;
        }
    }
    if ctx.records == 0 || ctx.last_end < target {
        ctx.stop_batches();
        while ctx.next_row_or_raise(None).is_some() {
            take(&mut ctx);
            if ctx.last_end >= target {
                break;
            }
        }
    }
    take(&mut ctx);
    let (decoded_to, records) = if ctx.records > 0 {
        (ctx.last_end, ctx.records)
    } else {
        (Lsn(0), 0)
    };
    let m = ctx.reorder_memory().expect("set above");
    let open = m.open_accounts();
    let (stats, peak, undecided) = (m.stats, m.peak, m.undecided.clone());
    let keep_open = on_ended.is_some();
    let mut kept = Vec::new();
    for mut a in open {
        if a.outcome != TxnOutcome::Prepared {
            a.outcome = TxnOutcome::InProgress;
        }
        summary.add(&a);
        if keep_open {
            kept.push(a);
        }
    }
    BacklogRun {
        slot,
        decoded_from,
        decoded_to,
        records,
        stats,
        summary,
        peak,
        undecided,
        open: kept,
        work_mem_kb,
        streaming,
    }
}
