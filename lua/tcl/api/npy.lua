-- tcl.api.npy — numpy's .npy files to and from tensors (the `tcl run` CLI's inputs and outputs).
-- Layer: lua/tcl/api.
--
--   local npy = require "tcl.api.npy"
--   local t = npy.read("x.npy")          -- a CPU tensor of the file's dtype and shape
--   npy.write("y.npy", t)                -- version 1.0, little-endian, C order
--
-- The format (numpy's NEP 1): the magic "\x93NUMPY", a version, a header length (2 bytes in
-- version 1, 4 in versions 2 and 3), then a Python dict literal with 'descr', 'fortran_order'
-- and 'shape', padded so the data starts at a multiple of 64; the data follows in C order.
-- Only C-order files are read (fortran_order True is an error, not a silent transpose).
local bytes = require "tcl.api.bytes"
local class = require "tcl.api.class"

local M = {}

-- numpy type code (kind and size) <-> tcl dtype; numpy has no bfloat16.
local DTYPE_OF = {
  b1 = "bool", i1 = "int8", u1 = "uint8", i2 = "int16", u2 = "uint16", i4 = "int32", u4 = "uint32",
  i8 = "int64", u8 = "uint64", f2 = "float16", f4 = "float32", f8 = "float64",
}
local CODE_OF = {}
for code, dtype in pairs(DTYPE_OF) do CODE_OF[dtype] = code end

local MAGIC = "\x93NUMPY"

local function fail(fn, path, fmt, ...)
  error(string.format("%s: %s: " .. fmt, fn, path, ...), 3)
end

--- The tensor stored in the .npy file at path (on opts.device, default CPU). Errors name the
--- file and what is wrong: not a .npy file, a truncated header or data, an unsupported dtype
--- (complex, strings, objects, bfloat16) or fortran_order True.
function M.read(path, opts)
  if type(path) ~= "string" then error("npy.read: path must be a string, got " .. type(path), 2) end
  local f, err = io.open(path, "rb")
  if not f then error("npy.read: " .. tostring(err), 2) end
  local s = f:read("a")
  f:close()
  if s:sub(1, 6) ~= MAGIC then fail("npy.read", path, "not a .npy file (no \\x93NUMPY magic)") end
  if #s < 10 then fail("npy.read", path, "truncated header") end
  local major = s:byte(7)
  local header_len, start
  if major == 1 then
    header_len, start = string.unpack("<I2", s, 9), 11
  elseif major == 2 or major == 3 then
    if #s < 12 then fail("npy.read", path, "truncated header") end
    header_len, start = string.unpack("<I4", s, 9), 13
  else
    fail("npy.read", path, "unsupported .npy version %d", major)
  end
  if start + header_len - 1 > #s then fail("npy.read", path, "truncated header (%d bytes announced)", header_len) end
  local header = s:sub(start, start + header_len - 1)
  local descr = header:match("['\"]descr['\"]%s*:%s*['\"]([^'\"]*)['\"]")
  local fortran = header:match("['\"]fortran_order['\"]%s*:%s*(%a+)")
  local shape_text = header:match("['\"]shape['\"]%s*:%s*(%b())")
  if not descr or not fortran or not shape_text then
    fail("npy.read", path, "header without descr, fortran_order and shape: %s", header)
  end
  if fortran ~= "False" then
    fail("npy.read", path, "fortran_order %s is not supported (save the array C-contiguous: np.ascontiguousarray)",
      fortran)
  end
  local order, code = descr:match("^([<>|=]?)(%a%d+)$")
  local dtype = code and DTYPE_OF[code]
  if not dtype then fail("npy.read", path, "dtype '%s' is not supported (%s)", descr, "bool, ints, uints, floats") end
  local shape = {}
  for n in shape_text:gmatch("%d+") do shape[#shape + 1] = math.tointeger(tonumber(n)) end
  local numel = 1
  for _, n in ipairs(shape) do numel = numel * n end
  local itemsize = tonumber(code:sub(2))
  local data_start = start + header_len - 1
  if #s - data_start < numel * itemsize then
    fail("npy.read", path, "truncated data: %d bytes, shape (%s) of %s needs %d", #s - data_start,
      table.concat(shape, ", "), descr, numel * itemsize)
  end
  return bytes.from_bytes(s, dtype, shape, { offset = data_start, big_endian = order == ">" and itemsize > 1,
    device = opts and opts.device or "CPU" })
end

--- Writes tensor t (realized) to path as a version 1.0 .npy file: little-endian, C order.
--- bfloat16 has no numpy dtype: an error (convert it first).
function M.write(path, t)
  if type(path) ~= "string" then error("npy.write: path must be a string, got " .. type(path), 2) end
  if not class.is_tensor(t) then error("npy.write: expected a Tensor, got " .. type(t), 2) end
  local dtype = tostring(t.dtype)
  local code = CODE_OF[dtype]
  if not code then fail("npy.write", path, "numpy has no dtype for %s (convert the tensor first)", dtype) end
  local shape = t:size()
  local dims = {}
  for i, n in ipairs(shape) do dims[i] = tostring(n) end
  local shape_text = #dims == 1 and ("(" .. dims[1] .. ",)") or ("(" .. table.concat(dims, ", ") .. ")")
  local endian = (code == "b1" or code == "i1" or code == "u1") and "|" or "<"
  local header = string.format("{'descr': '%s%s', 'fortran_order': False, 'shape': %s, }", endian, code, shape_text)
  local total = 10 + #header + 1
  header = header .. string.rep(" ", (64 - total % 64) % 64) .. "\n"
  local f, err = io.open(path, "wb")
  if not f then error("npy.write: " .. tostring(err), 2) end
  f:write(MAGIC, "\1\0", string.pack("<I2", #header), header, bytes.to_bytes(t))
  f:close()
end

return M
