/* api_check.c — checks every path of the embedding API (include/tclc.h), errors first: NULL
 * handles, bad counts, unknown functions, Lua errors, unconvertible results, files that do
 * not exist, the escape hatch. Layer: example/test (public API only, plus lua.h for
 * tclc_lua). Run by spec/embed/embed_spec.lua; by hand: <build>/examples/embed/tcl_embed_api_check
 * Prints one line per check and ends with "api_check: N passed, M failed"; exit status 1 if
 * any failed. Run it under the Sanitize build to check memory on the error paths too. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv, strdup, mkstemp, fdopen, close */

#include <limits.h>
#include <lua.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tclc.h"

typedef struct tally {
    int passed, failed;
} tally;

static void check(tally *t, int condition, const char *what) {
    if (condition) {
        t->passed++;
        printf("ok - %s\n", what);
    } else {
        t->failed++;
        printf("FAILED - %s\n", what);
    }
}

static int contains(const char *text, const char *part) {
    return text && strstr(text, part) != NULL;
}

static int is_string(const tclc_value *v, const char *expected) {
    return v->type == TCLC_TSTRING && v->as.string.len == strlen(expected) &&
           memcmp(v->as.string.data, expected, v->as.string.len) == 0;
}

static void check_null_handles(tally *t) {
    tclc_value v = tclc_integer(1), r;
    check(t, tclc_open(NULL) == TCLC_ERRARG, "tclc_open(NULL) is TCLC_ERRARG");
    check(t, contains(tclc_error(NULL), "NULL"), "tclc_error(NULL) explains the missing state");
    tclc_close(NULL);
    check(t, 1, "tclc_close(NULL) is a no-op");
    check(t, tclc_dostring(NULL, "x = 1", NULL) == TCLC_ERRARG, "tclc_dostring(NULL state)");
    check(t, tclc_dofile(NULL, "x.lua") == TCLC_ERRARG, "tclc_dofile(NULL state)");
    check(t, tclc_call(NULL, "f", &v, 1, &r, 1) == TCLC_ERRARG, "tclc_call(NULL state)");
    check(t, tclc_pcall(NULL, 0, 0) == TCLC_ERRARG, "tclc_pcall(NULL state)");
    check(t, tclc_lua(NULL) == NULL, "tclc_lua(NULL) is NULL");
    check(t, tclc_version() && tclc_version()[0] != '\0', "tclc_version() is set");
}

static void check_running_code(tally *t, tclc_state *S) {
    check(t, tclc_dostring(S, NULL, NULL) == TCLC_ERRARG, "tclc_dostring(NULL code)");
    check(t, contains(tclc_error(S), "code is NULL"), "... says the code is NULL");

    check(t, tclc_dostring(S, "x = = 1", "=snippet") == TCLC_ERRSYNTAX, "syntax error status");
    check(t, contains(tclc_error(S), "snippet:1:"), "... message names the chunk and line");

    check(t, tclc_dostring(S, "error('kaboom')", "=boom") == TCLC_ERRRUN, "runtime error status");
    check(t, contains(tclc_error(S), "boom:1: kaboom"), "... message has the Lua message");
    check(t, contains(tclc_error(S), "stack traceback:"), "... and a traceback");

    check(t, tclc_dostring(S, "error({})", NULL) == TCLC_ERRRUN, "error with a table value");
    check(t, contains(tclc_error(S), "(error object is a table value)"), "... is described");
    check(t, tclc_dostring(S, "error(setmetatable({}, {__tostring = function() return 'custom' end}))",
                           NULL) == TCLC_ERRRUN,
          "error with a __tostring object");
    check(t, contains(tclc_error(S), "custom"), "... uses its __tostring");

    check(t, tclc_dostring(S, "ran = (ran or 0) + 1", NULL) == TCLC_OK, "tclc_dostring runs code");
    check(t, strcmp(tclc_error(S), "") == 0, "tclc_error is \"\" after a success");
    check(t, tclc_dostring(S, "\x1bLua", NULL) == TCLC_ERRSYNTAX, "binary chunks are refused");

    check(t, tclc_dofile(S, "/nonexistent/dir/script.lua") == TCLC_ERRFILE, "missing file status");
    check(t, contains(tclc_error(S), "cannot open '/nonexistent/dir/script.lua'"),
          "... message names the file");

    /* a real file, with arguments as `...` */
    char path[] = "/tmp/tclc_api_check_XXXXXX";
    FILE *f = NULL;
    int fd = mkstemp(path);
    if (fd >= 0) f = fdopen(fd, "w");
    check(t, f != NULL, "temporary script created");
    if (!f) {
        if (fd >= 0) { /* created, but no stream on it: close and remove it here */
            close(fd);
            remove(path);
        }
        return;
    }
    fputs("local a, b = ...\nfile_result = a .. '+' .. tostring(b)\n", f);
    fclose(f);
    tclc_value args[2] = {tclc_string("first"), tclc_integer(2)};
    check(t, tclc_dofile_args(S, path, args, 2) == TCLC_OK, "tclc_dofile_args runs a file");
    tclc_value r;
    tclc_value one = tclc_integer(1);
    check(t, tclc_call(S, "tostring", &one, 1, &r, 1) == TCLC_OK && is_string(&r, "1"),
          "calling a C function (tostring)");
    tclc_dostring(S, "function get_file_result() return file_result end", NULL);
    check(t, tclc_call(S, "get_file_result", NULL, 0, &r, 1) == TCLC_OK && is_string(&r, "first+2"),
          "... the file saw its arguments as ...");
    check(t, tclc_dofile_args(S, path, NULL, 1) == TCLC_ERRARG, "dofile_args: NULL args, nargs 1");
    check(t, tclc_dofile_args(S, path, args, -1) == TCLC_ERRARG, "dofile_args: nargs -1");
    f = fopen(path, "w");
    if (f) {
        fputs("this is not lua\n", f);
        fclose(f);
    }
    check(t, tclc_dofile(S, path) == TCLC_ERRSYNTAX, "a file with a syntax error");
    remove(path);
}

