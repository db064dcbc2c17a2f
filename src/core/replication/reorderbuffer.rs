//! Re-runs the parts of replication/logical/reorderbuffer.c the snapshot builder and the
//! historic visibility rule depend on.
//!
//! * [`TupleCidHash`] and [`CidResolver`], the tuple-cid lookups, are in `tuplecid.rs`
//!   (re-exported here).
//! * [`ReorderModel`] is the slice of the reorder buffer that snapbuild.c consults and
//!   decode.c feeds: known transactions in first-LSN order, their subtransactions,
//!   catalog-change flags, base snapshots, prepare LSNs, NEW_CID tuple-cid lists and
//!   command ids.
//! * [`historic_view`] is the snapshot choice of ReorderBufferProcessTXN at one point of
//!   a transaction's replay (ReorderBufferCopySnap, ReorderBufferBuildTupleCidHash).

use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

use crate::include::reorderbuffer::TupleCid;
use crate::include::snapbuild::BuiltSnapshot;
use crate::include::snapshot::{CommandId, HistoricSnapshot};
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::reorder_memory::{Change, ChangeAction, ReorderMemory, TxnOutcome};
pub use crate::replication::tuplecid::{CidResolver, TupleCidHash};

/// A transaction as the reorder buffer knows it, as far as snapbuild.c cares.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Txn {
    /// Top-level xid if this is an assigned subtransaction.
    top: Option<TransactionId>,
    /// `RBTXN_HAS_CATALOG_CHANGES`.
    catalog_changes: bool,
    /// Assigned subtransactions (for top-level ones).
    subxacts: Vec<TransactionId>,
    /// Its key in `ReorderModel::toplevel` while top-level: the order of `first_lsn`,
    /// which records are read in.
    seq: u64,
    /// `restart_decoding_lsn`: the last serialization point before it began.
    restart_decoding_lsn: Lsn,
    /// `base_snapshot_lsn` and the xmin of `base_snapshot`, once a change was decoded.
    base_snapshot: Option<(Lsn, TransactionId)>,
    /// `tuplecids` (top-level transactions): the NEW_CID mappings, in record order.
    tuplecids: Vec<TupleCid>,
    /// The command ids queued for this (sub)transaction by ReorderBufferAddNewCommandId,
    /// with the LSN of the record that queued each.
    command_ids: Vec<(Lsn, CommandId)>,
    /// `final_lsn` as ReorderBufferRememberPrepareInfo sets it: the PREPARE record's LSN,
    /// once a two-phase decoder read it.
    prepare_lsn: Option<Lsn>,
}

/// How the reorder buffer last saw a transaction (for [`DecodingTxn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TxnStatus {
    /// Known and not yet finished.
    InProgress,
    /// Its commit (or COMMIT PREPARED) record was decoded at this LSN.
    Committed(Lsn),
    /// Its abort (or ROLLBACK PREPARED) record was decoded at this LSN.
    Aborted(Lsn),
    /// Dropped by ReorderBufferAbortOld at the RUNNING_XACTS record at this LSN.
    ForgottenAsOld(Lsn),
    /// No record of it was decoded.
    Unknown,
}

impl DecodingTxn {
    /// The command id ReorderBufferProcessTXN has reached once it replayed the
    /// transaction's changes up to and including the record at `upto`: the largest
    /// command-id change queued at or before it (replay keeps the running maximum),
    /// `None` before the first.
    pub fn command_id_upto(&self, upto: Lsn) -> Option<CommandId> {
        self.command_ids
            .iter()
            .filter(|c| c.0 <= upto)
            .map(|c| c.1)
            .max()
    }
}

impl TxnStatus {
    pub fn label(self) -> String {
        match self {
            TxnStatus::InProgress => "in progress".into(),
            TxnStatus::Committed(l) => format!("committed at {l}"),
            TxnStatus::Aborted(l) => format!("aborted at {l}"),
            TxnStatus::ForgottenAsOld(l) => format!("forgotten as old at {l}"),
            TxnStatus::Unknown => "unknown".into(),
        }
    }
}

