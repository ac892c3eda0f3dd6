-- spec/embed/embed_views_spec.lua — the Lua half of the embedding API (tcl.api.embed): strided host
-- layouts become views that read exactly the elements a naive index computation reads, and
-- results computed into a destination buffer take one kernel that stores there (no copy).
local embed = require "tcl.api.embed"
local runtime = require "tcl.runtime"
local schedule = require "tcl.schedule"
local splitmix = require "spec.support.splitmix"

-- A flat CPU buffer of n int32 values 0, 1, ..., n-1 (its own memory, as a host's would be).
local function counting_buffer(n)
  local b = runtime.buffer("int32", n, "CPU")
  local values = {}
  for i = 1, n do values[i] = i - 1 end
  b:write(values)
  return b
end

-- The values a naive strided read gives, row-major over shape: element index = sum(i_k * s_k).
local function naive(shape, strides)
  local out, index = {}, {}
  for d = 1, #shape do index[d] = 0 end
  local total = 1
  for _, n in ipairs(shape) do total = total * n end
  for _ = 1, total do
    local at = 0
    for d = 1, #shape do at = at + index[d] * strides[d] end
    out[#out + 1] = at
    for d = #shape, 1, -1 do
      index[d] = index[d] + 1
      if index[d] < shape[d] then break end
      index[d] = 0
    end
  end
  return out
end

local function span(shape, strides)
  local last = 0
  for d, n in ipairs(shape) do last = last + (n - 1) * strides[d] end
  return last + 1
end

describe("tcl.api.embed.wrap", function()
  it("reads contiguous memory as the shape says", function()
    local t = embed.wrap(counting_buffer(12), { 3, 4 })
    assert.are.same({ 3, 4 }, t.shape)
    assert.are.same(naive({ 3, 4 }, { 4, 1 }), t:data())
  end)

  it("reads padded rows, transposes, channel-last and broadcast layouts element for element", function()
    local cases = {
      { shape = { 3, 5 }, strides = { 8, 1 } },          -- rows padded to 8
      { shape = { 4, 6 }, strides = { 1, 4 } },          -- transposed
      { shape = { 2, 3, 4 }, strides = { 12, 1, 3 } },   -- channels last
      { shape = { 5, 3 }, strides = { 0, 1 } },          -- a broadcast row
      { shape = { 2, 1, 3 }, strides = { 7, 99, 2 } },   -- a size-1 dim's stride is ignored
      { shape = { 3, 2 }, strides = { 3, 1 } },          -- the last row ends before the padding
    }
    for _, c in ipairs(cases) do
      local t = embed.wrap(counting_buffer(span(c.shape, c.strides)), c.shape, c.strides)
      assert.are.same(c.shape, t.shape)
      assert.are.same(naive(c.shape, c.strides), t:data(), "strides " .. table.concat(c.strides, ","))
    end
  end)

  it("agrees with the naive read on random nested layouts", function()
    local rng = splitmix.new(2024)
    for _ = 1, 60 do
      local ndim = rng:integer(1, 4)
      local shape, order = {}, {}
      for d = 1, ndim do shape[d], order[d] = rng:integer(1, 4), d end
      for d = ndim, 2, -1 do -- a random order of the dims in memory
        local k = rng:integer(1, d)
        order[d], order[k] = order[k], order[d]
      end
      local strides, step = {}, 1
      for k = ndim, 1, -1 do -- innermost last; each block followed by 0..2 unused elements
        local d = order[k]
        strides[d] = rng:integer(0, 4) == 0 and 0 or step
        if strides[d] > 0 then step = step * shape[d] + rng:integer(0, 2) end
      end
      local t = embed.wrap(counting_buffer(span(shape, strides)), shape, strides)
      assert.are.same(naive(shape, strides), t:data(),
        "shape " .. table.concat(shape, "x") .. " strides " .. table.concat(strides, ","))
    end
  end)

  it("refuses overlapping and interleaved layouts, saying why", function()
    local ok, err = pcall(embed.wrap, counting_buffer(12), { 3, 3 }, { 2, 1 })
    assert.is_false(ok)
    assert.matches("strides [2, 1] of shape [3, 3] overlap or interleave", err, 1, true)
    ok, err = pcall(embed.wrap, counting_buffer(24), { 2, 4 }, { 3, 2 })
    assert.is_false(ok)
    assert.matches("dim 1's stride 3 is less than the 8 elements dim 2 covers", err, 1, true)
  end)
end)

describe("tcl.api.embed.read_into", function()
  local recorded
  before_each(function()
    recorded = 0
    schedule.recorder = function() recorded = recorded + 1 end
  end)
  after_each(function() schedule.recorder = nil end)

  it("computes a lazy tensor with one kernel that stores into the destination", function()
    local x = embed.wrap(counting_buffer(6), { 2, 3 })
    local y = (x * 3 + 1):sum(2)
    local out = runtime.buffer("int32", 2, "CPU")
    local sources = embed.read_into({ y }, { out })
    assert.are.same({}, sources)
    assert.are.same({ 3 * 3 + 3, 3 * 12 + 3 }, out:read())
    assert.are.equal(1, recorded)
  end)

  it("copies a tensor that is computed already, and hands back the storage when there is no destination", function()
    local x = embed.wrap(counting_buffer(4), { 4 })
    local y = (x + 10):realize()
    recorded = 0
    local out = runtime.buffer("int32", 4, "CPU")
    embed.read_into({ y }, { out })
    assert.are.equal(0, recorded)
    assert.are.same({ 10, 11, 12, 13 }, out:read())
    local sources = embed.read_into({ x * 2 }, { false })
    assert.are.same({ 0, 2, 4, 6 }, sources[1]:read())
  end)

  it("computes several tensors in one schedule", function()
    local x = embed.wrap(counting_buffer(4), { 4 })
    local a, b = runtime.buffer("int32", 4, "CPU"), runtime.buffer("int32", 1, "CPU")
    embed.read_into({ x * 2, x:sum() }, { a, b })
    assert.are.same({ 0, 2, 4, 6 }, a:read())
    assert.are.same({ 6 }, b:read())
  end)
end)
