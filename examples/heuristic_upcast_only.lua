-- examples/heuristic_upcast_only.lua — a small alternative to the default kernel heuristic
-- (lua/tcl/heuristics/default.lua): each kernel's outermost output axis is split into parts
-- for the CPU's threads, and its innermost output axis is upcast by 4 (or 2). No register
-- tiles, no unrolled reductions, no loop reordering.
--
-- Run a script with it instead of the default, and see the opts in the kernel names:
--
--   TCL_HEURISTICS=examples/heuristic_upcast_only.lua DEBUG=2 build/tcl examples/quickstart.lua
--
-- What changes in the DEBUG=2 lines ("*** CPU  <kernel name> ... tm ..."): in a name each
-- size is followed by its axis letter ("t" thread, "u" upcast, "r" unroll; none for a plain
-- loop or reduce). With the default heuristic the small reductions are unrolled ("r_2_3r") and
-- the 4x3 @ 3x8 matmul gets a register tile ("r_8u_4u_3r"); nothing is threaded, as these
-- kernels are far too small to pay for waking the pool. With this file no name has an "r"
-- axis; the outermost axis becomes a thread axis where the pool's thread count divides it and
-- the innermost output axis is upcast where 4 or 2 divides it: on a 2-thread machine "E_2t_3"
-- (was E_2_3), "E_2t_3_2u" (was E_2_6), "r_2t_2_2_4u_3" (the matmul, was r_4_8_3). The
-- threaded kernels' times ("tm") go from about 1 us to about 100 us: that is the cost of waking
-- the pool, which the default heuristic avoids below THREAD_MIN_WORK steps. The values printed
-- are the same. DEBUG=3 adds one line per compiled kernel with the opts it got, e.g.
-- "kernel 'E_2t_3' opts: THREAD(1,2) (was 'E_2_3')". On EMU (DEVICE=EMU), which runs kernels on
-- one thread, only the upcasts are applied.
--
-- A heuristic file returns function(kernel); the kernel API is lua/tcl/heuristics/kernel.lua's.
-- A heuristic that raises an error costs its kernel the opts, never the result: the kernel runs
-- without opts and a warning names it.

local function upcast_amount(size)
  for _, amount in ipairs { 4, 2 } do
    if size % amount == 0 then return amount end
  end
  return nil
end

return function(k)
  local caps = k.caps
  local outputs = k:axes("global", "loop")
  if #outputs == 0 then return end
  -- the outermost output axis: one part per thread (only where the count divides it)
  local threads = caps.threads or 1
  if caps.has_threads and threads > 1 and outputs[1].size % threads == 0 then
    k:try_apply("THREAD", outputs[1].axis, threads)
  end
  -- the innermost output axis (read the ranges again: an opt renumbers them)
  outputs = k:axes("global", "loop")
  local inner = outputs[#outputs]
  local amount = inner and upcast_amount(inner.size)
  if amount then k:apply("UPCAST", inner.axis, amount) end
end
