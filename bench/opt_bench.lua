-- bench/opt_bench.lua — the kernel optimizer (heuristics, BEAM) on GEMM-shaped work against
-- the best alternatives measured in the same run: OpenBLAS's sgemm and the CPU's peak FMA rate
-- (bench/gemm_baselines.c), im2col + sgemm for conv2d, and torch (bench/torch_baselines.py,
-- Debian's python3-torch with OpenBLAS). Figures are medians; tcl's are jitted calls (tcl.jit:
-- outputs reuse their buffers) with kernel times from tcl.profile.
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/opt_bench.lua [part ...]
--
-- Parts (default all):
--   matmul      float32 N x N, N = 256 512 1024 2048, a:matmul(b) on realized inputs, with the
--               default heuristic and then with BEAM=4 (a child with BEAM=4 IGNORE_BEAM_CACHE=1:
--               its first call per size is the search; "beam: not available" when BEAM is not
--               implemented or fails), GFLOPS against OpenBLAS, torch.mm and the FMA peak
--   conv2d      batch 8, 32 -> 64 channels, 3x3, 56x56, padding 1, with the heuristic and then with
--               BEAM=4 (a child as for matmul), against torch's conv2d and
--               im2col + sgemm
--   gpt2_layer  a GPT-2 small layer forward (spec/support/models.lua, seq 128, causal) against
--               torch's TransformerEncoderLayer (the same sizes, pre-norm, GELU; no mask)
-- Each runs in a child process, twice: with the default threads (the cores) and with
-- THREADS=1, and one table is printed per setting, with the kernels that take the time.
-- OPENBLAS_CORETYPE is removed from the environment of the baselines this script launches:
-- it overrides OpenBLAS's own kernel choice (OPENBLAS_CORETYPE=Haswell halves the figures on
-- Zen 5; bench/README.md), and the baseline must be the strongest one.
-- BENCH_BUILD (default build-rel) names the build whose bench/gemm_baselines runs; BENCH_RUNS
-- (default 11) the runs per median; BENCH_BEAM_TIMEOUT (default 240) the seconds the BEAM child
-- may take per thread setting (the figures it printed by then are kept); BENCH_BEAM=0 skips the
-- BEAM children. BENCH_OPENBLAS_CORETYPE and BENCH_BLAS_DIR: see bench/support.lua's python().
-- Targets (issue 36, heuristic rows): matmul and conv2d at least 1.0 of the best alternative,
-- the GPT-2 layer faster than torch.
local support = require "bench.support"
local shell_quote, capture, figure = support.shell_quote, support.capture, support.figure

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 11
local BEAM_TIMEOUT = tonumber(os.getenv("BENCH_BEAM_TIMEOUT") or "") or 240
local SIZES = { 256, 512, 1024, 2048 }

local build = os.getenv("BENCH_BUILD") or "build-rel"
local self_path = arg and arg[0] or "bench/opt_bench.lua"

---------------------------------------------------------------------------------------------
-- the parts (run in a child process: `opt_bench.lua --child part`); each prints lines
-- "figure <name> <value> <unit>" and "info <name> <text>" that the parent collects

local parts = {}

local function info(name, text)
  io.write(string.format("info %s %s\n", name, text))
  io.flush()
end

