-- spec/schedule/schedule_spec.lua — scheduling the tensor graph into kernels (lua/tcl/schedule/init.lua,
-- rangeify.lua, shape.lua, buffers.lua).
--
-- Graphs are built directly as tensor-graph nodes (docs/design/encodings.md) with small builders below,
-- the way the Tensor API builds them. Each graph is checked three ways:
--   * the number of kernels (tinygrad's counts on the same shapes, reference notes §3.3);
--   * the values, by running the kernels with the small kernel interpreter below, which
--     also asserts that no load or store leaves its buffer (so PAD gating is checked);
--   * the values again through schedule.run (tcl.codegen.driver.lower + the EMU runtime), when those are
--     built; until then those checks are skipped.
-- Expected values come from naive Lua loops over the inputs, written from the definitions.
local tcl = require "tcl"
local alu = require "tcl.alu"
local shape = require "tcl.shape"
local buffers = require "tcl.schedule.buffers"
local schedule = require "tcl.schedule"
local ref_softmax_row = require("spec.support.helper").naive_softmax

local F32, INDEX, BOOL = tcl.dtype "float32", tcl.dtype "index", tcl.dtype "bool"

local has_runtime = pcall(require, "tcl.runtime")
local has_lower = has_runtime and pcall(require, "tcl.codegen.driver.lower")

---------------------------------------------------------------------------------------------
-- inputs: a registered BUFFER node viewed in a shape; values kept here for the interpreter

local input_values = {} -- buffer id -> 1-based flat list

local seed = 12345
local function random_values(n)
  local out = {}
  for i = 1, n do
    seed = (seed * 1103515245 + 12345) % 2147483648
    out[i] = alu.cast(((seed >> 8) % 2001 - 1000) / 500.0, F32) -- in [-2, 2], float32-exact
  end
  return out
end

local function reshape(x, s) return tcl.uop("RESHAPE", x.dtype, { x }, s) end

--- A tensor of shape shp holding values (default: random), as RESHAPE(BUFFER).
local function input(shp, values)
  values = values or random_values(shape.numel(shp))
  local buf = buffers.new(F32, #values)
  input_values[buf.arg[1]] = values
  if has_runtime then buffers.get(buf):write(values) end
  if #shp == 1 then return buf, values end
  return reshape(buf, shp), values
end

---------------------------------------------------------------------------------------------
-- graph builders (0-based axes, explicit broadcasting, as the Tensor API emits them)

local function node(op, src, arg, dtype) return tcl.uop(op, dtype or src[1].dtype, src, arg) end
local function add(a, b) return node("ADD", { a, b }) end
local function mul(a, b) return node("MUL", { a, b }) end
local function neg(a) return node("NEG", { a }) end
local function sub(a, b) return add(a, neg(b)) end
local function recip(a) return node("RECIPROCAL", { a }) end
local function div(a, b) return mul(a, recip(b)) end
local function maximum(a, b) return node("MAX", { a, b }) end
local function permute(x, order) return node("PERMUTE", { x }, order) end
local function expand(x, s) return node("EXPAND", { x }, s) end
local function pad(x, p) return node("PAD", { x }, p) end
local function shrink(x, w) return node("SHRINK", { x }, w) end
local function flip(x, f) return node("FLIP", { x }, f) end
local function contiguous(x) return node("CONTIGUOUS", { x }) end
local function reduce_axis(x, op, axes) return node("REDUCE_AXIS", { x }, { op, axes }) end

local function ones(n)
  local t = {}
  for i = 1, n do t[i] = 1 end
  return t
end

--- A constant broadcast to shape s.
local function full(v, s)
  local c = tcl.uop("CONST", F32, nil, v + 0.0)
  if #s == 0 then return c end
  return expand(reshape(c, ones(#s)), s)
end

--- x broadcast back to shape s after a keepdim reduction.
local function bcast(x, s) return expand(x, s) end

local LOG2E = 1.4426950408889634
local function exp(x) return node("EXP2", { mul(x, full(LOG2E, shape.of(x))) }) end
local function rsqrt(x) return recip(node("SQRT", { x })) end

local function last(x) return #shape.shared(x) - 1 end
local function sum(x, axis) return reduce_axis(x, "ADD", { axis or last(x) }) end
local function max(x, axis) return reduce_axis(x, "MAX", { axis or last(x) }) end

local function softmax(x)
  local s = shape.of(x)
  local e = exp(sub(x, bcast(max(x), s)))
  return div(e, bcast(sum(e), s))
end

local function layernorm(x, eps)
  local s = shape.of(x)
  local n = s[#s]
  local mean = mul(sum(x), full(1 / n, shape.of(sum(x))))
  local centered = sub(x, bcast(mean, s))
  local var = mul(sum(mul(centered, centered)), full(1 / n, shape.of(mean)))
  return mul(centered, bcast(rsqrt(add(var, full(eps or 1e-5, shape.of(var)))), s))
end

--- a (..., M, K) @ b (..., K, N) by broadcasting a multiply and summing over K.
local function matmul(a, b)
  local sa, sb = shape.of(a), shape.of(b)
  local r = #sa
  local M, K, N = sa[r - 1], sa[r], sb[r]
  local batch = table.move(sa, 1, r - 2, 1, {})
  local function with(...) return table.move({ ... }, 1, select("#", ...), #batch + 1, table.move(batch, 1, #batch, 1,
      {})) end
  local order = {}
  for i = 0, r - 3 do order[#order + 1] = i end
  order[#order + 1], order[#order + 2] = r - 1, r - 2
  local full_shape = with(M, N, K)
  local ax = expand(reshape(a, with(M, 1, K)), full_shape)
  local bx = expand(reshape(permute(b, order), with(1, N, K)), full_shape)
  return reshape(sum(mul(ax, bx), r), with(M, N))
end

--- Sliding windows of size k (stride 1) over the last axis: (..., i) -> (..., i-k+1, k),
-- from movement ops only: repeat k times, flatten, pad by k so each row is one longer,
-- unflatten to (k, i+1): row ky then reads x[ky + j].
local function windows(x, k)
  local s = shape.of(x)
  local r, i = #s, s[#s]
  local o = i - k + 1
  local pre = table.move(s, 1, r - 1, 1, {})
  local function with(...) return table.move({ ... }, 1, select("#", ...), #pre + 1, table.move(pre, 1, #pre, 1,
      {})) end
  local rep = reshape(expand(reshape(x, with(1, i)), with(k, i)), with(k * i))
  local padding = {}
  for _ = 1, r - 1 do padding[#padding + 1] = 0; padding[#padding + 1] = 0 end
  padding[#padding + 1], padding[#padding + 2] = 0, k
  local grid = reshape(pad(rep, padding), with(k, i + 1))
  local window = {}
  for d = 1, r - 1 do window[#window + 1] = 0; window[#window + 1] = s[d] end
  window[#window + 1], window[#window + 2], window[#window + 3], window[#window + 4] = 0, k, 0, o
  local order = {}
  for d = 0, r - 2 do order[#order + 1] = d end
  order[#order + 1], order[#order + 2] = r, r - 1
  return permute(shrink(grid, window), order)
end

--- conv2d of x (N, C, H, W) with w (F, C, KH, KW), stride 1, zero padding p.
local function conv2d(x, w, p)
  local sw = shape.of(w)
  local F, C, KH, KW = sw[1], sw[2], sw[3], sw[4]
  if p and p > 0 then x = pad(x, { 0, 0, 0, 0, p, p, p, p }) end
  local xs = windows(x, KW)                        -- (N, C, H, OW, KW)
  xs = permute(xs, { 0, 1, 3, 4, 2 })              -- (N, C, OW, KW, H)
  xs = windows(xs, KH)                             -- (N, C, OW, KW, OH, KH)
  xs = permute(xs, { 0, 4, 2, 1, 5, 3 })           -- (N, OH, OW, C, KH, KW)
  local s = shape.of(xs)
  local N, OH, OW = s[1], s[2], s[3]
  local big = { N, F, OH, OW, C, KH, KW }
  local xe = expand(reshape(xs, { N, 1, OH, OW, C, KH, KW }), big)
  local we = expand(reshape(w, { 1, F, 1, 1, C, KH, KW }), big)
  return reshape(reduce_axis(mul(xe, we), "ADD", { 4, 5, 6 }), { N, F, OH, OW })
end

--- Scaled dot-product attention of q, k, v (B, H, T, D), as tinygrad writes it.
local function sdpa(q, k, v)
  local s = shape.of(q)
  local kt = permute(k, { 0, 1, 3, 2 })
  local scores = matmul(q, kt)
  scores = mul(scores, full(1 / math.sqrt(s[4]), shape.of(scores)))
  return matmul(softmax(scores), v)
end

---------------------------------------------------------------------------------------------
-- the kernel interpreter: runs a kernel AST on Lua lists, checking every memory access

local IDENTITY = { ADD = 0.0, MUL = 1.0, MAX = -math.huge }

local function zero_of(dtype)
  if dtype == BOOL then return false end
  return dtype.is_float and 0.0 or 0
end

-- Each node is compiled once into a Lua closure (shared nodes share it), so the loops run
-- without touching the C nodes again.
local function interpret(kernel, memory)
  local bufs = {}
  for slot, b in ipairs(kernel.buffers) do
    local id = b.arg[1]
    memory[id] = memory[id] or {}
    bufs[slot - 1] = { data = memory[id], numel = b.arg[2] }
  end
  local env = {} -- RANGE node id -> its current value (nil outside its loop)
  local function checked(b, i, what)
    if i < 0 or i >= b.numel then
      error(string.format("%s out of bounds: %d not in [0, %d) in kernel %s", what, i, b.numel, kernel.name), 0)
    end
    return i
  end
  local function buffer_of(index_node)
    local param = index_node.src[1]
    assert(param.op == "PARAM", "INDEX of a " .. param.op)
    return bufs[param.arg[1]]
  end
  local compiled = {}
  local compile
  local function loop(r, body) -- runs body() for each value of RANGE r
    local id, n = r.id, r.src[1].arg
    return function()
      for v = 0, n - 1 do
        env[id] = v
        body()
      end
      env[id] = nil
    end
  end
  local function build(n)
    local op, src = n.op, n.src
    if op == "CONST" then
      local v = n.arg
      return function() return v end
    elseif op == "RANGE" then
      local id = n.id
      return function() return (assert(env[id], "a RANGE used outside its loop")) end
    elseif op == "LOAD" then
      local b, index = buffer_of(src[1]), compile(src[1].src[2])
      local gate, zero = src[2] and compile(src[2]), zero_of(n.dtype)
      return function()
        if gate and not gate() then return zero end
        return (assert(b.data[checked(b, index(), "load")], "load of an unwritten element"))
      end
    elseif op == "REDUCE" then
      local value, rop, dt, acc = compile(src[1]), n.arg, n.dtype, nil
      local body = function() acc = alu.exec(rop, dt, acc, value()) end
      for k = #src, 2, -1 do body = loop(src[k], body) end
      return function()
        acc = IDENTITY[rop]
        body()
        return acc
      end
    elseif op == "STORE" then
      local b, index, value = buffer_of(src[1]), compile(src[1].src[2]), compile(src[2])
      return function() b.data[checked(b, index(), "store")] = value() end
    elseif op == "END" then
      return loop(src[2], compile(src[1]))
    elseif op == "SINK" then
      local stmts = {}
      for i, s in ipairs(src) do stmts[i] = compile(s) end
      return function() for _, f in ipairs(stmts) do f() end end
    elseif op == "CAST" then
      local x, dt = compile(src[1]), n.dtype
      return function() return alu.cast(x(), dt) end
    end
    -- ALU: every operand evaluated (WHERE's both branches too, as hardware may)
    local args, dt = {}, tcl.groups.Comparison[op] and src[1].dtype or n.dtype
    for i, s in ipairs(src) do args[i] = compile(s) end
    if #args == 1 then return function() return alu.exec(op, dt, args[1]()) end end
    if #args == 2 then return function() return alu.exec(op, dt, args[1](), args[2]()) end end
    return function() return alu.exec(op, dt, args[1](), args[2](), args[3]()) end
  end
  compile = function(n)
    local f = compiled[n]
    if not f then
      f = build(n)
      compiled[n] = f
    end
    return f
  end
  compile(kernel.ast)()
end

--- Runs a schedule's kernels with the interpreter; returns each output's flat list.
local function interpret_schedule(sched)
  local memory = {}
  for id, values in pairs(input_values) do
    local m = {}
    for i, v in ipairs(values) do m[i - 1] = v end
    memory[id] = m
  end
  for _, k in ipairs(sched.kernels) do interpret(k, memory) end
  local results = {}
  for i, r in ipairs(sched.outputs) do
    local buf = r.op == "BUFFER" and r or r.src[1]
    local m, out = memory[buf.arg[1]], {}
    for j = 0, buf.arg[2] - 1 do out[j + 1] = m[j] end
    results[i] = out
  end
  return results
end

local function assert_close(expected, got, what, tol)
  tol = tol or 1e-5
  assert.are.equal(#expected, #got, what .. ": element count")
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    if math.abs(e - g) > tol * math.max(1, math.abs(e)) then
      error(string.format("%s: element %d is %.9g, expected %.9g", what, i, g, e), 2)
    end
  end
end

--- Schedules outputs, asserts the kernel count (exact, or at most when max_only), and
-- checks the values against the expected flat lists with the interpreter and, when
-- built, through schedule.run. Returns the schedule.
local function check(outputs, count, expected, opts)
  opts = opts or {}
  local sched = schedule.create(outputs)
  if opts.at_most then
    assert.is_true(#sched.kernels <= count, string.format("%d kernels, expected at most %d (%s)",
      #sched.kernels, count, schedule.summary(sched)))
  else
    assert.are.equal(count, #sched.kernels, schedule.summary(sched))
  end
  if expected then
    local got = interpret_schedule(sched)
    for i = 1, #expected do assert_close(expected[i], got[i], "interpreted output " .. i, opts.tol) end
    if has_lower then
      local realized = schedule.run(outputs)
      for i = 1, #expected do
        local r = realized[i]
        assert_close(expected[i], buffers.read(r.op == "BUFFER" and r or r.src[1]), "run output " .. i, opts.tol)
      end
    end
  end
  return sched
end

-- fn() without row fusion: the kernel counts tinygrad makes on the same shapes.
local unfused = require("spec.support.helper").without_row_fusion

---------------------------------------------------------------------------------------------
-- naive references on flat row-major lists

local function strides_of(s) return shape.strides(s) end

--- Calls f(multi_index (0-based list), flat_position (1-based)) for every element of shape s.
local function each_index(s, f)
  local n = shape.numel(s)
  local st = strides_of(s)
  for flat = 0, n - 1 do
    local idx, rest = {}, flat
    for d = 1, #s do
      idx[d] = rest // st[d]
      rest = rest % st[d]
    end
    f(idx, flat + 1)
  end
end

local function at(values, s, idx)
  local st, flat = strides_of(s), 0
  for d = 1, #s do flat = flat + idx[d] * st[d] end
  return values[flat + 1]
end

local function ref_rows(values, rows, cols, f) -- f(row list) -> row list
  local out = {}
  for r = 0, rows - 1 do
    local row = {}
    for c = 1, cols do row[c] = values[r * cols + c] end
    local res = f(row)
    for c = 1, #res do out[#out + 1] = res[c] end
  end
  return out
end


local function ref_matmul(a, b, M, K, N, batch)
  local out = {}
  for bt = 0, (batch or 1) - 1 do
    for i = 0, M - 1 do
      for j = 0, N - 1 do
        local acc = 0
        for k = 0, K - 1 do acc = acc + a[bt * M * K + i * K + k + 1] * b[bt * K * N + k * N + j + 1] end
        out[#out + 1] = acc
      end
    end
  end
  return out
end

---------------------------------------------------------------------------------------------

describe("shape.of", function()
  local x = input({ 2, 3, 4 })

  it("computes the shape of every tensor-graph op", function()
    assert.are.same({ 24 }, shape.of(buffers.new(F32, 24)))
    assert.are.same({}, shape.of(tcl.uop("CONST", F32, nil, 1.0)))
    assert.are.same({ 2, 3, 4 }, shape.of(x))
    assert.are.same({ 4, 2, 3 }, shape.of(permute(x, { 2, 0, 1 })))
    assert.are.same({ 2, 3, 1 }, shape.of(sum(x)))
    assert.are.same({ 1, 3, 1 }, shape.of(reduce_axis(x, "MAX", { 0, 2 })))
    assert.are.same({ 2, 3, 5 }, shape.of(expand(sum(x), { 2, 3, 5 })))
    assert.are.same({ 3, 3, 7 }, shape.of(pad(x, { 1, 0, 0, 0, 2, 1 })))
    assert.are.same({ 1, 2, 2 }, shape.of(shrink(x, { 1, 2, 0, 2, 2, 4 })))
    assert.are.same({ 2, 3, 4 }, shape.of(flip(x, { 1, 0, 1 })))
    assert.are.same({ 2, 3, 4 }, shape.of(add(x, x)))
    assert.are.same({ 2, 3, 4 }, shape.of(node("CAST", { x }, nil, tcl.dtype "int32")))
    assert.are.same({ 2, 3, 4 }, shape.of(contiguous(x)))
  end)

  it("returns a fresh list the caller may change", function()
    local s = shape.of(x)
    s[1] = 99
    assert.are.same({ 2, 3, 4 }, shape.of(x))
  end)

  it("forgets the shapes of collected nodes when it prunes", function()
    local nodes = {}
    -- hold both nodes of each pair: a source alive only in C may lose its userdata (and so
    -- its memo entry) at any collection, which would make the count below depend on GC timing
    for i = 1, 50 do
      local buffer = buffers.new(F32, 6)
      nodes[2 * i - 1], nodes[2 * i] = buffer, reshape(buffer, { 2, 3 })
    end
    for _, n in ipairs(nodes) do shape.of(n) end
    shape.prune()
    local with_nodes = shape.memo_size()
    nodes = nil -- luacheck: ignore 311 (drops the reference for the collector)
    collectgarbage()
    collectgarbage()
    shape.prune()
    assert.is_true(shape.memo_size() <= with_nodes - 100, "the 100 dead nodes' shapes are forgotten")
  end)

  it("names the op and the shapes in its errors", function()
    local y = input({ 4, 3 })
    local function err(n) local ok, e = pcall(shape.of, n); assert.is_false(ok); return e end
    assert.matches("ADD: sources have different shapes %(2, 3, 4%) and %(4, 3%)", err(add(x, y)))
    assert.matches("RESHAPE: cannot reshape %(2, 3, 4%) %(24 elements%) to %(5, 5%)", err(reshape(x, { 5, 5 })))
    assert.matches("EXPAND: cannot expand %(2, 3, 4%) to %(2, 6, 4%)", err(expand(x, { 2, 6, 4 })))
    assert.matches("PERMUTE: axis order %(0, 0, 1%) is not a permutation", err(permute(x, { 0, 0, 1 })))
    assert.matches("SHRINK: window .* does not fit", err(shrink(x, { 0, 3, 0, 3, 0, 4 })))
    assert.matches("REDUCE_AXIS: axis 3 is out of range for %(2, 3, 4%)", err(reduce_axis(x, "ADD", { 3 })))
    assert.matches("PAD: the padding has 2 entries", err(pad(x, { 1, 1 })))
    assert.matches("RANGE is not a tensor%-graph op", err(tcl.uop("RANGE", INDEX, { tcl.uop("CONST", INDEX, nil, 3) },
      { 0, "loop" })))
  end)
end)

describe("schedule: kernel counts (tinygrad's on the same shapes)", function()
  it("(a+b)*c is one kernel", function()
    local a, av = input({ 4, 4 })
    local b, bv = input({ 4, 4 })
    local c, cv = input({ 4, 4 })
    local expected = {}
    for i = 1, 16 do expected[i] = (av[i] + bv[i]) * cv[i] end
    check({ mul(add(a, b), c) }, 1, { expected })
  end)

  it("((a+b)*2):reshape(4,1) + c:reshape(1,4) is one kernel", function()
    local a, av = input({ 4 })
    local b, bv = input({ 4 })
    local c, cv = input({ 4 })
    local left = expand(reshape(mul(add(a, b), full(2, { 4 })), { 4, 1 }), { 4, 4 })
    local right = expand(reshape(c, { 1, 4 }), { 4, 4 })
    local expected = {}
    for i = 0, 3 do for j = 0, 3 do expected[#expected + 1] = (av[i + 1] + bv[i + 1]) * 2 + cv[j + 1] end end
    check({ add(left, right) }, 1, { expected })
  end)

  it("x + x:sum(-1, true) is one row-fused kernel (two unfused)", function()
    local x, xv = input({ 4, 8 })
    local expected = {}
    for r = 0, 3 do
      local s = 0
      for c = 1, 8 do s = s + xv[r * 8 + c] end
      for c = 1, 8 do expected[#expected + 1] = xv[r * 8 + c] + s end
    end
    check({ add(x, bcast(sum(x), { 4, 8 })) }, 1, { expected })
    unfused(function() check({ add(x, bcast(sum(x), { 4, 8 })) }, 2, { expected }) end)
  end)

  it("(x + x:sum(-1, true)):sum(-1) is one row-fused kernel (two unfused)", function()
    local x, xv = input({ 4, 8 })
    local expected = {}
    for r = 0, 3 do
      local s = 0
      for c = 1, 8 do s = s + xv[r * 8 + c] end
      expected[r + 1] = s + 8 * s
    end
    check({ sum(add(x, bcast(sum(x), { 4, 8 }))) }, 1, { expected }, { tol = 1e-4 })
    unfused(function() check({ sum(add(x, bcast(sum(x), { 4, 8 }))) }, 2, { expected }, { tol = 1e-4 }) end)
  end)

  it("x:softmax(-1) is one row-fused kernel (three unfused)", function()
    local x, xv = input({ 4, 8 })
    local sched = check({ softmax(x) }, 1, { ref_rows(xv, 4, 8, ref_softmax_row) })
    assert.are.equal("r_4_8_8_8", sched.kernels[1].name) -- the max, the sum, the division
    unfused(function()
      sched = check({ softmax(x) }, 3, { ref_rows(xv, 4, 8, ref_softmax_row) })
      assert.are.same({ "r_4_8", "r_4_8", "E_4_8" }, { sched.kernels[1].name, sched.kernels[2].name,
        sched.kernels[3].name })
    end)
  end)

  it("x:layernorm(-1) is one row-fused kernel (three unfused)", function()
    local x, xv = input({ 3, 16 })
    local expected = ref_rows(xv, 3, 16, function(row)
      local mean, var = 0, 0
      for _, v in ipairs(row) do mean = mean + v / #row end
      for _, v in ipairs(row) do var = var + (v - mean) ^ 2 / #row end
      local out = {}
      for i, v in ipairs(row) do out[i] = (v - mean) / math.sqrt(var + 1e-5) end
      return out
    end)
    check({ layernorm(x) }, 1, { expected }, { tol = 1e-4 })
    unfused(function() check({ layernorm(x) }, 3, { expected }, { tol = 1e-4 }) end)
  end)

  it("relu(x:matmul(w) + b) is one kernel", function()
    local M, K, N = 3, 5, 4
    local x, xv = input({ M, K })
    local w, wv = input({ K, N })
    local b, bv = input({ N })
    local y = add(matmul(x, w), expand(reshape(b, { 1, N }), { M, N }))
    local out = maximum(y, full(0, { M, N }))
    local mm = ref_matmul(xv, wv, M, K, N)
    local expected = {}
    for i = 0, M - 1 do
      for j = 0, N - 1 do expected[#expected + 1] = math.max(0, mm[i * N + j + 1] + bv[j + 1]) end
    end
    check({ out }, 1, { expected })
  end)

  local function ref_conv(xv, wv, N, C, H, W, F, KH, KW, p)
    local OH, OW = H + 2 * p - KH + 1, W + 2 * p - KW + 1
    local out = {}
    for n = 0, N - 1 do for f = 0, F - 1 do for oy = 0, OH - 1 do for ox = 0, OW - 1 do
      local acc = 0
      for c = 0, C - 1 do for ky = 0, KH - 1 do for kx = 0, KW - 1 do
        local iy, ix = oy + ky - p, ox + kx - p
        if iy >= 0 and iy < H and ix >= 0 and ix < W then
          acc = acc + at(xv, { N, C, H, W }, { n, c, iy, ix }) * at(wv, { F, C, KH, KW }, { f, c, ky, kx })
        end
      end end end
      out[#out + 1] = acc
    end end end end
    return out
  end

  it("conv2d (1,3,8,8) * (4,3,3,3) is one kernel", function()
    local x, xv = input({ 1, 3, 8, 8 })
    local w, wv = input({ 4, 3, 3, 3 })
    local y = conv2d(x, w)
    assert.are.same({ 1, 4, 6, 6 }, shape.of(y))
    check({ y }, 1, { ref_conv(xv, wv, 1, 3, 8, 8, 4, 3, 3, 0) }, { tol = 1e-4 })
  end)

  it("conv2d with zero padding is one kernel, and its loads stay in bounds", function()
    local x, xv = input({ 2, 2, 5, 5 })
    local w, wv = input({ 3, 2, 3, 3 })
    local y = conv2d(x, w, 1)
    assert.are.same({ 2, 3, 5, 5 }, shape.of(y))
    check({ y }, 1, { ref_conv(xv, wv, 2, 2, 5, 5, 3, 3, 3, 1) }, { tol = 1e-4 })
  end)

  -- (unfused: tinygrad's 4 and the stored softmax weights, an operand of weights @ values of
  -- more than realize_points.OPERAND_OPS ops)
  it("scaled dot-product attention is three kernels row-fused (five unfused)", function()
    local B, H, T, D = 1, 2, 4, 8
    local q, qv = input({ B, H, T, D })
    local k, kv = input({ B, H, T, D })
    local v, vv = input({ B, H, T, D })
    local expected = {}
    for h = 0, H - 1 do
      local base = h * T * D
      for i = 0, T - 1 do
        local scores = {}
        for j = 0, T - 1 do
          local acc = 0
          for d = 1, D do acc = acc + qv[base + i * D + d] * kv[base + j * D + d] end
          scores[j + 1] = acc / math.sqrt(D)
        end
        local p = ref_softmax_row(scores)
        for d = 1, D do
          local acc = 0
          for j = 0, T - 1 do acc = acc + p[j + 1] * vv[base + j * D + d] end
          expected[#expected + 1] = acc
        end
      end
    end
    check({ sdpa(q, k, v) }, 3, { expected }, { tol = 1e-4 })
    unfused(function() check({ sdpa(q, k, v) }, 5, { expected }, { tol = 1e-4 }) end)
  end)

  it("two outputs on one input are two kernels; one stored twice is one", function()
    local a, av = input({ 8 })
    local plus, times = add(a, full(1, { 8 })), mul(a, full(2, { 8 }))
    local e1, e2 = {}, {}
    for i = 1, 8 do e1[i], e2[i] = av[i] + 1, av[i] * 2 end
    check({ plus, times }, 2, { e1, e2 })
    local sched = check({ plus, plus }, 1, { e1, e1 })
    assert.are.equal(sched.outputs[1], sched.outputs[2])
  end)

  it("a reduction inside a reduction is stored first", function()
    local x, xv = input({ 4, 6 })
    local total = 0
    for i = 1, 24 do total = total + xv[i] end
    check({ sum(sum(x, 1), 0) }, 2, { { total } }, { tol = 1e-4 })
  end)

  it("a reduction that two kernels need is computed once", function()
    local x, xv = input({ 4, 6 })
    local s = sum(x)
    local e1, e2 = {}, {}
    for r = 0, 3 do
      local acc = 0
      for c = 1, 6 do acc = acc + xv[r * 6 + c] end
      e1[r + 1], e2[r + 1] = acc + 1, acc * 2
    end
    check({ add(s, full(1, { 4, 1 })), mul(s, full(2, { 4, 1 })) }, 3, { e1, e2 })
    -- used twice in one kernel it stays fused
    local e3 = {}
    for r = 1, 4 do e3[r] = e1[r] - 1 + (e1[r] - 1) * (e1[r] - 1) end
    check({ add(s, mul(s, s)) }, 1, { e3 }, { tol = 1e-4 })
  end)

  local function e1_of(av)
    local e = {}
    for i = 1, #av do e[i] = av[i] + 1 end
    return e
  end

  it("contiguous() is a realize point; of a stored buffer it is free", function()
    local a, av = input({ 2, 4 })
    local e = {}
    for i = 1, 8 do e[i] = (av[i] + 1) * 2 end
    check({ mul(contiguous(add(a, full(1, { 2, 4 }))), full(2, { 2, 4 })) }, 2, { e })
    check({ contiguous(a) }, 0, { av })
    check({ a }, 0, { av })
    -- a reshape of a stored result shares its buffer
    local c = contiguous(add(a, full(1, { 2, 4 })))
    local sched = check({ reshape(c, { 8 }), c }, 1, { e1_of(av), e1_of(av) })
    assert.are.equal(sched.outputs[1], sched.outputs[2].src[1])
  end)

  it("COPY (clone) is a kernel and a buffer of its own, also of a stored buffer", function()
    local a, av = input({ 2, 4 })
    local copied = check({ node("COPY", { a }) }, 1, { av })
    assert.are_not.equal(a, copied.outputs[1])
  end)
end)

describe("schedule: movement ops as index arithmetic", function()
  local s = { 3, 4 }
  local x, xv = input(s)

  local function expect_view(view, f)
    local expected = {}
    each_index(shape.of(view), function(idx) expected[#expected + 1] = f(idx) end)
    check({ view }, 1, { expected })
  end

  it("permute", function()
    expect_view(permute(x, { 1, 0 }), function(i) return at(xv, s, { i[2], i[1] }) end)
  end)

  it("flip", function()
    expect_view(flip(x, { 1, 1 }), function(i) return at(xv, s, { 2 - i[1], 3 - i[2] }) end)
    expect_view(flip(x, { 0, 1 }), function(i) return at(xv, s, { i[1], 3 - i[2] }) end)
  end)

  it("shrink", function()
    expect_view(shrink(x, { 1, 3, 1, 4 }), function(i) return at(xv, s, { i[1] + 1, i[2] + 1 }) end)
  end)

  it("pad fills with zeros and gates its loads", function()
    expect_view(pad(x, { 1, 2, 0, 3 }), function(i)
      local r, c = i[1] - 1, i[2]
      if r < 0 or r >= 3 or c >= 4 then return 0 end
      return at(xv, s, { r, c })
    end)
    -- a padded elementwise function pads with 0, not f(0)
    expect_view(pad(exp(x), { 1, 1, 1, 1 }), function(i)
      local r, c = i[1] - 1, i[2] - 1
      if r < 0 or r >= 3 or c < 0 or c >= 4 then return 0 end
      return math.exp(at(xv, s, { r, c }))
    end)
  end)

  it("pad of a shrink, shrink of a pad", function()
    expect_view(pad(shrink(x, { 1, 2, 1, 3 }), { 2, 0, 0, 1 }), function(i)
      local r, c = i[1] - 2, i[2]
      if r < 0 or c >= 2 then return 0 end
      return at(xv, s, { r + 1, c + 1 })
    end)
    expect_view(shrink(pad(x, { 2, 2, 2, 2 }), { 1, 5, 3, 7 }), function(i)
      local r, c = i[1] - 1, i[2] + 1
      if r < 0 or r >= 3 or c >= 4 then return 0 end
      return at(xv, s, { r, c })
    end)
  end)

  it("reshape of a non-contiguous view", function()
    local t = permute(x, { 1, 0 }) -- (4, 3)
    expect_view(reshape(t, { 2, 6 }), function(i)
      local flat = i[1] * 6 + i[2]
      return at(xv, s, { flat % 3, flat // 3 })
    end)
    expect_view(reshape(flip(shrink(x, { 0, 3, 1, 3 }), { 0, 1 }), { 6 }), function(i)
      local r, c = i[1] // 2, i[1] % 2
      return at(xv, s, { r, 2 - c })
    end)
  end)

  it("expand of a reshape reads each element many times", function()
    expect_view(expand(reshape(x, { 3, 1, 4 }), { 3, 5, 4 }), function(i) return at(xv, s, { i[1], i[3] }) end)
  end)

  it("a buffer whose reads all simplify away is no kernel argument", function()
    local sched = check({ shrink(pad(x, { 2, 0, 0, 0 }), { 0, 2, 0, 4 }) }, 1, { { 0, 0, 0, 0, 0, 0, 0, 0 } })
    assert.are.equal(1, #sched.kernels[1].buffers)
    local a = input({ 2, 4 })
    sched = check({ add(a, shrink(pad(x, { 2, 0, 0, 0 }), { 0, 2, 0, 4 })) }, 1)
    assert.are.same({ sched.outputs[1].src[1], a.src[1] }, sched.kernels[1].buffers)
  end)

  it("a constant output is one kernel", function()
    check({ full(3, { 2, 2 }) }, 1, { { 3, 3, 3, 3 } })
    check({ tcl.uop("CONST", F32, nil, 7.0) }, 1, { { 7 } })
  end)
end)

describe("schedule: kernels", function()
  it("follow the kernel contract: SINK(END(STORE(INDEX(PARAM 0, i), v), RANGE)), loop ranges numbered from 0",
      function()
    local x = input({ 4, 8 })
    local sched = schedule.create({ sum(x) })
    local k = sched.kernels[1]
    assert.are.equal("r_4_8", k.name)
    local sink = k.ast
    assert.are.equal("SINK", sink.op)
    assert.are.same({ "r_4_8" }, sink.arg)
    local e = sink.src[1]
    assert.are.equal("END", e.op)
    local loop = e.src[2]
    assert.are.equal("RANGE", loop.op)
    assert.are.same({ 0, "loop" }, loop.arg)
    local store = e.src[1]
    assert.are.equal("STORE", store.op)
    local out = store.src[1].src[1]
    assert.are.equal("PARAM", out.op)
    assert.are.same({ 0, 4 }, out.arg)
    local red = store.src[2]
    assert.are.equal("REDUCE", red.op)
    assert.are.equal("ADD", red.arg)
    assert.are.same({ 1, "reduce" }, red.src[2].arg)
    assert.are.same({ sched.outputs[1].src[1], x.src[1] }, k.buffers)
  end)

  it("identical work on other buffers is the identical kernel AST", function()
    local a, b = input({ 4, 4 }), input({ 4, 4 })
    local c, d = input({ 4, 4 }), input({ 4, 4 })
    local k1 = schedule.create({ mul(add(a, b), a) }).kernels[1]
    local k2 = schedule.create({ mul(add(c, d), c) }).kernels[1]
    assert.are.equal(k1.ast, k2.ast)
    assert.are_not.same(k1.buffers, k2.buffers)
    -- a different pattern of buffer use is a different kernel
    local k3 = schedule.create({ mul(add(c, d), d) }).kernels[1]
    assert.are_not.equal(k1.ast, k3.ast)
  end)

  it("identical kernels share one compile cache entry", function()
    if not has_lower then pending("tcl.codegen.driver.lower is not built yet") return end
    local kernel_cache = require "tcl.codegen.driver.kernel_cache"
    local a, b = input({ 5, 3 }), input({ 5, 3 })
    local c, d = input({ 5, 3 }), input({ 5, 3 })
    local before = kernel_cache.size()
    schedule.run({ sub(a, mul(b, a)) })
    local after_first = kernel_cache.size()
    schedule.run({ sub(c, mul(d, c)) })
    assert.are.equal(before + 1, after_first)
    assert.are.equal(after_first, kernel_cache.size())
  end)

  it("are ordered by their buffer dependencies", function()
    local a, av = input({ 6 })
    local c1 = contiguous(add(a, full(1, { 6 })))
    local c2 = contiguous(mul(c1, full(2, { 6 })))
    local out = add(permute(reshape(c2, { 2, 3 }), { 1, 0 }), permute(reshape(c1, { 2, 3 }), { 1, 0 }))
    local expected = {}
    for j = 0, 2 do for i = 0, 1 do
      local v = av[i * 3 + j + 1] + 1
      expected[#expected + 1] = v * 2 + v
    end end
    local sched = check({ out }, 3, { expected })
    local written = {}
    for _, k in ipairs(sched.kernels) do
      for slot = 2, #k.buffers do
        local id = k.buffers[slot].arg[1]
        assert.is_true(written[id] or input_values[id] ~= nil, "kernel " .. k.name .. " reads a buffer not yet written")
      end
      written[k.buffers[1].arg[1]] = true
    end
  end)

  it("store results on the device of their inputs; several devices are an error", function()
    local a, b = buffers.new(F32, 4, "OTHER"), buffers.new(F32, 4, "OTHER")
    local sched = schedule.create({ add(a, b) })
    assert.are.equal("OTHER", sched.outputs[1].arg[3])
    local ok, err = pcall(schedule.create, { add(a, buffers.new(F32, 4)) })
    assert.is_false(ok)
    assert.matches("schedule.create: the graph reads buffers on several devices %(OTHER and "
      .. buffers.device .. "%)", err)
  end)

  it("print a summary, at DEBUG >= 1", function()
    local x = input({ 2, 3 })
    local sched = schedule.create({ softmax(x) })
    assert.are.equal("schedule: 1 kernel: r_2_3_3_3", schedule.summary(sched))
    if not has_lower then return end
    local lower = require "tcl.codegen.driver.lower"
    local lines, log = {}, lower.log
    lower.log = function(line) -- only the scheduler's lines (lower logs at DEBUG >= 2)
      if line:find("^schedule:") then lines[#lines + 1] = line end
    end
    local ok, err = pcall(function()
      tcl.context { DEBUG = 1 }(schedule.run, { add(x, x) })
      tcl.context { DEBUG = 0 }(schedule.run, { add(x, x) })
    end)
    lower.log = log
    assert(ok, err)
    assert.are.equal(1, #lines)
    local compiled, from_disk, in_memory = lines[1]:match("^schedule: 1 kernel: E_2_3 | scheduled in [%d.]+ ms; "
      .. "(%d+) compiled in [%d.]+ ms, (%d+) from disk, (%d+) in memory$")
    assert.is_truthy(compiled, lines[1])
    -- the one kernel was had one way (a disk cache may hold it from an earlier run)
    assert.are.equal(1, tonumber(compiled) + tonumber(from_disk) + tonumber(in_memory))
  end)

  it("reject a reduction whose dtype differs from its source's", function()
    local x = input({ 2, 3 })
    local bad = tcl.uop("REDUCE_AXIS", tcl.dtype "float64", { x }, { "ADD", { 1 } })
    assert.has_error(function() schedule.create({ bad }) end,
      "rangeify: REDUCE_AXIS of dtype float64 reduces a float32 value (cast the source first)")
  end)
end)

describe("buffers", function()
  it("registers BUFFER nodes with unique ids", function()
    local a, b = buffers.new(F32, 4), buffers.new("int32", 4)
    assert.are.equal("BUFFER", a.op)
    assert.are_not.equal(a.arg[1], b.arg[1])
    assert.are.same({ a.arg[1], 4, buffers.device }, a.arg)
    assert.are.equal(tcl.dtype "int32", b.dtype)
    assert.is_true(buffers.is_buffer(a))
  end)

  it("rejects bad arguments", function()
    assert.has_error(function() buffers.new(F32, -1) end, "buffers.new: numel must be a non-negative integer, got -1")
    local stranger = tcl.uop("BUFFER", F32, nil, { 987654321, 4, "EMU" })
    assert.has_error(function() buffers.get(stranger) end)
    assert.has_error(function() buffers.get(input({ 2, 2 })) end) -- a RESHAPE, not a BUFFER
  end)

  it("frees a buffer once no node refers to it", function()
    collectgarbage()
    collectgarbage()
    buffers.collect()
    local before = buffers.stats()
    local kept = buffers.new(F32, 8)
    local dropped = buffers.new(F32, 8)
    local view = reshape(kept, { 2, 4 }) -- keeps its BUFFER alive: nodes hold their sources
    kept = nil -- luacheck: ignore 311 (drops the reference for the collector)
    local allocated = 0
    if has_runtime then
      buffers.get(dropped)
      buffers.get(view.src[1])
      allocated = 2
      assert.are.equal(before.allocated + 2, buffers.stats().allocated)
    end
    local dropped_id = dropped.arg[1]
    dropped = nil -- luacheck: ignore 311 (drops the reference for the collector)
    collectgarbage()
    collectgarbage()
    assert.are.equal(1, buffers.collect())
    assert.are.equal(before.registered + 1, buffers.stats().registered)
    assert.are.equal(before.allocated + allocated // 2, buffers.stats().allocated)
    assert.is_nil(tcl.core.find("BUFFER", F32, nil, { dropped_id, 8, "EMU" }))
    view = nil -- luacheck: ignore 311 (drops the reference for the collector)
    collectgarbage()
    collectgarbage()
    assert.are.equal(1, buffers.collect())
    assert.are.same(before, buffers.stats())
  end)

  it("frees the intermediate buffers of a schedule after it is dropped", function()
    local x = input({ 4, 8 })
    collectgarbage()
    collectgarbage()
    buffers.collect()
    local before = buffers.stats().registered
    local sched
    unfused(function() sched = schedule.create({ softmax(x) }) end) -- intermediates: the max, the sum
    assert.are.equal(before + 3, buffers.stats().registered)
    local result = sched.outputs[1]
    sched = nil -- luacheck: ignore 311 (drops the reference for the collector)
    collectgarbage()
    collectgarbage()
    assert.are.equal(2, buffers.collect()) -- the max and the sum; the result is still held
    assert.are.equal(before + 1, buffers.stats().registered)
    assert.is_not_nil(result)
  end)

  it("round-trips values through the runtime", function()
    if not has_runtime then pending("tcl.runtime is not built yet") return end
    local b = buffers.from_list(F32, { 1.5, -2, 3 })
    assert.are.same({ 1.5, -2, 3 }, buffers.read(b))
  end)
end)
