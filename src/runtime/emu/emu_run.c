/* emu_run.c — the EMU interpreter: runs a built program's instructions (emu_program.h) once
 * per thread of its launch on the caller's buffers, every memory access bounds-checked and
 * every ALU op through tcl_alu_exec; the threads of a workgroup in lockstep between barriers,
 * and races between threads found through shadow memory. Layer: runtime.
 *
 * Lockstep: a group's threads share one register file. Thread 0 runs until a BARRIER, a WMMA or
 * a SHUFFLE (or its end), then thread 1, ...; a thread that stops saves the registers it reads
 * after the stop (the program's `live` list) and gets them back when the group goes on past it.
 * At a WMMA the warps compute their products from the saved registers first (run_wmma); a
 * warpgroup shape's warpgroups read A and B from local memory, reads by all their threads
 * (read_tile). At a SHUFFLE each thread gets its partner lane's saved value (run_shuffle). With
 * stops each thread also has its own scratch block (DEFINE_REG). A program without any runs each
 * thread from start to end and saves nothing.
 *
 * Races, through shadow memory beside the data:
 *   global (PARAMs, in a launch of more than one thread; only for buffers some STORE writes,
 *     directly or through another slot given the same buffer): per element the thread that
 *     wrote it and the first two threads that read it in this launch (two are enough to find,
 *     for any writer, a reader other than itself), as launch-wide thread ids + 1.
 *   local (DEFINE_LOCALs): per element the epoch and thread of its last write and the epoch
 *     and first two threads of its reads. Epochs count up through the whole run: one starts at
 *     each group and at each barrier, so "written in this group" is `write epoch >= the
 *     group's first` and "with no barrier between" is `epoch == the current one`; nothing is
 *     cleared between groups. An asynchronous copy marks its elements `copied`: the copies a
 *     thread issues between two barriers are a group, the epoch they were issued in (all threads
 *     pass the same barriers). A barrier with arg n that ends epoch E lands the groups up to
 *     E - n (`landed_through`), so a copied element is in flight while its write epoch is later.
 *     A warpgroup WMMA's reads of its tiles count as reads by its warpgroup's first two threads
 *     (read_tile); a "deferred" one's also hold the elements (`held`) through the epoch after
 *     theirs: CUDA may wait for its products a stage later, past one barrier.
 * A read of local memory no thread of the group wrote is reported at the end of its epoch
 * (the next barrier, or the group's end): a thread after it that writes the element in the
 * same epoch turns it into the race it is, named with both threads. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_profile.h"
#include "emu_program.h"

/* per element of a PARAM: launch-wide thread ids + 1, 0 for none */
typedef struct emu_gshadow {
    uint32_t writer, reader[2];
} emu_gshadow;

/* per element of a DEFINE_LOCAL: epochs, and threads' indices in their group + 1 (0: none) */
typedef struct emu_lshadow {
    uint64_t write_epoch, read_epoch;
    uint64_t held; /* a "deferred" warpgroup WMMA read it in epoch held - 1 (0: none): no write until epoch held + 1 */
    uint32_t writer, reader[2];
    uint32_t holder; /* the first thread of that WMMA's warpgroup + 1 */
    bool copied; /* the last write was an asynchronous copy: no thread may touch it until its group lands */
} emu_lshadow;

typedef struct emu_mem {
    unsigned char *data;
    size_t numel, itemsize;
    void *shadow; /* emu_gshadow (PARAM) or emu_lshadow (DEFINE_LOCAL) per element; NULL: unchecked */
} emu_mem;

/* Kept out of the interpreter's loop (inlined, they slow every instruction of it). */
#if defined(__GNUC__)
#define EMU_NOINLINE __attribute__((noinline))
#else
#define EMU_NOINLINE
#endif

#define DONE SIZE_MAX /* where a thread that ran to its end stopped */

/* The state of a run: one register file, the memory, and the thread running now. */
typedef struct emu_run {
    const tcl_emu_program *p;
    tcl_error *err;
    tcl_scalar *regs;
    emu_mem *mem;           /* params, scratch buffers (of the running thread), locals */
    unsigned char *scratch; /* one block; with barriers one per thread of a group */
    unsigned char *local;   /* a group's local memory */
    tcl_scalar *saved;      /* with barriers: live registers, nlive per thread of a group */
    tcl_scalar *wmma;       /* with WMMAs: A, B and C of the warp or warpgroup computing one (run_wmma) */
    emu_gshadow **owned;    /* per param slot, the shadow it allocated (NULL: none or shared) */
    uint64_t group;         /* the running thread: its group (linear, x fastest) */
    uint32_t lid;           /* and its index in the group (x fastest) */
    tcl_emu_profiler *prof; /* the run's profiler (emu_profile.h), or NULL */
    tcl_emu_profiler *recording; /* prof while the running thread is one it records, else NULL */
    uint64_t epoch, group_epoch;
    uint64_t landed_through; /* the asynchronous copies issued in epochs up to this one have landed */
    /* the first read of unwritten local memory in this epoch, reported at its end */
    bool uninit;
    size_t uninit_pc;
    uint32_t uninit_lid;
    int32_t uninit_mem;
    int64_t uninit_idx;
} emu_run;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t launch_threads(const tcl_launch *l) {
    return (uint64_t)l->global[0] * l->global[1] * l->global[2] * l->local[0] * l->local[1] * l->local[2];
}

