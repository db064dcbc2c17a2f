//! Materialize-mode set-returning functions: the protocol contrib pg_walinspect's
//! functions use (funcapi.c InitMaterializedSRF, then tuplestore_putvalues per row).
//!
//! pgrx's `TableIterator` is value-per-call: one function call, one heap tuple and one
//! per-call context reset per row, and the executor copies each tuple into its own
//! tuplestore anyway (a function in FROM is always read whole first, nodeFunctionscan.c).
//! Here the function is called once and puts every row into that tuplestore itself.
//!
//! The type is called `TableIterator` because `#[pg_extern]` reads a function's
//! `RETURNS TABLE (…)` from the `name!(…)` columns of a return type of that name: a
//! function switching to this one keeps its SQL signature.

use std::marker::PhantomData;

use pgrx::callconv::{BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::pg_sys;
use pgrx::PgSqlErrorCode as C;

use crate::adapter::raise;

/// The column slots of the row being written: [`RowSlots::put`] for each column, `None`
/// for NULL, then [`RowSlots::null_mask`]. Every column must be put for every row.
pub struct RowSlots<'s> {
    values: &'s mut [pg_sys::Datum],
    nulls: &'s mut [bool],
    /// Bit i set: column i is NULL (columns past 64 are not tracked here).
    mask: u64,
    /// `ablation-no-rows`: a tuple was formed before, and this row is to be that one again.
    #[cfg(feature = "ablation-no-rows")]
    formed_before: bool,
    #[cfg(feature = "ablation-no-rows")]
    repeat: bool,
}

impl RowSlots<'_> {
    /// Column `i` (0-based, in `RETURNS TABLE` order) is `datum` (NULL when `None`);
    /// returns whether it is NULL. An index past the row type's columns is ignored (the
    /// row type and the writer are declared from one list, so it does not happen).
    /// [`RowSlots::null_mask`] must follow, once every column is put.
    #[inline(always)]
    pub fn put(&mut self, i: usize, datum: Option<pg_sys::Datum>) -> bool {
        let null = datum.is_none();
        if let (Some(v), Some(n)) = (self.values.get_mut(i), self.nulls.get_mut(i)) {
            *v = datum.unwrap_or(pg_sys::Datum::from(0));
            *n = null;
        }
        null
    }

    /// The NULLs of the row just put: bit i set when column i is NULL (the writer keeps
    /// it as it goes: one register, not a read and write of memory per column).
    #[inline(always)]
    pub fn null_mask(&mut self, mask: u64) {
        self.mask = mask;
    }

    /// `ablation-no-rows` (scripts/bench_ablation.sh): when a tuple was formed before, this
    /// row is that tuple again, its columns left unput, and true; else false.
    #[cfg(feature = "ablation-no-rows")]
    pub fn repeat_last(&mut self) -> bool {
        self.repeat = self.formed_before;
        self.repeat
    }
}

/// A set of rows of the columns `Columns` (a tuple of `name!(…)` types, as for pgrx's
/// type of this name), produced by `next`: it writes the next row and returns true, or
/// returns false at the end. Datums it allocates with palloc are freed after each row.
pub struct TableIterator<'a, Columns> {
    next: Box<dyn FnMut(&mut RowSlots) -> bool + 'a>,
    _columns: PhantomData<Columns>,
}

impl<'a, Columns> TableIterator<'a, Columns> {
    /// The rows `next` writes, one per call, until it returns false.
    pub fn new(next: impl FnMut(&mut RowSlots) -> bool + 'a) -> Self {
        TableIterator {
            next: Box::new(next),
            _columns: PhantomData,
        }
    }
}

// SAFETY: `box_into` returns the function's (NULL) result datum after handing the
// executor the tuplestore through the ReturnSetInfo, as the materialize protocol asks
// (execSRF.c ExecMakeTableFunctionResult: returnMode SFRM_Materialize, isDone left
// ExprSingleResult, setResult and setDesc in per-query memory).
unsafe impl<Columns> BoxRet for TableIterator<'_, Columns> {
    unsafe fn box_into<'fcx>(mut self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        unsafe {
            let mut set = MaterializedSet::begin(fcinfo.as_mut_ptr());
            while set.row(|slots| (self.next)(slots)) {}
            fcinfo.return_null()
        }
    }
}

