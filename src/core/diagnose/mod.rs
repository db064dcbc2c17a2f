//! "Why is my slot stuck?": turns what a replay of a slot learnt (the snapshot builder's
//! state, the last RUNNING_XACTS record, the reorder buffer's oldest transaction), the
//! slot's own fields and the sessions holding transactions into findings a DBA acts on.
//!
//! Not a PostgreSQL file. The rules it explains are snapbuild.c's SnapBuildFindSnapshot
//! (which xids a slot creation waits for in each phase, and that only a newer
//! RUNNING_XACTS record moves it on), logical.c's LogicalIncreaseXminForSlot /
//! LogicalIncreaseRestartDecodingForSlot / LogicalConfirmReceivedLocation (what holds
//! catalog_xmin and restart_lsn back), and slot.c's invalidation causes.
//!
//! Everything here is plain values: the adapter fetches them, [`diagnose`] orders the
//! findings, most important first.
//!
//! The inputs are in `facts.rs`, the findings' kinds and texts in `finding.rs`, the
//! transactions waited for or holding a slot back in `waits.rs`, the remedies in
//! `remedy.rs`; `creation.rs` judges a slot being created, `held.rs` a created one (with
//! `forecast.rs`, and `slotsync.rs` for a standby's synced copy), `health.rs` gives the
//! numbers for monitoring, and `watch.rs` what the watcher logs.

mod creation;
mod facts;
mod finding;
pub mod forecast;
mod health;
mod held;
mod remedy;
pub mod slotsync;
mod waits;
pub mod wal_keep;
pub mod wal_loss;
pub mod watch;
pub use facts::{
    Backend, BuilderFacts, Holder, HolderKind, Horizon, Prepared, ServerFacts, SlotFacts,
};
pub use facts::{SyncSkip, SyncSkipReason, SyncedCopy};
pub use finding::{Finding, FindingKind};
pub use forecast::{forecast, Forecast, ForecastLsn, ForecastXid};
pub use health::{health, Health};
pub use waits::{builder_waits, holding_xids, waited_xids, wanted_xids};
pub use wal_loss::{KeepSettings, LossCause, WalLoss, WalRate};

use creation::creation_findings;
use held::created_findings;

/// The findings for one slot, most important first.
///
/// `builder` is the replay of the slot from its restart_lsn to the flush position (None
/// when it could not run, e.g. an invalidated slot); `holders` the live holders of
/// [`wanted_xids`] (an xid without a holder has ended).
pub fn diagnose(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
) -> Vec<Finding> {
    let mut out = Vec::new();
    let lost = slot.wal_status.as_deref() == Some("lost");
    if slot.invalidation_reason.is_some() || lost {
        let reason = slot
            .invalidation_reason
            .clone()
            .unwrap_or_else(|| "wal_removed".into());
        let means = match reason.as_str() {
            "wal_removed" => "WAL the slot still needed was removed (max_slot_wal_keep_size or a lost segment)",
            "rows_removed" => "catalog rows the slot still needed were removed by VACUUM (on a standby: the primary's, e.g. without hot_standby_feedback)",
            "wal_level_insufficient" => "wal_level on the primary was lowered below logical",
            "idle_timeout" => "the slot stayed unused longer than idle_replication_slot_timeout",
            _ => "the server gave up on the slot",
        };
        let conflicting = if slot.conflicting == Some(true) {
            " (conflicting)"
        } else {
            ""
        };
        let at = match &slot.invalidated_at {
            Some((lsn, name)) => {
                format!("; the standby invalidated it while redoing the record at {lsn} ({name})")
            }
            None => String::new(),
        };
        let mut f = Finding::new(
            FindingKind::Invalidated,
            format!(
                "slot \"{}\" is invalidated{conflicting}: {reason}: {means}{at}; no consumer can decode from it any more",
                slot.name
            ),
        );
        f.lsn = match &slot.invalidated_at {
            Some((lsn, _)) => Some(*lsn),
            None => slot.restart_lsn.is_valid().then_some(slot.restart_lsn),
        };
        f.since = slot.inactive_since;
        f.remedy = Some(format!(
            "SELECT pg_drop_replication_slot('{}'), create it again and let the consumer copy its tables anew (changes since it was invalidated are lost to it)",
            slot.name.replace('\'', "''")
        ));
        out.push(f);
        return out;
    }
    if slot.in_creation {
        creation_findings(slot, builder, server, holders, &mut out);
        return out;
    }
    created_findings(slot, builder, server, holders, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::facts::samples::{creating, server};
    use super::finding::samples::kinds;
    use super::*;

    #[test]
    fn invalidated_slot_is_the_only_finding() {
        let mut s = creating();
        s.in_creation = false;
        s.wal_status = Some("lost".into());
        let f = diagnose(&s, None, &server(14), &[]);
        assert_eq!(kinds(&f), vec!["invalidated"]);
        assert!(f[0].finding.contains("wal_removed"));
        s.invalidation_reason = Some("rows_removed".into());
        s.conflicting = Some(true);
        let f = diagnose(&s, None, &server(17), &[]);
        assert!(f[0]
            .finding
            .contains("invalidated (conflicting): rows_removed"));
    }
}
