-- bench/conv_nd_bench.lua — a 1-d and a 3-d convolution forward (Tensor.conv1d / conv3d),
-- best of a few realized runs after a warm-up; the matching PyTorch figures come from
-- `python3 bench/conv_nd_bench.py` (THREADS=1 / torch.set_num_threads(1) for a fair pair).
local tcl = require "tcl"
local Tensor = tcl.Tensor

local CASES = {
  { "conv1d x(8,32,1024) w(64,32,5) pad 2", { 8, 32, 1024 }, { 64, 32, 5 }, { padding = 2 } },
  { "conv3d x(2,16,16,32,32) w(32,16,3,3,3) pad 1", { 2, 16, 16, 32, 32 }, { 32, 16, 3, 3, 3 }, { padding = 1 } },
}
for _, case in ipairs(CASES) do
  local x = Tensor.rand(case[2]):realize()
  local w = Tensor.rand(case[3]):realize()
  local best = math.huge
  for _ = 1, 4 do
    local t0 = tcl.clock()
    x:conv(w, nil, case[4]):realize()
    best = math.min(best, tcl.clock() - t0)
  end
  print(string.format("%-48s %8.2f ms", case[1], best * 1e3))
end
