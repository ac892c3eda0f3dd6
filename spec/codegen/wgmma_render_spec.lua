-- spec/codegen/wgmma_render_spec.lua — warpgroup WMMAs (docs/design/encodings.md, "GPU-shaped kernels": the
-- wg_* shapes) rendered to CUDA as PTX wgmma.mma_async for sm_90a (src/codegen/c_wmma.c):
-- hand-built kernels of one warpgroup (128 threads) or two (256) copy A (64 x 32 per warpgroup)
-- and B (32 x N) into local tiles of 8 x 8 core matrices, pass a barrier and run two chained
-- products (K = 32: two k-steps, the second's C the first's D), then store D. Checked:
--   * the source: one wgmma.fence, commit_group and wait_group per run of wgmmas, each wgmma with
--     its shape, types and `p, 1, 1, 0, 1`, fence.proxy.async before every barrier, the matrix
--     descriptors' constant parts (leading and stride byte offsets from the strides), the fact
--     arch = "sm_90a"; a result read between two products closes the run (two of each);
--   * NVRTC compiles it for sm_90a, the PTX holds the instructions, and ptxas -arch=sm_90a
--     accepts it without serializing the wgmmas (its "Potential Performance Loss" warning);
--   * Metal refuses the shapes; workgroups that are not whole warpgroups and tiles off a 16-byte
--     boundary are errors; a kernel without warpgroup WMMAs renders as before.
-- Without NVRTC or ptxas the checks that need them are pending, with the reason.
local tcl = require "tcl"
local gpu = require "tcl.gpu"
local nvrtc = require "tcl.nvrtc"
local helper = require "spec.support.helper"
local kernels = require "spec.support.kernels"

local IDX, F32 = tcl.dtype "index", tcl.dtype "float32"

---------------------------------------------------------------------------------------------
-- the tools, where this machine has them

local cuda_tools = require "spec.support.cuda_tools"
local HAVE_NVRTC, NVRTC_WHY = cuda_tools.HAVE_NVRTC, cuda_tools.NVRTC_WHY

---------------------------------------------------------------------------------------------
-- the kernels

