-- spec/io/gguf_spec.lua — GGUF files read by tcl.nn.state.gguf_load (tcl.api.gguf). The files are
-- written here byte by byte from the format's description (spec/support/gguf_writer.lua): every
-- metadata value type, F32/F16/BF16 tensors and their dim order, Q8_0, Q4_0 and Q4_1 blocks
-- whose dequantized values are checked against the block formula computed in Lua, the
-- dequantization fused into the matmul that uses a quantized weight, every malformed file's
-- message, and seeded cuts and bit flips that must load exactly or fail with a message.
local helper = require "spec.support.helper"
local splitmix = require "spec.support.splitmix"
local W = require "spec.support.gguf_writer"
local tcl = require "tcl"
local gguf = require "tcl.api.gguf"
local schedule = require "tcl.schedule"
local Tensor = tcl.Tensor

local gguf_load = tcl.nn.state.gguf_load
local CPU = { device = "CPU" }
-- the seeded cases move with TCL_FUZZ_SEED (default 0: the CI run; spec/support/helper.lua)
local FUZZ = helper.fuzz { name = "gguf fuzz", seed = 0 }

local file_with, remove_files = helper.temp_files()
teardown(remove_files)

local function load(contents) return gguf_load(file_with(contents), CPU) end

-- the float32 rounding of x
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end

