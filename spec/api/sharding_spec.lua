-- spec/api/sharding_spec.lua — sharded tensors (tcl.api.sharding): x:shard(devices, dim) puts
-- each slice on its device; elementwise ops, reductions (with the combine across devices),
-- matmul (sharded batch, sharded weight, sharded contraction) and movement give the values of
-- the same computation unsharded; each shard's kernels run on its device, the copies happen
-- where expected (tcl.profile's events), gradients reach the sharded tensor as unsharded, and
-- misuse fails with exact messages.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local buffers = require "tcl.schedule.buffers"
local Tensor = tcl.Tensor

-- The devices the specs shard over: two instances of the CPU device, each with its own threads
-- (tcl.devices), as sharding is tested on a machine without GPUs.
local DEVICES = { "CPU", "CPU:2" }
local FIRST, SECOND = DEVICES[1], DEVICES[2]

local function flat(v, out)
  out = out or {}
  if type(v) ~= "table" then out[#out + 1] = v return out end
  for _, e in ipairs(v) do flat(e, out) end
  return out
end

-- The values of a (a tensor, sharded or not) are those of b, each within tol (default: exact).
local function same_values(a, b, tol)
  local va = flat(a:tolist())
  local vb = flat(type(b) == "table" and b.tolist and b:tolist() or b)
  assert.are.equal(#vb, #va)
  for i = 1, #va do
    if math.abs(va[i] - vb[i]) > (tol or 0) then
      error(string.format("element %d: %s, expected %s (tolerance %s)", i, va[i], vb[i], tol or 0), 2)
    end
  end
end

-- (5, 3) float32, 1 .. 15: 5 rows split unevenly over two devices (3 + 2).
local function five_by_three() return Tensor.arange(1, 16):float():reshape(5, 3) end

local function is_sharded(v) return Tensor.is_sharded(v) end

describe("sharded tensors", function()
  describe("shard", function()
    it("splits a dim over the devices, the first ones one row larger, each slice on its device", function()
      local x = five_by_three()
      local s = x:shard(DEVICES, 1)
      assert.is_true(is_sharded(s))
      assert.are.same({ 5, 3 }, s.shape)
      assert.are.equal(1, s.axis)
      assert.are.same(DEVICES, s.device)
      assert.are.equal("float32", s.dtype.name)
      local shards = s.shards
      assert.are.equal(2, #shards)
      assert.are.equal(FIRST, shards[1].device)
      assert.are.equal(SECOND, shards[2].device)
      assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }, shards[1]:tolist())
      assert.are.same({ { 10, 11, 12 }, { 13, 14, 15 } }, shards[2]:tolist())
      assert.are.same(x:tolist(), s:tolist())
      assert.are.equal(15, s:numel())
      assert.are.equal(3, s:size(-1))
      assert.are.equal(5, #s)
      assert.is_false(s.requires_grad)
      assert.is_true(x:requires_grad_():shard(DEVICES, 1).requires_grad)
    end)

    it("counts a negative dim from the end, and replicates without a dim", function()
      local x = five_by_three()
      local s = x:shard(DEVICES, -1)
      assert.are.equal(2, s.axis)
      assert.are.same({ 5, 2 }, s.shards[1].shape)
      assert.are.same({ 5, 1 }, s.shards[2].shape)
      local r = x:shard(DEVICES)
      assert.is_nil(r.axis)
      for i, shard in ipairs(r.shards) do
        assert.are.equal(DEVICES[i], shard.device)
        assert.are.same(x:tolist(), shard:tolist())
      end
    end)

    it("realizes every shard on its device and gathers onto any device", function()
      local s = five_by_three():shard(DEVICES, 1):realize()
      for _, shard in ipairs(s.shards) do assert.is_not_nil(buffers.viewed(shard.uop)) end
      local on_second = s:gather(SECOND)
      assert.are.equal(SECOND, on_second.device)
      assert.are.same(five_by_three():tolist(), on_second:tolist())
      assert.are.equal(FIRST, s:to(FIRST:lower()).device)
      assert.are.equal(FIRST, s:gather().device)
    end)

    it("realizes with other tensors in one schedule per device (tcl.realize)", function()
      local x = five_by_three()
      local s, plain = (x:shard(DEVICES, 1) * 2), x + 1
      local on_second = Tensor.ones(2, { device = SECOND }) * 3
      local report = tcl.profile(function() return tcl.realize(s, plain, on_second) end)
      for _, shard in ipairs(s.shards) do assert.is_not_nil(buffers.viewed(shard.uop)) end
      assert.is_not_nil(buffers.viewed(plain.uop))
      assert.is_not_nil(buffers.viewed(on_second.uop))
      local on = {}
      for _, k in ipairs(report.kernels) do on[k.device] = (on[k.device] or 0) + 1 end
      assert.is_true(on[FIRST] >= 1 and on[SECOND] >= 1)
      same_values(s, x * 2)
      assert.are.equal("realize: argument 2 is not a tensor but number", helper.message_of(tcl.realize, s, 3))
    end)

    it("reshards a sharded tensor along another dim", function()
      local s = five_by_three():shard(DEVICES, 1):shard(DEVICES, 2)
      assert.are.equal(2, s.axis)
      same_values(s, five_by_three())
    end)

    it("prints the values, the dim and the devices", function()
      local s = Tensor({ { 1, 2 }, { 3, 4 } }):shard(DEVICES, 1)
      assert.are.equal("ShardedTensor([[1, 2],\n"
        .. "               [3, 4]], shape=(2, 2), dtype=int32, dim=1, devices=(" .. table.concat(DEVICES, ", ") .. "))",
        tostring(s))
      assert.are.equal("ShardedTensor([1, 2], shape=(2,), dtype=int32, replicated, devices=("
        .. table.concat(DEVICES, ", ") .. "))", tostring(Tensor({ 1, 2 }):shard(DEVICES)))
    end)
  end)

  describe("elementwise", function()
    it("applies unary ops per shard, keeping the sharding", function()
      local x = five_by_three()
      local y = x:shard(DEVICES, 1):sqrt():neg():exp()
      assert.is_true(is_sharded(y))
      assert.are.equal(1, y.axis)
      same_values(y, x:sqrt():neg():exp(), 1e-6)
      local c = x:shard(DEVICES, 1):clamp(3, 11):cast("int32")
      assert.are.equal("int32", c.dtype.name)
      same_values(c, x:clamp(3, 11):cast("int32"))
    end)

    it("combines with numbers, the same sharding, replicas and plain tensors (cut to each shard)", function()
      local x, b = five_by_three(), Tensor({ 10, 20, 30 }):float()
      local s = x:shard(DEVICES, 1)
      same_values(2 * s + 1, x * 2 + 1)
      same_values(1 - s, 1 - x)
      same_values(s * s:sqrt(), x * x:sqrt(), 1e-5)
      same_values(s + b, x + b)                     -- broadcast along the sharded dim's rows
      same_values(b + s, b + x)                     -- a plain tensor on the left hands over
      same_values(s - x:flip(1), x - x:flip(1))     -- a plain (5, 3): cut to each shard's rows
      same_values(s:maximum(x:shard(DEVICES)), x)   -- a replica: cut to the rows too
      local col = Tensor({ 1, 2, 3, 4, 5 }):float():reshape(5, 1)
      same_values(s / col, x / col, 1e-6)
      local lt = s:lt(x:flip(1))
      assert.are.equal("bool", lt.dtype.name)
      same_values(lt:int(), x:lt(x:flip(1)):int())
      same_values(lt:where(s, 0), Tensor.where(x:lt(x:flip(1)), x, 0))
    end)

    it("keeps a replicated operand replicated", function()
      local r = five_by_three():shard(DEVICES) * 3
      assert.is_nil(r.axis)
      for _, shard in ipairs(r.shards) do same_values(shard, five_by_three() * 3) end
    end)
  end)

  describe("reductions", function()
    it("over other dims stay sharded, on each shard's device", function()
      local x = five_by_three()
      local s = x:shard(DEVICES, 1)
      local rows = s:sum(2)
      assert.is_true(is_sharded(rows))
      assert.are.same({ 5 }, rows.shape)
      assert.are.equal(1, rows.axis)
      same_values(rows, x:sum(2))
      local kept = x:shard(DEVICES, 2):max(1, true)
      assert.are.same({ 1, 3 }, kept.shape)
      assert.are.equal(2, kept.axis)
      same_values(kept, (x:max(1, true)))
    end)

    it("softmax, argmax and cumsum along other dims run per shard; along the sharded dim they refuse", function()
      local x = five_by_three() / 4
      local s = x:shard(DEVICES, 1)
      same_values(s:softmax(-1), x:softmax(-1), 1e-6)
      same_values(s:log_softmax(2), x:log_softmax(2), 1e-6)
      same_values(s:cumsum(2), x:cumsum(2), 1e-6)
      local am = s:argmax(2)
      assert.are.same({ 5 }, am.shape)
      assert.are.equal(1, am.axis)
      assert.are.same(x:argmax(2):tolist(), am:tolist())
      local kept = x:shard(DEVICES, 2):argmin(1, true)
      assert.are.same({ 1, 3 }, kept.shape)
      assert.are.same(x:argmin(1, true):tolist(), kept:tolist())
      same_values(s:logsumexp(2), x:logsumexp(2), 1e-6)
      assert.are.equal("softmax: along the sharded dim 1 is not supported (gather the tensor, or reshard it along "
        .. "another dim)", helper.message_of(function() return s:softmax(1) end))
      assert.are.equal("argmax: needs a dim on a sharded tensor", helper.message_of(function() return s:argmax() end))
    end)

    it("over the sharded dim combine the per-device results on the first device", function()
      local x = five_by_three() - 8
      local s = x:shard(DEVICES, 1)
      for _, name in ipairs({ "sum", "mean", "max", "min", "prod" }) do
        local whole = s[name](s)
        assert.is_false(is_sharded(whole), name)
        assert.are.equal(FIRST, whole.device, name)
        assert.are.same(x[name](x):tolist(), whole:tolist(), name)
        local cols = s[name](s, 1)
        assert.are.same({ 3 }, cols.shape, name)
        same_values(cols, x[name](x, 1), 1e-5)
        same_values(s[name](s, { 1, 2 }, true), x[name](x, { 1, 2 }, true), 1e-5)
      end
      local big = x:gt(5)
      assert.are.same(big:any(1):tolist(), big:shard(DEVICES, 1):any(1):tolist())
      assert.are.same(big:all(1):tolist(), big:shard(DEVICES, 1):all(1):tolist())
      assert.is_true(big:shard(DEVICES, 1):any():item())
      -- uneven shards (3 + 2 rows): the mean weighs each shard's mean by its rows
      assert.are.equal(x:mean(1):tolist()[1], s:mean(1):tolist()[1])
      same_values(Tensor({ 1, 2, 3, 4, 5 }):shard(DEVICES, 1):mean(), Tensor(3.0))
    end)
  end)

  describe("matmul", function()
    local a_values = { { 1, 2, 0 }, { -1, 3, 1 }, { 2, 2, 2 }, { 0, -2, 5 }, { 4, 1, -3 } }
    local w_values = { { 1, 0, 2, -1 }, { 0, 1, 1, 3 }, { 2, -1, 0, 1 } }

    it("with a sharded batch gives the product sharded along the rows (against a naive product)", function()
      local a, w = Tensor(a_values):float(), Tensor(w_values):float()
      local y = a:shard(DEVICES, 1):matmul(w)
      assert.is_true(is_sharded(y))
      assert.are.equal(1, y.axis)
      assert.are.same({ 5, 4 }, y.shape)
      assert.are.same(helper.naive_matmul(a_values, w_values), y:tolist())
      -- a replicated weight: each device uses its own copy
      assert.are.same(helper.naive_matmul(a_values, w_values), a:shard(DEVICES, 1):matmul(w:shard(DEVICES)):tolist())
    end)

    it("with a weight sharded along its columns gives the product sharded along its last dim", function()
      local a, w = Tensor(a_values):float(), Tensor(w_values):float()
      local y = a:matmul(w:shard(DEVICES, 2))
      assert.are.equal(2, y.axis)
      assert.are.same({ 4, 1 }, { y.shards[1].shape[2] + y.shards[2].shape[2], 1 })
      same_values(y, a:matmul(w))
      same_values(a:shard(DEVICES):matmul(w:shard(DEVICES, -1)), a:matmul(w))
    end)

    it("sharded along the contracted dim sums the partial products on the first device", function()
      local a, w = Tensor(a_values):float(), Tensor(w_values):float()
      for _, b in ipairs({ w:shard(DEVICES, 1), w }) do   -- b sharded along its rows, or cut to them
        local y = a:shard(DEVICES, 2):matmul(b)
        assert.is_false(is_sharded(y))
        assert.are.equal(FIRST, y.device)
        assert.are.same(helper.naive_matmul(a_values, w_values), y:tolist())
      end
      same_values(a:matmul(w:shard(DEVICES, 1)), a:matmul(w))
    end)

    it("linear adds the bias to the sharded or summed product", function()
      local a, w, b = Tensor(a_values):float(), Tensor(w_values):float(), Tensor({ 1, 2, 3, 4 }):float()
      same_values(a:shard(DEVICES, 1):linear(w, b), a:linear(w, b))
      same_values(a:shard(DEVICES, 2):linear(w, b), a:linear(w, b))
      same_values(a:shard(DEVICES):linear(w:shard(DEVICES, 2), b:shard(DEVICES, 1)), a:linear(w, b))
    end)

    it("with batched operands shards the batch", function()
      local a = Tensor.arange(0, 24):float():reshape(3, 2, 4) / 7
      local w = Tensor.arange(0, 36):float():reshape(3, 4, 3) / 5
      local y = a:shard(DEVICES, 1):matmul(w)
      assert.are.equal(1, y.axis)
      same_values(y, a:matmul(w), 1e-5)
      same_values(a:matmul(w:shard(DEVICES, 1)), a:matmul(w), 1e-5)
    end)
  end)

  describe("movement", function()
    it("permute and transpose carry the sharded dim along", function()
      local x = Tensor.arange(0, 24):reshape(2, 3, 4)
      local s = x:shard(DEVICES, 2)
      local p = s:permute(3, 1, 2)
      assert.are.equal(3, p.axis)
      assert.are.same(x:permute(3, 1, 2):tolist(), p:tolist())
      local t = s:transpose(2, 3)
      assert.are.equal(3, t.axis)
      assert.are.same(x:transpose(2, 3):tolist(), t:tolist())
    end)

    it("reshape keeps the sharded dim when it stays one dim, and refuses otherwise", function()
      local x = Tensor.arange(0, 24):reshape(2, 3, 4)
      local s = x:shard(DEVICES, 2)
      local r = s:reshape(2, 3, 2, 2)
      assert.are.equal(2, r.axis)
      assert.are.same(x:reshape(2, 3, 2, 2):tolist(), r:tolist())
      local m = s:reshape({ 1, 2, -1, 4 })
      assert.are.equal(3, m.axis)
      assert.are.same({ 1, 2, 3, 4 }, m.shape)
      assert.are.equal("reshape: cannot reshape (2, 3, 4) sharded along dim 2 to (6, 4): the sharded dim would not "
        .. "stay one dim (gather the tensor first)", helper.message_of(function() return s:reshape(6, 4) end))
      assert.are.same({ 24 }, x:shard(DEVICES):reshape(-1).shape)
    end)

    it("reshape, flatten, unsqueeze and squeeze merge the sharded dim with the dims after it", function()
      local x = Tensor.arange(0, 60):reshape(5, 3, 4)
      local s = x:shard(DEVICES, 1)                      -- 3 + 2 of the 5
      local flat_rows = s:reshape(15, 4)
      assert.are.equal(1, flat_rows.axis)
      assert.are.same({ 9, 4 }, flat_rows.shards[1].shape)
      assert.are.same(x:reshape(15, 4):tolist(), flat_rows:tolist())
      local all = s:flatten()
      assert.are.same({ 60 }, all.shape)
      assert.are.same({ 24 }, all.shards[2].shape)
      assert.are.same(x:flatten():tolist(), all:tolist())
      local u = s:unsqueeze(1)
      assert.are.same({ 1, 5, 3, 4 }, u.shape)
      assert.are.equal(2, u.axis)
      assert.are.same(x:unsqueeze(1):tolist(), u:tolist())
      local back = u:squeeze()
      assert.are.equal(1, back.axis)
      assert.are.same(x:tolist(), back:tolist())
      local inner = x:shard(DEVICES, 2):flatten(2)      -- rows 1-2 and 3 of dim 2: 8 and 4 of the 12
      assert.are.same({ 5, 8 }, inner.shards[1].shape)
      assert.are.same(x:flatten(2):tolist(), inner:tolist())
      -- merged with a dim before it, a shard's rows would interleave with the other's
      assert.are.equal("flatten: cannot reshape (5, 3, 4) sharded along dim 2 to (15, 4): the sharded dim would not "
        .. "stay one dim (gather the tensor first)",
        helper.message_of(function() return x:shard(DEVICES, 2):flatten(1, 2) end))
    end)
  end)

  describe("devices", function()
    it("runs each shard's kernels on its device and copies only shards and partial results", function()
      local x = Tensor.arange(1, 13):float():reshape(4, 3):realize()
      local s = x:shard(DEVICES, 1):realize()
      local report = tcl.profile(function() return (s * 2 + 1):sum():item() end)
      local on = {}
      for _, k in ipairs(report.kernels) do on[k.device] = (on[k.device] or 0) + 1 end
      assert.is_true((on[FIRST] or 0) >= 1 and (on[SECOND] or 0) >= 1)
      -- the second device's partial sum (one float32) goes to the first device, then to the host
      local copies = {}
      for _, c in ipairs(report.copies) do copies[#copies + 1] = c.name .. " " .. c.bytes end
      assert.are.same({ "copy " .. SECOND .. "->" .. FIRST .. " 4", "read to host 4" }, copies)
      -- sharding copies each device its slice: 2 rows of 3 float32 to the second device
      local shard_report = tcl.profile(function() return x:shard(DEVICES, 1):realize() end)
      local names = {}
      for _, c in ipairs(shard_report.copies) do names[#names + 1] = c.name .. " " .. c.bytes end
      assert.are.same({ "copy " .. FIRST .. "->" .. SECOND .. " 24" }, names)
      -- a plain operand is cut before it is copied: the second device gets its 2 rows only
      local plain = (x * 10):realize()
      local sum_report = tcl.profile(function() return (s + plain):realize() end)
      names = {}
      for _, c in ipairs(sum_report.copies) do names[#names + 1] = c.name .. " " .. c.bytes end
      assert.are.same({ "copy " .. FIRST .. "->" .. SECOND .. " 24" }, names)
      same_values(s + plain, x * 11)
    end)
  end)

  describe("gradients", function()
    -- d loss / d leaves of loss_of(x, w1, w2) computed sharded (`shard` makes the sharded
    -- operands) and unsharded: the same up to float rounding
    local function check_gradients(loss_of, shard)
      Tensor.manual_seed(7)
      local x = Tensor.randn(5, 4, { requires_grad = true })
      local w1 = Tensor.randn(4, 6, { requires_grad = true })
      local w2 = Tensor.randn(6, 2, { requires_grad = true })
      local sharded_loss = loss_of(shard(x, w1, w2))
      assert.is_false(is_sharded(sharded_loss))
      sharded_loss:backward()
      local got = { x.grad:tolist(), w1.grad:tolist(), w2.grad:tolist() }
      x.grad, w1.grad, w2.grad = nil, nil, nil
      local loss = loss_of(x, w1, w2)
      loss:backward()
      assert.is_true(math.abs(loss:item() - sharded_loss:item()) < 1e-4)
      for i, leaf in ipairs({ x, w1, w2 }) do
        assert.are.equal(FIRST, leaf.grad.device)
        same_values(leaf.grad, got[i], 1e-4)
      end
    end
    local function mlp(x, w1, w2) return (x:matmul(w1):relu():matmul(w2) - 0.5):square():mean() end

    it("reach the leaves through a sharded batch (data parallel)", function()
      check_gradients(mlp, function(x, w1, w2) return x:shard(DEVICES, 1), w1, w2 end)
    end)

    it("reach the leaves through sharded weights (column then row parallel)", function()
      check_gradients(mlp, function(x, w1, w2) return x, w1:shard(DEVICES, 2), w2:shard(DEVICES, 1) end)
    end)

    it("train the same weights data parallel as on one device (two SGD steps)", function()
      local function train(shard_batch)
        Tensor.manual_seed(11)
        local w1 = Tensor.randn(4, 6, { requires_grad = true })
        local w2 = Tensor.randn(6, 2, { requires_grad = true })
        local x, y = Tensor.randn(6, 4), Tensor.randn(6, 2)
        local opt = tcl.optim.SGD({ w1, w2 }, { lr = 0.1 })
        local losses = {}
        for step = 1, 2 do
          opt:zero_grad()
          local xs = shard_batch and x:shard(DEVICES, 1) or x
          local loss = (xs:matmul(w1):tanh():matmul(w2) - y):square():mean()
          loss:backward()
          losses[step] = opt:step(loss):item()
        end
        return losses, w1, w2
      end
      local losses, w1, w2 = train(true)
      local want_losses, want_w1, want_w2 = train(false)
      for step = 1, 2 do assert.is_true(math.abs(losses[step] - want_losses[step]) < 1e-5) end
      assert.is_true(losses[2] < losses[1])
      same_values(w1, want_w1, 1e-5)
      same_values(w2, want_w2, 1e-5)
    end)

    it("reach the leaf through shards realized before the loss is built", function()
      local x = Tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }):float():requires_grad_()
      local s = x:shard(DEVICES, 1):realize()
      local h = (s * 3):realize()
      local loss = (h * s):sum()                       -- 3 x^2: its gradient is 6 x
      loss:backward()
      assert.are.same({ { 6, 12 }, { 18, 24 }, { 30, 36 } }, x.grad:tolist())
    end)

    it("carry forward-mode tangents (tcl.jvp) across the devices: a copy takes its tangent along", function()
      local x = Tensor({ 1, 2, 3 }, { dtype = "float32" })
      -- sum(x^2) computed on the second device: its tangent along t is 2 x . t
      local function f(a) return (a:to(SECOND) * a:to(SECOND)):sum():to(FIRST) end
      local value, tangent = tcl.jvp(f, { x }, { Tensor({ 1, 0.5, -1 }, { dtype = "float32" }) })
      assert.are.equal(14, value:item())
      assert.are.equal(2 * 1 + 4 * 0.5 - 6, tangent:item())
      assert.are.equal(FIRST, tangent.device)
      -- through a sharded batch, as on one device
      Tensor.manual_seed(5)
      local xs, w1, w2 = Tensor.randn(5, 4), Tensor.randn(4, 6), Tensor.randn(6, 2)
      local tx, tw = Tensor.randn(5, 4), Tensor.randn(4, 6)
      local got_value, got = tcl.jvp(function(a, b) return mlp(a:shard(DEVICES, 1), b, w2) end, { xs, w1 }, { tx, tw })
      local want_value, want = tcl.jvp(function(a, b) return mlp(a, b, w2) end, { xs, w1 }, { tx, tw })
      assert.is_true(math.abs(got_value:item() - want_value:item()) < 1e-5)
      assert.is_true(math.abs(got:item() - want:item()) < 1e-4 * (1 + math.abs(want:item())), got:item() .. " vs "
        .. want:item())
    end)

    it("reach the leaves through reductions and elementwise ops on shards", function()
      check_gradients(function(x, w1, w2)
        local h = (x * 2):sigmoid():matmul(w1)
        return h:max(2):sum() + h:mean(1):square():sum() + h:matmul(w2):exp():mean()
      end, function(x, w1, w2) return x:shard(DEVICES, 1), w1:shard(DEVICES), w2 end)
    end)
  end)

  describe("errors", function()
    local x = five_by_three()
    local function message(f, ...) return helper.message_of(f, ...) end

    it("name the misuse of shard", function()
      assert.are.equal("shard: dim 3 out of range for a 2-d tensor of shape (5, 3)", message(x.shard, x, DEVICES, 3))
      assert.are.equal("shard: dim 0 out of range for a 2-d tensor of shape (5, 3) (dims are 1-based)",
        message(x.shard, x, DEVICES, 0))
      assert.are.equal("shard: needs at least one device, got an empty list", message(x.shard, x, {}, 1))
      assert.are.equal("shard: device " .. FIRST .. " is listed twice", message(x.shard, x, { FIRST, FIRST }, 1))
      assert.are.equal("shard: devices must be a list of device names, got string", message(x.shard, x, FIRST, 1))
      assert.are.equal("shard: device 2 must be a device name, got number", message(x.shard, x, { FIRST, 2 }, 1))
      assert.is_truthy(message(x.shard, x, { "TPU" }):find("shard: unknown device 'TPU'", 1, true))
      assert.are.equal(string.format("shard: dim 2 of shape (5, 1) has 1 rows, fewer than the %d devices", #DEVICES),
        message(x.shard, x:narrow(2, 1, 1), DEVICES, 2))
      assert.are.equal("shard: expected a tensor, got number", message(Tensor.shard, 3, DEVICES))
    end)

    it("name mismatched shardings and devices", function()
      local rows, cols = x:shard(DEVICES, 1), x:shard(DEVICES, 2)
      assert.are.equal("add: mismatched shardings: dim 1 in rows 3+2 and dim 2 in rows 2+1 of the result (reshard one "
        .. "with :shard(devices, dim))", message(function() return rows + cols end))
      local reversed = { SECOND, FIRST }
      assert.are.equal(string.format("mul: the operands are sharded over different devices, (%s, %s) and (%s, %s)",
        FIRST, SECOND, SECOND, FIRST), message(function() return rows * x:shard(reversed, 1) end))
      assert.are.equal("add: expected a tensor, a sharded tensor or a number, got nil",
        message(function() return rows + nil end))
      assert.are.equal("mul: expected a tensor, a sharded tensor or a number, got string",
        message(function() return "2" * rows end))
      assert.are.equal("sub: shapes (5, 3) and (4,) do not broadcast",
        message(function() return rows - Tensor.ones(4) end))
      local w = Tensor.ones(3, 4)
      assert.are.equal("matmul: mismatched shardings: a along dim 2 and b along dim 2 (a product over a sharded dim "
        .. "needs a sharded along its last dim and b along its rows)",
        message(function() return cols:matmul(w:shard(DEVICES, 2)) end))
      assert.are.equal("matmul: mismatched shardings: a along dim 1 and b along dim 2 (reshard one with "
        .. ":shard(devices, dim))", message(function() return rows:matmul(w:shard(DEVICES, 2)) end))
      assert.are.equal("matmul: shapes (5, 3) and (4, 4) are not aligned: 3 (dim 2) ~= 4 (dim 1)",
        message(function() return rows:matmul(Tensor.ones(4, 4)) end))
      assert.are.equal("ShardedTensor: no field 'shpae'", message(function() return rows.shpae end))
      assert.are.equal("ShardedTensor: cannot set 'grad' (set values on the tensor it was sharded from)",
        message(function() rows.grad = 1 end))
      assert.is_truthy(message(rows.to, rows, "tpu"):find("to: unknown device 'tpu'", 1, true))
      assert.are.equal("gather: expected a device name, got number", message(rows.gather, rows, 1))
      assert.are.equal("backward: a sharded tensor of shape (5, 3) is not a scalar loss (reduce it first: s:sum() is "
        .. "a plain tensor)", message(function() return rows:backward() end))
    end)
  end)
end)
