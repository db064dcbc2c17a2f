//! Transaction-id arithmetic with 32-bit wraparound.
//!
//! Mirrors access/transam/transam.c (`TransactionIdPrecedes` and friends) and the
//! `NormalTransactionIdPrecedes` macro of access/transam.h. xids are plain `u32`
//! ([`TransactionId`]); 0 is invalid, 1 bootstrap, 2 frozen, 3.. normal.

/// A PostgreSQL `TransactionId` (32 bits, wraps around).
pub type TransactionId = u32;

/// `InvalidTransactionId`.
pub const INVALID_TRANSACTION_ID: TransactionId = 0;
/// `BootstrapTransactionId`.
pub const BOOTSTRAP_TRANSACTION_ID: TransactionId = 1;
/// `FrozenTransactionId`.
pub const FROZEN_TRANSACTION_ID: TransactionId = 2;
/// `FirstNormalTransactionId`.
pub const FIRST_NORMAL_TRANSACTION_ID: TransactionId = 3;

/// `TransactionIdIsValid`: anything but 0.
pub fn is_valid(xid: TransactionId) -> bool {
    xid != INVALID_TRANSACTION_ID
}

/// `TransactionIdIsNormal`: 3 and above.
pub fn is_normal(xid: TransactionId) -> bool {
    xid >= FIRST_NORMAL_TRANSACTION_ID
}

/// Signed distance used by the modulo-2^32 comparisons.
fn diff(a: TransactionId, b: TransactionId) -> i32 {
    a.wrapping_sub(b) as i32
}

/// Re-runs transam.c `TransactionIdPrecedes`: is `a` logically older than `b`?
/// Permanent (non-normal) xids compare as plain unsigned numbers.
pub fn precedes(a: TransactionId, b: TransactionId) -> bool {
    if !is_normal(a) || !is_normal(b) {
        return a < b;
    }
    diff(a, b) < 0
}

/// Re-runs transam.c `TransactionIdPrecedesOrEquals`.
pub fn precedes_or_equals(a: TransactionId, b: TransactionId) -> bool {
    if !is_normal(a) || !is_normal(b) {
        return a <= b;
    }
    diff(a, b) <= 0
}

/// Re-runs transam.c `TransactionIdFollows`.
pub fn follows(a: TransactionId, b: TransactionId) -> bool {
    if !is_normal(a) || !is_normal(b) {
        return a > b;
    }
    diff(a, b) > 0
}

/// Re-runs transam.c `TransactionIdFollowsOrEquals`.
pub fn follows_or_equals(a: TransactionId, b: TransactionId) -> bool {
    if !is_normal(a) || !is_normal(b) {
        return a >= b;
    }
    diff(a, b) >= 0
}

/// Mirrors transam.h `NormalTransactionIdPrecedes`: both sides are assumed normal,
/// compared modulo 2^32 without the permanent-xid special case.
pub fn normal_precedes(a: TransactionId, b: TransactionId) -> bool {
    diff(a, b) < 0
}

/// Mirrors transam.h `NormalTransactionIdFollows`.
pub fn normal_follows(a: TransactionId, b: TransactionId) -> bool {
    diff(a, b) > 0
}

/// Mirrors transam.h `TransactionIdAdvance`: the next xid, skipping 0..2 on wraparound.
pub fn advance(xid: TransactionId) -> TransactionId {
    let next = xid.wrapping_add(1);
    if next < FIRST_NORMAL_TRANSACTION_ID {
        FIRST_NORMAL_TRANSACTION_ID
    } else {
        next
    }
}

/// The age of `xid` counted from `next` (the next xid to be assigned), as xid.c `xid_age`
/// counts it: `next - xid` modulo 2^32, in xids. `None` when `xid` is not normal or is not
/// older than `next`: on a standby, whose next xid follows only the primary's WAL it has
/// replayed, a slot synchronized from the primary can carry a newer xid, and its age
/// counted here would be negative and mean nothing.
pub fn age(next: TransactionId, xid: TransactionId) -> Option<i32> {
    (is_normal(xid) && precedes_or_equals(xid, next)).then(|| next.wrapping_sub(xid) as i32)
}

/// The order TransactionIdPrecedes gives (modulo-2^32, for normal xids): for sorting
/// xids that may straddle the wraparound point. Not a PostgreSQL function.
pub fn precedes_order(a: TransactionId, b: TransactionId) -> core::cmp::Ordering {
    if a == b {
        core::cmp::Ordering::Equal
    } else if precedes(a, b) {
        core::cmp::Ordering::Less
    } else {
        core::cmp::Ordering::Greater
    }
}

/// Mirrors xid.c `xidComparator`: plain unsigned order, as the server sorts
/// `catchange.xip` and the running-xacts array for bsearch.
pub fn xid_comparator(a: &TransactionId, b: &TransactionId) -> core::cmp::Ordering {
    a.cmp(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_order() {
        assert!(precedes(100, 101));
        assert!(!precedes(101, 101));
        assert!(precedes_or_equals(101, 101));
        assert!(follows(102, 101));
        assert!(follows_or_equals(101, 101));
    }

    #[test]
    fn age_counts_back_from_next_and_is_unknown_ahead_of_it() {
        assert_eq!(age(1000, 700), Some(300));
        assert_eq!(age(1000, 1000), Some(0));
        // A synced slot's xid the standby has not yet seen assigned.
        assert_eq!(age(1000, 1001), None);
        assert_eq!(age(1000, 0), None);
        // Across the wraparound point: 10 xids from 2^32-5 to 5 (0..2 are skipped only by
        // the counter, not by the arithmetic).
        assert_eq!(age(5, u32::MAX - 4), Some(10));
    }

    #[test]
    fn wraparound_order() {
        // 4294967295 (2^32-1) is older than 5 once the counter has wrapped.
        assert!(precedes(u32::MAX, 5));
        assert!(follows(5, u32::MAX));
        assert!(normal_precedes(u32::MAX - 10, 3));
        // Half the space away flips the answer.
        assert!(precedes(3, 3 + (1 << 31) - 1));
        assert!(!precedes(3, 3 + (1 << 31) + 1));
    }

    #[test]
    fn permanent_xids_compare_unsigned() {
        assert!(precedes(INVALID_TRANSACTION_ID, 3));
        assert!(precedes(2, u32::MAX));
        assert!(!follows(2, u32::MAX));
    }

    #[test]
    fn advance_skips_special_xids() {
        assert_eq!(advance(10), 11);
        assert_eq!(advance(u32::MAX), 3);
    }
}
