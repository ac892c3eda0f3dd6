-- tcl.api.state — a model's tensors by name (state dicts), loading them back in place, and
-- the safetensors file format. Layer: lua/tcl/api. (tcl.nn.state)
--
--   local state = require "tcl.api.state"
--   local sd = state.get_state_dict(model)          -- { ["layers.1.weight"] = tensor, ... }
--   state.safe_save(sd, "model.safetensors")
--   state.load_state_dict(model, state.safe_load("model.safetensors"))
--   for _, p in ipairs(state.get_parameters(model)) do ... end      -- requires_grad tensors
--
-- A model is any Lua table. Its tensors are found by walking its fields: tables and lists are
-- walked into, functions and other values skipped, and so are keys starting with "_" (private
-- fields, caches). Only string keys and integer keys count (a table keyed by a tensor, say, is
-- not part of the state). A tensor's name is the keys on the way to it joined by ".", as they
-- are: list entries give their 1-based index, so `model.layers[1].weight` is "layers.1.weight".
-- Keys are visited in sorted order (integers numerically, before strings), so names and every
-- list below are deterministic. Each table is walked once and each tensor named once: a
-- tensor or sub-table reachable by two paths (tied weights) gets the first name in that order,
-- and a cycle ends where it closes.
--
-- safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header
-- length N, N bytes of JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]},
-- ..., "__metadata__": {string: string}} padded with spaces to a multiple of 8, then the data,
-- offsets counted from its start, each tensor's bytes row-major and little-endian. safe_save
-- lays a file out as the reference writer does (tensors sorted by alignment, largest item
-- first, then by name; "__metadata__" first in the header; compact JSON), so the same state
-- gives the same bytes. safe_load maps the file and copies every tensor out of the mapping
-- into memory of its own, so that loaded tensors never change (or crash the process) when the
-- file is rewritten or truncated afterwards. Like the reference reader, it requires the
-- tensors to cover the data region exactly, in order, without overlap or gap.
local class = require "tcl.api.class"
local check = require "tcl.api.check"
local json = require "tcl.api.json"
local nodes = require "tcl.api.nodes"
local Tensor = require "tcl.api.tensor"
local buffers = require "tcl.schedule.buffers"
local runtime = require "tcl.runtime"
local core = require "tcl.core"
local shapes = require "tcl.shape"

local is_tensor, fail = class.is_tensor, check.fail
local dtypes = core.dtypes
local M = {}

-- ---------------------------------------------------------------------------------------
-- walking a model

local function key_before(a, b)
  local na, nb = type(a) == "number", type(b) == "number"
  if na ~= nb then return na end
  return a < b
end

-- The keys of t that lead to tables (tensors included), sorted.
local function table_keys(t)
  local keys = {}
  for k, v in next, t do
    if type(v) == "table" and (math.type(k) == "integer" or (type(k) == "string" and k:sub(1, 1) ~= "_")) then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys, key_before)
  return keys
end

