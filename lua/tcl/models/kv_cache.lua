-- tcl.models.kv_cache — the keys and values a decoder-only transformer keeps between calls:
-- one fixed buffer per layer for keys and one for values, (batch, kv_heads, max_context,
-- head_dim), written in place. Layer: lua/tcl/models (a user of the Tensor API).
--
--   local cache = kv_cache.new({ n_layers = 12, batch = 1, kv_heads = 12, max_context = 1024,
--                                head_dim = 64 })
--   cache:write(layer, k, v, start)         -- k, v (batch, kv_heads, T, head_dim) at start..
--   local keys, values = cache:read(layer, length)
--   scores = scores + cache:mask(start, T)  -- additive, (1, 1, T, keys:size(3))
--
-- start, the 1-based position of the chunk's first entry, is a number, or for a chunk of one
-- position (decoding) also a one-element int32 tensor holding it: the same kernels then serve
-- every position, and a plan (tcl.jit) captured with it replays for any position.
--
-- Every access to the cache goes through this module, so that a variable-offset slice assign
-- (issue 37's `cache[{pos, pos}] = kv`) replaces it without touching the model. Until then:
--   * a write of one position (decoding) is `cache:assign(where(position == start, k, cache))`,
--     with start on the device (a number becomes a one-element tensor made from host memory):
--     one kernel for every position (no compile after the first token), but it reads and
--     writes the whole buffer of every layer, 2 * n_layers * batch * kv_heads * max_context *
--     head_dim values per token in each direction;
--   * a write of several positions (a prompt) pads the chunk to the buffer's length at its
--     offset (a kernel per offset and length: a prompt is processed once);
--   * read returns the whole buffer, and mask hides the keys after each query's position
--     (unwritten ones included) with -inf, so the attention kernels too have one shape for
--     every position; length only bounds what the caller may see.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local Tensor = require "tcl.api.tensor"

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
  -- the buffer's positions, 1-based, shaped to broadcast against it
  self.positions = Tensor.arange(1, self.max_context + 1, { dtype = "int32", device = self.device })
    :reshape(1, 1, self.max_context, 1)
  return self
end

local function layer_arg(self, fn, layer)
  if math.type(layer) ~= "integer" or layer < 1 or layer > self.n_layers then
    fail(fn, "layer must be an integer in 1..%d, got %s", self.n_layers,
      math.type(layer) and tostring(layer) or check.type_name(layer))
  end
  return layer
end

-- start as a one-element int32 tensor (1, 1, 1, 1): a number becomes one made from host memory
-- (a kernel reading it is the same kernel whatever the number is).
local function device_start(self, start)
  if class.is_tensor(start) then return start:cast("int32"):reshape(1, 1, 1, 1) end
  return Tensor({ start }, { dtype = "int32", device = self.device }):reshape(1, 1, 1, 1)
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

-- Checks start (a number, or with count 1 a one-element integer tensor) and the positions.
local function range_arg(self, fn, start, count)
  if class.is_tensor(start) then
    if count ~= 1 or not start.dtype.is_int or start:numel() ~= 1 then
      fail(fn, "start must be a number, or for one position a one-element integer tensor, got a tensor of "
        .. "dtype %s and shape %s for %d positions", start.dtype.name, check.shape_str(start.shape), count)
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
--  layer's buffers (lazily: the next realize writes them, before anything reading them).
function M:write(layer, k, v, start)
  local fn = FN .. ":write"
  layer_arg(self, fn, layer)
  chunk_arg(self, fn, "k", k)
  local count = k.shape[3]
  chunk_arg(self, fn, "v", v, count)
  range_arg(self, fn, start, count)
  local keys, values = self.keys[layer], self.values[layer]
  if count == 1 then
    local here = self.positions:eq(device_start(self, start))
    keys:assign(here:where(k:cast(self.dtype), keys))
    values:assign(here:where(v:cast(self.dtype), values))
  else
    local before, after = start - 1, self.max_context - (start - 1 + count)
    local padding = { { 0, 0 }, { 0, 0 }, { before, after }, { 0, 0 } }
    local inside = self.positions:ge(start):logical_and(self.positions:lt(start + count))
    keys:assign(inside:where(k:cast(self.dtype):pad(padding), keys))
    values:assign(inside:where(v:cast(self.dtype):pad(padding), values))
  end
end

--- The keys and values of layer for positions 1 .. length (at least): today the whole buffers
--  (batch, kv_heads, max_context, head_dim); mask hides what lies past each query.
function M:read(layer, length)
  local fn = FN .. ":read"
  layer_arg(self, fn, layer)
  range_arg(self, fn, 1, positive_integer(fn, "length", length))
  return self.keys[layer], self.values[layer]
end

--- The additive mask (1, 1, T, S) for queries at start .. start + T - 1 against the S keys
--  read returns: 0 where the key's position is at most the query's, -inf elsewhere.
function M:mask(start, count)
  local fn = FN .. ":mask"
  range_arg(self, fn, start, positive_integer(fn, "T", count))
  -- the queries' positions from start on the device, so that a decoding step's kernel is one
  local queries = Tensor.arange(0, count, { dtype = "int32", device = self.device }):reshape(1, 1, count, 1)
    :add(device_start(self, start))
  local keys = self.positions:reshape(1, 1, 1, self.max_context)
  return keys:le(queries):where(0.0, -math.huge)
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
