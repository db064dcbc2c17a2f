#!/usr/bin/env python3
"""report.py RUNS.tsv META.tsv OUT.json [COST.tsv]: print the benchmark table, the ratios and the
growth of peak memory with the range, and write them all as JSON.

RUNS.tsv columns (tab-separated, no header), as scripts/bench.sh writes them:
  id tool pct start_lsn end_lsn wal_bytes rows wall_s peak_rss_kib peak_anon_kib kind run cpu_s
(an id measured several times has one line per run; the figures of run 1 are the table's
and the older ratios', and each run's trace / floor ratios are given apart).
kind "backend": peak RSS is the backend's VmHWM; "process": the child's ru_maxrss.
peak_anon_kib is RssAnon (private memory) sampled every 5 ms.
META.tsv: key<TAB>value lines (numbers become JSON numbers).
COST.tsv (optional): what snapbuild_decoding_cost computed over each prefix, one line per
call, the columns of COST_COLUMNS."""
import json
import sys

MIB = 1024 * 1024
COST_COLUMNS = ("range_pct", "work_mem_kb", "streaming", "records", "wal_bytes", "total_txns",
                "total_bytes", "spill_txns", "spill_count", "spill_bytes", "stream_txns",
                "stream_count", "stream_bytes", "pending_txns", "peak_memory_bytes", "undecided")


