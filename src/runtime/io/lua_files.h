/* lua_files.h — files in Lua, functions of "tcl.runtime": file regions mapped as buffers
 * (file_map.h), whole gzip files read as strings (gzip_file.h) and files replaced atomically.
 * Layer: runtime.
 *
 *   runtime.map_file(path [, offset [, length]]) -> FileMap   the file's bytes from offset (0-based,
 *       default 0) on, length of them (default: to the end), mapped private and copy-on-write
 *     .size                                  the region's length in bytes
 *     :read(offset, length) -> string        a copy of length bytes from offset (0-based) in the region
 *     :buffer(dtype, numel, offset [, device = "CPU"]) -> Buffer, viewed
 *         numel elements from byte offset of the region: a view of the mapping when the address
 *         is aligned as the device needs (viewed = true), else a copy (viewed = false)
 *   runtime.read_gzip(path) -> string        the decompressed contents
 *   runtime.replace_file(path, chunks)       replaces the file by the strings of the list chunks,
 *       atomically (a unique temporary beside it, synced, renamed; its mode kept; a symbolic
 *       link written through; a target that is not a regular file is an error)
 *
 * Every error is a Lua error naming the function and, for files, the file. A FileMap userdata
 * holds one reference to its mapping and each viewing Buffer another: the region is unmapped
 * when the FileMap and every such Buffer have been collected, in any order. */
#ifndef TCLC_LUA_FILES_H
#define TCLC_LUA_FILES_H

#include <lua.h>

/* Sets map_file, read_gzip and replace_file in the table on top of the stack (and the FileMap metatable). */
void tcl_lua_files_setfuncs(lua_State *L);

#endif