static void check_call_arguments(tally *t, tclc_state *S) {
    tclc_value v = tclc_integer(1), r[2];
    tclc_dostring(S, "function id(...) return ... end", NULL);
    check(t, tclc_call(S, NULL, &v, 1, r, 1) == TCLC_ERRARG, "tclc_call(NULL name)");
    check(t, contains(tclc_error(S), "name is NULL"), "... says so");
    check(t, tclc_call(S, "id", &v, -1, r, 1) == TCLC_ERRARG, "tclc_call nargs < 0");
    check(t, contains(tclc_error(S), ">= 0"), "... says counts must be >= 0");
    check(t, tclc_call(S, "id", &v, 1, r, -1) == TCLC_ERRARG, "tclc_call nresults < 0");
    check(t, tclc_call(S, "id", NULL, 2, r, 1) == TCLC_ERRARG, "tclc_call NULL args, nargs 2");
    check(t, tclc_call(S, "id", &v, INT_MAX, r, 1) == TCLC_ERRARG, "tclc_call nargs INT_MAX");
    check(t, tclc_call(S, "id", &v, 1, r, INT_MAX) == TCLC_ERRARG && contains(tclc_error(S), "TCLC_MAX_VALUES"),
          "tclc_call nresults INT_MAX, before writing any result");
    check(t, tclc_dofile_args(S, "x.lua", &v, INT_MAX) == TCLC_ERRARG, "tclc_dofile_args nargs INT_MAX");
    check(t, tclc_call(S, "id", &v, 1, NULL, 1) == TCLC_ERRARG, "tclc_call NULL results");
    tclc_value bad = {.type = 99};
    check(t, tclc_call(S, "id", &bad, 1, r, 1) == TCLC_ERRARG, "unknown value type");
    check(t, contains(tclc_error(S), "args[0] has an unknown type (99)"), "... names the argument");
    tclc_value no_data = tclc_string(NULL);
    check(t, tclc_call(S, "id", &no_data, 1, r, 1) == TCLC_ERRARG, "string with NULL data");

    check(t, tclc_call(S, "no_such_function", NULL, 0, r, 1) == TCLC_ERRNAME, "unknown function");
    check(t, contains(tclc_error(S), "no global function 'no_such_function'"), "... names it");
    check(t, r[0].type == TCLC_TNIL, "... results set to nil");
    /* the host's names are echoed bounded: their start, an ellipsis and their length */
    size_t long_len = 400000;
    char *long_name = malloc(long_len + 1);
    if (long_name) {
        memset(long_name, 'f', long_len);
        long_name[long_len] = '\0';
        check(t, tclc_call(S, long_name, NULL, 0, r, 1) == TCLC_ERRNAME &&
                     contains(tclc_error(S), "no global function 'ffffffff") &&
                     contains(tclc_error(S), "ff... (400000 bytes)'") && strlen(tclc_error(S)) < 300,
              "a 400 KB function name is echoed bounded, with its length");
        long_name[1000] = '.';
        check(t, tclc_call(S, long_name, NULL, 0, r, 1) == TCLC_ERRNAME && contains(tclc_error(S), "... (400000 bytes)'") &&
                     contains(tclc_error(S), "... (1000 bytes)' is nil") && strlen(tclc_error(S)) < 400,
              "... and so is a path through nil, and its part");
        long_name[1000] = 'f';
        memcpy(long_name, "/nonexistent/", 13);
        check(t, tclc_dofile(S, long_name) == TCLC_ERRFILE && contains(tclc_error(S), "... (400000 bytes)'") &&
                     strlen(tclc_error(S)) < 300,
              "... and so is a file's path");
        free(long_name);
    }
    tclc_dostring(S, "a_number = 42", NULL);
    check(t, tclc_call(S, "a_number", NULL, 0, NULL, 0) == TCLC_ERRNAME, "global that is no function");
    check(t, contains(tclc_error(S), "global 'a_number' is a number, not a function"), "... says what");
    tclc_dostring(S, "callable = setmetatable({}, {__call = function(self, x) return x * 2 end})", NULL);
    check(t, tclc_call(S, "callable", &v, 1, r, 1) == TCLC_OK && r[0].type == TCLC_TINTEGER &&
                 r[0].as.integer == 2,
          "a table with __call can be called");

    check(t, tclc_call(S, "error", &(tclc_value){.type = TCLC_TSTRING, .as.string = {"oops", 4}}, 1,
                       NULL, 0) == TCLC_ERRRUN,
          "a function that raises");
    check(t, contains(tclc_error(S), "oops") && contains(tclc_error(S), "stack traceback:"),
          "... message and traceback");
}

