//! snapbuild.c's handling of a RUNNING_XACTS record: SnapBuildProcessRunningXacts,
//! SnapBuildFindSnapshot with its branches (the xmin horizon pre-filter, a, b, c-1, c-2,
//! c-3), SnapBuildWaitSnapshot's choice of xids, SnapBuildPurgeOlderTxn, and what the
//! record lets the slot advance to (LogicalIncreaseXminForSlot,
//! LogicalIncreaseRestartDecodingForSlot).

use crate::include::snapbuild::SnapBuildState;
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::{self, TransactionId, INVALID_TRANSACTION_ID};
use crate::include::xlogdefs::Lsn;
use crate::replication::snapbuild::serialize::restore_message;
use crate::replication::snapbuild::{msg, Branch, Level, RestoreResult, SnapBuild, Step};
use crate::replication::snapbuild_ondisk::{snap_file_name, OnDiskError};

impl SnapBuild {
    /// Re-runs snapbuild.c SnapBuildWaitSnapshot's choice: the top-level xids of the
    /// record that do not follow `cutoff` (it waits on each of them).
    pub fn wait_snapshot_xids(running: &RunningXacts, cutoff: TransactionId) -> Vec<TransactionId> {
        running
            .top_xids()
            .iter()
            .copied()
            .filter(|x| !transam::follows(*x, cutoff))
            .collect()
    }

