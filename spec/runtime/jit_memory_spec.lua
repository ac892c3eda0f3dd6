-- spec/runtime/jit_memory_spec.lua — the CPU JIT's code memory (src/runtime/cpu/jit_memory.c) and what
-- the in-memory kernel cache counts for it (tcl.codegen.driver.kernel_cache): kernels share a few
-- memory mappings, unloaded kernels give their memory back, a JIT out of code memory lets
-- the cache's kernels go and tries again, and a cache bound bounds the process's memory.
-- Linux only (/proc/self/maps, /proc/self/status).
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local helper = require "spec.support.helper"

local f32 = core.dtypes.float32

-- Anonymous executable mappings: where JIT code lives. Counting every mapping would also count
-- the allocator's own (ASan's allocator maps regions as the heap grows).
local function mappings()
  local n = 0
  for line in io.lines("/proc/self/maps") do
    local perms, path = line:match("^%S+%s+(%S+)%s+%S+%s+%S+%s+%S+%s*(.*)$")
    if perms:find("x", 1, true) and path == "" then n = n + 1 end
  end
  return n
end

local llc_path = helper.llc_path

-- Object code of a kernel out[i] = a[i] + 1 named `entry` (llc, independent of tcl's renderer).
local function object_of(entry)
  local ll, obj = os.tmpname(), os.tmpname()
  helper.write(ll, ([[
define void @ENTRY(ptr noalias %out, ptr noalias %a, i64 %start, i64 %end) {
entry:
  %empty = icmp sge i64 %start, %end
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %start, %entry ], [ %next, %loop ]
  %pa = getelementptr float, ptr %a, i64 %i
  %v = load float, ptr %pa
  %w = fadd float %v, 1.0
  %po = getelementptr float, ptr %out, i64 %i
  store float %w, ptr %po
  %next = add i64 %i, 1
  %c = icmp slt i64 %next, %end
  br i1 %c, label %loop, label %done
done:
  ret void
}
]]):gsub("ENTRY", entry))
  assert(os.execute(string.format("%s -O2 -filetype=obj %s -o %s", llc_path(), ll, obj)))
  local bytes = helper.read(obj)
  os.remove(ll)
  os.remove(obj)
  return bytes
end

local n = 4
local function compiled(object, entry)
  return { object = object, entry = entry, nparams = 2, parallel_size = n,
    params = { { dtype = f32, numel = n }, { dtype = f32, numel = n } } }
end

local function run(program)
  local out, a = runtime.buffer(f32, n, "CPU"), runtime.buffer(f32, n, "CPU")
  a:write { 1, 2, 3, 4 }
  program:run { out, a }
  return out:read()
end

-- A tcl script run by the tcl program in a fresh process without the on-disk kernel cache
-- (every kernel is compiled); its status, stdout and stderr.
local function tcl_script(source)
  local script = os.tmpname()
  helper.write(script, source)
  local status, out, err = helper.run("CACHELEVEL=0 timeout 120 " .. helper.shell_quote(helper.tcl_bin) .. " " ..
    helper.shell_quote(script))
  os.remove(script)
  return status, out, err
end

