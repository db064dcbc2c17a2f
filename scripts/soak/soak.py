#!/usr/bin/env python3
"""soak.py SECONDS OUTDIR SERVER_LOG: the soak's load and its accounting (run by scripts/soak.sh,
which makes the cluster and exports PGHOST, PGPORT, PGUSER, PGDATABASE and PATH).

For SECONDS it runs, at once:
  - pgbench (PGSNAP_SOAK_CLIENTS clients, default 4) the whole time;
  - slot loops: one creating slots with SQL (pg_create_logical_replication_slot, every other
    one two-phase), consuming them (pg_logical_slot_get_changes), advancing them
    (pg_replication_slot_advance) and dropping them; one doing the same through the
    replication protocol (pg_recvlogical --create-slot, --start --endpos, --drop-slot); one
    consuming a slot that lives the whole run (soak_keep) every few seconds;
  - one loop per SQL function of the extension, each a single psql session (one backend),
    calling it on whatever slots and .snap files exist at that moment;
  - the watcher (the cluster preloads the library; it looks every second and logs waits
    after 1 s and holds after 10 s), terminated with pg_terminate_backend every
    PGSNAP_SOAK_TERMINATE_S seconds (default 10); the postmaster must start it again each
    time (its "exited with exit code 1" after such a terminate is expected, any other exit
    a crash), and the run reports how many watchers ran and how many looks failed.
Every psql session runs with VERBOSITY verbose, so each ERROR carries its SQLSTATE. Errors are
counted per loop and SQLSTATE; the SQLSTATEs each loop may meet are listed in ALLOWED with the
reason (all documented for those functions: a slot or file that vanished between the listing and
the call, a slot still being created, ...); any other one fails the run. Crashes: a session that
lost its connection, the server log's "terminated by signal" / "exited with exit code" /
"PANIC" / "reinitializing" lines, or a changed pg_postmaster_start_time(): 0 allowed.
Memory: every 250 ms the RssAnon and VmRSS of each function loop's backend (/proc/PID/status);
at the end its VmHWM. Reported per function: peak RssAnon over the run, and the peak RssAnon of
the first and of the last window (a minute, or a third of a shorter run). A last window more than
PGSNAP_SOAK_GROWTH_MIB (default 64) MiB above the first fails the run.
PGSNAP_SOAK_DENY="SQLSTATE ..." takes those out of ALLOWED (a run meeting one must fail).
Writes OUTDIR/result.json and prints a table; exits 1 when the run failed."""
import json
import os
import re
import subprocess
import sys
import threading
import time

ERR = re.compile(r"\b(ERROR|FATAL|PANIC):\s+([0-9A-Z]{5}):\s*(.*)")
LOST = ("server closed the connection", "connection to server was lost",
        "no connection to the server", "could not connect to server", "connection to server at")
MARK = "__soak_done__"

# loop -> {SQLSTATE: why it is allowed there}
F_COMMON = {
    "42704": "undefined_object: the slot was dropped between the listing and the call",
    "55000": "object_not_in_prerequisite_state: the slot is still being created (no restart_lsn yet)",
    "58P01": "undefined_file: WAL or a .snap file removed between the listing and the read",
}
F_SNAPSHOT = dict(F_COMMON, **{
    "55000": "object_not_in_prerequisite_state: a slot being created, or the builder/file "
             "not yet FULL_SNAPSHOT (no historic snapshot to give)",
})
ALLOWED = {
    "watcher: terminated": {},
    "snapbuild_slots": {},
    "snapbuild_snapshot_files": {},
    "snapbuild_snapshot_info": {"58P01": F_COMMON["58P01"]},
    "snapbuild_historic_snapshot_from_file": {"58P01": F_COMMON["58P01"], "55000": F_SNAPSHOT["55000"]},
    "snapbuild_trace": F_COMMON,
    "snapbuild_trace all_records": F_COMMON,
    "snapbuild_trace_range": {"58P01": F_COMMON["58P01"],
                              "22023": "invalid_parameter_value: the restart_lsn of a slot being created "
                                       "is the insert position, which may not be flushed yet"},
    "snapbuild_trace_json": dict(F_COMMON, **{
        "54000": "program_limit_exceeded: a trace longer than 64 MiB of JSON"}),
    "snapbuild_slot_prediction": F_COMMON,
    "snapbuild_slot_prediction by_advance": F_COMMON,
    "snapbuild_diagnose": F_COMMON,
    "snapbuild_decoding_cost": F_COMMON,
    "snapbuild_decoding_cost_streaming": F_COMMON,
    "snapbuild_backlog": F_COMMON,
    "snapbuild_slot_health": {"58P01": F_COMMON["58P01"]},
    "snapbuild_historic_snapshot": F_SNAPSHOT,
    "snapbuild_visibility": F_SNAPSHOT,
    "snapbuild_historic_visible": {},
    "slots: SQL": {"55006": "object_in_use: a function loop is reading the slot (none takes it; kept for safety)"},
    "slots: replication protocol": {},
    "slots: soak_keep consumer": {},
}