/* "thread gidx (x,y,z) lidx (x,y,z)" of a group and an index in it. */
typedef struct thread_name { char s[112]; } thread_name;
static thread_name name_thread(const tcl_emu_program *p, uint64_t group, uint32_t lid) {
    const tcl_launch *l = &p->launch;
    thread_name t;
    snprintf(t.s, sizeof t.s, "thread gidx (%" PRIu64 ",%" PRIu64 ",%" PRIu64 ") lidx (%u,%u,%u)", group % l->global[0],
             group / l->global[0] % l->global[1], group / l->global[0] / l->global[1], lid % l->local[0],
             lid / l->local[0] % l->local[1], lid / l->local[0] / l->local[1]);
    return t;
}

/* "kernel 'name': instruction pc (OP): <message>", and which thread when there are several. */
TCL_PRINTF_LIKE(6, 7)
static tcl_status fail_at(const emu_run *r, tcl_status s, size_t pc, uint32_t lid, bool name_it, const char *fmt, ...) {
    const tcl_emu_program *p = r->p;
    tcl_fail(r->err, s, "kernel '%s': instruction %zu (%s): ", p->name, pc, tcl_emu_op_name(p->inst[pc].op));
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(r->err, fmt, ap);
    va_end(ap);
    if (name_it && launch_threads(&p->launch) > 1) tcl_error_append(r->err, " (%s)", name_thread(p, r->group, lid).s);
    return s;
}

/* "element i of PARAM slot s" */
typedef struct elem_name { char s[96]; } elem_name;
static elem_name name_elem(const tcl_emu_program *p, int32_t mem, int64_t idx) {
    elem_name e;
    snprintf(e.s, sizeof e.s, "element %" PRId64 " of %s slot %" PRId64, idx,
             tcl_emu_space_name(tcl_emu_mem_space(p, (size_t)mem)), tcl_emu_mem_info(p, (size_t)mem)->slot);
    return e;
}

EMU_NOINLINE static tcl_status out_of_bounds(const emu_run *r, size_t pc, int64_t idx) {
    const tcl_emu_program *p = r->p;
    size_t m = (size_t)p->inst[pc].mem;
    const emu_mem_info *info = tcl_emu_mem_info(p, m);
    return fail_at(r, TCL_ERR_RUNTIME, pc, r->lid, true, "index %" PRId64 " is out of bounds for %s slot %" PRId64 " (%zu elements)",
                   idx, tcl_emu_space_name(tcl_emu_mem_space(p, m)), info->slot, info->numel);
}

static tcl_status report_uninit(const emu_run *r) {
    return fail_at(r, TCL_ERR_INVALID, r->uninit_pc, r->uninit_lid, true,
                   "reads %s, which no thread of the workgroup has written (uninitialized local memory)",
                   name_elem(r->p, r->uninit_mem, r->uninit_idx).s);
}

/* The kinds of race: what the running thread does, and what the other did before. */
typedef enum race_kind { READ_AFTER_WRITE, WRITE_AFTER_WRITE, WRITE_AFTER_READ } race_kind;
static const char *const race_does[3] = {"reads", "writes", "writes"};
static const char *const race_did[3] = {"wrote", "also wrote", "read"};
static const char *const race_local_why[3] = {"a read before the barrier that orders it",
                                              "two writes need a barrier between them",
                                              "the read and the write need a barrier between them"};

/* A race on global memory: the running thread against the thread of launch-wide id other - 1. */
static tcl_status global_race(const emu_run *r, size_t pc, int32_t mem, int64_t idx, race_kind kind, uint32_t other) {
    const tcl_emu_program *p = r->p;
    uint32_t nt = p->group_threads;
    uint64_t o = other - 1;
    return fail_at(r, TCL_ERR_INVALID, pc, 0, false,
                   "race: %s %s %s, which %s %s in the same launch (threads of one launch are not ordered)",
                   name_thread(p, r->group, r->lid).s, race_does[kind], name_elem(p, mem, idx).s,
                   name_thread(p, o / nt, (uint32_t)(o % nt)).s, race_did[kind]);
}

/* A race on local memory: the running thread against thread other - 1 of its group. */
static tcl_status local_race(const emu_run *r, size_t pc, int32_t mem, int64_t idx, race_kind kind, uint32_t other) {
    const tcl_emu_program *p = r->p;
    return fail_at(r, TCL_ERR_INVALID, pc, 0, false, "race: %s %s %s, which %s %s with no barrier between them (%s)",
                   name_thread(p, r->group, r->lid).s, race_does[kind], name_elem(p, mem, idx).s,
                   name_thread(p, r->group, other - 1).s, race_did[kind], race_local_why[kind]);
}

/* Whether a local element's last write is an asynchronous copy whose group has not landed. */
static bool copy_in_flight(const emu_run *r, const emu_lshadow *sh) {
    return sh->copied && sh->write_epoch > r->landed_through;
}

/* An access to a local element that an asynchronous copy wrote and no barrier has waited for
 * yet: until one does, no thread, its own included, may read or write the element. */
static tcl_status copy_race(const emu_run *r, size_t pc, int32_t mem, int64_t idx, const char *does, const emu_lshadow *sh) {
    const tcl_emu_program *p = r->p;
    uint64_t passed = r->epoch - sh->write_epoch; /* barriers since the copy: epochs within one group */
    return fail_at(r, TCL_ERR_INVALID, pc, 0, false,
                   "race: %s %s %s, which an asynchronous copy of %s wrote, and no barrier since has waited for it "
                   "(%" PRIu64 " barrier%s passed since the copy; a barrier with arg n lands every group of copies but "
                   "the n newest, the group it closes included; one without an arg lands all)",
                   name_thread(p, r->group, r->lid).s, does, name_elem(p, mem, idx).s,
                   name_thread(p, r->group, sh->writer - 1).s, passed, passed == 1 ? "" : "s");
}

