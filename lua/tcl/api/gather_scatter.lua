-- tcl.api.gather_scatter — gather, scatter, scatter_add, scatter_reduce, index_select and
-- take_along_dim with 1-based indices (Torch7's convention; PyTorch's 0-based indices need +1:
-- an index outside 1..n is reported by the next read to the host, tcl.api.index_checks).
-- Each is a one-hot compare of the indices against the positions of dim, combined with the data
-- by WHERE and reduced over the positions: lazy graph ops that fuse into one kernel, run on every
-- device and are differentiated by autograd through WHERE and the reductions (gather's gradient
-- is then scatter_add's, scatter's flows to the kept data and the written source).
-- Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local index_checks = require "tcl.api.index_checks"

local fail, is_tensor = check.fail, class.is_tensor
local M = {}

local function tensor_arg(fn, v, what)
  if not is_tensor(v) then fail(fn, "%s must be a Tensor, got %s", what, check.type_name(v)) end
  return v
end

local function index_arg(fn, index)
  tensor_arg(fn, index, "index")
  if not index.uop.dtype.is_int then
    fail(fn, "index must be an integer tensor, got %s", index.uop.dtype.name)
  end
  return index
end

local function positions(n, rank, axis, device)
  local view = {}
  for d = 1, rank do view[d] = d == axis + 1 and n or 1 end
  return class.Tensor.arange(1, n + 1, { dtype = "int64", device = device }):reshape(view)
end

