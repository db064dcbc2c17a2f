//! The watcher: an optional background worker that diagnoses every logical slot at a
//! steady pace and writes to the server log what a DBA would otherwise learn only by
//! asking ([`snapbuild_core::diagnose::watch`]): a slot creation that waits, naming the
//! transactions it waits for, their holders and the remedy; a restart_lsn or catalog_xmin
//! held by the same transaction for long; a slot the server will invalidate soon (the WAL
//! loss forecast: max_slot_wal_keep_size, idle_replication_slot_timeout).
//!
//! It runs only when the library is in `shared_preload_libraries` and
//! `pg_snapbuild.watcher` is on (the default). It starts once the server accepts read-only
//! connections (on a standby: once it is consistent, and it goes on after a promotion),
//! connects to `pg_snapbuild.watcher_database`, and between looks sleeps on its latch for
//! `pg_snapbuild.watch_interval`. A reload (SIGHUP) takes new settings at the next look.
//!
//! A look has three steps ([`crate::context::diagnose`]), each in a transaction of its
//! own: the slots are copied from shared memory and their facts read from the catalogs
//! (a snapshot for a few milliseconds); their replays are brought to the end of flushed
//! WAL (on a standby: replayed WAL) by one read of it, with no snapshot and no lock on a
//! relation, so that the watcher never holds back VACUUM or a standby's replay, whatever
//! the backlog; then each slot is judged as `snapbuild_diagnose` judges it (a snapshot
//! again, briefly). The replays live in the shared area, saved every few seconds while a
//! long read lasts, so that a look cut short is resumed by the next one.
//!
//! Stopping and failing:
//! - SIGTERM (a fast or smart shutdown, `pg_terminate_backend`) ends the worker at the
//!   next interrupt check, a fraction of a second even in the middle of a read, with
//!   PostgreSQL's own FATAL "terminating background worker … due to administrator
//!   command"; after a terminate the postmaster starts it again after
//!   [`RESTART_INTERVAL`] (the log says both).
//! - An ERROR in a look (a cancel, a broken WAL record, out of memory) is logged, the
//!   look's transaction is rolled back and the next look comes after a pause that doubles
//!   with each failure in a row (at most [`MAX_BACKOFF`]); the process goes on.
//! - What it has seen (waits and holds since when, lines written) is kept in shared
//!   memory after every look and read back when it starts again, so that neither an
//!   ERROR nor a terminate restarts a count or repeats a line.
//! - On a node that cannot run a logical decoder (a standby of PostgreSQL 14 or 15,
//!   which may hold logical slots copied with a file-level backup) it says so once, and
//!   goes on judging the slots from their positions alone.

use std::ffi::CStr;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys::panic::{CaughtError, ErrorReport};
use pgrx::prelude::*;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use snapbuild_core::diagnose::watch::{LogLine, Watch, WatchSettings};

use crate::adapter::shared_state;
use crate::context::diagnose as judging;

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
/// `pg_snapbuild.log_loss_within`, seconds (0: off).
static LOG_LOSS_WITHIN: GucSetting<i32> = GucSetting::<i32>::new(3_600);
/// `pg_snapbuild.debug_look_error_every`: a developer setting (hidden): every Nth look
/// raises an ERROR after its WAL read (0: never), to test what survives one.
static DEBUG_LOOK_ERROR_EVERY: GucSetting<i32> = GucSetting::<i32>::new(0);

/// The least time between two LOG lines about the same waiting creation.
const REPEAT_EVERY: Duration = Duration::from_secs(60);
/// How long the postmaster waits before it starts the watcher again after it ended
/// (a terminate, a crash restart).
pub const RESTART_INTERVAL: Duration = Duration::from_secs(10);
/// The longest pause after looks that failed in a row.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

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
            c"The watcher diagnoses every logical slot at each pg_snapbuild.watch_interval and writes a LOG line about a slot creation that waits (pg_snapbuild.log_waits_after), a restart_lsn or catalog_xmin held by one transaction (pg_snapbuild.log_holds_after), or a slot the server will invalidate soon (pg_snapbuild.log_loss_within). Needs pg_snapbuild in shared_preload_libraries.",
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
    GucRegistry::define_int_guc(
        c"pg_snapbuild.log_loss_within",
        c"Logs a slot the server will invalidate within this long if its restart_lsn stays (0: never).",
        c"pg_snapbuild's watcher writes one LOG line per slot and prediction (max_slot_wal_keep_size, idle_replication_slot_timeout).",
        &LOG_LOSS_WITHIN,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"pg_snapbuild.debug_look_error_every",
        c"Developer setting: every Nth look of the watcher raises an ERROR (0: never).",
        c"For tests of what the watcher keeps across an ERROR.",
        &DEBUG_LOOK_ERROR_EVERY,
        0,
        i32::MAX,
        GucContext::Sighup,
        GucFlags::NO_SHOW_ALL,
    );
    if preloading && WATCHER.get() {
        BackgroundWorkerBuilder::new("pg_snapbuild watcher")
            .set_type("pg_snapbuild watcher")
            .set_library("pg_snapbuild")
            .set_function("pg_snapbuild_watcher_main")
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::ConsistentState)
            .set_restart_time(Some(RESTART_INTERVAL))
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
        log_loss_within: i64::from(LOG_LOSS_WITHIN.get().max(0)) * 1_000_000,
    }
}

