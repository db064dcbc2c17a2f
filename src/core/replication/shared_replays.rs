//! The slots' replays as pg_snapbuild keeps them in shared memory (the area
//! `pg_snapbuild replay state`: made at server start when the library is preloaded, or on
//! PostgreSQL 17+ a named dynamic shared memory segment), and the protocol every process
//! follows to read and write it. Not a PostgreSQL structure: pg_snapbuild's own, read and
//! written only by it, and parsed with bounds checks.
//!
//! # Layout
//!
//! Little-endian. The area's header ([`HEADER`] bytes): magic u32 ([`MAGIC`]), format u32
//! ([`FORMAT`]), generation u64 (bumped by every write), used u64 (payload bytes in use).
//! The payload is a sequence of entries, each: total length u32 (this field included),
//! format u32, live u8, three zero bytes, observed_at i64, last_end u64, name (u16 length,
//! UTF-8), the [`ReplayKey`] (restart_lsn u64, in_creation u8, initial_xmin_horizon u32,
//! database u32, two_phase u8, two_phase_at u64, start_decoding_at u64, plugin as u16
//! length and UTF-8), state (u32 length, the replay serialized).
//!
//! # Protocol
//!
//! Everything that parses, encodes or allocates happens outside the area's lock, on a copy:
//! - a reader copies the header and the used payload under the lock in shared mode and
//!   decodes the copy ([`entries`]);
//! - a writer copies the area the same way, computes a [`Plan`] from the copy
//!   ([`plan_store`]), then takes the lock in exclusive mode and [`apply`]s it: if the
//!   generation is still the one it copied, it clears the live byte of each entry it
//!   replaces and copies its new entries after the used payload (or, when they do not fit,
//!   copies a compacted image of the whole area); otherwise it changes nothing and the
//!   writer starts again from a new copy. Under the lock: a comparison, a few single
//!   bytes and one `copy_from_slice`; no allocation, no parsing.
//!
//! Entries of another [`FORMAT`] (another build of the library) are ignored by readers and
//! dropped by writers; an area whose header is not this format's is rewritten whole.

use std::collections::TryReserveError;

/// The area's magic number.
pub const MAGIC: u32 = 0x5053_4232;
/// The format of the area and its entries: changes whenever the layout above or the
/// replay's serialized form ([`crate::Replay`]'s serde fields) changes, and with every
/// release (the library's version is part of it), so that two builds never read each
/// other's entries.
pub const FORMAT: u32 = format_of(env!("CARGO_PKG_VERSION"), 2);

/// FNV-1a of the library's version and the layout's own number.
const fn format_of(version: &str, layout: u32) -> u32 {
    let bytes = version.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    let l = layout.to_le_bytes();
    let mut j = 0;
    while j < 4 {
        h ^= l[j] as u32;
        h = h.wrapping_mul(0x0100_0193);
        j += 1;
    }
    h
}

/// The area's header: magic, format, generation, used.
pub const HEADER: usize = 24;
/// Where an entry's live byte is, from the entry's start.
const LIVE_AT: usize = 8;

/// Everything a slot's replay depends on besides the WAL: AllocateSnapshotBuilder's
/// parameters as logical.c derives them from the slot (CreateInitDecodingContext while
/// the slot is being created, CreateDecodingContext once it is), the slot's database
/// (DecodeTXNNeedSkip, logical messages), and how prepared transactions are decoded
/// (the slot's `two_phase`, its `two_phase_at` and the output plugin's filter_prepare).
/// Two replays of the same WAL with equal keys are equal; a replay is resumed only by a
/// decoder of an equal key (or one whose start moved forward, see
/// [`ReplayKey::same_but_later_start`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ReplayKey {
    /// Where the replay starts: the slot's restart_lsn.
    pub restart_lsn: u64,
    /// Whether the slot is being created (`in_slot_creation`).
    pub in_creation: bool,
    /// The slot's catalog_xmin while it is created (`initial_xmin_horizon`), else 0.
    pub initial_xmin_horizon: u32,
    /// The slot's database (oid).
    pub database: u32,
    /// The slot's output plugin.
    pub plugin: String,
    /// The slot's `two_phase`.
    pub two_phase: bool,
    /// The slot's `two_phase_at`.
    pub two_phase_at: u64,
    /// `start_decoding_at`: the slot's confirmed_flush once created, else 0.
    pub start_decoding_at: u64,
}

