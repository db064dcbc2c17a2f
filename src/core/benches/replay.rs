//! The replay's cost per record without a server: a synthetic pgbench-like stream of a
//! million WAL records (eight clients interleaved; per transaction three heap updates, one
//! insert, three btree records and a commit; a RUNNING_XACTS every 20 000 records) fed
//! through decode.c's dispatch (`Replay::feed_lean`, the trace's hot loop, and
//! `Replay::feed`, which builds a row for every record as `all_records` does).
//!
//! Run: `cargo bench -p snapbuild-core --bench replay` (criterion prints records/s).
//! A core change that makes the hot loop slower shows here, without a server.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use snapbuild_core::include::rmgrlist::{RM_HEAP_ID, RM_STANDBY_ID, RM_XACT_ID};
use snapbuild_core::replication::decode::{Payload, RecordHead, RecordKind};
use snapbuild_core::{BuilderParams, Lsn, PgVersion, Replay, RestoreResult, RunningXacts};

/// btree's rmgr id (rmgrlist.h): a record the builder only learns the xid of.
const RM_BTREE_ID: u8 = 11;
const RECORDS: usize = 1_000_000;
const CLIENTS: usize = 8;
const DB: u32 = 5;

/// The stream, generated as it is read (a stored million records would measure the
/// memory bus, not the replay): (header, payload) per record, LSNs increasing by a
/// typical record size.
struct Stream {
    emitted: usize,
    lsn: u64,
    next_xid: u32,
    /// Per client: its xid and the records of its transaction emitted so far.
    clients: [(u32, u32); CLIENTS],
    turn: usize,
}

impl Stream {
    fn new() -> Self {
        let mut clients = [(0, 0); CLIENTS];
        for (i, c) in clients.iter_mut().enumerate() {
            *c = (1000 + i as u32, 0);
        }
        Stream {
            emitted: 0,
            lsn: 0x0100_0000,
            next_xid: 1000 + CLIENTS as u32,
            clients,
            turn: 0,
        }
    }

    fn record(&mut self, kind: RecordKind, rmid: u8, xid: u32, size: u64) -> RecordHead {
        let h = RecordHead {
            lsn: Lsn(self.lsn),
            end_lsn: Lsn(self.lsn + size),
            xid,
            top_xid: 0,
            rmid,
            kind,
            name: None,
        };
        self.lsn += size.div_ceil(8) * 8;
        h
    }
}

impl Iterator for Stream {
    type Item = (RecordHead, Payload);

    fn next(&mut self) -> Option<(RecordHead, Payload)> {
        if self.emitted == RECORDS {
            return None;
        }
        self.emitted += 1;
        if self.emitted % 20_000 == 1 {
            let running: Vec<u32> = self.clients.iter().map(|c| c.0).collect();
            let oldest = *running.iter().min().unwrap();
            let payload = Payload::RunningXacts(RunningXacts::new(oldest, self.next_xid, &running));
            let head = self.record(
                RecordKind::RunningXacts,
                RM_STANDBY_ID,
                0,
                24 + 4 * CLIENTS as u64,
            );
            return Some((head, payload));
        }
        let i = self.turn % CLIENTS;
        self.turn += 1;
        let (xid, n) = self.clients[i];
        let out = match n {
            0..=2 | 6 => (
                self.record(RecordKind::Change, RM_HEAP_ID, xid, 76),
                Payload::None,
            ),
            3..=5 => (
                self.record(RecordKind::Other, RM_BTREE_ID, xid, 64),
                Payload::None,
            ),
            _ => {
                let head = self.record(RecordKind::Commit, RM_XACT_ID, xid, 46);
                self.clients[i] = (self.next_xid, 0);
                self.next_xid += 1;
                return Some((
                    head,
                    Payload::Commit {
                        xid,
                        subxacts: Vec::new(),
                        has_invals: false,
                        db_id: DB,
                        gid: String::new(),
                    },
                ));
            }
        };
        self.clients[i].1 += 1;
        Some(out)
    }
}

fn params() -> BuilderParams {
    BuilderParams::plain(PgVersion::newest(18), true)
}

fn replay(c: &mut Criterion) {
    let mut none = |_: Lsn| -> RestoreResult { Ok(None) };
    let mut g = c.benchmark_group("replay");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS as u64));
    // What generating the stream costs by itself (subtract it from the others).
    g.bench_function("stream only", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for (h, p) in Stream::new() {
                n += h.xid as u64 + matches!(p, Payload::Commit { .. }) as u64;
            }
            black_box(n)
        })
    });
    g.bench_function("feed_lean (trace)", |b| {
        b.iter(|| {
            let mut r = Replay::new(&params(), DB);
            let mut rows = 0u64;
            for (h, p) in Stream::new() {
                if let Some(row) = r.feed_lean(&h, &p, &mut none).unwrap() {
                    rows += row.interesting as u64;
                }
            }
            black_box(rows)
        })
    });
    g.bench_function("feed (a row per record, all_records)", |b| {
        b.iter(|| {
            let mut r = Replay::new(&params(), DB);
            let mut rows = 0u64;
            for (h, p) in Stream::new() {
                rows += r.feed(&h, &p, &mut none).unwrap().interesting as u64;
            }
            black_box(rows)
        })
    });
    g.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
