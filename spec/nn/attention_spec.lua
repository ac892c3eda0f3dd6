-- spec/nn/attention_spec.lua — nn.MultiheadAttention against torch.nn.MultiheadAttention on the same
-- weights: outputs, attention weights and gradients (query, key, value, every parameter) with bool and
-- float masks, kdim/vdim, add_bias_kv, batch_first, unbatched and causal cases; PyTorch state_dict
-- names, need_weights, repr, errors
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local L = torch_ref.literal

local values, sorted_names = helper.wave_tensor, helper.sorted_keys

-- padding: batch 2, 4 keys; the second sequence ignores its 2nd key
local PADDING = Tensor({ { false, false, false, true }, { false, true, false, false } })
-- (L = 3, S = 4): each query may not see one key
local BOOL_MASK = Tensor({ { false, true, false, false }, { false, false, true, false },
  { true, false, false, false } })
local CAUSAL = Tensor({ { false, true, true }, { false, false, true }, { false, false, false } })

-- Each case: the tcl layer, torch's constructor, query/key/value shapes, our options and torch's keyword
-- arguments (the same masks).
local CASES = {
  { name = "self", make = function() return nn.MultiheadAttention(8, 2) end,
    torch = "torch.nn.MultiheadAttention(8, 2)", q = { 3, 2, 8 }, k = { 4, 2, 8 }, v = { 4, 2, 8 } },
  { name = "kvdim",
    make = function() return nn.MultiheadAttention(8, 4, { kdim = 5, vdim = 6, batch_first = true }) end,
    torch = "torch.nn.MultiheadAttention(8, 4, kdim=5, vdim=6, batch_first=True)",
    q = { 2, 3, 8 }, k = { 2, 4, 5 }, v = { 2, 4, 6 },
    opts = { key_padding_mask = PADDING, average_attn_weights = false },
    kwargs = "key_padding_mask=" .. L(PADDING) .. ", average_attn_weights=False" },
  { name = "bias_kv", make = function() return nn.MultiheadAttention(6, 3, { add_bias_kv = true }) end,
    torch = "torch.nn.MultiheadAttention(6, 3, add_bias_kv=True)", q = { 3, 2, 6 }, k = { 4, 2, 6 }, v = { 4, 2, 6 },
    opts = { attn_mask = values({ 6, 3, 4 }, 9), key_padding_mask = PADDING },
    kwargs = "attn_mask=" .. L(values({ 6, 3, 4 }, 9)) .. ", key_padding_mask=" .. L(PADDING) },
  { name = "unbatched", make = function() return nn.MultiheadAttention(4, 1, { bias = false }) end,
    torch = "torch.nn.MultiheadAttention(4, 1, bias=False)", q = { 3, 4 }, k = { 4, 4 }, v = { 4, 4 },
    opts = { attn_mask = BOOL_MASK }, kwargs = "attn_mask=" .. L(BOOL_MASK) },
  { name = "causal", make = function() return nn.MultiheadAttention(4, 2, { batch_first = true }) end,
    torch = "torch.nn.MultiheadAttention(4, 2, batch_first=True)", q = { 2, 3, 4 }, k = { 2, 3, 4 }, v = { 2, 3, 4 },
    opts = { is_causal = true }, kwargs = "attn_mask=" .. L(CAUSAL) },
  -- one tensor as query, key and value: projected by one matmul with the whole in_proj_weight
  { name = "shared", make = function() return nn.MultiheadAttention(8, 2, { batch_first = true }) end,
    torch = "torch.nn.MultiheadAttention(8, 2, batch_first=True)", q = { 2, 3, 8 }, shared = true,
    opts = { is_causal = true }, kwargs = "attn_mask=" .. L(CAUSAL) },
}

