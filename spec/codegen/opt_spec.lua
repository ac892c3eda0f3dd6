-- spec/codegen/opt_spec.lua — kernel opts (src/opt, tcl.opt) and the optimize pass
-- (lua/tcl/codegen/driver/optimize.lua) against NOOPT: every opt alone and in combinations on
-- matmuls, reductions, conv2d, pools, softmax, attention and elementwise kernels with odd
-- sizes (spec/support/opt_harness.lua), a seeded fuzz of random valid opt lists, the
-- documented errors of invalid opts, failing heuristics and heuristic files.
--
-- The opts are chosen by heuristics installed with optimize.set_heuristic; a recipe's steps
-- look at the kernel's ranges to pick an axis and an amount that fit it. That the opts were
-- applied is read from the DEBUG=3 line of each compile ("kernel '<name>' opts: <text>").
local tcl = require "tcl"
local opt = require "tcl.opt"
local schedule = require "tcl.schedule"
local optimize = require "tcl.codegen.driver.optimize"
local lower = require "tcl.codegen.driver.lower"
local H = require "spec.support.opt_harness"
local helper = require "spec.support.helper"
local splitmix = require "spec.support.splitmix"

local HAVE_RENDERER = pcall(require, "tcl.llvm")
local DEVICES = HAVE_RENDERER and { "CPU", "EMU" } or { "EMU" }

local Tensor = tcl.Tensor

---------------------------------------------------------------------------------------------
-- recipes: opt lists that adapt to the kernel they are applied to

local function outs(k) return k:axes("global", "loop") end

-- The largest divisor of n in [2, limit], or nil.
local function divisor(n, limit)
  for d = math.min(n, limit), 2, -1 do
    if n % d == 0 then return d end
  end
  return nil
end

-- The smallest divisor of n in [2, limit], or nil.
local function small_divisor(n, limit)
  for d = 2, math.min(n, limit) do
    if n % d == 0 then return d end
  end
  return nil
end

-- Each step returns op, axis, amount for the kernel as it stands, or nothing when the kernel
-- has no axis it fits.
local S = {}

function S.upcast_inner(k)
  local o = outs(k)
  for n = #o, 1, -1 do
    local d = divisor(o[n].size, 8)
    if d then return "UPCAST", o[n].axis, d end
  end
end

function S.upcast_inner_small(k)
  local o = outs(k)
  for n = #o, 1, -1 do
    local d = small_divisor(o[n].size, 16)
    if d then return "UPCAST", o[n].axis, d end
  end
end

function S.upcast_outer(k)
  for _, r in ipairs(outs(k)) do
    local d = divisor(r.size, 16)
    if d then return "UPCAST", r.axis, d end
  end
end

-- The lanes the kernel has (upcast and unroll axes): at most 512 in all.
local function lanes(k)
  local n = 1
  for _, r in ipairs(k:axes("upcast", "unroll")) do n = n * r.size end
  return n
end

