//! Test support for the multi-session server tests (see `tests/server_verdicts.rs`).
//!
//! Everything a test compares against comes from the running server: its log file
//! (`PGSNAP_LOG`), its WAL (read with `pg_walinspect`), its slot catalog
//! (`pg_replication_slots`), the `.snap` files it wrote (`pg_ls_logicalsnapdir`, and on
//! PG 18 `pg_logicalinspect`), the xids it handed out (`pg_current_xact_id`) and the xids
//! `test_decoding` emitted.
//!
//! Environment (set by `scripts/cluster.sh env MAJOR`): `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, `PGSNAP_LOG`, `PGSNAP_PGDATA`, `PGSNAP_MAJOR`. When `PGSNAP_MAJOR` is unset
//! the tests fail, unless `PGSNAP_SKIP_LIVE=1` says explicitly to skip them.

use postgres::types::ToSql;
use postgres::{Client, Config, NoTls};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub type Row = Map<String, Value>;

// ---------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------

/// The live cluster the tests run against.
#[derive(Clone, Debug)]
pub struct Env {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub dbname: String,
    pub log: PathBuf,
    pub pgdata: PathBuf,
    pub major: u32,
}

fn need(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{var} is not set. These tests run against a live server: run them through \
             scripts/test.sh, or export the variables of `scripts/cluster.sh env MAJOR` \
             (PGHOST PGPORT PGUSER PGDATABASE PGSNAP_LOG PGSNAP_PGDATA PGSNAP_MAJOR)."
        ),
    }
}

/// The environment, or `None` when `PGSNAP_SKIP_LIVE=1` asks to skip live tests.
/// Panics (fails the test) when `PGSNAP_MAJOR` is unset without that explicit opt-out.
pub fn env() -> Option<Env> {
    if std::env::var("PGSNAP_MAJOR")
        .map(|v| v.is_empty())
        .unwrap_or(true)
    {
        if std::env::var("PGSNAP_SKIP_LIVE").as_deref() == Ok("1") {
            println!("SKIPPED: PGSNAP_MAJOR unset and PGSNAP_SKIP_LIVE=1");
            return None;
        }
        panic!(
            "PGSNAP_MAJOR is not set. These tests compare pg_snapbuild with a live server; \
             run them through scripts/test.sh (or export `scripts/cluster.sh env MAJOR`). \
             To skip them on purpose set PGSNAP_SKIP_LIVE=1."
        );
    }
    let major: u32 = need("PGSNAP_MAJOR")
        .parse()
        .expect("PGSNAP_MAJOR must be a number (15 or 18)");
    let e = Env {
        host: std::env::var("PGHOST").unwrap_or_else(|_| "127.0.0.1".into()),
        port: need("PGPORT").parse().expect("PGPORT must be a number"),
        user: std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into()),
        dbname: std::env::var("PGDATABASE").unwrap_or_else(|_| "postgres".into()),
        log: PathBuf::from(need("PGSNAP_LOG")),
        pgdata: PathBuf::from(need("PGSNAP_PGDATA")),
        major,
    };
    if let Err(err) = std::fs::File::open(&e.log) {
        panic!("PGSNAP_LOG={} is not readable: {err}", e.log.display());
    }
    Some(e)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Held for a whole test: see [`serial`].
pub struct Serial {
    _thread: MutexGuard<'static, ()>,
    _process: Option<std::fs::File>,
}

/// Slot creation waits for every running transaction of the cluster, so scenarios must
/// not overlap: each test holds this for its whole run (poison is ignored: a failed test
/// must not fail the next ones). Besides the in-process mutex it takes an exclusive
/// `flock` on `$TMPDIR/pgsnap-tests-<PGPORT>.lock`, so that test binaries run at the same
/// time against one cluster (two `cargo test` invocations) also take turns.
pub fn serial() -> Serial {
    let thread = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = std::env::var("PGPORT").unwrap_or_else(|_| "5432".into());
    let path = std::env::temp_dir().join(format!("pgsnap-tests-{port}.lock"));
    let process = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .ok()
        .filter(|f| f.lock().is_ok());
    Serial {
        _thread: thread,
        _process: process,
    }
}

static SETUP: OnceLock<()> = OnceLock::new();

impl Env {
    /// A new session with `statement_timeout` (so nothing waits forever).
    pub fn connect(&self, app: &str) -> Client {
        self.connect_raw(app, "120s")
    }

