#!/usr/bin/env python3
"""host_churn.py: cuda_churn's allocation sequence on the host backend, no GPU.

Runs the preload test application (tests/preload/preload_app, mode
cudachurn: the generator of cuda_churn.cu) under libxseg_preload.so with the
stand-in runtime and driver, on backend:host with host_driver_latency:h200,
once per conf, and prints a table: the driver calls by op (all threads; the
reclaim worker's share in its own column), the caller's driver time under
the latency model, mapped peak / live peak, the quarantine's syncs.
usage: host_churn.py BUILD_DIR [ITERS] [-- CONF ...]
       each conf argument: "CONF" or "CONF|Q", Q an XSEG_PRELOAD_QUARANTINE
       value or "sync"/"stream" (XSEG_PRELOAD_FREE); CONF is what
       XSEG_CONF gets after "backend:host,host_driver_latency:h200".
       CHURN_SYNC=1: every allocation through cudaMalloc (one stream).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

OPS = ["create", "map", "set_access", "unmap", "release", "event_record", "event_query",
       "event_sync"]

# per-call cost in us of each op on a 2 MiB handle (docs/config.md,
# host_driver_latency): a count-based figure that a loaded machine cannot skew
COST_US = {"create": 8.7, "map": 1.3, "set_access": 25.0, "unmap": 18.1, "release": 11.1}

DEFAULT_CONFS = ["", "release_threshold:unlimited", "reclaim:worker",
                 "release_threshold:unlimited,reclaim:worker"]


def run(build, iters, conf, quarantine, free_mode):
    app = os.path.join(build, "tests/preload/preload_app")
    fake = os.path.join(build, "tests/preload/libfakecuda.so")
    pre = os.path.join(build, "tools/preload/libxseg_preload.so")
    with tempfile.TemporaryDirectory() as d:
        stats = os.path.join(d, "s")
        env = dict(os.environ, FAKE_LIBCUDA=fake, XSEG_PRELOAD_LIBCUDA=fake,
                   LD_PRELOAD=pre, XSEG_PRELOAD_STATS=stats,
                   XSEG_CONF="backend:host,host_driver_latency:h200" + ("," + conf if conf else ""))
        env.pop("XSEG_PRELOAD_QUARANTINE", None)
        env.pop("XSEG_PRELOAD_FREE", None)
        if free_mode:
            env["XSEG_PRELOAD_FREE"] = free_mode
        if quarantine:
            env["XSEG_PRELOAD_QUARANTINE"] = quarantine
        t0 = time.monotonic()
        argv = [app, "cudachurn", str(iters)] + (["sync"] if os.environ.get("CHURN_SYNC") else [])
        p = subprocess.run(argv, env=env, capture_output=True,
                           text=True, timeout=300)
        wall = time.monotonic() - t0
        if p.returncode != 0 or "errors=0" not in p.stdout:
            raise SystemExit("conf %r: rc %d\n%s\n%s" % (conf, p.returncode, p.stdout, p.stderr))
        lines = [json.loads(l) for l in open(stats) if l.strip()]
    dev0 = [l for l in lines if l["device"] == 0][0]
    return dev0, wall


def val(stats, key):
    v = stats[key]
    return v["current"] if isinstance(v, dict) and "current" in v else v


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if args else 2)
    build = args.pop(0)
    if not os.path.exists(os.path.join(build, "tests/preload/preload_app")):
        sys.exit("host_churn.py: %s has no tests/preload/preload_app (a build with the "
                 "tests and the preload library; see --help)" % build)
    iters = int(args.pop(0)) if args and args[0] != "--" else 8000
    confs = args[1:] if args and args[0] == "--" else DEFAULT_CONFS
    print("| conf | quarantine | " + " | ".join(OPS[:6]) +
          " | of them worker | modelled ms (all threads) | caller driver ms | mapped peak MiB | live peak MiB | peak/live | syncs | growth drains (caller) | bound drains (thread) | wall s |")
    print("|" + "---|" * 19)
    for c in confs:
        conf, _, q = c.partition("|")
        free_mode = ""
        if q in ("sync", "stream"):
            free_mode, q = q, ""
        r, wall = run(build, iters, conf, q, free_mode)
        s, pl = r["stats"], r["preload"]
        calls = s["driver_calls"]
        mp = s["mapped_bytes"]["peak"] if isinstance(s["mapped_bytes"], dict) else s["mapped_bytes"]
        lp = pl["live_peak_bytes"]
        model = sum(calls.get(o, 0) * c for o, c in COST_US.items()) / 1e3
        print("| `%s` | %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %.3f | %d | %d | %d (%d) | %.2f |" % (
            conf or "(default)", free_mode or q or pl.get("quarantine_bound", "default"),
            " | ".join(str(calls.get(o, 0)) for o in OPS[:6]),
            val(s, "driver_calls_worker"), model, val(s, "driver_ns_caller") / 1e6, mp / 2**20,
            lp / 2**20, mp / lp, pl["syncs"], pl.get("drains_growth", -1),
            pl.get("drains_bound", -1), pl.get("drains_thread", -1), wall), flush=True)


if __name__ == "__main__":
    main()
