-- spec/codegen/kblock_spec.lua — KBLOCK: cache blocking of a reduction (src/opt/kernel_opt.h,
-- lua/tcl/codegen/passes/kblock.lua). The reduce axis runs in blocks, the loop over blocks goes around the
-- output loops (inside the thread axis), and the output holds the partial results between blocks;
-- the last block applies the store's tail. Values against NOOPT on CPU and EMU, the loop nest, the
-- checks.
local tcl = require "tcl"
local lower = require "tcl.codegen.driver.lower"
local schedule = require "tcl.schedule"
local H = require "spec.support.opt_harness"

local Tensor = tcl.Tensor

local function f(shape) return { shape, "float" } end
local function i(shape) return { shape, "int" } end

-- KBLOCK of the last reduce axis into blocks of `block`, after `before` (a function of k).
local function kblock(block, before)
  return function(k)
    if before then before(k) end
    local red = k:axes("reduce")
    k:apply("KBLOCK", #red, block)
  end
end

local function tile_and_threads(k)
  local o = k:axes("global", "loop")
  k:try_apply("UPCAST", o[#o].axis, 8)
  if #o > 1 then k:try_apply("UPCAST", o[1].axis, 4) end
  if k.caps.has_threads then k:try_apply("THREAD", 1, 2) end
end

local CASES = {
  { name = "kblock: matmul 8x48 @ 48x16", inputs = { f { 8, 48 }, f { 48, 16 } },
    fn = function(a, b) return a:matmul(b) end, block = 16 },
  { name = "kblock: matmul 8x48 @ 48x16 + bias, gelu", inputs = { f { 8, 48 }, f { 48, 16 }, f { 16 } },
    fn = function(a, b, c) return (a:matmul(b) + c):gelu() end, block = 12 },
  { name = "kblock: int matmul 4x30 @ 30x8", inputs = { i { 4, 30 }, i { 30, 8 } },
    fn = function(a, b) return a:matmul(b) end, block = 10 },
  { name = "kblock: max over dim 2 of 8x64", inputs = { f { 8, 64 } },
    fn = function(x) return x:max(2) end, block = 8 },
  { name = "kblock: prod over dim 2 of 4x12", inputs = { f { 4, 12 } },
    fn = function(x) return (x + 1.5):prod(2) end, block = 3 },
}

describe("KBLOCK", function()
  for _, device in ipairs { "CPU", "EMU" } do
    it("gives NOOPT's values, alone and with a register tile and threads (" .. device .. ")", function()
      for _, case in ipairs(CASES) do
        local want = H.reference(case, device)
        for _, before in ipairs { false, tile_and_threads } do
          local got, compiled, warnings = H.run(case, device, kblock(case.block, before or nil))
          assert.are.same({}, warnings, case.name)
          assert.is_nil(H.mismatch(case, got, want), case.name)
          assert.is_truthy(compiled[1].opts:find("KBLOCK", 1, true), case.name)
          assert.is_truthy(compiled[1].name:find("%dk_"), compiled[1].name)
        end
      end
    end)
  end

  it("puts the loop over blocks inside the thread axis, around the output loops", function()
    local a, b = Tensor.empty(64, 256), Tensor.empty(256, 64)
    local ast = schedule.create({ a:matmul(b).uop }).kernels[1].ast
    local seen
    H.with_heuristic(function(k)
      k:apply("THREAD", 1, 4)
      k:apply("KBLOCK", 1, 64)
    end, function()
      local ctx = { name = "mm", device = "CPU", renderer = lower.backend("CPU").renderer }
      local lowered = lower.run_passes(ast, ctx)
      seen = {}
      local e = lowered:source(1)
      while e.op == "END" do
        seen[#seen + 1] = e:source(#e.src).arg[2]
        e = e:source(1)
      end
    end)
    assert.are.same({ "thread", "kblock", "loop", "loop" }, { table.unpack(seen, 1, 4) })
  end)

  it("keeps the output in the cache: no streaming stores into what the next block reads", function()
    local linearize = require "tcl.codegen.driver.linearize"
    local llvm = require "tcl.llvm"
    local a, b = Tensor.empty(64, 4096), Tensor.empty(4096, 64)
    local ast = schedule.create({ a:matmul(b).uop }).kernels[1].ast
    local function streaming_stores(blocked)
      local asm
      H.with_heuristic(function(k)
        k:apply("UPCAST", 2, 16)
        k:apply("UPCAST", 1, 4)
        if blocked then k:apply("KBLOCK", 1, 512) end
      end, function()
        local ctx = { name = "mm", device = "CPU", renderer = lower.backend("CPU").renderer }
        local list = linearize.linearize(lower.run_passes(ast, ctx))
        -- every output counts as large (nontemporal_bytes = 1)
        asm = llvm.compile(list, { name = "mm", entry = "tcl_spec_kblock_" .. tostring(blocked), nontemporal_bytes = 1,
          want_asm = true }).asm
      end)
      local n = 0
      for _ in asm:gmatch("vmovnt") do n = n + 1 end
      return n
    end
    assert.is_true(streaming_stores(false) > 0, "the unblocked kernel streams its output")
    assert.are.equal(0, streaming_stores(true))
  end)

  it("is refused where the output cannot hold the partial results", function()
    local opt = require "tcl.opt"
    local caps = lower.backend("CPU").renderer.opt_caps()
    local function refusal(t)
      local k = opt.kernel(schedule.create({ t.uop }).kernels[1].ast, caps)
      local ok, err = pcall(k.apply, k, "KBLOCK", 1, 4)
      assert.is_false(ok)
      return tostring(err)
    end
    -- a float32 sum stored as half: the output cannot hold the float32 partial sums
    local x = Tensor.empty(4, 16)
    assert.matches("the output's dtype differs from the reduction's", refusal(x:sum(2):half()), 1, true)
    -- a sum and a max of one input: one kernel, two reductions
    local y = Tensor.empty(4, 16)
    assert.matches("more than one reduction", refusal(y:sum(2) + y:max(2)), 1, true)
  end)
end)
