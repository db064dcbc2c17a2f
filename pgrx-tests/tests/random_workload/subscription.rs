//! A built-in subscription beside the workload: a publication in the test's database, a
//! subscription in the second one, both on the same cluster (so its slot is created first,
//! by SQL, as the documentation asks for a subscription to its own cluster). Its walsender
//! decodes with pgoutput while the workload runs (it restarts with the server), its tablesync
//! worker creates a temporary slot through the replication protocol, and at the end its slot
//! is traced while the walsender holds it.

use crate::exec::cleanup_prefix;
use pg_snapbuild_tests::*;
use postgres::Client;
use std::time::{Duration, Instant};

/// The subscription of a run (`<prefix>_sub`, its slot of the same name).
pub struct Subscription {
    pub name: String,
    guard: SlotGuard,
}

/// What the subscription's slot looked like when it was traced.
#[derive(Clone, Debug)]
pub struct SubscriptionObs {
    pub slot: String,
    /// `pg_replication_slots.active` right before the trace.
    pub active: bool,
    pub trace: Result<Vec<TraceRow>, String>,
}

impl Subscription {
    /// Publication `<prefix>_pub` of its own table `<prefix>_pub` (in both databases, 100
    /// rows in the publisher's; the workload's DDL and deletes do not touch it, so the
    /// subscriber never stops on a missing column or a replica identity), slot
    /// `<prefix>_sub` (pgoutput), then the subscription in `admin_b`'s database (copy_data
    /// on: a tablesync worker copies the table through a temporary slot it creates over
    /// the replication protocol; streaming on). Its walsender decodes all of the WAL
    /// whatever it publishes.
    pub fn create(
        env: &Env,
        admin: &mut Client,
        admin_b: &mut Client,
        prefix: &str,
    ) -> Subscription {
        let name = format!("{prefix}_sub");
        drop_subscription(admin_b, &name);
        let guard = SlotGuard::new(env, &name);
        let table = format!("{prefix}_pub");
        admin
            .batch_execute(&format!(
                "DROP PUBLICATION IF EXISTS {table}; CREATE TABLE IF NOT EXISTS {table}(a int, b text); \
                 INSERT INTO {table} SELECT g, 'p' FROM generate_series(1, 100) g; \
                 CREATE PUBLICATION {table} FOR TABLE {table}"
            ))
            .unwrap();
        admin_b
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {table}(a int, b text)"
            ))
            .unwrap();
        Creation::start(env, &name, "pgoutput").wait(Duration::from_secs(120));
        admin_b
            .batch_execute(&format!(
                "CREATE SUBSCRIPTION {name} CONNECTION 'host={} port={} user={} dbname={}' \
                 PUBLICATION {prefix}_pub WITH (create_slot = false, slot_name = '{name}', copy_data = true, streaming = on)",
                env.host, env.port, env.user, env.dbname
            ))
            .unwrap_or_else(|e| panic!("CREATE SUBSCRIPTION {name}: {}", err_text(&e)));
        Subscription { name, guard }
    }

    /// Waits (up to 20 s) for the walsender to hold the slot, then traces it.
    pub fn observe(&self, admin: &mut Client) -> SubscriptionObs {
        let t0 = Instant::now();
        let mut active = false;
        while t0.elapsed() < Duration::from_secs(20) {
            active = admin
                .query_opt(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                    &[&self.name],
                )
                .ok()
                .flatten()
                .is_some_and(|r| r.get::<_, bool>(0));
            if active {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let trace = trace(admin, &self.name).map_err(|e| err_text(&e));
        SubscriptionObs {
            slot: self.name.clone(),
            active,
            trace,
        }
    }

    /// Drops the subscription (without letting it drop the slot over a connection to this
    /// very cluster), then the slot and the publication.
    pub fn drop_all(self, admin: &mut Client, admin_b: &mut Client, prefix: &str) {
        drop_subscription(admin_b, &self.name);
        drop(self.guard);
        let _ = admin.batch_execute(&format!("DROP PUBLICATION IF EXISTS {prefix}_pub"));
        cleanup_prefix(admin_b, prefix);
    }
}

/// DISABLE, detach from the slot, DROP SUBSCRIPTION (each may fail when it is not there).
fn drop_subscription(c: &mut Client, name: &str) {
    let exists = c
        .query_opt("SELECT 1 FROM pg_subscription WHERE subname = $1", &[&name])
        .ok()
        .flatten()
        .is_some();
    if exists {
        let _ = c.batch_execute(&format!("ALTER SUBSCRIPTION {name} DISABLE"));
        let _ = c.batch_execute(&format!("ALTER SUBSCRIPTION {name} SET (slot_name = NONE)"));
        let _ = c.batch_execute(&format!("DROP SUBSCRIPTION {name}"));
    }
}
