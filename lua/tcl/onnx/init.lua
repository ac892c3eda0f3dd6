-- tcl.onnx — tcl.onnx.load: an ONNX model as a function of tensors.
-- The model file is decoded by lua/tcl/onnx/wire.lua (weights stay in the file's mapping), each
-- node becomes a call of its op type's handler (lua/tcl/onnx/ops/), and calling the model runs
-- the handlers in the graph's order on lazy tensors: the result is the same tensor graph the
-- Tensor API builds, scheduled and fused the same way. ONNX's semantics (0-based indices, its
-- broadcasting and type rules, opset differences) live in the handlers.
local class = require "tcl.api.class"
local env_settings = require "tcl.env"
local wire = require "tcl.onnx.wire"
local schema = require "tcl.onnx.schema"
local tensor_proto = require "tcl.onnx.tensor_proto"
local registry = require "tcl.onnx.ops"
local out_of_scope = require "tcl.onnx.out_of_scope"

local is_tensor = class.is_tensor
local M = {}

-- AttributeProto.AttributeType
local ATTRIBUTE_TYPES = {
  [1] = "FLOAT", [2] = "INT", [3] = "STRING", [4] = "TENSOR", [5] = "GRAPH", [6] = "FLOATS", [7] = "INTS",
  [8] = "STRINGS", [9] = "TENSORS", [10] = "GRAPHS", [11] = "SPARSE_TENSOR", [12] = "SPARSE_TENSORS",
  [13] = "TYPE_PROTO", [14] = "TYPE_PROTOS",
}

local Graph = {}
Graph.__index = Graph

local Context = {}
Context.__index = Context

-- The error of a model: "tcl.onnx: <file>: <what>".
local function model_error(model, fmt, ...)
  error(string.format("tcl.onnx: %s: " .. fmt, model.path, ...), 0)
end

-- How a model's attribute type fields decode when the file omits `type` (very old exporters).
local function attribute_type(proto)
  if proto.type then return ATTRIBUTE_TYPES[proto.type] or "UNKNOWN" end
  if proto.f then return "FLOAT" elseif proto.i then return "INT" elseif proto.s then return "STRING"
  elseif proto.t then return "TENSOR" elseif proto.g then return "GRAPH" elseif proto.floats then return "FLOATS"
  elseif proto.ints then return "INTS" elseif proto.strings then return "STRINGS" elseif proto.tensors then
    return "TENSORS" elseif proto.graphs then return "GRAPHS" end
  return "UNKNOWN"
end

local function decode_type(tp)
  if not tp then return nil end
  if tp.tensor_type then
    local dims = {}
    local shape = tp.tensor_type.shape
    for i, d in ipairs(shape and shape.dim or {}) do dims[i] = d.dim_value or d.dim_param or "?" end
    return { kind = "tensor", elem_type = tp.tensor_type.elem_type,
             dtype = tensor_proto.dtype_of(tp.tensor_type.elem_type), shape = shape and dims or nil }
  elseif tp.sequence_type then
    return { kind = "sequence", elem = decode_type(tp.sequence_type.elem_type) }
  elseif tp.optional_type then
    return { kind = "optional", elem = decode_type(tp.optional_type.elem_type) }
  elseif tp.map_type then
    return { kind = "map" }
  elseif tp.sparse_tensor_type then
    return { kind = "sparse_tensor" }
  end
  return { kind = "unknown" }
end

local function value_info(vi)
  return { name = vi.name, type = decode_type(vi.type) }
end

local build_graph

