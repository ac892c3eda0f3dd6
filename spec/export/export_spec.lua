-- spec/export/export_spec.lua — ahead-of-time export (lua/tcl/export/, `tcl export`): an MLP and a
-- small CNN exported, built with `cc` alone (no tcl include or library flags: -lpthread -lm
-- only) into a test program written here, run on inputs from a file, and their outputs
-- compared bitwise with tcl's own (the same kernels), on 1 and 2 threads, with aligned and
-- unaligned host buffers, with embedded weights and with a safetensors file; the built program
-- holds no Lua, LLVM or tcl runtime symbol; the generated C's argument checks; damaged weight
-- files; the errors of exporting what cannot be exported; the buffer plan; the `tcl export`
-- command and its usage errors.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local arena = require "tcl.export.arena"
local export = require "tcl.export"
local progress = require "tcl.progress"
local Tensor, nn = tcl.Tensor, tcl.nn
local q = helper.shell_quote

local CPU = { device = "CPU" }
-- the flags every generated file must compile without a warning under
local CFLAGS = "-std=c11 -Wall -Wextra -Werror -O2"

-- The spec's test program for the exported model `name`:
--   app THREADS WEIGHTS|- IN OUT MISALIGN   runs once: inputs from IN (concatenated), outputs
--                                           to OUT; buffers MISALIGN bytes off 64-byte alignment
--   app batch B THREADS WEIGHTS IN OUT MIS  the same with NAME_run_batch(m, B, ...), when exported
--   app errors WEIGHTS|-                    exercises the argument checks, one line each
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

static void report(const char *what, int code, const char *message) { printf("%s %d %s\n", what, code, message); }

static int check_errors(const char *weights) {
    @name@ *m = NULL;
    report("open_null_out", @name@_open(NULL, weights, 1), @name@_error(NULL));
    report("open_bad_threads", @name@_open(&m, weights, -1), @name@_error(NULL));
    report("open_wrong_weights", @name@_open(&m, weights ? NULL : "model.safetensors", 1), @name@_error(NULL));
    report("run_null_instance", @name@_run(NULL, NULL, NULL), @name@_error(NULL));
    report("threads_null_instance", @name@_threads(NULL), @name@_error(NULL));
    int status = @name@_open(&m, weights, 2);
    report("open", status, status == @NAME@_OK ? "ok" : @name@_error(NULL));
    if (status != @NAME@_OK) return 1;
    const void *in[@NAME@_NUM_INPUTS];
    void *out[@NAME@_NUM_OUTPUTS];
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) in[i] = buffer(@name@_inputs[i].bytes, 0);
    for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++) out[o] = buffer(@name@_outputs[o].bytes, 0);
    report("run_null_inputs", @name@_run(m, NULL, out), @name@_error(m));
    report("run_null_outputs", @name@_run(m, in, NULL), @name@_error(m));
    const void *saved = in[0];
    in[0] = NULL;
    report("run_null_input", @name@_run(m, in, out), @name@_error(m));
    in[0] = saved;
    void *kept = out[0];
    out[0] = (void *)in[0];
    report("run_overlap", @name@_run(m, in, out), @name@_error(m));
    out[0] = kept;
    report("run", @name@_run(m, in, out), "ok");
#ifdef @NAME@_NUM_BATCH_SIZES
    report("run_batch_unknown", @name@_run_batch(m, 1000003, in, out), @name@_error(m));
    report("run_batch_null_instance", @name@_run_batch(NULL, @name@_batch_sizes[0], in, out), @name@_error(NULL));
#endif
    @name@_close(m);
    @name@_close(NULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "errors") == 0) return check_errors(strcmp(argv[2], "-") ? argv[2] : NULL);
    const @name@_tensor_info *inputs = @name@_inputs, *outputs = @name@_outputs;
    long long batch = -1;
    if (argc == 8 && strcmp(argv[1], "batch") == 0) { /* app batch B THREADS ...: @name@_run_batch */
        batch = atoll(argv[2]);
        argv += 2;
        argc -= 2;
#ifdef @NAME@_NUM_BATCH_SIZES
        inputs = @name@_batch_inputs(batch);
        outputs = @name@_batch_outputs(batch);
        if (!inputs || !outputs) return 4;
#else
        return 4;
#endif
    }
    if (argc != 6) return 2;
    const char *weights = strcmp(argv[2], "-") ? argv[2] : NULL;
    int misalign = atoi(argv[5]);
    @name@ *m;
    if (@name@_open(&m, weights, atoi(argv[1])) != @NAME@_OK) {
        fprintf(stderr, "%s\n", @name@_error(NULL));
        return 1;
    }
    FILE *f = fopen(argv[3], "rb");
    if (!f) return 3;
    const void *in[@NAME@_NUM_INPUTS];
    void *out[@NAME@_NUM_OUTPUTS];
    for (int i = 0; i < @NAME@_NUM_INPUTS; i++) {
        void *p = buffer(inputs[i].bytes, misalign);
        if (fread(p, 1, inputs[i].bytes, f) != inputs[i].bytes) return 3;
        in[i] = p;
    }
    fclose(f);
    for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++) out[o] = buffer(outputs[o].bytes, misalign);
    for (int run = 0; run < 2; run++) { /* twice: a second run on the same instance gives the same */
#ifdef @NAME@_NUM_BATCH_SIZES
        int status = batch < 0 ? @name@_run(m, in, out) : @name@_run_batch(m, batch, in, out);
#else
        int status = @name@_run(m, in, out);
        (void)batch;
#endif
        if (status != @NAME@_OK) {
            fprintf(stderr, "%s\n", @name@_error(m));
            return 1;
        }
    }
    f = fopen(argv[4], "wb");
    if (!f) return 3;
    for (int o = 0; o < @NAME@_NUM_OUTPUTS; o++) fwrite(out[o], 1, outputs[o].bytes, f);
    fclose(f);
    printf("threads %d\n", @name@_threads(m));
    @name@_close(m);
    return 0;
}
]]

