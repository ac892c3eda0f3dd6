-- tcl.api.linalg — square-matrix decompositions: inv, det, slogdet, solve and cholesky, over the
-- last two dims (leading dims are a batch). Layer: lua/tcl/api.
--
-- They are built from the lazy graph ops, so they run on every device and need no library:
--   * inv, det, slogdet and solve run Gauss-Jordan elimination with partial pivoting on [A | B],
--     one step per column, unrolled in the graph. The step's column enters as data (one-hot rows
--     made here, a buffer each), not as a constant, so every step has the same kernels: an n x n
--     elimination compiles about as much as a 2 x 2 one and runs about 5 small kernels per
--     column. The pivot is the largest |entry| of the column among the rows not yet used (as
--     LAPACK's getrf); the determinant is the product of the pivots, its sign flipped per swap.
--   * cholesky runs the column-by-column (left-looking) factorization, one step per column in
--     the same way.
-- So the work is O(n^3) flops in O(n) steps of O(n^2) each: meant for the small and medium
-- matrices of models (covariances, whitening, small systems); a large system is better solved
-- by an iterative method.
-- Gradients are closed forms (tcl.api.gradients.mark, the "vjp" composite), not the derivative
-- of the elimination: inv -X^T g X^T; det g det A^-T; slogdet g A^-T; solve: gB = A^-T g,
-- gA = -gB X^T; cholesky: PyTorch's rule, symmetrized.
-- A singular matrix is not detected (the graph is lazy): inv and solve give inf or nan there,
-- det gives 0 (or a tiny value from rounding), as LAPACK-free elimination does; cholesky of a
-- matrix that is not positive-definite gives nan.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local gradients = require "tcl.api.gradients"

local M = {}

local fail = check.fail

local FLOATS = { float32 = true, float64 = true }

-- A checked stack of square matrices: its n.
local function square(fn, a, what)
  check.tensor(fn, a)
  local shape = a._shape
  if #shape < 2 or shape[#shape] ~= shape[#shape - 1] then
    fail(fn, "%s must be a square matrix or a batch of them (..., n, n), got shape %s", what or "the input",
      check.shape_str(shape))
  end
  local dtype = tostring(a.dtype)
  if not FLOATS[dtype] then fail(fn, "needs a float32 or float64 tensor, got %s", dtype) end
  return shape[#shape]
end

-- The step data of an n x n elimination over w columns: per column j, the one-hot row e_j
-- (n), the rows not yet used (n: 1 from row j on) and the one-hot column (w).
local function step_data(n, w, dtype, device)
  local steps = {}
  for j = 1, n do
    local e, rest, col = {}, {}, {}
    for i = 1, n do
      e[i] = i == j and 1 or 0
      rest[i] = i >= j and 1 or 0
    end
    for i = 1, w do col[i] = i == j and 1 or 0 end
    local opts = { dtype = dtype, device = device }
    steps[j] = { e = class.Tensor(e, opts), rest = class.Tensor(rest, opts), col = class.Tensor(col, opts) }
  end
  return steps
end

-- Gauss-Jordan on m = [A | B] (..., n, w), w >= n: returns the reduced matrix (A's part the
-- identity, B's part A^-1 B) and det(A) (...). Every op below has the same shapes at every step.
local function eliminate(m, n)
  local shape = m._shape
  local w = shape[#shape]
  local dtype, device = tostring(m.dtype), m.device
  local positions = class.Tensor.arange(1, n + 1, { dtype = "int32", device = device })
  local det = nil
  for _, s in ipairs(step_data(n, w, dtype, device)) do
    local e = s.e
    local column = m:mul(s.col):sum(-1) -- (..., n): column j
    -- candidates: |entry| in the rows not used yet, -1 in the others
    local score = column:abs():mul(s.rest):sub(s.rest:neg():add(1))
    local pivot_row = positions:eq(score:argmax(-1, true)):cast(dtype) -- (..., n) one-hot
    local row_p = pivot_row:unsqueeze(-1):mul(m):sum(-2) -- (..., w)
    local row_j = e:unsqueeze(-1):mul(m):sum(-2)
    local pivot = row_p:mul(s.col):sum(-1, true) -- (..., 1)
    local current = column:mul(e):sum(-1, true) -- entry (j, j) before the swap
    local swap = e:sub(pivot_row) -- (..., n): rows j and p exchange (zero when p = j)
    local swapped = m:add(swap:unsqueeze(-1):mul(row_p:sub(row_j):unsqueeze(-2)))
    local column_after = column:add(swap:mul(pivot:sub(current)))
    local new_row = row_p:div(pivot)
    local others = column_after:mul(e:neg():add(1)) -- the column, zero at row j
    -- contiguous: every step stores its matrix, so the next step's kernels are this one's
    -- (fused into its readers instead, the steps would make ever deeper, different kernels)
    m = swapped:sub(others:unsqueeze(-1):mul(new_row:unsqueeze(-2)))
      :add(e:unsqueeze(-1):mul(new_row:sub(row_p):unsqueeze(-2))):contiguous()
    -- a swap flips the sign: moved = 1 when p ~= j
    local moved = pivot_row:mul(e):sum(-1, true):neg():add(1)
    local factor = pivot:mul(moved:mul(-2):add(1)):squeeze(-1)
    det = det and det:mul(factor):contiguous() or factor
  end
  return m, det
end

-- a (..., n, n) and b (..., n, k) with their batch dims broadcast to one shape.
local function broadcast_batch(fn, a, b)
  local sa, sb = a._shape, b._shape
  local batch = check.broadcast_shapes(table.move(sa, 1, #sa - 2, 1, {}), table.move(sb, 1, #sb - 2, 1, {}))
  if not batch then
    fail(fn, "the batch dims of A %s and B %s do not broadcast", check.shape_str(sa), check.shape_str(sb))
  end
  local function expanded(t)
    local s, target = t._shape, table.move(batch, 1, #batch, 1, {})
    target[#target + 1], target[#target + 2] = s[#s - 1], s[#s]
    return t:expand(table.unpack(target))
  end
  return expanded(a), expanded(b)
end

local function identity_like(a, n)
  return class.Tensor.eye(n, { dtype = tostring(a.dtype), device = a.device })
end

local function mT(t) return t:transpose(-1, -2) end

--- inv(A): the inverse of a square matrix (..., n, n), by Gauss-Jordan elimination with partial
--  pivoting in the graph (float32 or float64; a batch of matrices in the leading dims). A
--  singular matrix gives inf or nan (nothing is read back to check). Gradient -X^T g X^T.
function M.inv(a)
  local n = square("inv", a)
  if n == 0 then return a end
  local eye = identity_like(a, n):expand(table.unpack(a.shape))
  local m = eliminate(class.Tensor.cat({ a, eye }, -1), n)
  local x = m:narrow(-1, n + 1, n)
  return gradients.mark(x, "vjp", { a }, { vjp = function(c)
    local xt = mT(c.out)
    return { xt:matmul(c.grad):matmul(xt):neg() }
  end })
end

--- det(A): the determinant of a square matrix (..., n, n) -> (...), the product of the pivots of
--  Gauss-Jordan elimination with partial pivoting (a sign flip per row swap); 1 for 0 x 0.
--  Gradient g det A^-T (A singular: nan, as the inverse is).
function M.det(a)
  local n = square("det", a)
  local batch = table.move(a.shape, 1, #a.shape - 2, 1, {})
  if n == 0 then return class.Tensor.ones(batch, { dtype = tostring(a.dtype), device = a.device }) end
  local _, d = eliminate(a, n)
  return gradients.mark(d, "vjp", { a }, { vjp = function(c)
    local scale = c.grad:mul(c.out):unsqueeze(-1):unsqueeze(-1)
    return { mT(M.inv(c.inputs[1])):mul(scale) }
  end })
end

--- slogdet(A): the sign (-1, 0 or 1) and the log of the absolute value of det(A), two tensors
--  (...); a singular matrix gives sign 0 and -inf. The gradient of the log is A^-T.
function M.slogdet(a)
  local n = square("slogdet", a)
  local batch = table.move(a.shape, 1, #a.shape - 2, 1, {})
  if n == 0 then
    local opts = { dtype = tostring(a.dtype), device = a.device }
    return class.Tensor.ones(batch, opts), class.Tensor.zeros(batch, opts)
  end
  local _, d = eliminate(a, n)
  local logabs = gradients.mark(d:abs():log(), "vjp", { a }, { vjp = function(c)
    return { mT(M.inv(c.inputs[1])):mul(c.grad:unsqueeze(-1):unsqueeze(-1)) }
  end })
  return d:sign(), logabs
end

--- solve(A, B): X with A X = B, for A (..., n, n) and B (..., n, k), or B (..., n) (a vector
--  right-hand side, as torch.linalg.solve: B of rank 1, or of A's shape less its last dim); the
--  batch dims broadcast. Gauss-Jordan elimination with partial pivoting on [A | B]. Gradients:
--  gB = A^-T g, gA = -gB X^T.
function M.solve(a, b)
  local fn = "solve"
  local n = square(fn, a, "A")
  check.tensor(fn, b)
  if tostring(b.dtype) ~= tostring(a.dtype) then
    fail(fn, "A is %s and B %s: they need one dtype", tostring(a.dtype), tostring(b.dtype))
  end
  local sa, sb = a._shape, b._shape
  local vector = #sb == 1 or (#sb == #sa - 1 and sb[#sb] == n and check.same_shape(
    table.move(sb, 1, #sb - 1, 1, {}), table.move(sa, 1, #sa - 2, 1, {})))
  local rhs = vector and b:unsqueeze(-1) or b
  local sr = rhs._shape
  if #sr < 2 or sr[#sr - 1] ~= n then
    fail(fn, "B must be (..., %d, k) or (..., %d) for A of shape %s, got shape %s", n, n, check.shape_str(sa),
      check.shape_str(sb))
  end
  local ea, eb = broadcast_batch(fn, a, rhs)
  local k = sr[#sr]
  local x
  if n == 0 or k == 0 then
    x = eb
  else
    local m = eliminate(class.Tensor.cat({ ea, eb }, -1), n)
    x = m:narrow(-1, n + 1, k)
  end
  -- marked on the broadcast operands: the engine's EXPAND rule sums the gradients back
  x = gradients.mark(x, "vjp", { ea, eb }, { vjp = function(c)
    local gb = M.solve(mT(c.inputs[1]), c.grad)
    return { gb:matmul(mT(c.out)):neg(), gb }
  end })
  return vector and x:squeeze(-1) or x
end

-- The lower-triangular L with L L^T = a (..., n, n), one column per step (left-looking): column
-- j is (a[:, j] - L L[j, :]^T) over sqrt of its diagonal entry, below the diagonal. Steps enter
-- as data, as in eliminate.
local function cholesky_lower(a, n)
  local dtype, device = tostring(a.dtype), a.device
  local l = class.Tensor.zeros(a.shape, { dtype = dtype, device = device })
  for _, s in ipairs(step_data(n, n, dtype, device)) do
    local e = s.e
    local row_j = e:unsqueeze(-1):mul(l):sum(-2) -- (..., n): L[j, :] (zero from column j on)
    local column = a:mul(s.col):sum(-1) -- (..., n): a[:, j]
    local residual = column:sub(l:mul(row_j:unsqueeze(-2)):sum(-1))
    local diagonal = residual:mul(e):sum(-1, true):sqrt() -- (..., 1); nan when not positive
    -- where, not a product with the masks: a nan column must not reach the columns before it
    local new_column = s.rest:gt(0):where(residual:div(diagonal), 0) -- rows >= j only
    l = s.col:gt(0):where(new_column:unsqueeze(-1), l):contiguous()
  end
  return l
end

--- cholesky(A, {upper = false}): the lower-triangular L with L L^T = A for a symmetric
--  positive-definite A (..., n, n) (only A's lower triangle is read, as torch.linalg.cholesky),
--  or the upper U = L^T with upper = true. A matrix that is not positive-definite gives nan
--  (the graph is lazy: nothing is read back to raise torch's error). Gradient: PyTorch's rule,
--  L^-T Phi(L^T g) L^-1 symmetrized (Phi: the lower triangle, its diagonal halved).
function M.cholesky(a, opts)
  local fn = "cholesky"
  local n = square(fn, a)
  opts = check.options(fn, opts, { upper = true })
  local upper = opts.upper or false
  if type(upper) ~= "boolean" then fail(fn, "upper must be a boolean, got %s", check.type_name(upper)) end
  if n == 0 then return a end
  local l = cholesky_lower(a:tril(), n)
  -- the lower triangle only: symmetric reads of a would count the upper triangle twice
  l = gradients.mark(l, "vjp", { a }, { vjp = function(c)
    local lo = c.out
    local phi = mT(lo):matmul(c.grad):tril()
    local eye = identity_like(lo, n)
    phi = phi:sub(phi:mul(eye):mul(0.5))
    local l_inv = M.inv(lo)
    local g = mT(l_inv):matmul(phi):matmul(l_inv)
    return { g:add(mT(g)):mul(0.5) }
  end })
  return upper and mT(l) or l
end

return M