/* Whether a local element is held by a "deferred" warpgroup WMMA of this group whose reads still
 * last: it read the element in this epoch or the one before. */
static bool held_by_deferred(const emu_run *r, const emu_lshadow *sh) {
    return sh->held && sh->held - 1 >= r->group_epoch && r->epoch <= sh->held;
}

/* A write to a local element a "deferred" warpgroup WMMA read one barrier ago. */
static tcl_status deferred_race(const emu_run *r, size_t pc, int32_t mem, int64_t idx, const emu_lshadow *sh) {
    const tcl_emu_program *p = r->p;
    return fail_at(r, TCL_ERR_INVALID, pc, 0, false,
                   "race: %s writes %s, which the \"deferred\" WMMA of the warpgroup of %s read one barrier ago (a "
                   "deferred WMMA's reads of its tiles last until the second barrier after it)",
                   name_thread(p, r->group, r->lid).s, name_elem(p, mem, idx).s, name_thread(p, r->group, sh->holder - 1).s);
}

/* Race checks of an access by instruction pc to element idx of memory id mem (the instruction's
 * own but for a warpgroup WMMA's tiles), which has a shadow. */
EMU_NOINLINE static tcl_status check_read(emu_run *r, size_t pc, int32_t mem, int64_t idx) {
    const tcl_emu_program *p = r->p;
    const emu_mem *m = &r->mem[mem];
    if (tcl_emu_mem_space(p, (size_t)mem) == SPACE_LOCAL) {
        emu_lshadow *sh = (emu_lshadow *)m->shadow + idx;
        uint32_t me = r->lid + 1;
        if (copy_in_flight(r, sh)) return copy_race(r, pc, mem, idx, "reads", sh);
        if (sh->write_epoch < r->group_epoch) {
            if (!r->uninit) {
                r->uninit = true;
                r->uninit_pc = pc;
                r->uninit_lid = r->lid;
                r->uninit_mem = mem;
                r->uninit_idx = idx;
            }
        } else if (sh->write_epoch == r->epoch && sh->writer != me) {
            return local_race(r, pc, mem, idx, READ_AFTER_WRITE, sh->writer);
        }
        if (sh->read_epoch != r->epoch) {
            sh->read_epoch = r->epoch;
            sh->reader[0] = me;
            sh->reader[1] = 0;
        } else if (sh->reader[0] != me && !sh->reader[1]) {
            sh->reader[1] = me;
        }
        return TCL_OK;
    }
    emu_gshadow *sh = (emu_gshadow *)m->shadow + idx;
    uint32_t me = (uint32_t)(r->group * p->group_threads + r->lid + 1);
    if (sh->writer && sh->writer != me) return global_race(r, pc, mem, idx, READ_AFTER_WRITE, sh->writer);
    if (!sh->reader[0]) sh->reader[0] = me;
    else if (sh->reader[0] != me && !sh->reader[1]) sh->reader[1] = me;
    return TCL_OK;
}

EMU_NOINLINE static tcl_status check_write(emu_run *r, size_t pc, int32_t mem, int64_t idx) {
    const tcl_emu_program *p = r->p;
    const emu_mem *m = &r->mem[mem];
    if (tcl_emu_mem_space(p, (size_t)mem) == SPACE_LOCAL) {
        emu_lshadow *sh = (emu_lshadow *)m->shadow + idx;
        uint32_t me = r->lid + 1;
        if (copy_in_flight(r, sh)) return copy_race(r, pc, mem, idx, "writes", sh);
        if (sh->write_epoch == r->epoch && sh->writer != me) return local_race(r, pc, mem, idx, WRITE_AFTER_WRITE, sh->writer);
        if (sh->read_epoch == r->epoch) {
            uint32_t other = sh->reader[0] != me ? sh->reader[0] : sh->reader[1];
            if (other) return local_race(r, pc, mem, idx, WRITE_AFTER_READ, other);
        }
        if (held_by_deferred(r, sh)) return deferred_race(r, pc, mem, idx, sh);
        sh->write_epoch = r->epoch;
        sh->writer = me;
        sh->copied = false;
        return TCL_OK;
    }
    emu_gshadow *sh = (emu_gshadow *)m->shadow + idx;
    uint32_t me = (uint32_t)(r->group * p->group_threads + r->lid + 1);
    if (sh->writer && sh->writer != me) return global_race(r, pc, mem, idx, WRITE_AFTER_WRITE, sh->writer);
    uint32_t other = sh->reader[0] && sh->reader[0] != me ? sh->reader[0] : sh->reader[1] != me ? sh->reader[1] : 0;
    if (other) return global_race(r, pc, mem, idx, WRITE_AFTER_READ, other);
    sh->writer = me;
    return TCL_OK;
}

/* Runs the asynchronous copy at pc (K_COPY, not gated off): `copy_elements` elements from the LOAD's
 * buffer at its index to local memory at the copy's, both indices multiples of the count (the
 * promise of the encoding). The destination's elements are marked copied: reading or writing
 * them before a barrier lands their group is a race. */
