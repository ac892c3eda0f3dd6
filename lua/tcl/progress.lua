-- tcl.progress — progress bars for long work (a training epoch, a BEAM search, an export): one
-- line redrawn in place with "\r", at most ten times a second, and nothing at all when its
-- stream is not a terminal. Layer: lua/tcl (beside tcl.env: the api, codegen and export stages
-- all draw bars).
--
--   local progress = require "tcl.progress"          -- also tcl.progress
--   local bar = progress.new { total = 100, label = "epoch 1", unit = "batch" }
--   for i = 1, 100 do work(i); bar:update(1, { loss = 0.31 }) end
--   bar:close()                                      -- the final line and a newline
--   -- epoch 1  42% |████████▍           | 42/100 [00:03<00:05, 12.3 batch/s] loss=0.31
--
--   local batches, bar <close> = progress.wrap(loader:batches(), { total = #loader, label = "epoch 1" })
--   for x, y in batches do ... bar:set_postfix { loss = l } end  -- the values pass unchanged
--
-- A bar's fields, to read: n (units done), total, label, unit, enabled, closed; bar:line(now) is
-- the line it would draw at clock time now.
-- Whether a bar draws: opts.enabled when given (true or false); else TCL_PROGRESS (tcl.env
-- PROGRESS: 1 always, 0 never); else only when the stream is io.stderr or io.stdout and that is
-- a terminal (core.is_terminal), so logs and pipes get no carriage returns. A disabled bar still
-- counts (bar.n) and checks its arguments; it writes nothing.
-- Nested work (BEAM: the kernels of a batch, and the rounds of one kernel's search) stays on one
-- line: the outer bar counts, and the inner work's state is the bar's status, drawn after " | "
-- (bar:set_status): `BEAM  33% |█████▋     | 1/3 [...] | r_16_32: round 2/6, ...`.
-- The ETA is the work left at the average rate since the bar started (its first `initial` units
-- not counted: they were done before it).
local core = require "tcl.core"
local env = require "tcl.env"
local quote = require "tcl.quote"

local M = {}

--- Where bars without a stream draw (replaceable: a spec puts a fake stream here to see the
-- bars that tcl's own stages draw).
M.stream = io.stderr
--- The clock of bars without one (seconds; only differences matter).
M.clock = core.clock

local DEFAULT_INTERVAL = 0.1 -- seconds between redraws: ten a second is smooth and cheap
local DEFAULT_WIDTH = 20     -- cells of the bar
-- a cell filled by eighths: the partial last cell of the bar
local EIGHTHS = { "▏", "▎", "▍", "▌", "▋", "▊", "▉" }
local FULL = "█"

local Bar = {}
Bar.__index = Bar
Bar.__name = "progress bar"

-- An error naming fn, pointing at the first caller outside this file (the user's line).
local THIS_FILE = debug.getinfo(1, "S").source
local function fail(fn, fmt, ...)
  local message = fn .. ": " .. string.format(fmt, ...)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if info == nil then error(message, 0) end
    -- error's level counts from the function that calls error, as getinfo's does from here
    if info.source ~= THIS_FILE then error(message, info.what == "C" and 0 or level) end
    level = level + 1
  end
end

local function shown(v)
  if type(v) == "string" then return "'" .. quote(v) .. "'" end
  return quote(tostring(v))
end

-- "mm:ss", or "h:mm:ss" from an hour on
local function clock_text(seconds)
  local s = math.floor(seconds + 0.5)
  if s >= 3600 then return string.format("%d:%02d:%02d", s // 3600, s % 3600 // 60, s % 60) end
  return string.format("%02d:%02d", s // 60, s % 60)
end
M.clock_text = clock_text

local function value_text(v)
  if math.type(v) == "float" then return string.format("%.4g", v) end
  return tostring(v)
end

-- a postfix table as "k=v k=v", keys sorted (a table's order is not stable)
local function postfix_text(postfix)
  if postfix == nil then return nil end
  if type(postfix) == "string" then return postfix ~= "" and postfix or nil end
  local keys = {}
  for k in pairs(postfix) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. "=" .. value_text(postfix[k]) end
  return #parts > 0 and table.concat(parts, " ") or nil
end

local function is_stream(s)
  if type(s) ~= "userdata" and type(s) ~= "table" then return false end
  local ok, write, flush = pcall(function() return s.write, s.flush end)
  return ok and write ~= nil and flush ~= nil
end

local function check_postfix(fn, postfix)
  if postfix == nil or type(postfix) == "string" then return end
  if type(postfix) ~= "table" then fail(fn, "postfix must be a table or a string, got %s", type(postfix)) end
  for k, v in pairs(postfix) do
    if type(k) ~= "string" then fail(fn, "postfix keys must be strings, got %s", shown(k)) end
    if type(v) ~= "number" and type(v) ~= "string" and type(v) ~= "boolean" then
      fail(fn, "postfix value '%s' must be a number, string or boolean, got %s", quote(k), type(v))
    end
  end
end

local OPTIONS = { total = true, label = true, unit = true, stream = true, enabled = true, clock = true,
  interval = true, width = true, initial = true, status = true }

-- whether a bar on stream draws (see the header)
local function decide(enabled, stream)
  if enabled ~= nil then return enabled end
  if env.PROGRESS ~= nil then return env.PROGRESS end
  if stream == io.stderr then return core.is_terminal("stderr") end
  if stream == io.stdout then return core.is_terminal("stdout") end
  return false
end

-- opts checked, as the fields of a new bar
local function checked(fn, opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then fail(fn, "options must be a table, got %s", type(opts)) end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      fail(fn, "unknown option %s (options: clock, enabled, initial, interval, label, status, stream, total, unit, "
        .. "width)",
        shown(k))
    end
  end
  local function integer_at_least(name, least, default)
    local v = opts[name]
    if v == nil then return default end
    if math.type(v) ~= "integer" or v < least then
      fail(fn, "%s must be an integer >= %d, got %s", name, least, shown(v))
    end
    return v
  end
  local function text(name, default)
    local v = opts[name]
    if v == nil then return default end
    if type(v) ~= "string" then fail(fn, "%s must be a string, got %s", name, type(v)) end
    return v
  end
  local total = integer_at_least("total", 0, nil)
  local initial = integer_at_least("initial", 0, 0)
  local width = integer_at_least("width", 1, DEFAULT_WIDTH)
  local stream = opts.stream
  if stream == nil then stream = M.stream end
  if not is_stream(stream) then fail(fn, "stream must have write and flush methods, got %s", type(stream)) end
  if opts.enabled ~= nil and type(opts.enabled) ~= "boolean" then
    fail(fn, "enabled must be a boolean (nil: when the stream is a terminal), got %s", type(opts.enabled))
  end
  local clock = opts.clock or M.clock
  if type(clock) ~= "function" then fail(fn, "clock must be a function, got %s", type(clock)) end
  local interval = opts.interval == nil and DEFAULT_INTERVAL or opts.interval
  if type(interval) ~= "number" or interval < 0 or interval ~= interval then
    fail(fn, "interval must be a number of seconds >= 0, got %s", shown(interval))
  end
  return { total = total, n = initial, initial = initial, width = width, stream = stream, clock = clock,
    interval = interval, label = text("label", nil), unit = text("unit", "it"), status = text("status", nil),
    enabled = decide(opts.enabled, stream), closed = false, drawn_chars = 0 }
end

--- A new bar (drawn at once when enabled). opts: total (an integer >= 0; nil: unknown, then
-- only the count, the elapsed time and the rate show), label, unit (default "it"), stream
-- (anything with write and flush; default progress.stream, io.stderr), enabled (true or false;
-- nil: see the header), clock (a function returning seconds; default core.clock), interval
-- (seconds between redraws, default 0.1), width (cells of the bar, default 20), initial (units
-- done already, default 0), status (the first status: bar:set_status).
function M.new(opts)
  return Bar._open("progress.new", opts)
end

-- the bar's cells for fraction (0..1)
local function cells(fraction, width)
  local eighths = math.floor(fraction * width * 8)
  local full, part = eighths // 8, eighths % 8
  local text = string.rep(FULL, full)
  local used = full
  if part > 0 and full < width then
    text = text .. EIGHTHS[part]
    used = used + 1
  end
  return text .. string.rep(" ", width - used)
end

local function rate_text(rate, unit)
  if rate <= 0 then return "? " .. unit .. "/s" end
  if rate < 1 then return string.format("%.2f s/%s", 1 / rate, unit) end
  return string.format("%.1f %s/s", rate, unit)
end

--- The bar's line as drawn at time `now` (no "\r").
function Bar:line(now)
  local elapsed = math.max(0, now - self.start)
  local rate = elapsed > 0 and (self.n - self.initial) / elapsed or 0
  local parts = {}
  if self.label then parts[1] = self.label end
  if self.total then
    local fraction = self.total == 0 and 1 or math.min(1, self.n / self.total)
    local left = "?"
    if self.n >= self.total then left = clock_text(0)
    elseif rate > 0 then left = clock_text((self.total - self.n) / rate) end
    parts[#parts + 1] = string.format("%3d%% |%s| %d/%d [%s<%s, %s]", math.floor(fraction * 100),
      cells(fraction, self.width), self.n, self.total, clock_text(elapsed), left, rate_text(rate, self.unit))
  else
    parts[#parts + 1] = string.format("%d %s [%s, %s]", self.n, self.unit, clock_text(elapsed),
      rate_text(rate, self.unit))
  end
  local post = postfix_text(self.postfix)
  if post then parts[#parts + 1] = post end
  local line = table.concat(parts, " ")
  if self.status then line = line .. " | " .. self.status end
  return line
end

function Bar:_draw(now)
  local line = self:line(now)
  local chars = utf8.len(line) or #line
  -- a shorter line than the last leaves the last one's tail on screen: blank it
  local pad = self.drawn_chars > chars and string.rep(" ", self.drawn_chars - chars) or ""
  self.stream:write("\r", line, pad)
  self.stream:flush()
  self.drawn_chars, self.last_draw = chars, now
end

-- redraws when the interval has passed since the last drawing
function Bar:_refresh()
  if not self.enabled or self.closed then return end
  local now = self.clock()
  if now - self.last_draw >= self.interval then self:_draw(now) end
end

-- a bar from opts (checked, errors naming fn), drawn at once when enabled
function Bar._open(fn, opts)
  local bar = setmetatable(checked(fn, opts), Bar)
  bar.start = bar.clock()
  bar.last_draw = -math.huge
  if bar.enabled then bar:_draw(bar.start) end
  return bar
end

local function check_is_bar(fn, self)
  if getmetatable(self) ~= Bar then fail(fn, "expected a progress bar (call it with ':'), got %s", type(self)) end
end

local function check_bar(fn, self)
  check_is_bar(fn, self)
  if self.closed then fail(fn, "the bar is closed") end
end

--- Counts k more units done (default 1) and sets the postfix when one is given (a table of
-- name = number | string | boolean, shown as "name=value" sorted by name, or a string);
-- redraws when the interval has passed.
function Bar:update(k, postfix)
  check_bar("bar:update", self)
  if k == nil then k = 1 end
  if math.type(k) ~= "integer" or k < 0 then fail("bar:update", "k must be an integer >= 0, got %s", shown(k)) end
  check_postfix("bar:update", postfix)
  self.n = self.n + k
  if postfix ~= nil then self.postfix = postfix end
  self:_refresh()
end

--- Sets the postfix (see update; nil clears it); redraws when the interval has passed.
function Bar:set_postfix(postfix)
  check_bar("bar:set_postfix", self)
  check_postfix("bar:set_postfix", postfix)
  self.postfix = postfix
  self:_refresh()
end

--- Sets the status: text drawn after the bar and a " | " (nested work's state, or the step at
-- hand; nil clears it), and counts k more units done (default 0: a step finished and the next
-- named in one drawing); redraws when the interval has passed.
function Bar:set_status(text, k)
  check_bar("bar:set_status", self)
  if text ~= nil and type(text) ~= "string" then
    fail("bar:set_status", "text must be a string or nil, got %s", type(text))
  end
  if k == nil then k = 0 end
  if math.type(k) ~= "integer" or k < 0 then fail("bar:set_status", "k must be an integer >= 0, got %s", shown(k)) end
  self.status = text
  self.n = self.n + k
  self:_refresh()
end

--- Draws the final line and a newline (when enabled); later calls do nothing.
function Bar:close()
  check_is_bar("bar:close", self)
  if self.closed then return end
  if self.enabled then
    self:_draw(self.clock())
    self.stream:write("\n")
    self.stream:flush()
  end
  self.closed = true
end

-- a bar is a to-be-closed value: `local bar <close> = progress.new{...}`; the closing value of
-- wrap's loop
Bar.__close = Bar.close

--- An iterator over iterable's values with a bar counting them (tqdm's style): iterable is an
-- iterator function (each call returns the next values, nil at the end: loader:batches()), or
-- a list (its elements in order; total defaults to its length). Every value the iterator
-- returns passes through unchanged, all of them. A step is counted when the next one is asked
-- for (the loop's body is done), and the bar closes at the end, or when a `for` loop over the
-- four values returned leaves early (break, error). Returns the iterator, the bar, nil and the
-- bar: `for x, y in progress.wrap(f, opts) do` closes the bar however the loop ends, and
-- `local it, bar = progress.wrap(f, opts)` gives the bar for set_postfix.
function M.wrap(iterable, opts)
  local fn = "progress.wrap"
  local next_values = iterable
  if type(iterable) == "table" and getmetatable(iterable) == nil then
    local list, i = iterable, 0
    next_values = function()
      i = i + 1
      return list[i]
    end
    if opts == nil or (type(opts) == "table" and opts.total == nil) then
      local copy = {}
      for k, v in pairs(opts or {}) do copy[k] = v end
      copy.total = #list
      opts = copy
    end
  elseif type(iterable) ~= "function" then
    fail(fn, "iterable must be an iterator function or a list, got %s", type(iterable))
  end
  local bar = Bar._open(fn, opts)
  local started, finished = false, false
  local function pass(first, ...)
    if first == nil then
      finished = true
      bar:close()
      return nil
    end
    return first, ...
  end
  local function step()
    if finished then return nil end
    if started then bar:update(1) end
    started = true
    return pass(next_values())
  end
  return step, bar, nil, bar
end

return M
