//! The server's own log file, read for its lines about logical decoders
//! (`snapbuild_core::server_log`).
//!
//! Where it is: the `jsonlog`, `csvlog` or `stderr` entry of `current_logfiles` in the data
//! directory (the logging collector's file, as `pg_current_logfile()` reads it; the
//! structured formats first), with the earlier files of the same format in its directory
//! (rotated ones, oldest first); else the backend's standard error when that is a regular
//! file (`pg_ctl -l FILE` without the collector), found through `/proc/self/fd/2`. Files are
//! streamed line by line; at most `pg_snapbuild.server_log_max_mb` ([`SERVER_LOG_MAX_MB`],
//! default 256 MB) are read, the newest ones, so a huge log costs a bounded read and may
//! leave out older lines (the verdicts that need them then stay undecided).

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::PathBuf;

use snapbuild_core::server_log::{parse_json_line, CsvParser, LogEvent, StderrParser, ZoneNames};

/// `pg_snapbuild.server_log_max_mb`: how much of the log's newest part is read (MB; 0:
/// the log is not read, and the verdicts that need it stay undecided). Default 256.
pub static SERVER_LOG_MAX_MB: pgrx::GucSetting<i32> = pgrx::GucSetting::<i32>::new(256);

/// Registers this module's settings (from `_PG_init`).
pub fn define_gucs() {
    pgrx::GucRegistry::define_int_guc(
        c"pg_snapbuild.server_log_max_mb",
        c"How much of the server log's newest part pg_snapbuild reads (0: none).",
        c"The trace reads the server log for the decoders' own lines and for which decoders could have written a .snap file; at most this much, the newest files first.",
        &SERVER_LOG_MAX_MB,
        0,
        1024 * 1024,
        pgrx::GucContext::Userset,
        pgrx::GucFlags::UNIT_MB,
    );
}

/// How much of the log is read (bytes): [`SERVER_LOG_MAX_MB`].
fn max_log_bytes() -> u64 {
    u64::try_from(SERVER_LOG_MAX_MB.get()).unwrap_or(0) * 1024 * 1024
}

/// The log's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Stderr,
    Csv,
    Json,
}

/// The current log file, its format and whether the logging collector writes it (then
/// rotated files sit beside it), or why there is none to read.
pub fn locate() -> Result<(PathBuf, Format, bool), String> {
    // The backend's working directory is the data directory.
    if let Ok(text) = std::fs::read_to_string("current_logfiles") {
        let mut found: Vec<(Format, PathBuf)> = text
            .lines()
            .filter_map(|line| {
                let (kind, path) = line.split_once(' ')?;
                let format = match kind {
                    "jsonlog" => Format::Json,
                    "csvlog" => Format::Csv,
                    "stderr" => Format::Stderr,
                    _ => return None,
                };
                Some((format, PathBuf::from(path)))
            })
            .collect();
        found.sort_by_key(|(f, _)| match f {
            Format::Json => 0,
            Format::Csv => 1,
            Format::Stderr => 2,
        });
        if let Some((f, p)) = found.into_iter().next() {
            return Ok((p, f, true));
        }
    }
    match std::fs::read_link("/proc/self/fd/2") {
        Ok(p) if p.is_absolute() && std::fs::metadata(&p).is_ok_and(|m| m.is_file()) => {
            Ok((p, Format::Stderr, false))
        }
        _ => Err("the server log is not a file this backend can find (no jsonlog, csvlog or stderr entry in current_logfiles, and standard error is not a regular file)".into()),
    }
}

