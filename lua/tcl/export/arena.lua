-- tcl.export.arena — the buffer plan of an exported model: every buffer that lives only during
-- a run gets an offset in one arena, and buffers whose lifetimes do not overlap share memory.
-- Layer: export.
--
-- A block is { bytes =, first =, last = }: it must hold its bytes from step `first` to step
-- `last`, both included (a kernel that reads one block and writes another holds both at
-- once, so they never share). Greedy by size, as arena planners commonly do: the largest
-- block first, each placed at the lowest aligned offset where it overlaps no block already
-- placed whose lifetime meets its own. Offsets and the arena's size are multiples of the
-- alignment (64 bytes: the kernels are compiled for 64-byte aligned buffers, and a block's
-- rounded size keeps the next one aligned).
local M = {}

M.ALIGNMENT = 64

local function round_up(n, to) return (n + to - 1) // to * to end

local function meets(a, b) return a.first <= b.last and b.first <= a.last end

--- Sets block.offset for every block; returns the arena's size in bytes and the bytes the
-- blocks would take without sharing (both rounded to the alignment).
function M.plan(blocks, alignment)
  alignment = alignment or M.ALIGNMENT
  local order = {}
  for i, b in ipairs(blocks) do
    if math.type(b.bytes) ~= "integer" or b.bytes < 0 or b.first > b.last then
      error(string.format("arena.plan: block %d is malformed (bytes %s, steps %s..%s)", i, tostring(b.bytes),
        tostring(b.first), tostring(b.last)), 2)
    end
    order[i] = i
  end
  -- larger first; among equals, the earlier-born first, then the list order (deterministic)
  table.sort(order, function(x, y)
    local a, b = blocks[x], blocks[y]
    if a.bytes ~= b.bytes then return a.bytes > b.bytes end
    if a.first ~= b.first then return a.first < b.first end
    return x < y
  end)
  local placed, size, unshared = {}, 0, 0
  for _, i in ipairs(order) do
    local block = blocks[i]
    local need = round_up(math.max(block.bytes, 1), alignment)
    unshared = unshared + need
    -- the placed blocks alive at the same time, by offset: the first gap that fits wins
    local busy = {}
    for _, other in ipairs(placed) do
      if meets(block, other) then busy[#busy + 1] = other end
    end
    table.sort(busy, function(a, b) return a.offset < b.offset end)
    local offset = 0
    for _, other in ipairs(busy) do
      if offset + need <= other.offset then break end
      offset = math.max(offset, other.offset + other.size)
    end
    block.offset, block.size = offset, need
    placed[#placed + 1] = block
    size = math.max(size, offset + need)
  end
  return size, unshared
end

return M