-- A node's attributes as Lua values (see lua/tcl/onnx/ops/init.lua for the convention).
local function decode_attributes(model, proto_node, where, visible)
  local attrs = {}
  for index, a in ipairs(proto_node.attribute or {}) do
    if not a.name or a.name == "" then model_error(model, "%s: attribute %d has no name", where, index - 1) end
    local kind = attribute_type(a)
    local function tensor(t)
      return (tensor_proto.to_tensor(t, model.reader, function(fmt, ...)
        model_error(model, "%s: attribute '%s': " .. fmt, where, a.name, ...)
      end, model.dir, model.device))
    end
    local value
    if kind == "FLOAT" then value = a.f or 0.0
    elseif kind == "INT" then value = a.i or 0
    elseif kind == "STRING" then value = a.s or ""
    elseif kind == "FLOATS" then value = a.floats or {}
    elseif kind == "INTS" then value = a.ints or {}
    elseif kind == "STRINGS" then value = a.strings or {}
    elseif kind == "TENSOR" then value = a.t and tensor(a.t)
    elseif kind == "TENSORS" then
      value = {}
      for i, t in ipairs(a.tensors or {}) do value[i] = tensor(t) end
    elseif kind == "GRAPH" then value = a.g and build_graph(model, a.g, where .. "/" .. a.name, visible)
    elseif kind == "GRAPHS" then
      value = {}
      for i, g in ipairs(a.graphs or {}) do value[i] = build_graph(model, g, where .. "/" .. a.name, visible) end
    elseif kind == "SPARSE_TENSOR" then
      value = { kind = "sparse_tensor", proto = a.sparse_tensor }
    elseif kind == "TYPE_PROTO" then
      value = decode_type(a.tp)
    else
      value = { kind = kind:lower() }
    end
    attrs[a.name] = value
  end
  return attrs
end

-- The host-side values of a small constant tensor: shape arithmetic reads them without a kernel.
M.HOST_VALUES_LIMIT = 4096

local function opset_of(model, domain)
  if domain == "" or domain == "ai.onnx" then return model.opsets[""] end
  return model.opsets[domain]
end

