-- bench/quant_bench.lua — products with quantized weights (tcl.api.gguf's block types, the
-- dequantization a lazy Tensor expression the product's kernel computes) against float32, and
-- torch's float32 in the same run.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/quant_bench.lua [part ...]
--
-- Parts (default both):
--   matvec  x @ W^T for x of 1 x K and W of N x K: 1x4096 @ 4096x4096 (a LLaMA-7B projection)
--           and 1x768 @ 768x3072 (GPT-2 small's MLP), W in float32, Q8_0, Q4_0 and Q4_K; each
--           row gives the kernel time (median of BENCH_RUNS jitted calls, tcl.profile), the
--           bytes a call must move (the weight's bytes as stored, x and the output) and the
--           GB/s that makes; torch's float32 matvec (torch.mv on the same sizes) in the same run.
--           The weight is an argument of the jitted function; "blocks in the plan" times the
--           same product with the blocks captured as a constant of the plan (as a model's weights
--           are), where what does not depend on x is computed once at capture. BENCH_SMALL=1
--           runs the GPT-2 size alone.
--   fusion  the realize-point rule for dequantizations (tcl.schedule.realize_points,
--           DEQUANT_ROWS): x @ dequant(W)^T for M rows of x, K = N = 1024, with the
--           dequantization fused into the product and with a float32 copy of W stored first by a
--           kernel of its own (DEQUANT_ROWS = 0), for M = 1 .. 256.
-- THREADS sets tcl's threads (default: the cores) and torch's. The blocks hold random bytes
-- with the float16 scales set to 1/64 and 1/128 (a random float16 can be a NaN or a subnormal,
-- which would time other work).
local support = require "bench.support"
local shell_quote, capture = support.shell_quote, support.capture

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 11

local tcl = require "tcl"
local gguf = require "tcl.api.gguf"
local realize_points = require "tcl.schedule.realize_points"
local Tensor = tcl.Tensor

local threads = tonumber(os.getenv("THREADS") or "") or tonumber(capture("nproc")) or 1

-- block types: values per block, bytes per block, the byte offsets of their float16 scales
local TYPES = {
  Q8_0 = { 32, 34, { 0 } }, Q4_0 = { 32, 18, { 0 } }, Q4_K = { 256, 144, { 0, 2 } },
}
local SCALE_BITS = { 0x2400, 0x2000 } -- 1/64, 1/128

-- Raw blocks of type_name for an n x k weight, as a uint8 tensor {blocks, bytes}.
local function random_blocks(type_name, n, k)
  local per, bytes, scales = table.unpack(TYPES[type_name])
  local blocks = n * k // per
  local rows = {}
  local chunk = {}
  for b = 1, blocks do
    for i = 1, bytes do chunk[i] = math.random(0, 255) end
    for j, at in ipairs(scales) do
      chunk[at + 1], chunk[at + 2] = SCALE_BITS[j] & 255, SCALE_BITS[j] >> 8
    end
    rows[b] = string.char(table.unpack(chunk))
  end
  return Tensor.from_bytes(table.concat(rows), "uint8", { blocks, bytes }, { device = "CPU" }):realize()
end

-- The median kernel seconds of jitted fn(...)
local function kernel_seconds(fn, ...)
  local seconds, _, kernels = support.jitted_median(tcl, RUNS, fn, ...)
  if os.getenv("BENCH_KERNELS") then
    for _, kern in ipairs(kernels) do io.write(string.format("    %s %.3f ms\n", kern.name, kern.seconds * 1e3)) end
  end
  return seconds
end

local TORCH = [[
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
runs = int(sys.argv[2])
def med(f):
    for _ in range(5): f()
    ts = []
    for _ in range(runs):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[len(ts) // 2]
with torch.no_grad():
    for i in range(3, len(sys.argv), 2):
        n, k = int(sys.argv[i]), int(sys.argv[i + 1])
        w = torch.rand(n, k); x = torch.rand(k); out = torch.empty(n)
        print("torch_ms", n, k, med(lambda: torch.mv(w, x, out=out)) * 1e3)
]]

local function torch_matvec_ms(sizes)
  local args = {}
  for _, s in ipairs(sizes) do args[#args + 1] = s[1] .. " " .. s[2] end
  local out = capture(support.python() .. " -c " .. shell_quote(TORCH) .. " " .. threads .. " " .. RUNS .. " "
    .. table.concat(args, " "))
  local ms = {}
  for n, k, v in out:gmatch("torch_ms (%d+) (%d+) ([%d.e+-]+)") do ms[n .. "x" .. k] = tonumber(v) end
  if next(ms) == nil then print("  (torch: " .. out:gsub("\n", " "):sub(1, 200) .. ")") end
  return ms
end

local parts = {}

function parts.matvec()
  local sizes = os.getenv("BENCH_SMALL") and { { 3072, 768 } } or { { 4096, 4096 }, { 3072, 768 } } -- N, K
  local torch = torch_matvec_ms(sizes)
  print(string.format("== matvec, %d threads: kernel ms (median of %d), bytes moved per call, GB/s", threads, RUNS))
  for _, s in ipairs(sizes) do
    local n, k = s[1], s[2]
    local x = Tensor.randn({ 1, k }, { device = "CPU" }):realize()
    local f32_ms
    for _, type_name in ipairs { "F32", "Q8_0", "Q4_0", "Q4_K" } do
      -- the weight is an argument of the jitted function: one that is not would be a constant
      -- of the plan, its dequantization hoisted out of the replays
      local ms, weight_bytes, constant_ms
      if type_name == "F32" then
        local w = Tensor.randn({ n, k }, { device = "CPU" }):realize()
        weight_bytes = n * k * 4
        ms = kernel_seconds(function(a, b) return a:matmul(b:transpose(1, 2)) end, x, w) * 1e3
      else
        local raw = random_blocks(type_name, n, k)
        weight_bytes = raw.shape[1] * raw.shape[2]
        ms = kernel_seconds(function(a, blocks)
          return a:matmul(gguf.dequantize(blocks, type_name, { n, k }):transpose(1, 2))
        end, x, raw) * 1e3
        -- the blocks a constant of the plan (a model's weights captured by tcl.jit): what does
        -- not depend on x (Q4_K's sub-block scales) is computed once, at capture
        constant_ms = kernel_seconds(function(a)
          return a:matmul(gguf.dequantize(raw, type_name, { n, k }):transpose(1, 2))
        end, x) * 1e3
      end
      f32_ms = f32_ms or ms
      local bytes = weight_bytes + (k + n) * 4
      print(string.format("  1x%d @ %dx%d %-5s %8.3f ms  %6.2f MB  %6.1f GB/s  %.2fx of tcl f32%s", k, k, n,
        type_name, ms, bytes / 1e6, bytes / (ms * 1e-3) / 1e9, f32_ms / ms,
        type_name == "F32" and torch[n .. "x" .. k] and string.format("   torch f32 %.3f ms (%.1f GB/s)",
          torch[n .. "x" .. k], bytes / (torch[n .. "x" .. k] * 1e-3) / 1e9)
          or string.format("   blocks in the plan %.3f ms", constant_ms)))
    end
  end
end

-- the rows of x the fusion part measures (BENCH_ROWS: a comma-separated list)
local MS = {}
for m in (os.getenv("BENCH_ROWS") or "1,8,16,32,64,128,256"):gmatch("%d+") do MS[#MS + 1] = tonumber(m) end

function parts.fusion()
  local k, n = 1024, 1024
  print(string.format("== x @ dequant(W)^T, K = N = %d, %d threads: kernel ms fused / stored float copy", k, threads))
  local saved = realize_points.DEQUANT_ROWS
  for _, type_name in ipairs { "Q8_0", "Q4_0", "Q4_K" } do
    local raw = random_blocks(type_name, n, k)
    local line = { string.format("  %-5s", type_name) }
    for _, m in ipairs(MS) do
      local x = Tensor.randn({ m, k }, { device = "CPU" }):realize()
      local times = {}
      for i, rows in ipairs { 1 << 30, 0 } do
        realize_points.DEQUANT_ROWS = rows
        times[i] = kernel_seconds(function(a, blocks)
          return a:matmul(gguf.dequantize(blocks, type_name, { n, k }):transpose(1, 2))
        end, x, raw) * 1e3
      end
      line[#line + 1] = string.format("M=%d %.3f/%.3f", m, times[1], times[2])
    end
    print(table.concat(line, "  "))
  end
  realize_points.DEQUANT_ROWS = saved
end

local which = {}
for i = 1, #(arg or {}) do which[#which + 1] = arg[i] end
if #which == 0 then which = { "matvec", "fusion" } end
for _, what in ipairs(which) do
  if not parts[what] then error("quant_bench: unknown part '" .. what .. "' (matvec, fusion)") end
  parts[what]()
end
