-- tcl.export.cli — the command `tcl export`: runs a model script and exports its model with
-- tcl.export. Layer: export (called by src/cli/tcl_main.c with the arguments after "export").
--
--   tcl export model.lua -o DIR [--name NAME] [--weights embed|safetensors] [--threads N]
--                               [--batch-sizes B1,B2,... | --dynamic T=1..1024[,B=1..8]]
--
-- The script returns a table: { forward = function(inputs...) -> tensors, inputs = { example
-- tensors } or a function returning that list (a function(batch) with batch sizes), model =
-- (optional) the module whose state dict names the weights, name = (optional) the default of
-- --name, batch_sizes = (optional) the default of --batch-sizes, dynamic = (optional) the
-- default of --dynamic: { {name =, min =, max =}, ... } }. With --dynamic, `inputs` is a
-- function(sizes) returning example tensors whose shapes use sizes.T (tcl.export's dynamic). It runs with the globals
-- `tcl` and `Tensor`, as `tcl script.lua` does. --threads sets THREADS while the kernels are
-- compiled: how many parts a kernel's thread axis is split into (default: this machine's
-- cores); the exported program picks its thread count at open. Exit status: 0 done, 1 the
-- script or the export failed, 2 a usage error.
local M = {}

M.USAGE = "usage: tcl export model.lua -o DIR [--name NAME] [--weights embed|safetensors] [--threads N] "
  .. "[--batch-sizes B1,B2,... | --dynamic T=1..1024[,B=1..8]]"

