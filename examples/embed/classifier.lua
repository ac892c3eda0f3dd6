-- classifier.lua — the model examples/embed/inference.c runs: an MLP for 28x28 images (784 ->
-- 256 -> 10) with fixed random weights (Tensor.manual_seed), or the weights of a safetensors
-- file when the host passes a path as the script's first argument (tcl.nn.state.safe_save
-- writes one). It defines the globals the host calls:
--   classify(x)      x: float32 [batch, 784] -> logits float32 [batch, 10] (jitted: after two
--                    warm-up calls per batch size each call replays the captured kernels)
--   classify_lazy(x) the same computation without tcl.jit, for the host's check
local nn = tcl.nn
local weights_path = ...

Tensor.manual_seed(7)
local model = nn.Sequential {
  nn.Linear(784, 256),
  function(h) return h:relu() end,
  nn.Linear(256, 10),
}
if weights_path then nn.state.load_state_dict(model, nn.state.safe_load(weights_path)) end

local function forward(x) return model(x) end

classify = tcl.jit(forward)
classify_lazy = forward