local tmp

local sh = helper.must_run

local bytes_of = helper.tensors_bytes

-- Exports forward on inputs into a fresh directory, builds the test program with cc alone;
-- returns the directory, the program, the summary and tcl's own outputs of forward as bytes.
local function export_and_build(name, forward, inputs, opts)
  local dir = tmp .. "/" .. name .. "_" .. (opts.weights or "embed")
  local summary = export.export(forward, inputs, { dir = dir, name = name, weights = opts.weights, model = opts.model,
    fold = opts.fold })
  helper.write(dir .. "/app.c", (DRIVER:gsub("@name@", name):gsub("@NAME@", name:upper())))
  local sources = { dir .. "/app.c", dir .. "/" .. name .. ".c" }
  for _, f in ipairs(summary.files) do
    if f:match("_weights%.c$") or f:match("%.o$") then sources[#sources + 1] = dir .. "/" .. f end
  end
  local quoted = {}
  for i, s in ipairs(sources) do quoted[i] = q(s) end
  sh(string.format("cc %s -I %s %s -lpthread -lm -o %s", CFLAGS, q(dir), table.concat(quoted, " "), q(dir .. "/app")))
  helper.write(dir .. "/in.bin", bytes_of(inputs))
  local expected = bytes_of(table.pack(forward(table.unpack(inputs))))
  return dir, dir .. "/app", summary, expected
end

-- Runs the program (on dir/in.bin, or `input` if given; NAME_run_batch when batch is given);
-- returns its outputs' bytes.
local function run_app(dir, app, threads, weights, misalign, batch, input)
  local out = string.format("%s/out_%d_%d.bin", dir, threads, misalign)
  local stdout = sh(string.format("%s %s%d %s %s %s %d", q(app), batch and "batch " .. batch .. " " or "", threads,
    weights and q(weights) or "-", q(input or dir .. "/in.bin"), q(out), misalign))
  assert.matches("threads " .. threads, stdout, 1, true)
  return helper.read(out)
end

local function mlp()
  Tensor.manual_seed(7)
  local model = nn.Sequential { nn.Linear(784, 128), Tensor.relu, nn.Linear(128, 10) }
  local x = Tensor.randn({ 8, 784 }, CPU):realize()
  return model, function(input) return model(input) end, { x }
end

local function cnn()
  Tensor.manual_seed(11)
  local function pool(x) return x:max_pool2d(2) end
  local model = nn.Sequential {
    nn.Conv2d(1, 8, 3), Tensor.relu, pool,
    nn.Conv2d(8, 16, 3), Tensor.relu, pool,
    function(x) return x:flatten(2) end, nn.Linear(16 * 5 * 5, 10),
  }
  local x = Tensor.randn({ 4, 1, 28, 28 }, CPU):realize()
  -- two outputs of two dtypes: log-probabilities and the classes
  return model, function(input)
    local logits = model(input)
    return logits:log_softmax(-1), logits:argmax(-1)
  end, { x }
end

describe("tcl.export", function()
  lazy_setup(function()
    local status, out = helper.run("mktemp -d")
    assert(status == 0, "mktemp -d failed")
    tmp = out:gsub("%s+$", "")
  end)

  lazy_teardown(function()
    if tmp and tmp:match("^/tmp/") then helper.run("rm -rf " .. q(tmp)) end
  end)

  describe("an MLP (784-128-10, batch 8) with embedded weights", function()
    local dir, app, summary, expected

    lazy_setup(function()
      local model, forward, inputs = mlp()
      dir, app, summary, expected = export_and_build("mlp", forward, inputs, { model = model })
    end)

    it("writes the header, the run, the weights and one object of every kernel", function()
      assert.are.same({ "mlp.h", "mlp.c", "mlp_weights.c", "mlp_kernels.o", "tcl_runtime.c", "tcl_spin.h",
        "tcl_weights_embedded.c" }, summary.files)
      assert.are.same({ "tcl_runtime.c", "tcl_spin.h", "tcl_weights_embedded.c" }, summary.runtime)
      -- the runtime's files are src/export_runtime's, unchanged; mlp.c includes them after its tables
      for _, f in ipairs(summary.runtime) do
        assert.are.equal(helper.read(helper.root .. "/src/export_runtime/" .. f), helper.read(dir .. "/" .. f))
      end
      assert.matches('\n#define MODEL mlp [^\n]*\n#define MODEL_NAME "mlp"\n#define STATUS%(code%) MLP_##code\n'
        .. '#include "tcl_runtime.c"\n#include "tcl_weights_embedded.c"\n$', helper.read(dir .. "/mlp.c"))
      assert.are.equal("embed", summary.weights)
      -- each tensor at a multiple of 64 bytes: the last bias (40 bytes) takes 64
      assert.are.equal((784 * 128 + 128 + 10 * 128) * 4 + 64, summary.weight_bytes)
      assert.is_true(summary.kernels >= 2)
      assert.is_true(summary.arena_bytes > 0 and summary.arena_bytes <= summary.unshared_bytes)
      assert.are.equal(0, summary.arena_bytes % 64)
      local header = helper.read(dir .. "/mlp.h")
      assert.matches("input  0  input0   float32  [8, 784]", header, 1, true)
      assert.matches("#define MLP_OUTPUT0_BYTES 320", header, 1, true)
      assert.matches("Another batch size needs\n * another export", header, 1, true)
      assert.matches("-lpthread -lm", summary.build, 1, true)
    end)

    it("computes tcl's outputs bit for bit, on 1 and 2 threads, aligned or not", function()
      assert.are.equal(320, #expected)
      assert.are.equal(expected, run_app(dir, app, 1, nil, 0))
      assert.are.equal(expected, run_app(dir, app, 2, nil, 0))
      assert.are.equal(expected, run_app(dir, app, 2, nil, 4)) -- staged through the arena
    end)

    it("links no Lua, LLVM, libffi or tcl runtime symbol, and no such library", function()
      local symbols = sh("nm " .. q(app))
      local kernels = 0
      for line in symbols:gmatch("[^\n]+") do
        local kind, name = line:match("(%a) (%S+)$")
        assert.is_nil(name:match("^lua") or name:match("^luaL_") or name:match("LLVM") or name:match("^ffi_")
          or name:match("^tcl_") or name:match("^tclc_"), "unexpected symbol " .. name)
        if name:match("^mlp_kernel_%x+$") then
          kernels = kernels + 1
          assert.are.equal("t", kind, name .. " should be local to the program")
        end
      end
      assert.are.equal(summary.kernels, kernels)
      local libraries = sh("ldd " .. q(app))
      assert.is_nil(libraries:match("lua") or libraries:match("LLVM") or libraries:match("tclc")
        or libraries:match("ffi"), libraries)
      -- the kernels' object code needs nothing but the C library (and libm)
      for name in sh("nm -u " .. q(dir .. "/mlp_kernels.o")):gmatch("U ([%w_]+)") do
        assert.is_nil(name:match("^tcl") or name:match("^lua") or name:match("LLVM"), name)
      end
    end)

    it("checks every argument of the C API and says what is wrong", function()
      local out = sh(q(app) .. " errors -")
      local lines = {}
      for what, code, message in out:gmatch("(%S+) (%d+) ([^\n]*)") do lines[what] = { tonumber(code), message } end
      assert.are.same({ 1, "mlp_open: out is NULL" }, lines.open_null_out)
      assert.are.equal(1, lines.open_bad_threads[1])
      assert.matches("threads must be 0 (one per CPU) to 1024, not -1", lines.open_bad_threads[2], 1, true)
      assert.are.equal(1, lines.open_wrong_weights[1])
      assert.matches("weights are embedded; weights_path must be NULL", lines.open_wrong_weights[2], 1, true)
      assert.are.same({ 1, "mlp_run: the instance is NULL" }, lines.run_null_instance)
      assert.are.same({ 0, "mlp_threads: the instance is NULL" }, lines.threads_null_instance)
      assert.are.same({ 0, "ok" }, lines.open)
      assert.are.same({ 1, "mlp_run: inputs is NULL" }, lines.run_null_inputs)
      assert.are.same({ 1, "mlp_run: outputs is NULL" }, lines.run_null_outputs)
      assert.are.same({ 1, "mlp_run: input 0 (input0) is NULL" }, lines.run_null_input)
      assert.are.same({ 1, "mlp_run: output 0 (output0) overlaps input 0 (input0)" }, lines.run_overlap)
      assert.are.same({ 0, "ok" }, lines.run)
    end)
  end)

  describe("an MLP reading its weights from a safetensors file", function()
    local dir, app, summary, expected, model

    lazy_setup(function()
      local forward, inputs
      model, forward, inputs = mlp()
      dir, app, summary, expected = export_and_build("mlp", forward, inputs, { model = model, weights = "safetensors" })
    end)

    it("writes NAME.safetensors with the model's names, which tcl reads back", function()
      assert.are.same({ "mlp.h", "mlp.c", "mlp.safetensors", "mlp_kernels.o", "tcl_runtime.c", "tcl_spin.h",
        "tcl_safetensors.c", "tcl_json.c" }, summary.files)
      local sd = nn.state.safe_load(dir .. "/mlp.safetensors")
      local names = {}
      for n in pairs(sd) do names[#names + 1] = n end
      table.sort(names)
      assert.are.same({ "layers.1.bias", "layers.1.weight", "layers.3.bias", "layers.3.weight" }, names)
      assert.are.same({ 128, 784 }, sd["layers.1.weight"].shape)
      assert.are.equal(model.layers[1].weight:to_bytes(), sd["layers.1.weight"]:to_bytes())
    end)

    it("computes tcl's outputs bit for bit", function()
      local weights = dir .. "/mlp.safetensors"
      assert.are.equal(expected, run_app(dir, app, 1, weights, 0))
      assert.are.equal(expected, run_app(dir, app, 2, weights, 8))
    end)

    it("checks its arguments, and asks for the weights file", function()
      local out = sh(q(app) .. " errors " .. q(dir .. "/mlp.safetensors"))
      assert.matches("open_wrong_weights 1 mlp_open: weights_path is NULL; this model reads its weights from a "
        .. "safetensors file", out, 1, true)
      assert.matches("run_null_instance 1 mlp_run: the instance is NULL", out, 1, true)
      assert.matches("run 0 ok", out, 1, true)
    end)

    it("refuses a missing, truncated, corrupt or foreign weights file with a message", function()
      local good = helper.read(dir .. "/mlp.safetensors")
      local header_bytes = string.unpack("<I8", good)
      local sd = nn.state.get_state_dict(model)
      local function with(changes)
        local copy = {}
        for k, v in pairs(sd) do copy[k] = v end
        for k, v in pairs(changes) do copy[k] = v end
        return copy
      end
      local cases = {
        { "missing.safetensors", nil, "cannot open '" },
        { "short.safetensors", "abc", "is too short for a safetensors file" },
        { "text.safetensors", string.rep("not a safetensors file ", 10), "declares a header of" },
        { "truncated.safetensors", good:sub(1, 8 + header_bytes + 1000), "past its end" },
        { "cut_header.safetensors", good:sub(1, 100), "more than the file or the limit allows" },
        -- issue 33 item 7: a header length one byte short reads every tensor one byte off
        { "short_header_length.safetensors", string.pack("<I8", header_bytes) .. good:sub(9, 8 + header_bytes) .. " "
          .. good:sub(9 + header_bytes), "its tensors do not cover its " },
        { "bad_json.safetensors", string.pack("<I8", 16) .. '{"a": [1, 2}    ', "has a malformed header" },
        { "other_tensors.safetensors", { ["x"] = Tensor.ones({ 3 }, CPU) }, "has no tensor 'layers.1." },
        { "dtype.safetensors", with { ["layers.3.bias"] = sd["layers.3.bias"]:cast("float64") },
          "tensor 'layers.3.bias' is F64, the model needs F32" },
        { "shape.safetensors", with { ["layers.3.weight"] = sd["layers.3.weight"]:reshape(5, 256) },
          "tensor 'layers.3.weight' has another shape" },
      }
      for _, case in ipairs(cases) do
        local path = dir .. "/" .. case[1]
        if type(case[2]) == "string" then
          helper.write(path, case[2])
        elseif type(case[2]) == "table" then
          nn.state.safe_save(case[2], path)
        end
        local status, _, err = helper.run(string.format("%s 1 %s %s %s 0", q(app), q(path), q(dir .. "/in.bin"),
          q(dir .. "/bad.bin")))
        assert.are.equal(1, status, case[1])
        assert.matches("mlp_open: ", err, 1, true)
        assert.matches(case[3], err, 1, true)
      end
      -- a FIFO or a device is refused without reading it (timeout: a regression fails, not hangs)
      local fifo = dir .. "/fifo.safetensors"
      assert.are.equal(0, (helper.run("mkfifo " .. q(fifo))))
      for _, path in ipairs { fifo, "/dev/zero" } do
        local status, _, err = helper.run(string.format("timeout 20 %s 1 %s %s %s 0", q(app), q(path),
          q(dir .. "/in.bin"), q(dir .. "/bad.bin")))
        assert.are.equal(1, status, path)
        assert.matches("mlp_open: '" .. path .. "' is not a regular file", err, 1, true)
      end
    end)
  end)

  describe("a CNN (Conv2d, max pooling, Linear) with two outputs", function()
    it("computes tcl's outputs bit for bit on 1 and 2 threads, with both weight modes", function()
      for _, weights in ipairs { "embed", "safetensors" } do
        local model, forward, inputs = cnn()
        local dir, app, summary, expected = export_and_build("cnn", forward, inputs, { model = model,
          weights = weights })
        assert.are.equal(4 * 10 * 4 + 4 * 4, #expected) -- float32 (4, 10) and int32 (4)
        assert.are.equal(2, #summary.outputs)
        assert.are.same({ "float32", "int32" }, { summary.outputs[1].dtype, summary.outputs[2].dtype })
        -- a chain of kernels: buffers whose lifetimes do not meet share the arena
        assert.is_true(summary.arena_bytes < summary.unshared_bytes)
        local file = weights == "safetensors" and dir .. "/cnn.safetensors" or nil
        assert.are.equal(expected, run_app(dir, app, 1, file, 0))
        assert.are.equal(expected, run_app(dir, app, 2, file, 0))
        assert.are.equal(expected, run_app(dir, app, 2, file, 4))
      end
    end)
  end)

  describe("several batch sizes in one export (batch_sizes)", function()
    it("runs each batch size's plan, bit for bit as tcl, sharing the weights", function()
      for _, weights in ipairs { "embed", "safetensors" } do
        local model, forward = mlp()
        local xs = {}
        local dir = tmp .. "/batches_" .. weights
        local summary = export.export(forward, function(batch)
          xs[batch] = Tensor.randn({ batch, 784 }, CPU):realize()
          return { xs[batch] }
        end, { dir = dir, name = "batched", weights = weights, model = model, batch_sizes = { 8, 1, 64 } })
        assert.are.same({ 8, 1, 64 }, { summary.plans[1].batch, summary.plans[2].batch, summary.plans[3].batch })
        assert.are.same({ 64, 784 }, summary.plans[3].inputs[1].shape)
        if weights == "safetensors" then -- the model's weights once, whatever the plans
          assert.are.equal((784 * 128 + 128 + 10 * 128) * 4 + 64, summary.weight_bytes)
        end
        helper.write(dir .. "/app.c", (DRIVER:gsub("@name@", "batched"):gsub("@NAME@", "BATCHED")))
        local sources = { q(dir .. "/app.c"), q(dir .. "/batched.c"), q(dir .. "/batched_kernels.o") }
        if weights == "embed" then sources[#sources + 1] = q(dir .. "/batched_weights.c") end
        sh(string.format("cc %s -I %s %s -lpthread -lm -o %s", CFLAGS, q(dir), table.concat(sources, " "),
          q(dir .. "/app")))
        local file = weights == "safetensors" and dir .. "/batched.safetensors" or nil
        for _, batch in ipairs { 8, 1, 64 } do
          local input = string.format("%s/in%d.bin", dir, batch)
          helper.write(input, xs[batch]:to_bytes())
          local expected = forward(xs[batch]):to_bytes()
          assert.are.equal(expected, run_app(dir, dir .. "/app", 2, file, 0, batch, input), "batch " .. batch)
          assert.are.equal(expected, run_app(dir, dir .. "/app", 1, file, 4, batch, input), "batch " .. batch)
        end
        -- NAME_run is the first batch size's plan
        assert.are.equal(forward(xs[8]):to_bytes(), run_app(dir, dir .. "/app", 2, file, 0, nil, dir .. "/in8.bin"))
        local out = sh(q(dir .. "/app") .. " errors " .. (file and q(file) or "-"))
        assert.matches("run_batch_unknown 1 batched_run_batch: batch size 1000003 was not exported", out, 1, true)
        assert.matches("run_batch_null_instance 1 batched_run_batch: the instance is NULL", out, 1, true)
      end
    end)

    it("says what is wrong with the batch sizes", function()
      local dir = tmp .. "/refused_batches"
      local function make(batch) return { Tensor.ones({ batch, 3 }, CPU):realize() } end
      local function double(x) return x * 2 end
      helper.fails_with("export: batch_sizes[2] is 0, not an integer >= 1", export.export, double, make,
        { dir = dir, batch_sizes = { 1, 0 } })
      helper.fails_with("export: batch_sizes lists 2 twice", export.export, double, make,
        { dir = dir, batch_sizes = { 2, 2 } })
      helper.fails_with("export: with batch_sizes, inputs must be a function(batch)", export.export, double, make(1),
        { dir = dir, batch_sizes = { 1 } })
      helper.fails_with("export: batch size 1 has 1 outputs, batch size 2 has 2", export.export, function(x)
        if x.shape[1] == 1 then return x * 2 end
        return x * 2, x + 1
      end, make, { dir = dir, batch_sizes = { 2, 1 } })
    end)
  end)

  -- A weights file from another writer: PyTorch builds the same architecture with its own
  -- initialization and writes its state_dict by hand (spec/support/torch_weights.py, which
  -- documents the names' mapping: PyTorch's Sequential member "<i>." is tcl's "layers.<i+1>.").
  -- The exported file holds exactly the model's parameters; its own constants (a Tensor.new
  -- table, argmax's index table) are in the generated C.
  describe("weights written by PyTorch for the same model", function()
    local python
    lazy_setup(function()
      for _, candidate in ipairs { "/usr/bin/python3", "python3" } do
        if not python and helper.run(q(candidate) .. " -c 'import torch' 2>/dev/null") == 0 then python = candidate end
      end
    end)

    local function models()
      Tensor.manual_seed(3)
      local mlp_model = nn.Sequential { nn.Linear(784, 128), Tensor.relu, nn.Linear(128, 10) }
      local affine = nn.Linear(4, 3)
      local cnn_model = nn.Sequential { nn.Conv2d(1, 4, 3), Tensor.relu, function(x) return x:max_pool2d(2) end,
        function(x) return x:flatten(2) end, nn.Linear(4 * 3 * 3, 5) }
      return {
        { kind = "mlp", model = mlp_model, inputs = { Tensor.randn({ 8, 784 }, CPU):realize() }, forward = function(x)
          local logits = mlp_model(x)
          return logits:softmax(-1), logits:argmax(-1)
        end },
        { kind = "affine", model = affine, inputs = { Tensor.rand({ 2, 4 }, CPU):realize() }, forward = function(x)
          local scale = Tensor.new({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "float32" }):sum(1)
          return affine(x) * scale + Tensor.new({ 0.5, 1, 2 }, { dtype = "float32" })
        end },
        { kind = "cnn", model = cnn_model, inputs = { Tensor.randn({ 2, 1, 8, 8 }, CPU):realize() },
          forward = function(x) return cnn_model(x):log_softmax(-1) end },
      }
    end

    it("loads them, and computes tcl's outputs on them bit for bit (PyTorch's within 1e-5)", function()
      if not python then
        pending("python3 with torch is not installed")
        return
      end
      for _, case in ipairs(models()) do
        local dir, app = export_and_build("torch_" .. case.kind, case.forward, case.inputs,
          { model = case.model, weights = "safetensors" })
        -- the exported file: exactly the parameters, by the model's state names
        local wanted, got = {}, {}
        for n in pairs(nn.state.get_state_dict(case.model)) do wanted[#wanted + 1] = n end
        for n in pairs(nn.state.safe_load(dir .. "/torch_" .. case.kind .. ".safetensors")) do got[#got + 1] = n end
        table.sort(wanted)
        table.sort(got)
        assert.are.same(wanted, got, case.kind)
        local weights, torch_out = dir .. "/torch.safetensors", dir .. "/torch_out.bin"
        sh(string.format("%s spec/support/torch_weights.py %s %s %s %s", q(python), case.kind, q(weights),
          q(dir .. "/in.bin"), q(torch_out)))
        local outputs = run_app(dir, app, 1, weights, 0)
        nn.state.load_state_dict(case.model, nn.state.safe_load(weights))
        local expected = table.pack(case.forward(table.unpack(case.inputs)))
        assert.are.equal(bytes_of(expected), outputs, case.kind)
        -- and PyTorch's own outputs on its weights, as an independent check of the names' mapping
        local ours, theirs = expected[1]:to_bytes(), helper.read(torch_out)
        assert.are.equal(#theirs, #ours, case.kind)
        local worst = 0
        for at = 1, #ours, 4 do
          worst = math.max(worst, math.abs(string.unpack("<f", ours, at) - string.unpack("<f", theirs, at)))
        end
        assert.is_true(worst < 1e-5, case.kind .. ": differs from PyTorch by " .. worst)
      end
    end)
  end)

  -- tests/c/export_close_race.c: race_close while race_run runs on another thread is refused
  -- (the busy flag), the run finishes undisturbed, the close after it succeeds; under ASan.
  describe("closing an instance while it runs on another thread", function()
    it("is refused with RACE_ERR_ARGUMENT, the run finishes, the close after it succeeds (ASan clean)", function()
      Tensor.manual_seed(13)
      local model = nn.Sequential { nn.Linear(256, 64), Tensor.relu, nn.Linear(64, 10) }
      local x = Tensor.randn({ 32, 256 }, CPU):realize()
      local dir = tmp .. "/race"
      local summary = export.export(function(input) return model(input):softmax(-1) end, { x },
        { dir = dir, name = "race" })
      local sources = { "tests/c/export_close_race.c", dir .. "/race.c" }
      for _, f in ipairs(summary.files) do
        if f:match("_weights%.c$") or f:match("%.o$") then sources[#sources + 1] = dir .. "/" .. f end
      end
      local quoted = {}
      for i, f in ipairs(sources) do quoted[i] = q(f) end
      -- its own ASan build: the program is plain C over the generated files, whatever tcl's build
      local sanitize = helper.run("cc -fsanitize=address -x c -o /dev/null -", "int main(void) { return 0; }\n") == 0
        and "-fsanitize=address,undefined -fno-omit-frame-pointer" or ""
      sh(string.format("cc -std=c11 -Wall -Wextra -Werror -g -O1 %s -I %s %s -lpthread -lm -o %s", sanitize, q(dir),
        table.concat(quoted, " "), q(dir .. "/close_race")))
      local status, out, err = helper.run(q(dir .. "/close_race") .. " 3")
      assert.are.equal(0, status, out .. err)
      assert.matches("export_close_race: %d+ passed, 0 failed", out)
      assert.are.equal("", err)
    end)
  end)

  describe("what cannot be exported", function()
    local function fails(expected, fn, inputs, opts)
      opts = opts or {}
      opts.dir = opts.dir or tmp .. "/refused"
      helper.fails_with(expected, export.export, fn, inputs, opts)
    end
    local function x() return Tensor.ones({ 3 }, CPU):realize() end

    it("needs CPU tensors", function()
      fails("export: input 1 is on device EMU; export compiles for the CPU device",
        function(t) return t + 1 end, { Tensor.ones({ 3 }, { device = "EMU" }) })
    end)

    it("needs a pure function: no state updated in place, no host reads", function()
      local counter = Tensor.zeros({ 3 }, CPU):realize()
      fails("writes a tensor that existed before the call (state updated in place",
        function(t) counter:assign(counter + t):realize() return counter * 2 end, { x() })
      fails("export: the function read tensor values to the host", function(t) return t * t:sum():item() end, { x() })
      fails("export: result 1 is 3; a captured function returns tensors only", function() return 3 end, { x() })
      fails("export: the function runs no kernel", function(t) return t end, { x() })
    end)

    it("checks the inputs and the options", function()
      local t = x()
      fails("export: inputs 1 and 2 share memory", function(a, b) return a + b end, { t, t })
      fails("export: inputs is empty", function() return Tensor.ones({ 2 }, CPU) end, {})
      fails("export: input 2 is string, not a tensor", function(a) return a end, { t, "x" })
      fails("export: option dir (the output directory) is required", function(a) return a + 1 end, { t },
        { dir = "" })
      fails("export: name '1st' is not a C identifier", function(a) return a + 1 end, { t }, { name = "1st" })
      fails("export: name 'static' is reserved in C", function(a) return a + 1 end, { t }, { name = "static" })
      fails("export: name 'tcl_runtime' is taken by the runtime's file tcl_runtime.c; choose another",
        function(a) return a + 1 end, { t }, { name = "tcl_runtime" })
      fails("export: weights must be \"embed\" or \"safetensors\"", function(a) return a + 1 end, { t },
        { weights = "zip" })
      fails("export: unknown option 'threads'", function(a) return a + 1 end, { t }, { threads = 2 })
      fails("export: expected a function to export", nil, { t })
    end)
  end)

  describe("the plan", function()
    it("folds kernels that compute only from weights into the weights, with embedded weights", function()
      Tensor.manual_seed(5)
      local w = Tensor.randn({ 4, 16 }, CPU):realize()
      local function forward(x) return x * w:exp():contiguous() end -- exp(w): a kernel reading w only
      local inputs = { Tensor.randn({ 4, 16 }, CPU):realize() }
      local dir, app, summary, expected = export_and_build("folded", forward, inputs, {})
      assert.are.same({ 1, 1, 1 }, { summary.folded, summary.steps, summary.kernels })
      assert.are.equal(expected, run_app(dir, app, 1, nil, 0))
      dir, app, summary, expected = export_and_build("unfolded", forward, inputs, { fold = false })
      assert.are.same({ 0, 2, 2 }, { summary.folded, summary.steps, summary.kernels })
      assert.are.equal(expected, run_app(dir, app, 1, nil, 0))
      -- a weights file holds the model's own tensors: no folding unless asked for
      summary = export.export(forward, inputs, { dir = tmp .. "/folded_file", weights = "safetensors" })
      assert.are.equal(0, summary.folded)
    end)


    it("renames each kernel's entry to NAME_kernel_<hash>, hidden, one object per kernel without ld -r", function()
      local objects, plan = require "tcl.export.objects", require "tcl.export.plan"
      local p = plan.capture(function(a) return (a + 1):contiguous() * 2, a:sum() end, { Tensor.ones({ 8 }, CPU) })
      assert.is_true(#p.kernels >= 2)
      local dir = tmp .. "/objects"
      sh("mkdir -p " .. q(dir))
      for _, k in ipairs(p.kernels) do k.symbol = "solo_kernel_" .. k.entry:match("^tcl_(%x+)$") end
      local files = objects.write(dir, "solo", p.kernels, false)
      assert.are.equal(#p.kernels, #files)
      for i, f in ipairs(files) do
        assert.are.equal("solo_kernel_" .. i .. ".o", f)
        local symbols = sh("readelf -sW " .. q(dir .. "/" .. f))
        assert.matches("GLOBAL HIDDEN +%d+ " .. p.kernels[i].symbol .. "\n", symbols)
        assert.is_nil(symbols:match(" tcl_%x+"), symbols)
      end
    end)

    it("shares memory between buffers whose lifetimes do not meet, 64-byte aligned", function()
      local blocks = {
        { bytes = 100, first = 1, last = 2 }, -- meets the next one at step 2: apart
        { bytes = 64, first = 2, last = 3 },
        { bytes = 128, first = 3, last = 4 }, -- born when the first is dead: shares with it
      }
      local size, unshared = arena.plan(blocks)
      assert.are.equal(128 + 64 + 128, unshared)
      for _, b in ipairs(blocks) do assert.are.equal(0, b.offset % 64) end
      assert.are_not.equal(blocks[1].offset, blocks[2].offset)
      assert.are_not.equal(blocks[2].offset, blocks[3].offset)
      assert.are.equal(blocks[1].offset, blocks[3].offset)
      assert.are.equal(192, size)
    end)
  end)

  it("draws a progress line over its steps when progress bars are on, and nothing when off", function()
    local written, saved = {}, progress.stream
    progress.stream = { write = function(_, ...) for _, s in ipairs({ ... }) do written[#written + 1] = s end end,
      flush = function() end }
    local w = Tensor.randn(16, 4, CPU):realize()
    local function forward(x) return x:matmul(w):relu() end
    local function export_with(setting)
      written = {}
      return pcall(tcl.context { PROGRESS = setting }, export.export, forward, { Tensor.randn(2, 16, CPU) },
        { dir = tmp .. "/progress", name = "bar" })
    end
    local on_ok, on_err = export_with(true)
    local on = table.concat(written)
    local off_ok, off_err = export_with(false)
    progress.stream = saved
    assert(on_ok, on_err)
    assert(off_ok, off_err)
    -- one capture and the four steps of the files
    local first = "\rexport bar   0% |" .. string.rep(" ", 20) .. "| 0/5 [00:00<?, ? step/s] | compiling kernels"
    assert.are.equal(first, on:sub(1, #first))
    assert.matches("\rexport bar 100%% |" .. string.rep("█", 20) .. "| 5/5 %[%d%d:%d%d<00:00, [^%]]+%] *\n$", on)
    assert.are.same({}, written)
  end)
end)

describe("tcl export (the command)", function()
  local dir

  local function tcl_export(args)
    return helper.run("timeout 120 " .. q(helper.build_dir .. "/tcl") .. " export " .. args)
  end

  lazy_setup(function()
    local status, out = helper.run("mktemp -d")
    assert(status == 0, "mktemp -d failed")
    dir = out:gsub("%s+$", "")
    helper.write(dir .. "/tiny.lua", [[
Tensor.manual_seed(3)
local model = tcl.nn.Sequential { tcl.nn.Linear(16, 32), Tensor.relu, tcl.nn.Linear(32, 4) }
return { name = "tiny", model = model, forward = function(x) return model(x):softmax(-1) end,
  inputs = function(batch) return { Tensor.randn(batch or 2, 16):realize() } end }
]])
    helper.write(dir .. "/nothing.lua", "local x = 1\n")
    helper.write(dir .. "/no_forward.lua", "return { inputs = {} }\n")
    helper.write(dir .. "/stateful.lua", [[
local state = Tensor.zeros(4):realize()
return { forward = function(x) state:assign(state + x):realize() return state * 1 end, inputs = { Tensor.ones(4) } }
]])
  end)

  lazy_teardown(function()
    if dir and dir:match("^/tmp/") then helper.run("rm -rf " .. q(dir)) end
  end)

  it("exports a script's model, says what it wrote, and the files build and run", function()
    local out_dir = dir .. "/out"
    local status, out, err = tcl_export(q(dir .. "/tiny.lua") .. " -o " .. q(out_dir) .. " --weights safetensors")
    assert.are.equal(0, status, err)
    for _, piece in ipairs { "tiny.h", "tiny.c", "tiny.safetensors", "tiny_kernels.o", "input 0   float32  [2, 16]",
      "output 0  float32  [2, 4]", "arena ", "build (app.c: your program): cc -std=c11 -O2 -I " .. out_dir,
      "tcl_json.c               the runtime, included by tiny.c" } do
      assert.matches(piece, out, 1, true)
    end
    for _, f in ipairs { "tiny.h", "tiny.c", "tiny.safetensors", "tiny_kernels.o", "tcl_runtime.c", "tcl_spin.h",
      "tcl_safetensors.c", "tcl_json.c" } do
      assert.is_true(helper.exists(out_dir .. "/" .. f), f)
    end
    -- the same script in this process gives the same weights and inputs, and tcl's outputs
    local env = setmetatable({ tcl = tcl, Tensor = Tensor }, { __index = _G }) -- the globals `tcl` sets
    local spec = assert(loadfile(dir .. "/tiny.lua", "t", env))()
    local x = spec.inputs()[1]
    helper.write(out_dir .. "/in.bin", x:to_bytes())
    helper.write(out_dir .. "/app.c", (DRIVER:gsub("@name@", "tiny"):gsub("@NAME@", "TINY")))
    sh(string.format("cc %s -I %s %s %s %s -lpthread -lm -o %s", CFLAGS, q(out_dir), q(out_dir .. "/app.c"),
      q(out_dir .. "/tiny.c"), q(out_dir .. "/tiny_kernels.o"), q(out_dir .. "/app")))
    local got = run_app(out_dir, out_dir .. "/app", 1, out_dir .. "/tiny.safetensors", 0)
    assert.are.equal(spec.forward(x):to_bytes(), got)
  end)

  it("exports examples/export_mlp.lua, which examples/export_app.c uses; --threads sets the split", function()
    local out_dir = dir .. "/example"
    local status, _, err = tcl_export(q(helper.root .. "/examples/export_mlp.lua") .. " -o " .. q(out_dir)
      .. " --threads 1")
    assert.are.equal(0, status, err)
    -- kernels compiled for one thread have no thread axis: every step is a single call
    assert.matches("#define MAX_PARTS 1 ", helper.read(out_dir .. "/mlp.c"), 1, true)
    sh(string.format("cc %s -I %s %s %s %s %s -lpthread -lm -o %s", CFLAGS, q(out_dir),
      q(helper.root .. "/examples/export_app.c"), q(out_dir .. "/mlp.c"), q(out_dir .. "/mlp_weights.c"),
      q(out_dir .. "/mlp_kernels.o"), q(out_dir .. "/app")))
    local out = sh(q(out_dir .. "/app") .. " 1")
    assert.matches("image 7: class %d+ %(p = 0%.%d+%)", out)
    assert.matches("1000 runs, 1 thread(s)", out, 1, true)
  end)

  it("exports several batch sizes with --batch-sizes, inputs being a function(batch)", function()
    local out_dir = dir .. "/batches"
    local status, out, err = tcl_export(q(dir .. "/tiny.lua") .. " -o " .. q(out_dir) .. " --batch-sizes 3,1")
    assert.are.equal(0, status, err)
    assert.matches("batch size 3 (tiny_run):\n  input 0   float32  [3, 16]", out, 1, true)
    assert.matches("batch size 1:\n  input 0   float32  [1, 16]", out, 1, true)
    assert.matches("int tiny_run_batch(tiny *m, int64_t batch,", helper.read(out_dir .. "/tiny.h"), 1, true)
  end)

  it("says what is wrong with its arguments or the script", function()
    local script = q(dir .. "/tiny.lua")
    local usage = {
      { "", "no model script given" },
      { script, "no output directory given (-o DIR)" },
      { script .. " -o", "'-o' needs an argument" },
      { script .. " -o x --weights zip", "--weights must be 'embed' or 'safetensors', not 'zip'" },
      { script .. " -o x --threads 0", "--threads must be an integer from 1 to 1024, not '0'" },
      { script .. " -o x --bogus", "unrecognized option '--bogus'" },
      { script .. " -o x --batch-sizes 1,x", "--batch-sizes must be a list of integers >= 1 like 1,8,64, not '1,x'" },
      { script .. " -o x --name 9lives", "--name: name '9lives' is not a C identifier" },
      { q(dir .. "/missing.lua") .. " -o x", "cannot open '" },
    }
    for _, case in ipairs(usage) do
      local status, _, err = tcl_export(case[1])
      assert.are.equal(2, status, case[1])
      assert.matches("tcl export: " .. case[2], err, 1, true)
      assert.matches("usage: tcl export model.lua -o DIR", err, 1, true)
    end
    local failures = {
      { "nothing.lua", "nothing.lua must return a table { forward = function, inputs = { example tensors } }, "
        .. "got nil" },
      { "no_forward.lua", "returned a table without a function `forward`" },
      { "stateful.lua", "export supports pure functions of their inputs" },
    }
    for _, case in ipairs(failures) do
      local status, _, err = tcl_export(q(dir .. "/" .. case[1]) .. " -o " .. q(dir .. "/failed"))
      assert.are.equal(1, status, case[1])
      assert.matches(case[2], err, 1, true)
    end
  end)

  it("has a --help, and tcl --help lists it", function()
    local status, out = tcl_export("--help")
    assert.are.equal(0, status)
    assert.matches("^usage: tcl export model.lua %-o DIR", out)
    local _, help = helper.run(q(helper.build_dir .. "/tcl") .. " --help")
    assert.matches("export model.lua -o DIR", help, 1, true)
  end)
end)