impl ReplayKey {
    /// Whether `later` is this key with only `start_decoding_at` moved forward (a
    /// consumer confirmed further): such a replay can be carried over when nothing it did
    /// depended on the old start (`Replay::move_start_decoding_at`).
    pub fn same_but_later_start(&self, later: &ReplayKey) -> bool {
        later.start_decoding_at > self.start_decoding_at
            && ReplayKey {
                start_decoding_at: self.start_decoding_at,
                ..later.clone()
            } == *self
    }

    fn encoded_len(&self) -> usize {
        8 + 1 + 4 + 4 + 1 + 8 + 8 + 2 + self.plugin.len()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.restart_lsn.to_le_bytes());
        out.push(u8::from(self.in_creation));
        out.extend_from_slice(&self.initial_xmin_horizon.to_le_bytes());
        out.extend_from_slice(&self.database.to_le_bytes());
        out.push(u8::from(self.two_phase));
        out.extend_from_slice(&self.two_phase_at.to_le_bytes());
        out.extend_from_slice(&self.start_decoding_at.to_le_bytes());
        out.extend_from_slice(&(self.plugin.len() as u16).to_le_bytes());
        out.extend_from_slice(self.plugin.as_bytes());
    }
}

/// One slot's replay as the area holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub key: ReplayKey,
    /// When the writer last read the slot's key from the server (microseconds, any
    /// epoch shared by every process: PostgreSQL's timestamps): of two entries of
    /// different keys for one slot, the later observed is the slot's decoder now.
    pub observed_at: i64,
    /// The end of the last record the replay took.
    pub last_end: u64,
    /// The replay, serialized.
    pub state: Vec<u8>,
}

impl Entry {
    /// The entry's length once encoded; `None` when a field is too long for the layout
    /// (a name or plugin over 65535 bytes, a state over 4 GiB).
    pub fn encoded_len(&self) -> Option<usize> {
        if self.name.len() > usize::from(u16::MAX)
            || self.key.plugin.len() > usize::from(u16::MAX)
            || self.state.len() > u32::MAX as usize / 2
        {
            return None;
        }
        Some(
            4 + 4 + 4 + 8 + 8 + 2 + self.name.len() + self.key.encoded_len() + 4 + self.state.len(),
        )
    }

    /// Appends the entry (live, this build's [`FORMAT`]) to `out`, whose room the caller
    /// reserved.
    fn encode(&self, out: &mut Vec<u8>) {
        let len = self.encoded_len().unwrap_or(0);
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&[1, 0, 0, 0]);
        out.extend_from_slice(&self.observed_at.to_le_bytes());
        out.extend_from_slice(&self.last_end.to_le_bytes());
        out.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        self.key.encode(out);
        out.extend_from_slice(&(self.state.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.state);
    }
}

/// Why [`to_json`] gave no bytes.
#[derive(Debug)]
pub enum JsonError {
    /// An allocation failed (the caller raises an ERROR; Rust's own allocation failure
    /// would abort the process).
    OutOfMemory,
    /// The value does not serialize.
    Serialize(serde_json::Error),
}

/// A growable buffer whose allocations may fail without aborting.
struct TryVec(Vec<u8>);

