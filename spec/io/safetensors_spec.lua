-- spec/io/safetensors_spec.lua — tcl.api.state's safetensors files (safe_save, safe_load) and the
-- JSON reader and writer under them (tcl.api.json). Files are checked byte for byte against
-- layouts built here by hand (the reference writer's own test vectors among them), hand-built
-- files are read back exactly, every malformed file is an error with its message, and where
-- python3 with torch is installed a small independent Python reader and writer cross-check.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local state = require "tcl.api.state"
local json = require "tcl.api.json"
local buffers = require "tcl.schedule.buffers"
local Tensor = tcl.Tensor

local error_of, fails_with = helper.error_of, helper.fails_with

local pack_all = helper.pack_all

-- A safetensors file as the format lays it out: the header's length, the header, the data.
local function layout(header, data)
  return string.pack("<I8", #header) .. header .. (data or "")
end

local paths = {}
local function temp_path()
  local path = os.tmpname()
  paths[#paths + 1] = path
  return path
end
local function temp_file(contents)
  local path = temp_path()
  helper.write(path, contents)
  return path
end
teardown(function()
  for _, path in ipairs(paths) do os.remove(path) end
end)

describe("json", function()
  it("decodes every kind of value", function()
    local v = json.decode(' {"a": [1, -2.5e1, "x\\u00e9\\ud83d\\ude00\\n\\"", true, false, null], "b": {}} ')
    assert.are.same({ 1, -25.0, "x\u{e9}\u{1F600}\n\"", true, false, json.null }, v.a)
    assert.are.equal("integer", math.type(v.a[1]))
    assert.are.equal("float", math.type(v.a[2]))
    assert.are.same({}, v.b)
    assert.are.equal(9007199254740993, json.decode("9007199254740993")) -- exact as an integer
    assert.are.equal("float", math.type(json.decode("123456789012345678901234567890")))
  end)

  it("rejects malformed text, naming the byte", function()
    local cases = {
      { "", "json: expected a value, got the end of the text at byte 1" },
      { "[1,]", "json: expected a value, got ']' at byte 4" },
      { '{"a":1,}', "json: expected a string key, got '}' at byte 8" },
      { '{"a" 1}', "json: expected ':' after a key, got '1' at byte 6" },
      { "[1 2]", "json: expected ',' or ']' in an array, got '2' at byte 4" },
      { "01", "json: a number must not have leading zeros at byte 1" },
      { "1.", "json: expected digits after the decimal point at byte 2" },
      { "1e+", "json: expected digits in the exponent at byte 2" },
      { '"\\x"', "json: invalid escape '\\x' at byte 3" },
      { '"a\nb"', "json: control character 0x0a in a string (escape it) at byte 3" },
      { '"abc', "json: unterminated string at byte 1" },
      { '{"a":1,"a":2}', 'json: duplicate key "a" at byte 8' },
      { "nul", "json: expected a value, got 'n' at byte 1" },
      { "[1] x", "json: unexpected 'x' after the value at byte 5" },
      { "\255", "json: invalid UTF-8 at byte 1" },
      { "// c\n1", "json: expected a value, got '/' at byte 1" },
      { string.rep("[", 600) .. string.rep("]", 600), "json: nested deeper than 512 arrays and objects at byte 513" },
    }
    for _, case in ipairs(cases) do assert.are.equal(case[2], error_of(json.decode, case[1])) end
  end)

  it("encodes as serde_json does, keys sorted", function()
    assert.are.equal('{"a":[1,2],"b":"q\\"\\\\\\u0001\\n\\t","c":{},"d":true,"e":null}',
      json.encode({ b = "q\"\\\1\n\t", a = { 1, 2 }, c = {}, d = true, e = json.null }))
    assert.are.equal('"\u{e9}/"', json.quote("\u{e9}/"))
    fails_with("json.encode: object keys must be strings", json.encode, { [true] = 1 })
    fails_with("json.encode: inf is not a JSON number", json.encode, math.huge)
  end)
end)

describe("safe_save", function()
  it("writes the reference writer's bytes (its own test vectors)", function()
    -- safetensors' test_serialization: "attn.0", F32, shape [1, 2, 3], values 0..5
    local header = '{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}'
    assert.are.equal(64, #header) -- a multiple of 8: no padding
    local path = temp_path()
    state.safe_save({ ["attn.0"] = Tensor({ { { 0, 1, 2 }, { 3, 4, 5 } } }, { dtype = "float32" }) }, path)
    assert.are.equal(layout(header, pack_all("<f", { 0, 1, 2, 3, 4, 5 })), helper.read(path))
    -- test_serialization_forced_alignement: the header padded with spaces to 72 bytes
    state.safe_save({ attn0 = Tensor.arange(6, { dtype = "float32" }):reshape(1, 1, 2, 3) }, path)
    assert.are.equal(layout('{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}       ',
      pack_all("<f", { 0, 1, 2, 3, 4, 5 })), helper.read(path))
    -- test_empty, without and with metadata
    state.safe_save({}, path)
    assert.are.equal(string.char(8, 0, 0, 0, 0, 0, 0, 0) .. "{}      ", helper.read(path))
    state.safe_save({}, path, { framework = "pt" })
    assert.are.equal(layout('{"__metadata__":{"framework":"pt"}}     '), helper.read(path))
  end)

  it("orders tensors by alignment, then name, and escapes names", function()
    local path = temp_path()
    state.safe_save({
      b = Tensor({ 1, 2 }, { dtype = "uint8" }),
      a = Tensor({ true }),
      ["w\"q"] = Tensor({ 1.5 }, { dtype = "float64" }),
      c = Tensor({ 7 }, { dtype = "int32" }),
      d = Tensor({ -1 }, { dtype = "int64" }),
      e = Tensor({ 1 }, { dtype = "float16" }),
      f = Tensor({ 2 }, { dtype = "bfloat16" }),
    }, path, { z = "last", a = "first" })
    local header = '{"__metadata__":{"a":"first","z":"last"},'
      .. '"d":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},'
      .. '"w\\"q":{"dtype":"F64","shape":[1],"data_offsets":[8,16]},'
      .. '"c":{"dtype":"I32","shape":[1],"data_offsets":[16,20]},'
      .. '"f":{"dtype":"BF16","shape":[1],"data_offsets":[20,22]},'
      .. '"e":{"dtype":"F16","shape":[1],"data_offsets":[22,24]},'
      .. '"b":{"dtype":"U8","shape":[2],"data_offsets":[24,26]},'
      .. '"a":{"dtype":"BOOL","shape":[1],"data_offsets":[26,27]}}'
    header = header .. string.rep(" ", (8 - #header % 8) % 8)
    local data = string.pack("<i8", -1) .. string.pack("<d", 1.5) .. string.pack("<i4", 7) .. "\0\64" .. "\0\60"
      .. "\1\2" .. "\1"
    assert.are.equal(layout(header, data), helper.read(path))
  end)

  it("realizes lazy tensors and writes views in row-major order", function()
    local path = temp_path()
    local x = Tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "int16" })
    state.safe_save({ t = x:transpose(1, 2) + 1 }, path)
    local header = '{"t":{"dtype":"I16","shape":[3,2],"data_offsets":[0,12]}}'
    header = header .. string.rep(" ", (8 - #header % 8) % 8)
    assert.are.equal(layout(header, pack_all("<i2", { 2, 5, 3, 6, 4, 7 })), helper.read(path))
  end)

  it("fails on what it cannot write", function()
    fails_with("safe_save: state dict key 1 is a number, not a string", state.safe_save, { Tensor({ 1 }) }, temp_path())
    fails_with("safe_save: state dict entry 'a' is number, not a tensor", state.safe_save, { a = 1 }, temp_path())
    fails_with("safe_save: metadata must map strings to strings", state.safe_save, {}, temp_path(), { a = 1 })
    fails_with("safe_save: path must be a string", state.safe_save, {}, 5)
    fails_with("safe_save: cannot write '/nonexistent/dir/x'", state.safe_save, {}, "/nonexistent/dir/x")
  end)

  it("replaces the target atomically: its mode kept, a link written through, no shared temporary", function()
    -- issue 33 item 6
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -m 700 " .. dir))
    finally(function() os.execute("rm -rf " .. dir) end)
    local path = dir .. "/x.safetensors"
    helper.write(path .. ".tmp", "someone else's file")
    helper.write(path, "old")
    assert(os.execute("chmod 640 " .. path))
    state.safe_save({ a = Tensor({ 1, 2 }, { dtype = "int8" }) }, path)
    assert.are.same({ 1, 2 }, state.safe_load(path).a:tolist())
    assert.are.equal("someone else's file", helper.read(path .. ".tmp"))
    local mode = io.popen("stat -c %a " .. path):read("l")
    assert.are.equal("640", mode)
    -- a symbolic link stays a link; its target gets the new contents
    assert(os.execute("ln -s x.safetensors " .. dir .. "/link"))
    state.safe_save({ b = Tensor({ 3 }, { dtype = "int8" }) }, dir .. "/link")
    assert.are.equal("link", io.popen("stat -c %F " .. dir .. "/link"):read("l"):match("link"))
    assert.are.same({ 3 }, state.safe_load(path).b:tolist())
    -- nothing left behind but the two files, the link and the unrelated .tmp
    local listing = io.popen("ls -A " .. dir):read("a")
    assert.are.equal("link\nx.safetensors\nx.safetensors.tmp\n", listing)
    -- a FIFO (or a device) is not replaced by a regular file
    assert(os.execute("mkfifo " .. dir .. "/fifo"))
    fails_with("safe_save: '" .. dir .. "/fifo' is not a regular file", state.safe_save, {}, dir .. "/fifo")
    assert.are.equal("fifo", io.popen("stat -c %F " .. dir .. "/fifo"):read("l"))
  end)
end)

describe("safe_load", function()
  it("reads a hand-built file exactly, whatever the order and spacing of its header", function()
    local data = pack_all("<f", { 1.5, -2, 0.25, 8 }) .. pack_all("<i8", { -3, math.maxinteger }) .. "\128\63\0\192"
      .. "\1"
    local header = ' { "b" : {"data_offsets": [16, 32], "shape": [2], "dtype": "I64", "extra": "ignored"},\n'
      .. '"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},'
      .. '"c": {"dtype": "BF16", "shape": [2], "data_offsets": [32, 36]},'
      .. '"s": {"dtype": "BOOL", "shape": [], "data_offsets": [36, 37]},'
      .. '"z": {"dtype": "U8", "shape": [0, 3], "data_offsets": [37, 37]},'
      .. '"__metadata__": {"format": "pt"}}'
    local sd, metadata = state.safe_load(temp_file(layout(header, data)))
    assert.are.same({ format = "pt" }, metadata)
    assert.are.same({ { 1.5, -2.0 }, { 0.25, 8.0 } }, sd.a:tolist())
    assert.are.equal("float32", sd.a.dtype.name)
    assert.are.same({ -3, math.maxinteger }, sd.b:tolist())
    assert.are.same({ 1.0, -2.0 }, sd.c:tolist())
    assert.are.equal("bfloat16", sd.c.dtype.name)
    assert.are.equal(true, sd.s:item())
    assert.are.same({}, sd.s.shape)
    assert.are.same({ 0, 3 }, sd.z.shape)
    local names = {}
    for name in pairs(sd) do names[#names + 1] = name end
    table.sort(names)
    assert.are.same({ "a", "b", "c", "s", "z" }, names)
  end)

  it("round-trips every dtype bit for bit, on CPU and EMU", function()
    local path = temp_path()
    local sd = {
      f64 = Tensor({ 1 / 3, -1e300 }, { dtype = "float64" }), f32 = Tensor({ 0.1, 2 }, { dtype = "float32" }),
      f16 = Tensor({ 0.1, 65504 }, { dtype = "float16" }), bf16 = Tensor({ 0.1, 3 }, { dtype = "bfloat16" }),
      e4m3 = Tensor({ 0.5, -448 }, { dtype = "fp8e4m3" }), e5m2 = Tensor({ 0.5, 57344 }, { dtype = "fp8e5m2" }),
      i64 = Tensor({ math.mininteger, 5 }, { dtype = "int64" }), u64 = Tensor({ -1, 5 }, { dtype = "uint64" }),
      i32 = Tensor({ -7, 7 }, { dtype = "int32" }), u32 = Tensor({ 4000000000, 1 }, { dtype = "uint32" }),
      i16 = Tensor({ -300, 300 }, { dtype = "int16" }), u16 = Tensor({ 65535, 0 }, { dtype = "uint16" }),
      i8 = Tensor({ -128, 127 }, { dtype = "int8" }), u8 = Tensor({ 255, 0 }, { dtype = "uint8" }),
      b = Tensor({ true, false }),
    }
    state.safe_save(sd, path, { note = "all dtypes" })
    for _, device in ipairs({ "CPU", "EMU" }) do
      local back, metadata = state.safe_load(path, { device = device })
      assert.are.same({ note = "all dtypes" }, metadata)
      for name, t in pairs(sd) do
        assert.is_not_nil(back[name], name)
        assert.are.equal(device, back[name].device)
        assert.are.equal(t.dtype, back[name].dtype, name)
        assert.are.equal(t:to_bytes(), back[name]:to_bytes(), name)
      end
    end
  end)

  it("gives tensors kernels compute with and write into, leaving the file as it was", function()
    local path = temp_path()
    state.safe_save({ w = Tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }) }, path)
    local before = helper.read(path)
    local w = state.safe_load(path).w
    assert.are.same({ { 2.0, 4.0 }, { 6.0, 8.0 } }, (w * 2):tolist())
    if Tensor.assign then
      w:assign(w * 10):realize()
      assert.are.same({ { 10.0, 20.0 }, { 30.0, 40.0 } }, w:tolist())
    end
    assert.are.equal(before, helper.read(path))
    assert.are.same({ { 1.0, 2.0 }, { 3.0, 4.0 } }, state.safe_load(path).w:tolist())
  end)

  it("gives tensors that do not change when the file is rewritten or truncated afterwards", function()
    -- issue 33 item 5: 64-byte aligned data used to be a live view of the file
    local values = {}
    for i = 1, 64 do values[i] = i end
    -- the header padded so that the data starts at byte 128 of the file (aligned: a view before)
    local header = '{"w":{"dtype":"F32","shape":[64],"data_offsets":[0,256]}}'
    header = header .. string.rep(" ", 120 - #header)
    local contents = layout(header, pack_all("<f", values))
    local path = temp_file(contents)
    local w = state.safe_load(path).w
    local f = assert(io.open(path, "r+b"))
    f:seek("set", #contents - 256)
    f:write(string.rep("\255", 256))
    f:close()
    assert.are.same(values, w:tolist())
    helper.write(path, "")
    assert.are.same(values, (w + 0):tolist())
  end)

  it("survives loading the same file many times with collections in between", function()
    local path = temp_path()
    local values = {}
    for i = 1, 100 do values[i] = i * 0.5 end
    state.safe_save({ big = Tensor(values, { dtype = "float32" }), small = Tensor({ 1, 2, 3 }, { dtype = "int8" }) },
      path)
    collectgarbage()
    buffers.collect()
    local registered = buffers.stats().registered
    local kept = {}
    for round = 1, 60 do
      local sd = state.safe_load(path, { device = round % 2 == 0 and "CPU" or "EMU" })
      if round % 10 == 0 then kept[#kept + 1] = sd.big end
      assert.are.same({ 1, 2, 3 }, sd.small:tolist())
      sd = nil -- luacheck: ignore 311 (dropping the state dict on purpose)
      if round % 3 == 0 then
        collectgarbage()
        buffers.collect()
      end
    end
    collectgarbage()
    collectgarbage()
    buffers.collect()
    -- every buffer of a dropped state dict is freed; those of the kept tensors remain
    assert.are.equal(registered + #kept, buffers.stats().registered)
    for _, t in ipairs(kept) do assert.are.same(values, t:data()) end
  end)

  it("fails on malformed files, naming the file and the problem", function()
    local function load_error(contents) return error_of(state.safe_load, temp_file(contents)) end
    local function expect(expected, contents)
      local message = load_error(contents)
      assert.is_truthy(message:find(expected, 1, true), "expected '" .. expected .. "' in: " .. message)
    end
    local f32 = function(name, shape, b, e)
      return string.format('"%s":{"dtype":"F32","shape":%s,"data_offsets":[%d,%d]}', name, shape, b, e)
    end
    assert.are.equal("safe_load: cannot open '/nonexistent/x.safetensors': No such file or directory",
      error_of(state.safe_load, "/nonexistent/x.safetensors"))
    expect("is 5 bytes long, too short for a safetensors file (8 or more)", "12345")
    expect("is 0 bytes long", "")
    expect("declares a header of 100 bytes, past the end of the file (20 bytes)",
      string.pack("<I8", 100) .. "{}          ")
    expect("declares a header of 4611686018427387904 bytes, more than the 100000000 allowed",
      string.pack("<I8", 1 << 62) .. "{}")
    expect("declares a header of 2^63 or more bytes", string.pack("<i8", -1) .. "{}")
    expect("has a malformed header: json: expected ',' or '}' in an object, got '\"' at byte 12 "
      .. "(the header starts at byte 9", layout('{"a":{}    "b":{}}'))
    expect("has a malformed header: json: invalid UTF-8 at byte 2", layout("{\255}"))
    expect("has a header that is not a JSON object", layout("[1, 2]  "))
    expect("tensor 'a' has unknown dtype 'F128'", layout('{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}'))
    expect("tensor 'a' has no dtype", layout('{"a":{"shape":[1],"data_offsets":[0,4]}}', "1234"))
    expect("tensor 'a' is described by number, not an object", layout('{"a":1}'))
    expect("tensor 'a' has no shape list", layout('{"a":{"dtype":"F32","data_offsets":[0,4]}}', "1234"))
    expect("tensor 'a' has a shape that is not a list of sizes >= 0", layout("{" .. f32("a", "[-1]", 0, 4) .. "}"))
    expect("tensor 'a' has a shape that is not a list of sizes >= 0", layout("{" .. f32("a", "[1.5]", 0, 4) .. "}"))
    expect("tensor 'a' has no valid data_offsets", layout('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}'))
    expect("tensor 'a' has no valid data_offsets", layout('{"a":{"dtype":"F32","shape":[1]}}', "1234"))
    expect("tensor 'a' has data_offsets [0, 8] (8 bytes), but F32 (3,) needs 12 bytes",
      layout("{" .. f32("a", "[3]", 0, 8) .. "}", string.rep("\0", 12)))
    expect("tensor 'a' has data_offsets [0, 12] past the end of the data (8 bytes)",
      layout("{" .. f32("a", "[3]", 0, 12) .. "}", string.rep("\0", 8)))
    expect("tensors 'a' and 'b' overlap",
      layout("{" .. f32("a", "[2]", 0, 8) .. "," .. f32("b", "[2]", 4, 12) .. "}", string.rep("\0", 12)))
    expect("tensor 'a' has a shape with more than 2^53 elements",
      layout("{" .. f32("a", "[4294967296,4294967296]", 0, 4) .. "}", "1234"))
    expect("__metadata__ entry 'k' is not a string", layout('{"__metadata__":{"k":1}}'))
    expect("__metadata__ is not an object of strings", layout('{"__metadata__":"x"}'))
    expect("tensor 'b': bool element 0 is the byte 7", layout('{"b":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}',
      "\7"))
    -- issue 33 item 9: bad shapes name the file and the tensor, in a short message
    local many_dims = "[" .. string.rep("1,", 64) .. "1]"
    expect("tensor 'a' has 65 dims, more than the 64 a tensor may have",
      layout("{" .. f32("a", many_dims, 0, 4) .. "}", "1234"))
    local huge_dims = "[" .. string.rep("1,", 4999) .. "1]"
    local message = load_error(layout("{" .. f32("a", huge_dims, 0, 4) .. "}", "1234"))
    assert.is_truthy(message:find("tensor 'a' has 5000 dims, more than the 64", 1, true), message)
    assert.is_true(#message < 200, message)
    expect("tensor 'a' has size 4611686018427387904 in dim 2, more than 2^53",
      layout("{" .. f32("a", "[0,4611686018427387904]", 0, 0) .. "}"))
    expect("has a header that is not a JSON object", layout("[]"))
    expect("tensor 'a' has no shape list", layout("{" .. f32("a", "{}", 0, 4) .. "}", "1234"))
    expect("tensor 'a' is described by an array, not an object", layout('{"a":[]}'))
    expect("__metadata__ is not an object of strings", layout('{"__metadata__":[]}'))
    -- issue 33 item 7: the tensors cover the data exactly (a header length one byte short)
    expect("the data is 5 bytes, but its tensors cover 4 (is the header length right?)",
      layout("{" .. f32("a", "[1]", 0, 4) .. "}", "12345"))
    expect("data bytes [0, 1) before tensor 'a' belong to no tensor",
      layout("{" .. f32("a", "[1]", 1, 5) .. "}", "12345"))
    expect("data bytes [4, 8) before tensor 'b' belong to no tensor",
      layout("{" .. f32("a", "[1]", 0, 4) .. "," .. f32("b", "[1]", 8, 12) .. "}", string.rep("\0", 12)))
    expect("tensors 'a' and 'b' overlap",
      layout("{" .. f32("a", "[1]", 0, 4) .. "," .. f32("b", "[1]", 0, 4) .. "}", string.rep("\0", 4)))
    fails_with("safe_load: unknown option 'dtype'", state.safe_load, "x", { dtype = "float32" })
    fails_with("safe_load: unknown device 'TPU'", state.safe_load, "x", { device = "TPU" })
  end)
end)

describe("safetensors with PyTorch", function()
  -- the first python3 on PATH that has torch (Debian's python3-torch is for /usr/bin/python3)
  local python
  for _, candidate in ipairs({ "python3", "/usr/bin/python3" }) do
    if not python and helper.run(candidate .. " -c 'import torch'") == 0 then python = candidate end
  end

  local function run_python(script)
    local source = temp_file(script)
    local status, out, err = helper.run(python .. " " .. helper.shell_quote(source))
    assert.are.equal(0, status, err)
    return out
  end

  it("reads what tcl writes with a reader of its own (struct, json, torch.frombuffer)", function()
    if not python then
      pending("python3 with torch is not installed (apt-get install python3-torch)")
      return
    end
    local path = temp_path()
    state.safe_save({
      w = Tensor({ { 1.5, -2 }, { 3, 0.25 } }, { dtype = "float32" }), n = Tensor({ -5, 6 }, { dtype = "int64" }),
      h = Tensor({ 0.5, 2 }, { dtype = "bfloat16" }), m = Tensor({ true, false }),
    }, path)
    local out = run_python(([==[
import json, struct, torch
data = open(%q, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
dtypes = {"F32": torch.float32, "I64": torch.int64, "BF16": torch.bfloat16, "BOOL": torch.bool}
result = {}
for name, info in sorted(header.items()):
    b, e = info["data_offsets"]
    t = torch.frombuffer(bytearray(data[8 + n + b:8 + n + e]), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    result[name] = t.float().tolist() if t.is_floating_point() else t.tolist()
print(json.dumps(result, sort_keys=True))
]==]):format(path))
    assert.are.same({ w = { { 1.5, -2 }, { 3, 0.25 } }, n = { -5, 6 }, h = { 0.5, 2 }, m = { true, false } },
      json.decode(out))
  end)

  it("reads what a torch-based writer lays out", function()
    if not python then
      pending("python3 with torch is not installed (apt-get install python3-torch)")
      return
    end
    local path = temp_path()
    run_python(([==[
import json, struct, torch
tensors = {
    "layer.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5,
    "layer.bias": torch.tensor([-1, 2], dtype=torch.int64),
    "half": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
    "mask": torch.tensor([True, False, True]),
}
header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
for name, t in tensors.items():
    raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
    names = {torch.float32: "F32", torch.int64: "I64", torch.bfloat16: "BF16", torch.bool: "BOOL"}
    header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
    blobs.append(raw)
    offset += len(raw)
text = json.dumps(header).encode()
text += b" " * (-len(text) %% 8)
with open(%q, "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
]==]):format(path))
    local sd, metadata = state.safe_load(path)
    assert.are.same({ format = "pt" }, metadata)
    assert.are.same({ { 0, 0.5, 1 }, { 1.5, 2, 2.5 } }, sd["layer.weight"]:tolist())
    assert.are.same({ -1, 2 }, sd["layer.bias"]:tolist())
    assert.are.same({ 1.5, -2.25 }, sd.half:tolist())
    assert.are.same({ true, false, true }, sd.mask:tolist())
  end)
end)
