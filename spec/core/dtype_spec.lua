-- spec/core/dtype_spec.lua — the dtype table (src/core/dtype.c) as Lua sees it: every dtype's
-- facts, names and aliases, and the whole promotion table checked against a reference
-- lattice written here independently (tinygrad's, as described in the issue).
local tcl = require "tcl"

-- name, itemsize, is_float, is_int, is_unsigned, min, max (integers where they fit)
local FACTS = {
  { "void", 0, false, false, false, 0.0, 0.0 },
  { "index", 8, false, true, false, math.mininteger, math.maxinteger },
  { "bool", 1, false, false, false, false, true },
  { "int8", 1, false, true, false, -128, 127 },
  { "uint8", 1, false, true, true, 0, 255 },
  { "int16", 2, false, true, false, -32768, 32767 },
  { "uint16", 2, false, true, true, 0, 65535 },
  { "int32", 4, false, true, false, -2147483648, 2147483647 },
  { "uint32", 4, false, true, true, 0, 4294967295 },
  { "int64", 8, false, true, false, math.mininteger, math.maxinteger },
  { "uint64", 8, false, true, true, 0, 2.0 ^ 64 }, -- 2^64-1 has no exact Lua number
  { "fp8e4m3", 1, true, false, false, -448.0, 448.0 },
  { "fp8e5m2", 1, true, false, false, -57344.0, 57344.0 },
  { "float16", 2, true, false, false, -65504.0, 65504.0 },
  { "bfloat16", 2, true, false, false, -(2.0 ^ 128 - 2.0 ^ 120), 2.0 ^ 128 - 2.0 ^ 120 },
  { "float32", 4, true, false, false, -(2.0 ^ 128 - 2.0 ^ 104), 2.0 ^ 128 - 2.0 ^ 104 },
  { "float64", 8, true, false, false, -1.7976931348623157e308, 1.7976931348623157e308 },
}

local ALIASES = {
  float = "float32", half = "float16", double = "float64", int = "int32", long = "int64",
  uchar = "uint8", char = "int8", short = "int16", ushort = "uint16", uint = "uint32",
  ulong = "uint64", bf16 = "bfloat16",
}

-- The promotion lattice: each dtype's direct successors, and the priority order.
local LATTICE = {
  bool = { "int8", "uint8" },
  int8 = { "int16" },
  int16 = { "int32" },
  int32 = { "int64" },
  int64 = { "fp8e4m3", "fp8e5m2" },
  uint8 = { "int16", "uint16" },
  uint16 = { "int32", "uint32" },
  uint32 = { "int64", "uint64" },
  uint64 = { "fp8e4m3", "fp8e5m2" },
  fp8e4m3 = { "float16", "bfloat16" },
  fp8e5m2 = { "float16", "bfloat16" },
  float16 = { "float32" },
  bfloat16 = { "float32" },
  float32 = { "float64" },
  float64 = {},
}
local PRIORITY = { "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
  "fp8e4m3", "fp8e5m2", "float16", "bfloat16", "float32", "float64" }

-- Every dtype reachable from `name` in the lattice, itself included, as a set.
local function upper_set(name)
  local set, queue = { [name] = true }, { name }
  while #queue > 0 do
    for _, next_name in ipairs(LATTICE[table.remove(queue)]) do
      if not set[next_name] then
        set[next_name] = true
        queue[#queue + 1] = next_name
      end
    end
  end
  return set
end

-- The lowest-priority dtype above both a and b.
local function reference_promote(a, b)
  local above_a, above_b = upper_set(a), upper_set(b)
  for _, name in ipairs(PRIORITY) do
    if above_a[name] and above_b[name] then return name end
  end
  error("no common dtype for " .. a .. " and " .. b)
end

describe("dtypes", function()
  it("has exactly the dtypes of the table, one object each", function()
    local count = 0
    for name, dt in pairs(tcl.dtypes) do
      count = count + 1
      assert.are.equal(name, dt.name)
      assert.are.equal(name, tostring(dt))
      assert.is_true(rawequal(dt, tcl[name]))
      assert.is_true(rawequal(dt, tcl.dtype(name)))
      assert.is_true(rawequal(dt, tcl.dtype(dt)))
    end
    assert.are.equal(#FACTS, count)
  end)

  for id, facts in ipairs(FACTS) do
    local name, itemsize, is_float, is_int, is_unsigned, min, max = table.unpack(facts)
    it("knows the facts of " .. name, function()
      local dt = tcl.dtypes[name]
      assert.is_not_nil(dt, name)
      assert.are.equal(id - 1, dt.id)
      assert.are.equal(itemsize, dt.itemsize)
      assert.are.equal(is_float, dt.is_float)
      assert.are.equal(is_int, dt.is_int)
      assert.are.equal(is_unsigned, dt.is_unsigned)
      assert.are.equal(name == "bool", dt.is_bool)
      assert.are.equal(min, dt.min)
      assert.are.equal(max, dt.max)
      if is_int and name ~= "uint64" then
        assert.are.equal("integer", math.type(dt.min))
        assert.are.equal("integer", math.type(dt.max))
      end
      assert.is_nil(dt.no_such_field)
    end)
  end

  it("finds dtypes by alias", function()
    for alias, name in pairs(ALIASES) do
      assert.is_true(rawequal(tcl.dtypes[name], tcl.dtype(alias)), alias)
    end
  end)

  it("rejects unknown names and values that are no dtype", function()
    assert.has_error(function() tcl.dtype("float33") end)
    local ok, err = pcall(tcl.dtype, "float33")
    assert.is_false(ok)
    assert.matches("unknown dtype 'float33'", err, 1, true)
    ok, err = pcall(tcl.dtype, 32)
    assert.is_false(ok)
    assert.matches("dtype or dtype name expected", err, 1, true)
    assert.is_false((pcall(tcl.dtype, "Float32")))
  end)
end)

describe("dtype promotion", function()
  it("agrees with the reference lattice for every pair", function()
    local checked = 0
    for _, a in ipairs(PRIORITY) do
      for _, b in ipairs(PRIORITY) do
        local expected = reference_promote(a, b)
        assert.are.equal(expected, tcl.promote(a, b).name, a .. " + " .. b)
        assert.is_true(rawequal(tcl.dtypes[expected], tcl.promote(tcl.dtypes[a], tcl.dtypes[b])))
        checked = checked + 1
      end
    end
    assert.are.equal(15 * 15, checked)
  end)

  it("gives the known results", function()
    local cases = {
      { "int8", "uint8", "int16" }, { "uint8", "int16", "int16" }, { "int16", "uint16", "int32" },
      { "int32", "uint32", "int64" }, { "int8", "uint32", "int64" }, { "int64", "uint64", "fp8e4m3" },
      { "uint64", "int8", "fp8e4m3" }, { "fp8e4m3", "fp8e5m2", "float16" },
      { "float16", "bfloat16", "float32" }, { "bfloat16", "float16", "float32" },
      { "bool", "bool", "bool" }, { "bool", "int8", "int8" }, { "bool", "float64", "float64" },
      { "int64", "float32", "float32" }, { "uint8", "float16", "float16" },
      { "uint32", "uint64", "uint64" }, { "int32", "float64", "float64" }, { "fp8e5m2", "bfloat16", "bfloat16" },
      { "float", "half", "float32" }, { "uchar", "char", "int16" },
    }
    for _, case in ipairs(cases) do
      assert.are.equal(case[3], tcl.promote(case[1], case[2]).name, case[1] .. " + " .. case[2])
    end
  end)

  it("is symmetric and idempotent", function()
    for _, a in ipairs(PRIORITY) do
      assert.are.equal(a, tcl.promote(a, a).name)
      for _, b in ipairs(PRIORITY) do assert.is_true(rawequal(tcl.promote(a, b), tcl.promote(b, a))) end
    end
  end)

  it("lets index adopt the other side", function()
    assert.are.equal("int32", tcl.promote("index", "int32").name)
    assert.are.equal("int32", tcl.promote("int32", "index").name)
    assert.are.equal("index", tcl.promote("index", "index").name)
    for _, other in ipairs(PRIORITY) do
      assert.are.equal(other, tcl.promote("index", other).name)
      assert.are.equal(other, tcl.promote(other, "index").name)
    end
  end)

  it("has no result with void", function()
    for name in pairs(tcl.dtypes) do
      local ok, err = pcall(tcl.promote, "void", name)
      assert.is_false(ok, "void + " .. name)
      assert.matches("no common dtype for void and " .. name, err, 1, true)
      assert.is_false((pcall(tcl.promote, name, "void")))
    end
  end)
end)
