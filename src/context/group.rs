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
use snapbuild_core::replication::shared_replays::{Entry, Held};
use snapbuild_core::{Lsn, Replay};

use crate::adapter::slots::SlotCopy;
use crate::adapter::wal::{self, LeanHead, WalReader};
use crate::context::decoding::{feed_head, restore_snapshot, resume_at};
use crate::context::input::for_slot_copy;

/// Everything a slot's replay depends on besides the WAL. Another key is another
/// decoder: its replay starts afresh (or is carried over when only the start moved).
pub use snapbuild_core::replication::shared_replays::ReplayKey;

/// The key of `slot`'s decoder now: AllocateSnapshotBuilder's parameters as
/// [`crate::context::input::params_for_slot`] derives them, the slot's database, plugin
/// and two-phase settings.
pub fn key_of(slot: &SlotCopy) -> ReplayKey {
    let p = crate::context::input::params_for_slot(slot);
    ReplayKey {
        restart_lsn: slot.restart_lsn,
        in_creation: p.in_slot_creation,
        initial_xmin_horizon: p.initial_xmin_horizon,
        database: slot.datoid,
        plugin: slot.plugin.clone(),
        two_phase: slot.two_phase,
        two_phase_at: p.two_phase_at.0,
        start_decoding_at: p.start_decoding_at.0,
    }
}

/// Now, as PostgreSQL's timestamps (microseconds since 2000-01-01): when a slot's key
/// was read, the same clock in every process.
pub fn now() -> i64 {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// One slot's replay in a group. Serialized whole (JSON) into the shared area
/// ([`crate::adapter::shared_state`]).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Member {
    pub name: String,
    pub key: ReplayKey,
    /// When the slot was last read with this key ([`now`]).
    pub observed_at: i64,
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
    /// The WAL rate, from the commit and abort records it took (their `xact_time`).
    #[serde(default)]
    pub wal_rate: snapbuild_core::diagnose::WalRate,
    /// How far the shared area holds this replay (0: not at all, or not known).
    #[serde(skip)]
    shared_end: Lsn,
}

