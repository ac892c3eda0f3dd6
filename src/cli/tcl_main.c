/* tcl_main.c — the `tcl` program: runs scripts, -e code, or an interactive prompt with the
 * tcl tensor compiler loaded; `tcl export ...` and `tcl run ...` hand their arguments to the Lua
 * commands tcl.export.cli and tcl.onnx.cli. Layer: cli, a thin user of the embedding API
 * (include/tclc.h); it touches the Lua state (tclc_lua) only to set `arg`, to drive the prompt
 * and to call those commands.
 * Command-line behaviour follows the stock `lua` program, so scripts see the same `arg`. */
#define _POSIX_C_SOURCE 200809L /* getline, isatty, fileno */

#include <lauxlib.h>
#include <lua.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef TCLC_HAVE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

#include "tclc.h"

#define PROGRAM_NAME "tcl"

/* Exit statuses. */
enum { EXIT_OK = 0, EXIT_LUA_ERROR = 1, EXIT_USAGE = 2 };

static const char usage_line[] = "usage: " PROGRAM_NAME " [options] [script [args...]]";

static void print_help(void) {
    printf("%s\n"
           "Runs Lua with the tcl tensor compiler loaded (globals `tcl` and `Tensor`).\n"
           "\n"
           "  script [args]  run the file; it gets args as `...` and in the table `arg`\n"
           "  -              run the script read from standard input\n"
           "  -e CODE        run CODE (may be repeated; runs before the script)\n"
           "  -i             enter the interactive prompt after the script or -e code\n"
           "  -v             print the version\n"
           "  -h, --help     print this help\n"
           "  --             stop handling options\n"
           "\n"
           "  export model.lua -o DIR [--name NAME] [--weights embed|safetensors] [--threads N]\n"
           "         [--batch-sizes B1,B2,...]\n"
           "                 export the script's model as C sources and object code that build\n"
           "                 with cc alone (see '%s export --help'); a script named 'export'\n"
           "                 runs as ./export\n"
           "  run model.onnx [--input NAME=FILE.npy ...] [--output-dir DIR]\n"
           "                 run an ONNX model; print its outputs or save them as .npy files\n"
           "                 (see '%s run --help'); a script named 'run' runs as ./run\n"
           "\n"
           "With no script and no -e, tcl starts the interactive prompt.\n"
           "TCL_LUA_DIR (old name TCLC_LUA_DIR) overrides where tcl's Lua files are found.\n",
           usage_line, PROGRAM_NAME, PROGRAM_NAME);
}

/* A usage error: the reason, then how to get help, on stderr. */
static int usage_error(const char *reason) {
    fprintf(stderr, "%s: %s\n%s\nTry '%s --help' for more information.\n", PROGRAM_NAME, reason,
            usage_line, PROGRAM_NAME);
    return EXIT_USAGE;
}

/* A rank of a distributed job (mpirun -np N tcl script.lua) whose script failed ends the whole
 * job at once (tcl.distributed.abort_after_error): otherwise the others would wait in their
 * next collective until its timeout, and this rank in MPI's finalize. Nothing happens when
 * the script never used tcl.distributed or runs alone. */
static void end_distributed_job(tclc_state *S) {
    static const char code[] = "local d = package.loaded['tcl.distributed'] if d then d.abort_after_error() end";
    (void)tclc_dostring(S, code, "=(tcl.distributed)");
}

static int lua_error_exit(tclc_state *S) {
    fprintf(stderr, "%s: %s\n", PROGRAM_NAME, tclc_error(S));
    fflush(stderr);
    end_distributed_job(S);
    return EXIT_LUA_ERROR;
}

/* ---- command line ---- */

typedef struct command_line {
    int argc;
    char **argv;
    int script_index; /* argv index of the script, 0 when there is none */
    bool script_from_stdin;
    bool has_e, has_i, has_v, has_help;
} command_line;

/* Reads the options (everything before the script). Returns EXIT_OK or EXIT_USAGE after
 * printing why. -e's code is not run here: parse first, so a bad option runs nothing. */
