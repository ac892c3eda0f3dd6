-- tcl.viz — the viewer: a page that shows what the compiler did (docs/guide/viewer.md).
-- Layer: tools (tcl.viz.capture records, tcl.viz.page renders).
--
--   local path = tcl.viz(fn, ...)             -- runs fn(...), writes the page, prints its path;
--                                             -- returns the path and fn's results
--   tcl.viz.file = "out.html"                 -- where tcl.viz writes (default: TCL_VIZ_FILE,
--                                             -- else tcl-viz.html in the current directory)
--   local data, ... = tcl.viz.record(fn, ...) -- the page's data (docs/design/viewer.md), fn's results
--   tcl.viz.save("out.html", data)            -- a page of that data
--
-- VIZ=1 records the whole run of the `tcl` program (or of a C API state, from tcl's load to
-- tclc_close) and writes the page when it closes: TCL_VIZ_FILE, else
-- tcl-viz-<script name>.html in the current directory. The page is one HTML file with every
-- script and style inline: it opens from disk, without a server or a network.
-- While recording, every kernel run is timed (a GPU waits for each kernel), so the page has a
-- profile.
local env = require "tcl.env"
local check = require "tcl.api.check"
local capture = require "tcl.viz.capture"
local page = require "tcl.viz.page"
local progress = require "tcl.progress"

local M = {}

local function say(line) io.stderr:write("tcl: ", line, "\n") end

-- The page's title: the script the tcl program runs, when there is one.
local function title()
  return type(arg) == "table" and type(arg[0]) == "string" and arg[0] or "tcl"
end

local function check_fn(fn, name)
  if type(fn) ~= "function" and not (type(getmetatable(fn)) == "table" and getmetatable(fn).__call) then
    error(string.format("viz.%s: expected a function, got %s", name, check.type_name(fn)), 3)
  end
end

-- Lowering every kernel again takes a while on a large model: a progress bar (tcl.progress:
-- drawn on a terminal only) over the kernels; the bar closes when the page is written.
local function kernels_bar(path)
  local bar
  return function(done, total)
    bar = bar or progress.new { total = total, label = "viz " .. path, unit = "kernel" }
    bar:update(1)
    if done == total then bar:close() end
  end
end

--- Runs fn(...) while recording; returns the page's data and fn's results. An error in fn
-- stops the recording and is raised again.
function M.record(fn, ...)
  check_fn(fn, "record")
  local c = capture.start()
  local results = table.pack(pcall(fn, ...))
  c:stop()
  if not results[1] then error(results[2], 0) end
  return c:data({ title = title() }), table.unpack(results, 2, results.n)
end

--- Writes the page of data to path.
function M.save(path, data)
  if type(path) ~= "string" or path == "" then
    error("viz.save: path must be a file name, got " .. check.type_name(path), 2)
  end
  if type(data) ~= "table" or data.version == nil then
    error("viz.save: data must be what tcl.viz.record returns, got " .. check.type_name(data), 2)
  end
  page.write(path, data)
end

local function call(_, fn, ...)
  check_fn(fn, "viz")
  local path = M.file or env.VIZ_FILE or "tcl-viz.html"
  local c = capture.start()
  local results = table.pack(pcall(fn, ...))
  c:stop()
  if not results[1] then error(results[2], 0) end
  page.write(path, c:data({ title = title(), progress = kernels_bar(path) }))
  say("viz: wrote " .. path)
  return path, table.unpack(results, 2, results.n)
end

-- The page VIZ=1 writes: named after the script the tcl program runs.
local function program_file()
  if env.VIZ_FILE then return env.VIZ_FILE end
  local script = type(arg) == "table" and type(arg[0]) == "string" and arg[0] or nil
  local name = script and script:match("([^/\\]+)$") or "run"
  return "tcl-viz-" .. name:gsub("%.lua$", ""):gsub("[^%w%-_.]", "_") .. ".html"
end

--- VIZ=1: records from now until the state closes (the registry's "tcl.at_close" list, which
-- tclc_close runs before the state goes), then writes the page. Called once, by tcl's init.
function M.record_until_close()
  local c = capture.start()
  local registry = debug.getregistry()
  local at_close = registry["tcl.at_close"] or {}
  registry["tcl.at_close"] = at_close
  at_close[#at_close + 1] = function()
    c:stop()
    local path = program_file()
    local ok, err = pcall(function()
      page.write(path, c:data({ title = title(), progress = kernels_bar(path) }))
    end)
    if ok then say("VIZ: wrote " .. path) else say("VIZ: could not write the page: " .. tostring(err)) end
  end
  return c
end

return setmetatable(M, { __call = call })
