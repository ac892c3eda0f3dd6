-- examples/llm.lua — text generation with a decoder-only transformer (GPT-2 or LLaMA):
-- the prompt in one batch, then one token at a time through the KV cache.
--
--   tcl examples/llm.lua [--arch gpt2|llama] [--checkpoint file.safetensors|file.gguf]
--                        [--prompt "..."|--tokens 1,2,3] [--n 8] [--temperature 0]
--                        [--top-k K] [--top-p P] [--seed S]
--
-- Without a checkpoint it builds GPT-2's 124M configuration (--arch llama: a small LLaMA with
-- grouped-query attention) with random weights in the real layout. A safetensors checkpoint is
-- in Hugging Face's layout (its configuration: --arch's, GPT-2 124M or the small LLaMA); a
-- GGUF checkpoint (llama) brings its configuration and its tokenizer, so --prompt takes text
-- and the output is decoded. Prints the generated ids (and text) and the speed of the prompt
-- and of the decoding separately. --temperature 0 (the default) is greedy.
local transformer = tcl.models.transformer
local sampling = tcl.models.sampling

local USAGE = "usage: tcl examples/llm.lua [--arch gpt2|llama] [--checkpoint file.safetensors|file.gguf] "
  .. "[--prompt TEXT|--tokens 1,2,3] [--n N] [--temperature T] [--top-k K] [--top-p P] [--seed S]"

local function usage_error(fmt, ...)
  io.stderr:write("llm.lua: ", string.format(fmt, ...), "\n", USAGE, "\n")
  os.exit(2)
end

local OPTIONS = { ["--arch"] = "arch", ["--checkpoint"] = "checkpoint", ["--prompt"] = "prompt",
  ["--tokens"] = "tokens", ["--n"] = "n", ["--temperature"] = "temperature", ["--top-k"] = "top_k",
  ["--top-p"] = "top_p", ["--seed"] = "seed" }

local args = {}
do
  local i = 1
  while i <= #arg do
    local key = OPTIONS[arg[i]]
    if arg[i] == "--help" or arg[i] == "-h" then print(USAGE) os.exit(0) end
    if not key then usage_error("unknown argument '%s'", arg[i]) end
    if arg[i + 1] == nil then usage_error("%s needs a value", arg[i]) end
    args[key] = arg[i + 1]
    i = i + 2
  end
end

local function number_arg(name, integer)
  local text = args[name]
  if text == nil then return nil end
  local v = tonumber(text)
  if v == nil or (integer and math.type(v) ~= "integer") then
    usage_error("--%s must be %s, got '%s'", name:gsub("_", "-"), integer and "an integer" or "a number", text)
  end
  return v
end

local arch = args.arch or "gpt2"
if not transformer.ARCHITECTURES[arch] then usage_error("--arch must be gpt2 or llama, got '%s'", arch) end
local n_new = number_arg("n", true) or 8
if n_new < 1 then usage_error("--n must be at least 1, got %d", n_new) end
local sample_opts = { temperature = number_arg("temperature") or 0, top_k = number_arg("top_k", true),
  top_p = number_arg("top_p") }
local ok, why = pcall(sampling.options, sample_opts)
if not ok then usage_error("%s", (tostring(why):gsub("^.-sampling%.sample: ", ""))) end
tcl.manual_seed(number_arg("seed", true) or 0)
if args.prompt and args.tokens then usage_error("give --prompt or --tokens, not both") end
if args.prompt and not (args.checkpoint or ""):match("%.gguf$") then
  usage_error("--prompt needs a GGUF checkpoint with a tokenizer; give --tokens")
end

-- the model
local model, tokenizer
local started = tcl.clock()
local path = args.checkpoint
if path == nil then
  model = transformer.random(arch == "gpt2" and transformer.gpt2_124m() or transformer.llama_small())
elseif path:match("%.gguf$") then
  local metadata
  model, metadata = transformer.from_gguf(path)
  if metadata["tokenizer.ggml.model"] then tokenizer = tcl.tokenizer.from_metadata(metadata) end
elseif path:match("%.safetensors$") then
  model = transformer.from_safetensors(path, arch == "gpt2" and transformer.gpt2_124m() or transformer.llama_small())
else
  usage_error("--checkpoint must name a .safetensors or a .gguf file, got '%s'", path)
end
local c = model.config
print(string.format("%s: %d layers, dim %d, %d heads (%d kv), vocab %d, %.1fM parameters (%s) in %.1f s", c.arch,
  c.n_layers, c.dim, c.n_heads, c.n_kv_heads, c.vocab_size, model:parameter_count() / 1e6,
  path or "random weights", tcl.clock() - started))

-- the prompt
local prompt = {}
if args.prompt then
  if not tokenizer then usage_error("--prompt needs a GGUF checkpoint with a tokenizer; give --tokens") end
  prompt = tokenizer:encode(args.prompt)
elseif args.tokens then
  for id in args.tokens:gmatch("[^,]+") do
    local v = math.tointeger(tonumber(id))
    if v == nil or v < 0 or v >= c.vocab_size then
      usage_error("--tokens: '%s' is not a token id in 0..%d", id, c.vocab_size - 1)
    end
    prompt[#prompt + 1] = v
  end
else
  for i = 1, 16 do prompt[i] = (i * 997) % c.vocab_size end
end
if #prompt == 0 then usage_error("the prompt is empty") end
if #prompt + n_new > c.max_context then
  usage_error("%d prompt tokens and %d new ones are more than the context of %d", #prompt, n_new, c.max_context)
end

local function next_token(logits)
  return sampling.sample(logits:narrow(2, logits.shape[2], 1):reshape(1, c.vocab_size), sample_opts)
end

-- a KV cache for the positions this generation reaches
model:reset({ context = #prompt + n_new })
-- the prompt in one batch
local t0 = tcl.clock()
local token = next_token(model:forward(Tensor({ prompt }, { dtype = "int32" }), 1, { last = true })):item()
local prompt_seconds = tcl.clock() - t0
local generated = { token }
-- then one token at a time, through one execution plan for every position (tcl.jit: the first
-- two steps run and capture it, the others replay it)
local step = model:decoder()
local replay_start -- the clock when the plan had been captured (after two steps)
t0 = tcl.clock()
for i = 2, n_new do
  if i == 4 then replay_start = tcl.clock() end
  token = next_token(step(Tensor({ { token } }, { dtype = "int32" }), #prompt + i - 1)):item()
  generated[i] = token
end
local decode_seconds = tcl.clock() - t0
local replay_seconds = replay_start and tcl.clock() - replay_start

print("prompt: " .. table.concat(prompt, ","))
print("generated: " .. table.concat(generated, ","))
if tokenizer then print("text: " .. tokenizer:decode(generated)) end
print(string.format("prompt: %d tokens in %.3f s, %.1f tokens/s (with the first token's sampling)", #prompt,
  prompt_seconds, #prompt / prompt_seconds))
if n_new > 1 then
  print(string.format("decode: %d tokens in %.3f s, %.1f tokens/s", n_new - 1, decode_seconds,
    (n_new - 1) / decode_seconds))
end
if replay_seconds then
  print(string.format("decode after the plan's capture: %d tokens in %.3f s, %.1f tokens/s", n_new - 3,
    replay_seconds, (n_new - 3) / replay_seconds))
end
