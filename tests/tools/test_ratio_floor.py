#!/usr/bin/env python3
"""tests/tools/test_ratio_floor.py: tools/ratio-floor on traces small enough
to work out by hand (2 MiB pages; each expectation is derived in the
comments), and its errors."""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "ratio-floor")
M = 1 << 20


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


class RatioFloor(unittest.TestCase):
    def trace(self, lines, gz=False):
        fd, path = tempfile.mkstemp(suffix=".csv.gz" if gz else ".csv")
        os.close(fd)
        self.addCleanup(os.unlink, path)
        text = "# xseg-trace v1\n" + "\n".join(lines) + "\n"
        with (gzip.open(path, "wt") if gz else open(path, "w")) as f:
            f.write(text)
        return path

    def floor(self, lines, *extra, gz=False):
        r = run("--json", *extra, self.trace(lines, gz))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_gap_edges_best_fit_and_rounding(self):
        d = self.floor([
            "a,1,%d,0" % M,        # [0, 1M): page 0 mapped (maps 1)
            "a,2,%d,0" % (2 * M),  # [1M, 3M): page 1 (maps 2)
            "a,3,%d,0" % M,        # [3M, 4M): page 1 again; live 4M
            "f,2",                 # pages 0 and 1 still touched: no unmap; gap [1M, 3M)
            "a,4,%d,0" % (3 * M),  # no gap holds 3M: [4M, 7M), pages 2 and 3 (maps 4);
                                   # live 5M, the peak, with 4 pages mapped; the gap's
                                   # 2M sit on mapped pages 0 and 1
            "f,4",                 # pages 2 and 3 go (unmaps 2); the top is 4M again
            "a,5,%d,0" % (2 * M),  # best fit: the gap [1M, 3M), already mapped
            "a,6,1,0",             # rounded to 512 at the top: page 2 (maps 5)
        ], gz=True)
        self.assertEqual(d["peak_live_bytes"], 5 * M)
        self.assertEqual(d["peak_mapped_bytes"], 8 * M)
        self.assertEqual(d["ratio"], 1.6)
        self.assertEqual((d["maps"], d["unmaps"]), (5, 2))
        self.assertEqual((d["edge_bytes_at_live_peak"], d["edge_gaps_at_live_peak"]), (2 * M, 1))

    def test_smallest_gap_that_fits(self):
        d = self.floor([
            "a,1,%d,0" % (3 * M),  # [0, 3M): pages 0, 1 (maps 2)
            "a,2,%d,0" % (2 * M),  # [3M, 5M): pages 1, 2 (maps 3)
            "a,3,%d,0" % (2 * M),  # [5M, 7M): pages 2, 3 (maps 4)
            "a,4,%d,0" % M,        # [7M, 8M): page 3
            "f,1",                 # gap [0, 3M): page 0 goes (unmaps 1), 1 stays
            "f,3",                 # gap [5M, 7M): pages 2 and 3 stay (a2, a4)
            "a,5,%d,0" % (2 * M),  # the tighter gap, [5M, 7M), all mapped: maps
                                   # stay 4 (the looser one would map page 0 again)
        ])
        self.assertEqual((d["maps"], d["unmaps"]), (4, 1))
        self.assertEqual((d["peak_live_bytes"], d["peak_mapped_bytes"]), (8 * M, 8 * M))

    def test_page_and_round_options(self):
        # 4 KiB pages, requests of 100 bytes rounded to 4096: two pages.
        d = self.floor(["a,1,100,0", "a,2,100,0"], "--page", "4096", "--round", "4096")
        self.assertEqual((d["peak_mapped_bytes"], d["maps"]), (8192, 2))
        self.assertAlmostEqual(d["ratio"], 8192 / 200, places=4)

    def test_errors(self):
        r = run(self.trace(["a,1,10,0", "f,9"]))
        self.assertEqual(r.returncode, 1)
        self.assertIn("line 3: free of id 9", r.stderr)
        r = run(self.trace(["a,1,10,0", "a,1,20,0"]))
        self.assertEqual(r.returncode, 1)
        self.assertIn("line 3: id 1 allocated while live", r.stderr)
        r = run(self.trace(["a,1,10,0", "x,1"]))
        self.assertEqual(r.returncode, 1)
        self.assertIn("line 3: not an xseg-trace v1 line", r.stderr)
        r = run("/nonexistent/trace.csv")
        self.assertEqual(r.returncode, 1)
        self.assertIn("/nonexistent/trace.csv", r.stderr)
        self.assertEqual(run("--round", "0", self.trace(["a,1,10,0"])).returncode, 2)
        self.assertEqual(run().returncode, 2)
        h = run("--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn("usage: ratio-floor", h.stdout)


if __name__ == "__main__":
    unittest.main()
