-- spec/schedule/dequant_fusion_spec.lua — a quantized weight's dequantization fused into the
-- product that uses it (tcl.schedule.realize_points, "Dequantization", DEQUANT_ROWS): for
-- Q8_0, Q4_0 and Q4_K weights read from GGUF files written here (spec/support/gguf_writer.lua),
-- x @ W^T with 1 and 8 rows of x is one kernel that reads the raw blocks (Q4_K: and two small
-- kernels of its sub-block scales and mins), no kernel stores a float buffer of the weight's
-- size, and the values equal x times the weight dequantized by hand from the chosen blocks.
-- By default never a float copy; past DEQUANT_ROWS rows when it is set, and with the rule off,
-- the float copy is stored as before. On the
-- CPU the product unrolls its reduction by the block size (tcl.heuristics.default,
-- BLOCK_LANES): the blocks are read as vectors of 32 bytes, not gathered.
local helper = require "spec.support.helper"
local splitmix = require "spec.support.splitmix"
local W = require "spec.support.gguf_writer"
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local realize_points = require "tcl.schedule.realize_points"
local lower = require "tcl.codegen.driver.lower"
local gguf = require "tcl.api.gguf"
local Tensor = tcl.Tensor

local file_with, remove_files = helper.temp_files()
teardown(remove_files)

local K, N = 512, 16 -- the weight: N rows of K values (two Q4_K super-blocks per row)
local rng = splitmix.new(3705)

local function randoms(n, lo, hi)
  local q = {}
  for i = 1, n do q[i] = rng:integer(lo, hi) end
  return q
end
-- float16 bits of a normal scale in [2^-6, 2^-2): products of small integers stay exact
local function scale_bits() return (rng:integer(9, 12) << 10) | rng:integer(0, 1023) end

