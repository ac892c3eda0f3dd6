-- tcl.variables — symbolic sizes: a dimension that is a variable (tcl.var), bound to a value for
-- one call, so that one plan and one set of kernels serve every value. Layer: core bindings (Lua).
--
--   local T = variables.new("T", 1, 1024)     -- tcl.var: a DEFINE_VAR node, arg {name, min, max}
--   local t = T:bind(17)                      -- BIND(DEFINE_VAR, CONST 17): a size, dtype index
--   variables.normal(t * 4 + 1)               -- the canonical form of a size expression
--   variables.value(t * 4)                    -- 68: its value under the bindings it holds
--
-- A size in a shape is a Lua integer or an index node over CONST, DEFINE_VAR and BIND leaves
-- (a "symbolic size"). The tensor graph holds bound sizes (BIND: the value travels with the
-- graph, so a tensor can never be computed with another call's value); the scheduler unbinds
-- the graph (M.unbind) before planning, so plans and kernels key on the variable, never on
-- its value, and the values reach the kernels at launch.
--
-- Sizes are kept in a normal form (M.normal): a sum of monomials, each an integer times a
-- product of variables, ordered by the names of their variables, the constant last. Sizes
-- computed two ways (pos - (pos - 1), or T * 4 and 4 * T) then become the same node, which is
-- what shape equality needs (nodes are interned). A floor division or modulo of a symbolic
-- size is kept as an opaque factor.
local core = require "tcl.core"
local UOp = require "tcl.uop"
local pattern = require "tcl.pattern"

local M = {}

local INDEX = core.dtype "index"
local is_uop, new, const = UOp.is_uop, UOp.new, UOp.const

--- Variables may take values up to this: indices computed from them stay 32-bit friendly.
M.MAX_VALUE = (1 << 31) - 1

local Variable = {}
Variable.__index = Variable
Variable.__name = "tcl.Variable"

--- Set by the first bind in this Lua state (the module's own flag: each state loads it once):
-- graphs are searched for variable sizes only from then on.
M.in_use = false

local function fail(fn, fmt, ...) error(string.format(fn .. ": " .. fmt, ...), 3) end

--- A variable size: name (a Lua identifier), min and max (integers, 0 <= min <= max <= MAX_VALUE).
function M.new(name, min, max)
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") then
    fail("tcl.var", "the name must be an identifier (letters, digits, _), got %s", tostring(name))
  end
  if math.type(min) ~= "integer" or math.type(max) ~= "integer" then
    fail("tcl.var", "%s: min and max must be integers, got %s and %s", name, tostring(min), tostring(max))
  end
  if min < 0 or max < min or max > M.MAX_VALUE then
    fail("tcl.var", "%s: needs 0 <= min <= max <= %d, got min %d and max %d", name, M.MAX_VALUE, min, max)
  end
  return setmetatable({ name = name, min = min, max = max, node = new("DEFINE_VAR", INDEX, nil, { name, min, max }) },
    Variable)
end

function M.is_variable(v) return getmetatable(v) == Variable end

function Variable:__tostring() return string.format("%s (%d..%d)", self.name, self.min, self.max) end

--- The size `value` of this variable for one call: BIND(DEFINE_VAR, CONST value).
function Variable:bind(value)
  if getmetatable(self) ~= Variable then fail("bind", "call it as T:bind(value) on a variable from tcl.var") end
  if math.type(value) ~= "integer" then
    if type(value) == "number" and math.tointeger(value) then value = math.tointeger(value)
    else fail("bind", "%s: the value must be an integer, got %s", self.name, tostring(value)) end
  end
  if value < self.min or value > self.max then
    fail("bind", "%s: value %d is outside %d..%d", self.name, value, self.min, self.max)
  end
  M.in_use = true
  return new("BIND", INDEX, { self.node, const(INDEX, value) })
end

--- The variable itself as a size (unbound): for graphs built to be planned, not run.
function Variable:size() return self.node end

---------------------------------------------------------------------------------------------
-- sizes

--- Whether d is a symbolic size (an index node), as opposed to a Lua integer.
function M.is_symbolic(d) return is_uop(d) end

--- Whether d can be a size: a Lua integer or an index node.
function M.is_size(d) return math.type(d) == "integer" or (is_uop(d) and d.dtype == INDEX) end

--- The variable node (DEFINE_VAR) of a BIND or DEFINE_VAR leaf.
local function variable_of(leaf) return leaf.op == "BIND" and leaf.src[1] or leaf end

-- The polynomial of a size: { [key] = {coef=, factors={leaf...}} }, key "" for the constant.
-- Leaves are BIND, DEFINE_VAR, or an opaque node (a division or modulo, normalized inside).
local function leaf_name(leaf)
  if leaf.op == "BIND" or leaf.op == "DEFINE_VAR" then
    local arg = variable_of(leaf).arg
    return leaf.op == "BIND" and arg[1] .. "=" .. leaf.src[2].arg or arg[1]
  end
  return string.format("~%d", leaf.id) -- opaque: ordered after the variables, by identity
end

local function monomial_key(factors)
  local names = {}
  for i, f in ipairs(factors) do names[i] = leaf_name(f) end
  return table.concat(names, "*")
end

local function poly_const(c) return { [""] = { coef = c, factors = {} } } end

local function poly_add(a, b, sign)
  local out = {}
  for k, m in pairs(a) do out[k] = { coef = m.coef, factors = m.factors } end
  for k, m in pairs(b) do
    local o = out[k]
    if o then o.coef = o.coef + sign * m.coef else out[k] = { coef = sign * m.coef, factors = m.factors } end
  end
  return out
end

local function sorted_factors(list)
  table.sort(list, function(x, y) return leaf_name(x) < leaf_name(y) end)
  return list
end

local function poly_mul(a, b)
  local out = {}
  for _, x in pairs(a) do
    for _, y in pairs(b) do
      local factors = table.move(x.factors, 1, #x.factors, 1, {})
      table.move(y.factors, 1, #y.factors, #factors + 1, factors)
      sorted_factors(factors)
      local k = monomial_key(factors)
      local o = out[k]
      if o then o.coef = o.coef + x.coef * y.coef else out[k] = { coef = x.coef * y.coef, factors = factors } end
    end
  end
  return out
end

local to_poly, from_poly

local function opaque(node) return { [leaf_name(node)] = { coef = 1, factors = { node } } } end

function to_poly(u)
  if math.type(u) == "integer" then return poly_const(u) end
  local op = u.op
  if op == "CONST" then return poly_const(u.arg) end
  if op == "BIND" or op == "DEFINE_VAR" then return { [leaf_name(u)] = { coef = 1, factors = { u } } } end
  if op == "ADD" then return poly_add(to_poly(u.src[1]), to_poly(u.src[2]), 1) end
  if op == "SUB" then return poly_add(to_poly(u.src[1]), to_poly(u.src[2]), -1) end
  if op == "NEG" then return poly_add(poly_const(0), to_poly(u.src[1]), -1) end
  if op == "MUL" then return poly_mul(to_poly(u.src[1]), to_poly(u.src[2])) end
  if op == "FLOORDIV" or op == "FLOORMOD" or op == "MAX" or op == "MIN" then
    local a, b = M.normal(u.src[1]), M.normal(u.src[2])
    if math.type(a) == "integer" and math.type(b) == "integer" then
      if op == "FLOORDIV" then return poly_const(a // b) end
      if op == "FLOORMOD" then return poly_const(a % b) end
      return poly_const(op == "MAX" and math.max(a, b) or math.min(a, b))
    end
    return opaque(new(op, INDEX, { is_uop(a) and a or const(INDEX, a), is_uop(b) and b or const(INDEX, b) }))
  end
  error(string.format("a size expression may use + - * // %% max min of integers and variables, not %s", op), 0)
end

function from_poly(p)
  local keys = {}
  for k, m in pairs(p) do if m.coef ~= 0 and k ~= "" then keys[#keys + 1] = k end end
  table.sort(keys)
  local out
  for _, k in ipairs(keys) do
    local m = p[k]
    local term = m.factors[1]
    for i = 2, #m.factors do term = new("MUL", INDEX, { term, m.factors[i] }) end
    if m.coef ~= 1 then term = new("MUL", INDEX, { term, const(INDEX, m.coef) }) end
    out = out and new("ADD", INDEX, { out, term }) or term
  end
  local c = p[""] and p[""].coef or 0
  if not out then return c end
  if c ~= 0 then out = new("ADD", INDEX, { out, const(INDEX, c) }) end
  return out
end

--- The normal form of a size: a Lua integer when it is constant, else the canonical node.
function M.normal(d)
  if math.type(d) == "integer" then return d end
  if not is_uop(d) then error(string.format("a size must be an integer or a variable size, got %s", type(d)), 0) end
  if d.op == "BIND" or d.op == "DEFINE_VAR" then return d end
  if d.op == "CONST" then return d.arg end
  return from_poly(to_poly(d))
end

--- Whether two sizes are equal as expressions (not only for this call's values).
function M.equal(a, b)
  if a == b then return true end
  if math.type(a) == "integer" and math.type(b) == "integer" then return false end
  return M.normal(a) == M.normal(b)
end

--- The sizes a + b, a - b, a * b in normal form (integers stay integers).
function M.add(a, b)
  if math.type(a) == "integer" and math.type(b) == "integer" then return a + b end
  return M.normal(UOp.add(is_uop(a) and a or const(INDEX, a), b))
end
function M.sub(a, b)
  if math.type(a) == "integer" and math.type(b) == "integer" then return a - b end
  return M.normal(UOp.sub(is_uop(a) and a or const(INDEX, a), b))
end
function M.mul(a, b)
  if math.type(a) == "integer" and math.type(b) == "integer" then return a * b end
  return M.normal(UOp.mul(is_uop(a) and a or const(INDEX, a), b))
end

-- The value of a size under the bindings it holds; nil (and the unbound variable's name) when
-- a variable in it has no value.
local function evaluate(u)
  if math.type(u) == "integer" then return u end
  local op = u.op
  if op == "CONST" then return u.arg end
  if op == "BIND" then return u.src[2].arg end
  if op == "DEFINE_VAR" then return nil, u.arg[1] end
  local a, name = evaluate(u.src[1])
  if a == nil then return nil, name end
  if op == "NEG" then return -a end
  local b, name2 = evaluate(u.src[2])
  if b == nil then return nil, name2 end
  if op == "ADD" then return a + b elseif op == "SUB" then return a - b elseif op == "MUL" then return a * b
  elseif op == "FLOORDIV" then return a // b elseif op == "FLOORMOD" then return a % b
  elseif op == "MAX" then return math.max(a, b) elseif op == "MIN" then return math.min(a, b) end
  error("a size expression may not use " .. op, 0)
end

--- The value of a size for this call (its bindings); an error names an unbound variable.
function M.value(d)
  local v, name = evaluate(d)
  if v == nil then error(string.format("the size %s has no value: variable %s is not bound", M.format(d), name), 0) end
  return v
end

--- The value of a size, or nil when a variable in it is unbound.
function M.try_value(d) return (evaluate(d)) end

--- The largest value a size can take (its variables' max).
function M.max(d)
  if math.type(d) == "integer" then return d end
  return d:vmax()
end

--- The smallest value a size can take.
function M.min(d)
  if math.type(d) == "integer" then return d end
  return d:vmin()
end

local BINARY_TEXT = { ADD = "+", SUB = "-", MUL = "*", FLOORDIV = "//", FLOORMOD = "%" }

--- A size as text: "17", "T=17" (bound), "T" (unbound), "T=17*4+1"; without_values: bound
-- variables by their names alone ("T*4+1", a key that holds for every value).
function M.format(d, without_values)
  if math.type(d) == "integer" or not is_uop(d) then return tostring(d) end
  local op = d.op
  if op == "CONST" then return tostring(d.arg) end
  if op == "BIND" then return d.src[1].arg[1] .. (without_values and "" or "=" .. tostring(d.src[2].arg)) end
  if op == "DEFINE_VAR" then return d.arg[1] end
  if op == "NEG" then return "-" .. M.format(d.src[1], without_values) end
  local text = BINARY_TEXT[op]
  if text then
    local a, b = M.format(d.src[1], without_values), M.format(d.src[2], without_values)
    if op == "MUL" or op == "FLOORDIV" or op == "FLOORMOD" then
      if d.src[1].op == "ADD" or d.src[1].op == "SUB" then a = "(" .. a .. ")" end
      if d.src[2].op == "ADD" or d.src[2].op == "SUB" then b = "(" .. b .. ")" end
    end
    if op == "ADD" and b:sub(1, 1) == "-" then return a .. b end
    return a .. text .. b
  end
  return string.format("%s(%s, %s)", op:lower(), M.format(d.src[1], without_values),
    M.format(d.src[2], without_values))
end

---------------------------------------------------------------------------------------------
-- graphs: bound and unbound

-- The BIND and DEFINE_VAR leaves of the sizes in an arg (a size, or a list of them).
local function arg_leaves(arg, out)
  if is_uop(arg) then
    for _, u in ipairs(arg:toposort()) do
      if u.op == "BIND" or u.op == "DEFINE_VAR" then out[#out + 1] = u end
    end
  elseif type(arg) == "table" then
    for _, a in ipairs(arg) do arg_leaves(a, out) end
  end
  return out
end
M.arg_leaves = arg_leaves

-- arg with each size rewritten by map (a node -> node table for pattern.substitute).
local function map_arg(arg, map)
  if is_uop(arg) then return M.normal(pattern.substitute(arg, map)) end
  if type(arg) == "table" then
    local out = {}
    for i, a in ipairs(arg) do out[i] = map_arg(a, map) end
    return out
  end
  return arg
end

-- The tensor-graph ops whose arg may hold a size (docs/design/encodings.md): only their args
-- are read (reading an arg makes a Lua table), so the walks cost little on large graphs.
local SIZED = { RESHAPE = true, EXPAND = true, PAD = true, SHRINK = true, ARANGE = true }

-- Whether an arg holds a node (a symbolic size) anywhere.
local function holds_node(arg)
  if is_uop(arg) then return true end
  if type(arg) == "table" then
    for _, a in ipairs(arg) do if holds_node(a) then return true end end
  end
  return false
end


--- The graph of sink with every bound size unbound (BIND -> its DEFINE_VAR), and the values:
-- { [variable name] = value }, { [variable name] = DEFINE_VAR node }, and the buffers read
-- in a shape of variables larger than they are: { [BUFFER node] = the largest numel } (the
-- caller stages each in a buffer of that size). A variable bound to two values in one graph
-- is replaced by its values there (constants: that graph's plan and kernels are its own).
-- Returns sink itself (and empty tables) when the graph holds no symbolic size.
function M.unbind(sink)
  local values, vars, widen = {}, {}, {}
  if not M.in_use then return sink, values, vars, widen end
  local order = sink:toposort()
  -- first the bindings: a variable bound to two values in one graph (two decoding steps built
  -- before either ran) is planned with its values as constants, that graph only
  local holding, twice = {}, {}
  for _, node in ipairs(order) do
    local arg = SIZED[node.op] and node.arg
    if arg and holds_node(arg) then
      local leaves = arg_leaves(arg, {})
      holding[node] = leaves
      for _, leaf in ipairs(leaves) do
        local var = variable_of(leaf)
        local name = var.arg[1]
        local known = vars[name]
        if known and known ~= var then
          error(string.format("realize: two variables named %s with different ranges in one graph", name), 0)
        end
        vars[name] = var
        if leaf.op == "BIND" then
          local v = leaf.src[2].arg
          if values[name] and values[name] ~= v then twice[name] = true end
          values[name] = v
        end
      end
    end
  end
  for name in pairs(twice) do values[name], vars[name] = nil, nil end
  local replaced, any = {}, false
  for _, node in ipairs(order) do
    local leaves = holding[node]
    if leaves then
      local map = {}
      for _, leaf in ipairs(leaves) do
        if leaf.op == "BIND" then
          local name = leaf.src[1].arg[1]
          map[leaf] = twice[name] and leaf.src[2] or leaf.src[1]
        end
      end
      if next(map) then replaced[node] = map_arg(node.arg, map); any = true end
    end
  end
  if not any then return sink, values, vars, widen end
  local rebuilt = {}
  for _, node in ipairs(order) do
    local srcs, changed = {}, replaced[node] ~= nil
    for i, s in ipairs(node.src) do
      srcs[i] = rebuilt[s] or s
      if srcs[i] ~= s then changed = true end
    end
    -- a buffer bound to a shape of variables (x:reshape(4, T:bind(17)) of 68 elements) must be
    -- read as a buffer of the shape's largest size, so that plans and kernels do not depend on
    -- the size of this call's input: the caller stages it in one (widen)
    local shape_arg = replaced[node]
    if node.op == "RESHAPE" and shape_arg and node.src[1].op == "BUFFER" then
      local count = 1
      for _, d in ipairs(shape_arg) do count = M.mul(count, d) end
      local buffer = node.src[1]
      if is_uop(count) and count:vmax() > buffer.arg[2] then widen[buffer] = count:vmax() end
    end
    if changed then
      rebuilt[node] = new(node.op, node.dtype, srcs, replaced[node] or node.arg, node.tag)
    end
  end
  return rebuilt[sink] or sink, values, vars, widen
end

--- The values of the variables bound in a size (a Lua integer has none), added to values
-- ({ [name] = value }); returns values.
function M.values_in(d, values)
  if is_uop(d) then
    for _, u in ipairs(d:toposort()) do
      if u.op == "BIND" then values[u.src[1].arg[1]] = u.src[2].arg end
    end
  end
  return values
end

--- A size with its variables bound to values (BIND or DEFINE_VAR leaves alike).
function M.rebind_size(d, values)
  if not is_uop(d) then return d end
  local map = {}
  for _, u in ipairs(d:toposort()) do
    if u.op == "BIND" or u.op == "DEFINE_VAR" then
      local var = variable_of(u)
      local v = values[var.arg[1]]
      if v == nil then error(string.format("variable %s has no value", var.arg[1]), 0) end
      map[u] = new("BIND", INDEX, { var, const(INDEX, v) })
    end
  end
  return M.normal(pattern.substitute(d, map))
end

--- node with its variables bound to values: every DEFINE_VAR (or BIND, rebound) in the sizes
-- of its graph's args becomes BIND(var, values[name]) (the realized views a schedule returns
-- to the API; a plan's results on replay).
function M.rebind(node, values)
  if not M.in_use then return node end
  local order = node:toposort()
  local rebuilt = {}
  for _, u in ipairs(order) do
    local arg, new_arg = SIZED[u.op] and u.arg, nil
    if arg and holds_node(arg) then
      local map = {}
      for _, leaf in ipairs(arg_leaves(arg, {})) do
        local var = variable_of(leaf)
        local v = values[var.arg[1]]
        if v == nil then error(string.format("realize: variable %s has no value", var.arg[1]), 0) end
        map[leaf] = new("BIND", INDEX, { var, const(INDEX, v) })
      end
      if next(map) then new_arg = map_arg(arg, map) end
    end
    local srcs, changed = {}, new_arg ~= nil
    for i, s in ipairs(u.src) do
      srcs[i] = rebuilt[s] or s
      if srcs[i] ~= s then changed = true end
    end
    if changed then rebuilt[u] = new(u.op, u.dtype, srcs, new_arg or u.arg, u.tag) end
  end
  return rebuilt[node] or node
end

return M
