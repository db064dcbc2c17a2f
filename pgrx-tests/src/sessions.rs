//! Sessions the tests drive: open transactions, slot creations in their own thread,
//! slot cleanup (and a test's start with its slot), and the server's slot catalog.

use crate::cluster::{start, Env, Serial};
use crate::values::{err_text, jlsn, js, json_rows, jxid, parse_lsn, query_column};
use postgres::Client;
use std::sync::mpsc;
use std::time::Duration;

/// The session's backend pid.
pub fn backend_pid(c: &mut Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0)
}

/// The xid of the session's transaction (assigning one if it has none).
pub fn current_xid(c: &mut Client) -> u64 {
    c.query_one("SELECT pg_current_xact_id()::xid::text", &[])
        .unwrap()
        .get::<_, String>(0)
        .parse()
        .unwrap()
}

/// `pg_xact_status` of `full` on the node `c` is connected to: the server's own word.
pub fn xact_status(c: &mut Client, full: u64) -> String {
    c.query_one(
        "SELECT pg_xact_status($1::text::xid8)",
        &[&full.to_string()],
    )
    .unwrap()
    .get(0)
}

/// A session holding a snapshot (REPEATABLE READ, one query) but no xid: a slot creation
/// does not wait for it.
pub fn snapshot_only(env: &Env) -> Client {
    let mut d = env.connect("pgsnap-diag-decoy");
    d.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class")
        .unwrap();
    let has_xid: bool = d
        .query_one("SELECT pg_current_xact_id_if_assigned() IS NOT NULL", &[])
        .unwrap()
        .get(0);
    assert!(!has_xid, "the decoy must hold no xid");
    d
}

/// A session holding an open transaction with an assigned xid.
pub struct OpenXact {
    client: Option<Client>,
    pub xid: u64,
    pub pid: i32,
}

impl OpenXact {
    pub fn begin(env: &Env, app: &str) -> OpenXact {
        let mut c = env.connect(app);
        let pid = backend_pid(&mut c);
        c.batch_execute("BEGIN").unwrap();
        let xid = current_xid(&mut c);
        OpenXact {
            client: Some(c),
            xid,
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
        let pid = backend_pid(&mut c);
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

/// The start of a live test with a slot of its own: [`start`], then a [`SlotGuard`] for
/// `slot` (dropped first when the test ends, also on failure). `None` when live tests are
/// skipped on purpose.
pub fn start_with_slot(slot: &str) -> Option<(Serial, Env, Client, SlotGuard)> {
    let (g, env, c) = start()?;
    let guard = SlotGuard::new(&env, slot);
    Some((g, env, c, guard))
}

/// [`start_with_slot`], then table `table` (`i int`; kept if it exists) for the test to
/// write to, and `slot` created.
pub fn start_with_created_slot(
    slot: &str,
    table: &str,
) -> Option<(Serial, Env, Client, SlotGuard)> {
    let (g, env, mut c, guard) = start_with_slot(slot)?;
    c.batch_execute(&format!("CREATE TABLE IF NOT EXISTS {table} (i int)"))
        .unwrap();
    create_slot(&env, slot);
    Some((g, env, c, guard))
}

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

/// The health view's rows of `slots`, one text per slot in name order: every column but the
/// WAL this call read, where the replay is kept, and the seconds since the last
/// RUNNING_XACTS (which change with the call and the clock). Two scrapes at one flush
/// position that judge alike give the same rows.
pub fn health_rows(c: &mut Client, slots: &[&str]) -> Vec<String> {
    let names: Vec<String> = slots.iter().map(|s| s.to_string()).collect();
    query_column(
        c,
        "SELECT format('%s %s %s %s %s %s %s %s %s %s %s', slot_name, state, in_creation,
                waiting_xids, oldest_blocking_pid, restart_lsn_lag_bytes,
                confirmed_flush_lag_bytes, catalog_xmin_age, last_running_xacts,
                wal_since_running_xacts_bytes, releasable_bytes)
           FROM snapbuild_slot_health WHERE slot_name = ANY($1) ORDER BY slot_name",
        &[&names],
        "snapbuild_slot_health",
    )
}

/// WAL bytes each of `slots` took in one health scrape of `c`, in name order.
pub fn replayed_bytes(c: &mut Client, slots: &[&str]) -> Vec<i64> {
    let names: Vec<String> = slots.iter().map(|s| s.to_string()).collect();
    query_column(
        c,
        "SELECT replayed_bytes FROM snapbuild_slot_health
          WHERE slot_name = ANY($1) ORDER BY slot_name",
        &[&names],
        "snapbuild_slot_health",
    )
}
