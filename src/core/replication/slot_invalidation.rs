//! Which replayed WAL record invalidates a logical slot on a hot standby, as the standby's
//! startup process decides it while it redoes the record. Mirrors, for the two causes a
//! record can trigger during recovery:
//!
//! - `rows_removed` (`RS_INVAL_HORIZON`): the redo routines of records that remove or freeze
//!   tuples call standby.c ResolveRecoveryConflictWithSnapshot (or its FullXid variant)
//!   with the record's snapshot conflict horizon, whether the relation is a catalog
//!   (`isCatalogRel`) and the relation's database; with `wal_level` logical and a catalog
//!   relation it calls slot.c InvalidateObsoleteReplicationSlots, and
//!   DetermineSlotInvalidationCause invalidates every logical slot of that database (every
//!   database for a shared catalog) whose effective xmin or effective catalog_xmin is at or
//!   before the horizon ([`determine_cause`]).
//! - `wal_level_insufficient` (`RS_INVAL_WAL_LEVEL`): xlog.c xlog_redo of a
//!   PARAMETER_CHANGE record whose `wal_level` is below logical (the primary restarted with
//!   a lower wal_level) invalidates every logical slot.
//!
//! The records read ([`record_conflict`]): HEAP2 PRUNE (16; PRUNE_ON_ACCESS,
//! PRUNE_VACUUM_SCAN, PRUNE_VACUUM_CLEANUP from 17), FREEZE_PAGE (16), VISIBLE; BTREE
//! DELETE and REUSE_PAGE; XLOG PARAMETER_CHANGE. HASH VACUUM_ONE_PAGE, GIST DELETE and
//! PAGE_REUSE and SPGIST VACUUM_REDIRECT carry a horizon too, but the replay does not read
//! them ([`Conflict::Unread`]): a slot invalidated by one of them cannot be placed, and the
//! trace says so. Not modelled: invalidation for removed WAL (at a restartpoint, not at a
//! record) and for idle time (18, a checkpoint's matter); REUSE_PAGE's full-xid horizon is
//! truncated to 32 bits as ResolveRecoveryConflictWithSnapshotFullXid does when it is
//! within 2^31 of the next xid (an older one conflicts with nothing; the replay does not
//! know the next xid and takes the truncation).

use crate::include::rmgrlist::{
    RM_BTREE_ID, RM_GIST_ID, RM_HASH_ID, RM_HEAP2_ID, RM_SPGIST_ID, RM_XLOG_ID,
};
use crate::include::transam::{self, TransactionId};
use crate::include::version::PgVersion;

/// `WAL_LEVEL_LOGICAL` (xlog.h's WalLevel).
pub const WAL_LEVEL_LOGICAL: i32 = 2;

/// What a record asks of the slots when a hot standby redoes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Conflict {
    /// ResolveRecoveryConflictWithSnapshot(horizon, catalog_rel, locator with `db`): `db` 0
    /// is a shared relation.
    Horizon {
        horizon: TransactionId,
        catalog_rel: bool,
        db: u32,
    },
    /// xlog_redo of a PARAMETER_CHANGE: the primary's new `wal_level`.
    WalLevel { wal_level: i32 },
    /// A record that may carry a conflict horizon the replay does not read (its kind).
    Unread(&'static str),
}

