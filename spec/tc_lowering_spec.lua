-- spec/tc_lowering_spec.lua — matmuls on tensor cores: the opt TC (src/opt/kernel_opt.c), the
-- GPU heuristic's choice (tcl.heuristics.gpu, tcl.heuristics.tensor_cores.match) and the pass
-- "tensor cores" (tcl.codegen.tensor_cores), run on EMU's GPU mode with CUDA's capabilities
-- (float16 and bfloat16 inputs, m16n8k16) and Metal's (float32, m8n8k8): values against a
-- naive double-precision product, the programs' WMMA, and the kernels the pass leaves alone.
local env = require "tcl.env"
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.lower"
local opt = require "tcl.opt"
local targets = require "tcl.codegen.gpu_targets"
local emu = require "tcl.codegen.emu"
local splitmix = require "spec.support.splitmix"

local Tensor = tcl.Tensor

-- EMU's backend reads EMU_GPU when it loads; these specs switch its renderer per target.
local function on_target(name, fn)
  local saved_renderer, saved_options, saved_env = emu.renderer, emu.options, env.EMU_GPU
  local target = targets.get(name)
  emu.renderer = { name = "emu-" .. target.name, lacks = {}, gpu = target.gpu, opt_caps = target.opt_caps }
  emu.options = "emu-gpu-" .. target.name
  local ok, err = pcall(fn)
  emu.renderer, emu.options, env.EMU_GPU = saved_renderer, saved_options, saved_env
  assert(ok, err)
end

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

local function naive(a, b)
  local A, B = a:float():tolist(), b:float():tolist()
  local out = {}
  for i = 1, #A do
    out[i] = {}
    for j = 1, #B[1] do
      local s = 0
      for k = 1, #B do s = s + A[i][k] * B[k][j] end
      out[i][j] = s
    end
  end
  return out
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
    ok, err = pcall(k.apply, matmul_kernel(targets.get("CUDA").opt_caps()), "TC", 1, 4)
    assert.is_false(ok)
    assert.matches("TC takes axis 1 and amount 0", tostring(err), 1, true)
  end)
end)
