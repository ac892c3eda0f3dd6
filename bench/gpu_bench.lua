-- bench/gpu_bench.lua — the CUDA device against the best alternatives measured on the same GPU
-- in the same run: cuBLAS's matrix products and the device's copy bandwidth
-- (bench/gpu_baselines.c), and torch on CUDA when it is installed. Needs an NVIDIA GPU.
-- Figures are medians of device times (CUDA events around each kernel: tcl.profile of jitted
-- calls); softmax and gpt2 also print the time of a call whose kernels are queued back to back,
-- untimed, until the device has finished them (torch's figure is of that kind). Every matmul
-- is checked against a float32 product on the CPU (64 rows from the top and 64 from the
-- bottom of the output); a mismatch is printed as a failure.
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/gpu_bench.lua [part ...]
--
-- Parts (default all): mm_f32 mm_f16 mm_bf16 (N x N, N = GPU_BENCH_N, default 4096; each with
-- the heuristics and with BEAM=GPU_BENCH_BEAM, default 2, 0 skips), ew (a*b+1 on 2^26
-- float32), sum (2^26 float32), reductions (a column sum, a batch norm's per-channel sums and
-- x @ W with 32 rows, each against torch), softmax (4096 x 1024), softmax_rows (attention's shape: 12
-- heads x 1024 rows of 1024, a warp per row), conv (a float16 3x3 convolution, batch
-- 8, 64 -> 64 channels, 56 x 56, on tensor cores, against torch's), gpt2 (a GPT-2 small
-- layer's forward, batch 1 x 128 tokens, float32, against torch's TransformerEncoderLayer),
-- tc_configs (the float16 matmul once per tensor-core tile configuration of
-- tcl.heuristics.tensor_cores), variants (the ew and sum kernels with hand-picked opts, a
-- figure per list of opts). Each part runs in a child process with DEVICE=CUDA
-- (GPU_BENCH_DEVICE=EMU with EMU_GPU=CUDA runs the script on the interpreter, for trying it
-- without a GPU at a small N). BENCH_BUILD (default build-rel) names the build whose
-- bench/gpu_baselines is the baseline; BENCH_RUNS (default 21) the runs per median. Targets
-- (issue 13): float16 matmul with tensor cores >= 60 % of cuBLAS with BEAM, elementwise >= 85 %
-- of the copy bandwidth.
local support = require "bench.support"
local shell_quote, capture, figure = support.shell_quote, support.capture, support.figure

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 21
local N = tonumber(os.getenv("GPU_BENCH_N") or "") or 4096
local BEAM = tonumber(os.getenv("GPU_BENCH_BEAM") or "") or 2
local build = os.getenv("BENCH_BUILD") or "build-rel"
local self_path = arg and arg[0] or "bench/gpu_bench.lua"
local baselines = build .. "/bench/gpu_baselines"
-- the device the parts run on: CUDA; EMU (with EMU_GPU=CUDA) tries the script without a GPU
local DEVICE = os.getenv("GPU_BENCH_DEVICE") or "CUDA"

local function baseline(args)
  local figures = {}
  for name, value in capture(shell_quote(baselines) .. " " .. args):gmatch("figure (%S+) (%S+)") do
    figures[name] = tonumber(value)
  end
  return figures
end

local TORCH = [[
import sys, torch
if not torch.cuda.is_available(): sys.exit(0)
def med(f, runs=21):
    for _ in range(3): f()
    torch.cuda.synchronize(); ts = []
    for _ in range(runs):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts) // 2]
what = sys.argv[1]
with torch.no_grad():
    if what == "softmax":
        a = torch.rand(4096, 1024, device="cuda"); print("torch_ms", med(lambda: torch.softmax(a, -1)))
    elif what == "softmax_rows":
        a = torch.rand(12 * 1024, 1024, device="cuda"); print("torch_ms", med(lambda: torch.softmax(a, -1)))
    elif what == "ew":
        n = 1 << 26
        a = torch.rand(n, device="cuda"); b = torch.rand(n, device="cuda"); out = torch.empty(n, device="cuda")
        print("torch_ms", med(lambda: torch.addcmul(torch.ones(1, device="cuda"), a, b, out=out)))
    elif what == "sum":
        a = torch.rand(1 << 26, device="cuda"); print("torch_ms", med(lambda: a.sum()))
    elif what == "colsum":
        a = torch.rand(8192, 4096, device="cuda"); print("torch_ms", med(lambda: a.sum(0)))
    elif what == "bnsum":
        a = torch.rand(128, 32, 26, 26, device="cuda"); print("torch_ms", med(lambda: a.sum((0, 2, 3))))
    elif what == "xw":
        x = torch.rand(32, 3072, device="cuda"); w = torch.rand(3072, 768, device="cuda")
        print("torch_ms", med(lambda: x @ w))
    elif what == "conv":
        x = torch.rand(8, 64, 56, 56, device="cuda").half(); w = torch.rand(64, 64, 3, 3, device="cuda").half()
        print("torch_ms", med(lambda: torch.nn.functional.conv2d(x, w, padding=1)))
    elif what == "gpt2":
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                                 batch_first=True, norm_first=True).cuda().eval()
        x = torch.rand(1, 128, 768, device="cuda")
        mask = torch.nn.Transformer.generate_square_subsequent_mask(128, device="cuda")
        print("torch_ms", med(lambda: layer(x, src_mask=mask)))
]]

