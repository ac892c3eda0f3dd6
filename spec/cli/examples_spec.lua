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

  it("refuses a bad option with a usage line", function()
    local status, _, err = llm("--top-p 2")
    assert.are.equal(2, status)
    assert.is_truthy(err:find("llm.lua: top_p must be a number in (0, 1], got 2", 1, true), err)
    status, _, err = llm("--prompt hello")
    assert.are.equal(2, status)
    assert.is_truthy(err:find("--prompt needs a GGUF checkpoint with a tokenizer", 1, true), err)
  end)
end)
