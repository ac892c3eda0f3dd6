-- bench/train_bench.lua — training (issue 11) against the alternatives measured in the same run:
-- an MLP train step against the same step written by hand in numpy (OpenBLAS) and torch, one
-- epoch of the Fashion-MNIST CNN against torch, and the first call of a train step (capture,
-- schedule, compile) against the target. Figures are medians of jitted steps (wall clock);
-- first calls come from fresh processes with CACHELEVEL=0 (nothing from the disk cache).
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/train_bench.lua [part ...]
--
-- Parts (default all): mlp_step cnn_epoch gpt_step first_call. gpt_step is a GPT-style block
-- train step (d = 256, 4 heads, seq 128, batch 8, pre-layernorm, causal attention through
-- nn.MultiheadAttention, MLP 256-1024-256 with GELU, loss mean(out^2), AdamW) against torch's
-- nn.TransformerEncoderLayer(256, 4, 1024, norm_first, GELU, causal mask) with AdamW, in ms and
-- GFLOPS (3 x the forward's matmul flops). Each runs in a child process, twice: with the
-- default threads (the cores) and with THREADS=1. The alternatives come from
-- bench/train_baselines.py (Debian's /usr/bin/python3 with python3-numpy and python3-torch;
-- skipped with a line when missing). A row below torch names its slowest kernel (one profiled
-- step) with its GFLOPS against the FMA peak measured in the same run (cpu_baselines fma_peak
-- of BENCH_BUILD, default build-rel). BENCH_RUNS (default 21) sets the runs per median.
local support = require "bench.support"
local shell_quote, capture, figure, median = support.shell_quote, support.capture, support.figure, support.median

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 21
local build = os.getenv("BENCH_BUILD") or "build-rel"
local BATCH = 128
local EPOCH_STEPS = 60000 // BATCH -- the example drops the last partial batch
local self_path = arg and arg[0] or "bench/train_bench.lua"

local function baselines(what, threads)
  local out = capture(support.python() .. " bench/train_baselines.py --threads " .. threads .. " --runs " .. RUNS .. " "
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

-- "kernel <part> <name> <seconds> <ops> <bytes>": the slowest kernel of one profiled step.
local function slowest_kernel(tcl, part, step, x, y)
  local report = tcl.profile(step, x, y)
  local worst
  for _, k in ipairs(report.kernels) do
    if not worst or k.seconds > worst.seconds then worst = k end
  end
  if worst then
    io.write(string.format("kernel %s %s %.6g %.6g %.6g %.6g\n", part, worst.name, worst.seconds, worst.ops or 0,
      worst.bytes or 0, report.seconds))
  end
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
  slowest_kernel(tcl, "cnn_epoch", step, x, y)
  local out = capture(support.python() .. " bench/train_baselines.py --threads " .. threads .. " --runs " .. RUNS
    .. " cnn_torch")
  local torch_ms = tonumber(out:match("figure cnn_step_torch (%S+)"))
  if torch_ms then figure("cnn_epoch_torch", torch_ms * EPOCH_STEPS / 1e3, "s") else io.write(out) end
end

-- The GPT-style block (pre-layernorm, causal self-attention, GELU MLP) and its AdamW train step.
local GPT = { d = 256, heads = 4, seq = 128, batch = 8, hidden = 1024 }

-- The forward's flops: the four projections (24 d^2 per token with hidden = 4 d) and the
-- attention's two products (4 seq d per token, every key); a train step counts 3 times that.
local function gpt_step_flops()
  local tokens = GPT.batch * GPT.seq
  local forward = tokens * (2 * GPT.d * 3 * GPT.d + 2 * GPT.d * GPT.d + 2 * 2 * GPT.d * GPT.hidden
    + 4 * GPT.seq * GPT.d)
  return 3 * forward
end

function parts.gpt_step(tcl, threads)
  local Tensor, nn = tcl.Tensor, tcl.nn
  Tensor.manual_seed(0)
  local model = {
    ln1 = nn.LayerNorm(GPT.d), attn = nn.MultiheadAttention(GPT.d, GPT.heads, { batch_first = true }),
    ln2 = nn.LayerNorm(GPT.d), fc1 = nn.Linear(GPT.d, GPT.hidden), fc2 = nn.Linear(GPT.hidden, GPT.d),
  }
  local opt = tcl.optim.AdamW(nn.state.get_parameters(model), { lr = 1e-3 })
  local step = tcl.jit(function(x)
    local loss = nn.train(function()
      local a = model.ln1(x)
      local h = x + model.attn(a, a, a, { is_causal = true, need_weights = false })
      local out = h + model.fc2(model.fc1(model.ln2(h)):gelu())
      return out:square():mean()
    end)
    opt:zero_grad()
    loss:backward()
    return opt:step(loss)
  end)
  local x = Tensor.randn(GPT.batch, GPT.seq, GPT.d):realize()
  local ms = median_step_ms(tcl, step, x)
  figure("gpt_step_tcl", ms, "ms")
  figure("gpt_step_tcl_gflops", gpt_step_flops() / (ms * 1e-3) * 1e-9, "GFLOPS")
  slowest_kernel(tcl, "gpt_step", step, x)
  local out = capture(support.python() .. " bench/train_baselines.py --threads " .. threads .. " --runs " .. RUNS
    .. " gpt_torch")
  local torch_ms = tonumber(out:match("figure gpt_step_torch (%S+)"))
  if torch_ms then
    figure("gpt_step_torch", torch_ms, "ms")
    figure("gpt_step_torch_gflops", gpt_step_flops() / (torch_ms * 1e-3) * 1e-9, "GFLOPS")
  else
    io.write(out)
  end
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

local ORDER = { "mlp_step", "cnn_epoch", "gpt_step", "first_call" }

local ROWS = {
  mlp_step = { tcl = "mlp_step_tcl", alternatives = { "mlp_step_numpy", "mlp_step_torch" }, unit = "ms",
    target = 1.0, what = "MLP 784-256-10 train step, batch 128" },
  cnn_epoch = { tcl = "cnn_epoch_tcl", alternatives = { "cnn_epoch_torch" }, unit = "s", target = 1.0,
    what = "one epoch of the CNN (468 steps of 128)", part = "cnn_epoch" },
  gpt_step = { tcl = "gpt_step_tcl", alternatives = { "gpt_step_torch" }, unit = "ms", target = 1.0,
    what = "GPT block train step (d 256, AdamW)", part = "gpt_step",
    gflops = { "gpt_step_tcl_gflops", "gpt_step_torch_gflops" } },
  mlp_first = { tcl = "mlp_first_call_tcl", limit = 200, unit = "ms", what = "MLP train step, first call",
    note = "tinygrad: 1.5-2.9 s" },
  mlp_capture = { tcl = "mlp_capture_tcl", unit = "ms", what = "MLP train step, second call (capture)" },
  cnn_first = { tcl = "cnn_first_call_tcl", unit = "ms", what = "CNN train step, first call" },
}

local function report(row, figures, kernels, peak)
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
      if row.gflops and figures[row.gflops[1]] and figures[row.gflops[2]] then
        line = line .. string.format("   [GFLOPS tcl %.1f, torch %.1f]", figures[row.gflops[1]], figures[row.gflops[2]])
      end
      if row.target and ratio < row.target and row.part and kernels[row.part] then
        local name, seconds, ops, bytes, total = kernels[row.part]:match("(%S+) (%S+) (%S+) (%S+) (%S+)")
        seconds, ops, bytes, total = tonumber(seconds), tonumber(ops), tonumber(bytes), tonumber(total)
        if seconds and seconds > 0 then
          local gflops = ops / seconds * 1e-9
          line = line .. string.format(
            "\n      slowest kernel %s: %.2f ms of %.2f ms of kernels a step, %.1f GFLOPS%s, %.1f GB/s",
            name, seconds * 1e3, total * 1e3, gflops,
            peak and string.format(" (%.1f%% of the FMA peak %.0f)", 100 * gflops / peak, peak) or "",
            bytes / seconds * 1e-9)
        end
      end
    end
  end
  print(line)
end

local ROWS_OF = { mlp_step = { "mlp_step" }, cnn_epoch = { "cnn_epoch" }, gpt_step = { "gpt_step" },
  first_call = { "mlp_first", "mlp_capture", "cnn_first" } }

local function parent(which)
  for _, threads in ipairs { "", "1" } do
    local count = threads == "" and (tonumber(capture("nproc")) or 1) or 1
    local peak_out = capture((threads == "" and "" or "THREADS=1 ") .. shell_quote(build .. "/bench/cpu_baselines")
      .. " fma_peak")
    local peak = tonumber(peak_out:match("fma_peak%s+%S+%s+([%d.e+-]+)"))
    print((threads == "" and "== default threads (the cores)" or "== THREADS=1")
      .. (peak and string.format("; FMA peak this run %.1f GFLOPS", peak) or ""))
    for _, what in ipairs(which) do
      local prefix = "CACHELEVEL=0 " .. (threads == "" and "" or "THREADS=1 ")
      local out = capture(prefix .. "lua5.4 " .. shell_quote(self_path) .. " --child " .. what .. " "
        .. math.tointeger(count))
      local figures = {}
      local kernels = {}
      for name, value in out:gmatch("figure (%S+) (%S+)") do figures[name] = tonumber(value) end
      for part, rest in out:gmatch("kernel (%S+) ([^\n]+)") do kernels[part] = rest end
      for line in out:gmatch("[^\n]+") do
        if line:match("^skip") or not (line:match("^figure") or line:match("^kernel ")) then print("  " .. line) end
      end
      for _, row in ipairs(ROWS_OF[what]) do report(ROWS[row], figures, kernels, peak) end
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
