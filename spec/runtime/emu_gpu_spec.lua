-- spec/runtime/emu_gpu_spec.lua — EMU's GPU mode (src/runtime/emu/emu_*.c; docs/design/encodings.md, "GPU-shaped
-- kernels") through "tcl.runtime": programs built by hand from SPECIAL, DEFINE_LOCAL, BARRIER and
-- AFTER nodes run a grid of workgroups whose threads go in lockstep between barriers; their
-- values are checked against naive Lua, and races, barrier divergence, unwritten local memory and
-- the launch's limits are errors naming the kernel.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local rt = require "tcl.runtime"

local u = tcl.uop
local kernels = require "spec.support.kernels"
local IDX, I32, F32 = tcl.dtype "index", tcl.dtype "int32", tcl.dtype "float32"

local error_of = helper.error_of

local function run_error(p, bufs) return error_of(p.run, p, bufs) end

-- A linear program under construction: add() builds a node and appends it once, so the list
local builder = kernels.builder -- a linear program: list, add(op, dtype, src, arg)

-- The node helpers of one program.
local function kit(add)
  local k = {}
  function k.c(v, dt) return add("CONST", dt or IDX, nil, v) end
  function k.special(name, size) return add("SPECIAL", IDX, { k.c(size) }, name) end
  function k.add(a, b) return add("ADD", a.dtype, { a, b }) end
  function k.mul(a, b) return add("MUL", a.dtype, { a, b }) end
  function k.eq(a, b) return add("CMPEQ", tcl.dtype "bool", { a, b }) end
  function k.lt(a, b) return add("CMPLT", tcl.dtype "bool", { a, b }) end
  function k.cast(dt, x) return add("CAST", dt, { x }) end
  function k.at(buf, i) return add("INDEX", buf.dtype, { buf, i }) end
  function k.load(buf, i, gate) return add("LOAD", buf.dtype, { k.at(buf, i), gate }) end
  function k.store(buf, i, v, gate) return add("STORE", nil, { k.at(buf, i), v, gate }) end
  function k.barrier(...) return add("BARRIER", nil, { ... }) end
  function k.after(buf, ...) return add("AFTER", buf.dtype, { buf, ... }) end
  function k.range(n, id) return add("RANGE", IDX, { type(n) == "number" and k.c(n) or n }, { id or 0, "loop" }) end
  function k.close(dep, r) return add("END", nil, { dep, r }) end
  return k
end

