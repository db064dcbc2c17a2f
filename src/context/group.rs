//! [`ReplayGroup`]: the replays of many slots fed from one read of the WAL.
//!
//! Every slot's replay re-runs what its decoder would do from the slot's own restart_lsn
//! (as [`crate::context::DecodingContext`] does for one), but one WAL reader serves them
//! all: it starts at the earliest position any of them needs and hands each record,
//! read and decoded once, to every replay that has reached it. A replay takes the records
//! starting at or after the end of the last one it took (at first: its start), so it sees
//! exactly the record sequence a reader of its own opened at its start would: the first
//! record at or after the start, then each next one.
//!
//! The replays are kept between calls (in the backend, by [`crate::context::diagnose`]):
//! a later call opens a new reader where the least advanced of them stopped and reads only
//! what was flushed since. A replay whose slot's restart_lsn changed (or whose creation
//! ended) is started again; the others keep their place.
//!
//! Replays that have come to the same state (slots held at about the same place: their
//! builders and reorder buffers hold the same things once the transactions that set them
//! apart have ended) are fed as one while a read lasts
//! ([`snapbuild_core::replication::converged`]): where they are found alike (as a read
//! begins, and after each RUNNING_XACTS record) one is fed on and the others follow it,
//! each made what its own replay would be when the read ends. `pg_snapbuild.join_replays
//! = off` feeds every replay on its own.

use pgrx::prelude::*;
use snapbuild_core::replication::converged::{join_key, Join};
use snapbuild_core::replication::decode::RecordKind;
use snapbuild_core::replication::shared_replays::Entry;
use snapbuild_core::{Lsn, Replay};

use crate::adapter::slots::SlotCopy;
use crate::adapter::wal::{self, LeanHead, WalReader};
use crate::context::decoding::{feed_head, restore_snapshot, resume_at};
use crate::context::input::for_slot_copy;

/// What identifies a slot's decoder: its restart_lsn, whether it is being created, and
/// the initial xmin horizon while it is. Another key is another decoder: its replay
/// starts afresh.
pub use snapbuild_core::replication::shared_replays::ReplayKey;

/// The key of `slot`'s decoder now.
pub fn key_of(slot: &SlotCopy) -> ReplayKey {
    let creating = slot.in_creation();
    (
        slot.restart_lsn,
        creating,
        if creating { slot.catalog_xmin } else { 0 },
    )
}

/// One slot's replay in a group. Serialized whole (JSON) into the shared area
/// ([`crate::adapter::shared_state`]).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub name: String,
    pub key: ReplayKey,
    pub replay: Replay,
    /// The end of the last record it took ([`Member::start`] before any): it takes
    /// records that start at or after it.
    pub last_end: Lsn,
    /// Records it took.
    pub records: u64,
    /// The start of the record that last changed the builder's state.
    pub phase_since: Option<Lsn>,
    /// Set when the replay met the ERROR the server would raise (a broken `.snap` file):
    /// it takes nothing more, as the server's decoder would stop there.
    pub stopped: bool,
    /// `.snap` files' format version on this server.
    version: u32,
    /// How far the shared area holds this replay (0: not at all, or not known).
    #[serde(skip)]
    shared_end: Lsn,
}

impl Member {
    /// Where the replay started: the slot's restart_lsn (its key's first part).
    pub fn start(&self) -> Lsn {
        Lsn(self.key.0)
    }

    /// The position a reader serving this replay must start at ([`resume_at`]).
    fn read_from(&self) -> Lsn {
        resume_at(self.start(), self.last_end, self.records)
    }

    /// Whether the record starting at `lsn` is one this replay takes next.
    #[inline]
    fn takes(&self, lsn: u64) -> bool {
        !self.stopped && lsn >= self.last_end.0
    }
}

/// A replay that follows another while a read lasts: the tie, and the leader's
/// `records` and `phase_since` when it was made.
struct Tie {
    leader: usize,
    join: Join,
    leader_records: u64,
    leader_phase_since: Option<Lsn>,
}

