-- tcl.api.gradients — the derivative engines: reverse mode (compute: gradients of a node with
-- respect to other nodes, by the rules of tcl.patterns.gradient applied at each node from the
-- output back) and forward mode (forward: tangents of nodes pushed from inputs by the rules of
-- tcl.patterns.tangent). Layer: lua/tcl/api (Tensor:backward, Tensor:gradient, tcl.jvp).
--
-- The graph walked is the lazy graph of the output, with two additions:
--   * a BUFFER that a realize made from a lazy graph that needed gradients (loss:item() before
--     loss:backward(), an intermediate realized on purpose) leads on to that graph: realize
--     records the origin (remember_origin), and the gradient passes through unchanged. The
--     forward values the gradient needs are recomputed from it;
--   * a node marked as the result of a composite function (mark) takes the function's
--     derivative from the rule file's `composites`, and nothing inside it is differentiated.
-- Only nodes on a path from the output to a target get gradients, and only float ones.
-- Nodes are hash-consed, so a target is a node: leaves are made unique (a BUFFER of their own,
-- or a tagged CONTIGUOUS; see tcl.api.autograd).
local core = require "tcl.core"
local shape = require "tcl.shape"
local class = require "tcl.api.class"
local nodes = require "tcl.api.nodes"

local M = {}

local rule_file -- tcl.patterns.gradient, loaded on first use (and its matcher compiled once)
local tangent_file -- tcl.patterns.tangent, likewise

-- origins: BUFFER node id -> the lazy node it was realized from; composites: node id -> the
-- composite function that produced it. Keyed by id (ids are never reused) and pruned of dead
-- nodes as they grow.
local origins, origin_count, origin_prune_at = {}, 0, 1024
local composites, composite_count, composite_prune_at = {}, 0, 1024

local function pruned(map, op_of)
  local live_by_op, kept = {}, 0
  for id, entry in pairs(map) do
    local op = op_of(entry)
    local live = live_by_op[op]
    if not live then live = core.live_ids(op); live_by_op[op] = live end
    if live[id] then kept = kept + 1 else map[id] = nil end
  end
  return kept, math.max(1024, 2 * kept)
end

--- Records that BUFFER node `buffer` holds the realized value of the lazy node `lazy`.
function M.remember_origin(buffer, lazy)
  if buffer == lazy or origins[buffer.id] then return end
  origins[buffer.id] = lazy
  origin_count = origin_count + 1
  if origin_count >= origin_prune_at then
    origin_count, origin_prune_at = pruned(origins, function() return "BUFFER" end)
  end
end

--- Marks tensor `result` as composite function `name` of the tensors `inputs` (extra: its
-- numeric arguments), when any input needs gradients: its derivative is the rule file's.
-- elementwise: the function applies to each element alone (exp, sigmoid, ...), so its rule
-- holds for inputs of any shape (tcl.vmap carries such marks over to the batched graph).
function M.mark(result, name, inputs, extra, elementwise)
  local any = false
  for _, t in ipairs(inputs) do if rawget(t, "_needs_grad") then any = true end end
  if not any then return result end
  local list = {}
  for i, t in ipairs(inputs) do list[i] = t.uop end
  local node = result.uop
  if not composites[node.id] then composite_count = composite_count + 1 end
  composites[node.id] = { name = name, op = node.op, inputs = list, extra = extra or {}, elementwise = elementwise }
  if composite_count >= composite_prune_at then
    composite_count, composite_prune_at = pruned(composites, function(e) return e.op end)
  end
  return result
end

--- The lazy node a realized BUFFER node was computed from (remember_origin), or nil.
function M.origin_of(node) return origins[node.id] end

--- The composite function that produced node (mark): { name =, inputs = {nodes}, extra = },
-- or nil.
function M.composite_of(node) return composites[node.id] end

local function rules()
  if not rule_file then rule_file = require "tcl.patterns.gradient" end
  return rule_file
