-- tcl.export.c_safetensors — the C text of an exported model's `load_weights` (NAME.c), in
-- its two forms: weights embedded in the program (NAME_weights.c), or read at open time from
-- a safetensors file. Layer: export; see tcl.export.c_runtime for the names the text uses.
--
-- The reader knows which tensors the model needs (the generated table WEIGHTS: name,
-- safetensors dtype, shape, bytes, and where each goes in the instance's weight block) and
-- checks the file against them: the 8-byte header length (bounded, inside the file), the
-- header's JSON (a small parser for exactly JSON's grammar, nesting bounded, numbers of the
-- offsets and shapes as unsigned integers), each needed tensor present once with its dtype,
-- shape and byte size, its bytes inside the file, and all tensors together covering the data
-- region exactly, without gap or overlap (the reference reader's rule). The model's own
-- constants (CONSTANTS, generated) are copied into the block from the program, not read.
-- Anything else in the file (other tensors, "__metadata__", other keys of an entry) is
-- skipped. Every problem is an error
-- message naming the file (and the tensor), never a crash.
local M = {}

--- load_weights for weights embedded as @name@_weight_data (or none at all).
M.embedded = [==[
/* ---- weights: embedded in the program (@name@_weights.c) ---- */

static int load_weights(@name@ *m, const char *path) {
    if (path)
        return fail(m, @NAME@_ERR_ARGUMENT,
                    "@name@_open: this model's weights are embedded; weights_path must be NULL, not \"%s\"", path);
    m->weights = WEIGHT_DATA;
    return @NAME@_OK;
}
]==]

--- load_weights reading a safetensors file.
M.reader = [==[
/* ---- weights: read from a safetensors file (tcl.export.c_safetensors) ---- */

/* The largest header accepted, in bytes (the reference reader's bound). */
#define MAX_HEADER_BYTES 100000000u
/* The deepest nesting of JSON values accepted. */
#define MAX_JSON_DEPTH 64
/* Shapes of more dimensions than this are never the ones wanted. */
#define MAX_RANK 32

typedef struct json_reader {
    const char *at, *end;
    const char *problem; /* what is wrong, once something is */
} json_reader;

/* The byte ranges [begin, end) of every tensor in the file, to check that they cover the data
 * exactly (the reference reader's rule: a header length one byte off would otherwise read
 * every tensor one byte off). */
typedef struct span { uint64_t begin, end; } span;
typedef struct span_list { span *items; size_t count, capacity; } span_list;

static int add_span(span_list *l, uint64_t begin, uint64_t end) {
    if (l->count == l->capacity) {
        size_t capacity = l->capacity ? 2 * l->capacity : 16;
        span *items = realloc(l->items, capacity * sizeof *items);
        if (!items) return 0;
        l->items = items;
        l->capacity = capacity;
    }
    l->items[l->count].begin = begin;
    l->items[l->count].end = end;
    l->count++;
    return 1;
}

static int span_before(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* What the file says about one wanted tensor. */
typedef struct found_tensor {
    int seen;
    char dtype[16];
    int rank; /* may exceed MAX_RANK: then shape holds the first MAX_RANK sizes */
    uint64_t shape[MAX_RANK];
    int have_offsets;
    uint64_t begin, end;
} found_tensor;

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

/* Reads a tensor's entry {"dtype": ..., "shape": [...], "data_offsets": [b, e], ...}. */
static int read_entry(json_reader *r, found_tensor *f) {
    if (!take(r, '{')) return json_fail(r, "a tensor's entry is not an object");
    if (take(r, '}')) return 1;
    for (;;) {
        char key[32];
        size_t len;
        if (!read_string(r, key, sizeof key, &len) || !take(r, ':'))
            return json_fail(r, "an object's member is not \"key\": value");
        if (len < sizeof key && strcmp(key, "dtype") == 0) {
            size_t n;
            if (!read_string(r, f->dtype, sizeof f->dtype, &n)) return 0;
            if (n >= sizeof f->dtype) strcpy(f->dtype, "(unknown)");
        } else if (len < sizeof key && strcmp(key, "shape") == 0) {
            if (!read_counts(r, f->shape, MAX_RANK, &f->rank)) return 0;
        } else if (len < sizeof key && strcmp(key, "data_offsets") == 0) {
            uint64_t offsets[2];
            int n;
            if (!read_counts(r, offsets, 2, &n)) return 0;
            if (n != 2) return json_fail(r, "a data_offsets is not a list of two offsets");
            f->begin = offsets[0];
            f->end = offsets[1];
            f->have_offsets = 1;
        } else if (!skip_value(r, 2)) {
            return 0;
        }
        if (take(r, '}')) return 1;
        if (!take(r, ',')) return json_fail(r, "a ',' or '}' is missing in a tensor's entry");
    }
}

/* The index of the wanted tensor named `name`, or -1. */
static int wanted(const char *name, size_t len) {
    for (int i = 0; i < NUM_WEIGHTS; i++)
        if (strlen(WEIGHTS[i].name) == len && memcmp(WEIGHTS[i].name, name, len) == 0) return i;
    return -1;
}

/* Parses the header; fills found[] for the wanted tensors and spans for every tensor. */
static int read_header(json_reader *r, found_tensor *found, span_list *spans) {
    if (!take(r, '{')) return json_fail(r, "the header is not a JSON object");
    if (!take(r, '}')) {
        for (;;) {
            char name[256];
            size_t len;
            if (!read_string(r, name, sizeof name, &len) || !take(r, ':'))
                return json_fail(r, "an object's member is not \"key\": value");
            int w = len < sizeof name ? wanted(name, len) : -1;
            if (len == 12 && memcmp(name, "__metadata__", 12) == 0) {
                if (!skip_value(r, 1)) return 0;
            } else {
                found_tensor other = {0};
                found_tensor *f = w < 0 ? &other : &found[w];
                if (f->seen) return json_fail(r, "a tensor is listed twice");
                f->seen = 1;
                if (!read_entry(r, f)) return 0;
                if (!f->have_offsets || f->end < f->begin)
                    return json_fail(r, "a tensor has no data_offsets [begin, end] with begin <= end");
                if (!add_span(spans, f->begin, f->end)) return json_fail(r, "out of memory");
            }
            if (take(r, '}')) break;
            if (!take(r, ',')) return json_fail(r, "a ',' or '}' is missing in the header");
        }
    }
    skip_space(r);
    if (r->at != r->end) return json_fail(r, "the header has text after its object");
    return 1;
}

/* Checks the file's entry of tensor w against what the model needs. */
static int check_entry(@name@ *m, const char *path, int w, const found_tensor *f, uint64_t data_bytes) {
    const weight_info *want = &WEIGHTS[w];
    if (!f->seen)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s' has no tensor '%s' (not this model's weights?)", path,
                    want->name);
    if (strcmp(f->dtype, want->dtype) != 0)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s': tensor '%s' is %s, the model needs %s", path,
                    want->name, f->dtype[0] ? f->dtype : "(no dtype)", want->dtype);
    int same = f->rank == want->rank;
    for (int d = 0; same && d < f->rank; d++) same = f->shape[d] == (uint64_t)want->shape[d];
    if (!same)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s': tensor '%s' has another shape than the model's (%d "
                    "dimensions, the model's has %d)", path, want->name, f->rank, want->rank);
    if (!f->have_offsets || f->end < f->begin || f->end - f->begin != want->bytes)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s': tensor '%s' does not have data_offsets of %llu "
                    "bytes", path, want->name, (unsigned long long)want->bytes);
    if (f->end > data_bytes)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s': tensor '%s' ends at byte %llu of the data, past its "
                    "end (%llu bytes; a truncated file?)", path, want->name, (unsigned long long)f->end,
                    (unsigned long long)data_bytes);
    return @NAME@_OK;
}

