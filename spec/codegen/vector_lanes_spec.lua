-- spec/codegen/vector_lanes_spec.lua — vector lanes: an upcast axis whose lanes are consecutive
-- elements of every store is kept by the expand pass as a RANGE of axis type "vector" and rendered
-- by LLVM as vector values (tcl.codegen.passes.expand, src/codegen/llvm_render.c). Each case runs on CPU
-- with a heuristic that makes such an axis, checks what the IR holds (vector loads and stores,
-- masked accesses, the lane-by-lane paths) and compares the values with NOOPT's.
local tcl = require "tcl"
local lower = require "tcl.codegen.driver.lower"
local optimize = require "tcl.codegen.driver.optimize"
local H = require "spec.support.opt_harness"

local Tensor = tcl.Tensor

local function f(shape) return { shape, "float" } end
local function i(shape) return { shape, "int" } end

-- The output axes (global/loop) of k, outermost first.
local function outs(k) return k:axes("global", "loop") end

-- A heuristic: UPCAST the innermost output axis by `lanes`, and (optionally) the outermost by
-- `rows` (copies of the vector code).
local function tile(lanes, rows)
  return function(k)
    local o = outs(k)
    if #o == 0 then return end
    local inner = o[#o]
    if inner.size % lanes == 0 then k:apply("UPCAST", inner.axis, lanes) end
    if rows and #o > 1 and o[1].size % rows == 0 then k:apply("UPCAST", o[1].axis, rows) end
  end
end

-- Runs case on CPU under heuristic; returns its values and the LLVM IR of every kernel compiled.
local function run_with_ir(case, heuristic)
  local saved_log = lower.log
  local ir = {}
  lower.log = function(line)
    if line:find("define void", 1, true) then ir[#ir + 1] = line end
  end
  optimize.set_heuristic(heuristic)
  local ok, values = pcall(tcl.context { DEBUG = 4, NOOPT = false }, function()
    local t = H.build(case, "CPU"):realize()
    local out = {}
    for n, v in ipairs(t:data()) do out[n] = v end
    return out
  end)
  lower.log = saved_log
  optimize.set_heuristic(nil)
  if not ok then error(values, 0) end
  return values, table.concat(ir, "\n")
end

local function count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

-- The bitcasts in the IR of case under heuristic when every tail is copied with its lanes.
local function copied_bitcasts(case, heuristic)
  local expand = require "tcl.codegen.passes.expand"
  local saved = expand.EPILOGUE_LOOP_OPS
  expand.EPILOGUE_LOOP_OPS = math.huge
  local ok, ir = pcall(function() return select(2, run_with_ir(case, heuristic)) end)
  expand.EPILOGUE_LOOP_OPS = saved
  if not ok then error(ir, 0) end
  return count(ir, "bitcast ")
end

local function check_values(case, got)
  local want = H.reference(case, "CPU")
  assert.is_nil(H.mismatch(case, got, want), case.name)
end

describe("vector lanes on the CPU", function()
  it("a matmul tile with a GELU tail: vector loads, FMAs and stores, one copy per row", function()
    local case = { name = "vector: matmul 12x40 @ 40x48 + bias, gelu",
      inputs = { f { 12, 40 }, f { 40, 48 }, f { 48 } },
      fn = function(a, b, c) return (a:matmul(b) + c):gelu() end }
    local got, ir = run_with_ir(case, tile(16, 4))
    check_values(case, got)
    assert.is_truthy(ir:find("load <16 x float>", 1, true), "no vector load of B:\n" .. ir)
    assert.is_truthy(ir:find("store <16 x float>", 1, true), "no vector store of the output")
    assert.is_truthy(ir:find("llvm.fma.v16f32", 1, true) or ir:find("fmul reassoc contract <16 x float>", 1, true)
      or ir:find("fmul contract <16 x float>", 1, true), "no vector multiply-add")
    -- the tail (an exp2 per element: its bitcasts) is built once, in a loop over the four rows
    assert.are.equal(copied_bitcasts(case, tile(16, 4)), 4 * count(ir, "bitcast "), "bitcasts of the GELU tail")
  end)

  it("a reduction keeps its accumulators in vector registers", function()
    local case = { name = "vector: sum over dim 1 of 7x3x16", inputs = { f { 7, 3, 16 } },
      fn = function(x) return x:sum(1) end }
    local got, ir = run_with_ir(case, tile(16))
    check_values(case, got)
    assert.is_truthy(ir:find("alloca [1 x <16 x float>]", 1, true), "no vector accumulator:\n" .. ir)
  end)

  it("reads at strided addresses are gathered lane by lane", function()
    local case = { name = "vector: transpose 13x24 -> 24x13 * 2", inputs = { f { 13, 24 } },
      fn = function(a) return a:transpose(1, 2) * 2 end }
    local got, ir = run_with_ir(case, tile(13))
    check_values(case, got)
    assert.is_truthy(ir:find("store <13 x float>", 1, true), "no vector store:\n" .. ir)
    assert.is_falsy(ir:find("load <13 x float>", 1, true), "a strided read was loaded as a vector")
    assert.is_truthy(ir:find("extractelement <13 x ptr>", 1, true), "no per-lane pointers")
  end)

  it("padded reads whose gate differs between lanes are masked loads", function()
    local case = H.case("conv2d 1x3x7x7 * 5x3x3x3 padding 1")
    local got, ir = run_with_ir(case, tile(7))
    check_values(case, got)
    assert.is_truthy(ir:find("llvm.masked.load.v7f32", 1, true), "no masked load:\n" .. ir)
  end)

  it("integer lanes: vector division and modulo with EMU's values", function()
    local case = H.case("int elementwise 255 and 3x255")
    local got, ir = run_with_ir(case, tile(5))
    check_values(case, got)
    assert.is_truthy(ir:find("<5 x i32>", 1, true), "no integer vectors:\n" .. ir)
  end)

  it("narrow floats and bool outputs go lane by lane with NOOPT's values", function()
    local half = { name = "vector: half matmul 8x16 @ 16x32", inputs = { f { 8, 16 }, f { 16, 32 } },
      fn = function(a, b) return a:half():matmul(b:half()):float() end }
    local got, ir = run_with_ir(half, tile(16))
    check_values(half, got)
    assert.is_truthy(ir:find("insertelement <16 x float>", 1, true), "no lane-by-lane narrow ops:\n" .. ir)
    local cmp = { name = "vector: a > b as bool, 5x16", inputs = { i { 5, 16 }, i { 16 } },
      fn = function(a, b) return a:gt(b) end }
    got, ir = run_with_ir(cmp, tile(16))
    check_values(cmp, got)
    assert.is_truthy(ir:find("icmp sgt <16 x i32>", 1, true) or ir:find("icmp slt <16 x i32>", 1, true),
      "no vector compare:\n" .. ir)
  end)

  -- UNROLL of the innermost reduce axis by `lanes`
  local function unroll(lanes)
    return function(k)
      local red = k:axes("reduce")
      if #red > 0 and red[#red].size % lanes == 0 then k:apply("UNROLL", #red, lanes) end
    end
  end

  it("unrolled lanes of a contiguous reduction are vector loads and a vector accumulator", function()
    for _, case in ipairs {
      { name = "vector: sum over dim 2 of 7x64", inputs = { f { 7, 64 } }, fn = function(x) return x:sum(2) end },
      { name = "vector: max over dim 2 of 5x48", inputs = { f { 5, 48 } }, fn = function(x) return x:max(2) end },
      -- int32 sums accumulate in int64 (issue 33, as PyTorch's): i32 loads, an i64 accumulator
      { name = "vector: int sum over dim 2 of 3x32", inputs = { i { 3, 32 } }, fn = function(x) return x:sum(2) end,
        accumulator = "i64" },
    } do
      local got, ir = run_with_ir(case, unroll(16))
      check_values(case, got)
      local t = case.inputs[1][2] == "int" and "i32" or "float"
      assert.is_truthy(ir:find("load <16 x " .. t .. ">", 1, true), case.name .. ": no vector load:\n" .. ir)
      assert.is_truthy(ir:find("alloca [1 x <16 x " .. (case.accumulator or t) .. ">]", 1, true),
        case.name .. ": no vector accumulator")
    end
  end)

  it("unrolled lanes of a strided reduction stay copies", function()
    local case = { name = "vector: sum over dim 1 of 32x7", inputs = { f { 32, 7 } },
      fn = function(x) return x:sum(1) end }
    local got, ir = run_with_ir(case, unroll(16))
    check_values(case, got)
    assert.is_falsy(ir:find("<16 x float>", 1, true), "a strided reduction became vectors:\n" .. ir)
  end)

  -- A dot tile (x W^T, tcl.heuristics.default's plan_dot_tile): UPCAST the last two output axes
  -- by 4 and UNROLL the reduce axis by 16.
  local function dot_tile(k)
    local o, red = outs(k), k:axes("reduce")
    k:apply("UPCAST", o[#o].axis, 4)
    k:apply("UPCAST", o[#o - 1].axis, 4)
    k:apply("UNROLL", #red, 16)
  end

  it("a dot tile (x W^T): rows and columns are copies, each with a vector accumulator of reduce lanes",
    function()
      for _, case in ipairs {
        { name = "vector: x @ W^T 8x64 @ (12x64)^T", inputs = { f { 8, 64 }, f { 12, 64 } },
          fn = function(x, w) return x:matmul(w:transpose(1, 2)) end },
        -- attention heads merged back ((N, H, T, D) -> (N, T, H * D)): index (k // 16) * 64 + k % 16,
        -- contiguous in the reduce lanes once simplified
        { name = "vector: heads merged @ W^T", inputs = { f { 2, 2, 8, 16 }, f { 8, 32 } },
          fn = function(o, w) return o:transpose(2, 3):reshape(2, 8, 32):matmul(w:transpose(1, 2)) end },
      } do
        local got, ir = run_with_ir(case, dot_tile)
        check_values(case, got)
        assert.are.equal(16, count(ir, "alloca %[1 x <16 x float>%]"),
          case.name .. ": 4 x 4 vector accumulators:\n" .. ir)
        assert.is_falsy(ir:find("x ptr>", 1, true), case.name .. ": W gathered lane by lane:\n" .. ir)
      end
    end)

  it("EMU copies the lanes instead (its renderer takes no vectors)", function()
    local case = H.case("matmul 17x7 @ 7x3")
    local want = H.reference(case, "EMU")
    local got = H.run(case, "EMU", tile(3))
    assert.is_nil(H.mismatch(case, got, want))
    assert.is_nil(lower.backend("EMU").renderer.vector_lanes)
    assert.are.equal(64, lower.backend("CPU").renderer.vector_lanes)
  end)

  it("a tile's compile is not made of scalar copies (a GPT-2 sized matmul with a GELU tail)", function()
    local a, b, c = Tensor.empty(128, 768), Tensor.empty(768, 3072), Tensor.empty(3072)
    local out = (a:matmul(b) + c):gelu()
    local kernels = require("tcl.schedule").create({ out.uop }).kernels
    local ctx = { name = "fc", device = "CPU", renderer = lower.backend("CPU").renderer }
    local lowered = lower.run_passes(kernels[#kernels].ast, ctx)
    local list = require("tcl.codegen.driver.linearize").linearize(lowered)
    -- 256 scalar lanes made ~28,000 instructions, 8 copies of a 32-lane vector ~1,900; with the
    -- GELU in a loop over the copies, a few hundred
    assert.is_true(#list < 600, string.format("%d instructions (opts %s)", #list, tostring(ctx.opts)))
  end)

  it("a long tail is computed in a loop over the copies, from a register array of their sums", function()
    local case = { name = "vector: matmul 8x24 @ 24x32 + bias, gelu, tail loop",
      inputs = { f { 8, 24 }, f { 24, 32 }, f { 32 } },
      fn = function(a, b, c) return (a:matmul(b) + c):gelu() end }
    local got, ir = run_with_ir(case, tile(16, 4))
    check_values(case, got)
    -- 4 copies (rows) of the 16-lane vector: 4 sums
    assert.is_truthy(ir:find("alloca [4 x <16 x float>]", 1, true), "no register array of the sums:\n" .. ir)
    assert.are.equal(copied_bitcasts(case, tile(16, 4)), 4 * count(ir, "bitcast "), "the GELU is built once")
    -- on EMU (scalar copies) the same loop, with NOOPT's values
    local want = H.reference(case, "EMU")
    assert.is_nil(H.mismatch(case, H.run(case, "EMU", tile(16, 4)), want))
  end)

  it("a short tail (a bias) is copied with the sums: no register array", function()
    local case = { name = "vector: matmul 8x24 @ 24x32 + bias", inputs = { f { 8, 24 }, f { 24, 32 }, f { 32 } },
      fn = function(a, b, c) return a:matmul(b) + c end }
    local got, ir = run_with_ir(case, tile(16, 4))
    check_values(case, got)
    assert.is_falsy(ir:find("alloca [4 x", 1, true), "a register array for a one-op tail:\n" .. ir)
  end)
end)
