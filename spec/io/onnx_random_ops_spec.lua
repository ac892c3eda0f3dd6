-- spec/io/onnx_random_ops_spec.lua — the ONNX random ops (Bernoulli, RandomUniform(Like),
-- RandomNormal(Like)) in lua/tcl/onnx/ops/core.lua: shapes, dtypes, ranges and moments (the
-- suite's cases compare the reference runtime's random numbers, so they are out of scope).
local tcl = require "tcl"
local helper = require "spec.support.helper"
local torch_ref = require "spec.support.torch_ref"
local Tensor = tcl.Tensor
local q = helper.shell_quote

describe("onnx random ops", function()
  local dir = helper.fresh_dir_path()
  setup(function()
    os.execute("mkdir -p " .. q(dir))
    local script = dir .. "/make.py"
    helper.write(script, [[
import onnx, sys
from onnx import helper, TensorProto as T
d = sys.argv[1]
def save(name, nodes, inputs, outputs):
    g = helper.make_graph(nodes, name, inputs, outputs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)]), d + "/" + name + ".onnx")
vi = helper.make_tensor_value_info
save("uniform", [helper.make_node("RandomUniform", [], ["y"], shape=[200, 50], low=-2.0, high=3.0,
     dtype=T.DOUBLE, seed=1.0)], [], [vi("y", T.DOUBLE, [200, 50])])
save("normal_like", [helper.make_node("RandomNormalLike", ["x"], ["y"], mean=5.0, scale=0.5)],
     [vi("x", T.FLOAT, [100, 100])], [vi("y", T.FLOAT, [100, 100])])
save("uniform_like", [helper.make_node("RandomUniformLike", ["x"], ["y"], dtype=T.FLOAT16)],
     [vi("x", T.FLOAT, [1000])], [vi("y", T.FLOAT16, [1000])])
save("normal", [helper.make_node("RandomNormal", [], ["y"], shape=[10000])], [], [vi("y", T.FLOAT, [10000])])
save("bernoulli", [helper.make_node("Bernoulli", ["x"], ["y"], dtype=T.INT32)],
     [vi("x", T.FLOAT, [4, 2500])], [vi("y", T.INT32, [4, 2500])])
save("bad_dtype", [helper.make_node("RandomNormal", [], ["y"], shape=[3], dtype=T.INT64)], [],
     [vi("y", T.INT64, [3])])
]])
    local status, _, err = helper.run(assert(torch_ref.python()) .. " " .. q(script) .. " " .. q(dir))
    assert(status == 0, err)
  end)
  teardown(function() os.execute("rm -rf " .. q(dir)) end)

  local function load(name) return tcl.onnx.load(dir .. "/" .. name .. ".onnx") end

  local function moments(t)
    local values = t:flatten():cast("float64"):tolist()
    local sum, lo, hi = 0, math.huge, -math.huge
    for _, v in ipairs(values) do sum, lo, hi = sum + v, math.min(lo, v), math.max(hi, v) end
    local mean = sum / #values
    local var = 0
    for _, v in ipairs(values) do var = var + (v - mean) ^ 2 end
    return mean, math.sqrt(var / #values), lo, hi
  end

  it("RandomUniform: shape, dtype and range from its attributes", function()
    local y = load("uniform")()
    assert.are.same({ 200, 50 }, y:size())
    assert.are.equal("float64", tostring(y.dtype))
    local mean, sd, lo, hi = moments(y)
    assert.is_true(lo >= -2 and hi < 3 and lo < -1.9 and hi > 2.9, lo .. " " .. hi)
    assert.is_true(math.abs(mean - 0.5) < 0.05, "mean " .. mean)
    assert.is_true(math.abs(sd - 5 / math.sqrt(12)) < 0.05, "sd " .. sd)
  end)

  it("RandomNormal(Like): mean, scale, the input's shape and dtype", function()
    local y = load("normal_like")(Tensor.zeros(100, 100))
    assert.are.same({ 100, 100 }, y:size())
    assert.are.equal("float32", tostring(y.dtype))
    local mean, sd = moments(y)
    assert.is_true(math.abs(mean - 5) < 0.02, "mean " .. mean)
    assert.is_true(math.abs(sd - 0.5) < 0.02, "sd " .. sd)
    local z = load("normal")()
    mean, sd = moments(z)
    assert.is_true(math.abs(mean) < 0.05 and math.abs(sd - 1) < 0.05, mean .. " " .. sd)
  end)

  it("RandomUniformLike: the dtype attribute", function()
    local y = load("uniform_like")(Tensor.zeros(1000))
    assert.are.equal("float16", tostring(y.dtype))
    local _, _, lo, hi = moments(y)
    assert.is_true(lo >= 0 and hi <= 1, lo .. " " .. hi)
  end)

  it("Bernoulli: each element 1 with its input's probability, in the dtype asked", function()
    local p = Tensor({ 0, 1, 0.25, 0.75 }):reshape(4, 1):expand(4, 2500):contiguous()
    local y = load("bernoulli")(p)
    assert.are.equal("int32", tostring(y.dtype))
    local rows = y:cast("float64"):mean(2):tolist() -- one mean per row
    assert.are.equal(0, rows[1])
    assert.are.equal(1, rows[2])
    assert.is_true(math.abs(rows[3] - 0.25) < 0.03, tostring(rows[3]))
    assert.is_true(math.abs(rows[4] - 0.75) < 0.03, tostring(rows[4]))
  end)

  it("refuses a non-float dtype, naming the node", function()
    local model = load("bad_dtype")
    helper.fails_with("(RandomNormal): dtype must be a float type, got int64", model)
  end)
end)
