-- spec/support/helper.lua — shared facts for specs: where the build is, running programs, and
-- files. scripts/test.sh sets TCLC_BUILD_DIR; specs run from the repository root.
local M = {}

M.root = os.getenv("TCLC_SOURCE_DIR") or "."
M.build_dir = os.getenv("TCLC_BUILD_DIR") or (M.root .. "/build-debug")
M.tcl_bin = M.build_dir .. "/tcl"

--- The build under test's type, from its CMake cache ("Debug", "Sanitize", ...); nil if unknown.
function M.build_type()
  local f = io.open(M.build_dir .. "/CMakeCache.txt", "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text:match("\nCMAKE_BUILD_TYPE:%w+=([^\n]*)")
end

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

--- Whether a file can be opened for reading.
function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

--- The contents of a file (an error if it cannot be read).
function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

--- Writes text to a file (an error if it cannot be written).
function M.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

--- Runs a shell command; returns exit status, stdout, stderr.
function M.run(cmd, stdin_text)
  local out, err = os.tmpname(), os.tmpname()
  local input = "/dev/null"
  if stdin_text then
    input = os.tmpname()
    local f = assert(io.open(input, "wb"))
    f:write(stdin_text)
    f:close()
  end
  local ok, how, code = os.execute(cmd .. " >" .. out .. " 2>" .. err .. " <" .. input)
  local status = (how == "exit") and code or 128 + (code or 0)
  if ok == true then status = 0 end
  local stdout, stderr = read_all(out), read_all(err)
  os.remove(out)
  os.remove(err)
  if stdin_text then os.remove(input) end
  return status, stdout, stderr
end

--- How many times plain text occurs in text (not overlapping).
function M.count(text, plain)
  local n, at = 0, 1
  while true do
    local s, e = text:find(plain, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

function M.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- The error message of f(...), which must fail.
function M.error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

--- Asserts that f(...) fails with a message containing `expected` (plain text).
function M.fails_with(expected, f, ...)
  local message = M.error_of(f, ...)
  assert(message:find(expected, 1, true), "expected '" .. expected .. "' in: " .. message)
end

--- The values packed one after another with string.pack's format fmt.
function M.pack_all(fmt, values)
  local parts = {}
  for i, v in ipairs(values) do parts[i] = string.pack(fmt, v) end
  return table.concat(parts)
end

--- A path for a directory no one has made yet, under /tmp (the caller makes and removes it).
function M.fresh_dir_path()
  local path = os.tmpname()
  os.remove(path)
  return path .. ".cache"
end

--- LLVM's llc, found through llvm-config (an object compiler independent of tcl's renderer).
function M.llc_path()
  local pipe = io.popen("llvm-config-19 --bindir 2>/dev/null || llvm-config --bindir 2>/dev/null")
  local dir = pipe:read("l")
  pipe:close()
  return dir and dir .. "/llc"
end

return M
