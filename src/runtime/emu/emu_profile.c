/* emu_profile.c — the coalescing figures of a GPU-mode program's global accesses
 * (emu_profile.h). Layer: runtime. */
#include "emu_profile.h"

#include <stdlib.h>
#include <string.h>

#include "emu_program.h"

/* One global access instruction's record: per execution k and lane, the byte offset accessed
 * (-1: the lane did not run it that time). */
typedef struct access_record {
    size_t pc;
    uint32_t bytes;
    uint32_t count[EMU_PROFILE_LANES]; /* executions per lane so far */
    int64_t at[EMU_PROFILE_EXECUTIONS][EMU_PROFILE_LANES];
} access_record;

struct tcl_emu_profiler {
    const tcl_emu_program *p;
    int32_t *record_of; /* per instruction: its record's index, -1 for other instructions */
    access_record *records;
    size_t nrecords;
};

/* The memory an access instruction reads from global memory, or -1 (a COPY reads its LOAD's). */
static int32_t global_mem(const tcl_emu_program *p, const emu_inst *in) {
    int32_t mem = -1;
    if (in->kind == K_LOAD || in->kind == K_STORE) mem = in->mem;
    else if (in->kind == K_COPY) mem = p->inst[in->b].mem;
    return mem >= 0 && (size_t)mem < p->nparams ? mem : -1;
}

/* Marks in copied_only (one flag per instruction, zeroed) the LOADs that only asynchronous
 * copies use: the GPU does not run them (the copy reads the memory), EMU does. */
static void mark_copied_only(const tcl_emu_program *p, unsigned char *copied_only) {
    enum { COPIED = 1, OTHER = 2 };
    for (size_t pc = 0; pc < p->n; pc++) {
        const emu_inst *in = &p->inst[pc];
        for (uint32_t k = 0; k < in->nsrc; k++) {
            int32_t s = p->srcs[in->src_off + k];
            if (s >= 0) copied_only[s] |= in->kind == K_COPY && s == in->b ? COPIED : OTHER;
        }
    }
    for (size_t pc = 0; pc < p->n; pc++) copied_only[pc] = copied_only[pc] == COPIED;
}

tcl_emu_profiler *tcl_emu_profiler_new(const tcl_emu_program *p, tcl_error *err) {
    tcl_emu_profiler *pr = calloc(1, sizeof *pr);
    unsigned char *copied_only = calloc(p->n ? p->n : 1, 1);
    if (pr) pr->record_of = malloc((p->n ? p->n : 1) * sizeof *pr->record_of);
    size_t count = 0;
    bool ok = pr && pr->record_of && copied_only;
    if (ok) {
        mark_copied_only(p, copied_only);
        for (size_t pc = 0; pc < p->n; pc++) {
            bool global = global_mem(p, &p->inst[pc]) >= 0 && !copied_only[pc];
            pr->record_of[pc] = global ? (int32_t)count++ : -1;
        }
        ok = (pr->records = calloc(count ? count : 1, sizeof *pr->records)) != NULL;
    }
    free(copied_only);
    if (!ok) {
        tcl_emu_profiler_free(pr);
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory for the memory profile", p->name);
        return NULL;
    }
    pr->p = p;
    pr->nrecords = count;
    for (size_t pc = 0; pc < p->n; pc++) {
        if (pr->record_of[pc] < 0) continue;
        access_record *rec = &pr->records[pr->record_of[pc]];
        rec->pc = pc;
        memset(rec->at, 0xFF, sizeof rec->at); /* -1: not run */
    }
    return pr;
}

void tcl_emu_profiler_free(tcl_emu_profiler *pr) {
    if (!pr) return;
    free(pr->records);
    free(pr->record_of);
    free(pr);
}

void tcl_emu_profiler_record(tcl_emu_profiler *pr, size_t pc, uint32_t lane, int64_t at, uint32_t bytes) {
    if (pc >= pr->p->n || lane >= EMU_PROFILE_LANES || pr->record_of[pc] < 0) return;
    access_record *rec = &pr->records[pr->record_of[pc]];
    uint32_t k = rec->count[lane];
    if (k >= EMU_PROFILE_EXECUTIONS) return;
    rec->count[lane] = k + 1;
    rec->at[k][lane] = at;
    rec->bytes = bytes;
}

static int compare_offsets(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* One warp-wide execution: lanes' accesses of `bytes` bytes at ats[0..n-1] (sorted in place).
 * Adds the sectors touched and the fewest sectors their distinct bytes fit in. */
static void count_execution(int64_t *ats, size_t n, uint32_t bytes, uint64_t *sectors, uint64_t *needed) {
    qsort(ats, n, sizeof *ats, compare_offsets);
    int64_t last_sector = -1, covered_to = -1; /* the bytes up to covered_to are counted */
    uint64_t distinct = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t first = ats[i], end = ats[i] + bytes; /* [first, end) */
        for (int64_t s = first / EMU_PROFILE_SECTOR; s <= (end - 1) / EMU_PROFILE_SECTOR; s++) {
            if (s > last_sector) {
                (*sectors)++;
                last_sector = s;
            }
        }
        if (end > covered_to) {
            distinct += (uint64_t)(end - (first > covered_to ? first : covered_to));
            covered_to = end;
        }
    }
    *needed += (distinct + EMU_PROFILE_SECTOR - 1) / EMU_PROFILE_SECTOR;
}

tcl_status tcl_emu_profiler_results(const tcl_emu_profiler *pr, tcl_emu_access_stats **out, size_t *n, tcl_error *err) {
    *out = NULL;
    *n = 0;
    size_t ran = 0;
    for (size_t r = 0; r < pr->nrecords; r++) ran += pr->records[r].bytes ? 1 : 0; /* recorded at least once */
    if (!ran) return TCL_OK;
    tcl_emu_access_stats *stats = calloc(ran, sizeof *stats);
    if (!stats) return tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory for the memory profile", pr->p->name);
    size_t at = 0;
    for (size_t r = 0; r < pr->nrecords; r++) {
        const access_record *rec = &pr->records[r];
        if (!rec->bytes) continue;
        const emu_inst *in = &pr->p->inst[rec->pc];
        tcl_emu_access_stats *s = &stats[at++];
        s->pc = rec->pc;
        s->what = in->kind == K_COPY ? "COPY" : in->kind == K_STORE ? "STORE" : "LOAD";
        s->slot = (int32_t)pr->p->params[global_mem(pr->p, in)].slot;
        s->bytes = rec->bytes;
        for (size_t k = 0; k < EMU_PROFILE_EXECUTIONS; k++) {
            int64_t lanes[EMU_PROFILE_LANES];
            size_t active = 0;
            for (size_t l = 0; l < EMU_PROFILE_LANES; l++)
                if (rec->at[k][l] >= 0) lanes[active++] = rec->at[k][l];
            if (!active) continue;
            s->executions++;
            count_execution(lanes, active, rec->bytes, &s->sectors, &s->needed);
        }
    }
    *out = stats;
    *n = at;
    return TCL_OK;
}