describe("the CPU JIT's code memory", function()
  it("loads 2,000 distinct kernels into a few memory mappings and frees them when unloaded", function()
    -- one object compiled by llc, its entry renamed in place (same length): 2,000 distinct objects
    local template = "tcl_spec_slab_0000"
    local object = object_of(template)
    -- the JIT exists and has its first slab before the count
    local first = runtime.cpu_program(compiled(object, template), { name = template })
    collectgarbage()
    local before, used_before = mappings(), runtime.cpu_jit_stats().used_bytes
    local programs = {}
    for i = 1, 2000 do
      local entry = string.format("tcl_spec_slab_%04d", i)
      programs[i] = runtime.cpu_program(compiled((object:gsub(template, entry)), entry), { name = entry })
    end
    assert.is_true(before >= 1, "the first slab is an executable mapping")
    local grown = mappings() - before
    assert.is_true(grown <= 20, string.format("2,000 kernels added %d executable memory mappings", grown))
    assert.are.same({ 2, 3, 4, 5 }, run(programs[1]))
    assert.are.same({ 2, 3, 4, 5 }, run(programs[2000]))
    local stats = runtime.cpu_jit_stats()
    assert.is_true(stats.objects >= 2000)
    local slabs = stats.slabs
    -- each program counts its code in the JIT, the linker's share and its struct (the JIT may
    -- hold other specs' kernels too: only these 2,000 objects' bytes are averaged)
    local used_each = (stats.used_bytes - used_before) // 2000
    assert.is_true(programs[1].bytes >= used_each + 512, programs[1].bytes .. " bytes, " .. used_each .. " in the JIT")
    programs = nil -- luacheck: ignore 311
    collectgarbage()
    collectgarbage()
    assert.is_true(runtime.cpu_jit_stats().objects <= stats.objects - 2000)
    assert.is_true(runtime.cpu_jit_stats().used_bytes < stats.used_bytes)
    assert.is_true(runtime.cpu_jit_stats().slabs <= slabs)
    assert.are.same({ 2, 3, 4, 5 }, run(first))
  end)

  it("refuses a load past its bound with a clear error, and loads again once there is room", function()
    local status, out, err = tcl_script([[
local runtime = require "tcl.runtime"
local lower = require "tcl.codegen.driver.lower"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"
-- one slab of 16 KiB: room for a few dozen kernels
runtime.cpu_jit_limit(16 * 1024)
local x = Tensor({ 1, 2, 3, 4 }):realize()
-- the kernel cache keeps what it compiled; when the JIT is full it lets its kernels go and
-- loads again: every value is right and nothing fails
local bad = 0
for i = 1, 150 do
  local y = (x + i):tolist()
  if y[4] ~= 4 + i then bad = bad + 1 end
end
local st = kernel_cache.stats()
print("ok", bad, st.evictions > 0, runtime.cpu_jit_stats().slabs)
-- kernels the program holds (execution plans keep theirs) cannot be let go: the load fails,
-- naming the kernel and the bound
local held = {}
local ok, message = pcall(function()
  for i = 1, 150 do
    held[i] = tcl.jit(function(a) return a * (i + 0.5) end)
    held[i](x)
    held[i](x)
  end
end)
print("held", ok, message)
-- not a poisoned state: once the kernels are gone, loads work again
held = nil
collectgarbage()
print("again", (x - 1000):tolist()[4])
]])
    assert.are.equal(0, status, err)
    local ok_line = out:match("ok[^\n]*")
    assert.are.equal("ok\t0\ttrue\t1", ok_line)
    assert.matches("held\tfalse\tkernel '[^']+': CPU: no memory for kernel code: the JIT's code memory is at its " ..
      "bound %(%d+ KiB in 1 slab, bound 16 KiB%) %(even after the kernel cache let its kernels go%)", out)
    assert.matches("again\t%-996\n", out)
  end)
end)

describe("the kernel cache's bound", function()
  it("counts what an entry costs the process, so that a small bound bounds the memory", function()
    local status, out, err = tcl_script([[
local runtime = require "tcl.runtime"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"
local function rss()
  local f = assert(io.open("/proc/self/status"))
  local kb = f:read("a"):match("VmRSS:%s*(%d+)")
  f:close()
  return tonumber(kb) * 1024
end
local limit = 1 << 20
kernel_cache.set_limit(limit)
local x = Tensor({ 1, 2, 3, 4 }):realize()
for i = 1, 100 do (x + i):realize() end -- the allocators warm up
collectgarbage()
local before = rss()
for i = 101, 1100 do (x + i):realize() end
collectgarbage()
local st = kernel_cache.stats()
print(string.format("entries %d bytes %d evictions %d grown %d", st.entries, st.bytes, st.evictions, rss() - before))
local jit = runtime.cpu_jit_stats()
print(string.format("code %d", jit.used_bytes // jit.objects))
]])
    local entries, bytes, evictions, grown = out:match("entries (%d+) bytes (%d+) evictions (%d+) grown (%-?%d+)")
    entries, bytes, evictions, grown = tonumber(entries), tonumber(bytes), tonumber(evictions), tonumber(grown)
    -- 1,000 kernels through a bound that holds about 150: the process grew by about the bound
    -- (about 7 MiB without it). ASan keeps freed memory in quarantine: no bound on RSS there.
    if helper.build_type() ~= "Sanitize" then assert.is_true(grown <= 4 << 20, out) end
    assert.are.equal(0, status, err)
    local code = tonumber(out:match("code (%d+)"))
    assert.is_true(bytes <= 1 << 20)
    assert.is_true(evictions >= 800, out)
    -- an entry counts at least its code, its object code and a share for its tables
    assert.is_true(bytes // entries >= code + 4096, out)
  end)
end)
