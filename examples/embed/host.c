/* host.c — a small program that embeds tcl: the file to copy when you put tcl inside your own
 * application. Layer: example (uses only the public API, include/tclc.h).
 *
 * It opens a state, defines Lua functions from a string, calls one with numbers and a string
 * and prints its results, then calls one that raises a Lua error and prints the message that
 * comes back. Exit status 0 when everything behaved as expected, 1 otherwise.
 *
 * Build it like this file's CMakeLists.txt does (link the tclc library), or outside this tree:
 *     cc host.c $(pkg-config --cflags --libs tclc) -o host */
#include <stdio.h>
#include <string.h>

#include "tclc.h"

/* Lua code the host brings along. In a real program this could be a file (tclc_dofile). */
static const char host_lua_code[] =
    "-- scale(x, factor, label) -> x * factor, a description, the dtype of a tcl node\n"
    "function scale(x, factor, label)\n"
    "  local node = tcl.uop('CONST', tcl.float32, nil, x * factor)\n"
    "  return x * factor, label .. ' = ' .. tostring(x * factor), tostring(node.dtype)\n"
    "end\n"
    "\n"
    "-- refuse(why) always fails: shows how a Lua error reaches the host\n"
    "function refuse(why)\n"
    "  error('refused: ' .. why)\n"
    "end\n";

int main(void) {
    int ok = 1;

    /* 1. Open a state. Even on failure S is set (unless memory ran out), so that the message
     *    can be read; close it in every case. */
    tclc_state *S;
    if (tclc_open(&S) != TCLC_OK) {
        fprintf(stderr, "host: cannot open tcl: %s\n", tclc_error(S));
        tclc_close(S);
        return 1;
    }
    printf("tcl %s opened\n", tclc_version());

    /* 2. Run Lua code. The chunk name ("=host") is how error messages will name it. */
    if (tclc_dostring(S, host_lua_code, "=host") != TCLC_OK) {
        fprintf(stderr, "host: %s\n", tclc_error(S));
        tclc_close(S);
        return 1;
    }

    /* 3. Call a Lua function with C values; read exactly 3 results. */
    tclc_value args[3] = {tclc_integer(6), tclc_number(1.5), tclc_string("area")};
    tclc_value results[3];
    if (tclc_call(S, "scale", args, 3, results, 3) != TCLC_OK) {
        fprintf(stderr, "host: scale failed: %s\n", tclc_error(S));
        tclc_close(S);
        return 1;
    }
    /* 6 * 1.5 is a float in Lua, so the first result is a TCLC_TNUMBER. Result strings
     * belong to S and stay valid until the next tclc_call: print (or copy) them now. */
    if (results[0].type == TCLC_TNUMBER)
        printf("scale result: %g\n", results[0].as.number);
    else
        ok = 0;
    if (results[1].type == TCLC_TSTRING && results[2].type == TCLC_TSTRING) {
        printf("scale text: %.*s\n", (int)results[1].as.string.len, results[1].as.string.data);
        printf("scale dtype: %.*s\n", (int)results[2].as.string.len, results[2].as.string.data);
    } else {
        ok = 0;
    }
    ok = ok && results[0].as.number == 9.0 && strcmp(results[2].as.string.data, "float32") == 0;

    /* 4. Call a function that raises an error: the status says so and tclc_error gives the
     *    message, with the Lua traceback. */
    tclc_value why = tclc_string("no tensors today");
    int status = tclc_call(S, "refuse", &why, 1, NULL, 0);
    if (status == TCLC_ERRRUN) {
        printf("refuse failed as expected: %s\n", tclc_error(S));
        ok = ok && strstr(tclc_error(S), "refused: no tensors today") != NULL;
    } else {
        printf("refuse should have failed with TCLC_ERRRUN, got status %d\n", status);
        ok = 0;
    }

    /* 5. Close: frees the Lua state and everything tcl allocated in it. */
    tclc_close(S);
    printf("%s\n", ok ? "host: all as expected" : "host: something was not as expected");
    return ok ? 0 : 1;
}