/// A materialize-mode result being filled (funcapi.c InitMaterializedSRF's protocol):
/// the tuplestore and row type handed to the executor, and what forms each row. For a
/// function that stores rows as it goes (a raw `extern "C"` function; `#[pg_extern]`
/// ones return a [`TableIterator`]); it returns a NULL datum once the rows are stored.
pub struct MaterializedSet {
    store: *mut pg_sys::Tuplestorestate,
    desc: pg_sys::TupleDesc,
    per_query: pg_sys::MemoryContext,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
    former: TupleFormer,
    buf: Vec<u64>,
    row_cx: pgrx::PgMemoryContexts,
    #[cfg(feature = "ablation-no-rows")]
    last: Option<pg_sys::HeapTupleData>,
}

impl MaterializedSet {
    /// Hands the call's executor a tuplestore of the function's row type (created in
    /// per-query memory, random access when allowed). Errors: `feature_not_supported`
    /// (0A000) where a set cannot be taken; `datatype_mismatch` (42804) when the result
    /// type is not a row type.
    ///
    /// # Safety
    /// `f` is the call's own `FunctionCallInfo`, and the set is filled during that call.
    pub unsafe fn begin(f: pg_sys::FunctionCallInfo) -> Self {
        unsafe {
            let rsinfo = (*f).resultinfo as *mut pg_sys::ReturnSetInfo;
            if rsinfo.is_null()
                || !pgrx::is_a(rsinfo.cast(), pg_sys::NodeTag::T_ReturnSetInfo)
                || (*rsinfo).allowedModes & pg_sys::SetFunctionReturnMode::SFRM_Materialize as i32
                    == 0
            {
                raise(
                    C::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "set-valued function called in context that cannot accept a set",
                );
            }
            let per_query = (*(*rsinfo).econtext).ecxt_per_query_memory;
            let (desc, store) = pgrx::PgMemoryContexts::For(per_query).switch_to(|_| {
                let mut desc: pg_sys::TupleDesc = std::ptr::null_mut();
                let class = pg_sys::get_call_result_type(f, std::ptr::null_mut(), &mut desc);
                if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || desc.is_null() {
                    raise(
                        C::ERRCODE_DATATYPE_MISMATCH,
                        "return type must be a row type",
                    );
                }
                let desc = pg_sys::CreateTupleDescCopy(desc);
                let random = (*rsinfo).allowedModes
                    & pg_sys::SetFunctionReturnMode::SFRM_Materialize_Random as i32
                    != 0;
                (
                    desc,
                    pg_sys::tuplestore_begin_heap(random, false, pg_sys::work_mem),
                )
            });
            (*rsinfo).returnMode = pg_sys::SetFunctionReturnMode::SFRM_Materialize;
            (*rsinfo).setResult = store;
            (*rsinfo).setDesc = desc;
            let natts = usize::try_from((*desc).natts).unwrap_or(0);
            MaterializedSet {
                store,
                desc,
                per_query,
                values: vec![pg_sys::Datum::from(0); natts],
                nulls: vec![true; natts],
                former: TupleFormer::new(desc),
                buf: Vec::new(),
                row_cx: pgrx::PgMemoryContexts::new("pg_snapbuild row"),
                #[cfg(feature = "ablation-no-rows")]
                last: None,
            }
        }
    }

    /// The query's memory, which outlives the rows (for datums shared by many rows,
    /// [`crate::sql::types::StaticTexts`]).
    pub fn per_query_memory(&self) -> pg_sys::MemoryContext {
        self.per_query
    }

    /// The row type's number of columns.
    pub fn columns(&self) -> usize {
        self.values.len()
    }

