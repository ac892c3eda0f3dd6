/* emu_listing.c — the readable listing of a built EMU program (tcl_emu_program_dump): one
 * instruction per line, indented by loop depth, with sources, constants and args; the header
 * gives the launch, local memory and barriers, and registers kept across barriers are marked.
 * Layer: runtime. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "emu_program.h"

typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool failed;
} strbuf;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_printf(strbuf *sb, const char *fmt, ...) {
    if (sb->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(sb->s ? sb->s + sb->len : NULL, sb->s ? sb->cap - sb->len : 0, fmt, ap);
        va_end(ap);
        if (w < 0) { sb->failed = true; return; }
        if (sb->s && sb->len + (size_t)w < sb->cap) { sb->len += (size_t)w; return; }
        size_t want = sb->cap ? sb->cap * 2 : 1024;
        while (want < sb->len + (size_t)w + 1) want *= 2;
        char *grown = realloc(sb->s, want);
        if (!grown) { sb->failed = true; return; }
        sb->s = grown;
        sb->cap = want;
    }
}

static void sb_scalar(strbuf *sb, tcl_scalar s) {
    const tcl_dtype_info *d = tcl_dtype_get(s.dtype);
    if (s.dtype == TCL_BOOL) sb_printf(sb, "%s", s.v.b ? "true" : "false");
    else if (d->is_float) sb_printf(sb, "%.17g", s.v.f);
    else if (d->is_unsigned) sb_printf(sb, "%" PRIu64, s.v.u);
    else sb_printf(sb, "%" PRId64, s.v.i);
}

static void sb_arg(strbuf *sb, const tcl_arg *a) {
    switch (a->kind) {
    case TCL_ARG_NONE: break;
    case TCL_ARG_INT: sb_printf(sb, "%" PRId64, a->v.i); break;
    case TCL_ARG_FLOAT: sb_printf(sb, "%.17g", a->v.f); break;
    case TCL_ARG_BOOL: sb_printf(sb, "%s", a->v.b ? "true" : "false"); break;
    case TCL_ARG_STR: sb_printf(sb, "\"%.*s\"", (int)a->len, a->v.s); break;
    case TCL_ARG_DTYPE: sb_printf(sb, "%s", tcl_emu_dtype_name(a->v.dtype)); break;
    case TCL_ARG_INTS:
        sb_printf(sb, "(");
        for (uint32_t i = 0; i < a->len; i++) sb_printf(sb, "%s%" PRId64, i ? ", " : "", a->v.ints[i]);
        sb_printf(sb, ")");
        break;
    case TCL_ARG_TUPLE:
        sb_printf(sb, "(");
        for (uint32_t i = 0; i < a->len; i++) {
            if (i) sb_printf(sb, ", ");
            sb_arg(sb, &a->v.items[i]);
        }
        sb_printf(sb, ")");
        break;
    case TCL_ARG_UOP: sb_printf(sb, "<%s node>", tcl_op_get((tcl_op)a->v.uop->op)->name); break;
    }
}

char *tcl_emu_program_dump(const tcl_emu_program *p) {
    strbuf sb = {NULL, 0, 0, false};
    const tcl_launch *l = &p->launch;
    sb_printf(&sb, "kernel '%s': %zu instructions, %zu buffer%s, global (%u,%u,%u) local (%u,%u,%u)\n", p->name, p->n,
              p->nparams, p->nparams == 1 ? "" : "s", l->global[0], l->global[1], l->global[2], l->local[0],
              l->local[1], l->local[2]);
    if (p->nlocals || p->nbarriers)
        sb_printf(&sb, "  local memory %zu bytes (%zu buffer%s), %zu barrier%s, %zu register%s kept across barriers\n", p->local_bytes,
                  p->nlocals, p->nlocals == 1 ? "" : "s", p->nbarriers, p->nbarriers == 1 ? "" : "s", p->nlive,
                  p->nlive == 1 ? "" : "s");
    if (p->nwmma)
        sb_printf(&sb, "  %zu WMMA%s: the workgroup's threads stop at each, as at a barrier\n", p->nwmma, p->nwmma == 1 ? "" : "s");
    if (p->nshuffle)
        sb_printf(&sb, "  %zu SHUFFLE%s: the workgroup's threads stop at each, as at a barrier\n", p->nshuffle,
                  p->nshuffle == 1 ? "" : "s");
    int depth = 0;
    size_t next_live = 0;
    for (size_t i = 0; i < p->n; i++) {
        const emu_inst *in = &p->inst[i];
        if (in->kind == K_END && depth > 0) depth--;
        sb_printf(&sb, "%4zu  %*s%-10s %-8s", i, 2 * depth, "", tcl_emu_op_name(in->op), tcl_emu_dtype_name(in->dtype));
        if (in->nsrc) {
            sb_printf(&sb, " [");
            for (uint32_t k = 0; k < in->nsrc; k++) sb_printf(&sb, "%s%d", k ? ", " : "", (int)p->srcs[in->src_off + k]);
            sb_printf(&sb, "]");
        }
        if (in->kind == K_CONST) {
            sb_printf(&sb, " ");
            sb_scalar(&sb, in->imm);
        } else if (in->kind == K_BARRIER) { /* its arg, 0 or none, means the same: waits for all copies */
            if (in->groups_left > 0)
                sb_printf(&sb, " %d (leaves %d asynchronous-copy group%s in flight)", (int)in->groups_left, (int)in->groups_left,
                          in->groups_left == 1 ? "" : "s");
        } else if (in->arg.kind != TCL_ARG_NONE) {
            sb_printf(&sb, " ");
            sb_arg(&sb, &in->arg);
        }
        if (next_live < p->nlive && p->live[next_live] == (int32_t)i) {
            sb_printf(&sb, "  (kept across barriers)");
            next_live++;
        }
        sb_printf(&sb, "\n");
        if (in->kind == K_RANGE) depth++;
    }
    if (sb.failed) {
        free(sb.s);
        return NULL;
    }
    if (!sb.s) return calloc(1, 1);
    return sb.s;
}

