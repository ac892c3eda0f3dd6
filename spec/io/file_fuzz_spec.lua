-- spec/io/file_fuzz_spec.lua — the file readers against damaged files, with seeded, deterministic
-- mutations: safetensors files read by safe_load and by an exported model's NAME_open, IDX and
-- IDX.gz files read by read_idx and read_gzip, and entries of the kernel disk cache. Each case
-- either loads with the right contents or fails with an error naming the file (and the reading
-- function): never a crash, a hang or wrong data. The mutations: truncation at every offset,
-- seeded bit flips, header lengths off by one or eight, offsets, shapes and dtypes edited in
-- the JSON (overlapping and gapped tensors, huge dims, too many dims), IDX dims whose product
-- wraps, gzip bombs small on disk, and files that are not regular files (FIFOs, directories,
-- devices) or are empty. The right contents come from the spec's own knowledge of each file: the
-- safetensors files are written here by hand, and IDX files are read back by a naive reader
-- below; a cache entry's damage must cost a recompile, never a wrong result.
local helper = require "spec.support.helper"
local splitmix = require "spec.support.splitmix"
local tcl = require "tcl"
local data = require "tcl.api.data"
local export = require "tcl.export"
local Tensor, nn = tcl.Tensor, tcl.nn
local q = helper.shell_quote

local CPU = { device = "CPU" }

-- The seeded mutations draw from fixed seeds, each moved by TCL_FUZZ_SEED (default 0: the CI
-- run; spec/support/helper.lua).
local FUZZ = helper.fuzz { name = "file fuzz", seed = 0 }

