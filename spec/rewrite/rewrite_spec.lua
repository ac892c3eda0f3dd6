-- spec/rewrite/rewrite_spec.lua — the rewrite engine: the pattern language (lua/tcl/pattern.lua),
-- the compiled C matcher (src/rewrite/matcher.c), graph_rewrite and substitute
-- (src/rewrite/graph_rewrite.c) and their Lua binding (src/rewrite/lua_rewrite.c):
-- what matches, in which order rules and nodes are tried, the loop guard, errors that name
-- the rule's file:line, a Lua error inside a rewrite, tracing and REWRITE_STATS.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local P = tcl.pattern
local q = helper.shell_quote

local THIS_FILE = "rewrite_spec%.lua"

--- The line this function is called from (for "file:line" expectations).
local function current_line()
  return debug.getinfo(2, "l").currentline
end

local function const(value, dtype) return tcl.uop("CONST", dtype or "index", nil, value) end
local function variable(name, lo, hi) return tcl.uop("DEFINE_VAR", "index", nil, { name, lo or 0, hi or 100 }) end
local function node(op, dtype, ...) return tcl.uop(op, dtype, { ... }) end

local a, b, c = variable "a", variable "b", variable "c"
local zero, one, two, three = const(0), const(1), const(2), const(3)

-- A node no test graph contains: a rewrite returning it reports "this pattern matched".
local MATCHED = const(-987654321)

--- The bindings when `pattern` matches `target` at its root, or nil when it does not.
local function match(pattern, target)
  local bound
  local set = P.rules { { pattern, function(bindings) bound = bindings; return MATCHED end } }
  if set:apply_once(target) == MATCHED then return bound end
  return nil
end

local function expect_match(pattern, target)
  local bound = match(pattern, target)
  assert(bound, "expected a match on\n" .. tostring(target))
  return bound
end

local function expect_no_match(pattern, target)
  assert.is_nil(match(pattern, target), "expected no match on\n" .. tostring(target))
end

-- Runs `code` (a Lua script) in a stock lua5.4 child that finds tcl in lua/ and <build>/lua.
local function run_lua_child(code, env)
  local script = os.tmpname()
  local f = assert(io.open(script, "wb"))
  f:write(code)
  f:close()
  local lua_path = helper.root .. "/lua/?.lua;" .. helper.root .. "/lua/?/init.lua"
  local lua_cpath = helper.build_dir .. "/lua/?.so"
  local status, stdout, stderr = helper.run((env or "") .. " LUA_PATH=" .. q(lua_path) .. " LUA_CPATH=" .. q(lua_cpath)
    .. " lua5.4 " .. q(script))
  os.remove(script)
  return status, stdout, stderr, script
end

