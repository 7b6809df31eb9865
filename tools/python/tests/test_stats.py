"""test_stats: memory_stats() on the host backend through ctypes: the
torch.cuda.memory_stats() keys and their numbers across allocations, frees,
empty_cache and a peak reset; the xseg.* keys; stats_json and prometheus."""
import ctypes
import unittest

import _common  # noqa: F401
import xseg
from xseg import _lib
from xseg._stats_struct import COUNTERS, OPS, SCALARS

TORCH_KEYS = {f"{fam}.all.{part}"
              for fam in ("allocated_bytes", "requested_bytes", "reserved_bytes", "allocation",
                          "active", "active_bytes")
              for part in ("current", "peak", "allocated", "freed")}
TORCH_KEYS |= {"num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free"}
SIZES = (1000, 100_000, 3 << 20, 17 << 20)


def delta(a, b, key):
    return b[key] - a[key]


class StatsTest(unittest.TestCase):
    def setUp(self):
        self.lib = _lib.load()

    def alloc(self, sizes, stream=None):
        ptrs = [self.lib.xseg_torch_alloc(n, 0, stream) for n in sizes]
        self.assertTrue(all(ptrs), _lib.last_error())
        return ptrs

    def free(self, ptrs):
        for p in ptrs:
            self.lib.xseg_torch_free(p, 0, 0, None)
            self.assertEqual(_lib.last_error(), "")

    def test_keys(self):
        s = xseg.memory_stats(0)
        torch_part = {k for k in s if not k.startswith("xseg.")}
        self.assertEqual(torch_part, TORCH_KEYS)
        own = {k for k in s if k.startswith("xseg.")}
        self.assertEqual(len(own), 3 * len(COUNTERS) + len(OPS) + len(SCALARS))
        self.assertIn("xseg.driver_calls.map", own)
        self.assertIn("xseg.cached_bytes.current", own)
        self.assertEqual(list(s), sorted(s))
        self.assertTrue(all(isinstance(v, int) and v >= 0 for v in s.values()))

    def test_numbers_follow_allocations(self):
        a = xseg.memory_stats(0)
        ptrs = self.alloc(SIZES)
        b = xseg.memory_stats(0)
        self.assertEqual(delta(a, b, "requested_bytes.all.current"), sum(SIZES))
        self.assertEqual(delta(a, b, "requested_bytes.all.allocated"), sum(SIZES))
        self.assertEqual(delta(a, b, "allocation.all.current"), len(SIZES))
        self.assertEqual(delta(a, b, "active.all.current"), len(SIZES))
        self.assertGreaterEqual(delta(a, b, "allocated_bytes.all.current"), sum(SIZES))
        self.assertEqual(b["allocated_bytes.all.current"], b["active_bytes.all.current"])
        self.assertGreaterEqual(b["reserved_bytes.all.current"], b["allocated_bytes.all.current"])
        self.assertGreaterEqual(b["allocated_bytes.all.peak"], b["allocated_bytes.all.current"])
        self.assertEqual(b["num_device_alloc"], b["xseg.driver_calls.map"])
        self.assertEqual(b["reserved_bytes.all.current"], b["xseg.mapped_bytes.current"])
        self.assertEqual(b["xseg.alloc_calls"] - a["xseg.alloc_calls"], len(SIZES))
        self.free(ptrs)
        c = xseg.memory_stats(0)
        self.assertEqual(c["requested_bytes.all.current"], a["requested_bytes.all.current"])
        self.assertEqual(c["allocation.all.current"], a["allocation.all.current"])
        self.assertEqual(delta(b, c, "allocated_bytes.all.freed"),
                         delta(a, b, "allocated_bytes.all.allocated"))
        self.assertGreaterEqual(c["allocated_bytes.all.peak"], b["allocated_bytes.all.current"])
        self.assertEqual(c["xseg.free_calls"] - b["xseg.free_calls"], len(SIZES))

    def test_empty_cache_returns_reserved_memory(self):
        self.free(self.alloc(SIZES))
        before = xseg.memory_stats(0)
        self.assertGreater(before["xseg.cached_bytes.current"], 0)
        xseg.empty_cache()
        after = xseg.memory_stats(0)
        self.assertEqual(after["reserved_bytes.all.current"], after["allocated_bytes.all.current"])
        self.assertEqual(after["xseg.cached_bytes.current"], 0)
        self.assertEqual(after["xseg.trims"], before["xseg.trims"] + 1)
        self.assertGreater(after["num_device_free"], before["num_device_free"])
        self.assertEqual(after["reserved_bytes.all.freed"],
                         after["reserved_bytes.all.allocated"]
                         - after["reserved_bytes.all.current"])

    def test_reset_peak(self):
        self.free(self.alloc([32 << 20]))
        self.assertGreater(xseg.memory_stats(0)["allocated_bytes.all.peak"],
                           xseg.memory_stats(0)["allocated_bytes.all.current"])
        xseg.reset_peak_stats(0)
        s = xseg.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.peak"], s["allocated_bytes.all.current"])
        self.assertEqual(s["reserved_bytes.all.peak"], s["reserved_bytes.all.current"])

    def test_trim_gives_cached_memory_back(self):
        # The process-wide allocator runs reclaim:sync on the host backend:
        # trim(wait=False) is trim there; both return the bytes given back.
        ptrs = self.alloc([24 << 20, 40 << 20])
        self.free(ptrs)
        before = xseg.memory_stats(0)["reserved_bytes.all.current"]
        self.assertGreaterEqual(before, 64 << 20)
        got = xseg.trim(0, keep=0, wait=False)
        self.assertEqual(got, before)
        self.assertEqual(xseg.memory_stats(0)["reserved_bytes.all.current"], 0)
        self.free(self.alloc([8 << 20]))
        self.assertEqual(xseg.trim(0), 8 << 20)
        self.assertEqual(xseg.trim(0), 0)

    def test_expected_peak_keeps_the_cache_up_to_it(self):
        # mapped_after_cross_stream of tests/test_policy.c through the
        # process-wide allocator: 32 MiB freed on one stream, then 40 MiB on
        # another; with the hint the 32 MiB stay cached, without they move.
        def mapped_after(hint):
            xseg.trim(0)
            xseg.reset_peak_stats(0)
            xseg.set_expected_peak(hint, 0)
            self.free(self.alloc([32 << 20], stream=1))
            (b,) = self.alloc([40 << 20], stream=2)
            got = xseg.memory_stats(0)["reserved_bytes.all.current"]
            self.free([b])
            return got
        try:
            self.assertEqual(mapped_after(1 << 30), 72 << 20)
            self.assertEqual(mapped_after(0), 40 << 20)
        finally:
            xseg.set_expected_peak(0, 0)
            xseg.trim(0)
        with self.assertRaises(ValueError):
            xseg.set_expected_peak(-1, 0)

    def test_record_stream_counts_a_deferred_free(self):
        (p,) = self.alloc([1 << 20], stream=1)
        a = xseg.memory_stats(0)
        self.lib.xseg_torch_record_stream(p, 2)
        self.assertEqual(_lib.last_error(), "")
        self.free([p])
        b = xseg.memory_stats(0)
        self.assertEqual(delta(a, b, "xseg.deferred_frees"), 1)
        self.assertEqual(delta(a, b, "allocation.all.current"), -1)

    def test_device_forms(self):
        self.assertEqual(xseg.memory_stats("cuda:0")["xseg.device_total"], 4 << 30)
        self.assertEqual(xseg.memory_stats(None)["xseg.device_total"], 4 << 30)
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.memory_stats(3)
        self.assertIn("device 3", str(cm.exception))

    def test_json_and_prometheus(self):
        j = xseg.stats_dict(0)
        self.assertEqual(j["backend"], "host")
        self.assertEqual(j["device_total"], 4 << 30)
        text = xseg.prometheus(0)
        self.assertIn('device="0"', text)
        self.assertIn("# TYPE", text)
        self.assertEqual(xseg.backend(0), "host")


    def test_graph_pools(self):
        class PoolId(ctypes.Structure):
            _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]
        hooks = {"xseg_torch_begin_pool": [ctypes.c_int, PoolId, ctypes.c_void_p],
                 "xseg_torch_end_pool": [ctypes.c_int, PoolId],
                 "xseg_torch_release_pool": [ctypes.c_int, PoolId]}
        for name, args in hooks.items():
            getattr(self.lib, name).argtypes = args
            getattr(self.lib, name).restype = None
        pid = PoolId(77, 1)
        self.assertEqual(xseg.graph_pools(0)["pools"], 0)
        self.lib.xseg_torch_begin_pool(0, pid, None)
        p = self.lib.xseg_torch_alloc(5 << 20, 0, None)
        self.assertTrue(p, _lib.last_error())
        info = xseg.graph_pools(0)
        self.assertEqual((info["pools"], info["in_use"], info["live_blocks"], info["live_bytes"]),
                         (1, 1, 1, 5 << 20))
        self.assertGreaterEqual(info["mapped_bytes"], 5 << 20)
        self.lib.xseg_torch_end_pool(0, pid)
        self.lib.xseg_torch_free(p, 0, 0, None)
        self.lib.xseg_torch_release_pool(0, pid)
        info = xseg.graph_pools(None)
        self.assertEqual((info["pools"], info["in_use"], info["live_blocks"]), (1, 0, 0))
        xseg.empty_cache()
        self.assertEqual(xseg.graph_pools(0), {k: 0 for k in info})
        with self.assertRaises(xseg.XsegError):
            xseg.graph_pools(64)


class MonitoringJsonTest(unittest.TestCase):
    def test_history_and_snapshot(self):
        code = ("import json, xseg\n"
                "from xseg import _lib\n"
                "lib = _lib.load()\n"
                "p = lib.xseg_torch_alloc(3 << 20, 0, None)\n"
                "lib.xseg_torch_free(p, 0, 0, None)\n"
                "h = json.loads(xseg.history_json(0))\n"
                "print([e['kind'] for e in h['events'] if e['kind'] in ('alloc', 'free')])\n"
                "s = json.loads(xseg.snapshot_json(0))\n"
                "print(sorted(s)[:3])\n")
        r = _common.run_py(code, env={"XSEG_CONF": _common.HOST_CONF + ",history:100"})
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "['alloc', 'free']")
        self.assertTrue(lines[1].startswith("["), r.stdout)


if __name__ == "__main__":
    unittest.main()
