//! "When the blocker ends, where do restart_lsn and catalog_xmin go?": a what-if run of
//! the slot's own rules on a copy of the replayed builder.
//!
//! Not a PostgreSQL file. The forecast re-runs, on a copy, what the server does after a
//! transaction ends: the reorder buffer lets go of it (reorderbuffer.c
//! ReorderBufferForget / Abort), the next RUNNING_XACTS record reaches snapbuild.c
//! SnapBuildProcessRunningXacts (serialization, then the candidates from
//! ReorderBufferGetOldestXmin / ReorderBufferGetOldestTXN), logical.c
//! LogicalIncreaseXminForSlot / LogicalIncreaseRestartDecodingForSlot take or drop
//! them, and LogicalConfirmReceivedLocation applies them once the consumer confirms past
//! that record. The record's LSN is not known before it is logged: it stands as a
//! sentinel beyond any real LSN and is reported as "the next RUNNING_XACTS".

use crate::include::standbydefs::RunningXacts;
use crate::include::transam::{self, TransactionId};
use crate::include::xlogdefs::Lsn;
use crate::replication::logical::SlotModel;
use crate::replication::snapbuild::{RestoreResult, SnapBuild};
use crate::SnapBuildState;

/// Where restart_lsn goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForecastLsn {
    /// It does not move (another transaction holds it: `next_holder`).
    Stays(Lsn),
    /// It moves to this LSN (a still-running transaction's restart_decoding_lsn).
    At(Lsn),
    /// It moves to the RUNNING_XACTS record logged after the end (nothing else runs
    /// with WAL: that record's serialized snapshot is the restart point), an LSN beyond
    /// today's flush position.
    AtNextRunningXacts,
}

/// Where catalog_xmin goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForecastXid {
    /// It does not move (a base snapshot or an older running xid still holds it).
    Stays(TransactionId),
    /// It moves to this xid.
    At(TransactionId),
    /// It moves to the next xid to be assigned when that RUNNING_XACTS is logged
    /// (nothing else runs): at least this one.
    AtNextXid(TransactionId),
}

/// What happens when transaction `ending` ends (commit or abort) and the consumer
/// confirms past the RUNNING_XACTS record(s) logged after it, the other transactions
/// running now still running.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forecast {
    /// The top-level xid whose end is assumed.
    pub ending: TransactionId,
    /// Whether it has ended already (no holder: the next RUNNING_XACTS tells the builder).
    pub ended: bool,
    pub restart_lsn: ForecastLsn,
    pub catalog_xmin: ForecastXid,
    /// RUNNING_XACTS records it takes: 1, or 2 when a candidate pending now is applied
    /// at the first confirmation and the new one can only be proposed at the second.
    pub rounds: u8,
    /// The transaction that holds restart_lsn (or, failing that, catalog_xmin) next.
    pub next_holder: Option<TransactionId>,
}

/// A RUNNING_XACTS record's LSN that no real one reaches: "the next one".
const NEXT: [Lsn; 2] = [Lsn(u64::MAX - 0x20000), Lsn(u64::MAX - 0x10000)];
/// How far past a sentinel record the consumer is assumed to confirm.
const PAST: u64 = 0x100;