local function filled(dt, xs)
  local b = rt.buffer(dt, #xs)
  b:write(xs)
  return b
end

-- deterministic small integers, so sums are exact and failures reproduce
local function integers(n, seed)
  local out, state = {}, seed
  for i = 1, n do
    state = (state * 1103515245 + 12345) % 2147483648
    out[i] = state % 2001 - 1000
  end
  return out
end

-- out[g] = the sum of inp[g*threads .. g*threads + threads-1], a workgroup per g: every thread
-- stores its element in local memory; (a BARRIER;) thread 0 adds them up in a register and
-- stores the sum. Without the barrier, thread 0's loads read local memory directly.
-- barrier_arg: the BARRIER's arg (copy groups it leaves in flight; this kernel has no copies).
local function reduce_program(groups, threads, with_barrier, barrier_arg)
  local list, add = builder()
  local k = kit(add)
  local out = add("PARAM", I32, nil, { 0, groups })
  local inp = add("PARAM", I32, nil, { 1, groups * threads })
  local buf = add("DEFINE_LOCAL", I32, nil, { 0, threads })
  local acc = add("DEFINE_REG", I32, nil, { 0, 1 })
  local g, l = k.special("gidx0", groups), k.special("lidx0", threads)
  local first = k.eq(l, k.c(0))
  local st = k.store(buf, l, k.load(inp, k.add(k.mul(g, k.c(threads)), l)))
  local seen = buf
  if with_barrier then seen = k.after(buf, add("BARRIER", nil, { st }, barrier_arg)) end
  local zero = k.c(0)
  k.store(acc, zero, k.c(0, I32))
  local r = k.range(threads)
  local sum = k.add(k.load(acc, zero), k.load(seen, r, first))
  local e = k.close(k.store(acc, zero, sum), r)
  k.store(out, g, k.load(k.after(acc, e), zero), first)
  return rt.program(list, { name = "group_sum" })
end

local function group_sums(xs, groups, threads)
  local want = {}
  for g = 1, groups do
    local s = 0
    for t = 1, threads do s = s + xs[(g - 1) * threads + t] end
    want[g] = s
  end
  return want
end

describe("EMU's GPU mode", function()
  describe("runs a grid of workgroups", function()
    it("elementwise over gidx and lidx in 2 dims", function()
      -- out[i] = a[i] * 3 + (gidx1 * 100 + lidx1), i = ((gidx1*L1 + lidx1) * G0*L0) + gidx0*L0 + lidx0
      local G0, G1, L0, L1 = 3, 2, 4, 5
      local n = G0 * G1 * L0 * L1
      local list, add = builder()
      local k = kit(add)
      local out, a = add("PARAM", I32, nil, { 0, n }), add("PARAM", I32, nil, { 1, n })
      local g0, g1 = k.special("gidx0", G0), k.special("gidx1", G1)
      local l0, l1 = k.special("lidx0", L0), k.special("lidx1", L1)
      local row = k.add(k.mul(g1, k.c(L1)), l1)
      local i = k.add(k.mul(row, k.c(G0 * L0)), k.add(k.mul(g0, k.c(L0)), l0))
      local v = k.add(k.mul(k.load(a, i), k.c(3, I32)), k.cast(I32, k.add(k.mul(g1, k.c(100)), l1)))
      k.store(out, i, v)
      local p = rt.program(list, { name = "grid" })
      assert.same({ G0, G1, 1 }, p.global_size)
      assert.same({ L0, L1, 1 }, p.local_size)
      local xs = integers(n, 1)
      local ob = rt.buffer(I32, n)
      p:run { ob, filled(I32, xs) }
      local want = {}
      for r = 0, G1 * L1 - 1 do
        for col = 0, G0 * L0 - 1 do
          local idx = r * G0 * L0 + col
          want[idx + 1] = xs[idx + 1] * 3 + (r // L1) * 100 + r % L1
        end
      end
      assert.same(want, ob:read())
      -- a second run starts with clean race checking
      p:run { ob, filled(I32, xs) }
      assert.same(want, ob:read())
    end)

    it("lets a thread read and write its own elements of global memory", function()
      local list, add = builder()
      local k = kit(add)
      local x = add("PARAM", F32, nil, { 0, 8 })
      local i = k.add(k.mul(k.special("gidx0", 2), k.c(4)), k.special("lidx0", 4))
      local st = k.store(x, i, k.add(k.load(x, i), k.c(0.5, F32)))
      local seen = k.after(x, st) -- the value this thread stored
      k.store(seen, i, k.mul(k.load(seen, i), k.c(2.0, F32)))
      local xb = filled(F32, { 0, 1, 2, 3, 4, 5, 6, 7 })
      rt.program(list, { name = "in_place" }):run { xb }
      assert.same({ 1, 3, 5, 7, 9, 11, 13, 15 }, xb:read())
    end)

    it("reduces a workgroup through local memory and a barrier, exactly, for several sizes", function()
      for _, threads in ipairs { 1, 2, 5, 64, 1024 } do
        local groups = 3
        local p = reduce_program(groups, threads, true)
        assert.equals(threads * 4, p.local_bytes)
        assert.equals(1, p.nbarriers)
        local xs = integers(groups * threads, threads)
        local ob = rt.buffer(I32, groups)
        p:run { ob, filled(I32, xs) }
        assert.same(group_sums(xs, groups, threads), ob:read(), "threads " .. threads)
      end
    end)

    it("runs a barrier inside a loop (a tree reduction), keeping each thread's loop state", function()
      for _, threads in ipairs { 2, 8, 256 } do
        local groups = 2
        local list, add = builder()
        local k = kit(add)
        local out = add("PARAM", I32, nil, { 0, groups })
        local inp = add("PARAM", I32, nil, { 1, groups * threads })
        local buf = add("DEFINE_LOCAL", I32, nil, { 0, threads })
        local g, l = k.special("gidx0", groups), k.special("lidx0", threads)
        local first = k.eq(l, k.c(0))
        local seen = k.after(buf, k.barrier(k.store(buf, l, k.load(inp, k.add(k.mul(g, k.c(threads)), l)))))
        local steps = math.floor(math.log(threads, 2) + 0.5)
        local r = k.range(steps)
        local stride = add("SHR", IDX, { k.c(threads // 2), r }) -- threads/2, threads/4, ..., 1
        local active = k.lt(l, stride)
        local sum = k.add(k.load(seen, l, active), k.load(seen, k.add(l, stride), active))
        local e = k.close(k.barrier(k.store(seen, l, sum, active)), r)
        k.store(out, g, k.load(k.after(buf, e), k.c(0), first), first)
        local p = rt.program(list, { name = "tree_sum" })
        local xs = integers(groups * threads, 7 + threads)
        local ob = rt.buffer(I32, groups)
        p:run { ob, filled(I32, xs) }
        assert.same(group_sums(xs, groups, threads), ob:read(), "threads " .. threads)
        assert.matches("(kept across barriers)", p:dump(), 1, true)
      end
    end)

    it("keeps each thread's registers and register arrays across a barrier", function()
      -- before the barrier: v = a[i] * 3, reg[0] = lidx * 10; after it: out[i] = v + reg[0] + local[lidx ^ 1]
      local list, add = builder()
      local k = kit(add)
      local out, a = add("PARAM", I32, nil, { 0, 8 }), add("PARAM", I32, nil, { 1, 8 })
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 4 })
      local reg = add("DEFINE_REG", I32, nil, { 0, 1 })
      local l = k.special("lidx0", 4)
      local i = k.add(k.mul(k.special("gidx0", 2), k.c(4)), l)
      local v = k.mul(k.load(a, i), k.c(3, I32))
      local st_reg = k.store(reg, k.c(0), k.cast(I32, k.mul(l, k.c(10))))
      local b = k.barrier(k.store(buf, l, v), st_reg)
      local mate = add("XOR", IDX, { l, k.c(1) })
      k.store(out, i, k.add(k.add(v, k.load(k.after(reg, b), k.c(0))), k.load(k.after(buf, b), mate)))
      local p = rt.program(list, { name = "keep" })
      local xs = { 1, 2, 3, 4, 5, 6, 7, 8 }
      local ob = rt.buffer(I32, 8)
      p:run { ob, filled(I32, xs) }
      local want = {}
      for idx = 0, 7 do
        local lid, base = idx % 4, idx - idx % 4
        want[idx + 1] = xs[idx + 1] * 3 + lid * 10 + xs[base + (lid ~ 1) + 1] * 3
      end
      assert.same(want, ob:read())
    end)

    it("keeps a value from before a loop that the loop reads before its barriers", function()
      -- v = lidx * 7 before the loop; each iteration: buf[lidx] = v + r; barrier;
      -- out[r*4 + lidx] = buf[(lidx + 1) % 4]; barrier. v is read again after the barriers of
      -- the iteration before, by a thread that shares its register file with the others
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 12 })
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 4 })
      local l = k.special("lidx0", 4)
      local v = k.cast(I32, k.mul(l, k.c(7)))
      local r = k.range(3)
      local b1 = k.barrier(k.store(buf, l, k.add(v, k.cast(I32, r))))
      local mate = add("MOD", IDX, { k.add(l, k.c(1)), k.c(4) })
      local st = k.store(out, k.add(k.mul(r, k.c(4)), l), k.load(k.after(buf, b1), mate))
      k.close(k.barrier(st), r)
      local ob = rt.buffer(I32, 12)
      rt.program(list, { name = "loop_keep" }):run { ob }
      local want = {}
      for it_ = 0, 2 do
        for t = 0, 3 do want[it_ * 4 + t + 1] = ((t + 1) % 4) * 7 + it_ end
      end
      assert.same(want, ob:read())
    end)

    it("gives every workgroup its own local memory", function()
      -- only group 0 writes local memory; group 1 reads what it never wrote
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 2 })
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 1 })
      local g = k.special("gidx0", 2)
      local b = k.barrier(k.store(buf, k.c(0), k.c(7, I32), k.eq(g, k.c(0))))
      k.store(out, g, k.load(k.after(buf, b), k.c(0)))
      local p = rt.program(list, { name = "own_local" })
      assert.matches("kernel 'own_local': instruction %d+ %(LOAD%): reads element 0 of DEFINE_LOCAL slot 0, which "
        .. "no thread of the workgroup has written %(uninitialized local memory%) %(thread gidx %(1,0,0%) lidx "
        .. "%(0,0,0%)%)",
        run_error(p, { rt.buffer(I32, 2) }))
    end)
  end)

  describe("reports races naming the kernel, instruction, memory, element and both threads", function()
    it("a read of local memory before the barrier that orders it", function()
      local p = reduce_program(2, 4, false)
      local err = run_error(p, { rt.buffer(I32, 2), filled(I32, integers(8, 3)) })
      assert.matches("kernel 'group_sum': instruction %d+ %(STORE%): race: thread gidx %(0,0,0%) lidx %(1,0,0%) writes "
        .. "element 1 of DEFINE_LOCAL slot 0, which thread gidx %(0,0,0%) lidx %(0,0,0%) read with no barrier "
        .. "between them", err)
      assert.matches("barrier", err, 1, true)
      -- a later thread reading what an earlier one wrote
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 2 })
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 2 })
      local l = k.special("lidx0", 2)
      k.store(buf, l, k.c(1, I32))
      k.store(out, l, k.load(buf, k.c(0)))
      assert.matches("instruction 9 (LOAD): race: thread gidx (0,0,0) lidx (1,0,0) reads element 0 of DEFINE_LOCAL "
        .. "slot 0, which thread gidx (0,0,0) lidx (0,0,0) wrote with no barrier between them (a read before the "
        .. "barrier that orders it)", run_error(rt.program(list, { name = "raw" }), { rt.buffer(I32, 2) }), 1, true)
    end)

    it("two writes of one local element with no barrier between them", function()
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 2 })
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 1 })
      local l = k.special("lidx0", 2)
      local b = k.barrier(k.store(buf, k.c(0), k.cast(I32, l)))
      k.store(out, l, k.load(k.after(buf, b), k.c(0)))
      assert.matches("(STORE): race: thread gidx (0,0,0) lidx (1,0,0) writes element 0 of DEFINE_LOCAL slot 0, which "
        .. "thread gidx (0,0,0) lidx (0,0,0) also wrote with no barrier between them",
        run_error(rt.program(list, { name = "waw" }), { rt.buffer(I32, 2) }), 1, true)
    end)

    it("two threads storing one global element, even the same value", function()
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 4 })
      k.special("gidx0", 3)
      k.store(out, k.c(2), k.c(1, I32))
      local p = rt.program(list, { name = "same_store" })
      assert.matches("kernel 'same_store': instruction 6 (STORE): race: thread gidx (1,0,0) lidx (0,0,0) writes "
        .. "element 2 of PARAM slot 0, which thread gidx (0,0,0) lidx (0,0,0) also wrote in the same launch",
        run_error(p, { rt.buffer(I32, 4) }), 1, true)
    end)

    it("a thread reading a global element another thread stored, in either order", function()
      -- out[i] = i, then thread i reads out[i - 1]: thread 1 reads what thread 0 wrote
      local list, add = builder()
      local k = kit(add)
      local out, res = add("PARAM", I32, nil, { 0, 4 }), add("PARAM", I32, nil, { 1, 4 })
      local i = k.special("lidx0", 4)
      local b = k.barrier(k.store(out, i, k.cast(I32, i)))
      local prev = k.load(k.after(out, b), k.add(i, k.c(-1)), k.lt(k.c(0), i))
      k.store(res, i, prev)
      local p = rt.program(list, { name = "neighbour" })
      assert.matches("(LOAD): race: thread gidx (0,0,0) lidx (1,0,0) reads element 0 of PARAM slot 0, which thread "
        .. "gidx (0,0,0) lidx (0,0,0) wrote in the same launch", run_error(p, { rt.buffer(I32, 4), rt.buffer(I32, 4) }),
        1, true)
      -- thread i reads out[i + 1] before thread i + 1 stores it: found at the store
      list, add = builder()
      k = kit(add)
      out = add("PARAM", I32, nil, { 0, 4 })
      local g = k.special("gidx0", 4)
      local next_one = k.load(out, k.add(g, k.c(1)), k.lt(g, k.c(3)))
      k.store(out, g, k.add(next_one, k.c(1, I32)))
      p = rt.program(list, { name = "shift" })
      assert.matches("(STORE): race: thread gidx (1,0,0) lidx (0,0,0) writes element 1 of PARAM slot 0, which thread "
        .. "gidx (0,0,0) lidx (0,0,0) read in the same launch", run_error(p, { rt.buffer(I32, 4) }), 1, true)
    end)

    it("through two slots given the same buffer", function()
      local list, add = builder()
      local k = kit(add)
      local out, inp = add("PARAM", I32, nil, { 0, 4 }), add("PARAM", I32, nil, { 1, 4 })
      local g = k.special("gidx0", 4)
      k.store(out, g, k.load(inp, k.add(k.c(3), k.mul(g, k.c(-1)))))
      local p = rt.program(list, { name = "flip" })
      local a = filled(I32, { 1, 2, 3, 4 })
      local ob = rt.buffer(I32, 4)
      p:run { ob, a } -- distinct buffers: no race
      assert.same({ 4, 3, 2, 1 }, ob:read())
      -- the same buffer as both: thread 2 reads a[1], which thread 1 wrote
      assert.matches("(LOAD): race: thread gidx (2,0,0) lidx (0,0,0) reads element 1 of PARAM slot 1, which thread "
        .. "gidx (1,0,0) lidx (0,0,0) wrote in the same launch", run_error(p, { a, a }), 1, true)
    end)
  end)

  describe("runs asynchronous copies (STORE {\"async\", n}) that land at the barrier that waits for them", function()
    -- 2 threads; thread l copies 4 elements of inp at 4*l into local memory; then (after a
    -- barrier, or not) it writes element `read(l)` of the local tile to out[l]
    local function copy_program(name, with_barrier, read, offset)
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 2 })
      local inp = add("PARAM", I32, nil, { 1, 9 })
      local tile = add("DEFINE_LOCAL", I32, nil, { 0, 9 })
      local l = k.special("lidx0", 2)
      local at = k.add(k.mul(l, k.c(4)), k.c(offset or 0))
      local copy = add("STORE", nil, { k.at(tile, at), k.load(inp, at) }, { "async", 4 })
      local seen = with_barrier and k.after(tile, k.barrier(copy)) or tile
      k.store(out, l, k.load(seen, read(k, l)))
      return rt.program(list, { name = name })
    end

    it("each thread's copy seen by the others after the barrier", function()
      local p = copy_program("copied", true, function(k, l) return k.add(k.mul(k.add(k.c(1), k.mul(l, k.c(-1))),
        k.c(4)), k.c(3)) end)
      local out = rt.buffer(I32, 2)
      p:run { out, filled(I32, { 10, 11, 12, 13, 14, 15, 16, 17, 18 }) }
      assert.are.same({ 17, 13 }, out:read()) -- thread 0 reads element 7 (thread 1's), thread 1 element 3
    end)

    it("a read before that barrier is a race, even of the thread's own copy", function()
      local p = copy_program("early", false, function(k, l) return k.mul(l, k.c(4)) end)
      assert.matches("kernel 'early': instruction %d+ %(LOAD%): race: thread gidx %(0,0,0%) lidx %(0,0,0%) reads "
        .. "element 0 of DEFINE_LOCAL slot 0, which an asynchronous copy of thread gidx %(0,0,0%) lidx %(0,0,0%) "
        .. "wrote, and no barrier since has waited for it %(0 barriers passed since the copy; a barrier with arg n "
        .. "lands every group of copies but the n newest",
        run_error(p, { rt.buffer(I32, 2), filled(I32, integers(9, 5)) }))
    end)

    it("indices that are not multiples of the count are an error", function()
      local p = copy_program("unaligned", true, function(k) return k.c(0) end, 1)
      assert.matches("kernel 'unaligned': instruction %d+ %(STORE%): an asynchronous copy of 4 elements needs indices "
        .. "that are multiples of 4: it copies element 1 of PARAM slot 1 to element 1 of DEFINE_LOCAL slot 0",
        run_error(p, { rt.buffer(I32, 2), filled(I32, integers(9, 5)) }))
    end)

    it("refuses copies that are not from a buffer into local memory, or of other sizes", function()
      local function refusal(make)
        local list, add = builder()
        make(kit(add), add)
        return error_of(rt.program, list, { name = "bad" })
      end
      assert.matches("an asynchronous copy writes local memory: source 1 must be an INDEX of a DEFINE_LOCAL",
        refusal(function(k, add)
          local out, inp = add("PARAM", I32, nil, { 0, 4 }), add("PARAM", I32, nil, { 1, 4 })
          add("STORE", nil, { k.at(out, k.c(0)), k.load(inp, k.c(0)) }, { "async", 4 })
        end), 1, true)
      assert.matches("an asynchronous copy moves 4, 8 or 16 bytes: 3 elements of int32 are 12 bytes",
        refusal(function(k, add)
          local tile, inp = add("DEFINE_LOCAL", I32, nil, { 0, 4 }), add("PARAM", I32, nil, { 0, 4 })
          add("STORE", nil, { k.at(tile, k.c(0)), k.load(inp, k.c(0)) }, { "async", 3 })
        end), 1, true)
      assert.matches("source 2 must be a LOAD of an INDEX of a PARAM, not ADD",
        refusal(function(k, add)
          local tile, inp = add("DEFINE_LOCAL", I32, nil, { 0, 4 }), add("PARAM", I32, nil, { 0, 4 })
          add("STORE", nil, { k.at(tile, k.c(0)), k.add(k.load(inp, k.c(0)), k.c(1, I32)) }, { "async", 1 })
        end), 1, true)
      assert.matches("arg must be none (one element) or {\"async\", n}",
        refusal(function(k, add)
          local tile, inp = add("DEFINE_LOCAL", I32, nil, { 0, 4 }), add("PARAM", I32, nil, { 0, 4 })
          add("STORE", nil, { k.at(tile, k.c(0)), k.load(inp, k.c(0)) }, "async")
        end), 1, true)
    end)
  end)

  describe("runs copy pipelines: a BARRIER with arg n lands every copy group but the n newest", function()
    local THREADS, CHUNK = 4, 4 -- each thread copies CHUNK int32 (16 bytes) per stage
    local STAGE = THREADS * CHUNK -- elements of one stage (and of one buffer of the tile)

    -- Workgroup g, thread l: in epoch e (the code between two barriers) it copies its chunk of
    -- stage e (if e < stages) from inp into buffer e % buffers of the local tile, and reads stage
    -- e - lag (if there is one): element (s + l) % CHUNK of thread (l + 1) % THREADS's chunk,
    -- stored to out[(g*stages + s)*THREADS + l]. Every epoch but the last ends with a BARRIER of
    -- arg `pending`. A stage lands at the barrier that ends epoch s + pending, so lag = pending + 1
    -- reads each as soon as it may; lag < buffers keeps a buffer's reads before its next copy.
    local function pipeline_program(name, o)
      local list, add = builder()
      local k = kit(add)
      local function mod(a, b) return add("MOD", IDX, { a, k.c(b) }) end
      local out = add("PARAM", I32, nil, { 0, o.groups * o.stages * THREADS })
      local inp = add("PARAM", I32, nil, { 1, o.groups * o.stages * STAGE })
      local tile = add("DEFINE_LOCAL", I32, nil, { 0, o.buffers * STAGE })
      local g, l = k.special("gidx0", o.groups), k.special("lidx0", THREADS)
      local seen = tile
      local last = o.stages + o.lag - 1
      for e = 0, last do
        local stores = {}
        local s = e - o.lag
        if s >= 0 and s < o.stages then
          local from = k.add(k.c((s % o.buffers) * STAGE), k.add(k.mul(mod(k.add(l, k.c(1)), THREADS), k.c(CHUNK)),
            mod(k.add(l, k.c(s)), CHUNK)))
          local at = k.add(k.mul(k.add(k.mul(g, k.c(o.stages)), k.c(s)), k.c(THREADS)), l)
          stores[#stores + 1] = k.store(out, at, k.load(seen, from))
        end
        if e < o.stages then
          local to = k.add(k.c((e % o.buffers) * STAGE), k.mul(l, k.c(CHUNK)))
          local from = k.add(k.mul(k.add(k.mul(g, k.c(o.stages)), k.c(e)), k.c(STAGE)), k.mul(l, k.c(CHUNK)))
          stores[#stores + 1] = add("STORE", nil, { k.at(seen, to), k.load(inp, from) }, { "async", CHUNK })
        end
        if e < last then seen = k.after(tile, add("BARRIER", nil, stores, o.pending)) end
      end
      return rt.program(list, { name = name })
    end

    local function pipeline_want(xs, groups, stages)
      local want = {}
      for g = 0, groups - 1 do
        for s = 0, stages - 1 do
          for l = 0, THREADS - 1 do
            local from = ((g * stages + s) * THREADS + (l + 1) % THREADS) * CHUNK + (s + l) % CHUNK
            want[(g * stages + s) * THREADS + l + 1] = xs[from + 1]
          end
        end
      end
      return want
    end

    local function run_pipeline(name, o)
      local xs = integers(o.groups * o.stages * STAGE, 11)
      local ob = rt.buffer(I32, o.groups * o.stages * THREADS)
      pipeline_program(name, o):run { ob, filled(I32, xs) }
      return ob:read(), pipeline_want(xs, o.groups, o.stages)
    end

    it("a three-buffer pipeline keeping two groups in flight (barriers of arg 1), exactly, in two workgroups",
      function()
      -- 5 stages through 3 buffers: every buffer is reused; the last barriers close empty groups
      local got, want = run_pipeline("pipeline", { groups = 2, stages = 5, buffers = 3, pending = 1, lag = 2 })
      assert.same(want, got)
    end)

    it("barriers of arg 2 (three groups in flight) through four buffers, and of arg 0 reading one barrier later",
      function()
      local got, want = run_pipeline("deep", { groups = 2, stages = 6, buffers = 4, pending = 2, lag = 3 })
      assert.same(want, got)
      got, want = run_pipeline("plain", { groups = 1, stages = 3, buffers = 2, pending = 0, lag = 1 })
      assert.same(want, got)
    end)

    it("a read of a stage whose group the barrier leaves in flight is a race naming both threads", function()
      local p = pipeline_program("early", { groups = 1, stages = 3, buffers = 3, pending = 1, lag = 1 })
      local err = run_error(p, { rt.buffer(I32, 3 * THREADS), filled(I32, integers(3 * STAGE, 3)) })
      -- thread 0 reads stage 0 right after the barrier that closed its group: thread 1's element 0
      assert.matches("kernel 'early': instruction %d+ %(LOAD%): race: thread gidx %(0,0,0%) lidx %(0,0,0%) reads "
        .. "element 4 of DEFINE_LOCAL slot 0, which an asynchronous copy of thread gidx %(0,0,0%) lidx %(1,0,0%) "
        .. "wrote, and no barrier since has waited for it %(1 barrier passed since the copy; a barrier with arg n "
        .. "lands every group of copies but the n newest, the group it closes included; one without an arg lands "
        .. "all%)$", err)
      -- with a deeper pipeline, two barriers of arg 2 still leave it in flight
      p = pipeline_program("early2", { groups = 1, stages = 4, buffers = 4, pending = 2, lag = 2 })
      assert.matches("kernel 'early2': instruction %d+ %(LOAD%): race: thread gidx %(0,0,0%) lidx %(0,0,0%) reads "
        .. "element 4 of DEFINE_LOCAL slot 0, which an asynchronous copy of thread gidx %(0,0,0%) lidx %(1,0,0%) "
        .. "wrote, and no barrier since has waited for it %(2 barriers passed since the copy",
        run_error(p, { rt.buffer(I32, 4 * THREADS), filled(I32, integers(4 * STAGE, 3)) }))
    end)

    it("a copy over an element whose earlier copy is still in flight is a race", function()
      -- one buffer: stage 1 is copied over stage 0, which the barrier of arg 1 left in flight
      local p = pipeline_program("overwrite", { groups = 1, stages = 2, buffers = 1, pending = 1, lag = 2 })
      assert.matches("kernel 'overwrite': instruction %d+ %(STORE%): race: thread gidx %(0,0,0%) lidx %(0,0,0%) "
        .. "writes element 0 of DEFINE_LOCAL slot 0, which an asynchronous copy of thread gidx %(0,0,0%) lidx "
        .. "%(0,0,0%) wrote, and no barrier since has waited for it %(1 barrier passed since the copy",
        run_error(p, { rt.buffer(I32, 2 * THREADS), filled(I32, integers(2 * STAGE, 3)) }))
    end)

    it("a plain store over an element whose copy is in flight is a race too", function()
      local list, add = builder()
      local k = kit(add)
      local inp = add("PARAM", I32, nil, { 0, 8 })
      local tile = add("DEFINE_LOCAL", I32, nil, { 0, 8 })
      local l = k.special("lidx0", 2)
      local at = k.mul(l, k.c(4))
      local copy = add("STORE", nil, { k.at(tile, at), k.load(inp, at) }, { "async", 4 })
      local seen = k.after(tile, add("BARRIER", nil, { copy }, 1))
      k.store(seen, k.c(4), k.c(0, I32), k.eq(l, k.c(0))) -- thread 0 writes thread 1's first element
      assert.matches("race: thread gidx (0,0,0) lidx (0,0,0) writes element 4 of DEFINE_LOCAL slot 0, which an "
        .. "asynchronous copy of thread gidx (0,0,0) lidx (1,0,0) wrote, and no barrier since has waited for it",
        run_error(rt.program(list, { name = "store_over" }), { filled(I32, integers(8, 2)) }), 1, true)
    end)

    it("a BARRIER of arg n in a kernel without copies is a plain barrier", function()
      for _, n in ipairs { 0, 1, 64 } do
        local xs = integers(3 * 8, 7)
        local ob = rt.buffer(I32, 3)
        reduce_program(3, 8, true, n):run { ob, filled(I32, xs) }
        assert.same(group_sums(xs, 3, 8), ob:read())
      end
    end)

    it("lists a barrier's arg when it leaves groups in flight", function()
      local text = pipeline_program("listed", { groups = 1, stages = 2, buffers = 2, pending = 1, lag = 2 }):dump()
      assert.matches("BARRIER    void     %[[%d, ]+%] 1 %(leaves 1 asynchronous%-copy group in flight%)", text)
      assert.not_matches("leaves", reduce_program(1, 4, true, 0):dump(), 1, true)
    end)

    it("refuses a BARRIER whose arg is not an integer 0..64", function()
      local function refusal(arg)
        local list, add = builder()
        add("BARRIER", nil, {}, arg)
        return error_of(rt.program, list, { name = "bad" })
      end
      local why = "kernel 'bad': instruction 0 (BARRIER): a BARRIER's arg is the number of asynchronous-copy groups it "
        .. "leaves in flight, an integer 0..64, not "
      assert.matches(why .. "-1", refusal(-1), 1, true)
      assert.matches(why .. "65", refusal(65), 1, true)
      assert.matches(why .. "the string \"one\"", refusal("one"), 1, true)
      assert.matches(why .. "a float (1.5)", refusal(1.5), 1, true)
      assert.matches(why .. "a list of 2 integers", refusal({ 1, 2 }), 1, true)
    end)
  end)

  describe("exchanges values between the lanes of a warp: SHUFFLE gets the value of lane (own lane xor mask)",
    function()
    -- 2 workgroups of 32 x 2 threads: in the linear order (lidx0 fastest) each lidx1 is one warp,
    -- and thread t = lidx1 * 32 + lidx0 of group g reads inp[g * 64 + t]
    local GROUPS, THREADS = 2, 64

    -- the program's nodes: k, x (this thread's input), the thread's place in the launch, out
    local function warp_program(dt, nout)
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", dt, nil, { 0, nout })
      local inp = add("PARAM", dt, nil, { 1, GROUPS * THREADS })
      local g, lx, ly = k.special("gidx0", GROUPS), k.special("lidx0", 32), k.special("lidx1", 2)
      local place = k.add(k.mul(g, k.c(THREADS)), k.add(k.mul(ly, k.c(32)), lx))
      return list, add, k, k.load(inp, place), place, out
    end

    -- the value lane `t` of the launch gets from SHUFFLE(x, mask), 0-based threads
    local function partner(t, mask) return t - t % 32 + ((t % 32) ~ mask) end

    it("for every mask 1..31, exactly, float32 and int32", function()
      for _, dt in ipairs { F32, I32 } do
        local masks = {}
        for m = 1, 31 do masks[#masks + 1] = m end
        local list, add, k, x, place, out = warp_program(dt, #masks * GROUPS * THREADS)
        for j, m in ipairs(masks) do
          k.store(out, k.add(place, k.c((j - 1) * GROUPS * THREADS)), add("SHUFFLE", dt, { x }, m))
        end
        local xs = integers(GROUPS * THREADS, 7)
        local ob = rt.buffer(dt, #masks * GROUPS * THREADS)
        local p = rt.program(list, { name = "shuffles" })
        p:run { ob, filled(dt, xs) }
        local want = {}
        for j, m in ipairs(masks) do
          for t = 0, GROUPS * THREADS - 1 do want[(j - 1) * GROUPS * THREADS + t + 1] = xs[partner(t, m) + 1] end
        end
        assert.same(want, ob:read())
      end
    end)

    it("sums a warp in 5 steps (masks 16, 8, 4, 2, 1): every lane holds its warp's sum", function()
      local list, add, k, x, place, out = warp_program(I32, GROUPS * THREADS)
      local s = x
      for _, m in ipairs { 16, 8, 4, 2, 1 } do s = k.add(s, add("SHUFFLE", I32, { s }, m)) end
      k.store(out, place, s)
      local xs = integers(GROUPS * THREADS, 11)
      local ob = rt.buffer(I32, GROUPS * THREADS)
      rt.program(list, { name = "warp_sum" }):run { ob, filled(I32, xs) }
      local want = {}
      for t = 0, GROUPS * THREADS - 1 do
        local w, sum = t - t % 32, 0
        for l = 0, 31 do sum = sum + xs[w + l + 1] end
        want[t + 1] = sum
      end
      assert.same(want, ob:read())
    end)

    it("inside a loop, keeping each thread's accumulator and loop state", function()
      -- acc = the sum over i = 0..2 of SHUFFLE(x * (i + 1), 1): 6 times the neighbour's x
      local list, add, k, x, place, out = warp_program(I32, GROUPS * THREADS)
      local acc = add("DEFINE_REG", I32, nil, { 0, 1 })
      local zero = k.c(0)
      local init = k.store(acc, zero, k.c(0, I32))
      local r = k.range(3)
      local shuffled = add("SHUFFLE", I32, { k.mul(x, k.cast(I32, k.add(r, k.c(1)))) }, 1)
      local sum = k.add(k.load(k.after(acc, init), zero), shuffled)
      local e = k.close(k.store(acc, zero, sum), r)
      k.store(out, place, k.load(k.after(acc, e), zero))
      local xs = integers(GROUPS * THREADS, 13)
      local ob = rt.buffer(I32, GROUPS * THREADS)
      rt.program(list, { name = "loop_shuffle" }):run { ob, filled(I32, xs) }
      local want = {}
      for t = 0, GROUPS * THREADS - 1 do want[t + 1] = 6 * xs[partner(t, 1) + 1] end
      assert.same(want, ob:read())
    end)

    it("refuses a mask outside 1..31, a dtype that does not travel, and a workgroup of part of a warp", function()
      local function build(dt, mask, threads)
        local list, add = builder()
        local k = kit(add)
        local out = add("PARAM", dt, nil, { 0, threads })
        local l = k.special("lidx0", threads)
        k.store(out, l, add("SHUFFLE", dt, { k.cast(dt, l) }, mask))
        return function() return rt.program(list, { name = "bad_shuffle" }) end
      end
      assert.matches("kernel 'bad_shuffle': instruction %d+ %(SHUFFLE%): arg must be the lane mask, an integer 1..31",
        error_of(build(F32, 0, 32)))
      assert.matches("arg must be the lane mask, an integer 1..31", error_of(build(F32, 32, 32)), 1, true)
      assert.matches("(SHUFFLE): dtype float64 does not travel between lanes (float32, float16, int32 or uint32 do)",
        error_of(build(tcl.dtype "float64", 1, 32)), 1, true)
      assert.matches("kernel 'bad_shuffle': instruction %d+ %(SHUFFLE%): a workgroup of local size %(48,1,1%) has 48 "
        .. "threads, and SHUFFLE needs whole warps %(a multiple of 32%)", error_of(build(F32, 1, 48)))
      assert.is_truthy(build(F32, 31, 64)()) -- two whole warps
    end)

    it("reports a SHUFFLE that not every thread reaches as divergence naming both threads", function()
      local list, add = builder()
      local k = kit(add)
      local out = add("PARAM", I32, nil, { 0, 32 })
      local l = k.special("lidx0", 32)
      local acc = add("DEFINE_REG", I32, nil, { 0, 1 })
      local zero = k.c(0)
      local init = k.store(acc, zero, k.c(0, I32))
      -- thread l loops l % 2 + 1 times
      local r = k.range(k.add(add("MOD", IDX, { l, k.c(2) }), k.c(1)))
      local s = add("SHUFFLE", I32, { k.cast(I32, r) }, 1)
      local e = k.close(k.store(acc, zero, k.add(k.load(k.after(acc, init), zero), s)), r)
      k.store(out, l, k.load(k.after(acc, e), zero))
      local err = run_error(rt.program(list, { name = "diverge_shuffle" }), { rt.buffer(I32, 32) })
      assert.matches("kernel 'diverge_shuffle': instruction %d+ %(SHUFFLE%): SHUFFLE divergence: thread gidx %(0,0,0%) "
        .. "lidx %(1,0,0%) waits at this SHUFFLE, but thread gidx %(0,0,0%) lidx %(0,0,0%) finished without reaching "
        .. "it %(the threads of a workgroup must reach each SHUFFLE together", err)
    end)

    it("lists the SHUFFLEs among the stops", function()
      local list, add, k, x, place, out = warp_program(F32, GROUPS * THREADS)
      k.store(out, place, add("SHUFFLE", F32, { x }, 3))
      local text = rt.program(list, { name = "listed" }):dump()
      assert.matches("1 SHUFFLE: the workgroup's threads stop at each, as at a barrier", text, 1, true)
    end)
  end)

  describe("reports barrier divergence", function()
    it("a barrier in a loop whose trip count depends on lidx", function()
      local list, add = builder()
      local k = kit(add)
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 2 })
      local l = k.special("lidx0", 2)
      local r = k.range(k.add(l, k.c(1)))
      local b = k.barrier(k.store(buf, l, k.cast(I32, r)))
      k.close(b, r)
      local p = rt.program(list, { name = "diverge" })
      assert.matches("kernel 'diverge': instruction 9 (BARRIER): barrier divergence: thread gidx (0,0,0) "
        .. "lidx (1,0,0) waits at this barrier, but thread gidx (0,0,0) lidx (0,0,0) finished without reaching it "
        .. "(after 1 barrier the workgroup passed together)", run_error(p, {}), 1, true)
    end)

    it("threads waiting at different barriers", function()
      local list, add = builder()
      local k = kit(add)
      local buf = add("DEFINE_LOCAL", I32, nil, { 0, 2 })
      local l = k.special("lidx0", 2)
      local first = k.eq(l, k.c(0))
      local n0 = add("WHERE", IDX, { first, k.c(1), k.c(0) })
      local r0 = k.range(n0, 0)
      local e0 = k.close(k.barrier(k.store(buf, l, k.c(1, I32))), r0)
      local r1 = k.range(add("WHERE", IDX, { first, k.c(0), k.c(1) }), 1)
      k.close(k.barrier(k.store(k.after(buf, e0), l, k.c(2, I32))), r1)
      local err = run_error(rt.program(list, { name = "two_barriers" }), {})
      assert.matches("kernel 'two_barriers': instruction %d+ %(BARRIER%): barrier divergence: thread gidx %(0,0,0%) "
        .. "lidx %(0,0,0%) waits at this barrier, but thread gidx %(0,0,0%) lidx %(1,0,0%) waits at instruction %d+ "
        .. "%(BARRIER%)", err)
    end)
  end)

  it("reports a read of local memory no thread wrote", function()
    local list, add = builder()
    local k = kit(add)
    local out = add("PARAM", F32, nil, { 0, 1 })
    local buf = add("DEFINE_LOCAL", F32, nil, { 0, 4 })
    k.store(buf, k.c(0), k.c(1.0, F32))
    k.store(out, k.c(0), k.load(buf, k.c(2)))
    assert.matches("kernel 'unwritten': instruction 8 (LOAD): reads element 2 of DEFINE_LOCAL slot 0, which no thread "
      .. "of the workgroup has written (uninitialized local memory)",
      run_error(rt.program(list, { name = "unwritten" }), { rt.buffer(F32, 1) }), 1, true)
  end)

  it("bounds-checks local memory", function()
    local list, add = builder()
    local k = kit(add)
    local buf = add("DEFINE_LOCAL", I32, nil, { 0, 4 })
    k.store(buf, k.special("lidx0", 5), k.c(1, I32))
    assert.matches("kernel 'oob': instruction 5 (STORE): index 4 is out of bounds for DEFINE_LOCAL slot 0 (4 "
      .. "elements) (thread gidx (0,0,0) lidx (4,0,0))", run_error(rt.program(list, { name = "oob" }), {}), 1, true)
  end)

  describe("refuses when built", function()
    local function build_error(make, opts)
      local list, add = builder()
      make(kit(add), add)
      opts = opts or {}
      opts.name = "bad"
      return error_of(rt.program, list, opts)
    end

    it("local memory over the limit", function()
      -- 256 KiB: more than any GPU target's (CUDA_SM90: 227 KiB)
      assert.matches("kernel 'bad': instruction 0 (DEFINE_LOCAL): local memory of 262148 bytes (DEFINE_LOCAL slots "
        .. "0..0) is more than the 262144 bytes a workgroup may hold", build_error(function(_, add)
          add("DEFINE_LOCAL", F32, nil, { 0, 65537 })
        end), 1, true)
      -- laid out by slot: slot 1 (instruction 0) is the one that does not fit
      assert.matches("instruction 0 (DEFINE_LOCAL): local memory of 262152 bytes (DEFINE_LOCAL slots 0..1) is more",
        build_error(function(_, add)
          add("DEFINE_LOCAL", F32, nil, { 1, 32768 })
          add("DEFINE_LOCAL", F32, nil, { 0, 32769 })
        end), 1, true)
      local list, add = builder()
      add("DEFINE_LOCAL", F32, nil, { 0, 65536 })
      assert.equals(262144, rt.program(list).local_bytes)
    end)

    it("a workgroup of more than 1024 threads", function()
      assert.matches("kernel 'bad': a workgroup of local size (32,64,1) has more than the 1024 threads a workgroup may "
        .. "have", build_error(function(k)
          k.special("lidx0", 32)
          k.special("lidx1", 64)
        end), 1, true)
      assert.matches("local size (2048,1,1) has more than the 1024 threads", build_error(function(k)
        k.special("gidx0", 4)
      end, { local_size = { 2048 } }), 1, true)
    end)

    it("a launch of more threads than fit a 32-bit thread id", function()
      assert.matches("kernel 'bad': a launch of global size (65536,65536,1) and local size (2,1,1) has more than the "
        .. "4294967294 threads EMU runs", build_error(function(k)
          k.special("lidx0", 2)
        end, { global_size = { 65536, 65536 } }), 1, true)
    end)

    it("register arrays of a workgroup's threads, kept across barriers, over their limit", function()
      assert.matches("kernel 'bad': with barriers each of the 1024 threads of a workgroup keeps its 131072 bytes of "
        .. "register arrays, more than the 67108864 bytes EMU holds", build_error(function(k, add)
          add("DEFINE_REG", I32, nil, { 0, 16384 })
          add("DEFINE_REG", I32, nil, { 1, 16384 })
          k.special("lidx0", 1024)
          k.barrier()
        end), 1, true)
    end)

    it("DEFINE_LOCAL slots that are not 0..n-1, and a BARRIER with a dtype", function()
      assert.matches("DEFINE_LOCAL slots must be 0..0 (one per local buffer), got 3", build_error(function(_, add)
        add("DEFINE_LOCAL", F32, nil, { 3, 4 })
      end), 1, true)
      assert.matches("instruction 1 (DEFINE_LOCAL): slot 0 is already taken by instruction 0",
        build_error(function(_, add)
          add("DEFINE_LOCAL", F32, nil, { 0, 4 })
          add("DEFINE_LOCAL", I32, nil, { 0, 4 })
        end), 1, true)
      assert.matches("instruction 0 (BARRIER): must be void, not int32", build_error(function(_, add)
        add("BARRIER", I32, {})
      end), 1, true)
    end)
  end)

  it("runs a program without SPECIALs as one thread, reading back what it wrote", function()
    local list, add = builder()
    local k = kit(add)
    local out = add("PARAM", I32, nil, { 0, 4 })
    local r = k.range(4)
    local e = k.close(k.store(out, r, k.cast(I32, k.mul(r, r))), r)
    local r2 = k.range(3, 1)
    local seen = k.after(out, e)
    k.close(k.store(seen, r2, k.add(k.load(seen, r2), k.load(seen, k.add(r2, k.c(1))))), r2)
    local p = rt.program(list, { name = "single" })
    assert.same({ 1, 1, 1 }, p.global_size)
    assert.same({ 1, 1, 1 }, p.local_size)
    assert.equals(0, p.nbarriers)
    assert.equals(0, p.local_bytes)
    local ob = rt.buffer(I32, 4)
    p:run { ob }
    assert.same({ 1, 5, 13, 9 }, ob:read())
  end)

  it("lists local memory, barriers and the registers kept across them", function()
    local text = reduce_program(2, 4, true):dump()
    assert.matches("kernel 'group_sum': %d+ instructions, 2 buffers, global %(2,1,1%) local %(4,1,1%)\n  local memory "
      .. "16 bytes %(1 buffer%), 1 barrier, %d registers? kept across barriers", text)
    assert.matches("DEFINE_LOCAL int32    (0, 4)", text, 1, true)
    assert.matches("BARRIER    void     [", text, 1, true)
    assert.matches("(kept across barriers)", text, 1, true)
    assert.not_matches("local memory", rt.program({ u("CONST", I32, nil, 1) }):dump(), 1, true)
  end)
end)
