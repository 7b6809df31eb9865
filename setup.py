"""setup.py (repository root): the build step behind `pip install .`.

Builds libxseg with CMake (the library target only: Release, no tests, no
tools) in a temporary folder and copies libxseg.so.0 into the wheel's xseg/
package, where xseg._lib finds it (after an explicit XSEG_LIBRARY).  The
package metadata is in pyproject.toml.  setuptools' own build and egg-info
folders go to the same temporary folder: nothing is written into the source
tree.  Environment: XSEG_CMAKE_ARGS (extra CMake arguments, e.g.
-DXSEG_WITH_CUDA=OFF), CMAKE_BUILD_PARALLEL_LEVEL (jobs; default: CPU count).
"""
import atexit
import importlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def need_wheel():
    """Fail clearly when no bdist_wheel exists (a venv without the OS's wheel)."""
    for name in ("wheel", "setuptools.command.bdist_wheel"):
        try:
            importlib.import_module(name)
            return
        except ImportError:
            pass
    sys.exit("xseg: building needs the wheel package: apt-get install python3-wheel, and "
             "make the venv with --system-site-packages (or let pip fetch it: drop "
             "--no-build-isolation)")


need_wheel()
TMP = tempfile.mkdtemp(prefix="xseg-pip-")
atexit.register(shutil.rmtree, TMP, True)


def build_libxseg(build):
    """Configure and build the shared library in `build`; its real path."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise SystemExit("xseg: `pip install .` builds libxseg with CMake, and cmake is not "
                         "installed (apt-get install cmake gcc make, or tools/setup-deps)")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    extra = shlex.split(os.environ.get("XSEG_CMAKE_ARGS", ""))
    subprocess.run([cmake, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    "-DXSEG_BUILD_TESTS=OFF", "-DXSEG_BUILD_TOOLS=OFF", *extra], check=True)
    subprocess.run([cmake, "--build", build, "--target", "xseg", "-j", jobs], check=True)
    return os.path.realpath(os.path.join(build, "lib", "libxseg.so.0"))


class BuildPyWithLibrary(build_py):
    """build_py, then libxseg.so.0 into the built package."""

    def run(self):
        super().run()
        lib = build_libxseg(os.path.join(TMP, "cmake"))
        dest = os.path.join(self.build_lib, "xseg", "libxseg.so.0")
        shutil.copyfile(lib, dest)
        print(f"xseg: bundled {lib} as {dest}")


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: platform-specific, not pure."""

    def has_ext_modules(self):
        return True


setup(
    cmdclass={"build_py": BuildPyWithLibrary},
    distclass=BinaryDistribution,
    options={"build": {"build_base": os.path.join(TMP, "build")},
             "egg_info": {"egg_base": TMP}},
)
