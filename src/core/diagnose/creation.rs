//! The findings of a slot being created: the phase its snapshot builder is in and what
//! it needs to reach the next one, each transaction it waits for with its holder, and,
//! when none of them still runs, that only a newer RUNNING_XACTS record is missing.
//!
//! Not a PostgreSQL file. It explains snapbuild.c's SnapBuildFindSnapshot (START,
//! BUILDING_SNAPSHOT, FULL_SNAPSHOT, CONSISTENT) as logical.c's
//! DecodingContextFindStartpoint runs it while a slot is created.

use super::facts::{bytes_between, BuilderFacts, Holder, ServerFacts, SlotFacts};
use super::finding::{Finding, FindingKind};
use super::remedy::wal_remedy;
use super::waits::{wait_finding, waited_xids};
use crate::include::snapbuild::SnapBuildState;
use crate::include::transam;

pub(super) fn creation_findings(
    slot: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &ServerFacts,
    holders: &[Holder],
    out: &mut Vec<Finding>,
) {
    let Some(b) = builder else {
        out.push(Finding::new(
            FindingKind::CreationWaiting,
            format!(
                "slot \"{}\" is being created; its WAL could not be replayed",
                slot.name
            ),
        ));
        return;
    };
    let last = b.last_running.as_ref();
    let last_lsn = last.map(|(l, _)| *l);
    let waited = waited_xids(slot, b);
    let state = b.state.unwrap_or(SnapBuildState::Start);
    let by = slot
        .active_pid
        .map(|p| format!(" by pid {p}"))
        .unwrap_or_default();
    let creator_wait = slot
        .creator_waits_on
        .map(|x| format!("; the creating process waits for xid {x} now"))
        .unwrap_or_default();
    let summary = match (state, last) {
        (SnapBuildState::Start, None) => format!(
            "slot \"{}\" is being created{by}: no RUNNING_XACTS record has been read since restart_lsn {}; the snapshot builder stays in START until one is",
            slot.name, slot.restart_lsn
        ),
        (SnapBuildState::Start, Some((l, r))) => format!(
            "slot \"{}\" is being created{by}: the snapshot builder is in START: the last RUNNING_XACTS ({l}) has oldest running xid {}, older than the slot's xmin horizon {}; it waits for {} transaction(s) older than {} to end and a newer RUNNING_XACTS{creator_wait}",
            slot.name, r.oldest_running_xid, b.initial_xmin_horizon, waited.len(), b.initial_xmin_horizon
        ),
        (s @ (SnapBuildState::BuildingSnapshot | SnapBuildState::FullSnapshot), _) => {
            let next = if s == SnapBuildState::BuildingSnapshot {
                "FULL_SNAPSHOT"
            } else {
                "CONSISTENT"
            };
            let since = b
                .phase_since
                .map(|l| format!(" since {l}"))
                .unwrap_or_default();
            let at = last_lsn.map(|l| format!(" at the last RUNNING_XACTS ({l})")).unwrap_or_default();
            format!(
                "slot \"{}\" is being created{by}: the snapshot builder is in {}{since}; to reach {next} every transaction older than {} must end and a newer RUNNING_XACTS show it: {} of them were running{at}{creator_wait}",
                slot.name,
                s.c_name(),
                b.next_phase_at,
                waited.len()
            )
        }
        (SnapBuildState::Consistent, _) => format!(
            "slot \"{}\" is being created{by}: the replay to the flush position is CONSISTENT already; the creating process is finishing",
            slot.name
        ),
    };
    let mut f = Finding::new(FindingKind::CreationWaiting, summary);
    f.lsn = last_lsn.or(Some(slot.restart_lsn));
    f.xid = transam::is_valid(b.next_phase_at).then_some(b.next_phase_at);
    out.push(f);
    if state == SnapBuildState::Consistent {
        return;
    }
    let mut live = 0;
    for x in &waited {
        let (f, running) = wait_finding(
            "the creation",
            *x,
            holders,
            server,
            last_lsn,
            slot.restart_lsn,
            "",
        );
        live += usize::from(running);
        out.push(f);
    }
    if live == 0 {
        let why = match last {
            None => "no RUNNING_XACTS record has been read yet".to_string(),
            Some((l, _)) if waited.is_empty() => format!(
                "no transaction it waits for was running at the last RUNNING_XACTS ({l}); it needs a newer one"
            ),
            Some((l, _)) => format!(
                "every transaction it waits for has ended, but the last RUNNING_XACTS ({l}) still lists them; it needs a newer one"
            ),
        };
        let age = match (last, b.last_running_written_by) {
            (Some(_), Some(t)) => format!(
                "; the last RUNNING_XACTS was written at least {:.1} s ago",
                (server.now - t).max(0) as f64 / 1e6
            ),
            _ => String::new(),
        };
        let standby = if server.in_recovery {
            format!(
                "; this server is a standby: RUNNING_XACTS records come only from the primary (replayed up to {}, {} bytes after the last one read)",
                server.flush_lsn,
                bytes_between(last_lsn.unwrap_or(slot.restart_lsn), server.flush_lsn)
            )
        } else {
            String::new()
        };
        let mut f = Finding::new(
            FindingKind::WaitingForWal,
            format!("the creation waits for WAL: {why}{age}{standby}"),
        );
        f.since = last.and(b.last_running_written_by);
        f.lsn = last_lsn.or(Some(slot.restart_lsn));
        f.bytes = Some(bytes_between(b.replayed_to, server.flush_lsn));
        f.remedy = Some(wal_remedy(server));
        out.push(f);
    }
}

