/* ops.c — op names and groups. Layer: core. */
#include "ops.h"

#include <string.h>

#define U TCL_G_UNARY | TCL_G_ALU | TCL_G_ELEMENTWISE
#define BI TCL_G_BINARY | TCL_G_ALU | TCL_G_ELEMENTWISE
#define CM TCL_G_COMMUTATIVE
#define AS TCL_G_ASSOCIATIVE
#define ID TCL_G_IDEMPOTENT
#define CMP TCL_G_COMPARISON
static const tcl_op_info op_table[TCL_OP_COUNT] = {
#define X(name, groups, nsrc) {#name, (groups), (nsrc)},
    TCL_OP_LIST(X)
#undef X
};

const tcl_group_info tcl_op_groups[] = {
    {"Unary", TCL_G_UNARY},           {"Binary", TCL_G_BINARY},
    {"Ternary", TCL_G_TERNARY},       {"ALU", TCL_G_ALU},
    {"Commutative", TCL_G_COMMUTATIVE}, {"Associative", TCL_G_ASSOCIATIVE},
    {"Idempotent", TCL_G_IDEMPOTENT}, {"Comparison", TCL_G_COMPARISON},
    {"Movement", TCL_G_MOVEMENT},     {"Buffer", TCL_G_BUFFER},
    {"Memory", TCL_G_MEMORY},         {"Control", TCL_G_CONTROL},
    {"Graph", TCL_G_GRAPH},           {"Elementwise", TCL_G_ELEMENTWISE},
    {"Reduce", TCL_G_REDUCE},         {"Vector", TCL_G_VECTOR},
    {"Special", TCL_G_SPECIAL},       {NULL, 0},
};

bool tcl_op_valid(int op) { return op >= 0 && op < TCL_OP_COUNT; }

const tcl_op_info *tcl_op_get(tcl_op op) { return tcl_op_valid((int)op) ? &op_table[op] : NULL; }

bool tcl_op_in(tcl_op op, uint32_t group_bits) {
    return tcl_op_valid((int)op) && (op_table[op].groups & group_bits) != 0;
}

int tcl_op_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TCL_OP_COUNT; i++)
        if (strcmp(op_table[i].name, name) == 0) return i;
    return -1;
}
