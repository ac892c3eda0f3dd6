-- tcl.api.reduce — reductions (sum, mean, max, argmax, var, ...), softmax family and cumsum.
-- Layer: lua/tcl/api.
--
-- `dim` is nil (every dim), a dim or a table of dims (1-based, negative from the end);
-- `keepdim` keeps the reduced dims as size 1. Each reduction is one REDUCE_AXIS node with
-- "ADD", "MUL" or "MAX" over 0-based axes (it keeps the reduced dims as 1), followed by a
-- RESHAPE that drops them unless keepdim. min is max of an order-reversing map, argmax a
-- max over a mask of reversed positions.
local variables = require "tcl.variables"
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"
local elementwise = require "tcl.api.elementwise"

local fail = check.fail
local dtypes = core.dtypes
local MAX_NUMEL = require("tcl.shape").MAX_NUMEL
local M = {}

local tensor_arg = check.tensor

local function keepdim_arg(fn, keepdim)
  if keepdim ~= nil and type(keepdim) ~= "boolean" then
    fail(fn, "keepdim must be a boolean, got %s", check.type_name(keepdim))
  end
  return keepdim == true
end

-- Drops the (size-1) reduced axes unless keepdim.
local function finish(t, axes, keepdim)
  if keepdim or #axes == 0 then return t end
  local dropped, shape = {}, {}
  for _, a in ipairs(axes) do dropped[a] = true end
  for i, s in ipairs(t._shape) do
    if not dropped[i - 1] then shape[#shape + 1] = s end
  end
  return nodes.reshape(t, shape)
end

-- Number of elements folded into each result element.
local function count_of(x, axes)
  local n = 1
  for _, a in ipairs(axes) do n = n * x._shape[a + 1] end
  return n
end

-- The checked axes and keepdim of a reduction call.
local function reduction_args(fn, x, dim, keepdim)
  tensor_arg(fn, x)
  return check.dims(fn, dim, x._shape), keepdim_arg(fn, keepdim)
end

-- Sum over axes in dtype `acc` (keeps the axes).
local function sum_as(x, axes, acc)
  return nodes.reduce(nodes.cast(x, acc), "ADD", axes)
end

-- An order-reversing bijection of x's dtype: -x for floats, bitwise not for integers (no
-- overflow at the minimum), logical not for bool. min(x) = inverse(max(inverse(x))).
local function inverse(x)
  local dt = x.uop.dtype
  if dt.is_float then return nodes.alu("NEG", dt, { x }) end
  if dt.is_bool then return x:logical_not() end
  local all_ones = dt.is_unsigned and dt.max or -1
  if dt.name == "uint64" then all_ones = -1 end -- uint64's max is stored as its bits, -1
  return nodes.alu("XOR", dt, { x, nodes.const(all_ones, dt, x._shape, x.device) })
end

--- Sum; ints and bool accumulate in and give int64 (uint64 stays), float16/bfloat16 accumulate
--  in float32 and go back.
function M.sum(x, dim, keepdim)
  local axes, keep = reduction_args("sum", x, dim, keepdim)
  local dt = x.uop.dtype
  local total = sum_as(x, axes, rules.sum_accumulator(dt))
  return finish(nodes.cast(total, rules.sum_result(dt)), axes, keep)
end

--- Sum over dim in dtype acc, without keepdim (matmul's and conv2d's sums: their callers cast
--  the result, and their integers keep their width, rules.product_accumulator).
function M._sum_in(x, dim, acc)
  local axes, keep = reduction_args("sum", x, dim, false)
  return finish(sum_as(x, axes, acc), axes, keep)
end

--- Product; float16 and bfloat16 multiply in float32 and go back (their partial products
--  overflow long before the result may), ints and bool multiply in and give int64 (uint64
--  stays), as PyTorch's.
function M.prod(x, dim, keepdim)
  local axes, keep = reduction_args("prod", x, dim, keepdim)
  local dt = x.uop.dtype
  if dt.is_float and dt.itemsize < 4 then
    return finish(nodes.cast(nodes.reduce(nodes.cast(x, dtypes.float32), "MUL", axes), dt), axes, keep)
  end
  if dt.is_bool or dt.is_int then x = nodes.cast(x, rules.integer_accumulator(dt)) end
  return finish(nodes.reduce(x, "MUL", axes), axes, keep)
end

-- arg_reduce (argmax, argmin) is defined below; max and min with one dim return its indices.
local arg_reduce