/// The files to read, oldest first, with the offset to start each at: the current one and,
/// for the collector's files, the earlier ones of the same extension in its directory,
/// newest first until `limit` bytes are reached.
fn files_to_read(current: &std::path::Path, collector: bool, limit: u64) -> Vec<(PathBuf, u64)> {
    let mut files: Vec<(std::time::SystemTime, PathBuf, u64)> = Vec::new();
    let meta = |p: &std::path::Path| std::fs::metadata(p).ok().filter(|m| m.is_file());
    if let Some(m) = meta(current) {
        files.push((
            m.modified().unwrap_or(std::time::UNIX_EPOCH),
            current.to_path_buf(),
            m.len(),
        ));
    }
    if collector {
        let ext = current.extension().map(|e| e.to_owned());
        if let Some(Ok(dir)) = current.parent().map(std::fs::read_dir) {
            for e in dir.flatten() {
                let p = e.path();
                if p == current || p.extension().map(|e| e.to_owned()) != ext {
                    continue;
                }
                if let Some(m) = meta(&p) {
                    files.push((m.modified().unwrap_or(std::time::UNIX_EPOCH), p, m.len()));
                }
            }
        }
    }
    files.sort_by_key(|f| std::cmp::Reverse(f.0)); // newest first
    let mut left = limit;
    let mut out = Vec::new();
    for (_, p, len) in files {
        if left == 0 {
            break;
        }
        let skip = len.saturating_sub(left);
        left -= len - skip;
        out.push((p, skip));
    }
    out.reverse();
    out
}

/// The decoder and server-start events of the log, oldest first (see
/// `snapbuild_core::server_log`); `check` runs between lines (interrupts).
pub fn events(mut check: impl FnMut()) -> Result<(PathBuf, Vec<LogEvent>), String> {
    let limit = max_log_bytes();
    if limit == 0 {
        return Err("pg_snapbuild.server_log_max_mb is 0: the server log is not read".into());
    }
    let (path, format, collector) = locate()?;
    let zones = zone_names();
    let mut out = Vec::new();
    read_newest(
        &path, format, collector, &zones, limit, &mut out, &mut check,
    )?;
    Ok((path, out))
}

/// The events of the log's newest `limit` bytes (the current file `path` and, for the
/// collector's files, the rotated ones before it), appended to `out`. Returns where the
/// last complete line read in `path` ends.
#[allow(clippy::too_many_arguments)]
fn read_newest(
    path: &std::path::Path,
    format: Format,
    collector: bool,
    zones: &ZoneNames,
    limit: u64,
    out: &mut Vec<LogEvent>,
    check: &mut impl FnMut(),
) -> Result<u64, String> {
    let mut end = 0;
    for (file, skip) in files_to_read(path, collector, limit) {
        let e = read_events(&file, format, zones, skip, skip > 0, limit, out, check)?;
        if file == path {
            end = e;
        }
    }
    Ok(end)
}

/// The events of `file` from byte `from` on (at most `limit` bytes), appended to `out`;
/// `partial`: the line where reading begins is cut (skipped). Returns where the last
/// complete line read ends: the next read starts there.
#[allow(clippy::too_many_arguments)]
fn read_events(
    file: &std::path::Path,
    format: Format,
    zones: &ZoneNames,
    from: u64,
    partial: bool,
    limit: u64,
    out: &mut Vec<LogEvent>,
    check: &mut impl FnMut(),
) -> Result<u64, String> {
    let mut f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if from > 0 {
        f.seek(SeekFrom::Start(from))
            .map_err(|e| format!("{}: {e}", file.display()))?;
    }
    let mut reader = BufReader::new(f.take(limit));
    let mut stderr = StderrParser::with_zones(zones.clone());
    let mut csv = CsvParser::with_zones(zones.clone());
    let mut buf = Vec::new();
    let mut first = partial;
    let mut at = from;
    let mut n = 0u64;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("{}: {e}", file.display())),
        }
        if buf.last() != Some(&b'\n') {
            break; // a line still being written: read again next time
        }
        at += buf.len() as u64;
        if std::mem::take(&mut first) {
            continue; // the partial line where reading began
        }
        n += 1;
        if n.is_multiple_of(4096) {
            check();
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        match format {
            Format::Stderr => out.extend(stderr.line(line)),
            Format::Csv => out.extend(csv.line(line)),
            Format::Json => out.extend(parse_json_line(line, zones)),
        }
    }
    out.extend(stderr.finish());
    Ok(at)
}

