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

--- nn.clip_grad_norm(params, max_norm, norm_type = 2, error_if_nonfinite = false): scales every
--  parameter's .grad by min(1, max_norm / (total_norm + 1e-6)), where total_norm is the
--  norm_type-norm of all the grads together (any p > 0: (sum |g|^p)^(1/p); math.huge or "inf":
--  the largest |g|), and returns total_norm (a 0-d tensor; 0 when no parameter has a .grad).
--  Parameters without .grad are skipped, as in torch.nn.utils.clip_grad_norm_. A total norm that
--  is nan or inf makes the grads nan; with error_if_nonfinite = true it is an error instead
--  (the norm is realized to check it).
function M.clip_grad_norm(params, max_norm, norm_type, error_if_nonfinite)
  local fn = "nn.clip_grad_norm"
  if type(max_norm) ~= "number" or max_norm ~= max_norm or max_norm < 0 then
    check.fail(fn, "max_norm must be a number >= 0, got %s", tostring(max_norm))
  end
  if norm_type == "inf" then norm_type = math.huge end
  norm_type = norm_type or 2
  if type(norm_type) ~= "number" or norm_type ~= norm_type or norm_type <= 0 then
    check.fail(fn, "norm_type must be a number > 0 or math.huge (\"inf\"), got %s", tostring(norm_type))
  end
  if error_if_nonfinite ~= nil and type(error_if_nonfinite) ~= "boolean" then
    check.fail(fn, "error_if_nonfinite must be a boolean, got %s", tostring(error_if_nonfinite))
  end
  local list = grads(fn, params)
  if #list == 0 then return Tensor.scalar(0.0) end
  local parts = {}
  for i, p in ipairs(list) do
    local g = p.grad
    if norm_type == math.huge then
      parts[i] = g:abs():max()
    elseif norm_type == 2 then
      parts[i] = (g * g):sum()
    elseif norm_type == 1 then
      parts[i] = g:abs():sum()
    else
      parts[i] = g:abs():pow(norm_type):sum()
    end
  end
  local joined = Tensor.stack(parts, 1)
  local total
  if norm_type == math.huge then
    total = joined:max()
  elseif norm_type == 2 then
    total = joined:sum():sqrt()
  elseif norm_type == 1 then
    total = joined:sum()
  else
    total = joined:sum():pow(1 / norm_type)
  end
  if error_if_nonfinite then
    local value = total:item()
    if value ~= value or value == math.huge then
      check.fail(fn, "the total norm of order %s of the gradients is %s (error_if_nonfinite = true)",
        norm_type == math.huge and "inf" or tostring(norm_type), value ~= value and "nan" or "inf")
    end
  end
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
