//! The watcher: an optional background worker that diagnoses every logical slot at a
//! steady pace and writes to the server log what a DBA would otherwise learn only by
//! asking ([`snapbuild_core::diagnose::watch`]): a slot creation that waits, naming the
//! transactions it waits for, their holders and the remedy; a restart_lsn or catalog_xmin
//! held by the same transaction for long.
//!
//! It runs only when the library is in `shared_preload_libraries` and
//! `pg_snapbuild.watcher` is on (the default). It starts once the server accepts read-only
//! connections (on a standby: once it is consistent, and it goes on after a promotion),
//! connects to `pg_snapbuild.watcher_database`, and between looks sleeps on its latch for
//! `pg_snapbuild.watch_interval`. Each look is one read-only transaction: the slots are
//! copied from shared memory under ReplicationSlotControlLock (held only while copying),
//! their replays (kept in the worker between looks) are brought to the end of flushed WAL
//! (on a standby: replayed WAL) by one read of it, and they are judged as
//! `snapbuild_diagnose` judges them. A reload (SIGHUP) takes new settings at the next look.
//! If a look raises an ERROR the worker exits and the postmaster starts it again after 10 s
//! (as after a crash restart), with its replays rebuilt from the slots' restart_lsn.

use std::ffi::CStr;
use std::time::{Duration, Instant};

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use snapbuild_core::diagnose::watch::{Watch, WatchSettings};

/// `pg_snapbuild.watcher`: whether the watcher starts (postmaster start only).
static WATCHER: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `pg_snapbuild.watcher_database`: the database the watcher connects to.
static WATCHER_DATABASE: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(Some(c"postgres"));
/// `pg_snapbuild.watch_interval`, milliseconds.
static WATCH_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(5_000);
/// `pg_snapbuild.log_waits_after`, milliseconds (0: off).
static LOG_WAITS_AFTER: GucSetting<i32> = GucSetting::<i32>::new(10_000);
/// `pg_snapbuild.log_holds_after`, milliseconds (0: off).
static LOG_HOLDS_AFTER: GucSetting<i32> = GucSetting::<i32>::new(300_000);

/// The least time between two LOG lines about the same waiting creation.
const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// Defines the watcher's settings, and registers the watcher when the library is being
/// preloaded (`shared_preload_libraries`) and `pg_snapbuild.watcher` is on. The settings
/// that only the postmaster's start can set are defined only then (PostgreSQL allows
/// them at no other time).
pub fn init() {
    let preloading = unsafe { pg_sys::process_shared_preload_libraries_in_progress };
    if preloading {
        GucRegistry::define_bool_guc(
            c"pg_snapbuild.watcher",
            c"Starts pg_snapbuild's watcher background worker.",
            c"The watcher diagnoses every logical slot at each pg_snapbuild.watch_interval and writes a LOG line about a slot creation that waits (pg_snapbuild.log_waits_after) or a restart_lsn or catalog_xmin held by one transaction (pg_snapbuild.log_holds_after). Needs pg_snapbuild in shared_preload_libraries.",
            &WATCHER,
            GucContext::Postmaster,
            GucFlags::default(),
        );
        GucRegistry::define_string_guc(
            c"pg_snapbuild.watcher_database",
            c"The database pg_snapbuild's watcher connects to.",
            c"Any database will do: the watcher reads only shared catalogs and views.",
            &WATCHER_DATABASE,
            GucContext::Postmaster,
            GucFlags::default(),
        );
    }
    GucRegistry::define_int_guc(
        c"pg_snapbuild.watch_interval",
        c"Time between two looks of pg_snapbuild's watcher at the slots.",
        c"Each look brings every logical slot's replay to the end of flushed WAL and judges it.",
        &WATCH_INTERVAL,
        100,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_snapbuild.log_waits_after",
        c"Logs a slot creation that has waited this long, naming what it waits for (0: never).",
        c"pg_snapbuild's watcher writes one LOG line per waiting creation, repeated at most once a minute while it waits.",
        &LOG_WAITS_AFTER,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_snapbuild.log_holds_after",
        c"Logs a slot whose restart_lsn or catalog_xmin one transaction has held this long (0: never).",
        c"pg_snapbuild's watcher writes one LOG line per slot, position and holding transaction.",
        &LOG_HOLDS_AFTER,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    if preloading && WATCHER.get() {
        BackgroundWorkerBuilder::new("pg_snapbuild watcher")
            .set_type("pg_snapbuild watcher")
            .set_library("pg_snapbuild")
            .set_function("pg_snapbuild_watcher_main")
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::ConsistentState)
            .set_restart_time(Some(Duration::from_secs(10)))
            .load();
    }
}

/// The settings now, in microseconds.
fn settings() -> WatchSettings {
    let us = |ms: i32| i64::from(ms.max(0)) * 1000;
    WatchSettings {
        log_waits_after: us(LOG_WAITS_AFTER.get()),
        log_holds_after: us(LOG_HOLDS_AFTER.get()),
        repeat_every: REPEAT_EVERY.as_micros() as i64,
    }
}

/// The watcher's entry point (registered by [`init`]).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_snapbuild_watcher_main(_arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = WATCHER_DATABASE
        .get()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".into());
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    log!("pg_snapbuild watcher started");
    let epoch = Instant::now();
    let mut watch = Watch::default();
    let interval = || Duration::from_millis(WATCH_INTERVAL.get().max(100) as u64);
    while BackgroundWorker::wait_latch(Some(interval())) {
        if BackgroundWorker::sighup_received() {
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let s = settings();
        if s.log_waits_after == 0 && s.log_holds_after == 0 {
            continue;
        }
        look(&mut watch, epoch, &s);
    }
}

/// One look: diagnoses every logical slot and writes the lines [`Watch::observe`] asks for.
fn look(watch: &mut Watch, epoch: Instant, s: &WatchSettings) {
    let lines = BackgroundWorker::transaction(std::panic::AssertUnwindSafe(|| {
        set_activity(c"looking at the logical slots");
        let slots: Vec<_> = crate::adapter::slots::copy_slots()
            .into_iter()
            .filter(|s| s.logical)
            .collect();
        let creators: Vec<(String, Option<i32>)> = slots
            .iter()
            .map(|s| {
                let creating = s.in_creation() && s.active_pid != 0;
                (s.name.clone(), creating.then_some(s.active_pid))
            })
            .collect();
        let judged = crate::context::diagnose::diagnose_slots(&slots);
        let observed: Vec<_> = judged
            .into_iter()
            .map(|(name, findings)| {
                let creator = creators
                    .iter()
                    .find(|(n, _)| *n == name)
                    .and_then(|(_, c)| *c);
                (name, creator, findings)
            })
            .collect();
        let now = epoch.elapsed().as_micros() as i64;
        let lines = watch.observe(now, &observed, s);
        set_activity(c"");
        lines
    }));
    for l in lines {
        let mut report = ErrorReport::new(
            PgSqlErrorCode::ERRCODE_SUCCESSFUL_COMPLETION,
            l.message,
            "pg_snapbuild_watcher_main",
        );
        if let Some(d) = l.detail {
            report = report.set_detail(d);
        }
        if let Some(h) = l.hint {
            report = report.set_hint(h);
        }
        report.report(PgLogLevel::LOG);
    }
}

/// Shows what the watcher does in pg_stat_activity.query (empty: idle).
fn set_activity(what: &CStr) {
    let state = if what.is_empty() {
        pg_sys::BackendState::STATE_IDLE
    } else {
        pg_sys::BackendState::STATE_RUNNING
    };
    unsafe { pg_sys::pgstat_report_activity(state, what.as_ptr()) };
}