-- index (shape I, 1-based along axis) against positions 1..n: a bool tensor of shape I with a
-- new dim of size n inserted after axis (the "position" dim at axis + 2, 1-based).
local function one_hot_after(index, axis, n)
  local shape = index:size()
  local view = {}
  for d = 1, #shape do
    view[#view + 1] = shape[d]
    if d == axis + 1 then view[#view + 1] = 1 end
  end
  local pview = {}
  for d = 1, #shape + 1 do pview[d] = d == axis + 2 and n or 1 end
  local pos = class.Tensor.arange(1, n + 1, { dtype = "int64", device = index.device }):reshape(pview)
  return index:cast("int64"):reshape(view):eq(pos)
end

local function same_rank_shapes(fn, x, index, axis, what)
  local xs, is = x:size(), index:size()
  if #xs ~= #is then
    fail(fn, "%s has %d dims and index %d (shapes %s and %s): they must have the same number", what, #xs, #is,
      check.shape_str(xs), check.shape_str(is))
  end
  for d = 1, #xs do
    if d ~= axis + 1 and is[d] > xs[d] then
      fail(fn, "index of shape %s is larger than %s of shape %s in dim %d", check.shape_str(is), what,
        check.shape_str(xs), d)
    end
  end
end

-- x narrowed to the index's sizes in every dim but axis
local function narrowed(x, index, axis)
  local xs, is = x:size(), index:size()
  local y = x
  for d = 1, #xs do
    if d ~= axis + 1 and is[d] < xs[d] then y = y:narrow(d, 1, is[d]) end
  end
  return y
end

--- out[i][j][k] = x[i][index[i][j][k]][k] for dim 2 (and so on): index has x's number of dims,
--  sizes at most x's outside dim, 1-based values in 1..x:size(dim) along dim. As torch.gather.
function M.gather(x, dim, index)
  local fn = "gather"
  tensor_arg(fn, x, "input")
  index_arg(fn, index)
  local axis = check.dim(fn, dim, x._shape)
  same_rank_shapes(fn, x, index, axis, "input")
  local n = x._shape[axis + 1]
  index_checks.check_range(fn, index, n, "gather indices")
  local hot = one_hot_after(index, axis, n) -- I with n after axis
  local data = narrowed(x, index, axis):unsqueeze(axis + 1) -- a 1 at axis, n after it
  local zero = x.uop.dtype.is_bool and false or 0
  local picked = class.Tensor.where(hot, data, zero)
  if x.uop.dtype.is_bool then return picked:any(axis + 2) end
  return picked:sum(axis + 2):cast(x.uop.dtype)
end

--- x's entries at the 1-based positions of the 1-d integer tensor index along dim (torch.index_select).
function M.index_select(x, dim, index)
  local fn = "index_select"
  tensor_arg(fn, x, "input")
  index_arg(fn, index)
  if #index._shape ~= 1 then fail(fn, "index must be 1-d, got shape %s", check.shape_str(index._shape)) end
  local axis = check.dim(fn, dim, x._shape)
  local n = x._shape[axis + 1]
  index_checks.check_range(fn, index, n, "index_select indices")
  local m = index._shape[1]
  -- hot: (m, n) viewed as [1.., m, n, ..1]; x viewed as [.., 1, n, ..]
  local hot = index:cast("int64"):reshape({ m, 1 }):eq(class.Tensor.arange(1, n + 1, { dtype = "int64",
    device = x.device }):reshape({ 1, n }))
  local hview, xview = {}, {}
  for d = 1, #x._shape do
    if d == axis + 1 then
      hview[#hview + 1], hview[#hview + 2] = m, n
      xview[#xview + 1], xview[#xview + 2] = 1, n
    else
      hview[#hview + 1] = 1
      xview[#xview + 1] = x._shape[d]
    end
  end
  local zero = x.uop.dtype.is_bool and false or 0
  local picked = class.Tensor.where(hot:reshape(hview), x:reshape(xview), zero)
  if x.uop.dtype.is_bool then return picked:any(axis + 2) end
  return picked:sum(axis + 2):cast(x.uop.dtype)
end

--- x gathered along dim by indices broadcast against x (torch.take_along_dim); without dim, x
--  and indices are flattened.
function M.take_along_dim(x, indices, dim)
  local fn = "take_along_dim"
  tensor_arg(fn, x, "input")
  index_arg(fn, indices)
  if dim == nil then return M.gather(x:reshape({ x:numel() }), 1, indices:reshape({ indices:numel() })) end
  local axis = check.dim(fn, dim, x._shape)
  if #indices._shape ~= #x._shape then
    fail(fn, "indices have %d dims, input %d", #indices._shape, #x._shape)
  end
  local xs, is = {}, {}
  for d = 1, #x._shape do
    local a, b = x._shape[d], indices._shape[d]
    if d == axis + 1 then xs[d], is[d] = a, b
    else
      if a ~= b and a ~= 1 and b ~= 1 then
        fail(fn, "input %s and indices %s do not broadcast outside dim %d", check.shape_str(x._shape),
          check.shape_str(indices._shape), axis + 1)
      end
      xs[d], is[d] = math.max(a, b), math.max(a, b)
    end
  end
  return M.gather(x:expand(table.unpack(xs)), axis + 1, indices:expand(table.unpack(is)))
end

local REDUCTIONS = { sum = true, prod = true, mean = true, amax = true, amin = true }

-- The scatter family: index and src of the same shape (src may be a number), 1-based along dim.
-- reduce: nil (replace), "sum", "prod", "mean", "amax", "amin"; include_self as torch's.
local function scatter_as(fn, x, dim, index, src, reduce, include_self)
  tensor_arg(fn, x, "input")
  index_arg(fn, index)
  local axis = check.dim(fn, dim, x._shape)
  same_rank_shapes(fn, x, index, axis, "input")
  local dtype = x.uop.dtype
  if type(src) == "number" or type(src) == "boolean" then
    src = class.Tensor.full(index:size(), src, { dtype = dtype.name, device = x.device })
  end
  tensor_arg(fn, src, "src")
  local ss, is = src:size(), index:size()
  if #ss ~= #is then fail(fn, "src has %d dims and index %d", #ss, #is) end
  for d = 1, #is do
    if is[d] > ss[d] then
      fail(fn, "index of shape %s is larger than src of shape %s in dim %d", check.shape_str(is),
        check.shape_str(ss), d)
    end
  end
  src = narrowed(src, index, -1):cast(dtype)
  local n = x._shape[axis + 1]
  index_checks.check_range(fn, index, n, fn .. " indices")
  -- hot: index's shape with n after axis (position dim at axis + 2); src viewed the same with
  -- a 1 there. Summing out index's own dim axis + 1 gives, per position of x, the writes to it.
  local hot = one_hot_after(index, axis, n)
  local srcv = src:unsqueeze(axis + 2)
  -- pad the index-shaped results up to x's shape (dims other than axis), writing nothing there
  local function to_x_shape(t, fill)
    local pads, any = {}, false
    for d = 1, #x._shape do
      local have = t._shape[d]
      pads[d] = { 0, x._shape[d] - have }
      if x._shape[d] ~= have then any = true end
    end
    if not any then return t end
    return t:pad(pads, fill)
  end
  local written = to_x_shape(hot:any(axis + 1), false)
  local zero = dtype.is_bool and false or 0
  if reduce == nil then
    -- replace: with repeated indices torch's result is unspecified; here the writes add up
    local value = class.Tensor.where(hot, srcv, zero)
    value = dtype.is_bool and value:any(axis + 1) or value:sum(axis + 1):cast(dtype)
    return class.Tensor.where(written, to_x_shape(value, zero), x)
  end
  if not REDUCTIONS[reduce] then
    fail(fn, "reduce must be one of sum, prod, mean, amax, amin, got %s", tostring(reduce))
  end
  if include_self == nil then include_self = true end
  local combined, count
  if reduce == "sum" or reduce == "mean" then
    combined = to_x_shape(class.Tensor.where(hot, srcv, 0):sum(axis + 1):cast(dtype), 0)
    if include_self then combined = combined + x end
    if reduce == "mean" then
      count = to_x_shape(hot:cast("int64"):sum(axis + 1), 0)
      if include_self then count = count + 1 end
      local c = count:cast(dtype):maximum(1)
      combined = dtype.is_float and combined / c or combined:floordiv(c)
    end
  elseif reduce == "prod" then
    combined = to_x_shape(class.Tensor.where(hot, srcv, 1):prod(axis + 1):cast(dtype), 1)
    if include_self then combined = combined * x end
  else
    local lowest = dtype.is_float and -math.huge or dtype.min
    local highest = dtype.is_float and math.huge or dtype.max
    if reduce == "amax" then
      combined = to_x_shape(class.Tensor.where(hot, srcv, lowest):max(axis + 1), lowest)
      if include_self then combined = combined:maximum(x) end
    else
      combined = to_x_shape(class.Tensor.where(hot, srcv, highest):min(axis + 1), highest)
      if include_self then combined = combined:minimum(x) end
    end
  end
  return class.Tensor.where(written, combined:cast(dtype), x)
end

--- A copy of x with src's entries written at the 1-based positions index gives along dim
--  (torch.scatter, out of place); src may be a number. Repeated indices add up their writes
--  (torch leaves that case unspecified).
function M.scatter(x, dim, index, src) return scatter_as("scatter", x, dim, index, src) end

--- x with src's entries added at the 1-based positions index gives along dim (torch.scatter_add).
function M.scatter_add(x, dim, index, src) return scatter_as("scatter_add", x, dim, index, src, "sum") end

--- x with src's entries combined by reduce ("sum", "prod", "mean", "amax", "amin") at the
--  1-based positions index gives along dim; include_self (default true) also combines x's
--  own entry (torch.scatter_reduce).
function M.scatter_reduce(x, dim, index, src, reduce, include_self)
  if type(reduce) ~= "string" then
    fail("scatter_reduce", "reduce must be a string (sum, prod, mean, amax, amin), got %s", check.type_name(reduce))
  end
  return scatter_as("scatter_reduce", x, dim, index, src, reduce, include_self)
end

M._positions = positions

return M