static int parse_command_line(int argc, char **argv, command_line *cl) {
    *cl = (command_line){.argc = argc, .argv = argv};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || strcmp(a, "-") == 0) { /* the script (or "-": stdin) */
            cl->script_index = i;
            cl->script_from_stdin = strcmp(a, "-") == 0;
            return EXIT_OK;
        }
        if (strcmp(a, "--") == 0) { /* the next argument is the script, even if it starts with '-' */
            if (i + 1 < argc) cl->script_index = i + 1;
            return EXIT_OK;
        }
        if (strncmp(a, "-e", 2) == 0) { /* "-e CODE" or "-eCODE" */
            if (a[2] == '\0') {
                if (i + 1 >= argc) return usage_error("'-e' needs an argument");
                i++; /* the code */
            }
            cl->has_e = true;
        } else if (strcmp(a, "-i") == 0) {
            cl->has_i = true;
        } else if (strcmp(a, "-v") == 0) {
            cl->has_v = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cl->has_help = true;
        } else {
            char reason[256];
            snprintf(reason, sizeof reason, "unrecognized option '%.200s'", a);
            return usage_error(reason);
        }
    }
    return EXIT_OK;
}

/* Builds the global `arg` as stock lua does: arg[0] is the script, arg[1..] its arguments,
 * negative indices the interpreter and its options (arg[-1] the last of them). Without a
 * script every argument gets a negative index. Runs under tclc_pcall. */