EMU_NOINLINE static tcl_status run_copy(emu_run *r, size_t pc) {
    const tcl_emu_program *p = r->p;
    const emu_inst *in = &p->inst[pc], *load = &p->inst[in->b];
    const emu_mem *dst = &r->mem[in->mem], *src = &r->mem[load->mem];
    int64_t n = in->copy_elements, to = r->regs[in->a].v.i, from = r->regs[load->a].v.i;
    if (to % n != 0 || from % n != 0)
        return fail_at(r, TCL_ERR_INVALID, pc, r->lid, true,
                       "an asynchronous copy of %" PRId64 " elements needs indices that are multiples of %" PRId64
                       ": it copies %s to %s",
                       n, n, name_elem(p, load->mem, from).s, name_elem(p, in->mem, to).s);
    if (from < 0 || (uint64_t)from + (uint64_t)n > src->numel) return out_of_bounds(r, (size_t)in->b, from < 0 ? from : from + n - 1);
    if (to < 0 || (uint64_t)to + (uint64_t)n > dst->numel) return out_of_bounds(r, pc, to < 0 ? to : to + n - 1);
    if (r->recording) tcl_emu_profiler_record(r->recording, pc, r->lid, from * (int64_t)src->itemsize, (uint32_t)(n * (int64_t)src->itemsize));
    for (int64_t v = 0; v < n; v++) {
        tcl_status status;
        if (src->shadow && (status = check_read(r, (size_t)in->b, load->mem, from + v)) != TCL_OK) return status;
        if (dst->shadow && (status = check_write(r, pc, in->mem, to + v)) != TCL_OK) return status;
        if (dst->shadow) ((emu_lshadow *)dst->shadow)[to + v].copied = true;
        tcl_storage_write(dst->data, dst->itemsize, (size_t)(to + v), tcl_storage_read(src->data, src->itemsize, (size_t)(from + v)));
    }
    return TCL_OK;
}

/* Runs the current thread from instruction pc until a BARRIER (*stop: its index) or its end
 * (*stop: DONE). */
static tcl_status run_thread(emu_run *run, size_t pc, size_t *stop) {
    const tcl_emu_program *p = run->p;
    tcl_scalar *r = run->regs;
    const emu_inst *inst = p->inst;
    const emu_mem *mem = run->mem; /* in a local: stores through char pointers would reload it */
    const int64_t *ids = NULL;
    int64_t id_store[6];
    size_t n = p->n;
    tcl_status status;
    for (; pc < n; pc++) {
        const emu_inst *in = &inst[pc];
        switch ((emu_kind)in->kind) {
        case K_NOP:
        case K_BUFFER: break;
        case K_CONST: r[pc] = in->imm; break;
        case K_ALIAS: r[pc] = r[in->a]; break;
        case K_ALU: {
            tcl_scalar s[3];
            s[0] = r[in->a];
            if (in->nval > 1) s[1] = r[in->b];
            if (in->nval > 2) s[2] = r[in->c];
            if (tcl_alu_exec(in->op, in->dtype, s, in->nval, &r[pc]) == TCL_ALU_INVALID)
                return fail_at(run, TCL_ERR_RUNTIME, pc, run->lid, true, "the ALU rejected the operands");
            break;
        }
        case K_RANGE:
            r[pc] = in->imm;
            if (tcl_emu_reg_int(r[in->a], in->wide) <= 0) pc = (size_t)in->jump; /* past the END */
            break;
        case K_END: {
            size_t rg = (size_t)in->jump;
            int64_t next = r[rg].v.i + 1;
            if (next < tcl_emu_reg_int(r[inst[rg].a], inst[rg].wide)) {
                r[rg].v.i = next;
                pc = rg; /* the loop continues after the RANGE */
            }
            break;
        }
        case K_INDEX: r[pc].dtype = TCL_INDEX; r[pc].v.i = tcl_emu_reg_int(r[in->b], in->wide); break;
        case K_LOAD: {
            if (in->b >= 0 && !r[in->b].v.b) { r[pc] = in->imm; break; }
            int64_t idx = r[in->a].v.i;
            const emu_mem *m = &mem[in->mem];
            if (idx < 0 || (uint64_t)idx >= m->numel) return out_of_bounds(run, pc, idx);
            if (m->shadow && (status = check_read(run, pc, in->mem, idx)) != TCL_OK) return status;
            if (run->recording) tcl_emu_profiler_record(run->recording, pc, run->lid, idx * (int64_t)m->itemsize, (uint32_t)m->itemsize);
            r[pc] = tcl_scalar_from_bits(tcl_storage_read(m->data, m->itemsize, (size_t)idx), in->dtype);
            break;
        }
        case K_STORE: {
            if (in->c >= 0 && !r[in->c].v.b) break;
            int64_t idx = r[in->a].v.i;
            const emu_mem *m = &mem[in->mem];
            if (idx < 0 || (uint64_t)idx >= m->numel) return out_of_bounds(run, pc, idx);
            if (m->shadow && (status = check_write(run, pc, in->mem, idx)) != TCL_OK) return status;
            if (run->recording) tcl_emu_profiler_record(run->recording, pc, run->lid, idx * (int64_t)m->itemsize, (uint32_t)m->itemsize);
            tcl_storage_write(m->data, m->itemsize, (size_t)idx, tcl_scalar_bits(r[in->b]));
            break;
        }
        case K_COPY:
            if (in->c >= 0 && !r[in->c].v.b) break;
            if ((status = run_copy(run, pc)) != TCL_OK) return status;
            break;
        case K_SPECIAL: {
            if (!ids) { /* the thread's ids, once per run of it */
                const tcl_launch *l = &p->launch;
                id_store[0] = (int64_t)(run->group % l->global[0]);
                id_store[1] = (int64_t)(run->group / l->global[0] % l->global[1]);
                id_store[2] = (int64_t)(run->group / l->global[0] / l->global[1]);
                id_store[3] = run->lid % l->local[0];
                id_store[4] = run->lid / l->local[0] % l->local[1];
                id_store[5] = run->lid / l->local[0] / l->local[1];
                ids = id_store;
            }
            int64_t id = ids[in->special], size = tcl_emu_reg_int(r[in->a], in->wide);
            if (id >= size)
                return fail_at(run, TCL_ERR_RUNTIME, pc, run->lid, true, "thread id %" PRId64 " is outside the size %" PRId64 " of %s", id,
                               size, tcl_emu_special_names[in->special]);
            r[pc] = in->imm;
            r[pc].v.i = id;
            break;
        }
        case K_BARRIER:
        case K_WMMA:
        case K_SHUFFLE: *stop = pc; return TCL_OK;
        }
    }
    *stop = DONE;
    return TCL_OK;
}

