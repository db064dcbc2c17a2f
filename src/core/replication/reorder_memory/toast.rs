//! What reorderbuffer.c ReorderBufferToastReplace does to a change's size: while TOAST
//! chunks of the transaction are waiting (its `toast_hash` is set), every new row of a
//! table it replays is taken apart (heap_deform_tuple) and built again
//! (heap_form_tuple) with each on-disk TOAST pointer whose value is among the waiting
//! chunks replaced by an indirect pointer to the value rebuilt in memory. The pointer
//! shrinks from 18 bytes to 10 (an 8-byte shift: the attributes after it keep their
//! padding); finding the pointers takes the relation's attributes.

use rustc_hash::FxHashSet as HashSet;

use super::change::TupleBytes;

/// One attribute's `attlen` and `attalign` (`c`, `s`, `i` or `d`).
pub type AttLayout = (i16, u8);

/// `SizeofHeapTupleHeader`.
const HEADER: usize = 23;
/// `VARTAG_ONDISK` and the size of `varatt_external`.
const VARTAG_ONDISK: u8 = 18;
const EXTERNAL_ONDISK_SIZE: usize = 2 + 16;
/// An indirect pointer (`INDIRECT_POINTER_SIZE`): header, tag, a pointer.
const INDIRECT_POINTER_SIZE: usize = 2 + 8;

fn align(off: usize, a: u8) -> usize {
    let n = match a {
        b's' => 2,
        b'i' => 4,
        b'd' => 8,
        _ => 1,
    };
    off.div_ceil(n) * n
}

/// The growth of `t_len` (new minus old) when ReorderBufferToastReplace rebuilds `t` for a
/// relation of `layout` with the values `waiting` rebuilt. Errors say why it cannot be
/// told (the row does not fit the relation as the catalog describes it now).
pub fn toast_replace_growth(
    t: &TupleBytes,
    layout: &[AttLayout],
    waiting: &HashSet<u32>,
) -> Result<i64, String> {
    let natts = (t.infomask2 & 0x07FF) as usize;
    if natts != layout.len() {
        return Err(format!(
            "a row with {natts} attributes in a relation of {} (missing attributes are filled in)",
            layout.len()
        ));
    }
    let hasnull = t.infomask & 0x0001 != 0;
    let start = (t.t_hoff as usize)
        .checked_sub(HEADER)
        .filter(|s| *s <= t.data.len())
        .ok_or("a row header shorter than the tuple header")?;
    let bits = &t.data[..start];
    let is_null = |i: usize| hasnull && bits.get(i / 8).is_none_or(|b| b & (1 << (i % 8)) == 0);
    let tp = &t.data[start..];
    let (mut off, mut new_off) = (0usize, 0usize);
    let bad = || "a row that does not fit its relation's attributes".to_owned();
    for (i, &(attlen, attalign)) in layout.iter().enumerate() {
        if is_null(i) {
            continue;
        }
        match attlen {
            -1 => {
                if tp.get(off).copied().ok_or_else(bad)? == 0 {
                    off = align(off, attalign);
                }
                let b0 = tp.get(off).copied().ok_or_else(bad)?;
                let (size, external_ondisk) = if b0 == 0x01 {
                    let tag = tp.get(off + 1).copied().ok_or_else(bad)?;
                    if tag != VARTAG_ONDISK {
                        return Err(format!("a TOAST pointer of tag {tag} in a row"));
                    }
                    (EXTERNAL_ONDISK_SIZE, true)
                } else if b0 & 0x01 == 0x01 {
                    ((b0 >> 1) as usize, false)
                } else {
                    let h = tp.get(off..off + 4).ok_or_else(bad)?;
                    (
                        (u32::from_le_bytes([h[0], h[1], h[2], h[3]]) >> 2) as usize,
                        false,
                    )
                };
                if size == 0 {
                    return Err(bad());
                }
                let replaced = external_ondisk && {
                    let v = tp.get(off + 10..off + 14).ok_or_else(bad)?;
                    waiting.contains(&u32::from_ne_bytes([v[0], v[1], v[2], v[3]]))
                };
                let one_byte_header = b0 & 0x01 == 0x01;
                if !one_byte_header {
                    new_off = align(new_off, attalign);
                }
                off += size;
                new_off += if replaced {
                    INDIRECT_POINTER_SIZE
                } else {
                    size
                };
            }
            -2 => {
                let n = tp
                    .get(off..)
                    .ok_or_else(bad)?
                    .iter()
                    .position(|b| *b == 0)
                    .ok_or_else(bad)?;
                off += n + 1;
                new_off += n + 1;
            }
            n if n > 0 => {
                off = align(off, attalign) + n as usize;
                new_off = align(new_off, attalign) + n as usize;
            }
            _ => return Err(bad()),
        }
    }
    if off != tp.len() {
        return Err(bad());
    }
    Ok(new_off as i64 - off as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn external(valueid: u32) -> Vec<u8> {
        let mut v = vec![0x01, VARTAG_ONDISK];
        v.extend(20000i32.to_ne_bytes()); // va_rawsize
        v.extend(20000u32.to_ne_bytes()); // va_extinfo
        v.extend(valueid.to_ne_bytes());
        v.extend(16385u32.to_ne_bytes()); // va_toastrelid
        v
    }

    #[test]
    fn a_replaced_pointer_shrinks_the_row_by_eight_bytes() {
        // (int4, text): 4 bytes, then the pointer (no padding: 1-byte header)
        let mut data = 7i32.to_ne_bytes().to_vec();
        data.extend(external(900));
        let t = TupleBytes {
            infomask2: 2,
            infomask: 0,
            t_hoff: 24,
            data: [vec![0u8], data].concat(),
        };
        let layout = [(4, b'i'), (-1, b'i')];
        let mut w = HashSet::default();
        assert_eq!(toast_replace_growth(&t, &layout, &w), Ok(0));
        w.insert(900);
        assert_eq!(toast_replace_growth(&t, &layout, &w), Ok(-8));
    }

    #[test]
    fn the_attributes_after_the_pointer_keep_their_padding() {
        // (text, int8): pointer at 0 (18 bytes), int8 aligned at 24; rebuilt: 10, int8 at
        // 16 (an 8-byte shift keeps every alignment)
        let mut data = external(5);
        data.extend([0u8; 6]);
        data.extend(1i64.to_ne_bytes());
        let t = TupleBytes {
            infomask2: 2,
            infomask: 0,
            t_hoff: 24,
            data: [vec![0u8], data].concat(),
        };
        let w: HashSet<u32> = [5].into_iter().collect();
        assert_eq!(
            toast_replace_growth(&t, &[(-1, b'i'), (8, b'd')], &w),
            Ok(-8)
        );
    }

    #[test]
    fn rows_that_do_not_fit_are_not_guessed() {
        let t = TupleBytes {
            infomask2: 3,
            infomask: 0,
            t_hoff: 24,
            data: vec![0; 9],
        };
        assert!(toast_replace_growth(&t, &[(4, b'i'), (4, b'i')], &HashSet::default()).is_err());
        let t = TupleBytes {
            infomask2: 1,
            infomask: 0,
            t_hoff: 24,
            data: vec![0; 3],
        };
        assert!(toast_replace_growth(&t, &[(4, b'i')], &HashSet::default()).is_err());
    }
}
