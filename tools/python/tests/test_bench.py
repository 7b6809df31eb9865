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


def result(mode, peak, throughput, digest="h"):
    return {"workload": "gpt2", "mode": mode, "peak_device_bytes": peak,
            "throughput": throughput, "output_hash": digest}


class VariantTest(unittest.TestCase):
    def test_names(self):
        self.assertEqual(bm.variant_name("handle_size:2MB"), "xseg[handle_size:2MB]")
        self.assertEqual(bm.split_mode("xseg[handle_size:2MB,placement:pages]", None),
                         ("xseg", "handle_size:2MB,placement:pages"))
        self.assertEqual(bm.split_mode("native", "x:1"), ("native", "x:1"))
        self.assertEqual(bm.split_mode("xseg", "x:1"), ("xseg", "x:1"))

    def test_parse(self):
        args = bm.parse(["--variant", "a:1", "--variant", "b:2"])
        self.assertEqual(args.variant, ["a:1", "b:2"])
        self.assertEqual(bm.parse([]).variant, [])

    def test_verdict_and_rows(self):
        v = "xseg[handle_size:2MB]"
        results = {("gpt2", "native"): result("native", 100, 1000.0),
                   ("gpt2", "expandable"): result("expandable", 90, 990.0),
                   ("gpt2", "xseg"): result("xseg", 85, 950.0),
                   ("gpt2", v): result(v, 95, 1010.0)}
        verdict = bm.compare(results)["gpt2"]
        self.assertTrue(verdict["outputs_identical"])
        self.assertFalse(verdict["xseg_throughput_within_2pct"])
        self.assertEqual(verdict["variants"][v]["peak_below_expandable"], False)
        self.assertAlmostEqual(verdict["variants"][v]["throughput_vs_native"], 1.01)
        modes = [m for m, _, _ in bm.rows(results, "gpt2")]
        self.assertEqual(modes, ["native", "expandable", "xseg", v])
        for r in results.values():
            r.update(peak_drop_polled_bytes=r["peak_device_bytes"], peak_reserved_bytes=1,
                     peak_allocated_bytes=1, throughput_unit="training tokens/s")
        lines = bm.table(results, bm.compare(results)).splitlines()
        # the variant's full name, then its columns where the others have theirs
        self.assertEqual(lines[5].split()[1], v)
        self.assertEqual(lines[2].index("0.000"), lines[5].index("0.000"))
        results[("gpt2", v)]["output_hash"] = "other"
        self.assertFalse(bm.compare(results)["gpt2"]["outputs_identical"])


if __name__ == "__main__":
    unittest.main()
