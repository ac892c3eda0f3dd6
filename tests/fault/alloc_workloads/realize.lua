-- The runtime path: CPU buffers, kernels compiled and run (LLVM's own allocations are not
-- counted), a matmul with its gradient, the same on the EMU device (its programs and
-- interpreter), values read back, a safetensors file written and loaded (file mapping) and a
-- gzip file read.
local tcl = require "tcl"
local Tensor = tcl.Tensor
local dir = os.getenv("ALLOC_FAULTS_DIR")
local a = Tensor.arange(12):reshape(3, 4)
local s = (a * 2 + 1):sum(2):tolist()
assert(s[1] == 16 and s[2] == 48 and s[3] == 80, "sums")
local w = Tensor({ { 1, 2 }, { 3, 4 } }, { dtype = "float32", requires_grad = true })
local loss = (w:matmul(w) * 0.5):sum()
loss:backward()
local g = w.grad:tolist()
assert(g[1][1] == 3.5 and g[2][2] == 6.5, "gradient")
local e = (Tensor({ 1, 2, 3 }, { device = "EMU" }) * 3):max():item()
assert(e == 9, "EMU")
tcl.nn.state.safe_save({ w = Tensor({ 1.5, 2.5, 3.5 }) }, dir .. "/w.safetensors")
local loaded = tcl.nn.state.safe_load(dir .. "/w.safetensors").w:tolist()
assert(loaded[1] == 1.5 and loaded[3] == 3.5, "weights")
assert(tcl.data.read_gzip(dir .. "/text.gz") == "tcl\n", "gzip")
