#!/usr/bin/env bash
# gpu_check.sh — tcl's checks on a machine with an NVIDIA GPU, run from the repository root
# with the bundle of scripts/gpu_bundle.sh in .gpu/ (or, without it, with lua5.4, busted and
# a build in build-rel/ installed there):
#   specs   spec/devices/cuda_device_spec.lua (its GPU tests run) and the Tensor API's specs with
#           DEVICE=CUDA, one busted process per spec file, in parallel
#   bench   bench/gpu_bench.lua (parts in GPU_BENCH_PARTS, default all)
#   beam    the float16 matmul of bench/gpu_bench.lua with BEAM=${GPU_BENCH_BEAM:-2}, its search's
#           progress streamed to beam.log (BEAM_TIMEOUT, default 240 s)
#   code    `tcl -e "$GPU_CHECK_CODE"` with DEVICE=CUDA (e.g. DEBUG=4 to see a kernel's source)
#
#   scripts/gpu_check.sh [specs] [bench] [beam] [code]      (default: specs bench)
#
# Logs go to $OUT (or /tmp/gpu_check) as specs.log and bench.log; the last lines are the spec
# totals and the benchmark table. SPEC_TIMEOUT and BENCH_TIMEOUT (seconds, default 240 and
# 300) bound each step.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
logs=${OUT:-/tmp/gpu_check}
mkdir -p "$logs"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(specs bench)

if [ -d .gpu ]; then
  libs=/tmp/tcl-gpu-libs
  if [ ! -d "$libs" ]; then
    mkdir -p "$libs" && xz -dc .gpu/libs.tar.xz | tar xf - -C "$libs"
  fi
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$root/.gpu/bin:$PATH"
  export LUA_PATH="$root/.gpu/lua/share/?.lua;$root/.gpu/lua/share/?/init.lua;;"
  export LUA_CPATH="$root/.gpu/lua/lib/?.so;;"
  build="$root/.gpu/build"
else
  build="$root/build-rel"
fi
unset TCLC_BUILD_DIR TCLC_SOURCE_DIR TCLC_LUA_DIR # the old names (aliases), so none conflicts
export TCL_BUILD_DIR="$build" TCL_SOURCE_DIR="$root" TCL_LUA_DIR="$root/lua" BENCH_BUILD="$build"
busted_bin=$(command -v busted)

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  ls /usr/local/cuda/lib64/libnvrtc.so* 2>&1 | head -3
  lua5.4 -v
} | tee "$logs/machine.log"

# a spec run: busted with tcl's summary output; prints the tclc-summary line last
spec_run() { # spec_run LOG [VAR=value ...] -- files...
  local log=$1
  shift
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  env "${vars[@]}" TCL_CACHE="$(mktemp -d)" timeout "${SPEC_TIMEOUT:-240}" \
    lua5.4 "$busted_bin" -o spec/support/summary_output.lua "$@" >"$log" 2>&1
  echo "exit status $?" >>"$log"
}

for step in "${steps[@]}"; do
  case $step in
    specs)
      start=$(date +%s)
      parts=$(mktemp -d)
      spec_run "$parts/cuda_device_spec.log" DEVICE= -- spec/devices/cuda_device_spec.lua &
      for f in spec/api/tensor_*_spec.lua; do
        spec_run "$parts/$(basename "$f" .lua).log" DEVICE=CUDA -- "$f" &
      done
      wait
      : >"$logs/specs.log"
      passed=0 failed=0 pending=0
      for log in "$parts"/*.log; do
        { echo "=== $(basename "$log" .log)"; cat "$log"; } >>"$logs/specs.log"
        line=$(grep '^tclc-summary ' "$log" | tail -n 1)
        if [ -z "$line" ]; then
          echo "$(basename "$log" .log): no summary ($(tail -n 1 "$log"))"
          failed=$((failed + 1))
          continue
        fi
        p=$(sed -n 's/.* passed=\([0-9]*\).*/\1/p' <<<"$line")
        f=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$line")
        e=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$line")
        s=$(sed -n 's/.* pending=\([0-9]*\).*/\1/p' <<<"$line")
        echo "$(basename "$log" .log): $p passed, $((f + e)) failed, $s skipped"
        passed=$((passed + p)) failed=$((failed + f + e)) pending=$((pending + s))
      done
      echo "specs on CUDA: $passed passed, $failed failed, $pending skipped ($(($(date +%s) - start)) s)"
      ;;
    bench)
      # shellcheck disable=SC2086 # GPU_BENCH_PARTS is a list of words
      LUA_PATH="$root/lua/?.lua;$root/lua/?/init.lua;$root/?.lua;${LUA_PATH:-;}" \
        LUA_CPATH="$build/lua/?.so;${LUA_CPATH:-;}" \
        timeout "${BENCH_TIMEOUT:-300}" lua5.4 bench/gpu_bench.lua ${GPU_BENCH_PARTS:-} 2>&1 | tee "$logs/bench.log"
      ;;
    beam)
      LUA_PATH="$root/lua/?.lua;$root/lua/?/init.lua;$root/?.lua;${LUA_PATH:-;}" \
        LUA_CPATH="$build/lua/?.so;${LUA_CPATH:-;}" DEVICE=CUDA BEAM="${GPU_BENCH_BEAM:-2}" \
        timeout "${BEAM_TIMEOUT:-240}" lua5.4 bench/gpu_bench.lua --child mm_f16 2>&1 | tee "$logs/beam.log"
      ;;
    code)
      DEVICE=CUDA timeout "${SPEC_TIMEOUT:-240}" "$build/tcl" -e "${GPU_CHECK_CODE:-print(Tensor.ones(4):sum():item())}" \
        >"$logs/code.log" 2>&1
      echo "code: exit status $? ($(wc -l <"$logs/code.log") lines in code.log)"
      ;;
    *) echo "gpu_check: unknown step '$step' (specs, bench, beam, code)" >&2; exit 2 ;;
  esac
done
