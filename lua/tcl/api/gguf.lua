-- tcl.api.gguf — the GGUF checkpoint container (llama.cpp's file format): metadata, tensor
-- table and tensor data, with the quantized block types dequantized lazily by Tensor ops.
-- Layer: lua/tcl/api. (tcl.nn.state.gguf_load)
--
--   local tensors, metadata, infos = tcl.nn.state.gguf_load("model.gguf")
--   metadata["general.architecture"]                  -- "llama"
--   tensors["blk.0.attn_q.weight"]                    -- float32, dequantized lazily when quantized
--   infos["blk.0.attn_q.weight"].blocks               -- the raw uint8 blocks of a quantized tensor
--
-- The layout, as the format's public description gives it, every number little-endian:
--   header: the magic "GGUF", uint32 version (2 and 3 are read), uint64 tensor count, uint64
--     metadata count;
--   metadata: per entry a string key, a uint32 value type and the value. A string is a uint64
--     byte count and the bytes; an array a uint32 item type, a uint64 count and the items
--     (arrays may nest). Value types: 0 uint8, 1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32,
--     6 float32, 7 bool (one byte, 0 or 1), 8 string, 9 array, 10 uint64, 11 int64, 12 float64;
--   tensor infos: per tensor a string name, a uint32 dim count, uint64 dims, a uint32 tensor
--     type and a uint64 offset into the data section (a multiple of the alignment);
--   padding to the alignment (metadata "general.alignment", default 32), then the data section.
-- GGUF lists a tensor's dims innermost (contiguous) first; tcl's shape is outermost first, so
-- dims {4096, 11008} give a tensor of shape {11008, 4096} (rows of 4096).
--
-- F32, F16, BF16 (and the integer types I8, I16, I32, I64 and F64) load as tensors of that
-- dtype. Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K load as their raw blocks (a uint8 tensor
-- {blocks, block bytes}) and a float32 tensor that dequantizes them with elementwise ops (bytes -> uint16 -> bitcast to
-- float16 for the scales, masks and divisions for the nibbles): it stays lazy, so a matmul that
-- uses the weight dequantizes the blocks inside its own kernel and no float copy is stored.
-- Blocks of 32 values each: Q8_0 a float16 scale d and 32 int8 q (value d*q); Q4_0 a float16 d
-- and 16 bytes whose low nibbles are values 1..16 and high nibbles 17..32 (value d*(q-8));
-- Q4_1 a float16 d, a float16 m and the nibbles as Q4_0 (value d*q + m). The K-quants hold
-- super-blocks of 256 values in 8 sub-blocks of 32 (Q4_K, Q5_K: 6-bit scales and mins, value
-- d*scale*q - dmin*min) or 16 of 16 (Q6_K: int8 scales, value d*scale*(q - 32)); their byte
-- layouts are given where they are dequantized below. A quantized tensor's rows (its innermost
-- GGUF dim) must be whole blocks.
-- Like safe_load, the tensors are copied out of the mapping (a rewritten or truncated file
-- must not change them or crash the reader). Metadata uint64 values of 2^63 or more are
-- given as floats (Lua has no unsigned 64-bit integers). Every malformed file is an error
-- naming the file, the byte offset and the problem.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local state = require "tcl.api.state"
local nodes = require "tcl.api.nodes"
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local shapes = require "tcl.shape"

local fail = check.fail
local dtypes = core.dtypes
local M = {}

local FN = "gguf_load"
M.MAGIC = "GGUF"
M.DEFAULT_ALIGNMENT = 32
-- nested arrays deeper than this are refused (a file cannot make the reader recurse without end)
M.MAX_ARRAY_DEPTH = 16

-- metadata value types: name, string.unpack format, bytes
local VALUE_TYPES = {
  [0] = { "uint8", "<I1", 1 }, [1] = { "int8", "<i1", 1 }, [2] = { "uint16", "<I2", 2 },
  [3] = { "int16", "<i2", 2 }, [4] = { "uint32", "<I4", 4 }, [5] = { "int32", "<i4", 4 },
  [6] = { "float32", "<f", 4 }, [7] = { "bool", "<I1", 1 }, [8] = { "string" }, [9] = { "array" },
  [10] = { "uint64", "<I8", 8 }, [11] = { "int64", "<i8", 8 }, [12] = { "float64", "<d", 8 },
}
M.VALUE_TYPE_NAMES = {}
for code, t in pairs(VALUE_TYPES) do M.VALUE_TYPE_NAMES[code] = t[1] end

