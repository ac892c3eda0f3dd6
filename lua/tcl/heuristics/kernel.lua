-- tcl.heuristics.kernel — the kernel as a heuristic sees it: facts about its loops and buffers,
-- the renderer's capabilities, and apply(). A heuristic is a function(kernel) that applies
-- opts; the optimizer (tcl.codegen.driver.optimize) hands it one of these per kernel.
--
--   kernel.name, kernel.device              "r_64_48_32", "CPU"
--   kernel.caps                             the renderer's capabilities:
--       threads (CPU pool), vector_bytes (bytes per vector register), vector_registers,
--       cache = { l1 =, l2 =, l3 = } (bytes), has_threads, has_local, has_shared
--   kernel:ranges()      { { axis =, size =, type = }, ... } in loop order, outermost first;
--                        axis is the number opts take (1-based); type is one of "thread",
--                        "kblock", "global", "loop", "local", "group_reduce", "upcast",
--                        "reduce", "unroll"
--   kernel:axes(type, ...)   the ranges of those types, in order
--   kernel:buffers()     { { slot =, dtype =, itemsize =, store = bool, strides = { [axis] = n } }, ... }
--                        (the same table until the next opt is applied: read it, don't change it)
--                        one entry per access (a buffer read twice appears twice); strides[axis]
--                        is how many elements the address moves per step of that axis: 0 when
--                        the access does not use the axis (neither its index nor its gate, when
--                        the index is not affine), nil when it is not affine in it; a stride that
--                        is a variable size counts at the variable's largest value
--   kernel:tile_axes()   the axes of a register tile, or nil: the output range the (first) store
--                        steps by 1 (vec), an output range the store uses that some read
--                        does not while it uses vec (reuse: a matmul's rows, B not using them),
--                        and that store's entry of buffers()
--   kernel:reduce_ops()  { "ADD", "MAX", ... } of the kernel's reductions
--   kernel:output_size() product of the sizes of the non-reduce axes
--   kernel:work()        product of all axis sizes (one step of the innermost body each); an
--                        axis of variable size (not in ranges(): opts leave it alone) counts at
--                        its largest value in both
--   kernel:apply(op, axis, amount)      raises the opt's error when it is invalid (TC: also when
--                                       the kernel is no matmul its tile configuration fits)
--   kernel:try_apply(op, axis, amount)  true, or false and the error; the kernel is unchanged
--   kernel:opts()        the opts applied so far: { { op, axis, amount }, ... }
--   kernel:graph()       the kernel's SINK as it stands
--
-- Axis numbers follow tcl.opt (src/opt/kernel_opt.h): UPCAST, LOCAL, THREAD, PADTO and SWAP
-- count every range, UNROLL the reduce and group_reduce ones, GROUP, GROUPTOP and KBLOCK the
-- reduce ones. After an opt, ranges are renumbered: read kernel:ranges() again.
local affine = require "tcl.affine"
local pattern = require "tcl.pattern"
local UOp = require "tcl.uop"

local M = {}

local Kernel = {}
Kernel.__index = Kernel

--- Wraps an opt kernel (tcl.opt.kernel) for a heuristic.
function M.wrap(opt_kernel, info)
  return setmetatable({ _k = opt_kernel, name = info.name, device = info.device, caps = info.caps }, Kernel)
end

--- The kernel's graph as it stands (its SINK), for heuristics that match patterns.
function Kernel:graph() return self._k:graph() end

function Kernel:ranges()
  local out = {}
  for i, r in ipairs(self._k:ranges()) do out[i] = { axis = r.axis, size = r.size, type = r.type } end
  return out
end

function Kernel:axes(...)
  local want = {}
  for _, t in ipairs { ... } do want[t] = true end
  local out = {}
  for _, r in ipairs(self:ranges()) do
    if want[r.type] then out[#out + 1] = r end
  end
  return out
end

-- An index expression with each variable (DEFINE_VAR) at its largest value, its ranges kept
-- (the same nodes: strides are looked up by range).
local function at_largest(index)
  local map = nil
  for _, u in ipairs(index:toposort()) do
    if u.op == "DEFINE_VAR" then
      map = map or {}
      map[u] = UOp.index_const(u.arg[3])
    end
  end
  if not map then return index end
  for _, u in ipairs(index:toposort()) do
    if u.op == "RANGE" then map[u] = u end
  end
  return pattern.substitute(index, map)
end

function Kernel:buffers()
  if self._buffers then return self._buffers end
  local ranges = self._k:ranges()
  local graph = self._k:graph()
  local memo, out = {}, {}
  local function entry(index, store)
    local buf = index:source(1)
    while buf.op == "AFTER" do buf = buf:source(1) end
    if buf.op ~= "PARAM" then return end
    local form = {} -- an INDEX without an index addresses element 0
    if #index.src >= 2 then
      form = affine.form(index:source(2), memo) -- nil: not affine
      -- a stride that is a variable size (a row of variable length): its largest value
      if not form then form = affine.form(at_largest(index:source(2)), memo) end
    end
    -- not affine (a stride-2 conv's input gradient reads dy at (h + 1 - kh) / 2): the axes that
    -- neither the index nor its gate mentions still move the address by 0
    local used
    if not form then
      used = {}
      for _, u in ipairs(index:toposort()) do
        if u.op == "RANGE" then used[u] = true end
      end
    end
    local strides = {}
    for _, r in ipairs(ranges) do
      if form then
        strides[r.axis] = form[r.range] or 0
      elseif not used[r.range] then
        strides[r.axis] = 0
      end
    end
    out[#out + 1] = { slot = buf.arg[1], dtype = index.dtype, itemsize = index.dtype.itemsize, store = store,
      strides = strides }
  end
  for _, u in ipairs(graph:toposort()) do
    if u.op == "LOAD" and u:source(1).op == "INDEX" then entry(u:source(1), false) end
    if u.op == "STORE" and u:source(1).op == "INDEX" then entry(u:source(1), true) end
  end
  self._buffers = out -- heuristics ask several times between opts
  return out
end

function Kernel:tile_axes()
  local buffers = self:buffers()
  local store
  for _, b in ipairs(buffers) do
    if b.store then store = b break end
  end
  if not store then return nil end
  local outputs = self:axes("global", "loop")
  local vec, reuse
  for _, r in ipairs(outputs) do
    if store.strides[r.axis] == 1 then vec = r end
  end
  if not vec then return nil end
  for _, r in ipairs(outputs) do
    if r ~= vec and store.strides[r.axis] ~= 0 then
      for _, b in ipairs(buffers) do
        if not b.store and b.strides[r.axis] == 0 and (b.strides[vec.axis] or 1) ~= 0 then reuse = r end
      end
    end
  end
  if not reuse then return nil end
  return vec, reuse, store
end

function Kernel:reduce_ops()
  local out = {}
  for _, u in ipairs(self._k:graph():toposort()) do
    if u.op == "REDUCE" then out[#out + 1] = type(u.arg) == "table" and u.arg[1] or u.arg end
  end
  return out
end

local REDUCE_LIKE = { reduce = true, group_reduce = true, unroll = true }

-- The ranges of variable size (tcl.variables): the optimizer leaves them alone and ranges()
-- omits them, but their loops run, up to their largest values: the reduce and the other
-- products of those largest sizes. Read once per state of the kernel's graph: heuristics ask
-- for the work many times, and kernels without variables must not pay a walk each time.
local function variable_ranges(self)
  local graph = self._k:graph()
  local known = self._variable_ranges
  if known and known.graph == graph then return known.reduce, known.other end
  local reduce, other = 1, 1
  for _, u in ipairs(graph:toposort()) do
    if u.op == "RANGE" and not u:range_size() then
      local size = u.src[1]:vmax()
      if REDUCE_LIKE[u:axis_type()] then reduce = reduce * size else other = other * size end
    end
  end
  self._variable_ranges = { graph = graph, reduce = reduce, other = other }
  return reduce, other
end

-- (Ranges of variable size count at their largest values.)
function Kernel:output_size()
  local _, n = variable_ranges(self)
  for _, r in ipairs(self:ranges()) do
    if not REDUCE_LIKE[r.type] then n = n * r.size end
  end
  return n
end

function Kernel:work()
  local reduce, other = variable_ranges(self)
  local n = reduce * other
  for _, r in ipairs(self:ranges()) do n = n * r.size end
  return n
end

-- TC's checks that need the kernel's matmul (tcl.heuristics.tensor_cores): nil when TC(axis,
-- amount) can be lowered, else why not. (src/opt checks the rest: the amount's digits, the
-- workgroup's threads, that TC comes first.)
local function tc_misfit(self, amount)
  local tensor_cores = require "tcl.heuristics.tensor_cores"
  local found, why = tensor_cores.match(self._k:graph(), self.caps.gpu)
  if not found then return "TC: " .. why end
  local config = tensor_cores.config(amount or 0)
  if not config then return nil end -- src/opt names the problem
  local _, misfit = tensor_cores.check(found, config, self.caps.threads_max, self.caps.local_bytes)
  return misfit
end

function Kernel:apply(op, axis, amount)
  self._buffers = nil
  local why = op == "TC" and tc_misfit(self, amount)
  if why then error(string.format("invalid opt TC(%s,%s): %s", tostring(axis), tostring(amount), why), 2) end
  self._k:apply(op, axis, amount)
  return self
end

function Kernel:try_apply(op, axis, amount)
  self._buffers = nil
  local why = op == "TC" and tc_misfit(self, amount)
  if why then return false, string.format("invalid opt TC(%s,%s): %s", tostring(axis), tostring(amount), why) end
  return self._k:try_apply(op, axis, amount)
end

function Kernel:opts() return self._k:opts() end

return M
