-- spec/viz/page_spec.lua — the viewer page (tcl.viz.page): the HTML is one self-contained file
-- (viewer script and style inline, nothing fetched, data that cannot end its element), its
-- errors name the problem; and in a real browser (headless Chromium, spec/support/browser.lua)
-- a synthetic data table (spec/support/viz_fixture.lua: ~400 tensor-graph nodes with shared
-- subtrees, 2 realizes, 3 kernels with every pipeline pass, BEAM candidates, a profile with
-- peaks) renders without script errors: the graph's node count, kernel names, boxes that do
-- not overlap (checked from the drawn coordinates), search and collapse driven by the URL
-- hash, the kernel view's passes, rules, BEAM table and code, the profile's roofline figures,
-- and a screenshot.
local helper = require "spec.support.helper"
local browser = require "spec.support.browser"
local fixture = require "spec.support.viz_fixture"
local page = require "tcl.viz.page"
local json = require "tcl.api.json"
local pipeline = require "tcl.patterns.pipeline"

local function pass_names()
  local names = {}
  for i, entry in ipairs(pipeline.passes) do names[i] = entry.name end
  return names
end

local function fixture_data()
  return fixture.data { layers = 16, width = 6, pass_names = pass_names() }
end

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error")
  return err
end

-- the text of the data element, as the page holds it
local function data_element(html)
  return html:match('<script type="application/json" id="tcl%-viz%-data">(.-)</script>')
end

