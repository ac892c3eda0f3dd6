-- tcl.api.recurrent — tcl.nn's recurrent layers: the cells RNNCell, LSTMCell and GRUCell (one
-- time step) and the sequence layers RNN, LSTM and GRU (stacked, optionally bidirectional).
-- Layer: lua/tcl/api. Installed into tcl.nn by tcl.api.layers, whose layer helpers it uses.
--
--   local lstm = nn.LSTM(10, 20, { num_layers = 2, batch_first = true })
--   local out, state = lstm(x)               -- out (N, L, 20); state = { h_n, c_n }
--   out, state = lstm(x2, state)             -- state feeds back in as the initial state
--
-- Parameters carry PyTorch's names and shapes (weight_ih_l0, weight_hh_l0, bias_ih_l0,
-- bias_hh_l0, with _reverse for the backward direction and weight_hr_l0 for LSTM's
-- projection; the gates stacked in the order i, f, g, o for LSTM and r, z, n for GRU), so a
-- PyTorch state_dict loads with nn.state.load_state_dict. Layers are numbered from 0 in these
-- names, as in PyTorch, because they are PyTorch's names, not indices.
--
-- A sequence unrolls into one small graph per time step. The input's projection x W_ih^T + b_ih
-- is one product over the whole sequence; each step then adds h W_hh^T + b_hh and applies the
-- gates, so every step of a layer builds the same kernels (same shapes), which the kernel
-- cache compiles once.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local init = require "tcl.api.init_weights"
local Tensor = require "tcl.api.tensor"

local fail, shape_str, is_tensor = check.fail, check.shape_str, class.is_tensor

-- The gate count of each kind: rows of weight_ih / weight_hh are gates * hidden_size.
local GATES = { RNN = 1, LSTM = 4, GRU = 3 }

