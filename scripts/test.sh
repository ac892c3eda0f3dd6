#!/usr/bin/env bash
# test.sh — the one test command, for a fresh Debian 12 machine or a working copy:
#   1. scripts/setup.sh installs whatever Debian packages are missing;
#   2. builds Debug in build-debug/ and Sanitize (ASan + UBSan) in build-asan/ (build/ is left
#      to scripts/quickstart.sh's Release build: running the tests never slows the user's tcl);
#   3. runs the whole busted suite (spec/**/*_spec.lua) against each build, the sanitized one
#      in the background meanwhile, and the Tensor API's specs again on EMU: as is, and in its
#      GPU mode with CUDA's and Metal's capabilities;
#   4. builds tests/c/states_on_threads with ThreadSanitizer in build-tsan/ and runs it;
#   5. runs luacheck over every Lua file (.luacheckrc): zero warnings.
# Specs find the build under test in TCL_BUILD_DIR. The last line is the total of both
# runs, "N passed, N failed[, N skipped]"; the exit status is non-zero when a test failed,
# a build failed or busted stopped early. A build or run that fails without test counts
# adds 1 to "failed", so that line never reads "0 failed" on a failure.
#
# `scripts/test.sh --quick` is the quick tier for daily work (about 5 minutes here): luacheck, the
# Debug build and the Debug suite without its slowest spec files (SLOW_SPECS below); no
# sanitizers, EMU runs or GPU sources. The full command is what CI runs.
set -euo pipefail

quick=0
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  *) echo "test: unknown argument '$1' (use: scripts/test.sh [--quick])" >&2; echo "0 passed, 1 failed"; exit 1 ;;
esac
# Left out of the quick tier: each takes 15 s or more in Debug here (measured 2026-11-28;
# viz/page, seven headless Chromium launches, 17-40 s measured 2026-11-29).
SLOW_SPECS=(runtime/threads codegen/gpu_render schedule/graph_scale rewrite/transcendental codegen/tc_lowering
  codegen/opt api/tensor_values_elementwise api/tensor_fuzz api/tensor_values_sorting io/fault_injection viz/page)

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

# Stops before building; still ends with the summary line that callers look for.
give_up() {
  echo "test: $1" >&2
  echo "0 passed, 1 failed"
  exit 1
}

scripts/setup.sh || give_up "scripts/setup.sh failed"

jobs=$(nproc 2>/dev/null || echo 2)
busted_bin=$(command -v busted || true)
[ -n "$busted_bin" ] || give_up "busted not found (apt-get install lua-busted)"

passed=0 failed=0 pending=0
spec_paths=() # run_specs runs these spec files, or all of them when empty
export TCL_SOURCE_DIR="$root"
# The old names of the variables set here (TCLC_SOURCE_DIR, TCLC_BUILD_DIR, EMU_GPU: aliases) are
# unset, so that a value left in the caller's shell cannot conflict with the new ones.
unset TCLC_SOURCE_DIR TCLC_BUILD_DIR EMU_GPU

# build DIR TYPE: configure (output shown only when it fails) and build.
build() {
  local dir=$1 type=$2 log
  echo "== test: building $type in $dir/"
  log=$(mktemp)
  if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" >"$log" 2>&1; then
    cat "$log"
    rm -f "$log"
    echo "test: configuring $type in $dir/ failed" >&2
    return 1
  fi
  rm -f "$log"
  if ! cmake --build "$dir" -j "$jobs"; then
    echo "test: building $type in $dir/ failed" >&2
    return 1
  fi
}

