# lib.sh: helpers shared by the tools/ci stages (sourced, not run): the
# repository root, parallelism, timing, a CMake build into a build-ci-*
# directory, and the one-line summary each stage ends with.
set -euo pipefail
CI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$CI_ROOT"
JOBS=${JOBS:-$(nproc)}
CI_START=$(date +%s)
CI_GEN=()
if command -v ninja >/dev/null 2>&1; then CI_GEN=(-G Ninja); fi

# ci_build DIR [cmake args...]: configure (once) and build everything.
ci_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S . -B "$dir" "${CI_GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
      { cat "$dir.configure.log"; return 1; }
  fi
  cmake --build "$dir" -j"$JOBS" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; return 1; }
}

ci_elapsed() {
  echo $(($(date +%s) - CI_START))
}

# ci_figures LOG: the figure lines the suites print (fault:, hostile:, ...).
ci_figures() {
  grep -hE '^(fault|hostile|hostile_trace|stress|fork): ' "$@" 2>/dev/null | sed 's/^/  /' || true
}
