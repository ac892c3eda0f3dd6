/* file_map.h — a region of a file mapped into memory, shared by the buffers that view it.
 * Layer: runtime.
 *
 * The mapping is private and writable (MAP_PRIVATE, PROT_READ | PROT_WRITE): pages are read
 * from the file when first touched, and a write copies the page it touches, so loading a
 * large file costs nothing until its values are used, kernels may write into the buffers
 * (an optimizer updating parameters in place), and the file itself is never modified.
 *
 * Ownership: a map is reference counted. Whoever opens it holds one reference; each buffer
 * made over it (tcl_file_map_buffer) holds another, dropped when the buffer is freed; the
 * region is unmapped when the last one goes. The count is not atomic: a map and its buffers
 * belong to one Lua state (one thread at a time), as buffers do.
 *
 * Truncating the file while it is mapped makes reading the lost pages fault (SIGBUS), as
 * with any file mapping; tcl maps files it has just opened and does not guard against that. */
#ifndef TCLC_RUNTIME_FILE_MAP_H
#define TCLC_RUNTIME_FILE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/buffer.h"
#include "core/error.h"

typedef struct tcl_file_map tcl_file_map;

/* Maps length bytes of the file at path from byte offset on (length UINT64_MAX: to the end of
 * the file). NULL with err set when the file cannot be opened or read, the region lies past
 * its end, or mapping fails. The caller holds the one reference. An empty region is allowed
 * (nothing is mapped). */
tcl_file_map *tcl_file_map_open(const char *path, uint64_t offset, uint64_t length, tcl_error *err);
/* Drops one reference; the last unmaps the region. NULL is allowed. */
void tcl_file_map_release(tcl_file_map *map);
/* The bytes of the region and how many there are (data is NULL when size is 0). */
const unsigned char *tcl_file_map_data(const tcl_file_map *map);
uint64_t tcl_file_map_size(const tcl_file_map *map);

/* A buffer of numel elements of dtype on device holding the region's bytes from offset on. It
 * views the mapping (and holds a reference to it) when the storage there is aligned as the
 * device requires (tcl_device_storage_align); otherwise it is a copy in fresh storage from
 * cache (may be NULL). *viewed tells which. NULL with err set when the bytes lie past the
 * region's end or a buffer cannot be made. */
tcl_buffer *tcl_file_map_buffer(tcl_file_map *map, uint64_t offset, const char *device, int dtype, size_t numel,
                                tcl_buffer_cache *cache, bool *viewed, tcl_error *err);

#endif
