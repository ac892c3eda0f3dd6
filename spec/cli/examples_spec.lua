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
