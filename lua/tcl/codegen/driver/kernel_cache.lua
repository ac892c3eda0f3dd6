-- tcl.codegen.driver.kernel_cache — compiled kernels kept by key, bounded by bytes, least recently
-- used out. Layer: codegen (the lowering driver, tcl.codegen.driver.lower, keys it by the kernel
-- AST's content hash and the optimization settings).
--
-- An entry's bytes are what keeping it costs the process: the program's memory (its code in
-- the JIT, the object code tcl.export reads, its tables: program.bytes), its AST's nodes, and
-- a fixed share for the entry's Lua tables and the allocator, measured (ENTRY_BYTES), so
-- that the bound is the memory the cache makes the process hold. The bound is
-- TCL_KERNEL_CACHE_MB (tcl.env, default 64 MiB) or set_limit(bytes) at run time; tcl exposes
-- stats/set_limit/clear as tcl.kernel_cache. A map from key to entry plus a doubly linked list
-- of the entries, most recently used first, makes a hit and an eviction cost O(1).
local core = require "tcl.core"
local env = require "tcl.env"

local M = {}

-- Heap bytes of one AST node with its cached walks, about (tcl_uop, slot, toposort entry).
local AST_NODE_BYTES = 128
-- The rest of an entry: the Kernel, Program and entry tables with their strings and the
-- params tables (about 1.4 KiB of Lua heap for a kernel of two buffers), and what the
-- allocators hold beyond the live bytes: bench/kernel_cache_bench.lua measures the RSS per
-- entry of many tiny CPU kernels, and this makes the accounted bytes match it.
local ENTRY_BYTES = 4096

local cache = {
  entries = {}, count = 0, bytes = 0, limit = env.KERNEL_CACHE_BYTES,
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

--- The kernel kept under key (now the most recently used), or nil.
function M.get(key)
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

--- Keeps kernel ({ program =, ast = , ... }) under key; evicts the least recently used ones
-- past the bound (the new entry last, so one over the bound still runs).
function M.put(key, kernel)
  local bytes = kernel.program.bytes + AST_NODE_BYTES * core.graph_size(kernel.ast) + ENTRY_BYTES
  local e = { key = key, kernel = kernel, bytes = bytes }
  cache.entries[key] = e
  cache.count = cache.count + 1
  cache.bytes = cache.bytes + bytes
  push_newest(e)
  evict_to(cache.limit)
end

--- Number of compiled kernels held.
function M.size() return cache.count end

--- { entries =, bytes =, limit =, hits =, misses =, evictions = }
function M.stats()
  return { entries = cache.count, bytes = cache.bytes, limit = cache.limit, hits = cache.hits,
    misses = cache.misses, evictions = cache.evictions }
end

--- Bounds the cache to `bytes` (0 keeps nothing but the kernel being run); evicts the least
-- recently used kernels now if it holds more. Returns the previous bound.
function M.set_limit(bytes)
  if math.type(bytes) ~= "integer" or bytes < 0 then
    error("set_limit: expected a non-negative integer number of bytes, got " .. tostring(bytes), 2)
  end
  local previous = cache.limit
  cache.limit = bytes
  evict_to(bytes)
  return previous
end

--- Forgets every compiled kernel (the counters stay).
function M.clear()
  cache.entries, cache.count, cache.bytes, cache.newest, cache.oldest = {}, 0, 0, nil, nil
end

return M
