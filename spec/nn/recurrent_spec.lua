-- spec/nn/recurrent_spec.lua — nn.RNNCell/LSTMCell/GRUCell and nn.RNN/LSTM/GRU against torch.nn
-- (outputs and gradients wrt input, initial state and every parameter, on the same weights; multi-layer,
-- bidirectional, batch_first, projected and unbatched cases), PyTorch state_dict names, init, dropout
-- only in training, repr, errors
local tcl = require "tcl"
local Tensor, nn = tcl.Tensor, tcl.nn
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local L = torch_ref.literal

local values, sorted_names = helper.wave_tensor, helper.sorted_keys

-- Each case: a tcl layer, the torch constructor, an input, an optional initial state, and the
-- kind of layer (cell or sequence; lstm or not).
local CASES = {
  { name = "rnncell", make = function() return nn.RNNCell(3, 4, { nonlinearity = "relu" }) end,
    torch = "torch.nn.RNNCell(3, 4, nonlinearity='relu')", x = { 2, 3 }, h = { 2, 4 }, cell = true },
  { name = "lstmcell", make = function() return nn.LSTMCell(3, 4) end, torch = "torch.nn.LSTMCell(3, 4)",
    x = { 3 }, h = { 4 }, c = { 4 }, cell = true, lstm = true },
  { name = "grucell", make = function() return nn.GRUCell(3, 4, { bias = false }) end,
    torch = "torch.nn.GRUCell(3, 4, bias=False)", x = { 2, 3 }, cell = true },
  { name = "rnn",
    make = function() return nn.RNN(3, 4, { num_layers = 2, bidirectional = true, batch_first = true }) end,
    torch = "torch.nn.RNN(3, 4, num_layers=2, bidirectional=True, batch_first=True)", x = { 2, 5, 3 },
    h = { 4, 2, 4 } },
  { name = "lstm", make = function() return nn.LSTM(3, 4, { num_layers = 2, bidirectional = true }) end,
    torch = "torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True)", x = { 5, 2, 3 }, h = { 4, 2, 4 }, c = { 4, 2, 4 },
    lstm = true },
  { name = "lstm_proj", make = function() return nn.LSTM(3, 4, { proj_size = 2, batch_first = true }) end,
    torch = "torch.nn.LSTM(3, 4, proj_size=2, batch_first=True)", x = { 2, 4, 3 }, h = { 1, 2, 2 }, c = { 1, 2, 4 },
    lstm = true },
  { name = "lstm_unbatched", make = function() return nn.LSTM(3, 4, { num_layers = 2 }) end,
    torch = "torch.nn.LSTM(3, 4, num_layers=2)", x = { 4, 3 }, lstm = true },
  { name = "gru", make = function() return nn.GRU(3, 4, { num_layers = 2, batch_first = true, bias = false }) end,
    torch = "torch.nn.GRU(3, 4, num_layers=2, batch_first=True, bias=False)", x = { 2, 4, 3 }, h = { 2, 2, 4 } },
  { name = "gru_unbatched", make = function() return nn.GRU(3, 4, { bidirectional = true }) end,
    torch = "torch.nn.GRU(3, 4, bidirectional=True)", x = { 4, 3 }, h = { 2, 4 } },
}

-- The scalar both sides differentiate: the outputs weighted by fixed values, so every element
-- of every output contributes differently.
local PYTHON = [==[
torch.set_grad_enabled(True)
def run_case(name, m, sd, x, h, c, cell, lstm):
    m.load_state_dict(sd)
    x.requires_grad_(True)
    leaves = [x]
    state = None
    if h is not None: h.requires_grad_(True); leaves.append(h)
    if c is not None: c.requires_grad_(True); leaves.append(c)
    if lstm and h is not None: state = (h, c)
    elif h is not None: state = h
    res = m(x, state) if state is not None else m(x)
    if cell:
        outs = list(res) if lstm else [res]
    else:
        outs = [res[0]] + (list(res[1]) if lstm else [res[1]])
    loss = 0
    for i, o in enumerate(outs):
        out[name + '.out' + str(i)] = o
        w = torch.sin(torch.arange(o.numel(), dtype=torch.float32) * 0.7 + i).reshape(o.shape)
        loss = loss + (o * w).sum()
    loss.backward()
    out[name + '.grad.x'] = x.grad
    if h is not None: out[name + '.grad.h'] = h.grad
    if c is not None: out[name + '.grad.c'] = c.grad
    for n, p in m.named_parameters():
        out[name + '.grad.' + n] = p.grad
]==]

local weighting = helper.loss_weights

