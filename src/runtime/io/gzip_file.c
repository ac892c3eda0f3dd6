/* gzip_file.c — whole gzip files through zlib (see gzip_file.h). Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* O_CLOEXEC, O_NONBLOCK */
#include "gzip_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* zlib reads at most UINT_MAX bytes a call; ask for less, in a size gzread's int return holds */
#define READ_CHUNK ((size_t)1 << 26)

/* gzerror's message without the "<path>: " or "<fd:N>: " zlib puts before it (ours names the file already). */
static const char *zlib_message(gzFile gz, const char *path, int *code) {
    const char *message = gzerror(gz, code);
    size_t n = strlen(path);
    if (strncmp(message, path, n) == 0 && message[n] == ':' && message[n + 1] == ' ') message += n + 2;
    /* opened by gzdopen, zlib names the file "<fd:N>" */
    const char *fd_end = strncmp(message, "<fd:", 4) == 0 ? strstr(message, ">: ") : NULL;
    if (fd_end) message = fd_end + 3;
    return message;
}

unsigned char *tcl_gzip_read(const char *path, size_t limit, size_t *size, tcl_error *err) {
    *size = 0;
    if (!path) {
        tcl_fail(err, TCL_ERR_INVALID, "no file name given");
        return NULL;
    }
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tcl_fail(err, TCL_ERR_INVALID, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        tcl_fail(err, TCL_ERR_INVALID, "'%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t compressed = st.st_size > 0 ? (size_t)st.st_size : 0;
    errno = 0;
    gzFile gz = gzdopen(fd, "rb");
    if (!gz) {
        tcl_fail(err, errno ? TCL_ERR_INVALID : TCL_ERR_MEMORY, "cannot open '%s': %s", path,
                 errno ? strerror(errno) : "out of memory");
        close(fd);
        return NULL;
    }
    /* most data sets compress 2-8x; the block doubles when that was too little */
    size_t capacity = compressed < SIZE_MAX / 4 ? compressed * 4 + 4096 : compressed;
    if (capacity > limit) capacity = limit > 0 ? limit : 1;
    unsigned char *out = malloc(capacity);
    if (!out) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory reading '%s'", path);
        gzclose(gz);
        return NULL;
    }
    size_t used = 0;
    for (;;) {
        if (used == limit) {
            /* the caller wants no more: stop inflating (a bomb ends here, not at memory's end) */
            if (gzdirect(gz)) {
                tcl_fail(err, TCL_ERR_INVALID, "'%s' is not a gzip file (no gzip header)", path);
                break;
            }
            gzclose(gz);
            *size = used;
            return out;
        }
        if (used == capacity) {
            if (capacity > SIZE_MAX / 2) {
                tcl_fail(err, TCL_ERR_LIMIT, "'%s' inflates to more bytes than fit in memory", path);
                break;
            }
            size_t grown_capacity = capacity * 2 < limit ? capacity * 2 : limit;
            unsigned char *grown = realloc(out, grown_capacity);
            if (!grown) {
                tcl_fail(err, TCL_ERR_MEMORY, "out of memory reading '%s' (%zu bytes so far)", path, used);
                break;
            }
            out = grown;
            capacity = grown_capacity;
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
