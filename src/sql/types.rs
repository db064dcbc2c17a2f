//! SQL-facing value types: `xid` and `pg_lsn` columns whose zero is a value, not NULL.
//!
//! pgrx maps `TransactionId::INVALID` to NULL; PostgreSQL's own inspection functions
//! (pg_logicalinspect, pg_get_replication_slots) print `0` and `0/0`. These wrappers keep
//! the server's convention so our columns compare equal to theirs.

use pgrx::pg_sys;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::IntoDatum;

/// An `xid` column value (32-bit, 0 shown as `0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Xid(pub u32);

impl IntoDatum for Xid {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pg_sys::Datum::from(self.0))
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::XIDOID
    }
}

unsafe impl SqlTranslatable for Xid {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Xid);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("xid"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("xid")));
}

/// A `pg_lsn` column value (`XLogRecPtr`, 0 shown as `0/0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgLsn(pub u64);

impl IntoDatum for PgLsn {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(pg_sys::Datum::from(self.0))
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::PG_LSNOID
    }
}

unsafe impl SqlTranslatable for PgLsn {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(PgLsn);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("pg_lsn"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("pg_lsn")));
}

impl From<snapbuild_core::Lsn> for PgLsn {
    fn from(l: snapbuild_core::Lsn) -> Self {
        PgLsn(l.0)
    }
}

/// `xid[]` from a slice.
pub fn xids(v: &[u32]) -> Vec<Xid> {
    v.iter().map(|x| Xid(*x)).collect()
}

/// A `name` value (NAMEDATALEN-bounded identifier), for slot names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgName(pub String);

impl IntoDatum for PgName {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let max = pg_sys::NAMEDATALEN as usize - 1;
        let bytes = self.0.as_bytes();
        let n = bytes.len().min(max);
        unsafe {
            let p = pg_sys::palloc0(pg_sys::NAMEDATALEN as usize) as *mut u8;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, n);
            Some(pg_sys::Datum::from(p))
        }
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::NAMEOID
    }
}

impl pgrx::FromDatum for PgName {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            return None;
        }
        let p = datum.cast_mut_ptr::<std::ffi::c_char>();
        Some(PgName(
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned(),
        ))
    }
}

unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for PgName {
    unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        arg.unbox_arg_using_from_datum()
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }
}

unsafe impl SqlTranslatable for PgName {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(PgName);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("name"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("name")));
}

macro_rules! box_ret_via_into_datum {
    ($($t:ty),*) => {
        $(unsafe impl pgrx::callconv::BoxRet for $t {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut pgrx::callconv::FcInfo<'fcx>) -> pgrx::datum::Datum<'fcx> {
                match self.into_datum() {
                    Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
                    None => fcinfo.return_null(),
                }
            }
        })*
    };
}

/// A `json` value given as its text (already valid JSON): returned as is, without the
/// `serde_json::Value` that `pgrx::Json` would build and print again.
pub struct JsonText(pub String);

impl IntoDatum for JsonText {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        self.0.as_str().into_datum()
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONOID
    }
}

unsafe impl SqlTranslatable for JsonText {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(JsonText);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("json"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("json")));
}

/// A `text` column value already converted to a datum (by [`StaticTexts`]).
#[derive(Clone, Copy, Debug)]
pub struct StaticText(pg_sys::Datum);

impl StaticText {
    /// The text the datum holds.
    pub fn text(self) -> String {
        // SAFETY: the datum is a `text` made by [`StaticTexts::get`] in a context that
        // outlives the rows.
        unsafe { <String as pgrx::FromDatum>::from_datum(self.0, false) }.unwrap_or_default()
    }
}

impl IntoDatum for StaticText {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }
}

unsafe impl SqlTranslatable for StaticText {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(StaticText);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("TEXT"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("TEXT")));
}

/// The `text` datums of the static strings (record names, states, branches, levels,
/// verdicts) one set-returning call puts in its rows: each distinct string is converted
/// once, in memory context `mcx` (the call's multi-call context, which outlives every row),
/// and the same datum is reused (heap_form_tuple copies it into each tuple). Holds one
/// datum per distinct string, a bounded set.
pub struct StaticTexts {
    mcx: pg_sys::MemoryContext,
    datums: rustc_hash::FxHashMap<(usize, usize), pg_sys::Datum>,
    /// The last datum per slot of a small direct-mapped table in front of `datums` (a row
    /// asks for three to six strings, nearly always ones asked for just before).
    recent: [((usize, usize), pg_sys::Datum); 64],
}

impl StaticTexts {
    /// Datums allocated in `mcx`, which must live as long as the rows are being built.
    pub fn new(mcx: pg_sys::MemoryContext) -> Self {
        StaticTexts {
            mcx,
            datums: Default::default(),
            recent: [((0, 0), pg_sys::Datum::from(0)); 64],
        }
    }

    /// The datum of `s`.
    #[inline]
    pub fn get(&mut self, s: &'static str) -> StaticText {
        let key = (s.as_ptr() as usize, s.len());
        let slot = (key.0 ^ key.1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        let recent = &mut self.recent[slot];
        if recent.0 == key {
            return StaticText(recent.1);
        }
        let mcx = self.mcx;
        let datum = *self.datums.entry(key).or_insert_with(|| {
            // SAFETY: mcx is a live memory context (see `new`).
            unsafe { pgrx::PgMemoryContexts::For(mcx).switch_to(|_| s.into_datum()) }
                .unwrap_or(pg_sys::Datum::from(0))
        });
        *recent = (key, datum);
        StaticText(datum)
    }
}

box_ret_via_into_datum!(Xid, PgLsn, PgName, JsonText, StaticText);

impl pgrx::FromDatum for Xid {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        (!is_null).then(|| Xid(datum.value() as u32))
    }
}

impl pgrx::FromDatum for PgLsn {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        (!is_null).then(|| PgLsn(datum.value() as u64))
    }
}

macro_rules! arg_via_from_datum {
    ($($t:ty),*) => {
        $(unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for $t {
            unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null"))
            }
            unsafe fn unbox_nullable_arg(arg: pgrx::callconv::Arg<'_, 'fcx>) -> pgrx::nullable::Nullable<Self> {
                arg.unbox_arg_using_from_datum().into()
            }
        })*
    };
}

arg_via_from_datum!(Xid, PgLsn);

unsafe impl pgrx::datum::UnboxDatum for Xid {
    type As<'src> = Xid;
    unsafe fn unbox<'src>(datum: pgrx::datum::Datum<'src>) -> Self::As<'src>
    where
        Self: 'src,
    {
        Xid(datum.sans_lifetime().value() as u32)
    }
}

/// A `regclass` argument: a relation's OID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegClass(pub pg_sys::Oid);

impl pgrx::FromDatum for RegClass {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        (!is_null).then(|| RegClass(pg_sys::Oid::from(datum.value() as u32)))
    }
}

unsafe impl SqlTranslatable for RegClass {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(RegClass);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> =
        Ok(SqlMappingRef::literal("regclass"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> =
        Ok(ReturnsRef::One(SqlMappingRef::literal("regclass")));
}

arg_via_from_datum!(RegClass);
