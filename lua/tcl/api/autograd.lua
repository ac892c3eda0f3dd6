-- tcl.api.autograd — gradients in the Tensor API: which tensors require them, backward and
-- gradient, detach and no_grad. Layer: lua/tcl/api (the engine is tcl.api.gradients, the
-- derivatives are the rule file tcl.patterns.gradient).
--
--   local w = Tensor.randn(3, 2, { requires_grad = true })
--   local loss = (x:matmul(w) - y):square():mean()
--   loss:backward()                -- w.grad: d loss / d w, added to what w.grad held
--   local gw = loss:gradient(w)    -- the same, without touching w.grad
--
-- Requiring gradients is a flag of the tensor (t._needs_grad) that every op passes on to its
-- result (tcl.api.nodes), so t.requires_grad is true for anything computed from a leaf. A
-- leaf is a tensor the user marked: it must be a node of its own, since nodes are
-- hash-consed (two `ones(3)` are one node), so marking a tensor that is not stored in a
-- buffer yet realizes it first. Under tcl.no_grad, flagged inputs enter the graph detached.
local core = require "tcl.core"
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local nodes = require "tcl.api.nodes"
local gradients = require "tcl.api.gradients"
local buffers = require "tcl.schedule.buffers"

local is_tensor, fail = class.is_tensor, check.fail
local tensor_arg = check.tensor
local M = {}

local leaves = setmetatable({}, { __mode = "k" }) -- the tensors marked requires_grad, weakly

--- Marks t as a leaf that requires gradients (flag true, the default) or clears the mark
-- (false). Only float tensors can require gradients. Returns t.
function M.requires_grad_(t, flag)
  tensor_arg("requires_grad_", t)
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then fail("requires_grad_", "flag must be a boolean, got %s", check.type_name(flag)) end
  if flag then
    if rawget(t, "_needs_grad") then return t end -- a leaf already, or computed from one
    if not t.uop.dtype.is_float then
      fail("requires_grad_", "only float tensors can require gradients, got a %s tensor", t.uop.dtype.name)
    end
    if not buffers.viewed(t.uop) then class.Tensor.realize_all(t) end
    rawset(t, "_needs_grad", true)
    rawset(t, "_leaf", true)
    leaves[t] = true
  else
    if rawget(t, "_needs_grad") and not rawget(t, "_leaf") then
      fail("requires_grad_", "the tensor is computed from tensors that require gradients; use detach() for a "
        .. "tensor without them")
    end
    rawset(t, "_needs_grad", nil)
    rawset(t, "_leaf", nil)
    leaves[t] = nil
  end
  return t
end

--- The same values, cut off from the graph: no gradient flows through it.
function M.detach(t)
  tensor_arg("detach", t)
  class.note_use(t)
  return class.wrap(core.uop("DETACH", t.uop.dtype, { t.uop }), nodes.copy_shape(t), t.device)
end

--- Calls fn(...) with gradient tracking off and returns its results (tcl.no_grad): tensors
-- computed inside do not require gradients, and no gradient flows into them later.
function M.no_grad(fn, ...)
  if type(fn) ~= "function" then fail("no_grad", "expected a function, got %s", check.type_name(fn)) end
  return class.with_grad_enabled(false, fn, ...)
end

--- Calls fn(...) with gradient tracking on (inside tcl.no_grad, say).
function M.enable_grad(fn, ...)
  if type(fn) ~= "function" then fail("enable_grad", "expected a function, got %s", check.type_name(fn)) end
  return class.with_grad_enabled(true, fn, ...)
end

-- The seed of a backward pass from t: `grad` (a tensor of t's shape), or 1 for a one-element t.
local function seed_of(fn, t, grad)
  if grad == nil then
    if check.numel(t._shape) ~= 1 then
      fail(fn, "needs a gradient argument for a tensor of shape %s (only a one-element tensor gets 1 by default)",
        check.shape_str(t._shape))
    end
    return nodes.const(1, t.uop.dtype, nodes.copy_shape(t), t.device)
  end
  if not is_tensor(grad) then fail(fn, "the gradient must be a tensor, got %s", check.type_name(grad)) end
  if not nodes.same_shape(grad._shape, t._shape) then
    fail(fn, "the gradient has shape %s, the tensor %s", check.shape_str(grad._shape), check.shape_str(t._shape))
  end
  if grad.device ~= t.device then fail(fn, "the gradient is on %s, the tensor on %s", grad.device, t.device) end
  return nodes.cast(M.detach(grad), t.uop.dtype)
end

local function check_differentiable(fn, t)
  if not t.uop.dtype.is_float then fail(fn, "needs a float tensor, got %s", t.uop.dtype.name) end
  if not rawget(t, "_needs_grad") then
    fail(fn, "the tensor does not require gradients: no tensor it is computed from has requires_grad set "
      .. "(or it was computed under tcl.no_grad)")
  end
end

--- Computes the gradient of t (a one-element tensor, or any shape with `grad` of t's shape)
-- with respect to every leaf that requires gradients and that t is computed from, and adds
-- it to the leaf's .grad (lazy; `t.grad = nil` clears). Returns nothing.
function M.backward(t, grad)
  tensor_arg("backward", t)
  check_differentiable("backward", t)
  local seed = seed_of("backward", t, grad)
  local targets, holders = {}, {}
  for leaf in pairs(leaves) do
    local node = leaf.uop
    if not holders[node] then
      holders[node] = {}
      targets[#targets + 1] = node
    end
    local list = holders[node]
    list[#list + 1] = leaf
  end
  if #targets == 0 then return end
  local grads = gradients.compute(t.uop, seed, targets, t.device)
  for i, node in ipairs(targets) do
    local g = grads[i]
    if g then
      for _, leaf in ipairs(holders[node]) do
        local have = rawget(leaf, "grad")
        rawset(leaf, "grad", have and have:add(g) or g)
      end
    end
  end
end

--- The gradients of t with respect to the tensors given (any tensors t is computed from, not
-- only leaves), without touching .grad: t:gradient(a, b) -> da, db. A tensor t does not depend
-- on gets zeros. A last argument that is a table of options: { grad = seed tensor (for a t of
-- several elements), create_graph = true (the gradients require gradients themselves: for
-- higher derivatives) }.
function M.gradient(t, ...)
  tensor_arg("gradient", t)
  local wrt = table.pack(...)
  local opts = {}
  if wrt.n > 0 and type(wrt[wrt.n]) == "table" and not is_tensor(wrt[wrt.n]) then
    opts = check.options("gradient", wrt[wrt.n], { grad = true, create_graph = true })
    wrt.n = wrt.n - 1
  end
  if wrt.n == 0 then fail("gradient", "needs the tensors to differentiate with respect to") end
  check_differentiable("gradient", t)
  local targets = {}
  for i = 1, wrt.n do
    local a = wrt[i]
    if not is_tensor(a) then fail("gradient", "argument %d is %s, not a tensor", i, check.type_name(a)) end
    if not a.uop.dtype.is_float then fail("gradient", "argument %d is a %s tensor; only float tensors have "
      .. "gradients", i, a.uop.dtype.name) end
    targets[i] = a.uop
  end
  local grads = gradients.compute(t.uop, seed_of("gradient", t, opts.grad), targets, t.device)
  local out = {}
  for i = 1, wrt.n do
    local a = wrt[i]
    local g = grads[i] or nodes.const(0, a.uop.dtype, nodes.copy_shape(a), a.device)
    if opts.create_graph then rawset(g, "_needs_grad", true) end
    out[i] = g
  end
  return table.unpack(out, 1, wrt.n)
end

return M
