//! The inputs of "why is my slot stuck?" ([`snapbuild_core::diagnose`]): the slot from
//! shared memory and pg_replication_slots, the replay of its snapshot builder from
//! restart_lsn to the flush position (as the creating or a restarted decoder runs it),
//! and the holders of the transactions that replay points at.

use pgrx::prelude::*;
use snapbuild_core::diagnose::{
    self, BuilderFacts, Finding, ServerFacts, SlotFacts, SyncSkip, SyncSkipReason, SyncedCopy,
};
use snapbuild_core::server_log::LogEvent;
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
///
/// On a standby, `server.running` becomes what the standby knows of the primary's
/// running transactions: every xid its snapshot lists, the last RUNNING_XACTS replayed
/// lists, or the replay holds, that TransactionIdIsInProgress still finds in its
/// KnownAssignedXids (a snapshot leaves out xids past its xmax). No forecast is made for
/// a copy the slot synchronization keeps (its positions come from the primary).
fn builder_facts(
    ctx: &DecodingContext,
    phase_since: Option<Lsn>,
    slot: &SlotCopy,
    server: &mut ServerFacts,
) -> BuilderFacts {
    let b = &ctx.replay.builder;
    let last_running = ctx
        .replay
        .last_running_xacts
        .as_ref()
        .map(|(l, _, r)| (*l, r.clone()));
    if server.in_recovery {
        let mut candidates = std::mem::take(&mut server.running);
        if let Some((_, r)) = &last_running {
            candidates.extend_from_slice(&r.xids);
        }
        candidates.extend(b.reorder.xids());
        candidates.sort_unstable();
        candidates.dedup();
        server.running = activity::in_progress(&candidates);
    }
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
    let copy = server.in_recovery && slot.synced;
    if !slot.in_creation() && !copy {
        for x in diagnose::holding_xids(&facts) {
            let ended = !server.running.contains(&x);
            if let Some(f) =
                diagnose::forecast(b, &slot.model(), x, ended, &server.running, server.next_xid)
            {
                facts.forecasts.push(f);
            }
        }
    }
    facts
}

/// Replays `slot` from its restart_lsn to the end of flushed WAL and reports where its
/// snapshot builder stands. `None` when the WAL at restart_lsn is gone.
pub fn replay_slot(slot: &SlotCopy, server: &mut ServerFacts) -> Option<BuilderFacts> {
    let input = for_slot_copy(slot.clone(), false);
    let mut ctx =
        DecodingContext::try_start_tolerant(input, unsafe { pg_sys::CurrentMemoryContext })?;
    let mut phase_since = None;
    drain(&mut ctx, &mut phase_since);
    Some(builder_facts(&ctx, phase_since, slot, server))
}

/// The findings for one logical slot (see [`diagnose::diagnose`]), or `None` when the
/// slot vanished from pg_replication_slots meanwhile. An invalidated slot (or one whose
/// WAL is lost) is not replayed.
pub fn diagnose_slot(slot: &SlotCopy) -> Option<Vec<Finding>> {
    let view = activity::slot_view(&slot.name)?;
    let mut server = server_facts(&slot.name);
    let mut facts = slot_facts(slot, view, &server);
    let invalid = facts.invalidation_reason.is_some()
        || facts.wal_status.as_deref() == Some("lost")
        || slot.restart_lsn == 0;
    if invalid && slot.restart_lsn != 0 {
        facts.invalidated_at = invalidating_record(slot);
    }
    if let Some(c) = facts.synced.as_mut().filter(|c| c.temporary) {
        c.last_skip = last_sync_skip(&slot.name);
    }
    let builder = if invalid {
        None
    } else {
        replay_slot(slot, &mut server)
    };
    Some(judge(
        &facts,
        builder.as_ref(),
        &mut server,
        diagnose::diagnose,
    ))
}

/// The findings (or health) of a slot once replayed: the flush position the replay read
/// to, the holders of the xids it judges and which of them the server knows in
/// progress, then `f`.
fn judge<T>(
    facts: &SlotFacts,
    builder: Option<&BuilderFacts>,
    server: &mut ServerFacts,
    f: fn(&SlotFacts, Option<&BuilderFacts>, &ServerFacts, &[diagnose::Holder]) -> T,
) -> T {
    // The replay read to the flush position of its own time.
    server.flush_lsn = wal::flush_lsn();
    let wanted = diagnose::wanted_xids(facts, builder, server);
    let holders = activity::holders(&wanted);
    server.in_progress = activity::in_progress(&wanted);
    f(facts, builder, server, &holders)
}

