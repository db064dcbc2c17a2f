//! "Will my slot be invalidated, and when?": the WAL loss forecast of a slot.
//!
//! A checkpoint (a restartpoint on a standby) removes the WAL segments nobody keeps. With
//! `max_slot_wal_keep_size` set, a slot keeps at most that much WAL back from the
//! checkpoint record: once a checkpoint record lies far enough past the slot's
//! restart_lsn, the slot is invalidated (`wal_removed`; `wal_status` is `unreserved`
//! from the moment the write position passes that point, `lost` after the checkpoint).
//! On 18, `idle_replication_slot_timeout` invalidates (`idle_timeout`) a slot unused for
//! that long, at the first checkpoint after it.
//!
//! Not a PostgreSQL file as a whole. [`keep_log_seg`] re-runs xlog.c KeepLogSeg,
//! [`checkpoint_invalidates`] what CreateCheckPoint and CreateRestartPoint hand to slot.c
//! InvalidateObsoleteReplicationSlots with DetermineSlotInvalidationCause's test for
//! `wal_removed`, and [`loss_lsn`] solves that test for the first position that fails
//! (the same point slotfuncs.c pg_get_replication_slots counts `safe_wal_size` to). The
//! rule is the same in 14 to 18; 17 added the WAL summarizer's hold (`summarize_wal`),
//! which only delays a removal, and 18 the idle timeout.
//!
//! When the loss comes is the WAL still to be written divided by the WAL rate, which
//! [`WalRate`] measures from the WAL itself: the (position, time) pairs its commit and
//! abort records carry, as the replays meet them, up to the position and time now.

use super::facts::{ServerFacts, SlotFacts};
pub use super::wal_keep::*;
use crate::include::xlogdefs::Lsn;

/// What invalidates the slot, as slot.c names the cause (`invalidation_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// `wal_removed`: max_slot_wal_keep_size.
    WalRemoved,
    /// `idle_timeout`: idle_replication_slot_timeout (18+).
    IdleTimeout,
}

impl LossCause {
    pub fn as_str(self) -> &'static str {
        match self {
            LossCause::WalRemoved => "wal_removed",
            LossCause::IdleTimeout => "idle_timeout",
        }
    }
}

/// A slot's WAL loss forecast, if restart_lsn stays where it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WalLoss {
    /// The position past which the next checkpoint invalidates the slot for
    /// `wal_removed` ([`loss_lsn`]); `None` without max_slot_wal_keep_size.
    pub lsn: Option<Lsn>,
    /// The first invalidation predicted, `None` when none is.
    pub cause: Option<LossCause>,
    /// When (microseconds since 2000-01-01): for `wal_removed` when the WAL reaches
    /// [`WalLoss::lsn`] at the rate measured (now, when it is past it); for
    /// `idle_timeout` inactive_since plus the timeout. `None` when unknown.
    pub at: Option<i64>,
    /// Seconds from now to [`WalLoss::at`], 0 when it is past (the next checkpoint
    /// invalidates the slot).
    pub in_s: Option<f64>,
    /// The WAL rate it used (bytes per second) and over how many seconds.
    pub rate: Option<RateFound>,
    /// Why no invalidation is predicted, or why its time is unknown.
    pub unknown: Option<String>,
}

impl WalLoss {
    fn none(why: impl Into<String>) -> WalLoss {
        WalLoss {
            unknown: Some(why.into()),
            ..Default::default()
        }
    }

    /// Whether the moment has passed: the next checkpoint invalidates the slot.
    pub fn is_past(&self) -> bool {
        self.in_s == Some(0.0)
    }
}

