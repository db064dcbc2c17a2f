//! Replays of different slots that have come to the same state.
//!
//! Two slots' decoders read the same WAL from different restart_lsns (and with different
//! confirmed_flush positions), but once both have taken the same record and their
//! builders and reorder buffers hold the same things, every later record moves them
//! alike: from there on one replay can be fed and the other follow it. This is what lets
//! the slots' health and diagnosis feed many slots held at about the same place at the
//! cost of few.
//!
//! Alike means [`join_key`] equal: the whole replay, as serialized, but for
//! - bookkeeping that answers nothing: the reorder buffer's first-seen counters, caches
//!   and spare boxes (its transactions compare as a set, their order as the list of xids
//!   in first-LSN order);
//! - `start_decoding_at`, when both are at or before the position both reached: a later
//!   record is never before it, so it skips nothing any more (DecodeTXNNeedSkip), and
//!   where the builder moves it (slot creation reaching consistency) it moves both to the
//!   same place;
//! - where and why the builder's current snapshot was built (its contents are compared).
//!
//! A follower keeps its own value of each of the last two until the leader's changes
//! (always to a later record's position, so a change is seen): [`Join::follower_now`].

use serde_json::Value;

use crate::include::snapbuild::SnapshotOrigin;
use crate::include::xlogdefs::Lsn;
use crate::replication::decode::Replay;

/// The replay as serialized, less the reorder buffer's bookkeeping that answers nothing
/// (first-seen counters, caches, spare boxes): its transactions compare as a set, their
/// order as the list of xids in first-LSN order. Two replays with equal values answer
/// every question alike and take every record alike. `None` if it does not serialize.
pub fn observable(r: &Replay) -> Option<Value> {
    let mut v = serde_json::to_value(r).ok()?;
    let rb = v
        .get_mut("builder")?
        .as_object_mut()?
        .get_mut("reorder")?
        .as_object_mut()?;
    for k in ["next_seq", "spare", "known", "based"] {
        rb.remove(k);
    }
    rb.insert(
        "toplevel".into(),
        Value::from(r.builder.reorder.toplevel_order()),
    );
    for t in rb.get_mut("txns")?.as_object_mut()?.values_mut() {
        t.as_object_mut()?.remove("seq");
    }
    Some(v)
}

/// What two replays that have both taken every record before `at` must share to go on
/// alike from `at`: [`observable`] but for `start_decoding_at` when it is at or before
/// `at`, and the provenance of the builder's snapshot (see the module's text). `None` if
/// the replay does not serialize.
pub fn join_key(r: &Replay, at: Lsn) -> Option<Value> {
    let mut v = observable(r)?;
    let b = v.get_mut("builder")?.as_object_mut()?;
    if r.builder.start_decoding_at <= at {
        b.remove("start_decoding_at");
    }
    if let Some(s) = b.get_mut("snapshot").and_then(Value::as_object_mut) {
        s.remove("built_at");
        s.remove("origin");
    }
    Some(v)
}

/// The fields a follower keeps of its own while the leader's stay as they were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Own {
    start_decoding_at: Lsn,
    snapshot: Option<(Option<Lsn>, SnapshotOrigin)>,
}

impl Own {
    fn of(r: &Replay) -> Own {
        Own {
            start_decoding_at: r.builder.start_decoding_at,
            snapshot: r.builder.snapshot.as_ref().map(|s| (s.built_at, s.origin)),
        }
    }
}

/// A follower's tie to its leader, made where their [`join_key`]s were equal.
#[derive(Clone, Debug)]
pub struct Join {
    own: Own,
    leader_then: Own,
}

impl Join {
    /// Ties `follower` to `leader`; both have taken the same records up to now and their
    /// [`join_key`]s are equal (the caller checks).
    pub fn new(follower: &Replay, leader: &Replay) -> Join {
        Join {
            own: Own::of(follower),
            leader_then: Own::of(leader),
        }
    }

    /// The follower's replay once the leader has been fed on to `leader`: a copy of it,
    /// with the follower's own `start_decoding_at` and snapshot provenance where the
    /// leader's did not change since the join.
    pub fn follower_now(&self, leader: &Replay) -> Replay {
        let mut r = leader.duplicate();
        let now = Own::of(leader);
        if now.start_decoding_at == self.leader_then.start_decoding_at {
            r.builder.start_decoding_at = self.own.start_decoding_at;
        }
        if now.snapshot == self.leader_then.snapshot {
            if let (Some(s), Some((built_at, origin))) =
                (r.builder.snapshot.as_mut(), self.own.snapshot)
            {
                s.built_at = built_at;
                s.origin = origin;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::decode::replay::fixtures::{head, record, restarted};
    use crate::replication::decode::{Payload, RecordKind, TwoPhaseDecoding};
    use crate::replication::snapbuild::RestoreResult;

    /// A decoder restarted from a file with x (and its subtransaction s, whose first
    /// change lies before the restart point) running; s changes again (known as
    /// top-level), x is prepared at 0x620. A two-phase decoder that started decoding at
    /// 0 assigns s to x at the PREPARE; one that starts at 0x700 skips the PREPARE and
    /// leaves s apart. A replay begun with the first start cannot be carried over to the
    /// second while x stays prepared; it can once x is finished, or without a PREPARE in
    /// between.
    #[test]
    fn a_replay_is_not_carried_past_a_prepare_it_decoded() {
        let (x, s) = (950, 951);
        let prepare = Payload::Prepare {
            xid: x,
            subxacts: vec![s],
            db_id: 5,
            gid: "g".into(),
        };
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        for major in [14, 16, 18] {
            let run = |start: u64| {
                let mut r = restarted(major, &[x, s]);
                r.builder.start_decoding_at = Lsn(start);
                r.two_phase = TwoPhaseDecoding {
                    enabled: true,
                    filter_gid_containing: None,
                };
                r
            };
            let (mut kept, mut fresh) = (run(0), run(0x700));
            for r in [&mut kept, &mut fresh] {
                r.feed(
                    &record(0x600, RecordKind::Change, s, 0),
                    &Payload::None,
                    &mut none,
                )
                .unwrap();
                r.feed(
                    &record(0x610, RecordKind::Change, x, 0),
                    &Payload::None,
                    &mut none,
                )
                .unwrap();
                r.feed(&head(0x620, RecordKind::Prepare, x), &prepare, &mut none)
                    .unwrap();
            }
            // The PREPARE left their reorder buffers apart (beyond their starts).
            let reorder =
                |r: &Replay| observable(r).and_then(|v| v.get("builder")?.get("reorder").cloned());
            assert_ne!(reorder(&kept), reorder(&fresh), "PG {major}");
            let mut carried = kept.duplicate();
            assert!(
                !carried.move_start_decoding_at(Lsn(0), Lsn(0x700)),
                "PG {major}"
            );
            // Past the prepare's start it makes no difference.
            assert!(
                carried.move_start_decoding_at(Lsn(0x621), Lsn(0x700)),
                "PG {major}"
            );
        }
    }
}
