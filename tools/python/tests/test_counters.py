"""test_counters: memory_stats() with thread caches across thread exits
(issue 19, defects 2 and 3): a thread that re-serves a cached block for
another request size of its class and exits leaves requested_bytes exact,
no `*.freed` goes negative, and the counters that only grow (calls,
`*.allocated`, `*.freed`) never decrease when threads exit."""
import threading
import unittest

import _common  # noqa: F401
import xseg
from xseg import _lib

MONOTONE_SUFFIXES = (".allocated", ".freed", ".total")
MONOTONE_KEYS = ("xseg.alloc_calls", "xseg.free_calls", "num_alloc_retries", "num_ooms",
                 "num_device_alloc", "num_device_free")


def monotone_keys(stats):
    return [k for k in stats
            if k in MONOTONE_KEYS or (k.endswith(MONOTONE_SUFFIXES)
                                      and not k.startswith("xseg.cached_bytes."))]


class CountersTest(unittest.TestCase):
    def setUp(self):
        self.lib = _lib.load()

    def check_sane(self, s, when):
        for k, v in s.items():
            self.assertGreaterEqual(v, 0, f"{when}: {k} = {v}")
            self.assertLess(v, 1 << 60, f"{when}: {k} = {v} (wrapped)")
        for fam in ("allocated_bytes", "requested_bytes", "allocation", "active"):
            self.assertGreaterEqual(s[f"{fam}.all.peak"], s[f"{fam}.all.current"], when)

    def check_monotone(self, a, b, when):
        for k in monotone_keys(a):
            self.assertGreaterEqual(b[k], a[k], f"{when}: {k} went from {a[k]} to {b[k]}")

    def worker(self, first, second, rounds, out):
        """alloc `first`, free it (into this thread's cache), `rounds` more
        pairs, then alloc `second` (same size class) for the main thread."""
        for _ in range(rounds + 1):
            p = self.lib.xseg_torch_alloc(first, 0, None)
            out["ok"] = bool(p)
            self.lib.xseg_torch_free(p, first, 0, None)
        out["p"] = self.lib.xseg_torch_alloc(second, 0, None)

    def run_worker(self, first, second, rounds=0):
        out = {}
        t = threading.Thread(target=self.worker, args=(first, second, rounds, out))
        t.start()
        t.join()
        self.assertTrue(out.get("ok") and out.get("p"), _lib.last_error())
        return out["p"]

    def test_requested_exact_and_freed_nonnegative_after_thread_exit(self):
        base = xseg.memory_stats(0)
        for first, second in ((1000, 600), (600, 1000)):
            p = self.run_worker(first, second)
            s = xseg.memory_stats(0)
            self.check_sane(s, f"{first}->{second}, thread exited")
            self.assertEqual(s["requested_bytes.all.current"]
                             - base["requested_bytes.all.current"], second)
            self.lib.xseg_torch_free(p, second, 0, None)
            s = xseg.memory_stats(0)
            self.check_sane(s, f"{first}->{second}, freed")
            self.assertEqual(s["requested_bytes.all.current"],
                             base["requested_bytes.all.current"])
            self.assertEqual(s["allocation.all.current"], base["allocation.all.current"])

    def test_counters_monotone_across_thread_exits(self):
        before = xseg.memory_stats(0)
        for i in range(3):
            p = self.run_worker(3000 + 100 * i, 2900, rounds=299)
            after = xseg.memory_stats(0)
            self.check_sane(after, f"thread {i} exited")
            self.check_monotone(before, after, f"thread {i} exit")
            self.assertGreaterEqual(after["xseg.alloc_calls"] - before["xseg.alloc_calls"], 301)
            self.assertGreaterEqual(after["xseg.free_calls"] - before["xseg.free_calls"], 300)
            self.assertGreaterEqual(after["allocation.all.allocated"]
                                    - before["allocation.all.allocated"], 301)
            self.lib.xseg_torch_free(p, 2900, 0, None)
            before = xseg.memory_stats(0)
            self.check_monotone(after, before, f"free after thread {i}")


if __name__ == "__main__":
    unittest.main()