/// The WAL loss forecast of `slot`, on `server` (its settings in
/// [`ServerFacts::keep`]), with the WAL rate from `rate` (the pairs its replay met),
/// if restart_lsn stays where it is: the `wal_removed` position and time, and on 18 the
/// `idle_timeout` time of an unused slot (slot.c CanInvalidateIdleSlot: a timeout set, a
/// valid restart_lsn, inactive, not a standby's synced copy); the earlier of the two
/// (where the `wal_removed` time is unknown, the idle timeout's).
pub fn predict(slot: &SlotFacts, server: &ServerFacts, rate: Option<&WalRate>) -> WalLoss {
    let Some(s) = server.keep.as_ref() else {
        return WalLoss::none("the server's settings were not read");
    };
    if slot.invalidation_reason.is_some() || slot.wal_status.as_deref() == Some("lost") {
        return WalLoss::none("the slot is invalidated already");
    }
    if !slot.restart_lsn.is_valid() {
        return WalLoss::none("the slot has no restart_lsn: it keeps no WAL");
    }
    let now = server.now;
    // Where WAL stands now: every later checkpoint record ends after it.
    let pos = server.flush_lsn.max(server.insert_lsn.unwrap_or_default());
    let mut wal = WalLoss {
        lsn: loss_lsn(slot.restart_lsn, s),
        ..Default::default()
    };
    match wal.lsn {
        None => wal.unknown = Some("max_slot_wal_keep_size is -1: no WAL limit".into()),
        Some(l) => {
            wal.cause = Some(LossCause::WalRemoved);
            if pos >= l {
                wal.at = Some(now);
                wal.in_s = Some(0.0);
            } else {
                let measured = match rate {
                    Some(r) => r.rate(pos, now),
                    None => Err("the slot's WAL is not replayed here".into()),
                };
                match measured {
                    Ok(r) => {
                        let secs = (l.0 - pos.0) as f64 / r.bytes_per_s;
                        wal.in_s = Some(secs);
                        wal.at = Some(
                            now.saturating_add((secs * 1e6).min(i64::MAX as f64 / 2.0) as i64),
                        );
                        wal.rate = Some(r);
                    }
                    Err(why) => wal.unknown = Some(format!("the WAL rate is unknown: {why}")),
                }
            }
        }
    }
    let idle = match (s.idle_timeout_s, slot.inactive_since) {
        (Some(t), Some(since))
            if t > 0
                && since > 0
                && slot.active_pid.is_none()
                && !(server.in_recovery && slot.synced.is_some()) =>
        {
            Some(since.saturating_add(i64::from(t) * 1_000_000))
        }
        _ => None,
    };
    if let Some(at) = idle {
        let earlier = match (wal.cause, wal.at) {
            (Some(_), Some(w)) => at < w,
            _ => true,
        };
        if earlier {
            wal.cause = Some(LossCause::IdleTimeout);
            wal.at = Some(at);
            wal.in_s = Some(((at - now) as f64 / 1e6).max(0.0));
            if wal.lsn.is_none() {
                wal.unknown = None;
            }
        }
    }
    wal
}

#[cfg(test)]
mod tests {
    use super::super::facts::samples::server;
    use super::*;

    const MB: u64 = 1024 * 1024;
    const SEG: u64 = 16 * MB;
    const S: i64 = 1_000_000;

    fn settings(max_slot: i32, keep: i32) -> KeepSettings {
        KeepSettings {
            max_slot_wal_keep_size_mb: max_slot,
            wal_keep_size_mb: keep,
            wal_segment_size: SEG,
            idle_timeout_s: None,
            summarize_wal: false,
        }
    }

    /// The first checkpoint record end that invalidates the slot, by
    /// [`checkpoint_invalidates`] itself (its redo pointer taken at the record: the
    /// redo condition is tested on its own below).
    fn first_invalidating(restart: Lsn, others_min: Lsn, s: &KeepSettings) -> Lsn {
        let mut end = restart.0 + 1;
        // Segment by segment, then byte by byte within the one that changes.
        while !checkpoint_invalidates(restart, Lsn(end), Lsn(end), others_min, s) {
            end += SEG;
        }
        let mut lo = end.saturating_sub(SEG).max(restart.0 + 1);
        while lo < end {
            let mid = lo + (end - lo) / 2;
            if checkpoint_invalidates(restart, Lsn(mid), Lsn(mid), others_min, s) {
                end = mid;
            } else {
                lo = mid + 1;
            }
        }
        Lsn(end)
    }

    #[test]
    fn the_loss_lsn_is_where_keep_log_seg_first_lets_the_slot_go() {
        for (max_slot, keep) in [
            (64, 0),
            (64, 32),
            (32, 64),
            (0, 0),
            (40, 0),
            (64, 64),
            (1024, 16),
        ] {
            let s = settings(max_slot, keep);
            for restart in [
                0x3000028u64,
                5 * SEG,
                6 * SEG - 1,
                0x1_0000_0000 - 8,
                0x1_0000_0000 + 0x60,
            ] {
                let r = Lsn(restart);
                let l = loss_lsn(r, &s).unwrap();
                // Whatever the other slots keep, older or none but this one.
                for others in [r, Lsn(0x1000028)] {
                    assert_eq!(first_invalidating(r, others, &s), l, "{s:?} {r} {others}");
                }
            }
        }
    }

