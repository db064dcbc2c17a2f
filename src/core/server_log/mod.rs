//! The server log's lines about logical decoders, as plain values. Not a PostgreSQL file:
//! it reads what logical.c's CreateDecodingContext and the postmaster print.
//!
//! A `.snap` file is written by whichever decoder first serializes at its LSN, and what it
//! holds depends on where that decoder started. The log names every decoder that
//! restarted: logical.c CreateDecodingContext logs, at LOG, `starting logical decoding
//! for slot "S"` with the DETAIL `Streaming transactions committing after A, reading WAL
//! from R.` (A: the slot's confirmed_flush, which becomes the builder's
//! start_decoding_at; R: its restart_lsn). A decoder creating a slot stops at the record
//! that makes it consistent and never serializes, so the restarted ones are all the
//! possible writers. A server start (`database system is ready to accept connections`, or
//! `… read-only connections` on a standby) ends every decoder.
//!
//! Only the stderr format with a leading timestamp in `log_line_prefix` (`%m`, `%t`, the
//! default `%m [%p] `) in UTC/GMT, a numeric zone or an abbreviation of [`ZoneNames`], and
//! the csvlog and jsonlog formats, are read;
//! messages must be untranslated (`lc_messages` C/en). Anything else gives no events,
//! which leaves the verdicts that need them undecided.
//!
//! One job per file: `events` (what the parsers give), `messages` (the server's texts read
//! and their recognizers), `log_time` (timestamps in any log_timezone), one parser per log
//! format, `stderr` (elog.c's stderr format), `csvlog` (csvlog.c) and `jsonlog`
//! (jsonlog.c), the last two sharing `fields`; `decoders` (the decoders the events show,
//! and which of them could have written a `.snap` file) and `lines` (a replay's builder
//! messages matched to the lines those decoders logged).

pub mod csvlog;
pub mod decoders;
pub mod events;
mod fields;
pub mod jsonlog;
pub mod lines;
pub mod log_time;
pub mod messages;
pub mod stderr;

pub use csvlog::CsvParser;
pub use decoders::{decoders, writers_of, LoggedDecoder, Origin, Writers};
pub use events::{BuilderLine, DecoderKind, InvalidationLine, LineLevel, LogEvent};
pub use jsonlog::parse_json_line;
pub use lines::{
    candidate_lines_for, lines_at, lines_for, same_start_logged_debug_past, same_start_logs_debug,
    serializing_lines_for, subtransaction_lines_for, Candidates, LineIndex, LogLineMatch,
    ReplayStart,
};
pub use log_time::{format_ms, leading_timestamp, leading_timestamp_in, ZoneNames};
pub(crate) use messages::leading_lsn;
pub use messages::{
    debug_kind, message_lsn, parse_start_detail, restart_candidate, serializing, subtransaction,
    xmin_candidate, DebugKind, DEBUG_PREFIXES, SERIALIZING, SKIPPING,
};
pub use stderr::StderrParser;
