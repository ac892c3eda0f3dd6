-- tcl.api.grad_clipping — nn.clip_grad_norm and nn.clip_grad_value: rescale or clamp the .grad of
-- a list of parameters in place (lazily: the new .grad is a graph over the old one).
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local Tensor = require "tcl.api.tensor"

local M = {}

local function grads(fn, params)
  if class.is_tensor(params) then params = { params } end
  if type(params) ~= "table" then check.fail(fn, "params must be a tensor or a list of tensors") end
  local list = {}
  for i, p in ipairs(params) do
    if not class.is_tensor(p) then check.fail(fn, "params[%d] is a %s, not a tensor", i, type(p)) end
    if p.grad ~= nil then list[#list + 1] = p end
  end
  return list
end

--- nn.clip_grad_norm(params, max_norm, norm_type = 2): scales every parameter's .grad by
--  min(1, max_norm / (total_norm + 1e-6)), where total_norm is the norm_type-norm (2 or math.huge)
--  of all the grads together, and returns total_norm (a 0-d tensor). Parameters without .grad are
--  skipped, as in torch.nn.utils.clip_grad_norm_.
function M.clip_grad_norm(params, max_norm, norm_type)
  local fn = "nn.clip_grad_norm"
  if type(max_norm) ~= "number" or max_norm < 0 then
    check.fail(fn, "max_norm must be a number >= 0, got %s", tostring(max_norm))
  end
  norm_type = norm_type or 2
  if norm_type ~= 2 and norm_type ~= math.huge then
    check.fail(fn, "norm_type must be 2 or math.huge, got %s", tostring(norm_type))
  end
  local list = grads(fn, params)
  if #list == 0 then return nil end
  local parts = {}
  for i, p in ipairs(list) do
    parts[i] = norm_type == 2 and (p.grad * p.grad):sum() or p.grad:abs():max()
  end
  local joined = Tensor.stack(parts, 1)
  local total = norm_type == 2 and joined:sum():sqrt() or joined:max()
  local scale = ((total + 1e-6):reciprocal() * max_norm):clamp(nil, 1)
  for _, p in ipairs(list) do p.grad = p.grad * scale end
  return total
end

--- nn.clip_grad_value(params, clip_value): clamps every parameter's .grad to
--  [-clip_value, clip_value] (parameters without .grad are skipped).
function M.clip_grad_value(params, clip_value)
  local fn = "nn.clip_grad_value"
  if type(clip_value) ~= "number" or clip_value < 0 then
    check.fail(fn, "clip_value must be a number >= 0, got %s", tostring(clip_value))
  end
  for _, p in ipairs(grads(fn, params)) do p.grad = p.grad:clamp(-clip_value, clip_value) end
end

return M
