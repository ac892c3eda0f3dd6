-- spec/api/progress_spec.lua — progress bars (lua/tcl/progress.lua, tcl.progress): the exact line
-- drawn on a fake stream under a fake clock (percent, bar cells, count, elapsed, ETA, rate,
-- postfix, status), at most one redraw per interval, the final line and newline on close, quiet
-- unless the stream is a terminal or TCL_PROGRESS / `enabled` say otherwise, wrap() and
-- loader:batches{progress = ...} passing every value through, and the argument errors.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local core = require "tcl.core"
local progress = tcl.progress

-- A stream that keeps what is written, and a clock the spec moves.
local function fake_stream()
  local stream = { writes = {} }
  function stream:write(...)
    for _, s in ipairs({ ... }) do self.writes[#self.writes + 1] = s end
    return self
  end
  function stream.flush() end
  function stream:text() return table.concat(self.writes) end
  return stream
end
local function fake_clock()
  local clock = { now = 100 }
  clock.read = function() return clock.now end
  return clock
end

-- A bar drawn on a fake stream under a fake clock (always enabled unless opts say otherwise).
local function test_bar(opts)
  local stream, clock = fake_stream(), fake_clock()
  opts = opts or {}
  opts.stream, opts.clock = stream, clock.read
  if opts.enabled == nil then opts.enabled = true end
  return progress.new(opts), stream, clock
end

local FULL = "█"
local function cells(full, partial, width)
  return string.rep(FULL, full) .. (partial or "") .. string.rep(" ", width - full - (partial and 1 or 0))
end

describe("tcl.progress", function()
  it("draws the label, percent, bar, count, elapsed time, ETA, rate and postfix on one line", function()
    local bar, stream, clock = test_bar { total = 100, label = "epoch 1", unit = "batch" }
    assert.are.equal("\repoch 1   0% |" .. cells(0, nil, 20) .. "| 0/100 [00:00<?, ? batch/s]", stream:text())
    clock.now = clock.now + 3.42
    bar:update(42, { loss = 0.31 })
    -- 42 in 3.42 s: 12.28/s; 58 left: 4.72 s; 42% of 20 cells is 8.4: 8 full and 3 eighths
    local second = "\repoch 1  42% |" .. cells(8, "▍", 20) .. "| 42/100 [00:03<00:05, 12.3 batch/s] loss=0.31"
    assert.are.equal(second, table.concat(stream.writes, "", 4))
    assert.are.equal(42, bar.n)
    clock.now = clock.now + 6.58
    bar:set_status("step 2")
    bar:update(58)
    stream.writes = {}
    bar:close()
    assert.are.equal("\repoch 1 100% |" .. cells(20, nil, 20) .. "| 100/100 [00:10<00:00, 10.0 batch/s] loss=0.31"
      .. " | step 2\n", stream:text())
  end)

  it("computes percent, ETA and rate, and shows a count without a total", function()
    local bar, _, clock = test_bar { total = 200, unit = "img", width = 8 }
    clock.now = clock.now + 10
    bar:update(50)
    -- 5/s; 150 left: 30 s; 25% of 8 cells: 2 full
    assert.are.equal(" 25% |" .. cells(2, nil, 8) .. "| 50/200 [00:10<00:30, 5.0 img/s]", bar:line(clock.now))
    -- under one a second: seconds per unit; an hour on: h:mm:ss
    assert.are.equal(" 25% |" .. cells(2, nil, 8) .. "| 50/200 [1:23:20<4:10:00, 100.00 s/img]",
      bar:line(clock.now - 10 + 5000))
    local open, _, clock2 = test_bar { label = "reading" }
    clock2.now = clock2.now + 4
    open:update(10, "fast")
    assert.are.equal("reading 10 it [00:04, 2.5 it/s] fast", open:line(clock2.now))
    -- initial units are not counted in the rate; past the total the ETA is 0
    local resumed, _, clock3 = test_bar { total = 10, initial = 8 }
    clock3.now = clock3.now + 2
    resumed:update(1)
    assert.are.equal(" 90% |" .. cells(18, nil, 20) .. "| 9/10 [00:02<00:02, 2.00 s/it]", resumed:line(clock3.now))
    local empty = test_bar { total = 0 }
    assert.are.equal("100% |" .. cells(20, nil, 20) .. "| 0/0 [00:00<00:00, ? it/s]", empty:line(empty.start))
  end)

  it("redraws at most once per interval, and blanks the tail of a longer line it replaces", function()
    local bar, stream, clock = test_bar { total = 1000 }
    local function drawings() return helper.count(stream:text(), "\r") end
    assert.are.equal(1, drawings()) -- drawn when made
    for _ = 1, 50 do
      clock.now = clock.now + 0.001
      bar:update(1)
    end
    assert.are.equal(1, drawings()) -- 50 updates in 0.05 s: none drawn
    clock.now = clock.now + 0.06
    bar:update(1)
    assert.are.equal(2, drawings()) -- 0.11 s after the last drawing: one more
    assert.matches(" 51/1000 %[[^\r]*$", stream:text())
    bar:set_status("a long status text")
    assert.are.equal(2, drawings()) -- within the interval
    clock.now = clock.now + 0.125
    bar:set_status("a long status text")
    local long = stream.writes[#stream.writes - 1]
    clock.now = clock.now + 0.125
    bar:set_status(nil)
    assert.are.equal(4, drawings())
    local short = stream.writes[#stream.writes - 1]
    assert.are.equal(" | a long status text", long:sub(-#" | a long status text"))
    assert.is_nil(short:find("status", 1, true))
    -- the shorter line is followed by blanks as wide as the difference
    assert.are.equal(string.rep(" ", utf8.len(long) - utf8.len(short)), stream.writes[#stream.writes])
    assert.is_true(utf8.len(long) - utf8.len(short) >= #" | a long status text")
    -- interval 0: every update draws
    local every, every_stream = test_bar { total = 3, interval = 0 }
    every:update()
    every:update()
    assert.are.equal(3, helper.count(every_stream:text(), "\r"))
  end)

  it("closes with the final line and a newline, once; a closed bar refuses updates", function()
    local bar, stream, clock = test_bar { total = 2, label = "x" }
    bar:update(1)
    clock.now = clock.now + 0.01
    bar:update(1) -- within the interval: not drawn
    stream.writes = {}
    bar:close()
    assert.are.equal("\rx 100% |" .. cells(20, nil, 20) .. "| 2/2 [00:00<00:00, 200.0 it/s]\n", stream:text())
    bar:close()
    assert.are.equal(4, #stream.writes) -- "\r", the line, "", "\n": nothing more
    assert.are.equal("bar:update: the bar is closed", helper.message_of(bar.update, bar, 1))
    assert.are.equal("bar:set_status: the bar is closed", helper.message_of(bar.set_status, bar, "x"))
    do
      local scoped <close> = progress.new { stream = stream, enabled = true, clock = clock.read }
      scoped:update(3)
    end
    assert.are.equal("\n", stream.writes[#stream.writes]) -- a to-be-closed bar closes at the end of its scope
  end)

  it("draws nothing unless its stream is a terminal, TCL_PROGRESS or enabled say so", function()
    local auto = tcl.context { PROGRESS = "auto" }
    -- io.stderr: as core.is_terminal says (under busted, a file or a pipe: off)
    auto(function()
      local bar = progress.new { stream = io.stderr, total = 3 }
      assert.are.equal(core.is_terminal("stderr"), bar.enabled)
      bar.stream = fake_stream() -- whatever the real stream is, it writes nowhere when disabled
      bar.enabled = false
      bar:close()
      assert.are.same({}, bar.stream.writes)
      assert.are.equal(core.is_terminal("stdout"), progress.new { stream = io.stdout }.enabled)
    end)
    -- any other stream is no terminal: nothing written, but the bar counts
    local stream = fake_stream()
    auto(function()
      local bar = progress.new { stream = stream, total = 3 }
      bar:update(2)
      bar:close()
      assert.is_false(bar.enabled)
      assert.are.equal(2, bar.n)
    end)
    assert.are.same({}, stream.writes)
    -- TCL_PROGRESS=1 draws anywhere, 0 nowhere; a bar's own enabled comes first
    tcl.context { PROGRESS = true }(function()
      assert.is_true(progress.new { stream = stream }.enabled)
      assert.is_false(progress.new { stream = stream, enabled = false }.enabled)
    end)
    assert.are.equal(1, helper.count(stream:text(), "\r"))
    tcl.context { PROGRESS = 0 }(function()
      assert.is_false(progress.new { stream = fake_stream() }.enabled)
      assert.is_false(progress.new { stream = io.stderr }.enabled)
      assert.is_true(progress.new { stream = fake_stream(), enabled = true }.enabled)
    end)
    -- bars without a stream draw on progress.stream
    local saved = progress.stream
    progress.stream = fake_stream()
    local ok, err = pcall(tcl.context { PROGRESS = 1 }, function() progress.new { label = "here" }:close() end)
    local drawn = progress.stream:text()
    progress.stream = saved
    assert(ok, err)
    assert.matches("^\rhere 0 it %[00:00, %? it/s%]\rhere 0 it", drawn)
    assert.are.equal("context: PROGRESS must be true, false, 0, 1 or 'auto', got 'yes'",
      helper.message_of(tcl.context, { PROGRESS = "yes" }))
  end)

  it("wraps an iterator or a list, passing every value through and counting the finished steps", function()
    local stream, clock = fake_stream(), fake_clock()
    local rows = { { 1, nil, "a" }, { 2, false, "b" }, { 3, 0, nil } }
    local i = 0
    local function source()
      i = i + 1
      local r = rows[i]
      if r then return r[1], r[2], r[3] end
    end
    local it, bar = progress.wrap(source, { total = 3, stream = stream, clock = clock.read, enabled = true })
    local first = table.pack(it())
    assert.are.same({ n = 3, 1, nil, "a" }, first)
    assert.are.equal(0, bar.n) -- counted when the next step is asked for: the body is done
    local second = table.pack(it())
    assert.are.same({ n = 3, 2, false, "b" }, second)
    assert.are.equal(1, bar.n)
    assert.are.same({ n = 3, 3, 0, nil }, table.pack(it()))
    assert.are.same({ n = 1 }, table.pack(it()))
    assert.are.equal(3, bar.n)
    assert.is_true(bar.closed)
    assert.are.equal("\n", stream.writes[#stream.writes])
    assert.is_nil(it()) -- after the end: still the end, no error
    -- a list: its elements, total its length
    local seen = {}
    local list_it, list_bar = progress.wrap({ "x", "y" }, { enabled = false })
    for v in list_it do seen[#seen + 1] = v end
    assert.are.same({ "x", "y" }, seen)
    assert.are.equal(2, list_bar.total)
    assert.are.equal(2, list_bar.n)
    -- a loop over the four values closes the bar when it leaves early
    local it3, bar3 = progress.wrap({ 1, 2, 3 }, { stream = stream, clock = clock.read, enabled = true })
    for v in it3, bar3, nil, bar3 do
      if v == 1 then break end
    end
    assert.is_true(bar3.closed)
    assert.are.equal(0, bar3.n)
  end)

  it("draws the DataLoader's epochs with loader:batches{progress = ...}", function()
    local x = tcl.Tensor.arange(10):float()
    local y = tcl.Tensor.arange(10):int()
    local loader = tcl.data.DataLoader({ x, y }, { batch_size = 4 })
    local stream, clock = fake_stream(), fake_clock()
    local batches, bar = loader:batches { progress = { label = "epoch 1", stream = stream, clock = clock.read,
      enabled = true } }
    local sizes = {}
    for xb, yb in batches do
      sizes[#sizes + 1] = xb.shape[1] .. "/" .. yb.shape[1]
      clock.now = clock.now + 0.5
      bar:set_postfix { rows = xb.shape[1] }
    end
    assert.are.same({ "4/4", "4/4", "2/2" }, sizes)
    assert.are.equal(3, bar.total)
    assert.are.equal("batch", bar.unit)
    assert.are.equal("\repoch 1 100% |" .. cells(20, nil, 20) .. "| 3/3 [00:02<00:00, 2.0 batch/s] rows=2\n",
      table.concat(stream.writes, "", #stream.writes - 3))
    -- a label alone, and true: drawn where TCL_PROGRESS says (off here: nothing to see)
    tcl.context { PROGRESS = false }(function()
      local _, labelled = loader:batches { progress = "epoch 2" }
      assert.are.equal("epoch 2", labelled.label)
      local _, plain = loader:batches { progress = true }
      assert.is_nil(plain.label)
      assert.are.equal(3, plain.total)
    end)
  end)

  it("names the argument that is wrong", function()
    local cases = {
      { "progress.new: total must be an integer >= 0, got -1", progress.new, { total = -1 } },
      { "progress.new: total must be an integer >= 0, got 2.5", progress.new, { total = 2.5 } },
      { "progress.new: unknown option 'totl' (options: clock, enabled, initial, interval, label, status, stream, "
        .. "total, unit, width)", progress.new, { totl = 3 } },
      { "progress.new: options must be a table, got string", progress.new, "epoch" },
      { "progress.new: label must be a string, got number", progress.new, { label = 1 } },
      { "progress.new: stream must have write and flush methods, got table", progress.new, { stream = {} } },
      { "progress.new: enabled must be a boolean (nil: when the stream is a terminal), got string", progress.new,
        { enabled = "yes" } },
      { "progress.new: clock must be a function, got number", progress.new, { clock = 1 } },
      { "progress.new: interval must be a number of seconds >= 0, got -1", progress.new, { interval = -1 } },
      { "progress.new: width must be an integer >= 1, got 0", progress.new, { width = 0 } },
      { "progress.wrap: iterable must be an iterator function or a list, got number", progress.wrap, 42 },
      { "progress.wrap: unknown option 'bogus' (options: clock, enabled, initial, interval, label, status, stream, "
        .. "total, unit, width)", progress.wrap, function() end, { bogus = 1 } },
    }
    for _, case in ipairs(cases) do
      assert.are.equal(case[1], helper.message_of(case[2], table.unpack(case, 3)))
    end
    local bar = test_bar()
    assert.are.equal("bar:update: k must be an integer >= 0, got 1.5", helper.message_of(bar.update, bar, 1.5))
    assert.are.equal("bar:update: k must be an integer >= 0, got -1", helper.message_of(bar.update, bar, -1))
    assert.are.equal("bar:update: postfix must be a table or a string, got number",
      helper.message_of(bar.update, bar, 1, 0.3))
    assert.are.equal("bar:set_postfix: postfix value 'loss' must be a number, string or boolean, got table",
      helper.message_of(bar.set_postfix, bar, { loss = {} }))
    assert.are.equal("bar:set_postfix: postfix keys must be strings, got 1",
      helper.message_of(bar.set_postfix, bar, { 0.5 }))
    assert.are.equal("bar:set_status: text must be a string or nil, got number",
      helper.message_of(bar.set_status, bar, 3))
    assert.are.equal("bar:set_status: k must be an integer >= 0, got 'one'",
      helper.message_of(bar.set_status, bar, "x", "one"))
    assert.are.equal("bar:update: expected a progress bar (call it with ':'), got number",
      helper.message_of(bar.update, 1))
    local loader = tcl.data.DataLoader({ tcl.Tensor.arange(4) }, { batch_size = 2 })
    assert.are.equal("batches: progress must be a label (a string), true or a table of progress options, got number",
      helper.message_of(loader.batches, loader, { progress = 5 }))
    assert.are.equal("batches: unknown option 'progres'", helper.message_of(loader.batches, loader, { progres = "e" }))
    -- the error points at the caller's line, not inside tcl.progress
    local err = helper.error_of(function()
      local made = progress.new { total = -1 }
      return made
    end)
    assert.matches("progress_spec%.lua:%d+: progress%.new: total", err)
  end)
end)