/// What ReorderBufferProcessTXN would start from for one top-level transaction: the
/// inputs of ReorderBufferCopySnap and ReorderBufferBuildTupleCidHash.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DecodingTxn {
    /// The top-level xid (the one asked for, or its parent).
    pub top: TransactionId,
    /// Its subtransactions still attached (aborted ones are gone).
    pub subxacts: Vec<TransactionId>,
    /// The command ids queued for it and its attached subtransactions, with the LSN of
    /// the NEW_CID record that queued each (those of aborted subtransactions are gone
    /// with them), in LSN order.
    pub command_ids: Vec<(Lsn, CommandId)>,
    /// `RBTXN_HAS_CATALOG_CHANGES` of the top-level transaction.
    pub catalog_changes: bool,
    /// Its tuple-cid list.
    pub tuplecids: Vec<TupleCid>,
    pub status: TxnStatus,
}

/// The part of reorderbuffer.c the builder depends on: known transactions in
/// first-seen order, their subtransactions, catalog-change flags and base snapshots.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ReorderModel {
    /// Boxed: transactions come and go at every commit while a handful are known at
    /// once, and the hash table moves its values when it reclaims deleted slots; a
    /// pointer moves cheaply, a whole `Txn` does not.
    txns: HashMap<TransactionId, Box<Txn>>,
    /// Top-level xids in first-LSN order (`toplevel_by_lsn`), by a first-seen counter.
    toplevel: TopLevelOrder,
    next_seq: u64,
    /// Transactions let go of, kept for the next ones (a transaction comes and goes at
    /// nearly every commit): at most [`SPARE_TXNS`], none with large lists.
    // The boxes themselves are what is reused: `txns` holds boxes.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Txn>>,
    /// The transaction whose state is kept when the reorder buffer lets go of it, for a
    /// question asked about it later (a top-level xid or one of its subtransactions).
    /// `None` keeps nothing: the model then holds only what the server's reorder buffer
    /// holds, and a trace's memory does not grow with the WAL it reads.
    pub remember: Option<TransactionId>,
    /// `current_restart_decoding_lsn`: set at each serialization or restore.
    pub current_restart_decoding_lsn: Lsn,
    /// Top-level transactions the reorder buffer has let go of, as they were just before
    /// (commit, abort, ReorderBufferAbortOld), so that a later question about them can
    /// be answered; keyed by top-level xid, with their subtransactions pointing there.
    finished: HashMap<TransactionId, DecodingTxn>,
    finished_sub: HashMap<TransactionId, TransactionId>,
    /// Xids known to be in `txns` (most ReorderBufferProcessXid calls ask again for one
    /// of the few transactions in progress).
    known: XidCache,
    /// Xids whose top-level transaction is known to have a base snapshot.
    /// Both forget a transaction (and its subtransactions) when it is let go of, and
    /// everything when a subtransaction is assigned.
    based: XidCache,
    /// The memory accounting, when the replay counts what the decoder will hold and
    /// send (`snapbuild_backlog`, `snapbuild_decoding_cost`); never kept or shared.
    #[serde(skip)]
    pub memory: Option<Box<ReorderMemory>>,
}

/// Spare transactions kept at most (see `ReorderModel::spare`).
const SPARE_TXNS: usize = 32;

/// The top-level transactions in first-seen order: (sequence number, xid) in increasing
/// sequence order, where a removed one leaves a hole (xid 0) until the holes before it are
/// gone or the holes outnumber the transactions (then the queue is compacted). The first
/// entry is never a hole. Appending and asking for the first are O(1), removing one is
/// O(log n) (the server unlinks from a list in O(1)), and memory stays within twice the
/// transactions held.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct TopLevelOrder {
    queue: VecDeque<(u64, TransactionId)>,
    live: usize,
}

impl TopLevelOrder {
    /// Appends `xid` with a sequence number above every one held.
    fn push(&mut self, seq: u64, xid: TransactionId) {
        debug_assert!(transam::is_valid(xid));
        debug_assert!(self.queue.back().is_none_or(|b| b.0 < seq));
        self.queue.push_back((seq, xid));
        self.live += 1;
    }

    /// Removes the transaction of sequence number `seq`, if held.
    fn remove(&mut self, seq: u64) {
        // Transactions mostly end in about the order they began: the first one held is
        // the likeliest, and needs no search.
        let i = if self.queue.front().is_some_and(|e| e.0 == seq) {
            0
        } else {
            let Ok(i) = self.queue.binary_search_by_key(&seq, |e| e.0) else {
                return;
            };
            i
        };
        if !transam::is_valid(self.queue[i].1) {
            return;
        }
        self.queue[i].1 = 0;
        self.live -= 1;
        while self.queue.front().is_some_and(|e| !transam::is_valid(e.1)) {
            self.queue.pop_front();
        }
        if self.queue.len() > 2 * self.live + 64 {
            self.queue.retain(|e| transam::is_valid(e.1));
        }
    }