--- The maximum over dim (nil: every dim; a table: those dims). With one dim (a number) also
--  returns the 1-based int32 indices of the first maxima (argmax's), as PyTorch's (values,
--  indices): lazy, computed only if used.
function M.max(x, dim, keepdim)
  local axes, keep = reduction_args("max", x, dim, keepdim)
  local values = finish(nodes.reduce(x, "MAX", axes), axes, keep)
  if type(dim) ~= "number" then return values end
  return values, arg_reduce("max", x, dim, keep)
end

function M.min(x, dim, keepdim)
  local axes, keep = reduction_args("min", x, dim, keepdim)
  local reversed = inverse(x)
  local values = finish(inverse(nodes.reduce(reversed, "MAX", axes)), axes, keep)
  if type(dim) ~= "number" then return values end
  return values, arg_reduce("min", x, dim, keep, reversed)
end

--- Mean; integer tensors give float32.
function M.mean(x, dim, keepdim)
  local axes, keep = reduction_args("mean", x, dim, keepdim)
  local dt = x.uop.dtype
  local total = sum_as(x, axes, rules.sum_accumulator(dt))
  local out = rules.float_of(dt)
  return finish(nodes.cast(total:div(count_of(x, axes)), out), axes, keep)
end

-- var under the name fn ("var" or "std").
local function var_as(fn, x, dim, keepdim, correction)
  local axes, keep = reduction_args(fn, x, dim, keepdim)
  correction = correction == nil and 1 or check.number(fn, "correction", correction)
  local xf = nodes.cast(x, rules.float_of(x.uop.dtype))
  local n = count_of(x, axes)
  local centered = xf:sub(M.mean(xf, dim, true))
  local squares = nodes.cast(sum_as(centered:mul(centered), axes, rules.sum_accumulator(xf.uop.dtype)), xf.uop.dtype)
  return finish(squares:div(math.max(0, n - correction)), axes, keep)
end

--- Variance with `correction` (default 1, Bessel's): sum((x - mean)^2) / max(0, n - correction).
function M.var(x, dim, keepdim, correction)
  return (var_as("var", x, dim, keepdim, correction))
end

function M.std(x, dim, keepdim, correction)
  return var_as("std", x, dim, keepdim, correction):sqrt()
end

-- The single reduced dim of argmax/argmin: nil flattens.
function arg_reduce(fn, x, dim, keepdim, values)
  tensor_arg(fn, x)
  local keep = keepdim_arg(fn, keepdim)
  if dim == nil then
    return arg_reduce(fn, nodes.reshape(x, { nodes.numel(x._shape) }), 1, false, values and
      nodes.reshape(values, { nodes.numel(x._shape) }))
  end
  local axis = check.dim(fn, dim, x._shape)
  local n = x._shape[axis + 1]
  if n == 0 then fail(fn, "cannot take %s over dim %d of size 0 in %s", fn, axis + 1, check.shape_str(x._shape)) end
  values = values or x
  local is_max = values:eq(nodes.reduce(values, "MAX", { axis }))
  -- NaN counts as the extreme, as in PyTorch: MAX propagates NaN, so a NaN maximum means
  -- the candidates are the NaNs (which never equal the maximum)
  if values.uop.dtype.is_float then is_max = is_max:logical_or(values:ne(values)) end
  -- position p (0-based) scores n - p: the largest score among the maxima is the first one
  local shape = {}
  for i = 1, #x._shape do shape[i] = 1 end
  shape[axis + 1] = n
  local scores, top
  if variables.is_symbolic(n) then -- a variable size: its value as a tensor
    scores = nodes.size_value(n, x.device):sub(class.Tensor.arange(n, { device = x.device })):reshape(shape)
    top = nodes.size_value(variables.add(n, 1), x.device)
  else
    scores = class.Tensor.arange(n, 0, -1, { device = x.device }):reshape(shape)
    top = n + 1
  end
  local best = nodes.reduce(is_max:where(scores, 0), "MAX", { axis })
  if not variables.is_symbolic(n) then top = nodes.const(top, dtypes.int32, best._shape, x.device) end
  return finish(top:sub(best), { axis }, keep)
end

--- The 1-based int32 index of the first maximum along dim (nil: of the flattened tensor, a
--  0-d result whatever keepdim says, as in tinygrad).
function M.argmax(x, dim, keepdim)
  return arg_reduce("argmax", x, dim, keepdim)
end

function M.argmin(x, dim, keepdim)
  tensor_arg("argmin", x)
  return arg_reduce("argmin", x, dim, keepdim, inverse(x))
end

function M.any(x, dim, keepdim)
  local axes, keep = reduction_args("any", x, dim, keepdim)
  return finish(nodes.reduce(x:bool(), "MAX", axes), axes, keep)
end

function M.all(x, dim, keepdim)
  local axes, keep = reduction_args("all", x, dim, keepdim)
  return finish(nodes.reduce(x:logical_not(), "MAX", axes):logical_not(), axes, keep)
end

-- max over axes with infinities replaced by 0: subtracting it keeps exp finite, and
-- all -inf (or +inf) rows still give -inf (+inf) instead of NaN. (softmax subtracts the
-- plain max: a row of -inf has no softmax, NaN as in torch.)
local function safe_max(x, axes)
  local m = nodes.reduce(x, "MAX", axes)
  return m:isinf():where(0, m)
end

--- log(sum(exp(x))) along dim: m + log(sum(exp(x - m))) with m the max. Max error 2 ulp in
-- float32 (Tensor.ULP_BOUNDS.logsumexp, in tcl.api.elementwise; measured on rows of 16 from
-- [-1, 1] to [-100, 100] and near exp's overflow).
function M.logsumexp(x, dim, keepdim)
  local axes, keep = reduction_args("logsumexp", x, dim, keepdim)
  x = nodes.cast(x, rules.float_of(x.uop.dtype))
  local m = safe_max(x, axes)
  local lse = nodes.reduce(x:sub(m):exp(), "ADD", axes):log():add(m)
  return finish(lse, axes, keep)
end

--- exp(x) / sum(exp(x)) along dim (default -1). Its error is mostly that of x - max rounded to
-- float32, which exp multiplies by |x - max|: a relative error of about (4 + |x - max|) 2^-23.
-- Within that, the exponential is exp2((x - max) log2 e) (elementwise._exp_base2): three ops,
-- so that the weights stay cheap to recompute and attention's softmax fuses into weights @
-- values (tcl.schedule.realize_points), as in tinygrad. The division is e * (1 / sum): one
-- reciprocal per row (the linearizer places it outside the row's store loop) and a multiply
-- per element, instead of a division per element (on x86 a vector division costs about as
-- much as the whole exp polynomial). That rounds twice: at most 1 ulp more than e / sum.
function M.softmax(x, dim)
  tensor_arg("softmax", x)
  local axes = #x._shape == 0 and {} or check.dims("softmax", dim or -1, x._shape)
  x = nodes.cast(x, rules.float_of(x.uop.dtype))
  local e = elementwise._exp_base2(x:sub(nodes.reduce(x, "MAX", axes)))
  return e:mul(nodes.reduce(e, "ADD", axes):reciprocal())
end

--- x - max - log(sum(exp(x - max))) along dim (default -1): an absolute error of about
-- (4 + |result|) 2^-23; the largest entries, max - logsumexp near 0, have no relative accuracy
-- (a log1p of the other terms' sum would give them that).
function M.log_softmax(x, dim)
  tensor_arg("log_softmax", x)
  local axes = #x._shape == 0 and {} or check.dims("log_softmax", dim or -1, x._shape)
  x = nodes.cast(x, rules.float_of(x.uop.dtype))
  local shifted = x:sub(nodes.reduce(x, "MAX", axes))
  return shifted:sub(nodes.reduce(shifted:exp(), "ADD", axes):log())
end

--- Running sum along dim (default 1): out[i] = sum of x[j] for j <= i, as a masked sum over
--  an (n x n) lower-triangular mask (lazy, fused into one kernel).
function M.cumsum(x, dim)
  tensor_arg("cumsum", x)
  local dt = x.uop.dtype
  if #x._shape == 0 then return nodes.cast(x, rules.sum_result(dt)) end
  local axis = check.dim("cumsum", dim or 1, x._shape)
  local n = x._shape[axis + 1]
  -- every element of x meets the n x n mask: numel * n elements, and the mask's own
  local numel = nodes.numel(x._shape)
  if numel == 0 then return nodes.const(0, rules.sum_result(dt), nodes.copy_shape(x), x.device) end
  if numel > MAX_NUMEL // n or not nodes.band_mask_fits(n, n) then
    fail("cumsum", "a running sum over dim %d of size %d of %s needs more than 2^53 elements", axis + 1, n,
      check.shape_str(x._shape))
  end
  -- x[j] along a new inner dim: (..., 1, n, ...), the outer dim (i) to be broadcast
  local inner_shape = nodes.copy_shape(x)
  table.insert(inner_shape, axis + 1, 1)
  check.shape_fits("cumsum", inner_shape) -- one dim more than x
  local inner = nodes.reshape(nodes.cast(x, rules.sum_accumulator(dt)), inner_shape)
  local mask_shape = {}
  for i = 1, #inner_shape do mask_shape[i] = 1 end
  mask_shape[axis + 1], mask_shape[axis + 2] = n, n
  local lower = nodes.reshape(nodes.band_mask(n, n, -math.huge, 0, x.device), mask_shape)
  local total = nodes.reduce(lower:where(inner, 0), "ADD", { axis + 1 })
  return nodes.cast(nodes.reshape(total, nodes.copy_shape(x)), rules.sum_result(dt))
end

return M
