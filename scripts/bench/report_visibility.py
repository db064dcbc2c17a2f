#!/usr/bin/env python3
"""report_visibility.py RUNS.tsv META.tsv BRANCHES.tsv OUT.json: print the table of
scripts/bench_visibility.sh, the ratio both / server and the agreement, and write them as JSON.

RUNS.tsv columns (tab-separated, no header):
  id mode rep rows agrees server_visible wall_s cpu_s vmhwm_kib anon_kib
(cpu_s: the backend's utime + stime during the statement)
mode: "both", "server" (snapbuild_visibility with verdicts => that) or "snapshot"
(snapbuild_historic_snapshot alone: the replay both scans start with).
BRANCHES.tsv: rust_branch<TAB>count of one untimed 'both' scan.
META.tsv: key<TAB>value lines (numbers become JSON numbers).
Exits 1 if a 'both' run has a row whose verdicts do not agree."""
import json
import statistics
import sys


def num(v):
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def read_tsv(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    runs_path, meta_path, branches_path, out_path = sys.argv[1:]
    meta = {k: num(v) for k, v in read_tsv(meta_path)}
    idle = meta["idle_backend_peak_kib"]
    runs = []
    for rid, mode, rep, rows, agree, vis, secs, cpu, hwm, anon in read_tsv(runs_path):
        runs.append({
            "id": rid, "mode": mode, "rep": int(rep), "rows": int(rows),
            "agrees": int(agree) if agree else None,
            "server_visible": int(vis) if vis else None,
            "wall_s": round(float(secs), 3),
            "cpu_s": round(float(cpu), 2),
            "peak_rss_mib": round(int(hwm) / 1024, 1),
            "peak_rss_over_idle_mib": round((int(hwm) - idle) / 1024, 1),
            "peak_anon_mib": round(int(anon) / 1024, 1),
        })
    branches = {b: int(n) for b, n in read_tsv(branches_path)}

    def summary(mode):
        rs = [r for r in runs if r["mode"] == mode]
        walls = [r["wall_s"] for r in rs]
        cpus = [r["cpu_s"] for r in rs]
        return {
            "runs": len(rs),
            "wall_s_min": min(walls),
            "wall_s_median": round(statistics.median(walls), 3),
            "wall_s_max": max(walls),
            "cpu_s_min": min(cpus),
            "cpu_s_median": round(statistics.median(cpus), 2),
            "peak_rss_mib_max": max(r["peak_rss_mib"] for r in rs),
            "peak_rss_over_idle_mib_max": max(r["peak_rss_over_idle_mib"] for r in rs),
            "peak_anon_mib_max": max(r["peak_anon_mib"] for r in rs),
        }

    s = {m: summary(m) for m in ("both", "server", "snapshot")}
    both_runs = [r for r in runs if r["mode"] == "both"]
    server_runs = [r for r in runs if r["mode"] == "server"]
    rows = both_runs[0]["rows"]
    agreement = {
        "rows": rows,
        "agreeing_rows_min": min(r["agrees"] for r in both_runs),
        "all_agree": all(r["agrees"] == r["rows"] == rows for r in both_runs),
        "same_rows_and_server_verdicts": all(
            r["rows"] == rows and r["server_visible"] == both_runs[0]["server_visible"]
            for r in both_runs + server_runs),
    }
    med = {m: s[m]["wall_s_median"] for m in s}
    ratio = {
        "both/server wall (median)": round(med["both"] / med["server"], 3),
        "both/server wall (min)": round(s["both"]["wall_s_min"] / s["server"]["wall_s_min"], 3),
        "both/server cpu (median)": round(s["both"]["cpu_s_median"] / s["server"]["cpu_s_median"], 3)
            if s["server"]["cpu_s_median"] else None,
        "both/server scan only (median, snapshot subtracted)":
            round((med["both"] - med["snapshot"]) / (med["server"] - med["snapshot"]), 3)
            if med["server"] > med["snapshot"] else None,
        "both/server peak anon": round(s["both"]["peak_anon_mib_max"] / s["server"]["peak_anon_mib_max"], 3)
            if s["server"]["peak_anon_mib_max"] else None,
    }

    print(f"PostgreSQL {meta.get('postgresql')}, pg_snapbuild {meta.get('extension_build')} build "
          f"({meta.get('extension_source')}), {meta.get('cpus')} CPUs")
    print(f"pg_attribute: {meta.get('pg_attribute_rows')} rows in {meta.get('pg_attribute_blocks')} blocks "
          f"({meta.get('tables')} tables x {meta.get('columns')} columns); replay from restart_lsn: "
          f"{meta.get('replay_wal_bytes')} bytes of WAL; shared_buffers {meta.get('shared_buffers')}")
    print(f"idle backend: VmHWM {idle / 1024:.1f} MiB, RssAnon {meta.get('idle_backend_anon_kib', 0) / 1024:.1f} MiB")
    hdr = ["mode", "runs", "rows", "wall s min", "median", "max", "cpu s median", "peak RSS MiB", "over idle",
           "peak anon MiB"]
    table = [hdr]
    for m in ("both", "server", "snapshot"):
        x = s[m]
        r0 = next(r for r in runs if r["mode"] == m)
        table.append([m, str(x["runs"]), str(r0["rows"]), f"{x['wall_s_min']:.2f}", f"{x['wall_s_median']:.2f}",
                      f"{x['wall_s_max']:.2f}", f"{x['cpu_s_median']:.2f}", f"{x['peak_rss_mib_max']:.1f}",
                      f"{x['peak_rss_over_idle_mib_max']:.1f}", f"{x['peak_anon_mib_max']:.1f}"])
    widths = [max(len(row[i]) for row in table) for i in range(len(hdr))]
    for i, row in enumerate(table):
        print(" | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    print()
    for k, v in ratio.items():
        print(f"ratio {k}: {v}")
    print(f"agreement: {agreement['agreeing_rows_min']} of {rows} rows agree in every 'both' run"
          f" ({'100%' if agreement['all_agree'] else 'NOT ALL'}); both modes saw the same rows and server verdicts:"
          f" {agreement['same_rows_and_server_verdicts']}")
    print("branches (one 'both' scan):")
    for b, n in branches.items():
        print(f"  {n:9d}  {b}")

    with open(out_path, "w") as f:
        json.dump({"meta": meta, "runs": runs, "summary": s, "ratio": ratio,
                   "agreement": agreement, "branches": branches}, f, indent=2)
        f.write("\n")
    print(f"\nJSON: {out_path}")
    if not (agreement["all_agree"] and agreement["same_rows_and_server_verdicts"]):
        sys.exit(1)


if __name__ == "__main__":
    main()
