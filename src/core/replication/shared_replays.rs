//! The slots' replays as pg_snapbuild keeps them in shared memory (the area
//! `pg_snapbuild replay state`, made when the library is preloaded): a sequence of
//! entries, one per slot, each the slot's name, the key of its decoder (restart_lsn,
//! whether it is being created, the initial xmin horizon while it is), the end of the
//! last record its replay took, and the replay serialized. Not a PostgreSQL structure:
//! pg_snapbuild's own, read and written only by it, and parsed with bounds checks.
//!
//! Entry layout, little-endian: total length u32 (this field included), name length u16,
//! name (UTF-8), restart_lsn u64, creating u8, initial xmin horizon u32, last end u64,
//! state length u32, state.

/// What identifies a slot's decoder: (restart_lsn, being created, initial xmin horizon
/// while it is). Another key is another decoder.
pub type ReplayKey = (u64, bool, u32);

/// One slot's replay as the area holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub key: ReplayKey,
    /// The end of the last record the replay took.
    pub last_end: u64,
    /// The replay, serialized.
    pub state: Vec<u8>,
}

impl Entry {
    pub fn encoded_len(&self) -> usize {
        4 + 2 + self.name.len() + 8 + 1 + 4 + 8 + 4 + self.state.len()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.encoded_len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(&self.key.0.to_le_bytes());
        out.push(u8::from(self.key.1));
        out.extend_from_slice(&self.key.2.to_le_bytes());
        out.extend_from_slice(&self.last_end.to_le_bytes());
        out.extend_from_slice(&(self.state.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.state);
    }
}

/// The entries of `bytes`, as [`Entry::encode`] wrote them, each with its encoded form;
/// parsing stops at the first entry that does not fit.
pub fn decode(bytes: &[u8]) -> Vec<(Entry, &[u8])> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (h, t) = (b.get(..n)?, b.get(n..)?);
        *b = t;
        Some(h)
    }
    let mut out = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 4 {
        let one = || -> Option<(Entry, &[u8], &[u8])> {
            let total = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let whole = rest.get(..total)?;
            let mut b = whole.get(4..)?;
            let name_len = u16::from_le_bytes(take(&mut b, 2)?.try_into().ok()?) as usize;
            let name = String::from_utf8(take(&mut b, name_len)?.to_vec()).ok()?;
            let restart = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
            let creating = take(&mut b, 1)?[0] != 0;
            let xmin = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?);
            let last_end = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
            let state_len = u32::from_le_bytes(take(&mut b, 4)?.try_into().ok()?) as usize;
            let state = take(&mut b, state_len)?.to_vec();
            let e = Entry {
                name,
                key: (restart, creating, xmin),
                last_end,
                state,
            };
            Some((e, whole, rest.get(total..)?))
        };
        let Some((e, whole, next)) = one() else {
            break;
        };
        out.push((e, whole));
        rest = next;
    }
    out
}

