-- spec/runtime/emu_spec.lua — the EMU device (src/runtime) through "tcl.runtime", and kernel ASTs
-- through tcl.codegen.driver.lower. Hand-built linear programs and kernels are run and their results
-- checked against naive Lua written here: integer wraparound with Lua's 64-bit integers, C
-- and floor division from Lua's //, float16/bfloat16 rounding from the formats' definition
-- (not through the C conversions), IEEE NaN rules by hand.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local rt = require "tcl.runtime"
local lower = require "tcl.codegen.driver.lower"

local u = tcl.uop
local IDX, F32, F16, BF16, I32, BOOL = tcl.dtype "index", tcl.dtype "float32", tcl.dtype "float16",
  tcl.dtype "bfloat16", tcl.dtype "int32", tcl.dtype "bool"
local NAN, INF = 0.0 / 0.0, math.huge

local function isnan(x) return x ~= x end

local error_of = helper.error_of

local builder = require("spec.support.kernels").builder -- a linear program: list, add(op, dtype, src, arg)

local function const(add, dtype, v) return add("CONST", dtype, nil, v) end

-- out[i] = op(a[i], b[i]) (or op(a[i]) when unary) over one RANGE.
local function map_program(op, in_dt, out_dt, n, nargs)
  local list, add = builder()
  local out = add("PARAM", out_dt, nil, { 0, n })
  local ins = {}
  for k = 1, nargs do ins[k] = add("PARAM", in_dt, nil, { k, n }) end
  local r = add("RANGE", IDX, { const(add, IDX, n) }, { 0, "loop" })
  local vals = {}
  for k = 1, nargs do vals[k] = add("LOAD", in_dt, { add("INDEX", in_dt, { ins[k], r }) }) end
  local v = add(op, out_dt, vals)
  local st = add("STORE", nil, { add("INDEX", out_dt, { out, r }), v })
  add("END", nil, { st, r })
  return rt.program(list, { name = op:lower() })
end