#[cfg(test)]
mod tests {
    use super::super::diagnose;
    use super::super::facts::samples::{backend, creating, running, server};
    use super::super::facts::{HolderKind, Prepared};
    use super::super::finding::samples::kinds;
    use super::*;
    use crate::include::xlogdefs::Lsn;

    #[test]
    fn building_waits_for_top_level_xids_before_next_phase_at() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 800,
            initial_xmin_horizon: 700,
            last_running: Some((Lsn(0x1800), running(805, &[750, 790, 801], &[760]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        // 801 began after next_phase_at; 760 is a subxid (its top level is waited for).
        assert_eq!(waited_xids(&creating(), &b), vec![750, 790]);
        let holders = [
            Holder {
                xid: 750,
                kind: HolderKind::Backend(backend(42)),
            },
            Holder {
                xid: 790,
                kind: HolderKind::Prepared(Prepared {
                    gid: "g'1".into(),
                    ..Default::default()
                }),
            },
        ];
        let f = diagnose(&creating(), Some(&b), &server(18), &holders);
        assert_eq!(
            kinds(&f),
            vec![
                "creation waiting",
                "waiting for transaction",
                "waiting for prepared transaction"
            ]
        );
        assert!(
            f[0].finding.contains("BUILDING_SNAPSHOT"),
            "{}",
            f[0].finding
        );
        assert!(f[0].finding.contains("to reach FULL_SNAPSHOT"));
        assert_eq!(f[1].backend.as_ref().unwrap().pid, 42);
        assert_eq!(f[1].xid, Some(750));
        assert!(f[1]
            .remedy
            .as_ref()
            .unwrap()
            .contains("pg_terminate_backend(42)"));
        assert_eq!(
            f[2].remedy.as_deref(),
            Some("COMMIT PREPARED 'g''1' or ROLLBACK PREPARED 'g''1'")
        );
    }

    #[test]
    fn on_a_standby_unheld_xids_are_the_primarys() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::BuildingSnapshot),
            next_phase_at: 900,
            last_running: Some((Lsn(0x1800), running(905, &[850], &[]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        // The standby knows 850 in progress (KnownAssignedXids): the primary's.
        let standby = ServerFacts {
            in_recovery: true,
            in_progress: vec![850],
            ..server(16)
        };
        let f = diagnose(&creating(), Some(&b), &standby, &[]);
        assert_eq!(
            kinds(&f),
            vec!["creation waiting", "waiting for primary transaction"]
        );
        assert_eq!(f[1].xid, Some(850));
        assert!(
            f[1].finding.contains("running on the primary"),
            "{}",
            f[1].finding
        );
        let remedy = f[1].remedy.as_deref().unwrap();
        assert!(remedy.contains("a.application_name"), "{remedy}");
        assert!(remedy.contains("'850'::xid"), "{remedy}");
        assert!(
            remedy.contains("SELECT pg_log_standby_snapshot() on the primary"),
            "{remedy}"
        );
        // Its end replayed here: ended, and only a newer RUNNING_XACTS is missing.
        let ended = ServerFacts {
            in_progress: vec![],
            ..standby.clone()
        };
        let f = diagnose(&creating(), Some(&b), &ended, &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "creation waiting",
                "waiting for ended transaction",
                "waiting for WAL"
            ]
        );
        assert!(
            f[1].finding.contains("has ended on the primary"),
            "{}",
            f[1].finding
        );
        // Nothing to wait for but the primary's next RUNNING_XACTS.
        let b = BuilderFacts {
            state: Some(SnapBuildState::Start),
            last_running: None,
            replayed_to: Lsn(0x1000),
            ..Default::default()
        };
        let f = diagnose(&creating(), Some(&b), &standby, &[]);
        assert_eq!(kinds(&f), vec!["creation waiting", "waiting for WAL"]);
        assert!(
            f[1].finding.contains("this server is a standby"),
            "{}",
            f[1].finding
        );
        assert!(f[1]
            .remedy
            .as_deref()
            .unwrap()
            .starts_with("SELECT pg_log_standby_snapshot() on the primary"));
    }

    #[test]
    fn ended_xids_mean_waiting_for_wal_with_the_majors_remedy() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::FullSnapshot),
            next_phase_at: 900,
            last_running: Some((Lsn(0x1800), running(905, &[850], &[]))),
            replayed_to: Lsn(0x1900),
            ..Default::default()
        };
        let f = diagnose(&creating(), Some(&b), &server(15), &[]);
        assert_eq!(
            kinds(&f),
            vec![
                "creation waiting",
                "waiting for ended transaction",
                "waiting for WAL"
            ]
        );
        assert!(f[0].finding.contains("to reach CONSISTENT"));
        assert!(f[2].remedy.as_ref().unwrap().starts_with("CHECKPOINT"));
        assert_eq!(f[2].bytes, Some(0x2000 - 0x1900));
        let f = diagnose(&creating(), Some(&b), &server(16), &[]);
        assert!(f[2]
            .remedy
            .as_ref()
            .unwrap()
            .starts_with("SELECT pg_log_standby_snapshot()"));
    }

    #[test]
    fn start_without_running_xacts_waits_for_wal() {
        let b = BuilderFacts {
            state: Some(SnapBuildState::Start),
            replayed_to: Lsn(0x1000),
            ..Default::default()
        };
        let f = diagnose(&creating(), Some(&b), &server(17), &[]);
        assert_eq!(kinds(&f), vec!["creation waiting", "waiting for WAL"]);
        assert!(f[0]
            .finding
            .contains("no RUNNING_XACTS record has been read"));
    }
}
