-- tcl.schedule.assign — in-place assignment: ASSIGN(target, value) stores value into the buffer
-- that already holds target (Tensor.assign; optimizers update parameters this way, so a plan
-- captured by tcl.jit keeps writing the same buffers). Layer: Lua scheduler, used by
-- tcl.schedule.create.
--
-- Two hazards come with writing a buffer that other kernels read:
--   * inside the assigning kernel, a read of the target at an element other than the one
--     being stored (W:assign(W:transpose())) would see elements already overwritten: such a
--     value is first stored in a buffer of its own, and the ASSIGN kernel copies it;
--   * across kernels, every kernel that reads the target's old value (the BUFFER itself) must
--     run before the ASSIGN kernel, and every kernel that reads the assigned value (the
--     ASSIGN node) after it. The kernels are built in topological order of the graph, which
--     orders the second kind but not the first (SGD updates W2 before the kernel that
--     back-propagates through the old W2, say), so the list is reordered: a depth-first
--     topological sort over these edges that keeps the built order wherever it is free.
-- A cycle (a:assign(b) and b:assign(a) in one realize) has no order: an error says so.
--
-- An ASSIGN has a side effect, so it must run once: graphs built while it was pending still
-- hold the node after it ran (p:assign(p + g) reads the pending p; a lazy tensor made from p
-- before the realize). Realized ASSIGN nodes are remembered by their tag with
-- the view of their buffer, and a later schedule reads that buffer instead of running them
-- again; the table is pruned of dead nodes as it grows. Tensor.assign tags every ASSIGN with a
-- fresh number, so assigning the same expression twice (c:assign(c + 1)) is two nodes.
local core = require "tcl.core"
local pattern = require "tcl.pattern"
local M = {}

local VIEW_OPS = { RESHAPE = true, CONTIGUOUS = true, DETACH = true }

-- ASSIGN key (its tag's number; Tensor.assign tags each call) -> { view = the node that views
-- its buffer, ids = the ids of the nodes carrying the key }. A substitution in a schedule
-- rebuilds an ASSIGN whose sources changed (new id, same tag), so the key is the tag.
local realized = {}
local realized_count, prune_at = 0, 1024

local function key_of(node)
  local tag = node.tag
  if type(tag) == "table" and tag[1] == "assign" then return tag[2] end
  return "node " .. node.id
end

--- Remembers that the ASSIGN node `node` ran; `view` reads its buffer in node's shape.
function M.remember(node, view)
  local key = key_of(node)
  local entry = realized[key]
  if not entry then
    entry = { ids = {} }
    realized[key] = entry
    realized_count = realized_count + 1
  end
  entry.view = view
  entry.ids[node.id] = true
  if realized_count >= prune_at then
    local live = core.live_ids("ASSIGN")
    realized_count = 0
    for k, e in pairs(realized) do
      local alive = false
      for id in pairs(e.ids) do if live[id] then alive = true break end end
      if alive then realized_count = realized_count + 1 else realized[k] = nil end
    end
    prune_at = math.max(1024, 2 * realized_count)
  end
end

--- sink with every ASSIGN that already ran replaced by the view of its buffer (order: sink's
-- topological order), or sink itself when there is none.
function M.without_realized(sink, order)
  if realized_count == 0 then return sink end
  local map
  for _, node in ipairs(order) do
    local entry = node.op == "ASSIGN" and realized[key_of(node)]
    if entry then
      entry.ids[node.id] = true
      map = map or {}
      map[node] = entry.view
    end
  end
  if not map then return sink end
  return pattern.substitute(sink, map)
end

-- The views an assignment may store through (Tensor.assign into a slice, an index, a
-- transposed or flipped view); PAD only where the view keeps clear of the padding (a strided
-- slice pads and then cuts the padding away), which tcl.api.views checks.
local MOVING_VIEW_OPS = { PERMUTE = true, SHRINK = true, FLIP = true, PAD = true }