def num(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def read_meta(path):
    meta = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                k, v = line.rstrip("\n").split("\t", 1)
                meta[k] = num(v)
    return meta


def read_runs(path, idle_kib):
    runs = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            rid, tool, pct, start, end, wal, rows, secs, peak, anon, kind, run, cpu = \
                line.rstrip("\n").split("\t")
            wal, rows, secs, peak, anon = int(wal), int(rows), float(secs), int(peak), int(anon)
            runs.append({
                "id": rid, "run": int(run), "cpu_s": float(cpu) if cpu else None,
                "tool": tool, "range_pct": int(pct),
                "start_lsn": start, "end_lsn": end, "wal_bytes": wal,
                "rows": rows, "wall_s": round(secs, 3),
                "mib_per_s": round(wal / MIB / secs, 1) if secs > 0 else None,
                "rss_kind": "VmHWM" if kind == "backend" else "ru_maxrss",
                "peak_rss_mib": round(peak / 1024, 1),
                "peak_rss_over_idle_mib": round((peak - idle_kib) / 1024, 1) if kind == "backend" else None,
                "peak_anon_mib": round(anon / 1024, 1),
            })
    return runs


# The ids measured in every run over the whole range (scripts/bench.sh, step 3).
PER_RUN_IDS = ("waldump_stats_100", "trace_100", "trace_all_100", "walinspect_100", "walstats_100",
               "trace_rows_cte_100", "trace_rows_scan_100",
               "trace_all_rows_cte_100", "trace_all_rows_scan_100",
               "backlog_100", "cost_100", "cost_spill_100", "cost_stream_100")
# The goals, function / floor in CPU time (docs/benchmarks.md).
GOALS = {"trace": 1.5, "trace_all": 4.0,
         "backlog": 3.0, "cost": 3.0, "cost_spill": 3.0, "cost_stream": 3.0}
# The ids whose per-run ratio to the floor is reported.
RATIO_IDS = ("trace_100", "trace_all_100", "backlog_100", "cost_100", "cost_spill_100", "cost_stream_100")


def postgres_part(best):
    """Per run and trace, in CPU seconds (the least of the run's tries of each): the part of
    the trace's time that PostgreSQL itself costs, and what is left for ours.

    reader: pg_get_wal_stats, PostgreSQL's reader reading and CRC-checking every record of the
    range inside a backend. tuplestore: the trace's own rows through a tuplestore of work_mem
    (a MATERIALIZED CTE over the table they are stored in, less a plain scan of it), as every
    row of a function in FROM goes. Their sum is paid by any backend function returning these
    rows from this WAL; the rest of the trace's time is ours (the replay, forming the rows,
    the call). The goal leaves goal x floor - (reader + tuplestore) for ours."""
    out = []
    for run in sorted({run for (_, run) in best}):
        cpu = {rid: best[(rid, run)]["cpu_s"] for (rid, r) in best if r == run}
        for t in ("trace", "trace_all"):
            need = ("waldump_stats_100", "walstats_100", f"{t}_100",
                    f"{t}_rows_cte_100", f"{t}_rows_scan_100")
            if any(not cpu.get(k) for k in need):
                continue
            floor, reader, total = cpu["waldump_stats_100"], cpu["walstats_100"], cpu[f"{t}_100"]
            store = max(cpu[f"{t}_rows_cte_100"] - cpu[f"{t}_rows_scan_100"], 0.0)
            fixed = reader + store
            e = {
                "run": run, "id": f"{t}_100", "floor_cpu_s": floor, "reader_cpu_s": reader,
                "rows_cte_cpu_s": cpu[f"{t}_rows_cte_100"], "rows_scan_cpu_s": cpu[f"{t}_rows_scan_100"],
                "tuplestore_cpu_s": round(store, 2), "postgres_cpu_s": round(fixed, 2),
                "trace_cpu_s": total, "ours_cpu_s": round(total - fixed, 2),
                "goal": GOALS[t],
                "goal_leaves_ours_cpu_s": round(GOALS[t] * floor - fixed, 2),
            }
            for k in ("reader", "tuplestore", "postgres", "trace", "ours", "goal_leaves_ours"):
                e[f"{k}_over_floor"] = round(e[f"{k}_cpu_s"] / floor, 2)
            if t == "trace_all" and cpu.get("walinspect_100"):
                e["walinspect_cpu_s"] = cpu["walinspect_100"]
                e["walinspect_over_floor"] = round(cpu["walinspect_100"] / floor, 2)
            out.append(e)
    return out


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    runs_path, meta_path, out_path = sys.argv[1:4]
    costs = []
    if len(sys.argv) == 5:
        with open(sys.argv[4]) as f:
            for line in f:
                if line.strip():
                    costs.append(dict(zip(COST_COLUMNS, (num(v) for v in line.rstrip("\n").split("\t")))))
    meta = read_meta(meta_path)
    idle_kib = meta["idle_backend_peak_kib"]
    runs = read_runs(runs_path, idle_kib)
    # The first try of each in run 1 (the one taken beside the other tools and prefixes).
    by_id = {}
    for r in runs:
        if r["run"] == 1:
            by_id.setdefault(r["id"], r)
    # Each run's trace / floor (pg_waldump --stats: PostgreSQL's reader reading and
    # CRC-checking every record, counting them only), in wall and in CPU time. A run
    # measures each of the three several times, interleaved (PGSNAP_BENCH_BEST_OF): its
    # figure is the least of them, wall and CPU apart (noise on a shared machine only
    # ever adds time, to the floor as to the trace).
    best = {}
    for r in runs:
        if r["range_pct"] != 100 or r["id"] not in PER_RUN_IDS:
            continue
        b = best.setdefault((r["id"], r["run"]), {"id": r["id"], "run": r["run"], "rows": r["rows"],
                                                  "wall_s": None, "cpu_s": None, "tries": 0})
        b["tries"] += 1
        for key in ("wall_s", "cpu_s"):
            if r[key] is not None and (b[key] is None or r[key] < b[key]):
                b[key] = r[key]
    per_run = []
    for (rid, run), r in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        f = best.get(("waldump_stats_100", run))
        if rid in RATIO_IDS and f and f["wall_s"]:
            per_run.append({
                "run": run, "id": rid, "rows": r["rows"], "tries": r["tries"],
                "wall_s": r["wall_s"], "floor_wall_s": f["wall_s"],
                "wall_ratio": round(r["wall_s"] / f["wall_s"], 2),
                "cpu_s": r["cpu_s"], "floor_cpu_s": f["cpu_s"],
                "cpu_ratio": round(r["cpu_s"] / f["cpu_s"], 2) if r["cpu_s"] and f["cpu_s"] else None,
                "goal": GOALS[rid[:-len("_100")]],
            })
    part = postgres_part(best)

    def ratio(a, b, key):
        ra, rb = by_id.get(a), by_id.get(b)
        if not ra or not rb or not ra[key] or not rb[key]:
            return None
        return round(ra[key] / rb[key], 2)

    # Over the whole range: trace / other (> 1: the trace is slower or bigger).
    ratios = {}
    for trace in ("trace", "trace_all"):
        for other in ("waldump_stats", "waldump", "walinspect"):
            a, b = f"{trace}_100", f"{other}_100"
            ratios[f"{trace}/{other}"] = {
                "wall": ratio(a, b, "wall_s"),
                "peak_rss": ratio(a, b, "peak_rss_mib"),
                "peak_anon": ratio(a, b, "peak_anon_mib"),
            }
            if other == "walinspect":
                ratios[f"{trace}/{other}"]["peak_rss_over_idle"] = ratio(a, b, "peak_rss_over_idle_mib")

    # Whole range against each shorter prefix, tool by tool.
    growth = {}
    for r in by_id.values():
        if r["range_pct"] != 100:
            continue
        for s in runs:
            if s["tool"] == r["tool"] and s["range_pct"] < 100:
                growth[f"{r['id']} vs {s['id']}"] = {
                    "wal_bytes_ratio": round(r["wal_bytes"] / s["wal_bytes"], 2),
                    "peak_rss_delta_mib": round(r["peak_rss_mib"] - s["peak_rss_mib"], 1),
                    "peak_anon_delta_mib": round(r["peak_anon_mib"] - s["peak_anon_mib"], 1),
                    "peak_anon_ratio": round(r["peak_anon_mib"] / s["peak_anon_mib"], 2)
                    if s["peak_anon_mib"] else None,
                }

    hdr = ["tool", "range", "run", "records/rows", "WAL MiB", "wall s", "CPU s", "MiB/s",
           "peak RSS MiB", "RSS over idle", "peak anon MiB"]
    table = [hdr]
    for r in runs:
        table.append([
            r["tool"], f"{r['range_pct']}%", str(r["run"]), str(r["rows"]), f"{r['wal_bytes'] / MIB:.1f}",
            f"{r['wall_s']:.2f}", "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}",
            str(r["mib_per_s"]), f"{r['peak_rss_mib']:.1f}",
            "-" if r["peak_rss_over_idle_mib"] is None else f"{r['peak_rss_over_idle_mib']:.1f}",
            f"{r['peak_anon_mib']:.1f}",
        ])
    widths = [max(len(row[i]) for row in table) for i in range(len(hdr))]
    print(f"PostgreSQL {meta.get('postgresql')}, pg_snapbuild {meta.get('extension_build')} build "
          f"({meta.get('extension_source')}), {meta.get('cpus')} CPUs;\n"
          f"range {meta.get('start_lsn')}..{meta.get('end_lsn')} = {meta.get('wal_bytes')} bytes, "
          f"{meta.get('pgbench_transactions')} pgbench transactions")
    print(f"idle backend: VmHWM {idle_kib / 1024:.1f} MiB, RssAnon "
          f"{meta.get('idle_backend_anon_kib', 0) / 1024:.1f} MiB. Peak RSS: VmHWM for SQL (backend), "
          f"ru_maxrss for pg_waldump; peak anon: sampled RssAnon (private memory)")
    for i, row in enumerate(table):
        print(" | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    print()
    print("ratios over the whole range (trace / other; > 1: the trace is slower or bigger):")
    for k, v in ratios.items():
        print(f"  {k:22} " + "  ".join(f"{m} {x}" for m, x in v.items()))
    print()
    print("each run over the whole range, against the floor pg_waldump --stats of the same run,"
          " the least of each run's tries (goal: CPU ratio at most the goal):")
    for p in per_run:
        met = "met" if p["cpu_ratio"] is not None and p["cpu_ratio"] <= p["goal"] else "NOT met"
        print(f"  run {p['run']} {p['id']:16} ({p['tries']} tries) wall {p['wall_s']:.2f} s / "
              f"{p['floor_wall_s']:.2f} s = {p['wall_ratio']}x   CPU {p['cpu_s']} s / "
              f"{p['floor_cpu_s']} s = {p['cpu_ratio']}x  (goal {p['goal']}x: {met})")
    print()
    print("each run over the whole range, CPU s as a multiple of the floor: PostgreSQL's part (its reader in")
    print("a backend, pg_get_wal_stats; the tuplestore every row of a function in FROM goes through,")
    print("measured on the trace's own rows) and ours (the rest: replay, forming rows, the call), against")
    print("what the goal leaves for ours:")
    for e in part:
        line = (f"  run {e['run']} {e['id']:14} floor {e['floor_cpu_s']:.2f} s: reader {e['reader_over_floor']}"
                f" + tuplestore {e['tuplestore_over_floor']} = PostgreSQL {e['postgres_over_floor']};"
                f" ours {e['ours_over_floor']} (trace {e['trace_over_floor']});"
                f" the goal {e['goal']}x leaves ours {e['goal_leaves_ours_over_floor']}")
        if "walinspect_over_floor" in e:
            line += f"; pg_get_wal_records_info {e['walinspect_over_floor']}"
        print(line)
    print()
    print("peak memory, whole range vs a prefix (does it grow with WAL length?):")
    for k, v in growth.items():
        print(f"  {k:40} WAL x{v['wal_bytes_ratio']}: peak RSS {v['peak_rss_delta_mib']:+.1f} MiB, "
              f"peak anon {v['peak_anon_delta_mib']:+.1f} MiB (x{v['peak_anon_ratio']})")

    if costs:
        print()
        print("what snapbuild_decoding_cost computed over each prefix (one untimed call each):")
        keys = [k for k in COST_COLUMNS if k not in ("wal_bytes", "undecided")]
        print("  " + " ".join(f"{k:>17}" for k in keys) + "  undecided")
        for c in costs:
            print("  " + " ".join(f"{str(c.get(k, '')):>17}" for k in keys) + f"  {c.get('undecided', '')}")

    with open(out_path, "w") as f:
        json.dump({"meta": meta, "runs": runs, "ratios": ratios, "floor_ratios": per_run,
                   "postgres_part": part, "growth": growth, "decoding_cost": costs}, f, indent=2)
        f.write("\n")
    print(f"\nJSON: {out_path}")


if __name__ == "__main__":
    main()
