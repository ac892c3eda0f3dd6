-- spec/project/layout_spec.lua — the Lua tree shows the pipeline (docs/design/layout.md): every module is
-- under lua/tcl/ with a name that mirrors its path, each stage is a folder, and dependencies
-- point one way, export -> api -> schedule -> codegen -> heuristics -> patterns -> the core bindings, with nothing
-- inside tcl requiring the top-level `tcl` module. Read from the source files' requires.
local helper = require "spec.support.helper"

-- The stages, lowest first; a module may require its own stage and the ones below it.
local STAGE_OF_PREFIX = {
  -- tools over the Tensor API: ahead-of-time export (tcl.export and its modules)
  { prefix = "tcl.export", stage = 4.5, name = "export" },
  -- ONNX import: models read into calls of the Tensor API (tcl.onnx and its op handlers)
  { prefix = "tcl.onnx", stage = 4.5, name = "onnx" },
  -- language models written with the Tensor API (tcl.models.transformer, its KV cache, sampling)
  { prefix = "tcl.models", stage = 4.5, name = "models" },
  -- profiles of calls: the report, its roofline's peaks (measured with the Tensor API), traces
  { prefix = "tcl.profile", stage = 4.5, name = "profile" },
  -- the viewer: records what the scheduler and the lowering did, and renders it as a page
  { prefix = "tcl.viz", stage = 4.5, name = "viz" },
  -- collectives between the ranks of a job (tcl.distributed and its backends), over the Tensor API
  { prefix = "tcl.distributed", stage = 4.5, name = "distributed" },
  { prefix = "tcl.api.", stage = 4, name = "api" },
  { prefix = "tcl.schedule", stage = 3, name = "schedule" },
  { prefix = "tcl.codegen.", stage = 2, name = "codegen" },
  -- the optimizer's policies (codegen's optimize pass runs them); they read kernels only
  { prefix = "tcl.heuristics.", stage = 1.5, name = "heuristics" },
  { prefix = "tcl.patterns.", stage = 1, name = "patterns" },
}
-- The core bindings: the C modules and the Lua files beside init.lua.
local CORE = { ["tcl.core"] = true, ["tcl.alu"] = true, ["tcl.rewrite"] = true, ["tcl.bounds"] = true,
  ["tcl.runtime"] = true, ["tcl.llvm"] = true, ["tcl.gpu"] = true, ["tcl.nvrtc"] = true,
  ["tcl.cuda"] = true, ["tcl.metal"] = true, ["tcl.mpi"] = true, ["tcl.nccl"] = true,
  ["tcl.opt"] = true, ["tcl.uop"] = true, ["tcl.pattern"] = true, ["tcl.shape"] = true, ["tcl.affine"] = true,
  ["tcl.conv_phases"] = true, ["tcl.variables"] = true,
  ["tcl.env"] = true, ["tcl.settings"] = true, ["tcl.context"] = true, ["tcl.quote"] = true, ["tcl.devices"] = true,
  -- progress bars: drawn by the codegen (BEAM), api (the DataLoader) and export stages alike
  ["tcl.progress"] = true }

