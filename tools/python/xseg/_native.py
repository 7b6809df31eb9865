"""_native: builds (on first use), caches and loads xseg's native PyTorch
allocator (native/xseg_native.cpp), a c10 CUDAAllocator over libxseg that
raises torch.OutOfMemoryError and serves torch's own statistics and
snapshots (docs/pytorch.md, "Native allocator").

The module is compiled with the host's C++ compiler against the installed
torch's headers and libraries, into
~/.cache/xseg/native/<torch version>-<hash of source and command>/ (or
$XSEG_NATIVE_CACHE/...); $XSEG_NATIVE_CXXFLAGS adds compiler flags (a
debugging build: "-g -fsanitize=address", cached apart).  The pure helpers (cache_key, compile_command,
check_versions, find_compiler) take plain values so that they are tested
without torch or a GPU (tests/test_native.py)."""
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from ._lib import XsegError

SOURCE = Path(__file__).resolve().parent / "native" / "xseg_native.cpp"
MODULE = "xseg_native"


class NativeUnavailable(XsegError):
    """The native module cannot be built or loaded here (the message says why)."""


def cache_root(env=None):
    env = os.environ if env is None else env
    if env.get("XSEG_NATIVE_CACHE"):
        return Path(env["XSEG_NATIVE_CACHE"])
    return Path(env.get("HOME", "~")).expanduser() / ".cache" / "xseg" / "native"


