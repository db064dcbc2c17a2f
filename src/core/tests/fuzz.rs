//! Seeded random testing of the pure core: no input may panic it, and the state machine
//! keeps the invariants snapbuild.c relies on. Deterministic (fixed seeds), so a failure
//! prints the seed that reproduces it.

use snapbuild_core::lsn::Lsn;
use snapbuild_core::ondisk::SnapBuildOnDisk;
use snapbuild_core::snapbuild::{RestoreResult, SnapBuild, SnapBuildState};
use snapbuild_core::xid;
use snapbuild_core::{BuilderParams, PgMajor, RunningXacts};

/// xorshift64*: small, deterministic, good enough to spread inputs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

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
    b.process_running_xacts(Lsn(1), &rx(900, 900, &[]), &mut none)
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
    BuilderParams {
        major: PgMajor(major),
        initial_xmin_horizon: 0,
        start_decoding_at: Lsn(0),
        building_full_snapshot: false,
        in_slot_creation: creating,
        two_phase_at: Lsn(0),
    }
}

fn rx(oldest: u32, next: u32, xids: &[u32]) -> RunningXacts {
    RunningXacts {
        xcnt: xids.len() as u32,
        subxcnt: 0,
        subxid_overflow: false,
        next_xid: next,
        oldest_running_xid: oldest,
        latest_completed_xid: next.wrapping_sub(1),
        xids: xids.to_vec(),
    }
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
                next = xid::advance(next);
            }
            let oldest = running.iter().copied().min_by(|a, b| {
                if xid::precedes(*a, *b) {
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
                    &rx(oldest, next, &running),
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
                    let reached = xid::precedes_or_equals(t, oldest);
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
