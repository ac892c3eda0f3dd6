/* ops.h — the op set of the UOp IR and its groups. Layer: core.
 * One X-macro list is the single truth for the enum, the names and the group bits. */
#ifndef TCLC_OPS_H
#define TCLC_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* The groups an op can belong to: X(ID, Lua name, what it means). One bit each, in this order;
 * the Lua side sees them by name (tcl.core.groups, op_in). */
#define TCL_OP_GROUP_LIST(X)                                                                 \
    X(UNARY, Unary, "one source")                                                            \
    X(BINARY, Binary, "two sources")                                                         \
    X(TERNARY, Ternary, "three sources")                                                     \
    X(ALU, ALU, "unary, binary or ternary arithmetic")                                       \
    X(COMMUTATIVE, Commutative, "op(a, b) == op(b, a)")                                      \
    X(ASSOCIATIVE, Associative, "op(op(a, b), c) == op(a, op(b, c))")                        \
    X(IDEMPOTENT, Idempotent, "op(x, x) == x")                                               \
    X(COMPARISON, Comparison, "a bool result from two values")                               \
    X(MOVEMENT, Movement, "reshapes or reorders a tensor's elements")                        \
    X(BUFFER, Buffer, "defines storage or a kernel argument")                                \
    X(MEMORY, Memory, "index, load or store")                                                \
    X(CONTROL, Control, "loops, ifs, barriers")                                              \
    X(GRAPH, Graph, "structure that is never rendered as an instruction")                    \
    X(ELEMENTWISE, Elementwise, "ALU ops plus casts")                                        \
    X(REDUCE, Reduce, "reductions")                                                          \
    X(VECTOR, Vector, "builds or takes apart vectors")                                       \
    X(SPECIAL, Special, "thread indices, variables")

enum {
#define X(id, name, meaning) TCL_G_INDEX_##id,
    TCL_OP_GROUP_LIST(X)
#undef X
    TCL_G_INDEX_COUNT
};
_Static_assert(TCL_G_INDEX_COUNT <= 32, "group bits are held in a uint32_t");

/* Group bits: TCL_G_UNARY, TCL_G_BINARY, ... */
enum {
#define X(id, name, meaning) TCL_G_##id = 1u << TCL_G_INDEX_##id,
    TCL_OP_GROUP_LIST(X)
#undef X
};

/* The group sets most ALU ops share. */
#define TCL_G_UNARY_ALU (TCL_G_UNARY | TCL_G_ALU | TCL_G_ELEMENTWISE)
#define TCL_G_BINARY_ALU (TCL_G_BINARY | TCL_G_ALU | TCL_G_ELEMENTWISE)
#define TCL_G_TERNARY_ALU (TCL_G_TERNARY | TCL_G_ALU | TCL_G_ELEMENTWISE)

