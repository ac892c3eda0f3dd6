-- tcl.codegen.estimates — what one run of a linear program does: ALU operations executed and
-- bytes of the buffers it touches, for DEBUG's GFLOPS and GB/s and for tcl.profile. Layer:
-- codegen.
--
-- Operations: every ALU node (and CAST) counts once per iteration of the loops around it;
-- loops have constant sizes (RANGE of a CONST), a loop of unknown size counts once. Bytes: the
-- size of every buffer argument (PARAM), each once: what a kernel that streams its buffers
-- moves between memory and the cores.
local core = require "tcl.core"

local M = {}

local ALU = core.groups.ALU

--- { ops = n, bytes = n } of the linear program `list` (tcl.codegen.linearize's output).
function M.of(list)
  local ops, bytes = 0, 0
  local trips, depth = { 1 }, 1 -- trips[d]: iterations of the loop body at depth d
  for _, u in ipairs(list) do
    local op = u.op
    if op == "RANGE" then
      local size = u:source(1)
      local n = size.op == "CONST" and math.type(size.arg) == "integer" and math.max(size.arg, 0) or 1
      depth = depth + 1
      trips[depth] = trips[depth - 1] * n
    elseif op == "END" then
      depth = math.max(depth - 1, 1)
    elseif ALU[op] or op == "CAST" then
      ops = ops + trips[depth]
    elseif op == "PARAM" then
      bytes = bytes + u.arg[2] * u.dtype.itemsize
    end
  end
  return { ops = ops, bytes = bytes }
end

return M