/// The slot synchronization's last `could not synchronize replication slot` line about
/// `slot` in the server log (its time and DETAIL), if the log is readable and has one.
fn last_sync_skip(slot: &str) -> Option<SyncSkip> {
    let (_, events) = crate::adapter::server_log::events(|| {
        pgrx::check_for_interrupts!();
    })
    .ok()?;
    events.iter().rev().find_map(|e| match e {
        LogEvent::SlotSyncSkipped(l) if l.slot == slot => Some(SyncSkip {
            // milliseconds since 1970 to microseconds since 2000-01-01
            at: (l.at_ms - 946_684_800_000).saturating_mul(1000),
            reason: SyncSkipReason::from_detail(l.detail.as_deref()?)?,
        }),
        _ => None,
    })
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

/// The slot's facts: shared memory's copy, pg_replication_slots' view of it, (while it
/// is created) the xid its creating process waits for in pg_locks, and on a standby
/// whether it is a copy kept by the slot synchronization (its log line is added by the
/// caller that wants it).
fn slot_facts(slot: &SlotCopy, view: activity::SlotView, server: &ServerFacts) -> SlotFacts {
    let mut facts = SlotFacts {
        name: slot.name.clone(),
        in_creation: slot.in_creation(),
        active_pid: (slot.active_pid != 0).then_some(slot.active_pid),
        restart_lsn: Lsn(slot.restart_lsn),
        confirmed_flush: (slot.confirmed_flush != 0).then_some(Lsn(slot.confirmed_flush)),
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
        // After a promotion a copy is an ordinary slot.
        synced: (slot.synced && server.in_recovery).then(|| SyncedCopy {
            temporary: slot.persistency != "persistent",
            last_skip: None,
        }),
    };
    if facts.in_creation {
        facts.creator_waits_on = facts.active_pid.and_then(activity::waits_on);
    }
    facts
}

/// The server around slot `slot`: flush position, next xid, standby or not, the time,
/// the other xmin horizons, and the xids running now (pg_current_snapshot's xip on a
/// primary; on a standby its snapshot's, which [`builder_facts`] completes).
fn server_facts(slot: &str) -> ServerFacts {
    let now = activity::server_now();
    let running = if now.in_recovery {
        activity::standby_snapshot_xids()
    } else {
        now.running
    };
    ServerFacts {
        version: server_version(),
        flush_lsn: wal::flush_lsn(),
        next_xid: now.next_xid,
        in_recovery: now.in_recovery,
        now: now.now,
        horizons: activity::horizons(slot),
        running,
        in_progress: Vec::new(),
    }
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
    server: &mut ServerFacts,
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
    let facts = builder_facts(ctx, entry.phase_since, slot, server);
    let read = ctx.last_end.0.saturating_sub(from.0);
    REPLAYS.with(|r| r.borrow_mut().insert(slot.name.clone(), entry));
    Some((facts, read))
}

/// The health numbers of one logical slot (see [`diagnose::health`]) and the WAL bytes
/// this call replayed, or `None` when the slot vanished from pg_replication_slots.
pub fn slot_health(slot: &SlotCopy, live: &[String]) -> Option<(diagnose::Health, u64)> {
    let view = activity::slot_view(&slot.name)?;
    let mut server = server_facts(&slot.name);
    let facts = slot_facts(slot, view, &server);
    let invalid = facts.invalidation_reason.is_some()
        || facts.wal_status.as_deref() == Some("lost")
        || slot.restart_lsn == 0;
    let (builder, read) = if invalid {
        // Its WAL may be gone: let go of a replay kept from before.
        REPLAYS.with(|r| r.borrow_mut().remove(&slot.name));
        (None, 0)
    } else {
        match replay_slot_cached(slot, live, &mut server) {
            Some((b, r)) => (Some(b), r),
            None => (None, 0),
        }
    };
    Some((
        judge(&facts, builder.as_ref(), &mut server, diagnose::health),
        read,
    ))
}