/// Where a reader of the log stopped, so that the next read takes only what was written
/// since ([`events_since`]).
#[derive(Default)]
pub struct LogCursor {
    /// The file read last, its format, and the end of its last complete line read.
    at: Option<(PathBuf, Format, u64)>,
    zones: Option<ZoneNames>,
}

/// The events written to the log since `cursor` last read it, oldest first; the first
/// call reads the log's newest part as [`events`] does. A rotation (another current
/// file) reads the rest of the old file, then the new one from its start; a file that
/// shrank is read again from its start. At most `pg_snapbuild.server_log_max_mb` per
/// file and call; `check` runs between lines (interrupts).
pub fn events_since(
    cursor: &mut LogCursor,
    mut check: impl FnMut(),
) -> Result<Vec<LogEvent>, String> {
    let limit = max_log_bytes();
    if limit == 0 {
        return Err("pg_snapbuild.server_log_max_mb is 0: the server log is not read".into());
    }
    let (path, format, collector) = locate()?;
    let zones = cursor.zones.get_or_insert_with(zone_names).clone();
    let mut out = Vec::new();
    let len_of = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).ok();
    let end = match cursor.at.take() {
        Some((old, f, at))
            if old == path && f == format && len_of(&path).is_some_and(|l| l >= at) =>
        {
            let from = at.max(len_of(&path).unwrap_or(0).saturating_sub(limit));
            read_events(
                &path,
                format,
                &zones,
                from,
                from > at,
                limit,
                &mut out,
                &mut check,
            )?
        }
        Some((old, f, at)) => {
            if old != path && len_of(&old).is_some_and(|l| l > at) {
                read_events(&old, f, &zones, at, false, limit, &mut out, &mut check)?;
            }
            let from = len_of(&path).unwrap_or(0).saturating_sub(limit);
            read_events(
                &path,
                format,
                &zones,
                from,
                from > 0,
                limit,
                &mut out,
                &mut check,
            )?
        }
        None => read_newest(
            &path, format, collector, &zones, limit, &mut out, &mut check,
        )?,
    };
    cursor.at = Some((path, format, end));
    Ok(out)
}

/// The zone abbreviations the log's timestamps may carry: `log_timezone`'s own (now), then
/// the server's abbreviation table (`pg_timezone_abbrevs`, which holds the other half of
/// a zone's daylight-saving pair). Empty if the catalog cannot be read; then only UTC,
/// GMT and numeric zones are read.
fn zone_names() -> ZoneNames {
    // Read-only SPI (`select`): no xid is assigned, which a standby could not do.
    let rows = pgrx::Spi::connect(|c| {
        let zone = c
            .select(
                "SELECT pg_catalog.current_setting('log_timezone')",
                Some(1),
                &[],
            )?
            .first()
            .get_one::<String>()?
            .unwrap_or_default();
        let bare = zone.strip_prefix("Etc/").unwrap_or(&zone);
        if ["UTC", "GMT", "UCT", "Universal", "Zulu", "Greenwich"].contains(&bare) {
            return Ok(Vec::new()); // its lines say UTC or GMT
        }
        let t = c.select(
            "SELECT abbrev, extract(epoch FROM utc_offset)::int8, 0 AS o FROM pg_catalog.pg_timezone_names
              WHERE name = pg_catalog.current_setting('log_timezone')
             UNION ALL
             SELECT abbrev, extract(epoch FROM utc_offset)::int8, 1 FROM pg_catalog.pg_timezone_abbrevs
             ORDER BY o",
            None,
            &[],
        )?;
        let mut out = Vec::new();
        for r in t {
            if let (Some(a), Some(o)) = (r.get::<String>(1)?, r.get::<i64>(2)?) {
                out.push((a, o));
            }
        }
        Ok::<_, pgrx::spi::Error>(out)
    });
    ZoneNames(rows.unwrap_or_default())
}

/// A file's modification time in milliseconds since the epoch.
pub fn mtime_ms(path: &str) -> Option<i64> {
    let m = std::fs::metadata(path).ok()?.modified().ok()?;
    let d = m.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}