return function(M, helpers)
  local layer_class, parameter = helpers.layer_class, helpers.parameter
  local positive_integer, non_negative_integer = helpers.positive_integer, helpers.non_negative_integer
  local boolean, placement, value_str = helpers.boolean, helpers.placement, helpers.value_str

  -- -------------------------------------------------------------------------------------
  -- one time step: x_proj is x W_ih^T + b_ih (N, gates * H); returns h' (and c' for LSTM)

  local function hidden_part(h, w_hh, b_hh)
    return h:linear(w_hh:transpose(1, 2), b_hh)
  end

  local STEP = {
    RNN = function(self, x_proj, h, _, w_hh, b_hh)
      local pre = x_proj:add(hidden_part(h, w_hh, b_hh))
      return self.nonlinearity == "relu" and pre:relu() or pre:tanh()
    end,
    LSTM = function(_, x_proj, h, c, w_hh, b_hh, w_hr)
      local gates = x_proj:add(hidden_part(h, w_hh, b_hh)):chunk(4, -1)
      local i, f, g, o = gates[1]:sigmoid(), gates[2]:sigmoid(), gates[3]:tanh(), gates[4]:sigmoid()
      local c_next = f:mul(c):add(i:mul(g))
      local h_next = o:mul(c_next:tanh())
      if w_hr then h_next = h_next:matmul(w_hr:transpose(1, 2)) end
      return h_next, c_next
    end,
    GRU = function(_, x_proj, h, _, w_hh, b_hh)
      local xs, hs = x_proj:chunk(3, -1), hidden_part(h, w_hh, b_hh):chunk(3, -1)
      local r = xs[1]:add(hs[1]):sigmoid()
      local z = xs[2]:add(hs[2]):sigmoid()
      local n = xs[3]:add(r:mul(hs[3])):tanh()
      -- (1 - z) n + z h
      return n:add(z:mul(h:sub(n)))
    end,
  }

  -- -------------------------------------------------------------------------------------
  -- options and weights

  local function nonlinearity_option(fn, kind, v)
    if kind ~= "RNN" then
      if v ~= nil then fail(fn, "unknown option 'nonlinearity' (only nn.RNN and nn.RNNCell take it)") end
      return nil
    end
    if v == nil then return "tanh" end
    if v ~= "tanh" and v ~= "relu" then
      fail(fn, "nonlinearity must be \"tanh\" or \"relu\", got %s",
        type(v) == "string" and string.format("%q", v) or check.type_name(v))
    end
    return v
  end

  -- PyTorch's init for every recurrent weight and bias: uniform(-1/sqrt(H), 1/sqrt(H)).
  local function uniform_parameter(fn, shape, hidden_size, where)
    check.shape_fits(fn, shape)
    local bound = 1 / math.sqrt(hidden_size)
    return parameter(init.uniform(shape, { a = -bound, b = bound, dtype = where.dtype, device = where.device }))
  end

  -- Adds weight_ih<suffix>, weight_hh<suffix>, bias_ih<suffix>, bias_hh<suffix> (and
  -- weight_hr<suffix> for a projection) to layer, in PyTorch's shapes.
  local function add_weights(fn, layer, suffix, input_size, state_size, opts)
    local rows = GATES[layer._kind] * layer.hidden_size
    local H, where = layer.hidden_size, opts.where
    layer["weight_ih" .. suffix] = uniform_parameter(fn, { rows, input_size }, H, where)
    layer["weight_hh" .. suffix] = uniform_parameter(fn, { rows, state_size }, H, where)
    if opts.bias then
      layer["bias_ih" .. suffix] = uniform_parameter(fn, { rows }, H, where)
      layer["bias_hh" .. suffix] = uniform_parameter(fn, { rows }, H, where)
    end
    if opts.proj_size > 0 then
      layer["weight_hr" .. suffix] = uniform_parameter(fn, { opts.proj_size, H }, H, where)
    end
  end

  local function weights_of(layer, suffix)
    return layer["weight_ih" .. suffix], layer["bias_ih" .. suffix], layer["weight_hh" .. suffix],
      layer["bias_hh" .. suffix], layer["weight_hr" .. suffix]
  end

  local function tensor_input(fn, x, what)
    if not is_tensor(x) then fail(fn, "expected a tensor %s, got %s", what, check.type_name(x)) end
    return x
  end

  -- An initial state tensor of exactly `shape`, or zeros of it like x.
  local function state_tensor(fn, v, shape, x, what)
    if v == nil then return Tensor.zeros(shape, { dtype = x.dtype, device = x.device }) end
    tensor_input(fn, v, what)
    if not check.same_shape(v._shape, shape) then
      fail(fn, "expected %s of shape %s, got shape %s", what, shape_str(shape), shape_str(v._shape))
    end
    return v
  end

  -- LSTM takes its state as {h, c}; the others as one tensor h.
  local function split_state(fn, kind, state)
    if kind ~= "LSTM" or state == nil then return state, nil end
    if type(state) ~= "table" or is_tensor(state) or #state ~= 2 then
      fail(fn, "expected the state as a pair {h, c} of tensors, got %s", check.type_name(state))
    end
    return state[1], state[2]
  end

  -- -------------------------------------------------------------------------------------
  -- cells

  local function cell_class(kind)
    local name = kind .. "Cell"
    return layer_class(name, function(fn, input_size, hidden_size, opts)
      input_size = positive_integer(fn, "input_size", input_size)
      hidden_size = positive_integer(fn, "hidden_size", hidden_size)
      opts = check.options(fn, opts, { bias = true, nonlinearity = true, dtype = true, device = true })
      local layer = {
        _kind = kind, input_size = input_size, hidden_size = hidden_size,
        bias = boolean(fn, "bias", opts.bias, true),
        nonlinearity = nonlinearity_option(fn, kind, opts.nonlinearity),
      }
      add_weights(fn, layer, "", input_size, hidden_size,
        { bias = layer.bias, proj_size = 0, where = placement(fn, opts) })
      return layer
    end, function(self, x, state)
      local fn = "nn." .. name
      tensor_input(fn, x, "input")
      local xs = x._shape
      if not ((#xs == 2 or #xs == 1) and xs[#xs] == self.input_size) then
        fail(fn, "expected input of shape (N, %d) or (%d), got shape %s", self.input_size, self.input_size,
          shape_str(xs))
      end
      local unbatched = #xs == 1
      if unbatched then x = x:unsqueeze(1) end
      local state_shape = unbatched and { self.hidden_size } or { xs[1], self.hidden_size }
      local h, c = split_state(fn, kind, state)
      h = state_tensor(fn, h, state_shape, x, "hidden state")
      if kind == "LSTM" then c = state_tensor(fn, c, state_shape, x, "cell state") end
      if unbatched then
        h = h:unsqueeze(1)
        if c then c = c:unsqueeze(1) end
      end
      local w_ih, b_ih, w_hh, b_hh = weights_of(self, "")
      local h_next, c_next = STEP[kind](self, x:linear(w_ih:transpose(1, 2), b_ih), h, c, w_hh, b_hh)
      if unbatched then
        h_next = h_next:squeeze(1)
        if c_next then c_next = c_next:squeeze(1) end
      end
      return h_next, c_next
    end, function(self)
      local text = string.format("%d, %d", self.input_size, self.hidden_size)
      if not self.bias then text = text .. ", bias=false" end
      if self.nonlinearity == "relu" then text = text .. ", nonlinearity=relu" end
      return text
    end)
  end

  --- RNNCell(input_size, hidden_size, {bias = true, nonlinearity = "tanh" | "relu", dtype =,
  --  device =}): h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh). cell(x[, h]) with x (N, input_size)
  --  or unbatched (input_size), h of x's batch shape with hidden_size features (zeros when
  --  absent); returns h'. Parameters weight_ih (H, in), weight_hh (H, H), bias_ih, bias_hh (H),
  --  initialized uniform(-1/sqrt(H), 1/sqrt(H)) as in PyTorch.
  M.RNNCell = cell_class("RNN")

  --- LSTMCell(input_size, hidden_size, {bias = true, dtype =, device =}): one LSTM step.
  --  cell(x[, {h, c}]) returns h', c' (two values; pass them back as {h', c'}). Gates stacked
  --  i, f, g, o in weight_ih (4H, in), weight_hh (4H, H), bias_ih, bias_hh (4H), as in PyTorch.
  M.LSTMCell = cell_class("LSTM")

  --- GRUCell(input_size, hidden_size, {bias = true, dtype =, device =}): one GRU step, PyTorch's
  --  formula (n = tanh(x_n + r * (h W_hn^T + b_hn))). cell(x[, h]) returns h'. Gates stacked
  --  r, z, n in weight_ih (3H, in), weight_hh (3H, H), bias_ih, bias_hh (3H).
  M.GRUCell = cell_class("GRU")

  -- -------------------------------------------------------------------------------------
  -- sequence layers

  local function sequence_class(kind)
    return layer_class(kind, function(fn, input_size, hidden_size, opts)
      input_size = positive_integer(fn, "input_size", input_size)
      hidden_size = positive_integer(fn, "hidden_size", hidden_size)
      opts = check.options(fn, opts, { num_layers = true, bias = true, batch_first = true, dropout = true,
        bidirectional = true, proj_size = true, nonlinearity = true, dtype = true, device = true })
      local layer = {
        _kind = kind, input_size = input_size, hidden_size = hidden_size,
        num_layers = positive_integer(fn, "num_layers", opts.num_layers or 1),
        bias = boolean(fn, "bias", opts.bias, true),
        batch_first = boolean(fn, "batch_first", opts.batch_first, false),
        bidirectional = boolean(fn, "bidirectional", opts.bidirectional, false),
        nonlinearity = nonlinearity_option(fn, kind, opts.nonlinearity),
        dropout = opts.dropout or 0,
        proj_size = 0,
      }
      local p = layer.dropout
      if type(p) ~= "number" or not (p >= 0 and p < 1) then
        fail(fn, "dropout must be a number in [0, 1), got %s",
          type(p) == "number" and value_str(p) or check.type_name(p))
      end
      if opts.proj_size ~= nil then
        if kind ~= "LSTM" then fail(fn, "unknown option 'proj_size' (only nn.LSTM takes it)") end
        layer.proj_size = non_negative_integer(fn, "proj_size", opts.proj_size)
        if layer.proj_size >= hidden_size then
          fail(fn, "proj_size must be smaller than hidden_size %d, got %d", hidden_size, layer.proj_size)
        end
      end
      local out_size = layer.proj_size > 0 and layer.proj_size or hidden_size
      local weight_opts = { bias = layer.bias, proj_size = layer.proj_size, where = placement(fn, opts) }
      local directions = layer.bidirectional and 2 or 1
      for l = 0, layer.num_layers - 1 do
        for d = 1, directions do
          add_weights(fn, layer, "_l" .. l .. (d == 2 and "_reverse" or ""),
            l == 0 and input_size or out_size * directions, out_size, weight_opts)
        end
      end
      return layer
    end, function(self, x, state)
      local fn = "nn." .. kind
      tensor_input(fn, x, "input")
      local xs, H_in = x._shape, self.input_size
      if not ((#xs == 3 or #xs == 2) and xs[#xs] == H_in) then
        fail(fn, "expected input of shape %s or unbatched (L, %d), got shape %s",
          self.batch_first and string.format("(N, L, %d)", H_in) or string.format("(L, N, %d)", H_in), H_in,
          shape_str(xs))
      end
      local unbatched = #xs == 2
      if unbatched then x = x:unsqueeze(2)
      elseif self.batch_first then x = x:transpose(1, 2) end
      -- x is (L, N, H_in) from here on
      local L, N = x._shape[1], x._shape[2]
      local directions = self.bidirectional and 2 or 1
      local stacked = directions * self.num_layers
      local out_size = self.proj_size > 0 and self.proj_size or self.hidden_size
      local function state_shape(size)
        return unbatched and { stacked, size } or { stacked, N, size }
      end
      local h0, c0 = split_state(fn, kind, state)
      h0 = state_tensor(fn, h0, state_shape(out_size), x, "initial hidden state")
      if kind == "LSTM" then c0 = state_tensor(fn, c0, state_shape(self.hidden_size), x, "initial cell state") end
      if unbatched then
        h0 = h0:unsqueeze(2)
        if c0 then c0 = c0:unsqueeze(2) end
      end
      local step = STEP[kind]
      local h_last, c_last = {}, {}
      local input = x
      for l = 0, self.num_layers - 1 do
        -- dropout between layers (only in training mode, as Tensor.dropout)
        if l > 0 and self.dropout > 0 then input = input:dropout(self.dropout) end
        local outputs = {}
        for d = 1, directions do
          local index = l * directions + d
          local w_ih, b_ih, w_hh, b_hh, w_hr = weights_of(self, "_l" .. l .. (d == 2 and "_reverse" or ""))
          -- the input's part of every step at once: (L, N, gates * H)
          local projected = input:linear(w_ih:transpose(1, 2), b_ih)
          local h, c = h0[index], c0 and c0[index]
          local seq = {}
          for i = 1, L do
            local t = d == 1 and i or L - i + 1
            h, c = step(self, projected[t], h, c, w_hh, b_hh, w_hr)
            seq[t] = h
          end
          outputs[d] = Tensor.stack(seq, 1)
          h_last[index], c_last[index] = h, c
        end
        input = directions == 2 and Tensor.cat(outputs, -1) or outputs[1]
      end
      local h_n = Tensor.stack(h_last, 1)
      local c_n = kind == "LSTM" and Tensor.stack(c_last, 1) or nil
      local output = input
      if unbatched then
        output, h_n = output:squeeze(2), h_n:squeeze(2)
        if c_n then c_n = c_n:squeeze(2) end
      elseif self.batch_first then
        output = output:transpose(1, 2)
      end
      if kind == "LSTM" then return output, { h_n, c_n } end
      return output, h_n
    end, function(self)
      local parts = { string.format("%d, %d", self.input_size, self.hidden_size) }
      if self.num_layers ~= 1 then parts[#parts + 1] = "num_layers=" .. self.num_layers end
      if not self.bias then parts[#parts + 1] = "bias=false" end
      if self.batch_first then parts[#parts + 1] = "batch_first=true" end
      if self.dropout ~= 0 then parts[#parts + 1] = "dropout=" .. value_str(self.dropout) end
      if self.bidirectional then parts[#parts + 1] = "bidirectional=true" end
      if self.proj_size ~= 0 then parts[#parts + 1] = "proj_size=" .. self.proj_size end
      if self.nonlinearity == "relu" then parts[#parts + 1] = "nonlinearity=relu" end
      return table.concat(parts, ", ")
    end)
  end

  --- RNN(input_size, hidden_size, {num_layers = 1, nonlinearity = "tanh" | "relu", bias = true,
  --  batch_first = false, dropout = 0, bidirectional = false, dtype =, device =}): an Elman RNN
  --  over a sequence. rnn(x[, h0]) with x (L, N, input_size), (N, L, input_size) when batch_first,
  --  or unbatched (L, input_size); h0 (D * num_layers, N, H) or unbatched (D * num_layers, H),
  --  zeros when absent (D = 2 when bidirectional). Returns output (L, N, D * H) (batch_first:
  --  (N, L, D * H)) and h_n shaped like h0. dropout applies to every layer's output but the
  --  last, in training mode only. Parameters weight_ih_l0, weight_hh_l0, bias_ih_l0,
  --  bias_hh_l0, ..., with _reverse for the backward direction: PyTorch's names and shapes.
  M.RNN = sequence_class("RNN")

  --- LSTM(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false,
  --  dropout = 0, bidirectional = false, proj_size = 0, dtype =, device =}): lstm(x[, {h0, c0}])
  --  returns output, {h_n, c_n} (the state as one pair, which feeds back in as the next call's
  --  initial state). Shapes as nn.RNN; with proj_size P > 0, h is projected to P features by
  --  weight_hr_l<k> (P, H), so output has D * P features and h0/h_n have P while c0/c_n keep H.
  --  Gates stacked i, f, g, o, as in PyTorch.
  M.LSTM = sequence_class("LSTM")

  --- GRU(input_size, hidden_size, {num_layers = 1, bias = true, batch_first = false,
  --  dropout = 0, bidirectional = false, dtype =, device =}): gru(x[, h0]) returns output, h_n;
  --  shapes as nn.RNN, gates stacked r, z, n, as in PyTorch.
  M.GRU = sequence_class("GRU")
end
