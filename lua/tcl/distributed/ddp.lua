-- tcl.distributed.ddp — data-parallel training (tcl.distributed.DistributedDataParallel): a
-- model wrapper that starts every rank from rank 1's weights and averages the gradients of
-- all ranks, one all-reduce per dtype, before the optimizer's step. Layer: lua/tcl/distributed
-- (over tcl.api and the collectives of tcl.distributed).
--
--   local dist = tcl.distributed
--   local ddp = dist.DistributedDataParallel(model)  -- broadcasts rank 1's state dict
--   local loader = tcl.data.DataLoader({ x, y }, { batch_size = 128, shuffle = true,
--     rank = dist.rank(), world_size = dist.world_size() })   -- each rank 128 / world rows
--   local step = ddp:train_step(function(xb, yb)               -- two tcl.jit plans
--     local loss = ddp(xb):cross_entropy(yb)
--     opt:zero_grad()
--     loss:backward()
--     return loss
--   end, opt)
--   for xb, yb in loader:batches() do local loss = step(xb, yb) end
--   -- or, without tcl.jit: loss:backward(); ddp:sync_gradients(); opt:step()
--
-- A wrapper, not an optimizer option: the optimizers are part of tcl.api and know no
-- processes (the layers point one way), and the wrapper is also where the initial weights are
-- made equal. Each rank's loss is the mean over its share of the global batch (the
-- DataLoader's rank and world_size), so the mean of the ranks' gradients is the gradient of
-- the global batch: the same step as one process, up to the order of the additions.
--
-- Buckets: the gradients are flattened into buckets (a cat of their reshapes, built in the
-- backward's own schedule) of one device and dtype and at most about bucket_cap_mb each (the
-- first 1 MiB at most), filled from the last parameter to the first (tcl.nn.state's order:
-- layers.10 after layers.9), the order the backward computes them in. Each bucket is
-- all-reduced as one message and cut back into per-parameter views.
-- Overlap: tcl's backward is lazy, computed in one schedule when the gradients are realized.
-- In a replay of train_step's plan, tcl.jit's on_result hands over each bucket as soon as its
-- last kernel has run, and the wrapper starts its all-reduce then (async_op) and waits for all
-- of them before the update: the transfers of the first buckets overlap the kernels of the
-- rest. The first two calls (the warm-up and the capture) and sync_gradients all-reduce after
-- the whole backward.
local Tensor = require "tcl.api.tensor"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local state = require "tcl.api.state"
local jit = require("tcl.api.jit").jit
local dist = require "tcl.distributed"

local fail, is_tensor = check.fail, class.is_tensor
local M = {}

local FN = "DistributedDataParallel"

local DDP = {}
DDP.__index = DDP
DDP.__name = FN

--- The model's forward: ddp(...) is ddp.module(...).
function DDP:__call(...) return self.module(...) end

