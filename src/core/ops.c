/* ops.c — op names and groups, the tables generated from the lists in ops.h. Layer: core. */
#include "ops.h"

#include <string.h>

static const tcl_op_info op_table[TCL_OP_COUNT] = {
#define X(name, groups, nsrc) {#name, (groups), (nsrc)},
    TCL_OP_LIST(X)
#undef X
};

const tcl_group_info tcl_op_groups[] = {
#define X(id, name, meaning) {#name, TCL_G_##id},
    TCL_OP_GROUP_LIST(X)
#undef X
    {NULL, 0},
};

bool tcl_op_valid(int op) { return op >= 0 && op < TCL_OP_COUNT; }

const tcl_op_info *tcl_op_get(tcl_op op) { return tcl_op_valid((int)op) ? &op_table[op] : NULL; }

bool tcl_op_in(tcl_op op, uint32_t group_bits) {
    return tcl_op_valid((int)op) && (op_table[op].groups & group_bits) != 0;
}

bool tcl_op_source_orders_only(tcl_op op, uint32_t k) {
    switch (op) {
    case TCL_OP_SINK:
    case TCL_OP_GROUP:
    case TCL_OP_END: return true;
    case TCL_OP_RANGE:
    case TCL_OP_AFTER:
    case TCL_OP_REDUCE: return k > 0;
    default: return false;
    }
}

int tcl_op_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TCL_OP_COUNT; i++)
        if (strcmp(op_table[i].name, name) == 0) return i;
    return -1;
}
