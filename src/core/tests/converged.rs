//! Replays that have come to the same state ([`snapbuild_core::replication::converged`]):
//! on random histories, replays of several slots (different starts, start_decoding_at,
//! creating or not) are fed on their own; wherever two have equal join keys, the one
//! that would follow must, at every later record, be exactly what its own replay is
//! (every field but the reorder buffer's bookkeeping).

use std::collections::BTreeMap;

use snapbuild_core::include::rmgrlist::{RM_HEAP_ID, RM_STANDBY_ID, RM_XACT_ID};
use snapbuild_core::include::xlogdefs::Lsn;
use snapbuild_core::replication::converged::{join_key, observable, Join};
use snapbuild_core::replication::decode::{Payload, RecordHead, RecordKind, Replay};
use snapbuild_core::replication::snapbuild::RestoreResult;
use snapbuild_core::{BuilderParams, PgVersion, RunningXacts};

mod common;
use common::Rng;

/// A plausible history: transactions with changes, subtransactions, commits (some with
/// catalog changes), aborts, and RUNNING_XACTS records listing what runs.
fn history(r: &mut Rng, len: usize) -> Vec<(RecordHead, Payload)> {
    let mut out = Vec::new();
    let mut next: u32 = 1000 + r.below(1000) as u32;
    // top-level xid -> its subtransactions
    let mut open: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for _ in 0..1 + r.below(3) {
        open.insert(next, Vec::new());
        next += 1;
    }
    let mut lsn = 100u64;
    for step in 0..len {
        lsn += 16 + r.below(4) * 8;
        let head = |kind, rmid, x, top| RecordHead {
            lsn: Lsn(lsn),
            end_lsn: Lsn(lsn + 8),
            xid: x,
            top_xid: top,
            rmid,
            kind,
            name: None,
        };
        let pick = r.below(12);
        let rec = if pick == 0 || step < 2 {
            let mut running: Vec<u32> = Vec::new();
            for (x, subs) in &open {
                running.push(*x);
                running.extend(subs);
            }
            running.sort_unstable();
            let oldest = open.keys().next().copied().unwrap_or(next);
            (
                head(RecordKind::RunningXacts, RM_STANDBY_ID, 0, 0),
                Payload::RunningXacts(RunningXacts::new(oldest, next, &running)),
            )
        } else if pick <= 2 || open.is_empty() {
            let x = next;
            next += 1;
            open.insert(x, Vec::new());
            (head(RecordKind::Change, RM_HEAP_ID, x, 0), Payload::None)
        } else {
            let keys: Vec<u32> = open.keys().copied().collect();
            let x = keys[r.below(keys.len() as u64) as usize];
            match r.below(8) {
                0..=2 => (head(RecordKind::Change, RM_HEAP_ID, x, 0), Payload::None),
                3 => {
                    // a subtransaction's first change carries its top-level xid
                    let s = next;
                    next += 1;
                    open.get_mut(&x).unwrap().push(s);
                    (head(RecordKind::Change, RM_HEAP_ID, s, x), Payload::None)
                }
                4 => {
                    let subxacts = open.remove(&x).unwrap();
                    (
                        head(RecordKind::Abort, RM_XACT_ID, x, 0),
                        Payload::Abort {
                            xid: x,
                            subxacts,
                            db_id: 5,
                            gid: String::new(),
                        },
                    )
                }
                _ => {
                    let subxacts = open.remove(&x).unwrap();
                    (
                        head(RecordKind::Commit, RM_XACT_ID, x, 0),
                        Payload::Commit {
                            xid: x,
                            subxacts,
                            has_invals: r.below(4) == 0,
                            db_id: 5,
                            gid: String::new(),
                        },
                    )
                }
            }
        };
        out.push(rec);
    }
    out
}

#[test]
fn a_follower_is_what_its_own_replay_would_be() {
    let mut joins = 0;
    let mut joins_keeping_own = 0;
    let mut checked = 0u64;
    for major in [14u32, 15, 16, 18] {
        for seed in 1..400u64 {
            let mut r = Rng(seed * 104_729 + major as u64);
            let recs = history(&mut r, 160);
            let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
            // Four slots: where each starts, and its decoder.
            let mut replays: Vec<(usize, Replay)> = (0..4)
                .map(|i| {
                    let start = if i == 0 { 0 } else { r.below(60) as usize };
                    let creating = r.below(3) == 0;
                    let mut p = BuilderParams::plain(PgVersion::newest(major), creating);
                    if !creating {
                        // confirmed_flush: before, inside or past the history
                        p.start_decoding_at = match r.below(3) {
                            0 => Lsn(0),
                            1 => recs[r.below(recs.len() as u64) as usize].0.lsn,
                            _ => Lsn(1 << 40),
                        };
                    }
                    let mut replay = Replay::new(&p, 5);
                    replay.quiet = true;
                    (start, replay)
                })
                .collect();
            // follower index -> (leader index, the tie)
            let mut tied: BTreeMap<usize, (usize, Join)> = BTreeMap::new();
            for (j, (h, payload)) in recs.iter().enumerate() {
                for (start, replay) in replays.iter_mut() {
                    if *start <= j {
                        if let Some(row) = replay.feed_lean(h, payload, &mut none).unwrap() {
                            replay.give_back(row);
                        }
                    }
                }
                for (f, (l, tie)) in &tied {
                    let followed = observable(&tie.follower_now(&replays[*l].1));
                    assert_eq!(
                        followed,
                        observable(&replays[*f].1),
                        "PG{major} seed {seed}: slot {f} following slot {l}, after record {j}"
                    );
                    checked += 1;
                }
                let at = h.end_lsn;
                for b in 1..replays.len() {
                    if tied.contains_key(&b) || replays[b].0 > j {
                        continue;
                    }
                    let kb = join_key(&replays[b].1, at);
                    let leader = (0..b).find(|&a| {
                        !tied.contains_key(&a)
                            && replays[a].0 <= j
                            && join_key(&replays[a].1, at) == kb
                    });
                    if let Some(a) = leader {
                        let (ra, rb) = (&replays[a].1, &replays[b].1);
                        if ra.builder.start_decoding_at != rb.builder.start_decoding_at
                            || ra.builder.snapshot != rb.builder.snapshot
                        {
                            joins_keeping_own += 1;
                        }
                        tied.insert(b, (a, Join::new(rb, ra)));
                        joins += 1;
                    }
                }
            }
        }
    }
    // The histories must bring replays together, also ones that differ in what a
    // follower keeps of its own; else this test would show nothing.
    eprintln!("{joins} joins ({joins_keeping_own} keeping own fields), {checked} checks");
    assert!(joins > 500, "only {joins} joins");
    assert!(
        joins_keeping_own > 150,
        "only {joins_keeping_own} joins that keep own fields"
    );
    assert!(checked > 30_000, "only {checked} checks");
}

#[test]
fn replays_apart_are_not_joined() {
    // Different databases decide DecodeTXNNeedSkip differently: never alike.
    let p = BuilderParams::plain(PgVersion::newest(18), false);
    let a = Replay::new(&p, 5);
    let b = Replay::new(&p, 6);
    assert_ne!(join_key(&a, Lsn(0)), join_key(&b, Lsn(0)));
    // start_decoding_at still ahead decides which commits are skipped.
    let mut q = p.clone();
    q.start_decoding_at = Lsn(500);
    let c = Replay::new(&q, 5);
    assert_ne!(join_key(&a, Lsn(100)), join_key(&c, Lsn(100)));
    assert_eq!(join_key(&a, Lsn(500)), join_key(&c, Lsn(500)));
}