/// Ties to a leader each replay of `fed` that is alike one before it (same last record,
/// `.snap` format and [`join_key`]); `ties[i]` is set for each follower. Replays already
/// tied, or stopped, stay as they are.
fn join_alike(members: &[Member], fed: &[usize], ties: &mut [Option<Tie>]) {
    let mut leaders: Vec<(usize, serde_json::Value)> = Vec::new();
    for &i in fed {
        let m = &members[i];
        if ties[i].is_some() || m.stopped {
            continue;
        }
        let Some(key) = join_key(&m.replay, m.last_end) else {
            continue;
        };
        let alike = leaders.iter().find(|(l, k)| {
            let lm = &members[*l];
            lm.last_end == m.last_end && lm.version == m.version && *k == key
        });
        match alike {
            Some(&(l, _)) => {
                let lm = &members[l];
                ties[i] = Some(Tie {
                    leader: l,
                    join: Join::new(&m.replay, &lm.replay),
                    leader_records: lm.records,
                    leader_phase_since: lm.phase_since,
                });
            }
            None => leaders.push((i, key)),
        }
    }
}

/// Makes each follower in `ties` what its own replay would be, from its leader's.
/// Returns how many there were.
fn catch_up(members: &mut [Member], ties: Vec<Option<Tie>>) -> usize {
    let mut followers = 0;
    for (i, tie) in ties.into_iter().enumerate() {
        let Some(t) = tie else { continue };
        followers += 1;
        let (replay, last_end, records, phase_since, stopped) = {
            let l = &members[t.leader];
            (
                t.join.follower_now(&l.replay),
                l.last_end,
                l.records - t.leader_records,
                (l.phase_since != t.leader_phase_since).then_some(l.phase_since),
                l.stopped,
            )
        };
        let m = &mut members[i];
        m.replay = replay;
        m.last_end = last_end;
        m.records += records;
        if let Some(p) = phase_since {
            m.phase_since = p;
        }
        m.stopped = stopped;
    }
    followers
}

/// The replays of several slots, fed together ([`ReplayGroup::advance`]).
#[derive(Default)]
pub struct ReplayGroup {
    members: Vec<Member>,
}

impl ReplayGroup {
    /// The replay of slot `name`, if the group has one.
    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Takes, of the shared area's `entries`, each replay that is further along than the
    /// one this group keeps for the same slot and decoder, or for a slot it keeps none
    /// of (or one of another decoder: the area's may be the newer; [`ReplayGroup::ensure`]
    /// starts afresh if neither is the slot's decoder now). An entry that does not
    /// deserialize is passed over.
    pub fn adopt(&mut self, entries: Vec<Entry>) {
        for e in entries {
            let local = self.members.iter().position(|m| m.name == e.name);
            if let Some(m) = local.map(|i| &mut self.members[i]) {
                if m.key == e.key && m.last_end.0 >= e.last_end {
                    if m.last_end.0 == e.last_end {
                        m.shared_end = m.last_end;
                    }
                    continue;
                }
            }
            let Ok(mut m) = serde_json::from_slice::<Member>(&e.state) else {
                continue;
            };
            if m.name != e.name || m.key != e.key || m.last_end.0 != e.last_end {
                continue;
            }
            m.shared_end = m.last_end;
            match local {
                Some(i) => self.members[i] = m,
                None => self.members.push(m),
            }
        }
    }

    /// The replays that went further than the shared area holds them, as its entries.
    pub fn export(&self) -> Vec<Entry> {
        self.members
            .iter()
            .filter(|m| m.shared_end.0 == 0 || m.last_end > m.shared_end)
            .filter_map(|m| {
                Some(Entry {
                    name: m.name.clone(),
                    key: m.key,
                    last_end: m.last_end.0,
                    state: serde_json::to_vec(m).ok()?,
                })
            })
            .collect()
    }