    /// Re-runs snapbuild.c SnapBuildProcessRunningXacts (FindSnapshot or Serialize,
    /// then xmin := oldestRunningXid and the purge), followed by decode.c's
    /// ReorderBufferAbortOld.
    ///
    /// `restore` is asked for the serialized snapshot at `lsn` when branch b is tried.
    pub fn process_running_xacts(
        &mut self,
        lsn: Lsn,
        running: &RunningXacts,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<Step, (Step, OnDiskError)> {
        let mut step = if self.state < SnapBuildState::Consistent {
            let (mut step, cont) = self.find_snapshot(lsn, running, restore)?;
            if cont {
                self.xmin = running.oldest_running_xid;
                self.purge_older_txn();
                self.slot_candidates(lsn, running, &mut step);
            }
            step
        } else {
            let mut step = self.step(Branch::Serialize, self.state);
            let file = self.serialize(lsn);
            step.message = Some(msg(
                Level::Debug1,
                format_args!(
                    "serializing snapshot to pg_logical/snapshots/{}",
                    snap_file_name(lsn)
                ),
                format_args!(""),
            ));
            step.serialized = Some(file);
            step.serialize_context = Some(self.serialize_context());
            self.xmin = running.oldest_running_xid;
            self.xmin_from_restore = false;
            self.purge_older_txn();
            step
        };
        if self.xmin == running.oldest_running_xid {
            self.xmin_from_restore = false;
        }
        self.prev_running_xacts = lsn;
        self.prev_oldest_running_xid = running.oldest_running_xid;
        if step.branch == Branch::Serialize {
            self.slot_candidates(lsn, running, &mut step);
        }
        self.reorder.abort_old(running.oldest_running_xid, lsn);
        Ok(step)
    }

    /// The tail of snapbuild.c SnapBuildProcessRunningXacts: the catalog xmin the slot
    /// may advance to (ReorderBufferGetOldestXmin, else oldestRunningXid) and, once
    /// consistent, where decoding could restart (the oldest transaction's
    /// restart_decoding_lsn, or the last serialized snapshot when nothing is running).
    fn slot_candidates(&self, lsn: Lsn, running: &RunningXacts, step: &mut Step) {
        let xmin = self
            .reorder
            .oldest_xmin()
            .unwrap_or(running.oldest_running_xid);
        step.candidate_xmin = Some((lsn, xmin));
        if self.state < SnapBuildState::Consistent {
            return;
        }
        match self.reorder.oldest_txn() {
            Some((_, restart)) if restart.is_valid() => {
                step.candidate_restart = Some((lsn, restart))
            }
            Some(_) => {}
            None => {
                if self.reorder.current_restart_decoding_lsn.is_valid()
                    && self.last_serialized_snapshot.is_valid()
                {
                    step.candidate_restart = Some((lsn, self.last_serialized_snapshot));
                }
            }
        }
    }

    /// Re-runs snapbuild.c SnapBuildFindSnapshot. Returns the step and whether the
    /// caller continues with xmin/purge (the C function's boolean result).
    fn find_snapshot(
        &mut self,
        lsn: Lsn,
        running: &RunningXacts,
        restore: &mut dyn FnMut(Lsn) -> RestoreResult,
    ) -> Result<(Step, bool), (Step, OnDiskError)> {
        let before = self.state;
        // Pre-filter: the record is older than the xmin horizon we can rely on.
        if transam::is_normal(self.initial_xmin_horizon)
            && transam::normal_precedes(running.oldest_running_xid, self.initial_xmin_horizon)
        {
            let mut s = self.step(Branch::XminHorizonTooLow, before);
            s.message = Some(msg(
                Level::Debug1,
                format_args!(
                    "skipping snapshot at {lsn} while building logical decoding snapshot, xmin horizon too low"
                ),
                format_args!(
                    "initial xmin horizon of {} vs the snapshot's {}",
                    self.initial_xmin_horizon, running.oldest_running_xid
                ),
            ));
            s.wait_xids = Self::wait_snapshot_xids(running, self.initial_xmin_horizon);
            return Ok((s, true));
        }

        // a) nothing running: consistent right away.
        if running.oldest_running_xid == running.next_xid {
            if !self.start_decoding_at.is_valid() || self.start_decoding_at <= lsn {
                self.start_decoding_at = Lsn(lsn.0 + 1);
            }
            self.xmin = running.next_xid;
            self.xmax = running.next_xid;
            self.state = SnapBuildState::Consistent;
            self.next_phase_at = INVALID_TRANSACTION_ID;
            let mut s = self.step(Branch::A, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found consistent point at {lsn}"),
                format_args!("There are no running transactions."),
            ));
            return Ok((s, false));
        }

        // b) a usable serialized snapshot, unless building a full snapshot or (18+)
        // creating a slot.
        let may_restore = !self.building_full_snapshot
            && !(self.in_slot_creation && self.version.restore_checks_in_slot_creation());
        if may_restore {
            match self.restore(lsn, restore) {
                Ok(true) => {
                    if self.version.remembers_initial_running_xacts() {
                        let mut v = running.xids.clone();
                        v.sort_by(transam::xid_comparator);
                        self.initial_running_xacts = v;
                    }
                    let mut s = self.step(Branch::B, before);
                    s.restored_from = Some(lsn);
                    s.message = Some(restore_message(lsn));
                    return Ok((s, false));
                }
                Ok(false) => {}
                Err(e) => {
                    let s = self.step(Branch::B, before);
                    return Err((s, e));
                }
            }
        }

        if self.state == SnapBuildState::Start {
            // c) START -> BUILDING_SNAPSHOT
            self.state = SnapBuildState::BuildingSnapshot;
            self.next_phase_at = running.next_xid;
            self.xmin = running.next_xid;
            self.xmax = running.next_xid;
            let mut s = self.step(Branch::C1, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found initial starting point at {lsn}"),
                format_args!(
                    "Waiting for transactions (approximately {}) older than {} to end.",
                    running.xcnt as i32, running.next_xid
                ),
            ));
            s.wait_xids = Self::wait_snapshot_xids(running, running.next_xid);
            Ok((s, true))
        } else if self.state == SnapBuildState::BuildingSnapshot
            && transam::precedes_or_equals(self.next_phase_at, running.oldest_running_xid)
        {
            // c) BUILDING_SNAPSHOT -> FULL_SNAPSHOT
            self.state = SnapBuildState::FullSnapshot;
            self.next_phase_at = running.next_xid;
            let mut s = self.step(Branch::C2, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found initial consistent point at {lsn}"),
                format_args!(
                    "Waiting for transactions (approximately {}) older than {} to end.",
                    running.xcnt as i32, running.next_xid
                ),
            ));
            s.wait_xids = Self::wait_snapshot_xids(running, running.next_xid);
            Ok((s, true))
        } else if self.state == SnapBuildState::FullSnapshot
            && transam::precedes_or_equals(self.next_phase_at, running.oldest_running_xid)
        {
            // c) FULL_SNAPSHOT -> CONSISTENT
            self.state = SnapBuildState::Consistent;
            self.next_phase_at = INVALID_TRANSACTION_ID;
            let mut s = self.step(Branch::C3, before);
            s.message = Some(msg(
                Level::Log,
                format_args!("logical decoding found consistent point at {lsn}"),
                format_args!("There are no old transactions anymore."),
            ));
            Ok((s, true))
        } else {
            Ok((self.step(Branch::FallThrough, before), true))
        }
    }

    /// Re-runs snapbuild.c SnapBuildPurgeOlderTxn: forget committed xids older than
    /// xmin (and catchange / initial running xids older than xmin).
    pub fn purge_older_txn(&mut self) {
        if !transam::is_normal(self.xmin) {
            return;
        }
        let xmin = self.xmin;
        self.committed_xip
            .retain(|x| !transam::normal_precedes(*x, xmin));
        if !self.catchange_xip.is_empty() {
            let off = self
                .catchange_xip
                .iter()
                .position(|x| transam::follows_or_equals(*x, xmin))
                .unwrap_or(self.catchange_xip.len());
            self.catchange_xip.drain(..off);
        }
        if !self.initial_running_xacts.is_empty() {
            self.initial_running_xacts
                .retain(|x| !transam::normal_precedes(*x, xmin));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::snapbuild::fixtures::{consistent_file, no_file, params};

    /// Seed 000 §9.7's worked example, with the branch the server really takes on the
    /// third record (a, not c-3: a is tested first whatever the state).
    #[test]
    fn seed_000_worked_example() {
        let mut b = SnapBuild::new(&params(18));
        let s1 = b
            .process_running_xacts(
                Lsn(0x100),
                &RunningXacts::new(401, 503, &[401, 402]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s1.branch, Branch::C1);
        assert_eq!(b.state, SnapBuildState::BuildingSnapshot);
        assert_eq!(b.next_phase_at, 503);
        assert_eq!((b.xmin, b.xmax), (401, 503)); // xmin := oldestRunningXid after c-1
        assert_eq!(s1.wait_xids, vec![401, 402]);
        assert_eq!(
            s1.message.as_ref().unwrap().detail.as_str(),
            "Waiting for transactions (approximately 2) older than 503 to end."
        );

        let s2 = b
            .process_running_xacts(
                Lsn(0x200),
                &RunningXacts::new(503, 520, &[503, 510]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s2.branch, Branch::C2);
        assert_eq!(b.state, SnapBuildState::FullSnapshot);
        assert_eq!(b.next_phase_at, 520);

        let s3 = b
            .process_running_xacts(Lsn(0x300), &RunningXacts::new(521, 521, &[]), &mut no_file)
            .unwrap();
        assert_eq!(s3.branch, Branch::A);
        assert_eq!(b.state, SnapBuildState::Consistent);
        assert_eq!((b.xmin, b.xmax), (521, 521));
        assert_eq!(b.start_decoding_at, Lsn(0x301));
        assert_eq!(
            s3.message.as_ref().unwrap().message.as_str(),
            "logical decoding found consistent point at 0/300"
        );
        assert_eq!(
            s3.message.as_ref().unwrap().detail.as_str(),
            "There are no running transactions."
        );
    }

    #[test]
    fn c3_needs_a_running_transaction() {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(
            Lsn(1),
            &RunningXacts::new(754, 756, &[754, 755]),
            &mut no_file,
        )
        .unwrap();
        b.process_running_xacts(Lsn(2), &RunningXacts::new(756, 757, &[756]), &mut no_file)
            .unwrap();
        let s = b
            .process_running_xacts(Lsn(3), &RunningXacts::new(757, 758, &[757]), &mut no_file)
            .unwrap();
        assert_eq!(s.branch, Branch::C3);
        assert_eq!(
            s.message.unwrap().detail.as_str(),
            "There are no old transactions anymore."
        );
        assert_eq!(b.xmin, 757);
    }

    #[test]
    fn fall_through_while_waiting() {
        let mut b = SnapBuild::new(&params(18));
        b.process_running_xacts(
            Lsn(1),
            &RunningXacts::new(754, 756, &[754, 755]),
            &mut no_file,
        )
        .unwrap();
        let s = b
            .process_running_xacts(
                Lsn(2),
                &RunningXacts::new(755, 757, &[755, 756]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::FallThrough);
        assert_eq!(b.state, SnapBuildState::BuildingSnapshot);
        assert_eq!(b.xmin, 755);
    }

    #[test]
    fn xmin_horizon_prefilter() {
        let mut p = params(18);
        p.initial_xmin_horizon = 800;
        let mut b = SnapBuild::new(&p);
        let s = b
            .process_running_xacts(
                Lsn(1),
                &RunningXacts::new(790, 805, &[790, 801]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::XminHorizonTooLow);
        assert_eq!(s.wait_xids, vec![790]);
        assert_eq!(b.state, SnapBuildState::Start);
    }

    #[test]
    fn branch_b_only_outside_slot_creation() {
        let file = consistent_file(900, 901);
        let mut with_file = |_: Lsn| -> RestoreResult { Ok(Some(file.clone())) };
        let mut creating = SnapBuild::new(&params(18));
        let s = creating
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::C1);

        let mut p = params(18);
        p.in_slot_creation = false;
        let mut restarting = SnapBuild::new(&p);
        let s = restarting
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::B);
        assert_eq!(restarting.state, SnapBuildState::Consistent);
        assert_eq!((restarting.xmin, restarting.xmax), (900, 901));
        assert_eq!(
            s.message.unwrap().detail.as_str(),
            "Logical decoding will begin using saved snapshot."
        );

        // 15 refuses the restore during creation too, and after a restore outside creation
        // remembers the record's running xids (InitialRunningXacts).
        let mut f15 = file.clone();
        f15.version = 4;
        let mut with15 = |_: Lsn| -> RestoreResult { Ok(Some(f15.clone())) };
        let mut creating15 = SnapBuild::new(&params(15));
        let s = creating15
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with15,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::C1);
        let mut p15 = params(15);
        p15.in_slot_creation = false;
        let mut pg15 = SnapBuild::new(&p15);
        let s = pg15
            .process_running_xacts(
                Lsn(0x500),
                &RunningXacts::new(899, 902, &[899]),
                &mut with15,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::B);
        assert_eq!(pg15.initial_running_xacts, vec![899]);
    }

    #[test]
    fn wraparound_in_the_state_machine() {
        let mut b = SnapBuild::new(&params(18));
        let near = u32::MAX - 1;
        b.process_running_xacts(
            Lsn(1),
            &RunningXacts::new(near, 4, &[near, u32::MAX]),
            &mut no_file,
        )
        .unwrap();
        assert_eq!(b.next_phase_at, 4);
        // oldest 4 >= next_phase_at 4 across the wrap: BUILDING -> FULL.
        let s = b
            .process_running_xacts(Lsn(2), &RunningXacts::new(4, 6, &[4]), &mut no_file)
            .unwrap();
        assert_eq!(s.branch, Branch::C2);
        // An oldest xid just before the wrap does not satisfy the next phase.
        let mut b2 = SnapBuild::new(&params(18));
        b2.process_running_xacts(Lsn(1), &RunningXacts::new(near, 4, &[near]), &mut no_file)
            .unwrap();
        let s = b2
            .process_running_xacts(
                Lsn(2),
                &RunningXacts::new(u32::MAX, 5, &[u32::MAX]),
                &mut no_file,
            )
            .unwrap();
        assert_eq!(s.branch, Branch::FallThrough);
    }
}
