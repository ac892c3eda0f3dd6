-- bench/export_bench.lua — a model exported ahead of time (tcl.export, built with cc -O2 into a
-- small C driver written here) against the same model under tcl.jit, in the same run: the
-- median latency of one forward pass, wall clock. Target (issue 12): the export at least as
-- fast as the jit (ratio export/jit <= 1).
--
--   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j
--   LUA_PATH='lua/?.lua;lua/?/init.lua;./?.lua' LUA_CPATH='build-rel/lua/?.so' lua5.4 bench/export_bench.lua
--   THREADS=1 ... lua5.4 bench/export_bench.lua          one thread for both
--
-- Models: the MLP 784-128-10 at batch 1 and 64, and a CNN (two Conv2d + max pooling, Linear)
-- at batch 8. Two exports per model: as exported by default (embedded weights, kernels that
-- compute only from weights folded into them at export) and with fold = false, which runs
-- exactly the jit's kernels. Both sides use the same kernels (compiled once, by the first
-- export's capture) and the same threads: the jit's pool has THREADS (default: the cores), the exported model is opened
-- with THREADS (0, one per CPU, when unset). The jit's figure is a replayed call of the plan
-- (inputs already realized, outputs left in the plan's buffers, as the C driver's are);
-- BENCH_RUNS (default 2001) runs per median, after warm-up runs.
local support = require "bench.support"
local tcl = require "tcl"
local env = require "tcl.env"
local Tensor, nn = tcl.Tensor, tcl.nn
local median, shell_quote, capture = support.median, support.shell_quote, support.capture

local RUNS = tonumber(os.getenv("BENCH_RUNS") or "") or 2001

-- The C driver: opens the model, runs it `runs` times after warm-up runs, prints the median.
local DRIVER = [[
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "@name@.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0, runs = argc > 2 ? atoi(argv[2]) : 1001;
    @name@ *m;
    if (@name@_open(&m, NULL, threads) != 0) {
        fprintf(stderr, "%s\n", @name@_error(NULL));
        return 1;
    }
    const void *in[@NAME@_NUM_INPUTS];
    void *out[@NAME@_NUM_OUTPUTS];
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) {
        float *p = aligned_alloc(64, (@name@_inputs[i].bytes + 63) / 64 * 64);
        for (size_t k = 0; k < @name@_inputs[i].bytes / sizeof *p; k++) p[k] = (float)(k % 17) / 17.0f - 0.5f;
        in[i] = p;
    }
    for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++) out[o] = aligned_alloc(64, (@name@_outputs[o].bytes + 63) / 64 * 64);
    double *times = malloc((size_t)runs * sizeof *times);
    for (int r = 0; r < runs / 10 + 3; r++) @name@_run(m, in, out);
    for (int r = 0; r < runs; r++) {
        double start = now();
        @name@_run(m, in, out);
        times[r] = now() - start;
    }
    qsort(times, (size_t)runs, sizeof *times, by_value);
    printf("median_us %.3f threads %d\n", times[runs / 2] * 1e6, @name@_threads(m));
    @name@_close(m);
    return 0;
}
]]

local function mlp(batch)
  Tensor.manual_seed(0)
  local model = nn.Sequential { nn.Linear(784, 128), Tensor.relu, nn.Linear(128, 10) }
  return function(x) return model(x) end, Tensor.randn(batch, 784):realize()
end

local function cnn(batch)
  Tensor.manual_seed(0)
  local function pool(x) return x:max_pool2d(2) end
  local model = nn.Sequential {
    nn.Conv2d(1, 32, 3), Tensor.relu, pool, nn.Conv2d(32, 64, 3), Tensor.relu, pool,
    function(x) return x:flatten(2) end, nn.Linear(64 * 5 * 5, 10),
  }
  return function(x) return model(x) end, Tensor.randn(batch, 1, 28, 28):realize()
end

local CASES = {
  { what = "MLP 784-128-10, batch 1", make = function() return mlp(1) end },
  { what = "MLP 784-128-10, batch 64", make = function() return mlp(64) end },
  { what = "CNN (2 conv + pool, linear), batch 8", make = function() return cnn(8) end },
}

local function jit_median_us(forward, x)
  local step = tcl.jit(forward)
  for _ = 1, RUNS // 10 + 3 do step(x) end -- warm-up, capture, replays
  local times = {}
  for i = 1, RUNS do
    local start = tcl.clock()
    step(x)
    times[i] = (tcl.clock() - start) * 1e6
  end
  return median(times)
end

local function export_median_us(dir, name, forward, x, fold)
  local summary = tcl.export(forward, { x }, { dir = dir, name = name, fold = fold })
  local driver = dir .. "/driver.c"
  local f = assert(io.open(driver, "w"))
  f:write((DRIVER:gsub("@name@", name):gsub("@NAME@", name:upper())))
  f:close()
  local files = { driver, dir .. "/" .. name .. ".c" }
  for _, file in ipairs(summary.files) do
    if file:match("_weights%.c$") or file:match("%.o$") then files[#files + 1] = dir .. "/" .. file end
  end
  local quoted = {}
  for i, file in ipairs(files) do quoted[i] = shell_quote(file) end
  local program = dir .. "/driver"
  local out = capture(string.format("cc -std=c11 -O2 -I %s %s -lpthread -lm -o %s && %s %d %d", shell_quote(dir),
    table.concat(quoted, " "), shell_quote(program), shell_quote(program), env.THREADS or 0, RUNS))
  local us, threads = out:match("median_us (%S+) threads (%d+)")
  if not us then error("the exported driver failed:\n" .. out, 0) end
  return tonumber(us), tonumber(threads), summary
end

local tmp = capture("mktemp -d"):gsub("%s+$", "")
print(string.format("export vs tcl.jit: median of %d runs, wall clock, microseconds per forward pass", RUNS))
print(string.format("  %-38s %9s %9s %9s %11s  %s", "model", "tcl.jit", "export", "no fold", "export/jit",
  "kernel runs (jit, export), arena"))
local ok, err = pcall(function()
  for i, case in ipairs(CASES) do
    local forward, x = case.make()
    -- the exports first: their capture compiles the kernels the jit then finds in the cache
    local plain_us, _, plain = export_median_us(tmp .. "/plain" .. i, "plain" .. i, forward, x, false)
    local export_us, threads, summary = export_median_us(tmp .. "/case" .. i, "model" .. i, forward, x)
    local jit_us = jit_median_us(forward, x)
    local ratio, plain_ratio = export_us / jit_us, plain_us / jit_us
    print(string.format("  %-38s %9.2f %9.2f %9.2f %5.2f %5.2f  %d, %d, %d KiB   (%s; %d threads)", case.what, jit_us,
      export_us, plain_us, ratio, plain_ratio, plain.steps, summary.steps, summary.arena_bytes // 1024,
      math.max(ratio, plain_ratio) <= 1 and "PASS" or "MISS", threads))
  end
end)
os.execute("rm -rf " .. shell_quote(tmp))
if not ok then error(err, 0) end
