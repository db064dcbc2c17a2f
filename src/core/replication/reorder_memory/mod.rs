//! Re-runs reorderbuffer.c's memory accounting and what it drives: every change queued
//! into a transaction (ReorderBufferQueueChange) is counted as ReorderBufferChangeSize
//! says (ReorderBufferChangeMemoryUpdate), the largest transaction is spilled to disk or
//! streamed when `logical_decoding_work_mem` is reached (ReorderBufferCheckMemoryLimit,
//! ReorderBufferSerializeTXN, ReorderBufferStreamTXN), and a transaction replayed at its
//! commit adds what ReorderBufferProcessTXN adds to the statistics (`process.rs`). The
//! result is the eight counters `pg_stat_replication_slots` shows ([`DecodingStats`]) and,
//! per top-level transaction, what the decoder did with it ([`TxnAccount`]).
//!
//! [`ReorderMemory`] is fed by the replay (the reorder-buffer model of reorderbuffer.rs
//! forwards the reorder-buffer calls decode.c and snapbuild.c make) and keeps only the
//! transactions in progress: an ended one leaves its [`TxnAccount`] in
//! [`ReorderMemory::ended`] for the caller to take.

mod account;
pub mod change;
mod process;
pub mod toast;

pub use account::{CostSummary, TxnAccount, TxnOutcome};

use rustc_hash::FxHashMap as HashMap;

use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
pub use change::{Change, ChangeAction, ChangeKind, ChangeRecord, RecordChange, StructSizes};

/// `max_changes_in_memory`: changes restored from disk at a time.
pub const MAX_CHANGES_IN_MEMORY: usize = 4096;

/// A transaction's state in the server now (TransactionIdIsInProgress,
/// TransactionIdDidCommit), as ReorderBufferCheckAndTruncateAbortedTXN asks (18+).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidStatus {
    InProgress,
    Committed,
    /// Neither in progress nor committed: aborted, or ended by a crash.
    Aborted,
}

/// What the decoder is set up with: the server's struct sizes, the memory limit and the
/// consumer's streaming choice, and the rules of the major that differ.
#[derive(Clone, Debug)]
pub struct MemoryRules {
    pub major: u32,
    pub sizes: StructSizes,
    /// `logical_decoding_work_mem`, in bytes.
    pub work_mem_bytes: u64,
    /// `ctx->streaming`: the plugin can stream and the consumer asked for it.
    pub streaming: bool,
    /// `debug_logical_replication_streaming = immediate` (16+).
    pub immediate: bool,
    /// The transaction's state now, for 18's ReorderBufferCheckAndTruncateAbortedTXN;
    /// `None` treats every transaction as in progress.
    pub xid_status: Option<fn(TransactionId) -> XidStatus>,
    /// The attributes (`attlen`, `attalign`) of the relation of tablespace, database and
    /// relfilenumber, for ReorderBufferToastReplace's rebuilt rows; `None` (or a `None`
    /// answer) leaves a change whose size depends on them undecided.
    pub relation_layout: Option<fn(u32, u32, u32) -> Option<Vec<toast::AttLayout>>>,
}

/// The eight counters of `pg_stat_replication_slots` one decode adds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DecodingStats {
    pub spill_txns: u64,
    pub spill_count: u64,
    pub spill_bytes: u64,
    pub stream_txns: u64,
    pub stream_count: u64,
    pub stream_bytes: u64,
    pub total_txns: u64,
    pub total_bytes: u64,
}

