#!/usr/bin/env bash
# pip_check.sh SOURCE_DIR BUILT_LIB [PYTHON]: `pip install .` from the
# repository root into a fresh venv, offline, with the OS's setuptools and
# wheel (--no-build-isolation --no-index).  Checks that the installed
# package loads its own bundled libxseg.so.0 (xseg.library_path() inside the
# installed package), that an alloc/free works on the host backend, and that
# an explicit XSEG_LIBRARY (BUILT_LIB) still wins.  Exits 77 (skipped) when no
# interpreter has pip, venv, setuptools and wheel.
set -euo pipefail
src=$(cd "$1" && pwd)
built=$2
py=""
for cand in "${3:-}" /usr/bin/python3 python3; do
  [ -n "$cand" ] && command -v "$cand" >/dev/null || continue
  # (separately: pip imported before setuptools trips setuptools' distutils hack)
  if "$cand" -c 'import setuptools, wheel' 2>/dev/null &&
     "$cand" -c 'import ensurepip, pip, venv' 2>/dev/null; then
    py=$cand; break
  fi
done
if [ -z "$py" ]; then
  echo "pip_check: skipped: no python3 with pip, venv, setuptools and wheel" \
       "(apt-get install python3-pip python3-venv python3-setuptools python3-wheel)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
unset XSEG_LIBRARY PYTHONPATH
if ! "$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index --no-cache-dir \
     --no-deps "$src" >"$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log"; echo "FAIL: pip install $src"; exit 1
fi
cd "$tmp"  # not the source tree: only the installed package is importable
XSEG_CONF=backend:host,host_capacity:256MB "$tmp/venv/bin/python" - <<'EOF'
import os
import xseg
from xseg import _lib
pkg = os.path.dirname(os.path.realpath(xseg.__file__))
assert "site-packages" in pkg, f"xseg imported from {pkg}, not the venv"
path = xseg.library_path()
want = os.path.join(pkg, "libxseg.so.0")
assert path == want, f"library_path() is {path}, not the bundled {want}"
assert xseg.backend() == "host", xseg.backend()
lib = _lib.load()
p = lib.xseg_torch_alloc(1 << 20, 0, None)
assert p, "alloc failed: " + xseg.last_error()
assert xseg.memory_stats()["allocated_bytes.all.current"] >= 1 << 20
lib.xseg_torch_free(p, 1 << 20, 0, None)
assert xseg.memory_stats()["allocated_bytes.all.current"] == 0
print(f"pip_check: xseg {xseg.version()} loads its bundled {path}; alloc/free on host ok")
EOF
got=$(XSEG_LIBRARY="$built" XSEG_CONF=backend:host "$tmp/venv/bin/python" \
      -c 'import xseg; print(xseg.library_path())')
want=$(realpath "$built")
[ "$got" = "$want" ] || { echo "FAIL: with XSEG_LIBRARY=$built, library_path() is $got"; exit 1; }
echo "pip_check: XSEG_LIBRARY=$built wins over the bundled copy"
