//! Who holds which transaction, and what `pg_replication_slots` adds to the slot, read
//! through SPI from the server's own views (pg_locks, pg_stat_activity,
//! pg_prepared_xacts, pg_replication_slots) as plain values for the core's diagnosis.
//! Read-only: no query here assigns an xid or writes anything.

use pgrx::prelude::*;
use snapbuild_core::diagnose::{Backend, Holder, HolderKind, Horizon, Prepared};
use snapbuild_core::TransactionId;

fn ts(v: Option<TimestampWithTimeZone>) -> Option<i64> {
    v.map(|t| t.into())
}

/// The live holders of `xids`: the session or prepared transaction holding each xid's
/// ExclusiveLock on the transactionid in pg_locks (lock.c's XactLockTableInsert; a
/// subtransaction's xid is locked by its backend too, and stays locked by its top level
/// after RELEASE SAVEPOINT). A backend's facts come from pg_stat_activity, a prepared
/// transaction's from pg_prepared_xacts (its lock has no pid; its virtual transaction is
/// `-1/<top-level xid>`, which also maps its subtransactions' xids to the gid). An xid
/// with no holder has ended.
pub fn holders(xids: &[TransactionId]) -> Vec<Holder> {
    if xids.is_empty() {
        return Vec::new();
    }
    let list = xids
        .iter()
        .map(|x| format!("'{x}'"))
        .collect::<Vec<_>>()
        .join(",");
    let sql = format!(
        "SELECT l.transactionid::text::int8 AS xid, l.pid, a.backend_type::text AS backend_type,
                a.datname::text AS datname, a.usename::text AS usename, a.application_name,
                host(a.client_addr) AS client_addr, a.state, a.xact_start,
                a.wait_event_type || ':' || a.wait_event AS wait_event, a.query,
                p.gid, p.owner::text AS owner, p.database::text AS database, p.prepared
           FROM pg_catalog.pg_locks l
           LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
           LEFT JOIN pg_catalog.pg_prepared_xacts p
                  ON l.pid IS NULL
                 AND (p.transaction = l.transactionid
                      OR p.transaction::text = split_part(l.virtualtransaction, '/', 2))
          WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
            AND l.transactionid::text IN ({list})
          ORDER BY 1, 2"
    );
    Spi::connect(|c| {
        let mut out = Vec::new();
        let rows = c.select(sql.as_str(), None, &[]).unwrap_or_else(|e| {
            crate::adapter::raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("reading pg_locks: {e}"),
            )
        });
        for r in rows {
            let get_s = |n: &str| r.get_by_name::<String, _>(n).ok().flatten();
            let Some(xid) = r.get_by_name::<i64, _>("xid").ok().flatten() else {
                continue;
            };
            let pid = r.get_by_name::<i32, _>("pid").ok().flatten();
            let kind = match (pid, get_s("gid")) {
                (Some(pid), _) => HolderKind::Backend(Backend {
                    pid,
                    backend_type: get_s("backend_type"),
                    datname: get_s("datname"),
                    usename: get_s("usename"),
                    application_name: get_s("application_name"),
                    client_addr: get_s("client_addr"),
                    state: get_s("state"),
                    xact_start: ts(r
                        .get_by_name::<TimestampWithTimeZone, _>("xact_start")
                        .ok()
                        .flatten()),
                    wait_event: get_s("wait_event"),
                    query: get_s("query"),
                }),
                (None, Some(gid)) => HolderKind::Prepared(Prepared {
                    gid,
                    owner: get_s("owner"),
                    database: get_s("database"),
                    prepared: ts(r
                        .get_by_name::<TimestampWithTimeZone, _>("prepared")
                        .ok()
                        .flatten()),
                }),
                (None, None) => continue,
            };
            out.push(Holder {
                xid: xid as u32,
                kind,
            });
        }
        out
    })
}

/// What `pg_replication_slots` shows of a slot beyond shared memory's fields:
/// `wal_status`, `conflicting` (16+), `inactive_since` (17+, microseconds since
/// 2000-01-01). `None` when the slot is not listed (it vanished).
pub struct SlotView {
    pub wal_status: Option<String>,
    pub conflicting: Option<bool>,
    pub inactive_since: Option<i64>,
}

