//! `snapbuild_slots()`: replication slots as shared memory holds them, including the
//! candidate fields pg_replication_slots does not show.

use pgrx::prelude::*;

use crate::adapter::slots::copy_slots;
use crate::sql::types::{PgLsn, PgName, Xid};

/// One row per in-use replication slot, copied under ReplicationSlotControlLock and the
/// slot's spinlock (as slotfuncs.c pg_get_replication_slots does). Invalid xids and
/// LSNs are NULL, as pg_replication_slots shows them. `in_creation` is true
/// for a logical slot whose snapshot builder has not reached consistency yet
/// (confirmed_flush still invalid).
#[pg_extern]
#[allow(clippy::type_complexity)]
fn snapbuild_slots() -> TableIterator<
    'static,
    (
        name!(slot_name, PgName),
        name!(plugin, Option<PgName>),
        name!(slot_type, String),
        name!(datoid, Option<pg_sys::Oid>),
        name!(active_pid, Option<i32>),
        name!(persistency, String),
        name!(xmin, Option<Xid>),
        name!(catalog_xmin, Option<Xid>),
        name!(effective_xmin, Option<Xid>),
        name!(effective_catalog_xmin, Option<Xid>),
        name!(restart_lsn, Option<PgLsn>),
        name!(confirmed_flush, Option<PgLsn>),
        name!(two_phase_at, Option<PgLsn>),
        name!(candidate_catalog_xmin, Option<Xid>),
        name!(candidate_xmin_lsn, Option<PgLsn>),
        name!(candidate_restart_valid, Option<PgLsn>),
        name!(candidate_restart_lsn, Option<PgLsn>),
        name!(invalidation_reason, Option<String>),
        name!(in_creation, bool),
    ),
> {
    let rows: Vec<_> = copy_slots()
        .into_iter()
        .map(|s| {
            let in_creation = s.in_creation();
            (
                PgName(s.name),
                s.logical.then(|| PgName(s.plugin)),
                if s.logical { "logical" } else { "physical" }.to_owned(),
                s.logical.then(|| pg_sys::Oid::from(s.datoid)),
                (s.active_pid != 0).then_some(s.active_pid),
                s.persistency.to_owned(),
                (s.xmin != 0).then_some(Xid(s.xmin)),
                (s.catalog_xmin != 0).then_some(Xid(s.catalog_xmin)),
                (s.effective_xmin != 0).then_some(Xid(s.effective_xmin)),
                (s.effective_catalog_xmin != 0).then_some(Xid(s.effective_catalog_xmin)),
                (s.restart_lsn != 0).then_some(PgLsn(s.restart_lsn)),
                (s.confirmed_flush != 0).then_some(PgLsn(s.confirmed_flush)),
                (s.two_phase_at != 0).then_some(PgLsn(s.two_phase_at)),
                (s.candidate_catalog_xmin != 0).then_some(Xid(s.candidate_catalog_xmin)),
                (s.candidate_xmin_lsn != 0).then_some(PgLsn(s.candidate_xmin_lsn)),
                (s.candidate_restart_valid != 0).then_some(PgLsn(s.candidate_restart_valid)),
                (s.candidate_restart_lsn != 0).then_some(PgLsn(s.candidate_restart_lsn)),
                s.invalidation_reason,
                in_creation,
            )
        })
        .collect();
    TableIterator::new(rows)
}
