#!/usr/bin/env bash
# gpu_proof.sh: the preload proof of issue 17 on a GPU machine (docs/preload.md).
# usage: tools/preload/gpu_proof.sh OUT [BUILD_DIR]
# Builds libxseg and libxseg_preload.so (BUILD_DIR, default build-preload-gpu
# in the repository root; -DXSEG_BUILD_TESTS=OFF) and cuda_churn.cu (nvcc),
# then runs each workload without xseg and under xseg-run, and, for CuPy,
# through xseg.cupy_allocator():
#   cuda_churn (plain CUDA C: cudaMalloc/cudaFree of varied sizes, two streams),
#   CuPy with its pool off and on (tools/preload/workloads.py cupy),
#   JAX with XLA_PYTHON_CLIENT_ALLOCATOR=platform (a small training loop),
#   PyTorch with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (a small training loop).
# Writes under OUT: results.jsonl (one line per run: step, rc, the
# workload's JSON, xseg's own peaks from XSEG_PRELOAD_STATS), summary.md
# (checksums against the run without xseg, wall time, peaks), logs/.
# Deadline-bounded: every step runs under `timeout`, the whole under
# ~7.5 minutes (GPU_PROOF_BUDGET seconds); a failed or skipped step is
# recorded and the next one runs.
case "${1:-}" in -h|--help|"") sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ]; exit $? ;; esac
set -u
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "gpu_proof: cannot create $1"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${2:-$root/build-preload-gpu}
budget=${GPU_PROOF_BUDGET:-450}
deadline=$(( $(date +%s) + budget ))
mkdir -p "$out/logs" "$out/stats" "$out/bin"
results=$out/results.jsonl
: > "$results"
py=${PYTHON:-python3}
cuda=${CUDA_HOME:-/usr/local/cuda}
export PATH="$cuda/bin:$PATH"

# Record one line: step name, rc, seconds, workload JSON (last {...} line of
# the log, or null) and xseg's peaks from the stats files of the step.
record() {
    local name=$1 rc=$2 secs=$3 log=$4 stats=${5:-}
    "$py" - "$name" "$rc" "$secs" "$log" "$stats" >> "$results" <<'PY'
import glob, json, sys
name, rc, secs, log, stats = sys.argv[1:6]
work = None
try:
    for line in open(log, errors="replace"):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                work = json.loads(line)
            except ValueError:
                pass
except OSError:
    pass
xs = None
if stats:
    peaks = {"mapped_peak": 0, "allocated_peak": 0, "alloc_calls": 0, "processes": 0}
    for path in glob.glob(stats + "*"):
        for line in open(path, errors="replace"):
            try:
                s = json.loads(line)["stats"]
            except (ValueError, KeyError):
                continue
            peaks["processes"] += 1
            peaks["mapped_peak"] = max(peaks["mapped_peak"], s["mapped_bytes"]["peak"])
            peaks["allocated_peak"] = max(peaks["allocated_peak"], s["allocated_bytes"]["peak"])
            peaks["alloc_calls"] += s.get("alloc_calls", 0)
    xs = peaks if peaks["processes"] else None
print(json.dumps({"step": name, "rc": int(rc), "seconds": float(secs), "result": work,
                  "xseg": xs, "log": log}))
PY
}

# step NAME LIMIT_S [--xseg] CMD...: run under timeout (at most what the
# deadline leaves), log to logs/NAME.log; --xseg runs it under xseg-run.
step() {
    local name=$1 limit=$2; shift 2
    local left=$(( deadline - $(date +%s) - 5 ))
    local log=$out/logs/$name.log stats=""
    if [ "$left" -lt 15 ]; then
        echo "gpu_proof: $name skipped (deadline)" | tee "$log"
        record "$name" 124 0 "$log"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local pre=()
    if [ "${1:-}" = --xseg ]; then
        shift
        stats=$out/stats/$name.
        pre=("$build/tools/preload/xseg-run" --conf "${PROOF_CONF:-backend:cuda}"
             --stats "$stats%p.jsonl" --)
    fi
    echo "gpu_proof: $name (limit ${limit}s)"
    local t0=$(date +%s.%N)
    timeout -k 10 "$limit" "${pre[@]}" "$@" > "$log" 2>&1
    local rc=$?
    local secs; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    echo "gpu_proof: $name rc=$rc ($secs s)"
    record "$name" "$rc" "$secs" "$log" "$stats"
}

# ---- build ----
step build 200 bash -c "cmake -S '$root' -B '$build' -DCMAKE_BUILD_TYPE=Release \
    -DXSEG_BUILD_TESTS=OFF > /dev/null && cmake --build '$build' -j \"\$(nproc)\" \
    --target xseg xseg_preload"
