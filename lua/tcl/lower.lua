-- tcl.lower — from a scheduled kernel AST to a program that runs (DESIGN.md, data flow
-- steps 3-5): the pass pipeline (patterns/pipeline.lua), the linearizer (tcl.linearize),
-- and a device program (tcl.runtime; EMU, the only device for now).
--
--   local lower = require "tcl.lower"
--   local k = lower.compile(kernel_sink, { name = "E_16" })
--   local seconds = k:run { out_buf, a_buf, b_buf }   -- buffers in PARAM slot order
--   k.program, k.ast, k.name
--
-- What the kernel must look like: patterns/lowering.lua's header.
-- Compiles are memoized by the AST's content hash (plus NOOPT and the optimizer hook that
-- is installed), so identical kernels share one program. The cache is bounded by bytes (the
-- program's memory plus its AST's nodes, estimated), least recently used out: 64 MiB unless
-- TCL_KERNEL_CACHE_MB says otherwise, lower.set_cache_limit(bytes) at run time.
-- lower.cache_size() counts the entries, lower.cache_stats() gives entries, bytes, limit,
-- hits, misses and evictions, lower.clear_cache() empties it. A cached kernel keeps the name
-- of its first compile.
-- DEBUG (environment): >= 2 one line per kernel run (name, time), >= 4 the program listing,
-- >= 5 the kernel AST, >= 6 the linear list; the last three once per compile. Lines go to
-- lower.log (stderr unless replaced).
local runtime = require "tcl.runtime"
local pipeline = require "patterns.pipeline"
local linearize = require "tcl.linearize"

local core = require "tcl.core"

local M = {}

local function env_level(name)
  return math.tointeger(tonumber(os.getenv(name) or "")) or 0
end

---------------------------------------------------------------------------------------------
-- The compile cache: a map from key to entry plus a doubly linked list of the entries, most
-- recently used first, so a hit and an eviction cost O(1).

-- Heap bytes of one AST node with its cached walks, about (tcl_uop, slot, toposort entry).
local AST_NODE_BYTES = 128
local DEFAULT_LIMIT_MB = 64

local function limit_from_env()
  local mb = tonumber(os.getenv("TCL_KERNEL_CACHE_MB") or "")
  if mb == nil or mb < 0 then return DEFAULT_LIMIT_MB * (1 << 20) end
  return math.floor(mb * (1 << 20))
end

local cache = {
  entries = {}, count = 0, bytes = 0, limit = limit_from_env(),
  hits = 0, misses = 0, evictions = 0,
  newest = nil, oldest = nil, -- list ends; entries link through .newer / .older
}

local function unlink(e)
  if e.newer then e.newer.older = e.older else cache.newest = e.older end
  if e.older then e.older.newer = e.newer else cache.oldest = e.newer end
  e.newer, e.older = nil, nil
end

local function push_newest(e)
  e.older, e.newer = cache.newest, nil
  if cache.newest then cache.newest.newer = e else cache.oldest = e end
  cache.newest = e
end

local function evict_to(limit)
  while cache.bytes > limit and cache.oldest do
    local e = cache.oldest
    unlink(e)
    cache.entries[e.key] = nil
    cache.count = cache.count - 1
    cache.bytes = cache.bytes - e.bytes
    cache.evictions = cache.evictions + 1
  end
end

local function cache_get(key)
  local e = cache.entries[key]
  if not e then
    cache.misses = cache.misses + 1
    return nil
  end
  cache.hits = cache.hits + 1
  if cache.newest ~= e then
    unlink(e)
    push_newest(e)
  end
  return e.kernel
end

local function cache_put(key, kernel)
  local bytes = kernel.program.bytes + AST_NODE_BYTES * core.graph_size(kernel.ast)
  local e = { key = key, kernel = kernel, bytes = bytes }
  cache.entries[key] = e
  cache.count = cache.count + 1
  cache.bytes = cache.bytes + bytes
  push_newest(e)
  evict_to(cache.limit) -- the new entry is evicted last, so one over the limit still runs
end

local function env_flag(name)
  local v = os.getenv(name)
  return v ~= nil and v ~= "" and v ~= "0"
end

--- Where DEBUG lines go (replaceable, e.g. by specs).
function M.log(line)
  io.stderr:write(line, "\n")
end

local Kernel = {}
Kernel.__index = Kernel

--- Runs the kernel on buffers (a list in PARAM slot order); returns the elapsed seconds.
function Kernel:run(buffers)
  local seconds = self.program:run(buffers)
  if env_level("DEBUG") >= 2 then
    M.log(string.format("*** %-4s %-32s arg %3d  tm %12.2fus", self.device, self.name, #buffers, seconds * 1e6))
  end
  return seconds
end

function Kernel:__tostring()
  return string.format("Kernel(%s, %d instructions)", self.name, self.program.size)
end

local function kernel_name(sink, opts)
  if opts.name then return tostring(opts.name) end
  local arg = sink.arg
  if type(arg) == "table" and type(arg[1]) == "string" then return arg[1] end
  if type(arg) == "string" then return arg end
  return "kernel"
end

--- Lowers, linearizes and builds the program of a kernel AST (a SINK); memoized.
function M.compile(sink, opts)
  opts = opts or {}
  if type(sink) ~= "userdata" or sink.op ~= "SINK" then
    error("lower.compile: expected a kernel SINK, got " .. (type(sink) == "userdata" and sink.op or type(sink)), 2)
  end
  local noopt = env_flag("NOOPT")
  local hook = pipeline.opts.apply
  local key = sink.content_hash .. (noopt and "|noopt" or (hook and "|" .. tostring(hook) or ""))
  local hit = cache_get(key)
  if hit then return hit end

  local name = kernel_name(sink, opts)
  local debug = env_level("DEBUG")
  if debug >= 5 then M.log(string.format("kernel '%s' AST:\n%s", name, tostring(sink))) end
  local lowered = pipeline.run(sink, { name = name, noopt = noopt })
  local ok, list = pcall(linearize.linearize, lowered)
  if not ok then error(string.format("kernel '%s': %s", name, tostring(list)), 0) end
  if debug >= 6 then M.log(string.format("kernel '%s' linear:\n%s", name, linearize.format(list))) end
  local program = runtime.program(list, { name = name })
  if debug >= 4 then M.log(program:dump()) end

  local k = setmetatable({ name = name, device = "EMU", ast = sink, program = program }, Kernel)
  cache_put(key, k)
  return k
end

--- Number of compiled kernels held by the cache.
function M.cache_size() return cache.count end

--- { entries =, bytes =, limit =, hits =, misses =, evictions = } of the compile cache.
function M.cache_stats()
  return { entries = cache.count, bytes = cache.bytes, limit = cache.limit, hits = cache.hits,
    misses = cache.misses, evictions = cache.evictions }
end

--- Bounds the compile cache to `bytes` (0 keeps nothing but the kernel being run); evicts
-- the least recently used kernels now if it holds more. Returns the previous limit.
function M.set_cache_limit(bytes)
  if math.type(bytes) ~= "integer" or bytes < 0 then
    error("set_cache_limit: expected a non-negative integer number of bytes, got " .. tostring(bytes), 2)
  end
  local previous = cache.limit
  cache.limit = bytes
  evict_to(bytes)
  return previous
end

--- Forgets every compiled kernel (the counters stay).
function M.clear_cache()
  cache.entries, cache.count, cache.bytes, cache.newest, cache.oldest = {}, 0, 0, nil, nil
end

return M
