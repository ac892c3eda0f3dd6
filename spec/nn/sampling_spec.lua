-- spec/nn/sampling_spec.lua — tcl.models.sampling: greedy is the argmax, top_k 1 is greedy, a
-- seed reproduces the draws, and the frequencies over many draws of a hand-made distribution
-- are the softmax of what temperature, top_k and top_p keep (top_p: the smallest set of the most
-- probable tokens whose mass reaches p). Every option's error.
local tcl = require "tcl"
local Tensor = tcl.Tensor
local sampling = require "tcl.models.sampling"

local PROBS = { 0.05, 0.5, 0.15, 0.3 } -- token 1 is the most probable, then 3, 2, 0
local DRAWS = 4000

local function logits_rows(probs, rows)
  local row = {}
  for i, p in ipairs(probs) do row[i] = math.log(p) end
  local list = {}
  for r = 1, rows do list[r] = row end
  return Tensor(list)
end

-- How often each token (0-based) was drawn in DRAWS rows of the same logits.
local function frequencies(opts, seed)
  tcl.manual_seed(seed or 1)
  local counts = { 0, 0, 0, 0 }
  for _, id in ipairs(sampling.sample(logits_rows(PROBS, DRAWS), opts):tolist()) do
    counts[id + 1] = counts[id + 1] + 1
  end
  for i = 1, 4 do counts[i] = counts[i] / DRAWS end
  return counts
end

-- Each frequency within 4.5 standard deviations of its expected probability (a false alarm
-- about once in 10^5 runs; a wrong distribution, such as a token that should be gone, fails).
local function assert_distribution(expected, got)
  for i, p in ipairs(expected) do
    local sd = math.sqrt(p * (1 - p) / DRAWS)
    assert(math.abs(got[i] - p) <= 4.5 * sd + 1e-12,
      string.format("token %d: frequency %.4f, expected %.4f (all: %s)", i - 1, got[i], p, table.concat(got, " ")))
  end
end

local function normalized(weights)
  local s = 0
  for _, w in ipairs(weights) do s = s + w end
  local out = {}
  for i, w in ipairs(weights) do out[i] = w / s end
  return out
end

