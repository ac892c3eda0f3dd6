/* lua_alu.c — Lua binding of the scalar ALU (module "tcl.alu"). Layer: core.
 * Lets Lua code and specs evaluate ops exactly as constant folding and the EMU device do.
 *
 * Values cross as Lua values: integers for int/index/unsigned dtypes (uint64 above
 * INT64_MAX as the two's complement negative integer, like CONST args), floats for float
 * dtypes, booleans for bool. An operand may also be written {value, dtype} to give its
 * dtype explicitly; otherwise its dtype is the natural one of the Lua value (integer ->
 * int64, float -> float64, boolean -> bool) and it is first converted to the dtype the op
 * needs, with CAST's rules.
 *
 *   exec(op, dtype, a[, b[, c]])  dtype: the operands' dtype and the result's, except for
 *       comparisons (result boolean), WHERE (a is the condition) and CAST/BITCAST (dtype is
 *       the target; a keeps its own dtype). Returns the result, or nil plus a reason when
 *       the result is undefined (integer division by zero, ...). Raises an error naming op
 *       and dtype when the op is not an ALU op or does not take these operands.
 *   cast(value, dtype)            CAST's rules; never fails (float -> int saturates).
 *   bits(value, dtype)            storage bits of value converted to dtype.
 *   from_bits(bits, dtype)        the value whose storage bits are bits. */
#include "lua_alu.h"

#include <lauxlib.h>

#include "alu.h"
#include "lua_core.h"
#include "ops.h"

/* The Lua value at idx as a scalar of its natural dtype, or of the dtype given in a
 * {value, dtype} pair. */
static tcl_scalar check_value(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    bool has_explicit_dtype = lua_type(L, idx) == LUA_TTABLE;
    tcl_dtype explicit_dtype = TCL_VOID;
    if (has_explicit_dtype) {
        if (lua_rawgeti(L, idx, 2) == LUA_TNIL) luaL_argerror(L, idx, "{value, dtype} pair without a dtype");
        explicit_dtype = tcl_lua_check_dtype(L, lua_gettop(L));
        lua_rawgeti(L, idx, 1);
        lua_replace(L, -2);
    } else {
        lua_pushvalue(L, idx);
    }
    tcl_scalar s;
    switch (lua_type(L, -1)) {
    case LUA_TBOOLEAN: s = tcl_scalar_of_bool(lua_toboolean(L, -1)); break;
    case LUA_TNUMBER:
        s = lua_isinteger(L, -1) ? tcl_scalar_of_int(lua_tointeger(L, -1)) : tcl_scalar_of_float(lua_tonumber(L, -1));
        break;
    default:
        luaL_typeerror(L, idx, "number, boolean or {value, dtype}");
        return tcl_scalar_of_bool(false); /* not reached */
    }
    lua_pop(L, 1);
    if (has_explicit_dtype) {
        s = tcl_scalar_cast(s, explicit_dtype);
        if (s.dtype == TCL_VOID) luaL_argerror(L, idx, "a value cannot have dtype void");
    }
    return s;
}

/* The operand at idx converted to dtype, unless it names its own dtype. */
static tcl_scalar check_operand(lua_State *L, int idx, tcl_dtype dtype) {
    bool explicit_dtype = lua_type(L, idx) == LUA_TTABLE;
    tcl_scalar s = check_value(L, idx);
    return explicit_dtype ? s : tcl_scalar_cast(s, dtype);
}

static void push_scalar(lua_State *L, tcl_scalar s) {
    tcl_arg a = tcl_scalar_to_arg(s);
    tcl_lua_push_arg(L, &a);
}

static const char *dtype_name(tcl_dtype dtype) { return tcl_dtype_get(dtype)->name; }

