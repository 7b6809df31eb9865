#!/usr/bin/env bash
# share_proof.sh: issue 15's proof on a GPU machine (docs/sharing.md), in one
# go, within a deadline:
#   1. builds libxseg (library target only) into $XSEG_SHARE_BUILD (default
#      build-share/ in the source tree) and tools/gpu/share_proof.c against it
#      (cc + libdl; the CUDA driver API and NCCL are dlopen()ed: no nvcc);
#   2. patterns: two processes share a 64 MiB dedicated block; each writes a
#      pattern on the GPU (cuMemsetD32) and reads the other's (cuMemcpyDtoH);
#      the exporter frees the block and fills new blocks while the importer
#      still reads its pattern;
#   3. sync: a 1.5 GB "weight sync": exported, imported and copied on the
#      device by the other process; export, import, copy times and bandwidth;
#   4. dmabuf: cuMemGetHandleForAddressRange(DMA_BUF_FD) of a registrable
#      block (and, for contrast, of an ordinary 64 MiB block under
#      handle_size:page: 32 handles);
#   5. nccl: libnccl.so.2 of the pip package nvidia-nccl-cu13, a one-rank
#      communicator, ncclCommRegister of a 256 MiB registrable block and an
#      all-reduce on it;
#   6. torch (when python3 imports torch, and 70 s are left; else skipped,
#      not failed): a 64 MiB tensor made by xseg.share.empty_shareable,
#      sent to a child process that opens it (recv_tensor), checks and
#      doubles the values; the parent checks the doubled values;
#   7. test_share (the host-backend suite) if the build has Check; without
#      it the step is recorded as "skipped(not built: no Check)", not failed.
# Each step runs under `timeout`; a failure is recorded and the next runs.
# Writes into OUTDIR:
#   share_proof.log   everything printed
#   results.jsonl     one JSON line per step: {"step", "status", "seconds"} and
#                     the program's own JSON line (mode, ok, figures)
#   env.txt           GPU, driver, NCCL library, commit
#   summary.md        the table of steps and figures, also printed at the end
# Exit status: 0 when every step passed, else 1.
#
# usage: tools/gpu/share_proof.sh OUTDIR [DEADLINE_SECONDS (default 480)]
# Environment: XSEG_SHARE_BUILD (build folder), CUDA_HOME, NCCL_LIB (path of
# libnccl.so.2; default: found through the python package nvidia.nccl),
# SHARE_SYNC_BYTES (default 1610612736, 1.5 GiB).
case "${1:-}" in -h|--help|"") sed -n "2,37p" "$0" | sed "s/^# \{0,1\}//"; exit 0 ;; esac
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
deadline=${2:-480}
build=${XSEG_SHARE_BUILD:-$root/build-share}
log=$out/share_proof.log
res=$out/results.jsonl
bin=$build/share_proof
sync_bytes=${SHARE_SYNC_BYTES:-1610612736}
: >"$log"
: >"$res"
failed=0
export PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin

say() { echo "== [${SECONDS}s] $*" | tee -a "$log"; }
left() { echo $(( deadline - SECONDS )); }

# step NAME MAX_SECONDS COMMAND...: run under timeout (MAX or what is left,
# less 10 s for the summary); its stdout's JSON lines go to results.jsonl.
step() {
    local name=$1 max=$2 lim t0 rc status tmp
    shift 2
    lim=$(( $(left) - 10 ))
    [ "$lim" -gt "$max" ] && lim=$max
    if [ "$lim" -lt 10 ]; then
        say "step $name: skipped ($(left) s left)"
        printf '{"step":"%s","status":"skipped(deadline)","seconds":0}\n' "$name" >>"$res"
        failed=1
        return 3
    fi
    say "step $name (at most ${lim}s): $*"
    tmp=$out/.$name.out
    t0=$SECONDS
    timeout -k 5 "$lim" "$@" >"$tmp" 2>>"$log"
    rc=$?
    cat "$tmp" >>"$log"
    grep '^{' "$tmp" >>"$res"
    rm -f "$tmp"
    case $rc in
        0) status=ok ;;
        124|137) status=timeout; failed=1 ;;
        *) status="failed($rc)"; failed=1 ;;
    esac
    printf '{"step":"%s","status":"%s","seconds":%d}\n' "$name" "$status" $(( SECONDS - t0 )) >>"$res"
    say "step $name: $status"
    return $rc
}

# The build steps run as scripts of their own (timeout runs programs, not
# shell functions); $1 root, $2 build folder, $3 log, $4 program.
# shellcheck disable=SC2016 # expanded by the bash -c that runs them
build_lib='cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release >>"$3" 2>&1 &&
    cmake --build "$2" -j"$(nproc)" --target xseg >>"$3" 2>&1 &&
    ${CC:-cc} -std=gnu11 -O2 -Wall -I"$1/include" "$1/tools/gpu/share_proof.c" \
        -o "$4" -L"$2/lib" -lxseg -ldl -Wl,-rpath,"$2/lib" >>"$3" 2>&1'
# shellcheck disable=SC2016
build_tests='cmake --build "$2" -j"$(nproc)" --target test_share >>"$3" 2>&1 &&
    cd "$2" && ctest -R "^test_share\$" --output-on-failure'

