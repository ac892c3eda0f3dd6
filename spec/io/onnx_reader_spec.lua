-- spec/io/onnx_reader_spec.lua — the ONNX protobuf reader (lua/tcl/onnx/wire.lua, schema.lua,
-- tensor_proto.lua): field numbers against onnx.proto, decodes of suite models against
-- python3-onnx's parse, weights viewed in the file's mapping, the model object's description,
-- and truncated or bit-flipped files failing with errors that name the file, never crashing.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local torch_ref = require "spec.support.torch_ref"
local json = require "tcl.api.json"
local wire = require "tcl.onnx.wire"
local schema = require "tcl.onnx.schema"
local tensor_proto = require "tcl.onnx.tensor_proto"
local Tensor = tcl.Tensor
local q = helper.shell_quote

local PROTO = "/usr/include/onnx/onnx.proto"
local DATA_PROTO = "/usr/lib/python3/dist-packages/onnx/onnx-data.proto"
local SUITE = "/usr/include/onnx/backend/test/data"

-- The fields of every message in a .proto file: { ["TypeProto.Tensor"] = { name = {number,
-- type, label} } }. Nested messages get dotted names; oneof blocks add no name; enums are skipped.
local function proto_fields(path)
  local messages, stack = {}, {}
  for line in io.lines(path) do
    line = line:gsub("//.*", "")
    local kind, name = line:match("^%s*(%a+)%s+([%w_]+)%s*{")
    if kind == "message" or kind == "enum" or kind == "oneof" then
      stack[#stack + 1] = { kind = kind, name = name }
    elseif line:match("^%s*}") then
      stack[#stack] = nil
    elseif #stack > 0 and stack[#stack].kind ~= "enum" then
      local label, ftype, fname, number = line:match("^%s*(%a*)%s*([%w_%.]+)%s+([%w_]+)%s*=%s*(%d+)")
      if fname and label ~= "reserved" and ftype ~= "reserved" then
        if label ~= "optional" and label ~= "repeated" and label ~= "required" then label, ftype, fname, number =
          "", line:match("^%s*([%w_%.]+)%s+([%w_]+)%s*=%s*(%d+)") end
        local names = {}
        for _, s in ipairs(stack) do if s.kind == "message" then names[#names + 1] = s.name end end
        local message = table.concat(names, ".")
        messages[message] = messages[message] or {}
        messages[message][fname] = { number = tonumber(number), type = ftype, label = label }
      end
    end
  end
  return messages
end

local SCALAR_KIND = {
  int64 = "int", int32 = "int", uint64 = "uint", float = "float", double = "double", string = "string",
  bytes = "bytes", bool = "bool",
}

describe("onnx reader", function()
  describe("schema", function()
    it("has every field number, label and type of onnx.proto and onnx-data.proto", function()
      local fields = proto_fields(PROTO)
      for name, f in pairs(proto_fields(DATA_PROTO)) do fields[name] = fields[name] or f end
      local enums = { AttributeType = true, DataType = true, DataLocation = true }
      local checked = 0
      for _, message in pairs(schema) do
        if type(message) == "table" and message.list then
          local proto = fields[message.name]
          assert.is_truthy(proto, "no message " .. message.name .. " in onnx.proto")
          for _, f in ipairs(message.list) do
            local name, number, label = f[1], f[2], f[4]
            local p = proto[name]
            assert.is_truthy(p, message.name .. "." .. name .. " is not in onnx.proto")
            assert.are.equal(p.number, number, message.name .. "." .. name)
            assert.are.equal(p.label == "repeated", label == "repeated", message.name .. "." .. name .. " repeated")
            local want = SCALAR_KIND[p.type] or (enums[p.type] and "int") or "message"
            local got = message.fields[number].kind
            if got == "blob" then got = "bytes" end
            assert.are.equal(want, got, message.name .. "." .. name .. " (" .. p.type .. ")")
            checked = checked + 1
          end
        end
      end
      assert.is_true(checked > 90, "checked only " .. checked .. " fields")
    end)
  end)

  describe("decoding suite models", function()
    local cases = { "node/test_constant", "node/test_if", "node/test_reshape_negative_dim",
      "pytorch-converted/test_Conv2d_groups", "simple/test_sign_model", "node/test_cast_FLOAT_to_FLOAT16",
      "node/test_constantofshape_int_zeros", "node/test_range_float_type_positive_delta_expanded" }
    local python_says
    setup(function()
      local python = assert(torch_ref.python())
      local script = os.tmpname()
      helper.write(script, [[
import json, math, sys, onnx
from onnx import numpy_helper

def num(v):
    v = float(v)
    if math.isnan(v): return "nan"
    if math.isinf(v): return "inf" if v > 0 else "-inf"
    return v

def tensor(t):
    a = numpy_helper.to_array(t)
    if a.dtype == bool: vals = [bool(x) for x in a.flatten()]
    elif a.dtype.kind in 'iu': vals = [int(x) for x in a.flatten()]
    else: vals = [num(x) for x in a.flatten()]
    return {"name": t.name, "dims": list(t.dims), "data_type": t.data_type, "values": vals}

def graph(g):
    nodes = []
    for n in g.node:
        attrs = {}
        for a in n.attribute:
            if a.type == a.FLOAT: v = num(a.f)
            elif a.type == a.INT: v = a.i
            elif a.type == a.STRING: v = a.s.decode('latin-1')
            elif a.type == a.INTS: v = list(a.ints)
            elif a.type == a.FLOATS: v = [num(x) for x in a.floats]
            elif a.type == a.TENSOR: v = tensor(a.t)
            elif a.type == a.GRAPH: v = graph(a.g)
            else: v = "?"
            attrs[a.name] = v
        nodes.append({"op_type": n.op_type, "input": list(n.input), "output": list(n.output), "attrs": attrs})
    return {"nodes": nodes, "initializers": [tensor(t) for t in g.initializer],
            "inputs": [i.name for i in g.input], "outputs": [o.name for o in g.output]}

out = {}
for case in sys.argv[2:]:
    m = onnx.load(sys.argv[1] + "/" + case + "/model.onnx")
    out[case] = {"graph": graph(m.graph), "opset": [[o.domain, o.version] for o in m.opset_import],
                 "ir_version": m.ir_version}
print(json.dumps(out))
]])
      local status, out, err = helper.run(python .. " " .. q(script) .. " " .. q(SUITE) .. " "
        .. table.concat(cases, " "))
      os.remove(script)
      assert(status == 0, err)
      python_says = json.decode(out)
    end)

    local function same_number(a, b, what)
      if b == "nan" then assert.is_true(a ~= a, what) return end
      if b == "inf" then b = math.huge elseif b == "-inf" then b = -math.huge end
      if type(a) == "boolean" then assert.are.equal(b, a, what) return end
      assert.is_true(a == b, string.format("%s: %s ~= %s", what, tostring(a), tostring(b)))
    end

    local function same_tensor(proto, reader, want, what)
      assert.are.equal(want.name, proto.name or "", what)
      assert.are.same(want.dims, proto.dims or {}, what)
      assert.are.equal(want.data_type, proto.data_type, what)
      local values = tensor_proto.to_lua(proto, reader)
      assert.are.equal(#want.values, #values, what)
      for i, v in ipairs(want.values) do same_number(values[i], v, what .. "[" .. i .. "]") end
      -- and the tcl tensor made from it holds the same values
      local t = tensor_proto.to_tensor(proto, reader, function(fmt, ...) error(string.format(fmt, ...)) end)
      local got = t:flatten():tolist()
      if #want.dims == 0 then got = { t:item() } end
      if tostring(t.dtype) ~= "float16" then
        for i, v in ipairs(want.values) do same_number(got[i], v, what .. " tensor[" .. i .. "]") end
      end
    end

    local function same_graph(g, reader, want, what)
      assert.are.equal(#want.nodes, #(g.node or {}), what .. " nodes")
      for i, wn in ipairs(want.nodes) do
        local n = g.node[i]
        local where = what .. " node " .. i
        assert.are.equal(wn.op_type, n.op_type, where)
        assert.are.same(wn.input, n.input or {}, where)
        assert.are.same(wn.output, n.output or {}, where)
        local count = 0
        for _, a in ipairs(n.attribute or {}) do
          count = count + 1
          local wa = wn.attrs[a.name]
          local at = where .. " attribute " .. a.name
          assert.is_not_nil(wa, at)
          if a.type == 1 then same_number(a.f, wa, at)
          elseif a.type == 2 then assert.are.equal(wa, a.i, at)
          elseif a.type == 3 then assert.are.equal(wa, a.s, at)
          elseif a.type == 7 then assert.are.same(wa, a.ints or {}, at)
          elseif a.type == 6 then
            for k, v in ipairs(wa) do same_number(a.floats[k], v, at) end
          elseif a.type == 4 then same_tensor(a.t, reader, wa, at)
          elseif a.type == 5 then same_graph(a.g, reader, wa, at)
          end
        end
        local want_count = 0
        for _ in pairs(wn.attrs) do want_count = want_count + 1 end
        assert.are.equal(want_count, count, where .. " attribute count")
      end
      assert.are.equal(#want.initializers, #(g.initializer or {}), what .. " initializers")
      for i, wt in ipairs(want.initializers) do
        same_tensor(g.initializer[i], reader, wt, what .. " initializer " .. i)
      end
      local inputs, outputs = {}, {}
      for i, vi in ipairs(g.input or {}) do inputs[i] = vi.name end
      for i, vi in ipairs(g.output or {}) do outputs[i] = vi.name end
      assert.are.same(want.inputs, inputs, what .. " inputs")
      assert.are.same(want.outputs, outputs, what .. " outputs")
    end

    it("gives the op types, attributes, initializers and opsets python3-onnx reads", function()
      for _, case in ipairs(cases) do
        local reader = wire.open(SUITE .. "/" .. case .. "/model.onnx")
        local m = reader:decode(schema.ModelProto)
        local want = python_says[case]
        assert.are.equal(want.ir_version, m.ir_version, case)
        for i, o in ipairs(want.opset) do
          assert.are.equal(o[1], m.opset_import[i].domain or "", case)
          assert.are.equal(o[2], m.opset_import[i].version, case)
        end
        same_graph(m.graph, reader, want.graph, case)
      end
    end)
  end)

  describe("weights", function()
    it("are viewed in the file's mapping when 64-byte aligned, copied otherwise; inline and external data", function()
      local dir = helper.fresh_dir_path()
      os.execute("mkdir -p " .. q(dir))
      local python = assert(torch_ref.python())
      local script = dir .. "/make.py"
      helper.write(script, [[
import numpy as np, onnx, sys
from onnx import helper, numpy_helper, TensorProto
d = sys.argv[1]
w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 4, "w")
b = numpy_helper.from_array(np.array([1, -2, 3], dtype=np.int64), "b")
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [x], [y], [w, b])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, d + "/inline.onnx")
onnx.save(m, d + "/external.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
          location="weights.bin", size_threshold=0)
]])
      local status, _, err = helper.run(python .. " " .. q(script) .. " " .. q(dir))
      assert.are.equal(0, status, err)
      for _, name in ipairs({ "inline", "external" }) do
        local model = tcl.onnx.load(dir .. "/" .. name .. ".onnx")
        local w = model.graph.initializers.w
        assert.are.same({ { 0, 0.25, 0.5, 0.75 }, { 1, 1.25, 1.5, 1.75 }, { 2, 2.25, 2.5, 2.75 } }, w:tolist(), name)
        assert.are.same({ 1, -2, 3 }, model.graph.initializers.b:tolist(), name)
        local y = model(Tensor.zeros(3, 4))
        assert.are.same(w:tolist(), y:tolist(), name)
      end
      -- a CPU buffer needs 64-byte alignment: weights at such an offset are views of the file, others
      -- one copy. External data from onnx 1.12 is packed: w at 0 (viewed), b at 48 (copied). EMU's
      -- buffers need only the element size: both are views there.
      local external = tcl.onnx.load(dir .. "/external.onnx", { device = "CPU" })
      assert.is_true(external.graph.viewed.w)
      assert.is_falsy(external.graph.viewed.b)
      local on_emu = tcl.onnx.load(dir .. "/external.onnx", { device = "EMU" })
      assert.is_true(on_emu.graph.viewed.w)
      assert.is_true(on_emu.graph.viewed.b)
      assert.are.same({ 1, -2, 3 }, on_emu.graph.initializers.b:tolist())
      local inline = tcl.onnx.load(dir .. "/inline.onnx", { device = "CPU" })
      local reader = wire.open(dir .. "/inline.onnx")
      local decoded = reader:decode(schema.ModelProto)
      for _, init in ipairs(decoded.graph.initializer) do
        assert.are.equal(init.raw_data.offset % 64 == 0, inline.graph.viewed[init.name] == true, init.name)
      end
      -- external data that leaves the model's folder is refused
      local f = io.open(dir .. "/external.onnx", "rb")
      local bytes = f:read("a")
      f:close()
      helper.write(dir .. "/escape.onnx", (bytes:gsub("weights%.bin", "../x/ab.bin")))
      helper.fails_with("leaves the model's folder", tcl.onnx.load, dir .. "/escape.onnx")
      os.execute("rm -rf " .. q(dir))
    end)
  end)

  describe("the model object", function()
    it("describes inputs, outputs and opset, runs by position and by name, and names unknown op types", function()
      local model = tcl.onnx.load(SUITE .. "/node/test_reshape_negative_dim/model.onnx")
      assert.are.equal(14, model.opset)
      assert.are.equal(2, #model.inputs)
      assert.are.equal("data", model.inputs[1].name)
      assert.are.equal("float32", model.inputs[1].type.dtype)
      assert.are.same({ 2, 3, 4 }, model.inputs[1].type.shape)
      assert.are.equal("reshaped", model.outputs[1].name)
      local x = Tensor.arange(24):float():reshape(2, 3, 4)
      local shape = Tensor({ 2, -1, 2 }):cast("int64")
      local y = model(x, shape)
      assert.are.same({ 2, 6, 2 }, y:size())
      local by_name = model:run({ data = x, shape = shape })
      assert.are.same(y:tolist(), by_name.reshaped:tolist())
      assert.are.same(y:tolist(), model({ data = x, shape = shape }).reshaped:tolist())
      helper.fails_with("input 'shape' is missing", model, { data = x })
      helper.fails_with("expected 2 inputs (data, shape), got 1", model, x)
      helper.fails_with("input 'data' must be float32, got int64", model, x:cast("int64"), shape)
      helper.fails_with("tcl.onnx.load: path must be a string", tcl.onnx.load, 3)
    end)

    it("runs on the device it is loaded for, handler-made constants included", function()
      -- y = x + Constant([1, 2, 3]) + ConstantOfShape(Shape(x), 0.5): a tensor attribute made at load
      -- and one a handler makes at run time
      local dir = helper.fresh_dir_path()
      os.execute("mkdir -p " .. q(dir))
      helper.write(dir .. "/make.py", [[
import onnx, sys
from onnx import helper, TensorProto as T
vi = helper.make_tensor_value_info
nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", T.FLOAT, [3], [1, 2, 3])),
         helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("ConstantOfShape", ["s"], ["h"], value=helper.make_tensor("h", T.FLOAT, [1], [0.5])),
         helper.make_node("Add", ["x", "c"], ["t"]), helper.make_node("Add", ["t", "h"], ["y"])]
g = helper.make_graph(nodes, "g", [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [2, 3])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1] + "/dev.onnx")
]])
      local status, _, err = helper.run(assert(torch_ref.python()) .. " " .. q(dir .. "/make.py") .. " " .. q(dir))
      assert.are.equal(0, status, err)
      local path = dir .. "/dev.onnx"
      local model = tcl.onnx.load(path, { device = "emu" })
      assert.are.equal("EMU", model.device)
      local x = Tensor({ { 0, 10, 20 }, { 30, 40, 50 } }):float()
      local y = model(x:to("EMU"))
      assert.are.equal("EMU", y.device)
      assert.are.same({ { 1.5, 12.5, 23.5 }, { 31.5, 42.5, 53.5 } }, y:tolist())
      assert.are.same(y:tolist(), tcl.onnx.load(path, { device = "CPU" })(x:to("CPU")):tolist())
      helper.fails_with("input 'x' is on CPU, the model runs on EMU", model, x:to("CPU"))
      os.execute("rm -rf " .. q(dir))
      helper.fails_with("tcl.onnx.load: unknown option 'devcie' (options: device)", tcl.onnx.load, path,
        { devcie = "EMU" })
      helper.fails_with("tcl.onnx.load: unknown device 'GPU9'", tcl.onnx.load, path, { device = "GPU9" })
    end)
  end)

  describe("graph checks", function()
    it("refuse a node that reads a value made later, and name the node of a handler's error", function()
      local dir = helper.fresh_dir_path()
      os.execute("mkdir -p " .. q(dir))
      local script = dir .. "/make.py"
      helper.write(script, [[
import onnx, sys
from onnx import helper, TensorProto as T
d = sys.argv[1]
vi = helper.make_tensor_value_info
x, y = vi("x", T.FLOAT, [2, 3]), vi("y", T.FLOAT, [2, 3])
nodes = [helper.make_node("Identity", ["t"], ["y"], name="late"), helper.make_node("Identity", ["x"], ["t"])]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, d + "/unsorted.onnx")
shape = helper.make_tensor("shape", T.INT64, [2], [4, 4])
nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="bad_reshape")]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [shape]), opset_imports=[helper.make_opsetid("", 13)])
onnx.save(m, d + "/bad_reshape.onnx")
]])
      local status, _, err = helper.run(assert(torch_ref.python()) .. " " .. q(script) .. " " .. q(dir))
      assert.are.equal(0, status, err)
      helper.fails_with("node 0 'late' (Identity): input 0 't' is not made by an earlier node", tcl.onnx.load,
        dir .. "/unsorted.onnx")
      local model = tcl.onnx.load(dir .. "/bad_reshape.onnx")
      local message = helper.error_of(model, Tensor.zeros(2, 3))
      assert.is_truthy(message:match("^tcl%.onnx: .*bad_reshape%.onnx: node 0 'bad_reshape' %(Reshape%): "), message)
      os.execute("rm -rf " .. q(dir))
    end)
  end)

  describe("host values", function()
    it("let shape arithmetic on constants and Shape run without reading a tensor to the host", function()
      local buffers = require "tcl.schedule.buffers"
      local dir = helper.fresh_dir_path()
      os.execute("mkdir -p " .. q(dir))
      helper.write(dir .. "/make.py", [[
import onnx, sys
from onnx import helper, TensorProto as T
vi = helper.make_tensor_value_info
consts = [helper.make_tensor("i0", T.INT64, [], [0]), helper.make_tensor("m1", T.INT64, [1], [-1]),
          helper.make_tensor("ax", T.INT64, [1], [0])]
nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
         helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
         helper.make_node("Reshape", ["x", "shape"], ["y"])]
g = helper.make_graph(nodes, "g", [vi("x", T.FLOAT, [2, 3, 4])], [vi("y", T.FLOAT, [2, 12])], consts)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1] + "/chain.onnx")
g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                      [vi("x", T.FLOAT, [2, 3, 4]), vi("shape", T.INT64, [2])], [vi("y", T.FLOAT, [2, 12])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1] + "/input_shape.onnx")
]])
      local status, _, err = helper.run(assert(torch_ref.python()) .. " " .. q(dir .. "/make.py") .. " " .. q(dir))
      assert.are.equal(0, status, err)
      local x = Tensor.arange(24):float():reshape(2, 3, 4):realize()
      local function host_reads(fn)
        local reads, saved = 0, buffers.read_hook
        buffers.read_hook = function(...)
          reads = reads + 1
          if saved then return saved(...) end
        end
        local ok, result = pcall(fn)
        buffers.read_hook = saved
        assert(ok, result)
        return reads, result
      end
      local chain = tcl.onnx.load(dir .. "/chain.onnx")
      local reads, y = host_reads(function() return chain(x) end)
      assert.are.equal(0, reads)
      assert.are.same({ 2, 12 }, y:size())
      -- a shape that is a model input is read once (the hook does see reads)
      local from_input = tcl.onnx.load(dir .. "/input_shape.onnx")
      reads, y = host_reads(function() return from_input(x, Tensor({ 2, 12 }):cast("int64")) end)
      assert.are.equal(1, reads)
      assert.are.same({ 2, 12 }, y:size())
      os.execute("rm -rf " .. q(dir))
    end)
  end)

  describe("subgraphs", function()
    it("run by position or by name and see the enclosing graph's values", function()
      local registry = require "tcl.onnx.ops"
      local dir = helper.fresh_dir_path()
      os.execute("mkdir -p " .. q(dir))
      local script = dir .. "/make.py"
      helper.write(script, [[
import onnx, sys
from onnx import helper, TensorProto as T
d = sys.argv[1]
vi = helper.make_tensor_value_info
body = helper.make_graph([helper.make_node("Add", ["x", "k"], ["s"])], "body", [vi("k", T.FLOAT, [3])],
                         [vi("s", T.FLOAT, [3])])
node = helper.make_node("RunBody", ["x"], ["a", "b"], domain="test.spec", body=body)
g = helper.make_graph([node], "g", [vi("x", T.FLOAT, [3])], [vi("a", T.FLOAT, [3]), vi("b", T.FLOAT, [3])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("test.spec", 1)])
onnx.save(m, d + "/sub.onnx")
]])
      local status, _, err = helper.run(assert(torch_ref.python()) .. " " .. q(script) .. " " .. q(dir))
      assert.are.equal(0, status, err)
      helper.fails_with("unsupported ONNX op types: test.spec.RunBody (1 node)", tcl.onnx.load, dir .. "/sub.onnx")
      registry.handlers["test.spec.RunBody"] = function(ctx, node)
        local body = node.attrs.body
        local ten = Tensor({ 10, 20, 30 }):float()
        return body:run(ctx, { ten })[1], body:run(ctx, { k = ten * 2 })[1]
      end
      local ok, a, b = pcall(function()
        local model = tcl.onnx.load(dir .. "/sub.onnx")
        return model(Tensor({ 1, 2, 3 }):float())
      end)
      registry.handlers["test.spec.RunBody"] = nil
      os.execute("rm -rf " .. q(dir))
      assert(ok, a)
      assert.are.same({ 11, 22, 33 }, a:tolist())
      assert.are.same({ 21, 42, 63 }, b:tolist())
    end)
  end)

  describe("hostile files", function()
    local fuzz = helper.fuzz { name = "onnx reader fuzz", seed = 3501, count = 300 }
    local function accepted_error(message)
      return message:match("^tcl%.onnx%.load: ") or message:match("^tcl%.onnx: ")
    end

    it("fail with an error naming the file for every truncation and for bit flips", fuzz:reporting(function()
      local path = os.tmpname()
      local function try(data, what)
        helper.write(path, data)
        local ok, err = pcall(tcl.onnx.load, path)
        if not ok then
          assert.is_truthy(accepted_error(tostring(err)), what .. ": " .. tostring(err))
          assert.is_truthy(tostring(err):find(path, 1, true), what .. ": the error does not name the file: " .. err)
        end
        return ok, err
      end
      local state = fuzz.seed
      local function random(n) -- a small LCG: reproducible from the seed alone
        state = (state * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
        return (state >> 17) % n + 1
      end
      -- subgraphs and attributes; a tensor attribute; inputs with shapes (tensors in raw_data)
      local bytes
      for _, source in ipairs({ "node/test_if", "node/test_constant", "pytorch-converted/test_Conv2d_groups" }) do
        bytes = helper.read(SUITE .. "/" .. source .. "/model.onnx")
        local failures = 0
        for cut = 1, #bytes - 1 do
          if not try(bytes:sub(1, cut), source .. " truncated at " .. cut) then failures = failures + 1 end
        end
        assert.is_true(failures > #bytes / 2, source .. ": most truncations must fail")
        for i = 1, fuzz.count do
          local at, bit = random(#bytes), random(8) - 1
          local flipped = bytes:sub(1, at - 1) .. string.char(bytes:byte(at) ~ (1 << bit)) .. bytes:sub(at + 1)
          try(flipped, string.format("%s case %d: bit %d of byte %d flipped", source, i, bit, at - 1))
        end
      end
      -- the message says what and where
      helper.write(path, bytes:sub(1, 20))
      local _, err = pcall(tcl.onnx.load, path)
      local where = "^tcl%.onnx%.load: " .. path:gsub("%p", "%%%0") .. ": [%w%.]+ at byte %d+: "
      assert.is_truthy(tostring(err):match(where), err)
      os.remove(path)
    end))

    it("limits nesting depth", function()
      -- GraphProto.node -> NodeProto.attribute -> AttributeProto.g -> GraphProto ... 100 deep
      local function len_field(number, payload)
        local key, n, v = string.char((number << 3) | 2), #payload, ""
        repeat
          local b = n & 0x7f
          n = n >> 7
          v = v .. string.char(n > 0 and (b | 0x80) or b)
        until n == 0
        return key .. v .. payload
      end
      local graph = ""
      for _ = 1, 40 do
        graph = len_field(1, len_field(5, len_field(6, graph))) -- node { attribute { g { ... } } }
      end
      local data = len_field(7, graph)
      local ok, err = pcall(function() return wire.from_string(data, "deep.onnx"):decode(schema.ModelProto) end)
      assert.is_false(ok)
      assert.is_truthy(tostring(err):find("nested deeper than " .. wire.MAX_DEPTH, 1, true), err)
    end)
  end)
end)