local PYTHON = [==[
torch.set_grad_enabled(True)
def weighting(o, i):
    return torch.sin(torch.arange(o.numel(), dtype=torch.float32) * 0.7 + i).reshape(o.shape)
def run_case(name, m, sd, q, k, v, **kwargs):
    m.load_state_dict(sd)
    for t in (q, k, v): t.requires_grad_(True)
    o, w = m(q, k, v, **kwargs)
    out[name + '.out'], out[name + '.weights'] = o, w
    ((o * weighting(o, 0)).sum() + (w * weighting(w, 1)).sum()).backward()
    out[name + '.grad.q'], out[name + '.grad.k'], out[name + '.grad.v'] = q.grad, k.grad, v.grad
    for n, p in m.named_parameters():
        out[name + '.grad.' + n] = p.grad
]==]

local weighting = helper.loss_weights

describe("tcl.nn.MultiheadAttention", function()
  it("matches torch in output, attention weights and every gradient", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local lines, ours = { PYTHON }, {}
    for c, case in ipairs(CASES) do
      local layer = case.make()
      local q = values(case.q, c)
      local k, v = q, q
      if not case.shared then k, v = values(case.k, c + 10), values(case.v, c + 20) end
      local sd = nn.state.get_state_dict(layer)
      local qkv = case.shared and "*([" .. L(q) .. "] * 3)" or L(q) .. ", " .. L(k) .. ", " .. L(v)
      lines[#lines + 1] = string.format("run_case(%q, %s, %s, %s%s)", case.name, case.torch,
        torch_ref.state_dict_literal(sd), qkv, case.kwargs and ", " .. case.kwargs or "")
      for _, t in ipairs({ q, k, v }) do t:requires_grad_(true) end
      local o, w = layer(q, k, v, case.opts)
      ours[case.name .. ".out"], ours[case.name .. ".weights"] = o, w
      local loss = o:mul(weighting(o, 0)):sum():add(w:mul(weighting(w, 1)):sum())
      local params = nn.state.get_parameters(layer)
      local wrt = { q, k, v }
      for _, p in ipairs(params) do wrt[#wrt + 1] = p end
      local grads = { loss:gradient(table.unpack(wrt)) }
      ours[case.name .. ".grad.q"], ours[case.name .. ".grad.k"], ours[case.name .. ".grad.v"] =
        grads[1], grads[2], grads[3]
      local by_tensor = {}
      for name, t in pairs(sd) do by_tensor[t] = name end
      for i, p in ipairs(params) do ours[case.name .. ".grad." .. by_tensor[p]] = grads[3 + i] end
    end
    local ref = torch_ref.run(lines)
    local count = 0
    for name in pairs(ref) do
      assert(ours[name] ~= nil, "no tcl value for torch's " .. name)
      count = count + 1
    end
    assert.is_true(count >= 54)
    torch_ref.assert_close(ours, ref, 1e-4)
  end)

  it("has PyTorch's parameter names and init, and loads torch's state_dict", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local q = values({ 3, 2, 8 }, 1)
    local ref = torch_ref.run({
      "torch.manual_seed(0)",
      "m = torch.nn.MultiheadAttention(8, 2, kdim=3, vdim=8)",
      "q, k = " .. L(q) .. ", torch.cos(torch.arange(24.)).reshape(4, 2, 3)",
      "out['y'], out['w'] = m(q, k, q[:2].repeat(2, 1, 1).reshape(4, 2, 8))",
      "for key, v in m.state_dict().items(): out['sd.' + key] = v",
    })
    local m = nn.MultiheadAttention(8, 2, { kdim = 3, vdim = 8 })
    local sd, names = {}, {}
    for key, v in pairs(ref) do
      local name = key:match("^sd%.(.*)")
      if name then sd[name], names[#names + 1] = Tensor(v), name end
    end
    table.sort(names)
    assert.are.same({ "in_proj_bias", "k_proj_weight", "out_proj.bias", "out_proj.weight", "q_proj_weight",
      "v_proj_weight" }, names)
    assert.are.same(names, sorted_names(nn.state.get_state_dict(m)))
    -- init: zero biases, xavier-uniform projections
    assert.are.equal(0, m.in_proj_bias:abs():max():item())
    assert.are.equal(0, m.out_proj.bias:abs():max():item())
    assert.is_true(m.k_proj_weight:abs():max():item() <= math.sqrt(6 / 11))
    nn.state.load_state_dict(m, sd)
    local k = Tensor.arange(24):cast("float32"):cos():reshape({ 4, 2, 3 })
    local v = q:narrow(1, 1, 2):reshape({ 1, 2, 2, 8 }):expand({ 2, 2, 2, 8 }):reshape({ 4, 2, 8 })
    local y, w = m(q, k, v)
    torch_ref.assert_close({ y = y, w = w }, { y = ref.y, w = ref.w }, 1e-5)
  end)

  it("returns nil weights when need_weights = false, and rows of weights sum to 1", function()
    local m = nn.MultiheadAttention(4, 2, { batch_first = true })
    local x = values({ 2, 3, 4 }, 2)
    local y, w = m(x, x, x, { need_weights = false })
    assert.is_nil(w)
    assert.are.same({ 2, 3, 4 }, y.shape)
    local _, heads = m(x, x, x, { average_attn_weights = false, is_causal = true })
    assert.are.same({ 2, 2, 3, 3 }, heads.shape)
    local sums = heads:sum(-1):flatten():tolist()
    for _, s in ipairs(sums) do assert.is_true(math.abs(s - 1) < 1e-5) end
    -- causal: the first query sees only the first key
    local first = heads:narrow(3, 1, 1):narrow(4, 2, 2):abs():max():item()
    assert.are.equal(0, first)
    assert.are.equal("MultiheadAttention(embed_dim=4, num_heads=2, dropout=0, batch_first=true)", tostring(m))
  end)

  it("errors name the layer, the expected and actual shapes and the bad options", function()
    local m = helper.message_of
    local mha = nn.MultiheadAttention(8, 2)
    assert.are.equal("nn.MultiheadAttention: expected query (L, N, 8), key (S, N, 8) and value (S, N, 8) "
      .. "(or unbatched (L, 8), (S, 8), (S, 8)), got (3, 2, 6), (4, 2, 8) and (4, 2, 8)",
      m(function() mha(Tensor.zeros({ 3, 2, 6 }), Tensor.zeros({ 4, 2, 8 }), Tensor.zeros({ 4, 2, 8 })) end))
    assert.are.equal("nn.MultiheadAttention: expected query (L, N, 8), key (S, N, 8) and value (S, N, 8) "
      .. "(or unbatched (L, 8), (S, 8), (S, 8)), got (3, 2, 8), (4, 3, 8) and (4, 3, 8)",
      m(function() mha(Tensor.zeros({ 3, 2, 8 }), Tensor.zeros({ 4, 3, 8 }), Tensor.zeros({ 4, 3, 8 })) end))
    local x, kv = Tensor.zeros({ 3, 2, 8 }), Tensor.zeros({ 4, 2, 8 })
    assert.are.equal("nn.MultiheadAttention: attn_mask must have shape (3, 4) or (4, 3, 4) "
      .. "(L, S or N * num_heads, L, S), got (4, 3)",
      m(function() mha(x, kv, kv, { attn_mask = Tensor.zeros({ 4, 3 }) }) end))
    assert.are.equal("nn.MultiheadAttention: key_padding_mask must have shape (2, 4), got (4, 2)",
      m(function() mha(x, kv, kv, { key_padding_mask = Tensor.zeros({ 4, 2 }) }) end))
    assert.are.equal("nn.MultiheadAttention: masks must be bool or float, got int32",
      m(function() mha(x, kv, kv, { attn_mask = Tensor.zeros({ 3, 4 }, { dtype = "int32" }) }) end))
    assert.are.equal("nn.MultiheadAttention: unknown option 'mask'", m(function() mha(x, kv, kv, { mask = true }) end))
    assert.are.equal("nn.MultiheadAttention: embed_dim 8 must be divisible by num_heads 3",
      m(function() nn.MultiheadAttention(8, 3) end))
    assert.are.equal("nn.MultiheadAttention: dropout must be a number in [0, 1), got 1.5",
      m(function() nn.MultiheadAttention(8, 2, { dropout = 1.5 }) end))
    assert.are.equal("nn.MultiheadAttention: unknown option 'add_zero_attn'",
      m(function() nn.MultiheadAttention(8, 2, { add_zero_attn = true }) end))
  end)
end)