-- tensor types (ggml's numbering): name, and either dtype (read directly) or block = {values,
-- bytes} with dequantize(blocks) -> float32 of shape {blocks, values}
local TENSOR_TYPES = {
  [0] = { name = "F32", dtype = dtypes.float32 }, [1] = { name = "F16", dtype = dtypes.float16 },
  [2] = { name = "Q4_0", block = { 32, 18 } }, [3] = { name = "Q4_1", block = { 32, 20 } },
  [6] = { name = "Q5_0" }, [7] = { name = "Q5_1" }, [8] = { name = "Q8_0", block = { 32, 34 } },
  [9] = { name = "Q8_1" }, [10] = { name = "Q2_K" }, [11] = { name = "Q3_K" },
  [12] = { name = "Q4_K", block = { 256, 144 } }, [13] = { name = "Q5_K", block = { 256, 176 } },
  [14] = { name = "Q6_K", block = { 256, 210 } }, [15] = { name = "Q8_K" }, [16] = { name = "IQ2_XXS" },
  [17] = { name = "IQ2_XS" }, [18] = { name = "IQ3_XXS" }, [19] = { name = "IQ1_S" }, [20] = { name = "IQ4_NL" },
  [21] = { name = "IQ3_S" }, [22] = { name = "IQ2_S" }, [23] = { name = "IQ4_XS" },
  [24] = { name = "I8", dtype = dtypes.int8 }, [25] = { name = "I16", dtype = dtypes.int16 },
  [26] = { name = "I32", dtype = dtypes.int32 }, [27] = { name = "I64", dtype = dtypes.int64 },
  [28] = { name = "F64", dtype = dtypes.float64 }, [29] = { name = "IQ1_M" },
  [30] = { name = "BF16", dtype = dtypes.bfloat16 },
}
local SUPPORTED = "F32, F16, BF16, F64, I8, I16, I32, I64, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K"
M.SUPPORTED_TYPES = SUPPORTED

--- The GGUF name of tensor type code ("Q4_0" for 2), or nil when unknown.
function M.type_name(code) return TENSOR_TYPES[code] and TENSOR_TYPES[code].name end

--- The GGUF code of a tensor type name (2 for "Q4_0"), or nil.
function M.type_code(name)
  for code, t in pairs(TENSOR_TYPES) do
    if t.name == name then return code end
  end
  return nil
end

-- ---------------------------------------------------------------------------------------
-- dequantization, as Tensor ops over a {blocks, bytes} uint8 tensor

-- The float16 stored little-endian at 1-based byte `at` of each block, as float32 {blocks, 1}.
local function half_at(raw, at)
  local lo = raw:narrow(2, at, 1):cast("uint16")
  local hi = raw:narrow(2, at + 1, 1):cast("uint16")
  return (lo + hi * 256):bitcast("float16"):float()
end

-- The 32 nibbles of the 16 bytes from byte `at`: low nibbles first, then the high ones.
local function nibbles_at(raw, at)
  local qs = raw:narrow(2, at, 16)
  local low = qs:bitwise_and(15)
  local high = qs:floordiv(16) -- the logical shift right by 4 of an unsigned byte
  return class.Tensor.cat({ low, high }, 2):float()
end

-- x >> bits for unsigned bytes (the floor division by 2^bits: no shift op is needed)
local function shift_right(x, bits) return bits == 0 and x or x:floordiv(1 << bits) end

