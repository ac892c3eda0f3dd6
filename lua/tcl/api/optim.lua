-- tcl.api.optim — optimizers (tcl.optim): SGD, Adam, AdamW and LAMB update a list of
-- parameters in place from their .grad, with the formulas of PyTorch's torch.optim (LAMB: as
-- tinygrad's, after You et al. 2019). Layer: lua/tcl/api.
--
--   local opt = tcl.optim.Adam(tcl.nn.state.get_parameters(model), { lr = 1e-3 })
--   local step = tcl.jit(function(x, y)
--     opt:zero_grad()
--     local loss = model(x):cross_entropy(y)
--     loss:backward()
--     return opt:step(loss)        -- loss is realized in the update's schedule, from the old weights
--   end)
--   opt:set_lr(1e-4)               -- or opt.lr = 1e-4: a jitted step sees it without recompiling
--
-- opt:step(...) builds every new value (parameters and state) under no_grad, assigns each into
-- its tensor's own buffer (Tensor.assign) and realizes them in ONE schedule, together with
-- every gradient it reads and the extra tensors it is given (returned, realized). Both matter:
-- a lazy graph that reads a parameter reads its buffer, so a loss or a .grad realized after the
-- step would see the new weights (the scheduler runs the readers of old values first when they
-- are in the same schedule). Parameters without .grad are skipped, as in PyTorch.
--
-- Everything that changes from step to step lives in tensors created (zeros, realized) at
-- construction, so every step runs the same kernels and a step captured by tcl.jit replays:
-- lr (a 0-d tensor: set_lr assigns it), the per-parameter step counts (`steps`) and, for the
-- Adam family, the bias-correction powers beta^t (`beta1_power`, `beta2_power`, running
-- products rather than pow: 1 - beta2^1 is then exact in float32), and the momentum (SGD's
-- momentum when it is not 0, the Adam family's beta1: opt:set_momentum, which OneCycleLR
-- cycles). The other hyperparameters are constants of the kernels, fixed at construction.
-- The state tensors are plain fields (state[i].momentum_buffer / exp_avg / exp_avg_sq, steps,
-- beta1_power, beta2_power), so tcl.nn.state.get_state_dict(opt) names them for a checkpoint.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local Tensor = require "tcl.api.tensor"

local is_tensor, fail = class.is_tensor, check.fail
local M = {}

-- ---------------------------------------------------------------------------------------
-- options

