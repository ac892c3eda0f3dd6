-- examples/train_distributed.lua — the Fashion-MNIST MLP of examples/fashion_mnist.lua trained
-- data-parallel (tcl.distributed.DistributedDataParallel): as one process, or one process per
-- rank under mpirun, each rank a share of every global batch; the gradients are averaged over
-- the ranks, so every rank keeps the weights one process would have with the global batch.
--
--   tcl examples/train_distributed.lua                                  one process
--   mpirun -np 2 tcl examples/train_distributed.lua                     two ranks, the same training
--   tcl examples/train_distributed.lua --samples 512 --epochs 1 --test 500 --save w.safetensors
--
-- Options: --samples N (the first N training images, default all 60000), --epochs N (3),
-- --batch N (the global batch, 128; each rank gets batch / ranks of it), --test N (the first N
-- test images to score, default all 10000), --save PATH (rank 1 writes the final weights
-- as safetensors), --bucket MB (the gradient buckets' size in MiB, default 25: one bucket for
-- this MLP; smaller ones overlap their all-reduce with the rest of the backward). Rank 1
-- prints each epoch's loss and accuracy over all ranks' samples, its wall-clock seconds and
-- its own CPU seconds (os.clock), then the test accuracy, and the wrapper's counts.
local tcl = require "tcl"
local Tensor, nn, dist = tcl.Tensor, tcl.nn, tcl.distributed

local MEAN, STD = 0.2860, 0.3530 -- of the training images, scaled to [0, 1]

local function usage(message)
  io.stderr:write("train_distributed: ", message, "\nusage: tcl examples/train_distributed.lua [--samples N] "
    .. "[--epochs N] [--batch N] [--test N] [--save PATH] [--bucket MB]\n")
  os.exit(2)
end

local options = { samples = 60000, epochs = 3, batch = 128, test = 10000 }
do
  local i = 1
  while arg and arg[i] do
    local key, value = arg[i]:match("^%-%-(%a+)$"), arg[i + 1]
    if key == nil or (options[key] == nil and key ~= "save" and key ~= "bucket") then
      usage("unknown option " .. arg[i])
    end
    if value == nil then usage("option --" .. key .. " needs a value") end
    if key == "save" then
      options.save = value
    elseif key == "bucket" then
      options.bucket = tonumber(value)
      if options.bucket == nil or options.bucket <= 0 or options.bucket ~= options.bucket then
        usage("--bucket must be a number of MiB > 0")
      end
    else
      options[key] = math.tointeger(tonumber(value))
      if options[key] == nil or options[key] < 1 then usage("--" .. key .. " must be a positive integer") end
    end
    i = i + 2
  end
end

-- uint8 images (N, 28, 28) -> normalized float32 (N, 784); uint8 labels -> 1-based classes
local function inputs(images) return ((images:float() / 255 - MEAN) / STD):flatten(2) end
local function classes(labels) return labels:int() + 1 end

local rank, world = dist.rank(), dist.world_size()
local function say(...) if rank == 1 then print(string.format(...)) end end

local train_x, train_y, test_x, test_y = tcl.data.fashion_mnist()
local samples, tests = math.min(options.samples, train_x.shape[1]), math.min(options.test, test_x.shape[1])
if options.batch % world ~= 0 then usage(string.format("--batch %d does not split among %d ranks", options.batch,
  world)) end

Tensor.manual_seed(0)
local model = nn.Sequential { nn.Linear(784, 256), Tensor.relu, nn.Linear(256, 10) }
-- every rank starts from rank 1's weights
local ddp = dist.DistributedDataParallel(model, { bucket_cap_mb = options.bucket })
local opt = tcl.optim.Adam(ddp:parameters(), { lr = 1e-3 })
local step = ddp:train_step(function(x, y)
  local logits = nn.train(function() return ddp(inputs(x)) end)
  local loss = logits:cross_entropy(classes(y)) -- the mean over this rank's share
  opt:zero_grad()
  loss:backward()
  return loss, logits:argmax(2):eq(classes(y)):sum()
end, opt)

-- every rank the same shuffled global batches, each its contiguous share of them
local loader = tcl.data.DataLoader({ train_x:narrow(1, 1, samples), train_y:narrow(1, 1, samples) },
  { batch_size = options.batch, shuffle = true, seed = 1, drop_last = true, rank = rank, world_size = world })
say("Fashion-MNIST MLP on %d rank%s: %d training samples, global batch %d (%d per rank), %d steps per epoch",
  world, world == 1 and "" or "s", samples, options.batch, options.batch // world, #loader)
for epoch = 1, options.epochs do
  local start, cpu_start, loss_sum, correct, seen, steps = tcl.clock(), os.clock(), 0, 0, 0, 0
  for x, y in loader:batches() do
    local loss, hits = step(x, y)
    loss_sum, correct = loss_sum + loss:item(), correct + hits:item()
    seen, steps = seen + x.shape[1], steps + 1
  end
  -- the sums of all ranks: the mean loss of the global batches and the accuracy of all samples
  local totals = dist.all_reduce(Tensor({ loss_sum, correct, seen }, { dtype = "float64" }), "sum"):tolist()
  say("epoch %d/%d: loss %.4f, accuracy %.2f%%, %.3f s (rank 1's CPU time %.3f s)", epoch, options.epochs,
    totals[1] / (world * steps), 100 * totals[2] / totals[3], tcl.clock() - start, os.clock() - cpu_start)
end

local stats = ddp:stats()
say("gradient buckets: %d; all-reduces: %d, %d of them started before the step's last kernel", stats.buckets,
  stats.all_reduces, stats.overlapped)

if rank == 1 then
  local score = tcl.jit(function(x, y)
    return tcl.no_grad(function() return model(inputs(x)):argmax(2):eq(classes(y)):sum() end)
  end)
  local hits = 0
  local test = tcl.data.DataLoader({ test_x:narrow(1, 1, tests), test_y:narrow(1, 1, tests) }, { batch_size = 1000 })
  for x, y in test:batches() do hits = hits + score(x, y):item() end
  say("test accuracy %.2f%% (%d of %d)", 100 * hits / tests, hits, tests)
  if options.save then nn.state.safe_save(nn.state.get_state_dict(model), options.save) end
end
