-- spec/api/linalg_spec.lua — Tensor.inv, det, slogdet, solve and cholesky (lua/tcl/api/linalg.lua)
-- against torch.linalg: values on well-conditioned matrices of sizes 1 to 33, batches, matrices
-- whose elimination needs row swaps, negative determinants, broadcast and vector right-hand
-- sides; gradients of every input; the edges (0 x 0, singular, not positive-definite); the
-- kernels an elimination compiles do not grow with n; and the errors, which name the function.
local tcl = require "tcl"
local torch_ref = require "spec.support.torch_ref"
local helper = require "spec.support.helper"
local Tensor = tcl.Tensor
local L = torch_ref.literal

-- A well-conditioned matrix (..., n, n): smooth values plus n on the diagonal; `seed` varies it.
local function general(shape, seed)
  local n = shape[#shape]
  local numel = 1
  for _, s in ipairs(shape) do numel = numel * s end
  local v = {}
  for i = 1, numel do
    local col, row = (i - 1) % n, ((i - 1) // n) % n
    v[i] = math.sin(i * 1.37 + seed) + (row == col and (seed % 2 == 0 and n or -n) or 0)
  end
  return Tensor(v):reshape(shape)
end

-- A symmetric positive-definite matrix (n, n): R R^T / n + I.
local function spd(n, seed)
  local r = general({ n, n }, seed)
  return r:matmul(r:transpose(1, 2)):div(n):add(Tensor.eye(n)):realize()
end

-- Rows that need swapping: a zero (or tiny) diagonal and larger entries below it.
local PIVOTING = Tensor({ { 0.0, 2, 1, -1 }, { 3, 0, 1, 2 }, { 1, 4, 0, 1 }, { 2, 1, 5, 0 } })

describe("Tensor linear algebra", function()
  it("inv, det, slogdet, solve and cholesky match torch.linalg", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local cases, lines, ours = {}, {}, {}
    local function add(name, tcl_value, torch_expr)
      cases[#cases + 1] = name
      ours[name] = tcl_value
      lines[#lines + 1] = string.format("out[%q] = %s", name, torch_expr)
    end
    for _, n in ipairs({ 1, 2, 3, 5, 16, 33 }) do
      local a = general({ n, n }, n):realize()
      local b = general({ n, 3 }, n + 1):realize()
      lines[#lines + 1] = string.format("a%d, b%d = %s, %s", n, n, L(a), L(b))
      add("inv" .. n, a:inv(), string.format("torch.linalg.inv(a%d)", n))
      add("det" .. n, a:det(), string.format("torch.linalg.det(a%d)", n))
      add("solve" .. n, a:solve(b), string.format("torch.linalg.solve(a%d, b%d)", n, n))
      local s = spd(n, n + 2)
      lines[#lines + 1] = string.format("s%d = %s", n, L(s))
      add("chol" .. n, s:cholesky(), string.format("torch.linalg.cholesky(s%d)", n))
      add("cholu" .. n, s:cholesky({ upper = true }), string.format("torch.linalg.cholesky(s%d, upper=True)", n))
    end
    -- a batch (2, 3, 4, 4), odd seeds: negative diagonals, determinants of both signs
    local batch = general({ 2, 3, 4, 4 }, 7):realize()
    lines[#lines + 1] = "ab = " .. L(batch)
    add("inv_batch", batch:inv(), "torch.linalg.inv(ab)")
    add("det_batch", batch:det(), "torch.linalg.det(ab)")
    local sign, logabs = batch:slogdet()
    add("slogdet_sign", sign, "torch.linalg.slogdet(ab)[0]")
    add("slogdet_log", logabs, "torch.linalg.slogdet(ab)[1]")
    -- row swaps
    lines[#lines + 1] = "p = " .. L(PIVOTING)
    add("inv_pivot", PIVOTING:inv(), "torch.linalg.inv(p)")
    add("det_pivot", PIVOTING:det(), "torch.linalg.det(p)")
    add("solve_pivot_vector", PIVOTING:solve(Tensor({ 1.0, -2, 3, 0.5 })),
      "torch.linalg.solve(p, torch.tensor([1., -2, 3, 0.5]))")
    -- broadcasting: A (2, 3, 4, 4) with B (4, 2); A (4, 4) with B (2, 3, 4, 1); a batch of vectors (2, 3, 4)
    local rhs = general({ 4, 2 }, 3):realize()
    local rhs_batch = general({ 2, 3, 4, 1 }, 5):realize()
    local vectors = general({ 2, 3, 4 }, 9):realize()
    lines[#lines + 1] = string.format("rb, rbb, vs = %s, %s, %s", L(rhs), L(rhs_batch), L(vectors))
    add("solve_bcast_b", batch:solve(rhs), "torch.linalg.solve(ab, rb)")
    add("solve_bcast_a", PIVOTING:solve(rhs_batch), "torch.linalg.solve(p, rbb)")
    add("solve_vectors", batch:solve(vectors), "torch.linalg.solve(ab, vs)")
    -- float64
    local a64 = general({ 6, 6 }, 4):cast("float64"):realize()
    lines[#lines + 1] = "a64 = " .. L(a64) .. ".double()"
    add("inv64", a64:inv(), "torch.linalg.inv(a64)")
    add("det64", a64:det(), "torch.linalg.det(a64)")
    local ref = torch_ref.run(lines)
    for _, name in ipairs(cases) do
      local rtol = name:find("64") and 1e-10 or 2e-4
      torch_ref.assert_close({ [name] = ours[name] }, { [name] = ref[name] }, rtol)
    end
    assert.are.same({ 2, 3 }, batch:det().shape)
    assert.are.same({ 2, 3, 4 }, batch:solve(vectors).shape)
    assert.are.equal("float64", tostring(a64:inv().dtype))
  end)

  it("give torch's gradients for every input", function()
    if not torch_ref.python() then pending("torch is not available") return end
    local a = general({ 2, 4, 4 }, 3):realize()
    local b = general({ 4, 2 }, 8):realize()
    local s = spd(4, 5)
    local w = general({ 2, 4, 4 }, 11):realize() -- the upstream gradient's weights
    local w2 = general({ 2, 4, 2 }, 12):realize()
    local ref = torch_ref.run({
      "torch.set_grad_enabled(True)",
      string.format("a0, b0, s0, w, w2 = %s, %s, %s, %s, %s", L(a), L(b), L(s), L(w), L(w2)),
      "def grads(f, *xs):\n  xs = [x.clone().requires_grad_() for x in xs]\n  f(*xs).backward()\n" ..
      "  return [x.grad for x in xs]",
      "out['inv'] = grads(lambda a: (torch.linalg.inv(a) * w).sum(), a0)",
      "out['det'] = grads(lambda a: (torch.linalg.det(a) * torch.tensor([1.5, -0.5])).sum(), a0)",
      "out['slogdet'] = grads(lambda a: (torch.linalg.slogdet(a)[1] * torch.tensor([1.5, -0.5])).sum(), a0)",
      "out['solve'] = grads(lambda a, b: (torch.linalg.solve(a, b) * w2).sum(), a0, b0)",
      -- torch's cholesky reads the lower triangle; its gradient is the symmetrized rule
      "out['chol'] = grads(lambda s: (torch.linalg.cholesky(s) * w[0]).sum(), s0)",
    })
    local function grads(f, ...)
      local xs = {}
      for i, x in ipairs({ ... }) do xs[i] = x:detach():requires_grad_() end
      local loss = f(table.unpack(xs))
      return { loss:gradient(table.unpack(xs)) }
    end
    local ours = {
      inv = grads(function(x) return x:inv():mul(w):sum() end, a),
      det = grads(function(x) return x:det():mul(Tensor({ 1.5, -0.5 })):sum() end, a),
      slogdet = grads(function(x)
        local _, logabs = x:slogdet()
        return logabs:mul(Tensor({ 1.5, -0.5 })):sum()
      end, a),
      solve = grads(function(x, y) return x:solve(y):mul(w2):sum() end, a, b),
      chol = grads(function(x) return x:cholesky():mul(w[1]):sum() end, s),
    }
    for name, list in pairs(ours) do
      for i, g in ipairs(list) do
        torch_ref.assert_close({ [name .. i] = g }, { [name .. i] = ref[name][i] }, 2e-4)
      end
    end
  end)

  it("handle 0 x 0 and 1 x 1 matrices, and say what singular and indefinite matrices give", function()
    local empty = Tensor.zeros({ 3, 0, 0 })
    assert.are.same({ 1, 1, 1 }, empty:det():tolist())
    assert.are.same({ 3, 0, 0 }, empty:inv().shape)
    assert.are.same({ { 0.25 } }, Tensor({ { 4.0 } }):inv():tolist())
    assert.are.same({ { 2 } }, Tensor({ { 4.0 } }):cholesky():tolist())
    assert.are.equal(-3, Tensor({ { -3.0 } }):det():item())
    -- singular: det 0, the inverse not finite
    local singular = Tensor({ { 1.0, 2 }, { 2, 4 } })
    assert.are.equal(0, singular:det():item())
    local inv = singular:inv():flatten():tolist()
    local finite = true
    for _, v in ipairs(inv) do
      if v ~= v or v == math.huge or v == -math.huge then finite = false end
    end
    assert.is_false(finite)
    local sign, logabs = singular:slogdet()
    assert.are.equal(0, sign:item())
    assert.are.equal(-math.huge, logabs:item())
    -- not positive-definite: nan from the first column whose pivot is not positive
    local l = Tensor({ { 1.0, 2 }, { 2, 1 } }):cholesky():tolist()
    assert.are.equal(1, l[1][1])
    assert.is_true(l[2][2] ~= l[2][2])
  end)

  it("compile the same kernels for every column: a 24 x 24 elimination compiles no more than a 6 x 6 one", function()
    local lower = require "tcl.codegen.driver.lower"
    -- the distinct kernels one det needs (compiled, or read from the disk cache) and those it runs
    local function kernels(n)
      local a = general({ n, n }, 1):realize()
      tcl.kernel_cache.clear()
      local before, ran = lower.stats(), lower.totals().kernels
      a:det():realize()
      local after = lower.stats()
      return after.built - before.built + after.disk_hits - before.disk_hits, lower.totals().kernels - ran
    end
    local small, small_runs = kernels(6)
    local large, large_runs = kernels(24)
    assert.is_true(large <= small, string.format("6 x 6: %d kernels, 24 x 24: %d", small, large))
    assert.is_true(small <= 16, small .. " distinct kernels")
    assert.is_true(large_runs > 4 * small_runs - 10, string.format("runs: %d and %d", small_runs, large_runs))
  end)

  it("errors name the function, the shapes and the dtypes", function()
    local cases = {
      { function() Tensor.zeros({ 2, 3 }):inv() end,
        "inv: the input must be a square matrix or a batch of them (..., n, n), got shape (2, 3)" },
      { function() Tensor({ 1.0, 2 }):det() end, "det: the input must be a square matrix" },
      { function() Tensor({ { 1, 2 }, { 3, 4 } }):det() end, "det: needs a float32 or float64 tensor, got int32" },
      { function() Tensor.eye(3):solve(Tensor.ones({ 2, 1 })) end,
        "solve: B must be (..., 3, k) or (..., 3) for A of shape (3, 3), got shape (2, 1)" },
      { function() Tensor.eye(3):solve(Tensor({ 1, 2, 3 })) end, "solve: A is float32 and B int32" },
      { function() Tensor.zeros({ 2, 3, 3 }):solve(Tensor.zeros({ 4, 3, 1 })) end,
        "solve: the batch dims of A (2, 3, 3) and B (4, 3, 1) do not broadcast" },
      { function() Tensor.eye(2):cholesky({ upper = 1 }) end, "cholesky: upper must be a boolean, got number" },
      { function() Tensor.eye(2):cholesky({ lower = true }) end, "cholesky" },
      { function() Tensor.eye(2):slogdet(1) end, "slogdet" },
    }
    for _, c in ipairs(cases) do helper.fails_with(c[2], c[1]) end
  end)
end)
