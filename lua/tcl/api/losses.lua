-- tcl.api.losses — PyTorch's loss functions beyond cross_entropy: nll_loss, binary_cross_entropy,
-- binary_cross_entropy_with_logits, mse_loss, l1_loss, smooth_l1_loss, huber_loss, kl_div, and the
-- distance functions cosine_similarity, normalize, cdist. Options as torch's (reduction "mean",
-- "sum" or "none"); class indices are 1-based (a 0 is reported by the next read, as everywhere in
-- tcl). Compositions of graph ops: they fuse and are differentiated by autograd.
-- Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local index_checks = require "tcl.api.index_checks"

local fail, is_tensor = check.fail, class.is_tensor
local M = {}

local REDUCTIONS = { mean = true, sum = true, none = true }

local function tensor_arg(fn, v, what)
  if not is_tensor(v) then fail(fn, "%s must be a Tensor, got %s", what, check.type_name(v)) end
  return v
end

local function float_arg(fn, v, what)
  tensor_arg(fn, v, what)
  if not v.uop.dtype.is_float then fail(fn, "%s must be a float tensor, got %s", what, v.uop.dtype.name) end
  return v
end

local function reduction_of(fn, opts, extra)
  local r = opts.reduction or "mean"
  if not REDUCTIONS[r] and not (extra and extra[r]) then
    fail(fn, "reduction must be mean, sum or none%s, got %s", extra and " or batchmean" or "", tostring(r))
  end
  return r
end

local function reduce(loss, reduction)
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  return loss:mean()
end

local function same_shape(fn, a, b, what)
  if not check.same_shape(a._shape, b._shape) then
    fail(fn, "input %s and %s %s must have the same shape", check.shape_str(a._shape), what, check.shape_str(b._shape))
  end
end

--- -input[n, target[n]] * weight[target[n]] for log-probabilities input (N, C, d...) and 1-based
--  class indices target (N, d...); opts: weight (C), ignore_index, reduction (mean divides by the
--  summed weights of the counted targets, as torch).
function M.nll_loss(input, target, opts)
  local fn = "nll_loss"
  float_arg(fn, input, "input")
  tensor_arg(fn, target, "target")
  opts = check.options(fn, opts, { weight = true, ignore_index = true, reduction = true })
  local reduction = reduction_of(fn, opts)
  local shape = input._shape
  if #shape == 0 then fail(fn, "input needs a class dim, got shape %s", check.shape_str(shape)) end
  local class_dim = #shape >= 2 and 2 or 1
  local classes = shape[class_dim]
  local expected = {}
  for d = 1, #shape do if d ~= class_dim then expected[#expected + 1] = shape[d] end end
  if not target.uop.dtype.is_int or not check.same_shape(expected, target._shape) then
    fail(fn, "target must be class indices (integers) of shape %s for input %s, got %s %s", check.shape_str(expected),
      check.shape_str(shape), target.uop.dtype.name, check.shape_str(target._shape))
  end
  local ignored = opts.ignore_index
  if ignored ~= nil then ignored = check.any_integer(fn, "ignore_index", ignored) end
  index_checks.check_range(fn, target, classes, "class indices", ignored)
  local tview, cview = {}, {}
  for d = 1, #shape do
    tview[d] = d == class_dim and 1 or shape[d]
    cview[d] = d == class_dim and classes or 1
  end
  local hot = target:cast("int64"):reshape(tview):eq(class.Tensor.arange(1, classes + 1,
    { dtype = "int64", device = input.device }):reshape(cview))
  local picked = class.Tensor.where(hot, input, 0):sum(class_dim)
  local w
  if opts.weight ~= nil then
    local weight = float_arg(fn, opts.weight, "weight")
    if #weight._shape ~= 1 or weight._shape[1] ~= classes then
      fail(fn, "weight must have shape (%d), got %s", classes, check.shape_str(weight._shape))
    end
    w = class.Tensor.where(hot, weight:reshape(cview), 0):sum(class_dim)
  end
  local counted = ignored ~= nil and target:ne(ignored) or nil
  if counted then w = class.Tensor.where(counted, w or 1, 0):cast(input.uop.dtype.name) end
  local loss = w and -(picked * w) or -picked
  if reduction == "none" then return loss end
  if reduction == "sum" then return loss:sum() end
  if w then return loss:sum() / w:sum() end
  return loss:mean()
