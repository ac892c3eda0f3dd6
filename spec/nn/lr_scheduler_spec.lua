-- spec/nn/lr_scheduler_spec.lua — optim.StepLR, CosineAnnealingLR and LinearLR against torch.optim.lr_scheduler
local tcl = require "tcl"
local Tensor, optim = tcl.Tensor, tcl.optim
local torch_ref = require "spec.support.torch_ref"

local function sgd() return optim.SGD({ Tensor({ 1.5, 2 }, { requires_grad = true }) }, { lr = 0.1 }) end

describe("tcl.optim learning-rate schedulers", function()
  it("match torch over 12 epochs", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local ref = torch_ref.run({
      "import torch.optim.lr_scheduler as S",
      "def run(make):\n  o = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1); s = make(o); r = []\n" ..
      "  for _ in range(12):\n    o.step(); s.step(); r.append(s.get_last_lr()[0])\n  return r",
      "out['step'] = run(lambda o: S.StepLR(o, 3, 0.5))",
      "out['cos'] = run(lambda o: S.CosineAnnealingLR(o, 10, 0.01))",
      "out['lin'] = run(lambda o: S.LinearLR(o, 0.25, 1.0, 4))",
    })
    local makers = {
      step = function(o) return optim.StepLR(o, 3, 0.5) end,
      cos = function(o) return optim.CosineAnnealingLR(o, 10, 0.01) end,
      lin = function(o) return optim.LinearLR(o, 0.25, 1.0, 4) end,
    }
    for name, make in pairs(makers) do
      local o = sgd()
      local s = make(o)
      for e = 1, 12 do
        local lr = s:step()
        assert.is_true(math.abs(lr - ref[name][e]) < 1e-9, string.format("%s epoch %d: %g vs %g", name, e, lr,
          ref[name][e]))
        assert.are.equal(lr, s:get_last_lr())
      end
    end
  end)

  it("errors name the scheduler and the argument", function()
    local ok, err = pcall(optim.StepLR, sgd(), 0)
    assert.is_false(ok)
    assert.matches("optim.StepLR: step_size must be a positive integer", tostring(err))
    ok, err = pcall(optim.CosineAnnealingLR, {}, 10)
    assert.is_false(ok)
    assert.matches("optim.CosineAnnealingLR: expects an optimizer", tostring(err))
    ok, err = pcall(optim.LinearLR, sgd(), 0)
    assert.is_false(ok)
    assert.matches("optim.LinearLR: start_factor must be a positive number", tostring(err))
  end)
end)