local function torch_ms(what)
  local out = capture("python3 -c " .. shell_quote(TORCH) .. " " .. what)
  return tonumber(out:match("torch_ms%s+([%d.e+-]+)"))
end

---------------------------------------------------------------------------------------------
-- the parts (run in a child process: `gpu_bench.lua --child part`); each prints lines
-- "figure <name> <value> <unit>" that the parent collects

local parts = {}

-- ||x - y|| / ||y|| of two CPU tensors, in float64.
local function relative_error(x, y)
  local d, r = 0, 0
  local xs, ys = x:cast("float32"):reshape(-1):tolist(), y:cast("float32"):reshape(-1):tolist()
  for i = 1, #ys do
    d = d + (xs[i] - ys[i]) ^ 2
    r = r + ys[i] ^ 2
  end
  return math.sqrt(d / r)
end

-- The N x N matmul of random inputs of dtype: kernel time, and its error on 128 rows.
local function matmul(tcl, dtype, name)
  local Tensor = tcl.Tensor
  local a = (Tensor.rand(N, N, { device = DEVICE }) - 0.5):cast(dtype):realize()
  local b = (Tensor.rand(N, N, { device = DEVICE }) - 0.5):cast(dtype):realize()
  local seconds, _, kernels = support.jitted_median(tcl, RUNS, function(x, y) return x:matmul(y) end, a, b)
  figure(name .. "_tcl_tflops", 2 * N ^ 3 / seconds * 1e-12, "TFLOP/s")
  figure(name .. "_tcl_ms", seconds * 1e3, "ms")
  for _, k in ipairs(kernels) do io.stderr:write(string.format("  kernel %s %.3f ms\n", k.name, k.seconds * 1e3)) end
  local out = a:matmul(b):to("CPU")
  local a_cpu, b_cpu = a:to("CPU"):cast("float32"), b:to("CPU"):cast("float32")
  local rows = 64
  local worst = 0
  for _, first in ipairs { 0, N - rows } do
    local ref = a_cpu:narrow(1, first + 1, rows):matmul(b_cpu)
    worst = math.max(worst, relative_error(out:narrow(1, first + 1, rows), ref))
  end
  figure(name .. "_relative_error", worst, "")
end

function parts.mm_f32(tcl) matmul(tcl, "float32", "mm_f32") end
function parts.mm_f16(tcl) matmul(tcl, "float16", "mm_f16") end
function parts.mm_bf16(tcl) matmul(tcl, "bfloat16", "mm_bf16") end

