-- spec/api/tensor_assign_views_spec.lua — assignment into views (lua/tcl/api/views.lua,
-- Tensor.assign, t[i] = v, t[{...}] = v): the base's buffer is written at exactly the view's
-- elements, checked against a naive Lua model of the buffer (a flat list updated at positions
-- worked out by hand); the base and its other views see the write at once; the kernel loops
-- over the view only; overlapping reads follow PyTorch (the value is computed before it is
-- stored); errors for views that cannot be written; a jitted in-place KV cache; and tcl.jit
-- plans that see later assigns to the lazy tensors they close over.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local Tensor = tcl.Tensor

local function flat(t) return t:flatten():tolist() end

-- The model: base values 1..n (floats), as a flat list.
local function iota(n)
  local list = {}
  for i = 1, n do list[i] = i + 0.0 end
  return list
end

-- A realized float32 tensor of shape shp holding the model `list` (row-major).
local function stored(list, shp)
  return Tensor(list, { dtype = "float32" }):reshape(shp):realize()
end

-- The loop sizes of each kernel fn runs, sorted, from the kernels' names ("E_2_5", and on a
-- GPU "E_5l_2l": the same loops, reordered and renamed by the optimizer).
local function kernels_of(fn)
  local list = {}
  for i, k in ipairs(tcl.profile(fn).kernels) do
    local sizes = {}
    for size in k.name:gmatch("%d+") do sizes[#sizes + 1] = tonumber(size) end
    table.sort(sizes)
    list[i] = table.concat(sizes, "x")
  end
  return list
end

local error_of = helper.message_of -- the message without the position Lua put before it

describe("assignment into a view", function()
  it("a slice: the issue's x:slice(1):assign(Tensor.zeros(3)) and a sub-range", function()
    local model = iota(5)
    local x = stored(model, { 5 })
    x:slice({ 2, 4 }):assign(Tensor.zeros(3))
    model[2], model[3], model[4] = 0, 0, 0
    assert.same(model, x:tolist())
    -- the issue's words: a slice of a 2-d tensor whose rows are 3 long
    local m = stored(iota(6), { 2, 3 })
    m:slice(1):assign(Tensor.zeros(3))
    assert.same({ 0, 0, 0, 4, 5, 6 }, flat(m))
  end)

  it("single indices: y[i] = v, y[-1] = number, y[i]:assign(...) on rows of a 3x4 tensor", function()
    local model = iota(12)
    local y = stored(model, { 3, 4 })
    y[2] = Tensor({ 10, 20, 30, 40 })
    for j = 1, 4 do model[4 + j] = 10.0 * j end
    y[-1] = 7
    for j = 1, 4 do model[8 + j] = 7 end
    y[1]:assign(Tensor({ -1 })) -- broadcast to the row
    for j = 1, 4 do model[j] = -1 end
    assert.same(model, flat(y))
    y[2][3] = 99 -- an element, through a view of a view
    model[4 + 3] = 99
    assert.same(model, flat(y))
  end)

  it("t[{...}]: the index forms of slice, for reading and writing", function()
    local model = iota(12)
    local y = stored(model, { 3, 4 })
    assert.same({ 2.0, 6.0, 10.0 }, y[{ {}, 2 }]:tolist())
    assert.same({ { 7.0, 8.0 }, { 11.0, 12.0 } }, y[{ { 2, 3 }, { 3, 4 } }]:tolist())
    y[{ { 2, 3 }, { 3, 4 } }] = Tensor({ { 1, 2 }, { 3, 4 } })
    model[7], model[8], model[11], model[12] = 1, 2, 3, 4
    y[{ nil, 1 }] = 0 -- nil takes the dim whole
    model[1], model[5], model[9] = 0, 0, 0
    assert.same(model, flat(y))
    y[{}] = 3 -- the whole tensor (not a view: y itself), at once too
    assert.equal("RESHAPE", y.uop.op)
    assert.same({ 3, 3, 3, 3 }, y[1]:tolist())
    y[{ { 2, 1 } }] = Tensor.zeros(0, 4) -- an empty view: nothing to store
    assert.same({ 3, 3, 3, 3 }, y[3]:tolist())
  end)

  it("a transposed view writes the base transposed", function()
    local model = iota(6)
    local x = stored(model, { 2, 3 })
    local value = { { 10, 20 }, { 30, 40 }, { 50, 60 } } -- (3, 2)
    x:transpose(1, 2):assign(Tensor(value))
    for i = 1, 3 do
      for j = 1, 2 do model[(j - 1) * 3 + i] = value[i][j] end
    end
    assert.same(model, flat(x))
    x:permute(2, 1)[3] = Tensor({ -5, -6 }) -- column 3 of x
    model[3], model[6] = -5, -6
    x.T[2] = Tensor({ -7, -8 }) -- column 2, through the T property
    model[2], model[5] = -7, -8
    assert.same(model, flat(x))
  end)

  it("strided views (steps > 1 and negative), flips and chains", function()
    local model = iota(10)
    local x = stored(model, { 10 })
    x[{ { 1, 10, 3 } }] = Tensor({ 100, 101, 102, 103 }) -- positions 1, 4, 7, 10
    model[1], model[4], model[7], model[10] = 100, 101, 102, 103
    x[{ { -2, 1, -4 } }] = Tensor({ 200, 201, 202 }) -- positions 9, 5, 1
    model[9], model[5], model[1] = 200, 201, 202
    assert.same(model, x:tolist())
    x:flip(1):narrow(1, 1, 3):assign(Tensor({ 1, 2, 3 })) -- the last three, reversed
    model[10], model[9], model[8] = 1, 2, 3
    assert.same(model, x:tolist())

    -- a chain: (4, 6) -> transpose -> every 2nd row from the 2nd -> reversed columns -> row 2
    local m = iota(24)
    local y = stored(m, { 4, 6 })
    local view = y:transpose(1, 2):slice({ 2, 6, 2 }, { -1, 1, -1 })[2] -- y's column 4, bottom up
    assert.same({ 4 }, view.shape)
    view:assign(Tensor({ -1, -2, -3, -4 }))
    for k = 1, 4 do m[(4 - k) * 6 + 4] = -k end
    assert.same(m, flat(y))
    -- a reshape that merges and splits dims, then a slice: a strided view of the buffer
    y:reshape(2, 12):slice({}, { 1, 12, 5 }):assign(0) -- flat positions 1, 6, 11, 13, 18, 23
    for _, p in ipairs({ 1, 6, 11, 13, 18, 23 }) do m[p] = 0 end
    assert.same(m, flat(y))
  end)

  it("random strided slices of 1-d to 3-d tensors against the model", function()
    local rng = require("spec.support.splitmix").new(32)
    for _ = 1, 40 do
      local shp, n = {}, 1
      for d = 1, rng:integer(1, 3) do shp[d] = rng:integer(1, 6); n = n * shp[d] end
      local strides = {}
      local acc = 1
      for d = #shp, 1, -1 do strides[d] = acc; acc = acc * shp[d] end
      -- per dim: an index (drops the dim) or {start, stop, step}, and the positions it takes
      local specs, picks = {}, {}
      for d, size in ipairs(shp) do
        if rng:chance(0.25) then
          local i = rng:integer(1, size)
          specs[d], picks[d] = rng:chance(0.5) and i or i - size - 1, { i }
        else
          local step = rng:pick({ 1, 2, 3, -1, -2, -3 })
          local first, last = rng:integer(1, size), rng:integer(1, size)
          if (step > 0 and first > last) or (step < 0 and first < last) then first, last = last, first end
          specs[d], picks[d] = { first, last, step }, {}
          for i = first, last, step do picks[d][#picks[d] + 1] = i end
        end
      end
      local model = iota(n)
      local x = stored(model, shp)
      local view = x[specs]
      local count = view:numel()
      local values = {}
      for k = 1, count do values[k] = -k end
      view:assign(Tensor(values, { dtype = "float32" }):reshape(view.shape))
      -- the view's elements in row-major order over the picked positions of every dim
      local k = 0
      local function visit(d, offset)
        if d > #shp then k = k + 1; model[offset + 1] = -k return end
        for _, i in ipairs(picks[d]) do visit(d + 1, offset + (i - 1) * strides[d]) end
      end
      visit(1, 0)
      assert.equal(count, k)
      assert.same(model, flat(x))
    end
  end)

  it("the base and its other views see the write at once (no realize pending)", function()
    local model = iota(6)
    local x = stored(model, { 2, 3 })
    local row, columns = x[2], x:transpose(1, 2)
    x[{ 2, { 1, 2 } }] = 0
    model[4], model[5] = 0, 0
    assert.equal("RESHAPE", x.uop.op) -- still the buffer: nothing is waiting to run
    assert.same(model, flat(x))
    assert.same({ 0.0, 0.0, 6.0 }, row:tolist())
    assert.same({ { 1.0, 0.0 }, { 2.0, 0.0 }, { 3.0, 6.0 } }, columns:tolist())
  end)

  it("a lazy base is realized first: the base and every view of it see the write", function()
    local x = Tensor.arange(6) * 2 -- lazy: {0, 2, 4, 6, 8, 10}
    local grid, tail = x:reshape(2, 3), x[{ { 5, 6 } }]
    x[{ { 2, 3 } }]:assign(Tensor({ -1, -1 }))
    assert.same({ 0, -1, -1, 6, 8, 10 }, x:tolist())
    assert.same({ { 0, -1, -1 }, { 6, 8, 10 } }, grid:tolist())
    assert.same({ 8, 10 }, tail:tolist())
    -- a constant base (zeros is an expanded scalar until stored)
    local cache = Tensor.zeros(3, 2)
    cache[2] = Tensor({ 1, 2 })
    assert.same({ { 0, 0 }, { 1, 2 }, { 0, 0 } }, cache:tolist())
  end)

  it("the kernel stores the view only: one kernel over the view's shape, the rest kept", function()
    local model = iota(64)
    local x = stored(model, { 8, 8 })
    local names = kernels_of(function() x[{ { 3, 4 }, { 2, 6 } }] = 5 end)
    assert.same({ "2x5" }, names)
    for i = 3, 4 do for j = 2, 6 do model[(i - 1) * 8 + j] = 5 end end
    assert.same(model, flat(x))
    -- a lazy base: its own kernel first, then the view's; the others keep the computed values
    local lazy = Tensor.arange(8) + 1 -- {1..8}
    names = kernels_of(function() lazy[{ { 2, 3 } }] = 0 end)
    assert.same({ "8", "2" }, names)
    assert.same({ 1, 0, 0, 4, 5, 6, 7, 8 }, lazy:tolist())
  end)

  it("overlaps follow PyTorch: the value is computed before it is stored", function()
    -- x[1:4] = x[0:3] in PyTorch gives {1, 1, 2, 3, 5}
    local x = stored(iota(5), { 5 })
    x[{ { 2, 4 } }]:assign(x[{ { 1, 3 } }])
    assert.same({ 1, 1, 2, 3, 5 }, x:tolist())
    -- and the other way: x[0:3] = x[1:4] gives {2, 3, 4, 4, 5}
    local y = stored(iota(5), { 5 })
    y[{ { 1, 3 } }] = y[{ { 2, 4 } }]
    assert.same({ 2, 3, 4, 4, 5 }, y:tolist())
    -- a square block replaced by its transpose; a row by its reverse plus itself
    local m = stored(iota(9), { 3, 3 })
    local block = m[{ { 1, 2 }, { 1, 2 } }]
    block:assign(block:transpose(1, 2))
    m[3] = m[3]:flip(1) + m[3]
    assert.same({ 1, 4, 3, 2, 5, 6, 16, 16, 16 }, flat(m))
  end)

  it("casts the value to the base's dtype and broadcasts it (PyTorch)", function()
    local x = Tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "int32" })
    x[{ {}, { 2, 3 } }] = Tensor({ 7.9, -2.5 })
    assert.equal("int32", x.dtype.name)
    assert.same({ { 1, 7, -2 }, { 4, 7, -2 } }, x:tolist())
  end)

  it("errors: expanded views, views reaching padding, views of computed values, bad values", function()
    local x = stored(iota(3), { 3 })
    assert.equal("assign: the target of shape (3,) is an expanded view of a tensor of shape (3,): several of its "
      .. "elements are one element there, so it cannot be assigned (assign to the tensor, or clone the view first)",
      error_of(function() x:expand(2, 3)[1]:assign(0) end))
    assert.equal("assign: the target of shape (5,) is a view of a tensor of shape (3,) that reaches into padding: "
      .. "those elements are not stored anywhere, so it cannot be assigned",
      error_of(function() x:pad({ { 1, 1 } }):assign(0) end))
    assert.equal("assign: the float32 tensor of shape (2,) is a view of a computed value (WHERE), not of a "
      .. "tensor's elements; assign to a tensor or to a view of one",
      error_of(function() x:pad({ { 1, 1 } }, 9)[{ { 2, 3 } }]:assign(0) end))
    assert.equal("assign: a value of shape (3,) cannot be assigned to a tensor of shape (2,)",
      error_of(function() x[{ { 1, 2 } }] = Tensor({ 1, 2, 3 }) end))
    assert.equal("assign: the value must be a tensor or a number, got string",
      error_of(function() x[1] = "a" end))
    assert.equal("index: index 4 out of range for dim 1 of size 3 in (3,)", error_of(function() x[4] = 0 end))
    assert.same({ 1, 2, 3 }, x:tolist()) -- nothing was written
    -- a padded view that keeps clear of the padding writes through
    x:pad({ { 1, 1 } })[{ { 2, 3 } }]:assign(0)
    assert.same({ 0, 0, 3 }, x:tolist())
  end)

  it("a jitted in-place KV cache: cache[{...}] = v replays the write on each call", function()
    local cache = Tensor.zeros(5, 2) -- lazy until the first write
    local model = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
    local step = tcl.jit(function(row, value)
      -- one-hot position in a tensor: the position changes between calls
      cache:assign(cache * (1 - row) + row * value)
      cache[{ { 1, 5 }, 1 }] = cache[{ {}, 1 }] * 1 -- a no-op write through a view
      return cache:sum(1)
    end)
    for call = 1, 5 do
      local onehot = {}
      for r = 1, 5 do onehot[r] = { r == call and 1.0 or 0.0 } end
      local v = { call * 10.0, call * 10.0 + 1 }
      local sums = step(Tensor(onehot), Tensor({ v }))
      model[(call - 1) * 2 + 1], model[(call - 1) * 2 + 2] = v[1], v[2]
      local want = { 0, 0 }
      for r = 1, call do want[1], want[2] = want[1] + model[2 * r - 1], want[2] + model[2 * r] end
      assert.same(want, sums:tolist())
      assert.same(model, flat(cache))
    end
    assert.equal(3, step:stats().replayed)

    -- the write itself: kv[pos] = value with the position a tensor argument's slot in a view
    local kv = Tensor.zeros(3, 2)
    local write = tcl.jit(function(value) kv[{ { 2, 3 } }] = value; return kv * 1 end)
    for call = 1, 5 do
      local out = write(Tensor({ { call, -call }, { 2 * call, 0 } }))
      assert.same({ { 0, 0 }, { call, -call }, { 2 * call, 0 } }, out:tolist())
    end
    assert.equal(3, write:stats().replayed)
  end)
end)

