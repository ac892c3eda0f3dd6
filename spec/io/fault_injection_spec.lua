-- spec/io/fault_injection_spec.lua — tcl's file writers under injected failures: safe_save
-- (runtime.replace_file), tcl.export's files and the kernel disk cache's entries. Each case runs
-- the `tcl` program with tests/fault/fault_inject.c preloaded (build/tests/libfault_inject.so),
-- which fails the n-th call of one kind among those made for the writer's files: the open of
-- the file or its temporary, a write (ENOSPC or EIO), a short write, fsync, close, rename,
-- a stream's fwrite or fclose, an allocation while the file is open. For n = 1..K and every
-- kind, the process must not crash; it either succeeds or reports an error naming the file (the
-- disk cache, a cache, just carries on); every file is then its complete old or complete new
-- content, never a part, and no temporary is left behind.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local SHIM = helper.build_dir .. "/tests/libfault_inject.so"

local SAVE = [[
local t = Tensor.new({ 1, 2, 3, 4, 5, 6 }, { dtype = "float32" }) * tonumber(arg[2])
tcl.nn.state.safe_save({ w = t:reshape(2, 3), b = Tensor.arange(tonumber(arg[2]) + 3) }, arg[1])
print("saved")
]]

local EXPORT = [[
local export = require "tcl.export"
Tensor.manual_seed(tonumber(arg[2]))
local model = tcl.nn.Sequential { tcl.nn.Linear(3, 4), Tensor.relu, tcl.nn.Linear(4, 2) }
local x = Tensor.new({ { 1, 2, 3 } }, { dtype = "float32" })
export.export(function(input) return model(input):softmax(-1) end, { x },
  { dir = arg[1], name = "fm", weights = arg[3], model = model })
print("exported")
]]

local CACHE = [[
local a = Tensor.arange(32):cast("float32") / 4
print(string.format("%.5f", ((a * 2 + 1):exp():log() - a:sin()):sum():item()))
]]

local tmp, scripts

local function sh(cmd)
  local status, out, err = helper.run(cmd)
  assert(status == 0, cmd .. ": " .. out .. err)
  return out
end

-- Runs the script under the shim (no fault when kind is nil); returns status, stdout, stderr,
-- and whether the fault fired.
local function run(script, args, kind, n, pattern, env)
  local log = tmp .. "/fault.log"
  os.remove(log)
  local vars = "env -u DEVICE " .. (env or "")
  if kind then
    vars = string.format("%s LD_PRELOAD=%s FAULT_PATH=%s FAULT_KIND=%s FAULT_N=%d FAULT_LOG=%s", vars, q(SHIM),
      q(pattern), kind, n, q(log))
  end
  local status, out, err = helper.run(vars .. " " .. q(helper.tcl_bin) .. " " .. q(scripts[script]) .. " " .. args)
  assert(status == 0 or status == 1, string.format("%s under %s #%d: exit status %d (a crash?)\n%s%s", script,
    tostring(kind), n or 0, status, out, err))
  return status, out, err, helper.exists(log)
end

local function same(a, b)
  for k, v in pairs(a) do
    if b[k] ~= v then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- The names in dir (ls -A), sorted, as one string.
local function listing(dir)
  return (sh("ls -A " .. q(dir)):gsub("\n$", ""))
end

