"""test_no_torch: install() without a usable PyTorch: torch absent, a build
without CUDA, CUDA already initialised, a host-backend conf; and, with a
stand-in torch module, that install() hands PyTorch the library, the
alloc/free names and every hook address, and routes torch.cuda's stats."""
import ctypes
import sys
import types
import unittest

import _common  # noqa: F401
import xseg
from xseg import _lib, _torch


class FakeHandle:
    def __init__(self, setters):
        self.calls = {}
        for name in setters:
            setattr(self, name, self._recorder(name))

    def _recorder(self, name):
        def record(addr):
            self.calls[name] = addr
        return record


def fake_torch(initialized=False, cuda=True, setters=None, refuse=False):
    """A module object standing in for torch, recording what install() does."""
    torch = types.ModuleType("torch")
    torch.__version__ = "0.0-fake"
    torch._C = types.SimpleNamespace()
    record = {"swapped": None}
    if not cuda:
        return torch, record
    torch._C._cuda_customAllocator = object()
    handle = FakeHandle(setters if setters is not None else [s for s, _ in _torch.HOOKS])
    record["handle"] = handle

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_name, free_name):
            record["args"] = (path, alloc_name, free_name)

        def allocator(self):
            return handle

    def change_current_allocator(alloc):
        if refuse:
            raise RuntimeError("Can't swap an already initialized allocator")
        record["swapped"] = alloc

    class CUDAGraph:
        def capture_begin(self, *a, **k):
            return "captured"

    memory = types.SimpleNamespace(
        CUDAPluggableAllocator=CUDAPluggableAllocator,
        change_current_allocator=change_current_allocator,
        memory_stats=lambda device=None: "torch's",
        reset_peak_memory_stats=lambda device=None: "torch's",
        memory_summary=lambda device=None, abbreviated=False: "torch's")
    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: initialized, memory=memory, CUDAGraph=CUDAGraph,
        memory_allocated=lambda: 12345, memory_stats=memory.memory_stats,
        reset_peak_memory_stats=memory.reset_peak_memory_stats,
        memory_summary=memory.memory_summary)
    return torch, record


class WithTorch(unittest.TestCase):
    """Puts a stand-in (or None: absent) in sys.modules["torch"]."""
    torch = None

    def setUp(self):
        self._saved = sys.modules.get("torch", "absent")
        sys.modules["torch"] = self.torch
        _torch._state.update(allocator=None, conf=None, hooks=(), patched=False)

    def tearDown(self):
        if self._saved == "absent":
            sys.modules.pop("torch", None)
        else:
            sys.modules["torch"] = self._saved
        _torch._state.update(allocator=None, conf=None, hooks=(), patched=False)


