"""test_bench: bench_models.py's per-call records without a GPU: the wall
and CPU times, and in xseg mode what each call added to xseg's counters;
the throughput reads only the times."""
import unittest

import _common  # noqa: F401 (puts the package's folder on sys.path)
import bench_models as bm


class FakeCuda:
    def __init__(self):
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1


class FakeTorch:
    def __init__(self):
        self.cuda = FakeCuda()


class TimedTest(unittest.TestCase):
    def tearDown(self):
        bm._counters = None

    def test_counters_per_call(self):
        state = {k: 0 for k in bm.CALL_COUNTERS}
        state["xseg.syncs"] = 5
        bm._counters = lambda: dict(state)

        def call():
            state["xseg.moved_bytes"] += 2 << 20
            state["xseg.syncs"] += 1
            state["xseg.driver_calls.map"] += 3
            return "out"

        torch, calls = FakeTorch(), []
        out, dt = bm.timed(torch, call, calls)
        self.assertEqual(out, "out")
        self.assertGreaterEqual(dt, 0.0)
        self.assertEqual(torch.cuda.syncs, 2)
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][2], {"moved_bytes": 2 << 20, "syncs": 1, "map": 3,
                                       "create": 0, "unmap": 0})

    def test_no_counters_outside_xseg(self):
        calls = []
        bm.timed(FakeTorch(), lambda: None, calls)
        self.assertEqual(len(calls[0]), 2)

    def test_throughput_reads_times_only(self):
        passes = [[[2.0, 1.0, {"syncs": 9}], [4.0, 1.0, {}]],
                  [[1.0, 1.0, {"syncs": 0}], [5.0, 1.0, {}]],
                  [[3.0, 1.0, {}], [2.0, 1.0, {}]]]
        # the first pass warms up: best of the others, 1.0 and 2.0 s
        self.assertAlmostEqual(bm.best_of_calls(passes, [10, 20]), 30 / 3.0)


if __name__ == "__main__":
    unittest.main()
