-- spec/cli/examples_spec.lua — the training example (examples/fashion_mnist.lua) run for a few
-- batches per epoch: its learning-rate schedule keeps Adam's 1e-3 for runs of 1 or 2 epochs
-- and lowers it to 1e-4 only for the last third of longer runs (a 1-epoch try trained at a
-- tenth of the rate the whole time).
local helper = require "spec.support.helper"
local data = require "tcl.api.data"
local q = helper.shell_quote

local DATA = data.FASHION_MNIST_DIR

-- The learning rate of each epoch, read from the progress lines of `tcl examples/fashion_mnist.lua
-- mlp <epochs> 2` (2 batches per epoch).
local function rates(epochs)
  local status, out, err = helper.run("timeout 300 " .. q(helper.tcl_bin) .. " " ..
    q(helper.root .. "/examples/fashion_mnist.lua") .. " mlp " .. epochs .. " 2")
  assert.are.equal(0, status, err)
  local list = {}
  for epoch, rate in out:gmatch("MLP epoch (%d+)/%d+ lr ([%d.e-]+)") do list[tonumber(epoch)] = tonumber(rate) end
  assert.is_truthy(out:find("MLP: test accuracy", 1, true), out)
  return list
end

describe("examples/fashion_mnist.lua", function()
  local present = helper.exists(DATA .. "/train-labels-idx1-ubyte.gz")

  it("keeps Adam's 1e-3 for 1 or 2 epochs, and lowers it for the last third of longer runs", function()
    if not present then
      pending("Fashion-MNIST is not installed in " .. DATA .. " (apt-get install dataset-fashion-mnist)")
      return
    end
    assert.are.same({ 1e-3 }, rates(1))
    assert.are.same({ 1e-3, 1e-3 }, rates(2))
    assert.are.same({ 1e-3, 1e-3, 1e-4 }, rates(3))
  end)
end)

-- examples/llm.lua: a small random LLaMA, its prompt, three tokens and the speed lines; the same
-- seed gives the same tokens; a bad option is a usage error (status 2).
describe("examples/llm.lua", function()
  local function llm(args)
    local script = q(helper.root .. "/examples/llm.lua")
    return helper.run("timeout 300 " .. q(helper.tcl_bin) .. " " .. script .. " " .. args)
  end

  it("generates with the KV cache and prints the tokens per second of the prompt and of the decoding", function()
    local status, out, err = llm("--arch llama --n 3 --tokens 1,2,3 --temperature 0.7 --seed 5")
    assert.are.equal(0, status, err)
    local generated = out:match("generated: ([%d,]+)")
    assert.is_truthy(generated and select(2, generated:gsub(",", "")) == 2, out)
    assert.is_truthy(out:find("prompt: 3 tokens in [%d.]+ s, [%d.]+ tokens/s"), out)
    assert.is_truthy(out:find("decode: 2 tokens in [%d.]+ s, [%d.]+ tokens/s"), out)
    local again = select(2, llm("--arch llama --n 3 --tokens 1,2,3 --temperature 0.7 --seed 5"))
    assert.are.equal(generated, again:match("generated: ([%d,]+)"))
  end)

  it("reads a GGUF checkpoint: its configuration, its weights and its tokenizer (text in, text out)", function()
    local gguf = require "spec.support.gguf_writer"
    -- a LLaMA of one layer (dim 32, 4 heads, 2 kv heads) over a byte-level vocabulary of 50
    -- tokens: 49 letters and "ab"
    local letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
    local tokens = { item = "string" }
    for i = 1, #letters do tokens[i] = letters:sub(i, i) end
    tokens[50] = "ab"
    local seed = 7
    local function values(n) -- deterministic small floats (a linear congruential sequence)
      local out = {}
      for i = 1, n do
        seed = (seed * 1103515245 + 12345) % 2147483648
        out[i] = string.pack("<f", (seed / 2147483648 - 0.5) * 0.4)
      end
      return table.concat(out)
    end
    local list = {}
    local function add(name, dims)
      local n = 1
      for _, d in ipairs(dims) do n = n * d end
      local bytes_of = values(n)
      if name:find("norm") then bytes_of = string.rep(string.pack("<f", 1), n) end
      list[#list + 1] = { name = name, dims = dims, type = "F32", data = bytes_of }
    end
    add("token_embd.weight", { 32, 50 })
    add("blk.0.attn_norm.weight", { 32 })
    add("blk.0.attn_q.weight", { 32, 32 })
    add("blk.0.attn_k.weight", { 32, 16 })
    add("blk.0.attn_v.weight", { 32, 16 })
    add("blk.0.attn_output.weight", { 32, 32 })
    add("blk.0.ffn_norm.weight", { 32 })
    add("blk.0.ffn_gate.weight", { 32, 64 })
    add("blk.0.ffn_up.weight", { 32, 64 })
    add("blk.0.ffn_down.weight", { 64, 32 })
    add("output_norm.weight", { 32 })
    add("output.weight", { 32, 50 })
    local bytes = gguf.file({
      metadata = {
        gguf.entry("general.architecture", "string", "llama"),
        gguf.entry("llama.embedding_length", "uint32", 32), gguf.entry("llama.block_count", "uint32", 1),
        gguf.entry("llama.attention.head_count", "uint32", 4),
        gguf.entry("llama.attention.head_count_kv", "uint32", 2),
        gguf.entry("llama.feed_forward_length", "uint32", 64), gguf.entry("llama.context_length", "uint32", 64),
        gguf.entry("tokenizer.ggml.model", "string", "gpt2"), gguf.entry("tokenizer.ggml.tokens", "array", tokens),
        gguf.entry("tokenizer.ggml.merges", "array", { item = "string", "a b" }),
      },
      tensors = list,
    })
    local path = os.tmpname() .. ".gguf"
    helper.write(path, bytes)
    local status, out, err = llm("--checkpoint " .. q(path) .. " --prompt abc --n 4")
    os.remove(path)
    assert.are.equal(0, status, err)
    assert.is_truthy(out:find("llama: 1 layers, dim 32, 4 heads (2 kv), vocab 50", 1, true), out)
    assert.is_truthy(out:find("prompt: 49,2\n"), out) -- "ab" (the merge), then "c"
    local generated = out:match("generated: ([%d,]+)")
    local text = ""
    for id in generated:gmatch("%d+") do text = text .. tokens[tonumber(id) + 1] end
    assert.is_truthy(out:find("text: " .. text .. "\n", 1, true), out)
  end)

  it("refuses a bad option with a usage line", function()
    local status, _, err = llm("--top-p 2")
    assert.are.equal(2, status)
    assert.is_truthy(err:find("llm.lua: top_p must be a number in (0, 1], got 2", 1, true), err)
    status, _, err = llm("--prompt hello")
    assert.are.equal(2, status)
    assert.is_truthy(err:find("--prompt needs a GGUF checkpoint with a tokenizer", 1, true), err)
  end)
end)
