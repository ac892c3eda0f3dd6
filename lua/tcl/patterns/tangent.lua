-- tcl.patterns.tangent — forward-mode derivative rules (tcl.jvp): one rule per op of the tensor
-- graph, matched by the rewrite engine at each node from the inputs forward. A rule gets a
-- context `c`:
--   c:input(i)    source i as a Tensor;  c.out  the node as a Tensor;  c.node  the node
--   c:tangent(i)  the tangent of source i (a Tensor of its shape), nil where it is zero
--   c.graph       graph builders taking node args as they are (see tcl.patterns.gradient)
-- and returns c:tangent_out(t): the node's tangent (nil: zero). Ops whose value is piecewise
-- constant or not real-valued have no rule's worth of tangent and return nil.
-- `composites` are the forward derivatives of the functions tcl.patterns.gradient lists there
-- (same reason: their derivatives are not those of their nodes), given c.inputs, c.tangents,
-- c.out, c.extra.
local P = require "tcl.pattern"

local LN_2 = math.log(2)

local M = {}

local function op(name) return P.op(name) end

-- The tangent of source i, or a zero of its shape and dtype.
local function tangent_or_zero(c, i)
  local t = c:tangent(i)
  if t then return t end
  return c:input(i):mul(0)
end

-- t1 + t2 where either may be nil (zero).
local function plus(t1, t2)
  if t1 == nil then return t2 end
  if t2 == nil then return t1 end
  return t1:add(t2)
end

-- f(t) when t is not nil.
local function on(t, f) if t then return f(t) end end

