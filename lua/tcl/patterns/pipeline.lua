-- tcl.patterns.pipeline — the ordered passes that lower one kernel (docs/design/pipeline.md).
-- This table is the one truth for pass order: the lowering driver
-- (tcl.codegen.driver.lower) runs it top to bottom, then linearizes and builds the device program.
--
-- An entry is one of
--   { name = "...", rules = <tcl.pattern rule set> }  one graph_rewrite of the kernel with
--                                                     those rules, ctx handed to the rewrites
--   { name = "...", rules = "module" }                the same with the rules of a pass of a
--                                                     later stage (lua/tcl/codegen/passes/):
--                                                     require(module).rules, the rewrites
--                                                     handed what module.context(sink, ctx)
--                                                     returns (the facts they need from the
--                                                     whole kernel; nil: nothing to rewrite)
--   { name = "...", fn = function(sink, ctx) -> sink }
--   { name = "...", pass = "module" }                 a hand-written pass of a later stage
--                                                     (lua/tcl/codegen/passes/): the driver
--                                                     calls require(module).run(sink, ctx);
--                                                     only for a global transformation, which
--                                                     the module's header says why rules do
--                                                     not express
-- Any entry may add `when = function(ctx) -> boolean`: the pass runs only for the kernels it
-- says so (a device that lacks an op, ...).
-- ctx is per kernel: { name = kernel name, noopt = NOOPT is set, device = "EMU" | "CPU" | ...,
-- renderer = { name = "emu" | "llvm" | ..., lacks = { [op name] = true } } (the ops the
-- renderer has no instruction for, so that a pass decomposes them) }. Passes are named by
-- module so that this file, like every rule file, depends only on the core bindings.
--
-- The optimization slot. The pass "optimize" calls M.opts.apply(kernel_sink, ctx) when an
-- optimizer has installed one (heuristics or BEAM: they return the kernel with its ranges
-- split, upcast, ...; nil means unchanged), and nothing when NOOPT is set. The lowering
-- driver installs tcl.codegen.driver.optimize's unless something else was installed first, and keys
-- its compile cache on NOOPT and on the hook, so changing either never returns stale programs.
local symbolic = require "tcl.patterns.symbolic"
local lowering = require "tcl.patterns.lowering"
local transcendental = require "tcl.patterns.transcendental"

local M = {}

--- Kernel optimizations: `apply(kernel_sink, ctx) -> kernel_sink | nil`, or nil for none.
M.opts = { apply = nil }

local function optimize(sink, ctx)
  local apply = M.opts.apply
  if ctx.noopt or apply == nil then return sink end
  return apply(sink, ctx) or sink
end

--- Whether the kernel is lowered for a renderer with workgroups (CUDA, Metal, EMU's GPU mode).
local function on_gpu(ctx) return ctx.renderer ~= nil and ctx.renderer.gpu ~= nil end

M.passes = {
  -- First: symbolic may turn WHERE(g, x, false) into g & x, which would lose the gate that
  -- keeps a padded read in bounds; and loops that never run must go before anything is hoisted.
  { name = "add loads", rules = lowering.empty + lowering.early },
  -- Before optimizing: the optimizer reads loop sizes and index expressions in simplest form.
  { name = "initial symbolic", rules = symbolic.symbolic },
  -- While reductions are still REDUCE nodes over their ranges: opts split and retype ranges.
  { name = "optimize", fn = optimize },
  -- Right after: a kernel the optimizer gave tensor cores (TC) becomes warp tiles of WMMA, before
  -- any pass reads its ranges.
  { name = "tensor cores", pass = "tcl.codegen.passes.tensor_cores", when = on_gpu },
  -- Right after: a kblock axis (KBLOCK: blocks of a reduction) becomes a loop around the
  -- output loops, the partial results kept in the output.
  { name = "kblock", rules = "tcl.codegen.passes.kblock" },
  -- Then: upcast and unroll axes become one copy of the code per lane.
  { name = "expand", pass = "tcl.codegen.passes.expand" },
  -- After expand (the final ranges, lanes included), while reductions are REDUCE nodes and a
  -- transcendental is one op: a reduction's costly per-element value computed again over other
  -- ranges (a row-fused softmax's exp) is kept in a scratch array instead (CPU only).
  { name = "reuse values", pass = "tcl.codegen.passes.reuse_values" },
  -- After the optimizer (it sees one op per transcendental, and each upcast lane gets its own
  -- expansion); only the ops the renderer lacks (every renderer lacks the graph functions EXP
  -- ... ELU; LLVM, CUDA and Metal lack EXP2/LOG2/SIN/COS/POW, EMU decomposes them too so that
  -- its values are the CPU's bit for bit).
  { name = "transcendental", rules = transcendental.rules,
    when = function(ctx)
      return ctx.renderer ~= nil and ctx.renderer.lacks ~= nil and next(ctx.renderer.lacks) ~= nil
    end },
  -- GPU renderers: a reduction shared by a workgroup's threads meets in local memory, while
  -- reductions are still REDUCE nodes and their group ranges still ranges.
  { name = "group reduces", rules = "tcl.codegen.passes.group_reduce", when = on_gpu },
  -- After the optimizer: accumulators depend on the final ranges of each reduction.
  { name = "lower reduces", rules = "tcl.codegen.passes.accumulators" },
  -- GPU renderers: a transposing load of a square tile of threads goes through local memory;
  -- while its threads are still ranges, which it exchanges.
  { name = "stage transposes", rules = "tcl.codegen.passes.stage_transposes", when = on_gpu },
  -- GPU renderers: the output loops become the launch (workgroup and thread indices); after
  -- lowering reduces, which places accumulators by the loops they live in.
  { name = "gpu dims", rules = "tcl.codegen.passes.gpu_dims", when = on_gpu },
  -- After every pass that reads loop sizes or bounds (they see each variable with its range):
  -- a kernel made for a variable size reads the variables' values from one more argument.
  { name = "bind variables", rules = "tcl.codegen.passes.bind_variables" },
  -- Last: the linearizer needs exactly one END per RANGE, and lowering reduces adds ENDs.
  { name = "merge ends", pass = "tcl.codegen.passes.merge_ends" },
}

return M
