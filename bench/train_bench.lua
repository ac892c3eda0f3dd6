-- bench/train_bench.lua — training (issue 11) against the alternatives measured in the same run:
-- an MLP train step against the same step written by hand in numpy (OpenBLAS) and torch, one
-- epoch of the Fashion-MNIST CNN against torch, and the first call of a train step (capture,
-- schedule, compile) against the target. Figures are medians of jitted steps (wall clock);
-- first calls come from fresh processes with CACHELEVEL=0 (nothing from the disk cache).
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/train_bench.lua [part ...]
--
-- Parts (default all): mlp_step cnn_epoch first_call. Each runs in a child process, twice:
-- with the default threads (the cores) and with THREADS=1. The alternatives come from
-- bench/train_baselines.py (Debian's /usr/bin/python3 with python3-numpy and python3-torch;
-- skipped with a line when missing). BENCH_RUNS (default 21) sets the runs per median.
local support = require "bench.support"
local shell_quote, capture, figure, median = support.shell_quote, support.capture, support.figure, support.median

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 21
local BATCH = 128
local EPOCH_STEPS = 60000 // BATCH -- the example drops the last partial batch
local self_path = arg and arg[0] or "bench/train_bench.lua"

local function baselines(what, threads)
  local out = capture("/usr/bin/python3 bench/train_baselines.py --threads " .. threads .. " --runs " .. RUNS .. " "
    .. what)
  io.write(out)
end

-- The model and train step of examples/fashion_mnist.lua's MLP (SGD, as the numpy step) or CNN
-- (Adam, as the example), on random data of the example's shapes.
local function train_step(tcl, kind)
  local Tensor, nn = tcl.Tensor, tcl.nn
  Tensor.manual_seed(0)
  local model, opt
  if kind == "mlp" then
    model = nn.Sequential { nn.Linear(784, 256), Tensor.relu, nn.Linear(256, 10) }
    opt = tcl.optim.SGD(nn.state.get_parameters(model), { lr = 0.01 })
  else
    local function pool(x) return x:max_pool2d(2) end
    model = nn.Sequential {
      nn.Conv2d(1, 32, 3), nn.BatchNorm(32), Tensor.relu, pool,
      nn.Conv2d(32, 64, 3), nn.BatchNorm(64), Tensor.relu, pool,
      function(x) return x:flatten(2) end, nn.Linear(64 * 5 * 5, 10),
    }
    opt = tcl.optim.Adam(nn.state.get_parameters(model), { lr = 1e-3 })
  end
  local step = tcl.jit(function(x, y)
    local loss = nn.train(function() return model(x):cross_entropy(y) end)
    opt:zero_grad()
    loss:backward()
    return opt:step(loss)
  end)
  local x = kind == "mlp" and Tensor.randn(BATCH, 784) or Tensor.randn(BATCH, 1, 28, 28)
  return step, x:realize(), Tensor.randint(1, 11, { BATCH }):realize()
end

local function median_step_ms(tcl, step, x, y)
  for _ = 1, 3 do step(x, y) end -- warm-up, capture, a first replay
  local times = {}
  for i = 1, RUNS do
    local start = tcl.clock()
    step(x, y)
    times[i] = (tcl.clock() - start) * 1e3
  end
  return median(times)
end

local parts = {}

function parts.mlp_step(tcl, threads)
  local step, x, y = train_step(tcl, "mlp")
  figure("mlp_step_tcl", median_step_ms(tcl, step, x, y), "ms")
  baselines("mlp_numpy mlp_torch", threads)
end

function parts.cnn_epoch(tcl, threads)
  local step, x, y = train_step(tcl, "cnn")
  figure("cnn_epoch_tcl", median_step_ms(tcl, step, x, y) * EPOCH_STEPS / 1e3, "s")
  local out = capture("/usr/bin/python3 bench/train_baselines.py --threads " .. threads .. " --runs " .. RUNS
    .. " cnn_torch")
  local torch_ms = tonumber(out:match("figure cnn_step_torch (%S+)"))
  if torch_ms then figure("cnn_epoch_torch", torch_ms * EPOCH_STEPS / 1e3, "s") else io.write(out) end
