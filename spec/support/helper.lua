-- spec/support/helper.lua — shared facts for specs: where the build is, running programs, and
-- files. scripts/test.sh sets TCL_BUILD_DIR; specs run from the repository root.
local M = {}

-- A test variable: its TCL_ name, else its old TCLC_ name (both set and different is an
-- error naming both, as for tcl's settings: tcl.settings).
local function test_setting(variable, old)
  return require("tcl.settings").read({ variable = variable, old = old, kind = "string" }, os.getenv)
end

M.root = test_setting("TCL_SOURCE_DIR", "TCLC_SOURCE_DIR") or "."
M.build_dir = test_setting("TCL_BUILD_DIR", "TCLC_BUILD_DIR") or (M.root .. "/build-debug")
M.tcl_bin = M.build_dir .. "/tcl"

--- The build under test's type, from its CMake cache ("Debug", "Sanitize", ...); nil if unknown.
function M.build_type()
  local f = io.open(M.build_dir .. "/CMakeCache.txt", "r")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text:match("\nCMAKE_BUILD_TYPE:%w+=([^\n]*)")
end

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

--- Whether a file can be opened for reading.
function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

--- The contents of a file (an error if it cannot be read).
function M.read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

--- Writes text to a file (an error if it cannot be written).
function M.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

--- Runs a shell command; returns exit status, stdout, stderr.
function M.run(cmd, stdin_text)
  local out, err = os.tmpname(), os.tmpname()
  local input = "/dev/null"
  if stdin_text then
    input = os.tmpname()
    local f = assert(io.open(input, "wb"))
    f:write(stdin_text)
    f:close()
  end
  local ok, how, code = os.execute(cmd .. " >" .. out .. " 2>" .. err .. " <" .. input)
  local status = (how == "exit") and code or 128 + (code or 0)
  if ok == true then status = 0 end
  local stdout, stderr = read_all(out), read_all(err)
  os.remove(out)
  os.remove(err)
  if stdin_text then os.remove(input) end
  return status, stdout, stderr
end

--- How many times plain text occurs in text (not overlapping).
function M.count(text, plain)
  local n, at = 0, 1
  while true do
    local s, e = text:find(plain, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

--- A chunk for a child script: defines mark(text), which writes "mark <text>" into the stand-in
-- CUDA driver's record (MOCK_CUDA_LOG; the stand-in opens the file for each line it writes).
M.MOCK_CUDA_MARK = [[
  local function mark(text)
    local f = assert(io.open(os.getenv("MOCK_CUDA_LOG"), "a"))
    f:write("mark ", text, "\n")
    f:close()
  end
]]

--- The lines of a stand-in library's record (text) from the first that starts with `from` up to
-- the first after it that starts with `to` (not included), as a list.
function M.lines_between(text, from, to)
  local lines, inside = {}, false
  for line in text:gmatch("[^\n]+") do
    if inside and line:sub(1, #to) == to then break end
    inside = inside or line:sub(1, #from) == from
    if inside then lines[#lines + 1] = line end
  end
  return lines
end

function M.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- The start of a shell command that launches an Open MPI job of `ranks` ranks on this
-- machine, up to "mpirun ... -np N" (the caller adds -x options and the program). `unset`: more
-- variables to remove; `words`: what goes between the environment and mpirun (variables to
-- set, "timeout 60"). The ranks get neither the sanitized busted's LD_PRELOAD (Open MPI's
-- launcher must not inherit libasan) nor leak checks (the sanitized tcl would report Open
-- MPI's own allocations left at exit, which are not the program's).
function M.mpirun_prefix(ranks, words, unset)
  local removed = ""
  for _, name in ipairs(unset or {}) do removed = removed .. " -u " .. name end
  return string.format("env -u LD_PRELOAD%s ASAN_OPTIONS=detect_leaks=0 %smpirun --allow-run-as-root --oversubscribe "
    .. "-np %d", removed, words and words .. " " or "", ranks)
end

--- The error message of f(...), which must fail.
function M.error_of(f, ...)
  local ok, err = pcall(f, ...)
  assert(not ok, "expected an error")
  return tostring(err)
end

--- The error message of f(...), which must fail, without the "file:line: " that Lua put
-- before it (the position of the call that raised it).
function M.message_of(f, ...)
  return (M.error_of(f, ...):gsub("^[^:\n]*:%d+: ", ""))
end

--- Asserts that f(...) fails with a message containing `expected` (plain text).
function M.fails_with(expected, f, ...)
  local message = M.error_of(f, ...)
  assert(message:find(expected, 1, true), "expected '" .. expected .. "' in: " .. message)
end

--- The integer in environment variable `name`, or `default` when it is unset or empty; any
-- other text is an error naming the variable.
function M.integer_env(name, default)
  local text = os.getenv(name)
  if text == nil or text == "" then return default end
  local value = math.tointeger(tonumber(text))
  if value == nil then error(name .. " must be an integer, got '" .. text .. "'", 0) end
  return value
end

--- Whether environment variable `name` is set to something (an empty value is unset).
function M.env_set(name)
  local text = os.getenv(name)
  return text ~= nil and text ~= ""
end

local Fuzz = {}
Fuzz.__index = Fuzz

--- The one seed and count pair of every fuzzing spec: TCL_FUZZ_SEED (an integer) and
-- TCL_FUZZ_COUNT (how many cases: seeds, programs, expressions, ...; at least 1), each the
-- spec's own default (`defaults.seed`, `defaults.count`) when unset, so that a run with neither
-- set is the CI run. TCL_FUZZ_VERBOSE (any value) asks a fuzzer to print what it does.
--   local fuzz = helper.fuzz{ name = "symbolic fuzz", seed = 20240611, count = 3000 }
--   it("...", fuzz:reporting(function() ... fuzz.seed, fuzz.count ... end))
-- A test body wrapped by fuzz:reporting prints the seed and count on stderr when it fails
-- (fuzz.replay: the variables that run the same cases again), then fails as it would have.
function M.fuzz(defaults)
  local fuzz = setmetatable({ name = defaults.name or "fuzz" }, Fuzz)
  fuzz.seed = M.integer_env("TCL_FUZZ_SEED", defaults.seed)
  fuzz.count = M.integer_env("TCL_FUZZ_COUNT", defaults.count)
  if fuzz.count ~= nil and fuzz.count < 1 then error("TCL_FUZZ_COUNT must be at least 1, got " .. fuzz.count, 0) end
  fuzz.verbose = M.env_set("TCL_FUZZ_VERBOSE")
  local seed = math.type(fuzz.seed) == "integer" and "TCL_FUZZ_SEED=" .. fuzz.seed or "TCL_FUZZ_SEED unset"
  fuzz.replay = fuzz.count and seed .. " TCL_FUZZ_COUNT=" .. fuzz.count or seed
  return fuzz
end

--- The seeds seed, seed + 1, ..., one per case (fuzzers that run each case from its own seed).
function Fuzz:seeds()
  local list = {}
  for i = 0, self.count - 1 do list[#list + 1] = self.seed + i end
  return list
end

--- `body` wrapped so that its failure first prints the seed and count on stderr.
function Fuzz:reporting(body)
  return function(...)
    local results = table.pack(pcall(body, ...))
    if not results[1] then
      io.stderr:write(string.format("\n%s failed; run the same cases with %s\n", self.name, self.replay))
      error(results[2], 0)
    end
    return table.unpack(results, 2, results.n)
  end
end

--- The values packed one after another with string.pack's format fmt.
function M.pack_all(fmt, values)
  local parts = {}
  for i, v in ipairs(values) do parts[i] = string.pack(fmt, v) end
  return table.concat(parts)
end

--- A path for a directory no one has made yet, under /tmp (the caller makes and removes it).
function M.fresh_dir_path()
  local path = os.tmpname()
  os.remove(path)
  return path .. ".cache"
end

--- fn() with row fusion off (tcl.schedule.realize_points.ROW_FUSE_BYTES = 0, put back after,
-- also when fn fails): a row statistic is stored by a kernel of its own, as tinygrad does.
function M.without_row_fusion(fn)
  local realize_points = require "tcl.schedule.realize_points"
  local saved = realize_points.ROW_FUSE_BYTES
  realize_points.ROW_FUSE_BYTES = 0
  local ok, err = pcall(fn)
  realize_points.ROW_FUSE_BYTES = saved
  assert(ok, err)
end

--- The names of the kernels tcl.schedule plans to realize the given tensors, in order (runs
-- nothing).
function M.scheduled_kernel_names(...)
  local uops = {}
  for i, t in ipairs { ... } do uops[i] = t.uop end
  local names = {}
  for i, k in ipairs(require("tcl.schedule").create(uops).kernels) do names[i] = k.name end
  return names
end

--- The product of two matrices given as nested Lua lists (rows of numbers), in doubles.
function M.naive_matmul(a, b)
  local out = {}
  for i = 1, #a do
    out[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for k = 1, #b do s = s + a[i][k] * b[k][j] end
      out[i][j] = s
    end
  end
  return out
end

--- softmax of one row (a list of numbers), in doubles.
function M.naive_softmax(row)
  local m = -math.huge
  for _, v in ipairs(row) do m = math.max(m, v) end
  local out, s = {}, 0
  for i, v in ipairs(row) do out[i] = math.exp(v - m); s = s + out[i] end
  for i = 1, #out do out[i] = out[i] / s end
  return out
end

--- Temporary files for one spec file: write(contents[, suffix]) writes a new one and returns its
-- path; remove_all() (give it to teardown) deletes them all.
function M.temp_files()
  local paths = {}
  local function write(contents, suffix)
    local path = os.tmpname() .. (suffix or "")
    paths[#paths + 1] = path
    M.write(path, contents)
    return path
  end
  local function remove_all()
    for _, path in ipairs(paths) do os.remove(path) end
  end
  return write, remove_all
end

--- The keys of t, sorted (a state dict's names).
function M.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

--- A float32 tensor of the given shape with smooth, distinct, deterministic values in [-0.9, 0.9]
-- (sin(1.37 i + seed), i from 1 in row-major order): inputs and weights for torch comparisons.
function M.wave_tensor(shape, seed)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do v[i] = math.sin(i * 1.37 + seed) * 0.9 end
  return require("tcl").Tensor(v):reshape(shape)
end

--- Weights sin(0.7 k + i) (k from 0, row-major) in t's shape: loss = (t * weights):sum() gives every
-- element its own gradient (a torch reference builds the same from torch.arange).
function M.loss_weights(t, i)
  local v = {}
  for k = 1, t:numel() do v[k] = math.sin((k - 1) * 0.7 + i) end
  return require("tcl").Tensor(v):reshape(t.shape)
end

--- LLVM's llc, found through llvm-config (an object compiler independent of tcl's renderer).
function M.llc_path()
  local pipe = io.popen("llvm-config-19 --bindir 2>/dev/null || llvm-config --bindir 2>/dev/null")
  local dir = pipe:read("l")
  pipe:close()
  return dir and dir .. "/llc"
end

--- Runs fn with EMU emulating the GPU target `name` ("CUDA", "METAL", ...: its launch limits
-- and opt capabilities, tcl.codegen.devices.gpu_targets) and restores EMU after, also when fn
-- fails (EMU's backend reads EMU_GPU when it loads, so specs switch its renderer instead).
function M.on_gpu_target(name, fn)
  local env = require "tcl.env"
  local emu = require "tcl.codegen.devices.emu"
  local saved_renderer, saved_options, saved_env = emu.renderer, emu.options, env.EMU_GPU
  local target = require("tcl.codegen.devices.gpu_targets").get(name)
  emu.renderer = { name = "emu-" .. target.name, lacks = {}, gpu = target.gpu, opt_caps = target.opt_caps }
  emu.options = "emu-gpu-" .. target.id
  local ok, err = pcall(fn)
  emu.renderer, emu.options, env.EMU_GPU = saved_renderer, saved_options, saved_env
  assert(ok, err)
end

--- The stdout of a shell command that must succeed (a failure names the command and its output).
function M.must_run(cmd)
  local status, out, err = M.run(cmd)
  assert(status == 0, "failed: " .. cmd .. "\n" .. out .. err)
  return out
end

--- The bytes of tensors (a list, or a table.pack with n), one after another, in storage order.
function M.tensors_bytes(list)
  local parts = {}
  for i = 1, list.n or #list do parts[i] = list[i]:to_bytes() end
  return table.concat(parts)
end

return M
