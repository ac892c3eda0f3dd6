-- spec/runtime/threads_spec.lua — several tcl states realizing at once on threads, through the public C
-- API: runs <build>/tests/states_on_threads (tests/c/states_on_threads.c), which checks every
-- thread's results against a single-threaded run and the live node counts. Under the Sanitize
-- build it runs with ASan + UBSan; scripts/test.sh also runs it built with ThreadSanitizer.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local program = helper.build_dir .. "/tests/states_on_threads"

describe("several states on threads", function()
  it("realize the same values as one state alone, with bounded live nodes", function()
    local status, stdout, stderr = helper.run(q(program) .. " 4 60")
    assert.are.equal(0, status, stdout .. stderr)
    local passed, failed = stdout:match("states_on_threads: (%d+) passed, (%d+) failed\n$")
    assert.are.equal("0", failed, stdout)
    assert.are.equal(32, tonumber(passed), stdout) -- 2 checks + 4 per thread + 14 state misuses
  end)
end)