-- Each describe's files go into a directory of its own, removed at the end.
local tmp
local made_dirs = {}
local function new_tmp()
  local status, out = helper.run("mktemp -d")
  assert(status == 0, "mktemp -d failed")
  tmp = out:gsub("%s+$", "")
  made_dirs[#made_dirs + 1] = tmp
end
teardown(function()
  for _, dir in ipairs(made_dirs) do
    if dir:match("^/tmp/") then helper.run("rm -rf " .. helper.shell_quote(dir)) end
  end
end)
local function path_of(name) return tmp .. "/" .. name end

-- Writes contents to a fresh file of the spec's directory; returns its path.
local written = 0
local function file_with(contents, suffix)
  written = written + 1
  local path = path_of(string.format("case%04d%s", written, suffix or ""))
  helper.write(path, contents)
  return path
end

-- pcall of reader(path): on failure, the message must start with fn's name and name the file.
local function attempt(fn, reader, path)
  local ok, result = pcall(reader, path)
  if not ok then
    local message = tostring(result)
    assert(message:find(fn .. ":", 1, true) == 1, "the error does not start with " .. fn .. ": " .. message)
    assert(message:find(path, 1, true), "the error does not name the file: " .. message)
    assert(#message < 1000, "a message of " .. #message .. " bytes")
  end
  return ok, result
end

local function flip_bit(bytes, bit)
  local at = bit // 8 + 1
  return bytes:sub(1, at - 1) .. string.char(bytes:byte(at) ~ (1 << (bit % 8))) .. bytes:sub(at + 1)
end

-- The special files every reader must refuse without blocking: a FIFO, a directory, an empty
-- file, /dev/zero, a missing file.
local function special_files(suffix)
  local fifo, dir = path_of("fifo" .. suffix), path_of("dir" .. suffix)
  assert.are.equal(0, (helper.run("mkfifo " .. q(fifo) .. " && mkdir " .. q(dir))))
  return { fifo, dir, file_with("", suffix), "/dev/zero", path_of("missing" .. suffix) }
end

-- ---------------------------------------------------------------------------------------
-- safetensors, written by hand: three tensors of three dtypes, metadata, the header padded.

local ST_TENSORS = {
  { name = "a", dtype = "F32", shape = { 2, 3 }, data = string.pack("<ffffff", 1, -2, 3.5, 4, 0.25, 6) },
  { name = "b", dtype = "I64", shape = { 4 }, data = string.pack("<i8i8i8i8", 7, -8, 1 << 40, 0) },
  { name = "c", dtype = "U8", shape = { 5 }, data = "\1\2\3\254\255" },
}
local ST_DTYPE = { F32 = "float32", I64 = "int64", U8 = "uint8", I8 = "int8" }

-- A safetensors file of entries { name, dtype, shape (a JSON text), offsets (JSON text) } and
-- the data; the header as given, or built from the entries.
local function safetensors(entries, payload, header)
  if not header then
    local parts = { '"__metadata__":{"format":"fuzz"}' }
    for _, e in ipairs(entries) do
      parts[#parts + 1] = string.format('"%s":{"dtype":"%s","shape":%s,"data_offsets":%s}', e.name, e.dtype, e.shape,
        e.offsets)
    end
    header = "{" .. table.concat(parts, ",") .. "}"
    header = header .. string.rep(" ", (8 - #header % 8) % 8)
  end
  return string.pack("<I8", #header) .. header .. payload
end

-- The base file's entries (JSON texts of shapes and offsets), and its data.
local function base_entries()
  local entries, at, payload = {}, 0, {}
  for i, t in ipairs(ST_TENSORS) do
    entries[i] = { name = t.name, dtype = t.dtype, shape = "[" .. table.concat(t.shape, ",") .. "]",
      offsets = string.format("[%d,%d]", at, at + #t.data) }
    payload[i] = t.data
    at = at + #t.data
  end
  return entries, table.concat(payload)
end

-- The loaded state dict as sorted "dtype shape bytes" lines, names left out.
local function contents_of(sd)
  local lines = {}
  for _, t in pairs(sd) do
    lines[#lines + 1] = t.dtype.name .. " " .. table.concat(t.shape, "x") .. " " .. t:to_bytes()
  end
  table.sort(lines)
  return table.concat(lines, "\n")
end

-- The same for tensors given as { dtype (safetensors'), shape, data }.
local function expected_contents(tensors)
  local lines = {}
  for _, t in ipairs(tensors) do
    lines[#lines + 1] = ST_DTYPE[t.dtype] .. " " .. table.concat(t.shape, "x") .. " " .. t.data
  end
  table.sort(lines)
  return table.concat(lines, "\n")
end

local function safe_load_cpu(path) return nn.state.safe_load(path, CPU) end

-- The header edits: { what, a function(entries) editing them (or a whole header), and the
-- tensors the file then holds (nil: it must be refused) }.
local function header_edits()
  local function with(i, key, value)
    return function(entries) entries[i][key] = value end
  end
  local reshaped = { ST_TENSORS[1], ST_TENSORS[2], ST_TENSORS[3] }
  reshaped[1] = { dtype = "F32", shape = { 3, 2 }, data = ST_TENSORS[1].data }
  local c_reshaped = { ST_TENSORS[1], ST_TENSORS[2], { dtype = "U8", shape = { 5, 1 }, data = ST_TENSORS[3].data } }
  local c_as_int8 = { ST_TENSORS[1], ST_TENSORS[2], { dtype = "I8", shape = { 5 }, data = ST_TENSORS[3].data } }
  local edits = {
    { "a's end one short", with(1, "offsets", "[0,23]") },
    { "a shifted by one", with(1, "offsets", "[1,25]") },
    { "b overlapping a", with(2, "offsets", "[16,48]") },
    { "b overlapping c", with(2, "offsets", "[25,57]") },
    { "c past the data", with(3, "offsets", "[57,62]") },
    { "c before the data", with(3, "offsets", "[55,60]") },
    { "a and b swapped", function(e) e[1].offsets, e[2].offsets = e[2].offsets, e[1].offsets end },
    { "c's offsets reversed", with(3, "offsets", "[61,56]") },
    { "c's offsets negative", with(3, "offsets", "[-5,0]") },
    { "c's offsets fractional", with(3, "offsets", "[56.0,61]") },
    { "c's offsets a single number", with(3, "offsets", "[56]") },
    { "c's offsets huge", with(3, "offsets", "[56,18446744073709551617]") },
    { "c's offsets missing", with(3, "offsets", "null") },
    { "a reshaped to [3, 2]", with(1, "shape", "[3,2]"), reshaped },
    { "c reshaped to [5, 1]", with(3, "shape", "[5,1]"), c_reshaped },
    { "a's shape one short", with(1, "shape", "[2,2]") },
    { "a's shape 2^62", with(1, "shape", "[4611686018427387904]") },
    { "a's shape [0, 2^62]", with(1, "shape", "[0,4611686018427387904]") },
    { "a's shape 2^53 + 1", with(1, "shape", "[9007199254740993]") },
    { "a's shape [2^32, 2^32]", with(1, "shape", "[4294967296,4294967296]") },
    { "a's shape 65 dims", with(1, "shape", "[6" .. string.rep(",1", 64) .. "]") },
    { "a's shape 5000 dims", with(1, "shape", "[6" .. string.rep(",1", 4999) .. "]") },
    { "a's shape negative", with(1, "shape", "[-2,-3]") },
    { "a's shape fractional", with(1, "shape", "[2,3.5]") },
    { "a's shape an object", with(1, "shape", "{}") },
    { "a's shape a string", with(1, "shape", '"2x3"') },
    { "a's dtype unknown", with(1, "dtype", "F31") },
    { "a's dtype empty", with(1, "dtype", "") },
    { "a's dtype of another size", with(1, "dtype", "F64") },
    { "c's dtype of the same size", with(3, "dtype", "I8"), c_as_int8 },
  }
  local whole = {
    { "an empty list as the header", "[]" },
    { "an empty object as the header", "{}" },
    { "null as the header", "null" },
    { "a string as the header", '"abc"' },
    { "an unterminated header", '{"a":{"dtype":"F32"' },
    { "a deeply nested header", string.rep("[", 100000) .. string.rep("]", 100000) },
    { "a tensor listed twice", nil },
    { "metadata of a number", nil },
  }
  return edits, whole
end

describe("file fuzzing: safetensors files read by safe_load", function()
  local entries, payload, base
  lazy_setup(function()
    new_tmp()
    entries, payload = base_entries()
    base = safetensors(entries, payload)
  end)

  it("loads the intact file exactly", function()
    local ok, sd = attempt("safe_load", safe_load_cpu, file_with(base))
    assert.is_true(ok)
    assert.are.equal(expected_contents(ST_TENSORS), contents_of(sd))
  end)

  it("refuses the file cut at every offset, and one byte longer", function()
    for n = 0, #base - 1 do
      local path = file_with(base:sub(1, n))
      assert.is_false((attempt("safe_load", safe_load_cpu, path)), "cut at " .. n)
    end
    assert.is_false((attempt("safe_load", safe_load_cpu, file_with(base .. "\0"))))
  end)

  it("refuses a header length off by one or eight, zero or huge", function()
    local n = string.unpack("<I8", base)
    for _, length in ipairs { n - 1, n + 1, n - 8, n + 8, 0, 1, #base, 1 << 40, -1 } do
      local path = file_with(string.pack("<i8", length) .. base:sub(9))
      assert.is_false((attempt("safe_load", safe_load_cpu, path)), "header length " .. length)
    end
  end)

  it("loads every seeded bit flip exactly or refuses it", FUZZ:reporting(function()
    local rng = splitmix.new(3301 + FUZZ.seed)
    local header_end = #base - #payload
    local loaded, refused = 0, 0
    for _ = 1, 150 do
      local bit = rng:integer(0, #base * 8 - 1)
      local damaged = flip_bit(base, bit)
      local ok, sd = attempt("safe_load", safe_load_cpu, file_with(damaged))
      if bit // 8 >= header_end then
        -- in the data: the file is still well formed, and the flipped bit must show
        assert.is_true(ok, "a flip in the data region was refused")
        local tensors, at = {}, header_end
        for i, t in ipairs(ST_TENSORS) do
          tensors[i] = { dtype = t.dtype, shape = t.shape, data = damaged:sub(at + 1, at + #t.data) }
          at = at + #t.data
        end
        assert.are.equal(expected_contents(tensors), contents_of(sd))
      elseif ok then
        -- in the header, still valid (a name, the metadata): the same tensors under some names
        assert.are.equal(expected_contents(ST_TENSORS), contents_of(sd), "flip of bit " .. bit)
      end
      if ok then loaded = loaded + 1 else refused = refused + 1 end
    end
    assert.is_true(loaded > 0 and refused > 0)
  end))

  it("refuses edited offsets, shapes and dtypes, and loads the edits that stay consistent", function()
    local edits, whole = header_edits()
    for _, edit in ipairs(edits) do
      local copy = {}
      for i, e in ipairs(entries) do
        copy[i] = { name = e.name, dtype = e.dtype, shape = e.shape, offsets = e.offsets }
      end
      edit[2](copy)
      local ok, sd = attempt("safe_load", safe_load_cpu, file_with(safetensors(copy, payload)))
      if edit[3] then
        assert.is_true(ok, edit[1] .. " was refused: " .. tostring(sd))
        assert.are.equal(expected_contents(edit[3]), contents_of(sd), edit[1])
      else
        assert.is_false(ok, edit[1] .. " was accepted")
      end
    end
    local twice = safetensors(nil, payload, '{"a":{"dtype":"U8","shape":[61],"data_offsets":[0,61]},'
      .. '"a":{"dtype":"U8","shape":[61],"data_offsets":[0,61]}}')
    whole[7][2] = twice:sub(9, 8 + string.unpack("<I8", twice))
    whole[8][2] = '{"__metadata__":{"k":5},"a":{"dtype":"U8","shape":[61],"data_offsets":[0,61]}}'
    for _, case in ipairs(whole) do
      local ok = attempt("safe_load", safe_load_cpu, file_with(safetensors(nil, payload, case[2])))
      assert.is_false(ok, case[1] .. " was accepted")
    end
  end)

  it("refuses FIFOs, directories, devices, empty and missing files without blocking", function()
    for _, path in ipairs(special_files(".safetensors")) do
      assert.is_false((attempt("safe_load", safe_load_cpu, path)), path)
    end
  end)
end)

-- ---------------------------------------------------------------------------------------
-- The exported runtime's reader: one model exported once, a driver that opens each file given
-- and, when it opens, runs the model once and prints the outputs' bytes in hex.

local OPENER = [[
#include <stdio.h>
#include <stdlib.h>
#include "fz.h"

int main(int argc, char **argv) {
    static float in[FZ_INPUT0_BYTES / sizeof(float)];
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) in[i] = (float)i * 0.5f - 1.0f;
    for (int f = 1; f < argc; f++) {
        fz *m;
        int status = fz_open(&m, argv[f], 1);
        if (status != FZ_OK) {
            printf("%d %s\n", status, fz_error(NULL));
            continue;
        }
        static unsigned char out[FZ_OUTPUT0_BYTES];
        const void *inputs[1] = {in};
        void *outputs[1] = {out};
        status = fz_run(m, inputs, outputs);
        printf("%d ", status);
        for (size_t i = 0; i < sizeof out; i++) printf("%02x", out[i]);
        printf("\n");
        fz_close(m);
    }
    return 0;
}
]]

describe("file fuzzing: safetensors files read by an exported model's open", function()
  local dir, app, base, model, input
  lazy_setup(function()
    new_tmp()
    Tensor.manual_seed(21)
    model = nn.Sequential { nn.Linear(3, 4), Tensor.relu, nn.Linear(4, 2) }
    input = Tensor.new({ { -1, -0.5, 0 }, { 0.5, 1, 1.5 } }, { dtype = "float32", device = "CPU" }):realize()
    dir = path_of("export")
    local summary = export.export(function(x) return model(x) end, { input },
      { dir = dir, name = "fz", weights = "safetensors", model = model })
    helper.write(dir .. "/opener.c", OPENER)
    local sources = { q(dir .. "/opener.c"), q(dir .. "/fz.c") }
    for _, f in ipairs(summary.files) do
      if f:match("%.o$") then sources[#sources + 1] = q(dir .. "/" .. f) end
    end
    app = dir .. "/opener"
    local built, _, err = helper.run(string.format("cc -std=c11 -O1 -I %s %s -lpthread -lm -o %s", q(dir),
      table.concat(sources, " "), q(app)))
    assert(built == 0, err)
    base = helper.read(dir .. "/fz.safetensors")
  end)

  -- Opens every file in one run of the driver; for each: nil and the message, or the outputs.
  local function open_all(paths)
    local quoted = {}
    for i, p in ipairs(paths) do quoted[i] = q(p) end
    local status, out, err = helper.run(q(app) .. " " .. table.concat(quoted, " "))
    assert.are.equal(0, status, err)
    local results = {}
    for line in out:gmatch("[^\n]+") do
      local code, rest = line:match("^(%d+) (.*)$")
      results[#results + 1] = { code = tonumber(code), text = rest }
    end
    assert.are.equal(#paths, #results)
    return results
  end

  -- What tcl computes with the weights of the file at path (which safe_load must then accept).
  local function tcl_outputs(path)
    nn.state.load_state_dict(model, (nn.state.safe_load(path, CPU)))
    local bytes = model(input):to_bytes()
    return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
  end

  -- Each result: refused with a message naming the file, or the outputs of the file's weights.
  local function check_results(paths, results, must_refuse)
    local opened = 0
    for i, r in ipairs(results) do
      if r.code == 0 then
        assert.is_false(must_refuse, paths[i] .. " was opened")
        assert.are.equal(tcl_outputs(paths[i]), r.text, paths[i])
        opened = opened + 1
      else
        assert.are.equal(3, r.code, r.text) -- FZ_ERR_WEIGHTS
        assert.matches("^fz_open: ", r.text)
        assert.is_truthy(r.text:find(paths[i], 1, true), r.text)
      end
    end
    return opened
  end

  it("refuses the file cut at every offset, or with its header length off", function()
    local paths = {}
    for n = 0, #base - 1 do paths[#paths + 1] = file_with(base:sub(1, n)) end
    local header = string.unpack("<I8", base)
    for _, length in ipairs { header - 1, header + 1, header - 8, header + 8, 0, 1 << 40 } do
      paths[#paths + 1] = file_with(string.pack("<I8", length) .. base:sub(9))
    end
    paths[#paths + 1] = file_with(base .. "\0")
    check_results(paths, open_all(paths), true)
  end)

  it("runs on every seeded bit flip that leaves a valid file, with its weights, and refuses the others",
    FUZZ:reporting(function()
    local rng = splitmix.new(4410 + FUZZ.seed)
    local paths = { file_with(base) }
    for _ = 1, 80 do paths[#paths + 1] = file_with(flip_bit(base, rng:integer(0, #base * 8 - 1))) end
    local opened = check_results(paths, open_all(paths), false)
    assert.is_true(opened > 1 and opened < #paths)
  end))

  it("refuses overlapping, gapped and oversized tensors, and special files", function()
    local header_len = string.unpack("<I8", base)
    local header, payload = base:sub(9, 8 + header_len), base:sub(9 + header_len)
    local paths = {}
    local function edited(from, to)
      local h, count = header:gsub(from, to, 1)
      assert.are.equal(1, count, from)
      paths[#paths + 1] = file_with(string.pack("<I8", #h) .. h .. payload)
    end
    -- every tensor's data_offsets moved by one, and its shape made huge
    for begin, stop in header:gmatch('"data_offsets":%[(%d+),(%d+)%]') do
      local old = string.format('"data_offsets":[%s,%s]', begin, stop)
      edited(old:gsub("%p", "%%%0"), string.format('"data_offsets":[%d,%d]', begin + 1, stop + 1))
      edited(old:gsub("%p", "%%%0"), string.format('"data_offsets":[%d,%d]', begin, stop - 1))
      if begin ~= "0" then edited(old:gsub("%p", "%%%0"), string.format('"data_offsets":[0,%d]', stop - begin)) end
    end
    edited('"shape":%[', '"shape":[4611686018427387904,')
    edited('"dtype":"F32"', '"dtype":"F16"')
    edited("^{", "[")
    for _, path in ipairs(special_files(".weights")) do paths[#paths + 1] = path end
    check_results(paths, open_all(paths), true)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- IDX and IDX.gz, with a naive reader as the reference.

local IDX_TYPES = { [0x08] = { "uint8", 1 }, [0x09] = { "int8", 1 }, [0x0B] = { "int16", 2 }, [0x0C] = { "int32", 4 },
  [0x0D] = { "float32", 4 }, [0x0E] = { "float64", 8 } }

-- The dtype, shape and little-endian bytes an IDX file holds, or nil when it is not valid.
local function reference_idx(bytes)
  if #bytes < 4 or bytes:byte(1) ~= 0 or bytes:byte(2) ~= 0 or not IDX_TYPES[bytes:byte(3)] then return nil end
  local kind, ndim = IDX_TYPES[bytes:byte(3)], bytes:byte(4)
  if #bytes < 4 + 4 * ndim then return nil end
  local shape, size = {}, kind[2] + 0.0
  for d = 1, ndim do
    shape[d] = string.unpack(">I4", bytes, 4 * d - 3 + 4)
    size = size * shape[d] -- a float: a huge product stays huge instead of wrapping
  end
  if 4 + 4 * ndim + size ~= #bytes then return nil end
  local values = bytes:sub(4 + 4 * ndim + 1)
  local swapped = values:gsub(string.rep(".", kind[2]), function(v) return v:reverse() end)
  return kind[1], shape, swapped
end

local function idx_file(code, shape, payload)
  local parts = { string.char(0, 0, code, #shape) }
  for _, n in ipairs(shape) do parts[#parts + 1] = string.pack(">I4", n) end
  parts[#parts + 1] = payload
  return table.concat(parts)
end

local function gzip(bytes)
  local raw = file_with(bytes)
  local status, out = helper.run("gzip -c -n " .. q(raw))
  assert.are.equal(0, status)
  return out
end

local function read_idx_cpu(path) return data.read_idx(path, CPU) end

-- read_idx of path must agree with the reference reading of `plain` (the inflated contents).
local function check_idx(path, plain)
  local ok, t = attempt("read_idx", read_idx_cpu, path)
  local dtype, shape, bytes = reference_idx(plain)
  if dtype then
    assert.is_true(ok, "refused a valid file: " .. tostring(t))
    assert.are.equal(dtype, t.dtype.name)
    assert.are.same(shape, t.shape)
    assert.are.equal(bytes, t:to_bytes())
  else
    assert.is_false(ok, "accepted an invalid file")
  end
  return ok
end

describe("file fuzzing: IDX and IDX.gz files read by read_idx and read_gzip", function()
  local bases
  lazy_setup(function()
    new_tmp()
    local values = {}
    for i = 1, 60 do values[i] = string.char((i * 37) % 256) end
    bases = {
      idx_file(0x08, { 3, 4, 5 }, table.concat(values)),
      idx_file(0x0D, { 2, 3 }, string.pack(">ffffff", 1.5, -2, 0, 3.25, 1e30, -0.0)),
      idx_file(0x0B, { 7 }, string.pack(">i2i2i2i2i2i2i2", 1, -1, 300, -300, 32767, -32768, 0)),
    }
  end)

  it("agrees with the reference on every cut and on seeded bit flips", FUZZ:reporting(function()
    local rng = splitmix.new(5150 + FUZZ.seed)
    for _, base in ipairs(bases) do
      for n = 0, #base - 1 do check_idx(file_with(base:sub(1, n), ".idx"), base:sub(1, n)) end
      check_idx(file_with(base .. "\0", ".idx"), base .. "\0")
      for _ = 1, 40 do
        local damaged = flip_bit(base, rng:integer(0, #base * 8 - 1))
        check_idx(file_with(damaged, ".idx"), damaged)
      end
    end
  end))

  it("refuses dims whose product wraps or exceeds the file, and odd dim counts", function()
    local cases = {
      idx_file(0x08, { 0xFFFFFFFF, 0xFFFFFFFF }, "xy"),
      idx_file(0x08, { 65536, 65536, 65536, 65536 }, ""),
      idx_file(0x0E, { 65536, 65536, 65536, 65536 }, "12345678"),
      idx_file(0x0C, { 0x40000000 }, ""),
      idx_file(0x08, { 0, 5 }, "abcde"),
      string.char(0, 0, 8, 255) .. string.rep("\0\0\0\1", 10),
      string.char(0, 0, 8, 0) .. "ab",
    }
    for _, contents in ipairs(cases) do
      assert.is_false(check_idx(file_with(contents, ".idx"), contents))
      local gz = file_with(gzip(contents), ".idx.gz")
      assert.is_false(check_idx(gz, contents))
    end
  end)

  it("reads IDX.gz files whose gzip layer is cut or flipped only when the contents are intact",
    FUZZ:reporting(function()
    local rng = splitmix.new(6021 + FUZZ.seed)
    for _, base in ipairs(bases) do
      local gz = gzip(base)
      for n = 0, #gz - 1 do
        local path = file_with(gz:sub(1, n), ".idx.gz")
        assert.is_false((attempt("read_idx", read_idx_cpu, path)), "cut at " .. n)
        assert.is_false((attempt("read_gzip", data.read_gzip, path)), "read_gzip, cut at " .. n)
      end
      for _ = 1, 30 do
        local path = file_with(flip_bit(gz, rng:integer(0, #gz * 8 - 1)), ".idx.gz")
        local ok, t = attempt("read_idx", read_idx_cpu, path)
        if ok then check_idx(path, base) end -- a flip in the gzip header's free fields
        local inflated_ok, contents = attempt("read_gzip", data.read_gzip, path)
        if inflated_ok then assert.are.equal(base, contents) end
        assert.are.equal(ok, inflated_ok, "read_idx and read_gzip disagree on " .. path .. ": " .. tostring(t))
      end
      -- two members are one stream; a second member cut short is an error
      check_idx(file_with(gzip(base:sub(1, 10)) .. gzip(base:sub(11)), ".idx.gz"), base)
      assert.is_false((attempt("read_idx", read_idx_cpu, file_with(gz .. gz:sub(1, 15), ".idx.gz"))))
    end
  end))

  it("stops inflating a small gzip bomb at the header's promise", function()
    -- 32 MiB of zeros after a header promising 10 bytes: about 32 KiB on disk
    local raw = path_of("bomb.idx")
    helper.write(raw, idx_file(0x08, { 10 }, ""))
    assert.are.equal(0, (helper.run("head -c 33554432 /dev/zero >> " .. q(raw) .. " && gzip -n " .. q(raw))))
    local started = os.clock()
    local ok, message = attempt("read_idx", read_idx_cpu, raw .. ".gz")
    assert.is_false(ok)
    assert.matches("at least 1 bytes past the 18 its header promises", message, 1, true)
    assert.is_true(os.clock() - started < 1, "took " .. (os.clock() - started) .. " s")
    -- and a header promising far more than the bomb holds is a truncation, found as fast
    helper.write(raw, idx_file(0x08, { 0x7FFFFFFF }, ""))
    assert.are.equal(0, (helper.run("head -c 33554432 /dev/zero >> " .. q(raw) .. " && gzip -f -n " .. q(raw))))
    started = os.clock()
    ok, message = attempt("read_idx", read_idx_cpu, raw .. ".gz")
    assert.is_false(ok)
    assert.matches("is truncated", message, 1, true)
    assert.is_true(os.clock() - started < 3, "took " .. (os.clock() - started) .. " s")
  end)

  it("refuses FIFOs, directories, devices, empty and missing files without blocking", function()
    for _, suffix in ipairs { ".idx", ".idx.gz" } do
      for _, path in ipairs(special_files(suffix)) do
        assert.is_false((attempt("read_idx", read_idx_cpu, path)), path)
        if suffix == ".idx.gz" then assert.is_false((attempt("read_gzip", data.read_gzip, path)), path) end
      end
    end
  end)
end)

-- ---------------------------------------------------------------------------------------
-- The kernel disk cache: an entry damaged between two processes costs a recompile of that
-- kernel, never a wrong result or a crash.

local CACHE_SCRIPT = [[
local a = Tensor.arange(64):cast("float32") / 8
print(string.format("%.6f", ((a * 3 + 1):exp():log() - a):sum():item()))
]]

describe("file fuzzing: kernel disk-cache entries", function()
  it("recompiles an entry that is cut, flipped, emptied, replaced by a FIFO or a directory", FUZZ:reporting(function()
    new_tmp()
    local script = file_with(CACHE_SCRIPT, ".lua")
    local cache = path_of("cache")
    assert.are.equal(0, (helper.run("mkdir -m 700 " .. q(cache))))
    local function run()
      local code, stdout, err = helper.run("env -u DEVICE DEBUG=1 TCL_CACHE=" .. q(cache) .. " " .. q(helper.tcl_bin)
        .. " " .. q(script))
      assert.are.equal(0, code, err)
      local compiled, from_disk = 0, 0
      for n in err:gmatch("(%d+) compiled") do compiled = compiled + tonumber(n) end
      for n in err:gmatch("(%d+) from disk") do from_disk = from_disk + tonumber(n) end
      return stdout, compiled, from_disk
    end
    local expected, compiled = run()
    assert.is_true(compiled >= 1)
    local _, list = helper.run("ls " .. q(cache))
    local name = list:match("[^\n]+")
    assert.is_truthy(name, "no entry in " .. cache)
    local entry = cache .. "/" .. name
    local good = helper.read(entry)
    local rng = splitmix.new(7788 + FUZZ.seed)
    local damages = {
      function() helper.write(entry, "") end,
      function() helper.write(entry, good:sub(1, 31)) end,
      function() helper.write(entry, good:sub(1, 32)) end,
      function() helper.write(entry, good:sub(1, #good - 1)) end,
      function() helper.write(entry, good .. "\0") end,
      function() helper.run("rm -f " .. q(entry) .. " && mkfifo " .. q(entry)) end,
      function() helper.run("rm -f " .. q(entry) .. " && mkdir " .. q(entry)) end,
      function() helper.run("rm -f " .. q(entry) .. " && ln -s /dev/zero " .. q(entry)) end,
    }
    for _ = 1, 6 do
      local bit = rng:integer(0, #good * 8 - 1)
      damages[#damages + 1] = function() helper.write(entry, flip_bit(good, bit)) end
    end
    for i, damage in ipairs(damages) do
      helper.run("rm -rf " .. q(entry))
      helper.write(entry, good)
      damage()
      local got, recompiled, from_disk = run()
      assert.are.equal(expected, got, "damage " .. i)
      assert.are.equal(1, recompiled, "damage " .. i)
      assert.are.equal(compiled - 1, from_disk, "damage " .. i)
    end
  end))
end)

