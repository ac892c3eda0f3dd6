-- spec/codegen/tc_lowering_spec.lua — matmuls on tensor cores: the opt TC and its tile configurations
-- (src/opt/kernel_opt.c, tcl.heuristics.tensor_cores: config, arg_of, check), the GPU
-- heuristic's choice (tcl.heuristics.gpu, tensor_cores.match and choose), BEAM's TC seeds
-- (tcl.codegen.driver.beam) and the pass "tensor cores" (tcl.codegen.passes.tensor_cores), run on EMU's GPU
-- mode with CUDA's capabilities (float16 and bfloat16 inputs, m16n8k16) and Metal's (float32,
-- m8n8k8): values against a naive double-precision product (operands are multiples of 1/8, so
-- every sum is exact), the programs' WMMA and launch sizes, and the kernels the pass leaves alone.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.driver.lower"
local opt = require "tcl.opt"
local optimize = require "tcl.codegen.driver.optimize"
local beam = require "tcl.codegen.driver.beam"
local tensor_cores = require "tcl.heuristics.tensor_cores"
local kernel_api = require "tcl.heuristics.kernel"
local targets = require "tcl.codegen.devices.gpu_targets"
local emu = require "tcl.codegen.devices.emu"
local splitmix = require "spec.support.splitmix"

local Tensor = tcl.Tensor

-- EMU's backend reads EMU_GPU when it loads; these specs switch its renderer per target.
local on_target = require("spec.support.helper").on_gpu_target

-- a (m x k) and b (k x n) of dtype, small multiples of 1/8 (exact in every input dtype).
local function operands(m, k, n, dtype, seed)
  local rng = splitmix.new(seed)
  local function values(count)
    local out = {}
    for i = 1, count do out[i] = rng:integer(-16, 16) / 8 end
    return out
  end
  local a = Tensor(values(m * k), { device = "EMU" }):reshape(m, k):cast(dtype)
  local b = Tensor(values(k * n), { device = "EMU" }):reshape(k, n):cast(dtype)
  return a, b
end

-- The product of A (m x k) and B (k x n), nested lists, in Lua's doubles.
local naive_lists = require("spec.support.helper").naive_matmul

local function naive(a, b) return naive_lists(a:float():tolist(), b:float():tolist()) end

-- a @ b - 1.5 (then a relu, if asked) as a tensor, and its values from the naive product: an
-- epilogue fused after the tensor cores' sums.
local function shifted_product(a, b, relu)
  local product = a:float():matmul(b:float()) - 1.5
  if relu then product = product:relu() end
  local want = naive(a, b)
  for _, row in ipairs(want) do
    for j = 1, #row do
      row[j] = row[j] - 1.5
      if relu and row[j] < 0 then row[j] = 0 end
    end
  end
  return product, want
end

-- The launch of a program's dump: workgroups, threads per workgroup.
local function launch_of(listing)
  local gx, gy, gz, lx, ly, lz = listing:match("global %((%d+),(%d+),(%d+)%) local %((%d+),(%d+),(%d+)%)")
  assert(gx, "no launch in the listing")
  return tonumber(gx) * tonumber(gy) * tonumber(gz), tonumber(lx) * tonumber(ly) * tonumber(lz), tonumber(lx)
end

-- Runs fn with a heuristic that gives the matmul kernel TC(1, arg) and every other kernel
-- nothing; a heuristic failure (an invalid TC) fails the spec instead of a warning.
local function with_tc(arg, fn)
  local saved_warn = optimize.warn
  optimize.warn = function(line) error(line, 0) end
  optimize.set_heuristic(function(k)
    if tensor_cores.match(k:graph(), k.caps.gpu) then k:apply("TC", 1, arg) end
  end)
  local ok, err = pcall(fn)
  optimize.set_heuristic(nil)
  optimize.warn = saved_warn
  assert(ok, err)
end

