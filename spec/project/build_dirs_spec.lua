-- spec/project/build_dirs_spec.lua — running the tests never turns quickstart's Release build/ into a
-- Debug build (issue 34): scripts/quickstart.sh configures Release in build/, scripts/test.sh
-- uses build-debug/ (and build-asan/, build-tsan/). Both scripts run in a copy of the tree with
-- stand-ins for cmake, luacheck, lua5.4 and setup.sh that record what they were asked to do,
-- so nothing is built: the check is which directory gets which build type.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local SHIMS = {
  cmake = [[#!/bin/sh
echo "cmake $*" >> "$SHIM_LOG"
if [ "$1" = "-S" ]; then
  mkdir -p "$4"; echo "CMAKE_BUILD_TYPE:STRING=${5#-DCMAKE_BUILD_TYPE=}" > "$4/CMakeCache.txt"
fi
exit 0
]],
  luacheck = "#!/bin/sh\necho 'Total: 0 warnings / 0 errors in 1 file'\n",
  ["lua5.4"] = '#!/bin/sh\necho "lua5.4 TCL_BUILD_DIR=$TCL_BUILD_DIR" >> "$SHIM_LOG"\n'
    .. 'echo "tclc-summary passed=1 failed=0 errors=0 pending=0"\n',
}

local function build_type(dir)
  local f = io.open(dir .. "/CMakeCache.txt")
  if not f then return nil end
  local t = f:read("a"):match("CMAKE_BUILD_TYPE:STRING=(%w+)")
  f:close()
  return t
end

describe("build directories", function()
  it("scripts/test.sh --quick leaves quickstart's Release build/ as it is", function()
    local work = helper.fresh_dir_path()
    local tree, shims = work .. "/tree", work .. "/shims"
    assert(os.execute(string.format("mkdir -p %s %s && cp -r %s/scripts %s/.luacheckrc %s/ && mkdir %s/spec "
      .. "&& cp -r %s/spec/support %s/spec/", q(tree), q(shims), q(helper.root), q(helper.root), q(tree), q(tree),
      q(helper.root), q(tree))))
    helper.write(tree .. "/scripts/setup.sh", "#!/bin/sh\nexit 0\n")
    for name, text in pairs(SHIMS) do helper.write(shims .. "/" .. name, text) end
    assert(os.execute("chmod +x " .. q(shims) .. "/* " .. q(tree) .. "/scripts/setup.sh"))
    local env = string.format("cd %s && SHIM_LOG=%s/log PATH=%s:$PATH", q(tree), q(work), q(shims))
    helper.run(env .. " scripts/quickstart.sh")  -- fails at its end: no build/tcl was built
    assert.are.equal("Release", build_type(tree .. "/build"))
    local status, out = helper.run(env .. " scripts/test.sh --quick")
    local log = helper.read(work .. "/log")
    local after, debug = build_type(tree .. "/build"), build_type(tree .. "/build-debug")
    os.execute("rm -rf " .. q(work))
    assert.are.equal(0, status, out)
    assert.are.equal("Release", after)
    assert.are.equal("Debug", debug)
    assert.is_truthy(log:find("cmake -S . -B build-debug -DCMAKE_BUILD_TYPE=Debug", 1, true), log)
    assert.is_falsy(log:find("-B build -DCMAKE_BUILD_TYPE=Debug", 1, true), log)
    assert.is_truthy(log:find("lua5.4 TCL_BUILD_DIR=" .. tree .. "/build-debug", 1, true), log)
  end)
end)
