-- spec/export/export_runtime_spec.lua — the exported runtime as real C (src/export_runtime/): its unit
-- test (tests/c/export_runtime_test.c, built with the project, warnings as errors: the JSON
-- reader on valid and malformed headers, the safetensors reader on good and broken files, the
-- worker pool over many runs, the argument checks, two models in one program), that its files
-- refuse to be compiled alone, and which of them an export copies (tcl.export.runtime_files).
-- spec/export/export_spec.lua builds and runs real exports over the same files.
local helper = require "spec.support.helper"
local runtime_files = require "tcl.export.runtime_files"
local q = helper.shell_quote

local RUNTIME_DIR = helper.root .. "/src/export_runtime"

describe("the exported runtime's C files", function()
  it("pass their unit test, built with the project (warnings as errors)", function()
    local test = helper.build_dir .. "/tests/export_runtime_test"
    assert.is_true(helper.exists(test), "missing " .. test)
    local _, dir = helper.run("mktemp -d")
    dir = dir:gsub("%s+$", "")
    local status, out, err = helper.run(q(test) .. " " .. q(dir))
    helper.run("rm -rf " .. q(dir))
    assert.are.equal(0, status, out .. err)
    local passed, failed = out:match("export_runtime_test: (%d+) passed, (%d+) failed\n$")
    assert.is_not_nil(passed, "no summary line in:\n" .. out)
    assert.are.equal("0", failed)
    assert.is_true(tonumber(passed) >= 700, "only " .. passed .. " checks ran")
    assert.are.equal("", err)
  end)

  it("are found in the source tree, and refuse to be compiled without a model's tables", function()
    local function real(dir) return (select(2, helper.run("cd " .. q(dir) .. " && pwd -P"))) end
    assert.are.equal(real(RUNTIME_DIR), real(runtime_files.dir()))
    for _, name in ipairs { "tcl_runtime.c", "tcl_batches.c", "tcl_variables.c", "tcl_weights_embedded.c",
      "tcl_safetensors.c" } do
      local status, _, err = helper.run("cc -std=c11 -fsyntax-only " .. q(RUNTIME_DIR .. "/" .. name))
      assert.are_not.equal(0, status)
      assert.matches(name .. " is included by an exported model's NAME.c", err, 1, true)
    end
  end)

  it("are copied by an export as its weights, batch sizes and variables need, and every file is one of them", function()
    assert.are.same({ "tcl_runtime.c", "tcl_spin.h", "tcl_weights_embedded.c" },
      runtime_files.names { weights_file = "embed" })
    assert.are.same({ "tcl_runtime.c", "tcl_spin.h", "tcl_weights_embedded.c" }, runtime_files.names {})
    assert.are.same({ "tcl_runtime.c", "tcl_spin.h", "tcl_safetensors.c", "tcl_json.c", "tcl_batches.c" },
      runtime_files.names { weights_file = "safetensors", batch_sizes = { 1, 2 } })
    assert.are.same({ "tcl_runtime.c", "tcl_safetensors.c" }, runtime_files.includes { weights_file = "safetensors" })
    assert.are.same({ "tcl_runtime.c", "tcl_weights_embedded.c", "tcl_variables.c" },
      runtime_files.includes { weights_file = "embed", variables = { { name = "T", min = 1, max = 8 } } })
    local _, listing = helper.run("ls " .. q(RUNTIME_DIR))
    local copied = {}
    for _, m in ipairs { { weights_file = "embed", batch_sizes = { 1 } }, { weights_file = "safetensors" },
      { variables = { { name = "T", min = 1, max = 8 } } } } do
      for _, name in ipairs(runtime_files.names(m)) do copied[name] = true end
    end
    for name in listing:gmatch("[^\n]+") do assert.is_true(copied[name], name .. " is never copied") end
    assert.are.equal(helper.read(RUNTIME_DIR .. "/tcl_json.c"), runtime_files.read("tcl_json.c"))
  end)
end)
