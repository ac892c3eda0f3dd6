-- spec/schedule/output_fill_spec.lua — a kernel's new output is not cleared before the kernel
-- runs (lua/tcl/schedule/init.lua: it writes every element), so reused CPU memory reaches the
-- kernel as it was left. Checked two ways: a result computed into memory that held other values
-- is right, and with TCL_POISON_OUTPUTS every new output starts as 0xFF bytes (NaN, -1), under
-- which a battery of ops whose kernels write in pieces (pads, concatenation, flips, split
-- reductions, convolutions and their gradients, sorting, scatter, attention, linear algebra)
-- gives the same values as without it: an element a kernel left unwritten would be NaN or -1.
local tcl = require "tcl"
local runtime = require "tcl.runtime"
local buffers = require "tcl.schedule.buffers"
local models = require "spec.support.models"
local Tensor = tcl.Tensor

local function poisoned(fn) return tcl.context { POISON_OUTPUTS = true }(fn) end

-- Every value of the tensors fn returns, in one flat list (bools as 0/1).
local function flat_values(fn)
  local out = {}
  for _, t in ipairs({ fn() }) do
    local list = t:contiguous():reshape(-1):tolist()
    for _, v in ipairs(list) do out[#out + 1] = v == true and 1 or v == false and 0 or v end
  end
  return out
end

local function assert_same(expected, actual, what)
  assert.are.equal(#expected, #actual, what .. ": number of values")
  for i = 1, #expected do
    local e, a = expected[i], actual[i]
    if not (e == a or (e ~= e and a ~= a)) then
      error(string.format("%s: value %d is %s with poisoned outputs, %s without", what, i, tostring(a), tostring(e)), 2)
    end
  end
end

local function ramp(...)
  local n = 1
  for _, d in ipairs({ ... }) do n = n * d end
  local list = {}
  for i = 1, n do list[i] = ((i * 37) % 101) / 50 - 1 end
  return Tensor(list):reshape(...)
end

describe("a kernel's new output", function()
  it("is computed right into reused memory that held other values", function()
    local n = 4096
    local before = runtime.buffer_cache_stats().reused
    for round = 1, 3 do
      Tensor.full({ n }, 1e30 * round):realize() -- dropped: its memory goes back to the cache
      collectgarbage()
      collectgarbage()
      buffers.collect()
      local x = Tensor.arange(n):float()
      local y = (x * 2 + 1):realize():tolist()
      for i = 1, n do
        if y[i] ~= 2 * (i - 1) + 1 then error(string.format("round %d: y[%d] = %s", round, i, tostring(y[i]))) end
      end
    end
    assert.is_true(runtime.buffer_cache_stats().reused > before, "the CPU buffer cache was not reused")
  end)

  it("starts as 0xFF bytes with TCL_POISON_OUTPUTS (NaN for floats, -1 for integers)", function()
    local f = buffers.allocate(tcl.float32, 5, "CPU", "poison"):read()
    for i = 1, 5 do assert.is_true(f[i] ~= f[i], "float32 element " .. i .. " is not NaN") end
    local int = buffers.allocate(tcl.int32, 3, "CPU", "poison"):read()
    assert.are.same({ -1, -1, -1 }, int)
    local emu = buffers.allocate(tcl.int64, 2, "EMU", "poison"):read()
    assert.are.same({ -1, -1 }, emu)
    assert.are.same({ 0, 0 }, buffers.allocate(tcl.int32, 2, "CPU"):read())
  end)

  -- The battery: each case builds its graph from scratch, so its kernels' outputs are new.
  local cases = {
    pad_cat_flip = function()
      local a, b = ramp(3, 5), ramp(2, 5)
      local padded = Tensor.cat({ a:pad({ { 1, 2 }, { 0, 3 } }), b:pad({ { 1, 2 }, { 0, 3 } }):flip(1) }, 1)
      return padded, a:narrow(1, 2, 2):narrow(2, 2, 3)
    end,
    reductions = function()
      local x = ramp(64, 1000)
      return x:sum(), x:sum(1), x:max(2), x:argmax(2), x:cumsum(2), (x * x):mean(1)
    end,
    sort_topk_scatter = function()
      local x = ramp(6, 40)
      local sorted, order = x:sort(2)
      local top, where = x:topk(5, 2)
      local index = Tensor({ { 1, 3 }, { 2, 2 } }):long()
      local scattered = Tensor.zeros(2, 4):scatter(2, index, Tensor({ { 1.0, 2.0 }, { 3.0, 4.0 } }))
      return sorted, order, top, where, scattered, x:gather(2, where)
    end,
    conv_gradients = function()
      local x = ramp(2, 3, 9, 9):requires_grad_()
      local w = ramp(4, 3, 3, 3):requires_grad_()
      local y = x:conv2d(w, nil, { stride = 2, padding = 1 })
      local loss = (y * y):sum() + x:max_pool2d(2):sum()
      loss:backward()
      return y, x.grad, w.grad
    end,
    attention_training = function()
      local sizes = { batch = 2, seq = 8, d_model = 16, heads = 2, hidden = 32 }
      local _, p = models.gpt2_layer(Tensor, sizes, { empty = true })
      for name, v in pairs(p) do p[name] = (ramp(table.unpack(v.shape)) * 0.3):realize():requires_grad_() end
      local out = models.gpt2_layer_on(Tensor, sizes, p)
      local loss = out:log_softmax(-1):sum()
      loss:backward()
      return out, p.qkv_w.grad, p.ln1_w.grad, p.x.grad
    end,
    linear_algebra = function()
      local a = ramp(5, 5) + Tensor.eye(5) * 4
      return a:inv(), a:det(), a:solve(ramp(5, 2))
    end,
    one_hot_embedding_where = function()
      local ids = Tensor({ 3, 1, 4, 1, 5 }):long()
      local table_ = ramp(6, 3)
      return ids:one_hot(6), table_:index_select(1, ids), Tensor.where(ramp(4, 4):gt(0), ramp(4, 4), -7)
    end,
  }
  for name, case in pairs(cases) do
    it("is written whole: " .. name .. " gives the same values with TCL_POISON_OUTPUTS", function()
      local expected = flat_values(case)
      local actual = poisoned(function() return flat_values(case) end)
      assert_same(expected, actual, name)
    end)
  end
end)