impl std::io::Write for TryVec {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .try_reserve(buf.len())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `value` as JSON, every allocation of the output checked (a replay's state can be
/// large: many transactions held).
pub fn to_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, JsonError> {
    let mut out = TryVec(Vec::new());
    match serde_json::to_writer(&mut out, value) {
        Ok(()) => Ok(out.0),
        Err(e) if e.io_error_kind() == Some(std::io::ErrorKind::OutOfMemory) => {
            Err(JsonError::OutOfMemory)
        }
        Err(e) => Err(JsonError::Serialize(e)),
    }
}

/// One entry found in a copy of the area.
#[derive(Clone, Debug)]
struct Found {
    /// Its offset in the payload.
    at: usize,
    len: usize,
    live: bool,
    /// Of this build's format, and whole: its fields below are read.
    ours: bool,
    name: String,
    key: ReplayKey,
    observed_at: i64,
    last_end: u64,
    /// The state's place in the payload.
    state: std::ops::Range<usize>,
}

/// A bounds-checked reader over a byte slice.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn string(&mut self, n: usize) -> Option<String> {
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
}

/// The header of a copy of the area: (generation, payload length in use), `None` when
/// it is not an area of this [`FORMAT`].
fn header(copy: &[u8]) -> Option<(u64, usize)> {
    let mut c = Cursor { b: copy, at: 0 };
    if c.u32()? != MAGIC || c.u32()? != FORMAT {
        return None;
    }
    let generation = c.u64()?;
    let used = usize::try_from(c.u64()?).ok()?;
    Some((generation, used))
}

/// The entries of `payload`; parsing stops at the first entry that does not fit.
fn scan(payload: &[u8]) -> Vec<Found> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while payload.len().saturating_sub(at) >= 4 {
        let Some(len) = payload
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(|b| u32::from_le_bytes(b) as usize)
        else {
            break;
        };
        let Some(whole) = at.checked_add(len).and_then(|end| payload.get(at..end)) else {
            break;
        };
        if len < LIVE_AT + 1 {
            break;
        }
        let mut c = Cursor { b: whole, at: 4 };
        let format = c.u32().unwrap_or(0);
        let live = whole[LIVE_AT] != 0;
        let parsed = (format == FORMAT)
            .then(|| -> Option<Found> {
                c.at = 12;
                let observed_at = c.u64()? as i64;
                let last_end = c.u64()?;
                let n = usize::from(c.u16()?);
                let name = c.string(n)?;
                let restart_lsn = c.u64()?;
                let in_creation = c.u8()? != 0;
                let initial_xmin_horizon = c.u32()?;
                let database = c.u32()?;
                let two_phase = c.u8()? != 0;
                let two_phase_at = c.u64()?;
                let start_decoding_at = c.u64()?;
                let p = usize::from(c.u16()?);
                let plugin = c.string(p)?;
                let s = c.u32()? as usize;
                let start = c.at;
                c.take(s)?;
                (c.at == len).then_some(())?;
                Some(Found {
                    at,
                    len,
                    live,
                    ours: true,
                    name,
                    key: ReplayKey {
                        restart_lsn,
                        in_creation,
                        initial_xmin_horizon,
                        database,
                        plugin,
                        two_phase,
                        two_phase_at,
                        start_decoding_at,
                    },
                    observed_at,
                    last_end,
                    state: at + start..at + start + s,
                })
            })
            .flatten();
        out.push(parsed.unwrap_or(Found {
            at,
            len,
            live,
            ours: false,
            name: String::new(),
            key: ReplayKey::default(),
            observed_at: 0,
            last_end: 0,
            state: 0..0,
        }));
        at += len;
    }
    out
}

/// How many bytes a copy of the area must take (header and used payload), read from the
/// area's header: what a process copies under the lock. Never more than `area.len()`.
pub fn copy_len(area: &[u8]) -> usize {
    match header(area) {
        Some((_, used)) => HEADER.saturating_add(used).min(area.len()),
        None => area.len().min(HEADER),
    }
}

/// Writes an empty area's header into `area` (at least [`HEADER`] bytes).
pub fn init(area: &mut [u8]) {
    if area.len() >= HEADER {
        area[..HEADER].fill(0);
        area[..4].copy_from_slice(&MAGIC.to_le_bytes());
        area[4..8].copy_from_slice(&FORMAT.to_le_bytes());
    }
}

