/* ops.h — the op set of the UOp IR and its groups. Layer: core.
 * One X-macro list is the single truth for the enum, the names and the group bits. */
#ifndef TCLC_OPS_H
#define TCLC_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* Group bits an op can carry. */
enum {
    TCL_G_UNARY = 1u << 0,
    TCL_G_BINARY = 1u << 1,
    TCL_G_TERNARY = 1u << 2,
    TCL_G_ALU = 1u << 3,         /* unary|binary|ternary arithmetic */
    TCL_G_COMMUTATIVE = 1u << 4,
    TCL_G_ASSOCIATIVE = 1u << 5,
    TCL_G_IDEMPOTENT = 1u << 6,  /* op(x, x) == x */
    TCL_G_COMPARISON = 1u << 7,
    TCL_G_MOVEMENT = 1u << 8,
    TCL_G_BUFFER = 1u << 9,      /* defines storage or a kernel argument */
    TCL_G_MEMORY = 1u << 10,     /* index/load/store */
    TCL_G_CONTROL = 1u << 11,    /* loops, ifs, barriers */
    TCL_G_GRAPH = 1u << 12,      /* structure that is never rendered as an instruction */
    TCL_G_ELEMENTWISE = 1u << 13,/* ALU plus casts */
    TCL_G_REDUCE = 1u << 14,
    TCL_G_VECTOR = 1u << 15,
    TCL_G_SPECIAL = 1u << 16,    /* thread indices, variables */
};

#define U TCL_G_UNARY | TCL_G_ALU | TCL_G_ELEMENTWISE
#define BI TCL_G_BINARY | TCL_G_ALU | TCL_G_ELEMENTWISE
#define CM TCL_G_COMMUTATIVE
#define AS TCL_G_ASSOCIATIVE
#define ID TCL_G_IDEMPOTENT
#define CMP TCL_G_COMPARISON

