//! The accounting's rules, each on a small history worked out by hand from reorderbuffer.c.

use super::*;

fn rules(work_mem_kb: u64, streaming: bool) -> MemoryRules {
    MemoryRules {
        major: 18,
        sizes: StructSizes::x86_64(18),
        work_mem_bytes: work_mem_kb * 1024,
        streaming,
        immediate: false,
        xid_status: None,
        relation_layout: None,
    }
}

fn insert(size: u64) -> Change {
    Change {
        clear_toast: true,
        ..Change::plain(ChangeAction::Insert, size)
    }
}

/// A transaction `xid` with a base snapshot and `n` inserts of `size` bytes.
fn fill(m: &mut ReorderMemory, xid: TransactionId, n: usize, size: u64) {
    m.process_xid(xid, Lsn(1));
    m.set_base_snapshot(xid, Lsn(1));
    for i in 0..n {
        m.queue_change(xid, Lsn(100 + i as u64), insert(size), false);
    }
}

#[test]
fn a_transaction_under_the_limit_counts_its_bytes_once() {
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 700, 10, 200);
    m.replay(700, Lsn(9000), Lsn(9100), TxnOutcome::Sent, false);
    assert_eq!(m.stats.total_txns, 1);
    assert_eq!(m.stats.total_bytes, 2000);
    assert_eq!(m.stats.spill_count, 0);
    assert_eq!(m.size, 0);
    assert_eq!(m.ended.len(), 1);
    assert_eq!(m.ended[0].total_bytes, 2000);
}

#[test]
fn the_largest_transaction_is_spilled_at_the_limit() {
    // 64 kB: the small one holds 10 kB, the big one reaches the limit
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 700, 10, 1024);
    fill(&mut m, 701, 54, 1024);
    assert_eq!(m.stats.spill_count, 1);
    assert_eq!(m.stats.spill_txns, 1);
    assert_eq!(m.stats.spill_bytes, 54 * 1024);
    assert_eq!(m.size, 10 * 1024);
    // at commit, what it still holds is spilled too (a second spill, same transaction)
    m.queue_change(701, Lsn(5000), insert(1024), false);
    m.replay(701, Lsn(9000), Lsn(9100), TxnOutcome::Sent, false);
    assert_eq!(m.stats.spill_count, 2);
    assert_eq!(m.stats.spill_txns, 1);
    assert_eq!(m.stats.total_bytes, 55 * 1024);
}

#[test]
fn each_return_to_disk_adds_what_the_transaction_holds() {
    // 10 000 changes read back 4096 at a time: three returns to disk, each adding the
    // chunk it lets go of, and nothing left at the end
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 700, 10_000, 100);
    m.replay(700, Lsn(90_000), Lsn(90_100), TxnOutcome::Sent, false);
    assert_eq!(m.stats.total_bytes, 1_000_000);
    // a TOAST chunk kept aside across the return to disk is counted at both
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 700, 4095, 100);
    let chunk = Change {
        toast_chunk: true,
        ..Change::plain(ChangeAction::Insert, 1000)
    };
    m.queue_change(700, Lsn(50_000), chunk, true);
    m.queue_change(700, Lsn(50_001), insert(100), false);
    m.replay(700, Lsn(90_000), Lsn(90_100), TxnOutcome::Sent, false);
    // first return: 4095 rows + the chunk (handed out last, kept aside); then the row
    // after it, with the chunk still aside until that row resets it
    assert_eq!(m.stats.total_bytes, (409_500 + 1000) + (1000 + 100));
}

#[test]
fn two_largest_of_one_size_are_undecided() {
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 700, 32, 1024);
    assert!(m.undecided.is_none());
    fill(&mut m, 701, 32, 1024);
    assert!(m
        .undecided
        .as_deref()
        .is_some_and(|w| w.contains("largest")));
}

#[test]
fn a_streamed_transaction_counts_once_in_stream_txns() {
    let mut m = ReorderMemory::new(rules(64, true));
    m.can_start_streaming = true;
    fill(&mut m, 700, 130, 1024);
    assert_eq!(m.stats.stream_txns, 1);
    assert_eq!(m.stats.stream_count, 2);
    assert_eq!(m.stats.spill_count, 0);
    m.replay(700, Lsn(9000), Lsn(9100), TxnOutcome::Sent, false);
    // the commit streams the rest (two changes) once more
    assert_eq!(m.stats.stream_count, 3);
    assert_eq!(m.stats.stream_txns, 1);
    assert_eq!(m.stats.total_txns, 1);
    assert_eq!(m.stats.total_bytes, 130 * 1024);
    assert_eq!(m.stats.stream_bytes, 130 * 1024);
}

#[test]
fn aborted_and_forgotten_transactions_add_nothing() {
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 700, 10, 100);
    m.finish(700, Some(Lsn(500)), TxnOutcome::Aborted);
    fill(&mut m, 701, 10, 100);
    m.finish(701, Some(Lsn(600)), TxnOutcome::SkippedBeforeStart);
    assert_eq!(m.stats, DecodingStats::default());
    assert_eq!(m.size, 0);
    assert_eq!(m.ended.len(), 2);
}

/// Damaged WAL (found by the fuzzer): a subtransaction named as a parent, and a
/// top-level transaction with subtransactions becoming one itself. Ending the top-level
/// transaction lets go of all of them; later records of any of them start afresh.
#[test]
fn parents_that_are_subtransactions_keep_one_level() {
    let mut m = ReorderMemory::new(rules(64, false));
    fill(&mut m, 10, 1, 100);
    m.assign_child(10, 11, Lsn(2));
    m.assign_child(11, 12, Lsn(3)); // 11 is a subtransaction: 12 goes to 10
    assert!(m.is_subxact(12));
    m.assign_child(20, 21, Lsn(4));
    m.assign_child(10, 20, Lsn(5)); // 20 and its 21 go to 10
    m.replay(10, Lsn(50), Lsn(60), TxnOutcome::Sent, false);
    for x in [10, 11, 12, 20, 21] {
        assert!(!m.knows(x), "{x} is let go of");
    }
    m.count_record(21, Lsn(70), 8);
    m.queue_change(12, Lsn(71), insert(10), false);
    assert_eq!(m.size, 10);
}
