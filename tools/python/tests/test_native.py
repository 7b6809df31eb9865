"""test_native: the native allocator's Python side without torch or a GPU
(issue 16): a clear message when torch, its headers or a compiler are
missing; install(native=...) choosing and falling back; the version
refusal; the compile command; the cache key."""
import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr
from pathlib import Path

import _common  # noqa: F401
import xseg
from xseg import _native, _torch
from test_no_torch import WithTorch, fake_torch


class BuildDetection(unittest.TestCase):
    def test_no_torch_says_so(self):
        res = _common.run_py(
            "import sys; sys.modules['torch'] = None\n"
            "from xseg import _native\n"
            "try:\n    _native.build()\nexcept _native.NativeUnavailable as e:\n"
            "    print('REFUSED', e)\n")
        self.assertIn("REFUSED", res.stdout, res.stderr)
        self.assertIn("needs PyTorch with its C++ headers", res.stdout)

    def test_stand_in_torch_without_cpp_extension(self):
        torch, _ = fake_torch()
        with self.assertRaises(_native.NativeUnavailable) as cm:
            _native.build(torch)
        self.assertIn("cpp_extension", str(cm.exception))

    def test_torch_without_headers(self):
        torch, _ = fake_torch()
        with tempfile.TemporaryDirectory() as d:
            ext = type("Ext", (), {"include_paths": staticmethod(lambda: [d]),
                                    "library_paths": staticmethod(lambda: [d])})
            with self.assertRaises(_native.NativeUnavailable) as cm:
                _native.build(torch, ext)
        msg = str(cm.exception)
        self.assertIn("c10/cuda/CUDACachingAllocator.h", msg)
        self.assertIn("0.0-fake", msg)
        self.assertIn("native=False", msg)

    def test_no_compiler(self):
        with self.assertRaises(_native.NativeUnavailable) as cm:
            _native.find_compiler(env={}, which=lambda name: None)
        self.assertIn("no C++ compiler", str(cm.exception))
        self.assertEqual(_native.find_compiler(env={"CXX": "clang++"},
                                               which=lambda n: f"/opt/{n}"), "/opt/clang++")
        self.assertEqual(_native.find_compiler(env={}, which=lambda n: None if n == "g++"
                                               else f"/usr/bin/{n}"), "/usr/bin/c++")

    def test_cuda_include(self):
        self.assertEqual(_native.find_cuda_include(
            env={"CUDA_HOME": "/x"}, exists=lambda p: p.startswith("/x/")), "/x/include")
        self.assertIsNone(_native.find_cuda_include(env={}, exists=lambda p: False))


class Versions(unittest.TestCase):
    def test_same_version_loads(self):
        self.assertIsNone(_native.check_versions("2.11.0+cu130", "2.11.0+cu130"))

    def test_other_version_is_refused_naming_both(self):
        why = _native.check_versions("2.11.0+cu130", "2.12.0+cu130")
        self.assertIn("2.11.0+cu130", why)
        self.assertIn("2.12.0+cu130", why)
        self.assertIsNotNone(_native.check_versions("2.11.0+cu130", "2.11.0+cu128"))

    def test_cxx_standard(self):
        self.assertEqual(_native.cxx_standard("2.11.0+cu130"), "-std=c++20")
        self.assertEqual(_native.cxx_standard("2.9.1"), "-std=c++17")
        self.assertEqual(_native.cxx_standard("3.0.0"), "-std=c++20")