function parts.ew(tcl)
  local n = 1 << 26
  local a, b = tcl.Tensor.rand(n, { device = DEVICE }), tcl.Tensor.rand(n, { device = DEVICE })
  tcl.realize(a, b)
  local k = support.jitted_median(tcl, RUNS, function(x, y) return x * y + 1 end, a, b)
  figure("ew_tcl_gbs", 3 * 4 * n / k * 1e-9, "GB/s")
  local t = torch_ms("ew")
  if t then figure("ew_torch_gbs", 3 * 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

function parts.sum(tcl)
  local n = 1 << 26
  local a = tcl.Tensor.rand(n, { device = DEVICE }):realize()
  local k = support.jitted_median(tcl, RUNS, function(x) return x:sum() end, a)
  figure("sum_tcl_gbs", 4 * n / k * 1e-9, "GB/s")
  local t = torch_ms("sum")
  if t then figure("sum_torch_gbs", 4 * n / (t * 1e-3) * 1e-9, "GB/s") end
end

function parts.softmax(tcl)
  local a = tcl.Tensor.rand(4096, 1024, { device = DEVICE }):realize()
  local k = support.jitted_median(tcl, RUNS, function(x) return x:softmax(-1) end, a)
  figure("softmax_tcl_ms", k * 1e3, "ms")
  local queued = support.jitted_queued_median(tcl, RUNS, function(x) return x:softmax(-1) end, a)
  figure("softmax_tcl_queued_ms", queued * 1e3, "ms")
  local t = torch_ms("softmax")
  if t then figure("softmax_torch_ms", t, "ms") end
end

-- Reductions whose GPU layout EMU's memory profile found uncoalesced or serial: a column sum
-- (a bias gradient's shape), a batch norm's per-channel sums over N, H and W (the CNN of
-- examples/fashion_mnist.lua at batch 128), x @ W with few outputs (32 tokens through a GPT-2
-- MLP's second linear); each against torch, in GB/s of the bytes read.
function parts.reductions(tcl)
  local Tensor = tcl.Tensor
  local small = DEVICE ~= "CUDA" -- EMU tries the part on shapes it runs in seconds
  local cases = {
    { "colsum", small and { 512, 256 } or { 8192, 4096 }, function(x) return x:sum(1) end },
    { "bnsum", small and { 4, 32, 26, 26 } or { 128, 32, 26, 26 }, function(x) return x:sum({ 1, 3, 4 }) end },
  }
  for _, case in ipairs(cases) do
    local a = Tensor.rand(case[2], { device = DEVICE }):realize()
    local bytes = 4 * a:numel()
    local k = support.jitted_median(tcl, RUNS, case[3], a)
    figure(case[1] .. "_tcl_gbs", bytes / k * 1e-9, "GB/s")
    local t = torch_ms(case[1])
    if t then figure(case[1] .. "_torch_gbs", bytes / (t * 1e-3) * 1e-9, "GB/s") end
  end
  local x = Tensor.rand(32, small and 256 or 3072, { device = DEVICE }):realize()
  local w = Tensor.rand(small and 256 or 3072, small and 64 or 768, { device = DEVICE }):realize()
  local bytes = 4 * (x:numel() + w:numel())
  local k = support.jitted_median(tcl, RUNS, function(p, q) return p:matmul(q) end, x, w)
  figure("xw_tcl_gbs", bytes / k * 1e-9, "GB/s")
  local t = torch_ms("xw")
  if t then figure("xw_torch_gbs", bytes / (t * 1e-3) * 1e-9, "GB/s") end
end

-- Attention's softmax shape: 12 heads x 1024 queries, rows of 1024 keys: more rows than one
-- workgroup per row shares (tcl.heuristics.gpu: a warp per row).
function parts.softmax_rows(tcl)
  local a = tcl.Tensor.rand(12 * 1024, 1024, { device = DEVICE }):realize()
  local queued = support.jitted_queued_median(tcl, RUNS, function(x) return x:softmax(-1) end, a)
  figure("softmax_rows_tcl_queued_ms", queued * 1e3, "ms")
  local t = torch_ms("softmax_rows")
  if t then figure("softmax_rows_torch_ms", t, "ms") end
end

-- A float16 convolution (ResNet's 3x3 layer, batch 8, 64 -> 64 channels, 56 x 56, padding 1)
-- on tensor cores (its reduce ranges make K), against torch's (cuDNN).
function parts.conv(tcl)
  local Tensor = tcl.Tensor
  local x = (Tensor.rand(8, 64, 56, 56, { device = DEVICE }) - 0.5):cast("float16"):realize()
  local w = (Tensor.rand(64, 64, 3, 3, { device = DEVICE }) - 0.5):cast("float16"):realize()
  local function conv(a, b) return a:conv2d(b, nil, { padding = 1 }) end
  local seconds, _, kernels = support.jitted_median(tcl, RUNS, conv, x, w)
  for _, k in ipairs(kernels) do io.stderr:write(string.format("  kernel %s %.3f ms\n", k.name, k.seconds * 1e3)) end
  local flops = 2 * 8 * 64 * 56 * 56 * 64 * 9
  figure("conv_tcl_ms", seconds * 1e3, "ms")
  figure("conv_tcl_tflops", flops / seconds * 1e-12, "TFLOP/s")
  local t = torch_ms("conv")
  if t then figure("conv_torch_ms", t, "ms") end
end

function parts.gpt2(tcl)
  local layer, x = support.gpt2_layer(tcl) -- DEVICE=CUDA: its tensors are on the GPU
  local seconds, wall, kernels = support.jitted_median(tcl, RUNS, layer, x)
  figure("gpt2_tcl_ms", seconds * 1e3, "ms")
  figure("gpt2_tcl_wall_ms", wall * 1e3, "ms")
  figure("gpt2_tcl_queued_ms", support.jitted_queued_median(tcl, RUNS, layer, x) * 1e3, "ms")
  figure("gpt2_kernels", #kernels, "kernels")
  local t = torch_ms("gpt2")
  if t then figure("gpt2_torch_ms", t, "ms") end
end

-- The float16 matmul with each tile configuration BEAM tries (tcl.heuristics.tensor_cores:
-- TC's amount is the digits WM WN TM TN: warps along m and n, tiles per warp along m and n),
-- TC with that amount and nothing else, to see what the tiles are worth on this GPU. The parent
-- runs one child per configuration (GPU_BENCH_TC_ARG), so that a kernel that faults (a layout
-- the hardware reads otherwise) cannot take the CUDA context, and the others, down with it.
function parts.tc_configs(tcl)
  local tensor_cores = require "tcl.heuristics.tensor_cores"
  local default_heuristic = require "tcl.heuristics.default"
  local Tensor = tcl.Tensor
  local a = (Tensor.rand(N, N, { device = DEVICE }) - 0.5):cast("float16"):realize()
  local b = (Tensor.rand(N, N, { device = DEVICE }) - 0.5):cast("float16"):realize()
  -- every configuration's product against the default heuristic's: a configuration that computes
  -- wrong values (a fragment or tile layout the hardware reads otherwise) shows here, not only
  -- as a fast figure. Sums of 4096 products differ by their float16 rounding, about 0.01.
  local reference = a:matmul(b):float():realize()
  local only = math.tointeger(tonumber(os.getenv("GPU_BENCH_TC_ARG") or ""))
  for _, arg in ipairs(only and { only } or tensor_cores.BEAM_ARGS) do
    tcl.set_heuristic(function(k)
      if tensor_cores.match(k:graph(), k.caps.gpu) then k:apply("TC", 1, arg) else default_heuristic(k) end
    end)
    local ok, seconds = pcall(support.jitted_median, tcl, RUNS, function(x, y) return x:matmul(y) end, a, b)
    local difference = ok and ((a:matmul(b):float() - reference):abs():max():item())
    if ok then
      figure(string.format("tc_%04d_tflops", arg), 2 * N ^ 3 / seconds * 1e-12, "TFLOP/s")
      figure(string.format("tc_%04d_max_difference", arg), difference, difference > 0.1 and "WRONG" or "ok")
    else
      io.stderr:write(string.format("tc config %04d: %s\n", arg, tostring(seconds)))
    end
  end
  tcl.set_heuristic(nil)
end

-- Hand-picked opts for the elementwise and the sum kernels (on their large kernel only; the
-- others keep the default heuristic), to see which shapes this GPU rewards: a figure per list.
local VARIANTS = {
  ew = { { { "LOCAL", 1, 256 } }, { { "LOCAL", 1, 128 } }, { { "LOCAL", 1, 512 } }, { { "LOCAL", 1, 1024 } },
    { { "LOCAL", 1, 256 }, { "UPCAST", 1, 4 } }, { { "LOCAL", 1, 256 }, { "UPCAST", 1, 2 } },
    { { "UPCAST", 1, 4 }, { "LOCAL", 1, 256 } }, { { "LOCAL", 1, 128 }, { "UPCAST", 1, 4 } } },
  sum = { { { "GROUP", 1, 256 } }, { { "GROUPTOP", 1, 256 } }, { { "GROUP", 1, 128 } }, { { "GROUP", 1, 512 } },
    { { "GROUP", 1, 1024 } }, { { "GROUP", 1, 256 }, { "UNROLL", 1, 4 } }, { { "GROUP", 1, 256 }, { "UNROLL", 2, 4 } },
    { { "GROUP", 1, 128 }, { "LOCAL", 1, 2 } } },
}

function parts.variants(tcl)
  local default = require "tcl.heuristics.default"
  local n = 1 << 26
  local a, b = tcl.Tensor.rand(n, { device = DEVICE }), tcl.Tensor.rand(n, { device = DEVICE })
  tcl.realize(a, b)
  local work = { ew = function(x, y) return x * y + 1 end, sum = function(x) return x:sum() end }
  for _, what in ipairs { "ew", "sum" } do
    for _, opts in ipairs(VARIANTS[what]) do
      local applied
      tcl.set_heuristic(function(k)
        if k:work() < n then return default(k) end
        for _, o in ipairs(opts) do k:try_apply(o[1], o[2], o[3]) end
        applied = k:opts()
      end)
      local ok, seconds = pcall(support.jitted_median, tcl, RUNS, work[what], a, b)
      local label = {}
      for i, o in ipairs(type(applied) == "table" and applied or {}) do
        label[i] = type(o) == "table" and table.concat(o, "_") or tostring(o)
      end
      local name = what .. "_" .. (#label > 0 and table.concat(label, "+") or tostring(applied or "none"))
      if ok then figure(name:gsub("[^%w_+]", "_") .. "_gbs", (what == "ew" and 12 or 4) * n / seconds * 1e-9, "GB/s")
      else io.stderr:write(name .. ": " .. tostring(seconds) .. "\n") end
    end
  end
  tcl.set_heuristic(nil)
end

---------------------------------------------------------------------------------------------
-- the parent

local ORDER = { "mm_f32", "mm_f16", "mm_bf16", "ew", "sum", "reductions", "softmax", "softmax_rows", "conv", "gpt2",
  "tc_configs", "variants" }

local function run_child(what, env_text)
  local command = string.format("%s DEVICE=%s lua5.4 %s --child %s", env_text or "", DEVICE, shell_quote(self_path),
    what)
  local out = capture(command)
  local figures = {}
  for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
  io.write((out:gsub("figure [^\n]*\n", "")))
  return figures
end

local function ratio_text(mine, best, higher, target)
  if not (mine and best) then return "" end
  local ratio = higher and mine / best or best / mine
  local text = string.format("   ratio %.2f", ratio)
  if target then text = text .. string.format(" (target %.2f: %s)", target, ratio >= target and "PASS" or "MISS") end
  return text
end

local DTYPES = { mm_f32 = "float32", mm_f16 = "float16", mm_bf16 = "bfloat16" }

local function report_matmul(what)
  local dtype = DTYPES[what]
  local base = baseline(string.format("gemm %s %d %d", dtype, N, RUNS))
  local cublas = base[string.format("cublas_%s_%d_tflops", dtype, N)]
  for _, setting in ipairs { { label = "heuristics", env = "" }, { label = "BEAM=" .. BEAM, env = "BEAM=" .. BEAM } } do
    if setting.env == "" or BEAM > 0 then
      local f = run_child(what, setting.env)
      local mine = f[what .. "_tcl_tflops"]
      local err = f[what .. "_relative_error"]
      local limit = dtype == "float32" and 1e-4 or 2e-2
      print(string.format("  %-8s %-10s tcl %8.2f TFLOP/s   cuBLAS %8.2f%s   error %.2e %s", what, setting.label,
        mine or 0 / 0, cublas or 0 / 0,
        ratio_text(mine, cublas, true, (dtype == "float16" and setting.env ~= "") and 0.60 or nil),
        err or 0 / 0, (err and err <= limit) and "ok" or "WRONG"))
    end
  end
  if dtype == "float32" and base[string.format("cublas_tf32_%d_tflops", N)] then
    print(string.format("  %-8s (cuBLAS with TF32 tensor cores: %.2f TFLOP/s)", what,
      base[string.format("cublas_tf32_%d_tflops", N)]))
  end
end

local copy_gbs
local function copy_bandwidth()
  if copy_gbs == nil then copy_gbs = baseline("copy " .. (1 << 29) .. " " .. RUNS).copy_gbs or false end
  return copy_gbs or nil
end

-- Every configuration of BEAM_ARGS in a child of its own (GPU_BENCH_TC_SECONDS, default 60,
-- bounds each), the warpgroup ones (Hopper's wgmma) first; the fastest correct one last.
local function report_tc_configs()
  require "tcl" -- its module searcher finds tcl's Lua files; no device opens here
  local tensor_cores = require "tcl.heuristics.tensor_cores"
  local args = {}
  for _, arg in ipairs(tensor_cores.BEAM_ARGS) do args[#args + 1] = arg end
  local function warpgroup(arg) return arg % 100000 >= 30000 end
  table.sort(args, function(x, y)
    if warpgroup(x) ~= warpgroup(y) then return warpgroup(x) end
    return x < y
  end)
  local seconds = tonumber(os.getenv("GPU_BENCH_TC_SECONDS") or "") or 60
  local best, best_tflops
  for _, arg in ipairs(args) do
    local f = run_child("tc_configs", string.format("GPU_BENCH_TC_ARG=%d timeout %d env", arg, seconds))
    local tflops, difference = f[string.format("tc_%04d_tflops", arg)], f[string.format("tc_%04d_max_difference", arg)]
    local right = difference and difference <= 0.1
    print(string.format("  TC(1,%d)%s %8.2f TFLOP/s   max difference %s", arg, string.rep(" ", 8 - #tostring(arg)),
      tflops or 0 / 0, difference and string.format("%.3g %s", difference, right and "ok" or "WRONG") or "(failed)"))
    if right and tflops and (not best_tflops or tflops > best_tflops) then best, best_tflops = arg, tflops end
  end
  if best then print(string.format("  fastest correct configuration: TC(1,%d), %.2f TFLOP/s", best, best_tflops)) end
end

local function report(what)
  if DTYPES[what] then return report_matmul(what) end
  if what == "tc_configs" then return report_tc_configs() end
  local f = run_child(what)
  if what == "ew" or what == "sum" then
    local mine, copy, torch = f[what .. "_tcl_gbs"], copy_bandwidth(), f[what .. "_torch_gbs"]
    print(string.format("  %-8s tcl %8.1f GB/s   copy %8.1f GB/s%s   torch %8.1f GB/s", what, mine or 0 / 0,
      copy or 0 / 0, ratio_text(mine, copy, true, what == "ew" and 0.85 or nil), torch or 0 / 0))
  elseif what == "softmax" or what == "gpt2" or what == "conv" then
    local mine, torch, queued = f[what .. "_tcl_ms"], f[what .. "_torch_ms"], f[what .. "_tcl_queued_ms"]
    print(string.format("  %-8s tcl %8.3f ms   torch %8.3f ms%s%s", what, mine or 0 / 0, torch or 0 / 0,
      ratio_text(mine, torch, false),
      f.gpt2_kernels and string.format("   (%d kernels, wall %.3f ms)", f.gpt2_kernels, f.gpt2_tcl_wall_ms) or ""))
    -- kernels queued back to back, timed as torch's events time a call
    if queued then
      print(string.format("  %-8s tcl %8.3f ms queued             %s", what, queued, ratio_text(queued, torch, false)))
    end
  else
    local names = {}
    for name in pairs(f) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do print(string.format("  %-40s %8.2f", name, f[name])) end
  end
end

if arg and arg[1] == "--child" then
  parts[arg[2]](require "tcl")
else
  local which = {}
  for i = 1, #(arg or {}) do which[#which + 1] = arg[i] end
  if #which == 0 then which = ORDER end
  for _, what in ipairs(which) do
    if not parts[what] then error("gpu_bench: unknown part '" .. what .. "' (" .. table.concat(ORDER, ", ") .. ")") end
  end
  print(string.format("== gpu_bench: N = %d, medians of %d runs", N, RUNS))
  for _, what in ipairs(which) do report(what) end
end
