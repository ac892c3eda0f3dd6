-- spec/schedule/schedule_models_spec.lua — the fusion policy (lua/tcl/schedule/realize_points.lua) on
-- whole models built with the Tensor API (spec/support/models.lua) and on the small graphs
-- that pin each of its rules.
--
-- Each model is checked three ways:
--   * its kernel count, at most tinygrad's on the same graph;
--   * the recompute guard: the ALU ops the kernels execute on data (tcl.codegen.driver.estimates'
--     value_ops of each kernel's linear program: ops times the trip counts of the loops
--     around them) against the ops the graph itself asks for (per ALU/CAST node the elements
--     it produces, per REDUCE_AXIS its input's elements), in total and per kernel;
--   * its values on EMU at a smaller size with the same schedule structure, against the
--     naive reference (spec/support/reference.lua).
local tcl = require "tcl"
local R = require "spec.support.reference"
local models = require "spec.support.models"
local schedule = require "tcl.schedule"
local realize_points = require "tcl.schedule.realize_points"
local shape = require "tcl.shape"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local estimates = require "tcl.codegen.driver.estimates"

local Tensor = tcl.Tensor
local ALU = tcl.groups.ALU

---------------------------------------------------------------------------------------------
-- counting work

--- The ops one tensor-graph node asks for: the elements an ALU/CAST node produces, the
-- elements a REDUCE_AXIS folds; movement ops, buffers and constants none.
local function node_ops(u)
  if ALU[u.op] or u.op == "CAST" then return shape.numel(shape.shared(u)) end
  if u.op == "REDUCE_AXIS" then return shape.numel(shape.shared(u.src[1])) end
  return 0
end

local function graph_ops(root)
  local n = 0
  for _, u in ipairs(root:toposort()) do n = n + node_ops(u) end
  return n
end

-- EMU's renderer, but keeping the transcendental ops whole: each counts as one op, as in the
-- graph (EMU expands float32 EXP2/LOG2/SIN/COS/POW into polynomials, as the CPU does)
local COUNTING_RENDERER = setmetatable({ lacks = {} }, { __index = lower.backend("EMU").renderer })

--- The value ops a kernel executes: its AST through the pass pipeline for EMU, linearized.
local function executed_ops(kernel)
  local ctx = { name = kernel.name, device = "EMU", renderer = COUNTING_RENDERER }
  return estimates.of(linearize.linearize(lower.run_passes(kernel.ast, ctx))).value_ops
end

--- Per kernel { name, executed, own }: own is the graph ops of the nodes the kernel computes
-- (its root and everything fused below it, down to buffers and other kernels' roots), each
-- once. Also the totals and the graph's ops.
local function work_of(sched, output)
  local roots = {}
  for _, k in ipairs(sched.kernels) do roots[k.root.id] = true end
  local rows, executed = {}, 0
  for i, k in ipairs(sched.kernels) do
    local own, seen, stack = 0, {}, { k.root }
    while #stack > 0 do
      local u = table.remove(stack)
      if not seen[u.id] then
        seen[u.id] = true
        own = own + node_ops(u)
        for _, s in ipairs(u.src) do
          if not roots[s.id] then stack[#stack + 1] = s end
        end
      end
    end
    rows[i] = { name = k.name, executed = executed_ops(k), own = own }
    executed = executed + rows[i].executed
  end
  return { kernels = rows, executed = executed, graph = graph_ops(output) }
end

local function describe_work(work)
  local lines = {}
  for _, r in ipairs(work.kernels) do
    lines[#lines + 1] = string.format("  %-20s executes %13d, computes %13d (%.2fx)", r.name, r.executed, r.own,
      r.executed / math.max(r.own, 1))
  end
  lines[#lines + 1] = string.format("  total executes %d for a graph of %d ops (%.3fx)", work.executed, work.graph,
    work.executed / work.graph)
  return table.concat(lines, "\n")
end

local function names(sched)
  local list = {}
  for i, k in ipairs(sched.kernels) do list[i] = k.name end
  return table.concat(list, ", ")
end

---------------------------------------------------------------------------------------------
-- references

local function ref_of(t) return R.from_nested(t:tolist(), "float32") end

--- GPT-2's block (models.gpt2_layer) in the reference, from the realized inputs p.
local function ref_gpt2(p, sizes)
  local B, T, D, H = sizes.batch, sizes.seq, sizes.d_model, sizes.heads
  local r = {}
  for name, t in pairs(p) do r[name] = ref_of(t) end
  local function ln(x, w, b) return R.binary("add", R.binary("mul", R.layernorm(x), w), b) end
  local qkv = R.linear(ln(r.x, r.ln1_w, r.ln1_b), r.qkv_w, r.qkv_b)
  local heads = {}
  for i = 1, 3 do
    heads[i] = R.transpose(R.reshape(R.narrow(qkv, 3, (i - 1) * D + 1, D), { B, T, H, D // H }), 2, 3)
  end
  local attn = R.scaled_dot_product_attention(heads[1], heads[2], heads[3], nil, true)
  attn = R.reshape(R.transpose(attn, 2, 3), { B, T, D })
  local h = R.binary("add", r.x, R.linear(attn, r.proj_w, r.proj_b))
  local mlp = R.linear(R.unary("gelu", R.linear(ln(h, r.ln2_w, r.ln2_b), r.fc_w, r.fc_b)), r.out_w, r.out_b)
  return R.binary("add", h, mlp)
end

local function ref_mlp(p)
  local r = {}
  for name, t in pairs(p) do r[name] = ref_of(t) end
  local hidden = R.unary("relu", R.linear(r.x, r.w1, r.b1))
  return R.softmax(R.linear(hidden, r.w2, r.b2), -1)
end

local TOL = { atol = 2e-4, rtol = 2e-4 } -- float32 through layernorms and 64-long sums

---------------------------------------------------------------------------------------------

describe("schedule: a GPT-2 small layer (d_model 768, 12 heads, seq 128)", function()
  local out = models.gpt2_layer(Tensor, models.GPT2_SMALL)
  local sched = schedule.create({ out.uop })
  local work -- work_of(sched), lowered once for the two guards
  local function measured()
    work = work or work_of(sched, out.uop)
    return work
  end

  -- tinygrad's 14, and attention's softmax weights stored: recomputing their exponential
  -- (TRANSCENDENTAL_OPS) once per head dim inside weights @ values is over the budget. Row
  -- fusion (realize_points, "Row fusion") makes the two layernorms and the softmax one kernel
  -- each: 9. On the CPU the qkv, fc1 and fc2 weights (128 rows, over 2^20 elements) are packed
  -- in panels (tcl.api.nn._packing): 3 packing kernels, and the bias + GELU and the residual
  -- tails of the packed products stored by kernels of their own: 14.
  it("is at most 15 kernels: tinygrad's 14 and the stored softmax weights (9 row-fused, 14 packed)", function()
    assert.is_true(#sched.kernels <= 15, string.format("%d kernels: %s", #sched.kernels, names(sched)))
    local packs = 0
    for _, k in ipairs(sched.kernels) do
      if k.name:match("^E_%d+_768_32$") or k.name:match("^E_%d+_3072_32$") then packs = packs + 1 end
    end
    assert.are.equal(3, packs, names(sched))
    assert.are.equal(14, #sched.kernels, names(sched))
  end)

  -- 1.1 leaves room for recomputing within RECOMPUTE_BUDGET ops per element (softmax's
  -- exponentials in its max, sum and division kernels), and nothing like what fusing
  -- everything cost: 7.8x (the fc2
  -- kernel recomputed bias + GELU inside its 3072-long loop, the qkv and fc1 kernels the
  -- layernorms, four kernels the residual sum).
  it("executes at most 1.1x the ops its graph asks for", function()
    local w = measured()
    assert.is_true(w.executed <= 1.1 * w.graph, "\n" .. describe_work(w))
    -- and no fewer: a count that missed ops would pass the bound above
    assert.is_true(w.executed >= w.graph, "\n" .. describe_work(w))
  end)

  -- A kernel that recomputes within the budget stays below 3x; fusing everything gave 17x
  -- (fc2), 4.25x, 4x, 3x (qkv) and 2x.
  it("executes at most 3x the ops of the nodes it computes in any kernel", function()
    local w = measured()
    for _, r in ipairs(w.kernels) do
      assert.is_true(r.executed <= 3 * r.own, r.name .. " recomputes too much:\n" .. describe_work(w))
    end
  end)

  -- (the same kernels at head size 16: the row-fused softmax stores the weights at both sizes;
  -- without row fusion the small layer recomputes them inside weights @ values, one kernel fewer)
  it("computes the layer's values (at d_model 64, 4 heads, seq 8, batch 2: 9 kernels)", function()
    local sizes = { batch = 2, seq = 8, d_model = 64, heads = 4, hidden = 256 }
    local small, p = models.gpt2_layer(Tensor, sizes)
    local small_sched = schedule.create({ small.uop })
    assert.are.equal(9, #small_sched.kernels, names(small_sched)) -- weights too small to pack
    local expected = ref_gpt2(p, sizes)
    R.check(small, expected, "GPT-2 layer", { tol = TOL, check_dtype = false })
  end)
end)

describe("schedule: the 784-256-10 MLP forward, batch 128", function()
  -- softmax(relu(x @ w1 + b1) @ w2 + b2): the MLP's forward pass and the softmax over its
  -- 10 classes, as tinygrad's "784-256-10 MLP forward" (5 kernels: the two matmuls with their
  -- bias and activation, and softmax's max, sum and division).
  local out = models.mlp(Tensor, models.MNIST_MLP)
  local sched = schedule.create({ out.uop })

  it("is at most 5 kernels, tinygrad's count", function()
    assert.is_true(#sched.kernels <= 5, string.format("%d kernels: %s", #sched.kernels, names(sched)))
  end)

  it("recomputes nothing (measured 1.000x; 1.011x with the logits recomputed by softmax)", function()
    local work = work_of(sched, out.uop)
    assert.is_true(work.executed <= 1.005 * work.graph, "\n" .. describe_work(work))
  end)

  it("computes the forward pass's values (at 96-32-10, batch 8)", function()
    local small, p = models.mlp(Tensor, { batch = 8, input = 96, hidden = 32, classes = 10 })
    assert.are.equal(#sched.kernels, #schedule.create({ small.uop }).kernels)
    R.check(small, ref_mlp(p), "MLP", { tol = TOL, check_dtype = false })
  end)
end)

---------------------------------------------------------------------------------------------
-- the rules, one graph each (inputs are realized random tensors)

local function rand(...) return Tensor.rand(...):sub(0.5):realize() end

--- Schedules t and asserts the kernel count; then, when a reference tensor is expected,
-- realizes t and checks its values. Returns the schedule and t's graph (before realizing).
local function check(t, count, expected, what)
  local graph = t.uop
  local sched = schedule.create({ graph })
  assert.are.equal(count, #sched.kernels, (what or "") .. ": " .. names(sched))
  if expected then R.check(t, expected, what, { tol = TOL, check_dtype = false }) end
  return sched, graph
end

-- fn() without row fusion: the kernel counts tinygrad makes on the same shapes.
local unfused = require("spec.support.helper").without_row_fusion

describe("fusion policy", function()
  it("keeps an elementwise chain with one consumer and no broadcast in that consumer's kernel", function()
    local x, w, b = rand(6, 20), rand(20, 600), rand(600)
    local y = x:linear(w, b):relu():mul(2)
    check(y, 1, R.binary("mul", R.unary("relu", R.linear(ref_of(x), ref_of(w), ref_of(b))), 2), "relu(x @ w + b) * 2")
  end)

  it("stores an activation that a matmul's reduction would recompute, in the previous matmul's kernel", function()
    local x, w1, b1, w2 = rand(4, 12), rand(12, 16), rand(16), rand(16, 24)
    local y = x:linear(w1, b1):gelu():matmul(w2)
    local sched, graph = check(y, 2, R.matmul(R.unary("gelu", R.linear(ref_of(x), ref_of(w1), ref_of(b1))),
      ref_of(w2)), "gelu(x @ w1 + b1) @ w2")
    -- the second matmul loads the stored activation and the weights, nothing else
    assert.are.equal(3, #sched.kernels[2].buffers)
    local work = work_of(sched, graph)
    assert.is_true(work.executed <= work.graph * 1.01, describe_work(work))
  end)

  it("recomputes a few ops on one loaded element at any broadcast (cheap rule 1)", function()
    local x, w = rand(4, 8), rand(8, 1024)
    -- two ops on x: fused into the 1024-wide matmul
    check(x:mul(2):add(1):matmul(w), 1, R.matmul(R.binary("add", R.binary("mul", ref_of(x), 2), 1), ref_of(w)),
      "(x * 2 + 1) @ w")
    -- three ops: 3 x 1023 extra ops per element is over the budget, stored
    check(x:mul(2):add(1):neg():matmul(w), 2)
    -- two ops on two elements: a load more per evaluation, stored
    check(x:mul(x:exp2()):matmul(w), 2)
  end)

  it("recomputes a value while ops x (evaluations - 1) stays within the budget (cheap rule 2)", function()
    -- layernorm's output is 2 ops ((x - mean) * (1/std), the mean and 1/std stored by the
    -- reductions' kernels): inside x @ w it is evaluated once per output column;
    -- 2 x 256 = 512 fits RECOMPUTE_BUDGET, 2 x 257 does not (without row fusion: with it, the
    -- row-fused layernorm kernel stores its output, which holds the reductions, whatever its use)
    assert.are.equal(512, realize_points.RECOMPUTE_BUDGET)
    local x = rand(3, 16)
    local narrow, wide = rand(16, 257), rand(16, 258)
    unfused(function()
      check(x:layernorm():matmul(narrow), 3, R.matmul(R.layernorm(ref_of(x)), ref_of(narrow)),
        "layernorm(x) @ w (257)")
      check(x:layernorm():matmul(wide), 4, R.matmul(R.layernorm(ref_of(x)), ref_of(wide)), "layernorm(x) @ w (258)")
    end)
    check(x:layernorm():matmul(wide), 2, R.matmul(R.layernorm(ref_of(x)), ref_of(wide)), "row-fused layernorm(x) @ w")
  end)

  it("stores a product's operand of more than OPERAND_OPS ops and extra loads that it evaluates more than once",
    function()
    assert.are.equal(8, realize_points.OPERAND_OPS)
    local a, b, w = rand(4, 8), rand(4, 8), rand(8, 3)
    -- ops on two loaded elements: a * b, then + 1, * 3 ... (n ops in all, and one load more)
    local function chain(n)
      local t, ref = a:mul(b), R.binary("mul", ref_of(a), ref_of(b))
      for i = 2, n do
        if i % 2 == 0 then
          t, ref = t:add(1), R.binary("add", ref, 1)
        else
          t, ref = t:mul(3), R.binary("mul", ref, 3)
        end
      end
      return t, ref
    end
    -- 7 ops and a load more: 8, fused into the matmul (7 x (3 - 1) evaluations is far within
    -- the budget)
    local t7, r7 = chain(7)
    check(t7:matmul(w), 1, R.matmul(r7, ref_of(w)), "7 ops @ w")
    -- 8 ops and a load: 9, over OPERAND_OPS, stored (the matmul's tile then reads it as one
    -- load); before the rule, 8 x 2 <= 512 fused it
    local t8, r8 = chain(8)
    check(t8:matmul(w), 2, R.matmul(r8, ref_of(w)), "8 ops @ w")
    -- the same 8 ops broadcast into an elementwise kernel, not reduced: still fused
    check(t8:reshape(4, 8, 1):expand(4, 8, 3):add(1), 1,
      R.binary("add", R.expand(R.reshape(r8, { 4, 8, 1 }), { 4, 8, 3 }), 1), "8 ops broadcast")
  end)

  it("stores a value several kernels evaluate whose indices divide (the merged axes of a broadcast window)",
    function()
      local a, b = rand(2, 2, 2), rand(2, 4, 4)
      -- a nearest 2x upsample: a's elements over 2 x 2 windows, the windows' axes merged into 4 x 4,
      -- so each kernel would index a at (h // 2, w // 2); times b: one op on two loads, within the
      -- budget, but stored once instead of being divided in both kernels
      local up = a:reshape(2, 2, 1, 2, 1):expand(2, 2, 2, 2, 2):reshape(2, 4, 4)
      local v = up:mul(b)
      local sched = schedule.create({ v:sum(2).uop, v:sum(3).uop })
      assert.are.equal(3, #sched.kernels, names(sched))
      -- the same product on a plain reshape of a stored tensor (no division): recomputed by both
      local c = rand(2, 16)
      local plain = c:reshape(2, 4, 4):mul(b)
      sched = schedule.create({ plain:sum(2).uop, plain:sum(3).uop })
      assert.are.equal(2, #sched.kernels, names(sched))
      -- and its values
      local want = R.sum(R.binary("mul", R.reshape(R.expand(R.reshape(ref_of(a), { 2, 2, 1, 2, 1 }), { 2, 2, 2, 2, 2 }),
        { 2, 4, 4 }), ref_of(b)), 2)
      R.check(up:mul(b):sum(2), want, "upsample(a) * b summed", { tol = TOL, check_dtype = false })
    end)

  it("stores a conv's output gradient through batch norm and a max pool before its weight gradient", function()
    -- conv -> batch norm -> relu -> max pool: the gradient at the conv's output (about 20 ops on
    -- 18 loads, through the pool's windows) is stored once instead of being recomputed for each
    -- of the 3 x 3 kernel taps inside the weight gradient (a CNN train step's first conv: 38 ->
    -- 2.4 ms plus 2.7 ms to store it, 1 thread)
    Tensor.manual_seed(1)
    local x = rand(2, 1, 8, 8)
    local conv, bn = tcl.nn.Conv2d(1, 4, 3), tcl.nn.BatchNorm(4)
    local loss = tcl.nn.train(function() return bn(conv(x)):relu():max_pool2d(2):sum() end)
    local w = conv.weight
    loss:backward()
    local sched = schedule.create({ w.grad.uop })
    local stored
    for _, k in ipairs(sched.kernels) do
      if k.name:match("^E_2_4_6_6") then stored = true end
    end
    assert.is_true(stored, names(sched))
  end)

  it("computes a value several kernels need once, unless it is cheap", function()
    local x, w, b = rand(4, 8), rand(8, 8), rand(8)
    -- a residual sum over a matmul, used by two outputs: stored in the matmul's kernel
    local h = x:add(x:linear(w, b))
    local doubled, total = h:mul(2), h:sum(2)
    local sched = schedule.create({ doubled.uop, total.uop })
    assert.are.equal(3, #sched.kernels, names(sched))
    for i = 2, 3 do assert.are.equal(2, #sched.kernels[i].buffers, sched.kernels[i].name .. " reads h alone") end
    tcl.realize(doubled, total)
    local ref_h = R.binary("add", ref_of(x), R.linear(ref_of(x), ref_of(w), ref_of(b)))
    R.check(doubled, R.binary("mul", ref_h, 2), "h * 2", { tol = TOL })
    R.check(total, R.sum(ref_h, 2), "h:sum(2)", { tol = TOL })
    -- a cheap elementwise value used by two outputs is computed by both
    local a, c = rand(16), rand(16)
    local s = a:add(c):exp()
    sched = schedule.create({ s:mul(2).uop, s:add(1).uop })
    assert.are.equal(2, #sched.kernels, names(sched))
  end)

  it("stores a broadcast elementwise value once its recomputation outgrows the budget", function()
    local a, b = rand(8), rand(8, 2)
    local g = a:gelu():reshape(8, 1)
    -- GELU evaluated twice per element: recomputed; 64 times: stored
    check(g:expand(8, 2):add(b), 1, R.binary("add", R.reshape(R.unary("gelu", ref_of(a)), { 8, 1 }), ref_of(b)),
      "gelu(a) broadcast over 2")
    local wide = rand(8, 64)
    check(g:expand(8, 64):add(wide), 2, R.binary("add", R.reshape(R.unary("gelu", ref_of(a)), { 8, 1 }),
      ref_of(wide)), "gelu(a) broadcast over 64")
  end)

  -- their exponential counts TRANSCENDENTAL_OPS (16): about 20 ops, more than OPERAND_OPS, in
  -- weights @ values evaluated once per head dim: stored at every head size (without row
  -- fusion; with it, one row-fused kernel stores the weights at every head size: the scores,
  -- the softmax, weights @ values). Before the operand rule they were recomputed while 20 x
  -- (head size - 1) <= 512 (head size 24).
  it("stores attention's softmax weights before weights @ values at every head size", function()
    local function sdpa_kernels(head)
      local q, k, v = Tensor.empty(1, 2, 8, head), Tensor.empty(1, 2, 8, head), Tensor.empty(1, 2, 8, head)
      return #schedule.create({ q:scaled_dot_product_attention(k, v).uop }).kernels
    end
    unfused(function()
      assert.are.equal(5, sdpa_kernels(2))
      assert.are.equal(5, sdpa_kernels(16))
      assert.are.equal(5, sdpa_kernels(24))
      assert.are.equal(5, sdpa_kernels(28))
      assert.are.equal(5, sdpa_kernels(64))
    end)
    for _, head in ipairs { 16, 24, 28, 64 } do assert.are.equal(3, sdpa_kernels(head)) end
  end)
end)
