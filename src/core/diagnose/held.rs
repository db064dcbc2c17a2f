//! The findings of a created slot: what holds its restart_lsn and catalog_xmin back (the
//! reorder buffer's oldest transaction, the holder of the catalog snapshot) and where
//! they go when it ends (the `forecast` rows), whether its catalog_xmin is the cluster's
//! oldest horizon, a restart candidate waiting for confirmation, a missing consumer, the
//! consumer's lag and the WAL kept; for a synced copy, slotsync.rs's rows first.
//!
//! Not a PostgreSQL file. The rules are logical.c's LogicalIncreaseXminForSlot,
//! LogicalIncreaseRestartDecodingForSlot and LogicalConfirmReceivedLocation, and
//! procarray.c's ComputeXidHorizons (the slots' catalog_xmin as the catalogs' horizon).

use super::facts::{bytes_between, BuilderFacts, Holder, HolderKind, ServerFacts, SlotFacts};
use super::finding::{end_name, Finding, FindingKind};
use super::forecast::{Forecast, ForecastLsn, ForecastXid};
use super::remedy::{
    backend_remedy, prepared_remedy, primary_remedy, wal_remedy, CONFIRM_ON_PRIMARY_COPY,
};
use super::slotsync;
use super::waits::{catalog_xmin_holder, describe_backend, on_primary, xid_status, XidStatus};
use super::wal_loss::{self, LossCause};
use crate::include::transam::{self, TransactionId};

