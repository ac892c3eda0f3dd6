-- tcl.codegen.passes.bind_variables — the pass "bind variables": a kernel made for a variable
-- size (tcl.variables: DEFINE_VAR nodes in its loop ends and indices) reads the variables'
-- values at launch from one more argument, an int32 buffer holding them in the order of their
-- names. Layer: codegen (a pass of rules, lua/tcl/patterns/pipeline.lua).
--
-- Every renderer then runs it unchanged: a variable is a load, not a new kind of kernel
-- argument. The value is clamped to the variable's range, so the interval analysis that picks
-- index widths (and anything that proves a read in bounds) keeps the bounds the kernel was
-- made for, and a wrong value can never index outside a buffer. Last but one, after every pass
-- that reads loop sizes or bounds: they see the DEFINE_VAR with its range.
-- ctx.variables receives the names in argument order (the lowering driver keeps them on the
-- kernel; tcl.schedule.run passes the values).
local core = require "tcl.core"
local P = require "tcl.pattern"
local UOp = require "tcl.uop"

local M = {}

local INDEX, INT32 = core.dtype "index", core.dtype "int32"
local new, const = UOp.new, UOp.const

--- The replacement of each DEFINE_VAR of the kernel, or nil when it has none.
function M.context(sink, ctx)
  local vars, next_slot = {}, 0
  for _, u in ipairs(sink:toposort()) do
    if u.op == "DEFINE_VAR" and u.dtype == INDEX then vars[#vars + 1] = u end
    if u.op == "PARAM" and u.arg[1] >= next_slot then next_slot = u.arg[1] + 1 end
  end
  if #vars == 0 then return nil end
  table.sort(vars, function(a, b) return a.arg[1] < b.arg[1] end)
  local values = new("PARAM", INT32, nil, { next_slot, #vars })
  local names, replacement = {}, {}
  for i, var in ipairs(vars) do
    local name, min, max = var.arg[1], var.arg[2], var.arg[3]
    names[i] = name
    local loaded = new("LOAD", INT32, { new("INDEX", INT32, { values, const(INDEX, i - 1) }) }):cast(INDEX)
    replacement[var] = loaded:max(const(INDEX, min)):min(const(INDEX, max))
  end
  if ctx then ctx.variables = names end
  return replacement
end

M.rules = P.rules {
  { P.op("DEFINE_VAR", nil, { name = "var" }), function(m, replacement) return replacement[m.var] end },
}

return M