end

--- -(t log p + (1 - t) log(1 - p)) for probabilities p, logs clamped at -100 as torch;
--  opts: weight (broadcast), reduction.
function M.binary_cross_entropy(input, target, opts)
  local fn = "binary_cross_entropy"
  float_arg(fn, input, "input")
  float_arg(fn, target, "target")
  same_shape(fn, input, target, "target")
  opts = check.options(fn, opts, { weight = true, reduction = true })
  local reduction = reduction_of(fn, opts)
  local log_p = input:log():maximum(-100)
  local log_q = (-input + 1):log():maximum(-100)
  local loss = -(target * log_p + (-target + 1) * log_q)
  if opts.weight ~= nil then loss = loss * float_arg(fn, opts.weight, "weight") end
  return reduce(loss, reduction)
end

--- binary_cross_entropy of sigmoid(input), computed stably from the logits; opts: weight,
--  pos_weight (broadcast over the last dim), reduction.
function M.binary_cross_entropy_with_logits(input, target, opts)
  local fn = "binary_cross_entropy_with_logits"
  float_arg(fn, input, "input")
  float_arg(fn, target, "target")
  same_shape(fn, input, target, "target")
  opts = check.options(fn, opts, { weight = true, pos_weight = true, reduction = true })
  local reduction = reduction_of(fn, opts)
  -- log sigmoid(x) = min(x, 0) - log1p(e^-|x|); log(1 - sigmoid(x)) = log sigmoid(x) - x
  local log_sig = input:logsigmoid()
  local log_one_minus = log_sig - input
  local loss
  if opts.pos_weight ~= nil then
    local pw = float_arg(fn, opts.pos_weight, "pos_weight")
    loss = -(pw * target * log_sig + (-target + 1) * log_one_minus)
  else
    loss = -(target * log_sig + (-target + 1) * log_one_minus)
  end
  if opts.weight ~= nil then loss = loss * float_arg(fn, opts.weight, "weight") end
  return reduce(loss, reduction)
end

local function pointwise(fn, f, extra_options)
  return function(input, target, opts)
    float_arg(fn, input, "input")
    float_arg(fn, target, "target")
    same_shape(fn, input, target, "target")
    local allowed = { reduction = true }
    for k in pairs(extra_options or {}) do allowed[k] = true end
    opts = check.options(fn, opts, allowed)
    local reduction = reduction_of(fn, opts)
    return reduce(f(input - target, opts, fn), reduction)
  end
end

--- (input - target)^2, reduced.
M.mse_loss = pointwise("mse_loss", function(d) return d * d end)

--- |input - target|, reduced.
M.l1_loss = pointwise("l1_loss", function(d) return d:abs() end)

--- 0.5 d^2 / beta where |d| < beta, |d| - beta / 2 elsewhere (beta defaults to 1; 0 is l1).
M.smooth_l1_loss = pointwise("smooth_l1_loss", function(d, opts, fn)
  local beta = opts.beta == nil and 1.0 or check.number(fn, "beta", opts.beta)
  if beta < 0 then fail(fn, "beta must be >= 0, got %s", beta) end
  local a = d:abs()
  if beta == 0 then return a end
  return class.Tensor.where(a:lt(beta), d * d * (0.5 / beta), a - beta / 2)
end, { beta = true })

