-- bench/cat_bench.lua — how the time to realize Tensor.cat grows with its number of pieces
-- (issue 33, item 17: one kernel over n pieces compiled in O(n^2)). For n pieces {i, -i}
-- (float32) and n = 250 ... 4000 by default: the kernels, the time schedule.create takes, the
-- time the kernels take to compile (lower.stats: LLVM or NVRTC, with the in-memory cache
-- cleared and a fresh disk cache, so every kernel compiles), and the whole realize.
--
--   TCL_CACHE=$(mktemp -d) LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' \
--     lua5.4 bench/cat_bench.lua [n ...]
--
-- Not a test: it prints figures. Set DEVICE for another device than the default.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.driver.lower"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"

local sizes = {}
for i, a in ipairs(arg or {}) do sizes[i] = math.tointeger(tonumber(a)) end
if #sizes == 0 then sizes = { 250, 500, 1000, 2000, 4000 } end

for _, n in ipairs(sizes) do
  if kernel_cache.clear then kernel_cache.clear() end
  local list = {}
  for i = 1, n do list[i] = tcl.Tensor({ i + 0.5, -i }, { dtype = "float32" }) end
  for _, t in ipairs(list) do t:realize() end
  local start = tcl.clock()
  local joined = tcl.Tensor.cat(list)
  local planned = tcl.clock()
  local kernels = #schedule.create({ joined.uop }).kernels
  local scheduled = tcl.clock()
  local before = lower.stats()
  joined:realize()
  local after = lower.stats()
  local done = tcl.clock()
  print(string.format("n %5d: %4d kernels (%d compiled), schedule %7.3f s, compile %7.3f s, realize %7.3f s",
    n, kernels, after.built - before.built, scheduled - planned,
    after.build_seconds - before.build_seconds, done - start))
end
