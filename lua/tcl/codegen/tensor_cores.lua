-- tcl.codegen.tensor_cores — the pass "tensor cores": a matmul kernel the optimizer marked
-- with TC becomes warp tiles of WMMA instructions (src/core/ENCODINGS.md). Layer: codegen (a
-- hand-written pass of the pipeline, for GPU renderers with tensor cores).
--
-- The kernel (what tcl.heuristics.tensor_cores.match accepts): STOREs of f(REDUCE(ADD,
-- MUL(a, b), k)), a over (m, k), b over (k, n). TC's amount is a tile configuration
-- (tcl.heuristics.tensor_cores.config): a workgroup of WM x WN warps, each computing TM x TN
-- tiles of the shape's M x N, so a workgroup computes a block of BM = WM*TM*M rows and
-- BN = WN*TN*N columns. The kernel becomes:
--   blocks of m and n (and the other output ranges) as global ranges; the warp along m, the
--   warp along n and the lane (32) as local ranges, made in that order so that the lane has
--   the largest axis id (the pass "gpu dims" gives it dim x: a warp is 32 consecutive
--   threads); ranges of size 1 are left out;
--   one register array of TM*TN*C accumulators per lane, zeroed;
--   a loop over K-steps in which each lane loads the A fragments of its TM tiles and the B
--   fragments of its TN tiles once (a and b with m, k, n replaced by the positions of the
--   layout), and each of the TM*TN products (WMMA nodes out = 0..C-1 on the same A, B and
--   C registers) stores its new accumulators back;
--   after the loop, each lane stores f of each accumulator at its C position.
local UOp = require "tcl.uop"
local core = require "tcl.core"
local P = require "tcl.pattern"
local tensor_cores = require "tcl.heuristics.tensor_cores"

local M = {}

local new = UOp.new
local INDEX = core.dtype "index"
local VOID = core.dtype "void"
local F32 = core.dtype "float32"
local position = tensor_cores.position

local function const(v) return new("CONST", INDEX, nil, v) end

-- The sum of terms, each nil (nothing), an integer or an index expression; no zero terms, so
-- that the index arithmetic has no `x*0` or `x + 0` (this pass runs after the simplifier).
local function sum(terms)
  local total, offset = nil, 0
  for _, t in pairs(terms) do
    if math.type(t) == "integer" then offset = offset + t
    elseif t and t.op == "CONST" then offset = offset + t.arg
    elseif t then total = total and total + t or t end
  end
  if not total then return const(offset) end
  return offset ~= 0 and total + const(offset) or total
end

-- r * scale, or nil when r is absent (a range of size 1 left out).
local function scaled(r, scale)
  if not r then return nil end
  return scale == 1 and r or r * const(scale)
end

-- x * factor, folded when x is a constant.
local function times(x, factor)
  if x.op == "CONST" then return const(x.arg * factor) end
  return factor == 1 and x or x * const(factor)
end

-- TC's amount in the kernel's opts text ("TC(1,2244)"), or nil when the kernel has no TC.
local function tc_amount(sink)
  local opts = type(sink.arg) == "table" and sink.arg[2]
  if type(opts) ~= "string" then return nil end
  local amount = opts:match("TC%(%d+,(%d+)%)")
  return amount and math.tointeger(tonumber(amount))
end

