#!/usr/bin/env python3
"""tests/tools/test_churn_lag.py: cuda_churn's sequence under the preload
library on the host backend with a GPU that runs behind (host_event_lag:16,
the case whose peak matched the H100's 1.04): a growth over the release
threshold waits for the deferred frees (the asynchronous frees, which the
preload library turns into record_stream uses) and moves their pages, so
the mapped peak stays within 3% of the live peak (1.015 with the wait;
1.042 without it, the old behaviour).  Deterministic: the lag counts event
queries, not time.
usage: test_churn_lag.py BUILD_DIR
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "preload"))
import host_churn  # noqa: E402


def main():
    build = sys.argv[1]
    failures = 0
    for conf in ("reclaim:worker,host_event_lag:16", "reclaim:sync,host_event_lag:16"):
        r, _ = host_churn.run(build, 2000, conf, "", "")  # raises unless errors=0
        s, pl = r["stats"], r["preload"]
        ratio = s["mapped_bytes"]["peak"] / float(pl["live_peak_bytes"])
        ok = ratio <= 1.03 and s["syncs"] > 0 and s["deferred_frees"] > 0
        print("%s %s: mapped peak / live peak %.4f (at most 1.03), %d syncs, %d deferred frees"
              % ("ok  " if ok else "FAIL", conf, ratio, s["syncs"], s["deferred_frees"]))
        failures += not ok
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
