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
        let subs = self.txns[&top].subs.clone();
        let t = &self.txns[&top];
        if !t.changes.is_empty() && t.serialized {
            self.serialize_txn(top);
        }
        for s in &subs {
            let t = &self.txns[s];
            if !t.changes.is_empty() && t.serialized {
                self.serialize_txn(*s);
            }
        }
        let mut added = 0u64;
        let mut aside = Aside::default();
        for x in std::iter::once(top).chain(subs.iter().copied()) {
            if self.txns[&x].changes.is_empty() {
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
    /// restores added to `total_bytes`.
    fn replay_changes(&mut self, x: TransactionId, aside: &mut Aside) -> u64 {
        let t = self.txns.get_mut(&x).expect("known");
        let changes = std::mem::take(&mut t.changes);
        let serialized = t.serialized;
        let n = changes.len();
        let mut added = 0u64;
        let chunks: Vec<&[Change]> = if serialized {
            changes.chunks(MAX_CHANGES_IN_MEMORY).collect()
        } else {
            vec![&changes[..]]
        };
        let sum = |c: &[Change]| c.iter().map(|c| c.size).sum::<u64>();
        if serialized {
            // read back: the first chunk
            self.memory_update(x, sum(chunks[0]) as i64);
        }
        for (ci, chunk) in chunks.iter().enumerate() {
            // each change's size as the transaction counts it now (a rebuilt TOAST row
            // grows), and whether it is still on the transaction's list
            let mut size_now: Vec<i64> = chunk.iter().map(|c| c.size as i64).collect();
            let mut linked = vec![true; chunk.len()];
            for (i, c) in chunk.iter().enumerate() {
                let back_to_disk = serialized && i + 1 == chunk.len() && n != chunk.len();
                if back_to_disk {
                    let size = self.txns[&x].size;
                    self.stats.total_bytes += size;
                    added += size;
                    // the chunk is let go of, all but the change handed out now
                    let freed: i64 = (0..i).filter(|j| linked[*j]).map(|j| size_now[j]).sum();
                    self.memory_update(x, -freed);
                    if let Some(next) = chunks.get(ci + 1) {
                        self.memory_update(x, sum(next) as i64);
                    }
                }
                let (kept, grown) = self.apply_change(x, c, aside);
                size_now[i] += grown;
                if kept {
                    linked[i] = false;
                } else if back_to_disk {
                    // freed at the next ReorderBufferIterTXNNext call
                    self.memory_update(x, -size_now[i]);
                }
            }
        }
        added
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
