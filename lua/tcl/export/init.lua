-- tcl.export — ahead-of-time export: a function of tensors, captured on example inputs, written
-- as C sources and the kernels' object code that build into a program needing nothing but
-- libc, libm and pthreads (no Lua, no LLVM, no tcl). Layer: export (over tcl.api and the CPU
-- backend). The command `tcl export` (tcl.export.cli) is a front end to it.
--
--   local summary = tcl.export(function(x) return model(x) end, { Tensor.randn(8, 784) },
--     { dir = "out", name = "mlp", weights = "embed", model = model })
--
-- opts: dir (required; created when missing), name (a C identifier, the prefix of every
-- exported symbol and file; default "model"), weights ("embed": a C array in NAME_weights.c,
-- the default; "safetensors": NAME.safetensors, read by NAME_open), model (optional: a table of
-- tensors, as tcl.nn.state walks it, whose names label the weights: "layers.1.weight"; others
-- are "constant.<i>", and with a safetensors file and no folding they are the model's own
-- constants, held by NAME.c instead of the file), fold (default: true with embedded weights, false with safetensors):
-- kernels that compute only from weights (a transposed weight, say) run once, at export, and
-- their results are stored as weights (tcl.export.plan's fold). Without folding, the weights
-- file holds the model's own tensors by their names, so a retrained model's file
-- (tcl.nn.state.safe_save of its state dict) can replace it without another export.
-- batch_sizes (optional: a list of sizes): one plan per batch size in the same files, inputs
-- then being a function(batch) that returns the example tensors of that size; NAME_run runs
-- the first, NAME_run_batch(m, batch, ...) any of them. Kernels are compiled for fixed shapes,
-- so a batch size that was not exported needs another export. Without batch_sizes, inputs is
-- the list of example tensors (or a function of no argument returning it).
-- dynamic (optional: a list of { name =, min =, max = }, variable sizes as tcl.var makes them;
-- not with batch_sizes): one plan whose kernels take the sizes at run time, inputs being a
-- function(sizes) (sizes: { [name] = the variable bound to its max }, as T:bind(1024)) that
-- returns example tensors whose shapes use them (Tensor.randn(1024, 64):reshape(sizes.T, 64)).
-- NAME_run_sizes(m, sizes, inputs, outputs) runs it for any sizes in the ranges. Every variable
-- must size an input, and every dim of an input or output must be constant + coefficient *
-- variable (the C API describes dims so); sizes inside the model may be any expression.
--
-- How (tcl.export.plan): fn is called on the inputs twice, a warm-up and a capture (as tcl.jit
-- does), and every buffer the captured kernels touch is classified: inputs, outputs, weights
-- (read, never written) and intermediates, which share one arena by lifetime
-- (tcl.export.arena). Files written into dir:
--   NAME.h           the C API (NAME_open, NAME_run, NAME_error, NAME_threads, NAME_close) and
--                    the inputs' and outputs' shapes, dtypes and sizes;
--   NAME.c           the plan's tables, then the runtime's files included;
--   tcl_*.c          the runtime (arena, worker pool, weights reader: tcl's src/export_runtime/,
--                    tcl.export.runtime_files), the files NAME.c includes, copied unchanged;
--   NAME_weights.c   the weights (weights = "embed"), or NAME.safetensors (weights = "safetensors");
--   NAME_kernels.o   every kernel's object code, combined by `ld -r` (without ld: NAME_kernel_<i>.o).
-- The kernels are compiled for this machine's CPU and for the inputs' shapes (their variable
-- sizes with dynamic): one export per shape. Returns a summary: { dir, name, files = {...},
-- kernels, steps (kernel runs of all plans), folded (steps folded into weights), arena_bytes,
-- unshared_bytes (the arena without sharing), weight_bytes, weights, runtime (the runtime's
-- files among files), build (a cc command), inputs, outputs ({name, dtype, shape, numel, bytes};
-- with dynamic: shape -1 for a variable dim, numel and bytes at the largest sizes, dims = {
-- {constant, coefficient, variable (0-based in dynamic, -1: none)} }, text = the dims as text),
-- results (fn's results of the captured call, tensors), plans = { {batch, steps, folded,
-- arena_bytes, unshared_bytes, inputs, outputs, results} }, dynamic }; the top-level figures
-- are the first plan's, the arena's the largest plan's.
-- Progress (tcl.progress; on a terminal, or as TCL_PROGRESS says): a line "export NAME" counting
-- the captures (where the kernels compile) and the files' steps, naming the step at hand. A BEAM
-- search during a capture draws its own line, which ends before the export's goes on.
local plan = require "tcl.export.plan"
local arena = require "tcl.export.arena"
local objects = require "tcl.export.objects"
local c_writer = require "tcl.export.c_writer"
local runtime_files = require "tcl.export.runtime_files"
local state = require "tcl.api.state"
local bytes = require "tcl.api.bytes"
local class = require "tcl.api.class"
local core = require "tcl.core"
local devices = require "tcl.devices"
local runtime = require "tcl.runtime"
local variables = require "tcl.variables"
local progress = require "tcl.progress"

