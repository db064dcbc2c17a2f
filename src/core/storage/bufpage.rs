//! A heap page as bytes: its header and line pointers as storage/bufpage.h and
//! storage/itemid.h lay them out (PageGetMaxOffsetNumber, PageGetItemId, ItemIdIsNormal),
//! read with bounds checks so that nothing outside the page is touched, and the tuple
//! headers the normal line pointers lead to.

use crate::include::htup_details::{TupleHeader, SIZEOF_HEAP_TUPLE_HEADER};

/// `SizeOfPageHeaderData`.
pub const SIZE_OF_PAGE_HEADER_DATA: usize = 24;
/// `sizeof(ItemIdData)`.
pub const SIZE_OF_ITEM_ID: usize = 4;

/// `lp_flags` values.
pub const LP_UNUSED: u8 = 0;
pub const LP_NORMAL: u8 = 1;
pub const LP_REDIRECT: u8 = 2;
pub const LP_DEAD: u8 = 3;

/// The fields of `PageHeaderData` this crate reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PageHeader {
    pub lsn: u64,
    pub lower: u16,
    pub upper: u16,
    pub special: u16,
}

/// One line pointer (`ItemIdData`: 15 bits offset, 2 bits flags, 15 bits length).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ItemId {
    pub offnum: u16,
    pub off: u16,
    pub flags: u8,
    pub len: u16,
}

impl ItemId {
    /// Splits the 32-bit word the way the compiler lays out the bit-fields: declared
    /// first is least significant on little-endian targets, most significant on
    /// big-endian ones.
    pub fn from_word(offnum: u16, w: u32) -> Self {
        let (off, flags, len) = if cfg!(target_endian = "little") {
            (w & 0x7fff, (w >> 15) & 3, (w >> 17) & 0x7fff)
        } else {
            ((w >> 17) & 0x7fff, (w >> 15) & 3, w & 0x7fff)
        };
        ItemId {
            offnum,
            off: off as u16,
            flags: flags as u8,
            len: len as u16,
        }
    }
}

/// A normal line pointer whose tuple lies inside the page, with its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeapItem {
    pub item: ItemId,
    pub header: TupleHeader,
}

/// Why a page cannot be read safely.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PageError {
    /// Fewer bytes than a page header.
    TooShort(usize),
    /// pd_lower / pd_upper / pd_special out of order or outside the page.
    BadHeader {
        lower: u16,
        upper: u16,
        special: u16,
    },
    /// A normal line pointer whose tuple would reach outside the tuple space, or is too
    /// short to hold a tuple header.
    ItemOutside(ItemId),
}

impl PageError {
    pub fn text(&self) -> String {
        match self {
            PageError::TooShort(n) => format!("page has only {n} bytes"),
            PageError::BadHeader {
                lower,
                upper,
                special,
            } => format!(
                "page header is corrupt: lower = {lower}, upper = {upper}, special = {special}"
            ),
            PageError::ItemOutside(i) => format!(
                "line pointer {} is corrupt: offset {}, length {}",
                i.offnum, i.off, i.len
            ),
        }
    }
}

/// The header of `page` and its line pointers; a new (all-zero) page has none.
pub fn page_line_pointers(page: &[u8]) -> Result<(PageHeader, Vec<ItemId>), PageError> {
    if page.len() < SIZE_OF_PAGE_HEADER_DATA {
        return Err(PageError::TooShort(page.len()));
    }
    let u16_at = |o: usize| u16::from_ne_bytes([page[o], page[o + 1]]);
    let u32_at = |o: usize| u32::from_ne_bytes([page[o], page[o + 1], page[o + 2], page[o + 3]]);
    let h = PageHeader {
        lsn: ((u32_at(0) as u64) << 32) | u32_at(4) as u64,
        lower: u16_at(12),
        upper: u16_at(14),
        special: u16_at(16),
    };
    // PageIsNew: never initialized, no line pointers.
    if h.upper == 0 {
        return Ok((h, Vec::new()));
    }
    let (lower, upper, special) = (h.lower as usize, h.upper as usize, h.special as usize);
    if lower < SIZE_OF_PAGE_HEADER_DATA || lower > upper || upper > special || special > page.len()
    {
        return Err(PageError::BadHeader {
            lower: h.lower,
            upper: h.upper,
            special: h.special,
        });
    }
    let n = (lower - SIZE_OF_PAGE_HEADER_DATA) / SIZE_OF_ITEM_ID;
    let items = (0..n)
        .map(|i| {
            let at = SIZE_OF_PAGE_HEADER_DATA + i * SIZE_OF_ITEM_ID;
            ItemId::from_word(i as u16 + 1, u32_at(at))
        })
        .collect();
    Ok((h, items))
}

/// The normal line pointers of a heap page with their tuple headers. A normal line
/// pointer must point into [pd_upper, pd_special) and be long enough for a tuple
/// header; otherwise the page is refused.
pub fn heap_items(page: &[u8]) -> Result<(PageHeader, Vec<HeapItem>), PageError> {
    let (h, lps) = page_line_pointers(page)?;
    let mut out = Vec::new();
    for lp in lps {
        if lp.flags != LP_NORMAL {
            continue;
        }
        let (off, len) = (lp.off as usize, lp.len as usize);
        if off < h.upper as usize
            || off + len > h.special as usize
            || len < SIZEOF_HEAP_TUPLE_HEADER
        {
            return Err(PageError::ItemOutside(lp));
        }
        let header = TupleHeader::parse(&page[off..off + len]).ok_or(PageError::ItemOutside(lp))?;
        out.push(HeapItem { item: lp, header });
    }
    Ok((h, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(off: u32, flags: u32, len: u32) -> u32 {
        if cfg!(target_endian = "little") {
            off | (flags << 15) | (len << 17)
        } else {
            (off << 17) | (flags << 15) | len
        }
    }

    fn page(items: &[(u32, u32, u32)], upper: u16) -> Vec<u8> {
        let mut p = vec![0u8; 8192];
        let lower = (24 + 4 * items.len()) as u16;
        p[12..14].copy_from_slice(&lower.to_ne_bytes());
        p[14..16].copy_from_slice(&upper.to_ne_bytes());
        p[16..18].copy_from_slice(&8192u16.to_ne_bytes());
        for (i, (o, f, l)) in items.iter().enumerate() {
            p[24 + 4 * i..28 + 4 * i].copy_from_slice(&word(*o, *f, *l).to_ne_bytes());
        }
        p
    }

    #[test]
    fn reads_normal_items_only() {
        let mut p = page(&[(8000, 1, 30), (0, 0, 0), (3, 2, 0), (7960, 1, 40)], 7960);
        p[8000..8004].copy_from_slice(&123u32.to_ne_bytes());
        let (_, items) = heap_items(&p).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!((items[0].item.offnum, items[0].header.raw_xmin), (1, 123));
        assert_eq!(items[1].item.offnum, 4);
    }

    #[test]
    fn refuses_pointers_outside_the_tuple_space() {
        for bad in [(8180, 1, 30), (100, 1, 30), (8000, 1, 10)] {
            let p = page(&[bad], 7960);
            assert!(
                matches!(heap_items(&p), Err(PageError::ItemOutside(_))),
                "{bad:?}"
            );
        }
        let mut p = page(&[], 7960);
        p[12..14].copy_from_slice(&9000u16.to_ne_bytes());
        assert!(matches!(heap_items(&p), Err(PageError::BadHeader { .. })));
        assert_eq!(heap_items(&[0u8; 8192]).unwrap().1.len(), 0); // new page
        assert!(heap_items(&[0u8; 10]).is_err());
    }
}
