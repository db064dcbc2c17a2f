//! csvlog.c's format (`log_destination = csvlog`): one CSV record per message, its fields
//! quoted as RFC 4180 says and free to hold newlines. [`CsvParser`] reads it.

use crate::server_log::events::LogEvent;
use crate::server_log::fields::event_from_fields;
use crate::server_log::log_time::ZoneNames;

/// Reads csvlog (`log_destination = csvlog`) line by line: a record ends at a newline
/// outside quotes (fields may hold newlines); its columns are those of the server's
/// csvlog (log_time 0, process_id 3, error_severity 11, message 13, detail 14, context 18,
/// query 19).
#[derive(Default)]
pub struct CsvParser {
    record: String,
    zones: ZoneNames,
}

impl CsvParser {
    /// A parser that also reads the zone abbreviations of `zones` in timestamps.
    pub fn with_zones(zones: ZoneNames) -> Self {
        CsvParser {
            record: String::new(),
            zones,
        }
    }

    /// Feeds one line (without its newline); returns the event of a record it completes.
    pub fn line(&mut self, line: &str) -> Option<LogEvent> {
        if !self.record.is_empty() {
            self.record.push('\n');
        }
        self.record.push_str(line);
        // complete when the quotes are balanced
        if self.record.bytes().filter(|&b| b == b'"').count() % 2 != 0 {
            if self.record.len() > 1 << 20 {
                self.record.clear(); // not csvlog after all
            }
            return None;
        }
        let record = std::mem::take(&mut self.record);
        let f = csv_fields(&record);
        let field = |i: usize| f.get(i).map(String::as_str).filter(|s| !s.is_empty());
        event_from_fields(
            &self.zones,
            field(11)?,
            field(0)?,
            field(3).and_then(|p| p.parse().ok()),
            field(13)?,
            field(14),
            field(19),
            field(18),
        )
    }
}

/// The fields of one CSV record (RFC 4180 quoting, as the server writes csvlog).
fn csv_fields(record: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = record.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::include::xlogdefs::Lsn;
    use crate::server_log::events::DecoderKind;

    #[test]
    fn csv_decoder_start_with_quotes_and_newlines() {
        let mut p = CsvParser::default();
        let lines = [
            r#"2026-12-01 13:18:30.102 UTC,"postgres","postgres",22976,"127.0.0.1:1",x,1,"SELECT",2026-12-01 13:18:30 UTC,3/4,0,LOG,00000,"starting logical decoding for slot ""s""","Streaming transactions committing after 1/2, reading WAL from 1/1.",,,,,"SELECT 'a"#,
            r#"b'",,,"app","client backend",,0"#,
        ];
        let events: Vec<LogEvent> = lines.iter().filter_map(|l| p.line(l)).collect();
        assert_eq!(
            events,
            vec![LogEvent::DecoderStart {
                at_ms: 1_796_131_110_102,
                pid: Some(22976),
                slot: "s".into(),
                after: Lsn((1 << 32) | 2),
                restart: Lsn((1 << 32) | 1),
                kind: DecoderKind::Sql,
            }]
        );
        assert_eq!(
            csv_fields(r#"a,"b,""c""",,d"#),
            vec!["a", "b,\"c\"", "", "d"]
        );
    }
}
