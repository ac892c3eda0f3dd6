/* emu.c — the EMU device: program building (validation) and execution (see emu.h).
 * Layer: runtime.
 *
 * A program is an array of instructions, one per node, sources as instruction indices.
 * Execution keeps one register (a tcl_scalar) per instruction: a loop body overwrites its
 * registers on every iteration, which is all SSA values inside loops need. RANGE and END
 * are jumps: RANGE starts its loop (or jumps past its END), END increments the loop
 * variable and jumps back to the instruction after its RANGE. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "emu.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/dtype.h"
#include "core/ops.h"
#include "core/ptrmap.h"

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
    K_SPECIAL,
    K_ALIAS,   /* AFTER of a value: the value */
} emu_kind;

typedef struct emu_inst {
    uint8_t kind;
    uint8_t dtype;
    uint16_t op;
    uint8_t nval;      /* ALU: number of operands a, b, c */
    uint8_t wide;      /* INDEX, RANGE, SPECIAL: the integer operand is uint64 (may exceed int64) */
    int32_t a, b, c;   /* operand instructions, -1 when absent (LOAD: a = INDEX, b = gate) */
    int32_t jump;      /* RANGE: its END; END: its RANGE */
    int32_t mem;       /* memory id for buffers, INDEX, LOAD, STORE; -1 otherwise */
    int32_t loop;      /* innermost RANGE enclosing this instruction, -1 at top level */
    int32_t which;     /* SPECIAL: 0..2 gidx, 3..5 lidx */
    uint32_t src_off, nsrc; /* all sources, in p->srcs (for the listing) */
    tcl_scalar imm;    /* CONST: the value; LOAD: the gated-off value; RANGE, SPECIAL: 0 */
    tcl_arg arg;       /* copy of the node's arg, for the listing */
} emu_inst;

/* A kernel argument or a scratch buffer. */
typedef struct emu_mem_info {
    int dtype;
    int64_t slot;
    size_t numel, itemsize;
    size_t offset; /* scratch: byte offset in a thread's scratch block */
} emu_mem_info;

struct tcl_emu_program {
    char *name;
    emu_inst *inst;
    size_t n;
    int32_t *srcs;
    size_t nparams, nregs;
    emu_mem_info *params; /* by slot */
    emu_mem_info *regs;   /* memory id nparams + i */
    size_t scratch_bytes;
    tcl_launch launch;
    size_t bytes; /* heap bytes held, about */
};

static const char *const special_names[6] = {"gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "lidx2"};

static const char *op_name(int op) { return tcl_op_valid(op) ? tcl_op_get(op)->name : "?"; }
static const char *dtype_name(int dt) { return tcl_dtype_valid(dt) ? tcl_dtype_get(dt)->name : "?"; }

static bool is_signed_int(int dt) {
    const tcl_dtype_info *d = tcl_dtype_get(dt);
    return d->is_int && !d->is_unsigned;
}

/* An integer register the build checked to be a non-bool int, as int64: only uint64 (wide)
 * needs care, and its values past INT64_MAX saturate (they are out of range of any buffer
 * and any loop anyway). */
static inline int64_t reg_int(tcl_scalar s, bool wide) {
    if (wide) return s.v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)s.v.u;
    return s.v.i; /* sign-extended, or zero-extended below 64 bits: the same integer */
}

void tcl_emu_program_free(tcl_emu_program *p) {
    if (!p) return;
    if (p->inst)
        for (size_t i = 0; i < p->n; i++) tcl_arg_free(&p->inst[i].arg);
    free(p->inst);
    free(p->srcs);
    free(p->params);
    free(p->regs);
    free(p->name);
    free(p);
}

/* ---- building ---- */

typedef struct builder {
    tcl_emu_program *p;
    tcl_uop *const *nodes;
    size_t n;
    tcl_error *err;
    /* PARAM and DEFINE_REG as they are met (slots checked once all are known) */
    emu_mem_info *params, *regs;
    int32_t *param_at, *reg_at; /* instruction of each */
    size_t nparams, nregs;
    int64_t special_size[6];    /* size of each SPECIAL with a CONST size, 0 if none */
} builder;

