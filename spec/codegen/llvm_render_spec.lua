-- spec/codegen/llvm_render_spec.lua — the LLVM renderer (src/codegen, module tcl.llvm) on its own: every
-- ALU op, cast and bitcast of every dtype on edge values against EMU (src/core/alu.c defines
-- the results, including what C leaves undefined), bit for bit except the transcendentals;
-- every bit pattern of the narrow float formats; gated memory; the parallel loop; what the IR
-- says (noalias, fast-math flags only on accumulators); compiles on several threads; errors
-- that name the kernel and the instruction.
local tcl = require "tcl"
local HAVE_RENDERER, llvm = pcall(require, "tcl.llvm")
local alu = require "tcl.alu"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local rt = require "tcl.runtime"
local K = require "spec.support.kernels"

local u = tcl.uop
local NAN, INF = 0.0 / 0.0, math.huge

local INT_DTYPES = { "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64" }
local FLOAT_DTYPES = { "float16", "bfloat16", "fp8e4m3", "fp8e5m2", "float32", "float64" }
local ALL_DTYPES = { "bool" }
for _, d in ipairs(INT_DTYPES) do ALL_DTYPES[#ALL_DTYPES + 1] = d end
for _, d in ipairs(FLOAT_DTYPES) do ALL_DTYPES[#ALL_DTYPES + 1] = d end

local UNARY = { "NEG", "RECIPROCAL", "SQRT", "EXP2", "LOG2", "SIN", "TRUNC" }
local BINARY = { "ADD", "SUB", "MUL", "FDIV", "IDIV", "MOD", "FLOORDIV", "FLOORMOD", "POW", "MAX", "MIN", "CMPLT",
  "CMPNE", "CMPEQ", "AND", "OR", "XOR", "SHL", "SHR", "THREEFRY" }
local TERNARY = { "WHERE", "MULACC" }
-- results that are approximations on one side or both (libm or polynomials): compared in ulps
local APPROXIMATE = { EXP2 = true, LOG2 = true, SIN = true, POW = true }

local function dt(name) return tcl.dtype(name) end

-- edge values of a dtype (as Lua values the buffers take)
local function edges(name)
  if name == "bool" then return { false, true } end
  local d = dt(name)
  if d.is_float then
    local max = d.max
    return { 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1.5, 7.25, -0.1, max, -max, max / 3, 1e-3, 2.0 ^ -20, INF, -INF,
      NAN, 100.0, -37.5 }
  end
  local width = d.itemsize * 8
  local min, max -- uint64's all bits set is -1, as CONST args hold it
  if d.is_unsigned then min, max = 0, (1 << width) - 1 else min, max = -(1 << (width - 1)), (1 << (width - 1)) - 1 end
  local list = { 0, 1, 2, 7, 3, width - 1, width, width + 1, 100, max, min }
  if min ~= 0 then
    for _, v in ipairs { -1, -2, -7, min + 1, max - 1, -width } do list[#list + 1] = v end
  else
    list[#list + 1] = name == "uint64" and -2 or max - 1
  end
  return list
end

local function defined(op, dtype_name, nsrc)
  local d = dt(dtype_name)
  local zero = d.is_float and 0.0 or (dtype_name == "bool" and false or 0)
  local args = {}
  for k = 1, nsrc do args[k] = { zero, dtype_name } end
  if op == "WHERE" then args[1] = { false, "bool" } end
  return (pcall(alu.exec, op, dtype_name, table.unpack(args)))
end

-- The kernel out[i] = op(in1[i], ...) for n elements.
local function kernel(op, out_dtype, in_dtypes, n)
  local loads = {}
  local r = K.range(n, 0)
  for k, d in ipairs(in_dtypes) do
    local p = K.param(dt(d), k, n)
    loads[k] = u("LOAD", dt(d), { u("INDEX", dt(d), { p, r }) })
  end
  return K.sink("t_" .. op, K.store_end(K.param(dt(out_dtype), 0, n), r, u(op, dt(out_dtype), loads), r))
end

local function run(device, sink, out_dtype, inputs, n)
  local k = lower.compile(sink, { device = device })
  local bufs = { rt.buffer(dt(out_dtype), n, device) }
  for i, input in ipairs(inputs) do bufs[i + 1] = rt.buffer(dt(input[1]), n, device):write(input[2]) end
  k:run(bufs)
  return bufs[1]:read()
end

local function is_nan(v) return v ~= v end

-- float results: equal, both NaN, or (approximate ops) within a few units of the format
local function ulp(dtype_name, v)
  local d = dt(dtype_name)
  local man = ({ float16 = 10, bfloat16 = 7, fp8e4m3 = 3, fp8e5m2 = 2, float32 = 23, float64 = 52 })[dtype_name]
  local min_exp = ({ float16 = -14, bfloat16 = -126, fp8e4m3 = -6, fp8e5m2 = -14, float32 = -126, float64 = -1022 })
    [dtype_name]
  assert(d.is_float)
  local a, e = math.abs(v), min_exp -- e: the exponent of v's binade, at least the normal range's
  if a ~= 0 then
    e = math.max(min_exp, math.floor(math.log(a, 2)))
    while 2.0 ^ e > a and e > min_exp do e = e - 1 end
    while 2.0 ^ (e + 1) <= a do e = e + 1 end
  end
  return 2.0 ^ (e - man)
end

local function same(a, b, dtype_name, approximate)
  if type(a) ~= "number" or type(b) ~= "number" then return a == b end
  if is_nan(a) or is_nan(b) then return is_nan(a) and is_nan(b) end
  if a == b then return a ~= 0 or (1 / a == 1 / b) end -- -0 and +0 differ
  if approximate and math.abs(a) ~= INF and math.abs(b) ~= INF then
    return math.abs(a - b) <= 2 * ulp(dtype_name, b)
  end
  return false
end

local function show(v)
  if type(v) == "number" and math.type(v) == "float" then return string.format("%.17g", v) end
  return tostring(v)
end

-- Runs op on every combination of edge values on both devices and compares.
local function check_op(op, dtype_name, nsrc)
  local values = edges(dtype_name)
  local columns = {}
  for k = 1, nsrc do columns[k] = {} end
  local function fill(k, chosen)
    if k > nsrc then
      for j = 1, nsrc do columns[j][#columns[j] + 1] = chosen[j] end
      return
    end
    local list = values
    if op == "WHERE" and k == 1 then list = { false, true } end
    for _, v in ipairs(list) do
      chosen[k] = v
      fill(k + 1, chosen)
    end
  end
  fill(1, {})
  local n = #columns[1]
  local in_dtypes, inputs = {}, {}
  for k = 1, nsrc do
    in_dtypes[k] = (op == "WHERE" and k == 1) and "bool" or dtype_name
    inputs[k] = { in_dtypes[k], columns[k] }
  end
  local out_dtype = (op == "CMPLT" or op == "CMPNE" or op == "CMPEQ") and "bool" or dtype_name
  local sink = kernel(op, out_dtype, in_dtypes, n)
  local cpu = run("CPU", sink, out_dtype, inputs, n)
  local emu = run("EMU", sink, out_dtype, inputs, n)
  for i = 1, n do
    if not same(cpu[i], emu[i], out_dtype, APPROXIMATE[op]) then
      local args = {}
      for k = 1, nsrc do args[k] = show(columns[k][i]) end
      error(string.format("%s %s(%s): CPU %s, EMU %s", dtype_name, op, table.concat(args, ", "), show(cpu[i]),
        show(emu[i])), 2)
    end
  end
  return n
end

describe("the LLVM renderer", function()
  if not HAVE_RENDERER then
    pending("needs the LLVM renderer (tcl.llvm)")
    return
  end

  it("knows LLVM's version and this host", function()
    assert.matches("^%d+%.%d+", llvm.version)
    assert.is_true(tonumber(llvm.version:match("^%d+")) >= 15)
    assert.matches("^[%w_]+%-", llvm.target.triple)
    assert.is_truthy(llvm.target.cpu ~= "")
  end)

  describe("computes every ALU op as EMU does", function()
    for _, group in ipairs { { UNARY, 1 }, { BINARY, 2 }, { TERNARY, 3 } } do
      local ops, nsrc = group[1], group[2]
      for _, op in ipairs(ops) do
        it(op .. " on every dtype that has it, bit for bit on edge values" .. (APPROXIMATE[op] and
          " (within 2 units of the format: libm and polynomials)" or ""), function()
          local checked = 0
          for _, d in ipairs(ALL_DTYPES) do
            if defined(op, d, nsrc) then checked = checked + check_op(op, d, nsrc) end
          end
          assert.is_true(checked > 0)
        end)
      end
    end
  end)

  it("casts and bitcasts between every pair of dtypes as EMU does", function()
    for _, from in ipairs(ALL_DTYPES) do
      local values = edges(from)
      if dt(from).is_float then -- ties and halfway cases of every narrower format
        for _, v in ipairs { 1.00048828125, 1.0009765625 * 3, 65519.99, 65520.0, 448.0, 464.0, 57344.0,
          61440.0, 2.0 ^ -24, 2.0 ^ -25, 3 * 2.0 ^ -26, 2.0 ^ -133, 2.0 ^ -9, 2.0 ^ -10, 2.0 ^ -17, 1 + 2.0 ^ -8,
          1 + 3 * 2.0 ^ -9, -(1 + 2.0 ^ -4), 0.1, 1e30, -1e-30, 2.0 ^ 31, 2.0 ^ 63, -2.0 ^ 63, 2.0 ^ 64,
          4294967295.5 } do
          values[#values + 1] = v
        end
      end
      for _, to in ipairs(ALL_DTYPES) do
        local inputs = { { from, values } }
        local cpu = run("CPU", kernel("CAST", to, { from }, #values), to, inputs, #values)
        local emu = run("EMU", kernel("CAST", to, { from }, #values), to, inputs, #values)
        for i = 1, #values do
          assert(same(cpu[i], emu[i], to, false), string.format("CAST %s -> %s of %s: CPU %s, EMU %s", from, to,
            show(values[i]), show(cpu[i]), show(emu[i])))
        end
        if dt(from).itemsize == dt(to).itemsize and from ~= to then
          cpu = run("CPU", kernel("BITCAST", to, { from }, #values), to, inputs, #values)
          emu = run("EMU", kernel("BITCAST", to, { from }, #values), to, inputs, #values)
          for i = 1, #values do
            assert(same(cpu[i], emu[i], to, false), string.format("BITCAST %s -> %s of %s: CPU %s, EMU %s", from, to,
              show(values[i]), show(cpu[i]), show(emu[i])))
          end
        end
      end
    end
  end)

  it("decodes and encodes every bit pattern of the narrow float formats exactly", function()
    for _, fmt in ipairs { { "float16", "int16", 65536 }, { "bfloat16", "int16", 65536 }, { "fp8e4m3", "int8", 256 },
      { "fp8e5m2", "int8", 256 } } do
      local name, int, count = fmt[1], fmt[2], fmt[3]
      local patterns = {}
      for b = 0, count - 1 do patterns[b + 1] = b >= count // 2 and b - count or b end
      -- bits -> value -> float32 -> value -> bits: every pattern survives (NaNs keep their payload)
      local r = K.range(count, 0)
      local loaded = u("LOAD", dt(int), { u("INDEX", dt(int), { K.param(dt(int), 1, count), r }) })
      local as_float = u("BITCAST", dt(name), { loaded })
      local wide = u("CAST", dt "float32", { as_float })
      local back = u("BITCAST", dt(int), { u("CAST", dt(name), { wide }) })
      local sink = K.sink("roundtrip_" .. name, K.store_end(K.param(dt(int), 0, count), r, back, r))
      local cpu = run("CPU", sink, int, { { int, patterns } }, count)
      local emu = run("EMU", sink, int, { { int, patterns } }, count)
      for i = 1, count do
        assert(cpu[i] == emu[i], string.format("%s pattern %d: CPU %s, EMU %s", name, patterns[i], cpu[i], emu[i]))
      end
      -- and the float32 values themselves, bit for bit
      local f_sink = K.sink("decode_" .. name, K.store_end(K.param(dt "int32", 0, count), r,
        u("BITCAST", dt "int32", { wide }), r))
      cpu = run("CPU", f_sink, "int32", { { int, patterns } }, count)
      emu = run("EMU", f_sink, "int32", { { int, patterns } }, count)
      for i = 1, count do
        local b = patterns[i]
        local nan = emu[i] & 0x7fffffff > 0x7f800000
        assert(cpu[i] == emu[i] or (nan and cpu[i] & 0x7fffffff > 0x7f800000),
          string.format("%s pattern %d decodes to %08x on CPU, %08x on EMU", name, b, cpu[i] & 0xffffffff,
            emu[i] & 0xffffffff))
      end
    end
  end)

  it("rounds float32 and float64 values to the narrow formats once, to nearest even", function()
    math.randomseed(20261124)
    for _, src in ipairs { "float32", "float64" } do
      local values = {}
      for _ = 1, 4000 do -- every magnitude and many ties: few significant bits, shifted around
        local m = math.random(0, 1 << 12) * 2.0 ^ math.random(-40, 10)
        values[#values + 1] = math.random() < 0.5 and -m or m
      end
      for _ = 1, 2000 do values[#values + 1] = (math.random() - 0.5) * 2.0 ^ math.random(-150, 20) end
      for _, to in ipairs { "float16", "bfloat16", "fp8e4m3", "fp8e5m2" } do
        local inputs = { { src, values } }
        local cpu = run("CPU", kernel("CAST", to, { src }, #values), to, inputs, #values)
        local emu = run("EMU", kernel("CAST", to, { src }, #values), to, inputs, #values)
        for i = 1, #values do
          assert(same(cpu[i], emu[i], to, false), string.format("CAST %s -> %s of %.17g: CPU %s, EMU %s", src, to,
            values[i], show(cpu[i]), show(emu[i])))
        end
      end
    end
  end)

  it("never touches gated-off addresses: padded reads on the edges of buffers", function()
    local x = tcl.Tensor.arange(1, 13):reshape(3, 4):float()
    local padded = x:pad({ { 2, 3 }, { 5, 1 } }, -1) * 2
    local emu = tcl.Tensor.arange(1, 13, { device = "EMU" }):reshape(3, 4):float():pad({ { 2, 3 }, { 5, 1 } }, -1) * 2
    assert.are.same(emu:tolist(), padded:tolist())
    local flipped = x:flip(1):pad({ { 0, 0 }, { 4, 4 } }):sum(2)
    assert.are.same({ 42.0, 26.0, 10.0 }, flipped:tolist())
  end)

  describe("kernels", function()
    local function compiled(sink, opts)
      opts = opts or {}
      local list = linearize.linearize(lower.run_passes(sink, { name = "t", device = "CPU",
        renderer = require("tcl.codegen.devices.llvm").renderer }))
      return llvm.compile(list, { name = opts.name or "t", entry = opts.entry or "tcl_spec_kernel", want_ir = true })
    end

    it("get noalias, 64-byte aligned buffers and fast-math flags only on accumulators", function()
      local n = 64
      local a = K.param(dt "float32", 1, n)
      local r = K.range(n, 0, "thread")
      local x = u("LOAD", dt "float32", { u("INDEX", dt "float32", { a, r }) })
      local ew = compiled(K.sink("ew", K.store_end(K.param(dt "float32", 0, n), r, x * x + x, r)))
      assert.matches("ptr noalias nocapture align 64 %%data0", ew.ir)
      assert.is_nil(ew.ir:find("reassoc", 1, true))
      assert.is_nil(ew.ir:find("contract", 1, true))
      assert.are.equal(n, ew.parallel_size) -- its one loop is a thread axis: split across threads
      local rr = K.range(n, 1, "reduce")
      local xr = u("LOAD", dt "float32", { u("INDEX", dt "float32", { a, rr }) })
      local sum = u("REDUCE", dt "float32", { xr * xr, rr }, "ADD")
      local red = compiled(K.sink("red", u("STORE", nil, { u("INDEX", dt "float32", { K.param(dt "float32", 0, 1),
        K.c(0) }), sum })))
      if tonumber(llvm.version:match("^%d+")) >= 18 then -- older C APIs cannot set the flags
        assert.matches("fadd reassoc contract float", red.ir)
        assert.matches("fmul contract float", red.ir)
      end
      assert.are.equal(0, red.parallel_size) -- a top-level reduction is not split
      assert.are.same({ "float32", "float32" }, { red.params[1].dtype.name, red.params[2].dtype.name })
      assert.are.same({ 1, n }, { red.params[1].numel, red.params[2].numel })
    end)

    it("have no parallel loop when something outside the loop stores or there are two loops", function()
      local n = 8
      local a = K.param(dt "int32", 1, n)
      local out = K.param(dt "int32", 0, n)
      local r1, r2 = K.range(n, 0), K.range(n, 1)
      local v1 = u("LOAD", dt "int32", { u("INDEX", dt "int32", { a, r1 }) })
      local v2 = u("LOAD", dt "int32", { u("INDEX", dt "int32", { a, r2 }) })
      local two = compiled(K.sink("two", K.store_end(out, r1, v1, r1), K.store_end(out, r2, v2 + 1, r2)))
      assert.are.equal(0, two.parallel_size)
    end)

    it("split their parallel loop across the pool when the work is worth it, every element done once", function()
      local schedule = require "tcl.schedule"
      local function program_of(t)
        return lower.compile(schedule.create({ t.uop }).kernels[1].ast, { device = "CPU" }).program.cpu
      end
      local n = 300007 -- prime: the default heuristic pads the axis to split it into thread parts
      local x = tcl.Tensor.arange(n)
      local y = x * 3 + 1
      assert.is_true(program_of(y):parts(2) > 1)
      assert.are.equal(1, program_of(tcl.Tensor.arange(64) * 3 + 1):parts(2)) -- too little work to wake threads
      local noopt = lower.compile(schedule.create({ (x * 5).uop }).kernels[1].ast, { device = "CPU", noopt = true })
      assert.are.equal(1, noopt.program.cpu:parts(2)) -- no THREAD opt: one call
      local got = y:tolist()
      for i = 1, n do
        if got[i] ~= 3 * (i - 1) + 1 then error(string.format("element %d is %s", i, tostring(got[i]))) end
      end
    end)

    it("compile on several threads to the same code as on one", function()
      local requests, names = {}, {}
      for i = 1, 24 do
        local n = 16 * i
        local a = K.param(dt "float32", 1, n)
        local r = K.range(n, 0, "thread")
        local x = u("LOAD", dt "float32", { u("INDEX", dt "float32", { a, r }) })
        local sink = K.sink("k" .. i, K.store_end(K.param(dt "float32", 0, n), r, x * (i + 0.5) + x:max(x * x), r))
        local list = linearize.linearize(lower.run_passes(sink, { name = "k" .. i }))
        names[i] = "tcl_spec_threads_" .. i
        requests[i] = { list, { name = "k" .. i, entry = names[i] } }
      end
      local one = llvm.compile_many(requests, { threads = 1 })
      local four = llvm.compile_many(requests, { threads = 4 })
      local prints = llvm.fingerprint_many(requests, { threads = 3 })
      for i = 1, #requests do
        assert.are.equal(one[i].object, four[i].object)
        assert.are.equal(names[i], four[i].entry)
        assert.are.equal(16 * i, four[i].parallel_size)
        assert.matches("^%x+$", prints[i])
        assert.are.equal(32, #prints[i])
        for j = 1, i - 1 do assert.are_not.equal(prints[j], prints[i]) end
      end
      assert.are.same(prints, llvm.fingerprint_many(requests, { threads = 1 }))
    end)

    it("name the kernel, the instruction and its op when a program is invalid", function()
      local n = 4
      local a = K.param(dt "float32", 0, n)
      local r = K.range(n, 0)
      local index = u("INDEX", dt "float32", { a, r })
      local bad_list = { a, K.c(n), r, index, u("LOAD", dt "float32", { a }) }
      local ok, err = pcall(llvm.compile, bad_list, { name = "bad", entry = "tcl_spec_bad" })
      assert.is_false(ok)
      assert.matches("kernel 'bad': instruction 4 %(LOAD%): source 1 %(PARAM%) is not an INDEX", err)
      ok, err = pcall(llvm.compile, { a, K.c(n), r }, { name = "open", entry = "tcl_spec_open" })
      assert.is_false(ok)
      assert.matches("kernel 'open': instruction 2 %(RANGE%): the loop is never closed by an END", err)
      ok, err = pcall(llvm.compile, { a, u("SQRT", dt "int32", { K.c(1, dt "int32") }) }, { name = "sq",
        entry = "tcl_spec_sq" })
      assert.is_false(ok)
      assert.matches("kernel 'sq': instruction 1 %(SQRT%): source 1 %(CONST%) is not earlier in the list", err)
      ok, err = pcall(llvm.compile, { K.c(1, dt "int32"), u("SQRT", dt "int32", { K.c(1, dt "int32") }) },
        { name = "sq", entry = "tcl_spec_sq" })
      assert.is_false(ok)
      assert.matches("instruction 1 %(SQRT%): is not defined for operands %(int32%) giving int32", err)
      ok, err = pcall(llvm.compile, { a }, { name = "noentry" })
      assert.is_false(ok)
      assert.matches("needs an entry", err)
      -- an asynchronous copy into local memory (GPU kernels only)
      local b = K.param(dt "float32", 1, n)
      local copy = { a, b, K.c(0), u("INDEX", dt "float32", { a, K.c(0) }), u("INDEX", dt "float32", { b, K.c(0) }) }
      copy[6] = u("LOAD", dt "float32", { copy[5] })
      copy[7] = u("STORE", nil, { copy[4], copy[6] }, { "async", 4 })
      ok, err = pcall(llvm.compile, copy, { name = "copy", entry = "tcl_spec_copy" })
      assert.is_false(ok)
      assert.matches("kernel 'copy': instruction 6 %(STORE%): an asynchronous copy writes local memory", err)
    end)
  end)
end)