-- outer: the names visible in the enclosing graph at the node that holds this subgraph (nil for
-- the model's graph); a node may read only names made before it, here or there.
function build_graph(model, proto, where, outer)
  local g = setmetatable({ model = model, name = proto.name or "", where = where, nodes = {}, initializers = {},
    viewed = {}, host = {}, inputs = {}, outputs = {}, grad_names = {} }, Graph)
  for i, t in ipairs(proto.initializer or {}) do
    local name = t.name or ""
    g.initializers[name], g.viewed[name] = tensor_proto.to_tensor(t, model.reader, function(fmt, ...)
      model_error(model, "%sinitializer %d '%s': " .. fmt, where and where .. ": " or "", i, name, ...)
    end, model.dir, model.device)
    if g.initializers[name]:numel() <= M.HOST_VALUES_LIMIT then
      g.host[name] = tensor_proto.to_lua(t, model.reader, model.dir)
    end
  end
  if proto.sparse_initializer and #proto.sparse_initializer > 0 then
    model_error(model, "sparse initializers are not supported (out of scope: docs/guide/onnx.md)")
  end
  local initialized = {}
  for name in pairs(g.initializers) do initialized[name] = true end
  for k, vi in ipairs(proto.input or {}) do
    if not vi.name or vi.name == "" then
      model_error(model, "%sgraph input %d has no name", where and where .. ": " or "", k - 1)
    end
    local info = value_info(vi)
    g.inputs[#g.inputs + 1] = info
    info.has_initializer = initialized[info.name] or false
  end
  for k, vi in ipairs(proto.output or {}) do
    if not vi.name or vi.name == "" then
      model_error(model, "%sgraph output %d has no name", where and where .. ": " or "", k - 1)
    end
    g.outputs[#g.outputs + 1] = value_info(vi)
  end
  local visible = setmetatable({}, { __index = outer })
  for name in pairs(g.initializers) do visible[name] = true end
  for _, info in ipairs(g.inputs) do visible[info.name] = true end
  for i, n in ipairs(proto.node or {}) do
    local domain = n.domain or ""
    local label = string.format("%snode %d%s (%s)", where and where .. "/" or "", i - 1,
      (n.name and n.name ~= "") and (" '" .. n.name .. "'") or "", n.op_type or "?")
    local node = {
      op_type = n.op_type or "", name = n.name or "", domain = domain, label = label,
      input_names = n.input or {}, output_names = n.output or {},
      opset = opset_of(model, domain),
      key = (domain == "" or domain == "ai.onnx") and (n.op_type or "") or (domain .. "." .. (n.op_type or "")),
    }
    node.ninputs = #node.input_names
    node.noutputs = #node.output_names
    for k, name in ipairs(node.input_names) do
      if name ~= "" and not visible[name] then
        model_error(model, "%s: input %d '%s' is not made by an earlier node, an initializer, a graph input or an "
          .. "enclosing graph (ONNX lists a graph's nodes in topological order)", label, k - 1, name)
      end
    end
    node.attrs = decode_attributes(model, n, label, visible)
    if node.key == "ai.onnx.preview.training.Gradient" and type(node.attrs.xs) == "table" then
      for _, name in ipairs(node.attrs.xs) do g.grad_names[name] = true end
    end
    for _, name in ipairs(node.output_names) do
      if name ~= "" then visible[name] = true end
    end
    g.nodes[i] = node
  end
  return g
end

-- Every op type of the graph and its subgraphs without a handler: {op_type = count}.
local function missing_ops(g, missing)
  for _, node in ipairs(g.nodes) do
    if not registry.handlers[node.key] then missing[node.key] = (missing[node.key] or 0) + 1 end
    for _, v in pairs(node.attrs) do
      if getmetatable(v) == Graph then missing_ops(v, missing) end
      if type(v) == "table" and not is_tensor(v) and getmetatable(rawget(v, 1)) == Graph then
        for _, sub in ipairs(v) do missing_ops(sub, missing) end
      end
    end
  end
  return missing
end

-- Context ---------------------------------------------------------------------------------------

--- Raises an error naming the node being run.
function Context:fail(fmt, ...)
  local node = self.node
  error(string.format("tcl.onnx: %s: %s: " .. fmt, self.model.path, node and node.label or "graph", ...), 0)
end

local function flatten(v, out)
  if type(v) == "table" then
    for _, x in ipairs(v) do flatten(x, out) end
  else
    out[#out + 1] = v
  end
  return out
end

--- The host values of a tensor as a flat Lua list: known constants without a kernel, other
--- tensors realized (shape inputs, Slice starts, TopK's K...).
function Context:values(t)
  if t == nil then return nil end
  if not is_tensor(t) then self:fail("expected a tensor, got %s", type(t)) end
  local known = self.host[t]
  if known then return known end
  local list = flatten(t:tolist(), {})
  self.host[t] = list
  return list
end

--- An ONNX axis (0-based, negative from the end) of a rank-`rank` value as a 0-based axis in
--- [0, rank); out of range is an error naming the node (what: "axis" unless given).
function Context:axis(axis, rank, what)
  local a = axis < 0 and axis + rank or axis
  if a < 0 or a >= rank then self:fail("%s %d is out of range for rank %d", what or "axis", axis, rank) end
  return a
end

--- A tensor input's values as Lua integers.
function Context:ints(t)
  local v = self:values(t)
  if v == nil then return nil end
  local out = {}
  for i, x in ipairs(v) do
    if type(x) == "boolean" then x = x and 1 or 0 end
    local n = math.tointeger(x)
    if n == nil then
      if x ~= x or x == math.huge or x == -math.huge then self:fail("expected integers, got %s", tostring(x)) end
      n = math.tointeger(x >= 0 and math.floor(x) or math.ceil(x))
    end
    out[i] = n
  end
  return out
end

--- A tensor input's values as Lua numbers.
function Context:numbers(t)
  local v = self:values(t)
  if v == nil then return nil end
  local out = {}
  for i, x in ipairs(v) do out[i] = type(x) == "boolean" and (x and 1 or 0) or x end
  return out
end

--- Records host values for a tensor a handler computed on the host (Shape, Size, ...).
function Context:known(t, values)
  self.host[t] = values
  return t
end

-- Graph execution ------------------------------------------------------------------------------

local function wants(node_outputs)
  return function(i) local name = node_outputs[i] return name ~= nil and name ~= "" end
end

-- Runs the graph's nodes in env (a table name -> value whose __index reaches the outer scope);
-- returns the outputs' values in order.
function Graph:execute(ctx, env)
  for name, t in pairs(self.initializers) do
    if rawget(env, name) == nil then
      env[name] = t
      if self.host[name] then ctx.host[t] = self.host[name] end
    end
  end
  -- values a Gradient node differentiates with respect to become autograd leaves (copies: the
  -- caller's tensors are not marked)
  local function leaf(name)
    local v = rawget(env, name)
    if is_tensor(v) then env[name] = v:detach():requires_grad_(true) end
  end
  for name in pairs(self.grad_names) do leaf(name) end
  local previous_node = ctx.node
  for _, node in ipairs(self.nodes) do
    local inputs = {}
    for i, name in ipairs(node.input_names) do
      if name ~= "" then
        local v = env[name]
        if v == nil then
          ctx.node = node
          ctx:fail("input %d '%s' has no value (not an initializer, graph input or earlier output)", i - 1, name)
        end
        inputs[i] = v
      end
    end
    local call = setmetatable({ inputs = inputs, wants = wants(node.output_names) }, { __index = node })
    local handler = registry.handlers[node.key]
    ctx.node = node
    local ok, results = pcall(function() return table.pack(handler(ctx, call)) end)
    if not ok then
      local message = tostring(results)
      if message:match("^tcl%.onnx: ") then error(message, 0) end -- already names its node
      ctx:fail("%s", (message:gsub("^[^\n:]*%.lua:%d+: ", "")))
    end
    local first = results[1]
    if results.n == 1 and type(first) == "table" and not is_tensor(first) and rawget(first, "kind") == nil then
      results = results[1] -- a handler may return its outputs as one list
    end
    for i, name in ipairs(node.output_names) do
      if name ~= "" then
        local v = results[i]
        if v == nil then ctx:fail("output %d '%s' was not produced", i - 1, name) end
        env[name] = v
        if self.grad_names[name] then leaf(name) end
      end
    end
  end
  ctx.node = previous_node
  local outs = {}
  for i, info in ipairs(self.outputs) do
    local v = env[info.name]
    if v == nil then model_error(self.model, "graph output '%s' has no value", info.name) end
    outs[i] = v
  end
  return outs
end

--- Runs a subgraph (If/Loop/Scan bodies): inputs are its formal inputs in order (a list) or
--- by name (a table name -> value); it sees the values of the scope it is run from. Returns its
--- outputs as a list.
function Graph:run(ctx, inputs)
  local env = setmetatable({}, { __index = ctx.scope })
  inputs = inputs or {}
  for i, info in ipairs(self.inputs) do
    local v = inputs[i]
    if v == nil then v = inputs[info.name] end
    if v ~= nil then env[info.name] = v end
  end
  local saved = ctx.scope
  ctx.scope = env
  local ok, outs = pcall(self.execute, self, ctx, env)
  ctx.scope = saved
  if not ok then error(outs, 0) end
  return outs
end

-- Model ----------------------------------------------------------------------------------------

local Model = {}
Model.__index = Model

local function check_input(model, info, v, check_shapes)
  local want = info.type
  if not want or want.kind ~= "tensor" then return v end
  if not is_tensor(v) then
    model_error(model, "input '%s' must be a Tensor, got %s", info.name, type(v))
  end
  if v.device ~= model.device then
    model_error(model, "input '%s' is on %s, the model runs on %s (move it with x:to('%s'), or load the model with "
      .. "{device = '%s'})", info.name, v.device, model.device, model.device, v.device)
  end
  if want.dtype and tostring(v.dtype) ~= want.dtype then
    model_error(model, "input '%s' must be %s, got %s", info.name, want.dtype, tostring(v.dtype))
  end
  if want.shape and check_shapes then
    local size = v:size()
    if #size ~= #want.shape then
      model_error(model, "input '%s' must have %d dims, got %d", info.name, #want.shape, #size)
    end
    for d, n in ipairs(want.shape) do
      if math.type(n) == "integer" and n ~= size[d] then
        model_error(model, "input '%s' must have size %d in dim %d, got %d", info.name, n, d, size[d])
      end
    end
  end
  return v
end

--- Runs the model on inputs given by name (a table name -> value); returns a table of its
--- outputs by name. opts.check_shapes = false skips the check of the inputs' shapes against the
--- model's declared ones (dtypes are always checked).
function Model:run(named, opts)
  local check_shapes = not (opts and opts.check_shapes == false)
  local env, ctx = {}, setmetatable({ model = self, host = setmetatable({}, { __mode = "k" }) }, Context)
  ctx.scope = env
  for _, info in ipairs(self.graph.inputs) do
    local v = named[info.name]
    if v ~= nil then
      env[info.name] = check_input(self, info, v, check_shapes)
    elseif not info.has_initializer then
      model_error(self, "input '%s' is missing", info.name)
    end
  end
  -- tensors the handlers make (constants, aranges...) are created on the model's device
  local saved_device = env_settings.DEVICE
  env_settings.DEVICE = self.device
  local ok, outs = pcall(self.graph.execute, self.graph, ctx, env)
  env_settings.DEVICE = saved_device
  if not ok then error(outs, 0) end
  local by_name = {}
  for i, info in ipairs(self.graph.outputs) do by_name[info.name] = outs[i] end
  return by_name
end

--- The inputs the model needs from its caller (graph inputs without an initializer), in order.
function Model:required_inputs()
  local list = {}
  for _, info in ipairs(self.graph.inputs) do
    if not info.has_initializer then list[#list + 1] = info end
  end
  return list
end

-- model(x, y, ...) with the required inputs in order returns the outputs in order;
-- model{name = x, ...} (one plain table) is model:run and returns the outputs by name.
function Model:__call(...)
  local first = ...
  if select("#", ...) == 1 and type(first) == "table" and not is_tensor(first) and rawget(first, "kind") == nil then
    return self:run(first)
  end
  local named, required = {}, self:required_inputs()
  local n = select("#", ...)
  if n ~= #required then
    model_error(self, "expected %d inputs (%s), got %d", #required,
      table.concat((function() local t = {} for i, r in ipairs(required) do t[i] = r.name end return t end)(), ", "), n)
  end
  for i, info in ipairs(required) do named[info.name] = (select(i, ...)) end
  local by_name = self:run(named)
  local outs = {}
  for i, info in ipairs(self.graph.outputs) do outs[i] = by_name[info.name] end
  return table.unpack(outs, 1, #self.graph.outputs)
end

function Model:__tostring()
  return string.format("onnx.Model(%s: %d nodes, opset %s)", self.path, #self.graph.nodes, tostring(self.opset))
end

--- Loads the ONNX model at path. Returns a model object: `model(x, ...)` runs it on its required
--- inputs in order and returns its outputs in order; `model{name = tensor, ...}` (the same as
--- `model:run{...}`) takes inputs by name and returns a table of the outputs by name;
--- `model.inputs` (the inputs without an initializer) / `model.outputs` describe them ({name,
--- type = {kind, dtype, shape}}), `model.opset` is its ai.onnx opset, `model.device` where it
--- runs (opts.device, default: the default device; inputs must be there). Weights aligned in the
--- file as the device's buffers need are views of its mapping, others one copy each.
function M.load(path, opts)
  if type(path) ~= "string" then error("tcl.onnx.load: path must be a string, got " .. type(path), 2) end
  if opts ~= nil and type(opts) ~= "table" then
    error("tcl.onnx.load: options must be a table, got " .. type(opts), 2)
  end
  for key in pairs(opts or {}) do
    if key ~= "device" then error("tcl.onnx.load: unknown option '" .. tostring(key) .. "' (options: device)", 2) end
  end
  local device = opts and opts.device
  if device == nil then
    device = class.default_device("tcl.onnx.load")
  else
    if type(device) ~= "string" then error("tcl.onnx.load: device must be a string, got " .. type(device), 2) end
    device = class.checked_device("tcl.onnx.load", device)
  end
  local ok, reader = pcall(wire.open, path)
  if not ok then error("tcl.onnx.load: " .. tostring(reader), 2) end
  local decoded
  ok, decoded = pcall(reader.decode, reader, schema.ModelProto)
  if not ok then error("tcl.onnx.load: " .. tostring(decoded), 2) end
  local model = setmetatable({ path = path, reader = reader, opsets = {}, dir = path:match("^(.*)/[^/]*$") or ".",
    device = device }, Model)
  for _, o in ipairs(decoded.opset_import or {}) do
    local domain = o.domain or ""
    if domain == "ai.onnx" then domain = "" end
    model.opsets[domain] = o.version or 1
  end
  if not model.opsets[""] and not next(model.opsets) then model.opsets[""] = 1 end
  model.opset = model.opsets[""]
  model.ir_version = decoded.ir_version
  model.producer = decoded.producer_name
  if not decoded.graph then model_error(model, "the file has no graph") end
  if decoded.functions and #decoded.functions > 0 then
    model_error(model, "model-local functions are not supported (out of scope: docs/guide/onnx.md)")
  end
  model.graph = build_graph(model, decoded.graph, nil)
  local missing = missing_ops(model.graph, {})
  if next(missing) then
    local names = {}
    for op, count in pairs(missing) do
      names[#names + 1] = string.format("%s (%d node%s)", op, count, count == 1 and "" or "s")
    end
    table.sort(names)
    model_error(model, "unsupported ONNX op types: %s", table.concat(names, ", "))
  end
  model.inputs = model:required_inputs()
  model.outputs = model.graph.outputs
  return model
end

M.Graph = Graph
M.Context = Context
M.tensor_proto = tensor_proto
M.out_of_scope = out_of_scope

return M
