/* emu_profile.h — how well a GPU-mode program's accesses to global memory coalesce, measured
 * by EMU on the first warp of the first workgroup. Layer: runtime.
 *
 * A GPU serves a warp's access to global memory in 32-byte sectors: the 32 lanes of one LOAD
 * reading 32 consecutive floats touch 4 sectors, reading every 8th float 32. For each LOAD,
 * STORE and asynchronous COPY of a PARAM, the profiler records the bytes each lane of the
 * first 32 threads of workgroup 0 accesses in each of its first EMU_PROFILE_EXECUTIONS
 * executions (the k-th execution of an instruction by each lane is one warp-wide access: the
 * threads of a workgroup run in lockstep), and then counts per instruction the sectors those
 * accesses touched and the fewest sectors their distinct bytes fit in. needed / sectors is
 * 1 for a coalesced access (also for one value every lane reads), 1/8 when each lane of a
 * float32 load is 32 bytes from the next. That is the quantity a GPU profiler reports as
 * sectors per request; what it cannot see is the cache: a tile loaded uncoalesced and reused
 * from L1 costs less than these figures say. */
#ifndef TCLC_RUNTIME_EMU_PROFILE_H
#define TCLC_RUNTIME_EMU_PROFILE_H
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* Executions per instruction that are recorded (the rest are not counted). */
#define EMU_PROFILE_EXECUTIONS 64
/* Lanes of a warp: the threads recorded are lids 0..31 of workgroup 0. */
#define EMU_PROFILE_LANES 32
#define EMU_PROFILE_SECTOR 32

typedef struct tcl_emu_program tcl_emu_program;

/* One instruction's figures. */
typedef struct tcl_emu_access_stats {
    size_t pc;           /* the LOAD, STORE or COPY */
    const char *what;    /* "LOAD", "STORE", or "COPY" (an asynchronous copy: its read) */
    int32_t slot;        /* the PARAM slot it accesses (a COPY: the slot it reads) */
    uint32_t bytes;      /* per lane and execution: the element's size, or the copy's bytes */
    uint64_t executions; /* warp-wide executions counted */
    uint64_t sectors;    /* 32-byte sectors they touched */
    uint64_t needed;     /* the fewest sectors their distinct bytes fit in */
} tcl_emu_access_stats;

typedef struct tcl_emu_profiler tcl_emu_profiler;

/* A recorder for program p's global accesses; NULL with err set when out of memory. */
tcl_emu_profiler *tcl_emu_profiler_new(const tcl_emu_program *p, tcl_error *err);
void tcl_emu_profiler_free(tcl_emu_profiler *pr);
/* Lane `lane` (< EMU_PROFILE_LANES) accessed `bytes` bytes at byte offset `at` of its buffer in
 * instruction pc (a global LOAD, STORE or COPY; others are ignored). */
void tcl_emu_profiler_record(tcl_emu_profiler *pr, size_t pc, uint32_t lane, int64_t at, uint32_t bytes);
/* The figures of every global access instruction that ran, in program order, into *out
 * (malloc'd, *n of them; NULL when none). TCL_ERR_MEMORY when out of memory. */
tcl_status tcl_emu_profiler_results(const tcl_emu_profiler *pr, tcl_emu_access_stats **out, size_t *n, tcl_error *err);

#endif
