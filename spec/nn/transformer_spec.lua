-- spec/nn/transformer_spec.lua — tcl.models.transformer: GPT-2 and LLaMA (grouped-query
-- attention) with random weights written by the spec under Hugging Face's names and shapes
-- (GPT-2's Conv1D weights (in, out)), loaded back from safetensors and checked against a torch
-- implementation written from HF's architectures (spec/support/transformer_ref.py): the prompt
-- in one call, then three tokens one at a time through the KV cache. A GGUF file of the same
-- LLaMA, written byte by byte with llama.cpp's names and q/k row order, gives the same logits.
-- Every loading and argument error is checked.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local Tensor = tcl.Tensor
local torch_ref = require "spec.support.torch_ref"
local gguf = require "spec.support.gguf_writer"
local transformer = require "tcl.models.transformer"
local kv_cache = require "tcl.models.kv_cache"

local REF = helper.root .. "/spec/support/transformer_ref.py"

local GPT2 = { arch = "gpt2", vocab_size = 50, dim = 32, n_layers = 2, n_heads = 4, ffn_dim = 64, max_context = 16,
  norm_eps = 1e-5 }
local LLAMA = { arch = "llama", vocab_size = 50, dim = 32, n_layers = 2, n_heads = 4, n_kv_heads = 2, ffn_dim = 48,
  max_context = 16, norm_eps = 1e-5, rope_theta = 10000.0 }
local PROMPT = { { 3, 17, 42, 0, 9 }, { 49, 1, 2, 30, 30 } } -- batch 2, 5 tokens
local DECODED = { { 7, 8, 11 }, { 5, 44, 20 } }              -- then 3 tokens, one per call

local paths = {}
local function temp_path(suffix)
  local path = os.tmpname() .. suffix
  paths[#paths + 1] = path
  return path
end

-- HF's parameters, written out here (not taken from the module): name, shape.
local function hf_shapes(c)
  local list = {}
  local function add(name, ...) list[#list + 1] = { name, { ... } } end
  if c.arch == "gpt2" then
    add("transformer.wte.weight", 50, 32)
    add("transformer.wpe.weight", 16, 32)
    for n = 0, 1 do
      local p = "transformer.h." .. n .. "."
      add(p .. "ln_1.weight", 32) add(p .. "ln_1.bias", 32)
      add(p .. "attn.c_attn.weight", 32, 96) add(p .. "attn.c_attn.bias", 96) -- Conv1D: (in, out)
      add(p .. "attn.c_proj.weight", 32, 32) add(p .. "attn.c_proj.bias", 32)
      add(p .. "ln_2.weight", 32) add(p .. "ln_2.bias", 32)
      add(p .. "mlp.c_fc.weight", 32, 64) add(p .. "mlp.c_fc.bias", 64)
      add(p .. "mlp.c_proj.weight", 64, 32) add(p .. "mlp.c_proj.bias", 32)
    end
    add("transformer.ln_f.weight", 32) add("transformer.ln_f.bias", 32)
  else
    add("model.embed_tokens.weight", 50, 32)
    for n = 0, 1 do
      local p = "model.layers." .. n .. "."
      add(p .. "input_layernorm.weight", 32)
      add(p .. "self_attn.q_proj.weight", 32, 32) add(p .. "self_attn.k_proj.weight", 16, 32) -- 2 kv heads of 8
      add(p .. "self_attn.v_proj.weight", 16, 32) add(p .. "self_attn.o_proj.weight", 32, 32)
      add(p .. "post_attention_layernorm.weight", 32)
      add(p .. "mlp.gate_proj.weight", 48, 32) add(p .. "mlp.up_proj.weight", 48, 32)
      add(p .. "mlp.down_proj.weight", 32, 48)
    end
    add("model.norm.weight", 32) add("lm_head.weight", 50, 32)
  end
  return list
end

-- Random weights of scale 0.3 (norm weights around 1), realized.
local function random_state(c, seed)
  tcl.manual_seed(seed)
  local sd = {}
  for _, entry in ipairs(hf_shapes(c)) do
    local name, shape = entry[1], entry[2]
    local t = Tensor.randn(shape) * 0.3
    if name:find("norm") or name:find("ln_") then if name:sub(-7) == ".weight" then t = t + 1 end end
    sd[name] = t:realize()
  end
  return sd
end

-- Logits (batch, 8, vocab) as nested lists: the prompt in one call, then each decoded token.
local function generate_logits(model)
  local parts = { model:forward(Tensor(PROMPT, { dtype = "int32" }), 1) }
  for i = 1, 3 do
    local step = { { DECODED[1][i] }, { DECODED[2][i] } }
    parts[#parts + 1] = model:forward(Tensor(step, { dtype = "int32" }), 5 + i)
  end
  return Tensor.cat(parts, 2)
end

local function all_tokens()
  local rows = {}
  for b = 1, 2 do
    rows[b] = {}
    for _, id in ipairs(PROMPT[b]) do rows[b][#rows[b] + 1] = id end
    for _, id in ipairs(DECODED[b]) do rows[b][#rows[b] + 1] = id end
  end
  return rows
end

local function config_literal(c)
  return string.format("{'dim': %d, 'n_heads': %d, 'n_kv_heads': %d, 'n_layers': %d, 'norm_eps': %.17g, "
    .. "'rope_theta': %.17g}", c.dim, c.n_heads, c.n_kv_heads or c.n_heads, c.n_layers, c.norm_eps,
    c.rope_theta or 10000)
end

local function max_difference(a, b)
  return (a - b):abs():max():item()
end

-- A GGUF file of the llama state dict sd: llama.cpp's names, q and k rows in its order (each
-- head's rows i and i + head_dim/2 moved to 2i and 2i + 1), F32 data, GGUF dims innermost first.
local GGUF_OF = {
  input_layernorm = "attn_norm", ["self_attn.q_proj"] = "attn_q", ["self_attn.k_proj"] = "attn_k",
  ["self_attn.v_proj"] = "attn_v", ["self_attn.o_proj"] = "attn_output", post_attention_layernorm = "ffn_norm",
  ["mlp.gate_proj"] = "ffn_gate", ["mlp.up_proj"] = "ffn_up", ["mlp.down_proj"] = "ffn_down",
}
local function gguf_name(hf)
  local n, part = hf:match("^model%.layers%.(%d+)%.(.+)%.weight$")
  if n then return "blk." .. n .. "." .. GGUF_OF[part] .. ".weight" end
  return ({ ["model.embed_tokens.weight"] = "token_embd.weight", ["model.norm.weight"] = "output_norm.weight",
    ["lm_head.weight"] = "output.weight" })[hf]
end

local function llama_cpp_rows(rows, heads)
  local out, per = {}, #rows // heads
  for h = 0, heads - 1 do
    for i = 0, per // 2 - 1 do
      for s = 0, 1 do out[h * per + 2 * i + s + 1] = rows[h * per + s * (per // 2) + i + 1] end
    end
  end
  return out
end

local function write_gguf(sd, c, opts)
  opts = opts or {}
  local tensors = {}
  for _, name in ipairs(helper.sorted_keys(sd)) do
    local t = sd[name]
    local values = t:tolist()
    if name:find("q_proj") then values = llama_cpp_rows(values, c.n_heads) end
    if name:find("k_proj") then values = llama_cpp_rows(values, c.n_kv_heads) end
    local flat = {}
    local function add(v)
      if type(v) == "table" then for _, x in ipairs(v) do add(x) end else flat[#flat + 1] = v end
    end
    add(values)
    local dims = {}
    for i = #t.shape, 1, -1 do dims[#dims + 1] = t.shape[i] end
    local bytes, type_name = {}, "F32"
    if opts.q8_0 and opts.q8_0[name] then
      -- Q8_0 blocks of 32 values along the rows: scale 2^-6 (float16 bits 0x2400), q = value * 64
      type_name = "Q8_0"
      for b = 0, #flat // 32 - 1 do
        local q = {}
        for j = 1, 32 do q[j] = math.tointeger(flat[b * 32 + j] * 64) end
        bytes[#bytes + 1] = gguf.q8_0_block(0x2400, q)
      end
    else
      for i, v in ipairs(flat) do bytes[i] = string.pack("<f", v) end
    end
    if not (opts.drop and opts.drop == name) then
      tensors[#tensors + 1] = { name = gguf_name(name), dims = dims, type = type_name, data = table.concat(bytes) }
    end
  end
  if opts.extra then
    tensors[#tensors + 1] = { name = opts.extra, dims = { 4 }, type = "F32", data = ("\0"):rep(16) }
  end
  local metadata = {
    gguf.entry("general.architecture", "string", opts.arch or "llama"),
    gguf.entry("llama.embedding_length", "uint32", c.dim),
    gguf.entry("llama.block_count", "uint32", c.n_layers),
    gguf.entry("llama.attention.head_count", "uint32", c.n_heads),
    gguf.entry("llama.attention.head_count_kv", "uint32", c.n_kv_heads),
    gguf.entry("llama.feed_forward_length", "uint32", c.ffn_dim),
    gguf.entry("llama.attention.layer_norm_rms_epsilon", "float32", c.norm_eps),
    gguf.entry("llama.rope.freq_base", "float32", c.rope_theta),
  }
  if not opts.no_context then metadata[#metadata + 1] = gguf.entry("llama.context_length", "uint32", c.max_context) end
  local path = temp_path(".gguf")
  helper.write(path, (gguf.file({ metadata = metadata, tensors = tensors })))
  return path
end

describe("tcl.models.transformer", function()
  teardown(function() for _, p in ipairs(paths) do os.remove(p) end end)

  local gpt2_sd, llama_sd = random_state(GPT2, 11), random_state(LLAMA, 12)
  local gpt2_path, llama_path = temp_path(".safetensors"), temp_path(".safetensors")
  -- HF's GPT-2 files carry the attention's causal-mask buffers besides the parameters
  local with_buffers = {}
  for k, v in pairs(gpt2_sd) do with_buffers[k] = v end
  with_buffers["transformer.h.0.attn.bias"] = Tensor.ones(1, 1, 16, 16):realize()
  tcl.nn.state.safe_save(with_buffers, gpt2_path)
  tcl.nn.state.safe_save(llama_sd, llama_path)

  it("computes GPT-2 and LLaMA with GQA as torch does, prompt then three tokens through the KV cache", function()
    local gpt2 = transformer.from_safetensors(gpt2_path, GPT2, { batch = 2 })
    local llama = transformer.from_safetensors(llama_path, LLAMA, { batch = 2 })
    local ours = { gpt2 = generate_logits(gpt2), llama = generate_logits(llama) }
    local tokens = torch_ref.literal(all_tokens())
    local ref = torch_ref.run({
      "exec(open(" .. string.format("%q", REF) .. ").read())",
      string.format("out['gpt2'] = gpt2_logits(load_safetensors(%q), %s, %s)", gpt2_path, config_literal(GPT2), tokens),
      string.format("out['llama'] = llama_logits(load_safetensors(%q), %s, %s)", llama_path, config_literal(LLAMA),
        tokens),
    })
    assert.are.same({ 2, 8, 50 }, ours.gpt2.shape)
    torch_ref.assert_close(ours, ref, 1e-4)
  end)

  it("gives the same logits from a GGUF file of the same LLaMA (llama.cpp's names and q/k row order)", function()
    local hf = transformer.from_safetensors(llama_path, LLAMA, { batch = 2 })
    local model, metadata = transformer.from_gguf(write_gguf(llama_sd, LLAMA), { batch = 2 })
    assert.are.equal("llama", metadata["general.architecture"])
    local expected = transformer.config(LLAMA)
    expected.norm_eps = string.unpack("<f", string.pack("<f", LLAMA.norm_eps)) -- a float32 in the file
    assert.are.same(expected, model.config)
    local a, b = generate_logits(hf), generate_logits(model)
    assert.is_true(max_difference(a, b) < 1e-5)
    -- the rows matter: q and k taken in the file's order give other logits
    local unpermuted = transformer.new(LLAMA, tcl.nn.state.safe_load(llama_path), { batch = 2 })
    for n = 0, 1 do
      local p = "model.layers." .. n .. ".self_attn."
      unpermuted.weights[p .. "q_proj.weight"] = transformer.rotary_rows_to_gguf(llama_sd[p .. "q_proj.weight"], 4)
      unpermuted.weights[p .. "k_proj.weight"] = transformer.rotary_rows_to_gguf(llama_sd[p .. "k_proj.weight"], 2)
    end
    assert.is_true(max_difference(a, generate_logits(unpermuted)) > 1e-3)
    -- and the module's two row orders undo each other
    local q = llama_sd["model.layers.0.self_attn.q_proj.weight"]
    assert.are.equal(0, max_difference(q, transformer.rotary_rows_from_gguf(transformer.rotary_rows_to_gguf(q, 4), 4)))
  end)

  it("reads Q8_0 weights of a GGUF file, dequantized lazily, as the float weights they hold", function()
    -- weights that Q8_0 holds exactly: multiples of 2^-6 in [-127, 127] * 2^-6
    tcl.manual_seed(13)
    local exact, q8 = {}, {}
    for name, t in pairs(llama_sd) do
      if t.shape[2] == 32 and not name:find("norm") then
        exact[name] = (Tensor.randint(-127, 128, t.shape):float() * 2.0 ^ -6):realize()
        q8[name] = true
      else
        exact[name] = t
      end
    end
    local path = temp_path(".safetensors")
    tcl.nn.state.safe_save(exact, path)
    local hf = transformer.from_safetensors(path, LLAMA, { batch = 2 })
    local model, _, infos = transformer.from_gguf(write_gguf(exact, LLAMA, { q8_0 = q8 }), { batch = 2 })
    assert.are.equal("Q8_0", infos["blk.1.attn_q.weight"].type)
    assert.is_not_nil(infos["blk.1.attn_q.weight"].blocks)
    local a, b = generate_logits(hf), generate_logits(model)
    assert.is_true(max_difference(a, b) < 1e-4 * math.max(1, a:abs():max():item()))
    -- decoding through a plan keeps the weights as blocks: tcl.jit's warm-up stores no float copy
    model:reset()
    local step = model:decoder()
    for position = 1, 4 do step(Tensor({ { 3 }, { 4 } }, { dtype = "int32" }), position):realize() end
    for _, name in ipairs { "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.v_proj.weight" } do
      for _, node in ipairs(model.weights[name].uop:toposort()) do
        if node.op == "BUFFER" then assert.are.equal("uint8", node.dtype.name, name .. " reads a float copy") end
      end
    end
  end)

  it("ties lm_head to the token embedding when a GGUF file has no output.weight", function()
    local model = transformer.from_gguf(write_gguf(llama_sd, LLAMA, { drop = "lm_head.weight" }))
    assert.is_true(model.config.tie_embeddings)
    assert.is_nil(model.weights["lm_head.weight"])
  end)

  it("decodes the same logits one token at a time as all at once (batch 1), and reset forgets", function()
    local model = transformer.from_safetensors(gpt2_path, GPT2)
    local all = model:forward(Tensor({ all_tokens()[1] }, { dtype = "int32" }), 1):realize()
    model:reset()
    local steps = {}
    for i, id in ipairs(all_tokens()[1]) do steps[i] = model:forward(Tensor({ { id } }, { dtype = "int32" }), i) end
    assert.is_true(max_difference(all, Tensor.cat(steps, 2)) < 1e-5)
    -- last = true: the last position's logits only
    model:reset()
    local n = #all_tokens()[1]
    local last = model:forward(Tensor({ all_tokens()[1] }, { dtype = "int32" }), 1, { last = true })
    assert.are.same({ 1, 1, GPT2.vocab_size }, last.shape)
    assert.is_true(max_difference(all:narrow(2, n, 1), last) < 1e-5)
    assert.error_matches(function() model:forward(Tensor({ { 1 } }, { dtype = "int32" }), 1, { last = 1 }) end,
      "transformer:forward: last must be a boolean, got 1", 1, true)
  end)

  it("decodes through one execution plan for every position (model:decoder())", function()
    local model = transformer.from_safetensors(llama_path, LLAMA, { batch = 2 })
    local direct = generate_logits(model):realize()
    model:reset()
    local step = model:decoder()
    local parts = { model:forward(Tensor(PROMPT, { dtype = "int32" }), 1):realize() }
    for i = 1, 3 do
      local logits = step(Tensor({ { DECODED[1][i] }, { DECODED[2][i] } }, { dtype = "int32" }), 5 + i)
      parts[#parts + 1] = logits:clone():realize() -- the plan's buffer is overwritten by the next step
    end
    assert.is_true(max_difference(direct, Tensor.cat(parts, 2)) < 1e-5)
    -- later positions replay the plan: no kernel is compiled or even looked up
    local before = tcl.kernel_cache.stats()
    for position = 9, 11 do step(Tensor({ { 1 }, { 2 } }, { dtype = "int32" }), position):realize() end
    local after = tcl.kernel_cache.stats()
    assert.are.same({ before.hits, before.misses }, { after.hits, after.misses })
    assert.error_matches(function() step(Tensor({ { 1 } }, { dtype = "int32" }), 9) end,
      "transformer:decoder step: tokens must be an integer tensor of shape (2, 1), got int32 (1, 1)", 1, true)
    assert.error_matches(function() step(Tensor({ { 1 }, { 2 } }, { dtype = "int32" }), 17) end,
      "transformer:decoder step: start_pos must be an integer in 1..16, got 17", 1, true)
  end)

  it("decodes a batch of one on its token and position variables: one plan, the embedding row a slice", function()
    local model = transformer.from_safetensors(gpt2_path, GPT2)
    local prompt, decoded = { PROMPT[1] }, DECODED[1]
    local parts = { model:forward(Tensor(prompt, { dtype = "int32" }), 1):realize() }
    for i = 1, 3 do parts[#parts + 1] = model:forward(Tensor({ { decoded[i] } }, { dtype = "int32" }), 5 + i) end
    local direct = Tensor.cat(parts, 2):realize()
    model:reset()
    local step = model:decoder()
    parts = { model:forward(Tensor(prompt, { dtype = "int32" }), 1):realize() }
    for i = 1, 3 do
      parts[#parts + 1] = step(Tensor({ { decoded[i] } }, { dtype = "int32" }), 5 + i):clone():realize()
    end
    assert.is_true(max_difference(direct, Tensor.cat(parts, 2)) < 1e-5)
    local before = tcl.kernel_cache.stats()
    for position = 9, 12 do step(Tensor({ { position * 3 } }, { dtype = "int32" }), position):realize() end
    local after = tcl.kernel_cache.stats()
    assert.are.same({ before.hits, before.misses }, { after.hits, after.misses })
    assert.error_matches(function() step(Tensor({ { 50 } }, { dtype = "int32" }), 13) end,
      "transformer:decoder step: token 50 is outside 0..49", 1, true)
  end)

  it("sizes the KV cache by reset's context: the same logits, positions past it refused", function()
    local model = transformer.from_safetensors(gpt2_path, GPT2, { batch = 2 })
    local full = generate_logits(model):realize()
    local step = model:decoder()
    model:reset({ context = 8 })
    assert.are.equal(8, model:context())
    assert.is_true(max_difference(full, generate_logits(model)) < 1e-5)
    assert.error_matches(function() model:forward(Tensor({ { 1 }, { 2 } }, { dtype = "int32" }), 9) end,
      "transformer:forward: positions 9..9 are past the context of 8", 1, true)
    assert.error_matches(function() step(Tensor({ { 1 }, { 2 } }, { dtype = "int32" }), 1) end,
      "transformer:decoder step: the model was reset to another context since this decoder was made", 1, true)
    assert.error_matches(function() model:reset({ context = 17 }) end,
      "transformer:reset: context must be an integer in 1..16 (max_context), got 17", 1, true)
    assert.error_matches(function() model:reset({ size = 1 }) end, "transformer:reset: unknown option 'size'", 1, true)
  end)

  it("lists HF's parameters and builds random models of any configuration", function()
    local names = {}
    for _, p in ipairs(transformer.parameters(LLAMA)) do names[#names + 1] = p.name end
    local expected = {}
    for _, entry in ipairs(hf_shapes(LLAMA)) do expected[#expected + 1] = entry[1] end
    table.sort(names) table.sort(expected)
    assert.are.same(expected, names)
    local m = transformer.random(GPT2)
    assert.are.equal(50 * 32 + 16 * 32 + 2 * (4 * 32 + 32 * 96 + 96 + 32 * 32 + 32 + 32 * 64 + 64 + 64 * 32 + 32)
      + 64, m:parameter_count())
    local big = transformer.config(transformer.gpt2_124m())
    local n = 0
    for _, p in ipairs(transformer.parameters(big)) do
      local k = 1
      for _, s in ipairs(p.shape) do k = k * s end
      n = n + k
    end
    assert.are.equal(124439808, n) -- HF's gpt2, its lm_head tied
  end)

  it("refuses missing, unknown and mis-shaped tensors, naming them", function()
    local sd = {}
    for k, v in pairs(gpt2_sd) do sd[k] = v end
    sd["transformer.h.1.mlp.c_fc.bias"] = nil
    sd["transformer.h.0.attn.extra"] = Tensor.ones(3)
    sd["transformer.h.0.attn.c_attn.weight"] = Tensor.ones(96, 32)
    local ok, err = pcall(transformer.new, GPT2, sd)
    assert.is_false(ok)
    assert.matches("transformer.new: missing: h.1.mlp.c_fc.bias; not a parameter of gpt2: transformer.h.0.attn.extra; "
      .. "'transformer.h.0.attn.c_attn.weight' has shape (96, 32), expected (32, 96)", err, 1, true)
    local int_sd = {}
    for k, v in pairs(llama_sd) do int_sd[k] = v end
    int_sd["model.norm.weight"] = Tensor.ones(32, { dtype = "int32" })
    assert.error_matches(function() transformer.new(LLAMA, int_sd) end,
      "'model.norm.weight' has dtype int32, expected a float dtype", 1, true)
    -- LLaMA's rotary inv_freq buffers are skipped; GPT-2's attn.bias too (the safetensors above)
    int_sd["model.norm.weight"] = llama_sd["model.norm.weight"]
    int_sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = Tensor.ones(4)
    assert.is_nil(transformer.new(LLAMA, int_sd).weights["model.layers.0.self_attn.rotary_emb.inv_freq"])
    assert.error_matches(function() transformer.new(LLAMA, { [1] = Tensor.ones(1) }) end,
      "state dict key 1 is not a string", 1, true)
    assert.error_matches(function() transformer.new(LLAMA, { a = 1 }) end, "'a' is number, not a tensor", 1, true)
    assert.error_matches(function() transformer.new(LLAMA, 5) end, "expected a state dict", 1, true)
    local twice = { ["wte.weight"] = gpt2_sd["transformer.wte.weight"],
      ["transformer.wte.weight"] = gpt2_sd["transformer.wte.weight"] }
    assert.error_matches(function() transformer.new(GPT2, twice) end, "'wte.weight' is given twice", 1, true)
  end)

  it("refuses bad GGUF files, naming the file and the problem", function()
    local function refuses(path, message)
      local ok, err = pcall(transformer.from_gguf, path)
      assert.is_false(ok)
      assert.matches(message, err, 1, true)
      assert.matches(path, err, 1, true)
    end
    refuses(write_gguf(llama_sd, LLAMA, { arch = "gpt2" }), 'holds a "gpt2" model: only llama GGUF files are read')
    refuses(write_gguf(llama_sd, LLAMA, { no_context = true }), "has no metadata key 'llama.context_length'")
    refuses(write_gguf(llama_sd, LLAMA, { extra = "blk.0.weird.weight" }),
      "tensors that are not llama parameters: blk.0.weird.weight")
    refuses(write_gguf(llama_sd, LLAMA, { drop = "model.layers.1.mlp.up_proj.weight" }),
      "missing: model.layers.1.mlp.up_proj.weight")
    local wrong = {}
    for k, v in pairs(llama_sd) do wrong[k] = v end
    wrong["model.layers.0.self_attn.k_proj.weight"] = Tensor.ones(32, 32)
    refuses(write_gguf(wrong, LLAMA), "tensor 'blk.0.attn_k.weight' has shape (32, 32), expected (16, 32)")
    wrong["model.layers.0.self_attn.k_proj.weight"] = llama_sd["model.layers.0.self_attn.k_proj.weight"]
    wrong["model.layers.0.mlp.up_proj.weight"] = Tensor.ones(40, 32)
    refuses(write_gguf(wrong, LLAMA), "'model.layers.0.mlp.up_proj.weight' has shape (40, 32), expected (48, 32)")
  end)

  it("checks its configuration, naming the field", function()
    local function refuses(change, message)
      local c = {}
      for k, v in pairs(LLAMA) do c[k] = v end
      for k, v in pairs(change) do c[k] = v end
      assert.error_matches(function() transformer.config(c) end, "transformer.config: " .. message, 1, true)
    end
    refuses({ arch = "bert" }, 'arch must be "gpt2" or "llama", got "bert"')
    refuses({ dim = 0 }, "dim must be a positive integer, got 0")
    refuses({ vocab_size = 2.5 }, "vocab_size must be a positive integer, got 2.5")
    refuses({ n_layers = "2" }, 'n_layers must be a positive integer, got "2"')
    refuses({ n_heads = 5 }, "dim 32 must be divisible by n_heads 5")
    refuses({ n_kv_heads = 3 }, "n_heads 4 must be divisible by n_kv_heads 3")
    refuses({ arch = "gpt2", n_kv_heads = 2 }, "gpt2 has no grouped-query attention")
    refuses({ dim = 12, n_heads = 4, n_kv_heads = 4 }, "llama's rotary embedding needs an even head_dim, got 3")
    refuses({ norm_eps = 0 }, "norm_eps must be a positive number, got 0")
    refuses({ rope_theta = -1 }, "rope_theta must be a positive number, got -1")
    refuses({ tie_embeddings = 1 }, "tie_embeddings must be a boolean, got 1")
    refuses({ arch = "gpt2", n_kv_heads = 4, tie_embeddings = false }, "gpt2's lm_head is tied")
    refuses({ head_dim = 4 }, "head_dim is dim / n_heads = 8, got 4")
    refuses({ layers = 2 }, "unknown field 'layers'")
    assert.error_matches(function() transformer.config(nil) end, "expected a configuration table, got nil", 1, true)
    assert.error_matches(function() transformer.random(LLAMA, { std = -1 }) end, "std must be a number >= 0", 1, true)
    assert.error_matches(function() transformer.new(LLAMA, llama_sd, { batch = 0 }) end,
      "batch must be a positive integer, got 0", 1, true)
  end)

  it("checks forward's arguments", function()
    local model = transformer.from_safetensors(llama_path, LLAMA)
    local function refuses(tokens, start, message)
      assert.error_matches(function() model:forward(tokens, start) end, "transformer:forward: " .. message, 1, true)
    end
    refuses({ 1 }, 1, "tokens must be a tensor, got table")
    refuses(Tensor({ { 1.5 } }), 1, "tokens must be an integer tensor, got float32")
    refuses(Tensor({ 1, 2 }, { dtype = "int32" }), 1, "tokens must have shape (1, T) (batch, positions), got (2,)")
    refuses(Tensor({ { 1 } }, { dtype = "int32" }), 0, "start_pos must be a positive integer (1-based), got 0")
    refuses(Tensor({ { 1, 2 } }, { dtype = "int32" }), 16,
      "positions 16..17 are past the context of 16 (max_context, or reset's context)")
    refuses(Tensor({ { 1, 50 } }, { dtype = "int32" }), 1, "token 50 (entry 2) is outside 0..49")
  end)
end)

describe("tcl.models.kv_cache", function()
  local cache = kv_cache.new({ n_layers = 2, batch = 1, kv_heads = 2, max_context = 4, head_dim = 3 })

  it("writes chunks and single positions in place, and masks the keys after each query", function()
    local k = Tensor.arange(1, 13):float():reshape(1, 2, 2, 3)
    cache:write(2, k, -k, 2)
    cache:write(2, Tensor.full({ 1, 2, 1, 3 }, 9.0), Tensor.full({ 1, 2, 1, 3 }, -9.0), 4)
    local keys, values = cache:read(2, 4)
    assert.are.same({ { { { 0, 0, 0 }, { 1, 2, 3 }, { 4, 5, 6 }, { 9, 9, 9 } },
      { { 0, 0, 0 }, { 7, 8, 9 }, { 10, 11, 12 }, { 9, 9, 9 } } } }, keys:tolist())
    assert.are.equal(-9, values:tolist()[1][1][4][1])
    -- queries at 2 and 3 against the keys read for them, positions 1..3
    assert.are.same({ { { { 0, 0, -math.huge }, { 0, 0, 0 } } } }, cache:mask(2, 2):tolist())
    -- a position variable (decoding: one kernel for every position), read up to that position
    local at = cache.position:bind(3)
    cache:write(1, Tensor.full({ 1, 2, 1, 3 }, 5.0), Tensor.full({ 1, 2, 1, 3 }, 6.0), at)
    assert.are.same({ 0, 0, 5, 0 }, cache:read(1, 4):narrow(2, 1, 1):narrow(4, 1, 1):reshape(4):tolist())
    local seen = cache:read(1, at)
    assert.are.same({ 0, 0, 5 }, seen:narrow(2, 1, 1):narrow(4, 1, 1):reshape(at):tolist())
    assert.is_nil(cache:mask(at, 1)) -- one query sees every key read
    cache:reset()
    assert.are.equal(0, cache:read(2, 4):abs():sum():item())
  end)

  it("checks its arguments", function()
    local function refuses(f, message) assert.error_matches(f, message, 1, true) end
    refuses(function() kv_cache.new({ n_layers = 0, batch = 1, kv_heads = 1, max_context = 1, head_dim = 1 }) end,
      "kv_cache.new: n_layers must be a positive integer, got 0")
    refuses(function() kv_cache.new({ batch = 1 }) end, "kv_cache.new: n_layers must be a positive integer, got nil")
    local k = Tensor.zeros(1, 2, 1, 3)
    refuses(function() cache:write(3, k, k, 1) end, "kv_cache:write: layer must be an integer in 1..2, got 3")
    refuses(function() cache:write(1, Tensor.zeros(1, 2, 1, 4), k, 1) end,
      "kv_cache:write: k must have shape (1, 2, T, 3), got (1, 2, 1, 4)")
    refuses(function() cache:write(1, k, Tensor.zeros(1, 2, 2, 3), 1) end,
      "kv_cache:write: v must have shape (1, 2, T, 3) with T = 1, got (1, 2, 2, 3)")
    refuses(function() cache:write(1, k, "v", 1) end, "kv_cache:write: v must be a tensor, got string")
    refuses(function() cache:write(1, k, k, 5) end, "kv_cache:write: positions 5..5 are past max_context 4")
    refuses(function() cache:write(1, k, k, 0) end, "kv_cache:write: start must be a positive integer, got 0")
    refuses(function()
      cache:write(1, Tensor.zeros(1, 2, 2, 3), Tensor.zeros(1, 2, 2, 3), cache.position:bind(1))
    end, "kv_cache:write: start must be an integer, or for one position the cache's position variable bound to a "
      .. "value, got the size position=1 for 2 positions")
    refuses(function() cache:write(1, k, k, Tensor({ 1 })) end,
      "kv_cache:write: start must be a positive integer, got Tensor")
    refuses(function() cache:read(1, 5) end, "kv_cache:read: positions 1..5 are past max_context 4")
    refuses(function() cache:mask(1, 0) end, "kv_cache:mask: T must be a positive integer, got 0")
  end)
end)