-- UNROLL counts the reduce axes only; pick(size, limit) gives the amount
local function unroll_by(pick)
  return function(k)
    local red = k:axes("reduce")
    local limit = math.min(32, 512 // lanes(k))
    for n = #red, 1, -1 do
      local d = pick(red[n].size, limit)
      if d then return "UNROLL", n, d end
    end
  end
end

S.unroll = unroll_by(function(size, limit) return divisor(size, math.min(8, limit)) or divisor(size, limit) end)
S.unroll_small = unroll_by(small_divisor)
S.unroll_whole = unroll_by(function(size, limit) return size <= limit and 0 or nil end)
-- a reduce axis that PADTO made a multiple of 16 (or 4)
S.unroll_padded = unroll_by(function(size) return size % 16 == 0 and 16 or size % 4 == 0 and 4 or nil end)

-- the outermost output axis, in as many parts as its smallest divisor
function S.thread(k)
  for _, r in ipairs(outs(k)) do
    local d = small_divisor(r.size, 256)
    if d then return "THREAD", r.axis, d end
  end
end

function S.swap(k)
  local o = outs(k)
  for a = 1, #o do
    for b = #o, a + 1, -1 do
      if o[a].type == o[b].type then return "SWAP", o[a].axis, o[b].axis end
    end
  end
end

-- PADTO of an axis of those types to a multiple of the first amount that fits it
local function padto(types, amounts)
  return function(k)
    for _, amount in ipairs(amounts) do
      for _, r in ipairs(k:axes(table.unpack(types))) do
        local padded = (r.size + amount - 1) // amount * amount
        if padded ~= r.size and padded < 4 * r.size then return "PADTO", r.axis, amount end
      end
    end
  end
end

S.padto_out = padto({ "global", "loop" }, { 16, 4 })
S.padto_out8 = padto({ "global", "loop" }, { 8 })
S.padto_reduce = padto({ "reduce" }, { 16, 4 })

-- an output axis that PADTO made a multiple of 16 (or 4), upcast by that
function S.upcast_padded(k)
  for _, m in ipairs { 16, 4 } do
    for _, r in ipairs(outs(k)) do
      if r.size % m == 0 then return "UPCAST", r.axis, m end
    end
  end
end

function S.thread_8s(k)
  for _, r in ipairs(outs(k)) do
    if r.size % 8 == 0 then return "THREAD", r.axis, 8 end
  end
end

function S.nolocals() return "NOLOCALS" end

-- { name, steps, min = cases (of 24) that must take every step on some kernel, cpu = THREAD }.
-- The minimums are what the steps reach on H.CASES: a change of the cases or the steps that
-- leaves a recipe (nearly) unapplied fails instead of passing without testing anything.
local RECIPES = {
  { "UPCAST inner", { S.upcast_inner }, min = 24 },
  { "UPCAST outer", { S.upcast_outer }, min = 24 },
  { "UNROLL", { S.unroll }, min = 19 },
  { "UNROLL whole axis", { S.unroll_whole }, min = 18 },
  { "THREAD", { S.thread }, min = 24, cpu = true },
  { "SWAP", { S.swap }, min = 19 },
  { "PADTO output", { S.padto_out }, min = 24 },
  { "PADTO reduce", { S.padto_reduce }, min = 21 },
  { "NOLOCALS", { S.nolocals }, min = 24 },
  { "UPCAST UNROLL", { S.upcast_inner, S.unroll }, min = 19 },
  { "UPCAST UPCAST UNROLL (register tile)", { S.upcast_inner, S.upcast_outer, S.unroll }, min = 11 },
  { "UPCAST twice", { S.upcast_inner_small, S.upcast_inner }, min = 13 },
  { "UNROLL twice", { S.unroll_small, S.unroll }, min = 4 },
  { "PADTO output then UPCAST it", { S.padto_out, S.upcast_padded }, min = 24 },
  { "PADTO reduce then UNROLL it", { S.padto_reduce, S.unroll_padded }, min = 21 },
  { "PADTO output, PADTO reduce, UPCAST, UNROLL", { S.padto_out, S.padto_reduce, S.upcast_inner, S.unroll },
    min = 21 },
  { "SWAP UPCAST", { S.swap, S.upcast_inner }, min = 19 },
  { "NOLOCALS UPCAST UNROLL", { S.nolocals, S.upcast_inner, S.unroll }, min = 19 },
  { "THREAD UPCAST UNROLL", { S.thread, S.upcast_inner, S.unroll }, min = 13, cpu = true },
  { "SWAP THREAD UPCAST", { S.swap, S.thread, S.upcast_inner }, min = 16, cpu = true },
  { "PADTO output then THREAD 8", { S.padto_out8, S.thread_8s }, min = 24, cpu = true },
}

-- A heuristic applying the recipe's steps (k:apply: an invalid choice is a warning, which
-- fails the spec); records per kernel what it applied and whether every step found an axis.
local function recipe_heuristic(recipe, seen)
  return function(k)
    local whole = true
    for _, step in ipairs(recipe[2]) do
      local op, axis, amount = step(k)
      if op then k:apply(op, axis, amount) else whole = false end
    end
    seen[#seen + 1] = { name = k.name, opts = H.opts_text(k:opts()), whole = whole }
  end
end

local LETTER = { UPCAST = "u", UNROLL = "r", THREAD = "t" }

-- The kernels compiled are the ones the heuristic saw, in order, with its opts; their names
-- carry the letters of the new axes.
local function check_compiled(context, seen, compiled)
  assert.are.equal(#seen, #compiled, context .. ": kernels compiled vs heuristic runs")
  for n, c in ipairs(compiled) do
    assert.are.equal(seen[n].name, c.was, context)
    assert.are.equal(seen[n].opts, c.opts, context .. ": opts of kernel '" .. c.was .. "'")
    for op, letter in pairs(LETTER) do
      if c.opts:find(op, 1, true) then
        assert.is_truthy(c.name:find("%d" .. letter), string.format("%s: kernel '%s' (was '%s', opts %s) has no "
          .. "'%s' axis", context, c.name, c.was, c.opts, letter))
      end
    end
  end
end

local function describe_kernels(compiled)
  local t = {}
  for _, c in ipairs(compiled) do t[#t + 1] = string.format("'%s' %s", c.was, c.opts ~= "" and c.opts or "(none)") end
  return table.concat(t, "; ")
end

-- The largest |a - b| / max(1, |b|) over two nested lists of numbers of the same shape.
local function largest_relative_difference(got, want)
  local worst = 0
  local function walk(a, b)
    if type(a) == "table" then
      for i = 1, #a do walk(a[i], b[i]) end
    else
      worst = math.max(worst, math.abs(a - b) / math.max(1, math.abs(b)))
    end
  end
  walk(got, want)
  return worst
end

local function restore()
  optimize.set_heuristic(nil)
  require("tcl.env").NOOPT = false
end

describe("kernel opts give NOOPT's values", function()
  after_each(restore)

  for _, device in ipairs(DEVICES) do
    describe("on " .. device, function()
      for _, recipe in ipairs(RECIPES) do
        if not (recipe.cpu and device ~= "CPU") then
          it(recipe[1], function()
            local whole_cases = {}
            for _, case in ipairs(H.CASES) do
              local want = H.reference(case, device)
              local seen = {}
              local got, compiled, warnings = H.run(case, device, recipe_heuristic(recipe, seen))
              local context = string.format("%s, %s on %s (kernels: %s)", case.name, recipe[1], device,
                describe_kernels(compiled))
              assert.are.same({}, warnings, context)
              assert.is_nil(H.mismatch(case, got, want), context)
              assert.is_true(#compiled > 0, context .. ": nothing was compiled")
              check_compiled(context, seen, compiled)
              for _, s in ipairs(seen) do
                if s.whole then
                  whole_cases[#whole_cases + 1] = case.name
                  break
                end
              end
            end
            assert.is_true(#whole_cases >= recipe.min, string.format("%s took every step in %d cases, expected "
              .. "at least %d: %s", recipe[1], #whole_cases, recipe.min, table.concat(whole_cases, ", ")))
          end)
        end
      end
    end)
  end
end)

---------------------------------------------------------------------------------------------
-- fuzz: random valid opt lists

-- TCL_FUZZ_SEED and TCL_FUZZ_COUNT (kernels per device) run other or longer fuzzes.
local FUZZ = helper.fuzz { name = "opt fuzz", seed = 20240611, count = 20 }
local FUZZ_SEED, FUZZ_KERNELS = FUZZ.seed, FUZZ.count
local FUZZ_CASES = { "matmul 17x7 @ 7x3", "batched matmul 3x7x17 @ 3x17x3", "sum over dim 2 of 7x17x3",
  "max over dim 1 of 17x3x7", "conv2d 1x3x7x7 * 5x3x3x3 padding 1", "max_pool2d 1x3x17x7 k3 s2", "softmax 7x257",
  "elementwise a*b+c 7x17", "prod over dim 2 of 3x17", "argmax over dim 1 of 17x7" } -- one to three kernels each

local AMOUNTS = {
  UPCAST = { 0, 2, 3, 4, 5, 7, 8, 16, 17 },
  UNROLL = { 0, 2, 3, 4, 7, 8, 16, 17, 32 },
  THREAD = { 2, 3, 4, 7, 8, 17 },
  PADTO = { 4, 8, 16, 32 },
  KBLOCK = { 2, 3, 4, 8, 16, 64 },
}

local OPS = { "UPCAST", "UNROLL", "THREAD", "SWAP", "PADTO", "KBLOCK" }

-- Every (op, axis, amount) of op's actions for the kernel as it stands.
local function actions(k, op)
  local ranges = k:ranges()
  local out = {}
  local reduce_numbered = op == "UNROLL" or op == "KBLOCK"
  for axis = 1, reduce_numbered and #k:axes("reduce") or #ranges do
    for _, amount in ipairs(op == "SWAP" and ranges or AMOUNTS[op]) do
      out[#out + 1] = { op, axis, op == "SWAP" and amount.axis or amount }
    end
  end
  return out
end

local function shuffled(rng, list)
  for n = #list, 2, -1 do
    local m = rng:integer(1, n)
    list[n], list[m] = list[m], list[n]
  end
  return list
end

-- A heuristic applying 1-4 random valid opts per kernel, drawn with rng (an op, then one of
-- its actions that is valid); records them.
local function fuzz_heuristic(rng, seen)
  return function(k)
    for _ = 1, rng:integer(1, 4) do
      local applied = false
      for _, op in ipairs(shuffled(rng, { table.unpack(OPS) })) do
        for _, a in ipairs(shuffled(rng, actions(k, op))) do
          if k:try_apply(a[1], a[2], a[3]) then applied = true break end
        end
        if applied then break end
      end
      if not applied then break end
    end
    seen[#seen + 1] = { name = k.name, opts = H.opts_text(k:opts()) }
  end
end

describe("random valid opt lists give NOOPT's values", function()
  after_each(restore)

  for _, device in ipairs(DEVICES) do
    it("on " .. device .. " (seed " .. FUZZ_SEED .. ")", FUZZ:reporting(function()
      local kernels, trial, with_opts = 0, 0, 0
      while kernels < FUZZ_KERNELS do
        trial = trial + 1
        local seed = FUZZ_SEED + trial
        local rng = splitmix.new(seed)
        local case = H.case(FUZZ_CASES[rng:integer(1, #FUZZ_CASES)])
        local want = H.reference(case, device)
        local seen = {}
        local got, compiled, warnings = H.run(case, device, fuzz_heuristic(rng, seen))
        local context = string.format("seed %d: %s on %s, kernels %s", seed, case.name, device,
          describe_kernels(compiled))
        assert.are.same({}, warnings, context)
        assert.is_nil(H.mismatch(case, got, want), context)
        assert.is_true(#compiled > 0, context .. ": nothing was compiled")
        check_compiled(context, seen, compiled)
        kernels = kernels + #compiled
        for _, c in ipairs(compiled) do with_opts = with_opts + (c.opts ~= "" and 1 or 0) end
      end
      assert.are.equal(kernels, with_opts, "every fuzzed kernel gets at least one opt")
    end))
  end
end)

---------------------------------------------------------------------------------------------
-- invalid opts: tcl.opt on a scheduled kernel AST

local function plain(text) return (text:gsub("%p", "%%%0")) end

-- A kernel with ranges loop 4, loop 32, reduce 64: x:sum(3) of a 4x32x64 tensor (stored: every
-- range indexes its load).
local function sum_kernel(caps)
  local x = (Tensor.zeros(4, 32, 64, { device = "EMU" }) + 1):realize()
  return opt.kernel(schedule.create({ x:sum(3).uop }).kernels[1].ast, caps)
end

local EMU_CAPS = lower.backend("EMU").renderer.opt_caps()
local CPU_CAPS = HAVE_RENDERER and lower.backend("CPU").renderer.opt_caps() or { has_threads = true, threads = 4 }

local function ranges_text(k)
  local t = {}
  for _, r in ipairs(k:ranges()) do t[#t + 1] = r.type .. " " .. r.size end
  return table.concat(t, ", ")
end

describe("invalid opts", function()
  -- args_only: an argument error (axis 0, an unknown name), which try_apply raises too
  local function rejects(caps, expected, prepare, op, axis, amount, args_only)
    local k = sum_kernel(caps)
    if prepare then prepare(k) end
    local name, ranges, opts = k:name(), ranges_text(k), k:opts_text()
    local ok, err = pcall(k.apply, k, op, axis, amount)
    assert.is_false(ok)
    assert.matches(plain(expected), tostring(err))
    -- the kernel is unchanged, and try_apply says the same
    assert.are.equal(name, k:name())
    assert.are.equal(ranges, ranges_text(k))
    assert.are.equal(opts, k:opts_text())
    if args_only then return end
    local tried, message = k:try_apply(op, axis, amount)
    assert.is_false(tried)
    assert.matches(plain(expected), message)
  end

  it("are refused with the opt, the axis and the reason", function()
    assert.are.equal("loop 4, loop 32, reduce 64", ranges_text(sum_kernel(CPU_CAPS)))
    rejects(CPU_CAPS, "invalid opt UPCAST(3,4) (axis 3: reduce, size 64): UPCAST takes global, loop, local axes",
      nil, "UPCAST", 3, 4)
    rejects(CPU_CAPS, "invalid opt UPCAST(1,3) (axis 1: loop, size 4): 3 does not divide the axis size 4",
      nil, "UPCAST", 1, 3)
    rejects(CPU_CAPS, "invalid opt UPCAST(2,32) (axis 2: loop, size 32): the amount 32 is more than UPCAST "
      .. "allows (16)", nil, "UPCAST", 2, 32)
    rejects(CPU_CAPS, "invalid opt UPCAST(2,0) (axis 2: loop, size 32): the amount 32 is more than UPCAST "
      .. "allows (16)", nil, "UPCAST", 2, 0)
    rejects(CPU_CAPS, "invalid opt UNROLL(1,64) (axis 1: reduce, size 64): the amount 64 is more than UNROLL "
      .. "allows (32)", nil, "UNROLL", 1, 64)
    rejects(CPU_CAPS, "invalid opt UPCAST(4,2): axis 4 does not exist: the kernel has 3 optimizable axes",
      nil, "UPCAST", 4, 2)
    rejects(CPU_CAPS, "invalid opt UNROLL(2,2): axis 2 does not exist: the kernel has 1 group_reduce, reduce axes",
      nil, "UNROLL", 2, 2)
    rejects(CPU_CAPS, "opt UPCAST: axis 0 must be 1 or more", nil, "UPCAST", 0, 2, true)
    rejects(CPU_CAPS, "invalid opt UPCAST(2,-2) (axis 2: loop, size 32): the amount must be positive",
      nil, "UPCAST", 2, -2)
    rejects(CPU_CAPS, "the kernel would have 1024 upcast and unroll lanes, more than 512",
      function(k) k:apply("UPCAST", 2, 16) k:apply("UPCAST", 1, 2) end, "UNROLL", 1, 32)
  end)

  it("THREAD: not on EMU, one per kernel, at most 256 parts", function()
    rejects(EMU_CAPS, "invalid opt THREAD(1,2): this device runs kernels on one thread", nil, "THREAD", 1, 2)
    rejects(CPU_CAPS, "invalid opt THREAD(2,2): the kernel has a thread axis already",
      function(k) k:apply("THREAD", 1, 2) end, "THREAD", 2, 2)
    rejects(CPU_CAPS, "invalid opt THREAD(3,2) (axis 3: reduce, size 64): THREAD takes global, loop axes",
      nil, "THREAD", 3, 2)
    local k = sum_kernel(CPU_CAPS)
    k:apply("THREAD", 1, 4)
    assert.are.equal("thread 4, loop 32, reduce 64", ranges_text(k))
    assert.are.equal("r_4t_32_64", k:name())
  end)

  it("LOCAL, GROUP, GROUPTOP and TC: neither CPU nor EMU has them", function()
    for _, caps in ipairs { CPU_CAPS, EMU_CAPS } do
      rejects(caps, "invalid opt LOCAL(1,2): this device's renderer has no workgroups (locals)", nil, "LOCAL", 1, 2)
      rejects(caps, "invalid opt GROUP(1,2): this device's renderer has no local memory shared by a workgroup",
        nil, "GROUP", 1, 2)
      rejects(caps, "invalid opt GROUPTOP(1,4): this device's renderer has no local memory shared by a workgroup",
        nil, "GROUPTOP", 1, 4)
      rejects(caps, "invalid opt TC(1,0): this device's renderer has no tensor cores", nil, "TC", 1, 0)
    end
  end)

  it("PADTO and SWAP: what they take", function()
    rejects(CPU_CAPS, "invalid opt PADTO(3,16) (axis 3: upcast, size 4): PADTO cannot pad an upcast, unroll, "
      .. "thread or kblock axis", function(k) k:apply("UPCAST", 2, 4) end, "PADTO", 3, 16)
    rejects(CPU_CAPS, "invalid opt PADTO(2,16) (axis 2: loop, size 32): the axis is already a multiple of 16",
      nil, "PADTO", 2, 16)
    rejects(CPU_CAPS, "invalid opt PADTO(1,16) (axis 1: loop, size 4): padding to 16 would make the axis 4 or "
      .. "more times larger", nil, "PADTO", 1, 16)
    rejects(CPU_CAPS, "invalid opt SWAP(1,3) (axis 1: loop, size 4): SWAP takes two global or two loop axes, not "
      .. "loop and reduce", nil, "SWAP", 1, 3)
    rejects(CPU_CAPS, "invalid opt SWAP(2,2) (axis 2: loop, size 32): the other axis must be a different axis",
      nil, "SWAP", 2, 2)
    rejects(CPU_CAPS, "invalid opt SWAP(1,5) (axis 1: loop, size 4): the other axis 5 does not exist",
      nil, "SWAP", 1, 5)
    rejects(CPU_CAPS, "invalid opt NOLOCALS: NOLOCALS was applied already", function(k) k:apply("NOLOCALS") end,
      "NOLOCALS")
  end)

  it("an unknown opt name lists the known ones", function()
    rejects(CPU_CAPS, "unknown opt 'FOO' (known: TC, UPCAST, UNROLL, LOCAL, THREAD, GROUP, GROUPTOP, NOLOCALS, "
      .. "PADTO, SWAP, KBLOCK)", nil, "FOO", 1, 2, true)
  end)

  it("KBLOCK: a reduce axis in blocks, one store of one reduction that does not read its output", function()
    rejects(CPU_CAPS, "invalid opt KBLOCK(1,64) (axis 1: reduce, size 64): one block of the whole axis blocks nothing",
      nil, "KBLOCK", 1, 64)
    rejects(CPU_CAPS, "invalid opt KBLOCK(1,48) (axis 1: reduce, size 64): 48 does not divide the axis size 64",
      nil, "KBLOCK", 1, 48)
    rejects(CPU_CAPS, "invalid opt KBLOCK(2,8): axis 2 does not exist: the kernel has 1 reduce axes",
      nil, "KBLOCK", 2, 8)
    rejects(CPU_CAPS, "invalid opt KBLOCK(1,8): the kernel has a kblock axis already",
      function(k) k:apply("KBLOCK", 1, 16) end, "KBLOCK", 1, 8)
    local k = sum_kernel(CPU_CAPS)
    k:apply("THREAD", 1, 4)
    k:apply("KBLOCK", 1, 16)
    assert.are.equal("thread 4, kblock 4, loop 32, reduce 16", ranges_text(k))
    assert.are.equal("r_4t_4k_32_16", k:name())
  end)
end)

---------------------------------------------------------------------------------------------
-- heuristics that fail, and heuristics from files

-- Runs case on device with heuristic; the values must be NOOPT's and every kernel must have
-- run without opts. Returns the warnings and the compiled kernels.
local function run_failing(case, device, heuristic)
  local got, compiled, warnings = H.run(case, device, heuristic)
  assert.is_nil(H.mismatch(case, got, H.reference(case, device)), case.name .. " on " .. device)
  for _, c in ipairs(compiled) do
    assert.are.equal("", c.opts)
    assert.are.equal(c.was, c.name)
  end
  return warnings, compiled
end

describe("a heuristic that fails", function()
  after_each(restore)

  for _, device in ipairs(DEVICES) do
    it("by raising an error costs the kernel its opts, with one warning naming it (" .. device .. ")", function()
      local case = H.case("matmul 17x7 @ 7x3")
      local warnings = run_failing(case, device, function(k)
        k:apply("UPCAST", 2, 3)
        k:apply("UNROLL", 1, 7)
        error("no more ideas")
      end)
      assert.are.equal(1, #warnings)
      assert.matches("^kernel 'r_17_3_7': heuristic 'function: [^']+' failed %(opts applied: UPCAST%(2,3%) "
        .. "UNROLL%(1,7%)%): .*no more ideas; the kernel runs without opts$", warnings[1])
    end)

    it("by applying an invalid opt gets the opt's error in its warning (" .. device .. ")", function()
      local case = H.case("matmul 17x7 @ 7x3")
      local warnings = run_failing(case, device, function(k)
        k:apply("SWAP", 1, 2)
        k:apply("UPCAST", 3, 7)
      end)
      assert.are.equal(1, #warnings)
      assert.matches("^" .. plain("kernel 'r_17_3_7': heuristic '") .. "function: [^']+" .. plain("' failed (opts "
        .. "applied: SWAP(1,2)): ") .. ".*" .. plain("invalid opt UPCAST(3,7) (axis 3: reduce, size 7): UPCAST takes "
        .. "global, loop, local axes; the kernel runs without opts") .. "$", warnings[1])
    end)

    it("warns once per kernel, each line naming its kernel (" .. device .. ")", function()
      local case = H.case("softmax 7x257")
      local realize_points = require "tcl.schedule.realize_points"
      local saved = realize_points.ROW_FUSE_BYTES
      realize_points.ROW_FUSE_BYTES = 0 -- softmax's three kernels (row-fused it is one)
      local ok, warnings, compiled = pcall(run_failing, case, device, function(k)
        if device == "EMU" then k:apply("THREAD", 1, 7) end
        k:apply("PADTO", #k:ranges(), 16)
        error("stop")
      end)
      realize_points.ROW_FUSE_BYTES = saved
      assert(ok, warnings)
      assert.are.equal(#compiled, #warnings)
      assert.is_true(#compiled >= 2)
      for n, c in ipairs(compiled) do
        assert.matches("kernel '" .. plain(c.was) .. "'", warnings[n])
        if device == "EMU" then
          assert.matches(plain("(opts applied: none): ") .. ".*" .. plain("invalid opt THREAD(1,7): this device "
            .. "runs kernels on one thread"), warnings[n])
        else
          assert.matches(plain("(opts applied: PADTO(2,16)): ") .. ".*stop", warnings[n])
        end
      end
    end)
  end
end)

describe("heuristic files (TCL_HEURISTICS)", function()
  local temp_files = {}
  local function temp_file(text)
    local path = os.tmpname() .. ".lua"
    helper.write(path, text)
    temp_files[#temp_files + 1] = path
    return path
  end
  after_each(restore)
  teardown(function()
    for _, path in ipairs(temp_files) do os.remove(path) end
  end)

  local UPCAST_LAST = [[
return function(k)
  local outs = k:axes("global", "loop")
  local last = outs[#outs]
  if last and last.size % 3 == 0 then k:apply("UPCAST", last.axis, 3) end
end
]]

  it("a file returning a function is the heuristic", function()
    local path = temp_file(UPCAST_LAST)
    local case = H.case("matmul 17x7 @ 7x3")
    optimize.set_heuristic(path)
    assert.are.equal(path, optimize.heuristic_name())
    local got, compiled, warnings = H.run(case, "EMU", path)
    assert.are.same({}, warnings)
    assert.is_nil(H.mismatch(case, got, H.reference(case, "EMU")))
    assert.are.same({ { name = "r_17_3u_7", was = "r_17_3_7", opts = "UPCAST(2,3)" } }, compiled)
    assert.are.equal("default", optimize.heuristic_name())
  end)

  it("a file returning a table with 'optimize' is the heuristic", function()
    local path = temp_file("local M = {}\nM.optimize = (function()\n" .. UPCAST_LAST .. "end)()\nreturn M\n")
    local _, compiled = H.run(H.case("matmul 17x7 @ 7x3"), "EMU", path)
    assert.are.equal("UPCAST(2,3)", compiled[1].opts)
  end)

  it("a file that returns no function, does not load or does not compile gives a clear error", function()
    local path = temp_file("return 42\n")
    assert.has_error(function() optimize.set_heuristic(path) end, "heuristic file '" .. path
      .. "' must return a function(kernel) (or a table with 'optimize')")
    local failing = temp_file("error('no such thing')\n")
    local ok, err = pcall(optimize.set_heuristic, failing)
    assert.is_false(ok)
    assert.matches("^heuristic file '" .. plain(failing) .. "' failed to load: .*no such thing", err)
    local broken = temp_file("return function(k\n")
    ok, err = pcall(optimize.set_heuristic, broken)
    assert.is_false(ok)
    assert.matches("^heuristic file '" .. plain(broken) .. "': ", err)
    ok, err = pcall(optimize.set_heuristic, "/nonexistent/heuristic.lua")
    assert.is_false(ok)
    assert.matches("^heuristic file '/nonexistent/heuristic.lua': ", err)
    -- the heuristic in place stays
    assert.are.equal("default", optimize.heuristic_name())
  end)

  it("examples/heuristic_upcast_only.lua threads and upcasts, with NOOPT's values", function()
    local path = helper.root .. "/examples/heuristic_upcast_only.lua"
    local case = { name = "matmul 4x6 @ 6x8", inputs = { { { 4, 6 }, "float" }, { { 6, 8 }, "float" } },
      fn = function(a, b) return a:matmul(b) end }
    for _, device in ipairs(DEVICES) do
      local got, compiled, warnings = H.run(case, device, path)
      assert.are.same({}, warnings)
      assert.is_nil(H.mismatch(case, got, H.reference(case, device)))
      assert.are.equal(1, #compiled)
      local threads = device == "CPU" and lower.backend("CPU").renderer.opt_caps().threads or 1
      local threaded = threads > 1 and 4 % threads == 0
      assert.are.equal(threaded, compiled[1].opts:find("THREAD(1," .. threads .. ")", 1, true) ~= nil)
      assert.matches("UPCAST%(%d,4%)$", compiled[1].opts)
      assert.matches("_4u_6$", compiled[1].name)
    end
  end)

  it("TCL_HEURISTICS picks the file when tcl starts", function()
    local path = temp_file(UPCAST_LAST)
    local script = temp_file([[
local a = Tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = "EMU" })
print((a + 1):tolist()[2][3])
]])
    local q = helper.shell_quote
    local status, out, err = helper.run("TCL_HEURISTICS=" .. q(path) .. " DEBUG=3 timeout 60 " .. q(helper.tcl_bin)
      .. " " .. q(script))
    assert.are.equal(0, status, err)
    assert.are.equal("7\n", out)
    assert.matches("kernel 'E_2_3u' opts: UPCAST(2,3) (was 'E_2_3')", err, 1, true)
  end)
end)

describe("the default heuristic's register tile", function()
  -- the kernel names of realizing t (an upcast axis shows as "<n>u")
  local function kernel_names(t)
    local report = tcl.profile(function() t:realize() end)
    local names = {}
    for i, k in ipairs(report.kernels) do names[i] = k.name end
    return table.concat(names, " ")
  end

  it("is planned where the vector lanes' reads are near, not where they would be gathered", function()
    local x = Tensor.randn(64, 256):realize()
    local nn_name = kernel_names(x:matmul(Tensor.randn(256, 32):realize()))
    assert.truthy(nn_name:find("%du"), "x @ W (W row-major along the output): tiled, got " .. nn_name)
    -- x @ W^T reads W 256 elements apart along the output's contiguous axis: no tile of vector
    -- lanes there, a dot tile instead (4 x 4 outputs, 16 lanes of the reduce axis); EMU has no
    -- vector lanes for it
    local nt_name = kernel_names(x:matmul(Tensor.randn(32, 256):realize():transpose(1, 2)))
    if HAVE_RENDERER then
      assert.truthy(nt_name:find("_4u_4u_16_16r"), "x @ W^T: a dot tile, got " .. nt_name)
    else
      assert.falsy(nt_name:find("%du"), "x @ W^T: no tile, got " .. nt_name)
    end
    -- a per-channel sum of (N, C, H, W) reads channels H*W apart
    local sum_name = kernel_names(Tensor.randn(8, 16, 6, 6):realize():sum({ 1, 3, 4 }))
    assert.falsy(sum_name:find("%du"), "per-channel sum: no tile, got " .. sum_name)
  end)

  -- The default heuristic's opts per kernel (name -> opts text) while building `make` on the
  -- CPU (EMU without a renderer), with the renderer's capabilities changed by `caps` (an
  -- AVX-512 or AVX2 CPU whatever this machine is); and the values computed.
  local default = require "tcl.heuristics.default"
  local function default_opts(caps, make)
    local seen = {}
    optimize.set_heuristic(function(k)
      local changed = setmetatable({}, { __index = k.caps })
      for key, value in pairs(caps) do changed[key] = value end
      local view = setmetatable({ caps = changed }, { __index = k })
      default(view)
      seen[k.name] = H.opts_text(k:opts())
    end)
    local ok, values = pcall(make, HAVE_RENDERER and "CPU" or "EMU")
    restore()
    assert(ok, values)
    return seen, values
  end
  local AVX512 = { vector_bytes = 64, vector_registers = 32, threads = 1 }
  local AVX2 = { vector_bytes = 32, vector_registers = 16, threads = 1 }

  it("has 16 rows of one vector where 32 registers hold them, its small reduction not unrolled (conv2d "
    .. "32 -> 32, 8 columns); 8 rows with 16 registers, unrolled", function()
    local function conv(device)
      local x = Tensor.rand(1, 32, 8, 8, { device = device }):realize()
      local w = Tensor.rand(32, 32, 3, 3, { device = device }):realize()
      return x:conv2d(w, nil, { padding = 1 }):realize()
    end
    local wide = default_opts(AVX512, conv)
    assert.are.equal("UPCAST(3,8) UPCAST(1,16)", wide.r_32_8_8_32_3_3)
    local narrow = default_opts(AVX2, conv)
    assert.are.equal("UPCAST(3,8) UPCAST(1,8) UNROLL(3,0)", narrow.r_32_8_8_32_3_3)
  end)

  it("has 32 rows of one vector for a short reduction (a first conv layer: 3 x 7 x 7 steps)", function()
    local seen = default_opts(AVX512, function(device)
      local x = Tensor.rand(1, 3, 8, 16, { device = device }):realize()
      return x:conv2d(Tensor.rand(32, 3, 7, 7, { device = device }):realize(), nil, { padding = 3 }):realize()
    end)
    assert.are.equal("UPCAST(3,16) UPCAST(1,16) UPCAST(1,2)", seen.r_32_8_16_3_7_7)
  end)

  it("puts its column axis outermost for a long reduction (matmul, K = 256), not for a short one (3 x 3 x 3)",
    function()
      local device = HAVE_RENDERER and "CPU" or "EMU"
      local seen = default_opts(AVX512, function()
        Tensor.rand(16, 256, { device = device }):realize():matmul(Tensor.rand(256, 64, { device = device }):realize())
          :realize()
        local x = Tensor.rand(1, 3, 8, 64, { device = device }):realize()
        x:conv2d(Tensor.rand(32, 3, 3, 3, { device = device }):realize(), nil, { padding = 1 }):realize()
      end)
      assert.are.equal("UPCAST(2,16) UPCAST(2,2) UPCAST(1,8) SWAP(1,2)", seen.r_16_64_256)
      assert.are.equal("UPCAST(3,16) UPCAST(3,2) UPCAST(1,8)", seen.r_32_8_64_3_3_3)
    end)

  it("is a dot tile for x @ W^T and for the merged heads of attention times W^T (rows x columns of outputs, "
    .. "reduce lanes); a weight gradient x^T @ dy keeps the tile of output lanes, in blocks of tokens", function()
    local function products(device)
      Tensor.manual_seed(3)
      local x = Tensor.rand(16, 256, { device = device }):realize()
      local w = Tensor.rand(32, 256, { device = device }):realize()
      local o = Tensor.rand(2, 4, 8, 64, { device = device }):realize()
      local dy = Tensor.rand(16, 32, { device = device }):realize()
      local q = Tensor.rand(16, 64, { device = device }):realize()
      local kk = Tensor.rand(32, 64, { device = device }):realize()
      -- weight gradients over 512 tokens (one reduce axis, and (batch, tokens))
      local xt = Tensor.rand(2, 256, 16, { device = device }):realize()
      local dyt = Tensor.rand(2, 256, 32, { device = device }):realize()
      return { x:matmul(w:transpose(1, 2)):realize():tolist(),
        o:transpose(2, 3):reshape(2, 8, 256):matmul(w:transpose(1, 2)):realize():tolist(),
        x:transpose(1, 2):matmul(dy):realize():tolist(),
        q:matmul(kk:transpose(1, 2)):realize():tolist(),
        xt:reshape(512, 16):transpose(1, 2):matmul(dyt:reshape(512, 32)):realize():tolist(),
        (xt:unsqueeze(4) * dyt:unsqueeze(3)):sum({ 1, 2 }):realize():tolist() }
    end
    local seen, got = default_opts(AVX512, products)
    assert.are.equal("UPCAST(2,4) UPCAST(1,4) UNROLL(1,16)", seen.r_16_32_256)
    assert.are.equal("UPCAST(3,4) UPCAST(2,4) UNROLL(1,16)", seen.r_2_8_32_256)
    assert.are.equal("UPCAST(2,16) UPCAST(2,2) UPCAST(1,8)", seen.r_256_32_16)
    -- a short dot product (64 steps, attention's q k^T) is left to LLVM's loop: no opts
    assert.are.equal("", seen.r_16_32_64)
    -- a long sum over tokens, rows of both operands: in blocks of 256 steps
    assert.are.equal("UPCAST(2,16) UPCAST(2,2) UPCAST(1,8) KBLOCK(1,256)", seen.r_16_32_512)
    assert.are.equal("UPCAST(2,16) UPCAST(2,2) UPCAST(1,8) KBLOCK(1,1)", seen.r_16_32_2_256)
    -- 16 registers: 2 rows of 4 columns (8 accumulators and 6 loaded vectors)
    local narrow = default_opts(AVX2, function(device)
      Tensor.rand(16, 256, { device = device }):realize():matmul(Tensor.rand(32, 256, { device = device }):realize()
        :transpose(1, 2)):realize()
    end)
    assert.are.equal("UPCAST(2,4) UPCAST(1,2) UNROLL(1,8)", narrow.r_16_32_256)
    -- the same products without opts
    optimize.set_heuristic(function() end)
    local ok, want = pcall(products, HAVE_RENDERER and "CPU" or "EMU")
    restore()
    assert(ok, want)
    local worst = largest_relative_difference(got, want)
    assert.is_true(worst < 1e-5, "largest relative difference " .. worst)
  end)

  it("is rows alone for a stride-2 1-d transposed conv (x read at (l + 1 - k) / 2), with its values", function()
    local device = HAVE_RENDERER and "CPU" or "EMU"
    local x = Tensor.rand(2, 8, 16, { device = device }):realize()
    local w = Tensor.rand(8, 16, 3, { device = device }):realize()
    local function transposed() return x:conv_transpose1d(w, nil, { stride = 2, padding = 1 }):realize():tolist() end
    local seen, got = default_opts(AVX512, transposed)
    -- a tile of 16 rows (output channels) alone: x's index, with its divisions, computed once
    -- per step for all of them, not in vector lanes
    assert.are.equal("UPCAST(2,16)", seen.r_2_16_31_8_3)
    -- the same without opts
    optimize.set_heuristic(function() end)
    local ok, want = pcall(transposed)
    restore()
    assert(ok, want)
    assert.are.same(#want, #got)
    local worst = largest_relative_difference(got, want)
    assert.is_true(worst < 1e-5, "largest relative difference " .. worst)
  end)

  it("tiles a stride-2 conv's input gradient as stride-1 convolutions, one per phase (no index divides)",
    function()
      local x = Tensor.rand(1, 16, 16, 16):realize()
      local w = Tensor.rand(8, 16, 3, 3):realize()
      local r = Tensor.rand(1, 8, 8, 8):realize()
      local seen = default_opts(AVX512, function()
        local g = tcl.grad(function(xx) return (xx:conv2d(w, nil, { padding = 1, stride = 2 }) * r):sum() end)
        return g(x):realize()
      end)
      -- phases of 1 x 1, 1 x 2, 2 x 1 and 2 x 2 taps (of the 3 x 3 kernel), each an 8 x 16 tile
      for _, name in ipairs { "r_16_8_8_8", "r_16_8_8_8_2", "r_16_8_8_8_2_2" } do
        assert.are.equal("UPCAST(3,8) UPCAST(1,16)", seen[name], name)
      end
    end)

  it("tiles a conv's weight gradient channels-last: 32 lanes of output channels, 8 rows of input channels",
    function()
      -- (tcl.patterns.gradient's conv2d: cin x kh x kw = 144 >= WEIGHT_GRAD_ROWS, so g is copied to
      -- (n, oh, ow, cout) and the gradient stored as (kh, kw, cin, cout): a matmul over n oh ow)
      local gradient = require "tcl.patterns.gradient"
      local x = Tensor.rand(4, 16, 6, 6):realize()
      local r = Tensor.rand(4, 32, 4, 4):realize()
      local w = Tensor.rand(32, 16, 3, 3):realize()
      local function dw() return tcl.grad(function(ww) return (x:conv2d(ww) * r):sum() end)(w):realize():tolist() end
      local seen, got = default_opts(AVX512, dw)
      assert.are.equal("UPCAST(4,16) UPCAST(4,2) UPCAST(3,8)", seen.r_3_3_16_32_4_4_4)
      -- the same values as the direct form (cout, cin, kh, kw), whose lanes were kw's 3
      local rows = gradient.WEIGHT_GRAD_ROWS
      gradient.WEIGHT_GRAD_ROWS = math.huge
      local ok, want = pcall(dw)
      gradient.WEIGHT_GRAD_ROWS = rows
      assert(ok, want)
      assert.is_true(largest_relative_difference(got, want) < 1e-5)
    end)

  it("goes over a packed weight's panels in groups of at most 512 KB, each group outermost (THREAD)", function()
    local seen = default_opts(AVX512, function(device)
      local a = Tensor.rand(1024, 1024, { device = device }):realize()
      return a:matmul(Tensor.rand(1024, 1024, { device = device }):realize()):realize()
    end)
    if HAVE_RENDERER then -- packed on the CPU only: 32 panels of 32 x 1024 floats (128 KB), 4 a group
      assert.are.equal("UPCAST(3,16) UPCAST(3,2) UPCAST(1,8) THREAD(2,8)", seen.r_1024_32_32_1024)
    end
  end)

  it("counts one cache block of each panel in a group when the reduction runs in blocks (KBLOCK), with the "
    .. "product's values", function()
    local device = HAVE_RENDERER and "CPU" or "EMU"
    local a = Tensor.rand(256, 2048, { device = device }):realize()
    local b = Tensor.rand(2048, 512, { device = device }):realize()
    local function product() return a:matmul(b):realize():tolist() end
    local seen, got = default_opts(AVX512, product)
    if HAVE_RENDERER then
      -- 16 panels of 32 x 2048 floats (256 KB), in blocks of 512 steps (64 KB of each panel):
      -- 8 panels a group, not 2 (THREAD counts the kblock axis: the panels are axis 3)
      assert.are.equal("UPCAST(3,16) UPCAST(3,2) UPCAST(1,8) KBLOCK(1,512) THREAD(3,2)", seen.r_256_16_32_2048)
    end
    optimize.set_heuristic(function() end)
    local ok, want = pcall(product)
    restore()
    assert(ok, want)
    local worst = largest_relative_difference(got, want)
    assert.is_true(worst < 1e-5, "largest relative difference " .. worst)
  end)

  it("groups panels whose rows were upcast whole (3 x 3 x 3 over 16 axes of 2: a tile of all nine)", function()
    local twos = {}
    for i = 1, 16 do twos[i] = 2 end
    local seen = default_opts(AVX512, function(device)
      local a = Tensor.rand(3, 1 << 16, { device = device }):realize()
      local b = Tensor.rand(1 << 16, 3, 3, { device = device }):realize()
      local product = a:reshape(3, 1, 1, 1 << 16) * b:permute(2, 3, 1):reshape(1, 3, 3, 1 << 16)
      local dims = {}
      for i = 1, 16 do dims[i] = 3 + i end
      return product:reshape(3, 3, 3, table.unpack(twos)):sum(dims):realize()
    end)
    -- (the three panels of 2^16 x 3 floats: 768 KB each, a group each)
    assert.are.equal("UPCAST(3,3) UPCAST(1,3) THREAD(1,3) UNROLL(16,0)", seen["r_3_3_3_" .. table.concat(twos, "_")])
  end)

  it("pads a vector axis no vector divides to whole vectors when that adds at most a quarter (28 -> 32)",
    function()
      local seen = default_opts(AVX512, function(device)
        local x = Tensor.rand(1, 32, 8, 28, { device = device }):realize()
        x:conv2d(Tensor.rand(32, 32, 3, 3, { device = device }):realize(), nil, { padding = 1 }):realize()
        local narrow = Tensor.rand(1, 32, 8, 20, { device = device }):realize() -- 20 -> 32: 37.5 % more
        narrow:conv2d(Tensor.rand(32, 32, 3, 3, { device = device }):realize(), nil, { padding = 1 }):realize()
      end)
      assert.are.equal("PADTO(3,16) UPCAST(3,16) UPCAST(1,16) SWAP(1,3)", seen.r_32_8_28_32_3_3)
      assert.are.equal("UPCAST(3,4) UPCAST(1,16) SWAP(1,3)", seen.r_32_8_20_32_3_3)
    end)
end)

describe("the default heuristic's vector lanes for kernels without a tile", function()
  -- the kernel names of realizing t, in order (an upcast axis shows as "<n>u", an unrolled one as "<n>r")
  local function kernel_names(t)
    local report = tcl.profile(function() t:realize() end)
    local names = {}
    for i, k in ipairs(report.kernels) do names[i] = k.name end
    return names
  end

  it("unroll a contiguous row sum and upcast a row-broadcast elementwise kernel on CPU, values kept", function()
    if not HAVE_RENDERER then return end
    local x = Tensor.randn(64, 256):realize()
    -- softmax, row-fused (3e): the row max unrolled by MAX_CHAINS (2) vectors, the row sum of
    -- exp by one, exp(x - max) / sum upcast, in one kernel
    local names = kernel_names(x:softmax(-1))
    assert.equals(1, #names, table.concat(names, " "))
    assert.truthy(names[1]:find("_16u_8_16_32r_16r$"), names[1])
    local got, want = x:softmax(-1):tolist(), x:to("EMU"):softmax(-1):tolist()
    for r = 1, 64 do
      for c = 1, 256 do assert.near(want[r][c], got[r][c], 1e-6 * math.max(1, math.abs(want[r][c]))) end
    end
    -- an elementwise kernel over a contiguous last axis: upcast
    assert.truthy(kernel_names(x:gelu())[1]:find("_16u"))
  end)

  it("upcast the contiguous output columns of a sum over leading axes (a bias gradient), values kept", function()
    if not HAVE_RENDERER then return end
    local x = Tensor.randn(8, 128, 256):realize()
    local names = kernel_names(x:sum({ 1, 2 }))
    assert.equals(1, #names, table.concat(names, " "))
    assert.truthy(names[1]:find("16u"), names[1])
    local got, data = x:sum({ 1, 2 }):tolist(), x:tolist()
    for c = 1, 256 do
      local want = 0
      for a = 1, 8 do for b = 1, 128 do want = want + data[a][b][c] end end
      assert.near(want, got[c], 1e-4 * math.max(1, math.abs(want)))
    end
  end)

  it("leave strided reads, row maxima and EMU alone", function()
    if not HAVE_RENDERER then return end
    local x = Tensor.randn(64, 256):realize()
    -- a transposed read steps 64 elements along the output's contiguous axis
    for _, name in ipairs(kernel_names((x:transpose(1, 2) + 1):contiguous())) do
      assert.falsy(name:find("%du"), name)
    end
    -- a sum across rows reads 256 elements apart along its reduce axis: not unrolled (its
    -- columns are upcast instead, above)
    for _, name in ipairs(kernel_names(x:sum(1))) do assert.falsy(name:find("%dr"), name) end
    assert.falsy(kernel_names(x:max(2))[1]:find("%dr"))
    -- a small kernel (below LANES_MIN_WORK steps) is left to LLVM
    local small = Tensor.randn(4, 256):realize()
    for _, name in ipairs(kernel_names(small:softmax(-1))) do assert.falsy(name:find("%d[ru]"), name) end
    -- EMU has no vector registers: the order of its sums stays as it was
    for _, name in ipairs(kernel_names(x:to("EMU"):softmax(-1))) do
      assert.falsy(name:find("%d[ru]"), name)
    end
  end)
end)