/// Re-runs, on a copy of `builder` and `slot`, what follows the end of `ending`: the
/// reorder buffer forgets it, RUNNING_XACTS records with the transactions of
/// `running_now` (top-level xids running on the server now, as pg_current_snapshot's xip
/// lists them) minus `ending` and `next_xid` as the next xid are processed (snapbuild.c
/// SnapBuildProcessRunningXacts), the candidates go through logical.c
/// LogicalIncreaseXminForSlot / LogicalIncreaseRestartDecodingForSlot, and the consumer
/// confirms past each (LogicalConfirmReceivedLocation).
///
/// `None` unless the builder is CONSISTENT (a slot being created has no candidates).
/// Costs one copy of the builder (its running transactions and committed xids).
pub fn forecast(
    builder: &SnapBuild,
    slot: &SlotModel,
    ending: TransactionId,
    ended: bool,
    running_now: &[TransactionId],
    next_xid: TransactionId,
) -> Option<Forecast> {
    if builder.state != SnapBuildState::Consistent || !transam::is_normal(ending) {
        return None;
    }
    let mut b = builder.clone();
    b.reorder.remember = None;
    b.reorder.cleanup(ending);
    let mut still: Vec<TransactionId> = running_now
        .iter()
        .copied()
        .filter(|x| *x != ending && transam::is_normal(*x))
        .collect();
    still.sort_by(|a, b| transam::precedes_order(*a, *b));
    still.dedup();
    let oldest = still.first().copied().unwrap_or(next_xid);
    let record = RunningXacts::new(oldest, next_xid, &still);
    let mut s = *slot;
    let mut after = Vec::with_capacity(2);
    for at in NEXT {
        let mut no_restore = |_: Lsn| -> RestoreResult { Ok(None) };
        let step = match b.process_running_xacts(at, &record, &mut no_restore) {
            Ok(step) => step,
            Err(_) => return None,
        };
        if let Some((l, x)) = step.candidate_xmin {
            s.increase_xmin(l, x);
        }
        if let Some((l, r)) = step.candidate_restart {
            s.increase_restart(l, r);
        }
        s.confirm(Lsn(at.0 + PAST));
        after.push((
            lsn_outcome(slot.restart_lsn, s.restart_lsn),
            xid_outcome(slot.catalog_xmin, s.catalog_xmin, next_xid),
        ));
    }
    let rounds = if after[0] == after[1] { 1 } else { 2 };
    let (restart_lsn, catalog_xmin) = after[1];
    let next_holder = b.reorder.oldest_txn().map(|(x, _)| x).or_else(|| {
        matches!(catalog_xmin, ForecastXid::Stays(_))
            .then(|| b.reorder.oldest_base_snapshot().map(|(x, _)| x))
            .flatten()
    });
    Some(Forecast {
        ending,
        ended,
        restart_lsn,
        catalog_xmin,
        rounds,
        next_holder,
    })
}

fn lsn_outcome(before: Lsn, after: Lsn) -> ForecastLsn {
    if after == before {
        ForecastLsn::Stays(before)
    } else if NEXT.iter().any(|n| after.0 >= n.0) {
        ForecastLsn::AtNextRunningXacts
    } else {
        ForecastLsn::At(after)
    }
}

fn xid_outcome(
    before: TransactionId,
    after: TransactionId,
    next_xid: TransactionId,
) -> ForecastXid {
    if after == before {
        ForecastXid::Stays(before)
    } else if after == next_xid {
        ForecastXid::AtNextXid(next_xid)
    } else {
        ForecastXid::At(after)
    }
}

impl Forecast {
    /// WAL bytes restart_lsn moves by, when the target is known.
    pub fn released_bytes(&self, restart_lsn: Lsn) -> Option<i64> {
        match self.restart_lsn {
            ForecastLsn::At(r) => Some(r.0.saturating_sub(restart_lsn.0) as i64),
            ForecastLsn::Stays(_) => Some(0),
            ForecastLsn::AtNextRunningXacts => None,
        }
    }