# PGSNAP_SOAK_DENY="42704 ...": treat these SQLSTATEs as undocumented everywhere; a run with
# one that occurs must fail (a check that the soak can fail)
for _code in os.environ.get("PGSNAP_SOAK_DENY", "").split():
    for _allowed in ALLOWED.values():
        _allowed.pop(_code, None)


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Lost(Exception):
    pass


class Psql:
    """One psql session (one backend); run() sends SQL and returns its output lines."""

    def __init__(self, app):
        env = dict(os.environ, PGAPPNAME=app)
        self.p = subprocess.Popen(
            ["stdbuf", "-oL", "-eL", "psql", "-X", "-q", "-At", "-v", "VERBOSITY=verbose"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, bufsize=1, env=env)
        self.pid = int(self.run("SELECT pg_backend_pid();")[0][0])

    def run(self, sql):
        """(output lines, [(sqlstate, message)])"""
        try:
            self.p.stdin.write(sql.rstrip() + "\n\\echo " + MARK + "\n")
            self.p.stdin.flush()
        except (BrokenPipeError, OSError):
            raise Lost("psql's stdin closed")
        out, errs = [], []
        for line in self.p.stdout:
            line = line.rstrip("\n")
            if line == MARK:
                return out, errs
            m = ERR.search(line)
            if m:
                errs.append((m.group(2), m.group(3)))
            elif any(s in line for s in LOST):
                raise Lost(line)
            else:
                out.append(line)
        raise Lost("psql exited: " + " | ".join(out[-3:]))

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:
            self.p.kill()


def status(pid):
    v = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in ("VmRSS", "RssAnon", "VmHWM"):
                    v[k] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return v


def lit(s):
    return "'" + s.replace("'", "''") + "'"


class Loop:
    def __init__(self, name, kind):
        self.name, self.kind = name, kind
        self.calls = 0
        self.errors = {}  # sqlstate -> count
        self.samples = []  # (t, anon_kib, rss_kib)
        self.hwm_kib = None
        self.crashes = []
        self.bad = []  # (sqlstate, message) not allowed
        self.pid = None
        self.lock = threading.Lock()

    def count(self, errs):
        for code, msg in errs:
            self.errors[code] = self.errors.get(code, 0) + 1
            if code not in ALLOWED[self.name] and len(self.bad) < 20:
                self.bad.append((code, msg))


# ---- the function loops: each iteration lists slots / files, then calls the function ----
SLOTS = ("SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'logical' "
         "ORDER BY random() LIMIT 3;")
# only X-Y.snap: the server writes each file as X-Y.snap.PID.tmp first, then renames it (a
# .tmp name is no snapshot file: 22023, as documented; the first full soak run met it)
FILES = ("SELECT name FROM pg_ls_logicalsnapdir() WHERE name ~ '^[0-9A-F]+-[0-9A-F]+\\.snap$' "
         "ORDER BY modification DESC LIMIT 3;")
RESTARTS = ("SELECT restart_lsn FROM pg_replication_slots WHERE slot_type = 'logical' "
            "AND restart_lsn IS NOT NULL ORDER BY random() LIMIT 2;")

FUNCTIONS = {
    "snapbuild_slots": (None, lambda _: "SELECT count(*) FROM snapbuild_slots();"),
    "snapbuild_snapshot_files": (None, lambda _: "SELECT count(*) FROM snapbuild_snapshot_files();"),
    "snapbuild_snapshot_info": (FILES, lambda f: f"SELECT count(*) FROM snapbuild_snapshot_info({lit(f)});"),
    "snapbuild_historic_snapshot_from_file": (
        FILES, lambda f: f"SELECT count(*) FROM snapbuild_historic_snapshot_from_file({lit(f)});"),
    "snapbuild_trace": (SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_trace({lit(s)});"),
    "snapbuild_trace all_records": (
        SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_trace({lit(s)}, all_records => true);"),
    "snapbuild_trace_range": (
        RESTARTS, lambda l: f"SELECT count(*) FROM snapbuild_trace_range({lit(l)}, in_slot_creation => false);"),
    "snapbuild_trace_json": (SLOTS, lambda s: f"SELECT length(snapbuild_trace_json({lit(s)})::text);"),
    "snapbuild_slot_prediction": (SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_slot_prediction({lit(s)});"),
    "snapbuild_slot_prediction by_advance": (
        SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_slot_prediction({lit(s)}, by_advance => true);"),
    "snapbuild_diagnose": (SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_diagnose({lit(s)});"),
    "snapbuild_decoding_cost": (
        SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_decoding_cost({lit(s)}, work_mem_kb => 64);"),
    "snapbuild_decoding_cost_streaming": (
        SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_decoding_cost({lit(s)}, work_mem_kb => 64, streaming => true);"),
    "snapbuild_backlog": (SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_backlog({lit(s)});"),
    "snapbuild_slot_health": (
        None, lambda _: "SELECT count(*) FROM snapbuild_slot_health(); SELECT count(*) FROM snapbuild_slot_health;"),
    "snapbuild_historic_snapshot": (SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_historic_snapshot({lit(s)});"),
    "snapbuild_visibility": (
        SLOTS, lambda s: f"SELECT count(*) FROM snapbuild_visibility('pg_class', {lit(s)}); "
                         f"SELECT count(*) FROM snapbuild_visibility('pgbench_branches', {lit(s)});"),
    "snapbuild_historic_visible": (
        None, lambda _: "SELECT count(*) FILTER (WHERE (v).visible) FROM (SELECT snapbuild_historic_visible("
                        "g::text::xid, '0', 2304, NULL, '500', '1000', '{600,700,800}', committed => '{400,600}') v "
                        "FROM generate_series(3, 2000) g) s;"),
}


def function_loop(lp, deadline):
    listing, make = FUNCTIONS[lp.name]
    while time.time() < deadline:
        try:
            s = Psql("soak " + lp.name)
        except Lost as e:
            lp.crashes.append(f"connect: {e}")
            time.sleep(1)
            continue
        lp.pid = s.pid
        try:
            while time.time() < deadline:
                args = [None]
                if listing:
                    out, errs = s.run(listing)
                    lp.count(errs)
                    args = out
                    if not args:
                        time.sleep(0.2)
                        continue
                for a in args:
                    out, errs = s.run(make(a))
                    with lp.lock:
                        lp.calls += make(a).count(";")
                    lp.count(errs)
                time.sleep(0.05)
            st = status(s.pid)
            lp.hwm_kib = st and st.get("VmHWM")
            s.close()
            return
        except Lost as e:
            lp.crashes.append(str(e))
            lp.pid = None
            time.sleep(1)


def sql_slot_loop(lp, deadline):
    s = Psql("soak slots sql")
    i = 0
    while time.time() < deadline:
        i += 1
        name = f"soak_sql_{i}"
        two_phase = "true" if i % 2 == 0 else "false"
        steps = [
            f"SELECT pg_create_logical_replication_slot({lit(name)}, 'test_decoding', false, {two_phase});",
            f"SELECT count(*) FROM pg_logical_slot_get_changes({lit(name)}, NULL, 20000);",
            f"SELECT pg_replication_slot_advance({lit(name)}, pg_current_wal_flush_lsn()) IS NOT NULL;",
            f"SELECT count(*) FROM pg_logical_slot_peek_changes({lit(name)}, NULL, 1000);",
        ]
        try:
            for st in steps:
                _, errs = s.run(st)
                lp.calls += 1
                lp.count(errs)
                time.sleep(0.3)
            time.sleep(1.0 + (i % 4))  # a slot lives a few seconds: the function loops meet it
            _, errs = s.run(f"SELECT pg_drop_replication_slot({lit(name)});")
            lp.calls += 1
            lp.count(errs)
        except Lost as e:
            lp.crashes.append(str(e))
            time.sleep(1)
            s = Psql("soak slots sql")
    s.close()


def protocol_slot_loop(lp, deadline, workdir):
    i = 0
    q = Psql("soak slots protocol")
    while time.time() < deadline:
        i += 1
        name = f"soak_rp_{i}"
        base = ["pg_recvlogical", "-d", os.environ.get("PGDATABASE", "postgres"), "-S", name]
        endpos = q.run("SELECT pg_current_wal_flush_lsn();")[0][0]
        for args in (["--create-slot", "-P", "test_decoding"],
                     ["--start", "-f", os.devnull, "-n", "-E", endpos, "-s", "1"],
                     ["--drop-slot"]):
            if args[0] == "--drop-slot":
                time.sleep(1.0 + (i % 3))
            r = subprocess.run(base + args, capture_output=True, text=True, timeout=300)
            lp.calls += 1
            if r.returncode != 0:
                msg = (r.stderr or r.stdout).strip().replace("\n", " | ")
                if any(x in msg for x in LOST):
                    lp.crashes.append(msg)
                lp.errors["pg_recvlogical"] = lp.errors.get("pg_recvlogical", 0) + 1
                if len(lp.bad) < 20:
                    lp.bad.append(("pg_recvlogical " + args[0], msg))
            if args[0] == "--start":
                # streaming stops at endpos, once WAL past it has been decoded; give it time
                pass
    q.close()


def keep_loop(lp, deadline):
    s = Psql("soak keep consumer")
    while time.time() < deadline:
        try:
            for st in ("SELECT count(*) FROM pg_logical_slot_get_changes('soak_keep', NULL, 50000);",
                       "SELECT pg_replication_slot_advance('soak_keep', pg_current_wal_flush_lsn()) IS NOT NULL;"):
                _, errs = s.run(st)
                lp.calls += 1
                lp.count(errs)
                time.sleep(2.5)
        except Lost as e:
            lp.crashes.append(str(e))
            time.sleep(1)
            s = Psql("soak keep consumer")
    s.close()


def watcher_loop(lp, deadline, every):
    """Terminates the watcher every `every` seconds; lp.terminated: the pids ended."""
    s = Psql("soak watcher terminator")
    seen = set()
    while time.time() < deadline:
        time.sleep(every)
        try:
            out, errs = s.run("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher';")
            lp.count(errs)
            for row in out:
                if row.strip().isdigit():
                    pid = int(row)
                    seen.add(pid)
                    _, errs = s.run(f"SELECT pg_terminate_backend({pid});")
                    lp.calls += 1
                    lp.count(errs)
                    lp.terminated.add(pid)
        except Lost as e:
            lp.crashes.append(str(e))
            time.sleep(1)
            s = Psql("soak watcher terminator")
    # The last one terminated is started again within the restart interval (10 s).
    lp.back = False
    for _ in range(30):
        out, _ = s.run("SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_snapbuild watcher';")
        now = {int(r) for r in out if r.strip().isdigit()}
        seen |= now
        if now - lp.terminated:
            lp.back = True
            break
        time.sleep(0.5)
    lp.watchers = len(seen)
    s.close()


def sampler(loops, deadline, stop):
    t0 = time.time()
    while not stop.is_set():
        for lp in loops:
            pid = lp.pid
            if pid:
                st = status(pid)
                if st:
                    lp.samples.append((time.time() - t0, st.get("RssAnon", 0), st.get("VmRSS", 0)))
        time.sleep(0.25)


def server_log_crashes(path, offset, terminated):
    """The crash lines of the server log since `offset`, but the exits of the watchers the
    soak terminated (pids `terminated`), and the count of the watcher's failed looks."""
    pats = ("terminated by signal", "exited with exit code", "PANIC:", "terminated by exception",
            "all server processes terminated", "reinitializing")
    expected = {f'background worker "pg_snapbuild watcher" (PID {p}) exited with exit code 1' for p in terminated}
    hits, failed_looks = [], 0
    with open(path, errors="replace") as f:
        f.seek(offset)
        for line in f:
            if "pg_snapbuild watcher: a look at the logical slots failed" in line:
                failed_looks += 1
            if any(p in line for p in pats) and not any(e in line for e in expected):
                hits.append(line.strip())
    return hits, failed_looks


def main():
    seconds, outdir, server_log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    clients = int(os.environ.get("PGSNAP_SOAK_CLIENTS", "4"))
    growth_mib = int(os.environ.get("PGSNAP_SOAK_GROWTH_MIB", "64"))
    log_offset = os.path.getsize(server_log)
    ctl = Psql("soak control")
    started = ctl.run("SELECT pg_postmaster_start_time();")[0][0]
    ctl.run("SELECT pg_create_logical_replication_slot('soak_keep', 'test_decoding');")
    t0 = time.time()
    deadline = t0 + seconds
    bench_log = open(os.path.join(outdir, "pgbench.log"), "w")
    bench = subprocess.Popen(["pgbench", "-n", "-c", str(clients), "-j", "2", "-T", str(seconds), "-P", "60"],
                             stdout=bench_log, stderr=subprocess.STDOUT)
    fn_loops = [Loop(n, "function") for n in FUNCTIONS]
    slot_loops = [Loop("slots: SQL", "slots"), Loop("slots: replication protocol", "slots"),
                  Loop("slots: soak_keep consumer", "slots")]
    threads = [threading.Thread(target=function_loop, args=(lp, deadline)) for lp in fn_loops]
    threads.append(threading.Thread(target=sql_slot_loop, args=(slot_loops[0], deadline)))
    threads.append(threading.Thread(target=protocol_slot_loop, args=(slot_loops[1], deadline, outdir)))
    threads.append(threading.Thread(target=keep_loop, args=(slot_loops[2], deadline)))
    terminate_every = int(os.environ.get("PGSNAP_SOAK_TERMINATE_S", "10"))
    watcher = Loop("watcher: terminated", "watcher")
    watcher.terminated, watcher.watchers, watcher.back = set(), 0, False
    threads.append(threading.Thread(target=watcher_loop, args=(watcher, deadline, terminate_every)))
    stop = threading.Event()
    smp = threading.Thread(target=sampler, args=(fn_loops, deadline, stop))
    for t in threads + [smp]:
        t.daemon = True
        t.start()
    log(f"soak: {seconds} s, pgbench -c {clients}, {len(fn_loops)} function loops, {len(slot_loops)} slot loops")
    last = t0
    while any(t.is_alive() for t in threads):
        time.sleep(1)
        if time.time() - last >= 60:
            last = time.time()
            calls = sum(lp.calls for lp in fn_loops)
            errs = sum(sum(lp.errors.values()) for lp in fn_loops + slot_loops)
            log(f"  {int(last - t0)} s: {calls} function calls, {errs} errors")
        if time.time() > deadline + 600:
            log("loops still running 10 min after the end: giving up on them")
            break
    stop.set()
    smp.join()
    bench_rc = bench.wait()
    bench_log.close()
    wall = time.time() - t0
    try:
        ctl2 = Psql("soak control end")
        now_started = ctl2.run("SELECT pg_postmaster_start_time();")[0][0]
        ctl2.run("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'soak%' AND NOT active;")
        ctl2.close()
    except Lost as e:
        now_started = f"lost: {e}"
    log_crashes, failed_looks = server_log_crashes(server_log, log_offset, watcher.terminated)
    with open(os.path.join(outdir, "pgbench.log")) as f:
        btxt = f.read()
    m = re.search(r"number of transactions actually processed: (\d+)", btxt)
    tps = re.search(r"tps = ([0-9.]+)", btxt)

    window = min(60.0, seconds / 3.0)
    result = {"seconds": seconds, "wall_s": round(wall, 1), "pgbench_clients": clients,
              "pgbench_rc": bench_rc, "pgbench_transactions": int(m.group(1)) if m else None,
              "pgbench_tps": float(tps.group(1)) if tps else None,
              "postmaster_restarted": now_started != started, "server_log_crashes": log_crashes[:20],
              "memory_window_s": window, "growth_limit_mib": growth_mib,
              "watcher_terminated": len(watcher.terminated), "watchers": watcher.watchers,
              "watcher_failed_looks": failed_looks, "loops": []}
    failures = []
    if bench_rc != 0:
        failures.append(f"pgbench exited {bench_rc}")
    if now_started != started:
        failures.append(f"postmaster restarted: {started} -> {now_started}")
    if log_crashes:
        failures.append(f"{len(log_crashes)} crash lines in the server log")
    if not watcher.back:
        failures.append("no watcher ran 15 s after the last terminate")
    for lp in fn_loops + slot_loops + [watcher]:
        r = {"loop": lp.name, "kind": lp.kind, "calls": lp.calls, "errors": lp.errors,
             "undocumented": [{"sqlstate": c, "message": msg} for c, msg in lp.bad],
             "crashes": lp.crashes[:20]}
        if lp.kind == "function":
            s = lp.samples
            first = [a for t, a, _ in s if t <= window]
            lastw = [a for t, a, _ in s if t >= seconds - window]
            r.update({"samples": len(s),
                      "peak_anon_kib": max((a for _, a, _ in s), default=None),
                      "peak_rss_kib": max((x for _, _, x in s), default=None),
                      "first_window_peak_anon_kib": max(first, default=None),
                      "last_window_peak_anon_kib": max(lastw, default=None),
                      "vmhwm_kib": lp.hwm_kib})
            if first and lastw and max(lastw) - max(first) > growth_mib * 1024:
                failures.append(f"{lp.name}: RssAnon grew from {max(first) >> 10} to {max(lastw) >> 10} MiB")
            if lp.calls == 0:
                failures.append(f"{lp.name}: no call ran")
        if lp.bad:
            failures.append(f"{lp.name}: undocumented errors {sorted(set(c for c, _ in lp.bad))}: {lp.bad[0][1]}")
        if lp.crashes:
            failures.append(f"{lp.name}: {len(lp.crashes)} lost connections: {lp.crashes[0]}")
        result["loops"].append(r)
    result["allowed"] = ALLOWED
    result["failures"] = failures
    result["ok"] = not failures
    with open(os.path.join(outdir, "result.json"), "w") as f:
        json.dump(result, f, indent=1)

    mib = lambda k: "-" if k is None else f"{k / 1024:.1f}"
    print()
    print(f"soak {seconds} s (wall {wall:.0f} s): pgbench -c {clients}: {result['pgbench_transactions']} transactions, "
          f"{result['pgbench_tps']} tps; postmaster restarts: {int(now_started != started)}; "
          f"crash lines in the server log: {len(log_crashes)}")
    print(f"watcher: terminated {len(watcher.terminated)} times, {watcher.watchers} watcher processes ran, "
          f"{failed_looks} looks failed (logged, not crashes)")
    print(f"memory windows: first and last {window:.0f} s")
    print(f"{'loop':40} {'calls':>7} {'errors (SQLSTATE: n)':28} {'peak anon':>9} {'first':>7} {'last':>7} {'VmHWM':>7}")
    for r in result["loops"]:
        errs = ", ".join(f"{c}: {n}" for c, n in sorted(r["errors"].items())) or "0"
        if r["kind"] == "function":
            print(f"{r['loop']:40} {r['calls']:>7} {errs:28} {mib(r['peak_anon_kib']):>9} "
                  f"{mib(r['first_window_peak_anon_kib']):>7} {mib(r['last_window_peak_anon_kib']):>7} {mib(r['vmhwm_kib']):>7}")
        else:
            print(f"{r['loop']:40} {r['calls']:>7} {errs:28}")
    print("(MiB; peak anon = highest RssAnon sampled every 250 ms; first / last = its peak in the first / last window)")
    print(f"result: {os.path.join(outdir, 'result.json')}")
    if failures:
        print("\nFAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("\nOK: no crash, no undocumented error, memory flat")


if __name__ == "__main__":
    main()
