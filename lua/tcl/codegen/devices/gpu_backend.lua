-- tcl.codegen.devices.gpu_backend — the device side that the GPU backends (tcl.codegen.cuda,
-- tcl.codegen.metal) share: their native modules, the device opened on first use (so that the
-- module loads anywhere and DEVICE=CUDA / METAL without one fails at the first kernel with the
-- device's message), the renderer whose GPU limits are the device's, the optimizer's view of
-- them, the `options` key, storage, and what a program launches (tcl.codegen.gpu_launch).
-- Layer: codegen.
local gpu_launch = require "tcl.codegen.devices.gpu_launch"

local M = {}

--- Gives backend table B: B.probe(), B.renderer (name, lacks, gpu read from the device,
-- opt_caps()), B.options (read from the device), B.allocate(dtype, numel), B.launch_of,
-- B.params_of, B.entry_name, B.synchronize(). spec = { label = "CUDA" (messages), module =
-- "tcl.cuda" (its device(), buffer(), opened() and synchronize()), renderer = "cuda" (the
-- renderer's name and the prefix of the module's errors), lacks = { [op] = true }, target =
-- tcl.codegen.gpu_targets' target, open = function(info) -> { options =, gpu =, ... } (the
-- device's facts from module.device()'s table) }.
-- Returns native(name) (a native module, or an error naming it) and device() (the opened facts,
-- with info added).
function M.attach(B, spec)
  local function native(name)
    local ok, mod = pcall(require, name)
    if not ok then
      error(string.format("%s: the module %s is not in this build: %s", spec.label, name, tostring(mod)), 0)
    end
    return mod
  end

  local opened
  local function device()
    if not opened then
      local ok, info = pcall(native(spec.module).device)
      if not ok then error((tostring(info):gsub("^" .. spec.renderer .. "%.device: ", "")), 0) end
      opened = spec.open(info)
      opened.info = info
    end
    return opened
  end

  --- The device's facts without raising: true, the module's device() table; or false, why.
  function B.probe()
    local ok, facts = pcall(device)
    if ok then return true, facts.info end
    return false, tostring(facts)
  end

  B.renderer = setmetatable({ name = spec.renderer, lacks = spec.lacks }, {
    __index = function(_, k) if k == "gpu" then return device().gpu end end,
  })

  --- The optimizer's view of the GPU: the target's capabilities with the device's limits.
  function B.renderer.opt_caps()
    local gpu = device().gpu
    local caps = spec.target.opt_caps()
    caps.threads_max, caps.warp = gpu.threads_max, gpu.warp
    caps.shared_max, caps.local_bytes = gpu.local_bytes, gpu.local_bytes
    -- the device's own: its target may offer more tensor cores than spec.target (CUDA on sm_90)
    caps.gpu, caps.tensor_cores = gpu, #(gpu.tensor_cores or {})
    return caps
  end

  setmetatable(B, { __index = function(_, k) if k == "options" then return device().options end end })

  --- Waits until everything queued on the device has finished (nothing when this state never
  -- opened it: a tensor's buffer opens it too, without device()); a queued kernel's failure is
  -- raised here.
  function B.synchronize()
    local mod = native(spec.module)
    if mod.synchronize and mod.opened() then mod.synchronize() end
  end

  --- New zero-filled device storage (the module's buffer) of numel elements of dtype.
  function B.allocate(dtype, numel) return native(spec.module).buffer(dtype, numel) end

  B.launch_of, B.params_of, B.entry_name = gpu_launch.launch_of, gpu_launch.params_of, gpu_launch.entry_name
  return native, device
end

return M
