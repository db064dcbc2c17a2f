//! What the watcher (the optional background worker) writes to the server log, decided from
//! the diagnoses of every logical slot it makes at each look ([`Watch::observe`]).
//!
//! Two things are worth a LOG line before anyone asks:
//! - a slot creation that has waited at least `log_waits_after`: one line naming what it
//!   waits for (the diagnosis' `creation waiting` finding, and each transaction it waits
//!   for with its holder: pid, application, xid, or the prepared transaction's gid) and
//!   the remedies; repeated at most once per `repeat_every` while it still waits;
//! - a slot whose restart_lsn or catalog_xmin has been held by the same transaction for
//!   at least `log_holds_after`: one line per slot, kind and holding xid;
//! - a slot the server will invalidate within `log_loss_within` (the diagnosis' `wal
//!   loss forecast`): one line per slot and prediction (its cause and loss position; for
//!   the idle timeout, its time), a note kept until the prediction ends.
//!
//! Durations are counted from the first look that saw the condition (the watcher does not
//! know when it began before that), so a line says "at least". A slot that is gone, a
//! creation that ended, or a hold that moved to another xid is forgotten.
//!
//! What the watcher has seen outlives the process: it is encoded ([`Watch::encode`],
//! bounded, the oldest conditions left out first) into shared memory after every look and
//! read back ([`Watch::decode`]) when the postmaster starts the watcher again, so that a
//! terminate or an ERROR neither restarts the count nor repeats a line. Times are
//! PostgreSQL timestamps (microseconds since 2000-01-01), the same in every process.

use super::{Finding, FindingKind};
use crate::TransactionId;

/// The watcher's settings, in microseconds (0: that kind of line is off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchSettings {
    /// `pg_snapbuild.log_waits_after`.
    pub log_waits_after: i64,
    /// `pg_snapbuild.log_holds_after`.
    pub log_holds_after: i64,
    /// The least time between two lines about the same waiting creation.
    pub repeat_every: i64,
    /// `pg_snapbuild.log_loss_within`: a `wal loss forecast` due within this long gets
    /// one line.
    pub log_loss_within: i64,
}

/// One LOG line: its message, DETAIL and HINT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub slot: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

/// Since when a condition has been seen, and when a line about it was last written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Seen {
    pub first: i64,
    pub logged: Option<i64>,
}

/// A creation seen waiting: the slot and the pid creating it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SeenCreation {
    pub slot: String,
    pub pid: Option<i32>,
    pub seen: Seen,
}

/// A position seen held: the slot, which position (`restart_lsn held` or `catalog_xmin
/// held`) and the holding xid.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SeenHold {
    pub slot: String,
    pub restart_lsn: bool,
    pub xid: TransactionId,
    pub seen: Seen,
}

/// What the watcher remembers between looks: since when it has seen each creation wait
/// (per slot and creating pid) and each hold (per slot, position and xid), when it last
/// wrote about it, and the notes it wrote once (e.g. that this node cannot decode).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Watch {
    creations: Vec<SeenCreation>,
    holds: Vec<SeenHold>,
    notes: Vec<String>,
}

/// The tag before an encoded [`Watch`]: its layout's version.
const ENCODED_TAG: &[u8] = b"pg_snapbuild watch 1\n";

/// The findings that name what a creation waits for.
fn is_creation_blocker(k: FindingKind) -> bool {
    matches!(
        k,
        FindingKind::WaitingForTransaction
            | FindingKind::WaitingForPreparedTransaction
            | FindingKind::WaitingForPrimaryTransaction
            | FindingKind::WaitingForEndedTransaction
            | FindingKind::WaitingForWal
    )
}

/// `us` microseconds as whole seconds.
fn seconds(us: i64) -> i64 {
    us / 1_000_000
}

