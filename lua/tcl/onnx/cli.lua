-- tcl.onnx.cli — the command `tcl run`: runs an ONNX model on inputs read from .npy files and
-- prints its outputs or saves them as .npy files. Layer: onnx (called by src/cli/tcl_main.c
-- with the arguments after "run").
--
--   tcl run model.onnx [--input NAME=FILE.npy ...] [--output-dir DIR] [--device DEVICE]
--
-- Exit status: 0 done, 1 the model failed to load or run, 2 a usage error.
local M = {}

M.USAGE = "usage: tcl run model.onnx [--input NAME=FILE.npy ...] [--output-dir DIR] [--device DEVICE]"

M.HELP = M.USAGE .. [[

Loads the ONNX model (tcl.onnx.load), runs it on the inputs and prints each output's name,
shape, dtype and values (summarized like a printed Tensor), or saves each output as
DIR/NAME.npy (characters other than letters, digits, '_', '-' and '.' in NAME become '_');
a sequence's elements print as NAME[i] and save as NAME_i.npy (i from 1).

  --input NAME=FILE.npy  the model input NAME (one per required input; `tcl run model.onnx`
                         with none lists them)
  --output-dir DIR       save the outputs as .npy files in DIR (created when missing)
  --device DEVICE        where the model runs (default: tcl's default device)
  -h, --help             print this help
]]

local EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

local function usage_error(reason)
  io.stderr:write("tcl run: ", reason, "\n", M.USAGE, "\nTry 'tcl run --help' for more information.\n")
  return EXIT_USAGE
end

local function failed(message)
  io.stderr:write("tcl run: ", tostring(message), "\n")
  return EXIT_FAILED
end

-- The options from the argument list, or nil and the reason.
local function parse(args)
  local o = { inputs = {}, input_order = {} }
  local i = 1
  local function value(flag)
    i = i + 1
    if args[i] == nil then return nil, string.format("'%s' needs an argument", flag) end
    return args[i]
  end
  while i <= #args do
    local a, err = args[i], nil
    if a == "-h" or a == "--help" then
      o.help = true
    elseif a == "--input" or a == "-i" then
      local v
      v, err = value(a)
      if v then
        local name, file = v:match("^(.-)=(.+)$")
        if not name or name == "" then
          err = string.format("--input takes NAME=FILE.npy, not '%s'", v)
        elseif o.inputs[name] then
          err = string.format("input '%s' given twice", name)
        else
          o.inputs[name] = file
          o.input_order[#o.input_order + 1] = name
        end
      end
    elseif a == "--output-dir" or a == "-o" then
      o.dir, err = value(a)
    elseif a == "--device" then
      o.device, err = value(a)
    elseif a:sub(1, 1) == "-" then
      err = string.format("unrecognized option '%s'", a)
    elseif o.model then
      err = string.format("one model only ('%s', then '%s')", o.model, a)
    else
      o.model = a
    end
    if err then return nil, err end
    i = i + 1
  end
  return o
end

local function describe_type(info)
  local t = info.type
  if not t then return "?" end
  if t.kind ~= "tensor" then return t.kind end
  local dims = {}
  for i, d in ipairs(t.shape or {}) do dims[i] = tostring(d) end
  return string.format("%s [%s]", t.dtype or "?", table.concat(dims, ", "))
end

local function file_name(name)
  local safe = name:gsub("[^%w_%-%.]", "_")
  if safe == "" or safe == "." or safe == ".." then safe = "_" .. safe end
  return safe
end

local function shape_text(t)
  return "(" .. table.concat(t:size(), ", ") .. ")"
end

--- Runs the command with its arguments (a list of strings); returns the exit status. What it
--- prints goes to out (default io.stdout; errors go to io.stderr).
function M.main(args, out)
  out = out or io.stdout
  local o, err = parse(args or {})
  if not o then return usage_error(err) end
  if o.help then
    out:write(M.HELP)
    return EXIT_OK
  end
  if not o.model then return usage_error("no model given") end
  local onnx = require "tcl.onnx"
  local npy = require "tcl.api.npy"
  local ok, model = pcall(onnx.load, o.model, o.device and { device = o.device } or nil)
  if not ok then return failed(model) end
  local known, lines = {}, {}
  for _, info in ipairs(model.inputs) do
    known[info.name] = true
    lines[#lines + 1] = string.format("  %s: %s", info.name, describe_type(info))
  end
  for _, name in ipairs(o.input_order) do
    if not known[name] then
      return usage_error(string.format("the model has no input '%s'; its inputs:\n%s", name, table.concat(lines, "\n")))
    end
  end
  local missing = {}
  for _, info in ipairs(model.inputs) do
    if not o.inputs[info.name] then missing[#missing + 1] = info.name end
  end
  if #missing > 0 then
    return usage_error(string.format("missing --input for %s; the model's inputs:\n%s",
      table.concat(missing, ", "), table.concat(lines, "\n")))
  end
  local named = {}
  for name, file in pairs(o.inputs) do
    local read_ok, t = pcall(npy.read, file, { device = model.device })
    if not read_ok then return failed(string.format("input '%s': %s", name, tostring(t))) end
    named[name] = t
  end
  local run_ok, outs = pcall(model.run, model, named)
  if not run_ok then return failed(outs) end
  if o.dir then
    os.execute("mkdir -p '" .. o.dir:gsub("'", "'\\''") .. "'")
  end
  -- a tensor is printed or saved as NAME.npy; a sequence's elements as NAME[i] / NAME_i.npy
  -- (1-based i); an empty optional prints as such
  local function show(name, v, file)
    local kind = type(v) == "table" and rawget(v, "kind") -- nil for a Tensor (it refuses unknown fields)
    if kind == "sequence" then
      out:write(string.format("%s sequence of %d\n", name, #v))
      for i, element in ipairs(v) do show(string.format("%s[%d]", name, i), element, file .. "_" .. i) end
    elseif kind == "optional" then
      if v.value == nil then out:write(name, " empty optional\n") else show(name, v.value, file) end
    elseif o.dir then
      local path = o.dir .. "/" .. file .. ".npy"
      npy.write(path, v)
      out:write(string.format("%s %s %s -> %s\n", name, shape_text(v), tostring(v.dtype), path))
    else
      out:write(string.format("%s %s %s\n%s\n", name, shape_text(v), tostring(v.dtype), tostring(v)))
    end
  end
  for _, info in ipairs(model.outputs) do
    local show_ok, show_err = pcall(show, info.name, outs[info.name], file_name(info.name))
    if not show_ok then return failed(string.format("output '%s': %s", info.name, tostring(show_err))) end
  end
  return EXIT_OK
end

return M
