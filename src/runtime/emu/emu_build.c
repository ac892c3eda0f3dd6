/* emu_build.c — building an EMU program from a linear list of kernel nodes: validation of
 * every node (each failure names the kernel, the instruction and its op), RANGE/END pairing,
 * memory layout, launch sizes and the registers kept across barriers; and the built program's
 * lifetime and properties (emu.h). Layer: runtime. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/async_copy.h"
#include "core/ptrmap.h"
#include "core/shuffle.h"
#include "emu_program.h"

const char *const tcl_emu_special_names[6] = {"gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "lidx2"};

static bool is_signed_int(tcl_dtype dt) {
    const tcl_dtype_info *d = tcl_dtype_get(dt);
    return d->is_int && !d->is_unsigned;
}

typedef struct builder {
    tcl_emu_program *p;
    tcl_uop *const *nodes;
    size_t n;
    tcl_error *err;
    /* PARAM, DEFINE_REG and DEFINE_LOCAL as they are met, by space (slots checked once all are
     * known) */
    emu_mem_info *mems[3];
    int32_t *mem_at[3];         /* instruction of each */
    size_t nmems[3];
    int64_t special_size[6];    /* size of each SPECIAL with a CONST size, 0 if none */
    size_t first_wmma;          /* the first WMMA's instruction + 1, 0 if none */
    size_t first_shuffle;       /* the first SHUFFLE's instruction + 1, 0 if none */
    size_t first_warpgroup_wmma; /* the first WMMA of a warpgroup shape's instruction + 1, 0 if none */
    size_t tile_strides_cap;    /* room in p->tile_strides */
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
        tcl_fail(b->err, s, "kernel '%s': instruction %zu (%s): ", b->p->name, i, tcl_emu_op_name(b->nodes[i]->op));
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(b->err, fmt, ap);
    va_end(ap);
    return s;
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
    case K_WMMA:
    case K_SHUFFLE:
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

