//! The inputs of "why is my slot stuck?" ([`snapbuild_core::diagnose`]): the slot from
//! shared memory and pg_replication_slots, the replay of its snapshot builder from
//! restart_lsn to the flush position (as the creating or a restarted decoder runs it),
//! and the holders of the transactions that replay points at.

use pgrx::prelude::*;
use snapbuild_core::diagnose::{self, BuilderFacts, Finding, ServerFacts, SlotFacts};
use snapbuild_core::Lsn;

use crate::adapter::slots::SlotCopy;
use crate::adapter::{activity, server_major, wal};
use crate::context::input::for_slot_copy;
use crate::context::DecodingContext;

/// Replays `slot` from its restart_lsn to the end of flushed WAL and reports where its
/// snapshot builder stands. `None` when the WAL at restart_lsn is gone. Checks for
/// interrupts while it reads; a broken `.snap` file ends the replay where it is.
pub fn replay_slot(slot: &SlotCopy) -> Option<BuilderFacts> {
    let input = for_slot_copy(slot.clone(), false);
    let mut ctx =
        DecodingContext::try_start_tolerant(input, unsafe { pg_sys::CurrentMemoryContext })?;
    let mut phase_since = None;
    let mut n: u64 = 0;
    while let Some(row) = ctx.next_row() {
        n += 1;
        if n % 1024 == 0 {
            pgrx::check_for_interrupts!();
        }
        match row {
            Ok(row) => {
                if row.state != row.state_before {
                    phase_since = Some(row.lsn);
                }
            }
            Err(_) => break,
        }
    }
    let b = &ctx.replay.builder;
    Some(BuilderFacts {
        state: Some(b.state),
        next_phase_at: b.next_phase_at,
        initial_xmin_horizon: b.initial_xmin_horizon,
        phase_since,
        last_running: ctx
            .replay
            .last_running_xacts
            .as_ref()
            .map(|(l, _, r)| (*l, r.clone())),
        oldest_txn: b.reorder.oldest_txn(),
        oldest_base_snapshot: b.reorder.oldest_base_snapshot(),
        replayed_to: ctx.last_end,
    })
}

/// The findings for one logical slot (see [`diagnose::diagnose`]), or `None` when the
/// slot vanished from pg_replication_slots meanwhile. An invalidated slot (or one whose
/// WAL is lost) is not replayed.
pub fn diagnose_slot(slot: &SlotCopy) -> Option<Vec<Finding>> {
    let view = activity::slot_view(&slot.name)?;
    let facts = SlotFacts {
        name: slot.name.clone(),
        in_creation: slot.in_creation(),
        active_pid: (slot.active_pid != 0).then_some(slot.active_pid),
        restart_lsn: Lsn(slot.restart_lsn),
        confirmed_flush: Lsn(slot.confirmed_flush),
        catalog_xmin: slot.catalog_xmin,
        candidate_restart_valid: Lsn(slot.candidate_restart_valid),
        candidate_restart_lsn: Lsn(slot.candidate_restart_lsn),
        candidate_catalog_xmin: slot.candidate_catalog_xmin,
        candidate_xmin_lsn: Lsn(slot.candidate_xmin_lsn),
        invalidation_reason: slot.invalidation_reason.clone(),
        wal_status: view.wal_status,
        conflicting: view.conflicting,
        inactive_since: view.inactive_since,
        creator_waits_on: None,
    };
    let mut facts = facts;
    if facts.in_creation {
        facts.creator_waits_on = facts.active_pid.and_then(activity::waits_on);
    }
    let invalid = facts.invalidation_reason.is_some()
        || facts.wal_status.as_deref() == Some("lost")
        || slot.restart_lsn == 0;
    let builder = if invalid { None } else { replay_slot(slot) };
    let (next_xid, in_recovery) = activity::next_xid_and_recovery();
    let server = ServerFacts {
        major: server_major(),
        flush_lsn: wal::flush_lsn(),
        next_xid,
        in_recovery,
    };
    let holders = activity::holders(&diagnose::wanted_xids(&facts, builder.as_ref()));
    Some(diagnose::diagnose(
        &facts,
        builder.as_ref(),
        &server,
        &holders,
    ))
}
