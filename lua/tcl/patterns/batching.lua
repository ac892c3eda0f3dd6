-- tcl.patterns.batching — the batching rules of tcl.vmap: one rule per op of the tensor graph,
-- matched by the rewrite engine at each node that depends on a batched argument. The node is
-- rebuilt with one more dim in front, the batch. A rule gets a context `c`:
--   c:batched(i)   source i with the batch dim in front (a source that does not depend on the
--                  batched arguments is broadcast along it)
--   c.size         the batch size;  c.node  the node;  c.graph  the graph builders (0-based
--                  args, see tcl.patterns.gradient)
-- and returns c:result(t), t the batched node as a Tensor. The args of movement ops and
-- reductions gain the batch dim; elementwise ops apply to the batched sources as they are.
local P = require "tcl.pattern"

local M = {}

local function op(name) return P.op(name) end

-- {first, rest...}: the list with `first` in front.
local function prepend(first, list)
  local out = { first }
  for i, v in ipairs(list) do out[i + 1] = v end
  return out
end

local function sources(c)
  local list = {}
  for i = 1, #c.node.src do list[i] = c:batched(i) end
  return list
end

M.rules = P.rules {
  { op "RESHAPE", function(_, c) return c:result(c.graph.reshape(c:batched(1), prepend(c.size, c.node.arg))) end },
  { op "EXPAND", function(_, c) return c:result(c.graph.expand(c:batched(1), prepend(c.size, c.node.arg))) end },
  { op "PERMUTE", function(_, c)
    local order = { 0 }
    for i, o in ipairs(c.node.arg) do order[i + 1] = o + 1 end
    return c:result(c.graph.permute(c:batched(1), order))
  end },
  { op "PAD", function(_, c)
    local amounts = { 0, 0 }
    for i, a in ipairs(c.node.arg) do amounts[i + 2] = a end
    return c:result(c.graph.pad(c:batched(1), amounts))
  end },
  { op "SHRINK", function(_, c)
    local window = { 0, c.size }
    for i, w in ipairs(c.node.arg) do window[i + 2] = w end
    return c:result(c.graph.shrink(c:batched(1), window))
  end },
  { op "FLIP", function(_, c) return c:result(c.graph.flip(c:batched(1), prepend(0, c.node.arg))) end },
  { op "REDUCE_AXIS", function(_, c)
    local axes = {}
    for i, a in ipairs(c.node.arg[2]) do axes[i] = a + 1 end
    return c:result(c.graph.reduce(c:batched(1), c.node.arg[1], axes))
  end },
  { op "CAST", function(_, c) return c:result(c.graph.cast(c:batched(1), c.node.dtype)) end },
  { op "CONTIGUOUS", function(_, c) return c:result(c.graph.contiguous(c:batched(1))) end },
  { op "COPY", function(_, c) return c:result(c.graph.clone(c:batched(1))) end },
  { op { "BITCAST", "DETACH" }, function(_, c)
    local x = c:batched(1)
    return c:result(c.graph.node(c.node.op, c.node.dtype, { x }, nil, x.shape, x.device))
  end },
  { op "ASSIGN", function() error("vmap: the function assigns to a tensor in place (assign); vmap cannot batch "
    .. "a side effect", 0) end },
  { op "ALU", function(_, c) return c:result(c.graph.alu(c.node.op, c.node.dtype, sources(c))) end },
}

return M
