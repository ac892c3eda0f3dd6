-- tcl.codegen.devices.gpu_launch — what a GPU backend (tcl.codegen.devices.cuda, tcl.codegen.devices.metal) reads off
-- a linear program to launch it: the grid and workgroup sizes of its thread-index SPECIALs, its
-- buffers in slot order, and the kernel function's name; and that the renderer's facts agree.
-- Layer: codegen (pure Lua: the specs check it without a GPU).
local M = {}

local function fail(name, fmt, ...)
  error(string.format("kernel '%s': " .. fmt, tostring(name or "kernel"), ...), 0)
end

--- The launch of a linear program: { global_size = {x, y, z}, local_size = {x, y, z} }, the
-- sizes of its SPECIAL gidx0..2 (blocks of the grid) and lidx0..2 (threads of a block), 1 where
-- a kernel has none. A SPECIAL's size is its source, a positive integer CONST.
function M.launch_of(list, name)
  local global, loc, seen = { 1, 1, 1 }, { 1, 1, 1 }, {}
  for _, u in ipairs(list) do
    if u.op == "SPECIAL" then
      local arg = u.arg
      local kind, axis = tostring(arg):match("^([gl])idx([012])$")
      if not kind then fail(name, "SPECIAL '%s' is none of gidx0..2, lidx0..2", tostring(arg)) end
      if seen[arg] then fail(name, "SPECIAL '%s' appears twice", arg) end
      seen[arg] = true
      local size = u.src[1]
      if not size or size.op ~= "CONST" or math.type(size.arg) ~= "integer" or size.arg < 1 then
        fail(name, "SPECIAL '%s' needs a positive integer CONST size, got %s", arg, size and size.op or "nothing")
      end
      local sizes = kind == "g" and global or loc
      sizes[tonumber(axis) + 1] = size.arg
    end
  end
  return { global_size = global, local_size = loc }
end

--- The buffers of a linear program, slot order: { { dtype =, numel = }, ... } from its PARAMs
-- (arg { slot, numel }); every slot from 0 to the last must have one.
function M.params_of(list, name)
  local params, count = {}, 0
  for _, u in ipairs(list) do
    if u.op == "PARAM" then
      local slot, numel = u.arg[1], u.arg[2]
      if math.type(slot) ~= "integer" or slot < 0 then fail(name, "PARAM has slot %s", tostring(slot)) end
      local p = params[slot + 1]
      if p and (p.dtype ~= u.dtype or p.numel ~= numel) then fail(name, "slot %d has two different PARAMs", slot) end
      params[slot + 1] = { dtype = u.dtype, numel = numel }
      count = math.max(count, slot + 1)
    end
  end
  for i = 1, count do
    if not params[i] then fail(name, "no PARAM for slot %d (slots 0..%d)", i - 1, count - 1) end
  end
  return params
end

--- The kernel function's name for a kernel name: a C identifier.
function M.entry_name(name)
  local id = tostring(name):gsub("[^%w_]", "_")
  if not id:match("^[%a_]") then id = "k_" .. id end
  return id
end

--- Checks that the renderer's facts (tcl.gpu.render's) agree with the launch and buffers read
-- off job's program, and that its local memory fits the device's gpu limits; `memory` names
-- that memory in the message ("local memory per block").
function M.check_facts(job, facts, launch, params, gpu, memory)
  if type(facts) ~= "table" then return end
  if facts.global_size and facts.local_size then
    for i = 1, 3 do
      if facts.global_size[i] ~= launch.global_size[i] or facts.local_size[i] ~= launch.local_size[i] then
        fail(job.name, "the renderer launches %s x %s, the program's SPECIALs say %s x %s",
          table.concat(facts.global_size, ","), table.concat(facts.local_size, ","),
          table.concat(launch.global_size, ","), table.concat(launch.local_size, ","))
      end
    end
  end
  if facts.params and #facts.params ~= #params then
    fail(job.name, "the renderer takes %d buffers, the program's PARAMs %d", #facts.params, #params)
  end
  if facts.local_bytes and facts.local_bytes > gpu.local_bytes then
    fail(job.name, "%d bytes of %s, the device allows %d", facts.local_bytes, memory, gpu.local_bytes)
  end
end

return M