static int l_exec(lua_State *L) {
    tcl_op op = tcl_lua_check_op(L, 1);
    tcl_dtype dtype = tcl_lua_check_dtype(L, 2);
    const tcl_op_info *info = tcl_op_get(op);
    if (!(info->groups & (TCL_G_UNARY | TCL_G_BINARY | TCL_G_TERNARY)))
        return luaL_error(L, "alu.exec: %s is not an ALU op", info->name);
    int nsrc = info->nsrc, given = lua_gettop(L) - 2;
    while (given > 0 && lua_isnil(L, 2 + given)) given--;
    if (given != nsrc)
        return luaL_error(L, "alu.exec: %s takes %d operand%s, got %d", info->name, nsrc, nsrc == 1 ? "" : "s", given);
    for (int i = 1; i <= nsrc; i++)
        if (lua_isnil(L, 2 + i)) return luaL_error(L, "alu.exec: %s operand %d is nil", info->name, i);

    bool comparison = (info->groups & TCL_G_COMPARISON) != 0;
    tcl_scalar src[3];
    for (int i = 0; i < nsrc; i++) {
        tcl_dtype operand_dtype = dtype;
        if (op == TCL_OP_WHERE && i == 0) operand_dtype = TCL_BOOL;
        if (op == TCL_OP_CAST || op == TCL_OP_BITCAST) src[i] = check_value(L, 3 + i);
        else src[i] = check_operand(L, 3 + i, operand_dtype);
    }
    tcl_dtype result_dtype = comparison ? TCL_BOOL : dtype;
    tcl_scalar out;
    tcl_alu_result status = tcl_alu_exec(op, result_dtype, src, nsrc, &out);
    if (status == TCL_ALU_INVALID) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        lua_pushfstring(L, "alu.exec: %s is not defined for dtype %s (operands:", info->name, dtype_name(dtype));
        luaL_addvalue(&b);
        for (int i = 0; i < nsrc; i++) {
            lua_pushfstring(L, " %s", dtype_name(src[i].dtype));
            luaL_addvalue(&b);
        }
        luaL_addstring(&b, ")");
        luaL_pushresult(&b);
        return lua_error(L);
    }
    if (status == TCL_ALU_UNDEFINED) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s on %s: %s", info->name, dtype_name(src[0].dtype), tcl_alu_undefined_reason(op, src, nsrc));
        return 2;
    }
    push_scalar(L, out);
    return 1;
}

static tcl_dtype check_value_dtype(lua_State *L, int idx) {
    tcl_dtype dtype = tcl_lua_check_dtype(L, idx);
    if (dtype == TCL_VOID) luaL_argerror(L, idx, "void has no values");
    return dtype;
}

static int l_cast(lua_State *L) {
    tcl_dtype dtype = check_value_dtype(L, 2);
    push_scalar(L, tcl_scalar_cast(check_value(L, 1), dtype));
    return 1;
}

static int l_bits(lua_State *L) {
    tcl_dtype dtype = check_value_dtype(L, 2);
    uint64_t bits = tcl_scalar_bits(tcl_scalar_cast(check_value(L, 1), dtype));
    tcl_arg as_int = tcl_scalar_to_arg(tcl_scalar_of_uint(bits)); /* 64-bit patterns above INT64_MAX become negative */
    lua_pushinteger(L, as_int.v.i);
    return 1;
}

static int l_from_bits(lua_State *L) {
    lua_Integer bits = luaL_checkinteger(L, 1);
    tcl_dtype dtype = check_value_dtype(L, 2);
    unsigned width = 8u * tcl_dtype_get(dtype)->itemsize;
    if (width < 64 && (bits < 0 || (uint64_t)bits >> width))
        return luaL_argerror(L, 1, lua_pushfstring(L, "%I does not fit the %d bits of %s", bits, (int)width,
                                                    dtype_name(dtype)));
    push_scalar(L, tcl_scalar_from_bits((uint64_t)bits, dtype));
    return 1;
}

int luaopen_tcl_alu(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"exec", l_exec}, {"cast", l_cast}, {"bits", l_bits}, {"from_bits", l_from_bits}, {NULL, NULL},
    };
    luaL_newlib(L, functions);
    return 1;
}
