/* tcl_json.c — a reader of JSON text in memory, for the header of a safetensors file: exactly
 * JSON's grammar (RFC 8259), nesting bounded, strings decoded to UTF-8, the numbers a header
 * needs (offsets and sizes) read as unsigned 64-bit integers and every other value skipped.
 * Every problem sets a message in the reader (the first one stays) and makes the call return
 * 0; nothing is allocated. Layer: the exported runtime (see tcl_runtime.c); included by
 * tcl_safetensors.c. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The deepest nesting of JSON values accepted. */
#define MAX_JSON_DEPTH 64

typedef struct json_reader {
    const char *at, *end;
    const char *problem; /* what is wrong, once something is */
} json_reader;

static int json_fail(json_reader *r, const char *problem) {
    if (!r->problem) r->problem = problem;
    return 0;
}

static void skip_space(json_reader *r) {
    while (r->at < r->end && (*r->at == ' ' || *r->at == '\t' || *r->at == '\n' || *r->at == '\r')) r->at++;
}

/* Skips spaces and takes the character c. */
static int take(json_reader *r, char c) {
    skip_space(r);
    if (r->at < r->end && *r->at == c) {
        r->at++;
        return 1;
    }
    return 0;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(json_reader *r, unsigned *v) {
    if (r->end - r->at < 4) return json_fail(r, "a \\u escape is cut short");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hex_value(r->at[i]);
        if (h < 0) return json_fail(r, "a \\u escape has a character that is not hexadecimal");
        *v = *v * 16 + (unsigned)h;
    }
    r->at += 4;
    return 1;
}

/* Appends byte b to out (capacity cap, *len bytes so far); past the capacity the text is
 * marked too long (*len = cap), which matches no wanted name. */
static void put_byte(char *out, size_t cap, size_t *len, unsigned char b) {
    if (*len + 1 < cap) out[(*len)++] = (char)b;
    else *len = cap;
}