M.rules = P.rules {
  { op { "BUFFER", "CONST", "DEFINE_VAR", "BIND", "DETACH", "ASSIGN", "BITCAST", "CMPLT", "CMPNE", "CMPEQ",
    "AND", "OR", "XOR", "SHL", "SHR", "IDIV", "MOD", "FLOORDIV", "TRUNC", "THREEFRY" },
    function(_, c) return c:tangent_out(nil) end },

  -- linear ops: the tangent goes through the same op
  { op "RESHAPE", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return c.graph.reshape(t, c.node.arg) end)) end },
  { op "PERMUTE", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return c.graph.permute(t, c.node.arg) end)) end },
  { op "EXPAND", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return c.graph.expand(t, c.node.arg) end)) end },
  { op "PAD", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return c.graph.pad(t, c.node.arg) end)) end },
  { op "SHRINK", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return c.graph.shrink(t, c.node.arg) end)) end },
  { op "FLIP", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return c.graph.flip(t, c.node.arg) end)) end },
  { op "CONTIGUOUS", function(_, c) return c:tangent_out(c:tangent(1)) end },
  -- a copy to another device (arg: its name) takes the tangent there too
  { op "COPY", function(_, c)
    if type(c.node.arg) == "string" then return c:tangent_out(c:tangent(1):to(c.node.arg)) end
    return c:tangent_out(c:tangent(1))
  end },
  { op "CAST", function(_, c)
    if not c.node.dtype.is_float then return c:tangent_out(nil) end
    return c:tangent_out(on(c:tangent(1), function(t) return c.graph.cast(t, c.node.dtype) end))
  end },
  { op "REDUCE_AXIS", function(_, c)
    local kind, axes = c.node.arg[1], c.node.arg[2]
    local t = c:tangent(1)
    if t == nil then return c:tangent_out(nil) end
    if kind == "ADD" then return c:tangent_out(c.graph.reduce(t, "ADD", axes)) end
    local x = c:input(1)
    local shape = x.shape
    if kind == "MUL" then -- sum_i t_i prod / x_i
      return c:tangent_out(c.graph.reduce(t:mul(c.graph.expand(c.out, shape)):div(x), "ADD", axes))
    end
    -- MAX: the mean of the tangents at the maxima (the subgradient the reverse rule uses)
    local hit = x:eq(c.graph.expand(c.out, shape)):cast(x.dtype)
    return c:tangent_out(c.graph.reduce(t:mul(hit), "ADD", axes):div(c.graph.reduce(hit, "ADD", axes)))
  end },

  { op "ADD", function(_, c) return c:tangent_out(plus(c:tangent(1), c:tangent(2))) end },
  { op "SUB", function(_, c) return c:tangent_out(plus(c:tangent(1), on(c:tangent(2), function(t)
    return t:neg() end))) end },
  { op "NEG", function(_, c) return c:tangent_out(on(c:tangent(1), function(t) return t:neg() end)) end },
  { op "MUL", function(_, c)
    return c:tangent_out(plus(on(c:tangent(1), function(t) return t:mul(c:input(2)) end),
      on(c:tangent(2), function(t) return t:mul(c:input(1)) end)))
  end },
  { op "FDIV", function(_, c) -- (ta - out tb) / b
    local b = c:input(2)
    return c:tangent_out(plus(on(c:tangent(1), function(t) return t:div(b) end),
      on(c:tangent(2), function(t) return t:mul(c.out):div(b):neg() end)))
  end },
  { op "RECIPROCAL", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c.out):mul(c.out):neg() end)) end },
  { op "SQRT", function(_, c) return c:tangent_out(on(c:tangent(1), function(t) return t:div(c.out:mul(2)) end)) end },
  { op "EXP2", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c.out):mul(LN_2) end)) end },
  { op "LOG2", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:div(c:input(1):mul(LN_2)) end)) end },
  -- the graph functions, one node each (see tcl.patterns.gradient)
  { op "EXP", function(_, c) return c:tangent_out(on(c:tangent(1), function(t) return t:mul(c.out) end)) end },
  { op "SIGMOID", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c.out):mul(c.out:neg():add(1)) end)) end },
  { op "TANH", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c.out:mul(c.out):neg():add(1)) end)) end },
  { op "SILU", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    local x = c:input(1)
    local s = x:sigmoid()
    return t:mul(s:add(x:mul(s):mul(s:neg():add(1))))
  end)) end },
  { op "SOFTPLUS", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c:input(1):sigmoid()) end)) end },
  { op "ELU", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    local x = c:input(1)
    return t:mul(x:gt(0):where(1.0, c.out:add(1)):cast(x.dtype))
  end)) end },
  { op "SIN", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c:input(1):cos()) end)) end },
  { op "COS", function(_, c) return c:tangent_out(on(c:tangent(1), function(t)
    return t:mul(c:input(1):sin()):neg() end)) end },
  { op "POW", function(_, c)
    local a, b = c:input(1), c:input(2)
    return c:tangent_out(plus(on(c:tangent(1), function(t) return t:mul(b):mul(a:pow(b:sub(1))) end),
      on(c:tangent(2), function(t) return t:mul(a:gt(0):where(c.out:mul(a:log()), 0)) end)))
  end },
  { op { "MAX", "MIN" }, function(_, c)
    local a, b = c:input(1), c:input(2)
    local a_wins = c.node.op == "MAX" and a:gt(b) or a:lt(b)
    local share_a = a_wins:where(1.0, a:eq(b):where(0.5, 0.0)):cast(a.dtype)
    return c:tangent_out(plus(on(c:tangent(1), function(t) return t:mul(share_a) end),
      on(c:tangent(2), function(t) return t:mul(share_a:neg():add(1)) end)))
  end },
  { op "FLOORMOD", function(_, c)
    local a, b = c:input(1), c:input(2)
    return c:tangent_out(plus(c:tangent(1), on(c:tangent(2), function(t)
      return t:mul(a:div(b):floor()):neg() end)))
  end },
  { op "WHERE", function(_, c)
    local cond = c:input(1)
    if c:tangent(2) == nil and c:tangent(3) == nil then return c:tangent_out(nil) end
    return c:tangent_out(cond:where(tangent_or_zero(c, 2), tangent_or_zero(c, 3)))
  end },
}

M.composites = {
  -- the kinks as in tcl.patterns.gradient (PyTorch's)
  relu = function(c) return c.inputs[1]:gt(0):where(c.tangents[1], 0) end,
  abs = function(c) return c.tangents[1]:mul(c.inputs[1]:sign()) end,
  clamp = function(c)
    local sum
    for i, mask in pairs(require("tcl.patterns.gradient").clamp_masks(c.inputs, c.extra)) do
      if c.tangents[i] then
        local part = mask:where(c.tangents[i], 0)
        sum = sum and sum:add(part) or part
      end
    end
    return sum
  end,
  conv2d = function(c) -- bilinear: conv(tx, w) + conv(x, tw)
    local e = c.extra
    local opts = { stride = e.stride, dilation = e.dilation, padding = e.pads }
    local x, w = c.inputs[1], c.inputs[2]
    return c.tangents[1]:conv2d(w, nil, opts):add(x:conv2d(c.tangents[2], nil, opts))
  end,
  -- sort's values: x's tangent moved like x's values (by the network tcl.api.sorting passes in)
  sort = function(c)
    return c.extra.sort_like(c.inputs[1], c.tangents[1], c.extra.axis, c.extra.descending)
  end,
}

return M