/// The remedies of `findings`, each once, in order.
fn remedies<'a>(findings: impl Iterator<Item = &'a Finding>) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for f in findings {
        if let Some(r) = f.remedy.as_deref() {
            if !seen.contains(&r) {
                seen.push(r);
            }
        }
    }
    (!seen.is_empty()).then(|| seen.join("; "))
}

impl Watch {
    /// Whether note `key` is new: true the first time (then it is remembered), false
    /// after. For lines written once per server start (a watcher started again does not
    /// repeat them).
    pub fn note_once(&mut self, key: &str) -> bool {
        if self.notes.iter().any(|n| n == key) {
            return false;
        }
        self.notes.push(key.to_string());
        true
    }

    /// Forgets note `key` (its condition ended: a later one is written again).
    pub fn forget_note(&mut self, key: &str) {
        self.notes.retain(|n| n != key);
    }

    /// The watch as bytes of at most `max` (for shared memory): the conditions seen
    /// longest ago are left out first until it fits; empty when not even an empty watch
    /// fits.
    pub fn encode(&self, max: usize) -> Vec<u8> {
        let mut w = self.clone();
        loop {
            let mut out = ENCODED_TAG.to_vec();
            if serde_json::to_writer(&mut out, &w).is_ok() && out.len() <= max {
                return out;
            }
            // The oldest condition goes first.
            let oldest_c = w
                .creations
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.seen.first);
            let oldest_h = w.holds.iter().enumerate().min_by_key(|(_, h)| h.seen.first);
            match (oldest_c, oldest_h) {
                (Some((i, c)), Some((_, h))) if c.seen.first <= h.seen.first => {
                    w.creations.remove(i);
                }
                (_, Some((j, _))) => {
                    w.holds.remove(j);
                }
                (Some((i, _)), None) => {
                    w.creations.remove(i);
                }
                (None, None) if !w.notes.is_empty() => {
                    w.notes.remove(0);
                }
                (None, None) => return Vec::new(),
            }
        }
    }

    /// A watch read back from [`Watch::encode`]'s bytes; `None` for anything else (no
    /// watch stored yet, another layout, broken bytes).
    pub fn decode(bytes: &[u8]) -> Option<Watch> {
        let body = bytes.strip_prefix(ENCODED_TAG)?;
        serde_json::from_slice(body).ok()
    }

    /// Takes the diagnoses of every logical slot at time `now` (microseconds, any epoch,
    /// never going back) and returns the lines to write now. `slots`: each slot's name, the
    /// pid creating it (None when it is not being created) and its findings
    /// ([`super::diagnose`]).
    pub fn observe(
        &mut self,
        now: i64,
        slots: &[(String, Option<i32>, Vec<Finding>)],
        s: &WatchSettings,
    ) -> Vec<LogLine> {
        let mut lines = Vec::new();
        let mut creations = Vec::new();
        let mut holds = Vec::new();
        for (name, creator, findings) in slots {
            let creating = findings
                .iter()
                .find(|f| f.kind == Some(FindingKind::CreationWaiting));
            if let Some(c) = creating {
                let mut seen = self
                    .creations
                    .iter()
                    .find(|c| c.slot == *name && c.pid == *creator)
                    .map(|c| c.seen)
                    .unwrap_or(Seen {
                        first: now,
                        logged: None,
                    });
                let waited = now - seen.first;
                let due = seen.logged.is_none_or(|l| now - l >= s.repeat_every);
                if s.log_waits_after > 0 && waited >= s.log_waits_after && due {
                    let blockers: Vec<&Finding> = findings
                        .iter()
                        .filter(|f| f.kind.is_some_and(is_creation_blocker))
                        .collect();
                    let mut detail = c.finding.clone();
                    for b in &blockers {
                        detail.push('\n');
                        detail.push_str(&b.finding);
                    }
                    lines.push(LogLine {
                        slot: name.clone(),
                        message: format!(
                            "creation of logical replication slot \"{name}\" has waited at least {} s",
                            seconds(waited)
                        ),
                        detail: Some(detail),
                        hint: remedies(blockers.into_iter()),
                    });
                    seen.logged = Some(now);
                }
                creations.push(SeenCreation {
                    slot: name.clone(),
                    pid: *creator,
                    seen,
                });
            }
            for f in findings {
                let (
                    Some(kind @ (FindingKind::RestartLsnHeld | FindingKind::CatalogXminHeld)),
                    Some(x),
                ) = (f.kind, f.xid)
                else {
                    continue;
                };
                let restart_lsn = kind == FindingKind::RestartLsnHeld;
                let mut seen = self
                    .holds
                    .iter()
                    .find(|h| h.slot == *name && h.restart_lsn == restart_lsn && h.xid == x)
                    .map(|h| h.seen)
                    .unwrap_or(Seen {
                        first: now,
                        logged: None,
                    });
                let held = now - seen.first;
                if s.log_holds_after > 0 && held >= s.log_holds_after && seen.logged.is_none() {
                    let what = if kind == FindingKind::RestartLsnHeld {
                        "restart_lsn"
                    } else {
                        "catalog_xmin"
                    };
                    // The forecast for the same xid says what ending it releases.
                    let forecast = findings
                        .iter()
                        .find(|g| g.kind == Some(FindingKind::Forecast) && g.xid == Some(x));
                    let mut detail = f.finding.clone();
                    if let Some(g) = forecast {
                        detail.push('\n');
                        detail.push_str(&g.finding);
                    }
                    lines.push(LogLine {
                        slot: name.clone(),
                        message: format!(
                            "{what} of logical replication slot \"{name}\" has been held by transaction {x} for at least {} s",
                            seconds(held)
                        ),
                        detail: Some(detail),
                        hint: f.remedy.clone(),
                    });
                    seen.logged = Some(now);
                }
                holds.push(SeenHold {
                    slot: name.clone(),
                    restart_lsn,
                    xid: x,
                    seen,
                });
            }
        }
        let mut losses = Vec::new();
        for (name, _, findings) in slots {
            for f in findings
                .iter()
                .filter(|f| f.kind == Some(FindingKind::WalLossForecast))
            {
                let idle = f.finding.contains("(idle_timeout)");
                let key = if idle {
                    format!("wal loss \"{name}\" idle_timeout at {:?}", f.since)
                } else {
                    format!("wal loss \"{name}\" wal_removed at {:?}", f.lsn)
                };
                losses.push(key.clone());
                let Some(at) = f.since else {
                    continue;
                };
                if s.log_loss_within > 0 && at - now <= s.log_loss_within && self.note_once(&key) {
                    let when = if at <= now {
                        "at the next checkpoint".to_string()
                    } else {
                        format!("in about {} s", seconds(at - now))
                    };
                    lines.push(LogLine {
                        slot: name.clone(),
                        message: format!(
                            "logical replication slot \"{name}\" will be invalidated ({}) {when}",
                            if idle { "idle_timeout" } else { "wal_removed" }
                        ),
                        detail: Some(f.finding.clone()),
                        hint: f.remedy.clone(),
                    });
                }
            }
        }
        // A prediction that ended (restart_lsn moved, the slot was used or dropped) is
        // forgotten: a later one is written again.
        self.notes
            .retain(|n| !n.starts_with("wal loss ") || losses.contains(n));
        self.creations = creations;
        self.holds = holds;
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    fn settings() -> WatchSettings {
        WatchSettings {
            log_waits_after: 10 * S,
            log_holds_after: 60 * S,
            repeat_every: 60 * S,
            log_loss_within: 3600 * S,
        }
    }

    fn finding(kind: FindingKind, text: &str, xid: Option<u32>, remedy: Option<&str>) -> Finding {
        Finding {
            kind: Some(kind),
            finding: text.into(),
            xid,
            remedy: remedy.map(Into::into),
            ..Default::default()
        }
    }

    fn creating(pid: i32) -> (String, Option<i32>, Vec<Finding>) {
        (
            "cdc".into(),
            Some(pid),
            vec![
                finding(
                    FindingKind::CreationWaiting,
                    "slot \"cdc\" is being created",
                    Some(759),
                    None,
                ),
                finding(
                    FindingKind::WaitingForTransaction,
                    "the creation waits for xid 758, held by pid 41",
                    Some(758),
                    Some("COMMIT or ROLLBACK in that session, or SELECT pg_terminate_backend(41)"),
                ),
                finding(FindingKind::RetainedWal, "kept", None, None),
            ],
        )
    }

    #[test]
    fn a_waiting_creation_is_logged_after_the_threshold_then_once_a_minute() {
        let mut w = Watch::default();
        let s = settings();
        let slots = [creating(7)];
        assert!(w.observe(0, &slots, &s).is_empty());
        assert!(w.observe(9 * S, &slots, &s).is_empty());
        let l = w.observe(10 * S, &slots, &s);
        assert_eq!(l.len(), 1);
        assert_eq!(
            l[0].message,
            "creation of logical replication slot \"cdc\" has waited at least 10 s"
        );
        assert_eq!(
            l[0].detail.as_deref(),
            Some("slot \"cdc\" is being created\nthe creation waits for xid 758, held by pid 41")
        );
        assert_eq!(
            l[0].hint.as_deref(),
            Some("COMMIT or ROLLBACK in that session, or SELECT pg_terminate_backend(41)")
        );
        assert!(w.observe(20 * S, &slots, &s).is_empty());
        assert!(w.observe(69 * S, &slots, &s).is_empty());
        assert_eq!(w.observe(70 * S, &slots, &s).len(), 1);
    }

    #[test]
    fn a_new_creation_of_the_same_name_starts_counting_again() {
        let mut w = Watch::default();
        let s = settings();
        w.observe(0, &[creating(7)], &s);
        assert_eq!(w.observe(10 * S, &[creating(7)], &s).len(), 1);
        // The slot is gone, then created again by another process.
        assert!(w.observe(11 * S, &[], &s).is_empty());
        assert!(w.observe(12 * S, &[creating(8)], &s).is_empty());
        assert!(w.observe(21 * S, &[creating(8)], &s).is_empty());
        assert_eq!(w.observe(22 * S, &[creating(8)], &s).len(), 1);
    }

    #[test]
    fn what_was_seen_survives_encoding_and_the_oldest_goes_first_when_short() {
        let mut w = Watch::default();
        let s = settings();
        let held = |slot: &str, x: u32| {
            (
                slot.to_string(),
                None,
                vec![finding(FindingKind::RestartLsnHeld, "held", Some(x), None)],
            )
        };
        w.observe(0, &[held("a", 5)], &s);
        w.observe(10 * S, &[held("a", 5), held("b", 6), creating(7)], &s);
        assert!(w.note_once("no decoding"));
        let bytes = w.encode(1 << 16);
        let mut back = Watch::decode(&bytes).unwrap();
        assert_eq!(back, w);
        assert!(!back.note_once("no decoding"));
        // A watcher started again goes on counting from the first look: the hold of "a"
        // is due at 60 s, not 60 s after the restart.
        let l = back.observe(60 * S, &[held("a", 5), held("b", 6)], &s);
        assert_eq!(l.len(), 1);
        assert!(l[0].message.contains("\"a\"") && l[0].message.ends_with("at least 60 s"));
        // Too little room: "a" (seen first) is left out, then everything else.
        let all = w.encode(1 << 16).len();
        let short = Watch::decode(&w.encode(all - 1)).unwrap();
        assert!(short.holds.iter().all(|h| h.slot != "a"));
        assert_eq!(short.holds.len() + short.creations.len(), 2);
        assert!(w.encode(3).is_empty());
        assert_eq!(Watch::decode(b"garbage"), None);
        assert_eq!(Watch::decode(&[]), None);
    }

    #[test]
    fn zero_turns_lines_off() {
        let mut w = Watch::default();
        let s = WatchSettings {
            log_waits_after: 0,
            log_holds_after: 0,
            repeat_every: 60 * S,
            log_loss_within: 0,
        };
        let mut held = creating(7);
        held.2
            .push(finding(FindingKind::RestartLsnHeld, "held", Some(5), None));
        assert!(w.observe(0, std::slice::from_ref(&held), &s).is_empty());
        assert!(w.observe(1000 * S, &[held], &s).is_empty());
    }

    #[test]
    fn a_hold_is_logged_once_per_xid() {
        let mut w = Watch::default();
        let s = settings();
        let held = |x: u32| {
            (
                "cdc".to_string(),
                None,
                vec![
                    finding(
                        FindingKind::RestartLsnHeld,
                        "restart_lsn is held",
                        Some(x),
                        Some("end it"),
                    ),
                    finding(
                        FindingKind::CatalogXminHeld,
                        "catalog_xmin is held",
                        Some(x),
                        Some("end it"),
                    ),
                    finding(FindingKind::Forecast, "when it ends", Some(x), None),
                ],
            )
        };
        assert!(w.observe(0, &[held(5)], &s).is_empty());
        let l = w.observe(60 * S, &[held(5)], &s);
        assert_eq!(l.len(), 2);
        assert_eq!(
            l[0].message,
            "restart_lsn of logical replication slot \"cdc\" has been held by transaction 5 for at least 60 s"
        );
        assert_eq!(
            l[0].detail.as_deref(),
            Some("restart_lsn is held\nwhen it ends")
        );
        assert_eq!(l[1].hint.as_deref(), Some("end it"));
        assert!(w.observe(600 * S, &[held(5)], &s).is_empty());
        // Another transaction holds it now: counted anew.
        assert!(w.observe(601 * S, &[held(9)], &s).is_empty());
        assert_eq!(w.observe(661 * S, &[held(9)], &s).len(), 2);
    }

    #[test]
    fn a_loss_within_the_setting_is_logged_once_per_prediction() {
        let mut w = Watch::default();
        let s = settings();
        let loss = |lsn: u64, at: i64| {
            let mut f = finding(
                FindingKind::WalLossForecast,
                "slot \"cdc\" will be invalidated (wal_removed) by …",
                Some(5),
                Some("end it"),
            );
            f.lsn = Some(crate::Lsn(lsn));
            f.since = Some(at);
            ("cdc".to_string(), None, vec![f])
        };
        // Two hours away: nothing yet.
        assert!(w.observe(0, &[loss(0xA000000, 7200 * S)], &s).is_empty());
        let l = w.observe(3600 * S, &[loss(0xA000000, 7000 * S)], &s);
        assert_eq!(l.len(), 1);
        assert_eq!(
            l[0].message,
            "logical replication slot \"cdc\" will be invalidated (wal_removed) in about 3400 s"
        );
        assert_eq!(l[0].hint.as_deref(), Some("end it"));
        // The same prediction, sooner at a faster rate: not again.
        assert!(w
            .observe(3700 * S, &[loss(0xA000000, 3800 * S)], &s)
            .is_empty());
        // Across a restart of the watcher.
        let mut back = Watch::decode(&w.encode(1 << 16)).unwrap();
        assert!(back
            .observe(3800 * S, &[loss(0xA000000, 3800 * S)], &s)
            .is_empty());
        // restart_lsn moved, then held again: a new prediction.
        assert!(back.observe(3900 * S, &[], &s).is_empty());
        let l = back.observe(4000 * S, &[loss(0xB000000, 3990 * S)], &s);
        assert_eq!(l.len(), 1);
        assert!(
            l[0].message.ends_with("at the next checkpoint"),
            "{}",
            l[0].message
        );
    }
}