/* Where a thread stopped, for the divergence messages. */
typedef struct stop_name { char s[64]; } stop_name;
static stop_name name_stop(const tcl_emu_program *p, size_t stop) {
    stop_name n;
    if (stop == DONE) snprintf(n.s, sizeof n.s, "finished without reaching it");
    else snprintf(n.s, sizeof n.s, "waits at instruction %zu (%s)", stop, tcl_emu_op_name(p->inst[stop].op));
    return n;
}

/* Thread t stopped elsewhere than thread 0: a BARRIER, WMMA or SHUFFLE that not all threads reached. */
static tcl_status divergence(const emu_run *r, uint32_t t, size_t stop, size_t first_stop, size_t passed) {
    const tcl_emu_program *p = r->p;
    thread_name first = name_thread(p, r->group, 0), other = name_thread(p, r->group, t);
    /* the message is at a stop some thread waits at: thread 0's unless it finished */
    bool at_first = first_stop != DONE;
    size_t at = at_first ? first_stop : stop;
    const char *waiter = at_first ? first.s : other.s, *strayed = at_first ? other.s : first.s;
    size_t elsewhere = at_first ? stop : first_stop;
    /* the warp op involved (WMMA, SHUFFLE), if any: the one waited at, else the other thread's */
    size_t warp_op = DONE;
    if (p->inst[at].kind != K_BARRIER) warp_op = at;
    else if (elsewhere != DONE && p->inst[elsewhere].kind != K_BARRIER) warp_op = elsewhere;
    if (warp_op != DONE) {
        const char *op = tcl_emu_op_name(p->inst[warp_op].op);
        return fail_at(r, TCL_ERR_INVALID, at, 0, false,
                       "%s divergence: %s waits at this %s, but %s %s (the threads of a workgroup must reach each %s "
                       "together; after %zu barrier%s, WMMAs and SHUFFLEs the workgroup passed together)",
                       op, waiter, tcl_emu_op_name(p->inst[at].op), strayed, name_stop(p, elsewhere).s, op, passed,
                       passed == 1 ? "" : "s");
    }
    if (elsewhere == DONE)
        return fail_at(r, TCL_ERR_INVALID, at, 0, false,
                       "barrier divergence: %s waits at this barrier, but %s finished without reaching it (after %zu barrier%s "
                       "the workgroup passed together)",
                       waiter, strayed, passed, passed == 1 ? "" : "s");
    return fail_at(r, TCL_ERR_INVALID, at, 0, false,
                   "barrier divergence: %s waits at this barrier, but %s waits at instruction %zu (BARRIER) (after %zu barrier%s "
                   "the workgroup passed together)",
                   waiter, strayed, elsewhere, passed, passed == 1 ? "" : "s");
}

/* A saved register of thread t (a CONST's value from the program: it is not kept). */
static tcl_scalar saved_reg(const emu_run *r, uint32_t t, int32_t s) {
    const tcl_emu_program *p = r->p;
    if (p->inst[s].kind == K_CONST) return p->inst[s].imm;
    return r->saved[(size_t)t * p->nlive + (size_t)p->live_slot[s]];
}

/* Reads tile `which` (A or B) of warpgroup WMMA pc for the warpgroup of threads t0..t0+127 into
 * out (row-major, float32 scalars): the tile starts at the element its source's INDEX register
 * holds, which every lane must hold alike, and element (row, col) lies at tcl_wmma_local_offset
 * from there, inside the local array. Each element read counts as read by every thread of the
 * warpgroup (the hardware reads it for all of them): it must have been stored before a barrier
 * they passed since, and must not be written before the next. Checking it as threads t0 and
 * t0 + 1 is exactly checking it as each of the 128 in turn, at 1/64 of the cost: a write in this
 * epoch by any thread is a race for one of the two (at most one of them wrote it), the thread
 * named first is the same, and after two reads an element's shadow holds two readers, which no
 * further read changes. A "deferred" WMMA's reads also hold the element through the next epoch
 * (no write before the second barrier after it). */