impl Member {
    /// Where the replay started: the slot's restart_lsn.
    pub fn start(&self) -> Lsn {
        Lsn(self.key.restart_lsn)
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
        let (replay, last_end, records, phase_since, stopped, wal_rate) = {
            let l = &members[t.leader];
            (
                t.join.follower_now(&l.replay),
                l.last_end,
                l.records - t.leader_records,
                (l.phase_since != t.leader_phase_since).then_some(l.phase_since),
                l.stopped,
                l.wal_rate.clone(),
            )
        };
        let m = &mut members[i];
        m.wal_rate.merge(&wal_rate);
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

    /// Takes, of the shared area's `entries`, each replay that is newer than the one this
    /// group keeps for the same slot: further along with the same key, or of another key
    /// read from the slot later; and each for a slot it keeps none of.
    /// ([`ReplayGroup::ensure`] then starts afresh if the one kept is not the slot's
    /// decoder now.) An entry that does not deserialize is passed over.
    pub fn adopt(&mut self, entries: Vec<Entry>) {
        for e in entries {
            let local = self.members.iter().position(|m| m.name == e.name);
            if let Some(m) = local.map(|i| &mut self.members[i]) {
                let newer = if m.key == e.key {
                    e.last_end > m.last_end.0
                } else {
                    e.observed_at > m.observed_at
                };
                if !newer {
                    if m.key == e.key && m.last_end.0 == e.last_end {
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
            m.observed_at = m.observed_at.max(e.observed_at);
            m.shared_end = m.last_end;
            match local {
                Some(i) => self.members[i] = m,
                None => self.members.push(m),
            }
        }
    }

    /// The replays that went further than the shared area holds them, as its entries.
    ///
    /// Errors: `out_of_memory` (53200) when a replay's serialized form cannot be
    /// allocated.
    pub fn export(&self) -> Vec<Entry> {
        export(self.members.iter())
    }

    /// Notes which replays the shared area now holds (`held`: what it holds) as they
    /// stand, or further.
    pub fn mark_shared(&mut self, held: &[Held]) {
        mark_shared(self.members.iter_mut(), held);
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
    pub fn ensure(&mut self, slot: &SlotCopy, observed_at: i64) -> bool {
        let key = key_of(slot);
        if let Some(m) = self.members.iter_mut().find(|m| m.name == slot.name) {
            if m.key == key {
                m.observed_at = observed_at;
                return true;
            }
            // Only the consumer's position moved: the replay goes on when nothing it did
            // depended on the old start.
            if m.key.same_but_later_start(&key)
                && m.replay.move_start_decoding_at(
                    Lsn(m.key.start_decoding_at),
                    Lsn(key.start_decoding_at),
                )
            {
                m.key = key;
                m.observed_at = observed_at;
                m.shared_end = Lsn(0);
                return true;
            }
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
            observed_at,
            replay,
            last_end: input.start,
            records: 0,
            phase_since: None,
            stopped: false,
            version: input.params.version.snapbuild_version(),
            wal_rate: Default::default(),
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
    /// With `share`, the replays' progress is stored in the shared area every
    /// [`SAVE_EVERY`] while the read lasts (and by the caller at its end), so that a read
    /// cancelled or ended on the way (a terminate, a recovery conflict, a statement
    /// timeout) is resumed from there by the next one.
    ///
    /// Errors: `internal_error` for WAL that cannot be read (a broken record),
    /// `data_corrupted` for a malformed record body, as the trace raises them.
    pub fn advance(&mut self, wanted: impl Fn(&str) -> bool, share: bool) -> Vec<(String, u64)> {
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
            self.feed_from(from, &fed, share);
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
    fn feed_from(&mut self, from: Lsn, fed: &[usize], share: bool) {
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
        // Records taken (heads fed in batches, and whole records), and the pace kept
        // between them: interrupts, the progress saved, the developer's delay.
        let mut n: u64 = 0;
        let mut pace = Pace::new(share);
        loop {
            // Records that need only their head, as the reader reads them.
            while let Some(h) = reader.peek_lean() {
                reader.skip_lean();
                feed_head_to_all(members, fed, &h);
                n += 1;
            }
            if reader.feeding_is_due() {
                reader.batch_bound = Lsn(u64::MAX);
                pgrx::check_for_interrupts!();
                unsafe {
                    pgrx::PgMemoryContexts::For(mcx).switch_to(|_| {
                        reader.read_batch_feeding(|h, _| {
                            n += 1;
                            feed_head_to_all(members, fed, h);
                            // A pause every 4096 records, for the pace.
                            !n.is_multiple_of(4096)
                        })
                    });
                }
                // Between two records: every replay is whole here.
                pace.between_records(n, members, fed);
                if reader.peek_lean().is_some() {
                    continue;
                }
            }
            let more =
                unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| reader.next_record()) };
            if !more {
                break;
            }
            // The record just read is not fed yet: the replays are as far as the one
            // before it.
            pace.between_records(n, members, fed);
            n += 1;
            let xact_time = reader.xact_time();
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
                if let Some(t) = xact_time {
                    m.wal_rate.note(rec.head.end_lsn, t);
                }
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

/// `pg_snapbuild.debug_read_delay`: a developer setting (hidden): a pause, in
/// milliseconds, after every 1024 records a group read takes, to make a read long in
/// tests (0: none).
static DEBUG_READ_DELAY: pgrx::GucSetting<i32> = pgrx::GucSetting::<i32>::new(0);

/// Registers this module's settings (from `_PG_init`).
pub fn define_gucs() {
    pgrx::GucRegistry::define_int_guc(
        c"pg_snapbuild.debug_read_delay",
        c"Developer setting: pause after every 1024 records the slots' replays read (ms).",
        c"For tests of what happens during a long read (a terminate, a recovery conflict).",
        &DEBUG_READ_DELAY,
        0,
        60_000,
        pgrx::GucContext::Suset,
        pgrx::GucFlags::NO_SHOW_ALL | pgrx::GucFlags::UNIT_MS,
    );
}

/// The pause of `pg_snapbuild.debug_read_delay`, on the latch: a cancel or a terminate
/// ends it at once.
fn debug_delay() {
    let ms = DEBUG_READ_DELAY.get();
    if ms > 0 {
        unsafe {
            pg_sys::WaitLatch(
                pg_sys::MyLatch,
                (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                ms.into(),
                pg_sys::PG_WAIT_EXTENSION,
            );
            pg_sys::ResetLatch(pg_sys::MyLatch);
        }
        pgrx::check_for_interrupts!();
    }
}

/// What a group read does between records as it goes: checks for interrupts (every 1024
/// records), stores the progress of the replays fed on their own in the shared area
/// (every [`SAVE_EVERY`], when sharing), takes a reload in a background worker, and
/// waits `pg_snapbuild.debug_read_delay` per 1024 records.
struct Pace {
    share: bool,
    /// Records taken when it last acted, in blocks of 1024.
    block: u64,
    last_save: std::time::Instant,
}

impl Pace {
    fn new(share: bool) -> Pace {
        Pace {
            share,
            block: 0,
            last_save: std::time::Instant::now(),
        }
    }

    /// After `n` records in all; every replay in `fed` is whole (no record half fed).
    fn between_records(&mut self, n: u64, members: &mut [Member], fed: &[usize]) {
        let block = n / 1024;
        if block == self.block {
            return;
        }
        for _ in self.block..block {
            debug_delay();
        }
        self.block = block;
        pgrx::check_for_interrupts!();
        // A background worker (the watcher) takes a reload at once, as autovacuum's
        // workers do in their delay points: a long read does not keep old settings.
        unsafe {
            if !pg_sys::MyBgworkerEntry.is_null() && pg_sys::ConfigReloadPending != 0 {
                pg_sys::ConfigReloadPending = 0;
                pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
                // A setting's check may have read the catalogs: the read holds no snapshot,
                // so the catalog snapshot that took goes at once, not at the read's end.
                pg_sys::InvalidateCatalogSnapshot();
            }
        }
        if self.share && self.last_save.elapsed() >= SAVE_EVERY {
            // The followers keep what the area holds of them.
            save_progress(members, fed);
            self.last_save = std::time::Instant::now();
        }
    }
}

/// How often a long read stores the replays' progress in the shared area.
pub const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// The members that went further than the shared area holds them, as its entries.
///
/// Errors: `out_of_memory` (53200) when a replay's serialized form cannot be allocated.
fn export<'a>(members: impl Iterator<Item = &'a Member>) -> Vec<Entry> {
    members
        .filter(|m| m.shared_end.0 == 0 || m.last_end > m.shared_end)
        .filter_map(|m| {
            let state = match snapbuild_core::replication::shared_replays::to_json(m) {
                Ok(state) => state,
                Err(snapbuild_core::replication::shared_replays::JsonError::OutOfMemory) => {
                    crate::adapter::raise(
                        PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
                        format!(
                            "out of memory while serializing the replay of slot \"{}\"",
                            m.name
                        ),
                    )
                }
                Err(_) => return None,
            };
            Some(Entry {
                name: m.name.clone(),
                key: m.key.clone(),
                observed_at: m.observed_at,
                last_end: m.last_end.0,
                state,
            })
        })
        .collect()
}

/// Notes which of `members` the shared area now holds (`held`: what it holds) as they
/// stand, or further.
fn mark_shared<'a>(members: impl Iterator<Item = &'a mut Member>, held: &[Held]) {
    for m in members {
        m.shared_end = if held.iter().any(|h| h.covers(&m.name, &m.key, m.last_end.0)) {
            m.last_end
        } else {
            Lsn(0)
        };
    }
}

/// Stores the progress of the replays `fed` in the shared area in the middle of a read.
fn save_progress(members: &mut [Member], fed: &[usize]) {
    let entries = export(fed.iter().map(|&i| &members[i]));
    if entries.is_empty() {
        return;
    }
    let held = crate::adapter::shared_state::store(&entries, None);
    for &i in fed {
        let m = &mut members[i];
        if held.iter().any(|h| h.covers(&m.name, &m.key, m.last_end.0)) {
            m.shared_end = m.last_end;
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
