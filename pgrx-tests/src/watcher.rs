//! The watcher (pg_snapbuild's background worker) as the tests see it: its pid in
//! `pg_stat_activity`, its LOG lines in the server log.

use crate::cluster::{wait_for, Env};
use crate::server_log::{log_entries_since, LogEntry};
use postgres::Client;
use std::time::{Duration, Instant};

/// The watcher's pid, waiting up to `timeout` for it to run.
pub fn watcher_pid(c: &mut Client, timeout: Duration) -> i32 {
    let until = Instant::now() + timeout;
    loop {
        let pid: Option<i32> = c
            .query_opt(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher'",
                &[],
            )
            .unwrap()
            .map(|r| r.get(0));
        if let Some(p) = pid {
            return p;
        }
        assert!(
            Instant::now() < until,
            "no pg_snapbuild watcher in pg_stat_activity: is pg_snapbuild in shared_preload_libraries?"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The watcher's LOG lines since `offset` whose message starts with `prefix`.
pub fn watcher_lines(env: &Env, offset: u64, pid: i32, prefix: &str) -> Vec<LogEntry> {
    log_entries_since(env, offset)
        .into_iter()
        .filter(|e| e.pid == pid && e.level == "LOG" && e.message.starts_with(prefix))
        .collect()
}

/// Waits up to `timeout` for at least one such line.
pub fn wait_for_lines(
    env: &Env,
    offset: u64,
    pid: i32,
    prefix: &str,
    timeout: Duration,
) -> Vec<LogEntry> {
    let mut lines = Vec::new();
    wait_for(
        &format!("a LOG line \"{prefix}…\" from the watcher"),
        timeout,
        || {
            lines = watcher_lines(env, offset, pid, prefix);
            !lines.is_empty()
        },
    );
    lines
}

/// The pids a LOG line's DETAIL names as holders (`held by pid N`).
pub fn named_pids(detail: &str) -> Vec<i32> {
    let mut pids: Vec<i32> = detail
        .split("held by pid ")
        .skip(1)
        .filter_map(|s| {
            s.split(|ch: char| !ch.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The watcher's pid, its `pg_stat_activity.query` (what it does now) and its
/// `backend_xmin` and `backend_xid` as text; `None` when no watcher runs.
pub fn watcher_activity(c: &mut Client) -> Option<(i32, String, Option<String>, Option<String>)> {
    c.query_opt(
        "SELECT pid, query, backend_xmin::text, backend_xid::text FROM pg_stat_activity
          WHERE backend_type = 'pg_snapbuild watcher'",
        &[],
    )
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

/// Waits up to `timeout` until the watcher shows `query` in `pg_stat_activity` (a step
/// of its look); returns its pid.
pub fn wait_watcher_doing(c: &mut Client, query: &str, timeout: Duration) -> i32 {
    let mut pid = 0;
    wait_for(
        &format!("the watcher doing \"{query}\""),
        timeout,
        || match watcher_activity(c) {
            Some((p, q, _, _)) if q == query => {
                pid = p;
                true
            }
            _ => false,
        },
    );
    pid
}

/// The watcher's step while it reads WAL for the slots' replays.
pub const READING_WAL: &str = "reading WAL for the logical slots' replays";
