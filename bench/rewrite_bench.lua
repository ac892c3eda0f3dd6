-- bench/rewrite_bench.lua — how fast the rewrite engine (src/rewrite) simplifies a large
-- index-arithmetic graph with the symbolic rules (lua/tcl/patterns/symbolic.lua).
--
-- The graph: the index expressions of many kernels, each the chain of views a tensor
-- program produces — reshapes (sums of loop RANGEs times strides, split again with floor
-- div/mod by the shape), permutes, pads (WHERE-gated by validity comparisons), shrinks and
-- flips — gathered under one SINK: at least 100,000 nodes, built from a fixed seed.
--
-- Figures (median of RUNS runs, each on a freshly built graph, so vmin/vmax caches and
-- interned results start cold as in a real compile):
--   * symbolic rules as written: the hot rules name native C rewrites;
--   * the same rules with every native rewrite replaced by an equivalent Lua function (the
--     rule file loaded again with the native names mapped to Lua): Lua callbacks on the hot
--     path. Both must give the same simplified graph, which the bench checks.
--   * baselines measured in the same run: toposort of the graph into a Lua list, a walk over that
--     toposort in Lua reading each node's op (one C accessor per node), and a plain Lua
--     table walk over a mirror of the graph (the least any visit of every node costs).
-- node visits = input nodes + rule matches (every replacement is visited again); matches
-- come from one extra traced run per variant. Times are CPU seconds (os.clock): on a busy
-- machine they count the work itself, not other programs.
--
-- Run with a Release build (from the repository root):
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel
--   LUA_PATH='lua/?.lua;lua/?/init.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/rewrite_bench.lua [nodes] [runs]
-- (defaults: at least 100000 nodes, 5 runs)
local tcl = require "tcl"
local P = require "tcl.pattern"
local alu = require "tcl.alu"
local bounds = require "tcl.bounds"

local TARGET_NODES = math.tointeger(tonumber(arg and arg[1] or "")) or 100000
local RUNS = math.tointeger(tonumber(arg and arg[2] or "")) or 5
local SEED = 12345

-- seeded random numbers (splitmix64, shared with the specs)
local new_rng = require("spec.support.splitmix").new

---------------------------------------------------------------------------------------------
-- the graph: index arithmetic of view chains

-- Every node of the graph is made here, which counts the distinct ones: the graph grows
-- until it has TARGET_NODES, whatever else the process has interned.
local made, made_count = {}, 0
local function make(op, dtype, src, arg)
  local u = tcl.uop(op, dtype, src, arg)
  if not made[u] then made[u] = true; made_count = made_count + 1 end
  return u
end
local function const(v) return make("CONST", "index", nil, v) end
local function add(a, b) return make("ADD", "index", { a, b }) end
local function mul(a, b) return make("MUL", "index", { a, b }) end
local function fdiv(a, b) return make("FLOORDIV", "index", { a, b }) end
local function fmod(a, b) return make("FLOORMOD", "index", { a, b }) end
local function lt(a, b) return make("CMPLT", "bool", { a, b }) end
local function both(a, b) if not a then return b end return make("AND", "bool", { a, b }) end

local DIMS = { 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64 }

