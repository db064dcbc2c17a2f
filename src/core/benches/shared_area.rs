//! What a process holds the shared replays' lock for, without a server: a full area of
//! 64 MiB (64 slots' replays of about 1 MiB each, the largest `pg_snapbuild.shared_state_size`
//! a busy server would set) and one slot's replay stored anew.
//!
//! - `exclusive: apply (one entry appended)`: what a writer does under the lock in
//!   exclusive mode ([`apply`] of a plan made outside it): a generation check, one live
//!   byte cleared and the new entry's bytes copied: the cost of the entries that change;
//! - `exclusive: apply (compaction)`: the same when the area's tail is full and the plan
//!   is a new image of the whole area (one copy of 64 MiB);
//! - `exclusive: parse, merge and copy the whole area`: what the lock covered when the
//!   merge ran under it (the area parsed, a new image built and copied in);
//! - `shared: copy of the used area`: what a reader (and a writer's first step) holds the
//!   lock in shared mode for.
//!
//! Run: `cargo bench -p snapbuild-core --bench shared_area`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use snapbuild_core::replication::shared_replays::{
    apply, copy_len, entries, init, plan_store, Entry, ReplayKey,
};

const AREA: usize = 64 << 20;
const SLOTS: usize = 64;
const STATE: usize = (1 << 20) - 4096;

fn entry(i: usize, last_end: u64, state: usize) -> Entry {
    Entry {
        name: format!("cdc_slot_{i:02}"),
        key: ReplayKey {
            restart_lsn: 0x1_0000_0000 + i as u64 * 0x1000,
            database: 5,
            plugin: "pgoutput".into(),
            start_decoding_at: 0x2_0000_0000,
            ..Default::default()
        },
        observed_at: 1,
        last_end,
        state: vec![b'x'; state],
    }
}

/// An area holding every slot's replay once, with `tail` bytes left free.
fn full_area(tail: usize) -> Vec<u8> {
    let mut area = vec![0u8; AREA];
    init(&mut area);
    let per = (AREA - 64 - tail) / SLOTS;
    let mine: Vec<Entry> = (0..SLOTS).map(|i| entry(i, 1, per - 200)).collect();
    let copy = area[..copy_len(&area)].to_vec();
    let plan = plan_store(&copy, &mine, None, AREA).unwrap();
    assert!(apply(&mut area, &plan));
    assert_eq!(entries(&area[..copy_len(&area)]).len(), SLOTS);
    area
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("shared_area");
    g.sample_size(20);
    // Room for one more replay at the tail: a plain append.
    let base = full_area(2 * STATE);
    let copy = base[..copy_len(&base)].to_vec();
    let one = [entry(7, 2, STATE)];
    let append = plan_store(&copy, &one, None, AREA).unwrap();
    assert!(!append.rewrites());
    g.bench_function("exclusive: apply (one entry appended)", |b| {
        b.iter_batched_ref(
            || base.clone(),
            |area| assert!(apply(black_box(area), &append)),
            criterion::BatchSize::PerIteration,
        )
    });
    // No room: the plan compacts.
    let tight = full_area(1024);
    let tight_copy = tight[..copy_len(&tight)].to_vec();
    let compact = plan_store(&tight_copy, &one, None, AREA).unwrap();
    assert!(compact.rewrites());
    g.bench_function("exclusive: apply (compaction)", |b| {
        b.iter_batched_ref(
            || tight.clone(),
            |area| assert!(apply(black_box(area), &compact)),
            criterion::BatchSize::PerIteration,
        )
    });
    g.bench_function("exclusive: parse, merge and copy the whole area", |b| {
        b.iter_batched_ref(
            || tight.clone(),
            |area| {
                let plan = plan_store(&area[..copy_len(area)], &one, None, AREA).unwrap();
                assert!(apply(black_box(area), &plan));
            },
            criterion::BatchSize::PerIteration,
        )
    });
    g.bench_function("shared: copy of the used area", |b| {
        b.iter(|| {
            let n = copy_len(&base);
            let mut v = Vec::with_capacity(n);
            v.extend_from_slice(&base[..n]);
            black_box(v)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
