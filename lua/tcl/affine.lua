-- tcl.affine — the affine form of an index expression: { [RANGE] = coefficient } when the
-- expression is a sum of ranges times integer constants (plus a constant, which the form
-- leaves out); nil otherwise (a division, a modulo, a load...). The heuristics read strides
-- from it (tcl.heuristics.kernel), the GPU passes which thread steps along what
-- (tcl.codegen.passes.thread_order, tcl.codegen.passes.stage_transposes), the pass "expand"
-- which lanes are consecutive elements. Layer: core bindings (Lua).
--
--   local affine = require "tcl.affine"
--   local form = affine.form(index, {})     -- memo: one table per graph, reused across calls
--   local stride = affine.stride(index, range, {})   -- form[range] or 0; nil: not affine
--   local c = affine.coefficient(index, range, {})  -- the same where index is affine in range
--                                                   -- alone (memo: one table per range)
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

--- The coefficient of range r in u's affine form (0 when u does not use r); nil when u is not
-- affine. memo as for form.
function M.stride(u, r, memo)
  local form = M.form(u, memo)
  return form and (form[r] or 0)
end

--- The coefficient of range r in e when e is affine in r alone: sums, and products with
-- integer constants, of terms that do not use r (which may be anything, other ranges
-- multiplied, divided, loaded...); nil otherwise. Unlike stride, the rest of e need not be
-- affine. memo caches subexpressions for this r only: one table per (graph, r).
function M.coefficient(e, r, memo)
  local known = memo[e]
  if known ~= nil then return known or nil end
  local c
  if e == r then
    c = 1
  elseif e.op == "CONST" or e.op == "RANGE" then
    c = 0
  elseif e.op == "ADD" or e.op == "SUB" then
    local x, y = M.coefficient(e:source(1), r, memo), M.coefficient(e:source(2), r, memo)
    if x and y then c = e.op == "ADD" and x + y or x - y end
  elseif e.op == "MUL" then
    local x, y = e:source(1), e:source(2)
    if y.op == "CONST" and math.type(y.arg) == "integer" then
      local cx = M.coefficient(x, r, memo)
      c = cx and cx * y.arg
    elseif x.op == "CONST" and math.type(x.arg) == "integer" then
      local cy = M.coefficient(y, r, memo)
      c = cy and cy * x.arg
    else
      local cx, cy = M.coefficient(x, r, memo), M.coefficient(y, r, memo)
      if cx == 0 and cy == 0 then c = 0 end
    end
  else
    local uses = false
    for _, u in ipairs(e:toposort()) do
      if u == r then uses = true break end
    end
    if not uses then c = 0 end
  end
  memo[e] = c or false
  return c
end

return M
