-- tcl.onnx.ops.core — ONNX handlers for constants, casts and shape plumbing (Constant,
-- Identity, Cast, CastLike, Shape, Size, Reshape, ConstantOfShape, Range, Dropout, EyeLike,
-- Flatten, Squeeze, Unsqueeze, Expand, and the random ops Bernoulli, RandomUniform(Like),
-- RandomNormal(Like)). Values of shape arithmetic are recorded on the host
-- (ctx:known) so a model's Shape -> Gather -> Concat -> Reshape chain runs no kernel for them.
local Tensor = require "tcl.api.tensor"
local tensor_proto = require "tcl.onnx.tensor_proto"

local M = {}

local function shape_of(t) return t:size() end

local function int64_tensor(ctx, values)
  local bytes = {}
  for i, v in ipairs(values) do bytes[i] = string.pack("<i8", v) end
  local t = Tensor.from_bytes(table.concat(bytes), "int64", { #values })
  return ctx:known(t, values)
end

-- an ONNX axis (0-based, negative from the end) as a 0-based axis in [0, rank)

function M.Constant(ctx, node)
  local a = node.attrs
  if a.value then return a.value end
  if a.value_float then
    return ctx:known(Tensor.full({}, a.value_float, { dtype = "float32" }), { a.value_float })
  end
  if a.value_int then return ctx:known(Tensor.full({}, a.value_int, { dtype = "int64" }), { a.value_int }) end
  if a.value_floats then
    local t = Tensor.from_bytes(#a.value_floats == 0 and "" or string.pack(string.rep("<f", #a.value_floats),
      table.unpack(a.value_floats)), "float32", { #a.value_floats })
    return ctx:known(t, a.value_floats)
  end
  if a.value_ints then return int64_tensor(ctx, a.value_ints) end
  if a.sparse_value then ctx:fail("sparse constants are not supported") end
  if a.value_string or a.value_strings then ctx:fail("string constants are not supported (no string tensors)") end
  ctx:fail("no value attribute")
end

function M.Identity(_, node) return node.inputs[1] end

local function cast_to(ctx, x, dtype)
  if tostring(x.dtype) == dtype then return x end
  if dtype == "bfloat16" and tostring(x.dtype) == "float32" then
    -- ONNX (opset <= 18, and its conformance data) truncates float32 to bfloat16: the high 16 bits
    return (x:bitcast("uint32") // 65536):cast("uint16"):bitcast("bfloat16")
  end
  local known = ctx.host[x]
  local y = x:cast(dtype)
  if known and (dtype:match("int") or dtype == "bool") then
    local out = {}
    for i, v in ipairs(known) do
      if type(v) == "boolean" then v = v and 1 or 0 end
      if dtype == "bool" then out[i] = v ~= 0
      else out[i] = math.tointeger(v >= 0 and math.floor(v) or math.ceil(v)) end
    end
    if dtype ~= "bool" then ctx:known(y, out) end
  end
  return y
end

function M.Cast(ctx, node)
  local to = node.attrs.to
  local dtype, why = tensor_proto.dtype_of(to)
  if not dtype then ctx:fail("%s", why) end
  return cast_to(ctx, node.inputs[1], dtype)
end

function M.CastLike(ctx, node)
  return cast_to(ctx, node.inputs[1], tostring(node.inputs[2].dtype))
end

function M.Shape(ctx, node)
  local shape = shape_of(node.inputs[1])
  local rank = #shape
  local start, stop = node.attrs.start or 0, node.attrs["end"] or rank
  if start < 0 then start = start + rank end
  if stop < 0 then stop = stop + rank end
  start, stop = math.max(0, math.min(start, rank)), math.max(0, math.min(stop, rank))
  local values = {}
  for d = start + 1, stop do values[#values + 1] = shape[d] end
  return int64_tensor(ctx, values)
end

function M.Size(ctx, node)
  local n = node.inputs[1]:numel()
  return ctx:known(Tensor.full({}, n, { dtype = "int64" }), { n })
end

-- ONNX Reshape: 0 copies the input's dim (unless allowzero), -1 is inferred
function M.Reshape(ctx, node)
  local x = node.inputs[1]
  local want = ctx:ints(node.inputs[2])
  local have = shape_of(x)
  local allowzero = (node.attrs.allowzero or 0) ~= 0
  local shape, infer, known = {}, nil, 1
  for i, s in ipairs(want) do
    if s == 0 and not allowzero then
      s = have[i]
      if s == nil then ctx:fail("shape[%d] = 0 copies a dim the input of rank %d lacks", i - 1, #have) end
    end
    if s == -1 then
      if infer then ctx:fail("more than one -1 in the shape") end
      infer = i
    elseif s < 0 then
      ctx:fail("shape[%d] = %d is negative", i - 1, s)
    else
      known = known * s
    end
    shape[i] = s
  end
  if infer then
    local numel = x:numel()
    if known == 0 or numel % known ~= 0 then
      ctx:fail("cannot infer the -1 of shape [%s] for %d elements", table.concat(want, ","), numel)
    end
    shape[infer] = numel // known
  end
  local y = x:reshape(shape)
  if ctx.host[x] then ctx:known(y, ctx.host[x]) end
  return y
end

function M.ConstantOfShape(ctx, node)
  local shape = ctx:ints(node.inputs[1])
  local value, dtype = 0.0, "float32"
  local v = node.attrs.value
  if v then
    dtype = tostring(v.dtype)
    value = v:reshape({ 1 }):tolist()[1]
  end
  local t = Tensor.full(shape, value, { dtype = dtype })
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  if n <= 4096 and type(value) == "number" then
    local values = {}
    for i = 1, n do values[i] = value end
    ctx:known(t, values)
  end
  return t
end

function M.Range(ctx, node)
  local start, limit, delta = node.inputs[1], node.inputs[2], node.inputs[3]
  local dtype = tostring(start.dtype)
  local s, l, d = ctx:numbers(start)[1], ctx:numbers(limit)[1], ctx:numbers(delta)[1]
  if d == 0 then ctx:fail("delta must not be 0") end
  local n = math.max(math.ceil((l - s) / d), 0)
  n = math.tointeger(n) or ctx:fail("the element count %s is not finite", tostring(n))
  local values = {}
  if n <= 4096 then
    for i = 1, n do values[i] = s + (i - 1) * d end
  end
  -- start + i * delta, computed in the input's type as ONNX's definition does
  local idx = Tensor.arange(0, n, { dtype = dtype:match("int") and dtype or "float64" })
  local t = (idx * d + s):cast(dtype)
  if n <= 4096 then ctx:known(t, values) end
  return t
end

function M.Dropout(ctx, node)
  local x = node.inputs[1]
  local training = node.inputs[3] and ctx:values(node.inputs[3])[1]
  if training == true or training == 1 then
    local ratio = node.inputs[2] and ctx:numbers(node.inputs[2])[1] or node.attrs.ratio or 0.5
    if ratio ~= 0 then ctx:fail("training-mode Dropout (random values) is not supported") end
  end
  if node.wants(2) then
    return x, Tensor.full(shape_of(x), true, { dtype = "bool" })
  end
  return x
end

function M.EyeLike(ctx, node)
  local x = node.inputs[1]
  local shape = shape_of(x)
  if #shape ~= 2 then ctx:fail("input must be 2-d, got rank %d", #shape) end
  local dtype = node.attrs.dtype and (tensor_proto.dtype_of(node.attrs.dtype) or ctx:fail("unsupported dtype")) or
    tostring(x.dtype)
  local k = node.attrs.k or 0
  local rows = Tensor.arange(0, shape[1], { dtype = "int64" }):reshape({ shape[1], 1 })
  local cols = Tensor.arange(0, shape[2], { dtype = "int64" }):reshape({ 1, shape[2] })
  return (cols - rows):eq(k):cast(dtype)
end

function M.Flatten(ctx, node)
  local x = node.inputs[1]
  local shape = shape_of(x)
  local rank = #shape
  local axis = node.attrs.axis or 1
  if axis < 0 then axis = axis + rank end
  if axis < 0 or axis > rank then ctx:fail("axis %d is out of range for rank %d", node.attrs.axis, rank) end
  local outer = 1
  for d = 1, axis do outer = outer * shape[d] end
  local inner = 1
  for d = axis + 1, rank do inner = inner * shape[d] end
  return x:reshape({ outer, inner })
end

local function axes_of(ctx, node, attr_until)
  if node.opset and node.opset < attr_until then return node.attrs.axes end
  return node.inputs[2] and ctx:ints(node.inputs[2]) or node.attrs.axes
end

function M.Squeeze(ctx, node)
  local x = node.inputs[1]
  local shape = shape_of(x)
  local axes = axes_of(ctx, node, 13)
  local drop = {}
  if axes then
    for _, a in ipairs(axes) do
      local d = ctx:axis(a, #shape)
      if shape[d + 1] ~= 1 then ctx:fail("cannot squeeze axis %d of size %d", a, shape[d + 1]) end
      drop[d + 1] = true
    end
  else
    for d, s in ipairs(shape) do if s == 1 then drop[d] = true end end
  end
  local out = {}
  for d, s in ipairs(shape) do if not drop[d] then out[#out + 1] = s end end
  local y = x:reshape(out)
  if ctx.host[x] then ctx:known(y, ctx.host[x]) end
  return y
end

function M.Unsqueeze(ctx, node)
  local x = node.inputs[1]
  local shape = shape_of(x)
  local axes = axes_of(ctx, node, 13) or ctx:fail("no axes given")
  local rank = #shape + #axes
  local inserted = {}
  for _, a in ipairs(axes) do
    local d = ctx:axis(a, rank)
    if inserted[d] then ctx:fail("axis %d given twice", a) end
    inserted[d] = true
  end
  local out, k = {}, 1
  for d = 0, rank - 1 do
    if inserted[d] then out[d + 1] = 1 else out[d + 1] = shape[k]; k = k + 1 end
  end
  local y = x:reshape(out)
  if ctx.host[x] then ctx:known(y, ctx.host[x]) end
  return y
end

-- numpy broadcasting of two shapes
local function broadcast_shapes(ctx, a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local x, y = a[#a - n + i] or 1, b[#b - n + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then
      ctx:fail("shapes [%s] and [%s] do not broadcast", table.concat(a, ","), table.concat(b, ","))
    end
    out[i] = x == 1 and y or x
  end
  return out
end
M._broadcast_shapes = broadcast_shapes

function M.Expand(ctx, node)
  local x = node.inputs[1]
  local target = broadcast_shapes(ctx, shape_of(x), ctx:ints(node.inputs[2]))
  local shape = shape_of(x)
  local full = {}
  for i = 1, #target - #shape do full[i] = 1 end
  for _, s in ipairs(shape) do full[#full + 1] = s end
  return x:reshape(full):expand(target)
end


-- Random ops draw from tcl's generator (tcl.manual_seed), not ONNX's: the `seed` attribute cannot
-- reproduce the reference runtime's numbers, so the suite's cases that compare random values are
-- out of scope (lua/tcl/onnx/out_of_scope.lua); shapes, dtypes and distributions are ONNX's.
local function random_dtype(ctx, node, default)
  if node.attrs.dtype == nil then return default end
  local dtype, why = tensor_proto.dtype_of(node.attrs.dtype)
  if not dtype then ctx:fail("%s", why) end
  if not dtype:match("^float") and dtype ~= "bfloat16" then ctx:fail("dtype must be a float type, got %s", dtype) end
  return dtype
end

local function uniform(shape, dtype, low, high)
  local u = Tensor.rand(shape, { dtype = "float32" })
  if low ~= 0 or high ~= 1 then u = u * (high - low) + low end
  return u:cast(dtype)
end

local function normal(shape, dtype, mean, scale)
  local z = Tensor.randn(shape, { dtype = "float32" })
  if mean ~= 0 or scale ~= 1 then z = z * scale + mean end
  return z:cast(dtype)
end

function M.RandomUniform(ctx, node)
  local a = node.attrs
  return uniform(a.shape or ctx:fail("no shape attribute"), random_dtype(ctx, node, "float32"), a.low or 0.0,
    a.high or 1.0)
end

function M.RandomUniformLike(ctx, node)
  local x, a = node.inputs[1], node.attrs
  return uniform(shape_of(x), random_dtype(ctx, node, tostring(x.dtype)), a.low or 0.0, a.high or 1.0)
end

function M.RandomNormal(ctx, node)
  local a = node.attrs
  return normal(a.shape or ctx:fail("no shape attribute"), random_dtype(ctx, node, "float32"), a.mean or 0.0,
    a.scale or 1.0)
end

function M.RandomNormalLike(ctx, node)
  local x, a = node.inputs[1], node.attrs
  return normal(shape_of(x), random_dtype(ctx, node, tostring(x.dtype)), a.mean or 0.0, a.scale or 1.0)
end

-- 1 with probability x (each element of the input a probability), in dtype (default: x's)
function M.Bernoulli(ctx, node)
  local x = node.inputs[1]
  local dtype = tostring(x.dtype)
  if node.attrs.dtype ~= nil then
    local why
    dtype, why = tensor_proto.dtype_of(node.attrs.dtype)
    if not dtype then ctx:fail("%s", why) end
  end
  return Tensor.rand(shape_of(x), { dtype = "float32" }):lt(x:cast("float32")):cast(dtype)
end

return M
