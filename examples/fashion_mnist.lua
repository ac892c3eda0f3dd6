-- examples/fashion_mnist.lua — trains an MLP and a small CNN on Fashion-MNIST (Debian's
-- dataset-fashion-mnist, installed by scripts/setup.sh) and prints their test accuracy.
--
--   tcl examples/fashion_mnist.lua              both models (MLP 10 epochs, CNN 8 epochs)
--   tcl examples/fashion_mnist.lua mlp 8        one model, a number of epochs
--   tcl examples/fashion_mnist.lua mlp 1 20     ... and at most 20 batches per epoch (a quick try)
--
-- The train step (forward, loss, backward, Adam's update) is one tcl.jit function: the first
-- call compiles its kernels, the second captures them, and every later batch replays them.
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn

local which, epochs_arg, batches_arg = arg and arg[1], arg and tonumber(arg[2]), arg and tonumber(arg[3])
local BATCH = 128
local MEAN, STD = 0.2860, 0.3530 -- of the training images, scaled to [0, 1]

-- uint8 images (N, 28, 28) -> normalized float32 (N, 1, 28, 28); uint8 labels -> 1-based classes
local function inputs(images) return ((images:float() / 255 - MEAN) / STD):unsqueeze(2) end
local function classes(labels) return labels:int() + 1 end

local function mlp()
  return nn.Sequential { function(x) return x:flatten(2) end, nn.Linear(784, 256), Tensor.relu, nn.Linear(256, 10) }
end

local function cnn()
  local function pool(x) return x:max_pool2d(2) end
  return nn.Sequential {
    nn.Conv2d(1, 32, 3), nn.BatchNorm(32), Tensor.relu, pool,      -- (N, 32, 13, 13)
    nn.Conv2d(32, 64, 3), nn.BatchNorm(64), Tensor.relu, pool,     -- (N, 64, 5, 5)
    function(x) return x:flatten(2) end, nn.Linear(64 * 5 * 5, 128), Tensor.relu, nn.Dropout(0.3),
    nn.Linear(128, 10),
  }
end

local function accuracy(model, images, labels)
  local eval = tcl.jit(function(x, y)
    return tcl.no_grad(function()
      return nn.eval(function() return model(inputs(x)):argmax(2):eq(classes(y)):sum() end)
    end)
  end)
  local correct = 0
  local loader = tcl.data.DataLoader({ images, labels }, { batch_size = 1000 })
  for x, y in loader:batches() do correct = correct + eval(x, y):item() end
  return correct / images.shape[1]
end

local function train(name, model, epochs, data)
  local train_x, train_y, test_x, test_y = table.unpack(data)
  local params = nn.state.get_parameters(model)
  local opt = tcl.optim.Adam(params, { lr = 1e-3 })
  local step = tcl.jit(function(x, y)
    local logits = nn.train(function() return model(inputs(x)) end)
    local loss = logits:cross_entropy(classes(y))
    opt:zero_grad()
    loss:backward()
    -- the loss and the hits are realized in the update's schedule, from the weights before it
    return opt:step(loss, logits:argmax(2):eq(classes(y)):sum())
  end)
  local loader = tcl.data.DataLoader({ train_x, train_y }, { batch_size = BATCH, shuffle = true, seed = 1,
    drop_last = true })
  local start = tcl.clock()
  local per_epoch = math.min(#loader, batches_arg or #loader)
  for epoch = 1, epochs do
    -- Adam at 1e-3, then a tenth of it for the last third: the finer steps gain about a point
    -- of test accuracy (set between steps, the jitted step reads the new rate). Runs of 1 or 2
    -- epochs have no last third to spare: they stay at 1e-3.
    opt.lr = epochs >= 3 and epoch > epochs * 2 / 3 and 1e-4 or 1e-3
    local label = string.format("%s epoch %d/%d lr %g", name, epoch, epochs, opt.lr)
    local epoch_start, loss_sum, correct, seen, done = tcl.clock(), 0, 0, 0, 0
    -- a progress bar per epoch on stderr (on a terminal only: tcl.progress), the loss and the
    -- accuracy so far beside it; closed when the epoch's loop ends, also by the break
    local batches, bar <close> = loader:batches { progress = { label = label, total = per_epoch } }
    for x, y in batches do
      if done == per_epoch then break end
      local loss, hits = step(x, y)
      done = done + 1
      seen = seen + BATCH
      loss_sum = loss_sum + loss:item()
      correct = correct + hits:item()
      bar:set_postfix { loss = loss_sum / done, acc = 100 * correct / seen }
    end
    bar:close()
    print(string.format("%s: loss %.4f, accuracy %.2f%%, %.0f examples/s", label, loss_sum / done,
      100 * correct / seen, seen / (tcl.clock() - epoch_start)))
  end
  local seconds = tcl.clock() - start
  local acc = accuracy(model, test_x, test_y)
  print(string.format("%s: test accuracy %.2f%% after %d epochs (%.1f s training)", name, 100 * acc, epochs,
    seconds))
  return acc
end

Tensor.manual_seed(0)
local data = { tcl.data.fashion_mnist() }
print(string.format("Fashion-MNIST: %d training and %d test images", data[1].shape[1], data[3].shape[1]))
if which == nil or which == "mlp" then train("MLP", mlp(), epochs_arg or 10, data) end
if which == nil or which == "cnn" then train("CNN", cnn(), epochs_arg or 8, data) end