/// A (sub)transaction's memory state: `ReorderBufferTXN`'s fields the accounting uses.
#[derive(Clone, Debug, Default)]
struct MemTxn {
    /// `toplevel_xid` once known to be a subtransaction.
    top: Option<TransactionId>,
    /// Subtransactions (for a top-level one).
    subs: Vec<TransactionId>,
    /// `size`: bytes of its changes in memory.
    size: u64,
    /// `total_size` (top-level): bytes in memory of it and its subtransactions.
    total_size: u64,
    /// Its changes in memory, in order (`txn->changes`).
    changes: Vec<Change>,
    /// Its changes spilled to disk, in order, kept as the replay will read them back.
    spilled: process::Spilled,
    serialized: bool,
    serialized_clear: bool,
    streamed: bool,
    has_streamable: bool,
    has_partial: bool,
    aborted: bool,
    committed: bool,
    prepared: bool,
    /// A base snapshot (set on the top-level transaction).
    base_snapshot: bool,
    /// `snapshot_now` is set: streamed at least once with a snapshot.
    stream_snapshot: bool,
    /// Order of first appearance (`first_lsn` order), for `toplevel_by_lsn`.
    seq: u64,
    /// Base-snapshot order (`txns_by_base_snapshot_lsn`).
    base_seq: u64,
    /// Invalidation messages of its own XLOG_XACT_INVALIDATIONS records (top-level).
    own_invalidations: u64,
    /// The TOAST values whose chunks wait for their row (top-level: `toast_hash`).
    toast_waiting: rustc_hash::FxHashSet<u32>,
    /// The account of a top-level transaction.
    account: Option<Box<TxnAccount>>,
}

impl MemTxn {
    /// `nentries`: its changes, in memory and on disk.
    fn nentries(&self) -> usize {
        self.changes.len() + self.spilled.count
    }
}

/// reorderbuffer.c's memory accounting over the transactions in progress.
#[derive(Clone, Debug)]
pub struct ReorderMemory {
    pub rules: MemoryRules,
    txns: HashMap<TransactionId, MemTxn>,
    next_seq: u64,
    /// `rb->size`.
    pub size: u64,
    /// The largest `rb->size` seen.
    pub peak: u64,
    pub stats: DecodingStats,
    /// Accounts of transactions that ended since the caller last took them.
    pub ended: Vec<TxnAccount>,
    /// Why the counters cannot be told (the server's choice depends on what the replay
    /// cannot know), the first reason met.
    pub undecided: Option<String>,
    /// The relations' attributes looked up so far (by tablespace, database and
    /// relfilenumber).
    layouts: HashMap<(u32, u32, u32), Option<Vec<toast::AttLayout>>>,
    /// The record being decoded: (start, end), for ReorderBufferCanStartStreaming.
    pub at: (Lsn, Lsn),
    /// The builder is CONSISTENT and `at` is not before start_decoding_at: streaming may
    /// start (set by the replay before each record).
    pub can_start_streaming: bool,
}

impl ReorderMemory {
    pub fn new(rules: MemoryRules) -> Self {
        ReorderMemory {
            rules,
            txns: HashMap::default(),
            next_seq: 0,
            size: 0,
            peak: 0,
            stats: DecodingStats::default(),
            ended: Vec::new(),
            undecided: None,
            layouts: HashMap::default(),
            at: (Lsn(0), Lsn(0)),
            can_start_streaming: false,
        }
    }

    fn undecide(&mut self, why: String) {
        if self.undecided.is_none() {
            self.undecided = Some(why);
        }
    }

    fn limit(&self) -> u64 {
        self.rules.work_mem_bytes
    }

    /// ReorderBufferTXNByXid with `create`: the transaction, made if new.
    fn txn(&mut self, xid: TransactionId, lsn: Lsn) -> &mut MemTxn {
        let seq = &mut self.next_seq;
        self.txns.entry(xid).or_insert_with(|| {
            *seq += 1;
            MemTxn {
                seq: *seq,
                account: Some(Box::new(TxnAccount::new(xid, lsn))),
                ..MemTxn::default()
            }
        })
    }

    fn top_of(&self, xid: TransactionId) -> TransactionId {
        self.txns.get(&xid).and_then(|t| t.top).unwrap_or(xid)
    }

