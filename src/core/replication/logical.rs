//! Re-runs the slot side of decoding progress in replication/logical/logical.c:
//! LogicalIncreaseXminForSlot, LogicalIncreaseRestartDecodingForSlot and
//! LogicalConfirmReceivedLocation, which turn the candidates the snapshot builder proposes
//! at each RUNNING_XACTS into the slot's catalog_xmin and restart_lsn once the client
//! confirms a position.

use crate::include::transam::{self, TransactionId, INVALID_TRANSACTION_ID};
use crate::include::xlogdefs::{Lsn, INVALID_LSN};

/// The fields of a logical slot (`ReplicationSlot` and its persistent data) that
/// decoding moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlotModel {
    pub catalog_xmin: TransactionId,
    pub effective_catalog_xmin: TransactionId,
    pub restart_lsn: Lsn,
    pub confirmed_flush: Lsn,
    pub candidate_catalog_xmin: TransactionId,
    pub candidate_xmin_lsn: Lsn,
    pub candidate_restart_valid: Lsn,
    pub candidate_restart_lsn: Lsn,
}

impl SlotModel {
    /// Re-runs logical.c LogicalIncreaseXminForSlot: propose `xmin` as the catalog xmin,
    /// valid once `current_lsn` is confirmed.
    pub fn increase_xmin(&mut self, current_lsn: Lsn, xmin: TransactionId) {
        if transam::precedes_or_equals(xmin, self.catalog_xmin) {
            // nothing to gain
        } else if current_lsn <= self.confirmed_flush {
            self.candidate_catalog_xmin = xmin;
            self.candidate_xmin_lsn = current_lsn;
            // already confirmed: apply right away
            self.confirm(self.confirmed_flush);
        } else if !self.candidate_xmin_lsn.is_valid() {
            self.candidate_catalog_xmin = xmin;
            self.candidate_xmin_lsn = current_lsn;
        }
    }

    /// Re-runs logical.c LogicalIncreaseRestartDecodingForSlot: propose `restart_lsn`,
    /// valid once `current_lsn` is confirmed.
    pub fn increase_restart(&mut self, current_lsn: Lsn, restart_lsn: Lsn) {
        if restart_lsn <= self.restart_lsn {
            // nothing to gain
        } else if current_lsn <= self.confirmed_flush {
            self.candidate_restart_valid = current_lsn;
            self.candidate_restart_lsn = restart_lsn;
            self.confirm(self.confirmed_flush);
        } else if !self.candidate_restart_valid.is_valid() {
            self.candidate_restart_valid = current_lsn;
            self.candidate_restart_lsn = restart_lsn;
        }
        // else: a candidate is pending; the proposal is dropped (DEBUG1 "failed to
        // increase restart lsn").
    }

    /// Re-runs logical.c LogicalConfirmReceivedLocation: the client has everything up to
    /// `lsn`; candidates valid by then are applied.
    pub fn confirm(&mut self, lsn: Lsn) {
        if lsn > self.confirmed_flush {
            self.confirmed_flush = lsn;
        }
        if self.candidate_xmin_lsn.is_valid()
            && self.candidate_xmin_lsn <= lsn
            && transam::is_valid(self.candidate_catalog_xmin)
            && self.catalog_xmin != self.candidate_catalog_xmin
        {
            self.catalog_xmin = self.candidate_catalog_xmin;
            self.effective_catalog_xmin = self.catalog_xmin;
            self.candidate_catalog_xmin = INVALID_TRANSACTION_ID;
            self.candidate_xmin_lsn = INVALID_LSN;
        }
        if self.candidate_restart_valid.is_valid() && self.candidate_restart_valid <= lsn {
            self.restart_lsn = self.candidate_restart_lsn;
            self.candidate_restart_lsn = INVALID_LSN;
            self.candidate_restart_valid = INVALID_LSN;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> SlotModel {
        SlotModel {
            catalog_xmin: 700,
            effective_catalog_xmin: 700,
            restart_lsn: Lsn(0x100),
            confirmed_flush: Lsn(0x200),
            ..SlotModel::default()
        }
    }

    #[test]
    fn candidates_wait_for_confirmation() {
        let mut s = slot();
        s.increase_xmin(Lsn(0x300), 710);
        s.increase_restart(Lsn(0x300), Lsn(0x280));
        assert_eq!((s.catalog_xmin, s.restart_lsn), (700, Lsn(0x100)));
        // a second proposal while one is pending is dropped
        s.increase_xmin(Lsn(0x400), 720);
        s.increase_restart(Lsn(0x400), Lsn(0x380));
        assert_eq!(
            (s.candidate_catalog_xmin, s.candidate_restart_lsn),
            (710, Lsn(0x280))
        );
        s.confirm(Lsn(0x350));
        assert_eq!(
            (s.catalog_xmin, s.restart_lsn, s.confirmed_flush),
            (710, Lsn(0x280), Lsn(0x350))
        );
        assert!(!s.candidate_xmin_lsn.is_valid() && !s.candidate_restart_valid.is_valid());
    }

    #[test]
    fn already_confirmed_positions_apply_at_once() {
        let mut s = slot();
        s.increase_xmin(Lsn(0x180), 705);
        assert_eq!(s.catalog_xmin, 705);
        s.increase_restart(Lsn(0x180), Lsn(0x150));
        assert_eq!(s.restart_lsn, Lsn(0x150));
        // never backwards
        s.increase_xmin(Lsn(0x190), 704);
        s.increase_restart(Lsn(0x190), Lsn(0x140));
        assert_eq!((s.catalog_xmin, s.restart_lsn), (705, Lsn(0x150)));
    }
}