    /// One row: `write` puts its columns (in a memory context reset after the row) and
    /// returns true, and the row is stored; or it returns false and nothing is stored.
    /// Returns what `write` returned.
    pub fn row(&mut self, write: impl FnOnce(&mut RowSlots) -> bool) -> bool {
        let mut mask = u64::MAX;
        #[cfg(feature = "ablation-no-rows")]
        let mut repeat = false;
        let (values, nulls) = (&mut self.values, &mut self.nulls);
        #[cfg(feature = "ablation-no-rows")]
        let formed_before = self.last.is_some();
        let more = unsafe {
            self.row_cx.switch_to(|_| {
                let mut slots = RowSlots {
                    values,
                    nulls,
                    mask,
                    #[cfg(feature = "ablation-no-rows")]
                    formed_before,
                    #[cfg(feature = "ablation-no-rows")]
                    repeat: false,
                };
                let more = write(&mut slots);
                mask = slots.mask;
                #[cfg(feature = "ablation-no-rows")]
                {
                    repeat = slots.repeat;
                }
                more
            })
        };
        if !more {
            return false;
        }
        unsafe {
            #[cfg(feature = "ablation-no-rows")]
            let repeated = match (repeat, self.last.as_mut()) {
                (true, Some(tuple)) => {
                    pg_sys::tuplestore_puttuple(self.store, tuple);
                    true
                }
                _ => false,
            };
            #[cfg(not(feature = "ablation-no-rows"))]
            let repeated = false;
            if !repeated {
                // Both copy the row into the store's own memory.
                match self
                    .former
                    .form_masked(&self.values, &self.nulls, mask, &mut self.buf)
                {
                    Some(mut tuple) => {
                        pg_sys::tuplestore_puttuple(self.store, &mut tuple);
                        #[cfg(feature = "ablation-no-rows")]
                        {
                            self.last = Some(tuple);
                        }
                    }
                    None => pg_sys::tuplestore_putvalues(
                        self.store,
                        self.desc,
                        self.values.as_mut_ptr(),
                        self.nulls.as_mut_ptr(),
                    ),
                }
            }
            // Most rows allocate nothing (their texts are shared datums): no reset then.
            if !(*self.row_cx.value()).isReset {
                self.row_cx.reset();
            }
        }
        true
    }
}

/// One attribute's storage, as heaptuple.c reads it from pg_attribute: `attlen`, the
/// alignment in bytes (`attalign`), `attbyval`, and whether a varlena may be stored with a
/// 1-byte header (`attstorage` other than plain); with the attribute's index, as a step
/// of a null pattern's plan.
#[derive(Clone, Copy, Debug)]
struct Att {
    index: u16,
    len: i16,
    align: u16,
    byval: bool,
    packable: bool,
}

/// The attributes present in rows of one null pattern (bit i of `mask`: attribute i is
/// NULL), in order, and the header size of such a tuple.
struct Plan {
    mask: u64,
    present: Box<[Att]>,
    hoff: usize,
}

/// Forms heap tuples of one row type: heaptuple.c heap_form_tuple (heap_compute_data_size
/// and heap_fill_tuple) re-run for the storage of that type's attributes, read once.
/// PostgreSQL's own does the same work per attribute through generic calls; a trace's
/// rows have thirty-two columns, and forming them was the largest single cost of
/// `all_records`.
///
/// It handles what the trace's columns hold: fixed-length values (by value or not) and
/// in-memory varlenas with a 1- or 4-byte header. Anything else (an external or expanded
/// varlena, a cstring) is left to PostgreSQL: [`TupleFormer::form`] returns `None`.
/// A `#[pg_test]` compares its tuples with heap_form_tuple's byte for byte.
pub struct TupleFormer {
    atts: Vec<Att>,
    typeid: pg_sys::Oid,
    typmod: i32,
    /// The plan of each null pattern met, and the one used last.
    plans: Vec<Plan>,
    last: usize,
    /// The tuple formed last, while the caller's buffer still holds it (see
    /// [`TupleFormer::reshape`]).
    formed: Option<Formed>,
    offsets: Vec<u32>,
    /// Tuples formed in place of the one before (for the tests).
    #[cfg(any(test, feature = "pg_test"))]
    pub reshaped: usize,
}

/// Where the last tuple lies: the plan it was formed by and the buffer holding it (address
/// and length in words, to know it is still there); `TupleFormer::offsets` has each
/// present attribute's offset in its data area, in plan order.
struct Formed {
    plan: usize,
    buf: *const u64,
    words: usize,
}

/// `MAXALIGN` of the platform (8 on every one PostgreSQL builds for with pgrx).
const MAXIMUM_ALIGNOF: usize = pg_sys::MAXIMUM_ALIGNOF as usize;

#[inline]
fn align_up(off: usize, align: usize) -> usize {
    (off + align - 1) & !(align - 1)
}

/// VARATT_CAN_MAKE_SHORT's size test for an uncompressed 4-byte-header varlena of total
/// size `size`: its data fits a 1-byte header (VARATT_SHORT_MAX, 127 bytes with it).
#[inline]
fn can_make_short(size: usize) -> bool {
    size - 4 < 0x7F
}

