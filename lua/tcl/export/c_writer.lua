-- tcl.export.c_writer — the C files of an exported model: NAME.h (the API), NAME.c (the plan's
-- tables and the runtime) and NAME_weights.c (embedded weights). Layer: export.
--
-- Input: a model description made by tcl.export (see M.header for the fields). The fixed C
-- is the exported runtime's files (src/export_runtime/, tcl.export.runtime_files), copied
-- beside NAME.c, which includes them last; this module writes the model's own facts as
-- constant tables above them, and the names they use (tcl_runtime.c lists them):
--   STEPS    one entry per kernel run: its call thunk, its first buffer slot, its thread
--            axis's iterations (parallel_size) and how they are split in parts;
--   SLOTS    every step's buffers in slot order, each in the arena, the weights, an input or
--            an output (the last two change per run: RUN_SLOTS lists them);
--   COPIES   outputs that are copies of an input, a weight or another output;
--   WEIGHTS  (safetensors) the tensors read from the file and where each goes.
-- Kernels are called through one thunk per kernel, `call_kernel_<i>(buffers, start, end)`,
-- since C cannot call functions of different arities through one pointer type.
local runtime_files = require "tcl.export.runtime_files"

local M = {}

-- x86 features the exported program checks at open (__builtin_cpu_supports) when the kernels
-- were compiled with them: the ones LLVM uses for vector code, known to gcc and clang alike.
local X86_FEATURES = { "sse4.2", "avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl" }

local function fill(text, name)
  return (text:gsub("@name@", name):gsub("@NAME@", name:upper()))
end

local function shape_text(shape)
  if #shape == 0 then return "scalar" end
  return "[" .. table.concat(shape, ", ") .. "]"
end

-- "\xNN" for every byte value.
local HEX = {}
for b = 0, 255 do HEX[string.char(b)] = string.format("\\x%02x", b) end

local function shape_literal(shape)
  if #shape == 0 then return "(const int64_t[]){0}" end
  return "(const int64_t[]){" .. table.concat(shape, ", ") .. "}"
end

local function c_string(s)
  return '"' .. s:gsub('[\\"]', "\\%0"):gsub("[%c\128-\255]", function(c) return string.format("\\%03o", c:byte()) end)
    .. '"'
end

-- A tensor's dims as NAME_dim rows ({constant, coefficient, variable}), or NULL when they
-- are all constant (its shape says them).
local function dims_literal(t, name)
  local fixed = true
  for _, d in ipairs(t.dims or {}) do
    if d.variable >= 0 then fixed = false end
  end
  if fixed then return "NULL" end
  local rows = {}
  for k, d in ipairs(t.dims) do rows[k] = string.format("{%d, %d, %d}", d.constant, d.coefficient, d.variable) end
  return string.format("(const %s_dim[]){%s}", name, table.concat(rows, ", "))
end

local function tensor_rows(list, name)
  local rows = {}
  for i, t in ipairs(list) do
    rows[i] = string.format("    {%s, %s, %d, %s, %d, %d, %s},", c_string(t.name), c_string(t.dtype), #t.shape,
      shape_literal(t.shape), t.numel, t.bytes, dims_literal(t, name))
  end
  return table.concat(rows, "\n")
end

local function io_lines(list, what)
  local lines = {}
  for i, t in ipairs(list) do
    local dynamic = t.dims and shape_text(t.text) ~= shape_text(t.shape)
    lines[i] = string.format(" *   %s %-2d %-8s %-8s %-18s %d bytes%s", what, i - 1, t.name, t.dtype,
      shape_text(dynamic and t.text or t.shape), t.bytes, dynamic and " at the largest sizes" or "")
  end
  return table.concat(lines, "\n")
end

