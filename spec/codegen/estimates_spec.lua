-- spec/codegen/estimates_spec.lua — what tcl.codegen.driver.estimates counts in a linear program: ALU ops per
-- loop trip, and apart from them the value ops (data, not addresses) that
-- spec/schedule/schedule_models_spec.lua compares with a graph's own op count.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.driver.lower"
local linearize = require "tcl.codegen.driver.linearize"
local estimates = require "tcl.codegen.driver.estimates"

local function estimate(t)
  local k = schedule.create({ t.uop }).kernels[1]
  local ctx = { name = k.name, device = "EMU", renderer = lower.backend("EMU").renderer, noopt = true }
  return estimates.of(linearize.linearize(lower.run_passes(k.ast, ctx)))
end

describe("tcl.codegen.driver.estimates", function()
  it("counts value ops apart from index arithmetic and the conditions made from it", function()
    local x = tcl.Tensor.rand(6, 5):realize()
    local est = estimate(x:permute(2, 1):pad({ { 1, 1 }, { 0, 2 } }):mul(2):add(1))
    -- (7, 8) elements, each a multiply and an add (the padding is the load's gate); indices,
    -- bounds and the gate's conditions are address work
    assert.are.equal(7 * 8 * 2, est.value_ops)
    assert.is_true(est.ops > est.value_ops)
  end)

  it("counts each op once per trip of the loops around it", function()
    local x = tcl.Tensor.rand(4, 3):realize()
    -- the sum's add runs 4 x 3 times, the multiply by 2 on each of the 4 sums
    local est = estimate(x:sum(2):mul(2))
    assert.are.equal(4 * 3 + 4, est.value_ops)
    -- a comparison of data is a value op
    est = estimate(x:gt(0.5))
    assert.are.equal(12, est.value_ops)
  end)
end)
