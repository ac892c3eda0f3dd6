/* lua_files.c — runtime.map_file, runtime.read_gzip and runtime.replace_file (see
 * lua_files.h). Layer: runtime. */
#define _XOPEN_SOURCE 700 /* mkstemp, realpath, fchmod, fsync */
#include "lua_files.h"

#include <errno.h>
#include <lauxlib.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/lua_box.h"
#include "core/lua_core.h"
#include "file_map.h"
#include "gzip_file.h"
#include "runtime/cpu/lua_cpu_pool.h"
#include "runtime/lua_runtime.h"

#define FILE_MAP_MT "tcl.FileMap"

typedef struct file_map_box { tcl_file_map *map; } file_map_box;

static tcl_file_map *check_map(lua_State *L, int idx) {
    file_map_box *box = luaL_checkudata(L, idx, FILE_MAP_MT);
    if (!box->map) luaL_argerror(L, idx, "the file map was released");
    return box->map;
}

/* A non-negative integer argument, or the default when absent. */
static lua_Integer byte_count(lua_State *L, int idx, const char *fn, const char *what, lua_Integer dflt) {
    if (lua_isnoneornil(L, idx)) return dflt;
    if (!lua_isinteger(L, idx)) luaL_error(L, "%s: %s must be an integer, got %s", fn, what, luaL_typename(L, idx));
    lua_Integer v = lua_tointeger(L, idx);
    if (v < 0) luaL_error(L, "%s: %s must be >= 0, got %I", fn, what, v);
    return v;
}

static int l_map_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer offset = byte_count(L, 2, "runtime.map_file", "offset", 0);
    lua_Integer length = byte_count(L, 3, "runtime.map_file", "length", -1);
    file_map_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->map = NULL;
    luaL_setmetatable(L, FILE_MAP_MT);
    tcl_error err;
    box->map = tcl_file_map_open(path, (uint64_t)offset, length < 0 ? UINT64_MAX : (uint64_t)length, &err);
    if (!box->map) return luaL_error(L, "runtime.map_file: %s", err.message);
    return 1;
}

static int map_gc(lua_State *L) {
    file_map_box *box = luaL_checkudata(L, 1, FILE_MAP_MT);
    tcl_file_map_release(box->map);
    box->map = NULL;
    return 0;
}

static int map_read(lua_State *L) {
    tcl_file_map *map = check_map(L, 1);
    lua_Integer offset = byte_count(L, 2, "FileMap:read", "offset", -1);
    lua_Integer length = byte_count(L, 3, "FileMap:read", "length", -1);
    if (offset < 0 || length < 0) return luaL_error(L, "FileMap:read: expected an offset and a length");
    uint64_t size = tcl_file_map_size(map);
    if ((uint64_t)offset > size || (uint64_t)length > size - (uint64_t)offset)
        return luaL_error(L, "FileMap:read: %I bytes from offset %I run past the end of the %I mapped bytes", length,
                          offset, (lua_Integer)size);
    lua_pushlstring(L, length ? (const char *)tcl_file_map_data(map) + offset : "", (size_t)length);
    return 1;
}

static int map_buffer(lua_State *L) {
    tcl_file_map *map = check_map(L, 1);
    tcl_dtype dtype = tcl_lua_check_dtype(L, 2);
    lua_Integer numel = byte_count(L, 3, "FileMap:buffer", "numel", -1);
    lua_Integer offset = byte_count(L, 4, "FileMap:buffer", "offset", -1);
    if (numel < 0 || offset < 0) return luaL_error(L, "FileMap:buffer: expected a dtype, numel and an offset");
    const char *device = luaL_optstring(L, 5, "CPU");
    tcl_buffer_cache *cache = tcl_lua_buffer_cache(L);
    tcl_buffer **slot = tcl_lua_push_buffer_slot(L);
    bool viewed;
    tcl_error err;
    *slot = tcl_file_map_buffer(map, (uint64_t)offset, device, dtype, (size_t)numel, cache, &viewed, &err);
    if (!*slot) return luaL_error(L, "FileMap:buffer: %s", err.message);
    lua_pushboolean(L, viewed);
    return 2;
}

static int map_index(lua_State *L) {
    tcl_file_map *map = check_map(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k && !strcmp(k, "size")) {
        lua_pushinteger(L, (lua_Integer)tcl_file_map_size(map));
        return 1;
    }
    if (k && !strcmp(k, "read")) { lua_pushcfunction(L, map_read); return 1; }
    if (k && !strcmp(k, "buffer")) { lua_pushcfunction(L, map_buffer); return 1; }
    return 0;
}

