#!/usr/bin/env bash
# build.sh: builds the GPU allocator benchmark (tools/gpu/bench) against the
# static libxseg of a CMake build, the CUDA runtime and, when python3's
# PyTorch and its C++ headers are there, c10's CUDA caching allocator.
# If alloc_torch.cpp does not build, alloc_torch_none.c stands in and the
# PyTorch contenders report themselves unavailable.
# It also builds bench_sleep (bench_sleep.c: sleep and wake figures, issue
# 14) next to it; a failure there is reported and does not fail the bench.
# usage: tools/gpu/build.sh XSEG_BUILD_DIR OUTPUT_BINARY
#        tools/gpu/build.sh --sleep XSEG_BUILD_DIR OUTPUT_BINARY  (bench_sleep only)
case "${1:-}" in -h|--help) sed -n "2,10p" "$0" | sed "s/^# \{0,1\}//"; exit 0 ;; esac
set -u
sleep_only=0
if [ "${1:-}" = --sleep ]; then sleep_only=1; shift; fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
xbuild=${1:?usage: build.sh [--sleep] XSEG_BUILD_DIR OUTPUT_BINARY}
out=${2:?usage: build.sh [--sleep] XSEG_BUILD_DIR OUTPUT_BINARY}
cuda=${CUDA_HOME:-/usr/local/cuda}
obj=$(dirname "$out")/bench-obj
mkdir -p "$obj"

xlib=$(find "$xbuild" -name libxseg.a -print -quit)
[ -n "$xlib" ] || { echo "build.sh: no libxseg.a under $xbuild"; exit 1; }

cflags="-O2 -g -std=gnu11 -Wall -Wextra -D_GNU_SOURCE -DXSEG_STATIC_DEFINE
        -I$root/include -I$root/lib -I$root/tools/trace -I$cuda/include"
libs="-L$cuda/lib64 -Wl,-rpath,$cuda/lib64 -lcudart -lpthread -ldl -lm"
if [ -f /usr/include/zlib.h ]; then
    cflags="$cflags -DXSEG_TRACE_HAVE_ZLIB=1"
    libs="$libs -lz"
fi

# bench_sleep: one file, libxseg and the CUDA runtime.
build_sleep() {
    gcc $cflags "$here/bench_sleep.c" -o "$1" "$xlib" $libs \
        && echo "build.sh: built $1" && return 0
    echo "build.sh: bench_sleep.c did not build"
    return 1
}
if [ $sleep_only = 1 ]; then
    build_sleep "$out"
    exit
fi
build_sleep "$(dirname "$out")/bench_sleep"

objs=()
for src in "$here"/bench_*.c "$here"/alloc_xseg.c "$here"/alloc_async.c \
           "$here"/alloc_cudamalloc.c "$root"/tools/trace/trace.c \
           "$root"/tools/trace/trace_source.c "$root"/tools/trace/trace_parse.c \
           "$root"/tools/trace/trace_build.c; do
    [ "$(basename "$src")" = bench_sleep.c ] && continue # a program of its own
    o="$obj/$(basename "${src%.c}").o"
    gcc $cflags -c "$src" -o "$o" || exit 1
    objs+=("$o")
done

# PyTorch: include and library folders from the installed package.
torch_ok=0
if tinfo=$(python3 - 2>/dev/null <<'PY'
import torch, torch.utils.cpp_extension as c
print(" ".join("-I" + p for p in c.include_paths()))
print(c.library_paths()[0])
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.__version__)
PY
); then
    tinc=$(echo "$tinfo" | sed -n 1p)
    tlib=$(echo "$tinfo" | sed -n 2p)
    tabi=$(echo "$tinfo" | sed -n 3p)
    echo "build.sh: PyTorch $(echo "$tinfo" | sed -n 4p), libraries in $tlib"
    for extra in "" "-DBENCH_TORCH_NO_STATS"; do
        for std in c++20 c++17; do
            if g++ -std=$std -O2 -g -D_GLIBCXX_USE_CXX11_ABI=$tabi $extra $tinc \
                   -I$cuda/include -I"$here" -c "$here/alloc_torch.cpp" \
                   -o "$obj/alloc_torch.o"; then
                torch_ok=1
                break 2
            fi
            echo "build.sh: alloc_torch.cpp failed with -std=$std $extra"
        done
    done
else
    echo "build.sh: python3 has no PyTorch: building without the PyTorch contenders"
fi

if [ $torch_ok = 1 ]; then
    g++ -o "$out" "${objs[@]}" "$obj/alloc_torch.o" "$xlib" -L"$tlib" -lc10_cuda -lc10 \
        -Wl,-rpath,"$tlib" $libs && { echo "build.sh: built $out with PyTorch"; exit 0; }
    echo "build.sh: linking with PyTorch failed: building without it"
fi
gcc $cflags -c "$here/alloc_torch_none.c" -o "$obj/alloc_torch_none.o" || exit 1
gcc -o "$out" "${objs[@]}" "$obj/alloc_torch_none.o" "$xlib" $libs || exit 1
echo "build.sh: built $out WITHOUT PyTorch"
