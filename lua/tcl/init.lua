-- tcl — the Lua module of the tcl tensor compiler: gathers the public Lua API in one table.
-- Nothing inside tcl requires this module; each stage has a folder of its own
-- (docs/design/layout.md), and dependencies point one way: api -> schedule -> codegen -> patterns ->
-- the core bindings (tcl.core, tcl.uop, tcl.pattern, tcl.shape, tcl.env, C modules).
--
--   tcl.api        the Tensor API: lazy tensors (lua/tcl/api/)
--   tcl.schedule   realize points, fusion, rangeify, buffers: kernels (lua/tcl/schedule/)
--   tcl.codegen    the lowering passes (passes/), the driver: lowering, linearizer, kernel cache,
--                  optimizer (driver/), and the devices' backends (devices/) (lua/tcl/codegen/)
--   tcl.patterns   rule files and the ordered pass pipeline (lua/tcl/patterns/)
local core = require "tcl.core"
local UOp = require "tcl.uop"
local pattern = require "tcl.pattern"
local class = require "tcl.api.class"
local Tensor = require "tcl.api.tensor"
local index_checks = require "tcl.api.index_checks"
local kernel_cache = require "tcl.codegen.driver.kernel_cache"
local plan_cache = require "tcl.schedule.plan_cache"
local lower = require "tcl.codegen.driver.lower"
local check = require "tcl.api.check"

-- tcl's own functions, refusing a stray argument like the Tensor API (check.fixed_arguments)
local fixed = check.fixed_arguments

