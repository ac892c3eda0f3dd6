-- tcl.codegen.devices.gpu_backend — the device side that the GPU backends (tcl.codegen.devices.cuda,
-- tcl.codegen.devices.metal) share: their native modules, the device opened on first use (so that the
-- module loads anywhere and DEVICE=CUDA / METAL without one fails at the first kernel with the
-- device's message), the renderer whose GPU limits are the device's, the optimizer's view of
-- them, the `options` key, storage, what a program launches (tcl.codegen.devices.gpu_launch), and the
-- steps of a build that do not depend on the dialect (rendering a job and checking its launch,
-- making the module's program, the Program objects). The backends keep what differs: the
-- device's limits and description, and how code is compiled (NVRTC and a disk cache for
-- CUDA; source handed to the device for Metal). Layer: codegen.
local gpu_launch = require "tcl.codegen.devices.gpu_launch"

local M = {}

--- The GPU limits kernels are shaped for on one device: a copy of the target's (base), each
-- bound the device reports (device: threads_max, local_bytes, local_max and grid_max, per axis,
-- warp; nil: the target's) taking the smaller. The backends map their device() tables onto it.
function M.narrowed_limits(base, device)
  local out = {}
  for k, v in pairs(base) do out[k] = v end
  local function per_axis(list, limits)
    if list == nil or limits == nil then return list end
    local r = {}
    for i = 1, 3 do r[i] = math.min(list[i], limits[i] or list[i]) end
    return r
  end
  out.threads_max = math.min(base.threads_max, device.threads_max or base.threads_max)
  out.local_bytes = math.min(base.local_bytes, device.local_bytes or base.local_bytes)
  out.local_max = per_axis(base.local_max, device.local_max)
  out.grid_max = per_axis(base.grid_max, device.grid_max)
  out.warp = device.warp or base.warp
  return out
end

--- Gives backend table B: B.probe(), B.renderer (name, lacks, gpu read from the device,
-- opt_caps()), B.options (read from the device), B.allocate(dtype, numel), B.launch_of,
-- B.params_of, B.entry_name, B.synchronize(), B.render(job, dev) and B.program(...) (below).
-- spec = { label = "CUDA" (messages), module =
-- "tcl.cuda" (its device(), buffer(), opened() and synchronize()), renderer = "cuda" (the
-- renderer's name and the prefix of the module's errors), lacks = { [op] = true }, target =
-- tcl.codegen.devices.gpu_targets' target, open = function(info) -> { options =, gpu =, ... } (the
-- device's facts from module.device()'s table), dialect = tcl.gpu's dialect ("cuda"),
-- local_memory = what the dialect calls a workgroup's memory in messages ("local memory per
-- block") }.
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

  --- Renders job (a build's: name, list) in the dialect and checks what its kernel asks of the
  -- device (dev: device()'s facts). Returns { entry =, launch =, params =, source =, facts = }.
  function B.render(job, dev)
    local entry = B.entry_name(job.name)
    local launch = B.launch_of(job.list, job.name)
    local params = B.params_of(job.list, job.name)
    local ok, source, facts = pcall(native("tcl.gpu").render, job.list, { dialect = spec.dialect, name = entry })
    if not ok then error((tostring(source):gsub("^gpu%.render: ", "")), 0) end
    gpu_launch.check_facts(job, facts, launch, params, dev.gpu, spec.local_memory)
    return { entry = entry, launch = launch, params = params, source = source, facts = facts }
  end

  --- The module's program of code for job (r: B.render's result; extra: more options of the
  -- module's program(), e.g. shared_bytes); an error without the module's prefix on failure
  -- (the message names the kernel), and (ok = false, why) instead when `protected`.
  function B.program(code, job, r, extra, protected)
    local options = { name = job.name, entry = r.entry, params = r.params, global_size = r.launch.global_size,
      local_size = r.launch.local_size }
    for k, v in pairs(extra or {}) do options[k] = v end
    local ok, program = pcall(native(spec.module).program, code, options)
    if ok then return program end
    local why = tostring(program):gsub("^" .. spec.renderer .. "%.program: ", "")
    if protected then return nil, why end
    error(why, 0)
  end

  return native, device
end

--- A backend's program (what build_many returns): :run(buffers, timed) runs the module's
-- program `native`, :dump() is the source (DEBUG=4), and with `assembly` (the compiled code as
-- text: PTX) :assembly() returns it (DEBUG=7). fields: name, native, bytes, source, entry,
-- global_size, local_size [, assembly].
local Program = {}
Program.__index = Program
function Program:run(buffers, timed) return self.native:run(buffers, timed) end
function Program:dump() return self.source end

local ProgramWithAssembly = setmetatable({}, { __index = Program })
ProgramWithAssembly.__index = ProgramWithAssembly
function ProgramWithAssembly:assembly() return self.code end

function M.program(fields)
  if fields.assembly then
    fields.code, fields.assembly = fields.assembly, nil
    return setmetatable(fields, ProgramWithAssembly)
  end
  return setmetatable(fields, Program)
end

return M
