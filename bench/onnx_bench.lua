-- bench/onnx_bench.lua — a model imported from ONNX against the same model written with the
-- Tensor API (same weights): the kernels after scheduling (count, and whether each kernel's AST
-- is the same), the outputs' largest difference, the median time of building the graph and
-- realizing it, and the median time of a tcl.jit replay (kernels only). Two models: a small CNN
-- that torch.onnx.export writes into a temp dir at bench time (python3-torch; conv, relu, max
-- pool, flatten, linear), and the conformance suite's pytorch-converted/test_Linear.
--
--   TCL_LUA_DIR=$PWD/lua build-rel/tcl bench/onnx_bench.lua [runs]
--
-- Not a test: it prints figures. A model whose op types tcl.onnx does not handle yet is
-- reported as skipped with the loader's message.
local tcl = require "tcl"
local npy = require "tcl.api.npy"
local schedule = require "tcl.schedule"
local Tensor = tcl.Tensor

local RUNS = math.tointeger(tonumber(arg and arg[1] or "")) or 21
local SUITE = "/usr/include/onnx/backend/test/data"

local function median(values)
  table.sort(values)
  return values[(#values + 1) // 2]
end

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The kernels scheduled for tensor t, as a list of their ASTs printed (inputs realized first).
local function kernels_of(t)
  local list = {}
  for i, k in ipairs(schedule.create({ t.uop }).kernels) do list[i] = tostring(k.ast) end
  return list
end

local function max_difference(a, b)
  return (a:cast("float64") - b:cast("float64")):abs():max():item()
end

-- Median seconds of `RUNS` calls of fn() (graph built and realized each time), after a warm-up
-- call that compiles the kernels.
local function median_time(fn)
  fn():realize()
  local times = {}
  for i = 1, RUNS do
    local start = tcl.clock()
    fn():realize()
    times[i] = tcl.clock() - start
  end
  return median(times)
end

-- Median seconds of `RUNS` replays of tcl.jit(fn) on x (the plan's kernels only, no graph building).
local function median_jitted(fn, x)
  local step = tcl.jit(fn)
  for _ = 1, 3 do step(x) end -- warm-up, capture, first replay
  local times = {}
  for i = 1, RUNS do
    local start = tcl.clock()
    step(x)
    tcl.synchronize()
    times[i] = tcl.clock() - start
  end
  return median(times)
end

-- Compares an imported model with its Tensor API twin (functions of x) and prints the figures.
local function compare(name, x, imported_of, written_of, reference)
  local function imported() return imported_of(x) end
  local function written() return written_of(x) end
  local a, b = imported(), written()
  local ka, kb = kernels_of(a), kernels_of(b)
  local same = #ka == #kb
  for i = 1, math.min(#ka, #kb) do same = same and ka[i] == kb[i] end
  a:realize()
  b:realize()
  local t_onnx, t_api = median_time(imported), median_time(written)
  print(string.format("%s: kernels imported %d, Tensor API %d, %s", name, #ka, #kb,
    same and "the same kernels" or "DIFFERENT kernels"))
  print(string.format("  outputs differ by at most %.3g%s", max_difference(a, b),
    reference and string.format(" (imported vs torch: %.3g)", max_difference(a, reference)) or ""))
  print(string.format("  median of %d runs (graph built + realized): imported %.3f ms, Tensor API %.3f ms, "
    .. "ratio %.2f", RUNS, t_onnx * 1e3, t_api * 1e3, t_onnx / t_api))
  local j_onnx, j_api = median_jitted(imported_of, x), median_jitted(written_of, x)
  print(string.format("  median of %d tcl.jit replays: imported %.3f ms, Tensor API %.3f ms, ratio %.2f", RUNS,
    j_onnx * 1e3, j_api * 1e3, j_onnx / j_api))
end

-- 1. the suite's pytorch-converted/test_Linear: Gemm(x, W, b) with transB = 1
do
  local path = SUITE .. "/pytorch-converted/test_Linear/model.onnx"
  local ok, model = pcall(tcl.onnx.load, path)
  if not ok then
    print("test_Linear: skipped: " .. tostring(model))
  else
    local w, b = model.graph.initializers["1"], model.graph.initializers["2"]
    w, b = w:contiguous():realize(), b:contiguous():realize()
    local x = Tensor.rand(4, 10):realize()
    compare("pytorch-converted/test_Linear (4x10 @ 10x8)", x, function(input) return model(input) end,
      function(input) return input:linear(w.T, b) end)
  end
end

-- 2. a small CNN exported by torch.onnx.export
do
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. quote(dir))
  local script = dir .. "/export.py"
  local f = assert(io.open(script, "w"))
  f:write([[
import sys, numpy as np, torch
d = sys.argv[1]
torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 10)).eval()
x = torch.randn(32, 1, 28, 28)
torch.onnx.export(net, x, d + "/cnn.onnx", input_names=["x"], output_names=["y"], opset_version=13)
for name, p in net.state_dict().items():
    np.save(d + "/" + name + ".npy", p.detach().numpy())
np.save(d + "/x.npy", x.numpy())
with torch.no_grad():
    np.save(d + "/y.npy", net(x).numpy())
]])
  f:close()
  local python = os.getenv("PYTHON") or "/usr/bin/python3"
  local status = os.execute(python .. " " .. quote(script) .. " " .. quote(dir) .. " >/dev/null 2>&1")
  if not status then
    print("CNN: skipped: python3 with torch could not export the model")
  else
    local ok, model = pcall(tcl.onnx.load, dir .. "/cnn.onnx")
    if not ok then
      print("CNN: skipped: " .. tostring(model))
    else
      local function p(name) return npy.read(dir .. "/" .. name .. ".npy"):realize() end
      local w1, b1, w2, b2, w3, b3 = p("0.weight"), p("0.bias"), p("3.weight"), p("3.bias"), p("7.weight"), p("7.bias")
      local x, reference = p("x"), p("y")
      compare("CNN (32x1x28x28, conv 16, conv 32, linear 10)", x, function(input) return model(input) end,
        function(input)
          local h = input:conv2d(w1, b1, { padding = 1 }):relu():max_pool2d(2)
          h = h:conv2d(w2, b2, { padding = 1 }):relu():max_pool2d(2)
          return h:flatten(2):linear(w3.T, b3)
        end, reference)
    end
  end
  os.execute("rm -rf " .. quote(dir))
end
