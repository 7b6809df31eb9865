"""test_torch_calls: tools/gpu/torch_calls.py's parts that need no torch or
GPU: the ring's size sequence, the batch timing, the per-round pairing of
an xseg mode with the faster PyTorch mode, and the summary table."""
import io
import sys
import unittest
from pathlib import Path

import _common  # noqa: F401 (puts the package's folder on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))
import torch_calls as tc  # noqa: E402


def run(mode, rnd, **figs):
    return dict(mode=mode, round=rnd, **figs)


class RingTest(unittest.TestCase):
    def test_sizes_are_fixed_by_the_seed_and_in_range(self):
        a, b = tc.ring_sizes(7, 500), tc.ring_sizes(7, 500)
        self.assertEqual(a, b)
        self.assertNotEqual(a, tc.ring_sizes(8, 500))
        self.assertTrue(all(512 <= s <= 32 << 20 for s in a))
        # log-uniform: about as many below the geometric middle (128 KiB) as above
        below = sum(s < 128 << 10 for s in a)
        self.assertTrue(180 < below < 320, below)

    def test_batches_time_every_step_and_sync_around_each_batch(self):
        calls = {"step": 0, "sync": 0}

        def step():
            calls["step"] += 1

        def sync():
            calls["sync"] += 1
        med, low = tc.batches_ns(step, 10, 4, sync)
        self.assertEqual(calls, {"step": 40, "sync": 8})
        self.assertGreater(med, 0)
        self.assertLessEqual(low, med)


class TraceTest(unittest.TestCase):
    def test_the_trace_is_the_ring_as_run(self):
        out = io.StringIO()
        n = tc.ring_trace(out, 3, 2)
        lines = out.getvalue().splitlines()
        self.assertTrue(lines[0].startswith("# xseg-trace v1"))
        events = [line.split(",") for line in lines[1:]]
        self.assertEqual(len(events), n)
        allocs = [e for e in events if e[0] == "a"]
        self.assertEqual(len(allocs), 2 * tc.RING_STEPS)
        sizes = tc.ring_sizes(3, tc.RING_STEPS)
        self.assertEqual([int(e[2]) for e in allocs], sizes + sizes)  # two passes
        live = set()
        for e in events:  # every free names a live block; never more than the ring
            if e[0] == "a":
                live.add(e[1])
            else:
                live.remove(e[1])
            self.assertLessEqual(len(live), tc.RING_LIVE)
        self.assertEqual(len(live), tc.RING_LIVE)


class PairingTest(unittest.TestCase):
    RUNS = [run("native", 0, ring=100.0), run("expandable", 0, ring=90.0),
            run("xseg", 0, ring=99.0),
            # round 1: the machine twice as slow for every mode
            run("native", 1, ring=200.0), run("expandable", 1, ring=210.0),
            run("xseg", 1, ring=220.0),
            # round 2: no PyTorch mode ran: not paired
            run("xseg", 2, ring=50.0)]

    def test_each_round_against_its_own_faster_peer(self):
        rounds = tc.by_round(self.RUNS)["ring"]
        ratios = sorted(tc.paired_ratios(rounds, "xseg"))
        self.assertEqual(len(ratios), 2)
        self.assertAlmostEqual(ratios[0], 1.1)   # 220 / 200 (native the faster)
        self.assertAlmostEqual(ratios[1], 1.1)   # 99 / 90 (expandable the faster)

    def test_table_lists_every_figure_and_mode(self):
        md = tc.table(self.RUNS, ["native", "expandable", "xseg"])
        lines = md.splitlines()
        self.assertEqual(len(lines), 2 + len(tc.FIGURES))
        ring = next(line for line in lines if line.startswith("| ring |"))
        self.assertIn("150 (100-200)", ring)      # native: median (min-max) of 2 rounds
        self.assertIn("1.100 (1.100-1.100", ring)  # xseg paired
        self.assertIn("n=2", ring)
        pairs = next(line for line in lines if line.startswith("| pairs_512 |"))
        self.assertEqual(pairs.count("| - "), 4)  # no run measured it

    def test_the_peak_reserved_is_a_last_row_paired_with_the_smaller_peer(self):
        runs = [dict(r, peak_reserved_bytes=b) for r, b in zip(
            self.RUNS[:6], (1300e6, 890e6, 390e6, 1300e6, 900e6, 450e6))]
        md = tc.table(runs, ["native", "expandable", "xseg"])
        mem = md.splitlines()[-1]
        self.assertTrue(mem.startswith("| peak_reserved_mb |"), mem)
        self.assertIn("1300 (1300-1300)", mem)  # native, both rounds
        self.assertIn("0.469 (", mem)  # xseg: median of 390/890 and 450/900
        # no process gave it: no row
        self.assertNotIn("peak_reserved_mb", tc.table(self.RUNS, ["native", "xseg"]))

    def test_a_variant_is_one_more_xseg_mode_paired_like_the_others(self):
        args = tc.parse(["--out", "o", "--modes", "native", "xseg",
                         "--variant", "release_slack_max:0.2"])
        modes = tc.all_modes(args)
        self.assertEqual(modes, ["native", "xseg", "xseg[release_slack_max:0.2]"])
        runs = self.RUNS + [run(modes[2], 0, ring=45.0), run(modes[2], 1, ring=100.0)]
        ratios = sorted(tc.paired_ratios(tc.by_round(runs)["ring"], modes[2]))
        self.assertEqual([round(r, 3) for r in ratios], [0.5, 0.5])  # 45/90, 100/200
        head = tc.table(runs, modes).splitlines()[0]
        self.assertIn("xseg[release_slack_max:0.2] / faster peer", head)


if __name__ == "__main__":
    unittest.main()