/// Reads the conflict a record carries, if any. `data` is the record's main data;
/// `block_db(id)` the database of the relation of block reference `id` (None when the
/// record has no such block). Only 16 and later invalidate slots during recovery (logical
/// decoding on a standby), so earlier majors give `None`.
pub fn record_conflict(
    version: PgVersion,
    rmid: u8,
    info: u8,
    data: &[u8],
    block_db: impl Fn(u8) -> Option<u32>,
) -> Option<Conflict> {
    if version.major < 16 {
        return None;
    }
    let op = info & 0xF0;
    let u32_at = |off: usize| -> Option<u32> {
        data.get(off..off + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let byte_at = |off: usize| data.get(off).copied();
    let horizon = |h: Option<u32>, catalog: Option<u8>, block: u8| -> Option<Conflict> {
        Some(Conflict::Horizon {
            horizon: h?,
            catalog_rel: catalog? != 0,
            db: block_db(block)?,
        })
    };
    match rmid {
        // XLOG_PARAMETER_CHANGE: xl_parameter_change, wal_level is its sixth int.
        RM_XLOG_ID if op == 0x60 => Some(Conflict::WalLevel {
            wal_level: u32_at(20)? as i32,
        }),
        RM_HEAP2_ID => match (version.major, op) {
            // 16 XLOG_HEAP2_PRUNE: horizon, nredirected, ndead, isCatalogRel (offset 8).
            (16, 0x10) => horizon(u32_at(0), byte_at(8), 0),
            // 16 XLOG_HEAP2_FREEZE_PAGE: horizon, nplans, isCatalogRel (offset 6).
            (16, 0x30) => horizon(u32_at(0), byte_at(6), 0),
            // 17+ PRUNE_ON_ACCESS / PRUNE_VACUUM_SCAN / PRUNE_VACUUM_CLEANUP: reason, flags,
            // then the horizon (unaligned) when XLHP_HAS_CONFLICT_HORIZON is set;
            // XLHP_IS_CATALOG_REL in the flags.
            (_, 0x10 | 0x20 | 0x30) => {
                let flags = byte_at(1)?;
                if flags & (1 << 3) == 0 {
                    return None;
                }
                horizon(u32_at(2), Some(flags & (1 << 1)), 0)
            }
            // XLOG_HEAP2_VISIBLE: horizon, flags (VISIBILITYMAP_XLOG_CATALOG_REL 0x04); the
            // heap page is block reference 1.
            (_, 0x40) => horizon(u32_at(0), byte_at(4).map(|f| f & 0x04), 1),
            _ => None,
        },
        RM_BTREE_ID => match op {
            // XLOG_BTREE_DELETE: horizon, ndeleted, nupdated, isCatalogRel (offset 8).
            0x70 => horizon(u32_at(0), byte_at(8), 0),
            // XLOG_BTREE_REUSE_PAGE: locator (spcOid, dbOid, relNumber), block, full xid at
            // offset 16 (its low 32 bits), isCatalogRel at 24; the locator is in the body.
            0xD0 => Some(Conflict::Horizon {
                horizon: u32_at(16)?,
                catalog_rel: byte_at(24)? != 0,
                db: u32_at(4)?,
            }),
            _ => None,
        },
        RM_HASH_ID if op == 0xC0 => Some(Conflict::Unread("Hash/VACUUM_ONE_PAGE")),
        RM_GIST_ID if op == 0x10 => Some(Conflict::Unread("Gist/DELETE")),
        RM_GIST_ID if op == 0x20 => Some(Conflict::Unread("Gist/PAGE_REUSE")),
        RM_SPGIST_ID if op == 0x80 => Some(Conflict::Unread("SPGist/VACUUM_REDIRECT")),
        _ => None,
    }
}

/// The slot facts DetermineSlotInvalidationCause reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SlotFacts {
    /// `data.database` (0: a physical slot).
    pub database: u32,
    pub effective_xmin: TransactionId,
    pub effective_catalog_xmin: TransactionId,
}

/// `ReplicationSlotInvalidationCause` for the causes recovery can trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Cause {
    /// `RS_INVAL_HORIZON`.
    RowsRemoved,
    /// `RS_INVAL_WAL_LEVEL`.
    WalLevelInsufficient,
}

impl Cause {
    /// The name pg_replication_slots.invalidation_reason shows (17+; 16 shows
    /// `conflicting`).
    pub fn name(self) -> &'static str {
        match self {
            Cause::RowsRemoved => "rows_removed",
            Cause::WalLevelInsufficient => "wal_level_insufficient",
        }
    }

    /// From pg_replication_slots' name.
    pub fn from_name(s: &str) -> Option<Cause> {
        match s {
            "rows_removed" => Some(Cause::RowsRemoved),
            "wal_level_insufficient" => Some(Cause::WalLevelInsufficient),
            _ => None,
        }
    }
}

