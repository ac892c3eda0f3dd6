-- spec/api/profile_spec.lua — tcl.profile (lua/tcl/profile/): the report's events (kernel runs
-- with their start, copies, compiles), its rows (aggregated by kernel, slowest first, shares
-- of the kernel time, GFLOPS, GB/s, the roofline against the peaks), the printed table, the
-- Chrome trace tcl.profile.save writes (parsed back), the peaks (measured on the CPU,
-- TCL_PEAK_GFLOPS / TCL_PEAK_GBS), the errors, and that nothing is recorded once it returns.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local json = require "tcl.api.json"
local events = require "tcl.codegen.driver.events"
local report_module = require "tcl.profile.report"
local peaks = require "tcl.profile.peaks"
local Tensor = tcl.Tensor

local PEAKS = { gflops = 100, gbs = 10, source = "given" }
local function given_peaks() return PEAKS end
local function no_peaks() return nil end

-- A report of made-up kernel runs (seconds, ops, bytes chosen so every figure is exact).
local function made_up_report()
  local r = report_module.new(10)
  local runs = {
    { "E_small", 0.001, 1e6, 4e6 },
    { "r_matmul", 0.1, 2e9, 1e8 },
    { "E_copy", 0.5, 1e8, 1e9 },
    { "r_matmul", 0.1, 2e9, 1e8 },
  }
  for i, run in ipairs(runs) do
    r:add { kind = "kernel", name = run[1], device = "CPU", start = 10 + i, seconds = run[2], ops = run[3],
      bytes = run[4] }
  end
  r:add { kind = "copy", name = "read to host", device = "CPU", start = 15, seconds = 0.002, bytes = 4096 }
  r:add { kind = "compile", track = "compile", name = "compile 3 kernels", device = "CPU", start = 10.5,
    seconds = 0.25, kernels = { "E_small", "r_matmul", "E_copy" } }
  r:add { kind = "compile", track = "lower", name = "lower E_small", device = "CPU", start = 10.5, seconds = 0.01 }
  r.wall = 6
  return r
end

-- achieved / attainable, attainable = min(peak GFLOPS, ops / bytes x peak GB/s): the roofline's
-- definition, computed apart from the module's own formula
local function roofline(ops, bytes, seconds, p)
  local achieved = ops / seconds / 1e9
  return achieved / math.min(p.gflops, ops / bytes * p.gbs)
end