static tcl_status read_tile(emu_run *r, size_t pc, uint32_t t0, tcl_wmma_operand which, tcl_scalar *out) {
    const tcl_emu_program *p = r->p;
    const emu_inst *in = &p->inst[pc];
    const tcl_wmma_shape *s = &tcl_wmma_shapes[in->shape];
    const char *tile = which == TCL_WMMA_A ? "A" : "B";
    int32_t index = p->srcs[in->src_off + (which == TCL_WMMA_A ? 0 : 1)];
    int32_t mem = p->inst[index].mem;
    const emu_mem *m = &r->mem[mem];
    int64_t first = saved_reg(r, t0, index).v.i;
    for (uint32_t lane = 1; lane < TCL_WMMA_WARPGROUP; lane++) {
        int64_t its = saved_reg(r, t0 + lane, index).v.i;
        if (its != first)
            return fail_at(r, TCL_ERR_INVALID, pc, 0, false,
                           "the lanes of a warpgroup disagree on where %s starts: %s (lane 0) gives %s, %s (lane %u) "
                           "element %" PRId64 " (a warpgroup shape's tiles are the same in every lane)",
                           tile, name_thread(p, r->group, t0).s, name_elem(p, mem, first).s,
                           name_thread(p, r->group, t0 + lane).s, lane, its);
    }
    /* the tensor cores read whole 16-byte rows (PTX's matrix descriptors hold addresses >> 4) */
    if (first % 8 != 0)
        return fail_at(r, TCL_ERR_INVALID, pc, t0, true,
                       "%s starts at element %" PRId64 ", not a multiple of 8 (a warpgroup shape's tiles start on "
                       "16-byte boundaries)", tile, first);
    const tcl_wmma_strides *strides = &p->tile_strides[in->tiles];
    int rows = which == TCL_WMMA_A ? s->m : s->k, cols = which == TCL_WMMA_A ? s->k : s->n;
    /* element (0, 0), at offset 0, is checked first: past it `first` is an index of the array and
     * adding the (small, positive) offsets cannot overflow */
    for (int row = 0; row < rows; row++)
        for (int col = 0; col < cols; col++) {
            int64_t idx = first + tcl_wmma_local_offset(strides, which, row, col);
            if (idx < 0 || (uint64_t)idx >= m->numel)
                return fail_at(r, TCL_ERR_RUNTIME, pc, t0, true,
                               "%s's element (%d, %d) is element %" PRId64 " of DEFINE_LOCAL slot %" PRId64
                               ", outside its %zu elements (the tile starts at element %" PRId64 ")",
                               tile, row, col, idx, tcl_emu_mem_info(p, (size_t)mem)->slot, m->numel, first);
            for (uint32_t lane = 0; lane < 2 && m->shadow; lane++) {
                r->lid = t0 + lane;
                tcl_status status = check_read(r, pc, mem, idx);
                if (status != TCL_OK) return status;
            }
            if (m->shadow && in->deferred) {
                emu_lshadow *sh = (emu_lshadow *)m->shadow + idx;
                sh->held = r->epoch + 1;
                sh->holder = t0 + 1;
            }
            tcl_scalar v = tcl_scalar_from_bits(tcl_storage_read(m->data, m->itemsize, (size_t)idx), s->in);
            v.dtype = TCL_FLOAT32; /* float16 and bfloat16 values are float32 values */
            out[row * cols + col] = v;
        }
    return TCL_OK;
}

/* Every thread of the group waits at WMMA instruction pc: each warp (a warpgroup shape: each
 * warpgroup) assembles A, B and C from its lanes' saved registers (a warpgroup shape: A and B from
 * local memory, read_tile), and each lane's saved copy of the WMMA's register gets D's element at
 * its fragment position `out`, D[i][j] = C[i][j] + A[i][0]*B[0][j] + ... in float32, in k order.
 * The matrices live in the run's wmma block (row-major): a warpgroup's are too large for the stack. */
static tcl_status run_wmma(emu_run *r, size_t pc) {
    const tcl_emu_program *p = r->p;
    const emu_inst *in = &p->inst[pc];
    const tcl_wmma_shape *s = &tcl_wmma_shapes[in->shape];
    const int32_t *src = p->srcs + in->src_off;
    bool warpgroup = tcl_wmma_is_warpgroup(s);
    /* A (M x K), B (K x N), C (M x N) of one warp or warpgroup, as float32 scalars */
    tcl_scalar *a = r->wmma, *bm = a + s->m * s->k, *c = bm + s->k * s->n;
    tcl_scalar *mat[3] = {a, bm, c};
    const int cols[3] = {s->k, s->n, s->n};
    /* the first register source of a lane: a warpgroup shape's C (A and B are its tiles) */
    const int first_operand = warpgroup ? TCL_WMMA_C : TCL_WMMA_A, first_src = warpgroup ? 2 : 0;
    for (uint32_t t0 = 0; t0 < p->group_threads; t0 += (uint32_t)s->lanes) {
        tcl_status status;
        if (warpgroup && ((status = read_tile(r, pc, t0, TCL_WMMA_A, a)) != TCL_OK ||
                          (status = read_tile(r, pc, t0, TCL_WMMA_B, bm)) != TCL_OK))
            return status;
        for (int lane = 0; lane < s->lanes; lane++) {
            int k = first_src;
            for (int w = first_operand; w < 3; w++)
                for (int reg = 0; reg < s->nreg[w]; reg++, k++) {
                    int row, col;
                    tcl_wmma_position(s, (tcl_wmma_operand)w, lane, reg, &row, &col);
                    tcl_scalar v = saved_reg(r, t0 + (uint32_t)lane, src[k]);
                    v.dtype = TCL_FLOAT32; /* float16 and bfloat16 values are float32 values */
                    mat[w][row * cols[w] + col] = v;
                }
        }
        for (int lane = 0; lane < s->lanes; lane++) {
            int row, col;
            tcl_wmma_position(s, TCL_WMMA_C, lane, in->wmma_out, &row, &col);
            tcl_scalar acc = c[row * s->n + col], prod;
            for (int k = 0; k < s->k; k++) {
                tcl_scalar x[2] = {a[row * s->k + k], bm[k * s->n + col]};
                if (tcl_alu_exec(TCL_OP_MUL, TCL_FLOAT32, x, 2, &prod) == TCL_ALU_INVALID)
                    return fail_at(r, TCL_ERR_RUNTIME, pc, t0 + (uint32_t)lane, true, "the ALU rejected the operands");
                x[0] = acc;
                x[1] = prod;
                if (tcl_alu_exec(TCL_OP_ADD, TCL_FLOAT32, x, 2, &acc) == TCL_ALU_INVALID)
                    return fail_at(r, TCL_ERR_RUNTIME, pc, t0 + (uint32_t)lane, true, "the ALU rejected the operands");
            }
            acc.dtype = (tcl_dtype)in->dtype;
            r->saved[(size_t)(t0 + (uint32_t)lane) * p->nlive + (size_t)p->live_slot[pc]] = acc;
        }
    }
    return TCL_OK;
}