describe("tcl.models.sampling", function()
  it("is the argmax when greedy (temperature 0), and top_k 1 is greedy", function()
    tcl.manual_seed(3)
    local logits = Tensor.randn(6, 40):realize()
    local want = {}
    for i, row in ipairs(logits:tolist()) do
      local best = 1
      for j, v in ipairs(row) do if v > row[best] then best = j end end
      want[i] = best - 1
    end
    assert.are.same(want, sampling.sample(logits, { temperature = 0 }):tolist())
    assert.are.same(want, sampling.sample(logits, { top_k = 1, temperature = 1.5 }):tolist())
    assert.are.equal(want[2], sampling.sample(logits[2], { temperature = 0 }):item()) -- a 1-d logits row
    assert.are.equal("int32", sampling.sample(logits):realize().dtype.name)
  end)

  it("draws from softmax(logits / temperature)", function()
    assert_distribution(PROBS, frequencies({}))
    local sharp = {}
    for i, p in ipairs(PROBS) do sharp[i] = p ^ 2 end -- temperature 0.5 squares the probabilities
    assert_distribution(normalized(sharp), frequencies({ temperature = 0.5 }))
  end)

  it("reproduces its draws from a seed", function()
    local logits = logits_rows(PROBS, 64)
    tcl.manual_seed(7)
    local a = sampling.sample(logits, { temperature = 1 }):tolist()
    local b = sampling.sample(logits, { temperature = 1 }):tolist()
    tcl.manual_seed(7)
    assert.are.same(a, sampling.sample(logits, { temperature = 1 }):tolist())
    assert.are_not.same(a, b)
  end)

  it("keeps the top_k most probable tokens", function()
    assert_distribution(normalized({ 0, 0.5, 0.15, 0.3 }), frequencies({ top_k = 3 }))
    assert_distribution(normalized({ 0, 0.5, 0, 0.3 }), frequencies({ top_k = 2 }))
  end)

  it("keeps the smallest set of the most probable tokens whose mass reaches top_p", function()
    -- 0.5 < 0.6 <= 0.5 + 0.3: tokens 1 and 3
    assert_distribution(normalized({ 0, 0.5, 0, 0.3 }), frequencies({ top_p = 0.6 }))
    -- 0.8 < 0.9 <= 0.95: tokens 1, 3 and 2
    assert_distribution(normalized({ 0, 0.5, 0.15, 0.3 }), frequencies({ top_p = 0.9 }))
    -- p below the largest probability: that token alone
    assert.are.same({ 0, 1, 0, 0 }, frequencies({ top_p = 0.2 }))
    -- a mass that reaches p exactly is enough: probabilities 0.5, 0.25, 0.25 (exact in float32)
    -- and p = 0.5 keep the first token alone
    tcl.manual_seed(4)
    local ids = sampling.sample(logits_rows({ 0.5, 0.25, 0.25 }, 500), { top_p = 0.5 }):tolist()
    for _, id in ipairs(ids) do assert.are.equal(0, id) end
    -- after top_k: the mass among the kept tokens (0.5 and 0.3 renormalized: 0.625, 0.375)
    assert_distribution(normalized({ 0, 0.5, 0, 0 }), frequencies({ top_k = 2, top_p = 0.6 }))
    assert_distribution(normalized({ 0, 0.5, 0, 0.3 }), frequencies({ top_k = 2, top_p = 0.7 }))
  end)

  it("sums the probabilities of a large vocabulary in blocks", function()
    -- 600 tokens (more than one block of 256): 10 of mass 0.09 each, the rest share 0.1
    local probs = {}
    for i = 1, 600 do probs[i] = i % 60 == 0 and 0.09 or 0.1 / 590 end
    tcl.manual_seed(2)
    local ids = sampling.sample(logits_rows(probs, 200), { top_p = 0.85 }):tolist()
    for _, id in ipairs(ids) do assert.are.equal(0, (id + 1) % 60, "drew token " .. id) end
    ids = sampling.sample(logits_rows(probs, 2000), { top_p = 0.95 }):tolist()
    local rare = 0
    for _, id in ipairs(ids) do if (id + 1) % 60 ~= 0 then rare = rare + 1 end end
    assert.is_true(rare > 0) -- 0.9 < 0.95: some of the small ones are kept
  end)

  it("checks its arguments, naming the option", function()
    local logits = Tensor.zeros(2, 4)
    local function refuses(opts, message, x)
      assert.error_matches(function() sampling.sample(x or logits, opts) end, "sampling.sample: " .. message, 1, true)
    end
    refuses({ temperature = -1 }, "temperature must be a finite number >= 0 (0: greedy), got -1")
    refuses({ temperature = math.huge }, "temperature must be a finite number >= 0")
    refuses({ temperature = "hot" }, 'temperature must be a finite number >= 0 (0: greedy), got "hot"')
    refuses({ top_k = 0 }, "top_k must be an integer >= 1, got 0")
    refuses({ top_k = 2.5 }, "top_k must be an integer >= 1, got 2.5")
    refuses({ top_p = 0 }, "top_p must be a number in (0, 1], got 0")
    refuses({ top_p = 1.5 }, "top_p must be a number in (0, 1], got 1.5")
    refuses({ top_p = 0 / 0 }, "top_p must be a number in (0, 1]")
    refuses({ topk = 3 }, "unknown option 'topk'")
    refuses(nil, "logits must be a tensor, got table", { 1, 2 })
    refuses(nil, "logits must be a float tensor, got int32", Tensor({ 1, 2 }, { dtype = "int32" }))
    refuses(nil, "logits must be (vocab) or (batch, vocab), got shape (1, 2, 2)", Tensor.zeros(1, 2, 2))
  end)
end)