-- The blocks of an N x K weight of type_name and the weight's values by the format's formula
-- (value = d * q for Q8_0, d * (q - 8) for Q4_0, d * scale * q - dmin * min for Q4_K).
local function quantized_weight(type_name)
  local blocks, weight = {}, {}
  for r = 1, N do
    local row = {}
    if type_name == "Q4_K" then
      for _ = 1, K // 256 do
        local d, dmin = scale_bits(), scale_bits() | (rng:integer(0, 1) << 15)
        local scales, mins, q = randoms(8, 0, 63), randoms(8, 0, 63), randoms(256, 0, 15)
        blocks[#blocks + 1] = W.q4_k_block(d, dmin, scales, mins, q)
        for i = 1, 256 do
          local j = (i - 1) // 32 + 1
          row[#row + 1] = W.half(d) * scales[j] * q[i] - W.half(dmin) * mins[j]
        end
      end
    else
      for _ = 1, K // 32 do
        local d = scale_bits()
        local q = type_name == "Q8_0" and randoms(32, -128, 127) or randoms(32, 0, 15)
        blocks[#blocks + 1] = type_name == "Q8_0" and W.q8_0_block(d, q) or W.q4_0_block(d, q)
        for i = 1, 32 do row[#row + 1] = W.half(d) * (type_name == "Q8_0" and q[i] or q[i] - 8) end
      end
    end
    weight[r] = row
  end
  local tensors, _, infos = tcl.nn.state.gguf_load(file_with(W.file { tensors = { { name = "w", dims = { K, N },
    type = type_name, data = table.concat(blocks) } } }), { device = "CPU" })
  return tensors.w, infos.w.blocks, weight
end

-- x (rows x K of small dyadic values) and its values
local function input(rows)
  local xs = {}
  for i = 1, rows * K do xs[i] = rng:integer(-8, 8) / 8 end
  return Tensor(xs, { device = "CPU" }):reshape(rows, K):realize(), xs
end

-- the plan's buffers of the weight's element count
local function weight_sized_buffers(plan)
  local count = 0
  for _, shp in pairs(plan.buffer_shapes) do
    local numel = 1
    for _, d in ipairs(shp) do numel = numel * d end
    if numel == K * N then count = count + 1 end
  end
  return count
end

local function reads(kernel, buffer)
  for _, b in ipairs(kernel.buffers) do
    if b == buffer then return true end
  end
  return false
end

-- y's values against x times the hand-dequantized weight
local function check_values(y, xs, weight, rows)
  local got = y:tolist()
  for m = 1, rows do
    for r = 1, N do
      local sum, magnitude = 0, 0
      for i = 1, K do
        local term = xs[(m - 1) * K + i] * weight[r][i]
        sum, magnitude = sum + term, magnitude + math.abs(term)
      end
      local v = got[m][r]
      -- float32 sums of K terms in any order: within K * 2^-24 of the sum of their magnitudes
      -- (a wrong dequantization moves many terms by a scale each: far more)
      assert(math.abs(v - sum) <= K * 2 ^ -24 * magnitude,
        string.format("row %d, output %d: %.9g, expected %.9g", m, r, v, sum))
    end
  end
end

describe("a quantized weight's dequantization fused into its product", function()
  -- kernels of x @ W^T: the product alone, Q4_K with its two sub-block scale kernels
  local KERNELS = { Q8_0 = 1, Q4_0 = 1, Q4_K = 3 }

  for _, type_name in ipairs { "Q8_0", "Q4_0", "Q4_K" } do
    for _, rows in ipairs { 1, 8 } do
      it(string.format("%s, %d row%s: the product reads the blocks; no float copy of the weight", type_name,
        rows, rows > 1 and "s" or ""), function()
        local w, blocks, weight = quantized_weight(type_name)
        local x, xs = input(rows)
        local y = x:matmul(w:transpose(1, 2))
        local plan = schedule.create({ y.uop })
        assert.are.equal(KERNELS[type_name], #plan.kernels)
        assert.are.equal(0, weight_sized_buffers(plan), "a buffer of the weight's size is stored")
        local raw = blocks.uop.src[1]
        assert.are.equal("BUFFER", raw.op)
        local product = plan.kernels[#plan.kernels]
        assert.is_true(reads(product, raw), "the product's kernel does not read the raw blocks")
        check_values(y, xs, weight, rows)
      end)
    end
  end

  -- the rows past which a float copy is stored, for the specs of that setting
  local function with_dequant_rows(n, fn)
    local saved = realize_points.DEQUANT_ROWS
    realize_points.DEQUANT_ROWS = n
    local ok, err = pcall(fn)
    realize_points.DEQUANT_ROWS = saved
    assert(ok, err)
  end

  it("never stores a float copy by default, a long prompt's 200 rows included", function()
    local w, _, weight = quantized_weight("Q4_0")
    local x, xs = input(200)
    local y = x:matmul(w:transpose(1, 2))
    local plan = schedule.create({ y.uop })
    assert.are.equal(1, #plan.kernels)
    assert.are.equal(0, weight_sized_buffers(plan))
    check_values(y, xs, weight, 200)
  end)

  it("stores the float copy past DEQUANT_ROWS rows when set (64), and at 8 rows with the rule off", function()
    local w, _, weight = quantized_weight("Q4_0")
    with_dequant_rows(64, function()
      local x, xs = input(65)
      local y = x:matmul(w:transpose(1, 2))
      local plan = schedule.create({ y.uop })
      assert.are.equal(2, #plan.kernels)
      assert.are.equal(1, weight_sized_buffers(plan))
      check_values(y, xs, weight, 65)
    end)

    local saved = realize_points.DEQUANT_ROWS
    realize_points.DEQUANT_ROWS = 0
    local ok, err = pcall(function()
      local x8 = input(8)
      local plan8 = schedule.create({ x8:matmul(w:transpose(1, 2)).uop })
      assert.are.equal(2, #plan8.kernels)
      assert.are.equal(1, weight_sized_buffers(plan8))
    end)
    realize_points.DEQUANT_ROWS = saved
    assert(ok, err)
  end)

  it("Q4_K past DEQUANT_ROWS rows (set to 64): its sub-block scales are stored first, then the float copy", function()
    local w, _, weight = quantized_weight("Q4_K")
    local rows = 65
    local x, xs = input(rows)
    local y = x:matmul(w:transpose(1, 2))
    local plan
    with_dequant_rows(64, function() plan = schedule.create({ y.uop }) end)
    -- the scales' and the mins' kernels (K * N / 32 values each), the copy's, the product's
    assert.are.equal(4, #plan.kernels)
    assert.are.equal(1, weight_sized_buffers(plan))
    local small = 0
    for _, shp in pairs(plan.buffer_shapes) do
      local numel = 1
      for _, d in ipairs(shp) do numel = numel * d end
      if numel == K * N // 32 then small = small + 1 end
    end
    assert.are.equal(2, small, "the sub-block scales and mins are not stored")
    check_values(y, xs, weight, rows)
  end)

  it("applies to cones of 1-byte integer loads only: the same ops on a float32 load are stored", function()
    local function cone(a, b)
      return ((a:float() * 0.5 + 1) * b:float() - a:float() * 0.25 + b:float() * 2) * 0.125 - 3
    end
    local bytes = {}
    for i = 1, N * K do bytes[i] = rng:integer(0, 255) end
    local a = Tensor(bytes, { device = "CPU", dtype = "uint8" }):reshape(N, K):realize()
    local b = Tensor(bytes, { device = "CPU", dtype = "int8" }):reshape(N, K):realize()
    local f = Tensor(bytes, { device = "CPU", dtype = "float32" }):reshape(N, K):realize()
    local x = input(8)
    assert.are.equal(1, #schedule.create({ x:matmul(cone(a, b):transpose(1, 2)).uop }).kernels)
    local plan = schedule.create({ x:matmul(cone(a, f):transpose(1, 2)).uop })
    assert.are.equal(2, #plan.kernels) -- the operand rule (OPERAND_OPS) stores it
    assert.are.equal(1, weight_sized_buffers(plan))
  end)
end)

describe("a dequantization stored by itself", function()
  for _, type_name in ipairs { "Q8_0", "Q4_0", "Q4_K" } do
    it(type_name .. ": its elementwise kernel takes 32 lanes (two UPCASTs of 16), with the values by hand", function()
      local w, _, weight = quantized_weight(type_name)
      local lines, saved = {}, lower.log
      lower.log = function(line) lines[#lines + 1] = line end
      -- (w * 2: a kernel no other case compiles, so that its compile is logged)
      local ok, got = pcall(tcl.context { DEBUG = 4 }, function() return (w * 2):contiguous():realize():tolist() end)
      lower.log = saved
      assert(ok, got)
      local log = table.concat(lines, "\n")
      local opts = log:match("kernel 'E_[^']*' opts: ([^\n]*)")
      assert(opts and opts:find("UPCAST%(%d+,16%)") and opts:find("UPCAST%(%d+,2%)"), "the kernel's opts: "
        .. tostring(opts))
      for r = 1, N do
        for i = 1, K do
          local want = 2 * string.unpack("<f", string.pack("<f", weight[r][i]))
          assert(got[r][i] == want, string.format("row %d, value %d: %.9g, expected %.9g", r, i, got[r][i], want))
        end
      end
    end)
  end
end)

describe("the CPU heuristics over block-quantized reads", function()
  -- the log of realizing fn's result with DEBUG = 4: kernel opts and LLVM IR
  local function compiled_log(fn)
    local lines, saved = {}, lower.log
    lower.log = function(line) lines[#lines + 1] = line end
    local ok, err = pcall(tcl.context { DEBUG = 4 }, function() fn():realize() end)
    lower.log = saved
    assert(ok, err)
    return table.concat(lines, "\n")
  end

  for _, case in ipairs { { "Q8_0", 34, 32 }, { "Q4_0", 18, 32 }, { "Q4_K", 144, 256 } } do
    local type_name, bytes, per = case[1], case[2], case[3]
    for _, rows in ipairs { 1, 8 } do
      it(string.format("%s, %d row%s: the reduction is unrolled by 32 and reads the blocks as vectors",
        type_name, rows, rows > 1 and "s" or ""), function()
        -- sizes no other case compiles (the kernel cache would skip the compile and its log)
        local n, k = 24 + rows, 768
        local blocks = {}
        for i = 1, n * k // per * bytes do blocks[i] = rng:integer(0, 255) end
        for b = 0, n * k // per - 1 do -- normal float16 scales (1/64)
          blocks[b * bytes + 1], blocks[b * bytes + 2] = 0, 0x24
          if type_name == "Q4_K" then blocks[b * bytes + 3], blocks[b * bytes + 4] = 0, 0x24 end
        end
        local raw = Tensor.from_bytes(string.char(table.unpack(blocks)), "uint8", { n * k // per, bytes },
          { device = "CPU" }):realize()
        local x = Tensor.randn({ rows, k }, { device = "CPU" }):realize()
        local log = compiled_log(function()
          return x:matmul(gguf.dequantize(raw, type_name, { n, k }):transpose(1, 2))
        end)
        local opts = log:match("kernel 'r_[^']*' opts: ([^\n]*)")
        assert(opts and opts:find("UNROLL%(%d+,32%)"), "the product's opts: " .. tostring(opts))
        assert.is_truthy(log:find("<32 x i8>", 1, true), "the blocks are not read as vectors")
        assert.is_falsy(log:find("x ptr>", 1, true), "the blocks are gathered lane by lane")
      end)
    end
  end
end)