/* X(name, group bits, number of sources or -1 for any) */
#define TCL_OP_LIST(X)                                                           \
    /* graph structure */                                                        \
    X(SINK, TCL_G_GRAPH, -1)                                                     \
    X(GROUP, TCL_G_GRAPH, -1)                                                    \
    X(AFTER, TCL_G_GRAPH, -1)                                                    \
    X(NOOP, TCL_G_GRAPH, -1)                                                     \
    X(KERNEL, TCL_G_GRAPH, -1)                                                   \
    X(CALL, TCL_G_GRAPH, -1)                                                     \
    X(PROGRAM, TCL_G_GRAPH, -1)                                                  \
    X(LINEAR, TCL_G_GRAPH, -1)                                                   \
    X(SOURCE, TCL_G_GRAPH, -1)                                                   \
    X(BINARY, TCL_G_GRAPH, -1)                                                   \
    X(UNIQUE, TCL_G_GRAPH, 0)                                                    \
    X(DEVICE, TCL_G_GRAPH, 0)                                                    \
    /* storage, kernel arguments and variables */                                \
    X(BUFFER, TCL_G_BUFFER, -1)                                                  \
    X(PARAM, TCL_G_BUFFER, -1)                                                   \
    X(DEFINE_LOCAL, TCL_G_BUFFER, 0)                                             \
    X(DEFINE_REG, TCL_G_BUFFER, 0)                                               \
    X(DEFINE_VAR, TCL_G_SPECIAL, 0)                                              \
    X(BIND, TCL_G_SPECIAL, 2)                                                    \
    X(SPECIAL, TCL_G_SPECIAL, 1)                                                 \
    /* tensor-graph only */                                                      \
    X(CONTIGUOUS, TCL_G_GRAPH, 1)                                                \
    X(DETACH, TCL_G_GRAPH, 1)                                                    \
    X(COPY, TCL_G_GRAPH, -1)                                                     \
    X(BUFFERIZE, TCL_G_GRAPH, -1)                                                \
    X(ASSIGN, TCL_G_GRAPH, 2)                                                    \
    /* movement */                                                               \
    X(RESHAPE, TCL_G_MOVEMENT, 1)                                                \
    X(PERMUTE, TCL_G_MOVEMENT, 1)                                                \
    X(EXPAND, TCL_G_MOVEMENT, 1)                                                 \
    X(PAD, TCL_G_MOVEMENT, 1)                                                    \
    X(SHRINK, TCL_G_MOVEMENT, 1)                                                 \
    X(FLIP, TCL_G_MOVEMENT, 1)                                                   \
    /* reductions */                                                             \
    X(REDUCE_AXIS, TCL_G_REDUCE, 1)                                              \
    X(REDUCE, TCL_G_REDUCE, -1)                                                  \
    /* constants and vectors */                                                  \
    X(CONST, 0, 0)                                                               \
    X(VCONST, TCL_G_VECTOR, 0)                                                   \
    X(VECTORIZE, TCL_G_VECTOR, -1)                                               \
    X(GEP, TCL_G_VECTOR, 1)                                                      \
    X(CAT, TCL_G_VECTOR, -1)                                                     \
    /* memory */                                                                 \
    X(INDEX, TCL_G_MEMORY, -1)                                                   \
    X(LOAD, TCL_G_MEMORY, -1)                                                    \
    X(STORE, TCL_G_MEMORY, -1)                                                   \
    /* control flow */                                                           \
    X(RANGE, TCL_G_CONTROL, -1)                                                  \
    X(END, TCL_G_CONTROL, -1)                                                    \
    X(IF, TCL_G_CONTROL, -1)                                                     \
    X(ENDIF, TCL_G_CONTROL, 1)                                                   \
    X(BARRIER, TCL_G_CONTROL, -1)                                                \
    /* tensor cores and code injection */                                        \
    X(WMMA, 0, 3)                                                                \
    X(CUSTOM, 0, -1)                                                             \
    X(CUSTOMI, 0, -1)                                                            \
    /* unary ALU */                                                              \
    X(CAST, TCL_G_UNARY | TCL_G_ELEMENTWISE, 1)                                  \
    X(BITCAST, TCL_G_UNARY | TCL_G_ELEMENTWISE, 1)                               \
    X(EXP2, U, 1)                                                                \
    X(LOG2, U, 1)                                                                \
    X(SIN, U, 1)                                                                 \
    X(SQRT, U, 1)                                                                \
    X(RECIPROCAL, U, 1)                                                          \
    X(NEG, U, 1)                                                                 \
    X(TRUNC, U, 1)                                                               \
    /* binary ALU: IDIV/MOD truncate like C, FLOORDIV/FLOORMOD round down */     \
    X(ADD, BI | CM | AS, 2)                                                      \
    X(SUB, BI, 2)                                                                \
    X(MUL, BI | CM | AS, 2)                                                      \
    X(FDIV, BI, 2)                                                               \
    X(IDIV, BI, 2)                                                               \
    X(MOD, BI, 2)                                                                \
    X(FLOORDIV, BI, 2)                                                           \
    X(FLOORMOD, BI, 2)                                                           \
    X(POW, BI, 2)                                                                \
    X(MAX, BI | CM | AS | ID, 2)                                                 \
    X(MIN, BI | CM | AS | ID, 2)                                                 \
    X(CMPLT, BI | CMP, 2)                                                        \
    X(CMPNE, BI | CM | CMP, 2)                                                   \
    X(CMPEQ, BI | CM | CMP, 2)                                                   \
    X(AND, BI | CM | AS | ID, 2)                                                 \
    X(OR, BI | CM | AS | ID, 2)                                                  \
    X(XOR, BI | CM | AS, 2)                                                      \
    X(SHL, BI, 2)                                                                \
    X(SHR, BI, 2)                                                                \
    X(THREEFRY, BI, 2)                                                           \
    /* ternary ALU */                                                            \
    X(WHERE, TCL_G_TERNARY | TCL_G_ALU | TCL_G_ELEMENTWISE, 3)                   \
    X(MULACC, TCL_G_TERNARY | TCL_G_ALU | TCL_G_ELEMENTWISE, 3)

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

/* Group names and bits, for the Lua side: terminated by a NULL name. */
typedef struct tcl_group_info { const char *name; uint32_t bit; } tcl_group_info;
extern const tcl_group_info tcl_op_groups[];

#undef U
#undef BI
#undef CM
#undef AS
#undef ID
#undef CMP
#endif