static tcl_status add_mem(builder *b, size_t i, emu_space space) {
    const tcl_uop *u = b->nodes[i];
    int64_t slot, numel;
    if (u->nsrc != 0) return fail(b, TCL_ERR_INVALID, i, "takes no sources, got %u", u->nsrc);
    if (u->dtype == TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "needs an element dtype, not void");
    if (!tcl_arg_int_at(&u->arg, 0, &slot) || !tcl_arg_int_at(&u->arg, 1, &numel) ||
        !(u->arg.kind == TCL_ARG_INTS || u->arg.kind == TCL_ARG_TUPLE) || u->arg.len != 2)
        return fail(b, TCL_ERR_INVALID, i, "arg must be {slot, numel}");
    if (slot < 0 || slot > INT32_MAX) return fail(b, TCL_ERR_INVALID, i, "slot %" PRId64 " is out of range", slot);
    if (numel < 0) return fail(b, TCL_ERR_INVALID, i, "numel %" PRId64 " is negative", numel);
    if ((uint64_t)numel > SIZE_MAX / 8) return fail(b, TCL_ERR_LIMIT, i, "numel %" PRId64 " is too large", numel);
    if (space == SPACE_REG && numel > TCL_EMU_MAX_REG_ELEMENTS)
        return fail(b, TCL_ERR_LIMIT, i, "a register array of %" PRId64 " elements is larger than the %d a thread may hold", numel,
                    TCL_EMU_MAX_REG_ELEMENTS);
    emu_mem_info *list = b->mems[space];
    int32_t *at = b->mem_at[space];
    size_t *count = &b->nmems[space];
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
    /* params: the slot; scratch and local: -(position + 2) until the counts are known */
    in->mem = space == SPACE_PARAM ? (int32_t)slot : -(int32_t)(*count) - 2;
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
        if (!is_value(src)) return fail(b, TCL_ERR_INVALID, i, "source %u (%s) is %s", k + 1, tcl_emu_op_name(src->op), not_value_reason(src));
        s[k] = tcl_scalar_from_bits(0, src->dtype);
        int w = snprintf(types + used, sizeof types - used, "%s%s", k ? ", " : "", tcl_emu_dtype_name(src->dtype));
        if (w > 0 && (size_t)w < sizeof types - used) used += (size_t)w;
    }
    if (tcl_alu_exec(u->op, u->dtype, s, (int)u->nsrc, &out) == TCL_ALU_INVALID)
        return fail(b, TCL_ERR_INVALID, i, "is not defined for operands (%s) giving %s", types, tcl_emu_dtype_name(u->dtype));
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
    case TCL_OP_PARAM: return add_mem(b, i, SPACE_PARAM);
    case TCL_OP_DEFINE_REG: return add_mem(b, i, SPACE_REG);
    case TCL_OP_DEFINE_LOCAL: return add_mem(b, i, SPACE_LOCAL);
    case TCL_OP_BARRIER: {
        if (u->dtype != TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "must be void, not %s", tcl_emu_dtype_name(u->dtype));
        int64_t in_flight;
        tcl_error why;
        if (tcl_barrier_groups_in_flight(u, &in_flight, &why) != TCL_OK) return fail(b, TCL_ERR_INVALID, i, "%s", why.message);
        in->kind = K_BARRIER;
        in->groups_left = (int32_t)in_flight; /* no arg: it waits for every copy, as n = 0 */
        return TCL_OK;
    }
    case TCL_OP_WMMA: {
        const tcl_wmma_shape *shape;
        int out;
        tcl_error why;
        if (tcl_wmma_check(u, &shape, &out, &why) != TCL_OK) return fail(b, TCL_ERR_INVALID, i, "%s", why.message);
        /* a warpgroup shape's A and B are INDEXes into local memory (tcl_wmma_check saw to it):
         * addresses, read at the stop; the C registers are values as in every shape */
        bool warpgroup = tcl_wmma_is_warpgroup(shape);
        for (uint32_t k = warpgroup ? 2 : 0; k < u->nsrc; k++) {
            const emu_inst *src = &p->inst[p->srcs[in->src_off + k]];
            if (!is_value(src)) return fail(b, TCL_ERR_INVALID, i, "source %u (%s) is %s", k + 1, tcl_emu_op_name(src->op), not_value_reason(src));
        }
        in->kind = K_WMMA;
        in->shape = (uint8_t)(shape - tcl_wmma_shapes);
        in->deferred = warpgroup && tcl_wmma_deferred(u);
        in->wmma_out = out;
        if (!b->first_wmma) b->first_wmma = i + 1;
        tcl_wmma_strides strides = warpgroup ? tcl_wmma_strides_of(u) : (tcl_wmma_strides){0, 0, 0, 0};
        const tcl_wmma_strides *last = p->ntile_strides ? &p->tile_strides[p->ntile_strides - 1] : NULL;
        /* a product's nodes (one per D register) share their strides: one entry for a run of them */
        if (warpgroup && last && !memcmp(last, &strides, sizeof strides)) {
            in->tiles = (int32_t)(p->ntile_strides - 1);
        } else if (warpgroup) {
            if (!b->first_warpgroup_wmma) b->first_warpgroup_wmma = i + 1;
            if (p->ntile_strides == b->tile_strides_cap) {
                size_t cap = b->tile_strides_cap ? 2 * b->tile_strides_cap : 4;
                tcl_wmma_strides *grown = realloc(p->tile_strides, cap * sizeof *grown);
                if (!grown) return fail(b, TCL_ERR_MEMORY, i, "out of memory");
                p->tile_strides = grown;
                b->tile_strides_cap = cap;
            }
            in->tiles = (int32_t)p->ntile_strides;
            p->tile_strides[p->ntile_strides++] = strides;
        }
        size_t elements = (size_t)(shape->m * shape->k + shape->k * shape->n + shape->m * shape->n);
        if (elements > p->wmma_elements) p->wmma_elements = elements;
        return TCL_OK;
    }
    case TCL_OP_SHUFFLE: {
        int mask;
        tcl_error why;
        if (tcl_shuffle_check(u, &mask, &why) != TCL_OK) return fail(b, TCL_ERR_INVALID, i, "%s", why.message);
        if (!is_value(s0)) return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is %s", tcl_emu_op_name(s0->op), not_value_reason(s0));
        in->kind = K_SHUFFLE;
        in->lane_mask = mask;
        if (!b->first_shuffle) b->first_shuffle = i + 1;
        return TCL_OK;
    }
    case TCL_OP_SINK:
    case TCL_OP_GROUP: in->kind = K_NOP; return TCL_OK;
    case TCL_OP_CONST:
        if (u->nsrc != 0) return fail(b, TCL_ERR_INVALID, i, "takes no sources, got %u", u->nsrc);
        if (u->dtype == TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "needs a value dtype, not void");
        if (!tcl_scalar_from_arg(&u->arg, u->dtype, &in->imm))
            return fail(b, TCL_ERR_INVALID, i, "arg is not a value of dtype %s", tcl_emu_dtype_name(u->dtype));
        in->kind = K_CONST;
        return TCL_OK;
    case TCL_OP_RANGE:
        if (u->nsrc < 1) return fail(b, TCL_ERR_INVALID, i, "needs its end as source 1");
        if (!is_signed_int(u->dtype)) return fail(b, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", tcl_emu_dtype_name(u->dtype));
        if (!is_value(s0) || !tcl_dtype_get(s0->dtype)->is_int)
            return fail(b, TCL_ERR_INVALID, i, "end must be an integer value, not %s %s", tcl_emu_dtype_name(s0->dtype), tcl_emu_op_name(s0->op));
        in->kind = K_RANGE;
        in->wide = s0->dtype == TCL_UINT64;
        in->imm = tcl_scalar_from_bits(0, u->dtype);
        return TCL_OK;
    case TCL_OP_END:
        if (u->dtype != TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "must be void, not %s", tcl_emu_dtype_name(u->dtype));
        in->kind = K_END; /* pairing is checked by the caller */
        return TCL_OK;
    case TCL_OP_INDEX:
        if (u->nsrc != 2) return fail(b, TCL_ERR_INVALID, i, "takes (buffer, index), got %u sources", u->nsrc);
        if (!is_buffer_inst(s0))
            return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is not a PARAM or DEFINE_REG or DEFINE_LOCAL", tcl_emu_op_name(s0->op));
        if (!is_value(s1) || !tcl_dtype_get(s1->dtype)->is_int)
            return fail(b, TCL_ERR_INVALID, i, "the index must be an integer value, not %s %s", tcl_emu_dtype_name(s1->dtype), tcl_emu_op_name(s1->op));
        if (u->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "dtype %s differs from its buffer's %s", tcl_emu_dtype_name(u->dtype), tcl_emu_dtype_name(s0->dtype));
        in->kind = K_INDEX;
        in->wide = s1->dtype == TCL_UINT64;
        in->mem = s0->mem;
        return TCL_OK;
    case TCL_OP_LOAD:
        if (u->nsrc != 1 && u->nsrc != 2) return fail(b, TCL_ERR_INVALID, i, "takes (INDEX[, gate]), got %u sources", u->nsrc);
        if (s0->kind != K_INDEX) return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is not an INDEX", tcl_emu_op_name(s0->op));
        if (u->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "dtype %s differs from its INDEX's %s", tcl_emu_dtype_name(u->dtype), tcl_emu_dtype_name(s0->dtype));
        if (s1 && (!is_value(s1) || s1->dtype != TCL_BOOL))
            return fail(b, TCL_ERR_INVALID, i, "the gate must be a bool value, not %s %s", tcl_emu_dtype_name(s1->dtype), tcl_emu_op_name(s1->op));
        in->kind = K_LOAD;
        in->mem = s0->mem;
        in->imm = tcl_scalar_from_bits(0, u->dtype);
        return TCL_OK;
    case TCL_OP_STORE:
        if (u->nsrc != 2 && u->nsrc != 3) return fail(b, TCL_ERR_INVALID, i, "takes (INDEX, value[, gate]), got %u sources", u->nsrc);
        if (u->dtype != TCL_VOID) return fail(b, TCL_ERR_INVALID, i, "must be void, not %s", tcl_emu_dtype_name(u->dtype));
        if (s0->kind != K_INDEX) return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is not an INDEX", tcl_emu_op_name(s0->op));
        if (!is_value(s1)) return fail(b, TCL_ERR_INVALID, i, "source 2 (%s) is %s", tcl_emu_op_name(s1->op), not_value_reason(s1));
        if (s1->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "value dtype %s differs from its INDEX's %s", tcl_emu_dtype_name(s1->dtype), tcl_emu_dtype_name(s0->dtype));
        if (s2 && (!is_value(s2) || s2->dtype != TCL_BOOL))
            return fail(b, TCL_ERR_INVALID, i, "the gate must be a bool value, not %s %s", tcl_emu_dtype_name(s2->dtype), tcl_emu_op_name(s2->op));
        int count = 0;
        const tcl_uop *load = NULL;
        tcl_store_kind kind;
        tcl_error why;
        if (tcl_store_classify(u, &kind, &count, &load, &why) != TCL_OK) return fail(b, TCL_ERR_INVALID, i, "%s", why.message);
        switch (kind) {
        case TCL_STORE_PLAIN: in->kind = K_STORE; break;
        case TCL_STORE_ASYNC: /* b: the LOAD, whose INDEX names the elements copied from */
            if (s1->kind != K_LOAD) return fail(b, TCL_ERR_INVALID, i, "source 2 (%s) is not a LOAD", tcl_emu_op_name(s1->op));
            in->kind = K_COPY;
            in->copy_elements = count;
            break;
        }
        in->mem = s0->mem;
        return TCL_OK;
    case TCL_OP_SPECIAL: {
        if (u->nsrc != 1) return fail(b, TCL_ERR_INVALID, i, "takes (size), got %u sources", u->nsrc);
        if (!is_signed_int(u->dtype)) return fail(b, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", tcl_emu_dtype_name(u->dtype));
        if (!is_value(s0) || !tcl_dtype_get(s0->dtype)->is_int)
            return fail(b, TCL_ERR_INVALID, i, "size must be an integer value, not %s %s", tcl_emu_dtype_name(s0->dtype), tcl_emu_op_name(s0->op));
        int special = -1;
        if (u->arg.kind == TCL_ARG_STR)
            for (int k = 0; k < 6; k++)
                if (strlen(tcl_emu_special_names[k]) == u->arg.len && memcmp(tcl_emu_special_names[k], u->arg.v.s, u->arg.len) == 0)
                    special = k;
        if (special < 0) return fail(b, TCL_ERR_INVALID, i, "arg must be one of gidx0..gidx2, lidx0..lidx2");
        in->kind = K_SPECIAL;
        in->special = special;
        in->wide = s0->dtype == TCL_UINT64;
        in->imm = tcl_scalar_from_bits(0, u->dtype);
        if (s0->kind == K_CONST) {
            int64_t size = tcl_emu_reg_int(s0->imm, in->wide);
            if (size <= 0 || size > UINT32_MAX) return fail(b, TCL_ERR_INVALID, i, "size %" PRId64 " is out of range", size);
            if (b->special_size[special] && b->special_size[special] != size)
                return fail(b, TCL_ERR_INVALID, i, "%s has size %" PRId64 " here and %" PRId64 " elsewhere", tcl_emu_special_names[special], size,
                            b->special_size[special]);
            b->special_size[special] = size;
        }
        return TCL_OK;
    }
    case TCL_OP_AFTER:
        if (u->nsrc < 1) return fail(b, TCL_ERR_INVALID, i, "needs the value it passes on as source 1");
        if (u->dtype != s0->dtype)
            return fail(b, TCL_ERR_INVALID, i, "dtype %s differs from its source's %s", tcl_emu_dtype_name(u->dtype), tcl_emu_dtype_name(s0->dtype));
        if (is_buffer_inst(s0)) {
            in->kind = K_BUFFER;
            in->mem = s0->mem;
        } else if (is_value(s0)) {
            in->kind = K_ALIAS;
        } else {
            return fail(b, TCL_ERR_INVALID, i, "source 1 (%s) is neither a buffer nor a value", tcl_emu_op_name(s0->op));
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
    in->special = in->tiles = -1; /* every member of the union */
    in->loop = *nopen ? open[*nopen - 1] : -1;
    in->src_off = *src_off;
    in->nsrc = u->nsrc;
    for (uint32_t k = 0; k < u->nsrc; k++) {
        void *v = tcl_ptrmap_get(index_of, u->src[k]);
        if (!v)
            return fail(b, TCL_ERR_INVALID, i, "source %u (%s) is not earlier in the list", k + 1, tcl_emu_op_name(u->src[k]->op));
        int32_t s = (int32_t)((uintptr_t)v - 1);
        p->srcs[(*src_off)++] = s;
        if (k == 0) in->a = s;
        else if (k == 1) in->b = s;
        else if (k == 2) in->c = s;
        /* a BARRIER's sources only order (the stores it waits for may be in a closed loop) */
        if (u->op != TCL_OP_BARRIER && !tcl_op_source_orders_only(u->op, k) && !visible(p, s, in->loop))
            return fail(b, TCL_ERR_INVALID, i, "source %u (instruction %d, %s) was defined inside a loop that is closed here", k + 1,
                        (int)s, tcl_emu_op_name(u->src[k]->op));
    }
    if (u->op == TCL_OP_RANGE) {
        open[(*nopen)++] = (int32_t)i;
    } else if (u->op == TCL_OP_END) {
        if (u->nsrc < 1) return fail(b, TCL_ERR_INVALID, i, "needs the RANGE it closes as its last source");
        int32_t r = p->srcs[in->src_off + u->nsrc - 1];
        if (p->inst[r].op != TCL_OP_RANGE)
            return fail(b, TCL_ERR_INVALID, i, "last source (%s) is not the RANGE it closes", tcl_emu_op_name(p->inst[r].op));
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

/* Lays out the memory of a space whose slots must be 0..n-1 (PARAM, DEFINE_LOCAL): by slot. */
static tcl_status by_slot(builder *b, emu_space space, emu_mem_info **out) {
    size_t n = b->nmems[space];
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out) return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    for (size_t k = 0; k < n; k++) {
        if (b->mems[space][k].slot >= (int64_t)n)
            return fail(b, TCL_ERR_INVALID, (size_t)b->mem_at[space][k], "%s slots must be 0..%zu (%s), got %" PRId64,
                        tcl_emu_space_name(space), n - 1, space == SPACE_PARAM ? "one per kernel argument" : "one per local buffer",
                        b->mems[space][k].slot);
        (*out)[b->mems[space][k].slot] = b->mems[space][k];
    }
    return TCL_OK;
}

/* Slots of the params and locals must be 0..n-1; scratch and local memory get their offsets
 * (within their limits); memory ids get final; each memory learns whether a STORE writes it. */
static tcl_status finish_memory(builder *b) {
    tcl_emu_program *p = b->p;
    tcl_status status;
    p->nparams = b->nmems[SPACE_PARAM];
    p->nregs = b->nmems[SPACE_REG];
    p->nlocals = b->nmems[SPACE_LOCAL];
    if ((status = by_slot(b, SPACE_PARAM, &p->params)) != TCL_OK) return status;
    if ((status = by_slot(b, SPACE_LOCAL, &p->locals)) != TCL_OK) return status;
    p->regs = calloc(p->nregs ? p->nregs : 1, sizeof *p->regs);
    if (!p->regs) return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    size_t offset = 0;
    for (size_t k = 0; k < p->nregs; k++) {
        p->regs[k] = b->mems[SPACE_REG][k];
        offset = (offset + 7) & ~(size_t)7;
        size_t bytes = p->regs[k].numel * p->regs[k].itemsize;
        if (offset + bytes > TCL_EMU_MAX_SCRATCH_BYTES)
            return fail(b, TCL_ERR_LIMIT, WHOLE_KERNEL, "register arrays need more than the %d bytes of scratch memory a thread may hold",
                        TCL_EMU_MAX_SCRATCH_BYTES);
        p->regs[k].offset = offset;
        offset += bytes;
    }
    p->scratch_bytes = offset;
    offset = 0;
    for (size_t k = 0; k < p->nlocals; k++) {
        offset = (offset + 7) & ~(size_t)7;
        size_t bytes = p->locals[k].numel * p->locals[k].itemsize; /* numel <= SIZE_MAX / 8: no overflow */
        if (offset > TCL_EMU_MAX_LOCAL_BYTES || bytes > TCL_EMU_MAX_LOCAL_BYTES - offset) {
            size_t at = 0; /* the DEFINE_LOCAL of slot k */
            for (size_t j = 0; j < p->nlocals; j++)
                if (b->mems[SPACE_LOCAL][j].slot == (int64_t)k) at = (size_t)b->mem_at[SPACE_LOCAL][j];
            return fail(b, TCL_ERR_LIMIT, at,
                        "local memory of %zu bytes (DEFINE_LOCAL slots 0..%zu) is more than the %d bytes a workgroup may hold",
                        offset + bytes, k, TCL_EMU_MAX_LOCAL_BYTES);
        }
        p->locals[k].offset = offset;
        offset += bytes;
    }
    p->local_bytes = offset;
    /* final memory ids, each instruction after its source */
    for (size_t i = 0; i < p->n; i++) {
        emu_inst *in = &p->inst[i];
        if (in->op == TCL_OP_DEFINE_REG) {
            in->mem = (int32_t)p->nparams + (-in->mem - 2);
        } else if (in->op == TCL_OP_DEFINE_LOCAL) {
            in->mem = (int32_t)(p->nparams + p->nregs + (size_t)b->mems[SPACE_LOCAL][-in->mem - 2].slot);
        } else if (in->kind == K_INDEX || in->kind == K_LOAD || in->kind == K_STORE || in->kind == K_COPY ||
                   (in->kind == K_BUFFER && in->op == TCL_OP_AFTER)) {
            in->mem = p->inst[in->a].mem;
            if (in->kind == K_STORE || in->kind == K_COPY) ((emu_mem_info *)tcl_emu_mem_info(p, (size_t)in->mem))->stored = true;
        }
    }
    return TCL_OK;
}

/* TCL_OK unless the op whose instruction + 1 is `first` (0: none) runs in a workgroup of `group`
 * threads that is not a multiple of `unit`: "... threads, and <what> needs whole <units> (a
 * multiple of <unit>)". */
static tcl_status need_whole(builder *b, size_t first, uint64_t group, const char *what, const char *units, int unit) {
    if (!first || group % (uint64_t)unit == 0) return TCL_OK;
    const tcl_launch *l = &b->p->launch;
    return fail(b, TCL_ERR_INVALID, first - 1,
                "a workgroup of local size (%u,%u,%u) has %" PRIu64 " threads, and %s needs whole %s (a multiple of %d)",
                l->local[0], l->local[1], l->local[2], group, what, units, unit);
}

static tcl_status resolve_launch(builder *b, const tcl_launch *given) {
    tcl_launch *l = &b->p->launch;
    memset(l, 0, sizeof *l);
    if (given) *l = *given;
    for (int k = 0; k < 6; k++) {
        uint32_t *dim = k < 3 ? &l->global[k] : &l->local[k - 3];
        int64_t size = b->special_size[k];
        if (size && *dim && (int64_t)*dim != size)
            return fail(b, TCL_ERR_INVALID, WHOLE_KERNEL, "SPECIAL %s has size %" PRId64 " but the launch's %s size %d is %u", tcl_emu_special_names[k],
                               size, k < 3 ? "global" : "local", k % 3, *dim);
        if (!*dim) *dim = size ? (uint32_t)size : 1;
    }
    /* a workgroup of at most TCL_EMU_MAX_WORKGROUP threads, and thread ids that fit 32 bits (race
     * checking keeps them per element) */
    uint64_t group = 1, threads;
    for (int k = 0; k < 3; k++) {
        if (l->local[k] > TCL_EMU_MAX_WORKGROUP || group * l->local[k] > TCL_EMU_MAX_WORKGROUP)
            return fail(b, TCL_ERR_LIMIT, WHOLE_KERNEL,
                        "a workgroup of local size (%u,%u,%u) has more than the %d threads a workgroup may have", l->local[0],
                        l->local[1], l->local[2], TCL_EMU_MAX_WORKGROUP);
        group *= l->local[k];
    }
    threads = group;
    for (int k = 0; k < 3; k++) {
        if (threads > (UINT32_MAX - 1) / l->global[k])
            return fail(b, TCL_ERR_LIMIT, WHOLE_KERNEL,
                        "a launch of global size (%u,%u,%u) and local size (%u,%u,%u) has more than the %u threads EMU runs",
                        l->global[0], l->global[1], l->global[2], l->local[0], l->local[1], l->local[2], UINT32_MAX - 1);
        threads *= l->global[k];
    }
    b->p->group_threads = (uint32_t)group;
    tcl_status st = need_whole(b, b->first_warpgroup_wmma, group, "a WMMA of a warpgroup shape", "warpgroups",
                               TCL_WMMA_WARPGROUP);
    if (st == TCL_OK) st = need_whole(b, b->first_wmma, group, "WMMA", "warps", TCL_WMMA_WARP);
    if (st == TCL_OK) st = need_whole(b, b->first_shuffle, group, "SHUFFLE", "warps", TCL_SHUFFLE_WARP);
    return st;
}

/* A WMMA or SHUFFLE: a stop where the warps of the group compute the result from their lanes' saved registers. */
static bool is_warp_stop(const emu_inst *in) { return in->kind == K_WMMA || in->kind == K_SHUFFLE; }

/* The registers instruction i reads at run time (not its ordering-only sources); returns how
 * many in out: at most TCL_WMMA_MAX_SRC, a WMMA's sources (tcl_wmma_check bounds their number by
 * the shape's; other instructions read at most 3). */
static int reads_of(const tcl_emu_program *p, size_t i, int32_t out[TCL_WMMA_MAX_SRC]) {
    const emu_inst *in = &p->inst[i];
    int n = 0;
    switch ((emu_kind)in->kind) {
    case K_ALU:
        out[n++] = in->a;
        if (in->nval > 1) out[n++] = in->b;
        if (in->nval > 2) out[n++] = in->c;
        break;
    case K_ALIAS:
    case K_RANGE:
    case K_SPECIAL: out[n++] = in->a; break;
    case K_END: out[n++] = in->jump; out[n++] = p->inst[in->jump].a; break; /* the loop variable and its end */
    case K_INDEX: out[n++] = in->b; break;
    case K_LOAD:
    case K_STORE:
        out[n++] = in->a;
        if (in->b >= 0) out[n++] = in->b;
        if (in->c >= 0) out[n++] = in->c;
        break;
    case K_COPY: /* the destination's index, the source's (its LOAD's INDEX), the gate */
        out[n++] = in->a;
        out[n++] = p->inst[in->b].a;
        if (in->c >= 0) out[n++] = in->c;
        break;
    case K_WMMA:
        for (uint32_t k = 0; k < in->nsrc; k++) out[n++] = p->srcs[in->src_off + k];
        break;
    case K_SHUFFLE: out[n++] = in->a; break;
    default: break;
    }
    return n;
}

/* Finds the registers a thread must keep while others run: register s is read by instruction i
 * after a stop (a BARRIER or a WMMA) that ran since s was written when a stop lies between them
 * (s < stop < i), or in a loop around i that s is outside of (its body repeats between the write
 * and a later read); the END of a loop reads its RANGE's register and end, so a stop in the body
 * keeps both. A WMMA reads its sources once the group stopped there (after its own stop), so
 * they are kept (a warpgroup shape's A and B too: INDEX registers, the tiles' places in local
 * memory), and its register is written while the thread waits, so it is kept too; the same for
 * a SHUFFLE, its source and its register. A CONST's register needs no keeping: every thread
 * writes the same value. */
static tcl_status find_live(builder *b) {
    tcl_emu_program *p = b->p;
    for (size_t i = 0; i < p->n; i++) {
        if (p->inst[i].kind == K_BARRIER) p->nbarriers++;
        if (p->inst[i].kind == K_WMMA) p->nwmma++;
        if (p->inst[i].kind == K_SHUFFLE) p->nshuffle++;
    }
    if (!tcl_emu_lockstep(p)) return TCL_OK;
    if (p->scratch_bytes > TCL_EMU_MAX_GROUP_SCRATCH_BYTES / p->group_threads)
        return fail(b, TCL_ERR_LIMIT, WHOLE_KERNEL,
                    "with barriers each of the %u threads of a workgroup keeps its %zu bytes of register arrays, "
                    "more than the %d bytes EMU holds",
                    p->group_threads, p->scratch_bytes, TCL_EMU_MAX_GROUP_SCRATCH_BYTES);
    size_t *before = calloc(p->n + 1, sizeof *before); /* before[i]: stops at instructions < i */
    bool *keep = calloc(p->n ? p->n : 1, sizeof *keep);
    if (!before || !keep) {
        free(before);
        free(keep);
        return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    }
    for (size_t i = 0; i < p->n; i++) before[i + 1] = before[i] + (p->inst[i].kind == K_BARRIER || is_warp_stop(&p->inst[i]));
    for (size_t i = 0; i < p->n; i++) {
        int32_t reads[TCL_WMMA_MAX_SRC];
        int nr = reads_of(p, i, reads);
        bool wmma = is_warp_stop(&p->inst[i]); /* reads its sources after its own stop */
        if (wmma && !keep[i]) {
            keep[i] = true;
            p->nlive++;
        }
        for (int k = 0; k < nr; k++) {
            int32_t s = reads[k];
            if (p->inst[s].kind == K_CONST) continue; /* every thread writes the same value */
            size_t hi = wmma ? i + 1 : i;
            for (int32_t l = p->inst[i].loop; l > s; l = p->inst[l].loop) hi = (size_t)p->inst[l].jump;
            if (before[hi] > before[s + 1] && !keep[s]) {
                keep[s] = true;
                p->nlive++;
            }
        }
    }
    free(before);
    p->live = calloc(p->nlive ? p->nlive : 1, sizeof *p->live);
    if (p->nwmma || p->nshuffle) p->live_slot = calloc(p->n, sizeof *p->live_slot);
    if (!p->live || ((p->nwmma || p->nshuffle) && !p->live_slot)) {
        free(keep);
        return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (p->live_slot) p->live_slot[i] = keep[i] ? (int32_t)k : -1;
        if (keep[i]) p->live[k++] = (int32_t)i;
    }
    free(keep);
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
    bool lists_ok = true;
    for (int k = 0; k < 3; k++) {
        b->mems[k] = calloc(cap, sizeof *b->mems[k]);
        b->mem_at[k] = calloc(cap, sizeof *b->mem_at[k]);
        lists_ok = lists_ok && b->mems[k] && b->mem_at[k];
    }
    if (!p->inst || !p->srcs || !*open || !lists_ok) return fail(b, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
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
    if ((status = finish_memory(b)) != TCL_OK || (status = resolve_launch(b, launch)) != TCL_OK ||
        (status = find_live(b)) != TCL_OK)
        return status;
    /* what the program holds on the heap (arg copies estimated), for caches that bound bytes */
    p->bytes = sizeof *p + strlen(p->name) + 1 + n * sizeof *p->inst + total_src * sizeof *p->srcs +
               (p->nparams + p->nregs + p->nlocals) * sizeof(emu_mem_info) + p->nlive * sizeof *p->live + n * 16 +
               (p->live_slot ? n * sizeof *p->live_slot : 0) + b->tile_strides_cap * sizeof *p->tile_strides;
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
    for (int k = 0; k < 3; k++) {
        free(b.mems[k]);
        free(b.mem_at[k]);
    }
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
size_t tcl_emu_program_local_bytes(const tcl_emu_program *p) { return p->local_bytes; }
size_t tcl_emu_program_nbarriers(const tcl_emu_program *p) { return p->nbarriers; }

void tcl_emu_program_param(const tcl_emu_program *p, size_t slot, tcl_dtype *dtype, size_t *numel) {
    *dtype = p->params[slot].dtype;
    *numel = p->params[slot].numel;
}

void tcl_emu_program_free(tcl_emu_program *p) {
    if (!p) return;
    if (p->inst)
        for (size_t i = 0; i < p->n; i++) tcl_arg_free(&p->inst[i].arg);
    free(p->inst);
    free(p->srcs);
    free(p->params);
    free(p->regs);
    free(p->locals);
    free(p->live);
    free(p->live_slot);
    free(p->tile_strides);
    free(p->name);
    free(p);
}
