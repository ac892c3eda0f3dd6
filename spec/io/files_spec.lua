-- spec/io/files_spec.lua — bytes in and out of tensors (Tensor.from_bytes, t:to_bytes, Buffer:write_bytes
-- and read_bytes), file regions mapped as buffers (runtime.map_file: views, copies, lifetime,
-- writes that never reach the file) and gzip files (runtime.read_gzip through zlib). Expected
-- values come from string.pack, hand-written bit patterns and the gzip program.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local runtime = require "tcl.runtime"
local buffers = require "tcl.schedule.buffers"
local Tensor = tcl.Tensor

local function fails_with(expected, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  assert.is_truthy(tostring(err):find(expected, 1, true), "expected '" .. expected .. "' in: " .. tostring(err))
end

local function temp_file(contents)
  local path = os.tmpname()
  helper.write(path, contents)
  return path
end

local pack_all = helper.pack_all

describe("Tensor.from_bytes and to_bytes", function()
  it("reads each dtype's little-endian bytes", function()
    local cases = {
      { "int8", "<i1", { -128, -1, 0, 127 } },
      { "uint8", "<I1", { 0, 1, 200, 255 } },
      { "int16", "<i2", { -32768, -2, 7, 32767 } },
      { "uint16", "<I2", { 0, 1, 40000, 65535 } },
      { "int32", "<i4", { -2147483648, -5, 6, 2147483647 } },
      { "uint32", "<I4", { 0, 1, 3000000000, 4294967295 } },
      { "int64", "<i8", { math.mininteger, -9, 10, math.maxinteger } },
      { "float32", "<f", { -1.5, 0.0, 0.25, 2.0 ^ 100 } },
      { "float64", "<d", { -1.0e300, 0.1, 2.5, 1.0 / 3.0 } },
    }
    for _, case in ipairs(cases) do
      local dtype, fmt, values = case[1], case[2], case[3]
      local s = pack_all(fmt, values)
      local t = Tensor.from_bytes(s, dtype, { 2, 2 })
      assert.are.same({ 2, 2 }, t.shape)
      assert.are.equal(dtype, t.dtype.name)
      assert.are.same(values, t:data(), dtype)
      assert.are.equal(s, t:to_bytes(), dtype)
    end
  end)

  it("keeps the bit patterns of bool and the narrow floats", function()
    assert.are.same({ true, false, true }, Tensor.from_bytes("\1\0\1", "bool", 3):data())
    -- float16 1.0 = 0x3C00, -2.0 = 0xC000; bfloat16 1.0 = 0x3F80, -2.0 = 0xC000
    assert.are.same({ 1.0, -2.0 }, Tensor.from_bytes("\0\60\0\192", "float16", 2):data())
    assert.are.same({ 1.0, -2.0 }, Tensor.from_bytes("\128\63\0\192", "bfloat16", 2):data())
    -- fp8e4m3 1.0 = 0x38, fp8e5m2 1.0 = 0x3C
    assert.are.same({ 1.0 }, Tensor.from_bytes("\56", "fp8e4m3", 1):data())
    assert.are.same({ 1.0 }, Tensor.from_bytes("\60", "fp8e5m2", 1):data())
    assert.are.equal("\0\60\0\192", Tensor.from_bytes("\0\60\0\192", "float16", 2):to_bytes())
  end)

  it("returns the bytes of a computed tensor, realizing it", function()
    local t = Tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32" }) * 10 + 1
    assert.are.equal(pack_all("<f", { 11, 21, 31, 41 }), t:to_bytes())
    assert.are.equal(pack_all("<i4", { 1, 3, 2, 4 }), Tensor({ { 1, 2 }, { 3, 4 } }):transpose(1, 2):to_bytes())
    assert.are.equal("", Tensor.zeros(0, 3):to_bytes())
    assert.are.equal(string.pack("<d", 2.5), Tensor.scalar(2.5, { dtype = "float64" }):to_bytes())
  end)

  it("skips an offset, reads big-endian data and puts tensors on a device", function()
    local s = "HEADER" .. pack_all("<i4", { 7, 8, 9 }) .. "tail"
    assert.are.same({ 7, 8, 9 }, Tensor.from_bytes(s, "int32", { 3 }, { offset = 6 }):data())
    local big = Tensor.from_bytes("\0\0\1\2\255\255\255\254", "int32", 2, { big_endian = true })
    assert.are.same({ 258, -2 }, big:data())
    local e = Tensor.from_bytes(pack_all("<f", { 1, 2 }), "float32", 2, { device = "EMU" })
    assert.are.equal("EMU", e.device)
    assert.are.same({ 2.0, 4.0 }, (e * 2):data())
  end)

  it("moves tens of megabytes in one copy", function()
    local n = 47040000
    local s = string.rep("\1\2\3\4\5\6\7\8", n // 8)
    local t = Tensor.from_bytes(s, "uint8", { 60000, 28, 28 })
    assert.are.same({ 60000, 28, 28 }, t.shape)
    local back = t:to_bytes()
    assert.are.equal(n, #back)
    assert.is_true(back == s)
  end)

  it("fails with messages naming the problem", function()
    fails_with("from_bytes: 5 bytes given, a float32 tensor of shape (2,) needs 8",
      Tensor.from_bytes, "12345", "float32", 2)
    fails_with("from_bytes: 8 bytes given, a float32 tensor of shape (2,) needs 8 from offset 1",
      Tensor.from_bytes, "12345678", "float32", 2, { offset = 1 })
    fails_with("from_bytes: expected a string of bytes, got table", Tensor.from_bytes, {}, "float32", 2)
    fails_with("from_bytes: unknown dtype 'float99'", Tensor.from_bytes, "", "float99", 0)
    fails_with("from_bytes: sizes must be >= 0", Tensor.from_bytes, "", "uint8", { -1 })
    fails_with("from_bytes: offset must be an integer >= 0, got -1", Tensor.from_bytes, "", "uint8", 0, { offset = -1 })
    fails_with("from_bytes: unknown option 'order'", Tensor.from_bytes, "", "uint8", 0, { order = 1 })
    fails_with("from_bytes: unknown device 'TPU'", Tensor.from_bytes, "", "uint8", 0, { device = "TPU" })
    fails_with("from_bytes: bool element 1 is the byte 2 (bools are 0 or 1)", Tensor.from_bytes, "\1\2", "bool", 2)
    fails_with("to_bytes: expected a tensor, got string", Tensor.to_bytes, "x")
  end)
end)

describe("Buffer:write_bytes and read_bytes", function()
  it("copy a buffer's storage to and from a string", function()
    local b = runtime.buffer("int16", 3, "CPU")
    b:write_bytes(pack_all("<i2", { 1, -2, 3 }))
    assert.are.same({ 1, -2, 3 }, b:read())
    assert.are.equal(pack_all("<i2", { 1, -2, 3 }), b:read_bytes())
    b:write_bytes("xx" .. pack_all(">i2", { 4, 5, -6 }), 2, true)
    assert.are.same({ 4, 5, -6 }, b:read())
    fails_with("Buffer:write_bytes: the string has 5 bytes, the buffer (3 int16 elements) 6", b.write_bytes, b, "12345")
    fails_with("Buffer:write_bytes: the string has 6 bytes, too few for 6 bytes from offset 1",
      b.write_bytes, b, "123456", 1)
    fails_with("Buffer:write_bytes: offset must be >= 0, got -1", b.write_bytes, b, "123456", -1)
    assert.are.same({ 4, 5, -6 }, b:read()) -- failed writes change nothing
  end)
end)

describe("runtime.map_file", function()
  -- 64 bytes of padding, then six float32; the mapping starts at a page boundary, so byte 64
  -- is 64-byte aligned and byte 4 only 4-byte aligned
  local values = { 1.5, -2.0, 3.25, 4.0, 5.5, -6.0 }
  local path
  before_each(function() path = temp_file(string.rep("P", 64) .. pack_all("<f", values)) end)
  after_each(function() os.remove(path) end)

  it("views aligned bytes and copies the others", function()
    local map = runtime.map_file(path)
    assert.are.equal(64 + 24, map.size)
    assert.are.equal("PPPP", map:read(0, 4))
    assert.are.equal(string.pack("<f", 1.5), map:read(64, 4))
    local view, viewed = map:buffer("float32", 6, 64, "CPU")
    assert.is_true(viewed)
    assert.are.same(values, view:read())
    -- 4-byte aligned: a view on EMU (item alignment), a copy on CPU (kernels need 64 bytes)
    local emu, emu_viewed = map:buffer("float32", 4, 68, "EMU")
    assert.is_true(emu_viewed)
    assert.are.same({ -2.0, 3.25, 4.0, 5.5 }, emu:read())
    local copy, copied_viewed = map:buffer("float32", 4, 68, "CPU")
    assert.is_false(copied_viewed)
    assert.are.same({ -2.0, 3.25, 4.0, 5.5 }, copy:read())
    local odd, odd_viewed = map:buffer("int16", 2, 65, "EMU")
    assert.is_false(odd_viewed)
    assert.are.equal(map:read(65, 4), odd:read_bytes())
  end)

  it("maps a region from an offset that is not a page boundary", function()
    local map = runtime.map_file(path, 60, 28)
    assert.are.equal(28, map.size)
    assert.are.equal("PPPP" .. string.pack("<f", 1.5), map:read(0, 8))
    local b = map:buffer("float32", 6, 4, "EMU")
    assert.are.same(values, b:read())
    assert.are.equal(0, runtime.map_file(path, 88).size)
  end)

  it("gives tensors that kernels read and write, never changing the file", function()
    local map = runtime.map_file(path)
    local storage, viewed = map:buffer("float32", 6, 64, "CPU")
    assert.is_true(viewed)
    local t = tcl.Tensor.reshape(require("tcl.api.class").wrap(buffers.from_storage(storage), { 6 }, "CPU"), 2, 3)
    assert.are.same({ 3.0, -4.0, 6.5, 8.0, 11.0, -12.0 }, (t * 2):data())
    if Tensor.assign then
      t:assign(t + 1):realize()
      assert.are.same({ 2.5, -1.0, 4.25, 5.0, 6.5, -5.0 }, t:data())
    end
    storage:write_bytes(pack_all("<f", { 9, 9, 9, 9, 9, 9 }))
    assert.are.same({ 9.0, 9.0, 9.0, 9.0, 9.0, 9.0 }, storage:read())
    -- copy-on-write: the file keeps its bytes, and a new mapping sees them
    assert.are.equal(string.rep("P", 64) .. pack_all("<f", values), helper.read(path))
    assert.are.same(values, runtime.map_file(path):buffer("float32", 6, 64, "CPU"):read())
  end)

  it("keeps the mapping while a buffer uses it, in any order of collection", function()
    local kept = {}
    for round = 1, 200 do
      local map = runtime.map_file(path)
      local b = map:buffer("float32", 6, 64, round % 2 == 0 and "CPU" or "EMU")
      if round % 3 == 0 then kept[#kept + 1] = b end
      map = nil -- luacheck: ignore 311 (dropping the last reference to the map on purpose)
      if round % 7 == 0 then collectgarbage() end
      assert.are.same(values, b:read())
    end
    collectgarbage()
    collectgarbage()
    for _, b in ipairs(kept) do assert.are.same(values, b:read()) end
  end)

  it("fails with messages naming the file and the range", function()
    fails_with("runtime.map_file: cannot open '/nonexistent/x': No such file or directory", runtime.map_file,
      "/nonexistent/x")
    fails_with("is not a regular file", runtime.map_file, "/tmp")
    fails_with("offset 89 is past the end of '" .. path .. "' (88 bytes)", runtime.map_file, path, 89)
    fails_with("10 bytes from offset 80 run past the end of '" .. path .. "' (88 bytes)", runtime.map_file, path, 80,
      10)
    fails_with("runtime.map_file: offset must be >= 0, got -1", runtime.map_file, path, -1)
    local map = runtime.map_file(path)
    fails_with("FileMap:read: 8 bytes from offset 84 run past the end of the 88 mapped bytes", map.read, map, 84, 8)
    fails_with("FileMap:buffer: 6 float32 elements from byte 68 run past the end of the mapped 88 bytes",
      map.buffer, map, "float32", 6, 68, "CPU")
    fails_with("FileMap:buffer: unknown device 'TPU'", map.buffer, map, "float32", 1, 64, "TPU")
    fails_with("FileMap:buffer: bool element 0 is the byte 80", map.buffer, map, "bool", 1, 0, "CPU")
  end)
end)

describe("runtime.read_gzip", function()
  local function gzip(contents)
    local plain = temp_file(contents)
    local status = helper.run("gzip -n -f " .. helper.shell_quote(plain))
    assert.are.equal(0, status)
    return plain .. ".gz"
  end

  it("inflates a gzip file, every member of it", function()
    local text = string.rep("tcl reads gzip\n", 5000) .. "\0\1\2\255"
    local path = gzip(text)
    assert.are.equal(text, runtime.read_gzip(path))
    local second = gzip("and a second member")
    local both = temp_file(helper.read(path) .. helper.read(second))
    assert.are.equal(text .. "and a second member", runtime.read_gzip(both))
    assert.are.equal("", runtime.read_gzip(gzip("")))
    os.remove(path)
    os.remove(second)
    os.remove(both)
  end)

  it("fails on missing, foreign, truncated and corrupt files", function()
    fails_with("runtime.read_gzip: cannot open '/nonexistent/x.gz'", runtime.read_gzip, "/nonexistent/x.gz")
    local plain = temp_file("plain text, not gzip")
    fails_with("'" .. plain .. "' is not a gzip file (no gzip header)", runtime.read_gzip, plain)
    local empty = temp_file("")
    fails_with("is not a gzip file", runtime.read_gzip, empty)
    local seed = 12345
    local noise = {}
    for i = 1, 20000 do
      seed = (seed * 1103515245 + 12345) % 2147483648
      noise[i] = string.char(seed % 251)
    end
    local whole = helper.read(gzip(table.concat(noise)))
    local truncated = temp_file(whole:sub(1, #whole // 2))
    fails_with("'" .. truncated .. "' is not a valid gzip file: unexpected end of file", runtime.read_gzip, truncated)
    local no_trailer = temp_file(whole:sub(1, #whole - 4))
    fails_with("is not a valid gzip file", runtime.read_gzip, no_trailer)
    -- a changed byte in the deflate stream: bad data or a CRC mismatch, never a crash
    local middle = #whole // 2
    local corrupt = temp_file(whole:sub(1, middle - 1) .. string.char((whole:byte(middle) + 1) % 256)
      .. whole:sub(middle + 1))
    fails_with("is not a valid gzip file", runtime.read_gzip, corrupt)
    local bad_crc = temp_file(whole:sub(1, #whole - 8) .. string.char((whole:byte(#whole - 7) + 1) % 256)
      .. whole:sub(#whole - 6))
    fails_with("incorrect data check", runtime.read_gzip, bad_crc)
    for _, p in ipairs({ plain, empty, truncated, no_trailer, corrupt, bad_crc }) do os.remove(p) end
  end)
end)