pub(super) fn created_findings(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
    out: &mut Vec<Finding>,
) {
    let mut problems = 0;
    let copy = slot.synced.as_ref();
    if let Some(c) = copy {
        problems += slotsync::copy_findings(slot, c, builder, server, holders, out);
    }
    // The loss forecast goes before the rows that say what holds restart_lsn, once
    // they are known.
    let loss_at = out.len();
    // A temporary copy does not move by decoding: its rows above say what moves it.
    let pending = copy.is_some_and(|c| c.temporary);
    // Who moves the positions once a transaction ended: this slot's consumer, or for a
    // copy the primary slot's consumer and then the synchronization.
    let then = if copy.is_some() {
        CONFIRM_ON_PRIMARY_COPY
    } else {
        ", and let the slot's consumer here confirm past that record"
    };
    if let Some(b) = builder.filter(|_| !pending) {
        if let Some((x, restart_point)) = b.oldest_txn {
            // A transaction first seen before the decoder had a restart point proposes
            // none: restart_lsn then stays where it is.
            let restart = if restart_point.is_valid() {
                restart_point.max(slot.restart_lsn)
            } else {
                slot.restart_lsn
            };
            let how = if restart_point.is_valid() {
                "decoding must restart there to see"
            } else {
                "no restart point is proposed (it began before the decoder had one) while"
            };
            problems += 1;
            let status = xid_status(holders, server, x);
            let who = match &status {
                XidStatus::Held(HolderKind::Backend(be)) => {
                    format!("held by {}", describe_backend(be))
                }
                XidStatus::Held(HolderKind::Prepared(p)) => format!("prepared as gid '{}'", p.gid),
                XidStatus::RunningOnPrimary => on_primary(server),
                XidStatus::Ended => format!(
                    "no longer running{} (its end lies after the WAL read, or it ended without a commit or abort record, e.g. a crash); the next RUNNING_XACTS clears it",
                    if server.in_recovery { " on the primary as far as this standby knows" } else { "" }
                ),
            };
            let mut f = Finding::new(
                FindingKind::RestartLsnHeld,
                format!(
                    "restart_lsn cannot move past {restart}: {how} xid {x}, the oldest transaction with WAL that has not ended up to {}; it is {who}",
                    b.replayed_to
                ),
            );
            f.xid = Some(x);
            f.lsn = Some(restart);
            f.bytes = Some(bytes_between(restart, server.flush_lsn));
            set_holder(&mut f, &status, x, server, then);
            out.push(f);
        }
        if let Some((x, xmin)) = catalog_xmin_holder(b) {
            let status = xid_status(holders, server, x);
            if status != XidStatus::Ended {
                problems += 1;
                let age = age_text(server, slot.catalog_xmin);
                let who = match &status {
                    XidStatus::Held(HolderKind::Backend(be)) => {
                        format!("held by {}", describe_backend(be))
                    }
                    XidStatus::Held(HolderKind::Prepared(p)) => {
                        format!("prepared as gid '{}'", p.gid)
                    }
                    _ => on_primary(server),
                };
                let what = if xmin == x {
                    format!("xid {x} is the oldest transaction running")
                } else {
                    format!("xid {x} decodes with a catalog snapshot of xmin {xmin}")
                };
                let mut f = Finding::new(
                    FindingKind::CatalogXminHeld,
                    format!(
                        "catalog_xmin {}{age} is held at {xmin}: {what} and has not ended, {who}; VACUUM cannot remove catalog rows deleted after catalog_xmin",
                        slot.catalog_xmin
                    ),
                );
                f.xid = Some(x);
                f.lsn = b.last_running.as_ref().map(|(l, _)| *l);
                set_holder(&mut f, &status, x, server, then);
                out.push(f);
            }
        }
        if copy.is_none() {
            for fc in &b.forecasts {
                out.push(forecast_finding(slot, server, fc));
            }
        }
    }
    if !pending
        && slot.candidate_restart_valid.is_valid()
        && slot.candidate_restart_lsn.is_valid()
        && slot
            .confirmed_flush
            .is_none_or(|c| c < slot.candidate_restart_valid)
    {
        problems += 1;
        let confirmed = slot
            .confirmed_flush
            .map(|c| format!("confirmed_flush is {c}"))
            .unwrap_or_else(|| "confirmed_flush is not set".into());
        let mut f = Finding::new(
            FindingKind::PendingRestartCandidate,
            format!(
                "restart_lsn moves to {} only once the consumer confirms {} ({confirmed}); until then newer candidates are not taken",
                slot.candidate_restart_lsn, slot.candidate_restart_valid
            ),
        );
        f.lsn = Some(slot.candidate_restart_valid);
        f.bytes = Some(bytes_between(slot.restart_lsn, slot.candidate_restart_lsn));
        f.remedy = Some(if copy.is_some() {
            "let the slot's consumer on the primary confirm (acknowledge) what it has received; the synchronization follows".into()
        } else {
            "let the consumer confirm (acknowledge) what it has received".into()
        });
        out.push(f);
    }
    // A copy is never consumed on the standby: no consumer is expected there.
    if slot.active_pid.is_none() && copy.is_none() {
        problems += 1;
        let mut f = Finding::new(
            FindingKind::NoConsumer,
            format!(
                "no process is using slot \"{}\": restart_lsn and catalog_xmin move only when a consumer decodes and confirms",
                slot.name
            ),
        );
        f.since = slot.inactive_since;
        f.lsn = slot.confirmed_flush;
        f.remedy = Some(format!(
            "start the consumer, or SELECT pg_drop_replication_slot('{}') if it is abandoned",
            slot.name.replace('\'', "''")
        ));
        out.push(f);
    }
    if let Some(f) = wal_loss_finding(slot, builder, server, &out[loss_at..]) {
        problems += 1;
        out.insert(loss_at, f);
    }
    if let Some(f) = horizon_finding(slot, server) {
        out.push(f);
    }
    // No confirmed_flush (a copy the synchronization has not advanced): no lag to give.
    if let Some(confirmed) = slot.confirmed_flush {
        let lag = bytes_between(confirmed, server.flush_lsn);
        let whose = if copy.is_some() {
            " (the primary slot's, as last synchronized)"
        } else {
            ""
        };
        let mut f = Finding::new(
            FindingKind::ConsumerLag,
            format!(
                "confirmed_flush {confirmed}{whose} is {lag} bytes behind the {} {}",
                end_name(server),
                server.flush_lsn
            ),
        );
        f.lsn = Some(confirmed);
        f.bytes = Some(lag);
        f.since = slot.inactive_since;
        out.push(f);
    }
    let kept = bytes_between(slot.restart_lsn, server.flush_lsn);
    let mut f = Finding::new(
        FindingKind::RetainedWal,
        format!(
            "the slot keeps {kept} bytes of WAL, from restart_lsn {} to the {} {}",
            slot.restart_lsn,
            end_name(server),
            server.flush_lsn
        ),
    );
    f.lsn = Some(slot.restart_lsn);
    f.bytes = Some(kept);
    out.push(f);
    if problems == 0 {
        let consumer = if copy.is_some() {
            "synchronized"
        } else {
            "in use"
        };
        out.push(Finding::new(
            FindingKind::Healthy,
            format!(
                "slot \"{}\" is consistent, {consumer}, and nothing holds it back",
                slot.name
            ),
        ));
    }
}

