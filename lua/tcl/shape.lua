-- tcl.shape — the shape of every tensor-graph node (docs/design/encodings.md, "Tensor graph").
-- Layer: Lua front end / scheduler. Shapes are 0-based lists of sizes (a Lua list, so axis a
-- is at index a + 1); a scalar has the empty shape {}.
--
--   local shape = require "tcl.shape"
--   shape.of(node)      -- a fresh list the caller may keep and modify
--   shape.shared(node)  -- the memoized list itself: faster, but READ-ONLY by contract
--
-- Shapes are memoized per node, keyed by node.id (unique per node and never reused, so a
-- stale entry can never describe another node). Keying by the userdata would not work: a
-- live node's userdata may be collected and a new one made for it later. To bound the
-- memo, a weak-valued table id -> userdata tells which entries still have a userdata;
-- entries without one are pruned once the memo doubles in size. Pruning may drop the entry
-- of a node that is alive only in C (its userdata collected): that costs a recomputation
-- when it is asked for again, never a wrong answer.
--
-- shape.of validates as it computes: a malformed node raises an error that names the
-- function, the op and the shapes involved.
-- Only the core is needed (not the "tcl" module, which loads lua/tcl/api): so the Tensor API
-- can share these helpers.
local core = require "tcl.core"
local variables = require "tcl.variables"

local M = {}

-- Shapes tcl accepts: at most MAX_NDIM dims, every size and the element count at most
-- MAX_NUMEL. 2^53 elements is past any memory, and low enough that every size, stride,
-- flat index and byte size (8 bytes an element at most) fits in a 64-bit integer with room
-- to spare (and is exact in a double). Checking each shape where it is made means that no
-- size arithmetic on a checked shape can overflow.
M.MAX_NDIM = 64
M.MAX_NUMEL = 1 << 53
local MAX_NDIM, MAX_NUMEL = M.MAX_NDIM, M.MAX_NUMEL

local memo = {}                                  -- node id -> shape list (never modified)
local userdata_of = setmetatable({}, { __mode = "v" }) -- node id -> the node's userdata
local memo_count, prune_at = 0, 4096

local is_symbolic, size_format = variables.is_symbolic, variables.format

--- "(2, 3)" for {2, 3}, "()" for a scalar; a variable size as "T=17" (bound) or "T".
function M.format(s)
  local parts = {}
  for i = 1, #s do parts[i] = size_format(s[i]) end
  return "(" .. table.concat(parts, ", ") .. ")"
end

local math_type = math.type
local FLOAT_MAX_NUMEL = MAX_NUMEL + 0.0

-- The slow path of M.problem: finds what is wrong and words it.
local function describe_problem(s)
  if #s > MAX_NDIM then return string.format("has %d dims, more than the %d a tensor may have", #s, MAX_NDIM) end
  local empty = false
  for i = 1, #s do
    local d = s[i]
    if math.type(d) ~= "integer" or d < 0 then
      return string.format("has size %s in dim %d, not a non-negative integer", tostring(d), i)
    end
    if d > MAX_NUMEL then return string.format("has size %d in dim %d, more than 2^53", d, i) end
    if d == 0 then empty = true end
  end
  if empty then return nil end
  local n = 1
  for i = 1, #s do
    if s[i] > MAX_NUMEL // n then return "has more than 2^53 elements (the most a tensor may have)" end
    n = n * s[i]
  end
  return nil
end

--- nil when s is a shape tcl accepts (see MAX_NUMEL), else what is wrong with it, worded to
-- follow the shape ("has more than 2^53 elements ..."). Sizes are checked one by one before
-- they are multiplied, so nothing here can overflow.
-- A shape with symbolic sizes is checked at its variables' extremes: no size may be negative
-- for any value, and the largest shape must be one tcl accepts.
local function symbolic_problem(s)
  local largest = {}
  for i = 1, #s do
    local d = s[i]
    if is_symbolic(d) then
      if d.dtype ~= core.dtype "index" then
        return string.format("has a %s node as size in dim %d", tostring(d.dtype), i)
      end
      if variables.min(d) < 0 then
        return string.format("has size %s in dim %d, negative for some values of its variables", size_format(d), i)
      end
      largest[i] = variables.max(d)
    else
      largest[i] = d
    end
  end
  return describe_problem(largest)
