-- scripts/onnx_conformance.lua — runs ONNX's conformance suite (or the cases whose name contains
-- one of the given patterns) through tcl.onnx and prints one line per case and the counts:
--   tcl scripts/onnx_conformance.lua [--quiet] [pattern ...]
-- e.g. `tcl scripts/onnx_conformance.lua test_reduce_ node/test_gather_`.
local conformance = require "tcl.onnx.conformance"

local patterns, quiet = {}, false
for _, a in ipairs(arg or {}) do
  if a == "--quiet" then quiet = true else patterns[#patterns + 1] = a end
end

local started = os.clock()
local failures_by_reason = {}
local counts = conformance.run(patterns, function(case, status, reason)
  if status == "fail" then
    local key = (reason or ""):match("unsupported ONNX op types: (.*)") or "other"
    failures_by_reason[key] = (failures_by_reason[key] or 0) + 1
  end
  if not quiet or status == "fail" then
    print(string.format("%s %s%s", status:upper(), case.name, reason and ("  " .. reason:gsub("\n.*", "")) or ""))
  end
end)
local keys = {}
for k in pairs(failures_by_reason) do keys[#keys + 1] = k end
table.sort(keys, function(a, b) return failures_by_reason[a] > failures_by_reason[b] end)
for _, k in ipairs(keys) do print(string.format("  %4d failed: %s", failures_by_reason[k], k)) end
print(string.format("%d passed, %d failed, %d out of scope (of %d) in %.1f s CPU", counts.pass, counts.fail,
  counts.skip, counts.total, os.clock() - started))
