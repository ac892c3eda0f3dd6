-- spec/codegen/beam_spec.lua — BEAM search (src/opt/beam.c, lua/tcl/codegen/driver/beam.lua): its result
-- computes what the unoptimized kernel computes, a candidate that would crash or compute wrong
-- values is survived, and the winning opts are cached on disk and replayed by a second process.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local lower = require "tcl.codegen.driver.lower"
local beam = require "tcl.codegen.driver.beam"
local optimize = require "tcl.codegen.driver.optimize"
local schedule = require "tcl.schedule"
local P = require "tcl.pattern"
local UOp = require "tcl.uop"
local opt = require "tcl.opt"
local progress = require "tcl.progress"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"

local N = 48

local function matmul_ast(n)
  local a = tcl.Tensor.rand(n, n):realize()
  local b = tcl.Tensor.rand(n, n):realize()
  return schedule.create({ a:matmul(b).uop }).kernels[1].ast
end

-- The kernel's one output after running it on fixed inputs.
local function run_values(kernel)
  local runtime = require "tcl.runtime"
  local bufs = {}
  for slot, p in ipairs(kernel.program.cpu and kernel.program.cpu.params or {}) do
    bufs[slot] = runtime.buffer(p.dtype, p.numel, "CPU")
    if slot > 1 then
      local values = {}
      for i = 1, p.numel do values[i] = ((i * 7 + slot * 3) % 17) / 17 - 0.5 end
      bufs[slot]:write(values)
    end
  end
  kernel.program:run(bufs)
  return bufs[1]
end

local function with_cache(fn)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -m 700 -p " .. helper.shell_quote(dir)))
  beam.quiet = true
  local ok, err = pcall(tcl.context { CACHE_DIR = dir, CACHELEVEL = 1, IGNORE_BEAM_CACHE = false }, fn, dir)
  beam.quiet, beam.hooks.mutate = false, nil
  os.execute("rm -rf " .. helper.shell_quote(dir))
  if not ok then error(err, 0) end
end

-- The candidate's STORE rewritten by change(store) -> new store.
local function mutate_store(sink, change)
  for _, u in ipairs(sink:toposort()) do
    if u.op == "STORE" then return P.substitute(sink, { [u] = change(u) }) end
  end
end