end

function M.problem(s)
  -- the common case in one pass: integer sizes whose product, taken in floats, is below 2^53
  -- (rounding is monotonic, so the exact product is below 2^53 too); anything else, an empty
  -- shape with a product past 2^53 included, goes to the exact check
  local n = #s
  if n > MAX_NDIM then return describe_problem(s) end
  local product = 1.0
  for i = 1, n do
    local d = s[i]
    if math_type(d) ~= "integer" then
      if is_symbolic(d) then return symbolic_problem(s) end
      return describe_problem(s)
    end
    if d < 0 or d > MAX_NUMEL then return describe_problem(s) end
    product = product * d
  end
  if product < FLOAT_MAX_NUMEL then return nil end
  return describe_problem(s)
end

--- The number of elements of a shape (1 for a scalar). The shape must be one tcl accepts
-- (M.problem); then the product cannot overflow.
-- (A symbolic size makes the count a symbolic size too.)
local size_mul, size_equal = variables.mul, variables.equal
function M.numel(s)
  local n = 1
  for i = 1, #s do
    local d = s[i]
    if math_type(d) == "integer" and math_type(n) == "integer" then n = n * d else n = size_mul(n, d) end
  end
  return n
end

--- Whether a shape has a symbolic size.
function M.is_symbolic(s)
  for i = 1, #s do if is_symbolic(s[i]) then return true end end
  return false
end

--- The largest number of elements a shape can have (its numel when it has no variable).
function M.max_numel(s)
  local n = 1
  for i = 1, #s do n = n * variables.max(s[i]) end
  return n
end

--- Row-major (C order) strides of a contiguous tensor of shape s.
function M.strides(s)
  local st, acc = {}, 1
  for i = #s, 1, -1 do
    st[i] = acc
    local d = s[i]
    if math_type(d) == "integer" and math_type(acc) == "integer" then acc = acc * d else acc = size_mul(acc, d) end
  end
  return st
end