--- The BUFFER node that holds the target of the ASSIGN node `node` (stored_in: node id ->
-- BUFFER node, the realized nodes so far), or an error naming what the target is. Second
-- result: when the target is a view that moves elements (a slice, a transpose...), the node
-- its chain of views starts from (the BUFFER, or an ASSIGN stored in it); nil when the target
-- holds the buffer's elements in order.
function M.target_buffer(node, stored_in)
  local target, moved = node.src[1], false
  while true do
    local buf = stored_in[target.id]
    -- a node stored in this schedule under a moving view is not the target's storage (the
    -- view of a realize point has a buffer of its own); an ASSIGN's is its target's buffer
    if buf and (not moved or target.op == "ASSIGN") then return buf, moved and target or nil end
    if target.op == "BUFFER" then return target, moved and target or nil end
    if MOVING_VIEW_OPS[target.op] then
      moved = true
    elseif not VIEW_OPS[target.op] then
      break
    end
    target = target.src[1]
  end
  error(string.format("realize: assign needs a target that is stored in a buffer, got a %s node "
    .. "(realize the target first)", target.op), 0)
end

--- Whether a kernel that stores into buffer slot 0 also reads slot 0 at another element (or
-- under a condition): then storing in place would overwrite values it still reads.
function M.reads_elsewhere(kernel)
  local store_index
  local indexes = {}
  for _, u in ipairs(kernel.ast:toposort()) do
    if u.op == "INDEX" and u.src[1].op == "PARAM" and u.src[1].arg[1] == 0 then indexes[#indexes + 1] = u end
    if u.op == "STORE" then store_index = u.src[1] end
    if u.op == "LOAD" and #u.src > 1 and u.src[1].src[1].op == "PARAM" and u.src[1].src[1].arg[1] == 0 then
      return true -- a gated read of the target
    end
  end
  for _, index in ipairs(indexes) do
    if index ~= store_index then return true end
  end
  return false
end

--- Whether node is an ASSIGN or a chain of views over one (its value is the assigned one).
local function assigned_value(node)
  while VIEW_OPS[node.op] do node = node.src[1] end
  return node.op == "ASSIGN"
end

--- Reorders kernels (built in topological order; kernel.assigns: the target BUFFER of an
-- ASSIGN kernel) so that the readers of a target's old value run before its ASSIGN kernel and
-- the readers of the new value after. stored_in: node id -> BUFFER node. Returns the list.
function M.order(kernels, stored_in)
  local writer, assigner = {}, {} -- buffer id -> kernel index (plain outputs; ASSIGN targets)
  for i, k in ipairs(kernels) do
    local out = k.buffers[1]
    if k.assigns then
      local id = k.assigns.arg[1]
      if assigner[id] then
        error("realize: one tensor is assigned twice in one realize; realize the first assign before the second", 0)
      end
      assigner[id] = i
    else
      writer[out.arg[1]] = i
    end
  end
  if next(assigner) == nil then return kernels end

  local before = {} -- kernel index -> list of kernel indices that must run before it
  local function edge(from, to)
    if from == to then return end
    local list = before[to]
    if not list then list = {}; before[to] = list end
    list[#list + 1] = from
  end
  for i, k in ipairs(kernels) do
    for _, node in ipairs(k.reads) do
      local buf = node.op == "BUFFER" and node or stored_in[node.id]
      local id = buf and buf.arg[1]
      local a = id and assigner[id]
      if a then
        if assigned_value(node) then edge(a, i) else edge(i, a) end
      elseif id and writer[id] then
        edge(writer[id], i)
      end
    end
  end

  local ordered, state = {}, {} -- state: nil unvisited, 1 on the stack, 2 emitted
  local function visit(i, path)
    if state[i] == 2 then return end
    if state[i] == 1 then
      local names = {}
      for _, j in ipairs(path) do names[#names + 1] = kernels[j].name end
      error("realize: assignments read each other's old values in a cycle (kernels " .. table.concat(names, ", ")
        .. "); realize one of the assigns before the others", 0)
    end
    state[i] = 1
    path[#path + 1] = i
    for _, j in ipairs(before[i] or {}) do visit(j, path) end
    path[#path] = nil
    state[i] = 2
    ordered[#ordered + 1] = kernels[i]
  end
  for i = 1, #kernels do visit(i, {}) end
  return ordered
end

return M
