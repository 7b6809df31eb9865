#!/usr/bin/env python3
"""tests/tools/test_peak_report.py: xseg-replay --peak-snapshot and
tools/peak-report on a trace small enough to work out by hand (2 MiB pages,
host backend): the line is taken at the mapped peak, with the live bytes of
that moment, and the report splits mapped over live into parts that add up.
usage: test_peak_report.py XSEG_REPLAY"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "peak-report")
REPLAY = None
M = 1 << 20

# 32 MiB freed, 1 MiB live after it, then 40 MiB, then everything freed.
MOVING = ["a,1,%d,1" % (32 * M), "a,2,%d,1" % M, "f,1", "a,3,%d,1" % (40 * M), "f,3", "f,2"]


class PeakReport(unittest.TestCase):
    def tmp(self, suffix, text=""):
        fd, path = tempfile.mkstemp(suffix=suffix)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.addCleanup(os.unlink, path)
        return path

    def peak_line(self, conf):
        trace = self.tmp(".csv", "# xseg-trace v1\n" + "\n".join(MOVING) + "\n")
        out = self.tmp(".jsonl")
        r = subprocess.run([REPLAY, "--conf", conf, "--peak-snapshot", out, trace],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            lines = f.read().splitlines()
        self.assertEqual(len(lines), 1, lines)
        return out, json.loads(lines[0]), trace

    def report(self, *paths):
        return subprocess.run([sys.executable, TOOL, *paths], capture_output=True, text=True)

    def test_unlimited_keeps_the_freed_block(self):
        # No release: a1 maps 32 MiB (16 pages), a2 its own page (34), a3 40
        # MiB more (74): three new highs, the last with 41 MiB live and the
        # freed 32 MiB cached and mapped.
        out, d, trace = self.peak_line("backend:host,release_threshold:unlimited")
        self.assertEqual(d["trace"], trace)
        self.assertEqual(d["mapped"], 74 * M)
        self.assertEqual(d["mapped_peak_at_exit"], 74 * M)
        self.assertEqual(d["app_live"], 41 * M)
        self.assertEqual(d["highs"], 3)
        self.assertEqual(d["snapshot"]["mapped"], 74 * M)
        r = self.report(out)
        self.assertEqual(r.returncode, 0, r.stderr)
        row = [c.strip() for c in r.stdout.splitlines()[2].strip("|").split("|")]
        what, at, mapped, live, ratio = row[0], row[1], float(row[2]), float(row[3]), float(row[4])
        parts = sum(float(x) for x in row[5:11])
        self.assertEqual(what, os.path.basename(trace))
        self.assertEqual(at, "3")  # the third allocation made the peak
        self.assertEqual((mapped, live), (74.0, 41.0))
        self.assertAlmostEqual(ratio, 74 / 41, places=3)
        self.assertAlmostEqual(parts, mapped - live, places=1)  # the parts add up
        self.assertEqual(float(row[11].split(",")[0]), 32.0)    # the freed block, whole

    def test_default_moves_instead(self):
        # The release threshold (the live peak, 41 MiB): the growth moves the
        # freed block's pages under the new block: 42 MiB at the peak.
        out, d, _ = self.peak_line("backend:host,reclaim:sync")
        self.assertEqual(d["mapped"], 42 * M)
        self.assertEqual(d["app_live"], 41 * M)
        r = self.report(out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| 42.0 | 41.0 | 1.0244 |", r.stdout)

    def test_errors(self):
        self.assertEqual(self.report().returncode, 2)
        self.assertEqual(self.report("--help").returncode, 0)
        bad = self.report(self.tmp(".jsonl", "{\"not\": 1}\n"))
        self.assertEqual(bad.returncode, 1)
        self.assertIn("peak-report:", bad.stderr)
        r = subprocess.run([REPLAY, "--conf", "backend:host", "--peak-snapshot",
                            "/nonexistent/dir/p.jsonl", self.tmp(".csv", "# xseg-trace v1\n"
                                                                 "a,1,1024,0\n")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("--peak-snapshot: cannot open /nonexistent/dir/p.jsonl", r.stderr)


if __name__ == "__main__":
    REPLAY = sys.argv.pop(1)
    unittest.main()
