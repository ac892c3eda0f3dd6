-- The core and rewrite paths: nodes built and interned (the context's hash table), their
-- content hashes, a rule set compiled into the C matcher and a graph_rewrite with it, then a
-- lazy tensor graph (nothing realized), and kernel opts on a scheduled kernel.
local tcl = require "tcl"
local Tensor = tcl.Tensor
local P = tcl.pattern
local function const(value) return tcl.uop("CONST", "index", nil, value) end
local x = tcl.uop("DEFINE_VAR", "index", nil, { "x", 0, 100 })
local e = x
for i = 1, 6 do
  e = tcl.uop("ADD", "index", { tcl.uop("MUL", "index", { e, const(1) }), const(0) }, nil, "step" .. i)
end
assert(#e.content_hash == 16)
local v = P.var "v"
local simplify = P.rules {
  { P.op("MUL", { v, 1 }), function(b) return b.v end },
  { P.op("ADD", { v, 0 }), function(b) return b.v end },
}
assert(P.graph_rewrite(e, simplify) == x, "x*1+0 ... simplifies to x")
local a = Tensor.arange(12):reshape(3, 4)
local s = (a * 2 + 1):sum(2)
assert(s.shape[1] == 3)
-- Kernel opts (src/opt) on the scheduled kernel of a sum.
local opt = require "tcl.opt"
local schedule = require "tcl.schedule"
local ones = Tensor.zeros(4, 32, 64, { device = "EMU" }) + 1
local k = opt.kernel(schedule.create({ ones:sum(3).uop }).kernels[1].ast, { has_threads = true, threads = 4 })
k:apply("THREAD", 1, 4)
k:apply("KBLOCK", 1, 16)
assert(k:name() == "r_4t_4k_32_16", k:name())