static void check_call_values(tally *t, tclc_state *S) {
    static const char binary[] = {'a', '\0', 'b'};
    tclc_value args[6] = {tclc_nil(), tclc_boolean(7), tclc_integer(INT64_MAX), tclc_number(0.25),
                          tclc_lstring(binary, sizeof binary), tclc_string("")};
    tclc_value r[8];
    int status = tclc_call(S, "id", args, 6, r, 8);
    check(t, status == TCLC_OK, "round trip of every value kind");
    check(t, r[0].type == TCLC_TNIL, "... nil");
    check(t, r[1].type == TCLC_TBOOLEAN && r[1].as.boolean == 1, "... boolean (normalized to 1)");
    check(t, r[2].type == TCLC_TINTEGER && r[2].as.integer == INT64_MAX, "... integer");
    check(t, r[3].type == TCLC_TNUMBER && r[3].as.number == 0.25, "... number");
    check(t, r[4].type == TCLC_TSTRING && r[4].as.string.len == 3 &&
                 memcmp(r[4].as.string.data, binary, 3) == 0,
          "... string with an embedded NUL");
    check(t, is_string(&r[5], ""), "... empty string");
    check(t, r[6].type == TCLC_TNIL && r[7].type == TCLC_TNIL, "missing results are nil");
    check(t, tclc_call(S, "id", args, 6, r, 1) == TCLC_OK && r[0].type == TCLC_TNIL,
          "extra results are dropped");

    /* a result string must survive a full garbage collection until the next tclc_call */
    tclc_dostring(S, "function long_string() return string.rep('xy', 100) end", NULL);
    check(t, tclc_call(S, "long_string", NULL, 0, r, 1) == TCLC_OK, "a long string result");
    tclc_dostring(S, "collectgarbage() collectgarbage()", NULL);
    check(t, r[0].type == TCLC_TSTRING && r[0].as.string.len == 200 &&
                 memcmp(r[0].as.string.data, "xyxy", 4) == 0 && r[0].as.string.data[199] == 'y',
          "... still valid after a garbage collection");

    tclc_dostring(S, "function give_table() return 1, {} end", NULL);
    check(t, tclc_call(S, "give_table", NULL, 0, r, 2) == TCLC_ERRTYPE, "a table result");
    check(t, contains(tclc_error(S), "result 2 of 'give_table' is a table"), "... says which");
    check(t, r[0].type == TCLC_TNIL && r[1].type == TCLC_TNIL, "... every result set to nil");

    /* large counts: fine up to Lua's stack limit, a clean error beyond it */
    enum { MANY = 5000 };
    tclc_value *many = malloc(MANY * sizeof *many), *back = malloc(MANY * sizeof *back);
    if (many && back) {
        for (int i = 0; i < MANY; i++) many[i] = tclc_integer(i);
        check(t, tclc_call(S, "id", many, MANY, back, MANY) == TCLC_OK &&
                     back[MANY - 1].as.integer == MANY - 1,
              "5000 arguments and results");
    }
    free(many);
    free(back);
    enum { TOO_MANY = 2000000 };
    tclc_value *huge = calloc(TOO_MANY, sizeof *huge);
    if (huge) {
        check(t, tclc_call(S, "id", NULL, 0, huge, TOO_MANY) == TCLC_ERRARG &&
                     contains(tclc_error(S), "TCLC_MAX_VALUES"),
              "2,000,000 results: a clean error");
        check(t, tclc_call(S, "id", huge, TOO_MANY, NULL, 0) == TCLC_ERRARG &&
                     contains(tclc_error(S), "TCLC_MAX_VALUES"),
              "2,000,000 arguments: a clean error");
    }
    free(huge);

    /* a strict _G whose __index raises: the lookup error is reported, not fatal */
    tclc_dostring(S, "setmetatable(_G, {__index = function(_, k) error('undeclared ' .. k, 2) end})",
                  NULL);
    check(t, tclc_call(S, "undeclared_thing", NULL, 0, NULL, 0) == TCLC_ERRRUN &&
                 contains(tclc_error(S), "undeclared undeclared_thing"),
          "a raising _G __index during lookup");
    tclc_dostring(S, "setmetatable(_G, nil)", NULL);
}

