/* emu.h — the EMU device: runs a linearized kernel directly, one instruction at a time.
 * Layer: runtime.
 *
 * EMU is the reference semantics of kernels: every ALU op goes through tcl_alu_exec (the
 * one definition of scalar semantics, core/alu.h), every load and store through the
 * storage conversions of buffer.h, and every memory access is bounds-checked. Other
 * devices are tested against it. Built in emu_build.c, run in emu_run.c, listed in
 * emu_listing.c; emu_program.h is the program layout they share.
 *
 * A program is built from a linear list of kernel nodes (docs/design/encodings.md,
 * "Kernels"): each node after its sources, a RANGE opening a loop that its END closes.
 * Accepted ops and what they do:
 *   PARAM {slot, numel}       kernel argument `slot`; slots are 0..n-1, each once
 *   DEFINE_REG {slot, numel}  per-thread scratch memory (accumulators), zeroed per thread;
 *                             at most TCL_EMU_MAX_REG_ELEMENTS each, TCL_EMU_MAX_SCRATCH_BYTES in all
 *   DEFINE_LOCAL {slot, numel} memory of one workgroup, shared by its threads; slots 0..n-1,
 *                             each once; TCL_EMU_MAX_LOCAL_BYTES in all; undefined until written
 *   CONST                     its value
 *   RANGE (end, deps...)      loop variable from 0 while < end; end <= 0 skips the loop
 *   END (deps..., RANGE)      closes the loop of its last source (the others only order)
 *   INDEX (buffer, i)         element i of a PARAM/DEFINE_REG/DEFINE_LOCAL (possibly through AFTER)
 *   LOAD (INDEX[, gate])      the element; gated off: 0 of its dtype, no access
 *   STORE (INDEX, v[, gate])  writes v; gated off: nothing; {"async", n}: an asynchronous copy
 *                             (docs/design/encodings.md), landing at the barrier that waits for its group
 *   SPECIAL (size) "gidx0".."gidx2" | "lidx0".."lidx2"   the thread's group / local id
 *   ALU ops, CAST, BITCAST    through tcl_alu_exec (integer division by zero gives its 0)
 *   BARRIER (deps...) [n]     the threads of the workgroup wait for each other (sources order only);
 *                             it lands every asynchronous-copy group but the n newest (0..64; none: 0)
 *   WMMA (a..., b..., c...) {shape, out}   a warp's tensor-core multiply-accumulate (core/wmma.h);
 *     (a_tile, b_tile, c...) {shape, out, strides}   a warpgroup's, A and B read from local memory
 *   AFTER (x, deps...)        x, once deps are done (an ordering edge; x may be a buffer)
 *   SINK, GROUP               nothing (ordering only)
 * Validation at build time names the instruction index and op of the first problem:
 * sources must come earlier and be visible (defined outside any loop closed since, except
 * in ordering-only positions), RANGE/END must pair and nest, dtypes must fit each op.
 *
 * GPU shape (docs/design/encodings.md, "GPU-shaped kernels"): a program has a launch of global size
 * (workgroups) and local size (threads per workgroup, at most TCL_EMU_MAX_WORKGROUP), 3 dims
 * each. It runs once per thread, the groups one after another (x fastest). Without a BARRIER
 * a group's threads run one after another, each to its end. With barriers they run in
 * lockstep: thread 0 until its next barrier (or its end), then thread 1, ..., and once all
 * have arrived at the same barrier they go on past it; threads that arrive at different
 * barriers, or some at a barrier while others finished, are an error ("barrier divergence").
 * A WMMA stops the threads the same way (it orders no memory): once all threads of the group
 * wait at it, each warp (32 consecutive threads of the group, x fastest) computes D = A*B + C
 * from its lanes' fragments, in float32 in k order, and every lane goes on with its element of
 * D. The whole workgroup must reach each WMMA together (stricter than a GPU, where the warp
 * must): threads elsewhere are an error ("WMMA divergence"). A workgroup with a WMMA has a
 * multiple of 32 threads (a build error otherwise). A warpgroup shape (wg_*) is computed by each
 * warpgroup (128 consecutive threads; a workgroup with one has a multiple of 128 threads): its
 * A and B are tiles in local memory whose first elements all 128 lanes must give alike, every
 * element inside the local array, read as by every thread of the warpgroup (race checks below);
 * an error naming the kernel and the WMMA otherwise.
 *
 * Races are errors (TCL_ERR_INVALID) that name the kernel, the instruction, the memory and
 * element, and both threads:
 *   local memory: a read of an element another thread of the group wrote, a write of one
 *     another thread read or wrote, with no barrier between them; and a read of an element
 *     no thread of the group has written (uninitialized local memory). A warpgroup WMMA's
 *     tiles are read by all the warpgroup's threads: stored before a barrier they all passed
 *     since, not written again before the next; and any access to an element an asynchronous
 *     copy wrote before a barrier has landed the copy's group (the copying thread's too);
 *   global memory (PARAMs; slots given one buffer share its elements), in a launch of more
 *     than one thread: two threads writing one element, or one thread writing an element
 *     another read or wrote (a barrier does not order global memory here).
 * A launch of one thread checks no global races. */