-- Groups tensors by device and dtype, in list order: { { key =, tensors = {...} }, ... }. A group
-- is closed once it holds cap_bytes (first_cap_bytes for the first group), and a new one of its
-- key opens for the next tensor; without caps, one group per device and dtype.
local function groups_of(tensors, cap_bytes, first_cap_bytes)
  local groups, open = {}, {}
  for _, t in ipairs(tensors) do
    local key = t.device .. " " .. t.dtype.name
    local group = open[key]
    if not group then
      group = { key = key, tensors = {}, bytes = 0, cap = #groups == 0 and first_cap_bytes or cap_bytes }
      groups[#groups + 1] = group
      open[key] = group
    end
    group.tensors[#group.tensors + 1] = t
    group.bytes = group.bytes + t:numel() * t.dtype.itemsize
    if group.cap and group.bytes >= group.cap then open[key] = nil end
  end
  return groups
end

-- One flat tensor of the tensors' elements, in order. Each is made contiguous first (a
-- buffer of its own in the same schedule) so the cat copies values: fused into the cat's
-- padded sum, a weight's gradient (a matmul) became one slow kernel (33 ms against 0.3 ms
-- for the MLP's 784x256 weight).
local function flat(tensors)
  local parts = {}
  for i, t in ipairs(tensors) do parts[i] = t:contiguous():reshape(-1) end
  if #parts == 1 then return parts[1] end
  return Tensor.cat(parts, 1)
end

-- The views of flat_tensor shaped as the tensors of like, in order.
local function unflat(flat_tensor, like)
  local views, offset = {}, 1
  for i, t in ipairs(like) do
    local n = t:numel()
    views[i] = flat_tensor:narrow(1, offset, n):reshape(t.shape)
    offset = offset + n
  end
  return views
end

--- Makes every tensor of the model (its state dict: parameters and buffers) rank 1's, one
--  broadcast per device and dtype. The constructor calls it; call it again after loading a
--  checkpoint on rank 1 only.
function DDP:broadcast_state()
  if dist.world_size() == 1 then return self end
  local sd = state.get_state_dict(self.module)
  local names = {}
  for name in pairs(sd) do names[#names + 1] = name end
  table.sort(names)
  local tensors = {}
  for i, name in ipairs(names) do tensors[i] = sd[name] end
  for _, group in ipairs(groups_of(tensors)) do
    local values = unflat(dist.broadcast(flat(group.tensors):realize(), 1), group.tensors)
    for i, t in ipairs(group.tensors) do t:assign(values[i]) end
    Tensor.realize_all(table.unpack(group.tensors))
  end
  return self
end

--- The model's parameters (tcl.nn.state.get_parameters: requires_grad tensors, in name order).
function DDP:parameters() return table.move(self._params, 1, #self._params, 1, {}) end

local MIB = 1024 * 1024
-- The first bucket is small (as PyTorch's): it is ready soonest, so its transfer starts early.
local FIRST_BUCKET_BYTES = MIB

-- The bucket layout every rank shares, fixed at construction: groups_of the parameters from the
-- last to the first, each closed once it holds cap_bytes (the first FIRST_BUCKET_BYTES at most).
local function bucket_layout(params, cap_bytes)
  local reversed = {}
  for i = #params, 1, -1 do reversed[#reversed + 1] = params[i] end
  return groups_of(reversed, cap_bytes, math.min(cap_bytes, FIRST_BUCKET_BYTES))
end

--- The gradient buckets: one flat lazy tensor per bucket (see the header), each the .grad of its
--  parameters, from the last parameter to the first. Every parameter needs a .grad (a rank
--  whose parameter had none would send a bucket of another layout).
function DDP:gradient_buckets()
  local buckets = {}
  for g, group in ipairs(self._layout) do
    local grads = {}
    for i, p in ipairs(group.tensors) do
      local grad = rawget(p, "grad")
      if not is_tensor(grad) then
        fail(FN, "a parameter of shape %s has no .grad: call backward before the gradients are averaged (every "
          .. "parameter needs one, on every rank)", check.shape_str(p.shape))
      end
      grads[i] = grad
    end
    buckets[g] = flat(grads)
  end
  return buckets
end

-- The tensor that receives bucket i's average: one buffer per bucket, owned by the wrapper and
-- written in place by every step's all-reduce. A new result per step would take fresh memory
-- each time, and on a VM fresh pages cost 15-30 us each: 4.6 ms per step for the MLP's 814 KB
-- bucket, against 0.1-0.3 ms for the all-reduce itself (bench/README.md).
local function averaged_buffer(self, i, bucket)
  local kept = self._averaged[i]
  if kept and kept.device == bucket.device and kept.dtype == bucket.dtype and kept:numel() == bucket:numel()
      and kept.ndim == bucket.ndim then
    return kept
  end
  kept = Tensor.zeros(bucket.shape, { dtype = bucket.dtype.name, device = bucket.device }):realize()
  self._averaged[i] = kept
  return kept
end

-- Starts the all-reduce (the mean over the ranks) of realized bucket i into the wrapper's buffer;
-- returns the Work.
local function start_all_reduce(self, i, bucket)
  return dist.all_reduce(bucket, "mean", { out = averaged_buffer(self, i, bucket), async_op = true })
end

--- The buckets averaged over the ranks (dist.all_reduce with op "mean"), realized; in a world
--  of one, the buckets themselves, realized. The averages are written into buffers the wrapper
--  keeps (one per bucket), so the next call overwrites them, as a tcl.jit plan's results are.
--  started: nil, or the Works of buckets whose all-reduce has started already (by index).
function DDP:all_reduce_buckets(buckets, started)
  local out = {}
  for i, bucket in ipairs(buckets) do
    if not is_tensor(bucket) then fail(FN, "bucket %d is %s, not a tensor", i, check.type_name(bucket)) end
  end
  -- every bucket in one schedule: realized one by one, each bucket's schedule would compute
  -- again the part of the backward it shares with the buckets before it
  Tensor.realize_all(table.unpack(buckets))
  for i, bucket in ipairs(buckets) do
    if dist.world_size() == 1 then
      out[i] = bucket:realize()
    else
      local work = started and started[i]
      out[i] = work and work:wait() or dist.all_reduce(bucket, "mean", { out = averaged_buffer(self, i, bucket) })
      self._all_reduces = self._all_reduces + 1
    end
  end
  return out
end

--- What the wrapper has done: { buckets = (the layout's), all_reduces = (of buckets, over the
--  ranks, so far), overlapped = (those started while kernels of the step's plan were still to
--  run: their transfer overlaps those kernels) }.
function DDP:stats()
  return { buckets = #self._layout, all_reduces = self._all_reduces, overlapped = self._overlapped }
end

--- Sets every parameter's .grad to its view of the buckets (as gradient_buckets made them).
function DDP:set_gradient_buckets(buckets)
  local groups = self._layout
  if type(buckets) ~= "table" or is_tensor(buckets) or #buckets ~= #groups then
    fail(FN, "expected a list of %d bucket%s (as gradient_buckets makes them), got %s", #groups,
      #groups == 1 and "" or "s", type(buckets) == "table" and not is_tensor(buckets) and
      string.format("%d", #buckets) or check.type_name(buckets))
  end
  for g, group in ipairs(groups) do
    local bucket, numel = buckets[g], 0
    for _, p in ipairs(group.tensors) do numel = numel + p:numel() end
    if not is_tensor(bucket) or bucket.ndim ~= 1 or bucket:numel() ~= numel then
      fail(FN, "bucket %d must be a 1-d tensor of %d elements (its %d %s parameters), got %s", g, numel,
        #group.tensors, group.key,
        is_tensor(bucket) and check.shape_str(bucket.shape) or check.type_name(bucket))
    end
    for i, view in ipairs(unflat(bucket, group.tensors)) do group.tensors[i].grad = view end
  end
  return self
end

--- All-reduces every parameter's .grad (the mean over the ranks), one message per bucket, and
--  sets .grad to the averages: call it between backward and opt:step().
function DDP:sync_gradients()
  return self:set_gradient_buckets(self:all_reduce_buckets(self:gradient_buckets()))
end

--- A training step for tcl.jit: fn(...) computes the loss, calls backward and returns the
--  tensors to keep (the loss, ...); the step runs it, averages the gradients and runs
--  opt:step, and returns fn's results (tensors over the plans' buffers: the next call
--  overwrites them, as tcl.jit's results). With several ranks it is two plans, since the
--  all-reduce runs between them on the host: fn and the gradient buckets, realized in one
--  schedule; then the update from the averaged buckets. In a world of one it is one plan,
--  opt:step(fn(...)), the same as training without the wrapper.
function DDP:train_step(fn, opt)
  if type(fn) ~= "function" then fail(FN, "train_step: fn must be a function, got %s", check.type_name(fn)) end
  if type(opt) ~= "table" or type(opt.step) ~= "function" then
    fail(FN, "train_step: opt must be an optimizer (tcl.optim), got %s", check.type_name(opt))
  end
  if dist.world_size() == 1 then return jit(function(...) return opt:step(fn(...)) end) end
  local results -- how many of the first plan's results are fn's (the rest are the buckets)
  local started = {} -- this replay's Works, by bucket
  -- a replay hands over each bucket once computed: its all-reduce starts while the rest of the
  -- backward runs; the started ones are driven on (MPI moves data only inside its calls)
  local function on_result(i, t, kernels_left)
    if not results or i <= results then return end
    for _, work in pairs(started) do work:is_completed() end
    started[i - results] = start_all_reduce(self, i - results, t)
    if kernels_left > 0 then self._overlapped = self._overlapped + 1 end
  end
  local backward = jit(function(...)
    local out = table.pack(fn(...))
    results = out.n
    for _, bucket in ipairs(self:gradient_buckets()) do
      out.n = out.n + 1
      out[out.n] = bucket
    end
    return table.unpack(out, 1, out.n)
  end, { on_result = on_result })
  local update = jit(function(...)
    self:set_gradient_buckets({ ... })
    return opt:step(...) -- the buckets come back as they came: a plan must return tensors
  end)
  return function(...)
    -- a step that failed part-way may have left started all-reduces: they finish first
    for _, work in pairs(started) do work:wait() end
    started = {}
    local out = table.pack(backward(...))
    -- one schedule for fn's results and the buckets: the warm-up call returns them lazy, and
    -- a loss realized after the update would be computed from the new weights
    Tensor.realize_all(table.unpack(out, 1, out.n))
    local averaged = self:all_reduce_buckets(table.move(out, results + 1, out.n, 1, {}), started)
    started = {}
    update(table.unpack(averaged))
    return table.unpack(out, 1, results)
  end
end

--- tcl.distributed.DistributedDataParallel(model [, opts]): the wrapper (see the header).
--  opts.bucket_cap_mb: the size of a gradient bucket in MiB (default 25, as PyTorch's).
--  Broadcasts rank 1's state dict to every rank (tcl.distributed initializes on first use).
function M.new(model, opts)
  if type(model) ~= "table" or is_tensor(model) then
    fail(FN, "expected a model (a table holding tensors), got %s", check.type_name(model))
  end
  if opts ~= nil and (type(opts) ~= "table" or is_tensor(opts)) then
    fail(FN, "options must be a table such as { bucket_cap_mb = 25 }, got %s", check.type_name(opts))
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "bucket_cap_mb" then fail(FN, "unknown option '%s' (the one option is bucket_cap_mb)", tostring(k)) end
  end
  local cap_mb = opts.bucket_cap_mb == nil and 25 or opts.bucket_cap_mb
  if type(cap_mb) ~= "number" or cap_mb ~= cap_mb or cap_mb <= 0 or cap_mb == math.huge then
    fail(FN, "bucket_cap_mb must be a number of MiB > 0, got %s",
      type(cap_mb) == "number" and tostring(cap_mb) or check.type_name(cap_mb))
  end
  local params = state.get_parameters(model)
  if #params == 0 then fail(FN, "the model has no parameters (tensors with requires_grad)") end
  local self = setmetatable({ module = model, _params = params, _averaged = {}, _all_reduces = 0, _overlapped = 0,
    _layout = bucket_layout(params, cap_mb * MIB) }, DDP)
  return self:broadcast_state()
end

return M