local function compiled(t)
  local sched = schedule.create({ t.uop }, { device = "EMU" })
  local k = sched.kernels[#sched.kernels]
  return lower.compile(k.ast, { device = "EMU" })
end

describe("tensor cores on EMU's GPU mode", function()
  for _, case in ipairs {
    { target = "CUDA", dtype = "float16", m = 32, k = 48, n = 16 },
    { target = "CUDA", dtype = "bfloat16", m = 16, k = 16, n = 24 },
    { target = "METAL", dtype = "float32", m = 24, k = 16, n = 8 },
  } do
    it(string.format("compute a %s matmul (%dx%d @ %dx%d) with WMMA, exactly as the naive product (%s)",
      case.dtype, case.m, case.k, case.k, case.n, case.target), function()
      on_target(case.target, function()
        local a, b = operands(case.m, case.k, case.n, case.dtype, case.m + case.n)
        local product = a:float():matmul(b:float()) + 0.5
        local want = naive(a, b)
        for i = 1, case.m do for j = 1, case.n do want[i][j] = want[i][j] + 0.5 end end
        local listing = compiled(product).program:dump()
        assert.matches("WMMA", listing, 1, true)
        assert.are.same(want, product:tolist())
      end)
    end)
  end

  it("leave kernels the shapes do not fit to the other opts", function()
    on_target("CUDA", function()
      local a, b = operands(30, 16, 8, "float16", 1) -- 30 rows: not a multiple of 16
      local product = a:float():matmul(b:float())
      assert.is_nil(compiled(product).program:dump():find("WMMA", 1, true))
      assert.are.same(naive(a, b), product:tolist())
      local x, y = operands(16, 16, 8, "float32", 2) -- float32 inputs: CUDA's shapes take halves
      assert.is_nil(compiled(x:matmul(y)).program:dump():find("WMMA", 1, true))
    end)
  end)
end)

describe("tensor-core tile configurations on EMU's GPU mode", function()
  for _, case in ipairs {
    { target = "CUDA", dtype = "float16", m = 64, k = 32, n = 32, tc = { wm = 2, wn = 2, tm = 1, tn = 2 } },
    { target = "CUDA", dtype = "float16", m = 64, k = 48, n = 64, tc = { wm = 1, wn = 2, tm = 4, tn = 2 } },
    { target = "CUDA", dtype = "bfloat16", m = 128, k = 16, n = 64, tc = { wm = 2, wn = 2, tm = 4, tn = 4 } },
    { target = "CUDA", dtype = "float16", m = 64, k = 16, n = 128, tc = { wm = 4, wn = 1, tm = 1, tn = 8 } },
    { target = "CUDA", dtype = "float16", m = 32, k = 32, n = 48, tc = { wm = 2, wn = 1, tm = 1, tn = 2 },
      relu = true },
    { target = "METAL", dtype = "float32", m = 32, k = 16, n = 32, tc = { wm = 2, wn = 2, tm = 2, tn = 2 } },
    { target = "METAL", dtype = "float32", m = 64, k = 24, n = 16, tc = { wm = 4, wn = 1, tm = 2, tn = 2 },
      relu = true },
    { target = "METAL", dtype = "float32", m = 16, k = 8, n = 64, tc = { wm = 1, wn = 2, tm = 1, tn = 4 } },
    -- operands staged through local memory: stages of 64, 32 and 16 elements of K, a relu.
    -- copies: operands read straight from a buffer are copied asynchronously (they land at the
    -- barrier that closes the copy), converted ones (casts fused into the kernel) by STOREs
    { target = "CUDA", dtype = "float16", m = 64, k = 128, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true } },
    { target = "CUDA", dtype = "float16", m = 64, k = 128, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true }, realized = true, copies = 8 },
    { target = "CUDA", dtype = "bfloat16", m = 32, k = 96, n = 32, tc = { wm = 1, wn = 2, tm = 2, tn = 2,
      staged = true }, relu = true },
    { target = "CUDA", dtype = "float16", m = 128, k = 16, n = 16, tc = { wm = 4, wn = 1, tm = 2, tn = 2,
      staged = true } },
    { target = "METAL", dtype = "float32", m = 32, k = 48, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true }, copies = 3 },
    -- two buffers, the next stage copied asynchronously: 5, 3 and 3 stages (an odd count ends
    -- on the second buffer); copies: the asynchronous copies per thread, before the loop and in
    -- it (16 bytes, 8 bytes for Metal's A). Only operands read straight from a buffer are copied
    -- asynchronously: the bfloat16 case's casts are fused into the kernel, so its copies are
    -- STOREs of the converted values
    { target = "CUDA", dtype = "float16", m = 64, k = 160, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true, buffers = 2 }, realized = true, copies = 8 },
    { target = "CUDA", dtype = "bfloat16", m = 32, k = 96, n = 32, tc = { wm = 1, wn = 2, tm = 2, tn = 2,
      staged = true, buffers = 2 }, relu = true, copies = 0 },
    { target = "METAL", dtype = "float32", m = 32, k = 24, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true, buffers = 2 }, copies = 4 },
    -- pipelines of 3 and 4 buffers, 2 and 3 stages of copies in flight: the prologue copies
    -- the first stages (5 stages of 32 wrap around 3 buffers; Metal's 3 stages of 8 are all
    -- copied before the loop, whose copies are all gated off)
    { target = "CUDA", dtype = "float16", m = 64, k = 160, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true, buffers = 3 }, realized = true, copies = 12 },
    { target = "CUDA", dtype = "bfloat16", m = 32, k = 128, n = 32, tc = { wm = 1, wn = 2, tm = 2, tn = 2,
      staged = true, buffers = 4 }, relu = true, copies = 0 },
    { target = "METAL", dtype = "float32", m = 32, k = 24, n = 64, tc = { wm = 2, wn = 2, tm = 2, tn = 4,
      staged = true, buffers = 3 }, copies = 6 },
  } do
    local arg = tensor_cores.arg_of(case.tc)
    it(string.format("compute %dx%d @ %dx%d (%s, %s) with TC(1,%d)%s exactly: %d warps per workgroup%s", case.m,
      case.k, case.k, case.n, case.dtype, case.target, arg, case.relu and " and a relu epilogue" or "",
      case.tc.wm * case.tc.wn, case.tc.staged and ", operands staged through local memory" or ""), function()
      on_target(case.target, function()
        with_tc(arg, function()
          local a, b = operands(case.m, case.k, case.n, case.dtype, arg + case.m)
          if case.realized then a, b = a:realize(), b:realize() end
          local product, want = shifted_product(a, b, case.relu)
          local listing = compiled(product).program:dump()
          assert.matches("WMMA", listing, 1, true)
          local shape = tensor_cores.SHAPES[case.target == "CUDA" and "m16n8k16_f16_f32" or "m8n8k8_f32_f32"]
          local workgroups, threads, x = launch_of(listing)
          assert.are.equal(32 * case.tc.wm * case.tc.wn, threads)
          assert.are.equal(32, x) -- the lanes of a warp are consecutive threads
          assert.are.equal(case.m // (case.tc.wm * case.tc.tm * shape.m) * (case.n // (case.tc.wn * case.tc.tn *
            shape.n)), workgroups)
          -- staged: two tiles in local memory and barriers around each stage; direct: none
          assert.are.equal(case.tc.staged or false, listing:find("DEFINE_LOCAL", 1, true) ~= nil)
          assert.are.equal(case.tc.staged or false, listing:find("BARRIER", 1, true) ~= nil)
          local _, copies = listing:gsub("STORE[^\n]*async", "")
          assert.are.equal(case.copies or 0, copies)
          assert.are.same(want, product:tolist())
        end)
      end)
    end)
  end

  -- a convolution sums over several reduce ranges (input channels, the window's rows and
  -- columns): they make one K; m is the output's width (the input's operand), n the output
  -- channel (the weights'), the batch and the output's rows are more workgroups
  for _, case in ipairs {
    { target = "CUDA", dtype = "float16", tc = 0, batch = 2, cin = 16, cout = 32, size = 8, padding = 1 },
    { target = "CUDA", dtype = "float16", tc = 1214, batch = 1, cin = 16, cout = 64, size = 16, padding = 1,
      bias = true },
    { target = "CUDA", dtype = "bfloat16", tc = 11122, batch = 1, cin = 16, cout = 16, size = 34, padding = 0 },
    { target = "METAL", dtype = "float32", tc = 1211, batch = 2, cin = 8, cout = 16, size = 8, padding = 1,
      bias = true },
  } do
    it(string.format("compute a %s conv2d (%d -> %d channels, 3x3, padding %d%s) with TC(1,%d), exactly (%s)",
      case.dtype, case.cin, case.cout, case.padding, case.bias and ", bias" or "", case.tc, case.target), function()
      on_target(case.target, function()
        with_tc(case.tc, function()
          local rng = splitmix.new(case.tc + case.cin)
          local function values(...)
            local shape, count = { ... }, 1
            for _, d in ipairs(shape) do count = count * d end
            local out = {}
            for i = 1, count do out[i] = rng:integer(-8, 8) / 8 end
            return Tensor(out, { device = "EMU" }):reshape(...):cast(case.dtype):realize()
          end
          local x = values(case.batch, case.cin, case.size, case.size)
          local w = values(case.cout, case.cin, 3, 3)
          local bias = case.bias and values(case.cout) or nil
          local function conv(xx, ww, bb)
            return xx:float():conv2d(ww:float(), bb and bb:float(), { padding = case.padding })
          end
          local y = case.dtype == "float32" and conv(x, w, bias) or x:conv2d(w, bias, { padding = case.padding })
          local listing = compiled(y).program:dump()
          assert.matches("WMMA", listing, 1, true)
          -- exact sums in float32, rounded once to the output's dtype, as tensor cores compute
          local want = conv(x:to("CPU"), w:to("CPU"), bias and bias:to("CPU")):cast(case.dtype):float():tolist()
          assert.are.same(want, y:float():tolist())
        end)
      end)
    end)
  end

  it("compute a batched matmul with TC(1,2212), each batch its own workgroups", function()
    on_target("CUDA", function()
      with_tc(2212, function()
        local rng = splitmix.new(11)
        local function values(count)
          local out = {}
          for i = 1, count do out[i] = rng:integer(-16, 16) / 8 end
          return out
        end
        local a = Tensor(values(3 * 32 * 16), { device = "EMU" }):reshape(3, 32, 16):cast("float16")
        local b = Tensor(values(3 * 16 * 64), { device = "EMU" }):reshape(3, 16, 64):cast("float16")
        local product = a:float():matmul(b:float())
        local listing = compiled(product).program:dump()
        assert.matches("WMMA", listing, 1, true)
        local workgroups, threads = launch_of(listing)
        assert.are.equal(128, threads)
        assert.are.equal(3 * 1 * 2, workgroups) -- blocks of 32 x 32
        local A, B = a:float():tolist(), b:float():tolist()
        local want = {}
        for batch = 1, 3 do want[batch] = naive_lists(A[batch], B[batch]) end
        assert.are.same(want, product:tolist())
      end)
    end)
  end)
end)

