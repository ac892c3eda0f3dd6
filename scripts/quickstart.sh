#!/usr/bin/env bash
# quickstart.sh — the one command to try tcl: installs missing Debian packages
# (scripts/setup.sh), builds Release in build/, and runs examples/quickstart.lua with the
# built `tcl` program. Extra arguments are passed to the script.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

scripts/setup.sh

echo "== quickstart: building Release in build/"
log=$(mktemp)
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1; then
  cat "$log"
  rm -f "$log"
  echo "quickstart: configuring failed" >&2
  exit 1
fi
rm -f "$log"
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target tcl

if [ ! -x build/tcl ]; then
  echo "quickstart: build/tcl was not built" >&2
  exit 1
fi
echo "== quickstart: build/tcl examples/quickstart.lua"
exec build/tcl examples/quickstart.lua "$@"
