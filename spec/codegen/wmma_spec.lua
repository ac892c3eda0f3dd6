-- spec/codegen/wmma_spec.lua — the WMMA op (docs/design/encodings.md, "GPU-shaped kernels"; src/core/wmma.h):
-- hand-built GPU programs in which each lane loads its fragments of A, B and C from global buffers
-- by the shape's layout (index arithmetic in the program), runs the WMMA nodes out = 0..C-1 and
-- stores D back by the layout:
--   * EMU's GPU mode computes D = A*B + C as naive Lua does (float32, adding in k order: equal
--     bit for bit), for every shape, one warp and two, and across the iterations of a loop;
--   * a WMMA that not all threads reach, a workgroup that is not whole warps, and nodes that
--     break the encoding (sources, dtypes, arg) are errors naming the kernel and the instruction;
--   * warpgroup shapes (wg_*, A and B in local memory): each warpgroup of 128 threads copies A and
--     B into a local array in the core-matrix layout with padded strides, a barrier, the WMMAs;
--     EMU's D equals naive Lua's for 1 and 2 warpgroups and 2 workgroups; a workgroup that is not
--     whole warpgroups, lanes that disagree on a tile, a tile past the local array, tiles read
--     without a barrier since their stores or written before the next, unwritten tiles, bad
--     strides and a tile that is not an INDEX are errors naming the kernel and the problem;
--   * the same programs rendered to CUDA (PTX mma.sync, one per product) compile with NVRTC for
--     sm_80 and sm_90 and pass ptxas, and to Metal (simdgroup matrices through threadgroup
--     memory) pass clang++ against spec.support.metal_stub; a shape a dialect lacks is an error.
-- Without NVRTC, ptxas or clang++ the checks that need them are pending, with the reason.
local tcl = require "tcl"
local rt = require "tcl.runtime"
local gpu = require "tcl.gpu"
local nvrtc = require "tcl.nvrtc"
local stub = require "spec.support.metal_stub"
local helper = require "spec.support.helper"

local kernels = require "spec.support.kernels"
local IDX, F32 = tcl.dtype "index", tcl.dtype "float32"

local error_of = helper.error_of

-- The shapes, with their layouts as the encoding states them: where register i of lane l's
-- fragment of A, B or C/D sits, as (row, col). g = l >> 2, t = l & 3.
local SHAPES = {
  {
    name = "m16n8k16_f16_f32", M = 16, N = 8, K = 16, regs = { 8, 4, 4 }, input = "float16",
    at = {
      function(g, t, i) return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2) end,
      function(g, t, i) return 2 * t + (i & 1) + 8 * (i >> 1), g end,
      function(g, t, i) return g + 8 * (i >> 1), 2 * t + (i & 1) end,
    },
  },
  {
    name = "m8n8k8_f32_f32", M = 8, N = 8, K = 8, regs = { 2, 2, 2 }, input = "float32",
    at = {
      function(g, t, i) return g, 2 * t + i end,
      function(g, t, i) return g, 2 * t + i end,
      function(g, t, i) return g, 2 * t + i end,
    },
  },
}
SHAPES[3] = {}
for k, v in pairs(SHAPES[1]) do SHAPES[3][k] = v end
SHAPES[3].name, SHAPES[3].input = "m16n8k16_bf16_f32", "bfloat16"

local builder = kernels.builder -- a linear program: list, add(op, dtype, src, arg)

local kit = kernels.kit

-- The (row, col) of a fragment register as index nodes of lane (g, t are nodes): the layout's
-- formula applied to nodes, the constant parts folded (row = base + const).
local function position(k, shape, which, g, t, i)
  -- the layouts are affine in g and t: evaluate at (0,0), (1,0), (0,1) for the coefficients
  local at = shape.at[which]
  local r0, c0 = at(0, 0, i)
  local rg, cg = at(1, 0, i)
  local rt_, ct = at(0, 1, i)
  local function affine(base, kg, kt)
    local v = k.c(base)
    if kg ~= 0 then v = k.op("ADD", k.op("MUL", g, kg), v) end
    if kt ~= 0 then v = k.op("ADD", k.op("MUL", t, kt), v) end
    return v
  end
  return affine(r0, rg - r0, rt_ - r0), affine(c0, cg - c0, ct - c0)
end

