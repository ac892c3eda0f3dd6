-- spec/core/core_c_spec.lua — runs the C tests of the core layer (tests/c/) and checks that the
-- content hash of one fixed graph is the same in separate processes, from C and from Lua.
-- The programs are built with the project: <build>/tests/core_test and content_hash_print.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local tests_dir = helper.build_dir .. "/tests"
local core_test = tests_dir .. "/core_test"
local hash_printer = tests_dir .. "/content_hash_print"

local exists = helper.exists

-- Runs Lua code in a separate stock lua5.4 process that finds tcl through LUA_PATH/LUA_CPATH.
local function run_lua_process(code)
  local lua_path = helper.root .. "/lua/?.lua;" .. helper.root .. "/lua/?/init.lua"
  local lua_cpath = helper.build_dir .. "/lua/?.so"
  return helper.run("LUA_PATH=" .. q(lua_path) .. " LUA_CPATH=" .. q(lua_cpath) .. " lua5.4 -e " .. q(code))
end

local function fixed_graph_hash_from_lua(warmup)
  return run_lua_process(string.format(
    "local core = require 'tcl.core'\n" ..
    "local root = dofile(%q)(core, %d)\n" ..
    "io.write(root.content_hash, '\\n')", helper.root .. "/tests/fixed_graph.lua", warmup))
end

describe("the C tests of the core", function()
  it("are built", function()
    assert.is_true(exists(core_test), "missing " .. core_test)
    assert.is_true(exists(hash_printer), "missing " .. hash_printer)
  end)

  it("pass, and say so in the summary line", function()
    local status, stdout, stderr = helper.run(q(core_test) .. " " .. q(helper.root))
    assert.are.equal(0, status, stdout .. stderr)
    local passed, failed = stdout:match("core_test: (%d+) passed, (%d+) failed\n$")
    assert.is_not_nil(passed, "no summary line in:\n" .. stdout)
    assert.are.equal("0", failed)
    assert.is_true(tonumber(passed) >= 250, "only " .. passed .. " checks ran")
    assert.are.equal("", stderr)
  end)
end)

-- The hash content_hash_print prints (after `warmup` unrelated nodes), checked for form.
local function fixed_graph_hash_from_c(warmup)
  local status, stdout, stderr = helper.run(q(hash_printer) .. " " .. warmup)
  assert.are.equal(0, status, stderr)
  local hash = stdout:match("^(%x+)\n$")
  assert.is_not_nil(hash, "unexpected output: " .. stdout .. stderr)
  assert.are.equal(16, #hash)
  return hash
end

describe("the content hash of the fixed graph", function()
  it("is the same in two separate C processes whose node ids differ", function()
    assert.are.equal(fixed_graph_hash_from_c(0), fixed_graph_hash_from_c(2500))
  end)

  it("is the same when Lua builds the graph in a third process", function()
    local status, stdout, stderr = fixed_graph_hash_from_lua(100)
    assert.are.equal(0, status, stderr)
    local lua_hash = stdout:match("^(%x+)\n$")
    assert.is_not_nil(lua_hash, "unexpected output: " .. stdout .. stderr)
    assert.are.equal(fixed_graph_hash_from_c(0), lua_hash)
  end)

  it("is the same in this process, among other live nodes", function()
    local core = require "tcl.core"
    local root = dofile(helper.root .. "/tests/fixed_graph.lua")(core, 10)
    assert.are.equal(fixed_graph_hash_from_c(0), root.content_hash)
  end)

  it("changes when the graph does", function()
    local status, stdout, stderr = run_lua_process(
      "local core = require 'tcl.core'\n" ..
      "local root = dofile(" .. string.format("%q", helper.root .. "/tests/fixed_graph.lua") .. ")(core, 0)\n" ..
      "local src = root.src\n" ..
      "src[4] = core.uop('CONST', 'int32', nil, -8)\n" ..
      "io.write(core.uop(root.op, root.dtype, src, root.arg, root.tag).content_hash, '\\n')")
    assert.are.equal(0, status, stderr)
    local changed = stdout:match("^(%x+)\n$")
    assert.is_not_nil(changed, stdout .. stderr)
    assert.are_not.equal(fixed_graph_hash_from_c(0), changed)
  end)
end)
