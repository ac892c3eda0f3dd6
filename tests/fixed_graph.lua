-- tests/fixed_graph.lua — the fixed graph whose content hash must be the same in every
-- process and from both languages. Its twin in C is tests/c/fixed_graph.c: keep them identical.
-- Used by spec/core/core_c_spec.lua, spec/core/uop_spec.lua and tests/c/core_test.c.
--
-- Returns build(core, warmup) -> root, keep. `core` is the tcl.core module. `warmup`
-- unrelated nodes are built first and kept alive (in `keep`), so that node ids, and the
-- identity hashes made from them, differ between runs while the content hash must not.
return function(core, warmup)
  local keep = {}
  for i = 1, warmup or 0 do keep[i] = core.uop("CONST", "int64", nil, i * 7919) end

  local x = core.uop("CONST", "float32", nil, 1.5)
  local negative_zero = core.uop("CONST", "float32", nil, -0.0)
  local seven = core.uop("CONST", "int32", nil, -7)
  local n = core.uop("DEFINE_VAR", "index", nil, { "n", 1, 64 })
  local sum = core.uop("ADD", "float32", { x, negative_zero })
  local square = core.uop("MUL", "float32", { sum, sum })
  local reshaped = core.uop("RESHAPE", "float32", { square }, { 2, 3 })
  local cast = core.uop("CAST", "int32", { reshaped }, core.dtype("float32"))
  local root = core.uop("SINK", nil, { reshaped, n, cast, seven }, { true, { 1, 2.5 }, "k" }, "out")
  return root, keep
end