    fn connect_raw(&self, app: &str, statement_timeout: &str) -> Client {
        let mut cfg = Config::new();
        cfg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(app)
            .connect_timeout(Duration::from_secs(10));
        let mut c = cfg
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("cannot connect to {}:{}: {e}", self.host, self.port));
        c.batch_execute(&format!("SET statement_timeout = '{statement_timeout}'"))
            .expect("SET statement_timeout");
        c
    }

    /// Checks the server's major, creates the extensions the tests use (once per process).
    pub fn setup(&self) -> Client {
        let mut c = self.connect("pgsnap-setup");
        SETUP.get_or_init(|| {
            let v: i32 = c
                .query_one("SELECT current_setting('server_version_num')::int", &[])
                .unwrap()
                .get(0);
            assert_eq!(
                (v / 10000) as u32,
                self.major,
                "PGSNAP_MAJOR={} but the server at port {} is version {v}",
                self.major,
                self.port
            );
            let wl: String = c.query_one("SHOW wal_level", &[]).unwrap().get(0);
            assert_eq!(wl, "logical", "the server must run with wal_level=logical");
            if self.major >= 15 {
                c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
                    .unwrap();
            }
            if self.has_logicalinspect() {
                c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_logicalinspect")
                    .unwrap();
            }
            c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_snapbuild")
                .unwrap_or_else(|e| {
                    panic!(
                        "CREATE EXTENSION pg_snapbuild failed (is it installed?): {}",
                        err_text(&e)
                    )
                });
        });
        c
    }

    /// contrib pg_logicalinspect ships with 18 and later.
    pub fn has_logicalinspect(&self) -> bool {
        self.major >= 18
    }

    /// Logs a RUNNING_XACTS record now: `pg_log_standby_snapshot()` (16+, returns the
    /// record's end LSN) or `CHECKPOINT` (15, which logs one; no LSN returned).
    pub fn log_standby_snapshot(&self, c: &mut Client) -> Option<u64> {
        if self.major >= 16 {
            let s: String = c
                .query_one("SELECT pg_log_standby_snapshot()::text", &[])
                .unwrap()
                .get(0);
            Some(parse_lsn(&s))
        } else {
            c.batch_execute("CHECKPOINT").unwrap();
            None
        }
    }

    pub fn snapshots_dir(&self) -> PathBuf {
        self.pgdata.join("pg_logical").join("snapshots")
    }
}

/// `SQLSTATE: message` of a server error, or the client error's text.
pub fn err_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// (SQLSTATE, message) of a server error; panics on a client-side error.
pub fn db_err(e: &postgres::Error) -> (String, String) {
    match e.as_db_error() {
        Some(d) => (d.code().code().to_string(), d.message().to_string()),
        None => panic!("expected a server error, got {e}"),
    }
}

// ---------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------

/// `%X/%X` → u64.
pub fn parse_lsn(s: &str) -> u64 {
    let (hi, lo) = s
        .split_once('/')
        .unwrap_or_else(|| panic!("not an LSN: {s:?}"));
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

pub fn fmt_lsn(l: u64) -> String {
    format!("{:X}/{:X}", l >> 32, l & 0xffff_ffff)
}

/// The server's `.snap` file name for an LSN.
pub fn snap_name(l: u64) -> String {
    format!("{:X}-{:X}.snap", l >> 32, l & 0xffff_ffff)
}

/// Rows of a query as JSON objects (`to_jsonb` of each row: xid/pg_lsn become strings).
pub fn json_rows(
    c: &mut Client,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>, postgres::Error> {
    let q = format!("SELECT to_jsonb(t)::text FROM ({sql}) t");
    let rows = c.query(q.as_str(), params)?;
    Ok(rows
        .iter()
        .map(|r| {
            let s: String = r.get(0);
            match serde_json::from_str::<Value>(&s).unwrap() {
                Value::Object(m) => m,
                v => panic!("not an object: {v}"),
            }
        })
        .collect())
}

pub fn js(r: &Row, k: &str) -> Option<String> {
    match r.get(k) {
        None => panic!("column {k} missing in row {}", Value::Object(r.clone())),
        Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    }
}

pub fn jb(r: &Row, k: &str) -> Option<bool> {
    match r.get(k) {
        None => panic!("column {k} missing in row {}", Value::Object(r.clone())),
        Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(v) => panic!("column {k} is not a boolean: {v}"),
    }
}

pub fn jlsn(r: &Row, k: &str) -> Option<u64> {
    js(r, k).map(|s| parse_lsn(&s))
}

pub fn jxid(r: &Row, k: &str) -> Option<u64> {
    js(r, k).map(|s| {
        s.parse()
            .unwrap_or_else(|_| panic!("column {k}: not an xid: {s}"))
    })
}

pub fn jxids(r: &Row, k: &str) -> Option<Vec<u64>> {
    match r.get(k) {
        None => panic!("column {k} missing in row {}", Value::Object(r.clone())),
        Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| match v {
                    Value::String(s) => s.parse().unwrap(),
                    Value::Number(n) => n.as_u64().unwrap(),
                    v => panic!("column {k}: not an xid: {v}"),
                })
                .collect(),
        ),
        Some(v) => panic!("column {k} is not an array: {v}"),
    }
}

pub fn show(r: &Row) -> String {
    Value::Object(r.clone()).to_string()
}

// ---------------------------------------------------------------------------------------
// Waiting
// ---------------------------------------------------------------------------------------

/// Polls `f` every 50 ms until it holds; panics after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether backend `pid` waits for the transaction lock of `xid` (XactLockTableWait,
/// as SnapBuildWaitSnapshot does).
pub fn waits_for_xid(c: &mut Client, pid: i32, xid: u64) -> bool {
    c.query_one(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'transactionid' \
         AND NOT granted AND transactionid::text = $2)",
        &[&pid, &xid.to_string()],
    )
    .unwrap()
    .get(0)
}

// ---------------------------------------------------------------------------------------
// Sessions
// ---------------------------------------------------------------------------------------