    /// The first transaction held.
    fn first(&self) -> Option<TransactionId> {
        self.queue.front().map(|e| e.1)
    }
}

/// A direct-mapped set of a few xids (slot `xid % 16`), a cache in front of the hash
/// table for the transactions in progress: `contains` may say false for a member, never
/// true for an xid that was not inserted (or was removed) since the last `clear`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct XidCache([TransactionId; 16]);

impl XidCache {
    #[inline]
    fn slot(x: TransactionId) -> usize {
        (x % 16) as usize
    }
    #[inline]
    fn contains(&self, x: TransactionId) -> bool {
        transam::is_valid(x) && self.0[Self::slot(x)] == x
    }
    #[inline]
    fn insert(&mut self, x: TransactionId) {
        self.0[Self::slot(x)] = x;
    }
    #[inline]
    fn remove(&mut self, x: TransactionId) {
        if self.0[Self::slot(x)] == x {
            self.0[Self::slot(x)] = 0;
        }
    }
    fn clear(&mut self) {
        self.0 = [0; 16];
    }
}

impl ReorderModel {
    /// Re-runs reorderbuffer.c ReorderBufferProcessXid: make sure `xid` is known
    /// (created with the current restart point; records arrive in LSN order, so a
    /// first-seen counter stands for `first_lsn`).
    pub fn process_xid(&mut self, xid: TransactionId, lsn: Lsn) {
        if !transam::is_valid(xid) {
            return;
        }
        if let Some(m) = self.memory.as_mut() {
            m.process_xid(xid, lsn);
        }
        if self.known.contains(xid) {
            return;
        }
        self.known.insert(xid);
        if let std::collections::hash_map::Entry::Vacant(v) = self.txns.entry(xid) {
            let seq = self.next_seq;
            self.next_seq += 1;
            let mut t = self.spare.pop().unwrap_or_default();
            t.seq = seq;
            t.restart_decoding_lsn = self.current_restart_decoding_lsn;
            v.insert(t);
            self.toplevel.push(seq, xid);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferAssignChild (with
    /// ReorderBufferTransferSnapToParent).
    pub fn assign_child(&mut self, top: TransactionId, sub: TransactionId, lsn: Lsn) {
        self.process_xid(top, lsn);
        if !transam::is_valid(sub) || sub == top {
            return;
        }
        if let Some(m) = self.memory.as_mut() {
            m.assign_child(top, sub, lsn);
        }
        match self.txns.get(&sub).map(|t| t.top) {
            Some(Some(_)) => return, // already a known subtransaction
            _ => {
                self.known.clear();
                self.based.clear();
            }
        }
        match self.txns.get(&sub).map(|t| t.top) {
            Some(Some(_)) => {}
            Some(None) => {
                if let Some(seq) = self.txns.get(&sub).map(|t| t.seq) {
                    self.toplevel.remove(seq);
                }
            }
            None => {
                let t = Txn {
                    restart_decoding_lsn: self.current_restart_decoding_lsn,
                    ..Txn::default()
                };
                self.txns.insert(sub, Box::new(t));
            }
        }
        let (sub_cat, sub_base) = match self.txns.get_mut(&sub) {
            Some(t) => {
                t.top = Some(top);
                (t.catalog_changes, t.base_snapshot.take())
            }
            None => (false, None),
        };
        if let Some(t) = self.txns.get_mut(&top) {
            t.subxacts.push(sub);
            if sub_cat {
                t.catalog_changes = true;
            }
            // The parent takes the subtransaction's base snapshot if it is older.
            if let Some(sb) = sub_base {
                if t.base_snapshot.is_none_or(|tb| sb.0 < tb.0) {
                    t.base_snapshot = Some(sb);
                }
            }
        }
    }

    fn toplevel_of(&self, x: TransactionId) -> TransactionId {
        self.txns.get(&x).and_then(|t| t.top).unwrap_or(x)
    }

    /// Re-runs reorderbuffer.c ReorderBufferXidHasBaseSnapshot (asked of the top-level
    /// transaction for a known subtransaction).
    pub fn has_base_snapshot(&self, x: TransactionId) -> bool {
        if self.based.contains(x) {
            return true;
        }
        let top = match self.txns.get(&x) {
            Some(t) if t.top.is_none() => return t.base_snapshot.is_some(),
            Some(t) => t.top.unwrap_or(x),
            None => x,
        };
        self.txns
            .get(&top)
            .is_some_and(|t| t.base_snapshot.is_some())
    }

    /// Re-runs reorderbuffer.c ReorderBufferSetBaseSnapshot.
    pub fn set_base_snapshot(&mut self, x: TransactionId, lsn: Lsn, snapshot_xmin: TransactionId) {
        self.process_xid(x, lsn);
        let top = self.toplevel_of(x);
        if let Some(t) = self.txns.get_mut(&top) {
            if t.base_snapshot.is_none() {
                if let Some(m) = self.memory.as_mut() {
                    m.set_base_snapshot(x, lsn);
                }
            }
            t.base_snapshot.get_or_insert((lsn, snapshot_xmin));
            self.based.insert(x);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferGetOldestXmin: the xmin of the oldest base
    /// snapshot held, if any.
    pub fn oldest_xmin(&self) -> Option<TransactionId> {
        self.txns
            .values()
            .filter_map(|t| t.base_snapshot)
            .min_by_key(|b| b.0)
            .map(|b| b.1)
    }

    /// The transaction ReorderBufferGetOldestXmin takes its answer from (the oldest base
    /// snapshot, `txns_by_base_snapshot_lsn`'s head): (its xid, the snapshot's xmin).
    pub fn oldest_base_snapshot(&self) -> Option<(TransactionId, TransactionId)> {
        self.txns
            .iter()
            .filter_map(|(x, t)| t.base_snapshot.map(|b| (b.0, *x, b.1)))
            .min_by_key(|(l, x, _)| (l.0, *x))
            .map(|(_, x, xmin)| (x, xmin))
    }

    /// Re-runs reorderbuffer.c ReorderBufferGetOldestTXN: the top-level transaction with
    /// the lowest first_lsn, as (xid, restart_decoding_lsn).
    pub fn oldest_txn(&self) -> Option<(TransactionId, Lsn)> {
        let x = self.toplevel.first()?;
        self.txns.get(&x).map(|t| (x, t.restart_decoding_lsn))
    }

    /// Re-runs reorderbuffer.c ReorderBufferXidSetCatalogChanges: flags `xid` and,
    /// for a subtransaction, its top-level transaction.
    pub fn set_catalog_changes(&mut self, xid: TransactionId, lsn: Lsn) {
        self.process_xid(xid, lsn);
        let top = self.txns.get(&xid).and_then(|t| t.top);
        if let Some(t) = self.txns.get_mut(&xid) {
            t.catalog_changes = true;
        }
        if let Some(top) = top {
            if let Some(t) = self.txns.get_mut(&top) {
                t.catalog_changes = true;
            }
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferXidHasCatalogChanges.
    pub fn has_catalog_changes(&self, xid: TransactionId) -> bool {
        self.txns.get(&xid).is_some_and(|t| t.catalog_changes)
    }

    /// Whether `xid` is known at all (ReorderBufferTXNByXid without create).
    pub fn knows(&self, xid: TransactionId) -> bool {
        self.txns.contains_key(&xid)
    }

    /// Re-runs reorderbuffer.c ReorderBufferRememberPrepareInfo: a known transaction
    /// remembers its PREPARE record's LSN; false (nothing done) when `xid` is unknown.
    pub fn remember_prepare_info(&mut self, xid: TransactionId, lsn: Lsn) -> bool {
        match self.txns.get_mut(&xid) {
            Some(t) => {
                t.prepare_lsn = Some(lsn);
                if let Some(m) = self.memory.as_mut() {
                    m.mark_prepared(xid);
                }
                true
            }
            None => false,
        }
    }

    /// The PREPARE LSN a two-phase decoder remembered for `xid` (`final_lsn`, invalid
    /// when it never read the PREPARE).
    pub fn prepare_lsn(&self, xid: TransactionId) -> Lsn {
        self.txns
            .get(&xid)
            .and_then(|t| t.prepare_lsn)
            .unwrap_or(Lsn(0))
    }

    /// Re-runs reorderbuffer.c ReorderBufferCleanupTXN for `xid` (and its subxacts).
    pub fn cleanup(&mut self, xid: TransactionId) {
        self.known.remove(xid);
        self.based.remove(xid);
        if let Some(t) = self.txns.remove(&xid) {
            for &s in &t.subxacts {
                self.known.remove(s);
                self.based.remove(s);
                if let Some(st) = self.txns.remove(&s) {
                    self.recycle(st);
                }
            }
            match t.top {
                Some(top) => {
                    if let Some(tt) = self.txns.get_mut(&top) {
                        tt.subxacts.retain(|x| *x != xid);
                    }
                }
                None => {
                    self.toplevel.remove(t.seq);
                }
            }
            self.recycle(t);
        }
    }

    /// Keeps a transaction let go of for reuse (its lists emptied), unless enough are
    /// kept or its lists are large.
    fn recycle(&mut self, mut t: Box<Txn>) {
        const SMALL: usize = 16;
        if self.spare.len() >= SPARE_TXNS
            || t.subxacts.capacity() > SMALL
            || t.tuplecids.capacity() > SMALL
            || t.command_ids.capacity() > SMALL
        {
            return;
        }
        let mut subxacts = std::mem::take(&mut t.subxacts);
        let mut tuplecids = std::mem::take(&mut t.tuplecids);
        let mut command_ids = std::mem::take(&mut t.command_ids);
        subxacts.clear();
        tuplecids.clear();
        command_ids.clear();
        *t = Txn {
            subxacts,
            tuplecids,
            command_ids,
            ..Txn::default()
        };
        self.spare.push(t);
    }

    /// Re-runs reorderbuffer.c ReorderBufferAddNewTupleCids: append a NEW_CID mapping to
    /// the list of top-level transaction `top` (created if unknown).
    pub fn add_new_tuple_cids(&mut self, top: TransactionId, lsn: Lsn, c: TupleCid) {
        if !transam::is_valid(top) {
            return;
        }
        self.process_xid(top, lsn);
        if let Some(t) = self.txns.get_mut(&top) {
            t.tuplecids.push(c);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferAddNewCommandId: queue command id `cid` for
    /// `xid` (its own queue, merged into the top level's at replay).
    pub fn add_new_command_id(&mut self, x: TransactionId, lsn: Lsn, cid: CommandId) {
        if !transam::is_valid(x) {
            return;
        }
        self.process_xid(x, lsn);
        if let Some(t) = self.txns.get_mut(&x) {
            t.command_ids.push((lsn, cid));
        }
        if let Some(m) = self.memory.as_mut() {
            let size = m.rules.sizes.change;
            m.queue_change(x, lsn, Change::plain(ChangeAction::CommandId, size), false);
        }
    }

    /// The memory accounting's part of a transaction's end: `outcome` for top-level `x`
    /// ended by the record at `lsn`, replayed to the plugin (ReorderBufferReplay) when
    /// `replay`; with `keep` (a PREPARE) the transaction stays.
    pub fn memory_end(
        &mut self,
        x: TransactionId,
        lsn: Lsn,
        outcome: TxnOutcome,
        replay: bool,
        keep: bool,
    ) {
        if let Some(m) = self.memory.as_mut() {
            if replay {
                m.replay(x, lsn, lsn, outcome, keep);
            } else if m.is_subxact(x) {
                m.forget_sub(x);
            } else {
                m.finish(x, Some(lsn), outcome);
            }
        }
    }

    /// The inputs ReorderBufferProcessTXN would use for `x`'s top-level transaction now:
    /// its attached subtransactions, the command ids queued for any of them, the
    /// catalog-change flag and the tuple-cid list. `extra_subxacts` are xids a
    /// commit record lists (ReorderBufferCommitChild attaches the known ones).
    fn view(
        &self,
        top: TransactionId,
        extra_subxacts: &[TransactionId],
        status: TxnStatus,
    ) -> Option<DecodingTxn> {
        let t = self.txns.get(&top)?;
        let mut subxacts = t.subxacts.clone();
        for s in extra_subxacts {
            if self.txns.contains_key(s) && !subxacts.contains(s) {
                subxacts.push(*s);
            }
        }
        let mut command_ids = t.command_ids.clone();
        for s in &subxacts {
            if let Some(st) = self.txns.get(s) {
                command_ids.extend_from_slice(&st.command_ids);
            }
        }
        command_ids.sort_by_key(|c| c.0);
        Some(DecodingTxn {
            top,
            subxacts,
            command_ids,
            catalog_changes: t.catalog_changes,
            tuplecids: t.tuplecids.clone(),
            status,
        })
    }

    /// What the reorder buffer holds (or last held) for the transaction `x` (a top-level
    /// xid or one of its subtransactions).
    pub fn decoding_txn(&self, x: TransactionId) -> DecodingTxn {
        if self.txns.contains_key(&x) {
            let top = self.toplevel_of(x);
            if let Some(v) = self.view(top, &[], TxnStatus::InProgress) {
                return v;
            }
        }
        let top = self.finished_sub.get(&x).copied().unwrap_or(x);
        if let Some(v) = self.finished.get(&top) {
            return v.clone();
        }
        DecodingTxn {
            top: x,
            subxacts: Vec::new(),
            command_ids: Vec::new(),
            catalog_changes: false,
            tuplecids: Vec::new(),
            status: TxnStatus::Unknown,
        }
    }

    /// Keeps what the top-level transaction `x` holds before the reorder buffer lets go
    /// of it (nothing for a subtransaction or an unknown xid).
    pub fn remember_finished(
        &mut self,
        x: TransactionId,
        subxacts: &[TransactionId],
        status: TxnStatus,
    ) {
        let Some(r) = self.remember else { return };
        if self.txns.get(&x).is_none_or(|t| t.top.is_some()) {
            return;
        }
        let concerns = r == x
            || subxacts.contains(&r)
            || self.txns.get(&x).is_some_and(|t| t.subxacts.contains(&r));
        if !concerns {
            return;
        }
        if let Some(v) = self.view(x, subxacts, status) {
            for s in &v.subxacts {
                self.finished_sub.insert(*s, x);
            }
            self.finished.insert(x, v);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferAbortOld: drop top-level transactions older
    /// than `oldest_running_xid`, in first-LSN order, stopping at the first that is not.
    pub fn abort_old(&mut self, oldest_running_xid: TransactionId, lsn: Lsn) {
        while let Some(first) = self.toplevel.first() {
            if transam::precedes(first, oldest_running_xid) {
                if let Some(m) = self.memory.as_mut() {
                    m.finish(first, None, TxnOutcome::ForgottenAsOld);
                }
                self.remember_finished(first, &[], TxnStatus::ForgottenAsOld(lsn));
                self.cleanup(first);
            } else {
                break;
            }
        }
        // Before FULL_SNAPSHOT nothing lets go of a transaction at its commit, so the
        // table may have grown to tens of thousands between two RUNNING_XACTS; a hash
        // table keeps its capacity, and lookups in a large, nearly empty one miss the
        // CPU cache on every first record of a transaction. Give the room back here.
        if self.txns.capacity() > 256 && self.txns.len() * 8 < self.txns.capacity() {
            self.txns.shrink_to(self.txns.len() * 2);
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferGetCatalogChangesXacts: every known
    /// transaction flagged with catalog changes, sorted with xidComparator.
    pub fn catalog_changes_xacts(&self) -> Vec<TransactionId> {
        let mut v: Vec<_> = self
            .txns
            .iter()
            .filter(|(_, t)| t.catalog_changes)
            .map(|(x, _)| *x)
            .collect();
        v.sort_by(transam::xid_comparator);
        v
    }

    /// The top-level transactions held, in first-LSN order (`toplevel_by_lsn`).
    pub fn toplevel_order(&self) -> Vec<TransactionId> {
        self.toplevel
            .queue
            .iter()
            .map(|e| e.1)
            .filter(|x| transam::is_valid(*x))
            .collect()
    }

    /// Whether a transaction held was prepared (its PREPARE read by a two-phase
    /// decoder, ReorderBufferRememberPrepareInfo) at an LSN in `[from, to)`.
    pub fn prepared_between(&self, from: Lsn, to: Lsn) -> bool {
        self.txns
            .values()
            .any(|t| t.prepare_lsn.is_some_and(|l| l >= from && l < to))
    }

    /// Every transaction held, top-level and subtransactions, in no particular order.
    pub fn xids(&self) -> Vec<TransactionId> {
        self.txns.keys().copied().collect()
    }

    /// Number of transactions held (for memory accounting in traces).
    pub fn len(&self) -> usize {
        self.txns.len()
    }

    /// Whether no transaction is held.
    pub fn is_empty(&self) -> bool {
        self.txns.is_empty()
    }
}

/// The catalog snapshot of a replay at its current position, for one decoding
/// transaction or none.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistoricView {
    /// The builder's snapshot (SnapBuildBuildSnapshot) and where it was built.
    pub base: BuiltSnapshot,
    /// The snapshot HeapTupleSatisfiesHistoricMVCC gets: `base` itself, or
    /// ReorderBufferCopySnap's copy for the decoding transaction once it has a command id.
    pub snapshot: HistoricSnapshot,
    /// The decoding transaction as the reorder buffer holds it.
    pub decoding: Option<DecodingTxn>,
    /// The entries ReorderBufferBuildTupleCidHash would hash; `None` when it leaves the
    /// hash unset (no catalog changes or no NEW_CID for the transaction).
    pub tuplecids: Option<Vec<TupleCid>>,
}

/// Re-runs the snapshot choice of reorderbuffer.c ReorderBufferProcessTXN at one point of
/// a transaction's replay.
///
/// The decoder replays a transaction `decoding` starting from its base snapshot, replaced
/// by each newer one a catalog commit distributes to it, so at any record the builder's
/// snapshot `base` as of that record. At the first command-id change it makes a private
/// copy (ReorderBufferCopySnap) holding the transaction's xids (the top level and the
/// subtransactions still attached when it is replayed) and the running maximum of the
/// command ids replayed so far, those queued at or before `upto`; before that the
/// snapshot stays shared (no own xids, `curcid` 0). The tuple-cid hash
/// (ReorderBufferBuildTupleCidHash) is built once, before replay, from the transaction's
/// whole tuple-cid list, and only if it has catalog changes and such entries.
pub fn historic_view(
    base: BuiltSnapshot,
    decoding: Option<DecodingTxn>,
    upto: Lsn,
) -> HistoricView {
    let Some(d) = decoding else {
        return HistoricView {
            snapshot: base.snapshot.clone(),
            base,
            decoding: None,
            tuplecids: None,
        };
    };
    let snapshot = match d.command_id_upto(upto) {
        Some(cid) => base.snapshot.copy_for(d.top, &d.subxacts, cid),
        None => base.snapshot.clone(),
    };
    let tuplecids = (d.catalog_changes && !d.tuplecids.is_empty()).then(|| d.tuplecids.clone());
    HistoricView {
        base,
        snapshot,
        decoding: Some(d),
        tuplecids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::relfilelocator::RelFileLocator;
    use crate::include::reorderbuffer::TupleCidKey;
    use crate::include::snapshot::INVALID_COMMAND_ID;
    use crate::include::xlogdefs::Lsn;

    /// The first-seen order answers as an ordered map would (checked against a BTreeMap
    /// over a pseudo-random mix of appends and removals), and its queue stays within twice
    /// the transactions held (plus the slack of 64) however many come and go.
    #[test]
    fn top_level_order_is_an_ordered_map_with_bounded_room() {
        let mut order = TopLevelOrder::default();
        let mut model = std::collections::BTreeMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut seq = 0u64;
        for _ in 0..200_000 {
            let r = next();
            if r % 3 != 0 || model.is_empty() {
                seq += 1;
                let xid = (seq % 4_000_000_000) as u32 + 3;
                order.push(seq, xid);
                model.insert(seq, xid);
            } else {
                // A held one (mostly the oldest few, sometimes any), or one not held.
                let keys: Vec<u64> = model.keys().copied().take(8).collect();
                let k = if r % 7 == 0 {
                    seq + 1 + r % 5
                } else if r % 5 == 0 {
                    *model.keys().nth((r as usize / 11) % model.len()).unwrap()
                } else {
                    keys[(r as usize / 3) % keys.len()]
                };
                order.remove(k);
                model.remove(&k);
            }
            assert_eq!(order.first(), model.values().next().copied());
            assert_eq!(order.live, model.len());
            assert!(order.queue.len() <= 2 * order.live + 64);
        }
        // One long-lived transaction at the front while thousands come and go behind it.
        let mut order = TopLevelOrder::default();
        order.push(1, 10);
        for s in 2..100_000u64 {
            order.push(s, s as u32 + 10);
            order.remove(s);
            assert!(order.queue.len() <= 2 * order.live + 64);
        }
        assert_eq!(order.first(), Some(10));
        order.remove(1);
        assert_eq!(order.first(), None);
        assert_eq!(order.queue.len(), 0);
    }

    /// The remembered last xid and base snapshot never answer for a transaction that was
    /// let go of or reassigned since.
    #[test]
    fn remembered_xid_and_base_snapshot_follow_cleanup_and_assignment() {
        let mut m = ReorderModel::default();
        m.process_xid(700, Lsn(10));
        m.set_base_snapshot(700, Lsn(10), 690);
        assert!(m.knows(700) && m.has_base_snapshot(700));
        m.cleanup(700);
        assert!(!m.knows(700) && !m.has_base_snapshot(700));
        // Known again after being let go of (same xid, e.g. a two-phase xid met again).
        m.process_xid(700, Lsn(20));
        assert!(m.knows(700) && !m.has_base_snapshot(700));
        assert_eq!(m.oldest_txn().map(|t| t.0), Some(700));
        // A subtransaction with the base snapshot: assigned to its parent, the parent has it,
        // and letting the parent go forgets both.
        m.process_xid(702, Lsn(30));
        m.set_base_snapshot(702, Lsn(30), 695);
        m.assign_child(701, 702, Lsn(40));
        assert!(m.has_base_snapshot(701) && m.has_base_snapshot(702));
        m.cleanup(701);
        assert!(!m.knows(702) && !m.has_base_snapshot(702) && !m.has_base_snapshot(701));
        m.process_xid(702, Lsn(50));
        assert!(m.knows(702) && !m.has_base_snapshot(702));
        // Interleaved transactions, two of them sharing a cache slot (xid % 16): letting
        // one go forgets only it.
        let mut m = ReorderModel::default();
        for x in [800, 801, 816, 802] {
            m.process_xid(x, Lsn(x as u64));
            m.set_base_snapshot(x, Lsn(x as u64), 790);
        }
        m.process_xid(817, Lsn(900));
        m.cleanup(816);
        assert!(!m.knows(816) && !m.has_base_snapshot(816));
        assert!([800, 801, 802]
            .iter()
            .all(|&x| m.knows(x) && m.has_base_snapshot(x)));
        assert!(m.knows(817) && !m.has_base_snapshot(817));
        m.cleanup(800);
        assert!(!m.has_base_snapshot(800) && m.has_base_snapshot(801));
    }

    #[test]
    fn abort_old_gives_back_the_room_of_forgotten_transactions() {
        let mut m = ReorderModel::default();
        for x in 1000..21000 {
            m.process_xid(x, Lsn(x as u64));
        }
        m.set_base_snapshot(20999, Lsn(20999), 990);
        assert!(m.txns.capacity() >= 20000);
        m.abort_old(20990, Lsn(30000));
        assert_eq!(m.txns.len(), 10);
        assert!(m.txns.capacity() < 256, "capacity {}", m.txns.capacity());
        assert!(m.knows(20995) && m.has_base_snapshot(20999) && !m.knows(20989));
    }

    #[test]
    fn tuple_cid_hash_keeps_first_cmin_and_last_cmax() {
        let k = TupleCidKey {
            locator: RelFileLocator {
                spc_oid: 1663,
                db_oid: 5,
                rel_number: 1249,
            },
            block: 1,
            offset: 1,
        };
        let cid = |cmin, cmax| TupleCid {
            lsn: Lsn(1),
            key: k,
            cmin,
            cmax,
            combocid: INVALID_COMMAND_ID,
        };
        let h = TupleCidHash::build(&[cid(0, INVALID_COMMAND_ID), cid(0, 2), cid(0, 4)]);
        assert_eq!(h.get(&k).map(|e| (e.cmin, e.cmax)), Some((0, 4)));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn abort_old_stops_at_first_young_transaction() {
        let mut r = ReorderModel::default();
        r.process_xid(10, Lsn(1));
        r.process_xid(30, Lsn(2));
        r.process_xid(20, Lsn(3));
        r.abort_old(25, Lsn(9));
        assert_eq!(r.len(), 2); // 20 survives behind 30
    }
}