end

-- The sources the walk follows, and how the gradient gets to them: a BUFFER with an origin
-- leads to it ("origin"), a composite's result to the function's inputs ("composite").
local function sources_of(node, targets)
  if node.op == "BUFFER" and not targets[node] then
    local origin = origins[node.id]
    if origin then return { origin }, "origin" end
  end
  local composite = composites[node.id]
  if composite then return composite.inputs, "composite" end
  return node.src, nil
end

-- Nodes reachable from root in topological order (sources first), with their sources.
local function walk(root, targets)
  local order, srcs_of, kind_of, state = {}, {}, {}, {}
  local stack = { root }
  while #stack > 0 do
    local node = stack[#stack]
    local s = state[node]
    if s == nil then
      state[node] = 1
      local srcs, kind = sources_of(node, targets)
      srcs_of[node], kind_of[node] = srcs, kind
      for i = #srcs, 1, -1 do
        if state[srcs[i]] == nil then stack[#stack + 1] = srcs[i] end
      end
    else
      stack[#stack] = nil
      if s == 1 then
        state[node] = 2
        order[#order + 1] = node
      end
    end
  end
  return order, srcs_of, kind_of
end

-- The device each node of `order` (sources first) is computed on: a device copy's target, a
-- buffer's device, else that of its first source that has one. A gradient lives on its node's
-- device, so a graph that spans devices (sharded tensors, tcl.api.sharding) differentiates with
-- every tensor labelled where it is (a copy's rule copies its gradient back by that label).
local function node_devices(order, srcs_of)
  local devices = {}
  for _, node in ipairs(order) do
    local d
    if node.op == "COPY" and type(node.arg) == "string" then d = node.arg
    elseif node.op == "BUFFER" then d = node.arg[3]
    else
      for _, s in ipairs(srcs_of[node]) do
        if devices[s] then d = devices[s] break end
      end
    end
    devices[node] = d
  end
  return devices
end

local Context = {}
Context.__index = Context

function Context:input(i)
  local node = self.node.src[i]
  return class.wrap(node, shape.of(node), self.devices[node] or self.device)
end

-- What a rule returns to the rewrite engine: any node but the matched one counts as a match
-- (the gradients themselves are in the context).
local MATCHED

function Context:grads(...)
  self.result = table.pack(...)
  MATCHED = MATCHED or core.uop("NOOP", nil, {})
  return MATCHED
end

--- The gradients of `root` (a node) seeded with `seed` (a Tensor of root's shape) with respect
-- to each node of `targets` (a list): a list of Tensors, nil where a target is not reached.
-- device: the tensors' device.
function M.compute(root, seed, targets, device)
  local target_set = {}
  for _, t in ipairs(targets) do target_set[t] = true end
  local order, srcs_of, kind_of = walk(root, target_set)

  -- which nodes lie on a path to a target (sources first, so one pass)
  local on_path = {}
  for _, node in ipairs(order) do
    local hit = target_set[node] or false
    if not hit then
      for _, s in ipairs(srcs_of[node]) do
        if on_path[s] then hit = true break end
      end
    end
    on_path[node] = hit
  end

  local file = rules()
  local devices = node_devices(order, srcs_of)
  local grads = { [root] = seed }
  local function add(node, g)
    if g == nil or not on_path[node] or not node.dtype.is_float then return end
    local have = grads[node]
    grads[node] = have and have:add(g) or g
  end
  for i = #order, 1, -1 do
    local node = order[i]
    local g = grads[node]
    local srcs = srcs_of[node]
    if g and #srcs > 0 then
      local through = false
      for _, s in ipairs(srcs) do if on_path[s] then through = true break end end
      if through then
        local kind = kind_of[node]
        local here = devices[node] or device
        local out = class.wrap(node, shape.of(node), here)
        if kind == "origin" then
          -- a realized BUFFER holds its origin's values (flat)
          add(srcs[1], nodes.reshape(g, shape.of(srcs[1])))
        elseif kind == "composite" then
          local composite = composites[node.id]
          local inputs = {}
          for k, n in ipairs(composite.inputs) do inputs[k] = class.wrap(n, shape.of(n), devices[n] or here) end
          local derivative = file.composites[composite.name]
          if not derivative then
            error(string.format("gradient: no derivative for the composite function '%s' in tcl.patterns.gradient",
              composite.name), 0)
          end
          local list = derivative({ inputs = inputs, out = out, grad = g, extra = composite.extra, graph = nodes })
          for k, n in ipairs(composite.inputs) do add(n, list[k]) end
        else
          local c = setmetatable({ node = node, grad = g, out = out, device = here, devices = devices, graph = nodes },
            Context)
          if file.rules:apply_once(node, c) == nil then
            error(string.format("gradient: no rule for %s in tcl.patterns.gradient", node.op), 0)
          end
          local list = c.result
          for k, s in ipairs(srcs) do add(s, list[k]) end
        end
      end
    end
  end
  local out = {}
  for i, t in ipairs(targets) do out[i] = grads[t] end
  return out
end

local Forward = {}
Forward.__index = Forward

function Forward:input(i)
  local node = self.node.src[i]
  return class.wrap(node, shape.of(node), self.devices[node] or self.device)
end

function Forward:tangent(i) return self.tangents[self.node.src[i]] end

function Forward:tangent_out(t)
  self.result = t
  MATCHED = MATCHED or core.uop("NOOP", nil, {})
  return MATCHED
end

--- Forward mode: the tangents of `outputs` (a list of nodes) given the tangents of some of the
-- nodes they are computed from (`seeds`: node -> Tensor of its shape). Returns a list with a
-- Tensor per output, nil where the output does not depend on a seeded node.
function M.forward(outputs, seeds, device)
  if not tangent_file then tangent_file = require "tcl.patterns.tangent" end
  local file = tangent_file
  local root = core.uop("SINK", nil, outputs)
  local order, srcs_of, kind_of = walk(root, seeds)
  -- each tangent lives on its node's device, as gradients do (node_devices)
  local devices = node_devices(order, srcs_of)
  local tangents = {}
  for node, t in pairs(seeds) do tangents[node] = t end
  for _, node in ipairs(order) do
    if node ~= root and tangents[node] == nil then
      local srcs, kind = srcs_of[node], kind_of[node]
      local any = false
      for _, s in ipairs(srcs) do if tangents[s] then any = true break end end
      if any and node.dtype.is_float then
        local here = devices[node] or device
        if kind == "origin" then
          tangents[node] = nodes.reshape(tangents[srcs[1]], shape.of(node))
        elseif kind == "composite" then
          local composite = composites[node.id]
          local inputs, ts = {}, {}
          for k, n in ipairs(composite.inputs) do
            inputs[k] = class.wrap(n, shape.of(n), devices[n] or here)
            ts[k] = tangents[n] or inputs[k]:mul(0)
          end
          local derivative = file.composites[composite.name]
          if not derivative then
            error(string.format("jvp: no forward derivative for the composite function '%s' in tcl.patterns.tangent",
              composite.name), 0)
          end
          tangents[node] = derivative({ inputs = inputs, tangents = ts, extra = composite.extra, graph = nodes,
            out = class.wrap(node, shape.of(node), here) })
        else
          local c = setmetatable({ node = node, tangents = tangents, device = here, devices = devices, graph = nodes,
            out = class.wrap(node, shape.of(node), here) }, Forward)
          if file.rules:apply_once(node, c) == nil then
            error(string.format("jvp: no rule for %s in tcl.patterns.tangent", node.op), 0)
          end
          tangents[node] = c.result
        end
      end
    end
  end
  local out = {}
  for i, node in ipairs(outputs) do out[i] = tangents[node] end
  return out
end

return M
