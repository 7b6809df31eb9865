"""_common: shared set-up of the xseg Python tests: the package on sys.path,
the host backend for the in-process allocator, and a subprocess runner."""
import os
import subprocess
import sys
from pathlib import Path

PKG_ROOT = Path(__file__).resolve().parents[1]
HOST_CONF = "backend:host,host_capacity:4GB"

if str(PKG_ROOT) not in sys.path:
    sys.path.insert(0, str(PKG_ROOT))
# The process-wide allocators of this test process serve from host memory.
os.environ["XSEG_CONF"] = HOST_CONF


def run_py(code, env=None, timeout=120):
    """Run `code` in a fresh interpreter with the package importable;
    returns the CompletedProcess (text output)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(
        [str(PKG_ROOT)] + [p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p])
    full.update(env or {})
    for k, v in list(full.items()):
        if v is None:
            del full[k]
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=timeout, check=False)
