-- spec/support/lowering_dump.lua — writes what the lowering passes make of a broad set of
-- kernels, so that a restructuring of the passes can be shown to change nothing: run it
-- before and after, and compare the two files (they must be identical).
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua;;' LUA_CPATH="$TCLC_BUILD_DIR/lua/?.so;;" \
--     lua5.4 spec/support/lowering_dump.lua out.txt
--
-- Kernels: spec.support.opt_harness's cases and a few GPU-shaped ones (large reductions,
-- transposes, float16 matmuls for tensor cores), scheduled as the Tensor API does. Each is
-- lowered (tcl.patterns.pipeline, then the linearizer) for EMU, CPU (LLVM) and EMU's GPU mode
-- with CUDA's and Metal's targets, under NOOPT, the default heuristic, fixed recipes (upcast,
-- unroll, kblock, threads, local and group axes), tensor-core tilings and seeded random opts.
-- Each entry: the kernel's name and opts, the lowered AST, the linear listing and, for GPU
-- targets, the rendered CUDA or Metal source. Nothing runs a kernel.
local tcl = require "tcl"
local env = require "tcl.env"
local schedule = require "tcl.schedule"
local splitmix = require "spec.support.splitmix"
local H = require "spec.support.opt_harness"

-- the codegen modules, wherever the codegen folder keeps them
local function codegen(name)
  for _, prefix in ipairs { "tcl.codegen.", "tcl.codegen.driver.", "tcl.codegen.devices.", "tcl.codegen.passes." } do
    local ok, m = pcall(require, prefix .. name)
    if ok then return m end
    if not tostring(m):find("module '" .. prefix .. name .. "' not found", 1, true) then error(m, 0) end
  end
  error("no codegen module " .. name)
end

local lower = codegen "lower"
local linearize = codegen "linearize"
local optimize = codegen "optimize"
local targets = codegen "gpu_targets"
local emu = codegen "emu"
local have_llvm, llvm = pcall(codegen, "llvm")
local gpu = require "tcl.gpu"
local tensor_cores = require "tcl.heuristics.tensor_cores"

local Tensor = tcl.Tensor
local out = assert(io.open(assert(arg[1], "usage: lowering_dump.lua out.txt"), "w"))
local count, failures = 0, 0

local function f(shape) return { shape, "float" } end

local EXTRA = {
  { name = "sum of 4096", inputs = { f { 4096 } }, fn = function(x) return x:sum() end },
  { name = "row sums 64x1024", inputs = { f { 64, 1024 } }, fn = function(x) return x:sum(2) end },
  { name = "column max 512x48", inputs = { f { 512, 48 } }, fn = function(x) return x:max(1) end },
  { name = "transpose 64x64", inputs = { f { 64, 64 } }, fn = function(x) return x:transpose(1, 2) + 1 end },
  { name = "transpose 3x32x48", inputs = { f { 3, 32, 48 } }, fn = function(x) return x:transpose(2, 3) * 2 end },
  { name = "layernorm 16x256", inputs = { f { 16, 256 } }, fn = function(x) return x:layernorm(2) end },
  { name = "matmul 64x64 @ 64x64", inputs = { f { 64, 64 }, f { 64, 64 } },
    fn = function(a, b) return a:matmul(b) end },
  { name = "softmax 32x512", inputs = { f { 32, 512 } }, fn = function(x) return x:softmax(2) end },
  { name = "conv2d 1x8x16x16 * 16x8x3x3", inputs = { f { 1, 8, 16, 16 }, f { 16, 8, 3, 3 } },
    fn = function(x, w) return x:conv2d(w, nil, { padding = 1 }) end },
}

