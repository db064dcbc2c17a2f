//! utils/snapshot.h's `SnapshotData` in its `SNAPSHOT_HISTORIC_MVCC` form, and c.h's
//! `CommandId`.
//!
//! [`HistoricSnapshot`] is what snapbuild.c SnapBuildBuildSnapshot builds from the
//! builder (xmin, xmax, the committed catalog-modifying xids in `xip`), and what
//! reorderbuffer.c ReorderBufferCopySnap makes of it for one decoding transaction (its
//! own xids in `subxip`, the command id reached in `curcid`). Those two constructors
//! stay beside the struct (they only shape it); the builder and the reorder buffer call
//! them from `replication::snapbuild` and `replication::reorderbuffer`.

use crate::include::transam::{self, TransactionId};

/// A PostgreSQL `CommandId`.
pub type CommandId = u32;
/// `InvalidCommandId`.
pub const INVALID_COMMAND_ID: CommandId = u32::MAX;
/// `FirstCommandId`.
pub const FIRST_COMMAND_ID: CommandId = 0;

/// A catalog snapshot of logical decoding (`SNAPSHOT_HISTORIC_MVCC`).
///
/// `xip` holds the xids to treat as committed between xmin and xmax (the builder's
/// committed catalog-modifying transactions), `subxip` the decoding transaction's own
/// xids (top level and subtransactions). Both are kept sorted with xidComparator so
/// that membership tests behave as the server's bsearch does.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HistoricSnapshot {
    pub xmin: TransactionId,
    pub xmax: TransactionId,
    pub xip: Vec<TransactionId>,
    pub subxip: Vec<TransactionId>,
    pub curcid: CommandId,
    /// Whether ReorderBufferCopySnap made this a private copy for one transaction.
    pub copied: bool,
}

fn sorted(v: &[TransactionId]) -> Vec<TransactionId> {
    let mut v = v.to_vec();
    v.sort_by(transam::xid_comparator);
    v
}

impl HistoricSnapshot {
    /// Re-runs snapbuild.c SnapBuildBuildSnapshot: the builder's xmin and xmax, its
    /// committed xids sorted for bsearch, no own xids, and `curcid` FirstCommandId.
    pub fn build(xmin: TransactionId, xmax: TransactionId, committed: &[TransactionId]) -> Self {
        HistoricSnapshot {
            xmin,
            xmax,
            xip: sorted(committed),
            subxip: Vec::new(),
            curcid: FIRST_COMMAND_ID,
            copied: false,
        }
    }

    /// A snapshot from explicit fields (a what-if); both arrays get sorted the way the
    /// server sorts them before it searches them.
    pub fn from_parts(
        xmin: TransactionId,
        xmax: TransactionId,
        xip: &[TransactionId],
        subxip: &[TransactionId],
        curcid: CommandId,
    ) -> Self {
        HistoricSnapshot {
            xmin,
            xmax,
            xip: sorted(xip),
            subxip: sorted(subxip),
            curcid,
            copied: !subxip.is_empty(),
        }
    }

    /// Re-runs reorderbuffer.c ReorderBufferCopySnap: a private copy for the decoding
    /// transaction `top` whose `subxip` lists `top` and its (not aborted)
    /// subtransactions, sorted, and whose `curcid` is `cid`.
    pub fn copy_for(&self, top: TransactionId, subxacts: &[TransactionId], cid: CommandId) -> Self {
        let mut sub = Vec::with_capacity(subxacts.len() + 1);
        sub.push(top);
        sub.extend_from_slice(subxacts);
        HistoricSnapshot {
            xmin: self.xmin,
            xmax: self.xmax,
            xip: self.xip.clone(),
            subxip: sorted(&sub),
            curcid: cid,
            copied: true,
        }
    }

    /// heapam_visibility.c TransactionIdInArray over `xip`.
    pub fn in_xip(&self, x: TransactionId) -> bool {
        in_array(x, &self.xip)
    }

    /// heapam_visibility.c TransactionIdInArray over `subxip`.
    pub fn in_subxip(&self, x: TransactionId) -> bool {
        in_array(x, &self.subxip)
    }
}

/// Binary search in an array sorted with xidComparator (plain unsigned order).
fn in_array(x: TransactionId, sorted: &[TransactionId]) -> bool {
    !sorted.is_empty() && sorted.binary_search(&x).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_copy_sort_like_the_server() {
        let s = HistoricSnapshot::build(100, 200, &[170, 150, 4_000_000_000]);
        assert_eq!(s.xip, vec![150, 170, 4_000_000_000]);
        assert_eq!(s.curcid, FIRST_COMMAND_ID);
        assert!(s.subxip.is_empty() && !s.copied);
        let c = s.copy_for(160, &[190, 165], 7);
        assert_eq!(c.subxip, vec![160, 165, 190]);
        assert_eq!((c.curcid, c.copied), (7, true));
        assert_eq!(c.xip, s.xip);
    }
}
