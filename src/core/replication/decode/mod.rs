//! Re-runs replication/logical/decode.c: LogicalDecodingProcessRecord's dispatch of
//! each decoded WAL record to the snapshot builder and the reorder buffer
//! ([`Replay::feed`]), xact_decode's COMMIT / PREPARE / ABORT paths (DecodeCommit,
//! DecodePrepare, DecodeAbort, DecodeTXNNeedSkip, FilterPrepare) with what they made the
//! output plugin send ([`DecodeVerdict::sends`]), and one [`TraceRow`] per record for the
//! trace.
//!
//! Two ways of feeding a replay leave rows out, with the same effects on it. The *lean*
//! feed ([`Replay::feed_lean`]) makes a row only for a record that left something a row
//! would show beyond the builder as it stands, so the many records that need only their
//! head ([`Replay::feed_head_only`]) cost no row. A *quiet* replay ([`Replay::quiet`])
//! also makes none for a commit, nor for a record that only changed the builder's tracked
//! sets: it is for callers that need the builder's state, not rows.
//!
//! - `record.rs`: what the replay is fed: [`RecordHead`] and its [`RecordKind`], the
//!   [`Payload`], and [`TwoPhaseDecoding`] (FilterPrepare);
//! - `replay.rs`: [`Replay`], LogicalDecodingProcessRecord's dispatch;
//! - `xact.rs`: DecodeCommit, DecodePrepare, DecodeAbort and DecodeTXNNeedSkip, as
//!   methods of [`SnapBuild`](crate::replication::snapbuild::SnapBuild);
//! - `trace.rs`: [`TraceRow`], [`DecodeVerdict`] and the notes on rows.

pub mod record;
pub mod replay;
pub mod trace;
pub mod xact;

pub use record::{Payload, RecordHead, RecordKind, TwoPhaseDecoding};
pub use replay::{Replay, ReplayError};
pub use trace::{
    subtransaction_messages, DecodeVerdict, TraceRow, NOTE_CALLBACK_DURING_CREATION,
    NOTE_CATALOG_CHANGE_BEFORE_FULL,
};