static void put_utf8(char *out, size_t cap, size_t *len, unsigned cp) {
    if (cp < 0x80) {
        put_byte(out, cap, len, (unsigned char)cp);
    } else if (cp < 0x800) {
        put_byte(out, cap, len, (unsigned char)(0xc0 | cp >> 6));
        put_byte(out, cap, len, (unsigned char)(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
        put_byte(out, cap, len, (unsigned char)(0xe0 | cp >> 12));
        put_byte(out, cap, len, (unsigned char)(0x80 | (cp >> 6 & 0x3f)));
        put_byte(out, cap, len, (unsigned char)(0x80 | (cp & 0x3f)));
    } else {
        put_byte(out, cap, len, (unsigned char)(0xf0 | cp >> 18));
        put_byte(out, cap, len, (unsigned char)(0x80 | (cp >> 12 & 0x3f)));
        put_byte(out, cap, len, (unsigned char)(0x80 | (cp >> 6 & 0x3f)));
        put_byte(out, cap, len, (unsigned char)(0x80 | (cp & 0x3f)));
    }
}

/* Reads a string (escapes decoded) into out, NUL-terminated; *len = its length, or cap when
 * it did not fit. out may be NULL (cap 0) to skip the string. */
static int read_string(json_reader *r, char *out, size_t cap, size_t *len) {
    size_t n = 0;
    if (!take(r, '"')) return json_fail(r, "a string was expected");
    for (;;) {
        if (r->at >= r->end) return json_fail(r, "a string is not closed");
        unsigned char c = (unsigned char)*r->at++;
        if (c == '"') break;
        if (c < 0x20) return json_fail(r, "a string holds a control character");
        if (c != '\\') {
            put_byte(out, cap, &n, c);
            continue;
        }
        if (r->at >= r->end) return json_fail(r, "a string is not closed");
        char e = *r->at++;
        unsigned cp;
        switch (e) {
        case '"': case '\\': case '/': put_byte(out, cap, &n, (unsigned char)e); break;
        case 'b': put_byte(out, cap, &n, '\b'); break;
        case 'f': put_byte(out, cap, &n, '\f'); break;
        case 'n': put_byte(out, cap, &n, '\n'); break;
        case 'r': put_byte(out, cap, &n, '\r'); break;
        case 't': put_byte(out, cap, &n, '\t'); break;
        case 'u':
            if (!read_hex4(r, &cp)) return 0;
            if (cp >= 0xd800 && cp < 0xdc00) { /* a high surrogate: its low half must follow */
                unsigned low;
                if (r->end - r->at < 2 || r->at[0] != '\\' || r->at[1] != 'u')
                    return json_fail(r, "a \\u escape has half of a surrogate pair");
                r->at += 2;
                if (!read_hex4(r, &low)) return 0;
                if (low < 0xdc00 || low >= 0xe000) return json_fail(r, "a \\u escape has half of a surrogate pair");
                cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                return json_fail(r, "a \\u escape has half of a surrogate pair");
            }
            put_utf8(out, cap, &n, cp);
            break;
        default: return json_fail(r, "a string has an unknown escape");
        }
    }
    if (out && n < cap) out[n] = '\0';
    if (len) *len = n;
    return 1;
}

/* Reads an unsigned integer (digits only: no sign, fraction or exponent). */
static int read_count(json_reader *r, uint64_t *v) {
    skip_space(r);
    if (r->at >= r->end || *r->at < '0' || *r->at > '9') return json_fail(r, "a size or offset is not an integer >= 0");
    uint64_t n = 0;
    while (r->at < r->end && *r->at >= '0' && *r->at <= '9') {
        unsigned d = (unsigned)(*r->at++ - '0');
        if (n > (UINT64_MAX - d) / 10) return json_fail(r, "a size or offset is too large");
        n = n * 10 + d;
    }
    if (r->at < r->end && (*r->at == '.' || *r->at == 'e' || *r->at == 'E'))
        return json_fail(r, "a size or offset is not an integer");
    *v = n;
    return 1;
}

static int skip_value(json_reader *r, int depth);

/* Skips a JSON number (the grammar's, checked). */
static int skip_number(json_reader *r) {
    if (r->at < r->end && *r->at == '-') r->at++;
    const char *digits = r->at;
    while (r->at < r->end && *r->at >= '0' && *r->at <= '9') r->at++;
    if (r->at == digits) return json_fail(r, "a value is not valid JSON");
    if (r->at < r->end && *r->at == '.') {
        digits = ++r->at;
        while (r->at < r->end && *r->at >= '0' && *r->at <= '9') r->at++;
        if (r->at == digits) return json_fail(r, "a number is not valid JSON");
    }
    if (r->at < r->end && (*r->at == 'e' || *r->at == 'E')) {
        r->at++;
        if (r->at < r->end && (*r->at == '+' || *r->at == '-')) r->at++;
        digits = r->at;
        while (r->at < r->end && *r->at >= '0' && *r->at <= '9') r->at++;
        if (r->at == digits) return json_fail(r, "a number is not valid JSON");
    }
    return 1;
}

static int skip_word(json_reader *r, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(r->end - r->at) < n || memcmp(r->at, word, n) != 0) return json_fail(r, "a value is not valid JSON");
    r->at += n;
    return 1;
}

/* Skips the elements of an array or the members of an object (after its opening bracket). */
static int skip_members(json_reader *r, int depth, int object) {
    char close = object ? '}' : ']';
    if (take(r, close)) return 1;
    for (;;) {
        if (object && (!read_string(r, NULL, 0, NULL) || !take(r, ':')))
            return json_fail(r, "an object's member is not \"key\": value");
        if (!skip_value(r, depth + 1)) return 0;
        if (take(r, close)) return 1;
        if (!take(r, ',')) return json_fail(r, "a ',' or a closing bracket is missing");
    }
}

static int skip_value(json_reader *r, int depth) {
    if (depth > MAX_JSON_DEPTH) return json_fail(r, "values are nested too deeply");
    skip_space(r);
    if (r->at >= r->end) return json_fail(r, "a value is missing");
    switch (*r->at) {
    case '"': return read_string(r, NULL, 0, NULL);
    case '{': r->at++; return skip_members(r, depth, 1);
    case '[': r->at++; return skip_members(r, depth, 0);
    case 't': return skip_word(r, "true");
    case 'f': return skip_word(r, "false");
    case 'n': return skip_word(r, "null");
    default: return skip_number(r);
    }
}

/* Reads a list of unsigned integers: *count of them, the first `cap` into values. */
static int read_counts(json_reader *r, uint64_t *values, int cap, int *count) {
    *count = 0;
    if (!take(r, '[')) return json_fail(r, "a shape or data_offsets is not a list");
    if (take(r, ']')) return 1;
    for (;;) {
        uint64_t v;
        if (!read_count(r, &v)) return 0;
        if (*count < cap) values[*count] = v;
        if (*count == INT32_MAX) return json_fail(r, "a list is too long");
        (*count)++;
        if (take(r, ']')) return 1;
        if (!take(r, ',')) return json_fail(r, "a ',' or ']' is missing in a list");
    }
}
