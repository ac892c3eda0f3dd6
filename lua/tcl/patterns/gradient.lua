-- tcl.patterns.gradient — reverse-mode derivative rules: one rule per op of the tensor graph
-- (docs/design/encodings.md, "Tensor graph"), matched by the rewrite engine at each node of the
-- reverse graph (tcl.api.gradients walks it, last node first). Edit a rule here to change a
-- derivative; the next run uses it.
--
-- A rule gets the bindings and a context `c`:
--   c.grad       the gradient of the loss with respect to the node (a Tensor of its shape)
--   c:input(i)   source i of the node as a Tensor;  c.out  the node itself as a Tensor
--   c.node       the node (arg, dtype, sources)
--   c.graph      the graph builders that take node args as they are (0-based axes, flat pad
--                and window lists): reshape, permute, expand, pad, shrink, flip, reduce, cast
-- and returns c:grads(g1, g2, ...): the gradient for each source in order (nil: none, which
-- counts as zero). Only float sources receive gradients, so integer and bool tensors never
-- get one. Broadcasting is explicit in the graph (RESHAPE + EXPAND), so the EXPAND rule, a
-- sum over the expanded dims, undoes it. Every gradient is built from Tensor ops, so it is a
-- graph like any other and can itself be differentiated (higher-order gradients).
--
-- exp, sigmoid, tanh, silu, softplus and elu are one node each in the tensor graph (EXP ...
-- ELU), with one rule each below; tcl.patterns.transcendental decomposes them only when a
-- kernel is lowered.
--
-- `composites` holds the derivatives of functions that are several nodes but whose derivative
-- is not that of their nodes: the kinks of relu, abs and clamp (PyTorch's values there),
-- conv2d (its transposed convolution), sort (the network run backwards), the decompositions of
-- tcl.api.linalg (closed forms). The Tensor API marks
-- such a result with its function's name (tcl.api.gradients.mark); the engine then uses the
-- rule here for the whole function and does not look inside it. A rule gets c.inputs
-- (Tensors), c.out, c.grad and c.extra (the function's numeric arguments) and returns the list
-- of input gradients.
local P = require "tcl.pattern"
local shape = require "tcl.shape"
local devices = require "tcl.devices"
local conv_phases = require "tcl.conv_phases"

local LN_2 = math.log(2)

local M = {}

local function op(name) return P.op(name) end

-- The gradient of a source that is a broadcast or reduced form of the node: shaped back.
local function in_shape(c, i) return shape.shared(c.node.src[i or 1]) end

-- g for a source reduced over axes: the gradient spread over the reduced elements.
local function expand_back(c, g) return c.graph.expand(g, in_shape(c)) end

local function where(cond, a, b) return cond:where(a, b) end

M.rules = P.rules {
  -- leaves and stops: no sources to pass a gradient to
  { op { "BUFFER", "CONST", "DEFINE_VAR", "BIND" }, function(_, c) return c:grads() end },
  { op { "DETACH", "ASSIGN", "BITCAST" }, function(_, c) return c:grads() end },
  -- comparisons, logic, integer arithmetic, random bits: piecewise constant or not real-valued
  { op { "CMPLT", "CMPNE", "CMPEQ", "AND", "OR", "XOR", "SHL", "SHR", "IDIV", "MOD", "FLOORDIV", "TRUNC",
    "THREEFRY" }, function(_, c) return c:grads() end },

  -- movement: the gradient moves back
  { op "RESHAPE", function(_, c) return c:grads(c.graph.reshape(c.grad, in_shape(c))) end },
  { op "PERMUTE", function(_, c)
    local order, inverse = c.node.arg, {}
    for i, o in ipairs(order) do inverse[o + 1] = i - 1 end
    return c:grads(c.graph.permute(c.grad, inverse))
  end },
  { op "EXPAND", function(_, c)
    local from, axes = in_shape(c), {}
    for i, size in ipairs(c.node.arg) do
      if from[i] ~= size then axes[#axes + 1] = i - 1 end
    end
    return c:grads(c.graph.reduce(c.grad, "ADD", axes))
  end },
  { op "PAD", function(_, c)
    local amounts, from, window = c.node.arg, in_shape(c), {}
    for i = 1, #from do
      window[2 * i - 1], window[2 * i] = amounts[2 * i - 1], amounts[2 * i - 1] + from[i]
    end
    return c:grads(c.graph.shrink(c.grad, window))
  end },
  { op "SHRINK", function(_, c)
    local window, from, amounts = c.node.arg, in_shape(c), {}
    for i = 1, #from do
      amounts[2 * i - 1], amounts[2 * i] = window[2 * i - 1], from[i] - window[2 * i]
    end
    return c:grads(c.graph.pad(c.grad, amounts))
  end },
  { op "FLIP", function(_, c) return c:grads(c.graph.flip(c.grad, c.node.arg)) end },
  { op "CONTIGUOUS", function(_, c) return c:grads(c.grad) end },
  -- a copy to another device (arg: its name) sends the gradient back to the source's device
  -- (the engine labels each input with the device it is computed on)
  { op "COPY", function(_, c)
    if type(c.node.arg) == "string" then return c:grads(c.grad:to(c:input(1).device)) end
    return c:grads(c.grad)
  end },
  { op "CAST", function(_, c)
    local x = c.node.src[1]
    if not x.dtype.is_float then return c:grads() end
    return c:grads(c.graph.cast(c.grad, x.dtype))
  end },

  -- reductions (arg {op, axes}); the reduced dims of grad and out are 1
  { op "REDUCE_AXIS", function(_, c)
    local kind, axes = c.node.arg[1], c.node.arg[2]
    if kind == "ADD" then return c:grads(expand_back(c, c.grad)) end
    local x = c:input(1)
    if kind == "MUL" then -- d prod / d x_i = prod / x_i (undefined where x_i = 0)
      return c:grads(expand_back(c, c.grad:mul(c.out)):div(x))
    end
    -- MAX: the gradient goes to the maxima, shared equally among ties
    local hit = x:eq(expand_back(c, c.out)):cast(x.dtype)
    local count = c.graph.reduce(hit, "ADD", axes)
    return c:grads(hit:mul(expand_back(c, c.grad:div(count))))
  end },

  -- arithmetic
  { op "ADD", function(_, c) return c:grads(c.grad, c.grad) end },
  { op "SUB", function(_, c) return c:grads(c.grad, c.grad:neg()) end },
  { op "NEG", function(_, c) return c:grads(c.grad:neg()) end },
  { op "MUL", function(_, c) return c:grads(c.grad:mul(c:input(2)), c.grad:mul(c:input(1))) end },
  { op "FDIV", function(_, c)
    local b = c:input(2)
    return c:grads(c.grad:div(b), c.grad:mul(c.out):div(b):neg())
  end },
  { op "RECIPROCAL", function(_, c) return c:grads(c.grad:mul(c.out):mul(c.out):neg()) end },
  { op "SQRT", function(_, c) return c:grads(c.grad:div(c.out:mul(2))) end },
  { op "EXP2", function(_, c) return c:grads(c.grad:mul(c.out):mul(LN_2)) end },
  { op "LOG2", function(_, c) return c:grads(c.grad:div(c:input(1):mul(LN_2))) end },
  { op "EXP", function(_, c) return c:grads(c.grad:mul(c.out)) end },
  { op "SIGMOID", function(_, c) return c:grads(c.grad:mul(c.out):mul(c.out:neg():add(1))) end },
  { op "TANH", function(_, c) return c:grads(c.grad:mul(c.out:mul(c.out):neg():add(1))) end },
  { op "SILU", function(_, c) -- x s(x): s + x s (1 - s)
    local x = c:input(1)
    local s = x:sigmoid()
    return c:grads(c.grad:mul(s:add(x:mul(s):mul(s:neg():add(1)))))
  end },
  { op "SOFTPLUS", function(_, c) return c:grads(c.grad:mul(c:input(1):sigmoid())) end },
  { op "ELU", function(_, c) -- x > 0: 1 (and at 0 the other side's, PyTorch's); else e^x = y + 1
    local x = c:input(1)
    return c:grads(c.grad:mul(where(x:gt(0), 1.0, c.out:add(1)):cast(x.dtype)))
  end },
  { op "SIN", function(_, c) return c:grads(c.grad:mul(c:input(1):cos())) end },
  { op "COS", function(_, c) return c:grads(c.grad:mul(c:input(1):sin()):neg()) end },
  { op "POW", function(_, c)
    local a, b = c:input(1), c:input(2)
    -- d/da = b a^(b-1); d/db = a^b ln a, taken as 0 where a <= 0 (undefined there)
    local da = c.grad:mul(b):mul(a:pow(b:sub(1)))
    local db = c.grad:mul(where(a:gt(0), c.out:mul(a:log()), 0))
    return c:grads(da, db)
  end },
  { op { "MAX", "MIN" }, function(_, c)
    local a, b = c:input(1), c:input(2)
    local a_wins = c.node.op == "MAX" and a:gt(b) or a:lt(b)
    -- ties share the gradient (as tinygrad and torch.maximum do)
    local share_a = where(a_wins, 1.0, where(a:eq(b), 0.5, 0.0)):cast(a.dtype)
    return c:grads(c.grad:mul(share_a), c.grad:mul(share_a:neg():add(1)))
  end },
  { op "FLOORMOD", function(_, c) -- a - b floor(a / b)
    local a, b = c:input(1), c:input(2)
    return c:grads(c.grad, c.grad:mul(a:div(b):floor()):neg())
  end },
  { op "WHERE", function(_, c)
    local cond = c:input(1)
    return c:grads(nil, where(cond, c.grad, 0), where(cond, 0, c.grad))
  end },
}

-- The phases of conv2d's input gradient along one dim (tcl.conv_phases; stride s, dilation d,
-- kernel size k, leading padding p, o outputs of the forward): input row i = j * s + r is
-- padded row i + p, of residue (r + p) mod s, so it is reached by that residue's taps, from
-- the output rows j + (r + p) div s - m. Returns per phase r = 0..s-1 (rows j = 0..rows-1) nil
-- (no tap reaches it) or its taps with pad = {before, after} of g (negative crops) for a
-- stride-1 correlation with the flipped taps.
local function gradient_phases(s, d, k, p, o, rows)
  local list = {}
  for r = 0, s - 1 do
    local phase = conv_phases.taps(s, d, k, (r + p) % s)
    if phase then
      local shift = (r + p) // s
      phase.pad = { phase.offset + (phase.taps - 1) * phase.dilation - shift, rows - o - phase.offset + shift }
      list[r + 1] = phase
    end
  end
  return list
end

--- conv2d's input gradient: g (n, cout, oh, ow) through the transposed convolution with w
-- (cout, cin, kh, kw) onto an input of spatial size in_size (e: the forward's stride,
-- dilation and pads): per phase (gradient_phases) a stride-1 convolution of g with the
-- phase's flipped taps, channels swapped; with a stride, the phases (each of
-- ceil(size / stride) rows) interleaved and cut to the input. Also Tensor.conv_transpose2d's.
function M.conv2d_input_grad(g, w, in_size, e)
  local n = g.shape[1]
  local _, cin, kh, kw = table.unpack(w.shape)
  local sh, sw = e.stride[1], e.stride[2]
  local rows_h, rows_w = (in_size[1] + sh - 1) // sh, (in_size[2] + sw - 1) // sw
  local ph = gradient_phases(sh, e.dilation[1], kh, e.pads[1][1], g.shape[3], rows_h)
  local pw = gradient_phases(sw, e.dilation[2], kw, e.pads[2][1], g.shape[4], rows_w)
  local interleaved
  for rh = 1, sh do
    for rw = 1, sw do
      local a, b = ph[rh], pw[rw]
      local phase
      if a and b then
        local taps = w:slice({}, {}, conv_phases.kernel_slice(a), conv_phases.kernel_slice(b))
        phase = g:pad({ {}, {}, a.pad, b.pad })
          :conv2d(taps:flip({ 3, 4 }):permute(2, 1, 3, 4), nil, { dilation = { a.dilation, b.dilation } })
      end
      if phase and sh == 1 and sw == 1 then return phase end
      if phase then
        -- stored: left to fusion, the interleaving kernel would compute every phase's
        -- reduction at every element and keep one. Placed at every sh-th row and sw-th
        -- column by a pad of two size-1 dims; the phases are summed.
        local placed = phase:contiguous():reshape(n, cin, rows_h, 1, rows_w, 1)
          :pad({ {}, {}, {}, { rh - 1, sh - rh }, {}, { rw - 1, sw - rw } })
        interleaved = interleaved and interleaved:add(placed) or placed
      end
    end
  end
  return interleaved:reshape(n, cin, rows_h * sh, rows_w * sw):slice({}, {}, { 1, in_size[1] }, { 1, in_size[2] })
end

-- conv2d (groups 1; extra: stride, dilation, pads = {{before, after}, ...}). The input's
-- gradient is the transposed convolution (conv2d_input_grad). The weight's gradient correlates
-- x with g: a convolution of x's channels (as the batch) with g (as the filters), the
-- forward's dilation as its stride and the forward's stride as its dilation, cut to the
-- kernel's size.
--
-- On the CPU (and EMU, which schedules alike), a weight gradient with at least
-- WEIGHT_GRAD_ROWS values per output channel (cin x kh x kw) is computed channels-last: g
-- copied to (n, oh, ow, cout) and the result stored as (kh, kw, cin, cout), then viewed as
-- (cout, cin, kh, kw). The output channel is then the unit-stride axis of both the store and
-- g, which the register tile (tcl.heuristics.default step 1) takes as its vector lanes, with
-- rows over cin: a matmul (M = cout, N = cin kh kw, K = n oh ow) at a matmul's rate. In
-- (cout, cin, kh, kw) the tile's lanes were kw (3 of 16) and its rows read g's channels oh ow
-- apart, one scalar each (the CNN's second conv, 32 -> 64 3x3 on 13x13, batch 128: 89 -> 34
-- ms at 1 thread, the copy of g 0.75 ms of it). A narrow one (the first conv, cin 1: 9 values
-- per channel) keeps the direct form: the copy would cost more than the tile gains.
M.WEIGHT_GRAD_ROWS = 64
local CHANNELS_LAST_DEVICES = { CPU = true, EMU = true }

local function conv2d_grads(c)
  local x, w, g, e = c.inputs[1], c.inputs[2], c.grad, c.extra
  local _, cin, h, wd = table.unpack(x.shape)
  local _, _, kh, kw = table.unpack(w.shape)
  local dx = M.conv2d_input_grad(g, w, { h, wd }, e)
  local opts = { padding = e.pads, stride = e.dilation, dilation = e.stride }
  local dw
  if cin * kh * kw >= M.WEIGHT_GRAD_ROWS and CHANNELS_LAST_DEVICES[devices.base(g.device)] then
    local g_last = g:permute(1, 3, 4, 2):contiguous():permute(4, 1, 2, 3) -- (cout, n, oh, ow), cout unit-stride
    dw = x:permute(2, 1, 3, 4):conv2d(g_last, nil, opts):slice({}, {}, { 1, kh }, { 1, kw })
    dw = dw:permute(3, 4, 1, 2):contiguous():permute(4, 3, 1, 2)
  else
    dw = x:permute(2, 1, 3, 4):conv2d(g:permute(2, 1, 3, 4), nil, opts)
    dw = dw:slice({}, {}, { 1, kh }, { 1, kw }):permute(2, 1, 3, 4)
  end
  assert(dx.shape[2] == cin and dx.shape[3] == h and dx.shape[4] == wd, "conv2d gradient: input shape")
  return { dx, dw }
end

--- The masks of clamp's derivative, PyTorch's (c.inputs: x and the bounds given; extra.lo and
-- extra.hi: their positions): x passes its gradient where lo <= x <= hi (inclusive), a bound
-- where it is the result (lo: x < lo <= hi; hi: max(x, lo) > hi, so hi wins when lo > hi).
function M.clamp_masks(inputs, extra)
  local x = inputs[1]
  local lo, hi = extra.lo and inputs[extra.lo], extra.hi and inputs[extra.hi]
  local masks, raised = {}, lo and x:maximum(lo) or x
  local inside = lo and x:ge(lo) or nil
  if hi then inside = inside and inside:logical_and(x:le(hi)) or x:le(hi) end
  masks[1] = inside
  if lo then masks[extra.lo] = hi and x:lt(lo):logical_and(raised:le(hi)) or x:lt(lo) end
  if hi then masks[extra.hi] = raised:gt(hi) end
  return masks
end

M.composites = {
  conv2d = conv2d_grads,
  -- the kinks follow PyTorch: relu'(0) = 0, abs'(0) = sign(0) = 0, clamp as clamp_masks says
  relu = function(c) return { c.inputs[1]:gt(0):where(c.grad, 0) } end,
  abs = function(c) return { c.grad:mul(c.inputs[1]:sign()) } end,
  clamp = function(c)
    local grads = {}
    for i, mask in pairs(M.clamp_masks(c.inputs, c.extra)) do grads[i] = mask:where(c.grad, 0) end
    return grads
  end,
  -- sort's values (inputs: x and the 1-based indices): each value's gradient goes back to the
  -- element it came from, by the sorting network itself sorting the gradient by the indices
  -- (tcl.api.sorting passes it in extra: rules may not require the API)
  sort = function(c)
    return { c.extra.unsort(c.grad, c.inputs[2], c.extra.axis) }
  end,
  -- a function that brings its own vector-Jacobian product in extra.vjp(c) (tcl.api.linalg:
  -- closed forms where the graph is an elimination, whose derivative would be another one)
  vjp = function(c) return c.extra.vjp(c) end,
}

return M
