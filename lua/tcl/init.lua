-- tcl — the Lua module of the tcl tensor compiler.
-- Loads the C core and gathers the public Lua API in one table.
local core = require "tcl.core"
local uop = require "tcl.uop"
local pattern = require "tcl.pattern"
local bounds = require "tcl.bounds"

-- Interval analysis of integer/bool nodes (src/rewrite/bounds.c): u:vmin(), u:vmax(), u:bounds().
core.UOp.vmin = bounds.vmin
core.UOp.vmax = bounds.vmax
core.UOp.bounds = bounds.bounds

local tcl = {
  core = core,
  version = core.version,
  uop = core.uop,
  UOp = uop,
  dtypes = core.dtypes,
  dtype = core.dtype,
  promote = core.promote,
  ops = core.ops,
  groups = core.groups,
  op_in = core.op_in,
  live_nodes = core.live_count,
  pattern = pattern,
  rules = pattern.rules,
  graph_rewrite = pattern.graph_rewrite,
  substitute = pattern.substitute,
}

-- dtype objects as module fields: tcl.float32, tcl.int32, ...
for name, dt in pairs(core.dtypes) do tcl[name] = dt end

-- The Tensor API (lua/api): tcl.Tensor, tcl.realize(t1, t2, ...) for one schedule of several
-- tensors, and tcl.training, which turns dropout on.
tcl.Tensor = require "api.tensor"
tcl.realize = tcl.Tensor.realize_all
tcl.training = false

-- The compile cache (tcl.lower): its figures, its bound in bytes, emptying it. (tcl.lower
-- loads the rule files, which load this module: it is required when first used.)
tcl.kernel_cache = {
  stats = function() return require("tcl.lower").cache_stats() end,
  set_limit = function(bytes) return require("tcl.lower").set_cache_limit(bytes) end,
  clear = function() return require("tcl.lower").clear_cache() end,
}

return tcl
