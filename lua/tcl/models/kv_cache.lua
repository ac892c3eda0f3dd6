-- tcl.models.kv_cache — the keys and values a decoder-only transformer keeps between calls:
-- one fixed buffer per layer for keys and one for values, (batch, kv_heads, max_context,
-- head_dim), written in place. Layer: lua/tcl/models (a user of the Tensor API).
--
--   local cache = kv_cache.new({ n_layers = 12, batch = 1, kv_heads = 12, max_context = 1024,
--                                head_dim = 64 })
--   cache:write(layer, k, v, start)         -- k, v (batch, kv_heads, T, head_dim) at start..
--   local keys, values = cache:read(layer, length)
--   local mask = cache:mask(start, T)       -- additive (1, 1, T, keys:size(3)); nil for T = 1
--
-- start, the 1-based position of the chunk's first entry, is an integer, or a bound size of the
-- cache's position variable (`cache.position:bind(n)`, tcl.var): a write is a slice assignment
-- at that position and a read a slice of the positions 1 .. start + T - 1, views of the one
-- buffer, so a decoding step touches only its own position and the positions it attends to,
-- and with the variable its kernels (and a tcl.jit plan of the step) serve every position.
-- Every access to the cache goes through this module.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local Tensor = require "tcl.api.tensor"
local variables = require "tcl.variables"

local fail = check.fail
local M = {}
M.__index = M

local FN = "kv_cache"
local SIZES = { "n_layers", "batch", "kv_heads", "max_context", "head_dim" }

local function positive_integer(fn, what, v)
  if math.type(v) ~= "integer" or v < 1 then
    fail(fn, "%s must be a positive integer, got %s", what, math.type(v) and tostring(v) or check.type_name(v))
  end
  return v
end

--- A cache of zeros. opts: n_layers, batch, kv_heads, max_context, head_dim (positive
--  integers), dtype (default float32), device (default: the default device).
function M.new(opts)
  local fn = FN .. ".new"
  opts = check.options(fn, opts, { n_layers = true, batch = true, kv_heads = true, max_context = true,
    head_dim = true, dtype = true, device = true })
  local self = setmetatable({}, M)
  for _, name in ipairs(SIZES) do self[name] = positive_integer(fn, name, opts[name]) end
  self.dtype, self.device = opts.dtype or "float32", opts.device
  local shape = { self.batch, self.kv_heads, self.max_context, self.head_dim }
  self.keys, self.values = {}, {}
  for layer = 1, self.n_layers do
    self.keys[layer] = Tensor.zeros(shape, { dtype = self.dtype, device = self.device }):realize()
    self.values[layer] = Tensor.zeros(shape, { dtype = self.dtype, device = self.device }):realize()
  end
  -- the position of a decoding step, bound per call (tcl.var): one plan for every position
  self.position = variables.new("position", 1, self.max_context)
  return self
end

local function layer_arg(self, fn, layer)
  if math.type(layer) ~= "integer" or layer < 1 or layer > self.n_layers then
    fail(fn, "layer must be an integer in 1..%d, got %s", self.n_layers,
      math.type(layer) and tostring(layer) or check.type_name(layer))
  end
  return layer
end

local function chunk_arg(self, fn, what, t, length)
  if not class.is_tensor(t) then fail(fn, "%s must be a tensor, got %s", what, check.type_name(t)) end
  local s = t.shape
  if #s ~= 4 or s[1] ~= self.batch or s[2] ~= self.kv_heads or s[4] ~= self.head_dim
      or (length and s[3] ~= length) then
    fail(fn, "%s must have shape (%d, %d, T, %d)%s, got %s", what, self.batch, self.kv_heads, self.head_dim,
      length and string.format(" with T = %d", length) or "", check.shape_str(s))
  end
  return t
end

-- Checks start (an integer, or for one position a bound size of self.position) and the positions.
local function range_arg(self, fn, start, count)
  if variables.is_symbolic(start) then
    if count ~= 1 or variables.max(start) > self.max_context or variables.min(start) < 1 then
      fail(fn, "start must be an integer, or for one position the cache's position variable bound to a value, "
        .. "got the size %s for %d positions", variables.format(start), count)
    end
    return
  end
  if math.type(start) ~= "integer" or start < 1 then
    fail(fn, "start must be a positive integer, got %s", math.type(start) and tostring(start) or check.type_name(start))
  end
  if start + count - 1 > self.max_context then
    fail(fn, "positions %d..%d are past max_context %d", start, start + count - 1, self.max_context)
  end
end

--- Stores k and v (batch, kv_heads, T, head_dim) at positions start .. start + T - 1 of
--  layer's buffers, in place (lazily: the next realize writes them, before anything that reads
--  them).
function M:write(layer, k, v, start)
  local fn = FN .. ":write"
  layer_arg(self, fn, layer)
  chunk_arg(self, fn, "k", k)
  local count = k.shape[3]
  chunk_arg(self, fn, "v", v, count)
  range_arg(self, fn, start, count)
  local window = { {}, {}, { start, variables.add(start, count - 1) } }
  self.keys[layer][window] = k:cast(self.dtype)
  self.values[layer][window] = v:cast(self.dtype)
end

--- The keys and values of layer for positions 1 .. length (an integer, or a size of the
--  position variable): views (batch, kv_heads, length, head_dim) of the buffers.
function M:read(layer, length)
  local fn = FN .. ":read"
  layer_arg(self, fn, layer)
  if not variables.is_symbolic(length) then
    range_arg(self, fn, 1, positive_integer(fn, "length", length))
  end
  local window = { {}, {}, { 1, length } }
  return self.keys[layer][window], self.values[layer][window]
end

--- The additive mask (1, 1, T, start + T - 1) for queries at start .. start + T - 1 against
--  the keys read returns: 0 where the key's position is at most the query's, -inf elsewhere;
--  nil for one query (it sees every key read).
function M:mask(start, count)
  local fn = FN .. ":mask"
  range_arg(self, fn, start, positive_integer(fn, "T", count))
  if count == 1 then return nil end
  local length = variables.add(start, count - 1)
  -- row i (the query at start + i - 1) sees columns 1 .. start + i - 1: col - row <= start - 1
  local seen = Tensor.ones(count, length, { dtype = "bool", device = self.device }):tril(variables.sub(start, 1))
  return seen:where(0.0, -math.huge):reshape(1, 1, count, length)
end

--- Forgets every position (zeros the buffers).
function M:reset()
  for layer = 1, self.n_layers do
    self.keys[layer]:assign(0)
    self.values[layer]:assign(0)
  end
  Tensor.realize_all(table.unpack(self.keys))
  Tensor.realize_all(table.unpack(self.values))
end

return M