static int map_tostring(lua_State *L) {
    tcl_file_map *map = check_map(L, 1);
    lua_pushfstring(L, "FileMap(%I bytes)", (lua_Integer)tcl_file_map_size(map));
    return 1;
}

static int l_read_gzip(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_Integer limit = byte_count(L, 2, "runtime.read_gzip", "limit", -1);
    /* the contents are malloc'd and pushing them may raise: a to-be-closed box owns them */
    tcl_lua_box *box = tcl_lua_box_push(L, free);
    lua_toclose(L, -1);
    size_t size;
    tcl_error err;
    box->ptr = tcl_gzip_read(path, limit < 0 ? SIZE_MAX : (size_t)limit, &size, &err);
    if (!box->ptr) return luaL_error(L, "runtime.read_gzip: %s", err.message);
    lua_pushlstring(L, size ? (const char *)box->ptr : "", size);
    return 1;
}

/* Writes all of fd, retrying short writes; 0 or an errno. */
static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO; /* no progress and no error: never loop forever */
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* runtime.replace_file(path, chunks): replaces the file at path by the concatenated strings of
 * the list chunks, atomically: they are written to a unique temporary in the target's
 * directory (mkstemp, so concurrent writers never share one), synced, given the target's mode
 * (0644 less the umask when new) and renamed over it. A symbolic link is written through (its
 * target is replaced); an existing target that is not a regular file (a device, a FIFO) is an
 * error. On error nothing is left behind and the old file is intact. */
static int l_replace_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    /* Every chunk is checked before the temporary exists: from mkstemp to its rename or unlink
     * nothing may raise a Lua error (which would leave the temporary behind), so the loop below
     * reads the chunks raw, with no metamethod and no conversion that could allocate. */
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    for (lua_Integer i = 1; i <= n; i++) {
        if (lua_rawgeti(L, 2, i) != LUA_TSTRING)
            return luaL_error(L, "runtime.replace_file: chunk %I is not a string", i);
        lua_pop(L, 1);
    }
    char target[PATH_MAX];
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode))
        return luaL_error(L, "runtime.replace_file: '%s' is not a regular file", path);
    if (!exists && errno != ENOENT)
        return luaL_error(L, "runtime.replace_file: cannot write '%s': %s", path, strerror(errno));
    if (exists) {
        if (!realpath(path, target))
            return luaL_error(L, "runtime.replace_file: cannot write '%s': %s", path, strerror(errno));
    } else {
        if (strlen(path) >= sizeof target)
            return luaL_error(L, "runtime.replace_file: cannot write '%s': the path is too long", path);
        strcpy(target, path);
    }
    char temporary[PATH_MAX + 16];
    snprintf(temporary, sizeof temporary, "%s.tmp-XXXXXX", target);
    int fd = mkstemp(temporary);
    if (fd < 0) return luaL_error(L, "runtime.replace_file: cannot write '%s': %s", path, strerror(errno));
    int failure = 0;
    if (exists) {
        if (fchmod(fd, st.st_mode & 07777) != 0) failure = errno;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        if (fchmod(fd, 0666 & ~mask) != 0) failure = errno;
    }
    for (lua_Integer i = 1; i <= n && !failure; i++) {
        size_t len;
        lua_rawgeti(L, 2, i); /* a string, checked above: the table holds it while it is written */
        const char *chunk = lua_tolstring(L, -1, &len);
        failure = write_all(fd, chunk, len);
        lua_pop(L, 1);
    }
    if (!failure && fsync(fd) != 0) failure = errno;
    if (close(fd) != 0 && !failure) failure = errno;
    if (!failure && rename(temporary, target) != 0) failure = errno;
    if (failure) {
        unlink(temporary);
        return luaL_error(L, "runtime.replace_file: cannot write '%s': %s", path, strerror(failure));
    }
    return 0;
}

void tcl_lua_files_setfuncs(lua_State *L) {
    static const luaL_Reg map_meta[] = {
        {"__index", map_index}, {"__gc", map_gc}, {"__tostring", map_tostring}, {NULL, NULL}};
    if (luaL_newmetatable(L, FILE_MAP_MT)) luaL_setfuncs(L, map_meta, 0);
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {{"map_file", l_map_file}, {"read_gzip", l_read_gzip},
                                        {"replace_file", l_replace_file}, {NULL, NULL}};
    luaL_setfuncs(L, funcs, 0);
}
