#!/usr/bin/env python3
"""tests/tools/test_churn_trace.py: tools/preload/churn_trace.py writes
cuda_churn's sequence: the same live peak as preload_app's own run of that
sequence (its C generator), a well-formed trace (every id freed once, after
its allocation), the streams of each mode, and usage errors.
usage: test_churn_trace.py PRELOAD_APP
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "preload", "churn_trace.py")
sys.path.insert(0, os.path.join(ROOT, "tools", "gpu"))
from corpus_tools import parse_line, read_trace, trace_facts  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def tool(*args):
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)


def app_peak(app, iters, sync):
    p = subprocess.run([app, "cudachurn", str(iters)] + (["sync"] if sync else []),
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, XSEG_CONF=""))
    for tok in p.stdout.split():
        if tok.startswith("live_peak="):
            return int(tok.split("=")[1])
    return None


def main():
    app = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        for iters, sync in ((300, False), (1000, False), (300, True)):
            path = os.path.join(d, "c%d%s.csv.gz" % (iters, "s" if sync else ""))
            r = tool("--iters", str(iters), *(["--sync"] if sync else []), path)
            check(r.returncode == 0, "%d iterations%s: exit 0" % (iters, " sync" if sync else ""))
            got = int(r.stdout.split("=")[1]) if r.stdout.startswith("live_peak=") else None
            want = app_peak(app, iters, sync)
            check(want is not None and got == want,
                  "live peak %s is preload_app's %s" % (got, want))
            lines = read_trace(path)
            try:  # raises on an id allocated while live or freed while dead
                facts = trace_facts(lines)
            except ValueError as e:
                facts = {"error": str(e)}
            check(facts.get("allocs") == iters and facts.get("frees") == iters and
                  facts.get("live_at_end") == 0,
                  "every id allocated once and freed once (%s)" % facts)
            streams = set(ev[3] for ev in map(parse_line, lines) if ev and ev[0] == "a")
            check(streams == ({0} if sync else {0, 3, 4}), "streams %s" % sorted(streams))
        r = tool("--iters", "0", os.path.join(d, "x"))
        check(r.returncode == 2, "--iters 0: usage error (exit %d)" % r.returncode)
        r = tool("--help")
        check(r.returncode == 0 and "cuda_churn" in r.stdout, "--help")
    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
