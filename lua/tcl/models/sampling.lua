-- tcl.models.sampling — the next token from a language model's logits: greedy, temperature,
-- top-k and top-p (nucleus) sampling, with the device's random numbers (tcl.manual_seed
-- reproduces a generation). Layer: lua/tcl/models (a user of the Tensor API).
--
--   local sampling = require "tcl.models.sampling"
--   local ids = sampling.sample(logits, { temperature = 0.8, top_k = 40, top_p = 0.95 })
--   -- logits (batch, vocab) or (vocab); ids: int32 (batch) or 0-d, 0-based token ids (lazy)
--
-- temperature 0 is greedy: the first largest logit (argmax). Otherwise the logits are divided by
-- the temperature, top_k keeps the k largest (and any equal to the k-th), top_p keeps the
-- smallest set of the most probable tokens whose probabilities (after top_k) reach top_p (and
-- any token as probable as the least probable kept), and the token is drawn from the softmax of
-- what is kept (top_p after top_k works on the k sorted logits: tokens tied with the k-th
-- beyond the k count for top_k's mask only). The draw is an exponential race: with u uniform
-- in (0, 1) per token, the token with the largest z / temperature - log(-log u) wins, which
-- picks token i with probability
-- softmax(z / temperature)_i (the Gumbel-max identity): one rand draw of the logits' shape
-- and one argmax, no cumulative sum over the vocabulary. top_k and top_p sort the vocabulary (a
-- bitonic network on the device); the cumulative probabilities of top_p are sums over blocks
-- of 256 and then over the blocks' totals.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local Tensor = require "tcl.api.tensor"

local fail = check.fail
local M = {}

local FN = "sampling.sample"
local OPTIONS = { temperature = true, top_k = true, top_p = true }
local BLOCK = 256 -- the block of the running sums of top_p

local function value_str(v)
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  if type(v) == "string" then return string.format("%q", v) end
  return check.type_name(v)
end

--- The checked options with defaults: temperature (a number >= 0, default 1), top_k (nil or
--  an integer >= 1; nil keeps every token), top_p (a number in (0, 1], default 1: every token).
function M.options(opts)
  opts = check.options(FN, opts, OPTIONS)
  local temperature = opts.temperature == nil and 1.0 or opts.temperature
  if type(temperature) ~= "number" or temperature ~= temperature or temperature < 0 or temperature == math.huge then
    fail(FN, "temperature must be a finite number >= 0 (0: greedy), got %s", value_str(opts.temperature))
  end
  local top_k = opts.top_k
  if top_k ~= nil and (math.type(top_k) ~= "integer" or top_k < 1) then
    fail(FN, "top_k must be an integer >= 1, got %s", value_str(top_k))
  end
  local top_p = opts.top_p == nil and 1.0 or opts.top_p
  if type(top_p) ~= "number" or top_p ~= top_p or top_p <= 0 or top_p > 1 then
    fail(FN, "top_p must be a number in (0, 1], got %s", value_str(opts.top_p))
  end
  return { temperature = temperature, top_k = top_k, top_p = top_p }
end

-- Running sums along the last dim of x (rows, n): within blocks of BLOCK, plus the totals of
-- the blocks before (n^2 / BLOCK + (n / BLOCK)^2 additions instead of n^2).
local function running_sum(x)
  local rows, n = x.shape[1], x.shape[2]
  if n <= BLOCK then return x:cumsum(2) end
  local blocks = (n + BLOCK - 1) // BLOCK
  local padded = x:pad({ { 0, 0 }, { 0, blocks * BLOCK - n } }):reshape(rows, blocks, BLOCK)
  local within = padded:cumsum(3)
  local totals = within:narrow(3, BLOCK, 1):reshape(rows, blocks)
  local before = totals:cumsum(2) - totals
  return (within + before:reshape(rows, blocks, 1)):reshape(rows, blocks * BLOCK):narrow(2, 1, n)
end

--- The 0-based ids (int32, lazy) drawn from logits ((batch, vocab) or (vocab), float) by opts
--  (see M.options and the header).
function M.sample(logits, opts)
  if not class.is_tensor(logits) then fail(FN, "logits must be a tensor, got %s", check.type_name(logits)) end
  if not logits.dtype.is_float then fail(FN, "logits must be a float tensor, got %s", logits.dtype.name) end
  local rank = #logits.shape
  if rank ~= 1 and rank ~= 2 then
    fail(FN, "logits must be (vocab) or (batch, vocab), got shape %s", check.shape_str(logits.shape))
  end
  local o = M.options(opts)
  local z = rank == 1 and logits:reshape(1, logits.shape[1]) or logits
  z = z:float()
  local rows, vocab = z.shape[1], z.shape[2]
  local ids
  if o.temperature == 0 then
    ids = z:argmax(2)
  else
    z = z / o.temperature
    local sorted -- the logits kept so far, largest first (a sort of the vocabulary, when needed)
    if o.top_k ~= nil and o.top_k < vocab then
      sorted = z:topk(o.top_k, 2)
      z = z:lt(sorted:narrow(2, o.top_k, 1)):where(-math.huge, z)
    end
    if o.top_p < 1 then
      sorted = sorted or z:sort(2, true)
      local probs = sorted:softmax(2)
      local before = running_sum(probs) - probs -- the mass of the more probable tokens
      local least = before:lt(o.top_p):where(sorted, math.huge):min(2, true)
      z = z:lt(least):where(-math.huge, z)
    end
    -- u in (0, 1): rand's multiples of 2^-24 moved by 2^-26 (never 0, and still below 1)
    local u = Tensor.rand(rows, vocab, { device = z.device }) + 2.0 ^ -26
    ids = (z - u:log():neg():log()):argmax(2)
  end
  ids = ids:cast("int32") - 1
  if rank == 1 then return ids:reshape({}) end
  return ids
end

return M
