-- examples/quickstart.lua — a short tour of what tcl does today: its graph core and rewriter.
-- Run it with `scripts/quickstart.sh`, or `build/tcl examples/quickstart.lua` after a build.
-- (Tensors, kernels and devices come later; this is the UOp graph they will be built on.)

-- The `tcl` program preloads the module as the global `tcl`; require returns that same
-- module, and also works from a stock lua5.4 with the module on its paths.
local tcl = require "tcl"

-- show("label", values...): one aligned line per fact.
local function show(label, ...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = tostring(parts[i]) end
  print(string.format("%-22s %s", label, table.concat(parts, "  ")))
end

-- 1. Nodes. tcl.uop(op, dtype, sources, arg) builds one UOp: an op name, a dtype (nil for
--    void), a list of source nodes and an optional argument (number, string, boolean,
--    dtype or a table of those). Here: (x + 2) * (x + 2) for an integer variable x in [0, 10].
local x = tcl.uop("DEFINE_VAR", tcl.int32, nil, { "x", 0, 10 })
local two = tcl.uop("CONST", tcl.int32, nil, 2)
local sum = tcl.uop("ADD", tcl.int32, { x, two })
local square = tcl.uop("MUL", tcl.int32, { sum, sum })

-- 2. Hash consing. Nodes live in C, interned by (op, dtype, sources, arg, tag): building an
--    equal node again returns the very same object, so `==` is identity and nodes can key tables.
local again = tcl.uop("ADD", tcl.int32, { x, tcl.uop("CONST", tcl.int32, nil, 2) })
show("same node again", again == sum, rawequal(again, sum))
show("different arg", tcl.uop("CONST", tcl.int32, nil, 3) == two)

-- 3. Printing. tostring/print shows the graph as a tree; a node met twice is printed once
--    and then referred to by its number.
print(square)

-- 4. Fields. Nodes are immutable; read op, dtype, src (a fresh list), arg, tag, id (serial
--    number in this state) and content_hash (the same in every process: a disk cache key).
show("op, dtype", square.op, square.dtype)
show("sources", #square.src, square:source(1) == sum)
show("arg of x", table.concat(x.arg, ", "))
show("content hash", square.content_hash)
show("setting a field", pcall(function() square.op = "SUB" end))

-- 5. Checks. A bad node is a Lua error with a message, never a crash.
show("ADD with one source", pcall(tcl.uop, "ADD", tcl.int32, { x }))

-- 6. Toposort: every node of the graph once, sources before their users, the root last.
for i, node in ipairs(square:toposort()) do
  show("toposort " .. i, node.op, node.dtype)
end

-- 7. Dtypes. tcl.int32, tcl.float32, ... (also by name in tcl.dtypes) know their size and
--    range; tcl.promote finds the common dtype of two, as binary ops will.
show("float16 itemsize", tcl.float16.itemsize, tcl.float16.is_float)
show("int8 range", tcl.int8.min, tcl.int8.max)
show("int8 + uint8 ->", tcl.promote(tcl.int8, tcl.uint8))
show("int32 + float16 ->", tcl.promote("int32", "float16"))

-- 8. Op groups, for rules that apply to a family of ops.
show("ADD is commutative", tcl.op_in("ADD", "Commutative"), tcl.op_in("SUB", "Commutative"))

-- 9. Rewriting. Rules pair a pattern (built with tcl.pattern: variables, constants and Lua
--    operators) with a rewrite; the C engine matches them and calls the Lua function only on a
--    match. graph_rewrite applies them everywhere, children first, to a fixed point.
local P = tcl.pattern
local any = P.var "any"
local identities = tcl.rules {
  { any + 0, function(m) return m.any end },   -- any + 0 -> any
  { any * 1, function(m) return m.any end },   -- any * 1 -> any
}
local zero, one = tcl.uop("CONST", tcl.int32, nil, 0), tcl.uop("CONST", tcl.int32, nil, 1)
local padded = tcl.uop("MUL", tcl.int32, { tcl.uop("ADD", tcl.int32, { square, zero }), one })
show("(sq + 0) * 1 -> sq", tcl.graph_rewrite(padded, identities) == square)

-- 10. Memory. Nodes are reference counted; once Lua drops them they are freed.
show("live nodes", tcl.live_nodes())
x, two, sum, square, again, zero, one, padded = nil, nil, nil, nil, nil, nil, nil, nil
collectgarbage()
collectgarbage()
show("live nodes after GC", tcl.live_nodes())
