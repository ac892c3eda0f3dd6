-- tcl.api.scans — topk and the running reductions beyond cumsum: cumprod, cummax, cummin,
-- logcumsumexp, and norm. The running ones are, like cumsum, one reduction over an (n x n)
-- lower-triangular mask along dim (lazy, fused, differentiated by autograd); topk is the stable
-- sort narrowed to k. Indices are 1-based, like sort's and argmax's. Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"

local fail, is_tensor = check.fail, class.is_tensor
local M = {}

local function tensor_arg(fn, x)
  if not is_tensor(x) then fail(fn, "expected a Tensor, got %s", check.type_name(x)) end
  return x
end

--- values, indices: the k largest (smallest when largest is false) entries along dim (default
--  -1), sorted; ties keep the lower index first (torch's stable order); indices 1-based int64.
function M.topk(x, k, dim, largest)
  local fn = "topk"
  tensor_arg(fn, x)
  k = check.integer(fn, "k", k)
  if #x._shape == 0 then x = x:reshape({ 1 }) end
  local axis = check.dim(fn, dim or -1, x._shape) + 1
  local n = x._shape[axis]
  if k < 0 or k > n then fail(fn, "k = %d is outside 0..%d (the size of dim %d)", k, n, axis) end
  if largest ~= nil and type(largest) ~= "boolean" then
    fail(fn, "largest must be a boolean, got %s", check.type_name(largest))
  end
  local values, indices = x:sort(axis, largest ~= false)
  return values:narrow(axis, 1, k), indices:narrow(axis, 1, k):cast("int64")
end

-- x viewed (..., 1, n, ...) against the mask j <= i (..., n, n, ...): the masked view of x's
-- prefixes (dim axis + 1 is i, axis + 2 is j) with `fill` outside, and the view's j positions.
local function prefixes(fn, x, dim, fill)
  tensor_arg(fn, x)
  if #x._shape == 0 then x = x:reshape({ 1 }) end
  local axis = check.dim(fn, dim or 1, x._shape) + 1
  local n = x._shape[axis]
  local inner = x:unsqueeze(axis) -- (..., 1, n, ...): j along axis + 1
  local view_i, view_j = {}, {}
  for d = 1, #x._shape + 1 do view_i[d], view_j[d] = 1, 1 end
  view_i[axis], view_j[axis + 1] = n, n
  local i = class.Tensor.arange(1, n + 1, { dtype = "int64", device = x.device }):reshape(view_i)
  local j = class.Tensor.arange(1, n + 1, { dtype = "int64", device = x.device }):reshape(view_j)
  local mask = j:le(i)
  return class.Tensor.where(mask, inner, fill), axis, mask, j
end

--- Running product along dim (default 1): out[i] = x[1] * ... * x[i]. Zeros are exact, and so
--  is its gradient (autograd differentiates the masked product).
function M.cumprod(x, dim)
  local masked, axis = prefixes("cumprod", x, dim, 1)
  return masked:prod(axis + 1):cast(x.uop.dtype.name)
end

local function running_extreme(fn, x, dim, largest)
  tensor_arg(fn, x)
  local dt = x.uop.dtype
  local lowest = dt.is_float and (largest and -math.huge or math.huge) or (largest and dt.min or dt.max)
  if dt.is_bool then fail(fn, "is not defined for bool tensors") end
  local masked, axis, mask, j = prefixes(fn, x, dim, lowest)
  local values = largest and masked:max(axis + 1) or masked:min(axis + 1)
  -- torch's index: the last position j <= i holding the running extreme (NaN propagates)
  local hits = mask:logical_and(masked:eq(values:unsqueeze(axis + 1)):logical_or(masked:ne(masked)))
  local indices = class.Tensor.where(hits, j, 0):max(axis + 1)
  return values, indices
end

--- values, indices: the running maximum along dim and where it was (1-based, the latest such
--  position, as torch.cummax).
function M.cummax(x, dim) return running_extreme("cummax", x, dim, true) end

--- values, indices: the running minimum along dim and where it was (1-based, as torch.cummin).
function M.cummin(x, dim) return running_extreme("cummin", x, dim, false) end

--- log(cumsum(exp(x))) along dim, computed stably (a logsumexp of each prefix).
function M.logcumsumexp(x, dim)
  tensor_arg("logcumsumexp", x)
  if not x.uop.dtype.is_float then fail("logcumsumexp", "needs a float tensor, got %s", x.uop.dtype.name) end
  local masked, axis = prefixes("logcumsumexp", x, dim, -math.huge)
  return masked:logsumexp(axis + 1)
end

--- The p-norm over dim (nil: all entries; a table: those dims): p a number (2 by default; inf,
--  -inf, 0 and any p > 0), or "fro" (2 over the dims). "nuc" needs singular values, which tcl
--  does not compute (an error says so).
function M.norm(x, p, dim, keepdim)
  local fn = "norm"
  tensor_arg(fn, x)
  if not x.uop.dtype.is_float then fail(fn, "needs a float tensor, got %s (cast it first)", x.uop.dtype.name) end
  if p == nil or p == "fro" then p = 2 end
  if p == "nuc" then fail(fn, "the nuclear norm needs singular values, which tcl does not compute") end
  if type(p) ~= "number" then fail(fn, "p must be a number, 'fro' or 'nuc', got %s", tostring(p)) end
  local a = x:abs()
  if p == math.huge then return a:max(dim, keepdim) end
  if p == -math.huge then return a:min(dim, keepdim) end
  if p == 0 then return a:ne(0):cast(x.uop.dtype.name):sum(dim, keepdim) end
  if p == 1 then return a:sum(dim, keepdim) end
  if p == 2 then return (x * x):sum(dim, keepdim):sqrt() end
  return a:pow(p):sum(dim, keepdim):pow(1 / p)
end

return M
