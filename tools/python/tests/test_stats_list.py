"""test_stats_list: the ctypes mirror of struct xseg_stats (_stats_struct.py)
has exactly the fields of the one list, lib/stats_fields.h, in its order and
with its sizes (the C side checks the list against the struct at compile
time).  The list is read from $XSEG_STATS_FIELDS_H (a changed copy) or from
the source tree; skipped when neither is there (an installed package)."""
import ctypes
import os
import re
import unittest
from pathlib import Path

import _common  # noqa: F401 (sets up the package path)
from xseg._stats_struct import COUNTERS, OPS, SCALARS, XsegCounter, XsegStats

SOURCE_LIST = Path(__file__).resolve().parents[3] / "lib" / "stats_fields.h"

# kind -> (ctypes type, size in bytes)
KINDS = {
    "U32": (ctypes.c_uint32, 4),
    "I32": (ctypes.c_int32, 4),
    "COUNTER": (XsegCounter, 24),
    "OPS": (ctypes.c_uint64 * len(OPS), 8 * len(OPS)),
    "GAUGE": (ctypes.c_uint64, 8),
    "MONO": (ctypes.c_uint64, 8),
}


def listed_fields():
    """(kind, name) of every X( entry of the list, in order."""
    path = Path(os.environ.get("XSEG_STATS_FIELDS_H") or SOURCE_LIST)
    if not path.is_file():
        raise unittest.SkipTest(f"no {path} (not a source tree)")
    text = path.read_text()
    return re.findall(r"^X\((\w+), (\w+),", text, re.M)


class StatsListTest(unittest.TestCase):
    def test_mirror_has_the_listed_fields(self):
        fields = listed_fields()
        self.assertGreater(len(fields), 20)
        mirror = [(name, ctype) for name, ctype in XsegStats._fields_]
        self.assertEqual([n for n, _ in mirror], [n for _, n in fields],
                         "_stats_struct.XsegStats and lib/stats_fields.h differ")
        offset = 0
        for (kind, name), (_, ctype) in zip(fields, mirror):
            want_type, size = KINDS[kind]
            self.assertEqual(ctypes.sizeof(ctype), size, f"{name} ({kind})")
            if kind == "OPS":
                self.assertEqual(ctype._type_, ctypes.c_uint64, name)
                self.assertEqual(ctype._length_, want_type._length_, name)
            else:
                self.assertIs(ctype, want_type, f"{name} ({kind})")
            self.assertEqual(getattr(XsegStats, name).offset, offset, name)
            offset += size
        self.assertEqual(ctypes.sizeof(XsegStats), offset)

    def test_counters_and_scalars_follow_the_list(self):
        fields = listed_fields()
        self.assertEqual(COUNTERS, tuple(n for k, n in fields if k == "COUNTER"))
        self.assertEqual(SCALARS, tuple(n for k, n in fields if k in ("GAUGE", "MONO")))


if __name__ == "__main__":
    unittest.main()
