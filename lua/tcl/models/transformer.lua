-- tcl.models.transformer — decoder-only transformers, GPT-2 and LLaMA, with Hugging Face's
-- parameter names, loaded from safetensors or GGUF checkpoints. Layer: lua/tcl/models (a user
-- of the Tensor API: it builds Tensor expressions and never reaches into the scheduler).
--
--   local transformer = require "tcl.models.transformer"
--   local model = transformer.random(transformer.gpt2_124m())      -- random weights, real layout
--   local model = transformer.from_safetensors("model.safetensors", config)
--   local model, metadata = transformer.from_gguf("model.gguf")
--   local logits = model:forward(tokens, 1)       -- tokens (batch, T) 0-based ids: (batch, T, vocab)
--   logits = model:forward(next_tokens, T + 1)    -- later positions read the KV cache
--
-- The architectures, as Hugging Face's published models define them:
--   gpt2: token and learned position embeddings; per layer x + attn(ln_1(x)), then
--     x + mlp(ln_2(x)) with LayerNorm (weight and bias), attention through one fused c_attn
--     projection (q, k, v side by side), GELU's tanh approximation in the MLP; ln_f, then the
--     logits through the token embedding (tied lm_head). Its projections are Conv1D layers,
--     whose weights are stored (in, out): x:matmul(w) + b.
--   llama: token embedding; per layer x + attn(rmsnorm(x)), x + mlp(rmsnorm(x)) with RMSNorm
--     (weight only), rotary position embeddings on q and k in HF's rotate-half convention
--     (dims i and i + head_dim/2 form a pair, frequency rope_theta^(-2i/head_dim)), grouped-query
--     attention (n_kv_heads key/value heads, each shared by n_heads / n_kv_heads query heads),
--     the SwiGLU MLP down(silu(gate(x)) * up(x)); model.norm, then lm_head. Its projections are
--     nn.Linear weights, stored (out, in): x:matmul(w:transpose(1, 2)). No biases.
-- Weights are whatever tensors the checkpoint gives (float32 by default; a GGUF weight stored
-- quantized is a lazy dequantization, which the matmul that uses it reads block by block).
--
-- Parameter names (model.weights, a flat table) are HF's: for gpt2 "wte.weight", "wpe.weight",
-- "h.N.ln_1.weight", "h.N.attn.c_attn.weight", ... (a "transformer." prefix is accepted when
-- loading), for llama "model.embed_tokens.weight", "model.layers.N.self_attn.q_proj.weight",
-- ..., "lm_head.weight", N counted from 0. Loading checks every name and shape: a missing,
-- unknown or wrongly shaped tensor is an error naming it; the buffers HF files carry besides the
-- parameters (GPT-2's causal masks h.N.attn.bias and h.N.attn.masked_bias, LLaMA's
-- self_attn.rotary_emb.inv_freq, GPT-2's lm_head.weight, a copy of wte) are skipped.
--
-- The KV cache (tcl.models.kv_cache) is the only state a forward call changes; every access to
-- it is a call of that module. A decoding step (one position) runs on variables (tcl.var): the
-- cache's position variable, and for a batch of one the token's, which picks its embedding row
-- as a slice (no scan of the table); its kernels, and the plan of model:decoder(), serve every
-- position and token. A prompt (several positions) is planned for its positions and ids.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local Tensor = require "tcl.api.tensor"
local state = require "tcl.api.state"
local jit = require "tcl.api.jit"
local kv_cache = require "tcl.models.kv_cache"
local variables = require "tcl.variables"

local fail, shape_str = check.fail, check.shape_str
local M = {}
local Model = {}
Model.__index = Model
M.Model = Model

-- ---------------------------------------------------------------------------------------
-- configuration

M.ARCHITECTURES = { gpt2 = true, llama = true }
local SIZE_FIELDS = { "vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_context" }
local CONFIG_FIELDS = { arch = true, norm_eps = true, rope_theta = true, tie_embeddings = true, head_dim = true }
for _, name in ipairs(SIZE_FIELDS) do CONFIG_FIELDS[name] = true end

local function value_str(v)
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  if type(v) == "string" then return string.format("%q", v) end
  return check.type_name(v)
end

--- The checked configuration, with defaults filled in: arch ("gpt2" or "llama"), vocab_size,
--  dim, n_layers, n_heads, n_kv_heads (default n_heads; gpt2 requires n_heads), ffn_dim (default
--  4 dim), max_context, norm_eps (default 1e-5; HF's GPT-2 layer_norm_epsilon and LLaMA's
--  rms_norm_eps), rope_theta (llama, default 10000), tie_embeddings (default true for gpt2,
--  false for llama: the logits through the token embedding, no lm_head.weight).
function M.config(config)
  local fn = "transformer.config"
  if type(config) ~= "table" or class.is_tensor(config) then
    fail(fn, "expected a configuration table, got %s", check.type_name(config))
  end
  for k in pairs(config) do
    if not CONFIG_FIELDS[k] then fail(fn, "unknown field '%s'", tostring(k)) end
  end
  local c = {}
  if not M.ARCHITECTURES[config.arch] then
    fail(fn, "arch must be \"gpt2\" or \"llama\", got %s", value_str(config.arch))
  end
  c.arch = config.arch
  local defaults = { n_kv_heads = config.n_heads, ffn_dim = type(config.dim) == "number" and 4 * config.dim or nil }
  for _, name in ipairs(SIZE_FIELDS) do
    local v = config[name]
    if v == nil then v = defaults[name] end
    if math.type(v) ~= "integer" or v < 1 then
      fail(fn, "%s must be a positive integer, got %s", name, value_str(v))
    end
    c[name] = v
  end
  if c.dim % c.n_heads ~= 0 then fail(fn, "dim %d must be divisible by n_heads %d", c.dim, c.n_heads) end
  c.head_dim = c.dim // c.n_heads
  if config.head_dim ~= nil and config.head_dim ~= c.head_dim then
    fail(fn, "head_dim is dim / n_heads = %d, got %s", c.head_dim, value_str(config.head_dim))
  end
  if c.n_heads % c.n_kv_heads ~= 0 then
    fail(fn, "n_heads %d must be divisible by n_kv_heads %d", c.n_heads, c.n_kv_heads)
  end
  if c.arch == "gpt2" and c.n_kv_heads ~= c.n_heads then
    fail(fn, "gpt2 has no grouped-query attention: n_kv_heads %d must equal n_heads %d", c.n_kv_heads, c.n_heads)
  end
  if c.arch == "llama" and c.head_dim % 2 ~= 0 then
    fail(fn, "llama's rotary embedding needs an even head_dim, got %d", c.head_dim)
  end
  c.norm_eps = config.norm_eps == nil and 1e-5 or config.norm_eps
  if type(c.norm_eps) ~= "number" or c.norm_eps ~= c.norm_eps or c.norm_eps <= 0 then
    fail(fn, "norm_eps must be a positive number, got %s", value_str(config.norm_eps))
  end
  c.rope_theta = config.rope_theta == nil and 10000.0 or config.rope_theta
  if type(c.rope_theta) ~= "number" or c.rope_theta ~= c.rope_theta or c.rope_theta <= 0 then
    fail(fn, "rope_theta must be a positive number, got %s", value_str(config.rope_theta))
  end
  if config.tie_embeddings == nil then
    c.tie_embeddings = c.arch == "gpt2"
  elseif type(config.tie_embeddings) ~= "boolean" then
    fail(fn, "tie_embeddings must be a boolean, got %s", value_str(config.tie_embeddings))
  else
    c.tie_embeddings = config.tie_embeddings
  end
  if c.arch == "gpt2" and not c.tie_embeddings then fail(fn, "gpt2's lm_head is tied: tie_embeddings must be true") end
  return c
end

--- GPT-2's smallest configuration (124M parameters: HF's "gpt2").
function M.gpt2_124m()
  return { arch = "gpt2", vocab_size = 50257, dim = 768, n_layers = 12, n_heads = 12, ffn_dim = 3072,
    max_context = 1024, norm_eps = 1e-5 }
