//! The live cluster: its environment, one test at a time, connections, the WAL flush and
//! insert positions, waiting.

use crate::values::{err_text, parse_lsn};
use postgres::{Client, Config, NoTls};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

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

/// The start of a live test: [`serial`], the environment ([`env`]) and a set-up session
/// ([`Env::setup`]); `None` when live tests are skipped on purpose.
pub fn start() -> Option<(Serial, Env, Client)> {
    let g = serial();
    let env = env()?;
    let c = env.setup();
    Some((g, env, c))
}

static SETUP: OnceLock<()> = OnceLock::new();

/// A server setting a test changes with ALTER SYSTEM and a reload (no restart); put back
/// (ALTER SYSTEM RESET, reload) when dropped, also on panic. See [`Env::set_reloaded`].
pub struct ReloadedSetting<'e> {
    env: &'e Env,
    name: String,
}

impl Drop for ReloadedSetting<'_> {
    fn drop(&mut self) {
        let mut c = self.env.connect("pgsnap-reset-setting");
        let _ = c.batch_execute(&format!("ALTER SYSTEM RESET {}", self.name));
        let _ = c.batch_execute("SELECT pg_reload_conf()");
    }
}

impl Env {
    /// `ALTER SYSTEM SET name = value` and a reload, then waits (up to 60 s) until a new
    /// session shows `value` (`SHOW name`). The setting is reset when the returned guard
    /// is dropped.
    pub fn set_reloaded(&self, name: &str, value: &str) -> ReloadedSetting<'_> {
        let mut c = self.connect("pgsnap-set-setting");
        // one statement per call: ALTER SYSTEM refuses a multi-statement (implicit) block
        c.batch_execute(&format!("ALTER SYSTEM SET {name} = {value}"))
            .unwrap();
        c.batch_execute("SELECT pg_reload_conf()").unwrap();
        let guard = ReloadedSetting {
            env: self,
            name: name.to_owned(),
        };
        wait_for(
            &format!("{name} = {value} in new sessions"),
            Duration::from_secs(60),
            || {
                let v: String = self
                    .connect("pgsnap-show-setting")
                    .query_one(&format!("SHOW {name}"), &[])
                    .unwrap()
                    .get(0);
                v == value.trim_matches('\'')
            },
        );
        guard
    }

    /// A new session that keeps its slot replays to itself (`pg_snapbuild.shared_state =
    /// off`) and feeds each on its own (`pg_snapbuild.join_replays = off`): its first
    /// `snapbuild_slot_health` or `snapbuild_diagnose` replays every slot from its
    /// restart_lsn, whatever other sessions left in shared memory, and none follows
    /// another's.
    pub fn connect_unshared(&self, app: &str) -> Client {
        let mut c = self.connect(app);
        c.batch_execute("SET pg_snapbuild.shared_state = off; SET pg_snapbuild.join_replays = off")
            .expect("SET pg_snapbuild.shared_state, join_replays");
        c
    }

    /// A crash restart: a backend of this cluster killed with SIGKILL, so that the
    /// postmaster ends every process, reinitializes shared memory and starts again. Returns
    /// a new session (`app`) once the server accepts connections again (up to 60 s).
    pub fn crash_restart(&self, app: &str) -> Client {
        let mut victim = self.connect("pgsnap-crash-victim");
        let pid: i32 = victim
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success(), "kill -9 {pid}");
        drop(victim);
        let cfg = self.config(app);
        let until = Instant::now() + Duration::from_secs(60);
        // The old postmaster may still accept a connection before it notices the death.
        std::thread::sleep(Duration::from_millis(500));
        loop {
            match cfg.connect(NoTls) {
                Ok(c) => return c,
                Err(e) if Instant::now() > until => {
                    panic!("no connection after the crash restart: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    /// A new session with `statement_timeout` (so nothing waits forever).
    pub fn connect(&self, app: &str) -> Client {
        self.connect_raw(app, "120s")
    }

    /// [`Env::connect`], with the NOTICE and WARNING messages the server sends the session
    /// collected (as `SEVERITY: message`) in the returned list.
    pub fn connect_with_notices(&self, app: &str) -> (Client, std::sync::Arc<Mutex<Vec<String>>>) {
        let notices = std::sync::Arc::new(Mutex::new(Vec::new()));
        let sink = notices.clone();
        let mut cfg = self.config(app);
        cfg.notice_callback(move |n| {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
                "{}: {}",
                n.severity(),
                n.message()
            ));
        });
        let mut c = cfg
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("cannot connect to {}:{}: {e}", self.host, self.port));
        c.batch_execute("SET statement_timeout = '120s'")
            .expect("SET statement_timeout");
        (c, notices)
    }

    /// How a session of this cluster connects, as `app` (10 s connect timeout).
    fn config(&self, app: &str) -> Config {
        let mut cfg = Config::new();
        cfg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(app)
            .connect_timeout(Duration::from_secs(10));
        cfg
    }

    pub(crate) fn connect_raw(&self, app: &str, statement_timeout: &str) -> Client {
        let mut c = self
            .config(app)
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

    /// [`Env::log_standby_snapshot`], then `INSERT INTO table VALUES (values)` committed:
    /// a commit flushes the WAL, so a decoder sees the RUNNING_XACTS just logged.
    pub fn log_standby_snapshot_flushed(
        &self,
        c: &mut Client,
        table: &str,
        values: &str,
    ) -> Option<u64> {
        let l = self.log_standby_snapshot(c);
        c.batch_execute(&format!("INSERT INTO {table} VALUES ({values})"))
            .unwrap();
        l
    }

    /// The statement that logs a RUNNING_XACTS record on this major (see
    /// [`Env::log_standby_snapshot`]).
    pub fn standby_snapshot_sql(&self) -> &'static str {
        if self.major >= 16 {
            "SELECT pg_log_standby_snapshot()"
        } else {
            "CHECKPOINT"
        }
    }

    pub fn snapshots_dir(&self) -> PathBuf {
        self.pgdata.join("pg_logical").join("snapshots")
    }

    /// Restarts the server with `pg_ctl restart -m fast` (a clean shutdown: a shutdown
    /// checkpoint, slots saved) or `-m immediate` (a crash: recovery replays the WAL, slots
    /// come back as last saved). As the OS user `postgres` (through `sudo -n` when running
    /// as another user), with the `pg_ctl` found first in `PATH` (`cluster.sh env` puts
    /// the cluster's `bin` there) and the log kept at `PGSNAP_LOG`. Every connection is
    /// gone afterwards.
    pub fn restart(&self, immediate: bool) -> Result<(), String> {
        let mode = if immediate { "immediate" } else { "fast" };
        self.pg_ctl(&["restart", "-m", mode, "-w", "-t", "120", "-l"], true)
    }

    /// `pg_ctl stop -m fast`, waiting for the server to end; returns how long that took.
    pub fn stop_fast(&self) -> Result<Duration, String> {
        let t0 = Instant::now();
        self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "120"], false)?;
        Ok(t0.elapsed())
    }

    /// `pg_ctl start`, waiting until the server accepts connections (log at `PGSNAP_LOG`).
    pub fn start_server(&self) -> Result<(), String> {
        self.pg_ctl(&["start", "-w", "-t", "120", "-l"], true)
    }

    /// `pg_ctl ACTION -D pgdata ARGS [log]` as the OS user `postgres` (through `sudo -n`
    /// when running as another user), with the `pg_ctl` found first in `PATH`
    /// (`cluster.sh env` puts the cluster's `bin` there); `with_log`: the log file is the
    /// last argument (after `-l`).
    fn pg_ctl(&self, args: &[&str], with_log: bool) -> Result<(), String> {
        let pg_ctl = std::env::var_os("PATH")
            .and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("pg_ctl"))
                    .find(|f| f.is_file())
            })
            .ok_or("pg_ctl is not in PATH (eval \"$(scripts/cluster.sh env MAJOR)\")")?;
        let as_root = std::env::var("USER").as_deref() != Ok("postgres")
            && std::process::Command::new("id")
                .arg("-un")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim() != "postgres")
                .unwrap_or(true);
        let mut cmd = if as_root {
            let mut c = std::process::Command::new("sudo");
            c.args(["-n", "-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            std::process::Command::new(&pg_ctl)
        };
        cmd.current_dir("/")
            .arg(args[0])
            .arg("-D")
            .arg(&self.pgdata)
            .args(&args[1..]);
        if with_log {
            cmd.arg(&self.log);
        }
        let out = cmd
            .output()
            .map_err(|e| format!("{}: {e}", pg_ctl.display()))?;
        if !out.status.success() {
            return Err(format!(
                "pg_ctl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// The same cluster, database `dbname`: created if missing, with pg_snapbuild in it
    /// (slots are per database; tests with several databases connect through this).
    pub fn in_database(&self, dbname: &str) -> Env {
        let mut c = self.connect("pgsnap-setup");
        let exists: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
                &[&dbname],
            )
            .unwrap()
            .get(0);
        if !exists {
            c.batch_execute(&format!("CREATE DATABASE {dbname}"))
                .unwrap_or_else(|e| panic!("CREATE DATABASE {dbname}: {}", err_text(&e)));
        }
        let other = Env {
            dbname: dbname.to_owned(),
            ..self.clone()
        };
        other
            .connect("pgsnap-setup")
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_snapbuild")
            .unwrap_or_else(|e| {
                panic!(
                    "CREATE EXTENSION pg_snapbuild in {dbname}: {}",
                    err_text(&e)
                )
            });
        other
    }
}

/// A session in database `name` (created if missing).
pub fn connect_db(env: &Env, c: &mut Client, name: &str, app: &str) -> Client {
    let exists = c
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .unwrap()
        .is_some();
    if !exists {
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    }
    let mut cfg = postgres::Config::new();
    cfg.host(&env.host)
        .port(env.port)
        .user(&env.user)
        .dbname(name)
        .application_name(app);
    cfg.connect(postgres::NoTls).unwrap()
}

/// The server's WAL flush position (on a standby: the end of the last replayed record,
/// as far as WAL can be read there).
pub fn flush_lsn(c: &mut Client) -> u64 {
    parse_lsn(
        &c.query_one(
            "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
             ELSE pg_current_wal_flush_lsn() END)::text",
            &[],
        )
        .unwrap()
        .get::<_, String>(0),
    )
}

/// The server's WAL insert position now.
pub fn insert_lsn(c: &mut Client) -> u64 {
    let s: String = c
        .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
        .unwrap()
        .get(0);
    parse_lsn(&s)
}

/// How long a test waits for the server to show a step it caused (a creation waiting in
/// `pg_locks`, a builder line in the log).
pub const WAIT: Duration = Duration::from_secs(30);

/// How long a test waits for a slot creation to return.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(90);

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
