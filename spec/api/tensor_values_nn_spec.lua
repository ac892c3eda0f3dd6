-- spec/api/tensor_values_nn_spec.lua — the values of the linear-algebra and nn functions of the
-- Tensor API (matmul/dot, linear, conv2d, max_pool2d, avg_pool2d, layernorm, batchnorm,
-- dropout, one_hot, scaled_dot_product_attention, cross_entropy,
-- sparse_categorical_crossentropy) against the naive reference in spec/support/reference.lua
-- (conv2d as the direct 7-loop definition), on seeded random shapes, including broadcasting
-- batch dims, size-1 and size-0 dims, non-contiguous inputs and several dtypes.
local tcl = require "tcl"
local R = require "spec.support.reference"
local Tensor = tcl.Tensor

local function T(ref) return R.to_tcl(Tensor, ref) end

local function shapes_string(...)
  local parts = {}
  for i, t in ipairs({ ... }) do parts[i] = R.shape_string(t.shape) end
  return table.concat(parts, " @ ")
end

local REDUCE = { kind = "reduce" }
local FUNCTION = { kind = "function" }

describe("Tensor matmul and dot", function()
  local SHAPES = {
    { "1-D by 1-D", { 4 }, { 4 } },
    { "1-D by 2-D", { 3 }, { 3, 5 } },
    { "2-D by 1-D", { 4, 3 }, { 3 } },
    { "2-D by 2-D", { 3, 4 }, { 4, 2 } },
    { "size-1 dims", { 1, 4 }, { 4, 1 } },
    { "3-D by 3-D", { 2, 3, 4 }, { 2, 4, 3 } },
    { "batch broadcast", { 2, 1, 2, 3 }, { 3, 3, 2 } },
    { "3-D by 2-D", { 3, 2, 4 }, { 4, 3 } },
    { "1-D by 3-D", { 3 }, { 2, 3, 2 } },
    { "3-D by 1-D", { 2, 3, 4 }, { 4 } },
    { "inner size 0", { 2, 0 }, { 0, 3 } },
    { "outer size 0", { 0, 3 }, { 3, 2 } },
  }
  for _, case in ipairs(SHAPES) do
    it(case[1] .. " " .. R.shape_string(case[2]) .. " @ " .. R.shape_string(case[3]), function()
      local rng = R.random_for("matmul " .. case[1])
      local a, b = rng:tensor(case[2], "float32"), rng:tensor(case[3], "float32")
      R.check(T(a):matmul(T(b)), R.matmul(a, b), "matmul float32 " .. shapes_string(a, b), REDUCE)
      R.check(T(a):dot(T(b)), R.matmul(a, b), "dot float32 " .. shapes_string(a, b), REDUCE)
    end)
  end

  it("random 2-D and batched shapes, int32 (exact), float16 and float64", function()
    local rng = R.random_for("matmul random")
    for _, dtype in ipairs({ "float32", "int32", "float16", "float64" }) do
      for _ = 1, 2 do
        local m, k, n = rng:integer(1, 4), rng:integer(1, 5), rng:integer(1, 4)
        local batch = rng:chance(0.5) and { rng:integer(1, 3) } or {}
        local sa, sb = R.copy(batch), R.copy(batch)
        sa[#sa + 1], sa[#sa + 2] = m, k
        sb[#sb + 1], sb[#sb + 2] = k, n
        local a, b = rng:tensor(sa, dtype), rng:tensor(sb, dtype)
        R.check(T(a):matmul(T(b)), R.matmul(a, b), "matmul " .. dtype .. " " .. shapes_string(a, b), REDUCE)
      end
    end
  end)

  it("non-contiguous operands: transposed, flipped, sliced, padded, expanded", function()
    local rng = R.random_for("matmul views")
    for i, kind in ipairs(R.VIEW_KINDS) do
      local a, make_a = rng:view(kind, { 3, 4 }, "float32")
      local b, make_b = rng:view(R.VIEW_KINDS[i % #R.VIEW_KINDS + 1], { 4, 2 }, "float32")
      R.check(make_a(Tensor):matmul(make_b(Tensor)), R.matmul(a, b), "matmul of " .. kind .. " views", REDUCE)
    end
    local w = rng:tensor({ 5, 4 }, "float32")
    local x = rng:tensor({ 3, 4 }, "float32")
    R.check(T(x):matmul(T(w):transpose(1, 2)), R.matmul(x, R.transpose(w, 1, 2)), "x @ w^T", REDUCE)
    R.check(T(x):matmul(T(w):transpose(1, 2)):relu():sum(1), R.sum(R.unary("relu", R.matmul(x, R.transpose(w, 1, 2))),
        1),
      "matmul then relu then sum", REDUCE)
  end)

  it("mixed dtypes promote (int32 @ float32)", function()
    local rng = R.random_for("matmul promote")
    local a, b = rng:tensor({ 2, 3 }, "int32"), rng:tensor({ 3, 2 }, "float32")
    R.check(T(a):matmul(T(b)), R.matmul(a, b), "int32 @ float32", REDUCE)
  end)
end)

describe("Tensor linear", function()
  it("with and without bias, 1-D, 2-D and 3-D inputs, w of shape (in, out)", function()
    local rng = R.random_for("linear")
    for _, x_shape in ipairs({ { 4 }, { 3, 4 }, { 2, 3, 4 }, { 1, 4 } }) do
      local x, w, b = rng:tensor(x_shape, "float32"), rng:tensor({ 4, 5 }, "float32"), rng:tensor({ 5 }, "float32")
      R.check(T(x):linear(T(w), T(b)), R.linear(x, w, b), "linear with bias " .. R.shape_string(x_shape), REDUCE)
      R.check(T(x):linear(T(w)), R.linear(x, w), "linear without bias " .. R.shape_string(x_shape), REDUCE)
    end
    local x, make = rng:view("permuted", { 3, 4 }, "float32")
    local w, b = rng:tensor({ 4, 2 }, "float32"), rng:tensor({ 2 }, "float32")
    R.check(make(Tensor):linear(T(w), T(b)), R.linear(x, w, b), "linear of a permuted input", REDUCE)
    local h, hw = rng:tensor({ 2, 3 }, "float16"), rng:tensor({ 3, 2 }, "float16")
    R.check(T(h):linear(T(hw)), R.linear(h, hw), "linear float16", REDUCE)
  end)
end)

describe("Tensor conv2d", function()
  -- input shape, weight shape, options, bias?
  local CASES = {
    { "3x3 defaults", { 1, 2, 5, 5 }, { 3, 2, 3, 3 }, {}, true },
    { "no bias", { 1, 2, 5, 5 }, { 2, 2, 3, 3 }, {}, false },
    { "stride 2", { 1, 2, 5, 5 }, { 2, 2, 3, 3 }, { stride = 2 }, true },
    { "padding 1", { 1, 2, 5, 5 }, { 2, 2, 3, 3 }, { padding = 1 }, true },
    { "dilation 2", { 1, 2, 5, 5 }, { 2, 2, 2, 2 }, { dilation = 2 }, false },
    { "groups 2", { 1, 2, 5, 5 }, { 4, 1, 3, 3 }, { groups = 2 }, true },
    { "stride 2, padding 1, dilation 2", { 1, 2, 5, 5 }, { 2, 2, 2, 2 }, { stride = 2, padding = 1, dilation = 2 },
        true },
    { "1x1 kernel", { 2, 3, 3, 3 }, { 2, 3, 1, 1 }, {}, true },
    { "2x3 kernel", { 1, 2, 4, 5 }, { 2, 2, 2, 3 }, { padding = 1 }, false },
    { "batch 2, groups 2, stride 2", { 2, 4, 4, 4 }, { 2, 2, 2, 2 }, { groups = 2, stride = 2 }, true },
    { "per-dim stride and padding", { 1, 1, 5, 4 }, { 1, 1, 3, 2 }, { stride = { 2, 1 }, padding = { 1, 0 } }, true },
    { "kernel as large as the input", { 1, 2, 3, 3 }, { 2, 2, 3, 3 }, {}, true },
    { "padding {{top, bottom}, {left, right}}", { 1, 2, 4, 4 }, { 2, 2, 3, 2 }, { padding = { { 1, 0 }, { 0, 2 } } },
        true },
    { "per-dim dilation and stride", { 1, 1, 5, 5 }, { 2, 1, 2, 2 }, { dilation = { 1, 2 }, stride = { 2, 1 } },
        false },
    { "groups 4 (depthwise)", { 1, 4, 3, 3 }, { 4, 1, 2, 2 }, { groups = 4, padding = 1 }, true },
  }
  for _, case in ipairs(CASES) do
    it(case[1] .. " x" .. R.shape_string(case[2]) .. " w" .. R.shape_string(case[3]), function()
      local rng = R.random_for("conv2d " .. case[1])
      local x, w = rng:tensor(case[2], "float32"), rng:tensor(case[3], "float32")
      local b = case[5] and rng:tensor({ case[3][1] }, "float32") or nil
      local got = T(x):conv2d(T(w), b and T(b) or nil, case[4])
      R.check(got, R.conv2d(x, w, b, case[4]), "conv2d " .. case[1], REDUCE)
    end)
  end

  it("non-contiguous input and weight (NHWC permuted, flipped kernel), float16", function()
    local rng = R.random_for("conv2d views")
    local nhwc = rng:tensor({ 1, 5, 5, 2 }, "float32")
    local x = R.permute(nhwc, { 1, 4, 2, 3 })
    local w_base = rng:tensor({ 2, 2, 3, 3 }, "float32")
    local w = R.flip(w_base, { 3, 4 })
    local got = T(nhwc):permute(1, 4, 2, 3):conv2d(T(w_base):flip({ 3, 4 }), nil, { padding = 1 })
    R.check(got, R.conv2d(x, w, nil, { padding = 1 }), "conv2d of views", REDUCE)
    local padded_ref = R.pad(R.permute(nhwc, { 1, 4, 2, 3 }), { { 0, 0 }, { 0, 0 }, { 1, 0 }, { 0, 1 } }, 0.5)
    local got_padded = T(nhwc):permute(1, 4, 2, 3):pad({ { 0, 0 }, { 0, 0 }, { 1, 0 }, { 0, 1 } },
        0.5):conv2d(T(w_base))
    R.check(got_padded, R.conv2d(padded_ref, w_base, nil, {}), "conv2d of a padded view", REDUCE)
    local h, hw = rng:tensor({ 1, 2, 4, 4 }, "float16"), rng:tensor({ 2, 2, 2, 2 }, "float16")
    R.check(T(h):conv2d(T(hw)), R.conv2d(h, hw, nil, {}), "conv2d float16", REDUCE)
  end)
end)

describe("Tensor pooling", function()
  -- kernel, stride, padding
  local CASES = {
    { 2, nil, nil }, { 3, 1, nil }, { 3, 2, 1 }, { { 2, 3 }, nil, nil }, { 2, 1, 1 }, { 1, nil, nil },
  }
  for _, case in ipairs(CASES) do
    local label = string.format("kernel %s stride %s padding %s",
      type(case[1]) == "table" and ("{" .. case[1][1] .. ", " .. case[1][2] .. "}") or tostring(case[1]),
      tostring(case[2]), tostring(case[3]))
    it("max_pool2d and avg_pool2d, " .. label, function()
      local rng = R.random_for("pool " .. label)
      local x = rng:tensor({ 1, 2, 5, 5 }, "float32")
      local function call(name)
        if case[3] ~= nil then return T(x)[name](T(x), case[1], case[2], case[3]) end
        if case[2] ~= nil then return T(x)[name](T(x), case[1], case[2]) end
        return T(x)[name](T(x), case[1])
      end
      R.check(call("max_pool2d"), R.max_pool2d(x, case[1], case[2], case[3]), "max_pool2d " .. label)
      R.check(call("avg_pool2d"), R.avg_pool2d(x, case[1], case[2], case[3]), "avg_pool2d " .. label, REDUCE)
    end)
  end

  it("max_pool2d with dilation, avg_pool2d of int32 gives float32, 3-D input", function()
    local rng = R.random_for("pool extras")
    local x = rng:tensor({ 1, 2, 5, 5 }, "float32")
    R.check(T(x):max_pool2d(2, 1, 0, 2), R.max_pool2d(x, 2, 1, 0, 2), "max_pool2d dilation 2")
    R.check(T(x):max_pool2d({ 2, 2 }, { 2, 1 }, { 1, 0 }), R.max_pool2d(x, { 2, 2 }, { 2, 1 }, { 1, 0 }),
      "max_pool2d per-dim stride and padding")
    local i = rng:tensor({ 1, 1, 4, 4 }, "int32")
    R.check(T(i):avg_pool2d(2), R.avg_pool2d(i, 2), "avg_pool2d int32", REDUCE)
    local c = rng:tensor({ 2, 4, 4 }, "float32")
    R.check(T(c):max_pool2d(2), R.max_pool2d(c, 2), "max_pool2d on (C, H, W)")
    R.check(T(c):avg_pool2d(3, 1), R.avg_pool2d(c, 3, 1), "avg_pool2d on (C, H, W)", REDUCE)
  end)

  it("pooling non-contiguous, negative, int32 and float16 inputs", function()
    local rng = R.random_for("pool views")
    local x, make = rng:view("flipped", { 2, 1, 4, 4 }, "float32", { lo = -5, hi = -1 })
    R.check(make(Tensor):max_pool2d(2), R.max_pool2d(x, 2), "max_pool2d of negatives, flipped")
    R.check(make(Tensor):max_pool2d(3, 2, 1), R.max_pool2d(x, 3, 2, 1), "max_pool2d of negatives with padding")
    R.check(make(Tensor):avg_pool2d(2), R.avg_pool2d(x, 2), "avg_pool2d flipped", REDUCE)
    local i = rng:tensor({ 1, 1, 4, 4 }, "int32")
    R.check(T(i):max_pool2d(2), R.max_pool2d(i, 2), "max_pool2d int32")
    local h = rng:tensor({ 1, 2, 4, 4 }, "float16")
    R.check(T(h):max_pool2d(2), R.max_pool2d(h, 2), "max_pool2d float16")
    R.check(T(h):avg_pool2d(2), R.avg_pool2d(h, 2), "avg_pool2d float16", REDUCE)
  end)
end)

describe("Tensor normalization", function()
  it("layernorm over the last dim, a given dim, a given eps, views and float16", function()
    local rng = R.random_for("layernorm")
    local x = rng:tensor({ 3, 5 }, "float32")
    R.check(T(x):layernorm(), R.layernorm(x), "layernorm()", FUNCTION)
    R.check(T(x):layernorm(-1, 1e-5), R.layernorm(x, -1, 1e-5), "layernorm(-1, 1e-5)", FUNCTION)
    R.check(T(x):layernorm(1, 0.1), R.layernorm(x, 1, 0.1), "layernorm(1, 0.1)", FUNCTION)
    local y = rng:tensor({ 2, 3, 4 }, "float32")
    R.check(T(y):layernorm(2), R.layernorm(y, 2), "layernorm(2) on 3-D", FUNCTION)
    local v, make = rng:view("permuted", { 4, 3 }, "float32")
    R.check(make(Tensor):layernorm(), R.layernorm(v), "layernorm of a permuted input", FUNCTION)
    local h = rng:tensor({ 2, 6 }, "float16")
    R.check(T(h):layernorm(), R.layernorm(h), "layernorm float16", FUNCTION)
  end)

  it("batchnorm on (N, C, H, W) and (N, C) with per-channel parameters", function()
    local rng = R.random_for("batchnorm")
    for _, shape in ipairs({ { 2, 3, 2, 2 }, { 4, 3 }, { 1, 3, 4 } }) do
      local x = rng:tensor(shape, "float32")
      local weight, bias = rng:tensor({ 3 }, "float32"), rng:tensor({ 3 }, "float32")
      local mean, invstd = rng:tensor({ 3 }, "float32"), rng:tensor({ 3 }, "float32", { lo = 0.2, hi = 2 })
      R.check(T(x):batchnorm(T(weight), T(bias), T(mean), T(invstd)), R.batchnorm(x, weight, bias, mean, invstd),
        "batchnorm " .. R.shape_string(shape), FUNCTION)
    end
    local x, make = rng:view("sliced", { 2, 3, 3, 2 }, "float32")
    local p = {}
    for i = 1, 4 do p[i] = rng:tensor({ 3 }, "float32", { lo = 0.2, hi = 2 }) end
    R.check(make(Tensor):batchnorm(T(p[1]), T(p[2]), T(p[3]), T(p[4])), R.batchnorm(x, p[1], p[2], p[3], p[4]),
      "batchnorm of a sliced input", FUNCTION)
  end)
end)

describe("Tensor dropout", function()
  local function with_training(flag, body)
    local saved = tcl.training
    tcl.training = flag
    local ok, err = pcall(body)
    tcl.training = saved
    if not ok then error(err, 0) end
  end

  it("is the identity when not training", function()
    local rng = R.random_for("dropout off")
    local x = rng:tensor({ 4, 5 }, "float32")
    with_training(false, function()
      R.check(T(x):dropout(0.5), x, "dropout(0.5) outside training")
      R.check(T(x):dropout(), x, "dropout() outside training")
    end)
  end)

  it("while training zeroes about p of the elements and scales the rest by 1/(1-p)", function()
    local rng = R.random_for("dropout on")
    local x = rng:tensor({ 16, 16 }, "float32", { lo = 0.5, hi = 2 })
    with_training(true, function()
      Tensor.manual_seed(7)
      local got = T(x):dropout(0.25):tolist()
      local zeros = 0
      for i = 1, 16 do
        for j = 1, 16 do
          local v, expected = got[i][j], x.data[(i - 1) * 16 + j] / 0.75
          if v == 0 then
            zeros = zeros + 1
          else
            assert(math.abs(v - expected) <= 1e-5 * math.abs(expected),
              string.format("dropout kept [%d][%d] as %.9g, expected %.9g", i, j, v, expected))
          end
        end
      end
      assert(zeros >= 30 and zeros <= 100, "dropout(0.25) zeroed " .. zeros .. " of 256")
      R.check(T(x):dropout(0), x, "dropout(0) while training")
    end)
  end)
end)

describe("Tensor one_hot", function()
  it("1-based classes on 1-D, 2-D and 0-d labels", function()
    local rng = R.random_for("one_hot")
    for _, shape in ipairs({ { 5 }, { 2, 3 }, {}, { 0 } }) do
      local labels = rng:tensor(shape, "int32", { lo = 1, hi = 4 })
      R.check(T(labels):one_hot(4), R.one_hot(labels, 4), "one_hot(4) " .. R.shape_string(shape))
    end
    local labels = R.from_nested({ 3, 1, 2 }, "int32")
    R.check(T(labels):one_hot(3), R.one_hot(labels, 3), "one_hot(3) of a permutation")
    local wide = R.from_nested({ { 2, 5 }, { 1, 1 } }, "int32")
    R.check(T(wide):one_hot(), R.one_hot(wide, 5), "one_hot() takes the largest label")
    local small = R.from_nested({ 1, 3 }, "int8")
    R.check(T(small):one_hot(4), R.one_hot(small, 4), "one_hot of int8 labels")
  end)
end)

describe("Tensor scaled_dot_product_attention", function()
  -- q shape, k shape, v shape, mask kind ("bool", "float" or nil), causal
  local CASES = {
    { "2-D", { 3, 4 }, { 3, 4 }, { 3, 2 } },
    { "2-D, keys longer than queries", { 2, 4 }, { 5, 4 }, { 5, 3 } },
    { "batched heads", { 2, 2, 3, 4 }, { 2, 2, 3, 4 }, { 2, 2, 3, 4 } },
    { "bool mask", { 3, 4 }, { 4, 4 }, { 4, 2 }, "bool" },
    { "float mask", { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 2 }, "float" },
    { "causal", { 4, 3 }, { 4, 3 }, { 4, 2 }, nil, true },
    { "causal, batched", { 2, 3, 4 }, { 2, 3, 4 }, { 2, 3, 4 }, nil, true },
    { "causal with more keys", { 2, 3 }, { 4, 3 }, { 4, 2 }, nil, true },
  }
  for _, case in ipairs(CASES) do
    it(case[1], function()
      local rng = R.random_for("sdpa " .. case[1])
      local q, k, v = rng:tensor(case[2], "float32"), rng:tensor(case[3], "float32"), rng:tensor(case[4], "float32")
      local mask
      local L, S = case[2][#case[2] - 1], case[3][#case[3] - 1]
      if case[5] == "bool" then
        mask = rng:tensor({ L, S }, "bool")
        for i = 1, L do mask.data[(i - 1) * S + 1] = true end -- every row keeps a key
      elseif case[5] == "float" then
        mask = rng:tensor({ L, S }, "float32", { lo = -2, hi = 0 })
      end
      local got = T(q):scaled_dot_product_attention(T(k), T(v), mask and T(mask) or nil, case[6])
      R.check(got, R.scaled_dot_product_attention(q, k, v, mask, case[6]), "sdpa " .. case[1], FUNCTION)
    end)
  end

  it("on non-contiguous q, k, v (heads split by reshape + transpose)", function()
    local rng = R.random_for("sdpa views")
    local x = rng:tensor({ 3, 2, 4 }, "float32") -- (L, heads, d)
    local q = R.transpose(x, 1, 2)
    local got = T(x):transpose(1, 2):scaled_dot_product_attention(T(x):transpose(1, 2), T(x):transpose(1, 2))
    R.check(got, R.scaled_dot_product_attention(q, q, q), "sdpa of transposed views", FUNCTION)
  end)
end)

describe("Tensor losses", function()
  it("cross_entropy against probabilities and one-hot targets, mean over the batch", function()
    local rng = R.random_for("cross_entropy")
    for _, shape in ipairs({ { 4, 3 }, { 1, 5 }, { 3, 1 } }) do
      local logits = rng:tensor(shape, "float32")
      local raw = rng:tensor(shape, "float32", { lo = 0.1, hi = 1 })
      local target = R.map("float32", function(p, s) return p / s end, raw, R.sum(raw, 2, true))
      R.check(T(logits):cross_entropy(T(target)), R.cross_entropy(logits, target),
        "cross_entropy " .. R.shape_string(shape), FUNCTION)
    end
    local logits = rng:tensor({ 3, 4 }, "float32")
    local labels = R.from_nested({ 2, 4, 1 }, "int32")
    local target = R.cast(R.one_hot(labels, 4), "float32")
    R.check(T(logits):cross_entropy(T(target)), R.cross_entropy(logits, target), "cross_entropy one-hot", FUNCTION)
    local v, make = rng:view("flipped", { 3, 4 }, "float32")
    R.check(make(Tensor):cross_entropy(T(target)), R.cross_entropy(v, target), "cross_entropy of a view", FUNCTION)
  end)

  it("cross_entropy against 1-based class indices, on 1-D and 3-D logits, reductions, smoothing", function()
    local rng = R.random_for("cross_entropy more")
    local logits = rng:tensor({ 4, 3 }, "float32")
    local labels = R.from_nested({ 3, 1, 2, 3 }, "int32")
    R.check(T(logits):cross_entropy(T(labels)), R.cross_entropy(logits, labels), "cross_entropy class indices",
        FUNCTION)
    for _, reduction in ipairs({ "sum", "none", "mean" }) do
      R.check(T(logits):cross_entropy(T(labels), { reduction = reduction }),
        R.cross_entropy(logits, labels, { reduction = reduction }), "cross_entropy reduction " .. reduction, FUNCTION)
    end
    R.check(T(logits):cross_entropy(T(labels), { label_smoothing = 0.1 }),
      R.cross_entropy(logits, labels, { label_smoothing = 0.1 }), "cross_entropy label_smoothing 0.1", FUNCTION)
    local seq = rng:tensor({ 2, 3, 4 }, "float32") -- (N, C, L)
    local seq_labels = rng:tensor({ 2, 4 }, "int32", { lo = 1, hi = 3 })
    R.check(T(seq):cross_entropy(T(seq_labels)), R.cross_entropy(seq, seq_labels), "cross_entropy (N, C, L) indices",
      FUNCTION)
    local raw = rng:tensor({ 2, 3, 4 }, "float32", { lo = 0.1, hi = 1 })
    local probabilities = R.map("float32", function(p, total) return p / total end, raw, R.sum(raw, 2, true))
    R.check(T(seq):cross_entropy(T(probabilities)), R.cross_entropy(seq, probabilities),
      "cross_entropy (N, C, L) probabilities", FUNCTION)
    local single = rng:tensor({ 5 }, "float32")
    local single_label = R.scalar(2, "int32")
    R.check(T(single):cross_entropy(T(single_label)), R.cross_entropy(single, single_label), "cross_entropy 1-D logits",
      FUNCTION)
  end)

  it("sparse_categorical_crossentropy on (B, T, C) logits and with ignore_index", function()
    local rng = R.random_for("sparse more")
    local logits = rng:tensor({ 2, 3, 4 }, "float32")
    local labels = rng:tensor({ 2, 3 }, "int32", { lo = 1, hi = 4 })
    R.check(T(logits):sparse_categorical_crossentropy(T(labels)), R.sparse_categorical_crossentropy(logits, labels),
      "sparse_categorical_crossentropy (B, T, C)", FUNCTION)
    local with_ignored = R.from_nested({ 2, -1, 4, 1, -1, 3 }, "int32")
    local flat = R.reshape(logits, { 6, 4 })
    R.check(T(flat):sparse_categorical_crossentropy(T(with_ignored), { ignore_index = -1 }),
      R.sparse_categorical_crossentropy(flat, with_ignored, -1), "sparse_categorical_crossentropy ignore_index",
          FUNCTION)
  end)

  it("sparse_categorical_crossentropy with 1-based labels", function()
    local rng = R.random_for("sparse_categorical_crossentropy")
    for _, shape in ipairs({ { 4, 3 }, { 1, 5 }, { 6, 2 } }) do
      local logits = rng:tensor(shape, "float32", { lo = -4, hi = 4 })
      local labels = rng:tensor({ shape[1] }, "int32", { lo = 1, hi = shape[2] })
      R.check(T(logits):sparse_categorical_crossentropy(T(labels)),
        R.sparse_categorical_crossentropy(logits, labels), "sparse_categorical_crossentropy " .. R.shape_string(shape),
        FUNCTION)
    end
    local logits, make = rng:view("permuted", { 3, 4 }, "float32")
    local labels = R.from_nested({ 4, 1, 2 }, "int32")
    R.check(make(Tensor):sparse_categorical_crossentropy(T(labels)),
      R.sparse_categorical_crossentropy(logits, labels), "sparse_categorical_crossentropy of a view", FUNCTION)
  end)
end)