/// Stores the value `v` of fixed-length attribute `a` at `at` (heaptuple.c fill_val for
/// such an attribute: by value, 1, 2, 4 or 8 bytes; else `attlen` bytes copied).
///
/// # Safety
/// `at` has room for `a.len` bytes; a by-reference `v` points to that many.
#[inline(always)]
unsafe fn store_fixed(a: &Att, v: pg_sys::Datum, at: *mut u8) {
    unsafe {
        if a.byval {
            let x = v.value();
            match a.len {
                1 => *at = x as u8,
                2 => std::ptr::write_unaligned(at.cast::<u16>(), x as u16),
                4 => std::ptr::write_unaligned(at.cast::<u32>(), x as u32),
                _ => std::ptr::write_unaligned(at.cast::<u64>(), x as u64),
            }
        } else {
            std::ptr::copy_nonoverlapping(v.cast_mut_ptr::<u8>(), at, a.len as usize);
        }
    }
}

/// A varlena's first header byte and, for a 4-byte header, its total size (VARSIZE).
#[inline]
unsafe fn varlena_header(p: *const u8) -> (u8, usize) {
    unsafe {
        let b = *p;
        if b & 0x01 == 0 {
            let word = u32::from_le_bytes(std::ptr::read_unaligned(p.cast::<[u8; 4]>()));
            (b, ((word >> 2) & 0x3FFF_FFFF) as usize)
        } else {
            (b, 0)
        }
    }
}

impl TupleFormer {
    /// The former of `desc`'s row type.
    ///
    /// # Safety
    /// `desc` is a valid TupleDesc.
    pub unsafe fn new(desc: pg_sys::TupleDesc) -> Self {
        unsafe {
            let d = pgrx::PgTupleDesc::from_pg_unchecked(desc);
            let atts = (0..d.len())
                .filter_map(|i| d.get(i).map(|a| (i, a)))
                .map(|(i, a)| Att {
                    index: i as u16,
                    len: a.attlen,
                    align: match a.attalign as u8 {
                        b'c' => 1,
                        b's' => 2,
                        b'i' => 4,
                        _ => 8,
                    },
                    byval: a.attbyval,
                    packable: a.attlen == -1 && a.attstorage as u8 != b'p',
                })
                .collect();
            TupleFormer {
                atts,
                typeid: (*desc).tdtypeid,
                typmod: (*desc).tdtypmod,
                plans: Vec::new(),
                last: 0,
                formed: None,
                offsets: Vec::new(),
                #[cfg(any(test, feature = "pg_test"))]
                reshaped: 0,
            }
        }
    }

    /// The index in `plans` of the plan for null pattern `mask`.
    fn plan(&mut self, mask: u64) -> usize {
        if self.plans.get(self.last).is_some_and(|p| p.mask == mask) {
            return self.last;
        }
        if let Some(at) = self.plans.iter().position(|p| p.mask == mask) {
            self.last = at;
        } else {
            // Rows of a few kinds only: a bounded set of patterns.
            if self.plans.len() >= 64 {
                self.plans.clear();
                self.formed = None;
            }
            let natts = self.atts.len();
            let bits = std::mem::offset_of!(pg_sys::HeapTupleHeaderData, t_bits);
            let hoff = align_up(
                bits + if mask != 0 { natts.div_ceil(8) } else { 0 },
                MAXIMUM_ALIGNOF,
            );
            let present = self
                .atts
                .iter()
                .filter(|a| mask & (1 << a.index) == 0)
                .copied()
                .collect();
            self.plans.push(Plan {
                mask,
                present,
                hoff,
            });
            self.last = self.plans.len() - 1;
        }
        self.last
    }

