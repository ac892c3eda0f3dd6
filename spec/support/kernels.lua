-- spec/support/kernels.lua — builders of kernel ASTs (docs/design/encodings.md, "Kernels") for the
-- specs that lower, render and run kernels by hand (emu_spec, lower_spec, the GPU specs). Index arithmetic can use the
-- node operators (tcl.uop): add(a, b) is a + b.
local tcl = require "tcl"

local M = {}

local u = tcl.uop
local IDX = tcl.dtype "index"

--- A linear program under construction: returns the list and add(op, dtype, src, arg), which
-- builds a node and appends it the first time (and the set of nodes appended).
function M.builder()
  local list, seen = {}, {}
  local function add(op, dtype, src, arg)
    local n = u(op, dtype, src, arg)
    if not seen[n] then
      seen[n] = true
      list[#list + 1] = n
    end
    return n
  end
  return list, add, seen
end

--- Node helpers for a program built with add (M.builder's): c(v, dt) a CONST (index when dt is
-- nil); op(name, a, b) a binary op of a's dtype (b a node, or a number made a CONST of that
-- dtype); index(buf, i), load(buf, i), store(buf, i, v) (i a node, or a number made an index CONST).
function M.kit(add)
  local k = {}
  function k.c(v, dt) return add("CONST", dt or IDX, nil, v) end
  function k.op(op, a, b) return add(op, a.dtype, { a, type(b) == "number" and k.c(b, a.dtype) or b }) end
  function k.index(buf, i) return add("INDEX", buf.dtype, { buf, type(i) == "number" and k.c(i) or i }) end
  function k.load(buf, i) return add("LOAD", buf.dtype, { k.index(buf, i) }) end
  function k.store(buf, i, v) return add("STORE", nil, { k.index(buf, i), v }) end
  return k
end

--- Kernel argument `slot`: a buffer of n elements of dtype dt.
function M.param(dt, slot, n) return u("PARAM", dt, nil, { slot, n }) end

--- A CONST of dtype dt (index when nil) holding v as given.
function M.c(v, dt) return u("CONST", dt or IDX, nil, v) end

--- A loop over [0, n) with axis id `axis` of kind "loop" (default) or "reduce".
function M.range(n, axis, kind) return u("RANGE", IDX, { M.c(n) }, { axis, kind or "loop" }) end

--- The kernel: a SINK named `name` over its stores.
function M.sink(name, ...) return u("SINK", nil, { ... }, { name }) end

--- STORE(INDEX(buf, idx), value) closed by one END per range given, innermost first.
function M.store_end(buf, idx, value, ...)
  local e = u("STORE", nil, { u("INDEX", buf.dtype, { buf, idx }), value })
  for _, r in ipairs { ... } do e = u("END", nil, { e, r }) end
  return e
end

return M
