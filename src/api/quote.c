/* quote.c — the host's strings in error messages, bounded (see quote.h). Layer: api. */
#include <stdio.h>
#include <string.h>

#include "quote.h"

/* How many of text's first len bytes to keep: all when short, else TCLC_API_QUOTE_KEEP less
 * the bytes of a UTF-8 sequence that would be cut. */
static size_t kept_bytes(const char *text, size_t len) {
    if (len <= TCLC_API_QUOTE_MAX) return len;
    size_t keep = TCLC_API_QUOTE_KEEP;
    while (keep > 0 && ((unsigned char)text[keep] & 0xC0) == 0x80) keep--; /* a continuation byte */
    return keep;
}

const char *tclc_api_quote(char *buf, size_t cap, const char *text) {
    size_t len = strlen(text), keep = kept_bytes(text, len);
    if (keep == len)
        snprintf(buf, cap, "%s", text);
    else
        snprintf(buf, cap, "%.*s... (%zu bytes)", (int)keep, text, len);
    return buf;
}

const char *tclc_api_push_quoted(lua_State *L, const char *text, size_t len) {
    size_t keep = kept_bytes(text, len);
    if (keep == len) return lua_pushlstring(L, text, len);
    char tail[48];
    snprintf(tail, sizeof tail, "... (%zu bytes)", len);
    lua_pushlstring(L, text, keep);
    lua_pushstring(L, tail);
    lua_concat(L, 2);
    return lua_tostring(L, -1);
}
