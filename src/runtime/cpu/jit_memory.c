/* jit_memory.c — slabs of code memory shared by the CPU JIT's kernels (jit_memory.h).
 * Layer: runtime. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#include "jit_memory.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A slab's address space: thousands of small kernels. Pages nobody wrote cost no memory. */
#define SLAB_BYTES ((size_t)4 << 20)

typedef struct slab {
    unsigned char *base;
    size_t size;          /* bytes mapped, whole pages */
    size_t exec_top;      /* code and read-only data fill [0, exec_top) */
    size_t protected_end; /* [0, protected_end) is read+execute (a page boundary) */
    size_t rw_bottom;     /* writable data fills [rw_bottom, size) */
    size_t objects;       /* live objects with sections here */
    uint32_t *page_users; /* per page: live linked objects with bytes on it */
    struct slab *next;
} slab;

typedef struct object_memory {
    tcl_jit_memory *memory;
    slab *slab;                    /* NULL until its first section */
    size_t exec_start, exec_end;   /* its code and read-only data: [exec_start, exec_end) */
    size_t rw_start, rw_end;       /* its writable data: [rw_start, rw_end) */
    size_t used;
    bool linked;
} object_memory;

struct tcl_jit_memory {
    slab *slabs; /* the first one takes new objects */
    size_t page, limit, expected; /* expected: the room reserved for the next object */
    tcl_jit_memory_stats stats;
    size_t last_used;
    struct object_memory *spare; /* the next object's record, made by the reservation */
    tcl_error error; /* why the last reservation or section failed */
};

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
static size_t page_floor(const tcl_jit_memory *m, size_t at) { return at / m->page * m->page; }

tcl_jit_memory *tcl_jit_memory_new(void) {
    tcl_jit_memory *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    long page = sysconf(_SC_PAGESIZE);
    m->page = page > 0 ? (size_t)page : 4096;
    return m;
}

static void unmap(tcl_jit_memory *m, slab *s) {
    munmap(s->base, s->size);
    m->stats.slabs--;
    m->stats.mapped_bytes -= s->size;
    free(s->page_users);
    free(s);
}

void tcl_jit_memory_free(tcl_jit_memory *m) {
    if (!m) return;
    while (m->slabs) {
        slab *s = m->slabs;
        m->slabs = s->next;
        unmap(m, s);
    }
    free(m->spare);
    free(m);
}

/* Maps a slab of at least `bytes` and makes it the one new objects go into; TCL_ERR_MEMORY,
 * with m->error set, when the bound or the system refuses. */
static tcl_status open_slab(tcl_jit_memory *m, size_t bytes) {
    if (m->slabs && !m->slabs->objects) { /* the open slab is empty but too small */
        slab *empty = m->slabs;
        m->slabs = empty->next;
        unmap(m, empty);
    }
    size_t size = round_up(bytes > SLAB_BYTES ? bytes : SLAB_BYTES, m->page);
    if (m->limit) { /* under a bound, a smaller slab where a full one would not fit */
        size_t room = m->limit > m->stats.mapped_bytes ? (m->limit - m->stats.mapped_bytes) / m->page * m->page : 0;
        if (size > room && room >= round_up(bytes, m->page)) size = room;
    }
    if (m->limit && m->stats.mapped_bytes + size > m->limit) {
        return tcl_fail(&m->error, TCL_ERR_MEMORY,
                        "the JIT's code memory is at its bound (%zu KiB in %zu slab%s, bound %zu KiB)",
                        m->stats.mapped_bytes >> 10, m->stats.slabs, m->stats.slabs == 1 ? "" : "s", m->limit >> 10);
    }
    slab *s = calloc(1, sizeof *s);
    uint32_t *users = calloc(size / m->page, sizeof *users);
    void *base = s && users ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                            : MAP_FAILED;
    if (base == MAP_FAILED) {
        int code = s && users ? errno : ENOMEM;
        tcl_fail(&m->error, TCL_ERR_MEMORY, "mapping %zu KiB for kernel code failed (%s; the JIT holds %zu slabs)",
                 size >> 10, strerror(code), m->stats.slabs);
        free(s);
        free(users);
        return TCL_ERR_MEMORY;
    }
    s->base = base;
    s->size = size;
    s->rw_bottom = size;
    s->page_users = users;
    s->next = m->slabs;
    m->slabs = s;
    m->stats.slabs++;
    m->stats.mapped_bytes += size;
    return TCL_OK;
}