def safe_version(torch_version):
    """A torch version as a directory name ('2.11.0+cu130' -> '2.11.0_cu130')."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", torch_version)


def cache_key(torch_version, source_text, command):
    """Directory name of a build: the torch version and a hash of the source
    and of the compile command (headers, flags and ABI are in it)."""
    h = hashlib.sha256()
    h.update(source_text.encode() if isinstance(source_text, str) else source_text)
    h.update(b"\0")
    h.update("\0".join(command).encode())
    return f"{safe_version(torch_version)}-{h.hexdigest()[:16]}"


def cxx_standard(torch_version):
    """-std for this torch: its headers need C++20 from 2.10 on (C++17 before)."""
    m = re.match(r"(\d+)\.(\d+)", torch_version)
    major, minor = (int(m.group(1)), int(m.group(2))) if m else (2, 11)
    return "-std=c++20" if (major, minor) >= (2, 10) else "-std=c++17"


def extra_flags(env=None):
    """Extra compiler and linker flags from $XSEG_NATIVE_CXXFLAGS (split as a
    shell would), e.g. "-g -fsanitize=address" for a debugging build; they
    are part of the command, so of the cache key."""
    env = os.environ if env is None else env
    return shlex.split(env.get("XSEG_NATIVE_CXXFLAGS", ""))


def compile_command(cxx, source, output, torch_version, include_dirs, library_dirs,
                    cxx11_abi, python_include, cuda_include=None, extra=()):
    """The g++ command line that builds the module (a list); extra: flags
    added after the defines (extra_flags())."""
    cmd = [cxx, cxx_standard(torch_version), "-O2", "-shared", "-fPIC",
           "-fvisibility=hidden", "-DXSEG_NATIVE_WITH_PYTHON", "-DTORCH_API_INCLUDE_EXTENSION_H",
           f"-DTORCH_EXTENSION_NAME={MODULE}",
           f"-D_GLIBCXX_USE_CXX11_ABI={1 if cxx11_abi else 0}",
           f'-DXSEG_TORCH_VERSION="{torch_version}"'] + list(extra)
    for d in include_dirs:
        cmd += ["-isystem", str(d)]
    if cuda_include:
        cmd += ["-isystem", str(cuda_include)]
    cmd += ["-isystem", str(python_include), str(source), "-o", str(output)]
    for d in library_dirs:
        cmd += [f"-L{d}", f"-Wl,-rpath,{d}"]
    cmd += ["-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-ldl"]
    return cmd


def check_versions(built, running):
    """None when a module built for torch `built` may load under `running`;
    else the message that refuses it."""
    if built == running:
        return None
    return (f"xseg native: the module was built for torch {built} and torch {running} is "
            "running; a module is only loaded by the torch it was built for (it is rebuilt "
            "for this one on the next xseg.install())")


def find_compiler(env=None, which=shutil.which):
    """The C++ compiler: $CXX, else g++, else c++; NativeUnavailable if none."""
    env = os.environ if env is None else env
    for name in ([env["CXX"]] if env.get("CXX") else []) + ["g++", "c++"]:
        path = which(name)
        if path:
            return path
    raise NativeUnavailable(
        "xseg native: no C++ compiler found ($CXX, g++ or c++); install one (e.g. "
        "apt-get install g++) or use xseg.install(native=False) for the pluggable path")


def find_cuda_include(env=None, exists=os.path.exists):
    """A directory with cuda_runtime_api.h, or None (torch's headers include it)."""
    env = os.environ if env is None else env
    roots = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        inc = os.path.join(root, "include")
        if exists(os.path.join(inc, "cuda_runtime_api.h")):
            return inc
    return None


def import_torch_for_build():
    try:
        import torch  # noqa: PLC0415 (optional dependency)
        from torch.utils import cpp_extension  # noqa: PLC0415
    except ImportError as e:
        raise NativeUnavailable(
            f"xseg native: needs PyTorch with its C++ headers, and importing it failed ({e})"
        ) from e
    return torch, cpp_extension


def _cpp_extension_of(torch):
    try:
        return importlib.import_module(f"{torch.__name__}.utils.cpp_extension")
    except Exception as e:  # noqa: BLE001 (a stand-in or a broken torch: say so)
        raise NativeUnavailable(
            f"xseg native: torch.utils.cpp_extension cannot be imported ({e!r}); it gives "
            "the headers and libraries to build against") from e


def _torch_facts(torch, cpp_extension):
    incs = cpp_extension.include_paths()
    missing = [h for h in ("c10/cuda/CUDACachingAllocator.h", "torch/extension.h")
               if not any(os.path.exists(os.path.join(d, h)) for d in incs)]
    if missing:
        raise NativeUnavailable(
            f"xseg native: torch {torch.__version__} has no C++ headers {missing} under "
            f"{incs}; install a CUDA build of PyTorch with its headers, or use "
            "xseg.install(native=False)")
    libdirs = cpp_extension.library_paths()
    abi = bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return incs, libdirs, abi


def build(torch=None, cpp_extension=None, verbose=False):
    """Path of the built module for the running torch (built if not cached)."""
    if torch is None:
        torch, cpp_extension = import_torch_for_build()
    if cpp_extension is None:
        cpp_extension = _cpp_extension_of(torch)
    incs, libdirs, abi = _torch_facts(torch, cpp_extension)
    cxx = find_compiler()
    source_text = SOURCE.read_text()
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    probe = compile_command(cxx, SOURCE, f"{MODULE}{suffix}", torch.__version__, incs,
                            libdirs, abi, sysconfig.get_paths()["include"],
                            find_cuda_include(), extra_flags())
    out_dir = cache_root() / cache_key(torch.__version__, source_text, probe)
    target = out_dir / f"{MODULE}{suffix}"
    if target.exists():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{MODULE}.{os.getpid()}{suffix}"
    cmd = [str(tmp) if c == f"{MODULE}{suffix}" else c for c in probe]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if verbose:
        sys.stderr.write(" ".join(cmd) + "\n" + res.stderr)
    if res.returncode != 0:
        (out_dir / "build.log").write_text(" ".join(cmd) + "\n\n" + res.stderr)
        raise NativeUnavailable(
            f"xseg native: the build failed ({cxx}, torch {torch.__version__}); the log is "
            f"{out_dir / 'build.log'}:\n{res.stderr[-3000:]}")
    os.replace(tmp, target)  # atomic: another process may build the same
    return target


def load(torch=None):
    """Import the module for the running torch (building it if needed)."""
    path = build(torch) if torch is not None else build()
    spec = importlib.util.spec_from_file_location(MODULE, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if torch is None:
        import torch  # noqa: PLC0415
    why = check_versions(mod.built_torch_version(), torch.__version__)
    if why:
        raise NativeUnavailable(why)
    return mod


def install(torch, library_path):
    """Make the native module PyTorch's CUDA allocator; returns the module."""
    try:
        mod = load(torch)
    except NativeUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 (import of the built module, odd torch)
        raise NativeUnavailable(f"xseg native: cannot load the module: {e!r}") from e
    try:
        mod.install(str(library_path), torch.__version__)
    except RuntimeError as e:
        raise NativeUnavailable(f"xseg native: install failed: {e}") from e
    return mod


# Which allocator xseg.install() put in place: "native" or "pluggable"
# (None before install), and why the native one was not used.
USED = {"mode": None, "why": ""}
