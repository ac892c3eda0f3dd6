-- tcl.codegen.driver.linearize — orders a lowered kernel's nodes into a linear program
-- (docs/design/pipeline.md): each node after its sources, a RANGE before everything inside
-- its loop and its END after, every node in the innermost loop it needs and hoisted out of the loops it
-- does not depend on. The result is deterministic: it depends only on the graph.
--
--   local linearize = require "tcl.codegen.driver.linearize"
--   local list = linearize.linearize(sink)      -- list of nodes, ready for runtime.program
--   print(linearize.format(list))               -- one line per node (DEBUG=6)
--
-- How loops are found. A node "uses" the RANGEs it depends on through its sources, minus
-- those closed on the way: END(..., r) closes r, and so does REDUCE(x, r...) (kernels reach
-- the linearizer without REDUCEs; the rule helps passes that ask before lowering). The loop
-- of a range r sits inside the loops of the ranges its END still uses (the END's own uses):
-- that is the only nesting information a kernel carries, so every RANGE needs one END
-- (passes merge several ENDs of one range into one, see lua/tcl/patterns/lowering.lua). A node is
-- placed inside the loops it uses and all loops around those; the ranges of one node must
-- nest in a chain, else the kernel is rejected with the node and ranges named.
--
-- Order inside a loop body (or at top level): its items are single nodes and whole inner
-- loops; item B comes after item A when something in B uses something in A; among ready
-- items the one holding the node earliest in the graph's toposort goes first.
local format_arg = require("tcl.uop").format_arg

local M = {}

local EMPTY = {}

-- Sets of ranges are sorted arrays of range numbers (1-based positions of the RANGEs in
-- the toposort); they are shared, never modified once built.
local function union(a, b)
  if a == b or #b == 0 then return a end
  if #a == 0 then return b end
  local out, i, j, na, nb = {}, 1, 1, #a, #b
  while i <= na or j <= nb do
    local x, y = a[i], b[j]
    if y == nil or (x ~= nil and x < y) then
      out[#out + 1] = x
      i = i + 1
    elseif x == nil or y < x then
      out[#out + 1] = y
      j = j + 1
    else
      out[#out + 1] = x
      i, j = i + 1, j + 1
    end
  end
  return out
end

local function without(a, x)
  local out, found = {}, false
  for _, v in ipairs(a) do
    if v == x then found = true else out[#out + 1] = v end
  end
  return found and out or a
end

local function describe_range(r)
  local arg = r.arg
  if type(arg) == "table" and arg[1] ~= nil then
    return string.format("RANGE axis %s%s", tostring(arg[1]), arg[2] and (" (" .. tostring(arg[2]) .. ")") or "")
  end
  return "RANGE"
end
M.describe_range = describe_range

--- Facts about the graph under root: topo (the toposort), pos (node -> position), src
-- (node -> sources), ranges (list of RANGE nodes in toposort order), rid (RANGE -> its
-- number), uses (node -> sorted array of the numbers of the ranges it uses), ends (RANGE
-- -> list of its END nodes, in toposort order).
function M.analyze(root)
  local topo = root:toposort()
  local pos, src, ranges, rid, uses, ends = {}, {}, {}, {}, {}, {}
  for i, u in ipairs(topo) do
    pos[u] = i
    src[u] = u.src
    if u.op == "RANGE" then
      ranges[#ranges + 1] = u
      rid[u] = #ranges
    end
  end
  for _, u in ipairs(topo) do
    local s = EMPTY
    local srcs = src[u]
    for _, x in ipairs(srcs) do s = union(s, uses[x]) end
    local op = u.op
    if op == "RANGE" then
      s = union(s, { rid[u] })
    elseif op == "END" then
      local r = srcs[#srcs]
      if r == nil or r.op ~= "RANGE" then
        error(string.format("linearize: END (node %d) must have the RANGE it closes as its last source", pos[u]), 0)
      end
      s = without(s, rid[r])
      local list = ends[r]
      if not list then list = {}; ends[r] = list end
      list[#list + 1] = u
    elseif op == "REDUCE" then
      for k = 2, #srcs do
        if rid[srcs[k]] then s = without(s, rid[srcs[k]]) end
      end
    end
    uses[u] = s
  end
  return { topo = topo, pos = pos, src = src, ranges = ranges, rid = rid, uses = uses, ends = ends }
end

--- The RANGE nodes node uses (open at node), in toposort order.
function M.ranges_used(node)
  local g = M.analyze(node)
  local out = {}
  for i, k in ipairs(g.uses[node]) do out[i] = g.ranges[k] end
  return out
end

-- A binary min-heap of items keyed by item.first.
local function heap_push(h, it)
  h[#h + 1] = it
  local i = #h
  while i > 1 do
    local p = i // 2
    if h[p].first <= it.first then break end
    h[i], h[p] = h[p], it
    i = p
  end
end

local function heap_pop(h)
  local top, last = h[1], table.remove(h)
  local n = #h
  if n > 0 then
    local i = 1
    while true do
      local c = 2 * i
      if c > n then break end
      if c + 1 <= n and h[c + 1].first < h[c].first then c = c + 1 end
      if h[c].first >= last.first then break end
      h[i] = h[c]
      i = c
    end
    h[i] = last
  end
  return top
end

--- The nodes of the lowered kernel under sink in execution order (see the header).
function M.linearize(sink)
  local g = M.analyze(sink)
  local topo, pos, src, ranges, rid, uses = g.topo, g.pos, g.src, g.ranges, g.rid, g.uses

  local end_of = {}
  for _, r in ipairs(ranges) do
    local list = g.ends[r]
    if not list then
      error(string.format("linearize: %s (node %d) has no END: every loop must be closed", describe_range(r),
        pos[r]), 0)
    end
    if #list > 1 then
      error(string.format("linearize: %s (node %d) is closed by %d ENDs (nodes %d and %d); merge them first",
        describe_range(r), pos[r], #list, pos[list[1]], pos[list[2]]), 0)
    end
    end_of[r] = list[1]
  end

  -- outer[k]: every range whose loop encloses range k's loop (closed under nesting)
  local outer, visiting = {}, {}
  local function outer_of(k)
    local o = outer[k]
    if o then return o end
    if visiting[k] then
      error(string.format("linearize: the loops of %s (node %d) and the ranges its END uses nest in a cycle",
        describe_range(ranges[k]), pos[ranges[k]]), 0)
    end
    visiting[k] = true
    o = uses[end_of[ranges[k]]]
    for _, q in ipairs(o) do o = union(o, outer_of(q)) end
    visiting[k] = nil
    local set = {}
    for _, q in ipairs(o) do set[q] = true end
    if set[k] then
      error(string.format("linearize: %s (node %d) would enclose its own loop", describe_range(ranges[k]),
        pos[ranges[k]]), 0)
    end
    outer[k] = o
    return o
  end
  for k = 1, #ranges do outer_of(k) end

  -- chain of a set of ranges: the set closed under nesting, outermost loop first. Closed
  -- and acyclic, it is a chain exactly when the depths are 0, 1, 2, ... (one per depth).
  local chain_cache = {}
  local function chain(set, u) -- u: the node that asks, named in the error
    local c = chain_cache[set]
    if c then return c end
    local closed = set
    for _, q in ipairs(set) do closed = union(closed, outer[q]) end
    c = {}
    for _, q in ipairs(closed) do
      local d = #outer[q] + 1 -- at most #closed: outer[q] is inside closed, without q
      local other = c[d]
      if other then
        error(string.format("linearize: node %d (%s) uses %s (node %d) and %s (node %d), whose loops are not nested",
          pos[u], u.op,
          describe_range(ranges[other]), pos[ranges[other]], describe_range(ranges[q]), pos[ranges[q]]), 0)
      end
      c[d] = q
    end
    chain_cache[set] = c
    return c
  end

  local chain_of = {}
  for _, u in ipairs(topo) do
    local op = u.op
    if op == "RANGE" then
      chain_of[u] = chain(outer[rid[u]], u)
    elseif op == "END" then
      local s = src[u]
      chain_of[u] = chain(outer[rid[s[#s]]], u)
    else
      chain_of[u] = chain(uses[u], u)
    end
  end

  local out = {}
  -- Emits the nodes of one block (top level or a loop body) at loop depth `depth`.
  local function emit(depth, nodes)
    local items, item_of, by_key = {}, {}, {}
    for _, u in ipairs(nodes) do
      local c = chain_of[u]
      local key
      if #c > depth then
        key = c[depth + 1] -- inside an inner loop: that loop is the item here
      elseif u.op == "RANGE" then
        key = rid[u]
      elseif u.op == "END" then
        local s = src[u]
        key = rid[s[#s]]
      else
        key = u
      end
      local it = by_key[key]
      if not it then
        it = { key = key, loop = type(key) == "number", nodes = {}, first = pos[u], waiting = 0,
          users = {}, after = {} }
        by_key[key] = it
        items[#items + 1] = it
      end
      it.nodes[#it.nodes + 1] = u
      item_of[u] = it
    end
    for _, it in ipairs(items) do
      for _, u in ipairs(it.nodes) do
        for _, s in ipairs(src[u]) do
          local si = item_of[s]
          if si and si ~= it and not it.after[si] then
            it.after[si] = true
            it.waiting = it.waiting + 1
            si.users[#si.users + 1] = it
          end
        end
      end
    end
    local heap, done = {}, 0
    for _, it in ipairs(items) do
      if it.waiting == 0 then heap_push(heap, it) end
    end
    while #heap > 0 do
      local it = heap_pop(heap)
      done = done + 1
      if it.loop then
        local r = ranges[it.key]
        local e = end_of[r]
        out[#out + 1] = r
        local body = {}
        for _, u in ipairs(it.nodes) do
          if u ~= r and u ~= e then body[#body + 1] = u end
        end
        emit(depth + 1, body)
        out[#out + 1] = e
      else
        out[#out + 1] = it.key
      end
      for _, user in ipairs(it.users) do
        user.waiting = user.waiting - 1
        if user.waiting == 0 then heap_push(heap, user) end
      end
    end
    if done < #items then
      local stuck = {}
      for _, it in ipairs(items) do
        if it.waiting > 0 then
          stuck[#stuck + 1] = it.loop and describe_range(ranges[it.key])
            or string.format("node %d (%s)", pos[it.key], it.key.op)
          if #stuck == 4 then break end
        end
      end
      error("linearize: these need each other first (a cycle through loops): " .. table.concat(stuck, ", "), 0)
    end
  end
  emit(0, topo)
  assert(#out == #topo, "linearize: lost nodes")
  return out
end

--- One line per node: position, op, dtype, sources (positions), arg; loops indented.
function M.format(list)
  local at, lines, depth = {}, {}, 0
  for i, u in ipairs(list) do at[u] = i - 1 end
  for i, u in ipairs(list) do
    if u.op == "END" and depth > 0 then depth = depth - 1 end
    local srcs = {}
    for k, s in ipairs(u.src) do srcs[k] = at[s] and tostring(at[s]) or "?" end
    local line = string.format("%4d  %s%-10s %-8s", i - 1, string.rep("  ", depth), u.op, tostring(u.dtype))
    if #srcs > 0 then line = line .. " [" .. table.concat(srcs, ", ") .. "]" end
    if u.arg ~= nil then line = line .. " " .. format_arg(u.arg) end
    lines[#lines + 1] = line
    if u.op == "RANGE" then depth = depth + 1 end
  end
  return table.concat(lines, "\n")
end

return M
