"""test_summary: the summary() table: shape, rows, and numbers that agree
with memory_stats(); size and count formatting."""
import unittest

import _common  # noqa: F401
import xseg
from xseg import _lib
from xseg._summary import format_count, format_size


class FormatTest(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(format_size(0), "     0 B  ")
        self.assertEqual(format_size(999), "   999 B  ")
        self.assertEqual(format_size(1536), "  1.50 KiB")
        self.assertEqual(format_size(3 << 30), "  3.00 GiB")
        self.assertEqual(format_size(1023 << 20), "  1.00 GiB")
        for n in (0, 5, 999, 1000, 1 << 20, 999 << 30, 5 << 40):
            self.assertEqual(len(format_size(n)), 10, n)

    def test_counts(self):
        self.assertEqual(format_count(7), "      7   ")
        self.assertEqual(format_count(1500), "   1.50 K ")
        for n in (0, 999, 1000, 10 ** 6, 10 ** 9, 10 ** 12):
            self.assertEqual(len(format_count(n)), 10, n)


class SummaryTest(unittest.TestCase):
    def test_table(self):
        lib = _lib.load()
        p = lib.xseg_torch_alloc(5 << 20, 0, None)
        self.assertTrue(p)
        try:
            text = xseg.summary(0)
            stats = xseg.memory_stats(0)
        finally:
            lib.xseg_torch_free(p, 0, 0, None)
        lines = text.rstrip("\n").split("\n")
        self.assertTrue(all(len(line) == 77 for line in lines), text)
        self.assertIn("xseg memory summary, device 0 (host backend)", text)
        for row in ("Allocated memory", "Requested memory", "Reserved (mapped)",
                    "Cached (mapped, free)", "Active allocations", "Physical handles"):
            self.assertIn(f"| {row}", text)
        alloc_row = next(line for line in lines if line.startswith("| Allocated memory"))
        self.assertIn(format_size(stats["allocated_bytes.all.current"]).strip(), alloc_row)
        self.assertIn("Device memory: 4.00 GiB", text)
        self.assertIn("Cap: none", text)


if __name__ == "__main__":
    unittest.main()