/// A session holding an open transaction with an assigned xid.
pub struct OpenXact {
    client: Option<Client>,
    pub xid: u64,
    pub pid: i32,
}

impl OpenXact {
    pub fn begin(env: &Env, app: &str) -> OpenXact {
        let mut c = env.connect(app);
        let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        c.batch_execute("BEGIN").unwrap();
        let x: String = c
            .query_one("SELECT pg_current_xact_id()::xid::text", &[])
            .unwrap()
            .get(0);
        OpenXact {
            client: Some(c),
            xid: x.parse().unwrap(),
            pid,
        }
    }

    /// Runs SQL inside the open transaction.
    pub fn exec(&mut self, sql: &str) {
        self.client.as_mut().unwrap().batch_execute(sql).unwrap();
    }

    pub fn commit(mut self) {
        let mut c = self.client.take().unwrap();
        c.batch_execute("COMMIT").unwrap();
    }

    /// Runs SQL that returns one value inside the open transaction, as text.
    pub fn text(&mut self, sql: &str) -> String {
        let q = format!("SELECT ({sql})::text");
        self.client
            .as_mut()
            .unwrap()
            .query_one(q.as_str(), &[])
            .unwrap_or_else(|e| panic!("{sql}: {}", err_text(&e)))
            .get(0)
    }

    /// The current WAL insert position, seen from inside the transaction.
    pub fn insert_lsn(&mut self) -> u64 {
        parse_lsn(&self.text("pg_current_wal_insert_lsn()"))
    }

    pub fn rollback(mut self) {
        let mut c = self.client.take().unwrap();
        c.batch_execute("ROLLBACK").unwrap();
    }

    /// Ends the transaction with `PREPARE TRANSACTION gid` (the session stays usable).
    pub fn prepare(mut self, gid: &str) {
        let mut c = self.client.take().unwrap();
        c.batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
            .unwrap();
    }
}

impl Drop for OpenXact {
    fn drop(&mut self) {
        if let Some(mut c) = self.client.take() {
            let _ = c.batch_execute("ROLLBACK");
        }
    }
}

/// `pg_create_logical_replication_slot` running in its own session and thread.
pub struct Creation {
    pub pid: i32,
    pub slot: String,
    rx: mpsc::Receiver<Result<u64, String>>,
    done: Option<Result<u64, String>>,
    env: Env,
}

impl Creation {
    pub fn start(env: &Env, slot: &str, plugin: &str) -> Creation {
        Creation::start_with(env, slot, plugin, false)
    }

    /// [`Creation::start`] with the `twophase` argument of
    /// pg_create_logical_replication_slot (a slot decoding PREPARE on its own).
    pub fn start_with(env: &Env, slot: &str, plugin: &str, two_phase: bool) -> Creation {
        let mut c = env.connect_raw("pgsnap-create", "300s");
        let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let (tx, rx) = mpsc::channel();
        let (s, p) = (slot.to_string(), plugin.to_string());
        std::thread::spawn(move || {
            let r = c
                .query_one(
                    "SELECT lsn::text FROM pg_create_logical_replication_slot($1, $2, false, $3)",
                    &[&s, &p, &two_phase],
                )
                .map(|r| parse_lsn(&r.get::<_, String>(0)))
                .map_err(|e| err_text(&e));
            let _ = tx.send(r);
        });
        Creation {
            pid,
            slot: slot.to_string(),
            rx,
            done: None,
            env: env.clone(),
        }
    }

    /// Whether the creation has returned (then `wait` does not block). Does not consume
    /// the result.
    pub fn try_done(&mut self) -> bool {
        if self.done.is_some() {
            return true;
        }
        match self.rx.try_recv() {
            Ok(r) => {
                self.done = Some(r);
                true
            }
            Err(_) => false,
        }
    }

    /// What the function returned, or its error text (also when the connection was lost),
    /// within `timeout`.
    pub fn result(mut self, timeout: Duration) -> Result<u64, String> {
        if let Some(r) = self.done.take() {
            return r;
        }
        self.rx
            .recv_timeout(timeout)
            .unwrap_or_else(|_| Err(format!("did not return within {timeout:?}")))
    }

    /// The LSN the function returned (the slot's confirmed_flush).
    pub fn wait(mut self, timeout: Duration) -> u64 {
        if let Some(r) = self.done.take() {
            return r.unwrap_or_else(|e| {
                panic!(
                    "pg_create_logical_replication_slot({}) failed: {e}",
                    self.slot
                )
            });
        }
        match self.rx.recv_timeout(timeout) {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => panic!(
                "pg_create_logical_replication_slot({}) failed: {e}",
                self.slot
            ),
            Err(_) => {
                let mut c = self.env.connect("pgsnap-cancel");
                let _ = c.execute("SELECT pg_cancel_backend($1)", &[&self.pid]);
                panic!(
                    "pg_create_logical_replication_slot({}) did not return within {timeout:?}",
                    self.slot
                )
            }
        }
    }
}

/// Creates a slot in this thread (bounded by the session's statement_timeout).
pub fn create_slot(env: &Env, slot: &str) -> (i32, u64) {
    let cr = Creation::start(env, slot, "test_decoding");
    let pid = cr.pid;
    (pid, cr.wait(Duration::from_secs(120)))
}

