/* emu_run.c — the EMU interpreter: runs a built program's instructions (emu_program.h) once
 * per thread of its launch on the caller's buffers, every memory access bounds-checked and
 * every ALU op through tcl_alu_exec. Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "emu_program.h"

typedef struct emu_mem {
    unsigned char *data;
    size_t numel, itemsize;
} emu_mem;

/* One thread's state. A work group's threads will each have one when barriers come. */
typedef struct emu_thread {
    tcl_scalar *regs;
    unsigned char *scratch;
    emu_mem *mem;      /* params, then this thread's scratch buffers */
    int64_t ids[6];    /* gidx0..2, lidx0..2 */
} emu_thread;

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool many_threads(const tcl_launch *l) {
    return l->global[0] * (uint64_t)l->global[1] * l->global[2] * l->local[0] * l->local[1] * l->local[2] > 1;
}

/* "kernel 'name': instruction pc (OP): <message>", and which thread when there are several. */
TCL_PRINTF_LIKE(5, 6)
static tcl_status run_error(const tcl_emu_program *p, const emu_thread *t, size_t pc, tcl_error *err,
                            const char *fmt, ...) {
    tcl_fail(err, TCL_ERR_RUNTIME, "kernel '%s': instruction %zu (%s): ", p->name, pc, tcl_emu_op_name(p->inst[pc].op));
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(err, fmt, ap);
    va_end(ap);
    if (many_threads(&p->launch))
        tcl_error_append(err, " (thread gidx (%" PRId64 ",%" PRId64 ",%" PRId64 ") lidx (%" PRId64 ",%" PRId64
                         ",%" PRId64 "))", t->ids[0], t->ids[1], t->ids[2], t->ids[3], t->ids[4], t->ids[5]);
    return TCL_ERR_RUNTIME;
}

static tcl_status out_of_bounds(const tcl_emu_program *p, const emu_thread *t, size_t pc, int64_t idx,
                                tcl_error *err) {
    int32_t m = p->inst[pc].mem;
    bool param = (size_t)m < p->nparams;
    const emu_mem_info *info = param ? &p->params[m] : &p->regs[(size_t)m - p->nparams];
    return run_error(p, t, pc, err, "index %" PRId64 " is out of bounds for %s slot %" PRId64 " (%zu elements)",
                     idx, param ? "PARAM" : "DEFINE_REG", info->slot, info->numel);
}

static tcl_status run_thread(const tcl_emu_program *p, emu_thread *t, tcl_error *err) {
    tcl_scalar *r = t->regs;
    const emu_inst *inst = p->inst;
    size_t n = p->n;
    for (size_t pc = 0; pc < n; pc++) {
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
                return run_error(p, t, pc, err, "the ALU rejected the operands");
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
            const emu_mem *m = &t->mem[in->mem];
            if (idx < 0 || (uint64_t)idx >= m->numel) return out_of_bounds(p, t, pc, idx, err);
            r[pc] = tcl_scalar_from_bits(tcl_storage_read(m->data, m->itemsize, (size_t)idx), in->dtype);
            break;
        }
        case K_STORE: {
            if (in->c >= 0 && !r[in->c].v.b) break;
            int64_t idx = r[in->a].v.i;
            const emu_mem *m = &t->mem[in->mem];
            if (idx < 0 || (uint64_t)idx >= m->numel) return out_of_bounds(p, t, pc, idx, err);
            tcl_storage_write(m->data, m->itemsize, (size_t)idx, tcl_scalar_bits(r[in->b]));
            break;
        }
        case K_SPECIAL: {
            int64_t id = t->ids[in->which], size = tcl_emu_reg_int(r[in->a], in->wide);
            if (id >= size)
                return run_error(p, t, pc, err, "thread id %" PRId64 " is outside the size %" PRId64 " of %s",
                                 id, size, tcl_emu_special_names[in->which]);
            r[pc] = in->imm;
            r[pc].v.i = id;
            break;
        }
        }
    }
    return TCL_OK;
}

tcl_status tcl_emu_program_run(const tcl_emu_program *p, tcl_buffer *const *bufs, size_t nbufs, double *seconds,
                               tcl_error *err) {
    if (nbufs != p->nparams)
        return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s' takes %zu buffer%s, got %zu", p->name, p->nparams,
                        p->nparams == 1 ? "" : "s", nbufs);
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_buffer *buf = bufs[k];
        const emu_mem_info *want = &p->params[k];
        if (!buf)
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is missing", p->name, k + 1, k);
        if (strcmp(buf->device, "EMU") != 0)
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is on device %s, not EMU",
                            p->name, k + 1, k, buf->device);
        if (buf->dtype != want->dtype || buf->numel != want->numel)
            return tcl_fail(err, TCL_ERR_INVALID,
                            "kernel '%s': buffer %zu (slot %zu) is %s x %zu, the kernel expects %s x %zu", p->name,
                            k + 1, k, tcl_emu_dtype_name(buf->dtype), buf->numel, tcl_emu_dtype_name(want->dtype), want->numel);
    }

    emu_thread t;
    memset(&t, 0, sizeof t);
    tcl_status status;
    size_t nmem = p->nparams + p->nregs;
    t.regs = calloc(p->n ? p->n : 1, sizeof *t.regs);
    t.mem = calloc(nmem ? nmem : 1, sizeof *t.mem);
    t.scratch = calloc(p->scratch_bytes ? p->scratch_bytes : 1, 1);
    if (!t.regs || !t.mem || !t.scratch) {
        status = tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory for registers", p->name);
        goto done;
    }
    for (size_t k = 0; k < p->nparams; k++) {
        t.mem[k].data = bufs[k]->data;
        t.mem[k].numel = bufs[k]->numel;
        t.mem[k].itemsize = bufs[k]->itemsize;
    }
    for (size_t k = 0; k < p->nregs; k++) {
        emu_mem *m = &t.mem[p->nparams + k];
        m->data = t.scratch + p->regs[k].offset;
        m->numel = p->regs[k].numel;
        m->itemsize = p->regs[k].itemsize;
    }

    const tcl_launch *l = &p->launch;
    double start = now_seconds();
    status = TCL_OK;
    for (uint32_t gz = 0; gz < l->global[2] && status == TCL_OK; gz++)
        for (uint32_t gy = 0; gy < l->global[1] && status == TCL_OK; gy++)
            for (uint32_t gx = 0; gx < l->global[0] && status == TCL_OK; gx++)
                /* one work group: its threads one after another (no barriers yet) */
                for (uint32_t lz = 0; lz < l->local[2] && status == TCL_OK; lz++)
                    for (uint32_t ly = 0; ly < l->local[1] && status == TCL_OK; ly++)
                        for (uint32_t lx = 0; lx < l->local[0] && status == TCL_OK; lx++) {
                            int64_t ids[6] = {gx, gy, gz, lx, ly, lz};
                            memcpy(t.ids, ids, sizeof ids);
                            if (p->scratch_bytes) memset(t.scratch, 0, p->scratch_bytes);
                            status = run_thread(p, &t, err);
                        }
    if (seconds) *seconds = now_seconds() - start;

done:
    free(t.regs);
    free(t.mem);
    free(t.scratch);
    return status;
}
