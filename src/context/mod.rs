//! The decoding context: the role logical.c plays in PostgreSQL.
//!
//! One place turns "a slot" ([`input::for_slot`], CreateDecodingContext's view of a slot)
//! or "an LSN range with what-if parameters" ([`input::for_range`], checked once by
//! [`input::validate_input_lsns`] as pg_walinspect's ValidateInputLSNs checks its
//! arguments) into a running replay ([`DecodingContext`]). The context owns the WAL
//! reader, the memory context every read runs in, the `.snap` restore callback and the
//! interrupt checks, and offers one record loop ([`DecodingContext::next_row`]). The trace,
//! the historic snapshot / visibility capture and the slot prediction consume that loop.
//!
//! Layering: `sql` → `context` → (`adapter`, `snapbuild_core`); `adapter` → core. Nothing
//! here calls up into `sql`.

pub mod backlog;
pub mod decoding;
pub mod diagnose;
pub mod group;
pub mod input;
pub mod verdict;
pub mod writers;

pub use decoding::{Captured, DecodingContext, Stop};
pub use input::{for_range, for_slot, params_for_slot, RangeArgs, ReplayInput};
pub use verdict::{judge, Traced};
pub use writers::OtherWriters;
