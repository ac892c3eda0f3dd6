-- tcl.schedule.realize_points — the fusion policy: which nodes of a tensor graph are stored
-- in a buffer by a kernel of their own. Layer: Lua scheduler (tcl.schedule plans the kernels).
--
-- Realize points:
--   * the requested outputs and every CONTIGUOUS;
--   * a REDUCE_AXIS whose result is broadcast (reached from a growing EXPAND through fused
--     nodes): fused, it would be recomputed for every broadcast element;
--   * a REDUCE_AXIS inside another reduction (reached from a REDUCE_AXIS's source through
--     fused nodes): fused, it would be recomputed on every step of the outer loop;
--   * a REDUCE_AXIS that several kernels need: reductions are computed once.
-- Everything else (elementwise and movement ops) is fused into each kernel that uses it,
-- recomputed there.
--
-- These facts flow from consumers to sources, so one pass over the graph in reverse
-- topological order decides them: when a node is reached, all its consumers are decided.
local shape = require "tcl.shape"

local M = {}

local function grows(expand, in_shape)
  local new = expand.arg
  for i = 1, #new do if new[i] ~= in_shape[i] then return true end end
  return false
end

local MANY = {} -- "reached from more than one kernel" (a root id otherwise)

--- The set of the realize points' node ids, for the graph of `outputs` in topological
-- `order` (which ends with their SINK, `sink`).
function M.decide(order, sink, outputs)
  local realize = {}
  for _, out in ipairs(outputs) do realize[out.id] = true end
  for _, node in ipairs(order) do
    if node.op == "CONTIGUOUS" then realize[node.id] = true end
  end
  -- Consumers of each node (each consumer once, however many of its sources the node is).
  -- Lists grow in node order, so a repeated source of node already ends with node.
  local consumers = {}
  for _, node in ipairs(order) do
    for _, s in ipairs(node.src) do
      local list = consumers[s.id]
      if not list then list = {}; consumers[s.id] = list end
      if list[#list] ~= node then list[#list + 1] = node end
    end
  end
  -- Reverse topological order: per node, the kernel that computes it (root), whether it is
  -- broadcast in that kernel (expanded) and whether it is inside a reduction (in_reduce).
  local root_of, expanded, in_reduce, none = {}, {}, {}, {}
  for i = #order, 1, -1 do
    local node = order[i]
    if node ~= sink then
      local id = node.id
      local root, exp, red = nil, false, false
      for _, c in ipairs(consumers[id] or none) do
        if c ~= sink then
          local cid = c.id
          local c_root, c_exp, c_red
          if realize[cid] then
            c_root, c_exp, c_red = cid, false, false
          else
            c_root, c_exp, c_red = root_of[cid], expanded[cid], in_reduce[cid]
          end
          if c.op == "EXPAND" and grows(c, shape.shared(node)) then c_exp = true end
          if c.op == "REDUCE_AXIS" then c_red = true end
          if root == nil then root = c_root elseif root ~= c_root then root = MANY end
          exp, red = exp or c_exp, red or c_red
        end
      end
      if node.op == "REDUCE_AXIS" and (exp or red or root == MANY) then realize[id] = true end
      root_of[id], expanded[id], in_reduce[id] = root, exp, red
    end
  end
  return realize
end

return M
