-- spec/support/viz_mlp_step.lua — the run whose viewer page the browser spec opens and
-- scripts/viewer_screenshots.sh photographs: one SGD step of a 4 -> 8 -> 3 MLP on a batch of
-- 6, recorded by tcl.viz (the parameters made first: their initialization is a realize of its
-- own). Returns a function that records it: data, loss = record().
local tcl = require "tcl"
local Tensor = tcl.Tensor

return function()
  tcl.manual_seed(7)
  local nn = tcl.nn
  local model = nn.Sequential { nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 3) }
  local params = nn.state.get_parameters(model)
  for _, p in ipairs(params) do p:realize() end
  local opt = tcl.optim.SGD(params, { lr = 0.1 })
  local x = Tensor.arange(24):reshape(6, 4):float() / 24
  local y = Tensor({ 1, 2, 3, 1, 2, 3 })
  return tcl.viz.record(function()
    opt:zero_grad()
    local loss = model(x):cross_entropy(y)
    loss:backward()
    opt:step()
    return loss:item()
  end)
end