/// The `wal loss forecast` row ([`wal_loss::predict`]): for a slot whose restart_lsn
/// something holds back (`held`: the rows found so far: `restart_lsn held`, `pending
/// restart candidate`, `no consumer`, a synced copy's rows), or that is past the loss
/// position already, or that the idle timeout will invalidate. `lsn` the loss position
/// (NULL for the idle timeout without max_slot_wal_keep_size), `since` the predicted
/// time, `bytes` the WAL still to be written before it; the holder's columns and remedy
/// come from the row that holds restart_lsn.
fn wal_loss_finding(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    held: &[Finding],
) -> Option<Finding> {
    let loss = wal_loss::predict(slot, server, builder.map(|b| &b.wal_rate));
    let cause = loss.cause?;
    let holder = held.iter().find(|f| {
        matches!(
            f.kind,
            Some(
                FindingKind::RestartLsnHeld
                    | FindingKind::PendingRestartCandidate
                    | FindingKind::NoConsumer
                    | FindingKind::SyncPending
                    | FindingKind::Synchronized
            )
        )
    });
    if cause == LossCause::WalRemoved && holder.is_none() && !loss.is_past() {
        // A consumer moves restart_lsn on: no loss to forecast while it does.
        return None;
    }
    let s = server.keep.as_ref()?;
    let name = &slot.name;
    let when = match (loss.in_s, loss.rate) {
        (Some(0.0), _) if cause == LossCause::IdleTimeout => {
            "the timeout has passed: the next checkpoint invalidates it (a checkpoint skipped on an idle server does not)".to_string()
        }
        (Some(0.0), _) => format!(
            "the WAL ({}) is past it: the next checkpoint invalidates it",
            server.flush_lsn.max(server.insert_lsn.unwrap_or_default())
        ),
        (Some(secs), Some(r)) => format!(
            "at the WAL rate of the last {:.0} s ({:.0} bytes/s, from the commit times in the WAL) the WAL reaches it in about {:.0} s; the first checkpoint after that invalidates it",
            r.over_s, r.bytes_per_s, secs
        ),
        (Some(secs), None) => format!(
            "in about {secs:.0} s; the first checkpoint after that invalidates it (a checkpoint skipped on an idle server does not)"
        ),
        (None, _) => format!(
            "when is unknown ({})",
            loss.unknown.as_deref().unwrap_or("no WAL rate")
        ),
    };
    let why = match cause {
        LossCause::WalRemoved => {
            let l = loss.lsn?;
            let keep = wal_loss::mb_to_segs(s.max_slot_wal_keep_size_mb, s.wal_segment_size);
            let wal_keep = wal_loss::mb_to_segs(s.wal_keep_size_mb.max(0), s.wal_segment_size);
            let limit = if wal_keep > keep {
                format!("wal_keep_size ({} MB, {wal_keep} segments)", s.wal_keep_size_mb)
            } else {
                format!(
                    "max_slot_wal_keep_size ({} MB, {keep} segments)",
                    s.max_slot_wal_keep_size_mb
                )
            };
            let summarizer = if s.summarize_wal {
                "; summarize_wal is on: a WAL summarizer behind restart_lsn delays it"
            } else {
                ""
            };
            format!(
                "slot \"{name}\" will be invalidated (wal_removed) by the first checkpoint whose record ends at or after {l}: {limit} keeps only that many segments before the checkpoint's, and restart_lsn {} would lie before them; {when}{summarizer}",
                slot.restart_lsn
            )
        }
        LossCause::IdleTimeout => format!(
            "slot \"{name}\" will be invalidated (idle_timeout) at the first checkpoint after it has been unused for idle_replication_slot_timeout ({} s) since inactive_since; {when}",
            s.idle_timeout_s.unwrap_or(0)
        ),
    };
    let mut f = Finding::new(FindingKind::WalLossForecast, why);
    if let Some(h) = holder {
        f.finding.push_str("; restart_lsn is kept back because ");
        f.finding.push_str(&h.finding);
        f.xid = h.xid;
        f.backend = h.backend.clone();
        f.prepared = h.prepared.clone();
    }
    f.lsn = loss.lsn;
    f.since = loss.at;
    let pos = server.flush_lsn.max(server.insert_lsn.unwrap_or_default());
    f.bytes = loss.lsn.map(|l| bytes_between(pos, l));
    let raise = match cause {
        LossCause::WalRemoved => "raise max_slot_wal_keep_size (ALTER SYSTEM SET max_slot_wal_keep_size = '…'; SELECT pg_reload_conf())",
        LossCause::IdleTimeout => "raise idle_replication_slot_timeout (ALTER SYSTEM, then SELECT pg_reload_conf())",
    };
    f.remedy = Some(match holder.and_then(|h| h.remedy.as_deref()) {
        Some(r) => format!("{r}; or {raise}"),
        None => raise.to_string(),
    });
    Some(f)
}