-- K-quant pieces: tensors of shape {blocks, ...} whose trailing axes are laid out as listed and
-- stacked along a new axis `axis` (the pieces' own shapes with a 1 inserted there).
local function stack(pieces, axis)
  local parts = {}
  for i, p in ipairs(pieces) do
    local shape = check.copy(p._shape)
    table.insert(shape, axis, 1)
    parts[i] = p:reshape(shape)
  end
  return class.Tensor.cat(parts, axis)
end

-- Q4_K and Q5_K's 8 six-bit sub-block scales and 8 mins, packed in the 12 bytes from `at`:
-- bytes 1-4 hold scales 1-4 in their low 6 bits, bytes 5-8 mins 1-4; bytes 9-12 hold scales
-- 5-8 in their low nibbles and mins 5-8 in their high nibbles, whose top 2 bits are the top
-- 2 bits of bytes 1-4 (scales) and 5-8 (mins). Returns scales and mins, float32 {blocks, 8}.
local function k_scales_at(raw, at)
  local first, second, third = raw:narrow(2, at, 4), raw:narrow(2, at + 4, 4), raw:narrow(2, at + 8, 4)
  local scales = class.Tensor.cat({ first:bitwise_and(63),
    third:bitwise_and(15) + shift_right(first, 6) * 16 }, 2)
  local mins = class.Tensor.cat({ second:bitwise_and(63),
    shift_right(third, 4) + shift_right(second, 6) * 16 }, 2)
  return scales:float(), mins:float()
end

-- The 256 nibbles of Q4_K and Q5_K's 128 bytes from `at`, uint8 {blocks, 8, 32}: each run of
-- 32 bytes holds sub-block 2i - 1 in its low nibbles and sub-block 2i in its high nibbles.
local function k_nibbles_at(raw, at)
  local runs = raw:narrow(2, at, 128):reshape(raw._shape[1], 4, 32)
  return stack({ runs:bitwise_and(15), shift_right(runs, 4) }, 3):reshape(raw._shape[1], 8, 32)
end

-- d * scale * q - dmin * min per sub-block of 32 (Q4_K, Q5_K): q is {blocks, 8, 32}
local function k_scaled(raw, q, scales_at)
  local blocks = raw._shape[1]
  local scales, mins = k_scales_at(raw, scales_at)
  local d, dmin = half_at(raw, 1), half_at(raw, 3)
  return (q:float() * (scales * d):reshape(blocks, 8, 1) - (mins * dmin):reshape(blocks, 8, 1))
    :reshape(blocks, 256)
end

-- Q4_K (144 bytes): float16 d, float16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles.
local function q4_k(raw) return k_scaled(raw, k_nibbles_at(raw, 17), 5) end

-- Q5_K (176 bytes): as Q4_K with 32 bytes of high bits after the scales: bit j - 1 of byte l
-- is the fifth bit (16) of value l of sub-block j.
local function q5_k(raw)
  local blocks = raw._shape[1]
  local qh = raw:narrow(2, 17, 32)
  local planes = {}
  for j = 1, 8 do planes[j] = shift_right(qh, j - 1):bitwise_and(1) end
  return k_scaled(raw, k_nibbles_at(raw, 49) + stack(planes, 2):reshape(blocks, 8, 32) * 16, 5)
end

-- Q6_K (210 bytes): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales (one
-- per 16 values), float16 d; value d * scale * (q - 32). Each half of 128 values takes 64 bytes
-- of ql and 32 of qh: its value 32k + l (k = 0..3) has the low nibble of ql byte l (k = 0) or
-- l + 32 (k = 1), the high nibble of those (k = 2, 3), and bits 2k, 2k + 1 of qh byte l.
local function q6_k(raw)
  local blocks = raw._shape[1]
  local ql = raw:narrow(2, 1, 128):reshape(blocks, 2, 2, 32) -- half, which 32 bytes, l
  local low = stack({ ql:bitwise_and(15), shift_right(ql, 4) }, 3):reshape(blocks, 2, 4, 32)
  local qh = raw:narrow(2, 129, 64):reshape(blocks, 2, 32)
  local high = {}
  for k = 1, 4 do high[k] = shift_right(qh, 2 * (k - 1)):bitwise_and(3) end
  local q = (low + stack(high, 3) * 16):float() - 32
  local scales = raw:narrow(2, 193, 16):bitcast("int8"):float() * half_at(raw, 209)
  return (q:reshape(blocks, 16, 16) * scales:reshape(blocks, 16, 1)):reshape(blocks, 256)
end

local DEQUANTIZE = {
  Q8_0 = function(raw) return raw:narrow(2, 3, 32):bitcast("int8"):float() * half_at(raw, 1) end,
  Q4_0 = function(raw) return (nibbles_at(raw, 3) - 8) * half_at(raw, 1) end,
  Q4_1 = function(raw) return nibbles_at(raw, 5) * half_at(raw, 1) + half_at(raw, 3) end,
  Q4_K = q4_k, Q5_K = q5_k, Q6_K = q6_k,
}

--- The lazy float32 tensor of shape `shape` that the raw blocks (a uint8 tensor {blocks,
--  block bytes}) of GGUF type type_name ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K") hold.
function M.dequantize(raw, type_name, shape)
  local f = DEQUANTIZE[type_name]
  if not f then
    fail("gguf.dequantize", "unsupported block type '%s' (supported: Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
      tostring(type_name))
  end
  local bytes = TENSOR_TYPES[M.type_code(type_name)].block[2]
  if not class.is_tensor(raw) or raw.dtype ~= dtypes.uint8 or #raw._shape ~= 2 or raw._shape[2] ~= bytes then
    fail("gguf.dequantize", "expected the raw %s blocks as a uint8 tensor {blocks, %d}", type_name, bytes)
  end
  local weight = f(raw):reshape(check.copy(shape))
  -- recomputed where it is used, never stored as floats by tcl.jit's warm-up (tcl.api.jit)
  rawset(weight, "_recompute", true)
  return weight
end

-- ---------------------------------------------------------------------------------------
-- reading

-- A cursor over the mapped file; reads go through a window so that a header of many small
-- values is not one map:read per value.
local WINDOW = 1 << 20

local function cursor(map, path)
  local c = { pos = 0, size = map.size, window = "", window_at = 0 }
  function c.bad(at, fmt, ...)
    fail(FN, "'%s': at byte %d: " .. fmt, path, at, ...)
  end
  -- `what` names the value in messages, and `suffix` (optional) is appended to it: the two are
  -- joined only for a message, not for each of the many values of a large vocabulary
  function c.bytes(n, what, suffix)
    if n > c.size - c.pos then
      c.bad(c.pos, "%s%s needs %d bytes, past the end of the file (%d bytes)", what, suffix or "", n, c.size)
    end
    local from = c.pos - c.window_at
    if from < 0 or from + n > #c.window then
      c.window_at = c.pos
      c.window = map:read(c.pos, math.min(math.max(n, WINDOW), c.size - c.pos))
      from = 0
    end
    c.pos = c.pos + n
    return c.window:sub(from + 1, from + n)
  end
  function c.number(fmt, n, what, suffix) return (string.unpack(fmt, c.bytes(n, what, suffix))) end
  function c.count(what, suffix) -- a uint64 count, refused when it has the top bit set
    local at = c.pos
    local n = c.number("<i8", 8, what, suffix)
    if n < 0 then c.bad(at, "%s%s is 2^63 or more", what, suffix or "") end
    return n, at
  end
  function c.string(what)
    local n, at = c.count(what, "'s length")
    if n > c.size - c.pos then
      c.bad(at, "%s of %d bytes runs past the end of the file (%d bytes)", what, n, c.size)
    end
    return c.bytes(n, what)
  end
  return c
end

local function read_value(c, code, what, depth)
  local vt = VALUE_TYPES[code]
  if not vt then
    c.bad(c.pos - 4, "%s has unknown value type %d (0..12 are defined)", what, code)
  end
  if vt[1] == "string" then return c.string(what) end
  if vt[1] == "array" then
    if depth >= M.MAX_ARRAY_DEPTH then
      c.bad(c.pos, "%s nests arrays more than %d deep", what, M.MAX_ARRAY_DEPTH)
    end
    local item = c.number("<I4", 4, what, "'s item type")
    if not VALUE_TYPES[item] then
      c.bad(c.pos - 4, "%s has unknown item type %d (0..12 are defined)", what, item)
    end
    local n, at = c.count(what, "'s length")
    -- each item takes at least one byte (a string eight, an array twelve): refuse the count at once
    local least = VALUE_TYPES[item][3] or (item == 8 and 8 or 12)
    if n > (c.size - c.pos) // least then
      c.bad(at, "%s declares %d items, more than the rest of the file (%d bytes) holds", what, n, c.size - c.pos)
    end
    local list = {}
    -- an item's messages name the array (and the index, for the rare nested arrays)
    for i = 1, n do list[i] = read_value(c, item, item == 9 and what .. "[" .. i .. "]" or what, depth + 1) end
    return list
  end
  local at = c.pos
  local v = c.number(vt[2], vt[3], what)
  if vt[1] == "bool" then
    if v > 1 then c.bad(at, "%s is a bool of byte value %d (0 or 1)", what, v) end
    return v == 1
  end
  if vt[1] == "uint64" and v < 0 then return v + 18446744073709551616.0 end
  return v
end

local MAX_DIMS = shapes.MAX_NDIM
local LIMIT = 1 << 53

-- One tensor info: name, shape (outermost first), type, offset; with the byte count.
local function read_tensor_info(c, index, names)
  local at = c.pos
  local name = c.string(string.format("tensor %d's name", index))
  if names[name] then c.bad(at, "tensor name '%s' appears twice", name) end
  names[name] = true
  local function bad(where, fmt, ...) c.bad(where, "tensor '%s' " .. fmt, name, ...) end
  local ndims_at = c.pos
  local ndims = c.number("<I4", 4, "tensor '" .. name .. "''s dim count")
  if ndims > MAX_DIMS then bad(ndims_at, "has %d dims, more than the %d a tensor may have", ndims, MAX_DIMS) end
  local dims, numel = {}, 1
  for i = 1, ndims do
    local dim_at = c.pos
    local n = c.number("<i8", 8, "tensor '" .. name .. "''s dims")
    if n < 0 or n > LIMIT then
      bad(dim_at, "has size %s in GGUF dim %d, more than 2^53", n < 0 and "2^63 or more" or n, i)
    end
    if n > 0 and numel > LIMIT // n then bad(dim_at, "has dims whose product is more than 2^53") end
    dims[i], numel = n, numel * n
  end
  local type_at = c.pos
  local code = c.number("<I4", 4, "tensor '" .. name .. "''s type")
  local tt = TENSOR_TYPES[code]
  if not tt or not (tt.dtype or tt.block) then
    bad(type_at, "has type %s, which is not supported (supported: %s)",
      tt and tt.name or string.format("%d (unknown)", code), SUPPORTED)
  end
  local offset_at = c.pos
  local offset = c.number("<i8", 8, "tensor '" .. name .. "''s offset")
  if offset < 0 then bad(offset_at, "has a data offset of 2^63 or more") end
  local nbytes
  if tt.block then
    local per, bytes = tt.block[1], tt.block[2]
    if ndims == 0 or dims[1] % per ~= 0 then
      bad(type_at, "is %s with rows of %d values, not a multiple of the block size %d", tt.name,
        ndims == 0 and 1 or dims[1], per)
    end
    nbytes = numel // per * bytes
  else
    nbytes = numel * tt.dtype.itemsize
  end
  local shape = {}
  for i = 1, ndims do shape[i] = dims[ndims + 1 - i] end
  return { name = name, dims = dims, shape = shape, numel = numel, type = tt.name, dtype = tt.dtype,
    block = tt.block, offset = offset, nbytes = nbytes, at = at }
end

local LOAD_OPTIONS = { device = true }

--- Reads the GGUF file at path. opts: device (default: the default device). Returns
--  tensors ({ [name] = tensor }: F32/F16/BF16/... as that dtype, quantized types as a lazy
--  float32 dequantization), metadata ({ [key] = value }: integers, floats, booleans,
--  strings and lists of them) and infos ({ [name] = { shape (tcl's, outermost first), dims
--  (GGUF's, innermost first), type ("Q4_0"), offset (in the data section), nbytes, blocks
--  (the raw uint8 {blocks, bytes} of a quantized tensor) } }, with infos.version,
--  infos.alignment and infos.data_start (a byte offset in the file).
function M.load(path, opts)
  if type(path) ~= "string" then fail(FN, "path must be a string, got %s", check.type_name(path)) end
  opts = check.options(FN, opts, LOAD_OPTIONS)
  local device = state._load_device(FN, opts.device)
  local ok, map = pcall(runtime.map_file, path)
  if not ok then fail(FN, "%s", (tostring(map):gsub("^runtime%.map_file: ", ""))) end
  local c = cursor(map, path)
  if map.size < 24 then
    fail(FN, "'%s' is %d bytes long, too short for a GGUF file (24 or more)", path, map.size)
  end
  local magic = c.bytes(4, "the magic")
  if magic ~= M.MAGIC then
    fail(FN, "'%s' does not start with the magic \"GGUF\" (found %q): not a GGUF file", path, magic)
  end
  local version = c.number("<I4", 4, "the version")
  if version ~= 2 and version ~= 3 then
    c.bad(4, "unknown GGUF version %d (2 and 3 are read)", version)
  end
  local tensor_count, tensor_count_at = c.count("the tensor count")
  local kv_count, kv_count_at = c.count("the metadata count")
  -- a metadata entry takes at least 13 bytes, a tensor info 24: refuse counts the file cannot hold
  if kv_count > (c.size - c.pos) // 13 then
    c.bad(kv_count_at, "the metadata count %d is more than the file (%d bytes) can hold", kv_count, c.size)
  end
  local metadata = {}
  for i = 1, kv_count do
    local at = c.pos
    local key = c.string(string.format("metadata key %d", i))
    if metadata[key] ~= nil then c.bad(at, "metadata key '%s' appears twice", key) end
    local code = c.number("<I4", 4, "metadata '" .. key .. "''s value type")
    metadata[key] = read_value(c, code, "metadata '" .. key .. "'", 0)
  end
  if tensor_count > (c.size - c.pos) // 24 then
    c.bad(tensor_count_at, "the tensor count %d is more than the file (%d bytes) can hold", tensor_count, c.size)
  end
  local list, names = {}, {}
  for i = 1, tensor_count do list[i] = read_tensor_info(c, i, names) end

  local alignment = metadata["general.alignment"]
  if alignment == nil then
    alignment = M.DEFAULT_ALIGNMENT
  elseif math.type(alignment) ~= "integer" or alignment <= 0 or alignment & (alignment - 1) ~= 0 then
    fail(FN, "'%s': general.alignment is %s, not a power of two", path, tostring(alignment))
  end
  local data_start = (c.pos + alignment - 1) // alignment * alignment
  local data_size = c.size - data_start
  if data_size < 0 then data_size = 0 end

  local tensors, infos = {}, { version = version, alignment = alignment, data_start = data_start }
  for _, info in ipairs(list) do
    if info.offset % alignment ~= 0 then
      c.bad(info.at, "tensor '%s' has data offset %d, not a multiple of the alignment %d", info.name, info.offset,
        alignment)
    end
    if info.offset > data_size or info.nbytes > data_size - info.offset then
      c.bad(info.at, "tensor '%s' (%s %s, %d bytes at data offset %d) runs past the end of the data (%d bytes)",
        info.name, info.type, check.shape_str(info.shape), info.nbytes, info.offset, data_size)
    end
    local at = data_start + info.offset
    if info.block then
      local nblocks = info.nbytes // info.block[2]
      local flat = state._copied_tensor(FN, map, path, info.name, dtypes.uint8, info.nbytes, at, device)
      info.blocks = nodes.reshape(flat, { nblocks, info.block[2] })
      tensors[info.name] = M.dequantize(info.blocks, info.type, info.shape)
    else
      local flat = state._copied_tensor(FN, map, path, info.name, info.dtype, info.numel, at, device)
      tensors[info.name] = nodes.reshape(flat, check.copy(info.shape))
    end
    info.at = nil
    infos[info.name] = info
  end
  return tensors, metadata, infos
end

return check.fix_arguments(M, "gguf.")
