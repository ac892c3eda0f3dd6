-- bench/index_check_bench.lua — what the 1-based index checks (lua/tcl/api/index_checks.lua)
-- cost on the Fashion-MNIST MLP train step (examples/fashion_mnist.lua's model, batch 128,
-- cross_entropy on int32 labels, Adam): two jitted steps, one captured with the checks and one
-- without (index_checks.disabled while it captures), timed alternately, each run as the
-- example runs it (the step, then loss:item(), which reads the flag of the checked one).
-- Figures are medians of BENCH_RUNS (default 201) runs: wall clock, and the kernels' own time.
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/index_check_bench.lua
local tcl = require "tcl"
local index_checks = require "tcl.api.index_checks"
local support = require "bench.support"

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 201
local BATCH = 128
local Tensor, nn = tcl.Tensor, tcl.nn

-- A jitted train step of a fresh MLP, captured with the checks on or off, and its inputs.
local function train_step(checked)
  Tensor.manual_seed(0)
  local model = nn.Sequential { nn.Linear(784, 256), Tensor.relu, nn.Linear(256, 10) }
  local opt = tcl.optim.Adam(nn.state.get_parameters(model), { lr = 1e-3 })
  local step = tcl.jit(function(x, y)
    local loss = nn.train(function() return model(x):cross_entropy(y) end)
    opt:zero_grad()
    loss:backward()
    return opt:step(loss)
  end)
  local x, y = Tensor.randn(BATCH, 784):realize(), Tensor.randint(1, 11, { BATCH }):realize()
  index_checks.disabled = not checked
  for _ = 1, 3 do step(x, y):item() end -- warm-up, capture, a first replay
  index_checks.disabled = false
  return step, x, y
end

local checked, x, y = train_step(true)
local unchecked = train_step(false)
local times = { checked = {}, unchecked = {} }
for i = 1, RUNS do
  for _, which in ipairs(i % 2 == 0 and { "checked", "unchecked" } or { "unchecked", "checked" }) do
    local step = which == "checked" and checked or unchecked
    local start = tcl.clock()
    step(x, y):item()
    times[which][i] = (tcl.clock() - start) * 1e3
  end
end
-- the kernels' own time (tcl.profile), less noisy than the wall clock on a busy machine
local kernel_ms = { checked = {}, unchecked = {} }
for i = 1, RUNS do
  for which, step in pairs({ checked = checked, unchecked = unchecked }) do
    local report = tcl.profile(function() step(x, y):item() end)
    kernel_ms[which][i] = report.seconds * 1e3
  end
end
local with, without = support.median(times.checked), support.median(times.unchecked)
support.figure("mlp_step_kernels_checked", support.median(kernel_ms.checked), "ms")
support.figure("mlp_step_kernels_unchecked", support.median(kernel_ms.unchecked), "ms")
support.figure("mlp_step_checked", with, "ms")
support.figure("mlp_step_unchecked", without, "ms")
support.figure("index_check_overhead", (with / without - 1) * 100, "%")
print(string.format("kernels per step: checked %d, unchecked %d", checked:stats().kernels,
  unchecked:stats().kernels))
