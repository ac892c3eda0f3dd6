-- tcl.viz.page — the viewer page: one self-contained HTML file (no server, no network: the
-- viewer's script and style are inlined, the data is a JSON script element) that renders the
-- data tcl.viz.capture records (docs/design/viewer.md describes the table). Layer: viz.
--
--   local page = require "tcl.viz.page"
--   local html = page.html(data)          -- the page as a string
--   page.write("/tmp/model.html", data)   -- written atomically (complete or absent)
--   page.data_json(data)                  -- the data's JSON text, as the page holds it
--
-- The viewer (viewer.js, viewer.css beside this file, installed beside it too) is plain
-- ES2017 with its own layered graph layout; it reads the data from
-- <script type="application/json" id="tcl-viz-data">. In that element `</` is written `<\/`
-- and `<!--` as `\u003c!--` (both still the same JSON), so no string of the data can end
-- the element or switch the parser into its escaped state.
local json = require "tcl.api.json"
local runtime = require "tcl.runtime"

local M = {}

local function fail(fmt, ...)
  error("viz.page: " .. string.format(fmt, ...), 0)
end

-- The folder this file was loaded from (the source tree's lua/tcl/viz or the installed one):
-- viewer.js and viewer.css are found there.
local function own_dir()
  local source = debug.getinfo(1, "S").source
  local path = source:sub(1, 1) == "@" and source:sub(2) or package.searchpath("tcl.viz.page", package.path)
  if not path then fail("cannot tell where tcl.viz.page was loaded from (viewer.js and viewer.css live beside it)") end
  return path:match("^(.*)/[^/]*$") or "."
end

local assets -- { js =, css = }, read once

local function read_asset(path)
  local f, err = io.open(path, "rb")
  if not f then fail("cannot read the viewer file '%s': %s", path, err) end
  local text = f:read("a")
  f:close()
  -- inlined into a <script>/<style> element, which this would end early
  if text:lower():find("</script", 1, true) or text:lower():find("</style", 1, true) then
    fail("the viewer file '%s' contains '</script' or '</style', which cannot be inlined", path)
  end
  return text
end

local function viewer_assets()
  if not assets then
    local dir = own_dir()
    assets = { js = read_asset(dir .. "/viewer.js"), css = read_asset(dir .. "/viewer.css") }
  end
  return assets
end

local function escape_html(s)
  return (s:gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function check_list(data, field)
  local v = data[field]
  if type(v) ~= "table" then fail("data.%s must be a table, got %s", field, type(v)) end
end

--- The data's JSON text, safe inside a <script> element.
function M.data_json(data)
  local ok, text = pcall(json.encode, data)
  if not ok then fail("the data cannot be written as JSON: %s", tostring(text)) end
  return (text:gsub("</", "<\\/"):gsub("<!%-%-", "\\u003c!--"))
end

--- The page for data (see the header) as a string.
function M.html(data)
  if type(data) ~= "table" then fail("data must be a table, got %s", type(data)) end
  if data.version ~= 1 then fail("data.version must be 1, got %s", tostring(data.version)) end
  check_list(data, "nodes")
  check_list(data, "realizes")
  check_list(data, "kernels")
  if data.title ~= nil and type(data.title) ~= "string" then
    fail("data.title must be a string, got %s", type(data.title))
  end
  local a = viewer_assets()
  local title = escape_html("tcl viz — " .. (data.title or "untitled"))
  return table.concat({
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n",
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n",
    "<title>", title, "</title>\n<style>\n", a.css, "\n</style>\n</head>\n<body>\n",
    "<pre id=\"viz-errors\" hidden></pre>\n",
    "<div id=\"viz-app\">loading…</div>\n",
    "<script type=\"application/json\" id=\"tcl-viz-data\">", M.data_json(data), "</script>\n",
    "<script>\n", a.js, "\n</script>\n</body>\n</html>\n",
  })
end

--- Writes the page for data to path, atomically; errors name the path.
function M.write(path, data)
  if type(path) ~= "string" or path == "" then fail("the path must be a non-empty string, got %s", type(path)) end
  local html = M.html(data)
  local ok, err = pcall(runtime.replace_file, path, { html })
  if not ok then
    -- replace_file's message names the path and the reason (errno's text)
    fail("%s", (tostring(err):gsub("^runtime%.replace_file: ", "")))
  end
  return path
end

return M
