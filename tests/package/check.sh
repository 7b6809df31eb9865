#!/usr/bin/env bash
# check.sh BUILD_DIR: installs the build into a temporary prefix and builds a
# consumer against it through the CMake package (shared and static) and
# through pkg-config (shared and static); checks the shared library's
# SONAME, that it exports only xseg_ symbols and does not link libcuda.
# The pkg-config part is skipped when pkg-config is not installed.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
lib=$(dirname "$(find "$tmp/prefix" -name 'libxseg.so.0' | head -1)")
[ -n "$lib" ] || { echo "FAIL: libxseg.so.0 not installed"; exit 1; }
test -f "$tmp/prefix/include/xseg.h" || { echo "FAIL: header not installed"; exit 1; }
test -f "$lib/libxseg.a" || { echo "FAIL: static library not installed"; exit 1; }
soname=$(objdump -p "$lib/libxseg.so.0" | awk '/SONAME/ {print $2}')
[ "$soname" = "libxseg.so.0" ] || { echo "FAIL: SONAME is '$soname'"; exit 1; }
if objdump -p "$lib/libxseg.so.0" | grep NEEDED | grep -q libcuda; then
  echo "FAIL: libxseg links libcuda"; exit 1
fi
leaked=$(nm -D --defined-only "$lib/libxseg.so.0" | awk '{print $3}' | grep -v '^xseg_' || true)
[ -z "$leaked" ] || { echo "FAIL: symbols exported without the xseg_ prefix: $leaked"; exit 1; }
# CMake package, both targets
cmake -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
"$tmp/cm/consumer_shared"
"$tmp/cm/consumer_static"
if objdump -p "$tmp/cm/consumer_static" | grep NEEDED | grep -q libxseg; then
  echo "FAIL: static consumer depends on libxseg.so"; exit 1
fi
# pkg-config, shared and static (when pkg-config is installed)
if ! command -v pkg-config >/dev/null; then
  echo "package: install and CMake package (shared, static) ok; pkg-config not installed: its checks skipped"
  exit 0
fi
export PKG_CONFIG_PATH="$lib/pkgconfig"
cc "$here/consumer.c" $(pkg-config --cflags --libs xseg) -Wl,-rpath,"$lib" -o "$tmp/pc_shared"
"$tmp/pc_shared"
cc "$here/consumer.c" $(pkg-config --cflags xseg) "$lib/libxseg.a" \
   $(pkg-config --static --libs-only-l xseg | sed 's/-lxseg//') -o "$tmp/pc_static"
"$tmp/pc_static"
echo "package: install, CMake package (shared, static) and pkg-config (shared, static) ok"
