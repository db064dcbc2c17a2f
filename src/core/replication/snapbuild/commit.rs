//! snapbuild.c's commit and catalog-change tracking: SnapBuildCommitTxn,
//! SnapBuildAddCommittedTxn, SnapBuildXidHasCatalogChanges,
//! SnapBuildXidSetCatalogChanges and SnapBuildProcessNewCid, with decode.c's marking of a
//! transaction as catalog-modifying (HEAP2 NEW_CID, XACT INVALIDATIONS).

use crate::include::heapam_xlog::NewCid;
use crate::include::reorderbuffer::TupleCid;
use crate::include::snapbuild::{SnapBuildState, SnapshotOrigin};
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::snapbuild::{CommitVerdict, SnapBuild};

impl SnapBuild {
    /// Re-runs snapbuild.c SnapBuildAddCommittedTxn (growth `space * 2 + 1`).
    fn add_committed_txn(&mut self, x: TransactionId) {
        if self.committed_xip.len() as u64 == self.committed_xcnt_space {
            self.committed_xcnt_space = self.committed_xcnt_space * 2 + 1;
        }
        self.committed_xip.push(x);
    }

    /// Re-runs snapbuild.c SnapBuildXidHasCatalogChanges (16+): flagged in the reorder
    /// buffer, or (commit record with invalidations) listed in catchange. On 14 and 15
    /// SnapBuildCommitTxn asks the reorder buffer alone; the InitialRunningXacts list
    /// works earlier, through [`SnapBuild::xid_set_catalog_changes`].
    pub fn xid_has_catalog_changes(&self, x: TransactionId, has_invals: bool) -> bool {
        if self.reorder.has_catalog_changes(x) {
            return true;
        }
        if !has_invals || self.version.remembers_initial_running_xacts() {
            return false;
        }
        self.catchange_xip.binary_search(&x).is_ok()
    }

    /// Re-runs snapbuild.c SnapBuildXidSetCatalogChanges (14, 15; decode.c DecodeCommit
    /// calls it before SnapBuildCommitTxn for a commit record with invalidations): a
    /// top-level `x` listed in InitialRunningXacts and not yet flagged is flagged, and so
    /// is every subtransaction the commit record lists, each assigned to `x` first, since
    /// the record cannot say which of them changed the catalog.
    pub fn xid_set_catalog_changes(
        &mut self,
        x: TransactionId,
        subxacts: &[TransactionId],
        lsn: Lsn,
    ) {
        if self.initial_running_xacts.is_empty() || self.reorder.has_catalog_changes(x) {
            return;
        }
        if self.initial_running_xacts.binary_search(&x).is_err() {
            return;
        }
        self.reorder.set_catalog_changes(x, lsn);
        for &sub in subxacts {
            self.reorder.assign_child(x, sub, lsn);
            self.reorder.set_catalog_changes(sub, lsn);
        }
    }

