//! The inputs of "why is my slot stuck?" ([`snapbuild_core::diagnose`]): the slot from
//! shared memory and pg_replication_slots, the replay of its snapshot builder from
//! restart_lsn to the flush position (as the creating or a restarted decoder runs it),
//! and the holders of the transactions that replay points at.

use pgrx::prelude::*;
use snapbuild_core::diagnose::{
    self, BuilderFacts, Finding, ServerFacts, SlotFacts, SyncSkip, SyncSkipReason, SyncedCopy,
};
use snapbuild_core::server_log::LogEvent;
use snapbuild_core::{Lsn, Replay};

use crate::adapter::server_log::LogCursor;
use crate::adapter::slots::SlotCopy;
use crate::adapter::{activity, server_version, shared_state, wal};
use crate::context::group::ReplayGroup;
use crate::context::input::{decoding_possible, for_slot_copy};
use crate::context::DecodingContext;
use snapbuild_core::replication::shared_replays::Held;

/// What `replay` reached (having read to `replayed_to`), with the forecasts for the transactions holding
/// the slot's restart_lsn and catalog_xmin ([`diagnose::forecast`], against the
/// transactions running on the server now).
///
/// On a standby, `server.running` becomes what the standby knows of the primary's
/// running transactions: every xid its snapshot lists, the last RUNNING_XACTS replayed
/// lists, or the replay holds, that TransactionIdIsInProgress still finds in its
/// KnownAssignedXids (a snapshot leaves out xids past its xmax). No forecast is made for
/// a copy the slot synchronization keeps (its positions come from the primary).
fn builder_facts(
    wal_rate: &diagnose::WalRate,
    replay: &Replay,
    replayed_to: Lsn,
    phase_since: Option<Lsn>,
    slot: &SlotCopy,
    server: &mut ServerFacts,
) -> BuilderFacts {
    let b = &replay.builder;
    let last_running = replay
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
        replayed_to,
        forecasts: Vec::new(),
        wal_rate: wal_rate.clone(),
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

/// The findings for one logical slot (see [`diagnose::diagnose`]), or `None` when the
/// slot vanished from pg_replication_slots meanwhile. An invalidated slot (or one whose
/// WAL is lost) is not replayed. The replay is this backend's kept one when there is one
/// ([`ReplayGroup`], shared with `snapbuild_slot_health`): a repeated call reads only the
/// WAL flushed since.
pub fn diagnose_slot(slot: &SlotCopy) -> Option<Vec<Finding>> {
    let mut rows = judge_slots(std::slice::from_ref(slot), false, diagnose::diagnose);
    rows.pop().map(|(_, findings, _)| findings)
}

/// The health numbers of every logical slot in `slots` (see [`diagnose::health`]), each
/// with the WAL bytes its replay took in this call; a slot that vanished from
/// pg_replication_slots meanwhile is left out. The replays of all of them are brought to
/// the end of flushed WAL by one read of it ([`ReplayGroup::advance`]); replays of slots
/// no longer in `slots` are forgotten.
pub fn slots_health(slots: &[SlotCopy]) -> Vec<(String, diagnose::Health, Judged)> {
    judge_slots(slots, true, diagnose::health)
}

/// Where a slot's replay lives after a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayHome {
    /// In shared memory (the library is preloaded and `pg_snapbuild.shared_state` is on):
    /// every session and the watcher resume it.
    Shared,
    /// In this backend only (no shared area, the setting is off, or the replay does not
    /// fit in the area).
    Backend,
    /// Not replayed (invalidated, its WAL is gone, or this node cannot decode).
    None,
}

impl ReplayHome {
    /// The `replay_state` column's text (NULL for [`ReplayHome::None`]).
    pub fn text(self) -> Option<&'static str> {
        match self {
            ReplayHome::Shared => Some("shared"),
            ReplayHome::Backend => Some("backend"),
            ReplayHome::None => None,
        }
    }
}

/// What a call did for one slot besides judging it.
#[derive(Clone, Copy, Debug)]
pub struct Judged {
    /// WAL bytes its replay took in this call.
    pub bytes: u64,
    pub replay: ReplayHome,
    /// The pid creating the slot, while it is being created.
    pub creator: Option<i32>,
}

/// An invalidated slot (its name, restart_lsn and invalidation cause) and the record
/// that invalidated it, if one was found.
type Invalidated = ((String, u64, String), Option<(Lsn, String)>);

thread_local! {
    /// The replays this backend keeps between calls (`snapbuild_diagnose`,
    /// `snapbuild_slot_health`, the watcher's looks).
    static GROUP: std::cell::RefCell<ReplayGroup> = std::cell::RefCell::new(ReplayGroup::default());
    /// The invalidating record found for each invalidated slot: found once, not at every
    /// call.
    static INVALIDATED: std::cell::RefCell<Vec<Invalidated>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The server log as far as this backend read it, and each slot's last
    /// `could not synchronize replication slot` line met so far.
    static SYNC_SKIPS: std::cell::RefCell<(LogCursor, Vec<(String, SyncSkip)>)> =
        std::cell::RefCell::new((LogCursor::default(), Vec::new()));
}

