-- tcl.onnx.tensor_proto — ONNX TensorProto <-> tcl: the data-type table, tensors made
-- from a decoded TensorProto (raw_data viewed in the file's mapping when it is aligned for the
-- dtype, copied otherwise), and host-side Lua values of small tensors (what shape arithmetic reads).
local core = require "tcl.core"
local runtime = require "tcl.runtime"
local class = require "tcl.api.class"
local nodes = require "tcl.api.nodes"
local Tensor = require "tcl.api.tensor"
local buffers = require "tcl.schedule.buffers"
local wire = require "tcl.onnx.wire"
local schema = require "tcl.onnx.schema"

local dtypes = core.dtypes
local M = {}

-- TensorProto.DataType -> {tcl dtype name, how one element is packed in the typed field, the field}
M.DATA_TYPES = {
  [1] = { name = "FLOAT", dtype = "float32", fmt = "<f", field = "float_data" },
  [2] = { name = "UINT8", dtype = "uint8", fmt = "<B", field = "int32_data" },
  [3] = { name = "INT8", dtype = "int8", fmt = "<b", field = "int32_data" },
  [4] = { name = "UINT16", dtype = "uint16", fmt = "<H", field = "int32_data" },
  [5] = { name = "INT16", dtype = "int16", fmt = "<h", field = "int32_data" },
  [6] = { name = "INT32", dtype = "int32", fmt = "<i4", field = "int32_data" },
  [7] = { name = "INT64", dtype = "int64", fmt = "<i8", field = "int64_data" },
  [8] = { name = "STRING" },
  [9] = { name = "BOOL", dtype = "bool", fmt = "<B", field = "int32_data" },
  [10] = { name = "FLOAT16", dtype = "float16", fmt = "<I2", field = "int32_data" },
  [11] = { name = "DOUBLE", dtype = "float64", fmt = "<d", field = "double_data" },
  [12] = { name = "UINT32", dtype = "uint32", fmt = "<I4", field = "uint64_data" },
  [13] = { name = "UINT64", dtype = "uint64", fmt = "<i8", field = "uint64_data" },
  [14] = { name = "COMPLEX64" },
  [15] = { name = "COMPLEX128" },
  [16] = { name = "BFLOAT16", dtype = "bfloat16", fmt = "<I2", field = "int32_data" },
}
M.CODE_OF = {}
for code, info in pairs(M.DATA_TYPES) do
  if info.dtype then M.CODE_OF[info.dtype] = code end
end

--- The tcl dtype name of an ONNX data type code, or nil and a reason.
function M.dtype_of(code)
  local info = M.DATA_TYPES[code]
  if not info then return nil, string.format("unknown ONNX data type %s", tostring(code)) end
  if not info.dtype then return nil, string.format("ONNX data type %s is not supported by tcl", info.name) end
  return info.dtype
end

local function numel_of(dims)
  local n = 1
  for _, d in ipairs(dims) do
    if d < 0 then return nil end
    n = n * d
  end
  return n
end

-- {mapping, offset, length} of a tensor stored outside the model file (external_data).
local function external_region(proto, model_dir, fail)
  local info = {}
  for _, entry in ipairs(proto.external_data or {}) do info[entry.key] = entry.value end
  local location = info.location
  if not location or location == "" then fail("external data without a location") end
  if location:sub(1, 1) == "/" or location:find("%.%.") then
    fail("external data location '%s' leaves the model's folder", location)
  end
  local path = (model_dir or ".") .. "/" .. location
  local ok, map = pcall(runtime.map_file, path)
  if not ok then fail("external data: %s", (tostring(map):gsub("^runtime%.map_file: ", ""))) end
  local offset = tonumber(info.offset or "0")
  local length = info.length and tonumber(info.length) or (map.size - offset)
  if math.type(offset) ~= "integer" or math.type(length) ~= "integer" or offset < 0 or length < 0
     or offset + length > map.size then
    fail("external data of '%s': offset %s length %s outside the %d bytes of '%s'", tostring(proto.name),
      tostring(info.offset), tostring(info.length), map.size, location)
  end
  return map, offset, length
end

