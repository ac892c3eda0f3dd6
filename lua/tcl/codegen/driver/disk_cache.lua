-- tcl.codegen.driver.disk_cache — the directory of the on-disk kernel cache, opened before its
-- first use, and the names of its entries. Layer: codegen (the CPU and CUDA builders and BEAM
-- read and write entries there with runtime.cache_read / cache_write).
--
-- Opening (runtime.cache_open, once per process and directory) creates the directory with
-- mode 0700 when it is missing, refuses one that another user owns or that group or others may
-- write (whoever can write it can run code as this user: the entries' checksums detect
-- corruption, not forgery), and removes the temporary files of killed writers.
local env = require "tcl.env"
local runtime = require "tcl.runtime"

local M = {}

local opened = {} -- directory -> true once runtime.cache_open accepted it

--- The cache directory to use (tcl.env: CACHE_DIR, opened now if it was not yet), or nil when
-- the on-disk cache is off (CACHELEVEL=0) or has no directory. An untrusted directory is an
-- error ("realize: the kernel cache directory ...") at every call, never used.
function M.dir()
  local dir = env.CACHELEVEL > 0 and env.CACHE_DIR or nil
  if dir and not opened[dir] then
    local ok, err = pcall(runtime.cache_open, dir)
    if not ok then error("realize: " .. tostring(err):gsub("^runtime%.cache_open: ", ""), 0) end
    opened[dir] = true
  end
  return dir
end

--- FNV-1a of s, 64 bits, as 16 hex digits: file, function and option names from cache keys
-- and other long strings.
function M.name_of(s)
  local h = -3750763034362895579 -- 0xcbf29ce484222325
  for i = 1, #s do h = (h ~ s:byte(i)) * 1099511628211 end
  return string.format("%016x", h)
end

return M
