#!/usr/bin/env python3
"""report_ablation.py RUNS.tsv OUT.json: the table of scripts/bench_ablation.sh, written
also as JSON.

RUNS.tsv lines (tab-separated, no header): try id rows cpu_s, where id is one of floor
(pg_waldump --stats), pg_get_wal_stats, rows_cte, rows_scan, trace_full, trace_no-rows,
trace_no-lean-feed, trace_neither.

Each figure is given as CPU seconds (least, median, mean over the tries) and as a multiple
of the same try's floor (median over the tries). The parts are paired differences within a
try, then the median over the tries:
  PostgreSQL's part  pg_get_wal_stats + (rows_cte - rows_scan)
  forming rows       trace_full - trace_no-rows
  lean feed          trace_full - trace_no-lean-feed
  feed and rows      trace_full - trace_neither (both at once: the two above do not add up)
  ours               trace_full - PostgreSQL's part
  rest of ours       trace_neither - PostgreSQL's part (the commit path, the record loop)
"""
import json
import statistics
import sys

GOAL = 1.5  # the goal: snapbuild_trace_range <= 1.5 x the floor (docs/benchmarks.md)


def main(runs_path, out_path):
    by_try = {}
    rows = {}
    with open(runs_path) as f:
        for line in f:
            if not line.strip():
                continue
            t, ident, n, cpu = line.rstrip("\n").split("\t")
            by_try.setdefault(int(t), {})[ident] = float(cpu)
            rows.setdefault(ident, set()).add(n)
    tries = [by_try[t] for t in sorted(by_try)]
    if not tries:
        sys.exit("no tries in " + runs_path)
    ids = ["floor", "pg_get_wal_stats", "rows_cte", "rows_scan",
           "trace_full", "trace_no-rows", "trace_no-lean-feed", "trace_neither"]
    missing = [i for i in ids if any(i not in t for t in tries)]
    if missing:
        sys.exit("tries without " + ", ".join(missing))
    traces = [i for i in ids if i.startswith("trace_")]
    counts = {i: sorted(rows[i]) for i in traces}
    if len({tuple(c) for c in counts.values()}) != 1 or len(counts["trace_full"]) != 1:
        print("warning: the builds' row counts differ:", counts)

    def stats(values):
        return {"least": round(min(values), 2),
                "median": round(statistics.median(values), 2),
                "mean": round(statistics.mean(values), 2)}

    def tuplestore(t):
        return t["rows_cte"] - t["rows_scan"]

    def postgres_part(t):
        return t["pg_get_wal_stats"] + tuplestore(t)

    derived = {
        "postgres_part": postgres_part,
        "tuplestore": tuplestore,
        "forming_rows": lambda t: t["trace_full"] - t["trace_no-rows"],
        "lean_feed": lambda t: t["trace_full"] - t["trace_no-lean-feed"],
        "feed_and_rows": lambda t: t["trace_full"] - t["trace_neither"],
        "ours": lambda t: t["trace_full"] - postgres_part(t),
        "rest_of_ours": lambda t: t["trace_neither"] - postgres_part(t),
    }
    result = {"tries": len(tries), "goal": GOAL, "row_counts": counts, "measured": {}, "parts": {}}
    print(f"{len(tries)} interleaved tries; CPU s (least / median / mean) and x the same try's floor (median)")
    print(f"{'':34} {'least':>7} {'median':>7} {'mean':>7} {'x floor':>8}")
    for i in ids:
        s = stats([t[i] for t in tries])
        s["x_floor_median"] = round(statistics.median(t[i] / t["floor"] for t in tries), 2)
        s["x_floor_each"] = [round(t[i] / t["floor"], 2) for t in tries]
        result["measured"][i] = s
        print(f"{i:34} {s['least']:7.2f} {s['median']:7.2f} {s['mean']:7.2f} {s['x_floor_median']:8.2f}")
    print("\nparts, paired within each try (median over the tries):")
    for name, f in derived.items():
        each = [f(t) for t in tries]
        x = [f(t) / t["floor"] for t in tries]
        result["parts"][name] = {"cpu_s_median": round(statistics.median(each), 2),
                                 "x_floor_median": round(statistics.median(x), 2),
                                 "x_floor_each": [round(v, 2) for v in x]}
        print(f"  {name:32} {statistics.median(each):6.2f} s  {statistics.median(x):5.2f} x floor"
              f"   each: {' '.join(f'{v:.2f}' for v in x)}")
    leaves = [GOAL - postgres_part(t) / t["floor"] for t in tries]
    result["goal_leaves_ours_x_floor_median"] = round(statistics.median(leaves), 2)
    result["tries_under_goal"] = {i: sum(1 for t in tries if t[i] / t["floor"] <= GOAL) for i in traces}
    print(f"\nthe {GOAL}x goal leaves ours {statistics.median(leaves):.2f} x floor (median);"
          f" tries at or under {GOAL}x: " + ", ".join(f"{i} {n}/{len(tries)}" for i, n in result["tries_under_goal"].items()))
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    print("written:", out_path)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