    /// The forecast in words: "when xid X ends and the consumer confirms past the next
    /// RUNNING_XACTS record, restart_lsn moves from A to R (N bytes of WAL released) and
    /// catalog_xmin from C to D".
    pub fn sentence(&self, restart_now: Lsn, catalog_now: TransactionId, flush: Lsn) -> String {
        let when = if self.ended {
            format!("xid {} has ended: ", self.ending)
        } else {
            format!("when xid {} ends ", self.ending)
        };
        let records = if self.rounds == 2 {
            "the next two RUNNING_XACTS records (the candidate pending now is applied at the first)"
        } else {
            "the next RUNNING_XACTS record"
        };
        let confirm = if self.ended {
            format!("once a new RUNNING_XACTS is logged and the consumer confirms past {records}")
        } else {
            format!("and the consumer confirms past {records} logged after it")
        };
        let holder = self
            .next_holder
            .map(|x| format!(" (xid {x} holds it then)"))
            .unwrap_or_default();
        let restart = match self.restart_lsn {
            ForecastLsn::At(r) => format!(
                "restart_lsn moves from {restart_now} to {r} ({} bytes of WAL released)",
                r.0.saturating_sub(restart_now.0)
            ),
            ForecastLsn::AtNextRunningXacts => format!(
                "restart_lsn moves from {restart_now} to that RUNNING_XACTS record (at least {} bytes of WAL released: the flush position is {flush})",
                flush.0.saturating_sub(restart_now.0)
            ),
            ForecastLsn::Stays(l) => format!("restart_lsn stays at {l}{holder}"),
        };
        let catalog = match self.catalog_xmin {
            ForecastXid::At(x) => format!("catalog_xmin from {catalog_now} to {x}"),
            ForecastXid::AtNextXid(x) => {
                format!("catalog_xmin from {catalog_now} to the next xid then (at least {x})")
            }
            ForecastXid::Stays(x) => {
                let h = match (self.restart_lsn, self.next_holder) {
                    (ForecastLsn::Stays(_), _) | (_, None) => String::new(),
                    (_, Some(y)) => format!(
                        " while the decoder runs on (xid {y}'s catalog snapshot holds it; a decoder restarted at the new restart_lsn takes its snapshots from the file there, which can move it)"
                    ),
                };
                format!("catalog_xmin stays at {x}{h}")
            }
        };
        format!("{when}{confirm}, {restart} and {catalog}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BuilderParams, PgVersion};

    fn params(major: u32) -> BuilderParams {
        BuilderParams::plain(PgVersion::newest(major), false)
    }

    fn consistent_builder() -> SnapBuild {
        let mut b = SnapBuild::new(&params(18));
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        // Nothing running: branch a, CONSISTENT at once, serialized there.
        b.process_running_xacts(Lsn(0x1000), &RunningXacts::new(700, 700, &[]), &mut none)
            .unwrap();
        assert_eq!(b.state, SnapBuildState::Consistent);
        b
    }

    fn slot() -> SlotModel {
        SlotModel {
            catalog_xmin: 700,
            effective_catalog_xmin: 700,
            restart_lsn: Lsn(0x1000),
            confirmed_flush: Lsn(0x5000),
            ..SlotModel::default()
        }
    }

    #[test]
    fn the_next_oldest_transaction_takes_over_restart_lsn() {
        let mut b = consistent_builder();
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        // x 700 begins (restart point 0x1000), a RUNNING_XACTS at 0x2000 is serialized,
        // y 701 begins after it (restart point 0x2000).
        b.reorder.process_xid(700, Lsn(0x1100));
        b.process_running_xacts(Lsn(0x2000), &RunningXacts::new(700, 701, &[700]), &mut none)
            .unwrap();
        b.reorder.process_xid(701, Lsn(0x2100));
        b.reorder.set_base_snapshot(701, Lsn(0x2100), 700);
        let f = forecast(&b, &slot(), 700, false, &[700, 701], 702).unwrap();
        assert_eq!(f.restart_lsn, ForecastLsn::At(Lsn(0x2000)));
        // y's base snapshot (xmin 700) is not newer than catalog_xmin: it stays.
        assert_eq!(f.catalog_xmin, ForecastXid::Stays(700));
        assert_eq!(f.next_holder, Some(701));
        assert_eq!(f.rounds, 1);
        assert_eq!(f.released_bytes(Lsn(0x1000)), Some(0x1000));
        let s = f.sentence(Lsn(0x1000), 700, Lsn(0x3000));
        assert!(
            s.contains("restart_lsn moves from 0/1000 to 0/2000 (4096 bytes"),
            "{s}"
        );
        // When y ends too, nothing runs: the next RUNNING_XACTS becomes the restart point
        // and catalog_xmin the next xid.
        let f = forecast(&b, &slot(), 701, false, &[700, 701], 702).unwrap();
        assert_eq!(f.restart_lsn, ForecastLsn::Stays(Lsn(0x1000)));
        assert_eq!(f.next_holder, Some(700));
        b.reorder.cleanup(700);
        let f = forecast(&b, &slot(), 701, false, &[701], 702).unwrap();
        assert_eq!(f.restart_lsn, ForecastLsn::AtNextRunningXacts);
        assert_eq!(f.catalog_xmin, ForecastXid::AtNextXid(702));
        assert_eq!(f.released_bytes(Lsn(0x1000)), None);
    }

    #[test]
    fn a_pending_candidate_costs_a_second_record() {
        let mut b = consistent_builder();
        b.reorder.process_xid(700, Lsn(0x1100));
        let mut s = slot();
        // A candidate proposed at 0x6000 (beyond confirmed_flush) is pending.
        s.candidate_restart_valid = Lsn(0x6000);
        s.candidate_restart_lsn = Lsn(0x1000);
        let f = forecast(&b, &s, 700, false, &[700], 701).unwrap();
        assert_eq!(f.restart_lsn, ForecastLsn::AtNextRunningXacts);
        assert_eq!(f.rounds, 2);
        assert!(f
            .sentence(Lsn(0x1000), 700, Lsn(0x7000))
            .contains("next two RUNNING_XACTS"));
    }

    #[test]
    fn no_forecast_while_building() {
        let b = SnapBuild::new(&params(16));
        assert!(forecast(&b, &slot(), 700, false, &[700], 701).is_none());
    }
}
