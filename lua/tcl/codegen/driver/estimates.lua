-- tcl.codegen.driver.estimates — what one run of a linear program does: ALU operations executed, the
-- operations on data alone (DEBUG's GFLOPS, tcl.profile's ops, and a schedule's work against
-- its graph's), and the bytes of the buffers it touches (GB/s). Layer: codegen.
--
-- Operations: every ALU node (and CAST) counts once per iteration of the loops around it, and
-- once per thread of a GPU-shaped program (the product of its SPECIAL sizes: every thread runs
-- the whole list); loops have constant sizes (RANGE of a CONST), a loop of unknown size counts
-- once. Value
-- operations are those of them that compute on data: all but the address work, which is
-- index arithmetic (dtype index) and the bool conditions made from it (loop bounds, the
-- gates of padded loads: comparisons of indices and their conjunctions). Kernels keep index
-- arithmetic in dtype index through the whole pipeline today; a pass that lowered it to
-- int32 would have to teach this count its nodes. Bytes: the size of every buffer
-- argument (PARAM), each once: what a kernel that streams its buffers moves between memory
-- and the cores.
local core = require "tcl.core"

local M = {}

local ALU = core.groups.ALU
local INDEX, BOOL = core.dtype "index", core.dtype "bool"

--- Whether u is address work, given the ids of the address work before it.
local function addressing(u, address)
  if u.dtype == INDEX then return true end
  if u.dtype ~= BOOL then return false end
  for _, s in ipairs(u.src) do
    if not (address[s.id] or s.dtype == INDEX or s.op == "CONST") then return false end
  end
  return true
end

--- { ops = n, value_ops = n, bytes = n } of the linear program `list` (tcl.codegen.driver.linearize's
-- output).
function M.of(list)
  local ops, value_ops, bytes = 0, 0, 0
  local threads = 1
  for _, u in ipairs(list) do
    if u.op == "SPECIAL" then
      local size = u:source(1)
      if size.op == "CONST" and math.type(size.arg) == "integer" then threads = threads * math.max(size.arg, 0) end
    end
  end
  local address = {} -- ids of the address work seen so far
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
      local n = trips[depth]
      ops = ops + n
      if addressing(u, address) then address[u.id] = true else value_ops = value_ops + n end
    elseif op == "PARAM" then
      bytes = bytes + u.arg[2] * u.dtype.itemsize
    end
  end
  return { ops = ops * threads, value_ops = value_ops * threads, bytes = bytes }
end

return M
