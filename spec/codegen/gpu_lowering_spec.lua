-- spec/codegen/gpu_lowering_spec.lua — kernels shaped for a GPU (docs/design/encodings.md, "GPU-shaped
-- kernels"): the passes "group reduces" (tcl.codegen.passes.group_reduce) and "gpu dims"
-- (tcl.codegen.passes.gpu_dims), the GPU heuristic (tcl.heuristics.gpu) and the opts' workgroup
-- limits, run on EMU's GPU mode with CUDA's capabilities: values against naive Lua loops, and
-- the programs' shape (SPECIALs, local memory, barriers) from EMU's listing.
local env = require "tcl.env"
env.EMU_GPU = "CUDA" -- read when the EMU backend loads, below (busted loads this file's modules afresh)

local tcl = require "tcl"
local lower = require "tcl.codegen.driver.lower"
local schedule = require "tcl.schedule"
local optimize = require "tcl.codegen.driver.optimize"
local opt = require "tcl.opt"
local targets = require "tcl.codegen.devices.gpu_targets"
local splitmix = require "spec.support.splitmix"

local Tensor = tcl.Tensor

-- Small integers: float32 sums of them are exact, whatever the order of the additions.
local function integers(n, seed)
  local rng, out = splitmix.new(seed), {}
  for i = 1, n do out[i] = rng:integer(-8, 8) end
  return out
end

-- float32: the small integers sum exactly, and the sums stay 4-byte values (an int32 sum is int64)
local function on_emu(values, shape) return Tensor(values, { device = "EMU", dtype = "float32" }):reshape(shape) end

-- The sums of the rows of a rows x cols matrix given row by row, by naive loops.
local function row_sums(data, rows, cols)
  local want = {}
  for r = 1, rows do
    want[r] = 0
    for c = 1, cols do want[r] = want[r] + data[(r - 1) * cols + c] end
  end
  return want
end

-- The EMU listings of the kernels that realizing t compiles.
local function listings(t)
  local sched = schedule.create({ t.uop }, { device = "EMU" })
  local out = {}
  for _, k in ipairs(sched.kernels) do
    local compiled = lower.compile(k.ast, { device = "EMU" })
    out[#out + 1] = { name = compiled.name, text = compiled.program:dump() }
  end
  return out
end

-- How many instructions of op (SHUFFLE, BARRIER) a listing has.
local function count(text, op)
  local _, n = text:gsub("\n%s*%d+%s+" .. op .. "%s", "")
  return n
end

local function last_listing(t)
  local all = listings(t)
  return all[#all]
end

-- The sums of rows x cols integers (seed) on EMU: the kernel's opts and launch as given (a
-- pattern), `shuffles` SHUFFLEs and no barrier, values as naive loops give them. Returns the data and the
-- tensor.
local function shuffled_row_sums(rows, cols, seed, opts, launch, shuffles)
  local data = integers(rows * cols, seed)
  local x = on_emu(data, { rows, cols })
  local text = last_listing(x:sum(2)).text
  assert.matches(', "' .. opts .. '")', text, 1, true)
  assert.matches(launch, text)
  assert.are.equal(shuffles, count(text, "SHUFFLE"), text)
  assert.are.equal(0, count(text, "BARRIER"), text)
  assert.are.same(row_sums(data, rows, cols), x:sum(2):tolist())
  return data, x
end

-- The coalescing figures (runtime Program:profile) of the last kernel of t, whose one input
-- (slot 1) holds values.
local function last_profile(t, values)
  local rt = require "tcl.runtime"
  local sched = schedule.create({ t.uop }, { device = "EMU" })
  local compiled = lower.compile(sched.kernels[#sched.kernels].ast, { device = "EMU" })
  local program = compiled.program.emu
  local buffers = {}
  for slot, p in ipairs(program.params) do buffers[slot] = rt.buffer(p.dtype, p.numel) end
  buffers[2]:write(values)
  local _, profile = program:profile(buffers)
  return profile, buffers[1]:read()
end

describe("GPU lowering on EMU's GPU mode (CUDA's capabilities)", function()
  after_each(function() optimize.set_heuristic(nil) end)

  it("sums long rows with a workgroup each: local memory, a barrier, one store per row", function()
    local data = integers(8 * 1024, 1)
    local x = on_emu(data, { 8, 1024 })
    local want = {}
    for r = 1, 8 do
      local s = 0
      for c = 1, 1024 do s = s + data[(r - 1) * 1024 + c] end
      want[r] = s
    end
    assert.are.same(want, x:sum(2):tolist())
    local k = last_listing(x:sum(2))
    assert.matches("G", k.name) -- a group_reduce axis (GROUPTOP)
    assert.matches("DEFINE_LOCAL", k.text, 1, true)
    assert.matches("BARRIER", k.text, 1, true)
    assert.matches("lidx0", k.text, 1, true)
    assert.matches("gidx0", k.text, 1, true)
  end)

  it("reduces the whole tensor (sum, max) through local memory", function()
    local data = integers(4096, 2)
    local x = on_emu(data, { 4096 })
    local s, m = 0, -math.huge
    for _, v in ipairs(data) do s, m = s + v, math.max(m, v) end
    assert.are.equal(s, x:sum():item())
    assert.are.equal(m, x:max():item())
  end)

  it("computes a softmax over long rows (two shared reductions in a row) close to the naive one", function()
    local rng = splitmix.new(3)
    local data = {}
    for i = 1, 4 * 512 do data[i] = rng:uniform(-3, 3) end
    local got = on_emu(data, { 4, 512 }):softmax(-1):tolist()
    for r = 1, 4 do
      local m, z = -math.huge, 0
      for c = 1, 512 do m = math.max(m, data[(r - 1) * 512 + c]) end
      for c = 1, 512 do z = z + math.exp(data[(r - 1) * 512 + c] - m) end
      for c = 1, 512, 37 do
        local want = math.exp(data[(r - 1) * 512 + c] - m) / z
        assert.is_true(math.abs(got[r][c] - want) <= 1e-6 + 1e-4 * want, string.format("row %d col %d", r, c))
      end
    end
  end)

  it("multiplies matrices with workgroups over the output", function()
    local a, b = integers(32 * 64, 4), integers(64 * 48, 5)
    local got = on_emu(a, { 32, 64 }):matmul(on_emu(b, { 64, 48 })):tolist()
    for i = 1, 32, 5 do
      for j = 1, 48, 7 do
        local s = 0
        for k = 1, 64 do s = s + a[(i - 1) * 64 + k] * b[(k - 1) * 48 + j] end
        assert.are.equal(s, got[i][j])
      end
    end
    assert.matches("lidx", last_listing(on_emu(a, { 32, 64 }):matmul(on_emu(b, { 64, 48 }))).text, 1, true)
  end)

  it("gives a float32 matmul a register tile: 16 x 16 threads, up to 4 x 4 outputs each a workgroup apart",
    function()
    local tensor_cores = require "tcl.heuristics.tensor_cores"
    local kernel_cache = require "tcl.codegen.driver.kernel_cache"
    local a, b = integers(128 * 48, 40), integers(48 * 192, 41)
    local want = {}
    for i = 1, 128 do
      want[i] = {}
      for j = 1, 192 do
        local s = 0
        for k = 1, 48 do s = s + a[(i - 1) * 48 + k] * b[(k - 1) * 192 + j] end
        want[i][j] = s
      end
    end
    local function product() return on_emu(a, { 128, 48 }):float():matmul(on_emu(b, { 48, 192 }):float()) end
    -- (workgroups a GPU runs at once, the opts, the grid): with 1, the largest tile that
    -- divides the parts (4 x 4 of 8 x 12 threads' parts: 2 x 3 workgroups); with 16, the
    -- largest that leaves 16 (2 x 4 and 4 x 2 leave 12, 2 x 2 leaves 24); with more than any
    -- tile leaves, no tile, the threads alone
    local saved = tensor_cores.PARALLEL_WORKGROUPS
    local ok, err = pcall(function()
      for _, case in ipairs {
        { 1, "LOCAL(1,16) LOCAL(2,16) UPCAST(2,4) UPCAST(1,4)", { 3, 2, 1 } },
        { 16, "LOCAL(1,16) LOCAL(2,16) UPCAST(2,2) UPCAST(1,2)", { 6, 4, 1 } },
        { 1000, "LOCAL(1,16) LOCAL(2,16)", { 12, 8, 1 } },
      } do
        tensor_cores.PARALLEL_WORKGROUPS = case[1]
        kernel_cache.clear() -- the cache does not know the constant changed
        local text = last_listing(product()).text
        assert.matches(", \"" .. case[2] .. "\")", text, 1, true) -- the kernel's opts, in its SINK
        -- the columns' threads are x: neighbouring threads read neighbouring elements of B
        assert.matches("global %(" .. table.concat(case[3], ",") .. "%) local %(16,16,1%)", text)
        assert.are.same(want, product():tolist(), "workgroups " .. case[1])
      end
    end)
    tensor_cores.PARALLEL_WORKGROUPS = saved
    assert(ok, err)
  end)

  it("gives many short rows a warp each: lanes read neighbouring elements and shuffle, no barrier", function()
    -- 512 rows of 64: too many outputs to share one reduction per workgroup, too short a row
    -- for GROUP's 256 threads: a warp per row, 8 rows per workgroup; the lanes of a warp are x
    local data = shuffled_row_sums(512, 64, 50, "GROUP(1,32) LOCAL(1,8)", "global %(64,1,1%) local %(32,8,1%)", 5)
    -- a reduction along an axis no read steps by 1 (the columns' sums): a thread per output,
    -- neighbouring threads reading neighbouring elements
    local text = last_listing(on_emu(data, { 64, 512 }):sum(1)).text
    assert.are.equal(0, count(text, "SHUFFLE"), text)
    assert.is_nil(text:find("GROUP", 1, true))
  end)

  it("gives rows shorter than a warp the lanes that divide them, and puts unit-stride threads in dim x", function()
    -- 1200 rows of 16: a half warp a row (4 shuffles), two rows a warp, 16 rows a workgroup
    local data, x = shuffled_row_sums(1200, 16, 53, "GROUP(1,16) LOCAL(1,16)", "global %(75,1,1%) local %(16,16,1%)",
      4)
    local profile = last_profile(x:sum(2), data)
    for _, a in ipairs(profile) do assert.are.equal(a.needed, a.sectors, a.op) end
    -- rows of 2 keep a thread each (fewer lanes than MIN_ROW_LANES)
    assert.is_nil(last_listing(on_emu(integers(64, 54), { 32, 2 }):sum(2)).text:find("GROUP", 1, true))
    -- an elementwise kernel with threads over both axes (LOCAL(2,16) LOCAL(1,16)): the columns'
    -- threads, which step by one element, are x although the rows' split got the larger axis id
    local text = last_listing(x * 2).text
    assert.matches(', "LOCAL(2,16) LOCAL(1,16)")', text, 1, true)
    profile = last_profile(x * 2, data)
    assert.are.equal(2, #profile)
    for _, a in ipairs(profile) do
      assert.are.equal(a.needed, a.sectors, a.op)
      assert.are.equal(4, a.sectors, a.op) -- 32 neighbouring floats: two rows of 16
    end
  end)

  it("shares a column sum among 32 columns x 8 rows of threads, so that a warp reads a row's neighbours", function()
    local data = integers(512 * 512, 51)
    local x = on_emu(data, { 512, 512 })
    local text = last_listing(x:sum(1)).text
    assert.matches(', "LOCAL(1,32) GROUP(1,8)")', text, 1, true)
    assert.matches("global %(16,1,1%) local %(32,8,1%)", text) -- the columns' threads are x
    assert.are.equal(0, count(text, "SHUFFLE"), text) -- the group's threads are not neighbouring lanes
    local want = {}
    for c = 1, 512 do
      want[c] = 0
      for r = 1, 512 do want[c] = want[c] + data[(r - 1) * 512 + c] end
    end
    assert.are.same(want, x:sum(1):tolist())
    -- every sector the first warp touches is needed: 4 per load of 32 floats, 4 per store
    local profile, got = last_profile(x:sum(1), data)
    assert.are.same(want, got)
    assert.are.equal(2, #profile)
    for _, a in ipairs(profile) do
      assert.are.equal(a.needed, a.sectors, a.op)
      assert.are.equal(4 * a.executions, a.sectors, a.op)
    end
    -- x @ W with few outputs (32 x 64, a GPT-2 MLP's second linear at 32 tokens): W's columns
    -- get the 32 threads (x does not depend on them), the group the reduction
    local xs, ws = integers(32 * 256, 56), integers(256 * 64, 57)
    local xm, wm = on_emu(xs, { 32, 256 }), on_emu(ws, { 256, 64 })
    text = last_listing(xm:matmul(wm)).text
    assert.matches(', "LOCAL(2,32) GROUP(1,8)")', text, 1, true)
    local product = xm:matmul(wm):tolist()
    for _, ij in ipairs { { 1, 1 }, { 7, 40 }, { 32, 64 } } do
      local s = 0
      for kk = 1, 256 do s = s + xs[(ij[1] - 1) * 256 + kk] * ws[(kk - 1) * 64 + ij[2]] end
      assert.are.equal(s, product[ij[1]][ij[2]])
    end
    for _, a in ipairs(last_profile(xm:matmul(wm), xs)) do assert.are.equal(a.needed, a.sectors, a.op) end
    -- a middle axis: the last one's threads over the columns, the group over the reduction
    data = integers(4 * 300 * 64, 52)
    local y = on_emu(data, { 4, 300, 64 })
    text = last_listing(y:sum(2)).text
    assert.matches(', "LOCAL(2,32) GROUP(1,4) LOCAL(2,2)")', text, 1, true)
    want = {}
    for b = 1, 4 do
      want[b] = {}
      for c = 1, 64 do
        local s = 0
        for r = 1, 300 do s = s + data[((b - 1) * 300 + r - 1) * 64 + c] end
        want[b][c] = s
      end
    end
    assert.are.same(want, y:sum(2):tolist())
    profile = last_profile(y:sum(2), data)
    for _, a in ipairs(profile) do assert.are.equal(a.needed, a.sectors, a.op) end
  end)

  it("shares a reduction over several short axes (a batch norm's sums) along the one read by neighbours", function()
    -- per channel of (16, 8, 26, 26), the sum over N, H and W: no axis has 256 steps, all of
    -- them 10816; W, which the read steps along by one element, gets a group of 26 threads
    local data = integers(16 * 8 * 26 * 26, 55)
    local x = on_emu(data, { 16, 8, 26, 26 })
    local text = last_listing(x:sum({ 1, 3, 4 })).text
    assert.matches(', "GROUP(3,26) LOCAL(1,8)")', text, 1, true)
    assert.matches("local %(26,8,1%)", text)
    local want = {}
    for ch = 1, 8 do want[ch] = 0 end
    for i, v in ipairs(data) do
      local ch = (i - 1) // (26 * 26) % 8 + 1
      want[ch] = want[ch] + v
    end
    assert.are.same(want, x:sum({ 1, 3, 4 }):tolist())
    -- a thread per channel read one element a sector (13 %); now the lanes read 26 neighbours
    local profile = last_profile(x:sum({ 1, 3, 4 }), data)
    for _, a in ipairs(profile) do
      if a.op == "LOAD" then assert.is_true(a.needed / a.sectors > 0.7, a.needed .. " of " .. a.sectors) end
    end
  end)

  it("transposes through local memory: a 16 x 16 tile of threads, one barrier, neighbours read and written", function()
    local data = integers(64 * 48, 58)
    local x = on_emu(data, { 64, 48 })
    local other = integers(48 * 64, 59)
    local y = on_emu(other, { 48, 64 })
    -- x^T + y: x's load is transposed, y's is not
    local t = x:transpose(1, 2) + y
    local text = last_listing(t).text
    assert.matches(', "LOCAL(2,16) LOCAL(1,16)")', text, 1, true)
    assert.matches("local %(16,16,1%)", text)
    assert.are.equal(1, count(text, "DEFINE_LOCAL"), text) -- y's load stays a load
    assert.are.equal(1, count(text, "BARRIER"), text)
    local got = t:tolist()
    for i = 1, 48 do
      for j = 1, 64 do
        assert.are.equal(data[(j - 1) * 48 + i] + other[(i - 1) * 64 + j], got[i][j])
      end
    end
    local profile = last_profile(x:transpose(1, 2) + y, data)
    assert.are.equal(3, #profile)
    for _, a in ipairs(profile) do assert.are.equal(a.needed, a.sectors, a.op) end
    -- a value per row of the output (the same for the lanes of a row) is not staged either
    local per_row = on_emu(integers(48, 61), { 48, 1 })
    text = last_listing(x:transpose(1, 2) + per_row).text
    assert.are.equal(1, count(text, "DEFINE_LOCAL"), text)
    -- a transpose of float16 through padding (a gated load): the same, values exact
    local h = on_emu(data, { 64, 48 }):cast("float16")
    local padded = h:transpose(1, 2):pad({ { 0, 16 }, { 0, 0 } }):contiguous()
    text = last_listing(padded).text
    assert.are.equal(1, count(text, "BARRIER"), text)
    got = padded:tolist()
    assert.are.equal(64, #got)
    for i = 1, 64 do
      for j = 1, 64 do
        assert.are.equal(i <= 48 and data[(j - 1) * 48 + i] or 0, got[i][j])
      end
    end
  end)

  it("coalesces every kernel of common workloads: at least 70 % of the sectors a warp touches are needed", function()
    -- EMU's memory profile of each kernel these compile, loads and stores together; a layout
    -- that makes lanes read a sector each (13 %) fails here
    local rt = require "tcl.runtime"
    local function rand(shape)
      local n = 1
      for _, d in ipairs(shape) do n = n * d end
      return on_emu(integers(n, 60), shape)
    end
    local x, w = rand { 64, 256 }, rand { 256, 64 }
    local workloads = {
      row_sum = x:sum(2), column_sum = x:sum(1), softmax = x:softmax(2),
      layernorm = x:layernorm(), elementwise = x * 2 + 1, transpose = x:transpose(1, 2):contiguous(),
      matmul = x:matmul(w), batchnorm_sums = rand({ 4, 16, 16, 16 }):sum({ 1, 3, 4 }),
      few_rows_matmul = rand({ 16, 256 }):matmul(rand { 256, 64 }),
    }
    local names = {}
    for name in pairs(workloads) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local sched = schedule.create({ workloads[name].uop }, { device = "EMU" })
      for _, k in ipairs(sched.kernels) do
        local program = lower.compile(k.ast, { device = "EMU" }).program.emu
        local buffers = {}
        for slot, p in ipairs(program.params) do buffers[slot] = rt.buffer(p.dtype, p.numel) end
        local _, profile = program:profile(buffers)
        local needed, sectors = 0, 0
        for _, a in ipairs(profile) do needed, sectors = needed + a.needed, sectors + a.sectors end
        assert.is_true(needed >= 0.7 * sectors, string.format("%s: kernel %s needs %d of the %d sectors it touches",
          name, program.name, needed, sectors))
      end
    end
  end)

  it("maps more than three output axes onto the launch through // and %", function()
    local data = integers(3 * 5 * 7 * 2, 6)
    local x = on_emu(data, { 3, 5, 7, 2 })
    local got = (x * 2 + 1):permute(4, 3, 2, 1):contiguous():tolist()
    assert.are.equal(data[1] * 2 + 1, got[1][1][1][1])
    assert.are.equal(data[#data] * 2 + 1, got[2][7][5][3])
    -- (i, j, k, l) of the result is x[l][k][j][i]
    assert.are.equal(data[((2 - 1) * 5 * 7 * 2) + ((3 - 1) * 7 * 2) + ((4 - 1) * 2) + 1] * 2 + 1, got[1][4][3][2])
  end)

  it("combines a group of any size: a tree for powers of two, a loop otherwise", function()
    for _, group in ipairs { 3, 8 } do
      optimize.set_heuristic(function(k) k:apply("GROUP", 1, group) end)
      local data = integers(5 * 48, 10 + group)
      local x = on_emu(data, { 5, 48 })
      local want = {}
      for r = 1, 5 do
        local m = -math.huge
        for c = 1, 48 do m = math.max(m, data[(r - 1) * 48 + c]) end
        want[r] = m
      end
      assert.are.same(want, x:max(2):tolist(), "group of " .. group)
      local text = last_listing(x:max(2)).text
      local _, barriers = text:gsub("BARRIER", "")
      -- a tree of 8 has a barrier per step (3) after the first, and one after the result
      assert.are.equal(group == 8 and 5 or 2, barriers, text)
    end
  end)

  it("combines a group whose threads are lanes in order by warp shuffles: no barrier up to 32 threads, two beyond",
    function()
    -- opts, the reduction, the SHUFFLEs and BARRIERs it takes: a group of 16 (4 steps), of 32
    -- (5), of 64 (5 per warp, 1 over the 2 warps), GROUPTOP's 256 of a long row (5, then 3)
    local cases = {
      { opts = { { "LOCAL", 1, 4 }, { "GROUP", 1, 16 } }, cols = 64, op = "sum", shuffles = 4, barriers = 0 },
      { opts = { { "GROUP", 1, 32 } }, cols = 64, op = "max", shuffles = 5, barriers = 0 },
      { opts = { { "GROUP", 1, 64 } }, cols = 128, op = "sum", shuffles = 6, barriers = 2 },
      { cols = 1024, op = "sum", shuffles = 8, barriers = 2 },
    }
    for i, case in ipairs(cases) do
      optimize.set_heuristic(case.opts and function(k)
        for _, o in ipairs(case.opts) do k:apply(table.unpack(o)) end
      end or nil)
      local data = integers(8 * case.cols, 20 + i)
      local x = on_emu(data, { 8, case.cols })
      local want = {}
      for r = 1, 8 do
        local acc = case.op == "sum" and 0 or -math.huge
        for c = 1, case.cols do
          local v = data[(r - 1) * case.cols + c]
          acc = case.op == "sum" and acc + v or math.max(acc, v)
        end
        want[r] = acc
      end
      local function reduced() return case.op == "sum" and x:sum(2) or x:max(2) end
      local text = last_listing(reduced()).text
      assert.are.same(want, reduced():tolist(), "case " .. i)
      assert.are.equal(case.shuffles, count(text, "SHUFFLE"), text)
      assert.are.equal(case.barriers, count(text, "BARRIER"), text)
    end
    local data = integers(8 * 64, 30)
    local x = on_emu(data, { 8, 64 })
    local want = {}
    -- float64 does not travel between lanes: the tree through local memory (1 + 5 + 1 barriers)
    optimize.set_heuristic(function(k) k:apply("GROUP", 1, 32) end)
    local wide = x:cast("float64")
    local text = last_listing(wide:max(2)).text
    assert.are.equal(0, count(text, "SHUFFLE"), text)
    assert.are.equal(7, count(text, "BARRIER"), text)
    for r = 1, 8 do
      want[r] = -math.huge
      for c = 1, 64 do want[r] = math.max(want[r], data[(r - 1) * 64 + c]) end
    end
    assert.are.same(want, wide:max(2):tolist())
  end)

  it("lets BEAM search workgroups and shared reductions; every candidate it keeps runs race-free", function()
    local data = integers(8 * 512, 12)
    local x = on_emu(data, { 8, 512 })
    local want = {}
    for r = 1, 8 do
      local s = 0
      for c = 1, 512 do s = s + data[(r - 1) * 512 + c] end
      want[r] = s
    end
    assert.are.same(want, x:sum(2):realize({ beam = 2 }):tolist())
  end)

  it("counts the operations of every thread (tcl.codegen.driver.estimates)", function()
    local x = on_emu(integers(64 * 64, 9), { 64, 64 })
    local sched = schedule.create({ (x * 2 + 1).uop }, { device = "EMU" })
    local k = lower.compile(sched.kernels[#sched.kernels].ast, { device = "EMU" })
    assert.matches("lidx", k.program:dump(), 1, true)
    assert.are.equal(2 * 64 * 64, k.ops) -- a MUL and an ADD per element, whichever thread does it
  end)

  it("runs kernels without opts (NOOPT): one thread per workgroup", function()
    local data = integers(300, 7)
    local x = on_emu(data, { 300 })
    local s = 0
    for _, v in ipairs(data) do s = s + v end
    assert.are.equal(s, x:sum():realize({ noopt = true }):item())
  end)

  it("follows a heuristic's LOCAL and GROUP opts, and gates the stores of a group to one thread", function()
    optimize.set_heuristic(function(k)
      k:apply("GROUP", 1, 16)
      k:apply("LOCAL", 1, 4)
    end)
    local data = integers(8 * 64, 8)
    local x = on_emu(data, { 8, 64 })
    local want = {}
    for r = 1, 8 do
      local s = 0
      for c = 1, 64 do s = s + data[(r - 1) * 64 + c] end
      want[r] = s
    end
    assert.are.same(want, x:sum(2):tolist())
    local k = last_listing(x:sum(2))
    assert.matches("GROUP%(1,16%) LOCAL%(1,4%)", k.text) -- the listing's header names the opts
    -- the group's axis is the outer one, but gpu dims puts its threads innermost: they shuffle
    assert.are.equal(4, count(k.text, "SHUFFLE"), k.text)
    assert.are.equal(0, count(k.text, "BARRIER"), k.text)
  end)
end)

describe("workgroup limits of the opts", function()
  local caps = targets.get("CUDA").opt_caps()

  local function reduce_kernel()
    local x = Tensor.ones(64, 2048, { device = "EMU" })
    local sched = schedule.create({ x:sum(2).uop }, { device = "EMU" })
    return opt.kernel(sched.kernels[#sched.kernels].ast, caps)
  end

  it("refuse a workgroup of more threads than the device runs", function()
    local k = reduce_kernel()
    k:apply("GROUPTOP", 1, 256)
    local ok, err = pcall(k.apply, k, "LOCAL", 1, 64)
    assert.is_false(ok)
    assert.matches("a workgroup would have 16384 threads, the device runs at most 1024", tostring(err), 1, true)
  end)

  it("refuse a shared reduction that needs more local memory than the device has", function()
    local small = {}
    for key, v in pairs(caps) do small[key] = v end
    small.shared_max = 1024
    local x = Tensor.ones(64, 2048, { device = "EMU" })
    local sched = schedule.create({ x:sum(2).uop }, { device = "EMU" })
    local k = opt.kernel(sched.kernels[#sched.kernels].ast, small)
    local ok, err = pcall(k.apply, k, "GROUPTOP", 1, 256)
    assert.is_false(ok)
    assert.matches("needs 2048 bytes of local memory, the device has 1024", tostring(err), 1, true)
  end)

  it("name both GPU targets and refuse an unknown one", function()
    assert.are.equal(1024, targets.get("metal").gpu.threads_max)
    assert.are.equal(48 * 1024, targets.get("CUDA").opt_caps().shared_max)
    local ok, err = pcall(targets.get, "ROCM")
    assert.is_false(ok)
    assert.matches("unknown GPU target 'ROCM' (known: CUDA, CUDA_SM75, CUDA_SM90, METAL)", err, 1, true)
  end)
end)