describe("tcl.viz.page.html", function()
  local data = fixture_data()
  local html = page.html(data)

  it("is one self-contained file: the viewer's script and style inline, no URL, nothing loaded", function()
    assert.is_nil(html:find("https?://"), "a URL in the page")
    assert.is_nil(html:lower():find("<script[^>]*%ssrc%s*="), "a <script src=...>")
    assert.is_nil(html:lower():find("<link", 1, true), "a <link>")
    assert.is_nil(html:lower():find("<img", 1, true), "an <img>")
    local dir = helper.root .. "/lua/tcl/viz/"
    assert.is_truthy(html:find(helper.read(dir .. "viewer.js"), 1, true), "viewer.js is not inlined")
    assert.is_truthy(html:find(helper.read(dir .. "viewer.css"), 1, true), "viewer.css is not inlined")
    assert.are.equal(1, helper.count(html, '<script type="application/json" id="tcl-viz-data">'))
    assert.matches("^<!DOCTYPE html>", html)
  end)

  it("holds the data as JSON that decodes to the same table", function()
    local back = json.decode(data_element(html))
    assert.are.equal(#data.nodes, #back.nodes)
    assert.are.equal(data.nodes[5].op, back.nodes[5].op)
    assert.are.equal(data.realizes[1].graph, back.realizes[1].graph)
    assert.are.equal(data.kernels[1].linear, back.kernels[1].linear)
    assert.are.equal(0.01, back.profile.total_seconds)
  end)

  it("escapes '</' and '<!--' in the data, so no string can end its element", function()
    local evil = "</script><script>alert(1)</script><!--"
    local d = { version = 1, title = "t", nodes = { { op = "SINK", dtype = "void", arg = evil, src = {} } },
      realizes = {}, kernels = {} }
    local text = page.html(d)
    -- the data element's own end and the viewer's: nothing else ends a script element
    assert.are.equal(2, helper.count(text:lower(), "</script"))
    assert.is_nil(data_element(text):find("<!--", 1, true))
    assert.are.equal(evil, json.decode(data_element(text)).nodes[1].arg)
  end)

  it("escapes the title in the head", function()
    local text = page.html { version = 1, title = '<b>"x" & y</b>', nodes = {}, realizes = {}, kernels = {} }
    assert.truthy(text:find("<title>tcl viz — &lt;b&gt;&quot;x&quot; &amp; y&lt;/b&gt;</title>", 1, true))
  end)

  it("rejects what is not viewer data, naming the problem", function()
    assert.are.equal("viz.page: data must be a table, got nil", error_of(page.html, nil))
    assert.are.equal("viz.page: data.version must be 1, got 2",
      error_of(page.html, { version = 2, nodes = {}, realizes = {}, kernels = {} }))
    assert.are.equal("viz.page: data.realizes must be a table, got number",
      error_of(page.html, { version = 1, nodes = {}, realizes = 5, kernels = {} }))
    assert.are.equal("viz.page: data.title must be a string, got number",
      error_of(page.html, { version = 1, nodes = {}, realizes = {}, kernels = {}, title = 3 }))
    assert.are.equal("viz.page: the data cannot be written as JSON: json.encode: cannot encode a function",
      error_of(page.html, { version = 1, nodes = { { op = print } }, realizes = {}, kernels = {} }))
  end)
end)

describe("tcl.viz.page.write", function()
  local tmp
  setup(function()
    local _, out = helper.run("mktemp -d")
    tmp = out:gsub("%s+$", "")
  end)
  teardown(function() helper.run("rm -rf " .. helper.shell_quote(tmp)) end)

  it("writes the page and returns its path", function()
    local data = fixture.data { layers = 2, pass_names = { "add loads" } }
    local path = tmp .. "/small.html"
    assert.are.equal(path, page.write(path, data))
    assert.are.equal(page.html(data), helper.read(path))
  end)

  it("names the path it cannot write, and rejects a path that is not a string", function()
    local data = { version = 1, nodes = {}, realizes = {}, kernels = {} }
    assert.are.equal("viz.page: cannot write '" .. tmp .. "/no/such/dir.html': No such file or directory",
      error_of(page.write, tmp .. "/no/such/dir.html", data))
    assert.are.equal("viz.page: the path must be a non-empty string, got number", error_of(page.write, 42, data))
  end)
end)

describe("spec.support.browser", function()
  it("says to run scripts/setup.sh when no browser is found", function()
    local saved = browser.CANDIDATES
    browser.CANDIDATES = { "tcl-no-such-browser" }
    local ok, err = pcall(browser.find)
    browser.CANDIDATES = saved
    assert.is_false(ok)
    assert.are.equal("no headless browser found (tried tcl-no-such-browser): run scripts/setup.sh, which installs "
      .. "Debian's chromium", err)
  end)
end)

local hooks = browser.hooks

local function count_nodes(dom) return helper.count(dom, '<g class="node ') end

-- the ids of the graph nodes whose class list holds cls (e.g. "match", "lit")
local function nodes_with_class(dom, cls)
  local ids = {}
  for classes, id in dom:gmatch('<g class="node ([^"]*)" data%-id="(%d+)"') do
    if (" " .. classes .. " "):find(" " .. cls .. " ", 1, true) then ids[#ids + 1] = tonumber(id) end
  end
  return ids
end

-- the drawn boxes of graph nodes: { x0, y0, x1, y1 } from each node's translate and rect width
local function boxes(dom)
  local list = {}
  for x, y, w, h in dom:gmatch('<g class="node [^"]*" data%-id="%d+" transform="translate%(([%d.%-]+),([%d.%-]+)%)">'
      .. '<rect class="box" width="([%d.]+)" height="([%d.]+)"') do
    x, y = tonumber(x), tonumber(y)
    list[#list + 1] = { x, y, x + tonumber(w), y + tonumber(h) }
  end
  return list
end

local function overlapping_pairs(list)
  local n = 0
  for i = 1, #list do
    for j = i + 1, #list do
      local a, b = list[i], list[j]
      if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4] then n = n + 1 end
    end
  end
  return n
end

-- whether a node's text fields contain text (case-insensitive), as the viewer's search matches
local function matches(node, text)
  for _, field in ipairs({ "op", "arg", "dtype", "tag" }) do
    local v = node[field]
    if type(v) == "string" and v:lower():find(text:lower(), 1, true) then return true end
  end
  return false
end

describe("the viewer in headless Chromium", function()
  local tmp, path, data, roles
  local graph_count -- nodes reachable from realize 1's graph

  setup(function()
    browser.find() -- fails first, with how to install it, when there is no browser
    local _, out = helper.run("mktemp -d")
    tmp = out:gsub("%s+$", "")
    path = tmp .. "/viz page.html" -- a space: the file URL must be encoded
    data, roles = fixture_data()
    page.write(path, data)
    graph_count = select(2, fixture.reach(data, data.realizes[1].graph))
  end)
  teardown(function() helper.run("rm -rf " .. helper.shell_quote(tmp)) end)

  it("draws realize 1's tensor graph and schedule, lights a kernel's nodes and searches", function()
    -- lit=1 clicks the first kernel's name, next=2 presses Enter twice in the search box
    local dom = browser.dump_dom(path, "realize=1&search=ADD&lit=1&next=2")
    local h = hooks(dom)
    assert.are.equal("ready", h["viz-status"])
    assert.are.equal("0", h["viz-errors"])
    assert.is_true(graph_count > 350 and graph_count < 450, "fixture size " .. graph_count)
    assert.are.equal(graph_count, count_nodes(dom))
    assert.are.equal(tostring(graph_count), h["viz-nodes"])
    -- every box drawn where no other box is (from the SVG's coordinates, not the page's own count)
    local drawn = boxes(dom)
    assert.are.equal(graph_count, #drawn)
    assert.are.equal(0, overlapping_pairs(drawn))
    assert.are.equal("0", h["viz-overlaps"])
    assert.is_true(tonumber(h["viz-layout-ms"]) >= 0)
    -- the kernels in run order
    local names = {}
    for name in dom:gmatch('class="kernel%-link"[^>]*>([^<]*)<') do names[#names + 1] = name end
    assert.are.same({ "r_16_32_32", "E_16_32n1", "E_512_4u" }, names)
    assert.are.equal(#data.realizes[1].decisions, select(2, dom:match('<table class="decision%-table">(.-)</table>')
      :gsub("<tr class=", "")))
    -- the search: the nodes whose op, arg, dtype or tag contains "add", ignoring case
    local expected = 0
    for id in pairs(fixture.reach(data, data.realizes[1].graph)) do
      if matches(data.nodes[id], "ADD") then expected = expected + 1 end
    end
    assert.is_true(expected > 16)
    local found = nodes_with_class(dom, "match")
    assert.are.equal(expected, #found)
    for _, id in ipairs(found) do assert.is_true(matches(data.nodes[id], "add"), "node " .. id) end
    -- Enter twice: the second match is selected and its details shown
    assert.truthy(dom:find('<span class="match-info">2 of ' .. expected .. "</span>", 1, true))
    local selected = nodes_with_class(dom, "selected")
    assert.are.equal(1, #selected)
    assert.are.equal(found[2], selected[1])
    local heading = '<div class="node-details"><h4>' .. data.nodes[selected[1]].op .. " #" .. selected[1] .. "</h4>"
    assert.truthy(dom:find(heading, 1, true), heading)
    -- the first kernel's nodes lit, the rest dimmed
    local lit = nodes_with_class(dom, "lit")
    table.sort(lit)
    assert.are.same(data.realizes[1].kernels[1].computes, lit)
    assert.truthy(dom:find('<svg class="graph-svg dimmed">', 1, true))
    assert.truthy(dom:find('<tr class="active"><td>1</td>', 1, true))
    -- what the capture counted but did not record
    assert.truthy(dom:find(">Ran 2 more times with the same kernels (not recorded again).<", 1, true))
    assert.truthy(dom:find('<p class="dropped">5 more not recorded</p>', 1, true))
  end)

  it("collapses shared subtrees, from the hash and by a click on a toggle: fewer nodes, '+N' on each", function()
    local by_hash, by_click = roles.shared[8], roles.shared[4]
    local dom = browser.dump_dom(path, "realize=1&collapse=" .. by_hash .. "&toggle=" .. by_click)
    local h = hooks(dom)
    assert.are.equal("ready", h["viz-status"])
    assert.are.equal("0", h["viz-errors"])
    local stop = { [by_hash] = true, [by_click] = true }
    local visible, expected = fixture.reach(data, data.realizes[1].graph, stop)
    assert.is_true(expected < graph_count)
    assert.are.equal(expected, count_nodes(dom))
    assert.are.equal(tostring(expected), h["viz-nodes"]) -- the hooks follow the re-layout
    assert.are.equal(0, overlapping_pairs(boxes(dom)))
    for id in pairs(stop) do
      -- +N: the hidden nodes reachable from it through hidden nodes
      local hidden, stack = {}, { table.unpack(data.nodes[id].src) }
      while #stack > 0 do
        local s = table.remove(stack)
        if not visible[s] and not hidden[s] then
          hidden[s] = true
          for _, t in ipairs(data.nodes[s].src) do stack[#stack + 1] = t end
        end
      end
      local n = 0
      for _ in pairs(hidden) do n = n + 1 end
      assert.is_true(n > 5)
      local g = dom:match('<g class="node fam%-alu collapsed" data%-id="' .. id .. '"(.-)</g></g>')
      assert.is_truthy(g, "node " .. id .. " is not drawn collapsed")
      assert.truthy(g:find(">+" .. n .. "</text>", 1, true), "+" .. n)
    end
  end)

  it("says when a realize's plan came from the plan cache", function()
    local dom = browser.dump_dom(path, "realize=2")
    assert.are.equal("0", hooks(dom)["viz-errors"])
    assert.truthy(dom:find("The plan came from the plan cache", 1, true))
    assert.are.equal(select(2, fixture.reach(data, data.realizes[2].graph)), count_nodes(dom))
  end)

  it("shows a kernel's passes, the chosen pass's graphs and rules, BEAM's candidates and the code", function()
    local k, p = data.kernels[1], 5
    local dom = browser.dump_dom(path, "kernel=1&pass=" .. p)
    local h = hooks(dom)
    assert.are.equal("ready", h["viz-status"])
    assert.are.equal("0", h["viz-errors"])
    assert.are.equal(#k.passes, helper.count(dom, "data-pass="))
    assert.truthy(dom:find('<tr class="selected ran" data-pass="' .. p .. '">', 1, true))
    -- before and after side by side
    local before = select(2, fixture.reach(data, k.passes[p].before))
    local after = select(2, fixture.reach(data, k.passes[p].after))
    assert.are.equal(before + after, count_nodes(dom))
    assert.truthy(dom:find("<td>" .. before .. " → " .. after .. "</td>", 1, true))
    -- the rules that fired, with their counts
    assert.truthy(dom:find('<td class="mono">lua/tcl/patterns/lowering.lua:105</td><td>6</td>', 1, true))
    -- BEAM: every candidate, the failed one marked
    local beam = dom:match('<table class="beam%-table">(.-)</table>')
    assert.are.equal(4, helper.count(beam, "<tr class="))
    assert.are.equal(1, helper.count(beam, '<tr class="failed">'))
    assert.truthy(dom:find("<summary>Code: LLVM IR</summary><pre>define void @r_16_32_32(ptr %0, ptr %1) {", 1, true))
    assert.truthy(dom:find("3: LOAD &lt;/script&gt; float32</pre>", 1, true)) -- the data's '</' came through
    assert.truthy(dom:find("<summary>Assembly</summary><pre>r_16_32_32:", 1, true))
  end)

  it("shows the profile by kernel with GFLOPS, GB/s and the roofline fraction", function()
    local dom = browser.dump_dom(path, "profile")
    assert.are.equal("0", hooks(dom)["viz-errors"])
    local row = dom:match('<tr data%-kernel="2">(.-)</tr>')
    -- kernel 2: 3 calls of 0.25 ms, 6e6 ops and 1e6 bytes each; CPU peaks 200 GFLOPS, 20 GB/s
    local _, calls, seconds, ops, bytes = table.unpack(fixture.RUNS[2])
    local gflops = ops * calls / (seconds * calls) / 1e9
    local gbs = bytes * calls / (seconds * calls) / 1e9
    local peak = fixture.PEAKS.CPU
    local attainable = math.min(peak.gflops, ops / bytes * peak.gbs)
    assert.are.equal(120, attainable) -- memory bound: 6 flops/byte x 20 GB/s
    assert.truthy(row:find('<td class="calls">3</td><td class="ms">0.750</td>', 1, true))
    local figures = string.format('<td class="gflops">%.2f</td><td class="gbs">%.2f</td>', gflops, gbs)
    assert.truthy(row:find(figures, 1, true), figures)
    assert.truthy(row:find(string.format('<td class="roofline">%.1f%%</td>', gflops / attainable * 100), 1, true))
    assert.truthy(row:find('<td class="roofline">20.0%</td>', 1, true))
    assert.truthy(row:find('<a href="#kernel=2" class="profile%-kernel">E_16_32n1</a>'))
    assert.truthy(dom:find("over 6 runs (4 more runs not recorded)", 1, true))
  end)

  it("shows a kernel's own error; counts script errors in its test hooks", function()
    local broken = tmp .. "/broken.html"
    helper.write(broken, (page.html(data):gsub("</body>", '<script>throw new Error("boom in a test")</script></body>')))
    local dom = browser.dump_dom(broken, "kernel=3")
    assert.are.equal("1", hooks(dom)["viz-errors"])
    assert.truthy(dom:find("boom in a test", 1, true))
    local failed = "Lowering this kernel again failed: " .. data.kernels[3].error .. "<"
    assert.truthy(dom:find(failed, 1, true), failed)
    assert.truthy(dom:find("No assembly for this kernel.", 1, true))
  end)

  it("saves a screenshot", function()
    local png = tmp .. "/realize.png"
    browser.screenshot(path, png, { width = 1400, height = 900, hash = "realize=1&select=" .. roles.shared[16] })
    local bytes = helper.read(png)
    assert.are.equal("\137PNG\r\n\26\n", bytes:sub(1, 8))
    assert.is_true(#bytes > 20000, "a " .. #bytes .. "-byte screenshot")
  end)
end)