# spec_run LOG LABEL DIR HELPER [VAR=value ...]: runs busted under stock lua5.4 against DIR,
# with busted's --helper HELPER (none if "") and the given variables set for the
# interpreter, its output into LOG; returns busted's exit status.
spec_run() {
  local log=$1 label=$2 dir=$3 helper=$4
  shift 4
  local cache rc
  echo "== test: specs against $label ($dir/)" >"$log"
  # a fresh on-disk kernel cache: every run compiles what it runs, whatever ran before
  cache=$(mktemp -d)
  set +e
  env TCL_BUILD_DIR="$root/$dir" TCL_CACHE="$cache" "$@" \
    lua5.4 "$busted_bin" -o spec/support/summary_output.lua ${helper:+--helper="$helper"} "${spec_paths[@]}" \
    >>"$log" 2>&1
  rc=$?
  set -e
  rm -rf "$cache"
  return "$rc"
}

# spec_count LOG LABEL RC: adds the counts of a spec_run's log to the totals.
spec_count() {
  local log=$1 label=$2 rc=$3 summary
  summary=$(grep '^tclc-summary ' "$log" | tail -n 1 || true)
  if [ -z "$summary" ]; then
    echo "test: $label: busted stopped before its summary (exit status $rc); counted as 1 failure"
    failed=$((failed + 1))
    return
  fi
  local p f e s
  p=$(sed -n 's/.* passed=\([0-9]*\).*/\1/p' <<<"$summary")
  f=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$summary")
  e=$(sed -n 's/.* errors=\([0-9]*\).*/\1/p' <<<"$summary")
  s=$(sed -n 's/.* pending=\([0-9]*\).*/\1/p' <<<"$summary")
  passed=$((passed + p))
  failed=$((failed + f + e))
  pending=$((pending + s))
  if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then
    # e.g. the interpreter died at exit (a sanitizer report after the last test)
    echo "test: $label: busted exited with status $rc although no test failed; counted as 1 failure"
    failed=$((failed + 1))
  fi
}

# run_specs LABEL DIR HELPER [VAR=value ...]: spec_run in the foreground, its output shown as
# it comes, and its counts added to the totals.
run_specs() {
  local label=$1 log rc=0
  log=$(mktemp)
  spec_run "$log" "$@" &
  local job=$!
  tail -n +1 -f --pid="$job" "$log"
  wait "$job" || rc=$?
  spec_count "$log" "$label" "$rc"
  rm -f "$log"
}

# check_gpu_sources DIALECT DIR: compiles the kernel sources a GPU-mode run wrote
# (scripts/check_gpu_sources.lua) and adds its counts.
check_gpu_sources() {
  local dialect=$1 dir=$2 log line p f s
  echo "== test: every kernel of the tensor specs compiled as $dialect"
  log=$(mktemp)
  set +e
  LUA_PATH="$root/lua/?.lua;$root/lua/?/init.lua;;" LUA_CPATH="$root/build-debug/lua/?.so;;" \
    lua5.4 scripts/check_gpu_sources.lua "$dialect" "$dir" 2>&1 | tee "$log" | grep -v '^ok - '
  set -e
  line=$(grep '^check_gpu_sources: [0-9]* passed' "$log" | tail -n 1 || true)
  rm -f "$log"
  p=$(sed -n 's/^check_gpu_sources: \([0-9]*\) passed.*/\1/p' <<<"$line")
  f=$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")
  s=$(sed -n 's/.* \([0-9]*\) skipped.*/\1/p' <<<"$line")
  if [ -z "$p" ] || [ -z "$f" ]; then
    echo "test: check_gpu_sources $dialect stopped before its summary; counted as 1 failure"
    failed=$((failed + 1))
    return
  fi
  passed=$((passed + p))
  failed=$((failed + f))
  pending=$((pending + ${s:-0}))
}

# The last line, the totals; the exit status says whether anything failed.
finish() {
  local summary="$passed passed, $failed failed"
  [ "$pending" -gt 0 ] && summary+=", $pending skipped"
  echo "$summary"
  [ "$failed" -eq 0 ]
}

# --- luacheck -----------------------------------------------------------------------------
# Every Lua file of the tree, with .luacheckrc's settings: zero warnings is one passed check.
echo "== test: luacheck"
if luacheck_out=$(luacheck . --formatter plain 2>&1); then
  passed=$((passed + 1))
  echo "luacheck: no warnings"
