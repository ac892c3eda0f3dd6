-- tcl.heuristics.tensor_cores — which kernels tensor cores take, the tile configurations of
-- the opt TC, and the shapes and fragment layouts of src/core/wmma.c as the lowering needs
-- them: the GPU heuristic asks match() and picks a configuration (choose()) before it applies
-- TC, BEAM times a handful of the configurations that fit (beam_actions()), and the pass "tensor cores"
-- (tcl.codegen.passes.tensor_cores) lowers what match() found. Layer: heuristics (it reads kernels only).
--
-- The kernel: STOREs of f(REDUCE(ADD, MUL(a, b), k...)) (or of CAST(MUL(a, b)) to float32: the
-- product of float16 tensors) where a depends on the output range m and the reduce ranges
-- but not on the output range n, b on the reduce ranges and n but not m (other output ranges,
-- a batch, may appear in both, or in one: a convolution's batch and output rows), the inputs
-- of the shape's dtype (float16 or bfloat16 loads widened to float32, or float32 for Metal's
-- shape), m, n and K (the product of the reduce ranges: a convolution's input channels and
-- window) multiples of the shape's M, N, K; m and n the innermost output ranges that are.
--
-- TC's amount is its tile configuration (src/opt/kernel_opt.h): a workgroup of WM x WN warps,
-- each computing TM x TN tiles of the shape, so that a workgroup computes a block of
-- BM = WM*TM*M rows by BN = WN*TN*N columns. The amount is 0 for 1 x 1 warps of 1 x 1 tiles,
-- else the four decimal digits WM WN TM TN: TC(1,2244) is 2 x 2 warps of 4 x 4 tiles each.
-- WM, WN are 1, 2 or 4; TM, TN are 1, 2, 4 or 8. A fifth digit 1 in front (TC(1,12248))
-- stages the operands through local memory: per stage of K the workgroup's threads copy the
-- block's A and B slices into local memory together (neighbouring threads, neighbouring
-- elements), a barrier, then the warps read their fragments from there. M.config(arg) decodes
-- it, M.arg_of(config) encodes it, M.check(found, config, threads_max, local_bytes) says
-- whether a configuration fits a kernel.
--
-- The lowering: blocks of m and n (and the other output ranges) as global ranges, the warp
-- along m, the warp along n and the lane (32 of them) as local ones, a loop over K-steps in
-- which each lane loads the A fragments of its warp's TM tiles and the B fragments of its TN
-- tiles once and issues TM*TN products (WMMA nodes out = 0..C-1 of each) on them, its C
-- fragments in a register array; after the loop, each lane stores f of each accumulator at
-- its C positions.
-- M.match(sink, target) tells a heuristic whether the pass can lower a kernel.
local UOp = require "tcl.uop"
local core = require "tcl.core"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"
local F32 = core.dtype "float32"