/// The pause before the next look: the interval, doubled for each look that failed in a
/// row, at most [`MAX_BACKOFF`] (never less than the interval).
fn pause(failures: u32) -> Duration {
    let interval = Duration::from_millis(WATCH_INTERVAL.get().max(100) as u64);
    let backed = interval.saturating_mul(1u32 << failures.min(12));
    backed.min(MAX_BACKOFF.max(interval))
}

/// Sleeps on the latch for `d`, then handles interrupts: a SIGTERM ends the process here
/// (FATAL, exit code 1), as does the postmaster's death.
fn sleep(d: Duration) {
    unsafe {
        pg_sys::WaitLatch(
            pg_sys::MyLatch,
            (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            d.as_millis().min(i64::MAX as u128) as _,
            pg_sys::PG_WAIT_EXTENSION,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
    }
    pgrx::check_for_interrupts!();
    unsafe {
        if pg_sys::ConfigReloadPending != 0 {
            pg_sys::ConfigReloadPending = 0;
            pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP);
        }
    }
}

// The server's own signal handlers, as C functions (pgrx's bindings wrap them in Rust
// functions, which a signal cannot call).
unsafe extern "C-unwind" {
    /// postgres.c `die`: sets ProcDiePending; the next CHECK_FOR_INTERRUPTS ends the
    /// process (FATAL for a background worker).
    #[link_name = "die"]
    fn server_die(postgres_signal_arg: std::ffi::c_int);
    /// interrupt.c `SignalHandlerForConfigReload`: sets ConfigReloadPending.
    #[link_name = "SignalHandlerForConfigReload"]
    fn server_config_reload(postgres_signal_arg: std::ffi::c_int);
}

/// PostgreSQL's own handlers: SIGTERM → `die` (the next CHECK_FOR_INTERRUPTS ends the
/// process, wherever it is: between two records of a read, in a query), SIGHUP → reload
/// at the next pause.
unsafe fn set_signal_handlers() {
    unsafe {
        #[cfg(not(feature = "pg18"))]
        {
            pg_sys::pqsignal(pg_sys::SIGHUP as i32, Some(server_config_reload));
            pg_sys::pqsignal(pg_sys::SIGTERM as i32, Some(server_die));
        }
        #[cfg(feature = "pg18")]
        {
            pg_sys::pqsignal_be(pg_sys::SIGHUP as i32, Some(server_config_reload));
            pg_sys::pqsignal_be(pg_sys::SIGTERM as i32, Some(server_die));
        }
        pg_sys::BackgroundWorkerUnblockSignals();
    }
}

/// The watcher's entry point (registered by [`init`]).
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn pg_snapbuild_watcher_main(_arg: pg_sys::Datum) {
    unsafe { set_signal_handlers() };
    let database = WATCHER_DATABASE
        .get()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|| "postgres".into());
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    let kept = Watch::decode(&shared_state::watch_memory());
    log!(
        "pg_snapbuild watcher started{}",
        if kept.is_some() {
            ", with what the watcher before it had seen"
        } else {
            ""
        }
    );
    let mut watch = kept.unwrap_or_default();
    let mut failures: u32 = 0;
    let mut looks: u64 = 0;
    loop {
        sleep(pause(failures));
        let s = settings();
        if s.log_waits_after == 0 && s.log_holds_after == 0 && s.log_loss_within == 0 {
            continue;
        }
        looks += 1;
        let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
            look(&mut watch, &s, looks);
            None
        }))
        .catch_others(Some)
        .execute();
        set_activity(c"");
        match outcome {
            None => failures = 0,
            Some(e) => {
                unsafe { pg_sys::AbortCurrentTransaction() };
                failures = failures.saturating_add(1);
                let message = match &e {
                    CaughtError::PostgresError(r) | CaughtError::ErrorReport(r) => {
                        r.message().to_string()
                    }
                    CaughtError::RustPanic { ereport, .. } => ereport.message().to_string(),
                };
                log!(
                    "pg_snapbuild watcher: a look at the logical slots failed: {message}; the next look comes in {} s",
                    pause(failures).as_secs()
                );
            }
        }
        shared_state::store_watch_memory(&watch.encode(shared_state::WATCH_MEMORY_BYTES));
    }
}

