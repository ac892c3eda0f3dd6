-- spec/cli/cli_spec.lua — the `tcl` program (src/cli/tcl_main.c): scripts with `arg` and `...`,
-- -e, a script from stdin, the interactive prompt fed through stdin, -v and --help, exit
-- statuses and messages for failures, and where it finds its Lua files.
local helper = require "spec.support.helper"
local q = helper.shell_quote

-- Every run has a time limit, so a prompt that fails to stop at end of input fails the spec
-- instead of hanging the suite (timeout exits 124).
local function tcl(args, stdin_text)
  return helper.run("timeout 60 " .. q(helper.tcl_bin) .. " " .. (args or ""), stdin_text)
end

local temp_files = {}
local function temp_script(text)
  local path = os.tmpname()
  helper.write(path, text)
  temp_files[#temp_files + 1] = path
  return path
end

local read = helper.read

local function plain(s) -- a string as a Lua pattern that matches it literally
  return (s:gsub("%p", "%%%0"))
end

describe("tcl", function()
  teardown(function()
    for _, path in ipairs(temp_files) do os.remove(path) end
  end)

  it("exists in the build directory", function()
    local f = io.open(helper.tcl_bin, "rb")
    assert.is_truthy(f, "no program at " .. helper.tcl_bin)
    f:close()
  end)

  describe("running a script", function()
    it("sets arg as stock lua does and passes the arguments as ...", function()
      local script = temp_script([[
print(select("#", ...), ...)
print(arg[-1], arg[0], arg[1], arg[2], #arg)
]])
      local status, out, err = tcl(q(script) .. " alpha 'two words'")
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal("2\talpha\ttwo words\n" ..
        helper.tcl_bin .. "\t" .. script .. "\talpha\ttwo words\t2\n", out)
    end)

    it("gives options negative indices in arg", function()
      local script = temp_script("print(arg[-3], arg[-2], arg[-1], arg[0])")
      local status, out = tcl("-e 'x=1' " .. q(script))
      assert.are.equal(0, status)
      assert.are.equal(helper.tcl_bin .. "\t-e\tx=1\t" .. script .. "\n", out)
    end)

    it("has tcl loaded: tcl.uop builds interned nodes", function()
      local script = temp_script([[
local a = tcl.uop("CONST", tcl.int32, nil, 3)
local b = tcl.uop("CONST", "int32", nil, 3)
local sum = tcl.uop("ADD", tcl.int32, {a, b})
print(a == b, a.op, tostring(a.dtype), a.arg, #sum.src, sum.src[1] == sum.src[2])
]])
      local status, out, err = tcl(q(script))
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal("true\tCONST\tint32\t3\t2\ttrue\n", out)
    end)

    it("exits with the status given to os.exit", function()
      local status = tcl(q(temp_script("os.exit(7)")))
      assert.are.equal(7, status)
    end)

    it("reports a failing script with its message and a traceback, status 1", function()
      local script = temp_script([[
print("before")
local function inner() error("the widget broke") end
inner()
]])
      local status, out, err = tcl(q(script))
      assert.are.equal(1, status)
      assert.are.equal("before\n", out)
      assert.matches("^tcl: " .. plain(script) .. ":2: the widget broke\n", err)
      assert.matches("stack traceback:", err, 1, true)
      assert.matches("in local 'inner'", err, 1, true)
    end)

    it("reports a syntax error with file and line, status 1", function()
      local script = temp_script("local x = 1\nlocal = 2\n")
      local status, out, err = tcl(q(script))
      assert.are.equal(1, status)
      assert.are.equal("", out)
      assert.matches("^tcl: " .. plain(script) .. ":2:", err)
    end)

    it("exits 2 with a usage hint when the script file cannot be opened", function()
      local status, out, err = tcl("no/such/script.lua")
      assert.are.equal(2, status)
      assert.are.equal("", out)
      assert.matches("^tcl: cannot open 'no/such/script%.lua'", err)
      assert.matches("\nusage: tcl ", err)
    end)

    it("runs a script from stdin with -", function()
      local status, out, err = tcl("- first second", "print(arg[0], ...)\n")
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal("-\tfirst\tsecond\n", out)
    end)

    it("reports an error in a script from stdin, status 1", function()
      local status, _, err = tcl("-", "error('from stdin')\n")
      assert.are.equal(1, status)
      assert.matches("^tcl: stdin:1: from stdin\nstack traceback:", err)
    end)

    it("treats the argument after -- as the script even if it starts with -", function()
      local status, _, err = tcl("-- -notafile")
      assert.are.equal(2, status)
      assert.matches("cannot open '%-notafile'", err)
    end)
  end)

  describe("-e", function()
    it("runs code", function()
      local status, out = tcl("-e 'print(1 + 1)'")
      assert.are.equal(0, status)
      assert.are.equal("2\n", out)
    end)

    it("may repeat, in order, in one state, before the script", function()
      local script = temp_script("print('script', x)")
      local status, out = tcl("-e 'x = 10' -e 'x = x * 2; print(x)' -e'print(x + 1)' " .. q(script))
      assert.are.equal(0, status)
      assert.are.equal("20\n21\nscript\t20\n", out)
    end)

    it("reports an error with a traceback, status 1, and stops", function()
      local status, out, err = tcl("-e 'error(\"bad code\")' -e 'print(\"not reached\")'")
      assert.are.equal(1, status)
      assert.are.equal("", out)
      assert.matches("^tcl: %(command line%):1: bad code\nstack traceback:", err)
    end)

    it("without its code is a usage error, status 2, and runs nothing", function()
      local status, out, err = tcl("-e")
      assert.are.equal(2, status)
      assert.are.equal("", out)
      assert.matches("'%-e' needs an argument", err)
      assert.matches("usage: tcl", err, 1, true)
    end)

    it("can require every native module the library defines (luaopen_tcl_*)", function()
      if helper.run("command -v nm") ~= 0 then pending("no nm") return end
      local status, symbols = helper.run("nm -g --defined-only " .. q(helper.build_dir .. "/libtclc.a"))
      assert.are.equal(0, status)
      local names = {}
      for suffix in symbols:gmatch("%sT%s+luaopen_tcl_([%w_]+)") do
        names[#names + 1] = "tcl." .. suffix:gsub("_", ".")
      end
      assert.is_true(#names >= 2, "found only " .. #names .. " luaopen_tcl_* functions")
      local code = "for _, m in ipairs{'" .. table.concat(names, "','") .. "'} do " ..
        "assert(type(require(m)) == 'table', m) end print('ok')"
      local run_status, out, err = tcl("-e " .. q(code))
      assert.are.equal("", err)
      assert.are.equal(0, run_status)
      assert.are.equal("ok\n", out)
    end)

    it("sees the globals tcl (a table) and Tensor (when the module has one)", function()
      local status, out = tcl("-e 'print(type(tcl), type(tcl.uop), Tensor == tcl.Tensor)'")
      assert.are.equal(0, status)
      assert.are.equal("table\tfunction\ttrue\n", out)
    end)
  end)

  describe("options", function()
    it("-v prints the version", function()
      local status, out, err = tcl("-v")
      assert.are.equal(0, status)
      assert.are.equal("", err)
      local _, version = tcl("-e 'io.write(tcl.version)'")
      assert.are.equal("tcl " .. version .. "\n", out)
      assert.matches("^tcl %d+%.%d+%.%d+\n$", out)
    end)

    it("--help and -h print the usage on stdout, status 0", function()
      for _, option in ipairs { "--help", "-h" } do
        local status, out, err = tcl(option)
        assert.are.equal(0, status)
        assert.are.equal("", err)
        assert.matches("^usage: tcl %[options%] %[script %[args", out)
        assert.matches("-e CODE", out, 1, true)
        assert.matches("-i", out, 1, true)
      end
    end)

    it("an unknown option exits 2 with a usage hint and runs nothing", function()
      local status, out, err = tcl("-x -e 'print(1)'")
      assert.are.equal(2, status)
      assert.are.equal("", out)
      assert.matches("^tcl: unrecognized option '%-x'\nusage: tcl ", err)
    end)
  end)

  describe("interactive prompt fed through stdin", function()
    it("prints the value of an expression", function()
      local status, out, err = tcl("", "1+2\n")
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal("3\n", out)
    end)

    it("runs statements, keeps globals, prints several values", function()
      local status, out = tcl("-i", "x = 20\nx + 1\n'a', nil, 3\ntype(tcl), type(tcl.uop)\n")
      assert.are.equal(0, status)
      assert.are.equal("21\na\tnil\t3\ntable\tfunction\n", out)
    end)

    it("continues a statement over several lines", function()
      local input = "function double(v)\n  return v * 2\nend\ndouble(21)\n(1 +\n 2)\n"
      local status, out = tcl("", input)
      assert.are.equal(0, status)
      assert.are.equal("42\n3\n", out)
    end)

    it("reports errors and goes on; ends with status 0 at end of input", function()
      local input = "error('first')\nx = = 1\nprint('still here')\n"
      local status, out, err = tcl("", input)
      assert.are.equal(0, status)
      assert.are.equal("still here\n", out)
      assert.matches("stdin:1: first\nstack traceback:", err)
      assert.matches("stdin:1: unexpected symbol near '='", err, 1, true)
    end)

    it("reports an unfinished statement at end of input and ends with status 0", function()
      local status, out, err = tcl("", "print(\n")
      assert.are.equal(0, status)
      assert.are.equal("", out)
      assert.matches("<eof>", err, 1, true)
    end)

    it("ends at once on empty input", function()
      local status, out, err = tcl("", "")
      assert.are.equal(0, status)
      assert.are.equal("", out)
      assert.are.equal("", err)
    end)

    it("follows -e and a script with -i", function()
      local script = temp_script("y = 5")
      local status, out = tcl("-i -e 'x = 1' " .. q(script), "x + y\n")
      assert.are.equal(0, status)
      assert.are.equal("6\n", out)
    end)
  end)

  describe("finding its Lua files", function()
    -- A copy of the program in <dir>/bin with the Lua files in <dir>/share/lua/5.4, as after
    -- an install: a marker line proves which copy of the Lua files was loaded.
    local dir
    local no_override = "env -u TCL_LUA_DIR -u TCLC_LUA_DIR "

    setup(function()
      dir = os.tmpname()
      os.remove(dir)
      local lua_dir = dir .. "/share/lua/5.4"
      assert(os.execute("mkdir -p " .. q(dir .. "/bin") .. " " .. q(lua_dir) ..
        " && cp " .. q(helper.tcl_bin) .. " " .. q(dir .. "/bin/tcl") ..
        " && cp -R " .. q(helper.root .. "/lua") .. "/. " .. q(lua_dir)))
      local init = lua_dir .. "/tcl/init.lua"
      local text = read(init)
      local f = assert(io.open(init, "wb"))
      f:write("RELOCATED_MARK = 'beside the program'\n", text)
      f:close()
    end)

    teardown(function()
      if dir then os.execute("rm -rf " .. q(dir)) end
    end)

    it("uses <program dir>/../share/lua/5.4 first", function()
      local status, out, err = helper.run(no_override .. q(dir .. "/bin/tcl") ..
        " -e 'print(RELOCATED_MARK, type(tcl.uop))'")
      assert.are.equal("", err)
      assert.are.equal(0, status)
      assert.are.equal("beside the program\tfunction\n", out)
    end)

    it("also when the program is found through PATH", function()
      local status, out = helper.run(no_override .. "PATH=" .. q(dir .. "/bin") .. ":\"$PATH\" " ..
        "sh -c " .. q("cd / && tcl -e 'print(RELOCATED_MARK)'"))
      assert.are.equal(0, status)
      assert.are.equal("beside the program\n", out)
    end)

    it("lets TCLC_LUA_DIR override the search", function()
      -- the old name (an alias); the run's TCL_LUA_DIR, if any, unset so that the two cannot differ
      local status, out = helper.run("env -u TCL_LUA_DIR TCLC_LUA_DIR=" .. q(helper.root .. "/lua") .. " " ..
        q(dir .. "/bin/tcl") .. " -e 'print(RELOCATED_MARK)'")
      assert.are.equal(0, status)
      assert.are.equal("nil\n", out)
    end)

    it("says where it looked when TCLC_LUA_DIR holds no Lua files, status 1", function()
      local status, out, err = helper.run("env -u TCL_LUA_DIR TCLC_LUA_DIR=/nonexistent/tcl-lua " ..
        q(helper.tcl_bin) .. " -e 'print(1)'")
      assert.are.equal(1, status)
      assert.are.equal("", out)
      assert.matches("cannot load the tcl module from /nonexistent/tcl-lua", err, 1, true)
    end)
  end)
end)
