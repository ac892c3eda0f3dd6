-- spec/devices/cpu_device_spec.lua — the CPU device as a user meets it: the default device, the
-- on-disk cache of compiled kernels (a second process compiles nothing; corrupt entries are
-- detected, ignored and rewritten; CACHELEVEL=0 turns it off) and the DEBUG ladder's output.
-- Scripts run in fresh `tcl` processes (the build's program), each with its own cache dir.
local helper = require "spec.support.helper"
local tcl = require "tcl"
-- The LLVM renderer (module tcl.llvm, src/codegen) is what the CPU device compiles with; until
-- it is built these specs are reported as skipped (pending), never as passed.
local HAVE_RENDERER = pcall(require, "tcl.llvm")
local Tensor = tcl.Tensor

local SCRIPT = [[
local a = Tensor.arange(1000):cast("float32") / 1000
local b = ((a * 2 + 1):exp() - a:sin()):sum()
local c = (a:reshape(10, 100):max(2) + 1):log()
print(string.format("%.6f %.6f", b:item(), c:sum():item()))
]]

local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -m 700 -p " .. helper.shell_quote(path)))
  return path
end

local script_path = os.tmpname()
helper.write(script_path, SCRIPT)

-- Runs the script; returns stdout, stderr and the compile counts of the DEBUG=1 lines.
local function run_script(vars)
  local env = {}
  for k, v in pairs(vars) do env[#env + 1] = k .. "=" .. helper.shell_quote(v) end
  table.sort(env)
  local status, out, err = helper.run("env -u DEVICE " .. table.concat(env, " ") .. " " ..
    helper.shell_quote(helper.tcl_bin) .. " " .. helper.shell_quote(script_path))
  assert(status == 0, "the script failed: " .. err)
  local compiled, from_disk = 0, 0
  for n in err:gmatch("(%d+) compiled") do compiled = compiled + tonumber(n) end
  for n in err:gmatch("(%d+) from disk") do from_disk = from_disk + tonumber(n) end
  return out, err, compiled, from_disk
end

local function files_in(dir)
  local pipe = io.popen("find " .. helper.shell_quote(dir) .. " -type f | sort")
  local list = {}
  for line in pipe:lines() do list[#list + 1] = line end
  pipe:close()
  return list
end

describe("the CPU device", function()
  if not HAVE_RENDERER then
    pending("needs the LLVM renderer (tcl.llvm), not built yet")
    return
  end
  it("is the default device", function()
    if os.getenv("DEVICE") then
      pending("DEVICE is set in this run")
      return
    end
    assert.are.equal("CPU", Tensor({ 1, 2 }).device)
    assert.are.equal("EMU", Tensor({ 1, 2 }, { device = "EMU" }).device)
  end)

  it("caches compiled kernels on disk: a second process compiles nothing", function()
    local dir = temp_dir()
    local out1, _, compiled1, disk1 = run_script { TCL_CACHE = dir, DEBUG = "1" }
    assert.is_true(compiled1 >= 3)
    assert.are.equal(0, disk1)
    assert.are.equal(compiled1, #files_in(dir))
    local out2, _, compiled2, disk2 = run_script { TCL_CACHE = dir, DEBUG = "1" }
    assert.are.equal(out1, out2)
    assert.are.equal(0, compiled2)
    assert.are.equal(compiled1, disk2)
    os.execute("rm -rf " .. helper.shell_quote(dir))
  end)

  it("ignores and rewrites corrupt, truncated and foreign entries", function()
    local dir = temp_dir()
    local out1, _, compiled1 = run_script { TCL_CACHE = dir, DEBUG = "1" }
    local files = files_in(dir)
    for i, path in ipairs(files) do
      local bytes = helper.read(path)
      if i % 3 == 1 then -- one byte flipped in the object code
        local at = #bytes // 2
        bytes = bytes:sub(1, at - 1) .. string.char((bytes:byte(at) + 1) % 256) .. bytes:sub(at + 1)
      elseif i % 3 == 2 then -- cut short
        bytes = bytes:sub(1, #bytes // 3)
      else -- another entry's file under this name
        bytes = helper.read(files[i == 1 and 2 or 1])
      end
      helper.write(path, bytes)
    end
    local out2, _, compiled2, disk2 = run_script { TCL_CACHE = dir, DEBUG = "1" }
    assert.are.equal(out1, out2)
    assert.are.equal(compiled1, compiled2)
    assert.are.equal(0, disk2)
    local _, _, compiled3 = run_script { TCL_CACHE = dir, DEBUG = "1" }
    assert.are.equal(0, compiled3) -- rewritten by the second run
    os.execute("rm -rf " .. helper.shell_quote(dir))
  end)

  it("writes nothing with CACHELEVEL=0", function()
    local dir = temp_dir()
    local _, _, compiled = run_script { TCL_CACHE = dir, DEBUG = "1", CACHELEVEL = "0" }
    assert.is_true(compiled >= 3)
    assert.are.same({}, files_in(dir))
    os.execute("rm -rf " .. helper.shell_quote(dir))
  end)

  it("shows the DEBUG ladder: runs, IR, ASTs, linear programs, assembly", function()
    local dir = temp_dir()
    local _, err2 = run_script { TCL_CACHE = dir, DEBUG = "2" }
    assert.matches("%*%*%* CPU%s+%S+%s+arg%s+%d+%s+tm", err2)
    assert.matches("%*%*%* total %d+ kernel runs", err2)
    local _, err4 = run_script { TCL_CACHE = dir, DEBUG = "4" }
    assert.matches("define void @tcl_%x+%(", err4)
    assert.matches("noalias", err4)
    local _, err7 = run_script { TCL_CACHE = dir, DEBUG = "7" }
    assert.matches("AST", err7)
    assert.matches("linear", err7)
    assert.matches("ret", err7) -- the machine code's return
    os.execute("rm -rf " .. helper.shell_quote(dir))
  end)
end)