static int read_file_weights(@name@ *m, const char *path, FILE *file, found_tensor *found) {
    unsigned char prefix[8];
    if (fseeko(file, 0, SEEK_END) != 0) return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: cannot seek in '%s'", path);
    off_t size = ftello(file);
    if (size < 0 || fseeko(file, 0, SEEK_SET) != 0)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: cannot seek in '%s'", path);
    if (size < 8 || fread(prefix, 1, 8, file) != 8)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s' is too short for a safetensors file", path);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; i--) header_bytes = header_bytes << 8 | prefix[i];
    if (header_bytes > MAX_HEADER_BYTES || header_bytes > (uint64_t)size - 8)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s' declares a header of %llu bytes, more than the file or "
                    "the limit allows (not a safetensors file?)", path, (unsigned long long)header_bytes);
    char *header = malloc((size_t)header_bytes + 1);
    if (!header) return fail(m, @NAME@_ERR_MEMORY, "@name@_open: out of memory for the header of '%s'", path);
    if (fread(header, 1, (size_t)header_bytes, file) != (size_t)header_bytes) {
        free(header);
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: cannot read the header of '%s'", path);
    }
    json_reader r = {header, header + header_bytes, NULL};
    span_list spans = {NULL, 0, 0};
    int parsed = read_header(&r, found, &spans);
    if (!parsed) {
        free(spans.items);
        int status = fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s' has a malformed header: %s (at byte %llu of "
                          "the file)", path, r.problem, (unsigned long long)(8 + (uint64_t)(r.at - header)));
        free(header);
        return status;
    }
    free(header);
    uint64_t data_start = 8 + header_bytes, data_bytes = (uint64_t)size - data_start;
    for (int w = 0; w < NUM_WEIGHTS; w++) {
        int status = check_entry(m, path, w, &found[w], data_bytes);
        if (status != @NAME@_OK) {
            free(spans.items);
            return status;
        }
    }
    /* after the entries' own checks, whose messages are more precise */
    if (spans.count) qsort(spans.items, spans.count, sizeof *spans.items, span_before);
    uint64_t covered = 0;
    size_t in_order = 0;
    while (in_order < spans.count && spans.items[in_order].begin == covered) covered = spans.items[in_order++].end;
    int exact = in_order == spans.count && covered == data_bytes;
    free(spans.items);
    if (!exact)
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s': its tensors do not cover its %llu bytes of data "
                    "exactly, without gap or overlap (they end at byte %llu; is the header length right?)", path,
                    (unsigned long long)data_bytes, (unsigned long long)covered);
    for (int w = 0; w < NUM_WEIGHTS; w++) {
        const weight_info *want = &WEIGHTS[w];
        if (want->bytes == 0) continue;
        if (fseeko(file, (off_t)(data_start + found[w].begin), SEEK_SET) != 0 ||
            fread(m->loaded + want->offset, 1, (size_t)want->bytes, file) != (size_t)want->bytes)
            return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: cannot read tensor '%s' from '%s'", want->name, path);
    }
    return @NAME@_OK;
}

