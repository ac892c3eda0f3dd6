-- tcl.affine — the affine form of an index expression: { [RANGE] = coefficient } when the
-- expression is a sum of ranges times integer constants (plus a constant, which the form
-- leaves out); nil otherwise (a division, a modulo, a load...). The heuristics read strides
-- from it (tcl.heuristics.kernel), the GPU passes which thread steps along what
-- (tcl.codegen.passes.thread_order, tcl.codegen.passes.stage_transposes). Layer: core bindings (Lua).
--
--   local affine = require "tcl.affine"
--   local form = affine.form(index, {})     -- memo: one table per graph, reused across calls
--   local stride = form and (form[range] or 0)
local M = {}

--- The affine form of u, nil when it is not affine. memo caches subexpressions.
function M.form(u, memo)
  local hit = memo[u]
  if hit ~= nil then return hit or nil end
  local out
  if u.op == "CONST" and math.type(u.arg) == "integer" then
    out = {}
  elseif u.op == "RANGE" then
    out = { [u] = 1 }
  elseif u.op == "ADD" or u.op == "SUB" then
    local a, b = M.form(u.src[1], memo), M.form(u.src[2], memo)
    if a and b then
      out = {}
      for r, c in pairs(a) do out[r] = c end
      local sign = u.op == "SUB" and -1 or 1
      for r, c in pairs(b) do out[r] = (out[r] or 0) + sign * c end
    end
  elseif u.op == "MUL" then
    local a, b = u.src[1], u.src[2]
    if b.op ~= "CONST" then a, b = b, a end
    local fa = b.op == "CONST" and math.type(b.arg) == "integer" and M.form(a, memo)
    if fa then
      out = {}
      for r, c in pairs(fa) do out[r] = c * b.arg end
    end
  end
  memo[u] = out or false
  return out
end

return M
