-- tcl.api.pending_assigns — the tensors whose node is an assignment not realized yet
-- (Tensor.assign into a whole tensor waits for the next realize on its device, so optimizer
-- steps share one schedule). Layer: lua/tcl/api. Tensor.realize_all takes them along;
-- tcl.jit and assignments into views run them before they read the buffers they write.
local M = {}

-- tensor -> true, weakly: a pending tensor nobody holds is dropped (its node dies with it)
local pending = setmetatable({}, { __mode = "k" })
M.set = pending -- tcl.api.index_checks adds its flag updates here directly

function M.add(t) pending[t] = true end

function M.remove(t) pending[t] = nil end

--- The pending tensors on device (every device when nil), in no particular order.
function M.on(device)
  local list = {}
  for t in pairs(pending) do
    if t.uop.op == "ASSIGN" and (device == nil or t.device == device) then list[#list + 1] = t end
  end
  return list
end

--- Runs the assignments pending on device (every device when nil) now, with realize_all
-- (Tensor.realize_all; one realize per device).
function M.run(realize_all, device)
  local by_device = {}
  for _, t in ipairs(M.on(device)) do
    local group = by_device[t.device] or {}
    by_device[t.device] = group
    group[#group + 1] = t
  end
  for _, group in pairs(by_device) do realize_all(table.unpack(group)) end
end

return M
