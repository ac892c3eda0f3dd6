-- spec/viz/browser_spec.lua — the viewer page of a real run, in a real browser: a small MLP's
-- training step recorded by tcl.viz, saved, and opened in headless Chromium
-- (spec/support/browser.lua). The page must render without script errors, draw every node of
-- the planned graph without overlaps, list the kernels that ran, show a kernel's passes and
-- LLVM IR, and the profile; a screenshot is taken.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local browser = require "spec.support.browser"
local fixture = require "spec.support.viz_fixture"
local training_step = require "spec.support.viz_mlp_step"

local hooks = browser.hooks

-- How many nodes are under root, root included.
local function reachable_count(data, root) return select(2, fixture.reach(data, root)) end

describe("the viewer page of an MLP's training step, in Chromium", function()
  local data, loss, dir, page

  setup(function()
    browser.find() -- fails first, saying how to install a browser, when there is none
    data, loss = training_step()
    dir = helper.fresh_dir_path()
    assert(os.execute("mkdir -p " .. helper.shell_quote(dir)))
    page = dir .. "/mlp.html"
    tcl.viz.save(page, data)
  end)

  teardown(function()
    if dir then os.execute("rm -rf " .. helper.shell_quote(dir)) end
  end)

  it("records the step", function()
    assert.is_true(loss > 0 and loss < 3)
    assert.is_true(#data.realizes >= 1)
    assert.is_true(#data.kernels >= 5)
  end)

  it("draws the planned graph and lists the kernels that ran, without script errors", function()
    local r = data.realizes[1]
    local dom = browser.dump_dom(page, "realize=1")
    local h = hooks(dom)
    assert.are.equal("ready", h["viz-status"])
    assert.are.equal("0", h["viz-errors"], dom:match('<pre id="viz%-errors"[^>]*>(.-)</pre>'))
    local expected = reachable_count(data, r.graph)
    assert.are.equal(expected, helper.count(dom, '<g class="node '))
    assert.are.equal(tostring(expected), h["viz-nodes"])
    assert.are.equal("0", h["viz-overlaps"])
    local listed = {}
    for name in dom:gmatch('class="kernel%-link"[^>]*>([^<]*)<') do listed[name] = true end
    for _, k in ipairs(r.kernels) do assert.is_true(listed[k.name], k.name .. " is not listed") end
  end)

  it("shows a kernel's passes, its LLVM IR and its assembly", function()
    local index, kernel
    for i, k in ipairs(data.kernels) do
      if k.opts ~= "" and not index then index, kernel = i, k end
    end
    assert.is_not_nil(index)
    local dom = browser.dump_dom(page, "kernel=" .. index .. "&pass=6")
    local h = hooks(dom)
    assert.are.equal("ready", h["viz-status"])
    assert.are.equal("0", h["viz-errors"])
    assert.is_truthy(dom:find(kernel.name, 1, true))
    assert.is_truthy(dom:find(kernel.opts, 1, true))
    for _, pass in ipairs(kernel.passes) do assert.is_truthy(dom:find(">" .. pass.name .. "<", 1, true), pass.name) end
    assert.is_truthy(dom:find("define void @", 1, true))
    assert.is_truthy(dom:find("retq", 1, true) or dom:find("ret", 1, true))
    -- the selected pass's graphs: before and after drawn
    assert.is_true(helper.count(dom, '<g class="node ') >= reachable_count(data, kernel.passes[6].before))
  end)

  it("shows the profile of the kernels that ran, and takes a screenshot", function()
    local dom = browser.dump_dom(page, "profile")
    assert.are.equal("0", hooks(dom)["viz-errors"])
    for _, run in ipairs(data.profile.runs) do assert.is_truthy(dom:find(run.name, 1, true), run.name) end
    local png = browser.screenshot(page, dir .. "/mlp.png", { hash = "realize=1" })
    local bytes = helper.read(png)
    assert.are.equal("\137PNG\r\n\26\n", bytes:sub(1, 8))
    assert.is_true(#bytes > 20000, "a screenshot of " .. #bytes .. " bytes")
  end)
end)