end

function parts.first_call(tcl)
  for _, kind in ipairs({ "mlp", "cnn" }) do
    local step, x, y = train_step(tcl, kind)
    local start = tcl.clock()
    step(x, y)
    figure(kind .. "_first_call_tcl", (tcl.clock() - start) * 1e3, "ms")
    start = tcl.clock()
    step(x, y)
    figure(kind .. "_capture_tcl", (tcl.clock() - start) * 1e3, "ms")
  end
end

---------------------------------------------------------------------------------------------
-- the parent

local ORDER = { "mlp_step", "cnn_epoch", "first_call" }

local ROWS = {
  mlp_step = { tcl = "mlp_step_tcl", alternatives = { "mlp_step_numpy", "mlp_step_torch" }, unit = "ms",
    target = 1.0, what = "MLP 784-256-10 train step, batch 128" },
  cnn_epoch = { tcl = "cnn_epoch_tcl", alternatives = { "cnn_epoch_torch" }, unit = "s",
    what = "one epoch of the CNN (468 steps of 128)" },
  mlp_first = { tcl = "mlp_first_call_tcl", limit = 200, unit = "ms", what = "MLP train step, first call",
    note = "tinygrad: 1.5-2.9 s" },
  mlp_capture = { tcl = "mlp_capture_tcl", unit = "ms", what = "MLP train step, second call (capture)" },
  cnn_first = { tcl = "cnn_first_call_tcl", unit = "ms", what = "CNN train step, first call" },
}

local function report(row, figures)
  local mine = figures[row.tcl]
  if not mine then
    print(string.format("  %-44s no figure (the child failed)", row.what))
    return
  end
  local line = string.format("  %-44s tcl %9.3f %s", row.what, mine, row.unit)
  if row.limit then
    line = line .. string.format("   (target <= %g: %s%s)", row.limit, mine <= row.limit and "PASS" or "MISS",
      row.note and "; " .. row.note or "")
  elseif row.alternatives then
    local best, best_name
    for _, name in ipairs(row.alternatives) do
      local v = figures[name]
      if v then
        line = line .. string.format("   %s %9.3f", name:match("_(%a+)$"), v)
        if best == nil or v < best then best, best_name = v, name end
      end
    end
    if best then
      local ratio = best / mine
      line = line .. string.format("   speed %.2f of %s", ratio, best_name:match("_(%a+)$"))
      if row.target then
        line = line .. string.format(" (target >= %.2f: %s)", row.target, ratio >= row.target and "PASS" or "MISS")
      end
    end
  end
  print(line)
end

local ROWS_OF = { mlp_step = { "mlp_step" }, cnn_epoch = { "cnn_epoch" },
  first_call = { "mlp_first", "mlp_capture", "cnn_first" } }

local function parent(which)
  for _, threads in ipairs { "", "1" } do
    local count = threads == "" and (tonumber(capture("nproc")) or 1) or 1
    print(threads == "" and "== default threads (the cores)" or "== THREADS=1")
    for _, what in ipairs(which) do
      local prefix = "CACHELEVEL=0 " .. (threads == "" and "" or "THREADS=1 ")
      local out = capture(prefix .. "lua5.4 " .. shell_quote(self_path) .. " --child " .. what .. " "
        .. math.tointeger(count))
      local figures = {}
      for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
      for line in out:gmatch("[^\n]+") do
        if line:match("^skip") or not line:match("^figure") then print("  " .. line) end
      end
      for _, row in ipairs(ROWS_OF[what]) do report(ROWS[row], figures) end
    end
  end
end

if arg and arg[1] == "--child" then
  local tcl = require "tcl"
  parts[arg[2]](tcl, arg[3] or "1")
else
  local which = {}
  for i = 1, #(arg or {}) do which[#which + 1] = arg[i] end
  if #which == 0 then which = ORDER end
  for _, what in ipairs(which) do
    if not parts[what] then
      error("train_bench: unknown part '" .. what .. "' (" .. table.concat(ORDER, ", ") .. ")")
    end
  end
  parent(which)
end
