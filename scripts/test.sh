#!/usr/bin/env bash
# test.sh — the one test command, for a fresh Debian 12 machine or a working copy:
#   1. scripts/setup.sh installs whatever Debian packages are missing;
#   2. builds Debug in build/ and Sanitize (ASan + UBSan) in build-asan/;
#   3. runs the whole busted suite (spec/**/*_spec.lua) against each build.
# Specs find the build under test in TCLC_BUILD_DIR. The last line is the total of both
# runs, "N passed, N failed[, N skipped]"; the exit status is non-zero when a test failed,
# a build failed or busted stopped early. A build or run that fails without test counts
# adds 1 to "failed", so that line never reads "0 failed" on a failure.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/setup.sh

jobs=$(nproc 2>/dev/null || echo 2)
busted_bin=$(command -v busted || true)
if [ -z "$busted_bin" ]; then
  echo "test: busted not found (apt-get install lua-busted)" >&2
  exit 1
fi

passed=0 failed=0 pending=0
export TCLC_SOURCE_DIR="$root"

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

# run_specs LABEL DIR HELPER [VAR=value ...]: runs busted under stock lua5.4 against DIR,
# with busted's --helper HELPER (none if "") and the given variables set for the
# interpreter, and adds its counts to the totals.
run_specs() {
  local label=$1 dir=$2 helper=$3
  shift 3
  local log rc summary
  echo "== test: specs against $label ($dir/)"
  log=$(mktemp)
  set +e
  env TCLC_BUILD_DIR="$root/$dir" "$@" \
    lua5.4 "$busted_bin" -o spec/support/summary_output.lua ${helper:+--helper="$helper"} 2>&1 \
    | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  summary=$(grep '^tclc-summary ' "$log" | tail -n 1 || true)
  rm -f "$log"
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

# --- Debug -------------------------------------------------------------------------------
if build build Debug; then
  run_specs Debug build ""
else
  failed=$((failed + 1))
fi

# --- Sanitize (ASan + UBSan) -------------------------------------------------------------
# Stock lua5.4 is not sanitized, so the ASan runtime is preloaded for it to load the
# sanitized tcl.so, and its own leaks are not checked (detect_leaks=0). Programs started by
# specs must not inherit either setting: the sanitized `tcl` and C test programs check leaks,
# and cc, cmake, sh... should run without ASan. spec/support/child_env.lua (a busted helper
# loading spec/support/child_env.c) restores the script's values for them from TCLC_CHILD_*.
if build build-asan Sanitize; then
  asan_lib=$(gcc -print-file-name=libasan.so)
  child_env_lib="$root/build-asan/spec-support/tclc_child_env.so"
  mkdir -p "$(dirname "$child_env_lib")"
  if [[ "$asan_lib" != /* ]] || [ ! -e "$asan_lib" ]; then
    echo "test: gcc has no libasan.so (apt-get install gcc); cannot run the sanitized specs" >&2
    failed=$((failed + 1))
  elif ! cc -shared -fPIC -O1 -o "$child_env_lib" spec/support/child_env.c; then
    echo "test: could not build spec/support/child_env.c" >&2
    failed=$((failed + 1))
  else
    child_vars=(TCLC_CHILD_ENV_LIB="$child_env_lib")
    [ -n "${LD_PRELOAD+set}" ] && child_vars+=(TCLC_CHILD_LD_PRELOAD="$LD_PRELOAD")
    [ -n "${ASAN_OPTIONS+set}" ] && child_vars+=(TCLC_CHILD_ASAN_OPTIONS="$ASAN_OPTIONS")
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
    run_specs "Sanitize (ASan+UBSan)" build-asan spec/support/child_env.lua \
      "${child_vars[@]}" \
      LD_PRELOAD="$asan_lib${LD_PRELOAD:+:$LD_PRELOAD}" \
      ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  fi
else
  failed=$((failed + 1))
fi

summary="$passed passed, $failed failed"
[ "$pending" -gt 0 ] && summary+=", $pending skipped"
echo "$summary"
[ "$failed" -eq 0 ]
