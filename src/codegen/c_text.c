/* c_text.c — growing text and templates for the C-source renderers (c_source.h). Layer: codegen. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_source.h"

/* Room for `more` bytes past the end, plus the terminator. */
static bool reserve(tcl_ctext *t, size_t more) {
    if (t->failed) return false;
    if (t->s && t->len + more < t->cap) return true;
    size_t want = t->cap ? t->cap : 256;
    while (want <= t->len + more) {
        if (want > SIZE_MAX / 2) {
            t->failed = true;
            return false;
        }
        want *= 2;
    }
    char *grown = realloc(t->s, want);
    if (!grown) {
        t->failed = true;
        return false;
    }
    t->s = grown;
    t->cap = want;
    return true;
}

static void put_n(tcl_ctext *t, const char *s, size_t n) {
    if (!reserve(t, n)) return;
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

void tcl_ctext_put(tcl_ctext *t, const char *s) { put_n(t, s, strlen(s)); }

void tcl_ctext_printf(tcl_ctext *t, const char *fmt, ...) {
    if (t->failed) return;
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int w = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (w < 0) {
        t->failed = true;
        return;
    }
    if ((size_t)w < sizeof small) {
        put_n(t, small, (size_t)w);
        return;
    }
    if (!reserve(t, (size_t)w)) return;
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, (size_t)w + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)w;
}

void tcl_ctext_template(tcl_ctext *t, const char *tpl, const char *q, const char *const *args, int nargs) {
    const char *p = tpl;
    while (*p) {
        const char *dollar = strchr(p, '$');
        if (!dollar) {
            tcl_ctext_put(t, p);
            return;
        }
        put_n(t, p, (size_t)(dollar - p));
        char c = dollar[1];
        if (c >= '1' && c <= '9' && c - '1' < nargs) tcl_ctext_put(t, args[c - '1']);
        else if (c == 'Q') tcl_ctext_put(t, q ? q : "");
        else if (c == '$') put_n(t, "$", 1);
        else put_n(t, dollar, c ? 2 : 1); /* not a placeholder: kept as written */
        p = dollar + (c ? 2 : 1);
    }
}

void tcl_ctext_clear(tcl_ctext *t) {
    t->len = 0;
    if (t->s) t->s[0] = '\0';
}

void tcl_ctext_free(tcl_ctext *t) {
    free(t->s);
    t->s = NULL;
    t->len = t->cap = 0;
    t->failed = false;
}
