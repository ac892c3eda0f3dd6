-- tcl.api.activations — selu, celu, relu6, hardsigmoid, hardswish, hardtanh, mish, logsigmoid,
-- softsign, softmin and prelu, composed of existing graph ops (so autograd differentiates them;
-- at kinks the gradient is the one of the WHERE branch PyTorch picks). Layer: lua/tcl/api.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local rules = require "tcl.api.dtype_rules"
local nodes = require "tcl.api.nodes"
local elementwise = require "tcl.api.elementwise"

local fail, is_tensor = check.fail, class.is_tensor
local where = elementwise.where
local M = {}

local function float_arg(fn, x)
  if not is_tensor(x) then fail(fn, "expected a Tensor, got %s", check.type_name(x)) end
  return nodes.cast(x, rules.float_of(x.uop.dtype))
end

local function number_arg(fn, what, v, default)
  if v == nil then return default end
  return check.number(fn, what, v)
end

local SELU_ALPHA = 1.6732632423543772848170429916717
local SELU_SCALE = 1.0507009873554804934193349852946

--- scale * (x > 0 ? x : alpha (e^x - 1)) with torch's constants.
function M.selu(x)
  x = float_arg("selu", x)
  return where(x:gt(0), x, x:expm1() * SELU_ALPHA) * SELU_SCALE
end

--- max(0, x) + min(0, alpha (e^(x/alpha) - 1)); alpha defaults to 1 (torch.celu).
function M.celu(x, alpha)
  x = float_arg("celu", x)
  alpha = number_arg("celu", "alpha", alpha, 1.0)
  if alpha == 0 then fail("celu", "alpha must not be 0") end
  return where(x:gt(0), x, (x / alpha):expm1() * alpha)
end

--- min(max(x, 0), 6).
function M.relu6(x)
  x = float_arg("relu6", x)
  return M.hardtanh(x, 0, 6)
end

--- min(max(x, min_val), max_val), defaults -1 and 1 (torch.hardtanh).
function M.hardtanh(x, min_val, max_val)
  x = float_arg("hardtanh", x)
  min_val, max_val = number_arg("hardtanh", "min_val", min_val, -1), number_arg("hardtanh", "max_val", max_val, 1)
  if min_val > max_val then fail("hardtanh", "min_val %s is above max_val %s", min_val, max_val) end
  return where(x:lt(min_val), min_val, where(x:gt(max_val), max_val, x))
end

--- x / 6 + 1/2 clamped to [0, 1] (torch.hardsigmoid).
function M.hardsigmoid(x)
  x = float_arg("hardsigmoid", x)
  return where(x:le(-3), 0, where(x:ge(3), 1, x / 6 + 0.5))
end

--- x * hardsigmoid(x) (torch.hardswish).
function M.hardswish(x)
  x = float_arg("hardswish", x)
  return where(x:le(-3), 0, where(x:ge(3), x, x * (x + 3) / 6))
end

--- x * tanh(softplus(x)).
function M.mish(x)
  x = float_arg("mish", x)
  return x * x:softplus():tanh()
end

--- log(sigmoid(x)) without overflow: min(x, 0) - log1p(e^-|x|).
function M.logsigmoid(x)
  x = float_arg("logsigmoid", x)
  return x:minimum(0) - (-x:abs()):exp():log1p()
end

--- x / (1 + |x|).
function M.softsign(x)
  x = float_arg("softsign", x)
  return x / (x:abs() + 1)
end

--- softmax(-x) along dim (torch.softmin).
function M.softmin(x, dim)
  x = float_arg("softmin", x)
  return (-x):softmax(dim)
end

--- x where x >= 0, weight * x elsewhere; weight broadcasts (a number, one value, or one per
--  channel of dim 2 as torch.nn.PReLU's).
function M.prelu(x, weight)
  x = float_arg("prelu", x)
  if not is_tensor(weight) then
    weight = class.Tensor.full({}, number_arg("prelu", "weight", weight, 0.25), { dtype = x.uop.dtype.name })
  end
  local w = weight
  if #w._shape == 1 and #x._shape >= 2 and w._shape[1] == x._shape[2] and w._shape[1] ~= 1 then
    local view = { 1, w._shape[1] }
    for _ = 3, #x._shape do view[#view + 1] = 1 end
    w = w:reshape(view)
  end
  return where(x:ge(0), x, x * w)
end

return M
