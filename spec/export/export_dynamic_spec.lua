-- spec/export/export_dynamic_spec.lua — exports of variable sizes (tcl.export's dynamic, `tcl
-- export --dynamic T=1..64`): an attention-like function over a (T, 64) input, exported once,
-- built with `cc` alone into a test program written here, and run for T = 1, 7 and 64 on one
-- instance (1 and 2 threads, aligned and unaligned buffers): its outputs equal tcl's own at
-- those sizes bit for bit (the same kernels, compiled once for T) and a fixed-size computation
-- to rounding; the header's description of variable dims; one object per kernel; the errors of
-- the C API (an out-of-range T names T and its range, NAME_run on a dynamic model) and of the
-- export (dynamic with batch sizes, a variable no input uses, a dim the C API cannot
-- describe); the command's --dynamic flag and its usage errors.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local export = require "tcl.export"
local cli = require "tcl.export.cli"
local Tensor = tcl.Tensor
local q = helper.shell_quote

local CPU = { device = "CPU" }
local CFLAGS = "-std=c11 -Wall -Wextra -Werror -O2"
local D, MAX = 64, 64

-- The spec's program for the exported model `name`:
--   app run THREADS MISALIGN S IN OUT [S IN OUT ...]   runs NAME_run_sizes once per triple on
--                                                      one instance, S the sizes ("7", "3,2"),
--                                                      inputs read from IN, outputs
--                                                      (concatenated) written to OUT
--   app errors                                         the API's checks, one line each (a
--                                                      model of one variable in 1..@MAX@ and
--                                                      three outputs)
local DRIVER = [[
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "@name@.h"

static void *buffer(size_t bytes, int misalign) {
    unsigned char *p = aligned_alloc(64, (bytes + 64 + 63) / 64 * 64);
    if (!p) exit(3);
    return p + misalign;
}

#if @NAME@_NUM_OUTPUTS == 3
static void report(const char *what, int code, const char *message) { printf("%s %d %s\n", what, code, message); }

static int check_errors(void) {
    @name@ *m = NULL;
    if (@name@_open(&m, NULL, 1) != @NAME@_OK) return 1;
    printf("variables %d %s %lld %lld\n", @NAME@_NUM_VARIABLES, @name@_variables[0],
           (long long)@name@_variable_min[0], (long long)@name@_variable_max[0]);
    const void *in[@NAME@_NUM_INPUTS];
    void *out[@NAME@_NUM_OUTPUTS];
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) in[i] = buffer(@name@_inputs[i].bytes, 0);
    for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++) out[o] = buffer(@name@_outputs[o].bytes, 0);
    /* room for output 1 right after output 0 at a small T (below) */
    out[0] = buffer(@name@_outputs[0].bytes + @name@_outputs[1].bytes, 0);
    int64_t sizes[1] = {0};
    report("run", @name@_run(m, in, out), @name@_error(m));
    report("run_sizes_low", @name@_run_sizes(m, sizes, in, out), @name@_error(m));
    sizes[0] = @MAX@ + 1;
    report("run_sizes_high", @name@_run_sizes(m, sizes, in, out), @name@_error(m));
    report("run_sizes_null", @name@_run_sizes(m, NULL, in, out), @name@_error(m));
    report("run_sizes_null_instance", @name@_run_sizes(NULL, sizes, in, out), @name@_error(NULL));
    sizes[0] = 7;
    report("run_sizes", @name@_run_sizes(m, sizes, in, out), "ok");
    /* output 0 at T = 7 ends 7 rows in: an output placed there overlaps it, one placed past it does not */
    void *kept = out[1];
    out[1] = (unsigned char *)out[0] + @name@_tensor_bytes(&@name@_outputs[0], sizes) - 64;
    report("run_sizes_overlap", @name@_run_sizes(m, sizes, in, out), @name@_error(m));
    out[1] = (unsigned char *)out[0] + @name@_tensor_bytes(&@name@_outputs[0], sizes);
    report("run_sizes_after", @name@_run_sizes(m, sizes, in, out), "ok");
    out[1] = kept;
    printf("bytes %zu %zu %zu %zu\n", @name@_tensor_bytes(&@name@_inputs[0], sizes),
           @name@_tensor_bytes(&@name@_outputs[1], sizes), @name@_tensor_bytes(&@name@_outputs[2], sizes),
           @name@_tensor_bytes(&@name@_inputs[0], NULL));
    @name@_close(m);
    return 0;
}
#else
static int check_errors(void) { return 2; }
#endif

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "errors") == 0) return check_errors();
    if (argc < 7 || strcmp(argv[1], "run") != 0 || (argc - 4) % 3 != 0) return 2;
    int misalign = atoi(argv[3]);
    @name@ *m;
    if (@name@_open(&m, NULL, atoi(argv[2])) != @NAME@_OK) {
        fprintf(stderr, "%s\n", @name@_error(NULL));
        return 1;
    }
    /* buffers of the largest sizes, reused by every run */
    const void *in[@NAME@_NUM_INPUTS];
    void *out[@NAME@_NUM_OUTPUTS];
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) in[i] = buffer(@name@_inputs[i].bytes, misalign);
    for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++) out[o] = buffer(@name@_outputs[o].bytes, misalign);
    for (int a = 4; a < argc; a += 3) {
        int64_t sizes[@NAME@_NUM_VARIABLES];
        char *at = argv[a];
        for (int v = 0; v < @NAME@_NUM_VARIABLES; v++) sizes[v] = strtoll(at, &at, 10), at += *at == ',';
        FILE *f = fopen(argv[a + 1], "rb");
        if (!f) return 3;
        for (int i = 0; i < @NAME@_NUM_INPUTS; i++) {
            size_t bytes = @name@_tensor_bytes(&@name@_inputs[i], sizes);
            if (fread((void *)in[i], 1, bytes, f) != bytes) return 3;
        }
        fclose(f);
        if (@name@_run_sizes(m, sizes, in, out) != @NAME@_OK) {
            fprintf(stderr, "%s\n", @name@_error(m));
            return 1;
        }
        f = fopen(argv[a + 2], "wb");
        if (!f) return 3;
        for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++)
            fwrite(out[o], 1, @name@_tensor_bytes(&@name@_outputs[o], sizes), f);
        fclose(f);
    }
    printf("threads %d\n", @name@_threads(m));
    @name@_close(m);
    return 0;
}
]]

local tmp

local sh = helper.must_run

local bytes_of = helper.tensors_bytes

-- The model: causal attention of a (T, 64) sequence over itself through a small MLP's queries, a
-- (64, 64) product of its column sums (a fixed-size output: a step over T, then a product
-- split on the worker pool; kernels over T have no thread axis), and the sequence joined to itself doubled and to its
-- first row (2T + 1 rows: a dim with a coefficient and a constant).
Tensor.manual_seed(5)
local w1 = Tensor.randn({ D, 32 }, CPU):realize()
local w2 = Tensor.randn({ 32, D }, CPU):mul(0.1):realize()
local w3 = Tensor.randn({ D, D }, CPU):mul(0.1):realize()
local function forward(x)
  local t = x.shape[1]
  local queries = x:matmul(w1):relu():matmul(w2)
  -- causal: row i attends to rows 1..i (a (T, T) mask made from nothing but T)
  local mask = Tensor.ones({ t, t }, CPU):tril()
  local attention = (queries:matmul(x:transpose(1, 2)) / 8 + (1 - mask) * -1e9):softmax(-1):matmul(x)
  return attention, (x:sum(1):reshape(D, 1) * w3):matmul(w3), Tensor.cat({ x, x * 2, x[{ { 1, 1 } }] }, 1)
end

local data = {}
for i = 1, MAX * D do data[i] = math.sin(i * 0.731) end

-- The first n rows of the data: fixed (n, 64), or of variable size bound to n (a prefix of
-- all MAX rows: a realized buffer of n rows viewed with a variable size is refused by the
-- kernels, which expect buffers of the largest size).
local function rows(n, T)
  local list = {}
  for r = 1, (T and MAX or n) do
    list[r] = {}
    for c = 1, D do list[r][c] = data[(r - 1) * D + c] end
  end
  local x = Tensor(list, CPU):realize()
  if T then x = x[{ { 1, T:bind(n) } }] end
  return x
end

local DYNAMIC = { { name = "T", min = 1, max = MAX } }

-- Builds the spec's program for the export `summary` with cc alone; returns its path.
local function build(summary)
  local dir, name = summary.dir, summary.name
  helper.write(dir .. "/app.c", (DRIVER:gsub("@name@", name):gsub("@NAME@", name:upper()):gsub("@MAX@", MAX)))
  local sources = { q(dir .. "/app.c"), q(dir .. "/" .. name .. ".c") }
  for _, f in ipairs(summary.files) do
    if f:match("_weights%.c$") or f:match("%.o$") then sources[#sources + 1] = q(dir .. "/" .. f) end
  end
  sh(string.format("cc %s -I %s %s -lpthread -lm -o %s", CFLAGS, q(dir), table.concat(sources, " "),
    q(dir .. "/app")))
  return dir .. "/app"
end

local function close_floats(got, expected, tol)
  assert.are.equal(#expected, #got)
  for i = 1, #expected, 4 do
    local a, b = string.unpack("<f", got, i), string.unpack("<f", expected, i)
    assert(math.abs(a - b) <= tol * (1 + math.abs(b)), string.format("float %d: %g ~= %g", (i + 3) // 4, a, b))
  end
end

describe("tcl.export with dynamic sizes", function()
  local dir, app, summary
  local T = tcl.var("T", 1, MAX)

  lazy_setup(function()
    local status, out = helper.run("mktemp -d")
    assert(status == 0, "mktemp -d failed")
    tmp = out:gsub("%s+$", "")
    dir = tmp .. "/att"
    -- kernels split for 4 threads (as `tcl export --threads 4`), whatever this machine has
    local env = require "tcl.env"
    local threads = env.THREADS
    env.THREADS = 4
    local ok, result = pcall(export.export, forward, function(sizes) return { rows(MAX, nil):reshape(sizes.T, D) } end,
      { dir = dir, name = "att", dynamic = DYNAMIC })
    env.THREADS = threads
    assert(ok, result)
    summary = result
    app = build(summary)
  end)

  lazy_teardown(function()
    if tmp and tmp:match("^/tmp/") then helper.run("rm -rf " .. q(tmp)) end
  end)

  it("describes variable dims in the header and compiles each kernel once, for the variable", function()
    local header = helper.read(dir .. "/att.h")
    assert.matches("#define ATT_NUM_VARIABLES 1\n", header, 1, true)
    assert.matches("int att_run_sizes(att *m, const int64_t *sizes, const void *const *inputs, void *const *outputs);",
      header, 1, true)
    assert.matches("input  0  input0   float32  [T, 64]            16384 bytes at the largest sizes", header, 1, true)
    assert.matches("output 2  output2  float32  [T*2+1, 64]", header, 1, true)
    local source = helper.read(dir .. "/att.c")
    -- input0 is (T, 64): dims T (0 + 1 * T) and 64; output2 is (2T + 1, 64)
    assert.matches('{"input0", "float32", 2, (const int64_t[]){-1, 64}, 4096, 16384, (const att_dim[]){{0, 1, 0}, '
      .. '{64, 0, -1}}}', source, 1, true)
    assert.matches('{"output2", "float32", 2, (const int64_t[]){-1, 64}, 8256, 33024, (const att_dim[]){{1, 2, 0}, '
      .. '{64, 0, -1}}}', source, 1, true)
    assert.matches('{"output1", "float32", 2, (const int64_t[]){64, 64}, 4096, 16384, NULL}', source, 1, true)
    -- a step is split on the worker pool
    assert.is_true(tonumber(source:match("#define MAX_PARTS (%d+)")) > 1)
    assert.matches('const char *const att_variables[ATT_NUM_VARIABLES] = {"T"};', source, 1, true)
    assert.matches('#include "tcl_variables.c"', source, 1, true)
    assert.are.same({ "att.h", "att.c", "att_weights.c", "att_kernels.o", "tcl_runtime.c", "tcl_spin.h",
      "tcl_weights_embedded.c", "tcl_variables.c" }, summary.files)
    -- one plan, and every kernel once in the object: nothing compiled per size
    assert.are.equal(1, #summary.plans)
    local _, symbols = helper.run("nm " .. q(dir .. "/att_kernels.o"))
    local defined = 0
    for _ in symbols:gmatch(" T att_kernel_%x+\n") do defined = defined + 1 end
    assert.are.equal(summary.kernels, defined)
    local fills = tonumber(source:match("#define NUM_VALUE_FILLS (%d+)"))
    assert.is_true(fills >= 3, "the steps over T read its value")
    assert.is_true(summary.kernels >= 3)
  end)

  it("computes tcl's outputs for T = 1, 7 and 64 from one build, bit for bit, aligned or not", function()
    local args, expected = {}, {}
    for k, n in ipairs { 64, 1, 7, 64, 7 } do
      local input, output = string.format("%s/in_%d.bin", dir, k), string.format("%s/out_%d.bin", dir, k)
      helper.write(input, rows(n, nil):to_bytes())
      args[#args + 1] = string.format("%d %s %s", n, q(input), q(output))
      -- tcl's own run at this size: the kernels the export holds
      expected[k] = bytes_of(table.pack(forward(rows(n, T))))
      assert.are.equal((n * D + D * D + (2 * n + 1) * D) * 4, #expected[k])
      -- and a computation of fixed sizes, to rounding
      close_floats(expected[k], bytes_of(table.pack(forward(rows(n, nil)))), 1e-5)
    end
    for _, threads in ipairs { 1, 2 } do
      for _, misalign in ipairs { 0, 4 } do
        local out = sh(string.format("%s run %d %d %s", q(app), threads, misalign, table.concat(args, " ")))
        assert.matches("threads " .. threads, out, 1, true)
        for k in ipairs(expected) do
          local got = helper.read(string.format("%s/out_%d.bin", dir, k))
          assert.are.equal(#expected[k], #got)
          assert.is_true(expected[k] == got, string.format("run %d (%d threads, misaligned by %d) differs", k,
            threads, misalign))
        end
      end
    end
  end)

  it("takes two variables in the export's order, whichever order the kernels read them in", function()
    local TT, BB = tcl.var("T", 1, 16), tcl.var("B", 1, 4)
    local values = {}
    for i = 1, 4 * 16 * 8 do values[i] = math.cos(i * 0.377) end
    local flat = Tensor(values, CPU):realize()
    local function two(x) return x:softmax(-1) * 2 + x:sum(2):reshape(x.shape[1], 1, 8), x:sum(1) end
    local two_dir = tmp .. "/two"
    -- T before B: the kernels read their values sorted by name (B, T)
    local dynamic = { { name = "T", min = 1, max = 16 }, { name = "B", min = 1, max = 4 } }
    local two_summary = export.export(two, function(sizes) return { flat:reshape(sizes.B, sizes.T, 8) } end,
      { dir = two_dir, name = "two", dynamic = dynamic })
    assert.matches("(const two_dim[]){{0, 1, 1}, {0, 1, 0}, {8, 0, -1}}", helper.read(two_dir .. "/two.c"), 1, true)
    local two_app = build(two_summary)
    local args, expected = {}, {}
    for k, tb in ipairs { { 16, 4 }, { 3, 2 }, { 1, 4 }, { 16, 1 } } do
      local t, b = tb[1], tb[2]
      local input, output = string.format("%s/in_%d.bin", two_dir, k), string.format("%s/out_%d.bin", two_dir, k)
      local prefix = table.move(values, 1, b * t * 8, 1, {})
      helper.write(input, string.pack(string.rep("<f", #prefix), table.unpack(prefix)))
      args[#args + 1] = string.format("%d,%d %s %s", t, b, q(input), q(output))
      local bound_b, bound_t = BB:bind(b), TT:bind(t)
      local x = flat[{ { 1, bound_b * bound_t * 8 } }]:reshape(bound_b, bound_t, 8)
      expected[k] = bytes_of(table.pack(two(x)))
      assert.are.equal((b * t * 8 + t * 8) * 4, #expected[k])
      close_floats(expected[k], bytes_of(table.pack(two(Tensor(prefix, CPU):reshape(b, t, 8)))), 1e-5)
    end
    sh(string.format("%s run 1 0 %s", q(two_app), table.concat(args, " ")))
    -- (the expected values come from a slice of the buffer, a graph of its own whose kernels
    -- may sum in another order than the exported ones: equal to float32 rounding)
    for k in ipairs(expected) do
      close_floats(helper.read(string.format("%s/out_%d.bin", two_dir, k)), expected[k], 1e-5)
    end
  end)

  it("refuses sizes out of range, naming the variable and its range, and NAME_run", function()
    local out = sh(q(app) .. " errors")
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.same({
      "variables 1 T 1 64",
      "run 1 att_run: the model has variable sizes; call att_run_sizes with their values",
      "run_sizes_low 1 att_run_sizes: T is 0, outside its range 1..64",
      "run_sizes_high 1 att_run_sizes: T is 65, outside its range 1..64",
      "run_sizes_null 1 att_run_sizes: sizes is NULL (it holds the values of att_variables)",
      "run_sizes_null_instance 1 att_run_sizes: the instance is NULL",
      "run_sizes 0 ok",
      "run_sizes_overlap 1 att_run_sizes: output 1 (output1) overlaps output 0 (output0)",
      "run_sizes_after 0 ok",
      string.format("bytes %d %d %d 0", 7 * D * 4, D * D * 4, 15 * D * 4),
    }, lines)
  end)

  it("is an error where the sizes cannot be exported", function()
    local function fails(expected, fn, inputs, opts)
      opts.dir = tmp .. "/never"
      helper.fails_with(expected, export.export, fn, inputs, opts)
    end
    local function make(sizes) return { rows(MAX, nil):reshape(sizes.T, D) } end
    local function double(x) return x * 2 end
    fails("dynamic and batch_sizes exclude each other", double, make, { dynamic = DYNAMIC, batch_sizes = { 1 } })
    fails("with dynamic, inputs must be a function(sizes)", double, { rows(4, nil) }, { dynamic = DYNAMIC })
    fails("dynamic variable B sizes no input", double, make,
      { dynamic = { DYNAMIC[1], { name = "B", min = 1, max = 4 } } })
    fails("dynamic names variable T twice", double, make, { dynamic = { DYNAMIC[1], DYNAMIC[1] } })
    fails("dynamic variable T: needs integers 0 <= min <= max", double, make,
      { dynamic = { { name = "T", min = 5, max = 2 } } })
    fails("dynamic[1]: the name must be an identifier", double, make,
      { dynamic = { { name = "2T", min = 1, max = 2 } } })
    fails("dynamic[1] has an unknown field 'size'", double, make, { dynamic = { { name = "T", min = 1, max = 2,
      size = 3 } } })
    fails("dynamic must be a non-empty list", double, make, { dynamic = {} })
    -- the scores (T, T) flattened: a dim of T * T, which the C API's dims cannot say
    fails("output0 dim 1 has size T*T, which is not constant + coefficient * variable", function(x)
      return x:matmul(x:transpose(1, 2)):flatten()
    end, make, { dynamic = DYNAMIC })
    -- a variable bound inside the function, not given to the export
    local U = tcl.var("U", 1, 8)
    fails("the kernels read variable U, which is not among the dynamic variables (T)", function(x)
      return Tensor.ones({ U:bind(3), D }, CPU) + x:sum(1)
    end, make, { dynamic = DYNAMIC })
    -- the inputs' own variable of another range than the export's
    local narrow = tcl.var("T", 1, 32)
    fails("input0 dim 1 has size T of a variable T in 1..32, but the export's T is in 1..64", double,
      function() return { rows(MAX, nil)[{ { 1, 32 } }]:contiguous():reshape(narrow:bind(32), D) } end,
      { dynamic = DYNAMIC })
    -- a variable size without dynamic
    fails("input0 dim 1 has size T, but T is not a dynamic variable of this export", double,
      function() return { rows(MAX, nil):reshape(T:bind(MAX), D) } end, {})
  end)
end)

describe("tcl export --dynamic (the command)", function()
  local dir

  local function tcl_export(args)
    return helper.run("timeout 120 " .. q(helper.build_dir .. "/tcl") .. " export " .. args)
  end

  lazy_setup(function()
    local status, out = helper.run("mktemp -d")
    assert(status == 0, "mktemp -d failed")
    dir = out:gsub("%s+$", "")
    helper.write(dir .. "/seq.lua", [[
local w = Tensor.ones(16, 8):contiguous():realize()
return { name = "seq", forward = function(x) return x:matmul(w):softmax(-1), x:sum(2) end,
  inputs = function(sizes) return { Tensor.randn(32, 16):reshape(sizes.T, 16) } end }
]])
  end)

  lazy_teardown(function()
    if dir and dir:match("^/tmp/") then helper.run("rm -rf " .. q(dir)) end
  end)

  it("parses --dynamic into the variables, and says what is wrong with it", function()
    assert.are.same({ { name = "T", min = 1, max = 1024 } }, (cli.parse_dynamic("T=1..1024")))
    assert.are.same({ { name = "T", min = 1, max = 1024 }, { name = "B", min = 0, max = 8 } },
      (cli.parse_dynamic("T=1..1024,B=0..8")))
    for text, message in pairs {
      ["T=1-1024"] = "--dynamic takes NAME=MIN..MAX[,NAME=MIN..MAX...] like T=1..1024, not 'T=1-1024'",
      ["T=8..2"] = "--dynamic T: max 2 is below min 8",
      ["T=1..4,T=1..8"] = "--dynamic names T twice",
      ["T=1..4,"] = "not '' (in 'T=1..4,')",
      ["1T=1..4"] = "not '1T=1..4'",
      ["T=-1..4"] = "not 'T=-1..4'",
    } do
      local list, err = cli.parse_dynamic(text)
      assert.is_nil(list, text)
      assert.matches(message, err, 1, true)
    end
  end)

  it("exports a script's model with variable sizes and says so", function()
    local status, out, err = tcl_export(q(dir .. "/seq.lua") .. " -o " .. q(dir .. "/out") .. " --dynamic T=1..32")
    assert.are.equal(0, status, err)
    for _, piece in ipairs { "seq_run_sizes", "input 0   float32  [T, 16]", "output 0  float32  [T, 8]",
      "output 1  float32  [T]", "variable sizes T=1..32: one plan, the sizes given to seq_run_sizes" } do
      assert.matches(piece, out, 1, true)
    end
    assert.matches("#define SEQ_NUM_VARIABLES 1", helper.read(dir .. "/out/seq.h"), 1, true)
    -- the script's `dynamic` is the default of the flag
    helper.write(dir .. "/seq_dynamic.lua", (helper.read(dir .. "/seq.lua"):gsub("\nreturn {",
      '\nreturn { dynamic = { { name = "T", min = 2, max = 32 } },')))
    status, out, err = tcl_export(q(dir .. "/seq_dynamic.lua") .. " -o " .. q(dir .. "/out2"))
    assert.are.equal(0, status, err)
    assert.matches("variable sizes T=2..32", out, 1, true)
    assert.matches("seq_variable_min[SEQ_NUM_VARIABLES] = {2};", helper.read(dir .. "/out2/seq.c"), 1, true)
  end)

  it("refuses --dynamic with --batch-sizes, a malformed range, and a script that uses no variable", function()
    local status, _, err = tcl_export(q(dir .. "/seq.lua") .. " -o " .. q(dir .. "/x") .. " --dynamic T=1..8"
      .. " --batch-sizes 1,2")
    assert.are.equal(2, status)
    assert.matches("--dynamic and --batch-sizes exclude each other", err, 1, true)
    status, _, err = tcl_export(q(dir .. "/seq.lua") .. " -o " .. q(dir .. "/x") .. " --dynamic T=1..")
    assert.are.equal(2, status)
    assert.matches("--dynamic takes NAME=MIN..MAX", err, 1, true)
    status, _, err = tcl_export(q(dir .. "/seq.lua") .. " -o " .. q(dir .. "/x") .. " --dynamic T=1..32,S=1..4")
    assert.are.equal(1, status)
    assert.matches("dynamic variable S sizes no input", err, 1, true)
    status, _, err = tcl_export(q(dir .. "/seq.lua") .. " -o " .. q(dir .. "/x") .. " --dynamic")
    assert.are.equal(2, status)
    assert.matches("'--dynamic' needs an argument", err, 1, true)
  end)
end)