/// Drops the slot when the test ends, even on panic (terminating a session still inside
/// its creation).
pub struct SlotGuard {
    env: Env,
    pub name: String,
}

impl SlotGuard {
    pub fn new(env: &Env, name: &str) -> SlotGuard {
        let g = SlotGuard {
            env: env.clone(),
            name: name.to_string(),
        };
        g.drop_now();
        g
    }

    pub fn drop_now(&self) {
        let Ok(mut c) = std::panic::catch_unwind(|| self.env.connect("pgsnap-cleanup")) else {
            return;
        };
        for _ in 0..50 {
            let r = c.query(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&self.name],
            );
            let Ok(rows) = r else { return };
            let Some(row) = rows.first() else { return };
            let active: Option<i32> = row.get(0);
            if let Some(pid) = active {
                let _ = c.execute("SELECT pg_terminate_backend($1)", &[&pid]);
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            let _ = c.execute("SELECT pg_drop_replication_slot($1)", &[&self.name]);
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.drop_now();
    }
}

// ---------------------------------------------------------------------------------------
// Server slot catalog
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct ServerSlot {
    pub restart_lsn: u64,
    pub confirmed_flush: Option<u64>,
    pub catalog_xmin: Option<u64>,
    pub active_pid: Option<i32>,
}

pub fn server_slot(c: &mut Client, name: &str) -> ServerSlot {
    let r = json_rows(
        c,
        "SELECT restart_lsn, confirmed_flush_lsn, catalog_xmin, active_pid FROM pg_replication_slots WHERE slot_name = $1",
        &[&name],
    )
    .unwrap();
    let r = r
        .first()
        .unwrap_or_else(|| panic!("slot {name} not in pg_replication_slots"));
    ServerSlot {
        restart_lsn: jlsn(r, "restart_lsn").expect("restart_lsn"),
        confirmed_flush: jlsn(r, "confirmed_flush_lsn"),
        catalog_xmin: jxid(r, "catalog_xmin"),
        active_pid: js(r, "active_pid").map(|s| s.parse().unwrap()),
    }
}

pub fn flush_lsn(c: &mut Client) -> u64 {
    parse_lsn(
        &c.query_one("SELECT pg_current_wal_flush_lsn()::text", &[])
            .unwrap()
            .get::<_, String>(0),
    )
}

// ---------------------------------------------------------------------------------------
// Server log
// ---------------------------------------------------------------------------------------

/// One server log message with the DETAIL that followed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub pid: i32,
    pub level: String,
    pub message: String,
    pub detail: Option<String>,
}

pub fn log_offset(env: &Env) -> u64 {
    std::fs::metadata(&env.log).unwrap().len()
}

fn log_line_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // default log_line_prefix '%m [%p] ': "2026-11-29 13:03:51.356 UTC [12754] LOG:  ..."
    RE.get_or_init(|| Regex::new(r"^\S+ \S+(?: \S+)? \[(\d+)\] ([A-Z0-9]+):  (.*)$").unwrap())
}

