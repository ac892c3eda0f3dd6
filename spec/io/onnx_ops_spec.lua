-- spec/io/onnx_ops_spec.lua — tcl.onnx's op handlers called directly on hand-made nodes (no model
-- file): 0-based indices and axes converted to tcl's 1-based API (Gather, ArgMax/ArgMin, Slice,
-- Split, OneHot, Trilu), negative and huge positions, the opset differences (Slice, Clip,
-- Reduce* axes as attribute or input, Softmax/Hardmax flattening before opset 13, Split), ONNX's
-- integer rules (Div truncates, Mod's fmod sign rules, Pow keeps the type, BitShift wraps,
-- Round half to even), broadcasting of the variadic ops, MatMul's 1-d and batched cases, Gemm,
-- DepthToSpace/SpaceToDepth, the sequence and optional ops, and the errors, which name the node.
-- Expected values are exact arithmetic worked out by hand or naive Lua loops.
local tcl = require "tcl"
local onnx_nodes = require "spec.support.onnx_nodes"
local Tensor = tcl.Tensor

local run, check, i64, f32 = onnx_nodes.run, onnx_nodes.check, onnx_nodes.i64, onnx_nodes.f32
local context, flat = onnx_nodes.context, onnx_nodes.flat

local function fails_with(text, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error containing: " .. text)
  assert.is_truthy(tostring(err):find(text, 1, true), "error was: " .. tostring(err))
  assert.is_truthy(tostring(err):find("tcl.onnx: spec.onnx: node 0", 1, true), "error does not name the node: " ..
    tostring(err))
end

describe("onnx handlers: 0-based indices and axes", function()
  it("Gather takes 0-based and negative indices on any axis, known on the host or not", function()
    local x = f32({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
    local want = { { { 1, 2 }, { 5, 6 } }, { { 5, 6 }, { 3, 4 } } }
    -- indices the model computed (not known on the host): the one-hot selection
    check(run("Gather", { x, i64({ { 0, 2 }, { -1, 1 } }) }, { axis = 0 }), "float32", { 2, 2, 2 }, want)
    -- indices known on the host (constants): views
    local ctx = context()
    local idx = ctx:known(i64({ { 0, 2 }, { -1, 1 } }), { 0, 2, -1, 1 })
    check(run("Gather", { x, idx }, { axis = 0 }, { ctx = ctx }), "float32", { 2, 2, 2 }, want)
    check(run("Gather", { x, i64({ 1, -2 }) }, { axis = -1 }), "float32", { 3, 2 }, { { 2, 1 }, { 4, 3 }, { 6, 5 } })
    -- a scalar index drops the axis
    check(run("Gather", { x, i64(2) }, { axis = 0 }), "float32", { 2 }, { 5, 6 })
    local known = context()
    fails_with("index 3 is out of range for size 3",
      run, "Gather", { x, known:known(i64({ 3 }), { 3 }) }, { axis = 0 }, { ctx = known })
    fails_with("axis 2 is out of range for rank 2", run, "Gather", { x, i64({ 0 }) }, { axis = 2 })
    -- indices only the device knows: reported by the next read to the host, naming the node
    local picked = run("Gather", { x, i64({ 1, 3 }) }, { axis = 0 })
    local ok, err = pcall(picked.tolist, picked)
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("tcl.onnx: spec.onnx: node 0 (Gather): Gather indices must be in -3..2 " ..
      "(0-based, negative from the end), and some were outside", 1, true), tostring(err))
    check(run("Gather", { x, i64({ -3, 2 }) }, { axis = 0 }), "float32", { 2, 2 }, { { 1, 2 }, { 5, 6 } })
  end)

  it("ArgMax/ArgMin give 0-based int64 indices, first or last of ties, keepdims", function()
    local x = f32({ { 1, 5, 5 }, { 7, 2, 7 } })
    check(run("ArgMax", { x }, { axis = 1 }), "int64", { 2, 1 }, { { 1 }, { 0 } })
    check(run("ArgMax", { x }, { axis = 1, select_last_index = 1 }), "int64", { 2, 1 }, { { 2 }, { 2 } })
    check(run("ArgMax", { x }, { axis = 0, keepdims = 0 }), "int64", { 3 }, { 1, 0, 1 })
    check(run("ArgMin", { x }, { axis = -1, keepdims = 0 }), "int64", { 2 }, { 0, 1 })
    check(run("ArgMin", { f32({ { 3, 1, 1 } }) }, { axis = -1, keepdims = 0, select_last_index = 1 }), "int64",
      { 1 }, { 2 })
    -- the default axis is 0
    check(run("ArgMin", { x }, {}), "int64", { 1, 3 }, { { 0, 1, 0 } })
    fails_with("axis -3 is out of range for rank 2", run, "ArgMax", { x }, { axis = -3 })
  end)

  it("OneHot counts 0-based, wraps negative indices, leaves out-of-range ones off, on any axis", function()
    local indices, depth, values = i64({ 0, -1, 2, 3 }), f32(3), f32({ 0, 5 })
    check(run("OneHot", { indices, depth, values }, {}), "float32", { 4, 3 },
      { { 5, 0, 0 }, { 0, 0, 5 }, { 0, 0, 5 }, { 0, 0, 0 } })
    check(run("OneHot", { indices, depth, values }, { axis = 0 }), "float32", { 3, 4 },
      { { 5, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 5, 5, 0 } })
    check(run("OneHot", { i64({ { 0, 1 }, { 2, -1 } }), i64(3), i64({ 0, 1 }) }, { axis = 1 }), "int64", { 2, 3, 2 },
      { { { 1, 0 }, { 0, 1 }, { 0, 0 } }, { { 0, 0 }, { 0, 0 }, { 1, 1 } } })
  end)

  it("Trilu keeps the upper or lower triangle from the k-th diagonal (k an input)", function()
    local x = f32({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    check(run("Trilu", { x }, {}), "float32", { 3, 4 }, { { 1, 2, 3, 4 }, { 0, 6, 7, 8 }, { 0, 0, 11, 12 } })
    check(run("Trilu", { x, i64(1) }, {}), "float32", { 3, 4 }, { { 0, 2, 3, 4 }, { 0, 0, 7, 8 }, { 0, 0, 0, 12 } })
    check(run("Trilu", { x, i64(-1) }, { upper = 0 }), "float32", { 3, 4 },
      { { 0, 0, 0, 0 }, { 5, 0, 0, 0 }, { 9, 10, 0, 0 } })
  end)
end)

describe("onnx handlers: Slice", function()
  local ten = Tensor.arange(0, 10, { dtype = "int64" })

  it("opset < 10 reads starts/ends/axes from attributes", function()
    check(run("Slice", { ten }, { starts = { 2 }, ends = { -3 } }, { opset = 9 }), "int64", { 5 }, { 2, 3, 4, 5, 6 })
  end)

  it("opset >= 10 reads inputs: negative and huge positions clamp, steps may be negative", function()
    local function slice(starts, ends, axes, steps, x)
      return run("Slice", { x or ten, i64(starts), i64(ends), axes and i64(axes), steps and i64(steps),
        n = 5 })
    end
    check(slice({ -1 }, { math.mininteger }, nil, { -1 }), "int64", { 10 }, { 9, 8, 7, 6, 5, 4, 3, 2, 1, 0 })
    check(slice({ 1 }, { math.maxinteger }, { 0 }, { 3 }), "int64", { 3 }, { 1, 4, 7 })
    check(slice({ 8 }, { 1 }, nil, { -2 }), "int64", { 4 }, { 8, 6, 4, 2 })
    check(slice({ 100 }, { -100 }, nil, { -4 }), "int64", { 3 }, { 9, 5, 1 })
    check(slice({ 5 }, { 5 }), "int64", { 0 }, {})
    local x = Tensor.arange(0, 8, { dtype = "int64" }):reshape({ 2, 4 })
    check(slice({ -3 }, { 100 }, { -1 }, { 2 }, x), "int64", { 2, 2 }, { { 1, 3 }, { 5, 7 } })
    check(slice({ 1, -1 }, { 2, -5 }, { 0, 1 }, { 1, -1 }, x), "int64", { 1, 4 }, { { 7, 6, 5, 4 } })
    fails_with("steps[0] (for axis 0) is 0", slice, { 0 }, { 5 }, { 0 }, { 0 })
    fails_with("axis 2 is out of range for rank 1", slice, { 0 }, { 5 }, { 2 })
  end)
end)

describe("onnx handlers: Slice against Python's slice semantics", function()
  -- the indices range(*slice(start, stop, step).indices(n)) gives (ONNX defines Slice so)
  local function python_slice(start, stop, step, n)
    local lower, upper = step < 0 and -1 or 0, step < 0 and n - 1 or n
    local function clamp(v)
      if v < 0 then return math.max(v + n, lower) end
      return math.min(v, upper)
    end
    start, stop = clamp(start), clamp(stop)
    local out, i = {}, start
    while (step > 0 and i < stop) or (step < 0 and i > stop) do
      out[#out + 1] = i
      i = i + step
    end
    return out
  end

  it("agrees on 300 random starts/ends/steps, including huge and negative ones, on sizes 0..7", function()
    local seed = 12345
    local function random(k)
      seed = (seed * 1103515245 + 12345) % 2147483648
      return seed % k
    end
    local extremes = { math.mininteger, math.maxinteger, -100, 100 }
    local steps = { 1, 2, 3, -1, -2, -3, 7, -7 }
    for _ = 1, 300 do
      local n = random(8)
      local function position()
        if random(5) == 0 then return extremes[random(4) + 1] end
        return random(2 * n + 5) - n - 2
      end
      local start, stop, step = position(), position(), steps[random(8) + 1]
      local y = run("Slice", { Tensor.arange(0, n, { dtype = "int64" }), i64({ start }), i64({ stop }), i64({ 0 }),
        i64({ step }) }, {}, { opset = 13 })
      local want = python_slice(start, stop, step, n)
      local got = y:numel() > 0 and y:tolist() or {}
      assert.are.same(want, got, string.format("n=%d start=%d stop=%d step=%d", n, start, stop, step))
    end
  end)
end)

describe("onnx handlers: opset differences", function()
  it("Clip: attributes before opset 11, optional inputs after; integer dtypes stay", function()
    local x = f32({ -3, -0.5, 1, 4 })
    check(run("Clip", { x }, { min = -1.0, max = 2.0 }, { opset = 6 }), "float32", { 4 }, { -1, -0.5, 1, 2 })
    check(run("Clip", { x, nil, f32(0), n = 3 }, {}, { opset = 13 }), "float32", { 4 }, { -3, -0.5, 0, 0 })
    check(run("Clip", { x, f32(0.5) }, {}, { opset = 13 }), "float32", { 4 }, { 0.5, 0.5, 1, 4 })
    check(run("Clip", { x }, {}, { opset = 13 }), "float32", { 4 }, { -3, -0.5, 1, 4 })
    local ints = Tensor({ -5, 0, 7 }, { dtype = "int32" })
    check(run("Clip", { ints, Tensor(-2, { dtype = "int32" }), Tensor(3, { dtype = "int32" }) }, {}, { opset = 12 }),
      "int32", { 3 }, { -2, 0, 3 })
  end)

  it("ReduceSum takes axes as an input from opset 13, the others from opset 18", function()
    local x = f32({ { 1, 2 }, { 3, 4 } })
    check(run("ReduceSum", { x }, { axes = { 1 }, keepdims = 0 }, { opset = 11 }), "float32", { 2 }, { 3, 7 })
    check(run("ReduceSum", { x, i64({ 0 }) }, {}, { opset = 13 }), "float32", { 1, 2 }, { { 4, 6 } })
    check(run("ReduceSum", { x }, {}, { opset = 13 }), "float32", { 1, 1 }, { { 10 } })
    check(run("ReduceSum", { x, i64({}) }, { keepdims = 0 }, { opset = 13 }), "float32", {}, 10)
    check(run("ReduceSum", { x }, { noop_with_empty_axes = 1 }, { opset = 13 }), "float32", { 2, 2 },
      { { 1, 2 }, { 3, 4 } })
    check(run("ReduceMean", { x }, { axes = { -1 } }, { opset = 13 }), "float32", { 2, 1 }, { { 1.5 }, { 3.5 } })
    check(run("ReduceMean", { x, i64({ -1 }) }, {}, { opset = 18 }), "float32", { 2, 1 }, { { 1.5 }, { 3.5 } })
    check(run("ReduceMax", { Tensor({ { 1, 9 }, { 5, 2 } }, { dtype = "int32" }) }, { axes = { 0 }, keepdims = 0 },
      { opset = 13 }), "int32", { 2 }, { 5, 9 })
    check(run("ReduceProd", { x, i64({ 0, 1 }) }, { keepdims = 0 }), "float32", {}, 24)
    check(run("ReduceL1", { f32({ -1, 2, -3 }) }, { keepdims = 0 }), "float32", {}, 6)
    check(run("ReduceL2", { f32({ 3, -4 }) }, { keepdims = 0 }), "float32", {}, 5)
    check(run("ReduceSumSquare", { f32({ 3, -4 }) }, { keepdims = 0 }), "float32", {}, 25)
    check(run("ReduceLogSum", { f32({ 1, 2, 4 }) }, { keepdims = 0 }), "float32", {}, math.log(7.0))
    check(run("ReduceLogSumExp", { f32({ 1, 2, 4 }) }, { keepdims = 0 }), "float32", {},
      math.log(math.exp(1) + math.exp(2) + math.exp(4)))
    fails_with("axis 2 is out of range for rank 2", run, "ReduceSum", { x, i64({ 2 }) }, {})
  end)

  -- softmax of a flat Lua list
  local function softmax(list)
    local m, total, out = -math.huge, 0, {}
    for _, v in ipairs(list) do m = math.max(m, v) end
    for i, v in ipairs(list) do out[i] = math.exp(v - m) total = total + out[i] end
    for i = 1, #out do out[i] = out[i] / total end
    return out
  end

  it("Softmax/LogSoftmax: before opset 13 over the input flattened to 2-d at axis (default 1)", function()
    local values = { { { 1, 2 }, { 3, 4 } }, { { 0, 0 }, { 1, -1 } } }
    local x = f32(values)
    -- opset 11, axis 1: each batch's 4 values together
    local a, b = softmax({ 1, 2, 3, 4 }), softmax({ 0, 0, 1, -1 })
    check(run("Softmax", { x }, {}, { opset = 11 }), "float32", { 2, 2, 2 },
      { { { a[1], a[2] }, { a[3], a[4] } }, { { b[1], b[2] }, { b[3], b[4] } } })
    local logs = {}
    for i, v in ipairs(flat({ a, b }, {})) do logs[i] = math.log(v) end
    check(run("LogSoftmax", { x }, {}, { opset = 11 }), "float32", { 2, 2, 2 }, logs)
    -- opset 13, axis -1: each pair
    local want = {}
    for _, pair in ipairs({ { 1, 2 }, { 3, 4 }, { 0, 0 }, { 1, -1 } }) do
      local s = softmax(pair)
      want[#want + 1], want[#want + 2] = s[1], s[2]
    end
    check(run("Softmax", { x }, {}, { opset = 13 }), "float32", { 2, 2, 2 }, want)
    -- opset 13, axis 0: across the batch
    local across = {}
    local flat_x = flat(values, {})
    for i = 1, 4 do
      local s = softmax({ flat_x[i], flat_x[i + 4] })
      across[i], across[i + 4] = s[1], s[2]
    end
    check(run("Softmax", { x }, { axis = 0 }, { opset = 13 }), "float32", { 2, 2, 2 }, across)
  end)

  it("Hardmax marks the first maximum: of the axis (opset 13) or of the flattened rows (opset 11)", function()
    local x = f32({ { 1, 3, 3 }, { 2, 0, -1 } })
    check(run("Hardmax", { x }, {}, { opset = 13 }), "float32", { 2, 3 }, { { 0, 1, 0 }, { 1, 0, 0 } })
    check(run("Hardmax", { x }, { axis = 0 }, { opset = 11 }), "float32", { 2, 3 }, { { 0, 1, 0 }, { 0, 0, 0 } })
    check(run("Hardmax", { x }, { axis = 0 }, { opset = 13 }), "float32", { 2, 3 }, { { 0, 1, 1 }, { 1, 0, 0 } })
    -- opset 11 on 3-d input at axis 1: each batch's 2x2 block is one row
    local cube = f32({ { { 1, 4 }, { 4, 2 } }, { { 0, -1 }, { -2, 0 } } })
    check(run("Hardmax", { cube }, {}, { opset = 11 }), "float32", { 2, 2, 2 },
      { { { 0, 1 }, { 0, 0 } }, { { 1, 0 }, { 0, 0 } } })
    check(run("Hardmax", { cube }, { axis = 1 }, { opset = 13 }), "float32", { 2, 2, 2 },
      { { { 0, 1 }, { 1, 0 } }, { { 1, 0 }, { 0, 1 } } })
  end)

  it("before opset 7: binary ops broadcast B from the axis attribute, PRelu's slope per channel", function()
    local a = Tensor.arange(0, 24, { dtype = "float32" }):reshape({ 2, 3, 4 })
    local b = f32({ 100, 200, 300 })
    local sum = run("Add", { a, b }, { broadcast = 1, axis = 1 }, { opset = 6 })
    assert.are.same({ 2, 3, 4 }, sum:size())
    local want = {}
    for i = 0, 23 do want[i + 1] = i + 100 * ((i // 4) % 3 + 1) end
    check(sum, "float32", { 2, 3, 4 }, want)
    check(run("Greater", { a, b }, { broadcast = 1, axis = -2 }, { opset = 6 }):cast("int32"):sum(), "int64", {}, 0)
    -- without axis (and from opset 7) numpy's trailing alignment
    check(run("Mul", { a, f32({ 0, 1, 0, 1 }) }, { broadcast = 1 }, { opset = 6 }):sum(), "float32", {}, 144)
    fails_with("broadcast axis 2 cannot place B's shape (3) in A's (2, 3, 4)",
      run, "Sub", { a, b }, { broadcast = 1, axis = 2 }, { opset = 6 })
    local x = f32({ { { -1, 2 }, { -3, 4 }, { -5, 6 } } }) -- 1 x 3 channels x 2
    check(run("PRelu", { x, f32({ 0.5, 0.25, 2 }) }, {}, { opset = 6 }), "float32", { 1, 3, 2 },
      { { { -0.5, 2 }, { -0.75, 4 }, { -10, 6 } } })
    check(run("PRelu", { x, f32({ { 0.5, 0.25 } }) }, {}, { opset = 9 }), "float32", { 1, 3, 2 },
      { { { -0.5, 2 }, { -1.5, 4 }, { -2.5, 6 } } })
  end)

  it("Split: sizes from the attribute (opset < 13), the input (>= 13), or equal parts", function()
    local x = Tensor.arange(1, 8, { dtype = "int64" }) -- 1..7
    local a, b = run("Split", { x }, { split = { 2, 5 } }, { opset = 11, noutputs = 2 })
    check(a, "int64", { 2 }, { 1, 2 })
    check(b, "int64", { 5 }, { 3, 4, 5, 6, 7 })
    local parts = table.pack(run("Split", { x, i64({ 3, 0, 4 }) }, {}, { opset = 13, noutputs = 3 }))
    check(parts[1], "int64", { 3 }, { 1, 2, 3 })
    check(parts[2], "int64", { 0 }, {})
    check(parts[3], "int64", { 4 }, { 4, 5, 6, 7 })
    -- opset 18's num_outputs: the last part smaller
    parts = table.pack(run("Split", { x }, { num_outputs = 4 }, { noutputs = 4 }))
    check(parts[3], "int64", { 2 }, { 5, 6 })
    check(parts[4], "int64", { 1 }, { 7 })
    local m = Tensor.arange(0, 6, { dtype = "int64" }):reshape({ 2, 3 })
    parts = table.pack(run("Split", { m }, { axis = -1 }, { opset = 11, noutputs = 3 }))
    check(parts[2], "int64", { 2, 1 }, { { 1 }, { 4 } })
    fails_with("split sizes add up to 6, the axis has 7", run, "Split", { x, i64({ 3, 3 }) }, {}, { noutputs = 2 })
  end)
end)

describe("onnx handlers: ONNX's type rules", function()
  it("integer Div truncates toward zero and keeps the dtype", function()
    local a, b = Tensor({ -7, 7, -7, 6, 7 }, { dtype = "int32" }), Tensor({ 2, 2, -2, 3, -7 }, { dtype = "int32" })
    check(run("Div", { a, b }), "int32", { 5 }, { -3, 3, 3, 2, -1 })
    check(run("Div", { f32({ -7, 1 }), f32({ 2, 4 }) }), "float32", { 2 }, { -3.5, 0.25 })
  end)

  it("Mod: fmod=0 takes the divisor's sign, fmod=1 the dividend's (integers and floats)", function()
    local a, b = i64({ -4, 4, -4, 4, 7 }), i64({ 3, 3, -3, -3, 2 })
    check(run("Mod", { a, b }), "int64", { 5 }, { 2, 1, -1, -2, 1 })
    check(run("Mod", { a, b }, { fmod = 1 }), "int64", { 5 }, { -1, 1, -1, 1, 1 })
    check(run("Mod", { f32({ -4.5, 4.5, 5.25, -5.25 }), f32({ 2, -2, 0.5, -0.5 }) }, { fmod = 1 }), "float32", { 4 },
      { -0.5, 0.5, 0.25, -0.25 })
    -- broadcasting an int32 divisor
    check(run("Mod", { Tensor({ { -5 }, { 5 } }, { dtype = "int32" }), Tensor({ 3, -3 }, { dtype = "int32" }) }),
      "int32", { 2, 2 }, { { 1, -2 }, { 2, -1 } })
  end)

  it("integer Div and Mod agree with Lua's integer arithmetic on every pair in -12..12", function()
    local as, bs = {}, {}
    for a = -12, 12 do
      for b = -12, 12 do
        if b ~= 0 then as[#as + 1], bs[#bs + 1] = a, b end
      end
    end
    local a, b = Tensor(as, { dtype = "int32" }), Tensor(bs, { dtype = "int32" })
    local quotient, floor_mod, c_mod = {}, {}, {}
    for i = 1, #as do
      local q = as[i] // bs[i]
      if q < 0 and q * bs[i] ~= as[i] then q = q + 1 end -- toward zero
      quotient[i], floor_mod[i], c_mod[i] = q, as[i] % bs[i], math.fmod(as[i], bs[i])
    end
    check(run("Div", { a, b }), "int32", { #as }, quotient)
    check(run("Mod", { a, b }), "int32", { #as }, floor_mod)
    check(run("Mod", { a, b }, { fmod = 1 }), "int32", { #as }, c_mod)
  end)

  it("Pow keeps an integer base's dtype; a float base takes any exponent dtype", function()
    check(run("Pow", { i64({ 2, 3, -2 }), i64({ 3, 2, 3 }) }), "int64", { 3 }, { 8, 9, -8 })
    check(run("Pow", { f32({ 2, 4 }), i64({ 2, -1 }) }), "float32", { 2 }, { 4, 0.25 })
    -- exact past 2^53 (squaring, not float64), wrapping like numpy; negative exponents truncate
    local base, exponent = i64({ 3, 7, -3, 2, -1, 1, -2 }), { 39, 20, 39, -1, -3, -5, 0 }
    local want = { 4052555153018976267, 79792266297612001, -4052555153018976267, 0, -1, 1, 1 }
    check(run("Pow", { base, i64(exponent) }), "int64", { 7 }, want)
    local ctx = context()
    check(run("Pow", { base, ctx:known(i64(exponent), exponent) }, {}, { ctx = ctx }), "int64", { 7 }, want)
    check(run("Pow", { Tensor({ 3, -3 }, { dtype = "int32" }), Tensor({ 21, 21 }, { dtype = "int32" }) }), "int32",
      { 2 }, { 1870418611, -1870418611 })
    check(run("Pow", { Tensor({ 3 }, { dtype = "int32" }), f32({ 2.5 }) }), "int32", { 1 }, { 15 })
  end)

  it("BitShift shifts unsigned integers, wrapping at the type's width", function()
    local u8 = function(v) return Tensor(v, { dtype = "uint8" }) end
    check(run("BitShift", { u8({ 16, 4, 1 }), u8({ 1, 2, 3 }) }, { direction = "RIGHT" }), "uint8", { 3 }, { 8, 1, 0 })
    check(run("BitShift", { u8({ 1, 2, 255 }), u8({ 1, 2, 1 }) }, { direction = "LEFT" }), "uint8", { 3 },
      { 2, 8, 254 })
    fails_with("direction must be LEFT or RIGHT", run, "BitShift", { u8({ 1 }), u8({ 1 }) }, { direction = "UP" })
  end)

  it("Round rounds halves to even", function()
    check(run("Round", { f32({ 0.5, 1.5, 2.5, -0.5, -2.5, 2.6, -1.4 }) }), "float32", { 7 },
      { 0.0, 2.0, 2.0, -0.0, -2.0, 3.0, -1.0 })
  end)

  it("unary ops and the activations' attribute defaults (LeakyRelu alpha 0.01, Elu alpha 1)", function()
    local x = f32({ -2, 0, 3 })
    check(run("Sign", { x }), "float32", { 3 }, { -1.0, 0.0, 1.0 })
    check(run("Sign", { i64({ -5, 0, 5 }) }), "int64", { 3 }, { -1, 0, 1 })
    check(run("Neg", { i64({ -5, 0, 5 }) }), "int64", { 3 }, { 5, 0, -5 })
    check(run("Abs", { Tensor({ -5, 5 }, { dtype = "int32" }) }), "int32", { 2 }, { 5, 5 })
    check(run("LeakyRelu", { x }), "float32", { 3 }, { -0.02, 0.0, 3.0 })
    check(run("LeakyRelu", { x }, { alpha = 0.5 }), "float32", { 3 }, { -1.0, 0.0, 3.0 })
    check(run("Elu", { x }), "float32", { 3 }, { math.exp(-2) - 1, 0.0, 3.0 })
    check(run("Elu", { x }, { alpha = 2.0 }), "float32", { 3 }, { 2 * (math.exp(-2) - 1), 0.0, 3.0 })
    check(run("Softplus", { x }), "float32", { 3 },
      { math.log(1 + math.exp(-2)), math.log(2.0), math.log(1 + math.exp(3)) })
    check(run("Not", { Tensor({ true, false }) }), "bool", { 2 }, { false, true })
    check(run("Equal", { i64({ 1, 2 }), i64(2) }), "bool", { 2 }, { false, true })
  end)

  it("comparisons, logic and Where broadcast like numpy and give bool", function()
    local a, b = f32({ { 1 }, { 3 } }), f32({ 0, 1, 2, 3 })
    check(run("Greater", { a, b }), "bool", { 2, 4 }, { { true, false, false, false }, { true, true, true, false } })
    check(run("LessOrEqual", { a, b }), "bool", { 2, 4 },
      { { false, true, true, true }, { false, false, false, true } })
    local t, f = Tensor({ true, false }), Tensor({ { true }, { false } })
    check(run("Xor", { t, f }), "bool", { 2, 2 }, { { false, true }, { true, false } })
    check(run("Where", { t, f32(1), f32({ { 5, 6 }, { 7, 8 } }) }), "float32", { 2, 2 }, { { 1, 6 }, { 1, 8 } })
  end)

  it("Sum/Mean/Max/Min take any number of inputs and broadcast them together", function()
    local a, b, c = f32({ 1, 2, 3 }), f32({ { 10 }, { 20 } }), f32(100)
    check(run("Sum", { a, b, c }), "float32", { 2, 3 }, { { 111, 112, 113 }, { 121, 122, 123 } })
    check(run("Mean", { a, b, c }), "float32", { 2, 3 }, { { 37, 112 / 3, 113 / 3 }, { 121 / 3, 122 / 3, 41 } })
    check(run("Max", { f32({ 1, 5 }), f32({ { 3 }, { 0 } }) }), "float32", { 2, 2 }, { { 3, 5 }, { 1, 5 } })
    check(run("Min", { i64({ 4, -1 }) }), "int64", { 2 }, { 4, -1 })
  end)
end)

describe("onnx handlers: MatMul and Gemm", function()
  local matmul = require("spec.support.helper").naive_matmul
  local function transpose(a)
    local out = {}
    for j = 1, #a[1] do
      out[j] = {}
      for i = 1, #a do out[j][i] = a[i][j] end
    end
    return out
  end

  it("MatMul: vector cases and batch broadcasting like numpy.matmul", function()
    local v, m = f32({ 1, 2, 3 }), f32({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
    check(run("MatMul", { v, v }), "float32", {}, 14)
    check(run("MatMul", { v, m }), "float32", { 2 }, { 22, 28 })
    check(run("MatMul", { f32({ { 1, 0, 1 }, { 0, 1, 0 } }), v }), "float32", { 2 }, { 4, 2 })
    -- (2, 1, 2, 3) @ (3, 3, 2) -> (2, 3, 2, 2)
    local A, B, want = {}, {}, {}
    for i = 1, 2 do
      A[i] = { {} }
      for r = 1, 2 do A[i][1][r] = { i + r, i - r, i * r } end
    end
    for j = 1, 3 do
      B[j] = {}
      for r = 1, 3 do B[j][r] = { j + r, j * r - 2 } end
    end
    for i = 1, 2 do
      want[i] = {}
      for j = 1, 3 do want[i][j] = matmul(A[i][1], B[j]) end
    end
    check(run("MatMul", { f32(A), f32(B) }), "float32", { 2, 3, 2, 2 }, want)
  end)

  it("Gemm: transA, transB, alpha, beta, a broadcast C, and no C", function()
    local a = { { 1, 2 }, { 3, 4 }, { 5, 6 } }                           -- A^T: 2x3
    local b = { { 1, 0, 2 }, { 0, 1, 1 }, { 2, 2, 0 }, { 1, -1, 1 } }    -- B^T: 3x4
    local c = { 1, 2, 3, 4 }
    local prod = matmul(transpose(a), transpose(b))
    local want, plain = {}, {}
    for i = 1, 2 do
      want[i], plain[i] = {}, {}
      for j = 1, 4 do want[i][j] = 2 * prod[i][j] + 0.5 * c[j] plain[i][j] = 2 * prod[i][j] end
    end
    check(run("Gemm", { f32(a), f32(b), f32(c) }, { transA = 1, transB = 1, alpha = 2.0, beta = 0.5 }), "float32",
      { 2, 4 }, want)
    check(run("Gemm", { f32(a), f32(b) }, { transA = 1, transB = 1, alpha = 2.0 }), "float32", { 2, 4 }, plain)
    fails_with("A and B must be 2-d", run, "Gemm", { f32({ 1, 2 }), f32(b) }, {})
  end)
end)

describe("onnx handlers: data movement", function()
  it("DepthToSpace in DCR and CRD order, SpaceToDepth its inverse", function()
    local x = Tensor.arange(0, 8, { dtype = "float32" }):reshape({ 1, 8, 1, 1 })
    local dcr = run("DepthToSpace", { x }, { blocksize = 2 })
    check(dcr, "float32", { 1, 2, 2, 2 }, { { { { 0, 2 }, { 4, 6 } }, { { 1, 3 }, { 5, 7 } } } })
    check(run("DepthToSpace", { x }, { blocksize = 2, mode = "CRD" }), "float32", { 1, 2, 2, 2 },
      { { { { 0, 1 }, { 2, 3 } }, { { 4, 5 }, { 6, 7 } } } })
    check(run("SpaceToDepth", { dcr }, { blocksize = 2 }), "float32", { 1, 8, 1, 1 }, { 0, 1, 2, 3, 4, 5, 6, 7 })
    fails_with("channels 8 are not divisible by blocksize^2 = 9", run, "DepthToSpace", { x }, { blocksize = 3 })
  end)

  it("Transpose (default: reversed), Concat (negative axis), Tile", function()
    local x = Tensor.arange(0, 6, { dtype = "int64" }):reshape({ 2, 3 })
    check(run("Transpose", { x }), "int64", { 3, 2 }, { { 0, 3 }, { 1, 4 }, { 2, 5 } })
    local cube = Tensor.arange(0, 8, { dtype = "int64" }):reshape({ 2, 2, 2 })
    check(run("Transpose", { cube }, { perm = { 1, 2, 0 } }), "int64", { 2, 2, 2 },
      { { { 0, 4 }, { 1, 5 } }, { { 2, 6 }, { 3, 7 } } })
    check(run("Concat", { x, i64({ { 9 }, { 9 } }) }, { axis = -1 }), "int64", { 2, 4 },
      { { 0, 1, 2, 9 }, { 3, 4, 5, 9 } })
    check(run("Tile", { i64({ { 1, 2 } }), i64({ 2, 2 }) }), "int64", { 2, 4 }, { { 1, 2, 1, 2 }, { 1, 2, 1, 2 } })
    fails_with("repeats has 1 entries for rank 2", run, "Tile", { x, i64({ 2 }) })
    -- before opset 4 Concat's axis defaults to 1; before opset 6 Tile copies along one axis
    check(run("Concat", { x, x }, {}, { opset = 3 }), "int64", { 2, 6 }, { { 0, 1, 2, 0, 1, 2 }, { 3, 4, 5, 3, 4, 5 } })
    fails_with("axis is required", run, "Concat", { x, x }, {}, { opset = 4 })
    check(run("Tile", { x, i64(2), i64(0) }, {}, { opset = 5 }), "int64", { 4, 3 },
      { { 0, 1, 2 }, { 3, 4, 5 }, { 0, 1, 2 }, { 3, 4, 5 } })
  end)
end)

describe("onnx handlers: sequences and optionals", function()
  local function seq(...) return run("SequenceConstruct", table.pack(...)) end

  it("SequenceConstruct/Insert/At/Erase/Length with 0-based and negative positions", function()
    local a, b, c = f32({ 1 }), f32({ 2, 2 }), f32({ 3, 3, 3 })
    local s = seq(a, b)
    assert.are.equal("sequence", s.kind)
    check(run("SequenceLength", { s }), "int64", {}, 2)
    local front = run("SequenceInsert", { s, c, i64(0) })
    local middle = run("SequenceInsert", { s, c, i64(-1) })
    local back = run("SequenceInsert", { s, c })
    assert.are.equal(2, #s) -- sequences are values: inserting made new ones
    assert.are.same({ c, a, b }, { front[1], front[2], front[3] })
    assert.are.same({ a, c, b }, { middle[1], middle[2], middle[3] })
    assert.are.same({ a, b, c }, { back[1], back[2], back[3] })
    check(run("SequenceAt", { back, i64(-1) }), "float32", { 3 }, { 3, 3, 3 })
    check(run("SequenceAt", { back, i64(1) }), "float32", { 2 }, { 2, 2 })
    local erased = run("SequenceErase", { back, i64(0) })
    assert.are.same({ b, c }, { erased[1], erased[2] })
    local last = run("SequenceErase", { back })
    assert.are.same({ a, b }, { last[1], last[2] })
    assert.are.equal(2, #last)
    local empty = run("SequenceEmpty", {}, { dtype = 7 })
    assert.are.equal("int64", empty.elem_dtype)
    check(run("SequenceLength", { empty }), "int64", {}, 0)
    fails_with("position 3 is out of range for a sequence of 3 tensors (allowed -3..2)",
      run, "SequenceAt", { back, i64(3) })
    fails_with("position -4 is out of range", run, "SequenceInsert", { s, c, i64(-4) })
    fails_with("cannot insert a int64 tensor into a sequence of float32", run, "SequenceInsert", { s, i64({ 1 }) })
    fails_with("input 0 must be a sequence, got a tensor", run, "SequenceLength", { a })
    fails_with("cannot erase from an empty sequence", run, "SequenceErase", { empty })
    fails_with("all inputs must have one dtype: input 0 is float32, input 1 is int64", seq, a, i64({ 1 }))
  end)

  it("SplitToSequence and ConcatFromSequence (concat and new_axis stacking)", function()
    local x = Tensor.arange(0, 10, { dtype = "int64" }):reshape({ 5, 2 })
    local pieces = run("SplitToSequence", { x, i64(2) })
    assert.are.equal(3, #pieces)
    check(pieces[3], "int64", { 1, 2 }, { { 8, 9 } })
    pieces = run("SplitToSequence", { x, i64({ 1, 4 }) })
    check(pieces[2], "int64", { 4, 2 }, { { 2, 3 }, { 4, 5 }, { 6, 7 }, { 8, 9 } })
    local columns = run("SplitToSequence", { x }, { axis = -1, keepdims = 0 })
    assert.are.equal(2, #columns)
    check(columns[2], "int64", { 5 }, { 1, 3, 5, 7, 9 })
    local kept = run("SplitToSequence", { x }, { axis = 1 })
    check(kept[1], "int64", { 5, 1 }, { 0, 2, 4, 6, 8 })
    check(run("ConcatFromSequence", { columns }, { axis = 0 }), "int64", { 10 }, { 0, 2, 4, 6, 8, 1, 3, 5, 7, 9 })
    check(run("ConcatFromSequence", { columns }, { axis = -1, new_axis = 1 }), "int64", { 5, 2 },
      { { 0, 1 }, { 2, 3 }, { 4, 5 }, { 6, 7 }, { 8, 9 } })
    check(run("ConcatFromSequence", { columns }, { axis = 0, new_axis = 1 }), "int64", { 2, 5 },
      { { 0, 2, 4, 6, 8 }, { 1, 3, 5, 7, 9 } })
    fails_with("split sizes add up to 4, the axis has 5", run, "SplitToSequence", { x, i64({ 1, 3 }) })
    fails_with("axis 2 is out of range for rank 2", run, "ConcatFromSequence", { columns }, { axis = 2, new_axis = 1 })
    fails_with("cannot concatenate an empty sequence", run, "ConcatFromSequence",
      { run("SequenceEmpty", {}) }, { axis = 0 })
  end)

  it("SequenceMap runs the body per element: sequences indexed, tensors passed whole", function()
    local body = {
      outputs = { { type = { kind = "tensor", dtype = "float32" } }, { type = { kind = "tensor", dtype = "int64" } } },
      run = function(_, _, args) return { args[1] + args[2], Tensor(args[1]:numel(), { dtype = "int64" }) } end,
    }
    local s = seq(f32({ 1, 2 }), f32({ 3, 4 }))
    local sums, sizes = run("SequenceMap", { s, f32(10) }, { body = body }, { noutputs = 2 })
    assert.are.equal(2, #sums)
    check(sums[2], "float32", { 2 }, { 13, 14 })
    check(sizes[1], "int64", {}, 2)
    local pairs_ = run("SequenceMap", { s, seq(f32({ 5, 5 }), f32({ 6, 6 })) }, { body = body }, { noutputs = 2 })
    check(pairs_[1], "float32", { 2 }, { 6, 7 })
    fails_with("input 1 is a sequence of 1 tensors, input 0 has 2", run, "SequenceMap", { s, seq(f32({ 1 })) },
      { body = body }, { noutputs = 2 })
  end)

  it("Optional, OptionalHasElement, OptionalGetElement (and opset 18's plain values)", function()
    local t = f32({ 1, 2 })
    local full = run("Optional", { t })
    local empty = run("Optional", {}, { type = { kind = "tensor" } })
    check(run("OptionalHasElement", { full }), "bool", {}, true)
    check(run("OptionalHasElement", { empty }), "bool", {}, false)
    check(run("OptionalHasElement", { t }), "bool", {}, true)
    check(run("OptionalHasElement", { n = 1 }), "bool", {}, false)
    assert.are.equal(t, run("OptionalGetElement", { full }))
    assert.are.equal(t, run("OptionalGetElement", { t }))
    fails_with("the optional input is empty", run, "OptionalGetElement", { empty })
    fails_with("an empty Optional needs the type attribute", run, "Optional", {})
  end)
end)
