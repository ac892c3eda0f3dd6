#!/usr/bin/env bash
# viewer_screenshots.sh — remakes the viewer's screenshots in docs/images/ (the README and
# docs/guide/viewer.md show them): records one SGD step of a small MLP with tcl.viz
# (spec/support/viz_mlp_step.lua: the run spec/viz/browser_spec.lua opens too), opens the page
# in headless Chromium, and saves two views: a realize (the graph coloured by kernel) and a
# kernel's passes. Needs a build (build/, or TCL_BUILD_DIR) and chromium (scripts/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TCL_BUILD_DIR:-$root/build}
[ -x "$build/tcl" ] || { echo "viewer_screenshots: no $build/tcl (run scripts/quickstart.sh, or set TCL_BUILD_DIR)" >&2; exit 1; }
command -v chromium >/dev/null || { echo "viewer_screenshots: no chromium (run scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/mlp_step.lua" <<'LUA'
local data = dofile(arg[2])() -- spec/support/viz_mlp_step.lua: the run the browser spec opens too
tcl.viz.save(arg[1], data)
-- the kernel to show: the one whose passes change the most (the largest growth in one pass)
local function count(root)
  local seen, stack, n = {}, { root }, 0
  while #stack > 0 do
    local id = table.remove(stack)
    if not seen[id] then
      seen[id], n = true, n + 1
      for _, s in ipairs(data.nodes[id].src) do stack[#stack + 1] = s end
    end
  end
  return n
end
local best, best_kernel, best_pass = -1, 1, 1
for k, kernel in ipairs(data.kernels) do
  for p, pass in ipairs(kernel.passes) do
    local growth = count(pass.after) - count(pass.before)
    if pass.ran and growth > best and count(pass.after) < 80 then best, best_kernel, best_pass = growth, k, p end
  end
end
print(string.format("kernel=%d&pass=%d", best_kernel, best_pass))
LUA

hash=$(cd "$work" && TCL_LUA_DIR="$root/lua" "$build/tcl" mlp_step.lua page.html "$root/spec/support/viz_mlp_step.lua")
shoot() { # hash output height
  env -u LD_PRELOAD timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$work/profile" --virtual-time-budget=5000 --window-size=1400,"$3" \
    --screenshot="$2" "file://$work/page.html#$1" 2>/dev/null
}
mkdir -p "$root/docs/images"
shoot "$hash" "$root/docs/images/viewer-kernel.png" 1400
shoot "realize=1" "$root/docs/images/viewer-realize.png" 900
echo "viewer_screenshots: docs/images/viewer-kernel.png ($hash), docs/images/viewer-realize.png"