/* SHUFFLE pc, once every thread of the group waits there: each thread's saved copy of its
 * register gets the saved value of its source in lane (lane xor mask) of its warp. */
static void run_shuffle(emu_run *r, size_t pc) {
    const tcl_emu_program *p = r->p;
    const emu_inst *in = &p->inst[pc];
    size_t own = (size_t)p->live_slot[pc];
    for (uint32_t t = 0; t < p->group_threads; t++) {
        uint32_t partner = t ^ (uint32_t)in->lane_mask; /* the mask is below the warp size: the same warp */
        tcl_scalar v = saved_reg(r, partner, in->a);
        v.dtype = (tcl_dtype)in->dtype;
        r->saved[(size_t)t * p->nlive + own] = v;
    }
}

/* Runs the threads of one workgroup: without stops (BARRIER, WMMA, SHUFFLE) each to its end,
 * one after another; with them in lockstep, from stop to stop. */
static tcl_status run_group(emu_run *r) {
    const tcl_emu_program *p = r->p;
    uint32_t nt = p->group_threads;
    bool lockstep = tcl_emu_lockstep(p);
    r->group_epoch = ++r->epoch;
    r->landed_through = r->group_epoch - 1; /* copies of earlier groups never count */
    r->uninit = false;
    if (lockstep && p->scratch_bytes) memset(r->scratch, 0, (size_t)nt * p->scratch_bytes);
    size_t resume = 0; /* where every thread goes on: after the barrier all of them reached */
    for (size_t passed = 0;; passed++) {
        size_t first_stop = DONE;
        for (uint32_t t = 0; t < nt; t++) {
            r->lid = t;
            r->recording = r->group == 0 && t < EMU_PROFILE_LANES ? r->prof : NULL;
            if (lockstep) {
                unsigned char *block = r->scratch + (size_t)t * p->scratch_bytes;
                for (size_t k = 0; k < p->nregs; k++) r->mem[p->nparams + k].data = block + p->regs[k].offset;
                tcl_scalar *saved = r->saved + (size_t)t * p->nlive;
                if (passed)
                    for (size_t k = 0; k < p->nlive; k++) r->regs[p->live[k]] = saved[k];
            } else if (p->scratch_bytes) {
                memset(r->scratch, 0, p->scratch_bytes);
            }
            size_t stop = DONE;
            tcl_status status = run_thread(r, resume, &stop);
            /* a read of unwritten local memory came first, and may have caused what failed */
            if (status == TCL_ERR_RUNTIME && r->uninit) return report_uninit(r);
            if (status != TCL_OK) return status;
            if (t == 0) first_stop = stop;
            else if (stop != first_stop) return divergence(r, t, stop, first_stop, passed);
            if (lockstep && stop != DONE) {
                tcl_scalar *saved = r->saved + (size_t)t * p->nlive;
                for (size_t k = 0; k < p->nlive; k++) saved[k] = r->regs[p->live[k]];
            }
        }
        if (first_stop != DONE && p->inst[first_stop].kind == K_WMMA) {
            /* not a barrier: memory stays in the same epoch */
            tcl_status status = run_wmma(r, first_stop);
            if (status == TCL_ERR_RUNTIME && r->uninit) return report_uninit(r); /* as after run_thread */
            if (status != TCL_OK) return status;
            resume = first_stop + 1;
            continue;
        }
        if (first_stop != DONE && p->inst[first_stop].kind == K_SHUFFLE) { /* not a barrier either */
            run_shuffle(r, first_stop);
            resume = first_stop + 1;
            continue;
        }
        if (r->uninit) return report_uninit(r);
        if (first_stop == DONE) return TCL_OK;
        /* all passed the barrier: it lands the copy groups but the n newest (this epoch's is the newest) */
        uint64_t in_flight = (uint64_t)p->inst[first_stop].groups_left;
        if (r->epoch - r->group_epoch >= in_flight && r->epoch - in_flight > r->landed_through)
            r->landed_through = r->epoch - in_flight;
        r->epoch++;
        resume = first_stop + 1;
    }
}

/* Shadow memory of the params some STORE writes (directly or through a slot given the same
 * buffer); only for launches of more than one thread. */
static tcl_status global_shadows(emu_run *r, tcl_buffer *const *bufs) {
    const tcl_emu_program *p = r->p;
    if (launch_threads(&p->launch) <= 1) return TCL_OK;
    for (size_t k = 0; k < p->nparams; k++) {
        if (!bufs[k]->data || !bufs[k]->numel) continue;
        size_t first = k; /* the first slot given the same buffer */
        bool stored = false;
        for (size_t j = 0; j < p->nparams; j++) {
            if (bufs[j]->data != bufs[k]->data || bufs[j]->numel != bufs[k]->numel || bufs[j]->itemsize != bufs[k]->itemsize) continue;
            if (j < first) first = j;
            stored = stored || p->params[j].stored;
        }
        if (!stored) continue;
        if (first < k) {
            r->mem[k].shadow = r->mem[first].shadow;
            continue;
        }
        r->owned[k] = calloc(bufs[k]->numel, sizeof(emu_gshadow));
        if (!r->owned[k]) return tcl_fail(r->err, TCL_ERR_MEMORY, "kernel '%s': out of memory for race checking", p->name);
        r->mem[k].shadow = r->owned[k];
    }
    return TCL_OK;
}

