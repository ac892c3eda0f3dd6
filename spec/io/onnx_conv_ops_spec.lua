-- spec/io/onnx_conv_ops_spec.lua — every ONNX conformance case of ops/conv.lua's op types passes
-- (Conv, ConvTranspose, the pools, Pad, Resize, Upsample, MaxUnpool, GridSample, RoiAlign).
local conformance = require "tcl.onnx.conformance"

local PATTERNS = {
  "node/test_conv", "node/test_basic_conv_with", "node/test_basic_conv_without", "node/test_maxpool",
  "node/test_averagepool", "node/test_globalaveragepool", "node/test_globalmaxpool", "node/test_lppool",
  "node/test_maxunpool", "node/test_constant_pad", "node/test_edge_pad", "node/test_reflect_pad",
  "node/test_resize", "node/test_upsample", "node/test_gridsample", "node/test_roialign",
  "pytorch-converted/test_AvgPool", "pytorch-converted/test_Conv", "pytorch-converted/test_MaxPool",
  "pytorch-converted/test_ConstantPad", "pytorch-converted/test_ReflectionPad",
  "pytorch-converted/test_ReplicationPad", "pytorch-converted/test_ZeroPad", "pytorch-converted/test_PixelShuffle",
  "pytorch-operator/test_operator_conv", "pytorch-operator/test_operator_maxpool",
  "pytorch-operator/test_operator_pad",
}

describe("ONNX conformance of the convolution, pooling, padding and resampling handlers", function()
  it("passes every case of their op types", function()
    local f = io.open(conformance.ROOT .. "/node/test_conv_with_strides_padding/model.onnx", "rb")
    if not f then pending("ONNX's test data is not installed (libonnx-testdata)") return end
    f:close()
    local failed, passed = {}, 0
    conformance.run(PATTERNS, function(case, status, reason)
      if case.name:find("convinteger", 1, true) then return end -- ConvInteger: the quantization handlers'
      if status == "pass" then passed = passed + 1 else failed[#failed + 1] = case.name .. ": " .. tostring(reason) end
    end)
    assert.are.same({}, failed)
    assert.is_true(passed >= 133, "only " .. passed .. " cases ran")
  end)
end)
