-- spec/support/models.lua — model graphs built with the Tensor API, shared by specs and
-- benchmarks that schedule whole networks: a GPT-2 transformer layer and an MLP. Each builder
-- returns the output tensor (lazy, not realized) and the tensors it reads, so a caller can
-- schedule the graph, run it, or rebuild the same computation in spec/support/reference.lua.
-- Inputs are realized random tensors; with opts.empty they are fresh buffers of unspecified
-- contents instead (the same graph, for callers that only schedule it: no values are made).
local M = {}

--- The input maker of a builder: realized random values in [-scale, scale), or empty buffers.
local function inputs(Tensor, opts)
  if opts and opts.empty then return function(_, ...) return Tensor.empty(...) end end
  return function(scale, ...) return Tensor.rand(...):sub(0.5):mul(2 * scale):realize() end
end

--- The sizes of GPT-2 small's layer (d_model 768, 12 heads, MLP 4 x d_model), at sequence
-- length 128 and batch 1.
M.GPT2_SMALL = { batch = 1, seq = 128, d_model = 768, heads = 12, hidden = 3072 }

--- x * weight + bias over the last dim: the affine part of GPT-2's layernorm.
local function affine_layernorm(x, weight, bias)
  return x:layernorm():mul(weight):add(bias)
end

--- One pre-layernorm GPT-2 block: h = x + attn(ln1(x)), out = h + mlp(ln2(h)), with causal
-- self-attention through one qkv projection (d -> 3d) split into heads, an output
-- projection (d -> d), an MLP d -> hidden -> d with GELU, and biases everywhere. Weights
-- are (in x out) as Tensor.linear takes them, scaled so the activations stay of order 1.
-- Tensor: the Tensor class; sizes: { batch, seq, d_model, heads, hidden }; opts: { empty }.
-- Returns out, { x =, <weight name> = ... } (every tensor the graph reads).
function M.gpt2_layer(Tensor, sizes, opts)
  local B, T, D, HID = sizes.batch, sizes.seq, sizes.d_model, sizes.hidden
  local input = inputs(Tensor, opts)
  local function weight(rows, cols) return input(1 / math.sqrt(rows), rows, cols) end
  local function vector(n) return input(0.5, n) end
  local p = {
    x = input(1, B, T, D),
    ln1_w = vector(D), ln1_b = vector(D),
    qkv_w = weight(D, 3 * D), qkv_b = vector(3 * D),
    proj_w = weight(D, D), proj_b = vector(D),
    ln2_w = vector(D), ln2_b = vector(D),
    fc_w = weight(D, HID), fc_b = vector(HID),
    out_w = weight(HID, D), out_b = vector(D),
  }
  return M.gpt2_layer_on(Tensor, sizes, p), p
end

--- The same block on given tensors p = { x =, ln1_w =, ... } (gpt2_layer's second result, or
-- new ones of the same shapes): for callers that run the layer on new inputs (tcl.jit).
function M.gpt2_layer_on(_, sizes, p)
  local B, T, D, H = sizes.batch, sizes.seq, sizes.d_model, sizes.heads
  local Dh = D // H
  local x = p.x
  local qkv = affine_layernorm(x, p.ln1_w, p.ln1_b):linear(p.qkv_w, p.qkv_b)           -- (B, T, 3D)
  local heads = {}
  for i, part in ipairs(qkv:split(D, 3)) do                                              -- q, k, v
    heads[i] = part:reshape(B, T, H, Dh):transpose(2, 3)                                 -- (B, H, T, Dh)
  end
  local attn = heads[1]:scaled_dot_product_attention(heads[2], heads[3], nil, true)
  attn = attn:transpose(2, 3):reshape(B, T, D)
  local h = x:add(attn:linear(p.proj_w, p.proj_b))
  local mlp = affine_layernorm(h, p.ln2_w, p.ln2_b):linear(p.fc_w, p.fc_b):gelu():linear(p.out_w, p.out_b)
  return h:add(mlp)
end

--- The 784-256-10 MLP's forward pass on a batch, then a softmax over the classes:
-- softmax(relu(x @ w1 + b1) @ w2 + b2). sizes: { batch, input, hidden, classes }.
-- opts: { empty }. Returns the probabilities and { x =, w1 =, b1 =, w2 =, b2 = }.
M.MNIST_MLP = { batch = 128, input = 784, hidden = 256, classes = 10 }

function M.mlp(Tensor, sizes, opts)
  local input = inputs(Tensor, opts)
  local function weight(rows, cols) return input(1 / math.sqrt(rows), rows, cols) end
  local p = {
    x = input(1, sizes.batch, sizes.input),
    w1 = weight(sizes.input, sizes.hidden), b1 = input(0.5, sizes.hidden),
    w2 = weight(sizes.hidden, sizes.classes), b2 = input(0.5, sizes.classes),
  }
  local logits = p.x:linear(p.w1, p.b1):relu():linear(p.w2, p.b2)
  return logits:softmax(-1), p
end

return M