static int load_weights(@name@ *m, const char *path) {
    if (!path)
        return fail(m, @NAME@_ERR_ARGUMENT, "@name@_open: weights_path is NULL; this model reads its weights from a "
                    "safetensors file (%s.safetensors as exported)", "@name@");
    m->loaded = allocate_aligned(WEIGHT_BYTES);
    found_tensor *found = calloc(NUM_WEIGHTS + 1, sizeof *found);
    if (!m->loaded || !found) {
        free(found);
        return fail(m, @NAME@_ERR_MEMORY, "@name@_open: out of memory for the weights (%llu bytes)",
                    (unsigned long long)WEIGHT_BYTES);
    }
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular file is read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        free(found);
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: '%s' is not a regular file", path);
    }
    FILE *file = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!file) {
        int saved = errno;
        if (fd >= 0) close(fd);
        free(found);
        return fail(m, @NAME@_ERR_WEIGHTS, "@name@_open: cannot open '%s': %s", path, strerror(saved));
    }
    int status = read_file_weights(m, path, file, found);
    fclose(file);
    free(found);
    /* the model's own constants are in the program, not in the file */
    for (int c = 0; c < NUM_CONSTANTS; c++)
        memcpy(m->loaded + CONSTANTS[c].offset, CONSTANTS[c].data, (size_t)CONSTANTS[c].bytes);
    m->weights = m->loaded;
    return status;
}
]==]

return M
