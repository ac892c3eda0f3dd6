-- tcl.pattern — the pattern language for rewrite rules.
--
-- A pattern is a Lua value that describes nodes; Lua operators build patterns, so a rule
-- reads like what it does:
--
--   local P = require "tcl.pattern"
--   local x, c = P.var "x", P.cvar "c"
--   return P.rules {
--     { x + 0, "return_x" },                          -- a native C rewrite, by name
--     { x * c, function(m) ... return node end },     -- a Lua rewrite: bound nodes by name
--   }
--
-- Patterns are compiled once into C matchers (src/rewrite); the C engine calls a Lua
-- rewrite only when its pattern matched. A rewrite returns the replacement node, or nil.
local core = require "tcl.core"
local native = require "tcl.rewrite"
local env = require "tcl.env"

-- REWRITE_STATS: count every rule's tries, matches and time from the start (before any rule
-- exists), and print them when the state closes.
if env.REWRITE_STATS then native.report_stats() end

local P = {}
local Pat = {}
Pat.__index = Pat
P.Pattern = Pat

local THIS_FILE = debug.getinfo(1, "S").source

-- file:line of the first caller outside this file: where a rule was written.
local function caller_location()
  for level = 3, 12 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.source ~= THIS_FILE and info.currentline and info.currentline > 0 then
      return info.short_src .. ":" .. info.currentline
    end
  end
  return "?"
end

local function is_pattern(v) return getmetatable(v) == Pat end
P.is_pattern = is_pattern