    /// Re-runs reorderbuffer.c ReorderBufferProcessXid.
    pub fn process_xid(&mut self, xid: TransactionId, lsn: Lsn) {
        if transam::is_valid(xid) {
            self.txn(xid, lsn);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferAssignChild: `sub` becomes a subtransaction
    /// of `top` (its sizes stay where they were counted).
    pub fn assign_child(&mut self, top: TransactionId, sub: TransactionId, lsn: Lsn) {
        // WAL names top-level transactions as parents; a parent known as a subtransaction
        // (only in damaged WAL) stands for its own parent, so that one level is kept
        let top = self.top_of(top);
        if !transam::is_valid(sub) || sub == top {
            return;
        }
        self.txn(top, lsn);
        let s = self.txn(sub, lsn);
        if s.top.is_some() {
            return;
        }
        s.top = Some(top);
        let had_base = std::mem::take(&mut s.base_snapshot);
        let base_seq = s.base_seq;
        let acc = s.account.take();
        // a former top-level transaction's own subtransactions (damaged WAL again) go
        // with it to the new parent
        let grandchildren = std::mem::take(&mut s.subs);
        for g in &grandchildren {
            if let Some(gt) = self.txns.get_mut(g) {
                gt.top = Some(top);
            }
        }
        let Some(t) = self.txns.get_mut(&top) else {
            return;
        };
        t.subs.push(sub);
        t.subs.extend(grandchildren);
        // ReorderBufferTransferSnapToParent
        if had_base && (!t.base_snapshot || base_seq < t.base_seq) {
            t.base_snapshot = true;
            t.base_seq = base_seq;
        }
        if let (Some(a), Some(ta)) = (acc, t.account.as_mut()) {
            ta.first_lsn = ta.first_lsn.min(a.first_lsn);
            for (k, n) in a.changes.iter().enumerate() {
                ta.changes[k] += n;
            }
            ta.queued_bytes += a.queued_bytes;
            ta.wal_bytes += a.wal_bytes;
            ta.spill_count += a.spill_count;
            ta.spill_bytes += a.spill_bytes;
            ta.spilled |= a.spilled;
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferSetBaseSnapshot for `xid` (its top-level
    /// transaction when known).
    pub fn set_base_snapshot(&mut self, xid: TransactionId, lsn: Lsn) {
        let top = self.top_of(xid);
        self.next_seq += 1;
        let seq = self.next_seq;
        let t = self.txn(top, lsn);
        if !t.base_snapshot {
            t.base_snapshot = true;
            t.base_seq = seq;
        }
    }

    fn has_base_snapshot(&self, xid: TransactionId) -> bool {
        self.txns
            .get(&self.top_of(xid))
            .is_some_and(|t| t.base_snapshot)
    }

    /// ReorderBufferChangeMemoryUpdate: `delta` bytes more (or fewer) in `xid`.
    fn memory_update(&mut self, xid: TransactionId, delta: i64) {
        if delta == 0 {
            return;
        }
        let top = self.top_of(xid);
        let t = self.txns.get_mut(&xid).expect("known");
        t.size = t.size.saturating_add_signed(delta);
        self.size = self.size.saturating_add_signed(delta);
        if let Some(tt) = self.txns.get_mut(&top) {
            tt.total_size = tt.total_size.saturating_add_signed(delta);
        }
        self.peak = self.peak.max(self.size);
    }

    /// Re-runs reorderbuffer.c ReorderBufferQueueChange: `change` goes to `xid`, then the
    /// partial-change bookkeeping and the memory limit.
    pub fn queue_change(
        &mut self,
        xid: TransactionId,
        lsn: Lsn,
        change: Change,
        toast_insert: bool,
    ) {
        let size = change.size;
        let t = self.txn(xid, lsn);
        if t.aborted {
            return;
        }
        t.changes.push(change);
        t.size += size;
        // the top-level transaction's counters: this one's, or its parent's
        let top = match t.top {
            None => t,
            Some(top) => self.txns.get_mut(&top).expect("a parent is known"),
        };
        top.total_size += size;
        if change.action.streamable() {
            top.has_streamable = true;
        }
        if let Some(a) = top.account.as_mut() {
            a.changes[change.action.kind() as usize] += 1;
            a.queued_bytes += size;
        }
        // ReorderBufferChangeMemoryUpdate's part in the reorder buffer
        self.size += size;
        self.peak = self.peak.max(self.size);
        if self.rules.streaming {
            self.process_partial_change(xid, &change, toast_insert);
        }
        if self.rules.immediate || self.size >= self.limit() {
            self.check_memory_limit();
        }
    }

    /// What ReorderBufferToastReplace will add to the size of change `rc` of record `rec`
    /// of `xid` when it is replayed (see `toast.rs`), keeping track of the TOAST values
    /// whose chunks wait for their row (in queue order, which is the replay's order).
    pub fn toast_growth(
        &mut self,
        xid: TransactionId,
        lsn: Lsn,
        rec: &ChangeRecord,
        rc: &RecordChange,
    ) -> i64 {
        let top = self.txn(xid, lsn).top.unwrap_or(xid);
        let Some(t) = self.txns.get_mut(&top) else {
            return 0;
        };
        if let Some(id) = rc.toast_chunk_id {
            t.toast_waiting.insert(id);
            return 0;
        }
        if t.toast_waiting.is_empty() {
            // nothing to rebuild, nothing to reset
            return 0;
        }
        let resets = match rc.action {
            ChangeAction::Insert | ChangeAction::Update | ChangeAction::SpecInsert => {
                rc.new_len.is_some() && rc.clear_toast
            }
            // a TOAST chunk deleted carries no key: only a table's row resets
            ChangeAction::Delete => rc.old_len.is_some() && rc.clear_toast,
            _ => false,
        };
        let mut growth = 0;
        if rc.new_len.is_some() {
            if let Some(t) = &rc.tuple {
                let key = (rec.spc_oid, rec.db_oid, rec.relfilenumber);
                if !self.layouts.contains_key(&key) {
                    let l = self
                        .rules
                        .relation_layout
                        .and_then(|f| f(key.0, key.1, key.2));
                    self.layouts.insert(key, l);
                }
                match &self.layouts[&key] {
                    Some(layout) => {
                        match toast::toast_replace_growth(t, layout, &self.txns[&top].toast_waiting) {
                            Ok(g) => growth = g,
                            Err(why) => self.undecide(format!(
                                "the row at {lsn} is rebuilt with its TOAST values and its size cannot be told: {why}"
                            )),
                        }
                    }
                    None => self.undecide(format!(
                        "the row at {lsn} is rebuilt with its TOAST values, and its relation (relfilenode {}) cannot be looked up in this database",
                        key.2
                    )),
                }
            }
        }
        if resets {
            self.txns
                .get_mut(&top)
                .expect("known")
                .toast_waiting
                .clear();
        }
        growth
    }

    /// Re-runs reorderbuffer.c ReorderBufferProcessPartialChange.
    fn process_partial_change(&mut self, xid: TransactionId, c: &Change, toast_insert: bool) {
        if !self.rules.streaming {
            return;
        }
        let top = self.top_of(xid);
        let t = self.txns.get_mut(&top).expect("known");
        if toast_insert {
            t.has_partial = true;
        } else if t.has_partial
            && matches!(c.action, ChangeAction::Insert | ChangeAction::Update)
            && c.clear_toast
        {
            t.has_partial = false;
        }
        if c.action == ChangeAction::SpecInsert {
            t.has_partial = true;
        } else if t.has_partial
            && matches!(
                c.action,
                ChangeAction::SpecConfirm | ChangeAction::SpecAbort
            )
        {
            t.has_partial = false;
        }
        let serialized = self.txns[&xid].serialized;
        let t = &self.txns[&top];
        let streamable = self.rules.major < 16 || t.has_streamable;
        if self.can_start_streaming && !t.has_partial && serialized && streamable {
            self.stream_txn(top);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferCheckMemoryLimit.
    fn check_memory_limit(&mut self) {
        let limit = self.limit();
        if !self.rules.immediate && self.size < limit {
            return;
        }
        let mut guard = 0u32;
        while self.size >= limit || (self.rules.immediate && self.size > 0) {
            guard += 1;
            if guard > 100_000 {
                self.undecide("the eviction loop did not end".into());
                return;
            }
            let streamable = if self.can_start_streaming && self.rules.streaming {
                self.largest_streamable_top()
            } else {
                None
            };
            if let Some(t) = streamable {
                if self.check_and_truncate_aborted(t) {
                    continue;
                }
                self.stream_txn(t);
            } else {
                let Some(t) = self.largest_txn() else {
                    self.undecide("memory counted with no transaction holding it".into());
                    self.size = 0;
                    return;
                };
                if self.check_and_truncate_aborted(t) {
                    continue;
                }
                self.serialize_txn(t);
            }
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferLargestTXN: the (sub)transaction using the
    /// most memory. Two of the same size: the server's pick depends on its hash table
    /// (14–16) or heap (17+) order, which the replay does not know: undecided.
    fn largest_txn(&mut self) -> Option<TransactionId> {
        let mut best: Option<(u64, TransactionId)> = None;
        let mut tie = false;
        for (x, t) in &self.txns {
            if t.size == 0 {
                continue;
            }
            match best {
                Some((s, _)) if t.size < s => {}
                Some((s, b)) if t.size == s => {
                    tie = true;
                    if *x < b {
                        best = Some((s, *x));
                    }
                }
                _ => {
                    best = Some((t.size, *x));
                    tie = false;
                }
            }
        }
        if tie {
            if let Some((s, _)) = best {
                self.undecide(format!(
                    "two transactions of {s} bytes were the largest when the memory limit was \
                     reached: which one the server spills depends on its hash table"
                ));
            }
        }
        best.map(|b| b.1)
    }

    /// Re-runs reorderbuffer.c ReorderBufferLargestStreamableTopTXN (16+;
    /// ReorderBufferLargestTopTXN on 14 and 15, which also takes a transaction without a
    /// streamable change): the first in base-snapshot order of the largest wins.
    fn largest_streamable_top(&self) -> Option<TransactionId> {
        let mut cands: Vec<(&TransactionId, &MemTxn)> = self
            .txns
            .iter()
            .filter(|(_, t)| t.top.is_none() && t.base_snapshot)
            .collect();
        cands.sort_by_key(|(_, t)| t.base_seq);
        let mut best: Option<(u64, TransactionId)> = None;
        for (x, t) in cands {
            // 14 and 15 (ReorderBufferLargestTopTXN) do not ask for a streamable change
            if t.has_partial || (self.rules.major >= 16 && !t.has_streamable) || t.aborted {
                continue;
            }
            if t.total_size > 0 && best.is_none_or(|(s, _)| t.total_size > s) {
                best = Some((t.total_size, *x));
            }
        }
        best.map(|b| b.1)
    }

    /// Re-runs reorderbuffer.c ReorderBufferCheckAndTruncateAbortedTXN (18+): an aborted
    /// transaction's changes are dropped instead of evicted.
    fn check_and_truncate_aborted(&mut self, xid: TransactionId) -> bool {
        if self.rules.major < 18 || self.rules.immediate {
            return false;
        }
        let t = &self.txns[&xid];
        if t.committed {
            return false;
        }
        if t.aborted {
            return true;
        }
        match self.rules.xid_status.map(|f| f(xid)) {
            None | Some(XidStatus::InProgress) => false,
            Some(XidStatus::Committed) => {
                self.txns.get_mut(&xid).expect("known").committed = true;
                false
            }
            Some(XidStatus::Aborted) => {
                self.truncate(xid, false);
                self.txns.get_mut(&xid).expect("known").aborted = true;
                true
            }
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferTruncateTXN: every change of `xid` and its
    /// subtransactions is let go of (memory given back, no statistics).
    fn truncate(&mut self, xid: TransactionId, mark_streamed: bool) {
        let subs = self.txns[&xid].subs.clone();
        for s in subs {
            if self.txns.contains_key(&s) {
                self.truncate(s, mark_streamed);
            }
        }
        let size = self.txns[&xid].size;
        self.memory_update(xid, -(size as i64));
        let is_top = self.txns[&xid].top.is_none();
        let t = self.txns.get_mut(&xid).expect("known");
        let had = !t.changes.is_empty();
        t.changes.clear();
        t.spilled = process::Spilled::default();
        if t.serialized {
            t.serialized = false;
            t.serialized_clear = true;
        }
        if mark_streamed && (is_top || had) {
            t.streamed = true;
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferSerializeTXN: `xid`'s subtransactions, then
    /// its own changes in memory, go to disk; the statistics count a spill per
    /// (sub)transaction that had any.
    fn serialize_txn(&mut self, xid: TransactionId) {
        let size = self.txns[&xid].size;
        let subs = self.txns[&xid].subs.clone();
        for s in subs {
            if self.txns.contains_key(&s) {
                self.serialize_txn(s);
            }
        }
        let top = self.top_of(xid);
        let t = self.txns.get_mut(&xid).expect("known");
        let spilled = t.changes.len();
        t.spilled.append(std::mem::take(&mut t.changes));
        let first_time = !(t.serialized || t.serialized_clear);
        t.serialized = true;
        self.memory_update(xid, -(size as i64));
        if spilled > 0 {
            self.stats.spill_count += 1;
            self.stats.spill_bytes += size;
            if first_time {
                self.stats.spill_txns += 1;
            }
            if let Some(a) = self.txns.get_mut(&top).and_then(|t| t.account.as_mut()) {
                a.spill_count += 1;
                a.spill_bytes += size;
                a.spilled = true;
            }
        }
    }

    /// Whether top-level `xid` or one of its subtransactions holding changes has been
    /// rolled back by now: replaying it before its end (streaming, or at PREPARE), the
    /// server stops at the first catalog access that notices (SetupCheckXidLive, a
    /// "concurrent abort") and counts nothing for it; whether such an access happens
    /// depends on the decoding backend's caches, which the replay does not know.
    fn rolled_back_now(&self, xid: TransactionId) -> Option<TransactionId> {
        let status = self.rules.xid_status?;
        let t = self.txns.get(&xid)?;
        std::iter::once(xid)
            .chain(t.subs.iter().copied())
            .filter(|x| self.txns.get(x).is_some_and(|t| t.nentries() > 0))
            .find(|x| status(*x) == XidStatus::Aborted)
    }

    /// Re-runs reorderbuffer.c ReorderBufferStreamTXN for top-level `xid`.
    fn stream_txn(&mut self, xid: TransactionId) {
        if let Some(x) = self.rolled_back_now(xid) {
            self.undecide(format!(
                "transaction {x} is streamed before its end but has been rolled back since: the \
                 server stops streaming it at its first catalog access (a concurrent abort), \
                 which depends on the decoder's caches"
            ));
        }
        let t = &self.txns[&xid];
        if !t.stream_snapshot {
            if !t.base_snapshot {
                return;
            }
            self.txns.get_mut(&xid).expect("known").stream_snapshot = true;
        }
        let t = &self.txns[&xid];
        let was_streamed = t.streamed;
        let stream_bytes = t.total_size;
        self.process_txn(xid, true);
        self.stats.stream_count += 1;
        self.stats.stream_bytes += stream_bytes;
        if !was_streamed {
            self.stats.stream_txns += 1;
        }
        if let Some(a) = self.txns.get_mut(&xid).and_then(|t| t.account.as_mut()) {
            a.stream_count += 1;
            a.stream_bytes += stream_bytes;
            a.streamed = true;
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferAddSnapshot and ReorderBufferQueueInvalidations
    /// for SnapBuildDistributeSnapshotAndInval: the new snapshot of `xcnt` committed xids
    /// to every top-level transaction with a base snapshot (not prepared), and the
    /// committing transaction's `ninval` invalidation messages to each but itself.
    pub fn distribute_snapshot(&mut self, lsn: Lsn, committing: TransactionId, xcnt: u64) {
        let mut tops: Vec<(u64, TransactionId)> = self
            .txns
            .iter()
            .filter(|(_, t)| t.top.is_none() && t.base_snapshot && !t.prepared)
            .map(|(x, t)| (t.seq, *x))
            .collect();
        tops.sort_unstable();
        let ninval = self.invalidations_of(committing);
        let s = self.rules.sizes;
        for (_, x) in tops {
            let snap = Change::plain(ChangeAction::Snapshot, s.change + s.snapshot + 4 * xcnt);
            self.queue_change(x, lsn, snap, false);
            if x != committing && ninval > 0 {
                let inv = Change::plain(
                    ChangeAction::Invalidation,
                    s.change + s.inval_message * ninval,
                );
                self.queue_change(x, lsn, inv, false);
            }
        }
    }

    /// The invalidation messages `xid`'s top-level transaction collected from its
    /// XLOG_XACT_INVALIDATIONS records (ReorderBufferGetInvalidations).
    fn invalidations_of(&self, xid: TransactionId) -> u64 {
        self.txns
            .get(&self.top_of(xid))
            .map_or(0, |t| t.own_invalidations)
    }

    /// Re-runs reorderbuffer.c ReorderBufferAddInvalidations for an
    /// XLOG_XACT_INVALIDATIONS record of `nmsgs` messages.
    pub fn add_invalidations(&mut self, xid: TransactionId, lsn: Lsn, nmsgs: u64) {
        self.txn(xid, lsn);
        let top = self.top_of(xid);
        self.txns.get_mut(&top).expect("known").own_invalidations += nmsgs;
        let s = self.rules.sizes;
        let c = Change::plain(
            ChangeAction::Invalidation,
            s.change + s.inval_message * nmsgs,
        );
        self.queue_change(xid, lsn, c, false);
    }

    /// Remembers a prepared transaction (ReorderBufferRememberPrepareInfo).
    pub fn mark_prepared(&mut self, xid: TransactionId) {
        if let Some(t) = self.txns.get_mut(&xid) {
            t.prepared = true;
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferReplay for top-level `xid` ended by the record
    /// `[lsn, end)`: replayed (ReorderBufferProcessTXN, or the last stream and stream
    /// commit of a streamed one), counted in the statistics when it has a base snapshot.
    /// With `keep` (a PREPARE) the transaction stays, its changes let go of.
    pub fn replay(
        &mut self,
        xid: TransactionId,
        lsn: Lsn,
        end: Lsn,
        outcome: TxnOutcome,
        keep: bool,
    ) {
        if !self.txns.contains_key(&xid) {
            return;
        }
        if !self.has_base_snapshot(xid) {
            self.finish(xid, Some(lsn), TxnOutcome::NoChanges);
            return;
        }
        if keep {
            if let Some(x) = self.rolled_back_now(xid) {
                self.undecide(format!(
                    "prepared transaction {x} has been rolled back since its PREPARE: the server \
                     stops decoding it at its first catalog access (a concurrent abort), which \
                     depends on the decoder's caches"
                ));
            }
        }
        if self.txns[&xid].streamed {
            self.stream_txn(xid);
        } else {
            self.process_txn(xid, false);
        }
        let _ = end;
        if keep {
            self.truncate(xid, false);
            self.mark_prepared(xid);
            if let Some(a) = self.txns.get_mut(&xid).and_then(|t| t.account.as_mut()) {
                a.end_lsn = Some(lsn);
                a.outcome = outcome;
            }
        } else {
            self.finish(xid, Some(lsn), outcome);
        }
    }

    /// Lets go of top-level `xid` and its subtransactions (ReorderBufferCleanupTXN via
    /// commit, abort, forget or ReorderBufferAbortOld), its account to
    /// [`ReorderMemory::ended`].
    pub fn finish(&mut self, xid: TransactionId, end: Option<Lsn>, outcome: TxnOutcome) {
        let xid = self.top_of(xid);
        let Some(t) = self.txns.get(&xid) else {
            return;
        };
        let subs = t.subs.clone();
        let mut acc = None;
        for x in subs.iter().copied().chain(std::iter::once(xid)) {
            if let Some(t) = self.txns.get(&x) {
                let size = t.size;
                self.memory_update(x, -(size as i64));
            }
            if let Some(mut t) = self.txns.remove(&x) {
                if x == xid {
                    acc = t.account.take();
                }
            }
        }
        if let Some(mut a) = acc {
            if end.is_some() {
                a.end_lsn = end;
            }
            // a prepared transaction sent at PREPARE keeps that outcome
            if !(matches!(a.outcome, TxnOutcome::Prepared)
                && matches!(outcome, TxnOutcome::FinishedPrepared))
            {
                a.outcome = outcome;
            }
            a.subxacts = subs.len() as u32;
            self.ended.push(*a);
        }
    }

    /// Lets go of subtransaction `sub` alone (aborted on its own).
    pub fn forget_sub(&mut self, sub: TransactionId) {
        let Some(t) = self.txns.get(&sub) else {
            return;
        };
        let (top, size) = (t.top, t.size);
        if top.is_none() {
            return self.finish(sub, None, TxnOutcome::Aborted);
        }
        self.memory_update(sub, -(size as i64));
        self.txns.remove(&sub);
        if let Some(tt) = top.and_then(|x| self.txns.get_mut(&x)) {
            tt.subs.retain(|s| *s != sub);
        }
    }

    /// The transactions still open, their accounts as they stand.
    pub fn open_accounts(&self) -> Vec<TxnAccount> {
        let mut v: Vec<(u64, TxnAccount)> = self
            .txns
            .values()
            .filter(|t| t.top.is_none())
            .filter_map(|t| {
                t.account.as_ref().map(|a| {
                    let mut a = (**a).clone();
                    a.subxacts = t.subs.len() as u32;
                    (t.seq, a)
                })
            })
            .collect();
        v.sort_by_key(|e| e.0);
        v.into_iter().map(|e| e.1).collect()
    }

    /// Counts a record of `xid` (`bytes` long) to its top-level transaction.
    pub fn count_record(&mut self, xid: TransactionId, lsn: Lsn, bytes: u64) {
        if !transam::is_valid(xid) {
            return;
        }
        let t = self.txn(xid, lsn);
        let top = match t.top {
            None => t,
            Some(top) => self.txns.get_mut(&top).expect("a parent is known"),
        };
        if let Some(a) = top.account.as_mut() {
            a.wal_bytes += bytes;
        }
    }

    /// The database the ending record of `xid` names.
    pub fn set_database(&mut self, xid: TransactionId, db: u32) {
        let top = self.top_of(xid);
        if let Some(a) = self.txns.get_mut(&top).and_then(|t| t.account.as_mut()) {
            if db != 0 {
                a.database = db;
            }
        }
    }

    /// Whether the accounting holds `xid`.
    pub fn knows(&self, xid: TransactionId) -> bool {
        self.txns.contains_key(&xid)
    }

    /// Whether `xid` is known as a subtransaction.
    pub fn is_subxact(&self, xid: TransactionId) -> bool {
        self.txns.get(&xid).is_some_and(|t| t.top.is_some())
    }
}

#[cfg(test)]
mod tests;
