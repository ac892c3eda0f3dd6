-- bench/llm_bench.lua — language-model inference (issue 37): GPT-2's 124M configuration with random
-- weights in Hugging Face's layout (tcl.models.transformer), decoding through the KV cache and a
-- 512-token prompt, against GPT-2 written with torch ops decoding eagerly with its cache
-- (bench/llm_baselines.py), measured in the same run.
--
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' \
--     BENCH_OPENBLAS_CORETYPE=SkylakeX lua5.4 bench/llm_bench.lua [part ...]
--
-- Parts (default all):
--   decode_128, decode_1024  one decoding step (the token at position 128 or 1024, the cache
--                            holding the positions before it) through model:decoder()'s plan,
--                            its logits' argmax read to the host: tokens per second
--   prompt_512               the forward of a 512-token prompt in one batch (the last position's
--                            logits, as a generation needs): ms and tokens per second
--   quantized                decode_128 with the weights stored as Q8_0 and Q4_0 blocks (random
--                            blocks of the GGUF layouts, the tied embedding too: dequantized inside
--                            the products and the row read) against float32 in the same process
-- Each part runs in a child process with the default threads (the cores) and with THREADS=1;
-- torch runs at the same thread counts (torch.set_num_threads). Figures are medians of
-- BENCH_RUNS (default 15) steps after a warm-up. A part below torch names its slowest kernels
-- (one profiled step).
local support = require "bench.support"
local shell_quote, capture, figure, median = support.shell_quote, support.capture, support.figure, support.median

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 15
local self_path = arg and arg[0] or "bench/llm_bench.lua"
local PARTS = { "decode_128", "decode_1024", "prompt_512", "quantized" }

-- ---------------------------------------------------------------------------------------
-- the child: one part, figures on stdout

