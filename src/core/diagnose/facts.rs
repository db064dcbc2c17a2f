//! The inputs of "why is my slot stuck?", as plain values the adapter fills: the slot
//! ([`SlotFacts`]), the replay of its snapshot builder ([`BuilderFacts`]), the server
//! around it ([`ServerFacts`], with the cluster's other xmin [`Horizon`]s) and who holds
//! the transactions the diagnosis asks about ([`Holder`]: a [`Backend`] or a
//! [`Prepared`] transaction).
//!
//! Not a PostgreSQL file. The fields are those of slot.h's ReplicationSlot (as
//! pg_replication_slots shows it), snapbuild.c's SnapBuild, standbydefs.h's
//! xl_running_xacts, pg_stat_activity, pg_prepared_xacts and pg_locks.

use super::forecast::Forecast;
use super::wal_keep::{KeepSettings, WalRate};
use crate::include::snapbuild::SnapBuildState;
use crate::include::standbydefs::RunningXacts;
use crate::include::transam::TransactionId;
use crate::include::version::PgVersion;
use crate::include::xlogdefs::Lsn;
use crate::server_log::leading_lsn;

/// What a replay of the slot from its restart_lsn to the flush position reached.
#[derive(Clone, Debug, Default)]
pub struct BuilderFacts {
    /// The builder's state after the last record read.
    pub state: Option<SnapBuildState>,
    /// `next_phase_at`: in BUILDING_SNAPSHOT / FULL_SNAPSHOT, every xid before it must
    /// have ended (and a RUNNING_XACTS say so) before the next phase.
    pub next_phase_at: TransactionId,
    /// The slot's initial xmin horizon (its catalog_xmin while being created).
    pub initial_xmin_horizon: TransactionId,
    /// Where the builder entered its current state (the record that moved it), if it
    /// moved during the replay.
    pub phase_since: Option<Lsn>,
    /// The last RUNNING_XACTS record read: (start LSN, record).
    pub last_running: Option<(Lsn, RunningXacts)>,
    /// The reorder buffer's oldest top-level transaction after the replay
    /// (ReorderBufferGetOldestTXN): its xid and restart_decoding_lsn.
    pub oldest_txn: Option<(TransactionId, Lsn)>,
    /// The transaction holding the reorder buffer's oldest base snapshot
    /// (ReorderBufferGetOldestXmin, which a consistent decoder proposes as catalog_xmin in
    /// place of the oldest running xid): its xid and the snapshot's xmin.
    pub oldest_base_snapshot: Option<(TransactionId, TransactionId)>,
    /// The end of the last record read (the slot's restart_lsn when none was).
    pub replayed_to: Lsn,
    /// The last RUNNING_XACTS record was written no later than this (the modification
    /// time of the WAL segment holding it), microseconds since 2000-01-01 UTC.
    pub last_running_written_by: Option<i64>,
    /// What the end of the transactions holding restart_lsn and catalog_xmin would do
    /// ([`forecast()`]), the restart_lsn holder's first.
    ///
    /// [`forecast()`]: super::forecast::forecast
    pub forecasts: Vec<Forecast>,
    /// The WAL rate as the replay measured it from its commit and abort records
    /// ([`WalRate`]).
    pub wal_rate: WalRate,
}

/// The slot, as shared memory and `pg_replication_slots` show it.
#[derive(Clone, Debug, Default)]
pub struct SlotFacts {
    pub name: String,
    /// Still being created (confirmed_flush not set yet).
    pub in_creation: bool,
    /// The process using the slot (the creating backend or walsender, or the consumer).
    pub active_pid: Option<i32>,
    pub restart_lsn: Lsn,
    /// `None` while the slot is created, and for a synced copy the slot synchronization
    /// has not advanced yet (the server shows NULL for both).
    pub confirmed_flush: Option<Lsn>,
    pub catalog_xmin: TransactionId,
    pub candidate_restart_valid: Lsn,
    pub candidate_restart_lsn: Lsn,
    pub candidate_catalog_xmin: TransactionId,
    pub candidate_xmin_lsn: Lsn,
    /// slot.c's cause name (`wal_removed`, `rows_removed`, `wal_level_insufficient`,
    /// `idle_timeout`), if the slot is invalidated.
    pub invalidation_reason: Option<String>,
    /// The record whose redo invalidated the slot on a standby, as the replay found it
    /// (`replication::slot_invalidation`): its start and `RMGR/TYPE`.
    pub invalidated_at: Option<(Lsn, String)>,
    /// `pg_replication_slots.wal_status` (`lost`: the WAL it needs is gone).
    pub wal_status: Option<String>,
    /// `pg_replication_slots.conflicting` (16+).
    pub conflicting: Option<bool>,
    /// `pg_replication_slots.inactive_since` (17+), microseconds since 2000-01-01 UTC.
    pub inactive_since: Option<i64>,
    /// The transaction the slot's active process waits for in `pg_locks` (an ungranted
    /// ShareLock on a transactionid: SnapBuildWaitSnapshot's XactLockTableWait).
    pub creator_waits_on: Option<TransactionId>,
    /// On a standby (17+): the slot is a copy that the slot synchronization keeps of
    /// the primary's failover slot (`synced`). `None` elsewhere, and on a promoted
    /// server, where a copy is an ordinary slot.
    pub synced: Option<SyncedCopy>,
}

