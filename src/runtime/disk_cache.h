/* disk_cache.h — a directory of byte strings by key, safe against corruption and concurrent
 * writers. Layer: runtime (the CPU device keeps compiled object code in it).
 *
 * An entry is one file whose name is the XXH3-128 hash of the key in hex (the key itself
 * never becomes part of a path), holding a header and the payload:
 *
 *   offset  size  field (integers little-endian)
 *        0     4  magic "TCLK"
 *        4     4  format version (TCL_DISK_CACHE_VERSION)
 *        8     8  XXH3-64 of the key (a file written for another key under the same name
 *                 does not match)
 *       16     8  payload length
 *       24     8  XXH3-64 of the payload
 *       32     -  payload
 *
 * A read that finds anything that does not check out (no file, a short or long file, another
 * magic, version or key, a wrong checksum) finds nothing; the next write replaces the file.
 * A write goes to a temporary file (mkstemp) in the same directory and is renamed over the
 * entry, so a reader sees either the old file or the new one, never a mixture, whatever other
 * processes write at the same time. The directory and its parents are created (mode 0700)
 * when missing. No global state. */
#ifndef TCLC_RUNTIME_DISK_CACHE_H
#define TCLC_RUNTIME_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define TCL_DISK_CACHE_VERSION 1u
#define TCL_DISK_CACHE_HEADER_BYTES 32u
/* The largest payload an entry may hold (a longer one is refused when written, absent when read). */
#define TCL_DISK_CACHE_MAX_PAYLOAD ((uint64_t)1 << 32)

/* The path of key's entry under dir, malloc'd; NULL when out of memory. */
char *tcl_disk_cache_path(const char *dir, const char *key, size_t key_len);

/* Reads key's entry: TCL_OK with *payload malloc'd (the caller frees it; never NULL for an
 * entry, even an empty one) and *len set, or TCL_OK with *payload NULL when there is no valid
 * entry. Fails only when out of memory. */
tcl_status tcl_disk_cache_read(const char *dir, const char *key, size_t key_len, unsigned char **payload,
                               size_t *len, tcl_error *err);

/* Writes key's entry (creating dir when missing). Fails with a message naming the path and the
 * reason (an unwritable directory, a full disk, ...); leaves no temporary file behind. */
tcl_status tcl_disk_cache_write(const char *dir, const char *key, size_t key_len, const void *payload, size_t len,
                                tcl_error *err);

#endif
