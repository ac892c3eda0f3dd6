-- tcl.api.attention — tcl.nn.MultiheadAttention: PyTorch's multi-head attention layer with its
-- parameter names, masks and returned weights. Layer: lua/tcl/api. Installed into tcl.nn by
-- tcl.api.layers, whose layer helpers it uses.
--
--   local mha = nn.MultiheadAttention(16, 4, { batch_first = true })
--   local out, weights = mha(q, k, v, { key_padding_mask = pad, is_causal = true })
--
-- The scores are computed here rather than through Tensor.scaled_dot_product_attention because
-- PyTorch's layer returns the attention weights and reads bool masks the other way round
-- (true = not allowed); the softmax is Tensor.softmax.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local init = require "tcl.api.init_weights"
local nodes = require "tcl.api.nodes"
local Tensor = require "tcl.api.tensor"

local fail, shape_str, is_tensor = check.fail, check.shape_str, class.is_tensor
local FN = "nn.MultiheadAttention"

return function(M, helpers)
  local layer_class, parameter = helpers.layer_class, helpers.parameter
  local positive_integer, boolean, placement, value_str =
    helpers.positive_integer, helpers.boolean, helpers.placement, helpers.value_str

  local function tensor_input(x, what)
    if not is_tensor(x) then fail(FN, "expected a tensor %s, got %s", what, check.type_name(x)) end
    return x
  end

  -- A mask becomes an additive float mask: bool true (not allowed) -> -inf, false -> 0.
  local function additive(mask, dtype)
    if mask.dtype.is_bool then return mask:where(-math.huge, 0):cast(dtype) end
    if not mask.dtype.is_float then
      fail(FN, "masks must be bool or float, got %s", mask.dtype.name)
    end
    return mask:cast(dtype)
  end

  --- MultiheadAttention(embed_dim, num_heads, {dropout = 0, bias = true, batch_first = false,
  --  kdim = embed_dim, vdim = embed_dim, add_bias_kv = false, dtype =, device =}).
  --  mha(query, key, value, {key_padding_mask, attn_mask, need_weights = true,
  --  average_attn_weights = true, is_causal = false}) with query (L, N, E), key (S, N, kdim),
  --  value (S, N, vdim) ((N, L, E) ... when batch_first; unbatched (L, E), (S, kdim), (S, vdim))
  --  returns the output shaped like query and the attention weights (N, L, S) (averaged over
  --  heads; (N, num_heads, L, S) when average_attn_weights = false; nil when need_weights =
  --  false). Masks are bool (true = not allowed, as in PyTorch) or float (added to the scores):
  --  key_padding_mask (N, S) or (S); attn_mask (L, S) or (N * num_heads, L, S). is_causal masks
  --  the keys after each query (on top of attn_mask, when given). Dropout on the weights in
  --  training mode only. Parameters as PyTorch's: in_proj_weight (3E, E) and in_proj_bias (3E),
  --  or q_proj_weight, k_proj_weight, v_proj_weight when kdim or vdim differ from E;
  --  out_proj.weight (E, E), out_proj.bias (E); bias_k, bias_v (1, 1, E) with add_bias_kv.
  --  Self-attention (one tensor passed as query, key and value) projects with one product of the
  --  whole in_proj_weight and splits it, as PyTorch does.
  M.MultiheadAttention = layer_class("MultiheadAttention", function(fn, embed_dim, num_heads, opts)
    embed_dim = positive_integer(fn, "embed_dim", embed_dim)
    num_heads = positive_integer(fn, "num_heads", num_heads)
    if embed_dim % num_heads ~= 0 then
      fail(fn, "embed_dim %d must be divisible by num_heads %d", embed_dim, num_heads)
    end
    opts = check.options(fn, opts, { dropout = true, bias = true, batch_first = true, kdim = true, vdim = true,
      add_bias_kv = true, dtype = true, device = true })
    local p = opts.dropout or 0
    if type(p) ~= "number" or not (p >= 0 and p < 1) then
      fail(fn, "dropout must be a number in [0, 1), got %s", type(p) == "number" and value_str(p) or check.type_name(p))
    end
    local where = placement(fn, opts)
    local E = embed_dim
    local layer = {
      embed_dim = E, num_heads = num_heads, dropout = p,
      bias = boolean(fn, "bias", opts.bias, true),
      batch_first = boolean(fn, "batch_first", opts.batch_first, false),
      kdim = opts.kdim == nil and E or positive_integer(fn, "kdim", opts.kdim),
      vdim = opts.vdim == nil and E or positive_integer(fn, "vdim", opts.vdim),
      add_bias_kv = boolean(fn, "add_bias_kv", opts.add_bias_kv, false),
    }
    local place = { dtype = where.dtype, device = where.device }
    -- PyTorch's init: xavier_uniform projections, zero biases, the output projection as a Linear
    if layer.kdim == E and layer.vdim == E then
      layer.in_proj_weight = parameter(init.xavier_uniform({ 3 * E, E }, place))
    else
      layer.q_proj_weight = parameter(init.xavier_uniform({ E, E }, place))
      layer.k_proj_weight = parameter(init.xavier_uniform({ E, layer.kdim }, place))
      layer.v_proj_weight = parameter(init.xavier_uniform({ E, layer.vdim }, place))
    end
    if layer.bias then layer.in_proj_bias = parameter(init.zeros({ 3 * E }, place)) end
    layer.out_proj = M.Linear(E, E, { bias = layer.bias, dtype = where.dtype, device = where.device })
    if layer.bias then layer.out_proj.bias = parameter(init.zeros({ E }, place)) end
    if layer.add_bias_kv then
      layer.bias_k = parameter(init.xavier_normal({ 1, 1, E }, place))
      layer.bias_v = parameter(init.xavier_normal({ 1, 1, E }, place))
    end
    return layer
  end, function(self, query, key, value, opts)
    tensor_input(query, "query")
    tensor_input(key, "key")
    tensor_input(value, "value")
    opts = check.options(FN, opts, { key_padding_mask = true, attn_mask = true, need_weights = true,
      average_attn_weights = true, is_causal = true })
    local need_weights = boolean(FN, "need_weights", opts.need_weights, true)
    local average = boolean(FN, "average_attn_weights", opts.average_attn_weights, true)
    local causal = boolean(FN, "is_causal", opts.is_causal, false)
    local E, heads = self.embed_dim, self.num_heads
    local qs, ks, vs = query._shape, key._shape, value._shape
    local rank = #qs
    local fits = (rank == 3 or rank == 2) and #ks == rank and #vs == rank and qs[rank] == E
      and ks[rank] == self.kdim and vs[rank] == self.vdim
    if fits and rank == 3 then
      local b = self.batch_first and 1 or 2
      local s = 3 - b
      fits = ks[b] == qs[b] and vs[b] == qs[b] and ks[s] == vs[s]
    elseif fits then
      fits = ks[1] == vs[1]
    end
    if not fits then
      local layout = self.batch_first and "(N, %s, %d)" or "(%s, N, %d)"
      fail(FN, "expected query %s, key %s and value %s (or unbatched (L, %d), (S, %d), (S, %d)), got %s, %s and %s",
        string.format(layout, "L", E), string.format(layout, "S", self.kdim), string.format(layout, "S", self.vdim),
        E, self.kdim, self.vdim, shape_str(qs), shape_str(ks), shape_str(vs))
    end
    local unbatched = rank == 2
    -- self-attention projects once with the whole in_proj_weight and splits the result, so the
    -- weight's gradient is one reduction over the tokens instead of three gated ones
    local self_attention = query == key and key == value and self.in_proj_weight ~= nil
    -- (L, N, E) from here on
    if unbatched then
      query, key, value = query:unsqueeze(2), key:unsqueeze(2), value:unsqueeze(2)
    elseif self.batch_first then
      query, key, value = query:transpose(1, 2), key:transpose(1, 2), value:transpose(1, 2)
    end
    local L, N, S = query._shape[1], query._shape[2], key._shape[1]
    local q, k, v
    if self_attention then
      local qkv = query:linear(self.in_proj_weight:transpose(1, 2), self.in_proj_bias):chunk(3, -1)
      q, k, v = qkv[1], qkv[2], qkv[3]
    else
      local w_q, w_k, w_v
      if self.in_proj_weight then
        local w = self.in_proj_weight:chunk(3, 1)
        w_q, w_k, w_v = w[1], w[2], w[3]
      else
        w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
      end
      local b_q, b_k, b_v
      if self.in_proj_bias then
        local b = self.in_proj_bias:chunk(3, 1)
        b_q, b_k, b_v = b[1], b[2], b[3]
      end
      q = query:linear(w_q:transpose(1, 2), b_q)
      k = key:linear(w_k:transpose(1, 2), b_k)
      v = value:linear(w_v:transpose(1, 2), b_v)
    end

    -- masks, checked against the key length before bias_k adds a key
    local mask
    if opts.attn_mask ~= nil then
      local m = tensor_input(opts.attn_mask, "attn_mask")
      local ms = m._shape
      if #ms == 2 and ms[1] == L and ms[2] == S then
        mask = additive(m, q.dtype):reshape({ 1, 1, L, S })
      elseif #ms == 3 and ms[1] == N * heads and ms[2] == L and ms[3] == S then
        mask = additive(m, q.dtype):reshape({ N, heads, L, S })
      else
        fail(FN, "attn_mask must have shape (%d, %d) or (%d, %d, %d) (L, S or N * num_heads, L, S), got %s", L, S,
          N * heads, L, S, shape_str(ms))
      end
    end
    if opts.key_padding_mask ~= nil then
      local m = tensor_input(opts.key_padding_mask, "key_padding_mask")
      local want = unbatched and { S } or { N, S }
      if not check.same_shape(m._shape, want) then
        fail(FN, "key_padding_mask must have shape %s, got %s", shape_str(want), shape_str(m._shape))
      end
      local padding = additive(m, q.dtype):reshape({ N, 1, 1, S })
      mask = mask and mask:add(padding) or padding
    end
    if causal then
      local band = nodes.band_mask(L, S, -math.huge, 0, q.device)
      local causal_mask = band:where(0, -math.huge):cast(q.dtype):reshape({ 1, 1, L, S })
      mask = mask and mask:add(causal_mask) or causal_mask
    end
    if self.add_bias_kv then
      k = Tensor.cat({ k, self.bias_k:expand({ 1, N, E }) }, 1)
      v = Tensor.cat({ v, self.bias_v:expand({ 1, N, E }) }, 1)
      -- the added key is allowed for every query
      if mask then
        mask = Tensor.cat({ mask:expand({ N, heads, L, S }),
          Tensor.zeros({ N, heads, L, 1 }, { dtype = mask.dtype, device = mask.device }) }, 4)
      end
      S = S + 1
    end

    -- heads: (L, N, E) -> (N, heads, L, E / heads)
    local head_dim = E // heads
    local function split_heads(t, length)
      return t:reshape({ length, N, heads, head_dim }):permute(2, 3, 1, 4)
    end
    q, k, v = split_heads(q, L), split_heads(k, S), split_heads(v, S)
    local scores = q:matmul(k:transpose(-1, -2)):div(math.sqrt(head_dim))
    if mask then scores = scores:add(mask) end
    local weights = scores:softmax(-1):dropout(self.dropout)
    local out = weights:matmul(v):permute(3, 1, 2, 4):reshape({ L, N, E })
    out = self.out_proj(out)
    if unbatched then out = out:squeeze(2)
    elseif self.batch_first then out = out:transpose(1, 2) end
    if not need_weights then return out, nil end
    if average then weights = weights:mean(2) end
    if unbatched then weights = weights:squeeze(1) end
    return out, weights
  end, function(self)
    return string.format("embed_dim=%d, num_heads=%d, dropout=%s, batch_first=%s", self.embed_dim, self.num_heads,
      value_str(self.dropout), tostring(self.batch_first))
  end)
end
