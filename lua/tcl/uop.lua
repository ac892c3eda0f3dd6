-- tcl.uop — Lua-side helpers for UOp nodes: construction and printing as a tree.
-- Nodes themselves live in C (src/core); this file only adds methods to them.
local core = require "tcl.core"
local alu = require "tcl.alu"

local M = {}
local methods = core.UOp

--- A scalar CONST of dtype (object or name) holding value, converted by CAST's rules (alu.cast),
-- so the arg has the kind ENCODINGS.md asks for and equal values intern to one node.
function M.const(dtype, value)
  return core.uop("CONST", dtype, nil, alu.cast(value, dtype))
end

--- Builds a node from a table {op=, dtype=, src=, arg=, tag=}.
function M.from(t)
  return core.uop(t.op, t.dtype, t.src, t.arg, t.tag)
end

local function format_value(v)
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = format_value(v[i]) end
    return "(" .. table.concat(parts, ", ") .. ")"
  elseif type(v) == "string" then
    return string.format("%q", v)
  end
  return tostring(v)
end

M.format_value = format_value

-- Indentation stops growing here, so a deep chain prints in linear size; deeper lines say
-- their depth instead.
local MAX_INDENT = 24

local function indent_for(depth)
  if depth <= MAX_INDENT then return string.rep("  ", depth) end
  return string.rep("  ", MAX_INDENT) .. "[depth " .. depth .. "] "
end

-- One line per node; a node met again is shown as a reference to its first line, so every
-- node is printed once and the output is linear in the graph's size.
local function render_tree(root)
  local lines, number_of, next_number = {}, {}, 0
  local stack = { { node = root, depth = 0 } }
  while #stack > 0 do
    local item = table.remove(stack)
    local node, indent = item.node, indent_for(item.depth)
    local seen = number_of[node]
    if seen then
      lines[#lines + 1] = string.format("%s%%%d  (shared, above)", indent, seen)
    else
      next_number = next_number + 1
      number_of[node] = next_number
      local line = string.format("%s%%%d = %s %s", indent, next_number, node.op, tostring(node.dtype))
      local arg, tag = node.arg, node.tag
      if arg ~= nil then line = line .. " arg=" .. format_value(arg) end
      if tag ~= nil then line = line .. " tag=" .. format_value(tag) end
      lines[#lines + 1] = line
      local src = node.src
      for i = #src, 1, -1 do stack[#stack + 1] = { node = src[i], depth = item.depth + 1 } end
    end
  end
  return table.concat(lines, "\n")
end

methods.tree = render_tree
core.UOp_mt.__tostring = render_tree

--- A copy of the node with some fields replaced (returns the same node if nothing changes).
function methods:replace(fields)
  return core.uop(fields.op or self.op, fields.dtype or self.dtype, fields.src or self.src,
    fields.arg == nil and self.arg or fields.arg, fields.tag == nil and self.tag or fields.tag)
end

return M