/* fail's instruction for a problem of the whole kernel. */
#define WHOLE_KERNEL SIZE_MAX

/* Fails with status s and "kernel 'name': instruction i (OP): <message>" ("kernel 'name':
 * <message>" for WHOLE_KERNEL); returns s. */
TCL_PRINTF_LIKE(4, 5)
static tcl_status fail(builder *b, tcl_status s, size_t i, const char *fmt, ...) {
    if (i == WHOLE_KERNEL)
        tcl_fail(b->err, s, "kernel '%s': ", b->p->name);
    else
        tcl_fail(b->err, s, "kernel '%s': instruction %zu (%s): ", b->p->name, i, op_name(b->nodes[i]->op));
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(b->err, fmt, ap);
    va_end(ap);
    return s;
}

/* The i-th integer of a {a, b} arg (an int list or a tuple of ints). */
static bool arg_int_at(const tcl_arg *a, uint32_t i, int64_t *out) {
    if (a->kind == TCL_ARG_INTS && i < a->len) { *out = a->v.ints[i]; return true; }
    if (a->kind == TCL_ARG_TUPLE && i < a->len && a->v.items[i].kind == TCL_ARG_INT) {
        *out = a->v.items[i].v.i;
        return true;
    }
    return false;
}

/* Whether instruction s's register may be read at instruction i (whose innermost loop is
 * `loop`): s is at top level, or inside a loop that encloses i. A RANGE's own register
 * lives inside its loop. */
static bool visible(const tcl_emu_program *p, int32_t s, int32_t loop) {
    int32_t def = p->inst[s].kind == K_RANGE ? s : p->inst[s].loop;
    for (int32_t l = loop; l >= 0; l = p->inst[l].loop)
        if (l == def) return true;
    return def < 0;
}

/* Source positions that only order (nothing is read from them). */
static bool ordering_only(int op, uint32_t k) {
    switch (op) {
    case TCL_OP_SINK:
    case TCL_OP_GROUP:
    case TCL_OP_END: return true;
    case TCL_OP_RANGE:
    case TCL_OP_AFTER: return k > 0;
    default: return false;
    }
}

static bool is_buffer_inst(const emu_inst *in) { return in->kind == K_BUFFER; }

/* Whether the instruction's register holds a value of its dtype (not memory, an address
 * computed by INDEX, or nothing). */
static bool is_value(const emu_inst *in) {
    switch ((emu_kind)in->kind) {
    case K_CONST:
    case K_ALU:
    case K_RANGE:
    case K_LOAD:
    case K_SPECIAL:
    case K_ALIAS: return in->dtype != TCL_VOID;
    default: return false;
    }
}

/* Why an operand is not a value, for messages. */
static const char *not_value_reason(const emu_inst *in) {
    if (in->kind == K_INDEX) return "an address (LOAD it first)";
    if (in->kind == K_BUFFER) return "a buffer";
    return "not a value";
}

