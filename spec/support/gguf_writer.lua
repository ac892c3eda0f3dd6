-- spec/support/gguf_writer.lua — GGUF files written byte by byte from the format's public
-- description (for the specs that read them back with tcl.nn.state.gguf_load), independent of
-- the reader: every number little-endian; the magic "GGUF", uint32 version, uint64 tensor
-- count, uint64 metadata count; metadata entries (string key, uint32 value type, value);
-- tensor infos (string name, uint32 dim count, uint64 dims innermost first, uint32 type,
-- uint64 offset into the data section); padding to the alignment; the data.
local M = {}

-- metadata value type codes
M.VALUE = { uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5, float32 = 6, bool = 7,
  string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12 }
local FORMAT = { uint8 = "<I1", int8 = "<i1", uint16 = "<I2", int16 = "<i2", uint32 = "<I4", int32 = "<i4",
  float32 = "<f", uint64 = "<I8", int64 = "<i8", float64 = "<d" }

-- tensor type codes (ggml's numbering)
M.TYPE = { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30 }

function M.string(s) return string.pack("<I8", #s) .. s end

--- The bytes of a value of type name vt; an array is { item = type name, values... }.
function M.value(vt, v)
  if vt == "string" then return M.string(v) end
  if vt == "bool" then return string.char(v and 1 or 0) end
  if vt == "array" then
    local parts = { string.pack("<I4I8", M.VALUE[v.item], #v) }
    for i = 1, #v do parts[#parts + 1] = M.value(v.item, v[i]) end
    return table.concat(parts)
  end
  return string.pack(FORMAT[vt], v)
end

--- A metadata entry: key, value type name, value.
function M.entry(key, vt, v) return M.string(key) .. string.pack("<I4", M.VALUE[vt]) .. M.value(vt, v) end

--- A tensor info: name, GGUF dims (innermost first), type name, offset.
function M.tensor_info(name, dims, type_name, offset)
  local parts = { M.string(name), string.pack("<I4", #dims) }
  for _, d in ipairs(dims) do parts[#parts + 1] = string.pack("<I8", d) end
  parts[#parts + 1] = string.pack("<I4I8", M.TYPE[type_name] or type_name, offset)
  return table.concat(parts)
end

--- A whole file. spec: version (3), alignment (32; written as general.alignment when
--  spec.write_alignment), metadata (a list of raw entries from M.entry), tensors (a list of
--  { name, dims, type, data }: offsets laid out in order, each aligned). Returns the bytes
--  and the data section's start.
function M.file(spec)
  local alignment = spec.alignment or 32
  local metadata = spec.metadata or {}
  local tensors = spec.tensors or {}
  local infos, data, offset = {}, {}, 0
  for i, t in ipairs(tensors) do
    infos[i] = M.tensor_info(t.name, t.dims, t.type, t.offset or offset)
    local padded = t.data .. string.rep("\0", (alignment - #t.data % alignment) % alignment)
    data[i] = padded
    offset = offset + #padded
  end
  local head = "GGUF" .. string.pack("<I4I8I8", spec.version or 3, #tensors, #metadata) .. table.concat(metadata)
    .. table.concat(infos)
  local start = (#head + alignment - 1) // alignment * alignment
  return head .. string.rep("\0", start - #head) .. table.concat(data), start
end

-- float16 bits -> number, from the IEEE 754 binary16 definition
function M.half(bits)
  local sign = (bits >> 15) == 1 and -1 or 1
  local e, m = (bits >> 10) & 31, bits & 1023
  if e == 0 then return sign * m * 2.0 ^ -24 end
  if e == 31 then return m == 0 and sign * math.huge or 0 / 0 end
  return sign * (1 + m / 1024) * 2.0 ^ (e - 15)
end

--- A Q8_0 block: float16 scale bits, 32 int8 values.
function M.q8_0_block(scale_bits, q)
  local parts = { string.pack("<I2", scale_bits) }
  for j = 1, 32 do parts[#parts + 1] = string.pack("<i1", q[j]) end
  return table.concat(parts)
end

--- A Q4_0 block: float16 scale bits, 32 nibbles 0..15 (byte j holds value j low, j + 16 high).
function M.q4_0_block(scale_bits, q)
  local parts = { string.pack("<I2", scale_bits) }
  for j = 1, 16 do parts[#parts + 1] = string.char(q[j] | (q[j + 16] << 4)) end
  return table.concat(parts)
end

--- A Q4_1 block: float16 scale and minimum bits, then the nibbles as Q4_0.
function M.q4_1_block(scale_bits, min_bits, q)
  return string.pack("<I2", scale_bits) .. M.q4_0_block(min_bits, q)
end

return M