describe("tcl.nn recurrent layers", function()
  it("match torch.nn in outputs and every gradient", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local lines = { PYTHON }
    local ours = {}
    for k, case in ipairs(CASES) do
      local layer = case.make()
      local x = values(case.x, k)
      local h = case.h and values(case.h, k + 10)
      local c = case.c and values(case.c, k + 20)
      local sd = nn.state.get_state_dict(layer)
      lines[#lines + 1] = string.format("run_case(%q, %s, %s, %s, %s, %s, %s, %s)", case.name, case.torch,
        torch_ref.state_dict_literal(sd), L(x), h and L(h) or "None", c and L(c) or "None",
        case.cell and "True" or "False", case.lstm and "True" or "False")
      -- ours
      local leaves = { x }
      if h then leaves[#leaves + 1] = h end
      if c then leaves[#leaves + 1] = c end
      for _, t in ipairs(leaves) do t:requires_grad_(true) end
      local state = case.lstm and h and { h, c } or h
      local a, b = layer(x, state)
      local outs
      if case.cell then outs = case.lstm and { a, b } or { a }
      else outs = case.lstm and { a, b[1], b[2] } or { a, b } end
      local loss
      for i, o in ipairs(outs) do
        ours[case.name .. ".out" .. (i - 1)] = o
        local term = o:mul(weighting(o, i - 1)):sum()
        loss = loss and loss:add(term) or term
      end
      local params = nn.state.get_parameters(layer)
      local wrt = { x }
      if h then wrt[#wrt + 1] = h end
      if c then wrt[#wrt + 1] = c end
      for _, p in ipairs(params) do wrt[#wrt + 1] = p end
      local grads = { loss:gradient(table.unpack(wrt)) }
      ours[case.name .. ".grad.x"] = grads[1]
      local at = 2
      if h then ours[case.name .. ".grad.h"], at = grads[at], at + 1 end
      if c then ours[case.name .. ".grad.c"], at = grads[at], at + 1 end
      local by_tensor = {}
      for name, t in pairs(sd) do by_tensor[t] = name end
      for i, p in ipairs(params) do ours[case.name .. ".grad." .. by_tensor[p]] = grads[at + i - 1] end
    end
    local ref = torch_ref.run(lines)
    local count = 0
    for name in pairs(ref) do
      assert(ours[name] ~= nil, "no tcl value for torch's " .. name)
      count = count + 1
    end
    assert.is_true(count > 80)
    torch_ref.assert_close(ours, ref, 1e-4)
  end)

  it("load a PyTorch state_dict under torch's names and give torch's output", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local x = values({ 3, 2, 5 }, 3)
    local ref = torch_ref.run({
      "torch.manual_seed(0)",
      "m = torch.nn.LSTM(5, 3, num_layers=2, bidirectional=True)",
      "x = " .. L(x),
      "y, (h, c) = m(x)",
      "out['y'], out['h'], out['c'] = y, h, c",
      "for k, v in m.state_dict().items(): out['sd.' + k] = v",
    })
    local lstm = nn.LSTM(5, 3, { num_layers = 2, bidirectional = true })
    local sd, names = {}, {}
    for key, v in pairs(ref) do
      local name = key:match("^sd%.(.*)")
      if name then sd[name], names[#names + 1] = Tensor(v), name end
    end
    table.sort(names)
    assert.are.equal(16, #names)
    assert.are.same(names, sorted_names(nn.state.get_state_dict(lstm)))
    nn.state.load_state_dict(lstm, sd)
    local y, state = lstm(x)
    torch_ref.assert_close({ y = y, h = state[1], c = state[2] }, { y = ref.y, h = ref.h, c = ref.c }, 1e-5)
  end)

  it("initialize uniform(-1/sqrt(H), 1/sqrt(H)) with PyTorch's shapes", function()
    local gru = nn.GRU(6, 16, { num_layers = 2, bidirectional = true })
    local sd = nn.state.get_state_dict(gru)
    assert.are.same({ 48, 6 }, sd.weight_ih_l0.shape)
    assert.are.same({ 48, 32 }, sd.weight_ih_l1_reverse.shape)
    assert.are.same({ 48, 16 }, sd.weight_hh_l1.shape)
    assert.are.same({ 48 }, sd.bias_hh_l0_reverse.shape)
    for _, t in pairs(sd) do
      assert.is_true(t.requires_grad)
      assert.is_true(t:abs():max():item() <= 0.25)
      assert.is_true(t:abs():max():item() > 0.2)
    end
    assert.are.same({ 2, 4 }, nn.state.get_state_dict(nn.LSTM(3, 4, { proj_size = 2 })).weight_hr_l0.shape)
  end)

  it("apply dropout between layers in training mode only", function()
    local rnn = nn.RNN(3, 8, { num_layers = 2, dropout = 0.5 })
    local x = values({ 4, 2, 3 }, 1)
    local a = rnn(x):tolist()
    local b = rnn(x):tolist()
    assert.are.same(a, b)
    local t1 = nn.train(function() return rnn(x):flatten():tolist() end)
    local flat = rnn(x):flatten():tolist()
    local differs = false
    for i = 1, #flat do differs = differs or math.abs(flat[i] - t1[i]) > 1e-6 end
    assert.is_true(differs)
    local single = nn.RNN(3, 8, { dropout = 0.5 })
    local e = single(x):flatten():tolist()
    local t = nn.train(function() return single(x):flatten():tolist() end)
    assert.are.same(e, t)
  end)

  it("read like PyTorch's repr", function()
    assert.are.equal("LSTM(3, 4, num_layers=2, batch_first=true, bidirectional=true)",
      tostring(nn.LSTM(3, 4, { num_layers = 2, batch_first = true, bidirectional = true })))
    assert.are.equal("RNNCell(3, 4, nonlinearity=relu)", tostring(nn.RNNCell(3, 4, { nonlinearity = "relu" })))
    assert.are.equal("GRU(2, 5, dropout=0.25)", tostring(nn.GRU(2, 5, { dropout = 0.25 })))
  end)

  it("errors name the layer, the expected and the actual shapes and the bad options", function()
    local m = helper.message_of
    assert.are.equal("nn.LSTM: expected input of shape (L, N, 3) or unbatched (L, 3), got shape (2, 5, 4)",
      m(function() nn.LSTM(3, 4)(Tensor.zeros({ 2, 5, 4 })) end))
    assert.are.equal("nn.GRU: expected input of shape (N, L, 3) or unbatched (L, 3), got shape (3,)",
      m(function() nn.GRU(3, 4, { batch_first = true })(Tensor.zeros({ 3 })) end))
    assert.are.equal("nn.RNN: expected initial hidden state of shape (2, 5, 4), got shape (1, 5, 4)",
      m(function() nn.RNN(3, 4, { num_layers = 2 })(Tensor.zeros({ 2, 5, 3 }), Tensor.zeros({ 1, 5, 4 })) end))
    assert.are.equal("nn.LSTM: expected initial cell state of shape (1, 5, 4), got shape (1, 5, 2)",
      m(function() nn.LSTM(3, 4, { proj_size = 2 })(Tensor.zeros({ 2, 5, 3 }),
        { Tensor.zeros({ 1, 5, 2 }), Tensor.zeros({ 1, 5, 2 }) }) end))
    assert.are.equal("nn.LSTM: expected the state as a pair {h, c} of tensors, got Tensor",
      m(function() nn.LSTM(3, 4)(Tensor.zeros({ 2, 5, 3 }), Tensor.zeros({ 1, 5, 4 })) end))
    assert.are.equal("nn.LSTMCell: expected input of shape (N, 3) or (3), got shape (2, 2, 3)",
      m(function() nn.LSTMCell(3, 4)(Tensor.zeros({ 2, 2, 3 })) end))
    assert.are.equal("nn.GRUCell: expected hidden state of shape (2, 4), got shape (4,)",
      m(function() nn.GRUCell(3, 4)(Tensor.zeros({ 2, 3 }), Tensor.zeros({ 4 })) end))
    assert.are.equal("nn.RNN: nonlinearity must be \"tanh\" or \"relu\", got \"gelu\"",
      m(function() nn.RNN(3, 4, { nonlinearity = "gelu" }) end))
    assert.are.equal("nn.GRU: unknown option 'nonlinearity' (only nn.RNN and nn.RNNCell take it)",
      m(function() nn.GRU(3, 4, { nonlinearity = "relu" }) end))
    assert.are.equal("nn.GRU: unknown option 'proj_size' (only nn.LSTM takes it)",
      m(function() nn.GRU(3, 4, { proj_size = 2 }) end))
    assert.are.equal("nn.LSTM: proj_size must be smaller than hidden_size 4, got 4",
      m(function() nn.LSTM(3, 4, { proj_size = 4 }) end))
    assert.are.equal("nn.LSTM: dropout must be a number in [0, 1), got 1",
      m(function() nn.LSTM(3, 4, { dropout = 1 }) end))
    assert.are.equal("nn.RNN: num_layers must be a positive integer, got 0",
      m(function() nn.RNN(3, 4, { num_layers = 0 }) end))
    assert.are.equal("nn.LSTM: hidden_size must be a positive integer, got 2.5",
      m(function() nn.LSTM(3, 2.5) end))
    assert.are.equal("nn.LSTM: unknown option 'batchfirst'", m(function() nn.LSTM(3, 4, { batchfirst = true }) end))
  end)
end)
