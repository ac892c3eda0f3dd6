/* tcl_safetensors.c — load_weights of a model that reads its weights from a safetensors file
 * at open. Layer: the exported runtime; included by NAME.c after tcl_runtime.c (see there).
 *
 * The reader knows which tensors the model needs (the generated table WEIGHTS: name,
 * safetensors dtype, shape, bytes, and where each goes in the instance's weight block) and
 * checks the file against them: the 8-byte header length (bounded, inside the file), the
 * header's JSON (tcl_json.c), each needed tensor present once with its dtype, shape and byte
 * size, its bytes inside the file, and all tensors together covering the data region exactly,
 * without gap or overlap (the reference reader's rule). The model's own constants (CONSTANTS,
 * generated) are copied into the block from the program, not read. Anything else in the file
 * (other tensors, "__metadata__", other keys of an entry) is skipped. Every problem is an error
 * message naming the file (and the tensor), never a crash. */
#ifndef MODEL
#error "tcl_safetensors.c is included by an exported model's NAME.c, after tcl_runtime.c; it is not compiled alone"
#endif

#include "tcl_json.c"

/* The largest header accepted, in bytes (the reference reader's bound). */
#define MAX_HEADER_BYTES 100000000u
/* Shapes of more dimensions than this are never the ones wanted. */
#define MAX_RANK 32

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
static int check_entry(MODEL *m, const char *path, int w, const found_tensor *f, uint64_t data_bytes) {
    const weight_info *want = &WEIGHTS[w];
    if (!f->seen)
        return fail(m, STATUS(ERR_WEIGHTS),
                    MODEL_NAME "_open: '%s' has no tensor '%s' (not this model's weights?)", path,
                    want->name);
    if (strcmp(f->dtype, want->dtype) != 0)
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: '%s': tensor '%s' is %s, the model needs %s", path,
                    want->name, f->dtype[0] ? f->dtype : "(no dtype)", want->dtype);
    int same = f->rank == want->rank;
    for (int d = 0; same && d < f->rank; d++) same = f->shape[d] == (uint64_t)want->shape[d];
    if (!same)
        return fail(m, STATUS(ERR_WEIGHTS),
                    MODEL_NAME "_open: '%s': tensor '%s' has another shape than the model's (%d "
                    "dimensions, the model's has %d)", path, want->name, f->rank, want->rank);
    if (!f->have_offsets || f->end < f->begin || f->end - f->begin != want->bytes)
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: '%s': tensor '%s' does not have data_offsets of %llu "
                    "bytes", path, want->name, (unsigned long long)want->bytes);
    if (f->end > data_bytes)
        return fail(m, STATUS(ERR_WEIGHTS),
                    MODEL_NAME "_open: '%s': tensor '%s' ends at byte %llu of the data, past its "
                    "end (%llu bytes; a truncated file?)", path, want->name, (unsigned long long)f->end,
                    (unsigned long long)data_bytes);
    return STATUS(OK);
}

static int read_file_weights(MODEL *m, const char *path, FILE *file, found_tensor *found) {
    unsigned char prefix[8];
    if (fseeko(file, 0, SEEK_END) != 0)
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: cannot seek in '%s'", path);
    off_t size = ftello(file);
    if (size < 0 || fseeko(file, 0, SEEK_SET) != 0)
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: cannot seek in '%s'", path);
    if (size < 8 || fread(prefix, 1, 8, file) != 8)
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: '%s' is too short for a safetensors file", path);
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; i--) header_bytes = header_bytes << 8 | prefix[i];
    if (header_bytes > MAX_HEADER_BYTES || header_bytes > (uint64_t)size - 8)
        return fail(m, STATUS(ERR_WEIGHTS),
                    MODEL_NAME "_open: '%s' declares a header of %llu bytes, more than the file or "
                    "the limit allows (not a safetensors file?)", path, (unsigned long long)header_bytes);
    char *header = malloc((size_t)header_bytes + 1);
    if (!header) return fail(m, STATUS(ERR_MEMORY), MODEL_NAME "_open: out of memory for the header of '%s'", path);
    if (fread(header, 1, (size_t)header_bytes, file) != (size_t)header_bytes) {
        free(header);
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: cannot read the header of '%s'", path);
    }
    json_reader r = {header, header + header_bytes, NULL};
    span_list spans = {NULL, 0, 0};
    int parsed = read_header(&r, found, &spans);
    if (!parsed) {
        free(spans.items);
        int status = fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: '%s' has a malformed header: %s (at byte %llu of "
                          "the file)", path, r.problem, (unsigned long long)(8 + (uint64_t)(r.at - header)));
        free(header);
        return status;
    }
    free(header);
    uint64_t data_start = 8 + header_bytes, data_bytes = (uint64_t)size - data_start;
    for (int w = 0; w < NUM_WEIGHTS; w++) {
        int status = check_entry(m, path, w, &found[w], data_bytes);
        if (status != STATUS(OK)) {
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
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: '%s': its tensors do not cover its %llu bytes of data "
                    "exactly, without gap or overlap (they end at byte %llu; is the header length right?)", path,
                    (unsigned long long)data_bytes, (unsigned long long)covered);
    for (int w = 0; w < NUM_WEIGHTS; w++) {
        const weight_info *want = &WEIGHTS[w];
        if (want->bytes == 0) continue;
        if (fseeko(file, (off_t)(data_start + found[w].begin), SEEK_SET) != 0 ||
            fread(m->loaded + want->offset, 1, (size_t)want->bytes, file) != (size_t)want->bytes)
            return fail(m, STATUS(ERR_WEIGHTS),
                        MODEL_NAME "_open: cannot read tensor '%s' from '%s'", want->name, path);
    }
    return STATUS(OK);
}

static int load_weights(MODEL *m, const char *path) {
    if (!path)
        return fail(m, STATUS(ERR_ARGUMENT),
                    MODEL_NAME "_open: weights_path is NULL; this model reads its weights from a "
                    "safetensors file (%s.safetensors as exported)", MODEL_NAME);
    m->loaded = allocate_aligned(WEIGHT_BYTES);
    found_tensor *found = calloc(NUM_WEIGHTS + 1, sizeof *found);
    if (!m->loaded || !found) {
        free(found);
        return fail(m, STATUS(ERR_MEMORY), MODEL_NAME "_open: out of memory for the weights (%llu bytes)",
                    (unsigned long long)WEIGHT_BYTES);
    }
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; only a regular file is read */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        free(found);
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: '%s' is not a regular file", path);
    }
    FILE *file = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!file) {
        int saved = errno;
        if (fd >= 0) close(fd);
        free(found);
        return fail(m, STATUS(ERR_WEIGHTS), MODEL_NAME "_open: cannot open '%s': %s", path, strerror(saved));
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
