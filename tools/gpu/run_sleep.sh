#!/usr/bin/env bash
# run_sleep.sh: issue 14's sleep/wake measurements on a GPU machine, in one go,
# within a deadline:
#   1. builds libxseg (library targets only, no tests) into $XSEG_SLEEP_BUILD
#      (default build-sleep/ in the source tree);
#   2. builds bench_sleep (tools/gpu/build.sh --sleep) and runs it: discard
#      sleep/wake of 40 GiB, backup sleep/wake of 16 GB against the pinned
#      link, device free memory (JSON lines);
#   3. runs tools/gpu/sleep_proof.py --quick (Qwen2-1.5B shapes, 3 cycles),
#      then, if time is left and the quick run did not end in an error, the
#      full proof (1.5B and 8B shapes, 20 cycles, cut at the deadline).
# Writes into OUTDIR:
#   run_sleep.log            everything printed, stage by stage
#   stages.tsv               each stage: name, status, seconds
#   env.txt                  GPU, driver, torch, transformers, commit
#   bench_sleep.jsonl        bench_sleep's records (see tools/gpu/bench_sleep.c)
#   sleep_proof_quick.json   the quick proof; sleep_proof.json the full one
#   sleep_proof.<model>.json each model's own record (rewritten per cycle)
#   summary.md               the figures and verdicts, also printed at the end
# Exit status: 0 when every stage passed, else 1.
#
# usage: tools/gpu/run_sleep.sh OUTDIR [DEADLINE_SECONDS (default 520)]
# Environment: XSEG_SLEEP_BUILD (build folder), CUDA_HOME, XSEG_CONF (passed
# to xseg.install() and bench_sleep), SLEEP_BENCH_ARGS (extra bench_sleep
# arguments), SLEEP_PROOF_ARGS (extra sleep_proof.py arguments, both runs).
case "${1:-}" in -h|--help|"") sed -n "2,25p" "$0" | sed "s/^# \{0,1\}//"; exit 0 ;; esac
set -u
# shellcheck disable=SC2317 # functions run through stage()
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
deadline=${2:-520}
build=${XSEG_SLEEP_BUILD:-$root/build-sleep}
log=$out/run_sleep.log
stages=$out/stages.tsv
py=$(command -v python3 || echo python3)
: >"$log"
: >"$stages"
failed=0
export PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin

say() { echo "== [${SECONDS}s] $*" | tee -a "$log"; }

# left: seconds before the deadline.
left() { echo $(( deadline - SECONDS )); }

# stage NAME MAX_SECONDS COMMAND...: run under timeout (MAX or what is left,
# less a reserve of 10 s for the summary), log, record status and seconds.
stage() {
    local name=$1 max=$2 lim t0 rc
    shift 2
    lim=$(( $(left) - 10 ))
    [ "$lim" -gt "$max" ] && lim=$max
    if [ "$lim" -lt 15 ]; then
        say "stage $name: skipped ($(left) s left)"
        printf '%s\tskipped(deadline)\t0\n' "$name" >>"$stages"
        failed=1
        return 3
    fi
    say "stage $name (at most ${lim}s): $*"
    t0=$SECONDS
    # bash -c: timeout runs programs, and the stages are functions (exported below)
    timeout -k 10 "$lim" bash -c '"$@"' stage "$@" >>"$log" 2>&1
    rc=$?
    local st=ok
    [ $rc = 0 ] || st="failed($rc)"
    [ $rc = 124 ] || [ $rc = 137 ] && st="timeout(${lim}s)"
    printf '%s\t%s\t%s\n' "$name" "$st" "$(( SECONDS - t0 ))" >>"$stages"
    [ $rc = 0 ] || { failed=1; say "stage $name: $st"; }
    return $rc
}

machine_info() {
    {
        echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
        echo "gpu_smi=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
        echo "nvcc=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)"
        echo "torch=$($py -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null)"
        echo "transformers=$($py -c 'import transformers; print(transformers.__version__)' 2>/dev/null)"
        echo "host=$(uname -srm) cpus=$(nproc) mem=$(free -g 2>/dev/null | awk '/Mem:/{print $2}')G"
        echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null)$(git -C "$root" diff --quiet 2>/dev/null || echo '+dirty')"
        echo "xseg_conf=${XSEG_CONF:-}"
    } >"$out/env.txt"
    cat "$out/env.txt"
    nvidia-smi || echo "(no nvidia-smi)"
}