static tcl_status add_mem(builder *b, size_t i, bool is_param) {
    const tcl_uop *u = b->nodes[i];
    int64_t slot, numel;
    if (u->nsrc != 0) return fail(b, TCL_ERR_INVALID, i, "takes no sources, got %u", u->nsrc);
    if (u->dtype == TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "needs an element dtype, not void");
    if (!arg_int_at(&u->arg, 0, &slot) || !arg_int_at(&u->arg, 1, &numel) ||
        !(u->arg.kind == TCL_ARG_INTS || u->arg.kind == TCL_ARG_TUPLE) || u->arg.len != 2)
        return fail(b, TCL_ERR_INVALID, i, "arg must be {slot, numel}");
    if (slot < 0 || slot > INT32_MAX) return fail(b, TCL_ERR_INVALID, i, "slot %" PRId64 " is out of range", slot);
    if (numel < 0) return fail(b, TCL_ERR_INVALID, i, "numel %" PRId64 " is negative", numel);
    if ((uint64_t)numel > SIZE_MAX / 8) return fail(b, TCL_ERR_LIMIT, i, "numel %" PRId64 " is too large", numel);
    if (!is_param && numel > TCL_EMU_MAX_REG_ELEMENTS)
        return fail(b, TCL_ERR_LIMIT, i, "a register array of %" PRId64 " elements is larger than the %d a thread may hold", numel,
                    TCL_EMU_MAX_REG_ELEMENTS);
    emu_mem_info *list = is_param ? b->params : b->regs;
    int32_t *at = is_param ? b->param_at : b->reg_at;
    size_t *count = is_param ? &b->nparams : &b->nregs;
    for (size_t k = 0; k < *count; k++)
        if (list[k].slot == slot)
            return fail(b, TCL_ERR_INVALID, i, "slot %" PRId64 " is already taken by instruction %d", slot, (int)at[k]);
    emu_mem_info *m = &list[*count];
    memset(m, 0, sizeof *m);
    m->dtype = u->dtype;
    m->slot = slot;
    m->numel = (size_t)numel;
    m->itemsize = tcl_dtype_get(u->dtype)->itemsize;
    at[*count] = (int32_t)i;
    emu_inst *in = &b->p->inst[i];
    in->kind = K_BUFFER;
    /* params: the slot; scratch: encoded as -(index + 2) until the param count is known */
    in->mem = is_param ? (int32_t)slot : -(int32_t)(*count) - 2;
    (*count)++;
    return TCL_OK;
}

static tcl_status check_alu(builder *b, size_t i) {
    const tcl_uop *u = b->nodes[i];
    const tcl_op_info *info = tcl_op_get(u->op);
    emu_inst *in = &b->p->inst[i];
    if ((int)u->nsrc != info->nsrc) return fail(b, TCL_ERR_INVALID, i, "takes %d sources, got %u", info->nsrc, u->nsrc);
    if (u->dtype == TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "needs a value dtype, not void");
    /* the dtypes are valid exactly when the ALU accepts them: ask it with zero operands */
    tcl_scalar s[3], out;
    char types[64] = "";
    size_t used = 0;
    for (uint32_t k = 0; k < u->nsrc; k++) {
        const emu_inst *src = &b->p->inst[b->p->srcs[in->src_off + k]];
        if (!is_value(src)) return fail(b, TCL_ERR_INVALID, i, "source %u (%s) is %s", k + 1, op_name(src->op), not_value_reason(src));
        s[k] = tcl_scalar_from_bits(0, src->dtype);
        int w = snprintf(types + used, sizeof types - used, "%s%s", k ? ", " : "", dtype_name(src->dtype));
        if (w > 0 && (size_t)w < sizeof types - used) used += (size_t)w;
    }
    if (tcl_alu_exec(u->op, u->dtype, s, (int)u->nsrc, &out) == TCL_ALU_INVALID)
        return fail(b, TCL_ERR_INVALID, i, "is not defined for operands (%s) giving %s", types, dtype_name(u->dtype));
    in->kind = K_ALU;
    in->nval = (uint8_t)u->nsrc;
    return TCL_OK;
}

