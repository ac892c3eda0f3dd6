-- patterns/pipeline.lua — the ordered passes that lower one kernel (DESIGN.md, data flow
-- step 3). This table is the one truth for pass order: tcl.lower runs it top to bottom,
-- then linearizes (tcl.linearize) and builds the device program.
--
-- Each entry is { name = "...", rules = <tcl.pattern rule set> } (one graph_rewrite of the
-- kernel with those rules, ctx handed to the rewrites) or { name = "...", fn = function(sink,
-- ctx) -> sink }. ctx is per kernel: { name = kernel name, noopt = NOOPT is set }.
--
-- The optimization slot. The pass "optimize" calls M.opts.apply(kernel_sink, ctx) when a
-- later optimizer has installed one (heuristics or BEAM: they return the kernel with its
-- ranges split, upcast, ...; nil means unchanged), and nothing when NOOPT is set. Here none
-- is installed, so it changes nothing. tcl.lower keys its compile cache on NOOPT and on the
-- installed hook, so installing one does not return stale programs.
local symbolic = require "patterns.symbolic"
local lowering = require "patterns.lowering"

local M = {}

--- Kernel optimizations: `apply(kernel_sink, ctx) -> kernel_sink | nil`, or nil for none.
M.opts = { apply = nil }

local function optimize(sink, ctx)
  local apply = M.opts.apply
  if ctx.noopt or apply == nil then return sink end
  return apply(sink, ctx) or sink
end

M.passes = {
  -- loads before anything else: symbolic may turn WHERE(g, x, false) into g & x, which
  -- would lose the gate that keeps a padded read in bounds
  { name = "add loads", rules = lowering.empty + lowering.early },
  { name = "initial symbolic", rules = symbolic.symbolic },
  { name = "optimize", fn = optimize },
  { name = "lower reduces", fn = lowering.lower_reduces },
  { name = "merge ends", fn = lowering.merge_ends },
}

local function params_of(sink)
  local out = {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "PARAM" then out[#out + 1] = u end
  end
  return out
end

--- Runs every pass on sink in order; errors name the kernel and the pass. The kernel keeps
-- its arguments: a PARAM that passes made unused (a loop of size 0 removed, a read folded
-- away) stays as a source of the SINK, so the program takes the buffers the scheduler gives.
function M.run(sink, ctx)
  ctx = ctx or {}
  local params = params_of(sink)
  for _, pass in ipairs(M.passes) do
    local ok, result
    if pass.rules then
      ok, result = pcall(pass.rules.rewrite, pass.rules, sink, { ctx = ctx, name = pass.name })
    else
      ok, result = pcall(pass.fn, sink, ctx)
    end
    if not ok or result == nil then
      error(string.format("kernel '%s': pass '%s'%s", tostring(ctx.name or "kernel"), pass.name,
        ok and " returned nothing" or ": " .. tostring(result)), 0)
    end
    sink = result
  end
  local present, src = {}, nil
  for _, p in ipairs(params_of(sink)) do present[p] = true end
  for _, p in ipairs(params) do
    if not present[p] then
      src = src or sink.src
      src[#src + 1] = p
    end
  end
  if src then sink = sink:replace { src = src } end
  return sink
end

return M