    /// Re-runs snapbuild.c SnapBuildCommitTxn.
    pub fn commit_txn(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        has_invals: bool,
    ) -> CommitVerdict {
        let mut needs_timetravel = false;
        let mut sub_needs_timetravel = false;
        let mut needs_snapshot = false;
        let mut xmax = x;
        let mut catalog_subxacts = Vec::new();
        if self.state == SnapBuildState::Start
            || (self.state == SnapBuildState::BuildingSnapshot
                && transam::precedes(x, self.next_phase_at))
        {
            if self.start_decoding_at <= lsn {
                self.start_decoding_at = Lsn(lsn.0 + 1);
            }
            return CommitVerdict::SkippedBeforeBuilding;
        }
        if self.state < SnapBuildState::Consistent {
            if self.start_decoding_at <= lsn {
                self.start_decoding_at = Lsn(lsn.0 + 1);
            }
            if self.building_full_snapshot {
                needs_timetravel = true;
            }
        }
        for &sub in subxacts {
            if self.xid_has_catalog_changes(sub, has_invals) {
                sub_needs_timetravel = true;
                needs_snapshot = true;
                // The server logs this subtransaction at DEBUG1 here.
                catalog_subxacts.push(sub);
                self.add_committed_txn(sub);
                if transam::normal_follows(sub, xmax) {
                    xmax = sub;
                }
            } else if needs_timetravel {
                self.add_committed_txn(sub);
                if transam::normal_follows(sub, xmax) {
                    xmax = sub;
                }
            }
        }
        let forced;
        if self.xid_has_catalog_changes(x, has_invals) {
            needs_timetravel = true;
            needs_snapshot = true;
            forced = false;
            self.add_committed_txn(x);
        } else if sub_needs_timetravel || needs_timetravel {
            needs_timetravel = true;
            forced = true;
            self.add_committed_txn(x);
        } else {
            forced = false;
        }
        if !needs_timetravel {
            self.includes_all_transactions = false;
            return CommitVerdict::NotCatalogChanging;
        }
        let mut xmax_advanced = false;
        if !transam::is_valid(self.xmax) || transam::follows_or_equals(xmax, self.xmax) {
            self.xmax = transam::advance(xmax);
            xmax_advanced = true;
        }
        if needs_snapshot && self.state >= SnapBuildState::FullSnapshot {
            // A new historic snapshot is built and becomes the committing transaction's
            // base snapshot if it had none.
            self.snapshot_xmin = Some(self.xmin);
            self.snapshot = Some(self.build_snapshot(Some(lsn), SnapshotOrigin::CatalogCommit(x)));
            if !self.reorder.has_base_snapshot(x) {
                self.reorder.set_base_snapshot(x, lsn, self.xmin);
            }
            // SnapBuildDistributeSnapshotAndInval
            let xcnt = self.committed_xip.len() as u64;
            if let Some(m) = self.reorder.memory.as_mut() {
                m.distribute_snapshot(lsn, x, xcnt);
            }
        }
        CommitVerdict::Timetravel {
            xmax_advanced,
            forced,
            catalog_subxacts,
        }
    }

    /// decode.c: HEAP2 NEW_CID (SnapBuildProcessNewCid) and XACT INVALIDATIONS mark
    /// `xid` catalog-modifying — only once the builder is at least FULL_SNAPSHOT.
    pub fn mark_catalog_changes(&mut self, x: TransactionId, lsn: Lsn) {
        if self.state < SnapBuildState::FullSnapshot || !transam::is_valid(x) {
            return;
        }
        self.reorder.set_catalog_changes(x, lsn);
    }

    /// Re-runs snapbuild.c SnapBuildProcessNewCid (decode.c calls it for HEAP2 NEW_CID
    /// once the builder is at least FULL_SNAPSHOT): the record's xid gets catalog changes,
    /// its top-level transaction the tuple mapping, and the record's xid the next command
    /// id (one past the larger valid of cmin and cmax).
    pub fn process_new_cid(&mut self, x: TransactionId, lsn: Lsn, rec: &NewCid) {
        if self.state < SnapBuildState::FullSnapshot {
            return;
        }
        self.mark_catalog_changes(x, lsn);
        self.reorder.add_new_tuple_cids(
            rec.top_xid,
            lsn,
            TupleCid {
                lsn,
                key: rec.target,
                cmin: rec.cmin,
                cmax: rec.cmax,
                combocid: rec.combocid,
            },
        );
        // Neither cmin nor cmax valid: the server raises an ERROR; no command id here.
        if let Some(cid) = rec.command_id() {
            self.reorder.add_new_command_id(x, lsn, cid.wrapping_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::snapbuild::fixtures::params;

    #[test]
    fn committed_space_grows_like_the_server() {
        let mut b = SnapBuild::new(&params(18));
        for x in 0..129u32 {
            b.add_committed_txn(1000 + x);
        }
        assert_eq!(b.committed_xcnt_space, 257);
    }
}