/// The replay's verdict on one record for one slot.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Judgement {
    /// The standby invalidates the slot when it redoes this record; the DETAIL the server
    /// logs with it (ReportSlotInvalidation's, untranslated) is a function of the cause.
    Invalidates(Cause),
    /// The record cannot invalidate the slot.
    No,
    /// The record may invalidate it; the replay cannot read enough to say (why).
    Undecided(String),
}

/// Re-runs DetermineSlotInvalidationCause for the causes of a redone record (the standby's
/// own `wal_level` is logical: it has logical slots). The slot must not be invalidated
/// already (the caller stops at the first invalidation).
pub fn determine_cause(conflict: &Conflict, slot: &SlotFacts) -> Judgement {
    if slot.database == 0 {
        return Judgement::No; // SlotIsLogical
    }
    match *conflict {
        Conflict::WalLevel { wal_level } => {
            if wal_level < WAL_LEVEL_LOGICAL {
                Judgement::Invalidates(Cause::WalLevelInsufficient)
            } else {
                Judgement::No
            }
        }
        Conflict::Horizon {
            horizon,
            catalog_rel,
            db,
        } => {
            // ResolveRecoveryConflictWithSnapshot: no horizon, no conflict; only catalog
            // relations invalidate slots.
            if !transam::is_valid(horizon) || !catalog_rel {
                return Judgement::No;
            }
            if db != 0 && db != slot.database {
                return Judgement::No;
            }
            let hit =
                |x: TransactionId| transam::is_valid(x) && transam::precedes_or_equals(x, horizon);
            if hit(slot.effective_xmin) || hit(slot.effective_catalog_xmin) {
                Judgement::Invalidates(Cause::RowsRemoved)
            } else {
                Judgement::No
            }
        }
        Conflict::Unread(kind) => Judgement::Undecided(format!(
            "{kind} records carry a snapshot conflict horizon the replay does not read"
        )),
    }
}