    #[test]
    fn segment_arithmetic() {
        let s = settings(64, 0);
        // 64 MB = 4 segments: a slot in segment 5 is lost to a checkpoint in segment 10.
        assert_eq!(loss_lsn(Lsn(5 * SEG), &s), Some(Lsn(10 * SEG)));
        assert_eq!(loss_lsn(Lsn(6 * SEG - 1), &s), Some(Lsn(10 * SEG)));
        assert_eq!(loss_lsn(Lsn(6 * SEG), &s), Some(Lsn(11 * SEG)));
        // Rounded down to whole segments: 40 MB keeps 2.
        assert_eq!(loss_lsn(Lsn(5 * SEG), &settings(40, 0)), Some(Lsn(8 * SEG)));
        // wal_keep_size larger than the slot limit: it wins.
        assert_eq!(
            loss_lsn(Lsn(5 * SEG), &settings(32, 96)),
            Some(Lsn(12 * SEG))
        );
        assert_eq!(
            loss_lsn(Lsn(5 * SEG), &settings(96, 32)),
            Some(Lsn(12 * SEG))
        );
        // 0: lost to the first checkpoint in the next segment.
        assert_eq!(
            loss_lsn(Lsn(5 * SEG + 40), &settings(0, 0)),
            Some(Lsn(6 * SEG))
        );
        assert_eq!(loss_lsn(Lsn(5 * SEG), &settings(-1, 0)), None);
        assert_eq!(loss_lsn(Lsn(0), &s), None);
        // A checkpoint whose redo pointer is still in the slot's segment keeps it.
        assert!(!checkpoint_invalidates(
            Lsn(5 * SEG),
            Lsn(5 * SEG + 8),
            Lsn(20 * SEG),
            Lsn(5 * SEG),
            &s
        ));
        assert!(checkpoint_invalidates(
            Lsn(5 * SEG),
            Lsn(6 * SEG),
            Lsn(20 * SEG),
            Lsn(5 * SEG),
            &s
        ));
        // wal_keep_size near the start of WAL: never below segment 1.
        assert_eq!(
            keep_log_seg(Lsn(2 * SEG), Lsn(0), &settings(-1, 160), 99),
            1
        );
    }

    #[test]
    fn rate_from_commit_times() {
        let mut r = WalRate::default();
        assert!(r.rate(Lsn(100), 10 * S).is_err());
        // 1 MB/s for a minute, a pair every second: one in five kept.
        for i in 0..=60 {
            r.note(Lsn(MB * i as u64 + 1), 1000 * S + i * S);
        }
        assert_eq!(r.len(), 13);
        let got = r.rate(Lsn(MB * 70 + 1), 1070 * S).unwrap();
        assert!((got.bytes_per_s - MB as f64).abs() < 1.0, "{got:?}");
        assert_eq!(got.over_s, 70.0);
        // Too short a span, nothing written.
        let mut short = WalRate::default();
        short.note(Lsn(500), 10 * S);
        assert!(short
            .rate(Lsn(900), 12 * S)
            .unwrap_err()
            .contains("too short"));
        assert!(short
            .rate(Lsn(500), 20 * S)
            .unwrap_err()
            .contains("no WAL was written"));
        // Out of order or going back: passed over.
        short.note(Lsn(400), 30 * S);
        short.note(Lsn(600), 9 * S);
        assert_eq!(short.len(), 1);
        // Only the window is kept (and one pair before it).
        let mut long = WalRate::default();
        for i in 0..2000 {
            long.note(Lsn(1 + i as u64 * 1000), i * S);
        }
        assert!(long.len() <= (WalRate::WINDOW / WalRate::SPACING) as usize + 2);
        let got = long.rate(Lsn(2_000_001), 2000 * S).unwrap();
        assert!(got.over_s <= 600.0 + 5.0, "{got:?}");
        // Merging keeps the order.
        let mut a = WalRate::default();
        a.note(Lsn(10), 10 * S);
        let mut b = WalRate::default();
        b.note(Lsn(5), 3 * S);
        b.note(Lsn(20), 20 * S);
        a.merge(&b);
        assert_eq!(a.samples, vec![(5, 3 * S), (10, 10 * S), (20, 20 * S)]);
    }

