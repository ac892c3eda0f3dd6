-- tcl.heuristics.default — the default heuristic: the opts every kernel gets unless NOOPT,
-- BEAM or another heuristic (TCL_HEURISTICS, tcl.set_heuristic) says otherwise. The API it
-- uses is tcl.heuristics.kernel's.
--
-- Kernels for renderers with workgroups go to tcl.heuristics.gpu. For the CPU, in order:
--  1. Register tile. A reduction whose output has an axis that some read does not use (a
--     matmul's rows: B does not depend on them) gets a tile of accumulators that live in
--     registers through the whole reduction: the unit-stride output axis is upcast by one or
--     two vector widths (the renderer turns those lanes into vector registers), or whole when
--     it is at most 16 long and no vector width divides it, and a reuse axis by as many rows as
--     the remaining registers hold (8, or WIDE_TILE_ROWS = 16 of one vector each with 32
--     registers, 32 of them for a reduction under SWAP_MIN_STEPS steps). A read that is not
--     affine in the vector axis (a stride-2 conv's input gradient) gets rows alone, no lanes.
--     Each value loaded inside the reduction then feeds
--     a whole row or column of the tile instead of one output. No tile where a read steps
--     more than TILE_MAX_READ_STRIDE elements along the vector axis (x W^T, a per-channel
--     sum over (N, C, H, W)): its lanes would be gathered one by one, slower than the plain
--     loop LLVM vectorizes (a CNN train step: 98 -> 70 ms).
--  1b. Dot tile (M.plan_dot_tile). Where step 1 finds no tile because a read steps far along
--     the vector axis (x W^T, attention's q k^T) but every read is contiguous along the reduce
--     axis, of DOT_TILE_MIN_STEPS steps or more: 4 x 4 outputs, each with a vector accumulator
--     of reduce lanes (GPT block train step: those kernels 2-10x faster). A shorter one gets no
--     lanes at all (LLVM's loop is faster than both the tile and UNROLL there).
--  2. Loop order. When the tile's column axis is outermost, the panel of B that one column of
--     tiles reads stays in the L2 cache while every row of tiles passes over it: done for
--     reductions of SWAP_MIN_STEPS steps or more (a first conv layer's 27 steps write more
--     than they read: its output rows are written in order instead).
--  3. Small reductions are unrolled whole (up to 8 steps, 4 when a tile exists, none under a
--     tile of WIDE_TILE_ROWS rows).
--  3b. Cache blocking. A tiled reduction of at least KBLOCK_MIN_BLOCKS blocks of KBLOCK_STEPS
--     steps runs in blocks (KBLOCK): each block's slices of A and B are reused from the cache
--     by every tile before the next block is read (matmul 2048: 1.3-1.8x on this machine).
--     Applied with a register tile of step 1, before its panel groups (2b), which then count
--     one block of each panel.
--  3c. Random bits. An elementwise kernel computing THREEFRY upcasts its last output axis by a
--     vector of 32-bit lanes, so Threefry runs on vector lanes (LLVM leaves it scalar).
--  3d. Row sums and elementwise kernels in vector lanes (M.unroll_row_reduction,
--     M.upcast_elementwise): two vectors of lanes along a contiguous reduce axis or last
--     output axis, for the kernels without a tile (softmax, layernorm, GELU). A reduction that
--     reads quantized blocks through divisions is unrolled by the block size instead, tiled or
--     not (M.unroll_block_reads, BLOCK_LANES).
--  4. Threads. The outermost output axis that splits evenly is split into parts for the
--     CPU pool, when the kernel does enough work to pay for waking the threads.

local M = {}
local upcast_random_bits, row_steps -- defined below

-- Below this many steps of the innermost body, a kernel runs on one thread: waking the pool
-- costs about 100 µs on a quiet machine.
M.THREAD_MIN_WORK = 1 << 18
--- Cache blocking of a tiled reduction: blocks of this many steps, when there are at least
-- KBLOCK_MIN_BLOCKS of them (measured: blocks of 512 speed up matmul 2048 by 1.3-1.8x and
-- leave 1024 as it was; 256 is slower).
M.KBLOCK_STEPS = 512
--- A register tile's vector axis may step reads by at most this many elements per lane
-- (a conv of stride 2 reads every other element: the same cache lines).
M.TILE_MAX_READ_STRIDE = 4
M.KBLOCK_MIN_BLOCKS = 4
--- A tile of one vector per row takes this many rows where the registers hold them (32 vector
-- registers: AVX-512): each value a read loads inside the reduction (a conv's input, gathered
-- with its padding's lane masks or every other element at stride 2) feeds twice the FMAs of
-- an 8-row tile (conv2d 8x32->64 3x3 56x56 without the unroll below: 1.5x at 1 thread, 1.7x at 2).
M.WIDE_TILE_ROWS = 16
--- A register tile's vector axis that no vector divides is padded to whole vectors when the
-- padding is at most this fraction of the padded work (conv2d's 28 columns: 32, 12.5 %).
M.MAX_PAD_WASTE = 0.25
--- The bytes of a packed weight's panels that a group of them takes (step 2b: half of a
-- 1-2 MB L2 cache, room left for the rows of A passing over them).
M.PANEL_GROUP_BYTES = 512 << 10
--- A tile's column axis goes outermost (SWAP) only when its reduction has this many steps.
M.SWAP_MIN_STEPS = 256
--- Row sums and elementwise kernels get vector lanes (step 3d) from this many steps of
-- the innermost body on: below, the kernel's cost is its call, not its loop, and the lanes
-- would only cost compile time.
M.LANES_MIN_WORK = 1 << 12

--- Block-quantized reads (step 3d (c)): the last reduce axis, when it is unrolled by this many
-- lanes, makes 1-byte reads through divisions affine (32: the block and sub-block size of the
-- quantized formats).
M.BLOCK_LANES = 32
--- ... and a matrix-vector product over them computes this many outputs together (step 3d (c)).
M.BLOCK_ROWS = 2

-- Whether the kernel's last reduce axis, or output axis `last` (a multiple of BLOCK_LANES), reads
-- 1-byte integers through divisions (its index not affine in the axis: block k // 32, byte
-- k % 32).
local function divided_block_reads(k, last)
  if not last then
    local reduce = k:axes("reduce")
    last = reduce[#reduce]
  end
  if not last or last.size % M.BLOCK_LANES ~= 0 then return false end
  for _, b in ipairs(k:buffers()) do
    if not b.store and b.itemsize == 1 and b.dtype.is_int and b.strides[last.axis] == nil then return true end
  end
  return false
end

-- The register tile: (vector axis, its upcast), (reuse axis, its upcast), and whether the
-- vector axis is first padded to a multiple of its upcast (PADTO), or nil. no_pad: without.
local function plan_tile(k, no_pad)
  local caps = k.caps
  local reduce = k:axes("reduce")
  if #reduce == 0 then return nil end
  -- vec: the unit-stride output axis; reuse: an axis some read uses vec but not it
  local vec, reuse, store = k:tile_axes()
  if not vec then return nil end
  local lanes = math.max(1, (caps.vector_bytes or 4) // math.max(1, store.itemsize))
  -- the vector axis's lanes would be gathered where a read steps far along it (x W^T reads W
  -- across rows, a per-channel sum over (N, C, H, W) reads channels H*W apart): no tile then
  local affine = true
  for _, b in ipairs(k:buffers()) do
    local stride = b.strides[vec.axis]
    if not b.store and stride and math.abs(stride) > M.TILE_MAX_READ_STRIDE then return nil, "strided" end
    if not b.store and stride == nil then affine = false end
  end
  -- a read not affine in the vector axis (a stride-2 conv's input gradient reads dy at
  -- (w + 1 - kw) / 2, through divisions and remainders) would compute its index in vector lanes
  -- of 64-bit integers, whose divisions LLVM does lane by lane: a tile of rows alone then, the
  -- index computed once per step for all of them (that gradient: 2.6x faster than 8 lanes x 8
  -- rows, 10-15x faster than no tile)
  if not affine then
    -- (at most WIDE_TILE_ROWS over block-quantized reads: 32 rows times their BLOCK_LANES
    -- unrolled copies are past the lane limit, and the reads would divide at every step)
    local widest = divided_block_reads(k) and M.WIDE_TILE_ROWS or 2 * M.WIDE_TILE_ROWS
    for _, r in ipairs { widest, M.WIDE_TILE_ROWS, 8, 6, 4, 3, 2 } do
      if reuse.size % r == 0 then return vec, 1, reuse, r end
    end
    return nil
  end
  local vec_amount, padded
  for _, v in ipairs { 2 * lanes, lanes } do
    if v <= 32 and vec.size % v == 0 then vec_amount = v break end -- 32: two UPCASTs of 16
  end
  -- a width no vector divides (a conv's 28 or 56 columns) is padded to whole vectors when that
  -- adds at most MAX_PAD_WASTE of the work (the padding's lanes are gated off): partial
  -- vectors would run every FMA at a fraction of the lanes (28 columns: 4 of 16)
  if not vec_amount and not no_pad and lanes > 1 and vec.size > 16 then
    local whole = (vec.size + lanes - 1) // lanes * lanes
    if whole - vec.size <= M.MAX_PAD_WASTE * whole then vec_amount, padded = lanes, true end
  end
  for _, v in ipairs { 8, 4 } do
    if not vec_amount and vec.size % v == 0 then vec_amount = v end
  end
  -- a narrow output (a classifier's 10 columns) is one vector whole: left to LLVM's loop
  -- vectorizer, its short loop costs more to compile than to run
  if not vec_amount and vec.size <= 16 then vec_amount = vec.size end
  if not vec_amount then return nil end
  local registers = caps.vector_registers or 16
  local vectors = math.max(1, vec_amount // lanes)
  local rows_max = math.max(1, (registers - 4) // vectors)
  local rows
  -- a short reduction (a first conv layer: 3 x 7 x 7 steps, its input gathered at stride 2)
  -- spends its time on the loads each step: twice the rows for each, past the registers (conv2d
  -- 3 -> 64 7x7 stride 2, 8x224x224: 1.6x faster than 16 rows, 2.3-2.8x than 8)
  local steps = 1
  for _, r in ipairs(reduce) do steps = steps * r.size end
  if vectors == 1 and rows_max >= M.WIDE_TILE_ROWS and steps < M.SWAP_MIN_STEPS
    and reuse.size % (2 * M.WIDE_TILE_ROWS) == 0 then
    rows = 2 * M.WIDE_TILE_ROWS
  end
  for _, r in ipairs { M.WIDE_TILE_ROWS, 8, 6, 4, 3, 2 } do
    if rows then break end
    if r <= rows_max and reuse.size % r == 0 then rows = r end
  end
  if not rows then return nil end
  return vec, vec_amount, reuse, rows, padded
end

--- 1b. Dot tile. A matmul whose second operand is read across its rows (x W^T: the output's
-- unit-stride axis steps W by a whole row, so step 1 gives no tile) reads both operands
-- contiguously along the reduce axis instead: rows x cols of outputs (upcast, DOT_TILE rows and
-- columns) each keep a vector accumulator of reduce lanes (UNROLL the reduce axis by one vector),
-- added up once after the reduction. Each step loads rows + cols vectors for rows x cols FMAs (4 x
-- 4: 8 loads, 16 FMAs), where the plain loop loads two vectors for one. Axes: the column axis is
-- the store's unit-stride one, the row axis one the second operand broadcasts over. Returns
-- (cols axis, cols, rows axis, rows, reduce lanes) or nil.
M.DOT_TILE = 4
M.DOT_TILE_MIN_STEPS = 256
function M.plan_dot_tile(k)
  local reduce = k:axes("reduce")
  if #reduce ~= 1 then return nil end
  local vec, reuse, store = k:tile_axes()
  if not vec then return nil end
  local widest = store.itemsize
  for _, b in ipairs(k:buffers()) do
    if not b.store then
      local s = b.strides[reduce[1].axis]
      if s ~= nil and s ~= 0 and s ~= 1 then return nil end
      widest = math.max(widest, b.itemsize)
    end
  end
  local bytes = k.caps.vector_bytes or 0
  if bytes < 16 then return nil end
  local lanes = math.max(4, bytes // widest)
  if lanes > 16 or reduce[1].size % lanes ~= 0 then return nil end
  -- a short reduction (attention's q k^T over 64 head dims) spends the tile's time on the
  -- horizontal sums of its accumulators: LLVM's own loop is faster there (1 thread, 32 x 128 x 128
  -- x 64: 40-55 GFLOPS against 23-26 tiled, 23 with UNROLL(1,16); at 128 steps both ~43; at 256
  -- the tile 69 against 27-43)
  if reduce[1].size < M.DOT_TILE_MIN_STEPS then return nil, "short" end
  local registers = k.caps.vector_registers or 16
  local function fit(size, limit)
    for _, n in ipairs { M.DOT_TILE, 3, 2 } do
      if n <= limit and size % n == 0 then return n end
    end
    return 1
  end
  local cols = fit(vec.size, M.DOT_TILE)
  -- accumulators, one vector of lanes each, plus one loaded vector per row and column
  local rows = fit(reuse.size, math.max(1, (registers - cols) // (cols + 1)))
  if rows * cols < 4 then return nil end
  return vec, cols, reuse, rows, lanes
end

local function upcast(k, axis, amount)
  -- UPCAST takes at most 16 at a time: two steps for 32
  if amount > 16 and amount % 16 == 0 then
    k:apply("UPCAST", axis, 16)
    return k:apply("UPCAST", axis, amount // 16)
  end
  return k:apply("UPCAST", axis, amount)
end

-- The axis number of the output range at `position` among the output ranges (opts renumber
-- the axes, but only upcasts were applied, which add no output ranges).
local function axis_number(k, position)
  local outs = k:axes("global", "loop")
  return outs[position] and outs[position].axis
end

-- Whether the kernel computes random bits (THREEFRY).
local function has_threefry(k)
  for _, u in ipairs(k:graph():toposort()) do
    if u.op == "THREEFRY" then return true end
  end
  return false
end

--- Random bits in vector lanes: an elementwise kernel computing THREEFRY upcasts its last
-- output axis by a vector of 32-bit lanes, which the renderer turns into vector code. LLVM's
-- loop vectorizer leaves Threefry's 64-bit mix scalar (Tensor.rand(4096, 4096): 3-4x slower).
upcast_random_bits = function(k)
  if not has_threefry(k) then return end
  local outs = k:axes("global", "loop")
  local last = outs[#outs]
  if not last then return end
  local lanes = math.max(4, (k.caps.vector_bytes or 16) // 4)
  for _, v in ipairs { lanes, 8, 4 } do
    if v <= 16 and last.size % v == 0 and k:try_apply("UPCAST", last.axis, v) then return true end
  end
  return true
end

-- Two vectors of lanes of `itemsize` bytes, at most 16 lanes (float32: two 256-bit vectors,
-- or one 512-bit vector with AVX-512), or one vector where two do not divide `size`; nil
-- where the renderer has no vector registers (EMU: lanes would only change the order of its
-- sums) or neither divides.
local function lanes_for(k, size, itemsize)
  local bytes = k.caps.vector_bytes or 0
  if bytes < 16 then return nil end
  local lanes = math.max(4, bytes // itemsize)
  for _, v in ipairs { 2 * lanes, lanes } do
    if v <= 16 and size % v == 0 then return v end
  end
  return nil
end

-- Whether every access moves by 0 or 1 element per step of `axis` (broadcast or contiguous),
-- the store by 1 when `store_unit`; and the widest itemsize accessed.
local function contiguous_along(k, axis, store_unit)
  local widest = 1
  for _, b in ipairs(k:buffers()) do
    local s = b.strides[axis]
    if s ~= 0 and s ~= 1 then return false end
    if b.store and store_unit and s ~= 1 then return false end
    widest = math.max(widest, b.itemsize)
  end
  return true, widest
end

--- 3d (a). Row sums in vector lanes. A kernel with one reduce axis, a sum (after the steps
-- above: no tile, not unrolled whole), that every access steps by 1 or 0 (softmax's row sum
-- of exp(x - max), layernorm's mean and variance) is unrolled by two vectors of lanes:
-- UNROLL(reduce, 16) for float32. The body runs as vector code with a vector accumulator, one
-- partial sum per lane, added up at the end of the row (softmax's sum of exp: 1.45-1.56 ms
-- against 2.06-2.24 ms on one thread, where LLVM vectorized the loop itself, in 256-bit
-- vectors on this AVX-512 machine; explicit 16-lane vectors take 512-bit ones). The CPU
-- renderer lets LLVM reorder a reduction's additions already, so the order of the sum was no
-- contract; EMU (no vector registers) is left alone. Not for MAX: llvm.maximum on a single
-- vector accumulator is a longer chain than LLVM's own vectorized loop (row max 0.92 -> 1.15
-- ms).
function M.unroll_row_reduction(k)
  local reduce = k:axes("reduce")
  if #reduce ~= 1 or #k:axes("unroll", "upcast") > 0 or k:work() < M.LANES_MIN_WORK then return false end
  for _, op in ipairs(k:reduce_ops()) do
    if op ~= "ADD" then return false end
  end
  local ok, widest = contiguous_along(k, reduce[1].axis, false)
  if not ok then return false end
  local amount = lanes_for(k, reduce[1].size, widest)
  return amount ~= nil and k:try_apply("UNROLL", 1, amount)
end

--- 3d (c). Block-quantized reads (tcl.api.gguf's weights dequantized inside a product): a
-- reduction whose last reduce axis reads 1-byte data through divisions (value k of a row is
-- byte k % 32 of block k // 32, its scale in the block's header) is unrolled by BLOCK_LANES
-- (32, the formats' block and sub-block size) when that divides it. Each unrolled copy then has
-- a constant remainder, so the division becomes the loop's index and the reads affine: the
-- block's bytes are contiguous lanes and its scale one load per step. Without it every step
-- divides and gathers as scalar code: x @ dequant(W) for K = N = 1024, 2 threads, one DEBUG=2
-- run each: one row (Q8_0 / Q4_0 / Q4_K) 1.24 / 3.74 / 9.94 ms -> 0.19 / 0.17 / 0.38 ms; eight
-- rows under a tile of rows 3.5 / 4.3 / 6.0 -> 0.36 / 0.34 / 0.48 ms (16 lanes: 0.44 / 0.41 /
-- 0.90). A tile over such reads takes at most WIDE_TILE_ROWS rows (32 rows times 32 copies
-- are past the lane limit: the unroll was refused and 32 rows took 15-37 ms). Without a tile
-- (a matrix-vector product), BLOCK_ROWS (2) output elements are computed together: two
-- independent chains of vector FMAs (1x768 @ 768x3072, 1 thread: Q8_0 / Q4_0 0.293 / 0.388 ->
-- 0.274 / 0.362 ms; 4 rows gained no more).
function M.unroll_block_reads(k, rows)
  if not (divided_block_reads(k) and k:try_apply("UNROLL", #k:axes("reduce"), M.BLOCK_LANES)) then return false end
  local outs = k:axes("global", "loop")
  local last = outs[#outs]
  if rows and last and last.size % rows == 0 then k:try_apply("UPCAST", last.axis, rows) end
  return true
end

--- 3d (b). Elementwise kernels in vector lanes: the last output axis, when every access
-- steps along it by 1 (the store) or 0 (a broadcast row statistic), is upcast by two vectors
-- of lanes, so the body runs as vector code with two independent chains (softmax's
-- exp(x - max) / sum, GELU: 21.2 against 26.8 ms on 16M, one thread, min of 25 runs on a
-- busy machine): no gathers, and no work left to LLVM's loop vectorizer (256-bit vectors).
-- The same for a reduction over leading axes whose rows are not contiguous but whose output
-- columns are (a bias or layernorm weight gradient, the sum of dy over the tokens): each lane
-- sums one column (GPT block step, 1 thread: its bias and layernorm gradients 11.6 -> 1.9 ms).
function M.upcast_elementwise(k)
  local outs = k:axes("global", "loop")
  local last = outs[#outs]
  if not last or k:work() < M.LANES_MIN_WORK then return false end
  local ok, widest = contiguous_along(k, last.axis, true)
  if not ok then
    -- a dequantization stored by itself (tcl.api.gguf's blocks: step 3d (c)): BLOCK_LANES
    -- lanes make its divided reads affine, as in a product (UPCAST takes at most 16: two).
    -- Q8_0 / Q4_0 / Q4_K, 1M values, 1 thread: 3.2 / 9.5 / 3.1 ms -> 0.31 / 0.29 / 0.25 ms.
    if #k:axes("reduce") == 0 and divided_block_reads(k, last) and k:try_apply("UPCAST", last.axis, 16) then
      local now = k:axes("global", "loop")
      k:try_apply("UPCAST", now[#now].axis, M.BLOCK_LANES // 16)
      return true
    end
    return false
  end
  local amount = lanes_for(k, last.size, widest)
  return amount ~= nil and k:try_apply("UPCAST", last.axis, amount)
end

--- 3b (2). A tiled reduction along the operands' outer axis (a weight gradient x^T @ dy sums
-- over tokens, rows of both reads) runs in blocks of about STRIDED_KBLOCK_STEPS steps: each step
-- reads a new row of both operands, so without blocks every column of tiles reads the whole of
-- them from memory again (GPT block's d x 4d weight gradients, 1 thread: 39 -> 61-64 GFLOPS).
-- Returns the KBLOCK amount for the outermost reduce axis, or nil; decided before any opt
-- (kernel:buffers()' strides are those of the kernel's first axes).
M.STRIDED_KBLOCK_STEPS = 256
function M.plan_strided_kblock(k)
  local reduce = k:axes("reduce")
  if #reduce == 0 or #reduce > 2 then return nil end
  local inner, outer = reduce[#reduce], reduce[1]
  local far = false
  for _, b in ipairs(k:buffers()) do
    if not b.store then
      local s = b.strides[inner.axis]
      if s == nil or s == 1 or s == -1 then return nil end
      far = far or s ~= 0
    end
  end
  if not far then return nil end
  local per = #reduce == 1 and M.STRIDED_KBLOCK_STEPS or math.max(1, M.STRIDED_KBLOCK_STEPS // inner.size)
  if outer.size % per ~= 0 or outer.size // per < 2 then return nil end
  return per
end

--- Whether k is a row-fused kernel (tcl.schedule.realize_points, "Row fusion"): it has
-- reductions, and either none of them uses its last output axis, which the store steps by 1
-- (the reductions run once per row, then the elementwise pass over the row: softmax,
-- layernorm), or one reduction's value holds another (a row's reductions in sequence with one
-- result per row: logsumexp). Returns the map reduce range node -> the op of its REDUCE and
-- whether the last output axis is the row's store loop; or nil.
local function row_fused(k)
  local outs, op_of, reduces = {}, {}, {}
  for _, r in ipairs(k._k:ranges()) do
    if r.type == "global" or r.type == "loop" then outs[#outs + 1] = r end
  end
  for _, u in ipairs(k:graph():toposort()) do
    if u.op == "REDUCE" then
      reduces[#reduces + 1] = u
      for i = 2, #u.src do op_of[u.src[i]] = type(u.arg) == "table" and u.arg[1] or u.arg end
    end
  end
  if #reduces == 0 or #outs == 0 then return nil end
  local last, per_row = outs[#outs], true
  for _, u in ipairs(reduces) do
    -- the last output range in a reduction's cone (an output range is never one a REDUCE closes)
    for _, v in ipairs(u:toposort()) do
      if v == last.range then per_row = false end -- a reduction per output element
    end
  end
  if per_row then
    for _, b in ipairs(k:buffers()) do
      if b.store then
        if b.strides[last.axis] ~= 1 then return nil end
        return op_of, true
      end
    end
    return nil
  end
  if #reduces < 2 then return nil end
  for _, u in ipairs(reduces) do
    for _, v in ipairs(u.src[1]:toposort()) do
      if v.op == "REDUCE" then return op_of end -- nested: a reduction in sequence after another
    end
  end
  return nil
end

--- The steps of one pass over every row of a row-fused kernel (its work counts the passes
-- as if nested): the output's elements when the last output axis is the row's store loop,
-- else (one element per row) the rows times the longest reduction.
row_steps = function(k, store_loop)
  if store_loop then return k:output_size() end
  local longest = 1
  for _, r in ipairs(k:axes("reduce")) do longest = math.max(longest, r.size) end
  return k:output_size() * longest
end

--- 3e. A row-fused kernel (softmax, layernorm: the row's reductions, then its elementwise
-- pass, over a row held in cache) in vector lanes: the last output axis, the row's store
-- loop, upcast by two vectors of lanes (as 3d (b)), and each reduction over a contiguous row
-- unrolled by them, one vector accumulator each, a MAX too: in a kernel of several loops
-- LLVM's own vectorizer left the row max scalar (softmax 4096 x 1024, one thread: 27 ms
-- against 5.7). The lanes of these loops never meet in one node, so they do not multiply
-- (src/opt's lane limit counts the lanes one node uses). Threads split the rows (step 4).
--- The vectors of lanes a row-fused MAX or MIN reduction is unrolled by (step 3e), up to 64
-- lanes (the most the CPU's renderer keeps as one vector range: LLVM splits it into registers).
M.MAX_CHAINS = 2

function M.vectorize_rows(k, op_of, store_loop)
  if row_steps(k, store_loop) < M.LANES_MIN_WORK then return end
  local outs = k:axes("global", "loop")
  local last = outs[#outs]
  local ok, widest, amount
  if store_loop then
    ok, widest = contiguous_along(k, last.axis, true)
    amount = ok and lanes_for(k, last.size, widest)
    if amount then k:try_apply("UPCAST", last.axis, amount) end
  end
  -- UNROLL counts the reduce ranges; an unrolled one keeps its position (its outer part)
  local position = 0
  for _, r in ipairs(k._k:ranges()) do
    if r.type == "reduce" then
      position = position + 1
      ok, widest = contiguous_along(k, r.axis, false)
      amount = ok and op_of[r.range] and lanes_for(k, r.size, widest)
      -- a MAX (MIN) accumulates in a chain of several instructions (NaN-propagating maximum: six
      -- on x86), latency-bound with one vector: MAX_CHAINS vectors make independent chains
      if amount and (op_of[r.range] == "MAX" or op_of[r.range] == "MIN")
        and amount * M.MAX_CHAINS <= 32 and r.size % (amount * M.MAX_CHAINS) == 0 then
        amount = amount * M.MAX_CHAINS
      end
      if amount then k:try_apply("UNROLL", position, amount) end
    end
  end
end

function M.optimize(k)
  -- renderers with workgroups (GPUs) have a heuristic of their own
  if k.caps.has_local then return require("tcl.heuristics.gpu")(k) end
  local op_of, store_loop = row_fused(k)
  if op_of then
    local steps = row_steps(k, store_loop) * (#k:axes("reduce") + 1) -- before the opts split axes
    M.vectorize_rows(k, op_of, store_loop)
    if k.caps.has_threads and (k.caps.threads or 1) > 1 and steps >= M.THREAD_MIN_WORK then
      M.split_threads(k, k.caps.threads)
    end
    return
  end
  local grouped, blocked = false, false
  local strided_kblock = M.plan_strided_kblock(k)
  local vec, vec_amount, reuse, rows, padded = plan_tile(k)
  if padded and not k:try_apply("PADTO", vec.axis, vec_amount) then
    vec, vec_amount, reuse, rows = plan_tile(k, true)
  end
  local tiled, wide = false, rows and rows >= M.WIDE_TILE_ROWS
  local plain = false -- left to LLVM's loop vectorizer (a short dot product)
  if vec == nil and reuse == nil and vec_amount == "strided" then
    local dvec, cols, dreuse, drows, lanes = M.plan_dot_tile(k)
    plain = cols == "short"
    if dvec then
      local outs = k:axes("global", "loop")
      local reuse_pos
      for i, r in ipairs(outs) do
        if r.axis == dreuse.axis then reuse_pos = i end
      end
      if cols > 1 then k:apply("UPCAST", dvec.axis, cols) end
      if drows > 1 then k:apply("UPCAST", axis_number(k, reuse_pos), drows) end
      k:apply("UNROLL", 1, lanes)
      tiled, vec = true, nil
    end
  end
  if vec then
    -- positions among the output axes stay put while only upcasts are applied
    local outs = k:axes("global", "loop")
    local vec_pos, reuse_pos
    for i, r in ipairs(outs) do
      if r.axis == vec.axis then vec_pos = i end
      if r.axis == reuse.axis then reuse_pos = i end
    end
    if vec_amount > 1 then upcast(k, vec.axis, vec_amount) end
    upcast(k, axis_number(k, reuse_pos), rows)
    local steps = 1
    for _, r in ipairs(k:axes("reduce")) do steps = steps * r.size end
    -- the cache blocks (3b) first where they apply: a packed weight's panel groups hold one
    -- block of each panel then
    local block = M.kblock_steps(k, steps)
    blocked = block ~= nil and k:try_apply("KBLOCK", 1, block) -- refused where the output cannot hold partial sums
    grouped = M.group_panels(k, outs, vec_pos, reuse_pos, vec.size, rows, steps, blocked and block or nil)
    -- the column axis outermost: the panel of the reused read stays in cache; not for a short
    -- reduction, whose tiles write more than they read (a first conv layer, 3 x 3 x 3 steps:
    -- its rows of output, written in order, are then cheaper than the reuse)
    if not grouped and vec_pos > reuse_pos and steps >= M.SWAP_MIN_STEPS and vec_amount > 1 then
      local a, b = axis_number(k, reuse_pos), axis_number(k, vec_pos)
      if a and b then k:try_apply("SWAP", a, b) end
    end
    tiled = true
  end
  local block_unrolled = tiled and M.unroll_block_reads(k)
  local reduce = k:axes("reduce")
  local last = reduce[#reduce]
  -- (not under a tile of 16 rows: the unrolled copies of its loads cost more than the loop,
  -- conv2d 8x32->64 3x3 56x56 with 16 rows: 1.6-1.8x slower unrolled, in noisy runs)
  if last and last.size <= (tiled and 4 or 8) and not wide and not block_unrolled then
    k:try_apply("UNROLL", #reduce, 0) -- refused past the lane limit (a wide upcast already)
  end
  if tiled and not blocked and M.kblock_steps(k, last and last.size or 0) then
    k:try_apply("KBLOCK", 1, M.KBLOCK_STEPS) -- refused where the output cannot hold partial sums
  elseif tiled and not blocked and strided_kblock then
    k:try_apply("KBLOCK", 1, strided_kblock)
  end
  if not tiled and #reduce == 0 then
    if not upcast_random_bits(k) then M.upcast_elementwise(k) end
  elseif not tiled and not plain then
    if not (M.unroll_block_reads(k, M.BLOCK_ROWS) or M.unroll_row_reduction(k)) then
      M.upcast_elementwise(k)
    end
  end
  if not grouped and k.caps.has_threads and (k.caps.threads or 1) > 1 and k:work() >= M.THREAD_MIN_WORK then
    M.split_threads(k, k.caps.threads)
  end
end

--- The steps of one cache block of a tiled reduction over `steps` (step 3b): KBLOCK_STEPS where
-- the kernel has one reduce axis of at least KBLOCK_MIN_BLOCKS such blocks, else nil.
function M.kblock_steps(k, steps)
  if #k:axes("reduce") ~= 1 or steps % M.KBLOCK_STEPS ~= 0 or steps < M.KBLOCK_MIN_BLOCKS * M.KBLOCK_STEPS then
    return nil
  end
  return M.KBLOCK_STEPS
end

--- 2b. Panel groups. A tile over (rows, panels, panel columns) (a matmul with a packed weight,
-- tcl.api.nn: panels of `width` columns, each steps x width contiguous elements) goes over the
-- panels in groups of at most PANEL_GROUP_BYTES, each group outermost (THREAD on the panel
-- axis: its parts run in order on one thread, or on the pool's threads), so a group stays in the
-- L2 cache while every row of tiles passes over it (matmul 1024, 1 thread: 94 -> 159 GFLOPS).
-- A reduction run in cache blocks (step 3b, block_steps steps each) keeps one block of each
-- panel there at a time: the group's bytes count those (matmul 2048: 8 panels per group
-- instead of 2, so A is read from memory a quarter as often).
-- Returns whether it applied.
function M.group_panels(k, outs, vec_pos, reuse_pos, width, rows, steps, block_steps)
  -- (rows, panels, panel columns): the reuse axis first, the vector axis last
  if #outs ~= 3 or reuse_pos ~= 1 or vec_pos ~= 3 or steps < M.SWAP_MIN_STEPS or not k.caps.has_threads then
    return false
  end
  local panel_pos = 2
  local itemsize = 1
  for _, b in ipairs(k:buffers()) do itemsize = math.max(itemsize, b.itemsize) end
  local panels = outs[panel_pos].size
  local per_group = 1
  for c = panels, 1, -1 do
    if panels % c == 0 and c * (block_steps or steps) * width * itemsize <= M.PANEL_GROUP_BYTES then
      per_group = c
      break
    end
  end
  local parts = panels // per_group
  if parts < 2 then return false end
  -- the panel axis among the output axes the upcasts left: first when the rows were upcast whole
  local axis = axis_number(k, outs[reuse_pos].size > rows and panel_pos or panel_pos - 1)
  return axis ~= nil and k:try_apply("THREAD", axis, parts)
end

--- THREAD on the outermost output axis that a part count (4, 2 or 1 per thread) divides; when
-- none does, the first large axis is padded (PADTO: the extra steps are gated off) to a
-- multiple of 2 parts per thread first.
function M.split_threads(k, t)
  local outputs = k:axes("global", "loop")
  for _, r in ipairs(outputs) do
    for _, n in ipairs { 4 * t, 2 * t, t } do
      if r.size % n == 0 and k:try_apply("THREAD", r.axis, n) then return true end
    end
  end
  for _, r in ipairs(outputs) do
    if r.size >= 16 * t and k:try_apply("PADTO", r.axis, 2 * t) then
      return k:try_apply("THREAD", r.axis, 2 * t)
    end
  end
  return false
end

return M.optimize