/// The DETAIL ReportSlotInvalidation logs, untranslated: 17 and later quote the setting
/// and its value (as 17.11 and 18.6 log it; pgrx-tests st7), 16 does not.
pub fn detail(cause: Cause, version: PgVersion, horizon: Option<TransactionId>) -> String {
    match cause {
        Cause::RowsRemoved => format!(
            "The slot conflicted with xid horizon {}.",
            horizon.unwrap_or(0)
        ),
        Cause::WalLevelInsufficient if version.major >= 17 => {
            "Logical decoding on standby requires \"wal_level\" >= \"logical\" on the primary server.".into()
        }
        Cause::WalLevelInsufficient => {
            "Logical decoding on standby requires wal_level >= logical on the primary server."
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(m: u32) -> PgVersion {
        PgVersion::newest(m)
    }

    const SLOT: SlotFacts = SlotFacts {
        database: 5,
        effective_xmin: 0,
        effective_catalog_xmin: 800,
    };

    #[test]
    fn prune_17_reads_flags_and_unaligned_horizon() {
        // reason, flags (catalog | has horizon), horizon 800
        let mut d = vec![1u8, (1 << 1) | (1 << 3)];
        d.extend_from_slice(&800u32.to_le_bytes());
        let c = record_conflict(v(17), RM_HEAP2_ID, 0x20, &d, |_| Some(5)).unwrap();
        assert_eq!(
            c,
            Conflict::Horizon {
                horizon: 800,
                catalog_rel: true,
                db: 5
            }
        );
        assert_eq!(
            determine_cause(&c, &SLOT),
            Judgement::Invalidates(Cause::RowsRemoved)
        );
        // horizon before catalog_xmin: no conflict
        let mut d2 = vec![1u8, (1 << 1) | (1 << 3)];
        d2.extend_from_slice(&799u32.to_le_bytes());
        let c2 = record_conflict(v(18), RM_HEAP2_ID, 0x10, &d2, |_| Some(5)).unwrap();
        assert_eq!(determine_cause(&c2, &SLOT), Judgement::No);
        // no horizon flag: nothing
        assert_eq!(
            record_conflict(v(18), RM_HEAP2_ID, 0x10, &[1, 1 << 1], |_| Some(5)),
            None
        );
        // a user table (not catalog) never invalidates
        let mut d3 = vec![1u8, 1 << 3];
        d3.extend_from_slice(&900u32.to_le_bytes());
        let c3 = record_conflict(v(17), RM_HEAP2_ID, 0x10, &d3, |_| Some(5)).unwrap();
        assert_eq!(determine_cause(&c3, &SLOT), Judgement::No);
    }

    #[test]
    fn prune_16_layout_and_other_database() {
        let mut d = 900u32.to_le_bytes().to_vec();
        d.extend_from_slice(&[0, 0, 1, 0, 1]); // nredirected, ndead, isCatalogRel
        let c = record_conflict(v(16), RM_HEAP2_ID, 0x10, &d, |_| Some(6)).unwrap();
        assert_eq!(determine_cause(&c, &SLOT), Judgement::No, "other database");
        let c = record_conflict(v(16), RM_HEAP2_ID, 0x10, &d, |_| Some(0)).unwrap();
        assert_eq!(
            determine_cause(&c, &SLOT),
            Judgement::Invalidates(Cause::RowsRemoved),
            "shared catalog"
        );
        // 16's 0x20 is VACUUM: no horizon
        assert_eq!(
            record_conflict(v(16), RM_HEAP2_ID, 0x20, &d, |_| Some(5)),
            None
        );
        assert_eq!(
            record_conflict(v(15), RM_HEAP2_ID, 0x10, &d, |_| Some(5)),
            None
        );
    }

    #[test]
    fn visible_uses_block_1_and_catalog_flag() {
        let d = [0x20u8, 0x03, 0, 0, 0x05]; // horizon 800, flags all-visible|catalog
        let c = record_conflict(v(18), RM_HEAP2_ID, 0x40, &d, |b| (b == 1).then_some(5)).unwrap();
        assert_eq!(
            determine_cause(&c, &SLOT),
            Judgement::Invalidates(Cause::RowsRemoved)
        );
    }

    #[test]
    fn parameter_change_and_unread() {
        let mut d = vec![0u8; 28];
        d[20..24].copy_from_slice(&1i32.to_le_bytes()); // replica
        let c = record_conflict(v(18), RM_XLOG_ID, 0x60, &d, |_| None).unwrap();
        assert_eq!(
            determine_cause(&c, &SLOT),
            Judgement::Invalidates(Cause::WalLevelInsufficient)
        );
        d[20..24].copy_from_slice(&2i32.to_le_bytes());
        let c = record_conflict(v(18), RM_XLOG_ID, 0x60, &d, |_| None).unwrap();
        assert_eq!(determine_cause(&c, &SLOT), Judgement::No);
        let u = record_conflict(v(17), RM_HASH_ID, 0xC0, &[], |_| None).unwrap();
        assert!(matches!(
            determine_cause(&u, &SLOT),
            Judgement::Undecided(_)
        ));
        // physical slots are never touched
        let phys = SlotFacts {
            database: 0,
            ..SLOT
        };
        assert_eq!(determine_cause(&u, &phys), Judgement::No);
    }

    #[test]
    fn btree_delete_and_reuse() {
        let mut d = 800u32.to_le_bytes().to_vec();
        d.extend_from_slice(&[1, 0, 0, 0, 1]);
        let c = record_conflict(v(17), RM_BTREE_ID, 0x70, &d, |_| Some(5)).unwrap();
        assert_eq!(
            determine_cause(&c, &SLOT),
            Judgement::Invalidates(Cause::RowsRemoved)
        );
        let mut r = vec![0u8; 25];
        r[4..8].copy_from_slice(&5u32.to_le_bytes());
        r[16..20].copy_from_slice(&801u32.to_le_bytes());
        r[24] = 1;
        let c = record_conflict(v(16), RM_BTREE_ID, 0xD0, &r, |_| None).unwrap();
        assert_eq!(
            determine_cause(&c, &SLOT),
            Judgement::Invalidates(Cause::RowsRemoved)
        );
        // truncated data: nothing read, no panic
        assert_eq!(
            record_conflict(v(17), RM_BTREE_ID, 0xD0, &r[..10], |_| None),
            None
        );
    }
}