local tcl = {
  core = core,
  version = core.version,
  env = require "tcl.env",
  -- tcl.context{DEBUG = 4}(fn, ...): fn(...) with those settings (tcl.env fields), undone after
  context = require "tcl.context",
  uop = core.uop, -- builds a node
  UOp = UOp,      -- the node class: methods, operators, UOp.const
  dtypes = core.dtypes,
  dtype = core.dtype,
  promote = core.promote,
  ops = core.ops,
  groups = core.groups,
  op_in = core.op_in,
  live_nodes = core.live_count,
  pattern = pattern,
  rules = pattern.rules,
  graph_rewrite = pattern.graph_rewrite,
  substitute = pattern.substitute,
  -- the Tensor API: tcl.Tensor, and tcl.realize(t1, t2, ...) for one schedule of several tensors
  Tensor = Tensor,
  realize = Tensor.realize_all,
  -- tcl.manual_seed(n): restarts the random streams of every device (docs/guide/tensors.md, "Random numbers")
  manual_seed = Tensor.manual_seed,
  -- variable sizes: T = tcl.var("T", 1, 1024); x:reshape(4, T:bind(17)) (docs/guide/language-models.md)
  var = require("tcl.variables").new,
  -- execution plans: tcl.jit(fn) captures the kernels fn runs and replays them on new inputs
  jit = require("tcl.api.jit").jit,
  -- ahead-of-time export: tcl.export(fn, inputs, { dir =, name =, weights = }) writes C sources and
  -- the kernels' object code that build into a program needing only libc and pthreads (tcl.export,
  -- loaded on first use)
  export = function(...) return require("tcl.export").export(...) end,
  -- ONNX import: tcl.onnx.load(path) (docs/guide/onnx.md; lua/tcl/onnx, loaded on first use)
  onnx = setmetatable({}, { __index = function(_, k) return require("tcl.onnx")[k] end }),
  -- autograd (docs/guide/training.md, "Autograd"): scoped gradient switches and the functional transforms
  no_grad = Tensor.no_grad,
  enable_grad = Tensor.enable_grad,
  grad = require("tcl.api.transforms").grad,
  value_and_grad = require("tcl.api.transforms").value_and_grad,
  vjp = require("tcl.api.transforms").vjp,
  jvp = require("tcl.api.transforms").jvp,
  vmap = require("tcl.api.transforms").vmap,
  -- layers (tcl.nn; tcl.nn.state: parameters, state dicts, safetensors files)
  nn = require "tcl.api.layers",
  -- data: IDX files, Fashion-MNIST, DataLoader, gzip (lua/tcl/api/data.lua)
  data = require "tcl.api.data",
  -- progress bars: tcl.progress.new{ total =, label = }, tcl.progress.wrap(iterator, opts)
  -- (lua/tcl/progress.lua; drawn only on a terminal unless TCL_PROGRESS says otherwise)
  progress = require "tcl.progress",
  -- collectives between the ranks of a job (mpirun -np 2 tcl train.lua): tcl.distributed.rank(),
  -- world_size(), all_reduce, broadcast, all_gather, barrier (lua/tcl/distributed, loaded on first use)
  distributed = setmetatable({}, { __index = function(_, k) return require("tcl.distributed")[k] end }),
  -- optimizers: SGD, Adam, AdamW, LAMB (lua/tcl/api/optim.lua)
  optim = require "tcl.api.optim",
  -- tokenizers from a GGUF vocabulary: tcl.tokenizer.from_metadata (lua/tcl/api/tokenizer.lua;
  -- loaded on first use, with its Unicode tables)
  tokenizer = setmetatable({}, { __index = function(_, k) return require("tcl.api.tokenizer")[k] end }),
  -- language models (lua/tcl/models, each loaded on first use): tcl.models.transformer (GPT-2 and
  -- LLaMA, HF's parameter names, safetensors and GGUF checkpoints), tcl.models.sampling (greedy,
  -- temperature, top-k, top-p), tcl.models.kv_cache
  models = setmetatable({}, { __index = function(_, k)
    if k == "transformer" or k == "sampling" or k == "kv_cache" then return require("tcl.models." .. k) end
  end }),
  -- kernel opts: tcl.set_heuristic(fn | "file.lua" | nil) replaces the default heuristic for the
  -- kernels compiled from then on (docs/guide/optimization.md)
  set_heuristic = fixed("set_heuristic", require("tcl.codegen.driver.optimize").set_heuristic),
  -- the compiled-kernel cache: its figures, its bound in bytes, emptying it
  kernel_cache = check.fix_arguments({ stats = kernel_cache.stats, set_limit = kernel_cache.set_limit,
    clear = kernel_cache.clear }, "kernel_cache."),
  -- the plans kept for graphs of the same structure (tcl.schedule.plan_cache): figures, emptying it
  plan_cache = check.fix_arguments({ stats = plan_cache.stats, clear = plan_cache.clear }, "plan_cache."),
}

--- tcl.synchronize([device]) waits for the kernels a GPU has queued (CUDA and Metal launch
-- without waiting; reading a result back waits too), and then reports the index checks of that
-- device (of every device when nil) as a read to the host does (tcl.api.index_checks).
tcl.synchronize = fixed("synchronize", function(device)
  return index_checks.synchronize(device, lower.synchronize) -- a tail call: errors point at the caller
end)

--- tcl.clock() — seconds of a monotonic wall clock (only differences mean something).
tcl.clock = core.clock

--- tcl.profile(fn, ...) — calls fn(...) and returns a report and then fn's results: every
-- kernel run, copy and compile of the call, timed ({ kernels = { {name =, device =, start =,
-- seconds =, ops =, bytes =}, ... }, copies =, compiles =, seconds = (kernel time), wall = });
-- print(report) shows the kernels by time with their roofline, tcl.profile.save(path) writes
-- the last report as a Chrome trace (lua/tcl/profile/init.lua).
tcl.profile = require "tcl.profile"

-- dtype objects as module fields: tcl.float32, tcl.int32, ...
for name, dt in pairs(core.dtypes) do tcl[name] = dt end

-- tcl.training (read and written here, kept by the Tensor API) turns dropout on.
return setmetatable(tcl, {
  __index = function(_, key) if key == "training" then return class.training end end,
  __newindex = function(t, key, value)
    if key == "training" then class.training = value == true else rawset(t, key, value) end
  end,
})
