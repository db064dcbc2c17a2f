//! The server's own log file, read for its lines about logical decoders
//! (`snapbuild_core::server_log`).
//!
//! Where it is: the `stderr` or `jsonlog` entry of `current_logfiles` in the data
//! directory (the logging collector's file, as `pg_current_logfile()` reads it), else the
//! backend's standard error when that is a regular file (`pg_ctl -l FILE` without the
//! collector), found through `/proc/self/fd/2`. The file is streamed line by line; at most
//! [`MAX_LOG_BYTES`] from its end are read, so a huge log costs a bounded read and may leave
//! out older lines (the verdicts that need them then stay undecided).

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;

use snapbuild_core::server_log::{parse_json_line, LogEvent, StderrParser};

/// How much of the log's end is read (bytes).
pub const MAX_LOG_BYTES: u64 = 256 * 1024 * 1024;

/// The log's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Stderr,
    Json,
}

/// The current log file and its format, or why there is none to read.
pub fn locate() -> Result<(PathBuf, Format), String> {
    // The backend's working directory is the data directory.
    if let Ok(text) = std::fs::read_to_string("current_logfiles") {
        for line in text.lines() {
            if let Some((kind, path)) = line.split_once(' ') {
                let format = match kind {
                    "stderr" => Format::Stderr,
                    "jsonlog" => Format::Json,
                    _ => continue,
                };
                return Ok((PathBuf::from(path), format));
            }
        }
    }
    match std::fs::read_link("/proc/self/fd/2") {
        Ok(p) if p.is_absolute() && std::fs::metadata(&p).is_ok_and(|m| m.is_file()) => {
            Ok((p, Format::Stderr))
        }
        _ => Err("the server log is not a file this backend can find (no stderr or jsonlog entry in current_logfiles, and standard error is not a regular file)".into()),
    }
}

/// The decoder and server-start events of the log, oldest first (see
/// `snapbuild_core::server_log`); `check` runs between lines (interrupts).
pub fn events(mut check: impl FnMut()) -> Result<(PathBuf, Vec<LogEvent>), String> {
    let (path, format) = locate()?;
    let mut f = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let skip = len.saturating_sub(MAX_LOG_BYTES);
    if skip > 0 {
        f.seek(SeekFrom::Start(skip))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut reader = BufReader::new(f.take(MAX_LOG_BYTES));
    let mut out = Vec::new();
    let mut parser = StderrParser::default();
    let mut buf = Vec::new();
    let mut first = skip > 0;
    let mut n = 0u64;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
        if std::mem::take(&mut first) {
            continue; // the partial line where reading began
        }
        n += 1;
        if n % 4096 == 0 {
            check();
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        match format {
            Format::Stderr => out.extend(parser.line(line)),
            Format::Json => out.extend(parse_json_line(line)),
        }
    }
    out.extend(parser.finish());
    Ok((path, out))
}

/// A file's modification time in milliseconds since the epoch.
pub fn mtime_ms(path: &str) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}
