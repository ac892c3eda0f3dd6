-- spec/project/symbols_spec.lua — what the shared objects export. Everything is compiled with hidden
-- visibility (CMakeLists.txt), so libtclc.so exports only the embedding API (the tclc_*
-- functions marked TCLC_API in include/tclc.h) and the Lua module tcl.so only its luaopen_*
-- entry points (TCL_LUAOPEN_API, src/core/lua_export.h). Read with `nm -D --defined-only`.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local library = helper.build_dir .. "/libtclc.so"
local module = helper.build_dir .. "/lua/tcl.so"

local function read_file(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("a")
  f:close()
  return text
end

-- Names the toolchain puts into a shared object's dynamic symbol table by itself (_init,
-- _fini, __bss_start, _edata, _end, and the sanitizers' __asan_*/__ubsan_* helpers in the
-- Sanitize build). They all begin with an underscore, which C11 (7.1.3) reserves for the
-- implementation at file scope, and which no name of ours does.
local function from_toolchain(name)
  return name:sub(1, 1) == "_"
end

-- The defined text and data symbols that `path` exports, as a sorted list.
local function exported_symbols(path)
  local status, stdout, stderr = helper.run("nm -D --defined-only " .. q(path))
  assert.are.equal(0, status, "nm -D " .. path .. " failed: " .. stderr)
  local names = {}
  for kind, name in stdout:gmatch("%x*%s+(%a)%s+([^%s]+)\n") do
    -- T/t text, D/d data, B/b bss, R/r read-only data, W/V weak, G/S small data, i indirect
    -- functions, u unique globals; U (undefined) and A (absolute: version nodes) are not definitions of ours
    if kind:match("[TtDdBbRrWwVvGgSsiu]") and not from_toolchain(name) then names[#names + 1] = name end
  end
  table.sort(names)
  return names
end

local function offenders(names, prefix)
  local bad = {}
  for _, name in ipairs(names) do
    if name:sub(1, #prefix) ~= prefix then bad[#bad + 1] = name end
  end
  return bad
end

local function as_set(names)
  local set = {}
  for _, name in ipairs(names) do set[name] = true end
  return set
end

-- The functions include/tclc.h declares with TCLC_API: the public API, all of which
-- libtclc.so must export.
local function public_api_functions()
  local names = {}
  for name in read_file(helper.root .. "/include/tclc.h"):gmatch("TCLC_API[^;(]-(tclc_[%w_]+)%s*%(") do
    names[#names + 1] = name
  end
  return names
end

-- The luaopen_* functions src/api/modules.c preloads: every native module, all of which tcl.so
-- must export for a stock lua5.4's `require`.
local function native_module_openers()
  local names = {}
  for name in read_file(helper.root .. "/src/api/modules.c"):gmatch("{\"tcl%.[%w_]+\",%s*(luaopen_[%w_]+)}") do
    names[#names + 1] = name
  end
  return names
end

describe("the symbols exported by libtclc.so", function()
  it("all begin with tclc_", function()
    local bad = offenders(exported_symbols(library), "tclc_")
    assert.are.equal(0, #bad, "libtclc.so exports symbols outside the tclc_ API: " .. table.concat(bad, ", "))
  end)

  it("include every function of include/tclc.h", function()
    local expected = public_api_functions()
    assert.is_true(#expected >= 10, "found only " .. #expected .. " TCLC_API functions in include/tclc.h")
    local exported, missing = as_set(exported_symbols(library)), {}
    for _, name in ipairs(expected) do
      if not exported[name] then missing[#missing + 1] = name end
    end
    assert.are.equal(0, #missing, "libtclc.so does not export: " .. table.concat(missing, ", "))
    for _, name in ipairs({ "tclc_open", "tclc_close", "tclc_call", "tclc_error", "tclc_pcall" }) do
      assert.is_true(exported[name], "libtclc.so does not export " .. name)
    end
  end)
end)

describe("the symbols exported by the Lua module tcl.so", function()
  it("all begin with luaopen_", function()
    local bad = offenders(exported_symbols(module), "luaopen_")
    assert.are.equal(0, #bad, "tcl.so exports symbols other than luaopen_*: " .. table.concat(bad, ", "))
  end)

  it("include the opener of every native module", function()
    local expected = native_module_openers()
    assert.is_true(#expected >= 5, "found only " .. #expected .. " native modules in src/api/modules.c")
    local exported, missing = as_set(exported_symbols(module)), {}
    for _, name in ipairs(expected) do
      if not exported[name] then missing[#missing + 1] = name end
    end
    assert.are.equal(0, #missing, "tcl.so does not export: " .. table.concat(missing, ", "))
    for _, name in ipairs({ "luaopen_tcl_core", "luaopen_tcl_alu", "luaopen_tcl_rewrite", "luaopen_tcl_bounds",
                            "luaopen_tcl_runtime" }) do
      assert.is_true(exported[name], "tcl.so does not export " .. name)
    end
  end)
end)
