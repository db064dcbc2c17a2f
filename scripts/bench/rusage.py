#!/usr/bin/env python3
"""rusage.py OUTFILE CMD [ARG...]: run CMD with its stdout sent to OUTFILE and print
"<wall seconds> <peak RSS KiB> <peak RssAnon KiB> <CPU seconds>": the peak RSS is the child's ru_maxrss
(getrusage RUSAGE_CHILDREN, as is the CPU time, user + system), the RssAnon peak (of CMD or its largest descendant) is sampled from /proc every 5 ms.
Exits with the child's status if it failed (its stderr passes through)."""
import resource
import subprocess
import sys
import time


def anon_kib(pid):
    """RssAnon of pid, or of its largest descendant (when CMD is sudo ... pg_waldump)."""
    best = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    best = int(line.split()[1])
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            for child in f.read().split():
                best = max(best, anon_kib(child))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return best


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    anon = 0
    with open(sys.argv[1], "wb") as out:
        t0 = time.monotonic()
        child = subprocess.Popen(sys.argv[2:], stdout=out)
        while child.poll() is None:
            anon = max(anon, anon_kib(child.pid))
            time.sleep(0.005)
        secs = time.monotonic() - t0
    if child.returncode != 0:
        sys.exit(child.returncode)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"{secs:.3f} {ru.ru_maxrss} {anon} {ru.ru_utime + ru.ru_stime:.2f}")


if __name__ == "__main__":
    main()