step nvcc 90 nvcc -O2 -o "$out/bin/cuda_churn" "$here/cuda_churn.cu"
export XSEG_LIBRARY=$build/lib/libxseg.so.0
unset XSEG_CONF LD_PRELOAD

churn=$out/bin/cuda_churn
iters=${CHURN_ITERS:-20000}
# ---- plain CUDA C ----
step churn_plain 60 "$churn" "$iters"
step churn_xseg 60 --xseg "$churn" "$iters"
# ---- CuPy ----
w=$here/workloads.py
step cupy_pool_off_plain 60 "$py" "$w" cupy pool_off
step cupy_pool_off_xseg 60 --xseg "$py" "$w" cupy pool_off
step cupy_pool_on_plain 60 "$py" "$w" cupy pool_on
step cupy_pool_on_xseg 60 --xseg "$py" "$w" cupy pool_on
step cupy_allocator 60 env XSEG_CONF=backend:cuda "$py" "$w" cupy xseg
# ---- JAX ----
step jax_plain 75 env XLA_PYTHON_CLIENT_ALLOCATOR=platform "$py" "$w" jax
step jax_xseg 75 --xseg env XLA_PYTHON_CLIENT_ALLOCATOR=platform "$py" "$w" jax
# ---- PyTorch ----
step torch_plain 75 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$py" "$w" torch
step torch_xseg 75 --xseg env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$py" "$w" torch

# ---- summary ----
"$py" - "$results" "$out/summary.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {r["step"]: r for r in rows}
pairs = [("cuda_churn", "churn_plain", "churn_xseg"),
         ("CuPy, pool off", "cupy_pool_off_plain", "cupy_pool_off_xseg"),
         ("CuPy, pool on", "cupy_pool_on_plain", "cupy_pool_on_xseg"),
         ("CuPy, pool off vs xseg.cupy_allocator()", "cupy_pool_off_plain", "cupy_allocator"),
         ("CuPy, pool on vs xseg.cupy_allocator()", "cupy_pool_on_plain", "cupy_allocator"),
         ("JAX, platform allocator", "jax_plain", "jax_xseg"),
         ("PyTorch, no caching", "torch_plain", "torch_xseg")]
mib = lambda b: "-" if b is None else f"{b / 2**20:.1f}"
def res(r):
    return (r or {}).get("result") or {}
lines = ["# Preload proof (tools/preload/gpu_proof.sh)", "",
         "Peak used: cuMemGetInfo sampled by the workload (after every step; cuda_churn: every "
         "32 iterations), minus the use before the work: the same measure for both runs. "
         "App peak: the framework's own figure (its source in results.jsonl). xseg peak: "
         "xseg's own mapped_bytes.peak (under preload from XSEG_PRELOAD_STATS, through "
         "cupy_allocator from xseg.raw_stats). cuda_churn's alloc s: time inside the "
         "allocation and free calls.", "",
         "| workload | same result | wall s (app) | wall s (xseg) | speed-up | peak used MiB "
         "(app) | peak used MiB (xseg) | app peak MiB | xseg mapped peak MiB | alloc s (app / xseg) |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for title, a, b in pairs:
    ra, rb = by.get(a), by.get(b)
    wa, wb = res(ra), res(rb)
    if "checksum" not in wa or "checksum" not in wb:
        why = []
        for n, r in ((a, ra), (b, rb)):
            if not r:
                why.append(f"{n}: not run")
            elif "checksum" not in res(r):
                err = str(res(r).get("error", "no result"))[:120].replace("|", "/")
                why.append(f"{n}: rc {r['rc']}, {err} (logs/{n}.log)")
        lines.append(f"| {title} | - | | | | | | | | {'; '.join(why)} |")
        continue
    same = "yes" if wa.get("checksum") == wb.get("checksum") else "**NO**"
    sp = wa["wall_s"] / wb["wall_s"] if wb.get("wall_s") else 0
    xpeak = (rb.get("xseg") or {}).get("mapped_peak", wb.get("xseg_mapped_peak"))
    al = ""
    if "alloc_free_s" in wa:
        al = f"{wa['alloc_free_s']:.3f} / {wb['alloc_free_s']:.3f}"
    lines.append(f"| {title} | {same} | {wa['wall_s']:.3f} | {wb['wall_s']:.3f} | {sp:.2f}x | "
                 f"{mib(wa.get('peak_used_bytes'))} | {mib(wb.get('peak_used_bytes'))} | "
                 f"{mib(wa.get('app_peak_bytes'))} | {mib(xpeak)} | {al} |")
lines += ["", "Steps: " + ", ".join(f"{r['step']} rc={r['rc']}" for r in rows), ""]
open(sys.argv[2], "w").write("\n".join(lines))
print("\n".join(lines))
PY
echo "gpu_proof: results in $out (results.jsonl, summary.md, logs/)"
