-- tcl.context — settings changed for the length of one call (tcl.context, as tinygrad's
-- Context): `tcl.context{DEBUG = 4, NOOPT = true}(fn, ...)` sets those fields of tcl.env,
-- calls fn(...), puts the previous values back, even when fn raises an error, and returns fn's
-- results. Contexts nest. The names are tcl.env's fields (tcl.settings: DEBUG, BEAM, THREADS,
-- EMU_GPU, ...); an unknown name or a value the setting does not accept is an error when the
-- context is made, before anything changes. A setting whose default is unset (THREADS, DEVICE,
-- EMU_GPU, ...) takes false for unset, since a Lua table cannot hold nil.
-- Layer: lua/tcl (beside tcl.env).

local env = require "tcl.env"
local settings = require "tcl.settings"
local quote = require "tcl.quote"

local FN = "context"

local function field_names()
  local names = {}
  for _, s in ipairs(settings.list) do
    if s.field then names[#names + 1] = s.field end
  end
  return table.concat(names, ", ")
end

local function is_callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

--- The values to set, checked; an error at `level` (the user's call) naming what is wrong.
local function checked_values(changes, level)
  if type(changes) ~= "table" then
    error(string.format("%s: expected a table of settings, got %s", FN, type(changes)), level + 1)
  end
  local values = {}
  for name, value in pairs(changes) do
    local s = type(name) == "string" and settings.by_field[name]
    if not s then
      error(string.format("%s: unknown setting '%s' (settings: %s)", FN, quote(name), field_names()), level + 1)
    end
    local ok, v = pcall(settings.check, FN, s, value)
    if not ok then error(v, level + 1) end
    values[name] = { v }
  end
  return values
end

--- tcl.context(changes) -> a function run(fn, ...) that calls fn(...) with the changes made.
return function(changes)
  local values = checked_values(changes, 2)
  return function(fn, ...)
    if not is_callable(fn) then
      error(string.format("%s: expected a function to call, got %s", FN, type(fn)), 2)
    end
    local saved = {}
    for name, v in pairs(values) do
      saved[name] = { env[name] }
      env[name] = v[1]
    end
    local results = table.pack(pcall(fn, ...))
    for name, v in pairs(saved) do env[name] = v[1] end
    if not results[1] then error(results[2], 0) end
    return table.unpack(results, 2, results.n)
  end
end
