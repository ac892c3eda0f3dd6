-- spec/project/docs_spec.lua — the docs cannot drift (docs/README.md, "Examples that are tested"):
-- every example of README.md, bench/README.md and docs/**/*.md that shows its output is run
-- with the build under test and must print that output (spec/support/doctest.lua: a ```lua
-- block followed by an ```output block, the `$ ` commands of ```console blocks; `...` masks
-- what changes between runs); every repository path the docs name exists; every relative
-- Markdown link resolves inside the repository; the README stays a front page.
local helper = require "spec.support.helper"
local doctest = require "spec.support.doctest"

local root = helper.root
local tcl = helper.tcl_bin
local q = helper.shell_quote

-- Settings a developer's shell may hold that would change what the examples print.
local CLEAN_ENV = "env -u DEBUG -u BEAM -u NOOPT -u DEVICE -u EMU_GPU -u TCL_EMU_GPU -u THREADS"
  .. " -u TCL_THREADS -u CACHELEVEL -u IGNORE_BEAM_CACHE -u TCL_HEURISTICS -u REWRITE_STATS"
  .. " -u REWRITE_TRACE -u TCL_REWRITE_STATS -u TCL_REWRITE_TRACE -u TCLC_LUA_DIR"
  .. " -u TCL_KERNEL_CACHE_MB -u TCL_MEMORY_LIMIT_MB -u TCL_RENDER_DUMP -u TCL_PLAN_CACHE -u TCL_PROGRESS"

local function docs_files()
  local files = { "README.md", "bench/README.md" }
  local p = io.popen("cd " .. q(root) .. " && find docs -name '*.md' | sort")
  for f in p:lines() do files[#files + 1] = f end
  p:close()
  return files
end

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  local p = io.popen("cd " .. q(path) .. " 2>/dev/null && pwd")
  local out = p:read("l")
  p:close()
  return out
end

local cache = os.tmpname()
os.remove(cache)
assert(os.execute("mkdir -m 700 " .. q(cache)))
local lua_dir = absolute(root) .. "/lua"
local tcl_abs = tcl:sub(1, 1) == "/" and tcl or absolute(root) .. "/" .. tcl:gsub("^%./", "")

-- Runs one example; returns what it printed (standard error after standard output, as a
-- terminal shows them when both are unbuffered).
-- Each example gets an empty kernel cache, as on a first run.
local function run_example(ex)
  os.execute("rm -rf " .. q(cache) .. "/* " .. q(cache) .. "/.[!.]*")
  local env = CLEAN_ENV .. " TCL_LUA_DIR=" .. q(lua_dir) .. " TCL_CACHE=" .. q(cache)
  if ex.kind == "lua" then
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. q(dir)))
    -- unbuffered stdout, on the first line so that line numbers in messages stay the block's
    helper.write(dir .. "/" .. ex.options.file, 'io.stdout:setvbuf("no") ' .. ex.code)
    local vars = {}
    for i, v in ipairs(ex.options.env) do vars[i] = q(v) end
    local cmd = string.format("cd %s && %s %s %s %s%s", q(dir), env, table.concat(vars, " "),
      q(tcl_abs), q(ex.options.file), ex.options.stdout_only and " 2>/dev/null" or " 2>&1")
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    os.execute("rm -rf " .. q(dir))
    return out
  end
  -- a console command: `tcl` or `build/tcl` (after VAR=value settings) is the build's tcl
  -- (with unbuffered stdout, as on a terminal: an -e chunk runs before the others)
  local settings, rest = "", ex.command
  while rest:match("^[%w_]+=%S*%s") do
    local setting, after = rest:match("^([%w_]+=%S*)%s+(.*)$")
    settings, rest = settings .. setting .. " ", after
  end
  local args = rest:match("^build/tcl (.*)$") or rest:match("^tcl (.*)$")
  assert(args, "doctest: a ```console command must run tcl (else use ```text): " .. ex.command)
  local command = settings .. q(tcl_abs) .. " -e 'io.stdout:setvbuf(\"no\")' " .. args
  local p = io.popen(string.format("cd %s && %s %s 2>&1", q(root), env, command))
  local out = p:read("a")
  p:close()
  return out
end

describe("docs", function()
  local files = docs_files()

  it("README.md is a front page of at most 250 lines", function()
    local n = select(2, helper.read(root .. "/README.md"):gsub("\n", "\n"))
    assert.is_true(n <= 250, "README.md has " .. n .. " lines")
  end)

  for _, file in ipairs(files) do
    local text = helper.read(root .. "/" .. file)
    for _, ex in ipairs(doctest.examples(text)) do
      it(string.format("%s:%d prints what it shows", file, ex.line), function()
        local out = run_example(ex)
        local ok, why = doctest.matches(ex.expected, out)
        assert(ok, string.format("%s:%d: the output differs from the doc's:\n%s\n--- it printed:\n%s",
          file, ex.line, why or "", out))
      end)
    end
  end

  it("names only repository paths that exist", function()
    local missing = {}
    local prefixes = { "lua/tcl/", "src/", "spec/", "scripts/", "bench/", "docs/", "tests/", "examples/",
                       "include/", "cmake/" }
    for _, file in ipairs(files) do
      local text = helper.read(root .. "/" .. file)
      for before, path in text:gmatch("([^%w_./%-]?)([%w_]+/[%w_./%*{},%-]*)") do
        local known = false
        for _, p in ipairs(prefixes) do
          if path:sub(1, #p) == p then known = true end
        end
        -- a path written inside another (build/tests/x, <build>/bench/x) is not the repository's;
        -- "examples/s" is a unit (a progress bar's examples per second)
        if known and before ~= "/" and before ~= ">" and path ~= "examples/s" then
          path = path:gsub("[.,]+$", "")
          if not path:find("{", 1, true) then path = path:gsub("}+$", "") end
          -- a C test program or baseline is named without its .c
          local check = string.format("cd %s && bash -O globstar -O nullglob -c 'for f in %s %s.c; do "
            .. "[ -e \"$f\" ] && exit 0; done; exit 1'", q(root), path, path)
          if not os.execute(check) then missing[#missing + 1] = file .. ": " .. path end
        end
      end
    end
    assert.are.same({}, missing)
  end)

  it("has relative links that resolve inside the repository", function()
    local broken = {}
    local root_abs = absolute(root)
    for _, file in ipairs(files) do
      local dir = file:match("^(.*)/[^/]*$") or "."
      local text = helper.read(root .. "/" .. file)
      for target in text:gmatch("%]%(([^)%s]+)%)") do
        if not target:match("^%a[%w+.-]*:") and target:sub(1, 1) ~= "#" then
          local path = target:gsub("#.*$", "")
          local rp = io.popen("realpath -m " .. q(root_abs .. "/" .. dir .. "/" .. path))
          local full = rp:read("l")
          rp:close()
          if not os.execute("test -e " .. q(full)) or full:sub(1, #root_abs + 1) ~= root_abs .. "/" then
            broken[#broken + 1] = file .. ": " .. target
          end
        end
      end
    end
    assert.are.same({}, broken)
  end)

  it("has the reference that scripts/gen_reference.lua generates from today's code", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. q(dir)))
    local status, _, err = helper.run(string.format("cd %s && TCL_LUA_DIR=%s %s scripts/gen_reference.lua %s",
      q(root), q(lua_dir), q(tcl_abs), q(dir)))
    assert.are.equal(0, status, err)
    for _, name in ipairs({ "tensor.md", "nn.md" }) do
      assert(helper.read(dir .. "/" .. name) == helper.read(root .. "/docs/reference/" .. name),
        "docs/reference/" .. name .. " differs from a fresh generation: run build/tcl scripts/gen_reference.lua")
    end
    os.execute("rm -rf " .. q(dir))
  end)

  it("reports a stale example, naming the line", function()
    local stale = "```lua\nprint(Tensor({1, 2}):sum():item())\n```\n```output\n4\n```\n"
    local ex = doctest.examples(stale)[1]
    local ok, why = doctest.matches(ex.expected, run_example(ex))
    assert.is_false(ok)
    assert.are.equal('expected line 1: "4"\n     got line 1: "3"', why)
  end)

  it("masks with ... and stays strict elsewhere", function()
    assert.is_true(doctest.matches({ "took ... ms", "...", "end" }, "took 1.25 ms\nx\ny\nend\n"))
    assert.is_true(doctest.matches({ "a", "...", "b" }, "a\nb"))
    assert.is_false(doctest.matches({ "took ... ms" }, "took 1.25 s"))
    assert.is_false(doctest.matches({ "a", "b" }, "a\nb\nc"))
    assert.is_false(doctest.matches({ "(1%)" }, "(1x)"))
  end)

  teardown(function() os.execute("rm -rf " .. q(cache)) end)
end)