local function run_map(op, in_dt, out_dt, ...)
  local inputs = { ... }
  local n = #inputs[1]
  local p = map_program(op, in_dt, out_dt, n, #inputs)
  local bufs = { rt.buffer(out_dt, n) }
  for k, xs in ipairs(inputs) do
    bufs[k + 1] = rt.buffer(in_dt, n)
    bufs[k + 1]:write(xs)
  end
  p:run(bufs)
  return bufs[1]:read()
end

-- Naive reference rounding to a binary float format with p significand bits (the leading
-- one included), smallest normal exponent emin and largest finite value max: round to
-- nearest, ties to even, subnormals at the fixed spacing 2^(emin-p+1), overflow to inf.
local function round_float(x, p, emin, max)
  if isnan(x) or x == 0 or x == INF or x == -INF then return x end
  local sign, a = x < 0 and -1 or 1, math.abs(x)
  local e = math.floor(math.log(a, 2))
  if 2.0 ^ e > a then e = e - 1 elseif 2.0 ^ (e + 1) <= a then e = e + 1 end
  if e < emin then e = emin end
  local ulp = 2.0 ^ (e - (p - 1))
  local q = a / ulp
  local fl = math.floor(q)
  local frac = q - fl
  if frac > 0.5 or (frac == 0.5 and fl % 2 == 1) then fl = fl + 1 end
  local r = fl * ulp
  if r > max then return sign * INF end
  return sign * r
end
local function to_f16(x) return round_float(x, 11, -14, 65504.0) end
local function to_bf16(x) return round_float(x, 8, -126, (2 - 2 ^ -7) * 2.0 ^ 127) end
local function to_f32(x) return round_float(x, 24, -126, (2 - 2 ^ -23) * 2.0 ^ 127) end

local function wrap32(x)
  x = x & 0xffffffff
  if x >= 0x80000000 then x = x - 0x100000000 end
  return x
end

-- deterministic pseudo-random numbers (an LCG), so failures reproduce
local function rng(seed)
  local state = seed
  return function()
    state = (state * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return state >> 11
  end
end

local function same_float(a, b)
  if isnan(a) then return isnan(b) end
  return a == b and (a ~= 0 or 1 / a == 1 / b)
end

describe("EMU buffers", function()
  it("have numel, dtype, nbytes, itemsize and device", function()
    local b = rt.buffer(F16, 10)
    assert.equals(10, b.numel)
    assert.equals(F16, b.dtype)
    assert.equals(20, b.nbytes)
    assert.equals(2, b.itemsize)
    assert.equals("EMU", b.device)
    assert.equals("Buffer(EMU, float16, 10)", tostring(b))
    assert.equals("EMU", rt.buffer("int8", 1, "EMU").device)
    assert.same({ "EMU", "CPU", "CUDA", "METAL" }, rt.devices)
  end)

  it("start zero-filled", function()
    assert.same({ 0, 0, 0 }, rt.buffer(I32, 3):read())
    assert.same({ 0.0, 0.0 }, rt.buffer(F16, 2):read())
    assert.same({ false, false }, rt.buffer(BOOL, 2):read())
  end)

  it("round-trip values of every dtype", function()
    local cases = {
      bool = { { true, false, true }, { true, false, true } },
      int8 = { { -128, 127, 5 }, { -128, 127, 5 } },
      uint8 = { { 0, 255, 7 }, { 0, 255, 7 } },
      int16 = { { -32768, 32767, -3 }, { -32768, 32767, -3 } },
      uint16 = { { 0, 65535, 9 }, { 0, 65535, 9 } },
      int32 = { { -2147483648, 2147483647, -1 }, { -2147483648, 2147483647, -1 } },
      uint32 = { { 0, 4294967295, 1 }, { 0, 4294967295, 1 } },
      int64 = { { math.mininteger, math.maxinteger, 0 }, { math.mininteger, math.maxinteger, 0 } },
      uint64 = { { -1, 0, 42 }, { -1, 0, 42 } }, -- 2^64-1 travels as -1, like CONST args
      index = { { math.mininteger, 3, math.maxinteger }, { math.mininteger, 3, math.maxinteger } },
      float16 = { { 1.5, -65504.0, 6e-8 }, { 1.5, -65504.0, to_f16(6e-8) } },
      bfloat16 = { { 1.5, -3.0, 1e38 }, { 1.5, -3.0, to_bf16(1e38) } },
      fp8e4m3 = { { 1.5, -448.0, 0.25 }, { 1.5, -448.0, 0.25 } },
      fp8e5m2 = { { 1.5, -57344.0, 0.25 }, { 1.5, -57344.0, 0.25 } },
      float32 = { { 1.5, -3.25, 0.1 }, { 1.5, -3.25, to_f32(0.1) } },
      float64 = { { 1.5, -3.25, 0.1 }, { 1.5, -3.25, 0.1 } },
    }
    for name, case in pairs(cases) do
      local b = rt.buffer(name, 3)
      b:write(case[1])
      local got = b:read()
      for i = 1, 3 do
        assert(got[i] == case[2][i], string.format("%s[%d]: wrote %s, read %s, expected %s", name, i,
          tostring(case[1][i]), tostring(got[i]), tostring(case[2][i])))
        assert.equals(math.type(case[2][i]) or "boolean", math.type(got[i]) or type(got[i]))
      end
    end
  end)

  it("convert what is written with CAST's rules", function()
    local b = rt.buffer("int8", 4)
    b:write { 200, -129, 3.9, true } -- wraps, wraps, truncates, bool -> 1
    assert.same({ -56, 127, 3, 1 }, b:read())
    local f = rt.buffer(F16, 3)
    f:write { 70000, 1, false } -- overflow -> inf
    assert.same({ INF, 1.0, 0.0 }, f:read())
    local bo = rt.buffer(BOOL, 3)
    bo:write { 0, 2, NAN }
    assert.same({ false, true, true }, bo:read())
  end)

  it("store float16 and bfloat16 rounded to nearest even", function()
    local next_int = rng(7)
    local xs = {}
    for i = 1, 400 do
      local m = (next_int() % 2000001 - 1000000) / 1000.0
      xs[i] = m * 2.0 ^ (next_int() % 40 - 20)
    end
    xs[#xs + 1] = 2049.0 -- a tie in float16: rounds to the even 2048
    xs[#xs + 1] = 2051.0 -- a tie: rounds to the even 2052
    xs[#xs + 1] = 65520.0 -- the float16 overflow threshold: inf
    local h, bh = rt.buffer(F16, #xs), rt.buffer(BF16, #xs)
    h:write(xs)
    bh:write(xs)
    local hr, br = h:read(), bh:read()
    for i, x in ipairs(xs) do
      assert(same_float(hr[i], to_f16(x)), string.format("float16(%.17g) = %.17g, expected %.17g", x, hr[i], to_f16(x)))
      assert(same_float(br[i], to_bf16(x)), string.format("bfloat16(%.17g) = %.17g, expected %.17g", x, br[i],
          to_bf16(x)))
    end
    assert.equals(2048.0, hr[#xs - 2])
    assert.equals(2052.0, hr[#xs - 1])
    assert.equals(INF, hr[#xs])
  end)

  it("keep NaN", function()
    for _, name in ipairs { "float16", "bfloat16", "float32", "float64", "fp8e4m3", "fp8e5m2" } do
      local b = rt.buffer(name, 1)
      b:write { NAN }
      assert.is_true(isnan(b:read()[1]), name)
    end
  end)

  it("may be empty", function()
    local b = rt.buffer(F32, 0)
    assert.equals(0, b.numel)
    assert.equals(0, b.nbytes)
    assert.same({}, b:read())
    b:write {}
    b:copy_from(rt.buffer(F32, 0))
  end)

  it("copy from a buffer of the same dtype and numel", function()
    local a, b = rt.buffer(I32, 3), rt.buffer(I32, 3)
    a:write { 1, 2, 3 }
    b:copy_from(a)
    assert.same({ 1, 2, 3 }, b:read())
    assert.matches("source is int32 x 3, destination is float32 x 3", error_of(rt.buffer(F32, 3).copy_from,
      rt.buffer(F32, 3), a), 1, true)
    assert.matches("source is int32 x 3, destination is int32 x 4", error_of(function()
      rt.buffer(I32, 4):copy_from(a) end), 1, true)
  end)

  -- ASan aborts on a huge allocation unless told to return NULL like the C library does
  local asan = (os.getenv("LD_PRELOAD") or ""):find("asan", 1, true)
    and not (os.getenv("ASAN_OPTIONS") or ""):find("allocator_may_return_null=1", 1, true)
  if not asan then
    it("report running out of memory as an error", function()
      assert.matches("out of memory allocating 70368744177664 bytes for a buffer of 70368744177664 int8",
        error_of(rt.buffer, "int8", 1 << 46), 1, true)
    end)
  end

  it("reject bad arguments with clear messages", function()
    local b = rt.buffer(F32, 2)
    assert.matches("expected 2 values (the buffer's numel), got 3", error_of(b.write, b, { 1, 2, 3 }), 1, true)
    assert.matches("value 2 is a string, expected a number or boolean", error_of(b.write, b, { 1, "x" }), 1, true)
    b:write { 5, 6 }
    pcall(b.write, b, { 1, {} })
    assert.same({ 5.0, 6.0 }, b:read()) -- a rejected write changes nothing
    assert.matches("numel must be >= 0", error_of(rt.buffer, F32, -1), 1, true)
    assert.matches("numel must be an integer", error_of(rt.buffer, F32, 1.5), 1, true)
    assert.matches("unknown device 'TPU'", error_of(rt.buffer, F32, 1, "TPU"), 1, true)
    assert.matches("device CUDA keeps its buffers in its own memory", error_of(rt.buffer, F32, 1, "CUDA"), 1, true)
    assert.matches("not void", error_of(rt.buffer, "void", 1), 1, true)
    assert.matches("unknown dtype 'float13'", error_of(rt.buffer, "float13", 1), 1, true)
    assert.matches("a buffer of 9223372036854775807 float32 elements is larger than EMU can address "
      .. "(140737488355328 bytes)",
      error_of(rt.buffer, F32, math.maxinteger), 1, true)
    assert.matches("a buffer of 4611686018427387904 int8 elements is larger than EMU can address",
      error_of(rt.buffer, "int8", 1 << 62), 1, true)
    assert.equals(1 << 47, rt.max_buffer_bytes("EMU"))
    assert.is_nil(rt.max_buffer_bytes("NO_SUCH_DEVICE"))
  end)
end)

describe("EMU programs", function()
  it("add elementwise over a RANGE", function()
    local xs, ys, want = {}, {}, {}
    for i = 1, 37 do
      xs[i], ys[i] = to_f32(i * 0.37), to_f32(-i / 7)
      want[i] = to_f32(xs[i] + ys[i])
    end
    assert.same(want, run_map("ADD", F32, F32, xs, ys))
  end)

  it("wrap int32 arithmetic around", function()
    local xs = { 2147483647, -2147483648, 123456789, -99999, 65536 }
    local ys = { 1, -1, 987654321, 77777, 65536 }
    local sums, prods, diffs = {}, {}, {}
    for i = 1, #xs do
      sums[i] = wrap32(xs[i] + ys[i])
      prods[i] = wrap32(xs[i] * ys[i])
      diffs[i] = wrap32(xs[i] - ys[i])
    end
    assert.same(sums, run_map("ADD", I32, I32, xs, ys))
    assert.same(prods, run_map("MUL", I32, I32, xs, ys))
    assert.same(diffs, run_map("SUB", I32, I32, xs, ys))
  end)

  it("divide both ways: truncating IDIV/MOD and floor FLOORDIV/FLOORMOD, by zero gives 0", function()
    local xs = { 7, -7, 7, -7, 0, 5, -2147483648, 6 }
    local ys = { 2, 2, -2, -2, 3, 0, -1, -3 }
    local idiv, mod, fdiv, fmod = {}, {}, {}, {}
    for i = 1, #xs do
      local a, b = xs[i], ys[i]
      if b == 0 then
        idiv[i], mod[i], fdiv[i], fmod[i] = 0, 0, 0, 0
      else
        local q = a // b
        if q < 0 and q * b ~= a then q = q + 1 end -- truncate toward zero
        idiv[i], mod[i] = wrap32(q), wrap32(a - q * b)
        fdiv[i], fmod[i] = wrap32(a // b), wrap32(a % b)
      end
    end
    assert.same(idiv, run_map("IDIV", I32, I32, xs, ys))
    assert.same(mod, run_map("MOD", I32, I32, xs, ys))
    assert.same(fdiv, run_map("FLOORDIV", I32, I32, xs, ys))
    assert.same(fmod, run_map("FLOORMOD", I32, I32, xs, ys))
  end)

  it("round float16 and bfloat16 arithmetic once per op", function()
    local next_int = rng(11)
    local xs, ys = {}, {}
    for i = 1, 200 do
      xs[i] = to_f16((next_int() % 20001 - 10000) / 97.0)
      ys[i] = to_f16((next_int() % 20001 - 10000) / 13.0)
    end
    local got = run_map("ADD", F16, F16, xs, ys)
    local gotm = run_map("MUL", F16, F16, xs, ys)
    for i = 1, #xs do
      assert.equals(to_f16(xs[i] + ys[i]), got[i])
      assert.equals(to_f16(xs[i] * ys[i]), gotm[i]) -- exact products of 11-bit significands
    end
    local bx, by = {}, {}
    for i = 1, #xs do bx[i], by[i] = to_bf16(xs[i]), to_bf16(ys[i] * 1e10) end
    local gotb = run_map("MUL", BF16, BF16, bx, by)
    for i = 1, #bx do assert.equals(to_bf16(bx[i] * by[i]), gotb[i]) end
    assert.same({ INF }, run_map("ADD", F16, F16, { 65504.0 }, { 32.0 })) -- overflow in float16
  end)

  it("follow IEEE NaN rules: MAX propagates NaN, comparisons with NaN", function()
    local xs = { NAN, 1.0, NAN, -INF }
    local ys = { 1.0, NAN, NAN, -INF }
    local mx = run_map("MAX", F32, F32, xs, ys)
    assert.is_true(isnan(mx[1]) and isnan(mx[2]) and isnan(mx[3]))
    assert.equals(-INF, mx[4])
    assert.same({ false, false, false, false }, run_map("CMPLT", F32, BOOL, xs, ys))
    assert.same({ true, true, true, false }, run_map("CMPNE", F32, BOOL, xs, ys))
    assert.same({ false, false, false, true }, run_map("CMPEQ", F32, BOOL, xs, ys))
    local sq = run_map("SQRT", F32, F32, { -1.0, 4.0 })
    assert.is_true(isnan(sq[1]))
    assert.equals(2.0, sq[2])
  end)

  it("cast and bitcast", function()
    assert.same({ 3, -3, 2147483647, 0 }, run_map("CAST", F32, I32, { 3.9, -3.9, 1e20, NAN }))
    assert.same({ 0x3f800000, wrap32(0xc0700000) }, run_map("BITCAST", F32, I32, { 1.0, -3.75 }))
  end)

  it("run nested loops", function()
    -- out[j*R + i] = a[i*C + j]: a transpose of an R x C matrix
    local R, C = 3, 5
    local list, add = builder()
    local out = add("PARAM", I32, nil, { 0, R * C })
    local a = add("PARAM", I32, nil, { 1, R * C })
    local ri = add("RANGE", IDX, { const(add, IDX, R) }, { 0, "loop" })
    local rj = add("RANGE", IDX, { const(add, IDX, C) }, { 1, "loop" })
    local src = add("ADD", IDX, { add("MUL", IDX, { ri, const(add, IDX, C) }), rj })
    local dst = add("ADD", IDX, { add("MUL", IDX, { rj, const(add, IDX, R) }), ri })
    local v = add("LOAD", I32, { add("INDEX", I32, { a, src }) })
    local st = add("STORE", nil, { add("INDEX", I32, { out, dst }), v })
    add("END", nil, { add("END", nil, { st, rj }), ri })
    local p = rt.program(list, { name = "transpose" })
    local bo, ba = rt.buffer(I32, R * C), rt.buffer(I32, R * C)
    local xs = {}
    for k = 1, R * C do xs[k] = k * 10 end
    ba:write(xs)
    local seconds = p:run { bo, ba }
    assert.is_number(seconds)
    assert.is_true(seconds >= 0)
    local got, want = bo:read(), {}
    for i = 0, R - 1 do
      for j = 0, C - 1 do want[j * R + i + 1] = xs[i * C + j + 1] end
    end
    assert.same(want, got)
  end)

  it("skip a loop whose end is zero or negative", function()
    for _, n in ipairs { 0, -3 } do
      local list, add = builder()
      local out = add("PARAM", I32, nil, { 0, 1 })
      local r = add("RANGE", IDX, { const(add, IDX, n) }, { 0, "loop" })
      local st = add("STORE", nil, { add("INDEX", I32, { out, r }), const(add, I32, 9) })
      add("END", nil, { st, r })
      local b = rt.buffer(I32, 1)
      rt.program(list):run { b }
      assert.same({ 0 }, b:read())
    end
  end)

  it("run over empty buffers", function()
    local p = map_program("ADD", F32, F32, 0, 2)
    p:run { rt.buffer(F32, 0), rt.buffer(F32, 0), rt.buffer(F32, 0) }
  end)

  it("gate loads and stores", function()
    -- out[i] = i < 3 ? a[i + 2] : 0 (a has 5 elements: i + 2 is out of bounds past i = 2),
    -- and the store of i = 4 is gated off
    local list, add = builder()
    local out = add("PARAM", F32, nil, { 0, 5 })
    local a = add("PARAM", F32, nil, { 1, 5 })
    local r = add("RANGE", IDX, { const(add, IDX, 5) }, { 0, "loop" })
    local valid = add("CMPLT", BOOL, { r, const(add, IDX, 3) })
    local v = add("LOAD", F32, { add("INDEX", F32, { a, add("ADD", IDX, { r, const(add, IDX, 2) }) }), valid })
    local keep = add("CMPNE", BOOL, { r, const(add, IDX, 4) })
    local st = add("STORE", nil, { add("INDEX", F32, { out, r }), v, keep })
    add("END", nil, { st, r })
    local bo, ba = rt.buffer(F32, 5), rt.buffer(F32, 5)
    bo:write { -1, -1, -1, -1, -1 }
    ba:write { 10, 20, 30, 40, 50 }
    rt.program(list, { name = "gated" }):run { bo, ba }
    assert.same({ 30.0, 40.0, 50.0, 0.0, -1.0 }, bo:read())
  end)

  it("reports an out-of-bounds access with kernel, instruction and index", function()
    local list, add = builder()
    local out = add("PARAM", F32, nil, { 0, 4 })
    local a = add("PARAM", F32, nil, { 1, 4 })
    local r = add("RANGE", IDX, { const(add, IDX, 4) }, { 0, "loop" })
    local ld = add("LOAD", F32, { add("INDEX", F32, { a, add("ADD", IDX, { r, const(add, IDX, 1) }) }) })
    local st = add("STORE", nil, { add("INDEX", F32, { out, r }), ld })
    add("END", nil, { st, r })
    local load_at
    for i, n in ipairs(list) do if n == ld then load_at = i - 1 end end
    local bo, ba = rt.buffer(F32, 4), rt.buffer(F32, 4)
    ba:write { 1, 2, 3, 4 }
    local err = error_of(rt.program(list, { name = "shifted" }).run, rt.program(list, { name = "shifted" }), { bo, ba })
    assert.matches(string.format(
      "kernel 'shifted': instruction %d (LOAD): index 4 is out of bounds for PARAM slot 1 (4 elements)",
      load_at), err, 1, true)
    assert.same({ 2.0, 3.0, 4.0, 0.0 }, bo:read()) -- what ran before the error stays written
    -- a store past the end, and a negative index
    local list2, add2 = builder()
    local out2 = add2("PARAM", I32, nil, { 0, 2 })
    local st2 = add2("STORE", nil, { add2("INDEX", I32, { out2, const(add2, IDX, -1) }), const(add2, I32, 1) })
    add2("SINK", nil, { st2 })
    assert.matches("instruction 4 (STORE): index -1 is out of bounds for PARAM slot 0 (2 elements)",
      error_of(rt.program(list2, { name = "neg" }).run, rt.program(list2, { name = "neg" }), { rt.buffer(I32, 2) }), 1,
          true)
  end)

  it("run one thread per SPECIAL id, launch sizes from the SPECIALs", function()
    -- out[g*2 + l] = g*10 + l over 4 groups of 2 threads
    local list, add = builder()
    local out = add("PARAM", I32, nil, { 0, 8 })
    local g = add("SPECIAL", IDX, { const(add, IDX, 4) }, "gidx0")
    local l = add("SPECIAL", IDX, { const(add, IDX, 2) }, "lidx0")
    local i = add("ADD", IDX, { add("MUL", IDX, { g, const(add, IDX, 2) }), l })
    local v = add("CAST", I32, { add("ADD", IDX, { add("MUL", IDX, { g, const(add, IDX, 10) }), l }) })
    add("STORE", nil, { add("INDEX", I32, { out, i }), v })
    local p = rt.program(list, { name = "threads" })
    assert.same({ 4, 1, 1 }, p.global_size)
    assert.same({ 2, 1, 1 }, p.local_size)
    local b = rt.buffer(I32, 8)
    p:run { b }
    assert.same({ 0, 1, 10, 11, 20, 21, 30, 31 }, b:read())
    -- the same launch given explicitly, and a contradicting one
    rt.program(list, { global_size = { 4 }, local_size = { 2, 1, 1 } }):run { b }
    assert.matches("SPECIAL gidx0 has size 4 but the launch's global size 0 is 3",
      error_of(rt.program, list, { name = "t", global_size = { 3 } }), 1, true)
    assert.matches("global_size[1] must be a positive integer", error_of(rt.program, list, { global_size = { 0 } }), 1,
      true)
  end)

  it("give every thread its own zeroed DEFINE_REG scratch", function()
    -- thread g sums 0..g into a register accumulator: out[g] = g*(g+1)/2
    local list, add = builder()
    local out = add("PARAM", I32, nil, { 0, 5 })
    local acc = add("DEFINE_REG", I32, nil, { 0, 1 })
    local g = add("SPECIAL", IDX, { const(add, IDX, 5) }, "gidx0")
    local zero = const(add, IDX, 0)
    local r = add("RANGE", IDX, { add("ADD", IDX, { g, const(add, IDX, 1) }) }, { 0, "reduce" })
    local cur = add("INDEX", I32, { acc, zero })
    local sum = add("ADD", I32, { add("LOAD", I32, { cur }), add("CAST", I32, { r }) })
    local st = add("STORE", nil, { cur, sum })
    local e = add("END", nil, { st, r })
    local final = add("LOAD", I32, { add("INDEX", I32, { add("AFTER", I32, { acc, e }), zero }) })
    add("STORE", nil, { add("INDEX", I32, { out, g }), final })
    local b = rt.buffer(I32, 5)
    rt.program(list, { name = "tri" }):run { b }
    assert.same({ 0, 1, 3, 6, 10 }, b:read())
  end)

  it("names the thread in run-time errors of multi-thread launches", function()
    local list, add = builder()
    local out = add("PARAM", I32, nil, { 0, 3 })
    local g = add("SPECIAL", IDX, { const(add, IDX, 4) }, "gidx0")
    add("STORE", nil, { add("INDEX", I32, { out, g }), const(add, I32, 1) })
    local p = rt.program(list, { name = "over" })
    assert.matches("index 3 is out of bounds for PARAM slot 0 (3 elements) (thread gidx (3,0,0) lidx (0,0,0))",
      error_of(p.run, p, { rt.buffer(I32, 3) }), 1, true)
  end)

  it("checks the buffers given to run", function()
    local p = map_program("ADD", F32, F32, 4, 2)
    assert.matches("kernel 'add' takes 3 buffers, got 2", error_of(p.run, p, { rt.buffer(F32, 4), rt.buffer(F32, 4) }),
      1, true)
    assert.matches("buffer 2 (slot 1) is int32 x 4, the kernel expects float32 x 4",
      error_of(p.run, p, { rt.buffer(F32, 4), rt.buffer(I32, 4), rt.buffer(F32, 4) }), 1, true)
    assert.matches("buffer 3 (slot 2) is float32 x 5, the kernel expects float32 x 4",
      error_of(p.run, p, { rt.buffer(F32, 4), rt.buffer(F32, 4), rt.buffer(F32, 5) }), 1, true)
    assert.matches("buffer 1 is a number, not a Buffer", error_of(p.run, p, { 1 }), 1, true)
    assert.equals(3, p.nparams)
    assert.equals(F32, p.params[2].dtype)
    assert.equals(4, p.params[2].numel)
  end)

  it("lists itself", function()
    local p = map_program("ADD", F32, F32, 4, 2)
    local text = p:dump()
    assert.matches("kernel 'add': 13 instructions, 3 buffers, global (1,1,1) local (1,1,1)", text, 1, true)
    assert.matches("RANGE", text, 1, true)
    assert.matches("    ADD        float32  [6, 8]", text, 1, true) -- indented inside the loop
    assert.equals("add", p.name)
    assert.equals(13, p.size)
  end)

  describe("are validated when built, naming instruction and op", function()
    local function build_error(make)
      local list, add = builder()
      make(add, list)
      return error_of(rt.program, list, { name = "bad" })
    end

    it("sources come earlier", function()
      local c = u("CONST", I32, nil, 1)
      local s = u("ADD", I32, { c, c })
      assert.matches("kernel 'bad': instruction 0 (ADD): source 1 (CONST) is not earlier in the list",
        error_of(rt.program, { s, c }, { name = "bad" }), 1, true)
      assert.matches("instruction 1 (CONST): the node appears twice", error_of(rt.program, { c, c }), 1, true)
      assert.matches("entry 2 of the list is a number, not a UOp", error_of(rt.program, { c, 5 }), 1, true)
    end)

    it("RANGE and END pair and nest", function()
      assert.matches("instruction 1 (RANGE): the loop is never closed by an END", build_error(function(add)
        add("RANGE", IDX, { const(add, IDX, 2) }, { 0, "loop" })
      end), 1, true)
      assert.matches("instruction 4 (END): closes RANGE at instruction 1, but the innermost open loop is another RANGE",
        build_error(function(add)
          local r0 = add("RANGE", IDX, { const(add, IDX, 2) }, { 0, "loop" })
          local r1 = add("RANGE", IDX, { const(add, IDX, 3) }, { 1, "loop" })
          add("END", nil, { r1, r0 })
        end), 1, true)
      assert.matches("instruction 2 (END): last source (CONST) is not the RANGE it closes", build_error(function(add)
        local c = const(add, IDX, 2)
        add("RANGE", IDX, { c }, { 0, "loop" })
        add("END", nil, { c })
      end), 1, true)
    end)

    it("values defined in a closed loop are not read after it", function()
      assert.matches(
        "instruction 4 (CAST): source 1 (instruction 2, ADD) was defined inside a loop that is closed here",
        build_error(function(add)
          local c = const(add, IDX, 2)
          local r = add("RANGE", IDX, { c }, { 0, "loop" })
          local v = add("ADD", IDX, { r, c })
          add("END", nil, { v, r })
          add("CAST", I32, { v })
        end), 1, true)
    end)

    it("PARAM slots are 0..n-1 and each once", function()
      assert.matches("PARAM slots must be 0..0 (one per kernel argument), got 1", build_error(function(add)
        add("PARAM", F32, nil, { 1, 4 })
      end), 1, true)
      assert.matches("instruction 1 (PARAM): slot 0 is already taken by instruction 0", build_error(function(add)
        add("PARAM", F32, nil, { 0, 4 })
        add("PARAM", I32, nil, { 0, 4 })
      end), 1, true)
      assert.matches("instruction 0 (PARAM): arg must be {slot, numel}", build_error(function(add)
        add("PARAM", F32, nil, "x")
      end), 1, true)
    end)

    it("dtypes fit each op", function()
      assert.matches("instruction 2 (ADD): is not defined for operands (float32, int32) giving float32",
        build_error(function(add)
          add("ADD", F32, { const(add, F32, 1.0), const(add, I32, 1) })
        end), 1, true)
      assert.matches("(STORE): value dtype int32 differs from its INDEX's float32", build_error(function(add)
        local p = add("PARAM", F32, nil, { 0, 1 })
        add("STORE", nil, { add("INDEX", F32, { p, const(add, IDX, 0) }), const(add, I32, 1) })
      end), 1, true)
      assert.matches("(ADD): source 1 (INDEX) is an address (LOAD it first)", build_error(function(add)
        local p = add("PARAM", F32, nil, { 0, 1 })
        local at = add("INDEX", F32, { p, const(add, IDX, 0) })
        add("ADD", F32, { at, at })
      end), 1, true)
      assert.matches("(LOAD): the gate must be a bool value, not int32 CONST", build_error(function(add)
        local p = add("PARAM", F32, nil, { 0, 1 })
        add("LOAD", F32, { add("INDEX", F32, { p, const(add, IDX, 0) }), const(add, I32, 1) })
      end), 1, true)
      assert.matches("(INDEX): source 1 (CONST) is not a PARAM or DEFINE_REG", build_error(function(add)
        add("INDEX", F32, { const(add, F32, 1.0), const(add, IDX, 0) })
      end), 1, true)
      assert.matches("instruction 0 (CONST): arg is not a value of dtype int8", build_error(function(add)
        add("CONST", "int8", nil, 300)
      end), 1, true)
    end)

    it("ops the device does not know are refused", function()
      assert.matches("instruction 0 (DEFINE_VAR): op is not supported by the EMU device", build_error(function(add)
        add("DEFINE_VAR", IDX, nil, { "n", 1, 10 })
      end), 1, true)
      assert.matches("(SPECIAL): arg must be one of gidx0..gidx2, lidx0..lidx2", build_error(function(add)
        add("SPECIAL", IDX, { const(add, IDX, 2) }, "tid")
      end), 1, true)
    end)
  end)
end)

---------------------------------------------------------------------------------------------
-- kernel ASTs, lowered by tcl.codegen.driver.lower and run on EMU

local kernels = require "spec.support.kernels"
local param, c, range, sink, store_end = kernels.param, kernels.c, kernels.range, kernels.sink, kernels.store_end
local function add_(a, b) return a + b end
local function mul(a, b) return a * b end

-- NOOPT: these kernels check how the lowering itself handles what they contain
local function run_kernel(ast, buffers)
  local k = lower.compile(ast, { noopt = true })
  k:run(buffers)
  return k
end

local function filled(dt, xs)
  local b = rt.buffer(dt, #xs)
  b:write(xs)
  return b
end

describe("kernel ASTs on EMU", function()
  it("run elementwise kernels that read INDEX values directly", function()
    local out, a, b = param(F32, 0, 6), param(F32, 1, 6), param(F32, 2, 6)
    local r = range(6, 0)
    local v = u("MUL", F32, { u("INDEX", F32, { a, r }), u("INDEX", F32, { b, r }) })
    local bo = rt.buffer(F32, 6)
    run_kernel(sink("E_6", store_end(out, r, v, r)), { bo, filled(F32, { 1, 2, 3, 4, 5, 6 }), filled(F32, { 2, 2, 2,
        0.5, 0.5, -1 }) })
    assert.same({ 2.0, 4.0, 6.0, 2.0, 2.5, -6.0 }, bo:read())
  end)

  -- out[i] = reduce_j a[i*8 + j] for a 4 x 8 input, for each reduce op
  local function reduce_kernel(op, dt)
    local out, a = param(dt, 0, 4), param(dt, 1, 32)
    local ri, rj = range(4, 0), range(8, 1, "reduce")
    local v = u("INDEX", dt, { a, add_(mul(ri, c(8)), rj) })
    local red = u("REDUCE", dt, { v, rj }, op)
    return sink("r_4_8_" .. op, store_end(out, ri, red, ri))
  end

  it("reduce with ADD, MUL and MAX through accumulators", function()
    local xs = {}
    for k = 1, 32 do xs[k] = ((k * 7) % 11) - 5 end
    local want = { ADD = {}, MUL = {}, MAX = {} }
    for i = 0, 3 do
      local s, p, m = 0, 1, math.mininteger
      for j = 0, 7 do
        local x = xs[i * 8 + j + 1]
        s, p, m = s + x, p * x, math.max(m, x)
      end
      want.ADD[i + 1], want.MUL[i + 1], want.MAX[i + 1] = s, p, m
    end
    for op, expect in pairs(want) do
      local bo = rt.buffer(I32, 4)
      run_kernel(reduce_kernel(op, I32), { bo, filled(I32, xs) })
      assert.same(expect, bo:read(), op)
      local fo = rt.buffer(F32, 4)
      run_kernel(reduce_kernel(op, F32), { fo, filled(F32, xs) })
      local fexpect = {}
      for i, v in ipairs(expect) do fexpect[i] = v + 0.0 end
      assert.same(fexpect, fo:read(), op .. " float32")
    end
  end)

  it("start MAX at -inf for floats and keep NaN", function()
    local xs = {}
    for k = 1, 32 do xs[k] = -INF end
    xs[10] = NAN
    local fo = rt.buffer(F32, 4)
    run_kernel(reduce_kernel("MAX", F32), { fo, filled(F32, xs) })
    local got = fo:read()
    assert.equals(-INF, got[1])
    assert.is_true(isnan(got[2]))
    assert.equals(-INF, got[3])
  end)

  it("reduce over an empty range to the identity, and run no loop of size 0", function()
    -- out[i] = reduce_{j < 0} a[i]: a is empty, so reading it at all would be out of bounds
    for op, want in pairs { ADD = 0.0, MUL = 1.0, MAX = -INF } do
      local out, a = param(F32, 0, 2), param(F32, 1, 0)
      local ri, rj = range(2, 0), range(0, 1, "reduce")
      local red = u("REDUCE", F32, { u("INDEX", F32, { a, ri }), rj }, op)
      local bo = rt.buffer(F32, 2)
      run_kernel(sink("r_2_0_" .. op, store_end(out, ri, red, ri)), { bo, rt.buffer(F32, 0) })
      assert.same({ want, want }, bo:read(), op)
    end
    -- out[i, j] = a[i] for an output of shape (2, 0): a has no elements either
    local out, a = param(F32, 0, 0), param(F32, 1, 0)
    local ri, rj = range(2, 0), range(0, 1)
    local k = run_kernel(sink("E_2_0", store_end(out, rj, u("INDEX", F32, { a, ri }), rj, ri)),
      { rt.buffer(F32, 0), rt.buffer(F32, 0) })
    assert.is_nil(k.program:dump():find("LOAD", 1, true))
  end)

  it("reduce a whole buffer to one value (no outer loop)", function()
    local out, a = param(F32, 0, 1), param(F32, 1, 100)
    local r = range(100, 0, "reduce")
    local red = u("REDUCE", F32, { u("INDEX", F32, { a, r }), r }, "ADD")
    local bo = rt.buffer(F32, 1)
    local xs = {}
    for k = 1, 100 do xs[k] = k end
    run_kernel(sink("r_100", store_end(out, c(0), red)), { bo, filled(F32, xs) })
    assert.same({ 5050.0 }, bo:read())
  end)

  it("reduce over two ranges at once, and a reduce inside another", function()
    -- out[i] = sum_{j,k} a[i*6 + j*3 + k]   (2 x 2 x 3)
    local out, a = param(I32, 0, 2), param(I32, 1, 12)
    local ri, rj, rk = range(2, 0), range(2, 1, "reduce"), range(3, 2, "reduce")
    local idx = add_(add_(mul(ri, c(6)), mul(rj, c(3))), rk)
    local red = u("REDUCE", I32, { u("INDEX", I32, { a, idx }), rj, rk }, "ADD")
    local bo = rt.buffer(I32, 2)
    run_kernel(sink("r_2_2_3", store_end(out, ri, red, ri)), { bo, filled(I32, { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
        12 }) })
    assert.same({ 21, 57 }, bo:read())
    -- out[0] = sum_i (a[i] * max_j b[i*3 + j])
    local o2, x, y = param(I32, 0, 1), param(I32, 1, 2), param(I32, 2, 6)
    local r1, r2 = range(2, 0, "reduce"), range(3, 1, "reduce")
    local inner = u("REDUCE", I32, { u("INDEX", I32, { y, add_(mul(r1, c(3)), r2) }), r2 }, "MAX")
    local outer = u("REDUCE", I32, { mul(u("INDEX", I32, { x, r1 }), inner), r1 }, "ADD")
    local b2 = rt.buffer(I32, 1)
    run_kernel(sink("r_nested", store_end(o2, c(0), outer)), { b2, filled(I32, { 2, 3 }), filled(I32, { 1, 9, 4, -1,
        -5, 7 }) })
    assert.same({ 2 * 9 + 3 * 7 }, b2:read())
  end)

  it("shares one loop between reduces over the same range", function()
    -- out[i] = sum_j a[i, j] + max_j a[i, j]
    local out, a = param(F32, 0, 2), param(F32, 1, 6)
    local ri, rj = range(2, 0), range(3, 1, "reduce")
    local v = u("INDEX", F32, { a, add_(mul(ri, c(3)), rj) })
    local s = u("REDUCE", F32, { v, rj }, "ADD")
    local m = u("REDUCE", F32, { v, rj }, "MAX")
    local bo = rt.buffer(F32, 2)
    local k = run_kernel(sink("r_share", store_end(out, ri, u("ADD", F32, { s, m }), ri)),
      { bo, filled(F32, { 1, 5, 2, -1, -2, -3 }) })
    assert.same({ 8 + 5.0, -6 - 1.0 }, bo:read())
    local ranges = 0
    for line in k.program:dump():gmatch("[^\n]+") do
      if line:match(" RANGE ") then ranges = ranges + 1 end
    end
    assert.equals(2, ranges) -- the i loop and one shared j loop
  end)

  it("computes a reduce whose result feeds another over the same range in two loops", function()
    -- out[0] = sum_j (a[j] - sum_j a[j] / 4)^2 with both reduces over one RANGE node
    local out, a = param(F32, 0, 1), param(F32, 1, 4)
    local rj = range(4, 0, "reduce")
    local v = u("INDEX", F32, { a, rj })
    local mean = u("MUL", F32, { u("REDUCE", F32, { v, rj }, "ADD"), c(0.25, F32) })
    local d = u("SUB", F32, { v, mean })
    local var = u("REDUCE", F32, { u("MUL", F32, { d, d }), rj }, "ADD")
    local bo = rt.buffer(F32, 1)
    run_kernel(sink("r_var", store_end(out, c(0), var)), { bo, filled(F32, { 1, 2, 3, 6 }) })
    assert.same({ 4.0 + 1 + 0 + 9 }, bo:read()) -- mean 3
  end)

  it("gates the read of WHERE(valid, INDEX, 0), so padded reads may index out of bounds", function()
    -- out[i] = (i >= 2) ? a[i - 2] : 0 for i < 6, a of 4 elements: a pad of 2 in front
    local out, a = param(F32, 0, 6), param(F32, 1, 4)
    local r = range(6, 0)
    local valid = u("CMPLT", BOOL, { c(1), r })
    local x = u("INDEX", F32, { a, add_(r, c(-2)) })
    local v = u("WHERE", F32, { valid, x, c(0.0, F32) })
    local bo = rt.buffer(F32, 6)
    local k = run_kernel(sink("E_pad", store_end(out, r, u("MUL", F32, { v, c(2.0, F32) }), r)), { bo, filled(F32, { 1,
        2, 3, 4 }) })
    assert.same({ 0.0, 0.0, 2.0, 4.0, 6.0, 8.0 }, bo:read())
    assert.is_nil(k.program:dump():find("WHERE", 1, true)) -- the gated load is the WHERE
    -- loads the scheduler gated itself, under an expression: (i >= 2) ? a[i - 2] * 2 : 0
    local g = u("LOAD", F32, { x, valid })
    local v2 = u("WHERE", F32, { valid, u("MUL", F32, { g, c(2.0, F32) }), c(0.0, F32) })
    run_kernel(sink("E_pad2", store_end(out, r, v2, r)), { bo, filled(F32, { 1, 2, 3, 5 }) })
    assert.same({ 0.0, 0.0, 2.0, 4.0, 6.0, 10.0 }, bo:read())
    -- an ungated read out of bounds under a WHERE is still an error, never a silent read
    local v3 = u("WHERE", F32, { valid, u("MUL", F32, { x, c(2.0, F32) }), c(0.0, F32) })
    assert.matches("index -2 is out of bounds for PARAM slot 1 (4 elements)", error_of(run_kernel,
      sink("E_pad3", store_end(out, r, v3, r)), { bo, filled(F32, { 1, 2, 3, 5 }) }), 1, true)
    -- the same for bool data, where symbolic would turn WHERE(g, x, false) into g & x
    local ob, ab = param(BOOL, 0, 6), param(BOOL, 1, 4)
    local vb = u("WHERE", BOOL, { valid, u("INDEX", BOOL, { ab, add_(r, c(-2)) }), c(false, BOOL) })
    local bb = rt.buffer(BOOL, 6)
    run_kernel(sink("E_padb", store_end(ob, r, vb, r)), { bb, filled(BOOL, { true, false, true, true }) })
    assert.same({ false, false, true, false, true, true }, bb:read())
  end)

  it("accepts END over several ranges", function()
    local out = param(I32, 0, 6)
    local ri, rj = range(2, 0), range(3, 1)
    local st = u("STORE", nil, { u("INDEX", I32, { out, add_(mul(ri, c(3)), rj) }), u("CAST", I32, { add_(mul(ri,
        c(10)), rj) }) })
    local bo = rt.buffer(I32, 6)
    run_kernel(sink("E_2_3", u("END", nil, { st, ri, rj })), { bo })
    assert.same({ 0, 1, 2, 10, 11, 12 }, bo:read())
  end)

  it("names the kernel in lowering errors", function()
    local out, a = param(F32, 0, 1), param(F32, 1, 4)
    local r = range(4, 0, "reduce")
    local red = u("REDUCE", F32, { u("INDEX", F32, { a, r }), r }, "MIN")
    local err = error_of(lower.compile, sink("r_bad", store_end(out, c(0), red)), { noopt = true })
    assert.matches("kernel 'r_bad': pass 'lower reduces': ", err, 1, true)
    assert.matches("REDUCE: op must be ADD, MUL or MAX, got MIN", err, 1, true)
    local ro = range(4, 0)
    assert.matches("kernel 'E_open': linearize: RANGE axis 0 (loop) (node",
      error_of(lower.compile, sink("E_open", u("STORE", nil, { u("INDEX", F32, { out, ro }), c(1.0, F32) })),
        { noopt = true }), 1, true)
    -- with opts, the bad reduction is caught where the optimizer unrolls it
    assert.matches("REDUCE: op must be ADD, MUL or MAX, got MIN", error_of(lower.compile, sink("r_bad2",
      store_end(out, c(0), red))), 1, true)
  end)
end)