    /// Notes that the shared area now holds the replays of the slots `held` as they
    /// stand.
    pub fn mark_shared(&mut self, held: &[String]) {
        for m in &mut self.members {
            m.shared_end = if held.contains(&m.name) {
                m.last_end
            } else {
                Lsn(0)
            };
        }
    }

    /// Forgets the replays of slots not in `live`.
    pub fn retain_live(&mut self, live: &[String]) {
        self.members.retain(|m| live.contains(&m.name));
    }

    /// Forgets the replay of slot `name`.
    pub fn forget(&mut self, name: &str) {
        self.members.retain(|m| m.name != name);
    }

    /// Makes sure the group has a replay of `slot` for the slot's current decoder (key):
    /// keeps the one it has if the key is the same, else starts one at restart_lsn.
    /// False (and no replay) when the WAL at restart_lsn is gone.
    ///
    /// Errors: as [`for_slot_copy`] (`0A000` when logical decoding is not possible here,
    /// `55000` for a slot that is not logical or has no restart_lsn).
    pub fn ensure(&mut self, slot: &SlotCopy) -> bool {
        let key = key_of(slot);
        if self
            .members
            .iter()
            .any(|m| m.name == slot.name && m.key == key)
        {
            return true;
        }
        self.forget(&slot.name);
        let input = for_slot_copy(slot.clone(), false);
        if !wal::is_available(input.start) {
            return false;
        }
        let mut replay = Replay::new(&input.params, input.slot_db);
        replay.two_phase = input.two_phase.clone();
        replay.fast_forward = input.fast_forward;
        self.members.push(Member {
            name: slot.name.clone(),
            key,
            replay,
            last_end: input.start,
            records: 0,
            phase_since: None,
            stopped: false,
            version: input.params.version.snapbuild_version(),
            shared_end: Lsn(0),
        });
        true
    }

    /// Feeds the replays of the slots `wanted` selects, from where each stopped, to the
    /// end of flushed WAL (on a standby: replayed WAL), with one WAL reader opened at the
    /// earliest of their positions. Returns, per slot fed, the WAL bytes its replay took
    /// in this call (the WAL read once is counted for each slot that took it).
    ///
    /// Unreadable `.snap` files are taken as absent (the diagnosis must not fail on one);
    /// a `.snap` file the replay finds broken stops that slot's replay only. Checks for
    /// interrupts as it reads.
    ///
    /// Errors: `internal_error` for WAL that cannot be read (a broken record),
    /// `data_corrupted` for a malformed record body, as the trace raises them.
    pub fn advance(&mut self, wanted: impl Fn(&str) -> bool) -> Vec<(String, u64)> {
        // Segments before a slot's restart_lsn may go while its replay is kept (the slot
        // was invalidated meanwhile): a replay whose next record is gone is forgotten
        // (its slot then has no replay), the others are fed.
        self.members
            .retain(|m| m.stopped || !wanted(&m.name) || wal::is_available(m.read_from()));
        let fed: Vec<usize> = (0..self.members.len())
            .filter(|&i| !self.members[i].stopped && wanted(&self.members[i].name))
            .collect();
        let before: Vec<Lsn> = fed.iter().map(|&i| self.members[i].last_end).collect();
        let from = fed.iter().map(|&i| self.members[i].read_from()).min();
        if let Some(from) = from.filter(|f| wal::flush_lsn() > *f) {
            self.read_from(from, &fed);
        }
        fed.iter()
            .zip(before)
            .map(|(&i, b)| {
                let m = &self.members[i];
                (m.name.clone(), m.last_end.0.saturating_sub(b.0))
            })
            .collect()
    }

