-- tcl.codegen.passes.tensor_cores — the pass "tensor cores": a matmul kernel the optimizer marked
-- with TC becomes warp tiles of WMMA instructions (docs/design/encodings.md). Layer: codegen (a
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
-- Not rules: the tiling re-plans the whole kernel at once (its output and reduce ranges become
-- block, warp and lane ranges, the K loop is rebuilt around fragment loads that every tile of
-- the lane shares, the stores move after it), from a match of the whole matmul
-- (tcl.heuristics.tensor_cores.match); no node is rewritten on its own.
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

local const = UOp.index_const

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
-- (lists of their registers); flag: WMMA's third arg item, or nil; fourth: its fourth, or nil.
local function product(name, a, b, c, flag, fourth)
  local sources = { table.unpack(a) }
  for _, x in ipairs(b) do sources[#sources + 1] = x end
  for _, x in ipairs(c) do sources[#sources + 1] = x end
  local d = {}
  for reg = 0, #c - 1 do d[reg + 1] = new("WMMA", F32, sources, { name, reg, flag, fourth }) end
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

-- Whether index expression x is a multiple of n for every value of its ranges (seen in its
-- structure: sums of multiples, products with a multiple).
local function multiple_of(x, n)
  if n == 1 then return true end
  if x.op == "CONST" then return math.type(x.arg) == "integer" and x.arg % n == 0 end
  if x.op == "ADD" then return multiple_of(x.src[1], n) and multiple_of(x.src[2], n) end
  if x.op == "MUL" then return multiple_of(x.src[1], n) or multiple_of(x.src[2], n) end
  return false
end

-- The operand's LOAD when it reads a buffer straight (LOAD(INDEX(PARAM, i)), no gate), which
-- an asynchronous copy can take; else nil.
local function buffer_load(operand)
  if operand.op ~= "LOAD" or #operand.src ~= 1 then return nil end
  local index = operand.src[1]
  return index.op == "INDEX" and index.src[1].op == "PARAM" and operand or nil
end

-- The asynchronous copy (STORE {"async", chunk}) of `chunk` elements of operand, its ranges
-- mapped by `map`, into local element `at` (an INDEX), taking gate (or nil), when the operand read
-- there is a buffer's element at a provable multiple of the chunk; else nil (the caller copies
-- the chunk element by element).
local function async_chunk(operand, map, chunk, at, gate)
  local load = P.substitute(operand, map)
  if not (buffer_load(load) and multiple_of(load.src[1].src[2], chunk)) then return nil end
  if gate then load = new("LOAD", load.dtype, { load.src[1], gate }) end
  return new("STORE", VOID, { at, load, gate }, { "async", chunk })
end

-- copy_stage(into, a_tile, b_tile, a_base, b_base, k_base, gate, k_wrapped) for a block of
-- block_m x block_n staged `depth` deep: appends to `into` the copies of the block's A slice
-- (block_m x depth) and B slice (depth x block_n) of the stage starting at K element k_base
-- into the tiles at offsets a_base, b_base (nil: 0); gated: k_wrapped instead of k_base where a
-- copy takes no gate. copy_slice(into, tile, base, operand, rows, cols, operand_map, gate)
-- copies one slice in the loop's layout; operand_map(row, col, wrapped) maps the operand's
-- ranges to a slice element.
local function stage_copier(p, block_m, block_n, depth, copy_slice)
  local found = p.found
  return function(into, a_into, b_into, a_base, b_base, k_base, gate, k_wrapped)
    copy_slice(into, a_into, a_base, found.a, block_m, depth, function(row, col, wrapped)
      local map = tensor_cores.k_map(found, sum { wrapped and k_wrapped or k_base, col })
      map[found.m] = sum { scaled(p.block_row, block_m), row }
      return map
    end, gate)
    copy_slice(into, b_into, b_base, found.b, depth, block_n, function(row, col, wrapped)
      local map = tensor_cores.k_map(found, sum { wrapped and k_wrapped or k_base, row })
      map[found.n] = sum { scaled(p.block_col, block_n), col }
      return map
    end, gate)
  end
end

-- The copies of a pipelined loop over `stages` stages of K (`stage` its range, `depth` deep)
-- through `buffers` buffers of each tile, keeping `ahead` (default buffers - 1; less where the
-- products of a stage still read its buffer after the next barrier) stages of copies in
-- flight: stages 0 .. ahead - 1 are copied into the first buffers before the loop, and stage
-- s + ahead into buffer (s + ahead) % buffers in stage s, after the barrier that opens it, gated
-- off in the last `ahead` stages. Asynchronous copies land at a barrier (docs/design/encodings.md): every
-- barrier closes a group of them (the copies of one stage) and leaves the newest ahead - 1
-- groups in flight (its arg), so the barrier opening stage s lands exactly stage s's group; the
-- prologue's stages are separated by barriers for that count. Two buffers are double
-- buffering: one stage ahead, barriers that land everything. copy_stage(into, a_tile, b_tile,
-- a_base, b_base, k_base, gate, k_wrapped) appends a stage's copies. Returns the barrier opening
-- the stage, issue(after) (the GROUP of the copies issued in the stage, once the nodes of the
-- list `after` are: a caller that issues them after the stage's products makes the products'
-- execution overlap them), and the offsets of this stage's buffers in the A and B tiles.
local function pipeline(copy_stage, a_tile, b_tile, a_size, b_size, stage, stages, depth, buffers, ahead)
  ahead = ahead or buffers - 1
  local in_flight = ahead > 1 and ahead - 1 or nil -- the barriers' arg: copy groups left pending
  local a_in, b_in, copied
  for i = 0, ahead - 1 do
    if i > 0 then -- after the barrier that closes stage i - 1's group
      local closed = new("BARRIER", VOID, { copied }, in_flight)
      a_in = new("AFTER", a_tile.dtype, { a_tile, closed })
      b_in = new("AFTER", b_tile.dtype, { b_tile, closed })
    end
    local first = {}
    copy_stage(first, a_in or a_tile, b_in or b_tile, i > 0 and i * a_size or nil, i > 0 and i * b_size or nil,
      i > 0 and i * depth or nil)
    copied = new("GROUP", VOID, first)
  end
  -- the barrier opening stage s (a source in the loop puts it there): stage s has landed,
  -- and every warp is done with the buffer the next copies overwrite
  local opened = new("BARRIER", VOID, { copied, stage }, in_flight)
  local function issue(after)
    local a_open = new("AFTER", a_tile.dtype, { a_tile, opened, table.unpack(after) })
    local b_open = new("AFTER", b_tile.dtype, { b_tile, opened, table.unpack(after) })
    local following = sum { stage, ahead }
    local into = new("MOD", INDEX, { following, const(buffers) })
    local copies = {}
    copy_stage(copies, a_open, b_open, times(into, a_size), times(into, b_size), times(following, depth),
      new("CMPLT", core.dtype "bool", { stage, const(stages - ahead) }),
      times(new("MOD", INDEX, { following, const(stages) }), depth))
    return new("GROUP", VOID, copies)
  end
  local current = new("MOD", INDEX, { stage, const(buffers) })
  return opened, issue, times(current, a_size), times(current, b_size)
end

-- The loop over stages of K with the operands staged through local memory: per stage, the
-- workgroup's threads copy the block's A slice (BM x depth) and B slice (depth x BN) into
-- local memory in chunks of consecutive elements (16 bytes where the tile allows), thread t
-- taking chunks t, t + threads, ... (neighbouring threads read neighbouring chunks of a row),
-- rows padded by STAGE_PAD (a chunk read straight from a buffer is one asynchronous copy,
-- STORE {"async", n}: CUDA's cp.async, landing at the barrier); a barrier; then for each K-step
-- of the stage every warp reads its fragments from local memory and issues its products,
-- the accumulators carried from one K-step to the next in registers; a second barrier keeps
-- the next stage's copies from overwriting what a slower warp still reads.
-- Pipelined (config.buffers B >= 2: TC 2xxxx is B = 2, double-buffered): B tiles of each
-- operand; stages 0 .. B - 2 are copied before the loop, and stage s + B - 1 into the buffer of
-- stage s - 1 right after the barrier that opens stage s, as asynchronous copies (STORE
-- {"async", n}: CUDA's cp.async) that land B - 1 barriers later, while the warps compute on
-- stage s: one barrier per stage orders it all (pipeline()).
function M.staged_loop(p)
  local found, config, lane, acc_at, init_done = p.found, p.config, p.lane, p.acc_at, p.init_done
  local shape = found.shape
  local regs_a, regs_b, regs_c = shape.regs[1], shape.regs[2], shape.regs[3]
  local block_m, block_n = tensor_cores.block(shape, config)
  local depth = tensor_cores.stage_depth(found, config, p.local_bytes)
  local warp = tensor_cores.WARP
  local threads = tensor_cores.threads(config)
  local lda, ldb = depth + tensor_cores.STAGE_PAD, block_n + tensor_cores.STAGE_PAD
  local a_dtype, b_dtype = found.a.dtype, found.b.dtype
  local buffers = config.buffers or 1
  local a_size, b_size = block_m * lda, depth * ldb
  local a_tile = new("DEFINE_LOCAL", a_dtype, nil, { 0, buffers * a_size })
  local b_tile = new("DEFINE_LOCAL", b_dtype, nil, { 1, buffers * b_size })
  local stages = found.k_size // depth
  local stage = p.range(stages, "reduce")
  local thread = sum { scaled(p.warp_row, config.wn * warp), scaled(p.warp_col, warp), lane }
  -- Each thread copies chunks of `chunk` consecutive elements of a tile row (16 bytes where the
  -- tile allows): thread t takes chunk t, t + threads, ..., so neighbouring threads read
  -- neighbouring chunks. A chunk is one asynchronous copy where its operand allows (below);
  -- else its loads and stores are at consecutive addresses, which a renderer may make one wide
  -- access.
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
  -- The stores copying a rows x cols slice into tile (row stride cols + STAGE_PAD) at element offset `base`
  -- (nil: 0), appended to `into`; operand_map(row, col) maps the operand's ranges to the slice
  -- element's position. A chunk whose operand is read straight from a buffer at a provable
  -- multiple of the chunk is one asynchronous copy (landing at the next barrier: the one that
  -- closes the stage's copies, or double-buffered the one that opens the next stage); otherwise each
  -- element is a STORE. gate: nil, or whether to copy at all (the asynchronous copies take it;
  -- the STOREs copy from operand_map(row, col, true) instead, always in bounds, to no use).
  local function copy_slice(into, tile, base, operand, rows, cols, operand_map, gate)
    local ld = cols + tensor_cores.STAGE_PAD
    local itemsize = operand.dtype.itemsize
    local chunk = chunk_of(rows, cols, itemsize)
    local async = buffer_load(operand) and (chunk * itemsize) % 4 == 0
    for s = 0, rows * cols // (threads * chunk) - 1 do
      local row, col = element(s, 0, cols, chunk)
      local copy = async and async_chunk(operand, operand_map(row, col), chunk,
        new("INDEX", operand.dtype, { tile, sum { base, times(row, ld), col } }), gate)
      if copy then
        into[#into + 1] = copy
      else
        for v = 0, chunk - 1 do
          local row_v, col_v = element(s, v, cols, chunk)
          local at = new("INDEX", operand.dtype, { tile, sum { base, times(row_v, ld), col_v } })
          into[#into + 1] = new("STORE", VOID, { at, P.substitute(operand, operand_map(row_v, col_v, gate ~= nil)) })
        end
      end
    end
  end
  -- both slices of the stage starting at K element k_base into the tiles (at offsets a_base,
  -- b_base), appended to into; gated: k_wrapped instead of k_base where a copy takes no gate
  local copy_stage = stage_copier(p, block_m, block_n, depth, copy_slice)

  local a_seen, b_seen, a_now, b_now
  if buffers >= 2 then
    local opened, issue
    opened, issue, a_now, b_now = pipeline(copy_stage, a_tile, b_tile, a_size, b_size, stage, stages, depth, buffers)
    -- the fragments are read after the copies are issued, so that they overlap the products
    local issued = issue {}
    a_seen = new("AFTER", a_dtype, { a_tile, opened, issued })
    b_seen = new("AFTER", b_dtype, { b_tile, opened, issued })
  else
    local copies = {}
    copy_stage(copies, a_tile, b_tile, nil, nil, scaled(stage, depth))
    local copied = new("BARRIER", VOID, copies)
    a_seen = new("AFTER", a_dtype, { a_tile, copied })
    b_seen = new("AFTER", b_dtype, { b_tile, copied })
  end

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
  -- (CUDA: ldmatrix; docs/design/encodings.md).
  -- origin: the tile's first element, terms (nil for a range left out) + offset
  local function fragment(tile, dtype, operand, terms, offset, ld, regs)
    local row0, col0 = position(shape, operand, lane, 0)
    local loads = {}
    for reg = 0, regs - 1 do
      local drow, dcol = tensor_cores.register_offset(shape, operand, reg)
      local at = sum { terms[1], terms[2], times(row0, ld), col0, offset + drow * ld + dcol }
      loads[reg + 1] = new("LOAD", dtype, { new("INDEX", dtype, { tile, at }) })
    end
    return loads
  end
  for kk = 0, depth // shape.k - 1 do
    local a_frags, b_frags = {}, {}
    for i = 0, config.tm - 1 do
      a_frags[i] = fragment(a_seen, a_dtype, "A", { a_now, scaled(p.warp_row, config.tm * shape.m * lda) },
        i * shape.m * lda + kk * shape.k, lda, regs_a)
    end
    for j = 0, config.tn - 1 do
      b_frags[j] = fragment(b_seen, b_dtype, "B", { b_now, scaled(p.warp_col, config.tn * shape.n) },
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
  if buffers == 1 then updates[#updates + 1] = new("BARRIER", VOID, results) end
  return new("END", VOID, { new("GROUP", VOID, updates), stage })
end

-- (row, col) of the first element of chunk `thread + s*threads` (chunks of 8 elements, in the
-- order of local memory) of a tile `cols` wide laid out in 8 x 8 blocks, row-major blocks of
-- row-major rows: block b holds rows 8*(b // (cols/8)) .., columns 8*(b % (cols/8)) .., and
-- chunk q is row q % 8 of block q // 8. Neighbouring threads fill neighbouring 16 bytes.
-- threads and cols are powers of two, so the division of the chunk's block splits into the
-- thread's part and a constant one.
local function block_chunk(thread, s, threads, cols)
  local along, per_step = cols // 8, threads // 8 -- blocks per block row; blocks the threads fill at once
  local block = thread // const(8) -- in [0, per_step)
  local row_in_block = thread % const(8)
  local block_col, block_row
  if per_step % along == 0 then
    block_col = times(block % const(along), 8)
    block_row = sum { times(block // const(along), 8), s * (per_step // along) * 8 }
  else -- along is a multiple of per_step: the step's blocks sit in one block row
    block_col = sum { times(block, 8), s * per_step % along * 8 }
    block_row = const(s * per_step // along * 8)
  end
  return sum { block_row, row_in_block }, block_col
end

-- The loop over stages of K for a warpgroup configuration (TC 3xxxx): WM x WN warpgroups of 128
-- threads, each computing TM tiles of 64 rows by one of the shape's N columns with WMMAs of a
-- warpgroup shape (docs/design/encodings.md: PTX wgmma, A and B read from local memory by the tensor
-- cores). Per stage the workgroup copies the block's A (BM x depth) and B (depth x BN) slices
-- into local tiles laid out in 8 x 8 blocks (16-byte rows; consecutive threads fill consecutive
-- 16 bytes, one asynchronous copy each where the operand is read straight from a buffer),
-- pipelined through config.buffers buffers as staged_loop's (two: stage s + 1 is copied into
-- the other buffer while the warpgroups compute on stage s; more: below), one barrier per
-- stage. Each K-step of 16 of a stage issues TM WMMAs per warpgroup, chained through their
-- accumulators; the next stage's copies are issued after the stage's WMMAs, while the tensor
-- cores compute them. With 3 or more buffers the
-- WMMAs are "deferred" (docs/design/encodings.md): CUDA waits for a stage's products one stage later, so
-- the tensor cores do not drain at each barrier, and the copies run buffers - 2 stages ahead,
-- into the buffer stage s - 2 read (its products were waited for in stage s - 1, before the
-- barrier that opened stage s).
function M.warpgroup_loop(p)
  local found, config, shape, name, acc_at, init_done = p.found, p.config, p.shape, p.name, p.acc_at, p.init_done
  local regs_c = shape.regs[3]
  local block_m, block_n = tensor_cores.block(shape, config)
  local depth = tensor_cores.stage_depth(found, config, p.local_bytes)
  local threads = tensor_cores.threads(config)
  local a_dtype, b_dtype = found.a.dtype, found.b.dtype
  -- the strides of the tiles' 8 x 8 blocks (WMMA's arg): a block row of A is depth/8 blocks of
  -- 64 elements, one of B block_n/8 blocks
  local strides = { 8 * depth, 64, 8 * block_n, 64 } -- a_rows8, a_k8, b_k8, b_cols8
  local a_size, b_size = block_m * depth, depth * block_n
  local a_tile = new("DEFINE_LOCAL", a_dtype, nil, { 0, config.buffers * a_size })
  local b_tile = new("DEFINE_LOCAL", b_dtype, nil, { 1, config.buffers * b_size })
  local stages = found.k_size // depth
  local stage = p.range(stages, "reduce")
  local warpgroup = tensor_cores.WARPGROUP
  local thread = sum { scaled(p.warp_row, config.wn * warpgroup), scaled(p.warp_col, warpgroup), p.lane }

  -- The stores copying a rows x cols slice into tile at element offset `base` (nil: 0), appended
  -- to `into`, as staged_loop's copy_slice does but into 8 x 8 blocks, chunks of 8 elements.
  local function copy_slice(into, tile, base, operand, rows, cols, operand_map, gate)
    local async = buffer_load(operand) ~= nil
    for s = 0, rows * cols // (threads * 8) - 1 do
      local row, col = block_chunk(thread, s, threads, cols)
      local at = sum { base, times(thread, 8), s * threads * 8 }
      local copy = async and async_chunk(operand, operand_map(row, col), 8, new("INDEX", operand.dtype, { tile, at }),
        gate)
      if copy then
        into[#into + 1] = copy
      else
        for v = 0, 7 do
          local value = P.substitute(operand, operand_map(row, sum { col, v }, gate ~= nil))
          into[#into + 1] = new("STORE", VOID, { new("INDEX", operand.dtype, { tile, sum { at, v } }), value })
        end
      end
    end
  end
  local copy_stage = stage_copier(p, block_m, block_n, depth, copy_slice)

  local deferred = config.buffers >= 3 and "deferred" or nil
  local opened, issue, a_now, b_now = pipeline(copy_stage, a_tile, b_tile, a_size, b_size, stage, stages, depth,
    config.buffers, deferred and config.buffers - 2)
  local current = {} -- current[i][reg + 1]: tile i's accumulator so far in this stage
  local loaded = {}
  for i = 0, config.tm - 1 do
    current[i] = {}
    for reg = 0, regs_c - 1 do
      current[i][reg + 1] = new("LOAD", F32, { acc_at(i, 0, reg, { init_done, stage }) })
      loaded[#loaded + 1] = current[i][reg + 1]
    end
  end
  -- the tiles are read once every accumulator is loaded: the renderer then issues all the
  -- stage's WMMAs back to back (a load between them would wait for the earlier ones)
  local a_seen = new("AFTER", a_dtype, { a_tile, opened, table.unpack(loaded) })
  local b_seen = new("AFTER", b_dtype, { b_tile, opened, table.unpack(loaded) })

  local a_rows8, a_k8, b_k8, b_cols8 = table.unpack(strides)
  for kk = 0, depth // shape.k - 1 do
    -- B's 16 x N slice of this K-step for the warpgroup's columns
    local b_at = sum { b_now, scaled(p.warp_col, shape.n // 8 * b_cols8), kk * 2 * b_k8 }
    local b_index = new("INDEX", b_dtype, { b_seen, b_at })
    for i = 0, config.tm - 1 do
      local a_at = sum { a_now, scaled(p.warp_row, config.tm * 8 * a_rows8), i * 8 * a_rows8 + kk * 2 * a_k8 }
      current[i] = product(name, { new("INDEX", a_dtype, { a_seen, a_at }) }, { b_index }, current[i], strides,
        deferred)
    end
  end
  -- the next stage's copies are issued after the stage's products, so that the tensor cores work
  -- on the products while the threads issue the copies (the renderer's run of wgmmas takes the
  -- copies in: it waits for the products at the stores below). They go into the buffer stage
  -- s - 1 (deferred: s - 2) read: its products were waited for before the barrier that opened
  -- this stage, and a copy into a tile still read would be a race on EMU (a wgmma's reads last
  -- until the next barrier there, a deferred one's until the second)
  local last = {}
  for i = 0, config.tm - 1 do last[#last + 1] = current[i][1] end
  local issued = issue(last)
  -- the accumulators are stored back once the copies and every tile's last product are issued:
  -- the renderer then waits for all the stage's WMMAs at once (a store of one tile between them
  -- would wait early)
  local issued_all = { init_done, stage, issued, table.unpack(last) }
  local updates = {}
  for i = 0, config.tm - 1 do
    for reg = 0, regs_c - 1 do
      updates[#updates + 1] = new("STORE", VOID, { acc_at(i, 0, reg, issued_all), current[i][reg + 1] })
    end
  end
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

  local m, n = found.m, found.n
  local shape, name = tensor_cores.shape_of(found, config)
  name = name or found.name
  local block_m, block_n = tensor_cores.block(shape, config)
  local regs_c = shape.regs[3]
  -- tiles per warp (per warpgroup: TM tiles of 64 rows, one of N columns)
  local tiles_m, tiles_n = config.tm, config.warpgroup and 1 or config.tn
  local next_axis = sink:free_axis_id()
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
  local block_row = optional_range(m:range_size() // block_m, "global")
  local block_col = optional_range(n:range_size() // block_n, "global")
  local warp_row = optional_range(config.wm, "local")
  local warp_col = optional_range(config.wn, "local")
  local lane = range(config.warpgroup and tensor_cores.WARPGROUP or tensor_cores.WARP, "local")
  launch[#launch + 1] = lane

  -- the first row of the warp's tile i (0-based) and the first column of its tile j
  local function tile_row(i)
    return { scaled(block_row, block_m), scaled(warp_row, tiles_m * shape.m), i * shape.m }
  end
  local function tile_col(j)
    return { scaled(block_col, block_n), scaled(warp_col, tiles_n * shape.n), j * shape.n }
  end
  local function plus(terms, x)
    local out = { table.unpack(terms, 1, 3) }
    out[4] = x
    return sum(out)
  end

  local acc = new("DEFINE_REG", F32, nil, { 0, tiles_m * tiles_n * regs_c })
  local function acc_at(i, j, reg, after)
    return new("INDEX", F32, { new("AFTER", F32, { acc, table.unpack(after) }),
      const((i * tiles_n + j) * regs_c + reg) })
  end
  local init = {}
  for i = 0, tiles_m - 1 do
    for j = 0, tiles_n - 1 do
      for reg = 0, regs_c - 1 do
        init[#init + 1] = new("STORE", VOID, { acc_at(i, j, reg, launch), new("CONST", F32, nil, 0.0) })
      end
    end
  end
  local init_done = new("GROUP", VOID, init)

  local loop
  if config.warpgroup then
    loop = M.warpgroup_loop { found = found, config = config, shape = shape, name = name, range = range,
      acc_at = acc_at, init_done = init_done, block_row = block_row, block_col = block_col, warp_row = warp_row,
      warp_col = warp_col, lane = lane, local_bytes = ctx.renderer.gpu.local_bytes }
  elseif config.staged then
    loop = M.staged_loop { found = found, config = config, range = range, acc_at = acc_at, init_done = init_done,
      block_row = block_row, block_col = block_col, warp_row = warp_row, warp_col = warp_col, lane = lane,
      local_bytes = ctx.renderer.gpu.local_bytes }
  else
    loop = M.direct_loop { found = found, config = config, range = range, acc_at = acc_at, init_done = init_done,
      tile_row = tile_row, tile_col = tile_col, plus = plus, lane = lane }
  end

  -- the epilogue at each of the lane's C positions
  local stores = {}
  for i = 0, tiles_m - 1 do
    for j = 0, tiles_n - 1 do
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