tcl_status tcl_jit_memory_reserve(tcl_jit_memory *m, size_t bytes) {
    m->expected = bytes;
    tcl_error_clear(&m->error);
    if (bytes > SIZE_MAX / 4) return tcl_fail(&m->error, TCL_ERR_MEMORY, "an object whose sections need %zu bytes", bytes);
    if (!m->spare && !(m->spare = calloc(1, sizeof *m->spare))) return tcl_fail(&m->error, TCL_ERR_MEMORY, "out of memory");
    size_t need = bytes + 2 * m->page; /* code and writable data on pages of their own */
    slab *s = m->slabs;
    if (s && s->rw_bottom - s->exec_top >= need) return TCL_OK;
    return open_slab(m, need);
}

static size_t add_capped(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

static uint64_t read_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t read_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint16_t read_u16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

size_t tcl_jit_memory_room_for(const void *object, size_t size) {
    const unsigned char *e = object;
    size_t fallback = add_capped(add_capped(size, size), 4096);
    const uint16_t one = 1;
    int host_data = *(const unsigned char *)&one == 1 ? 1 : 2; /* ELFDATA2LSB or ELFDATA2MSB */
    if (size < 64 || memcmp(e, "\177ELF", 4) != 0 || e[4] != 2 || e[5] != host_data) return fallback;
    uint64_t shoff = read_u64(e + 40);
    uint16_t shentsize = read_u16(e + 58), shnum = read_u16(e + 60);
    if (shentsize < 64 || shoff > size || (size - shoff) / shentsize < shnum) return fallback;
    size_t room = 4096;
    for (uint16_t i = 0; i < shnum; i++) {
        const unsigned char *sh = e + shoff + (size_t)i * shentsize;
        uint32_t type = read_u32(sh + 4);
        uint64_t flags = read_u64(sh + 8), bytes = read_u64(sh + 32), align = read_u64(sh + 48);
        if (bytes > SIZE_MAX / 64 || align > SIZE_MAX / 64) return SIZE_MAX;
        if (flags & 2) room = add_capped(room, (size_t)bytes + (size_t)align); /* SHF_ALLOC */
        uint64_t offset = read_u64(sh + 24);
        if (type == 2 && offset <= size && bytes <= size - offset) { /* SHT_SYMTAB: common symbols */
            for (uint64_t at = offset; at + 24 <= offset + bytes; at += 24) {
                const unsigned char *sym = e + at;
                if (read_u16(sym + 6) != 0xfff2) continue; /* SHN_COMMON: its value is the alignment */
                uint64_t sym_size = read_u64(sym + 16), sym_align = read_u64(sym + 8);
                if (sym_size > SIZE_MAX / 64 || sym_align > SIZE_MAX / 64) return SIZE_MAX;
                room = add_capped(room, (size_t)sym_size + (size_t)sym_align);
            }
        }
        /* SHT_RELA (24-byte entries), SHT_REL (16): a stub and a GOT entry each, at most */
        if (type == 4) room = add_capped(room, (size_t)(bytes / 24) * 32);
        if (type == 9) room = add_capped(room, (size_t)(bytes / 16) * 32);
    }
    return room;
}

size_t tcl_jit_memory_last_used(const tcl_jit_memory *m) { return m->last_used; }
const tcl_error *tcl_jit_memory_error(const tcl_jit_memory *m) { return &m->error; }
void tcl_jit_memory_set_limit(tcl_jit_memory *m, size_t bytes) { m->limit = bytes; }
tcl_jit_memory_stats tcl_jit_memory_get_stats(const tcl_jit_memory *m) { return m->stats; }

void *tcl_jit_memory_create_context(void *memory) {
    tcl_jit_memory *m = memory;
    object_memory *o = m->spare ? m->spare : calloc(1, sizeof *o);
    m->spare = NULL;
    if (!o) return NULL; /* not reserved, and no memory (the reservation makes this one) */
    o->memory = m;
    m->last_used = 0;
    return o;
}

void tcl_jit_memory_notify_terminating(void *memory) { (void)memory; }

/* The slab the object's sections go into: the open one, which tcl_jit_memory_reserve made
 * room in. */
static slab *object_slab(object_memory *o) {
    if (o->slab) return o->slab;
    tcl_jit_memory *m = o->memory;
    slab *s = m->slabs;
    if (!s) return NULL;
    o->slab = s;
    o->exec_start = o->exec_end = s->exec_top;
    o->rw_start = o->rw_end = s->rw_bottom;
    s->objects++;
    m->stats.objects++;
    return s;
}

/* Code and read-only data go up from the slab's start, writable data down from its end, never
 * on one page (a page has one protection). */
static uint8_t *allocate(object_memory *o, uintptr_t size, unsigned alignment, bool executable_or_read_only) {
    if (!o) return NULL;
    tcl_jit_memory *m = o->memory;
    slab *s = object_slab(o);
    if (!s) return NULL;
    size_t align = alignment ? alignment : 1;
    size_t at;
    if (executable_or_read_only) {
        size_t limit = page_floor(m, s->rw_bottom);
        at = round_up(s->exec_top, align);
        /* the read+execute page this continues is written again while the object links; where
         * the system refuses, the object starts on a page of its own */
        if (at < s->protected_end) {
            size_t from = page_floor(m, at);
            if (mprotect(s->base + from, s->protected_end - from, PROT_READ | PROT_WRITE) == 0) s->protected_end = from;
            else at = round_up(s->protected_end, align);
        }
        if (at > limit || limit - at < size) goto full;
        o->used += at + size - s->exec_top;
        s->exec_top = o->exec_end = at + size;
    } else {
        size_t limit = round_up(s->exec_top, m->page);
        if (s->rw_bottom < limit || s->rw_bottom - limit < size) goto full;
        at = (s->rw_bottom - size) / align * align;
        if (at < limit) goto full;
        o->used += s->rw_bottom - at;
        s->rw_bottom = o->rw_start = at;
    }
    m->last_used = o->used;
    return s->base + at;
full:
    tcl_fail(&m->error, TCL_ERR_MEMORY, "a section of %zu bytes does not fit the kernel's slab", (size_t)size);
    return NULL;
}

uint8_t *tcl_jit_memory_allocate_code(void *object, uintptr_t size, unsigned alignment, unsigned section_id,
                                      const char *section_name) {
    (void)section_id;
    (void)section_name;
    return allocate(object, size, alignment, true);
}

uint8_t *tcl_jit_memory_allocate_data(void *object, uintptr_t size, unsigned alignment, unsigned section_id,
                                      const char *section_name, int read_only) {
    (void)section_id;
    (void)section_name;
    return allocate(object, size, alignment, read_only != 0);
}

/* The pages of [from, to) within the slab: first and one past the last page index. */
static void page_span(const tcl_jit_memory *m, size_t from, size_t to, size_t *first, size_t *end) {
    *first = from / m->page;
    *end = to > from ? (to + m->page - 1) / m->page : *first;
}

/* Adds delta to the users of the pages the object's sections are on. */
static void count_users(object_memory *o, int delta) {
    tcl_jit_memory *m = o->memory;
    slab *s = o->slab;
    for (int part = 0; part < 2; part++) {
        size_t first, end;
        if (part) page_span(m, o->rw_start, o->rw_end, &first, &end);
        else page_span(m, o->exec_start, o->exec_end, &first, &end);
        for (size_t p = first; p < end; p++) {
            s->page_users[p] = (uint32_t)((int64_t)s->page_users[p] + delta);
            /* a page no live object uses goes back to the system (its protection stays) */
            if (!s->page_users[p]) madvise(s->base + p * m->page, m->page, MADV_DONTNEED);
        }
    }
}

/* Makes the written code pages read+execute again (those of the object being linked, and the
 * page of earlier objects it continued); false with errno when the system refuses. */
static bool protect_code(const tcl_jit_memory *m, slab *s) {
    size_t end = round_up(s->exec_top, m->page);
    if (end <= s->protected_end) return true;
    if (mprotect(s->base + s->protected_end, end - s->protected_end, PROT_READ | PROT_EXEC) != 0) return false;
    s->protected_end = end;
    return true;
}

int tcl_jit_memory_finalize(void *object, char **message) {
    object_memory *o = object;
    if (!o || !o->slab) return 0; /* nothing allocated: nothing to protect */
    if (!protect_code(o->memory, o->slab)) {
        char text[96];
        snprintf(text, sizeof text, "making kernel code executable failed (%s)", strerror(errno));
        *message = strdup(text);
        return 1;
    }
    /* no instruction cache holds the old bytes (a no-op on x86) */
    __builtin___clear_cache((char *)o->slab->base + o->exec_start, (char *)o->slab->base + o->exec_end);
    o->linked = true;
    count_users(o, +1);
    o->memory->stats.used_bytes += o->used;
    return 0;
}

void tcl_jit_memory_destroy(void *object) {
    object_memory *o = object;
    if (!o) return;
    tcl_jit_memory *m = o->memory;
    slab *s = o->slab;
    if (s) {
        if (o->linked) {
            m->stats.used_bytes -= o->used;
            count_users(o, -1);
        } else {
            (void)protect_code(m, s); /* a link that failed: the pages it continued run again */
        }
        s->objects--;
        m->stats.objects--;
        if (!s->objects) {
            slab **link = &m->slabs;
            while (*link != s) link = &(*link)->next;
            if (link != &m->slabs) { /* an old slab: gone */
                *link = s->next;
                unmap(m, s);
            } else { /* the open slab: empty again */
                madvise(s->base, s->size, MADV_DONTNEED);
                mprotect(s->base, s->size, PROT_READ | PROT_WRITE);
                memset(s->page_users, 0, s->size / m->page * sizeof *s->page_users);
                s->exec_top = s->protected_end = 0;
                s->rw_bottom = s->size;
            }
        }
    }
    free(o);
}