/// The live entries of this build's format in a copy of the area (header included).
/// Allocates only what the entries hold.
pub fn entries(copy: &[u8]) -> Vec<Entry> {
    let Some((_, used)) = header(copy) else {
        return Vec::new();
    };
    let Some(payload) = copy.get(HEADER..HEADER.saturating_add(used)) else {
        return Vec::new();
    };
    scan(payload)
        .into_iter()
        .filter(|f| f.live && f.ours)
        .filter_map(|f| {
            Some(Entry {
                state: payload.get(f.state.clone())?.to_vec(),
                name: f.name,
                key: f.key,
                observed_at: f.observed_at,
                last_end: f.last_end,
            })
        })
        .collect()
}

/// One replay the area holds: its slot, key and how far it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub name: String,
    pub key: ReplayKey,
    pub last_end: u64,
}

impl Held {
    /// Whether this is the replay of `name` with `key`, as far as `last_end` or further.
    pub fn covers(&self, name: &str, key: &ReplayKey, last_end: u64) -> bool {
        self.name == name && self.key == *key && self.last_end >= last_end
    }
}

/// What a writer does under the lock ([`apply`]), computed from a copy of the area.
#[derive(Debug)]
pub struct Plan {
    /// The generation of the copy it was computed from.
    generation: u64,
    change: Change,
    /// What the area holds afterwards: each live entry's slot, key and last_end.
    pub holds: Vec<Held>,
}

#[derive(Debug)]
enum Change {
    /// Nothing to write.
    None,
    /// Clear the live byte of the entries at these payload offsets, then copy `bytes`
    /// at payload offset `at`.
    Append {
        kills: Vec<usize>,
        at: usize,
        bytes: Vec<u8>,
    },
    /// Replace the whole area (header included) with this image.
    Rewrite(Vec<u8>),
}

impl Plan {
    /// The bytes [`apply`] copies into the area.
    pub fn bytes_copied(&self) -> usize {
        match &self.change {
            Change::None => 0,
            Change::Append { bytes, .. } => bytes.len(),
            Change::Rewrite(image) => image.len(),
        }
    }

    /// Whether applying it rewrites the whole area (compaction).
    pub fn rewrites(&self) -> bool {
        matches!(self.change, Change::Rewrite(_))
    }
}

/// Whether the writer's entry `mine` replaces `theirs` for the same slot: the same
/// decoder (key) and further along; or another decoder, read from the slot later.
fn replaces(mine: &Entry, theirs: &Found) -> bool {
    if mine.key == theirs.key {
        mine.last_end > theirs.last_end
    } else {
        mine.observed_at > theirs.observed_at
    }
}

