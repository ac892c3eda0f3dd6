-- tcl.api.lr_scheduler — learning-rate schedules (optim.StepLR, MultiStepLR, ExponentialLR,
-- LambdaLR, CosineAnnealingLR, LinearLR, OneCycleLR, SequentialLR): each computes the rate of
-- epoch e in closed form from the optimizer's initial rate, and step() advances e by one and
-- sets the optimizer's rate (Optimizer.set_lr); OneCycleLR sets its momentum too
-- (Optimizer.set_momentum). As torch's, the initial rate is the optimizer's rate when its first
-- scheduler was made (torch's initial_lr), so a warmup and the schedule after it made on one
-- optimizer both start from it.
local check = require "tcl.api.check"

local M = {}

local Scheduler = {}
Scheduler.__index = Scheduler

--- scheduler:step(): advances one epoch and sets the optimizer's learning rate; returns it.
function Scheduler.step(self)
  self.last_epoch = self.last_epoch + 1
  local lr = self:rate(self.last_epoch)
  self.optimizer:set_lr(lr)
  self._last_lr = lr
  return lr
end

--- scheduler:get_last_lr(): the learning rate the last step set (the initial one before any).
function Scheduler.get_last_lr(self) return self._last_lr end

local function number(fn, what, v, default, positive)
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or (positive and v <= 0) or v < 0 then
    check.fail(fn, "%s must be a %s number, got %s", what, positive and "positive" or "non-negative", tostring(v))
  end
  return v
end

local function scheduler(name, construct, rate)
  local fn = "optim." .. name
  return function(optimizer, ...)
    if type(optimizer) ~= "table" or type(optimizer.set_lr) ~= "function" then
      check.fail(fn, "expects an optimizer first, got %s", type(optimizer))
    end
    if rawget(optimizer, "_initial_lr") == nil then rawset(optimizer, "_initial_lr", optimizer._lr_value) end
    local self = construct(fn, ...)
    self.optimizer, self.base_lr, self.last_epoch, self.rate = optimizer, optimizer._initial_lr, 0, rate
    self._last_lr = self:rate(0)
    optimizer:set_lr(self._last_lr)
    return setmetatable(self, Scheduler)
  end
end

--- optim.StepLR(optimizer, step_size, gamma = 0.1): lr = base_lr * gamma^floor(epoch / step_size).
M.StepLR = scheduler("StepLR", function(fn, step_size, gamma)
  if math.type(step_size) ~= "integer" or step_size < 1 then
    check.fail(fn, "step_size must be a positive integer, got %s", tostring(step_size))
  end
  return { step_size = step_size, gamma = number(fn, "gamma", gamma, 0.1) }
end, function(self, e) return self.base_lr * self.gamma ^ (e // self.step_size) end)

--- optim.CosineAnnealingLR(optimizer, T_max, eta_min = 0): lr = eta_min + (base_lr - eta_min) *
--  (1 + cos(pi * epoch / T_max)) / 2 (the closed form of torch's schedule).
M.CosineAnnealingLR = scheduler("CosineAnnealingLR", function(fn, t_max, eta_min)
  return { t_max = number(fn, "T_max", t_max, nil, true), eta_min = number(fn, "eta_min", eta_min, 0) }
end, function(self, e)
  return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * e / self.t_max)) / 2
end)

--- optim.LinearLR(optimizer, start_factor = 1/3, end_factor = 1, total_iters = 5): lr = base_lr times
--  a factor going linearly from start_factor to end_factor over total_iters epochs, then constant.
M.LinearLR = scheduler("LinearLR", function(fn, start_factor, end_factor, total_iters)
  if total_iters ~= nil and (math.type(total_iters) ~= "integer" or total_iters < 1) then
    check.fail(fn, "total_iters must be a positive integer, got %s", tostring(total_iters))
  end
  return { start_factor = number(fn, "start_factor", start_factor, 1 / 3, true),
    end_factor = number(fn, "end_factor", end_factor, 1), total_iters = total_iters or 5 }
end, function(self, e)
  local t = math.min(e, self.total_iters) / self.total_iters
  return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t)
end)

local function positive_integer(fn, what, v)
  if math.type(v) ~= "integer" or v < 1 then
    check.fail(fn, "%s must be a positive integer, got %s", what, tostring(v))
  end
  return v
end

--- optim.MultiStepLR(optimizer, milestones, gamma = 0.1): lr = base_lr * gamma^(the number of
--  milestones <= epoch); milestones is a list of positive epochs (a repeated one counts twice).
M.MultiStepLR = scheduler("MultiStepLR", function(fn, milestones, gamma)
  if type(milestones) ~= "table" or #milestones == 0 then
    check.fail(fn, "milestones must be a non-empty list of epochs, got %s", tostring(milestones))
  end
  local sorted = {}
  for i, m in ipairs(milestones) do sorted[i] = positive_integer(fn, string.format("milestones[%d]", i), m) end
  table.sort(sorted)
  return { milestones = sorted, gamma = number(fn, "gamma", gamma, 0.1) }
end, function(self, e)
  local passed = 0
  for _, m in ipairs(self.milestones) do
    if m <= e then passed = passed + 1 end
  end
  return self.base_lr * self.gamma ^ passed
end)

--- optim.ExponentialLR(optimizer, gamma): lr = base_lr * gamma^epoch.
M.ExponentialLR = scheduler("ExponentialLR", function(fn, gamma)
  if gamma == nil then check.fail(fn, "gamma is required (a positive number)") end
  return { gamma = number(fn, "gamma", gamma, nil, true) }
end, function(self, e) return self.base_lr * self.gamma ^ e end)

--- optim.LambdaLR(optimizer, lr_lambda): lr = base_lr * lr_lambda(epoch) (epoch from 0); lr_lambda
--  returns a non-negative number.
M.LambdaLR = scheduler("LambdaLR", function(fn, lr_lambda)
  if type(lr_lambda) ~= "function" then check.fail(fn, "lr_lambda must be a function, got %s", type(lr_lambda)) end
  return { lr_lambda = lr_lambda }
end, function(self, e)
  local factor = self.lr_lambda(e)
  if type(factor) ~= "number" or factor ~= factor or factor < 0 then
    check.fail("optim.LambdaLR", "lr_lambda(%d) returned %s, not a non-negative number", e, tostring(factor))
  end
  return self.base_lr * factor
end)

-- ---------------------------------------------------------------------------------------
-- OneCycleLR: torch's one-cycle policy (Smith and Topin, 2018)

local ANNEAL = {
  cos = function(from, to, pct) return to + (from - to) / 2 * (math.cos(math.pi * pct) + 1) end,
  linear = function(from, to, pct) return (to - from) * pct + from end,
}

-- The rate and momentum at step e: the phase e falls in (the last one past its end), annealed
-- from the phase's start to its end.
local function one_cycle_at(self, e)
  local start = 0
  for i, phase in ipairs(self.phases) do
    if e <= phase.last or i == #self.phases then
      -- at most 1: torch extrapolates past the last phase at the total_steps-th step (a
      -- negative rate with "linear"); here that step sets the final rate
      local pct = math.min((e - start) / (phase.last - start), 1)
      return self.anneal(phase.lr[1], phase.lr[2], pct), self.anneal(phase.momentum[1], phase.momentum[2], pct)
    end
    start = phase.last
  end
end

--- optim.OneCycleLR(optimizer, {max_lr =, total_steps = | epochs = and steps_per_epoch =,
--  pct_start = 0.3, anneal_strategy = "cos" | "linear", cycle_momentum = true,
--  base_momentum = 0.85, max_momentum = 0.95, div_factor = 25, final_div_factor = 1e4,
--  three_phase = false}): the rate rises from max_lr / div_factor to max_lr over the first
--  pct_start of the steps, then falls to max_lr / div_factor / final_div_factor (three_phase:
--  back to the initial rate first, then to the minimum); the momentum (SGD's momentum, the
--  Adam family's beta1) moves the opposite way between max_momentum and base_momentum. Step it
--  once per batch; the total_steps-th step sets the final rate (where torch extrapolates past
--  the schedule: a negative rate with "linear"), stepping more than total_steps times is an error. The optimizer's own
--  rate is not used (torch's rule); cycle_momentum needs an optimizer with a momentum to set
--  (an SGD made with momentum 0 has none: its step keeps no momentum buffers).
function M.OneCycleLR(optimizer, opts)
  local fn = "optim.OneCycleLR"
  if type(optimizer) ~= "table" or type(optimizer.set_lr) ~= "function" then
    check.fail(fn, "expects an optimizer first, got %s", type(optimizer))
  end
  opts = check.options(fn, opts, { max_lr = true, total_steps = true, epochs = true, steps_per_epoch = true,
    pct_start = true, anneal_strategy = true, cycle_momentum = true, base_momentum = true, max_momentum = true,
    div_factor = true, final_div_factor = true, three_phase = true })
  local max_lr = number(fn, "max_lr", opts.max_lr, nil, true)
  if max_lr == nil then check.fail(fn, "max_lr is required") end
  local total
  if opts.total_steps ~= nil then
    total = positive_integer(fn, "total_steps", opts.total_steps)
  elseif opts.epochs ~= nil or opts.steps_per_epoch ~= nil then
    total = positive_integer(fn, "epochs", opts.epochs) * positive_integer(fn, "steps_per_epoch", opts.steps_per_epoch)
  else
    check.fail(fn, "give total_steps, or epochs and steps_per_epoch")
  end
  local pct = opts.pct_start == nil and 0.3 or opts.pct_start
  if type(pct) ~= "number" or not (pct >= 0 and pct <= 1) then
    check.fail(fn, "pct_start must be a number in [0, 1], got %s", tostring(pct))
  end
  local strategy = opts.anneal_strategy == nil and "cos" or opts.anneal_strategy
  if not ANNEAL[strategy] then
    check.fail(fn, "anneal_strategy must be \"cos\" or \"linear\", got %s", tostring(strategy))
  end
  local div = number(fn, "div_factor", opts.div_factor, 25, true)
  local final_div = number(fn, "final_div_factor", opts.final_div_factor, 1e4, true)
  local base_m = number(fn, "base_momentum", opts.base_momentum, 0.85)
  local max_m = number(fn, "max_momentum", opts.max_momentum, 0.95)
  local cycle = opts.cycle_momentum == nil or opts.cycle_momentum
  if type(cycle) ~= "boolean" then check.fail(fn, "cycle_momentum must be a boolean, got %s", tostring(cycle)) end
  local three = opts.three_phase or false
  if type(three) ~= "boolean" then check.fail(fn, "three_phase must be a boolean, got %s", tostring(three)) end
  if cycle and not rawget(optimizer, "_momentum") then
    check.fail(fn, "cycle_momentum needs an optimizer with a momentum to cycle (SGD with momentum > 0, Adam, "
      .. "AdamW, LAMB); %s has none: give it a momentum, or pass cycle_momentum = false", optimizer._name)
  end
  local initial, min_lr = max_lr / div, max_lr / div / final_div
  local rise = pct * total - 1
  local phases
  if three then
    phases = {
      { last = rise, lr = { initial, max_lr }, momentum = { max_m, base_m } },
      { last = 2 * pct * total - 2, lr = { max_lr, initial }, momentum = { base_m, max_m } },
      { last = total - 1, lr = { initial, min_lr }, momentum = { max_m, max_m } },
    }
  else
    phases = {
      { last = rise, lr = { initial, max_lr }, momentum = { max_m, base_m } },
      { last = total - 1, lr = { max_lr, min_lr }, momentum = { base_m, max_m } },
    }
  end
  rawset(optimizer, "_initial_lr", initial)
  local self = setmetatable({ optimizer = optimizer, base_lr = initial, last_epoch = 0, total_steps = total,
    phases = phases, anneal = ANNEAL[strategy], cycle_momentum = cycle }, Scheduler)
  function self.rate(s, e)
    if e > s.total_steps then
      check.fail(fn, "stepped %d times, more than total_steps = %d", e, s.total_steps)
    end
    local lr, momentum = one_cycle_at(s, e)
    if s.cycle_momentum then s.optimizer:set_momentum(momentum) end
    return lr
  end
  self._last_lr = self:rate(0)
  optimizer:set_lr(self._last_lr)
  return self
end

--- optim.SequentialLR(optimizer, schedulers, milestones): runs schedulers[1] until epoch
--  milestones[1], then schedulers[2] from its epoch 0, and so on (a LinearLR warmup, then
--  CosineAnnealingLR); #milestones is #schedulers - 1, increasing, and every scheduler drives
--  this optimizer.
function M.SequentialLR(optimizer, schedulers, milestones)
  local fn = "optim.SequentialLR"
  if type(optimizer) ~= "table" or type(optimizer.set_lr) ~= "function" then
    check.fail(fn, "expects an optimizer first, got %s", type(optimizer))
  end
  if type(schedulers) ~= "table" or #schedulers == 0 then
    check.fail(fn, "schedulers must be a non-empty list of schedulers, got %s", tostring(schedulers))
  end
  for i, s in ipairs(schedulers) do
    if getmetatable(s) ~= Scheduler then check.fail(fn, "schedulers[%d] is not a scheduler", i) end
    if s.optimizer ~= optimizer then
      check.fail(fn, "schedulers[%d] drives another optimizer than the one given", i)
    end
  end
  if type(milestones) ~= "table" or #milestones ~= #schedulers - 1 then
    check.fail(fn, "expects %d milestone%s for %d schedulers, got %s", #schedulers - 1, #schedulers == 2 and "" or "s",
      #schedulers, type(milestones) == "table" and tostring(#milestones) or tostring(milestones))
  end
  for i, m in ipairs(milestones) do
    positive_integer(fn, string.format("milestones[%d]", i), m)
    if i > 1 and m <= milestones[i - 1] then
      check.fail(fn, "milestones must increase, got %d after %d", m, milestones[i - 1])
    end
  end
  local self = setmetatable({ optimizer = optimizer, last_epoch = 0, schedulers = schedulers,
    milestones = table.move(milestones, 1, #milestones, 1, {}) }, Scheduler)
  function self.rate(s, e)
    local k, start = 1, 0
    while k <= #s.milestones and s.milestones[k] <= e do
      start = s.milestones[k]
      k = k + 1
    end
    local active = s.schedulers[k]
    active.last_epoch = e - start
    active._last_lr = active:rate(e - start)
    return active._last_lr
  end
  self._last_lr = self:rate(0)
  optimizer:set_lr(self._last_lr)
  return self
end

return M
