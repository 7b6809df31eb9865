"""test_lib: finding and loading libxseg.so: XSEG_LIBRARY first and alone,
clear errors for a missing file and for a library that is not xseg, and
the exported PyTorch entry points."""
import ctypes.util
import os
import unittest

from _common import run_py

import xseg
from xseg import _lib

TRY_LOAD = ("import xseg\ntry:\n    print(xseg.library_path())\n"
            "except xseg.XsegError as e:\n    print('XE', e)\n")


class LoadTest(unittest.TestCase):
    def test_env_is_used_alone(self):
        saved = os.environ.get("XSEG_LIBRARY")
        os.environ["XSEG_LIBRARY"] = "/nowhere/libxseg.so.0"
        try:
            self.assertEqual(_lib.candidates(), ["/nowhere/libxseg.so.0"])
        finally:
            if saved is None:
                del os.environ["XSEG_LIBRARY"]
            else:
                os.environ["XSEG_LIBRARY"] = saved

    def test_missing_library(self):
        r = run_py(TRY_LOAD, env={"XSEG_LIBRARY": "/nowhere/libxseg.so.0"})
        self.assertIn("XE xseg: cannot load libxseg.so", r.stdout, r.stderr)
        self.assertIn("/nowhere/libxseg.so.0", r.stdout)
        self.assertIn("XSEG_LIBRARY", r.stdout)

    def test_not_xseg(self):
        libc = ctypes.util.find_library("c")
        if not libc:
            self.skipTest("no libc found")
        r = run_py(TRY_LOAD, env={"XSEG_LIBRARY": libc})
        self.assertIn("is not libxseg", r.stdout, r.stderr)

    def test_loaded_path_is_a_file(self):
        self.assertTrue(os.path.isfile(xseg.library_path()))
        self.assertEqual(xseg.version(), "0.1.0")

    def test_entry_points_are_exported(self):
        lib = ctypes.CDLL(xseg.library_path())
        for name in ("xseg_torch_alloc", "xseg_torch_free", "xseg_torch_init",
                     "xseg_torch_reset", "xseg_torch_memory_fraction",
                     "xseg_torch_record_stream", "xseg_torch_begin_pool",
                     "xseg_torch_end_pool", "xseg_torch_release_pool",
                     "xseg_set_default_conf"):
            self.assertTrue(hasattr(lib, name), name)

    def test_size_zero_and_null(self):
        lib = _lib.load()
        self.assertIsNone(lib.xseg_torch_alloc(0, 0, None))
        self.assertEqual(_lib.last_error(), "")
        lib.xseg_torch_free(None, 0, 0, None)
        self.assertEqual(_lib.last_error(), "")


if __name__ == "__main__":
    unittest.main()
