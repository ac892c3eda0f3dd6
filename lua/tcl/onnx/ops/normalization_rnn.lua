-- tcl.onnx.ops.normalization_rnn — ONNX's normalizations (LayerNormalization, BatchNormalization,
-- InstanceNormalization, MeanVarianceNormalization), built from tcl's reductions and elementwise
-- ops. Statistics are population ones (divide by the count), as ONNX defines them.
local Tensor = require "tcl.api.tensor"

local M = {}

local function dtype_of(t) return tostring(t.dtype) end

-- Mean and population variance of x over the 1-based dims, kept as size-1 dims.
local function moments(x, dims)
  local mean = x:mean(dims, true)
  local centered = x - mean
  return mean, (centered * centered):mean(dims, true), centered
end

-- A per-channel (C) parameter reshaped to broadcast against an N x C x D1 ... input.
local function per_channel(p, rank)
  local shape = { 1, p:size()[1] }
  for _ = 3, rank do shape[#shape + 1] = 1 end
  return p:reshape(shape)
end

function M.LayerNormalization(ctx, node)
  local x, scale, bias = node.inputs[1], node.inputs[2], node.inputs[3]
  local rank = #x:size()
  local axis = node.attrs.axis or -1
  if axis < 0 then axis = axis + rank end
  if axis < 0 or axis >= rank then ctx:fail("axis %d is out of range for rank %d", node.attrs.axis, rank) end
  local eps = node.attrs.epsilon or 1e-5
  local stash = (node.attrs.stash_type or 1) == 1 and "float32" or dtype_of(x)
  local xs = dtype_of(x) == stash and x or x:cast(stash)
  local dims = {}
  for d = axis + 1, rank do dims[#dims + 1] = d end
  local mean, var, centered = moments(xs, dims)
  local inv_std = (var + eps):sqrt():reciprocal()
  local y = centered * inv_std
  if dtype_of(y) ~= dtype_of(x) then y = y:cast(dtype_of(x)) end
  y = y * scale
  if bias then y = y + bias end
  return y, mean, inv_std
end

function M.BatchNormalization(ctx, node)
  local x, scale, bias, mean, var = table.unpack(node.inputs, 1, 5)
  local rank = #x:size()
  local eps = node.attrs.epsilon or 1e-5
  local training = (node.attrs.training_mode or 0) ~= 0
  if not training then
    local inv = (per_channel(var, rank) + eps):sqrt():reciprocal()
    return (x - per_channel(mean, rank)) * inv * per_channel(scale, rank) + per_channel(bias, rank)
  end
  if rank < 2 then ctx:fail("training mode needs an input of rank >= 2, got rank %d", rank) end
  local momentum = node.attrs.momentum or 0.9
  local dims = { 1 }
  for d = 3, rank do dims[#dims + 1] = d end
  local batch_mean, batch_var, centered = moments(x, dims)
  local y = centered * (batch_var + eps):sqrt():reciprocal() * per_channel(scale, rank)
    + per_channel(bias, rank)
  local c = { x:size()[2] }
  local running_mean = mean * momentum + batch_mean:reshape(c) * (1 - momentum)
  local running_var = var * momentum + batch_var:reshape(c) * (1 - momentum)
  return y, running_mean, running_var
end

function M.InstanceNormalization(ctx, node)
  local x, scale, bias = node.inputs[1], node.inputs[2], node.inputs[3]
  local rank = #x:size()
  if rank < 3 then ctx:fail("needs an input of rank >= 3 (N x C x D1 ...), got rank %d", rank) end
  local eps = node.attrs.epsilon or 1e-5
  local dims = {}
  for d = 3, rank do dims[#dims + 1] = d end
  local _, var, centered = moments(x, dims)
  return centered * (var + eps):sqrt():reciprocal() * per_channel(scale, rank) + per_channel(bias, rank)
end

function M.MeanVarianceNormalization(ctx, node)
  local x = node.inputs[1]
  local rank = #x:size()
  local dims = {}
  for _, a in ipairs(node.attrs.axes or { 0, 2, 3 }) do
    local d = a < 0 and a + rank or a
    if d < 0 or d >= rank then ctx:fail("axis %d is out of range for rank %d", a, rank) end
    dims[#dims + 1] = d + 1
  end
  local _, var, centered = moments(x, dims)
  return centered / (var + 1e-9):sqrt()
end

-- LRN: each element divided by (bias + alpha / size * the sum of squares over a window of
-- channels)^beta; the window sum is a banded C x C matrix times the squares (N, C, rest).
function M.LRN(ctx, node)
  local x = node.inputs[1]
  local shape = x:size()
  if #shape < 3 then ctx:fail("needs an input of rank >= 3 (N x C x D1 ...), got rank %d", #shape) end
  local size = node.attrs.size
  if not size or size < 1 then ctx:fail("attribute size must be a positive integer") end
  local alpha, beta, bias = node.attrs.alpha or 1e-4, node.attrs.beta or 0.75, node.attrs.bias or 1.0
  local c = shape[2]
  local below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
  local band = {}
  for row = 1, c do
    for col = 1, c do
      band[#band + 1] = (col >= row - below and col <= row + above) and 1 or 0
    end
  end
  local rest = 1
  for d = 3, #shape do rest = rest * shape[d] end
  local squares = (x * x):reshape({ shape[1], c, rest })
  local window = Tensor(band, { dtype = dtype_of(x) }):reshape({ 1, c, c }):matmul(squares):reshape(shape)
  return x / (window * (alpha / size) + bias):pow(beta)
end

-- The recurrent layers (RNN, GRU, LSTM), unrolled over the sequence: per direction, the gates of
-- step t are x_t W^T + h R^T + Wb + Rb (ONNX's gate orders: LSTM i o f c, GRU z r h).
local activations = {
  tanh = function(t) return t:tanh() end,
  sigmoid = function(t) return t:sigmoid() end,
  relu = function(t) return t:relu() end,
}

local function activation_list(ctx, node, defaults, directions)
  local names = node.attrs.activations
  local per = #defaults
  local list = {}
  for d = 1, directions do
    list[d] = {}
    for k = 1, per do
      local name = names and names[(d - 1) * per + k] or defaults[k]
      local f = activations[name:lower()]
      if not f then ctx:fail("activation %s is not supported", name) end
      list[d][k] = f
    end
  end
  return list
end

-- Row d of a (num_directions, ...) tensor, without its leading dim.
local function direction(t, d)
  local shape = t:size()
  local rest = {}
  for k = 2, #shape do rest[#rest + 1] = shape[k] end
  return t:narrow(1, d, 1):reshape(rest)
end

local function recurrent(gates, defaults, step)
  return function(ctx, node)
    local x, w, r, b = node.inputs[1], node.inputs[2], node.inputs[3], node.inputs[4]
    local seq_lens, initial_h = node.inputs[5], node.inputs[6]
    local layout = node.attrs.layout or 0
    if layout == 1 then x = x:permute(2, 1, 3) end
    local shape = x:size()
    local steps, batch = shape[1], shape[2]
    local hidden = node.attrs.hidden_size or r:size()[3]
    local dir_name = node.attrs.direction or "forward"
    local directions = dir_name == "bidirectional" and 2 or 1
    if node.attrs.clip then ctx:fail("attribute clip is not supported") end
    local acts = activation_list(ctx, node, defaults, directions)
    local dtype = dtype_of(x)
    local lens
    if seq_lens then
      lens = ctx:ints(seq_lens)
      local full = true
      for _, l in ipairs(lens) do if l ~= steps then full = false end end
      if full then lens = nil end
    end
    if lens and directions == 2 or lens and dir_name == "reverse" then
      ctx:fail("sequence_lens shorter than the sequence are supported only going forward")
    end
    local ys, last_h, last_c = {}, {}, {}
    for d = 1, directions do
      local reverse = dir_name == "reverse" or d == 2
      local wd, rd = direction(w, d):permute(2, 1), direction(r, d):permute(2, 1)
      local bias
      if b then
        local bd = direction(b, d)
        bias = bd:narrow(1, 1, gates * hidden) + bd:narrow(1, gates * hidden + 1, gates * hidden)
      end
      local state = {
        h = initial_h and direction(initial_h, d) or Tensor.zeros({ batch, hidden }, { dtype = dtype }),
        c = node.inputs[7] and direction(node.inputs[7], d) or Tensor.zeros({ batch, hidden }, { dtype = dtype }),
        peephole = node.inputs[8] and direction(node.inputs[8], d),
        r = rd, hidden = hidden, acts = acts[d],
        linear_before_reset = (node.attrs.linear_before_reset or 0) ~= 0,
        wbias = b and direction(b, d):narrow(1, 1, gates * hidden),
        rb = b and direction(b, d):narrow(1, gates * hidden + 1, gates * hidden),
      }
      local outputs = {}
      for k = 1, steps do
        local t = reverse and steps - k + 1 or k
        local xt = x:narrow(1, t, 1):reshape({ shape[2], shape[3] })
        local xw = xt:matmul(wd)
        local h, c = step(state, xw, bias)
        if lens then
          local live = {}
          for i = 1, batch do live[i] = t <= lens[i] and 1 or 0 end
          local mask = Tensor(live, { dtype = dtype }):reshape({ batch, 1 })
          h = h * mask + state.h * (1 - mask)
          if c then c = c * mask + state.c * (1 - mask) end
          outputs[t] = h * mask
        else
          outputs[t] = h
        end
        state.h, state.c = h, c
      end
      ys[d] = Tensor.stack(outputs, 1) -- (steps, batch, hidden)
      last_h[d], last_c[d] = state.h, state.c
    end
    local y = Tensor.stack(ys, 2) -- (steps, directions, batch, hidden)
    local y_h = Tensor.stack(last_h, 1)
    local y_c = gates == 4 and Tensor.stack(last_c, 1) or nil
    if layout == 1 then
      y = y:permute(3, 1, 2, 4)
      y_h = y_h:permute(2, 1, 3)
      if y_c then y_c = y_c:permute(2, 1, 3) end
    end
    return y, y_h, y_c
  end
end

M.RNN = recurrent(1, { "Tanh" }, function(s, xw, bias)
  local pre = xw + s.h:matmul(s.r)
  if bias then pre = pre + bias end
  return s.acts[1](pre)
end)

M.GRU = recurrent(3, { "Sigmoid", "Tanh" }, function(s, xw)
  local n = s.hidden
  local hr = s.h:matmul(s.r)
  local function part(t, k) return t:narrow(2, (k - 1) * n + 1, n) end
  local function bpart(t, k) return t and t:narrow(1, (k - 1) * n + 1, n) end
  local wbias, rbias = s.wbias, s.rb
  local z = part(xw, 1) + part(hr, 1)
  local r = part(xw, 2) + part(hr, 2)
  if wbias then
    z = z + bpart(wbias, 1) + bpart(rbias, 1)
    r = r + bpart(wbias, 2) + bpart(rbias, 2)
  end
  z, r = s.acts[1](z), s.acts[1](r)
  local candidate
  if s.linear_before_reset then
    local rec = part(hr, 3)
    if rbias then rec = rec + bpart(rbias, 3) end
    candidate = part(xw, 3) + r * rec
  else
    local rr = (r * s.h):matmul(s.r:narrow(2, 2 * n + 1, n))
    if rbias then rr = rr + bpart(rbias, 3) end
    candidate = part(xw, 3) + rr
  end
  if wbias then candidate = candidate + bpart(wbias, 3) end
  candidate = s.acts[2](candidate)
  return (1 - z) * candidate + z * s.h
end)

M.LSTM = recurrent(4, { "Sigmoid", "Tanh", "Tanh" }, function(s, xw, bias)
  local n = s.hidden
  local pre = xw + s.h:matmul(s.r)
  if bias then pre = pre + bias end
  local function part(k) return pre:narrow(2, (k - 1) * n + 1, n) end
  local i, o, f, g = part(1), part(2), part(3), part(4)
  local p = s.peephole
  if p then
    i = i + p:narrow(1, 1, n) * s.c
    f = f + p:narrow(1, 2 * n + 1, n) * s.c
  end
  i, f, g = s.acts[1](i), s.acts[1](f), s.acts[2](g)
  local c = f * s.c + i * g
  if p then o = o + p:narrow(1, n + 1, n) * c end
  o = s.acts[1](o)
  return o * s.acts[3](c), c
end)

return M