--- The build line for a program (app.c) using the exported files (names relative to dir).
function M.build_line(m, dir, program)
  local files = { program or "app.c", dir .. "/" .. m.name .. ".c" }
  if m.weights_file == "embed" then files[#files + 1] = dir .. "/" .. m.name .. "_weights.c" end
  for _, o in ipairs(m.objects) do files[#files + 1] = dir .. "/" .. o end
  return "cc -std=c11 -O2 -I " .. dir .. " " .. table.concat(files, " ") .. " -lpthread -lm"
end

-- The header's paragraph on shapes: the one plan's, or each batch size's.
local function shapes_text(m)
  local NAME = m.name:upper()
  local first = m.plans[1]
  local lines = { io_lines(first.inputs, "input "), io_lines(first.outputs, "output") }
  if m.variables then
    local ranges = {}
    for k, v in ipairs(m.variables) do ranges[k] = string.format("%s in %d..%d", v.name, v.min, v.max) end
    lines[#lines + 1] = string.format(" * Variable sizes (%s): the kernels were compiled once for them and take",
      table.concat(ranges, ", "))
    lines[#lines + 1] = " * their values at run time: call @name@_run_sizes with sizes[v] the value of"
    lines[#lines + 1] = " * @name@_variables[v]. A dim given as -1 in a shape is, in its tensor info's dims,"
    lines[#lines + 1] = " * constant + coefficient * sizes[variable]; @name@_tensor_bytes(info, sizes) is a tensor's"
    lines[#lines + 1] = " * bytes at those sizes (bytes and numel in the info, and the _BYTES defines, are at the"
    lines[#lines + 1] = " * largest sizes). Pass inputs and outputs of this run's shapes, contiguous."
    return table.concat(lines, "\n")
  end
  if not m.batch_sizes then
    lines[#lines + 1] = " * The shapes are fixed: the kernels were compiled for these sizes. Another batch size needs"
    lines[#lines + 1] = " * another export."
    return table.concat(lines, "\n")
  end
  lines[1] = string.format(" * Batch size %d (@name@_run, @name@_inputs, @name@_outputs):\n", first.batch)
    .. lines[1]
  for i = 2, #m.plans do
    local plan = m.plans[i]
    lines[#lines + 1] = string.format(" * Batch size %d (@name@_run_batch(m, %d, ...), @name@_batch_inputs(%d)):",
      plan.batch, plan.batch, plan.batch)
    lines[#lines + 1] = io_lines(plan.inputs, "input ")
    lines[#lines + 1] = io_lines(plan.outputs, "output")
  end
  lines[#lines + 1] = " * Each batch size has a plan of its own, with kernels compiled for its sizes"
  lines[#lines + 1] = string.format(" * (%s_NUM_BATCH_SIZES in all); another batch size needs another export.", NAME)
  return table.concat(lines, "\n")
end

-- The usage example's sizes and their names: "17", "T".
local function variable_examples(m)
  local values, names = {}, {}
  for k, v in ipairs(m.variables) do values[k], names[k] = tostring(math.max(v.min, math.min(v.max, 17))), v.name end
  return table.concat(values, ", "), table.concat(names, ", ")
end

-- The header's declarations of the variable sizes, when the model has some.
local function variable_declarations(m)
  if not m.variables then return "" end
  local names = {}
  for k, v in ipairs(m.variables) do names[k] = string.format("%s %d..%d", v.name, v.min, v.max) end
  return string.format([==[

/* The variable sizes (%s): their names, smallest and largest values. */
#define @NAME@_NUM_VARIABLES %d
extern const char *const @name@_variables[@NAME@_NUM_VARIABLES];
extern const int64_t @name@_variable_min[@NAME@_NUM_VARIABLES];
extern const int64_t @name@_variable_max[@NAME@_NUM_VARIABLES];
/* Runs the model for the sizes sizes[v] of @name@_variables[v] (each in its range, else
 * @NAME@_ERR_ARGUMENT naming it): inputs[i] and outputs[o] hold their tensors at these sizes,
 * @name@_tensor_bytes(&@name@_inputs[i], sizes) bytes. @name@_run fails on this model. */
int @name@_run_sizes(@name@ *m, const int64_t *sizes, const void *const *inputs, void *const *outputs);
/* The bytes of an input or output (@name@_inputs[i], @name@_outputs[o]) at these sizes; 0
 * when info or sizes is NULL or a size is out of its range. */
size_t @name@_tensor_bytes(const @name@_tensor_info *info, const int64_t *sizes);]==], table.concat(names, ", "),
    #m.variables)
end

-- The header's declarations of the batch-size functions, when there are several plans.
local function batch_declarations(m)
  if not m.batch_sizes then return "" end
  local sizes = {}
  for i, plan in ipairs(m.plans) do sizes[i] = tostring(plan.batch) end
  return string.format([==[

/* The exported batch sizes (%s). */
#define @NAME@_NUM_BATCH_SIZES %d
extern const int64_t @name@_batch_sizes[@NAME@_NUM_BATCH_SIZES];
/* Runs the plan of batch size `batch` (one of @name@_batch_sizes), with inputs and outputs as
 * @name@_batch_inputs(batch) and @name@_batch_outputs(batch) describe them. */
int @name@_run_batch(@name@ *m, int64_t batch, const void *const *inputs, void *const *outputs);
/* The inputs and outputs of batch size `batch`; NULL when it was not exported. */
const @name@_tensor_info *@name@_batch_inputs(int64_t batch);
const @name@_tensor_info *@name@_batch_outputs(int64_t batch);]==], table.concat(sizes, ", "), #m.plans)
end

--- NAME.h. m: { name, tcl_version, target = {cpu, triple, features}, plans = { {batch, inputs,
-- outputs ({name, dtype, shape, numel, bytes}), steps, ...} } (the first is NAME_run's),
-- batch_sizes (nil for one plan), arena_bytes and unshared_bytes (the largest plan's),
-- weight_bytes, weights_file ("embed", "safetensors" or nil: no weights), objects (kernel
-- object files), kernels }.
function M.header(m)
  local name, NAME = m.name, m.name:upper()
  local first = m.plans[1]
  local weights
  if m.weights_file == "embed" then
    weights = string.format("embedded (%s_weights.c); weights_path must be NULL", name)
  elseif m.weights_file == "safetensors" then
    weights = string.format("read at open from a safetensors file (%s.safetensors as exported)", name)
  else
    weights = "none; weights_path must be NULL"
  end
  local defines = {}
  for i, t in ipairs(first.inputs) do
    defines[#defines + 1] = string.format("#define %s_INPUT%d_BYTES %d", NAME, i - 1, t.bytes)
  end
  for i, t in ipairs(first.outputs) do
    defines[#defines + 1] = string.format("#define %s_OUTPUT%d_BYTES %d", NAME, i - 1, t.bytes)
  end
  local runs = 0
  for _, plan in ipairs(m.plans) do runs = runs + #plan.steps end
  return fill(string.format([==[
/* @name@.h — a model exported by tcl %s (`tcl export`, tcl.export): %d kernel runs of %d
 * compiled kernels, for %s (%s). Generated; do not edit.
 *
 * Needs nothing at run time but libc, libm and pthreads. Build a program with:
 *     %s -o app
 *
 * Inputs and outputs: contiguous, row-major, native byte order. Pointers aligned to 64 bytes
 * are used in place; others are copied through the instance's arena (a memcpy per run).
%s
 *
 * Memory: one arena of %d bytes per instance (%d without sharing between buffers whose
 * lifetimes do not overlap). Weights: %d bytes,
 * %s.
 *
 * Usage:
 *     @name@ *m;
 *     if (@name@_open(&m, NULL, 0) != @NAME@_OK) { fprintf(stderr, "%%s\n", @name@_error(NULL)); exit(1); }
 *     const void *in[@NAME@_NUM_INPUTS] = {x};
 *     void *out[@NAME@_NUM_OUTPUTS] = {y};
 *     %s
 *     @name@_close(m);
 *
 * Threads: each instance owns its arena, its weights (when read from a file) and a pool of
 * worker threads (`threads` at open, the caller included; 0: one per online CPU). One thread
 * at a time may use an instance (a second concurrent @name@_run on it fails with an error);
 * several instances may run at once on different threads.
 *
 * Errors: every function checks its arguments and returns a status (@NAME@_OK or an
 * @NAME@_ERR_* code), never crashes on NULL or a bad weights file. @name@_error(m) is the
 * message of the instance's last failure; @name@_error(NULL) that of the last failure without
 * an instance (a failed @name@_open, a NULL instance) on the calling thread.
 *
 * The kernels were compiled for this CPU model; on a CPU without their instruction set
 * extensions @name@_open fails with @NAME@_ERR_CPU (checked on x86 only).
 */
#ifndef @NAME@_H
#define @NAME@_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define @NAME@_OK 0
#define @NAME@_ERR_ARGUMENT 1 /* a NULL or invalid argument, overlapping buffers, a busy instance */
#define @NAME@_ERR_MEMORY 2   /* out of memory */
#define @NAME@_ERR_WEIGHTS 3  /* the weights file is missing, unreadable or not this model's */
#define @NAME@_ERR_THREAD 4   /* a worker thread could not be started */
#define @NAME@_ERR_CPU 5      /* this CPU lacks instructions the kernels use */

#define @NAME@_NUM_INPUTS %d
#define @NAME@_NUM_OUTPUTS %d
%s
#define @NAME@_ARENA_BYTES %d
#define @NAME@_WEIGHT_BYTES %d

/* A dim of variable size: constant + coefficient * the value of variable `variable` (an index
 * in @name@_variables; -1: the dim is `constant`). */
typedef struct @name@_dim {
    int64_t constant;
    int64_t coefficient;
    int variable;
} @name@_dim;

/* An input or output: its name, dtype ("float32", ...), rank, sizes (-1: a variable size),
 * elements and bytes (at the largest sizes), and its dims as @name@_dim rows (NULL when
 * every dim is constant). */
typedef struct @name@_tensor_info {
    const char *name;
    const char *dtype;
    int rank;
    const int64_t *shape;
    size_t numel;
    size_t bytes;
    const @name@_dim *dims;
} @name@_tensor_info;

extern const @name@_tensor_info @name@_inputs[@NAME@_NUM_INPUTS];
extern const @name@_tensor_info @name@_outputs[@NAME@_NUM_OUTPUTS];

typedef struct @name@ @name@;

/* Opens an instance into *out (NULL on failure). weights_path: the safetensors file when the
 * weights are read from one, else NULL. threads: 0 for one per online CPU, or 1 to 1024. */
int @name@_open(@name@ **out, const char *weights_path, int threads);
/* Runs the model: inputs[i] points at @name@_inputs[i].bytes bytes, outputs[o] at
 * @name@_outputs[o].bytes bytes; no output may overlap an input or another output. */
int @name@_run(@name@ *m, const void *const *inputs, void *const *outputs);
/* The message of the last failure (see above); never NULL. */
const char *@name@_error(const @name@ *m);
/* The threads an instance runs on, the caller included (0 for NULL). */
int @name@_threads(const @name@ *m);
/* Stops the instance's threads and frees it; NULL is allowed (@NAME@_OK). While a run is under
 * way on another thread it frees nothing and returns @NAME@_ERR_ARGUMENT with the message in
 * @name@_error(NULL): close again after the run returns. */
int @name@_close(@name@ *m);%s%s

#ifdef __cplusplus
}
#endif

#endif
]==], m.tcl_version, runs, #m.kernels, m.target.cpu, m.target.triple, M.build_line(m, "."), shapes_text(m),
    m.arena_bytes, m.unshared_bytes, m.weight_bytes, weights, m.variables and string.format(
      "int64_t sizes[@NAME@_NUM_VARIABLES] = {%s}; // %s\n *     if (@name@_run_sizes(m, sizes, in, out) != "
      .. "@NAME@_OK) fprintf(stderr, \"%%s\\n\", @name@_error(m));", variable_examples(m)) or
      "if (@name@_run(m, in, out) != @NAME@_OK) fprintf(stderr, \"%s\\n\", @name@_error(m));", #first.inputs,
    #first.outputs,
    table.concat(defines, "\n"), m.arena_bytes, m.weight_bytes, batch_declarations(m), variable_declarations(m)), name)
end

local KIND = { arena = "IN_ARENA", weights = "IN_WEIGHTS", input = "IN_INPUT", output = "IN_OUTPUT" }

local function cpu_check(m)
  local lines = { "/* The instruction set extensions the kernels were compiled with, checked at open. */",
    "static const char *missing_cpu_feature(void) {" }
  local wanted = {}
  if m.target.triple:match("^x86_64") or m.target.triple:match("^i%d86") then
    local features = "," .. (m.target.features or "") .. ","
    for _, f in ipairs(X86_FEATURES) do
      if features:find(",+" .. f .. ",", 1, true) then wanted[#wanted + 1] = f end
    end
  end
  if #wanted > 0 then
    lines[#lines + 1] = "#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))"
    lines[#lines + 1] = "    __builtin_cpu_init();"
    for _, f in ipairs(wanted) do
      lines[#lines + 1] = string.format('    if (!__builtin_cpu_supports("%s")) return "%s";', f, f)
    end
    lines[#lines + 1] = "#endif"
  end
  lines[#lines + 1] = "    return NULL;"
  lines[#lines + 1] = "}"
  return table.concat(lines, "\n")
end

-- All plans' steps, slots, run slots and copies in one table each (plan after plan), with
-- each plan's first row and count in those tables.
local function concatenated(m)
  local all = { steps = {}, slots = {}, run_slots = {}, copies = {}, ranges = {}, fills = {} }
  for p, plan in ipairs(m.plans) do
    local slot_base = #all.slots
    all.ranges[p] = { first_step = #all.steps, num_steps = #plan.steps, first_run_slot = #all.run_slots,
      num_run_slots = #plan.run_slots, first_copy = #all.copies, num_copies = #plan.copies }
    local step_base = #all.steps
    for k, st in ipairs(plan.steps) do
      all.steps[#all.steps + 1] = { kernel = st.kernel, first_slot = slot_base + st.first_slot,
        parallel_size = st.parallel_size, parts = st.parts, chunk = st.chunk, name = st.name, plan = p, index = k }
    end
    for _, slot in ipairs(plan.slots) do
      all.slots[#all.slots + 1] = { kind = slot.kind, index = slot.index, offset = slot.offset,
        step = step_base + slot.step }
    end
    for _, r in ipairs(plan.run_slots) do all.run_slots[#all.run_slots + 1] = slot_base + r end
    for _, c in ipairs(plan.copies) do all.copies[#all.copies + 1] = c end
    for _, f in ipairs(plan.fills or {}) do
      all.fills[#all.fills + 1] = { step = step_base + f.step - 1, offset = f.offset, variable = f.variable }
    end
  end
  return all
end

local function numbers(list)
  local items = {}
  for i, v in ipairs(list) do items[i] = tostring(v) end
  return table.concat(items, ", ")
end

--- NAME.c. m as for M.header, plus: kernels = { {symbol, nparams, name} }, each plan's steps =
-- { {kernel (index), first_slot (0-based, in the plan), parallel_size, parts, chunk, name} },
-- slots = { {kind, index, offset, step} }, run_slots, copies = { {output, kind, index, offset} }
-- and input_staging/output_staging (arena offsets); max_parts, weights = { {name, dtype
-- (safetensors), shape, bytes, offset} }.
function M.source(m)
  local name = m.name
  local all = concatenated(m)
  local out = {}
  local function add(s) out[#out + 1] = s end
  add(string.format([[
/* %s.c — the run of a model exported by tcl %s (see %s.h). Generated; do not edit.
 * %d kernel runs of %d kernels (%s), one arena of %d bytes, weights %d bytes. */
#define _POSIX_C_SOURCE 200809L /* pthreads, clock_gettime, sysconf, fseeko */
#include "%s.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#if defined(__GNUC__)
#define HIDDEN __attribute__((visibility("hidden")))
#else
#define HIDDEN
#endif

/* ---- the model's plan (generated) ---- */

#define NUM_INPUTS %s_NUM_INPUTS
#define NUM_OUTPUTS %s_NUM_OUTPUTS
#define NUM_PLANS %d /* one per exported batch size */
#define NUM_STEPS %d
#define NUM_SLOTS %d
#define NUM_RUN_SLOTS %d
#define NUM_COPIES %d
#define NUM_WEIGHTS %d /* tensors read from the weights file */
#define NUM_CONSTANTS %d /* the model's own constants, held below */
#define NUM_VARIABLES %d /* variable sizes, given to each run (tcl_variables.c) */
#define NUM_VALUE_FILLS %d /* variables' values written into the arena before their steps */
#define MAX_PARTS %d /* the most parts of one step */
#define ARENA_BYTES ((size_t)%d)
#define WEIGHT_BYTES ((uint64_t)%d)
]], name, m.tcl_version, name, #all.steps, #m.kernels, table.concat(m.objects, ", "), m.arena_bytes, m.weight_bytes,
    name, name:upper(), name:upper(), #m.plans, #all.steps, #all.slots, #all.run_slots, #all.copies, #m.weights,
    #(m.constants or {}), #(m.variables or {}), #all.fills, m.max_parts, m.arena_bytes, m.weight_bytes))

  add("/* The kernels: void entry(void *buffer..., int64_t start, int64_t end), [start, end) the")
  add(" * iterations of the thread axis to run (all when the kernel has none). */")
  for _, k in ipairs(m.kernels) do
    local params = {}
    for i = 1, k.nparams do params[i] = "void *" end
    params[#params + 1] = "int64_t"
    params[#params + 1] = "int64_t"
    add(string.format("HIDDEN void %s(%s); /* %s */", k.symbol, table.concat(params, ", "), k.name))
  end
  add("")
  for i, k in ipairs(m.kernels) do
    local args = {}
    for j = 1, k.nparams do args[j] = string.format("b[%d]", j - 1) end
    add(string.format("static void call_kernel_%d(void *const *b, int64_t start, int64_t end) {", i))
    add(string.format("    %s(%s, start, end);", k.symbol, table.concat(args, ", ")))
    add("}")
  end
  local several = #m.plans > 1
  local function label(st)
    return several and string.format("batch %d, %d: %s", m.plans[st.plan].batch, st.index, st.name)
      or string.format("%d: %s", st.index, st.name)
  end
  add([[

typedef struct step_info {
    void (*call)(void *const *buffers, int64_t start, int64_t end);
    int first_slot;        /* the step's first buffer pointer in the instance's slots */
    int64_t parallel_size; /* iterations of the thread axis (0: none) */
    uint32_t parts;        /* how many parts the pool runs (1: a single call) */
    int64_t chunk;         /* iterations per part */
} step_info;
]])
  add("static const step_info STEPS[NUM_STEPS] = {")
  for _, st in ipairs(all.steps) do
    add(string.format("    {call_kernel_%d, %d, %d, %d, %d}, /* %s */", st.kernel, st.first_slot, st.parallel_size,
      st.parts, st.chunk, label(st)))
  end
  add("};")
  add([[

enum { IN_ARENA, IN_WEIGHTS, IN_INPUT, IN_OUTPUT };
typedef struct slot_source {
    int kind;      /* IN_* */
    int index;     /* the input or output (IN_INPUT, IN_OUTPUT) */
    size_t offset; /* in the arena or the weights */
} slot_source;
]])
  add("static const slot_source SLOTS[NUM_SLOTS] = {")
  local step = nil
  for _, slot in ipairs(all.slots) do
    if slot.step ~= step then
      step = slot.step
      add(string.format("    /* step %s */", label(all.steps[step])))
    end
    add(string.format("    {%s, %d, %d},", KIND[slot.kind], slot.index, slot.offset))
  end
  add("};")
  add("/* the slots of inputs and outputs, set at every run */")
  add("static const int RUN_SLOTS[NUM_RUN_SLOTS + 1] = {" .. (#all.run_slots > 0 and numbers(all.run_slots) or "0")
    .. "};")
  add([[

/* An output that is a copy of an input, a weight or another output. */
typedef struct output_copy {
    int output;
    int kind; /* IN_INPUT, IN_WEIGHTS or IN_OUTPUT */
    int index;
    size_t offset;
} output_copy;]])
  add("static const output_copy COPIES[NUM_COPIES + 1] = {")
  for _, c in ipairs(all.copies) do
    add(string.format("    {%d, %s, %d, %d},", c.output, KIND[c.kind], c.index, c.offset))
  end
  if #all.copies == 0 then add("    {0, IN_INPUT, 0, 0}, /* none */") end
  add("};")
  add([[

/* A kernel made for variable sizes reads their values from an int32 buffer, its last one:
 * before step `step` runs, the value of variable `variable` goes at `offset` in the arena. */
typedef struct value_fill {
    int step;
    size_t offset;
    int variable;
} value_fill;]])
  add("static const value_fill VALUE_FILLS[NUM_VALUE_FILLS + 1] = {")
  for _, f in ipairs(all.fills) do
    add(string.format("    {%d, %d, %d}, /* %s */", f.step, f.offset, f.variable, m.variables[f.variable + 1].name))
  end
  add("    {-1, 0, 0}};")
  if m.variables then
    local names, mins, maxes = {}, {}, {}
    for k, v in ipairs(m.variables) do names[k], mins[k], maxes[k] = c_string(v.name), v.min, v.max end
    add(string.format("const char *const %s_variables[%s_NUM_VARIABLES] = {%s};", name, name:upper(),
      table.concat(names, ", ")))
    add(string.format("const int64_t %s_variable_min[%s_NUM_VARIABLES] = {%s};", name, name:upper(), numbers(mins)))
    add(string.format("const int64_t %s_variable_max[%s_NUM_VARIABLES] = {%s};", name, name:upper(), numbers(maxes)))
  end
  add("")
  for p, plan in ipairs(m.plans) do
    local prefix = p == 1 and "const " .. name .. "_tensor_info " .. name or "static const " .. name
      .. "_tensor_info PLAN" .. (p - 1)
    add(string.format("%s_inputs[%s_NUM_INPUTS] = {", prefix, name:upper()))
    add(tensor_rows(plan.inputs, name))
    add("};")
    add(string.format("%s_outputs[%s_NUM_OUTPUTS] = {", prefix, name:upper()))
    add(tensor_rows(plan.outputs, name))
    add("};")
    add("/* where inputs and outputs not aligned to 64 bytes are staged in the arena */")
    add(string.format("static const size_t INPUT_STAGING_%d[NUM_INPUTS] = {%s};", p - 1, numbers(plan.input_staging)))
    add(string.format("static const size_t OUTPUT_STAGING_%d[NUM_OUTPUTS] = {%s};", p - 1,
      numbers(plan.output_staging)))
    add("")
  end
  add([[
/* A plan: the steps of one batch size, and where its rows are in the tables above. */
typedef struct plan_info {
    int64_t batch;
    int first_step, num_steps;
    int first_run_slot, num_run_slots;
    int first_copy, num_copies;
    const size_t *input_staging, *output_staging;
    const ]] .. name .. [[_tensor_info *inputs, *outputs;
} plan_info;]])
  add("static const plan_info PLANS[NUM_PLANS] = {")
  for p, plan in ipairs(m.plans) do
    local r = all.ranges[p]
    local infos = p == 1 and name or "PLAN" .. (p - 1)
    add(string.format("    {%d, %d, %d, %d, %d, %d, %d, INPUT_STAGING_%d, OUTPUT_STAGING_%d, %s_inputs, %s_outputs},",
      plan.batch or 0, r.first_step, r.num_steps, r.first_run_slot, r.num_run_slots, r.first_copy, r.num_copies,
      p - 1, p - 1, infos, infos))
  end
  add("};")
  if m.batch_sizes then
    add(string.format("const int64_t %s_batch_sizes[%s_NUM_BATCH_SIZES] = {%s};", name, name:upper(),
      numbers(m.batch_sizes)))
  end
  add("")
  add(cpu_check(m))
  add("")
  if m.weights_file == "safetensors" then
    add([[
typedef struct weight_info {
    const char *name;
    const char *dtype; /* safetensors' name: "F32", ... */
    int rank;
    const int64_t *shape;
    uint64_t bytes;
    uint64_t offset; /* in the instance's weights */
} weight_info;]])
    -- one spare row: a model whose every weight is a constant reads a file of no tensors
    add("static const weight_info WEIGHTS[NUM_WEIGHTS + 1] = {")
    for _, w in ipairs(m.weights) do
      add(string.format("    {%s, %s, %d, %s, %d, %d},", c_string(w.name), c_string(w.dtype), #w.shape,
        shape_literal(w.shape), w.bytes, w.offset))
    end
    add("    {NULL, NULL, 0, NULL, 0, 0}};")
    add(M.constants_source(m))
  elseif m.weights_file == "embed" then
    add(fill("HIDDEN extern const unsigned char @name@_weight_data[]; /* @name@_weights.c */", name))
    add(fill("#define WEIGHT_DATA @name@_weight_data", name))
  else
    add("#define WEIGHT_DATA ((const unsigned char *)NULL) /* the model has no weights */")
  end
  add("")
  add("static int load_weights(" .. name .. " *m, const char *path);")
  add("")
  add(fill([[
/* ---- the runtime: tcl's files beside this one, which name the API through these ---- */
#define MODEL @name@ /* the instance, struct @name@, and the prefix of the API */
#define MODEL_NAME "@name@"
#define STATUS(code) @NAME@_##code]], name))
  for _, file in ipairs(runtime_files.includes(m)) do add('#include "' .. file .. '"') end
  return table.concat(out, "\n") .. "\n"
end


--- The model's own constants in NAME.c (a model reading its weights from a file): each a byte
-- array, copied into the instance's weight block at open (CONSTANTS: offset, bytes, data).
function M.constants_source(m)
  local out = { "typedef struct constant_info {", "    uint64_t offset; /* in the instance's weights */",
    "    uint64_t bytes;", "    const unsigned char *data;", "} constant_info;" }
  for i, c in ipairs(m.constants) do
    out[#out + 1] = string.format("/* %s: %s %s */", c.name, c.dtype, shape_text(c.shape))
    out[#out + 1] = string.format("static const unsigned char CONSTANT_%d[%d + 1] =", i, #c.data)
    local data = c.data
    if #data == 0 then out[#out + 1] = '    ""' end
    for at = 1, #data, 32 do out[#out + 1] = '    "' .. data:sub(at, at + 31):gsub(".", HEX) .. '"' end
    out[#out] = out[#out] .. ";"
  end
  out[#out + 1] = "static const constant_info CONSTANTS[NUM_CONSTANTS + 1] = {"
  for i, c in ipairs(m.constants) do
    out[#out + 1] = string.format("    {%d, %d, CONSTANT_%d},", c.offset, #c.data, i)
  end
  out[#out + 1] = "    {0, 0, NULL}};"
  return table.concat(out, "\n")
end

--- NAME_weights.c: the weights as one 64-byte aligned array, each tensor at its offset.
-- blobs: { {name, dtype, shape, offset, bytes = (string)} } in offset order.
function M.weights_source(m, blobs)
  local out = { fill(string.format([[
/* @name@_weights.c — the weights of the model in @name@.c (%d tensors, %d bytes), exported by
 * tcl %s. Generated; do not edit. One array, 64-byte aligned as the kernels need, each tensor
 * at a multiple of 64 bytes; the string literal's closing NUL is one byte past the weights. */
#if defined(__GNUC__)
__attribute__((visibility("hidden")))
#endif
_Alignas(64) const unsigned char @name@_weight_data[%d + 1] =]], #blobs, m.weight_bytes, m.tcl_version,
    m.weight_bytes), m.name) }
  local at = 0
  for _, w in ipairs(blobs) do
    local pad = w.offset - at
    if pad > 0 then out[#out + 1] = '    "' .. string.rep("\\x00", pad) .. '"' end
    out[#out + 1] = string.format("    /* %s: %s %s at %d */", w.name, w.dtype, shape_text(w.shape), w.offset)
    local data = w.data
    for i = 1, #data, 32 do out[#out + 1] = '    "' .. data:sub(i, i + 31):gsub(".", HEX) .. '"' end
    at = w.offset + #data
  end
  if at < m.weight_bytes then out[#out + 1] = '    "' .. string.rep("\\x00", m.weight_bytes - at) .. '"' end
  out[#out] = out[#out] .. ";"
  return table.concat(out, "\n") .. "\n"
end

return M