static void check_escape_hatch(tally *t, tclc_state *S) {
    lua_State *L = tclc_lua(S);
    check(t, L != NULL, "tclc_lua gives the Lua state");
    int top = lua_gettop(L);
    lua_getglobal(L, "id");
    lua_pushinteger(L, 5);
    lua_pushinteger(L, 6);
    check(t, tclc_pcall(S, 2, TCLC_MULTRET) == TCLC_OK && lua_gettop(L) == top + 2 &&
                 lua_tointeger(L, -1) == 6,
          "tclc_pcall with TCLC_MULTRET");
    lua_settop(L, top);
    lua_getglobal(L, "error");
    lua_pushstring(L, "from pcall");
    check(t, tclc_pcall(S, 1, 0) == TCLC_ERRRUN && lua_gettop(L) == top &&
                 contains(tclc_error(S), "from pcall"),
          "tclc_pcall error: stack restored, message kept");
    check(t, tclc_pcall(S, top + 5, 0) == TCLC_ERRARG && lua_gettop(L) == top,
          "tclc_pcall with more arguments than the stack holds");
    check(t, tclc_pcall(S, -1, 0) == TCLC_ERRARG, "tclc_pcall nargs < 0");
    /* counts near INT_MAX must be refused without overflowing (1 + nresults once wrapped) */
    lua_getglobal(L, "id");
    check(t, tclc_pcall(S, 0, INT_MAX) == TCLC_ERRARG && lua_gettop(L) == top + 1 &&
                 contains(tclc_error(S), "TCLC_MAX_VALUES"),
          "tclc_pcall nresults INT_MAX is refused, stack untouched");
    check(t, tclc_pcall(S, INT_MAX, 0) == TCLC_ERRARG && lua_gettop(L) == top + 1,
          "tclc_pcall nargs INT_MAX is refused, stack untouched");
    lua_settop(L, top);
    lua_getglobal(L, "tcl");
    check(t, lua_istable(L, -1), "global tcl is a table");
    lua_pop(L, 1);
}

static void check_states_are_separate(tally *t, tclc_state *S) {
    tclc_state *other;
    check(t, tclc_open(&other) == TCLC_OK, "a second state opens");
    tclc_dostring(S, "shared_name = 'first'", NULL);
    tclc_value r;
    tclc_dostring(other, "function get() return shared_name end", NULL);
    check(t, tclc_call(other, "get", NULL, 0, &r, 1) == TCLC_OK && r.type == TCLC_TNIL,
          "states do not share globals");
    tclc_close(other);
}

static void check_missing_lua_files(tally *t) {
    /* the current name wins over the old one (TCLC_LUA_DIR): a test runner may have set it */
    const char *set = getenv("TCL_LUA_DIR");
    char *saved = set ? strdup(set) : NULL;
    setenv("TCL_LUA_DIR", "/nonexistent/tclc/lua", 1);
    tclc_state *S;
    int status = tclc_open(&S);
    if (saved) {
        setenv("TCL_LUA_DIR", saved, 1);
        free(saved);
    } else {
        unsetenv("TCL_LUA_DIR");
    }
    check(t, status != TCLC_OK && S != NULL, "TCL_LUA_DIR without Lua files: tclc_open fails");
    check(t, contains(tclc_error(S), "cannot load the tcl module from /nonexistent/tclc/lua"),
          "... and says where it looked");
    check(t, tclc_dostring(S, "x = 1", NULL) == TCLC_OK, "... the state still runs plain Lua");
    tclc_close(S);
}

int main(void) {
    tally t = {0, 0};
    check_null_handles(&t);

    tclc_state *S;
    int status = tclc_open(&S);
    check(&t, status == TCLC_OK, "tclc_open");
    if (status != TCLC_OK) {
        printf("tclc_open: %s\n", tclc_error(S));
        tclc_close(S);
    } else {
        check_running_code(&t, S);
        check_call_arguments(&t, S);
        check_call_values(&t, S);
        check_escape_hatch(&t, S);
        check_states_are_separate(&t, S);
        tclc_close(S);
    }
    check_missing_lua_files(&t);

    printf("api_check: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed == 0 ? 0 : 1;
}
