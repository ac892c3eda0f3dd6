-- tcl.onnx.ops.quantize — ONNX's QuantizeLinear and DequantizeLinear, built from Tensor ops
-- (they fuse): per-tensor (scalar scale) or per-axis (1-D scale along `axis`, default 1);
-- quantizing rounds half to even (Tensor round) and saturates to the zero point's type
-- (uint8 when the zero point is omitted).
local M = {}

local RANGE = { uint8 = { 0, 255 }, int8 = { -128, 127 }, uint16 = { 0, 65535 }, int16 = { -32768, 32767 },
  int32 = { -2147483648, 2147483647 } }

-- a 1-D scale / zero point reshaped to broadcast along x's axis (0-based ONNX axis)
local function along(t, x, axis)
  if t == nil or #t:size() == 0 or t:numel() == 1 and #t:size() == 0 then return t end
  local rank = #x:size()
  axis = axis or 1
  if axis < 0 then axis = axis + rank end
  local shape = {}
  for i = 1, rank do shape[i] = 1 end
  shape[axis + 1] = t:numel()
  return t:reshape(shape)
end

function M.QuantizeLinear(ctx, node)
  local x, scale, zp = node.inputs[1], node.inputs[2], node.inputs[3]
  local dtype = zp and tostring(zp.dtype) or "uint8"
  local range = RANGE[dtype] or ctx:fail("QuantizeLinear to %s is not supported", dtype)
  scale = along(scale, x, node.attrs.axis)
  local y = (x:cast("float32") / scale:cast("float32")):round()
  if zp then y = y + along(zp, x, node.attrs.axis):cast("float32") end
  return y:maximum(range[1]):minimum(range[2]):cast(dtype)
end

-- The result has the scale's type (float16 and bfloat16 scales at opset 19); computed in float32.
function M.DequantizeLinear(_, node)
  local x, scale, zp = node.inputs[1], node.inputs[2], node.inputs[3]
  local dtype = tostring(scale.dtype)
  scale = along(scale, x, node.attrs.axis)
  local y = x:cast("float32")
  if zp then y = y - along(zp, x, node.attrs.axis):cast("float32") end
  y = y * scale:cast("float32")
  return dtype == "float32" and y or y:cast(dtype)
end

-- DynamicQuantizeLinear: uint8, scale = (max(0, max x) - min(0, min x)) / 255 and zero point
-- round(-min / scale) saturated; all from Tensor reductions (no host read).
function M.DynamicQuantizeLinear(_, node)
  local x = node.inputs[1]:cast("float32")
  local lo, hi = x:min():minimum(0), x:max():maximum(0)
  local scale = (hi - lo) / 255
  local zp = ((lo * -1) / scale):round():maximum(0):minimum(255)
  local y = ((x / scale):round() + zp):maximum(0):minimum(255):cast("uint8")
  return y, scale, zp:cast("uint8")
end

-- a zero point of A: per row when 1-D of more than one value (A's second-last dim)
local function minus_zp(t, zp, row)
  t = t:cast("float64")
  if not zp then return t end
  zp = zp:cast("float64")
  if row and #zp:size() == 1 and zp:numel() > 1 then zp = zp:reshape({ zp:numel(), 1 }) end
  return t - zp
end

-- MatMulInteger: (A - a_zp) @ (B - b_zp) as int32; the product is formed in float64 (exact
-- for the int8/uint8 operands' sums of the suite's sizes) and cast.
function M.MatMulInteger(_, node)
  local a = minus_zp(node.inputs[1], node.inputs[3], true)
  local b = minus_zp(node.inputs[2], node.inputs[4], false)
  return a:matmul(b):cast("int32")
end

function M.QLinearMatMul(_, node)
  local i = node.inputs
  local a = minus_zp(i[1], i[3], true) * i[2]:cast("float64")
  local b = minus_zp(i[4], i[6], false) * i[5]:cast("float64")
  local dtype = tostring(i[8].dtype)
  local range = RANGE[dtype]
  local y = (a:matmul(b) / i[7]:cast("float64")):round() + i[8]:cast("float64")
  return y:maximum(range[1]):minimum(range[2]):cast(dtype)
end

-- ConvInteger and QLinearConv reuse ops/conv.lua's Conv handler on a node whose inputs are
-- the zero-point-shifted (and for QLinearConv scaled) operands in float64: exact for the
-- suite's small integers. A per-output-channel weight zero point / scale is 1-D of M values.
local function conv_on(ctx, node, x, w, b)
  local conv = require("tcl.onnx.ops.conv").Conv
  local shadow = setmetatable({ inputs = { x, w, b }, ninputs = b and 3 or 2 }, { __index = node })
  return conv(ctx, shadow)
end

local function per_channel(t, w)
  if #t:size() == 1 and t:numel() > 1 then
    local shape = { t:numel() }
    for _ = 2, #w:size() do shape[#shape + 1] = 1 end
    return t:reshape(shape)
  end
  return t
end

function M.ConvInteger(ctx, node)
  local i = node.inputs
  local x = i[1]:cast("float64")
  if i[3] then x = x - i[3]:cast("float64") end
  local w = i[2]:cast("float64")
  if i[4] then w = w - per_channel(i[4]:cast("float64"), w) end
  return conv_on(ctx, node, x, w):cast("int32")
end

function M.QLinearConv(ctx, node)
  local i = node.inputs
  local x = (i[1]:cast("float64") - i[3]:cast("float64")) * i[2]:cast("float64")
  local w = i[4]:cast("float64")
  w = (w - per_channel(i[6]:cast("float64"), w)) * per_channel(i[5]:cast("float64"), w)
  local b = i[9] and i[9]:cast("float64") * (i[2]:cast("float64") * i[5]:cast("float64"))
  local dtype = tostring(i[8].dtype)
  local range = RANGE[dtype]
  local y = (conv_on(ctx, node, x, w, b) / i[7]:cast("float64")):round() + i[8]:cast("float64")
  return y:maximum(range[1]):minimum(range[2]):cast(dtype)
end

return M