describe("BEAM search", function()
  it("finds opts whose kernel computes the unoptimized kernel's values", function()
    with_cache(function()
      local ast = matmul_ast(N)
      local searched = lower.compile(ast, { device = "CPU", beam = 2 })
      local plain = lower.compile(ast, { device = "CPU", noopt = true })
      assert.are_not.equal(plain.name, searched.name)
      assert.is_true(run_values(searched):max_difference(run_values(plain)) <= 1e-5)
    end)
  end)

  it("survives a candidate that would crash and one that computes wrong values", function()
    with_cache(function()
      local ast = matmul_ast(N + 16)
      local warnings, saved_warn = {}, optimize.warn
      optimize.warn = function(line) warnings[#warnings + 1] = line end
      beam.hooks.mutate = function(sink, i)
        if i % 3 == 1 then -- every store one buffer length further: out of bounds
          return mutate_store(sink, function(st)
            local index = st:source(1)
            local numel = index:source(1).arg[2]
            local moved = UOp.new("INDEX", index.dtype, { index:source(1), index:source(2) + numel })
            return UOp.new("STORE", st.dtype, { moved, st:source(2) })
          end)
        elseif i % 3 == 2 then -- a value one too large
          return mutate_store(sink, function(st)
            return UOp.new("STORE", st.dtype, { st:source(1), st:source(2) + 1.0 })
          end)
        end
      end
      local ok, searched = pcall(tcl.context { DEBUG = 1 }, lower.compile, ast, { device = "CPU", beam = 2 })
      optimize.warn = saved_warn
      assert.is_true(ok, searched)
      local plain = lower.compile(ast, { device = "CPU", noopt = true })
      assert.is_true(run_values(searched):max_difference(run_values(plain)) <= 1e-5)
      local unsafe, wrong = 0, 0
      for _, w in ipairs(warnings) do
        if w:find("not provably safe", 1, true) then unsafe = unsafe + 1 end
        if w:find("computes wrong values", 1, true) then wrong = wrong + 1 end
      end
      assert.is_true(unsafe > 0, "no unsafe candidate was rejected")
      assert.is_true(wrong > 0, "no wrong candidate was dropped")
    end)
  end)

  it("proves accesses safe from the index bounds, and rejects an access past the end", function()
    local ast = matmul_ast(8)
    assert.is_nil(beam.unsafe_access(ast))
    local bad = mutate_store(ast, function(st)
      local index = st:source(1)
      return UOp.new("STORE", st.dtype, { UOp.new("INDEX", index.dtype, { index:source(1), index:source(2) + 1 }),
        st:source(2) })
    end)
    assert.matches("STORE of buffer 0 at %[1, 64%], outside %[0, 64%)", beam.unsafe_access(bad))
  end)

  it("stores the winning opts on disk, and a second process replays them without searching", function()
    with_cache(function(dir)
      local script = os.tmpname()
      helper.write(script, [[
        local a = Tensor.rand(40, 40):realize()
        local b = Tensor.rand(40, 40):realize()
        io.write(string.format("%.6f\n", a:matmul(b):sum():item()))
      ]])
      -- TCL_PROGRESS=1: the progress line (its status names the kernel searched) on stderr, a file here
      local cmd = string.format("TCL_CACHE=%s BEAM=2 DEBUG=3 TCL_PROGRESS=1 %s %s", helper.shell_quote(dir),
        helper.shell_quote(helper.tcl_bin), helper.shell_quote(script))
      local status1, out1, err1 = helper.run(cmd)
      local status2, out2, err2 = helper.run(cmd)
      os.remove(script)
      assert.are.equal(0, status1, err1)
      assert.are.equal(0, status2, err2)
      assert.matches("| r_40_40_40: round", err1, 1, true) -- the first process searched
      assert.is_nil(err2:find("r_40_40_40: round", 1, true)) -- the second replayed
      assert.is_nil(err2:find("BEAM ", 1, true)) -- and a batch all from the cache draws no line
      local opts1 = err1:match("kernel '[^']*' opts: ([^\n]*) %(was 'r_40_40_40'%)")
      local opts2 = err2:match("kernel '[^']*' opts: ([^\n]*) %(was 'r_40_40_40'%)")
      assert.is_string(opts1)
      assert.are.equal(opts1, opts2)
      assert.are.equal(out1, out2)
    end)
  end)

  it("draws one progress line: the batch's kernels, with the search's kernel, round and candidates", function()
    with_cache(function()
      beam.quiet = false
      local written, saved = {}, progress.stream
      progress.stream = { write = function(_, ...) for _, s in ipairs({ ... }) do written[#written + 1] = s end end,
        flush = function() end }
      local ok, err = pcall(tcl.context { PROGRESS = true }, function()
        local ast = matmul_ast(N)
        kernel_cache.clear() -- an earlier case compiled this kernel
        lower.compile(ast, { device = "CPU", beam = 2 })
        local searched = table.concat(written)
        written = {}
        kernel_cache.clear() -- compiled again: the opts come from the BEAM cache on disk
        lower.compile(ast, { device = "CPU", beam = 2 })
        return searched
      end)
      progress.stream = saved
      assert(ok, err)
      local text = err
      local first = "\rBEAM   0% |" .. string.rep(" ", 20) .. "| 0/1 [00:00<?, ? kernel/s]"
      assert.are.equal(first, text:sub(1, #first))
      local rounds = {}
      for round, tried in text:gmatch("| 0/1 %[[^%]]+%] | r_48_48_48: round (%d)/6, (%d+) candidates, best ") do
        rounds[#rounds + 1] = { tonumber(round), tonumber(tried) }
      end
      assert.is_true(#rounds >= 1, text)
      for i = 2, #rounds do -- rounds count up, candidates accumulate
        assert.is_true(rounds[i][1] >= rounds[i - 1][1] and rounds[i][2] >= rounds[i - 1][2], text)
      end
      assert.matches("\rBEAM 100%% |" .. string.rep("█", 20) .. "| 1/1 %[%d%d:%d%d<00:00, [^%]]+%] *\n$", text)
      assert.are.same({}, written) -- a kernel replayed from the cache draws nothing
    end)
  end)

  it("keeps the search's seeds unchanged and returns a kernel with the winner's opts", function()
    local k = opt.kernel(matmul_ast(16), { has_threads = true, threads = 2 })
    local calls = 0
    local best, seconds, tried = opt.beam_search({ k }, { width = 2, rounds = 1 }, function(sinks)
      calls = calls + 1
      local times = {}
      -- a made-up cost: fewer opts is slower, so the search must move
      for i, s in ipairs(sinks) do times[i] = 1 / (1 + #s.arg[2]) end
      return times
    end)
    assert.are.equal(0, #k:opts())
    assert.are.equal(2, calls)
    assert.is_true(#best:opts() > 0)
    assert.is_true(seconds < 1)
    assert.is_true(tried > 1)
  end)
end)
