-- tcl.onnx.ops.signal — ONNX's window generators (HannWindow, HammingWindow, BlackmanWindow):
-- size is read on the host (it fixes the output's shape); the window is built from Tensor ops
-- (arange, cos) in float64 and cast to output_datatype (default float32). periodic=1 (default)
-- divides by N, periodic=0 (symmetric) by N-1.
local Tensor = require "tcl.api.tensor"
local tensor_proto = require "tcl.onnx.tensor_proto"

local M = {}

local function window(coeffs)
  return function(ctx, node)
    local n = ctx:ints(node.inputs[1])[1]
    local periodic = (node.attrs.periodic or 1) ~= 0
    local dtype = "float32"
    if node.attrs.output_datatype then
      local why
      dtype, why = tensor_proto.dtype_of(node.attrs.output_datatype)
      if not dtype then ctx:fail("%s", why) end
    end
    local denom = periodic and n or (n - 1)
    local k = Tensor.arange(0, n, { dtype = "float64" }) * (2 * math.pi / denom)
    local w = (k * 0) + coeffs[1]
    for i = 2, #coeffs do
      w = w + (k * (i - 1)):cos() * coeffs[i]
    end
    return w:cast(dtype)
  end
end

M.HannWindow = window({ 0.5, -0.5 })
M.HammingWindow = window({ 25 / 46, -(1 - 25 / 46) })
M.BlackmanWindow = window({ 0.42, -0.5, 0.08 })

return M