function M.equal(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    local x, y = a[i], b[i]
    if x ~= y and (math_type(x) == "integer" and math_type(y) == "integer" or not size_equal(x, y)) then
      return false
    end
  end
  return true
end

function M.copy(s) return table.move(s, 1, #s, 1, {}) end

---------------------------------------------------------------------------------------------
-- per-op rules: each returns the node's shape given the shared shapes of its sources

local function fail(node, fmt, ...)
  error(string.format("shape.of: %s: " .. fmt, node.op, ...), 0)
end

local function int_list(node, arg, what)
  if type(arg) ~= "table" then fail(node, "%s must be a list of integers, got %s", what, type(arg)) end
  for i = 1, #arg do
    if math.type(arg[i]) ~= "integer" then
      fail(node, "%s must be a list of integers (item %d is %s)", what, i, tostring(arg[i]))
    end
  end
  return arg
end

-- Sizes (integers or symbolic sizes) from a node's arg.
local function sizes_list(node, arg, what)
  if type(arg) ~= "table" then fail(node, "%s must be a list of sizes, got %s", what, type(arg)) end
  for i = 1, #arg do
    if not variables.is_size(arg[i]) then
      fail(node, "%s must be a list of integers (item %d is %s)", what, i, tostring(arg[i]))
    end
  end
  return arg
end

local function check_rank(node, in_shape, got, per_dim, what)
  if got ~= per_dim * #in_shape then
    fail(node, "%s has %d entries, the source shape %s needs %d", what, got, M.format(in_shape), per_dim * #in_shape)
  end
end

-- ALU ops (WHERE's condition included) need sources of one shape.
local function same_as_sources(node, srcs)
  local first = srcs[1]
  for i = 2, #srcs do
    if not M.equal(srcs[i], first) then
      local list = {}
      for j = 1, #srcs do list[j] = M.format(srcs[j]) end
      fail(node, "sources have different shapes %s (broadcasting must be explicit: RESHAPE + EXPAND)",
        table.concat(list, " and "))
    end
  end
  return first
end

local rules = {}

function rules.BUFFER(node)
  local arg = node.arg
  if type(arg) ~= "table" or math.type(arg[2]) ~= "integer" or arg[2] < 0 then
    fail(node, "arg must be {buffer_id, numel, device}")
  end
  return { arg[2] }
end

-- Sizes and amounts from a node's arg, checked before any arithmetic on them.
local function size_list(node, arg, what)
  sizes_list(node, arg, what)
  for i = 1, #arg do
    if variables.min(arg[i]) < 0 or variables.max(arg[i]) > MAX_NUMEL then
      fail(node, "%s %s has an entry outside 0..2^53", what, M.format(arg))
    end
  end
  return arg
end

function rules.CONST() return {} end

function rules.ARANGE(node)
  local n = node.arg
  if not variables.is_size(n) or variables.min(n) < 0 or variables.max(n) > MAX_NUMEL then
    fail(node, "arg must be a size in 0..2^53")
  end
  return { n }
end

function rules.RESHAPE(node, srcs, src_nodes)
  local new = sizes_list(node, node.arg, "the new shape")
  for i = 1, #new do
    if variables.min(new[i]) < 0 then fail(node, "negative size in the new shape %s", M.format(new)) end
  end
  local problem = M.problem(new)
  if problem then fail(node, "the new shape %s %s", M.format(new), problem) end
  local numel, in_numel = M.numel(new), M.numel(srcs[1])
  -- a buffer holds a symbolic shape's elements in a buffer of its largest size
  local in_buffer = src_nodes[1].op == "BUFFER" and is_symbolic(numel) and variables.max(numel) <= in_numel
  -- binding: a tensor of a known size viewed in a shape of variables bound to fit it (the
  -- Tensor API checks the values; unbound for planning, the size is one the variables can take)
  local binds = false
  if is_symbolic(numel) and math_type(in_numel) == "integer" then
    local v = variables.try_value(numel)
    if v then binds = v == in_numel
    else binds = variables.min(numel) <= in_numel and in_numel <= variables.max(numel) end
  end
  if not in_buffer and not binds and not size_equal(numel, in_numel) then
    fail(node, "cannot reshape %s (%s elements) to %s (%s elements)", M.format(srcs[1]), size_format(in_numel),
      M.format(new), size_format(numel))
  end
  return M.copy(new)
end

function rules.PERMUTE(node, srcs)
  local order, in_shape = int_list(node, node.arg, "the axis order"), srcs[1]
  check_rank(node, in_shape, #order, 1, "the axis order")
  local seen, out = {}, {}
  for i, a in ipairs(order) do
    if a < 0 or a >= #in_shape or seen[a] then
      fail(node, "axis order %s is not a permutation of the axes of %s", M.format(order), M.format(in_shape))
    end
    seen[a] = true
    out[i] = in_shape[a + 1]
  end
  return out
end

function rules.EXPAND(node, srcs)
  local new, in_shape = size_list(node, node.arg, "the new shape"), srcs[1]
  check_rank(node, in_shape, #new, 1, "the new shape")
  for i = 1, #new do
    if in_shape[i] ~= 1 and not size_equal(new[i], in_shape[i]) then
      fail(node, "cannot expand %s to %s: only size-1 axes grow", M.format(in_shape), M.format(new))
    end
  end
  return M.copy(new)
end

function rules.PAD(node, srcs)
  local pads, in_shape = size_list(node, node.arg, "the padding"), srcs[1]
  check_rank(node, in_shape, #pads, 2, "the padding")
  local out = {}
  for i = 1, #in_shape do
    out[i] = variables.add(variables.add(in_shape[i], pads[2 * i - 1]), pads[2 * i])
  end
  return out
end

function rules.SHRINK(node, srcs)
  local win, in_shape = sizes_list(node, node.arg, "the window"), srcs[1]
  check_rank(node, in_shape, #win, 2, "the window")
  local out = {}
  for i = 1, #in_shape do
    local s, e = win[2 * i - 1], win[2 * i]
    local size = variables.sub(e, s)
    -- for every value of the variables (a symbolic window is checked at its extremes)
    if variables.min(s) < 0 or variables.min(size) < 0 or variables.min(variables.sub(in_shape[i], e)) < 0 then
      fail(node, "window %s does not fit in %s (axis %d: [%s, %s))", M.format(win), M.format(in_shape), i - 1,
        size_format(s), size_format(e))
    end
    out[i] = size
  end
  return out
end

function rules.FLIP(node, srcs)
  local flags, in_shape = int_list(node, node.arg, "the flip flags"), srcs[1]
  check_rank(node, in_shape, #flags, 1, "the flip flags")
  for i = 1, #flags do
    if flags[i] ~= 0 and flags[i] ~= 1 then fail(node, "flip flags must be 0 or 1, got %s", M.format(flags)) end
  end
  return M.copy(in_shape)
end

M.REDUCE_OPS = { ADD = true, MUL = true, MAX = true }

function rules.REDUCE_AXIS(node, srcs)
  local arg, in_shape = node.arg, srcs[1]
  if type(arg) ~= "table" or not M.REDUCE_OPS[arg[1]] or type(arg[2]) ~= "table" then
    fail(node, "arg must be {op_name, {axes...}} with op_name ADD, MUL or MAX")
  end
  local out = M.copy(in_shape)
  for _, a in ipairs(int_list(node, arg[2], "the axes")) do
    if a < 0 or a >= #in_shape then fail(node, "axis %d is out of range for %s", a, M.format(in_shape)) end
    out[a + 1] = 1
  end
  return out
end

local function same_shape(_, srcs) return M.copy(srcs[1]) end
rules.CONTIGUOUS = same_shape
rules.COPY = same_shape
rules.DETACH = same_shape
rules.CAST = same_shape

-- ASSIGN(target, value): value stored into the target's buffer; both have one shape and dtype.
function rules.ASSIGN(node, srcs, src_nodes)
  if not M.equal(srcs[1], srcs[2]) then
    fail(node, "the value's shape %s is not the target's %s", M.format(srcs[2]), M.format(srcs[1]))
  end
  if src_nodes[1].dtype ~= src_nodes[2].dtype or node.dtype ~= src_nodes[1].dtype then
    fail(node, "the value's dtype %s is not the target's %s", tostring(src_nodes[2].dtype),
      tostring(src_nodes[1].dtype))
  end
  return M.copy(srcs[1])
end

function rules.BITCAST(node, srcs, src_nodes)
  if node.dtype.itemsize ~= src_nodes[1].dtype.itemsize then
    fail(node, "%s to %s changes the item size", tostring(src_nodes[1].dtype), tostring(node.dtype))
  end
  return M.copy(srcs[1])
end

local ALU = core.groups.ALU

---------------------------------------------------------------------------------------------
-- memo

local function prune()
  local kept = 0
  for id in pairs(memo) do
    if userdata_of[id] == nil then memo[id] = nil else kept = kept + 1 end
  end
  memo_count = kept
  prune_at = math.max(4096, 2 * kept)
end

local function compute(node)
  local op = node.op
  local rule = rules[op]
  local src_nodes = node.src
  local srcs = {}
  for i, s in ipairs(src_nodes) do srcs[i] = M.shared(s) end
  local result
  if rule then
    result = rule(node, srcs, src_nodes)
  elseif ALU[op] then
    if #srcs == 0 then fail(node, "an ALU op needs sources") end
    result = M.copy(same_as_sources(node, srcs))
  else
    error(string.format("shape.of: %s is not a tensor-graph op (see docs/design/encodings.md, \"Tensor graph\")",
      op), 0)
  end
  local problem = M.problem(result)
  if problem then fail(node, "its shape %s %s", M.format(result), problem) end
  for i = 1, #result do
    if is_symbolic(result[i]) then result[i] = variables.normal(result[i]) end
  end
  return result
end

--- The memoized shape of node. The list is shared: never modify it (use shape.of for a copy).
function M.shared(node)
  local id = node.id
  local s = memo[id]
  if s then
    userdata_of[id] = node
    return s
  end
  s = compute(node)
  memo[id] = s
  userdata_of[id] = node
  memo_count = memo_count + 1
  if memo_count >= prune_at then prune() end
  return s
end

--- The shape of node as a fresh list (validated; errors name the op and the shapes).
function M.of(node)
  return M.copy(M.shared(node))
end

--- The number of memoized shapes (for specs); M.prune() drops entries of collected nodes.
function M.memo_size() return memo_count end
M.prune = prune

return M