-- Raw GGUF blocks of `type` ("Q8_0", "Q4_0") for a (rows, cols) weight, blocks along cols:
-- random quants and one float16 scale (2^-12 for Q8_0, 2^-9 for Q4_0: weights of GPT-2's size).
local function random_blocks(tcl, type, rows, cols)
  local Tensor = tcl.Tensor
  local blocks = rows * cols // 32
  local quants = type == "Q8_0" and 32 or 16
  local scale = Tensor.full({ blocks, 2 }, 0, { dtype = "uint8" })
    :add(Tensor({ { 0, type == "Q8_0" and 0x0C or 0x18 } }, { dtype = "uint8" }))
  local q = Tensor.randint(0, 256, { blocks, quants }, { dtype = "uint8" })
  return Tensor.cat({ scale, q }, 2):realize()
end

-- The model with its matmul weights and its tied embedding stored as blocks of `type`.
local function quantized_model(tcl, transformer, type)
  local gguf = require "tcl.api.gguf"
  local config = transformer.gpt2_124m()
  local sd = transformer.random(config):state_dict()
  for name, w in pairs(sd) do
    local s = w.shape
    if name == "wte.weight" then -- (vocab, dim): blocks along dim, the LM head's sum
      sd[name] = gguf.dequantize(random_blocks(tcl, type, s[1], s[2]), type, { s[1], s[2] })
    elseif #s == 2 and name:match("weight$") and (name:match("attn") or name:match("mlp")) then
      -- Conv1D weights (in, out) are stored (out, in) in GGUF, blocks along the product's sum
      local rows, cols = s[2], s[1]
      sd[name] = gguf.dequantize(random_blocks(tcl, type, rows, cols), type, { rows, cols }):transpose(1, 2)
    end
  end
  return transformer.new(config, sd)
end

local function decode_seconds(tcl, model, position)
  local Tensor = tcl.Tensor
  model:reset({ context = position })
  local step = model:decoder()
  local token = Tensor({ { 11 } }, { dtype = "int32" })
  local function once() return step(token, position):argmax():item() end
  for _ = 1, 4 do once() end -- warm-up, capture, first replays
  local times = {}
  for i = 1, RUNS do
    local start = tcl.clock()
    once()
    times[i] = tcl.clock() - start
  end
  return median(times), function() return tcl.profile(once) end
end

local function slowest(report, n)
  local by_name = {}
  for _, k in ipairs(report.kernels) do
    local e = by_name[k.name] or { name = k.name, seconds = 0, count = 0 }
    e.seconds, e.count = e.seconds + k.seconds, e.count + 1
    by_name[k.name] = e
  end
  local list = {}
  for _, e in pairs(by_name) do list[#list + 1] = e end
  table.sort(list, function(a, b) return a.seconds > b.seconds end)
  local parts = {}
  for i = 1, math.min(n, #list) do
    parts[i] = string.format("%s x%d %.2f ms", list[i].name, list[i].count, list[i].seconds * 1e3)
  end
  return table.concat(parts, ", ")
end

local function child(part)
  local tcl = require "tcl"
  local transformer = tcl.models.transformer
  tcl.manual_seed(0)
  if part == "decode_128" or part == "decode_1024" then
    local position = tonumber(part:match("%d+"))
    local seconds, profile = decode_seconds(tcl, transformer.random(transformer.gpt2_124m()), position)
    figure("gpt2_" .. part .. "_tcl", 1 / seconds, "tok/s")
    print("kernels " .. part .. " " .. slowest(profile(), 4))
  elseif part == "prompt_512" then
    local Tensor = tcl.Tensor
    local model = transformer.random(transformer.gpt2_124m())
    model:reset({ context = 512 })
    local ids = {}
    for i = 1, 512 do ids[i] = (i * 7919) % 50257 end
    local tokens = Tensor({ ids }, { dtype = "int32" })
    local function once() return model:forward(tokens, 1, { last = true }):argmax():item() end
    once()
    local times = {}
    for i = 1, math.max(3, RUNS // 3) do
      local start = tcl.clock()
      once()
      times[i] = tcl.clock() - start
    end
    local seconds = median(times)
    figure("gpt2_prompt_512_tcl_ms", seconds * 1e3, "ms")
    figure("gpt2_prompt_512_tcl", 512 / seconds, "tok/s")
    print("kernels prompt_512 " .. slowest(tcl.profile(once), 4))
  elseif part == "quantized" then
    for _, type in ipairs { "float32", "Q8_0", "Q4_0" } do
      local model = type == "float32" and transformer.random(transformer.gpt2_124m())
        or quantized_model(tcl, transformer, type)
      local seconds, profile = decode_seconds(tcl, model, 128)
      figure("gpt2_decode_128_" .. type .. "_tcl", 1 / seconds, "tok/s")
      print("kernels decode_128_" .. type .. " " .. slowest(profile(), 3))
    end
  else
    error("llm_bench: unknown part '" .. tostring(part) .. "'")
  end
end

-- ---------------------------------------------------------------------------------------
-- the parent

local function figures_of(out)
  local f = {}
  for name, value in out:gmatch("figure (%S+) (%S+)") do f[name] = tonumber(value) end
  return f
end

local function run_part(part, threads)
  local env = threads and ("THREADS=" .. threads .. " ") or ""
  local lua = arg and arg[-1] or "lua5.4"
  return capture(env .. shell_quote(lua) .. " " .. shell_quote(self_path) .. " --child " .. part)
end

local function torch_part(part, threads)
  if part == "quantized" then return "" end
  return capture(support.python() .. " bench/llm_baselines.py --threads " .. threads .. " --runs " .. RUNS .. " "
    .. part)
end

local function main(parts)
  local cores = tonumber(capture("nproc"):match("%d+")) or 2
  print(string.format("llm_bench: GPT-2 124M (random weights), %d runs per median, %d cores", RUNS, cores))
  for _, part in ipairs(parts) do
    for _, threads in ipairs { cores, 1 } do
      local ours = run_part(part, threads ~= cores and threads or nil)
      local theirs = torch_part(part, threads)
      io.write(ours, theirs)
      local a, b = figures_of(ours), figures_of(theirs)
      local label = string.format("%s, %d thread%s", part, threads, threads == 1 and "" or "s")
      if part == "quantized" then
        local f32 = a.gpt2_decode_128_float32_tcl
        for _, type in ipairs { "Q8_0", "Q4_0" } do
          local q = a["gpt2_decode_128_" .. type .. "_tcl"]
          if f32 and q then
            print(string.format("row %s: %s %.1f tok/s, float32 %.1f tok/s: %.2fx (target > 1)", label, type, q, f32,
              q / f32))
          end
        end
      else
        local key = part == "prompt_512" and "gpt2_prompt_512" or "gpt2_" .. part
        local mine, torch = a[key .. "_tcl"], b[key .. "_torch"]
        if mine and torch then
          print(string.format("row %s: tcl %.1f tok/s, torch %.1f tok/s: %.2fx torch (target >= 1)", label, mine,
            torch, mine / torch))
        elseif mine then
          print(string.format("row %s: tcl %.1f tok/s (torch: no figure)", label, mine))
        end
      end
    end
  end
end

if arg and arg[1] == "--child" then
  child(arg[2])
else
  local parts = {}
  for i = 1, arg and #arg or 0 do parts[#parts + 1] = arg[i] end
  if #parts == 0 then parts = PARTS end
  for _, p in ipairs(parts) do
    local known = false
    for _, q in ipairs(PARTS) do if p == q then known = true end end
    if not known then error("llm_bench: unknown part '" .. p .. "' (known: " .. table.concat(PARTS, ", ") .. ")") end
  end
  main(parts)
end
