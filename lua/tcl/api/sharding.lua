-- tcl.api.sharding — sharded tensors: one logical tensor held as one ordinary tensor per device,
-- split along one dim or replicated on every device (t:shard). Layer: lua/tcl/api.
--
--   local x = Tensor.randn(8, 4):shard({ "CPU", "EMU" }, 1)   -- rows 1-4 on CPU, 5-8 on EMU
--   local w = Tensor.randn(4, 3)                              -- a plain tensor: copied to each device
--   local y = x:matmul(w):relu()                              -- sharded along dim 1, one kernel per device
--   print(y.device[2], y:sum():item())                        -- "EMU"; the sum combines both devices
--
-- A sharded tensor is a list of shards (lazy tensors, shard i on device i) plus the sharded dim
-- (nil: replicated, every shard holds the whole tensor) and the logical shape. The shards of
-- x:shard(devices, d) are slices of x copied to their devices (COPY nodes), so gradients flow
-- back to x through the copies. Every operation runs per shard, on the shard's device (a
-- realize schedules each device's graph on its own; tcl.schedule.transfers runs the copies):
--   * elementwise ops: a plain tensor or a replicated operand is cut to each shard's rows and
--     copied to its device; two operands sharded differently are an error (reshard one with
--     :shard);
--   * reductions over other dims stay sharded; over the sharded dim each device reduces its
--     shard, the partial results are copied to the first device and combined there (a sum, a
--     max, a min; a mean is the combined sum over the count of all rows, so uneven shards weigh
--     right): the result is a plain tensor on the first device;
--   * matmul: a sharded batch or rows (a's leading dims) or sharded columns (b's last dim) give
--     a sharded result; a sharded along its last dim with b sharded (or cut) along its rows gives
--     per-device partial products summed on the first device (the all-reduce, in one process);
--   * softmax, argmax and the like along other dims run per shard; movement ops follow the
--     sharded dim (a reshape may merge it with the dims after it, nothing else).
-- Uneven splits are allowed: a dim of size n over k devices gives shards of n // k + 1 rows to
-- the first n % k devices and n // k to the others (each device gets at least one row).
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"

local Tensor = class.Tensor
local is_tensor, fail, shape_str = class.is_tensor, check.fail, check.shape_str

local M = {}

-- The class of sharded tensors: methods, then properties; Lua operators as for tensors.
local Sharded = {}
local sharded_mt = { __name = "ShardedTensor" }

local function is_sharded(v) return getmetatable(v) == sharded_mt end

-- A sharded tensor from its shards (one per device, in order), its 0-based sharded axis (nil:
-- replicated) and its logical shape.
local function make(shards, devices, axis, shape)
  return setmetatable({ _shards = shards, _devices = devices, _axis = axis, _shape = shape }, sharded_mt)
end