    /// The tuple of `values` formed by plan `at` in place of the last one, when `buf`
    /// still holds that one, it was formed by the same plan (same NULLs), and every
    /// varlena of `values` is stored exactly as the one at its place (same bytes, so same
    /// length): then every attribute lies where it lay, the header is unchanged, and only
    /// the fixed-length attributes are written. Rows of one kind mostly differ only in
    /// those (LSNs, xids, flags; their texts are the same few strings). `None` otherwise.
    ///
    /// # Safety
    /// As for [`TupleFormer::form`].
    unsafe fn reshape(
        &mut self,
        at: usize,
        values: &[pg_sys::Datum],
        buf: &mut [u64],
    ) -> Option<pg_sys::HeapTupleData> {
        let formed = self.formed.as_ref()?;
        if formed.plan != at || formed.buf != buf.as_ptr() || formed.words != buf.len() {
            return None;
        }
        let plan = &self.plans[at];
        if self.offsets.len() != plan.present.len() {
            return None;
        }
        let base = buf.as_mut_ptr().cast::<u8>();
        unsafe {
            let data = base.add(plan.hoff);
            let td = base.cast::<pg_sys::HeapTupleHeaderData>();
            let total = ((*td).t_choice.t_datum.datum_len_ as u32 >> 2) as usize;
            let room = total.checked_sub(plan.hoff)?;
            // Every varlena first: nothing is written unless all are stored as they are.
            for (a, &off) in plan.present.iter().zip(self.offsets.iter()) {
                if a.len != -1 {
                    continue;
                }
                let off = off as usize;
                let p = values[a.index as usize].cast_mut_ptr::<u8>();
                let (b, size) = varlena_header(p);
                let (head, body, n): (Option<u8>, *const u8, usize) =
                    if b == 0x01 || (b & 0x01 == 0 && size < 4) {
                        return None;
                    } else if b & 0x01 == 0x01 {
                        (None, p, ((b >> 1) & 0x7F) as usize)
                    } else if a.packable && b & 0x03 == 0 && can_make_short(size) {
                        (Some((((size - 3) as u8) << 1) | 0x01), p.add(4), size - 4)
                    } else {
                        (None, p, size)
                    };
                let stored = head.map_or(0, |_| 1) + n;
                if off + stored > room {
                    return None;
                }
                let at = data.add(off);
                let body_at = match head {
                    Some(h) if *at != h => return None,
                    Some(_) => at.add(1),
                    None => at,
                };
                if std::slice::from_raw_parts(body_at, n) != std::slice::from_raw_parts(body, n) {
                    return None;
                }
            }
            for (a, &off) in plan.present.iter().zip(self.offsets.iter()) {
                if a.len == -1 {
                    continue;
                }
                let (n, off) = (a.len as usize, off as usize);
                if off + n > room {
                    return None;
                }
                store_fixed(a, values[a.index as usize], data.add(off));
            }
            #[cfg(any(test, feature = "pg_test"))]
            {
                self.reshaped += 1;
            }
            let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
            tuple.t_len = total as u32;
            tuple.t_self = (*td).t_ctid;
            tuple.t_tableOid = pg_sys::InvalidOid;
            tuple.t_data = td;
            Some(tuple)
        }
    }

    /// The heap tuple of `values` / `nulls` (one per attribute), built in `buf` (which
    /// it points into, so it lives as long as `buf` is not touched), or `None` for a
    /// row it leaves to PostgreSQL.
    ///
    /// # Safety
    /// Every non-null datum is a valid value of its attribute's type.
    pub unsafe fn form(
        &mut self,
        values: &[pg_sys::Datum],
        nulls: &[bool],
        buf: &mut Vec<u64>,
    ) -> Option<pg_sys::HeapTupleData> {
        let mask = nulls
            .iter()
            .take(64)
            .enumerate()
            .fold(0u64, |m, (i, null)| m | (u64::from(*null) << i));
        unsafe { self.form_masked(values, nulls, mask, buf) }
    }

