-- spec/nn/ddp_spec.lua — tcl.distributed.DistributedDataParallel in a world of one process
-- (no launcher): the gradient buckets (flat tensors of one dtype and at most bucket_cap_mb,
-- the .grad values from the last parameter to the first), cutting them back into .grad,
-- sync_gradients as an identity, a jitted train_step that trains exactly as the plain step
-- does, and the errors. Two ranks under mpirun: spec/cli/distributed_training_spec.lua.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local Tensor, nn, dist = tcl.Tensor, tcl.nn, tcl.distributed

local fails_with = helper.fails_with

-- A model of two float32 layers and a float64 scale (three buckets' worth of dtypes: two).
local function model_of()
  Tensor.manual_seed(3)
  local model = nn.Sequential { nn.Linear(4, 3), Tensor.relu, nn.Linear(3, 2) }
  model.scale = Tensor({ 1.5, -0.5 }, { dtype = "float64" }):realize():requires_grad_(true)
  return model
end

-- forward: the model, or the wrapper around it
local function loss_of(model, x, forward)
  return ((forward or model)(x):cast("float64") * model.scale):square():mean()
end

local function flatten(list)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
  end
  walk(list)
  return out
end

describe("tcl.distributed.DistributedDataParallel (a world of one)", function()
  local x = Tensor({ { 1, -2, 0.5, 3 }, { -1, 0, 2, 1 }, { 0.25, 1, -1, -3 } })

  it("runs the model's forward and lists its parameters in name order", function()
    local model = model_of()
    local ddp = dist.DistributedDataParallel(model)
    assert.are.equal(model, ddp.module)
    assert.are.same(model(x):tolist(), ddp(x):tolist())
    local params = ddp:parameters()
    assert.are.same(nn.state.get_parameters(model), params)
    assert.are.equal(5, #params)
  end)

  it("flattens the gradients into one bucket per dtype, from the last parameter to the first, and cuts them back",
    function()
    local model = model_of()
    local ddp = dist.DistributedDataParallel(model)
    loss_of(model, x):backward()
    local params = ddp:parameters()
    local by_dtype = { float32 = {}, float64 = {} }
    for i = #params, 1, -1 do table.insert(by_dtype[params[i].dtype.name], params[i].grad:tolist()) end
    local buckets = ddp:gradient_buckets()
    assert.are.equal(2, #buckets)
    -- the last parameter (scale, float64) opens the first bucket
    assert.are.same({ "float64", "float32" }, { buckets[1].dtype.name, buckets[2].dtype.name })
    assert.are.same({ 4 * 3 + 3 + 3 * 2 + 2 }, buckets[2].shape)
    assert.are.same(flatten(by_dtype.float64), buckets[1]:tolist())
    assert.are.same(flatten(by_dtype.float32), buckets[2]:tolist())
    local before = {}
    for i, p in ipairs(params) do before[i] = p.grad:tolist() end
    ddp:set_gradient_buckets({ buckets[1] * -1, buckets[2] * 2 })
    for i, p in ipairs(params) do
      local want = flatten(before[i])
      local scale = p.dtype.name == "float64" and -1 or 2
      for k, v in ipairs(flatten(p.grad:tolist())) do assert.are.equal(want[k] * scale, v) end
      assert.are.same(p.shape, p.grad.shape)
    end
    assert.are.same({ buckets = 2, all_reduces = 0, overlapped = 0 }, ddp:stats())
  end)

  it("fills the buckets from the last layer of a Sequential, layer 12 before layer 9", function()
    Tensor.manual_seed(1)
    local layers = {}
    for i = 1, 12 do layers[i] = nn.Linear(2, 2, { bias = false }) end
    local model = nn.Sequential(layers)
    -- 16 bytes: one 2x2 float32 weight per bucket
    local ddp = dist.DistributedDataParallel(model, { bucket_cap_mb = 16 / 2 ^ 20 })
    model(Tensor({ { 1, 2 } })):sum():backward()
    local buckets = ddp:gradient_buckets()
    assert.are.equal(12, #buckets)
    for k = 1, 12 do
      assert.are.same(flatten(model.layers[13 - k].weight.grad:tolist()), buckets[k]:tolist(), "bucket " .. k)
    end
  end)

  it("closes a bucket once it holds bucket_cap_mb, so the last layers' gradients travel first", function()
    local model = model_of()
    -- 20 bytes: the parameters from the last, in bytes: scale 16 (float64), layers.3.weight 24,
    -- layers.3.bias 8, layers.1.weight 48, layers.1.bias 12
    local ddp = dist.DistributedDataParallel(model, { bucket_cap_mb = 20 / 2 ^ 20 })
    loss_of(model, x):backward()
    local g = {}
    for name, p in pairs({ w1 = model.layers[1].weight, b1 = model.layers[1].bias, w3 = model.layers[3].weight,
      b3 = model.layers[3].bias, scale = model.scale }) do g[name] = flatten(p.grad:tolist()) end
    local buckets = ddp:gradient_buckets()
    local got = {}
    for i, b in ipairs(buckets) do got[i] = b:tolist() end
    local function cat(...)
      local out = {}
      for _, list in ipairs({ ... }) do table.move(list, 1, #list, #out + 1, out) end
      return out
    end
    assert.are.same({ g.scale, g.w3, cat(g.b3, g.w1), g.b1 }, got)
    assert.are.equal(4, ddp:stats().buckets)
    -- the buckets are realized in one schedule (one each would compute the shared backward again)
    local schedule = require "tcl.schedule"
    local runs, run = 0, schedule.run
    schedule.run = function(...) runs = runs + 1 return run(...) end
    local ok, err = pcall(ddp.all_reduce_buckets, ddp, ddp:gradient_buckets())
    schedule.run = run
    assert(ok, err)
    assert.are.equal(1, runs)
    -- the averages of a world of one are the gradients; cut back into every .grad
    ddp:sync_gradients()
    assert.are.same(g.w1, flatten(model.layers[1].weight.grad:tolist()))
    assert.are.same(g.b1, flatten(model.layers[1].bias.grad:tolist()))
  end)

  it("leaves the gradients as they are when the world is one process", function()
    local model = model_of()
    local ddp = dist.DistributedDataParallel(model)
    loss_of(model, x):backward()
    local before = {}
    for i, p in ipairs(ddp:parameters()) do before[i] = p.grad:tolist() end
    ddp:sync_gradients()
    for i, p in ipairs(ddp:parameters()) do assert.are.same(before[i], p.grad:tolist()) end
  end)

  it("trains with train_step exactly as the plain step does, its loss returned", function()
    local function run(jitted)
      local model = model_of()
      local ddp = dist.DistributedDataParallel(model)
      local opt = tcl.optim.Adam(ddp:parameters(), { lr = 0.05 })
      local losses = {}
      local step
      if jitted then
        step = ddp:train_step(function(input)
          local loss = loss_of(model, input, ddp)
          opt:zero_grad()
          loss:backward()
          return loss
        end, opt)
      end
      for i = 1, 4 do -- the jitted step warms up, captures, then replays twice
        local input = x * i
        if jitted then
          losses[i] = step(input):item()
        else
          local loss = loss_of(model, input, ddp)
          opt:zero_grad()
          loss:backward()
          ddp:sync_gradients()
          losses[i] = opt:step(loss):item()
        end
      end
      return losses, flatten(model.layers[1].weight:tolist()), model.scale:tolist()
    end
    local losses, weight, scale = run(false)
    local jit_losses, jit_weight, jit_scale = run(true)
    assert.are.same(losses, jit_losses)
    assert.are.same(weight, jit_weight)
    assert.are.same(scale, jit_scale)
    assert.are_not.equal(losses[1], losses[4] / 16) -- the weights changed between steps
  end)

  it("fails on a model without parameters, a missing gradient and mis-shaped buckets", function()
    fails_with("DistributedDataParallel: expected a model (a table holding tensors), got number",
      dist.DistributedDataParallel, 5)
    fails_with("DistributedDataParallel: the model has no parameters (tensors with requires_grad)",
      dist.DistributedDataParallel, { w = Tensor({ 1, 2 }) })
    local model = model_of()
    local ddp = dist.DistributedDataParallel(model)
    fails_with("DistributedDataParallel: a parameter of shape (2,) has no .grad: call backward before the "
      .. "gradients are averaged", function() ddp:sync_gradients() end)
    fails_with("DistributedDataParallel: expected a list of 2 buckets (as gradient_buckets makes them), "
      .. "got 1", function() ddp:set_gradient_buckets({ Tensor.zeros(23) }) end)
    fails_with("DistributedDataParallel: bucket 2 must be a 1-d tensor of 23 elements (its 4 CPU float32 "
      .. "parameters), got (22,)", function() ddp:set_gradient_buckets({ Tensor.zeros(2), Tensor.zeros(22) }) end)
    fails_with("DistributedDataParallel: bucket_cap_mb must be a number of MiB > 0, got 0",
      dist.DistributedDataParallel, model, { bucket_cap_mb = 0 })
    fails_with("DistributedDataParallel: bucket_cap_mb must be a number of MiB > 0, got string",
      dist.DistributedDataParallel, model, { bucket_cap_mb = "25" })
    fails_with("DistributedDataParallel: unknown option 'bucket_cap' (the one option is bucket_cap_mb)",
      dist.DistributedDataParallel, model, { bucket_cap = 1 })
    fails_with("DistributedDataParallel: options must be a table such as { bucket_cap_mb = 25 }, got number",
      dist.DistributedDataParallel, model, 25)
    fails_with("DistributedDataParallel: train_step: opt must be an optimizer (tcl.optim), got number",
      function() ddp:train_step(function() end, 3) end)
  end)
end)
