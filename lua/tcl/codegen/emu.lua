-- tcl.codegen.emu — the EMU backend of the lowering driver: the reference interpreter
-- (src/runtime/emu_*.c) runs the linear program as it is. Layer: codegen.
--
-- A backend is { device =, renderer = { name =, lacks = { [op] = true }, opt_caps = function },
-- options = string,
-- build_many(jobs) -> programs }: jobs are { name =, list = linear program, key = cache key };
-- a program has :run(buffers) -> seconds, .name, .bytes, :dump() (DEBUG=4: its code) and,
-- where the device has one, :assembly() (DEBUG=7).
--
-- GPU mode (EMU_GPU=CUDA, CUDA_SM75, CUDA_SM90 or METAL, tcl.env): the renderer takes that GPU
-- target's capabilities (tcl.codegen.gpu_targets), so kernels get workgroups, local memory and barriers as on the
-- GPU (the pipeline's GPU passes), and the interpreter runs them a workgroup at a time,
-- reporting races. The options string names the mode: compiled kernels of the two modes are
-- cached apart.
local runtime = require "tcl.runtime"
local env = require "tcl.env"
local core = require "tcl.core"

local FLOAT64 = core.dtype "float64"

local M = {
  device = "EMU",
  renderer = { name = "emu", lacks = {} }, -- EMU evaluates every ALU op through the scalar ALU
  options = "emu",
}

--- The optimizer's view of EMU: one thread, scalar registers, no workgroups, so the opts that
-- apply are the ones that reshape loops (UPCAST, UNROLL, PADTO, SWAP).
function M.renderer.opt_caps()
  return { has_threads = false, threads = 1, has_local = false, has_shared = false, vector_bytes = 4,
    vector_registers = 16, cache = { l1 = 0, l2 = 0, l3 = 0 } }
end

local target
if env.EMU_GPU then
  target = require("tcl.codegen.gpu_targets").get(env.EMU_GPU)
  M.renderer = { name = "emu-" .. target.name, lacks = {}, gpu = target.gpu, opt_caps = target.opt_caps }
  M.options = "emu-gpu-" .. target.id
end

--- FNV-1a, 64 bits, as 16 hex digits: file and function names from cache keys.
local function fnv(s)
  local h = -3750763034362895579
  for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end
  return string.format("%016x", h)
end

-- GPU mode with RENDER_DUMP: each kernel's source in the target's language, one file per
-- kernel, its function named after the kernel's key (unique, so files can be compiled together).
local function dump_source(job)
  -- the dialect of the renderer in use (a spec may switch M.renderer to another target)
  local dialect = M.renderer.name:match("^emu%-(%a+)$") or target.name
  local name = "k_" .. fnv(job.key or job.name)
  local ext = dialect == "cuda" and ".cu" or ".metal"
  local path = env.RENDER_DUMP .. "/" .. name .. ext
  local existing = io.open(path, "rb")
  if existing then existing:close() return end
  if dialect == "metal" then -- Metal has no float64: such kernels have no Metal source to check
    for _, u in ipairs(job.list) do
      if u.dtype == FLOAT64 then return end
    end
  end
  local ok, source = pcall(require("tcl.gpu").render, job.list, { dialect = dialect, name = name })
  if not ok then error(string.format("kernel '%s': rendering to %s failed: %s", job.name, dialect, source), 0) end
  local f = assert(io.open(path, "wb"))
  f:write("/* ", job.name, " */\n", source)
  f:close()
end

local Program = {}
Program.__index = Program

function Program:run(buffers) return self.emu:run(buffers) end
function Program:dump() return self.emu:dump() end

function M.build_many(jobs)
  local programs = {}
  for i, job in ipairs(jobs) do
    if target and env.RENDER_DUMP then dump_source(job) end
    local emu = runtime.program(job.list, { name = job.name })
    programs[i] = setmetatable({ name = job.name, emu = emu, bytes = emu.bytes }, Program)
  end
  return programs
end

return M