/// [`SlotView`] of slot `name`, from pg_replication_slots.
pub fn slot_view(name: &str) -> Option<SlotView> {
    let major = crate::adapter::server_version().major;
    let conflicting = if major >= 16 {
        "conflicting"
    } else {
        "NULL::bool"
    };
    let inactive = if major >= 17 {
        "inactive_since"
    } else {
        "NULL::timestamptz"
    };
    let sql = format!(
        "SELECT wal_status, {conflicting} AS conflicting, {inactive} AS inactive_since
           FROM pg_catalog.pg_replication_slots WHERE slot_name = $1"
    );
    Spi::connect(|c| {
        let rows = c
            .select(sql.as_str(), Some(1), &[name.into()])
            .unwrap_or_else(|e| {
                crate::adapter::raise(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("reading pg_replication_slots: {e}"),
                )
            });
        rows.into_iter().next().map(|r| SlotView {
            wal_status: r.get_by_name::<String, _>("wal_status").ok().flatten(),
            conflicting: r.get_by_name::<bool, _>("conflicting").ok().flatten(),
            inactive_since: ts(r
                .get_by_name::<TimestampWithTimeZone, _>("inactive_since")
                .ok()
                .flatten()),
        })
    })
}

/// The xid process `pid` waits for: its ungranted ShareLock on a transactionid
/// (XactLockTableWait, as SnapBuildWaitSnapshot calls it while a slot is created).
pub fn waits_on(pid: i32) -> Option<TransactionId> {
    Spi::connect(|c| {
        let rows = c
            .select(
                "SELECT transactionid::text::int8 FROM pg_catalog.pg_locks
                  WHERE pid = $1 AND locktype = 'transactionid' AND NOT granted",
                Some(1),
                &[pid.into()],
            )
            .ok()?;
        rows.into_iter()
            .next()
            .and_then(|r| r.get::<i64>(1).ok().flatten())
            .map(|x| x as u32)
    })
}

/// The server's transactions now, read without assigning an xid (pg_current_snapshot):
/// the next xid to be assigned (its xmax, low 32 bits; on a standby the later of that and
/// transam.c ReadNextFullTransactionId's), the top-level xids in progress
/// (its xip: sessions and prepared transactions), whether the server is a standby, and
/// the time (microseconds since 2000-01-01 UTC).
pub struct ServerNow {
    pub next_xid: TransactionId,
    pub running: Vec<TransactionId>,
    pub in_recovery: bool,
    pub now: i64,
}

/// [`ServerNow`].
pub fn server_now() -> ServerNow {
    Spi::connect(|c| {
        let rows = c
            .select(
                "WITH s(s) AS (SELECT pg_catalog.pg_current_snapshot())
                 SELECT (pg_catalog.pg_snapshot_xmax(s)::text::numeric % 4294967296)::int8,
                        pg_catalog.pg_is_in_recovery(),
                        ARRAY(SELECT (x::text::numeric % 4294967296)::int8
                                FROM pg_catalog.pg_snapshot_xip(s) x),
                        pg_catalog.clock_timestamp()
                   FROM s",
                Some(1),
                &[],
            )
            .unwrap_or_else(|e| {
                crate::adapter::raise(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("reading the server's snapshot: {e}"),
                )
            });
        let r = rows.into_iter().next();
        let next = r
            .as_ref()
            .and_then(|r| r.get::<i64>(1).ok().flatten())
            .unwrap_or(0) as u32;
        let in_recovery = r
            .as_ref()
            .and_then(|r| r.get::<bool>(2).ok().flatten())
            .unwrap_or(false);
        let running = r
            .as_ref()
            .and_then(|r| r.get::<Vec<Option<i64>>>(3).ok().flatten())
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .map(|x| x as u32)
            .collect();
        let now = ts(r.and_then(|r| r.get::<TimestampWithTimeZone>(4).ok().flatten())).unwrap_or(0);
        // A standby's snapshot xmax is its latest completed xid + 1; its next xid, which
        // replay advances past every xid it sees, is nearer the primary's.
        let next = if in_recovery {
            // SAFETY: reads TransamVariables under XidGenLock (shared); no error path.
            let full = unsafe { pg_sys::ReadNextFullTransactionId() };
            let replayed = full.value as u32;
            if snapbuild_core::include::transam::follows(replayed, next) {
                replayed
            } else {
                next
            }
        } else {
            next
        };
        ServerNow {
            next_xid: next,
            running,
            in_recovery,
            now,
        }
    })
}

/// Those of `xids` the server knows to be in progress (procarray.c
/// TransactionIdIsInProgress, as `pg_xact_status` asks it). On a standby this is what the
/// standby has replayed of the primary: its KnownAssignedXids, from the primary's WAL
/// and RUNNING_XACTS records; on a primary, its own sessions and prepared transactions.
/// Takes ProcArrayLock in shared mode once per xid; read-only.
pub fn in_progress(xids: &[TransactionId]) -> Vec<TransactionId> {
    xids.iter()
        .copied()
        .filter(|&x| {
            snapbuild_core::include::transam::is_normal(x)
                // SAFETY: a plain lookup in shared memory under its own lock; it errors
                // only on out-of-memory, which ereports like any palloc.
                && unsafe { pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from(x)) }
        })
        .collect()
}

