-- spec/io/onnx_normalization_rnn_spec.lua — every ONNX conformance case of ops/normalization_rnn.lua's op
-- types passes (LayerNormalization, BatchNormalization, InstanceNormalization, LRN,
-- MeanVarianceNormalization, RNN, GRU, LSTM).
local conformance = require "tcl.onnx.conformance"

local PATTERNS = {
  "node/test_layer_normalization", "node/test_batchnorm", "node/test_instancenorm", "node/test_lrn",
  "node/test_mvn", "node/test_rnn_seq_length", "node/test_simple_rnn", "node/test_gru", "node/test_lstm",
  "pytorch-converted/test_BatchNorm", "pytorch-operator/test_operator_symbolic_override",
}

describe("ONNX conformance of the normalization and recurrent handlers", function()
  it("passes every case of their op types", function()
    local f = io.open(conformance.ROOT .. "/node/test_lrn/model.onnx", "rb")
    if not f then pending("ONNX's test data is not installed (libonnx-testdata)") return end
    f:close()
    local failed, passed = {}, 0
    conformance.run(PATTERNS, function(case, status, reason)
      if status == "pass" then passed = passed + 1 else failed[#failed + 1] = case.name .. ": " .. tostring(reason) end
    end)
    assert.are.same({}, failed)
    assert.is_true(passed >= 67, "only " .. passed .. " cases ran")
  end)
end)
