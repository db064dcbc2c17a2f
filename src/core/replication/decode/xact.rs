//! decode.c's transaction-ending paths, xact_decode's COMMIT, PREPARE and ABORT cases
//! (DecodeCommit, DecodePrepare, DecodeAbort and the DecodeTXNNeedSkip they ask), as
//! methods of the [`SnapBuild`] they drive, each giving its [`DecodeVerdict`].

use crate::include::snapbuild::SnapBuildState;
use crate::include::transam::TransactionId;
use crate::include::xlogdefs::{Lsn, INVALID_LSN};
use crate::replication::decode::trace::DecodeVerdict;
use crate::replication::reorder_memory::TxnOutcome;
use crate::replication::reorderbuffer::TxnStatus;
use crate::replication::snapbuild::{CommitVerdict, SnapBuild};

/// decode.c's transaction-ending paths (xact_decode's COMMIT, PREPARE, ABORT cases), as
/// methods of the builder they drive: decode.c reaches the builder and the reorder buffer
/// through the decoding context, here through the builder and its `reorder`.
impl SnapBuild {
    /// Re-runs decode.c xact_decode + DecodeCommit + snapbuild.c SnapBuildCommitTxn for a
    /// commit (record at `lsn`) of `xid` with `subxacts`; `has_invals` is
    /// `XACT_XINFO_HAS_INVALS`; `db_id` the commit's database (0 if the record has none)
    /// and `slot_db` the decoding slot's. A COMMIT PREPARED a two-phase decoder did not
    /// filter goes through [`SnapBuild::decode_commit`] with `two_phase` instead.
    pub fn commit(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        has_invals: bool,
        db_id: u32,
        slot_db: u32,
    ) -> (CommitVerdict, DecodeVerdict) {
        self.decode_commit(lsn, x, subxacts, has_invals, db_id, slot_db, false)
    }

    /// Re-runs decode.c DecodeTXNNeedSkip for a transaction-ending record at `lsn`.
    fn decode_txn_need_skip(&self, lsn: Lsn, db_id: u32, slot_db: u32) -> Option<DecodeVerdict> {
        if lsn < self.start_decoding_at {
            Some(DecodeVerdict::SkippedBeforeStartDecodingAt)
        } else if db_id != 0 && db_id != slot_db {
            Some(DecodeVerdict::SkippedOtherDatabase)
        } else {
            None
        }
    }

