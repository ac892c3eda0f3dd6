-- check_gpu_sources.lua — compiles every kernel source that EMU's GPU mode wrote with
-- TCL_RENDER_DUMP (one file per kernel of a spec run), in batches: CUDA C with NVRTC for sm_75
-- (Turing: what runs where tensor cores are not offered), sm_80 and sm_90 and then ptxas on the
-- PTX (when the toolkit has it); Metal Shading Language with
-- clang++ against tcl's stand-in header (spec.support.metal_stub). scripts/test.sh runs it after
-- the Tensor API's specs ran on EMU's GPU mode, so every kernel of that suite is compiled for the
-- real targets. Needs tcl's Lua files and C module on the Lua paths (test.sh sets them).
--
--   lua5.4 scripts/check_gpu_sources.lua cuda|metal DIR
--
-- Prints one line per batch and ends with "check_gpu_sources: N passed, M failed[, K skipped]"
-- (a batch per check: NVRTC per arch, ptxas per arch, clang++). A missing tool skips its
-- checks with the reason; the exit status is 1 when a check failed.
local dialect, dir = arg[1], arg[2]
if (dialect ~= "cuda" and dialect ~= "metal") or not dir then
  io.stderr:write("usage: lua5.4 scripts/check_gpu_sources.lua cuda|metal DIR\n")
  os.exit(2)
end

local BATCH = 150 -- kernels per translation unit: NVRTC's start-up costs more than a kernel

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1", "r")
  local out = p:read("a")
  local ok, _, code = p:close()
  return ok and 0 or (code or 1), out
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local ext = dialect == "cuda" and "%.cu$" or "%.metal$"
local status, listing = run("ls -1 " .. shell_quote(dir))
if status ~= 0 then
  io.stderr:write("check_gpu_sources: cannot list ", dir, "\n")
  print("check_gpu_sources: 0 passed, 1 failed")
  os.exit(1)
end
local files = {}
for name in listing:gmatch("[^\n]+") do
  if name:match(ext) then files[#files + 1] = dir .. "/" .. name end
end
table.sort(files)

local passed, failed, skipped = 0, 0, 0
local function report(ok, what, detail)
  if ok == nil then
    skipped = skipped + 1
    print("skip - " .. what .. ": " .. detail)
  elseif ok then
    passed = passed + 1
    print("ok - " .. what)
  else
    failed = failed + 1
    print("FAILED - " .. what .. "\n" .. detail)
  end
end

if #files == 0 then
  report(false, "kernel sources", "no " .. dialect .. " sources in " .. dir .. " (did the GPU-mode specs run?)")
end

local batches = {}
for i = 1, #files, BATCH do
  local parts = {}
  for j = i, math.min(i + BATCH - 1, #files) do parts[#parts + 1] = read(files[j]) end
  batches[#batches + 1] = { first = i, last = math.min(i + BATCH - 1, #files), source = table.concat(parts, "\n") }
end

local tmp = os.tmpname()
os.remove(tmp)
assert(os.execute("mkdir -p " .. shell_quote(tmp)))

if dialect == "cuda" then
  local nvrtc = require "tcl.nvrtc"
  local have, why = nvrtc.available()
  local cuda_bin = (os.getenv("CUDA_PATH") or "/usr/local/cuda") .. "/bin/ptxas"
  local have_ptxas = run("test -x " .. shell_quote(cuda_bin)) == 0
  for b, batch in ipairs(batches) do
    local what = string.format("kernels %d-%d", batch.first, batch.last)
    for _, arch in ipairs { "sm_75", "sm_80", "sm_90" } do
      if not have then
        report(nil, what .. " NVRTC " .. arch, tostring(why))
      else
        local ok, ptx = pcall(nvrtc.compile_ptx, batch.source, { arch = arch, name = "batch " .. b })
        report(ok, what .. " NVRTC " .. arch, ok and "" or tostring(ptx))
        if ok and have_ptxas then
          local path = string.format("%s/batch%d_%s.ptx", tmp, b, arch)
          local f = assert(io.open(path, "wb"))
          f:write(ptx)
          f:close()
          local st, out = run(string.format("%s -arch=%s -o /dev/null %s", shell_quote(cuda_bin), arch,
            shell_quote(path)))
          report(st == 0, what .. " ptxas " .. arch, out)
        elseif ok then
          report(nil, what .. " ptxas " .. arch, cuda_bin .. " is not there")
        end
      end
    end
  end
else
  -- the stand-in header is a tool of the specs (spec/support), found from the tree's root
  local root = arg[0]:match("^(.*)/scripts/[^/]*$") or "."
  package.path = root .. "/?.lua;" .. package.path
  local stub = require "spec.support.metal_stub"
  for _, batch in ipairs(batches) do
    local what = string.format("kernels %d-%d clang++ (Metal stand-in header)", batch.first, batch.last)
    local ok, messages = stub.check(batch.source)
    if ok == nil then report(nil, what, tostring(messages)) else report(ok, what, messages or "") end
  end
end
os.execute("rm -rf " .. shell_quote(tmp))

print(string.format("check_gpu_sources: %d %s kernels in %d batches", #files, dialect, #batches))
local summary = string.format("check_gpu_sources: %d passed, %d failed", passed, failed)
if skipped > 0 then summary = summary .. string.format(", %d skipped", skipped) end
print(summary)
os.exit(failed == 0 and 0 or 1)