/// The writer's plan for a copy of the area (`copy`, header included; the area has
/// `capacity` bytes in all): each entry of `mine` replaces the area's entry for the same
/// slot when [`replaces`] says so (the newer of two entries wins); the area's entries for
/// slots not in `live` (when given: every logical slot now), or of another format, are
/// dropped. New entries are appended after the used payload; when they do not fit there,
/// the whole area is compacted, leaving out what does not fit, largest first.
///
/// Errors: an allocation the plan needs failed (the caller raises an ERROR, never aborts).
pub fn plan_store(
    copy: &[u8],
    mine: &[Entry],
    live: Option<&[String]>,
    capacity: usize,
) -> Result<Plan, TryReserveError> {
    let room = capacity.saturating_sub(HEADER);
    let (generation, found, payload) = match header(copy) {
        Some((g, used)) => {
            let payload = copy.get(HEADER..HEADER.saturating_add(used)).unwrap_or(&[]);
            (g, scan(payload), payload)
        }
        // Not an area of this format (another build made it): rewritten whole.
        None => (
            u64::from_le_bytes(
                copy.get(8..16)
                    .and_then(|b| b.try_into().ok())
                    .unwrap_or([0; 8]),
            ),
            Vec::new(),
            &[][..],
        ),
    };
    let foreign_area = header(copy).is_none();
    let mut kills = Vec::new();
    let mut new: Vec<&Entry> = Vec::new();
    for e in mine {
        if e.encoded_len().is_none() {
            continue;
        }
        let theirs = found.iter().find(|f| f.live && f.ours && f.name == e.name);
        match theirs {
            Some(t) if !replaces(e, t) => {}
            Some(t) => {
                kills.push(t.at);
                new.push(e);
            }
            None => new.push(e),
        }
    }
    for f in &found {
        let gone = live.is_some_and(|l| !l.contains(&f.name));
        if f.live && (!f.ours || gone) && !kills.contains(&f.at) {
            kills.push(f.at);
        }
    }
    let used = found.last().map_or(0, |f| f.at + f.len);
    let mut append_len = 0usize;
    for e in &new {
        append_len = append_len.saturating_add(e.encoded_len().unwrap_or(0));
    }
    let held_found = |f: &Found| Held {
        name: f.name.clone(),
        key: f.key.clone(),
        last_end: f.last_end,
    };
    let held_new = |e: &Entry| Held {
        name: e.name.clone(),
        key: e.key.clone(),
        last_end: e.last_end,
    };
    if !foreign_area && used.saturating_add(append_len) <= room {
        let mut holds: Vec<Held> = found
            .iter()
            .filter(|f| f.live && f.ours && !kills.contains(&f.at))
            .map(held_found)
            .collect();
        holds.extend(new.iter().map(|e| held_new(e)));
        if new.is_empty() && kills.is_empty() {
            return Ok(Plan {
                generation,
                change: Change::None,
                holds,
            });
        }
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(append_len)?;
        for e in &new {
            e.encode(&mut bytes);
        }
        return Ok(Plan {
            generation,
            change: Change::Append {
                kills,
                at: used,
                bytes,
            },
            holds,
        });
    }
    // Compaction: the live entries that stay, and the new ones, smallest first until
    // the room is full.
    let mut keep: Vec<(usize, Result<&Found, &Entry>)> = found
        .iter()
        .filter(|f| f.live && f.ours && !kills.contains(&f.at))
        .map(|f| (f.len, Ok(f)))
        .chain(new.iter().map(|e| (e.encoded_len().unwrap_or(0), Err(*e))))
        .collect();
    keep.sort_by_key(|(len, _)| *len);
    let mut total = 0usize;
    keep.retain(|(len, _)| {
        let fits = total.saturating_add(*len) <= room;
        if fits {
            total += len;
        }
        fits
    });
    let mut image = Vec::new();
    image.try_reserve_exact(HEADER + total)?;
    image.extend_from_slice(&MAGIC.to_le_bytes());
    image.extend_from_slice(&FORMAT.to_le_bytes());
    image.extend_from_slice(&generation.wrapping_add(1).to_le_bytes());
    image.extend_from_slice(&(total as u64).to_le_bytes());
    let mut holds = Vec::new();
    for (_, k) in keep {
        match k {
            Ok(f) => {
                image.extend_from_slice(&payload[f.at..f.at + f.len]);
                holds.push(held_found(f));
            }
            Err(e) => {
                e.encode(&mut image);
                holds.push(held_new(e));
            }
        }
    }
    Ok(Plan {
        generation,
        change: Change::Rewrite(image),
        holds,
    })
}

