-- bench/support.lua — what the Lua benchmarks share: medians, running a shell command, the
-- "figure" lines a child prints for its parent, the jitted median of a function, and the
-- GPT-2 small layer both CPU benchmarks time. Loaded as require "bench.support" (the
-- benchmarks run from the repository root with ./?.lua on LUA_PATH).
local M = {}

function M.median(values)
  local sorted = {}
  for i, v in ipairs(values) do sorted[i] = v end
  table.sort(sorted)
  return sorted[(#sorted + 1) // 2]
end

function M.shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

--- A command's stdout and stderr together.
function M.capture(command)
  local pipe = assert(io.popen(command .. " 2>&1"))
  local out = pipe:read("a")
  pipe:close()
  return out
end

--- A command's stdout and stderr together, as capture; an error naming the command and
-- showing its output when it fails (who: the benchmark's name, for the message).
function M.run(command, who)
  local pipe = assert(io.popen(command .. " 2>&1"))
  local out = pipe:read("a")
  if not pipe:close() then error(string.format("%s: failed: %s\n%s", who, command, out), 0) end
  return out
end

--- The command that runs Debian's python with torch (/usr/bin/python3). Debian's torch calls
-- the system's libblas.so.3, which is netlib's reference BLAS (1-2 GFLOPS) unless OpenBLAS is
-- installed: BENCH_BLAS_DIR names a folder holding OpenBLAS's libblas.so.3 (for instance
-- libopenblas0-pthread unpacked with `apt-get download` and `dpkg-deb -x`) that goes first on
-- LD_LIBRARY_PATH, and BENCH_OPENBLAS_CORETYPE sets OPENBLAS_CORETYPE (OpenBLAS 0.3.21 takes
-- a VM's Xeon for a Prescott: SkylakeX gives it its AVX-512 kernels).
function M.python()
  local vars = {}
  local dir, core = os.getenv("BENCH_BLAS_DIR"), os.getenv("BENCH_OPENBLAS_CORETYPE")
  if dir and dir ~= "" then vars[#vars + 1] = "LD_LIBRARY_PATH=" .. M.shell_quote(dir) end
  if core and core ~= "" then vars[#vars + 1] = "OPENBLAS_CORETYPE=" .. M.shell_quote(core) end
  if #vars == 0 then return "/usr/bin/python3" end
  return "env " .. table.concat(vars, " ") .. " /usr/bin/python3"
end

--- "figure <name> <value> <unit>": one figure for the parent process.
function M.figure(name, value, unit)
  io.write(string.format("figure %s %.6g %s\n", name, value, unit))
  io.flush()
end

--- The median kernel time and wall time of `runs` jitted calls of fn(...), and the kernels of
-- the median run (by kernel time).
function M.jitted_median(tcl, runs, fn, ...)
  local step = tcl.jit(fn)
  for _ = 1, 3 do step(...) end -- warm-up, capture, a first replay (first touch of the buffers)
  local reports, wall = {}, {}
  for i = 1, runs do
    reports[i] = tcl.profile(step, ...)
    wall[i] = reports[i].wall
  end
  table.sort(reports, function(x, y) return x.seconds < y.seconds end)
  local mid = reports[(#reports + 1) // 2]
  return mid.seconds, M.median(wall), mid.kernels
end

--- The median seconds of `runs` jitted calls of fn(...) as a program runs them: no kernel is
-- timed, so a GPU that queues kernels (CUDA, Metal) runs them back to back while Lua goes on, and
-- each call's time runs from its start until the device has finished it (tcl.synchronize) —
-- what torch's events around a call measure.
function M.jitted_queued_median(tcl, runs, fn, ...)
  local step = tcl.jit(fn)
  for _ = 1, 3 do step(...) end
  local times = {}
  for i = 1, runs do
    tcl.synchronize() -- the previous call's kernels
    local start = tcl.clock()
    step(...)
    tcl.synchronize()
    times[i] = tcl.clock() - start
  end
  return M.median(times)
end

--- A GPT-2 small layer (spec/support/models.lua) as a function of its input, and that input.
function M.gpt2_layer(tcl)
  local models = require "spec.support.models"
  local sizes = models.GPT2_SMALL
  local _, p = models.gpt2_layer(tcl.Tensor, sizes)
  local function layer(x)
    local weights = {}
    for name, v in pairs(p) do weights[name] = v end
    weights.x = x
    return models.gpt2_layer_on(tcl.Tensor, sizes, weights)
  end
  return layer, p.x
end

return M
