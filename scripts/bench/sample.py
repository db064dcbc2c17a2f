#!/usr/bin/env python3
"""sample.py PID DIR: poll /proc/PID/status every 5 ms and keep the peaks of VmRSS and of its
parts RssAnon (private heap), RssFile and RssShmem (shared buffers touched), which VmHWM
does not separate. Creates DIR/ready once sampling runs; when DIR/stop appears (or PID
exits) writes "vmrss_kib anon_kib file_kib shmem_kib" to DIR/peaks and exits."""
import os
import sys
import time

FIELDS = ("VmRSS:", "RssAnon:", "RssFile:", "RssShmem:")


def sample(pid):
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in FIELDS:
                vals[parts[0]] = int(parts[1])
    return [vals.get(k, 0) for k in FIELDS]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pid, d = sys.argv[1], sys.argv[2]
    peaks = [0] * len(FIELDS)
    stop = os.path.join(d, "stop")
    first = True
    while True:
        try:
            cur = sample(pid)
        except (FileNotFoundError, ProcessLookupError):
            break
        peaks = [max(a, b) for a, b in zip(peaks, cur)]
        if first:
            open(os.path.join(d, "ready"), "w").close()
            first = False
        if os.path.exists(stop):
            break
        time.sleep(0.005)
    tmp = os.path.join(d, "peaks.tmp")
    with open(tmp, "w") as f:
        f.write(" ".join(str(p) for p in peaks) + "\n")
    os.rename(tmp, os.path.join(d, "peaks"))


if __name__ == "__main__":
    main()
