-- spec/api/tensor_errors_spec.lua — every misuse of the Tensor API is a Lua error, raised when the
-- call is made (not at realize), whose message names the user-facing function and the
-- shapes involved (formatted like Python tuples: "(2, 3)", "(4,)", "()"), or the offending
-- value for dtype and argument-type errors. Kinds: incompatible shapes, bad dims, unknown
-- dtypes, wrong argument types, reshapes to a different size, out-of-range indices.
local tcl = require "tcl"
local Tensor = tcl.Tensor

-- The message of the error fn raises (fails when it raises none).
local function error_message(fn)
  local ok, err = pcall(fn)
  assert(not ok, "expected an error, the call succeeded")
  return tostring(err)
end

-- Problems found by expect_error in the running case, reported together by check_errors so
-- that one case shows every message that is wrong, not only the first.
local problems = {}

-- Records a problem (naming the caller's line) unless fn raises an error whose message
-- contains every fragment; a fragment may be a list of alternatives.
local function expect_error(fn, ...)
  local label = "line " .. debug.getinfo(2, "l").currentline
  local ok, err = pcall(fn)
  if ok then
    problems[#problems + 1] = label .. ": no error"
    return
  end
  local message = tostring(err)
  for _, fragment in ipairs({ ... }) do
    local alternatives = type(fragment) == "table" and fragment or { fragment }
    local found = false
    for _, alternative in ipairs(alternatives) do
      if message:find(alternative, 1, true) then found = true end
    end
    if not found then
      problems[#problems + 1] = string.format("%s: message %q does not contain %q", label, message,
        table.concat(alternatives, '" or "'))
      return
    end
  end
end

-- What a message may call a Lua number: its subtype or just "number".
local NUMBER = { "integer", "number" }

local function check_errors()
  local found = problems
  problems = {}
  assert(#found == 0, #found .. " problem(s):\n  " .. table.concat(found, "\n  "))
end

local function t23() return Tensor.zeros(2, 3) end

describe("Tensor errors: incompatible shapes", function()
  it("elementwise ops name the op and both shapes, operators included", function()
    local a, b = t23(), Tensor.zeros(4)
    for _, name in ipairs({ "add", "sub", "mul", "div", "mod", "pow", "maximum", "minimum", "eq", "ne", "lt",
      "le", "gt", "ge", "logical_and", "logical_or" }) do
      expect_error(function() return a[name](a, b) end, name .. ":", "(2, 3)", "(4,)")
    end
    expect_error(function() return a + b end, "add:", "(2, 3)", "(4,)")
    expect_error(function() return a - b end, "sub:", "(2, 3)", "(4,)")
    expect_error(function() return a * b end, "mul:", "(2, 3)", "(4,)")
    expect_error(function() return a / b end, "div:", "(2, 3)", "(4,)")
    expect_error(function() return a % b end, "mod:", "(2, 3)", "(4,)")
    expect_error(function() return a ^ b end, "pow:", "(2, 3)", "(4,)")
    expect_error(function() return Tensor.zeros(3, 1, 2) + Tensor.zeros(4, 3) end, "add:", "(3, 1, 2)", "(4, 3)")
    expect_error(function() return Tensor.zeros(0) + Tensor.zeros(2) end, "add:", "(0,)", "(2,)")
    check_errors()
  end)

  it("where names all three shapes that do not broadcast", function()
    local cond = Tensor.zeros(2, 3, { dtype = "bool" })
    expect_error(function() return Tensor.where(cond, Tensor.zeros(4), 1) end, "where:", "(2, 3)", "(4,)")
    expect_error(function() return cond:where(Tensor.zeros(3), Tensor.zeros(5, 1)) end, "where:", "(2, 3)", "(5, 1)")
    check_errors()
  end)

  it("matmul, dot and linear name both shapes", function()
    expect_error(function() return t23():matmul(Tensor.zeros(4, 5)) end, "matmul:", "(2, 3)", "(4, 5)")
    expect_error(function() return t23():dot(Tensor.zeros(2)) end, "dot:", "(2, 3)", "(2,)")
    expect_error(function() return Tensor.zeros(3):matmul(Tensor.zeros(4)) end, "matmul:", "(3,)", "(4,)")
    expect_error(function() return Tensor.zeros(2, 2, 3):matmul(Tensor.zeros(3, 3, 2)) end, "matmul:", "(2, 2, 3)",
      "(3, 3, 2)")
    expect_error(function() return Tensor(1.0):matmul(Tensor.zeros(2)) end, "matmul:", "()", "(2,)")
    expect_error(function() return t23():linear(Tensor.zeros(4, 5)) end, "linear:", "(2, 3)", "(4, 5)")
    expect_error(function() return t23():linear(Tensor.zeros(3, 5), Tensor.zeros(4)) end, "linear:", "(4,)")
    check_errors()
  end)

  it("cat and stack name the mismatching shapes", function()
    expect_error(function() return Tensor.cat({ t23(), Tensor.zeros(3, 3) }, 2) end, "cat:", "(2, 3)", "(3, 3)")
    expect_error(function() return Tensor.cat({ t23(), Tensor.zeros(2, 3, 1) }) end, "cat:", "(2, 3)", "(2, 3, 1)")
    expect_error(function() return Tensor.stack({ t23(), Tensor.zeros(3, 2) }) end, "stack:", "(2, 3)", "(3, 2)")
    check_errors()
  end)

  it("expand, pad and repeat name the shape", function()
    expect_error(function() return t23():expand(4, 3) end, "expand:", "(2, 3)", "(4, 3)")
    expect_error(function() return t23():expand(3) end, "expand:", "(2, 3)")
    expect_error(function() return t23():pad({ { 1, 1 }, { 1, 1 }, { 1, 1 } }) end, "pad:", "(2, 3)")
    expect_error(function() return t23():pad({ { -3, 0 }, { 0, 0 } }) end, "pad:", "(2, 3)")
    expect_error(function() return t23()["repeat"](t23(), 2) end, "repeat:", "(2, 3)")
    check_errors()
  end)

  it("conv2d and pooling name the shapes", function()
    local x = Tensor.zeros(1, 2, 5, 5)
    expect_error(function() return x:conv2d(Tensor.zeros(3, 3, 3, 3)) end, "conv2d:", "(1, 2, 5, 5)", "(3, 3, 3, 3)")
    expect_error(function() return x:conv2d(Tensor.zeros(3, 2, 3, 3), Tensor.zeros(4)) end, "conv2d:", "(4,)")
    expect_error(function() return x:conv2d(Tensor.zeros(3, 1, 3, 3), nil, { groups = 2 }) end, "conv2d:",
      "(1, 2, 5, 5)", "(3, 1, 3, 3)")
    expect_error(function() return Tensor.zeros(2, 5, 5):conv2d(Tensor.zeros(3, 2, 3, 3)) end, "conv2d:", "(2, 5, 5)")
    expect_error(function() return x:conv2d(Tensor.zeros(3, 2, 7, 7)) end, "conv2d:", "(1, 2, 5, 5)", "(7, 7)")
    expect_error(function() return x:max_pool2d(6) end, "max_pool2d:", "(1, 2, 5, 5)")
    expect_error(function() return x:avg_pool2d(6) end, "avg_pool2d:", "(1, 2, 5, 5)")
    check_errors()
  end)

  it("nn functions name the shapes", function()
    local x = Tensor.zeros(2, 3, 4, 4)
    local c4 = Tensor.zeros(4)
    expect_error(function() return x:batchnorm(c4, c4, c4, c4) end, "batchnorm:", "(2, 3, 4, 4)", "(4,)")
    expect_error(function() return Tensor.zeros(2, 3):cross_entropy(Tensor.zeros(2, 4)) end, "cross_entropy:", "(2, 3)",
      "(2, 4)")
    expect_error(function() return Tensor.zeros(2, 3):sparse_categorical_crossentropy(Tensor.zeros(3,
        { dtype = "int32" })) end,
      "sparse_categorical_crossentropy:", "(2, 3)", "(3,)")
    local q = Tensor.zeros(3, 4)
    expect_error(function() return q:scaled_dot_product_attention(Tensor.zeros(3, 5), Tensor.zeros(3, 2)) end,
      "scaled_dot_product_attention:", "(3, 4)", "(3, 5)")
    expect_error(function() return q:scaled_dot_product_attention(q, Tensor.zeros(2, 2)) end,
      "scaled_dot_product_attention:", "(2, 2)")
    check_errors()
  end)
end)

describe("Tensor errors: reshape to a different size", function()
  it("reshape and view name both shapes", function()
    expect_error(function() return t23():reshape(4, 2) end, "reshape:", "(2, 3)", "(4, 2)")
    expect_error(function() return t23():reshape({ 7 }) end, "reshape:", "(2, 3)", "(7,)")
    expect_error(function() return t23():reshape(4, -1) end, "reshape:", "(2, 3)", "(4, -1)")
    expect_error(function() return t23():reshape(-1, -1) end, "reshape:", "(-1, -1)")
    expect_error(function() return t23():view(5) end, "view:", "(2, 3)", "(5,)")
    expect_error(function() return Tensor(1.0):reshape(2) end, "reshape:", "()", "(2,)")
    check_errors()
  end)
end)

describe("Tensor errors: bad dims", function()
  it("name the function, the dim and the shape", function()
    local t = t23()
    local cases = {
      { "sum", function() return t:sum(3) end, "3" },
      { "sum", function() return t:sum({ 1, 5 }) end, "5" },
      { "mean", function() return t:mean(-3) end, "-3" },
      { "max", function() return t:max(0) end, "0" },
      { "argmax", function() return t:argmax(3) end, "3" },
      { "softmax", function() return t:softmax(3) end, "3" },
      { "log_softmax", function() return t:log_softmax(-3) end, "-3" },
      { "cumsum", function() return t:cumsum(4) end, "4" },
      { "var", function() return t:var(3) end, "3" },
      { "transpose", function() return t:transpose(1, 3) end, "3" },
      { "permute", function() return t:permute(1, 3) end, "(1, 3)" },
      { "permute", function() return t:permute(1, 1) end, "(1, 1)" },
      { "permute", function() return t:permute(1) end, "(1,)" },
      { "flip", function() return t:flip(3) end, "3" },
      { "unsqueeze", function() return t:unsqueeze(4) end, "4" },
      { "squeeze", function() return t:squeeze(3) end, "3" },
      { "flatten", function() return t:flatten(3) end, "3" },
      { "narrow", function() return t:narrow(3, 1, 1) end, "3" },
      { "cat", function() return Tensor.cat({ t, t }, 3) end, "3" },
      { "stack", function() return Tensor.stack({ t, t }, 4) end, "4" },
      { "split", function() return t:split(1, 3) end, "3" },
      { "chunk", function() return t:chunk(2, -3) end, "-3" },
      { "size", function() return t:size(3) end, "3" },
      { "layernorm", function() return t:layernorm(3) end, "3" },
    }
    for _, case in ipairs(cases) do
      expect_error(case[2], case[1] .. ":", case[3], "(2, 3)")
    end
    check_errors()
  end)
end)

describe("Tensor errors: unknown dtypes", function()
  it("name the function and the dtype", function()
    local t = t23()
    expect_error(function() return t:cast("float13") end, "cast:", "float13")
    expect_error(function() return Tensor({ 1, 2 }, { dtype = "nope" }) end, "Tensor:", "nope")
    expect_error(function() return Tensor.zeros(2, { dtype = "int3" }) end, "zeros:", "int3")
    expect_error(function() return Tensor.ones({ 2 }, { dtype = "quad" }) end, "ones:", "quad")
    expect_error(function() return Tensor.full({ 2 }, 1, { dtype = "big" }) end, "full:", "big")
    expect_error(function() return Tensor.arange(3, { dtype = "bad" }) end, "arange:", "bad")
    expect_error(function() return Tensor.zeros_like(t, { dtype = "wrong" }) end, "zeros_like:", "wrong")
    expect_error(function() return t:cast(42) end, "cast:", NUMBER)
    expect_error(function() return t:cast("void") end, "cast:", "void")
    check_errors()
  end)
end)

describe("Tensor errors: wrong argument types", function()
  it("name the function and what was given", function()
    local t = t23()
    expect_error(function() return t + "a" end, "add:", "string")
    expect_error(function() return t:mul({}) end, "mul:", "table")
    expect_error(function() return t:maximum(nil) end, "maximum:", "nil")
    expect_error(function() return t:add(nil) end, "add:", "nil")
    expect_error(function() return t * nil end, "mul:", "nil")
    expect_error(function() return t:lt(nil) end, "lt:", "nil")
    expect_error(function() return t:gt(0):where(1, nil) end, "where:", "nil")
    expect_error(function() return Tensor.where(t:gt(0), nil, 2) end, "where:", "nil")
    expect_error(function() return Tensor("abc") end, "Tensor:", "string")
    expect_error(function() return Tensor({ { 1, 2 }, { 3 } }) end, "Tensor:", "ragged")
    expect_error(function() return Tensor({ 1, "x" }) end, "Tensor:", "string")
    expect_error(function() return Tensor.zeros("x") end, "zeros:", "string")
    expect_error(function() return Tensor.zeros(2.5) end, "zeros:", "2.5")
    expect_error(function() return Tensor.zeros(-1, 2) end, "zeros:", "-1")
    expect_error(function() return t:reshape("a") end, "reshape:", "string")
    expect_error(function() return t:sum("x") end, "sum:", "string")
    expect_error(function() return t:sum(1.5) end, "sum:", "1.5")
    expect_error(function() return t:permute("a", 1) end, "permute:", "string")
    expect_error(function() return t:pad(3) end, "pad:", NUMBER)
    expect_error(function() return Tensor.cat(t) end, "cat:", "Tensor")
    expect_error(function() return Tensor.cat({ t, 3 }) end, "cat:", NUMBER)
    expect_error(function() return t:matmul(3) end, "matmul:", NUMBER)
    expect_error(function() return Tensor.zeros(1, 2, 5, 5):conv2d("w") end, "conv2d:", "string")
    expect_error(function() return Tensor.where(1, t, t) end, "where:", NUMBER)
    expect_error(function() return t:clamp("lo", 1) end, "clamp:", "string")
    expect_error(function() return t:leaky_relu("x") end, "leaky_relu:", "string")
    expect_error(function() return Tensor({ 1, 2 }):one_hot(2.5) end, "one_hot:", "2.5")
    expect_error(function() return Tensor.arange(0, 5, 0) end, "arange:", "step")
    expect_error(function() return Tensor.randint(3, 3, { 2 }) end, "randint:", "3")
    expect_error(function() return Tensor.linspace(0, 1, -1) end, "linspace:", "-1")
    expect_error(function() return Tensor.eye("n") end, "eye:", "string")
    expect_error(function() return Tensor.manual_seed("s") end, "manual_seed:", "string")
    check_errors()
  end)
end)

describe("Tensor errors: out-of-range indices", function()
  it("t[i], slice, narrow and item name the index and the shape", function()
    local t = Tensor.zeros(3, 2)
    expect_error(function() return t[4] end, "index", "4", "(3, 2)")
    expect_error(function() return t[-4] end, "index", "-4", "(3, 2)")
    expect_error(function() return t[0] end, "index", "0", "(3, 2)")
    expect_error(function() return Tensor(1.0)[1] end, "index", "()")
    expect_error(function() return t:slice({ 1, 4 }) end, "slice:", "4", "(3, 2)")
    expect_error(function() return t:slice({}, { 3, 3 }) end, "slice:", "3", "(3, 2)")
    expect_error(function() return t:slice({}, {}, {}) end, "slice:", "(3, 2)")
    expect_error(function() return t:slice({ 1, 3, 0 }) end, "slice:", "0")
    expect_error(function() return t:narrow(1, 3, 2) end, "narrow:", "(3, 2)")
    expect_error(function() return t:narrow(1, 4, 1) end, "narrow:", "(3, 2)")
    expect_error(function() return t:item() end, "item:", "(3, 2)")
    expect_error(function() return Tensor.zeros(0):item() end, "item:", "(0,)")
    check_errors()
  end)
end)

describe("Tensor errors leave the tensors usable", function()
  it("a failed call changes nothing", function()
    local t = Tensor({ 1.0, 2.0, 3.0 })
    error_message(function() return t:reshape(2, 2) end)
    error_message(function() return t + Tensor.zeros(2) end)
    assert.are.same({ 2.0, 4.0, 6.0 }, (t * 2):tolist())
    check_errors()
  end)
end)