/* X(name, group bits, number of sources or -1 for any) */
#define TCL_OP_LIST(X)                                                                       \
    /* graph structure */                                                                    \
    X(SINK, TCL_G_GRAPH, -1)                                                                 \
    X(GROUP, TCL_G_GRAPH, -1)                                                                \
    X(AFTER, TCL_G_GRAPH, -1)                                                                \
    X(NOOP, TCL_G_GRAPH, -1)                                                                 \
    X(KERNEL, TCL_G_GRAPH, -1)                                                               \
    X(CALL, TCL_G_GRAPH, -1)                                                                 \
    X(PROGRAM, TCL_G_GRAPH, -1)                                                              \
    X(LINEAR, TCL_G_GRAPH, -1)                                                               \
    X(SOURCE, TCL_G_GRAPH, -1)                                                               \
    X(BINARY, TCL_G_GRAPH, -1)                                                               \
    X(UNIQUE, TCL_G_GRAPH, 0)                                                                \
    X(DEVICE, TCL_G_GRAPH, 0)                                                                \
    /* storage, kernel arguments and variables */                                            \
    X(BUFFER, TCL_G_BUFFER, -1)                                                              \
    X(PARAM, TCL_G_BUFFER, -1)                                                               \
    X(DEFINE_LOCAL, TCL_G_BUFFER, 0)                                                         \
    X(DEFINE_REG, TCL_G_BUFFER, 0)                                                           \
    X(DEFINE_VAR, TCL_G_SPECIAL, 0)                                                          \
    X(BIND, TCL_G_SPECIAL, 2)                                                                \
    X(SPECIAL, TCL_G_SPECIAL, 1)                                                             \
    /* tensor-graph only */                                                                  \
    X(CONTIGUOUS, TCL_G_GRAPH, 1)                                                            \
    X(DETACH, TCL_G_GRAPH, 1)                                                                \
    X(COPY, TCL_G_GRAPH, -1)                                                                 \
    X(BUFFERIZE, TCL_G_GRAPH, -1)                                                            \
    X(ASSIGN, TCL_G_GRAPH, 2)                                                                \
    X(ARANGE, TCL_G_GRAPH, 0)                                                                \
    /* movement */                                                                           \
    X(RESHAPE, TCL_G_MOVEMENT, 1)                                                            \
    X(PERMUTE, TCL_G_MOVEMENT, 1)                                                            \
    X(EXPAND, TCL_G_MOVEMENT, 1)                                                             \
    X(PAD, TCL_G_MOVEMENT, 1)                                                                \
    X(SHRINK, TCL_G_MOVEMENT, 1)                                                             \
    X(FLIP, TCL_G_MOVEMENT, 1)                                                               \
    /* reductions */                                                                         \
    X(REDUCE_AXIS, TCL_G_REDUCE, 1)                                                          \
    X(REDUCE, TCL_G_REDUCE, -1)                                                              \
    /* constants and vectors */                                                              \
    X(CONST, 0, 0)                                                                           \
    X(VCONST, TCL_G_VECTOR, 0)                                                               \
    X(VECTORIZE, TCL_G_VECTOR, -1)                                                           \
    X(GEP, TCL_G_VECTOR, 1)                                                                  \
    X(CAT, TCL_G_VECTOR, -1)                                                                 \
    /* memory */                                                                             \
    X(INDEX, TCL_G_MEMORY, -1)                                                               \
    X(LOAD, TCL_G_MEMORY, -1)                                                                \
    X(STORE, TCL_G_MEMORY, -1)                                                               \
    /* control flow */                                                                       \
    X(RANGE, TCL_G_CONTROL, -1)                                                              \
    X(END, TCL_G_CONTROL, -1)                                                                \
    X(IF, TCL_G_CONTROL, -1)                                                                 \
    X(ENDIF, TCL_G_CONTROL, 1)                                                               \
    X(BARRIER, TCL_G_CONTROL, -1)                                                            \
    /* tensor cores and code injection */                                                    \
    X(WMMA, 0, -1)                                                                           \
    X(SHUFFLE, 0, 1)                                                                         \
    X(CUSTOM, 0, -1)                                                                         \
    X(CUSTOMI, 0, -1)                                                                        \
    /* unary ALU */                                                                          \
    X(CAST, TCL_G_UNARY | TCL_G_ELEMENTWISE, 1)                                              \
    X(BITCAST, TCL_G_UNARY | TCL_G_ELEMENTWISE, 1)                                           \
    X(EXP2, TCL_G_UNARY_ALU, 1)                                                              \
    X(LOG2, TCL_G_UNARY_ALU, 1)                                                              \
    X(SIN, TCL_G_UNARY_ALU, 1)                                                               \
    X(COS, TCL_G_UNARY_ALU, 1)                                                               \
    X(SQRT, TCL_G_UNARY_ALU, 1)                                                              \
    X(RECIPROCAL, TCL_G_UNARY_ALU, 1)                                                        \
    X(NEG, TCL_G_UNARY_ALU, 1)                                                               \
    X(TRUNC, TCL_G_UNARY_ALU, 1)                                                             \
    /* float functions of the tensor graph (tcl.patterns.transcendental decomposes them) */  \
    X(EXP, TCL_G_UNARY_ALU, 1)                                                               \
    X(SIGMOID, TCL_G_UNARY_ALU, 1)                                                           \
    X(TANH, TCL_G_UNARY_ALU, 1)                                                              \
    X(SILU, TCL_G_UNARY_ALU, 1)                                                              \
    X(SOFTPLUS, TCL_G_UNARY_ALU, 1)                                                          \
    X(ELU, TCL_G_UNARY_ALU, 1)                                                               \
    /* binary ALU: IDIV/MOD truncate like C, FLOORDIV/FLOORMOD round down */                 \
    X(ADD, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE, 2)                      \
    X(SUB, TCL_G_BINARY_ALU, 2)                                                              \
    X(MUL, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE, 2)                      \
    X(FDIV, TCL_G_BINARY_ALU, 2)                                                             \
    X(IDIV, TCL_G_BINARY_ALU, 2)                                                             \
    X(MOD, TCL_G_BINARY_ALU, 2)                                                              \
    X(FLOORDIV, TCL_G_BINARY_ALU, 2)                                                         \
    X(FLOORMOD, TCL_G_BINARY_ALU, 2)                                                         \
    X(POW, TCL_G_BINARY_ALU, 2)                                                              \
    X(MAX, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE | TCL_G_IDEMPOTENT, 2)   \
    X(MIN, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE | TCL_G_IDEMPOTENT, 2)   \
    X(CMPLT, TCL_G_BINARY_ALU | TCL_G_COMPARISON, 2)                                         \
    X(CMPNE, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_COMPARISON, 2)                     \
    X(CMPEQ, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_COMPARISON, 2)                     \
    X(AND, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE | TCL_G_IDEMPOTENT, 2)   \
    X(OR, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE | TCL_G_IDEMPOTENT, 2)    \
    X(XOR, TCL_G_BINARY_ALU | TCL_G_COMMUTATIVE | TCL_G_ASSOCIATIVE, 2)                      \
    X(SHL, TCL_G_BINARY_ALU, 2)                                                              \
    X(SHR, TCL_G_BINARY_ALU, 2)                                                              \
    X(THREEFRY, TCL_G_BINARY_ALU, 2)                                                         \
    /* ternary ALU */                                                                        \
    X(WHERE, TCL_G_TERNARY_ALU, 3)                                                           \
    X(MULACC, TCL_G_TERNARY_ALU, 3)

typedef enum tcl_op {
#define X(name, groups, nsrc) TCL_OP_##name,
    TCL_OP_LIST(X)
#undef X
    TCL_OP_COUNT
} tcl_op;

typedef struct tcl_op_info {
    const char *name;
    uint32_t groups;
    int nsrc; /* fixed source count, or -1 when it varies */
} tcl_op_info;

const tcl_op_info *tcl_op_get(tcl_op op);
bool tcl_op_valid(int op);
bool tcl_op_in(tcl_op op, uint32_t group_bits);
/* Op id for a name such as "ADD", or -1. */
int tcl_op_from_name(const char *name);
/* Whether source k of a node of op only orders it (nothing is read from it): every source of
 * SINK, GROUP and END (END's last names the RANGE it closes), and all but the first of RANGE,
 * AFTER and REDUCE (the ranges it reduces over). Devices check that the values a kernel reads
 * are visible where it reads them. */
bool tcl_op_source_orders_only(tcl_op op, uint32_t k);

/* Group names and bits, for the Lua side: terminated by a NULL name (from TCL_OP_GROUP_LIST). */
typedef struct tcl_group_info { const char *name; uint32_t bit; } tcl_group_info;
extern const tcl_group_info tcl_op_groups[];

#endif