build_lib() {
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXSEG_BUILD_TESTS=OFF \
        -DXSEG_BUILD_TOOLS=OFF &&
        cmake --build "$build" --target xseg xseg_static -j "$(nproc)" &&
        test -f "$build/lib/libxseg.so.0"
}

run_bench() {
    local lim=$1
    # shellcheck disable=SC2086 # SLEEP_BENCH_ARGS is a list of words
    "$build/bench_sleep" --max-seconds "$lim" ${XSEG_CONF:+--conf "$XSEG_CONF"} \
        ${SLEEP_BENCH_ARGS:-} >"$out/bench_sleep.jsonl"
}

run_proof() {
    local name=$1 dl=$2
    shift 2
    # shellcheck disable=SC2086 # SLEEP_PROOF_ARGS is a list of words
    PYTHONPATH=$root/tools/python${PYTHONPATH:+:$PYTHONPATH} \
        XSEG_LIBRARY=$build/lib/libxseg.so.0 \
        "$py" "$root/tools/gpu/sleep_proof.py" "$@" --deadline "$dl" \
        --out "$out/$name.json" ${SLEEP_PROOF_ARGS:-}
}

summary() {
    "$py" - "$out" >"$out/summary.md" 2>>"$log" <<'PY'
import json, os, sys
out = sys.argv[1]
def fmt(s, unit="", k=1.0, d=2):
    if not s:
        return "-"
    return (f"{s['median'] * k:.{d}f}{unit} ({s['min'] * k:.{d}f}..{s['max'] * k:.{d}f}, "
            f"n={s['n']})")
print("# Sleep and wake on the GPU (tools/gpu/run_sleep.sh)\n")
env = os.path.join(out, "env.txt")
print("```"); print(open(env).read().strip() if os.path.exists(env) else "(no env.txt)")
print("```\n")
print("## Stages\n")
for line in open(os.path.join(out, "stages.tsv")):
    print("- " + line.strip().replace("\t", " | "))
path = os.path.join(out, "bench_sleep.jsonl")
if os.path.exists(path):
    print("\n## bench_sleep (median (min..max))\n")
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        t = r.get("test")
        if t == "bandwidth":
            print(f"- link, pinned cudaMemcpyAsync best of 3: D2H {r['d2h_gbs']:.1f} GB/s, "
                  f"H2D {r['h2d_gbs']:.1f} GB/s")
        elif t == "discard_summary":
            h = r["held_after_sleep_bytes"]
            print(f"- discard {r['variant']} x {r['blocks']} ({r['bytes'] / 2**30:.0f} GiB): "
                  f"sleep {fmt(r['sleep_ms'], ' ms')} [target 30 ms: "
                  f"{'met' if r['sleep_target_met'] else 'NOT met'}], wake "
                  f"{fmt(r['wake_ms'], ' ms')} [target 10 ms: "
                  f"{'met' if r['wake_target_met'] else 'NOT met'}]; device memory held "
                  f"after sleep vs before alloc {h['median'] / 2**20:.1f} MiB"
                  f"{'' if r['targets_apply'] else ' (targets are stated for 40 GiB)'}")
        elif t == "backup_summary":
            print(f"- backup {r['blocks']} blocks ({r['bytes'] / 1e9:.2f} GB): sleep "
                  f"{fmt(r['sleep_ms_all'], ' ms', d=1)}, wake {fmt(r['wake_ms_all'], ' ms', d=1)}"
                  f"; warm GB/s sleep {fmt(r['sleep_gbs_warm'], d=1)}, wake "
                  f"{fmt(r['wake_gbs_warm'], d=1)} = {100 * r['sleep_frac_of_link']:.0f}% / "
                  f"{100 * r['wake_frac_of_link']:.0f}% of the link [target 80%: "
                  f"{'met' if r['sleep_target_met'] and r['wake_target_met'] else 'NOT met'}]")
        elif t == "backup" and not r.get("contents_ok", True):
            print(f"- backup rep {r['rep']}: CONTENTS DIFFER ({r['regions_bad']} regions; "
                  f"{r['first_bad']})")
        elif "error" in r or t in ("skipped", "done"):
            print(f"- {t}: {json.dumps(r)}")
for name in ("sleep_proof_quick", "sleep_proof"):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        continue
    doc = json.load(open(path))
    print(f"\n## {name}.json: exit {doc.get('exit')} (0 ok, 1 a check failed, 2 an error, "
          f"3 cut short)\n")
    for model, r in doc.get("models", {}).items():
        s, t = r.get("setup", {}), r.get("targets") or {}
        print(f"### {model}: {r.get('status')}, {r.get('cycles_done', 0)}/"
              f"{r.get('cycles_requested', '?')} cycles, stage {r.get('stage')!r}")
        if r.get("error"):
            print(f"- error: {r['error']}")
        if s:
            print(f"- model {s.get('model_bytes', 0) / 1e9:.2f} GB, load {s.get('load_s', 0):.1f} s"
                  f", deterministic without sleep: {s.get('deterministic_without_sleep')}, "
                  f"graph: {s.get('graph', {}).get('kind')}")
        bad = [k for k, v in (r.get("checks") or {}).items() if v is False]
        unrun = [k for k, v in (r.get("checks") or {}).items() if v is None]
        print(f"- checks: {'all passed' if not bad and not unrun else ''}"
              f"{' FAILED: ' + ', '.join(bad) if bad else ''}"
              f"{' not reached: ' + ', '.join(unrun) if unrun else ''}")
        if t:
            print(f"- sleep s (warm) {fmt(t.get('sleep_s_warm'), d=3)}, wake s (warm) "
                  f"{fmt(t.get('wake_s_warm'), d=3)}; cycle 0: sleep {t.get('sleep_s_cycle0')}"
                  f", wake {t.get('wake_s_cycle0')}")
            print(f"- weights backup GB/s (warm): sleep {fmt(t.get('backup_gbs_sleep_warm'), d=1)}"
                  f", wake {fmt(t.get('backup_gbs_wake_warm'), d=1)}")
            sh = t.get("after_sleep_shortfall_bytes")
            print(f"- free after sleep vs before load: short by "
                  f"{fmt(sh, ' MiB', k=1 / 2**20, d=0)}, "
                  f"{fmt(t.get('after_sleep_shortfall_pct_of_free_before_load'), '%', d=3)}"
                  f" [target <= 1%: "
                  f"{'met' if t.get('after_sleep_within_1pct_of_before_load') else 'NOT met'}]")
PY
    cat "$out/summary.md"
}

