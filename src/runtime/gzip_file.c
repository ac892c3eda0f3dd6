/* gzip_file.c — whole gzip files through zlib (see gzip_file.h). Layer: runtime. */
#include "gzip_file.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* zlib reads at most UINT_MAX bytes a call; ask for less, in a size gzread's int return holds */
#define READ_CHUNK ((size_t)1 << 26)

/* The compressed size, to guess how much room the output needs; 0 when unknown. */
static size_t file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    return n > 0 ? (size_t)n : 0;
}

/* gzerror's message without the "<path>: " zlib puts before it (ours names the file already). */
static const char *zlib_message(gzFile gz, const char *path, int *code) {
    const char *message = gzerror(gz, code);
    size_t n = strlen(path);
    if (strncmp(message, path, n) == 0 && message[n] == ':' && message[n + 1] == ' ') message += n + 2;
    return message;
}

unsigned char *tcl_gzip_read(const char *path, size_t *size, tcl_error *err) {
    *size = 0;
    if (!path) {
        tcl_fail(err, TCL_ERR_INVALID, "no file name given");
        return NULL;
    }
    size_t compressed = file_size(path);
    errno = 0;
    gzFile gz = gzopen(path, "rb");
    if (!gz) {
        tcl_fail(err, errno ? TCL_ERR_INVALID : TCL_ERR_MEMORY, "cannot open '%s': %s", path,
                 errno ? strerror(errno) : "out of memory");
        return NULL;
    }
    /* most data sets compress 2-8x; the block doubles when that was too little */
    size_t capacity = compressed < SIZE_MAX / 4 ? compressed * 4 + 4096 : compressed;
    unsigned char *out = malloc(capacity);
    if (!out) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory reading '%s'", path);
        gzclose(gz);
        return NULL;
    }
    size_t used = 0;
    for (;;) {
        if (used == capacity) {
            if (capacity > SIZE_MAX / 2) {
                tcl_fail(err, TCL_ERR_LIMIT, "'%s' inflates to more bytes than fit in memory", path);
                break;
            }
            unsigned char *grown = realloc(out, capacity * 2);
            if (!grown) {
                tcl_fail(err, TCL_ERR_MEMORY, "out of memory reading '%s' (%zu bytes so far)", path, used);
                break;
            }
            out = grown;
            capacity *= 2;
        }
        size_t want = capacity - used < READ_CHUNK ? capacity - used : READ_CHUNK;
        int got = gzread(gz, out + used, (unsigned)want);
        if (got < 0) {
            int code;
            const char *message = zlib_message(gz, path, &code);
            tcl_fail(err, code == Z_MEM_ERROR ? TCL_ERR_MEMORY : TCL_ERR_INVALID, "'%s' is not a valid gzip file: %s",
                     path, code == Z_ERRNO ? strerror(errno) : message);
            break;
        }
        if (got == 0) {
            /* gzread ends a cut-short stream like a complete one; gzerror tells them apart */
            int code;
            const char *message = zlib_message(gz, path, &code);
            if (code != Z_OK) {
                tcl_fail(err, TCL_ERR_INVALID, "'%s' is not a valid gzip file: %s", path, message);
                break;
            }
            if (gzdirect(gz)) {
                /* zlib passes non-gzip data through unchanged; a caller asking for gzip wants to know */
                tcl_fail(err, TCL_ERR_INVALID, "'%s' is not a gzip file (no gzip header)", path);
                break;
            }
            if (gzclose(gz) != Z_OK) {
                tcl_fail(err, TCL_ERR_INVALID, "'%s' could not be read to its end", path);
                free(out);
                return NULL;
            }
            *size = used;
            return out;
        }
        used += (size_t)got;
    }
    gzclose(gz);
    free(out);
    return NULL;
}
