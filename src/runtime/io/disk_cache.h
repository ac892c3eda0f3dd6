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
 * A write goes to a new temporary file (`.tmp-` and six letters or digits, mode 0600) in the
 * same directory and is renamed over the entry, so a reader sees either the old file or the new
 * one, never a mixture, whatever other processes write at the same time. The directory and its
 * parents are created (mode 0700) when missing.
 *
 * Trust: whoever can write the directory can plant object code that tcl runs (the checksums
 * catch corruption, not forgery: anyone can compute them). So every read, write and open uses
 * the directory only when it is owned by the effective user and not writable by group or
 * others, checked on the opened descriptor (the final target of a symbolic link; entries are
 * then opened relative to it, so the directory cannot be swapped between check and use);
 * anything else is refused with a message naming the directory, its owner and mode and the
 * remedies. An entry file another user owns or may write reads as absent.
 *
 * No global state but a counter for temporary names. */
#ifndef TCLC_RUNTIME_DISK_CACHE_H
#define TCLC_RUNTIME_DISK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

#define TCL_DISK_CACHE_VERSION 1u
#define TCL_DISK_CACHE_HEADER_BYTES 32u
/* The largest payload an entry may hold (a longer one is refused when written, absent when read). */
#define TCL_DISK_CACHE_MAX_PAYLOAD ((uint64_t)1 << 32)
/* An entry's file name: 32 hex digits and the NUL. */
#define TCL_DISK_CACHE_NAME_BYTES 33u
/* Temporary files older than this (killed writers') are removed when the cache opens: 10 minutes. */
#define TCL_DISK_CACHE_STALE_SECONDS 600

/* The path of key's entry under dir, malloc'd; NULL when out of memory. */
char *tcl_disk_cache_path(const char *dir, const char *key, size_t key_len);

/* Opens the cache at dir, once per process and directory before its first use: creates it
 * (mode 0700) when missing, refuses it when it is not to be trusted (above), and removes the
 * temporary files killed writers left (older than TCL_DISK_CACHE_STALE_SECONDS). */
tcl_status tcl_disk_cache_open(const char *dir, tcl_error *err);

/* Reads key's entry: TCL_OK with *payload malloc'd (the caller frees it; never NULL for an
 * entry, even an empty one) and *len set, or TCL_OK with *payload NULL when there is no valid
 * entry (no directory either). Fails when out of memory, or when the directory is not to be
 * trusted. */
tcl_status tcl_disk_cache_read(const char *dir, const char *key, size_t key_len, unsigned char **payload,
                               size_t *len, tcl_error *err);

/* Writes key's entry (creating dir when missing). Fails with a message naming the path and the
 * reason (an unwritable or untrusted directory, a full disk, ...); leaves no temporary file
 * behind. */
tcl_status tcl_disk_cache_write(const char *dir, const char *key, size_t key_len, const void *payload, size_t len,
                                tcl_error *err);

#endif
