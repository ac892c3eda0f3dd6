-- tcl.api.nodes — builds tensor-graph nodes (docs/design/encodings.md, "Tensor graph") for the
-- Tensor API. Layer: lua/tcl/api.
--
-- These builders take and return tensors, know each node's encoding and its result shape,
-- and skip nodes that would change nothing (a reshape to the same shape, a cast to the same
-- dtype). They trust their arguments: the user-facing functions check them first and name
-- themselves in the errors. Axes here are 0-based, as in node args.
local core = require "tcl.core"
local uop_helpers = require "tcl.uop"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local shapes = require "tcl.shape"
local variables = require "tcl.variables"
local transfers = require "tcl.schedule.transfers"

local wrap = class.wrap
local same = shapes.equal
local M = {}

-- Every node the API builds goes through here: the result's shape is checked first (at most
-- 2^53 elements, see tcl.shape), so no size arithmetic on a tensor's shape can overflow later.
-- The error names the user-facing function that is running. `checked`: the shape is one
-- already checked (a source's, or no larger in any dim), so the check is skipped. (Not for a
-- reduction: over an empty axis it turns 0 elements into the product of the other sizes.)
-- Autograd: the result needs gradients when an input does (t._needs_grad), unless gradients
-- are off (tcl.no_grad): then such an input enters the graph as DETACH(node), so no gradient
-- can reach it through this node, whichever graph later uses it.
local function node(op, dtype, inputs, arg, shape, device, checked)
  if not checked then
    local problem = shapes.problem(shape)
    if problem then check.fail(check.api_function(), "shape %s %s", check.shape_str(shape), problem) end
  end
  local sources, needs = {}, nil
  local watched = class.watch ~= nil
  for i, t in ipairs(inputs) do
    if watched then class.note_use(t) end -- tcl.jit's warm-up: state fn reads
    local u = t.uop
    if rawget(t, "_needs_grad") then
      if class.grad_enabled then needs = true else u = core.uop("DETACH", u.dtype, { u }) end
    end
    sources[i] = u
  end
  local out = wrap(core.uop(op, dtype, sources, arg), shape, device)
  if needs then rawset(out, "_needs_grad", true) end
  return out
end
M.node = node

local function ones_list(n)
  local list = {}
  for i = 1, n do list[i] = 1 end
  return list
end