/// A call's work on the slots between its three steps: the catalog reads before the WAL
/// read ([`prepare`]), the WAL read ([`read_wal`]: no catalog access, no snapshot needed),
/// and the catalog reads and judgement after it ([`finish`]). The watcher runs each step
/// in a transaction of its own, so that it holds no snapshot while it reads WAL; a SQL
/// function runs the three in its statement.
pub struct Judging {
    group: ReplayGroup,
    live: Vec<String>,
    shared: bool,
    /// Each slot still listed, with its facts and whether its replay is fed.
    slots: Vec<(SlotCopy, SlotFacts, bool)>,
    /// WAL bytes each replay took.
    read: Vec<(String, u64)>,
    /// What the shared area holds after the read.
    held: Vec<Held>,
}

impl Judging {
    /// How many slots are judged.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// WAL bytes read: what the replay that took the most took.
    pub fn bytes_read(&self) -> u64 {
        self.read.iter().map(|(_, b)| *b).max().unwrap_or(0)
    }
}

/// The first step: the slots' facts from the catalogs and the shared area's replays.
/// `all`: `slots` are all the logical slots. Replays of slots that no longer exist are
/// forgotten. On a node that cannot decode (a 14 or 15 standby) nothing is replayed:
/// the slots are judged from their positions alone.
pub fn prepare(slots: &[SlotCopy], all: bool) -> Judging {
    // Taken out of GROUP while the call lasts: an ERROR (or a cancel) on the way leaves
    // an empty group, and the next call resumes the shared area's replays.
    let mut group = GROUP.with(|g| std::mem::take(&mut *g.borrow_mut()));
    let observed_at = crate::context::group::now();
    let live: Vec<String> = if all {
        slots.iter().map(|s| s.name.clone()).collect()
    } else {
        crate::adapter::slots::copy_slots()
            .into_iter()
            .filter(|s| s.logical)
            .map(|s| s.name)
            .collect()
    };
    let replayable = decoding_possible();
    let shared = replayable && shared_state::available();
    if shared {
        group.adopt(shared_state::load());
    }
    group.retain_live(&live);
    INVALIDATED.with(|c| c.borrow_mut().retain(|((n, _, _), _)| live.contains(n)));
    let in_recovery = wal::in_recovery();
    let mut judged = Vec::new();
    for slot in slots {
        pgrx::check_for_interrupts!();
        let Some(view) = activity::slot_view(&slot.name) else {
            continue;
        };
        let mut facts = slot_facts(slot, view, in_recovery);
        let invalid = facts.invalidation_reason.is_some()
            || facts.wal_status.as_deref() == Some("lost")
            || slot.restart_lsn == 0;
        if let Some(c) = facts.synced.as_mut().filter(|c| c.temporary) {
            c.last_skip = last_sync_skip(&slot.name);
        }
        let replayed = if invalid || !replayable {
            // Its WAL may be gone: let go of a replay kept from before.
            group.forget(&slot.name);
            false
        } else {
            group.ensure(slot, observed_at)
        };
        judged.push((slot.clone(), facts, replayed));
    }
    Judging {
        group,
        live,
        shared,
        slots: judged,
        read: Vec::new(),
        held: Vec::new(),
    }
}

/// The second step: brings the replays to the end of flushed WAL (on a standby:
/// replayed WAL) in one read, stores them in the shared area, and finds the record that
/// invalidated each invalidated slot (once per slot). Reads WAL and `.snap` files only:
/// it needs no snapshot and takes no lock on a relation.
pub fn read_wal(j: &mut Judging) {
    let wanted: Vec<String> = j
        .slots
        .iter()
        .filter(|(_, _, r)| *r)
        .map(|(s, _, _)| s.name.clone())
        .collect();
    j.read = j
        .group
        .advance(|name| wanted.iter().any(|w| w == name), j.shared);
    if j.shared {
        j.held = shared_state::store(&j.group.export(), Some(&j.live));
        j.group.mark_shared(&j.held);
    }
    for (slot, facts, _) in &mut j.slots {
        let invalid = facts.invalidation_reason.is_some()
            || facts.wal_status.as_deref() == Some("lost")
            || slot.restart_lsn == 0;
        if invalid && slot.restart_lsn != 0 {
            facts.invalidated_at = invalidating_record_kept(slot, facts);
        }
    }
}