static tcl_status check_node(builder *b, size_t i) {
    tcl_emu_program *p = b->p;
    const tcl_uop *u = b->nodes[i];
    emu_inst *in = &p->inst[i];
    const emu_inst *s0 = u->nsrc > 0 ? &p->inst[in->a] : NULL;
    const emu_inst *s1 = u->nsrc > 1 ? &p->inst[in->b] : NULL;
    const emu_inst *s2 = u->nsrc > 2 ? &p->inst[in->c] : NULL;
    const tcl_op_info *info = tcl_op_get(u->op);

    switch (u->op) {
    case TCL_OP_PARAM: return add_mem(b, i, true);
    case TCL_OP_DEFINE_REG: return add_mem(b, i, false);
    case TCL_OP_SINK:
    case TCL_OP_GROUP: in->kind = K_NOP; return TCL_OK;
    case TCL_OP_CONST:
        if (u->nsrc != 0) return fail(b, TCL_ERR_INVALID, i, "takes no sources, got %u", u->nsrc);
        if (u->dtype == TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "needs a value dtype, not void");
        if (!tcl_scalar_from_arg(&u->arg, u->dtype, &in->imm))
            return fail(b, TCL_ERR_INVALID, i, "arg is not a value of dtype %s", dtype_name(u->dtype));
        in->kind = K_CONST;
        return TCL_OK;
    case TCL_OP_RANGE:
        if (u->nsrc < 1) return fail(b, TCL_ERR_INVALID, i, "needs its end as source 1");
        if (!is_signed_int(u->dtype)) return fail(b, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", dtype_name(u->dtype));
        if (!is_value(s0) || !tcl_dtype_get(s0->dtype)->is_int)
            return fail(b, TCL_ERR_INVALID, i, "end must be an integer value, not %s %s", dtype_name(s0->dtype), op_name(s0->op));
        in->kind = K_RANGE;
        in->wide = s0->dtype == TCL_UINT64;
        in->imm = tcl_scalar_from_bits(0, u->dtype);
        return TCL_OK;
    case TCL_OP_END:
        if (u->dtype != TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name(u->dtype));
        in->kind = K_END; /* pairing is checked by the caller */
        return TCL_OK;
    case TCL_OP_INDEX:
        if (u->nsrc != 2) return fail(b, TCL_ERR_INVALID, i, "takes (buffer, index), got %u sources", u->nsrc);
        if (!is_buffer_inst(s0)) return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is not a PARAM or DEFINE_REG", op_name(s0->op));
        if (!is_value(s1) || !tcl_dtype_get(s1->dtype)->is_int)
            return fail(b, TCL_ERR_INVALID, i, "the index must be an integer value, not %s %s", dtype_name(s1->dtype), op_name(s1->op));
        if (u->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "dtype %s differs from its buffer's %s", dtype_name(u->dtype), dtype_name(s0->dtype));
        in->kind = K_INDEX;
        in->wide = s1->dtype == TCL_UINT64;
        in->mem = s0->mem;
        return TCL_OK;
    case TCL_OP_LOAD:
        if (u->nsrc != 1 && u->nsrc != 2) return fail(b, TCL_ERR_INVALID, i, "takes (INDEX[, gate]), got %u sources", u->nsrc);
        if (s0->kind != K_INDEX) return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is not an INDEX", op_name(s0->op));
        if (u->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "dtype %s differs from its INDEX's %s", dtype_name(u->dtype), dtype_name(s0->dtype));
        if (s1 && (!is_value(s1) || s1->dtype != TCL_BOOL))
            return fail(b, TCL_ERR_INVALID, i, "the gate must be a bool value, not %s %s", dtype_name(s1->dtype), op_name(s1->op));
        in->kind = K_LOAD;
        in->mem = s0->mem;
        in->imm = tcl_scalar_from_bits(0, u->dtype);
        return TCL_OK;
    case TCL_OP_STORE:
        if (u->nsrc != 2 && u->nsrc != 3) return fail(b, TCL_ERR_INVALID, i, "takes (INDEX, value[, gate]), got %u sources", u->nsrc);
        if (u->dtype != TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name(u->dtype));
        if (s0->kind != K_INDEX) return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is not an INDEX", op_name(s0->op));
        if (!is_value(s1)) return fail(b, TCL_ERR_INVALID, i, "source 2 (%s) is %s", op_name(s1->op), not_value_reason(s1));
        if (s1->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "value dtype %s differs from its INDEX's %s", dtype_name(s1->dtype), dtype_name(s0->dtype));
        if (s2 && (!is_value(s2) || s2->dtype != TCL_BOOL))
            return fail(b, TCL_ERR_INVALID, i, "the gate must be a bool value, not %s %s", dtype_name(s2->dtype), op_name(s2->op));
        in->kind = K_STORE;
        in->mem = s0->mem;
        return TCL_OK;
    case TCL_OP_SPECIAL: {
        if (u->nsrc != 1) return fail(b, TCL_ERR_INVALID, i, "takes (size), got %u sources", u->nsrc);
        if (!is_signed_int(u->dtype)) return fail(b, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", dtype_name(u->dtype));
        if (!is_value(s0) || !tcl_dtype_get(s0->dtype)->is_int)
            return fail(b, TCL_ERR_INVALID, i, "size must be an integer value, not %s %s", dtype_name(s0->dtype), op_name(s0->op));
        int which = -1;
        if (u->arg.kind == TCL_ARG_STR)
            for (int k = 0; k < 6; k++)
                if (strlen(special_names[k]) == u->arg.len && memcmp(special_names[k], u->arg.v.s, u->arg.len) == 0)
                    which = k;
        if (which < 0) return fail(b, TCL_ERR_INVALID, i, "arg must be one of gidx0..gidx2, lidx0..lidx2");
        in->kind = K_SPECIAL;
        in->which = which;
        in->wide = s0->dtype == TCL_UINT64;
        in->imm = tcl_scalar_from_bits(0, u->dtype);
        if (s0->kind == K_CONST) {
            int64_t size = reg_int(s0->imm, in->wide);
            if (size <= 0 || size > UINT32_MAX) return fail(b, TCL_ERR_INVALID, i, "size %" PRId64 " is out of range", size);
            if (b->special_size[which] && b->special_size[which] != size)
                return fail(b, TCL_ERR_INVALID, i, "%s has size %" PRId64 " here and %" PRId64 " elsewhere", special_names[which], size,
                            b->special_size[which]);
            b->special_size[which] = size;
        }
        return TCL_OK;
    }
    case TCL_OP_AFTER:
        if (u->nsrc < 1) return fail(b, TCL_ERR_INVALID, i, "needs the value it passes on as source 1");
        if (u->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "dtype %s differs from its source's %s", dtype_name(u->dtype), dtype_name(s0->dtype));
        if (is_buffer_inst(s0)) {
            in->kind = K_BUFFER;
            in->mem = s0->mem;
        } else if (is_value(s0)) {
            in->kind = K_ALIAS;
        } else {
            return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is neither a buffer nor a value", op_name(s0->op));
        }
        return TCL_OK;
    default: break;
    }
    if (info->groups & (TCL_G_UNARY | TCL_G_BINARY | TCL_G_TERNARY)) return check_alu(b, i);
    return fail(b, TCL_ERR_INVALID, i, "op is not supported by the EMU device");
}

/* Fills the instruction's sources and loop, and pairs RANGE/END (stack of open loops). */
static tcl_status link_node(builder *b, size_t i, tcl_ptrmap *index_of, int32_t *open, size_t *nopen, uint32_t *src_off) {
    tcl_emu_program *p = b->p;
    const tcl_uop *u = b->nodes[i];
    emu_inst *in = &p->inst[i];
    in->op = (uint16_t)u->op;
    in->dtype = (uint8_t)u->dtype;
    in->a = in->b = in->c = -1;
    in->jump = in->mem = -1;
    in->which = -1;
    in->loop = *nopen ? open[*nopen - 1] : -1;
    in->src_off = *src_off;
    in->nsrc = u->nsrc;
    for (uint32_t k = 0; k < u->nsrc; k++) {
        void *v = tcl_ptrmap_get(index_of, u->src[k]);
        if (!v)
            return fail(b, TCL_ERR_INVALID, i, "source %u (%s) is not earlier in the list", k + 1, op_name(u->src[k]->op));
        int32_t s = (int32_t)((uintptr_t)v - 1);
        p->srcs[(*src_off)++] = s;
        if (k == 0) in->a = s;
        else if (k == 1) in->b = s;
        else if (k == 2) in->c = s;
        if (!ordering_only(u->op, k) && !visible(p, s, in->loop))
            return fail(b, TCL_ERR_INVALID, i, "source %u (instruction %d, %s) was defined inside a loop that is closed here", k + 1,
                        (int)s, op_name(u->src[k]->op));
    }
    if (u->op == TCL_OP_RANGE) {
        open[(*nopen)++] = (int32_t)i;
    } else if (u->op == TCL_OP_END) {
        if (u->nsrc < 1) return fail(b, TCL_ERR_INVALID, i, "needs the RANGE it closes as its last source");
        int32_t r = p->srcs[in->src_off + u->nsrc - 1];
        if (p->inst[r].op != TCL_OP_RANGE)
            return fail(b, TCL_ERR_INVALID, i, "last source (%s) is not the RANGE it closes", op_name(p->inst[r].op));
        if (p->inst[r].jump >= 0)
            return fail(b, TCL_ERR_INVALID, i, "RANGE at instruction %d was already closed at instruction %d", (int)r,
                        (int)p->inst[r].jump);
        if (*nopen == 0 || open[*nopen - 1] != r)
            return fail(b, TCL_ERR_INVALID, i, "closes RANGE at instruction %d, but the innermost open loop is %s", (int)r,
                        *nopen ? "another RANGE" : "none");
        (*nopen)--;
        in->loop = *nopen ? open[*nopen - 1] : -1;
        in->jump = r;
        p->inst[r].jump = (int32_t)i;
    }
    if (!tcl_ptrmap_put(index_of, u, (void *)(uintptr_t)(i + 1))) return fail(b, TCL_ERR_MEMORY, i, "out of memory");
    return TCL_OK;
}

/* Slots of the params must be 0..n-1; scratch gets its offsets; memory ids get final. */
static tcl_status finish_memory(builder *b) {
    tcl_emu_program *p = b->p;
    for (size_t k = 0; k < b->nparams; k++)
        if (b->params[k].slot >= (int64_t)b->nparams)
            return fail(b, TCL_ERR_INVALID, (size_t)b->param_at[k], "PARAM slots must be 0..%zu (one per kernel argument), got %" PRId64,
                        b->nparams - 1, b->params[k].slot);
    p->nparams = b->nparams;
    p->params = calloc(b->nparams ? b->nparams : 1, sizeof *p->params);
    p->nregs = b->nregs;
    p->regs = calloc(b->nregs ? b->nregs : 1, sizeof *p->regs);
    if (!p->params || !p->regs) return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    for (size_t k = 0; k < b->nparams; k++) p->params[b->params[k].slot] = b->params[k];
    size_t offset = 0;
    for (size_t k = 0; k < b->nregs; k++) {
        p->regs[k] = b->regs[k];
        offset = (offset + 7) & ~(size_t)7;
        size_t bytes = p->regs[k].numel * p->regs[k].itemsize;
        if (offset + bytes > TCL_EMU_MAX_SCRATCH_BYTES)
            return fail(b, TCL_ERR_LIMIT, WHOLE_KERNEL, "register arrays need more than the %d bytes of scratch memory a thread may hold",
                        TCL_EMU_MAX_SCRATCH_BYTES);
        p->regs[k].offset = offset;
        offset += bytes;
    }
    p->scratch_bytes = offset;
    for (size_t i = 0; i < p->n; i++)
        if (p->inst[i].mem <= -2) p->inst[i].mem = (int32_t)p->nparams + (-p->inst[i].mem - 2);
    return TCL_OK;
}

static tcl_status resolve_launch(builder *b, const tcl_launch *given) {
    tcl_launch *l = &b->p->launch;
    memset(l, 0, sizeof *l);
    if (given) *l = *given;
    for (int k = 0; k < 6; k++) {
        uint32_t *dim = k < 3 ? &l->global[k] : &l->local[k - 3];
        int64_t size = b->special_size[k];
        if (size && *dim && (int64_t)*dim != size)
            return fail(b, TCL_ERR_INVALID, WHOLE_KERNEL, "SPECIAL %s has size %" PRId64 " but the launch's %s size %d is %u", special_names[k],
                               size, k < 3 ? "global" : "local", k % 3, *dim);
        if (!*dim) *dim = size ? (uint32_t)size : 1;
    }
    return TCL_OK;
}

/* Links and checks every node, then lays out memory and the launch. The builder's lists and
 * the open-loop stack are the caller's to free. */
static tcl_status build(builder *b, tcl_ptrmap *index_of, int32_t **open, const tcl_launch *launch) {
    tcl_emu_program *p = b->p;
    tcl_uop *const *nodes = b->nodes;
    size_t n = b->n, total_src = 0;
    for (size_t i = 0; i < n; i++) {
        if (!nodes[i])
            return tcl_fail(b->err, TCL_ERR_INVALID, "kernel '%s': entry %zu of the list is not a node", p->name, i);
        total_src += nodes[i]->nsrc;
    }
    if (total_src > INT32_MAX) return fail(b, TCL_ERR_LIMIT, WHOLE_KERNEL, "too many sources");
    size_t cap = n ? n : 1;
    p->inst = calloc(cap, sizeof *p->inst);
    p->srcs = calloc(total_src ? total_src : 1, sizeof *p->srcs);
    *open = calloc(cap, sizeof **open);
    b->params = calloc(cap, sizeof *b->params);
    b->regs = calloc(cap, sizeof *b->regs);
    b->param_at = calloc(cap, sizeof *b->param_at);
    b->reg_at = calloc(cap, sizeof *b->reg_at);
    if (!p->inst || !p->srcs || !*open || !b->params || !b->regs || !b->param_at || !b->reg_at)
        return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    p->n = n; /* from here tcl_emu_program_free frees the args of every instruction */

    size_t nopen = 0;
    uint32_t src_off = 0;
    tcl_status status;
    for (size_t i = 0; i < n; i++) {
        if (tcl_ptrmap_get(index_of, nodes[i])) return fail(b, TCL_ERR_INVALID, i, "the node appears twice in the list");
        if ((status = link_node(b, i, index_of, *open, &nopen, &src_off)) != TCL_OK) return status;
        if ((status = check_node(b, i)) != TCL_OK) return status;
        if (!tcl_arg_copy(&p->inst[i].arg, &nodes[i]->arg)) return fail(b, TCL_ERR_MEMORY, i, "out of memory");
    }
    if (nopen) return fail(b, TCL_ERR_INVALID, (size_t)(*open)[nopen - 1], "the loop is never closed by an END");
    if ((status = finish_memory(b)) != TCL_OK || (status = resolve_launch(b, launch)) != TCL_OK) return status;
    /* what the program holds on the heap (arg copies estimated), for caches that bound bytes */
    p->bytes = sizeof *p + strlen(p->name) + 1 + n * sizeof *p->inst + total_src * sizeof *p->srcs +
               (p->nparams + p->nregs) * sizeof(emu_mem_info) + n * 16;
    return TCL_OK;
}

tcl_emu_program *tcl_emu_program_new(const char *name, tcl_uop *const *nodes, size_t n, const tcl_launch *launch,
                                     tcl_error *err) {
    if (!name) name = "kernel";
    if (n > INT32_MAX / 2) {
        tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %zu instructions is too many", name, n);
        return NULL;
    }
    tcl_emu_program *p = calloc(1, sizeof *p);
    size_t len = strlen(name);
    if (p) p->name = malloc(len + 1);
    if (!p || !p->name) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory building kernel '%s'", name);
        free(p);
        return NULL;
    }
    memcpy(p->name, name, len + 1);

    builder b;
    memset(&b, 0, sizeof b);
    b.p = p;
    b.nodes = nodes;
    b.n = n;
    b.err = err;
    tcl_ptrmap index_of;
    tcl_ptrmap_init(&index_of);
    int32_t *open = NULL;
    tcl_status status = build(&b, &index_of, &open, launch);
    tcl_ptrmap_free(&index_of);
    free(open);
    free(b.params);
    free(b.regs);
    free(b.param_at);
    free(b.reg_at);
    if (status != TCL_OK) {
        tcl_emu_program_free(p);
        return NULL;
    }
    return p;
}

const char *tcl_emu_program_name(const tcl_emu_program *p) { return p->name; }
size_t tcl_emu_program_size(const tcl_emu_program *p) { return p->n; }
size_t tcl_emu_program_bytes(const tcl_emu_program *p) { return p->bytes; }
size_t tcl_emu_program_nparams(const tcl_emu_program *p) { return p->nparams; }
tcl_launch tcl_emu_program_launch(const tcl_emu_program *p) { return p->launch; }

void tcl_emu_program_param(const tcl_emu_program *p, size_t slot, int *dtype, size_t *numel) {
    *dtype = p->params[slot].dtype;
    *numel = p->params[slot].numel;
}

/* ---- running ---- */

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
    tcl_fail(err, TCL_ERR_RUNTIME, "kernel '%s': instruction %zu (%s): ", p->name, pc, op_name(p->inst[pc].op));
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
            if (reg_int(r[in->a], in->wide) <= 0) pc = (size_t)in->jump; /* past the END */
            break;
        case K_END: {
            size_t rg = (size_t)in->jump;
            int64_t next = r[rg].v.i + 1;
            if (next < reg_int(r[inst[rg].a], inst[rg].wide)) {
                r[rg].v.i = next;
                pc = rg; /* the loop continues after the RANGE */
            }
            break;
        }
        case K_INDEX: r[pc].dtype = TCL_INDEX; r[pc].v.i = reg_int(r[in->b], in->wide); break;
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
            int64_t id = t->ids[in->which], size = reg_int(r[in->a], in->wide);
            if (id >= size)
                return run_error(p, t, pc, err, "thread id %" PRId64 " is outside the size %" PRId64 " of %s",
                                 id, size, special_names[in->which]);
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
                            k + 1, k, dtype_name(buf->dtype), buf->numel, dtype_name(want->dtype), want->numel);
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