/// Another holder of an xmin horizon in the cluster: a slot's xmin or catalog_xmin, a
/// backend's xmin or xid, a prepared transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Horizon {
    pub xid: TransactionId,
    /// In words: `slot "s" (catalog_xmin)`, `pid 123 (client backend, xmin)`, `prepared
    /// transaction 'g'`.
    pub what: String,
}

/// The server around the slot.
#[derive(Clone, Debug)]
pub struct ServerFacts {
    pub version: PgVersion,
    /// pg_current_wal_flush_lsn (on a standby: the replay position, pg_last_wal_replay_lsn).
    pub flush_lsn: Lsn,
    /// The next xid to be assigned (32-bit), for ages.
    pub next_xid: TransactionId,
    /// A standby: RUNNING_XACTS records come from the primary.
    pub in_recovery: bool,
    /// Now, microseconds since 2000-01-01 UTC.
    pub now: i64,
    /// Every other xmin horizon of the cluster (other slots, backends but the caller,
    /// prepared transactions).
    pub horizons: Vec<Horizon>,
    /// The xids running now: on a primary the top-level ones (pg_current_snapshot's
    /// xip); on a standby the primary's as far as replayed here (KnownAssignedXids, the
    /// standby snapshot's subxip: top-level and subtransaction xids alike).
    pub running: Vec<TransactionId>,
    /// Among the xids the diagnosis asks about ([`wanted_xids`]), those the server knows
    /// to be in progress (procarray.c TransactionIdIsInProgress: on a standby from
    /// KnownAssignedXids, i.e. the primary's transactions whose end has not been
    /// replayed here).
    ///
    /// [`wanted_xids`]: super::waits::wanted_xids
    pub in_progress: Vec<TransactionId>,
    /// The settings that decide how much WAL a slot keeps and how long it may stay
    /// unused (None: not read).
    pub keep: Option<KeepSettings>,
    /// pg_current_wal_insert_lsn on a primary (None on a standby): WAL inserted but not
    /// flushed yet is before every later checkpoint record too.
    pub insert_lsn: Option<Lsn>,
}

/// A live backend holding a transaction (pg_stat_activity's columns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backend {
    pub pid: i32,
    pub backend_type: Option<String>,
    pub datname: Option<String>,
    pub usename: Option<String>,
    pub application_name: Option<String>,
    pub client_addr: Option<String>,
    pub state: Option<String>,
    /// Microseconds since 2000-01-01 UTC.
    pub xact_start: Option<i64>,
    /// `wait_event_type:wait_event`.
    pub wait_event: Option<String>,
    pub query: Option<String>,
}

/// A prepared transaction (pg_prepared_xacts' columns).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    pub gid: String,
    pub owner: Option<String>,
    pub database: Option<String>,
    /// Microseconds since 2000-01-01 UTC.
    pub prepared: Option<i64>,
}

/// What holds a transaction open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HolderKind {
    Backend(Backend),
    Prepared(Prepared),
}

/// The holder of xid `xid` (a top-level xid or one of its subtransactions' xids): who
/// holds its ExclusiveLock on the transactionid in pg_locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub xid: TransactionId,
    pub kind: HolderKind,
}

pub(super) fn bytes_between(from: Lsn, to: Lsn) -> i64 {
    to.0.saturating_sub(from.0) as i64
}

/// Facts the tests of the diagnosis build on: a server, a RUNNING_XACTS record, a slot
/// being created, a backend.
/// What the diagnosis knows of a synced copy beyond the slot's own fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncedCopy {
    /// `RS_TEMPORARY`: not sync-ready; it is not kept over a promotion.
    pub temporary: bool,
    /// The last `could not synchronize replication slot` line about this slot in the
    /// server log, when the log was read and has one.
    pub last_skip: Option<SyncSkip>,
}

/// One `could not synchronize replication slot` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncSkip {
    /// When it was logged: microseconds since 2000-01-01 UTC.
    pub at: i64,
    pub reason: SyncSkipReason,
}

