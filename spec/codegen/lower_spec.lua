-- spec/codegen/lower_spec.lua — the lowering of kernels: the pass pipeline (lua/tcl/patterns/pipeline.lua)
-- run by the driver (tcl.codegen.driver.lower), its rule sets (lua/tcl/patterns/lowering.lua) and
-- hand-written passes (tcl.codegen.passes.accumulators, tcl.codegen.passes.merge_ends), the linearizer
-- (tcl.codegen.driver.linearize), the kernel cache (tcl.codegen.driver.kernel_cache) and DEBUG output.
local tcl = require "tcl"
local pipeline = require "tcl.patterns.pipeline"
local lowering = require "tcl.patterns.lowering"
local linearize = require "tcl.codegen.driver.linearize"
local lower = require "tcl.codegen.driver.lower"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"
local accumulators = require "tcl.codegen.passes.accumulators"
local merge_ends = require "tcl.codegen.passes.merge_ends"
local helper = require "spec.support.helper"

local u = tcl.uop
local F32, I32, BOOL = tcl.dtype "float32", tcl.dtype "int32", tcl.dtype "bool"

local error_of = helper.error_of

local kernels = require "spec.support.kernels"
local param, c, range, sink, store_end = kernels.param, kernels.c, kernels.range, kernels.sink, kernels.store_end
local function add(a, b) return a + b end
local function mul(a, b) return a * b end

local function count_ops(root)
  local n = {}
  for _, x in ipairs(root:toposort()) do n[x.op] = (n[x.op] or 0) + 1 end
  return n
end

-- out[i] = reduce_j a[i*8 + j]
local function reduce_kernel(op, dt, name)
  local out, a = param(dt, 0, 4), param(dt, 1, 32)
  local ri, rj = range(4, 0), range(8, 1, "reduce")
  local red = u("REDUCE", dt, { u("INDEX", dt, { a, add(mul(ri, c(8)), rj) }), rj }, op)
  return sink(name or ("r_" .. op), store_end(out, ri, red, ri))
end

