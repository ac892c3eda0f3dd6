-- spec/runtime/cpu_program_spec.lua — runtime.cpu_program on its own: object code loaded by the
-- state's JIT, called through libffi, its parallel loop split across the pool, its code
-- unloaded with its last program. The object code here comes from a hand-written LLVM IR
-- kernel compiled by LLVM's llc (found next to llvm-config), independent of tcl's renderer.
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local helper = require "spec.support.helper"

local f32 = core.dtypes.float32

local IR = [[
define void @%s(ptr noalias align 64 %%out, ptr noalias align 64 %%a, i64 %%start, i64 %%end) {
entry:
  %%empty = icmp sge i64 %%start, %%end
  br i1 %%empty, label %%done, label %%loop
loop:
  %%i = phi i64 [ %%start, %%entry ], [ %%next, %%loop ]
  %%pa = getelementptr float, ptr %%a, i64 %%i
  %%v = load float, ptr %%pa
  %%s = call float @sinf(float %%v)
  %%w = fadd float %%s, %s
  %%po = getelementptr float, ptr %%out, i64 %%i
  store float %%w, ptr %%po
  %%next = add i64 %%i, 1
  %%c = icmp slt i64 %%next, %%end
  br i1 %%c, label %%loop, label %%done
done:
  ret void
}
declare float @sinf(float)
]]

local llc_path = helper.llc_path

-- Object code of the kernel `entry` adding `add` to sin of each element.
local function object_of(entry, add)
  local ll, obj = os.tmpname(), os.tmpname()
  local f = assert(io.open(ll, "w"))
  f:write(string.format(IR, entry, add))
  f:close()
  assert(os.execute(string.format("%s -O2 -filetype=obj %s -o %s", llc_path(), ll, obj)))
  f = assert(io.open(obj, "rb"))
  local bytes = f:read("a")
  f:close()
  os.remove(ll)
  os.remove(obj)
  return bytes
end

local function compiled(entry, add, n)
  return { object = object_of(entry, add), entry = entry, nparams = 2, parallel_size = n,
    params = { { dtype = f32, numel = n }, { dtype = f32, numel = n } } }
end

local function float32(x) return (string.unpack("f", string.pack("f", x))) end

describe("runtime.cpu_program", function()
  local n = 100000
  local inputs = {}
  for i = 1, n do inputs[i] = (i - n / 2) * 0.001 end

  local function run(program, threads_ok)
    local out, a = runtime.buffer(f32, n, "CPU"), runtime.buffer(f32, n, "CPU")
    a:write(inputs)
    local seconds = program:run { out, a }
    assert.is_true(seconds >= 0)
    if threads_ok ~= nil then assert.are.equal(threads_ok, program:parts(2) > 1) end
    return out:read()
  end

  it("runs a kernel that calls libm, split across the pool, as one call would", function()
    local p = runtime.cpu_program(compiled("tcl_spec_sin_plus_one", "1.0", n), { name = "sin1" })
    assert.are.equal("sin1", p.name)
    assert.are.equal(2, p.nparams)
    assert.are.equal(n, p.parallel_size)
    -- each iteration of the parallel (thread) axis is one part on the pool; one thread: one call
    assert.are.equal(n, p:parts(2))
    assert.are.equal(1, p:parts(1))
    local out = run(p, true)
    for i = 1, n, 997 do
      -- libm's sinf is within an ulp of the exact sine
      assert.is_true(math.abs(float32(math.sin(float32(inputs[i]))) + 1 - out[i]) <= 2 ^ -22)
    end
  end)

  it("shares the code of one entry and unloads it with its last program", function()
    collectgarbage()
    collectgarbage()
    local before = runtime.cpu_loaded()
    local c = compiled("tcl_spec_sin_plus_two", "2.0", n)
    local p1 = runtime.cpu_program(c, { name = "a" })
    local p2 = runtime.cpu_program(c, { name = "b" })
    assert.are.equal(before + 1, runtime.cpu_loaded())
    assert.are.same(run(p1), run(p2))
    p1 = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert.are.equal(before + 1, runtime.cpu_loaded())
    assert.is_true(math.abs(float32(math.sin(float32(inputs[1]))) + 2 - run(p2)[1]) <= 2 ^ -21)
    p2 = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert.are.equal(before, runtime.cpu_loaded())
  end)

  it("checks its buffers and its compiled description", function()
    local p = runtime.cpu_program(compiled("tcl_spec_checks", "1.0", n), { name = "checks" })
    local a = runtime.buffer(f32, n, "CPU")
    assert.has_error(function() p:run { a } end, "kernel 'checks' takes 2 buffers, got 1")
    assert.has_error(function() p:run { a, runtime.buffer(f32, n, "EMU") } end,
      "kernel 'checks': buffer 2 (slot 1) is on device EMU, not CPU")
    assert.has_error(function() p:run { a, runtime.buffer(f32, 3, "CPU") } end,
      "kernel 'checks': buffer 2 (slot 1) is float32 x 3, the kernel expects float32 x 100000")
    assert.has_error(function() p:run { a, 7 } end, "kernel 'checks': buffer 2 is a number, not a Buffer")
    local bad = compiled("tcl_spec_bad", "1.0", 4)
    bad.params = { bad.params[1] }
    assert.has_error(function() runtime.cpu_program(bad) end,
      "runtime.cpu_program: compiled.params must list the 2 params")
    local missing = compiled("tcl_spec_missing", "1.0", 4)
    missing.entry = "tcl_spec_not_defined"
    local ok, message = pcall(runtime.cpu_program, missing)
    assert.is_false(ok)
    assert.matches("runtime.cpu_program: CPU: loading kernel: .*tcl_spec_not_defined", message)
    local garbage = compiled("tcl_spec_garbage", "1.0", 4)
    garbage.object = "not an object file"
    assert.has_error(function() runtime.cpu_program(garbage) end)
  end)
end)
