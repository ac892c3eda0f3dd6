-- tcl.schedule.transfers — copies between devices (Tensor.to: a COPY node whose arg names the
-- target device), run as part of a realize. Layer: Lua scheduler.
--
-- A schedule runs on one device, so before planning, tcl.schedule.run hands the graph here:
-- each device copy (sources first, so a copy of a copy works) realizes its source on the
-- source's device (a schedule of its own), allocates the result on the target device and
-- copies the storage across (host memory and GPU memory in any direction: buffers.copy); the
-- graph then reads that buffer instead. The copy is a step of the realize like a kernel:
-- tcl.jit's recorder sees it (as a program named "copy CPU->EMU" whose run copies slot 2 into
-- slot 1), so captured plans replay it with new inputs.
local core = require "tcl.core"
local P = require "tcl.pattern"
local buffers = require "tcl.schedule.buffers"
local shapes = require "tcl.shape"

local M = {}

--- Set once a device copy node exists in this state (tcl.api.nodes.to_device sets it).
M.copies_made = false

--- Whether node is a copy to another device.
function M.is_transfer(node)
  return node.op == "COPY" and type(node.arg) == "string"
end

--- The device a graph's buffers are on (nil when it reads none).
function M.device_of(root)
  for _, node in ipairs(root:toposort()) do
    if node.op == "BUFFER" then return node.arg[3] end
  end
  return nil
end

local Copy = {}
Copy.__index = Copy
function Copy.run(_, list) buffers.copy(list[1], list[2]) return 0 end

local copies = {} -- "CPU->EMU" -> the program-like step the recorder sees
local function copy_step(from, to)
  local key = from .. "->" .. to
  local step = copies[key]
  if not step then
    step = setmetatable({ name = "copy " .. key, bytes = 0 }, Copy)
    copies[key] = step
  end
  return step
end

--- outputs with every device copy done: a list of the same length whose copies read stored
-- buffers on their target devices. run(outputs, opts) realizes a graph on one device (the
-- scheduler's run, which calls back here for the copies below).
function M.resolve(outputs, run, recorder)
  -- realizes without a device copy anywhere in this state skip the walk below (every realize
  -- comes here; Tensor.to sets the flag when it makes the first copy node)
  if not M.copies_made then return outputs end
  local any = false
  local sink = core.uop("SINK", nil, outputs)
  for _, node in ipairs(sink:toposort()) do
    if M.is_transfer(node) then any = true break end
  end
  if not any then return outputs end
  local map = {}
  for _, node in ipairs(sink:toposort()) do
    if M.is_transfer(node) then
      local source = P.substitute(node.src[1], map)
      local from = M.device_of(source) or buffers.device
      local realized = run({ source }, { device = from })[1]
      local held = buffers.viewed(realized)
      local numel = held and buffers.get(held).numel
      local shape = shapes.shared(node)
      local want = 1
      for _, n in ipairs(shape) do want = want * n end
      if not held or numel ~= want then
        -- a view of a stored buffer (a permute, a slice): stored in order first
        realized = run({ core.uop("COPY", source.dtype, { source }) }, { device = from })[1]
        held = buffers.viewed(realized)
      end
      local target = buffers.new(node.dtype, want, node.arg)
      local src_storage, dst_storage = buffers.get(held), buffers.get(target)
      local step = copy_step(from, node.arg)
      step:run { dst_storage, src_storage }
      if recorder then recorder(step, { target, held }, { dst_storage, src_storage }) end
      map[node] = #shape == 1 and target or core.uop("RESHAPE", node.dtype, { target }, shape)
    end
  end
  return P.substitute(sink, map).src
end

return M