else
  echo "$luacheck_out"
  echo "test: luacheck found warnings; counted as 1 failure"
  failed=$((failed + 1))
fi

# --- Debug build ---------------------------------------------------------------------------
debug_built=0
if build build-debug Debug; then debug_built=1; fi

# --- the quick tier: the Debug suite without SLOW_SPECS, and nothing else ----------------
if [ "$quick" = 1 ]; then
  if [ "$debug_built" = 1 ]; then
    for spec in spec/*/*_spec.lua; do
      slow=0
      for name in "${SLOW_SPECS[@]}"; do [ "spec/${name}_spec.lua" = "$spec" ] && slow=1; done
      [ "$slow" = 1 ] || spec_paths+=("$spec")
    done
    run_specs "Debug, quick tier" build-debug ""
  else
    failed=$((failed + 1))
  fi
  finish
  exit
fi

# --- Sanitize (ASan + UBSan), started in the background ---------------------------------
# Stock lua5.4 is not sanitized: to load the sanitized tcl.so it needs the ASan runtime
# preloaded, and its own allocations are not checked for leaks (detect_leaks=0); a huge
# allocation returns NULL as the C library does (allocator_may_return_null=1), so the
# out-of-memory error paths run under ASan too. A lua5.4
# wrapper put first on PATH does both, for busted and for every lua5.4 a spec starts. Other
# programs started by specs must not inherit those settings: the sanitized `tcl` and C test
# programs check for leaks, and cc, cmake, sh... run without ASan. So busted loads
# spec/support/child_env.lua (building on spec/support/child_env.c), which gives its children
# the values the wrapper saw, kept in TCLC_CHILD_*.
# The sanitized suite runs while the Debug runs below do (busted is one thread: the two
# share the machine's cores); its output follows theirs.
sanitized_lua() { # sanitized_lua WRAPPER ASAN_RUNTIME REAL_LUA
  cat >"$1" <<EOF_WRAPPER
#!/bin/sh
# lua5.4 for the sanitized spec run, written by scripts/test.sh: $3 with the ASan runtime
# preloaded and leak checks off; the values it replaces go to TCLC_CHILD_* (see child_env.c).
if [ "\${LD_PRELOAD+set}" = set ]; then export TCLC_CHILD_LD_PRELOAD="\$LD_PRELOAD"; else unset TCLC_CHILD_LD_PRELOAD; fi
if [ "\${ASAN_OPTIONS+set}" = set ]; then export TCLC_CHILD_ASAN_OPTIONS="\$ASAN_OPTIONS"; else unset TCLC_CHILD_ASAN_OPTIONS; fi
export LD_PRELOAD="$2\${LD_PRELOAD:+:\$LD_PRELOAD}"
export ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}detect_leaks=0:allocator_may_return_null=1"
exec "$3" "\$@"
EOF_WRAPPER
  chmod +x "$1"
}

asan_label="Sanitize (ASan+UBSan)"
asan_log="" asan_job=""
if build build-asan Sanitize; then
  asan_lib=$(gcc -print-file-name=libasan.so)
  support="$root/build-asan/spec-support"
  mkdir -p "$support/bin"
  if [[ "$asan_lib" != /* ]] || [ ! -e "$asan_lib" ]; then
    echo "test: gcc has no libasan.so (apt-get install gcc); cannot run the sanitized specs" >&2
    failed=$((failed + 1))
  elif ! cc -shared -fPIC -O1 -o "$support/tclc_child_env.so" spec/support/child_env.c; then
    echo "test: could not build spec/support/child_env.c" >&2
    failed=$((failed + 1))
  else
    sanitized_lua "$support/bin/lua5.4" "$asan_lib" "$(command -v lua5.4)"
    asan_log=$(mktemp)
    echo "== test: specs against $asan_label (build-asan/) started; its output follows the Debug runs'"
    spec_run "$asan_log" "$asan_label" build-asan spec/support/child_env.lua \
      PATH="$support/bin:$PATH" TCLC_CHILD_ENV_LIB="$support/tclc_child_env.so" \
      UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" &
    asan_job=$!
  fi
else
  failed=$((failed + 1))
fi

# --- Debug -------------------------------------------------------------------------------
# The whole suite on the default device (CPU), then the Tensor API's specs again on EMU, the
# reference interpreter (the differential spec compares the two devices directly).
if [ "$debug_built" = 1 ]; then
  run_specs Debug build-debug ""
  spec_paths=(spec/api/tensor_*_spec.lua)
  run_specs "Debug, tensor specs on EMU" build-debug "" DEVICE=EMU
  # EMU's GPU mode with each GPU target's capabilities: kernels get workgroups, local memory
  # and barriers as on the GPU, and the interpreter reports any race between threads
  # and every kernel of those runs written in the target's language, then compiled for real:
  # CUDA C by NVRTC (sm_75, sm_80, sm_90) and ptxas, Metal by clang++ against a stand-in header
  gpu_sources=$(mktemp -d)
  mkdir -p "$gpu_sources/cuda" "$gpu_sources/metal"
  run_specs "Debug, tensor specs on EMU's GPU mode (CUDA)" build-debug "" DEVICE=EMU TCL_EMU_GPU=CUDA \
    TCL_RENDER_DUMP="$gpu_sources/cuda"
  run_specs "Debug, tensor specs on EMU's GPU mode (Metal)" build-debug "" DEVICE=EMU TCL_EMU_GPU=METAL \
    TCL_RENDER_DUMP="$gpu_sources/metal"
  spec_paths=()
  check_gpu_sources cuda "$gpu_sources/cuda"
  check_gpu_sources metal "$gpu_sources/metal"
  rm -rf "$gpu_sources"
else
  failed=$((failed + 1))
fi

# --- Sanitize: its results -------------------------------------------------------------
if [ -n "$asan_job" ]; then
  asan_rc=0
  wait "$asan_job" || asan_rc=$?
  cat "$asan_log"
  spec_count "$asan_log" "$asan_label" "$asan_rc"
  rm -f "$asan_log"
fi

# --- TSan (ThreadSanitizer) -------------------------------------------------------------
# Several states realizing on threads at once (tests/c/states_on_threads.c), built with
# ThreadSanitizer: a data race between states is a report and a failure. Only that program
# and the library under it are built.
echo "== test: building TSan in build-tsan/ (states_on_threads)"
tsan_log=$(mktemp)
if cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=TSan >"$tsan_log" 2>&1 &&
   cmake --build build-tsan -j "$jobs" --target states_on_threads >>"$tsan_log" 2>&1; then
  echo "== test: states on threads under ThreadSanitizer"
  set +e
  TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}" build-tsan/tests/states_on_threads 4 100 2>&1 | tee "$tsan_log"
  rc=${PIPESTATUS[0]}
  set -e
  line=$(grep '^states_on_threads: ' "$tsan_log" | tail -n 1 || true)
  p=$(sed -n 's/^states_on_threads: \([0-9]*\) passed.*/\1/p' <<<"$line")
  f=$(sed -n 's/.* \([0-9]*\) failed$/\1/p' <<<"$line")
  if [ -z "$p" ] || [ -z "$f" ]; then
    echo "test: states_on_threads under TSan stopped before its summary (exit status $rc); counted as 1 failure"
    failed=$((failed + 1))
  else
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
      echo "test: states_on_threads under TSan exited with status $rc (a ThreadSanitizer report?); counted as 1 failure"
      failed=$((failed + 1))
    fi
  fi
else
  cat "$tsan_log"
  echo "test: building TSan in build-tsan/ failed" >&2
  failed=$((failed + 1))
fi
rm -f "$tsan_log"

finish