    /// [`TupleFormer::form`] with the null pattern given: bit i of `mask` set when
    /// `nulls[i]` is.
    ///
    /// # Safety
    /// As for `form`, and `mask` matches `nulls`.
    pub unsafe fn form_masked(
        &mut self,
        values: &[pg_sys::Datum],
        nulls: &[bool],
        mask: u64,
        buf: &mut Vec<u64>,
    ) -> Option<pg_sys::HeapTupleData> {
        let natts = self.atts.len();
        if cfg!(target_endian = "big")
            || natts == 0
            || natts > 64
            || values.len() != natts
            || nulls.len() != natts
        {
            return None;
        }
        let mask = mask & (u64::MAX >> (64 - natts));
        debug_assert!((0..natts).all(|i| nulls[i] == (mask & (1 << i) != 0)));
        // The attributes present, by null pattern: rows of one kind share theirs, and
        // walking only those keeps the loops below free of unpredictable branches.
        let at = self.plan(mask);
        if let Some(tuple) = unsafe { self.reshape(at, values, buf) } {
            return Some(tuple);
        }
        self.formed = None;
        let plan = &self.plans[at];
        let has_null = mask != 0;
        let hoff = plan.hoff;
        // heap_compute_data_size
        let mut len = 0usize;
        for a in plan.present.iter() {
            let v = values[a.index as usize];
            match a.len {
                -1 => {
                    let (b, size) = unsafe { varlena_header(v.cast_mut_ptr::<u8>()) };
                    if b == 0x01 || (b & 0x01 == 0 && size < 4) {
                        return None; // external or expanded (or no valid header)
                    } else if b & 0x01 == 0x01 {
                        len += ((b >> 1) & 0x7F) as usize; // 1-byte header: no alignment
                    } else if a.packable && b & 0x03 == 0 && can_make_short(size) {
                        len += size - 3; // will get a 1-byte header: no alignment
                    } else {
                        len = align_up(len, a.align as usize) + size;
                    }
                }
                n if n > 0 && (!a.byval || matches!(n, 1 | 2 | 4 | 8)) => {
                    len = align_up(len, a.align as usize) + n as usize;
                }
                _ => return None,
            }
        }
        let total = hoff + len;
        let u32_total = u32::try_from(total).ok().filter(|&t| t < 0x3FFF_FFFF)?;
        buf.clear();
        buf.resize(total.div_ceil(8), 0);
        let base = buf.as_mut_ptr().cast::<u8>();
        unsafe {
            // heap_fill_tuple
            let data = base.add(hoff);
            let bits = std::mem::offset_of!(pg_sys::HeapTupleHeaderData, t_bits);
            let bitmap = base.add(bits);
            let mut infomask: u16 = if has_null {
                pg_sys::HEAP_HASNULL as u16
            } else {
                0
            };
            if has_null {
                // The null bitmap: a set bit for each attribute present.
                let present_bits = !mask & (u64::MAX >> (64 - natts));
                let bytes = present_bits.to_le_bytes();
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), bitmap, natts.div_ceil(8));
            }
            let mut off = 0usize;
            let offsets = &mut self.offsets;
            offsets.clear();
            for a in plan.present.iter() {
                let v = values[a.index as usize];
                if a.len == -1 {
                    infomask |= pg_sys::HEAP_HASVARWIDTH as u16;
                    let p = v.cast_mut_ptr::<u8>();
                    let (b, size) = varlena_header(p);
                    if b & 0x01 == 0x01 {
                        let n = ((b >> 1) & 0x7F) as usize;
                        offsets.push(off as u32);
                        std::ptr::copy_nonoverlapping(p, data.add(off), n);
                        off += n;
                    } else if a.packable && b & 0x03 == 0 && can_make_short(size) {
                        let n = size - 3;
                        offsets.push(off as u32);
                        *data.add(off) = ((n as u8) << 1) | 0x01;
                        std::ptr::copy_nonoverlapping(p.add(4), data.add(off + 1), n - 1);
                        off += n;
                    } else {
                        off = align_up(off, a.align as usize);
                        offsets.push(off as u32);
                        std::ptr::copy_nonoverlapping(p, data.add(off), size);
                        off += size;
                    }
                } else {
                    let n = a.len as usize;
                    off = align_up(off, a.align as usize);
                    offsets.push(off as u32);
                    store_fixed(a, v, data.add(off));
                    off += n;
                }
            }
            debug_assert_eq!(off, len);
            self.formed = Some(Formed {
                plan: at,
                buf: buf.as_ptr(),
                words: buf.len(),
            });
            let td = base.cast::<pg_sys::HeapTupleHeaderData>();
            (*td).t_choice.t_datum.datum_len_ = (u32_total << 2) as i32;
            (*td).t_choice.t_datum.datum_typmod = self.typmod;
            (*td).t_choice.t_datum.datum_typeid = self.typeid;
            (*td).t_ctid.ip_blkid.bi_hi = 0xFFFF;
            (*td).t_ctid.ip_blkid.bi_lo = 0xFFFF;
            (*td).t_ctid.ip_posid = 0;
            (*td).t_infomask2 = natts as u16 & pg_sys::HEAP_NATTS_MASK as u16;
            (*td).t_infomask = infomask;
            (*td).t_hoff = hoff as u8;
            let mut tuple: pg_sys::HeapTupleData = std::mem::zeroed();
            tuple.t_len = u32_total;
            tuple.t_self = (*td).t_ctid;
            tuple.t_tableOid = pg_sys::InvalidOid;
            tuple.t_data = td;
            Some(tuple)
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::TupleFormer;
    use pgrx::prelude::*;
    use pgrx::IntoDatum;

