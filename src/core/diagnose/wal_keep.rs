//! What a checkpoint keeps of the WAL, and how fast the WAL grows: xlog.c KeepLogSeg
//! ([`keep_log_seg`]), what CreateCheckPoint and CreateRestartPoint hand to slot.c
//! InvalidateObsoleteReplicationSlots with DetermineSlotInvalidationCause's test for
//! `wal_removed` ([`checkpoint_invalidates`]), the first position that fails it
//! ([`loss_lsn`]), and the WAL rate measured from the WAL itself ([`WalRate`]). The
//! forecast built on them is `wal_loss.rs`.

use crate::include::xlogdefs::Lsn;

/// What decides how much WAL a slot may keep and how long it may stay unused: the
/// server's settings as its GUC variables hold them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepSettings {
    /// `max_slot_wal_keep_size` in MB (-1: no limit).
    pub max_slot_wal_keep_size_mb: i32,
    /// `wal_keep_size` in MB (0: none).
    pub wal_keep_size_mb: i32,
    /// `wal_segment_size` in bytes.
    pub wal_segment_size: u64,
    /// `idle_replication_slot_timeout` in seconds (18+; 0: off); `None` before 18.
    pub idle_timeout_s: Option<i32>,
    /// `summarize_wal` (17+): the WAL summarizer keeps segments it has not read yet.
    pub summarize_wal: bool,
}

/// A WAL segment number (`XLogSegNo`).
pub type SegNo = u64;

/// xlog_internal.h XLByteToSeg: the segment holding `lsn`.
pub fn seg_of(lsn: Lsn, seg_size: u64) -> SegNo {
    lsn.0 / seg_size.max(1)
}

/// xlog_internal.h XLogSegNoOffsetToRecPtr at offset 0: where segment `seg` begins.
pub fn seg_start(seg: SegNo, seg_size: u64) -> Lsn {
    Lsn(seg.saturating_mul(seg_size.max(1)))
}

/// xlog.c ConvertToXSegs (xlog_internal.h XLogMBVarToSegs): a size in MB as whole
/// segments, rounded down.
pub fn mb_to_segs(mb: i32, seg_size: u64) -> u64 {
    let per_mb = (seg_size / (1024 * 1024)).max(1);
    u64::try_from(mb).unwrap_or(0) / per_mb
}

/// Re-runs xlog.c KeepLogSeg: the oldest segment a checkpoint whose record ends at
/// `recptr` keeps, given the oldest restart_lsn of all slots `slots_min` (slot.c
/// XLogGetReplicationSlotMinimumLSN; 0: none) and the segment `log_seg_no` the caller
/// keeps anyway: the slots' segment, no further back than `max_slot_wal_keep_size` from
/// the record's segment, and at least `wal_keep_size` back from it. The WAL summarizer's
/// hold (17+) is left out: it only keeps more.
pub fn keep_log_seg(recptr: Lsn, slots_min: Lsn, s: &KeepSettings, log_seg_no: SegNo) -> SegNo {
    let curr = seg_of(recptr, s.wal_segment_size);
    let mut segno = curr;
    if slots_min.is_valid() && slots_min < recptr {
        segno = seg_of(slots_min, s.wal_segment_size);
        if s.max_slot_wal_keep_size_mb >= 0 {
            let slot_keep = mb_to_segs(s.max_slot_wal_keep_size_mb, s.wal_segment_size);
            if curr - segno > slot_keep {
                segno = curr - slot_keep;
            }
        }
    }
    if s.wal_keep_size_mb > 0 {
        let keep = mb_to_segs(s.wal_keep_size_mb, s.wal_segment_size);
        if curr - segno < keep {
            segno = if curr <= keep { 1 } else { curr - keep };
        }
    }
    segno.min(log_seg_no)
}

/// Whether a checkpoint whose redo pointer is `redo` and whose record ends at `recptr`
/// invalidates a slot at `restart_lsn`: xlog.c CreateCheckPoint (and CreateRestartPoint,
/// with the replay position as `recptr`) keep from the redo pointer's segment lowered by
/// [`keep_log_seg`], and slot.c DetermineSlotInvalidationCause finds `wal_removed` for a
/// restart_lsn before that segment's start.
pub fn checkpoint_invalidates(
    restart_lsn: Lsn,
    redo: Lsn,
    recptr: Lsn,
    slots_min: Lsn,
    s: &KeepSettings,
) -> bool {
    let oldest = keep_log_seg(recptr, slots_min, s, seg_of(redo, s.wal_segment_size));
    restart_lsn.is_valid() && restart_lsn < seg_start(oldest, s.wal_segment_size)
}

