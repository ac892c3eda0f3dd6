-- tcl.schedule.realize_points — the fusion policy: which nodes of a tensor graph are stored
-- in a buffer by a kernel of their own. Layer: Lua scheduler (tcl.schedule plans the kernels).
--
-- A node that is not stored is fused: computed inside each kernel that uses it, as often as
-- that kernel needs it. The policy stores what fusing would compute more than once:
--   * the requested outputs, every CONTIGUOUS and every COPY (clone: never shares a buffer),
--     every ASSIGN (stored into its target's buffer, see tcl.schedule);
--   * a REDUCE_AXIS whose result is broadcast (reached from a growing EXPAND through fused
--     nodes), sits inside another reduction (reached from a REDUCE_AXIS's source), or is
--     needed by several kernels: reductions are never recomputed; and a REDUCE_AXIS that its
--     kernel pads into a larger output, when the loop iterations spent on the padding reach
--     PADDED_REDUCE_WASTE per element (below);
--   * an elementwise node (ALU, CAST, BITCAST) that is broadcast or needed by several
--     kernels, unless recomputing it is cheap (below). If its fused cone holds a reduction
--     it is stored however cheap: storing it instead of the reduction costs no kernel (the
--     reduction moves into its kernel), and its users load one value instead of redoing the
--     elementwise tail (a matmul's bias and activation, a residual sum).
-- Everything else (elementwise chains that one kernel uses without broadcast, and every
-- movement op) is fused.
--
-- Row fusion. On devices where one thread runs a kernel's whole innermost loops (the CPU, EMU:
-- ROW_FUSE_DEVICES), a broadcast REDUCE_AXIS, or a broadcast elementwise node of a
-- reduction's output shape, is fused after all when it is a per-row statistic of the one
-- kernel that uses it: it reduces trailing axes (a row: the reduced elements of one output
-- element), a row holds at most ROW_FUSE_BYTES (32 KB: it stays in the L1 or L2 cache between
-- the passes over it), and every path from it up to that kernel's root goes only through
-- elementwise ops of the input or output shape, EXPANDs from the output shape back to the
-- input shape, REDUCE_AXIS over the same rows (a second reduction in sequence: layernorm's
-- variance over the centered row) and, at the root, a RESHAPE that only drops size-1 axes.
-- The kernel then loops over the rows; in each row the linearizer runs every reduction's loop
-- (its value uses only the row's ranges, so it is hoisted out of the inner loops), then the
-- elementwise pass over the row, which reads the input again from cache: softmax, log_softmax
-- and layernorm are one kernel each (tinygrad: three), logsumexp one (two), and each reads
-- its input from memory once. Not fused: a reduction over leading axes (the rows would be the
-- inner loop, each row redoing it), one that another kernel needs too, one under a reduction
-- over other axes (a matmul's), rows beyond the budget. A row-fused elementwise node is
-- computed once per pass over the row (about twice); one of more than RECOMPUTE_BUDGET / 2 ops
-- is stored instead. GPUs map every output element to a thread of its own, each of which would
-- redo the row's reductions: they keep the split (a row per workgroup would be their form).
--
-- Cheap. For an elementwise node, let ops be the ALU/CAST/BITCAST nodes of its fused cone
-- (what a kernel evaluates to compute one element, down to stored values, buffers and
-- constants), loads the elements that cone reads, and evaluations how many times each
-- element is computed if the node is fused, on average: each kernel using it adds the
-- growth of the movement ops on the way (an EXPAND by n evaluates it n times); elementwise
-- uses in one kernel count once (the kernel builder shares a value needed at the same
-- indices). Recomputing is cheap when either
--   1. ops <= CHEAP_OPS (2) and loads <= 1: a cast, a negation, x * 2 + 1 of one element the
--      kernel would load anyway if the value were stored. That adds no memory traffic and
--      about the work of the load's own address arithmetic, at any number of evaluations;
--   2. ops * (evaluations - 1) <= RECOMPUTE_BUDGET (512), it is no product's operand of more
--      than OPERAND_OPS ops and loads (below, "Operands") and its indices do not divide
--      (below, "Divisions"): the extra work per element is at
--      most what storing the element costs instead. A stored element is written and read
--      back, 8 bytes for float32: the time of 160-240 ALU ops at the compute-to-bandwidth
--      ratio of the machines tcl targets (an H100: 67 TFLOP/s over 3.35 TB/s; a 16-core
--      Zen 4: 2 TFLOP/s over about 70 GB/s), and one more kernel launch, microseconds, which
--      on tensors of a few hundred thousand elements is tens (CPU) to a thousand (H100) ops
--      per element more. 512 is a round figure between those costs, a judgement rather
--      than a measured optimum.
--   A random number (THREEFRY) counts THREEFRY_OPS (64), its rounds of 64-bit arithmetic.
--   A transcendental (EXP2, LOG2, SIN, COS, POW) counts TRANSCENDENTAL_OPS (16), what a
--   CPU spends on its polynomial; a graph function (EXP, SIGMOID, TANH, SILU, SOFTPLUS, ELU)
--   the ops of its decomposition (tcl.patterns.transcendental.weight). Within the budget: a
--   value that two or three kernels use (softmax's exponentials, layernorm's centered input).
--   Over it: the softmax weights at GPT-2's head size 64 (stored: an elementwise kernel
--   evaluates each exponential once, in vector registers, and weights @ values becomes a
--   plain matmul: on the CPU 0.35 ms for the two instead of 4.2 ms recomputing them as
--   scalars inside its tile), GPT-2's layernorm outputs inside its qkv and fc linears (4 ops,
--   evaluated 2304 and 3072 times), GELU of a loaded tensor inside a matmul.
-- Operands. A value broadcast into a reduction of the same kernel (an EXPAND that grows it,
-- then a REDUCE_AXIS: a matmul's or convolution's operand) is evaluated inside the product's
-- innermost loop, where the kernel's own work per evaluation is one multiply-add that the
-- register tile runs in vector lanes (tcl.heuristics.default step 1); a fused cone there runs
-- its ops and its loads as scalar code for each evaluation. Ops are not ALU work beside an
-- element's memory round trip then, but multiples of the product's own work. Such an operand
-- whose ops and loads beyond one number more than OPERAND_OPS (8), evaluated more than once
-- per element, is stored, whatever the budget says: a CNN's first convolution's output
-- gradient, computed through batch norm, ReLU and the 2 x 2 max pool's windows (21 ops on 18
-- loads, evaluated 9 times, once per 3 x 3 tap: 189 ops, within the budget), made its weight
-- gradient 38 ms of a 143 ms train step at 1 thread; stored, the two kernels take 2.4 + 2.7
-- ms. Attention's softmax weights (about 20 ops) are stored before weights @ values at every
-- head size (without row fusion). Still fused: a few ops per operand (layernorm's output, 2
-- ops on 3 loads: (x - mean) * rstd; a bias and ReLU).
-- Dequantization. A quantized weight (tcl.api.gguf: Q8_0, Q4_0, Q4_K... blocks of uint8 with
-- float16 scales) is a float value computed from 1-byte integer loads by casts, masks, shifts
-- (divisions by powers of two), sums and products with its blocks' scales: 12-40 ops on 4-12
-- loads per element, read through divisions (value k of a row is byte k % 32 of block k // 32).
-- Its product x @ dequant(W) evaluates it once per row of x. Stored, a kernel before the
-- product writes a float32 copy of the weight (4 bytes per value, where a Q4_0 block holds
-- 0.56) and the product reads it back; fused, the product reads only the blocks. A cone that
-- reads only 1-byte integer data and constants, through movement ops and elementwise ops that
-- are no transcendental, is fused into the product (past the operand, division and budget
-- rules) while the product evaluates it at most DEQUANT_ROWS (no limit by default) times per element: its
-- "rows", the evaluations of its topmost elementwise node, which its inner nodes take from the
-- nearest elementwise node above them. Inside it, a per-block value (fewer elements than the
-- weight) of more than OPERAND_OPS ops and loads is stored still: Q4_K's 6-bit sub-block scales
-- and mins (14 ops on 5 loads each, read by 32 values), a kernel of 1/32 of the weight's
-- elements; a float16 scale (6 ops on 2 loads) is fused. The same when the weight is stored
-- (more rows): its kernel then reads the scales (Q4_K, K = N = 1024, 512 rows, 1 thread: x @ W
-- 25.0 -> 9.97 ms, the copy's kernel 2.5 ms). The CPU heuristics unroll such a product's
-- reduction by the block size (tcl.heuristics.default, BLOCK_LANES), which makes the
-- divided reads affine. Measured, K = N = 1024, kernel ms fused / stored (bench/quant_bench.lua
-- fusion, median of 31, 1 thread; bench/README.md has the tables): Q8_0 M=8 0.378 / 0.650,
-- M=32 1.27 / 1.73, M=64 2.63 / 3.19; Q4_0 M=8 0.394 / 0.595, M=64 2.91 / 3.12; Q4_K M=8
-- 0.532 / 0.690, M=64 3.32 / 3.58; 2 threads: M=8 2-2.5x faster, M=64 a tie (Q8_0 1.87 /
-- 1.86, Q4_0 2.27 / 2.04, Q4_K 1.39 / 1.99); at 128 and 512 rows the stored copy ties or wins
-- for Q8_0 and Q4_0 (512, 2 threads: Q4_0 8.99 / 6.70): its one dequantization is spread over
-- the rows and the float product is tiled as any matmul (8 x 4 with packed panels; over divided
-- reads the tile takes at most 16 rows). So with DEQUANT_ROWS = 64 a prompt of hundreds of rows
-- stores the copy; the default never does (see DEQUANT_ROWS).
-- Divisions. A RESHAPE that merges axes of a view whose elements are out of order (permuted,
-- broadcast, padded, cut, flipped: a max pool's windows put back in place, a nearest upsample)
-- indexes everything below it through divisions and remainders (h -> h // 2, h % 2). A value
-- with such a cone that more than one evaluation needs is stored however few its ops (cheap
-- rule 1 aside): each kernel recomputing it would run it as scalar code (the divided loads
-- cannot be vector lanes) with its divisions, where stored it is read at affine indices. The
-- CNN's second layer: its max pool's gradient through ReLU (14 ops on 12 loads, three
-- kernels: batch norm's two gradient sums and its input gradient) took 6-7 ms in each of
-- them at 1 thread (about 1 GB/s); stored, 6 ms once and 1-2 ms for each reader (the train
-- step's kernels 97 -> 72 ms).
-- Counting uses rather than distinct nodes, a node shared inside a cone counts at each use:
-- the counts err toward storing. tinygrad decides the same question by structure: a stage is
-- kept if it reads more than 3 buffers or holds a reduction that reads one, so it recomputes
-- GELU (2 buffers, about 30 ops) inside the next matmul's reduction, once per output column.
--
-- How: the facts flow from consumers to sources, so one pass in reverse topological order
-- decides them provisionally (every broadcast or shared node stored: when a node is reached,
-- all its consumers are decided), and one pass in topological order then fuses the cheap
-- elementwise ones (when a node is reached its sources are final, so its cone is known).
-- Each pass visits each edge once. Evaluations come from the first pass, where consumers are
-- still provisional: a consumer fused later multiplies its sources' evaluations, which its
-- own test covers (its ops include theirs).
local core = require "tcl.core"
local env = require "tcl.env"
local devices = require "tcl.devices"
local shape = require "tcl.shape"
local variables = require "tcl.variables"
local is_symbolic = variables.is_symbolic
local transcendental = require "tcl.patterns.transcendental"

local M = {}

--- Extra ALU ops per element that recomputing a value may cost before it is stored instead
-- (the header: about one round trip of the element through memory and a kernel launch).
M.RECOMPUTE_BUDGET = 512
--- Recomputing at most this many ops on at most one loaded element is always cheap.
M.CHEAP_OPS = 2
--- A product's operand (broadcast into a reduction in its kernel: a matmul's or convolution's
-- input) of more than this many ops and loads beyond one is stored when fusing would evaluate
-- it more than once per element (the header, "Operands").
M.OPERAND_OPS = 8
--- A dequantization (see the header, "Dequantization"): an elementwise value whose cone only
-- widens 1-byte integer data (quantized blocks) is fused into the product that uses it, however
-- many its ops, while the product evaluates it at most this many times per element (the rows
-- of x in x @ dequant(W)); beyond, it is decided like any operand. The default fuses every
-- product, so a quantized weight is never stored as floats (issue 37's contract: less memory
-- and traffic). Measured on this machine (2 threads, K = N = 1024): fused wins up to 48 rows,
-- ties at 64 to 128 and loses by up to 25% at 512, so 64 is the setting for speed on long
-- prompts at the cost of a float copy per product. 0 turns the rule off.
M.DEQUANT_ROWS = math.maxinteger
--- What a transcendental (EXP2, LOG2, SIN, COS, POW) counts as: tcl.patterns.transcendental's
-- cost of its polynomial.
M.TRANSCENDENTAL_OPS = transcendental.COST
--- What THREEFRY (a counter-based random number: 20 rounds of 64-bit add, rotate and xor)
-- counts as: dropout's mask, broadcast into the next matmul's weight gradient, was recomputed
-- for every output column (11 ms of a 107 ms CNN train step) when it counted 1.
M.THREEFRY_OPS = 64

--- A reduction whose kernel pads its result to at least PADDED_REDUCE_GROWTH times its size
-- (the pieces of a Tensor.cat, the gradient of a chunk or slice of a product: the packed qkv
-- projection's) is stored when the loop iterations spent on the padding, its reduced length
-- times (growth - 1) per element, reach PADDED_REDUCE_WASTE. Fused, its loop runs for every
-- element of the padded output, the padding included, with gated loads that keep it from being
-- tiled like a matmul: the three gated reductions of an attention layer's q, k and v gradients
-- took 190 of a 254 ms GPT block train step; stored, each is a plain matmul and the join a copy.
M.PADDED_REDUCE_GROWTH = 1.5
M.PADDED_REDUCE_WASTE = 16

--- Kernel size caps. An elementwise or movement node whose fused cone is deeper than
-- MAX_FUSED_DEPTH ops (the longest chain of ALU and movement ops down to loads, a movement op
-- counting 1 for its index arithmetic, transcendentals and random numbers weighted as above),
-- or an elementwise node that loads more than MAX_FUSED_LOADS distinct elements, is stored
-- and its users load it: a chain of 40,000 ops becomes about 80 kernels (the same code,
-- compiled once), a sum of 100 tensors 4 kernels. LLVM's compile time grows faster than
-- linearly with a kernel's one basic block and with its gated loads (a branch each): one
-- kernel over 2,000 padded pieces compiled in 9 s, a 20,000-op chain in 18 s. Tensor.cat
-- joins its pieces in chunks of MAX_FUSED_LOADS for the same reason (tcl.api.movement).
M.MAX_FUSED_DEPTH = 1024
M.MAX_FUSED_LOADS = 32

local ALU = core.groups.ALU
local MOVEMENT = { RESHAPE = true, PERMUTE = true, EXPAND = true, SHRINK = true, FLIP = true, PAD = true }
local COUNT_CAP = 1e12 -- op and load counts saturate (counted by uses, a deep DAG would overflow)

local function elementwise(op) return ALU[op] or op == "CAST" or op == "BITCAST" end

local function grows(expand, in_shape)
  local new = expand.arg
  for i = 1, #new do if new[i] ~= in_shape[i] then return true end end
  return false
end

--- Whether a reshape from in_shape to out_shape merges axes (an output axis spans several input
-- axes, size-1 axes aside): over a view whose elements are not in order, its index is divided
-- back into theirs (h -> h // 2, h % 2).
local function merges(in_shape, out_shape)
  local a, b = {}, {}
  for _, n in ipairs(in_shape) do if n ~= 1 then a[#a + 1] = n end end
  for _, n in ipairs(out_shape) do if n ~= 1 then b[#b + 1] = n end end
  local i, j = 1, 1
  while i <= #a and j <= #b do
    local pb = b[j]
    while a[i] ~= pb do
      if is_symbolic(a[i]) or is_symbolic(pb) then return true end -- sizes unknown: assume so
      if a[i] < pb then return true end -- b[j] spans a[i] and more
      j = j + 1 -- a[i] splits into b[j], b[j + 1], ...
      if j > #b then return false end
      pb = pb * b[j]
    end
    i, j = i + 1, j + 1
  end
  return false
end

--- Whether src[j] is also an earlier source (x * x reads x once).
local function repeated(src, j)
  for k = 1, j - 1 do if src[k] == src[j] then return true end end
  return false
end

local MANY = {} -- "reached from more than one kernel" (a root id otherwise)

--- Row fusion (see the header): a row of at most this many bytes (the reduced elements of one
-- output element of the reduction, in the reduction's input dtype) is reduced inside the kernel
-- that uses the result; 0 turns row fusion off.
M.ROW_FUSE_BYTES = 32768
--- The devices whose kernels may be row-fused: one thread runs a whole row there. A GPU maps
-- every output element to a thread of its own, each of which would redo the row's reduction
-- (EMU too while it emulates one: TCL_EMU_GPU, see M.row_fuse_on).
M.ROW_FUSE_DEVICES = { CPU = true, EMU = true }

--- Whether kernels for device may be row-fused (ROW_FUSE_DEVICES, and EMU not in GPU mode).
function M.row_fuse_on(device)
  device = devices.base(device) -- CPU:2 is a CPU
  if not M.ROW_FUSE_DEVICES[device] then return false end
  return not (device == "EMU" and env.EMU_GPU)
end
--- At most this many fused nodes are walked from one candidate (beyond: it is stored).
local ROW_WALK_LIMIT = 256

local same = shape.equal

--- shp without its size-1 axes.
local function squeezed(shp)
  local out = {}
  for _, n in ipairs(shp) do if n ~= 1 then out[#out + 1] = n end end
  return out
end

--- The row signature of a reduction from in_shape to out_shape (its size-1 axes), or nil when
-- its reduced axes are not the trailing ones or its rows exceed ROW_FUSE_BYTES.
local function row_signature(in_shape, out_shape, itemsize)
  if #in_shape ~= #out_shape then return nil end
  local row, reducing = 1, false
  for i = 1, #in_shape do
    if in_shape[i] ~= out_shape[i] then
      if out_shape[i] ~= 1 then return nil end
      reducing = true
      row = variables.mul(row, in_shape[i])
    elseif reducing and in_shape[i] ~= 1 then
      return nil -- a kept axis inside the reduced ones: the row is not contiguous
    end
  end
  -- (a row of variable length at its largest)
  if not reducing or variables.max(row) * itemsize > M.ROW_FUSE_BYTES then return nil end
  return { input = in_shape, output = out_shape }
end

--- Whether node (a REDUCE_AXIS, or an elementwise node of a reduction's output shape) can be
-- computed per row inside the one kernel that uses it (see the header, "Row fusion"): every
-- path up to that kernel's root keeps to the rows of one signature: elementwise ops on the
-- input or output shape, an EXPAND from the output shape back to the input shape, or a
-- REDUCE_AXIS from the input shape to the output shape. consumers, realize: decide's.
local function row_fusable(node, consumers, realize, sink)
  local sig
  if node.op == "REDUCE_AXIS" then
    sig = row_signature(shape.shared(node.src[1]), shape.shared(node), node.src[1].dtype.itemsize)
    if not sig then return false end
  end
  local seen, count, stack = { [node.id] = true }, 0, { node }
  while #stack > 0 do
    local n = table.remove(stack)
    local n_shape = shape.shared(n)
    for _, c in ipairs(consumers[n.id] or {}) do
      if c == sink then return false end
      local c_op, c_shape = c.op, shape.shared(c)
      if c_op == "EXPAND" or c_op == "REDUCE_AXIS" then
        local in_shape, out_shape = c_shape, n_shape
        if c_op == "REDUCE_AXIS" then in_shape, out_shape = n_shape, c_shape end
        if sig then
          if not (same(sig.input, in_shape) and same(sig.output, out_shape)) then return false end
        else
          sig = row_signature(in_shape, out_shape, node.dtype.itemsize)
          if not sig then return false end
        end
      elseif c_op == "RESHAPE" and realize[c.id] then
        -- the stored result in another shape (logsumexp without keepdim): the kernel's loops
        -- index it alike when only size-1 axes differ
        if not same(squeezed(c_shape), squeezed(n_shape)) then return false end
      elseif not ((elementwise(c_op) or c_op == "DETACH") and same(c_shape, n_shape)) then
        return false
      end
      if not realize[c.id] and not seen[c.id] then
        seen[c.id], count = true, count + 1
        if count > ROW_WALK_LIMIT then return false end
        stack[#stack + 1] = c
      end
    end
  end
  return sig ~= nil
end

-- Load sites, for MAX_FUSED_LOADS: the distinct loads a kernel computing a node would make,
-- as a set of keys (a stored source read by an elementwise node: its id; seen through a
-- movement op or a reduction, which read it at other indices: a key mixed with that node's
-- id), or OVER once there are more than MAX_FUSED_LOADS. Unlike `loads` (counted by use),
-- a value read again at the same indices is one site, as it is one load in the kernel.
-- Sets are never changed once made, so a node with one source may share its source's.
local OVER = setmetatable({}, { __name = "OVER" })
local NONE = { n = 0 }

local function rekey(set, id)
  if set == OVER or set.n == 0 then return set end
  local out = { n = set.n }
  for key in pairs(set) do
    if key ~= "n" then out[key * 6364136223846793005 + id] = true end
  end
  return out
end

--- The load sites of node (sources src) under the current decisions (realize) and its
-- sources' sites.
local function load_sites(node, src, realize, sites)
  local op = node.op
  if op == "BUFFER" then return { n = 1, [node.id] = true } end
  if MOVEMENT[op] or op == "REDUCE_AXIS" then
    local s = src[1]
    return rekey(realize[s.id] and { n = 1, [s.id] = true } or sites[s.id], node.id)
  end
  local out, owned = NONE, false
  for _, s in ipairs(src) do
    local set = realize[s.id] and { n = 1, [s.id] = true } or sites[s.id]
    if set == OVER then return OVER end
    if set.n > 0 then
      if out.n == 0 then
        out = set
      elseif out ~= set then
        if not owned then
          local copy = { n = out.n }
          for key in pairs(out) do if key ~= "n" then copy[key] = true end end
          out, owned = copy, true
        end
        for key in pairs(set) do
          if key ~= "n" and not out[key] then
            out[key], out.n = true, out.n + 1
            if out.n > M.MAX_FUSED_LOADS then return OVER end
          end
        end
      end
    end
  end
  return out
end

--- The set of the realize points' node ids, for the graph of `outputs` in topological
-- `order` (which ends with their SINK, `sink`). opts: row_fuse (false: no row fusion), why (a
-- table filled with each decision in words, by node id: tcl.viz shows them).
function M.decide(order, sink, outputs, opts)
  local row_fuse = M.ROW_FUSE_BYTES > 0 and (opts == nil or opts.row_fuse ~= false)
  -- opts.why (tcl.viz): filled with { [node id] = the decision in words } for the nodes stored,
  -- and for those fused by a rule that could have stored them (row fusion, cheap recomputing)
  -- (nil otherwise: the sentences are made only when asked for, scheduling pays nothing)
  local why = opts and opts.why
  local realize = {}
  for _, out in ipairs(outputs) do
    realize[out.id] = true
    if why then why[out.id] = "stored: an output of the realize" end
  end
  for _, node in ipairs(order) do
    if node.op == "CONTIGUOUS" or node.op == "COPY" or node.op == "ASSIGN" then
      realize[node.id] = true
      if why then why[node.id] = "stored: " .. (node.op == "ASSIGN" and "an assignment stores into its target"
        or node.op == "COPY" and "a copy has a buffer of its own" or "CONTIGUOUS asks for a buffer") end
    end
  end
  -- Consumers of each node (each consumer once, however many of its sources the node is).
  -- Lists grow in node order, so a repeated source of node already ends with node.
  local consumers, numel, sources = {}, {}, {} -- sources[i]: order[i]'s (a table made once)
  for i, node in ipairs(order) do
    -- (the costs of a value of variable size are counted at its largest)
    if node ~= sink then numel[node.id] = shape.max_numel(shape.shared(node)) end
    local src = node.src
    sources[i] = src
    for _, s in ipairs(src) do
      local list = consumers[s.id]
      if not list then list = {}; consumers[s.id] = list end
      if list[#list] ~= node then list[#list + 1] = node end
    end
  end

  -- Dequantization cones (the header, "Dequantization"): nodes computed from 1-byte integer
  -- loads and constants only, through movement ops and plain elementwise ops
  local widens = {}
  for i, node in ipairs(order) do
    if node ~= sink then
      local op, id, ok = node.op, node.id, false
      if op == "BUFFER" or realize[id] then
        ok = node.dtype.is_int and node.dtype.itemsize == 1
      elseif op == "CONST" then
        ok = true
      elseif MOVEMENT[op] or (elementwise(op) and not transcendental.weight(op)) then
        ok = true
        for _, s in ipairs(sources[i]) do
          if not widens[s.id] then ok = false; break end
        end
      end
      widens[id] = ok
    end
  end

  -- Pass 1, reverse topological order: per node, the kernel that computes it (root), whether
  -- it is broadcast in that kernel (expanded), whether it is inside a reduction (in_reduce),
  -- and how many times its elements are evaluated if it is fused (evaluations).
  local root_of, expanded, in_reduce, evaluations, none = {}, {}, {}, {}, {}
  local operand = {} -- broadcast into a reduction in its kernel: a contraction's operand
  local provisional = {} -- elementwise nodes stored unless pass 2 finds them cheap
  local row_fused = {} -- broadcast elementwise nodes fused per row (stored in pass 2 if costly)
  -- a dequantization cone's rows: its topmost elementwise node's evaluations (dequant_rows),
  -- reached from its inner nodes through the cone (rows_above: those of the nearest
  -- elementwise node above, nil when none is)
  local dequant_rows, rows_above, dequant_numel = {}, {}, {} -- and the topmost node's numel
  for i = #order, 1, -1 do
    local node = order[i]
    if node ~= sink then
      local id = node.id
      local root, exp, red, evals, per_kernel, opnd = nil, false, false, 0, nil, false
      local uses = consumers[id] or none
      for _, c in ipairs(uses) do
        if c ~= sink then
          local cid, op = c.id, c.op
          local c_root, c_exp, c_red, c_evals
          if realize[cid] then
            c_root, c_exp, c_red, c_evals = cid, false, false, 1
          else
            c_root, c_exp, c_red, c_evals = root_of[cid], expanded[cid], in_reduce[cid], evaluations[cid]
          end
          if op == "EXPAND" and grows(c, shape.shared(node)) then
            c_exp = true
            -- expanded, then reduced in the same kernel: a product's operand (matmul, conv)
            if not realize[cid] and in_reduce[cid] then opnd = true end
          end
          if not realize[cid] and operand[cid] then opnd = true end
          if op == "REDUCE_AXIS" then c_red = true end
          if root == nil then root = c_root elseif root ~= c_root then root = MANY end
          exp, red = exp or c_exp, red or c_red
          if MOVEMENT[op] then
            if numel[id] > 0 then c_evals = c_evals * numel[cid] / numel[id] end
            evals = evals + c_evals
          elseif #uses > 1 and c_root ~= MANY and (elementwise(op) or op == "DETACH") then
            -- elementwise uses in one kernel read the node at the same indices: once
            per_kernel = per_kernel or {}
            local counted = per_kernel[c_root] or 0
            if c_evals > counted then
              evals, per_kernel[c_root] = evals + c_evals - counted, c_evals
            end
          else
            evals = evals + c_evals
          end
        end
      end
      if not realize[id] then
        local op = node.op
        if op == "REDUCE_AXIS" and (exp or red or root == MANY) then
          if root == MANY or not (row_fuse and row_fusable(node, consumers, realize, sink)) then
            realize[id] = true
            if why then
              why[id] = "stored: a reduction " .. (root == MANY and "that several kernels use" or exp and
                "whose result is broadcast" or "inside another reduction") .. " is never recomputed"
            end
          elseif why then
            why[id] = "fused: a per-row statistic of the one kernel that uses it (row fusion)"
          end
        elseif op == "REDUCE_AXIS" and evals >= M.PADDED_REDUCE_GROWTH
            and (numel[node.src[1].id] / math.max(numel[id], 1)) * (evals - 1) >= M.PADDED_REDUCE_WASTE then
          realize[id] = true -- padded into a larger output (see PADDED_REDUCE_GROWTH)
          if why then why[id] = "stored: a reduction its kernel would pad into a much larger output" end
        elseif (exp or root == MANY) and elementwise(op) then
          if root == MANY or not (row_fuse and exp and row_fusable(node, consumers, realize, sink)) then
            realize[id], provisional[id] = true, true
            if why then
              why[id] = "stored: an elementwise value " .. (root == MANY and "that several kernels use" or
                "that is broadcast") .. ", and recomputing it is not cheap"
            end
          else
            row_fused[id] = true
            if why then
              why[id] = "fused: broadcast, but a per-row value of the one kernel that uses it (row fusion)"
            end
          end
        end
      end
      root_of[id], expanded[id], in_reduce[id], evaluations[id] = root, exp, red, evals
      operand[id] = opnd
      if widens[id] then
        local above, top_numel
        for _, c in ipairs(uses) do
          local cid = c.id
          if c ~= sink and widens[cid] and not (realize[cid] and not provisional[cid]) then
            local r = elementwise(c.op) and dequant_rows[cid] or rows_above[cid]
            if r and (above == nil or r > above) then above, top_numel = r, dequant_numel[cid] end
          end
        end
        rows_above[id], dequant_rows[id] = above, above or evals
        dequant_numel[id] = top_numel or numel[id]
      end
    end
  end

  -- Pass 2, topological order: each node's fused cone (ops, loads, whether it holds a fused
  -- reduction) with its sources' final decisions; the cheap provisional nodes are fused.
  local ops, loads, has_reduce, depth, sites = {}, {}, {}, {}, {}
  local plain, divides = {}, {} -- (Divisions) elements in their source's order; index divisions
  for i, node in ipairs(order) do
    if node ~= sink then
      local id, op, src = node.id, node.op, sources[i]
      local weight = transcendental.weight(op)
      local own = weight and weight.ops or op == "THREEFRY" and M.THREEFRY_OPS or elementwise(op) and 1 or 0
      local own_depth = weight and weight.depth or own
      local n_ops, n_depth = own, 0
      local n_loads, reduce = op == "BUFFER" and 1 or 0, false
      local n_plain, n_div = true, 0
      if op == "REDUCE_AXIS" then
        reduce = true -- matters only if it is fused: its consumers then hold a reduction
        if not realize[src[1].id] then n_depth = depth[src[1].id] end
      else
        for j, s in ipairs(src) do
          if not repeated(src, j) then
            local sid = s.id
            if realize[sid] then
              n_loads = n_loads + 1
            else
              n_ops, n_loads = n_ops + ops[sid], n_loads + loads[sid]
              n_plain, n_div = n_plain and plain[sid], n_div + divides[sid]
              reduce = reduce or has_reduce[sid]
              if depth[sid] > n_depth then n_depth = depth[sid] end
            end
          end
        end
      end
      n_depth = n_depth + (MOVEMENT[op] and 1 or own_depth) -- a movement op: index arithmetic
      if op == "RESHAPE" then
        if not n_plain and merges(shape.shared(src[1]), shape.shared(node)) then n_div = n_div + 1 end
      elseif op == "PAD" or op == "SHRINK" or op == "FLIP" or op == "PERMUTE"
          or op == "EXPAND" and grows(node, shape.shared(src[1])) then
        n_plain = false
      end
      n_div = math.min(n_div, COUNT_CAP)
      if provisional[id] and not reduce then
        local evals = evaluations[id]
        local cheap
        local dequant = widens[id] and (operand[id] or rows_above[id])
        if dequant and numel[id] < dequant_numel[id] and n_ops + n_loads - 1 > M.OPERAND_OPS then
          -- a per-block value of a dequantization (fewer elements than the weight: a sub-block's
          -- scale) that costs more than an operand may: stored, fused or not its weight
          cheap = false
        elseif dequant and dequant_rows[id] <= M.DEQUANT_ROWS then
          cheap = true -- in a dequantization fused into its product
        else
          cheap = (n_ops <= M.CHEAP_OPS and n_loads <= 1)
            or n_ops * (evals - 1) <= M.RECOMPUTE_BUDGET
              and not (operand[id] and evals > 1 and n_ops + n_loads - 1 > M.OPERAND_OPS)
              and not (n_div > 0 and evals > 1)
        end
        if cheap then
          realize[id] = nil
          if why then
            why[id] = string.format("fused: cheap to recompute (%d ops, %d loads, evaluated %.4g times)", n_ops,
              n_loads, evals)
          end
        end
      end
      if row_fused[id] and n_ops > M.RECOMPUTE_BUDGET // 2 then
        realize[id] = true -- evaluated once per pass over the row: about twice
        if why then why[id] = string.format("stored: row fusion would compute its %d ops twice per row", n_ops) end
      end
      local n_sites = load_sites(node, src, realize, sites)
      if not realize[id] and (n_depth > M.MAX_FUSED_DEPTH and (elementwise(op) or MOVEMENT[op])
          or n_sites == OVER and elementwise(op)) then
        realize[id] = true -- a kernel of bounded size: its users load it
        if why then why[id] = "stored: fusing it would make its users' kernels too deep or read too many places" end
      end
      ops[id], loads[id], has_reduce[id] = math.min(n_ops, COUNT_CAP), math.min(n_loads, COUNT_CAP), reduce
      depth[id], sites[id] = n_depth, n_sites
      plain[id], divides[id] = n_plain, n_div
    end
  end
  return realize
end

return M