/// The third step: each slot judged with `f`, from its replay and the server as it is
/// now (the transactions running are read after the replay, so that every xid the replay
/// met and still runs is among them). The group is kept for the next call.
pub fn finish<T>(
    j: Judging,
    f: fn(&SlotFacts, Option<&BuilderFacts>, &ServerFacts, &[diagnose::Holder]) -> T,
) -> Vec<(String, T, Judged)> {
    let Judging {
        group,
        slots,
        read,
        held,
        ..
    } = j;
    let rows = slots
        .into_iter()
        .map(|(slot, facts, _)| {
            let mut server = server_facts(&slot.name);
            let builder = group.member(&slot.name).map(|m| {
                builder_facts(
                    &m.wal_rate,
                    &m.replay,
                    m.last_end,
                    m.phase_since,
                    &slot,
                    &mut server,
                )
            });
            let bytes = read
                .iter()
                .find(|(n, _)| *n == slot.name)
                .map_or(0, |(_, b)| *b);
            let t = judge(&facts, builder.as_ref(), &mut server, f);
            let replay = match group.member(&slot.name) {
                None => ReplayHome::None,
                Some(m) if held.iter().any(|h| h.covers(&m.name, &m.key, m.last_end.0)) => {
                    ReplayHome::Shared
                }
                Some(_) => ReplayHome::Backend,
            };
            let creator = facts.active_pid.filter(|_| facts.in_creation);
            (
                slot.name.clone(),
                t,
                Judged {
                    bytes,
                    replay,
                    creator,
                },
            )
        })
        .collect();
    GROUP.with(|g| *g.borrow_mut() = group);
    rows
}

/// Judges `slots` with `f` after bringing their kept replays to the end of flushed WAL
/// in one read: [`prepare`], [`read_wal`] and [`finish`] in the caller's transaction.
fn judge_slots<T>(
    slots: &[SlotCopy],
    all: bool,
    f: fn(&SlotFacts, Option<&BuilderFacts>, &ServerFacts, &[diagnose::Holder]) -> T,
) -> Vec<(String, T, Judged)> {
    let mut j = prepare(slots, all);
    read_wal(&mut j);
    finish(j, f)
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
    if !server.in_recovery {
        server.insert_lsn = Some(Lsn(unsafe { pg_sys::GetXLogInsertRecPtr() }));
    }
    let wanted = diagnose::wanted_xids(facts, builder, server);
    let holders = activity::holders(&wanted);
    server.in_progress = activity::in_progress(&wanted);
    f(facts, builder, server, &holders)
}

/// The slot synchronization's last `could not synchronize replication slot` line about
/// `slot` in the server log (its time and DETAIL), if the log is readable and has one.
/// The log is read from where this backend's last read stopped (the first time: its
/// newest part), once for every slot: what it says of each slot is kept.
fn last_sync_skip(slot: &str) -> Option<SyncSkip> {
    SYNC_SKIPS.with(|s| {
        let (cursor, last) = &mut *s.borrow_mut();
        if let Ok(events) = crate::adapter::server_log::events_since(cursor, || {
            pgrx::check_for_interrupts!();
        }) {
            for e in events {
                let LogEvent::SlotSyncSkipped(l) = e else {
                    continue;
                };
                let Some(reason) = l.detail.as_deref().and_then(SyncSkipReason::from_detail) else {
                    continue;
                };
                let skip = SyncSkip {
                    at: snapbuild_core::timestamp_from_unix_ms(l.at_ms),
                    reason,
                };
                match last.iter_mut().find(|(n, _)| *n == l.slot) {
                    Some((_, s)) => *s = skip,
                    None => last.push((l.slot, skip)),
                }
            }
        }
        last.iter().find(|(n, _)| n == slot).map(|(_, s)| *s)
    })
}

/// [`invalidating_record`], found once per slot, restart_lsn and invalidation cause
/// and kept (the record does not change: the slot is invalidated for good).
fn invalidating_record_kept(slot: &SlotCopy, facts: &SlotFacts) -> Option<(Lsn, String)> {
    let key = (
        slot.name.clone(),
        slot.restart_lsn,
        facts.invalidation_reason.clone().unwrap_or_default(),
    );
    if let Some(found) = INVALIDATED.with(|c| {
        c.borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, f)| f.clone())
    }) {
        return found;
    }
    let found = invalidating_record(slot);
    INVALIDATED.with(|c| c.borrow_mut().push((key, found.clone())));
    found
}

/// The record whose redo invalidated `slot` on a standby (rows_removed,
/// wal_level_insufficient), found by a replay from its restart_lsn
/// ([`DecodingContext::watch_invalidation`]); `None` for other causes, or when its WAL is
/// gone or no record read invalidates it.
fn invalidating_record(slot: &SlotCopy) -> Option<(Lsn, String)> {
    if !decoding_possible() {
        return None;
    }
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
fn slot_facts(slot: &SlotCopy, view: activity::SlotView, in_recovery: bool) -> SlotFacts {
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
        synced: (slot.synced && in_recovery).then(|| SyncedCopy {
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
        keep: crate::adapter::keep_settings(),
        insert_lsn: None,
    }
}
