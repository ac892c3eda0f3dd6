-- spec/api/index_checks_spec.lua — 1-based index checks (lua/tcl/api/index_checks.lua): an index
-- outside its range in one_hot, cross_entropy, sparse_categorical_crossentropy and nn.Embedding
-- is an error raised by the next read to the host (data, tolist, item, print, to_bytes,
-- tcl.synchronize), named after the function; checking reads nothing to the host by itself and
-- runs two small kernels of its own (the reduction over the flag and the indices, and the
-- flag's store); jitted plans check on every replay.
local tcl = require "tcl"
local buffers = require "tcl.schedule.buffers"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor

local function outside(fn, what, n)
  return string.format("%s: %s are 1-based: expected 1..%d, and some were outside (indices from PyTorch or numpy "
    .. "are 0-based: add 1)", fn, what, n)
end

-- The error of f(), without the position of the read that raised it.
local function read_error(f)
  return (helper.error_of(f):gsub("^[^:]*:%d+: ", ""))
end

local function logits()
  return Tensor({ { 1.0, 2.0, 0.5 }, { 0.1, 0.2, 0.3 }, { -1.0, 0.0, 1.0 }, { 2.0, 2.0, 2.0 } }):realize()
end

-- Naive cross entropy of the rows of x (Lua lists) against 1-based targets: the mean of
-- log(sum exp) - x[target].
local function reference_cross_entropy(x, targets)
  local total = 0
  for i, row in ipairs(x) do
    local sum = 0
    for _, v in ipairs(row) do sum = sum + math.exp(v) end
    total = total + math.log(sum) - row[targets[i]]
  end
  return total / #x
end

local ROWS = { { 1.0, 2.0, 0.5 }, { 0.1, 0.2, 0.3 }, { -1.0, 0.0, 1.0 }, { 2.0, 2.0, 2.0 } }

describe("index checks", function()
  it("cross_entropy: 0-based targets are an error at the next read; 1-based ones give the loss", function()
    local loss = logits():cross_entropy(Tensor({ 0, 1, 2, 1 }))
    assert.are.equal(outside("cross_entropy", "class indices", 3), read_error(function() return loss:item() end))
    local good = logits():cross_entropy(Tensor({ 1, 2, 3, 1 })):item()
    assert(math.abs(good - reference_cross_entropy(ROWS, { 1, 2, 3, 1 })) < 1e-5, "cross_entropy value " .. good)
    -- an index above the range too, with class indices of a 3-d input (classes along dim 2)
    local x3 = Tensor.zeros(2, 3, 2)
    local over = x3:cross_entropy(Tensor({ { 1, 2 }, { 3, 4 } }), { reduction = "none" })
    assert.are.equal(outside("cross_entropy", "class indices", 3), read_error(function() return over:tolist() end))
  end)

  it("sparse_categorical_crossentropy: labels 0 are an error; ignore_index is not checked", function()
    local loss = logits():sparse_categorical_crossentropy(Tensor({ 0, 0, 0, 0 }))
    assert.are.equal(outside("sparse_categorical_crossentropy", "labels", 3),
      read_error(function() return loss:item() end))
    local ignored = logits():sparse_categorical_crossentropy(Tensor({ -100, 2, 3, 1 }), { ignore_index = -100 })
    local expected = reference_cross_entropy({ ROWS[2], ROWS[3], ROWS[4] }, { 2, 3, 1 })
    assert(math.abs(ignored:item() - expected) < 1e-5, "ignore_index value")
    local zero = logits():sparse_categorical_crossentropy(Tensor({ -100, 0, 3, 1 }), { ignore_index = -100 })
    assert.are.equal(outside("sparse_categorical_crossentropy", "labels", 3),
      read_error(function() return zero:item() end))
  end)

  it("one_hot and nn.Embedding name themselves", function()
    assert.are.equal(outside("one_hot", "class indices", 3),
      read_error(function() return Tensor({ 0, 2 }):one_hot(3):tolist() end))
    assert.are.same({ { 1, 0, 0 }, { 0, 0, 1 } }, Tensor({ 1, 3 }):one_hot(3):tolist())
    local layer = tcl.nn.Embedding(5, 2)
    assert.are.equal(outside("nn.Embedding", "indices", 5),
      read_error(function() return layer(Tensor({ { 5, 6 } })):tolist() end))
    assert.are.equal(outside("nn.Embedding", "indices", 5),
      read_error(function() return layer(Tensor({ 0 }, { dtype = "int64" })):data() end))
  end)

  it("checks only the lower bound when the number of classes is past the dtype's largest value", function()
    -- 200 as an int8 constant, or 2^32 as an int32 one, would wrap: every index would be "above" it
    assert.are.same({ { 0, 1, 0 } }, Tensor({ 2 }, { dtype = "int8" }):one_hot(200)[{ {}, { 1, 3 } }]
      :tolist())
    Tensor({ 1 }):one_hot(2 ^ 32)
    tcl.synchronize()
    Tensor({ 0 }, { dtype = "int8" }):one_hot(200)
    assert.are.equal(outside("one_hot", "class indices", 200), read_error(function() tcl.synchronize() end))
  end)

  it("is reported once, by any read on the device, tcl.synchronize and to_bytes", function()
    local pending = Tensor({ 4 }):one_hot(3) -- never realized itself
    local other = Tensor({ 1.5 }):realize()
    assert.are.equal(outside("one_hot", "class indices", 3), read_error(function() return other:item() end))
    assert.are.equal(1.5, other:item()) -- the flag was reset
    local _ = Tensor({ 0 }):one_hot(2)
    assert.are.equal(outside("one_hot", "class indices", 2), read_error(tcl.synchronize))
    tcl.synchronize()
    local bad = Tensor({ 9 }):one_hot(2)
    assert.are.equal(outside("one_hot", "class indices", 2), read_error(function() return bad:to_bytes() end))
    assert.are.same({ 0, 1 }, Tensor({ 2 }):one_hot(2):data())
    assert(pending ~= nil)
  end)

  it("reads nothing to the host until a read, and runs two small kernels of its own", function()
    local x, targets = logits(), Tensor({ 1, 2, 3, 1 }):realize()
    local function kernels(fn)
      local report = tcl.profile(fn)
      return #report.kernels
    end
    local reads = 0
    local hook = buffers.read_hook
    buffers.read_hook = function() reads = reads + 1 end
    local checked = kernels(function() x:cross_entropy(targets):realize() end)
    local index_checks = require "tcl.api.index_checks"
    index_checks.disabled = true
    local unchecked = kernels(function() x:cross_entropy(targets):realize() end)
    index_checks.disabled = false
    buffers.read_hook = hook
    assert.are.equal(0, reads)
    assert.are.equal(unchecked + 2, checked)
    tcl.synchronize() -- the flag of the checked realize is read (it was fine)
  end)

  it("is checked on every replay of a jitted function", function()
    local step = tcl.jit(function(x, t) return x:cross_entropy(t) end)
    local x = logits()
    local expected = reference_cross_entropy(ROWS, { 1, 2, 3, 1 })
    for call = 1, 3 do -- warm-up, capture, replay
      assert(math.abs(step(x, Tensor({ 1, 2, 3, 1 })):item() - expected) < 1e-5, "call " .. call)
    end
    assert.are.equal(outside("cross_entropy", "class indices", 3),
      read_error(function() return step(x, Tensor({ 1, 2, 3, 0 })):item() end))
    assert(math.abs(step(x, Tensor({ 1, 2, 3, 1 })):item() - expected) < 1e-5, "after the error")
    assert.are.equal(3, step:stats().replayed) -- calls 3 to 5
  end)

  it("is left out of tcl.export's programs, which cannot report it", function()
    local layer = tcl.nn.Embedding(5, 2, { device = "CPU" })
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. helper.shell_quote(dir)))
    local ok, err = pcall(tcl.export, function(x) return layer(x) end, { Tensor({ 1, 2 }, { device = "CPU" }) },
      { dir = dir, name = "m" })
    os.execute("rm -rf " .. helper.shell_quote(dir))
    assert(ok, tostring(err))
  end)

  it("stays out of the gradients", function()
    local x = Tensor(ROWS, { requires_grad = true })
    x:cross_entropy(Tensor({ 1, 2, 3, 1 })):backward()
    local grad = x.grad:tolist()
    for i, row in ipairs(ROWS) do
      local sum = 0
      for _, v in ipairs(row) do sum = sum + math.exp(v) end
      for j, v in ipairs(row) do
        local want = (math.exp(v) / sum - (j == ({ 1, 2, 3, 1 })[i] and 1 or 0)) / #ROWS
        assert(math.abs(grad[i][j] - want) < 1e-6,
          string.format("grad[%d][%d] %g, expected %g", i, j, grad[i][j], want))
      end
    end
  end)
end)