local function stage_of(module)
  if module == "tcl" then return 5, "the package entry" end
  if CORE[module] then return 0, "core" end
  for _, s in ipairs(STAGE_OF_PREFIX) do
    if module:sub(1, #s.prefix) == s.prefix then return s.stage, s.name end
  end
  return nil
end

local function lua_files()
  local status, out = helper.run("cd " .. helper.shell_quote(helper.root .. "/lua") .. " && find . -name '*.lua'")
  assert(status == 0, "cannot list lua/")
  local files = {}
  for rel in out:gmatch("%./([^\n]+)") do files[#files + 1] = rel end
  table.sort(files)
  return files
end

local function module_of(rel) -- "tcl/api/tensor.lua" -> "tcl.api.tensor"; ".../init.lua" -> its folder
  return (rel:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", "."))
end

local function read(rel) return helper.read(helper.root .. "/lua/" .. rel) end

--- The modules a file requires (code only: comment lines are skipped); with `pattern`, the
-- names that match it instead.
local function requires_of(text, pattern)
  pattern = pattern or "require%s*%(?%s*[\"']([%w_.]+)[\"']"
  local list = {}
  for line in text:gmatch("[^\n]*") do
    local code = line:gsub("%-%-.*$", "")
    for name in code:gmatch(pattern) do list[#list + 1] = name end
  end
  return list
end
-- a pipeline entry naming a module: `pass = "module"` or `rules = "module"`
local PASS_REFERENCE = "%f[%w]%l+%s*=%s*[\"'](tcl%.[%w_.]+)[\"']"

describe("the Lua tree", function()
  local files = lua_files()

  it("holds every module under lua/tcl/ (nothing generic on the Lua path)", function()
    assert.is_true(#files > 10)
    for _, rel in ipairs(files) do
      assert.is_truthy(rel:match("^tcl/"), "lua/" .. rel .. " is outside lua/tcl/")
    end
  end)

  it("names each module after its path in its header", function()
    for _, rel in ipairs(files) do
      local module = module_of(rel)
      local first = read(rel):match("^[^\n]*")
      assert.is_truthy(first:find("-- " .. module .. " ", 1, true) == 1,
        "lua/" .. rel .. " should start with '-- " .. module .. " —', got: " .. first)
    end
  end)

  it("has one stage per folder and dependencies that point one way", function()
    local offenders = {}
    for _, rel in ipairs(files) do
      local module = module_of(rel)
      local own, own_name = stage_of(module)
      assert.is_not_nil(own, module .. " belongs to no stage")
      for _, dep in ipairs(requires_of(read(rel))) do
        if dep:sub(1, 4) == "tcl." or dep == "tcl" then
          local stage, name = stage_of(dep)
          if stage == nil then
            offenders[#offenders + 1] = module .. " requires " .. dep .. ", which belongs to no stage"
          elseif stage > own then
            offenders[#offenders + 1] = string.format("%s (%s) requires %s (%s)", module, own_name, dep, name)
          end
        end
      end
    end
    assert.are.same({}, offenders)
  end)

  it("names the passes of the pipeline of later stages by module, without requiring them", function()
    -- the pipeline (a rule file) lists passes of the codegen stage by name; the lowering
    -- driver (tcl.codegen.driver.lower) loads them, so the rule files depend on the core only
    local names = requires_of(read("tcl/patterns/pipeline.lua"), PASS_REFERENCE)
    assert.are.same({ "tcl.codegen.passes.tensor_cores", "tcl.codegen.passes.kblock", "tcl.codegen.passes.expand",
      "tcl.codegen.passes.reuse_values",
      "tcl.codegen.passes.group_reduce", "tcl.codegen.passes.accumulators", "tcl.codegen.passes.stage_transposes",
      "tcl.codegen.passes.gpu_dims", "tcl.codegen.passes.bind_variables", "tcl.codegen.passes.merge_ends" }, names)
    for _, name in ipairs(names) do
      local f = io.open(helper.root .. "/lua/" .. name:gsub("%.", "/") .. ".lua", "rb")
      assert.is_not_nil(f, name .. " does not exist")
      f:close()
    end
  end)

  it("keeps the lowering passes and the devices' backends apart: neither requires the other", function()
    -- the driver reaches both by name (the pipeline's entries, its table of backends)
    local offenders = {}
    for _, rel in ipairs(files) do
      local folder = rel:match("^tcl/codegen/(%a+)/")
      local other = ({ passes = "tcl.codegen.devices.", devices = "tcl.codegen.passes." })[folder]
      for _, dep in ipairs(other and requires_of(read(rel)) or {}) do
        if dep:sub(1, #other) == other then offenders[#offenders + 1] = module_of(rel) .. " requires " .. dep end
      end
    end
    assert.are.same({}, offenders)
  end)

  it("defines each helper of the lowering passes, the driver and the heuristics once", function()
    -- a helper two passes need (a range's size, its axis id, a coefficient) is a UOp method or
    -- lives in a shared module: copies drift apart
    local files_of = {} -- helper name -> { files }
    for _, rel in ipairs(files) do
      if (rel:match("^tcl/codegen/") and not rel:match("^tcl/codegen/devices/")) or rel:match("^tcl/heuristics/") then
        local seen = {}
        for line in read(rel):gmatch("[^\n]*") do
          local name = line:match("^local function ([%w_]+)") or line:match("^local ([%w_]+) = function")
          if name and not seen[name] then
            seen[name] = true
            files_of[name] = files_of[name] or {}
            table.insert(files_of[name], rel)
          end
        end
      end
    end
    local twice = {}
    for name, where in pairs(files_of) do
      if #where > 1 then twice[#twice + 1] = name .. " in " .. table.concat(where, ", ") end
    end
    table.sort(twice)
    assert.are.same({}, twice)
  end)

  it("makes a pipeline entry a hand-written pass only where its header says why rules do not do", function()
    local text = read("tcl/patterns/pipeline.lua")
    local rules, passes = requires_of(text, "rules%s*=%s*[\"'](tcl%.[%w_.]+)[\"']"),
      requires_of(text, "pass%s*=%s*[\"'](tcl%.codegen%.[%w_.]+)[\"']")
    assert.is_true(#rules >= 5, "the passes of rules: " .. table.concat(rules, ", "))
    for _, name in ipairs(passes) do
      local header = read(name:gsub("%.", "/") .. ".lua"):match("^(.-)\n[^-]")
      assert.is_truthy(header:find("\n%-%- Not rules", 1), name .. "'s header does not say why it is not rules")
    end
    for _, name in ipairs(rules) do
      local module = require(name)
      assert.are.equal("table", type(module.rules), name .. " has no rules")
      assert.is_nil(module.run, name .. " is a pass of rules: the driver runs it (lower.run_rules)")
    end
  end)

  it("is checked by a rule that can fail", function()
    local text = 'local s = require "tcl.shape"\n-- require "tcl.api.tensor" in a comment does not count\n' ..
      '{ name = "n", pass = "tcl.codegen.x" }\n{ name = "m", rules = "tcl.codegen.y" }'
    assert.are.same({ "tcl.shape" }, requires_of(text))
    assert.are.same({ "tcl.codegen.x", "tcl.codegen.y" }, requires_of(text, PASS_REFERENCE))
    assert.is_true(stage_of("tcl.api.tensor") > stage_of("tcl.schedule"))
    assert.is_true(stage_of("tcl.schedule.rangeify") > stage_of("tcl.codegen.driver.lower"))
    assert.is_true(stage_of("tcl") > stage_of("tcl.api.tensor"))
  end)
end)

-- src/runtime: one folder per device (cpu/, cuda/, metal/, emu/), gpu/ for what the GPU devices
-- share (the driver interface, buffers, programs, their Lua binding), io/ for files (mapping,
-- gzip, the disk cache), mpi/ for tcl.distributed's transport (Open MPI over host buffers); at the
-- root only the host buffers, the tcl.runtime binding, which every device uses, and the loader of
-- shared libraries (CUDA's driver, NCCL, MPI: loaded at run time). Includes
-- between the folders point one way: a device includes no other device, and the shared GPU
-- layer knows no driver (a new GPU driver is one more folder).
local RUNTIME_ROOT_FILES = { ["buffer.c"] = true, ["buffer.h"] = true, ["lua_runtime.c"] = true,
  ["lua_runtime.h"] = true, ["shared_library.c"] = true, ["shared_library.h"] = true }
local RUNTIME_FOLDER_MAY_INCLUDE = {
  cpu = {}, emu = {}, gpu = {}, io = { cpu = true }, mpi = {}, cuda = { gpu = true }, metal = { gpu = true },
}

local function runtime_files()
  local status, out = helper.run("cd " .. helper.shell_quote(helper.root .. "/src/runtime") ..
    " && find . -name '*.[ch]'")
  assert(status == 0, "cannot list src/runtime")
  local files = {}
  for rel in out:gmatch("%./([^\n]+)") do files[#files + 1] = rel end
  table.sort(files)
  return files
end

-- The offences of one file of src/runtime (rel: "cuda/lua_cuda.c") whose text is text.
local function runtime_offences(rel, text)
  local folder = rel:match("^([^/]+)/")
  if not folder then
    return RUNTIME_ROOT_FILES[rel] and {} or { rel .. " is at the root of src/runtime, not in a device's folder" }
  end
  local may = RUNTIME_FOLDER_MAY_INCLUDE[folder]
  if not may then return { rel .. " is in " .. folder .. "/, which is not a folder of src/runtime" } end
  local offences = {}
  for included in text:gmatch('#include%s+"runtime/([%w_]+)/') do
    if included ~= folder and not may[included] then
      offences[#offences + 1] = string.format("%s includes runtime/%s/", rel, included)
    end
  end
  return offences
end

describe("the C runtime (src/runtime)", function()
  it("keeps each device in its folder, with includes that point one way", function()
    local files, offences = runtime_files(), {}
    assert.is_true(#files > 40)
    for _, rel in ipairs(files) do
      for _, o in ipairs(runtime_offences(rel, helper.read(helper.root .. "/src/runtime/" .. rel))) do
        offences[#offences + 1] = o
      end
    end
    assert.are.same({}, offences)
  end)

  it("is checked by a rule that can fail", function()
    assert.are.same({ "cuda_buffer.c is at the root of src/runtime, not in a device's folder" },
      runtime_offences("cuda_buffer.c", ""))
    assert.are.same({ "gpu/gpu_buffer.c includes runtime/cuda/" },
      runtime_offences("gpu/gpu_buffer.c", '#include "runtime/cuda/cuda_driver.h"\n#include "runtime/buffer.h"'))
    assert.are.same({ "cuda/x.c includes runtime/metal/" },
      runtime_offences("cuda/x.c", '#include "runtime/metal/m.h"'))
    assert.are.same({}, runtime_offences("metal/x.c", '#include "runtime/gpu/gpu_driver.h"'))
  end)
end)

-- The spec tree mirrors the pipeline too: one folder per stage, each spec file in one.
local SPEC_FOLDERS = { core = true, rewrite = true, schedule = true, codegen = true, runtime = true, devices = true,
  api = true, nn = true, autograd = true, io = true, export = true, embed = true, cli = true, project = true,
  viz = true }

describe("the spec tree", function()
  it("holds every spec file in a folder of a pipeline stage, with its path in its header", function()
    local status, out = helper.run("cd " .. helper.shell_quote(helper.root .. "/spec")
      .. " && find . -name '*_spec.lua'")
    assert(status == 0, "cannot list spec/")
    local count = 0
    for rel in out:gmatch("%./([^\n]+)") do
      count = count + 1
      local folder = rel:match("^([%w_]+)/[%w_]+_spec%.lua$")
      assert.is_truthy(folder and SPEC_FOLDERS[folder], "spec/" .. rel .. " is not in one of the stage folders")
      local first = helper.read(helper.root .. "/spec/" .. rel):match("^[^\n]*")
      assert.are.equal(1, first:find("-- spec/" .. rel .. " ", 1, true), "spec/" .. rel .. " starts with: " .. first)
    end
    assert.is_true(count > 50, "found only " .. count .. " spec files")
  end)
end)
