-- spec/core/uop_spec.lua — UOp nodes as Lua sees them (module tcl, binding tcl.core): identity,
-- `==` and table keys, every field making a difference, weak freeing, args of every kind,
-- float constants by bit pattern, tree printing, immutability, error messages, op groups,
-- toposort, and the content hash across separate lua5.4 processes.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local q = helper.shell_quote

local function const(dtype, value) return tcl.uop("CONST", dtype, nil, value) end

-- Full collections until the live count stops changing (finalizers free nodes, which can
-- make more userdata garbage).
local function collect()
  collectgarbage()
  collectgarbage()
end

-- The error message of calling f(...), or fails if f does not raise one.
local error_of = helper.error_of

describe("a UOp", function()
  it("built twice is the same node: rawequal, ==, and the same table key", function()
    local x = const("int32", 3)
    local a = tcl.uop("ADD", "int32", { x, x }, { 1, 2 }, "t")
    local b = tcl.uop("ADD", tcl.int32, { const("int32", 3), x }, { 1, 2 }, "t")
    assert.is_true(rawequal(a, b))
    assert.is_true(a == b)
    local t = { [a] = "first" }
    t[b] = "second"
    local keys = 0
    for _ in pairs(t) do keys = keys + 1 end
    assert.are.equal(1, keys)
    assert.are.equal("second", t[a])
    assert.are.equal(a.id, b.id)
  end)

  it("reads back op, dtype, sources, arg and tag", function()
    local x, y = const("float32", 1.5), const("float32", 2.5)
    local n = tcl.uop("WHERE", "float32", { const("bool", true), x, y }, 7, { "tag", 1 })
    assert.are.equal("WHERE", n.op)
    assert.is_true(rawequal(tcl.float32, n.dtype))
    assert.are.equal("float32", n.dtype.name)
    assert.are.equal(3, n.nsrc)
    assert.are.equal(3, #n.src)
    assert.is_true(rawequal(n.src[2], x) and rawequal(n:source(3), y))
    assert.is_true(rawequal(n:source(1), n.src[1]))
    assert.are.equal(7, n.arg)
    assert.are.same({ "tag", 1 }, n.tag)
    assert.is_nil(x.tag)
    assert.are.equal(0, x.nsrc)
    assert.are.same({}, x.src)
    assert.matches("^%x+$", n.content_hash)
    assert.are.equal(16, #n.content_hash)
    assert.are.equal("integer", math.type(n.id))
    -- a missing dtype is void
    assert.are.equal("void", tcl.uop("SINK", nil, { x }).dtype.name)
  end)

  it("differs when any one field differs", function()
    local x, y, z = const("int32", 10), const("int32", 20), const("int32", 30)
    local variants = {
      tcl.uop("ADD", "int32", { x, y }, 5, 1), -- the base
      tcl.uop("SUB", "int32", { x, y }, 5, 1), -- op
      tcl.uop("ADD", "int64", { x, y }, 5, 1), -- dtype
      tcl.uop("ADD", "int32", { x, z }, 5, 1), -- one source
      tcl.uop("ADD", "int32", { y, x }, 5, 1), -- source order
      tcl.uop("ADD", "int32", { x, y }, 6, 1), -- arg
      tcl.uop("ADD", "int32", { x, y }, nil, 1), -- no arg
      tcl.uop("ADD", "int32", { x, y }, 5, 2), -- tag
      tcl.uop("ADD", "int32", { x, y }, 5, nil), -- no tag
      tcl.uop("ADD", "int32", { x, y }, 1, 5), -- arg and tag swapped
      tcl.uop("ADD", "int32", { x, y }, 5.0, 1), -- float arg equal in value
      tcl.uop("SINK", "int32", { x, y, z }, 5, 1), -- one source more
      tcl.uop("SINK", "int32", { x, y }, 5, 1),
    }
    for i = 1, #variants do
      for j = i + 1, #variants do
        assert.is_false(rawequal(variants[i], variants[j]), "variants " .. i .. " and " .. j)
        assert.are_not.equal(variants[i].content_hash, variants[j].content_hash)
      end
    end
    assert.is_true(rawequal(variants[1], tcl.uop("ADD", "int32", { x, y }, 5, 1)))
  end)

  it("keeps args of every kind apart, also ones that are easy to confuse", function()
    local args = { false, true, 0, 1, 7, -7, 0.5, 1.0, 7.0, "", "7", "a", "ab", "a\0b", "ab\0",
      {}, { 7 }, { 1, 2 }, { 2, 1 }, { 1, 2, 3 }, { 7.0 }, { "7" }, { { 7 } }, { 1, { 2, 3 } },
      { { 1, 2 }, 3 }, { 1, { 2, 4 } }, { 1, { 2, 3 }, "" }, tcl.int32, tcl.int64, { tcl.int32 },
      math.maxinteger, math.mininteger }
    local seen = { [const("int32", nil)] = "none" }
    for i, value in ipairs(args) do
      local as_arg = tcl.uop("CONST", "int32", nil, value)
      local as_tag = tcl.uop("CONST", "int32", nil, "tagged", value)
      assert.is_nil(seen[as_arg], "arg #" .. i .. " collides with " .. tostring(seen[as_arg]))
      seen[as_arg] = "arg #" .. i
      assert.is_nil(seen[as_tag], "tag #" .. i .. " collides with " .. tostring(seen[as_tag]))
      seen[as_tag] = "tag #" .. i
    end
  end)

  it("round-trips args and tags of every kind", function()
    local values = { true, false, 42, -7, 0, math.maxinteger, math.mininteger, 1.5, -2.25, 1e300,
      "text", "", "with\0nul", {}, { 1, 2, 3 }, { -1 }, { "a", 1, true }, { 1, { 2, 3 }, "x" },
      { 1.5, 2 }, { {}, { {} } }, { tcl.int32, 3 } }
    for i, value in ipairs(values) do
      local n = tcl.uop("CONST", "int32", nil, value, value)
      assert.are.same(value, n.arg, "arg #" .. i)
      assert.are.same(value, n.tag, "tag #" .. i)
      if type(value) == "number" then assert.are.equal(math.type(value), math.type(n.arg)) end
    end
    assert.are.equal("float", math.type(const("float32", 1.0).arg))
    assert.are.equal("integer", math.type(const("float32", 1).arg))
    assert.is_true(rawequal(tcl.float16, tcl.uop("CAST", "float32", { const("float16", 1.0) }, tcl.float16).arg))
    assert.is_true(rawequal(tcl.int32, const("int32", { tcl.int32, 3 }).arg[1]))
    assert.is_nil(const("int32", nil).arg)
  end)

  it("interns float constants by bit pattern: 0.0 and -0.0 differ, NaN equals NaN", function()
    local zero = 0.0
    local positive_zero, negative_zero = const("float32", zero), const("float32", -zero)
    assert.is_false(rawequal(positive_zero, negative_zero))
    assert.are.equal(-math.huge, 1 / negative_zero.arg)
    assert.are.equal(math.huge, 1 / positive_zero.arg)
    assert.is_true(rawequal(negative_zero, const("float32", -0.0)))
    local function nan() return zero / zero end
    local a, b = const("float32", nan()), const("float32", nan())
    assert.is_true(rawequal(a, b))
    assert.is_true(a.arg ~= a.arg) -- still a NaN
    assert.are_not.equal(positive_zero.content_hash, negative_zero.content_hash)
    assert.is_false(rawequal(const("float32", math.huge), const("float32", -math.huge)))
    assert.is_false(rawequal(const("float32", 1), const("float32", 1.0)))
  end)

  it("is freed when nothing refers to it any more", function()
    collect()
    local base = tcl.live_nodes()
    local function build()
      local chain = const("float32", 123.25)
      for _ = 1, 10000 do chain = tcl.uop("NEG", "float32", { chain }) end
      local wide = {}
      -- (values no other spec keeps alive, so every node here is new)
      for i = 1, 1000 do wide[i] = tcl.uop("ADD", "int64", { const("int64", 9000000 + i), const("int64",
          7000000 + i) }) end
      local sink = tcl.uop("SINK", nil, wide)
      return tcl.live_nodes() - base, chain.nsrc + sink.nsrc
    end
    local made = build()
    assert.are.equal(10001 + 3000 + 1, made)
    collect()
    assert.are.equal(base, tcl.live_nodes())
  end)

  it("stays alive while a node above it does, though its userdata was collected", function()
    collect()
    local base = tcl.live_nodes()
    local top = tcl.uop("EXP2", "float32", { tcl.uop("NEG", "float32", { const("float32", 77.5) }) })
    collect()
    assert.are.equal(base + 3, tcl.live_nodes())
    assert.are.equal(77.5, top:source(1):source(1).arg)
    top = nil -- luacheck: ignore 311 (drops the reference for the collector)
    collect()
    assert.are.equal(base, tcl.live_nodes())
  end)

  it("prints as a tree in which a shared node is printed once and referred to afterwards", function()
    local x = const("float32", 2.0)
    local y = tcl.uop("NEG", "float32", { x })
    local z = tcl.uop("ADD", "float32", { y, x }, nil, "t")
    local top = tcl.uop("SINK", nil, { z, y }, { 1, "a" })
    assert.are.equal(table.concat({
      '%1 = SINK void arg=(1, "a")',
      '  %2 = ADD float32 tag="t"',
      "    %3 = NEG float32",
      "      %4 = CONST float32 arg=2.0",
      "    %4  (shared, above)",
      "  %3  (shared, above)",
    }, "\n"), tostring(top))
    assert.are.equal("%1 = CONST int32 arg=5", tostring(const("int32", 5)))
  end)

  it("is immutable", function()
    local x = const("int32", 1)
    assert.matches("UOp is immutable", error_of(function() x.op = "ADD" end), 1, true)
    assert.matches("UOp is immutable", error_of(function() x.anything = 1 end), 1, true)
    assert.are.equal("CONST", x.op)
    assert.is_nil(rawget(tcl.core.uop_methods, "anything"))
  end)

  it("reports bad construction with a clear message", function()
    local x = const("int32", 1)
    assert.matches("unknown op 'FOO'", error_of(tcl.uop, "FOO", "int32"), 1, true)
    assert.matches("op id out of range", error_of(tcl.uop, 100000, "int32"), 1, true)
    assert.matches("unknown dtype 'float33'", error_of(tcl.uop, "CONST", "float33"), 1, true)
    assert.matches("ADD takes 2 source(s), got 1", error_of(tcl.uop, "ADD", "int32", { x }), 1, true)
    assert.matches("CONST takes 0 source(s), got 1", error_of(tcl.uop, "CONST", "int32", { x }), 1, true)
    assert.matches("source 2 of ADD is a number, not a UOp", error_of(tcl.uop, "ADD", "int32", { x, 5 }), 1, true)
    assert.matches("source 1 of NEG is a table, not a UOp", error_of(tcl.uop, "NEG", "int32", { {} }), 1, true)
    assert.matches("unsupported value of type function", error_of(tcl.uop, "CONST", "int32", nil, print), 1, true)
    assert.matches("source index out of range", error_of(x.source, x, 1), 1, true)
  end)

  it("answers op group questions", function()
    assert.is_true(tcl.op_in("ADD", "Commutative"))
    assert.is_false(tcl.op_in("SUB", "Commutative"))
    assert.is_true(tcl.op_in("ADD", "ALU") and tcl.op_in("ADD", "Binary") and tcl.op_in("ADD", "Associative"))
    assert.is_false(tcl.op_in("ADD", "Unary"))
    assert.is_true(tcl.op_in("CMPLT", "Comparison"))
    assert.is_true(tcl.op_in("RESHAPE", "Movement"))
    assert.is_true(tcl.op_in("WHERE", "Ternary"))
    assert.is_true(tcl.op_in("MAX", "Idempotent"))
    assert.is_false(tcl.op_in("CONST", "ALU"))
    assert.is_true(tcl.op_in(tcl.ops.ADD, "Commutative"))
    assert.matches("unknown op group 'Nope'", error_of(tcl.op_in, "ADD", "Nope"), 1, true)
    assert.is_true(tcl.groups.Commutative.MUL)
    assert.is_nil(tcl.groups.Commutative.SUB)
    for name, members in pairs(tcl.groups) do
      for op in pairs(members) do assert.is_true(tcl.op_in(op, name)) end
    end
    for id, name in ipairs(tcl.core.op_names) do assert.are.equal(id - 1, tcl.ops[name]) end
  end)

  it("sorts a graph with every source before its users and itself last", function()
    local a = const("float32", 2.0)
    local b = tcl.uop("NEG", "float32", { a })
    local c = tcl.uop("EXP2", "float32", { a })
    local d = tcl.uop("ADD", "float32", { b, c })
    local e = tcl.uop("MUL", "float32", { d, a })
    local order = e:toposort()
    assert.are.equal(5, #order)
    assert.is_true(rawequal(e, order[5]))
    local position = {}
    for i, n in ipairs(order) do
      assert.is_nil(position[n], "a node appears twice")
      position[n] = i
    end
    for i, n in ipairs(order) do
      for _, s in ipairs(n.src) do assert.is_true(position[s] < i) end
    end
    local again = tcl.core.toposort(e)
    assert.are.equal(#order, #again)
    for i = 1, #order do assert.is_true(rawequal(order[i], again[i])) end
    assert.are.equal(1, #a:toposort())
  end)
end)

describe("the content hash", function()
  local fixed_graph = helper.root .. "/tests/fixed_graph.lua"

  local function hash_in_new_process(warmup)
    local code = string.format("local core = require 'tcl.core'\n" ..
      "io.write(dofile(%q)(core, %d).content_hash, '\\n')", fixed_graph, warmup)
    local lua_path = helper.root .. "/lua/?.lua;" .. helper.root .. "/lua/?/init.lua"
    local status, stdout, stderr = helper.run("LUA_PATH=" .. q(lua_path) .. " LUA_CPATH=" ..
      q(helper.build_dir .. "/lua/?.so") .. " lua5.4 -e " .. q(code))
    assert.are.equal(0, status, stderr)
    local hash = stdout:match("^(%x+)\n$")
    assert.is_not_nil(hash, "unexpected output: " .. stdout .. stderr)
    return hash
  end

  it("of the same graph is equal in two separate lua5.4 processes and in this one", function()
    local first, second = hash_in_new_process(0), hash_in_new_process(300)
    assert.are.equal(16, #first)
    assert.are.equal(first, second)
    local here = dofile(fixed_graph)(tcl.core, 5)
    assert.are.equal(first, here.content_hash)
  end)

  it("differs between nodes of one graph", function()
    local seen = {}
    for _, n in ipairs(dofile(fixed_graph)(tcl.core, 0):toposort()) do
      assert.is_nil(seen[n.content_hash])
      seen[n.content_hash] = true
    end
  end)
end)

describe("UOp operators and methods (tcl.UOp)", function()
  local UOp, P = tcl.UOp, tcl.pattern
  local x = tcl.uop("DEFINE_VAR", "index", nil, "x")
  local y = tcl.uop("DEFINE_VAR", "index", nil, "y")
  local function node(op, dtype, src) return tcl.uop(op, dtype, src) end
  local function c(v, dtype) return UOp.const(dtype or "index", v) end

  it("are the methods of every node, and tcl.UOp is the table the binding looks them up in", function()
    assert.are.equal(tcl.core.uop_methods, UOp)
    assert.are.equal(UOp.tree, x.tree)
    assert.are.equal(tcl.uop, UOp.new)
  end)

  it("build the node each operator names, a number taking the node's dtype", function()
    assert.are.equal(node("ADD", "index", { x, y }), x + y)
    assert.are.equal(node("SUB", "index", { x, c(3) }), x - 3)
    assert.are.equal(node("MUL", "index", { c(4), x }), 4 * x)
    assert.are.equal(node("FLOORDIV", "index", { x, c(2) }), x // 2)
    assert.are.equal(node("FLOORMOD", "index", { x, c(2) }), x % 2)
    assert.are.equal(node("IDIV", "index", { x, c(2) }), x:idiv(2))
    assert.are.equal(node("MOD", "index", { x, c(2) }), x:cmod(2))
    assert.are.equal(node("NEG", "index", { x }), -x)
    assert.are.equal(node("AND", "index", { x, y }), x & y)
    assert.are.equal(node("OR", "index", { x, y }), x | y)
    assert.are.equal(node("XOR", "index", { x, y }), x ~ y)
    assert.are.equal(node("SHL", "index", { x, c(1) }), x << 1)
    assert.are.equal(node("SHR", "index", { x, c(1) }), x >> 1)
    assert.are.equal(node("MAX", "index", { x, y }), x:max(y))
    assert.are.equal(node("MIN", "index", { x, c(0) }), x:min(0))
    local f = tcl.uop("DEFINE_VAR", "float32", nil, "f")
    assert.are.equal(node("FDIV", "float32", { f, c(2.0, "float32") }), f / 2)
    assert.are.equal(node("POW", "float32", { f, c(3.0, "float32") }), f ^ 3)
    assert.are.equal(node("SQRT", "float32", { f }), f:sqrt())
    -- the number is converted by CAST's rules: 2.7 in an index expression is 2
    assert.are.equal(node("ADD", "index", { x, c(2) }), x + 2.7)
  end)

  it("compare into bool, choose with where, convert with cast, and make constants", function()
    local bool = tcl.dtype "bool"
    assert.are.equal(node("CMPLT", bool, { x, c(10) }), x:lt(10))
    assert.are.equal(node("CMPLT", bool, { c(10), x }), x:gt(10))
    assert.are.equal(node("CMPNE", bool, { x, y }), x:ne(y))
    assert.are.equal(node("CMPEQ", bool, { x, y }), x:eq(y))
    local cond = x:lt(y)
    assert.are.equal(tcl.uop("WHERE", "index", { cond, x, c(0) }), cond:where(x, 0))
    assert.are.equal(tcl.uop("WHERE", "index", { cond, c(1), y }), cond:where(1, y))
    assert.are.equal(node("CAST", "int32", { x }), x:cast("int32"))
    assert.are.equal(x, x:cast(tcl.dtype "index")) -- already that dtype
    assert.are.equal(c(7), x:const_like(7))
    assert.are.equal(tcl.uop("CONST", "float16", nil, 0.5), UOp.const("float16", 0.5))
    local r = tcl.uop("RANGE", "index", { c(4) }, { 2, "upcast" })
    assert.are.equal("upcast", r:axis_type())
    assert.is_nil(c(4):axis_type())
    assert.is_nil((r + 1):axis_type())
  end)

  it("keep == as identity and simplify nothing", function()
    assert.is_true(x + y == x + y) -- hash-consed: the same node
    assert.is_false(x + y == y + x)
    assert.are.equal("ADD", (x + 0).op)
    assert.are.equal("MUL", (c(2) * c(3)).op)
  end)

  it("refuse operands of two dtypes and values that are not numbers, naming the op", function()
    local i32 = tcl.uop("DEFINE_VAR", "int32", nil, "i")
    assert.matches("ADD: operands of dtypes index and int32 %(convert one with cast%)",
        error_of(function() return x + i32 end))
    assert.matches("MUL: an operand is a string, not a UOp, a number or a boolean",
        error_of(function() return x * "2" end))
    assert.matches("WHERE: operands of dtypes index and int32", error_of(function() return x:lt(y):where(x, i32) end))
  end)

  it("mirror the pattern language: a pattern written with an operator matches the node built with it", function()
    local a, b = P.var "a", P.var "b"
    local cases = {
      { a + b, x + y }, { a - b, x - y }, { a * b, x * y }, { a // b, x // y }, { a % b, x % y },
      { a:idiv(b), x:idiv(y) }, { a:cmod(b), x:cmod(y) }, { a:max(b), x:max(y) }, { a:min(b), x:min(y) },
      { a:lt(b), x:lt(y) }, { a:ne(b), x:ne(y) }, { a:eq(b), x:eq(y) }, { a & b, x & y }, { a | b, x | y },
      { a ~ b, x ~ y }, { a << b, x << y }, { a >> b, x >> y }, { -a, -x }, { a:cast("int32"), x:cast("int32") },
      { a:lt(b):where(a, b), x:lt(y):where(x, y) },
    }
    for i, case in ipairs(cases) do
      local rules = P.rules { { case[1], function() return c(12345) end } }
      assert.are.equal(c(12345), rules:apply_once(case[2]), "case " .. i .. ": " .. case[2].op)
    end
  end)
end)
