-- spec/cli/onnx_run_spec.lua — `tcl run model.onnx --input NAME=FILE.npy` (lua/tcl/onnx/cli.lua)
-- and the .npy reader/writer it uses (lua/tcl/api/npy.lua), against files numpy writes and reads.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local torch_ref = require "spec.support.torch_ref"
local npy = require "tcl.api.npy"
local q = helper.shell_quote
local Tensor = tcl.Tensor

local SUITE = "/usr/include/onnx/backend/test/data/node"

local function run_tcl(args)
  return helper.run("timeout 120 " .. q(helper.tcl_bin) .. " " .. args)
end

local python = torch_ref.python()
local dir = helper.fresh_dir_path()
os.execute("mkdir -p " .. q(dir))

-- Runs python code (with numpy as np, `d` the spec's temp folder); returns its stdout.
local function py(code)
  local script = dir .. "/script.py"
  helper.write(script, "import numpy as np\nd = " .. string.format("%q", dir) .. "\n" .. code)
  local status, out, err = helper.run(python .. " " .. q(script))
  assert(status == 0, "python failed: " .. err)
  return out
end

describe("npy", function()
  setup(function()
    py([=[
np.save(d + '/f4.npy', (np.arange(6, dtype=np.float32).reshape(2, 3) - 2) / 4)
np.save(d + '/be_i4.npy', np.arange(5, dtype='>i4') - 2)
np.save(d + '/be_f8.npy', np.array([1.5, -2.25], dtype='>f8'))
np.save(d + '/b1.npy', np.array([[True], [False], [True]]))
np.save(d + '/f8_scalar.npy', np.float64(2.5))
np.save(d + '/u8.npy', np.arange(4, dtype=np.uint8).reshape(1, 4, 1))
np.save(d + '/i8.npy', np.array([-(2**40), 7], dtype=np.int64))
np.save(d + '/f2.npy', np.array([0.5, -3.0, 65504.0], dtype=np.float16))
np.save(d + '/fortran.npy', np.asfortranarray(np.ones((2, 3))))
np.save(d + '/c8.npy', np.ones(2, dtype=np.complex64))
np.save(d + '/v2.npy', np.ones(3, dtype=np.int16), allow_pickle=False)
with open(d + '/v2big.npy', 'wb') as f:
    np.lib.format.write_array(f, np.arange(3, dtype=np.uint16), version=(2, 0))
]=])
  end)

  it("reads the dtypes, shapes and values numpy writes (big-endian, scalars, version 2)", function()
    local cases = {
      { "f4", "float32", { 2, 3 }, { { -0.5, -0.25, 0 }, { 0.25, 0.5, 0.75 } } },
      { "be_i4", "int32", { 5 }, { -2, -1, 0, 1, 2 } },
      { "be_f8", "float64", { 2 }, { 1.5, -2.25 } },
      { "b1", "bool", { 3, 1 }, { { true }, { false }, { true } } },
      { "u8", "uint8", { 1, 4, 1 }, { { { 0 }, { 1 }, { 2 }, { 3 } } } },
      { "i8", "int64", { 2 }, { -(1 << 40), 7 } },
      { "f2", "float16", { 3 }, { 0.5, -3.0, 65504.0 } },
      { "v2", "int16", { 3 }, { 1, 1, 1 } },
      { "v2big", "uint16", { 3 }, { 0, 1, 2 } },
    }
    for _, c in ipairs(cases) do
      local t = npy.read(dir .. "/" .. c[1] .. ".npy")
      assert.are.equal(c[2], tostring(t.dtype), c[1])
      assert.are.same(c[3], t:size(), c[1])
      assert.are.same(c[4], t:tolist(), c[1])
    end
    local s = npy.read(dir .. "/f8_scalar.npy")
    assert.are.same({}, s:size())
    assert.are.equal(2.5, s:item())
  end)

  it("writes files numpy reads back equal (dtype, shape, values)", function()
    local names = { "f4", "be_i4", "be_f8", "b1", "u8", "i8", "f2", "f8_scalar" }
    for _, name in ipairs(names) do
      npy.write(dir .. "/" .. name .. "_rt.npy", npy.read(dir .. "/" .. name .. ".npy"))
    end
    local out = py([[
for n in ]] .. "['" .. table.concat(names, "', '") .. "']" .. [[:
    a = np.load(d + '/' + n + '.npy'); b = np.load(d + '/' + n + '_rt.npy')
    print(n, a.dtype.newbyteorder('=') == b.dtype, a.shape == b.shape, bool((a == b).all()), b.dtype.byteorder)
]])
    for _, name in ipairs(names) do
      local line = out:match(name .. " ([^\n]*)")
      assert.is_truthy(line, name)
      assert.is_truthy(line:match("^True True True [=|<]$"), name .. ": " .. line)
    end
  end)

  it("round-trips a tensor through a file", function()
    local t = Tensor.arange(12):reshape(3, 4):float() / 8
    npy.write(dir .. "/rt.npy", t)
    local back = npy.read(dir .. "/rt.npy")
    assert.are.same(t:tolist(), back:tolist())
    assert.are.equal("float32", tostring(back.dtype))
  end)

  it("refuses fortran order, unknown dtypes, truncated files and non-.npy files, naming the file", function()
    helper.fails_with("fortran.npy: fortran_order True is not supported", npy.read, dir .. "/fortran.npy")
    helper.fails_with("c8.npy: dtype '<c8' is not supported", npy.read, dir .. "/c8.npy")
    local whole = helper.read(dir .. "/f4.npy")
    helper.write(dir .. "/short.npy", whole:sub(1, #whole - 3))
    helper.fails_with("short.npy: truncated data: 21 bytes", npy.read, dir .. "/short.npy")
    helper.write(dir .. "/short_header.npy", whole:sub(1, 40))
    helper.fails_with("short_header.npy: truncated header", npy.read, dir .. "/short_header.npy")
    helper.write(dir .. "/text.npy", "hello")
    helper.fails_with("text.npy: not a .npy file", npy.read, dir .. "/text.npy")
    helper.fails_with("npy.write: ", npy.write, dir .. "/x.npy", "not a tensor")
    helper.fails_with("numpy has no dtype for bfloat16", npy.write, dir .. "/bf.npy", Tensor.ones(2):cast("bfloat16"))
  end)
end)

describe("tcl run", function()
  local case = SUITE .. "/test_add_bcast"
  setup(function()
    py([[
import onnx
from onnx import numpy_helper
for name in ('input_0', 'input_1', 'output_0'):
    t = onnx.TensorProto()
    with open(']] .. case .. [[/test_data_set_0/' + name + '.pb', 'rb') as f:
        t.ParseFromString(f.read())
    np.save(d + '/' + name + '.npy', numpy_helper.to_array(t))
]])
  end)

  it("prints each output's name, shape, dtype and values", function()
    local status, out, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input x=" .. q(dir .. "/input_0.npy")
      .. " --input y=" .. q(dir .. "/input_1.npy"))
    assert.are.equal("", err)
    assert.are.equal(0, status)
    assert.is_truthy(out:match("^sum %(3, 4, 5%) float32\nTensor%(%[%[%["), out)
    assert.is_truthy(out:find("shape=(3, 4, 5), dtype=float32)", 1, true), out)
  end)

  it("saves the outputs as .npy files equal to the suite's expected output", function()
    local outdir = dir .. "/out"
    local status, out, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input x=" .. q(dir .. "/input_0.npy")
      .. " --input y=" .. q(dir .. "/input_1.npy") .. " --output-dir " .. q(outdir))
    assert.are.equal("", err)
    assert.are.equal(0, status)
    assert.are.equal("sum (3, 4, 5) float32 -> " .. outdir .. "/sum.npy\n", out)
    local check = py([[
a = np.load(d + '/out/sum.npy'); b = np.load(d + '/output_0.npy')
print(a.dtype == b.dtype, a.shape == b.shape, bool(np.allclose(a, b, rtol=1e-6, atol=0)))
]])
    assert.are.equal("True True True\n", check)
  end)

  it("runs on the device --device names", function()
    local outdir = dir .. "/out_emu"
    local status, out, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input x=" .. q(dir .. "/input_0.npy")
      .. " --input y=" .. q(dir .. "/input_1.npy") .. " --device EMU -o " .. q(outdir))
    assert.are.equal("", err)
    assert.are.equal(0, status, out)
    local check = py([[
a = np.load(d + '/out_emu/sum.npy'); b = np.load(d + '/output_0.npy')
print(bool(np.allclose(a, b, rtol=1e-6, atol=0)))
]])
    assert.are.equal("True\n", check)
  end)

  it("gives usage errors (status 2) that list the model's inputs, and load errors (status 1)", function()
    local status, _, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input x=" .. q(dir .. "/input_0.npy"))
    assert.are.equal(2, status)
    assert.is_truthy(err:find("tcl run: missing --input for y; the model's inputs:\n  x: float32 [3, 4, 5]\n"
      .. "  y: float32 [5]", 1, true), err)
    status, _, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input z=" .. q(dir .. "/input_0.npy"))
    assert.are.equal(2, status)
    assert.is_truthy(err:find("tcl run: the model has no input 'z'", 1, true), err)
    status, _, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input x")
    assert.are.equal(2, status)
    assert.is_truthy(err:find("--input takes NAME=FILE.npy, not 'x'", 1, true), err)
    status, _, err = run_tcl("run")
    assert.are.equal(2, status)
    assert.is_truthy(err:find("tcl run: no model given", 1, true), err)
    status, _, err = run_tcl("run " .. q(dir .. "/missing.onnx"))
    assert.are.equal(1, status)
    assert.is_truthy(err:find("tcl run: tcl.onnx.load: cannot open", 1, true), err)
    status, _, err = run_tcl("run " .. q(case .. "/model.onnx") .. " --input x=" .. q(dir .. "/fortran.npy")
      .. " --input y=" .. q(dir .. "/input_1.npy"))
    assert.are.equal(1, status)
    assert.is_truthy(err:find("input 'x': npy.read: ", 1, true), err)
    local help_status, help = run_tcl("run --help")
    assert.are.equal(0, help_status)
    assert.is_truthy(help:find("--output-dir DIR", 1, true))
  end)

  it("prints and saves a sequence output element by element", function()
    -- a model whose node (a handler this spec registers) returns a sequence of two tensors
    py([[
import onnx
from onnx import helper, TensorProto as T
vi = helper.make_tensor_value_info
seq = helper.make_tensor_sequence_value_info("s", T.FLOAT, None)
node = helper.make_node("TwoOf", ["x"], ["s"], domain="test.cli")
g = helper.make_graph([node], "g", [vi("x", T.FLOAT, [2])], [seq])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("test.cli", 1)])
onnx.save(m, d + "/seq.onnx")
np.save(d + "/x2.npy", np.array([1.5, -2], dtype=np.float32))
]])
    local registry = require "tcl.onnx.ops"
    local cli = require "tcl.onnx.cli"
    registry.handlers["test.cli.TwoOf"] = function(_, node)
      return { kind = "sequence", elem_type = "float32", node.inputs[1], node.inputs[1] * 2 }
    end
    local printed = {}
    local out = { write = function(self, ...) for _, text in ipairs({ ... }) do printed[#printed + 1] = text end
      return self end }
    local ok, status = pcall(cli.main, { dir .. "/seq.onnx", "--input", "x=" .. dir .. "/x2.npy", "-o", dir .. "/seq" },
      out)
    registry.handlers["test.cli.TwoOf"] = nil
    assert(ok, status)
    assert.are.equal(0, status)
    assert.are.equal("s sequence of 2\ns[1] (2) float32 -> " .. dir .. "/seq/s_1.npy\ns[2] (2) float32 -> " .. dir
      .. "/seq/s_2.npy\n", table.concat(printed))
    assert.are.same({ 3, -4 }, npy.read(dir .. "/seq/s_2.npy"):tolist())
  end)

  teardown(function()
    os.execute("rm -rf " .. q(dir))
  end)
end)
