-- tcl.conv_phases — the polyphase split of a strided convolution along one dim, shared by
-- conv2d's forward (tcl.api.nn) and its input gradient (tcl.patterns.gradient). Layer: the
-- package's arithmetic (no tensors here).
--
-- A convolution with stride s and dilation d reads padded input row o * s + k * d for output
-- row o and tap k. Split the padded rows by their residue r modulo s (phase r: rows j * s + r):
-- tap k reads phase (k * d) mod s only, at phase row o + m with m = (k * d - r) / s. So each
-- phase meets a subset of the taps, every s / gcd(d, s)-th one, and within the phase they are
-- a stride-1 correlation at dilation d / gcd(d, s). A strided convolution is the sum of these
-- stride-1 convolutions over phases stored contiguously, and its transposed convolution (the
-- input's gradient) is one stride-1 convolution per phase: neither reads with a stride nor
-- multiplies the zeros a dilated gradient would hold.
local M = {}

--- The taps of phase `residue` (0 <= residue < s) for a kernel of k taps: nil when none
-- reaches it, else { first = the first tap (0-based), taps = how many, step = the distance
-- between them in the kernel, dilation = the distance between their rows in the phase,
-- offset = m of the first tap (the phase row the first tap reads for output row 0) }.
function M.taps(s, d, k, residue)
  local gcd, rest = s, d % s
  while rest ~= 0 do gcd, rest = rest, gcd % rest end
  for tap = 0, k - 1 do
    if (tap * d) % s == residue then
      local step = s // gcd
      return { first = tap, taps = (k - 1 - tap) // step + 1, step = step, dilation = d // gcd,
        offset = (tap * d - residue) // s }
    end
  end
  return nil
end

--- The 1-based inclusive slice {start, stop, step} of a kernel dim that keeps phase p's taps.
function M.kernel_slice(p)
  return { p.first + 1, p.first + 1 + (p.taps - 1) * p.step, p.step }
end

return M
