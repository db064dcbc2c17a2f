//! What reorderbuffer.c ReorderBufferProcessTXN does to the memory accounting and the
//! statistics while it replays a transaction: ReorderBufferIterTXNInit spills what a
//! spilled (sub)transaction still holds in memory and restores its changes
//! [`MAX_CHANGES_IN_MEMORY`] at a time; ReorderBufferIterTXNNext adds the (sub)transaction's
//! size to `total_bytes` each time it goes back to disk; TOAST chunks are kept aside until
//! their row (ReorderBufferToastAppendChunk) and let go of after it
//! (ReorderBufferToastReset), the row grown by its rebuilt values
//! (ReorderBufferToastReplace); a speculative insert is let go of at its confirmation or
//! abort; at the end `total_txns` and `total_bytes` count the transaction.

use super::{Change, ChangeAction, ReorderMemory, MAX_CHANGES_IN_MEMORY};
use crate::include::transam::TransactionId;

/// Changes ReorderBufferProcessTXN keeps aside while it replays: TOAST chunks waiting for
/// their row, and a speculative insert waiting for its confirmation.
#[derive(Default)]
struct Aside {
    toast: Vec<(TransactionId, u64)>,
    spec: Option<(TransactionId, Change)>,
}

impl ReorderMemory {
    /// Re-runs the accounting of reorderbuffer.c ReorderBufferProcessTXN for top-level
    /// `top` (with `streaming`, a ReorderBufferStreamTXN run: its changes are let go of and
    /// it is marked streamed afterwards).
    pub(super) fn process_txn(&mut self, top: TransactionId, streaming: bool) {
        // ReorderBufferIterTXNInit: a spilled (sub)transaction spills what it still
        // holds (the top-level one with its subtransactions) before being read back.
        let Some(t) = self.txns.get(&top) else {
            return;
        };
        let subs = t.subs.clone();
        if t.nentries() > 0 && t.serialized {
            self.serialize_txn(top);
        }
        for s in &subs {
            let t = &self.txns[s];
            if t.nentries() > 0 && t.serialized {
                self.serialize_txn(*s);
            }
        }
        let mut added = 0u64;
        let mut aside = Aside::default();
        for x in std::iter::once(top).chain(subs.iter().copied()) {
            if self.txns[&x].nentries() == 0 {
                continue;
            }
            added += self.replay_changes(x, &mut aside);
        }
        // what was still aside at the end stays counted until the cleanup
        let was_streamed = self.txns[&top].streamed;
        if !was_streamed {
            self.stats.total_txns += 1;
        }
        let total_size = self.txns[&top].total_size;
        self.stats.total_bytes += total_size;
        added += total_size;
        if let Some(a) = self.txns.get_mut(&top).and_then(|t| t.account.as_mut()) {
            a.total_bytes += added;
        }
        if streaming {
            self.truncate(top, true);
        }
    }

    /// Walks the changes of (sub)transaction `x` as ReorderBufferIterTXNNext hands them
    /// out, applying what the replay of each does to the accounting; returns what the
    /// returns to disk added to `total_bytes`.
    fn replay_changes(&mut self, x: TransactionId, aside: &mut Aside) -> u64 {
        let t = self.txns.get_mut(&x).expect("known");
        let serialized = t.serialized;
        let in_memory = std::mem::take(&mut t.changes);
        let spilled = std::mem::take(&mut t.spilled);
        let n = in_memory.len() + spilled.count;
        let chunks: Vec<Chunk> = if serialized {
            spilled.chunks()
        } else {
            vec![Chunk::of(&in_memory)]
        };
        let mut added = 0u64;
        if serialized {
            // read back: the first chunk
            self.memory_update(x, chunks[0].sum as i64);
        }
        for (ci, chunk) in chunks.iter().enumerate() {
            let back_to_disk = serialized && n != chunk.n;
            // what is aside (unlinked) and how much the rows grew, before the last change
            let (mut kept, mut grown) = (0u64, 0i64);
            let last = chunk.n - 1;
            let mut last_seen = false;
            for (i, c) in chunk.items() {
                if i == last {
                    last_seen = true;
                    if back_to_disk {
                        added += self.back_to_disk(x, chunk, kept, grown, c, chunks.get(ci + 1));
                    }
                }
                let (k, g) = self.apply_change(x, c, aside);
                if k {
                    kept += c.size;
                } else {
                    grown += g;
                    if i == last && back_to_disk {
                        // freed at the next ReorderBufferIterTXNNext call
                        self.memory_update(x, -(c.size as i64 + g));
                    }
                }
            }
            debug_assert!(last_seen);
        }
        added
    }

    /// ReorderBufferIterTXNNext handing out `last`, the last change read back of `chunk`,
    /// with more on disk: the (sub)transaction's size goes to `total_bytes`, the chunk is
    /// let go of (all but `last` and what is aside), and the next one is read back.
    fn back_to_disk(
        &mut self,
        x: TransactionId,
        chunk: &Chunk,
        kept: u64,
        grown: i64,
        last: &Change,
        next: Option<&Chunk>,
    ) -> u64 {
        let size = self.txns[&x].size;
        self.stats.total_bytes += size;
        let freed = chunk.sum as i64 - kept as i64 - last.size as i64 + grown;
        self.memory_update(x, -freed);
        if let Some(next) = next {
            self.memory_update(x, next.sum as i64);
        }
        size
    }

