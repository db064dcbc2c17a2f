//! The inputs of "why is my slot stuck?" ([`snapbuild_core::diagnose`]): the slot from
//! shared memory and pg_replication_slots, the replay of its snapshot builder from
//! restart_lsn to the flush position (as the creating or a restarted decoder runs it),
//! and the holders of the transactions that replay points at.

use pgrx::prelude::*;
use snapbuild_core::diagnose::{self, BuilderFacts, Finding, ServerFacts, SlotFacts};
use snapbuild_core::Lsn;

use crate::adapter::slots::SlotCopy;
use crate::adapter::{activity, server_version, wal};
use crate::context::input::for_slot_copy;
use crate::context::DecodingContext;

/// Reads `ctx` to the end of flushed WAL, noting in `phase_since` the record that last
/// moved the builder's state. Checks for interrupts every 1024 records; a broken `.snap`
/// file ends the replay where it is.
fn drain(ctx: &mut DecodingContext, phase_since: &mut Option<Lsn>) {
    let mut n: u64 = 0;
    while let Some(row) = ctx.next_row() {
        n += 1;
        if n.is_multiple_of(1024) {
            pgrx::check_for_interrupts!();
        }
        match row {
            Ok(None) => {}
            Ok(Some(row)) => {
                if row.state != row.state_before {
                    *phase_since = Some(row.lsn);
                }
            }
            Err(_) => break,
        }
    }
}

/// What the replay in `ctx` reached, with the forecasts for the transactions holding
/// the slot's restart_lsn and catalog_xmin ([`diagnose::forecast`], against the
/// transactions running on the server now).
fn builder_facts(
    ctx: &DecodingContext,
    phase_since: Option<Lsn>,
    slot: &SlotCopy,
    server: &ServerFacts,
    running_now: &[snapbuild_core::TransactionId],
) -> BuilderFacts {
    let b = &ctx.replay.builder;
    let last_running = ctx
        .replay
        .last_running_xacts
        .as_ref()
        .map(|(l, _, r)| (*l, r.clone()));
    let mut facts = BuilderFacts {
        state: Some(b.state),
        next_phase_at: b.next_phase_at,
        initial_xmin_horizon: b.initial_xmin_horizon,
        phase_since,
        last_running_written_by: last_running
            .as_ref()
            .and_then(|(l, _)| wal::segment_written_at(*l)),
        last_running,
        oldest_txn: b.reorder.oldest_txn(),
        oldest_base_snapshot: b.reorder.oldest_base_snapshot(),
        replayed_to: ctx.last_end,
        forecasts: Vec::new(),
    };
    if !slot.in_creation() {
        let live: Vec<_> = running_now.to_vec();
        for x in diagnose::holding_xids(&facts) {
            let ended = !live.contains(&x);
            if let Some(f) =
                diagnose::forecast(b, &slot.model(), x, ended, running_now, server.next_xid)
            {
                facts.forecasts.push(f);
            }
        }
    }
    facts
}

/// Replays `slot` from its restart_lsn to the end of flushed WAL and reports where its
/// snapshot builder stands. `None` when the WAL at restart_lsn is gone.
pub fn replay_slot(
    slot: &SlotCopy,
    server: &ServerFacts,
    running_now: &[u32],
) -> Option<BuilderFacts> {
    let input = for_slot_copy(slot.clone(), false);
    let mut ctx =
        DecodingContext::try_start_tolerant(input, unsafe { pg_sys::CurrentMemoryContext })?;
    let mut phase_since = None;
    drain(&mut ctx, &mut phase_since);
    Some(builder_facts(&ctx, phase_since, slot, server, running_now))
}

/// The findings for one logical slot (see [`diagnose::diagnose`]), or `None` when the
/// slot vanished from pg_replication_slots meanwhile. An invalidated slot (or one whose
/// WAL is lost) is not replayed.
pub fn diagnose_slot(slot: &SlotCopy) -> Option<Vec<Finding>> {
    let view = activity::slot_view(&slot.name)?;
    let mut facts = slot_facts(slot, view);
    let invalid = facts.invalidation_reason.is_some()
        || facts.wal_status.as_deref() == Some("lost")
        || slot.restart_lsn == 0;
    if invalid && slot.restart_lsn != 0 {
        facts.invalidated_at = invalidating_record(slot);
    }
    let (mut server, running_now) = server_facts(&slot.name);
    let builder = if invalid {
        None
    } else {
        replay_slot(slot, &server, &running_now)
    };
    // The replay read to the flush position of its own time.
    server.flush_lsn = wal::flush_lsn();
    let holders = activity::holders(&diagnose::wanted_xids(&facts, builder.as_ref()));
    Some(diagnose::diagnose(
        &facts,
        builder.as_ref(),
        &server,
        &holders,
    ))
}

/// The record whose redo invalidated `slot` on a standby (rows_removed,
/// wal_level_insufficient), found by a replay from its restart_lsn
/// ([`DecodingContext::watch_invalidation`]); `None` for other causes, or when its WAL is
/// gone or no record read invalidates it.
fn invalidating_record(slot: &SlotCopy) -> Option<(Lsn, String)> {
    let input = for_slot_copy(slot.clone(), false);
    let mut ctx =
        DecodingContext::try_start_tolerant(input, unsafe { pg_sys::CurrentMemoryContext })?;
    ctx.watch_invalidation();
    ctx.invalidation.as_ref()?;
    while ctx.next_row().is_some() {}
    ctx.invalidation.and_then(|w| w.found)
}

