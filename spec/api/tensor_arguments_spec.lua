-- spec/api/tensor_arguments_spec.lua — no argument is read as something else (issue 32, "Arguments
-- that are read as something else"): an options table in a dims slot, a stray extra argument,
-- a misspelled tensor field are errors naming the function and the argument. And the
-- properties x.T and x.mT, and max/min over a dim returning (values, indices). Values are
-- checked against naive Lua.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local Tensor = tcl.Tensor

-- The message of the error f(...) raises (fails when it raises none).
local error_of = helper.error_of

-- Asserts that f(...) fails with exactly `expected` (after the "file:line: " a Lua error
-- raised at the caller's line carries).
local function fails_exactly(expected, f, ...)
  local message = error_of(f, ...):gsub("^[^:]*%.lua:%d+: ", "")
  assert.are.equal(expected, message)
end

local M23 = { { 3, 1, 4 }, { 1, 5, 9 } }

describe("dims slots", function()
  local x = Tensor(M23)
  local hint = "got a table with key 'dim' (dims are passed positionally: 2, not {dim = 2})"

  it("refuse an options table instead of reading it as no dims", function()
    fails_exactly("sum: dims must be a dim or a list of dims, " .. hint, Tensor.sum, x, { dim = 2 })
    fails_exactly("mean: dims must be a dim or a list of dims, " .. hint, Tensor.mean, x, { dim = 2 })
    fails_exactly("softmax: dims must be a dim or a list of dims, " .. hint, Tensor.softmax, x, { dim = 2 })
    fails_exactly("max: dims must be a dim or a list of dims, " .. hint, Tensor.max, x, { dim = 2 })
    fails_exactly("flip: dims must be a dim or a list of dims, " .. hint, Tensor.flip, x, { dim = 2 })
  end)

  it("refuse a table where one dim belongs", function()
    fails_exactly("argmax: dim must be an integer, " .. hint, Tensor.argmax, x, { dim = 2 })
    fails_exactly("transpose: dim must be an integer, " .. hint, Tensor.transpose, x, { dim = 2 })
    fails_exactly("cat: dim must be an integer, " .. hint, Tensor.cat, { x, x }, { dim = 2 })
    fails_exactly("cumsum: dim must be an integer, " .. hint, Tensor.cumsum, x, { dim = 2 })
    fails_exactly("argmax: dim must be an integer, got a table", Tensor.argmax, x, { 1 })
  end)

  it("refuse lists with holes", function()
    fails_exactly("sum: dims must be a dim or a list of dims, got a table with key 3", Tensor.sum, x,
      { [1] = 1, [3] = 2 })
  end)

  it("refuse named keys in shapes, orders and paddings", function()
    fails_exactly("reshape: sizes must be a list, got a table with key 'size'", Tensor.reshape, x, { size = 6 })
    fails_exactly("permute: dims must be a list, got a table with key 'dims'", Tensor.permute, x, { dims = { 2, 1 } })
    fails_exactly("expand: sizes must be a list, got a table with key 'a'", Tensor.expand, x, { a = 2 })
    fails_exactly("reshape: the sizes are one table or several integers, got a table and 1 more arguments",
      Tensor.reshape, x, { 3, 2 }, 1)
    fails_exactly("pad: padding must be a list, got a table with key 'value'", Tensor.pad, x, { value = 1 })
    fails_exactly("pad: padding of dim 1 must be a list, got a table with key 'before'", Tensor.pad, x,
      { { before = 1 } })
    fails_exactly("pad: padding of dim 1 must be a {before, after} pair, got 3 numbers", Tensor.pad, x, { { 1, 2, 3 } })
  end)

  it("still take dims as before", function()
    assert.are.same({ 8, 15 }, x:sum(2):tolist())
    assert.are.same({ 8, 15 }, x:sum({ 2 }):tolist())
    assert.are.same(23, x:sum({ 1, -1 }):item())
  end)
end)

describe("extra arguments", function()
  local x = Tensor(M23):float()

  it("are errors naming the function and its parameters (a method's object counts)", function()
    fails_exactly("gelu: got 2 arguments, expected at most 1: gelu(x)", Tensor.gelu, x, "tanh")
    fails_exactly("avg_pool2d: got 5 arguments, expected at most 4: avg_pool2d(x, kernel_size, stride, padding)",
      function() return x:reshape(1, 1, 2, 3):avg_pool2d(2, 2, 0, true) end)
    fails_exactly("sum: got 4 arguments, expected at most 3: sum(x, dim, keepdim)", Tensor.sum, x, 1, true, 1)
    fails_exactly("Tensor: got 3 arguments, expected at most 2: Tensor(data, opts)", Tensor, { 1 }, {}, 1)
    fails_exactly("full: got 4 arguments, expected at most 3: full(shape, value, opts)", Tensor.full, { 2 }, 1, {}, 1)
  end)

  it("are named by the function, however it is called", function()
    local g = Tensor.gelu
    fails_exactly("gelu: got 2 arguments, expected at most 1: gelu(x)", g, x, 1)
    -- an alias reports the function it names
    fails_exactly("clamp: got 4 arguments, expected at most 3: clamp(x, lo, hi)", Tensor.clip, x, 0, 1, 2)
  end)

  it("may be trailing nils", function()
    assert.are.same({ 8, 15 }, Tensor(M23):sum(2, nil, nil):tolist())
  end)

  it("are errors in tcl.nn, tcl.optim, tcl.data, tcl.nn.state and the transforms", function()
    local nn = tcl.nn
    local linear = nn.Linear(3, 2)
    fails_exactly("nn.Linear: got 4 arguments, expected at most 3: nn.Linear(in_features, out_features, opts)",
      nn.Linear, 3, 2, {}, true)
    fails_exactly("nn.Linear: got 2 arguments, expected at most 1: nn.Linear(x)", linear, x, x)
    fails_exactly("nn.Dropout: got 2 arguments, expected at most 1: nn.Dropout(p)", nn.Dropout, 0.5, true)
    fails_exactly("optim.SGD: got 3 arguments, expected at most 2: optim.SGD(params, opts)", tcl.optim.SGD,
      { linear.weight }, { lr = 0.1 }, 1)
    local opt = tcl.optim.SGD({ linear.weight }, { lr = 0.1 })
    fails_exactly("set_lr: got 2 arguments, expected at most 1: set_lr(lr)", function() opt:set_lr(0.2, 1) end)
    fails_exactly("zero_grad: got 1 argument, expected at most 0: zero_grad()", function() opt:zero_grad(true) end)
    fails_exactly("DataLoader: got 3 arguments, expected at most 2: DataLoader(tensors, opts)", tcl.data.DataLoader,
      { x }, {}, 1)
    fails_exactly("get_parameters: got 2 arguments, expected at most 1: get_parameters(model)",
      nn.state.get_parameters, linear, 1)
    fails_exactly("grad: got 3 arguments, expected at most 2: grad(f, argnums)", tcl.grad, Tensor.sum, 1, 1)
    fails_exactly("jit: got 3 arguments, expected at most 2: jit(fn, opts)", tcl.jit, Tensor.sum, {}, 1)
    fails_exactly("export: got 4 arguments, expected at most 3: export(fn, inputs, opts)", tcl.export, Tensor.sum,
      { x }, { dir = "/nonexistent" }, 1)
    fails_exactly("set_heuristic: got 2 arguments, expected at most 1: set_heuristic(spec)", tcl.set_heuristic, nil, 1)
    fails_exactly("synchronize: got 2 arguments, expected at most 1: synchronize(device)", tcl.synchronize, "CPU", 1)
    fails_exactly("kernel_cache.clear: got 1 argument, expected at most 0: kernel_cache.clear()",
      tcl.kernel_cache.clear, true)
  end)
end)

describe("tensor fields", function()
  local x = Tensor(M23)

  it("unknown ones are errors at the line that reads them, with a suggestion", function()
    local line = debug.getinfo(1, "l").currentline + 1
    local ok, err = pcall(function() return x.shpae end)
    assert.is_false(ok)
    assert.are.equal(string.format("%s:%d: Tensor: no field 'shpae' (did you mean 'shape'?)",
      debug.getinfo(1, "S").short_src, line), err)
    fails_exactly("Tensor: no field 'dtpye' (did you mean 'dtype'?)", function() return x.dtpye end)
    fails_exactly("Tensor: no field 'zzzzzz'", function() return x.zzzzzz end)
  end)

  it("grad, private fields and user annotations read as before", function()
    local t = Tensor({ 1, 2 })
    assert.is_nil(t.grad)
    assert.is_nil(t._not_set)
    t.label = "input"
    assert.are.equal("input", t.label)
  end)
end)

describe("x.T and x.mT", function()
  -- naive transpose of nested lists: every dim reversed
  local function reversed(list, shape)
    local n = #shape
    local out_shape = {}
    for i = 1, n do out_shape[i] = shape[n - i + 1] end
    local function get(idx)
      local v = list
      for i = n, 1, -1 do v = v[idx[i]] end
      return v
    end
    local function build(depth, idx)
      local out = {}
      for i = 1, out_shape[depth] do
        idx[depth] = i
        out[i] = depth == n and get(idx) or build(depth + 1, idx)
      end
      return out
    end
    return build(1, {})
  end

  it("T reverses every dim (the transpose of a matrix; 0-d and 1-d unchanged)", function()
    assert.are.same({ { 3, 1 }, { 1, 5 }, { 4, 9 } }, Tensor(M23).T:tolist())
    local cube = { { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } },
      { { 13, 14, 15, 16 }, { 17, 18, 19, 20 }, { 21, 22, 23, 24 } } }
    local t = Tensor(cube).T
    assert.are.same({ 4, 3, 2 }, t.shape)
    assert.are.same(reversed(cube, { 2, 3, 4 }), t:tolist())
    assert.are.same({ 1, 2 }, Tensor({ 1, 2 }).T:tolist())
    assert.are.same(7, Tensor(7).T:item())
  end)

  it("mT swaps the last two dims, and needs two", function()
    local cube = { { { 1, 2 }, { 3, 4 }, { 5, 6 } }, { { 7, 8 }, { 9, 10 }, { 11, 12 } } }
    local t = Tensor(cube).mT
    assert.are.same({ 2, 2, 3 }, t.shape)
    assert.are.same({ { { 1, 3, 5 }, { 2, 4, 6 } }, { { 7, 9, 11 }, { 8, 10, 12 } } }, t:tolist())
    fails_exactly("mT: needs a tensor of at least 2 dims, got shape (2,)", function() return Tensor({ 1, 2 }).mT end)
  end)

  it("cannot be assigned", function()
    fails_exactly("Tensor: cannot set 'T' (a property or method; set values with t[i] = v or t:assign(v))", function()
      Tensor({ 1 }).T = 1
    end)
  end)
end)

describe("max and min over a dim", function()
  -- naive (values, first index) along dim of a 2-d list
  local function naive(list, dim, better)
    local rows, cols = #list, #list[1]
    local values, indices = {}, {}
    local outer, inner = dim == 1 and cols or rows, dim == 1 and rows or cols
    for o = 1, outer do
      local best, at
      for i = 1, inner do
        local v = dim == 1 and list[i][o] or list[o][i]
        if best == nil or better(v, best) then best, at = v, i end
      end
      values[o], indices[o] = best, at
    end
    return values, indices
  end
  local function greater(a, b) return a > b end
  local function less(a, b) return a < b end
  local ties = { { 2, 7, 7, 1 }, { 5, 5, 0, 5 }, { -1, 3, -1, 3 } }

  it("return the values and the first index of the extreme, like argmax", function()
    for _, dim in ipairs({ 1, 2 }) do
      local v, i = Tensor(ties):max(dim)
      local want_v, want_i = naive(ties, dim, greater)
      assert.are.same(want_v, v:tolist())
      assert.are.same(want_i, i:tolist())
      assert.are.equal("int32", i.dtype.name)
      v, i = Tensor(ties):float():min(dim)
      want_v, want_i = naive(ties, dim, less)
      assert.are.same(want_v, v:tolist())
      assert.are.same(want_i, i:tolist())
    end
  end)

  it("keep the dim with keepdim, and take negative dims", function()
    local v, i = Tensor(ties):max(-1, true)
    assert.are.same({ 3, 1 }, v.shape)
    assert.are.same({ { 2 }, { 1 }, { 2 } }, i:tolist())
  end)

  it("return only the value without a dim or with a table of dims", function()
    assert.are.equal(1, select("#", Tensor(ties):max()))
    assert.are.equal(1, select("#", Tensor(ties):min({ 1, 2 })))
    assert.are.equal(9, Tensor(ties):max():item() + 2)
  end)
end)

-- issue 33 ("Smaller"): a user's name is echoed bounded, its start, an ellipsis and its length,
-- and a long one costs no more than a short one (a 400 KB field name took 160 s of suggestions).
describe("long names in messages", function()
  local long = ("x"):rep(400000)
  local shown = ("x"):rep(120) .. "... (400000 bytes)"
  local x = Tensor(M23)

  it("are cut to their start and their length", function()
    fails_exactly("zeros: unknown dtype '" .. shown .. "'", Tensor.zeros, 2, { dtype = long })
    fails_exactly("zeros: unknown option '" .. shown .. "'", Tensor.zeros, 2, { [long] = 1 })
    fails_exactly("zeros: unknown device '" .. shown .. "' (available: EMU, CPU, CUDA, METAL)", Tensor.zeros, 2,
      { device = long })
    fails_exactly("realize: unknown option '" .. shown .. "' (known: noopt, beam)", Tensor.realize, x,
      { [long] = true })
    fails_exactly("nn.init.calculate_gain: unknown nonlinearity '" .. shown .. "' (one of linear, conv1d, conv2d, "
      .. "conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d, sigmoid, tanh, relu, leaky_relu, selu)",
      tcl.nn.init.calculate_gain, long)
  end)

  it("are shown whole up to 160 bytes, and cut at a UTF-8 boundary", function()
    local short = ("y"):rep(160)
    fails_exactly("zeros: unknown dtype '" .. short .. "'", Tensor.zeros, 2, { dtype = short })
    local accents = ("é"):rep(100) -- 2 bytes each: byte 121 starts no character
    fails_exactly("zeros: unknown dtype '" .. ("é"):rep(60) .. "... (200 bytes)'", Tensor.zeros, 2,
      { dtype = accents })
  end)

  it("in a field name, without a slow search for a suggestion", function()
    local started = os.clock()
    fails_exactly("Tensor: no field '" .. shown .. "'", function() return x[long] end)
    assert.is_true(os.clock() - started < 1)
  end)
end)