local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then
      for _, x in ipairs(v) do walk(x) end
    else
      out[#out + 1] = v
    end
  end
  walk(t:tolist())
  return out
end

describe("gguf_load: metadata", function()
  it("reads every value type, little-endian, in versions 2 and 3", function()
    local entries = {
      W.entry("u8", "uint8", 250), W.entry("i8", "int8", -100), W.entry("u16", "uint16", 65000),
      W.entry("i16", "int16", -30000), W.entry("u32", "uint32", 4000000000), W.entry("i32", "int32", -2000000000),
      W.entry("f32", "float32", 1.5), W.entry("yes", "bool", true), W.entry("no", "bool", false),
      W.entry("s", "string", "héllo"), W.entry("empty", "string", ""),
      W.entry("u64", "uint64", 1 << 40), W.entry("u64_top", "uint64", -1), W.entry("i64", "int64", -(1 << 50)),
      W.entry("f64", "float64", 0.1),
      W.entry("tokens", "array", { item = "string", "<s>", "a b", "" }),
      W.entry("scores", "array", { item = "float32", 0.5, -2.25 }),
      W.entry("none", "array", { item = "int32" }),
      W.entry("nested", "array", { item = "array", { item = "uint8", 1, 2 }, { item = "uint8" } }),
    }
    for _, version in ipairs { 2, 3 } do
      local _, md, infos = load(W.file { version = version, metadata = entries })
      assert.are.equal(version, infos.version)
      assert.are.same({
        u8 = 250, i8 = -100, u16 = 65000, i16 = -30000, u32 = 4000000000, i32 = -2000000000, f32 = 1.5, yes = true,
        no = false, s = "héllo", empty = "", u64 = 1 << 40, u64_top = 18446744073709551615.0, i64 = -(1 << 50),
        f64 = 0.1, tokens = { "<s>", "a b", "" }, scores = { 0.5, -2.25 }, none = {}, nested = { { 1, 2 }, {} },
      }, md)
      assert.are.equal("integer", math.type(md.u32))
      assert.are.equal("float", math.type(md.f32))
    end
  end)

  it("finds the data after the header padded to general.alignment (default 32)", function()
    local data = string.pack("<ff", 1, 2)
    for _, alignment in ipairs { 32, 64, 8 } do
      local metadata = alignment ~= 32 and { W.entry("general.alignment", "uint32", alignment) } or {}
      local bytes, start = W.file { alignment = alignment, metadata = metadata,
        tensors = { { name = "a", dims = { 2 }, type = "F32", data = data }, { name = "b", dims = { 1 }, type = "F32",
          data = string.pack("<f", 3) } } }
      assert.are.equal(0, start % alignment)
      local t, _, infos = load(bytes)
      assert.are.equal(start, infos.data_start)
      assert.are.equal(alignment, infos.alignment)
      assert.are.same({ 1, 2 }, t.a:tolist())
      assert.are.same({ 3 }, t.b:tolist())
      assert.are.equal(alignment, infos.b.offset)
    end
  end)
end)

describe("gguf_load: float tensors", function()
  it("reads F32, F16 and BF16 in their dtypes, shapes outermost first", function()
    local f32_data = string.pack("<ffffff", 1, 2, 3, 4, 5, -6.5)
    -- float16 bits: 1.0, -2.0, 0.5, 65504 (max), 2^-24 (smallest subnormal), 0x3555 (about 1/3)
    local halves = { 0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x3555 }
    local f16_data = helper.pack_all("<I2", halves)
    -- bfloat16 bits: the top halves of float32 1.0, -3.0, 0.15625, 2^100
    local bf16 = { 0x3f80, 0xc040, 0x3e20, 0x7180 }
    local t, _, infos = load(W.file { tensors = {
      { name = "f", dims = { 3, 2 }, type = "F32", data = f32_data },
      { name = "h", dims = { 2, 3 }, type = "F16", data = f16_data },
      { name = "b", dims = { 4 }, type = "BF16", data = helper.pack_all("<I2", bf16) },
    } })
    -- GGUF dims {3, 2}: rows of 3, two of them
    assert.are.same({ 2, 3 }, t.f.shape)
    assert.are.same({ 3, 2 }, infos.f.dims)
    assert.are.same({ { 1, 2, 3 }, { 4, 5, -6.5 } }, t.f:tolist())
    assert.are.equal("float16", t.h.dtype.name)
    assert.are.same({ 3, 2 }, t.h.shape)
    local expected = {}
    for i, bits in ipairs(halves) do expected[i] = W.half(bits) end
    assert.are.same(expected, flat(t.h))
    assert.are.equal("bfloat16", t.b.dtype.name)
    local expected_bf = {}
    for i, bits in ipairs(bf16) do expected_bf[i] = (string.unpack("<f", string.pack("<I4", bits << 16))) end
    assert.are.same(expected_bf, t.b:tolist())
    assert.are.same({ 1, 0.5, 0x1p100 }, { expected_bf[1], W.half(0x3800), expected_bf[4] })
  end)
end)

-- random blocks: scale bits of normal float16s in [2^-8, 2^2), values drawn per format
local function random_scale(rng) return (rng:integer(7, 16) << 10) | rng:integer(0, 1023) end
local function random_values(rng, lo, hi)
  local q = {}
  for j = 1, 32 do q[j] = rng:integer(lo, hi) end
  return q
end

describe("gguf_load: empty and scalar tensors", function()
  it("reads a tensor with a zero dim and one with no dims", function()
    local t = load(W.file { tensors = { { name = "e", dims = { 0, 3 }, type = "F32", data = "" },
      { name = "z", dims = { 0 }, type = "Q4_0", data = "" }, { name = "s", dims = {}, type = "F32",
        data = string.pack("<f", 5) } } })
    assert.are.same({ 3, 0 }, t.e.shape)
    assert.are.same({ 0 }, t.z.shape)
    assert.are.same({}, t.s.shape)
    assert.are.equal(5, t.s:item())
  end)

  it("refuses arrays nested deeper than MAX_ARRAY_DEPTH", function()
    local value = { item = "uint8", 1 }
    for _ = 1, gguf.MAX_ARRAY_DEPTH do value = { item = "array", value } end
    helper.fails_with("nests arrays more than 16 deep", load, W.file { metadata = { W.entry("deep", "array", value) } })
    local _, md = load(W.file { metadata = { W.entry("deep", "array", value[1]) } })
    local depth, v = 0, md.deep
    while type(v) == "table" do depth, v = depth + 1, v[1] end
    assert.are.equal(gguf.MAX_ARRAY_DEPTH, depth)
  end)
end)

describe("gguf_load: quantized tensors", function()
  local rng = splitmix.new(3701)

  it("dequantizes Q8_0 blocks as scale * int8", function()
    local blocks, expected = {}, {}
    for b = 1, 6 do -- GGUF dims {64, 3}: 3 rows of two blocks each
      local d, q = random_scale(rng), random_values(rng, -128, 127)
      blocks[b] = W.q8_0_block(d, q)
      for j = 1, 32 do expected[#expected + 1] = W.half(d) * q[j] end
    end
    local t, _, infos = load(W.file { tensors = { { name = "w", dims = { 64, 3 }, type = "Q8_0",
      data = table.concat(blocks) } } })
    assert.are.same({ 3, 64 }, t.w.shape)
    assert.are.equal("float32", t.w.dtype.name)
    assert.are.same({ 6, 34 }, infos.w.blocks.shape)
    assert.are.equal("uint8", infos.w.blocks.dtype.name)
    assert.are.same(expected, flat(t.w))
  end)

  it("dequantizes Q4_0 blocks as scale * (nibble - 8), low nibbles first", function()
    local blocks, expected = {}, {}
    for b = 1, 4 do
      local d, q = random_scale(rng), random_values(rng, 0, 15)
      if b == 1 then d = 0xbc00 end -- a negative scale, -1
      blocks[b] = W.q4_0_block(d, q)
      for j = 1, 32 do expected[#expected + 1] = W.half(d) * (q[j] - 8) end
    end
    local t, _, infos = load(W.file { tensors = { { name = "w", dims = { 32, 2, 2 }, type = "Q4_0",
      data = table.concat(blocks) } } })
    assert.are.same({ 2, 2, 32 }, t.w.shape)
    assert.are.equal("Q4_0", infos.w.type)
    assert.are.same(expected, flat(t.w))
    -- the first block by hand: byte 1 of the nibbles holds values 1 (low) and 17 (high)
    local byte = blocks[1]:byte(3)
    assert.are.equal(-((byte & 15) - 8), flat(t.w)[1])
    assert.are.equal(-((byte >> 4) - 8), flat(t.w)[17])
  end)

  it("dequantizes Q4_1 blocks as scale * nibble + minimum", function()
    local blocks, expected = {}, {}
    for b = 1, 2 do
      local d, m, q = random_scale(rng), random_scale(rng) | 0x8000, random_values(rng, 0, 15)
      blocks[b] = W.q4_1_block(d, m, q)
      for j = 1, 32 do expected[#expected + 1] = f32(W.half(d) * q[j] + W.half(m)) end
    end
    local t = load(W.file { tensors = { { name = "w", dims = { 64 }, type = "Q4_1", data = table.concat(blocks) } } })
    assert.are.same(expected, flat(t.w))
  end)

  it("fuses a Q4_0 weight's dequantization into the matmul that uses it: no float copy is stored", function()
    local k, n = 64, 16
    local blocks, weight = {}, {}
    for r = 1, n do
      weight[r] = {}
      for _ = 1, k // 32 do
        local d, q = random_scale(rng), random_values(rng, 0, 15)
        blocks[#blocks + 1] = W.q4_0_block(d, q)
        for j = 1, 32 do weight[r][#weight[r] + 1] = W.half(d) * (q[j] - 8) end
      end
    end
    local t, _, infos = load(W.file { tensors = { { name = "w", dims = { k, n }, type = "Q4_0",
      data = table.concat(blocks) } } })
    local xs = {}
    for i = 1, k do xs[i] = rng:integer(-4, 4) / 4 end
    local x = Tensor(xs, { device = "CPU" }):reshape(1, k):realize()
    local y = x:matmul(t.w.T) -- a decoding step: one row times the weight
    local plan = schedule.create({ y.uop })
    assert.are.equal(1, #plan.kernels, "the dequantization has a kernel of its own")
    for _, shape in pairs(plan.buffer_shapes) do
      local numel = 1
      for _, d in ipairs(shape) do numel = numel * d end
      assert.are_not.equal(k * n, numel, "a buffer of the weight's size is stored")
    end
    local raw = infos.w.blocks.uop.src[1]
    assert.are.equal("BUFFER", raw.op)
    local reads_blocks = false
    for _, b in ipairs(plan.kernels[1].buffers) do
      if b == raw then reads_blocks = true end
    end
    assert.is_true(reads_blocks, "the product's kernel does not read the raw blocks")
    -- and its values: x times the weight dequantized by hand (exact: small dyadic numbers)
    local got = flat(y)
    for r = 1, n do
      local sum = 0
      for i = 1, k do sum = sum + xs[i] * weight[r][i] end
      assert.is_true(math.abs(got[r] - sum) <= 1e-5 * (1 + math.abs(sum)), "output " .. r)
    end
  end)

  it("refuses the other quantized types, naming the tensor, the type and the supported ones", function()
    for _, case in ipairs { { "Q2_K", 84 }, { "Q3_K", 110 }, { "Q5_0", 176 } } do
      local file = W.file { tensors = { { name = "blk.0.w", dims = { 256 }, type = case[1],
        data = string.rep("\0", case[2]) } } }
      helper.fails_with("tensor 'blk.0.w' has type " .. case[1] .. ", which is not supported (supported: F32, F16",
        load, file)
    end
    helper.fails_with("tensor 'x' has type 99 (unknown), which is not supported", load,
      W.file { tensors = { { name = "x", dims = { 1 }, type = 99, data = "\0\0\0\0" } } })
    helper.fails_with("tensor 'q' is Q8_0 with rows of 40 values, not a multiple of the block size 32", load,
      W.file { tensors = { { name = "q", dims = { 40 }, type = "Q8_0", data = string.rep("\0", 68) } } })
  end)
end)

-- K-quants dequantized in plain Lua from a block's bytes, straight from the formats' definitions
-- (value i = 0..255 of a super-block; other code than the Tensor expressions of tcl.api.gguf)
local function u16_at(block, at) return block:byte(at) | (block:byte(at + 1) << 8) end

-- scale and min j (0..7) of the 12 packed bytes from byte `at` (Q4_K, Q5_K)
local function k_scale_min(block, at, j)
  local function byte(k) return block:byte(at + k) end
  if j < 4 then return byte(j) & 63, byte(j + 4) & 63 end
  return (byte(j + 4) & 15) | ((byte(j - 4) >> 6) << 4), (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4)
end

-- the low 4 bits of value i of Q4_K/Q5_K: sub-block j = i // 32 is in the low (j even) or high
-- (j odd) nibbles of the 32-byte run j // 2, value i % 32 at byte i % 32 of the run
local function k_nibble(block, at, i)
  local j = i // 32
  local byte = block:byte(at + 32 * (j // 2) + i % 32)
  return j % 2 == 0 and byte & 15 or byte >> 4
end

local function plain_q4_k(block)
  local d, dmin, out = W.half(u16_at(block, 1)), W.half(u16_at(block, 3)), {}
  for i = 0, 255 do
    local sc, m = k_scale_min(block, 5, i // 32)
    out[i + 1] = f32(d * sc * k_nibble(block, 17, i) - dmin * m)
  end
  return out
end

local function plain_q5_k(block)
  local d, dmin, out = W.half(u16_at(block, 1)), W.half(u16_at(block, 3)), {}
  for i = 0, 255 do
    local sc, m = k_scale_min(block, 5, i // 32)
    local fifth = (block:byte(17 + i % 32) >> (i // 32)) & 1
    out[i + 1] = f32(d * sc * (k_nibble(block, 49, i) + 16 * fifth) - dmin * m)
  end
  return out
end

local function plain_q6_k(block)
  local d, out = W.half(u16_at(block, 209)), {}
  for i = 0, 255 do
    local h, k, l = i // 128, (i % 128) // 32, i % 32
    local low = block:byte(1 + 64 * h + 32 * (k % 2) + l)
    low = k < 2 and low & 15 or low >> 4
    local high = (block:byte(129 + 32 * h + l) >> (2 * k)) & 3
    local scale = string.unpack("<i1", block, 193 + i // 16)
    out[i + 1] = f32(d * scale * ((low | (high << 4)) - 32))
  end
  return out
end

local K_QUANTS = {
  Q4_K = { bytes = 144, plain = plain_q4_k }, Q5_K = { bytes = 176, plain = plain_q5_k },
  Q6_K = { bytes = 210, plain = plain_q6_k },
}

-- equal element by element, NaN equal to NaN
local function same_values(expected, got, what)
  assert.are.equal(#expected, #got, what)
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    if not (e == g or (e ~= e and g ~= g)) then
      error(string.format("%s: value %d is %.9g, expected %.9g", what, i, g, e), 2)
    end
  end
end

describe("gguf_load: K-quant super-blocks", function()
  local rng = splitmix.new(3703)
  local function randoms(n, lo, hi)
    local q = {}
    for i = 1, n do q[i] = rng:integer(lo, hi) end
    return q
  end
  -- the 6-bit scales and mins of every sub-block at its corners: 0, 63, and values whose top 2
  -- bits (stored apart for sub-blocks 4-7) are each set alone
  local CORNER_SCALES = { 63, 0, 16, 47, 63, 1, 32, 48 }
  local CORNER_MINS = { 0, 63, 33, 15, 48, 63, 17, 0 }

  local function load_blocks(type_name, blocks, dims)
    local t, _, infos = load(W.file { tensors = { { name = "w", dims = dims, type = type_name,
      data = table.concat(blocks) } } })
    return t.w, infos.w
  end

  it("dequantizes Q4_K as d * scale * q - dmin * min per sub-block of 32", function()
    local blocks, expected, chosen = {}, {}, {}
    for b = 1, 4 do -- GGUF dims {512, 2}: 2 rows of two super-blocks
      local scales, mins = randoms(8, 0, 63), randoms(8, 0, 63)
      local q = randoms(256, 0, 15)
      if b == 1 then
        scales, mins = CORNER_SCALES, CORNER_MINS
        for i = 1, 256 do q[i] = (i - 1) % 16 end -- every nibble value in every sub-block
      end
      -- b == 2: a negative dmin (the mins add); b == 3: a negative d
      local d, dmin = random_scale(rng) | (b == 3 and 0x8000 or 0), random_scale(rng) | (b == 2 and 0x8000 or 0)
      blocks[b] = W.q4_k_block(d, dmin, scales, mins, q)
      assert.are.equal(144, #blocks[b])
      local plain = plain_q4_k(blocks[b])
      for i = 1, 256 do
        local j = (i - 1) // 32 + 1
        chosen[#chosen + 1] = f32(W.half(d) * scales[j] * q[i] - W.half(dmin) * mins[j])
        expected[#expected + 1] = plain[i]
      end
    end
    same_values(chosen, expected, "the plain dequantizer against the chosen values")
    local w, info = load_blocks("Q4_K", blocks, { 512, 2 })
    assert.are.same({ 2, 512 }, w.shape)
    assert.are.same({ 4, 144 }, info.blocks.shape)
    assert.are.equal("Q4_K", info.type)
    same_values(expected, flat(w), "Q4_K")
    -- by hand: sub-block 5 (0-based 4) of the first block takes scale 63 and min 48 from the
    -- low nibble of byte 9 of the scales and the top bits of bytes 1 and 5
    local sc_bytes = { blocks[1]:byte(5, 16) }
    assert.are.equal(63, (sc_bytes[9] & 15) | ((sc_bytes[1] >> 6) << 4))
    assert.are.equal(48, (sc_bytes[9] >> 4) | ((sc_bytes[5] >> 6) << 4))
  end)

  it("dequantizes Q5_K with the fifth bit of each value from its high-bit plane", function()
    local blocks, expected, chosen = {}, {}, {}
    for b = 1, 3 do
      local scales, mins, q = randoms(8, 0, 63), randoms(8, 0, 63), randoms(256, 0, 31)
      if b == 1 then
        scales, mins = CORNER_SCALES, CORNER_MINS
        -- every value 0..31 in every sub-block: each bit plane has both bits at every byte
        for i = 1, 256 do q[i] = ((i - 1) + (i - 1) // 32) % 32 end
      end
      local d, dmin = random_scale(rng), random_scale(rng) | (b == 2 and 0x8000 or 0)
      blocks[b] = W.q5_k_block(d, dmin, scales, mins, q)
      assert.are.equal(176, #blocks[b])
      local plain = plain_q5_k(blocks[b])
      for i = 1, 256 do
        local j = (i - 1) // 32 + 1
        chosen[#chosen + 1] = f32(W.half(d) * scales[j] * q[i] - W.half(dmin) * mins[j])
        expected[#expected + 1] = plain[i]
      end
    end
    same_values(chosen, expected, "the plain dequantizer against the chosen values")
    local w = load_blocks("Q5_K", blocks, { 256, 3 })
    assert.are.same({ 3, 256 }, w.shape)
    same_values(expected, flat(w), "Q5_K")
  end)

  it("dequantizes Q6_K as d * scale * (q - 32) with int8 scales per 16 values", function()
    local blocks, expected, chosen = {}, {}, {}
    for b = 1, 3 do
      local q, scales = randoms(256, 0, 63), randoms(16, -128, 127)
      if b == 1 then
        for i = 1, 256 do q[i] = ((i - 1) * 5) % 64 end -- every 6-bit value, both halves, all k
        scales = { -128, 127, -1, 0, 1, 64, -64, 100, -100, 3, -3, 127, -128, 17, -17, 42 }
      end
      local d = random_scale(rng) | (b == 3 and 0x8000 or 0)
      blocks[b] = W.q6_k_block(q, scales, d)
      assert.are.equal(210, #blocks[b])
      local plain = plain_q6_k(blocks[b])
      for i = 1, 256 do
        chosen[#chosen + 1] = f32(W.half(d) * scales[(i - 1) // 16 + 1] * (q[i] - 32))
        expected[#expected + 1] = plain[i]
      end
    end
    same_values(chosen, expected, "the plain dequantizer against the chosen values")
    local w = load_blocks("Q6_K", blocks, { 256, 3, 1 })
    assert.are.same({ 1, 3, 256 }, w.shape)
    same_values(expected, flat(w), "Q6_K")
  end)

  it("dequantizes seeded random bytes as the plain dequantizers do (every bit of every field)",
    FUZZ:reporting(function()
      local fuzz_rng = splitmix.new(3704 + FUZZ.seed)
      for type_name, k in pairs(K_QUANTS) do
        local blocks, expected = {}, {}
        for b = 1, 3 do
          local bytes = {}
          for i = 1, k.bytes do bytes[i] = fuzz_rng:integer(0, 255) end
          blocks[b] = string.char(table.unpack(bytes))
          for _, v in ipairs(k.plain(blocks[b])) do expected[#expected + 1] = v end
        end
        local w = load_blocks(type_name, blocks, { 768 })
        same_values(expected, flat(w), type_name)
      end
    end))

  it("refuses a K-quant tensor whose rows are not whole super-blocks of 256, naming it", function()
    for type_name, k in pairs(K_QUANTS) do
      helper.fails_with("tensor 'blk.3.ffn_down.weight' is " .. type_name .. " with rows of 288 values, not a "
        .. "multiple of the block size 256", load, W.file { tensors = { { name = "blk.3.ffn_down.weight",
          dims = { 288, 2 }, type = type_name, data = string.rep("\0", 3 * k.bytes) } } })
      helper.fails_with("expected the raw " .. type_name .. " blocks as a uint8 tensor {blocks, " .. k.bytes .. "}",
        gguf.dequantize, Tensor.zeros({ 2, 34 }, { dtype = "uint8", device = "CPU" }), type_name, { 512 })
    end
  end)
end)

describe("gguf_load: malformed files", function()
  local good = W.file { metadata = { W.entry("k", "string", "v") },
    tensors = { { name = "a", dims = { 2 }, type = "F32", data = string.pack("<ff", 1, 2) } } }

  local function header(version, tensors, kvs) return "GGUF" .. string.pack("<I4I8I8", version, tensors, kvs) end
  local pad = string.rep("\0", 64)

  it("refuses a file that is not GGUF, or of another version, or too short", function()
    helper.fails_with('does not start with the magic "GGUF"', load, "GGML" .. good:sub(5))
    helper.fails_with("unknown GGUF version 1 (2 and 3 are read)", load, header(1, 0, 0) .. pad)
    helper.fails_with("unknown GGUF version 4", load, header(4, 0, 0) .. pad)
    helper.fails_with("bytes long, too short for a GGUF file", load, "GGUF")
  end)

  it("refuses counts past the end of the file", function()
    helper.fails_with("at byte 16: the metadata count 1000000 is more than the file", load,
      header(3, 0, 1000000) .. pad)
    helper.fails_with("at byte 8: the tensor count 1000000 is more than the file", load, header(3, 1000000, 0) .. pad)
    helper.fails_with("the tensor count is 2^63 or more", load, header(3, -1, 0) .. pad)
    helper.fails_with("declares 4294967296 items, more than the rest of the file", load, header(3, 0, 1) ..
      W.string("k") .. string.pack("<I4I4I8", 9, 0, 1 << 32))
  end)

  it("refuses strings past the end", function()
    helper.fails_with("metadata key 1 of 100 bytes runs past the end of the file", load,
      header(3, 0, 1) .. string.pack("<I8", 100) .. "k" .. string.rep("\0", 10))
    helper.fails_with("metadata 'k' of 1000 bytes runs past the end", load,
      header(3, 0, 1) .. W.string("k") .. string.pack("<I4I8", 8, 1000) .. "abc")
    helper.fails_with("metadata 'k''s length is 2^63 or more", load,
      header(3, 0, 1) .. W.string("k") .. string.pack("<I4i8", 8, -1) .. "abc")
  end)

  it("refuses unknown value types and bools that are not 0 or 1", function()
    helper.fails_with("at byte 33: metadata 'k' has unknown value type 13 (0..12 are defined)", load,
      header(3, 0, 1) .. W.string("k") .. string.pack("<I4", 13) .. pad)
    helper.fails_with("metadata 'k' has unknown item type 77", load,
      header(3, 0, 1) .. W.string("k") .. string.pack("<I4I4I8", 9, 77, 1) .. pad)
    helper.fails_with("metadata 'k' is a bool of byte value 2 (0 or 1)", load,
      header(3, 0, 1) .. W.string("k") .. string.pack("<I4", 7) .. "\2" .. pad)
    helper.fails_with("general.alignment is 24, not a power of two", load,
      W.file { metadata = { W.entry("general.alignment", "uint32", 24) } } .. pad)
  end)

  it("refuses duplicate names and keys", function()
    helper.fails_with("metadata key 'k' appears twice", load,
      W.file { metadata = { W.entry("k", "uint8", 1), W.entry("k", "uint8", 2) } } .. pad)
    helper.fails_with("tensor name 'a' appears twice", load, W.file { tensors = {
      { name = "a", dims = { 1 }, type = "F32", data = "\0\0\0\0" },
      { name = "a", dims = { 1 }, type = "F32", data = "\0\0\0\0" } } })
  end)

  it("refuses tensors past the end of the data, misaligned, or whose dims overflow", function()
    helper.fails_with("tensor 'a' (F32 (2,), 8 bytes at data offset 0) runs past the end of the data (4 bytes)", load,
      good:sub(1, #good - 28))
    helper.fails_with("tensor 'a' (F32 (2,), 8 bytes at data offset 64) runs past the end", load, W.file { tensors = {
      { name = "a", dims = { 2 }, type = "F32", data = string.pack("<ff", 1, 2), offset = 64 } } })
    helper.fails_with("tensor 'a' has data offset 4, not a multiple of the alignment 32", load, W.file { tensors = {
      { name = "a", dims = { 1 }, type = "F32", data = string.pack("<ff", 1, 2), offset = 4 } } })
    helper.fails_with("tensor 'a' has dims whose product is more than 2^53", load, W.file { tensors = {
      { name = "a", dims = { 1 << 30, 1 << 30 }, type = "F32", data = "" } } })
    helper.fails_with("tensor 'a' has size 2^63 or more in GGUF dim 1", load, W.file { tensors = {
      { name = "a", dims = { -1 }, type = "F32", data = "" } } })
    helper.fails_with("tensor 'a' has 99 dims, more than the", load,
      header(3, 1, 0) .. W.string("a") .. string.pack("<I4", 99) .. pad)
  end)

  it("names the reading function and the file in every message", function()
    local path = file_with("GGML" .. good:sub(5))
    local message = helper.error_of(gguf_load, path)
    assert.are.equal(1, message:find("gguf_load: '" .. path .. "'", 1, true))
    helper.fails_with("gguf_load: path must be a string", gguf_load, 3)
    helper.fails_with("gguf_load: unknown option 'dtype'", gguf_load, path, { dtype = "float32" })
  end)
end)

describe("gguf_load: fuzzed files", function()
  local rng = splitmix.new(3702 + FUZZ.seed)
  local d, q = random_scale(rng), random_values(rng, 0, 15)
  local base, start = W.file {
    metadata = { W.entry("general.architecture", "string", "llama"),
      W.entry("tokenizer.ggml.tokens", "array", { item = "string", "a", "bc" }),
      W.entry("n", "uint32", 7) },
    tensors = { { name = "f", dims = { 8 }, type = "F32", data = string.pack("<ffffffff", 1, 2, 3, 4, 5, 6, 7, 8) },
      { name = "q", dims = { 32 }, type = "Q4_0", data = W.q4_0_block(d, q) },
      { name = "k4", dims = { 256 }, type = "Q4_K", data = W.q4_k_block(d, d, random_values(rng, 0, 63),
        random_values(rng, 0, 63), { string.rep("\7", 256):byte(1, -1) }) },
      { name = "k5", dims = { 256 }, type = "Q5_K", data = W.q5_k_block(d, d, random_values(rng, 0, 63),
        random_values(rng, 0, 63), { string.rep("\23", 256):byte(1, -1) }) },
      { name = "k6", dims = { 256 }, type = "Q6_K", data = W.q6_k_block({ string.rep("\45", 256):byte(1, -1) },
        random_values(rng, -128, 127), d) } } }
  -- the last byte any tensor needs: each tensor's data padded to 32 bytes, the last one not
  local q_end = start + 32 + 32 + 160 + 192 + 210

  local function attempt(contents)
    local path = file_with(contents)
    local ok, result = pcall(gguf_load, path, CPU)
    if not ok then
      local message = tostring(result)
      assert(message:find("gguf_load: ", 1, true) == 1, "a message without the function: " .. message)
      assert(message:find(path, 1, true), "a message without the file: " .. message)
    end
    return ok, result
  end

  it("refuses the file cut anywhere before its last tensor's end, and loads the longer cuts", function()
    for n = 0, #base do
      local ok, t = attempt(base:sub(1, n))
      assert.are.equal(n >= q_end, ok, "cut at " .. n)
      if ok then assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8 }, t.f:tolist()) end
    end
  end)

  it("loads every seeded bit flip or refuses it with a message; flips in the data load", FUZZ:reporting(function()
    local loaded, refused = 0, 0
    for _ = 1, 200 do
      local bit = rng:integer(0, #base * 8 - 1)
      local at = bit // 8 + 1
      local damaged = base:sub(1, at - 1) .. string.char(base:byte(at) ~ (1 << (bit % 8))) .. base:sub(at + 1)
      local ok, t = attempt(damaged)
      if at > start then
        assert.is_true(ok, "a flip in the data was refused")
        local floats = { string.unpack("<ffffffff", damaged, start + 1) }
        floats[9] = nil
        local got = t.f:tolist()
        for i = 1, 8 do assert.is_true(got[i] == floats[i] or (got[i] ~= got[i] and floats[i] ~= floats[i])) end
        -- the K-quant blocks, damaged or not, dequantize as the plain dequantizers say
        for name, k in pairs { k4 = { 64, K_QUANTS.Q4_K }, k5 = { 224, K_QUANTS.Q5_K }, k6 = { 416, K_QUANTS.Q6_K } } do
          local block = damaged:sub(start + k[1] + 1, start + k[1] + k[2].bytes)
          same_values(k[2].plain(block), t[name]:tolist(), name .. " after a flip of bit " .. bit)
        end
      end
      if ok then loaded = loaded + 1 else refused = refused + 1 end
    end
    assert.is_true(loaded > 0 and refused > 0)
  end))

  it("refuses directories, empty and missing files", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert.are.equal(0, (helper.run("mkdir " .. helper.shell_quote(dir))))
    for _, path in ipairs { dir, file_with(""), dir .. "/missing.gguf" } do
      local ok, err = pcall(gguf_load, path, CPU)
      assert.is_false(ok)
      assert.are.equal(1, tostring(err):find("gguf_load: ", 1, true), tostring(err))
    end
    helper.run("rmdir " .. helper.shell_quote(dir))
  end)

  it("gives the type names and codes of the format", function()
    assert.are.equal("Q4_0", gguf.type_name(2))
    assert.are.equal(30, gguf.type_code("BF16"))
    assert.is_nil(gguf.type_name(1000))
  end)
end)

describe("gguf_load: a vocabulary's metadata builds its tokenizer", function()
  it("gives tcl.tokenizer.from_metadata the arrays it reads, and the tokens encode and decode", function()
    -- a byte-level BPE vocabulary: the 256 byte symbols of GPT-2 for a, b, space, then merges
    local tokens = { item = "string", "a", "b", "\u{120}", "ab", "\u{120}ab" }
    local merges = { item = "string", "a b", "\u{120} ab" }
    local _, md = load(W.file { version = 3, metadata = {
      W.entry("tokenizer.ggml.model", "string", "gpt2"),
      W.entry("tokenizer.ggml.tokens", "array", tokens),
      W.entry("tokenizer.ggml.merges", "array", merges),
    } })
    local tok = tcl.tokenizer.from_metadata(md)
    -- "ab ab": the words "ab" and " ab"; a+b -> ab (id 3), then the space symbol + ab -> id 4
    assert.are.same({ 3, 4 }, tok:encode("ab ab"))
    assert.are.equal("ab ab", tok:decode({ 3, 4 }))
  end)
end)