/// The slot's facts: shared memory's copy, pg_replication_slots' view of it, and (while
/// it is created) the xid its creating process waits for in pg_locks.
fn slot_facts(slot: &SlotCopy, view: activity::SlotView) -> SlotFacts {
    let mut facts = SlotFacts {
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
        invalidated_at: None,
        wal_status: view.wal_status,
        conflicting: view.conflicting,
        inactive_since: view.inactive_since,
        creator_waits_on: None,
    };
    if facts.in_creation {
        facts.creator_waits_on = facts.active_pid.and_then(activity::waits_on);
    }
    facts
}

/// The server around slot `slot`: flush position, next xid, standby or not, the time,
/// the other xmin horizons; and the top-level xids running now.
fn server_facts(slot: &str) -> (ServerFacts, Vec<u32>) {
    let now = activity::server_now();
    let facts = ServerFacts {
        version: server_version(),
        flush_lsn: wal::flush_lsn(),
        next_xid: now.next_xid,
        in_recovery: now.in_recovery,
        now: now.now,
        horizons: activity::horizons(slot),
    };
    (facts, now.running)
}

/// A slot's replay kept between calls in this backend (`snapbuild_slot_health`), so that
/// a repeated scrape reads only the WAL flushed since the last one.
struct CachedReplay {
    /// What the replay was started with: restart_lsn, in creation, and the initial xmin
    /// horizon while in creation. Another key means another decoder: start afresh.
    key: (u64, bool, u32),
    ctx: Option<DecodingContext>,
    /// The memory context the WAL reader lives in (a child of TopMemoryContext).
    mcx: pg_sys::MemoryContext,
    phase_since: Option<Lsn>,
}

impl Drop for CachedReplay {
    fn drop(&mut self) {
        // The reader is freed in its context before the context goes.
        self.ctx.take();
        unsafe { pg_sys::MemoryContextDelete(self.mcx) };
    }
}

thread_local! {
    static REPLAYS: std::cell::RefCell<std::collections::HashMap<String, CachedReplay>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn cache_key(slot: &SlotCopy) -> (u64, bool, u32) {
    let creating = slot.in_creation();
    (
        slot.restart_lsn,
        creating,
        if creating { slot.catalog_xmin } else { 0 },
    )
}

/// [`replay_slot`] resumed from this backend's last call for the same slot when the slot
/// still has the same restart_lsn (and, while it is created, the same xmin horizon):
/// only WAL flushed since is read. Otherwise the replay starts at restart_lsn again.
/// Returns the facts and the WAL bytes read by this call. Slots no longer listed in
/// `live` are forgotten.
pub fn replay_slot_cached(
    slot: &SlotCopy,
    live: &[String],
    server: &ServerFacts,
    running_now: &[u32],
) -> Option<(BuilderFacts, u64)> {
    let key = cache_key(slot);
    let mut entry = REPLAYS.with(|r| {
        let mut r = r.borrow_mut();
        r.retain(|name, _| live.contains(name));
        r.remove(&slot.name)
    });
    if entry.as_ref().is_some_and(|e| e.key != key) {
        entry = None;
    }
    let mut entry = match entry {
        Some(mut e) => {
            if let Some(ctx) = e.ctx.as_mut() {
                ctx.resume();
            }
            e
        }
        None => {
            let mcx = unsafe {
                pg_sys::AllocSetContextCreateExtended(
                    pg_sys::TopMemoryContext,
                    c"pg_snapbuild slot replay".as_ptr(),
                    0,
                    8 * 1024,
                    8 * 1024 * 1024,
                )
            };
            // Dropped (and its context deleted) if starting fails.
            let mut e = CachedReplay {
                key,
                ctx: None,
                mcx,
                phase_since: None,
            };
            e.ctx = DecodingContext::try_start_tolerant(for_slot_copy(slot.clone(), false), mcx);
            e
        }
    };
    let ctx = entry.ctx.as_mut()?;
    let from = ctx.last_end;
    drain(ctx, &mut entry.phase_since);
    let ctx = entry.ctx.as_ref()?;
    let facts = builder_facts(ctx, entry.phase_since, slot, server, running_now);
    let read = ctx.last_end.0.saturating_sub(from.0);
    REPLAYS.with(|r| r.borrow_mut().insert(slot.name.clone(), entry));
    Some((facts, read))
}

/// The health numbers of one logical slot (see [`diagnose::health`]) and the WAL bytes
/// this call replayed, or `None` when the slot vanished from pg_replication_slots.
pub fn slot_health(slot: &SlotCopy, live: &[String]) -> Option<(diagnose::Health, u64)> {
    let view = activity::slot_view(&slot.name)?;
    let facts = slot_facts(slot, view);
    let invalid = facts.invalidation_reason.is_some()
        || facts.wal_status.as_deref() == Some("lost")
        || slot.restart_lsn == 0;
    let (mut server, running_now) = server_facts(&slot.name);
    let (builder, read) = if invalid {
        // Its WAL may be gone: let go of a replay kept from before.
        REPLAYS.with(|r| r.borrow_mut().remove(&slot.name));
        (None, 0)
    } else {
        match replay_slot_cached(slot, live, &server, &running_now) {
            Some((b, r)) => (Some(b), r),
            None => (None, 0),
        }
    };
    server.flush_lsn = wal::flush_lsn();
    let holders = activity::holders(&diagnose::wanted_xids(&facts, builder.as_ref()));
    Some((
        diagnose::health(&facts, builder.as_ref(), &server, &holders),
        read,
    ))
}