describe("tcl.jit and assigns to the tensors a plan reads", function()
  for _, case in ipairs({
    { "Tensor.ones(2)", function() return Tensor.ones(2) end },
    { "Tensor.rand(2) * 0 + 1", function() return Tensor.rand(2) * 0 + 1 end },
    { "a realized tensor", function() return Tensor({ 1.0, 1.0 }):realize() end },
  }) do
    it("sees a later assign to a closed-over " .. case[1] .. ", like the unjitted function", function()
      local x = case[2]()
      local function f(a) return a + x end
      local step = tcl.jit(f)
      local a = Tensor({ 0.0, 0.0 }):realize()
      assert.same({ 1, 1 }, step(a):tolist()) -- warm-up
      assert.same({ 1, 1 }, step(a):tolist()) -- capture
      x:assign(7)
      assert.same({ 7, 7 }, f(a):tolist())
      assert.same({ 7, 7 }, step(a):tolist()) -- replay
      x:assign(x + 1)
      assert.same({ 8, 8 }, step(a):tolist())
      assert.equal(2, step:stats().replayed)
    end)
  end

  it("in nested tables of tensors (a model table), and through views of them", function()
    local model = { layers = { { w = Tensor.ones(2, 2) * 2, b = Tensor.zeros(2) + 1 } }, scale = Tensor.full({}, 3.0),
      shift = Tensor.zeros(2) * 1 }
    local first_row = model.layers[1].w[1]
    local function f(x)
      local l = model.layers[1]
      return (x:matmul(l.w) + l.b) * model.scale + first_row:sum() + model.shift:detach()
    end
    local step = tcl.jit(f)
    local x = Tensor({ { 1.0, 1.0 } }):realize()
    step(x); step(x)
    model.layers[1].w[{ 1, 1 }] = 5 -- w = {{5, 2}, {2, 2}}
    model.layers[1].b:assign(Tensor({ 0, 10 }))
    model.scale:assign(1)
    model.shift:assign(Tensor({ 100, 200 }))
    local want = f(x):tolist()
    assert.same({ { 7 + 7 + 100, 4 + 10 + 7 + 200 } }, want)
    assert.same(want, step(x):tolist())
    assert.equal(1, step:stats().replayed)
  end)
end)
