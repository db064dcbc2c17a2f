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

/// The column slots of the row being written: `put(i, datum)` for each column, `None` for
/// NULL. Every column must be put for every row.
pub struct RowSlots<'s> {
    values: &'s mut [pg_sys::Datum],
    nulls: &'s mut [bool],
}

impl RowSlots<'_> {
    /// Column `i` (0-based, in `RETURNS TABLE` order) is `datum`, NULL when `None`.
    /// An index past the row type's columns is ignored (the row type and the writer are
    /// declared from one list, so it does not happen).
    #[inline]
    pub fn put(&mut self, i: usize, datum: Option<pg_sys::Datum>) {
        if let (Some(v), Some(n)) = (self.values.get_mut(i), self.nulls.get_mut(i)) {
            match datum {
                Some(d) => (*v, *n) = (d, false),
                None => (*v, *n) = (pg_sys::Datum::from(0), true),
            }
        }
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
            let f = fcinfo.as_mut_ptr();
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
            let mut values = vec![pg_sys::Datum::from(0); natts];
            let mut nulls = vec![true; natts];
            let mut row_cx = pgrx::PgMemoryContexts::new("pg_snapbuild row");
            loop {
                let more = row_cx.switch_to(|_| {
                    let mut slots = RowSlots {
                        values: &mut values,
                        nulls: &mut nulls,
                    };
                    (self.next)(&mut slots)
                });
                if !more {
                    break;
                }
                // Copies the row into the store's own memory.
                pg_sys::tuplestore_putvalues(store, desc, values.as_mut_ptr(), nulls.as_mut_ptr());
                row_cx.reset();
            }
            fcinfo.return_null()
        }
    }
}