/// Why the synchronization kept the copy temporary, as its DETAIL says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncSkipReason {
    /// update_local_synced_slot: the remote slot is behind what the standby reserved.
    RemoteBehind {
        remote_restart_lsn: Lsn,
        remote_catalog_xmin: TransactionId,
        local_restart_lsn: Lsn,
        local_catalog_xmin: TransactionId,
    },
    /// update_and_persist_local_synced_slot: the fast-forward decoder from the copy's
    /// restart_lsn was not consistent at the remote confirmed_flush.
    NoConsistentSnapshot { restart_lsn: Lsn },
}

impl SyncSkipReason {
    /// The reason a DETAIL line gives, in the wordings of 17.x and 18.x: two LSNs and two
    /// catalog xmins (remote first, then the standby's), or one LSN (no consistent
    /// snapshot from there). `None` for anything else.
    pub fn from_detail(detail: &str) -> Option<Self> {
        let mut lsns = Vec::new();
        let mut rest = detail;
        while let Some(p) = rest.find("LSN") {
            rest = &rest[p + 3..];
            let t = rest.trim_start_matches([' ', '(']);
            if let Some((l, after)) = leading_lsn(t) {
                lsns.push(l);
                rest = after;
            }
        }
        let mut xmins = Vec::new();
        let mut rest = detail;
        while let Some(p) = rest.find("catalog xmin ") {
            rest = &rest[p + 13..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(x) = digits.parse::<TransactionId>() {
                xmins.push(x);
            }
        }
        match (lsns.as_slice(), xmins.as_slice()) {
            ([r, l], [rx, lx]) => Some(SyncSkipReason::RemoteBehind {
                remote_restart_lsn: *r,
                remote_catalog_xmin: *rx,
                local_restart_lsn: *l,
                local_catalog_xmin: *lx,
            }),
            ([l], []) => Some(SyncSkipReason::NoConsistentSnapshot { restart_lsn: *l }),
            _ => None,
        }
    }
}

#[cfg(test)]
pub(super) mod samples {
    use super::*;

    pub fn server(major: u32) -> ServerFacts {
        ServerFacts {
            version: PgVersion::newest(major),
            flush_lsn: Lsn(0x2000),
            next_xid: 1000,
            in_recovery: false,
            now: 0,
            horizons: Vec::new(),
            running: Vec::new(),
            in_progress: Vec::new(),
            keep: None,
            insert_lsn: None,
        }
    }

    pub fn running(next: u32, top: &[u32], sub: &[u32]) -> RunningXacts {
        let mut xids = top.to_vec();
        xids.extend_from_slice(sub);
        RunningXacts {
            xcnt: top.len() as u32,
            subxcnt: sub.len() as u32,
            subxid_overflow: false,
            next_xid: next,
            oldest_running_xid: top.iter().copied().min().unwrap_or(next),
            latest_completed_xid: next - 1,
            xids,
        }
    }

    pub fn creating() -> SlotFacts {
        SlotFacts {
            name: "s".into(),
            in_creation: true,
            active_pid: Some(77),
            restart_lsn: Lsn(0x1000),
            catalog_xmin: 700,
            ..Default::default()
        }
    }

    pub fn backend(pid: i32) -> Backend {
        Backend {
            pid,
            backend_type: Some("client backend".into()),
            datname: Some("other".into()),
            state: Some("idle in transaction".into()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_of_17_and_18() {
        let d = "Synchronization could lead to data loss, because the remote slot needs WAL at LSN 0/3003F28 and catalog xmin 754, but the standby has LSN 0/3003F28 and catalog xmin 756.";
        assert_eq!(
            SyncSkipReason::from_detail(d),
            Some(SyncSkipReason::RemoteBehind {
                remote_restart_lsn: Lsn(0x3003F28),
                remote_catalog_xmin: 754,
                local_restart_lsn: Lsn(0x3003F28),
                local_catalog_xmin: 756,
            })
        );
        let d = "The remote slot has LSN 0/5000060 and catalog xmin 740, but the local slot has LSN 0/5000098 and catalog xmin 741.";
        assert_eq!(
            SyncSkipReason::from_detail(d),
            Some(SyncSkipReason::RemoteBehind {
                remote_restart_lsn: Lsn(0x5000060),
                remote_catalog_xmin: 740,
                local_restart_lsn: Lsn(0x5000098),
                local_catalog_xmin: 741,
            })
        );
        for d in [
            "Synchronization could lead to data loss, because the standby could not build a consistent snapshot to decode WALs at LSN 0/30000D8.",
            "Logical decoding could not find consistent point from local slot's LSN 0/30000D8.",
        ] {
            assert_eq!(
                SyncSkipReason::from_detail(d),
                Some(SyncSkipReason::NoConsistentSnapshot {
                    restart_lsn: Lsn(0x30000D8)
                })
            );
        }
        assert_eq!(SyncSkipReason::from_detail("something else"), None);
    }
}
