-- spec/nn/lr_scheduler_spec.lua — the learning-rate schedulers (optim.StepLR, MultiStepLR,
-- ExponentialLR, LambdaLR, CosineAnnealingLR, LinearLR, OneCycleLR with its momentum cycle,
-- SequentialLR) against torch.optim.lr_scheduler, Optimizer.set_momentum, and their errors.
local tcl = require "tcl"
local Tensor, optim = tcl.Tensor, tcl.optim
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"

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

  it("MultiStepLR, ExponentialLR, LambdaLR and SequentialLR match torch over 14 epochs", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local ref = torch_ref.run({
      "import torch.optim.lr_scheduler as S",
      "def run(make):\n  o = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1); s = make(o); r = []\n" ..
      "  for _ in range(14):\n    o.step(); s.step(); r.append(s.get_last_lr()[0])\n  return r",
      "out['multi'] = run(lambda o: S.MultiStepLR(o, [2, 5, 5, 9], 0.5))",
      "out['exp'] = run(lambda o: S.ExponentialLR(o, 0.8))",
      "out['lambda'] = run(lambda o: S.LambdaLR(o, lambda e: 1.0 / (e + 1)))",
      "out['seq'] = run(lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 3), S.CosineAnnealingLR(o, 6, 0.001),"
        .. " S.StepLR(o, 2, 0.5)], [3, 9]))",
    })
    local makers = {
      multi = function(o) return optim.MultiStepLR(o, { 9, 2, 5, 5 }, 0.5) end,
      exp = function(o) return optim.ExponentialLR(o, 0.8) end,
      lambda = function(o) return optim.LambdaLR(o, function(e) return 1.0 / (e + 1) end) end,
      seq = function(o)
        return optim.SequentialLR(o, { optim.LinearLR(o, 0.1, 1.0, 3), optim.CosineAnnealingLR(o, 6, 0.001),
          optim.StepLR(o, 2, 0.5) }, { 3, 9 })
      end,
    }
    for name, make in pairs(makers) do
      local o = sgd()
      local s = make(o)
      for e = 1, 14 do
        local lr = s:step()
        assert.is_true(math.abs(lr - ref[name][e]) < 1e-9, string.format("%s epoch %d: %g vs %g", name, e, lr,
          ref[name][e]))
        assert.are.equal(lr, o.lr)
      end
    end
  end)

  it("OneCycleLR matches torch's rates and momenta (SGD momentum, Adam beta1), and the trained weights", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local cases = {
      { name = "sgd_cos", opt = "SGD", opts = "lr=0.1, momentum=0.9", kw = "max_lr=0.5, total_steps=12", steps = 12,
        tcl = { max_lr = 0.5, total_steps = 12 } },
      { name = "adam_linear_three", opt = "Adam", opts = "", steps = 10,
        kw = "max_lr=0.01, epochs=2, steps_per_epoch=5, anneal_strategy='linear', three_phase=True, pct_start=0.25",
        tcl = { max_lr = 0.01, epochs = 2, steps_per_epoch = 5, anneal_strategy = "linear", three_phase = true,
          pct_start = 0.25 } },
      { name = "adamw_fixed", opt = "AdamW", opts = "", steps = 8,
        kw = "max_lr=0.02, total_steps=8, cycle_momentum=False, div_factor=10, final_div_factor=100",
        tcl = { max_lr = 0.02, total_steps = 8, cycle_momentum = false, div_factor = 10, final_div_factor = 100 } },
    }
    local lines = {
      "import torch.optim.lr_scheduler as S",
      "torch.set_grad_enabled(True)",
      "def run(make_opt, kw, steps):",
      "  w = torch.tensor([1.5, -2.0, 0.5], requires_grad=True)",
      "  o = make_opt([w]); s = eval('S.OneCycleLR(o, ' + kw + ')'); lrs, moms = [o.param_groups[0]['lr']], []",
      "  g = o.param_groups[0]",
      "  for _ in range(steps):",
      "    moms.append(g['momentum'] if 'momentum' in g else g['betas'][0])",
      "    o.zero_grad(); (w * w * torch.tensor([1.0, 2.0, 3.0])).sum().backward(); o.step(); s.step()",
      "    lrs.append(s.get_last_lr()[0])",
      "  return [lrs, moms, w.tolist()]",
    }
    for _, c in ipairs(cases) do
      lines[#lines + 1] = string.format("out['%s'] = run(lambda p: torch.optim.%s(p%s), \"%s\", %d)", c.name, c.opt,
        c.opts ~= "" and ", " .. c.opts or "", c.kw, c.steps)
    end
    local ref = torch_ref.run(lines)
    for _, c in ipairs(cases) do
      local r = { lr = ref[c.name][1], momentum = ref[c.name][2], w = ref[c.name][3] }
      local w = Tensor({ 1.5, -2.0, 0.5 }, { requires_grad = true })
      local o = c.opt == "SGD" and optim.SGD({ w }, { lr = 0.1, momentum = 0.9 }) or optim[c.opt]({ w })
      local s = optim.OneCycleLR(o, c.tcl)
      assert.is_true(math.abs(o.lr - r.lr[1]) < 1e-12, c.name .. " initial lr")
      for k = 1, c.steps do
        local momentum = c.opt == "SGD" and o.momentum or o.betas[1]
        assert.is_true(math.abs(momentum - r.momentum[k]) < 1e-12,
          string.format("%s step %d: momentum %.17g vs %.17g", c.name, k, momentum, r.momentum[k]))
        o:zero_grad()
        ;(w * w * Tensor({ 1.0, 2.0, 3.0 })):sum():backward()
        o:step()
        local lr = s:step()
        -- the last step: torch extrapolates past the schedule, tcl stays at the final rate
        local expected = k < c.steps and r.lr[k + 1] or c.tcl.max_lr / (c.tcl.div_factor or 25) /
          (c.tcl.final_div_factor or 1e4)
        assert.is_true(math.abs(lr - expected) < 1e-12, string.format("%s step %d: lr %.17g vs %.17g", c.name, k,
          lr, expected))
      end
      local got = w:tolist()
      for j = 1, 3 do
        assert.is_true(math.abs(got[j] - r.w[j]) <= 1e-5 * math.max(1, math.abs(r.w[j])),
          string.format("%s: w[%d] = %.9g, torch %.9g", c.name, j, got[j], r.w[j]))
      end
    end
  end)

  it("OneCycleLR refuses a step past total_steps, and optimizers without a momentum to cycle", function()
    local o = optim.SGD({ Tensor({ 1.0 }, { requires_grad = true }) }, { lr = 0.1, momentum = 0.9 })
    local s = optim.OneCycleLR(o, { max_lr = 1, total_steps = 3 })
    for _ = 1, 3 do s:step() end
    local ok, err = pcall(s.step, s)
    assert.is_false(ok)
    assert.matches("optim.OneCycleLR: stepped 4 times, more than total_steps = 3", tostring(err), 1, true)
    ok, err = pcall(optim.OneCycleLR, sgd(), { max_lr = 1, total_steps = 3 })
    assert.is_false(ok)
    assert.matches("optim.OneCycleLR: cycle_momentum needs an optimizer with a momentum to cycle", tostring(err), 1,
      true)
    assert.has_no.errors(function()
      optim.OneCycleLR(sgd(), { max_lr = 1, total_steps = 3, cycle_momentum = false })
    end)
    ok, err = pcall(optim.OneCycleLR, sgd(), { total_steps = 3 })
    assert.is_false(ok)
    assert.matches("optim.OneCycleLR: max_lr is required", tostring(err), 1, true)
    ok, err = pcall(optim.OneCycleLR, sgd(), { max_lr = 1 })
    assert.is_false(ok)
    assert.matches("optim.OneCycleLR: give total_steps, or epochs and steps_per_epoch", tostring(err), 1, true)
    ok, err = pcall(optim.OneCycleLR, sgd(), { max_lr = 1, total_steps = 3, anneal_strategy = "cosine",
      cycle_momentum = false })
    assert.is_false(ok)
    assert.matches('anneal_strategy must be "cos" or "linear", got cosine', tostring(err), 1, true)
    ok, err = pcall(optim.OneCycleLR, sgd(), { max_lr = 1, total_steps = 3, maxlr = 2 })
    assert.is_false(ok)
    assert.matches("optim.OneCycleLR", tostring(err), 1, true)
  end)

  it("set_momentum changes what a jitted step reads, and is refused where there is no momentum", function()
    local w = Tensor({ 1.0, 2.0 }, { requires_grad = true })
    local o = optim.SGD({ w }, { lr = 0.5, momentum = 0.5 })
    local step = tcl.jit(function()
      o:zero_grad()
      local loss = w:sum()
      loss:backward() -- gradient 1 everywhere
      return o:step(loss)
    end)
    step() -- b = 1, w -= 0.5
    o:set_momentum(0.25)
    step() -- b = 0.25 * 1 + 1 = 1.25, w -= 0.625
    o:set_momentum(0)
    step() -- b = 1, w -= 0.5
    assert.are.same({ 1 - 1.625, 2 - 1.625 }, w:tolist())
    assert.are.equal(0, o.momentum)
    local ok, err = pcall(o.set_momentum, o, -1)
    assert.is_false(ok)
    assert.matches("optim.SGD: set_momentum: the momentum must be", tostring(err), 1, true)
    ok, err = pcall(sgd().set_momentum, sgd(), 0.9)
    assert.is_false(ok)
    assert.matches("optim.SGD: set_momentum: this optimizer has no momentum to set (made with momentum 0",
      tostring(err), 1, true)
    local adam = optim.Adam({ Tensor({ 1.0 }, { requires_grad = true }) })
    ok, err = pcall(adam.set_momentum, adam, 1)
    assert.is_false(ok)
    assert.matches("optim.Adam: set_momentum: the momentum must be a number in [0, 1)", tostring(err), 1, true)
    adam:set_momentum(0.8)
    assert.are.same({ 0.8, 0.999 }, adam.betas)
  end)

  it("MultiStepLR, ExponentialLR, LambdaLR and SequentialLR name their bad arguments", function()
    local cases = {
      { function() optim.MultiStepLR(sgd(), {}) end, "optim.MultiStepLR: milestones must be a non-empty list" },
      { function() optim.MultiStepLR(sgd(), { 2, 0 }) end,
        "optim.MultiStepLR: milestones[2] must be a positive integer" },
      { function() optim.ExponentialLR(sgd()) end, "optim.ExponentialLR: gamma is required" },
      { function() optim.LambdaLR(sgd(), 0.5) end, "optim.LambdaLR: lr_lambda must be a function, got number" },
      { function() optim.LambdaLR(sgd(), function() return "x" end) end,
        "optim.LambdaLR: lr_lambda(0) returned x, not a non-negative number" },
      { function()
          local o = sgd()
          optim.SequentialLR(o, { optim.StepLR(o, 2), optim.StepLR(o, 3) }, { 2, 4 })
        end, "optim.SequentialLR: expects 1 milestone for 2 schedulers, got 2" },
      { function()
          local o = sgd()
          optim.SequentialLR(o, { optim.StepLR(o, 2), optim.StepLR(sgd(), 3) }, { 2 })
        end, "optim.SequentialLR: schedulers[2] drives another optimizer than the one given" },
      { function()
          local o = sgd()
          optim.SequentialLR(o, { optim.StepLR(o, 2), optim.StepLR(o, 3), optim.StepLR(o, 3) }, { 4, 4 })
        end, "optim.SequentialLR: milestones must increase, got 4 after 4" },
    }
    for _, c in ipairs(cases) do helper.fails_with(c[2], c[1]) end
  end)
end)