--- A Tensor holding the decoded TensorProto `proto` read through `reader` (wire reader of its
--- file) on device (default CPU), and whether it views the file. fail(fmt, ...) raises the
--- caller's error. raw_data and external data are viewed without a copy when the region is
--- aligned as the device's buffers need (CPU: 64 bytes; protobuf does not align raw_data, so
--- most inline weights are one memcpy, done in C; EMU: the element size); typed fields
--- (float_data...) are packed into bytes.
function M.to_tensor(proto, reader, fail, model_dir, device)
  device = device or "CPU"
  local code = proto.data_type or 0
  local dtype, why = M.dtype_of(code)
  if not dtype then fail("tensor '%s': %s", tostring(proto.name), why) end
  local info = M.DATA_TYPES[code]
  local dims = proto.dims or {}
  local numel = numel_of(dims)
  if not numel then fail("tensor '%s' has a negative dim", tostring(proto.name)) end
  local itemsize = dtypes[dtype].itemsize
  local map, offset, length
  if proto.data_location == 1 then
    map, offset, length = external_region(proto, model_dir, fail)
  elseif proto.raw_data then
    map, offset, length = reader.map, proto.raw_data.offset, proto.raw_data.length
  end
  if length then
    if length ~= numel * itemsize then
      fail("tensor '%s' of shape [%s] and type %s has %d bytes of data, expected %d", tostring(proto.name),
        table.concat(dims, ","), info.name, length, numel * itemsize)
    end
    if map and numel > 0 then
      -- devices whose buffers live in host memory (CPU, EMU) view the mapping; others get a copy
      local ok, storage, viewed = pcall(map.buffer, map, dtypes[dtype], numel, offset, device)
      if ok then return nodes.reshape(class.wrap(buffers.from_storage(storage), { numel }, device), dims), viewed end
      storage = map:buffer(dtypes[dtype], numel, offset, "CPU")
      return nodes.reshape(class.wrap(buffers.from_storage(storage), { numel }, "CPU"), dims):to(device), false
    end
    local bytes = map and "" or reader:bytes(offset, length)
    return Tensor.from_bytes(bytes, dtype, dims, { device = device })
  end
  local values = proto[info.field] or {}
  if #values ~= numel then
    fail("tensor '%s' of shape [%s] has %d values in %s, expected %d", tostring(proto.name), table.concat(dims, ","),
      #values, info.field, numel)
  end
  local parts, fmt = {}, info.fmt
  for i = 1, numel do parts[i] = string.pack(fmt, values[i]) end
  return Tensor.from_bytes(table.concat(parts), dtype, dims, { device = device })
end

--- The values of the TensorProto as a flat Lua list (numbers; booleans for BOOL), decoded in Lua
--- without tcl: the conformance runner's independent reading of expected outputs, and the host
--- values of small constants. nil when the data type has no Lua reading (STRING, COMPLEX).
function M.to_lua(proto, reader, model_dir)
  local info = M.DATA_TYPES[proto.data_type or 0]
  if not info or not info.dtype then return nil end
  local numel = numel_of(proto.dims or {}) or 0
  local out = {}
  local half = info.dtype == "float16" or info.dtype == "bfloat16"
  local function fix(v)
    if info.dtype == "bool" then return v ~= 0 end
    if info.dtype == "float16" then return M.half_to_number(v) end
    if info.dtype == "bfloat16" then return (string.unpack("<f", string.pack("<I4", v << 16))) end
    if info.dtype == "uint32" then return v & 0xffffffff end
    return v
  end
  local bytes
  if proto.data_location == 1 then
    local map, offset, length = external_region(proto, model_dir,
      function(fmt, ...) error(string.format(fmt, ...), 0) end)
    bytes = map:read(offset, length)
  elseif proto.raw_data then
    bytes = reader:bytes(proto.raw_data.offset, proto.raw_data.length)
  end
  if bytes then
    local fmt = half and "<I2" or info.fmt
    local size = string.packsize(fmt)
    if #bytes ~= numel * size then return nil end
    for i = 1, numel do out[i] = fix((string.unpack(fmt, bytes, (i - 1) * size + 1))) end
  else
    local values = proto[info.field] or {}
    for i = 1, math.min(#values, numel) do out[i] = fix(values[i]) end
  end
  return out
end

--- An IEEE half's bits as a number.
function M.half_to_number(bits)
  local sign = (bits & 0x8000) ~= 0 and -1 or 1
  local exponent, mantissa = (bits >> 10) & 0x1f, bits & 0x3ff
  if exponent == 0 then return sign * mantissa * 2.0 ^ -24 end
  if exponent == 31 then return mantissa == 0 and sign * math.huge or 0 / 0 end
  return sign * (1 + mantissa / 1024) * 2.0 ^ (exponent - 15)
end

--- Reads a serialized TensorProto / SequenceProto / OptionalProto file (the suite's .pb files).
function M.read_file(path, message)
  local reader = wire.open(path)
  return reader:decode(schema[message or "TensorProto"]), reader
end

return M