#ifndef TCLC_RUNTIME_EMU_H
#define TCLC_RUNTIME_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "core/uop.h"
#include "runtime/buffer.h"

/* Per-thread scratch memory is cleared for every thread, so it must stay small: a register
 * array (DEFINE_REG) holds accumulators and tiles, not tensors. */
#define TCL_EMU_MAX_REG_ELEMENTS 16384
#define TCL_EMU_MAX_SCRATCH_BYTES (1 << 20)
/* Local (shared) memory of one workgroup, all DEFINE_LOCALs together; the threads of one group. */
#define TCL_EMU_MAX_LOCAL_BYTES (256 * 1024) /* above every GPU target's (CUDA_SM90: 227 KiB) */
#define TCL_EMU_MAX_WORKGROUP 1024
/* With barriers every thread of a group keeps its own scratch memory: their total. */
#define TCL_EMU_MAX_GROUP_SCRATCH_BYTES (64 << 20)

typedef struct tcl_launch {
    /* 0 means "not given": taken from a SPECIAL with a CONST size, else 1 */
    uint32_t global[3];
    uint32_t local[3];
} tcl_launch;

typedef struct tcl_emu_program tcl_emu_program;

/* Builds a program from n nodes in execution order. name is copied; launch may be NULL
 * (all sizes "not given"). Returns NULL with err set on an invalid program or out of memory.
 * The nodes are only read: the program keeps no references to them. */
tcl_emu_program *tcl_emu_program_new(const char *name, tcl_uop *const *nodes, size_t n, const tcl_launch *launch,
                                     tcl_error *err);
void tcl_emu_program_free(tcl_emu_program *p);

const char *tcl_emu_program_name(const tcl_emu_program *p);
size_t tcl_emu_program_size(const tcl_emu_program *p);
/* The heap memory the program holds, in bytes (about). */
size_t tcl_emu_program_bytes(const tcl_emu_program *p);
size_t tcl_emu_program_nparams(const tcl_emu_program *p);
/* dtype and numel of parameter slot (slot < nparams). */
void tcl_emu_program_param(const tcl_emu_program *p, size_t slot, tcl_dtype *dtype, size_t *numel);
/* The launch, with every size resolved (>= 1). */
tcl_launch tcl_emu_program_launch(const tcl_emu_program *p);
/* Bytes of local memory a workgroup holds (all DEFINE_LOCALs), and the number of BARRIERs. */
size_t tcl_emu_program_local_bytes(const tcl_emu_program *p);
size_t tcl_emu_program_nbarriers(const tcl_emu_program *p);

/* Runs every thread on bufs (one per PARAM slot, in slot order): checks their number,
 * device, dtype and numel first. Returns TCL_OK and the elapsed seconds, or a failure with
 * err set (a mismatch, an out-of-bounds access naming kernel, instruction and index, a race
 * or a barrier divergence, out of memory). Buffers written before an error keep what was
 * written. */
tcl_status tcl_emu_program_run(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, double *seconds,
                               tcl_error *err);

/* Runs as tcl_emu_program_run does, and measures how the global accesses of the first warp of
 * workgroup 0 coalesce (emu_profile.h): *stats (malloc'd, *nstats of them, NULL when none;
 * the caller frees it) is set only when the run succeeded. */
struct tcl_emu_access_stats;
tcl_status tcl_emu_program_profile(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, double *seconds,
                                   struct tcl_emu_access_stats **stats, size_t *nstats, tcl_error *err);

/* A readable listing, one instruction per line, indented by loop depth. A malloc'd string
 * the caller frees, or NULL when out of memory (core/error.h, rule 4). */
char *tcl_emu_program_dump(const tcl_emu_program *p);

#endif