-- float16/bfloat16/float32 matmuls that fit the tensor cores, with their configurations
local TC_CASES = {
  { target = "CUDA", dtype = "float16", m = 32, k = 48, n = 16, tc = {} },
  { target = "CUDA", dtype = "float16", m = 64, k = 32, n = 32, tc = { wm = 2, wn = 2, tm = 1, tn = 2 } },
  { target = "CUDA", dtype = "bfloat16", m = 128, k = 16, n = 64, tc = { wm = 2, wn = 2, tm = 4, tn = 4 } },
  { target = "CUDA", dtype = "float16", m = 32, k = 32, n = 48, tc = { wm = 2, wn = 1, tm = 1, tn = 2 }, relu = true },
  { target = "METAL", dtype = "float32", m = 32, k = 16, n = 32, tc = { wm = 2, wn = 2, tm = 2, tn = 2 } },
  { target = "METAL", dtype = "float32", m = 64, k = 24, n = 16, tc = { wm = 4, wn = 1, tm = 2, tn = 2 } },
  { target = "CUDA", dtype = "float16", m = 64, k = 128, n = 64,
    tc = { wm = 2, wn = 2, tm = 2, tn = 4, staged = true } },
  { target = "CUDA", dtype = "float16", m = 64, k = 128, n = 64,
    tc = { wm = 2, wn = 2, tm = 2, tn = 4, staged = true }, realized = true },
  { target = "METAL", dtype = "float32", m = 32, k = 48, n = 64,
    tc = { wm = 2, wn = 2, tm = 2, tn = 4, staged = true } },
  { target = "CUDA", dtype = "float16", m = 64, k = 160, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4, staged = true,
    buffers = 2 }, realized = true },
  { target = "CUDA", dtype = "float16", m = 64, k = 160, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4, staged = true,
    buffers = 3 }, realized = true },
  { target = "METAL", dtype = "float32", m = 32, k = 24, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4, staged = true,
    buffers = 3 } },
  { target = "CUDA_SM90", dtype = "float16", m = 128, k = 64, n = 128, tc = { warpgroup = true, wm = 2, tn = 1 } },
}

-- renderers: name -> { device =, renderer =, dialect = (GPU source) }
local function gpu_renderer(name)
  local t = targets.get(name)
  return { device = "EMU", renderer = { name = "emu-" .. t.name, lacks = emu.renderer.lacks, gpu = t.gpu,
    opt_caps = t.opt_caps }, dialect = t.name }
end
local RENDERERS = { EMU = { device = "EMU", renderer = emu.renderer }, CUDA = gpu_renderer "CUDA",
  METAL = gpu_renderer "METAL", CUDA_SM90 = gpu_renderer "CUDA_SM90" }
if have_llvm then RENDERERS.CPU = { device = "CPU", renderer = llvm.renderer } end
local ORDER = { "EMU", "CPU", "CUDA", "METAL" }

local function kernels_of(t, device)
  return schedule.create({ t.uop }, { device = device }).kernels
end