-- The C WMMA nodes (out = 0..C-1) of one product D = A*B + C, from the fragments a, b and c
-- (lists of their registers); flag: WMMA's third arg item, or nil.
local function product(name, a, b, c, flag)
  local sources = { table.unpack(a) }
  for _, x in ipairs(b) do sources[#sources + 1] = x end
  for _, x in ipairs(c) do sources[#sources + 1] = x end
  local d = {}
  for reg = 0, #c - 1 do d[reg + 1] = new("WMMA", F32, sources, { name, reg, flag }) end
  return d
end

-- The loop over K-steps reading each lane's fragments straight from the inputs: each
-- fragment is loaded once per K-step and used by TN (A) or TM (B) products.
function M.direct_loop(p)
  local found, config, lane, acc_at, init_done = p.found, p.config, p.lane, p.acc_at, p.init_done
  local shape, m, n = found.shape, found.m, found.n
  local regs_c = shape.regs[3]
  local step = p.range(found.k_size // shape.k, "reduce")
  local k_base = { scaled(step, shape.k) }
  -- count fragments of operand ("A" or "B": the input node `value`), fragment t's register at
  -- layout position (row, col) read where map_of(t, row, col) maps the ranges
  local function fragments(operand, value, count, map_of)
    local frags = {}
    for t = 0, count - 1 do
      frags[t] = {}
      for reg = 0, shape.regs[operand == "A" and 1 or 2] - 1 do
        local row, col = position(shape, operand, lane, reg)
        frags[t][reg + 1] = P.substitute(value, map_of(t, row, col))
      end
    end
    return frags
  end
  local a_frags = fragments("A", found.a, config.tm, function(i, row, col)
    local map = tensor_cores.k_map(found, p.plus(k_base, col))
    map[m] = p.plus(p.tile_row(i), row)
    return map
  end)
  local b_frags = fragments("B", found.b, config.tn, function(j, row, col)
    local map = tensor_cores.k_map(found, p.plus(k_base, row))
    map[n] = p.plus(p.tile_col(j), col)
    return map
  end)
  local updates = {}
  for i = 0, config.tm - 1 do
    for j = 0, config.tn - 1 do
      local c = {}
      for reg = 0, regs_c - 1 do c[reg + 1] = new("LOAD", F32, { acc_at(i, j, reg, { init_done, step }) }) end
      for reg, d in ipairs(product(found.name, a_frags[i], b_frags[j], c)) do
        updates[#updates + 1] = new("STORE", VOID, { acc_at(i, j, reg - 1, { init_done, step }), d })
      end
    end
  end
  return new("END", VOID, { new("GROUP", VOID, updates), step })
end

-- The loop over stages of K with the operands staged through local memory: per stage, the
-- workgroup's threads copy the block's A slice (BM x depth) and B slice (depth x BN) into
-- local memory in chunks of consecutive elements (16 bytes where the tile allows), thread t
-- taking chunks t, t + threads, ... (neighbouring threads read neighbouring chunks of a row),
-- rows padded by STAGE_PAD; a barrier; then for each K-step
-- of the stage every warp reads its fragments from local memory and issues its products,
-- the accumulators carried from one K-step to the next in registers; a second barrier keeps
-- the next stage's copies from overwriting what a slower warp still reads.
function M.staged_loop(p)
  local found, config, lane, acc_at, init_done = p.found, p.config, p.lane, p.acc_at, p.init_done
  local shape, m, n = found.shape, found.m, found.n
  local regs_a, regs_b, regs_c = shape.regs[1], shape.regs[2], shape.regs[3]
  local block_m, block_n = tensor_cores.block(shape, config)
  local depth = tensor_cores.stage_depth(found, config, p.local_bytes)
  local warp = tensor_cores.WARP
  local threads = config.wm * config.wn * warp
  local lda, ldb = depth + tensor_cores.STAGE_PAD, block_n + tensor_cores.STAGE_PAD
  local a_dtype, b_dtype = found.a.dtype, found.b.dtype
  local a_tile = new("DEFINE_LOCAL", a_dtype, nil, { 0, block_m * lda })
  local b_tile = new("DEFINE_LOCAL", b_dtype, nil, { 1, depth * ldb })
  local stage = p.range(found.k_size // depth, "reduce")
  local thread = sum { scaled(p.warp_row, config.wn * warp), scaled(p.warp_col, warp), lane }
  -- Each thread copies chunks of `chunk` consecutive elements of a tile row (16 bytes where the
  -- tile allows): thread t takes chunk t, t + threads, ..., so neighbouring threads read
  -- neighbouring chunks. A chunk's loads and stores are at consecutive addresses, which a
  -- renderer (NVVM's load/store vectorizer for CUDA) makes one wide access.
  local function chunk_of(rows, cols, itemsize)
    local chunk = math.max(1, 16 // itemsize)
    while chunk > 1 and (cols % chunk ~= 0 or (rows * cols) % (threads * chunk) ~= 0) do chunk = chunk // 2 end
    return chunk
  end
  -- (row, col) of element v of chunk thread + s*threads of a tile `cols` wide, without a
  -- division in the loop (threads, cols and chunk are powers of two)
  local function element(s, v, cols, chunk)
    local per_row = cols // chunk -- chunks per row
    if per_row % threads == 0 then
      return const(s * threads // per_row), sum { times(thread, chunk), s * threads % per_row * chunk + v }
    end
    return sum { thread // const(per_row), s * (threads // per_row) }, sum { times(thread % const(per_row), chunk), v }
  end
  local k_base = scaled(stage, depth)
  local copies = {}
  -- the stores copying a rows x cols slice into tile (row stride ld); operand_map(row, col)
  -- maps the operand's ranges to the slice element's position
  local function copy_slice(tile, operand, rows, cols, ld, operand_map)
    local chunk = chunk_of(rows, cols, operand.dtype.itemsize)
    for s = 0, rows * cols // (threads * chunk) - 1 do
      for v = 0, chunk - 1 do
        local row, col = element(s, v, cols, chunk)
        local at = new("INDEX", operand.dtype, { tile, sum { times(row, ld), col } })
        copies[#copies + 1] = new("STORE", VOID, { at, P.substitute(operand, operand_map(row, col)) })
      end
    end
  end
  copy_slice(a_tile, found.a, block_m, depth, lda, function(row, col)
    local map = tensor_cores.k_map(found, sum { k_base, col })
    map[m] = sum { scaled(p.block_row, block_m), row }
    return map
  end)
  copy_slice(b_tile, found.b, depth, block_n, ldb, function(row, col)
    local map = tensor_cores.k_map(found, sum { k_base, row })
    map[n] = sum { scaled(p.block_col, block_n), col }
    return map
  end)
  local copied = new("BARRIER", VOID, copies)
  local a_seen = new("AFTER", a_dtype, { a_tile, copied })
  local b_seen = new("AFTER", b_dtype, { b_tile, copied })

  local current = {} -- current[i][j][reg + 1]: the accumulator's value so far in this stage
  for i = 0, config.tm - 1 do
    current[i] = {}
    for j = 0, config.tn - 1 do
      current[i][j] = {}
      for reg = 0, regs_c - 1 do
        current[i][j][reg + 1] = new("LOAD", F32, { acc_at(i, j, reg, { init_done, stage }) })
      end
    end
  end
  -- A fragment register's element is read at the index of register 0's element plus the
  -- register's (lane-independent) offset in the row-major tile: WMMA's third arg item "staged"
  -- promises that form, which lets a renderer read a fragment with one warp-wide matrix load
  -- (CUDA: ldmatrix; src/core/ENCODINGS.md).
  -- origin: the tile's first element, warp_term (nil for a range left out) + offset
  local function fragment(tile, dtype, operand, warp_term, offset, ld, regs)
    local row0, col0 = position(shape, operand, lane, 0)
    local loads = {}
    for reg = 0, regs - 1 do
      local drow, dcol = tensor_cores.register_offset(shape, operand, reg)
      local at = sum { warp_term, times(row0, ld), col0, offset + drow * ld + dcol }
      loads[reg + 1] = new("LOAD", dtype, { new("INDEX", dtype, { tile, at }) })
    end
    return loads
  end
  for kk = 0, depth // shape.k - 1 do
    local a_frags, b_frags = {}, {}
    for i = 0, config.tm - 1 do
      a_frags[i] = fragment(a_seen, a_dtype, "A", scaled(p.warp_row, config.tm * shape.m * lda),
        i * shape.m * lda + kk * shape.k, lda, regs_a)
    end
    for j = 0, config.tn - 1 do
      b_frags[j] = fragment(b_seen, b_dtype, "B", scaled(p.warp_col, config.tn * shape.n),
        kk * shape.k * ldb + j * shape.n, ldb, regs_b)
    end
    for i = 0, config.tm - 1 do
      for j = 0, config.tn - 1 do
        current[i][j] = product(found.name, a_frags[i], b_frags[j], current[i][j], "staged")
      end
    end
  end
  local updates, results = {}, {}
  for i = 0, config.tm - 1 do
    for j = 0, config.tn - 1 do
      for reg = 0, regs_c - 1 do
        results[#results + 1] = current[i][j][reg + 1]
        updates[#updates + 1] = new("STORE", VOID, { acc_at(i, j, reg, { init_done, stage }), current[i][j][reg + 1] })
      end
    end
  end
  updates[#updates + 1] = new("BARRIER", VOID, results)
  return new("END", VOID, { new("GROUP", VOID, updates), stage })
end

function M.run(sink, ctx)
  local amount = tc_amount(sink)
  if not amount then return sink end
  local found, why = tensor_cores.match(sink, ctx.renderer.gpu)
  if not found then error("TC: " .. why, 0) end
  local config, bad = tensor_cores.config(amount)
  if not config then error(string.format("TC(1,%d): %s", amount, bad), 0) end
  local fits, misfit = tensor_cores.check(found, config, ctx.renderer.gpu.threads_max, ctx.renderer.gpu.local_bytes)
  if not fits then error(string.format("TC(1,%d): %s", amount, misfit), 0) end

  local shape, m, n = found.shape, found.m, found.n
  local block_m, block_n = tensor_cores.block(shape, config)
  local regs_c = shape.regs[3]
  local next_axis = 0
  for _, u in ipairs(sink:toposort()) do
    if u.op == "RANGE" and type(u.arg) == "table" and u.arg[1] >= next_axis then next_axis = u.arg[1] + 1 end
  end
  local function range(size, kind)
    local r = new("RANGE", INDEX, { const(size) }, { next_axis, kind })
    next_axis = next_axis + 1
    return r
  end
  -- every range of the lane's position in the launch, outermost first; a range of size 1 is
  -- left out (nil: its index is 0)
  local launch = {}
  for _, r in ipairs(found.outputs) do if r ~= m and r ~= n then launch[#launch + 1] = r end end
  local function optional_range(size, kind)
    if size == 1 then return nil end
    local r = range(size, kind)
    launch[#launch + 1] = r
    return r
  end
  local block_row = optional_range(m.src[1].arg // block_m, "global")
  local block_col = optional_range(n.src[1].arg // block_n, "global")
  local warp_row = optional_range(config.wm, "local")
  local warp_col = optional_range(config.wn, "local")
  local lane = range(tensor_cores.WARP, "local")
  launch[#launch + 1] = lane

  -- the first row of the warp's tile i (0-based) and the first column of its tile j
  local function tile_row(i)
    return { scaled(block_row, block_m), scaled(warp_row, config.tm * shape.m), i * shape.m }
  end
  local function tile_col(j)
    return { scaled(block_col, block_n), scaled(warp_col, config.tn * shape.n), j * shape.n }
  end
  local function plus(terms, x)
    local out = { table.unpack(terms, 1, 3) }
    out[4] = x
    return sum(out)
  end

  local tiles = config.tm * config.tn
  local acc = new("DEFINE_REG", F32, nil, { 0, tiles * regs_c })
  local function acc_at(i, j, reg, after)
    return new("INDEX", F32, { new("AFTER", F32, { acc, table.unpack(after) }),
      const((i * config.tn + j) * regs_c + reg) })
  end
  local init = {}
  for i = 0, config.tm - 1 do
    for j = 0, config.tn - 1 do
      for reg = 0, regs_c - 1 do
        init[#init + 1] = new("STORE", VOID, { acc_at(i, j, reg, launch), new("CONST", F32, nil, 0.0) })
      end
    end
  end
  local init_done = new("GROUP", VOID, init)

  local loop
  if config.staged then
    loop = M.staged_loop { found = found, config = config, range = range, acc_at = acc_at, init_done = init_done,
      block_row = block_row, block_col = block_col, warp_row = warp_row, warp_col = warp_col, lane = lane,
      local_bytes = ctx.renderer.gpu.local_bytes }
  else
    loop = M.direct_loop { found = found, config = config, range = range, acc_at = acc_at, init_done = init_done,
      tile_row = tile_row, tile_col = tile_col, plus = plus, lane = lane }
  end

  -- the epilogue at each of the lane's C positions
  local stores = {}
  for i = 0, config.tm - 1 do
    for j = 0, config.tn - 1 do
      for reg = 0, regs_c - 1 do
        local row, col = position(shape, "C", lane, reg)
        local total = new("LOAD", F32, { acc_at(i, j, reg, { loop }) })
        local map = { [found.reduce] = total, [m] = plus(tile_row(i), row), [n] = plus(tile_col(j), col) }
        stores[#stores + 1] = P.substitute(found.store, map)
      end
    end
  end
  local body = new("GROUP", VOID, stores)
  for i = #launch, 1, -1 do body = new("END", VOID, { body, launch[i] }) end
  return new("SINK", VOID, { body }, sink.arg, sink.tag)
end

return M