describe("the file writers under injected faults", function()
  lazy_setup(function()
    tmp = sh("mktemp -d"):gsub("%s+$", "")
    scripts = { save = tmp .. "/save.lua", export = tmp .. "/export.lua", cache = tmp .. "/cache.lua" }
    helper.write(scripts.save, SAVE)
    helper.write(scripts.export, EXPORT)
    helper.write(scripts.cache, CACHE)
  end)
  lazy_teardown(function()
    if tmp and tmp:match("^/tmp/") then helper.run("rm -rf " .. q(tmp)) end
  end)

  local function skip_without_shim()
    if helper.build_type() == "Sanitize" then
      pending("the shim interposes malloc, which ASan's runtime owns: run against a Debug build")
      return true
    end
    assert.is_true(helper.exists(SHIM), "no " .. SHIM .. " (built with the project: tests/CMakeLists.txt)")
    return false
  end

  it("safe_save: the target is the old or the new file, an error names it, no temporary is left", function()
    if skip_without_shim() then return end
    local dir = tmp .. "/save"
    sh("mkdir " .. q(dir))
    local target = dir .. "/model.safetensors"
    run("save", q(target) .. " 2")
    local new = helper.read(target)
    run("save", q(target) .. " 1")
    local old = helper.read(target)
    assert.are_not.equal(old, new)
    local fired, failed = 0, 0
    for _, kind in ipairs { "open", "write", "eio", "short", "fsync", "close", "rename", "malloc" } do
      for n = 1, 4 do
        helper.write(target, old)
        local status, _, err, hit = run("save", q(target) .. " 2", kind, n, target)
        local now = helper.read(target)
        if status == 0 then
          assert.are.equal(new, now, kind .. " #" .. n)
        else
          assert.is_true(hit, kind .. " #" .. n .. " failed without a fault: " .. err)
          assert.matches("safe_save: cannot write '" .. target .. "': ", err, 1, true)
          assert.are.equal(old, now, kind .. " #" .. n .. " left a changed target")
          failed = failed + 1
        end
        if hit then fired = fired + 1 end
        assert.are.equal("model.safetensors", listing(dir), kind .. " #" .. n)
      end
    end
    assert.is_true(fired >= 8 and failed >= 8, fired .. " faults fired, " .. failed .. " saves failed")
  end)

  it("tcl.export: every file is the old or the new one, an error names the file, nothing is left over", function()
    if skip_without_shim() then return end
    for _, weights in ipairs { "embed", "safetensors" } do
      local dir = tmp .. "/export_" .. weights
      local function contents()
        local files = {}
        for name in listing(dir):gmatch("[^\n]+") do files[name] = helper.read(dir .. "/" .. name) end
        return files
      end
      run("export", q(dir) .. " 2 " .. weights)
      local new = contents()
      run("export", q(dir) .. " 1 " .. weights)
      local old = contents()
      local fired, failed, now = 0, 0, old
      for _, kind in ipairs { "open", "write", "eio", "short", "fsync", "close", "rename", "fwrite", "fclose" } do
        for n = 1, 5 do
          if not same(now, old) then run("export", q(dir) .. " 1 " .. weights) end -- back to the old export
          local status, _, err, hit = run("export", q(dir) .. " 2 " .. weights, kind, n, dir)
          now = contents()
          if status == 0 then
            assert.are.same(new, now, kind .. " #" .. n)
          else
            assert.is_true(hit, kind .. " #" .. n .. " failed without a fault: " .. err)
            assert.matches("export: ", err, 1, true)
            assert.is_truthy(err:find(dir, 1, true), "the error names no file: " .. err)
            failed = failed + 1
            -- each file whole: the old export's or the new one's (a failed move may mix them)
            for name, bytes in pairs(now) do
              assert.is_true(bytes == old[name] or bytes == new[name], kind .. " #" .. n .. ": partial " .. name)
            end
            for name in pairs(old) do assert.is_truthy(now[name], kind .. " #" .. n .. " removed " .. name) end
          end
          if hit then fired = fired + 1 end
        end
      end
      assert.is_true(fired >= 20 and failed >= 20, weights .. ": " .. fired .. " faults fired, " .. failed .. " failed")
    end
  end)

  it("the kernel disk cache: a failed entry write costs a recompile next time, never a wrong result", function()
    if skip_without_shim() then return end
    local fired = 0
    for _, kind in ipairs { "open", "write", "eio", "short", "close", "rename", "malloc" } do
      for n = 1, 3 do
        local cache = tmp .. "/cache_" .. kind .. n
        sh("mkdir -m 700 " .. q(cache))
        local env = "DEBUG=1 TCL_CACHE=" .. q(cache)
        local status, out, err, hit = run("cache", "", kind, n, cache, env)
        assert.are.equal(0, status, err)
        local total = 0
        for c in err:gmatch("(%d+) compiled") do total = total + tonumber(c) end
        if hit then fired = fired + 1 end
        assert.is_nil(listing(cache):find(".tmp", 1, true), kind .. " #" .. n .. " left a temporary")
        -- the next process: the same result, every kernel compiled again or read whole
        local status2, out2, err2 = run("cache", "", nil, nil, nil, env)
        assert.are.equal(0, status2)
        assert.are.equal(out, out2)
        local compiled, from_disk = 0, 0
        for c in err2:gmatch("(%d+) compiled") do compiled = compiled + tonumber(c) end
        for c in err2:gmatch("(%d+) from disk") do from_disk = from_disk + tonumber(c) end
        assert.are.equal(total, compiled + from_disk)
        assert.is_true(not hit or compiled >= 1 or kind == "short", kind .. " #" .. n)
      end
    end
    assert.is_true(fired >= 8, fired .. " faults fired")
  end)

  it("runtime.replace_file checks its chunks before it creates the temporary", function()
    if skip_without_shim() then return end
    local dir = tmp .. "/chunks"
    sh("mkdir " .. q(dir))
    local script = tmp .. "/chunks.lua"
    -- a number chunk used to be converted (an allocation) and a table's __index run, both with
    -- the temporary open: an error there left it behind
    helper.write(script, [[
local runtime = require "tcl.runtime"
local chunks = arg[2] == "number" and { "abc", 12345.5 } or setmetatable({ "abc" }, { __len = function() return 2 end,
  __index = function() error("chunk lookup") end })
runtime.replace_file(arg[1], chunks)
]])
    scripts.chunks = script
    local status, _, err = run("chunks", q(dir .. "/out.bin") .. " number", "malloc", 1, dir)
    assert.are.equal(1, status)
    assert.matches("runtime.replace_file: chunk 2 is not a string", err, 1, true)
    assert.are.equal("", listing(dir))
    -- the chunks are read raw: the metatable is not consulted
    status, _, err = run("chunks", q(dir .. "/out.bin") .. " metatable", "malloc", 1, dir)
    assert.are.equal(0, status, err)
    assert.are.equal("out.bin", listing(dir))
    assert.are.equal("abc", helper.read(dir .. "/out.bin"))
  end)
end)