describe("the pass pipeline", function()
  it("is an ordered table of named passes", function()
    local names = {}
    for i, pass in ipairs(pipeline.passes) do
      assert.is_string(pass.name)
      local kinds = (pass.rules and 1 or 0) + (pass.fn and 1 or 0) + (pass.pass and 1 or 0)
      assert.equals(1, kinds, pass.name .. ": one of rules, fn or pass")
      names[i] = pass.name
    end
    assert.same({ "add loads", "initial symbolic", "optimize", "tensor cores", "kblock", "expand", "reuse values",
      "transcendental",
      "group reduces", "lower reduces", "stage transposes", "gpu dims", "bind variables", "merge ends" }, names)
  end)

  it("runs its passes in the table's order", function()
    local saved = pipeline.passes
    local ran = {}
    local passes = {}
    for i, pass in ipairs(saved) do
      passes[i] = { name = pass.name, fn = function(s, ctx)
        ran[#ran + 1] = pass.name
        return lower.run_pass(pass, s, ctx)
      end }
    end
    -- reversed order runs reversed: the table is the one truth
    local reversed = {}
    for i = #passes, 1, -1 do reversed[#reversed + 1] = passes[i] end
    pipeline.passes = passes
    local ok, err = pcall(lower.run_passes, reduce_kernel("ADD", F32), { name = "t" })
    pipeline.passes = reversed
    local ran_forward = ran
    ran = {}
    pcall(lower.run_passes, sink("E", store_end(param(F32, 0, 1), c(0), c(1.0, F32))), { name = "t" })
    pipeline.passes = saved
    assert.is_true(ok, err)
    local names = {}
    for i, pass in ipairs(saved) do names[i] = pass.name end
    assert.same(names, ran_forward)
    local back = {}
    for i = #names, 1, -1 do back[#back + 1] = names[i] end
    assert.same(back, ran)
  end)

  it("has an optimization slot that applies the installed hook (the optimizer's by default), never with NOOPT",
    function()
    local kernel = reduce_kernel("ADD", F32)
    assert.equals(require("tcl.codegen.driver.optimize").apply, pipeline.opts.apply)
    local saved = pipeline.opts.apply
    local seen = {}
    pipeline.opts.apply = function(k, ctx)
      seen[#seen + 1] = { k, ctx.noopt }
      return nil -- unchanged
    end
    local ok, err = pcall(function()
      lower.run_passes(kernel, { name = "t" })
      lower.run_passes(kernel, { name = "t", noopt = true })
    end)
    pipeline.opts.apply = saved
    assert.is_true(ok, err)
    assert.equals(1, #seen)
    assert.equals("SINK", seen[1][1].op)
    assert.is_falsy(seen[1][2])
  end)

  it("keeps every argument of the kernel, also those the passes leave unused", function()
    local out, a = param(F32, 0, 2), param(F32, 1, 0)
    local ri, rj = range(2, 0), range(0, 1, "reduce")
    local red = u("REDUCE", F32, { u("INDEX", F32, { a, ri }), rj }, "ADD")
    local lowered = lower.run_passes(sink("r", store_end(out, ri, red, ri)), { name = "r" })
    local n = count_ops(lowered)
    assert.is_nil(n.LOAD) -- the reduce of an empty range is 0: a is never read
    assert.equals(2, n.PARAM)
    assert.equals(a, lowered:source(lowered.nsrc))
  end)

  it("names the kernel and the pass in errors", function()
    local saved = pipeline.passes
    pipeline.passes = { { name = "boom", fn = function() error("it broke", 0) end } }
    local err = error_of(lower.run_passes, sink("k"), { name = "k" })
    pipeline.passes = saved
    assert.equals("kernel 'k': pass 'boom': it broke", err)
  end)

  -- issue 33: a pass (the list is user-editable) that returns something else than the kernel
  -- was blamed on the pass after it
  it("names the pass that returned something else than the kernel's graph, and what it returned", function()
    local saved = pipeline.passes
    local function pipeline_with(bad)
      return { { name = "fine", fn = function(k) return k end }, { name = "broken", fn = bad },
        { name = "next", fn = function(k) return k:replace { arg = k.arg } end } }
    end
    local cases = {
      { function() return 42 end, "returned a number (42), not the kernel's graph (a SINK UOp)" },
      { function() return {} end, "returned a table, not the kernel's graph (a SINK UOp)" },
      { function() return ("s"):rep(1000) end, "returned a string (" .. ("s"):rep(120)
        .. "... (1000 bytes)), not the kernel's graph (a SINK UOp)" },
      { function(k) return k:source(1) end, "returned a node of op END, not the kernel's SINK" },
      { function() return nil end, "returned nothing" },
    }
    for _, case in ipairs(cases) do
      pipeline.passes = pipeline_with(case[1])
      local err = error_of(lower.run_passes, sink("k", store_end(param(F32, 0, 2), range(2, 0), c(1.0, F32),
        range(2, 0))), { name = "k" })
      assert.equals("kernel 'k': pass 'broken' " .. case[2], err)
    end
    pipeline.passes = saved
  end)
end)

describe("lowering rules", function()
  it("turn INDEX read as a value into LOAD, gated by a WHERE(valid, INDEX, 0) above it", function()
    local out, a = param(F32, 0, 4), param(F32, 1, 4)
    local r = range(4, 0)
    local valid = u("CMPLT", BOOL, { r, c(2) })
    local x = u("INDEX", F32, { a, add(r, c(1)) })
    local k = sink("E", store_end(out, r, u("WHERE", F32, { valid, x, c(0.0, F32) }), r))
    local early = lowering.early:rewrite(k)
    local n = count_ops(early)
    assert.is_nil(n.WHERE) -- WHERE(g, LOAD(x, g), 0) is the gated load itself
    local load
    for _, y in ipairs(early:toposort()) do if y.op == "LOAD" then load = y end end
    assert.equals(2, load.nsrc)
    assert.equals(valid, load:source(2))
    assert.equals(x, load:source(1))
    -- the store's INDEX stays an INDEX
    assert.equals(1, n.STORE)
    assert.equals(2, n.INDEX)
    -- relu's WHERE(x > 0, x, 0) reads x anyway: one ungated load, no gate
    local relu = u("WHERE", F32, { u("CMPLT", BOOL, { c(0.0, F32), x }), x, c(0.0, F32) })
    local er = lowering.early:rewrite(sink("E", store_end(out, r, relu, r)))
    local loads = 0
    for _, y in ipairs(er:toposort()) do
      if y.op == "LOAD" then
        loads = loads + 1
        assert.equals(1, y.nsrc)
      end
    end
    assert.equals(1, loads)
  end)

  it("split END over several ranges into nested ENDs, the first range outermost", function()
    local out = param(I32, 0, 6)
    local ri, rj = range(2, 0), range(3, 1)
    local st = u("STORE", nil, { u("INDEX", I32, { out, add(mul(ri, c(3)), rj) }), c(1, I32) })
    local early = lowering.early:rewrite(sink("E", u("END", nil, { st, ri, rj })))
    local outer_end = early:source(1)
    assert.equals("END", outer_end.op)
    assert.equals(ri, outer_end:source(2))
    assert.equals(u("END", nil, { st, rj }), outer_end:source(1))
  end)

  for _, case in ipairs {
    { "ADD", F32, 0.0 }, { "MUL", F32, 1.0 }, { "MAX", F32, -math.huge },
    { "ADD", I32, 0 }, { "MUL", I32, 1 }, { "MAX", I32, -2147483648 }, { "MAX", BOOL, false },
  } do
    local op, dt, ident = case[1], case[2], case[3]
    it(string.format("lower REDUCE %s on %s to an accumulator starting at %s", op, tostring(dt), tostring(ident)),
        function()
      local lowered = lower.run_rules(accumulators, reduce_kernel(op, dt))
      local n = count_ops(lowered)
      assert.is_nil(n.REDUCE)
      local regs, inits = {}, {}
      for _, y in ipairs(lowered:toposort()) do
        if y.op == "DEFINE_REG" then regs[#regs + 1] = y end
        if y.op == "STORE" and y:source(2).op == "CONST" then inits[#inits + 1] = y:source(2) end
      end
      assert.equals(1, #regs)
      assert.same({ 0, 1 }, regs[1].arg)
      assert.equals(dt, regs[1].dtype)
      assert.equals(1, #inits)
      assert.equals(ident, inits[1].arg)
      assert.equals(dt, inits[1].dtype)
      assert.equals(2, n.END) -- the output loop and the reduce loop
    end)
  end

  it("give each accumulator its own DEFINE_REG slot after the kernel's own", function()
    local out, a = param(F32, 0, 1), param(F32, 1, 4)
    local r1, r2 = range(4, 0, "reduce"), range(4, 1, "reduce")
    local s = u("REDUCE", F32, { u("INDEX", F32, { a, r1 }), r1 }, "ADD")
    local m = u("REDUCE", F32, { u("INDEX", F32, { a, r2 }), r2 }, "MAX")
    local scratch = u("DEFINE_REG", F32, nil, { 0, 2 })
    local keep = u("STORE", nil, { u("INDEX", F32, { scratch, c(0) }), c(0.0, F32) })
    local lowered = lower.run_rules(accumulators, sink("r", keep, store_end(out, c(0), add(s, m))))
    local slots = {}
    for _, y in ipairs(lowered:toposort()) do
      if y.op == "DEFINE_REG" then slots[#slots + 1] = y.arg[1] end
    end
    table.sort(slots)
    assert.same({ 0, 1, 2 }, slots)
  end)

  it("merge the ENDs of one range into one END when the loops can be one", function()
    local out, a = param(F32, 0, 2), param(F32, 1, 6)
    local ri, rj = range(2, 0), range(3, 1, "reduce")
    local v = u("INDEX", F32, { a, add(mul(ri, c(3)), rj) })
    local s = u("REDUCE", F32, { v, rj }, "ADD")
    local m = u("REDUCE", F32, { v, rj }, "MAX")
    local k = sink("r", store_end(out, ri, add(s, m), ri))
    local lowered = lower.run_rules(accumulators, k)
    assert.equals(2, #linearize.analyze(lowered).ends[rj])
    local merged = merge_ends.run(lowered)
    local g = linearize.analyze(merged)
    assert.equals(1, #g.ends[rj])
    assert.equals(2, #g.ranges)
  end)
end)

describe("the linearizer", function()
  -- out[i*4 + j] = a[i*4 + j] * (b[0] + 1) + c[i]
  local function invariant_kernel()
    local out, a, b, cc = param(F32, 0, 16), param(F32, 1, 16), param(F32, 2, 1), param(F32, 3, 4)
    local ri, rj = range(4, 0), range(4, 1)
    local idx = add(mul(ri, c(4)), rj)
    local lb = u("LOAD", F32, { u("INDEX", F32, { b, c(0) }) })
    local scale = u("ADD", F32, { lb, c(1.0, F32) })
    local lc = u("LOAD", F32, { u("INDEX", F32, { cc, ri }) })
    local v = u("ADD", F32, { u("MUL", F32, { u("LOAD", F32, { u("INDEX", F32, { a, idx }) }), scale }), lc })
    return sink("E", store_end(out, idx, v, rj, ri)), { ri = ri, rj = rj, scale = scale, lb = lb, lc = lc }
  end

  it("puts each node after its sources, and each loop between its RANGE and END", function()
    local k = invariant_kernel()
    local list = linearize.linearize(k)
    local at = {}
    for i, x in ipairs(list) do at[x] = i end
    assert.equals(#k:toposort(), #list)
    for i, x in ipairs(list) do
      for _, s in ipairs(x.src) do assert.is_true(at[s] < i, x.op .. " before its source " .. s.op) end
    end
    assert.equals(list[#list], k)
  end)

  it("hoists nodes out of the loops they do not depend on", function()
    local k, n = invariant_kernel()
    local list = linearize.linearize(k)
    local at = {}
    for i, x in ipairs(list) do at[x] = i end
    local ri_end, rj_end
    for i, x in ipairs(list) do
      if x.op == "END" then
        if x:source(x.nsrc) == n.ri then ri_end = i else rj_end = i end
      end
    end
    -- b[0] + 1 uses no range: before both loops
    assert.is_true(at[n.scale] < at[n.ri])
    assert.is_true(at[n.lb] < at[n.ri])
    -- c[i] uses only i: inside the i loop, outside the j loop
    assert.is_true(at[n.ri] < at[n.lc] and at[n.lc] < at[n.rj])
    assert.is_true(at[n.rj] < rj_end and rj_end < ri_end)
  end)

  it("is deterministic", function()
    local a = linearize.linearize((invariant_kernel()))
    local b = linearize.linearize((invariant_kernel()))
    assert.equals(#a, #b)
    for i = 1, #a do assert.equals(a[i], b[i]) end
    assert.equals(linearize.format(a), linearize.format(b))
  end)

  it("rejects a RANGE without END and ranges of loops that do not nest", function()
    local out = param(F32, 0, 4)
    local r = range(4, 0)
    assert.matches("linearize: RANGE axis 0 %(loop%) %(node %d+%) has no END",
      error_of(linearize.linearize, sink("E", u("STORE", nil, { u("INDEX", F32, { out, r }), c(1.0, F32) }))))
    local r0, r1 = range(2, 0), range(2, 1)
    local o2 = param(F32, 1, 4)
    local both = u("STORE", nil, { u("INDEX", F32, { o2, add(r0, r1) }), c(2.0, F32) })
    local k = sink("E", store_end(out, r0, c(1.0, F32), r0), store_end(out, r1, c(1.0, F32), r1), both)
    assert.matches("whose loops are not nested", error_of(linearize.linearize, k), 1, true)
  end)

  it("formats the linear list for DEBUG=6", function()
    local text = linearize.format(linearize.linearize((invariant_kernel())))
    assert.matches("RANGE", text, 1, true)
    assert.matches("\n%s+%d+%s+    LOAD", text) -- inside two loops: indented twice
  end)
end)

describe("lower.compile", function()
  it("memoizes by the AST's content: an identical kernel is one cache entry", function()
    kernel_cache.clear()
    assert.equals(0, kernel_cache.size())
    local k1 = lower.compile(reduce_kernel("ADD", F32, "r_a"))
    assert.equals(1, kernel_cache.size())
    local k2 = lower.compile(reduce_kernel("ADD", F32, "r_a")) -- built again from scratch
    assert.equals(k1, k2)
    assert.equals(1, kernel_cache.size())
    local k3 = lower.compile(reduce_kernel("MAX", F32, "r_a"))
    assert.are_not.equal(k1, k3)
    assert.equals(2, kernel_cache.size())
    assert.equals(reduce_kernel("ADD", F32, "r_a"), k1.ast)
    -- the optimizer renames the kernel after its loops (here: the reduction unrolled whole)
    assert.equals("r_4_8r", k1.name)
    assert.equals("r_4_8r", k1.program.name)
    assert.equals("r_a", lower.compile(reduce_kernel("ADD", F32, "r_a"), { noopt = true }).name)
    assert.is_function(k1.run)
  end)

  it("keys the cache on the optimizer hook too", function()
    kernel_cache.clear()
    local k = reduce_kernel("MUL", F32, "r_hook")
    local plain = lower.compile(k)
    pipeline.opts.apply = function() return nil end
    local ok, hooked = pcall(lower.compile, k)
    pipeline.opts.apply = nil
    assert.is_true(ok, hooked)
    assert.are_not.equal(plain, hooked)
    assert.equals(2, kernel_cache.size())
  end)

  it("rejects what is not a kernel SINK", function()
    assert.matches("expected a kernel SINK, got CONST", error_of(lower.compile, c(1)), 1, true)
    assert.matches("expected a kernel SINK, got number", error_of(lower.compile, 5), 1, true)
  end)

  it("prints per-run lines and listings by DEBUG level", function()
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write([[
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
package.cpath = ]] .. string.format("%q", helper.build_dir .. "/lua/?.so;") .. [[ .. package.cpath
local tcl = require "tcl"
local rt = require "tcl.runtime"
local lower = require "tcl.codegen.driver.lower"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"
local accumulators = require "tcl.codegen.passes.accumulators"
local merge_ends = require "tcl.codegen.passes.merge_ends"
local u = tcl.uop
local F32, IDX = tcl.dtype "float32", tcl.dtype "index"
local out = u("PARAM", F32, nil, { 0, 2 })
local r = u("RANGE", IDX, { u("CONST", IDX, nil, 2) }, { 0, "loop" })
local st = u("STORE", nil, { u("INDEX", F32, { out, r }), u("CONST", F32, nil, 1.5) })
local k = lower.compile(u("SINK", nil, { u("END", nil, { st, r }) }, { "E_dbg" }))
k:run { rt.buffer(F32, 2) }
]])
    f:close()
    local function run(level)
      local status, stdout, stderr = helper.run("DEBUG=" .. level .. " lua5.4 " .. helper.shell_quote(script))
      assert.equals(0, status, stderr)
      return stdout .. stderr
    end
    local quiet, two, six = run(0), run(2), run(6)
    os.remove(script)
    assert.equals("", quiet)
    assert.matches("%*%*%* EMU%s+E_dbg%s+arg%s+1%s+tm%s+[%d.]+us", two)
    assert.is_nil(two:find("kernel 'E_dbg' AST", 1, true))
    assert.matches("kernel 'E_dbg' AST:", six, 1, true)
    assert.matches("kernel 'E_dbg' linear:", six, 1, true)
    assert.matches("kernel 'E_dbg': 8 instructions, 1 buffer", six, 1, true) -- the program listing (DEBUG>=4)
  end)
end)
