//! jsonlog.c's format (`log_destination = jsonlog`): one JSON object per message and line.
//! [`parse_json_line`] reads it.

use crate::server_log::events::LogEvent;
use crate::server_log::fields::event_from_fields;
use crate::server_log::log_time::ZoneNames;

/// One jsonlog line (`log_destination = jsonlog`): its `timestamp`, `error_severity`,
/// `pid`, `message`, `detail` and `statement`; `zones` reads named zones in its timestamp.
pub fn parse_json_line(line: &str, zones: &ZoneNames) -> Option<LogEvent> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |k: &str| v.get(k).and_then(|x| x.as_str());
    event_from_fields(
        zones,
        text("error_severity")?,
        text("timestamp")?,
        v.get("pid").and_then(|p| p.as_i64()).map(|p| p as i32),
        text("message")?,
        text("detail"),
        text("statement"),
        text("context"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::xlogdefs::Lsn;
    use crate::server_log::events::DecoderKind;

    #[test]
    fn json_decoder_start() {
        let l = r#"{"timestamp":"2026-12-01 13:18:30.102 UTC","pid":22976,"error_severity":"LOG","message":"starting logical decoding for slot \"s\"","detail":"Streaming transactions committing after 1/2, reading WAL from 1/1.","statement":"SELECT 1"}"#;
        assert_eq!(
            parse_json_line(l, &ZoneNames::default()),
            Some(LogEvent::DecoderStart {
                at_ms: 1_796_131_110_102,
                pid: Some(22976),
                slot: "s".into(),
                after: Lsn((1 << 32) | 2),
                restart: Lsn((1 << 32) | 1),
                kind: DecoderKind::Sql,
            })
        );
        assert_eq!(parse_json_line("not json", &ZoneNames::default()), None);
    }
}