local function product(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

local function row_major_strides(shape)
  local strides, acc = {}, 1
  for i = #shape, 1, -1 do strides[i] = acc; acc = acc * shape[i] end
  return strides
end

local function prime_factors(n)
  local out, p = {}, 2
  while n > 1 do
    while n % p == 0 do out[#out + 1] = p; n = n // p end
    p = p + 1
  end
  return out
end

--- A random shape with the same number of elements (the factors regrouped).
local function regroup(rng, shape)
  local factors = prime_factors(product(shape))
  for i = #factors, 2, -1 do
    local j = rng:integer(1, i)
    factors[i], factors[j] = factors[j], factors[i]
  end
  local out = {}
  for _, f in ipairs(factors) do
    if #out > 0 and rng:integer(1, 3) > 1 and out[#out] * f <= 256 then out[#out] = out[#out] * f
    else out[#out + 1] = f end
  end
  if #out == 0 then out[1] = 1 end
  return out
end

-- Each step maps the indices of a view to the indices of the view it was made from.
local function reshape_step(rng, idx, shape)
  local source_shape = regroup(rng, shape)
  local flat
  local strides = row_major_strides(shape)
  for i, e in ipairs(idx) do
    local term = strides[i] == 1 and e or mul(e, const(strides[i]))
    flat = flat and add(flat, term) or term
  end
  local source_strides = row_major_strides(source_shape)
  local out = {}
  for i, s in ipairs(source_shape) do
    local q = source_strides[i] == 1 and flat or fdiv(flat, const(source_strides[i]))
    out[i] = i == 1 and q or fmod(q, const(s))
  end
  return out, source_shape
end

local function permute_step(rng, idx, shape)
  local order = {}
  for i = 1, #idx do order[i] = i end
  for i = #order, 2, -1 do
    local j = rng:integer(1, i)
    order[i], order[j] = order[j], order[i]
  end
  local out, out_shape = {}, {}
  for i, from in ipairs(order) do out[i], out_shape[i] = idx[from], shape[from] end
  return out, out_shape
end

local function pad_step(rng, idx, shape, valid)
  local d = rng:integer(1, #idx)
  local before, after = rng:integer(1, 2), rng:integer(0, 2)
  local inner = shape[d] - before - after
  if inner < 1 then return idx, shape, valid end
  local e = idx[d]
  valid = both(valid, both(lt(const(before - 1), e), lt(e, const(before + inner))))
  local out, out_shape = table.move(idx, 1, #idx, 1, {}), table.move(shape, 1, #shape, 1, {})
  out[d] = add(e, const(-before))
  out_shape[d] = inner
  return out, out_shape, valid
end

local function shrink_step(rng, idx, shape)
  local d = rng:integer(1, #idx)
  local offset = rng:integer(1, 3)
  local out, out_shape = table.move(idx, 1, #idx, 1, {}), table.move(shape, 1, #shape, 1, {})
  out[d] = add(idx[d], const(offset))
  out_shape[d] = shape[d] + offset + rng:integer(0, 2)
  return out, out_shape
end

local function flip_step(rng, idx, shape)
  local d = rng:integer(1, #idx)
  local out = table.move(idx, 1, #idx, 1, {})
  out[d] = add(mul(idx[d], const(-1)), const(shape[d] - 1))
  return out, shape
end

local STEPS = { reshape_step, reshape_step, permute_step, pad_step, shrink_step, flip_step }

--- The gated buffer offset of one kernel: WHERE(valid, sum(index_i * stride_i), 0).
local function kernel_index(rng, kernel)
  local shape, idx = {}, {}
  for i = 1, rng:integer(2, 4) do
    shape[i] = rng:pick(DIMS)
    idx[i] = make("RANGE", "index", { const(shape[i]) }, { kernel * 8 + i, 0 })
  end
  local valid
  for _ = 1, rng:integer(3, 7) do
    local step = rng:pick(STEPS)
    if step == pad_step then idx, shape, valid = pad_step(rng, idx, shape, valid)
    else idx, shape = step(rng, idx, shape) end
  end
  local offset
  for i, stride in ipairs(row_major_strides(shape)) do
    local term = mul(idx[i], const(stride))
    offset = offset and add(offset, term) or term
  end
  if valid then offset = make("WHERE", "index", { valid, offset, const(0) }) end
  return offset
end

--- Kernels are added until the graph has TARGET_NODES nodes (every node made is used).
local kernels
local function build_graph()
  local rng = new_rng(SEED)
  local outputs = {}
  made, made_count = {}, 0
  while made_count < TARGET_NODES do outputs[#outputs + 1] = kernel_index(rng, #outputs + 1) end
  made = {}
  kernels = #outputs
  return tcl.uop("SINK", nil, outputs)
end

---------------------------------------------------------------------------------------------
-- the symbolic rules with Lua functions in place of the native rewrites

local SIGNED = { index = true, int8 = true, int16 = true, int32 = true, int64 = true }

local function const_of(dtype, v)
  if dtype.name == "bool" then v = v ~= false and v ~= 0 end
  return tcl.uop("CONST", dtype, nil, v)
end

--- fold_constants: every source CONST -> the CONST tcl.alu computes (undefined: no fold).
local function fold_constants(m)
  local u = m.__root
  local src = u.src
  if #src == 0 or #src > 3 then return nil end
  local values = {}
  for i, s in ipairs(src) do
    if s.op ~= "CONST" then return nil end
    values[i] = { s.arg, s.dtype }
  end
  local operand_dtype = u.dtype
  if tcl.op_in(u.op, "Comparison") then operand_dtype = src[1].dtype end
  local ok, result = pcall(alu.exec, u.op, operand_dtype, table.unpack(values))
  if not ok or result == nil then return nil end
  return const_of(u.dtype, result)
end

--- fold_to_bounds: an integer or bool node whose interval is one value is that value.
local function drop_same_dtype(m)
  local u = m.__root
  if u.nsrc == 1 and u:source(1).dtype == u.dtype then return u:source(1) end
end

local function fold_to_bounds(m)
  local u = m.__root
  if u.op == "CONST" then return nil end
  local lo, hi = bounds.bounds(u)
  if lo == nil or lo ~= hi then return nil end
  if u.dtype.name == "uint64" and hi == math.maxinteger then return nil end
  return const_of(u.dtype, lo)
end

local WIDE = { index = true, int64 = true } -- Lua integers wrap like these
--- a + b or a * b wrapped to the dtype's width.
local function wrapped(op, dtype, a, b)
  if WIDE[dtype.name] then return op == "ADD" and a + b or a * b end
  return (alu.exec(op, dtype, { a, dtype }, { b, dtype }))
end

--- The terms {base=, coeff=} (left to right) and wrapped constant k of the ADD chain under
-- root (a single node is a chain of one).
local function flatten_sum(root)
  local d = root.dtype
  local terms, k = {}, 0
  local stack = { root }
  while #stack > 0 do
    local u = table.remove(stack)
    if u.op == "ADD" and u.dtype == d then
      stack[#stack + 1] = u:source(2)
      stack[#stack + 1] = u:source(1)
    elseif u.op == "CONST" then
      k = wrapped("ADD", d, k, u.arg)
    else
      local base, coeff = u, 1
      if u.op == "MUL" then
        local a, b = u:source(1), u:source(2)
        if a.op ~= "CONST" and b.op == "CONST" then base, coeff = a, b.arg
        elseif b.op ~= "CONST" and a.op == "CONST" then base, coeff = b, a.arg end
      end
      terms[#terms + 1] = { base = base, coeff = coeff }
    end
  end
  return terms, k
end

--- ((t1 + t2) + ...) + k, zero terms left out, k last when nonzero (or when nothing else).
local function build_sum(d, terms, k)
  local acc
  for _, t in ipairs(terms) do
    if t.coeff ~= 0 then
      local v = t.coeff == 1 and t.base or tcl.uop("MUL", d, { t.base, const_of(d, t.coeff) })
      acc = acc and tcl.uop("ADD", d, { acc, v }) or v
    end
  end
  if k ~= 0 or not acc then
    local c = const_of(d, k)
    acc = acc and tcl.uop("ADD", d, { acc, c }) or c
  end
  return acc
end

--- normalize_sum: the canonical left-leaning ADD chain of a signed sum (see natives.c).
local function normalize_sum(m)
  local root = m.__root
  local d = root.dtype
  if root.op ~= "ADD" or not SIGNED[d.name] then return nil end
  local terms, k = flatten_sum(root)
  local merged, at = {}, {}
  for _, t in ipairs(terms) do
    local i = at[t.base]
    if i then merged[i].coeff = wrapped("ADD", d, merged[i].coeff, t.coeff)
    else merged[#merged + 1] = t; at[t.base] = #merged end
  end
  for _, rem in ipairs(merged) do
    local div_op = rem.base.op == "MOD" and "IDIV" or rem.base.op == "FLOORMOD" and "FLOORDIV" or nil
    local divisor = div_op and rem.base:source(2)
    if div_op and rem.coeff ~= 0 and divisor.op == "CONST" and divisor.arg ~= 0 then
      local x = rem.base:source(1)
      local quotient_coeff = wrapped("MUL", d, rem.coeff, divisor.arg)
      for _, quo in ipairs(merged) do
        if quo.base.op == div_op and quo.base:source(1) == x and quo.base:source(2) == divisor
          and quo.coeff == quotient_coeff then
          quo.coeff = 0
          local existing
          for _, t in ipairs(merged) do if t.base == x then existing = t break end end
          if existing then existing.coeff = wrapped("ADD", d, existing.coeff, rem.coeff); rem.coeff = 0
          else rem.base = x end
          break
        end
      end
    end
  end
  return build_sum(d, merged, k)
end

-- fold_divmod: x // c and x % c by a constant c > 1 (see natives.c), on true values within
-- 2^52 in magnitude
local EXACT_LIMIT = 1 << 52
local function exact_small(v) return v >= -EXACT_LIMIT and v <= EXACT_LIMIT end

--- The true interval of sum(coeff*base) + k when it provably does not wrap, else nil.
local function exact_sum_interval(d, terms, k)
  if not exact_small(k) then return nil end
  local lo, hi = k, k
  for _, t in ipairs(terms) do
    local blo, bhi = bounds.bounds(t.base)
    if blo == nil or not exact_small(blo) or not exact_small(bhi) or not exact_small(t.coeff) then return nil end
    -- products of numbers up to 2^52 may pass 2^63: decide on doubles, then compute exactly
    local fa, fb = (t.coeff + 0.0) * blo, (t.coeff + 0.0) * bhi
    if math.abs(fa) >= EXACT_LIMIT or math.abs(fb) >= EXACT_LIMIT then return nil end
    local a, b = t.coeff * blo, t.coeff * bhi
    if a > b then a, b = b, a end
    if a < d.min or b > d.max then return nil end
    lo, hi = lo + a, hi + b
    if not exact_small(lo) or not exact_small(hi) then return nil end
  end
  if lo < d.min or hi > d.max then return nil end
  return lo, hi
end

local function gcd(a, b)
  a, b = math.abs(a), math.abs(b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

local function fold_fixed_quotient(root, floor, is_div, x, c)
  local d = root.dtype
  local lo, hi = bounds.bounds(x)
  if lo == nil or not exact_small(lo) or not exact_small(hi) or (not floor and lo < 0) then return nil end
  local q = lo // c
  if q ~= hi // c then return nil end
  if is_div then return const_of(d, q) end
  if q == 0 then return x end
  return tcl.uop("ADD", d, { x, const_of(d, wrapped("MUL", d, q, -c)) })
end

local function take_out_multiples(root, floor, is_div, terms, k, c)
  local d = root.dtype
  local quotient, rest = {}, {}
  for _, t in ipairs(terms) do
    if t.coeff % c == 0 then quotient[#quotient + 1] = { base = t.base, coeff = t.coeff // c }
    else rest[#rest + 1] = t end
  end
  local kq, kr = k // c, k % c
  if #quotient == 0 and kq == 0 then return nil end
  local rlo = exact_sum_interval(d, rest, kr)
  if not rlo or (not floor and rlo < 0) then return nil end
  local result = tcl.uop(root.op, d, { build_sum(d, rest, kr), const_of(d, c) })
  if is_div then result = tcl.uop("ADD", d, { build_sum(d, quotient, kq), result }) end
  return result
end

local function divide_common_factor(root, is_div, terms, k, c)
  local d = root.dtype
  local g = c
  for _, t in ipairs(terms) do if gcd(t.coeff, c) > 1 then g = gcd(g, t.coeff) end end
  local scaled, rest = {}, {}
  for _, t in ipairs(terms) do
    if gcd(t.coeff, c) > 1 then scaled[#scaled + 1] = { base = t.base, coeff = t.coeff // g }
    else rest[#rest + 1] = t end
  end
  local kq, kr = k // g, k % g
  if g <= 1 or (g == c and #rest == #terms) then return nil end
  local rlo, rhi = exact_sum_interval(d, rest, kr)
  if not rlo or rlo < 0 or rhi >= g or not exact_sum_interval(d, scaled, kq) then return nil end
  local result = tcl.uop(root.op, d, { build_sum(d, scaled, kq), const_of(d, c // g) })
  if not is_div then
    result = tcl.uop("ADD", d, { tcl.uop("MUL", d, { result, const_of(d, g) }), build_sum(d, rest, kr) })
  end
  return result
end

local function fold_congruence(root, is_div, terms, k, c)
  local d = root.dtype
  local kq, kr = k // c, k % c
  local negative = true
  for least = 1, 0, -1 do
    if not negative then return nil end
    local quotient, rest, changed = {}, {}, kr ~= k
    negative = false
    for _, t in ipairs(terms) do
      local r = t.coeff % c
      if least == 1 and r > c - r then r, negative = r - c, true end
      if r ~= t.coeff then changed = true end
      quotient[#quotient + 1] = { base = t.base, coeff = (t.coeff - r) // c }
      rest[#rest + 1] = { base = t.base, coeff = r }
    end
    local rlo, rhi = exact_sum_interval(d, rest, kr)
    if changed and rlo and rlo >= 0 and rhi < c then
      return is_div and build_sum(d, quotient, kq) or build_sum(d, rest, kr)
    end
  end
  return nil
end

local function fold_divmod(m)
  local root = m.__root
  local op, d = root.op, root.dtype
  local floor, is_div = op == "FLOORDIV" or op == "FLOORMOD", op == "FLOORDIV" or op == "IDIV"
  if not floor and op ~= "IDIV" and op ~= "MOD" then return nil end
  local divisor = root:source(2)
  if not SIGNED[d.name] or divisor.op ~= "CONST" then return nil end
  local c = divisor.arg
  if c <= 1 or c > EXACT_LIMIT then return nil end
  local x = root:source(1)
  local r = fold_fixed_quotient(root, floor, is_div, x, c)
  if r then return r end
  local terms, k = flatten_sum(x)
  local lo = exact_sum_interval(d, terms, k)
  if not lo or (not floor and lo < 0) then return nil end
  return take_out_multiples(root, floor, is_div, terms, k, c) or divide_common_factor(root, is_div, terms, k, c)
    or fold_congruence(root, is_div, terms, k, c)
end

local LUA_EQUIVALENTS = {
  return_x = function(m) return m.x end,
  fold_constants = fold_constants,
  fold_to_bounds = fold_to_bounds,
  normalize_sum = normalize_sum,
  fold_divmod = fold_divmod,
  drop_same_dtype = drop_same_dtype,
}

--- patterns.symbolic loaded a second time, its native rewrites replaced by LUA_EQUIVALENTS
-- (each pattern also binds its root as __root, which the natives read from the call).
local function symbolic_with_lua_rewrites()
  local original_rules = P.rules
  local saved_module = package.loaded["tcl.patterns.symbolic"]
  P.rules = function(entries)
    local replaced = {}
    for i, entry in ipairs(entries) do
      local pattern, rewrite = entry[1], entry[2]
      if type(rewrite) == "string" then
        rewrite = LUA_EQUIVALENTS[rewrite] or error("rewrite_bench: no Lua equivalent of native " .. rewrite)
        pattern = pattern:named "__root"
      end
      replaced[i] = { pattern, rewrite }
    end
    return original_rules(replaced)
  end
  package.loaded["tcl.patterns.symbolic"] = nil
  local ok, module = pcall(require, "tcl.patterns.symbolic")
  P.rules = original_rules
  package.loaded["tcl.patterns.symbolic"] = saved_module
  if not ok then error(module, 0) end
  return module
end

---------------------------------------------------------------------------------------------
-- measuring

local function median(list)
  local sorted = table.move(list, 1, #list, 1, {})
  table.sort(sorted)
  local n = #sorted
  if n % 2 == 1 then return sorted[(n + 1) // 2] end
  return (sorted[n // 2] + sorted[n // 2 + 1]) / 2
end

local function fresh_state()
  collectgarbage()
  collectgarbage()
end

--- CPU seconds of f(graph) on a freshly built graph, RUNS times; the median.
local function time_on_fresh_graphs(f)
  local times = {}
  for run = 1, RUNS do
    fresh_state()
    local graph = build_graph()
    local t0 = os.clock()
    f(graph)
    times[run] = os.clock() - t0
    graph = nil -- luacheck: ignore 311 (drops the reference for the collector)
  end
  fresh_state()
  return median(times)
end

local function count_matches(rules, graph)
  P.clear_traces()
  local result = rules:rewrite(graph, { trace = true, name = "count" })
  local traces = P.traces()
  local n = #traces[#traces].matches
  P.clear_traces()
  return n, result
end

local symbolic = require("tcl.patterns.symbolic").symbolic
local lua_symbolic = symbolic_with_lua_rewrites().symbolic

-- one untimed look at the graph: size, result, matches, and the two variants agreeing
local nodes, simplified_nodes, native_matches, lua_matches
do
  fresh_state()
  local graph = build_graph()
  nodes = #graph:toposort()
  local result
  native_matches, result = count_matches(symbolic, graph)
  simplified_nodes = #result:toposort()
  local lua_result
  lua_matches, lua_result = count_matches(lua_symbolic, graph)
  if lua_result ~= result then error("rewrite_bench: the Lua rewrites give another graph than the native ones") end
  graph, result, lua_result = nil, nil, nil -- luacheck: ignore 311 (drops the reference for the collector)
end

local native_time = time_on_fresh_graphs(function(g) symbolic:rewrite(g) end)
local lua_time = time_on_fresh_graphs(function(g) lua_symbolic:rewrite(g) end)
local toposort_time = time_on_fresh_graphs(function(g) g:toposort() end)

-- baselines over the same graph's toposort: node.op through the C accessor, and a mirror of
-- the graph in plain Lua tables walked the same way
local walk_times, table_walk_times = {}, {}
do
  fresh_state()
  local graph = build_graph()
  local order = graph:toposort()
  local mirror, index_of = {}, {}
  for i, u in ipairs(order) do
    index_of[u] = i
    local src = {}
    for j, s in ipairs(u.src) do src[j] = index_of[s] end
    mirror[i] = { op = u.op, src = src }
  end
  for run = 1, RUNS do
    local t0 = os.clock()
    local count = 0
    for i = 1, #order do
      if order[i].op == "ADD" then count = count + 1 end
    end
    walk_times[run] = os.clock() - t0
    t0 = os.clock()
    local seen = 0
    for i = 1, #mirror do
      local t = mirror[i]
      if t.op == "ADD" then seen = seen + 1 end
      seen = seen + #t.src
    end
    table_walk_times[run] = os.clock() - t0
    assert(count >= 0 and seen >= 0)
  end
end
local walk_time, table_walk_time = median(walk_times), median(table_walk_times)

local function row(name, seconds, visits, matches)
  local function rate(n) return n and ("%12.3g"):format(n / seconds) or ("%12s"):format("-") end
  print(("%-38s %9.2f %12.3g %s %s"):format(name, seconds * 1e3, nodes / seconds, rate(visits), rate(matches)))
end

print(("rewrite_bench: %d kernels' view-chain index arithmetic, %d nodes, simplified to %d; "
  .. "median of %d runs, CPU time")
  :format(kernels, nodes, simplified_nodes, RUNS))
print(("%-38s %9s %12s %12s %12s"):format("", "ms", "nodes/s", "visits/s", "matches/s"))
row("symbolic, native hot rewrites", native_time, nodes + native_matches, native_matches)
row("symbolic, Lua functions for natives", lua_time, nodes + lua_matches, lua_matches)
row("baseline: toposort to a Lua list", toposort_time)
row("baseline: Lua walk reading node.op", walk_time)
row("baseline: Lua table walk (mirror)", table_walk_time)
print(("matches: %d (native), %d (Lua); Lua rewrites cost %.2fx the native time; "
  .. "rewriting costs %.0fx a Lua table walk")
  :format(native_matches, lua_matches, lua_time / native_time, native_time / table_walk_time))