    /// The record loop of [`ReplayGroup::advance`]: one reader from `from`, in a memory
    /// context of its own that is deleted when the loop ends.
    fn read_from(&mut self, from: Lsn, fed: &[usize]) {
        let mcx = unsafe {
            pg_sys::AllocSetContextCreateExtended(
                pg_sys::CurrentMemoryContext,
                c"pg_snapbuild replay group".as_ptr(),
                0,
                8 * 1024,
                8 * 1024 * 1024,
            )
        };
        /// Deletes the context on every way out (an ERROR unwinds through here as a
        /// Rust panic in pgrx, after the reader inside it has been dropped).
        struct Context(pg_sys::MemoryContext);
        impl Drop for Context {
            fn drop(&mut self) {
                unsafe { pg_sys::MemoryContextDelete(self.0) };
            }
        }
        let _context = Context(mcx);
        let opened =
            unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| WalReader::try_open(from)) };
        let Some(mut reader) = opened else {
            return;
        };
        reader.batch_heads = true;
        let members = &mut self.members;
        let joining = crate::adapter::shared_state::join_replays();
        let mut ties: Vec<Option<Tie>> = (0..members.len()).map(|_| None).collect();
        if joining {
            join_alike(members, fed, &mut ties);
        }
        let untied = |ties: &[Option<Tie>]| -> Vec<usize> {
            fed.iter().copied().filter(|&i| ties[i].is_none()).collect()
        };
        let mut fed_now = untied(&ties);
        let fed = &mut fed_now;
        let mut n: u64 = 0;
        loop {
            // Records that need only their head, as the reader reads them.
            while let Some(h) = reader.peek_lean() {
                reader.skip_lean();
                feed_head_to_all(members, fed, &h);
            }
            if reader.feeding_is_due() {
                reader.batch_bound = Lsn(u64::MAX);
                pgrx::check_for_interrupts!();
                unsafe {
                    pgrx::PgMemoryContexts::For(mcx).switch_to(|_| {
                        reader.read_batch_feeding(|h| feed_head_to_all(members, fed, h))
                    });
                }
                if reader.peek_lean().is_some() {
                    continue;
                }
            }
            let more =
                unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| reader.next_record()) };
            if !more {
                break;
            }
            n += 1;
            if n.is_multiple_of(1024) {
                pgrx::check_for_interrupts!();
            }
            let rec = &reader.rec;
            for &i in fed.iter() {
                let m = &mut members[i];
                if !m.takes(rec.head.lsn.0) {
                    continue;
                }
                let version = m.version;
                let mut restore = |lsn: Lsn| unsafe {
                    pgrx::PgMemoryContexts::For(mcx)
                        .switch_to(|_| restore_snapshot(lsn, version, true))
                };
                // Only the builder's state is wanted: no rows for commits.
                m.replay.quiet = true;
                let before = m.replay.builder.state;
                match m.replay.feed_lean(&rec.head, &rec.payload, &mut restore) {
                    Ok(row) => {
                        if m.replay.builder.state != before {
                            m.phase_since = Some(rec.head.lsn);
                        }
                        if let Some(row) = row {
                            m.replay.give_back(row);
                        }
                    }
                    Err(_) => m.stopped = true,
                }
                m.records += 1;
                m.last_end = rec.head.end_lsn;
            }
            if joining && rec.head.kind == RecordKind::RunningXacts && fed.len() > 1 {
                join_alike(members, fed, &mut ties);
                *fed = untied(&ties);
            }
        }
        drop(reader);
        let followers = catch_up(members, ties);
        if followers > 0 {
            pgrx::debug1!(
                "pg_snapbuild: {followers} of {} slot replays followed another's for part of the WAL read",
                fed.len() + followers
            );
        }
    }
}

/// Feeds a record that needs only its head to every replay in `fed` that takes it.
#[inline]
fn feed_head_to_all(members: &mut [Member], fed: &[usize], h: &LeanHead) {
    for &i in fed {
        let m = &mut members[i];
        if m.takes(h.lsn) {
            let mut last_record = None;
            feed_head(
                &mut m.replay,
                &mut m.records,
                &mut m.last_end,
                &mut last_record,
                h,
            );
        }
    }
}