/// Runs `f` in a transaction of its own; with `snapshot`, under an active snapshot (for
/// catalog reads). Without, no snapshot is taken: nothing in `f` may read a catalog.
fn in_transaction<R>(snapshot: bool, f: impl FnOnce() -> R) -> R {
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        if snapshot {
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
    }
    let r = f();
    unsafe {
        if snapshot {
            pg_sys::PopActiveSnapshot();
        }
        pg_sys::CommitTransactionCommand();
    }
    r
}

/// One look: diagnoses every logical slot and writes the lines [`Watch::observe`] asks
/// for (look number `n`).
fn look(watch: &mut Watch, s: &WatchSettings, n: u64) {
    let t0 = std::time::Instant::now();
    // Each step's text is shown before its transaction starts, so that the text of the
    // step before never stands beside this one's snapshot in pg_stat_activity.
    set_activity(c"reading the logical slots' facts");
    let mut j = in_transaction(true, || {
        let slots: Vec<_> = crate::adapter::slots::copy_slots()
            .into_iter()
            .filter(|s| s.logical)
            .collect();
        judging::prepare(&slots, true)
    });
    const NO_DECODING: &str = "no logical decoding on this node";
    if crate::context::input::decoding_possible() {
        watch.forget_note(NO_DECODING);
    } else if watch.note_once(NO_DECODING) {
        let v = crate::adapter::server_version();
        log!(
            "pg_snapbuild watcher: this standby (PostgreSQL {}) cannot run a logical decoder, so the logical slots' snapshot builders are not replayed here: creations and held positions are not watched until it is promoted; the slots' positions are still judged",
            v.major
        );
    }
    let t1 = std::time::Instant::now();
    set_activity(c"reading WAL for the logical slots' replays");
    in_transaction(false, || {
        judging::read_wal(&mut j);
        let every = DEBUG_LOOK_ERROR_EVERY.get();
        if every > 0 && n.is_multiple_of(every as u64) {
            crate::adapter::raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!(
                    "look {n} failed on purpose (pg_snapbuild.debug_look_error_every = {every})"
                ),
            );
        }
    });
    let t2 = std::time::Instant::now();
    let (slots, bytes) = (j.slots(), j.bytes_read());
    set_activity(c"judging the logical slots");
    let lines = in_transaction(true, || {
        let observed: Vec<_> = judging::finish(j, snapbuild_core::diagnose::diagnose)
            .into_iter()
            .map(|(name, findings, judged)| (name, judged.creator, findings))
            .collect();
        watch.observe(crate::context::group::now(), &observed, s)
    });
    let t3 = std::time::Instant::now();
    let ms = |a: std::time::Instant, b: std::time::Instant| (b - a).as_secs_f64() * 1000.0;
    pgrx::debug1!(
        "pg_snapbuild watcher: look {n}: {slots} slots in {:.1} ms (catalogs {:.1} ms, WAL {:.1} ms for {bytes} bytes, judging {:.1} ms)",
        ms(t0, t3),
        ms(t0, t1),
        ms(t1, t2),
        ms(t2, t3)
    );
    for l in lines {
        write_line(l);
    }
}

/// Writes one line at LOG, with its DETAIL and HINT.
fn write_line(l: LogLine) {
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

/// Shows what the watcher does in pg_stat_activity.query (empty: idle).
fn set_activity(what: &CStr) {
    let state = if what.is_empty() {
        pg_sys::BackendState::STATE_IDLE
    } else {
        pg_sys::BackendState::STATE_RUNNING
    };
    unsafe { pg_sys::pgstat_report_activity(state, what.as_ptr()) };
}
