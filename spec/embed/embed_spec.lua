-- spec/embed/embed_spec.lua — the embedding API (include/tclc.h, src/api/): the example host runs
-- and reports a call's results and a Lua error; the API check program passes every check of
-- the error paths; the public header stands alone; the library defines what it declares.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local examples = helper.build_dir .. "/examples/embed"
local header = helper.root .. "/include/tclc.h"

local read = helper.read

local function have(program)
  return helper.run("command -v " .. program) == 0
end

-- Runs a check program of examples/embed (one "ok"/"FAILED" line per check, then
-- "<name>: N passed, M failed"): no failure, at least `minimum` checks, exit status 0.
local function passes_every_check(name, timeout, minimum)
  local status, out, err = helper.run("timeout " .. timeout .. " " .. q(examples .. "/tcl_embed_" .. name))
  assert.are.equal("", err)
  local failures = {}
  for line in out:gmatch("[^\n]+") do
    if line:match("^FAILED") then failures[#failures + 1] = line end
  end
  assert.are.same({}, failures)
  local passed, failed = out:match(name .. ": (%d+) passed, (%d+) failed\n$")
  assert.is_not_nil(passed, "no summary line; output:\n" .. out)
  assert.are.equal("0", failed)
  assert.is_true(tonumber(passed) >= minimum)
  assert.are.equal(0, status)
end

describe("embedding", function()
  describe("the example host (examples/embed/host.c)", function()
    local status, out, err

    setup(function()
      status, out, err = helper.run("timeout 60 " .. q(examples .. "/tcl_embed_host"))
    end)

    it("exits 0 after checking its own results", function()
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.matches("host: all as expected\n$", out)
    end)

    it("prints the results of a call with numbers and a string", function()
      assert.matches("scale result: 9\n", out, 1, true)
      assert.matches("scale text: area = 9.0\n", out, 1, true)
      assert.matches("scale dtype: float32\n", out, 1, true)
    end)

    it("prints the Lua error reported back, with a traceback", function()
      assert.matches("refuse failed as expected: host:9: refused: no tensors today\n" ..
        "stack traceback:\n", out, 1, true)
      assert.matches("in function 'refuse'", out, 1, true)
    end)
  end)

  describe("the API check program (examples/embed/api_check.c)", function()
    it("passes every check", function()
      passes_every_check("api_check", 120, 80)
    end)
  end)

  describe("the tensor check program (examples/embed/tensor_check.c)", function()
    it("passes every check of tensors, handles and their errors", function()
      passes_every_check("tensor_check", 300, 65)
    end)
  end)

  describe("the inference host (examples/embed/inference.c)", function()
    local status, out, err

    setup(function()
      status, out, err = helper.run("timeout 300 " .. q(examples .. "/tcl_embed_inference") .. " 20 32")
    end)

    it("runs every batch and matches the model without tcl.jit bit for bit", function()
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.matches("inference: 20 batches of 32 images (18 timed", out, 1, true)
      assert.matches("inference: last batch matches the model without tcl.jit\n", out, 1, true)
    end)

    it("prints its throughput and a prediction for every image", function()
      local ms, rate = out:match("inference: ([%d.]+) ms per batch, (%d+) images/s\n")
      assert.is_not_nil(ms, out)
      assert.is_true(tonumber(ms) > 0 and tonumber(rate) > 0)
      local counts = out:match("predicted classes:([%d ]+)\n")
      local total, classes = 0, 0
      for n in counts:gmatch("%d+") do
        total, classes = total + tonumber(n), classes + 1
      end
      assert.are.equal(10, classes)
      assert.are.equal(20 * 32, total)
    end)

    it("refuses a bad command line with its usage", function()
      local st, _, e = helper.run(q(examples .. "/tcl_embed_inference") .. " 0")
      assert.are.equal(2, st)
      assert.matches("usage: ", e, 1, true)
    end)
  end)

  describe("the public header", function()
    it("uses only tclc_ / TCLC_ names for what it declares", function()
      local text = read(header)
      for name in text:gmatch("\nTCLC_API%s+[%w_%s%*]-([%w_]+)%s*%(") do
        assert.matches("^tclc_", name)
      end
      for name in text:gmatch("#define%s+([%w_]+)") do
        assert.matches("^TCLC_", name)
      end
      for name in text:gmatch("typedef%s+struct%s+([%w_]+)") do -- struct tags
        assert.matches("^tclc_", name)
      end
      for name in text:gmatch("typedef%s+struct%s+[%w_]+%s+([%w_]+)%s*;") do -- opaque types
        assert.matches("^tclc_", name)
      end
      for name in text:gmatch("\n}%s*([%w_]+)%s*;") do -- names after a struct body
        assert.matches("^tclc_", name)
      end
    end)

    it("compiles on its own as strict C11", function()
      if not have("cc") then pending("no C compiler") return end
      local status, _, err = helper.run("cc -std=c11 -Wall -Wextra -Wpedantic -Werror " ..
        "-fsyntax-only -x c " .. q(header))
      assert.are.equal("", err)
      assert.are.equal(0, status)
    end)

    it("declares only functions the shared library defines", function()
      if not have("nm") then pending("no nm") return end
      local status, symbols = helper.run("nm -D --defined-only " .. q(helper.build_dir .. "/libtclc.so"))
      assert.are.equal(0, status)
      local defined = {}
      for name in symbols:gmatch("%s[TW]%s+([%w_]+)") do defined[name] = true end
      local declared = 0
      for name in read(header):gmatch("\nTCLC_API%s+[%w_%s%*]-([%w_]+)%s*%(") do
        declared = declared + 1
        assert.is_true(defined[name] == true, name .. " is declared but not in libtclc.so")
      end
      assert.is_true(declared >= 10)
    end)
  end)
end)
