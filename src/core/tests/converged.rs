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

/// A commit record's payload in database 5.
fn commit(xid: u32, subxacts: Vec<u32>, has_invals: bool, gid: String) -> Payload {
    Payload::Commit {
        xid,
        subxacts,
        has_invals,
        db_id: 5,
        gid,
    }
}

/// An abort record's payload in database 5.
fn abort(xid: u32, subxacts: Vec<u32>, gid: String) -> Payload {
    Payload::Abort {
        xid,
        subxacts,
        db_id: 5,
        gid,
    }
}

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
                        abort(x, subxacts, String::new()),
                    )
                }
                _ => {
                    let subxacts = open.remove(&x).unwrap();
                    (
                        head(RecordKind::Commit, RM_XACT_ID, x, 0),
                        commit(x, subxacts, r.below(4) == 0, String::new()),
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

/// [`history`] with two-phase transactions: some transactions (with subtransactions)
/// are prepared, then committed or rolled back prepared later.
fn history_with_prepares(r: &mut Rng, len: usize) -> Vec<(RecordHead, Payload)> {
    let mut out = Vec::new();
    let mut next: u32 = 2000 + r.below(1000) as u32;
    // top-level xid -> (its subtransactions, the gid once prepared)
    let mut open: BTreeMap<u32, (Vec<u32>, Option<String>)> = BTreeMap::new();
    for _ in 0..1 + r.below(3) {
        open.insert(next, (Vec::new(), None));
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
            for (x, (subs, _)) in &open {
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
            open.insert(x, (Vec::new(), None));
            (head(RecordKind::Change, RM_HEAP_ID, x, 0), Payload::None)
        } else {
            let keys: Vec<u32> = open.keys().copied().collect();
            let x = keys[r.below(keys.len() as u64) as usize];
            let prepared = open[&x].1.clone();
            match (prepared, r.below(10)) {
                (Some(gid), _) if r.below(3) == 0 => {
                    let (subxacts, _) = open.remove(&x).unwrap();
                    (
                        head(RecordKind::AbortPrepared, RM_XACT_ID, 0, 0),
                        abort(x, subxacts, gid),
                    )
                }
                (Some(gid), _) => {
                    let (subxacts, _) = open.remove(&x).unwrap();
                    (
                        head(RecordKind::CommitPrepared, RM_XACT_ID, 0, 0),
                        commit(x, subxacts, r.below(4) == 0, gid),
                    )
                }
                (None, 0) => (head(RecordKind::Change, RM_HEAP_ID, x, 0), Payload::None),
                // a later change of a subtransaction: its record names no top-level xid,
                // so a decoder that began after the first one knows it as top-level
                (None, 1..=2) if !open[&x].0.is_empty() => {
                    let subs = &open[&x].0;
                    let s = subs[r.below(subs.len() as u64) as usize];
                    (head(RecordKind::Change, RM_HEAP_ID, s, 0), Payload::None)
                }
                (None, 1..=2) => (head(RecordKind::Change, RM_HEAP_ID, x, 0), Payload::None),
                (None, 3) => {
                    let s = next;
                    next += 1;
                    open.get_mut(&x).unwrap().0.push(s);
                    (head(RecordKind::Change, RM_HEAP_ID, s, x), Payload::None)
                }
                (None, 4..=6) => {
                    let gid = format!("g{x}");
                    let e = open.get_mut(&x).unwrap();
                    e.1 = Some(gid.clone());
                    (
                        head(RecordKind::Prepare, RM_XACT_ID, x, 0),
                        Payload::Prepare {
                            xid: x,
                            subxacts: e.0.clone(),
                            db_id: 5,
                            gid,
                        },
                    )
                }
                (None, 7) => {
                    let (subxacts, _) = open.remove(&x).unwrap();
                    (
                        head(RecordKind::Abort, RM_XACT_ID, x, 0),
                        abort(x, subxacts, String::new()),
                    )
                }
                (None, _) => {
                    let (subxacts, _) = open.remove(&x).unwrap();
                    (
                        head(RecordKind::Commit, RM_XACT_ID, x, 0),
                        commit(x, subxacts, r.below(4) == 0, String::new()),
                    )
                }
            }
        };
        out.push(rec);
    }
    out
}

/// A slot's kept replay carried over to the slot's later confirmed_flush
/// (`Replay::move_start_decoding_at`, what the replays kept between calls do when only
/// the consumer's position moved) must be exactly a replay begun with that start, with
/// and without two-phase decoding; where it refuses, the caller replays anew.
#[test]
fn a_replay_carried_to_a_later_start_is_a_fresh_one() {
    use snapbuild_core::replication::decode::TwoPhaseDecoding;
    let (mut carried, mut refused, mut checked) = (0u64, 0u64, 0u64);
    for major in [14u32, 15, 16, 17, 18] {
        for seed in 1..300u64 {
            let mut r = Rng(seed * 7919 + major as u64);
            let recs = history_with_prepares(&mut r, 140);
            let two_phase = r.below(2) == 0;
            let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
            let lsn_at = |r: &mut Rng| recs[r.below(recs.len() as u64) as usize].0.lsn;
            let old = if r.below(4) == 0 {
                Lsn(0)
            } else {
                lsn_at(&mut r)
            };
            let new = Lsn(old.0.max(lsn_at(&mut r).0) + 8 * r.below(2));
            // Where the slot's restart_lsn is (the replays begin there) and where the
            // kept one is carried over.
            let first = r.below(recs.len() as u64 / 2) as usize;
            let cut = first + r.below((recs.len() - first) as u64) as usize;
            // Half the time the slot's restart_lsn is a serialized snapshot (branch b):
            // the replays are consistent at once, with transactions running that began
            // before it (their subtransactions known as top-level until assigned).
            let restore_at = (r.below(2) == 0)
                .then(|| {
                    recs[first..]
                        .iter()
                        .find(|(h, _)| h.kind == RecordKind::RunningXacts)
                })
                .flatten()
                .map(|(h, _)| h.lsn);
            let file = {
                let mut b = snapbuild_core::replication::snapbuild::SnapBuild::new(
                    &BuilderParams::plain(PgVersion::newest(major), false),
                );
                b.process_running_xacts(Lsn(1), &RunningXacts::new(1500, 1500, &[]), &mut none)
                    .unwrap();
                b.serialize(Lsn(1))
            };
            let mut none =
                |at: Lsn| -> RestoreResult { Ok((Some(at) == restore_at).then(|| file.clone())) };
            let make = |start: Lsn| {
                let mut p = BuilderParams::plain(PgVersion::newest(major), false);
                p.start_decoding_at = start;
                let mut replay = Replay::new(&p, 5);
                replay.two_phase = TwoPhaseDecoding {
                    enabled: two_phase,
                    filter_gid_containing: None,
                };
                replay.quiet = true;
                replay
            };
            let mut kept = make(old);
            let mut fresh = make(new);
            let mut feed = |replay: &mut Replay, (h, p): &(RecordHead, Payload)| {
                if let Some(row) = replay.feed_lean(h, p, &mut none).unwrap() {
                    replay.give_back(row);
                }
            };
            for rec in &recs[first..cut] {
                feed(&mut kept, rec);
                feed(&mut fresh, rec);
            }
            if !kept.move_start_decoding_at(old, new) {
                refused += 1;
                continue;
            }
            carried += 1;
            assert_eq!(
                observable(&kept),
                observable(&fresh),
                "PG{major} seed {seed}: carried from {old} to {new} after {cut} records"
            );
            for rec in &recs[cut..] {
                feed(&mut kept, rec);
                feed(&mut fresh, rec);
                assert_eq!(
                    observable(&kept),
                    observable(&fresh),
                    "PG{major} seed {seed}: carried from {old} to {new} after {cut} records, at {}",
                    rec.0.lsn
                );
                checked += 1;
            }
        }
    }
    eprintln!("{carried} carried over, {refused} refused, {checked} checks");
    assert!(
        carried > 800 && refused > 20,
        "{carried} carried, {refused} refused"
    );
}
