-- spec/support/browser.lua — a real browser for specs: headless Chromium (Debian's `chromium`,
-- installed by scripts/setup.sh) loading a page from disk, to dump its DOM after the scripts
-- ran or to take a screenshot.
--
--   local browser = require "spec.support.browser"
--   local dom = browser.dump_dom("/tmp/x/page.html", "kernel=2&pass=5")  -- the serialized DOM
--   browser.screenshot("/tmp/x/page.html", "/tmp/x/page.png", { width = 1400, height = 900, hash = "profile" })
--
-- Each call starts one browser (about 2 s) under `timeout 60`, with --no-sandbox (specs run as
-- root, where Chromium's sandbox refuses to start), --disable-gpu, a private profile directory
-- (removed afterwards) and an environment without the sanitizer run's LD_PRELOAD and
-- *SAN_OPTIONS (scripts/test.sh preloads libasan into busted; Chromium must not inherit it).
local helper = require "spec.support.helper"

local M = {}

M.CANDIDATES = { "chromium", "chromium-browser", "google-chrome" }
M.TIMEOUT_SECONDS = 60

local q = helper.shell_quote

--- The path of a Chromium program; an error saying how to install one when there is none.
function M.find()
  for _, name in ipairs(M.CANDIDATES) do
    local status, out = helper.run("command -v " .. q(name))
    if status == 0 and out:match("%S") then return (out:gsub("%s+$", "")) end
  end
  error("no headless browser found (tried " .. table.concat(M.CANDIDATES, ", ")
    .. "): run scripts/setup.sh, which installs Debian's chromium", 0)
end

-- file:// URL of an absolute path (characters outside the safe set percent-encoded), with #hash
local function file_url(path, hash)
  assert(path:sub(1, 1) == "/", "browser: the page's path must be absolute, got " .. path)
  local url = "file://" .. path:gsub("[^%w/%._%-~]", function(c) return string.format("%%%02X", c:byte()) end)
  if hash and hash ~= "" then url = url .. "#" .. hash end
  return url
end

-- Runs the browser with flags on the page; returns its stdout. Errors carry its status and stderr.
local function run_browser(flags, html_path, hash)
  local program = M.find()
  local status, profile = helper.run("mktemp -d")
  assert(status == 0, "browser: mktemp -d failed")
  profile = profile:gsub("%s+$", "")
  local cmd = "env -u LD_PRELOAD -u ASAN_OPTIONS -u UBSAN_OPTIONS -u TSAN_OPTIONS -u LSAN_OPTIONS"
    .. " timeout " .. M.TIMEOUT_SECONDS .. " " .. q(program)
    .. " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions --hide-scrollbars"
    .. " --user-data-dir=" .. q(profile) .. " " .. flags .. " " .. q(file_url(html_path, hash))
  local out, err
  status, out, err = helper.run(cmd)
  helper.run("rm -rf " .. q(profile))
  if status ~= 0 then
    error(string.format("browser: %s exited with status %d%s:\n%s", program, status,
      status == 124 and " (timed out after " .. M.TIMEOUT_SECONDS .. " s)" or "", err), 0)
  end
  return out
end

--- The page's DOM, serialized, once its scripts ran (virtual time: timers up to 5 s fire).
function M.dump_dom(html_path, hash)
  local dom = run_browser("--virtual-time-budget=5000 --dump-dom", html_path, hash)
  if not dom:find("<html", 1, true) then error("browser: no DOM came back for " .. html_path, 0) end
  return dom
end

--- The data-* attributes of a dumped DOM's <body> (the viewer's test hooks), by name without
-- "data-": { ["viz-status"] = "ready", ... }.
function M.hooks(dom)
  local body = assert(dom:match("<body([^>]*)>"), "no <body> in the DOM")
  local t = {}
  for k, v in body:gmatch('data%-([%w%-]+)="([^"]*)"') do t[k] = v end
  return t
end

--- Takes a screenshot of the page into png_path. opts: width, height (1400 x 900), hash.
function M.screenshot(html_path, png_path, opts)
  opts = opts or {}
  run_browser(string.format("--virtual-time-budget=5000 --window-size=%d,%d --screenshot=%s",
    opts.width or 1400, opts.height or 900, q(png_path)), html_path, opts.hash)
  if not helper.exists(png_path) then error("browser: no screenshot written to " .. png_path, 0) end
  return png_path
end

return M