    /// Re-runs decode.c DecodeCommit: SnapBuildCommitTxn, DecodeTXNNeedSkip, then
    /// ReorderBufferCommit, or with `two_phase` (COMMIT PREPARED, two-phase decoding on,
    /// gid not filtered) reorderbuffer.c ReorderBufferFinishPrepared against the builder's
    /// `two_phase_at`.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_commit(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        has_invals: bool,
        db_id: u32,
        slot_db: u32,
        two_phase: bool,
    ) -> (CommitVerdict, DecodeVerdict) {
        if self.state < SnapBuildState::FullSnapshot {
            // xact_decode bails out before the builder sees it; the transaction stays in
            // the reorder buffer until ReorderBufferAbortOld.
            return (
                CommitVerdict::NotSeenBeforeFull,
                DecodeVerdict::NotSeenBeforeFull,
            );
        }
        if has_invals && self.version.remembers_initial_running_xacts() {
            self.xid_set_catalog_changes(x, subxacts, lsn);
        }
        let v = self.commit_txn(lsn, x, subxacts, has_invals);
        // DecodeTXNNeedSkip, then ReorderBufferCommitChild and ReorderBufferCommit /
        // ReorderBufferFinishPrepared.
        let d = if let Some(skip) = self.decode_txn_need_skip(lsn, db_id, slot_db) {
            skip
        } else {
            for s in subxacts {
                if self.reorder.knows(*s) {
                    self.reorder.assign_child(x, *s, lsn);
                }
            }
            if !self.reorder.knows(x) {
                DecodeVerdict::UnknownTransaction
            } else if two_phase {
                if !self.reorder.has_base_snapshot(x) {
                    // Nothing was (or is now) replayed for it.
                    if self.version.finishes_prepared_without_changes() {
                        DecodeVerdict::CommitPrepared
                    } else {
                        DecodeVerdict::NoChanges
                    }
                } else if self.reorder.prepare_lsn(x) < self.two_phase_at {
                    // Prepared before two_phase_at (or its PREPARE never read by a
                    // two-phase decoder): replayed now as a prepared transaction.
                    DecodeVerdict::PreparedAndCommitPrepared
                } else {
                    DecodeVerdict::CommitPrepared
                }
            } else if !self.reorder.has_base_snapshot(x) {
                DecodeVerdict::NoChanges
            } else {
                DecodeVerdict::Decoded
            }
        };
        if self.reorder.memory.is_some() {
            let (replay, outcome) = match d {
                DecodeVerdict::Decoded | DecodeVerdict::PreparedAndCommitPrepared => {
                    (true, TxnOutcome::Sent)
                }
                DecodeVerdict::SkippedBeforeStartDecodingAt => {
                    (false, TxnOutcome::SkippedBeforeStart)
                }
                DecodeVerdict::SkippedOtherDatabase => (false, TxnOutcome::SkippedOtherDatabase),
                DecodeVerdict::CommitPrepared => (false, TxnOutcome::FinishedPrepared),
                _ => (false, TxnOutcome::NoChanges),
            };
            self.gather_subxacts(x, subxacts, lsn);
            if let Some(m) = self.reorder.memory.as_mut() {
                m.set_database(x, db_id);
            }
            self.reorder.memory_end(x, lsn, outcome, replay, false);
        }
        self.reorder
            .remember_finished(x, subxacts, TxnStatus::Committed(lsn));
        for s in subxacts {
            self.reorder.cleanup(*s);
        }
        self.reorder.cleanup(x);
        (v, d)
    }

    /// Re-runs decode.c DecodePrepare for the PREPARE (record at `lsn`) of `x` with
    /// `subxacts`, when two-phase decoding is on and the gid is not filtered (FilterPrepare
    /// false): ReorderBufferRememberPrepareInfo, then skipped before CONSISTENT or by
    /// DecodeTXNNeedSkip (ReorderBufferSkipPrepare), else ReorderBufferPrepare. `None`
    /// before FULL_SNAPSHOT (xact_decode bails out).
    pub fn decode_prepare(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        db_id: u32,
        slot_db: u32,
    ) -> Option<DecodeVerdict> {
        if self.state < SnapBuildState::FullSnapshot {
            return None;
        }
        if !self.reorder.remember_prepare_info(x, lsn) {
            return Some(DecodeVerdict::UnknownTransaction);
        }
        if self.state < SnapBuildState::Consistent {
            return Some(DecodeVerdict::PrepareSkippedNotConsistent);
        }
        if let Some(skip) = self.decode_txn_need_skip(lsn, db_id, slot_db) {
            return Some(skip);
        }
        for s in subxacts {
            if self.reorder.knows(*s) {
                self.reorder.assign_child(x, *s, lsn);
            }
        }
        let d = if self.reorder.has_base_snapshot(x) || self.version.prepares_without_changes() {
            DecodeVerdict::Prepared
        } else {
            DecodeVerdict::NoChanges
        };
        if d == DecodeVerdict::Prepared {
            self.reorder
                .memory_end(x, lsn, TxnOutcome::Prepared, true, true);
        }
        Some(d)
    }

    /// For the memory accounting: the subtransactions a transaction-ending record lists
    /// that the accounting holds on their own are counted with `x` from now on.
    fn gather_subxacts(&mut self, x: TransactionId, subxacts: &[TransactionId], lsn: Lsn) {
        if let Some(m) = self.reorder.memory.as_mut() {
            for s in subxacts {
                if m.knows(*s) {
                    m.assign_child(x, *s, lsn);
                }
            }
        }
    }

    /// Re-runs decode.c DecodeAbort with `two_phase` set (ROLLBACK PREPARED, two-phase
    /// decoding on, gid not filtered): unless DecodeTXNNeedSkip,
    /// ReorderBufferFinishPrepared sends ROLLBACK PREPARED for a known transaction (with
    /// changes, except on the releases of [`PgVersion::finishes_prepared_without_changes`]);
    /// either way the reorder buffer lets go of it. `None` before
    /// FULL_SNAPSHOT.
    ///
    /// [`PgVersion::finishes_prepared_without_changes`]: crate::include::version::PgVersion::finishes_prepared_without_changes
    pub fn decode_abort_prepared(
        &mut self,
        lsn: Lsn,
        x: TransactionId,
        subxacts: &[TransactionId],
        db_id: u32,
        slot_db: u32,
    ) -> Option<DecodeVerdict> {
        if self.state < SnapBuildState::FullSnapshot {
            return None;
        }
        let d = match self.decode_txn_need_skip(lsn, db_id, slot_db) {
            Some(skip) => skip,
            None if !self.reorder.knows(x) => DecodeVerdict::UnknownTransaction,
            None if self.reorder.has_base_snapshot(x)
                || self.version.finishes_prepared_without_changes() =>
            {
                DecodeVerdict::RollbackPrepared
            }
            None => DecodeVerdict::NoChanges,
        };
        self.abort_at(x, subxacts, lsn);
        Some(d)
    }

    /// Re-runs decode.c DecodeAbort: the reorder buffer forgets `xid` and `subxacts` (the
    /// builder itself is not told; xact_decode bails before FULL_SNAPSHOT).
    pub fn abort(&mut self, x: TransactionId, subxacts: &[TransactionId]) {
        self.abort_at(x, subxacts, INVALID_LSN)
    }

    /// [`SnapBuild::abort`] for an abort record at `lsn` (remembered as the status of a
    /// top-level transaction).
    pub fn abort_at(&mut self, x: TransactionId, subxacts: &[TransactionId], lsn: Lsn) {
        if self.state < SnapBuildState::FullSnapshot {
            return;
        }
        if self.reorder.memory.is_some() {
            let sub = self
                .reorder
                .memory
                .as_ref()
                .is_some_and(|m| m.is_subxact(x));
            if sub {
                for s in subxacts.iter().chain(std::iter::once(&x)) {
                    self.reorder
                        .memory_end(*s, lsn, TxnOutcome::Aborted, false, false);
                }
            } else {
                self.gather_subxacts(x, subxacts, lsn);
                self.reorder
                    .memory_end(x, lsn, TxnOutcome::Aborted, false, false);
            }
        }
        self.reorder
            .remember_finished(x, subxacts, TxnStatus::Aborted(lsn));
        for s in subxacts {
            self.reorder.cleanup(*s);
        }
        self.reorder.cleanup(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::standbydefs::RunningXacts;
    use crate::replication::decode::record::{Payload, RecordKind, TwoPhaseDecoding};
    use crate::replication::decode::replay::fixtures::{commit_payload, head, params, restarted};
    use crate::replication::decode::replay::Replay;
    use crate::replication::snapbuild::RestoreResult;

    /// 14 and 15: a transaction running at the restart point whose subxid cache
    /// overflowed (RUNNING_XACTS lists only its top-level xid) commits with invalidations:
    /// SnapBuildXidSetCatalogChanges flags the top level and every subxact of the commit
    /// record, so all of them become committed catalog changers and xmax passes the last
    /// subxid (seen on 14.22 and 15.19: 71 committed xids for 70 subtransactions). An
    /// earlier flag on the top level (a DDL decoded after the restart) skips that.
    #[test]
    fn initial_running_xacts_flag_every_listed_subxact_on_14_and_15() {
        let top = 950;
        let subs: Vec<TransactionId> = (951..=1020).collect();
        let commit = Payload::Commit {
            xid: top,
            subxacts: subs.clone(),
            has_invals: true,
            db_id: 5,
            gid: String::new(),
        };
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        for major in [14, 15] {
            let mut r = restarted(major, &[top]);
            r.feed(&head(0x600, RecordKind::Commit, top), &commit, &mut none)
                .unwrap();
            let mut committed = r.builder.committed_xip.clone();
            committed.sort_unstable();
            let mut want = subs.clone();
            want.push(top);
            want.sort_unstable();
            assert_eq!(committed, want, "PG {major}");
            assert_eq!(r.builder.xmax, 1021, "PG {major}");

            // Already flagged (its DDL after the restart point was decoded): only the
            // top level counts.
            let mut r = restarted(major, &[top]);
            r.builder.reorder.set_catalog_changes(top, Lsn(0x580));
            r.feed(&head(0x600, RecordKind::Commit, top), &commit, &mut none)
                .unwrap();
            assert_eq!(r.builder.committed_xip, vec![top], "PG {major}");
            assert_eq!(r.builder.xmax, top + 1, "PG {major}");
        }
        // Not listed at the restart point: nothing is flagged.
        let mut r = restarted(15, &[940]);
        r.feed(&head(0x600, RecordKind::Commit, top), &commit, &mut none)
            .unwrap();
        assert!(r.builder.committed_xip.is_empty());
    }

    /// decode.c's two-phase paths (DecodePrepare, FilterPrepare, ReorderBufferFinishPrepared)
    /// on a consistent builder whose slot has two_phase, `two_phase_at` = 150.
    #[test]
    fn two_phase_decoding() {
        for major in [14, 18] {
            let p = params(major, false, 150);
            let mut r = Replay::new(&p, 5);
            r.two_phase = TwoPhaseDecoding::for_slot(true, "test_decoding");
            let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
            let rx = RunningXacts::new(600, 600, &[]);
            r.feed(
                &head(100, RecordKind::RunningXacts, 0),
                &Payload::RunningXacts(rx),
                &mut none,
            )
            .unwrap();
            assert_eq!(r.builder.state, SnapBuildState::Consistent);
            let prepare = |x, gid: &str| Payload::Prepare {
                xid: x,
                subxacts: vec![],
                db_id: 5,
                gid: gid.into(),
            };
            let commit = |x, gid: &str| commit_payload(x, 5, false, gid);
            let abort = |x, gid: &str| Payload::Abort {
                xid: x,
                subxacts: vec![],
                db_id: 5,
                gid: gid.into(),
            };
            let mut feed = |lsn, kind, x, payload: &Payload| {
                r.feed(&head(lsn, kind, x), payload, &mut none)
                    .unwrap()
                    .decode
            };
            use DecodeVerdict as D;
            use RecordKind as K;
            // 600 changed a row before two_phase_at and prepared before it too: the
            // PREPARE is decoded then (the builder is consistent), and again sent whole
            // at COMMIT PREPARED because its PREPARE lies before two_phase_at.
            feed(110, K::Change, 600, &Payload::None);
            assert_eq!(
                feed(120, K::Prepare, 600, &prepare(600, "a")),
                Some(D::Prepared)
            );
            // 601: changes, PREPARE after two_phase_at: prepared, then commit prepared.
            feed(200, K::Change, 601, &Payload::None);
            assert_eq!(
                feed(210, K::Prepare, 601, &prepare(601, "b")),
                Some(D::Prepared)
            );
            // 602: filtered by test_decoding's gid rule: a plain commit later.
            feed(220, K::Change, 602, &Payload::None);
            assert_eq!(
                feed(230, K::Prepare, 602, &prepare(602, "c_nodecode")),
                Some(D::PrepareFiltered)
            );
            // 603 only locked a row (known, no base snapshot); 604 is unknown.
            feed(240, K::Other, 603, &Payload::None);
            assert_eq!(
                feed(250, K::Prepare, 603, &prepare(603, "d")),
                Some(D::NoChanges)
            );
            assert_eq!(
                feed(260, K::Prepare, 604, &prepare(604, "e")),
                Some(D::UnknownTransaction)
            );
            feed(270, K::Change, 605, &Payload::None);
            assert_eq!(
                feed(280, K::Prepare, 605, &prepare(605, "f")),
                Some(D::Prepared)
            );
            assert_eq!(
                feed(300, K::CommitPrepared, 600, &commit(600, "a")),
                Some(D::PreparedAndCommitPrepared)
            );
            assert_eq!(
                feed(310, K::CommitPrepared, 601, &commit(601, "b")),
                Some(D::CommitPrepared)
            );
            assert_eq!(
                feed(320, K::CommitPrepared, 602, &commit(602, "c_nodecode")),
                Some(D::Decoded)
            );
            let lock_only = if major == 14 {
                D::CommitPrepared
            } else {
                D::NoChanges
            };
            assert_eq!(
                feed(330, K::CommitPrepared, 603, &commit(603, "d")),
                Some(lock_only)
            );
            assert_eq!(
                feed(340, K::CommitPrepared, 604, &commit(604, "e")),
                Some(D::UnknownTransaction)
            );
            assert_eq!(
                feed(350, K::AbortPrepared, 605, &abort(605, "f")),
                Some(D::RollbackPrepared)
            );
            assert_eq!(
                D::PreparedAndCommitPrepared.sends(),
                ["prepare", "commit_prepared"]
            );
            assert!(!D::PrepareFiltered.decoded());
        }
        // Without two_phase on the slot every gid is filtered: PREPARE has no verdict
        // and COMMIT PREPARED is a plain commit.
        let off = TwoPhaseDecoding::for_slot(false, "test_decoding");
        assert!(off.filter_prepare("x"));
        assert_eq!(off.filter_gid_containing, None);
        let pgoutput = TwoPhaseDecoding::for_slot(true, "pgoutput");
        assert!(!pgoutput.filter_prepare("x_nodecode"));
    }

    #[test]
    fn catalog_commit_advances_xmax_and_is_purged_later() {
        let mut no_file = |_: Lsn| -> RestoreResult { Ok(None) };
        let mut b = SnapBuild::new(&params(18, true, 0));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(700, 700, &[]), &mut no_file)
            .unwrap();
        b.reorder.process_xid(702, Lsn(9));
        b.mark_catalog_changes(702, Lsn(9));
        let (v, _) = b.commit(Lsn(10), 702, &[], true, 0, 5);
        assert_eq!(
            v,
            CommitVerdict::Timetravel {
                xmax_advanced: true,
                forced: false,
                catalog_subxacts: Vec::new(),
            }
        );
        assert_eq!(b.xmax, 703);
        assert_eq!(b.committed_xip, vec![702]);
        let (v, _) = b.commit(Lsn(11), 704, &[], false, 0, 5);
        assert_eq!(v, CommitVerdict::NotCatalogChanging);
        assert!(!b.includes_all_transactions);
        b.process_running_xacts(Lsn(20), &RunningXacts::new(705, 705, &[]), &mut no_file)
            .unwrap();
        assert!(b.committed_xip.is_empty());
    }

    #[test]
    fn subtransaction_catalog_change_forces_parent() {
        let mut no_file = |_: Lsn| -> RestoreResult { Ok(None) };
        let mut b = SnapBuild::new(&params(18, true, 0));
        b.process_running_xacts(Lsn(1), &RunningXacts::new(700, 700, &[]), &mut no_file)
            .unwrap();
        b.reorder.assign_child(710, 711, Lsn(2));
        b.mark_catalog_changes(711, Lsn(3));
        assert!(b.reorder.has_catalog_changes(710));
        // Serialized while running: both are in catchange.
        assert_eq!(b.reorder.catalog_changes_xacts(), vec![710, 711]);
        b.reorder.assign_child(710, 712, Lsn(4));
        let (v, _) = b.commit(Lsn(5), 710, &[712, 711], true, 0, 5);
        // Only 711 changed the catalog: the server logs `found subtransaction 710:711`.
        assert!(matches!(
            v,
            CommitVerdict::Timetravel { ref catalog_subxacts, .. } if *catalog_subxacts == [711]
        ));
        assert_eq!(b.committed_xip, vec![711, 710]);
        assert_eq!(b.xmax, 712);
        assert!(b.reorder.is_empty());
    }
}