describe("tcl.profile", function()
  it("records each kernel run with its start, and returns fn's results after the report", function()
    local x = Tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):realize()
    local report, a, b = tcl.profile(function(k) return ((x * k):sum(2) + 1):tolist(), "second" end, 3)
    assert.are.same({ 19, 46 }, a)
    assert.are.equal("second", b)
    assert.is_true(#report.kernels >= 1)
    local total = 0
    for _, k in ipairs(report.kernels) do
      assert.are.equal("string", type(k.name))
      assert.are.equal("CPU", k.device)
      assert.is_true(k.seconds >= 0 and k.ops >= 0 and k.bytes > 0)
      assert.is_true(k.start >= report.start and k.start + k.seconds <= report.start + report.wall)
      total = total + k.seconds
    end
    assert.are.equal(total, report.seconds)
    assert.is_true(report.wall >= report.seconds)
    -- tolist read the result to the host: a copy of its 2 values (int64: the sum of int32s)
    assert.are.equal(1, #report.copies)
    assert.are.equal("read to host", report.copies[1].name)
    assert.are.equal(2 * 8, report.copies[1].bytes)
  end)

  it("records the compiles of kernels it builds: the batch, each kernel's lowering, the build", function()
    local x = Tensor({ 1.5, 2.5 }):realize()
    -- a constant no other spec uses: a kernel no cache holds
    local report = tcl.profile(function() return (x * 1.0078125 - 0.375):realize() end)
    local by_track = {}
    for _, c in ipairs(report.compiles) do
      by_track[c.track] = by_track[c.track] or {}
      table.insert(by_track[c.track], c)
      assert.is_true(c.start >= report.start and c.seconds >= 0)
    end
    assert.are.equal(1, #by_track.compile)
    local batch = by_track.compile[1]
    assert.are.equal("compile 1 kernel", batch.name)
    assert.are.same({ report.kernels[1].name }, batch.kernels)
    assert.are.same({ "lower " .. report.kernels[1].name }, { by_track.lower[1].name })
    assert.are.equal(1, #by_track.build)
    -- nested in the batch
    for _, c in ipairs { by_track.lower[1], by_track.build[1] } do
      assert.is_true(c.start >= batch.start and c.start + c.seconds <= batch.start + batch.seconds)
    end
    -- the CPU backend's own time for the kernel (compiled anew: not in the disk cache)
    assert.are.equal(report.kernels[1].name, by_track["compile workers"][1].name)
    -- run again: nothing to compile
    assert.are.same({}, tcl.profile(function() return (x * 1.0078125 - 0.375):realize() end).compiles)
  end)

  it("records nothing once it has returned, and times nothing then", function()
    local x = Tensor({ 1, 2, 3 }):realize()
    local report = tcl.profile(function() return (x + 1):realize() end)
    local kernels, copies = #report.kernels, #report.copies
    assert.is_false(events.on())
    ;(x + 2):realize()
    local _ = (x * 5):tolist()
    assert.are.equal(kernels, #report.kernels)
    assert.are.equal(copies, #report.copies)
    assert.is_false(events.on())
  end)

  it("raises fn's error as it is, and stops listening", function()
    assert.are.equal("boom", helper.error_of(tcl.profile, function() error("boom", 0) end))
    assert.is_false(events.on())
    assert.are.equal("profile: expected a function, got number", helper.message_of(tcl.profile, 42))
  end)
end)

describe("a profile report", function()
  it("aggregates kernels by name, slowest first, with shares that sum to 100", function()
    local rows = made_up_report():rows(given_peaks)
    local names, calls = {}, {}
    for i, row in ipairs(rows) do names[i], calls[i] = row.name, row.calls end
    assert.are.same({ "E_copy", "r_matmul", "E_small" }, names)
    assert.are.same({ 1, 2, 1 }, calls)
    local shares = 0
    for _, row in ipairs(rows) do shares = shares + row.share end
    assert.is_true(math.abs(shares - 100) < 1e-9, tostring(shares))
    assert.is_true(math.abs(rows[1].share - 0.5 / 0.701 * 100) < 1e-9)
    -- r_matmul: both runs summed
    assert.are.equal(0.2, rows[2].seconds)
    assert.are.equal(4e9, rows[2].ops)
    assert.are.equal(2e8, rows[2].bytes)
  end)

  it("keeps two kernels of one name apart (E_64, E_64#2), and one kernel's runs together", function()
    local a, b = Tensor.randn(64):realize(), Tensor.randn(64):realize()
    local r = tcl.profile(function()
      for _ = 1, 2 do (a + b):realize() end -- one kernel, run twice
      return (a * b):exp():realize()        -- another, of the same shape: the same name
    end)
    local seen = {}
    for _, row in ipairs(r:rows(no_peaks)) do seen[row.name] = row.calls end
    local name = r.kernels[1].name
    assert.are.equal(name, r.kernels[3].name, "the two kernels share a name")
    assert.are_not.equal(r.kernels[1].kernel, r.kernels[3].kernel)
    assert.are.same({ [name] = 2, [name .. "#2"] = 1 }, seen)
  end)

  it("gives GFLOPS = ops / seconds / 1e9, GB/s likewise, and the roofline achieved / attainable", function()
    for _, row in ipairs(made_up_report():rows(given_peaks)) do
      assert.is_true(math.abs(row.gflops - row.ops / row.seconds / 1e9) <= 1e-9 * row.gflops)
      assert.is_true(math.abs(row.gbs - row.bytes / row.seconds / 1e9) <= 1e-9 * row.gbs)
      local want = roofline(row.ops, row.bytes, row.seconds, PEAKS)
      assert.is_true(math.abs(row.roofline - want) <= 1e-12 * want, row.name .. ": " .. row.roofline .. " " .. want)
    end
    -- by hand: r_matmul is compute-bound (20 GFLOPS of 100), E_copy memory-bound (2 GB/s of 10)
    local rows = made_up_report():rows(given_peaks)
    assert.is_true(math.abs(rows[2].roofline - 0.2) < 1e-12)
    assert.is_true(math.abs(rows[1].roofline - 0.2) < 1e-12)
    -- no peaks: no roofline
    assert.is_nil(made_up_report():rows(no_peaks)[1].roofline)
    -- a kernel that computes nothing is measured against the bandwidth alone
    assert.are.equal(0.5, report_module.roofline(0, 5e8, 0.1, PEAKS))
  end)

  it("prints a table of the kernels, the totals and the peaks", function()
    local text = made_up_report():format(given_peaks)
    local lines = {}
    for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.same({ "kernel", "device", "calls", "total", "ms", "share", "GFLOPS", "GB/s", "roofline" },
      (function() local w = {} for word in lines[1]:gmatch("%S+") do w[#w + 1] = word end return w end)())
    assert.are.equal(
      "E_copy                           CPU        1   500.000  71.3%     0.20     2.00      20%", lines[2])
    assert.are.equal(
      "r_matmul                         CPU        2   200.000  28.5%    20.00     1.00      20%", lines[3])
    assert.are.equal(
      "E_small                          CPU        1     1.000   0.1%     1.00     4.00      40%", lines[4])
    assert.are.equal("kernels 701.000 ms in 4 runs, wall 6000.000 ms; copies 2.000 ms (1, 4.1 KB); "
      .. "compiles 250.000 ms (1)", lines[5])
    assert.are.equal("peaks CPU: 100.0 GFLOPS, 10.0 GB/s (given)", lines[6])
    assert.are.equal(6, #lines)
    -- every row as wide as the header: the columns line up
    for i = 2, 4 do assert.are.equal(#lines[1], #lines[i]) end
    -- without peaks, "-"
    assert.is_truthy(made_up_report():format(no_peaks):find("  -\n", 1, true))
  end)

  it("cuts long kernel names, keeping both ends", function()
    local long = "r_2_4_8_16_32_64_128_256_512_1024_2048_4096n1"
    local cut = report_module.truncate(long)
    assert.are.equal(32, #cut)
    assert.are.equal("r_2_4_8_16_32_6...24_2048_4096n1", cut)
    assert.are.equal("E_4", report_module.truncate("E_4"))
  end)

  it("prints with print(report), the peaks from tcl.profile.peaks", function()
    local x = Tensor({ 1, 2, 3, 4 }):realize()
    local report = tcl.profile(function() return (x * 2):realize() end)
    local text, row = tcl.context { PEAK_GFLOPS = 100, PEAK_GBS = 10 }(function()
      return tostring(report), report:rows()[1]
    end)
    assert.is_truthy(text:find(report.kernels[1].name, 1, true))
    assert.is_truthy(text:find("peaks CPU: 100.0 GFLOPS, 10.0 GB/s (TCL_PEAK_GFLOPS/TCL_PEAK_GBS)", 1, true))
    local want = roofline(row.ops, row.bytes, row.seconds, PEAKS)
    assert.is_true(math.abs(row.roofline - want) <= 1e-12 * want)
  end)
end)

describe("tcl.profile.save", function()
  local write_temp, remove_all = helper.temp_files()
  after_each(remove_all)

  it("writes a Chrome trace: one process per device, kernels, copies and compiles as complete events", function()
    local x = Tensor({ 1.25, 2.5, 3.75 }):realize()
    local report = tcl.profile(function()
      local on_emu = (x * 1.0009765625):to("EMU") -- a kernel no cache holds, then a copy
      return ((on_emu + 1):sum()):tolist()
    end)
    local path = write_temp("")
    tcl.profile.save(path)
    local trace = json.decode(helper.read(path))
    assert.are.equal("ms", trace.displayTimeUnit)
    local processes, threads, by_cat = {}, {}, {}
    local completes = 0
    for _, e in ipairs(trace.traceEvents) do
      if e.ph == "M" and e.name == "process_name" then processes[e.pid] = e.args.name end
      if e.ph == "M" and e.name == "thread_name" then threads[e.pid .. "/" .. e.tid] = e.args.name end
      if e.ph == "X" then
        completes = completes + 1
        assert.is_truthy(threads[e.pid .. "/" .. e.tid], "an event on an unnamed track: " .. e.name)
        assert.is_true(e.ts >= 0 and e.dur >= 0, e.name)
        -- inside the call; but the compile workers' times are laid end to end, and several ran at once
        local laid_out = threads[e.pid .. "/" .. e.tid]:find("^compile workers") ~= nil
        assert.is_true(laid_out or e.ts + e.dur <= report.wall * 1e6 + 1, e.name)
        by_cat[e.cat] = by_cat[e.cat] or {}
        table.insert(by_cat[e.cat], e)
      end
    end
    assert.are.same({ "CPU", "EMU" }, processes)
    assert.are.equal(#report.kernels + #report.copies + #report.compiles, completes)
    assert.are.equal(#report.kernels, #by_cat.kernel)
    local kernel_devices = {}
    for _, e in ipairs(by_cat.kernel) do
      kernel_devices[processes[e.pid]] = true
      assert.are.equal("kernels", threads[e.pid .. "/" .. e.tid])
      assert.is_true(e.args.bytes > 0)
    end
    assert.are.same({ CPU = true, EMU = true }, kernel_devices)
    local copy_names = {}
    for _, e in ipairs(by_cat.copy) do copy_names[#copy_names + 1] = processes[e.pid] .. " " .. e.name end
    table.sort(copy_names)
    assert.are.same({ "EMU copy CPU->EMU", "EMU read to host" }, copy_names)
    assert.is_true(#by_cat.compile >= 3)
    -- the events are ordered by their start
    for i = 2, #by_cat.kernel do assert.is_true(by_cat.kernel[i].ts >= by_cat.kernel[i - 1].ts) end
    -- a report given writes that one
    local empty = write_temp("")
    tcl.profile.save(empty, tcl.profile(function() end))
    assert.are.same({}, json.decode(helper.read(empty)).traceEvents)
  end)

  it("names the path it cannot write, and refuses what is not a report", function()
    tcl.profile(function() end)
    assert.are.equal("profile.save: cannot write '/nonexistent-dir/t.json': No such file or directory",
      helper.message_of(tcl.profile.save, "/nonexistent-dir/t.json"))
    assert.are.equal("profile.save: expected a file path, got number", helper.message_of(tcl.profile.save, 3))
    assert.are.equal("profile.save: expected a report of tcl.profile, got table",
      helper.message_of(tcl.profile.save, "/tmp/x.json", {}))
    assert.are.equal("profile.save: got 3 arguments, expected at most 2: profile.save(path, report)",
      helper.message_of(tcl.profile.save, "/tmp/x.json", tcl.profile.last(), "extra"))
  end)

  it("says when there is no report yet", function()
    local status, _, err = helper.run(helper.shell_quote(helper.tcl_bin)
      .. " -e 'require(\"tcl\").profile.save(\"/tmp/never-written.json\")'")
    assert.are_not.equal(0, status)
    assert.is_truthy(err:find("profile.save: no report yet (call tcl.profile(fn) first)", 1, true), err)
  end)
end)

describe("tcl.profile.peaks", function()
  it("measures the CPU once per state", function()
    local p = tcl.context { PEAK_GFLOPS = false, PEAK_GBS = false }(peaks.of, "CPU")
    assert.are.equal("measured", p.source)
    assert.is_true(p.gflops > 0.1 and p.gbs > 0.1, p.gflops .. " " .. p.gbs)
    assert.are.equal(peaks.measured(), peaks.measured()) -- the same table: not measured again
    assert.is_nil(tcl.context { PEAK_GFLOPS = false, PEAK_GBS = false }(peaks.of, "EMU"))
  end)

  it("takes TCL_PEAK_GFLOPS and TCL_PEAK_GBS for every device", function()
    assert.are.same({ gflops = 100, gbs = 10, source = "TCL_PEAK_GFLOPS/TCL_PEAK_GBS" },
      tcl.context { PEAK_GFLOPS = 100, PEAK_GBS = 10 }(peaks.of, "EMU"))
    local cpu = tcl.context { PEAK_GFLOPS = false, PEAK_GBS = 12.5 }(peaks.of, "CPU")
    assert.are.same({ gflops = peaks.measured().gflops, gbs = 12.5, source = "measured/TCL_PEAK_GBS" }, cpu)
    assert.is_nil(tcl.context { PEAK_GFLOPS = 100, PEAK_GBS = false }(peaks.of, "EMU"))
    assert.are.equal("peaks.of: expected a device name, got nil", helper.message_of(peaks.of))
  end)

  it("refuses a peak that is not a number > 0", function()
    local status, _, err = helper.run("TCL_PEAK_GFLOPS=fast " .. helper.shell_quote(helper.tcl_bin) .. " -e ''")
    assert.are_not.equal(0, status)
    assert.is_truthy(err:find("TCL_PEAK_GFLOPS must be a number > 0, got 'fast'", 1, true), err)
    assert.are.equal("context: PEAK_GBS must be a number > 0 (or false: unset), got '0'",
      helper.message_of(function() tcl.context { PEAK_GBS = 0 } end))
  end)
end)
