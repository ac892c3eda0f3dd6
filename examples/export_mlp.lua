-- examples/export_mlp.lua — a model script for `tcl export`: an MLP classifier for 28x28
-- images (784-128-10, as examples/fashion_mnist.lua trains), exported for batches of 8.
--
--   tcl export examples/export_mlp.lua -o out            # out/mlp.h, mlp.c, mlp_weights.c, mlp_kernels.o
--   cc -std=c11 -O2 -I out examples/export_app.c out/mlp.c out/mlp_weights.c out/mlp_kernels.o -lpthread -lm -o app
--   tcl export examples/export_mlp.lua -o out --batch-sizes 8,1,64   # one plan per batch size
--
-- The script returns what the command exports: `forward` (a function of tensors), `inputs`
-- (example tensors, or a function(batch) making them: their shapes and dtypes are the exported
-- model's), `model` (names the weights) and `name` (the C prefix). The weights here are the
-- seeded initial ones; a trained model would load its own first:
-- nn.state.load_state_dict(model, nn.state.safe_load(path)).
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn

Tensor.manual_seed(0)
local model = nn.Sequential { nn.Linear(784, 128), Tensor.relu, nn.Linear(128, 10) }

return {
  name = "mlp",
  model = model,
  -- class probabilities and the most likely class (1-based) of each image
  forward = function(x)
    local logits = model(x)
    return logits:softmax(-1), logits:argmax(-1)
  end,
  inputs = function(batch) return { Tensor.rand(batch or 8, 784) } end,
}
