"""test_oom: xseg.oom.set_oom_handler on the host backend: a handler that
frees memory gets the allocation retried, one that declines (or raises)
leaves the failure, removal."""
import io
import unittest
from contextlib import redirect_stderr

import _common  # noqa: F401
from xseg import _lib, oom

GiB = 1 << 30


class OomHandler(unittest.TestCase):
    def setUp(self):
        self.lib = _lib.load()
        self.held = []

    def tearDown(self):
        oom.set_oom_handler(None, 0)
        for p in self.held:
            self.lib.xseg_torch_free(p, 0, 0, None)
        self.lib.xseg_torch_reset()

    def alloc(self, n):
        return self.lib.xseg_torch_alloc(n, 0, None)

    def test_handler_frees_and_retry_succeeds(self):
        big = self.alloc(3 * GiB)  # host_capacity is 4 GB
        self.assertTrue(big, _lib.last_error())
        seen = []

        def evict(requested):
            seen.append(requested)
            self.lib.xseg_torch_free(big, 0, 0, None)
            self.lib.xseg_torch_reset()
            return True

        oom.set_oom_handler(evict, 0)
        self.assertTrue(oom.oom_handler_installed(0))
        p = self.alloc(2 * GiB)
        self.assertTrue(p, _lib.last_error())
        self.held.append(p)
        self.assertEqual(seen, [2 * GiB])

    def test_declining_or_raising_handler_leaves_the_oom(self):
        big = self.alloc(3 * GiB)
        self.held.append(big)
        calls = []
        oom.set_oom_handler(lambda n: calls.append(n) and False, 0)
        self.assertFalse(self.alloc(2 * GiB))
        self.assertIn("out of memory", _lib.last_error())

        def boom(n):
            calls.append(n)
            raise ValueError("handler bug")

        oom.set_oom_handler(boom, 0)
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertFalse(self.alloc(2 * GiB))
        self.assertIn("handler bug", err.getvalue())
        self.assertEqual(len(calls), 2)
        oom.set_oom_handler(None, 0)
        self.assertFalse(oom.oom_handler_installed(0))
        self.assertFalse(self.alloc(2 * GiB))
        self.assertEqual(len(calls), 2)


if __name__ == "__main__":
    unittest.main()
