-- spec/support/cuda_tools.lua — the CUDA toolkit's tools as the GPU specs use them, where this
-- machine has them: ptxas's path, and the check of a kernel that uses Hopper's warpgroup tensor
-- cores (NVRTC for sm_90a, then ptxas, which must not serialize the wgmmas).
local nvrtc = require "tcl.nvrtc"
local helper = require "spec.support.helper"

local M = {}

--- Whether NVRTC loads, and why not.
M.HAVE_NVRTC, M.NVRTC_WHY = nvrtc.available()

--- ptxas from TCL_CUDA_PATH, CUDA_PATH, NVRTC's toolkit or /usr/local/cuda; nil when none is.
function M.find_ptxas()
  local candidates = {}
  for _, var in ipairs { "TCL_CUDA_PATH", "CUDA_PATH" } do
    local dir = os.getenv(var)
    if dir and dir ~= "" then candidates[#candidates + 1] = dir .. "/bin/ptxas" end
  end
  if M.HAVE_NVRTC then candidates[#candidates + 1] = nvrtc.path():gsub("/[^/]*$", "") .. "/../bin/ptxas" end
  candidates[#candidates + 1] = "/usr/local/cuda/bin/ptxas"
  for _, path in ipairs(candidates) do
    if helper.exists(path) then return path end
  end
  return nil
end

--- NVRTC's PTX for sm_90a of src (the entry `name`), and ptxas -arch=sm_90a -v's output (nil
-- without ptxas) after checking that it accepts the PTX and neither injects waits nor
-- serializes the wgmmas: what it says when the source breaks the wgmma pipeline is "(C7511)
-- Potential Performance Loss: wgmma.mma_async instructions are serialized due to ...",
-- "(C7517) warpgroup.wait is injected ... to allow use of registers defined by GMMA", "(C7519)
-- warpgroup.arrive is injected". One injection is accepted: a wait on the exit of a loop whose
-- last iteration waits for every group itself ("deferred" products, which the other iterations
-- leave in flight), which ptxas, not correlating that wait's condition with the loop's, reports
-- at the loop's backward branch (the wait lands nothing there). Errors at the caller's caller
-- (level 3). The caller checks M.HAVE_NVRTC first.
function M.compile_sm90a(src, name)
  local ok, ptx = pcall(nvrtc.compile_ptx, src, { arch = "sm_90a", name = name })
  if not ok then error(tostring(ptx) .. "\n" .. src, 3) end
  local ptxas = M.find_ptxas()
  if not ptxas then return ptx end
  local file = os.tmpname()
  helper.write(file, ptx)
  local status, out, err = helper.run(helper.shell_quote(ptxas) .. " -arch=sm_90a -v -o /dev/null " ..
    helper.shell_quote(file))
  os.remove(file)
  local said = out .. err
  if status ~= 0 then error(string.format("ptxas -arch=sm_90a failed for %s:\n%s", name, said), 3) end
  local lines = {}
  for line in (ptx .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  -- whether PTX line n is a loop's backward branch after the last iteration's own wait
  local function loop_exit(n)
    local label = (lines[n] or ""):match("^%s*@%%p%d+ bra%s+(%$L__BB[%d_]+);")
    if not label then return false end
    for k = n - 1, 1, -1 do
      if lines[k] == label .. ":" then return false end
      if lines[k]:find("wgmma.wait_group.sync.aligned 0;", 1, true) then
        for j = k - 1, 1, -1 do
          if lines[j] == label .. ":" then return true end
        end
        return false
      end
    end
    return false
  end
  local rest = said:gsub("[^\n]*%(C7517%) warpgroup%.wait is injected in around line (%d+)[^\n]*", function(n)
    if loop_exit(tonumber(n)) then return "" end
  end)
  for _, sign in ipairs { "wgmma", "GMMA", "warpgroup", "Performance Loss", "serialized" } do
    if rest:find(sign, 1, true) then error(string.format("ptxas serializes the wgmmas of %s:\n%s", name, said), 3) end
  end
  return ptx, said
end

return M
