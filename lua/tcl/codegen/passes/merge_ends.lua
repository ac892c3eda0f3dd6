-- tcl.codegen.passes.merge_ends — the pass "merge ends": one END per RANGE. Layer: codegen (a
-- hand-written pass of the pipeline, lua/tcl/patterns/pipeline.lua; why not rules: below).
--
-- Several ENDs of one RANGE become one END(deps..., RANGE) when their loops can be one: they
-- use the same outer ranges and neither depends on the other. Otherwise the later END's loop
-- gets a copy of the range (a fresh axis id) and stays a loop of its own. The linearizer
-- needs exactly one END per RANGE: that END is where it learns how loops nest.
--
-- Not rules: whether two ENDs of a range can be one depends on all of the range's ENDs at once
-- (the outer loops each uses, and which depends on which: linearize.analyze), and a merged
-- END's sources are the original ENDs' sources, which a children-first rewrite would already
-- have changed (an END of another range inside them). It runs in rounds of substitutions
-- until every RANGE has one END.
local UOp = require "tcl.uop"
local P = require "tcl.pattern"
local core = require "tcl.core"
local linearize = require "tcl.codegen.driver.linearize"

local M = {}

local new = UOp.new
local VOID = core.dtype "void"

--- One round: merges the ENDs that can be merged, or nil when every RANGE has one END.
local function merge_ends_once(sink)
  local g = linearize.analyze(sink)
  local multi_end = {} -- the ranges closed by more than one END
  for _, r in ipairs(g.ranges) do
    if g.ends[r] and #g.ends[r] > 1 then multi_end[#multi_end + 1] = r end
  end
  if #multi_end == 0 then return nil end

  local next_axis = sink:free_axis_id()
  local function key(set) return table.concat(set, ",") end
  -- the nodes an END depends on, as a set, built once per END (an upcast kernel has hundreds)
  local reach_of = {}
  local function depends(a, b) -- a uses b
    local reach = reach_of[a]
    if not reach then
      reach = {}
      for _, u in ipairs(a:toposort()) do reach[u] = true end
      reach_of[a] = reach
    end
    return reach[b] == true
  end

  -- g.ends[r] is in toposort order, so an END can depend only on the ones before it

  local map = {}
  for _, r in ipairs(multi_end) do
    local groups = {}
    for _, e in ipairs(g.ends[r]) do
      local k, joined = key(g.uses[e]), nil
      for _, grp in ipairs(groups) do
        if grp.key == k then
          local free = true
          for _, other in ipairs(grp.ends) do
            if depends(e, other) then free = false break end
          end
          if free then joined = grp break end
        end
      end
      if joined then
        joined.ends[#joined.ends + 1] = e
        joined.member[e] = true
      else
        groups[#groups + 1] = { key = k, ends = { e }, member = { [e] = true } }
      end
    end
    for gi, grp in ipairs(groups) do
      local range, rename = r, nil
      if gi > 1 then
        local arg = r.arg
        local new_arg = { next_axis }
        if type(arg) == "table" then for i = 2, #arg do new_arg[i] = arg[i] end end
        next_axis = next_axis + 1
        range = new("RANGE", r.dtype, r.src, new_arg, r.tag)
        -- r becomes the copy in this group's bodies, but not inside the other loops of r
        -- that they depend on (mapping those ENDs to themselves stops the substitution)
        rename = { [r] = range }
        for _, other in ipairs(g.ends[r]) do
          if not grp.member[other] then rename[other] = other end
        end
      end
      local deps, seen = {}, {}
      for _, e in ipairs(grp.ends) do
        local s = g.src[e]
        for i = 1, #s - 1 do
          local d = s[i]
          if rename then d = P.substitute(d, rename) end
          if not seen[d] then seen[d] = true deps[#deps + 1] = d end
        end
      end
      deps[#deps + 1] = range
      local merged = new("END", VOID, deps)
      for _, e in ipairs(grp.ends) do map[e] = merged end
    end
  end
  return P.substitute(sink, map)
end

--- The sink with one END per RANGE.
function M.run(sink)
  -- substitute does not look inside a replacement, so ENDs nested in merged ones are
  -- merged by the next round; each round merges at least the outermost
  for _ = 1, 1000 do
    local merged = merge_ends_once(sink)
    if not merged then return sink end
    sink = merged
  end
  error("merge ends: does not settle", 0)
end

return M