--- 0.5 d^2 where |d| <= delta, delta (|d| - delta / 2) elsewhere (delta defaults to 1).
M.huber_loss = pointwise("huber_loss", function(d, opts, fn)
  local delta = opts.delta == nil and 1.0 or check.number(fn, "delta", opts.delta)
  if delta <= 0 then fail(fn, "delta must be > 0, got %s", delta) end
  local a = d:abs()
  return class.Tensor.where(a:le(delta), d * d * 0.5, (a - delta / 2) * delta)
end, { delta = true })

--- target (log target - input) for log-probabilities input, as torch.nn.functional.kl_div;
--  opts: reduction (mean, sum, none, batchmean), log_target.
function M.kl_div(input, target, opts)
  local fn = "kl_div"
  float_arg(fn, input, "input")
  float_arg(fn, target, "target")
  same_shape(fn, input, target, "target")
  opts = check.options(fn, opts, { reduction = true, log_target = true })
  local reduction = reduction_of(fn, opts, { batchmean = true })
  local loss
  if opts.log_target then
    loss = target:exp() * (target - input)
  else
    -- 0 log 0 is 0
    loss = class.Tensor.where(target:gt(0), target * (target:log() - input), 0)
  end
  if reduction == "batchmean" then return loss:sum() / (#input._shape > 0 and input._shape[1] or 1) end
  return reduce(loss, reduction)
end

--- x1 . x2 / max(|x1| |x2|, eps) along dim (default 2, torch's 1; eps 1e-8).
function M.cosine_similarity(x1, x2, dim, eps)
  local fn = "cosine_similarity"
  float_arg(fn, x1, "x1")
  float_arg(fn, x2, "x2")
  eps = eps == nil and 1e-8 or check.number(fn, "eps", eps)
  dim = dim or 2
  local dot = (x1 * x2):sum(dim)
  local n1, n2 = (x1 * x1):sum(dim), (x2 * x2):sum(dim)
  return dot / (n1 * n2):maximum(eps * eps):sqrt()
end

--- x / max(||x||_p, eps) along dim (p 2, dim 2 (torch's 1), eps 1e-12 by default).
function M.normalize(x, p, dim, eps)
  local fn = "normalize"
  float_arg(fn, x, "input")
  p = p == nil and 2 or check.number(fn, "p", p)
  if p <= 0 then fail(fn, "p must be > 0, got %s", p) end
  dim = dim or (#x._shape >= 2 and 2 or 1)
  eps = eps == nil and 1e-12 or check.number(fn, "eps", eps)
  local norm
  if p == math.huge then norm = x:abs():max(dim, true)
  elseif p == 2 then norm = (x * x):sum(dim, true):sqrt()
  else norm = x:abs():pow(p):sum(dim, true):pow(1 / p) end
  return x / norm:maximum(eps)
end

--- The p-norm distances between the rows of x1 (..., P, M) and x2 (..., R, M): (..., P, R).
function M.cdist(x1, x2, p)
  local fn = "cdist"
  float_arg(fn, x1, "x1")
  float_arg(fn, x2, "x2")
  p = p == nil and 2 or check.number(fn, "p", p)
  if p < 0 then fail(fn, "p must be >= 0, got %s", p) end
  local r1, r2 = #x1._shape, #x2._shape
  if r1 < 2 or r2 < 2 or x1._shape[r1] ~= x2._shape[r2] then
    fail(fn, "x1 %s and x2 %s must be (..., P, M) and (..., R, M)", check.shape_str(x1._shape),
      check.shape_str(x2._shape))
  end
  local d = (x1:unsqueeze(-2) - x2:unsqueeze(-3)):abs()
  if p == 2 then return (d * d):sum(-1):sqrt() end
  if p == 1 then return d:sum(-1) end
  if p == math.huge then return d:max(-1) end
  if p == 0 then return d:ne(0):float():sum(-1):cast(x1.uop.dtype.name) end
  return d:pow(p):sum(-1):pow(1 / p)
end

return M
