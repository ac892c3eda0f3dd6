-- spec/nn/state_dict_spec.lua — tcl.api.state's model walk (get_state_dict, get_parameters) and
-- load_state_dict: names and their order, what is skipped, cycles and shared tensors,
-- assignment in place, every error, and a model saved to safetensors and loaded back.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local state = require "tcl.api.state"
local Tensor = tcl.Tensor

local error_of, fails_with = helper.error_of, helper.fails_with

local function sorted_keys(map)
  local keys = {}
  for k in pairs(map) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- A small model as layers would build it: a list of layers, each a table of tensors.
local function make_model()
  return {
    layers = {
      { weight = Tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }), bias = Tensor({ 0.5, -0.5 }) },
      { weight = Tensor({ { 5, 6 } }, { dtype = "float32" }) },
    },
    head = { scale = Tensor(2.0) },
    steps = Tensor({ 0 }, { dtype = "int32" }),
  }
end

describe("get_state_dict", function()
  it("names tensors by their keys, list entries 1-based", function()
    local model = make_model()
    local sd = state.get_state_dict(model)
    assert.are.same({ "head.scale", "layers.1.bias", "layers.1.weight", "layers.2.weight", "steps" }, sorted_keys(sd))
    assert.are.equal(model.layers[1].weight, sd["layers.1.weight"])
    assert.are.equal(model.head.scale, sd["head.scale"])
  end)

  it("skips private keys, functions, other values and keys that are neither strings nor integers", function()
    local t = Tensor({ 1 })
    local model = {
      w = t, _cache = Tensor({ 2 }), forward = function() end, name = "net", count = 3, flag = true,
      [Tensor({ 3 })] = { x = Tensor({ 4 }) }, [1.5] = Tensor({ 5 }), [true] = Tensor({ 6 }),
      sub = { _hidden = { v = Tensor({ 7 }) }, shown = Tensor({ 8 }) },
    }
    assert.are.same({ "sub.shown", "w" }, sorted_keys(state.get_state_dict(model)))
  end)

  it("walks keys in order, integers before strings, each table and tensor once", function()
    local shared = Tensor({ 1 })
    local block = { w = Tensor({ 2 }) }
    local model = { b = shared, a = { shared }, [2] = block, [10] = { w = Tensor({ 3 }) }, c = block }
    model.loop = model -- a cycle ends where it closes
    block.parent = model
    local sd = state.get_state_dict(model)
    -- 2 and 10 come first (numerically), so the block is named "2"; "a.1" comes before "b"
    assert.are.same({ "10.w", "2.w", "a.1" }, sorted_keys(sd))
    assert.are.equal(shared, sd["a.1"])
    assert.are.same({}, state.get_state_dict({}))
  end)

  it("fails on what is not a model", function()
    fails_with("get_state_dict: expected a model (a table holding tensors), got number", state.get_state_dict, 5)
    fails_with("get_state_dict: expected a model (a table holding tensors), got a tensor", state.get_state_dict,
      Tensor({ 1 }))
  end)
end)