-- Op names and group names (such as "Binary", which stands for its ops), alone or in a list,
-- become one sorted list of op names.
local function op_list(ops, what)
  if ops == nil then return nil end
  if type(ops) == "string" then ops = { ops } end
  if type(ops) ~= "table" then error(what .. ": op must be a name or a list of names", 3) end
  local set = {}
  for _, name in ipairs(ops) do
    local group = core.groups[name]
    if group then
      for op in pairs(group) do set[op] = true end
    elseif core.ops[name] ~= nil then
      set[name] = true
    else
      error(what .. ": unknown op '" .. tostring(name) .. "'", 3)
    end
  end
  local list = {}
  for name in pairs(set) do list[#list + 1] = name end
  table.sort(list)
  return list
end

local function dtype_list(dt, what)
  if dt == nil then return nil end
  if type(dt) ~= "table" then dt = { dt } end
  local list = {}
  for i, d in ipairs(dt) do
    local ok, obj = pcall(core.dtype, d)
    if not ok then error(what .. ": unknown dtype '" .. tostring(d) .. "'", 3) end
    list[i] = obj
  end
  return list
end

local function new_pattern(fields)
  fields.loc = fields.loc or caller_location()
  return setmetatable(fields, Pat)
end

local function as_pattern(v)
  if is_pattern(v) then return v end
  if type(v) == "number" or type(v) == "boolean" then return P.const(v) end
  error("pattern expected, got " .. type(v), 3)
end

--- Any node, bound to `name` (optional), optionally restricted to dtype(s).
function P.var(name, dtype)
  return new_pattern { name = name, dtype = dtype_list(dtype, "P.var") }
end

--- A CONST node, bound to `name`.
function P.cvar(name, dtype)
  return new_pattern { op = { "CONST" }, name = name, dtype = dtype_list(dtype, "P.cvar") }
end

--- A CONST node with value `value` (numbers compare by value: 0 matches 0 and 0.0).
function P.const(value, dtype)
  return new_pattern { op = { "CONST" }, arg = value, has_arg = true, dtype = dtype_list(dtype, "P.const") }
end

--- A node with op(s) `ops` (names and group names like "Binary", alone or in a list) and sources `src`.
-- opts: name, dtype, arg, order ("in" default, "any" for any order, "each" = one pattern for all sources).
function P.op(ops, src, opts)
  opts = opts or {}
  local pat = { op = op_list(ops, "P.op"), name = opts.name, dtype = dtype_list(opts.dtype, "P.op"),
    order = opts.order }
  if opts.arg ~= nil then pat.arg, pat.has_arg = opts.arg, true end
  if src ~= nil then
    if is_pattern(src) then src = { src }; pat.order = pat.order or "each" end
    if type(src) ~= "table" then error("P.op: sources must be a list of patterns", 2) end
    local list = {}
    for i, s in ipairs(src) do list[i] = as_pattern(s) end
    pat.src = list
  end
  if pat.order and pat.order ~= "in" and pat.order ~= "any" and pat.order ~= "each" then
    error("P.op: order must be \"in\", \"any\" or \"each\"", 2)
  end
  return new_pattern(pat)
end

--- Matches if any of the given patterns matches.
function P.any(...)
  local alts = { ... }
  if #alts == 0 then error("P.any: needs at least one pattern", 2) end
  for i, a in ipairs(alts) do alts[i] = as_pattern(a) end
  return new_pattern { alt = alts }
end

--- A copy of the pattern that also binds the matched node to `name`.
function Pat:named(name)
  local copy = {}
  for k, v in pairs(self) do copy[k] = v end
  copy.name = name
  return setmetatable(copy, Pat)
end

-- Operators and methods building op patterns; commutative ops match sources in any order.
local function binary(op, commutative)
  return function(a, b)
    return new_pattern { op = { op }, src = { as_pattern(a), as_pattern(b) }, order = commutative and "any" or "in" }
  end
end

Pat.__add = binary("ADD", true)
Pat.__mul = binary("MUL", true)
Pat.__sub = binary("SUB")
Pat.__div = binary("FDIV")
Pat.__idiv = binary("FLOORDIV")
Pat.__mod = binary("FLOORMOD")
Pat.__pow = binary("POW")
Pat.__band = binary("AND", true)
Pat.__bor = binary("OR", true)
Pat.__bxor = binary("XOR", true)
Pat.__shl = binary("SHL")
Pat.__shr = binary("SHR")
Pat.__unm = function(a) return new_pattern { op = { "NEG" }, src = { a } } end
Pat.add, Pat.mul, Pat.sub = Pat.__add, Pat.__mul, Pat.__sub
Pat.floordiv, Pat.floormod = Pat.__idiv, Pat.__mod
Pat.idiv = binary("IDIV")
Pat.cmod = binary("MOD")
Pat.max = binary("MAX", true)
Pat.min = binary("MIN", true)
Pat.lt = binary("CMPLT")
Pat.ne = binary("CMPNE", true)
Pat.eq = binary("CMPEQ", true)
Pat.band, Pat.bor, Pat.bxor = Pat.__band, Pat.__bor, Pat.__bxor
function Pat:neg() return Pat.__unm(self) end
function Pat:where(a, b)
  return new_pattern { op = { "WHERE" }, src = { self, as_pattern(a), as_pattern(b) } }
end
function Pat:cast(dtype)
  return new_pattern { op = { "CAST" }, src = { self }, dtype = dtype_list(dtype, "cast") }
end

-- The plain table the C compiler reads (see src/rewrite/lua_rewrite.c).
-- Patterns are user data and may be cyclic: nesting stops where the C compiler would stop too.
local MAX_PATTERN_DEPTH = 64

local function compile_table(p, depth)
  depth = depth or 0
  if depth > MAX_PATTERN_DEPTH then
    error(string.format("%s: pattern nested deeper than %d (does it contain itself?)", p.loc or "?",
      MAX_PATTERN_DEPTH), 0)
  end
  local t = { name = p.name, has_arg = p.has_arg, arg = p.arg, order = p.order }
  if p.op then t.op = p.op end
  if p.dtype then t.dtype = p.dtype end
  if p.src then
    t.src = {}
    for i, s in ipairs(p.src) do t.src[i] = compile_table(s, depth + 1) end
  end
  if p.alt then
    t.alt = {}
    for i, a in ipairs(p.alt) do t.alt[i] = compile_table(a, depth + 1) end
  end
  return t
end

---------------------------------------------------------------------------------------------
-- Rule sets

local RuleSet = {}
RuleSet.__index = RuleSet
P.RuleSet = RuleSet

--- Builds a rule set from a list of { pattern, rewrite } entries (first match wins).
-- rewrite: function(bindings, ctx) -> node | nil, or the name of a native C rewrite.
function P.rules(entries)
  local where = caller_location()
  if type(entries) ~= "table" then error(where .. ": P.rules expects a list of {pattern, rewrite}", 2) end
  local rules = {}
  for i, entry in ipairs(entries) do
    if type(entry) ~= "table" then
      error(string.format("%s: rule %d is a %s, expected {pattern, rewrite}", where, i, type(entry)), 0)
    end
    local pat, rewrite = entry[1], entry[2]
    if not is_pattern(pat) then
      error(string.format("%s: rule %d: the pattern is a %s, not a pattern", where, i, type(pat)), 0)
    end
    local loc = pat.loc or where
    if type(rewrite) ~= "function" and type(rewrite) ~= "string" then
      error(string.format("%s: the rewrite is a %s; use a function or a native rewrite's name", loc, type(rewrite)), 0)
    end
    local compiled_ok, compiled = pcall(compile_table, pat)
    if not compiled_ok then error(compiled, 0) end
    local ok, rule = pcall(native.rule, compiled, rewrite, loc)
    if not ok then error(rule, 0) end -- the C message starts with the rule's location
    rules[i] = rule
  end
  return setmetatable({ rules = rules }, RuleSet)
end

--- a + b: a rule set trying a's rules, then b's (shares the rules, copies nothing).
function RuleSet.__add(a, b)
  if getmetatable(a) ~= RuleSet or getmetatable(b) ~= RuleSet then
    error("only rule sets can be added to rule sets", 2)
  end
  return setmetatable({ parts = { a, b } }, RuleSet)
end

local function flatten(set, out)
  if set.rules then
    for _, r in ipairs(set.rules) do out[#out + 1] = r end
  else
    for _, part in ipairs(set.parts) do flatten(part, out) end
  end
  return out
end

function RuleSet:list() return flatten(self, {}) end
function RuleSet.__len(self) return #flatten(self, {}) end

--- The compiled C matcher (built on first use).
function RuleSet:matcher()
  local m = rawget(self, "compiled")
  if not m then
    m = native.matcher(flatten(self, {}))
    rawset(self, "compiled", m)
  end
  return m
end

local function as_matcher(v, what)
  if v == nil then return nil end
  if getmetatable(v) == RuleSet then return v:matcher() end
  error(what .. " must be a rule set", 3)
end

--- Rewrites the graph under root to a fixed point with these rules (children first).
-- opts: ctx (handed to rewrites), parents_first (a rule set), name, trace (default: REWRITE_TRACE),
-- max_chain (successive
-- replacements of one node), max_growth (new live nodes; default 2^20).
local function checked(ok, result, ...)
  if not ok then error(result, 3) end -- report at the caller of rewrite/graph_rewrite
  return result, ...
end

-- trace defaults to REWRITE_TRACE (tcl.env)
local function trace_of(opts)
  if opts.trace == nil then return env.REWRITE_TRACE end
  return opts.trace
end

function RuleSet:rewrite(root, opts)
  opts = opts or {}
  return checked(pcall(native.graph_rewrite, root, self:matcher(), {
    ctx = opts.ctx, parents_first = as_matcher(opts.parents_first, "parents_first"),
    name = opts.name, trace = trace_of(opts), max_chain = opts.max_chain, max_growth = opts.max_growth,
  }))
end

--- The first rule's result at this one node, or nil (no recursion).
function RuleSet:apply_once(node, ctx)
  return checked(pcall(native.rewrite_once, node, self:matcher(), ctx))
end

--- graph_rewrite(root, rules, opts): rules may be nil when opts.parents_first is given.
function P.graph_rewrite(root, rules, opts)
  opts = opts or {}
  return checked(pcall(native.graph_rewrite, root, as_matcher(rules, "rules"), {
    ctx = opts.ctx, parents_first = as_matcher(opts.parents_first, "parents_first"),
    name = opts.name, trace = trace_of(opts), max_chain = opts.max_chain, max_growth = opts.max_growth,
  }))
end

P.substitute = native.substitute
P.traces = native.traces
P.clear_traces = native.clear_traces
P.stats = native.stats
P.natives = native.natives

return P
