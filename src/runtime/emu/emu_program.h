/* emu_program.h — the layout of a built EMU program, shared by the files of the EMU device:
 * emu_build.c makes it, emu_run.c interprets it, emu_listing.c prints it. Layer: runtime.
 * Private to src/runtime (not installed; other layers see only emu.h).
 *
 * A program is an array of instructions, one per node, sources as instruction indices.
 * Execution keeps one register (a tcl_scalar) per instruction: a loop body overwrites its
 * registers on every iteration, which is all SSA values inside loops need. RANGE and END
 * are jumps: RANGE starts its loop (or jumps past its END), END increments the loop
 * variable and jumps back to the instruction after its RANGE.
 *
 * Memory ids: PARAMs by slot (0..nparams-1), then the DEFINE_REGs (nparams + i), then the
 * DEFINE_LOCALs (nparams + nregs + i).
 *
 * Barriers: the threads of a group share one register file. A BARRIER stops a thread; before
 * the next one runs, the registers it will still read after the barrier (`live`, found at build
 * time: a register read past a barrier executed since it was written) are saved, and they are
 * restored when it resumes. A program without barriers has no live registers and saves nothing.
 *
 * WMMA: a thread stops at a WMMA as at a barrier (without ordering memory). Once every thread of
 * the group waits at the same WMMA, each warp's (a warpgroup shape: each warpgroup's) D is
 * computed from its lanes' saved registers (a WMMA's non-constant sources are always kept, so
 * they are among them: a warpgroup shape's A and B sources are INDEX registers, the tiles'
 * first elements in local memory) and each lane's result goes into its saved copy of the WMMA's
 * register (always kept too), which it gets back when it resumes. `live_slot` finds a
 * register's place among the saved ones.
 *
 * SHUFFLE: a thread stops there as at a WMMA; once every thread of the group waits at it, each
 * lane's saved copy of the SHUFFLE's register gets the saved value of its source in the lane
 * `lane xor mask` of its warp (32 consecutive threads of the group). */
#ifndef TCLC_RUNTIME_EMU_PROGRAM_H
#define TCLC_RUNTIME_EMU_PROGRAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/ops.h"
#include "core/wmma.h"
#include "emu.h"

/* What an instruction does at run time. */
typedef enum emu_kind {
    K_NOP,     /* SINK, GROUP: ordering only */
    K_BUFFER,  /* PARAM, DEFINE_REG, AFTER of a buffer: names memory, computes nothing */
    K_CONST,
    K_ALU,     /* every ALU op, CAST, BITCAST */
    K_RANGE,
    K_END,
    K_INDEX,
    K_LOAD,
    K_STORE,
    K_COPY,    /* an asynchronous copy (STORE {"async", n}): n elements PARAM -> DEFINE_LOCAL, landing at the barrier
                * that waits for its group (the copies of one thread between two barriers) */
    K_SPECIAL,
    K_ALIAS,   /* AFTER of a value: the value */
    K_BARRIER, /* stops the thread until all threads of its group arrive; lands every copy group but the `groups_left` newest */
    K_WMMA,    /* stops the thread like a barrier; the group's warps compute it together */
    K_SHUFFLE, /* stops the thread like a WMMA; each lane then gets the value of lane (lane xor `lane_mask`) of its warp */
} emu_kind;

/* Which memory a memory id names. */
typedef enum emu_space { SPACE_PARAM, SPACE_REG, SPACE_LOCAL } emu_space;

typedef struct emu_inst {
    uint8_t kind;
    uint8_t dtype;
    uint16_t op;
    uint8_t nval;      /* ALU: number of operands a, b, c */
    uint8_t wide;      /* INDEX, RANGE, SPECIAL: the integer operand is uint64 (may exceed int64) */
    uint8_t shape;     /* WMMA: its shape's index in tcl_wmma_shapes */
    uint8_t deferred;  /* WMMA of a warpgroup shape: "deferred", its tile reads last until the second barrier */
    int32_t a, b, c;   /* operand instructions, -1 when absent (LOAD: a = INDEX, b = gate; STORE, COPY: a = INDEX,
                        * b = value (COPY: the LOAD of the source), c = gate) */
    int32_t jump;      /* RANGE: its END; END: its RANGE */
    int32_t mem;       /* memory id for buffers, INDEX, LOAD, STORE; -1 otherwise (while building,
                        * a DEFINE_REG/DEFINE_LOCAL holds -(its position among its kind + 2)) */
    int32_t loop;      /* innermost RANGE enclosing this instruction, -1 at top level */
    union {                    /* what the kind needs besides its operands (-1 for other kinds) */
        int32_t special;       /* SPECIAL: which index, 0..2 gidx, 3..5 lidx (tcl_emu_special_names) */
        int32_t wmma_out;      /* WMMA: its output, the D register this node yields */
        int32_t copy_elements; /* COPY: the elements one asynchronous copy moves */
        int32_t lane_mask;     /* SHUFFLE: lane (lane xor lane_mask) is the source (1..31) */
        int32_t groups_left;   /* BARRIER: the asynchronous-copy groups it leaves in flight (0: none) */
    };
    uint32_t src_off, nsrc; /* all sources, in p->srcs (for the listing) */
    int32_t tiles;     /* WMMA of a warpgroup shape: its tiles' strides in p->tile_strides; -1 otherwise */
    tcl_scalar imm;    /* CONST: the value; LOAD: the gated-off value; RANGE, SPECIAL: 0 */
    tcl_arg arg;       /* copy of the node's arg, for the listing */
} emu_inst;