local function walk(value, prefix, out, seen)
  for _, k in ipairs(table_keys(value)) do
    local v = rawget(value, k)
    if not seen[v] then
      seen[v] = true
      local name = prefix .. tostring(k)
      if is_tensor(v) then
        out[#out + 1] = { name = name, tensor = v }
      else
        walk(v, name .. ".", out, seen)
      end
    end
  end
end

-- The model's tensors as a list of {name =, tensor =} in name order.
local function named_tensors(fn, model)
  if type(model) ~= "table" or is_tensor(model) then
    fail(fn, "expected a model (a table holding tensors), got %s", is_tensor(model) and "a tensor" or
      check.type_name(model))
  end
  local out = {}
  walk(model, "", out, { [model] = true })
  return out
end

--- { [name] = tensor } of every tensor in the model (see the header for names).
function M.get_state_dict(model)
  local sd = {}
  for _, entry in ipairs(named_tensors("get_state_dict", model)) do sd[entry.name] = entry.tensor end
  return sd
end

--- The model's tensors whose requires_grad is true, in name order, each once.
function M.get_parameters(model)
  local list = {}
  for _, entry in ipairs(named_tensors("get_parameters", model)) do
    if entry.tensor.requires_grad == true then list[#list + 1] = entry.tensor end
  end
  return list
end

-- ---------------------------------------------------------------------------------------
-- loading a state dict into a model

local function sorted_names(map)
  local names = {}
  for name in pairs(map) do names[#names + 1] = name end
  table.sort(names)
  return names
end

-- The checked state dict: string keys, tensor values.
local function checked_state_dict(fn, sd)
  if type(sd) ~= "table" or is_tensor(sd) then
    fail(fn, "expected a state dict (a table of tensors by name), got %s", check.type_name(sd))
  end
  for name, t in pairs(sd) do
    if type(name) ~= "string" then
      fail(fn, "state dict key %s is a %s, not a string (tensor names are strings)", tostring(name), type(name))
    end
    if not is_tensor(t) then fail(fn, "state dict entry '%s' is %s, not a tensor", name, check.type_name(t)) end
  end
  return sd
end

local LOAD_OPTIONS = { strict = true, cast = true }

--- Assigns every tensor of the model from sd, in place (a tensor an optimizer holds sees the
--  new values). opts: strict (default true: a model tensor missing from sd, or an sd entry the
--  model lacks, is an error; false: they are skipped), cast (default false: a dtype differing
--  from the model's is an error; true: the value is cast to the model tensor's dtype). Shapes
--  must match exactly. Every problem is listed in one error, and nothing is assigned then.
--  A value on another device is copied through host memory. Returns the lists of missing and
--  unexpected names (sorted).
function M.load_state_dict(model, sd, opts)
  local fn = "load_state_dict"
  local own = named_tensors(fn, model)
  checked_state_dict(fn, sd)
  opts = check.options(fn, opts, LOAD_OPTIONS)
  local strict = opts.strict == nil or opts.strict
  local cast = opts.cast == true
  local missing, unexpected, misshaped, mistyped, known = {}, {}, {}, {}, {}
  for _, entry in ipairs(own) do
    local name, t = entry.name, entry.tensor
    known[name] = true
    local v = sd[name]
    if v == nil then
      missing[#missing + 1] = name
    elseif not check.same_shape(t._shape, v._shape) then
      misshaped[#misshaped + 1] = string.format("%s (model %s, state dict %s)", name, check.shape_str(t._shape),
        check.shape_str(v._shape))
    elseif not cast and not rawequal(t.dtype, v.dtype) then
      mistyped[#mistyped + 1] = string.format("%s (model %s, state dict %s)", name, t.dtype.name, v.dtype.name)
    end
  end
  for _, name in ipairs(sorted_names(sd)) do
    if not known[name] then unexpected[#unexpected + 1] = name end
  end
  local problems = {}
  if strict and #missing > 0 then problems[#problems + 1] = "missing keys: " .. table.concat(missing, ", ") end
  if strict and #unexpected > 0 then problems[#problems + 1] = "unexpected keys: " .. table.concat(unexpected, ", ") end
  if #misshaped > 0 then problems[#problems + 1] = "mis-shaped keys: " .. table.concat(misshaped, ", ") end
  if #mistyped > 0 then
    problems[#problems + 1] = "dtype mismatches: " .. table.concat(mistyped, ", ") .. " (cast = true converts)"
  end
  if #problems > 0 then fail(fn, "%s", table.concat(problems, "; ")) end

  for _, entry in ipairs(own) do
    local t, v = entry.tensor, sd[entry.name]
    if v ~= nil then
      if v.device ~= t.device then v = Tensor.from_bytes(v:to_bytes(), v.dtype, v._shape, { device = t.device }) end
      if not rawequal(v.dtype, t.dtype) then v = v:cast(t.dtype) end
      t:assign(v):realize()
    end
  end
  return missing, unexpected
end

-- ---------------------------------------------------------------------------------------
-- safetensors

-- safetensors' dtype names and tcl's dtypes, both ways; RANK is the reference's order of
-- dtypes by alignment (its Dtype enum), by which a file's tensors are sorted, largest first.
local SAFE_DTYPES = {
  { "BOOL", "bool" }, { "U8", "uint8" }, { "I8", "int8" }, { "F8_E5M2", "fp8e5m2" }, { "F8_E4M3", "fp8e4m3" },
  { "I16", "int16" }, { "U16", "uint16" }, { "F16", "float16" }, { "BF16", "bfloat16" }, { "I32", "int32" },
  { "U32", "uint32" }, { "F32", "float32" }, { "F64", "float64" }, { "I64", "int64" }, { "U64", "uint64" },
}
local DTYPE_OF, NAME_OF, RANK = {}, {}, {}
for rank, pair in ipairs(SAFE_DTYPES) do
  local dt = dtypes[pair[2]]
  DTYPE_OF[pair[1]], NAME_OF[dt], RANK[dt] = dt, pair[1], rank
end

--- safetensors' name of dtype ("F32" for float32), or nil when the format has none.
function M.safetensors_dtype(dtype) return NAME_OF[dtype] end

--- The largest header safe_load accepts, in bytes (the reference reader's bound).
M.MAX_HEADER_BYTES = 100000000

local function shape_json(shape)
  local parts = {}
  for i, n in ipairs(shape) do parts[i] = string.format("%d", n) end
  return "[" .. table.concat(parts, ",") .. "]"
end

--- Writes the state dict sd ({ [name] = tensor }) to path in the safetensors format, with
--  metadata (an optional { [string] = string }) as "__metadata__". Realizes the tensors. The
--  file is written under a unique temporary name in the same directory, synced and renamed
--  over the target (whose mode is kept; a symbolic link is written through), so a failed save
--  leaves no half file and concurrent saves never mix; a target that exists and is not a
--  regular file (a device, a FIFO) is an error.
function M.safe_save(sd, path, metadata)
  local fn = "safe_save"
  checked_state_dict(fn, sd)
  if type(path) ~= "string" then fail(fn, "path must be a string, got %s", check.type_name(path)) end
  if metadata ~= nil then
    if type(metadata) ~= "table" or is_tensor(metadata) then
      fail(fn, "metadata must be a table of strings, got %s", check.type_name(metadata))
    end
    for k, v in pairs(metadata) do
      if type(k) ~= "string" or type(v) ~= "string" then
        fail(fn, "metadata must map strings to strings, got %s = %s", tostring(k), check.type_name(v))
      end
    end
  end
  local names = sorted_names(sd)
  for _, name in ipairs(names) do
    local dt = sd[name].dtype
    if not NAME_OF[dt] then fail(fn, "'%s' has dtype %s, which safetensors has no name for", name, dt.name) end
  end
  table.sort(names, function(a, b)
    local ra, rb = RANK[sd[a].dtype], RANK[sd[b].dtype]
    if ra ~= rb then return ra > rb end
    return a < b
  end)

  -- one schedule per device for the tensors not stored yet
  local pending = {}
  for _, name in ipairs(names) do
    local t = sd[name]
    pending[t.device] = pending[t.device] or {}
    table.insert(pending[t.device], t)
  end
  for _, device in ipairs(sorted_names(pending)) do Tensor.realize_all(table.unpack(pending[device])) end

  local entries, data, offset = {}, {}, 0
  if metadata ~= nil then entries[1] = json.quote("__metadata__") .. ":" .. json.encode(metadata) end
  for i, name in ipairs(names) do
    local t = sd[name]
    data[i] = t:to_bytes()
    entries[#entries + 1] = string.format('%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}', json.quote(name),
      NAME_OF[t.dtype], shape_json(t._shape), offset, offset + #data[i])
    offset = offset + #data[i]
  end
  local header = "{" .. table.concat(entries, ",") .. "}"
  header = header .. string.rep(" ", (8 - #header % 8) % 8)

  local chunks = { string.pack("<I8", #header), header }
  for i = 1, #data do chunks[#chunks + 1] = data[i] end
  local ok, err = pcall(runtime.replace_file, path, chunks)
  if not ok then fail(fn, "%s", (tostring(err):gsub("^runtime%.replace_file: ", ""))) end
end

local MAX_DIMS = shapes.MAX_NDIM

-- What a JSON value that should have been an object is, for messages.
local function json_kind(v)
  if v == json.null then return "null" end
  if type(v) == "table" then return "an array" end
  return type(v)
end

local function is_count(v) return math.type(v) == "integer" and v >= 0 end

-- The checked header entry of one tensor: dtype, shape, numel, begin and end.
local function tensor_info(fn, path, name, info, objects)
  local function bad(fmt, ...) fail(fn, "'%s': tensor '%s' " .. fmt, path, name, ...) end
  if not objects[info] then bad("is described by %s, not an object", json_kind(info)) end
  local dt = DTYPE_OF[info.dtype]
  if not dt then
    if type(info.dtype) == "string" then bad("has unknown dtype '%s'", info.dtype) end
    bad("has no dtype")
  end
  local shape = info.shape
  if type(shape) ~= "table" or shape == json.null or objects[shape] then bad("has no shape list") end
  for k, n in pairs(shape) do
    if math.type(k) ~= "integer" or k > #shape or not is_count(n) then
      bad("has a shape that is not a list of sizes >= 0")
    end
  end
  -- checked here, so that the message names the file and the tensor and stays short
  if #shape > MAX_DIMS then bad("has %d dims, more than the %d a tensor may have", #shape, MAX_DIMS) end
  local numel = 1
  for i, n in ipairs(shape) do
    if n > 1 << 53 then bad("has size %d in dim %d, more than 2^53", n, i) end
    if n > 0 and numel > (1 << 53) // n then bad("has a shape with more than 2^53 elements") end
    numel = numel * n
  end
  local offsets = info.data_offsets
  if type(offsets) ~= "table" or #offsets ~= 2 or not is_count(offsets[1]) or not is_count(offsets[2])
      or offsets[1] > offsets[2] then
    bad("has no valid data_offsets (two byte offsets [begin, end], begin <= end)")
  end
  if numel > 0 and dt.itemsize > math.maxinteger // numel then bad("is too large") end
  local nbytes = numel * dt.itemsize
  if offsets[2] - offsets[1] ~= nbytes then
    bad("has data_offsets [%d, %d] (%d bytes), but %s %s needs %d bytes", offsets[1], offsets[2],
      offsets[2] - offsets[1], info.dtype, check.shape_str(shape), nbytes)
  end
  return { dtype = dt, shape = shape, numel = numel, begin = offsets[1], stop = offsets[2], name = name }
end

local SAFE_LOAD_OPTIONS = { device = true }

--- The device a file's tensors are loaded to (opts.device of safe_load, gguf_load): the
-- default device when nil, else a checked device name; errors name fn.
function M._load_device(fn, device)
  if device == nil then return class.default_device(fn) end
  if type(device) ~= "string" then fail(fn, "device must be a string, got %s", check.type_name(device)) end
  local ok, checked = pcall(class.checked_device, fn, device)
  if not ok then fail(fn, "%s", (checked:gsub("^[^:]*: ", ""))) end
  return checked
end

--- A flat tensor of numel items of dtype at byte `offset` of the mapped file `map` (path, the
-- tensor's name for errors), copied into memory of its own on device. A view of the file
-- would change when another process rewrites the file, and a truncated file kills a reader of
-- the view with SIGBUS (MAP_PRIVATE does not protect against either). A GPU's memory cannot
-- view the file anyway: its tensors are copied there from a view on the CPU.
function M._copied_tensor(fn, map, path, name, dtype, numel, offset, device)
  local view_device = buffers.in_device_memory(device) and "CPU" or device
  local made, storage = pcall(map.buffer, map, dtype, numel, offset, view_device)
  if made then
    local view = storage
    made, storage = pcall(function() return buffers.copy(buffers.allocate(view.dtype, view.numel, device), view) end)
  end
  if not made then
    fail(fn, "'%s': tensor '%s': %s", path, name,
      (tostring(storage):gsub("^FileMap:buffer: ", ""):gsub("^cuda%.buffer: ", ""):gsub("^metal%.buffer: ", "")))
  end
  return class.wrap(buffers.from_storage(storage), { numel }, device)
end

--- The state dict in the safetensors file at path, and its "__metadata__" (nil when absent).
--  opts: device (default: the default device). The tensors are copies, independent of the
--  file (see the header); every malformed header or layout is an error naming the file.
function M.safe_load(path, opts)
  local fn = "safe_load"
  if type(path) ~= "string" then fail(fn, "path must be a string, got %s", check.type_name(path)) end
  opts = check.options(fn, opts, SAFE_LOAD_OPTIONS)
  local device = M._load_device(fn, opts.device)

  local ok, map = pcall(runtime.map_file, path)
  if not ok then fail(fn, "%s", (tostring(map):gsub("^runtime%.map_file: ", ""))) end
  if map.size < 8 then
    fail(fn, "'%s' is %d bytes long, too short for a safetensors file (8 or more)", path, map.size)
  end
  local n = string.unpack("<i8", map:read(0, 8))
  if n < 0 or n > M.MAX_HEADER_BYTES then
    fail(fn, "'%s' declares a header of %s bytes, more than the %d allowed (not a safetensors file?)", path,
      n < 0 and "2^63 or more" or tostring(n), M.MAX_HEADER_BYTES)
  end
  if n > map.size - 8 then
    fail(fn, "'%s' declares a header of %d bytes, past the end of the file (%d bytes)", path, n, map.size)
  end
  local objects = {}
  local parsed_ok, header = pcall(json.decode, map:read(8, n), objects)
  if not parsed_ok then
    fail(fn, "'%s' has a malformed header: %s (the header starts at byte 9 of the file)", path, header)
  end
  if not objects[header] then
    fail(fn, "'%s' has a header that is not a JSON object", path)
  end

  local metadata
  local infos = {}
  for name, info in pairs(header) do
    if name == "__metadata__" then
      if not objects[info] then
        fail(fn, "'%s': __metadata__ is not an object of strings", path)
      end
      for k, v in pairs(info) do
        if type(v) ~= "string" then fail(fn, "'%s': __metadata__ entry '%s' is not a string", path, k) end
      end
      metadata = info
    else
      infos[#infos + 1] = tensor_info(fn, path, name, info, objects)
    end
  end
  local data_start, data_size = 8 + n, map.size - 8 - n
  table.sort(infos, function(a, b)
    if a.begin ~= b.begin then return a.begin < b.begin end
    return a.name < b.name
  end)
  -- as the reference reader: the tensors cover the data exactly, in order, without overlap or gap
  local covered, previous = 0, nil
  for _, info in ipairs(infos) do
    if info.stop > data_size then
      fail(fn, "'%s': tensor '%s' has data_offsets [%d, %d] past the end of the data (%d bytes)", path, info.name,
        info.begin, info.stop, data_size)
    end
    if info.begin < covered then
      fail(fn, "'%s': tensors '%s' and '%s' overlap", path, previous.name, info.name)
    end
    if info.begin > covered then
      fail(fn, "'%s': data bytes [%d, %d) before tensor '%s' belong to no tensor", path, covered, info.begin, info.name)
    end
    covered, previous = info.stop, info
  end
  if covered ~= data_size then
    fail(fn, "'%s': the data is %d bytes, but its tensors cover %d (is the header length right?)", path, data_size,
      covered)
  end

  local sd = {}
  for _, info in ipairs(infos) do
    local flat = M._copied_tensor(fn, map, path, info.name, info.dtype, info.numel, data_start + info.begin, device)
    sd[info.name] = nodes.reshape(flat, check.copy(info.shape))
  end
  return sd, metadata
end

--- Reads the GGUF file (versions 2 and 3) at path: returns tensors ({ [name] = tensor }),
--  metadata ({ [key] = value }) and infos ({ [name] = { shape, dims, type, offset, nbytes,
--  blocks } }, with version, alignment and data_start). opts: device. Shapes are outermost
--  first (GGUF lists dims innermost first). F32, F16, BF16, F64 and I8..I64 tensors load in
--  their dtypes; Q8_0, Q4_0 and Q4_1 as a lazy float32 dequantization of their raw blocks
--  (infos[name].blocks), which a matmul fuses into its kernel. Other types (the K-quants) and
--  malformed files are errors naming the file, the byte offset and the problem (tcl.api.gguf).
function M.gguf_load(path, opts) return require("tcl.api.gguf").load(path, opts) end

-- a stray argument (safe_save(sd, path, metadata, extra)) is an error (check.fixed_arguments)
return check.fix_arguments(M, "")