local M = {}

local function fail(fmt, ...) error("export: " .. string.format(fmt, ...), 0) end

-- Limits of the generated tables: a ticket of the worker pool holds a step and a part in 16
-- bits each (the exported runtime's worker pool: src/export_runtime/tcl_runtime.c).
local MAX_STEPS, MAX_PARTS = 65535, 65535

local C_KEYWORDS = {}
for word in ([[auto break case char const continue default do double else enum extern float for goto if inline
  int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile
  while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
  bool true false alignas alignof static_assert thread_local]]):gmatch("%S+") do
  C_KEYWORDS[word] = true
end

local OPTIONS = { dir = true, name = true, weights = true, model = true, fold = true, batch_sizes = true,
  dynamic = true }

--- Checks a model name: a C identifier, the prefix of the exported symbols and files.
function M.check_name(name)
  if type(name) ~= "string" then fail("name must be a string (a C identifier), got %s", type(name)) end
  if not name:match("^[A-Za-z_][A-Za-z0-9_]*$") or #name > 64 then
    fail("name '%s' is not a C identifier of 1 to 64 letters, digits and '_' (not starting with a digit)", name)
  end
  if C_KEYWORDS[name] or name:match("^__") or name:match("^_[A-Z]") then
    fail("name '%s' is reserved in C; choose another", name)
  end
  for _, file in ipairs(runtime_files.ALL) do
    if file == name .. ".c" then fail("name '%s' is taken by the runtime's file %s; choose another", name, file) end
  end
  return name
end

--- Checks the dynamic option: a non-empty list of { name =, min =, max = } (a variable's
-- name, an identifier, once each; integers 0 <= min <= max <= tcl.variables.MAX_VALUE).
function M.check_dynamic(list)
  if type(list) ~= "table" or class.is_tensor(list) or #list == 0 then
    fail("dynamic must be a non-empty list of { name =, min =, max = }, got %s", type(list))
  end
  local seen = {}
  for i, v in ipairs(list) do
    if type(v) ~= "table" then fail("dynamic[%d] is %s, not a table { name =, min =, max = }", i, type(v)) end
    for k in pairs(v) do
      if k ~= "name" and k ~= "min" and k ~= "max" then
        fail("dynamic[%d] has an unknown field '%s' (known: name, min, max)", i, tostring(k))
      end
    end
    if type(v.name) ~= "string" or not v.name:match("^[%a_][%w_]*$") then
      fail("dynamic[%d]: the name must be an identifier (letters, digits, _), got %s", i, tostring(v.name))
    end
    if seen[v.name] then fail("dynamic names variable %s twice", v.name) end
    seen[v.name] = true
    if math.type(v.min) ~= "integer" or math.type(v.max) ~= "integer" or v.min < 0 or v.max < v.min
        or v.max > variables.MAX_VALUE then
      fail("dynamic variable %s: needs integers 0 <= min <= max <= %d, got min %s and max %s", v.name,
        variables.MAX_VALUE, tostring(v.min), tostring(v.max))
    end
  end
  for k in pairs(list) do
    if math.type(k) ~= "integer" or k < 1 or k > #list then fail("dynamic must be a list (keys 1..n)") end
  end
  return list
end

local function check_options(fn, opts)
  if type(fn) ~= "function" and not (type(getmetatable(fn)) == "table" and getmetatable(fn).__call) then
    fail("expected a function to export, got %s", type(fn))
  end
  if type(opts) ~= "table" then fail("options must be a table with at least dir, got %s", type(opts)) end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      fail("unknown option '%s' (known: dir, name, weights, model, fold, batch_sizes, dynamic)", tostring(k))
    end
  end
  if type(opts.dir) ~= "string" or opts.dir == "" then fail("option dir (the output directory) is required") end
  local name = M.check_name(opts.name == nil and "model" or opts.name)
  local weights = opts.weights == nil and "embed" or opts.weights
  if weights ~= "embed" and weights ~= "safetensors" then
    fail("weights must be \"embed\" or \"safetensors\", got %s", tostring(weights))
  end
  if opts.model ~= nil and (type(opts.model) ~= "table" or class.is_tensor(opts.model)) then
    fail("model must be a table of tensors (a tcl.nn module), got %s", type(opts.model))
  end
  if opts.fold ~= nil and type(opts.fold) ~= "boolean" then fail("fold must be a boolean, got %s", type(opts.fold)) end
  local fold = opts.fold
  if fold == nil then fold = weights == "embed" end
  local sizes = opts.batch_sizes
  if sizes ~= nil then
    if type(sizes) ~= "table" or #sizes == 0 then fail("batch_sizes must be a non-empty list of sizes") end
    local seen = {}
    for i, b in ipairs(sizes) do
      if math.type(b) ~= "integer" or b < 1 then fail("batch_sizes[%d] is %s, not an integer >= 1", i, tostring(b)) end
      if seen[b] then fail("batch_sizes lists %d twice", b) end
      seen[b] = true
    end
  end
  if opts.dynamic ~= nil then
    if sizes ~= nil then
      fail("dynamic and batch_sizes exclude each other: a variable batch size serves every batch size in its range")
    end
    M.check_dynamic(opts.dynamic)
  end
  return name, weights, fold
end

local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function make_dir(dir)
  local ok = os.execute("mkdir -p " .. shell_quote(dir) .. " 2>/dev/null")
  local probe = dir .. "/.tcl_export_probe"
  local f = ok and io.open(probe, "wb")
  if not f then fail("cannot create or write the directory '%s'", dir) end
  f:close()
  os.remove(probe)
end

-- runtime.replace_file: complete or absent, every write checked, errno's own message
local function write_file(path, text)
  local ok, err = pcall(runtime.replace_file, path, { text })
  if not ok then fail("%s", (tostring(err):gsub("^runtime%.replace_file: ", ""))) end
end

-- A fresh directory in dir for the files of one export, which are moved into place only when
-- all of them are written: a failed export leaves dir as it was.
local function make_staging(dir, name)
  local pipe = io.popen("mktemp -d " .. shell_quote(dir .. "/." .. name .. ".export-XXXXXX") .. " 2>/dev/null")
  local staging = pipe and pipe:read("l")
  if pipe then pipe:close() end
  if not staging or staging == "" then fail("cannot create a directory in '%s'", dir) end
  return staging
end

local function remove_tree(path) os.execute("rm -rf " .. shell_quote(path) .. " 2>/dev/null") end

local function numel_of(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- The weights: every constant buffer of every plan once (plans of several batch sizes read
-- the same weight buffers; folded ones, computed per plan, are shared when their bytes are
-- equal), each at a 64-byte aligned offset of one block, named from the model's state dict
-- where one of its tensors holds the buffer, else "constant.<i>" with a flat shape. Sets
-- b.weight_offset for every constant buffer of every plan; returns the list of weights
-- ({ storage, dtype, numel, bytes, name, shape, offset }) and the block's size.
local function collect_weights(plans, model)
  local list, by_storage, by_content = {}, {}, {}
  for _, p in ipairs(plans) do
    for _, b in ipairs(p.constants) do
      local w = by_storage[b.storage]
      local content = b.folded and b.dtype.name .. "\0" .. b.storage:read_bytes()
      if not w and content then w = by_content[content] end
      if not w then
        w = { storage = b.storage, dtype = b.dtype, numel = b.numel, bytes = b.bytes }
        list[#list + 1] = w
        if content then by_content[content] = w end
      end
      by_storage[b.storage] = w
      b.weight = w
    end
  end
  if model then
    local sd = state.get_state_dict(model)
    local names = {}
    for n in pairs(sd) do names[#names + 1] = n end
    table.sort(names)
    local buffers = require "tcl.schedule.buffers"
    for _, n in ipairs(names) do
      local t = sd[n]
      local node = devices.base(t.device) == "CPU" and buffers.viewed(t.uop)
      local w = node and by_storage[buffers.get(node)]
      if w and not w.name and numel_of(t._shape) == w.numel then
        w.name, w.shape = n, table.move(t._shape, 1, #t._shape, 1, {})
      end
    end
  end
  local used, offset = {}, 0
  for _, w in ipairs(list) do
    if w.name then used[w.name] = true end
  end
  for i, w in ipairs(list) do
    if not w.name then
      local label, k = "constant." .. i, i
      while used[label] do
        k = k + 1
        label = "constant." .. k
      end
      used[label] = true
      w.name, w.shape, w.unnamed = label, { w.numel }, true
    end
    w.offset = offset
    offset = offset + (w.bytes + arena.ALIGNMENT - 1) // arena.ALIGNMENT * arena.ALIGNMENT
  end
  for _, p in ipairs(plans) do
    for _, b in ipairs(p.constants) do b.weight_offset = b.weight.offset end
  end
  return list, offset
end

-- A size as constant + coefficient * variable: { constant, coefficient, variable (a name, or
-- nil for a constant size) }, or nil when it is not of that form (two variables, a product of
-- variables, a division).
local function linear_form(d)
  if math.type(d) == "integer" then return { constant = d, coefficient = 0 } end
  local op = d.op
  if op == "CONST" then return { constant = d.arg, coefficient = 0 } end
  if op == "BIND" or op == "DEFINE_VAR" then
    local arg = (op == "BIND" and d.src[1] or d).arg
    return { constant = 0, coefficient = 1, variable = arg[1], min = arg[2], max = arg[3] }
  end
  if op == "ADD" or op == "SUB" or op == "MUL" then
    local a, b = linear_form(d.src[1]), linear_form(d.src[2])
    if not a or not b then return nil end
    if op == "MUL" then
      if a.variable and b.variable then return nil end
      local k, f = a.variable and b or a, a.variable and a or b -- k: the constant factor
      return { constant = f.constant * k.constant, coefficient = f.coefficient * k.constant, variable = f.variable,
        min = f.min, max = f.max }
    end
    if a.variable and b.variable and a.variable ~= b.variable then return nil end
    local sign = op == "SUB" and -1 or 1
    local v = a.variable and a or b
    return { constant = a.constant + sign * b.constant, coefficient = a.coefficient + sign * b.coefficient,
      variable = v.variable, min = v.min, max = v.max }
  end
  return nil
end

-- The inputs' or outputs' descriptions: { name, dtype, shape (-1 for a variable dim), dims
-- ({ constant, coefficient, variable (0-based in the dynamic list, -1: none) } per dim, with
-- dynamic sizes), numel and bytes (at the variables' max), text (the shape with variables) }.
local function io_info(list, prefix, dynamic)
  local out = {}
  local index_of = {}
  for k, v in ipairs(dynamic or {}) do index_of[v.name] = k - 1 end
  for i, t in ipairs(list) do
    local name = prefix .. (i - 1)
    local shape, dims, texts, numel = {}, {}, {}, 1
    for k, size in ipairs(t.shape) do
      local d = variables.normal(size)
      local form = linear_form(d)
      if not form then
        fail("%s dim %d has size %s, which is not constant + coefficient * variable: the C API cannot describe it",
          name, k, variables.format(d, true))
      end
      if form.variable and not index_of[form.variable] then
        fail("%s dim %d has size %s, but %s is not a dynamic variable of this export", name, k,
          variables.format(d, true), form.variable)
      end
      local given = form.variable and dynamic[index_of[form.variable] + 1]
      if given and (given.min ~= form.min or given.max ~= form.max) then
        -- the buffers are planned for the tensor's range, the program checks the export's
        fail("%s dim %d has size %s of a variable %s in %d..%d, but the export's %s is in %d..%d", name, k,
          variables.format(d, true), form.variable, form.min, form.max, given.name, given.min, given.max)
      end
      local variable = form.variable and form.coefficient ~= 0 and index_of[form.variable] or -1
      dims[k] = { constant = form.constant, coefficient = variable >= 0 and form.coefficient or 0, variable = variable }
      shape[k] = variable >= 0 and -1 or form.constant
      texts[k] = variable >= 0 and variables.format(d, true) or tostring(form.constant)
      numel = numel * variables.max(d)
    end
    out[i] = { name = name, dtype = t.dtype.name, shape = shape, numel = numel, bytes = numel * t.dtype.itemsize,
      dims = dynamic and dims or nil, text = texts }
  end
  return out
end

-- The buffer plan: arena offsets of intermediates and of the staging of inputs and outputs.
-- Steps count from 1; inputs are staged before step 1 (0), outputs copied out after the last.
-- inputs: their descriptions (io_info; an input of variable size is staged at its largest).
-- A buffer of the variables' values lives for its step (filled just before it).
local function plan_arena(p, inputs)
  local blocks, staging_in = {}, {}
  for _, b in ipairs(p.buffers) do
    -- an output written by a kernel is staged in its own block when the caller's memory is
    -- not aligned (its lifetime runs to the copy after the last step)
    if b.role == "intermediate" or b.role == "output" or b.role == "variables" then
      blocks[#blocks + 1] = { bytes = b.bytes, first = b.first, last = b.last, buffer = b }
    end
  end
  for i, input in ipairs(p.inputs) do
    staging_in[i] = { bytes = math.max(input.buffer.bytes, inputs[i].bytes), first = 0,
      last = input.buffer.last or 0 }
    blocks[#blocks + 1] = staging_in[i]
  end
  local size, unshared = arena.plan(blocks)
  for _, block in ipairs(blocks) do
    if block.buffer then block.buffer.offset = block.offset end
  end
  local input_offsets, output_offsets = {}, {}
  for i, block in ipairs(staging_in) do input_offsets[i] = block.offset end
  for o, output in ipairs(p.outputs) do
    -- an output copied from elsewhere is written straight into the caller's memory
    output_offsets[o] = output.buffer and output.buffer.offset or 0
  end
  return size, unshared, input_offsets, output_offsets
end

-- How a step's thread axis is split: parts of `chunk` iterations each (one iteration per
-- part, as tcl's own runtime does, unless that makes more parts than a ticket holds).
local function split(parallel_size)
  if parallel_size < 2 then return 1, math.max(parallel_size, 1) end
  local parts = math.min(parallel_size, MAX_PARTS)
  local chunk = (parallel_size + parts - 1) // parts
  return (parallel_size + chunk - 1) // chunk, chunk
end

-- The model's steps as the C tables want them (tcl.export.c_writer): each step's kernel, first
-- slot and split, every slot's source, the slots set per run, the most parts of a step, and
-- the values to write before a step ({ step, offset (in the arena), variable (0-based in
-- dynamic) }, by step).
local function lay_out_steps(p, dynamic)
  local steps, slots, run_slots, max_parts, fills = {}, {}, {}, 1, {}
  local index_of = {}
  for k, v in ipairs(dynamic or {}) do index_of[v.name] = k - 1 end
  for s, step in ipairs(p.steps) do
    local parts, chunk = split(step.parallel_size)
    max_parts = math.max(max_parts, parts)
    steps[s] = { kernel = step.kernel.index, first_slot = #slots, parallel_size = step.parallel_size, parts = parts,
      chunk = chunk, name = step.name }
    for _, b in ipairs(step.buffers) do
      local slot = { step = s, index = 0, offset = 0 }
      if b.role == "input" then
        slot.kind, slot.index = "input", b.input - 1
      elseif b.role == "output" then
        slot.kind, slot.index = "output", b.output - 1
      elseif b.role == "constant" then
        slot.kind, slot.offset = "weights", b.weight_offset
      else
        slot.kind, slot.offset = "arena", b.offset
      end
      if b.role == "variables" then
        for k, name in ipairs(b.names) do
          local variable = index_of[name]
          if not variable then
            fail("kernel %d (%s) reads variable %s, which is not a dynamic variable of this export", s, step.name,
              name)
          end
          fills[#fills + 1] = { step = s, offset = b.offset + (k - 1) * 4, variable = variable }
        end
      end
      slots[#slots + 1] = slot
      if slot.kind == "input" or slot.kind == "output" then run_slots[#run_slots + 1] = #slots - 1 end
    end
  end
  return steps, slots, run_slots, max_parts, fills
end

-- The outputs that are copies of an input, a weight or another output, as C table rows.
local function output_copies(p)
  local copies = {}
  for o, output in ipairs(p.outputs) do
    local b = output.copy_of
    if b then
      local copy = { output = o - 1, index = 0, offset = 0 }
      if b.role == "input" then
        copy.kind, copy.index = "input", b.input - 1
      elseif b.role == "output" then
        copy.kind, copy.index = "output", b.output - 1
      else
        copy.kind, copy.offset = "weights", b.weight_offset
      end
      copies[#copies + 1] = copy
    end
  end
  return copies
end

-- Writes the weights (NAME.safetensors or NAME_weights.c, per m.weights_file) and fills
-- m.weights (the safetensors reader's table) and m.constants (the weights that NAME.c holds
-- itself, copied into the weight block at open); returns the file written, or nil.
local function write_weights(dir, m, weights)
  local name = m.name
  if m.weights_file == "safetensors" then
    local sd = {}
    for _, w in ipairs(weights) do
      if w.in_code then
        m.constants[#m.constants + 1] = { name = w.name, dtype = w.dtype.name, shape = w.shape, offset = w.offset,
          data = w.storage:read_bytes() }
      else
        m.weights[#m.weights + 1] = { name = w.name, dtype = state.safetensors_dtype(w.dtype), shape = w.shape,
          bytes = w.bytes, offset = w.offset }
        sd[w.name] = bytes.from_bytes(w.storage:read_bytes(), w.dtype.name, w.shape, { device = "CPU" })
      end
    end
    state.safe_save(sd, dir .. "/" .. name .. ".safetensors", { format = "tcl export", model = name })
    return name .. ".safetensors"
  elseif m.weights_file == "embed" then
    local blobs = {}
    for i, w in ipairs(weights) do
      blobs[i] = { name = w.name, dtype = w.dtype.name, shape = w.shape, offset = w.offset,
        data = w.storage:read_bytes() }
    end
    write_file(dir .. "/" .. name .. "_weights.c", c_writer.weights_source(m, blobs))
    return name .. "_weights.c"
  end
  return nil
end

-- The example inputs of each plan: { { batch =, inputs = } }; batch is nil without batch_sizes.
-- With dynamic sizes, one plan, its inputs made by inputs(sizes) with each variable at its max.
local function inputs_per_plan(inputs, batch_sizes, dynamic)
  if dynamic then
    if type(inputs) ~= "function" then
      fail("with dynamic, inputs must be a function(sizes) returning the example tensors, got %s", type(inputs))
    end
    local sizes = {}
    for _, v in ipairs(dynamic) do sizes[v.name] = variables.new(v.name, v.min, v.max):bind(v.max) end
    return { { inputs = inputs(sizes) } }
  end
  if not batch_sizes then
    if type(inputs) == "function" then inputs = inputs() end
    return { { inputs = inputs } }
  end
  if type(inputs) ~= "function" then
    fail("with batch_sizes, inputs must be a function(batch) returning the example tensors, got %s", type(inputs))
  end
  local list = {}
  for i, batch in ipairs(batch_sizes) do list[i] = { batch = batch, inputs = inputs(batch) } end
  return list
end

--- Checks a dynamic plan's variables (dynamic: checked by M.check_dynamic): each sizes an
-- input (the only way the program learns its value), and the kernels read no other.
function M.check_variables(p, dynamic)
  local in_inputs, known, names = {}, {}, {}
  for _, input in ipairs(p.inputs) do
    for _, d in ipairs(input.shape) do
      for _, leaf in ipairs(variables.arg_leaves(d, {})) do
        in_inputs[(leaf.op == "BIND" and leaf.src[1] or leaf).arg[1]] = true
      end
    end
  end
  for k, v in ipairs(dynamic) do
    known[v.name], names[k] = true, v.name
    if not in_inputs[v.name] then
      fail("dynamic variable %s sizes no input (bind it in the shape of an input: x:reshape(sizes.%s, ...))", v.name,
        v.name)
    end
  end
  local read = {}
  for name in pairs(p.variables) do read[#read + 1] = name end
  table.sort(read)
  for _, name in ipairs(read) do
    if not known[name] then
      fail("the kernels read variable %s, which is not among the dynamic variables (%s)", name,
        table.concat(names, ", "))
    end
  end
end

-- Every plan takes and gives tensors of the same number, dtypes and ranks as the first.
local function check_alike(plans)
  local first = plans[1]
  for _, p in ipairs(plans) do
    for _, what in ipairs { "inputs", "outputs" } do
      if #p[what] ~= #first[what] then
        fail("batch size %d has %d %s, batch size %d has %d", p.batch, #p[what], what, first.batch, #first[what])
      end
      for i, t in ipairs(p[what]) do
        local f = first[what][i]
        if t.dtype ~= f.dtype or #t.shape ~= #f.shape then
          fail("%s %d is %s of rank %d at batch size %d, %s of rank %d at batch size %d", what:sub(1, -2), i,
            t.dtype.name, #t.shape, p.batch, f.dtype.name, #f.shape, first.batch)
        end
      end
    end
  end
end

-- The steps after the captures, as the progress line names them.
local FILE_STEPS = { "writing the kernels' object code", "writing the weights", "writing the C sources",
  "copying the runtime" }

--- Exports fn (see the header); returns the summary.
function M.export(fn, inputs, opts)
  local name, weights_mode, fold = check_options(fn, opts)
  local dir = opts.dir
  local have_llvm, llvm = pcall(require, "tcl.llvm")
  if not have_llvm then fail("this build has no CPU backend (LLVM), which export needs") end
  local plans, total_steps = {}, 0
  local dynamic = opts.dynamic
  local given_plans = inputs_per_plan(inputs, opts.batch_sizes, dynamic)
  -- progress over the long steps: each plan's capture (its kernels compiled), then the files
  local bar <close> = progress.new { total = #given_plans + #FILE_STEPS, label = "export " .. name, unit = "step",
    status = "compiling kernels" }
  for i, given in ipairs(given_plans) do
    if given.batch then bar:set_status(string.format("compiling kernels (batch %d)", given.batch), i > 1 and 1 or 0) end
    local p = plan.capture(fn, given.inputs)
    p.batch, p.folded = given.batch, fold and plan.fold(p) or 0
    plans[i] = p
    total_steps = total_steps + #p.steps
  end
  bar:set_status("planning the buffers", 1)
  check_alike(plans)
  if dynamic then M.check_variables(plans[1], dynamic) end
  if total_steps > MAX_STEPS then
    fail("the function runs %d kernels, more than the %d an export holds", total_steps, MAX_STEPS)
  end

  local weights, weight_bytes = collect_weights(plans, opts.model)
  if weights_mode == "safetensors" then
    for _, w in ipairs(weights) do
      -- The model's own constants (Tensor.new data, index tables) are part of the program, not of
      -- the user's weights: with a model naming the parameters and nothing folded, the file holds
      -- exactly the parameters, so any writer of the model's state dict (PyTorch's too) can make
      -- it. Folded weights are computed from parameters, so they stay file entries.
      w.in_code = opts.model ~= nil and not fold and w.unnamed == true
      if not w.in_code and not state.safetensors_dtype(w.dtype) then
        fail("weight '%s' has dtype %s, which safetensors has no name for; use weights = \"embed\"", w.name,
          w.dtype.name)
      end
    end
  end
  -- the kernels of all plans, each once; entries renamed to NAME_kernel_<hash> where the object
  -- format allows (tcl.export.objects)
  local kernels, kernel_of = {}, {}
  local renaming = objects.editable(plans[1].kernels[1].object)
  for _, p in ipairs(plans) do
    for _, k in ipairs(p.kernels) do
      local known = kernel_of[k.entry]
      if not known then
        known = k
        kernel_of[k.entry] = k
        kernels[#kernels + 1] = k
        k.index = #kernels
        k.symbol = renaming and string.format("%s_kernel_%s", name, k.entry:match("^tcl_(%x+)$") or tostring(k.index))
          or k.entry
      end
      k.index, k.symbol = known.index, known.symbol
    end
  end
  local layouts, arena_bytes, unshared_bytes, max_parts = {}, 0, 0, 1
  for i, p in ipairs(plans) do
    local inputs_info, outputs_info = io_info(p.inputs, "input", dynamic), io_info(p.outputs, "output", dynamic)
    for o, output in ipairs(p.outputs) do
      if output.buffer then output.buffer.bytes = math.max(output.buffer.bytes, outputs_info[o].bytes) end
    end
    local size, unshared, input_staging, output_staging = plan_arena(p, inputs_info)
    local steps, slots, run_slots, parts, fills = lay_out_steps(p, dynamic)
    layouts[i] = { batch = p.batch, steps = steps, slots = slots, run_slots = run_slots, copies = output_copies(p),
      input_staging = input_staging, output_staging = output_staging, inputs = inputs_info,
      outputs = outputs_info, arena_bytes = size, unshared_bytes = unshared, fills = fills }
    arena_bytes, unshared_bytes = math.max(arena_bytes, size), math.max(unshared_bytes, unshared)
    max_parts = math.max(max_parts, parts)
  end

  make_dir(dir)
  local m = {
    name = name, tcl_version = core.version, target = llvm.target, kernels = kernels, plans = layouts,
    batch_sizes = opts.batch_sizes, variables = dynamic, max_parts = max_parts, arena_bytes = arena_bytes,
    unshared_bytes = unshared_bytes,
    weight_bytes = weight_bytes, weights_file = #weights > 0 and weights_mode or nil, weights = {}, constants = {},
  }
  local files = { name .. ".h", name .. ".c" }
  -- every file is written into a staging directory first, then moved into place (each move
  -- atomic): a failure on the way leaves the previous export's files as they were
  local staging = make_staging(dir, name)
  local written, err = pcall(function()
    -- each step named as it starts, and counted done as the next one starts
    bar:set_status(FILE_STEPS[1])
    m.objects = objects.write(staging, name, kernels)
    bar:set_status(FILE_STEPS[2], 1)
    files[#files + 1] = write_weights(staging, m, weights)
    bar:set_status(FILE_STEPS[3], 1)
    write_file(staging .. "/" .. name .. ".h", c_writer.header(m))
    write_file(staging .. "/" .. name .. ".c", c_writer.source(m))
    for _, o in ipairs(m.objects) do files[#files + 1] = o end
    bar:set_status(FILE_STEPS[4], 1)
    for _, f in ipairs(runtime_files.names(m)) do
      write_file(staging .. "/" .. f, runtime_files.read(f))
      files[#files + 1] = f
    end
    bar:set_status(nil, 1)
    for _, f in ipairs(files) do
      local moved, why = os.rename(staging .. "/" .. f, dir .. "/" .. f)
      if not moved then fail("cannot move '%s' into place: %s", dir .. "/" .. f, tostring(why)) end
    end
  end)
  remove_tree(staging)
  if not written then
    -- the message names the file as the user knows it, not its staging copy
    error((tostring(err):gsub(staging:gsub("%p", "%%%0"), (dir:gsub("%%", "%%%%")))), 0)
  end
  local current = {}
  for _, f in ipairs(files) do current[f] = true end
  for _, stale in ipairs { name .. "_weights.c", name .. ".safetensors", name .. "_kernels.o" } do
    if not current[stale] then os.remove(dir .. "/" .. stale) end
  end

  local summary_plans = {}
  for i, p in ipairs(plans) do
    summary_plans[i] = { batch = p.batch, steps = #p.steps, folded = p.folded, arena_bytes = layouts[i].arena_bytes,
      unshared_bytes = layouts[i].unshared_bytes, inputs = layouts[i].inputs, outputs = layouts[i].outputs,
      results = p.results }
  end
  local first = summary_plans[1]
  return {
    dir = dir, name = name, files = files, kernels = #kernels, steps = total_steps, folded = first.folded,
    arena_bytes = arena_bytes, unshared_bytes = unshared_bytes, weight_bytes = weight_bytes,
    weights = m.weights_file or "none", runtime = runtime_files.names(m), build = c_writer.build_line(m, dir),
    inputs = first.inputs,
    outputs = first.outputs, results = first.results, plans = summary_plans, renamed = renaming, dynamic = dynamic,
  }
end

-- a stray argument (export(fn, inputs, opts, extra)) is an error naming export
M.export = require("tcl.api.check").fixed_arguments("export", M.export)

return setmetatable(M, { __call = function(_, ...) return M.export(...) end })