describe("TC's tile configurations", function()
  it("are encoded as 0 or the digits WM WN TM TN, and decoded back", function()
    assert.are.same({ wm = 1, wn = 1, tm = 1, tn = 1, staged = false, buffers = 1 }, tensor_cores.config(0))
    assert.are.same({ wm = 2, wn = 4, tm = 8, tn = 1, staged = false, buffers = 1 }, tensor_cores.config(2481))
    assert.are.same({ wm = 2, wn = 4, tm = 8, tn = 1, staged = true, buffers = 1 }, tensor_cores.config(12481))
    assert.are.same({ wm = 1, wn = 1, tm = 1, tn = 1, staged = true, buffers = 1 }, tensor_cores.config(11111))
    assert.are.same({ wm = 2, wn = 2, tm = 4, tn = 8, staged = true, buffers = 2 }, tensor_cores.config(22248))
    assert.are.equal(12248, tensor_cores.arg_of { wm = 2, wn = 2, tm = 4, tn = 8, staged = true })
    assert.are.equal(22248, tensor_cores.arg_of { wm = 2, wn = 2, tm = 4, tn = 8, staged = true, buffers = 2 })
    assert.are.equal(11111, tensor_cores.arg_of { staged = true })
    assert.are.equal(2244, tensor_cores.arg_of { wm = 2, wn = 2, tm = 4, tn = 4 })
    assert.are.equal(0, tensor_cores.arg_of {})
    assert.are.equal(1218, tensor_cores.arg_of { wn = 2, tn = 8 })
    for _, arg in ipairs { 0, 1112, 2244, 4488, 4411, 11111, 12244, 14488, 21111, 24488 } do
      assert.are.equal(arg, tensor_cores.arg_of(tensor_cores.config(arg)))
    end
    local ok, why = tensor_cores.config(3111)
    assert.is_nil(ok)
    assert.are.equal("the warps along m and n (3, 1) must each be 1, 2 or 4", why)
    ok, why = tensor_cores.config(1163)
    assert.is_nil(ok)
    assert.are.equal("the tiles per warp along m and n (6, 3) must each be 1, 2, 4 or 8", why)
    assert.is_nil((tensor_cores.config(5)))
    assert.is_nil((tensor_cores.config(15111)))
    assert.is_nil((tensor_cores.config(42244)))
    assert.matches("with a 1 in front for operands staged through local memory", select(2, tensor_cores.config(20000)),
      1, true)
    assert.matches("a 2 for stages double-buffered and copied asynchronously (22244), a 3 for warpgroups",
      select(2, tensor_cores.config(42244)), 1, true)
    -- warpgroups: WM x WN warpgroups of TM tiles 64 rows by 64*TN columns, double-buffered
    assert.are.same({ wm = 2, wn = 1, tm = 1, tn = 4, staged = true, buffers = 2, warpgroup = true },
      tensor_cores.config(32114))
    assert.are.equal(31122, tensor_cores.arg_of { tm = 2, tn = 2, warpgroup = true })
    for _, arg in ipairs { 31111, 31122, 32114, 34112, 42244 - 10000 } do
      assert.are.equal(arg, tensor_cores.arg_of(tensor_cores.config(arg)))
    end
    ok, why = tensor_cores.config(31311)
    assert.is_nil(ok)
    assert.are.equal("the warpgroups along m and n (1, 3) must be 1, 2 or 4 and 1 or 2", why)
    ok, why = tensor_cores.config(31118)
    assert.is_nil(ok)
    assert.are.equal("the tiles of 64 rows per warpgroup (1) and the width in 64 columns (8) must each be 1, 2 or 4",
      why)
    -- pipelines: B buffers (3..8) in front of a 2 or a 3, B - 1 stages in flight
    assert.are.same({ wm = 1, wn = 1, tm = 2, tn = 2, staged = true, buffers = 4, warpgroup = true },
      tensor_cores.config(431122))
    assert.are.same({ wm = 2, wn = 2, tm = 4, tn = 8, staged = true, buffers = 3 }, tensor_cores.config(322248))
    assert.are.equal(831122, tensor_cores.arg_of { tm = 2, tn = 2, warpgroup = true, buffers = 8 })
    for _, arg in ipairs { 322248, 422244, 331111, 432114, 834112 } do
      assert.are.equal(arg, tensor_cores.arg_of(tensor_cores.config(arg)))
    end
    for _, arg in ipairs { 131122, 231122, 931122, 312244, 302244, 342244 } do
      ok, why = tensor_cores.config(arg)
      assert.is_nil(ok, arg)
      assert.matches("and before a 2 or 3 optionally the buffers of a deeper pipeline, 3 to 8 (431122: 4 buffers, 3 "
        .. "stages in flight)", why, 1, true)
    end
    local fine, err = pcall(tensor_cores.arg_of, { tm = 2, staged = true, buffers = 9 })
    assert.is_false(fine)
    assert.matches("a pipeline of 9 buffers needs a staged or warpgroup configuration and at most 8", err, 1, true)
    fine, err = pcall(tensor_cores.arg_of, { wm = 8 })
    assert.is_false(fine)
    assert.matches("the warps along m and n (8, 1) must each be 1, 2 or 4", err, 1, true)
  end)
end)

