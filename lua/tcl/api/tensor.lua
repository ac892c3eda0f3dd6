-- tcl.api.tensor — the Tensor API's entry point (tcl.Tensor): gathers the concept modules into
-- the class, and gets data out: realize, data, tolist, item, numel, size. Layer: lua/tcl/api.
--
--   local Tensor = require("tcl").Tensor
--   local t = Tensor({{1, 2}, {3, 4}}) * 2 + 1      -- lazy: a graph of nodes
--   print(t:sum(1):tolist())                        -- realizes: schedule, run, read back
--
-- Every concept module returns a table of functions; each becomes a field of the class, so
-- it is a static function (Tensor.cat(list)) and a method (t:sum()) at once. Names starting
-- with "_" are the modules' helpers for each other and stay out of the class.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local rules = require "tcl.api.dtype_rules"
local schedule = require "tcl.schedule"
local buffers = require "tcl.schedule.buffers"
local core = require "tcl.core"
local nodes = require "tcl.api.nodes"
local gradients = require "tcl.api.gradients"
local pending_assigns = require "tcl.api.pending_assigns"
local views = require "tcl.api.views"
local index_checks = require "tcl.api.index_checks"
local shapes = require "tcl.shape"
local variables = require "tcl.variables"
local sharding = require "tcl.api.sharding"

local Tensor = class.Tensor
local is_tensor, fail = class.is_tensor, check.fail

local CONCEPTS = {
  "tcl.api.creation", "tcl.api.random", "tcl.api.elementwise", "tcl.api.movement", "tcl.api.reduce",
  "tcl.api.nn", "tcl.api.print", "tcl.api.autograd", "tcl.api.bytes", "tcl.api.sorting",
  "tcl.api.gather_scatter", "tcl.api.math_ops", "tcl.api.activations", "tcl.api.losses",
  "tcl.api.indexing_ops", "tcl.api.scans", "tcl.api.einsum", "tcl.api.linalg",
  "tcl.api.convolution", "tcl.api.pooling", "tcl.api.resample", "tcl.api.sharding",
}

local M = {}

function M.is_tensor(v) return is_tensor(v) end

local tensor_arg = check.tensor

--- Number of elements.
function M.numel(t)
  return check.numel(tensor_arg("numel", t)._shape)
end

--- The size of dim d (1-based, negative from the end), or the whole shape (a fresh table)
--  when d is nil.
function M.size(t, d)
  tensor_arg("size", t)
  if d == nil then return t.shape end
  return t._shape[check.dim("size", d, t._shape) + 1]
end

index_checks.pending_assigns = pending_assigns.set -- the index checks' flag updates join them

--- Realizes several tensors in one schedule (tcl.realize): each tensor's node is replaced by
--  its computed buffer. Returns the tensors. On an error no tensor is changed. Tensors on
--  several devices, and sharded tensors (tcl.api.sharding: their shards), are realized in one
--  schedule per device, in the order of the devices' first tensors.
local realize_options -- the options of the realize being run (Tensor:realize{...})