/// The position past which the next checkpoint invalidates a slot at `restart_lsn`
/// (`wal_removed`): the start of the segment `max(max_slot_wal_keep_size,
/// wal_keep_size)` segments plus one after restart_lsn's. A checkpoint whose record ends
/// at or after it (and whose redo pointer lies past restart_lsn's segment, as that of
/// every checkpoint begun after it does) invalidates the slot; one whose record ends
/// before it does not, whatever the other slots keep. `wal_status` is `unreserved` once
/// the write position reaches it. `None` without `max_slot_wal_keep_size`, or for an
/// invalid restart_lsn.
pub fn loss_lsn(restart_lsn: Lsn, s: &KeepSettings) -> Option<Lsn> {
    if s.max_slot_wal_keep_size_mb < 0 || !restart_lsn.is_valid() {
        return None;
    }
    let keep = mb_to_segs(s.max_slot_wal_keep_size_mb, s.wal_segment_size)
        .max(mb_to_segs(s.wal_keep_size_mb.max(0), s.wal_segment_size));
    Some(seg_start(
        seg_of(restart_lsn, s.wal_segment_size) + keep + 1,
        s.wal_segment_size,
    ))
}

/// The WAL rate, measured from the WAL: (position, time) pairs of the commit and abort
/// records a replay met (`xact_time`, microseconds since 2000-01-01), at least
/// [`WalRate::SPACING`] apart, the last [`WalRate::WINDOW`] of them kept (and one
/// before). Kept with the replay between calls.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WalRate {
    pub(super) samples: Vec<(u64, i64)>,
}

/// A rate, or why there is none.
pub type Rate = Result<RateFound, String>;

/// A WAL rate and what it was measured over.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateFound {
    /// Bytes per second.
    pub bytes_per_s: f64,
    /// The seconds it was measured over (up to now).
    pub over_s: f64,
}

impl WalRate {
    /// The least time between two pairs kept.
    pub const SPACING: i64 = 5_000_000;
    /// How far back the rate looks.
    pub const WINDOW: i64 = 600_000_000;
    /// The least time a rate is measured over.
    pub const MIN_SPAN: i64 = 5_000_000;

    /// Takes the record at `lsn` written at `at`. A pair not after the last one (in
    /// position and time) is passed over, as is one closer than [`WalRate::SPACING`].
    pub fn note(&mut self, lsn: Lsn, at: i64) {
        if at <= 0 {
            return;
        }
        if let Some(&(l, t)) = self.samples.last() {
            if lsn.0 <= l || at < t + Self::SPACING {
                return;
            }
        }
        self.samples.push((lsn.0, at));
        self.trim();
    }

    /// Takes the pairs of `other` (the same WAL, met by another replay).
    pub fn merge(&mut self, other: &WalRate) {
        if other.samples.is_empty() {
            return;
        }
        let mut all = std::mem::take(&mut self.samples);
        all.extend_from_slice(&other.samples);
        all.sort_unstable();
        all.dedup_by_key(|p| p.0);
        for (l, t) in all {
            self.note(Lsn(l), t);
        }
    }

    /// Drops the pairs older than the window, but the newest of them.
    fn trim(&mut self) {
        let Some(&(_, newest)) = self.samples.last() else {
            return;
        };
        let keep_from = self
            .samples
            .iter()
            .position(|&(_, t)| t >= newest - Self::WINDOW)
            .unwrap_or(0)
            .saturating_sub(1);
        let cap = (Self::WINDOW / Self::SPACING) as usize + 2;
        let keep_from = keep_from.max(self.samples.len().saturating_sub(cap));
        self.samples.drain(..keep_from);
    }

    /// How many pairs are kept.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The rate from the oldest pair of the last [`WalRate::WINDOW`] (else the newest
    /// pair) to position `pos` at time `now`; why there is none: no pair, too short a
    /// time, no WAL written.
    pub fn rate(&self, pos: Lsn, now: i64) -> Rate {
        let base = self
            .samples
            .iter()
            .find(|&&(_, t)| t >= now - Self::WINDOW)
            .or(self.samples.last());
        let Some(&(l, t)) = base else {
            return Err("no commit or abort record in the WAL replayed dates it".into());
        };
        let span = now - t;
        if span < Self::MIN_SPAN {
            return Err(format!(
                "the WAL replayed is dated over {:.1} s only, too short to measure a rate",
                span.max(0) as f64 / 1e6
            ));
        }
        if pos.0 <= l {
            return Err(format!(
                "no WAL was written in the last {:.0} s",
                span as f64 / 1e6
            ));
        }
        let over_s = span as f64 / 1e6;
        Ok(RateFound {
            bytes_per_s: (pos.0 - l) as f64 / over_s,
            over_s,
        })
    }
}