local function copy_list(list) return table.move(list, 1, #list, 1, {}) end

-- "(CPU, EMU)"
local function devices_str(devices) return "(" .. table.concat(devices, ", ") .. ")" end

-- The checked device list of fn: a non-empty list of known devices, none twice.
local function device_list(fn, devices)
  if type(devices) ~= "table" or is_tensor(devices) or is_sharded(devices) then
    fail(fn, "devices must be a list of device names, got %s", check.type_name(devices))
  end
  if #devices == 0 then fail(fn, "needs at least one device, got an empty list") end
  local list, seen = {}, {}
  for i, name in ipairs(devices) do
    if type(name) ~= "string" then
      fail(fn, "device %d must be a device name, got %s", i, check.type_name(name))
    end
    local device = class.checked_device(fn, name)
    if seen[device] then fail(fn, "device %s is listed twice", device) end
    seen[device] = true
    list[i] = device
  end
  return list
end

-- The rows of each shard when a dim of `size` is split over n devices (array_split's rule).
local function split_sizes(size, n)
  local sizes = {}
  for i = 1, n do sizes[i] = size // n + (i <= size % n and 1 or 0) end
  return sizes
end

-- Shard sizes and 0-based first rows along the sharded axis of s (nil for a replicated one).
local function layout(s)
  if s._axis == nil then return nil end
  local sizes, firsts, first = {}, {}, 0
  for i, shard in ipairs(s._shards) do
    sizes[i], firsts[i] = shard._shape[s._axis + 1], first
    first = first + sizes[i]
  end
  return sizes, firsts
end

-- t narrowed along its 0-based dim to [first, first + size): a SHRINK (no view bookkeeping:
-- a shard is a copy, not a window into its source that assignments write through).
local function rows(t, dim, first, size)
  local window = {}
  for d = 1, #t._shape do window[2 * d - 1], window[2 * d] = 0, t._shape[d] end
  window[2 * dim + 1], window[2 * dim + 2] = first, first + size
  return nodes.shrink(t, window)
end

--- x split along dim d (1-based, negative from the end) over the devices (a list of device
--  names, each once): shard i is a slice of x copied to devices[i]. Without d, x is replicated:
--  every device holds a copy of all of it. A dim of size n over k devices gives n // k + 1 rows
--  to the first n % k devices and n // k to the rest (n >= k). A sharded x is gathered first
--  (resharding). Returns a ShardedTensor (tcl.api.sharding).
function M.shard(x, devices, d)
  if is_sharded(x) then x = Sharded.gather(x) end
  check.tensor("shard", x)
  devices = device_list("shard", devices)
  local shards = {}
  if d == nil then
    for i, device in ipairs(devices) do shards[i] = Tensor.to(x, device) end
    return make(shards, devices, nil, nodes.copy_shape(x))
  end
  local axis = check.dim("shard", d, x._shape)
  local size = x._shape[axis + 1]
  if math.type(size) ~= "integer" then fail("shard", "cannot shard dim %d, of variable size", axis + 1) end
  if size < #devices then
    fail("shard", "dim %d of shape %s has %d rows, fewer than the %d devices", axis + 1, shape_str(x._shape), size,
      #devices)
  end
  local first = 0
  for i, rows_i in ipairs(split_sizes(size, #devices)) do
    shards[i] = Tensor.to(rows(x, axis, first, rows_i), devices[i])
    first = first + rows_i
  end
  return make(shards, devices, axis, nodes.copy_shape(x))
end

--- Whether v is a sharded tensor (made by Tensor.shard).
function M.is_sharded(v) return is_sharded(v) end

-- ---------------------------------------------------------------------------------------
-- properties, reading values

local properties = {
  shape = function(s) return copy_list(s._shape) end,
  ndim = function(s) return #s._shape end,
  dtype = function(s) return s._shards[1].uop.dtype end,
  -- the list of devices, in shard order
  device = function(s) return copy_list(s._devices) end,
  -- the per-device tensors, in device order
  shards = function(s) return copy_list(s._shards) end,
  -- the sharded dim (1-based), nil when replicated
  axis = function(s) return s._axis and s._axis + 1 end,
  requires_grad = function(s) return s._shards[1].requires_grad end,
}

sharded_mt.__index = function(s, key)
  local method = Sharded[key]
  if method ~= nil then return method end
  local property = properties[key]
  if property then return property(s) end
  if type(key) == "string" and key:sub(1, 1) == "_" then return nil end
  error(string.format("ShardedTensor: no field '%s'", check.quote(tostring(key))), 2)
end

sharded_mt.__newindex = function(_, key)
  error(string.format("ShardedTensor: cannot set '%s' (set values on the tensor it was sharded from)",
    check.quote(tostring(key))), 2)
end

local function sharded_arg(fn, s)
  if not is_sharded(s) then fail(fn, "expected a sharded tensor, got %s", check.type_name(s)) end
  return s
end

-- The whole tensor on one device (Sharded.gather), fn naming the caller in errors.
local function gather_as(fn, s, device)
  sharded_arg(fn, s)
  local target = s._devices[1]
  if device ~= nil then
    if type(device) ~= "string" then fail(fn, "expected a device name, got %s", check.type_name(device)) end
    target = class.checked_device(fn, device)
  end
  if s._axis == nil then
    for i, d in ipairs(s._devices) do
      if d == target then return s._shards[i] end
    end
    return Tensor.to(s._shards[1], target)
  end
  local parts = {}
  for i, shard in ipairs(s._shards) do parts[i] = Tensor.to(shard, target) end
  if #parts == 1 then return parts[1] end
  return Tensor.cat(parts, s._axis + 1)
end

--- The whole tensor on one device (default: the first of the shards'): the shards copied there
--  and concatenated along the sharded dim, or the replica (copied when not on that device).
function Sharded.gather(s, device) return gather_as("gather", s, device) end

--- s gathered on device (Sharded.gather), as Tensor.to moves a tensor.
function Sharded.to(s, device)
  if type(device) ~= "string" then fail("to", "expected a device name, got %s", check.type_name(device)) end
  return gather_as("to", s, device)
end

--- Realizes every shard, each on its device (tcl.realize takes sharded tensors too). Returns s.
function Sharded.realize(s)
  sharded_arg("realize", s)
  Tensor.realize_all(table.unpack(s._shards))
  return s
end

function Sharded.tolist(s) return Tensor.tolist(Sharded.gather(sharded_arg("tolist", s))) end
function Sharded.data(s) return Tensor.data(Sharded.gather(sharded_arg("data", s))) end
function Sharded.item(s) return Tensor.item(Sharded.gather(sharded_arg("item", s))) end
function Sharded.numel(s) return nodes.numel(sharded_arg("numel", s)._shape) end

function Sharded.size(s, d)
  sharded_arg("size", s)
  if d == nil then return copy_list(s._shape) end
  return s._shape[check.dim("size", d, s._shape) + 1]
end

--- The values as Tensor printing shows them, then the sharding: dim and devices.
function Sharded.to_string(s)
  sharded_arg("to_string", s)
  -- continuation lines indented by the longer prefix ("ShardedTensor(" vs "Tensor(")
  local text = Tensor.to_string(Sharded.gather(s)):gsub("\n([^\n])", "\n       %1")
  local how = s._axis and string.format("dim=%d", s._axis + 1) or "replicated"
  return "Sharded" .. text:sub(1, -2) .. ", " .. how .. ", devices=" .. devices_str(s._devices) .. ")"
end

-- ---------------------------------------------------------------------------------------
-- elementwise

-- Ops that keep the shape, with non-tensor arguments only: applied to every shard as they are.
local UNARY = { "neg", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tan", "square",
  "abs", "sign", "trunc", "floor", "ceil", "round", "relu", "sigmoid", "tanh", "gelu", "silu", "softplus",
  "leaky_relu", "elu", "logical_not", "isnan", "isinf", "cast", "float", "half", "double", "int", "long", "bool",
  "contiguous", "clone", "detach", "clamp" }

for _, name in ipairs(UNARY) do
  Sharded[name] = function(s, ...)
    sharded_arg(name, s)
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      if is_tensor(v) or is_sharded(v) then
        fail(name, "argument %d of a sharded %s must not be a tensor, got %s", i + 1, name, check.type_name(v))
      end
    end
    local out = {}
    for i, shard in ipairs(s._shards) do out[i] = Tensor[name](shard, ...) end
    return make(out, s._devices, s._axis, copy_list(s._shape))
  end
end

local function shape_of(v)
  if is_tensor(v) or is_sharded(v) then return v._shape end
  return {}
end

-- numpy broadcasting of a list of shapes; nil when they do not broadcast.
local function broadcast_shapes(list)
  local n = 0
  for _, s in ipairs(list) do n = math.max(n, #s) end
  local out = {}
  for d = 1, n do
    local size = 1
    for _, s in ipairs(list) do
      local v = s[#s - n + d]
      if v ~= nil and v ~= 1 then
        if size ~= 1 and size ~= v then return nil end
        size = v
      end
    end
    out[d] = size
  end
  return out
end

-- The sharding of a result of `ndim` dims computed from operands (numbers, tensors, sharded
-- tensors) whose dims align at the end: { devices, axis (0-based in the result, nil when every
-- sharded operand is replicated), sizes, firsts }; nil when no operand is sharded. Operands
-- sharded over other devices, or along other dims or rows, are an error.
local function joint_sharding(fn, operands, ndim)
  local joint
  for i = 1, operands.n do
    local v = operands[i]
    if is_sharded(v) then
      if joint and table.concat(joint.devices, "\0") ~= table.concat(v._devices, "\0") then
        fail(fn, "the operands are sharded over different devices, %s and %s", devices_str(joint.devices),
          devices_str(v._devices))
      end
      joint = joint or { devices = v._devices }
      if v._axis ~= nil then
        local axis = v._axis + ndim - #v._shape
        local sizes, firsts = layout(v)
        if joint.axis == nil then
          joint.axis, joint.sizes, joint.firsts = axis, sizes, firsts
        elseif joint.axis ~= axis or table.concat(joint.sizes, ",") ~= table.concat(sizes, ",") then
          fail(fn, "mismatched shardings: dim %d in rows %s and dim %d in rows %s of the result (reshard one with "
            .. ":shard(devices, dim))", joint.axis + 1, table.concat(joint.sizes, "+"), axis + 1,
            table.concat(sizes, "+"))
        end
      end
    end
  end
  return joint
end

-- What shard i of a result sharded by `joint` needs of operand v on device i: its own shard,
-- or its replica (a plain tensor: copied to the device), cut to the shard's rows along the
-- result's axis when v has that dim (a broadcast dim of size 1 is taken whole). `ndim`: the
-- result's dims (v's align with them at the end).
local function part(v, i, joint, ndim)
  if not (is_tensor(v) or is_sharded(v)) then return v end
  if is_sharded(v) and v._axis ~= nil then return v._shards[i] end
  local t = is_sharded(v) and v._shards[i] or v
  if joint.axis ~= nil then
    local dim = joint.axis - (ndim - #v._shape)
    if dim >= 0 and t._shape[dim + 1] ~= 1 then t = rows(t, dim, joint.firsts[i], joint.sizes[i]) end
  end
  -- a plain tensor is cut first, so that each device gets only its rows
  return Tensor.to(t, joint.devices[i])
end

-- Binary ops (a sharded operand on either side, the other a number, a tensor or sharded).
local BINARY = { "add", "sub", "mul", "div", "mod", "floordiv", "pow", "maximum", "minimum", "eq", "ne", "lt", "gt",
  "le", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor" }

for _, name in ipairs(BINARY) do
  Sharded[name] = function(a, b)
    local operands = { a, b, n = 2 }
    for i = 1, 2 do
      local v = operands[i]
      if not (is_tensor(v) or is_sharded(v) or type(v) == "number" or type(v) == "boolean") then
        fail(name, "expected a tensor, a sharded tensor or a number, got %s", check.type_name(v))
      end
    end
    local shape = broadcast_shapes({ shape_of(a), shape_of(b) })
    if shape == nil then
      fail(name, "shapes %s and %s do not broadcast", shape_str(shape_of(a)), shape_str(shape_of(b)))
    end
    local joint = joint_sharding(name, operands, #shape)
    local out = {}
    for i = 1, #joint.devices do
      out[i] = Tensor[name](part(a, i, joint, #shape), part(b, i, joint, #shape))
    end
    return make(out, joint.devices, joint.axis, shape)
  end
end

--- Tensor.where with cond sharded (a and b: tensors, sharded or not, or numbers).
function Sharded.where(cond, a, b)
  sharded_arg("where", cond)
  local shape = broadcast_shapes({ shape_of(cond), shape_of(a), shape_of(b) })
  if shape == nil then
    fail("where", "shapes %s, %s and %s do not broadcast", shape_str(shape_of(cond)), shape_str(shape_of(a)),
      shape_str(shape_of(b)))
  end
  local joint = joint_sharding("where", { cond, a, b, n = 3 }, #shape)
  local out = {}
  for i = 1, #joint.devices do
    out[i] = Tensor.where(part(cond, i, joint, #shape), part(a, i, joint, #shape), part(b, i, joint, #shape))
  end
  return make(out, joint.devices, joint.axis, shape)
end

-- Lua operators; a plain tensor on the left hands them over (tcl.api.class.operand_classes).
for event, name in pairs({ __add = "add", __sub = "sub", __mul = "mul", __div = "div", __mod = "mod", __pow = "pow",
  __idiv = "floordiv" }) do
  sharded_mt[event] = function(a, b) return Sharded[name](a, b) end
end
sharded_mt.__unm = function(s) return Sharded.neg(s) end
sharded_mt.__tostring = function(s) return Sharded.to_string(s) end
sharded_mt.__len = function(s) return s._shape[1] end
class.operand_classes[sharded_mt] = true

-- ---------------------------------------------------------------------------------------
-- reductions

-- The partial results on each device copied to the first and folded with `combine` (a
-- Tensor method name).
local function combine_on_first(partials, devices, combine)
  local total = Tensor.to(partials[1], devices[1])
  for i = 2, #partials do total = Tensor[combine](total, Tensor.to(partials[i], devices[1])) end
  return total
end

-- The shape without the 0-based axes (keepdim false).
local function without(shape, axes)
  local drop, out = {}, {}
  for _, a in ipairs(axes) do drop[a] = true end
  for d = 1, #shape do if not drop[d - 1] then out[#out + 1] = shape[d] end end
  return out
end

-- How each reduction's per-device partial results combine across devices.
local COMBINE = { sum = "add", prod = "mul", max = "maximum", min = "minimum", mean = "add", any = "logical_or",
  all = "logical_and" }

for name, combine in pairs(COMBINE) do
  Sharded[name] = function(s, dim, keepdim)
    sharded_arg(name, s)
    local axes = check.dims(name, dim, s._shape)
    if keepdim ~= nil and type(keepdim) ~= "boolean" then
      fail(name, "keepdim must be a boolean, got %s", check.type_name(keepdim))
    end
    local dims, crosses, below = {}, false, 0
    for i, a in ipairs(axes) do
      dims[i] = a + 1
      if a == s._axis then crosses = true elseif s._axis and a < s._axis then below = below + 1 end
    end
    local shape = keepdim and copy_list(s._shape) or without(s._shape, axes)
    if keepdim then for _, a in ipairs(axes) do shape[a + 1] = 1 end end
    if not crosses then
      local out = {}
      -- (max and min with one dim also return indices: those of the shard, so only values here)
      for i, shard in ipairs(s._shards) do out[i] = (Tensor[name](shard, dims, keepdim)) end
      local axis = s._axis and (keepdim and s._axis or s._axis - below)
      return make(out, s._devices, axis, shape)
    end
    -- across devices: each reduces its shard (keeping the dims), the first device combines;
    -- a mean is the sum of the shards' sums over the count of all (uneven shards weigh by rows)
    local partials = {}
    for i, shard in ipairs(s._shards) do
      partials[i] = (Tensor[name == "mean" and "sum" or name](shard, dims, true))
    end
    local total = combine_on_first(partials, s._devices, combine)
    if name == "mean" then
      local count = 1
      for _, a in ipairs(axes) do count = count * s._shape[a + 1] end
      total = Tensor.cast(Tensor.div(total, count), rules.float_of(s._shards[1].uop.dtype))
    end
    return keepdim and total or Tensor.reshape(total, shape)
  end
end

-- Ops along dims (`default`: the dim when none is given; nil: one must be given) computed per
-- shard when the sharded dim is not among them: shape-keeping ones (softmax) and ones that
-- drop their dim unless keepdim (argmax). Along the sharded dim they are an error.
local function along_other_dims(name, default, keeps_shape)
  Sharded[name] = function(s, dim, keepdim)
    sharded_arg(name, s)
    if dim == nil then dim = default end
    if dim == nil then fail(name, "needs a dim on a sharded tensor") end
    local axes = check.dims(name, dim, s._shape)
    local below = 0
    for _, a in ipairs(axes) do
      if a == s._axis then
        fail(name, "along the sharded dim %d is not supported (gather the tensor, or reshard it along another dim)",
          a + 1)
      end
      if s._axis and a < s._axis then below = below + 1 end
    end
    local out = {}
    for i, shard in ipairs(s._shards) do
      if keeps_shape then out[i] = Tensor[name](shard, dim) else out[i] = Tensor[name](shard, dim, keepdim) end
    end
    local shape, axis = copy_list(s._shape), s._axis
    if not keeps_shape then
      if keepdim then for _, a in ipairs(axes) do shape[a + 1] = 1 end
      else shape, axis = without(s._shape, axes), s._axis and s._axis - below end
    end
    return make(out, s._devices, axis, shape)
  end
end
along_other_dims("softmax", -1, true)
along_other_dims("log_softmax", -1, true)
along_other_dims("cumsum", 1, true)
along_other_dims("argmax", nil, false)
along_other_dims("argmin", nil, false)
along_other_dims("logsumexp", nil, false)

-- ---------------------------------------------------------------------------------------
-- matmul

local function operand_arg(fn, v, what)
  if not (is_tensor(v) or is_sharded(v)) then
    fail(fn, "%s must be a tensor or a sharded tensor, got %s", what, check.type_name(v))
  end
  if #v._shape < 2 then
    fail(fn, "a sharded matmul needs operands of at least 2 dims, got shape %s", shape_str(v._shape))
  end
  return v
end

local function axis_of(v) return is_sharded(v) and v._axis or nil end

-- The devices of the sharded operands among a and b (the same list for both).
local function common_devices(fn, a, b)
  local devices
  for _, v in ipairs({ a, b }) do
    if is_sharded(v) then
      if devices and table.concat(devices, "\0") ~= table.concat(v._devices, "\0") then
        fail(fn, "the operands are sharded over different devices, %s and %s", devices_str(devices),
          devices_str(v._devices))
      end
      devices = v._devices
    end
  end
  return devices
end

-- The shard sizes and first rows of the one of a and b sharded along a dim (both: the same).
local function common_layout(fn, a, b, what)
  local sa, fa = layout(a)
  local sb, fb = layout(b)
  if sa and sb and table.concat(sa, ",") ~= table.concat(sb, ",") then
    fail(fn, "mismatched shardings: %s in rows %s and %s", what, table.concat(sa, "+"), table.concat(sb, "+"))
  end
  return sa or sb, fa or fb
end

--- a:matmul(b) with a or b sharded (both of at least 2 dims): a sharded along a leading dim
--  (batch or rows) or b along its columns (or a batch dim) gives a result sharded there; a
--  sharded along its last dim with b sharded along its rows (or b plain: cut into those rows)
--  gives partial products, one per device, summed on the first device (a plain tensor).
function Sharded.matmul(a, b)
  operand_arg("matmul", a, "a")
  operand_arg("matmul", b, "b")
  local na, nb = #a._shape, #b._shape
  if a._shape[na] ~= b._shape[nb - 1] then
    fail("matmul", "shapes %s and %s are not aligned: %d (dim %d) ~= %d (dim %d)", shape_str(a._shape),
      shape_str(b._shape), a._shape[na], na, b._shape[nb - 1], nb - 1)
  end
  local batch = broadcast_shapes({ table.move(a._shape, 1, na - 2, 1, {}), table.move(b._shape, 1, nb - 2, 1, {}) })
  if batch == nil then
    fail("matmul", "batch dims of %s and %s cannot be broadcast", shape_str(a._shape), shape_str(b._shape))
  end
  local shape = copy_list(batch)
  shape[#shape + 1], shape[#shape + 2] = a._shape[na - 1], b._shape[nb]
  local nr = #shape
  local devices = common_devices("matmul", a, b)
  local ka, kb = axis_of(a), axis_of(b)
  if ka == na - 1 or kb == nb - 2 then
    -- a's columns and b's rows split alike: each device multiplies its share of the
    -- contracted dim, and the partial products are summed on the first device
    if (ka ~= nil and ka ~= na - 1) or (kb ~= nil and kb ~= nb - 2) then
      fail("matmul", "mismatched shardings: a along dim %d and b along dim %d (a product over a sharded dim needs "
        .. "a sharded along its last dim and b along its rows)", ka + 1, kb + 1)
    end
    local sizes, firsts = common_layout("matmul", a, b, "a's columns and b's rows")
    local partials = {}
    for i = 1, #devices do
      local cut_a = { devices = devices, axis = na - 1, sizes = sizes, firsts = firsts }
      local cut_b = { devices = devices, axis = nb - 2, sizes = sizes, firsts = firsts }
      partials[i] = Tensor.matmul(part(a, i, cut_a, na), part(b, i, cut_b, nb))
    end
    return combine_on_first(partials, devices, "add")
  end
  -- a's leading dims, b's batch or column dims: the result is sharded there
  local axis_a = ka and (ka == na - 2 and nr - 2 or ka + nr - na)
  local axis_b = kb and (kb == nb - 1 and nr - 1 or kb + nr - nb)
  if axis_a and axis_b and axis_a ~= axis_b then
    fail("matmul", "mismatched shardings: a along dim %d and b along dim %d (reshard one with :shard(devices, dim))",
      ka + 1, kb + 1)
  end
  local sizes, firsts = common_layout("matmul", a, b, "the sharded dims")
  local joint = { devices = devices, axis = axis_a or axis_b, sizes = sizes, firsts = firsts }
  local whole = { devices = devices }
  local out = {}
  for i = 1, #devices do
    local pa, pb
    if joint.axis == nil or joint.axis < nr - 2 then -- a batch dim (or replicated): both cut there
      pa, pb = part(a, i, joint, nr), part(b, i, joint, nr)
    elseif joint.axis == nr - 2 then                  -- a's rows: b whole
      pa, pb = part(a, i, joint, nr), part(b, i, whole, nr)
    else                                              -- b's columns: a whole
      pa, pb = part(a, i, whole, nr), part(b, i, joint, nr)
    end
    out[i] = Tensor.matmul(pa, pb)
  end
  return make(out, devices, joint.axis, shape)
end

--- x:matmul(w) + b (b optional), as Tensor.linear, with x or w sharded.
function Sharded.linear(x, w, b)
  local y = Sharded.matmul(x, w)
  if b == nil then return y end
  if is_sharded(y) then return Sharded.add(y, b) end
  if is_sharded(b) then return Sharded.add(b, y) end
  return Tensor.add(y, b)
end

--- A plain tensor times a sharded one (Tensor.matmul hands it here when b is sharded).
M._matmul = Sharded.matmul

-- ---------------------------------------------------------------------------------------
-- movement

-- A list of integers given as varargs or one table (fn's sizes or dims).
local function int_args(fn, what, ...)
  local list = ...
  if type(list) ~= "table" or is_tensor(list) then list = { ... } end
  local out = {}
  for i = 1, #list do out[i] = check.any_integer(fn, what, list[i]) end
  return out
end

local function order_1based(order)
  local out = {}
  for i, a in ipairs(order) do out[i] = a + 1 end
  return out
end

--- The dims reordered, as Tensor.permute (varargs or a table): the sharded dim follows its dim.
function Sharded.permute(s, ...)
  sharded_arg("permute", s)
  local dims, ndim = int_args("permute", "dim", ...), #s._shape
  local order, seen, ok = {}, {}, #dims == ndim
  for i, d in ipairs(dims) do
    local a = (d >= 1 and d <= ndim) and d - 1 or (d < 0 and d >= -ndim) and ndim + d or nil
    if a == nil or seen[a] then ok = false else seen[a], order[i] = true, a end
  end
  if not ok then
    fail("permute", "%s is not an order of the %d dims of %s", shape_str(dims), ndim, shape_str(s._shape))
  end
  local out, shape, axis = {}, {}, nil
  for i, a in ipairs(order) do
    shape[i] = s._shape[a + 1]
    if a == s._axis then axis = i - 1 end
  end
  for i, shard in ipairs(s._shards) do out[i] = Tensor.permute(shard, order_1based(order)) end
  return make(out, s._devices, axis, shape)
end

--- Swaps two dims (default 1 and 2).
function Sharded.transpose(s, d1, d2)
  sharded_arg("transpose", s)
  local a = check.dim("transpose", d1 or 1, s._shape)
  local b = check.dim("transpose", d2 or 2, s._shape)
  local order = {}
  for i = 1, #s._shape do order[i] = i end
  order[a + 1], order[b + 1] = b + 1, a + 1
  return Sharded.permute(s, order)
end

-- Where the sharded dim of s goes in a reshape to `sizes` (fn names the caller): the 0-based
-- dim of sizes and how many rows of it each row of the sharded dim becomes, or nil. The dim
-- keeps the elements before it and is the sharded dim times the next dims merged in (a
-- row of the sharded dim stays whole and in order: shard i's rows stay its own).
local function reshaped_axis(s, sizes)
  local axis_size, before = s._shape[s._axis + 1], 1
  for d = 1, s._axis do before = before * s._shape[d] end
  local product = 1
  for d = 1, #sizes do
    if product == before and sizes[d] % axis_size == 0 then
      -- the dims after the sharded one that the new dim merges in must end at a dim boundary
      local merged, k = axis_size, s._axis + 1
      while merged < sizes[d] and k < #s._shape do
        k = k + 1
        merged = merged * s._shape[k]
      end
      if merged == sizes[d] then return d - 1, sizes[d] // axis_size end
    end
    product = product * sizes[d]
  end
  return nil
end

-- s reshaped to sizes (resolved, checked), the error naming fn.
local function reshape_to(fn, s, sizes)
  local axis, factor = nil, 1
  if s._axis ~= nil then
    axis, factor = reshaped_axis(s, sizes)
    if axis == nil then
      fail(fn, "cannot reshape %s sharded along dim %d to %s: the sharded dim would not stay one dim "
        .. "(gather the tensor first)", shape_str(s._shape), s._axis + 1, shape_str(sizes))
    end
  end
  local out = {}
  for i, shard in ipairs(s._shards) do
    local shard_sizes = copy_list(sizes)
    if axis then shard_sizes[axis + 1] = shard._shape[s._axis + 1] * factor end
    out[i] = Tensor.reshape(shard, shard_sizes)
  end
  return make(out, s._devices, axis, sizes)
end

--- The shape changed, as Tensor.reshape (one size may be -1): the sharded dim must stay one dim,
--  with the same elements before it, or be merged with the dims after it (a (B, T, C) batch
--  sharded along B reshaped to (B * T, C) stays sharded along dim 1). A replicated tensor
--  reshapes freely.
function Sharded.reshape(s, ...)
  sharded_arg("reshape", s)
  local sizes, numel = int_args("reshape", "size", ...), nodes.numel(s._shape)
  local infer_at, known = nil, 1
  for i, v in ipairs(sizes) do
    if v == -1 and not infer_at then infer_at = i
    elseif v < 0 then fail("reshape", "sizes must be >= 0 or one -1, got %s", shape_str(sizes))
    else known = known * v end
  end
  if infer_at and known ~= 0 and numel % known == 0 then sizes[infer_at] = numel // known end
  if infer_at and sizes[infer_at] == -1 or nodes.numel(sizes) ~= numel then
    fail("reshape", "cannot reshape %s (%d elements) to %s", shape_str(s._shape), numel, shape_str(sizes))
  end
  return reshape_to("reshape", s, sizes)
end

--- Merges dims start..stop (default all) into one, as Tensor.flatten (a reshape).
function Sharded.flatten(s, start, stop)
  sharded_arg("flatten", s)
  return reshape_to("flatten", s, check.flattened_shape("flatten", s._shape, start, stop))
end

--- Inserts a size-1 dim so that it becomes dim d, as Tensor.unsqueeze.
function Sharded.unsqueeze(s, d)
  sharded_arg("unsqueeze", s)
  local sizes = copy_list(s._shape)
  table.insert(sizes, check.dim("unsqueeze", d, s._shape, 1) + 1, 1)
  return reshape_to("unsqueeze", s, sizes)
end

--- Removes size-1 dims (all, or those of d), as Tensor.squeeze.
function Sharded.squeeze(s, d)
  sharded_arg("squeeze", s)
  local drop = {}
  for _, a in ipairs(d == nil and check.dims("squeeze", nil, s._shape) or check.dims("squeeze", d, s._shape)) do
    if s._shape[a + 1] == 1 and a ~= s._axis then drop[a] = true end
  end
  local sizes = {}
  for i, size in ipairs(s._shape) do if not drop[i - 1] then sizes[#sizes + 1] = size end end
  return reshape_to("squeeze", s, sizes)
end

--- Gradients of a loss computed from shards reach the tensor that was sharded (through the
--  copies); backward on a sharded tensor itself is not defined (reduce it to a scalar first).
function Sharded.backward(s)
  sharded_arg("backward", s)
  fail("backward", "a sharded tensor of shape %s is not a scalar loss (reduce it first: s:sum() is a plain tensor)",
    shape_str(s._shape))
end

Sharded.shard = M.shard

return M
