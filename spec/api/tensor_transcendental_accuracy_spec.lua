-- spec/api/tensor_transcendental_accuracy_spec.lua — the Tensor API's transcendental functions in
-- float32 against C's libm in double (Lua's math; double formulas where it has no function:
-- tanh, expm1, log1p), rounded once to float32: the max error in float32 ulps over a sweep of
-- each function's inputs must stay within Tensor.ULP_BOUNDS (written next to each function in
-- lua/tcl/api/elementwise.lua). Runs on the default device (CPU) and again with DEVICE=EMU.
-- Sweeps (spec/support/ulp.lua): zeros, denormals, the largest float32, infinities and NaN,
-- random bits of every magnitude, and where each function is hard: the overflow and underflow
-- thresholds of exp, multiples of pi/2 and huge arguments of sin/cos/tan, cancellation near 0.
-- A NaN or infinite reference must come out exactly. TCL_ULP_REPORT=1 prints the maxima.
local tcl = require "tcl"
local U = require "spec.support.ulp"

local Tensor = tcl.Tensor
local BOUNDS = Tensor.ULP_BOUNDS
local REPORT = os.getenv("TCL_ULP_REPORT")
local INF, NAN = U.INF, U.NAN

-- a generator seeded by the function's name, so each sweep is the same on every run
local function generator(name)
  local seed = 0
  for c in name:gmatch(".") do seed = (seed * 31 + c:byte()) % 2147483647 end
  local state = seed + 1
  return function() -- Park-Miller, in (0, 1)
    state = state * 48271 % 2147483647
    return state / 2147483647
  end
end

local function run(name, xs) return Tensor(xs)[name](Tensor(xs)):tolist() end

local UNARY = { "exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tan", "tanh", "sigmoid", "silu", "gelu",
  "softplus", "elu" }

describe("Tensor transcendentals in float32 against libm", function()
  it("have a bound for every function measured here", function()
    for _, name in ipairs(UNARY) do assert.is_number(BOUNDS[name], name) end
    assert.is_number(BOUNDS.logsumexp)
  end)

  for _, name in ipairs(UNARY) do
    it(string.format("%s is within its bound (%s ulp)", name, tostring(BOUNDS[name])), function()
      local xs = U.sweep(name, generator(name))
      local want = {}
      for k, x in ipairs(xs) do want[k] = U.reference[name](x) end
      local worst, at = U.max_error(name, xs, run(name, xs), want)
      assert(worst, at) -- nil: a NaN or an infinity wrong
      if REPORT then print(string.format("%-9s %6d inputs  max %3d ulp  %s", name, #xs, worst, tostring(at))) end
      assert(worst <= BOUNDS[name], string.format("%d ulp (bound %d) at %s", worst, BOUNDS[name], at))
    end)
  end

  it("give the special values exactly (signed zeros included)", function()
    local cases = {
      exp = { { -INF, 0.0 }, { INF, INF }, { 0.0, 1.0 }, { -0.0, 1.0 }, { 88.7228394, INF }, { -103.98, 0.0 } },
      sin = { { -0.0, -0.0 }, { 0.0, 0.0 }, { INF, NAN }, { -INF, NAN } },
      cos = { { -0.0, 1.0 }, { 0.0, 1.0 }, { INF, NAN }, { -INF, NAN } },
      tan = { { -0.0, -0.0 }, { INF, NAN } },
      tanh = { { -0.0, -0.0 }, { 0.0, 0.0 }, { INF, 1.0 }, { -INF, -1.0 }, { 100, 1.0 }, { -100, -1.0 } },
      sigmoid = { { INF, 1.0 }, { -INF, 0.0 }, { 0.0, 0.5 }, { -0.0, 0.5 } },
      silu = { { INF, INF }, { -INF, -0.0 }, { -0.0, -0.0 } },
      softplus = { { INF, INF }, { -INF, 0.0 } },
      elu = { { -INF, -1.0 }, { INF, INF } },
      log = { { 0.0, -INF }, { -0.0, -INF }, { INF, INF }, { -1, NAN }, { 1, 0.0 } },
      sqrt = { { -0.0, -0.0 }, { INF, INF }, { -1, NAN } },
    }
    for name, list in pairs(cases) do
      local xs = {}
      for k, case in ipairs(list) do xs[k] = U.f32(case[1]) end
      xs[#xs + 1] = NAN
      local got = run(name, xs)
      for k, case in ipairs(list) do
        local want, g = U.f32(case[2]), got[k]
        local ok = (want ~= want and g ~= g) or (U.bits(g) == U.bits(want))
        assert(ok, string.format("%s(%.9g) = %.9g, want %.9g", name, xs[k], g, want))
      end
      assert(U.isnan(got[#xs]), name .. "(NaN) is NaN")
    end
  end)
end)

describe("Tensor reductions built on exp and log in float32", function()
  -- rows of 16: moderate, wide (-100..100), near exp's overflow, near 0, and some with -inf
  local W = 16
  local rand = generator("rows")
  local rows = {}
  for r = 1, 1200 do
    local row, lo, hi = {}, table.unpack(({ { -10, 10 }, { -100, 100 }, { 80, 90 }, { -1, 1 } })[r % 4 + 1])
    for c = 1, W do row[c] = U.f32(lo + (hi - lo) * rand()) end
    if r % 50 == 0 then row[1] = -INF end
    rows[r] = row
  end

  it(string.format("logsumexp is within its bound (%s ulp)", tostring(BOUNDS.logsumexp)), function()
    local got = Tensor(rows):logsumexp(2):tolist()
    local worst, at = 0, nil
    for r, row in ipairs(rows) do
      local e = U.ulps(got[r], U.f32(U.logsumexp(row)))
      if e > worst then worst, at = e, r end
    end
    if REPORT then print(string.format("logsumexp max %d ulp (row %s)", worst, tostring(at))) end
    assert(worst <= BOUNDS.logsumexp, string.format("%d ulp at row %s", worst, tostring(at)))
  end)

  -- softmax rounds x - max in float32 first, an error exp multiplies by |x - max|; log_softmax's
  -- largest entry, max - logsumexp, cancels. Both are checked against that error model.
  it("softmax and log_softmax are within the error of rounding x - max", function()
    local sm, lsm = Tensor(rows):softmax(2):tolist(), Tensor(rows):log_softmax(2):tolist()
    for r, row in ipairs(rows) do
      local m = -INF
      for _, v in ipairs(row) do m = math.max(m, v) end
      local want_sm, want_lsm = U.softmax(row), U.log_softmax(row)
      for c = 1, W do
        local spread = row[c] == -INF and 0 or (m - row[c])
        local tol = (4 + spread) * 2.0 ^ -23 * want_sm[c] + 2.0 ^ -148
        assert(math.abs(sm[r][c] - want_sm[c]) <= tol,
          string.format("softmax row %d col %d: %.9g, want %.9g", r, c, sm[r][c], want_sm[c]))
        if want_lsm[c] == -INF then
          assert.equals(-INF, lsm[r][c])
        else
          tol = (4 + math.abs(want_lsm[c])) * 2.0 ^ -23
          assert(math.abs(lsm[r][c] - want_lsm[c]) <= tol,
            string.format("log_softmax row %d col %d: %.9g, want %.9g", r, c, lsm[r][c], want_lsm[c]))
        end
      end
    end
  end)
end)