/// On a standby: the primary's xids its snapshot lists as running (a snapshot taken in
/// recovery holds them all, top-level and subtransactions alike, in `subxip`, from
/// KnownAssignedXids, up to its xmax). Empty on a primary (pg_current_snapshot's xip
/// serves there).
pub fn standby_snapshot_xids() -> Vec<TransactionId> {
    // SAFETY: GetLatestSnapshot returns the backend's static secondary snapshot, valid
    // until the next call; it is only read here.
    unsafe {
        let snap = pg_sys::GetLatestSnapshot();
        if snap.is_null() || !(*snap).takenDuringRecovery || (*snap).subxip.is_null() {
            return Vec::new();
        }
        let n = usize::try_from((*snap).subxcnt).unwrap_or(0);
        std::slice::from_raw_parts((*snap).subxip, n)
            .iter()
            .map(|x| x.into_inner())
            .collect()
    }
}

/// Every xmin horizon of the cluster but slot `slot`'s own, the calling backend's and
/// the watcher's (procarray.c ComputeXidHorizons' inputs as the views show them): other
/// slots' xmin and catalog_xmin, backends' backend_xmin and backend_xid, prepared
/// transactions. The watcher holds a snapshot only while it reads the catalogs, a few
/// milliseconds per look, never while it reads WAL: it is never what holds a horizon
/// back, and is never named.
pub fn horizons(slot: &str) -> Vec<Horizon> {
    let sql = "SELECT format('slot %I (%s)', slot_name, k) AS what, (x::text)::int8 AS xid
                 FROM pg_catalog.pg_replication_slots,
                      LATERAL (VALUES ('catalog_xmin', catalog_xmin), ('xmin', xmin)) v(k, x)
                WHERE slot_name <> $1 AND x IS NOT NULL
               UNION ALL
               SELECT format('pid %s (%s, %s)', pid, backend_type, k), (x::text)::int8
                 FROM pg_catalog.pg_stat_activity,
                      LATERAL (VALUES ('xmin', backend_xmin), ('xid', backend_xid)) v(k, x)
                WHERE pid <> pg_catalog.pg_backend_pid() AND x IS NOT NULL
                  AND backend_type IS DISTINCT FROM 'pg_snapbuild watcher'
               UNION ALL
               SELECT format('prepared transaction %L', gid), (transaction::text)::int8
                 FROM pg_catalog.pg_prepared_xacts";
    Spi::connect(|c| {
        let rows = c.select(sql, None, &[slot.into()]).unwrap_or_else(|e| {
            crate::adapter::raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("reading the xmin horizons: {e}"),
            )
        });
        rows.into_iter()
            .filter_map(|r| {
                Some(Horizon {
                    what: r.get::<String>(1).ok().flatten()?,
                    xid: r.get::<i64>(2).ok().flatten()? as u32,
                })
            })
            .collect()
    })
}

/// On a standby, a sentence saying how far WAL can be read and why it stops there: the
/// last replayed record and its timeline (GetXLogReplayRecPtr) and the walreceiver as
/// `pg_stat_wal_receiver` shows it (status, primary, how far it flushed), or that none
/// runs. `None` on a primary.
pub fn standby_note() -> Option<String> {
    let (replayed, tli) = crate::adapter::wal::replay_position()?;
    let receiver = Spi::connect(|c| {
        let rows = c
            .select(
                "SELECT status, sender_host, sender_port, flushed_lsn::text
                   FROM pg_catalog.pg_stat_wal_receiver",
                Some(1),
                &[],
            )
            .ok()?;
        let r = rows.into_iter().next()?;
        let status = r.get::<String>(1).ok().flatten();
        let host = r.get::<String>(2).ok().flatten();
        let port = r.get::<i32>(3).ok().flatten();
        let flushed = r.get::<String>(4).ok().flatten();
        Some(format!(
            "walreceiver {}{}{}",
            status.as_deref().unwrap_or("(status not visible)"),
            match (host, port) {
                (Some(h), Some(p)) => format!(" from {h}:{p}"),
                _ => String::new(),
            },
            flushed
                .map(|f| format!(", received and flushed up to {f}"))
                .unwrap_or_default()
        ))
    });
    let receiver = receiver.unwrap_or_else(|| {
        "no walreceiver is running (pg_stat_wal_receiver is empty): no WAL arrives from the primary until one connects (primary_conninfo; see this standby's log)".into()
    });
    Some(format!(
        "this server is a standby: WAL is read up to the last replayed record, {replayed} on timeline {tli}; {receiver}"
    ))
}