-- The parts of a f16 (CUDA) or f32 (Metal) matmul m x k @ k x n that match() finds, with the
-- target; the operands are never realized.
local function found_for(target_name, m, k, n, batch)
  local target = targets.get(target_name)
  local dtype = target_name:match("^CUDA") and "float16" or "float32"
  local a = Tensor.empty(batch or 1, m, k, { device = "EMU", dtype = dtype })
  local b = Tensor.empty(batch or 1, k, n, { device = "EMU", dtype = dtype })
  local product = a:float():matmul(b:float())
  if not batch then product = product:reshape(m, n) end
  local sched = schedule.create({ product.uop }, { device = "EMU" })
  return assert(tensor_cores.match(sched.kernels[#sched.kernels].ast, target.gpu)), target
end

describe("warpgroup tensor cores (TC 3xxxx, wgmma) on EMU's GPU mode with CUDA_SM90", function()
  -- threads: 128 per warpgroup; copies: asynchronous copies of 16 bytes per thread, before the
  -- loop and in it (operands read straight from a buffer only): (BM + BN) * depth / (threads * 8)
  -- each, with the deepest stages that divide K (64, 32 or 16) and fit CUDA_SM90's 227 KiB
  for _, case in ipairs {
    { dtype = "float16", m = 128, k = 128, n = 128, arg = 31122, realized = true, copies = 32 },
    { dtype = "float16", m = 256, k = 48, n = 256, arg = 32112, realized = true, relu = true, copies = 4 },
    { dtype = "bfloat16", m = 128, k = 32, n = 256, arg = 32114, realized = true, copies = 12 },
    { dtype = "float16", m = 64, k = 128, n = 512, arg = 31114, realized = true, copies = 40 },
    { dtype = "float16", m = 256, k = 32, n = 128, arg = 34112, realized = true, copies = 6 },
    { dtype = "float16", m = 64, k = 32, n = 256, arg = 31212, realized = true, copies = 10 },
    -- casts fused into the kernel: the copies are STOREs of the converted values
    { dtype = "bfloat16", m = 256, k = 32, n = 64, arg = 31141, copies = 0 },
    -- B read through a transposed view: its chunks are not consecutive in memory, so only A's
    -- are asynchronous copies
    { dtype = "float16", m = 128, k = 64, n = 128, arg = 31122, realized = true, transposed = true, copies = 16 },
    -- pipelines, their products "deferred" (waited for a stage later), so the copies run
    -- buffers - 2 stages ahead: 3 buffers (5 stages of 32 wrap around them; copies: one stage
    -- before the loop, one in it), 4 buffers of 64 x (128 + 256) (192 KiB: dynamic shared memory
    -- in CUDA; 2 of the 3 stages copied before the loop), and STOREs of converted values through
    -- 3 buffers
    { dtype = "float16", m = 128, k = 160, n = 128, arg = 331122, realized = true, copies = 16 },
    { dtype = "bfloat16", m = 128, k = 192, n = 256, arg = 432114, realized = true, copies = 36 },
    { dtype = "float16", m = 128, k = 96, n = 64, arg = 331121, relu = true, copies = 0 },
  } do
    local config = tensor_cores.config(case.arg)
    it(string.format("compute %dx%d @ %dx%d%s (%s) with TC(1,%d) exactly: %d threads per workgroup", case.m, case.k,
      case.k, case.n, case.transposed and " (B transposed)" or "", case.dtype, case.arg, 128 * config.wm * config.wn),
      function()
      on_target("CUDA_SM90", function()
        with_tc(case.arg, function()
          local a, b = operands(case.m, case.k, case.n, case.dtype, case.arg + case.m)
          if case.realized then a, b = a:realize(), b:realize() end
          -- a view of B's transpose, realized in (n, k) order
          if case.transposed then b = b:transpose():contiguous():realize():transpose() end
          local product, want = shifted_product(a, b, case.relu)
          local listing = compiled(product).program:dump()
          local name = string.format("wg_m64n%dk16_%s_f32", 64 * config.tn, case.dtype == "float16" and "f16" or "bf16")
          assert.matches(name, listing, 1, true)
          assert.is_nil(listing:find("m16n8k16", 1, true))
          local workgroups, threads, x = launch_of(listing)
          assert.are.equal(128 * config.wm * config.wn, threads)
          assert.are.equal(128, x) -- a warpgroup's threads are consecutive
          local block_m, block_n = tensor_cores.block(nil, config)
          assert.are.equal(case.m // block_m * (case.n // block_n), workgroups)
          assert.are.same({ config.wm * config.tm * 64, config.wn * config.tn * 64 }, { block_m, block_n })
          local _, copies = listing:gsub("STORE[^\n]*async", "")
          assert.are.equal(case.copies, copies)
          local _, deferred = listing:gsub("WMMA[^\n]*deferred", "")
          assert.are.equal(config.buffers >= 3, deferred > 0)
          assert.are.same(want, product:tolist())
        end)
      end)
    end)
  end

  it("are offered only by targets with warpgroup shapes, and fit local memory unpadded", function()
    local hopper = found_for("CUDA_SM90", 4096, 4096, 4096)
    local ampere = found_for("CUDA", 4096, 4096, 4096)
    -- 2 tiles of 64 x 128: a 128 x 128 block, stages of 32 in two buffers: 2 * (128 + 128) * 32 * 2 bytes
    assert.are.same({ 32, 32768 }, { tensor_cores.stage_depth(hopper, tensor_cores.config(31122), 48 * 1024) })
    -- 2 x 1 warpgroups of 64 x 256: 128 x 256, exactly 48 KiB
    assert.are.same({ 32, 49152 }, { tensor_cores.stage_depth(hopper, tensor_cores.config(32114), 48 * 1024) })
    assert.is_true(tensor_cores.check(hopper, tensor_cores.config(31122), 1024, 48 * 1024))
    local ok, why = tensor_cores.check(ampere, tensor_cores.config(31122), 1024, 48 * 1024)
    assert.is_nil(ok)
    assert.are.equal("the target has no warpgroup MMA wg_m64n128k16_f16_f32 (wgmma: CUDA on compute capability 9.0)",
      why)
    local function amounts(found)
      local out = {}
      for _, action in ipairs(tensor_cores.beam_actions(found, 1024, 48 * 1024)) do out[action[3]] = true end
      return out
    end
    local on_hopper, on_ampere = amounts(hopper), amounts(ampere)
    for _, arg in ipairs { 31112, 31122, 31114, 32112, 32114, 34112 } do
      assert.is_true(on_hopper[arg], arg)
      assert.is_nil(on_ampere[arg], arg)
    end
    assert.is_true(on_hopper[2248] and on_ampere[2248])
    -- a 128 x 256 block through 4 buffers takes stages of 16 in 48 KiB, of 64 in CUDA_SM90's 227 KiB
    assert.are.same({ 16, 49152 }, { tensor_cores.stage_depth(hopper, tensor_cores.config(432114), 48 * 1024) })
    assert.are.same({ 64, 196608 }, { tensor_cores.stage_depth(hopper, tensor_cores.config(432114), 227 * 1024) })
    local deep = {}
    for _, action in ipairs(tensor_cores.beam_actions(hopper, 1024, 227 * 1024)) do deep[action[3]] = true end
    for _, arg in ipairs { 331122, 431122, 332112, 432112, 332114, 432114, 434112 } do
      assert.is_true(deep[arg], arg)
    end
    -- the heuristic keeps the measured direct tiles until a GPU has timed the warpgroup ones
    assert.are.equal(2248, tensor_cores.arg_of(tensor_cores.choose(hopper, 1024)))
  end)
end)

describe("the GPU heuristic's tile configuration", function()
  for _, case in ipairs {
    -- large: 2 x 2 warps of 4 x 8 tiles, 128 x 128 blocks (1024 workgroups)
    { target = "CUDA", m = 4096, k = 4096, n = 4096, want = 2248, workgroups = 1024 },
    { target = "CUDA", m = 2048, k = 1024, n = 2048, want = 2248, workgroups = 256 },
    -- 128 x 64 blocks would give 128 workgroups, fewer than 132 SMs: 64 x 64 ones, of square
    -- 32 x 32 warp tiles (4 x 1 warps of 1 x 8 tiles make the same block)
    { target = "CUDA", m = 1024, k = 1024, n = 1024, want = 2224, workgroups = 256 },
    -- a batch counts: 4 x 8 x 8 = 256 workgroups of 128 x 128
    { target = "CUDA", m = 1024, k = 64, n = 1024, batch = 4, want = 2248, workgroups = 256 },
    -- 96 rows: only blocks of 16 or 32 rows divide them; 32 x 64 blocks keep 192 workgroups
    { target = "CUDA", m = 96, k = 256, n = 4096, want = 2214, workgroups = 192 },
    -- tiny: every tile its own workgroup, and still fewer than 132
    { target = "CUDA", m = 64, k = 64, n = 64, want = 0, workgroups = 32 },
    -- Metal's 8 x 8 tiles: 128 x 64 blocks of 4 x 1 warps of 4 x 8 tiles (32 x 64 warp tiles)
    { target = "METAL", m = 4096, k = 4096, n = 4096, want = 4148, workgroups = 2048 },
    -- Metal's tiles are 8 x 8: 2 x 2 warps of one tile each, 16 x 16 blocks, 256 workgroups
    { target = "METAL", m = 256, k = 256, n = 256, want = 2211, workgroups = 256 },
  } do
    it(string.format("is TC(1,%d) for %s%dx%d @ %dx%d (%s)", case.want, case.batch and (case.batch .. " x ") or "",
      case.m, case.k, case.k, case.n, case.target), function()
      local found, target = found_for(case.target, case.m, case.k, case.n, case.batch)
      local config = tensor_cores.choose(found, target.gpu.threads_max)
      assert.are.equal(case.want, tensor_cores.arg_of(config))
      assert.are.equal(case.workgroups, tensor_cores.workgroups(found, config))
    end)
  end

  it("is what the pipeline lowers a matmul with", function()
    on_target("CUDA", function()
      local a, b = operands(128, 16, 256, "float16", 5) -- 32 workgroups of 16 x 8 at most: one warp, one tile
      local product = a:float():matmul(b:float())
      local workgroups, threads = launch_of(compiled(product).program:dump())
      assert.are.same({ 256, 32 }, { workgroups, threads })
      assert.are.same(naive(a, b), product:tolist())
    end)
  end)
end)

-- The fragment layout of m16n8k16 (docs/design/encodings.md), written out here: (row, col) of
-- register i of A (16 x 16) or B (16 x 8, K rows) in lane l.
local function layout(operand, l, i)
  local g, t = l >> 2, l & 3
  if operand == "A" then return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2) end
  return 2 * t + (i & 1) + 8 * (i >> 1), g
end

-- The element (offset from the tile's first element) that lane l's 32-bit register q, half h
-- (0: low) holds after ldmatrix, as the PTX ISA defines it: lane 8p + r gives the address of
-- row r of matrix p (addr(lane)); each lane receives, of matrix q, row l / 4, elements 2(l % 4)
-- and 2(l % 4) + 1; with .trans, of the transposed matrix.
local function ldmatrix_element(addr, trans, l, q, h)
  if trans then return addr(8 * q + 2 * (l & 3) + h) + (l >> 2) end
  return addr(8 * q + (l >> 2)) + 2 * (l & 3) + h
end

-- The CUDA source of the float16 matmul m x k @ k x n (float16 buffers: the copies read them
-- straight) with tile configuration c, named "k".
local function cuda_matmul_source(c, m, k, n, seed, target)
  local gpu = require "tcl.gpu"
  local linearize = require "tcl.codegen.driver.linearize"
  local source, facts
  on_target(target or "CUDA", function()
    with_tc(tensor_cores.arg_of(c), function()
      local a, b = operands(m, k, n, "float16", seed)
      tcl.realize(a, b)
      local sched = schedule.create({ a:matmul(b).uop }, { device = "EMU" })
      local ast = sched.kernels[#sched.kernels].ast
      local ctx = { name = "k", device = "EMU", renderer = emu.renderer }
      source, facts = gpu.render(linearize.linearize(lower.run_passes(ast, ctx)), { dialect = "cuda", name = "k" })
    end)
  end)
  return source, facts
end

-- Checks the PTX of the CUDA source for sm_80 and sm_90 (pending without NVRTC): `copies`
-- 16-byte cp.async, which a cp.async.wait_all lands, and nothing going through registers on
-- its way to local memory (no ld.global, no st.shared); more(ptx), if given, checks the rest.
local function ptx_copies_async(source, copies, more)
  local nvrtc = require "tcl.nvrtc"
  if not nvrtc.available() then return pending("NVRTC is not available") end
  for _, arch in ipairs { "sm_80", "sm_90" } do
    local ptx = nvrtc.compile_ptx(source, { arch = arch, name = "k" })
    local _, async = ptx:gsub("cp%.async%.cg%.shared%.global %[%%r%d+%], %[%%rd%d+%], 16;", "")
    assert.equal(copies, async)
    assert.is_truthy(ptx:find("cp.async.wait_all", 1, true))
    assert.is_nil(ptx:find("ld.global", 1, true))
    assert.is_nil(ptx:find("st.shared", 1, true))
    if more then more(ptx) end
  end
end

describe("staged tensor cores rendered to CUDA", function()
  it("read each fragment with one ldmatrix whose lanes' rows give every register its element", function()
    local c = { wm = 2, wn = 1, tm = 2, tn = 2, staged = true }
    local source = cuda_matmul_source(c, 64, 64, 32, 7)
    -- a 64 x 32 block, one stage of K = 64 (4 K-steps): per K-step tm A and tn B fragments
    local loads = { x4 = 0, ["x2.trans"] = 0 }
    -- the address, in bytes of the shared window: the tile's, plus 2 x the index of register 0,
    -- plus 2 x the lane's term (from its rows to the tile's first element), plus 2 x c0
    for kind, tile, expr, bytes in source:gmatch("ldmatrix%.sync%.aligned%.m8n8%.([%w.]+)%.shared%.b16[^\n]-" ..
      "\"r\"%((smem%d+)_u32 %+ %(unsigned int%)alu%d+ %* 2u %+ (%b()) %* 2u %+ (%d+)u%)") do
      loads[kind] = loads[kind] + 1
      local trans = kind == "x2.trans"
      local operand = trans and "B" or "A"
      local c0 = math.tointeger(tonumber(bytes)) // 2
      local ld -- the row stride: the largest factor of the lane's term
      for f in expr:gmatch("%* (%d+)u") do ld = math.max(ld or 0, math.tointeger(tonumber(f))) end
      assert.is_truthy(c0 and ld, expr)
      assert.equal(0, ld % 8) -- rows at 16-byte boundaries
      local lua_expr = expr:gsub("(%d+)u", "%1")
      local lane_only = assert(load("local tcl_lane_id = ...; return " .. lua_expr))
      local function lane_term(l) return c0 + lane_only(l) end
      -- register 0 of lane l reads X(l) + c0 = row0 * ld + col0 (the tile's first element at 0)
      local function x_of(l)
        local row, col = layout(operand, l, 0)
        return row * ld + col - c0
      end
      local function addr(l) return x_of(l) + lane_term(l) end
      for l = 0, 31 do
        for reg = 0, (trans and 4 or 8) - 1 do
          local row, col = layout(operand, l, reg)
          assert.equal(row * ld + col, ldmatrix_element(addr, trans, l, reg >> 1, reg & 1),
            string.format("%s of %s, lane %d, register %d", kind, tile, l, reg))
        end
      end
    end
    assert.same({ x4 = 4 * c.tm, ["x2.trans"] = 4 * c.tn }, loads)
    assert.is_nil(source:find("unsigned int wmma%d+_a0 ="), "no fragment is packed from single loads")
    -- the stage (A 64 x 64 and B 64 x 16 halves, 64 threads: 8 + 2 chunks of 8 each) is
    -- copied by 16-byte asynchronous copies, which the barrier closing it waits for (80 single
    -- halves loaded and stored otherwise)
    ptx_copies_async(source, 10, function(ptx)
      local _, x4 = ptx:gsub("ldmatrix%.sync%.aligned%.m8n8%.x4%.shared%.b16", "")
      assert.equal(4 * c.tm, x4)
      assert.matches("cp.async.wait_all;%s+// end inline asm%s+bar.sync", ptx)
    end)
  end)
end)

describe("double-buffered tensor cores rendered to CUDA", function()
  it("copy every stage with cp.async, which the barrier opening the next stage waits for", function()
    local source = cuda_matmul_source({ wm = 2, wn = 1, tm = 2, tn = 2, staged = true, buffers = 2 }, 64, 128, 16, 9)
    -- a 64 x 16 block, 2 stages of 64: per stage and thread (64 threads) 8 chunks of A's 64 x 64
    -- slice and 2 of B's 64 x 16, 16 bytes each; stage 0 before the loop, stage s + 1 in it
    local _, copies = source:gsub("cp%.async%.cg%.shared%.global %[%%0%], %[%%1%], 16;", "")
    assert.equal(20, copies)
    -- the last stage copies nothing: those copies are predicated on the gate, not branched
    -- around (a branch per copy would make NVVM compute their common addresses again in each)
    local _, gated = source:gsub("setp%.ne%.b32 g, %%2, 0;\\n\\t@g cp%.async%.cg%.shared%.global", "")
    assert.equal(10, gated)
    assert.is_nil(source:find("if %(alu%d+%) asm volatile%(\"cp%.async"))
    local _, waits = source:gsub('asm volatile%("cp%.async%.wait_all;" ::: "memory"%);\n%s*__syncthreads%(%);', "")
    local _, barriers = source:gsub("__syncthreads%(%);", "")
    assert.equal(1, barriers) -- one per stage: it opens the stage
    assert.equal(1, waits)
    ptx_copies_async(source, 20)
  end)
end)

describe("warpgroup tensor cores rendered to CUDA", function()
  it("issue a stage's wgmmas back to back and wait once, copying with cp.async, for sm_90a", function()
    local cuda_tools = require "spec.support.cuda_tools"
    -- copies: the 16-byte cp.async of one stage (per thread)
    for _, case in ipairs {
      -- one warpgroup of 2 tiles 64 x 128: stages of 64 (4 K-steps), 8 wgmmas a stage, 64 KiB
      -- of local memory in two buffers (dynamic shared memory: more than 48 KiB)
      { c = { tm = 2, tn = 2, warpgroup = true }, m = 128, k = 128, n = 128, wgmmas = 8, copies = 16,
        shared = 65536 },
      -- 2 x 1 warpgroups of 64 x 256, stages of 32 (48 KiB: static shared memory): 2 wgmmas a stage
      { c = { wm = 2, tn = 4, warpgroup = true }, m = 128, k = 96, n = 256, wgmmas = 2, copies = 6 },
      -- the same through 4 buffers of stages of 64 (192 KiB), the products deferred (one stage
      -- of them in flight at each barrier) and 2 stages of copies: the prologue copies 2 stages
      -- with a barrier between them, each barrier leaves 1 copy group in flight
      { c = { wm = 2, tn = 4, warpgroup = true, buffers = 4 }, m = 128, k = 320, n = 256, wgmmas = 4, copies = 12,
        shared = 196608, barriers = 2, in_flight = 1, deferred = true },
      -- deferred in a loop NVVM keeps (32 stages of 64): the last stage's wait is in the loop
      { c = { warpgroup = true, buffers = 4 }, m = 64, k = 2048, n = 64, wgmmas = 4, copies = 8, shared = 65536,
        barriers = 2, in_flight = 1, deferred = true, loop = true },
    } do
      local source, facts = cuda_matmul_source(case.c, case.m, case.k, case.n, 9, "CUDA_SM90")
      assert.are.equal("sm_90a", facts.arch)
      assert.are.equal(case.shared, facts.dynamic_local_bytes)
      assert.are.equal(case.shared ~= nil, source:find("extern __shared__", 1, true) ~= nil)
      local _, barriers = source:gsub("__syncthreads%(%)", "")
      assert.are.equal(case.barriers or 1, barriers)
      local _, waits = source:gsub("cp%.async%.commit_group;\\n\\tcp%.async%.wait_group " .. (case.in_flight or 0), "")
      assert.are.equal(case.in_flight and barriers or 0, waits)
      -- one run per stage: a fence, the wgmmas, one commit and one wait (deferred: of all but
      -- this stage's group, but for the last stage)
      for _, what in ipairs { "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned 0" } do
        local _, count = source:gsub(what:gsub("%.", "%%."), "")
        assert.are.equal(1, count, what)
      end
      local _, leaving_one = source:gsub("else asm volatile%(\"wgmma%.wait_group%.sync%.aligned 1;", "")
      assert.are.equal(case.deferred and 1 or 0, leaving_one)
      local _, wgmmas = source:gsub("wgmma%.mma_async", "")
      assert.are.equal(case.wgmmas, wgmmas)
      -- the next stage's copies are issued after the stage's wgmmas, before the run's commit and
      -- wait: the tensor cores compute while the threads issue them
      local last_wgmma = select(2, source:find(".*wgmma%.mma_async"))
      local commit = source:find("wgmma.commit_group", 1, true)
      local _, overlapped = source:sub(last_wgmma, commit):gsub("cp%.async%.cg%.shared%.global", "")
      assert.are.equal(case.copies, overlapped)
      if not cuda_tools.HAVE_NVRTC then return pending("NVRTC is not available") end
      -- compile_sm90a fails if ptxas injects waits or serializes the wgmmas
      local ptx = cuda_tools.compile_sm90a(source, "k")
      local _, async = ptx:gsub("cp%.async%.cg%.shared%.global %[%%r%d+%], %[%%rd%d+%], 16;", "")
      -- the copies before the loop, and those in it: once, or more where NVVM unswitches or
      -- unrolls the loop (it unrolls the 5 stages of the deferred case)
      local before = case.copies * ((case.c.buffers or 2) - (case.deferred and 2 or 1))
      assert.is_true(async > before and (async - before) % case.copies == 0, async)
      assert.is_nil(ptx:find("ld.global", 1, true))
      assert.is_nil(ptx:find("st.shared", 1, true))
      -- NVVM may keep two copies of the loop's body (unswitched on the gate of the last stage's copies)
      local _, issued = ptx:gsub("wgmma%.mma_async%.sync%.aligned%.m64n%d+k16%.f32%.f16%.f16", "")
      assert.is_true(issued > 0 and issued % case.wgmmas == 0, issued)
      if case.loop then assert.are.equal(case.wgmmas, issued) end
    end
  end)
end)

describe("BEAM on a tensor-core matmul", function()
  it("times TC's tile configurations that fit, and its kernel computes the product", function()
    on_target("CUDA", function()
      local saved_mutate = beam.hooks.mutate
      local timed = {}
      beam.quiet = true
      beam.hooks.mutate = function(sink) -- the other kernels (the casts) are searched too
        if sink.arg[2]:find("TC(", 1, true) then timed[#timed + 1] = sink.arg[2] end
      end
      local ok, err = pcall(tcl.context { CACHELEVEL = 0, BEAM = 2 }, function()
        local a, b = operands(64, 16, 64, "float16", 9)
        local product = a:float():matmul(b:float())
        assert.are.same(naive(a, b), product:tolist())
        -- of BEAM_ARGS, those with blocks of at most 64 x 64 (each candidate once)
        table.sort(timed)
        assert.are.same({ "TC(1,0)", "TC(1,1112)", "TC(1,1121)", "TC(1,1122)", "TC(1,12224)", "TC(1,1244)",
          "TC(1,2222)", "TC(1,2224)" }, timed)
      end)
      beam.quiet, beam.hooks.mutate = false, saved_mutate
      assert(ok, err)
    end)
  end)
end)

describe("BEAM on a float16 product stored as float16", function()
  it("keeps the tensor-core candidates although their rounding differs from the unoptimized kernel's", function()
    on_target("CUDA", function()
      beam.quiet = true
      -- the heuristic applies nothing: only a TC candidate that BEAM kept puts WMMA in the kernel
      optimize.set_heuristic(function() end)
      local ok, err = pcall(tcl.context { CACHELEVEL = 0 }, function()
        -- random values: the unoptimized kernel rounds each product to float16, tensor cores
        -- multiply exactly, so outputs differ by an ulp of float16 here and there
        local rng = splitmix.new(17)
        local function random_half(rows, cols)
          local values = {}
          for i = 1, rows * cols do values[i] = rng:uniform(-1, 1) end
          return Tensor(values, { device = "EMU" }):reshape(rows, cols):cast("float16"):realize()
        end
        local a, b = random_half(64, 64), random_half(64, 64)
        local want = a:to("CPU"):float():matmul(b:to("CPU"):float()):tolist()
        -- BEAM for the product's kernel alone (the searches of the other kernels cost time)
        local product = a:matmul(b)
        local listing = tcl.context { BEAM = 2 }(function()
          local searched = compiled(product).program:dump()
          product:realize() -- the searched kernel, from the kernel cache
          return searched
        end)
        assert.matches("WMMA", listing, 1, true)
        local got = product:float():tolist()
        for i = 1, 64 do
          for j = 1, 64 do assert(math.abs(got[i][j] - want[i][j]) <= 2 ^ -8 * (1 + math.abs(want[i][j]))) end
        end
      end)
      beam.quiet = false
      optimize.set_heuristic(nil)
      assert(ok, err)
    end)
  end)
end)

describe("the opt TC", function()
  local function matmul_kernel(caps)
    local a, b = operands(16, 16, 8, "float16", 3)
    local sched = schedule.create({ a:float():matmul(b:float()).uop }, { device = "EMU" })
    return opt.kernel(sched.kernels[#sched.kernels].ast, caps)
  end

  it("is a marker that must come first and takes no other opt after it", function()
    local k = matmul_kernel(targets.get("CUDA").opt_caps())
    k:apply("TC", 1, 0)
    local ok, err = pcall(k.apply, k, "LOCAL", 1, 2)
    assert.is_false(ok)
    assert.matches("tensor cores were applied: the kernel takes no other opt", tostring(err), 1, true)
    local other = matmul_kernel(targets.get("CUDA").opt_caps())
    other:apply("UPCAST", 1, 2)
    ok, err = pcall(other.apply, other, "TC", 1, 0)
    assert.is_false(ok)
    assert.matches("TC must be the first opt", tostring(err), 1, true)
    ok, err = pcall(k.apply, matmul_kernel(targets.get("CUDA").opt_caps()), "TC", 2, 0)
    assert.is_false(ok)
    assert.matches("TC takes axis 1", tostring(err), 1, true)
  end)

  it("takes a valid tile configuration, and says what is wrong with an invalid one", function()
    local caps = targets.get("CUDA").opt_caps()
    local function refusal(amount, kernel_caps)
      local ok, err = matmul_kernel(kernel_caps or caps):try_apply("TC", 1, amount)
      assert.is_false(ok)
      return err
    end
    assert.is_true((matmul_kernel(caps):try_apply("TC", 1, 4488)))
    assert.matches("invalid opt TC(1,4): TC's amount is 0 (one warp, one tile) or the four digits WM WN TM TN",
      refusal(4), 1, true)
    assert.matches("TC's warps along m and n (its first two digits) must each be 1, 2 or 4", refusal(3111), 1, true)
    assert.matches("TC's tiles per warp along m and n (its last two digits) must each be 1, 2, 4 or 8",
      refusal(1163), 1, true)
    local small = targets.get("CUDA").opt_caps()
    small.threads_max = 128
    assert.matches("invalid opt TC(1,2411): a workgroup of 8 warps is 256 threads, the device allows 128",
      refusal(2411, small), 1, true)
    assert.matches("invalid opt TC(1,12411): a workgroup of 8 warps is 256 threads, the device allows 128",
      refusal(12411, small), 1, true)
    assert.matches("for operands staged through local memory (12244)", refusal(20000), 1, true)
    assert.is_true((matmul_kernel(caps):try_apply("TC", 1, 34142)))
    assert.matches("TC's warpgroups along m and n (the first two digits after the 3) must be 1, 2 or 4 and 1 or 2",
      refusal(31411), 1, true)
    assert.matches("TC's tiles of 64 rows per warpgroup and width in 64 columns (the last two digits) must each be 1, "
      .. "2 or 4", refusal(31181), 1, true)
    -- a warpgroup is 4 warps: 2 x 1 of them are 256 threads
    assert.matches("invalid opt TC(1,32111): a workgroup of 8 warps is 256 threads, the device allows 128",
      refusal(32111, small), 1, true)
    -- pipelines of 3 to 8 buffers, in front of a 2 or a 3 only
    assert.is_true((matmul_kernel(caps):try_apply("TC", 1, 431122)))
    assert.is_true((matmul_kernel(caps):try_apply("TC", 1, 822244)))
    for _, amount in ipairs { 131122, 231122, 931122, 312244, 302244, 342244 } do
      assert.matches("before a 2 or 3 optionally the buffers of a deeper pipeline, 3 to 8 (431122)", refusal(amount),
        1, true)
    end
    assert.matches("invalid opt TC(1,432111): a workgroup of 8 warps is 256 threads, the device allows 128",
      refusal(432111, small), 1, true)
  end)

  it("staged, takes the deepest stage of K that fits the local memory and divides K", function()
    local found = found_for("CUDA", 256, 4096, 256)
    -- 2 x 2 warps of 4 x 8 tiles: a 128 x 128 block; depth 64: (128 * 72 + 64 * 136) * 2 bytes
    local config = tensor_cores.config(12248)
    assert.are.same({ 64, 35840 }, { tensor_cores.stage_depth(found, config, 48 * 1024) })
    -- less local memory: a shallower stage
    assert.are.same({ 32, 18944 }, { tensor_cores.stage_depth(found, config, 32 * 1024) })
    local none, why = tensor_cores.stage_depth(found, config, 8 * 1024)
    assert.is_nil(none)
    assert.matches("no stage of K fits", why, 1, true)
    assert.is_nil((tensor_cores.check(found, config, 1024, 8 * 1024)))
    -- unstaged tiles need no local memory
    assert.is_true(tensor_cores.check(found, tensor_cores.config(2248), 1024, 8 * 1024))
    -- K of 48: stages of 16 only
    assert.are.equal(16, (tensor_cores.stage_depth(found_for("CUDA", 128, 48, 128), tensor_cores.config(12244))))
    -- a pipeline of B buffers needs B - 1 stages for its prologue: 8 buffers of a 128 x 128
    -- warpgroup block over K = 128 take stages of 16 (8 of them), 8 * (128 + 128) * 16 * 2 bytes
    local hopper = found_for("CUDA_SM90", 128, 128, 128)
    assert.are.same({ 16, 65536 }, { tensor_cores.stage_depth(hopper, tensor_cores.config(831122), 227 * 1024) })
    assert.are.same({ 64, 98304 }, { tensor_cores.stage_depth(hopper, tensor_cores.config(331122), 227 * 1024) })
    none, why = tensor_cores.stage_depth(found_for("CUDA_SM90", 128, 96, 128), tensor_cores.config(831122), 227 * 1024)
    assert.is_nil(none)
    assert.matches("no stage of K fits: K (96) must be a multiple of 16 with at least 7 stages, and a 128 x 128 "
      .. "block's A and B slices of depth 16 take 65536 bytes of local memory in 8 buffers (the target has 232448)",
      why, 1, true)
  end)

  it("is refused by the heuristics' kernel when the matmul's sizes do not fit the configuration", function()
    local caps = targets.get("CUDA").opt_caps()
    local info = { name = "matmul", device = "EMU", caps = caps }
    local k = kernel_api.wrap(matmul_kernel(caps), info) -- 16 x 16 @ 16 x 8
    local ok, err = k:try_apply("TC", 1, 2111)
    assert.is_false(ok)
    assert.are.equal("invalid opt TC(1,2111): m (16) is not a multiple of WM*TM*16 = 2*1*16 = 32", err)
    ok, err = k:try_apply("TC", 1, 1112)
    assert.is_false(ok)
    assert.are.equal("invalid opt TC(1,1112): n (8) is not a multiple of WN*TN*8 = 1*2*8 = 16", err)
    assert.has_error(function() k:apply("TC", 1, 1211) end,
      "invalid opt TC(1,1211): n (8) is not a multiple of WN*TN*8 = 2*1*8 = 16")
    assert.is_true((k:try_apply("TC", 1, 0)))
    local elementwise = schedule.create({ (Tensor.ones(16, 8, { device = "EMU" }) * 2).uop }, { device = "EMU" })
    local e = kernel_api.wrap(opt.kernel(elementwise.kernels[#elementwise.kernels].ast, caps), info)
    ok, err = e:try_apply("TC", 1, 0)
    assert.is_false(ok)
    assert.matches("invalid opt TC(1,0): TC: not one reduction stored once", err, 1, true)
  end)

  it("that src/opt accepts but the sizes do not fit fails the lowering with the reason", function()
    on_target("CUDA", function()
      local a, b = operands(32, 16, 8, "float16", 4)
      local sched = schedule.create({ a:float():matmul(b:float()).uop }, { device = "EMU" })
      local k = opt.kernel(sched.kernels[#sched.kernels].ast, targets.get("CUDA").opt_caps())
      k:apply("TC", 1, 2212) -- src/opt sees no sizes: 2 x 1 tiles of 16 rows fit 32, 2 x 2 of 8 columns do not fit 8
      local ok, err = pcall(lower.compile, k:sink(), { device = "EMU", noopt = true })
      assert.is_false(ok)
      assert.matches("TC(1,2212): n (8) is not a multiple of WN*TN*8 = 2*2*8 = 32", tostring(err), 1, true)
    end)
  end)
end)