static tcl_status check_buffers(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, tcl_error *err) {
    if (nbufs != p->nparams)
        return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s' takes %zu buffer%s, got %zu", p->name, p->nparams,
                        p->nparams == 1 ? "" : "s", nbufs);
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_buffer *buf = bufs[k];
        const emu_mem_info *want = &p->params[k];
        if (!buf)
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is missing", p->name, k + 1, k);
        const char *base = NULL;
        if (!tcl_host_device_parse(buf->device, &base) || strcmp(base, "EMU") != 0) /* EMU or EMU:2 ... */
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is on device %s, not EMU",
                            p->name, k + 1, k, buf->device);
        if (buf->dtype != want->dtype || buf->numel != want->numel)
            return tcl_fail(err, TCL_ERR_INVALID,
                            "kernel '%s': buffer %zu (slot %zu) is %s x %zu, the kernel expects %s x %zu", p->name,
                            k + 1, k, tcl_emu_dtype_name(buf->dtype), buf->numel, tcl_emu_dtype_name(want->dtype), want->numel);
    }
    return TCL_OK;
}

/* Allocates what a run holds (registers, memory table, scratch, local memory and shadows). */
static tcl_status setup(emu_run *r, tcl_buffer *const *bufs) {
    const tcl_emu_program *p = r->p;
    size_t nmem = p->nparams + p->nregs + p->nlocals;
    size_t blocks = tcl_emu_lockstep(p) ? p->group_threads : 1;
    r->regs = calloc(p->n ? p->n : 1, sizeof *r->regs);
    r->mem = calloc(nmem ? nmem : 1, sizeof *r->mem);
    r->scratch = calloc(p->scratch_bytes ? blocks * p->scratch_bytes : 1, 1);
    r->local = calloc(p->local_bytes ? p->local_bytes : 1, 1);
    r->saved = calloc(p->nlive ? (size_t)p->group_threads * p->nlive : 1, sizeof *r->saved);
    r->owned = calloc(p->nparams ? p->nparams : 1, sizeof *r->owned);
    r->wmma = calloc(p->wmma_elements ? p->wmma_elements : 1, sizeof *r->wmma);
    if (!r->regs || !r->mem || !r->scratch || !r->local || !r->saved || !r->owned || !r->wmma)
        return tcl_fail(r->err, TCL_ERR_MEMORY, "kernel '%s': out of memory for registers", p->name);
    for (size_t k = 0; k < p->nparams; k++) {
        r->mem[k].data = bufs[k]->data;
        r->mem[k].numel = bufs[k]->numel;
        r->mem[k].itemsize = bufs[k]->itemsize;
    }
    for (size_t k = 0; k < p->nregs; k++) {
        emu_mem *m = &r->mem[p->nparams + k];
        m->data = r->scratch + p->regs[k].offset;
        m->numel = p->regs[k].numel;
        m->itemsize = p->regs[k].itemsize;
    }
    for (size_t k = 0; k < p->nlocals; k++) {
        emu_mem *m = &r->mem[p->nparams + p->nregs + k];
        m->data = r->local + p->locals[k].offset;
        m->numel = p->locals[k].numel;
        m->itemsize = p->locals[k].itemsize;
        if (m->numel && !(m->shadow = calloc(m->numel, sizeof(emu_lshadow))))
            return tcl_fail(r->err, TCL_ERR_MEMORY, "kernel '%s': out of memory for local memory", p->name);
    }
    return global_shadows(r, bufs);
}

static void teardown(emu_run *r) {
    const tcl_emu_program *p = r->p;
    if (r->mem)
        for (size_t k = 0; k < p->nlocals; k++) free(r->mem[p->nparams + p->nregs + k].shadow);
    if (r->owned)
        for (size_t k = 0; k < p->nparams; k++) free(r->owned[k]);
    free(r->owned);
    free(r->wmma);
    free(r->saved);
    free(r->local);
    free(r->scratch);
    free(r->mem);
    free(r->regs);
}

/* A run; with prof, the global accesses of workgroup 0's first warp are recorded in it. */
static tcl_status run_program(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, double *seconds,
                              tcl_emu_profiler *prof, tcl_error *err) {
    tcl_status status = check_buffers(p, bufs, nbufs, err);
    if (status != TCL_OK) return status;
    emu_run r;
    memset(&r, 0, sizeof r);
    r.p = p;
    r.err = err;
    if ((status = setup(&r, bufs)) == TCL_OK) {
        const tcl_launch *l = &p->launch;
        uint64_t groups = (uint64_t)l->global[0] * l->global[1] * l->global[2];
        double start = now_seconds();
        r.prof = prof;
        for (r.group = 0; r.group < groups && status == TCL_OK; r.group++) status = run_group(&r);
        if (seconds) *seconds = now_seconds() - start;
    }
    teardown(&r);
    return status;
}

tcl_status tcl_emu_program_run(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, double *seconds,
                               tcl_error *err) {
    return run_program(p, bufs, nbufs, seconds, NULL, err);
}

tcl_status tcl_emu_program_profile(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, double *seconds,
                                   tcl_emu_access_stats **stats, size_t *nstats, tcl_error *err) {
    *stats = NULL;
    *nstats = 0;
    tcl_emu_profiler *prof = tcl_emu_profiler_new(p, err);
    if (!prof) return TCL_ERR_MEMORY;
    tcl_status status = run_program(p, bufs, nbufs, seconds, prof, err);
    if (status == TCL_OK) status = tcl_emu_profiler_results(prof, stats, nstats, err);
    tcl_emu_profiler_free(prof);
    return status;
}