-- "info <prefix>_kernel_<i> <name> <ms>" for the n kernels that take the most time.
local function top_kernels(prefix, kernels, n)
  local by_name, order = {}, {}
  for _, k in ipairs(kernels) do
    if not by_name[k.name] then by_name[k.name] = { name = k.name, seconds = 0, runs = 0 }; order[#order + 1] =
      by_name[k.name] end
    by_name[k.name].seconds = by_name[k.name].seconds + k.seconds
    by_name[k.name].runs = by_name[k.name].runs + 1
  end
  table.sort(order, function(x, y) return x.seconds > y.seconds end)
  for i = 1, math.min(n, #order) do
    local k = order[i]
    info(string.format("%s_kernel_%d", prefix, i),
      string.format("%s %.3f%s", k.name, k.seconds * 1e3, k.runs > 1 and string.format(" (x%d)", k.runs) or ""))
  end
end

-- The baselines, without OPENBLAS_CORETYPE (see the header) unless BENCH_OPENBLAS_CORETYPE
-- names the kernels (bench/support.lua's python(): OpenBLAS 0.3.21 takes a VM's AVX-512 Xeon
-- for a Prescott); their figure lines pass through.
local BASE_ENV = "env -u OPENBLAS_CORETYPE "
if (os.getenv("BENCH_OPENBLAS_CORETYPE") or "") ~= "" then
  BASE_ENV = "env OPENBLAS_CORETYPE=" .. shell_quote(os.getenv("BENCH_OPENBLAS_CORETYPE")) .. " "
end

local function pass_figures(out)
  local any = false
  for name, value, unit in out:gmatch("figure (%S+) (%S+) (%S+)") do
    figure(name, tonumber(value), unit)
    any = true
  end
  for line in out:gmatch("[^\n]+") do
    if line:match("^skip ") then info("skip", line) end
  end
  return any
end

local function gemm_baseline(args)
  local exe = build .. "/bench/gemm_baselines"
  local f = io.open(exe, "r")
  if not f then
    info("skip", exe .. " not built (libopenblas-dev)")
    return
  end
  f:close()
  pass_figures(capture(BASE_ENV .. shell_quote(exe) .. " " .. args))
end

local function torch_baseline(threads, what)
  pass_figures(capture(BASE_ENV .. support.python() .. " bench/torch_baselines.py --threads " .. threads
    .. " --runs " .. RUNS .. " " .. what))
end

local function beam_width()
  local tcl_env = require "tcl.env"
  return tcl_env.BEAM or 0
end

function parts.matmul(tcl, threads)
  local beam = beam_width()
  if beam > 0 then
    -- BEAM's search must be there (tcl.codegen.driver.beam) and read the environment
    local ok, err = pcall(require, "tcl.codegen.driver.beam")
    if not ok then
      info("beam_unavailable", (tostring(err):match("^[^\n]*"):gsub(":%s*$", "")))
      return
    end
  end
  for _, n in ipairs(SIZES) do
    local a, b = tcl.Tensor.rand(n, n):realize(), tcl.Tensor.rand(n, n):realize()
    -- the first call compiles the kernel (with BEAM and IGNORE_BEAM_CACHE=1: searches)
    local ok, err = pcall(function()
      local start = tcl.clock()
      a:matmul(b):realize()
      figure("matmul_N" .. n .. "_first_ms", (tcl.clock() - start) * 1e3, "ms")
      local k, _, kernels = support.jitted_median(tcl, RUNS, function(x, y) return x:matmul(y) end, a, b)
      figure("matmul_N" .. n .. "_tcl_gflops", 2 * n ^ 3 / k * 1e-9, "GFLOPS")
      info("matmul_N" .. n .. "_kernel", kernels[1] and kernels[1].name or "?")
    end)
    if not ok then
      info(beam > 0 and "beam_unavailable" or "error", "N=" .. n .. ": " .. (tostring(err):match("^[^\n]*")))
      return
    end
  end
  if beam > 0 then return end
  for _, n in ipairs(SIZES) do gemm_baseline("sgemm " .. n .. " " .. threads .. " " .. RUNS) end
  gemm_baseline("fma_peak " .. threads .. " " .. RUNS)
  torch_baseline(threads, "sgemm")
end

local CONV = { batch = 8, cin = 32, cout = 64, hw = 56, k = 3 }

function parts.conv2d(tcl, threads)
  local c = CONV
  local x = tcl.Tensor.rand(c.batch, c.cin, c.hw, c.hw):realize()
  local w = tcl.Tensor.rand(c.cout, c.cin, c.k, c.k):realize()
  local function conv(xx, ww) return xx:conv2d(ww, nil, { padding = 1 }) end
  -- the first call compiles (with BEAM and IGNORE_BEAM_CACHE=1: searches)
  local start = tcl.clock()
  conv(x, w):realize()
  figure("conv2d_first_ms", (tcl.clock() - start) * 1e3, "ms")
  local k, _, kernels = support.jitted_median(tcl, RUNS, conv, x, w)
  local flops = 2 * c.batch * c.cout * c.hw * c.hw * c.cin * c.k * c.k
  figure("conv2d_tcl_ms", k * 1e3, "ms")
  figure("conv2d_tcl_gflops", flops / k * 1e-9, "GFLOPS")
  top_kernels("conv2d", kernels, 4)
  if beam_width() > 0 then return end
  gemm_baseline("conv2d " .. threads .. " " .. RUNS)
  torch_baseline(threads, "conv2d")
end

-- A GPT-2 small layer's forward, steady state (as bench/cpu_bench.lua's gpt2_forward).
function parts.gpt2_layer(tcl, threads)
  local layer, x = support.gpt2_layer(tcl)
  local k, wall, kernels = support.jitted_median(tcl, RUNS, layer, x)
  figure("gpt2_layer_tcl_ms", wall * 1e3, "ms")
  figure("gpt2_layer_kernels_ms", k * 1e3, "ms")
  top_kernels("gpt2_layer", kernels, 6)
  torch_baseline(threads, "gpt2_layer")
end

---------------------------------------------------------------------------------------------
-- the parent: children per thread setting, a table each

local ORDER = { "matmul", "conv2d", "gpt2_layer" }

-- CACHELEVEL=0: nothing from the on-disk kernel cache (the first calls compile).
local function run_child(what, env_prefix, timeout)
  local command = "env CACHELEVEL=0 " .. env_prefix .. "lua5.4 " .. shell_quote(self_path) .. " --child " .. what
  if timeout then command = "timeout " .. timeout .. " " .. command end
  local pipe = assert(io.popen(command .. " 2>&1; echo \"exit $?\""))
  local out = pipe:read("a")
  pipe:close()
  local figures, infos = {}, {}
  for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
  for name, text in out:gmatch("info (%S+) ([^\n]*)") do infos[name] = text end
  local status = tonumber(out:match("exit (%d+)%s*$"))
  if next(figures) == nil and next(infos) == nil then io.write(out) end
  return figures, infos, status
end

-- "label  tcl X unit   alt1 Y   alt2 Z   ratio R of alt" (ratio = tcl / best when higher is
-- better, best / tcl when lower is).
local function row(label, mine, unit, alternatives, higher, extra, target)
  if not mine then
    print(string.format("  %-22s no figure (the child failed)", label))
    return
  end
  local line = string.format("  %-22s tcl %9.3f %s", label, mine, unit)
  local best, best_name
  for _, alt in ipairs(alternatives) do
    if alt.value then
      line = line .. string.format("   %s %9.3f", alt.name, alt.value)
      if best == nil or (higher and alt.value > best) or (not higher and alt.value < best) then
        best, best_name = alt.value, alt.name
      end
    end
  end
  if best then
    local ratio = higher and mine / best or best / mine
    line = line .. string.format("   ratio %.2f of %s", ratio, best_name)
    if target then line = line .. string.format(" (target %.2f: %s)", target, ratio >= target and "PASS" or "MISS") end
  end
  print(line .. (extra or ""))
end

local function print_kernels(infos, prefix, total_ms)
  for i = 1, 6 do
    local text = infos[prefix .. "_kernel_" .. i]
    if not text then break end
    local name, ms, rest = text:match("^(%S+) (%S+)(.*)$")
    print(string.format("      %-44s %8.3f ms %5.1f %%%s", name, tonumber(ms), 100 * tonumber(ms) / total_ms, rest))
  end
end

local report = {}

-- The BEAM=4 child of a part (IGNORE_BEAM_CACHE=1: its first call is the search): its figures
-- and infos, or nil after saying why there are none.
local function run_beam_child(what, threads_prefix)
  if os.getenv("BENCH_BEAM") == "0" then
    print("  beam: skipped (BENCH_BEAM=0)")
    return nil
  end
  local bf, binfos, status = run_child(what, threads_prefix .. "BEAM=4 IGNORE_BEAM_CACHE=1 ", BEAM_TIMEOUT)
  if binfos.beam_unavailable then
    print("  beam: not available (" .. binfos.beam_unavailable .. ")")
    return nil
  end
  if status == 124 then
    print(string.format("  beam: the child ran past %d s (BENCH_BEAM_TIMEOUT)", BEAM_TIMEOUT))
  elseif next(bf) == nil then
    print(string.format("  beam: not available (the BEAM=4 child exited with status %s)", tostring(status)))
    return nil
  end
  return bf, binfos
end

function report.matmul(threads_prefix)
  local f, infos = run_child("matmul", threads_prefix)
  if infos.error then print("  matmul: " .. infos.error) end
  local peak = f.fma_peak_gflops
  if peak then print(string.format("  %-22s %9.3f GFLOPS", "FMA peak", peak)) end
  local heuristic_kernels = {}
  for _, n in ipairs(SIZES) do
    local mine = f["matmul_N" .. n .. "_tcl_gflops"]
    local extra = ""
    if mine and f["sgemm_N" .. n .. "_gflops"] then
      extra = extra .. string.format("   %.0f %% of OpenBLAS", 100 * mine / f["sgemm_N" .. n .. "_gflops"])
    end
    if mine and peak then extra = extra .. string.format(", %.0f %% of peak", 100 * mine / peak) end
    row("matmul " .. n .. " GFLOPS", mine, "", {
      { name = "openblas", value = f["sgemm_N" .. n .. "_gflops"] },
      { name = "torch", value = f["torch_mm_N" .. n .. "_gflops"] },
    }, true, extra, 1.0)
    heuristic_kernels[n] = infos["matmul_N" .. n .. "_kernel"]
    if heuristic_kernels[n] then
      print(string.format("      %s, first call %.1f ms", heuristic_kernels[n], f["matmul_N" .. n .. "_first_ms"] or 0))
    end
  end
  -- the same with BEAM=4 (the search on each size's first call)
  local bf, binfos = run_beam_child("matmul", threads_prefix)
  if not bf then return end
  for _, n in ipairs(SIZES) do
    local mine = bf["matmul_N" .. n .. "_tcl_gflops"]
    local extra = ""
    if mine and f["sgemm_N" .. n .. "_gflops"] then
      extra = extra .. string.format("   %.0f %% of OpenBLAS", 100 * mine / f["sgemm_N" .. n .. "_gflops"])
    end
    if mine and peak then extra = extra .. string.format(", %.0f %% of peak", 100 * mine / peak) end
    local heuristic = f["matmul_N" .. n .. "_tcl_gflops"]
    if mine and heuristic then extra = extra .. string.format("; %.2fx the heuristic's", mine / heuristic) end
    row("matmul " .. n .. " BEAM=4", mine, "", {
      { name = "openblas", value = f["sgemm_N" .. n .. "_gflops"] },
      { name = "torch", value = f["torch_mm_N" .. n .. "_gflops"] },
    }, true, extra)
    local kernel = binfos["matmul_N" .. n .. "_kernel"]
    if kernel then
      print(string.format("      %s%s, search (first call) %.2f s", kernel,
        kernel == heuristic_kernels[n] and " (the heuristic's kernel)" or "",
        (bf["matmul_N" .. n .. "_first_ms"] or 0) / 1e3))
    end
  end
end

function report.conv2d(threads_prefix)
  local f, infos = run_child("conv2d", threads_prefix)
  row("conv2d ms", f.conv2d_tcl_ms, "ms", {
    { name = "torch", value = f.conv2d_torch_ms },
    { name = "im2col", value = f.conv2d_im2col_ms },
  }, false, f.conv2d_tcl_gflops and string.format("   (tcl %.1f GFLOPS)", f.conv2d_tcl_gflops), 1.0)
  if f.conv2d_tcl_ms then print_kernels(infos, "conv2d", f.conv2d_tcl_ms) end
  local bf, binfos = run_beam_child("conv2d", threads_prefix)
  if not bf then return end
  local extra = bf.conv2d_tcl_gflops and string.format("   (tcl %.1f GFLOPS", bf.conv2d_tcl_gflops) or ""
  if bf.conv2d_tcl_ms and f.conv2d_tcl_ms then
    extra = extra .. string.format("; %.2fx the heuristic's; search (first call) %.2f s)",
      f.conv2d_tcl_ms / bf.conv2d_tcl_ms, (bf.conv2d_first_ms or 0) / 1e3)
  end
  row("conv2d BEAM=4 ms", bf.conv2d_tcl_ms, "ms", {
    { name = "torch", value = f.conv2d_torch_ms },
    { name = "im2col", value = f.conv2d_im2col_ms },
  }, false, extra)
  if bf.conv2d_tcl_ms then print_kernels(binfos, "conv2d", bf.conv2d_tcl_ms) end
end

function report.gpt2_layer(threads_prefix)
  local f, infos = run_child("gpt2_layer", threads_prefix)
  row("gpt2_layer ms", f.gpt2_layer_tcl_ms, "ms", { { name = "torch", value = f.gpt2_layer_torch_ms } }, false,
    f.gpt2_layer_kernels_ms and string.format("   (kernels %.3f ms)", f.gpt2_layer_kernels_ms), 1.0)
  if f.gpt2_layer_kernels_ms then print_kernels(infos, "gpt2_layer", f.gpt2_layer_kernels_ms) end
end

-- The 1-minute load average: on a shared machine, figures taken under load are not comparable
-- (the FMA peak with all threads then falls short of the cores times the one-thread figure).
local function load_average()
  local f = io.open("/proc/loadavg", "r")
  if not f then return "" end
  local first = f:read("l") or ""
  f:close()
  local one = first:match("^(%S+)")
  return one and ", load average " .. one .. " before" or ""
end

local function parent(which)
  for _, threads in ipairs { "", "1" } do
    print((threads == "" and "== default threads (the cores)" or "== THREADS=1") .. load_average())
    for _, what in ipairs(which) do
      report[what](threads == "" and "" or "THREADS=1 ")
    end
  end
end

if arg and arg[1] == "--child" then
  local tcl = require "tcl"
  local threads = tonumber(os.getenv("THREADS") or "") or tonumber(capture("nproc")) or 1
  parts[arg[2]](tcl, math.tointeger(threads))
else
  local which = {}
  for i = 1, #(arg or {}) do which[#which + 1] = arg[i] end
  if #which == 0 then which = ORDER end
  for _, what in ipairs(which) do
    if not parts[what] then error("opt_bench: unknown part '" .. what .. "' (" .. table.concat(ORDER, ", ") .. ")") end
  end
  parent(which)
end