-- The variants: shape, input dtype, threads (2 warpgroups: each its own 64 rows of A and D),
-- the tiles' strides in elements as functions of the rows of A (64 per warpgroup) and N.
local VARIANTS = {
  {
    shape = "wg_m64n128k16_f16_f32", N = 128, input = "float16", threads = 128,
    -- A: the 4 core matrices of a row block (K = 32) adjacent; B: the K blocks of a column block
    strides = function(_, n) return { a_rows8 = 256, a_k8 = 64, b_k8 = n // 8 * 64, b_cols8 = 64 } end,
  },
  {
    shape = "wg_m64n64k16_bf16_f32", N = 64, input = "bfloat16", threads = 128,
    -- A: the row blocks of a K block adjacent; B: the 4 K blocks of a column block adjacent, padded
    strides = function(rows) return { a_rows8 = 64, a_k8 = rows // 8 * 64, b_k8 = 64, b_cols8 = 4 * 64 + 8 } end,
  },
  {
    shape = "wg_m64n256k16_f16_f32", N = 256, input = "float16", threads = 128,
    strides = function(_, n) return { a_rows8 = 256, a_k8 = 64, b_k8 = n // 8 * 64, b_cols8 = 64 } end,
  },
  {
    shape = "wg_m64n128k16_f16_f32", N = 128, input = "float16", threads = 256,
    strides = function(_, n) return { a_rows8 = 256, a_k8 = 64, b_k8 = n // 8 * 64, b_cols8 = 64 } end,
  },
}

local K = 32 -- two k-steps of 16

local kit = kernels.kit

-- Offset of element (r, c) of A (which = "A") or B in its local tile (docs/design/encodings.md).
local function tile_offset(st, which, r, c)
  local within = (r & 7) * 8 + (c & 7)
  if which == "A" then return (r >> 3) * st.a_rows8 + (c >> 3) * st.a_k8 + within end
  return (r >> 3) * st.b_k8 + (c >> 3) * st.b_cols8 + within
end

-- The same as nodes of index values r and c.
local function tile_offset_nodes(k, st, which, r, c)
  local major = which == "A" and { st.a_rows8, st.a_k8 } or { st.b_k8, st.b_cols8 }
  return k.op("ADD", k.op("ADD", k.op("MUL", k.op("SHR", r, 3), major[1]), k.op("MUL", k.op("SHR", c, 3), major[2])),
    k.op("ADD", k.op("MUL", k.op("AND", r, 7), 8), k.op("AND", c, 7)))
end

local function log2(n)
  local e = 0
  while (1 << e) < n do e = e + 1 end
  return e
end

-- The kernel of variant v: buffers D (slot 0, rows x N, float32), A (1, rows x K), B (2, K x N),
-- with rows = 64 per warpgroup. Each thread copies its share of A and B into the local tiles
-- (a loop each), a barrier, then per warpgroup two products D1 = A[:, 0:16] B[0:16, :] + 0 and
-- D = A[:, 16:32] B[16:32, :] + D1; D stored by the fragment layout. opts.between: a STORE of
-- D1's register 0 (to D's first element, overwritten later by the same thread) between the
-- two products; opts.inside: the second product's C is a value computed after the first
-- product (1.5, an ALU on constants) instead of D1; opts.loop: the k-steps are the iterations
-- of a loop accumulating in a register array (C loaded from it, D stored back: the shape of a
-- tensor-core matmul); opts.a_first: the constant element A's first tile starts at (default 0);
-- opts.deferred (with opts.loop): the products carry "deferred" and the loop's body opens with a
-- barrier, unless opts.no_barrier; opts.escape (with opts.loop): the body also stores the
-- product's first register to D;
-- opts.after_products: after the second product each thread writes 8 elements of a third local
-- array (slot 2) from A: "copy" as one asynchronous copy (the next stage's copies of a
-- pipeline), "store" as plain stores.
local function wgmma_kernel(v, opts)
  opts = opts or {}
  local wgs = v.threads // 128
  local rows, N = 64 * wgs, v.N
  local st = v.strides(rows, N)
  local IN = tcl.dtype(v.input)
  local nc = N // 2
  local list, add = kernels.builder()
  local k = kit(add)
  local D = add("PARAM", F32, nil, { 0, rows * N })
  local A = add("PARAM", IN, nil, { 1, rows * K })
  local B = add("PARAM", IN, nil, { 2, K * N })
  local function numel(which, r_end, c_end)
    local most = 0
    for r = 0, r_end - 1 do
      for c = 0, c_end - 1 do most = math.max(most, tile_offset(st, which, r, c)) end
    end
    return most + 1 + (opts.a_first or 0)
  end
  local LA = add("DEFINE_LOCAL", IN, nil, { 0, numel("A", rows, K) })
  local LB = add("DEFINE_LOCAL", IN, nil, { 1, numel("B", K, N) })
  local LC = opts.after_products and add("DEFINE_LOCAL", IN, nil, { 2, 8 * v.threads })
  local lidx = add("SPECIAL", IDX, { k.c(v.threads) }, "lidx0")
  -- the copies: element lidx + threads*e of the row-major buffer into its place in the tile
  local function copy(buf, tile, which, r_end, c_end)
    -- nodes are interned: constants first made inside the loop could not be read after it
    for _, x in ipairs { 3, 7, 8, st.a_rows8, st.a_k8, st.b_k8, st.b_cols8, v.threads, log2(c_end), c_end - 1 } do
      k.c(x)
    end
    local e = add("RANGE", IDX, { k.c(r_end * c_end // v.threads) }, { which == "A" and 0 or 1, "loop" })
    local flat = k.op("ADD", lidx, k.op("MUL", e, v.threads))
    local r, c = k.op("SHR", flat, log2(c_end)), k.op("AND", flat, c_end - 1)
    local s = k.store(tile, tile_offset_nodes(k, st, which, r, c), k.load(buf, flat))
    return add("END", nil, { s, e })
  end
  local ea = copy(A, LA, "A", rows, K)
  local eb = copy(B, LB, "B", K, N)
  local bar = add("BARRIER", nil, { add("GROUP", nil, { ea, eb }) })
  local TA, TB = add("AFTER", IN, { LA, bar }), add("AFTER", IN, { LB, bar })
  local wg, lane = k.op("SHR", lidx, 7), k.op("AND", lidx, 127)
  local w, g, t = k.op("SHR", lane, 5), k.op("SHR", k.op("AND", lane, 31), 2), k.op("AND", lane, 3)
  local arow = wgs > 1 and k.op("MUL", wg, 8 * st.a_rows8) or nil -- the warpgroup's rows of A
  local function a_tile(step)
    local first = (opts.a_first or 0) + step * 2 * st.a_k8
    return k.index(TA, arow and k.op("ADD", arow, first) or first)
  end
  local strides = { st.a_rows8, st.a_k8, st.b_k8, st.b_cols8 }
  local function product(a, b, c)
    local src = { a, b }
    for j = 1, nc do src[#src + 1] = c[j] end
    local d = {}
    for j = 0, nc - 1 do
      d[j + 1] = add("WMMA", F32, src, { v.shape, j, strides, opts.deferred and "deferred" or nil })
    end
    return d
  end
  local zero = k.c(0.0, F32)
  -- D's element of register j: row 64*wg + 16w + g + 8((j >> 1) & 1), col 8(j >> 2) + 2t + (j & 1)
  local drow = k.op("ADD", k.op("MUL", wg, 64), k.op("ADD", k.op("MUL", w, 16), g))
  local function d_index(j)
    local r = k.op("ADD", drow, 8 * ((j >> 1) & 1))
    return k.op("ADD", k.op("MUL", r, N), k.op("ADD", k.op("MUL", t, 2), 8 * (j >> 2) + (j & 1)))
  end
  local d = {}
  if opts.loop then
    local acc = add("DEFINE_REG", F32, nil, { 0, nc })
    local inits = {}
    for j = 0, nc - 1 do inits[#inits + 1] = k.store(acc, j, zero) end
    for _, x in ipairs { 2 * st.a_k8, 2 * st.b_k8 } do k.c(x) end
    local step = add("RANGE", IDX, { k.c(2) }, { 2, "reduce" })
    local ta, tb = TA, TB
    if opts.deferred and not opts.no_barrier then
      local opened = add("BARRIER", nil, { step })
      ta, tb = add("AFTER", IN, { LA, opened }), add("AFTER", IN, { LB, opened })
    end
    local cur = add("AFTER", F32, { acc, table.unpack(inits) })
    local c = {}
    for j = 0, nc - 1 do c[j + 1] = k.load(cur, j) end
    local a_first = k.op("MUL", step, 2 * st.a_k8)
    local a = k.index(ta, arow and k.op("ADD", arow, a_first) or a_first)
    local dk = product(a, k.index(tb, k.op("MUL", step, 2 * st.b_k8)), c)
    local stores = {}
    for j = 0, nc - 1 do stores[j + 1] = k.store(cur, j, dk[j + 1]) end
    if opts.escape then stores[#stores + 1] = k.store(D, k.op("ADD", lidx, 0), dk[1]) end
    local done = add("AFTER", F32, { acc, add("END", nil, { add("GROUP", nil, stores), step }) })
    for j = 0, nc - 1 do d[j + 1] = k.load(done, j) end
  else
    local zeros = {}
    for j = 1, nc do zeros[j] = zero end
    local d1 = product(a_tile(0), k.index(TB, 0), zeros)
    if opts.between then k.store(D, d_index(0), d1[1]) end
    local c2 = d1
    if opts.inside then
      c2 = {}
      for j = 1, nc do c2[j] = k.op("ADD", k.c(1.0, F32), k.c(0.5, F32)) end
    end
    d = product(a_tile(1), k.index(TB, 2 * st.b_k8), c2)
  end
  if opts.after_products then
    local into = add("AFTER", IN, { LC, d[1] }) -- after the products
    local first = k.op("MUL", lidx, 8)
    local copies = {}
    if opts.after_products == "copy" then
      copies[1] = add("STORE", nil, { k.index(into, first), k.load(A, first) }, { "async", 8 })
    else
      for e = 0, 7 do copies[e + 1] = k.store(into, k.op("ADD", first, e), k.load(A, k.op("ADD", first, e))) end
    end
    local copied = add("GROUP", nil, copies)
    d = { table.unpack(d) }
    d[1] = add("AFTER", F32, { d[1], copied }) -- D is stored after them
  end
  for j = 0, nc - 1 do k.store(D, d_index(j), d[j + 1]) end
  return list, st
end

local count = helper.count

local function find(text, plain) return (text:find(plain, 1, true)) end

local FENCE = 'asm volatile("wgmma.fence.sync.aligned;" ::: "memory");'
local COMMIT = 'asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");'
local WAIT = 'asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");'
local PROXY = 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'

-- The wgmma instruction of variant v as the source spells it.
local function instruction(v)
  local ty = v.input == "float16" and "f16" or "bf16"
  local nc = v.N // 2
  local regs = {}
  for j = 0, nc - 1 do regs[#regs + 1] = "%" .. j end
  return string.format("wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {%s}, %%%d, %%%d, p, 1, 1, 0, 1;", v.N, ty, ty,
    table.concat(regs, ", "), nc, nc + 1)
end

-- The descriptor's constant part the strides give: LBO = leading * 2 bytes >> 4 in bits 16-29,
-- SBO = stride * 2 bytes >> 4 in bits 32-45, base offset and swizzle 0.
local function fixed_part(leading, stride) return ((leading * 2) >> 4) << 16 | ((stride * 2) >> 4) << 32 end

-- Checks the descriptors of the source's products against the strides: A K-major (LBO a_k8,
-- SBO a_rows8), B N-major (LBO b_k8, SBO b_cols8); returns the descriptors' address parts.
local function check_descriptors(src, st, products)
  local want = { a = fixed_part(st.a_k8, st.a_rows8), b = fixed_part(st.b_k8, st.b_cols8) }
  local addresses = { a = {}, b = {} }
  local pattern = "unsigned long long wmma%d+_d([ab]) = tcl_wgmma_desc%(([^\n]-), 0x(%x+)ull%);"
  for which, address, hex in src:gmatch(pattern) do
    local fixed = math.tointeger(tonumber(hex, 16))
    assert.equals(16, #hex)
    assert.equals(want[which], fixed, which)
    assert.equals(0, fixed & 0xFFFF) -- the address: computed at run time
    assert.equals(0, fixed >> 46) -- base offset and swizzle (none)
    addresses[which][#addresses[which] + 1] = address
  end
  assert.equals(products, #addresses.a)
  assert.equals(products, #addresses.b)
  return addresses
end

-- NVRTC's PTX for sm_90a of the source, with its wgmma instructions; and ptxas -arch=sm_90a -v
-- output (nil without ptxas), after checking it accepts the PTX and does not serialize the
-- wgmmas (spec/support/cuda_tools.lua). Pending without NVRTC.
local function compile_sm90a(src, name, v)
  if not HAVE_NVRTC then return pending("NVRTC is not available: " .. tostring(NVRTC_WHY)) end
  local ptx, said = cuda_tools.compile_sm90a(src, name)
  assert.matches(".target sm_90a", ptx, 1, true)
  assert.matches(".entry " .. name .. "(", ptx, 1, true)
  local ty = v.input == "float16" and "f16" or "bf16"
  assert.matches("wgmma.mma_async.sync.aligned.m64n" .. v.N .. "k16.f32." .. ty .. "." .. ty, ptx, 1, true)
  for _, what in ipairs { "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
    "wgmma.wait_group.sync.aligned", "fence.proxy.async.shared::cta" } do
    assert.matches(what, ptx, 1, true)
  end
  if said then assert.matches("Used %d+ registers", said) end
  return ptx, said
end

local function render(list, name, dialect) return gpu.render(list, { name = name, dialect = dialect or "cuda" }) end

describe("warpgroup WMMAs rendered to CUDA", function()
  for _, v in ipairs(VARIANTS) do
    local name = string.format("wg_%s_%d", v.shape, v.threads)
    it(string.format("as wgmma.mma_async, %s with %d threads: one run of two chained products", v.shape, v.threads),
      function()
        local list, st = wgmma_kernel(v)
        local src, facts = render(list, name)
        assert.equals("sm_90a", facts.arch)
        assert.same({ v.threads, 1, 1 }, facts.local_size)
        -- one run: fence, the two wgmmas, commit, wait, then the stores of D
        local ins = instruction(v)
        assert.equals(2, count(src, ins))
        assert.equals(1, count(src, FENCE))
        assert.equals(1, count(src, COMMIT))
        assert.equals(1, count(src, WAIT))
        local fence, first = find(src, FENCE), find(src, ins)
        local second = src:find(ins, first + 1, true)
        local commit, wait = find(src, COMMIT), find(src, WAIT)
        assert.is_true(fence < first and first < second and second < commit and commit < wait)
        assert.is_true(wait < assert(src:find("p0%[[^\n]*%] = ")), "D is stored after the wait")
        assert.matches('asm volatile%("{\\n .reg .pred p;\\n setp.ne.b32 p, 1, 0;\\n ' .. ins:gsub("%p", "%%%0")
          .. '\\n}\\n"\n', src)
        -- the asm's operands: the accumulators read and written, the two descriptors
        local nc = v.N // 2
        local p1, p2 = src:match("float wmma(%d+)_0 = 0%.0f"), src:match("float wmma(%d+)_0 = wmma%d+_0")
        assert.is_truthy(p1 and p2)
        local chained = "float wmma" .. p2 .. "_0 = wmma" .. p1 .. "_0, wmma" .. p2 .. "_1 = wmma" .. p1 .. "_1, "
        assert.matches(chained, src, 1, true)
        for _, p in ipairs { p1, p2 } do
          assert.matches('"+f"(wmma' .. p .. '_' .. (nc - 1) .. ')\n', src, 1, true)
          assert.matches(': "l"(wmma' .. p .. '_da), "l"(wmma' .. p .. '_db) : "memory");', src, 1, true)
        end
        -- the first product's accumulators are set up and pinned before the fence; only the
        -- second product's results, which the stores read, are pinned after the wait
        local pin1 = find(src, 'asm volatile("" : "+f"(wmma' .. p1 .. '_0)')
        local pin2 = find(src, 'asm volatile("" : "+f"(wmma' .. p2 .. '_0)')
        assert.is_true(pin1 and pin1 < fence)
        assert.is_true(pin2 and wait < pin2)
        assert.equals(2, count(src, 'asm volatile("" :'))
        -- stores to local memory are made visible to the asynchronous proxy before the barrier
        assert.matches(PROXY .. "\n    __syncthreads();\n", src, 1, true)
        assert.equals(1, count(src, PROXY))
        -- the descriptors: constant parts from the strides; the second k-step's tiles 2 K
        -- blocks on (bytes of the shared window)
        local addresses = check_descriptors(src, st, 2)
        assert.equals(1, count(src, "unsigned long long tcl_wgmma_desc(unsigned int addr, unsigned long long fixed)"))
        if v.threads == 128 then
          assert.matches("^smem%d+_u32$", addresses.a[1])
          assert.equals(addresses.a[1] .. " + " .. (2 * st.a_k8 * 2) .. "u", addresses.a[2])
        else -- each warpgroup its own rows of A
          assert.matches("^smem%d+_u32 %+ %(unsigned int%)alu%d+ %* 2u$", addresses.a[1])
        end
        assert.matches("^smem%d+_u32$", addresses.b[1])
        assert.equals(addresses.b[1] .. " + " .. (2 * st.b_k8 * 2) .. "u", addresses.b[2])
        compile_sm90a(src, name, v)
      end)
  end

  it("waits for a run before a result is read, and chains the next run's accumulators through it", function()
    local v = VARIANTS[1]
    local list, st = wgmma_kernel(v, { between = true })
    local src, facts = render(list, "wg_between")
    assert.equals("sm_90a", facts.arch)
    assert.equals(2, count(src, FENCE))
    assert.equals(2, count(src, COMMIT))
    assert.equals(2, count(src, WAIT))
    -- the first product's results are pinned after its wait (the store and the next product
    -- read them), the second's set up from them before the second run's fence
    local first_wait = find(src, WAIT)
    local p1 = src:match("float wmma(%d+)_0 = 0%.0f")
    local p2 = src:match("float wmma(%d+)_0 = wmma" .. p1 .. "_0")
    local pin1 = assert(src:find('asm volatile("" : "+f"(wmma' .. p1 .. '_0)', first_wait, true))
    local store = assert(src:find("p0%[[^\n]*%] = wmma" .. p1 .. "_0;"))
    local init2 = assert(find(src, "float wmma" .. p2 .. "_0 = "))
    local second_fence = src:find(FENCE, find(src, FENCE) + 1, true)
    assert.is_true(first_wait < pin1 and pin1 < store and store < init2 and init2 < second_fence)
    check_descriptors(src, st, 2)
    compile_sm90a(src, "wg_between", v)
  end)

  it("fences again before a product whose accumulators are computed inside the run", function()
    local v = VARIANTS[2]
    local list, st = wgmma_kernel(v, { inside = true })
    local src = render(list, "wg_inside")
    assert.equals(1, count(src, COMMIT))
    assert.equals(1, count(src, WAIT))
    assert.equals(2, count(src, FENCE))
    -- the second product's accumulators: set up after the first wgmma, pinned, fenced
    local first = find(src, instruction(v))
    local p2, alu = src:match("float wmma(%d+)_0 = (alu%d+),")
    assert.is_truthy(p2)
    local init2 = find(src, "float wmma" .. p2 .. "_0 = " .. alu)
    local pin2 = find(src, 'asm volatile("" : "+f"(wmma' .. p2 .. '_0)')
    local fence2 = src:find(FENCE, find(src, FENCE) + 1, true)
    local second = src:find(instruction(v), first + 1, true)
    assert.is_true(first < init2 and init2 < pin2 and pin2 < fence2 and fence2 < second)
    check_descriptors(src, st, 2)
    compile_sm90a(src, "wg_inside", v)
  end)

  it("in a loop over k-steps accumulating in a register array, one run per iteration", function()
    for _, v in ipairs { VARIANTS[1], VARIANTS[4] } do
      local list, st = wgmma_kernel(v, { loop = true })
      local src = render(list, "wg_loop")
      assert.equals(1, count(src, instruction(v)))
      for _, what in ipairs { FENCE, COMMIT, WAIT } do assert.equals(1, count(src, what)) end
      -- inside the loop: C loaded from the array before the fence, D stored back after the wait
      local loop = assert(src:find("for %(int ridx%d+ = 0; ridx%d+ < 2; ridx%d+%+%+%) {\n"))
      local p = src:match("float wmma(%d+)_0 = val%d+")
      assert.is_truthy(p)
      local pin_before = find(src, 'asm volatile("" : "+f"(wmma' .. p .. '_0)')
      local wait = find(src, WAIT)
      local pin_after = src:find('asm volatile("" : "+f"(wmma' .. p .. '_0)', wait, true)
      local store = src:find("reg%d+%[0%] = wmma" .. p .. "_0;")
      assert.is_true(loop < pin_before and pin_before < find(src, FENCE) and wait < pin_after and pin_after < store)
      assert.is_true(store < src:find("\n    }\n", store, true))
      -- the k-step's tiles: at run-time offsets
      local addresses = check_descriptors(src, st, 1)
      assert.matches("^smem%d+_u32 %+ %(unsigned int%)alu%d+ %* 2u$", addresses.a[1])
      assert.matches("^smem%d+_u32 %+ %(unsigned int%)alu%d+ %* 2u$", addresses.b[1])
      compile_sm90a(src, "wg_loop", v)
    end
  end)

  it("leaves a loop's deferred products in flight until the next iteration's wait, the last iteration's waited for",
    function()
    local v = VARIANTS[1]
    local src = render(wgmma_kernel(v, { loop = true, deferred = true }), "wg_deferred")
    local loop = assert(src:find("for %(int (ridx%d+) = 0; ridx%d+ < 2; ridx%d+%+%+%) {\n"))
    local var = src:match("for %(int (ridx%d+) = 0; ridx%d+ < 2;")
    local last = find(src, "if (" .. var .. ' + 1 == 2) asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");')
    local others = find(src, 'else asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");')
    local loop_end = src:find("\n    }\n", others, true)
    local array = src:match("float (reg%d+)%[64%];")
    -- after the loop, the accumulators' array pinned (NVVM must not read it before the wait)
    local pin = find(src, 'asm volatile("" : "+f"(' .. array .. '[0]), ')
    assert.is_true(loop < last and last < others and others < loop_end and loop_end < pin)
    assert.equals(1, count(src, WAIT))
    compile_sm90a(src, "wg_deferred", v)
    -- wait for all in each iteration: without a barrier in the loop (the next iteration's wait
    -- must come before the second barrier after the products), or where the products are read
    for _, opts in ipairs { { no_barrier = true }, { escape = true } } do
      opts.loop, opts.deferred = true, true
      src = render(wgmma_kernel(v, opts), "wg_not_deferred")
      assert.equals(1, count(src, WAIT))
      assert.is_nil(src:find("wait_group.sync.aligned 1", 1, true))
    end
  end)

  it("issues asynchronous copies inside a run (they overlap the products), plain local stores after its wait",
    function()
    local v = VARIANTS[1]
    local list = wgmma_kernel(v, { after_products = "copy" })
    local src = render(list, "wg_copy")
    for _, what in ipairs { COMMIT, WAIT } do assert.equals(1, count(src, what)) end
    local second = src:find(instruction(v), find(src, instruction(v)) + 1, true)
    local copy = find(src, "cp.async.cg.shared.global")
    assert.is_true(second < copy and copy < find(src, COMMIT), "the copy between the last wgmma and the commit")
    compile_sm90a(src, "wg_copy", v)
    src = render(wgmma_kernel(v, { after_products = "store" }), "wg_store")
    second = src:find(instruction(v), find(src, instruction(v)) + 1, true)
    local wait = find(src, WAIT)
    assert.is_nil(src:find("cp.async.cg", 1, true))
    local store = assert(src:find("smem%d+%[[^\n]*%] = ", second))
    assert.is_true(second < wait and wait < store, "the stores after the wait")
  end)

  it("in one translation unit with other kernels (the descriptor helper once)", function()
    local sources, names = {}, {}
    for n, v in ipairs { VARIANTS[1], VARIANTS[2] } do
      names[n] = "wg_tu" .. n
      sources[n] = render(wgmma_kernel(v), names[n])
    end
    local src = table.concat(sources, "\n")
    assert.equals(2, count(src, "#ifndef TCL_HELPER_tcl_wgmma_desc"))
    if not HAVE_NVRTC then return pending("NVRTC is not available: " .. tostring(NVRTC_WHY)) end
    local ptx = nvrtc.compile_ptx(src, { arch = "sm_90a", name = names[1] })
    for _, name in ipairs(names) do assert.matches(".entry " .. name .. "(", ptx, 1, true) end
  end)

  it("refused by Metal, and in workgroups that are not whole warpgroups or with tiles off 16-byte boundaries",
    function()
      local v = VARIANTS[1]
      assert.matches("gpu.render: kernel 'bad': instruction %d+ %(WMMA%): shape wg_m64n128k16_f16_f32 is not rendered "
        .. "in Metal %(a warpgroup shape, PTX wgmma.mma_async of NVIDIA's sm_90a; Metal renders m8n8k8_f32_f32%)",
        helper.error_of(render, wgmma_kernel(v), "bad", "metal"))
      local small = {}
      for key, x in pairs(v) do small[key] = x end
      small.threads = 64 -- two warps: the copies still divide, the warpgroup does not
      assert.matches("kernel 'bad': instruction %d+ %(WMMA%): a workgroup of local size %(64,1,1%) has 64 threads, and "
        .. "a warpgroup WMMA needs whole warpgroups %(a multiple of 128%)",
        helper.error_of(render, wgmma_kernel(small), "bad"))
      assert.matches("kernel 'bad': instruction %d+ %(WMMA%): A's tile starts at element 4, not at a 16%-byte boundary",
        helper.error_of(render, wgmma_kernel(v, { a_first = 4 }), "bad"))
    end)
end)

describe("kernels without warpgroup WMMAs", function()
  -- a copy through local memory with a barrier: as rendered before warpgroup shapes existed
  local function copy_kernel()
    local list, add = kernels.builder()
    local k = kit(add)
    local out = add("PARAM", F32, nil, { 0, 64 })
    local inp = add("PARAM", F32, nil, { 1, 64 })
    local tile = add("DEFINE_LOCAL", F32, nil, { 0, 64 })
    local lidx = add("SPECIAL", IDX, { k.c(64) }, "lidx0")
    local bar = add("BARRIER", nil, { k.store(tile, lidx, k.load(inp, lidx)) })
    k.store(out, lidx, k.load(add("AFTER", F32, { tile, bar }), k.op("XOR", lidx, 63)))
    return list
  end

  it("render as before: no proxy fence at the barrier, no arch fact", function()
    local src, facts = render(copy_kernel(), "copy")
    assert.is_nil(facts.arch)
    assert.equals(table.concat({
      "/* tcl kernel 'copy' (CUDA): grid (1, 1, 1), workgroup (64, 1, 1) */",
      'extern "C" __global__ void __launch_bounds__(64) copy(float* __restrict__ p0, const float* __restrict__ p1) {',
      "    __shared__ __align__(16) float smem2[64];",
      "    int lidx0 = (int)threadIdx.x;",
      "    float val6 = p1[lidx0];",
      "    smem2[lidx0] = val6;",
      "    __syncthreads();",
      "    int alu12 = ((int)(lidx0 ^ 63));",
      "    float val14 = smem2[alu12];",
      "    p0[lidx0] = val14;",
      "}",
      "",
    }, "\n"), src)
  end)
end)
