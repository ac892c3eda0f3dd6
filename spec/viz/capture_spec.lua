-- spec/viz/capture_spec.lua — what tcl.viz records (lua/tcl/viz/capture.lua): the planned graph,
-- the kernels in run order with the nodes each computes, the fusion decisions and their
-- reasons, every pipeline pass of each kernel chained before to after with the rules that
-- fired, the opts and BEAM's candidates, the linear program, code and assembly, the profile;
-- repeated realizes counted once; VIZ=1 through the tcl program; errors.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local pipeline = require "tcl.patterns.pipeline"
local capture = require "tcl.viz.capture"
local fixture = require "spec.support.viz_fixture"
local Tensor = tcl.Tensor

local function model()
  local x = Tensor.arange(32):reshape(4, 8):float() / 10
  local w = Tensor.arange(24):reshape(8, 3):float() / 7
  -- a reduction over the leading axis, then broadcast: stored (no row fusion over columns)
  local col = x:sum(1)
  local y = (x / col):matmul(w):relu()
  return y:tolist()
end


describe("tcl.viz.record", function()
  local data, result
  setup(function() data, result = tcl.viz.record(model) end)

  it("returns fn's results unchanged", function()
    assert.are.equal(4, #result)
    assert.are.equal(3, #result[1])
  end)

  it("lists nodes with sources first", function()
    assert.is_true(#data.nodes > 20)
    for id, n in ipairs(data.nodes) do
      assert.is_string(n.op)
      for _, s in ipairs(n.src) do assert.is_true(s < id, "a source after its user") end
    end
  end)

  it("records the realize: the planned graph, the kernels in run order, what each computes", function()
    assert.are.equal(1, #data.realizes)
    local r = data.realizes[1]
    assert.is_false(r.plan_reused)
    assert.are.equal("SINK", data.nodes[r.graph].op)
    local in_graph = fixture.reach(data, r.graph)
    assert.is_true(#r.kernels >= 2)
    local ran = {}
    for _, run in ipairs(data.profile.runs) do ran[#ran + 1] = run.name end
    for j, k in ipairs(r.kernels) do
      assert.are.equal(ran[j], k.name) -- the order the kernels ran
      assert.are.equal(data.kernels[k.kernel].name, k.name)
      assert.is_true(in_graph[k.root])
      local has_root = false
      for _, id in ipairs(k.computes) do
        assert.is_true(in_graph[id])
        assert.are_not.equal("BUFFER", data.nodes[id].op)
        if id == k.root then has_root = true end
      end
      assert.is_true(has_root)
      assert.matches("^buffer %d+ %(float32 x %d+, CPU%)$", k.writes)
      assert.is_string(k.why)
    end
  end)

  it("gives the reasons of the fusion decisions", function()
    local r = data.realizes[1]
    local found = {}
    for _, d in ipairs(r.decisions) do
      found[#found + 1] = d.why
      if data.nodes[d.node].op == "REDUCE_AXIS" and data.nodes[d.node].shape == "(1, 8)" then
        assert.is_true(d.stored)
        assert.are.equal("a reduction whose result is broadcast is never recomputed", d.why)
      end
    end
    assert.is_truthy(table.concat(found, "\n"):find("an output of the realize", 1, true))
    assert.is_truthy(table.concat(found, "\n"):find("a reduction whose result is broadcast", 1, true))
  end)

  it("records every pass of the pipeline for each kernel, chained from the AST", function()
    for _, k in ipairs(data.kernels) do
      assert.is_nil(k.error)
      assert.are.equal(#pipeline.passes, #k.passes)
      assert.are.equal(k.ast, k.passes[1].before)
      for p, pass in ipairs(k.passes) do
        assert.are.equal(pipeline.passes[p].name, pass.name)
        if p > 1 then assert.are.equal(k.passes[p - 1].after, pass.before) end
        if not pass.ran then assert.are.equal(pass.before, pass.after) end
        local sum = 0
        for _, rule in ipairs(pass.rules) do
          assert.matches("%.lua:%d+$", rule.rule)
          sum = sum + rule.count
        end
        assert.are.equal(pass.matches, sum)
      end
    end
  end)

  it("shows the opts, the linear program, the LLVM IR and the assembly", function()
    local any_opts, any_matches = false, false
    for _, k in ipairs(data.kernels) do
      assert.are.equal("CPU", k.device)
      assert.are.equal("heuristic default", k.optimizer)
      if k.opts ~= "" then any_opts = true end
      for _, pass in ipairs(k.passes) do any_matches = any_matches or pass.matches > 0 end
      assert.is_truthy(k.linear:find("STORE", 1, true))
      assert.are.equal("llvm", k.code_language)
      assert.is_truthy(k.code:find("define void @", 1, true))
      assert.is_string(k.assembly)
      assert.is_true(k.ops > 0 and k.bytes > 0)
    end
    assert.is_true(any_opts)
    assert.is_true(any_matches)
  end)

  it("profiles the kernels it ran", function()
    local p = data.profile
    assert.are.equal(#data.realizes[1].kernels, #p.runs)
    local total = 0
    for _, run in ipairs(p.runs) do
      assert.are.equal(data.kernels[run.kernel].name, run.name)
      assert.is_true(run.seconds >= 0)
      total = total + run.seconds
    end
    assert.is_true(math.abs(total - p.total_seconds) < 1e-12)
  end)
end)

describe("tcl.viz capture", function()
  it("counts a realize that runs the kernels of an earlier one, without recording it again", function()
    local inputs = {}
    for i = 1, 3 do inputs[i] = Tensor.full({16}, i):realize() end
    local data = tcl.viz.record(function()
      for i = 1, 3 do (inputs[i] * 2 + 1):tolist() end
    end)
    assert.are.equal(1, #data.realizes)
    assert.are.equal(2, data.realizes[1].repeats)
    assert.are.equal(3, #data.profile.runs)
  end)

  it("keeps no buffer alive: realizes are recorded as data when they run", function()
    local buffers = require "tcl.schedule.buffers"
    collectgarbage()
    buffers.collect()
    local before = buffers.stats().bytes
    local c = capture.start()
    for i = 1, 20 do -- twenty different graphs, each reading a buffer of 1 MB
      local input = Tensor.full({ 1 << 18 }, i):realize()
      local t = (input * i):sum()
      t:realize()
    end
    c:stop()
    collectgarbage()
    collectgarbage()
    buffers.collect()
    assert.are.equal(40, #c.realizes) -- each fill and each sum
    assert.is_true(buffers.stats().bytes - before < 4 << 20, "held: " .. buffers.stats().bytes - before)
    assert.are.equal(40, #c:data({ code = false }).realizes)
  end)

  it("records what BEAM tried", function()
    local x = Tensor.arange(64):reshape(8, 8):float()
    local data = tcl.context { BEAM = 2, IGNORE_BEAM_CACHE = true }(function()
      return tcl.viz.record(function() return (x:matmul(x) + 1):tolist() end)
    end)
    local searched
    for _, k in ipairs(data.kernels) do
      if k.beam then searched = k end
    end
    assert.is_not_nil(searched)
    assert.are.equal("BEAM 2", searched.optimizer)
    assert.are.equal(2, searched.beam.width)
    assert.is_false(searched.beam.cached)
    local timed = 0
    for _, c in ipairs(searched.beam.candidates) do
      assert.is_string(c.opts)
      assert.is_true(c.round >= 0)
      if c.seconds then timed = timed + 1 end
    end
    assert.is_true(timed >= 1)
    assert.is_nil(searched.error)
  end)

  it("shows kernels compiled before the capture started", function()
    local function f() return (Tensor.arange(10):float():exp() * 3):tolist() end
    f() -- compiled now: the capture finds it in the kernel cache
    local data = tcl.viz.record(f)
    assert.are.equal(#pipeline.passes, #data.kernels[1].passes)
    assert.is_nil(data.kernels[1].error)
    assert.is_truthy(data.kernels[1].code:find("define void", 1, true))
  end)

  it("shows a GPU kernel's source in the target's language (EMU in its GPU mode)", function()
    helper.on_gpu_target("CUDA", function()
      local x = Tensor.arange(256, { device = "EMU" }):float()
      local data = tcl.viz.record(function() return (x * 2):sum():item() end)
      local passes_ran = {}
      for _, k in ipairs(data.kernels) do
        assert.are.equal("EMU", k.device)
        assert.are.equal("cuda", k.code_language)
        assert.is_truthy(k.code:find("__global__", 1, true), k.code)
        for _, pass in ipairs(k.passes) do
          if pass.ran then passes_ran[pass.name] = true end
        end
      end
      assert.is_true(passes_ran["gpu dims"])
    end)
  end)

  it("shows a Metal kernel's source (EMU in its Metal mode)", function()
    helper.on_gpu_target("METAL", function()
      local x = Tensor.arange(64, { device = "EMU" }):float()
      local data = tcl.viz.record(function() return (x + 1):tolist() end)
      assert.are.equal("metal", data.kernels[1].code_language)
      assert.is_truthy(data.kernels[1].code:find("kernel void", 1, true), data.kernels[1].code)
    end)
  end)

  it("leaves rule tracing as it was", function()
    require("tcl.pattern").clear_traces()
    tcl.viz.record(function() return (Tensor.arange(6):float() + 2):tolist() end)
    assert.are.equal(0, #require("tcl.pattern").traces())
    assert.is_false(tcl.env.REWRITE_TRACE)
  end)

  it("stops recording when fn fails, and raises its error", function()
    helper.fails_with("boom", tcl.viz.record, function() error("boom", 0) end)
    assert.is_nil(capture.active())
  end)

  it("refuses what is not a function, nested captures and bad save arguments", function()
    helper.fails_with("viz.record: expected a function, got number", tcl.viz.record, 3)
    helper.fails_with("viz: expected a function, got string", tcl.viz, "model.lua")
    helper.fails_with("viz: a capture is already recording", tcl.viz.record, function() tcl.viz.record(print) end)
    assert.is_nil(capture.active())
    helper.fails_with("viz.save: path must be a file name, got number", tcl.viz.save, 1, {})
    helper.fails_with("viz.save: data must be what tcl.viz.record returns, got table", tcl.viz.save, "x.html", {})
  end)
end)

describe("VIZ=1", function()
  it("records the tcl program's run and writes the page when it closes", function()
    local script = os.tmpname() .. ".lua"
    local page = os.tmpname() .. ".html"
    helper.write(script, "print((tcl.Tensor.arange(8):float() * 2):sum():item())\n")
    local status, out, err = helper.run(string.format("VIZ=1 TCL_VIZ_FILE=%s %s %s", helper.shell_quote(page),
      helper.shell_quote(helper.tcl_bin), helper.shell_quote(script)))
    os.remove(script)
    assert.are.equal(0, status, err)
    assert.are.equal("56.0\n", out)
    assert.is_truthy(err:find("VIZ: wrote " .. page, 1, true), err)
    local html = helper.read(page)
    os.remove(page)
    assert.is_truthy(html:find('id="tcl-viz-data"', 1, true))
    assert.is_truthy(html:find('"name":"r_', 1, true))
  end)
end)
