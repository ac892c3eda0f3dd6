-- tcl.onnx.ops.training — the optimizer update ops of the domain ai.onnx.preview.training
-- (Adagrad, Momentum, Adam): one step of each rule on n tensors at once, written from the op
-- documentation. Inputs are R (learning rate), T (update count), then n tensors of each kind;
-- outputs are the n new tensors of each kind. Gradient differentiates the graph with tcl's
-- autograd.
local M = {}

-- the registry files these op types as "<onnx_domain>.<OpType>"
M.onnx_domain = "ai.onnx.preview.training"

-- The node's variadic inputs after R and T as `kinds` lists of n tensors each.
local function groups(ctx, node, kinds)
  local rest = node.ninputs - 2
  if rest <= 0 or rest % kinds ~= 0 then
    ctx:fail("expected R, T and %d groups of n tensors, got %d inputs", kinds, node.ninputs)
  end
  local n = rest // kinds
  local out = {}
  for k = 1, kinds do
    out[k] = {}
    for i = 1, n do out[k][i] = node.inputs[2 + (k - 1) * n + i] end
  end
  return n, out
end

local function scalar(ctx, t, what)
  local v = ctx:numbers(t)
  if not v or #v ~= 1 then ctx:fail("%s must be a scalar", what) end
  return v[1]
end

function M.Adagrad(ctx, node)
  local a = node.attrs
  local decay, epsilon, norm = a.decay_factor or 0.0, a.epsilon or 1e-6, a.norm_coefficient or 0.0
  local r = scalar(ctx, node.inputs[1], "R") / (1 + scalar(ctx, node.inputs[2], "T") * decay)
  local n, g = groups(ctx, node, 3)
  local xs, hs = {}, {}
  for i = 1, n do
    local x, grad, h = g[1][i], g[2][i], g[3][i]
    local regularized = x * norm + grad
    hs[i] = h + regularized * regularized
    xs[i] = x - regularized * r / (hs[i]:sqrt() + epsilon)
  end
  return table.move(hs, 1, n, n + 1, xs)
end

function M.Momentum(ctx, node)
  local a = node.attrs
  local alpha, beta, norm, mode = a.alpha or 0.0, a.beta or 0.0, a.norm_coefficient or 0.0, a.mode or "standard"
  if mode ~= "standard" and mode ~= "nesterov" then
    ctx:fail("mode must be 'standard' or 'nesterov', got '%s'", mode)
  end
  local r = scalar(ctx, node.inputs[1], "R")
  -- the first update (T = 0) takes the whole gradient
  local b = scalar(ctx, node.inputs[2], "T") > 0 and beta or 1.0
  local n, g = groups(ctx, node, 3)
  local xs, vs = {}, {}
  for i = 1, n do
    local x, grad, v = g[1][i], g[2][i], g[3][i]
    local regularized = x * norm + grad
    vs[i] = v * alpha + regularized * b
    if mode == "standard" then
      xs[i] = x - vs[i] * r
    else
      xs[i] = x - (regularized + vs[i] * alpha) * r
    end
  end
  return table.move(vs, 1, n, n + 1, xs)
end

function M.Adam(ctx, node)
  local a = node.attrs
  local alpha, beta, epsilon = a.alpha or 0.9, a.beta or 0.999, a.epsilon or 1e-6
  local norm, norm_post = a.norm_coefficient or 0.0, a.norm_coefficient_post or 0.0
  local r, t = scalar(ctx, node.inputs[1], "R"), scalar(ctx, node.inputs[2], "T")
  -- bias correction from the second update on
  if t > 0 then r = r * math.sqrt(1 - beta ^ t) / (1 - alpha ^ t) end
  local n, g = groups(ctx, node, 4)
  local xs, vs, hs = {}, {}, {}
  for i = 1, n do
    local x, grad, v, h = g[1][i], g[2][i], g[3][i], g[4][i]
    local regularized = x * norm + grad
    vs[i] = v * alpha + regularized * (1 - alpha)
    hs[i] = h * beta + regularized * regularized * (1 - beta)
    xs[i] = (x - vs[i] * r / (hs[i]:sqrt() + epsilon)) * (1 - norm_post)
  end
  local out = table.move(vs, 1, n, n + 1, xs)
  return table.move(hs, 1, n, 2 * n + 1, out)
end

-- The gradient of the graph value named y (of its sum, when it has several elements) with
-- respect to the values named xs, which are also the node's inputs, through tcl's autograd: y
-- was computed from them by the nodes before this one.
function M.Gradient(ctx, node)
  local a = node.attrs
  if type(a.y) ~= "string" or type(a.xs) ~= "table" then ctx:fail("needs the attributes xs and y") end
  if a.zs and #a.zs > 0 then ctx:fail("the zs attribute (inputs held constant) is not supported") end
  local y = ctx.scope[a.y]
  if y == nil then ctx:fail("y '%s' has no value before this node", a.y) end
  if #a.xs ~= node.ninputs then ctx:fail("%d names in xs for %d inputs", #a.xs, node.ninputs) end
  local grads = table.pack(y:gradient(table.unpack(node.inputs, 1, node.ninputs)))
  return { table.unpack(grads, 1, node.ninputs) }
end

return M
