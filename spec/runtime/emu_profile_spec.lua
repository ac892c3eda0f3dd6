-- spec/runtime/emu_profile_spec.lua — EMU's memory profile (src/runtime/emu/emu_profile.h): for each global
-- LOAD, STORE and asynchronous copy of a GPU-shaped program, the 32-byte sectors the first warp
-- of workgroup 0 touched and the fewest its bytes fit in, per access counted by hand; and the
-- report DEBUG=2 prints in EMU's GPU mode (tcl.codegen.devices.emu).
local tcl = require "tcl"
local rt = require "tcl.runtime"
local helper = require "spec.support.helper"
local kernels = require "spec.support.kernels"

local IDX, F32, F16, I32 = tcl.dtype "index", tcl.dtype "float32", tcl.dtype "float16", tcl.dtype "int32"
local BOOL = tcl.dtype "bool"

-- A program of `groups` workgroups of `threads` threads (lidx0) that stores, for each lane l,
-- out[g * threads + l] = inp[at(l)] (loaded only where gate(l) holds, else 0); at and gate
-- build index and bool nodes from l with k.
local function gather(name, dt, threads, groups, n_in, at, gate)
  local list, add = kernels.builder()
  local function c(v, d) return add("CONST", d or IDX, nil, v) end
  local k = {
    c = c,
    add = function(a, b) return add("ADD", a.dtype, { a, type(b) == "number" and c(b) or b }) end,
    mul = function(a, b) return add("MUL", a.dtype, { a, type(b) == "number" and c(b) or b }) end,
    lt = function(a, b) return add("CMPLT", BOOL, { a, type(b) == "number" and c(b) or b }) end,
  }
  local out = add("PARAM", dt, nil, { 0, threads * groups })
  local inp = add("PARAM", dt, nil, { 1, n_in })
  local g = add("SPECIAL", IDX, { c(groups) }, "gidx0")
  local l = add("SPECIAL", IDX, { c(threads) }, "lidx0")
  local src = { add("INDEX", dt, { inp, at(k, l) }) }
  if gate then src[2] = gate(k, l) end
  local value = add("LOAD", dt, src)
  add("STORE", nil, { add("INDEX", dt, { out, k.add(k.mul(g, threads), l) }), value })
  return rt.program(list, { name = name })
end

local function profile_of(p, dt, n_in)
  local inp = rt.buffer(dt, n_in)
  local values = {}
  for i = 1, n_in do values[i] = i % 50 end
  inp:write(values)
  local out = rt.buffer(dt, p.params[1].numel)
  local seconds, profile = p:profile { out, inp }
  assert.is_true(seconds >= 0)
  local by_op = {}
  for _, a in ipairs(profile) do by_op[a.op] = a end
  return by_op, out:read(), values
end