/* A kernel argument, a scratch buffer or a local buffer. */
typedef struct emu_mem_info {
    tcl_dtype dtype;
    int64_t slot;
    size_t numel, itemsize;
    size_t offset;       /* scratch, local: byte offset in a thread's scratch / a group's local block */
    bool stored;         /* whether some STORE writes it */
} emu_mem_info;

struct tcl_emu_program {
    char *name;
    emu_inst *inst;
    size_t n;
    int32_t *srcs;
    size_t nparams, nregs, nlocals;
    emu_mem_info *params; /* by slot */
    emu_mem_info *regs;   /* memory id nparams + i */
    emu_mem_info *locals; /* by slot: memory id nparams + nregs + slot */
    size_t scratch_bytes, local_bytes;
    size_t nbarriers;
    size_t nwmma;         /* WMMA instructions; with the BARRIERs and SHUFFLEs, where a group's threads stop */
    size_t nshuffle;      /* SHUFFLE instructions */
    size_t wmma_elements; /* the most elements of A, B and C of one WMMA together: a run holds them */
    tcl_wmma_strides *tile_strides; /* of the warpgroup WMMAs (their `tiles`), from their args */
    size_t ntile_strides;
    int32_t *live;        /* registers kept across barriers (instruction indices), nlive of them */
    size_t nlive;
    int32_t *live_slot;   /* with WMMAs or SHUFFLEs: per instruction, its index in live (-1: not kept) */
    tcl_launch launch;
    uint32_t group_threads; /* threads per workgroup */
    size_t bytes; /* heap bytes held, about */
};

/* Whether the threads of a group run in lockstep, from stop to stop (BARRIER, WMMA, SHUFFLE). */
static inline bool tcl_emu_lockstep(const tcl_emu_program *p) { return p->nbarriers || p->nwmma || p->nshuffle; }

/* SPECIAL's arg names, by the index an instruction's `special` holds: gidx0..2, lidx0..2. */
extern const char *const tcl_emu_special_names[6];

static inline emu_space tcl_emu_mem_space(const tcl_emu_program *p, size_t mem) {
    return mem < p->nparams ? SPACE_PARAM : mem < p->nparams + p->nregs ? SPACE_REG : SPACE_LOCAL;
}
static inline const emu_mem_info *tcl_emu_mem_info(const tcl_emu_program *p, size_t mem) {
    switch (tcl_emu_mem_space(p, mem)) {
    case SPACE_PARAM: return &p->params[mem];
    case SPACE_REG: return &p->regs[mem - p->nparams];
    default: return &p->locals[mem - p->nparams - p->nregs];
    }
}
/* The op that defines memory of a space, for messages: "PARAM", "DEFINE_REG", "DEFINE_LOCAL". */
static inline const char *tcl_emu_space_name(emu_space s) {
    return s == SPACE_PARAM ? "PARAM" : s == SPACE_REG ? "DEFINE_REG" : "DEFINE_LOCAL";
}

/* Names for messages and the listing, "?" for an id that is not valid. */
static inline const char *tcl_emu_op_name(int op) { return tcl_op_valid(op) ? tcl_op_get((tcl_op)op)->name : "?"; }
static inline const char *tcl_emu_dtype_name(int dt) {
    return tcl_dtype_valid(dt) ? tcl_dtype_get((tcl_dtype)dt)->name : "?";
}

/* An integer register the build checked to be a non-bool int, as int64: only uint64 (wide)
 * needs care, and its values past INT64_MAX saturate (they are out of range of any buffer
 * and any loop anyway). */
static inline int64_t tcl_emu_reg_int(tcl_scalar s, bool wide) {
    if (wide) return s.v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)s.v.u;
    return s.v.i; /* sign-extended, or zero-extended below 64 bits: the same integer */
}

#endif