/// Applies `plan` to the area (under the lock in exclusive mode): true when the area is
/// still at the generation the plan was made from (then it is changed and its generation
/// bumped), false when another writer came first (nothing is changed). No allocation, no
/// parsing: the header's generation is compared, single bytes are cleared and one slice
/// is copied.
pub fn apply(area: &mut [u8], plan: &Plan) -> bool {
    if area.len() < HEADER {
        return false;
    }
    let generation = u64::from_le_bytes(area[8..16].try_into().unwrap_or([0; 8]));
    let ours = area[..4] == MAGIC.to_le_bytes() && area[4..8] == FORMAT.to_le_bytes();
    if generation != plan.generation {
        return false;
    }
    match &plan.change {
        Change::None => true,
        Change::Append { kills, at, bytes } => {
            let Some(end) = HEADER
                .checked_add(*at)
                .and_then(|s| s.checked_add(bytes.len()))
                .filter(|e| *e <= area.len())
            else {
                return false;
            };
            if !ours {
                return false;
            }
            for k in kills {
                if let Some(b) = HEADER
                    .checked_add(*k)
                    .and_then(|p| p.checked_add(LIVE_AT))
                    .and_then(|p| area.get_mut(p))
                {
                    *b = 0;
                }
            }
            area[HEADER + at..end].copy_from_slice(bytes);
            area[8..16].copy_from_slice(&generation.wrapping_add(1).to_le_bytes());
            area[16..24].copy_from_slice(&((end - HEADER) as u64).to_le_bytes());
            true
        }
        Change::Rewrite(image) => {
            if image.len() > area.len() {
                return false;
            }
            area[..image.len()].copy_from_slice(image);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(restart: u64) -> ReplayKey {
        ReplayKey {
            restart_lsn: restart,
            database: 5,
            plugin: "test_decoding".into(),
            start_decoding_at: restart + 8,
            ..Default::default()
        }
    }

    fn entry(name: &str, key: ReplayKey, at: i64, last_end: u64, state: &[u8]) -> Entry {
        Entry {
            name: name.into(),
            key,
            observed_at: at,
            last_end,
            state: state.to_vec(),
        }
    }

    fn area(size: usize) -> Vec<u8> {
        let mut a = vec![0u8; size];
        init(&mut a);
        a
    }

    /// One write as a process does it: copy, plan, apply (retrying once if it lost).
    /// Returns the slots of `mine` the area then holds as `mine` has them or further.
    fn store(a: &mut [u8], mine: &[Entry], live: Option<&[String]>) -> Vec<String> {
        for _ in 0..2 {
            let copy = a[..copy_len(a)].to_vec();
            let p = plan_store(&copy, mine, live, a.len()).unwrap();
            if apply(a, &p) {
                // What the plan says the area holds is what it holds.
                let now: Vec<Held> = entries(&a[..copy_len(a)])
                    .into_iter()
                    .map(|e| Held {
                        name: e.name,
                        key: e.key,
                        last_end: e.last_end,
                    })
                    .collect();
                let mut said = p.holds.clone();
                let mut got = now.clone();
                said.sort_by(|x, y| x.name.cmp(&y.name));
                got.sort_by(|x, y| x.name.cmp(&y.name));
                assert_eq!(said, got);
                return mine
                    .iter()
                    .filter(|e| now.iter().any(|h| h.covers(&e.name, &e.key, e.last_end)))
                    .map(|e| e.name.clone())
                    .collect();
            }
        }
        panic!("lost twice");
    }

    fn live_states(a: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut v: Vec<_> = entries(&a[..copy_len(a)])
            .into_iter()
            .map(|e| (e.name, e.state))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn entries_round_trip_and_a_truncated_tail_is_left_out() {
        let a = entry("a", key(0x1_0000_0028), 1, 99, b"{\"x\":1}");
        let mut k = key(5);
        k.in_creation = true;
        k.initial_xmin_horizon = 7;
        k.two_phase = true;
        k.two_phase_at = 77;
        k.plugin = "pgoutput".into();
        let b = entry("slot_b", k, 2, 12, b"");
        let mut ar = area(4096);
        store(&mut ar, &[a.clone(), b.clone()], None);
        let got = entries(&ar[..copy_len(&ar)]);
        assert_eq!(got, vec![a.clone(), b]);
        // A copy cut inside the second entry: the first one only.
        let cut = copy_len(&ar) - 1;
        assert_eq!(entries(&ar[..cut]), vec![]);
        let mut shortened = ar[..cut].to_vec();
        let used = (cut - HEADER) as u64;
        shortened[16..24].copy_from_slice(&used.to_le_bytes());
        assert_eq!(entries(&shortened), vec![a]);
    }

    #[test]
    fn the_further_replay_of_the_same_decoder_wins() {
        let mut ar = area(1 << 16);
        store(
            &mut ar,
            &[
                entry("a", key(10), 1, 500, b"theirs-a"),
                entry("b", key(20), 1, 100, b"theirs-b"),
                entry("gone", key(30), 1, 100, b"x"),
            ],
            None,
        );
        let live = ["a".to_string(), "b".to_string(), "c".to_string()];
        let holds = store(
            &mut ar,
            &[
                // behind theirs, same key: theirs stays (and holds mine's decoder)
                entry("a", key(10), 2, 400, b"mine-a"),
                // ahead: mine
                entry("b", key(20), 2, 200, b"mine-b"),
                // new
                entry("c", key(5), 2, 50, b"mine-c"),
            ],
            Some(&live),
        );
        assert_eq!(
            live_states(&ar),
            vec![
                ("a".into(), b"theirs-a".to_vec()),
                ("b".into(), b"mine-b".to_vec()),
                ("c".into(), b"mine-c".to_vec())
            ]
        );
        let mut holds = holds;
        holds.sort();
        assert_eq!(holds, vec!["a", "b", "c"]);
    }

    #[test]
    fn the_newer_decoder_wins_whatever_the_order_of_writes() {
        let mut ar = area(1 << 16);
        // The slot moved (or was dropped and created again): read at 20, stored first.
        store(&mut ar, &[entry("a", key(11), 20, 30, b"new")], None);
        // A writer that read the slot earlier (at 10) and went further stores after it.
        let holds = store(&mut ar, &[entry("a", key(10), 10, 900, b"old")], None);
        assert!(holds.is_empty());
        assert_eq!(live_states(&ar), vec![("a".into(), b"new".to_vec())]);
        // One that read it later still: it wins, even though it went less far.
        store(&mut ar, &[entry("a", key(10), 30, 15, b"newest")], None);
        assert_eq!(live_states(&ar), vec![("a".into(), b"newest".to_vec())]);
    }

    #[test]
    fn every_input_of_the_replay_is_in_the_key() {
        let base = key(10);
        let variants: Vec<ReplayKey> = vec![
            ReplayKey {
                database: 6,
                ..base.clone()
            },
            ReplayKey {
                plugin: "pgoutput".into(),
                ..base.clone()
            },
            ReplayKey {
                two_phase: true,
                ..base.clone()
            },
            ReplayKey {
                two_phase_at: 99,
                ..base.clone()
            },
            ReplayKey {
                start_decoding_at: 99,
                ..base.clone()
            },
            ReplayKey {
                in_creation: true,
                ..base.clone()
            },
            ReplayKey {
                initial_xmin_horizon: 3,
                ..base.clone()
            },
            ReplayKey {
                restart_lsn: 11,
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(v, base);
            let mut ar = area(1 << 16);
            store(&mut ar, &[entry("a", base.clone(), 1, 900, b"one")], None);
            // Another decoder of the same name, read later, not as far: a new replay.
            let holds = store(&mut ar, &[entry("a", v.clone(), 2, 10, b"two")], None);
            assert_eq!(holds, vec!["a"]);
            let e = entries(&ar[..copy_len(&ar)]);
            assert_eq!(e.len(), 1);
            assert_eq!(e[0].key, v);
        }
        assert!(base.same_but_later_start(&ReplayKey {
            start_decoding_at: base.start_decoding_at + 1,
            ..base.clone()
        }));
        assert!(!base.same_but_later_start(&ReplayKey {
            start_decoding_at: base.start_decoding_at + 1,
            database: 6,
            ..base.clone()
        }));
        assert!(!base.same_but_later_start(&base));
    }

    #[test]
    fn a_writer_that_lost_the_race_changes_nothing() {
        let mut ar = area(1 << 16);
        store(&mut ar, &[entry("a", key(10), 1, 100, b"one")], None);
        let copy = ar[..copy_len(&ar)].to_vec();
        let late = plan_store(
            &copy,
            &[entry("a", key(10), 1, 200, b"late")],
            None,
            ar.len(),
        )
        .unwrap();
        store(&mut ar, &[entry("b", key(10), 1, 100, b"other")], None);
        let before = ar.clone();
        assert!(!apply(&mut ar, &late));
        assert_eq!(ar, before);
    }

    #[test]
    fn entries_of_another_format_are_ignored_and_dropped() {
        let mut ar = area(1 << 16);
        store(&mut ar, &[entry("a", key(10), 1, 100, b"one")], None);
        // Another build's entry after ours: same layout, another format number.
        let mut other = Vec::new();
        entry("b", key(10), 1, 100, b"two").encode(&mut other);
        other[4..8].copy_from_slice(&FORMAT.wrapping_add(1).to_le_bytes());
        let used = copy_len(&ar) - HEADER;
        ar[HEADER + used..HEADER + used + other.len()].copy_from_slice(&other);
        ar[16..24].copy_from_slice(&((used + other.len()) as u64).to_le_bytes());
        assert_eq!(live_states(&ar), vec![("a".into(), b"one".to_vec())]);
        // The next write drops it.
        store(&mut ar, &[entry("c", key(10), 1, 100, b"three")], None);
        let payload = &ar[HEADER..copy_len(&ar)];
        assert_eq!(scan(payload).iter().filter(|f| f.live).count(), 2);
        // An area another build made is rewritten whole.
        let mut foreign = area(1 << 16);
        foreign[4..8].copy_from_slice(&FORMAT.wrapping_add(1).to_le_bytes());
        assert!(entries(&foreign).is_empty());
        store(&mut foreign, &[entry("a", key(10), 1, 100, b"one")], None);
        assert_eq!(live_states(&foreign), vec![("a".into(), b"one".to_vec())]);
    }

    #[test]
    fn appends_copy_only_the_new_entries_and_compaction_keeps_the_smallest() {
        let one = entry("a", key(1), 1, 1, &[7u8; 100]);
        let len = one.encoded_len().unwrap();
        let mut ar = area(HEADER + 3 * len + 10);
        let copy = ar[..copy_len(&ar)].to_vec();
        let p = plan_store(&copy, std::slice::from_ref(&one), None, ar.len()).unwrap();
        assert_eq!(p.bytes_copied(), len);
        assert!(apply(&mut ar, &p));
        // Two more versions of "a" fit after it; the third compacts.
        for i in 2..=3u64 {
            let copy = ar[..copy_len(&ar)].to_vec();
            let e = entry("a", key(1), 1, i, &[7u8; 100]);
            let p = plan_store(&copy, &[e], None, ar.len()).unwrap();
            assert!(!p.rewrites());
            assert_eq!(p.bytes_copied(), len);
            assert!(apply(&mut ar, &p));
        }
        let copy = ar[..copy_len(&ar)].to_vec();
        let p = plan_store(
            &copy,
            &[entry("a", key(1), 1, 4, &[7u8; 100])],
            None,
            ar.len(),
        )
        .unwrap();
        assert!(p.rewrites());
        assert!(apply(&mut ar, &p));
        assert_eq!(entries(&ar[..copy_len(&ar)])[0].last_end, 4);
        assert_eq!(copy_len(&ar), HEADER + len);
        // Too much for the area: the largest is left out.
        let big = entry("big", key(1), 1, 1, &[0u8; 400]);
        let small = entry("small", key(1), 1, 1, b"s");
        let holds = store(&mut ar, &[big, small], None);
        assert!(holds.contains(&"small".to_string()));
        assert!(!holds.contains(&"big".to_string()));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut ar = area(4096);
        store(
            &mut ar,
            &[
                entry("a", key(1), 1, 1, b"abc"),
                entry("b", key(2), 1, 1, b"d"),
            ],
            None,
        );
        for _ in 0..20_000 {
            let mut copy = ar[..copy_len(&ar)].to_vec();
            let n = (next() % 4) as usize + 1;
            for _ in 0..n {
                let i = (next() as usize) % copy.len();
                copy[i] = next() as u8;
            }
            let _ = entries(&copy);
            if let Ok(p) = plan_store(&copy, &[entry("c", key(3), 2, 2, b"x")], None, 4096) {
                let mut scratch = copy.clone();
                scratch.resize(4096, 0);
                let _ = apply(&mut scratch, &p);
            }
        }
    }
}
