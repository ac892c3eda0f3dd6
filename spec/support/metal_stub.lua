-- spec/support/metal_stub.lua — a stand-in for Metal's <metal_stdlib>, so that Metal Shading Language
-- rendered by tcl (module tcl.gpu, dialect "metal") can be checked on a machine without Metal:
-- clang++ compiles it as C++17 against this header. Not part of the product (a tool of the specs and
-- of anyone checking a Metal kernel on Linux).
--
--   local stub = require "spec.support.metal_stub"
--   stub.header                          the header's text
--   stub.check(source[, { clang = "clang++" }]) -> true | false, clang's messages
--                                        | nil, why (no clang)
--
-- check writes the header as `metal_stdlib` into a fresh directory, so the kernel's own
-- `#include <metal_stdlib>` finds it, and runs
--   clang++ -std=c++17 -fsyntax-only -Wno-unknown-attributes -I <dir> -x c++ kernel.metal
-- (the header's comment says what such a check can and cannot catch).
local M = {}

M.header = [==[
// metal_stdlib — tcl's stand-in for Metal's standard library header, for checking on Linux
// the Metal Shading Language that tcl renders (src/codegen/c_render.h), as C++17:
//   clang++ -std=c++17 -fsyntax-only -Wno-unknown-attributes -I <dir holding this file> -x c++ kernel.metal
//
// What the check catches: C++ syntax; undeclared names (a variable used outside its loop's
// block, a helper that was not emitted, a Metal function or type tcl does not know); wrong
// argument counts and types of the Metal functions declared here; implicit conversions between
// half / bfloat and float (Metal allows them; here they must be written, as tcl writes them);
// as_type<> between types of different sizes; any use of double, which Metal lacks.
//
// What it cannot catch: Metal's own rules. The address space qualifiers (device, threadgroup,
// constant, thread) are erased, so pointer address-space mismatches pass; attributes
// ([[buffer(n)]], [[threadgroup_position_in_grid]], ...) are ignored, so their placement and
// arguments are unchecked; limits (31 buffers, 32 KiB of threadgroup memory, threads per
// threadgroup) and which GPU families have 64-bit integers or bfloat (Metal 3.1) are unknown
// here; the declarations below are tcl's reading of the Metal specification, so a function
// Metal lacks or spells otherwise passes here and fails on a Mac; nothing about numerics
// (precision, fast math, rounding of conversions) is checked.
#ifndef TCL_METAL_STUB
#define TCL_METAL_STUB

#define kernel
#define device
#define threadgroup
#define constant
#define thread
#define double tcl_metal_has_no_double

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
static_assert(sizeof(long) == 8, "Metal's long has 64 bits: check on an LP64 host");

namespace metal {

struct half {
    ushort bits;
    half() = default;
    explicit half(float);
    explicit operator float() const;
};

struct bfloat { // Metal 3.1
    ushort bits;
    bfloat() = default;
    explicit bfloat(float);
    explicit operator float() const;
};

struct uint3 {
    uint x, y, z;
};

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
mem_flags operator|(mem_flags, mem_flags);
void threadgroup_barrier(mem_flags);

template <typename T, typename U> T as_type(U x) {
    static_assert(sizeof(T) == sizeof(U), "as_type needs types of one size");
    T t;
    __builtin_memcpy(&t, &x, sizeof t);
    return t;
}

// SIMD-group shuffles (tcl's SHUFFLE: the value of lane `own lane ^ mask`), for the types tcl
// shuffles; a value of another type is an error here
float simd_shuffle_xor(float data, ushort mask);
half simd_shuffle_xor(half data, ushort mask);
int simd_shuffle_xor(int data, ushort mask);
uint simd_shuffle_xor(uint data, ushort mask);

// simdgroup matrices (tcl's WMMA m8n8k8_f32_f32: src/codegen/c_wmma.c); the pointers are
// threadgroup memory in Metal, plain here
void simdgroup_barrier(mem_flags);

template <typename T, int Cols, int Rows> struct simdgroup_matrix {
    simdgroup_matrix() = default;
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;

template <typename T, int Cols, int Rows>
void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const T *src, ulong elements_per_row = Cols);
template <typename T, int Cols, int Rows>
void simdgroup_store(simdgroup_matrix<T, Cols, Rows> a, T *dst, ulong elements_per_row = Cols);
template <typename T, int Cols, int Rows, int K>
void simdgroup_multiply_accumulate(simdgroup_matrix<T, Cols, Rows> &d, simdgroup_matrix<T, K, Rows> &a,
                                   simdgroup_matrix<T, Cols, K> &b, simdgroup_matrix<T, Cols, Rows> &c);

float exp2(float);
float log2(float);
float sin(float);
float cos(float);
float sqrt(float);
float trunc(float);
float pow(float, float);
float fmod(float, float);
float fma(float, float, float);
float ldexp(float, int);
bool signbit(float);
bool isfinite(float);
bool isnan(float);
float fmax(float, float);
float fmin(float, float);

} // namespace metal

#endif
]==]

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local text = f:read("a")
  f:close()
  return text
end

--- Checks Metal source as C++ against the header: true, or false and clang's messages; nil and
-- why when clang cannot be run.
function M.check(source, opts)
  local clang = opts and opts.clang or "clang++"
  if not os.execute("command -v " .. quote(clang) .. " >/dev/null 2>&1") then
    return nil, string.format("%s is not installed", clang)
  end
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. quote(dir)), "cannot make a directory for the Metal check")
  local stdlib, kernel, log = dir .. "/metal_stdlib", dir .. "/kernel.metal", dir .. "/clang.log"
  write(stdlib, M.header)
  write(kernel, source)
  local ok = os.execute(string.format("%s -std=c++17 -fsyntax-only -Wno-unknown-attributes -I %s -x c++ %s >%s 2>&1",
    quote(clang), quote(dir), quote(kernel), quote(log)))
  local messages = read(log)
  os.remove(stdlib)
  os.remove(kernel)
  os.remove(log)
  os.remove(dir)
  if ok then return true, messages end
  return false, messages
end

return M
