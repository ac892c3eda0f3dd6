-- tcl.codegen.devices.emu — the EMU backend of the lowering driver: the reference interpreter
-- (src/runtime/emu/emu_*.c) runs the linear program as it is. Layer: codegen.
--
-- A backend is { device =, renderer = { name =, lacks = { [op] = true }, opt_caps = function },
-- options = string,
-- build_many(jobs) -> programs }: jobs are { name =, list = linear program, key = cache key };
-- a program has :run(buffers) -> seconds, .name, .bytes, :dump() (DEBUG=4: its code) and,
-- where the device has one, :assembly() (DEBUG=7).
--
-- GPU mode (EMU_GPU=CUDA, CUDA_SM75, CUDA_SM90 or METAL, tcl.env): the renderer takes that GPU
-- target's capabilities (tcl.codegen.devices.gpu_targets), so kernels get workgroups, local
-- memory and barriers as on the GPU (the pipeline's GPU passes), and the interpreter runs them
-- a workgroup at a time, reporting races. The options string names the mode: compiled kernels of the two modes are
-- cached apart.
local runtime = require "tcl.runtime"
local env = require "tcl.env"
local core = require "tcl.core"

-- the dtypes Metal lacks (src/codegen/c_render.h)
local NOT_IN_METAL = { [core.dtype "float64"] = true, [core.dtype "fp8e4m3"] = true, [core.dtype "fp8e5m2"] = true }

-- The transcendental ops EMU leaves to tcl.patterns.transcendental, as every other renderer
-- does (LLVM, CUDA, Metal): float32 EXP2/LOG2/SIN/COS/POW become the same polynomials of exact
-- IEEE ops, so EMU's results are the CPU's bit for bit (its scalar ALU's libm-based ones were
-- 1 ulp away at cos(1)). Other dtypes' stay ops of the scalar ALU, as the CPU calls libm. The
-- graph functions EXP ... ELU become the same arithmetic as on the CPU, float64 included.
local LACKS = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true,
  EXP = true, SIGMOID = true, TANH = true, SILU = true, SOFTPLUS = true, ELU = true }

local M = {
  device = "EMU",
  renderer = { name = "emu", lacks = LACKS }, -- every other ALU op through the scalar ALU
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
  target = require("tcl.codegen.devices.gpu_targets").get(env.EMU_GPU)
  M.renderer = { name = "emu-" .. target.name, lacks = LACKS, gpu = target.gpu, opt_caps = target.opt_caps }
  M.options = "emu-gpu-" .. target.id
end

-- GPU mode with RENDER_DUMP: each kernel's source in the target's language, one file per
-- kernel, its function named after the kernel's key (unique, so files can be compiled together).
-- The dialect of the renderer in use in GPU mode (a spec may switch M.renderer to another target).
local function gpu_dialect() return M.renderer.name:match("^emu%-(%a+)$") or target.name end

--- In GPU mode, a linearized kernel's source in the target's language and that language
-- ("cuda" or "metal"); nil outside GPU mode (tcl.viz shows it).
function M.gpu_source(list, name)
  if not M.renderer.gpu then return nil end
  local dialect = gpu_dialect()
  return require("tcl.gpu").render(list, { dialect = dialect, name = name }), dialect
end

local function dump_source(job)
  local dialect = gpu_dialect()
  local name = "k_" .. require("tcl.codegen.driver.disk_cache").name_of(job.key or job.name)
  local ext = dialect == "cuda" and ".cu" or ".metal"
  local path = env.RENDER_DUMP .. "/" .. name .. ext
  local existing = io.open(path, "rb")
  if existing then existing:close() return end
  if dialect == "metal" then -- Metal has no float64 and no fp8: such kernels have no Metal source to check
    for _, u in ipairs(job.list) do
      if NOT_IN_METAL[u.dtype] then return end
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

--- The coalescing line (and the worst instructions') of a profile (runtime Program:profile).
function M.coalescing_report(name, profile)
  local sum = { loads = { 0, 0, 0 }, stores = { 0, 0, 0 } } -- needed, sectors, instructions
  local partial = {}
  for _, a in ipairs(profile) do
    local kind = a.op == "STORE" and sum.stores or sum.loads
    kind[1], kind[2], kind[3] = kind[1] + a.needed, kind[2] + a.sectors, kind[3] + 1
    if a.needed < a.sectors then partial[#partial + 1] = a end
  end
  local function part(label, s)
    if s[3] == 0 then return nil end
    return string.format("%d %s %d%%", s[3], label, math.floor(100 * s[1] / s[2] + 0.5))
  end
  local parts = {}
  parts[#parts + 1] = part("loads", sum.loads)
  parts[#parts + 1] = part("stores", sum.stores)
  local lines = { string.format("    coalescing %s: %s of the 32-byte sectors a warp touches are needed (warp 0 of "
    .. "workgroup 0)", name, #parts > 0 and table.concat(parts, ", ") or "no global accesses") }
  table.sort(partial, function(a, b) return a.needed * b.sectors < b.needed * a.sectors end)
  for i = 1, math.min(#partial, 4) do
    local a = partial[i]
    lines[#lines + 1] = string.format("      %s %d (buffer %d, %d bytes a lane): %d%%, %.1f sectors an access for %.1f",
      a.op, a.pc, a.slot + 1, a.bytes, math.floor(100 * a.needed / a.sectors + 0.5), a.sectors / a.executions,
      a.needed / a.executions)
  end
  return table.concat(lines, "\n")
end

--- Runs the program. In GPU mode at DEBUG >= 2 it also reports how the global accesses of its
-- first warp coalesce (M.coalescing_report).
function Program:run(buffers)
  if target and env.DEBUG >= 2 then
    local seconds, profile = self.emu:profile(buffers)
    io.stderr:write(M.coalescing_report(self.name, profile), "\n")
    return seconds
  end
  return self.emu:run(buffers)
end
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
