-- tcl.api.class — the Tensor class: what a tensor object holds, its metatable (properties,
-- integer indexing, Lua operators) and the constructor from a graph node. Layer: lua/tcl/api.
--
-- A tensor is a Lua table { uop = <tensor-graph node>, device = "CPU", _shape = {...} }.
-- The node is lazy: nothing runs until realize. The shape is known when the node is built
-- (every API function computes it while checking its arguments) and cached as _shape; the
-- dtype is the node's. Methods live in the class table (filled by api.tensor from the concept
-- modules); properties (shape, ndim, dtype) are computed on access.
local env = require "tcl.env"
local quote = require "tcl.quote"
local devices = require "tcl.devices"
local runtime = require "tcl.runtime"

local M = {}

local Tensor = {}
M.Tensor = Tensor

local instance_mt = { __name = "Tensor" }
M.instance_mt = instance_mt

local function is_tensor(v) return getmetatable(v) == instance_mt end
M.is_tensor = is_tensor

-- Properties: `t.shape` is a fresh table each time, so callers may modify it freely.
local properties = {
  shape = function(t) return table.move(t._shape, 1, #t._shape, 1, {}) end,
  ndim = function(t) return #t._shape end,
  dtype = function(t) return t.uop.dtype end,
  -- true for a leaf marked with requires_grad_ and for what is computed from one (tcl.api.autograd)
  requires_grad = function(t) return rawget(t, "_needs_grad") == true end,
  -- every dim reversed (the transpose of a matrix; a 0-d or 1-d tensor itself), as PyTorch's T
  T = function(t)
    local n = #t._shape
    if n < 2 then return t end
    local order = {}
    for i = 1, n do order[i] = n - i + 1 end
    return Tensor.permute(t, order)
  end,
  -- the last two dims swapped (a batch of matrices transposed)
  mT = function(t)
    if #t._shape < 2 then
      local sizes = table.concat(t._shape, ", ") .. (#t._shape == 1 and "," or "")
      error(string.format("mT: needs a tensor of at least 2 dims, got shape (%s)", sizes), 3)
    end
    return Tensor.transpose(t, -2, -1)
  end,
}

-- t[{spec, ...}]: the specs of t:slice(spec, ...) in one table (nil entries take a dim whole).
local function slice_specs(key)
  local n = 0
  for k in pairs(key) do
    if math.type(k) == "integer" and k > n then n = k end
  end
  return table.unpack(key, 1, n)
end

local function is_slice_key(key) return type(key) == "table" and not is_tensor(key) end

-- Fields a tensor may lack, which read as nil: grad (set by backward on a leaf). Names
-- starting with "_" are tcl's private fields, nil when unset. Any other unknown name is an
-- error at the line that reads it (x.shpae), not a nil that fails far from the typo.
local OPTIONAL_FIELDS = { grad = true }

-- Edit distance of a and b (for the did-you-mean of a misspelled field).
local function edit_distance(a, b)
  local previous = {}
  for j = 0, #b do previous[j] = j end
  for i = 1, #a do
    local current = { [0] = i }
    for j = 1, #b do
      local substitute = previous[j - 1] + (a:byte(i) == b:byte(j) and 0 or 1)
      current[j] = math.min(previous[j] + 1, current[j - 1] + 1, substitute)
    end
    previous = current
  end
  return previous[#b]
end

-- The closest field name to key (at most 2 edits, fewer than half its letters), or nil.
local function closest_field(key)
  local best, best_distance = nil, math.huge
  local function consider(name)
    if type(name) ~= "string" or name:sub(1, 1) == "_" then return end
    -- lengths 3 apart are 3 edits apart: skipped before the quadratic distance (a 400 KB key)
    if math.abs(#key - #name) > 2 then return end
    local d = edit_distance(key:lower(), name:lower())
    if d > 2 or d * 2 >= #key then return end
    if d < best_distance or (d == best_distance and name < best) then best, best_distance = name, d end
  end
  for name in pairs(Tensor) do consider(name) end
  for name in pairs(properties) do consider(name) end
  for name in pairs(OPTIONAL_FIELDS) do consider(name) end
  consider("uop")
  consider("device")
  return best
end

instance_mt.__index = function(t, key)
  if type(key) == "number" then return Tensor.index(t, key) end -- t[2.0] too; t[1.5] fails
  if is_slice_key(key) then return Tensor.slice(t, slice_specs(key)) end
  -- t[tensor]: only table keys pay for the check (method lookups are the hot path)
  if type(key) == "table" and is_tensor(key) then return require("tcl.api.indexing_ops")._tensor_index(t, key) end
  local method = Tensor[key]
  if method ~= nil then return method end
  local property = properties[key]
  if property then
    local value = property(t) -- not a tail call: mT's error counts this frame
    return value
  end
  if type(key) ~= "string" or OPTIONAL_FIELDS[key] or key:sub(1, 1) == "_" then return nil end
  local suggestion = closest_field(key)
  error(string.format("Tensor: no field '%s'%s", quote(key),
    suggestion and string.format(" (did you mean '%s'?)", suggestion) or ""), 2)
end

-- t[i] = v and t[{spec, ...}] = v assign v (a tensor or a number) into that view of t, at
-- once (Tensor.assign). Properties and methods cannot be overwritten on a tensor; other fields
-- (user annotations) can. A nil key is refused as for any table, but naming Tensor.
instance_mt.__newindex = function(t, key, value)
  if key == nil then error("Tensor: cannot set a field whose key is nil", 2) end
  if type(key) == "number" or is_slice_key(key) then
    local view = type(key) == "number" and Tensor.index(t, key) or Tensor.slice(t, slice_specs(key))
    Tensor.assign(view, value)
    -- t[{}] is t itself, whose assignment would wait for a realize: this one takes effect now
    if view.uop.op == "ASSIGN" then Tensor.realize(view) end
    return
  end
  if type(key) == "table" and is_tensor(key) then
    require("tcl.api.indexing_ops")._tensor_index_put(t, key, value)
    return
  end
  if key == "requires_grad" then Tensor.requires_grad_(t, value) return end
  if properties[key] or Tensor[key] ~= nil then
    error("Tensor: cannot set '" .. tostring(key) .. "' (a property or method; set values with t[i] = v or "
      .. "t:assign(v))", 2)
  end
  rawset(t, key, value)
end

--- Metatables (set) of other operand classes whose Lua operators take over from a tensor's:
-- `tensor + s` runs the tensor's __add first, which hands it to s's (sharded tensors,
-- tcl.api.sharding).
M.operand_classes = {}

-- Lua operators call the methods by name, looked up when used (the concept modules add them).
local function binary_operator(event, name)
  instance_mt[event] = function(a, b)
    local other = getmetatable(b)
    if other ~= instance_mt and M.operand_classes[other] then return other[event](a, b) end
    return Tensor[name](a, b)
  end
end
for event, name in pairs({ __add = "add", __sub = "sub", __mul = "mul", __div = "div", __mod = "mod", __pow = "pow",
  __idiv = "floordiv" }) do
  binary_operator(event, name)
end
instance_mt.__unm = function(a) return Tensor.neg(a) end
instance_mt.__tostring = function(t) return Tensor.to_string(t) end
instance_mt.__len = function(t) return Tensor.size(t, 1) end
-- __eq, __lt and __le are left alone: Lua turns their results into booleans, so tensor
-- comparisons are the methods eq, ne, lt, le, gt, ge; `==` stays identity.

--- While set (tcl.jit's warm-up call): { made = weak set of the tensors wrapped meanwhile,
-- used = weak set of the other tensors that nodes built meanwhile read (tcl.api.nodes) }.
M.watch = nil

--- Notes, while watched, that a node being built reads tensor t.
function M.note_use(t)
  local watch = M.watch
  if watch and not watch.made[t] and is_tensor(t) then watch.used[t] = true end
end

--- Wraps a graph node (with its shape, computed by the caller) into a new tensor.
function M.wrap(uop, shape, device)
  local t = setmetatable({ uop = uop, _shape = shape, device = device }, instance_mt)
  if M.watch then M.watch.made[t] = true end
  return t
end

--- Points an existing tensor at another node of the same shape and dtype (after realize).
function M.replace_uop(t, uop)
  rawset(t, "uop", uop)
end

--- The device name in its canonical spelling (tcl.devices: "cpu:1" -> "CPU", "cpu:2" ->
-- "CPU:2"), checked against the devices the runtime has (EMU, CPU, CUDA, METAL: listed always;
-- using CUDA without a driver or a GPU, or METAL anywhere but on a Mac, fails at the first
-- allocation or kernel, saying why) and their instances.
function M.checked_device(fn, name, origin)
  local available = runtime.devices
  local base, instance = devices.try_parse(name)
  local head = type(name) == "string" and name:upper():match("^[^:]*") -- the device, before its instance
  for _, d in ipairs(available) do
    if d == base then return devices.name(base, instance) end
    -- a device the runtime has, with a bad instance: the instance's problem (try_parse's message)
    if not base and d == head then error(string.format("%s: %s%s", fn, instance, origin or ""), 0) end
  end
  error(string.format("%s: unknown device '%s'%s (available: %s)", fn, quote(name), origin or "",
    table.concat(available, ", ")), 0)
end

--- The device a tensor is created on when none is given: DEVICE from the environment, else CPU.
function M.default_device(fn)
  if env.DEVICE then return M.checked_device(fn or "Tensor", env.DEVICE, " from DEVICE") end
  return "CPU"
end

--- Whether dropout is on (tcl.training reads and writes it).
M.training = false

--- Whether ops record what gradients need (off inside tcl.no_grad; see tcl.api.nodes).
M.grad_enabled = true

--- Calls fn(...) with grad_enabled set to `enabled`, restoring it afterwards (also on errors).
function M.with_grad_enabled(enabled, fn, ...)
  local before = M.grad_enabled
  M.grad_enabled = enabled
  local results = table.pack(pcall(fn, ...))
  M.grad_enabled = before
  if not results[1] then error(results[2], 0) end
  return table.unpack(results, 2, results.n)
end

-- Tensor(data, opts) builds a tensor (tcl.api.creation's Tensor.new).
setmetatable(Tensor, {
  __call = function(_, ...) return Tensor.new(...) end, -- new refuses extra arguments
  __name = "Tensor class",
})

return M