/// Fills `f`'s holder columns and remedy from `status` (a session or prepared
/// transaction here, a transaction of the primary, or ended).
fn set_holder(
    f: &mut Finding,
    status: &XidStatus,
    x: TransactionId,
    server: &ServerFacts,
    then: &str,
) {
    match status {
        XidStatus::Held(HolderKind::Backend(be)) => {
            f.since = be.xact_start;
            f.remedy = Some(backend_remedy(be));
            f.backend = Some(be.clone());
        }
        XidStatus::Held(HolderKind::Prepared(p)) => {
            f.since = p.prepared;
            f.remedy = Some(prepared_remedy(p));
            f.prepared = Some(p.clone());
        }
        XidStatus::RunningOnPrimary => f.remedy = Some(primary_remedy(x, server, then)),
        XidStatus::Ended => f.remedy = Some(wal_remedy(server)),
    }
}

/// A `forecast` row: the sentence, the ending xid, restart_lsn afterwards (`lsn`, when
/// known), the WAL bytes it releases (`bytes`, when known) and catalog_xmin afterwards.
fn forecast_finding(slot: &SlotFacts, server: &ServerFacts, fc: &Forecast) -> Finding {
    let mut f = Finding::new(
        FindingKind::Forecast,
        fc.sentence(slot.restart_lsn, slot.catalog_xmin, server.flush_lsn),
    );
    f.xid = Some(fc.ending);
    f.lsn = match fc.restart_lsn {
        ForecastLsn::At(l) | ForecastLsn::Stays(l) => Some(l),
        ForecastLsn::AtNextRunningXacts => None,
    };
    f.bytes = fc.released_bytes(slot.restart_lsn);
    f.forecast_catalog_xmin = match fc.catalog_xmin {
        ForecastXid::At(x) | ForecastXid::Stays(x) => Some(x),
        ForecastXid::AtNextXid(_) => None,
    };
    if !fc.ended && server.in_recovery {
        f.remedy = Some(format!(
            "end xid {} on the primary (the rows above give the query that finds its session there), then {} and let the consumer here confirm",
            fc.ending,
            wal_remedy(server)
        ));
    } else if !fc.ended {
        f.remedy = Some(format!(
            "end xid {} (see the rows above for its session), then let the consumer confirm",
            fc.ending
        ));
    } else {
        f.remedy = Some(wal_remedy(server));
    }
    f
}