-- one kernel lowered for a renderer under the heuristic installed now (nil: NOOPT)
local function dump_kernel(label, k, r, noopt)
  local ctx = { name = k.name, noopt = noopt, beam = 0, device = r.device, renderer = r.renderer }
  local ok, text = pcall(function()
    local lowered = lower.run_passes(k.ast, ctx)
    local list = linearize.linearize(lowered)
    local parts = { tostring(lowered), linearize.format(list) }
    if r.dialect then
      local rendered, src = pcall(gpu.render, list, { name = ctx.name, dialect = r.dialect })
      parts[#parts + 1] = rendered and src or ("render error: " .. tostring(src))
    end
    return table.concat(parts, "\n")
  end)
  count = count + 1
  if not ok then failures = failures + 1 end
  out:write(string.format("=== %s | kernel %s -> %s | opts %s\n%s\n", label, k.name, tostring(ctx.name),
    tostring(ctx.opts), ok and text or ("ERROR: " .. tostring(text))))
end

local warnings = {}
optimize.warn = function(line) warnings[#warnings + 1] = line end

local function with_heuristic(h, fn)
  optimize.set_heuristic(h)
  local ok, err = pcall(fn)
  optimize.set_heuristic(nil)
  assert(ok, err)
end

-- heuristics: name -> function(k) (k: tcl.heuristics.kernel), per kind of renderer
local function divisor(n, limit)
  for d = math.min(n, limit), 2, -1 do if n % d == 0 then return d end end
end
local function outs(k) return k:axes("global", "loop") end
local function upcast_inner(k)
  local o = outs(k)
  for n = #o, 1, -1 do
    local d = divisor(o[n].size, 8)
    if d then k:try_apply("UPCAST", o[n].axis, d) return end
  end
end
local function upcast_outer(k)
  for _, r in ipairs(outs(k)) do
    local d = divisor(r.size, 16)
    if d then k:try_apply("UPCAST", r.axis, d) return end
  end
end
local function unroll(k)
  local red = k:axes("reduce")
  for n = #red, 1, -1 do
    local d = divisor(red[n].size, 8)
    if d then k:try_apply("UNROLL", n, d) return end
  end
end
local function unroll_whole(k)
  local red = k:axes("reduce")
  if #red > 0 and red[#red].size <= 16 then k:try_apply("UNROLL", #red, 0) end
end
local function kblock(k)
  local red = k:axes("reduce")
  for n = #red, 1, -1 do
    local d = divisor(red[n].size, 16)
    if d and d < red[n].size then k:try_apply("KBLOCK", n, d) return end
  end
end
local function thread(k)
  for _, r in ipairs(outs(k)) do
    if r.size % 2 == 0 then k:try_apply("THREAD", r.axis, 2) return end
  end
end
local function padto(k)
  for _, r in ipairs(outs(k)) do
    if r.size % 16 ~= 0 then k:try_apply("PADTO", r.axis, 16) return end
  end
end
local function local_axis(k)
  for _, r in ipairs(outs(k)) do
    local d = divisor(r.size, 16)
    if d then k:try_apply("LOCAL", r.axis, d) return end
  end
end
local function group(k)
  local red = k:axes("reduce")
  if #red > 0 then
    local d = divisor(red[1].size, 32)
    if d then k:try_apply("GROUP", 1, d) end
  end
end
local function grouptop(k)
  local red = k:axes("reduce")
  if #red > 0 then
    local d = divisor(red[1].size, 64)
    if d then k:try_apply("GROUPTOP", 1, d) end
  end
end

local function recipe(...)
  local steps = { ... }
  return function(k) for _, step in ipairs(steps) do step(k) end end
end

local RECIPES = {
  { "upcast", recipe(upcast_inner) },
  { "upcast unroll", recipe(upcast_inner, unroll) },
  { "register tile", recipe(upcast_inner, upcast_outer, unroll) },
  { "unroll whole", recipe(unroll_whole) },
  { "padto upcast", recipe(padto, upcast_inner) },
  { "kblock", recipe(kblock) },
  { "kblock tile", recipe(upcast_inner, upcast_outer, kblock) },
  { "kblock unroll", recipe(kblock, unroll) },
  { "thread", recipe(thread), cpu = true },
  { "thread tile kblock", recipe(upcast_inner, thread, kblock), cpu = true },
  { "local", recipe(local_axis), gpu = true },
  { "local upcast unroll", recipe(local_axis, upcast_inner, unroll), gpu = true },
  { "group", recipe(group), gpu = true },
  { "grouptop", recipe(grouptop), gpu = true },
  { "local group", recipe(local_axis, group), gpu = true },
  { "local grouptop upcast", recipe(local_axis, grouptop, upcast_inner), gpu = true },
}

local FUZZ_OPS = { "UPCAST", "UNROLL", "SWAP", "PADTO", "KBLOCK" }
local AMOUNTS = { UPCAST = { 0, 2, 3, 4, 8, 16 }, UNROLL = { 0, 2, 3, 4, 8, 16 }, THREAD = { 2, 3, 4, 8 },
  PADTO = { 4, 8, 16 }, KBLOCK = { 2, 3, 4, 8, 16 }, LOCAL = { 2, 4, 8, 16, 32 }, GROUP = { 2, 4, 8, 16, 32 },
  GROUPTOP = { 4, 16, 64, 256 } }

local function fuzz(seed, ops)
  local rng = splitmix.new(seed)
  return function(k)
    for _ = 1, rng:integer(1, 4) do
      local op = ops[rng:integer(1, #ops)]
      local ranges = k:ranges()
      local reduce_numbered = op == "UNROLL" or op == "KBLOCK" or op == "GROUP" or op == "GROUPTOP"
      local n = reduce_numbered and #k:axes("reduce") or #ranges
      if n > 0 then
        local axis = rng:integer(1, n)
        local amount
        if op == "SWAP" then amount = ranges[rng:integer(1, #ranges)].axis
        else amount = AMOUNTS[op][rng:integer(1, #AMOUNTS[op])] end
        k:try_apply(op, axis, amount)
      end
    end
  end
end

local function ops_for(name)
  local ops = { table.unpack(FUZZ_OPS) }
  if name == "CPU" then ops[#ops + 1] = "THREAD" end
  if name == "CUDA" or name == "METAL" then
    for _, op in ipairs { "LOCAL", "GROUP", "GROUPTOP" } do ops[#ops + 1] = op end
  end
  return ops
end

local function dump_case(case)
  for _, rname in ipairs(ORDER) do
    local r = RENDERERS[rname]
    if r then
      local device = r.device
      local ks = kernels_of(H.build(case, device), device)
      local base = case.name .. " | " .. rname
      for _, k in ipairs(ks) do dump_kernel(base .. " | NOOPT", k, r, true) end
      for _, k in ipairs(ks) do dump_kernel(base .. " | default", k, r, false) end
      for _, rec in ipairs(RECIPES) do
        if (not rec.cpu or rname == "CPU") and (not rec.gpu or r.dialect) then
          with_heuristic(rec[2], function()
            for _, k in ipairs(ks) do dump_kernel(base .. " | " .. rec[1], k, r, false) end
          end)
        end
      end
      for seed = 1, 6 do
        for _, k in ipairs(ks) do
          with_heuristic(fuzz(seed * 7919 + #case.name, ops_for(rname)), function()
            dump_kernel(base .. " | fuzz " .. seed, k, r, false)
          end)
        end
      end
    end
  end
end

local function dump_tc(case)
  local rng = splitmix.new(case.m * 7 + case.n)
  local function operand(rows, cols)
    local v = {}
    for i = 1, rows * cols do v[i] = rng:integer(-16, 16) / 8 end
    local t = Tensor(v, { device = "EMU" }):reshape(rows, cols):cast(case.dtype)
    return case.realized and t:realize() or t
  end
  local a, b = operand(case.m, case.k), operand(case.k, case.n)
  local product = a:float():matmul(b:float()) - 1.5
  if case.relu then product = product:relu() end
  local r = RENDERERS[case.target]
  local ks = kernels_of(product, "EMU")
  local label = string.format("TC %s %s %dx%dx%d%s", case.target, case.dtype, case.m, case.k, case.n,
    case.realized and " realized" or "")
  local tc_arg = tensor_cores.arg_of(case.tc)
  with_heuristic(function(k)
    if tensor_cores.match(k:graph(), k.caps.gpu) then k:apply("TC", 1, tc_arg) end
  end, function()
    for _, k in ipairs(ks) do dump_kernel(label .. " | TC " .. tc_arg, k, r, false) end
  end)
  for _, k in ipairs(ks) do dump_kernel(label .. " | default", k, r, false) end
end

env.BEAM = 0
for _, case in ipairs(H.CASES) do dump_case(case) end
for _, case in ipairs(EXTRA) do dump_case(case) end
for _, case in ipairs(TC_CASES) do dump_tc(case) end
out:write(string.format("=== warnings\n%s\n", table.concat(warnings, "\n")))
out:close()
io.stderr:write(string.format("%d kernel lowerings dumped (%d failed), %d warnings\n", count, failures, #warnings))
