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
M.TYPE = { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13,
  Q6_K = 14, BF16 = 30 }

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

-- K-quants: super-blocks of 256 values. The writers pack chosen integers by the formats'
-- definitions; values are 0-based in the comments (value v of sub-block j), tables 1-based.

-- The 12 bytes of 8 six-bit scales and 8 six-bit mins (Q4_K, Q5_K): for j = 0..3, byte j holds
-- scale j in its low 6 bits and byte j + 4 min j; for j = 4..7, byte j + 4 holds the low 4 bits
-- of scale j (low nibble) and of min j (high nibble), and the top 2 bits of bytes j - 4 and j
-- hold the top 2 bits of scale j and min j.
function M.k_scales(scales, mins)
  local b = {}
  for j = 0, 3 do
    b[j + 1] = scales[j + 1] & 63
    b[j + 5] = mins[j + 1] & 63
  end
  for j = 4, 7 do
    local sc, m = scales[j + 1], mins[j + 1]
    b[j + 5] = (sc & 15) | ((m & 15) << 4)
    b[j - 3] = b[j - 3] | ((sc >> 4) << 6)
    b[j + 1] = b[j + 1] | ((m >> 4) << 6)
  end
  return string.char(table.unpack(b))
end

-- 256 4-bit values as 128 bytes: 32-byte run r (0..3) holds sub-block 2r's values in its low
-- nibbles and sub-block 2r + 1's in its high nibbles, value v of a sub-block in byte v of the run.
local function k_nibbles(q)
  local b = {}
  for r = 0, 3 do
    for v = 0, 31 do b[32 * r + v + 1] = (q[64 * r + v + 1] & 15) | ((q[64 * r + 32 + v + 1] & 15) << 4) end
  end
  return string.char(table.unpack(b))
end

--- A Q4_K block: float16 bits of d and dmin, 8 scales and 8 mins (0..63), 256 values q (0..15);
-- value i of sub-block j is d * scales[j] * q - dmin * mins[j].
function M.q4_k_block(d_bits, dmin_bits, scales, mins, q)
  return string.pack("<I2I2", d_bits, dmin_bits) .. M.k_scales(scales, mins) .. k_nibbles(q)
end

--- A Q5_K block: as Q4_K with q of 0..31; the fifth bit of value v of sub-block j (0-based) is
-- bit j of high-bit byte v (32 bytes between the scales and the nibbles).
function M.q5_k_block(d_bits, dmin_bits, scales, mins, q)
  local qh = {}
  for v = 0, 31 do
    local byte = 0
    for j = 0, 7 do byte = byte | (((q[32 * j + v + 1] >> 4) & 1) << j) end
    qh[v + 1] = byte
  end
  return string.pack("<I2I2", d_bits, dmin_bits) .. M.k_scales(scales, mins) .. string.char(table.unpack(qh))
    .. k_nibbles(q)
end

--- A Q6_K block: 256 values q (0..63, value d * scales[i // 16 + 1] * (q - 32)), 16 int8 scales,
-- float16 bits of d. Bytes: 128 of low nibbles (ql), 64 of high 2-bit pairs (qh), the scales, d.
-- Half h (0, 1) of 128 values uses ql bytes 64h..64h+63 and qh bytes 32h..32h+31: its value
-- 32k + l (k = 0..3, l = 0..31) has its low 4 bits in ql byte 64h + l (k = 0: low nibble, k = 2:
-- high nibble) or 64h + 32 + l (k = 1 low, k = 3 high), and its top 2 bits in bits 2k, 2k + 1
-- of qh byte 32h + l.
function M.q6_k_block(q, scales, d_bits)
  local ql, qh = {}, {}
  for i = 1, 128 do ql[i] = 0 end
  for i = 1, 64 do qh[i] = 0 end
  for h = 0, 1 do
    for k = 0, 3 do
      for l = 0, 31 do
        local v = q[128 * h + 32 * k + l + 1]
        local at = 64 * h + (k % 2) * 32 + l + 1
        ql[at] = ql[at] | ((v & 15) << (k >= 2 and 4 or 0))
        local hat = 32 * h + l + 1
        qh[hat] = qh[hat] | ((v >> 4) << (2 * k))
      end
    end
  end
  local parts = { string.char(table.unpack(ql)), string.char(table.unpack(qh)) }
  for i = 1, 16 do parts[#parts + 1] = string.pack("<i1", scales[i]) end
  parts[#parts + 1] = string.pack("<I2", d_bits)
  return table.concat(parts)
end

return M
