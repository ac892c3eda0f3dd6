/* quote.h — the host's strings (names, paths) as they appear in error messages: whole when
 * short, else their start, an ellipsis and their length, so that a 400 KB name gives a message
 * of a line. Layer: api. */
#ifndef TCLC_API_QUOTE_H
#define TCLC_API_QUOTE_H

#include <lua.h>
#include <stddef.h>

/* Longer strings are cut to their first TCLC_API_QUOTE_KEEP bytes (fewer at a UTF-8 boundary). */
#define TCLC_API_QUOTE_MAX 160
#define TCLC_API_QUOTE_KEEP 120

/* Pushes text (len bytes) bounded as above and returns the pushed string (for "%s"). */
const char *tclc_api_push_quoted(lua_State *L, const char *text, size_t len);

/* The same into buf, which must hold TCLC_API_QUOTE_MAX + 1 bytes or more. */
const char *tclc_api_quote(char *buf, size_t cap, const char *text);

#endif