export root out build py
export -f machine_info build_lib run_bench run_proof
say "run_sleep: OUTDIR $out, deadline ${deadline}s"
stage machine 30 machine_info
stage build-lib 150 build_lib
if [ -f "$build/lib/libxseg.a" ]; then
    stage build-bench-sleep 60 "$root/tools/gpu/build.sh" --sleep "$build" "$build/bench_sleep"
fi

# The quick proof first: it is the one that must run.  Then the benchmark,
# then the full proof with what is left.
quick_rc=2
if [ -f "$build/lib/libxseg.so.0" ]; then
    q=$(( $(left) - 20 ))
    [ "$q" -gt 150 ] && q=150
    stage proof-quick "$q" run_proof sleep_proof_quick $(( q - 10 )) --quick
    quick_rc=$?
fi
if [ -x "$build/bench_sleep" ]; then
    lim=$(( $(left) - 10 ))
    [ "$lim" -gt 180 ] && lim=180
    # bench_sleep stops starting new work at --max-seconds; timeout adds 40 s
    # for the repetition under way and the release.
    stage bench-sleep $(( lim > 60 ? lim : 60 )) run_bench $(( lim > 80 ? lim - 40 : 40 ))
fi
if [ "$quick_rc" = 0 ] || [ "$quick_rc" = 1 ] || [ "$quick_rc" = 3 ]; then
    full=$(( $(left) - 20 ))
    if [ "$full" -ge 90 ]; then
        stage proof-full "$full" run_proof sleep_proof $(( full - 10 ))
    else
        say "proof-full: skipped, ${full}s left"
        printf 'proof-full\tskipped(deadline)\t0\n' >>"$stages"
    fi
else
    say "proof-full: skipped, the quick proof ended in an error (exit $quick_rc): see run_sleep.log"
    printf 'proof-full\tskipped(quick errored)\t0\n' >>"$stages"
    failed=1
fi
say "summary"
summary || { echo "(summary failed: see run_sleep.log)"; failed=1; }
say "stages:"
column -t -s $'\t' "$stages" 2>/dev/null || cat "$stages"
exit $failed