/// Messages logged since `offset`, with their DETAIL lines attached.
pub fn log_entries_since(env: &Env, offset: u64) -> Vec<LogEntry> {
    let mut f = std::fs::File::open(&env.log).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf);
    let mut out: Vec<LogEntry> = Vec::new();
    // which field a continuation line belongs to: 0 message, 1 detail, 2 other
    let mut last_field = 2;
    for line in text.lines() {
        if let Some(m) = log_line_re().captures(line) {
            let pid: i32 = m[1].parse().unwrap();
            let level = m[2].to_string();
            let body = m[3].to_string();
            match level.as_str() {
                "DETAIL" => {
                    if let Some(e) = out.iter_mut().rev().find(|e| e.pid == pid) {
                        if e.detail.is_none() {
                            e.detail = Some(body);
                        }
                    }
                    last_field = 1;
                }
                "HINT" | "CONTEXT" | "STATEMENT" | "QUERY" | "LOCATION" => last_field = 2,
                _ => {
                    out.push(LogEntry {
                        pid,
                        level,
                        message: body,
                        detail: None,
                    });
                    last_field = 0;
                }
            }
        } else if let Some(cont) = line.strip_prefix('\t') {
            if let Some(e) = out.last_mut() {
                match last_field {
                    0 => {
                        e.message.push('\n');
                        e.message.push_str(cont);
                    }
                    1 => {
                        if let Some(d) = e.detail.as_mut() {
                            d.push('\n');
                            d.push_str(cont);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn decoding_msg_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r"^(?:logical decoding found (?:initial starting point|initial consistent point|consistent point) at|skipping snapshot at) ([0-9A-F]+/[0-9A-F]+)",
        )
        .unwrap()
    })
}

/// The snapshot builder's messages (`logical decoding found ... at L`) a backend logged,
/// with the LSN they name.
pub fn builder_messages(entries: &[LogEntry], pid: i32) -> Vec<(u64, LogEntry)> {
    entries
        .iter()
        .filter(|e| e.pid == pid)
        .filter_map(|e| {
            decoding_msg_re()
                .captures(&e.message)
                .map(|m| (parse_lsn(&m[1]), e.clone()))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// WAL (pg_walinspect)
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// .snap files the server wrote
// ---------------------------------------------------------------------------------------

/// The files in the server's `pg_logical/snapshots` (as pg_ls_logicalsnapdir() lists them): name → size.
pub fn server_snap_files(c: &mut Client) -> BTreeMap<String, i64> {
    // pg_ls_logicalsnapdir() exists from 15; pg_ls_dir + pg_stat_file work everywhere.
    c.query("SELECT name, (pg_stat_file('pg_logical/snapshots/' || name)).size FROM pg_ls_dir('pg_logical/snapshots') AS name", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .filter(|(n, _)| n.ends_with(".snap"))
        .collect()
}

/// LSN named by a `%X-%X.snap` file name.
pub fn snap_lsn(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".snap")?;
    let (hi, lo) = stem.split_once('-')?;
    Some((u64::from_str_radix(hi, 16).ok()? << 32) | u64::from_str_radix(lo, 16).ok()?)
}

/// Drives a created slot until the server has written at least one `.snap` file for it;
/// returns the files present afterwards. `xact` (if any) stays open meanwhile.
pub fn produce_snap_files(
    env: &Env,
    c: &mut Client,
    slot: &str,
    table: &str,
) -> BTreeMap<String, i64> {
    for _ in 0..10 {
        env.log_standby_snapshot(c);
        // a commit flushes the WAL, so the decoder sees the RUNNING_XACTS just logged
        c.batch_execute(&format!("INSERT INTO {table} VALUES (1)"))
            .unwrap();
        c.query(
            "SELECT count(*) FROM pg_logical_slot_get_changes($1, NULL, NULL)",
            &[&slot],
        )
        .unwrap();
        let files = server_snap_files(c);
        if !files.is_empty() {
            return files;
        }
    }
    panic!("the server wrote no .snap file for slot {slot}");
}

// ---------------------------------------------------------------------------------------
// Trace rows and the checks every trace gets
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct TraceRow {
    pub raw: Row,
    pub lsn: Option<u64>,
    pub end_lsn: Option<u64>,
    pub record: String,
    pub xid: Option<u64>,
    pub branch: Option<String>,
    pub state_before: Option<String>,
    pub state: Option<String>,
    pub xmin: Option<u64>,
    pub xmax: Option<u64>,
    pub next_phase_at: Option<u64>,
    pub start_decoding_at: Option<u64>,
    pub running_xids: Option<Vec<u64>>,
    pub wait_xids: Option<Vec<u64>>,
    pub level: Option<String>,
    pub message: Option<String>,
    pub detail: Option<String>,
    pub initial_xmin_horizon: Option<u64>,
    pub in_slot_creation: Option<bool>,
    pub agrees: Option<bool>,
    pub disagreement: Option<String>,
    pub serialized_xmin: Option<u64>,
    pub serialized_xmax: Option<u64>,
}

impl TraceRow {
    /// What this row claims the `.snap` file at its LSN holds, as (state, xmin, xmax):
    /// a `serialize` row gives what SnapBuildSerialize wrote (taken before the record
    /// moves xmin), a branch `b` row the snapshot it restored. Other rows neither write nor
    /// read the file at their LSN (branch a, for one, is taken before any restore).
    pub fn file_claim(&self) -> Option<(Option<String>, Option<u64>, Option<u64>)> {
        match self.branch.as_deref() {
            Some("serialize") => Some((
                Some("consistent".into()),
                self.serialized_xmin,
                self.serialized_xmax,
            )),
            Some("b") => Some((self.state.clone(), self.xmin, self.xmax)),
            _ => None,
        }
    }

    pub fn show(&self) -> String {
        show(&self.raw)
    }
    pub fn is(&self, record: &str) -> bool {
        self.record == record
    }
    pub fn branch_is(&self, b: &str) -> bool {
        self.branch.as_deref() == Some(b)
    }
}

pub fn trace(c: &mut Client, slot: &str) -> Result<Vec<TraceRow>, postgres::Error> {
    let rows = json_rows(c, "SELECT * FROM snapbuild_trace($1::name)", &[&slot])?;
    Ok(trace_rows(rows))
}

/// Rows of `snapbuild_trace` / `snapbuild_trace_range` (as [`json_rows`] returns them) as
/// [`TraceRow`]s.
pub fn trace_rows(rows: Vec<Row>) -> Vec<TraceRow> {
    rows.into_iter()
        .map(|r| TraceRow {
            lsn: jlsn(&r, "lsn"),
            end_lsn: jlsn(&r, "end_lsn"),
            record: js(&r, "record").unwrap_or_default(),
            xid: jxid(&r, "xid"),
            branch: js(&r, "branch"),
            state_before: js(&r, "state_before"),
            state: js(&r, "state"),
            xmin: jxid(&r, "xmin"),
            xmax: jxid(&r, "xmax"),
            next_phase_at: jxid(&r, "next_phase_at"),
            start_decoding_at: jlsn(&r, "start_decoding_at"),
            running_xids: jxids(&r, "running_xids"),
            wait_xids: jxids(&r, "wait_xids"),
            level: js(&r, "level"),
            message: js(&r, "message"),
            detail: js(&r, "detail"),
            initial_xmin_horizon: jxid(&r, "initial_xmin_horizon"),
            in_slot_creation: jb(&r, "in_slot_creation"),
            agrees: jb(&r, "agrees"),
            disagreement: js(&r, "disagreement"),
            serialized_xmin: jxid(&r, "serialized_xmin"),
            serialized_xmax: jxid(&r, "serialized_xmax"),
            raw: r,
        })
        .collect()
}

/// The snapshot builder branch a server LOG line of slot creation or restart names: `c-1`,
/// `c-2`, `a`, `b`, `c-3` (the DETAIL tells a, b and c-3 apart), `xmin horizon too low`
/// (the "skipping snapshot" line), `?` for anything else.
pub fn log_branch(e: &LogEntry) -> &'static str {
    let m = &e.message;
    if m.starts_with("logical decoding found initial starting point") {
        "c-1"
    } else if m.starts_with("logical decoding found initial consistent point") {
        "c-2"
    } else if m.starts_with("logical decoding found consistent point") {
        match e.detail.as_deref() {
            Some("There are no running transactions.") => "a",
            Some("There are no old transactions anymore.") => "c-3",
            Some("Logical decoding will begin using saved snapshot.") => "b",
            _ => "?",
        }
    } else if m.starts_with("skipping snapshot") {
        "xmin horizon too low"
    } else {
        "?"
    }
}

pub fn dump(rows: &[TraceRow]) -> String {
    let mut s = String::new();
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<20} {:>10} -> {:>10} {:<8} state {:?} -> {:?} xmin {:?} xmax {:?} npa {:?} running {:?} wait {:?} {:?} {:?} / {:?} agrees {:?} {:?}",
            r.record,
            r.lsn.map(fmt_lsn).unwrap_or_default(),
            r.end_lsn.map(fmt_lsn).unwrap_or_default(),
            r.branch.clone().unwrap_or_default(),
            r.state_before,
            r.state,
            r.xmin,
            r.xmax,
            r.next_phase_at,
            r.running_xids,
            r.wait_xids,
            r.level,
            r.message,
            r.detail,
            r.agrees,
            r.disagreement
        );
    }
    s
}

pub fn dump_log(entries: &[(u64, LogEntry)]) -> String {
    entries
        .iter()
        .map(|(l, e)| {
            format!(
                "  {} [{}] {}: {} / {:?}\n",
                fmt_lsn(*l),
                e.pid,
                e.level,
                e.message,
                e.detail
            )
        })
        .collect()
}

/// The row where the replay became consistent (state_before not consistent, state consistent).
pub fn consistent_row(rows: &[TraceRow]) -> Option<&TraceRow> {
    rows.iter().find(|r| {
        r.state.as_deref() == Some("consistent")
            && r.state_before.as_deref() != Some("consistent")
            && r.lsn.is_some()
            && r.record != "REPLAY START"
    })
}

#[derive(Default, Debug, Clone, Copy)]
pub struct TraceStats {
    pub rows: usize,
    pub running_xacts_rows: usize,
    pub wal_records_matched: usize,
    pub agrees_true: usize,
    pub agrees_false: usize,
    pub agrees_null: usize,
}

impl std::ops::AddAssign for TraceStats {
    fn add_assign(&mut self, o: Self) {
        self.rows += o.rows;
        self.running_xacts_rows += o.running_xacts_rows;
        self.wal_records_matched += o.wal_records_matched;
        self.agrees_true += o.agrees_true;
        self.agrees_false += o.agrees_false;
        self.agrees_null += o.agrees_null;
    }
}

/// Checks a trace against what the server wrote to its WAL and slot catalog:
/// * the REPLAY START row starts at the slot's restart_lsn (pg_replication_slots);
/// * every RUNNING_XACTS row is a RUNNING_XACTS record in the WAL at the same
///   [lsn, end_lsn), with the same running xids; every such record in the WAL between
///   restart_lsn and `flush_before` (taken before the trace call) is a row;
/// * c-1/c-2 rows wait for exactly the record's xids (SnapBuildWaitSnapshot, cutoff nextXid);
/// * before consistency, branch a is taken exactly when the record has oldestRunningXid ==
///   nextXid (a is tested first in SnapBuildFindSnapshot);
/// * a LOG/DEBUG1 message names the row's own LSN;
/// * no row says agrees = false.
pub fn check_trace_against_wal(
    c: &mut Client,
    slot_restart_lsn: u64,
    flush_before: u64,
    rows: &[TraceRow],
) -> TraceStats {
    let ctx = || dump(rows);
    assert!(!rows.is_empty(), "empty trace");
    let first = &rows[0];
    assert_eq!(
        first.record,
        "REPLAY START",
        "first trace row must be REPLAY START:\n{}",
        ctx()
    );
    if let Some(l) = first.lsn {
        assert_eq!(
            l,
            slot_restart_lsn,
            "REPLAY START at {} but the slot's restart_lsn (pg_replication_slots) is {}",
            fmt_lsn(l),
            fmt_lsn(slot_restart_lsn)
        );
    }
    let end = rows
        .iter()
        .filter_map(|r| r.end_lsn.or(r.lsn))
        .max()
        .unwrap_or(slot_restart_lsn)
        .max(flush_before);
    let wal: BTreeMap<u64, WalRunningXacts> = wal_running_xacts(c, slot_restart_lsn, end)
        .into_iter()
        .map(|w| (w.start, w))
        .collect();
    let mut st = TraceStats {
        rows: rows.len(),
        ..Default::default()
    };
    let mut prev_lsn = 0u64;
    let mut seen = BTreeSet::new();
    for r in rows {
        match r.agrees {
            Some(true) => st.agrees_true += 1,
            Some(false) => st.agrees_false += 1,
            None => st.agrees_null += 1,
        }
        if let Some(l) = r.lsn {
            assert!(
                l >= prev_lsn,
                "trace rows out of LSN order at {}:\n{}",
                fmt_lsn(l),
                ctx()
            );
            prev_lsn = l;
            if let Some(m) = r.message.as_deref() {
                if let Some(cap) = decoding_msg_re().captures(m) {
                    assert_eq!(
                        parse_lsn(&cap[1]),
                        l,
                        "message names another LSN than its row: {}",
                        r.show()
                    );
                }
            }
        }
        if r.record != "RUNNING_XACTS" {
            continue;
        }
        st.running_xacts_rows += 1;
        let l = r.lsn.expect("RUNNING_XACTS row without lsn");
        let w = wal.get(&l).unwrap_or_else(|| {
            panic!(
                "trace row at {} is not a RUNNING_XACTS record in the server's WAL (pg_walinspect):\n{}",
                fmt_lsn(l),
                ctx()
            )
        });
        seen.insert(l);
        st.wal_records_matched += 1;
        assert_eq!(
            r.end_lsn,
            Some(w.end),
            "end_lsn of {} differs from the WAL's ({}):\n{}",
            fmt_lsn(l),
            fmt_lsn(w.end),
            ctx()
        );
        let mut ours = r.running_xids.clone().unwrap_or_default();
        ours.sort_unstable();
        let mut theirs = w.xacts.clone();
        theirs.sort_unstable();
        // The row lists the record's top-level xids and subxids. The description has both
        // from 16 on; before that only the top-level ones, which must all be in the row.
        if w.lists_subxacts {
            let mut all: Vec<u64> = theirs.iter().chain(&w.subxacts).copied().collect();
            all.sort_unstable();
            assert_eq!(
                ours,
                all,
                "running_xids at {} differ from the WAL record ({}):\n{}",
                fmt_lsn(l),
                w.description,
                ctx()
            );
        } else {
            let missing: Vec<u64> = theirs
                .iter()
                .filter(|x| ours.binary_search(x).is_err())
                .copied()
                .collect();
            assert!(
                missing.is_empty(),
                "running_xids at {} lack {missing:?} of the WAL record ({}):\n{}",
                fmt_lsn(l),
                w.description,
                ctx()
            );
        }
        if r.branch_is("c-1") || r.branch_is("c-2") {
            let mut wait = r.wait_xids.clone().unwrap_or_default();
            wait.sort_unstable();
            let mut expect: Vec<u64> = theirs
                .iter()
                .copied()
                .filter(|x| *x <= w.next_xid)
                .collect();
            expect.sort_unstable();
            assert_eq!(
                wait,
                expect,
                "wait_xids at {} ({}):\n{}",
                fmt_lsn(l),
                w.description,
                ctx()
            );
        }
        if r.state_before.as_deref() != Some("consistent") && !r.branch_is("xmin horizon too low") {
            let nothing_running = w.oldest_running_xid == w.next_xid;
            assert_eq!(
                r.branch_is("a"),
                nothing_running,
                "at {} the WAL says '{}' but the trace took branch {:?}:\n{}",
                fmt_lsn(l),
                w.description,
                r.branch,
                ctx()
            );
        }
    }
    for (l, w) in &wal {
        if w.end <= flush_before && *l >= slot_restart_lsn {
            assert!(
                seen.contains(l),
                "the WAL has RUNNING_XACTS at {} ({}) (flushed before the trace call) but the trace has no row for it:\n{}",
                fmt_lsn(*l),
                w.description,
                ctx()
            );
        }
    }
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| r.agrees == Some(false))
        .map(|r| {
            format!(
                "{} {:?}: {:?}",
                r.lsn.map(fmt_lsn).unwrap_or_default(),
                r.record,
                r.disagreement
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "trace rows disagree with the server:\n{}\n{}",
        bad.join("\n"),
        ctx()
    );
    st
}

/// The server's builder messages (LOG lines of `pid`) and the trace's LOG-level rows up to
/// and including consistency must be the same (lsn, message, detail) triples.
pub fn compare_log_with_trace(server: &[(u64, LogEntry)], rows: &[TraceRow], upto: Option<u64>) {
    let theirs: Vec<(u64, String, Option<String>)> = server
        .iter()
        .filter(|(_, e)| e.level == "LOG")
        .map(|(l, e)| (*l, e.message.clone(), e.detail.clone()))
        .collect();
    let ours: Vec<(u64, String, Option<String>)> = rows
        .iter()
        .filter(|r| r.level.as_deref() == Some("LOG") && r.message.is_some() && r.lsn.is_some())
        .filter(|r| upto.is_none_or(|u| r.lsn.unwrap() <= u))
        .filter(|r| r.record != "REPLAY START")
        .map(|r| {
            (
                r.lsn.unwrap(),
                r.message.clone().unwrap(),
                r.detail.clone().filter(|d| !d.is_empty()),
            )
        })
        .collect();
    assert_eq!(
        ours,
        theirs,
        "LOG-level builder messages differ.\nserver log:\n{}trace:\n{}",
        dump_log(server),
        dump(rows)
    );
}

/// Failures collected so that one test reports every disagreement it finds, not only the
/// first; `finish` fails the test if there is any.
#[derive(Default, Debug)]
pub struct Failures(pub Vec<String>);

impl Failures {
    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let w = what();
            println!("FAILURE: {w}");
            self.0.push(w);
        }
    }

    pub fn finish(self, test: &str) {
        assert!(
            self.0.is_empty(),
            "{test}: {} failure(s):\n{}",
            self.0.len(),
            self.0.join("\n---\n")
        );
    }
}