class CompileCommand(unittest.TestCase):
    def cmd(self, abi=True, version="2.11.0+cu130", cuda="/usr/local/cuda/include"):
        return _native.compile_command("/usr/bin/g++", Path("/src/xseg_native.cpp"),
                                       "/out/m.so", version, ["/t/include", "/t/api"],
                                       ["/t/lib"], abi, "/py/include", cuda)

    def test_flags(self):
        c = self.cmd()
        self.assertEqual(c[0], "/usr/bin/g++")
        for flag in ("-std=c++20", "-shared", "-fPIC", "-DXSEG_NATIVE_WITH_PYTHON",
                     "-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=1",
                     '-DXSEG_TORCH_VERSION="2.11.0+cu130"', "-L/t/lib",
                     "-Wl,-rpath,/t/lib", "-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu",
                     "-ltorch_python"):
            self.assertIn(flag, c)
        for inc in ("/t/include", "/t/api", "/py/include", "/usr/local/cuda/include"):
            self.assertEqual(c[c.index(inc) - 1], "-isystem")
        self.assertEqual(c[c.index("-o") + 1], "/out/m.so")
        self.assertLess(c.index("/src/xseg_native.cpp"), c.index("-lc10"))

    def test_extra_flags(self):
        self.assertEqual(_native.extra_flags({}), [])
        self.assertEqual(_native.extra_flags({"XSEG_NATIVE_CXXFLAGS": ""}), [])
        flags = _native.extra_flags({"XSEG_NATIVE_CXXFLAGS": "-g  -fsanitize=address '-DX=a b'"})
        self.assertEqual(flags, ["-g", "-fsanitize=address", "-DX=a b"])
        c = _native.compile_command("/usr/bin/g++", Path("/src/xseg_native.cpp"), "/out/m.so",
                                    "2.11.0", ["/t/include"], ["/t/lib"], True, "/py/include",
                                    None, extra=flags)
        self.assertLess(c.index("-fsanitize=address"), c.index("/src/xseg_native.cpp"))
        self.assertIn("-DX=a b", c)

    def test_abi_and_no_cuda_dir(self):
        c = self.cmd(abi=False, cuda=None)
        self.assertIn("-D_GLIBCXX_USE_CXX11_ABI=0", c)
        self.assertNotIn("/usr/local/cuda/include", c)

    def test_source_uses_the_defines(self):
        text = _native.SOURCE.read_text()
        for name in ("XSEG_TORCH_VERSION", "XSEG_NATIVE_WITH_PYTHON", "TORCH_EXTENSION_NAME",
                     "built_torch_version", "def(\"install\""):
            self.assertIn(name, text)


class CacheKey(unittest.TestCase):
    def test_key(self):
        k = _native.cache_key("2.11.0+cu130", "src", ["g++", "-O2"])
        self.assertTrue(k.startswith("2.11.0_cu130-"), k)
        self.assertEqual(k, _native.cache_key("2.11.0+cu130", "src", ["g++", "-O2"]))
        self.assertNotEqual(k, _native.cache_key("2.11.0+cu130", "src2", ["g++", "-O2"]))
        self.assertNotEqual(k, _native.cache_key("2.11.0+cu130", "src", ["g++", "-O3"]))
        self.assertNotEqual(k, _native.cache_key("2.11.1+cu130", "src", ["g++", "-O2"]))
        self.assertNotIn("/", k)

    def test_cache_root(self):
        self.assertEqual(_native.cache_root({"XSEG_NATIVE_CACHE": "/c"}), Path("/c"))
        self.assertEqual(_native.cache_root({"HOME": "/h"}),
                         Path("/h/.cache/xseg/native"))


class InstallChoice(WithTorch):
    """install(native=...) with a stand-in torch, which cannot build the module."""

    def setUp(self):
        self.torch, self.record = fake_torch()
        super().setUp()
        xseg.memory_stats(0)
        self._conf = os.environ.pop("XSEG_CONF")
        _native.USED.update(mode=None, why="")

    def tearDown(self):
        os.environ["XSEG_CONF"] = self._conf
        super().tearDown()

    def test_default_is_pluggable(self):
        xseg.install(patch_torch=False)
        self.assertEqual(_native.USED, {"mode": "pluggable", "why": "native=False"})

    def test_none_falls_back_and_says_so(self):
        err = io.StringIO()
        with redirect_stderr(err):
            alloc = xseg.install(native=None, patch_torch=False)
        self.assertIs(self.record["swapped"], alloc)
        self.assertEqual(_native.USED["mode"], "pluggable")
        self.assertIn("cpp_extension", _native.USED["why"])
        self.assertIn("pluggable allocator", err.getvalue())

    def test_native_true_raises(self):
        with self.assertRaises(_native.NativeUnavailable):
            xseg.install(native=True)
        self.assertIsNone(self.record["swapped"])
        self.assertFalse(xseg.installed())

    def test_native_false_skips_it(self):
        xseg.install(native=False, patch_torch=False)
        self.assertEqual(_native.USED, {"mode": "pluggable", "why": "native=False"})
        self.assertTrue(_torch.installed())


if __name__ == "__main__":
    sys.exit(unittest.main())
