//! Seeded random testing of the pure core: no input may panic it, and the state machine
//! keeps the invariants snapbuild.c relies on. Deterministic (fixed seeds), so a failure
//! prints the seed that reproduces it.

use snapbuild_core::include::snapbuild::SnapBuildState;
use snapbuild_core::include::transam;
use snapbuild_core::include::xlogdefs::Lsn;
use snapbuild_core::replication::snapbuild::{RestoreResult, SnapBuild};
use snapbuild_core::replication::snapbuild_ondisk::SnapBuildOnDisk;
use snapbuild_core::{BuilderParams, PgVersion, RunningXacts};

mod common;
use common::Rng;

#[test]
fn decoders_never_panic_on_random_bytes() {
    for seed in 1..2000u64 {
        let mut r = Rng(seed);
        let len = r.below(400) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        for v in [4, 5, 6] {
            let _ = SnapBuildOnDisk::decode(&bytes, v);
        }
        let _ = RunningXacts::parse(&bytes);
    }
}

#[test]
fn mutated_valid_files_fail_cleanly_or_roundtrip() {
    let mut b = SnapBuild::new(&params(18, false));
    let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
    b.process_running_xacts(Lsn(1), &RunningXacts::new(900, 900, &[]), &mut none)
        .unwrap();
    b.committed_xip = vec![901, 905, 903];
    let good = b.serialize(Lsn(0x1000)).encode().unwrap();
    for seed in 1..3000u64 {
        let mut r = Rng(seed);
        let mut bytes = good.clone();
        match r.below(3) {
            0 => bytes.truncate(r.below(good.len() as u64) as usize),
            1 => {
                let i = r.below(bytes.len() as u64) as usize;
                bytes[i] ^= 1 << r.below(8);
            }
            _ => bytes.extend((0..r.below(16)).map(|_| r.next() as u8)),
        }
        match SnapBuildOnDisk::decode(&bytes, 6) {
            // Only appended bytes (ignored, as the server ignores them) may still decode.
            Ok(f) => assert!(
                bytes.len() >= good.len() && f.encode().unwrap() == good,
                "seed {seed}"
            ),
            Err(e) => assert!(!e.message("x").is_empty(), "seed {seed}"),
        }
    }
}

fn params(major: u32, creating: bool) -> BuilderParams {
    BuilderParams::plain(PgVersion::newest(major), creating)
}

/// Random but plausible histories of RUNNING_XACTS records (xids start anywhere, even
/// next to the wraparound point): the builder's state only moves forward, consistency
/// is reached exactly when the server's rules say so, and the builder's xmin always
/// follows the last oldestRunningXid.
#[test]
fn state_machine_invariants_on_random_histories() {
    for seed in 1..1500u64 {
        let mut r = Rng(seed);
        let mut next: u32 = match r.below(3) {
            0 => 3 + r.below(1000) as u32,
            1 => u32::MAX - r.below(50) as u32,
            _ => r.next() as u32 | 3,
        };
        let mut running: Vec<u32> = Vec::new();
        let mut b = SnapBuild::new(&params(18, true));
        let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
        let mut phase_target: Option<u32> = None;
        for step in 0..40u64 {
            // Finish some, start some.
            running.retain(|_| r.below(3) != 0);
            for _ in 0..r.below(3) {
                running.push(next);
                next = transam::advance(next);
            }
            let oldest = running.iter().copied().min_by(|a, b| {
                if transam::precedes(*a, *b) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                }
            });
            let oldest = oldest.unwrap_or(next);
            let before = b.state;
            let s = b
                .process_running_xacts(
                    Lsn(100 * (step + 1)),
                    &RunningXacts::new(oldest, next, &running),
                    &mut none,
                )
                .unwrap();
            assert!(b.state >= before, "seed {seed}: state went back");
            assert_eq!(b.xmin, oldest, "seed {seed}");
            if before < SnapBuildState::Consistent {
                if oldest == next {
                    assert_eq!(b.state, SnapBuildState::Consistent, "seed {seed}: branch a");
                } else if before == SnapBuildState::Start {
                    assert_eq!(b.state, SnapBuildState::BuildingSnapshot);
                    phase_target = Some(next);
                } else if let Some(t) = phase_target {
                    let reached = transam::precedes_or_equals(t, oldest);
                    assert_eq!(
                        b.state > before,
                        reached,
                        "seed {seed} step {step}: {:?}",
                        s.branch
                    );
                    if reached {
                        phase_target = Some(next);
                    }
                }
            }
            // Waits are for top-level xids not after the cutoff only.
            for w in &s.wait_xids {
                assert!(running.contains(w));
            }
        }
    }
}