local function show(v)
  -- floats as Lua writes them, without the ".0" of whole numbers (lr=0.1, eps=1e-08, momentum=0)
  if type(v) == "number" then return math.type(v) == "float" and string.format("%.14g", v) or tostring(v) end
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "table" and not is_tensor(v) then
    local parts = {}
    for i = 1, math.min(#v, 4) do parts[i] = show(v[i]) end
    if #v > 4 then parts[#parts + 1] = "..." end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  if type(v) == "boolean" then return tostring(v) end
  return check.type_name(v)
end

local function finite(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end

-- Validators: return the checked value, or nil and what it must be.
local function at_least_zero(v)
  if finite(v) and v >= 0 then return v + 0.0 end
  return nil, "a number >= 0"
end
local function zero_to_one(v)
  if finite(v) and v >= 0 and v <= 1 then return v + 0.0 end
  return nil, "a number in [0, 1]"
end
local function boolean(v)
  if type(v) == "boolean" then return v end
  return nil, "a boolean"
end
local function betas(v)
  if type(v) == "table" and not is_tensor(v) and #v == 2 then
    local b1, b2 = v[1], v[2]
    if finite(b1) and finite(b2) and b1 >= 0 and b1 < 1 and b2 >= 0 and b2 < 1 then return { b1 + 0.0, b2 + 0.0 } end
  end
  return nil, "two numbers in [0, 1)"
end

-- opts checked against the class's option list ({name, default, validator} in display order);
-- returns the full set of options.
local function checked_options(fn, spec, opts)
  if opts ~= nil and (type(opts) ~= "table" or is_tensor(opts)) then
    fail(fn, "options must be a table, got %s", check.type_name(opts))
  end
  opts = opts or {}
  local known, names = {}, {}
  for _, o in ipairs(spec) do
    known[o[1]] = true
    names[#names + 1] = o[1]
  end
  for k in pairs(opts) do
    if not known[k] then fail(fn, "unknown option %s (known: %s)", show(k), table.concat(names, ", ")) end
  end
  local out = {}
  for _, o in ipairs(spec) do
    local name, default, validate = o[1], o[2], o[3]
    local v = opts[name]
    if v == nil then v = default end
    local value, must = validate(v)
    if value == nil then fail(fn, "%s must be %s, got %s", name, must, show(v)) end
    out[name] = value
  end
  return out
end

-- ---------------------------------------------------------------------------------------
-- parameters

local function checked_params(fn, params)
  if type(params) ~= "table" or is_tensor(params) then
    fail(fn, "params must be a list of tensors, got %s", is_tensor(params) and "a tensor (wrap it in a list)"
      or check.type_name(params))
  end
  if #params == 0 then fail(fn, "params is empty: an optimizer needs at least one tensor") end
  local list, seen = {}, {}
  for i = 1, #params do
    local p = params[i]
    if not is_tensor(p) then fail(fn, "params[%d] is %s, not a tensor", i, show(p)) end
    if not p.requires_grad then
      fail(fn, "params[%d] does not require gradients (create it with {requires_grad = true} or call "
        .. "p:requires_grad_())", i)
    end
    -- backward fills .grad of leaves only; a computed tensor would never be updated
    if not rawget(p, "_leaf") then
      fail(fn, "params[%d] is computed from tensors that require gradients, not a leaf: optimize those instead", i)
    end
    if i > 1 and p.device ~= list[1].device then
      fail(fn, "params[%d] is on %s, params[1] on %s: an optimizer updates the tensors of one device in one "
        .. "schedule (make one optimizer per device)", i, p.device, list[1].device)
    end
    -- two tensors over one buffer would be assigned twice in one schedule
    local j = seen[p] or seen[p.uop]
    if j then fail(fn, "params[%d] is the same tensor as params[%d] (or shares its buffer)", i, j) end
    seen[p], seen[p.uop] = i, i
    list[i] = p
  end
  return list
end

-- The dtype of the scalar state (lr, beta powers): float64 when a parameter is, else float32.
local function scalar_dtype(params)
  for _, p in ipairs(params) do
    if p.dtype.name == "float64" then return "float64" end
  end
  return "float32"
end

-- A zero-filled tensor in a buffer of its own (realized alone: equal constant nodes are one
-- node, and one schedule would give them one buffer).
local function zeros_like(p) return Tensor.zeros(p.shape, { dtype = p.dtype, device = p.device }):realize() end

-- ---------------------------------------------------------------------------------------
-- the optimizer object

local Optimizer = {}

-- Fields read through the instance (opt.lr, opt.params, the options) and the one writable
-- property (opt.lr = v).
local function index(Class)
  return function(self, key)
    if key == "lr" then return rawget(self, "_lr_value") end
    local momentum = rawget(self, "_momentum_value")
    if momentum and key == Class._momentum_option then
      if key == "betas" then return { momentum, self._options.betas[2] } end
      return momentum
    end
    if key == "params" then return table.move(self._params, 1, #self._params, 1, {}) end
    local method = Class[key] or Optimizer[key]
    if method ~= nil then return method end
    local options = rawget(self, "_options")
    local v = options and options[key]
    if type(v) == "table" then return table.move(v, 1, #v, 1, {}) end
    return v
  end
end

local function newindex(self, key, value)
  if key == "lr" then return self:set_lr(value) end
  if key == "params" or rawget(self, "_options")[key] ~= nil then
    fail(self._name, "%s is fixed when the optimizer is made (a constant of the step's kernels); only lr can "
      .. "change (opt:set_lr)", tostring(key))
  end
  rawset(self, key, value)
end

local function describe(self)
  local parts = { string.format("%d parameter%s", #self._params, #self._params == 1 and "" or "s"),
    "lr=" .. show(self._lr_value) }
  for _, o in ipairs(self._spec) do
    local name, v = o[1], self._options[o[1]]
    if name ~= "lr" then
      if type(v) == "table" then v = "(" .. show(v[1]) .. ", " .. show(v[2]) .. ")" else v = show(v) end
      parts[#parts + 1] = name .. "=" .. v
    end
  end
  return self._name .. "(" .. table.concat(parts, ", ") .. ")"
end

-- An optimizer class: calling it constructs an instance. The hooks: validate(fn, options)
-- checks option combinations; init(self, i, p, options) creates parameter i's state;
-- begin(self, active, assign) builds the step's shared state (active: the indices of the
-- parameters with a gradient); update(self, i, p, g, assign) the new values of parameter i
-- (g its gradient). Each (tensor, value) goes to assign, which returns the tensor, now the
-- pending assignment: reading it reads the new value.
local function optimizer_class(name, spec, hooks)
  local fn = "optim." .. name
  local init = hooks.init
  local Class = { __name = fn, _spec = spec, _begin = hooks.begin, _update = hooks.update,
    _momentum_option = hooks.momentum_option }
  Class.__index = index(Class)
  Class.__newindex = newindex
  Class.__tostring = describe
  setmetatable(Class, {
    __name = fn .. " class",
    __call = check.fixed_arguments(fn, function(_, params, opts)
      params = checked_params(fn, params)
      local options = checked_options(fn, spec, opts)
      if hooks.validate then hooks.validate(fn, options) end
      local self = setmetatable({}, Class)
      rawset(self, "_name", fn)
      rawset(self, "_params", params)
      rawset(self, "_options", options)
      rawset(self, "_lr_value", options.lr)
      local dtype, device = scalar_dtype(params), params[1].device
      rawset(self, "_scalar", { dtype = dtype, device = device })
      rawset(self, "_lr", Tensor.scalar(options.lr, { dtype = dtype, device = device }):realize())
      local momentum = hooks.momentum_of and hooks.momentum_of(options)
      if momentum then
        rawset(self, "_momentum", Tensor.scalar(momentum, { dtype = dtype, device = device }):realize())
        -- 1 - momentum from the double, as torch computes it (1 - 0.9f in float32 is 0.100000024)
        rawset(self, "_momentum_complement", Tensor.scalar(1 - momentum, { dtype = dtype, device = device }):realize())
        rawset(self, "_momentum_value", momentum)
      end
      rawset(self, "state", {})
      for i, p in ipairs(params) do self.state[i] = {} init(self, i, p, options) end
      return self
    end, 1),
  })
  return Class
end

--- Clears every parameter's .grad.
function Optimizer.zero_grad(self)
  for _, p in ipairs(self._params) do p.grad = nil end
end

--- Sets the learning rate: assigns the lr tensor the step's kernels read (realized now, so a
-- step replayed by tcl.jit uses it). Call it between steps, not inside a jitted function:
-- there it would be captured with this value.
function Optimizer.set_lr(self, lr)
  local value, must = at_least_zero(lr)
  if value == nil then fail(self._name, "lr must be %s, got %s", must, show(lr)) end
  -- copied from a buffer of its own: a number would be a constant of the copy kernel, one
  -- more kernel to compile for every new rate
  local s = self._scalar
  self._lr:assign(Tensor.scalar(value, { dtype = s.dtype, device = s.device })):realize()
  rawset(self, "_lr_value", value)
  return self
end

--- Sets the momentum: SGD's momentum (an SGD made with momentum 0 has none to set: its step
-- keeps no momentum buffers), the Adam family's beta1. Like set_lr, it assigns a 0-d tensor
-- the step's kernels read, so a jitted step sees it. Once beta1 has been set, the bias
-- correction 1 - beta1^t uses the current beta1, as torch's does (before, a running product).
function Optimizer.set_momentum(self, momentum)
  local option = self._momentum_option
  if not rawget(self, "_momentum") then
    fail(self._name, "set_momentum: this optimizer has no momentum to set (%s)", option == "momentum" and
      "made with momentum 0: its step keeps no momentum buffers; give it a momentum > 0" or "no momentum option")
  end
  local value, must
  if option == "betas" then
    value, must = zero_to_one(momentum)
    if value == 1 then value, must = nil, "a number in [0, 1)" end
  else
    value, must = at_least_zero(momentum)
  end
  if value == nil then fail(self._name, "set_momentum: the momentum must be %s, got %s", must, show(momentum)) end
  local s = self._scalar
  self._momentum:assign(Tensor.scalar(value, { dtype = s.dtype, device = s.device }))
  self._momentum_complement:assign(Tensor.scalar(1 - value, { dtype = s.dtype, device = s.device }))
  Tensor.realize_all(self._momentum, self._momentum_complement)
  rawset(self, "_momentum_value", value)
  if option == "betas" then rawset(self, "_beta1_set", true) end
  return self
end

--- One update of every parameter that has a .grad, and of the optimizer state, in one
-- schedule together with the gradients and the extra tensors given (all on the parameters'
-- device). Returns the extra tensors, realized.
function Optimizer.step(self, ...)
  local fn = self._name
  local extras = table.pack(...)
  local device = self._scalar.device
  for k = 1, extras.n do
    local t = extras[k]
    if not is_tensor(t) then fail(fn, "step: argument %d is %s, not a tensor", k, show(t)) end
    if t.device ~= device then
      fail(fn, "step: argument %d is on %s, the parameters on %s (one schedule runs on one device)", k, t.device,
        device)
    end
  end
  local params, grads, active = self._params, {}, {}
  for i, p in ipairs(params) do
    local g = rawget(p, "grad")
    if g ~= nil then
      if not is_tensor(g) then fail(fn, "params[%d].grad is %s, not a tensor", i, show(g)) end
      if not check.same_shape(g._shape, p._shape) then
        fail(fn, "params[%d].grad has shape %s, the parameter %s", i, check.shape_str(g._shape),
          check.shape_str(p._shape))
      end
      if g.device ~= device then fail(fn, "params[%d].grad is on %s, the parameter on %s", i, g.device, device) end
      grads[i] = g
      active[#active + 1] = i
    end
  end
  local outputs = {}
  local function assign(t, value)
    t:assign(value)
    outputs[#outputs + 1] = t
    return t
  end
  if #active > 0 then
    Tensor.no_grad(function()
      if self._begin then self:_begin(active, assign) end
      for _, i in ipairs(active) do self:_update(i, params[i], grads[i], assign) end
    end)
    -- the gradients too: realized later, they would be computed from the new weights
    for _, i in ipairs(active) do outputs[#outputs + 1] = grads[i] end
  end
  for k = 1, extras.n do outputs[#outputs + 1] = extras[k] end
  if #outputs > 0 then Tensor.realize_all(table.unpack(outputs)) end
  return table.unpack(extras, 1, extras.n)
end

-- ---------------------------------------------------------------------------------------
-- per-parameter step counts (steps[i]: how many updates parameter i has had)

local function init_steps(self)
  if rawget(self, "steps") then return end
  rawset(self, "steps", Tensor.zeros(#self._params, { dtype = "int32", device = self._scalar.device }):realize())
end

-- Which parameters this step updates, as a bool tensor; nil when all of them (the common
-- case: a constant, no buffer).
local function active_mask(self, active)
  if #active == #self._params then return nil end
  local flags = {}
  for i = 1, #self._params do flags[i] = false end
  for _, i in ipairs(active) do flags[i] = true end
  return Tensor(flags, { device = self._scalar.device })
end

local function advance_steps(self, mask, assign)
  local steps = self.steps
  return assign(steps, mask and steps + mask:cast("int32") or steps + 1)
end

-- ---------------------------------------------------------------------------------------
-- SGD: g += wd p; b = momentum b + (1 - dampening) g (b = g on the first step);
-- g = nesterov and g + momentum b or b; p -= lr g  (torch.optim.SGD)

local function sgd_init(self, i, p, o)
  if o.momentum ~= 0 then
    self.state[i].momentum_buffer = zeros_like(p)
    -- the first step takes b = g undamped: it needs to know which step it is
    if o.dampening ~= 0 then init_steps(self) end
  end
end

local function sgd_begin(self, active, assign)
  if rawget(self, "steps") then advance_steps(self, active_mask(self, active), assign) end
end

local function sgd_update(self, i, p, g, assign)
  local o = self._options
  if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
  if o.momentum ~= 0 then
    local b = self.state[i].momentum_buffer
    local damped = g
    if o.dampening ~= 0 then
      -- b is zero before the first step, so momentum * b + g is g then
      damped = self.steps[i]:le(1):where(g, g * (1 - o.dampening))
    end
    local momentum = self._momentum
    b = assign(b, b * momentum + damped)
    g = o.nesterov and g + b * momentum or b
  end
  assign(p, p - self._lr * g)
end

local SGD_OPTIONS = {
  { "lr", 0.001, at_least_zero }, { "momentum", 0, at_least_zero }, { "dampening", 0, zero_to_one },
  { "weight_decay", 0, at_least_zero }, { "nesterov", false, boolean },
}

local function sgd_validate(fn, o)
  if o.nesterov and (o.momentum == 0 or o.dampening ~= 0) then
    fail(fn, "nesterov needs a momentum > 0 and a dampening of 0, got momentum=%s, dampening=%s",
      show(o.momentum), show(o.dampening))
  end
end

local function sgd_momentum(o) return o.momentum ~= 0 and o.momentum or nil end

M.SGD = optimizer_class("SGD", SGD_OPTIONS, { validate = sgd_validate, init = sgd_init, begin = sgd_begin,
  update = sgd_update, momentum_of = sgd_momentum, momentum_option = "momentum" })

-- ---------------------------------------------------------------------------------------
-- the Adam family: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; m^ = m / (1 - b1^t);
-- v^ = v / (1 - b2^t); update = m^ / (sqrt(v^) + eps)

local function adam_init(self, i, p)
  self.state[i].exp_avg = zeros_like(p)
  self.state[i].exp_avg_sq = zeros_like(p)
  if rawget(self, "beta1_power") then return end
  init_steps(self)
  local n, s = #self._params, self._scalar
  rawset(self, "beta1_power", Tensor.ones(n, { dtype = s.dtype, device = s.device }):realize())
  rawset(self, "beta2_power", Tensor.ones(n, { dtype = s.dtype, device = s.device }):realize())
end

local function adam_begin(self, active, assign)
  local mask = active_mask(self, active)
  local b1, b2 = self._momentum, self._options.betas[2]
  local steps = advance_steps(self, mask, assign)
  local p1, p2 = self.beta1_power, self.beta2_power
  -- where picks between tensors of the powers' dtype (numbers would make float32 constants)
  if rawget(self, "_beta1_set") then
    -- beta1 changes from step to step (OneCycleLR): beta1^t from the current beta1, as torch
    assign(p1, b1:pow(steps:cast(p1.dtype)))
  else
    assign(p1, mask and mask:where(p1 * b1, p1) or p1 * b1)
  end
  assign(p2, mask and mask:where(p2 * b2, p2) or p2 * b2)
end

-- The moments' new values (assigned) and the bias-corrected update m^ / (sqrt(v^) + eps).
local function adam_direction(self, i, g, assign)
  local o, st = self._options, self.state[i]
  local b2 = o.betas[2]
  local m = assign(st.exp_avg, st.exp_avg * self._momentum + g * self._momentum_complement)
  local v = assign(st.exp_avg_sq, st.exp_avg_sq * b2 + g:square() * (1 - b2))
  -- the powers are read after their assignment: beta^t of this step
  local m_hat = m / (1 - self.beta1_power[i])
  local v_hat = v / (1 - self.beta2_power[i])
  return m_hat / (v_hat:sqrt() + o.eps)
end

-- Adam: g += wd p (L2, coupled); AdamW: p -= lr wd p (decoupled), then p -= lr update.
local function adam_update(decoupled)
  return function(self, i, p, g, assign)
    local wd, lr = self._options.weight_decay, self._lr
    if wd ~= 0 and not decoupled then g = g + p * wd end
    local direction = adam_direction(self, i, g, assign)
    local new = p - lr * direction
    if wd ~= 0 and decoupled then new = new - lr * wd * p end
    assign(p, new)
  end
end

local function adam_beta1(o) return o.betas[1] end

local ADAM_OPTIONS = {
  { "lr", 0.001, at_least_zero }, { "betas", { 0.9, 0.999 }, betas }, { "eps", 1e-8, at_least_zero },
  { "weight_decay", 0, at_least_zero },
}
M.Adam = optimizer_class("Adam", ADAM_OPTIONS,
  { init = adam_init, begin = adam_begin, update = adam_update(false), momentum_of = adam_beta1,
    momentum_option = "betas" })

local ADAMW_OPTIONS = {
  { "lr", 0.001, at_least_zero }, { "betas", { 0.9, 0.999 }, betas }, { "eps", 1e-8, at_least_zero },
  { "weight_decay", 0.01, at_least_zero },
}
M.AdamW = optimizer_class("AdamW", ADAMW_OPTIONS,
  { init = adam_init, begin = adam_begin, update = adam_update(true), momentum_of = adam_beta1,
    momentum_option = "betas" })

-- LAMB: u = m^ / (sqrt(v^) + eps) + wd p; r = ||p|| / ||u|| (1 where either norm is 0, or
-- always with adam = true); p -= lr r u.
local function lamb_update(self, i, p, g, assign)
  local o = self._options
  local u = adam_direction(self, i, g, assign)
  if o.weight_decay ~= 0 then u = u + p * o.weight_decay end
  local step = self._lr * u
  if not o.adam then
    local w_norm, u_norm = p:square():sum():sqrt(), u:square():sum():sqrt()
    local ratio = w_norm:gt(0):where(u_norm:gt(0):where(w_norm / u_norm, 1.0), 1.0)
    step = step * ratio
  end
  assign(p, p - step)
end

local LAMB_OPTIONS = {
  { "lr", 0.001, at_least_zero }, { "betas", { 0.9, 0.999 }, betas }, { "eps", 1e-6, at_least_zero },
  { "weight_decay", 0, at_least_zero }, { "adam", false, boolean },
}
M.LAMB = optimizer_class("LAMB", LAMB_OPTIONS,
  { init = adam_init, begin = adam_begin, update = lamb_update, momentum_of = adam_beta1,
    momentum_option = "betas" })

-- a stray argument (opt:set_lr(0.1, extra)) is an error (check.fixed_arguments); step checks its own
check.fix_arguments(Optimizer, "", nil, nil, 1)

local lr_scheduler = require "tcl.api.lr_scheduler"
for _, name in ipairs { "StepLR", "MultiStepLR", "ExponentialLR", "LambdaLR", "CosineAnnealingLR", "LinearLR",
  "OneCycleLR", "SequentialLR" } do
  M[name] = lr_scheduler[name]
end

return M