end

--- A small LLaMA configuration with grouped-query attention (about 30M parameters).
function M.llama_small()
  return { arch = "llama", vocab_size = 32000, dim = 512, n_layers = 8, n_heads = 8, n_kv_heads = 2,
    ffn_dim = 1408, max_context = 1024, norm_eps = 1e-5, rope_theta = 10000.0 }
end

-- ---------------------------------------------------------------------------------------
-- parameter names and shapes

--- The parameters of config in HF's layout: a list of { name =, shape = } in a fixed order.
function M.parameters(config)
  local c = M.config(config)
  local list = {}
  local function add(name, ...) list[#list + 1] = { name = name, shape = { ... } } end
  local D, F, V = c.dim, c.ffn_dim, c.vocab_size
  if c.arch == "gpt2" then
    add("wte.weight", V, D)
    add("wpe.weight", c.max_context, D)
    for n = 0, c.n_layers - 1 do
      local p = "h." .. n .. "."
      add(p .. "ln_1.weight", D)
      add(p .. "ln_1.bias", D)
      add(p .. "attn.c_attn.weight", D, 3 * D)
      add(p .. "attn.c_attn.bias", 3 * D)
      add(p .. "attn.c_proj.weight", D, D)
      add(p .. "attn.c_proj.bias", D)
      add(p .. "ln_2.weight", D)
      add(p .. "ln_2.bias", D)
      add(p .. "mlp.c_fc.weight", D, F)
      add(p .. "mlp.c_fc.bias", F)
      add(p .. "mlp.c_proj.weight", F, D)
      add(p .. "mlp.c_proj.bias", D)
    end
    add("ln_f.weight", D)
    add("ln_f.bias", D)
  else
    local hd = c.head_dim
    add("model.embed_tokens.weight", V, D)
    for n = 0, c.n_layers - 1 do
      local p = "model.layers." .. n .. "."
      add(p .. "input_layernorm.weight", D)
      add(p .. "self_attn.q_proj.weight", c.n_heads * hd, D)
      add(p .. "self_attn.k_proj.weight", c.n_kv_heads * hd, D)
      add(p .. "self_attn.v_proj.weight", c.n_kv_heads * hd, D)
      add(p .. "self_attn.o_proj.weight", D, c.n_heads * hd)
      add(p .. "post_attention_layernorm.weight", D)
      add(p .. "mlp.gate_proj.weight", F, D)
      add(p .. "mlp.up_proj.weight", F, D)
      add(p .. "mlp.down_proj.weight", D, F)
    end
    add("model.norm.weight", D)
    if not c.tie_embeddings then add("lm_head.weight", V, D) end
  end
  return list
end

-- Names HF files carry that are not parameters (buffers, a tied copy), as patterns.
local SKIPPED = {
  gpt2 = { "^h%.%d+%.attn%.bias$", "^h%.%d+%.attn%.masked_bias$", "^lm_head%.weight$" },
  llama = { "^model%.layers%.%d+%.self_attn%.rotary_emb%.inv_freq$" },
}

local function skipped(arch, name)
  for _, pattern in ipairs(SKIPPED[arch]) do
    if name:find(pattern) then return true end
  end
  return false
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

-- ---------------------------------------------------------------------------------------
-- building a model

--- A model of config with the weights of sd ({ [HF name] = tensor }). Every parameter must be
--  there with its shape (any float dtype); names that are not parameters are errors, except
--  the buffers HF files carry (see the header). opts: batch (default 1: the KV cache's batch).
function M.new(config, sd, opts)
  local fn = "transformer.new"
  local c = M.config(config)
  if type(sd) ~= "table" or class.is_tensor(sd) then
    fail(fn, "expected a state dict (a table of tensors by name), got %s", check.type_name(sd))
  end
  opts = check.options(fn, opts, { batch = true })
  local batch = opts.batch == nil and 1 or opts.batch
  if math.type(batch) ~= "integer" or batch < 1 then
    fail(fn, "batch must be a positive integer, got %s", value_str(batch))
  end
  local weights, named = {}, {}
  for name, t in pairs(sd) do
    if type(name) ~= "string" then fail(fn, "state dict key %s is not a string", tostring(name)) end
    if not class.is_tensor(t) then fail(fn, "'%s' is %s, not a tensor", name, check.type_name(t)) end
    local plain = name
    if c.arch == "gpt2" and plain:sub(1, 12) == "transformer." then plain = plain:sub(13) end
    if named[plain] then fail(fn, "'%s' is given twice (as '%s' and '%s')", plain, named[plain], name) end
    named[plain] = name
    weights[plain] = t
  end
  local missing, wrong = {}, {}
  local expected = {}
  for _, p in ipairs(M.parameters(c)) do
    expected[p.name] = true
    local t = weights[p.name]
    if t == nil then
      missing[#missing + 1] = p.name
    elseif not check.same_shape(t.shape, p.shape) then
      wrong[#wrong + 1] = string.format("'%s' has shape %s, expected %s", named[p.name], shape_str(t.shape),
        shape_str(p.shape))
    elseif not t.dtype.is_float then
      wrong[#wrong + 1] = string.format("'%s' has dtype %s, expected a float dtype", named[p.name], t.dtype.name)
    end
  end
  local unknown = {}
  for _, name in ipairs(sorted_keys(weights)) do
    if not expected[name] then
      if skipped(c.arch, name) then
        weights[name] = nil
      else
        unknown[#unknown + 1] = named[name]
      end
    end
  end
  local problems = {}
  if #missing > 0 then problems[#problems + 1] = "missing: " .. table.concat(missing, ", ") end
  if #unknown > 0 then
    problems[#problems + 1] = "not a parameter of " .. c.arch .. ": " .. table.concat(unknown, ", ")
  end
  for _, w in ipairs(wrong) do problems[#problems + 1] = w end
  if #problems > 0 then fail(fn, "%s", table.concat(problems, "; ")) end

  -- the token of a decoding step of a batch of one, as the 1-based row of the embedding
  local model = setmetatable({ config = c, weights = weights, batch = batch,
    _token = variables.new("token", 1, c.vocab_size) }, Model)
  model:reset()
  return model
end

--- A model of config with random weights (normal, standard deviation std, default 0.02, as
--  GPT-2's initialization; norm weights 1 + normal(std), biases normal(std), so that a check
--  against another implementation sees every parameter). opts: std, batch, device, dtype
--  (default float32). Uses the device's random stream (tcl.manual_seed).
function M.random(config, opts)
  local fn = "transformer.random"
  local c = M.config(config)
  opts = check.options(fn, opts, { std = true, batch = true, device = true, dtype = true })
  local std = opts.std == nil and 0.02 or opts.std
  if type(std) ~= "number" or std ~= std or std < 0 then
    fail(fn, "std must be a number >= 0, got %s", value_str(std))
  end
  local sd = {}
  for _, p in ipairs(M.parameters(c)) do
    local t = Tensor.randn(p.shape, { device = opts.device, dtype = opts.dtype }) * std
    if p.name:find("norm") or p.name:find("ln_") then
      if p.name:sub(-7) == ".weight" then t = t + 1 end
    end
    sd[p.name] = t
  end
  local tensors = {}
  for _, name in ipairs(sorted_keys(sd)) do tensors[#tensors + 1] = sd[name] end
  for i = 1, #tensors, 16 do Tensor.realize_all(table.unpack(tensors, i, math.min(#tensors, i + 15))) end
  return M.new(c, sd, { batch = opts.batch })
end

--- A model of config from a safetensors file in HF's layout (tcl.nn.state.safe_load's opts:
--  device; and batch).
function M.from_safetensors(path, config, opts)
  local fn = "transformer.from_safetensors"
  opts = check.options(fn, opts, { device = true, batch = true })
  local sd = state.safe_load(path, { device = opts.device })
  return M.new(config, sd, { batch = opts.batch })
end

-- ---------------------------------------------------------------------------------------
-- GGUF: llama.cpp's names and configuration keys

-- llama.cpp's tensor names for HF's (per layer "blk.N." and "model.layers.N.").
local GGUF_LAYER_NAMES = {
  attn_norm = "input_layernorm", attn_q = "self_attn.q_proj", attn_k = "self_attn.k_proj",
  attn_v = "self_attn.v_proj", attn_output = "self_attn.o_proj", ffn_norm = "post_attention_layernorm",
  ffn_gate = "mlp.gate_proj", ffn_up = "mlp.up_proj", ffn_down = "mlp.down_proj",
}
local GGUF_NAMES = { token_embd = "model.embed_tokens", output_norm = "model.norm", output = "lm_head" }

--- The HF name of a GGUF tensor name of a llama model ("blk.0.attn_q.weight" ->
--  "model.layers.0.self_attn.q_proj.weight"), or nil when it has none.
function M.hf_name(gguf_name)
  local layer, part, kind = gguf_name:match("^blk%.(%d+)%.([%w_]+)%.(%a+)$")
  if layer and GGUF_LAYER_NAMES[part] then
    return "model.layers." .. layer .. "." .. GGUF_LAYER_NAMES[part] .. "." .. kind
  end
  local base, suffix = gguf_name:match("^([%w_]+)%.(%a+)$")
  if base and GGUF_NAMES[base] then return GGUF_NAMES[base] .. "." .. suffix end
  return nil
end

--- HF's rows of a q or k projection from llama.cpp's. llama.cpp's converter reorders each
--  head's rows so that its rotary embedding turns adjacent pairs (rows 2i and 2i + 1), where
--  HF's turns rows i and i + head_dim/2: GGUF row 2i + s of a head is HF row s * head_dim/2 + i.
--  Undone by viewing each head as (head_dim/2, 2) rows and swapping the two: a lazy view.
function M.rotary_rows_from_gguf(w, heads)
  local rows, cols = w.shape[1], w.shape[2]
  local head_dim = rows // heads
  return w:reshape(heads, head_dim // 2, 2, cols):transpose(2, 3):reshape(rows, cols)
end

--- The inverse of rotary_rows_from_gguf: llama.cpp's row order from HF's (what its converter
--  writes), for writing GGUF files.
function M.rotary_rows_to_gguf(w, heads)
  local rows, cols = w.shape[1], w.shape[2]
  local head_dim = rows // heads
  return w:reshape(heads, 2, head_dim // 2, cols):transpose(2, 3):reshape(rows, cols)
end

local function metadata_integer(fn, path, metadata, key, default)
  local v = metadata[key]
  if v == nil then
    if default ~= nil then return default end
    fail(fn, "'%s' has no metadata key '%s'", path, key)
  end
  if math.type(v) ~= "integer" or v < 1 then
    fail(fn, "'%s': metadata '%s' must be a positive integer, got %s", path, key, value_str(v))
  end
  return v
end

local function metadata_number(fn, path, metadata, key, default)
  local v = metadata[key]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= v or v <= 0 then
    fail(fn, "'%s': metadata '%s' must be a positive number, got %s", path, key, value_str(v))
  end
  return v
end

--- A llama model from a GGUF file: its configuration from the metadata (llama.embedding_length,
--  .block_count, .attention.head_count, .attention.head_count_kv, .feed_forward_length,
--  .context_length, .attention.layer_norm_rms_epsilon, .rope.freq_base; the vocabulary's size
--  from token_embd), its weights renamed to HF's, q and k rows put back in HF's order. A file
--  without output.weight ties lm_head to the token embedding, as llama.cpp does. opts: device,
--  batch. Returns the model, the metadata and the tensor infos (tcl.nn.state.gguf_load's).
function M.from_gguf(path, opts)
  local fn = "transformer.from_gguf"
  opts = check.options(fn, opts, { device = true, batch = true })
  local tensors, metadata, infos = state.gguf_load(path, { device = opts.device })
  local arch = metadata["general.architecture"]
  if arch ~= "llama" then
    fail(fn, "'%s' holds a %s model: only llama GGUF files are read (GPT-2 loads from safetensors)", path,
      value_str(arch))
  end
  local embed = tensors["token_embd.weight"]
  if embed == nil then fail(fn, "'%s' has no tensor 'token_embd.weight'", path) end
  if #embed.shape ~= 2 then fail(fn, "'%s': token_embd.weight has shape %s, expected 2 dims", path,
    shape_str(embed.shape)) end
  local heads = metadata_integer(fn, path, metadata, "llama.attention.head_count")
  local config = {
    arch = "llama",
    vocab_size = embed.shape[1],
    dim = metadata_integer(fn, path, metadata, "llama.embedding_length"),
    n_layers = metadata_integer(fn, path, metadata, "llama.block_count"),
    n_heads = heads,
    n_kv_heads = metadata_integer(fn, path, metadata, "llama.attention.head_count_kv", heads),
    ffn_dim = metadata_integer(fn, path, metadata, "llama.feed_forward_length"),
    max_context = metadata_integer(fn, path, metadata, "llama.context_length"),
    norm_eps = metadata_number(fn, path, metadata, "llama.attention.layer_norm_rms_epsilon", 1e-5),
    rope_theta = metadata_number(fn, path, metadata, "llama.rope.freq_base", 10000.0),
    tie_embeddings = tensors["output.weight"] == nil,
  }
  local c = M.config(config)
  local sd, unknown = {}, {}
  for _, name in ipairs(sorted_keys(tensors)) do
    local hf = M.hf_name(name)
    if hf == nil then
      unknown[#unknown + 1] = name
    else
      local t = tensors[name]
      local rows_of = hf:match("self_attn%.q_proj%.weight$") and c.n_heads
        or hf:match("self_attn%.k_proj%.weight$") and c.n_kv_heads
      if rows_of then
        local want = rows_of * c.head_dim
        if #t.shape ~= 2 or t.shape[1] ~= want or t.shape[2] ~= c.dim then
          fail(fn, "'%s': tensor '%s' has shape %s, expected %s", path, name, shape_str(t.shape),
            shape_str({ want, c.dim }))
        end
        t = M.rotary_rows_from_gguf(t, rows_of)
      end
      sd[hf] = t
    end
  end
  if #unknown > 0 then
    fail(fn, "'%s': tensors that are not llama parameters: %s", path, table.concat(unknown, ", "))
  end
  local ok, model = pcall(M.new, c, sd, { batch = opts.batch })
  if not ok then fail(fn, "'%s': %s", path, (tostring(model):gsub("^.-transformer%.new: ", ""))) end
  return model, metadata, infos
end

-- ---------------------------------------------------------------------------------------
-- the forward pass

--- Forgets the KV cache: a new sequence starts at position 1. opts.context (default
--  max_context) sizes the cache, the last position a sequence may reach (its memory:
--  2 * n_layers * batch * n_kv_heads * context * head_dim values). When the size stays, the
--  cache is zeroed in place and decoders made before keep working; a new size makes new
--  buffers (make a new decoder).
function Model:reset(opts)
  local fn = "transformer:reset"
  local c = self.config
  opts = check.options(fn, opts, { context = true })
  local context = opts.context == nil and c.max_context or opts.context
  if math.type(context) ~= "integer" or context < 1 or context > c.max_context then
    fail(fn, "context must be an integer in 1..%d (max_context), got %s", c.max_context, value_str(context))
  end
  if self._cache and self._cache.max_context == context then
    self._cache:reset()
    return
  end
  local embed = self.weights[c.arch == "gpt2" and "wte.weight" or "model.embed_tokens.weight"]
  self._device = embed.device
  self._cache = kv_cache.new({ n_layers = c.n_layers, batch = self.batch, kv_heads = c.n_kv_heads,
    max_context = context, head_dim = c.head_dim, device = embed.device })
end

--- The last position the KV cache holds (max_context, or reset's context).
function Model:context() return self._cache.max_context end

-- x (.., in) times a Conv1D weight (in, out) plus its bias.
local function conv1d(x, w, b) return x:matmul(w) + b end
-- x (.., in) times an nn.Linear weight (out, in).
local function linear(x, w) return x:matmul(w:transpose(1, 2)) end

local function layer_norm(x, w, b, eps) return x:layernorm(-1, eps) * w + b end
local function rms_norm(x, w, eps) return x * x:square():mean(-1, true):add(eps):rsqrt() * w end

-- The token embeddings (B, T, D) of tokens (B, T), or of the token variable bound to id + 1
-- (decoding, batch 1: a slice of one row). One position of a larger batch: a one-hot product on
-- the device (it scans the whole table: vocab * dim per token); several (a prompt): ids, the
-- tokens read to the host, as views of rows (no scan per id, but kernels that depend on the ids).
local function token_rows(weight, tokens, ids)
  local D = weight.shape[2]
  if variables.is_symbolic(tokens) then -- the token variable, bound to the id + 1: its row
    return weight[{ { tokens, tokens } }]:reshape(1, 1, D)
  end
  local B, T = tokens.shape[1], tokens.shape[2]
  if T == 1 then return weight:index_select(1, tokens:reshape(B):cast("int32") + 1):reshape(B, 1, D) end
  local rows = {}
  for i, id in ipairs(ids) do rows[i] = weight:narrow(1, id + 1, 1) end
  return Tensor.cat(rows, 1):reshape(B, T, D)
end

-- cos and sin (T, head_dim) of HF's rotary embedding at 0-based positions start - 1 .. start +
-- T - 2, in float32 as HF computes them: inv_freq = rope_theta^(-2i / head_dim) rounded to
-- float32, angle = position * inv_freq, the angles of dims i and i + head_dim/2 the same. start
-- is an integer or (T = 1) the bound position variable.
local function rotary_tables(self, start, count)
  local c = self.config
  if self._inv_freq == nil then
    local half, list = c.head_dim // 2, {}
    for i = 1, half do
      list[i] = string.unpack("<f", string.pack("<f", 1.0 / c.rope_theta ^ ((2 * (i - 1)) / c.head_dim)))
    end
    self._inv_freq = Tensor({ list }, { dtype = "float32", device = self._device }):realize()
  end
  local positions = (Tensor.arange(count, { dtype = "float32", device = self._device }) + variables.sub(start, 1))
    :reshape(count, 1)
  local angles = positions * self._inv_freq
  angles = Tensor.cat({ angles, angles }, 2)
  return angles:cos(), angles:sin()
end

-- x (B, heads, T, head_dim) rotated: x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1).
local function rotate(x, cos, sin)
  local half = x.shape[4] // 2
  local x1, x2 = x:narrow(4, 1, half), x:narrow(4, half + 1, half)
  return x * cos + Tensor.cat({ -x2, x1 }, 4) * sin
end

local function heads_first(x, B, T, heads, hd) return x:reshape(B, T, heads, hd):permute(1, 3, 2, 4) end

-- Attention of layer (1-based) for q (B, H, T, hd), k and v (B, KV, T, hd) from position start
-- (an integer, or the bound position variable when T = 1): (B, T, H * hd).
local function attention(self, layer, q, k, v, start)
  local c, cache = self.config, self._cache
  local B, T = q.shape[1], q.shape[3]
  cache:write(layer, k, v, start)
  -- the positions seen: up to the last query's
  local keys, values = cache:read(layer, variables.add(start, T - 1))
  local S = keys.shape[3]
  local group = c.n_heads // c.n_kv_heads
  if group > 1 then -- each key/value head serves `group` query heads (a view, no copy)
    keys = keys:reshape(B, c.n_kv_heads, 1, S, c.head_dim):expand(B, c.n_kv_heads, group, S, c.head_dim)
      :reshape(B, c.n_heads, S, c.head_dim)
    values = values:reshape(B, c.n_kv_heads, 1, S, c.head_dim):expand(B, c.n_kv_heads, group, S, c.head_dim)
      :reshape(B, c.n_heads, S, c.head_dim)
  end
  local keys_t = keys:transpose(3, 4)
  -- a prompt's products over many queries: q and k^T stored contiguous first, so that the
  -- products are tiled as matmuls of rows (as views their reads step across rows)
  if T > 1 then q, keys_t = q:contiguous(), keys_t:contiguous() end
  local scores = q:matmul(keys_t) * (1 / math.sqrt(c.head_dim))
  local mask = cache:mask(start, T)
  if mask then scores = scores + mask end
  local out = scores:softmax(-1):matmul(values)
  return out:permute(1, 3, 2, 4):reshape(B, T, c.n_heads * c.head_dim)
end

-- A layer's input, stored: the layer's KV-cache writes are slice assignments, which run at once
-- (tcl.api.tensor's assign into a view), each a schedule of its own; a lazy input would be
-- computed again by each of them, the earlier layers included.
local function layer_input(x) return x:realize() end

local function gpt2_forward(self, x, start, last)
  local c, w = self.config, self.weights
  local B, T, D = x.shape[1], x.shape[2], c.dim
  for n = 0, c.n_layers - 1 do
    local p = "h." .. n .. "."
    x = layer_input(x)
    local h = layer_norm(x, w[p .. "ln_1.weight"], w[p .. "ln_1.bias"], c.norm_eps)
    -- stored: the cache writes of k and v (each a schedule of its own) then read their columns
    local qkv = conv1d(h, w[p .. "attn.c_attn.weight"], w[p .. "attn.c_attn.bias"]):realize()
    local q = heads_first(qkv:narrow(3, 1, D), B, T, c.n_heads, c.head_dim)
    local k = heads_first(qkv:narrow(3, D + 1, D), B, T, c.n_heads, c.head_dim)
    local v = heads_first(qkv:narrow(3, 2 * D + 1, D), B, T, c.n_heads, c.head_dim)
    local a = attention(self, n + 1, q, k, v, start)
    x = x + conv1d(a, w[p .. "attn.c_proj.weight"], w[p .. "attn.c_proj.bias"])
    h = layer_norm(x, w[p .. "ln_2.weight"], w[p .. "ln_2.bias"], c.norm_eps)
    h = conv1d(h, w[p .. "mlp.c_fc.weight"], w[p .. "mlp.c_fc.bias"]):gelu()
    x = x + conv1d(h, w[p .. "mlp.c_proj.weight"], w[p .. "mlp.c_proj.bias"])
  end
  if last then x = x:narrow(2, T, 1) end -- the logits of the last position only
  x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], c.norm_eps)
  return linear(x, w["wte.weight"])
end

local function llama_forward(self, x, start, last)
  local c, w = self.config, self.weights
  local B, T = x.shape[1], x.shape[2]
  local cos, sin = rotary_tables(self, start, T)
  for n = 0, c.n_layers - 1 do
    local p = "model.layers." .. n .. "."
    x = layer_input(x)
    local h = rms_norm(x, w[p .. "input_layernorm.weight"], c.norm_eps)
    local q = heads_first(linear(h, w[p .. "self_attn.q_proj.weight"]), B, T, c.n_heads, c.head_dim)
    local k = heads_first(linear(h, w[p .. "self_attn.k_proj.weight"]), B, T, c.n_kv_heads, c.head_dim)
    local v = heads_first(linear(h, w[p .. "self_attn.v_proj.weight"]), B, T, c.n_kv_heads, c.head_dim)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    local a = attention(self, n + 1, q, k, v, start)
    x = x + linear(a, w[p .. "self_attn.o_proj.weight"])
    h = rms_norm(x, w[p .. "post_attention_layernorm.weight"], c.norm_eps)
    local gated = linear(h, w[p .. "mlp.gate_proj.weight"]):silu() * linear(h, w[p .. "mlp.up_proj.weight"])
    x = x + linear(gated, w[p .. "mlp.down_proj.weight"])
  end
  if last then x = x:narrow(2, T, 1) end -- the logits of the last position only
  x = rms_norm(x, w["model.norm.weight"], c.norm_eps)
  return linear(x, w[c.tie_embeddings and "model.embed_tokens.weight" or "lm_head.weight"])
end

--- The logits (batch, T, vocab_size) for tokens (an integer tensor (batch, T) of 0-based ids)
--  at positions start_pos .. start_pos + T - 1 (1-based): a lazy tensor; opts.last = true: the
--  last position's only (batch, 1, vocab_size), all a generation needs (the LM head over every
--  position of a long prompt costs more than the rest of the model). Writes the tokens' keys
--  and values into the KV cache now (layer by layer: each write is a slice assignment), which
--  the later positions' calls read; positions before start_pos must have been given by earlier
--  calls.
function Model:forward(tokens, start_pos, opts)
  local fn = "transformer:forward"
  local c = self.config
  local last = check.options(fn, opts, { last = true }).last
  if last ~= nil and type(last) ~= "boolean" then fail(fn, "last must be a boolean, got %s", value_str(last)) end
  if not class.is_tensor(tokens) then fail(fn, "tokens must be a tensor, got %s", check.type_name(tokens)) end
  if not tokens.dtype.is_int then fail(fn, "tokens must be an integer tensor, got %s", tokens.dtype.name) end
  local s = tokens.shape
  if #s ~= 2 or s[1] ~= self.batch then
    fail(fn, "tokens must have shape (%d, T) (batch, positions), got %s", self.batch, shape_str(s))
  end
  if math.type(start_pos) ~= "integer" or start_pos < 1 then
    fail(fn, "start_pos must be a positive integer (1-based), got %s", value_str(start_pos))
  end
  local T = s[2]
  if start_pos + T - 1 > self:context() then
    fail(fn, "positions %d..%d are past the context of %d (max_context, or reset's context)", start_pos,
      start_pos + T - 1, self:context())
  end
  local ids = {}
  for _, row in ipairs(tokens:tolist()) do
    for _, id in ipairs(row) do ids[#ids + 1] = id end
  end
  for i, id in ipairs(ids) do
    if id < 0 or id >= c.vocab_size then
      fail(fn, "token %d (entry %d) is outside 0..%d", id, i, c.vocab_size - 1)
    end
  end
  if T == 1 then -- on variables: the same kernels (and plan) for every position and token
    local position = self._cache.position:bind(start_pos)
    if self.batch == 1 then return self:_logits(self._token:bind(ids[1] + 1), position) end
    return self:_logits(tokens, position)
  end
  return self:_logits(tokens, start_pos, ids, last)
end

-- The logits of tokens (B, T) from position start: an integer (with ids, the tokens as a host
-- list), or for T = 1 the bound position variable, tokens then being (B, 1) on the device or,
-- for a batch of one, the bound token variable.
function Model:_logits(tokens, start, ids, last)
  local c, w = self.config, self.weights
  local T = variables.is_symbolic(tokens) and 1 or tokens.shape[2]
  if c.arch == "gpt2" then
    local x = token_rows(w["wte.weight"], tokens, ids)
    local positions = w["wpe.weight"][{ { start, variables.add(start, T - 1) } }]
    return gpt2_forward(self, x + positions:reshape(1, T, c.dim), start, last)
  end
  return llama_forward(self, token_rows(w["model.embed_tokens.weight"], tokens, ids), start, last)
end

--- A decoding step as an execution plan (tcl.jit): step(tokens, start_pos) with tokens
--  (batch, 1) gives forward's logits (batch, 1, vocab_size), and from its third call on replays
--  one captured plan for every position and token (no scheduling, no compile: the position
--  and, for a batch of one, the token are variables whose values reach the kernels at launch;
--  a batch of one reads its token id to the host). The logits are the plan's own buffer,
--  overwritten by the next step: sample from them (or clone them) before calling again.
function Model:decoder()
  local fn = "transformer:decoder step"
  local plan = jit.jit(function(tokens, start) return self:_logits(tokens, start) end)
  local cache = self._cache -- the buffers the plan writes and reads
  return function(tokens, start_pos)
    if self._cache ~= cache then
      fail(fn, "the model was reset to another context since this decoder was made: make a new one")
    end
    if not class.is_tensor(tokens) or not tokens.dtype.is_int or #tokens.shape ~= 2 or tokens.shape[1] ~= self.batch
        or tokens.shape[2] ~= 1 then
      fail(fn, "tokens must be an integer tensor of shape (%d, 1), got %s", self.batch,
        class.is_tensor(tokens) and tokens.dtype.name .. " " .. shape_str(tokens.shape) or check.type_name(tokens))
    end
    if math.type(start_pos) ~= "integer" or start_pos < 1 or start_pos > cache.max_context then
      fail(fn, "start_pos must be an integer in 1..%d, got %s", cache.max_context, value_str(start_pos))
    end
    local position = cache.position:bind(start_pos)
    if self.batch == 1 then
      local id = tokens:item()
      if id < 0 or id >= self.config.vocab_size then
        fail(fn, "token %d is outside 0..%d", id, self.config.vocab_size - 1)
      end
      return plan(self._token:bind(id + 1), position)
    end
    return plan(tokens:cast("int32"), position)
  end
end

--- The model's parameters by HF name ({ [name] = tensor }, the tensors themselves).
function Model:state_dict()
  local sd = {}
  for name, t in pairs(self.weights) do sd[name] = t end
  return sd
end

--- The number of parameters (tied ones once).
function Model:parameter_count()
  local n = 0
  for _, t in pairs(self.weights) do n = n + t:numel() end
  return n
end

return M
