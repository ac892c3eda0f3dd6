/* gzip_file.h — reading a whole gzip file into memory through zlib. Layer: runtime.
 *
 * For data sets shipped compressed (the IDX files of MNIST-like sets): the file is inflated in
 * one go into one malloc'd block. A file that is not gzip, is cut short or is corrupt (a bad
 * CRC, bad deflate data) is an error naming the file and zlib's message. */
#ifndef TCLC_RUNTIME_GZIP_FILE_H
#define TCLC_RUNTIME_GZIP_FILE_H

#include <stddef.h>

#include "core/error.h"

/* The decompressed contents of the gzip file at path (every member, as gzip -dc writes them)
 * in a malloc'd block the caller frees, its length in *size; NULL with err set on failure.
 * At most limit bytes are inflated (SIZE_MAX: all): a caller that knows how much it expects
 * asks for one byte more and so learns of excess without inflating it. A path that is not a
 * regular file (a FIFO, a device) is an error, found without blocking. An empty result is a
 * valid block of size 0. */
unsigned char *tcl_gzip_read(const char *path, size_t limit, size_t *size, tcl_error *err);

#endif