// ---------------------------------------------------------------------------------------
// What test_decoding emitted, and what the replay says it emits
// ---------------------------------------------------------------------------------------

/// What the output plugin is called for, by the replay's `verdict` label of a trace row:
/// `decoded` → a commit; `prepared` and `prepared: no changes` (PostgreSQL 18 sends a
/// PREPARE without changes, 14-17 label that case `skipped: no decoded changes`) → a
/// prepare; `commit prepared` → a commit prepared; `prepared and commit prepared` (a
/// transaction prepared before the slot's two_phase_at is sent whole at COMMIT PREPARED)
/// → both; `rollback prepared` → a rollback prepared; anything else (`skipped: …`,
/// `prepare skipped: …`, `prepare filtered: …`) → nothing.
pub fn emits_for_verdict(label: &str) -> &'static [&'static str] {
    match label {
        "decoded" => &["commit"],
        "prepared" | "prepared: no changes" => &["prepare"],
        "commit prepared" => &["commit_prepared"],
        "prepared and commit prepared" => &["prepare", "commit_prepared"],
        "rollback prepared" => &["rollback_prepared"],
        _ => &[],
    }
}

/// The transactions `test_decoding` emits for `slot` from its confirmed_flush up to `upto`
/// (a peek: the slot does not move), as (kind, xid) with kind one of `commit`, `prepare`,
/// `commit_prepared`, `rollback_prepared`: the lines `COMMIT <xid>`, `PREPARE TRANSACTION
/// '<gid>', txid <xid>`, `COMMIT PREPARED '<gid>', txid <xid>`, `ROLLBACK PREPARED '<gid>',
/// txid <xid>` of `pg_logical_slot_peek_changes(slot, upto, NULL, 'include-xids', '1',
/// 'skip-empty-xacts', '0')`. The server reads records until one ends at or after `upto`,
/// so with `upto` a record boundary (a flush position) it covers the records ending at or
/// before it, as [`emitted_by_replay`] does.
pub fn emitted_by_test_decoding(c: &mut Client, slot: &str, upto: u64) -> BTreeSet<(String, u64)> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(
            r"^(?:COMMIT (\d+)|(PREPARE TRANSACTION|COMMIT PREPARED|ROLLBACK PREPARED) '(?:[^']|'')*', txid (\d+))",
        )
        .unwrap()
    });
    let rows = c
        .query(
            "SELECT data FROM pg_logical_slot_peek_changes($1::name, $2::text::pg_lsn, NULL, \
             'include-xids', '1', 'skip-empty-xacts', '0')",
            &[&slot, &fmt_lsn(upto)],
        )
        .unwrap_or_else(|e| {
            panic!(
                "pg_logical_slot_peek_changes({slot}, {}): {}",
                fmt_lsn(upto),
                err_text(&e)
            )
        });
    rows.iter()
        .filter_map(|r| {
            let data: String = r.get(0);
            let m = re.captures(&data)?;
            Some(match (m.get(1), m.get(2), m.get(3)) {
                (Some(x), _, _) => ("commit".to_string(), x.as_str().parse().unwrap()),
                (None, Some(kind), Some(x)) => (
                    match kind.as_str() {
                        "PREPARE TRANSACTION" => "prepare",
                        "COMMIT PREPARED" => "commit_prepared",
                        _ => "rollback_prepared",
                    }
                    .to_string(),
                    x.as_str().parse().unwrap(),
                ),
                _ => unreachable!("{data}"),
            })
        })
        .collect()
}

/// What the replay says `test_decoding` emits: every trace row ending at or before `upto`
/// whose `verdict` names an output-plugin call ([`emits_for_verdict`]), as (kind, xid)
/// pairs comparable with [`emitted_by_test_decoding`]. (Rows with `decoded = true` are
/// meant to be exactly those.)
pub fn emitted_by_replay(rows: &[TraceRow], upto: u64) -> BTreeSet<(String, u64)> {
    let mut out = BTreeSet::new();
    for r in rows {
        if !r.end_lsn.is_some_and(|e| e <= upto) {
            continue;
        }
        let Some(label) = js_opt(&r.raw, "verdict") else {
            continue;
        };
        let Some(x) = r.xid else { continue };
        for kind in emits_for_verdict(&label) {
            out.insert((kind.to_string(), x));
        }
    }
    out
}

/// A text column of a row that may lack it (NULL and missing alike: `None`).
fn js_opt(r: &Row, k: &str) -> Option<String> {
    match r.get(k) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    }
}
