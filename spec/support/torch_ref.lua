-- spec/support/torch_ref.lua — reference values from PyTorch (python3-torch, installed by
-- scripts/setup.sh) for specs that check tcl against it. One python process per call, so a spec
-- batches everything it needs into one script.
--
--   local torch_ref = require("spec.support.torch_ref")
--   local python, why = torch_ref.python()           -- nil and why when torch cannot be imported
--   local ref = torch_ref.run({
--     "x = " .. torch_ref.literal(x),                -- a Tensor or nested Lua list, exact values
--     "out['y'] = torch.erf(x)",                     -- tensors, numbers, bools, (nested) lists
--   })
--   -- ref.y is a nested Lua list (ints stay integers, inf/-inf/nan survive)
local helper = require("spec.support.helper")

local M = {}

local found, found_why
--- The python3 that imports torch, or nil and why not (cached).
function M.python()
  if found == nil then
    found, found_why = false,
      "no python3 on PATH or /usr/bin/python3 imports torch (scripts/setup.sh installs python3-torch)"
    for _, python in ipairs({ "/usr/bin/python3", "python3" }) do
      if helper.run(python .. " -c 'import torch' 2>/dev/null") == 0 then found = python break end
    end
  end
  return found or nil, found_why
end

local function number_literal(v)
  if v ~= v then return "float('nan')" end
  if v == math.huge then return "float('inf')" end
  if v == -math.huge then return "float('-inf')" end
  if math.type(v) == "integer" then return string.format("%d", v) end
  local text = string.format("%.17g", v)
  if not text:find("[%.eEn]") then text = text .. ".0" end -- a float stays one (and -0.0 keeps its sign)
  return text
end

local function list_literal(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = list_literal(x) end
    return "[" .. table.concat(parts, ", ") .. "]"
  elseif type(v) == "boolean" then
    return v and "True" or "False"
  end
  return number_literal(v)
end

local TORCH_DTYPE = {
  float32 = "torch.float32", float64 = "torch.float64", float16 = "torch.float16", bfloat16 = "torch.bfloat16",
  int8 = "torch.int8", int16 = "torch.int16", int32 = "torch.int32", int64 = "torch.int64", uint8 = "torch.uint8",
  bool = "torch.bool",
}

--- A python expression building the same values: a Tensor becomes torch.tensor(..., dtype=...)
--- with its exact values and dtype; a Lua list or number becomes a python list or number.
function M.literal(v)
  if type(v) == "table" and getmetatable(v) and v.tolist and v.dtype then
    local dtype = TORCH_DTYPE[tostring(v.dtype)] or error("torch_ref.literal: no torch dtype for " .. tostring(v.dtype))
    if v:numel() == 0 or #v:size() == 0 then
      return string.format("torch.tensor(%s, dtype=%s).reshape(%s)", list_literal(v:tolist()), dtype,
        list_literal(v:size()))
    end
    return string.format("torch.tensor(%s, dtype=%s)", list_literal(v:tolist()), dtype)
  end
  return list_literal(v)
end

local PRELUDE = {
  "import math, sys, torch",
  "torch.set_grad_enabled(False)",
  "def _lua(v):",
  "    if isinstance(v, torch.Tensor): v = v.tolist()",
  "    if isinstance(v, (list, tuple)): return '{' + ', '.join(_lua(x) for x in v) + '}'",
  "    if isinstance(v, bool): return 'true' if v else 'false'",
  "    if isinstance(v, int): return str(v)",
  "    v = float(v)",
  "    if math.isnan(v): return '(0/0)'",
  "    if math.isinf(v): return 'math.huge' if v > 0 else '-math.huge'",
  "    return repr(v)",
  "out = {}",
}

--- Runs the lines (a list or one string) after a prelude that imports torch and creates the dict
--- `out`; returns out as a Lua table. Raises when python fails (with its stderr), or skips the
--- calling test (busted's pending) when torch is unavailable: pass skip=false to raise instead.
function M.run(lines, skip)
  local python, why = M.python()
  if not python then
    if skip == false then error("torch_ref: " .. why) end
    rawget(_G, "pending")(why) -- busted's, in the spec's environment
    error("torch_ref: " .. why)
  end
  local body = type(lines) == "table" and table.concat(lines, "\n") or lines
  local script = table.concat(PRELUDE, "\n") .. "\n" .. body .. "\n" ..
    "sys.stdout.write('return {' + ', '.join('[' + repr(k) + '] = ' + _lua(v) for k, v in out.items()) + '}')\n"
  local path = os.tmpname()
  helper.write(path, script)
  local status, stdout, stderr = helper.run(python .. " " .. path)
  os.remove(path)
  if status ~= 0 then error("torch_ref: python failed:\n" .. stderr, 2) end
  return assert(load(stdout, "=torch_ref", "t", { math = math }))()
end

local function flat(v, out)
  if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end

--- Asserts that every entry of ref (name -> torch's nested list) matches ours[name] (a Tensor or
--- a nested list) in shape and within rtol (default 1e-5, relative to max(1, |torch's value|)).
function M.assert_close(ours, ref, rtol)
  rtol = rtol or 1e-5
  for name, want in pairs(ref) do
    local mine = ours[name]
    if type(mine) == "table" and mine.tolist then mine = mine:tolist() end
    local got, expected = flat(mine, {}), flat(want, {})
    assert(#got == #expected, string.format("%s: %d values, torch %d", name, #got, #expected))
    for i = 1, #expected do
      local g, w = got[i], expected[i]
      local same = g == w or (g ~= g and w ~= w)
        or (type(w) == "number" and type(g) == "number" and math.abs(g - w) <= rtol * math.max(1, math.abs(w)))
      assert(same, string.format("%s[%d]: %s, torch %s", name, i, tostring(g), tostring(w)))
    end
  end
end

--- A state dict ({ [name] = tensor }) as a Python dict literal of exact tensors, keys sorted.
function M.state_dict_literal(sd)
  local names = {}
  for name in pairs(sd) do names[#names + 1] = name end
  table.sort(names)
  local entries = {}
  for i, name in ipairs(names) do entries[i] = string.format("%q: %s", name, M.literal(sd[name])) end
  return "{" .. table.concat(entries, ", ") .. "}"
end

return M
