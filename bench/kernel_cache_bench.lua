-- bench/kernel_cache_bench.lua — what the in-memory kernel cache (tcl.kernel_cache) and the
-- CPU JIT cost per kernel: `batches` batches of `per_batch` distinct tiny kernels (x + c with
-- a new constant c each time, one realize each), and per batch the time per 1,000 kernels
-- (wall clock, and CPU time of the process's threads, steadier on a busy machine),
-- the process's RSS, its memory mappings (/proc/self/maps lines), the cache's entries and
-- accounted bytes against its limit, and the objects the JIT holds.
--
--   CACHELEVEL=0 TCLC_LUA_DIR=$PWD/lua build-rel/tcl bench/kernel_cache_bench.lua \
--     [per_batch 1000] [batches 8] [limit_mib]
--
-- Run it with CACHELEVEL=0 (no disk cache) so that every kernel is compiled. Not a test: it
-- prints figures. Linux only (/proc).
--
--   ... bench/kernel_cache_bench.lua loads [per_batch 2000] [batches 10]
--
-- times the JIT alone: one kernel's object code, its entry renamed (same length) to make
-- distinct objects, loaded by runtime.cpu_program and kept, per batch the time per 1,000
-- loads and the mappings: a load must cost the same with 20,000 kernels loaded as with none.
local tcl = require "tcl"
local core = require "tcl.core"
local runtime = require "tcl.runtime"

local function rss_bytes()
  local f = assert(io.open("/proc/self/status"))
  local kb = f:read("a"):match("VmRSS:%s*(%d+)")
  f:close()
  return tonumber(kb) * 1024
end

local function mappings()
  local n = 0
  for _ in io.lines("/proc/self/maps") do n = n + 1 end
  return n
end

local function load_only(per_batch, batches)
  local x = tcl.Tensor.arange(16):cast("float32"):realize()
  -- the compiled description of x + 0.5 (the CPU backend's program keeps object, entry, params)
  local captured
  local llvm_backend = require "tcl.codegen.devices.llvm"
  local build_many = llvm_backend.build_many
  llvm_backend.build_many = function(jobs)
    local programs = build_many(jobs)
    captured = captured or programs[1]
    return programs
  end
  ;(x + 0.5):realize()
  llvm_backend.build_many = build_many
  local template = captured.entry
  local prefix = template:sub(1, #template - 8)
  local kept = {} -- the programs stay loaded
  print(string.format("loads of one kernel's object code renamed (entry %s, %d bytes)", template, #captured.object))
  print("batch  loaded  s/1k loads  mappings")
  local n = 0
  for b = 1, batches do
    local start = core.clock()
    for _ = 1, per_batch do
      n = n + 1
      local entry = prefix .. string.format("%08x", n)
      kept[n] = runtime.cpu_program({ object = captured.object:gsub(template, entry), entry = entry,
        nparams = #captured.params, params = captured.params, parallel_size = captured.parallel_size })
    end
    print(string.format("%5d  %6d  %10.3f  %8d", b, #kept, (core.clock() - start) * 1000 / per_batch, mappings()))
  end
end

if arg and arg[1] == "loads" then
  load_only(tonumber(arg[2]) or 2000, tonumber(arg[3]) or 10)
  return
end

local per_batch = tonumber(arg and arg[1]) or 1000
local batches = tonumber(arg and arg[2]) or 8
local limit_mib = tonumber(arg and arg[3])
if limit_mib then tcl.kernel_cache.set_limit(math.floor(limit_mib * (1 << 20))) end

local MIB = 1 << 20

-- The bytes of kernel code and data the JIT holds, where it says (runtime.cpu_jit_stats).
local function jit_code_mib()
  if not runtime.cpu_jit_stats then return "-" end
  return string.format("%.1f", runtime.cpu_jit_stats().used_bytes / MIB)
end
local x = tcl.Tensor.arange(16):cast("float32"):realize()
local stats = tcl.kernel_cache.stats()
local rss0, maps0 = rss_bytes(), mappings()
print(string.format("limit %.1f MiB, %d kernels per batch; at start RSS %.1f MiB, %d mappings",
  stats.limit / MIB, per_batch, rss0 / MIB, maps0))
print("batch  s/1k wall  s/1k CPU  RSS MiB  +RSS MiB  Lua heap MiB  JIT code MiB  mappings  entries  accounted MiB" ..
  "  evictions  JIT objects")
local n = 0
for b = 1, batches do
  local start, cpu_start = core.clock(), os.clock()
  for _ = 1, per_batch do
    n = n + 1
    -- a constant no earlier kernel had: a new kernel, compiled
    (x + (n * 0.001 + 0.0001)):realize()
  end
  local seconds, cpu_seconds = core.clock() - start, os.clock() - cpu_start
  stats = tcl.kernel_cache.stats()
  local rss = rss_bytes()
  print(string.format("%5d  %9.2f  %8.2f  %7.1f  %8.1f  %12.1f  %12s  %8d  %7d  %13.1f  %9d  %11d", b,
    seconds * 1000 / per_batch, cpu_seconds * 1000 / per_batch, rss / MIB, (rss - rss0) / MIB,
    collectgarbage("count") / 1024, jit_code_mib(), mappings(), stats.entries, stats.bytes / MIB, stats.evictions,
    runtime.cpu_loaded()))
end
collectgarbage()
collectgarbage()
print(string.format("after a full GC: RSS %.1f MiB, %d mappings, %d JIT objects", rss_bytes() / MIB, mappings(),
  runtime.cpu_loaded()))