class TorchAbsent(WithTorch):
    torch = None  # sys.modules entry None: `import torch` raises ImportError

    def test_install_says_torch_is_needed(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.install()
        self.assertIn("needs PyTorch", str(cm.exception))
        self.assertIn("import torch", str(cm.exception))
        self.assertFalse(xseg.installed())

    def test_stats_work_without_torch(self):
        self.assertIn("allocated_bytes.all.current", xseg.memory_stats(0))
        self.assertIn("xseg memory summary", xseg.summary(0))


class TorchWithoutCuda(WithTorch):
    torch = fake_torch(cuda=False)[0]

    def test_install_says_no_cuda(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.install()
        self.assertIn("no CUDA support", str(cm.exception))


class CudaAlreadyInitialised(WithTorch):
    torch = fake_torch(initialized=True)[0]

    def test_install_refuses_after_cuda_init(self):
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.install()
        msg = str(cm.exception)
        self.assertIn("already initialised CUDA", msg)
        self.assertIn("holds 12345 bytes", msg)
        self.assertIn("before the first CUDA tensor", msg)


class HostConfRefused(WithTorch):
    torch = fake_torch()[0]

    def test_host_backend_is_refused(self):
        # this process's XSEG_CONF selects the host backend (_common)
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.install()
        self.assertIn("backend:host", str(cm.exception))


class InstallWiring(WithTorch):
    def setUp(self):
        self.torch, self.record = fake_torch()
        super().setUp()
        xseg.memory_stats(0)  # this process's allocator: host backend, made now
        self._conf = _common.os.environ.pop("XSEG_CONF")

    def tearDown(self):
        _common.os.environ["XSEG_CONF"] = self._conf
        super().tearDown()

    def test_library_names_and_hooks(self):
        alloc = xseg.install(patch_torch=False)
        path, alloc_name, free_name = self.record["args"]
        self.assertEqual((alloc_name, free_name), ("xseg_torch_alloc", "xseg_torch_free"))
        self.assertEqual(path, xseg.library_path())
        lib = ctypes.CDLL(path)  # the same library PyTorch will open
        self.assertTrue(hasattr(lib, alloc_name) and hasattr(lib, free_name))
        self.assertIs(self.record["swapped"], alloc)
        calls = self.record["handle"].calls
        for setter, symbol in _torch.HOOKS:
            self.assertEqual(calls[setter], _lib.address(symbol), setter)
            self.assertIsInstance(calls[setter], int)
        self.assertTrue(xseg.installed())
        self.assertTrue(xseg.has_graph_hooks())
        self.assertEqual(self.torch.cuda.CUDAGraph().capture_begin(), "captured")
        self.assertEqual(self.torch.cuda.memory_stats(), "torch's")

    def test_second_install_returns_the_same(self):
        first = xseg.install()
        self.assertIs(xseg.install(), first)
        with self.assertRaises(xseg.XsegError):
            xseg.install("max_mapped:1GB")

    def test_conf_too_late_is_an_error(self):
        with self.assertRaises(xseg.XsegError) as cm:  # this process's allocator exists
            xseg.install("max_mapped:1GB")
        self.assertIn("already exists", str(cm.exception))
        self.assertFalse(xseg.installed())

    def test_stats_are_routed(self):
        xseg.install()
        self.assertNotEqual(self.torch.cuda.memory_stats(), "torch's")
        self.assertIn("reserved_bytes.all.peak", self.torch.cuda.memory.memory_stats(0))
        self.assertIn("xseg memory summary", self.torch.cuda.memory_summary(0))
        self.assertIsNone(self.torch.cuda.reset_peak_memory_stats(0))

    def test_refusal_is_explained(self):
        self.torch, self.record = fake_torch(refuse=True)
        sys.modules["torch"] = self.torch
        with self.assertRaises(xseg.XsegError) as cm:
            xseg.install()
        self.assertIn("refused to switch allocators", str(cm.exception))
        self.assertFalse(xseg.installed())


INSTALL_WITH_CONF = """
import os, sys
sys.path.insert(0, {tests!r})
from test_no_torch import fake_torch
sys.modules["torch"] = fake_torch()[0]
import xseg
xseg.install({conf!r})
print(os.environ["XSEG_CONF"])
print(xseg.raw_stats(0).mapped_cap)
"""


class InstallConf(unittest.TestCase):
    def install(self, conf):
        code = INSTALL_WITH_CONF.format(tests=str(_common.Path(__file__).resolve().parent),
                                        conf=conf)
        r = _common.run_py(code, env={"XSEG_CONF": None})
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.split()

    def test_conf_is_set_with_torch_defaults(self):
        self.assertEqual(self.install({"max_mapped": "1GB"}),
                         ["max_mapped:1GB,verbose:on,handle_size:page,premap:off", str(1 << 30)])

    def test_named_keys_are_kept(self):
        self.assertEqual(self.install("handle_size:auto,verbose:off,premap:auto"),
                         ["handle_size:auto,verbose:off,premap:auto", "0"])


class OldTorchWithoutGraphHooks(WithTorch):
    def setUp(self):
        self.torch, self.record = fake_torch(
            setters=["set_init_fn", "set_reset_fn", "set_memory_fraction_fn",
                     "set_record_stream_fn"])
        super().setUp()
        xseg.memory_stats(0)  # this process's allocator: host backend, made now
        self._conf = _common.os.environ.pop("XSEG_CONF")

    def tearDown(self):
        _common.os.environ["XSEG_CONF"] = self._conf
        super().tearDown()

    def test_capture_fails_clearly(self):
        xseg.install()
        self.assertFalse(xseg.has_graph_hooks())
        with self.assertRaises(xseg.XsegError) as cm:
            self.torch.cuda.CUDAGraph().capture_begin()
        self.assertIn("CUDA graph capture needs", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