describe("get_parameters", function()
  it("lists the tensors that require gradients, in name order, each once", function()
    if not Tensor.requires_grad_ then
      pending("Tensor.requires_grad_ does not exist yet (autograd)")
      return
    end
    local model = make_model()
    model.layers[1].weight:requires_grad_(true)
    model.layers[2].weight:requires_grad_(true)
    model.head.scale:requires_grad_(true)
    model.tied = model.layers[1].weight
    local params = state.get_parameters(model)
    assert.are.equal(3, #params)
    assert.are.equal(model.head.scale, params[1])
    assert.are.equal(model.layers[1].weight, params[2])
    assert.are.equal(model.layers[2].weight, params[3])
  end)

  it("is empty for a model without such tensors", function()
    assert.are.same({}, state.get_parameters({ w = Tensor({ 1 }) }))
  end)
end)

describe("load_state_dict", function()
  it("assigns every tensor in place", function()
    local model = make_model()
    local weight = model.layers[1].weight -- what an optimizer would hold
    local source = make_model()
    source.layers[1].weight = Tensor({ { 10, 20 }, { 30, 40 } }, { dtype = "float32" })
    source.head.scale = Tensor(-1.0)
    local missing, unexpected = state.load_state_dict(model, state.get_state_dict(source))
    assert.are.same({}, missing)
    assert.are.same({}, unexpected)
    assert.are.equal(weight, model.layers[1].weight)
    assert.are.same({ { 10, 20 }, { 30, 40 } }, weight:tolist())
    assert.are.equal(-1.0, model.head.scale:item())
    -- the model does not share storage with the state dict: changing one leaves the other
    source.layers[1].weight:assign(0):realize()
    assert.are.same({ { 10, 20 }, { 30, 40 } }, weight:tolist())
  end)

  it("lists every missing, unexpected and mis-shaped key in one error, assigning nothing", function()
    local model = make_model()
    local sd = state.get_state_dict(make_model())
    sd["layers.1.bias"] = nil
    sd["head.scale"] = nil
    sd["extra"] = Tensor({ 1 })
    sd["layers.2.weight"] = Tensor({ { 5 }, { 6 } }, { dtype = "float32" })
    sd["layers.1.weight"] = Tensor({ { 9, 9 }, { 9, 9 } }, { dtype = "float32" })
    assert.are.equal("load_state_dict: missing keys: head.scale, layers.1.bias; unexpected keys: extra; "
      .. "mis-shaped keys: layers.2.weight (model (1, 2), state dict (2, 1))",
      error_of(state.load_state_dict, model, sd))
    assert.are.same({ { 1, 2 }, { 3, 4 } }, model.layers[1].weight:tolist())
  end)

  it("tolerates missing and unexpected keys with strict = false, and says which", function()
    local model = make_model()
    local missing, unexpected = state.load_state_dict(model, {
      steps = Tensor({ 7 }, { dtype = "int32" }), other = Tensor({ 1 }), ["layers.1.bias"] = Tensor({ 1.0, 2.0 }),
    }, { strict = false })
    assert.are.same({ "head.scale", "layers.1.weight", "layers.2.weight" }, missing)
    assert.are.same({ "other" }, unexpected)
    assert.are.same({ 7 }, model.steps:tolist())
    assert.are.same({ 1.0, 2.0 }, model.layers[1].bias:tolist())
    fails_with("mis-shaped keys: steps (model (1,), state dict (2,))", state.load_state_dict, model,
      { steps = Tensor({ 1, 2 }, { dtype = "int32" }) }, { strict = false })
  end)

  it("refuses other dtypes unless cast = true", function()
    local model = { w = Tensor({ 1.5, 2.5 }, { dtype = "float32" }) }
    fails_with("load_state_dict: dtype mismatches: w (model float32, state dict float16) (cast = true converts)",
      state.load_state_dict, model, { w = Tensor({ 3, 4 }, { dtype = "float16" }) })
    state.load_state_dict(model, { w = Tensor({ 3.5, 4 }, { dtype = "float16" }) }, { cast = true })
    assert.are.equal("float32", model.w.dtype.name)
    assert.are.same({ 3.5, 4.0 }, model.w:tolist())
  end)

  it("copies values from another device", function()
    local model = { w = Tensor({ 1, 2 }, { dtype = "float32", device = "CPU" }) }
    state.load_state_dict(model, { w = Tensor({ 5, 6 }, { dtype = "float32", device = "EMU" }) })
    assert.are.equal("CPU", model.w.device)
    assert.are.same({ 5.0, 6.0 }, model.w:tolist())
  end)

  it("fails on bad arguments", function()
    fails_with("load_state_dict: expected a state dict (a table of tensors by name), got string",
      state.load_state_dict, {}, "sd")
    fails_with("load_state_dict: state dict entry 'w' is number, not a tensor", state.load_state_dict, {}, { w = 1 })
    fails_with("load_state_dict: state dict key 1 is a number, not a string", state.load_state_dict, {},
      { Tensor({ 1 }) })
    fails_with("load_state_dict: unknown option 'strcit'", state.load_state_dict, {}, {}, { strcit = false })
    fails_with("load_state_dict: expected a model", state.load_state_dict, nil, {})
  end)
end)

describe("a model through a safetensors file", function()
  it("saves and loads back into a fresh model", function()
    local path = os.tmpname()
    local model = make_model()
    state.safe_save(state.get_state_dict(model), path)
    local fresh = {
      layers = { { weight = Tensor.zeros(2, 2), bias = Tensor.zeros(2) }, { weight = Tensor.zeros(1, 2) } },
      head = { scale = Tensor(0.0) },
      steps = Tensor({ 9 }, { dtype = "int32" }),
    }
    state.load_state_dict(fresh, state.safe_load(path))
    os.remove(path)
    for name, t in pairs(state.get_state_dict(model)) do
      assert.are.equal(t:to_bytes(), state.get_state_dict(fresh)[name]:to_bytes(), name)
    end
  end)

  it("works from a plain lua5.4 with only require \"tcl.api.state\"", function()
    local path = os.tmpname()
    local script = os.tmpname()
    helper.write(script, ([[
package.path = %q .. "/lua/?.lua;" .. %q .. "/lua/?/init.lua;" .. package.path
package.cpath = %q .. "/lua/?.so;" .. package.cpath
local state = require "tcl.api.state"
local Tensor = require "tcl.api.tensor"
state.safe_save({ w = Tensor({ 1, 2, 3 }) }, %q)
io.write(table.concat(state.safe_load(%q).w:tolist(), ","))
]]):format(helper.root, helper.root, helper.build_dir, path, path))
    local status, out, err = helper.run("lua5.4 " .. helper.shell_quote(script))
    os.remove(script)
    os.remove(path)
    assert.are.equal(0, status, err)
    assert.are.equal("1,2,3", out)
  end)
end)