-- The tensors of list (sharded ones: their shards) grouped by device, devices in order of
-- their first tensor; nil when they all are plain tensors on one device.
local function per_device(list)
  local groups, order, spread = {}, {}, false
  for i = 1, list.n do
    local t = list[i]
    local members = { t }
    if sharding.is_sharded(t) then members, spread = t.shards, true
    elseif not is_tensor(t) then fail("realize", "argument %d is not a tensor but %s", i, check.type_name(t)) end
    for _, m in ipairs(members) do
      local group = groups[m.device]
      if not group then
        group = { n = 0 }
        groups[m.device], order[#order + 1] = group, m.device
      end
      group.n = group.n + 1
      group[group.n] = m
    end
  end
  if not spread and #order <= 1 then return nil end
  local list_of_groups = {}
  for i, device in ipairs(order) do list_of_groups[i] = groups[device] end
  return list_of_groups
end

function M.realize_all(...)
  local list = table.pack(...)
  local groups = per_device(list)
  if groups then
    for _, group in ipairs(groups) do M.realize_all(table.unpack(group, 1, group.n)) end
    return table.unpack(list, 1, list.n)
  end
  local pending, uops, device, queued = {}, {}, nil, {}
  for i = 1, list.n do
    local t = list[i]
    if buffers.viewed(t.uop) == nil then
      device = t.device
      pending[#pending + 1] = t
      uops[#uops + 1] = t.uop
      queued[t] = true
    end
  end
  if #pending > 0 then
    -- pending assignments on the device join the schedule: they take effect at the next
    -- realize, and share its work (BatchNorm's statistics with the optimizer's step)
    for _, t in ipairs(pending_assigns.on(device)) do
      if not queued[t] then
        pending[#pending + 1] = t
        uops[#uops + 1] = t.uop
      end
    end
    local o = realize_options or {}
    local results = schedule.run(uops, { device = device, noopt = o.noopt, beam = o.beam })
    for _, t in ipairs(pending) do pending_assigns.remove(t) end
    for i, t in ipairs(pending) do
      -- a tensor that needs gradients keeps its graph reachable for backward; a transform's
      -- argument (_traced) keeps its node, which the transform differentiates with respect to
      if rawget(t, "_needs_grad") and not rawget(t, "_leaf") then
        gradients.remember_origin(buffers.viewed(results[i]), t.uop)
      end
      if not rawget(t, "_traced") then
        class.replace_uop(t, results[i])
        -- a view realized holds a copy of its elements: it no longer views (nor keeps) its base
        views.forget(t)
      end
    end
  end
  return table.unpack(list, 1, list.n)
end

--- Computes t (and what it depends on); returns t.
-- options: { noopt = true } (no kernel opts, like NOOPT=1) or { beam = n } (BEAM=n) for the
-- kernels of this realize only.
function M.realize(t, options)
  -- a stored tensor has nothing to compute, as realize_all finds (its pending assignments wait
  -- for a realize that computes something); this skips its 5 us of tables and pcall
  if options == nil and is_tensor(t) and buffers.viewed(t.uop) ~= nil then return t end
  tensor_arg("realize", t)
  if options ~= nil then
    if type(options) ~= "table" then fail("realize", "options must be a table, not %s", check.type_name(options)) end
    for key, v in pairs(options) do
      if key == "noopt" then
        if type(v) ~= "boolean" then fail("realize", "noopt must be a boolean, not %s", check.type_name(v)) end
      elseif key == "beam" then
        if math.type(v) ~= "integer" or v < 0 then
          fail("realize", "beam must be an integer >= 0, got %s", tostring(v))
        end
      else
        fail("realize", "unknown option '%s' (known: noopt, beam)", check.quote(key))
      end
    end
  end
  realize_options = options
  local ok, err = pcall(M.realize_all, t)
  realize_options = nil
  if not ok then error(err, 0) end
  return t
end

-- Whether numpy broadcasting takes shape `from` to exactly `to`.
local function broadcasts_to(from, to)
  if #from > #to then return false end
  for i = 1, #from do
    local a, b = from[#from - i + 1], to[#to - i + 1]
    if a ~= b and a ~= 1 then return false end
  end
  return true
end

-- An ASSIGN node: each call is a node of its own (tagged): nodes are hash-consed, and
-- c:assign(c + 1) twice must run twice (tcl.schedule.assign never runs an ASSIGN node again)
local function assign_node(target, value)
  return core.uop("ASSIGN", target.dtype, { target, value }, nil, { "assign", core.fresh_id() })
end

--- Stores value into t's own buffer (in place: every tensor and captured plan that uses t's
--  buffer sees the new values; optimizers update parameters this way). value is a tensor or a
--  number, broadcast to t's shape and cast to t's dtype. Returns t.
--  A tensor (not a view) is realized first if it is not stored yet; its node is the pending
--  assignment until the next realize on its device, which it joins (the assignments of an
--  optimizer step share one schedule).
--  A view (t[i], slice, narrow, index, transpose, flip, reshape... of a base tensor; see
--  tcl.api.views) is written at once, into the base's buffer at exactly the view's elements
--  (a lazy base is realized first): the base and its other views see the values right away,
--  as after PyTorch's `x[1:3] = v`. The value is computed before it is stored, also when it
--  reads the elements it overwrites.
function M.assign(t, value)
  tensor_arg("assign", t)
  local base = views.writable_base("assign", t)
  if is_tensor(value) then
    if value.device ~= t.device then
      fail("assign", "the value is on %s, the target on %s", value.device, t.device)
    end
    if not broadcasts_to(value._shape, t._shape) then
      fail("assign", "a value of shape %s cannot be assigned to a tensor of shape %s", check.shape_str(value._shape),
        check.shape_str(t._shape))
    end
    value = nodes.broadcast_to(nodes.cast(value, t.uop.dtype), t._shape)
  elseif type(value) == "number" or type(value) == "boolean" then
    value = nodes.const(rules.fill_value("assign", value, t.uop.dtype), t.uop.dtype, t._shape, t.device)
  else
    fail("assign", "the value must be a tensor or a number, got %s", check.type_name(value))
  end
  if base then
    -- assignments waiting for a realize go first: they may write the buffer this one writes
    pending_assigns.run(M.realize_all, t.device)
    views.settle(t, base, M.realize_all, buffers.viewed)
    -- t keeps its node: the view of the buffer, which now holds the values
    schedule.run({ assign_node(t.uop, value.uop) }, { device = t.device })
    return t
  end
  if buffers.viewed(t.uop) == nil then M.realize_all(t) end
  class.replace_uop(t, assign_node(t.uop, value.uop))
  pending_assigns.add(t)
  return t
end

-- The shape of t for this call: a variable size (tcl.variables) as its bound value.
local function host_shape(t)
  local s = t._shape
  if not shapes.is_symbolic(s) then return s end
  local out = {}
  for i, d in ipairs(s) do out[i] = variables.value(d) end
  return out
end

--- The values as a flat row-major Lua list (floats, integers or booleans by dtype).
function M.data(t)
  tensor_arg("data", t)
  local shape = host_shape(t)
  local numel = check.numel(shape)
  check.host_values("data", numel)
  M.realize_all(t)
  index_checks.report(t.device) -- every read to the host reports the failed index checks
  local buffer = buffers.viewed(t.uop)
  if buffer == nil then
    fail("data", "realize gave a %s node, not a buffer, for a tensor of shape %s", t.uop.op, check.shape_str(t._shape))
  end
  local list = buffers.read(buffer)
  -- a variable-size value is stored at the front of a buffer of its largest size
  if #list > numel and shape ~= t._shape then
    for i = #list, numel + 1, -1 do list[i] = nil end
  end
  return list
end

--- The values as nested Lua tables following the shape; a 0-d tensor gives its value.
function M.tolist(t)
  tensor_arg("tolist", t)
  local shape = host_shape(t)
  check.host_values("tolist", check.numel(shape))
  -- and the lists: one per entry of every dim but the last, down to the first 0 (an empty
  -- tensor of shape (2^53, 0) would be 2^53 empty lists); counted in floats, which do not
  -- overflow (at worst they reach inf, which is refused too)
  local lists, above = 1.0, 1.0
  for d = 1, #shape - 1 do
    above = above * shape[d]
    if above == 0 then break end
    lists = lists + above
  end
  check.host_values("tolist", lists, "lists")
  local flat = M.data(t)
  if #shape == 0 then return flat[1] end
  local position = 0
  local function nest(depth)
    local list = {}
    if depth == #shape then
      for i = 1, shape[depth] do list[i] = flat[position + i] end
      position = position + shape[depth]
    else
      for i = 1, shape[depth] do list[i] = nest(depth + 1) end
    end
    return list
  end
  return nest(1)
end

--- The value of a one-element tensor.
function M.item(t)
  tensor_arg("item", t)
  if check.numel(host_shape(t)) ~= 1 then
    fail("item", "needs a tensor with one element, got shape %s", check.shape_str(t._shape))
  end
  return M.data(t)[1]
end

local function install(functions, from)
  for name, f in pairs(functions) do
    if name:sub(1, 1) ~= "_" then
      if rawget(Tensor, name) ~= nil then error("api.tensor: " .. name .. " is defined twice (" .. from .. ")") end
      rawset(Tensor, name, f)
    end
  end
end

install(M, "tcl.api.tensor")
for _, name in ipairs(CONCEPTS) do install(require(name), name) end

-- An alias (clip, swish, tile) is the same function as the one it names, and reports that one's name.
local ALIASES = { clip = true, swish = true, tile = true }
-- a stray argument (x:gelu("tanh"), avg_pool2d(x, 2, 2, 0, true)) is an error, not ignored
check.fix_arguments(Tensor, "", ALIASES, { new = "Tensor" })

-- The movement functions whose results are views of their argument (as in PyTorch; and pad,
-- whose padding cannot be written, so assigning into it is an error rather than a write into
-- a copy): an assignment into such a result writes the argument's buffer (tcl.api.views).
local VIEW_FUNCTIONS = { "reshape", "view", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose",
  "expand", "pad", "flip", "narrow", "index", "slice", "split", "chunk" }
for _, name in ipairs(VIEW_FUNCTIONS) do
  local make = Tensor[name]
  rawset(Tensor, name, function(x, ...) return views.note(make(x, ...), x) end)
end

-- The option requires_grad of every creation function: taken out of the options table before
-- the function sees it, applied to the result (Tensor.requires_grad_).
local CREATION = { "new", "scalar", "full", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like",
  "full_like", "arange", "linspace", "eye", "rand", "randn", "rand_like", "randn_like" }
for _, name in ipairs(CREATION) do
  local make = Tensor[name]
  rawset(Tensor, name, function(...)
    local args = table.pack(...)
    local opts = args[args.n]
    if type(opts) == "table" and not is_tensor(opts) and rawget(opts, "requires_grad") ~= nil then
      local flag = opts.requires_grad
      if type(flag) ~= "boolean" then fail(name, "requires_grad must be a boolean, got %s", check.type_name(flag)) end
      local rest = {}
      for k, v in pairs(opts) do if k ~= "requires_grad" then rest[k] = v end end
      if next(rest) ~= nil then args[args.n] = rest else args.n = args.n - 1 end
      local t = make(table.unpack(args, 1, args.n))
      if flag then Tensor.requires_grad_(t, true) end
      return t
    end
    return make(...)
  end)
end

-- The user-facing names check.api_function reports (function -> name).
for name, f in pairs(Tensor) do
  if type(f) == "function" and not ALIASES[name] then check.function_names[f] = name end
end
check.function_names[Tensor.realize_all] = "realize"
check.function_names[Tensor.new] = "Tensor"
for key, f in pairs(class.instance_mt) do
  if type(f) == "function" then
    local name = key:gsub("^__", "")
    check.function_names[f] = ({ unm = "neg", idiv = "floordiv", len = "size", newindex = "Tensor",
      tostring = "to_string" })[name] or name
  end
end
check.function_names[getmetatable(Tensor).__call] = "Tensor"

return Tensor
