//! RUNNING_XACTS records in the server's WAL (pg_walinspect, pg_waldump on 14).

use crate::cluster::flush_lsn;
use crate::values::{err_text, fmt_lsn, parse_lsn};
use postgres::Client;
use regex::Regex;
use std::sync::OnceLock;

/// One RUNNING_XACTS record as the server's WAL holds it.
#[derive(Clone, Debug)]
pub struct WalRunningXacts {
    pub start: u64,
    pub end: u64,
    pub next_xid: u64,
    pub latest_completed_xid: u64,
    pub oldest_running_xid: u64,
    pub xacts: Vec<u64>,
    pub subxacts: Vec<u64>,
    /// Whether the description lists subtransactions at all: from 16 on; 14 and 15 print
    /// only the top-level xids (and the overflow flag).
    pub lists_subxacts: bool,
    pub overflowed: bool,
    pub description: String,
}

fn parse_running_desc(d: &str) -> (u64, u64, u64, Vec<u64>, Vec<u64>, bool) {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"^nextXid (\d+) latestCompletedXid (\d+) oldestRunningXid (\d+)").unwrap()
    });
    let m = re
        .captures(d)
        .unwrap_or_else(|| panic!("unexpected RUNNING_XACTS description {d:?}"));
    let mut xacts = Vec::new();
    let mut subs = Vec::new();
    let mut overflowed = false;
    for part in d.split("; ").skip(1) {
        if part == "subxid overflowed" {
            overflowed = true;
        } else if let Some((head, list)) = part.split_once(':') {
            let v: Vec<u64> = list
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            if head.ends_with("subxacts") {
                subs = v;
            } else if head.ends_with("xacts") {
                xacts = v;
            }
        }
    }
    (
        m[1].parse().unwrap(),
        m[2].parse().unwrap(),
        m[3].parse().unwrap(),
        xacts,
        subs,
        overflowed,
    )
}

/// RUNNING_XACTS records starting at or after `from` and ending at or before `to`
/// (clamped to the flushed WAL: PG 15's pg_walinspect refuses a later end). Read with
/// contrib pg_walinspect (15+) or, on 14, the server's pg_waldump over the data directory.
pub fn wal_running_xacts(c: &mut Client, from: u64, to: u64) -> Vec<WalRunningXacts> {
    let to = to.min(flush_lsn(c));
    if to <= from {
        return Vec::new();
    }
    let major: u32 = std::env::var("PGSNAP_MAJOR")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(18);
    let recs: Vec<(u64, u64, String)> = if major >= 15 {
        c.query(
            "SELECT start_lsn::text, end_lsn::text, description FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) \
             WHERE resource_manager = 'Standby' AND record_type = 'RUNNING_XACTS' ORDER BY start_lsn",
            &[&fmt_lsn(from), &fmt_lsn(to)],
        )
        .unwrap_or_else(|e| panic!("pg_get_wal_records_info({}, {}): {}", fmt_lsn(from), fmt_lsn(to), err_text(&e)))
        .iter()
        .map(|r| (parse_lsn(&r.get::<_, String>(0)), parse_lsn(&r.get::<_, String>(1)), r.get::<_, String>(2)))
        .collect()
    } else {
        waldump_running_xacts(from, to)
    };
    recs.into_iter()
        .map(|(start, end, d)| {
            let (n, l, o, x, s, ov) = parse_running_desc(&d);
            WalRunningXacts {
                start,
                end,
                next_xid: n,
                latest_completed_xid: l,
                oldest_running_xid: o,
                xacts: x,
                subxacts: s,
                lists_subxacts: major >= 16,
                overflowed: ov,
                description: d,
            }
        })
        .collect()
}

/// 14 has no pg_walinspect: run pg_waldump (from the server's bin directory, on PATH)
/// over `$PGSNAP_PGDATA/pg_wal`. pg_waldump prints a record's start and total length;
/// its end is that length laid over the 8 kB pages, past each page header it crosses
/// (24 bytes, 40 at a segment start).
fn waldump_running_xacts(from: u64, to: u64) -> Vec<(u64, u64, String)> {
    let pgdata = std::env::var("PGSNAP_PGDATA").expect("PGSNAP_PGDATA");
    let out = std::process::Command::new("pg_waldump")
        .arg(format!("--path={pgdata}/pg_wal"))
        .arg(format!("--start={}", fmt_lsn(from)))
        .arg(format!("--end={}", fmt_lsn(to)))
        .arg("--rmgr=Standby")
        .output()
        .expect("run pg_waldump (is the server's bin directory on PATH?)");
    let text = String::from_utf8_lossy(&out.stdout);
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*\d+, lsn: ([0-9A-F]+/[0-9A-F]+), prev [0-9A-F/]+, desc: RUNNING_XACTS (.*)$").unwrap()
    });
    const PAGE: u64 = 8192;
    const SEG: u64 = 16 * 1024 * 1024;
    text.lines()
        .filter_map(|l| re.captures(l))
        .map(|m| {
            let start = parse_lsn(&m[2]);
            let mut remaining: u64 = m[1].parse().unwrap();
            let mut pos = start;
            while remaining > 0 {
                let avail = PAGE - pos % PAGE;
                if avail >= remaining {
                    pos += remaining;
                    remaining = 0;
                } else {
                    pos += avail;
                    remaining -= avail;
                    pos += if pos % SEG == 0 { 40 } else { 24 };
                }
            }
            // The reader's EndRecPtr is MAXALIGNed.
            (start, pos.div_ceil(8) * 8, m[3].trim().to_owned())
        })
        .collect()
}

/// The RUNNING_XACTS record that starts exactly at `lsn`, if any.
pub fn wal_running_xacts_at(c: &mut Client, lsn: u64) -> Option<WalRunningXacts> {
    let to = flush_lsn(c);
    wal_running_xacts(c, lsn, to)
        .into_iter()
        .find(|w| w.start == lsn)
}
