//! A slot's decoding statistics in `pg_stat_replication_slots`: the eight counters one
//! decode adds, read, reset and waited for (15+ updates them at once; 14 sends them to the
//! statistics collector, which applies them later).

use crate::cluster::wait_for;
use crate::values::err_text;
use postgres::Client;
use std::time::{Duration, Instant};

/// The eight counters, in the order every function here gives them.
pub const SLOT_COUNTERS: [&str; 8] = [
    "total_txns",
    "total_bytes",
    "spill_txns",
    "spill_count",
    "spill_bytes",
    "stream_txns",
    "stream_count",
    "stream_bytes",
];

/// The slot's counters (a fresh statistics snapshot).
pub fn slot_counters(c: &mut Client, slot: &str) -> Result<Vec<i64>, String> {
    c.batch_execute("SELECT pg_stat_clear_snapshot()")
        .map_err(|e| err_text(&e))?;
    let r = c
        .query_one(
            &format!(
                "SELECT {} FROM pg_stat_replication_slots WHERE slot_name = $1",
                SLOT_COUNTERS.join(", ")
            ),
            &[&slot],
        )
        .map_err(|e| err_text(&e))?;
    Ok((0..8).map(|i| r.get::<_, i64>(i)).collect())
}

/// `pg_stat_reset_replication_slot`, then waits (up to 10 s) until the server shows zeros.
pub fn reset_slot_counters(c: &mut Client, slot: &str) -> Result<(), String> {
    c.execute("SELECT pg_stat_reset_replication_slot($1)", &[&slot])
        .map_err(|e| err_text(&e))?;
    wait_for(
        "the slot's statistics reset",
        Duration::from_secs(10),
        || slot_counters(c, slot).is_ok_and(|v| v.iter().all(|x| *x == 0)),
    );
    Ok(())
}

/// The counters once the server has reported a decode: at once when they equal `expect`,
/// else once they stayed the same for 2 s, at most 10 s.
pub fn settled_slot_counters(
    c: &mut Client,
    slot: &str,
    expect: &[Option<i64>],
) -> Result<Vec<i64>, String> {
    let start = Instant::now();
    let mut last = slot_counters(c, slot)?;
    loop {
        if last.iter().zip(expect).all(|(s, p)| Some(*s) == *p) {
            return Ok(last);
        }
        std::thread::sleep(Duration::from_millis(300));
        let now = slot_counters(c, slot)?;
        if (now == last && start.elapsed() > Duration::from_secs(2))
            || start.elapsed() > Duration::from_secs(10)
        {
            return Ok(now);
        }
        last = now;
    }
}