    /// The former's tuples equal heap_form_tuple's, byte for byte, for the kinds of
    /// values the trace's rows hold: every pattern of NULLs over fixed-length columns
    /// of each width and alignment, short and long text (1- and 4-byte headers), an
    /// array, and a text stored plain (never packed); each row formed anew and then,
    /// with other fixed-length values, in place of the one before.
    #[pg_test]
    fn tuples_equal_heap_form_tuple() {
        unsafe {
            let types = [
                pg_sys::BOOLOID,
                pg_sys::TEXTOID,
                pg_sys::INT2OID,
                pg_sys::XIDOID,
                pg_sys::INT8OID,
                pg_sys::TEXTOID,
                pg_sys::NAMEOID,
                pg_sys::XIDARRAYOID,
                pg_sys::FLOAT8OID,
                pg_sys::TEXTOID,
            ];
            let n = types.len();
            let desc = pg_sys::CreateTemplateTupleDesc(n as i32);
            for (i, t) in types.iter().enumerate() {
                pg_sys::TupleDescInitEntry(desc, (i + 1) as i16, std::ptr::null(), *t, -1, 0);
            }
            // The last text column stored plain: its varlenas keep a 4-byte header.
            let last = pgrx::PgTupleDesc::from_pg_unchecked(desc);
            let att = last.get(n - 1).unwrap() as *const _ as *mut pg_sys::FormData_pg_attribute;
            (*att).attstorage = b'p' as std::ffi::c_char;
            #[cfg(feature = "pg18")]
            pg_sys::populate_compact_attribute(desc, (n - 1) as i32);
            let mut former = TupleFormer::new(desc);
            let long = "x".repeat(300);
            let name = pgrx::pg_sys::Datum::from(pg_sys::palloc0(64));
            let mut buf = Vec::new();
            let texts = ["", "short", long.as_str()];
            let mut checked = 0;
            for mask in 0..(1u32 << n) {
                // Each row twice, the second time with other fixed-length values and the
                // same texts (formed in place of the first: TupleFormer::reshape).
                let rows = texts.iter().enumerate().flat_map(|(t, text)| {
                    [false, true].into_iter().map(move |again| (t, text, again))
                });
                for (t, text, again) in rows {
                    let values = [
                        (!again).into_datum().unwrap(),
                        text.into_datum().unwrap(),
                        (7i16 + again as i16).into_datum().unwrap(),
                        pg_sys::Datum::from(123_456u32 + again as u32),
                        (-5i64 - again as i64).into_datum().unwrap(),
                        texts[(t + 1) % 3].into_datum().unwrap(),
                        name,
                        vec![pg_sys::Datum::from(3u32), pg_sys::Datum::from(4u32)]
                            .into_iter()
                            .map(|d| crate::sql::types::Xid(d.value() as u32))
                            .collect::<Vec<_>>()
                            .into_datum()
                            .unwrap(),
                        (1.5f64 + again as u8 as f64).into_datum().unwrap(),
                        text.into_datum().unwrap(),
                    ];
                    let nulls: Vec<bool> = (0..n).map(|i| mask & (1 << i) != 0).collect();
                    let mut v = values;
                    let mut nl = nulls.clone();
                    let theirs = pg_sys::heap_form_tuple(desc, v.as_mut_ptr(), nl.as_mut_ptr());
                    let ours = former.form(&values, &nulls, &mut buf).expect("formed");
                    assert_eq!(ours.t_len, (*theirs).t_len, "mask {mask:b}, text {t}");
                    let a =
                        std::slice::from_raw_parts(ours.t_data.cast::<u8>(), ours.t_len as usize);
                    let b = std::slice::from_raw_parts(
                        (*theirs).t_data.cast::<u8>(),
                        (*theirs).t_len as usize,
                    );
                    assert_eq!(a, b, "mask {mask:b}, text {t}");
                    checked += 1;
                }
            }
            assert_eq!(checked, 6 << n);
            // Every second row at least was formed in place of the one before (and so was
            // a first row after a row with the same texts, e.g. all of them NULL).
            assert!(former.reshaped >= 3 << n, "{} reshaped", former.reshaped);
        }
    }
}