describe("a pattern", function()
  local x, y = P.var "x", P.var "y"

  it("matches by one op", function()
    expect_match(P.op("NEG", { x }), node("NEG", "index", a))
    expect_no_match(P.op("NEG", { x }), node("ADD", "index", a, b))
  end)

  it("matches by a set of ops", function()
    local add_or_mul = P.op({ "ADD", "MUL" }, { x, y })
    expect_match(add_or_mul, node("ADD", "index", a, b))
    expect_match(add_or_mul, node("MUL", "index", a, b))
    expect_no_match(add_or_mul, node("SUB", "index", a, b))
  end)

  it("matches by a group name standing for its ops", function()
    local comparison = P.op("Comparison", { x, y })
    for _, op in ipairs { "CMPLT", "CMPNE", "CMPEQ" } do expect_match(comparison, node(op, "bool", a, b)) end
    expect_no_match(comparison, node("ADD", "index", a, b))
    local binary = P.op("Binary")
    expect_match(binary, node("MAX", "index", a, b))
    expect_no_match(binary, node("NEG", "index", a))
  end)

  it("matches any op when none is given", function()
    expect_match(x, a)
    expect_match(x, node("NEG", "index", a))
    expect_match(P.op(nil, { x, y }), node("SUB", "index", a, b))
  end)

  it("matches by one dtype and by a set of dtypes", function()
    local i32 = const(5, "int32")
    expect_match(P.var("x", "int32"), i32)
    expect_no_match(P.var("x", "int32"), const(5))
    local integer = P.var("x", { "int32", "index" })
    expect_match(integer, i32)
    expect_match(integer, const(5))
    expect_no_match(integer, const(5.0, "float32"))
    expect_match(P.op("ADD", { x, y }, { dtype = tcl.int32 }), node("ADD", "int32", i32, i32))
    expect_no_match(P.op("ADD", { x, y }, { dtype = "float32" }), node("ADD", "int32", i32, i32))
  end)

  it("matches numbers in arg by value: 0 matches CONST 0, 0.0 and -0.0", function()
    local is_zero = P.const(0)
    expect_match(is_zero, const(0))
    expect_match(is_zero, const(0, "int32"))
    expect_match(is_zero, const(0.0, "float32"))
    expect_match(is_zero, const(-0.0, "float32"))
    expect_no_match(is_zero, const(1))
    expect_no_match(is_zero, const(1e-300, "float64"))
    expect_match(P.const(2.0), const(2))
    expect_no_match(P.const(2.5), const(2))
    expect_match(P.op("CONST", nil, { arg = 7 }), const(7.0, "float32"))
  end)

  it("matches big integers in arg exactly", function()
    expect_match(P.const(math.maxinteger), const(math.maxinteger))
    expect_no_match(P.const(math.maxinteger), const(math.maxinteger - 1))
  end)

  it("matches tuple and string args", function()
    expect_match(P.op("DEFINE_VAR", nil, { arg = { "a", 0, 100 } }), a)
    expect_no_match(P.op("DEFINE_VAR", nil, { arg = { "a", 0, 99 } }), a)
    local gidx = tcl.uop("SPECIAL", "index", { const(32) }, "gidx0")
    expect_match(P.op("SPECIAL", { x }, { arg = "gidx0" }), gidx)
    expect_no_match(P.op("SPECIAL", { x }, { arg = "gidx1" }), gidx)
  end)

  it("matches sources in order unless told otherwise", function()
    local minus_zero = P.op("SUB", { x, 0 })
    local bound = expect_match(minus_zero, node("SUB", "index", a, zero))
    assert.are.equal(a, bound.x)
    expect_no_match(minus_zero, node("SUB", "index", zero, a))
    expect_no_match(minus_zero, node("SUB", "index", a, one))
  end)

  it("needs exactly as many sources as listed", function()
    expect_no_match(P.op("SINK", { x }), tcl.uop("SINK", nil, { a, b }))
    expect_match(P.op("SINK", { x, y }), tcl.uop("SINK", nil, { a, b }))
    expect_no_match(P.op("SINK", { x, y }, { order = "any" }), tcl.uop("SINK", nil, { a, b, c }))
  end)

  it("built with + matches a commutative op's sources in either order", function()
    local plus_zero = x + 0
    assert.are.equal(a, expect_match(plus_zero, node("ADD", "index", a, zero)).x)
    assert.are.equal(a, expect_match(plus_zero, node("ADD", "index", zero, a)).x)
    expect_no_match(plus_zero, node("ADD", "index", a, b))
    local times_one = x * 1
    assert.are.equal(b, expect_match(times_one, node("MUL", "index", one, b)).x)
  end)

  it("built with - keeps the order (SUB is not commutative)", function()
    expect_match(x - 0, node("SUB", "index", a, zero))
    expect_no_match(x - 0, node("SUB", "index", zero, a))
  end)

  it("with order = 'any' tries every order of three sources", function()
    local pat = P.op("SINK", { P.op("NEG", { x }), P.cvar "k", y }, { order = "any" })
    local neg_a = node("NEG", "index", a)
    for _, srcs in ipairs { { neg_a, two, b }, { b, neg_a, two }, { two, b, neg_a } } do
      local bound = expect_match(pat, tcl.uop("SINK", nil, srcs))
      assert.are.equal(a, bound.x)
      assert.are.equal(b, bound.y)
      assert.are.equal(two, bound.k)
    end
    expect_no_match(pat, tcl.uop("SINK", nil, { a, b, two }))
  end)

  it("with order = 'each' applies one pattern to every source, whatever their count", function()
    local all_index = P.op("SINK", P.var(nil, "index"))
    expect_match(all_index, tcl.uop("SINK", nil, {}))
    expect_match(all_index, tcl.uop("SINK", nil, { a }))
    expect_match(all_index, tcl.uop("SINK", nil, { a, b, c, one, two }))
    expect_no_match(all_index, tcl.uop("SINK", nil, { a, const(1.5, "float32"), b }))
    local all_const = P.op("SINK", { P.cvar() }, { order = "each" })
    expect_match(all_const, tcl.uop("SINK", nil, { one, two, three }))
    expect_no_match(all_const, tcl.uop("SINK", nil, { one, a }))
  end)

  it("binding a name twice needs the same node both times", function()
    local self_difference = x - x
    assert.are.equal(a, expect_match(self_difference, node("SUB", "index", a, a)).x)
    expect_no_match(self_difference, node("SUB", "index", a, b))
    -- a name bound in an 'each' pattern is the same node for every source
    local all_same = P.op("SINK", x)
    expect_match(all_same, tcl.uop("SINK", nil, { a, a, a }))
    expect_no_match(all_same, tcl.uop("SINK", nil, { a, a, b }))
  end)

  it("backtracks over orders until repeated names agree", function()
    local pat = P.op("ADD", { x, P.op("NEG", { x }) }, { order = "any" })
    assert.are.equal(a, expect_match(pat, node("ADD", "index", node("NEG", "index", a), a)).x)
    assert.are.equal(a, expect_match(pat, node("ADD", "index", a, node("NEG", "index", a))).x)
    expect_no_match(pat, node("ADD", "index", b, node("NEG", "index", a)))
  end)

  it("P.any matches when one alternative matches, binding that alternative's names", function()
    local const_or_negated = P.any(P.cvar "k", P.op("NEG", { P.cvar "k" }))
    assert.are.equal(two, expect_match(const_or_negated, two).k)
    assert.are.equal(two, expect_match(const_or_negated, node("NEG", "index", two)).k)
    expect_no_match(const_or_negated, node("NEG", "index", a))
    expect_no_match(const_or_negated, a)
    -- an alternative inside the sources, next to a repeated name
    local pat = P.op("SUB", { x, P.any(x, x + 0) })
    expect_match(pat, node("SUB", "index", a, a))
    expect_match(pat, node("SUB", "index", a, node("ADD", "index", zero, a)))
    expect_no_match(pat, node("SUB", "index", a, node("ADD", "index", zero, b)))
  end)

  it("cvar matches constants only, optionally of given dtypes", function()
    expect_match(P.cvar "k", const(3))
    expect_no_match(P.cvar "k", a)
    expect_match(P.cvar("k", "int32"), const(3, "int32"))
    expect_no_match(P.cvar("k", "int32"), const(3))
    assert.are.equal(three, expect_match(x * P.cvar "k", node("MUL", "index", three, a)).k)
  end)

  it("named() binds the matched node under a new name", function()
    local sum = P.op("ADD", { x, y }):named "sum"
    local target = node("ADD", "index", a, b)
    assert.are.equal(target, expect_match(sum, target).sum)
  end)

  it("the methods build the ops they name", function()
    expect_match(x:idiv(y), node("IDIV", "index", a, b))
    expect_match(x:cmod(y), node("MOD", "index", a, b))
    expect_match(x // y, node("FLOORDIV", "index", a, b))
    expect_match(x % y, node("FLOORMOD", "index", a, b))
    expect_match(x:max(y), node("MAX", "index", a, b))
    expect_match(x:lt(y), node("CMPLT", "bool", a, b))
    expect_no_match(x:lt(y), node("CMPNE", "bool", a, b))
    expect_match(P.var("g"):where(x, y), node("WHERE", "index", node("CMPLT", "bool", a, b), a, b))
    expect_match(x:cast("int32"), tcl.uop("CAST", "int32", { a }))
    expect_no_match(x:cast("int32"), tcl.uop("CAST", "int64", { a }))
    expect_match(-x, node("NEG", "index", a))
  end)
end)

describe("early rejection on the ops of a node's sources", function()
  -- P.any(p) matches what p matches but is never filed with required source ops (the
  -- matcher only pre-filters plain op patterns), so both must agree on every node.
  local x, y = P.var "x", P.var "y"
  local patterns = {
    x + 0, x * P.cvar "k", P.op("ADD", { P.op("NEG", { x }), x }, { order = "any" }),
    P.op("ADD", { P.op({ "NEG", "CONST" }, nil, { name = "n" }), y }), P.op("SUB", { P.cvar "k", P.cvar "k2" }),
    P.op("SINK", P.cvar()), P.op("WHERE", { P.op("CMPLT", { x, y }), x, y }), x - x,
  }
  local targets = {
    node("ADD", "index", a, zero), node("ADD", "index", zero, a), node("ADD", "index", a, b),
    node("MUL", "index", a, two), node("MUL", "index", a, b),
    node("ADD", "index", a, node("NEG", "index", a)), node("ADD", "index", node("NEG", "index", b), a),
    node("ADD", "index", node("NEG", "index", b), b), node("SUB", "index", one, two), node("SUB", "index", one, a),
    node("SUB", "index", a, a), tcl.uop("SINK", nil, { one, two }), tcl.uop("SINK", nil, { one, a }),
    node("WHERE", "index", node("CMPLT", "bool", a, b), a, b), node("WHERE", "index", node("CMPLT", "bool", a, b), b,
        a),
  }

  it("changes no result", function()
    local matched, rejected = 0, 0
    for pi, pat in ipairs(patterns) do
      for ti, target in ipairs(targets) do
        local plain, wrapped = match(pat, target), match(P.any(pat), target)
        assert.are.equal(plain ~= nil, wrapped ~= nil, ("pattern %d on target %d"):format(pi, ti))
        if plain then
          matched = matched + 1
          for name, bound in pairs(plain) do assert.are.equal(bound, wrapped[name]) end
        else
          rejected = rejected + 1
        end
      end
    end
    assert.is_true(matched >= 12 and rejected >= 12, ("too few cases: %d matched, %d not"):format(matched, rejected))
  end)
end)

describe("a rule set", function()
  local x = P.var "x"
  local first_result, second_result = const(1001), const(1002)

  it("tries its rules in order: the first rewrite that returns a node wins", function()
    local set = P.rules {
      { x + 0, function() return first_result end },
      { x + 0, function() return second_result end },
    }
    assert.are.equal(first_result, set:apply_once(node("ADD", "index", a, zero)))
  end)

  it("goes on to the next rule when a rewrite returns nil or the node itself", function()
    local target = node("ADD", "index", a, zero)
    local set = P.rules {
      { x + 0, function() return nil end },
      { x + 0, function() return target end },
      { x + 0, function() return second_result end },
    }
    assert.are.equal(second_result, set:apply_once(target))
  end)

  it("calls a rewrite again with the next binding when it returns nil", function()
    local seen = {}
    local set = P.rules { { P.var "p" + P.var "q", function(m)
      seen[#seen + 1] = m.p
      if m.p == b then return MATCHED end
    end } }
    assert.are.equal(MATCHED, set:apply_once(node("ADD", "index", a, b)))
    assert.are.same({ a, b }, seen)
  end)

  it("answers nil from apply_once when nothing matches", function()
    assert.is_nil(P.rules { { x + 0, "return_x" } }:apply_once(node("ADD", "index", a, one)))
  end)

  it("a + b tries a's rules before b's, shares the rules and copies nothing", function()
    local set_a = P.rules { { P.const(7), function() return first_result end }, { x * 1, "return_x" } }
    local set_b = P.rules { { P.const(7), function() return second_result end } }
    local a_then_b, b_then_a = set_a + set_b, set_b + set_a
    assert.are.equal(first_result, a_then_b:apply_once(const(7)))
    assert.are.equal(second_result, b_then_a:apply_once(const(7)))
    assert.are.equal(#set_a + #set_b, #a_then_b)
    assert.are.equal(3, #a_then_b)
    local listed, from_a, from_b = a_then_b:list(), set_a:list(), set_b:list()
    assert.is_true(rawequal(from_a[1], listed[1]))
    assert.is_true(rawequal(from_a[2], listed[2]))
    assert.is_true(rawequal(from_b[1], listed[3]))
    local nested = (set_a + set_b) + set_a
    assert.are.equal(5, #nested)
    assert.is_true(rawequal(from_a[1], nested:list()[4]))
    assert.has_error(function() local bad = set_a + 5; return bad end)
  end)

  it("runs native rewrites named in the rule file", function()
    assert.is_truthy(P.natives()[1])
    local set = P.rules { { x + 0, "return_x" } }
    assert.are.equal(a, set:apply_once(node("ADD", "index", zero, a)))
  end)
end)

describe("graph_rewrite", function()
  local x, y = P.var "x", P.var "y"

  -- A rule set that records every node it is tried on (rewriting nothing).
  local function visit_recorder(list)
    return P.rules { { P.var "node", function(m) list[#list + 1] = m.node; return nil end } }
  end

  it("visits every node once, each after its sources", function()
    local shared = node("MUL", "index", a, b)
    local root = node("ADD", "index", shared, node("NEG", "index", shared))
    local visits = {}
    assert.are.equal(root, visit_recorder(visits):rewrite(root))
    local position = {}
    for i, n in ipairs(visits) do
      assert.is_nil(position[n], "visited twice: " .. tostring(n))
      position[n] = i
    end
    assert.are.equal(#root:toposort(), #visits)
    for _, n in ipairs(visits) do
      for _, s in ipairs(n.src) do assert.is_true(position[s] < position[n]) end
    end
  end)

  it("rewrites a replacement again until no rule applies (a -> b -> c)", function()
    local set = P.rules {
      { P.const(1), function() return two end },
      { P.const(2), function() return three end },
    }
    assert.are.equal(three, set:rewrite(one))
    assert.are.equal(node("ADD", "index", a, three), set:rewrite(node("ADD", "index", a, one)))
  end)

  it("rewrites children before parents, so a parent's rule sees rewritten sources", function()
    local set = P.rules {
      { P.const(1), function() return two end },
      { x + 2, "return_x" },
    }
    assert.are.equal(a, set:rewrite(node("ADD", "index", a, one)))
    assert.are.equal(b, set:rewrite(node("MUL", "index", b, node("ADD", "index", a, one))).src[1])
  end)

  it("rewrites the new nodes inside a replacement", function()
    local set = P.rules {
      { P.op("NEG", { x }), function(m) return node("SUB", "index", one, m.x) end },
      { P.const(1), function() return two end },
      { P.const(2), function() return three end },
    }
    assert.are.equal(node("SUB", "index", three, a), set:rewrite(node("NEG", "index", a)))
  end)

  it("returns the root itself when nothing applies", function()
    local root = node("ADD", "index", a, b)
    assert.are.equal(root, P.rules { { x * 1, "return_x" } }:rewrite(root))
  end)

  it("hands the context value to every rewrite, children-first and parents-first", function()
    local context = { calls = 0 }
    local received = {}
    local function note(_, ctx) received[#received + 1] = ctx; return nil end
    local set = P.rules { { P.var(), note } }
    set:rewrite(node("ADD", "index", a, b), { ctx = context, parents_first = P.rules { { P.var(), note } } })
    assert.are.equal(6, #received) -- three nodes, each seen by both sets
    for _, ctx in ipairs(received) do assert.is_true(rawequal(context, ctx)) end
    received = {}
    set:apply_once(a, context)
    assert.is_true(rawequal(context, received[1]))
    received = {}
    P.graph_rewrite(a, set, { ctx = context })
    assert.is_true(rawequal(context, received[1]))
  end)

  it("applies the parents-first set before descending", function()
    local neg_of_a = node("NEG", "index", a)
    local root = node("ADD", "index", neg_of_a, b)
    local drop_neg = P.rules { { P.op("NEG", { x }), "return_x" } }
    local to_sub = P.rules { { P.op("ADD", { P.op("NEG", { x }), y }), function(m)
      return node("SUB", "index", m.y, m.x)
    end } }
    -- parents first: ADD(NEG a, b) is seen whole and becomes SUB(b, a)
    assert.are.equal(node("SUB", "index", b, a), drop_neg:rewrite(root, { parents_first = to_sub }))
    -- children first only: NEG a is gone before ADD is tried
    assert.are.equal(node("ADD", "index", a, b), (drop_neg + to_sub):rewrite(root))
    -- a parents-first set alone
    assert.are.equal(node("SUB", "index", b, a), P.graph_rewrite(root, nil, { parents_first = to_sub }))
  end)

  it("does not descend into a node that the parents-first set replaced", function()
    local hidden = node("NEG", "index", c)
    local root = node("ADD", "index", a, hidden)
    local visits = {}
    local keep_left = P.rules { { P.op("ADD", { x, y }), function(m) return node("MUL", "index", m.x, m.x) end } }
    local result = visit_recorder(visits):rewrite(root, { parents_first = keep_left })
    assert.are.equal(node("MUL", "index", a, a), result)
    local seen = {}
    for _, n in ipairs(visits) do seen[n] = true end
    assert.is_true(seen[a] and seen[result])
    assert.is_nil(seen[root])
    assert.is_nil(seen[hidden])
    assert.is_nil(seen[c])
  end)

  it("lets a rewrite run a rewrite of its own", function()
    local inner = P.rules { { x * 1, "return_x" } }
    local outer = P.rules { { P.op("NEG", { x }), function(m, ctx)
      ctx.inner_calls = ctx.inner_calls + 1
      return node("SUB", "index", zero, inner:rewrite(m.x))
    end } }
    local context = { inner_calls = 0 }
    local root = node("ADD", "index", node("NEG", "index", node("MUL", "index", a, one)), node("NEG", "index", b))
    local result = outer:rewrite(root, { ctx = context })
    assert.are.equal(node("ADD", "index", node("SUB", "index", zero, a), node("SUB", "index", zero, b)), result)
    assert.are.equal(2, context.inner_calls)
    -- an error in the inner rewrite fails the outer one, naming both
    local failing_inner = P.rules { { x * 1, function() error("inner failure") end } }
    local nesting = P.rules { { P.op("NEG", { x }), function(m) return failing_inner:rewrite(m.x) end } }
    local ok, err = pcall(nesting.rewrite, nesting, root)
    assert.is_false(ok)
    assert.matches("inner failure", err)
  end)

  it("keeps the nodes it works on alive when a rewrite collects garbage", function()
    collectgarbage(); collectgarbage()
    local baseline = tcl.live_nodes()
    -- only the root is held by Lua; every rewrite builds fresh nodes and runs a full collection
    local root = variable "gc_leaf"
    for i = 1, 300 do root = node("ADD", "index", node("MUL", "index", root, const(7000 + i)), one) end
    local set = P.rules { { x * P.cvar "k", function(m)
      collectgarbage()
      return node("SUB", "index", m.x, node("NEG", "index", m.k))
    end } }
    local result = set:rewrite(root)
    -- ADD(SUB(ADD(SUB(... gc_leaf ..., NEG 7001), 1), NEG 7300), 1)
    local n, steps = result, 0
    while n.op == "ADD" do
      local product = n:source(1)
      assert.are.equal("SUB", product.op)
      assert.are.equal(const(7300 - steps), product:source(2):source(1))
      n, steps = product:source(1), steps + 1
    end
    assert.are.equal(300, steps)
    assert.are.equal(variable "gc_leaf", n)
    root, result, n = nil, nil, nil -- luacheck: ignore 311 (drops the reference for the collector)
    collectgarbage(); collectgarbage()
    assert.are.equal(baseline, tcl.live_nodes())
  end)

  it("applies the parents-first set to a fixed point", function()
    local chain = P.rules {
      { P.const(1), function() return two end },
      { P.const(2), function() return three end },
    }
    assert.are.equal(three, P.graph_rewrite(one, nil, { parents_first = chain }))
  end)

  it("rewrites a chain over 1,000,000 nodes deep without overflowing the C stack", function()
    local leaf, other_leaf = variable "deep_leaf", variable "other_leaf"
    collectgarbage(); collectgarbage()
    local live_before = tcl.live_nodes()
    -- ADD(...ADD(ADD(leaf, 0), 0)..., 0): 1000 links built in Lua, then doubled ten times by
    -- putting the chain under itself (substitute is C, much faster than a million calls)
    local chain = leaf
    for _ = 1, 1000 do chain = tcl.uop("ADD", "index", { chain, zero }) end
    for _ = 1, 10 do chain = P.substitute(chain, { [leaf] = chain }) end
    collectgarbage(); collectgarbage()
    assert.are.equal(1000 * 1024, tcl.live_nodes() - live_before) -- one new node per link
    -- (plain asserts: luassert would print a million-node tree on failure)
    assert(P.rules { { x + 0, "return_x" } }:rewrite(chain) == leaf, "the chain did not collapse to its leaf")
    -- every node rebuilt: the leaf changes
    local renamed = P.rules { { P.op("DEFINE_VAR", nil, { arg = { "deep_leaf", 0, 100 } }), function()
      return other_leaf
    end } }:rewrite(chain)
    assert(renamed ~= chain, "the leaf was not renamed")
    assert(P.substitute(renamed, { [other_leaf] = leaf }) == chain, "renaming back does not give the chain")
    chain, renamed = nil, nil -- luacheck: ignore 311 (drops the reference for the collector)
  end)
end)

-- In a describe block: records the live nodes before each test; the function it returns checks
-- that a test left no node behind (failed rewrites must release everything they built).
local function leak_guard()
  local baseline
  before_each(function()
    collectgarbage(); collectgarbage()
    baseline = tcl.live_nodes()
  end)
  return function()
    collectgarbage(); collectgarbage()
    assert.are.equal(baseline, tcl.live_nodes())
  end
end

describe("the loop guard", function()
  local x = P.var "x"
  local assert_no_leak = leak_guard()

  it("stops a rule that never settles, naming it", function()
    local line = current_line() + 1
    local count_up = P.rules { { P.cvar "k", function(m) return const(m.k.arg + 1) end } }
    local ok, err = pcall(count_up.rewrite, count_up, node("ADD", "index", a, one), { max_chain = 50 })
    assert.is_false(ok)
    assert.matches("does not settle", err)
    assert.matches(THIS_FILE .. ":" .. line, err)
    assert_no_leak()
  end)

  it("stops a never-settling rule at the default limit too", function()
    local count_up = P.rules { { P.cvar "k", function(m) return const(m.k.arg + 1) end } }
    local ok, err = pcall(count_up.rewrite, count_up, one)
    assert.is_false(ok)
    assert.matches("does not settle", err)
  end)

  it("stops two rules undoing each other, naming both", function()
    local line = current_line() + 2
    local flip_flop = P.rules {
      { P.op("NEG", { x }), function(m) return node("SUB", "index", zero, m.x) end },
      { P.op("SUB", { 0, x }), function(m) return node("NEG", "index", m.x) end },
    }
    local ok, err = pcall(flip_flop.rewrite, flip_flop, node("MUL", "index", node("NEG", "index", a), b))
    assert.is_false(ok)
    assert.matches(THIS_FILE .. ":" .. line .. "[^%d]", err .. " ")
    assert.matches(THIS_FILE .. ":" .. (line + 1) .. "[^%d]", err .. " ")
    assert_no_leak()
  end)

  it("stops a rule whose replacement contains the node itself", function()
    local line = current_line() + 1
    local wrap = P.rules { { P.op("DEFINE_VAR"), function() return node("ADD", "index", a, zero) end } }
    local ok, err = pcall(wrap.rewrite, wrap, node("NEG", "index", a))
    assert.is_false(ok)
    assert.matches("loop", err)
    assert.matches(THIS_FILE .. ":" .. line, err)
    assert_no_leak()
  end)

  it("stops parents-first rules that never settle", function()
    local line = current_line() + 1
    local count_up = P.rules { { P.cvar "k", function(m) return const(m.k.arg + 1) end } }
    local ok, err = pcall(P.graph_rewrite, one, nil, { parents_first = count_up, max_chain = 20 })
    assert.is_false(ok)
    assert.matches("parents%-first rules do not settle", err)
    assert.matches(THIS_FILE .. ":" .. line, err)
    assert_no_leak()
  end)

  it("allows max_chain successive replacements of one node and no more", function()
    local chain = P.rules {
      { P.const(1), function() return two end },
      { P.const(2), function() return three end },
    }
    assert.are.equal(three, chain:rewrite(one, { max_chain = 2 }))
    local ok, err = pcall(chain.rewrite, chain, one, { max_chain = 1 })
    assert.is_false(ok)
    assert.matches("does not settle", err)
  end)

  it("rejects a max_chain out of range", function()
    local set = P.rules { { x + 0, "return_x" } }
    assert.has_error(function() set:rewrite(a, { max_chain = 0 }) end)
  end)
end)

describe("malformed rules", function()
  local x = P.var "x"

  -- Calls f, expecting an error whose message contains `text` and names this file at `line`.
  local function expect_error_at(line, text, f)
    local ok, err = pcall(f)
    assert.is_false(ok, "no error")
    err = tostring(err)
    assert.matches(text, err, 1, true)
    assert.matches(THIS_FILE .. ":" .. line .. "[^%d]", err .. " ")
  end

  it("with an unknown op name the file and line", function()
    local line = current_line() + 1
    expect_error_at(line, "unknown op 'NO_SUCH_OP'", function() local p = P.op("NO_SUCH_OP", { x }); return p end)
    line = current_line() + 1
    expect_error_at(line, "unknown op", function() local p = P.op({ "ADD", "NO_SUCH_OP" }, { x }); return p end)
  end)

  it("with an unknown dtype name the file and line", function()
    local line = current_line() + 1
    expect_error_at(line, "unknown dtype 'int33'", function() local p = P.var("x", "int33"); return p end)
    line = current_line() + 1
    expect_error_at(line, "unknown dtype", function() local p = P.op("ADD", { x, x }, { dtype = "nope" }); return p end)
  end)

  it("with a bad source order name the file and line", function()
    local line = current_line() + 1
    expect_error_at(line, "order", function() local p = P.op("ADD", { x, x }, { order = "sideways" }); return p end)
  end)

  it("with a non-pattern name the file and line", function()
    local line = current_line() + 1
    expect_error_at(line, "not a pattern", function() local s = P.rules { { 42, "return_x" } }; return s end)
    line = current_line() + 1
    expect_error_at(line, "pattern expected", function() local p = x + "text"; return p end)
  end)

  it("with a rewrite that is a number name the file and line", function()
    local line = current_line() + 1
    expect_error_at(line, "rewrite is a number", function() local s = P.rules { { x + 0, 7 } }; return s end)
  end)

  it("naming an unknown native rewrite name the file and line", function()
    local line = current_line() + 1
    expect_error_at(line, "no_such_native", function() local s = P.rules { { x + 0, "no_such_native" } }; return s end)
  end)

  it("with too many sources in any order name the file and line", function()
    local v = {}
    for i = 1, 7 do v[i] = P.var("v" .. i) end
    local line = current_line() + 1
    expect_error_at(line, "at most 6", function() local s = P.rules { { P.op("SINK", v, { order = "any" }),
        "return_x" } }; return s end)
  end)
end)

describe("a rewrite that fails", function()
  local x = P.var "x"
  local assert_no_leak = leak_guard()

  it("by returning a wrong type is an error naming the rule", function()
    local line = current_line() + 1
    local bad = P.rules { { x + 0, function() return 42 end } }
    local ok, err = pcall(bad.rewrite, bad, node("MUL", "index", node("ADD", "index", a, zero), b))
    assert.is_false(ok)
    assert.matches(THIS_FILE .. ":" .. line, err)
    assert.matches("returned a number", err)
    ok, err = pcall(bad.apply_once, bad, node("ADD", "index", a, zero))
    assert.is_false(ok)
    assert.matches(THIS_FILE .. ":" .. line, err)
    assert_no_leak()
  end)

  it("by a Lua error surfaces with its message and traceback and leaves the state usable", function()
    local line = current_line() + 1
    local failing = P.rules { { x + 0, function() error("deliberate failure in a rewrite") end } }
    local fresh = {}
    for i = 1, 50 do fresh[i] = node("ADD", "index", const(5000 + i), zero) end
    local root = tcl.uop("SINK", nil, fresh)
    fresh = nil -- luacheck: ignore 311 (drops the reference for the collector)
    local ok, err = pcall(failing.rewrite, failing, root)
    assert.is_false(ok)
    assert.matches("deliberate failure in a rewrite", err, 1, true)
    assert.matches("stack traceback", err, 1, true)
    assert.matches(THIS_FILE .. ":" .. line, err)
    -- parents-first rules and apply_once fail the same way
    ok, err = pcall(P.graph_rewrite, root, nil, { parents_first = failing })
    assert.is_false(ok)
    assert.matches("deliberate failure", err)
    ok, err = pcall(failing.apply_once, failing, node("ADD", "index", a, zero))
    assert.is_false(ok)
    assert.matches("deliberate failure", err)
    -- the state still works
    local working = P.rules { { x + 0, "return_x" } }
    local cleaned = working:rewrite(root)
    assert.are.equal(const(5001), cleaned:source(1))
    root, cleaned = nil, nil -- luacheck: ignore 311 (drops the reference for the collector)
    assert_no_leak()
  end)

  -- issue 33: a replacement of another dtype was caught later (or not at all) without the rule
  it("by changing the dtype of the node it replaces is an error naming the rule and both dtypes", function()
    local line = current_line() + 1
    local retyped = P.rules { { x + 0, function(m) return tcl.uop("CAST", "float32", { m.x }) end } }
    local root = node("MUL", "index", node("ADD", "index", a, zero), b)
    local expected = "graph_rewrite: the rule at .*" .. THIS_FILE .. ":" .. line .. " rewrote a ADD node of dtype "
      .. "index into a CAST node of dtype float32; a rewrite must keep the dtype of the node it replaces"
    local ok, err = pcall(retyped.rewrite, retyped, root)
    assert.is_false(ok)
    assert.matches(expected, err)
    ok, err = pcall(P.graph_rewrite, root, nil, { parents_first = retyped })
    assert.is_false(ok)
    assert.matches(expected, err)
    -- a CAST above the node, its replacement keeping the dtype, is the way to change one
    local cast_above = P.rules { { x + 0, function(m)
      return tcl.uop("CAST", "index", { tcl.uop("CAST", "int32", { m.x }) })
    end } }
    assert.are.equal("index", cast_above:rewrite(root):source(1).dtype.name)
    root = nil -- luacheck: ignore 311 (drops the reference for the collector)
    assert_no_leak()
  end)

  it("with an error object that is not a string still reports the rule", function()
    local line = current_line() + 1
    local failing = P.rules { { x + 0, function() error({ code = 1 }) end } }
    local ok, err = pcall(failing.rewrite, failing, node("ADD", "index", a, zero))
    assert.is_false(ok)
    assert.matches(THIS_FILE .. ":" .. line, err)
    assert.matches("table", err)
  end)

  it("inside a deep graph frees everything it built", function()
    local count = 0
    local failing_late = P.rules { { x + 0, function()
      count = count + 1
      if count == 500 then error("late failure") end
      return node("MUL", "index", a, const(count))
    end } }
    local chain = a
    for i = 1, 2000 do chain = node("ADD", "index", chain, i % 2 == 0 and zero or const(i)) end
    local ok, err = pcall(failing_late.rewrite, failing_late, chain)
    assert.is_false(ok)
    assert.matches("late failure", err)
    chain = nil -- luacheck: ignore 311 (drops the reference for the collector)
    assert_no_leak()
  end)
end)

describe("substitute", function()
  it("replaces a leaf throughout a deep graph", function()
    local depth = 200000
    local chain = a
    for i = 1, depth do chain = node(i % 2 == 0 and "ADD" or "MUL", "index", chain, one) end
    local replaced = P.substitute(chain, { [a] = b })
    local n, steps = replaced, 0
    while n.op ~= "DEFINE_VAR" do n = n:source(1); steps = steps + 1 end
    assert.are.equal(depth, steps)
    assert.are.equal(b, n)
    assert.are.equal(replaced.op, chain.op)
  end)

  it("keeps shared nodes shared", function()
    local shared = node("MUL", "index", a, c)
    local root = node("ADD", "index", shared, node("NEG", "index", shared))
    local result = P.substitute(root, { [a] = b })
    local new_shared = node("MUL", "index", b, c)
    assert.are.equal(node("ADD", "index", new_shared, node("NEG", "index", new_shared)), result)
    assert.are.equal(#root:toposort(), #result:toposort())
  end)

  it("does not substitute inside a replacement, nor under a replaced node", function()
    local a_plus_one = node("ADD", "index", a, one)
    -- the replacement contains a key: it is inserted as it is
    assert.are.equal(node("NEG", "index", a_plus_one), P.substitute(node("NEG", "index", a), { [a] = a_plus_one }))
    -- a key replaced as a whole is not looked into
    local inner = node("MUL", "index", a, c)
    local root = node("ADD", "index", inner, a)
    local result = P.substitute(root, { [inner] = node("NEG", "index", a), [a] = b })
    assert.are.equal(node("ADD", "index", node("NEG", "index", a), b), result)
  end)

  it("returns the root itself when no key occurs", function()
    local root = node("ADD", "index", a, b)
    assert.are.equal(root, P.substitute(root, { [c] = a }))
    assert.are.equal(root, P.substitute(root, {}))
  end)

  it("rejects a map that is not UOp to UOp", function()
    assert.has_error(function() P.substitute(a, { [a] = 5 }) end)
    assert.has_error(function() P.substitute(a, { x = b }) end)
  end)
end)

describe("tracing", function()
  local x = P.var "x"

  it("records each pass with before/after and every match with its rule", function()
    local line = current_line() + 2
    local set = P.rules {
      { P.const(1), function() return two end },
      { P.const(2), function() return three end },
      { x + 3, "return_x" },
    }
    local root = node("ADD", "index", a, one)
    P.clear_traces()
    assert.are.equal(0, #P.traces())
    local result = set:rewrite(root, { trace = true, name = "count up" })
    assert.are.equal(a, result)
    local traces = P.traces()
    assert.are.equal(1, #traces)
    local pass = traces[1]
    assert.are.equal("count up", pass.name)
    assert.are.equal(root, pass.before)
    assert.are.equal(a, pass.after)
    local matches = pass.matches
    assert.are.equal(3, #matches)
    assert.matches(THIS_FILE .. ":" .. line .. "$", matches[1].rule)
    assert.are.equal(one, matches[1].before)
    assert.are.equal(two, matches[1].after)
    assert.matches(THIS_FILE .. ":" .. (line + 1) .. "$", matches[2].rule)
    assert.are.equal(two, matches[2].before)
    assert.are.equal(three, matches[2].after)
    assert.matches(THIS_FILE .. ":" .. (line + 2) .. "$", matches[3].rule)
    assert.are.equal(node("ADD", "index", a, three), matches[3].before)
    assert.are.equal(a, matches[3].after)
    -- a second pass is appended; clear_traces empties the list
    set:rewrite(node("MUL", "index", one, b), { trace = true, name = "second" })
    assert.are.equal(2, #P.traces())
    assert.are.equal("second", P.traces()[2].name)
    P.clear_traces()
    assert.are.equal(0, #P.traces())
  end)

  it("records nothing when not asked", function()
    if tcl.env.REWRITE_TRACE then return end -- TCL_REWRITE_TRACE (or its old name) set for the run
    P.clear_traces()
    P.rules { { x + 0, "return_x" } }:rewrite(node("ADD", "index", a, zero))
    assert.are.equal(0, #P.traces())
  end)

  it("records every pass under REWRITE_TRACE=1", function()
    local status, stdout, stderr = run_lua_child([[
local tcl = require "tcl"
local P = tcl.pattern
local a = tcl.uop("DEFINE_VAR", "index", nil, { "a", 0, 9 })
local root = tcl.uop("ADD", "index", { a, tcl.uop("CONST", "index", nil, 0) })
local set = P.rules { { P.var "x" + 0, "return_x" } }
set:rewrite(root, { name = "first" })
set:rewrite(root)
local t = P.traces()
print(#t, t[1].name, #t[1].matches, t[1].after == a)
]], "env -u REWRITE_TRACE TCL_REWRITE_TRACE=1")
    assert.are.equal(0, status, stderr)
    assert.are.equal("2\tfirst\t1\ttrue\n", stdout)
  end)
end)

describe("REWRITE_STATS=1", function()
  it("prints every rule tried with its file:line and match count at exit", function()
    local status, stdout, stderr, script = run_lua_child([[
local tcl = require "tcl"
local P = tcl.pattern
local x = P.var "x"
local set = P.rules {
  { x + 0, "return_x" },
  { x * 1, function(m) return m.x end },
}
local zero, one = tcl.uop("CONST", "index", nil, 0), tcl.uop("CONST", "index", nil, 1)
local terms, plain = {}, {}
for i = 1, 10 do
  plain[i] = tcl.uop("DEFINE_VAR", "index", nil, { "v" .. i, 0, 9 })
  terms[i] = tcl.uop(i <= 7 and "ADD" or "MUL", "index", { plain[i], i <= 7 and zero or one })
end
assert(set:rewrite(tcl.uop("SINK", nil, terms)) == tcl.uop("SINK", nil, plain))
local matched = 0
for _, row in ipairs(P.stats()) do matched = matched + row.matches end
print("stats", matched)
]], "env -u REWRITE_STATS TCL_REWRITE_STATS=1")
    assert.are.equal(0, status, stderr)
    assert.are.equal("stats\t10\n", stdout)
    local counts = {}
    for ms, matches, attempts, location in stderr:gmatch("\n%s*([%d.]+)%s+(%d+)%s+(%d+)%s+(%S+)") do
      assert.is_truthy(tonumber(ms))
      assert.is_true(tonumber(attempts) >= tonumber(matches))
      counts[location] = tonumber(matches)
    end
    local name = script:match("[^/]*$")
    local add_count, mul_count
    for location, matches in pairs(counts) do
      if location:find(name .. ":5", 1, true) then add_count = matches end
      if location:find(name .. ":6", 1, true) then mul_count = matches end
    end
    assert.are.equal(7, add_count, stderr)
    assert.are.equal(3, mul_count, stderr)
    assert.matches("REWRITE_STATS", stderr)
  end)
end)
