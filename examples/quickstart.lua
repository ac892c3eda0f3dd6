-- examples/quickstart.lua — a short tour of tcl: lazy tensors written in Lua, compiled into
-- fused kernels and run on a device, then the graph core they are built on.
-- Run it with `scripts/quickstart.sh`, or `build/tcl examples/quickstart.lua` after a build.

-- The `tcl` program preloads the module as the global `tcl` and its Tensor class as the
-- global `Tensor`; require gives the same module, also from a stock lua5.4.
local tcl = require "tcl"
local Tensor = tcl.Tensor

-- show("label", values...): one aligned line per fact.
local function show(label, ...)
  local parts = table.pack(...)
  for i = 1, parts.n do parts[i] = tostring(parts[i]) end
  print(string.format("%-24s %s", label, table.concat(parts, "  ")))
end

local function list(t) return "{" .. table.concat(t, ", ") .. "}" end

print("== Tensors")

-- 1. Creation. From Lua data (int32 for integers, float32 for fractions, bool for booleans),
--    or filled: zeros, ones, full, arange (half-open), linspace, eye, rand/randn/randint.
local a = Tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
print(a)
show("shape, ndim, dtype", list(a.shape), a.ndim, a.dtype)
show("numel, size(-1)", a:numel(), a:size(-1))
print(Tensor.arange(0, 1, 0.25))
print(Tensor.eye(3, { dtype = "int32" }))
Tensor.manual_seed(0) -- the random stream is reproducible
print(Tensor.rand(2, 3))

-- 2. Lazy ops. Nothing runs yet: each op adds nodes to a graph. numpy broadcasting, numbers
--    on either side, tinygrad's dtype promotion (an int tensor / a number is float32).
local b = (a * 2 + 1) / 3
show("b is lazy", b.uop.op, list(b.shape), b.dtype)
print(b)           -- printing realizes: the graph is scheduled into kernels and run
print(a + Tensor({ 10, 20, 30 }))
print(a:float():sqrt():mul(10):floor())

-- 3. Reductions, dims 1-based as in Lua (negative from the end); keepdim keeps them as size 1.
show("sum of all", a:sum():item())
show("sum over dim 1", list(a:sum(1):tolist()))
show("max over dim -1", list(a:max(-1):tolist()))
show("argmax over dim 2", list(a:argmax(2):tolist()))
show("mean", a:mean():item())
print(a:float():softmax(2))

-- 4. Movement: views that cost nothing until a kernel reads them.
print(a:transpose())
print(a:reshape(3, 2))
show("a[2] (a view)", list(a[2]:tolist()))
show("a:slice({}, {1, 3, 2})", list(a:slice({}, { 1, 3, 2 }):tolist()[1]))
print(Tensor.cat({ a, a * 10 }, 2))

-- 5. Linear algebra and nn functions: a small two-layer network on a batch of 4.
local x = Tensor.randn(4, 3)
local w1, b1 = Tensor.randn(3, 8) * 0.5, Tensor.zeros(8)
local w2, b2 = Tensor.randn(8, 2) * 0.5, Tensor.zeros(2)
local probabilities = x:linear(w1, b1):relu():linear(w2, b2):softmax(-1)
print(probabilities)
print(probabilities:sum(2))

-- 6. tcl.realize computes several tensors in one schedule.
local s, m = a:sum(2), a:max(1)
tcl.realize(s, m)
show("realized together", list(s:tolist()), list(m:tolist()))

-- 6b. Devices, and a function compiled once and replayed: tcl.jit captures the kernels a
-- function runs (on its second call) and replays them on new inputs of the same shapes.
local net = tcl.jit(function(input) return input:linear(w1, b1):relu():linear(w2, b2):softmax(-1) end)
for _ = 1, 3 do net(Tensor.randn(4, 3)) end
local stats = net:stats()
show("device, jit", x.device, string.format("%d kernels replayed %d time(s)", stats.kernels, stats.replayed))

-- 7. Errors are Lua errors that name the function and the shapes.
show("error", select(2, pcall(function() local c = a + Tensor.ones(4) return c end)))
show("error", select(2, pcall(function() local c = a:reshape(4, 2) return c end)))

print()
print("== Underneath: the graph")

-- 8. A tensor is a node of the tensor graph (see docs/design/encodings.md); printing a node
--    shows its tree. Here: sum over dim 1 of a + 1 (broadcasting made explicit).
print((a + 1):sum(1).uop)

-- 9. Nodes are hash-consed in C: building an equal node again returns the very same object,
--    so `==` is identity and nodes can key tables.
local xv = tcl.uop("DEFINE_VAR", tcl.int32, nil, { "x", 0, 10 })
local two = tcl.uop("CONST", tcl.int32, nil, 2)
local sum = tcl.uop("ADD", tcl.int32, { xv, two })
show("same node again", sum == tcl.uop("ADD", tcl.int32, { xv, tcl.uop("CONST", tcl.int32, nil, 2) }))

-- 10. Rewriting. Rules pair a pattern with a rewrite; the C engine matches them and calls the
--     Lua function only on a match. graph_rewrite applies them everywhere, to a fixed point.
local P = tcl.pattern
local any = P.var "any"
local identities = tcl.rules {
  { any + 0, function(match) return match.any end },   -- any + 0 -> any
  { any * 1, function(match) return match.any end },   -- any * 1 -> any
}
local zero, one = tcl.uop("CONST", tcl.int32, nil, 0), tcl.uop("CONST", tcl.int32, nil, 1)
local padded = tcl.uop("MUL", tcl.int32, { tcl.uop("ADD", tcl.int32, { sum, zero }), one })
show("(s + 0) * 1 -> s", tcl.graph_rewrite(padded, identities) == sum)
show("x + 2 in", sum:vmin(), sum:vmax())