-- A program of one workgroup of `threads` threads (whole warps or not), each warp w computing
-- D_w = A_w * B_w + C_w: buffers D (slot 0), A (1), B (2), C (3), warp w's matrices at w * size,
-- row-major. opts.diverge: the WMMAs sit in a loop that lanes 16..31 skip (a trip count of
-- lidx < 16); opts.regs: the number of sources to give (default: the shape's); opts.shape_name:
-- the shape the WMMA nodes name (default: shape's); opts.out: the first node's out (default 0);
-- opts.flag: a third item of the WMMA's arg ("staged").
local function wmma_program(shape, threads, opts)
  opts = opts or {}
  local warps = math.max(1, threads // 32)
  local M, N, K = shape.M, shape.N, shape.K
  local IN = tcl.dtype(shape.input)
  local list, add = builder()
  local k = kit(add)
  local D = add("PARAM", F32, nil, { 0, warps * M * N })
  local A = add("PARAM", IN, nil, { 1, warps * M * K })
  local B = add("PARAM", IN, nil, { 2, warps * K * N })
  local C = add("PARAM", F32, nil, { 3, warps * M * N })
  local lidx = add("SPECIAL", IDX, { k.c(threads) }, "lidx0")
  local lane, warp = k.op("AND", lidx, 31), k.op("SHR", lidx, 5)
  local g, t = k.op("SHR", lane, 2), k.op("AND", lane, 3)
  local bufs, cols, sizes = { A, B, C }, { K, N, N }, { M * K, K * N, M * N }
  local src = {}
  for which = 1, 3 do
    local base = k.op("MUL", warp, sizes[which])
    for i = 0, shape.regs[which] - 1 do
      local row, col = position(k, shape, which, g, t, i)
      src[#src + 1] = k.load(bufs[which], k.op("ADD", base, k.op("ADD", k.op("MUL", row, cols[which]), col)))
    end
  end
  if opts.regs then
    while #src > opts.regs do table.remove(src) end
    while #src < opts.regs do src[#src + 1] = src[#src] end
  end
  local loop
  if opts.diverge then
    local trips = add("WHERE", IDX, { add("CMPLT", tcl.dtype "bool", { lane, k.c(16) }), k.c(1), k.c(0) })
    loop = add("RANGE", IDX, { trips }, { 0, "loop" })
  end
  local stores = {}
  local dbase = k.op("MUL", warp, M * N)
  for out = 0, shape.regs[3] - 1 do
    local d = add("WMMA", F32, src, { opts.shape_name or shape.name, out + (opts.out or 0), opts.flag })
    local row, col = position(k, shape, 3, g, t, out)
    stores[#stores + 1] = k.store(D, k.op("ADD", dbase, k.op("ADD", k.op("MUL", row, N), col)), d)
  end
  if loop then add("END", nil, { stores[#stores], loop }) end
  return list
end

-- D = A * B + C with A (M x tiles*K) and B (tiles*K x N), for one workgroup of `threads`
-- threads where every warp computes the same product: a loop over the k tiles runs the WMMAs,
-- their C the register array that the previous iteration stored D into (the shape of a
-- tensor-core matmul). Warps other than 0 store nothing. Buffers D, A, B, C as above.
local function tiled_program(shape, tiles, threads)
  local M, N, K = shape.M, shape.N, shape.K
  local KT = K * tiles
  local IN = tcl.dtype(shape.input)
  local list, add = builder()
  local k = kit(add)
  local D = add("PARAM", F32, nil, { 0, M * N })
  local A = add("PARAM", IN, nil, { 1, M * KT })
  local B = add("PARAM", IN, nil, { 2, KT * N })
  local C = add("PARAM", F32, nil, { 3, M * N })
  local acc = add("DEFINE_REG", F32, nil, { 0, shape.regs[3] })
  local lidx = add("SPECIAL", IDX, { k.c(threads) }, "lidx0")
  local lane, warp = k.op("AND", lidx, 31), k.op("SHR", lidx, 5)
  local g, t = k.op("SHR", lane, 2), k.op("AND", lane, 3)
  local inits = {}
  for i = 0, shape.regs[3] - 1 do
    local row, col = position(k, shape, 3, g, t, i)
    inits[#inits + 1] = k.store(acc, k.c(i), k.load(C, k.op("ADD", k.op("MUL", row, N), col)))
  end
  local r = add("RANGE", IDX, { k.c(tiles) }, { 0, "reduce" })
  local kbase = k.op("MUL", r, K)
  local src = {}
  for i = 0, shape.regs[1] - 1 do
    local row, col = position(k, shape, 1, g, t, i)
    src[#src + 1] = k.load(A, k.op("ADD", k.op("MUL", row, KT), k.op("ADD", kbase, col)))
  end
  for i = 0, shape.regs[2] - 1 do
    local row, col = position(k, shape, 2, g, t, i)
    src[#src + 1] = k.load(B, k.op("ADD", k.op("MUL", k.op("ADD", kbase, row), N), col))
  end
  local cur = add("AFTER", F32, { acc, table.unpack(inits) })
  for i = 0, shape.regs[3] - 1 do src[#src + 1] = k.load(cur, k.c(i)) end
  local upd = {}
  for out = 0, shape.regs[3] - 1 do
    upd[#upd + 1] = k.store(cur, k.c(out), add("WMMA", F32, src, { shape.name, out }))
  end
  local e = add("END", nil, { add("GROUP", nil, upd), r })
  local done = add("AFTER", F32, { acc, e })
  local first = add("CMPEQ", tcl.dtype "bool", { warp, k.c(0) })
  for i = 0, shape.regs[3] - 1 do
    local row, col = position(k, shape, 3, g, t, i)
    add("STORE", nil, { add("INDEX", F32, { D, k.op("ADD", k.op("MUL", row, N), col) }), k.load(done, k.c(i)), first })
  end
  return list
end

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- D = A * B + C per warp, as float32 adding in k order (the encoding's semantics), from the
-- values the buffers hold.
local function naive(shape, warps, a, b, c)
  local M, N, K = shape.M, shape.N, shape.K
  local d = {}
  for w = 0, warps - 1 do
    for i = 0, M - 1 do
      for j = 0, N - 1 do
        local acc = c[w * M * N + i * N + j + 1]
        for kk = 0, K - 1 do
          acc = f32(acc + f32(a[w * M * K + i * K + kk + 1] * b[w * K * N + kk * N + j + 1]))
        end
        d[w * M * N + i * N + j + 1] = acc
      end
    end
  end
  return d
end

-- deterministic values: small integers (exact in every format), or fractions
local function values(n, seed, integers)
  local out, state = {}, seed
  for i = 1, n do
    state = (state * 1103515245 + 12345) % 2147483648
    if integers then out[i] = state % 9 - 4 else out[i] = (state % 20001 - 10000) / 1037.0 end
  end
  return out
end

local function filled(dt, xs)
  local buf = rt.buffer(dt, #xs)
  buf:write(xs)
  return buf
end

-- Runs shape's program on EMU with `threads` threads and checks D against naive Lua.
local function check_emu(shape, threads, integers)
  local warps = threads // 32
  local M, N, K = shape.M, shape.N, shape.K
  local IN = tcl.dtype(shape.input)
  local p = rt.program(wmma_program(shape, threads), { name = "wmma_" .. shape.name })
  local a = filled(IN, values(warps * M * K, 1 + threads, integers))
  local b = filled(IN, values(warps * K * N, 2 + threads, integers))
  local c = filled(F32, values(warps * M * N, 3 + threads, integers))
  local d = rt.buffer(F32, warps * M * N)
  p:run { d, a, b, c }
  -- what the buffers hold (float16 / bfloat16 rounded the fractions)
  assert.same(naive(shape, warps, a:read(), b:read(), c:read()), d:read())
  return p
end

-- the tools, where this machine has them
local HAVE_NVRTC, NVRTC_WHY = nvrtc.available()
local function find_ptxas()
  local candidates = { (os.getenv("TCL_CUDA_PATH") or "") .. "/bin/ptxas" }
  if HAVE_NVRTC then candidates[#candidates + 1] = nvrtc.path():gsub("/[^/]*$", "") .. "/../bin/ptxas" end
  candidates[#candidates + 1] = "/usr/local/cuda/bin/ptxas"
  for _, path in ipairs(candidates) do
    if helper.exists(path) then return path end
  end
end
local PTXAS = find_ptxas()
local HAVE_CLANG = helper.run("command -v clang++") == 0

-- CUDA source compiled for sm_80 and sm_90, each PTX assembled by ptxas (pending without NVRTC;
-- without ptxas, NVRTC's PTX only).
local function cuda_compiles(src, name)
  if not HAVE_NVRTC then return pending("NVRTC is not available: " .. tostring(NVRTC_WHY)) end
  for _, arch in ipairs { "sm_80", "sm_90" } do
    local ok, ptx = pcall(nvrtc.compile_ptx, src, { arch = arch, name = name })
    if not ok then error(tostring(ptx) .. "\n" .. src, 2) end
    assert.matches(".entry " .. name .. "(", ptx, 1, true)
    assert.matches("mma.sync.aligned.m16n8k16.row.col.f32", ptx, 1, true)
    if PTXAS then
      local file = os.tmpname()
      helper.write(file, ptx)
      local status, _, err = helper.run(helper.shell_quote(PTXAS) .. " -arch=" .. arch .. " -o /dev/null " ..
        helper.shell_quote(file))
      os.remove(file)
      if status ~= 0 then error(string.format("ptxas -arch=%s failed for %s:\n%s", arch, name, err), 2) end
    end
  end
end

local function metal_checks(src, name)
  if not HAVE_CLANG then return pending("clang++ is not installed: Metal sources cannot be checked") end
  local ok, messages = stub.check(src)
  if not ok then error(string.format("Metal kernel '%s' does not compile against the stub:\n%s\n%s", name,
    tostring(messages), src), 2) end
end

local count = helper.count

describe("WMMA", function()
  describe("on EMU's GPU mode", function()
    for _, shape in ipairs(SHAPES) do
      it("computes D = A*B + C of " .. shape.name .. " for one warp and two, as naive Lua does", function()
        for _, threads in ipairs { 32, 64 } do
          check_emu(shape, threads, true)
          check_emu(shape, threads, false)
        end
      end)
    end

    it("runs WMMAs in a loop over k tiles, accumulating in a register array (2 warps)", function()
      for _, shape in ipairs(SHAPES) do
        local tiles = 3
        local IN = tcl.dtype(shape.input)
        local M, N, K = shape.M, shape.N, shape.K
        local p = rt.program(tiled_program(shape, tiles, 64), { name = "tiled" })
        local a = filled(IN, values(M * K * tiles, 11, false))
        local b = filled(IN, values(K * tiles * N, 12, false))
        local c = filled(F32, values(M * N, 13, false))
        local d = rt.buffer(F32, M * N)
        p:run { d, a, b, c }
        local wide = { M = M, N = N, K = K * tiles }
        assert.same(naive(wide, 1, a:read(), b:read(), c:read()), d:read(), shape.name)
        assert.matches("(kept across barriers)", p:dump(), 1, true)
      end
    end)
  end)

  describe("rendered", function()
    for _, shape in ipairs { SHAPES[1], SHAPES[3] } do
      it("to CUDA as one PTX mma.sync per product, " .. shape.name .. ", for NVRTC and ptxas", function()
        local name = "wmma_" .. shape.input
        local src, facts = gpu.render(wmma_program(shape, 64), { name = name, dialect = "cuda" })
        local ty = shape.input == "float16" and "f16" or "bf16"
        assert.equals(1, count(src, "asm(\"mma.sync.aligned.m16n8k16.row.col.f32." .. ty .. "." .. ty .. ".f32 "))
        -- the operands' bits as read from the buffer (no round trip through float)
        assert.matches((ty == "f16" and "__half_as_ushort" or "__bfloat16_as_ushort") .. "%(raw%d+%)", src)
        assert.is_nil(src:find("_as_ushort(__float2", 1, true))
        -- A in 4 .b32, B in 2, C and D in 4 .f32; the 4 nodes read the asm's 4 results
        assert.matches("unsigned int wmma(%d+)_a3 = %(unsigned int%).* | %(%(unsigned int%).* << 16%);", src)
        assert.matches("unsigned int wmma%d+_b1 = ", src)
        assert.is_nil(src:find("wmma%d+_b2"))
        assert.matches(': "%+f"%(wmma(%d+)_0%), "%+f"%(wmma%1_1%), "%+f"%(wmma%1_2%), "%+f"%(wmma%1_3%)', src)
        assert.matches(': "r"%(wmma(%d+)_a0%), "r"%(wmma%1_a1%), "r"%(wmma%1_a2%), "r"%(wmma%1_a3%), '
          .. '"r"%(wmma%1_b0%), "r"%(wmma%1_b1%)%);', src)
        for out = 0, 3 do assert.matches("p0%[[^\n]*%] = wmma%d+_" .. out .. ";", src) end
        assert.same({ 64, 1, 1 }, facts.local_size)
        cuda_compiles(src, name)
      end)
    end

    it("to CUDA inside a loop over k tiles", function()
      for _, shape in ipairs { SHAPES[1], SHAPES[3] } do
        local src = gpu.render(tiled_program(shape, 3, 64), { name = "tiled", dialect = "cuda" })
        assert.equals(1, count(src, "mma.sync"))
        assert.matches("for %(int ridx%d+ = 0; ridx%d+ < 3; ridx%d+%+%+%) {\n.*mma%.sync.*\n    }\n", src)
        cuda_compiles(src, "tiled")
      end
    end)

    it("to Metal through threadgroup memory and simdgroup_float8x8, m8n8k8_f32_f32, for the stub", function()
      local shape = SHAPES[2]
      local src, facts = gpu.render(wmma_program(shape, 64), { name = "wmma_f32", dialect = "metal" })
      assert.matches("uint3 lid [[thread_position_in_threadgroup]], uint tcl_lane [[thread_index_in_simdgroup]], "
        .. "uint tcl_sg [[simdgroup_index_in_threadgroup]])", src, 1, true)
      -- 2 simdgroups of 3 tiles of 64 floats, declared at the top
      assert.matches(") {\n    threadgroup float tcl_wmma_tg[384];\n", src, 1, true)
      assert.equals(384 * 4, facts.local_bytes)
      assert.equals(1, count(src, "simdgroup_multiply_accumulate(wmma"))
      assert.matches("uint wmma%d+_o = %(tcl_lane >> 2%) %* 8 %+ 2 %* %(tcl_lane & 3%);", src)
      for _, tile in ipairs { "", " + 64", " + 128" } do
        assert.matches("wmma%d+_t%[wmma%d+_o" .. tile:gsub("%+", "%%+") .. " %+ 1%] = ", src)
      end
      assert.matches("simdgroup_load%(wmma(%d+)_a, wmma%1_t, 8%);", src)
      assert.matches("simdgroup_store%(wmma(%d+)_c, wmma%1_t %+ 128, 8%);", src)
      assert.matches("float wmma(%d+)_1 = wmma%1_t%[wmma%1_o %+ 128 %+ 1%];", src)
      assert.equals(3, count(src, "simdgroup_barrier(mem_flags::mem_threadgroup);"))
      metal_checks(src, "wmma_f32")
      local tiled = gpu.render(tiled_program(shape, 3, 32), { name = "tiled", dialect = "metal" })
      assert.matches("threadgroup float tcl_wmma_tg[192];", tiled, 1, true)
      metal_checks(tiled, "tiled")
    end)

    it("refusing shapes the dialect lacks, workgroups that are not whole warps, broken nodes", function()
      local function render_error(list, dialect)
        return helper.error_of(gpu.render, list, { name = "bad", dialect = dialect })
      end
      assert.matches("kernel 'bad': instruction %d+ %(WMMA%): shape m8n8k8_f32_f32 is not rendered in CUDA %(CUDA "
        .. "renders m16n8k16_f16_f32 and m16n8k16_bf16_f32%)", render_error(wmma_program(SHAPES[2], 32), "cuda"))
      assert.matches("kernel 'bad': instruction %d+ %(WMMA%): shape m16n8k16_bf16_f32 is not rendered in Metal %(Metal "
        .. "renders m8n8k8_f32_f32%)", render_error(wmma_program(SHAPES[3], 32), "metal"))
      for _, case in ipairs { { SHAPES[1], "cuda" }, { SHAPES[2], "metal" } } do
        assert.matches("kernel 'bad': instruction %d+ %(WMMA%): a workgroup of local size %(48,1,1%) has 48 threads, "
          .. "and WMMA needs whole warps %(a multiple of 32%)", render_error(wmma_program(case[1], 48), case[2]))
        assert.matches("instruction %d+ %(WMMA%): " .. case[1].name .. " takes %d+ sources",
          render_error(wmma_program(case[1], 32, { regs = 3 }), case[2]))
        assert.matches("instruction %d+ %(WMMA%): out %d is not a register",
          render_error(wmma_program(case[1], 32, { out = 1 }), case[2]))
        assert.matches("instruction %d+ %(WMMA%): arg must be {shape, out}, {shape, out, \"staged\"} or %(a "
          .. "warpgroup shape wg_%*%) {shape, out, {strides}%[, \"deferred\"%]}",
          render_error(wmma_program(case[1], 32, { flag = "tiled" }), case[2]))
      end
      -- "staged" promises fragments read from row-major local tiles; these are read from buffers
      assert.matches("instruction %d+ %(WMMA%): staged WMMA: A is not read from local memory",
        render_error(wmma_program(SHAPES[1], 32, { flag = "staged" }), "cuda"))
    end)
  end)

  describe("on EMU's GPU mode with barriers", function()
    it("shares D through local memory: each lane stores its elements, a barrier, thread 0 sums them", function()
      for _, shape in ipairs(SHAPES) do
        local list = wmma_program(shape, 32)
        -- the program again, its stores of D into local memory instead, then the sum
        local M, N = shape.M, shape.N
        local nodes, add, seen = builder()
        local k = kit(add)
        local smem = add("DEFINE_LOCAL", F32, nil, { 0, M * N })
        local out = add("PARAM", F32, nil, { 4, 1 })
        local stores = {}
        for _, n in ipairs(list) do
          if n.op == "STORE" then
            local at = n:source(1)
            stores[#stores + 1] = k.store(smem, at:source(2), n:source(2))
          else
            nodes[#nodes + 1] = n
            seen[n] = true
          end
        end
        local shared = add("AFTER", F32, { smem, add("BARRIER", nil, stores) })
        local acc = add("DEFINE_REG", F32, nil, { 0, 1 })
        local zero = k.c(0)
        local init = k.store(acc, zero, k.c(0.0, F32))
        local lidx
        for _, n in ipairs(list) do
          if n.op == "SPECIAL" then lidx = n end
        end
        local first = add("CMPEQ", tcl.dtype "bool", { lidx, zero })
        local r = add("RANGE", IDX, { k.c(M * N) }, { 0, "reduce" })
        local cur = add("AFTER", F32, { acc, init })
        local elem = add("LOAD", F32, { add("INDEX", F32, { shared, r }), first })
        local sum = add("ADD", F32, { k.load(cur, zero), elem })
        local e = add("END", nil, { k.store(cur, zero, sum), r })
        add("STORE", nil, { add("INDEX", F32, { out, zero }), k.load(add("AFTER", F32, { acc, e }), zero), first })
        local p = rt.program(nodes, { name = "wmma_barrier" })
        assert.equals(1, p.nbarriers)
        local IN = tcl.dtype(shape.input)
        local a = filled(IN, values(M * shape.K, 21, true))
        local b = filled(IN, values(shape.K * N, 22, true))
        local c = filled(F32, values(M * N, 23, true))
        local total = rt.buffer(F32, 1)
        p:run { rt.buffer(F32, M * N), a, b, c, total }
        local want = 0
        for _, v in ipairs(naive(shape, 1, a:read(), b:read(), c:read())) do want = want + v end
        assert.same({ want }, total:read(), shape.name)
      end
    end)
  end)

  describe("is refused, naming the kernel and the instruction", function()
    local shape = SHAPES[1]

    it("when not all threads of the workgroup reach it together (WMMA divergence)", function()
      local p = rt.program(wmma_program(shape, 32, { diverge = true }), { name = "diverge" })
      local bufs = { rt.buffer(F32, 128), rt.buffer(tcl.dtype "float16", 256), rt.buffer(tcl.dtype "float16", 128),
        rt.buffer(F32, 128) }
      local err = error_of(p.run, p, bufs)
      assert.matches("kernel 'diverge': instruction %d+ %(WMMA%): WMMA divergence: thread gidx %(0,0,0%) lidx "
        .. "%(0,0,0%) waits at this WMMA, but thread gidx %(0,0,0%) lidx %(16,0,0%) finished without reaching it", err)
    end)

    it("in a workgroup that is not whole warps (48 threads)", function()
      for _, s in ipairs(SHAPES) do
        assert.matches("kernel 'half_warp': instruction %d+ %(WMMA%): a workgroup of local size %(48,1,1%) has 48 "
          .. "threads, and WMMA needs whole warps %(a multiple of 32%)",
          error_of(rt.program, wmma_program(s, 48), { name = "half_warp" }))
      end
    end)

    it("with the wrong number of sources", function()
      for _, s in ipairs(SHAPES) do
        local want = s.regs[1] + s.regs[2] + s.regs[3]
        for _, n in ipairs { want - 1, want + 1 } do
          assert.matches(string.format("kernel 'count': instruction %%d+ %%(WMMA%%): %s takes %d sources %%(%d of A, "
            .. "%d of B, %d of C%%), got %d", s.name, want, s.regs[1], s.regs[2], s.regs[3], n),
            error_of(rt.program, wmma_program(s, 32, { regs = n }), { name = "count" }))
        end
      end
    end)

    it("with sources of the wrong dtype, an unknown shape, or an out past D's fragment", function()
      assert.matches("instruction %d+ %(WMMA%): source 1 %(A register 0%) must be bfloat16 for m16n8k16_bf16_f32, "
        .. "not float16", error_of(rt.program, wmma_program(shape, 32, { shape_name = "m16n8k16_bf16_f32" })))
      assert.matches("instruction %d+ %(WMMA%): source 1 %(A register 0%) must be float32 for m8n8k8_f32_f32, not "
        .. "float16", error_of(rt.program, wmma_program(shape, 32, { shape_name = "m8n8k8_f32_f32", regs = 6 })))
      assert.matches('instruction %d+ %(WMMA%): arg must be {shape, out}, {shape, out, "staged"} or %(a warpgroup '
        .. 'shape wg_%*%) {shape, out, {strides}%[, "deferred"%]} with shape one of "m16n8k16_f16_f32", '
        .. '"m16n8k16_bf16_f32", '
        .. '"m8n8k8_f32_f32", "wg_m64n64k16_f16_f32", "wg_m64n128k16_f16_f32", "wg_m64n256k16_f16_f32", '
        .. '"wg_m64n64k16_bf16_f32", "wg_m64n128k16_bf16_f32", "wg_m64n256k16_bf16_f32"$',
        error_of(rt.program, wmma_program(shape, 32, { shape_name = "m16" })))
      assert.matches("instruction %d+ %(WMMA%): out 4 is not a register of m16n8k16_f16_f32's D fragment %(0..3%)",
        error_of(rt.program, wmma_program(shape, 32, { out = 1 })))
    end)
  end)
end)

-- Warpgroup shapes (wg_*): A and B are tiles in local memory, C and D fragments of 128 lanes.
local WG_SHAPES = {
  { name = "wg_m64n64k16_f16_f32", M = 64, N = 64, K = 16, input = "float16" },
  { name = "wg_m64n128k16_f16_f32", M = 64, N = 128, K = 16, input = "float16" },
  { name = "wg_m64n64k16_bf16_f32", M = 64, N = 64, K = 16, input = "bfloat16" },
  { name = "wg_m64n256k16_bf16_f32", M = 64, N = 256, K = 16, input = "bfloat16" },
}

-- Tile strides {a_rows8, a_k8, b_k8, b_cols8}, none the tightest (A: 128, 64; B: 64 * N / 8, 64):
-- padding between the 8 x 8 blocks; the second layout puts A's and B's K blocks farther apart
-- than their row / column blocks.
local function wg_strides(shape, layout)
  local blocks = shape.N // 8
  if layout == 2 then return { 72, 8 * 72 + 16, 80, 2 * 80 + 8 } end
  return { 160, 72, blocks * 80 + 16, 80 }
end

-- The encoding's core-matrix layout: element (r, c) of tile A or B from the tile's first element.
local function tile_offset(st, which, r, c)
  local within = (r & 7) * 8 + (c & 7)
  if which == "A" then return (r >> 3) * st[1] + (c >> 3) * st[2] + within end
  return (r >> 3) * st[3] + (c >> 3) * st[4] + within
end

-- Where warpgroup w's tiles start in the local array (not at 0: both at 8-element boundaries,
-- 8 elements apart), and the array's size: it ends with the last warpgroup's B.
local function wg_places(shape, st, warpgroups)
  local a_span = tile_offset(st, "A", shape.M - 1, shape.K - 1) + 1
  local b_span = tile_offset(st, "B", shape.K - 1, shape.N - 1) + 1
  local first, b_from_a = 24, a_span + 8
  local region = b_from_a + b_span + 8
  return { first = first, b_from_a = b_from_a, region = region,
    numel = first + (warpgroups - 1) * region + b_from_a + b_span }
end

-- D's layout (the encoding's): register i of lane l of the warpgroup, as (row, col).
local function wg_d_at(l, i)
  local w, g, t = l >> 5, (l & 31) >> 2, l & 3
  return 16 * w + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)
end

-- A program of `groups` workgroups of `threads` threads (opts.threads, default 128) in which each
-- warpgroup computes its block's D = A*B + C: buffers D (slot 0), A (1), B (2), C (3), block
-- gidx * warpgroups + w at block * size, row-major. Each lane copies its share of A and B into
-- one local array (the layout of wg_strides, at wg_places), a barrier, the WMMAs out = 0..N/2-1
-- read the tiles, and each lane stores its D elements where its C elements came from.
-- opts: layout (of wg_strides); strides (the WMMA's, instead); a_skew {lane, elements} (that lane
-- gives A's start that many elements later); b_shift (B's start that many elements later in
-- every lane); b_at (B's start, an element of the array, in every lane); no_barrier (the tiles
-- read straight after the copies); overwrite (lane: after the WMMAs that lane stores into A's
-- first element, with no barrier between); overwrite_copy (lane: the same with an asynchronous
-- copy of 8 elements of A's buffer); deferred (the WMMAs' arg carries "deferred"); barriers (that
-- many barriers between the WMMAs and the overwrite); a_load (A's source is a LOAD of the tile's first
-- element, not its INDEX).
local function wg_program(shape, opts)
  opts = opts or {}
  local threads, groups = opts.threads or 128, opts.groups or 1
  local warpgroups = math.max(1, threads // 128)
  local M, N, K = shape.M, shape.N, shape.K
  local IN = tcl.dtype(shape.input)
  local st = wg_strides(shape, opts.layout)
  local at = wg_places(shape, st, warpgroups)
  local blocks = groups * warpgroups
  local list, add = builder()
  local k = kit(add)
  local D = add("PARAM", F32, nil, { 0, blocks * M * N })
  local A = add("PARAM", IN, nil, { 1, blocks * M * K })
  local B = add("PARAM", IN, nil, { 2, blocks * K * N })
  local C = add("PARAM", F32, nil, { 3, blocks * M * N })
  local tiles = add("DEFINE_LOCAL", IN, nil, { 0, at.numel })
  local gidx = add("SPECIAL", IDX, { k.c(groups) }, "gidx0")
  local lidx = add("SPECIAL", IDX, { k.c(threads) }, "lidx0")
  local lane, wg = k.op("AND", lidx, 127), k.op("SHR", lidx, 7)
  local block = k.op("ADD", k.op("MUL", gidx, warpgroups), wg)
  local a_first = k.op("ADD", k.op("MUL", wg, at.region), at.first)
  local b_first = k.op("ADD", a_first, at.b_from_a)
  -- lane copies elements e = j*128 + lane of its warpgroup's tile (rows x cols, row-major); no
  -- loop: its constants would be out of reach after it (nodes are shared)
  local function copy(which, src, first, rows, cols)
    local stores = {}
    local log2 = math.tointeger(math.log(cols, 2))
    local r_blocks, c_blocks = table.unpack(which == "A" and { st[1], st[2] } or { st[3], st[4] })
    for j = 0, rows * cols // 128 - 1 do
      local e = k.op("ADD", lane, j * 128)
      local r, c = k.op("SHR", e, log2), k.op("AND", e, cols - 1)
      local place = k.op("ADD", first, k.op("ADD", k.op("ADD", k.op("MUL", k.op("SHR", r, 3), r_blocks),
        k.op("MUL", k.op("SHR", c, 3), c_blocks)), k.op("ADD", k.op("MUL", k.op("AND", r, 7), 8), k.op("AND", c, 7))))
      local from = k.op("ADD", k.op("MUL", block, rows * cols), e)
      stores[#stores + 1] = k.store(tiles, place, k.load(src, from))
    end
    return add("GROUP", nil, stores)
  end
  local copies = { copy("A", A, a_first, M, K), copy("B", B, b_first, K, N) }
  local shared = opts.no_barrier and tiles or add("AFTER", IN, { tiles, add("BARRIER", nil, copies) })
  local a_start, b_start = a_first, b_first
  if opts.a_skew then
    local skewed = add("CMPEQ", tcl.dtype "bool", { lidx, k.c(opts.a_skew[1]) })
    a_start = k.op("ADD", a_first, add("WHERE", IDX, { skewed, k.c(opts.a_skew[2]), k.c(0) }))
  end
  if opts.b_shift then b_start = k.op("ADD", b_first, opts.b_shift) end
  if opts.b_at then b_start = k.op("ADD", k.op("MUL", lidx, 0), opts.b_at) end
  local a_tile = add("INDEX", IN, { shared, a_start })
  if opts.a_load then a_tile = add("LOAD", IN, { a_tile }) end
  local b_tile = add("INDEX", IN, { shared, b_start })
  -- C's and D's place of register i: (16w + g + 8((i >> 1) & 1), 8(i >> 2) + 2t + (i & 1))
  local w, g, t = k.op("SHR", lane, 5), k.op("SHR", k.op("AND", lane, 31), 2), k.op("AND", lane, 3)
  local row0 = k.op("ADD", k.op("MUL", w, 16), g)
  local col0 = k.op("MUL", t, 2)
  local base = k.op("MUL", block, M * N)
  local places, src = {}, { a_tile, b_tile }
  for i = 0, N // 2 - 1 do
    local r0, c0 = wg_d_at(0, i)
    local row, col = k.op("ADD", row0, r0), k.op("ADD", col0, c0)
    places[i] = k.op("ADD", base, k.op("ADD", k.op("MUL", row, N), col))
    src[#src + 1] = k.load(C, places[i])
  end
  local stored = {}
  for out = 0, N // 2 - 1 do
    local d = add("WMMA", F32, src, { shape.name, out, opts.strides or st, opts.deferred and "deferred" or nil })
    stored[#stored + 1] = k.store(D, places[out], d)
  end
  local later = shared -- the tiles after `barriers` more barriers
  for b = 1, opts.barriers or 0 do
    later = add("AFTER", IN, { tiles, add("BARRIER", nil, { b == 1 and add("GROUP", nil, stored) or later }) })
  end
  if opts.overwrite then
    local who = add("CMPEQ", tcl.dtype "bool", { lidx, k.c(opts.overwrite) })
    add("STORE", nil, { add("INDEX", IN, { later, a_first }), k.c(1.0, IN), who })
  end
  if opts.overwrite_copy then
    local who = add("CMPEQ", tcl.dtype "bool", { lidx, k.c(opts.overwrite_copy) })
    add("STORE", nil, { add("INDEX", IN, { later, a_first }), k.load(A, k.c(0), who), who }, { "async", 8 })
  end
  return list, at
end

-- Runs shape's warpgroup program on EMU and checks D against naive Lua, bit for bit.
local function check_wg(shape, opts, integers, seed)
  local threads, groups = opts.threads or 128, opts.groups or 1
  local blocks = groups * threads // 128
  local M, N, K = shape.M, shape.N, shape.K
  local IN = tcl.dtype(shape.input)
  local p = rt.program(wg_program(shape, opts), { name = "wg" })
  local a = filled(IN, values(blocks * M * K, seed, integers))
  local b = filled(IN, values(blocks * K * N, seed + 1, integers))
  local c = filled(F32, values(blocks * M * N, seed + 2, integers))
  local d = rt.buffer(F32, blocks * M * N)
  p:run { d, a, b, c }
  assert.same(naive(shape, blocks, a:read(), b:read(), c:read()), d:read(), shape.name)
  return p
end

-- Buffers for wg_program(shape, opts) with values that make it run.
local function wg_buffers(shape, opts)
  local blocks = (opts.groups or 1) * math.max(1, (opts.threads or 128) // 128)
  local IN = tcl.dtype(shape.input)
  local M, N, K = shape.M, shape.N, shape.K
  return { rt.buffer(F32, blocks * M * N), filled(IN, values(blocks * M * K, 1, true)),
    filled(IN, values(blocks * K * N, 2, true)), filled(F32, values(blocks * M * N, 3, true)) }
end

-- The error of running wg_program(shape, opts) as kernel `name`.
local function wg_run_error(shape, name, opts)
  local p = rt.program(wg_program(shape, opts), { name = name })
  return error_of(p.run, p, wg_buffers(shape, opts))
end

describe("WMMA of a warpgroup shape (A and B in local memory) on EMU's GPU mode", function()
  for n, shape in ipairs(WG_SHAPES) do
    it("computes D = A*B + C of " .. shape.name .. " as naive Lua does, from padded tiles", function()
      check_wg(shape, { layout = 1 }, true, 10 * n)
      check_wg(shape, { layout = 2 }, false, 10 * n + 3)
    end)
  end

  it("computes it for 2 warpgroups of a workgroup, each from its own tiles, and in 2 workgroups", function()
    check_wg(WG_SHAPES[2], { threads = 256, layout = 1 }, false, 51)
    for _, shape in ipairs { WG_SHAPES[1], WG_SHAPES[3] } do
      check_wg(shape, { threads = 256, groups = 2, layout = 2 }, false, 57)
    end
  end)

  it("keeps the tiles' INDEX registers across the stop", function()
    local p = check_wg(WG_SHAPES[1], { threads = 256 }, true, 61)
    local kept = 0
    for line in p:dump():gmatch("[^\n]+") do
      if line:match("^ *%d+ +INDEX +float16 .*%(kept across barriers%)$") then kept = kept + 1 end
    end
    assert.equals(2, kept) -- A's and B's: the copies' INDEXes are used before the barrier only
  end)

  describe("is refused, naming the kernel and the problem", function()
    local shape = WG_SHAPES[1]

    it("in a workgroup that is not whole warpgroups (96 threads)", function()
      for _, s in ipairs(WG_SHAPES) do
        assert.matches("^runtime.program: kernel 'wg_96': instruction %d+ %(WMMA%): a workgroup of local size "
          .. "%(96,1,1%) has 96 threads, and a WMMA of a warpgroup shape needs whole warpgroups %(a multiple of 128%)$",
          error_of(rt.program, wg_program(s, { threads = 96 }), { name = "wg_96" }))
      end
    end)

    it("when the lanes of a warpgroup disagree on where a tile starts", function()
      local _, at = wg_program(shape, { threads = 256 })
      -- lane 37 of the second warpgroup (thread 165) gives A's start 8 elements later
      local first = at.first + at.region
      assert.matches("kernel 'skew': instruction %d+ %(WMMA%): the lanes of a warpgroup disagree on where A starts: "
        .. "thread gidx %(0,0,0%) lidx %(128,0,0%) %(lane 0%) gives element " .. first .. " of DEFINE_LOCAL slot 0, "
        .. "thread gidx %(0,0,0%) lidx %(165,0,0%) %(lane 37%) element " .. (first + 8) .. " %(",
        wg_run_error(shape, "skew", { threads = 256, a_skew = { 165, 8 } }))
    end)

    it("when a tile reaches outside the local array or does not start on 16 bytes", function()
      local _, at = wg_program(shape)
      -- B's first 8 elements (row 0 of its first block) are the array's last 8, the next block is past the end
      assert.matches("kernel 'past': instruction %d+ %(WMMA%): B's element %(0, 8%) is element %d+ of DEFINE_LOCAL "
        .. "slot 0, outside its " .. at.numel .. " elements %(the tile starts at element " .. (at.numel - 8) .. "%)",
        wg_run_error(shape, "past", { b_at = at.numel - 8 }))
      -- the tensor cores read 16-byte rows: a tile starts at a multiple of 8 elements
      assert.matches("kernel 'odd': instruction %d+ %(WMMA%): B starts at element 4, not a multiple of 8 %(a "
        .. "warpgroup shape's tiles start on 16%-byte boundaries%)", wg_run_error(shape, "odd", { b_at = 4 }))
      assert.matches("kernel 'before': instruction %d+ %(WMMA%): B's element %(0, 0%) is element %-8 of "
        .. "DEFINE_LOCAL slot 0, outside its " .. at.numel .. " elements", wg_run_error(shape, "before", { b_at = -8 }))
    end)

    it("when it reads tiles stored with no barrier since (a race), or one is written before the next", function()
      local _, at = wg_program(shape)
      -- A's first element is thread 0's: as thread 0's read it is no race, as thread 1's it is
      assert.matches("kernel 'unordered': instruction %d+ %(WMMA%): race: thread gidx %(0,0,0%) lidx %(1,0,0%) "
        .. "reads element " .. at.first .. " of DEFINE_LOCAL slot 0, which thread gidx %(0,0,0%) lidx %(0,0,0%) "
        .. "wrote with no barrier between them", wg_run_error(shape, "unordered", { no_barrier = true }))
      -- every thread of the writer's warpgroup read its A: a store by another races with the
      -- warpgroup's first thread, one by that thread with the second
      local second = at.first + at.region
      for _, case in ipairs { { 5, 0 }, { 0, 1 }, { 128, 129 }, { 255, 128 } } do
        local writer, reader = case[1], case[2]
        local err = wg_run_error(shape, "overwrite", { threads = 256, overwrite = writer })
        assert.matches("kernel 'overwrite': instruction %d+ %(STORE%): race: thread gidx %(0,0,0%) lidx %(" .. writer
          .. ",0,0%) writes element %d+ of DEFINE_LOCAL slot 0, which thread gidx %(0,0,0%) lidx %(" .. reader
          .. ",0,0%) read with no barrier between them", err)
        -- the writer's own warpgroup's tile, A's first element
        assert.matches("writes element " .. (writer < 128 and at.first or second) .. " ", err, 1, true)
      end
      -- so is an asynchronous copy into it (CUDA issues the next stage's copies while its wgmmas
      -- still read the tiles: only the barrier after their wait ends the reads)
      for _, case in ipairs { { 0, 1 }, { 7, 0 } } do
        assert.matches("kernel 'copy': instruction %d+ %(STORE%): race: thread gidx %(0,0,0%) lidx %(" .. case[1]
          .. ",0,0%) writes element " .. at.first .. " of DEFINE_LOCAL slot 0, which thread gidx %(0,0,0%) lidx %("
          .. case[2] .. ",0,0%) read with no barrier between them",
          wg_run_error(shape, "copy", { overwrite_copy = case[1] }))
      end
    end)

    it("when a \"deferred\" WMMA's tile is written before the second barrier after it", function()
      local _, at = wg_program(shape)
      -- one barrier orders a plain WMMA's reads before the write; a deferred one's need two
      check_wg(shape, { overwrite = 3, barriers = 1 }, true, 41)
      check_wg(shape, { deferred = true, overwrite = 3, barriers = 2 }, true, 41)
      check_wg(shape, { deferred = true, overwrite_copy = 0, barriers = 2 }, true, 41)
      for _, case in ipairs { { "overwrite", 3 }, { "overwrite_copy", 0 } } do
        local err = wg_run_error(shape, "deferred", { deferred = true, [case[1]] = case[2], barriers = 1 })
        assert.matches("kernel 'deferred': instruction %d+ %(STORE%): race: thread gidx %(0,0,0%) lidx %(" .. case[2]
          .. ',0,0%) writes element ' .. at.first .. ' of DEFINE_LOCAL slot 0, which the "deferred" WMMA of the '
          .. "warpgroup of thread gidx %(0,0,0%) lidx %(0,0,0%) read one barrier ago %(a deferred WMMA's reads of "
          .. "its tiles last until the second barrier after it%)", err)
      end
      -- a workgroup's deferred reads do not hold the next workgroup's local memory
      check_wg(shape, { deferred = true, groups = 2 }, true, 43)
    end)

    it("when a tile holds elements no thread has stored (uninitialized local memory)", function()
      -- 64 elements on, B starts in the padding after its first 8 x 8 block
      assert.matches("kernel 'unwritten': instruction %d+ %(WMMA%): reads element %d+ of DEFINE_LOCAL slot 0, which "
        .. "no thread of the workgroup has written %(uninitialized local memory%)",
        wg_run_error(shape, "unwritten", { b_shift = 64 }))
    end)

    it("with strides that are not multiples of 8, or a tile that is not an INDEX into local memory", function()
      assert.matches("^runtime.program: kernel 'strides': instruction %d+ %(WMMA%): wg_m64n64k16_f16_f32's stride a_k8 "
        .. "must be a positive multiple of 8 elements below 131072$",
        error_of(rt.program, wg_program(shape, { strides = { 160, 12, 656, 80 } }), { name = "strides" }))
      assert.matches("^runtime.program: kernel 'loaded': instruction %d+ %(WMMA%): source 1 %(A%) must be an INDEX "
        .. "into a DEFINE_LOCAL: wg_m64n64k16_f16_f32 reads its tiles from local memory$",
        error_of(rt.program, wg_program(shape, { a_load = true }), { name = "loaded" }))
    end)
  end)
end)