M.HELP = M.USAGE .. [[

Runs model.lua, which returns { forward = fn, inputs = { example tensors } (or a function
returning them), model = (optional) the module naming the weights }, and writes into DIR a C
header and source, the kernels' object code and the weights: a program built from them with
`cc` needs only libc, libm and pthreads. The kernels are compiled for the inputs' shapes: one
export per shape, or one plan per batch size with --batch-sizes.

  -o DIR           the output directory (created when missing)
  --name NAME      the C prefix of every exported symbol and file (default: the script's
                   `name`, else "model")
  --weights MODE   embed: a C array in NAME_weights.c (the default); safetensors:
                   NAME.safetensors, read by NAME_open
  --threads N      threads the kernels are split for (default: this machine's cores)
  --batch-sizes B1,B2,...
                   one plan per batch size in the same files (default: the script's
                   `batch_sizes`); `inputs` is then a function(batch); NAME_run runs the
                   first, NAME_run_batch any of them
  --dynamic T=MIN..MAX[,B=MIN..MAX...]
                   variable sizes (default: the script's `dynamic`): one plan whose kernels
                   take the sizes at run time, NAME_run_sizes(m, sizes, ...); `inputs` is
                   then a function(sizes) whose tensors' shapes use sizes.T; not with
                   --batch-sizes
  -h, --help       print this help
]]

local EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

local function usage_error(reason)
  io.stderr:write("tcl export: ", reason, "\n", M.USAGE, "\nTry 'tcl export --help' for more information.\n")
  return EXIT_USAGE
end

local function failed(message)
  io.stderr:write("tcl export: ", tostring(message), "\n")
  return EXIT_FAILED
end

--- The variables of --dynamic's argument ("T=1..1024,B=1..8"): a list of { name, min, max },
-- or nil and what is wrong.
function M.parse_dynamic(text)
  local list, seen = {}, {}
  for piece in (text .. ","):gmatch("([^,]*),") do
    local name, min, max = piece:match("^([%a_][%w_]*)=(%d+)%.%.(%d+)$")
    min, max = math.tointeger(tonumber(min)), math.tointeger(tonumber(max))
    if not name or not min or not max then
      return nil, string.format("--dynamic takes NAME=MIN..MAX[,NAME=MIN..MAX...] like T=1..1024, not '%s' (in '%s')",
        piece, text)
    end
    if max < min then return nil, string.format("--dynamic %s: max %d is below min %d", name, max, min) end
    if seen[name] then return nil, string.format("--dynamic names %s twice", name) end
    seen[name] = true
    list[#list + 1] = { name = name, min = min, max = max }
  end
  return list
end

-- The options from the argument list, or nil and the reason.
local function parse(args)
  local o = {}
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
    elseif a == "-o" or a == "--output" then
      o.dir, err = value(a)
    elseif a == "--name" then
      o.name, err = value(a)
    elseif a == "--weights" then
      o.weights, err = value(a)
      if o.weights and o.weights ~= "embed" and o.weights ~= "safetensors" then
        err = string.format("--weights must be 'embed' or 'safetensors', not '%s'", o.weights)
      end
    elseif a == "--threads" then
      local v
      v, err = value(a)
      o.threads = v and math.tointeger(tonumber(v))
      if v and (not o.threads or o.threads < 1 or o.threads > 1024) then
        err = string.format("--threads must be an integer from 1 to 1024, not '%s'", v)
      end
    elseif a == "--batch-sizes" then
      local v
      v, err = value(a)
      if v then
        o.batch_sizes = {}
        for piece in (v .. ","):gmatch("([^,]*),") do
          local n = math.tointeger(tonumber(piece))
          if not n or n < 1 then
            err = string.format("--batch-sizes must be a list of integers >= 1 like 1,8,64, not '%s'", v)
            break
          end
          o.batch_sizes[#o.batch_sizes + 1] = n
        end
      end
    elseif a == "--dynamic" then
      local v
      v, err = value(a)
      if v then o.dynamic, err = M.parse_dynamic(v) end
    elseif a:sub(1, 1) == "-" and a ~= "-" then
      err = string.format("unrecognized option '%s'", a)
    elseif o.script then
      err = string.format("one script only ('%s', then '%s')", o.script, a)
    else
      o.script = a
    end
    if err then return nil, err end
    i = i + 1
  end
  if o.dynamic and o.batch_sizes then
    return nil, "--dynamic and --batch-sizes exclude each other (a variable size serves every size in its range)"
  end
  return o
end

local function human(n)
  if n >= 1 << 20 then return string.format("%.1f MiB", n / (1 << 20)) end
  if n >= 1 << 10 then return string.format("%.1f KiB", n / (1 << 10)) end
  return string.format("%d bytes", n)
end

-- t: an input's or output's description (tcl.export's summary); variable dims by name
local function shape_text(t)
  local shape = t.dims and t.text or t.shape
  if #shape == 0 then return "scalar" end
  return "[" .. table.concat(shape, ", ") .. "]"
end

-- What was written, for the terminal.
local function report(script, s)
  local out = {}
  local function line(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  line("tcl export: %s -> %s/", script, s.dir)
  local weights_note = s.weights == "embed" and "embedded" or s.weights == "safetensors" and "read at open" or ""
  local runtime = {}
  for _, f in ipairs(s.runtime) do runtime[f] = true end
  for _, f in ipairs(s.files) do
    local what
    if f == s.name .. ".h" then
      what = string.format("the API: %s_open, %s_run, %s%s_error, %s_threads, %s_close", s.name, s.name,
        #s.plans > 1 and s.name .. "_run_batch, " or s.dynamic and s.name .. "_run_sizes, " or "", s.name, s.name,
        s.name)
    elseif f == s.name .. ".c" then
      what = string.format("the plan (%d kernel runs) and its runtime (arena, thread pool)", s.steps)
    elseif runtime[f] then
      what = string.format("the runtime, included by %s.c", s.name)
    elseif f:match("%.o$") then
      what = f == s.name .. "_kernels.o" and string.format("%d kernels, compiled for this CPU", s.kernels)
        or "a kernel's object code"
    else
      what = string.format("the weights, %s, %s", human(s.weight_bytes), weights_note)
    end
    line("  %-24s %s", f, what)
  end
  for _, plan in ipairs(s.plans) do
    if plan.batch then
      line("  batch size %d%s:", plan.batch, plan == s.plans[1] and " (" .. s.name .. "_run)" or "")
    end
    for i, t in ipairs(plan.inputs) do line("  input %-3d %-8s %s", i - 1, t.dtype, shape_text(t)) end
    for i, t in ipairs(plan.outputs) do line("  output %-2d %-8s %s", i - 1, t.dtype, shape_text(t)) end
  end
  if s.dynamic then
    local ranges = {}
    for k, v in ipairs(s.dynamic) do ranges[k] = string.format("%s=%d..%d", v.name, v.min, v.max) end
    line("  variable sizes %s: one plan, the sizes given to %s_run_sizes", table.concat(ranges, ", "), s.name)
  end
  line("  arena %s (%s without sharing), weights %s", human(s.arena_bytes), human(s.unshared_bytes),
    human(s.weight_bytes))
  line("build (app.c: your program): %s -o app", s.build)
  return table.concat(out, "\n") .. "\n"
end

-- The script's model table, checked; or nil, the message and the exit status.
local function load_model(path)
  local readable = io.open(path, "rb")
  if not readable then return nil, string.format("cannot open '%s'", path), EXIT_USAGE end
  readable:close()
  local chunk, err = loadfile(path)
  if not chunk then return nil, err, EXIT_FAILED end
  local ok, spec = xpcall(chunk, debug.traceback)
  if not ok then return nil, spec, EXIT_FAILED end
  local shape = "{ forward = function, inputs = { example tensors } }"
  if type(spec) ~= "table" then
    return nil, string.format("%s must return a table %s, got %s", path, shape, type(spec)), EXIT_FAILED
  end
  if type(spec.forward) ~= "function" and not (type(getmetatable(spec.forward)) == "table"
      and getmetatable(spec.forward).__call) then
    return nil, string.format("%s returned a table without a function `forward` (expected %s)", path, shape),
      EXIT_FAILED
  end
  if type(spec.inputs) ~= "table" and type(spec.inputs) ~= "function" then
    return nil, string.format("%s returned a table without `inputs` (a list of example tensors, or a function "
      .. "returning one)", path), EXIT_FAILED
  end
  return spec
end

--- Runs the command with its arguments (a list of strings); returns the exit status.
function M.main(args)
  local o, err = parse(args or {})
  if not o then return usage_error(err) end
  if o.help then
    io.stdout:write(M.HELP)
    return EXIT_OK
  end
  if not o.script then return usage_error("no model script given") end
  if not o.dir then return usage_error("no output directory given (-o DIR)") end
  local export = require "tcl.export"
  if o.name then
    local ok, name_err = pcall(export.check_name, o.name)
    if not ok then return usage_error((tostring(name_err):gsub("^export: ", "--name: "))) end
  end
  if o.threads then require("tcl.env").THREADS = o.threads end
  local spec, message, status = load_model(o.script)
  if not spec then return status == EXIT_USAGE and usage_error(message) or failed(message) end
  local name = o.name or spec.name or "model"
  local batch_sizes, dynamic = o.batch_sizes or spec.batch_sizes, o.dynamic or spec.dynamic
  -- a flag replaces the script's default of the other kind (--batch-sizes over its `dynamic`)
  if o.batch_sizes then dynamic = nil elseif o.dynamic then batch_sizes = nil end
  local ok, summary = pcall(export.export, spec.forward, spec.inputs, { dir = o.dir, name = name,
    weights = o.weights, model = spec.model, batch_sizes = batch_sizes, dynamic = dynamic })
  if not ok then return failed((tostring(summary):gsub("^export: ", ""))) end
  io.stdout:write(report(o.script, summary))
  return EXIT_OK
end

return M