/* ---- listing ---- */

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
    case TCL_ARG_DTYPE: sb_printf(sb, "%s", dtype_name(a->v.dtype)); break;
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
    }
}

char *tcl_emu_program_dump(const tcl_emu_program *p) {
    strbuf sb = {NULL, 0, 0, false};
    const tcl_launch *l = &p->launch;
    sb_printf(&sb, "kernel '%s': %zu instructions, %zu buffer%s, global (%u,%u,%u) local (%u,%u,%u)\n", p->name, p->n,
              p->nparams, p->nparams == 1 ? "" : "s", l->global[0], l->global[1], l->global[2], l->local[0],
              l->local[1], l->local[2]);
    int depth = 0;
    for (size_t i = 0; i < p->n; i++) {
        const emu_inst *in = &p->inst[i];
        if (in->kind == K_END && depth > 0) depth--;
        sb_printf(&sb, "%4zu  %*s%-10s %-8s", i, 2 * depth, "", op_name(in->op), dtype_name(in->dtype));
        if (in->nsrc) {
            sb_printf(&sb, " [");
            for (uint32_t k = 0; k < in->nsrc; k++) sb_printf(&sb, "%s%d", k ? ", " : "", (int)p->srcs[in->src_off + k]);
            sb_printf(&sb, "]");
        }
        if (in->kind == K_CONST) {
            sb_printf(&sb, " ");
            sb_scalar(&sb, in->imm);
        } else if (in->arg.kind != TCL_ARG_NONE) {
            sb_printf(&sb, " ");
            sb_arg(&sb, &in->arg);
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
