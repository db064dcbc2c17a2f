//! A slot's health in numbers (`snapbuild_slot_health`), for monitoring: the builder's
//! state, how many transactions it waits for, the first blocking backend, the lags
//! behind the flush position, the last RUNNING_XACTS and the WAL its holder's end
//! releases; taken from the diagnosis' findings and the same inputs.
//!
//! Not a PostgreSQL file.

use super::facts::{bytes_between, BuilderFacts, Holder, ServerFacts, SlotFacts};
use super::finding::FindingKind;
use super::forecast::ForecastLsn;
use super::slotsync;
use super::waits::waited_xids;
use super::wal_loss::{self, WalLoss};
use crate::include::snapbuild::SnapBuildState;
use crate::include::transam;
use crate::include::xlogdefs::Lsn;

/// A slot's health in numbers (`snapbuild_slot_health`), for monitoring.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Health {
    /// The builder's state after the replay (None: not replayed, e.g. invalidated).
    pub state: Option<SnapBuildState>,
    pub invalidated: bool,
    /// On a standby: a copy of the primary's failover slot that the slot synchronization
    /// keeps temporary (the `sync pending` rows of the diagnosis).
    pub sync_pending: bool,
    pub in_creation: bool,
    /// How many xids the creation waits for (live or ended); for a copy kept temporary,
    /// the primary's transactions that keep it so; 0 otherwise.
    pub waiting_xids: i32,
    /// The backend the first problem finding names (a creation's first live blocker, or
    /// the holder of restart_lsn / catalog_xmin).
    pub oldest_blocking_pid: Option<i32>,
    /// Flush position minus restart_lsn.
    pub restart_lsn_lag_bytes: Option<i64>,
    /// Flush position minus confirmed_flush (None while being created).
    pub confirmed_flush_lag_bytes: Option<i64>,
    /// Next xid minus catalog_xmin.
    pub catalog_xmin_age: Option<i32>,
    /// The last RUNNING_XACTS record the replay read, and the WAL flushed after it.
    pub last_running_xacts: Option<Lsn>,
    pub wal_since_running_xacts_bytes: Option<i64>,
    /// Seconds since the last RUNNING_XACTS was written, at least (now minus the
    /// modification time of its WAL segment).
    pub running_xacts_age_s: Option<f64>,
    /// WAL bytes restart_lsn releases when its holder ends ([`Forecast`]); at least the
    /// WAL up to the flush position when the target is the next RUNNING_XACTS; 0 when
    /// it would not move.
    ///
    /// [`Forecast`]: super::forecast::Forecast
    pub releasable_bytes: Option<i64>,
    /// A process uses the slot (an active_pid: a consumer, a walsender, the creating
    /// backend).
    pub consumer_attached: bool,
    /// When the server will invalidate the slot if restart_lsn stays where it is
    /// ([`wal_loss::predict`]).
    pub wal_loss: WalLoss,
}

/// [`Health`] from the same inputs as [`diagnose`].
///
/// [`diagnose`]: super::diagnose()
pub fn health(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
) -> Health {
    let findings = super::diagnose(slot, builder, server, holders);
    let blocking = findings.iter().find_map(|f| match f.kind {
        Some(
            FindingKind::WaitingForTransaction
            | FindingKind::RestartLsnHeld
            | FindingKind::CatalogXminHeld,
        ) => f.backend.as_ref().map(|b| b.pid),
        _ => None,
    });
    let last = builder.and_then(|b| b.last_running.as_ref().map(|(l, _)| *l));
    Health {
        state: builder.and_then(|b| b.state),
        invalidated: findings
            .first()
            .is_some_and(|f| f.kind == Some(FindingKind::Invalidated)),
        sync_pending: findings
            .iter()
            .any(|f| f.kind == Some(FindingKind::SyncPending)),
        in_creation: slot.in_creation,
        waiting_xids: match slot.synced.as_ref() {
            Some(c) if c.temporary => slotsync::copy_waits(slot, c, builder, server).len() as i32,
            _ => builder.map_or(0, |b| waited_xids(slot, b).len() as i32),
        },
        oldest_blocking_pid: blocking,
        restart_lsn_lag_bytes: slot
            .restart_lsn
            .is_valid()
            .then(|| bytes_between(slot.restart_lsn, server.flush_lsn)),
        confirmed_flush_lag_bytes: slot
            .confirmed_flush
            .map(|c| bytes_between(c, server.flush_lsn)),
        catalog_xmin_age: transam::age(server.next_xid, slot.catalog_xmin),
        last_running_xacts: last,
        wal_since_running_xacts_bytes: last.map(|l| bytes_between(l, server.flush_lsn)),
        running_xacts_age_s: last
            .and(builder.and_then(|b| b.last_running_written_by))
            .map(|t| (server.now - t).max(0) as f64 / 1e6),
        releasable_bytes: builder
            .filter(|_| slot.synced.is_none())
            .and_then(|b| b.forecasts.first())
            .map(|fc| match fc.restart_lsn {
                ForecastLsn::AtNextRunningXacts => {
                    bytes_between(slot.restart_lsn, server.flush_lsn)
                }
                _ => fc.released_bytes(slot.restart_lsn).unwrap_or(0),
            }),
        consumer_attached: slot.active_pid.is_some(),
        wal_loss: wal_loss::predict(slot, server, builder.map(|b| &b.wal_rate)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::facts::samples::{backend, creating, running, server};
    use super::super::facts::HolderKind;
    use super::*;

    #[test]
    fn health_counts_waits_and_names_the_first_live_blocker() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 800,
            last_running: Some((Lsn(0x1800), running(805, &[750, 790], &[]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        let holders = [Holder {
            xid: 790,
            kind: HolderKind::Backend(backend(42)),
        }];
        let h = health(&creating(), Some(&b), &server(18), &holders);
        assert_eq!(h.state, Some(SnapBuildState::BuildingSnapshot));
        assert!(h.in_creation && !h.invalidated);
        assert_eq!(h.waiting_xids, 2);
        assert_eq!(h.oldest_blocking_pid, Some(42));
        assert_eq!(h.restart_lsn_lag_bytes, Some(0x1000));
        assert_eq!(h.confirmed_flush_lag_bytes, None);
        assert_eq!(h.catalog_xmin_age, Some(300));
        assert_eq!(h.last_running_xacts, Some(Lsn(0x1800)));
        assert_eq!(h.wal_since_running_xacts_bytes, Some(0x800));
    }
}