/// " (age N xids)" for a catalog_xmin, or nothing where its age is not known here
/// ([`transam::age`]).
fn age_text(server: &ServerFacts, xid: TransactionId) -> String {
    transam::age(server.next_xid, xid)
        .map(|a| format!(" (age {a} xids)"))
        .unwrap_or_default()
}

/// The `catalog horizon` row: whether the slot's catalog_xmin is older than every other
/// xmin horizon of the cluster (procarray.c ComputeXidHorizons takes the slots'
/// catalog_xmin for catalog tables: VACUUM keeps catalog rows deleted from there on),
/// or what holds an older one.
fn horizon_finding(slot: &SlotFacts, server: &ServerFacts) -> Option<Finding> {
    let c = slot.catalog_xmin;
    if !transam::is_normal(c) {
        return None;
    }
    let age = age_text(server, c);
    let oldest_other = server
        .horizons
        .iter()
        .filter(|h| transam::is_normal(h.xid))
        .min_by(|a, b| transam::precedes_order(a.xid, b.xid));
    let mut f = match oldest_other {
        Some(h) if transam::precedes(h.xid, c) => {
            let mut f = Finding::new(
                FindingKind::CatalogHorizon,
                format!(
                    "catalog_xmin {c}{age} is not the cluster's oldest horizon: {} holds {}, older; VACUUM of catalogs is held there first",
                    h.what, h.xid
                ),
            );
            f.xid = Some(h.xid);
            f
        }
        other => {
            let next = other
                .map(|h| format!("the next oldest is {} at {}", h.what, h.xid))
                .unwrap_or_else(|| "nothing else holds one".into());
            let mut f = Finding::new(
                FindingKind::CatalogHorizon,
                format!(
                    "catalog_xmin {c}{age} is the cluster's oldest xmin horizon: VACUUM cannot remove catalog rows deleted by xid {c} or later, in any database; {next}"
                ),
            );
            f.xid = Some(c);
            f
        }
    };
    if server.in_recovery {
        f.finding.push_str("; this server is a standby: VACUUM runs on the primary, where this catalog_xmin holds it only through hot_standby_feedback (without it the primary removes the rows and the slot is invalidated here, rows_removed)");
    }
    f.since = slot.inactive_since;
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::super::diagnose;
    use super::super::facts::samples::{backend, creating, running, server};
    use super::super::facts::Horizon;
    use super::super::facts::{SyncSkip, SyncSkipReason, SyncedCopy};
    use super::super::finding::samples::kinds;
    use super::super::health::health;
    use super::super::waits::wanted_xids;
    use super::*;
    use crate::include::snapbuild::SnapBuildState;
    use crate::include::xlogdefs::Lsn;

    #[test]
    fn created_slot_holders_candidates_and_health() {
        let mut s = creating();
        s.in_creation = false;
        s.confirmed_flush = Some(Lsn(0x1800));
        s.catalog_xmin = 600;
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[650], &[]))),
            oldest_txn: Some((650, Lsn(0x1100))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        assert_eq!(wanted_xids(&s, Some(&b), &server(18)), vec![650]);
        let holders = [Holder {
            xid: 650,
            kind: HolderKind::Backend(backend(9)),
        }];
        let f = diagnose(&s, Some(&b), &server(18), &holders);
        assert_eq!(
            kinds(&f),
            vec![
                "restart_lsn held",
                "catalog_xmin held",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        assert_eq!(f[0].lsn, Some(Lsn(0x1100)));
        assert!(f[1].finding.contains("age 400 xids"), "{}", f[1].finding);
        assert!(
            f[2].finding
                .contains("is the cluster's oldest xmin horizon")
                && f[2].finding.contains("nothing else holds one"),
            "{}",
            f[2].finding
        );
        assert_eq!(f[3].bytes, Some(0x800));
        assert_eq!(f[4].bytes, Some(0x1000));
        // A backend's older xmin holds the catalog horizon first.
        let mut srv = server(18);
        srv.horizons.push(Horizon {
            xid: 590,
            what: "pid 4 (client backend, xmin)".into(),
        });
        let f = diagnose(&s, Some(&b), &srv, &holders);
        assert_eq!(f[2].xid, Some(590));
        assert!(f[2]
            .finding
            .contains("is not the cluster's oldest horizon: pid 4"));
        // Nothing running, the consumer gone, a candidate waiting for confirmation.
        s.active_pid = None;
        s.candidate_restart_valid = Lsn(0x1c80);
        s.candidate_restart_lsn = Lsn(0x1c00);
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[], &[]))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        let f = diagnose(&s, Some(&b), &server(18), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "pending restart candidate",
                "no consumer",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        assert_eq!(f[0].bytes, Some(0xc00));
        s.active_pid = Some(5);
        s.candidate_restart_valid = Lsn(0);
        let f = diagnose(&s, Some(&b), &server(18), &[]);
        assert_eq!(kinds(&f).last(), Some(&"healthy"));
    }

    fn standby_server() -> ServerFacts {
        ServerFacts {
            in_recovery: true,
            ..server(18)
        }
    }

    /// Every LSN a finding prints or carries: none may be 0/0 (a value the server does
    /// not have is absent).
    fn assert_no_zero_lsn(f: &[Finding]) {
        for x in f {
            assert!(!x.finding.contains(" 0/0"), "{}", x.finding);
            assert_ne!(x.lsn, Some(Lsn(0)), "{x:?}");
        }
    }

    #[test]
    fn a_standby_judges_the_primarys_transactions_by_what_it_replayed() {
        let mut s = creating();
        s.in_creation = false;
        s.confirmed_flush = Some(Lsn(0x1800));
        s.catalog_xmin = 640;
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[650], &[]))),
            oldest_txn: Some((650, Lsn(0x1100))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        // No holder in the standby's pg_locks; its KnownAssignedXids list 650.
        let srv = ServerFacts {
            in_progress: vec![650],
            running: vec![650],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "restart_lsn held",
                "catalog_xmin held",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        for r in &f[..2] {
            assert!(
                r.finding.contains("running on the primary"),
                "{}",
                r.finding
            );
            assert!(!r.finding.contains("no longer running"), "{}", r.finding);
            let remedy = r.remedy.as_deref().unwrap();
            assert!(
                remedy.starts_with(
                    "on the primary, find its holder: SELECT l.pid, a.application_name"
                ),
                "{remedy}"
            );
            assert!(remedy.contains("'650'::xid"), "{remedy}");
            assert!(remedy.contains("confirm past that record"), "{remedy}");
            assert!(r.backend.is_none());
        }
        let h = health(&s, Some(&b), &srv, &[]);
        assert_eq!(h.oldest_blocking_pid, None);
        // Its end replayed: ended as far as the standby knows, no catalog_xmin row.
        let srv = ServerFacts {
            in_progress: vec![],
            running: vec![],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(kinds(&f)[..2], ["restart_lsn held", "catalog horizon"]);
        assert!(
            f[0].finding
                .contains("no longer running on the primary as far as this standby knows"),
            "{}",
            f[0].finding
        );
        assert!(f[0]
            .remedy
            .as_deref()
            .unwrap()
            .starts_with("SELECT pg_log_standby_snapshot() on the primary"));
    }

    fn temporary_copy(last_skip: Option<SyncSkip>) -> SlotFacts {
        SlotFacts {
            name: "f".into(),
            in_creation: false,
            active_pid: None,
            restart_lsn: Lsn(0x1000),
            confirmed_flush: None,
            catalog_xmin: 760,
            synced: Some(SyncedCopy {
                temporary: true,
                last_skip,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_copy_kept_temporary_says_why_in_the_servers_terms() {
        let skip = SyncSkip {
            at: 0,
            reason: SyncSkipReason::RemoteBehind {
                remote_restart_lsn: Lsn(0x1000),
                remote_catalog_xmin: 754,
                local_restart_lsn: Lsn(0x1000),
                local_catalog_xmin: 760,
            },
        };
        let s = temporary_copy(Some(skip));
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(761, &[754], &[]))),
            oldest_txn: Some((754, Lsn(0x1100))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        // 754 runs on the primary (and a subtransaction of it, 755); 762 began later.
        let srv = ServerFacts {
            running: vec![762, 754, 755],
            in_progress: vec![754, 755, 762],
            ..standby_server()
        };
        assert_eq!(wanted_xids(&s, Some(&b), &srv), vec![754, 755]);
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "sync pending",
                "sync pending",
                "sync pending",
                "catalog horizon",
                "retained WAL"
            ]
        );
        assert_no_zero_lsn(&f);
        assert!(
            f[0].finding.contains(
                "the remote slot needs WAL at LSN 0/1000 and catalog xmin 754, but the standby has LSN 0/1000 and catalog xmin 760 (its catalog_xmin 754 is older than 760)"
            ),
            "{}",
            f[0].finding
        );
        assert_eq!((f[0].lsn, f[0].xid), (Some(Lsn(0x1000)), Some(760)));
        assert!(f[0]
            .remedy
            .as_deref()
            .unwrap()
            .contains("WHERE slot_name = 'f'"));
        assert_eq!(f[1].xid, Some(754));
        assert!(
            f[1].finding.contains("running on the primary"),
            "{}",
            f[1].finding
        );
        assert!(f[1].remedy.as_deref().unwrap().contains("'754'::xid"));
        let h = health(&s, Some(&b), &srv, &[]);
        assert!(h.sync_pending);
        assert_eq!(h.waiting_xids, 2);
        assert_eq!(h.confirmed_flush_lag_bytes, None);
        assert_eq!(h.releasable_bytes, None);
        // 754 has ended here (the consumer on the primary has not confirmed yet): still
        // pending, never healthy.
        let srv = ServerFacts {
            running: vec![762],
            in_progress: vec![762],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec!["sync pending", "catalog horizon", "retained WAL"]
        );
        // Without the log line: the reserved positions, and that the remote ones are on
        // the primary.
        let f = diagnose(&temporary_copy(None), Some(&b), &srv, &[]);
        assert!(f[0]
            .finding
            .contains("at least 0/1000 and its catalog_xmin at least 760"));
        assert!(f[0]
            .finding
            .contains("the remote positions are on the primary"));
    }

    #[test]
    fn a_copy_advanced_without_a_consistent_snapshot_names_what_its_decoder_waits_for() {
        let mut s = temporary_copy(Some(SyncSkip {
            at: 0,
            reason: SyncSkipReason::NoConsistentSnapshot {
                restart_lsn: Lsn(0x1000),
            },
        }));
        s.confirmed_flush = Some(Lsn(0x1900));
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 800,
            last_running: Some((Lsn(0x1800), running(801, &[790], &[]))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        let srv = ServerFacts {
            running: vec![790],
            in_progress: vec![790],
            ..standby_server()
        };
        let f = diagnose(&s, Some(&b), &srv, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "sync pending",
                "waiting for primary transaction",
                "catalog horizon",
                "consumer lag",
                "retained WAL"
            ]
        );
        assert!(f[0]
            .finding
            .contains("could not build a consistent snapshot to decode WAL at LSN 0/1000"));
        assert!(
            f[0].finding.contains("in BUILDING_SNAPSHOT"),
            "{}",
            f[0].finding
        );
        assert!(
            f[1].finding
                .starts_with("the copy's decoder waits for xid 790"),
            "{}",
            f[1].finding
        );
        assert_eq!(health(&s, Some(&b), &srv, &[]).waiting_xids, 1);
    }

    #[test]
    fn a_persistent_copy_is_synchronized_and_has_no_consumer_here() {
        let mut s = temporary_copy(None);
        s.synced = Some(SyncedCopy {
            temporary: false,
            last_skip: None,
        });
        s.confirmed_flush = Some(Lsn(0x1800));
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[], &[]))),
            replayed_to: Lsn(0x2000),
            forecasts: vec![],
            ..Default::default()
        };
        let f = diagnose(&s, Some(&b), &standby_server(), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "synchronized",
                "catalog horizon",
                "consumer lag",
                "retained WAL",
                "healthy"
            ]
        );
        assert!(f[2]
            .finding
            .contains("the primary slot's, as last synchronized"));
        assert!(!health(&s, Some(&b), &standby_server(), &[]).sync_pending);
    }

    #[test]
    fn a_slot_without_confirmed_flush_shows_no_lag_and_no_0_0() {
        let mut s = creating();
        s.in_creation = false;
        s.confirmed_flush = None;
        s.active_pid = None;
        s.candidate_restart_valid = Lsn(0x1c80);
        s.candidate_restart_lsn = Lsn(0x1c00);
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(0x1c00), running(990, &[], &[]))),
            replayed_to: Lsn(0x2000),
            ..Default::default()
        };
        let f = diagnose(&s, Some(&b), &server(18), &[]);
        assert!(!kinds(&f).contains(&"consumer lag"), "{:?}", kinds(&f));
        assert_no_zero_lsn(&f);
        assert_eq!(
            health(&s, Some(&b), &server(18), &[]).confirmed_flush_lag_bytes,
            None
        );
    }

    #[test]
    fn a_held_slot_gets_a_wal_loss_forecast_naming_its_holder() {
        const SEG: u64 = 16 << 20;
        let mut s = creating();
        s.in_creation = false;
        s.restart_lsn = Lsn(5 * SEG + 0x28);
        s.confirmed_flush = Some(Lsn(5 * SEG + 0x100));
        s.catalog_xmin = 640;
        let mut rate = wal_loss::WalRate::default();
        rate.note(Lsn(6 * SEG), 100_000_000);
        let b = BuilderFacts {
            state: Some(SnapBuildState::Consistent),
            last_running: Some((Lsn(5 * SEG + 0x200), running(990, &[650], &[]))),
            oldest_txn: Some((650, Lsn(5 * SEG + 0x80))),
            replayed_to: Lsn(7 * SEG),
            wal_rate: rate,
            ..Default::default()
        };
        let keep = wal_loss::KeepSettings {
            max_slot_wal_keep_size_mb: 64,
            wal_keep_size_mb: 0,
            wal_segment_size: SEG,
            idle_timeout_s: None,
            summarize_wal: false,
        };
        let srv = ServerFacts {
            flush_lsn: Lsn(7 * SEG),
            now: 110_000_000,
            running: vec![650],
            in_progress: vec![650],
            keep: Some(keep),
            ..server(17)
        };
        let holders = [Holder {
            xid: 650,
            kind: HolderKind::Backend(backend(42)),
        }];
        let f = diagnose(&s, Some(&b), &srv, &holders);
        assert_eq!(kinds(&f)[..2], ["wal loss forecast", "restart_lsn held"]);
        let w = &f[0];
        assert_eq!(w.lsn, Some(Lsn(10 * SEG)));
        assert_eq!(w.since, Some(140_000_000));
        assert_eq!(w.bytes, Some(3 * SEG as i64));
        assert_eq!(
            (w.xid, w.backend.as_ref().map(|b| b.pid)),
            (Some(650), Some(42))
        );
        assert!(
            w.finding.contains("(wal_removed)") && w.finding.contains("xid 650"),
            "{}",
            w.finding
        );
        assert!(w
            .remedy
            .as_deref()
            .unwrap()
            .contains("pg_terminate_backend(42)"));
        let h = health(&s, Some(&b), &srv, &holders);
        assert_eq!(h.wal_loss.lsn, Some(Lsn(10 * SEG)));
        assert_eq!(h.wal_loss.in_s, Some(30.0));
        // A consumer that moves restart_lsn on: no row, the health numbers stay.
        s.active_pid = Some(9);
        let free = BuilderFacts {
            oldest_txn: None,
            ..b.clone()
        };
        let f = diagnose(&s, Some(&free), &srv, &[]);
        assert!(!kinds(&f).contains(&"wal loss forecast"), "{:?}", kinds(&f));
        let h = health(&s, Some(&free), &srv, &[]);
        assert!(h.consumer_attached);
        assert_eq!(h.wal_loss.in_s, Some(30.0));
    }
}
