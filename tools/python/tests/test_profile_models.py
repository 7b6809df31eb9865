"""test_profile_models: tools/gpu/profile_models.py's reduction of a
profiler trace, without torch or a GPU: GPU work summed and its union
(overlaps counted once), self times of nested CPU ops per thread, the
allocation ops and API calls picked out, and the medians over rounds."""
import sys
import unittest
from pathlib import Path

import _common  # noqa: F401 (puts the package's folder on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))
import profile_models as pm  # noqa: E402


def ev(cat, name, ts, dur, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}


TRACE = [
    # thread 1: an op that allocates inside a larger op
    ev("cpu_op", "aten::linear", 0, 100),
    ev("cpu_op", "aten::empty_strided", 10, 30),
    ev("cpu_op", "aten::addmm", 50, 40),
    ev("cpu_op", "aten::empty", 55, 5),
    # thread 2: one empty op alone
    ev("cpu_op", "aten::empty", 20, 7, tid=2),
    ev("cuda_runtime", "cudaLaunchKernel", 60, 4),
    ev("cuda_driver", "cuMemMap", 12, 3),
    ev("cuda_runtime", "cudaSomethingElse", 70, 2),
    # GPU: two kernels that overlap, one memcpy after a gap
    ev("kernel", "gemm", 100, 50),
    ev("kernel", "gemm", 120, 50),
    ev("gpu_memcpy", "Memcpy HtoD", 300, 10),
    {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1},  # no duration: ignored
]


class Reduce(unittest.TestCase):
    def test_gpu_work_and_busy(self):
        s = pm.summarize_trace(TRACE)
        self.assertEqual(s["gpu_us"], 110.0)
        self.assertEqual(s["gpu_busy_us"], 80.0)  # [100,170) and [300,310)
        self.assertEqual(s["span_us"], 310.0)  # 0 .. 310
        self.assertEqual(s["kernels"]["gemm"], [2, 100.0])
        self.assertEqual(s["kernels"]["[gpu_memcpy]"], [1, 10.0])

    def test_self_times_of_alloc_ops(self):
        s = pm.summarize_trace(TRACE)
        self.assertEqual(s["alloc_ops"]["aten::empty_strided"], [1, 30.0])
        self.assertEqual(s["alloc_ops"]["aten::empty"], [2, 12.0])
        self.assertNotIn("aten::linear", s["alloc_ops"])
        self.assertEqual(s["cpu_ops"], 5)
        selfs = {n: t for n, _, t in pm.self_times(
            [(1, 0, 100, "outer"), (1, 10, 30, "a"), (1, 50, 40, "b"), (1, 55, 5, "c")])}
        self.assertEqual(selfs, {"outer": 30.0, "a": 30.0, "b": 35.0, "c": 5.0})

    def test_api_calls(self):
        s = pm.summarize_trace(TRACE)
        self.assertEqual(s["api"]["cudaLaunchKernel"], [1, 4.0])
        self.assertEqual(s["api"]["cuMemMap"], [1, 3.0])
        self.assertEqual(s["api"]["other"], [1, 2.0])

    def test_union(self):
        self.assertEqual(pm.union_us([(0, 10), (5, 8), (20, 30), (25, 40)]), 30.0)
        self.assertEqual(pm.union_us([]), 0.0)


class Aggregate(unittest.TestCase):
    def run_of(self, mode, rnd, gpu_us, thr):
        prof = pm.summarize_trace(TRACE)
        prof["gpu_us"] = gpu_us
        return {"workload": "llama", "mode": mode, "round": rnd, "throughput": thr,
                "unit": "tok/s", "profiled_wall_s": 1.0, "profile": prof, "output_hash": "h"}

    def test_medians_and_table(self):
        runs = [self.run_of("xseg", r, g, t) for r, g, t in
                ((0, 100.0, 10.0), (1, 300.0, 12.0), (2, 200.0, 20.0))]
        runs.append({"mode": "native", "error": "no result"})
        rows = pm.aggregate(runs)
        self.assertEqual(len(rows), 1)
        row = rows[0]
        self.assertEqual(row["rounds"], 3)
        self.assertEqual(row["throughput"], 12.0)
        self.assertAlmostEqual(row["throughput_spread"], 1.0)
        self.assertAlmostEqual(row["gpu_ms"], 0.2)
        self.assertEqual(row["alloc_calls"], 3)
        self.assertEqual(row["mem_api_calls"], 1)  # cuMemMap
        self.assertEqual(row["hashes"], ["h"])
        md = pm.markdown(rows)
        self.assertIn("| llama | xseg | 3 | 12.0 (100%) |", md)
        self.assertIn("| gemm |", md)


if __name__ == "__main__":
    unittest.main()