# The torch step's program: a (4096, 4096) float32 tensor made by
# xseg.share.empty_shareable, filled, sent with send_tensor to a child
# process that opens it with recv_tensor, checks the values and doubles
# them; the parent checks the doubled values.  One JSON line.
torch_py=$out/share_torch.py
cat >"$torch_py" <<'PYEOF'
import json, socket, subprocess, sys, time
import torch
from xseg import share
shape = (4096, 4096)
def want():
    return torch.arange(shape[0] * shape[1], dtype=torch.float32, device="cuda:0").view(shape)
if len(sys.argv) > 1:  # the importer
    sock = socket.socket(fileno=int(sys.argv[1]))
    t = share.recv_tensor(sock, device=0)
    ok = t.shape == shape and t.device == torch.device("cuda:0") and bool((t == want()).all())
    t.mul_(2)
    torch.cuda.synchronize()
    del t
    sock.sendall(b"1" if ok else b"0")
    sys.exit(0)
t0 = time.perf_counter()
t = share.empty_shareable(shape, torch.float32, device=0)
t.copy_(want())
torch.cuda.synchronize()
a, b = socket.socketpair()
child = subprocess.Popen([sys.executable, __file__, str(b.fileno())], pass_fds=(b.fileno(),))
b.close()
share.send_tensor(a, t)
child_ok = a.recv(1) == b"1"
child.wait(timeout=80)
back_ok = bool((t == want() * 2).all())
del t
torch.cuda.synchronize()
ok = child_ok and back_ok and child.returncode == 0
print(json.dumps({"mode": "torch", "ok": ok, "bytes": shape[0] * shape[1] * 4,
                  "child_read_ok": child_ok, "parent_sees_writes": back_ok,
                  "seconds_with_child_start": round(time.perf_counter() - t0, 3),
                  "torch": torch.__version__}))
sys.exit(0 if ok else 1)
PYEOF

find_nccl() {
    if [ -n "${NCCL_LIB:-}" ]; then echo "$NCCL_LIB"; return; fi
    local d
    d=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null) ||
        d=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) || return
    for f in "$d"/lib/libnccl.so*; do
        [ -e "$f" ] && echo "$f" && return
    done
}

{
    echo "date: $(date -u +%FT%TZ)"
    echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null) $(git -C "$root" status --porcelain 2>/dev/null | wc -l) changed files"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n4
    echo "nccl: $(find_nccl)"
} >"$out/env.txt"
tee -a "$log" <"$out/env.txt"

if step build 300 bash -c "$build_lib" build "$root" "$build" "$log" "$bin"; then
    step patterns 120 "$bin" patterns
    step sync 180 "$bin" sync "$sync_bytes"
    step dmabuf 60 "$bin" dmabuf
    nccl=$(find_nccl)
    if [ -n "$nccl" ]; then
        step nccl 120 env NCCL_DEBUG=WARN "$bin" nccl "$nccl"
    else
        say "step nccl: no libnccl.so.2 (pip install nvidia-nccl-cu13, or NCCL_LIB=...)"
        printf '{"step":"nccl","status":"failed(no libnccl)","seconds":0}\n' >>"$res"
        failed=1
    fi
    if ! python3 -c 'import torch' 2>/dev/null; then
        say "step torch: skipped (python3 cannot import torch)"
        printf '{"step":"torch","status":"skipped(no torch)","seconds":0}\n' >>"$res"
    elif [ "$(left)" -lt 70 ]; then
        say "step torch: skipped ($(left) s left)"
        printf '{"step":"torch","status":"skipped(deadline)","seconds":0}\n' >>"$res"
    else
        step torch 90 env XSEG_LIBRARY="$build/lib/libxseg.so.0" \
            PYTHONPATH="$root/tools/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$torch_py"
    fi
    if grep -q '^CHECK_FOUND:INTERNAL=1' "$build/CMakeCache.txt" 2>/dev/null; then
        step test_share 240 bash -c "$build_tests" test "$root" "$build" "$log"
    else # no Check library: the suites are not configured (tests/CMakeLists.txt)
        say "step test_share: not built (this build found no Check library; apt-get install check pkg-config to run it)"
        printf '{"step":"test_share","status":"skipped(not built: no Check)","seconds":0}\n' >>"$res"
    fi
fi

# summary.md: one row per step, the program's figures beside it.
python3 - "$res" "$out/summary.md" "$out/env.txt" <<'EOF'
import json, sys
res, md, env = sys.argv[1:4]
steps, modes, pending = [], {}, []
for line in open(res):  # a step's own lines come before its step record
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "step" in r:
        steps.append(r)
        for m in pending:
            modes[r["step"]] = m
        pending = []
    elif "mode" in r:
        pending.append(r)
out = ["# share_proof (issue 15) results", "", "```", open(env).read().strip(), "```", "",
       "| step | status | seconds | figures |", "|---|---|---|---|"]
for s in steps:
    m = modes.get(s["step"], {})
    figs = ", ".join("%s=%s" % (k, v) for k, v in m.items() if k != "mode")
    out.append("| %s | %s | %s | %s |" % (s["step"], s["status"], s["seconds"], figs))
sync = modes.get("sync")
if sync and sync.get("ok"):
    out += ["", "Weight sync: %.2f GB exported in %.3f ms, imported in %.3f ms, copied on the "
            "device in %.3f ms (%.1f GB/s); end to end %.3f ms." % (
                sync["bytes"] / 1e9, sync["export_s"] * 1e3, sync["import_s"] * 1e3,
                sync["copy_s"] * 1e3, sync["copy_GBps"], sync["total_s"] * 1e3)]
open(md, "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
exit $failed
