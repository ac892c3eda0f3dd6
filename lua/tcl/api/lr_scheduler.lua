-- tcl.api.lr_scheduler — learning-rate schedules (optim.StepLR, CosineAnnealingLR, LinearLR): each
-- computes the rate of epoch e in closed form from the optimizer's rate when it was made, and
-- step() advances e by one and sets the optimizer's rate (Optimizer.set_lr).
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
    local self = construct(fn, ...)
    self.optimizer, self.base_lr, self.last_epoch, self.rate = optimizer, optimizer._lr_value, 0, rate
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

return M