-- The shapes of src/core/wmma.c: sizes, registers per operand, input dtype.
local SHAPES = {
  m16n8k16_f16_f32 = { m = 16, n = 8, k = 16, regs = { 8, 4, 4 }, input = "float16" },
  m16n8k16_bf16_f32 = { m = 16, n = 8, k = 16, regs = { 8, 4, 4 }, input = "bfloat16" },
  m8n8k8_f32_f32 = { m = 8, n = 8, k = 8, regs = { 2, 2, 2 }, input = "float32" },
}
-- Warpgroup shapes (wgmma, sm_90a): 128 lanes, A and B tiles in local memory, N/2 accumulators.
for _, n in ipairs { 64, 128, 256 } do
  for input, short in pairs { float16 = "f16", bfloat16 = "bf16" } do
    SHAPES[string.format("wg_m64n%dk16_%s_f32", n, short)] = { m = 64, n = n, k = 16, regs = { 1, 1, n // 2 },
      input = input, warpgroup = true }
  end
end
M.SHAPES = SHAPES
--- Threads of a warpgroup: the lanes that execute one WMMA of a warpgroup shape together.
M.WARPGROUP = 128

--- (rows, columns) from register 0's element to register reg's in operand ("A", "B" or "C"):
-- the same in every lane.
function M.register_offset(shape, operand, reg)
  if shape.m == 8 then return 0, reg end
  if operand == "A" then return 8 * ((reg >> 1) & 1), (reg & 1) + 8 * (reg >> 2) end
  if operand == "B" then return (reg & 1) + 8 * (reg >> 1), 0 end
  return 8 * (reg >> 1), reg & 1
end

--- (row, col) of register reg of operand ("A", "B" or "C") in lane (index expressions):
-- register 0's element (row lane // 4, column 2 * (lane % 4); B transposed) plus the offset.
-- A warpgroup shape's D: each warp (lane // 32) holds 16 rows laid out as m16n8's C, N/8
-- times along the columns.
function M.position(shape, operand, lane, reg)
  local function c(v) return new("CONST", INDEX, nil, v) end
  local function plus(x, v) return v == 0 and x or x + c(v) end -- no `x + 0` in the kernel
  if shape.warpgroup then
    assert(operand == "C", "a warpgroup shape's A and B are in local memory")
    local row = lane // c(32) * c(16) + lane % c(32) // c(4)
    return plus(row, 8 * ((reg >> 1) & 1)), plus(lane % c(4) * c(2), 8 * (reg >> 2) + (reg & 1))
  end
  local g, t2 = lane // c(4), lane % c(4) * c(2)
  local drow, dcol = M.register_offset(shape, operand, reg)
  if operand == "B" and shape.m ~= 8 then return plus(t2, drow), plus(g, dcol) end
  return plus(g, drow), plus(t2, dcol)
end

local WARPS = { 1, 2, 4 }
local TILES = { 1, 2, 4, 8 }
M.WARPS, M.TILES = WARPS, TILES
--- Threads of a warp: the lanes that execute one WMMA together.
M.WARP = 32

local function member(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- c when its fields are in WARPS and TILES, else nil and why not.
local function valid(c)
  if not (member(WARPS, c.wm) and member(WARPS, c.wn)) then
    return nil, string.format("the warps along m and n (%s, %s) must each be 1, 2 or 4", c.wm, c.wn)
  end
  if not (member(TILES, c.tm) and member(TILES, c.tn)) then
    return nil, string.format("the tiles per warp along m and n (%s, %s) must each be 1, 2, 4 or 8", c.tm, c.tn)
  end
  return c
end

-- A warpgroup configuration (front digit 3): WM x WN warpgroups, each TM tiles of 64 rows by
-- one of N = 64*TN columns (the shape wg_m64n<N>k16).
local WARPGROUPS_M, WARPGROUPS_N, WARPGROUP_TILES, WARPGROUP_WIDTHS = { 1, 2, 4 }, { 1, 2 }, { 1, 2, 4 }, { 1, 2, 4 }

local function valid_warpgroup(c)
  if not (member(WARPGROUPS_M, c.wm) and member(WARPGROUPS_N, c.wn)) then
    return nil, string.format("the warpgroups along m and n (%s, %s) must be 1, 2 or 4 and 1 or 2", c.wm, c.wn)
  end
  if not (member(WARPGROUP_TILES, c.tm) and member(WARPGROUP_WIDTHS, c.tn)) then
    return nil, string.format("the tiles of 64 rows per warpgroup (%s) and the width in 64 columns (%s) must each "
      .. "be 1, 2 or 4", c.tm, c.tn)
  end
  return c
end

--- Buffers a pipelined configuration may have (a sixth digit in front of 2xxxx or 3xxxx).
M.MAX_BUFFERS = 8

--- { wm =, wn =, tm =, tn =, staged =, buffers =, warpgroup = } of TC's amount, or nil and why
-- it is not a configuration (the callers name the opt). buffers: 1, 2 for stages
-- double-buffered, or B (3..MAX_BUFFERS) for a pipeline of B buffers keeping B - 1 stages of
-- copies in flight (a sixth digit B in front of 2xxxx or 3xxxx: TC(1,431122); warpgroup ones keep
-- B - 2 stages of copies and one of products in flight); warpgroup: true
-- for the warpgroup configurations (front digit 3: wm x wn warpgroups of tm tiles of 64 x
-- 64*tn, stages pipelined).
function M.config(arg)
  if arg == 0 then return { wm = 1, wn = 1, tm = 1, tn = 1, staged = false, buffers = 1 } end
  local integer = math.type(arg) == "integer" and arg >= 0
  local front = integer and arg // 10000 % 10 or -1
  local digits = integer and arg % 10000 or -1
  local buffers = integer and arg // 100000 or -1
  if front > 3 or digits < 1111 or digits > 4488 or buffers == 1 or buffers == 2 or buffers > M.MAX_BUFFERS
    or (buffers > 0 and front < 2) then
    return nil, string.format("the amount %s is not 0 or the four digits WM WN TM TN (e.g. 2244), with a 1 in "
      .. "front for operands staged through local memory (12244), a 2 for stages double-buffered and copied "
      .. "asynchronously (22244), a 3 for warpgroups (wgmma: 31122 is 1 x 1 warpgroups of 2 tiles of 64 x 128), "
      .. "and before a 2 or 3 optionally the buffers of a deeper pipeline, 3 to %d (431122: 4 buffers, 3 stages "
      .. "in flight)", tostring(arg), M.MAX_BUFFERS)
  end
  local c = { wm = digits // 1000, wn = digits // 100 % 10, tm = digits // 10 % 10, tn = digits % 10,
    staged = front >= 1, buffers = buffers > 0 and buffers or front >= 2 and 2 or 1, warpgroup = front == 3 or nil }
  if c.warpgroup then return valid_warpgroup(c) end
  return valid(c)
end

--- TC's amount for a configuration { wm =, wn =, tm =, tn = } (missing fields are 1); an
-- invalid configuration is an error.
function M.arg_of(c)
  local fields = { wm = c.wm or 1, wn = c.wn or 1, tm = c.tm or 1, tn = c.tn or 1 }
  local ok, why = (c.warpgroup and valid_warpgroup or valid)(fields)
  if not ok then error(why, 2) end
  local arg = ok.wm * 1000 + ok.wn * 100 + ok.tm * 10 + ok.tn
  local buffers = c.buffers or 1
  if buffers > 2 then
    if buffers > M.MAX_BUFFERS or not (c.warpgroup or c.staged) then
      error(string.format("a pipeline of %d buffers needs a staged or warpgroup configuration and at most %d", buffers,
        M.MAX_BUFFERS), 2)
    end
    arg = arg + buffers * 100000
  end
  if c.warpgroup then return 30000 + arg end
  if c.staged then return (buffers >= 2 and 20000 or 10000) + arg end
  return arg == 1111 and 0 or arg
end

--- The shape a configuration computes with for the kernel match() found: the warpgroup shape
-- of the configuration's width for a warpgroup configuration (nil and why when the target
-- lacks it), else the shape match() found.
function M.shape_of(found, c)
  if not c.warpgroup then return found.shape end
  local n = 64 * c.tn
  local name = string.format("wg_m64n%dk16_%s_f32", n, found.shape.input == "float16" and "f16" or "bf16")
  if not (found.warpgroup_shapes and found.warpgroup_shapes[name]) then
    return nil, string.format("the target has no warpgroup MMA %s (wgmma: CUDA on compute capability 9.0)", name)
  end
  return SHAPES[name], name
end

--- Threads of a workgroup of configuration c.
function M.threads(c) return c.wm * c.wn * (c.warpgroup and M.WARPGROUP or M.WARP) end

--- Elements of padding after each row of a staged tile in local memory: rows of A read by
-- the lanes of a fragment then start in different banks.
M.STAGE_PAD = 8
--- Depths (elements of K) a stage may have, deepest first, in multiples of the shape's K.
M.STAGE_STEPS = { 4, 2, 1 }

local function input_bytes(shape) return shape.input == "float32" and 4 or 2 end

--- The depth of K a staged configuration copies per stage for the kernel match() found: the
-- deepest of STAGE_STEPS whose tiles (in all of the configuration's buffers) fit local_bytes
-- (any, when nil) and divide K into at least buffers - 1 stages (a pipeline's prologue copies
-- that many), and the bytes of local memory it takes; nil and why not when none does.
-- A warpgroup configuration's tiles are not padded (8 x 8 blocks, each 128 contiguous bytes,
-- have no bank conflicts), and every thread copies whole chunks of 8 elements (16 bytes: one
-- row of a block).
function M.stage_depth(found, c, local_bytes)
  local shape = found.shape
  local bm, bn = M.block(shape, c)
  local threads = M.threads(c)
  local pad, unit = c.warpgroup and 0 or M.STAGE_PAD, c.warpgroup and threads * 8 or threads
  local k = found.k_size
  for _, steps in ipairs(M.STAGE_STEPS) do
    local depth = steps * shape.k
    local bytes = (c.buffers or 1) * (bm * (depth + pad) + depth * (bn + pad)) * input_bytes(shape)
    -- every thread copies whole elements (whole chunks): the tiles are multiples of the workgroup
    if k % depth == 0 and k // depth >= (c.buffers or 1) - 1 and (not local_bytes or bytes <= local_bytes)
      and (bm * depth) % unit == 0 and (depth * bn) % unit == 0 then
      return depth, bytes
    end
  end
  local buffers = c.buffers or 1
  return nil, string.format("no stage of K fits: K (%d) must be a multiple of %d%s, and a %d x %d block's A and B "
    .. "slices of depth %d take %d bytes of local memory%s (the target has %s)%s", k, shape.k,
    buffers > 2 and string.format(" with at least %d stages", buffers - 1) or "", bm, bn, shape.k,
    buffers * (bm * (shape.k + pad) + shape.k * (bn + pad)) * input_bytes(shape),
    buffers >= 2 and string.format(" in %d buffers", buffers) or "", tostring(local_bytes),
    c.warpgroup and string.format(", and each slice a multiple of %d elements (the %d threads' chunks of 8)",
      unit, threads) or "")
end

--- The block of output a workgroup computes: rows, columns.
function M.block(shape, c)
  if c.warpgroup then return c.wm * c.tm * 64, c.wn * c.tn * 64 end
  return c.wm * c.tm * shape.m, c.wn * c.tn * shape.n
end

--- true when configuration c fits the kernel match() found (and a workgroup of at most
-- threads_max threads and, staged, local_bytes of local memory, when given), else nil and
-- why not.
function M.check(found, c, threads_max, local_bytes)
  local bm, bn = M.block(found.shape, c)
  local rows, cols = found.m:range_size(), found.n:range_size()
  local unit_m, unit_n = c.warpgroup and 64 or found.shape.m, c.warpgroup and 64 or found.shape.n
  if c.warpgroup then
    local shape, why = M.shape_of(found, c)
    if not shape then return nil, why end
  end
  if rows % bm ~= 0 then
    return nil, string.format("m (%d) is not a multiple of WM*TM*%d = %d*%d*%d = %d", rows, unit_m, c.wm,
      c.tm, unit_m, bm)
  end
  if cols % bn ~= 0 then
    return nil, string.format("n (%d) is not a multiple of WN*TN*%d = %d*%d*%d = %d", cols, unit_n, c.wn,
      c.tn, unit_n, bn)
  end
  local threads = M.threads(c)
  if threads_max and threads_max > 0 and threads > threads_max then
    return nil, string.format("a workgroup of %d x %d %s is %d threads, more than the target's %d", c.wm, c.wn,
      c.warpgroup and "warpgroups" or "warps", threads, threads_max)
  end
  if c.staged then
    local depth, why = M.stage_depth(found, c, local_bytes)
    if not depth then return nil, why end
  end
  return true
end

--- Every configuration that fits the kernel match() found, largest blocks first (then fewer
-- warps: more work per warp).
function M.configs(found, threads_max)
  local out = {}
  for _, wm in ipairs(WARPS) do
    for _, wn in ipairs(WARPS) do
      for _, tm in ipairs(TILES) do
        for _, tn in ipairs(TILES) do
          local c = { wm = wm, wn = wn, tm = tm, tn = tn }
          if M.check(found, c, threads_max) then out[#out + 1] = c end
        end
      end
    end
  end
  local function area(c) local bm, bn = M.block(found.shape, c) return bm * bn end
  table.sort(out, function(x, y)
    if area(x) ~= area(y) then return area(x) > area(y) end
    if x.wm * x.wn ~= y.wm * y.wn then return x.wm * x.wn < y.wm * y.wn end
    return M.arg_of(x) > M.arg_of(y)
  end)
  return out
end

--- Workgroups a large GPU runs at once (an H100 has 132 SMs): choose() shrinks the blocks
-- rather than leave SMs idle.
M.PARALLEL_WORKGROUPS = 132
--- choose()'s limits: warps per workgroup (4: 128 threads), tiles per warp along m and along
-- n (4 x 8 tiles: 128 float accumulators per lane). Measured on an H200 (4096^3 float16,
-- bench/gpu_bench.lua tc_configs): 2 x 2 warps of 4 x 8 tiles 65.6 TFLOP/s, of 8 x 4 tiles
-- 50.7, of 4 x 4 tiles 41.1, 4 x 2 warps of 4 x 4 tiles 46.1.
M.CHOOSE_MAX_WARPS = 4
M.CHOOSE_MAX_TILES_M = 4
M.CHOOSE_MAX_TILES_N = 8

--- The configurations BEAM times (the amounts of TC), of those that fit the kernel: from one
-- warp's single tile to 8 warps and 128 x 128 blocks around choose()'s usual picks.
-- The staged ones (1xxxx, 2xxxx double-buffered, B2xxxx pipelined through B buffers) and the
-- warpgroup ones (3xxxx and B3xxxx, on targets with wgmma; 128 x 256 blocks through 4 buffers
-- of stages of 64 are the shape of cuBLAS's Hopper kernels) are not measured on a GPU yet:
-- BEAM times them (and drops any whose values are wrong), the heuristic does not choose them.
M.BEAM_ARGS = { 0, 1112, 1121, 1122, 2222, 1244, 2144, 2224, 2242, 2244, 2424, 4224, 2248, 2284, 4244,
  12224, 12244, 12248, 12284, 14244, 22244, 22248, 22284, 24244, 322248, 422244,
  31112, 31122, 31114, 32112, 32114, 34112, 331122, 431122, 332112, 432112, 332114, 432114, 434112 }

--- The opts { "TC", 1, amount } BEAM tries for the kernel match() found: those of BEAM_ARGS
-- that fit it (and threads_max and local_bytes, when given).
function M.beam_actions(found, threads_max, local_bytes)
  local out = {}
  for _, arg in ipairs(M.BEAM_ARGS) do
    if M.check(found, M.config(arg), threads_max, local_bytes) then out[#out + 1] = { "TC", 1, arg } end
  end
  return out
end

-- Whether list a is lexicographically greater than list b (of the same length).
local function greater(a, b)
  for i = 1, #a do
    if a[i] ~= b[i] then return a[i] > b[i] end
  end
  return false
end

--- The workgroups a configuration launches for the kernel match() found.
function M.workgroups(found, c)
  local bm, bn = M.block(found.shape, c)
  local count = found.m:range_size() // bm * (found.n:range_size() // bn)
  for _, r in ipairs(found.outputs) do
    if r ~= found.m and r ~= found.n then count = count * r:range_size() end
  end
  return count
end

--- The heuristic's configuration for the kernel match() found (threads_max: the target's
-- limit, or nil). Within choose()'s limits, in order of preference: at least
-- PARALLEL_WORKGROUPS workgroups (else as many as possible: small tiles), the largest block
-- (each loaded element feeds more products), the squarest block (fewest loads for its
-- area), more warps (latency hidden), more tiles per warp (fragments reused), the squarest
-- warp tile, more warps along m. A 4096 x 4096 float16 matmul gets 2 x 2 warps of 4 x 8 tiles (128 x 128 blocks).
function M.choose(found, threads_max)
  local best, best_key
  for _, c in ipairs(M.configs(found, threads_max)) do
    if c.wm * c.wn <= M.CHOOSE_MAX_WARPS and c.tm <= M.CHOOSE_MAX_TILES_M and c.tn <= M.CHOOSE_MAX_TILES_N then
      local bm, bn = M.block(found.shape, c)
      local warp_tile_skew = math.abs(c.tm * found.shape.m - c.tn * found.shape.n)
      local key = { math.min(M.workgroups(found, c), M.PARALLEL_WORKGROUPS), bm * bn, -(bm + bn), c.wm * c.wn,
        c.tm * c.tn, -warp_tile_skew, c.wm, M.arg_of(c) }
      if not best_key or greater(key, best_key) then best, best_key = c, key end
    end
  end
  return best
end

-- The set of nodes u is computed from (u included).
local function nodes_of(u)
  local set = {}
  for _, x in ipairs(u:toposort()) do set[x] = true end
  return set
end

-- The input below a widening cast (CAST to float32 of a float16/bfloat16 value), or u.
local function narrow_input(u)
  if u.op == "CAST" and u.dtype == F32 then return u.src[1] end
  return u
end

--- The kernel's matmul parts for the target's tensor cores, or nil and why not.
-- gpu: { tensor_cores = { shape names in preference order } } (tcl.codegen.devices.gpu_targets).
-- found: { shape =, name =, m =, n = (output ranges), ks = { reduce ranges, outermost
-- first }, k_size = (their product: K), a =, b = (the operands), reduce =, store =, outputs =
-- (the store's ranges, by axis) }. Several reduce ranges (a convolution's channels and
-- window) count as one K: M.k_map turns a position along K into each range's index.
function M.match(sink, gpu)
  local shapes = gpu and gpu.tensor_cores
  if not shapes or #shapes == 0 then return nil, "the target has no tensor cores" end
  local reduces, stores = {}, {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "REDUCE" then reduces[#reduces + 1] = u end
    if u.op == "STORE" then stores[#stores + 1] = u end
  end
  if #reduces ~= 1 or #stores ~= 1 then return nil, "not one reduction stored once" end
  local red = reduces[1]
  if red.arg ~= "ADD" or #red.src < 2 or red.dtype ~= F32 then return nil, "not a float32 sum" end
  local ks, k_size = {}, 1
  for i = 2, #red.src do
    ks[#ks + 1] = red.src[i]
    local size = red.src[i]:range_size()
    if not size then return nil, "a reduction of variable size" end
    k_size = k_size * size
  end
  local mul = red.src[1]
  -- a product of narrow floats widened afterwards (a matmul of float16 tensors multiplies in
  -- float16, then sums in float32): tensor cores multiply exactly, so they take it too
  if mul.op == "CAST" and mul.src[1].op == "MUL" and mul.src[1].dtype ~= F32 then mul = mul.src[1] end
  if mul.op ~= "MUL" then return nil, "the summand is not a product" end
  local store = stores[1]
  local outputs = {}
  for _, u in ipairs(store.src[1]:toposort()) do
    if u.op == "RANGE" then outputs[#outputs + 1] = u end
  end
  table.sort(outputs, function(x, y) return x.arg[1] < y.arg[1] end)
  local function depends_on_k(nodes)
    for _, r in ipairs(ks) do if nodes[r] then return true end end
    return false
  end
  -- m: an output range b does not use; n: one a does not use; the innermost that the shape
  -- divides (a convolution's: output channels, and the output's width)
  local x, y = mul.src[1], mul.src[2]
  local found_parts = false
  for _, order in ipairs { { x, y }, { y, x } } do
    local a, b = order[1], order[2]
    local ia, ib = narrow_input(a), narrow_input(b)
    local of_a, of_b = nodes_of(a), nodes_of(b)
    if depends_on_k(of_a) and depends_on_k(of_b) then
      -- the output ranges only a uses (m's candidates), and only b (n's)
      local only_a, only_b = {}, {}
      for _, r in ipairs(outputs) do
        local in_a, in_b = of_a[r] == true, of_b[r] == true
        if in_a and not in_b then only_a[#only_a + 1] = r elseif in_b and not in_a then only_b[#only_b + 1] = r end
      end
      if #only_a > 0 or #only_b > 0 then found_parts = true end
      for _, name in ipairs(shapes) do
        local shape = SHAPES[name]
        if shape.warpgroup then goto next_shape end
        local input = core.dtype(shape.input)
        local ok_dtype = (shape.input == "float32" and a.dtype == F32 and b.dtype == F32)
          or (ia.dtype == input and ib.dtype == input)
        local m, n
        for _, r in ipairs(only_a) do if r:range_size() % shape.m == 0 then m = r end end
        for _, r in ipairs(only_b) do if r:range_size() % shape.n == 0 then n = r end end
        if ok_dtype and m and n and k_size % shape.k == 0 then
          -- the target's warpgroup shapes of the same input, which configurations 3xxxx use
          local warpgroup_shapes = {}
          for _, other in ipairs(shapes) do
            if SHAPES[other].warpgroup and SHAPES[other].input == shape.input then warpgroup_shapes[other] = true end
          end
          return { shape = shape, name = name, m = m, n = n, ks = ks, k_size = k_size,
            a = shape.input == "float32" and a or ia, b = shape.input == "float32" and b or ib, reduce = red,
            store = store, outputs = outputs, warpgroup_shapes = warpgroup_shapes }
        end
        ::next_shape::
      end
    end
  end
  if found_parts then return nil, "no tensor-core shape fits the dtypes and sizes" end
  return nil, "not a product of an (m, k) and a (k, n) operand"
end

--- { [reduce range] = index } for the position `at` (an index expression) along K of the
-- kernel match() found: the reduce ranges in order, the last varying fastest.
function M.k_map(found, at)
  local map, stride = {}, found.k_size
  for i, r in ipairs(found.ks) do
    local size = r:range_size()
    stride = stride // size
    local index = at
    if stride > 1 then index = index // new("CONST", INDEX, nil, stride) end
    if i > 1 then index = index % new("CONST", INDEX, nil, size) end
    map[r] = index
  end
  return map
end

return M