static int set_arg_table(lua_State *L) {
    const command_line *cl = lua_touserdata(L, 1);
    int script = cl->script_index ? cl->script_index : cl->argc;
    int positive = cl->argc - script - 1;
    lua_createtable(L, positive > 0 ? positive : 0, script + 1);
    for (int i = 0; i < cl->argc; i++) {
        lua_pushstring(L, cl->argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
    return 0;
}

/* Runs a C function (with one light userdata argument) in protected mode on S. */
static int run_protected(tclc_state *S, lua_CFunction f, void *data) {
    lua_State *L = tclc_lua(S);
    if (!lua_checkstack(L, 2)) return TCLC_ERRMEM;
    lua_pushcfunction(L, f);
    lua_pushlightuserdata(L, data);
    return tclc_pcall(S, 1, 0);
}

/* Runs each -e in order. Returns EXIT_OK or EXIT_LUA_ERROR after reporting. */
static int run_e_options(tclc_state *S, const command_line *cl) {
    int end = cl->script_index ? cl->script_index : cl->argc;
    for (int i = 1; i < end; i++) {
        const char *a = cl->argv[i];
        if (strcmp(a, "--") == 0) break;
        if (strncmp(a, "-e", 2) != 0) continue;
        const char *code = a[2] ? a + 2 : cl->argv[++i];
        if (tclc_dostring(S, code, "=(command line)") != TCLC_OK) return lua_error_exit(S);
    }
    return EXIT_OK;
}

/* Runs the script with its arguments as `...`. */
static int run_script(tclc_state *S, const command_line *cl) {
    int first_arg = cl->script_index + 1;
    int nargs = cl->argc - first_arg;
    tclc_value *args = NULL;
    if (nargs > 0) {
        args = malloc((size_t)nargs * sizeof *args);
        if (!args) {
            fprintf(stderr, "%s: not enough memory\n", PROGRAM_NAME);
            return EXIT_LUA_ERROR;
        }
        for (int i = 0; i < nargs; i++) args[i] = tclc_string(cl->argv[first_arg + i]);
    }
    const char *path = cl->script_from_stdin ? NULL : cl->argv[cl->script_index];
    int status = tclc_dofile_args(S, path, args, nargs);
    free(args);
    if (status == TCLC_ERRFILE) return usage_error(tclc_error(S));
    if (status != TCLC_OK) return lua_error_exit(S);
    return EXIT_OK;
}

/* ---- interactive prompt ---- */

typedef struct line_reader {
    bool interactive; /* stdin is a terminal: show prompts */
} line_reader;

/* One line without its newline, malloc'd (the caller frees it), or NULL at end of input. */
static char *read_line(const line_reader *reader, const char *prompt) {
#ifdef TCLC_HAVE_READLINE
    if (reader->interactive) return readline(prompt);
#endif
    if (reader->interactive) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
    if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
    return line;
}

static void remember_line(const line_reader *reader, const char *text) {
#ifdef TCLC_HAVE_READLINE
    if (reader->interactive && text[0]) add_history(text);
#else
    (void)reader;
    (void)text;
#endif
}

/* The pending input, kept after a "return " prefix so that both ways of compiling it (as an
 * expression to print, then as a statement) read the same buffer. */
#define RETURN_PREFIX "return "
#define RETURN_PREFIX_LEN (sizeof RETURN_PREFIX - 1)

typedef struct input_buffer {
    char *text; /* "return " + input, NUL-terminated */
    size_t len;
    size_t cap;
} input_buffer;

static bool input_append(input_buffer *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *grown = realloc(b->text, cap);
        if (!grown) return false;
        b->text = grown;
        b->cap = cap;
    }
    memcpy(b->text + b->len, s, n);
    b->len += n;
    b->text[b->len] = '\0';
    return true;
}

static bool input_start(input_buffer *b, const char *line) {
    b->len = 0;
    return input_append(b, RETURN_PREFIX, RETURN_PREFIX_LEN) && input_append(b, line, strlen(line));
}

enum { COMPILED, INCOMPLETE, SYNTAX_ERROR };

/* Compiles the input, as `return <input>` first. COMPILED leaves the chunk on the stack,
 * SYNTAX_ERROR and INCOMPLETE (the input stops in the middle of a statement) the message. */
static int compile_input(lua_State *L, const input_buffer *b) {
    if (luaL_loadbufferx(L, b->text, b->len, "=stdin", "t") == LUA_OK) return COMPILED;
    lua_pop(L, 1);
    const char *statement = b->text + RETURN_PREFIX_LEN;
    size_t statement_len = b->len - RETURN_PREFIX_LEN;
    int status = luaL_loadbufferx(L, statement, statement_len, "=stdin", "t");
    if (status == LUA_OK) return COMPILED;
    size_t msg_len;
    const char *msg = lua_tolstring(L, -1, &msg_len);
    static const char eof_mark[] = "<eof>"; /* how Lua's parser names the end of the input */
    size_t mark_len = sizeof eof_mark - 1;
    if (status == LUA_ERRSYNTAX && msg && msg_len >= mark_len &&
        strcmp(msg + msg_len - mark_len, eof_mark) == 0)
        return INCOMPLETE;
    return SYNTAX_ERROR;
}

/* Calls the global print with its arguments (the values a chunk returned). Runs under
 * tclc_pcall, so a failing __tostring is reported, not fatal. */
static int print_values(lua_State *L) {
    int n = lua_gettop(L);
    lua_getglobal(L, "print");
    lua_insert(L, 1);
    lua_call(L, n, 0);
    return 0;
}

/* Runs the compiled chunk on top of the stack and prints what it returns. */
static void run_and_print(tclc_state *S) {
    lua_State *L = tclc_lua(S);
    int base = lua_gettop(L) - 1; /* below the chunk */
    if (tclc_pcall(S, 0, TCLC_MULTRET) != TCLC_OK) {
        fprintf(stderr, "%s\n", tclc_error(S));
        fflush(stderr);
        return;
    }
    int nresults = lua_gettop(L) - base;
    if (nresults > 0) {
        if (!lua_checkstack(L, 1)) {
            lua_settop(L, base);
            fprintf(stderr, "%s: too many results to print\n", PROGRAM_NAME);
            return;
        }
        lua_pushcfunction(L, print_values);
        lua_insert(L, base + 1);
        if (tclc_pcall(S, nresults, 0) != TCLC_OK) fprintf(stderr, "%s\n", tclc_error(S));
    }
    fflush(stdout);
    fflush(stderr);
    lua_settop(L, base);
}

/* Reads, compiles, runs and prints until end of input. Always ends with EXIT_OK: errors in
 * the entered code are reported and the prompt goes on. */
static int run_repl(tclc_state *S) {
    lua_State *L = tclc_lua(S);
    line_reader reader = {.interactive = isatty(fileno(stdin)) != 0};
    if (reader.interactive) {
        printf("%s %s (%s) - Ctrl-D quits\n", PROGRAM_NAME, tclc_version(), LUA_RELEASE);
        fflush(stdout);
    }
    input_buffer input = {0};
    char *line;
    while ((line = read_line(&reader, "> ")) != NULL) {
        bool stored = input_start(&input, line);
        free(line);
        if (!stored) goto out_of_memory;
        int compiled;
        while ((compiled = compile_input(L, &input)) == INCOMPLETE) {
            char *more = read_line(&reader, ">> ");
            if (!more) break; /* end of input inside a statement: report it below */
            lua_pop(L, 1);   /* the "<eof>" message */
            stored = input_append(&input, "\n", 1) && input_append(&input, more, strlen(more));
            free(more);
            if (!stored) goto out_of_memory;
        }
        remember_line(&reader, input.text + RETURN_PREFIX_LEN);
        if (compiled == COMPILED) {
            run_and_print(S);
        } else { /* a syntax error, or end of input inside a statement */
            fprintf(stderr, "%s\n", lua_tostring(L, -1));
            fflush(stderr);
            lua_pop(L, 1);
            if (compiled == INCOMPLETE) break;
        }
    }
    if (reader.interactive) putchar('\n');
    free(input.text);
    return EXIT_OK;

out_of_memory:
    fprintf(stderr, "%s: not enough memory for the input line\n", PROGRAM_NAME);
    free(input.text);
    return EXIT_LUA_ERROR;
}

/* ---- subcommands: tcl export, tcl run ---- */

typedef struct subcommand_call {
    const char *module; /* the Lua module whose main({arguments}) runs the command */
    int argc;           /* the arguments after the subcommand's name */
    char **argv;
    int status;         /* the command's exit status */
} subcommand_call;

/* Calls require(call->module).main({arguments}) and keeps the status it returns. Runs under
 * tclc_pcall. */
static int call_subcommand_main(lua_State *L) {
    subcommand_call *call = lua_touserdata(L, 1);
    lua_getglobal(L, "require");
    lua_pushstring(L, call->module);
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "main");
    lua_createtable(L, call->argc, 0);
    for (int i = 0; i < call->argc; i++) {
        lua_pushstring(L, call->argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_call(L, 1, 1);
    call->status = (int)luaL_optinteger(L, -1, EXIT_LUA_ERROR);
    return 0;
}

/* `tcl export ...`, `tcl run ...`: C only dispatches; the command's own usage errors and
 * messages come from the Lua side. */
static int run_subcommand(const char *module, int argc, char **argv) {
    tclc_state *S;
    int status;
    if (tclc_open(&S) != TCLC_OK) {
        status = lua_error_exit(S);
        tclc_close(S);
        return status;
    }
    subcommand_call call = {.module = module, .argc = argc, .argv = argv, .status = EXIT_LUA_ERROR};
    status = run_protected(S, call_subcommand_main, &call) == TCLC_OK ? call.status : lua_error_exit(S);
    fflush(stdout);
    tclc_close(S);
    return status;
}

/* ---- main ---- */

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "export") == 0) return run_subcommand("tcl.export.cli", argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "run") == 0) return run_subcommand("tcl.onnx.cli", argc - 2, argv + 2);
    command_line cl;
    int status = parse_command_line(argc, argv, &cl);
    if (status != EXIT_OK) return status;
    if (cl.has_help) {
        print_help();
        return EXIT_OK;
    }
    if (cl.has_v) {
        printf("%s %s\n", PROGRAM_NAME, tclc_version());
        if (!cl.script_index && !cl.has_e && !cl.has_i) return EXIT_OK; /* only -v: done */
    }

    tclc_state *S;
    if (tclc_open(&S) != TCLC_OK) {
        status = lua_error_exit(S);
        tclc_close(S);
        return status;
    }
    if (run_protected(S, set_arg_table, &cl) != TCLC_OK) {
        status = lua_error_exit(S);
    } else {
        status = run_e_options(S, &cl);
        if (status == EXIT_OK && cl.script_index) status = run_script(S, &cl);
        bool nothing_else_asked = !cl.script_index && !cl.has_e && !cl.has_v;
        if (status == EXIT_OK && (cl.has_i || nothing_else_asked)) status = run_repl(S);
    }
    tclc_close(S);
    return status;
}
