//! The deterministic mutator: stacked byte-level and structure-aware edits of a corpus
//! entry. Structure-aware means the target's count and length fields (and every aligned
//! 4- and 8-byte word) get the values that break parsers: 0, 1, -1, the count the data
//! would hold, one more, one less, 2^31-1, 2^32-1, 2^30, huge 64-bit sizes.

/// xorshift64*.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// A field the target's layout defines: its offset and width (4 or 8 bytes), and the
/// size of one element when it counts elements (for "the count the data would hold").
#[derive(Clone, Copy)]
pub struct Field {
    pub at: usize,
    pub width: usize,
    pub elem: usize,
}

fn interesting(r: &mut Rng, len: usize, f: Field) -> u64 {
    let fits = len
        .saturating_sub(f.at + f.width)
        .checked_div(f.elem)
        .unwrap_or(len) as u64;
    match r.below(16) {
        0 => 0,
        1 => 1,
        2 => u64::MAX,
        3 => fits,
        4 => fits + 1,
        5 => fits.saturating_sub(1),
        6 => i32::MAX as u64,
        7 => u32::MAX as u64,
        8 => 1 << 30,
        9 => (1 << 30) / f.elem.max(1) as u64 + 1,
        10 => i32::MIN as u32 as u64,
        11 => 1 << 62,
        12 => (u64::MAX / 4) + 1,
        13 => len as u64,
        14 => r.below(256) as u64,
        _ => r.next(),
    }
}

fn put(b: &mut [u8], at: usize, width: usize, v: u64) {
    if at + width <= b.len() {
        b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    }
}

/// Mutates `b` with 1–4 stacked edits; `fields` are the target's known fields, `other`
/// another corpus entry for splicing.
pub fn mutate(r: &mut Rng, b: &mut Vec<u8>, fields: &[Field], other: &[u8], max_len: usize) {
    for _ in 0..1 + r.below(4) {
        let len = b.len();
        match r.below(12) {
            // bit flip
            0 | 1 if len > 0 => {
                let i = r.below(len);
                b[i] ^= 1 << r.below(8);
            }
            // random byte
            2 if len > 0 => {
                let i = r.below(len);
                b[i] = r.next() as u8;
            }
            // a known field to an interesting value
            3 | 5 if !fields.is_empty() => {
                let f = fields[r.below(fields.len())];
                let v = interesting(r, len, f);
                put(b, f.at, f.width, v);
            }
            // a known field moved near its value: ±1..3, across the xid wrap-around
            // horizon (±2^31), or to the special xids 0..3
            4 if !fields.is_empty() => {
                let f = fields[r.below(fields.len())];
                if f.at + f.width <= len {
                    let mut cur = [0u8; 8];
                    cur[..f.width].copy_from_slice(&b[f.at..f.at + f.width]);
                    let c = u64::from_le_bytes(cur);
                    let d = 1 + r.below(3) as u64;
                    let v = match r.below(5) {
                        0 => c.wrapping_add(d),
                        1 => c.wrapping_sub(d),
                        2 => c.wrapping_add(1 << 31),
                        3 => c.wrapping_add(1 << 31).wrapping_add(d),
                        _ => r.below(4) as u64,
                    };
                    put(b, f.at, f.width, v);
                }
            }
            // any aligned word to an interesting value
            6 if len >= 4 => {
                let width = if r.chance(2) && len >= 8 { 8 } else { 4 };
                let at = r.below(len / width) * width;
                let v = interesting(r, len, Field { at, width, elem: 4 });
                put(b, at, width, v);
            }
            // truncate (anywhere, or by a few bytes)
            7 if len > 0 => {
                let n = if r.chance(2) {
                    r.below(len)
                } else {
                    len - 1 - r.below(len.min(8))
                };
                b.truncate(n);
            }
            // append random bytes, or a copy of a chunk
            8 => {
                let n = 1 + r.below(64);
                if r.chance(2) || len == 0 {
                    b.extend((0..n).map(|_| r.next() as u8));
                } else {
                    let s = r.below(len);
                    let e = (s + n).min(len);
                    let chunk = b[s..e].to_vec();
                    b.extend_from_slice(&chunk);
                }
            }
            // delete or duplicate a range in the middle
            9 if len > 1 => {
                let s = r.below(len);
                let e = (s + 1 + r.below(32)).min(len);
                if r.chance(2) {
                    b.drain(s..e);
                } else {
                    let chunk = b[s..e].to_vec();
                    let at = r.below(b.len() + 1);
                    b.splice(at..at, chunk);
                }
            }
            // splice with another entry
            10 if !other.is_empty() => {
                let cut = r.below(len + 1);
                let from = r.below(other.len());
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
            // runs of 0x00 / 0xff
            _ if len > 0 => {
                let s = r.below(len);
                let e = (s + 1 + r.below(16)).min(len);
                let v = if r.chance(2) { 0 } else { 0xff };
                b[s..e].fill(v);
            }
            _ => b.push(r.next() as u8),
        }
    }
    b.truncate(max_len);
}
