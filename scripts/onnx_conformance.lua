-- scripts/onnx_conformance.lua — runs ONNX's conformance suite (or the cases whose name contains
-- one of the given patterns) through tcl.onnx in this process and prints one line per case
-- (PASS/FAIL/SKIP suite/case reason), the failures per op type and the counts:
--   tcl scripts/onnx_conformance.lua [--quiet | --verbose] [--write-expected] [pattern ...]
-- --quiet prints only the failures, --verbose their whole messages; --write-expected (with no
-- pattern) rewrites spec/io/onnx_conformance_expected.lua, the spec's record of passing cases.
-- e.g. `tcl scripts/onnx_conformance.lua test_reduce_ node/test_gather_`.
local conformance = require "tcl.onnx.conformance"

local patterns, quiet, verbose, write_expected = {}, false, false, false
for _, a in ipairs(arg or {}) do
  if a == "--quiet" then quiet = true
  elseif a == "--verbose" then verbose = true
  elseif a == "--write-expected" then write_expected = true
  elseif a:sub(1, 2) == "--" then error("onnx_conformance: unknown option " .. a, 0)
  else patterns[#patterns + 1] = a end
end
if write_expected and #patterns > 0 then error("onnx_conformance: --write-expected runs the whole suite", 0) end

local started = os.time()
local failing_by_op, unsupported = {}, {}
local counts, results = conformance.run(patterns, function(case, status, reason)
  if status == "fail" then
    for _, op in ipairs(conformance.op_types(case)) do failing_by_op[op] = (failing_by_op[op] or 0) + 1 end
    for op in ((reason or ""):match("unsupported ONNX op types: (.*)") or ""):gmatch("([%w%.]+) %(%d+ nodes?%)") do
      unsupported[op] = true
    end
  end
  if not quiet or status == "fail" then
    local text = reason or ""
    if not verbose then text = text:gsub("\n.*", "") end
    print(string.format("%s %s%s", status:upper(), case.name, text ~= "" and ("  " .. text) or ""))
  end
end)
local ops = {}
for op in pairs(failing_by_op) do ops[#ops + 1] = op end
table.sort(ops, function(a, b)
  if failing_by_op[a] ~= failing_by_op[b] then return failing_by_op[a] > failing_by_op[b] end
  return a < b
end)
if #ops > 0 then print("failing cases per op type (a case counts for each op type it uses):") end
for _, op in ipairs(ops) do
  print(string.format("  %4d %s%s", failing_by_op[op], op, unsupported[op] and " (no handler)" or ""))
end
print(string.format("%d passed, %d failed, %d out of scope (of %d) in %d s", counts.pass, counts.fail,
  counts.skip, counts.total, os.time() - started))

if write_expected then
  local names = {}
  for name, r in pairs(results) do if r.status == "pass" then names[#names + 1] = name end end
  table.sort(names)
  local lines = {
    "-- spec/io/onnx_conformance_expected.lua — the conformance cases known to pass (written by",
    "-- `tcl scripts/onnx_conformance.lua --write-expected`; spec/io/onnx_conformance_spec.lua fails",
    "-- when fewer than min_passed pass or when one of these fails). Update it when cases start passing.",
    "return {",
    string.format("  min_passed = %d,", #names),
    "  passing = {",
  }
  for _, name in ipairs(names) do lines[#lines + 1] = string.format("    %q,", name) end
  lines[#lines + 1] = "  },"
  lines[#lines + 1] = "}"
  local path = (os.getenv("TCL_SOURCE_DIR") or ".") .. "/spec/io/onnx_conformance_expected.lua"
  local f = assert(io.open(path, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  print("wrote " .. path)
end