/// The area's new contents from its current contents `theirs` and the entries `mine`:
/// an entry of `mine` replaces theirs for the same slot unless theirs has the same key and
/// is further along; theirs for slots not in `live` (when given: every logical slot now)
/// are dropped; what does not fit in `room` bytes is left out, largest first. Returns the
/// bytes and the names of the slots they hold.
pub fn merge(
    theirs: &[u8],
    mine: &[Entry],
    live: Option<&[String]>,
    room: usize,
) -> (Vec<u8>, Vec<String>) {
    let theirs = decode(theirs);
    let mut chosen: Vec<(usize, &str, Vec<u8>)> = Vec::new();
    for e in mine {
        let keep_theirs = theirs
            .iter()
            .any(|(t, _)| t.name == e.name && t.key == e.key && t.last_end > e.last_end);
        if !keep_theirs {
            let mut b = Vec::with_capacity(e.encoded_len());
            e.encode(&mut b);
            chosen.push((b.len(), e.name.as_str(), b));
        }
    }
    for (t, whole) in &theirs {
        let replaced = chosen.iter().any(|(_, n, _)| *n == t.name);
        let gone = live.is_some_and(|l| !l.contains(&t.name));
        if !replaced && !gone {
            chosen.push((whole.len(), t.name.as_str(), whole.to_vec()));
        }
    }
    chosen.sort_by_key(|(len, _, _)| *len);
    let mut payload = Vec::new();
    let mut names = Vec::new();
    for (len, name, bytes) in chosen {
        if payload.len() + len > room {
            continue;
        }
        payload.extend_from_slice(&bytes);
        names.push(name.to_string());
    }
    (payload, names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, key: ReplayKey, last_end: u64, state: &[u8]) -> Entry {
        Entry {
            name: name.into(),
            key,
            last_end,
            state: state.to_vec(),
        }
    }

    #[test]
    fn entries_round_trip_and_a_truncated_tail_is_left_out() {
        let a = Entry {
            name: "a".into(),
            key: (0x1_0000_0028, true, 7),
            last_end: 99,
            state: b"{\"x\":1}".to_vec(),
        };
        let b = Entry {
            name: "slot_b".into(),
            key: (5, false, 0),
            last_end: 12,
            state: vec![],
        };
        let mut bytes = Vec::new();
        a.encode(&mut bytes);
        b.encode(&mut bytes);
        let got: Vec<Entry> = decode(&bytes).into_iter().map(|(e, _)| e).collect();
        assert_eq!(got, vec![a.clone(), b]);
        let got: Vec<Entry> = decode(&bytes[..bytes.len() - 1])
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        assert_eq!(got, vec![a]);
    }

    #[test]
    fn merge_keeps_the_further_replay_of_the_same_decoder() {
        let mut area = Vec::new();
        entry("a", (10, false, 0), 500, b"theirs-a").encode(&mut area);
        entry("b", (20, false, 0), 100, b"theirs-b").encode(&mut area);
        entry("gone", (30, false, 0), 100, b"x").encode(&mut area);
        let mine = [
            // behind theirs, same key: theirs stays
            entry("a", (10, false, 0), 400, b"mine-a"),
            // ahead: mine
            entry("b", (20, false, 0), 200, b"mine-b"),
            // new
            entry("c", (5, true, 9), 50, b"mine-c"),
        ];
        let live = ["a".to_string(), "b".to_string(), "c".to_string()];
        let (bytes, names) = merge(&area, &mine, Some(&live), 1 << 20);
        let mut got: Vec<(String, Vec<u8>)> = decode(&bytes)
            .into_iter()
            .map(|(e, _)| (e.name, e.state))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("a".into(), b"theirs-a".to_vec()),
                ("b".into(), b"mine-b".to_vec()),
                ("c".into(), b"mine-c".to_vec())
            ]
        );
        assert_eq!(names.len(), 3);
        // Another key (restart_lsn moved): mine, even if theirs went further.
        let (bytes, _) = merge(
            &bytes,
            &[entry("a", (11, false, 0), 1, b"new-a")],
            None,
            1 << 20,
        );
        let a = decode(&bytes)
            .into_iter()
            .find(|(e, _)| e.name == "a")
            .unwrap()
            .0;
        assert_eq!(a.state, b"new-a");
        // Without `live`, slots not mentioned stay.
        assert_eq!(decode(&bytes).len(), 3);
    }

    #[test]
    fn merge_leaves_out_what_does_not_fit_largest_first() {
        let mine = [
            entry("big", (1, false, 0), 1, &[0u8; 100]),
            entry("small", (1, false, 0), 1, b"s"),
        ];
        let room = mine[1].encoded_len() + 10;
        let (bytes, names) = merge(&[], &mine, None, room);
        assert_eq!(names, vec!["small".to_string()]);
        assert_eq!(bytes.len(), mine[1].encoded_len());
    }
}