/// Random two-phase histories through decode.c's dispatch (Replay::feed) on a slot with
/// `two_phase`: transactions that change rows, only lock rows (known, no changes) or do
/// nothing, PREPARE, COMMIT / ROLLBACK PREPARED, plain commits, RUNNING_XACTS records; the
/// builder is consistent after the first ones and `two_phase_at` / `start_decoding_at`
/// are set where it became consistent, as DecodingContextFindStartpoint does.
///
/// Every seventh record, the lean replay is serialized and read back (as the shared area
/// holds replays between processes) before it is fed: its rows must stay those of `feed`.
/// A third replay is fed with no rows ([`Replay::quiet`], as the slots' health feeds it):
/// its state changes must be the rows' and its builder, every tenth record, the lean one's.
///
/// The protocol a downstream relies on: COMMIT PREPARED is only sent for a transaction
/// whose PREPARE it got (earlier, or replayed at COMMIT PREPARED), and
/// `decoded` is true exactly when a callback ran. PostgreSQL 15.19+ keep it; 14.22 sends
/// COMMIT PREPARED for a prepared transaction that only locked rows without
/// ever sending its PREPARE (what pgrx-tests `scenarios` observes on the real servers):
/// some history must show that on 14.
#[test]
fn two_phase_protocol_on_random_histories() {
    use snapbuild_core::include::rmgrlist::{RM_HEAP_ID, RM_STANDBY_ID, RM_XACT_ID};
    use snapbuild_core::replication::decode::{
        Payload, RecordHead, RecordKind, Replay, TwoPhaseDecoding,
    };
    use std::collections::{BTreeMap, BTreeSet};
    for major in [14u32, 15, 18] {
        let mut violations_14 = 0;
        let mut seen: BTreeSet<&'static str> = BTreeSet::new();
        for seed in 1..1500u64 {
            let mut r = Rng(seed * 7919 + major as u64);
            let mut p = params(major, true);
            p.two_phase_at = Lsn(0);
            let mut replay = Replay::new(&p, 5);
            replay.two_phase = TwoPhaseDecoding::for_slot(true, "test_decoding");
            // The same history through the hot loop's feed_lean: every row equal to feed's.
            let mut lean = Replay::new(&p, 5);
            lean.two_phase = TwoPhaseDecoding::for_slot(true, "test_decoding");
            // And through feed_lean with no rows (the slots' health): the same builder.
            let mut quiet = Replay::new(&p, 5);
            quiet.two_phase = TwoPhaseDecoding::for_slot(true, "test_decoding");
            quiet.quiet = true;
            let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
            let mut lsn = 100u64;
            let mut next: u32 = 1000;
            // xid -> (gid, prepared?)
            let mut open: BTreeMap<u32, Option<String>> = BTreeMap::new();
            let mut got_prepare: BTreeSet<u32> = BTreeSet::new();
            let mut was_consistent = false;
            // Transactions already running when the slot is created: the builder goes
            // through BUILDING and FULL_SNAPSHOT until they end.
            for _ in 0..1 + r.below(3) {
                open.insert(next, None);
                next += 1;
            }
            for step in 0..120u64 {
                lsn += 16;
                let head = |kind, rmid, x| RecordHead {
                    lsn: Lsn(lsn),
                    end_lsn: Lsn(lsn + 8),
                    xid: x,
                    top_xid: 0,
                    rmid,
                    kind,
                    name: None,
                };
                let pick = r.below(10);
                let (h, payload) = if pick == 0 || step < 2 {
                    let running: Vec<u32> = open.keys().copied().collect();
                    let oldest = running.first().copied().unwrap_or(next);
                    (
                        head(RecordKind::RunningXacts, RM_STANDBY_ID, 0),
                        Payload::RunningXacts(RunningXacts::new(oldest, next, &running)),
                    )
                } else if pick <= 2 || open.is_empty() {
                    // a new transaction: a row change, a row lock, or a first record later
                    let x = next;
                    next += 1;
                    open.insert(x, None);
                    let kind = if r.below(3) == 0 {
                        RecordKind::Other // heap LOCK: known, no change
                    } else {
                        RecordKind::Change
                    };
                    (head(kind, RM_HEAP_ID, x), Payload::None)
                } else {
                    let keys: Vec<u32> = open.keys().copied().collect();
                    let x = keys[r.below(keys.len() as u64) as usize];
                    match open[&x].clone() {
                        None if r.below(3) == 0 => {
                            (head(RecordKind::Change, RM_HEAP_ID, x), Payload::None)
                        }
                        None if r.below(2) == 0 => {
                            let gid = if r.below(4) == 0 {
                                format!("g{x}_nodecode")
                            } else {
                                format!("g{x}")
                            };
                            open.insert(x, Some(gid.clone()));
                            (
                                head(RecordKind::Prepare, RM_XACT_ID, x),
                                Payload::Prepare {
                                    xid: x,
                                    subxacts: vec![],
                                    db_id: 5,
                                    gid,
                                },
                            )
                        }
                        None => {
                            open.remove(&x);
                            (
                                head(RecordKind::Commit, RM_XACT_ID, x),
                                Payload::Commit {
                                    xid: x,
                                    subxacts: vec![],
                                    has_invals: false,
                                    db_id: 5,
                                    gid: String::new(),
                                },
                            )
                        }
                        Some(gid) => {
                            open.remove(&x);
                            if r.below(3) == 0 {
                                (
                                    head(RecordKind::AbortPrepared, RM_XACT_ID, 0),
                                    Payload::Abort {
                                        xid: x,
                                        subxacts: vec![],
                                        db_id: 5,
                                        gid,
                                    },
                                )
                            } else {
                                (
                                    head(RecordKind::CommitPrepared, RM_XACT_ID, 0),
                                    Payload::Commit {
                                        xid: x,
                                        subxacts: vec![],
                                        has_invals: false,
                                        db_id: 5,
                                        gid,
                                    },
                                )
                            }
                        }
                    }
                };
                if step % 7 == 3 {
                    // The replay as the shared area holds it (serialized, then read back by
                    // another process): it must go on exactly as the one never serialized.
                    let bytes = serde_json::to_vec(&lean).unwrap();
                    lean = serde_json::from_slice(&bytes).unwrap();
                }
                let row = replay.feed(&h, &payload, &mut none).unwrap();
                let lean_row = match lean.feed_lean(&h, &payload, &mut none).unwrap() {
                    Some(r) => *r,
                    None => {
                        assert!(!row.interesting, "seed {seed}: feed_lean dropped a row");
                        lean.quiet_row(&h)
                    }
                };
                assert_eq!(format!("{row:?}"), format!("{lean_row:?}"), "seed {seed}");
                let before = quiet.builder.state;
                if let Some(r) = quiet.feed_lean(&h, &payload, &mut none).unwrap() {
                    quiet.give_back(r);
                }
                assert_eq!(quiet.builder.state != before, row.state != row.state_before);
                if step % 10 == 9 {
                    // As JSON values: maps compare by content, not by iteration order.
                    assert_eq!(
                        serde_json::to_value(&quiet.builder).unwrap(),
                        serde_json::to_value(&lean.builder).unwrap(),
                        "seed {seed} step {step}: the builder without rows"
                    );
                }
                if !was_consistent && replay.builder.state == SnapBuildState::Consistent {
                    // DecodingContextFindStartpoint: the slot's two_phase_at and
                    // confirmed_flush are the end of this record.
                    was_consistent = true;
                    for r in [&mut replay, &mut lean, &mut quiet] {
                        r.builder.two_phase_at = row.end_lsn;
                        r.builder.start_decoding_at = row.end_lsn;
                    }
                }
                if let Some(d) = row.decode {
                    seen.insert(d.label());
                    assert_eq!(d.decoded(), !d.sends().is_empty());
                    let x = row.xid.expect("a verdict names its xid");
                    for cb in d.sends() {
                        match *cb {
                            "prepare" => {
                                got_prepare.insert(x);
                            }
                            // ROLLBACK PREPARED may come without its PREPARE (ReorderBuffer-
                            // FinishPrepared replays nothing for an abort; a subscriber ignores
                            // an unknown gid there), COMMIT PREPARED may not.
                            "commit_prepared" => {
                                if !got_prepare.contains(&x) {
                                    assert_eq!(
                                        major, 14,
                                        "seed {seed} step {step}: {cb} of {x} without its PREPARE: {d:?}"
                                    );
                                    violations_14 += 1;
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        if major == 14 {
            assert!(
                violations_14 > 0,
                "14.22's lock-only COMMIT PREPARED never came up"
            );
        }
        for label in [
            "prepared",
            "commit prepared",
            "prepared and commit prepared",
            "rollback prepared",
            "prepare skipped: not yet consistent",
            "prepare filtered: decoded at COMMIT PREPARED",
            "skipped: no decoded changes",
            "decoded",
        ] {
            assert!(
                seen.contains(label),
                "PG{major}: no history reached {label:?}: {seen:?}"
            );
        }
    }
}