    fn slot(restart: u64) -> SlotFacts {
        SlotFacts {
            name: "s".into(),
            restart_lsn: Lsn(restart),
            confirmed_flush: Some(Lsn(restart)),
            ..Default::default()
        }
    }

    fn srv(flush: u64, now: i64, s: KeepSettings) -> ServerFacts {
        ServerFacts {
            flush_lsn: Lsn(flush),
            now,
            keep: Some(s),
            ..server(17)
        }
    }

    #[test]
    fn forecasts() {
        let mut rate = WalRate::default();
        rate.note(Lsn(6 * SEG), 100 * S);
        // 1 segment in 10 s; the loss LSN is 4 segments ahead: 40 s.
        let f = predict(
            &slot(5 * SEG),
            &srv(7 * SEG, 110 * S, settings(64, 0)),
            Some(&rate),
        );
        assert_eq!(f.lsn, Some(Lsn(10 * SEG)));
        assert_eq!(f.cause, Some(LossCause::WalRemoved));
        assert!((f.in_s.unwrap() - 30.0).abs() < 1e-6, "{f:?}");
        assert_eq!(f.at, Some(140 * S));
        // Past it: 0, the next checkpoint.
        let f = predict(
            &slot(5 * SEG),
            &srv(10 * SEG, 110 * S, settings(64, 0)),
            Some(&rate),
        );
        assert!(f.is_past() && f.at == Some(110 * S));
        // No rate: the LSN, no time, and why.
        let f = predict(
            &slot(5 * SEG),
            &srv(7 * SEG, 110 * S, settings(64, 0)),
            None,
        );
        assert_eq!((f.lsn, f.at, f.in_s), (Some(Lsn(10 * SEG)), None, None));
        assert!(f.unknown.unwrap().contains("rate is unknown"));
        // No limit: nothing.
        let f = predict(
            &slot(5 * SEG),
            &srv(7 * SEG, 110 * S, settings(-1, 0)),
            Some(&rate),
        );
        assert_eq!((f.lsn, f.cause), (None, None));
        // Invalidated, or no restart_lsn: nothing.
        let mut gone = slot(5 * SEG);
        gone.invalidation_reason = Some("wal_removed".into());
        assert_eq!(
            predict(&gone, &srv(7 * SEG, 0, settings(64, 0)), None).lsn,
            None
        );
        assert_eq!(
            predict(&slot(0), &srv(7 * SEG, 0, settings(64, 0)), None).lsn,
            None
        );
    }

    #[test]
    fn idle_timeout_of_18() {
        let mut s = settings(-1, 0);
        s.idle_timeout_s = Some(60);
        let mut idle = slot(5 * SEG);
        idle.inactive_since = Some(1000 * S);
        let f = predict(&idle, &srv(7 * SEG, 1030 * S, s), None);
        assert_eq!(f.cause, Some(LossCause::IdleTimeout));
        assert_eq!(f.at, Some(1060 * S));
        assert_eq!(f.in_s, Some(30.0));
        assert_eq!(f.lsn, None);
        // Past: 0.
        assert!(predict(&idle, &srv(7 * SEG, 2000 * S, s), None).is_past());
        // In use: no idle timeout.
        idle.active_pid = Some(7);
        assert_eq!(predict(&idle, &srv(7 * SEG, 1030 * S, s), None).cause, None);
        idle.active_pid = None;
        // The WAL limit comes first: wal_removed, its LSN kept either way.
        s.max_slot_wal_keep_size_mb = 64;
        let mut rate = WalRate::default();
        rate.note(Lsn(4 * SEG), 1020 * S);
        let f = predict(&idle, &srv(7 * SEG, 1030 * S, s), Some(&rate));
        assert_eq!(f.cause, Some(LossCause::WalRemoved));
        assert_eq!(f.at, Some(1040 * S));
        // The WAL time unknown: the idle timeout's, with the LSN.
        let f = predict(&idle, &srv(7 * SEG, 1030 * S, s), None);
        assert_eq!(f.cause, Some(LossCause::IdleTimeout));
        assert_eq!(f.lsn, Some(Lsn(10 * SEG)));
    }
}
