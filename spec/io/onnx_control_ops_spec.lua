-- spec/io/onnx_control_ops_spec.lua — every ONNX conformance case of ops/control.lua's,
-- ops/quantize.lua's and ops/signal.lua's op types passes (If, Loop, Scan, QuantizeLinear,
-- DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger,
-- QLinearConv, DFT, STFT, HannWindow, HammingWindow, BlackmanWindow, MelWeightMatrix) and ops/text.lua's
-- TfIdfVectorizer.
local conformance = require "tcl.onnx.conformance"

local PATTERNS = {
  "node/test_if", "node/test_loop", "node/test_scan", "node/test_range_float_type_positive_delta_expanded",
  "node/test_range_int32_type_negative_delta_expanded",
  "node/test_quantizelinear", "node/test_dequantizelinear", "node/test_dynamicquantizelinear",
  "node/test_matmulinteger", "node/test_qlinearmatmul", "node/test_basic_convinteger", "node/test_convinteger",
  "node/test_qlinearconv", "node/test_dft", "node/test_stft", "node/test_hannwindow", "node/test_hammingwindow",
  "node/test_blackmanwindow", "node/test_tfidfvectorizer", "node/test_melweightmatrix",
}

describe("ONNX conformance of the control-flow, quantization and signal handlers", function()
  it("passes every case of their op types", function()
    local f = io.open(conformance.ROOT .. "/node/test_hannwindow/model.onnx", "rb")
    if not f then pending("ONNX's test data is not installed (libonnx-testdata)") return end
    f:close()
    local failed, passed = {}, 0
    conformance.run(PATTERNS, function(case, status, reason)
      if status == "pass" then passed = passed + 1 else failed[#failed + 1] = case.name .. ": " .. tostring(reason) end
    end)
    assert.are.same({}, failed)
    assert.is_true(passed >= 52, "only " .. passed .. " cases ran")
  end)
end)