--- A tensor of the given shape filled with one value: a scalar CONST broadcast by
--  RESHAPE {1, ...} + EXPAND (`checked`: the shape is known to be one tcl accepts).
function M.const(value, dtype, shape, device, checked)
  local scalar = wrap(uop_helpers.const(dtype, value), {}, device)
  if #shape == 0 then return scalar end
  return M.expand(M.reshape(scalar, ones_list(#shape), checked), shape, checked)
end

function M.reshape(t, shape, checked)
  if same(t._shape, shape) then return t end
  -- a reshape of a reshape is one reshape, unless gradients are taken: the inner reshape may
  -- be a leaf (a parameter is RESHAPE(BUFFER)) that the gradient must reach
  -- (node() reads only the input's node and its autograd flag)
  local device = t.device
  if t.uop.op == "RESHAPE" and not rawget(t, "_needs_grad") then t = { uop = t.uop.src[1] } end
  return node("RESHAPE", t.uop.dtype, { t }, shape, shape, device, checked)
end

--- out[i] = in[order[i]] (0-based axes).
function M.permute(t, order)
  local identity, shape = true, {}
  for i = 1, #order do
    shape[i] = t._shape[order[i] + 1]
    if order[i] ~= i - 1 then identity = false end
  end
  if identity then return t end
  return node("PERMUTE", t.uop.dtype, { t }, order, shape, t.device, true)
end

--- Grows size-1 dims to the sizes of `shape` (same number of dims; `checked`: a shape that
-- is known to be one tcl accepts).
function M.expand(t, shape, checked)
  if same(t._shape, shape) then return t end
  return node("EXPAND", t.uop.dtype, { t }, shape, shape, t.device, checked)
end

--- Pads with zeros; `amounts` is the flat {before0, after0, before1, after1, ...}, all >= 0.
function M.pad(t, amounts)
  local shape, any = {}, false
  for i = 1, #t._shape do
    local before, after = amounts[2 * i - 1], amounts[2 * i]
    shape[i] = variables.add(variables.add(t._shape[i], before), after)
    if before ~= 0 or after ~= 0 then any = true end
  end
  if not any then return t end
  return node("PAD", t.uop.dtype, { t }, amounts, shape, t.device)
end

--- Keeps the half-open window {start0, end0, start1, end1, ...} (0-based) of each dim.
function M.shrink(t, window)
  local shape, identity = {}, true
  for i = 1, #t._shape do
    local s, e = window[2 * i - 1], window[2 * i]
    shape[i] = variables.sub(e, s)
    if s ~= 0 or e ~= t._shape[i] then identity = false end
  end
  if identity then return t end
  return node("SHRINK", t.uop.dtype, { t }, window, shape, t.device, true)
end

--- Reverses the dims whose flag is 1.
function M.flip(t, flags)
  local any = false
  for i = 1, #flags do if flags[i] ~= 0 then any = true end end
  if not any then return t end
  return node("FLIP", t.uop.dtype, { t }, flags, M.copy_shape(t), t.device, true)
end

--- Reduces the 0-based axes with "ADD", "MUL" or "MAX"; the reduced dims become 1.
function M.reduce(t, op_name, axes)
  if #axes == 0 then return t end
  local shape = M.copy_shape(t)
  for _, a in ipairs(axes) do shape[a + 1] = 1 end
  return node("REDUCE_AXIS", t.uop.dtype, { t }, { op_name, axes }, shape, t.device)
end

--- An elementwise ALU node over same-shape tensors; dtype is the result's.
function M.alu(op, dtype, sources)
  return node(op, dtype, sources, nil, M.copy_shape(sources[1]), sources[1].device, true)
end

function M.cast(t, dtype)
  if rawequal(t.uop.dtype, dtype) then return t end
  return node("CAST", dtype, { t }, nil, M.copy_shape(t), t.device, true)
end

function M.contiguous(t)
  return node("CONTIGUOUS", t.uop.dtype, { t }, nil, M.copy_shape(t), t.device, true)
end

function M.clone(t)
  return node("COPY", t.uop.dtype, { t }, nil, M.copy_shape(t), t.device, true)
end

--- t's values on another device: a COPY whose arg names the device (tcl.schedule.transfers
-- runs it when the result is realized).
function M.to_device(t, device)
  transfers.copies_made = true
  return node("COPY", t.uop.dtype, { t }, device, M.copy_shape(t), device, true)
end

--- Broadcasts to `shape` (numpy rules, already checked): leading 1s by RESHAPE, then EXPAND.
function M.broadcast_to(t, shape)
  local have = t._shape
  if same(have, shape) then return t end
  if #have < #shape then
    local padded = ones_list(#shape - #have)
    for i = 1, #have do padded[#padded + 1] = have[i] end
    t = M.reshape(t, padded, true)
  end
  return M.expand(t, shape, true)
end

function M.copy_shape(t)
  return shapes.copy(t._shape)
end

--- A bool (rows x cols) mask, true where lo <= col - row <= hi (math.huge for no bound).
--  Built from movement ops only, so it stays lazy and fuses: a row vector V of width
--  W = rows + cols + 1 with V[q] = (lo <= q - rows <= hi), repeated `rows` times and read
--  back with a row stride of W - 1, which shifts each row one place to the right:
--  element (r, c) of the result is V[c + rows - r].
--  A tall mask (rows > cols) is built as the transpose of the wide one with the band
--  mirrored, so the intermediate row vector repeated min(rows, cols) times holds at most about
--  twice the mask's elements (see band_mask_fits).
--- A variable size's value as a 0-d int32 tensor (the last element of ARANGE(n + 1)): x / n
-- with n = T:bind(17) divides by 17 in this call and by the bound value in the next.
function M.size_value(n, device)
  local int = core.dtypes.int32
  local next_n = variables.add(n, 1)
  local last = M.shrink(M.node("ARANGE", int, {}, next_n, { next_n }, device), { n, next_n })
  return M.reshape(last, {})
end

-- The band mask for variable sizes or bounds (tcl.variables): col - row compared with lo and hi,
-- from two aranges (the strided trick above needs known sizes).
local function symbolic_band_mask(rows, cols, lo, hi, device)
  local int = core.dtypes.int32
  local r = M.expand(M.reshape(M.node("ARANGE", int, {}, rows, { rows }, device), { rows, 1 }), { rows, cols })
  local c = M.expand(M.reshape(M.node("ARANGE", int, {}, cols, { cols }, device), { 1, cols }), { rows, cols })
  local diff = M.alu("SUB", int, { c, r })
  local function bound(v) -- a variable bound: its value as a tensor (ARANGE(v + 1)'s last element)
    if not variables.is_symbolic(v) then return M.const(v, int, { rows, cols }, device) end
    local offset = math.max(0, -variables.min(v)) -- a diagonal may be negative: shifted to count from 0
    local value = M.size_value(variables.add(v, offset), device)
    if offset > 0 then value = M.alu("SUB", int, { value, M.const(offset, int, {}, device) }) end
    return M.expand(M.reshape(value, { 1, 1 }), { rows, cols })
  end
  local mask
  if lo ~= -math.huge then mask = M.alu("CMPLT", core.dtypes.bool, { diff, bound(lo) }):logical_not() end
  if hi ~= math.huge then
    local upper = M.alu("CMPLT", core.dtypes.bool, { bound(hi), diff }):logical_not()
    mask = mask and mask:logical_and(upper) or upper
  end
  return mask or M.const(true, core.dtypes.bool, { rows, cols }, device)
end

function M.band_mask(rows, cols, lo, hi, device)
  local bool = core.dtypes.bool
  if variables.is_symbolic(rows) or variables.is_symbolic(cols) or variables.is_symbolic(lo)
      or variables.is_symbolic(hi) then
    return symbolic_band_mask(rows, cols, lo, hi, device)
  end
  if rows == 0 or cols == 0 then return M.const(false, bool, { rows, cols }, device) end
  if rows > cols then
    -- (r, c) is in the band when -hi <= r - c <= -lo: element (c, r) of the wide mask
    return M.permute(M.band_mask(cols, rows, -hi, -lo, device), { 1, 0 })
  end
  local width = rows + cols + 1
  local first = math.max(0, math.min(width, rows + (lo == -math.huge and -width or lo)))
  local last = math.max(first, math.min(width, rows + (hi == math.huge and width or hi) + 1))
  local v = M.const(true, bool, { last - first }, device)
  v = M.pad(v, { first, width - last })
  local repeated = M.expand(M.reshape(v, { 1, width }), { rows, width })
  local flat = M.reshape(repeated, { rows * width })
  local strided = M.reshape(M.shrink(flat, { 0, rows * (width - 1) }), { rows, width - 1 })
  return M.shrink(strided, { 0, rows, rows, rows + cols })
end

--- Whether band_mask(rows, cols) fits: its intermediate of min * (rows + cols + 1) elements
--  is at most 2^53 (no product past 2^53 is formed).
function M.band_mask_fits(rows, cols)
  if variables.is_symbolic(rows) or variables.is_symbolic(cols) then -- built from two aranges
    return shapes.problem({ variables.max(rows), variables.max(cols) }) == nil
  end
  local short = math.min(rows, cols)
  return short == 0 or rows + cols + 1 <= shapes.MAX_NUMEL // short
end

M.numel = shapes.numel
M.same_shape = same

return M
