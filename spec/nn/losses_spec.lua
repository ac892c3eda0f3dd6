-- spec/nn/losses_spec.lua — nll_loss, binary_cross_entropy(_with_logits), mse/l1/smooth_l1/huber,
-- kl_div, cosine_similarity, normalize and cdist against torch.nn.functional (values and
-- gradients), and their errors.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal


describe("losses", function()
  it("match torch.nn.functional, values and gradients", function()
    Tensor.manual_seed(11)
    local logits = Tensor.randn(4, 3, 2):realize()
    local logp = logits:log_softmax(2):realize()
    local target = Tensor({ { 1, 3 }, { 2, 2 }, { 3, 1 }, { 1, 2 } }, { dtype = "int64" })
    local w = Tensor({ 0.5, 1, 2 })
    local p = Tensor.rand(5):realize() * 0.98 + 0.01
    local t = Tensor({ 0, 1, 1, 0, 0.5 })
    local a, b = Tensor.randn(3, 4):realize(), Tensor.randn(3, 4):realize()
    local x1, x2 = Tensor.randn(2, 3, 4):realize(), Tensor.randn(2, 5, 4):realize()
    local pg = logp:clone():requires_grad_(true)
    pg:nll_loss(target, { weight = w }):backward()
    local ag = a:clone():requires_grad_(true)
    ag:smooth_l1_loss(b, { beta = 0.5 }):backward()
    local ours = {
      nll = logp:nll_loss(target), nll_w = logp:nll_loss(target, { weight = w }),
      nll_ii = logp:nll_loss(target, { ignore_index = 2, reduction = "sum" }),
      nll_none = logp:nll_loss(target, { reduction = "none" }), nll_grad = pg.grad,
      bce = p:binary_cross_entropy(t), bce_w = p:binary_cross_entropy(t, { weight = w:narrow(1, 1, 1) }),
      bcel = a:binary_cross_entropy_with_logits(b:sigmoid()),
      bcel_pw = a:binary_cross_entropy_with_logits(b:sigmoid(), { pos_weight = Tensor({ 1.0, 2, 3, 4 }) }),
      mse = a:mse_loss(b), l1 = a:l1_loss(b, { reduction = "sum" }), sl1 = a:smooth_l1_loss(b, { beta = 0.5 }),
      sl1_grad = ag.grad, huber = a:huber_loss(b, { delta = 0.7 }),
      kl = logp:kl_div(logits:softmax(2), { reduction = "batchmean" }),
      kl_log = logp:kl_div(logits:log_softmax(2), { reduction = "sum", log_target = true }),
      cos = a:cosine_similarity(b), norm = a:normalize(), norm1 = a:normalize(1, 1),
      cdist = x1:cdist(x2), cdist1 = x1:cdist(x2, 1), cdist3 = x1:cdist(x2, 3),
    }
    local ref = torch_ref.run({
      "import torch.nn.functional as F",
      "logits = " .. L(logits), "logp = " .. L(logp), "target = " .. L(target) .. " - 1", "w = " .. L(w),
      "p = " .. L(p), "t = " .. L(t), "a = " .. L(a), "b = " .. L(b), "x1 = " .. L(x1), "x2 = " .. L(x2),
      "out['nll'] = F.nll_loss(logp, target)", "out['nll_w'] = F.nll_loss(logp, target, weight=w)",
      "out['nll_ii'] = F.nll_loss(logp, target, ignore_index=1, reduction='sum')",
      "out['nll_none'] = F.nll_loss(logp, target, reduction='none')",
      "pg = logp.clone().requires_grad_(True)",
      "with torch.enable_grad(): F.nll_loss(pg, target, weight=w).backward()",
      "out['nll_grad'] = pg.grad",
      "out['bce'] = F.binary_cross_entropy(p, t)", "out['bce_w'] = F.binary_cross_entropy(p, t, weight=w[:1])",
      "out['bcel'] = F.binary_cross_entropy_with_logits(a, b.sigmoid())",
      "out['bcel_pw'] = F.binary_cross_entropy_with_logits(a, b.sigmoid(), pos_weight=torch.tensor([1., 2, 3, 4]))",
      "out['mse'] = F.mse_loss(a, b)", "out['l1'] = F.l1_loss(a, b, reduction='sum')",
      "out['sl1'] = F.smooth_l1_loss(a, b, beta=0.5)",
      "ag = a.clone().requires_grad_(True)",
      "with torch.enable_grad(): F.smooth_l1_loss(ag, b, beta=0.5).backward()",
      "out['sl1_grad'] = ag.grad",
      "out['huber'] = F.huber_loss(a, b, delta=0.7)",
      "out['kl'] = F.kl_div(logp, logits.softmax(1), reduction='batchmean')",
      "out['kl_log'] = F.kl_div(logp, logits.log_softmax(1), reduction='sum', log_target=True)",
      "out['cos'] = F.cosine_similarity(a, b)", "out['norm'] = F.normalize(a)", "out['norm1'] = F.normalize(a, 1, 0)",
      "out['cdist'] = torch.cdist(x1, x2)", "out['cdist1'] = torch.cdist(x1, x2, 1)",
      "out['cdist3'] = torch.cdist(x1, x2, 3)",
    })
    torch_ref.assert_close(ours, ref, 2e-5)
  end)

  it("name the function and the problem in their errors", function()
    local logp = Tensor.zeros(2, 3)
    assert.matches("nll_loss: target must be class indices %(integers%) of shape %(2,%) for input %(2, 3%)",
      helper.message_of(function() logp:nll_loss(Tensor({ 1.0, 2.0 })) end))
    assert.matches("nll_loss: class indices are 1%-based",
      helper.message_of(function() logp:nll_loss(Tensor({ 0, 1 })):tolist() end))
    assert.matches("nll_loss: weight must have shape %(3%), got %(1,%)",
      helper.message_of(function() logp:nll_loss(Tensor({ 1, 2 }), { weight = Tensor({ 1.0 }) }) end))
    assert.matches("mse_loss: input %(2, 3%) and target %(3,%) must have the same shape",
      helper.message_of(function() logp:mse_loss(Tensor({ 1.0, 2, 3 })) end))
    assert.matches("l1_loss: reduction must be mean, sum or none, got avg",
      helper.message_of(function() logp:l1_loss(logp, { reduction = "avg" }) end))
    assert.matches("huber_loss: delta must be > 0",
      helper.message_of(function() logp:huber_loss(logp, { delta = 0 }) end))
    assert.matches("cdist: x1 %(3,%) and x2", helper.message_of(function() Tensor({ 1.0, 2, 3 }):cdist(logp) end))
    assert.matches("binary_cross_entropy: target must be a float tensor, got int32",
      helper.message_of(function() Tensor({ 0.5 }):binary_cross_entropy(Tensor({ 1 })) end))
  end)
end)
