"""test_struct: the ctypes mirror of struct xseg_stats matches the library:
size, version, field order (cross-checked against xseg_stats_json)."""
import ctypes
import unittest

import _common  # noqa: F401 (sets up the package path and the host backend)
import xseg
from xseg import _lib, _stats
from xseg._stats_struct import COUNTERS, OPS, SCALARS, STATS_VERSION, XsegStats


class StructTest(unittest.TestCase):
    def test_library_fills_exactly_our_size(self):
        big = ctypes.create_string_buffer(ctypes.sizeof(XsegStats) + 256)
        s = XsegStats.from_buffer(big)
        s.size = len(big)
        st = _lib.load().xseg_get_stats(_stats.allocator(0), ctypes.byref(s))
        self.assertEqual(st, 0, _lib.last_error())
        self.assertEqual(s.size, ctypes.sizeof(XsegStats),
                         "sizeof(struct xseg_stats) in C differs from the ctypes mirror")
        self.assertEqual(s.version, STATS_VERSION)

    def test_op_names_match(self):
        lib = _lib.load()
        for i, name in enumerate(OPS):
            self.assertEqual(lib.xseg_op_name(i).decode(), name)
        self.assertEqual(lib.xseg_op_name(len(OPS)).decode(), "unknown")

    def test_fields_match_the_json(self):
        p = _lib.load().xseg_torch_alloc(3 << 20, 0, None)
        self.assertTrue(p, _lib.last_error())
        try:
            s = xseg.raw_stats(0)
            j = xseg.stats_dict(0)
        finally:
            _lib.load().xseg_torch_free(p, 0, 0, None)
        self.assertEqual(j["version"], s.version)
        self.assertEqual(j["device"], s.device)
        for name in COUNTERS:
            c = getattr(s, name)
            if name == "cached_bytes":  # its peak is refreshed by each read
                self.assertEqual(j[name]["current"], c.current)
                continue
            self.assertEqual(j[name], {"current": c.current, "peak": c.peak, "total": c.total},
                             name)
        for i, op in enumerate(OPS):
            self.assertEqual(j["driver_calls"][op], s.driver_calls[i], op)
        for name in SCALARS:
            if name == "largest_free_block":
                continue
            self.assertEqual(j[name], getattr(s, name), name)
        self.assertGreaterEqual(s.allocated_bytes.current, 3 << 20)


if __name__ == "__main__":
    unittest.main()
