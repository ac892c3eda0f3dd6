-- spec/project/busted_wrapper_spec.lua — scripts/busted, the documented way to run one spec file
-- (docs/guide/contributing.md): it runs busted under lua5.4 with test.sh's report and settings,
-- and plain `busted` (Debian's, started by Lua 5.1) re-runs itself under lua5.4 (.busted).
local helper = require "spec.support.helper"
local q = helper.shell_quote

local function with_tiny_spec(body)
  -- a tiny spec file in a directory of its own (not in spec/, which a parallel run may be reading)
  local dir = helper.fresh_dir_path()
  assert(os.execute("mkdir -p " .. q(dir)))
  local name = dir .. "/tiny_spec.lua"
  local path = name
  helper.write(path, 'describe("tiny", function()\n'
    .. '  it("runs under Lua 5.4", function() assert.are.equal("Lua 5.4", _VERSION) end)\n'
    .. '  it("sees the settings", function() assert.is_truthy(os.getenv("TCL_CACHE")) end)\n'
    .. '  it("loads tcl.so", function() assert.are.equal(6, require("tcl").Tensor({1, 2, 3}):sum():item()) end)\n'
    .. 'end)\n')
  local ok, err = pcall(body, name)
  os.execute("rm -rf " .. q(dir))
  if not ok then error(err, 0) end
end

describe("scripts/busted", function()
  it("runs one spec file and ends with the summary line", function()
    with_tiny_spec(function(name)
      local status, out = helper.run(string.format("cd %s && env -u TCL_CACHE TCL_BUILD_DIR=%s scripts/busted %s",
        q(helper.root), q(helper.build_dir), q(name)))
      assert.are.equal(0, status, out)
      local last = out:match("([^\n]*)\n?$")
      assert.are.equal("tclc-summary passed=3 failed=0 errors=0 pending=0", last)
    end)
  end)

  it("says where the build is missing", function()
    local status, _, err = helper.run(string.format("cd %s && TCL_BUILD_DIR=/nonexistent scripts/busted",
      q(helper.root)))
    assert.are.equal(2, status)
    assert.is_truthy(err:find("scripts/busted: no build in /nonexistent (no lua/tcl.so)", 1, true))
  end)

  it("lets plain busted started by another Lua run under lua5.4", function()
    if not os.execute("command -v lua5.1 >/dev/null 2>&1") then
      pending("no lua5.1 here")
      return
    end
    with_tiny_spec(function(name)
      local status, out = helper.run(string.format("cd %s && TCL_BUILD_DIR=%s TCL_CACHE=$(mktemp -d) lua5.1 "
        .. "/usr/bin/busted -o spec/support/summary_output.lua %s", q(helper.root), q(helper.build_dir), q(name)))
      assert.are.equal(0, status, out)
      assert.is_truthy(out:find("tclc-summary passed=3 failed=0", 1, true), out)
    end)
  end)
end)
