-- spec/codegen/gpu_render_spec.lua — the CUDA and Metal source renderers (src/codegen/c_render.h, module
-- tcl.gpu) and NVRTC (src/runtime/cuda/nvrtc.h, module tcl.nvrtc), on a machine without a GPU:
--   * hand-built linear programs: every ALU op, cast, bitcast and constant of every dtype, and
--     GPU-shaped programs (SPECIAL, DEFINE_LOCAL, BARRIER, AFTER), their text and launch facts;
--   * the kernels of Tensor expressions (every dtype, reductions, padding, transcendentals,
--     random numbers, matmuls), lowered with loops and lowered for a GPU (tcl.codegen.devices.gpu_targets);
--   * each rendered to CUDA C, compiled by NVRTC for sm_80 and sm_90 and assembled by ptxas, and
--     to Metal, checked by clang++ against spec.support.metal_stub (Metal's float64 and fp8: errors);
--   * the CUDA source of the all-ops programs built as host C++ (a small shim for CUDA's
--     intrinsics) and run against EMU: the same values, bit for bit, but for the transcendentals;
--   * errors that name the kernel and the instruction.
-- Without NVRTC, ptxas or clang++ the checks that need them are pending, with the reason.
local tcl = require "tcl"
local gpu = require "tcl.gpu"
local nvrtc = require "tcl.nvrtc"
local stub = require "spec.support.metal_stub"
local alu = require "tcl.alu"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local schedule = require "tcl.schedule"
local targets = require "tcl.codegen.devices.gpu_targets"
local rt = require "tcl.runtime"
local helper = require "spec.support.helper"
local K = require "spec.support.kernels"

local u = tcl.uop
local T = tcl.Tensor
local q = helper.shell_quote
local IDX = tcl.dtype "index"
local NAN, INF = 0.0 / 0.0, math.huge

local function dt(name) return tcl.dtype(name) end

local INT_DTYPES = { "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64" }
local FLOAT_DTYPES = { "float16", "bfloat16", "fp8e4m3", "fp8e5m2", "float32", "float64" }
local ALL_DTYPES = { "bool" }
for _, d in ipairs(INT_DTYPES) do ALL_DTYPES[#ALL_DTYPES + 1] = d end
for _, d in ipairs(FLOAT_DTYPES) do ALL_DTYPES[#ALL_DTYPES + 1] = d end
local METAL_LACKS = { float64 = true, fp8e4m3 = true, fp8e5m2 = true }
local NARROW = { float16 = true, bfloat16 = true, fp8e4m3 = true, fp8e5m2 = true }

local UNARY = { "NEG", "RECIPROCAL", "SQRT", "EXP2", "LOG2", "SIN", "COS", "TRUNC" }
local BINARY = { "ADD", "SUB", "MUL", "FDIV", "IDIV", "MOD", "FLOORDIV", "FLOORMOD", "POW", "MAX", "MIN", "AND", "OR",
  "XOR", "SHL", "SHR", "THREEFRY" }
local COMPARE = { "CMPLT", "CMPNE", "CMPEQ" }
-- libm's results or the device's: compared with EMU in ulps elsewhere (llvm_render_spec), not here
local APPROXIMATE = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true }

---------------------------------------------------------------------------------------------
-- the tools, where this machine has them

local HAVE_NVRTC, NVRTC_WHY = nvrtc.available()
local ARCHS = { "sm_80", "sm_90" }

local PTXAS = require("spec.support.cuda_tools").find_ptxas()
local HAVE_CLANG = helper.run("command -v clang++") == 0

-- A host C++ compiler with _Float16 (GCC 12 has it on x86-64, clang 14 not) and UBSan, for
-- running the rendered sources on the host; nil when there is none. The kernels are built with
-- UBSan, which stops at anything C leaves undefined (signed overflow, shifts too far, float ->
-- int conversions out of range): the renderers must never write such code.
local HOST_FLAGS = "-std=c++17 -O1 -ffp-contract=off -fsanitize=undefined,float-cast-overflow " ..
  "-fno-sanitize-recover=all -w"
local function find_host_cxx()
  local probe = os.tmpname()
  helper.write(probe .. ".cpp", "int main() { _Float16 h = (_Float16)1.5f; return (float)h == 1.5f ? 0 : 1; }\n")
  local found
  for _, cxx in ipairs { "g++", "clang++", "c++" } do
    if helper.run(string.format("%s %s -o %s %s", cxx, HOST_FLAGS, q(probe), q(probe .. ".cpp"))) == 0 then
      found = cxx
      break
    end
  end
  os.remove(probe)
  os.remove(probe .. ".cpp")
  return found
end
local HOST_CXX = find_host_cxx()

-- pending(...) with the reason when a tool is missing; true when the test may go on
local function need_nvrtc()
  if HAVE_NVRTC then return true end
  pending("NVRTC is not available: " .. tostring(NVRTC_WHY))
  return false
end

local function need_host_cxx()
  if HOST_CXX then return true end
  pending("no C++ compiler with _Float16 and UBSan (g++ 12 or later): the sources cannot run on the host")
  return false
end

local function need_clang()
  if HAVE_CLANG then return true end
  pending("clang++ is not installed: Metal sources cannot be checked")
  return false
end

--- Compiles CUDA source (one kernel, or several concatenated: helpers are guarded) for sm_80
-- and sm_90, and assembles the PTX with ptxas (when present). names: the kernels' names.
local function cuda_compiles(src, names)
  if type(names) == "string" then names = { names } end
  for _, arch in ipairs(ARCHS) do
    local ok, ptx = pcall(nvrtc.compile_ptx, src, { arch = arch, name = names[1] })
    if not ok then error(ptx, 2) end
    assert.matches(".target " .. arch, ptx, 1, true)
    for _, name in ipairs(names) do
      assert.matches(".entry " .. name .. "(", ptx, 1, true) -- extern "C": the name as given
    end
    if PTXAS then
      local file = os.tmpname()
      helper.write(file, ptx)
      local status, _, err = helper.run(q(PTXAS) .. " -arch=" .. arch .. " -o /dev/null " .. q(file))
      os.remove(file)
      if status ~= 0 then
        error(string.format("ptxas -arch=%s failed for kernels %s:\n%s", arch, table.concat(names, ", "), err), 2)
      end
    end
  end
end

local function metal_checks(src, name)
  local ok, messages = stub.check(src)
  if not ok then error(string.format("Metal kernel '%s' does not compile against the stub:\n%s\n%s", name,
    tostring(messages), src), 2) end
end

---------------------------------------------------------------------------------------------
-- linear programs

local builder = K.builder -- a linear program: list, add(op, dtype, src, arg)

local function const(add, dtype, v) return add("CONST", dtype, nil, v) end

-- times(x, c) and plus(x, c): index arithmetic with a constant, added through add.
local function index_math(add)
  return function(x, c) return add("MUL", IDX, { x, const(add, IDX, c) }) end,
    function(x, c) return add("ADD", IDX, { x, const(add, IDX, c) }) end
end

local function zero_of(name)
  if name == "bool" then return false end
  return dt(name).is_float and 0.0 or 0
end

-- Whether op is defined for operands of these dtypes giving `result` (EMU's ALU decides).
local function defined(op, result, operands)
  local args = {}
  for k, d in ipairs(operands) do args[k] = { zero_of(d), d } end
  return (pcall(alu.exec, op, result, table.unpack(args)))
end

-- Edge values of a dtype, as the buffers take them.
local function edges(name)
  if name == "bool" then return { false, true } end
  local d = dt(name)
  if d.is_float then
    return { 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 7.25, -0.1, d.max, -d.max, 1e-3, 2.0 ^ -20, INF, -INF, NAN, 100.0 }
  end
  local width = d.itemsize * 8
  local min, max -- uint64's all bits set is -1, as CONST args hold it
  if d.is_unsigned then min, max = 0, (1 << width) - 1 else min, max = -(1 << (width - 1)), (1 << (width - 1)) - 1 end
  if name == "uint64" then max = -1 end
  local list = { 0, 1, 2, 3, 7, width - 1, width, width + 1, 100, max, min }
  if min ~= 0 then
    for _, v in ipairs { -1, -2, -7, min + 1, -width } do list[#list + 1] = v end
  end
  return list
end

-- Every op, cast and bitcast of dtype `name` on three inputs, and its edge constants: the
-- results are stored, grouped by dtype, into one output buffer per dtype (slot 3 on); each
-- result's place is recorded. Inputs: every pair of edge values (x1, x2), x3 a rotation.
local WIDTH = 64
local function all_ops(name, dialect)
  local d = dt(name)
  local values = edges(name)
  local columns = { {}, {}, {} }
  for i, a in ipairs(values) do
    for j, b in ipairs(values) do
      local k = #columns[1] + 1
      columns[1][k], columns[2][k] = a, b
      columns[3][k] = values[(i + j) % #values + 1]
    end
  end
  local n = #columns[1]
  local r = K.range(n, 0)
  local x = {}
  for k = 1, 3 do x[k] = u("LOAD", d, { u("INDEX", d, { K.param(d, k - 1, n), r }) }) end
  local results = {} -- { node =, what = }
  local function result(node, what) results[#results + 1] = { node = node, what = what } end
  for _, op in ipairs(UNARY) do
    if defined(op, name, { name }) then result(u(op, d, { x[1] }), op) end
  end
  for _, op in ipairs(BINARY) do
    if defined(op, name, { name, name }) then result(u(op, d, { x[1], x[2] }), op) end
  end
  for _, op in ipairs(COMPARE) do
    if defined(op, "bool", { name, name }) then result(u(op, dt "bool", { x[1], x[2] }), op) end
  end
  result(u("WHERE", d, { u("CMPLT", dt "bool", { x[1], x[2] }), x[2], x[3] }), "WHERE")
  if defined("MULACC", name, { name, name, name }) then result(u("MULACC", d, x), "MULACC") end
  for _, op in ipairs { "SHL", "SHR" } do -- by a constant count, in range
    if defined(op, name, { name, name }) then result(u(op, d, { x[1], K.c(3, d) }), op .. " 3") end
  end
  -- a narrow float's register holds its value in float: what an op leaves there must be
  -- rounded already, which a store (rounding again) would not show, but a cast to float32 does
  if NARROW[name] then
    for k = 1, #results do
      if results[k].node.dtype == d then
        result(u("CAST", dt "float32", { results[k].node }), results[k].what .. " then float32")
      end
    end
  end
  for _, to in ipairs(ALL_DTYPES) do
    if to ~= name and not (dialect == "metal" and METAL_LACKS[to]) then
      result(u("CAST", dt(to), { x[1] }), "CAST " .. to)
      if dt(to).itemsize == d.itemsize then result(u("BITCAST", dt(to), { x[1] }), "BITCAST " .. to) end
    end
  end
  for _, v in ipairs(values) do result(K.c(v, d), "CONST " .. tostring(v)) end
  -- one output buffer per result dtype, in order of first appearance
  local outs, order, layout, stores = {}, {}, {}, {}
  for _, res in ipairs(results) do
    local od = res.node.dtype
    if not outs[od.name] then
      order[#order + 1] = od.name
      outs[od.name] = K.param(od, 2 + #order, n * WIDTH)
      layout[od.name] = {}
    end
    local at = #layout[od.name]
    assert(at < WIDTH, "too many results of one dtype")
    layout[od.name][at + 1] = res.what
    stores[#stores + 1] = u("STORE", nil, { u("INDEX", od, { outs[od.name], r * WIDTH + at }), res.node })
  end
  stores[#stores + 1] = r
  local list = linearize.linearize(K.sink("ops_" .. name, u("END", nil, stores)))
  return list, { columns = columns, n = n, order = order, layout = layout }
end

---------------------------------------------------------------------------------------------
-- kernels of Tensor expressions

-- The renderers here have every ALU op but the graph functions (EXP ... ELU of the tensor
-- graph), which no renderer has: tcl.patterns.transcendental decomposes those.
local GRAPH_FUNCTIONS = {}
for op in pairs(require("tcl.patterns.transcendental").FUNCTIONS) do GRAPH_FUNCTIONS[op] = true end

local function gpu_renderer(target)
  local t = targets.get(target)
  return { name = t.name, lacks = GRAPH_FUNCTIONS, gpu = t.gpu, opt_caps = t.opt_caps }
end

-- { { name =, list = }, ... }: the kernels of t, lowered with loops (target nil) or for the GPU
-- target ("CUDA", "METAL").
local function kernels_of(t, target)
  local out = {}
  for i, k in ipairs(schedule.create({ t.uop }).kernels) do
    local ctx = { name = "k" .. i, device = target or "EMU",
      renderer = target and gpu_renderer(target) or { name = "c", lacks = GRAPH_FUNCTIONS } }
    local lowered = lower.run_passes(k.ast, ctx)
    out[#out + 1] = { name = ctx.name:gsub("[^%w_]", "_"), list = linearize.linearize(lowered) }
  end
  return out
end

-- Tensor expressions whose kernels cover the dtypes and the shapes of work.
local function expressions(dtype_name)
  local d = dtype_name
  if d == "bool" then
    local x = T.arange(24):reshape(4, 6)
    return { x:gt(5):bitwise_xor(x:lt(20)):bitwise_and(x:ne(7)), x:gt(3):any(2) }
  end
  local x = T.arange(-12, 12):reshape(4, 6):cast(d)
  local y = (T.arange(24):reshape(4, 6) % 5 + 1):cast(d)
  if dt(d).is_float then
    return { (x * y + x):maximum(y) / y, x:sum(2), x:max(1), (x:abs() + 1):sqrt():log() + x:sin():exp(),
      x:pad({ { 1, 2 }, { 0, 3 } }, 1.5):reciprocal(), x:cast("int32") }
  end
  return { (x * y - x):maximum(y), x // y, x % y, x:bitwise_and(y):bitwise_or(x:bitwise_xor(y)), x:sum(2), x:max(1),
    x:pad({ { 1, 1 }, { 2, 0 } }), x:cast("float32") * 0.5 }
end

-- Renders the kernels of the tensors ts (lowered with loops, and for the dialect's GPU) and
-- compiles them all as one translation unit; returns how many there were.
local function check_kernels(ts, dialect)
  local sources, names = {}, {}
  for _, t in ipairs(ts) do
    for _, target in ipairs { false, dialect:upper() } do
      for _, k in ipairs(kernels_of(t, target or nil)) do
        local name = string.format("%s_%d", k.name, #names + 1)
        sources[#sources + 1] = gpu.render(k.list, { name = name, dialect = dialect })
        names[#names + 1] = name
      end
    end
  end
  local src = table.concat(sources, "\n")
  if dialect == "cuda" then cuda_compiles(src, names) else metal_checks(src, table.concat(names, ", ")) end
  return #names
end

---------------------------------------------------------------------------------------------
-- CUDA source as host C++ (single-thread programs: no SPECIALs), for values against EMU

local HOST_SHIM = [[
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(n)
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
static inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
/* cuda_fp16.h: clang's _Float16 converts with one rounding to nearest even */
typedef _Float16 half;
static inline half __float2half_rn(float f) { return (half)f; }
static inline half __double2half(double d) { return (half)d; }
static inline float __half2float(half h) { return (float)h; }
static inline half __ll2half_rn(long long v) { return (half)v; }
static inline half __ull2half_rn(unsigned long long v) { return (half)v; }
static inline unsigned short __half_as_ushort(half h) { unsigned short u; memcpy(&u, &h, 2); return u; }
static inline half __ushort_as_half(unsigned short u) { half h; memcpy(&h, &u, 2); return h; }
/* cuda_bf16.h: float bits rounded to nearest even; wider values first to a float rounded to odd */
struct __nv_bfloat16 { unsigned short x; };
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    unsigned int u = __float_as_uint(f);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) b.x = (unsigned short)((u >> 16) | 0x40u);
    else b.x = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return b;
}
static inline float tcl_shim_odd(double d) {
    float f = (float)d;
    if ((double)f == d || f != f) return f;
    if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
    return __uint_as_float(__float_as_uint(f) | 1u);
}
static inline float tcl_shim_odd_u(unsigned long long m) {
    int s = 0;
    while ((m >> s) >= (1ull << 24)) s++;
    return ldexpf((float)((m >> s) | ((m & ((1ull << s) - 1ull)) != 0 ? 1ull : 0ull)), s);
}
static inline __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16_rn(tcl_shim_odd(d)); }
static inline __nv_bfloat16 __ull2bfloat16_rn(unsigned long long v) { return __float2bfloat16_rn(tcl_shim_odd_u(v)); }
static inline __nv_bfloat16 __ll2bfloat16_rn(long long v) {
    float f = tcl_shim_odd_u(v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v);
    return __float2bfloat16_rn(v < 0 ? -f : f);
}
static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((unsigned int)b.x << 16); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 b; b.x = u; return b; }
]]

-- Metal's standard library with definitions, for the host (the checking stub only declares)
local METAL_HOST_SHIM = [[
#include <math.h>
#include <string.h>
#define kernel
#define device
#define threadgroup
#define constant
#define thread
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
namespace metal {
typedef _Float16 half;
struct bfloat {
    ushort bits;
    bfloat() = default;
    explicit bfloat(float f) {
        uint u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) bits = (ushort)((u >> 16) | 0x40u);
        else bits = (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    explicit operator float() const {
        uint u = (uint)bits << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
};
struct uint3 { uint x, y, z; };
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };
inline void threadgroup_barrier(mem_flags) {}
template <typename T, typename U> T as_type(U x) {
    static_assert(sizeof(T) == sizeof(U), "as_type needs types of one size");
    T t;
    memcpy(&t, &x, sizeof t);
    return t;
}
}
]]

local STORAGE = {
  cuda = { bool = "unsigned char", int8 = "signed char", uint8 = "unsigned char", int16 = "short",
    uint16 = "unsigned short", int32 = "int", uint32 = "unsigned int", int64 = "long long",
    uint64 = "unsigned long long",
    fp8e4m3 = "unsigned char", fp8e5m2 = "unsigned char", float16 = "half", bfloat16 = "__nv_bfloat16",
    float32 = "float", float64 = "double" },
  metal = { bool = "uchar", int8 = "char", uint8 = "uchar", int16 = "short", uint16 = "ushort", int32 = "int",
    uint32 = "uint", int64 = "long", uint64 = "ulong", float16 = "metal::half", bfloat16 = "metal::bfloat",
    float32 = "float" },
}

-- Runs the kernel `name` of the source (CUDA or Metal) on the host with buffers (runtime
-- Buffers, slot order), which it updates.
local function run_on_host(src, name, buffers, dialect)
  dialect = dialect or "cuda"
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. q(dir)))
  local main = { "int main(void) {" }
  local args = {}
  for i, b in ipairs(buffers) do
    local path = string.format("%s/p%d", dir, i - 1)
    helper.write(path, b:read_bytes())
    main[#main + 1] = string.format([[
    static char b%d[%d]; { FILE *f = fopen("%s", "rb"); if (!f || fread(b%d, 1, %d, f) != %d) return 2; fclose(f); }]],
      i, b.nbytes, path, i, b.nbytes, b.nbytes)
    args[i] = string.format("(%s*)b%d", STORAGE[dialect][b.dtype.name], i)
  end
  if dialect == "metal" then
    args[#args + 1] = "metal::uint3{0, 0, 0}"
    args[#args + 1] = "metal::uint3{0, 0, 0}"
  end
  main[#main + 1] = string.format("    %s(%s);", name, table.concat(args, ", "))
  for i, b in ipairs(buffers) do
    main[#main + 1] = string.format([[
    { FILE *f = fopen("%s/p%d.out", "wb"); if (!f || fwrite(b%d, 1, %d, f) != %d) return 3; fclose(f); }]],
      dir, i - 1, i, b.nbytes, b.nbytes)
  end
  main[#main + 1] = "    return 0;\n}\n"
  local file = dir .. "/kernel.cpp"
  local shim = dialect == "metal" and "#include <stdio.h>\n" or HOST_SHIM
  helper.write(file, shim .. src .. table.concat(main, "\n"))
  local headers = { "cuda_fp16.h", "cuda_bf16.h", "metal_stdlib" } -- the shims have what kernels use
  for _, h in ipairs(headers) do helper.write(dir .. "/" .. h, h == "metal_stdlib" and METAL_HOST_SHIM or "") end
  local status, _, err = helper.run(string.format("%s %s -I %s -o %s %s", HOST_CXX, HOST_FLAGS, q(dir),
    q(dir .. "/kernel"), q(file)))
  assert(status == 0, "the host build of kernel '" .. name .. "' failed:\n" .. err)
  status, _, err = helper.run(q(dir .. "/kernel"))
  assert(status == 0, "the host run of kernel '" .. name .. "' failed: " .. err)
  for i, b in ipairs(buffers) do
    b:write_bytes(helper.read(string.format("%s/p%d.out", dir, i - 1)))
    os.remove(string.format("%s/p%d", dir, i - 1))
    os.remove(string.format("%s/p%d.out", dir, i - 1))
  end
  for _, f in ipairs { file, dir .. "/kernel", dir .. "/cuda_fp16.h", dir .. "/cuda_bf16.h", dir .. "/metal_stdlib" } do
    os.remove(f)
  end
  os.remove(dir)
end

local function same(a, b)
  if type(a) ~= "number" or type(b) ~= "number" then return a == b end
  if a ~= a or b ~= b then return a ~= a and b ~= b end
  if a == b then return a ~= 0 or (1 / a == 1 / b) end -- -0 and +0 differ
  return false
end

local function show(v)
  if type(v) == "number" and math.type(v) == "float" then return string.format("%.17g", v) end
  return tostring(v)
end

---------------------------------------------------------------------------------------------

describe("the CUDA and Metal renderers", function()
  describe("render hand-built programs", function()
    it("name their dialect, kernel and launch, and say which buffers are written", function()
      local list, add = builder()
      local out = add("PARAM", dt "float32", nil, { 0, 64 })
      local a = add("PARAM", dt "float16", nil, { 1, 64 })
      local g = add("SPECIAL", IDX, { const(add, IDX, 16) }, "gidx0")
      local l = add("SPECIAL", IDX, { const(add, IDX, 4) }, "lidx0")
      local i = add("ADD", IDX, { add("MUL", IDX, { g, const(add, IDX, 4) }), l })
      local v = add("LOAD", dt "float16", { add("INDEX", dt "float16", { a, i }) })
      add("STORE", nil, { add("INDEX", dt "float32", { out, i }), add("CAST", dt "float32", { v }) })
      local src, facts = gpu.render(list, { name = "copy_half", dialect = "cuda" })
      assert.matches('extern "C" __global__ void __launch_bounds__(4) copy_half(float* __restrict__ p0, ' ..
        'const half* __restrict__ p1)', src, 1, true)
      assert.matches("#include <cuda_fp16.h>", src, 1, true)
      assert.is_nil(src:find("cuda_bf16.h", 1, true))
      assert.matches("int gidx0 = (int)blockIdx.x;", src, 1, true) -- every index fits an int
      assert.matches("int lidx0 = (int)threadIdx.x;", src, 1, true)
      -- the element as stored, then converted; no alignment hint without tensor cores (it would
      -- cost NVVM's read-only loads)
      assert.matches("half raw(%d+) = p1%[alu%d+%];\n%s*float val%1 = __half2float%(raw%1%);", src)
      assert.is_nil(src:find("__builtin_assume_aligned", 1, true))
      assert.are.same({ 16, 1, 1 }, facts.global_size)
      assert.are.same({ 4, 1, 1 }, facts.local_size)
      assert.are.same({ "float32", "float16" }, { facts.params[1].dtype.name, facts.params[2].dtype.name })
      assert.are.same({ true, false }, { facts.params[1].written, facts.params[2].written })
      assert.are.same({ 64, 64 }, { facts.params[1].numel, facts.params[2].numel })
      assert.are.same({ "copy_half", "cuda", 0 }, { facts.name, facts.dialect, facts.local_bytes })
      local msl = gpu.render(list, { name = "copy_half", dialect = "metal" })
      assert.matches("kernel void copy_half(device float* p0 [[buffer(0)]], const device half* p1 [[buffer(1)]], " ..
        "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])", msl, 1, true)
      assert.matches("#include <metal_stdlib>\nusing namespace metal;", msl, 1, true)
      assert.matches("int gidx0 = (int)gid.x;", msl, 1, true)
      assert.matches("half raw(%d+) = p1%[alu%d+%];\n%s*float val%1 = float%(raw%1%);", msl)
      assert.are.same({ "cuda", "metal" }, gpu.dialects)
      if need_nvrtc() then cuda_compiles(src, "copy_half") end
      if need_clang() then metal_checks(msl, "copy_half") end
    end)

    it("share a workgroup's sum through local memory across a barrier (the GPU shape of group reduces)", function()
      -- out[g] = sum of a[g*64 .. g*64+63]: each of 64 threads stores its element into local
      -- memory, a barrier, then thread 0 sums them
      local F32 = dt "float32"
      local list, add = builder()
      local out = add("PARAM", F32, nil, { 0, 8 })
      local a = add("PARAM", F32, nil, { 1, 512 })
      local g = add("SPECIAL", IDX, { const(add, IDX, 8) }, "gidx0")
      local l = add("SPECIAL", IDX, { const(add, IDX, 64) }, "lidx0")
      local smem = add("DEFINE_LOCAL", F32, nil, { 0, 64 })
      local acc = add("DEFINE_REG", F32, nil, { 0, 1 })
      local zero = const(add, IDX, 0)
      local at = add("ADD", IDX, { add("MUL", IDX, { g, const(add, IDX, 64) }), l })
      local x = add("LOAD", F32, { add("INDEX", F32, { a, at }) })
      local st = add("STORE", nil, { add("INDEX", F32, { smem, l }), x })
      local bar = add("BARRIER", nil, { st })
      local init = add("STORE", nil, { add("INDEX", F32, { acc, zero }), const(add, F32, 0.0) })
      local r = add("RANGE", IDX, { const(add, IDX, 64) }, { 0, "reduce" })
      local cur = add("INDEX", F32, { add("AFTER", F32, { acc, init }), zero })
      local seen = add("LOAD", F32, { add("INDEX", F32, { add("AFTER", F32, { smem, bar }), r }) })
      local upd = add("STORE", nil, { cur, add("ADD", F32, { add("LOAD", F32, { cur }), seen }) })
      local e = add("END", nil, { upd, r })
      local total = add("LOAD", F32, { add("INDEX", F32, { add("AFTER", F32, { acc, e }), zero }) })
      local first = add("CMPEQ", dt "bool", { l, zero })
      add("STORE", nil, { add("INDEX", F32, { out, g }), total, first })
      local src, facts = gpu.render(list, { name = "group_sum", dialect = "cuda" })
      assert.matches("__shared__ __align__%(16%) float smem%d+%[64%];", src)
      assert.matches("__syncthreads();", src, 1, true)
      assert.matches("if %(alu%d+%) p0%[gidx0%] = val%d+;", src)
      assert.matches("float reg%d+%[1%];", src)
      assert.are.same({ 8, 1, 1 }, facts.global_size)
      assert.are.same({ 64, 1, 1 }, facts.local_size)
      assert.are.equal(256, facts.local_bytes)
      local msl = gpu.render(list, { name = "group_sum", dialect = "metal" })
      assert.matches("threadgroup float smem%d+%[64%];", msl)
      assert.matches("threadgroup_barrier(mem_flags::mem_threadgroup);", msl, 1, true)
      -- the local array is declared at the top of the kernel, before any statement
      assert.matches("%) {\n    threadgroup float smem", msl)
      -- EMU's GPU mode runs the same program: the values the kernel computes
      local ba = rt.buffer(F32, 512)
      local values = {}
      for k = 1, 512 do values[k] = (k % 7) * 1.0 end
      ba:write(values)
      local bo = rt.buffer(F32, 8)
      rt.program(list, { name = "group_sum" }):run { bo, ba }
      local want = {}
      for w = 1, 8 do
        local s = 0.0
        for k = 1, 64 do s = s + values[(w - 1) * 64 + k] end
        want[w] = s
      end
      assert.are.same(want, bo:read())
      if need_nvrtc() then cuda_compiles(src, "group_sum") end
      if need_clang() then metal_checks(msl, "group_sum") end
    end)

    it("sum a warp's values with SHUFFLE: __shfl_xor_sync on CUDA, simd_shuffle_xor on Metal", function()
      -- out[t] = the sum of a over t's warp: 5 butterfly steps (masks 16..1) in 2 warps; half
      -- values travel as their compute type, float, int32 as int
      for _, case in ipairs { { dtype = "float32", ctype = "float", mtype = "float" },
        { dtype = "float16", ctype = "float", mtype = "float" }, { dtype = "int32", ctype = "int", mtype = "int" } } do
        local V = dt(case.dtype)
        local list, add = builder()
        local out = add("PARAM", V, nil, { 0, 64 })
        local a = add("PARAM", V, nil, { 1, 64 })
        local l = add("SPECIAL", IDX, { const(add, IDX, 64) }, "lidx0")
        local s = add("LOAD", V, { add("INDEX", V, { a, l }) })
        for _, m in ipairs { 16, 8, 4, 2, 1 } do s = add("ADD", V, { s, add("SHUFFLE", V, { s }, m) }) end
        add("STORE", nil, { add("INDEX", V, { out, l }), s })
        local src = gpu.render(list, { name = "warp_sum", dialect = "cuda" })
        for _, m in ipairs { 16, 8, 4, 2, 1 } do
          assert.matches(case.ctype .. " shfl%d+ = __shfl_xor_sync%(0xffffffffu, %w+, " .. m .. "%);", src)
        end
        assert.is_nil(src:find("__syncthreads", 1, true)) -- no barrier, no local memory
        local msl = gpu.render(list, { name = "warp_sum", dialect = "metal" })
        assert.matches(case.mtype .. " shfl%d+ = simd_shuffle_xor%(%w+, %(ushort%)16%);", msl)
        -- EMU: the same program
        local values = {}
        for k = 1, 64 do values[k] = (k * 5) % 9 end
        local ba, bo = rt.buffer(V, 64), rt.buffer(V, 64)
        ba:write(values)
        rt.program(list, { name = "warp_sum" }):run { bo, ba }
        local want = {}
        for k = 1, 64 do
          local w, sum = (k - 1) // 32 * 32, 0
          for j = 1, 32 do sum = sum + values[w + j] end
          want[k] = sum
        end
        assert.are.same(want, bo:read())
        if need_nvrtc() then cuda_compiles(src, "warp_sum") end
        if need_clang() then metal_checks(msl, "warp_sum") end
      end
    end)

    it("refuse a SHUFFLE in a workgroup of part of a warp, or with a mask outside 1..31", function()
      local F32 = dt "float32"
      local function kernel(threads, mask)
        local list, add = builder()
        local out = add("PARAM", F32, nil, { 0, threads })
        local l = add("SPECIAL", IDX, { const(add, IDX, threads) }, "lidx0")
        add("STORE", nil, { add("INDEX", F32, { out, l }), add("SHUFFLE", F32, { add("CAST", F32, { l }) }, mask) })
        return list
      end
      for _, dialect in ipairs { "cuda", "metal" } do
        local ok, err = pcall(gpu.render, kernel(16, 1), { name = "part_warp", dialect = dialect })
        assert.is_false(ok)
        assert.matches("kernel 'part_warp': instruction %d+ %(SHUFFLE%): a workgroup of local size %(16,1,1%) has 16 "
          .. "threads, and SHUFFLE needs whole warps %(a multiple of 32%)", tostring(err))
        ok, err = pcall(gpu.render, kernel(32, 32), { name = "bad_mask", dialect = dialect })
        assert.is_false(ok)
        assert.matches("(SHUFFLE): arg must be the lane mask, an integer 1..31", tostring(err), 1, true)
      end
    end)

    it("copy into local memory asynchronously: cp.async on CUDA, element copies on Metal, landing at the barrier",
      function()
      -- 8 threads; thread l copies 8 halves (16 bytes) of a and 2 floats (8 bytes) of b at its
      -- chunk l into local tiles, a barrier, then writes the chunk of thread 7 - l to the outputs
      local H, F32 = dt "float16", dt "float32"
      local list, add = builder()
      local out_h = add("PARAM", H, nil, { 0, 64 })
      local out_f = add("PARAM", F32, nil, { 1, 16 })
      local a = add("PARAM", H, nil, { 2, 64 })
      local b = add("PARAM", F32, nil, { 3, 16 })
      local l = add("SPECIAL", IDX, { const(add, IDX, 8) }, "lidx0")
      local tile_h = add("DEFINE_LOCAL", H, nil, { 0, 64 })
      local tile_f = add("DEFINE_LOCAL", F32, nil, { 1, 16 })
      local times, plus = index_math(add)
      local copy_h = add("STORE", nil, { add("INDEX", H, { tile_h, times(l, 8) }),
        add("LOAD", H, { add("INDEX", H, { a, times(l, 8) }) }) }, { "async", 8 })
      local copy_f = add("STORE", nil, { add("INDEX", F32, { tile_f, times(l, 2) }),
        add("LOAD", F32, { add("INDEX", F32, { b, times(l, 2) }) }) }, { "async", 2 })
      local bar = add("BARRIER", nil, { copy_h, copy_f })
      local other = add("SUB", IDX, { const(add, IDX, 7), l })
      local seen_h, seen_f = add("AFTER", H, { tile_h, bar }), add("AFTER", F32, { tile_f, bar })
      for v = 0, 7 do
        local x = add("LOAD", H, { add("INDEX", H, { seen_h, plus(times(other, 8), v) }) })
        add("STORE", nil, { add("INDEX", H, { out_h, plus(times(l, 8), v) }), x })
      end
      for v = 0, 1 do
        local x = add("LOAD", F32, { add("INDEX", F32, { seen_f, plus(times(other, 2), v) }) })
        add("STORE", nil, { add("INDEX", F32, { out_f, plus(times(l, 2), v) }), x })
      end
      local src = gpu.render(list, { name = "async_copy", dialect = "cuda" })
      -- the local element as a 32-bit shared-window address, the tile's declared once
      assert.matches('asm volatile%("cp%.async%.cg%.shared%.global %[%%0%], %[%%1%], 16;" :: "r"%(smem(%d+)_u32 %+ '
        .. '%(unsigned int%)alu%d+ %* 2u%), "l"%(&p2%[alu%d+%]%) : "memory"%);', src)
      assert.matches("unsigned int smem%d+_u32 = %(unsigned int%)__cvta_generic_to_shared%(smem%d+%);", src)
      assert.matches('asm volatile("cp.async.ca.shared.global [%0], [%1], 8;"', src, 1, true)
      assert.matches('asm volatile("cp.async.wait_all;" ::: "memory");\n    __syncthreads();', src, 1, true)
      -- the copies read their LOADs' INDEXes: the LOADs themselves, used by nothing else, are not rendered
      assert.is_nil(src:find("= p2[", 1, true))
      assert.is_nil(src:find("= p3[", 1, true))
      local msl = gpu.render(list, { name = "async_copy", dialect = "metal" })
      assert.is_nil(msl:find("= p2[", 1, true))
      assert.matches("for %(int v = 0; v < 8; v%+%+%) %(&smem%d+%[alu%d+%]%)%[v%] = %(&p2%[alu%d+%]%)%[v%];", msl)
      assert.matches("for (int v = 0; v < 2; v++)", msl, 1, true)
      -- EMU's GPU mode: the same program, the chunks reversed
      local hs, fs = {}, {}
      for k = 1, 64 do hs[k] = k / 4 end
      for k = 1, 16 do fs[k] = k * 1.5 end
      local bo_h, bo_f, ba, bb = rt.buffer(H, 64), rt.buffer(F32, 16), rt.buffer(H, 64), rt.buffer(F32, 16)
      ba:write(hs)
      bb:write(fs)
      rt.program(list, { name = "async_copy" }):run { bo_h, bo_f, ba, bb }
      local want_h, want_f = {}, {}
      for t = 0, 7 do
        for v = 1, 8 do want_h[t * 8 + v] = hs[(7 - t) * 8 + v] end
        for v = 1, 2 do want_f[t * 2 + v] = fs[(7 - t) * 2 + v] end
      end
      assert.are.same(want_h, bo_h:read())
      assert.are.same(want_f, bo_f:read())
      if need_nvrtc() then cuda_compiles(src, "async_copy") end
      if need_clang() then metal_checks(msl, "async_copy") end
    end)

    it("keep newer copy groups in flight at a barrier with an arg, and carve more than 48 KiB of local memory "
      .. "from CUDA's dynamic shared memory", function()
      -- 8 threads; two stages of 8 halves per thread copied into a 32 KiB tile, each closed by a
      -- barrier that leaves one group in flight: the second lands stage 0, which the threads read
      -- (thread l the chunk of 7 - l); a barrier without an arg lands stage 1. Each thread also
      -- passes a float through a 20000-byte tile, at its end (beyond 48 KiB in all)
      local H, F32 = dt "float16", dt "float32"
      local list, add = builder()
      local out_h = add("PARAM", H, nil, { 0, 128 })
      local out_f = add("PARAM", F32, nil, { 1, 8 })
      local a = add("PARAM", H, nil, { 2, 128 })
      local l = add("SPECIAL", IDX, { const(add, IDX, 8) }, "lidx0")
      local tile_h = add("DEFINE_LOCAL", H, nil, { 0, 16384 })
      local tile_f = add("DEFINE_LOCAL", F32, nil, { 1, 5000 })
      local times, plus = index_math(add)
      local function copy(tile, stage)
        local at = plus(times(l, 8), 64 * stage)
        return add("STORE", nil, { add("INDEX", H, { tile, at }), add("LOAD", H, { add("INDEX", H, { a, at }) }) },
          { "async", 8 })
      end
      local last = add("SUB", IDX, { const(add, IDX, 4999), l })
      local own_f = add("STORE", nil, { add("INDEX", F32, { tile_f, last }), add("CAST", F32, { l }) })
      local first = add("BARRIER", nil, { copy(tile_h, 0), own_f }, 1)
      local second = add("BARRIER", nil, { copy(add("AFTER", H, { tile_h, first }), 1) }, 1)
      local other = add("SUB", IDX, { const(add, IDX, 7), l })
      local function read_stage(seen, stage)
        for v = 0, 7 do
          local x = add("LOAD", H, { add("INDEX", H, { seen, plus(times(other, 8), 64 * stage + v) }) })
          add("STORE", nil, { add("INDEX", H, { out_h, plus(times(l, 8), 64 * stage + v) }), x })
        end
      end
      read_stage(add("AFTER", H, { tile_h, second }), 0)
      local f = add("LOAD", F32, { add("INDEX", F32, { add("AFTER", F32, { tile_f, second }),
        add("SUB", IDX, { const(add, IDX, 4999), other }) }) })
      add("STORE", nil, { add("INDEX", F32, { out_f, l }), f })
      local landed = add("BARRIER", nil, { second })
      read_stage(add("AFTER", H, { tile_h, landed }), 1)
      local src, facts = gpu.render(list, { name = "pipelined", dialect = "cuda" })
      local _, some = src:gsub('asm volatile%("cp%.async%.commit_group;\\n\\tcp%.async%.wait_group 1;" ::: "memory"%);'
        .. "\n    __syncthreads%(%);", "")
      assert.are.equal(2, some)
      assert.matches('asm volatile("cp.async.wait_all;" ::: "memory");\n    __syncthreads();', src, 1, true)
      -- the tiles from one dynamic array, at 128-byte aligned offsets: 32768 + 20096 bytes
      assert.matches("extern __shared__ __align__(128) unsigned char tcl_smem[];", src, 1, true)
      assert.matches("half%* smem%d+ = %(half%*%)%(tcl_smem %+ 0%);", src)
      assert.matches("float%* smem%d+ = %(float%*%)%(tcl_smem %+ 32768%);", src)
      assert.are.equal(52768, facts.local_bytes)
      assert.are.equal(52864, facts.dynamic_local_bytes)
      -- Metal: static threadgroup arrays, copies that need no wait
      local msl, metal_facts = gpu.render(list, { name = "pipelined", dialect = "metal" })
      assert.is_nil(msl:find("wait", 1, true))
      assert.matches("threadgroup half smem%d+%[16384%];", msl)
      assert.is_nil(metal_facts.dynamic_local_bytes)
      -- EMU's GPU mode runs it: stage 0's chunks reversed, stage 1's, the floats
      local hs = {}
      for k = 1, 128 do hs[k] = k / 4 end
      local bo_h, bo_f, ba = rt.buffer(H, 128), rt.buffer(F32, 8), rt.buffer(H, 128)
      ba:write(hs)
      rt.program(list, { name = "pipelined" }):run { bo_h, bo_f, ba }
      local want_h, want_f = {}, {}
      for t = 0, 7 do
        for stage = 0, 1 do
          for v = 1, 8 do want_h[64 * stage + t * 8 + v] = hs[64 * stage + (7 - t) * 8 + v] end
        end
        want_f[t + 1] = 7 - t
      end
      assert.are.same(want_h, bo_h:read())
      assert.are.same(want_f, bo_f:read())
      if need_nvrtc() then cuda_compiles(src, "pipelined") end
      if need_clang() then metal_checks(msl, "pipelined") end
    end)

    it("use all three grid and workgroup axes, with int32 thread indices", function()
      local I32 = dt "int32"
      local list, add = builder()
      local out = add("PARAM", I32, nil, { 0, 2 * 3 * 4 * 5 * 6 * 7 })
      local ids = {}
      local sizes = { gidx0 = 2, gidx1 = 3, gidx2 = 4, lidx0 = 5, lidx1 = 6, lidx2 = 7 }
      local index = const(add, I32, 0)
      for _, name in ipairs { "gidx2", "gidx1", "gidx0", "lidx2", "lidx1", "lidx0" } do
        ids[name] = add("SPECIAL", I32, { const(add, I32, sizes[name]) }, name)
        index = add("ADD", I32, { add("MUL", I32, { index, const(add, I32, sizes[name]) }), ids[name] })
      end
      add("STORE", nil, { add("INDEX", I32, { out, index }), index })
      local src, facts = gpu.render(list, { name = "axes", dialect = "cuda" })
      for k, axis in ipairs { "x", "y", "z" } do
        assert.matches(string.format("int gidx%d = (int)blockIdx.%s;", k - 1, axis), src, 1, true)
        assert.matches(string.format("int lidx%d = (int)threadIdx.%s;", k - 1, axis), src, 1, true)
      end
      assert.matches("__launch_bounds__(210)", src, 1, true)
      assert.are.same({ 2, 3, 4 }, facts.global_size)
      assert.are.same({ 5, 6, 7 }, facts.local_size)
      local msl = gpu.render(list, { name = "axes", dialect = "metal" })
      assert.matches("int lidx2 = (int)lid.z;", msl, 1, true)
      assert.matches("int gidx1 = (int)gid.y;", msl, 1, true)
      if need_nvrtc() then cuda_compiles(src, "axes") end
      if need_clang() then metal_checks(msl, "axes") end
    end)

    it("never read memory behind a false gate, and store only where the gate is true", function()
      local F32 = dt "float32"
      local list, add = builder()
      local out = add("PARAM", F32, nil, { 0, 8 })
      local a = add("PARAM", F32, nil, { 1, 4 })
      local r = add("RANGE", IDX, { const(add, IDX, 8) }, { 0, "loop" })
      local inside = add("CMPLT", dt "bool", { r, const(add, IDX, 4) })
      local v = add("LOAD", F32, { add("INDEX", F32, { a, r }), inside })
      local odd = add("CMPNE", dt "bool", { add("AND", IDX, { r, const(add, IDX, 1) }), const(add, IDX, 0) })
      local st = add("STORE", nil, { add("INDEX", F32, { out, r }), v, odd })
      add("END", nil, { st, r })
      local src = gpu.render(list, { name = "gated", dialect = "cuda" })
      assert.matches("float val%d+ = alu%d+ %? p1%[ridx%d+%] : 0;", src)
      assert.matches("if %(alu%d+%) p0%[ridx%d+%] = val%d+;", src)
      local msl = gpu.render(list, { name = "gated", dialect = "metal" })
      if need_nvrtc() then cuda_compiles(src, "gated") end
      if need_clang() then metal_checks(msl, "gated") end
    end)
  end)

  describe("render every ALU op, cast, bitcast and constant of every dtype", function()
    it("to CUDA that NVRTC compiles and ptxas assembles (one translation unit)", function()
      local sources, names = {}, {}
      for _, name in ipairs(ALL_DTYPES) do
        local src = gpu.render(all_ops(name, "cuda"), { name = "ops_" .. name, dialect = "cuda" })
        if name == "float16" or name == "bfloat16" then
          assert.matches(name == "float16" and "cuda_fp16.h" or "cuda_bf16.h", src, 1, true)
        end
        if name:match("^fp8") then assert.matches("tcl_enc_" .. name, src, 1, true) end
        sources[#sources + 1], names[#names + 1] = src, "ops_" .. name
      end
      if need_nvrtc() then cuda_compiles(table.concat(sources, "\n"), names) end
    end)

    for _, name in ipairs(ALL_DTYPES) do
      if not METAL_LACKS[name] then
        it("to Metal that the stub accepts: " .. name, function()
          local list = all_ops(name, "metal")
          local src = gpu.render(list, { name = "ops_" .. name, dialect = "metal" })
          if need_clang() then metal_checks(src, "ops_" .. name) end
        end)
      end
    end

    -- out[r * 16 + k] = the k-th op of x = r - 5 (r < 16), as int64: every op of index values.
    -- wide: a shift by 70 and an XOR of a negative value, whose intervals are the whole int64
    -- range, so that the kernel's index arithmetic cannot be 32-bit.
    local function index_ops(name, wide)
      local out = K.param(dt "int64", 0, 16 * 16)
      local r = K.range(16, 0)
      local x, c, m = r - 5, K.c(3), K.c(-3)
      local values = { x + c, x - m, x * m, -x, u("IDIV", IDX, { x, m }), u("MOD", IDX, { x, m }),
        u("FLOORDIV", IDX, { x, c }), u("FLOORMOD", IDX, { x, m }), u("MAX", IDX, { x, c }), u("MIN", IDX, { x, m }),
        u("SHL", IDX, { x, c }), u("SHR", IDX, { x, wide and K.c(70) or K.c(2) }), u("AND", IDX, { x, c }),
        wide and u("XOR", IDX, { x, m }) or u("XOR", IDX, { r, c }), u("MULACC", IDX, { x, c, m }),
        u("IDIV", IDX, { x, K.c(-1) }) }
      local stores = {}
      for k, v in ipairs(values) do
        stores[k] = u("STORE", nil, { u("INDEX", dt "int64", { out, r * 16 + (k - 1) }), u("CAST", dt "int64", { v }) })
      end
      stores[#stores + 1] = r
      return linearize.linearize(K.sink(name, u("END", nil, stores)))
    end

    -- The kernel's values on the host against EMU's.
    local function same_as_emu(list, src, name)
      local emu, host = rt.buffer(dt "int64", 256), rt.buffer(dt "int64", 256)
      rt.program(list, { name = name }):run { emu }
      run_on_host(src, name, { host })
      assert.are.same(emu:read(), host:read())
    end

    it("with index arithmetic of every kind", function()
      local list = index_ops("index_ops", true)
      local src = gpu.render(list, { name = "index_ops", dialect = "cuda" })
      assert.matches("tcl_floormod_index(", src, 1, true)
      assert.matches("long long ridx%d+ = 0", src)
      if need_nvrtc() then cuda_compiles(src, "index_ops") end
      if need_clang() then metal_checks(gpu.render(list, { name = "index_ops", dialect = "metal" }), "index_ops") end
      if need_host_cxx() then same_as_emu(list, src, "index_ops") end
    end)

    it("with index arithmetic in 32 bits where every index value provably fits an int", function()
      local list = index_ops("index_ops32", false)
      local src = gpu.render(list, { name = "index_ops32", dialect = "cuda" })
      assert.matches("int ridx%d+ = 0", src)
      assert.matches("tcl_floormod_index32(", src, 1, true)
      assert.matches("tcl_idiv_index32(", src, 1, true)
      assert.is_nil(src:find("%dll[^%w]")) -- no 64-bit index literal
      assert.is_nil(src:find("long long alu%d+ = %(ridx")) -- only the int64 results are 64-bit
      local msl = gpu.render(list, { name = "index_ops32", dialect = "metal" })
      assert.matches("int ridx%d+ = 0", msl)
      assert.is_nil(msl:find("long ridx", 1, true))
      -- the helpers of a 32-bit and of a 64-bit index have their own names: one translation unit
      local wide = gpu.render(index_ops("index_ops", true), { name = "index_ops", dialect = "cuda" })
      if need_nvrtc() then cuda_compiles(src .. "\n" .. wide, { "index_ops32", "index_ops" }) end
      if need_clang() then metal_checks(msl, "index_ops32") end
      if need_host_cxx() then same_as_emu(list, src, "index_ops32") end
    end)

    it("with 64-bit index arithmetic as soon as one index value may leave int's range", function()
      -- out[g * 4096 + l]: g < rows, l < 256; the largest index is (rows - 1) * 4096 + 255;
      -- its third (offset: of i - offset, which may be negative)
      local function store_rows(rows, offset)
        local list, add = builder()
        local F32 = dt "float32"
        local out = add("PARAM", F32, nil, { 0, rows * 4096 })
        local g = add("SPECIAL", IDX, { const(add, IDX, rows) }, "gidx0")
        local l = add("SPECIAL", IDX, { const(add, IDX, 256) }, "lidx0")
        local i = add("ADD", IDX, { add("MUL", IDX, { g, const(add, IDX, 4096) }), l })
        local shifted = offset and add("SUB", IDX, { i, const(add, IDX, offset) }) or i
        local third = add("FLOORDIV", IDX, { shifted, const(add, IDX, 3) })
        add("STORE", nil, { add("INDEX", F32, { out, i }), add("CAST", F32, { third }) })
        return gpu.render(list, { name = "rows_" .. rows .. (offset and "_shifted" or ""), dialect = "cuda" })
      end
      local fits = store_rows(1 << 19) -- at most 2^31 - 3841
      assert.matches("int gidx0 = (int)blockIdx.x;", fits, 1, true)
      assert.matches("(gidx0 * 4096)", fits, 1, true)
      -- a value the interval analysis proves non-negative, by a positive constant: unsigned / and %
      assert.matches("%(%(int%)%(%(unsigned int%)alu%d+ / 3u%)%)", fits)
      local wide = store_rows((1 << 19) + 1) -- up to 2^31 + 255
      assert.matches("long long gidx0 = (long long)blockIdx.x;", wide, 1, true)
      assert.matches("(gidx0 * 4096ll)", wide, 1, true)
      assert.matches("%(%(long long%)%(%(unsigned long long%)alu%d+ / 3u%)%)", wide)
      -- one that may be negative floors through the helpers, of each width
      local fits_shifted, wide_shifted = store_rows(1 << 19, 128), store_rows((1 << 19) + 1, 128)
      assert.matches("tcl_floordiv_index32(", fits_shifted, 1, true)
      assert.matches("tcl_floordiv_index(", wide_shifted, 1, true)
      if need_nvrtc() then
        cuda_compiles(table.concat({ fits, wide, fits_shifted, wide_shifted }, "\n"),
          { "rows_524288", "rows_524289", "rows_524288_shifted", "rows_524289_shifted" })
      end
    end)

    it("spelling what C leaves undefined as tcl defines it", function()
      local list = all_ops("int32", "cuda")
      local src = gpu.render(list, { name = "ops_int32", dialect = "cuda" })
      assert.matches("if (b == 0) return 0;", src, 1, true) -- division by zero
      assert.matches("if (b == -1) return (int)((unsigned int)0 - (unsigned int)a);", src, 1, true) -- min / -1
      assert.matches("%(%(int%)%(%(unsigned int%)val%d+ %+ %(unsigned int%)val%d+%)%)", src) -- wrapping add
      assert.matches("%(%(unsigned int%)val%d+ < 32u %? %(int%)%(%(unsigned int%)val%d+ << val%d+%) : %(int%)0%)", src)
      local floats = gpu.render(all_ops("float32", "cuda"), { name = "ops_float32", dialect = "cuda" })
      assert.matches("tcl_cvt_int8_f32(", floats, 1, true) -- float -> int saturates
      assert.matches("if (t != t) return 0;", floats, 1, true)
      assert.matches("if (x == y) return signbit(x) ? y : x;", floats, 1, true) -- IEEE 754-2019 maximum
      assert.matches("__uint_as_float(0x7f800000u)", floats, 1, true) -- inf as its bits
    end)
  end)

  describe("run on the host as C++ (shims for CUDA's intrinsics and Metal's library), against EMU", function()
    local function check_values(name, dialect)
      if not need_host_cxx() then return end
      local list, info = all_ops(name, dialect)
      local src = gpu.render(list, { name = "ops_" .. name, dialect = dialect })
      local function buffers()
        local out = {}
        for k = 1, 3 do out[k] = rt.buffer(dt(name), info.n):write(info.columns[k]) end
        for k, od in ipairs(info.order) do out[3 + k] = rt.buffer(dt(od), info.n * WIDTH) end
        return out
      end
      local emu, host = buffers(), buffers()
      rt.program(list, { name = "ops_" .. name }):run(emu)
      run_on_host(src, "ops_" .. name, host, dialect)
      for k, od in ipairs(info.order) do
        local want, got = emu[3 + k]:read(), host[3 + k]:read()
        for at, what in ipairs(info.layout[od]) do
          if not APPROXIMATE[what:match("^%S+")] then
            for i = 1, info.n do
              local e, g = want[(i - 1) * WIDTH + at], got[(i - 1) * WIDTH + at]
              if not same(e, g) then
                error(string.format("%s %s (%s, %s, %s) -> %s: EMU %s, %s source on the host %s", name, what,
                  show(info.columns[1][i]), show(info.columns[2][i]), show(info.columns[3][i]), od, show(e), dialect,
                  show(g)))
              end
            end
          end
        end
      end
    end

    for _, name in ipairs(ALL_DTYPES) do
      it("every op, cast and bitcast of " .. name .. " in CUDA", function() check_values(name, "cuda") end)
      if not METAL_LACKS[name] then
        it("every op, cast and bitcast of " .. name .. " in Metal", function() check_values(name, "metal") end)
      end
    end
  end)

  describe("render the kernels of Tensor expressions", function()
    local function every_dtype(dialect)
      local ts = {}
      for _, name in ipairs(ALL_DTYPES) do
        if not (dialect == "metal" and METAL_LACKS[name]) then
          for _, t in ipairs(expressions(name)) do ts[#ts + 1] = t end
        end
      end
      return ts
    end

    it("of every dtype, with loops and for a GPU, to CUDA (one translation unit)", function()
      if not need_nvrtc() then return end
      local ts = every_dtype("cuda")
      assert.is_true(check_kernels(ts, "cuda") >= 2 * #ts)
    end)

    it("of every dtype Metal has, with loops and for a GPU, to Metal", function()
      if not need_clang() then return end
      local ts = every_dtype("metal")
      assert.is_true(check_kernels(ts, "metal") >= 2 * #ts)
    end)

    local function workloads()
      local a, b = T.rand(64, 48), T.rand(48, 32)
      local x = T.randn(8, 1024)
      return {
        matmul = a:matmul(b),
        matmul_half = a:cast("float16"):matmul(b:cast("float16")),
        matmul_bias_gelu = (a:matmul(b) + T.rand(32)):gelu(),
        softmax = x:softmax(2),
        long_sum = x:sum(2),
        mean_var = x:var(2) + x:mean(2),
        padded_conv = T.rand(1, 3, 16, 16):conv2d(T.rand(4, 3, 3, 3), nil, { padding = 1 }),
        transcendentals = (x:exp() + x:abs():log() + x:sin() + x:cos() + x:abs():sqrt() + x:tanh()) / 3,
        cumsum = T.rand(4, 64):cumsum(2),
        argmax = x:argmax(2),
        random = T.rand(16, 16) + T.randint(0, 10, { 16, 16 }):cast("float32"),
        -- through local memory (the pass "stage transposes"), and the shared column layouts
        transpose = a:transpose(1, 2):contiguous() + T.rand(48, 64),
        transpose_half = T.rand(32, 64):cast("float16"):transpose(1, 2):contiguous(),
        column_sum = T.rand(512, 256):sum(1),
        few_rows_matmul = T.rand(32, 256):matmul(T.rand(256, 64)),
      }
    end

    local function all_workloads()
      local names, ts = {}, {}
      for name in pairs(workloads()) do names[#names + 1] = name end
      table.sort(names)
      local w = workloads()
      for i, name in ipairs(names) do ts[i] = w[name] end
      return ts
    end

    it("of matmuls, reductions, padding, transcendentals and random numbers, to CUDA for sm_80 and sm_90", function()
      if not need_nvrtc() then return end
      local ts = all_workloads()
      assert.is_true(check_kernels(ts, "cuda") >= 2 * #ts)
    end)

    it("of matmuls, reductions, padding, transcendentals and random numbers, to Metal", function()
      if not need_clang() then return end
      local ts = all_workloads()
      assert.is_true(check_kernels(ts, "metal") >= 2 * #ts)
    end)

    it("contracting an accumulator update acc + x * y into one fma, and nothing else", function()
      -- a sum of products that no tensor core takes (Metal's take float32 matmuls)
      -- (stored inputs: a lazy rand would fuse its Threefry into the kernels)
      local a, b = T.rand(64, 48):realize(), T.rand(64, 48):realize()
      for _, case in ipairs { { "CUDA", "cuda", "fmaf" }, { "METAL", "metal", "fma" } } do
        local k = kernels_of((a * b):sum(2), case[1])
        local src = gpu.render(k[#k].list, { name = "mm", dialect = case[2] })
        -- the reduction's steps: fma(a, b, acc), the product not rounded on its own
        assert.matches("float alu%d+ = " .. case[3] .. "%(val%d+, val%d+, val%d+%);", src)
        -- an elementwise a * b + c stays two roundings (NVRTC runs with --fmad=false)
        local e = kernels_of(a * a + a, case[1])
        local esrc = gpu.render(e[#e].list, { name = "ew", dialect = case[2] })
        assert.is_nil(esrc:find(case[3] .. "(", 1, true))
        assert.matches("%(val%d+ %* val%d+%)", esrc)
      end
    end)

    it("shaped for a GPU: thread indices, and warp shuffles and local memory with barriers for a long reduction",
      function()
      local k = kernels_of(T.randn(8, 4096):sum(2), "CUDA")
      local src, facts = gpu.render(k[#k].list, { name = "long_sum", dialect = "cuda" })
      assert.matches("blockIdx.x", src, 1, true)
      assert.matches("threadIdx.x", src, 1, true)
      assert.matches("__shared__", src, 1, true)
      assert.matches("__syncthreads();", src, 1, true)
      assert.matches("__shfl_xor_sync(0xffffffffu, ", src, 1, true) -- each warp's partial sums
      assert.is_true(facts.local_size[1] > 1)
      assert.is_true(facts.local_bytes > 0)
      local m = kernels_of(T.randn(8, 4096):sum(2), "METAL")
      local msl = gpu.render(m[#m].list, { name = "long_sum", dialect = "metal" })
      assert.matches("threadgroup_barrier(mem_flags::mem_threadgroup);", msl, 1, true)
      assert.matches("threadgroup float", msl, 1, true)
      assert.matches("simd_shuffle_xor(", msl, 1, true)
      assert.matches("lid.x", msl, 1, true)
    end)
  end)

  describe("refuse, naming the kernel and the instruction", function()
    local function render_error(list, opts) return helper.error_of(gpu.render, list, opts) end

    it("float64 and fp8 in Metal", function()
      for _, name in ipairs { "float64", "fp8e4m3", "fp8e5m2" } do
        local list = all_ops(name, "metal")
        local want = name == "float64" and "Metal has no float64" or "Metal has no " .. name
        assert.matches("gpu.render: kernel 'm': instruction %d+ %(PARAM%): " .. want, render_error(list,
          { name = "m", dialect = "metal" }))
      end
      local x = T.arange(4):cast("float64") * 2
      local k = kernels_of(x)
      assert.matches("Metal has no float64", render_error(k[1].list, { name = "f64", dialect = "metal" }), 1, true)
      -- a float32 kernel with a float64 constant inside
      local F32, F64 = dt "float32", dt "float64"
      local list, add = builder()
      local out = add("PARAM", F32, nil, { 0, 1 })
      add("STORE", nil, { add("INDEX", F32, { out, const(add, IDX, 0) }),
        add("CAST", F32, { const(add, F64, 1.5) }) })
      assert.matches("kernel 'c': instruction 3 (CONST): Metal has no float64",
        render_error(list, { name = "c", dialect = "metal" }), 1, true)
    end)

    it("vector lanes, which these renderers leave to the lowering", function()
      local F32 = dt "float32"
      local r = u("RANGE", IDX, { K.c(4) }, { 0, "vector" })
      local list = { K.param(F32, 0, 4), K.c(4), r }
      assert.matches("instruction 2 (RANGE): a vector range (lanes) is not rendered in CUDA",
        render_error(list, { name = "v", dialect = "cuda" }), 1, true)
    end)

    it("options and lists that are not what they must be", function()
      local list = { K.param(dt "float32", 0, 4) }
      assert.matches("options need a dialect", render_error(list, { name = "k" }), 1, true)
      assert.matches("unknown dialect 'opencl' (known: cuda, metal)", render_error(list, { dialect = "opencl" }), 1,
        true)
      for _, bad in ipairs { "a-b", "1k", "" } do
        assert.matches("kernel '" .. bad .. "': the name is not a C identifier",
          render_error(list, { name = bad, dialect = "cuda" }), 1, true)
      end
      assert.matches("entry 2 of the list is a number, not a UOp", render_error({ list[1], 5 }, { dialect = "cuda" }),
        1, true)
      assert.matches("dialect must be a string", render_error(list, { dialect = 1 }), 1, true)
    end)

    it("programs that break the encodings", function()
      local F32, I32 = dt "float32", dt "int32"
      local function with(make)
        local list, add = builder()
        make(add)
        return render_error(list, { name = "bad", dialect = "cuda" })
      end
      assert.matches("kernel 'bad': instruction 3 (SPECIAL): gidx0 appears twice", with(function(add)
        add("SPECIAL", IDX, { const(add, IDX, 2) }, "gidx0")
        add("SPECIAL", IDX, { const(add, IDX, 3) }, "gidx0")
      end), 1, true)
      assert.matches("(SPECIAL): arg must be one of gidx0..gidx2, lidx0..lidx2", with(function(add)
        add("SPECIAL", IDX, { const(add, IDX, 2) }, "tid")
      end), 1, true)
      assert.matches("a workgroup of 2048 threads (CUDA allows at most 1024)", with(function(add)
        add("SPECIAL", IDX, { const(add, IDX, 64) }, "lidx0")
        add("SPECIAL", IDX, { const(add, IDX, 32) }, "lidx1")
      end), 1, true)
      assert.matches("instruction 1 (RANGE): the loop is never closed by an END", with(function(add)
        add("RANGE", IDX, { const(add, IDX, 2) }, { 0, "loop" })
      end), 1, true)
      assert.matches("(LOAD): the gate must be a bool value, not int32", with(function(add)
        local p = add("PARAM", F32, nil, { 0, 4 })
        add("LOAD", F32, { add("INDEX", F32, { p, const(add, IDX, 0) }), const(add, I32, 1) })
      end), 1, true)
      assert.matches("(ADD): is not defined for operands (float32, int32) giving float32", with(function(add)
        add("ADD", F32, { const(add, F32, 1.0), const(add, I32, 1) })
      end), 1, true)
      assert.matches("(THREEFRY): is not defined for operands (int32, int32) giving int32", with(function(add)
        add("THREEFRY", I32, { const(add, I32, 1), const(add, I32, 2) })
      end), 1, true)
      assert.matches("instruction 0 (BARRIER): a BARRIER's arg is the number of asynchronous-copy groups it leaves in "
        .. "flight, an integer 0..64", with(function(add) add("BARRIER", nil, {}, 65) end), 1, true)
      local c = u("CONST", I32, nil, 1)
      assert.matches("instruction 0 (ADD): source 1 (CONST) is not earlier in the list",
        render_error({ u("ADD", I32, { c, c }), c }, { name = "bad", dialect = "cuda" }), 1, true)
      assert.matches("instruction 1 (CONST): the node appears twice", render_error({ c, c }, { dialect = "cuda" }), 1,
        true)
      local closed = "(STORE): source 2 (instruction 4, ADD) was defined inside a loop that is closed here"
      assert.matches(closed, with(function(add)
        local p = add("PARAM", IDX, nil, { 0, 1 })
        local r = add("RANGE", IDX, { const(add, IDX, 2) }, { 0, "loop" })
        local inner = add("ADD", IDX, { r, const(add, IDX, 1) })
        add("END", nil, { inner, r })
        add("STORE", nil, { add("INDEX", IDX, { p, const(add, IDX, 0) }), inner })
      end), 1, true)
    end)
  end)
end)

describe("NVRTC", function()
  it("is loaded at run time: available() says why not, instead of raising; it lists its architectures", function()
    local ok, why = nvrtc.available()
    assert.are.equal("boolean", type(ok))
    if not ok then
      assert.matches("NVRTC .* is not available: looked for libnvrtc.so", why)
      assert.matches("set TCL_CUDA_PATH", why, 1, true)
      assert.matches("nvrtc.version: NVRTC", helper.error_of(nvrtc.version), 1, true)
      pending("NVRTC is not available: " .. why)
      return
    end
    local major, minor = nvrtc.version()
    assert.is_true(major >= 11 and minor >= 0)
    local library, include = nvrtc.path()
    assert.matches("libnvrtc", library, 1, true)
    if include then assert.is_true(helper.exists(include .. "/cuda_fp16.h")) end
    -- the architectures it compiles for, ascending; every one it lists compiles
    local archs = nvrtc.supported_archs()
    if major > 11 or minor >= 2 then
      assert.is_true(#archs >= 2)
      for i = 2, #archs do assert.is_true(archs[i - 1] < archs[i]) end
      local source = 'extern "C" __global__ void k(float *p) { p[threadIdx.x] += 1.0f; }'
      for _, a in ipairs { archs[1], archs[#archs] } do
        local ptx = nvrtc.compile_ptx(source, { arch = "sm_" .. a, name = "k" })
        assert.matches(".target sm_" .. a, ptx, 1, true)
      end
      local below = archs[1] - 5
      assert.matches("invalid value for --gpu-architecture", helper.error_of(nvrtc.compile_ptx, source,
        { arch = string.format("sm_%d", below), name = "k" }), 1, true)
    end
  end)

  it("is looked for first in the toolkit that TCL_CUDA_PATH names", function()
    if not need_nvrtc() then return end
    local library = nvrtc.path()
    local toolkit = library:gsub("/lib[^/]*/[^/]*$", "")
    local code = "local n = require 'tcl.nvrtc'; print(n.path()); print(n.available())"
    local status, out, err = helper.run(string.format("TCL_CUDA_PATH=%s %s -e %s", q(toolkit), q(helper.tcl_bin),
      q(code)))
    assert.are.equal(0, status, err)
    assert.are.equal(toolkit .. "/", out:sub(1, #toolkit + 1))
    -- a toolkit that is not there: the loader's path and /usr/local/cuda still serve
    status, out, err = helper.run(string.format("TCL_CUDA_PATH=/nonexistent/cuda %s -e %s", q(helper.tcl_bin), q(code)))
    assert.are.equal(0, status, err)
    assert.matches("true\n$", out)
  end)

  it("compiles to PTX and CUBIN, and says what failed with NVRTC's log and the numbered source", function()
    if not need_nvrtc() then return end
    local src = 'extern "C" __global__ void twice(float* p) { p[threadIdx.x] *= 2.0f; }\n'
    local ptx, info = nvrtc.compile_ptx(src, { arch = "sm_90", name = "twice" })
    assert.matches(".target sm_90", ptx, 1, true)
    assert.are.equal("string", type(info.log))
    assert.is_true(info.seconds > 0)
    local cubin = nvrtc.compile_cubin(src, { arch = "sm_80", name = "twice" })
    assert.are.equal("\127ELF", cubin:sub(1, 4))
    -- by default a * b + c stays two roundings; fmad = true lets NVRTC fuse them
    local muladd = 'extern "C" __global__ void f(float* p) { p[0] = p[1] * p[2] + p[3]; }\n'
    assert.is_nil(nvrtc.compile_ptx(muladd, { name = "f" }):find("fma.rn.f32", 1, true))
    assert.matches("fma.rn.f32", nvrtc.compile_ptx(muladd, { name = "f", fmad = true }), 1, true)
    local err = helper.error_of(nvrtc.compile_ptx, src .. "this is not C\n", { name = "broken" })
    assert.matches("nvrtc.compile_ptx: kernel 'broken': NVRTC failed for sm_80 (NVRTC_ERROR_COMPILATION):", err, 1,
      true)
    assert.matches("broken.cu(2): error", err, 1, true)
    assert.matches("   2| this is not C", err, 1, true)
    assert.matches("arch must be like sm_80, sm_90a or compute_90, got 'sm80'",
      helper.error_of(nvrtc.compile_ptx, src, { arch = "sm80" }), 1, true)
    assert.matches("compile_cubin: kernel 'k': arch must be like sm_80 or sm_90a",
      helper.error_of(nvrtc.compile_cubin, src, { arch = "compute_90", name = "k" }), 1, true)
    assert.matches("options[1] must be a string", helper.error_of(nvrtc.compile_ptx, src, { options = { 1 } }), 1, true)
    local with_option = nvrtc.compile_ptx(src, { options = { "-lineinfo" } })
    assert.matches(".loc", with_option, 1, true)
  end)

  it("compiles a batch on several threads, each PTX as compile_ptx gives it, in order", function()
    if not need_nvrtc() then return end
    local requests, alone = {}, {}
    for i = 1, 7 do
      local src = string.format('extern "C" __global__ void k%d(float* p) { p[threadIdx.x] *= %d.0f; }\n', i, i)
      local opts = { arch = i % 2 == 0 and "sm_90" or "sm_80", name = "k" .. i }
      requests[i] = { src, opts }
      alone[i] = nvrtc.compile_ptx(src, opts)
    end
    for _, threads in ipairs { 1, 3, 16 } do
      local results = nvrtc.compile_ptx_many(requests, { threads = threads })
      assert.are.equal(7, #results)
      for i, r in ipairs(results) do
        assert.are.equal(alone[i], r.ptx)
        assert.are.equal("string", type(r.log))
        assert.is_true(r.seconds > 0)
      end
    end
    assert.are.same({}, nvrtc.compile_ptx_many({}))
    -- the first failure in order names its kernel, with NVRTC's log and the source
    local broken = { requests[1], { "this is not C\n", { name = "broken" } }, { "neither\n", { name = "second" } } }
    local err = helper.error_of(nvrtc.compile_ptx_many, broken)
    assert.matches("nvrtc.compile_ptx_many: kernel 'broken': NVRTC failed for sm_80", err, 1, true)
    assert.matches("   1| this is not C", err, 1, true)
    assert.matches("request 2 must be a table { source, opts }",
      helper.error_of(nvrtc.compile_ptx_many, { requests[1], "x" }), 1, true)
    assert.matches("request 1: extra NVRTC options are compile_ptx's alone",
      helper.error_of(nvrtc.compile_ptx_many, { { "x", { options = { "-lineinfo" } } } }), 1, true)
    assert.matches("threads must be an integer from 1 to 1024",
      helper.error_of(nvrtc.compile_ptx_many, requests, { threads = 0 }), 1, true)
  end)
end)