describe("EMU's memory profile", function()
  it("counts 4 sectors for 32 neighbouring floats, loaded and stored, once per warp-wide access", function()
    -- two warps in each of 3 workgroups: only warp 0 of workgroup 0 is recorded
    local p = gather("copy", F32, 64, 3, 192, function(_, l) return l end)
    local by_op, got, values = profile_of(p, F32, 192)
    for _, op in ipairs { "LOAD", "STORE" } do
      local a = by_op[op]
      assert.are.same({ 1, 4, 4, 4 }, { a.executions, a.sectors, a.needed, a.bytes }, op)
      assert.are.equal(op == "LOAD" and 1 or 0, a.slot)
    end
    -- the run itself is a run: every workgroup's values
    assert.are.equal(values[1], got[1])
    assert.are.equal(values[64], got[64])
    assert.are.equal(values[64], got[128]) -- workgroup 1 read inp[0..63] again
  end)

  it("counts a sector per lane when lanes are 32 bytes apart, and one for a value every lane reads", function()
    local strided = gather("strided", F32, 32, 1, 256, function(k, l) return k.mul(l, 8) end)
    local a = profile_of(strided, F32, 256).LOAD
    assert.are.same({ 32, 4 }, { a.sectors, a.needed }) -- 128 distinct bytes fit in 4 sectors
    local same = gather("broadcast", F32, 32, 1, 8, function(k) return k.c(3) end)
    a = profile_of(same, F32, 8).LOAD
    assert.are.same({ 1, 1 }, { a.sectors, a.needed })
  end)

  it("counts bytes, not elements: float16, an unaligned start, lanes gated off", function()
    local halves = gather("halves", F16, 32, 1, 64, function(_, l) return l end)
    local a = profile_of(halves, F16, 64).LOAD
    assert.are.same({ 2, 2, 2 }, { a.sectors, a.needed, a.bytes })
    -- bytes 8..71: sectors 0, 1 and 2, for 64 bytes that 2 would hold
    local shifted = gather("shifted", F16, 32, 1, 64, function(k, l) return k.add(l, 4) end)
    a = profile_of(shifted, F16, 64).LOAD
    assert.are.same({ 3, 2 }, { a.sectors, a.needed })
    -- only lanes 0..15 load: 64 bytes
    local gated = gather("gated", F32, 32, 1, 32, function(_, l) return l end, function(k, l) return k.lt(l, 16) end)
    local by_op, got = profile_of(gated, F32, 32)
    assert.are.same({ 1, 2, 2 }, { by_op.LOAD.executions, by_op.LOAD.sectors, by_op.LOAD.needed })
    assert.are.same({ 4, 4 }, { by_op.STORE.sectors, by_op.STORE.needed })
    assert.are.equal(0, got[17]) -- a gated-off load gives 0
  end)

  it("counts every execution of a loop's access, and an asynchronous copy's read of 16 bytes a lane", function()
    -- out[l] = sum over r < 3 of inp[r * 32 + l]
    local list, add = kernels.builder()
    local function c(v, d) return add("CONST", d or IDX, nil, v) end
    local out = add("PARAM", I32, nil, { 0, 32 })
    local inp = add("PARAM", I32, nil, { 1, 96 })
    local acc = add("DEFINE_REG", I32, nil, { 0, 1 })
    local l = add("SPECIAL", IDX, { c(32) }, "lidx0")
    add("STORE", nil, { add("INDEX", I32, { acc, c(0) }), c(0, I32) })
    local r = add("RANGE", IDX, { c(3) }, { 0, "loop" })
    local x = add("LOAD", I32, { add("INDEX", I32, { inp, add("ADD", IDX, { add("MUL", IDX, { r, c(32) }), l }) }) })
    local sum = add("ADD", I32, { add("LOAD", I32, { add("INDEX", I32, { acc, c(0) }) }), x })
    local e = add("END", nil, { add("STORE", nil, { add("INDEX", I32, { acc, c(0) }), sum }), r })
    add("STORE", nil, { add("INDEX", I32, { out, l }), add("LOAD", I32, { add("INDEX", I32, { add("AFTER", I32,
      { acc, e }), c(0) }) }) })
    local p = rt.program(list, { name = "looped" })
    local by_op = profile_of(p, I32, 96)
    assert.are.same({ 3, 12, 12 }, { by_op.LOAD.executions, by_op.LOAD.sectors, by_op.LOAD.needed })

    -- each of 32 lanes copies 4 int32 (16 bytes) at 4 * l into local memory: 512 bytes
    list, add = kernels.builder()
    out = add("PARAM", I32, nil, { 0, 32 })
    inp = add("PARAM", I32, nil, { 1, 128 })
    local tile = add("DEFINE_LOCAL", I32, nil, { 0, 128 })
    l = add("SPECIAL", IDX, { c(32) }, "lidx0")
    local at = add("MUL", IDX, { l, c(4) })
    local copy = add("STORE", nil, { add("INDEX", I32, { tile, at }), add("LOAD", I32, { add("INDEX", I32,
      { inp, at }) }) }, { "async", 4 })
    local seen = add("AFTER", I32, { tile, add("BARRIER", nil, { copy }) })
    add("STORE", nil, { add("INDEX", I32, { out, l }), add("LOAD", I32, { add("INDEX", I32, { seen, at }) }) })
    p = rt.program(list, { name = "copied" })
    by_op = profile_of(p, I32, 128)
    assert.are.same({ 1, 16, 16, 16 }, { by_op.COPY.executions, by_op.COPY.sectors, by_op.COPY.needed,
      by_op.COPY.bytes })
    assert.is_nil(by_op.LOAD) -- the local tile's load is not global memory
  end)

  it("is reported at DEBUG=2 in EMU's GPU mode, the worst accesses named", function()
    local emu = require "tcl.codegen.devices.emu"
    local text = emu.coalescing_report("k", {
      { pc = 9, op = "LOAD", slot = 1, bytes = 4, executions = 2, sectors = 64, needed = 8 },
      { pc = 12, op = "COPY", slot = 2, bytes = 16, executions = 1, sectors = 16, needed = 16 },
      { pc = 20, op = "STORE", slot = 0, bytes = 4, executions = 1, sectors = 4, needed = 4 },
    })
    assert.are.equal("    coalescing k: 2 loads 30%, 1 stores 100% of the 32-byte sectors a warp touches are "
      .. "needed (warp 0 of workgroup 0)\n"
      .. "      LOAD 9 (buffer 2, 4 bytes a lane): 13%, 32.0 sectors an access for 4.0", text)
    local status, _, err = helper.run("env -u EMU_GPU DEVICE=EMU TCL_EMU_GPU=CUDA DEBUG=2 "
      .. helper.shell_quote(helper.tcl_bin) .. " -e "
      .. helper.shell_quote("Tensor.ones(64, 64):permute(2, 1):contiguous():realize()"))
    assert.are.equal(0, status, err)
    assert.matches("    coalescing E_[%w_]+: 1 stores 100%% of the 32%-byte sectors", err)
  end)
end)
