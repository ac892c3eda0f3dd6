-- tcl.heuristics.tensor_cores — which kernels tensor cores take, and the shapes and fragment
-- layouts of src/core/wmma.c as the lowering needs them: the GPU heuristic asks match()
-- before it applies TC, and the pass "tensor cores" (tcl.codegen.tensor_cores) lowers what
-- match() found. Layer: heuristics (it reads kernels only).
--
-- The kernel: STOREs of f(REDUCE(ADD, MUL(a, b), k)) (or of CAST(MUL(a, b)) to float32: the
-- product of float16 tensors) where a depends on the output range m and
-- the reduce range k but not on the output range n, b on k and n but not m (other output
-- ranges, a batch, may appear in both), the inputs of the shape's dtype (float16 or bfloat16
-- loads widened to float32, or float32 for Metal's shape), m, n, k multiples of the shape's
-- M, N, K. It becomes one warp (32 lanes, a workgroup) per M x N tile of the output:
--   tiles of m and n (and the other output ranges) as global ranges, the lane as a local one,
--   a loop over K-steps in which each lane loads its A and B fragment registers (a and b
--   with m, k, n replaced by the positions of the layout) and the C fragment from a register
--   array, WMMA nodes out = 0..C-1 store the new accumulators back;
--   after the loop, each lane stores f of each accumulator at its C positions.
-- M.match(sink, target) tells a heuristic whether the pass can lower a kernel.
local UOp = require "tcl.uop"
local core = require "tcl.core"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"
local F32 = core.dtype "float32"

-- The shapes of src/core/wmma.c: sizes, registers per operand, input dtype.
local SHAPES = {
  m16n8k16_f16_f32 = { m = 16, n = 8, k = 16, regs = { 8, 4, 4 }, input = "float16" },
  m16n8k16_bf16_f32 = { m = 16, n = 8, k = 16, regs = { 8, 4, 4 }, input = "bfloat16" },
  m8n8k8_f32_f32 = { m = 8, n = 8, k = 8, regs = { 2, 2, 2 }, input = "float32" },
}
M.SHAPES = SHAPES

--- (row, col) of register reg of operand ("A", "B" or "C") in lane (index expressions).
function M.position(shape, operand, lane, reg)
  local function c(v) return new("CONST", INDEX, nil, v) end
  if shape.m == 8 then return lane // c(4), lane % c(4) * c(2) + c(reg) end
  local g, t = lane // c(4), lane % c(4)
  if operand == "A" then
    return g + c(8 * ((reg >> 1) & 1)), t * c(2) + c((reg & 1) + 8 * (reg >> 2))
  elseif operand == "B" then
    return t * c(2) + c((reg & 1) + 8 * (reg >> 1)), g
  end
  return g + c(8 * (reg >> 1)), t * c(2) + c(reg & 1)
end

local function depends_on(u, r)
  for _, x in ipairs(u:toposort()) do if x == r then return true end end
  return false
end

-- The input below a widening cast (CAST to float32 of a float16/bfloat16 value), or u.
local function narrow_input(u)
  if u.op == "CAST" and u.dtype == F32 then return u.src[1] end
  return u
end

--- The kernel's matmul parts for the target's tensor cores, or nil and why not.
-- gpu: { tensor_cores = { shape names in preference order } } (tcl.codegen.gpu_targets).
function M.match(sink, gpu)
  local shapes = gpu and gpu.tensor_cores
  if not shapes or #shapes == 0 then return nil, "the target has no tensor cores" end
  local reduces, stores = {}, {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "REDUCE" then reduces[#reduces + 1] = u end
    if u.op == "STORE" then stores[#stores + 1] = u end
  end
  if #reduces ~= 1 or #stores ~= 1 then return nil, "not one reduction stored once" end
  local red = reduces[1]
  if red.arg ~= "ADD" or #red.src ~= 2 or red.dtype ~= F32 then return nil, "not a float32 sum over one range" end
  local k = red.src[2]
  local mul = red.src[1]
  -- a product of narrow floats widened afterwards (a matmul of float16 tensors multiplies in
  -- float16, then sums in float32): tensor cores multiply exactly, so they take it too
  if mul.op == "CAST" and mul.src[1].op == "MUL" and mul.src[1].dtype ~= F32 then mul = mul.src[1] end
  if mul.op ~= "MUL" then return nil, "the summand is not a product" end
  local store = stores[1]
  local outputs = {}
  for _, u in ipairs(store.src[1]:toposort()) do
    if u.op == "RANGE" then outputs[#outputs + 1] = u end
  end
  -- m: an output range b does not use; n: one a does not use
  local x, y = mul.src[1], mul.src[2]
  for _, order in ipairs { { x, y }, { y, x } } do
    local a, b = order[1], order[2]
    local m, n
    for _, r in ipairs(outputs) do
      local in_a, in_b = depends_on(a, r), depends_on(b, r)
      if in_a and not in_b then m = m or r elseif in_b and not in_a then n = n or r end
    end
    if m and n and depends_on(a, k) and depends_on(b, k) then
      local ia, ib = narrow_input(a), narrow_input(b)
      for _, name in ipairs(shapes) do
        local shape = SHAPES[name]
        local input = core.dtype(shape.input)
        local ok_dtype = (shape.input == "float32" and a.dtype == F32 and b.dtype == F32)
          or (ia.dtype == input and ib.dtype == input)
        local sizes = m.src[1].arg % shape.m == 0 and n.src[1].arg % shape.n == 0 and k.src[1].arg % shape.k == 0
        if ok_dtype and sizes then
          return { shape = shape, name = name, m = m, n = n, k = k, a = shape.input == "float32" and a or ia,
            b = shape.input == "float32" and b or ib, reduce = red, store = store, outputs = outputs }
        end
      end
      return nil, "no tensor-core shape fits the dtypes and sizes"
    end
  end
  return nil, "not a product of an (m, k) and a (k, n) operand"
end

return M
