//! One structured log entry to an event: the fields csvlog.c and jsonlog.c write of
//! elog.c's ErrorData (severity, time, pid, message, detail, statement, context). Shared
//! by the csvlog and jsonlog parsers.

use crate::server_log::events::{BuilderLine, InvalidationLine, LineLevel, LogEvent};
use crate::server_log::log_time::{leading_timestamp_in, ZoneNames};
use crate::server_log::messages::{
    debug_kind, leading_lsn, sync_skipped_slot, BUILDER_PREFIX, INVALIDATING, READY, SEARCHING,
    STARTING,
};

/// The event of one structured log entry (jsonlog, csvlog): its severity, `%m`-style
/// time, pid, message, detail and statement.
#[allow(clippy::too_many_arguments)]
pub(super) fn event_from_fields(
    zones: &ZoneNames,
    severity: &str,
    timestamp: &str,
    pid: Option<i32>,
    msg: &str,
    detail: Option<&str>,
    statement: Option<&str>,
    context: Option<&str>,
) -> Option<LogEvent> {
    let level = match severity {
        "LOG" => LineLevel::Log,
        "DEBUG" => LineLevel::Debug1,
        _ => return None,
    };
    let (at_ms, _) = leading_timestamp_in(timestamp, zones)?;
    if let Some(rest) = msg
        .strip_prefix(INVALIDATING)
        .filter(|_| level == LineLevel::Log)
    {
        return Some(LogEvent::SlotInvalidated(InvalidationLine {
            at_ms,
            pid,
            slot: rest.strip_suffix('"').unwrap_or(rest).to_owned(),
            detail: detail.map(str::to_owned),
            context: context.map(str::to_owned),
        }));
    }
    if let Some(slot) = sync_skipped_slot(msg).filter(|_| level == LineLevel::Log) {
        return Some(LogEvent::SlotSyncSkipped(InvalidationLine {
            at_ms,
            pid,
            slot,
            detail: detail.map(str::to_owned),
            context: context.map(str::to_owned),
        }));
    }
    if level == LineLevel::Debug1 {
        if let Some(restart) = msg.strip_prefix(SEARCHING).and_then(leading_lsn) {
            return Some(LogEvent::CreationStart {
                at_ms,
                pid,
                restart: restart.0,
            });
        }
        debug_kind(msg)?;
    } else if READY.iter().any(|r| msg.starts_with(r)) {
        return Some(LogEvent::ServerStart { at_ms });
    }
    if level == LineLevel::Debug1 || msg.starts_with(BUILDER_PREFIX) {
        return Some(LogEvent::Builder(BuilderLine {
            detail: detail.map(str::to_owned),
            statement: statement.map(str::to_owned),
            ..BuilderLine::new(at_ms, pid, level, msg)
        }));
    }
    let rest = msg.strip_prefix(STARTING)?;
    let slot = rest.strip_suffix('"').unwrap_or(rest).to_owned();
    LogEvent::decoder_start(at_ms, pid, slot, detail?, statement)
}