    /// One change as ReorderBufferProcessTXN replays it: whether the change is kept aside
    /// (unlinked from the transaction's list), and by how much it grew.
    fn apply_change(&mut self, x: TransactionId, c: &Change, aside: &mut Aside) -> (bool, i64) {
        let kept = match c.action {
            ChangeAction::SpecInsert => {
                aside.spec = Some((x, *c));
                true
            }
            ChangeAction::SpecConfirm => {
                if let Some((sx, spec)) = aside.spec.take() {
                    self.memory_update(sx, spec.toast_growth);
                    if spec.clear_toast {
                        self.toast_reset(aside);
                    }
                    let size = spec.size as i64 + spec.toast_growth;
                    self.memory_update(sx, -size);
                }
                false
            }
            ChangeAction::SpecAbort => {
                if let Some((sx, spec)) = aside.spec.take() {
                    self.memory_update(sx, -(spec.size as i64));
                }
                false
            }
            ChangeAction::Insert | ChangeAction::Update | ChangeAction::Delete => {
                if c.tupleless || c.toast_other {
                    self.let_go_of_spec(aside);
                    return (false, 0);
                }
                if c.toast_chunk {
                    aside.toast.push((x, c.size));
                    return (true, 0);
                }
                self.memory_update(x, c.toast_growth);
                if c.clear_toast {
                    self.toast_reset(aside);
                }
                self.let_go_of_spec(aside);
                return (false, c.toast_growth);
            }
            _ => false,
        };
        (kept, 0)
    }

    /// ReorderBufferToastReset: the chunks kept aside are let go of.
    fn toast_reset(&mut self, aside: &mut Aside) {
        for (x, size) in std::mem::take(&mut aside.toast) {
            if self.txns.contains_key(&x) {
                self.memory_update(x, -(size as i64));
            }
        }
    }

    /// `change_done`: a speculative insert still aside is let go of.
    fn let_go_of_spec(&mut self, aside: &mut Aside) {
        if let Some((sx, spec)) = aside.spec.take() {
            self.memory_update(sx, -(spec.size as i64));
        }
    }
}

/// A (sub)transaction's changes spilled to disk, as the replay will read them back
/// [`MAX_CHANGES_IN_MEMORY`] at a time: the full chunks kept as their size and the changes
/// whose replay does something besides being read (TOAST chunks, speculative inserts and
/// what ends them, rows rebuilt or reset after them), the last chunk whole. Memory stays
/// with the few changes that matter, not with how many were spilled.
#[derive(Clone, Debug, Default)]
pub(super) struct Spilled {
    pub(super) count: usize,
    full: Vec<ChunkSummary>,
    tail: Vec<Change>,
    /// Whether a TOAST chunk or a speculative insert waits for a later change (so that
    /// change matters).
    waiting: bool,
}

#[derive(Clone, Debug)]
struct ChunkSummary {
    sum: u64,
    /// (index in the chunk, change), in order; always holds the last change.
    kept: Vec<(usize, Change)>,
}

impl Spilled {
    /// Appends changes spilled now (ReorderBufferSerializeTXN), in order.
    pub(super) fn append(&mut self, changes: Vec<Change>) {
        self.count += changes.len();
        for c in changes {
            self.tail.push(c);
            if self.tail.len() == MAX_CHANGES_IN_MEMORY {
                let tail = std::mem::take(&mut self.tail);
                let sum = tail.iter().map(|c| c.size).sum();
                let mut kept = Vec::new();
                for (i, c) in tail.into_iter().enumerate() {
                    let matters = self.matters(&c);
                    if matters || i + 1 == MAX_CHANGES_IN_MEMORY {
                        kept.push((i, c));
                    }
                }
                self.full.push(ChunkSummary { sum, kept });
            }
        }
    }

    /// Whether replaying `c` does anything to the accounting besides reading it (see
    /// `apply_change`), given what came before it.
    fn matters(&mut self, c: &Change) -> bool {
        let own = c.toast_chunk
            || c.toast_growth != 0
            || matches!(
                c.action,
                ChangeAction::SpecInsert | ChangeAction::SpecConfirm | ChangeAction::SpecAbort
            );
        let m = own || self.waiting;
        if c.toast_chunk || c.action == ChangeAction::SpecInsert {
            self.waiting = true;
        } else if matches!(
            c.action,
            ChangeAction::Insert | ChangeAction::Update | ChangeAction::Delete
        ) && c.clear_toast
        {
            self.waiting = false;
        }
        m
    }

    /// The chunks the replay reads back, in order.
    fn chunks(&self) -> Vec<Chunk<'_>> {
        let mut v: Vec<Chunk> = self
            .full
            .iter()
            .map(|f| Chunk {
                n: MAX_CHANGES_IN_MEMORY,
                sum: f.sum,
                items: Items::Kept(&f.kept),
            })
            .collect();
        if !self.tail.is_empty() {
            v.push(Chunk::of(&self.tail));
        }
        v
    }
}

/// One chunk as the replay reads it: how many changes, their size, and the changes
/// whose replay matters (all of them for a chunk kept whole).
struct Chunk<'a> {
    n: usize,
    sum: u64,
    items: Items<'a>,
}

enum Items<'a> {
    All(&'a [Change]),
    Kept(&'a [(usize, Change)]),
}

impl<'a> Chunk<'a> {
    fn of(changes: &'a [Change]) -> Self {
        Chunk {
            n: changes.len(),
            sum: changes.iter().map(|c| c.size).sum(),
            items: Items::All(changes),
        }
    }

    /// (index, change) of the changes to replay, in order; the last change is always
    /// among them.
    fn items(&self) -> Box<dyn Iterator<Item = (usize, &'a Change)> + 'a> {
        match self.items {
            Items::All(a) => Box::new(a.iter().enumerate()),
            Items::Kept(k) => Box::new(k.iter().map(|(i, c)| (*i, c))),
        }
    }
}
