"""test_cupy: xseg.cupy_allocator() without CuPy (none in CI): libxseg's
CuPy entry points resolve and, called through ctypes with CuPy's own
signatures (void *malloc(void *, size_t, int), void free(void *, void *,
int)), allocate usable memory from the process-wide allocator on the host
backend and give it back; a stand-in cupy module checks what
cupy_allocator hands to CFunctionAllocator and that a failed allocation
raises CuPy's OutOfMemoryError with xseg's message."""
import ctypes
import sys
import types
import unittest

import _common  # noqa: F401  (package path, host backend)

import xseg
from xseg import _lib
from xseg import cupy as xcupy


def live_bytes():
    return xseg.raw_stats(0).allocated_bytes.current


class EntryPointTest(unittest.TestCase):
    def setUp(self):
        malloc_addr, free_addr = xcupy.entry_points()
        self.malloc = xcupy.MALLOC_TYPE(malloc_addr)
        self.free = xcupy.FREE_TYPE(free_addr)

    def test_alloc_write_free(self):
        before = live_bytes()
        ptrs = []
        for i, size in enumerate((1, 4096, 3 << 20, 17 << 20)):
            p = self.malloc(None, size, 0)
            self.assertTrue(p, _lib.last_error())
            ctypes.memset(p, 0x40 + i, size)
            self.assertEqual(ctypes.string_at(p + size - 1, 1), bytes([0x40 + i]))
            ptrs.append(p)
        self.assertGreaterEqual(live_bytes() - before, (20 << 20) + 4097)
        self.assertEqual(len(set(ptrs)), 4)
        for p in ptrs:
            self.free(None, p, 0)
            self.assertEqual(_lib.last_error(), "")
        self.assertEqual(live_bytes(), before)

    def test_stream_param_is_accepted(self):
        p = self.malloc(ctypes.c_void_p(0x1234), 1 << 16, 0)
        self.assertTrue(p, _lib.last_error())
        self.free(ctypes.c_void_p(0x1234), p, 0)
        self.assertEqual(_lib.last_error(), "")

    def test_bad_input(self):
        self.assertIsNone(self.malloc(None, 0, 0))
        self.free(None, None, 0)  # NULL: nothing, no message
        self.assertEqual(_lib.last_error(), "")
        self.free(None, 0xdead0000, 0)  # not xseg's: a message, no crash
        self.assertIn("not allocated by xseg", _lib.last_error())
        self.assertIsNone(self.malloc(None, 1 << 16, 999))  # no such device
        self.assertIn("999", _lib.last_error())

    def test_over_the_cap_is_null(self):
        self.assertIsNone(self.malloc(None, 1 << 50, 0))
        self.assertNotEqual(_lib.last_error(), "")


class FakeCupy:
    """sys.modules["cupy"] and ["cupy.cuda"] / ["cupy.cuda.memory"] stand-ins."""

    def __enter__(self):
        made = []

        class OutOfMemoryError(MemoryError):
            def __init__(self, size, total, limit=0):
                super().__init__(f"Out of memory allocating {size:,} bytes")

        class MemoryPointer:
            def __init__(self, ptr):
                self.ptr = ptr

        class CFunctionAllocator:
            def __init__(self, param, malloc_func, free_func, owner):
                self.args = (param, malloc_func, free_func, owner)
                made.append(self)

            def malloc(self, size):
                fn = xcupy.MALLOC_TYPE(self.args[1])
                return MemoryPointer(fn(ctypes.c_void_p(self.args[0]), size, 0) or 0)

        memory = types.ModuleType("cupy.cuda.memory")
        memory.CFunctionAllocator = CFunctionAllocator
        memory.OutOfMemoryError = OutOfMemoryError
        cuda = types.ModuleType("cupy.cuda")
        cuda.memory = memory
        cupy = types.ModuleType("cupy")
        cupy.cuda = cuda
        self.saved = {k: sys.modules.get(k) for k in ("cupy", "cupy.cuda", "cupy.cuda.memory")}
        sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.memory": memory})
        self.made, self.memory = made, memory
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


class AllocatorTest(unittest.TestCase):
    def test_hands_cupy_the_entry_points(self):
        with FakeCupy() as fake:
            alloc = xseg.cupy_allocator(stream=0x77)
            inner = fake.made[-1]
            self.assertEqual(inner.args[0], 0x77)
            self.assertEqual(inner.args[1:3], xcupy.entry_points())
            self.assertIs(inner.args[3], _lib.load())  # keeps the library alive
            before = live_bytes()
            mem = alloc(1 << 20)
            self.assertTrue(mem.ptr)
            self.assertGreaterEqual(live_bytes() - before, 1 << 20)
            xcupy.FREE_TYPE(inner.args[2])(None, mem.ptr, 0)
            self.assertEqual(live_bytes(), before)

    def test_failure_raises_cupy_oom_with_xseg_message(self):
        with FakeCupy() as fake:
            alloc = xseg.cupy_allocator()
            with self.assertRaises(fake.memory.OutOfMemoryError) as cm:
                alloc(1 << 50)
            self.assertIn("xseg:", str(cm.exception))

    def test_unchecked_is_cupys_malloc(self):
        with FakeCupy() as fake:
            alloc = xseg.cupy_allocator(checked=False)
            self.assertEqual(alloc.__self__, fake.made[-1])

    def test_without_cupy(self):
        if "cupy" in sys.modules or _has_real_cupy():
            self.skipTest("CuPy is installed here")
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.cupy_allocator()
        self.assertIn("CuPy is not importable", str(cm.exception))


def _has_real_cupy():
    import importlib.util
    return importlib.util.find_spec("cupy") is not None


if __name__ == "__main__":
    unittest.main()
