/*
 * tb_reduce_plugin._scan: the native Chrome trace JSON scanner.
 *
 * Why: decoding each block of events into Python objects (msgspec) and gathering
 * their fields into columns costs ~70 % of indexing a Kineto trace. This walks a
 * block `[{...},{...}]` once and fills the event model's columns directly: phase
 * code, ts, dur, interned name / category / pid / tid ids, the flow key, the flow
 * binding point and instant scope, and each event's byte span, creating a Python
 * object only for a value never seen before.
 *
 * It is a fast path, not a second parser with its own rules: it accepts only the
 * plain case (every element an object; known fields of the types `model.table.ChromeEvent`
 * takes without coercion; valid UTF-8; no lone surrogate escapes; numbers it can
 * convert exactly) and answers -1 ("not mine") for anything else, which the caller
 * then decodes with the pure-Python path. So both paths give the same table for
 * every input, and this code never decides what malformed text means.
 *
 * Interning goes into the caller's `Interner`s (a dict value -> id and a list of
 * values, first seen first), so blocks decoded either way share one set of ids; a
 * private hash table of the values' bytes sits in front of each dict so that a
 * value already seen costs no Python object. Flow keys are the exception: nearly
 * every one is new (an id per flow) and the table never needs their values, so they
 * are interned here alone, as bytes (`Scanner.flow_ids` interns the pure path's).
 *
 * Every read is bounds-checked against the end of the block; nesting is limited.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_NUMBER 64

/* Numbers the exact fast path cannot take are converted by the C library's strtod in the
 * "C" locale (correctly rounded, as CPython's own dtoa is), through a locale object made
 * once: the scan runs with the GIL released, and PyOS_string_to_double must not be called
 * then (its big-number pool is guarded by the GIL: two threads scanning at once corrupted
 * the heap). Without strtod_l such numbers are handed back to the pure path. */
#if defined(__GLIBC__) || defined(__APPLE__) || defined(__FreeBSD__)
#define HAVE_STRTOD_L 1
#ifdef __APPLE__
#include <xlocale.h>
#endif
static locale_t c_numeric = (locale_t)0;
#endif

/* ---- a byte-keyed hash table in front of an Interner ------------------------------ */

/* 16 bytes: the flow keys' table holds a slot per flow (millions), probed at random, so
 * a slot half the size is half the memory and fewer cache misses. The arena is limited to
 * 4 GiB of keys (`ARENA_MAX`): far past any memory budget of distinct strings. */
typedef struct {
    uint32_t hash;  /* the key's hash, its low 32 bits (the slot is found by its low bits) */
    uint32_t off;   /* key bytes in the arena */
    uint32_t len;
    int32_t id;     /* -1: empty slot */
} Slot;
#define ARENA_MAX UINT32_MAX

typedef struct {
    Slot *slots;
    size_t cap;   /* power of two */
    size_t used;
    char *arena;
    size_t arena_len, arena_cap;
    size_t last_off, last_len;  /* the key seen last (a trace repeats its pid, tid, category) */
    int32_t last_id;
    PyThreadState **released;  /* where the scan keeps its thread state while the GIL is released */
    PyObject *ids;     /* dict: value -> id (the Interner's; a reference held) */
    PyObject *values;  /* list of values */
    /* A private table (`Scanner(..., private=True)`): its dict and list are filled by this
     * table alone, so a miss takes the next id at once, without the GIL, and the value's
     * Python object is made when the scan ends (`table_settle`): two scanners on two
     * threads then never wait for each other. Misses not yet settled: keys in the arena. */
    int private_;
    /* A table of keys only (flow keys): no dict or list; a miss takes the next id, and a
     * private one keeps its keys pending for the table that adopts them (`adopt_flows`). */
    int keys_only;
    int32_t count;     /* ids given (private, keys only): settled values + pending */
    size_t *pending;   /* arena offsets and lengths, two per pending key */
    size_t pending_n, pending_cap;
    int broken;        /* a settling failed: the dict and list no longer match the slots */
} Table;

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* Eight bytes at a time (a key is a name: tens of bytes), then the tail. */
static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ mix64(w)) * 0x9E3779B97F4A7C15ULL;
    }
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    h = (h ^ mix64(w ^ ((uint64_t)(n - i) << 56))) * 0x9E3779B97F4A7C15ULL;
    return mix64(h);
}

static int table_init(Table *t, PyObject *ids, PyObject *values) {
    t->cap = 1024;
    t->used = 0;
    t->slots = malloc(t->cap * sizeof(Slot));
    t->arena_cap = 16384;
    t->arena_len = 0;
    t->last_id = -1;
    t->arena = malloc(t->arena_cap);
    if (!t->slots || !t->arena) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) t->slots[i].id = -1;
    Py_XINCREF(ids);
    Py_XINCREF(values);
    t->ids = ids;
    t->values = values;
    t->private_ = 0;
    t->keys_only = ids == NULL;
    t->count = 0;
    t->pending = NULL;
    t->pending_n = t->pending_cap = 0;
    t->broken = 0;
    return 0;
}

static void table_free(Table *t) {
    free(t->slots);
    free(t->arena);
    free(t->pending);
    t->slots = NULL;
    t->arena = NULL;
    t->pending = NULL;
    Py_CLEAR(t->ids);
    Py_CLEAR(t->values);
}

static size_t table_bytes(const Table *t) {
    return t->cap * sizeof(Slot) + t->arena_cap + t->pending_cap * 2 * sizeof(size_t);
}

static int table_grow(Table *t) {
    size_t cap = t->cap * 2;
    Slot *slots = malloc(cap * sizeof(Slot));
    if (!slots) return -1;  /* no Python error yet: the scan reports it with the GIL held */
    for (size_t i = 0; i < cap; i++) slots[i].id = -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].id < 0) continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].id >= 0) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The id of `obj` in the Interner: the existing one (Python equality: 1 == 1.0), or the next. */
static int32_t interner_id(Table *t, PyObject *obj) {
    PyObject *found = PyDict_GetItemWithError(t->ids, obj);
    if (found) {
        long v = PyLong_AsLong(found);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < 0 || v > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "interned id out of range");
            return -1;
        }
        return (int32_t)v;
    }
    if (PyErr_Occurred()) return -1;
    Py_ssize_t n = PyList_GET_SIZE(t->values);
    if (n >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct values");
        return -1;
    }
    PyObject *id = PyLong_FromSsize_t(n);
    if (!id) return -1;
    int rc = PyDict_SetItem(t->ids, obj, id);
    Py_DECREF(id);
    if (rc < 0 || PyList_Append(t->values, obj) < 0) return -1;
    return (int32_t)n;
}

/* Kinds of keys (first byte of a key): the value a key stands for. */
enum { K_NONE = 'n', K_STR = 's', K_INT = 'i', K_FLOW = 'f' };

/* Look `key` up; on a miss `make` builds the Python value and the Interner gives its id. */
typedef PyObject *(*MakeFn)(const char *key, size_t len, void *ctx);

static int32_t table_intern_hashed(Table *t, const char *key, size_t len, uint64_t h, MakeFn make, void *ctx);

static int32_t table_intern(Table *t, const char *key, size_t len, MakeFn make, void *ctx) {
    if (t->last_id >= 0 && t->last_len == len && memcmp(t->arena + t->last_off, key, len) == 0) return t->last_id;
    return table_intern_hashed(t, key, len, hash_bytes(key, len), make, ctx);
}

/* `table_intern` with the key's hash computed already (`adopt_flows` hashes a batch of
 * keys first and asks for their slots' memory ahead). */
static int32_t table_intern_hashed(Table *t, const char *key, size_t len, uint64_t h, MakeFn make, void *ctx) {
    size_t j = h & (t->cap - 1);
    while (t->slots[j].id >= 0) {
        Slot *s = &t->slots[j];
        if (s->hash == (uint32_t)h && s->len == len && memcmp(t->arena + s->off, key, len) == 0) {
            t->last_off = s->off;
            t->last_len = len;
            t->last_id = s->id;
            return s->id;
        }
        j = (j + 1) & (t->cap - 1);
    }
    int32_t id;
    if (len > ARENA_MAX - t->arena_len) return -1;  /* before an id is given: the tables stay as they were */
    if (t->private_ || t->keys_only) {  /* the next id now; the object (if any) when the scan ends */
        if (t->count == INT32_MAX) return -1;
        if (t->private_ && t->pending_n == t->pending_cap) {
            size_t cap = t->pending_cap ? 2 * t->pending_cap : 256;
            size_t *p = realloc(t->pending, cap * 2 * sizeof(size_t));
            if (!p) return -1;
            t->pending = p;
            t->pending_cap = cap;
        }
        id = t->count;
    } else {
        /* A value never seen: its Python object and id, with the GIL (released while scanning). */
        PyThreadState *ts = t->released ? *t->released : NULL;
        if (ts) PyEval_RestoreThread(ts);
        PyObject *obj = make(key, len, ctx);
        id = obj ? interner_id(t, obj) : -1;
        Py_XDECREF(obj);
        if (ts) *t->released = PyEval_SaveThread();
        if (id < 0) return -1;
    }
    if (t->arena_len + len > t->arena_cap) {
        size_t cap = t->arena_cap;
        while (t->arena_len + len > cap) cap *= 2;
        char *arena = realloc(t->arena, cap);
        if (!arena) return -1;
        t->arena = arena;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, key, len);
    if (t->private_) {
        t->pending[2 * t->pending_n] = t->arena_len;
        t->pending[2 * t->pending_n + 1] = len;
        t->pending_n++;
    }
    if (t->private_ || t->keys_only) t->count++;
    Slot *s = &t->slots[j];
    s->hash = (uint32_t)h;
    s->off = (uint32_t)t->arena_len;
    s->len = (uint32_t)len;
    s->id = id;
    t->arena_len += len;
    t->last_off = s->off;
    t->last_len = len;
    t->last_id = id;
    if (++t->used * 2 > t->cap && table_grow(t) < 0) return -1;
    return id;
}

/* A private table's pending keys made Python values, appended in id order (GIL held).
 * Distinct keys are distinct values (a key is the value's kind and exact bytes), so
 * each is new to the dict; one found there means the table is not private after all. */
static int table_settle(Table *t, MakeFn make, void *ctx) {
    for (size_t i = 0; i < t->pending_n; i++) {
        PyObject *obj = make(t->arena + t->pending[2 * i], t->pending[2 * i + 1], ctx);
        if (!obj) goto fail;
        Py_ssize_t n = PyList_GET_SIZE(t->values);
        int found = PyDict_Contains(t->ids, obj);
        if (found != 0) {
            if (found > 0) PyErr_SetString(PyExc_RuntimeError, "a private table's dict was changed");
            Py_DECREF(obj);
            goto fail;
        }
        PyObject *id = PyLong_FromSsize_t(n);
        int rc = id ? PyDict_SetItem(t->ids, obj, id) : -1;
        Py_XDECREF(id);
        if (rc < 0 || PyList_Append(t->values, obj) < 0) {
            Py_DECREF(obj);
            goto fail;
        }
        Py_DECREF(obj);
    }
    t->pending_n = 0;
    return 0;
fail:
    t->broken = 1;
    return -1;
}

/* A scalar key -> its Python value: None, a str (UTF-8, already checked) or an int64. */
static PyObject *make_scalar(const char *key, size_t len, void *ctx) {
    (void)ctx;
    if (len >= 1 && key[0] == K_STR) return PyUnicode_DecodeUTF8(key + 1, (Py_ssize_t)(len - 1), "strict");
    if (len == 9 && key[0] == K_INT) {
        int64_t v;
        memcpy(&v, key + 1, 8);
        return PyLong_FromLongLong(v);
    }
    Py_RETURN_NONE;
}

/* ---- the scanner -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Table names, cats, pids, tids, flows;
    char *scratch;  /* key being built: kind byte + unescaped text */
    size_t scratch_cap;
    /* While a scan runs the GIL is released (other threads of a server go on), and taken
     * back only to make the Python object of a value never seen before. */
    PyThreadState *released;
    int busy;
} Scanner;

typedef struct {
    const uint8_t *p, *end;
} Cursor;

/* The scanner's per-token steps inlined where they are called: out of line, each call of
 * scan_string (every key and string value) set up its vector constants and returned its
 * pointers through memory; inlined into the event and args walks, the scan of a Kineto
 * trace's text went from ~350 to ~289 ns an event, and with skip_value inlined too (only
 * objects and arrays recurse, through skip_container) to ~265 (`bench/bench_scan.py`). */
#if defined(__GNUC__)
#define HOT_INLINE static inline __attribute__((always_inline))
#else
#define HOT_INLINE static inline
#endif

static inline void skip_ws(Cursor *c) {
    const uint8_t *p = c->p, *end = c->end;
    while (p < end && *p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    c->p = p;
}

static inline int hexval(uint8_t ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static int read_hex4(const uint8_t *p, const uint8_t *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = (v << 4) | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (2-4), or 0 (what `bytes.decode` refuses). */
static int utf8_len(const uint8_t *p, const uint8_t *end) {
    uint8_t b = p[0];
    if (b >= 0xC2 && b <= 0xDF) {
        if (end - p >= 2 && (p[1] & 0xC0) == 0x80) return 2;
        return 0;
    }
    if (b >= 0xE0 && b <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (b == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (b == 0xED && p[1] >= 0xA0) return 0; /* surrogates */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (b == 0xF0 && p[1] < 0x90) return 0;
        if (b == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

/* A string at c->p (on its opening quote). Checks it (control characters, escapes,
 * UTF-8, no lone surrogate escape); sets [*s, *e) to its raw contents and *escaped.
 * 0 on success, -1 when it is not the plain case. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* Whether any byte of w is '"', '\\', a control character or not ASCII (SWAR). */
static inline int special8(uint64_t w) {
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    uint64_t zq = (q - ONES) & ~q, zb = (b - ONES) & ~b;
    uint64_t lt = w - ONES * 0x20;  /* a byte below 0x20 borrows: its high bit set where w's is not */
    return ((zq | zb | lt | w) & HIGHS) != 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <emmintrin.h>
/* The first byte from p on that `special8` would flag ('"', '\\', a control character or
 * not ASCII), sixteen bytes at a time (SSE2: every x86-64); or where fewer than sixteen are
 * left. A signed compare with 0x20 flags the bytes from 0x80 on too. Names and args of
 * real traces run to tens of bytes: the eight-byte loop found a run's end, then walked to
 * the byte one at a time. */
#define PLAIN_RUN_BYTES 16  /* plain_run stops on a flagged byte, or with fewer than this left */
static inline const uint8_t *plain_run(const uint8_t *p, const uint8_t *end) {
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)p);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)),
                                 _mm_cmplt_epi8(v, space));
        int bits = _mm_movemask_epi8(m);
        if (bits) return p + __builtin_ctz((unsigned)bits);
        p += 16;
    }
    return p;
}
#else
#define PLAIN_RUN_BYTES PTRDIFF_MAX  /* no vector loop: the eight-byte one does it all */
static inline const uint8_t *plain_run(const uint8_t *p, const uint8_t *end) {
    (void)end;
    return p;
}
#endif

HOT_INLINE int scan_string(Cursor *c, const uint8_t **s, const uint8_t **e, int *escaped) {
    const uint8_t *p = c->p + 1, *end = c->end;
    *escaped = 0;
    *s = p;
    while (p < end) {
        p = plain_run(p, end);
        while (end - p >= 8 && end - p < PLAIN_RUN_BYTES) {  /* what plain_run leaves: eight bytes at a time */
            uint64_t w;
            memcpy(&w, p, 8);
            if (special8(w)) break;
            p += 8;
        }
        if (p >= end) break;
        uint8_t ch = *p;
        if (ch == '"') {
            *e = p;
            c->p = p + 1;
            return 0;
        }
        if (ch < 0x20) return -1;
        if (ch == '\\') {
            *escaped = 1;
            if (end - p < 2) return -1;
            uint8_t x = p[1];
            if (x == 'u') {
                unsigned u;
                if (read_hex4(p + 2, end, &u) < 0) return -1;
                p += 6;
                if (u >= 0xD800 && u <= 0xDBFF) {
                    unsigned lo;
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || read_hex4(p + 2, end, &lo) < 0) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return -1;
                    p += 6;
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return -1;
                }
                continue;
            }
            if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' || x == 'r' || x == 't') {
                p += 2;
                continue;
            }
            return -1;
        }
        if (ch >= 0x80) {
            int n = utf8_len(p, end);
            if (!n) return -1;
            p += n;
            continue;
        }
        p++;
    }
    return -1;
}

static void put_utf8(char *out, size_t *n, unsigned cp) {
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int ensure_scratch(Scanner *self, size_t need) {
    if (need <= self->scratch_cap) return 0;
    size_t cap = self->scratch_cap ? self->scratch_cap : 256;
    while (cap < need) cap *= 2;
    char *b = realloc(self->scratch, cap);
    if (!b) return -1;
    self->scratch = b;
    self->scratch_cap = cap;
    return 0;
}

/* The key of a checked string: 's' + its text as UTF-8 (escapes resolved), in scratch. */
static int string_key(Scanner *self, const uint8_t *s, const uint8_t *e, int escaped, size_t *len) {
    size_t n = (size_t)(e - s);
    if (ensure_scratch(self, n + 1) < 0) return -1;
    char *out = self->scratch;
    out[0] = K_STR;
    if (!escaped) {
        memcpy(out + 1, s, n);
        *len = n + 1;
        return 0;
    }
    size_t k = 1;
    const uint8_t *p = s;
    while (p < e) {  /* already checked by scan_string: every escape is complete */
        if (*p != '\\') {
            out[k++] = (char)*p++;
            continue;
        }
        uint8_t x = p[1];
        if (x == 'u') {
            unsigned u = 0, lo = 0;
            read_hex4(p + 2, e, &u);
            p += 6;
            if (u >= 0xD800 && u <= 0xDBFF) {
                read_hex4(p + 2, e, &lo);
                p += 6;
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(out, &k, u);  /* at most as long as the escape it replaces */
            continue;
        }
        char r = (char)x;
        if (x == 'b') r = '\b';
        else if (x == 'f') r = '\f';
        else if (x == 'n') r = '\n';
        else if (x == 'r') r = '\r';
        else if (x == 't') r = '\t';
        out[k++] = r;
        p += 2;
    }
    *len = k;
    return 0;
}

/* A JSON number at c->p. Sets *is_int (no fraction, no exponent) and its value: *iv
 * when it is an integer that fits int64, *dv (the correctly rounded double) always
 * when it converts. -1 for malformed text or a number the fast path leaves alone. */
static int scan_number(Cursor *c, int *is_int, int64_t *iv, double *dv) {
    const uint8_t *p = c->p, *end = c->end, *start = p;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return -1;
    const uint8_t *digits = p;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return -1;
    }
    size_t int_digits = (size_t)(p - digits);
    size_t frac_digits = 0;
    int has_exp = 0;
    const uint8_t *frac = NULL;
    if (p < end && *p == '.') {
        p++;
        frac = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        frac_digits = (size_t)(p - frac);
        if (!frac_digits) return -1;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        has_exp = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        const uint8_t *ed = p;
        while (p < end && *p >= '0' && *p <= '9') p++;
        if (p == ed) return -1;
    }
    size_t len = (size_t)(p - start);
    if (len >= MAX_NUMBER) return -1;
    c->p = p;
    *is_int = !frac && !has_exp;
    if (*is_int) {
        if (int_digits > 18) return -1;  /* beyond int64 or near it: the pure path decides */
        int64_t v = 0;
        for (const uint8_t *q = digits; q < digits + int_digits; q++) v = v * 10 + (*q - '0');
        *iv = neg ? -v : v;
        *dv = (double)*iv;
        return 0;
    }
    /* Exact fast path (Clinger): a mantissa below 2^53 and a power of ten up to 22 are
     * both exact doubles, so one division rounds correctly. */
    if (!has_exp && int_digits + frac_digits <= 19) {
        static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                       1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
        uint64_t m = 0;  /* at most 19 digits: no overflow */
        for (const uint8_t *q = digits; q < digits + int_digits; q++) m = m * 10 + (uint64_t)(*q - '0');
        for (const uint8_t *q = frac; q < frac + frac_digits; q++) m = m * 10 + (uint64_t)(*q - '0');
        if (m <= (1ULL << 53)) {
            double v = (double)m / pow10[frac_digits];
            *dv = neg ? -v : v;
            return 0;
        }
    }
    char buf[MAX_NUMBER + 1];
    memcpy(buf, start, len);
    buf[len] = 0;
#ifdef HAVE_STRTOD_L
    if (c_numeric == (locale_t)0) return -1;
    char *stop = NULL;
    double v = strtod_l(buf, &stop, c_numeric);  /* no Python call: the GIL may be released here */
    if (stop != buf + len) return -1;
#else
    (void)buf;
    return -1;
#endif
    if (!(v - v == 0.0)) return -1;  /* overflowed to infinity: the pure path decides */
    *dv = v;
    return 0;
}

/* An object member's key at c->p and the colon after it; 0, or -1 if not there. */
HOT_INLINE int member_key(Cursor *c, const uint8_t **s, const uint8_t **e, int *esc) {
    if (c->p >= c->end || *c->p != '"' || scan_string(c, s, e, esc) < 0) return -1;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_ws(c);
    return 0;
}

/* After a member or element: 1 and past the comma when another follows, 0 and past
 * `close` at the end, -1 for anything else. */
HOT_INLINE int next_member(Cursor *c, uint8_t close) {
    skip_ws(c);
    if (c->p >= c->end) return -1;
    if (*c->p == ',') {
        c->p++;
        skip_ws(c);
        return 1;
    }
    if (*c->p == close) {
        c->p++;
        return 0;
    }
    return -1;
}

static int skip_container(Cursor *c, int depth, uint8_t close);

static int match_word(Cursor *c, const char *w, size_t n) {
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return -1;
    c->p += n;
    return 0;
}

/* Any JSON value, skipped (checked, never converted): inlined where it is called, so a
 * scalar (most of an event's args) costs no call; only objects and arrays recurse. */
HOT_INLINE int skip_value(Cursor *c, int depth) {
    if (c->p >= c->end) return -1;
    switch (*c->p) {
    case '{':
        return skip_container(c, depth, '}');
    case '[':
        return skip_container(c, depth, ']');
    case '"': {
        const uint8_t *s, *e;
        int esc;
        return scan_string(c, &s, &e, &esc);
    }
    case 't':
        return match_word(c, "true", 4);
    case 'f':
        return match_word(c, "false", 5);
    case 'n':
        return match_word(c, "null", 4);
    default: {  /* a number: its grammar only (a skipped value is never converted) */
        const uint8_t *p = c->p;
        if (*p == '-') p++;
        if (p >= c->end || *p < '0' || *p > '9') return -1;
        if (*p == '0') p++;
        else while (p < c->end && *p >= '0' && *p <= '9') p++;
        if (p < c->end && *p == '.') {
            const uint8_t *f = ++p;
            while (p < c->end && *p >= '0' && *p <= '9') p++;
            if (p == f) return -1;
        }
        if (p < c->end && (*p == 'e' || *p == 'E')) {
            p++;
            if (p < c->end && (*p == '+' || *p == '-')) p++;
            const uint8_t *ed = p;
            while (p < c->end && *p >= '0' && *p <= '9') p++;
            if (p == ed) return -1;
        }
        c->p = p;
        return 0;
    }
    }
}

static int skip_container(Cursor *c, int depth, uint8_t close) {
    if (depth > MAX_DEPTH) return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        const uint8_t *s, *e;
        int esc, more;
        if (close == '}' && member_key(c, &s, &e, &esc) < 0) return -1;
        if (skip_value(c, depth + 1) < 0 || (more = next_member(c, close)) < 0) return -1;
        if (!more) return 0;
    }
}

/* An event's args: skipped, noting whether the object may have a `step_num` key (the
 * caller decodes those events and applies `model.table.TableBuilder._find_steps`'s rule). */
static int skip_args(Cursor *c, int *step) {
    if (c->p >= c->end || *c->p != '{') return skip_value(c, 1);
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return 0;
    }
    for (;;) {
        const uint8_t *s, *e;
        int esc, more;
        if (member_key(c, &s, &e, &esc) < 0) return -1;
        /* An escaped key may spell it too: flagged events are only looked at again. */
        if (esc || (e - s == 8 && memcmp(s, "step_num", 8) == 0)) *step = 1;
        if (skip_value(c, 2) < 0 || (more = next_member(c, '}')) < 0) return -1;
        if (!more) return 0;
    }
}

/* A scalar field (name, cat, pid, tid, id): what it held. */
enum { V_ABSENT = 0, V_NULL, V_STR, V_INT };

typedef struct {
    int kind;
    const uint8_t *s, *e;  /* V_STR: raw contents */
    int escaped;
    int64_t iv;
} Scalar;

/* Reads a value for a field typed str | int | None (allow_int) or str | None. */
static int scan_scalar(Cursor *c, Scalar *v, int allow_int) {
    if (c->p >= c->end) return -1;
    uint8_t ch = *c->p;
    if (ch == '"') {
        v->kind = V_STR;
        return scan_string(c, &v->s, &v->e, &v->escaped);
    }
    if (ch == 'n') {
        v->kind = V_NULL;
        return match_word(c, "null", 4);
    }
    if (allow_int && (ch == '-' || (ch >= '0' && ch <= '9'))) {
        int is_int;
        double dv;
        if (scan_number(c, &is_int, &v->iv, &dv) < 0 || !is_int) return -1;
        v->kind = V_INT;
        return 0;
    }
    return -1;
}

static int32_t intern_scalar(Scanner *self, Table *t, const Scalar *v) {
    char key[9];
    size_t len;
    if (v->kind == V_STR) {
        if (string_key(self, v->s, v->e, v->escaped, &len) < 0) return -1;
        return table_intern(t, self->scratch, len, make_scalar, NULL);
    }
    if (v->kind == V_INT) {
        key[0] = K_INT;
        memcpy(key + 1, &v->iv, 8);
        return table_intern(t, key, 9, make_scalar, NULL);
    }
    key[0] = K_NONE;
    return table_intern(t, key, 1, make_scalar, NULL);
}

/* The fields of one event, as the pure path's typed decode takes them. */
enum { F_PH, F_NAME, F_CAT, F_PID, F_TID, F_TS, F_DUR, F_ID, F_ID2, F_BP, F_S, F_ARGS, F_OTHER };

static int field_of(const uint8_t *s, size_t n) {
    switch (n) {
    case 1:
        return s[0] == 's' ? F_S : F_OTHER;
    case 2:
        if (s[0] == 'p' && s[1] == 'h') return F_PH;
        if (s[0] == 't' && s[1] == 's') return F_TS;
        if (s[0] == 'i' && s[1] == 'd') return F_ID;
        if (s[0] == 'b' && s[1] == 'p') return F_BP;
        return F_OTHER;
    case 3:
        if (!memcmp(s, "cat", 3)) return F_CAT;
        if (!memcmp(s, "pid", 3)) return F_PID;
        if (!memcmp(s, "tid", 3)) return F_TID;
        if (!memcmp(s, "dur", 3)) return F_DUR;
        if (!memcmp(s, "id2", 3)) return F_ID2;
        return F_OTHER;
    case 4:
        if (!memcmp(s, "name", 4)) return F_NAME;
        if (!memcmp(s, "args", 4)) return F_ARGS;
        return F_OTHER;
    default:
        return F_OTHER;
    }
}

/* Bits of the flags column. */
#define FLAG_BIND_END 1  /* bp == "e": a flow end that binds to its enclosing slice */
#define FLAG_STEP_KEY 2  /* args has a plain `step_num` key: a step marker, maybe */

typedef struct {
    uint8_t *ph;
    double *ts, *dur;
    int32_t *name, *cat, *pid, *tid, *flow;
    uint8_t *flags, *scope;
    int64_t *start, *end;
    Py_ssize_t cap;
} Out;

/* One event at c->p ('{'): 0 and the columns of row k filled, -1 not the plain case
 * (no Python error set), -2 a Python error. */
static int scan_event(Scanner *self, Cursor *c, const uint8_t *base, Out *o, Py_ssize_t k) {
    const uint8_t *open = c->p;
    Scalar name = {V_ABSENT}, cat = {V_ABSENT}, pid = {V_ABSENT}, tid = {V_ABSENT}, id = {V_ABSENT};
    Scalar bp = {V_ABSENT}, sc = {V_ABSENT};
    uint8_t ph = 0;
    double ts = NAN, dur = NAN;
    unsigned seen = 0;
    int step = 0;
    /* The scalar fields, and which take an integer (str | int | None) besides a string. */
    Scalar *scalars[F_OTHER] = {[F_NAME] = &name, [F_CAT] = &cat, [F_PID] = &pid, [F_TID] = &tid,
                                [F_ID] = &id, [F_BP] = &bp, [F_S] = &sc};
    static const int takes_int[F_OTHER] = {[F_NAME] = 1, [F_PID] = 1, [F_TID] = 1, [F_ID] = 1};
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            const uint8_t *ks, *ke;
            int kesc, more;
            if (member_key(c, &ks, &ke, &kesc) < 0) return -1;
            int f = kesc ? -1 : field_of(ks, (size_t)(ke - ks));
            if (f < 0) return -1;  /* an escaped key may spell a field: the pure path decides */
            if (f != F_OTHER) {
                if (seen & (1u << f)) return -1;  /* a field given twice */
                seen |= 1u << f;
            }
            int rc = 0;
            switch (f) {
            case F_PH: {
                Scalar v;
                if (c->p >= c->end || *c->p != '"' || scan_scalar(c, &v, 0) < 0) return -1;
                if (v.escaped) {  /* one letter once its escapes are resolved? */
                    size_t len;
                    if (string_key(self, v.s, v.e, 1, &len) < 0) return -2;
                    ph = (len == 2 && (uint8_t)self->scratch[1] < 0x80) ? (uint8_t)self->scratch[1] : 0;
                } else {
                    ph = (v.e - v.s == 1 && *v.s < 0x80) ? *v.s : 0;
                }
                break;
            }
            case F_NAME:
            case F_CAT:
            case F_PID:
            case F_TID:
            case F_ID:
            case F_BP:
            case F_S:
                rc = scan_scalar(c, scalars[f], takes_int[f]);
                break;
            case F_TS:
            case F_DUR: {
                int is_int;
                int64_t iv;
                double dv;
                if (c->p >= c->end || !(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) return -1;
                if (scan_number(c, &is_int, &iv, &dv) < 0) return -1;
                if (f == F_TS) ts = dv;
                else dur = dv;
                break;
            }
            case F_ARGS:
                rc = skip_args(c, &step);
                break;
            default:  /* id2 and fields the model does not read */
                rc = skip_value(c, 1);
                break;
            }
            if (rc < 0 || (more = next_member(c, '}')) < 0) return -1;
            if (!more) break;
        }
    }
    int flow = ph == 's' || ph == 't' || ph == 'f';
    if (flow && (id.kind == V_ABSENT || id.kind == V_NULL)) return -1;  /* id2 stands in: the pure path */
    int32_t ids[4];
    if ((ids[0] = intern_scalar(self, &self->names, &name)) < 0) return -2;
    if ((ids[1] = intern_scalar(self, &self->cats, &cat)) < 0) return -2;
    if ((ids[2] = intern_scalar(self, &self->pids, &pid)) < 0) return -2;
    if ((ids[3] = intern_scalar(self, &self->tids, &tid)) < 0) return -2;
    int32_t fk = -1;
    if (flow) {
        size_t idlen;
        /* Room for the id's key and 5 bytes before it, so string_key never moves scratch. */
        if (ensure_scratch(self, (id.kind == V_STR ? (size_t)(id.e - id.s) : 0) + 16) < 0) return -2;
        if (id.kind == V_STR) {
            if (string_key(self, id.s, id.e, id.escaped, &idlen) < 0) return -2;
        } else {
            self->scratch[0] = K_INT;
            memcpy(self->scratch + 1, &id.iv, 8);
            idlen = 9;
        }
        /* the id's key is at the start of scratch: move it up, then put the kind and category first */
        memmove(self->scratch + 5, self->scratch, idlen);
        self->scratch[0] = K_FLOW;
        memcpy(self->scratch + 1, &ids[1], 4);
        if ((fk = table_intern(&self->flows, self->scratch, idlen + 5, NULL, NULL)) < 0) return -2;
    }
    uint8_t scope = 0;
    if (ph == 'i' || ph == 'I' || ph == 'R') {
        if (sc.kind == V_STR && !sc.escaped && sc.e - sc.s == 1) scope = *sc.s == 'g' ? 2 : *sc.s == 'p' ? 1 : 0;
        else if (sc.kind == V_STR && sc.escaped) return -1;
    }
    if (bp.kind == V_STR && bp.escaped) return -1;
    o->ph[k] = ph;
    o->ts[k] = ts;
    o->dur[k] = dur;
    o->name[k] = ids[0];
    o->cat[k] = ids[1];
    o->pid[k] = ids[2];
    o->tid[k] = ids[3];
    o->flow[k] = fk;
    o->flags[k] = (uint8_t)((bp.kind == V_STR && bp.e - bp.s == 1 && *bp.s == 'e') ? FLAG_BIND_END : 0) |
                  (uint8_t)(step ? FLAG_STEP_KEY : 0);
    o->scope[k] = scope;
    o->start[k] = open - base;
    o->end[k] = c->p - base;
    return 0;
}

/* Walks the JSON array `[a, b, ...]` that is the whole of [base, end), calling `element`
 * for each element at its first byte with its index. Returns the element count, -1 when
 * the text is not such an array (or `element` said -1), -2 when `element` set a Python
 * error. Nothing but whitespace may follow the array. */
typedef int (*ElementFn)(Cursor *c, const uint8_t *base, Py_ssize_t k, void *ctx);

static Py_ssize_t walk_array(const uint8_t *base, const uint8_t *end, ElementFn element, void *ctx) {
    Cursor c = {base, end};
    Py_ssize_t n = 0;
    skip_ws(&c);
    if (c.p >= c.end || *c.p != '[') return -1;
    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == ']') {
        c.p++;
    } else {
        for (;;) {
            int rc = element(&c, base, n, ctx), more;
            if (rc < 0) return rc;
            n++;
            if ((more = next_member(&c, ']')) < 0) return -1;
            if (!more) break;
        }
    }
    skip_ws(&c);
    return c.p == c.end ? n : -1;  /* trailing text: the pure path says what it is */
}

typedef struct {
    Scanner *self;
    Out *out;
} EventCtx;

/* More events than the columns' rows: -3, told apart from text outside the plain case. */
#define TOO_FEW_ROWS (-3)

static int event_element(Cursor *c, const uint8_t *base, Py_ssize_t k, void *ctx) {
    EventCtx *e = ctx;
    if (c->p >= c->end || *c->p != '{') return -1;
    if (k >= e->out->cap) return TOO_FEW_ROWS;
    return scan_event(e->self, c, base, e->out, k);
}

static void Scanner_dealloc(Scanner *self) {
    table_free(&self->names);
    table_free(&self->cats);
    table_free(&self->pids);
    table_free(&self->tids);
    table_free(&self->flows);
    free(self->scratch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kw) {
    PyObject *d[5] = {NULL}, *l[5] = {NULL};  /* the flow keys (index 4): a table of keys only */
    int private_ = 0;
    static char *kwlist[] = {"names_ids", "names", "cats_ids", "cats", "pids_ids", "pids",
                             "tids_ids", "tids", "private", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!O!O!O!O!O!O!|$p", kwlist,
                                     &PyDict_Type, &d[0], &PyList_Type, &l[0], &PyDict_Type, &d[1], &PyList_Type, &l[1],
                                     &PyDict_Type, &d[2], &PyList_Type, &l[2], &PyDict_Type, &d[3], &PyList_Type, &l[3],
                                     &private_))
        return -1;
    if (private_) {
        for (int i = 0; i < 4; i++) {
            if (PyDict_GET_SIZE(d[i]) || PyList_GET_SIZE(l[i])) {
                PyErr_SetString(PyExc_ValueError, "a private Scanner starts from empty tables");
                return -1;
            }
        }
    }
    if (self->names.slots) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner already initialised");
        return -1;
    }
    Table *ts[5] = {&self->names, &self->cats, &self->pids, &self->tids, &self->flows};
    for (int i = 0; i < 5; i++) {
        if (table_init(ts[i], d[i], l[i]) < 0) return -1;
        ts[i]->released = &self->released;
        ts[i]->private_ = private_;
    }
    return 0;
}

static int get_out(Py_buffer *b, Py_ssize_t item, const char *what, Py_ssize_t *cap) {
    if (b->itemsize != item || b->len % item) {
        PyErr_Format(PyExc_ValueError, "%s: expected items of %zd bytes", what, item);
        return -1;
    }
    Py_ssize_t n = b->len / item;
    if (*cap < 0 || n < *cap) *cap = n;
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(text, ph, ts, dur, name, cat, pid, tid, flow, flags, scope, start, end) -> int\n\n"
"Scan a block `[{...},...]`, filling row k of each writable column for event k.\n"
"Returns the number of events, -1 when the block is not the plain case (the\n"
"caller decodes it with the pure-Python path), or -3 when it holds more events than\n"
"the columns have rows (nothing read past them). Columns: ph uint8, ts/dur float64,\n"
"name/cat/pid/tid/flow int32, flags/scope uint8, start/end int64 (byte span).");

static PyObject *Scanner_scan(Scanner *self, PyObject *args) {
    Py_buffer text, b[12];
    if (!self->names.slots) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*w*w*w*w*w*w*w*w*w*w*w*w*", &text, &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                          &b[6], &b[7], &b[8], &b[9], &b[10], &b[11]))
        return NULL;
    static const Py_ssize_t sizes[12] = {1, 8, 8, 4, 4, 4, 4, 4, 1, 1, 8, 8};
    static const char *names[12] = {"ph", "ts", "dur", "name", "cat", "pid", "tid", "flow", "flags", "scope",
                                    "start", "end"};
    Py_ssize_t cap = -1, n = 0;
    PyObject *result = NULL;
    for (int i = 0; i < 12; i++)
        if (get_out(&b[i], sizes[i], names[i], &cap) < 0) goto done;
    Out o = {b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, b[6].buf, b[7].buf, b[8].buf,
             b[9].buf, b[10].buf, b[11].buf, cap};
    EventCtx ctx = {self, &o};
    if (self->busy) {  /* one scan at a time: the tables are not shared between threads */
        PyErr_SetString(PyExc_RuntimeError, "this Scanner is scanning in another thread");
        goto done;
    }
    if (self->names.broken || self->cats.broken || self->pids.broken || self->tids.broken || self->flows.broken) {
        PyErr_SetString(PyExc_RuntimeError, "this Scanner's tables were left inconsistent by an earlier error");
        goto done;
    }
    self->busy = 1;
    self->released = PyEval_SaveThread();
    n = walk_array(text.buf, (const uint8_t *)text.buf + text.len, event_element, &ctx);
    PyEval_RestoreThread(self->released);
    self->released = NULL;
    self->busy = 0;
    /* Private tables: the values met are made now (flow keys stay keys: `adopt_flows`). */
    if (self->names.private_ &&
        (table_settle(&self->names, make_scalar, NULL) < 0 || table_settle(&self->cats, make_scalar, NULL) < 0 ||
         table_settle(&self->pids, make_scalar, NULL) < 0 || table_settle(&self->tids, make_scalar, NULL) < 0)) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    if (n == -2) {
        if (!PyErr_Occurred()) PyErr_NoMemory();  /* an allocation failed while the GIL was released */
        goto done;
    }
    result = PyLong_FromSsize_t(n == TOO_FEW_ROWS ? TOO_FEW_ROWS : n < 0 ? -1 : n);
done:
    PyBuffer_Release(&text);
    for (int i = 0; i < 12; i++) PyBuffer_Release(&b[i]);
    return result;
}

static PyObject *Scanner_cache_bytes(Scanner *self, PyObject *unused) {
    (void)unused;
    size_t n = self->scratch_cap;
    Table *ts[5] = {&self->names, &self->cats, &self->pids, &self->tids, &self->flows};
    for (int i = 0; i < 5; i++)
        if (ts[i]->slots) n += table_bytes(ts[i]);
    return PyLong_FromSize_t(n);
}

/* The key the scan gives the flow id `obj` of category `cat`, in scratch, or 0 when no
 * scanned id can equal it (Python equality: True == 1 == 1.0, so integral numbers that
 * fit int64 are keyed as the int; a str that is not valid UTF-8, a float with a
 * fraction, a bigger int, any other kind: never scanned natively). -1: out of memory. */
static int flow_key_of(Scanner *self, int32_t cat, PyObject *obj, size_t *len) {
    int64_t iv = 0;
    const char *utf8 = NULL;
    Py_ssize_t n = 0;
    if (PyUnicode_Check(obj)) {
        utf8 = PyUnicode_AsUTF8AndSize(obj, &n);
        if (!utf8) {  /* a lone surrogate: the scan hands such text back */
            PyErr_Clear();
            return 0;
        }
    } else if (PyLong_Check(obj)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        iv = (int64_t)v;
    } else if (PyFloat_Check(obj)) {
        double d = PyFloat_AS_DOUBLE(obj);
        if (!(d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return 0;
        iv = (int64_t)d;
    } else {
        return 0;
    }
    if (ensure_scratch(self, (size_t)n + 16) < 0) return -1;
    self->scratch[0] = K_FLOW;
    memcpy(self->scratch + 1, &cat, 4);
    if (utf8) {
        self->scratch[5] = K_STR;
        memcpy(self->scratch + 6, utf8, (size_t)n);
        *len = 6 + (size_t)n;
    } else {
        self->scratch[5] = K_INT;
        memcpy(self->scratch + 6, &iv, 8);
        *len = 14;
    }
    return 1;
}

PyDoc_STRVAR(flow_ids_doc,
"flow_ids(cats, ids, others, out) -> None\n\n"
"The flow key ids of events the pure path decoded, in the scan's id space: event k's\n"
"key is (cats[k], ids[k]) (category id, id value), interned in order as the scan\n"
"interns them, into out[k] (int32). Ids no scan can give (see `flow_key_of`) are\n"
"interned in `others`, a dict (category id, id) -> id owned by the caller.");

static PyObject *Scanner_flow_ids(Scanner *self, PyObject *args) {
    Py_buffer cats, out;
    PyObject *ids, *others, *result = NULL;
    if (!self->flows.slots) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*O!O!w*", &cats, &PyList_Type, &ids, &PyDict_Type, &others, &out)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "this Scanner is scanning in another thread");
        goto done;
    }
    if (cats.len != 4 * n || out.len != 4 * n) {
        PyErr_SetString(PyExc_ValueError, "flow_ids: cats and out must hold one int32 per id");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        int32_t cat, id;
        size_t len;
        memcpy(&cat, (const char *)cats.buf + 4 * k, 4);
        PyObject *obj = PyList_GET_ITEM(ids, k);
        int keyed = flow_key_of(self, cat, obj, &len);
        if (keyed < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (keyed) {
            if ((id = table_intern(&self->flows, self->scratch, len, NULL, NULL)) < 0) {
                PyErr_NoMemory();
                goto done;
            }
        } else {
            PyObject *key = Py_BuildValue("(iO)", cat, obj);
            if (!key) goto done;
            PyObject *found = PyDict_GetItemWithError(others, key);
            if (found) {
                long v = PyLong_AsLong(found);
                if (v < 0 || v >= self->flows.count) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "flow_ids: a foreign id in `others`");
                    Py_DECREF(key);
                    goto done;
                }
                id = (int32_t)v;
            } else if (PyErr_Occurred() || self->flows.count == INT32_MAX) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "too many distinct flow keys");
                Py_DECREF(key);
                goto done;
            } else {
                id = self->flows.count;
                PyObject *v = PyLong_FromLong(id);
                int rc = v ? PyDict_SetItem(others, key, v) : -1;
                Py_XDECREF(v);
                if (rc < 0) {
                    Py_DECREF(key);
                    goto done;
                }
                self->flows.count++;
            }
            Py_DECREF(key);
        }
        memcpy((char *)out.buf + 4 * k, &id, 4);
    }
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&cats);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(adopt_flows_doc,
"adopt_flows(private, cat_ids, ids, out) -> int\n\n"
"Flow keys a private Scanner met, interned here in the order given: out[i] (int32) is\n"
"this Scanner's id of the private one's id ids[i] (int32; the order is the caller's:\n"
"the keys' first places in the file). Its keys name its own category ids: `cat_ids`\n"
"(int32) maps them to this Scanner's. Returns how many were adopted.");

static PyTypeObject ScannerType;

#define ADOPT_BATCH 8
#define ADOPT_KEY 48  /* a flow key's bytes: kind, category, id (an int: 9 bytes; a hex string: ~20) */

static PyObject *Scanner_adopt_flows(Scanner *self, PyObject *args) {
    Scanner *other;
    Py_buffer map, ids, out;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "O!y*y*w*", &ScannerType, &other, &map, &ids, &out)) return NULL;
    Table *f = &other->flows;
    if (!self->flows.slots || !f->slots) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner not initialised");
        goto done;
    }
    if (other == self || !f->private_ || self->flows.private_ || self->busy || other->busy) {
        PyErr_SetString(PyExc_ValueError, "adopt_flows: a private Scanner's keys, adopted by a shared one, neither scanning");
        goto done;
    }
    Py_ssize_t pending = (Py_ssize_t)f->pending_n, cats = map.len / 4, n = ids.len / 4;
    if (ids.len % 4 || out.len != ids.len || map.len % 4) {
        PyErr_SetString(PyExc_ValueError, "adopt_flows: ids, out and cat_ids must hold int32s, out one per id");
        goto done;
    }
    /* A flow table holds a slot per flow, far bigger than the caches: each key's slot is a
     * miss. Keys are taken ADOPT_BATCH at a time: copied and re-categorised, hashed, their
     * slots fetched ahead, then interned in order (a key too long for the batch's buffer
     * is interned alone, from scratch). */
    char keys[ADOPT_BATCH][ADOPT_KEY];
    size_t lens[ADOPT_BATCH];
    uint64_t hashes[ADOPT_BATCH];
    for (Py_ssize_t i0 = 0; i0 < n; i0 += ADOPT_BATCH) {
        Py_ssize_t m = n - i0 < ADOPT_BATCH ? n - i0 : ADOPT_BATCH;
        for (Py_ssize_t k = 0; k < m; k++) {
            int32_t which, cat;
            memcpy(&which, (const char *)ids.buf + 4 * (i0 + k), 4);
            if (which < 0 || which >= pending) {
                PyErr_SetString(PyExc_IndexError, "adopt_flows: an id the private Scanner has not given");
                goto done;
            }
            size_t off = f->pending[2 * (size_t)which], len = f->pending[2 * (size_t)which + 1];
            if (len < 5 || off + len > f->arena_len) {
                PyErr_SetString(PyExc_ValueError, "adopt_flows: a damaged key");
                goto done;
            }
            memcpy(&cat, f->arena + off + 1, 4);
            if (cat < 0 || cat >= cats) {
                PyErr_SetString(PyExc_IndexError, "adopt_flows: a category the map does not hold");
                goto done;
            }
            lens[k] = len;
            if (len > ADOPT_KEY) continue;  /* interned alone, below */
            memcpy(keys[k], f->arena + off, len);
            memcpy(keys[k] + 1, (const char *)map.buf + 4 * cat, 4);
            hashes[k] = hash_bytes(keys[k], len);
            __builtin_prefetch(&self->flows.slots[hashes[k] & (self->flows.cap - 1)]);
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            int32_t id;
            if (lens[k] <= ADOPT_KEY) {
                id = table_intern_hashed(&self->flows, keys[k], lens[k], hashes[k], NULL, NULL);
            } else {
                int32_t which, cat;
                memcpy(&which, (const char *)ids.buf + 4 * (i0 + k), 4);
                size_t off = f->pending[2 * (size_t)which];
                if (ensure_scratch(self, lens[k]) < 0) {
                    PyErr_NoMemory();
                    goto done;
                }
                memcpy(self->scratch, f->arena + off, lens[k]);
                memcpy(&cat, self->scratch + 1, 4);
                memcpy(self->scratch + 1, (const char *)map.buf + 4 * cat, 4);
                id = table_intern(&self->flows, self->scratch, lens[k], NULL, NULL);
            }
            if (id < 0) {
                PyErr_NoMemory();
                goto done;
            }
            memcpy((char *)out.buf + 4 * (i0 + k), &id, 4);
        }
    }
    result = PyLong_FromSsize_t(n);
done:
    PyBuffer_Release(&map);
    PyBuffer_Release(&ids);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *Scanner_flow_count(Scanner *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(self->flows.count);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS, scan_doc},
    {"cache_bytes", (PyCFunction)Scanner_cache_bytes, METH_NOARGS,
     "Bytes held by the scanner's own hash tables (for the memory budget)."},
    {"flow_ids", (PyCFunction)Scanner_flow_ids, METH_VARARGS, flow_ids_doc},
    {"adopt_flows", (PyCFunction)Scanner_adopt_flows, METH_VARARGS, adopt_flows_doc},
    {"flow_count", (PyCFunction)Scanner_flow_count, METH_NOARGS,
     "How many distinct flow keys this Scanner has given ids to."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tb_reduce_plugin._scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scans Chrome trace JSON blocks into columns, interning into the given dicts and lists.",
    .tp_methods = Scanner_methods,
    .tp_init = (initproc)Scanner_init,
    .tp_new = PyType_GenericNew,
};

/* ---- spans: where each element of an array block starts and ends ------------------- */

typedef struct {
    int64_t *start, *end;
    Py_ssize_t cap;
} SpanCtx;

static int span_element(Cursor *c, const uint8_t *base, Py_ssize_t k, void *ctx) {
    SpanCtx *sp = ctx;
    const uint8_t *open = c->p;
    if (k >= sp->cap || skip_value(c, 1) < 0) return -1;
    sp->start[k] = open - base;
    sp->end[k] = c->p - base;
    return 0;
}

PyDoc_STRVAR(spans_doc,
"spans(text, start, end) -> int\n\n"
"The byte span of each element of the JSON array `text`, into the int64 buffers;\n"
"returns the count, or -1 when the text is not the plain case (the caller decodes\n"
"it with msgspec, which says what is wrong).");

static PyObject *spans(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer text, bs, be;
    if (!PyArg_ParseTuple(args, "y*w*w*", &text, &bs, &be)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t cap = -1, n = 0;
    if (get_out(&bs, 8, "start", &cap) < 0 || get_out(&be, 8, "end", &cap) < 0) goto done;
    SpanCtx ctx = {bs.buf, be.buf, cap};
    Py_BEGIN_ALLOW_THREADS
    n = walk_array(text.buf, (const uint8_t *)text.buf + text.len, span_element, &ctx);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(n < 0 ? -1 : n);
done:
    PyBuffer_Release(&text);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    return result;
}

/* ---- XSpace: the `step_num` stat of XEvents, without a Python object per event ------- */

enum { SV_NONE = 0, SV_DOUBLE, SV_UINT, SV_INT, SV_STR, SV_REF, SV_UNSET, SV_PYTHON = 255 };

/* A protobuf varint at *p (at most 10 bytes); 0, or -1 when malformed or cut short. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) return -1;
        uint8_t b = *(*p)++;
        if (shift == 63 && b > 1) return -1;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Skips a field of wire type `wt` (varint, fixed64, length-delimited, fixed32); groups
 * and anything else are left to the pure path (-1). */
static int skip_field(const uint8_t **p, const uint8_t *end, unsigned wt) {
    uint64_t v;
    switch (wt) {
    case 0:
        return read_varint(p, end, &v);
    case 1:
        if (end - *p < 8) return -1;
        *p += 8;
        return 0;
    case 2:
        if (read_varint(p, end, &v) < 0 || v > (uint64_t)(end - *p)) return -1;
        *p += v;
        return 0;
    case 5:
        if (end - *p < 4) return -1;
        *p += 4;
        return 0;
    default:
        return -1;
    }
}

typedef struct {
    int kind;
    uint64_t u;
    double d;
    const uint8_t *s, *e;
    int64_t id;
} StatValue;

/* One XStat message [p, end): its metadata id and its value (the last of the oneof). */
static int read_stat(const uint8_t *p, const uint8_t *end, StatValue *sv) {
    memset(sv, 0, sizeof *sv);
    sv->kind = SV_UNSET;
    while (p < end) {
        uint64_t tag, v;
        if (read_varint(&p, end, &tag) < 0) return -1;
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if (field == 0) return -1;
        if (field == 1 && wt == 0) {
            if (read_varint(&p, end, &v) < 0) return -1;
            sv->id = (int64_t)v;
        } else if (field == 2 && wt == 1) {
            if (end - p < 8) return -1;
            memcpy(&sv->d, p, 8);
            p += 8;
            sv->kind = SV_DOUBLE;
        } else if ((field == 3 || field == 4 || field == 7) && wt == 0) {
            if (read_varint(&p, end, &v) < 0) return -1;
            sv->u = v;
            sv->kind = field == 3 ? SV_UINT : field == 4 ? SV_INT : SV_REF;
        } else if (field == 5 && wt == 2) {
            if (read_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p)) return -1;
            sv->s = p;
            sv->e = p + v;
            p += v;
            sv->kind = SV_STR;
        } else if (field == 6 && wt == 2) {
            return -1;  /* bytes: shown as hex, the pure path's rule */
        } else if (skip_field(&p, end, wt) < 0) {
            return -1;
        }
    }
    return 0;
}

/* The first stat of the XEvent [p, end) whose metadata id is one of `ids`. */
static int event_step(const uint8_t *p, const uint8_t *end, const int64_t *ids, Py_ssize_t nids, StatValue *out) {
    memset(out, 0, sizeof *out);
    out->kind = SV_NONE;
    int found = 0;
    while (p < end) {
        uint64_t tag, v;
        if (read_varint(&p, end, &tag) < 0) return -1;
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        if (field == 0) return -1;
        if (field == 4 && wt == 2) {
            if (read_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p)) return -1;
            StatValue sv;
            if (read_stat(p, p + v, &sv) < 0) return -1;  /* the whole event must parse, as in the pure path */
            p += v;
            if (!found) {
                for (Py_ssize_t i = 0; i < nids; i++) {
                    if (ids[i] == sv.id) {
                        *out = sv;
                        found = 1;
                        break;
                    }
                }
            }
        } else if (skip_field(&p, end, wt) < 0) {
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(step_values_doc,
"step_values(data, starts, ends, ids, kind, u64, f64, s, e, quotes)\n\n"
"For each XEvent data[starts[k]:ends[k]], the first stat whose metadata id is in `ids`:\n"
"kind[k] 0 none, 1 double (f64), 2 uint64 / 3 int64 / 5 ref (u64, as bits), 4 string\n"
"(data[s:e]), 6 a stat without a value, 255 left to the pure path (damaged, bytes);\n"
"quotes[k]: the event's 0x22 bytes (each stat costs one: the pure path's size bound).");

static PyObject *step_values(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer data, bs, be, bid, bk, bu, bd, bss, bse, bq;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*w*w*", &data, &bs, &be, &bid, &bk, &bu, &bd, &bss, &bse, &bq))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bs.len / 8;
    if (bs.len % 8 || be.len != bs.len || bid.len % 8 || bk.len != n || bu.len != 8 * n || bd.len != 8 * n ||
        bss.len != 8 * n || bse.len != 8 * n || bq.len != 8 * n) {
        PyErr_SetString(PyExc_ValueError, "step_values: column sizes do not match");
        goto done;
    }
    const uint8_t *base = data.buf;
    const int64_t *starts = bs.buf, *ends = be.buf, *ids = bid.buf;
    uint8_t *kind = bk.buf;
    uint64_t *u = bu.buf;
    double *d = bd.buf;
    int64_t *ss = bss.buf, *se = bse.buf, *quotes = bq.buf;
    Py_ssize_t nids = bid.len / 8, data_len = data.len;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        StatValue sv;
        quotes[k] = 0;
        if (starts[k] < 0 || ends[k] < starts[k] || ends[k] > data_len ||
            event_step(base + starts[k], base + ends[k], ids, nids, &sv) < 0) {
            kind[k] = SV_PYTHON;
            continue;
        }
        for (const uint8_t *q = base + starts[k], *z = base + ends[k]; q < z && (q = memchr(q, 0x22, (size_t)(z - q)));
             q++)
            quotes[k]++;
        kind[k] = (uint8_t)sv.kind;
        u[k] = sv.u;
        d[k] = sv.d;
        ss[k] = sv.kind == SV_STR ? sv.s - base : 0;
        se[k] = sv.kind == SV_STR ? sv.e - base : 0;
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bid);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bu);
    PyBuffer_Release(&bd);
    PyBuffer_Release(&bss);
    PyBuffer_Release(&bse);
    return result;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* One byte's occurrences ('{' for `braces`) counted 32 at a time where the CPU has AVX2: a
 * compare gives -1 per matching lane, subtracted into byte counters for at most 255
 * rounds, then summed across by `sad` against zero. The eight-byte loop of `count_bytes`
 * counts what is left (all of it elsewhere).
 * The block was counted at ~5 GB/s eight bytes at a time: ~0.2 s of the scanning thread's
 * time for a 1 GiB trace. */
__attribute__((target("avx2"))) static Py_ssize_t bytes_avx2(const uint8_t **pp, const uint8_t *end, uint8_t byte) {
    const uint8_t *p = *pp;
    const __m256i want = _mm256_set1_epi8((char)byte), zero = _mm256_setzero_si256();
    __m256i total = zero;
    while (end - p >= 32) {
        __m256i acc = zero;
        for (int k = 0; k < 255 && end - p >= 32; k++, p += 32)
            acc = _mm256_sub_epi8(acc, _mm256_cmpeq_epi8(_mm256_loadu_si256((const __m256i *)p), want));
        total = _mm256_add_epi64(total, _mm256_sad_epu8(acc, zero));
    }
    *pp = p;
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, total);
    return (Py_ssize_t)(lanes[0] + lanes[1] + lanes[2] + lanes[3]);
}

static int have_avx2;  /* set once, when the module is loaded (`init_cpu`) */

static void init_cpu(void) {
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
}

static Py_ssize_t bytes_wide(const uint8_t **pp, const uint8_t *end, uint8_t byte) {
    return have_avx2 ? bytes_avx2(pp, end, byte) : 0;  /* without AVX2: the eight-byte loop counts it all */
}
#else
static void init_cpu(void) {}

static Py_ssize_t bytes_wide(const uint8_t **pp, const uint8_t *end, uint8_t byte) {
    (void)pp;
    (void)end;
    (void)byte;
    return 0;
}
#endif

/* How many bytes of [p, end) are `byte` (no GIL needed: plain memory). */
static Py_ssize_t count_bytes(const uint8_t *p, const uint8_t *end, uint8_t byte) {
    Py_ssize_t n = bytes_wide(&p, end, byte);
    /* Eight bytes at a time: a byte of w ^ (byte x 8) is zero exactly where w holds `byte`;
     * (x & 0x7f..) + 0x7f.. sets the high bit of every non-zero low part, so after or-ing x
     * back in, the high bits left clear are the zero bytes. Shifted down, each is a 1 in
     * its byte lane; the lanes are summed for up to 255 words, then across (one multiply),
     * with no popcount (a library call where the CPU's is not assumed). */
    const uint64_t low7 = 0x7F7F7F7F7F7F7F7FULL;
    while (end - p >= 8) {
        uint64_t lanes = 0;
        for (int k = 0; k < 255 && end - p >= 8; k++, p += 8) {
            uint64_t w, x;
            memcpy(&w, p, 8);
            x = w ^ (ONES * byte);
            lanes += (~(((x & low7) + low7) | x | low7) >> 7) & ONES;
        }
        /* each lane is at most 255: the sum of the eight fits the top byte of the product */
        n += (Py_ssize_t)(((lanes & 0x00FF00FF00FF00FFULL) + ((lanes >> 8) & 0x00FF00FF00FF00FFULL)) *
                          0x0001000100010001ULL >> 48);
    }
    for (; p < end; p++) n += *p == byte;
    return n;
}

static PyObject *braces(PyObject *mod, PyObject *arg) {
    (void)mod;
    Py_buffer text;
    if (PyObject_GetBuffer(arg, &text, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    n = count_bytes(text.buf, (const uint8_t *)text.buf + text.len, '{');
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    return PyLong_FromSsize_t(n);
}

PyDoc_STRVAR(count_byte_doc,
"count_byte(text, byte) -> int\n\n"
"How many bytes of the buffer `text` equal `byte` (0-255): `bytes.count` of one byte, 32 at\n"
"a time where the CPU has AVX2 (an XSpace's lines are counted for their events' tag twice\n"
"before they are walked: ~30 ms a pass of 80 MB by `bytes.count`).");

static PyObject *count_byte(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer text;
    int byte;
    if (!PyArg_ParseTuple(args, "y*i", &text, &byte)) return NULL;
    if (byte < 0 || byte > 255) {
        PyBuffer_Release(&text);
        PyErr_SetString(PyExc_ValueError, "count_byte: the byte must be 0-255");
        return NULL;
    }
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    n = count_bytes(text.buf, (const uint8_t *)text.buf + text.len, (uint8_t)byte);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    return PyLong_FromSsize_t(n);
}

/* ---- gather: byte ranges of a text, one after another (block_store.TierBuilder) ------ */

PyDoc_STRVAR(gather_doc,
"gather(src, starts, lengths, dst) -> int\n\n"
"Copies src[starts[i]:starts[i] + lengths[i]] for each i (int64 arrays), one after\n"
"another, into the writable `dst`; returns the bytes written. Refuses (ValueError, nothing\n"
"written) any range outside `src`, or more bytes than `dst` holds: every range is checked\n"
"before any is copied. The numpy twin is `block_store._gather`.");

static PyObject *gather(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer src, bs, bl, dst;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &src, &bs, &bl, &dst)) return NULL;
    PyObject *result = NULL;
    if (bs.len % 8 || bl.len != bs.len) {
        PyErr_SetString(PyExc_ValueError, "gather: starts and lengths must be int64 arrays of one length");
        goto done;
    }
    Py_ssize_t n = bs.len / 8, total = 0, bad = -1;
    const int64_t *st = bs.buf, *ln = bl.buf;
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) {
        if (st[i] < 0 || ln[i] < 0 || st[i] > src.len || ln[i] > src.len - st[i] || ln[i] > dst.len - total) bad = i;
        else total += (Py_ssize_t)ln[i];
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "gather: range %zd lies outside the text or the output", bad);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    char *out = dst.buf;
    const char *in = src.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(out, in + st[i], (size_t)ln[i]);
        out += ln[i];
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(total);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&dst);
    return result;
}

/* ---- busy parts: a plan's busy time per bucket (busy.py, `_add_parts`) -------------- */

PyDoc_STRVAR(busy_parts_doc,
"busy_parts(sums, base, lo, hi, group, t0, t1, theta, last_bucket) -> int\n\n"
"Adds each part [lo[i], hi[i]) (clipped to [t0, t1]) of group[i] to float64 `sums`, at\n"
"base[group[i]] + its bucket (floor((t - t0) / theta), at most last_bucket), split at a\n"
"bucket's edge, head then tail, in order: busy.py's numpy twin, to the bit. Returns -1\n"
"when done, or, changing nothing, the first i whose times are not finite or whose group\n"
"is not in base (the caller takes the numpy path).");

static PyObject *busy_parts(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bsums, bbase, blo, bhi, bg;
    double t0, t1, theta;
    long long last_bucket;
    if (!PyArg_ParseTuple(args, "w*y*y*y*y*dddL", &bsums, &bbase, &blo, &bhi, &bg, &t0, &t1, &theta, &last_bucket))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = blo.len / 8, nsums = bsums.len / 8, ngroups = bbase.len / 8, bad = -1;
    if (bsums.len % 8 || bbase.len % 8 || blo.len % 8 || bhi.len != blo.len || bg.len != blo.len || nsums == 0 ||
        !(theta > 0) || !isfinite(t0) || !isfinite(t1) || last_bucket < 0) {
        PyErr_SetString(PyExc_ValueError, "busy_parts: arrays or window do not match");
        goto done;
    }
    double *sums = bsums.buf;
    const int64_t *base = bbase.buf, *g = bg.buf;
    const double *lo = blo.buf, *hi = bhi.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && bad < 0; i++)  /* check first: a refused call changes nothing */
        if (!isfinite(lo[i]) || !isfinite(hi[i]) || g[i] < 0 || g[i] >= ngroups) bad = i;
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < n; i++) {
            double a = lo[i], b = hi[i];
            if (a < t0) a = t0;
            if (a > t1) a = t1;
            if (b < t0) b = t0;
            if (b > t1) b = t1;
            if (!(b > a)) continue;  /* an empty part (a slice within the ones before it) adds +0.0: nothing */
            int64_t b0 = (int64_t)((a - t0) / theta), b1 = (int64_t)((b - t0) / theta);  /* >= 0: truncation is floor */
            if (b0 > last_bucket) b0 = last_bucket;
            if (b1 > last_bucket) b1 = last_bucket;
            double edge = t0 + (double)b1 * theta;
            int whole = b > a, split = whole && b1 > b0;
            double head = 0.0, tail = 0.0;
            if (whole) {
                head = (split ? edge : b) - a;
                if (!(head >= 0.0)) head = 0.0;
            }
            if (split) {
                tail = b - edge;
                if (!(tail >= 0.0)) tail = 0.0;
            }
            int64_t at0 = base[g[i]] + b0, at1 = base[g[i]] + b1;
            at0 = at0 < 0 ? 0 : (at0 >= nsums ? nsums - 1 : at0);
            at1 = at1 < 0 ? 0 : (at1 >= nsums ? nsums - 1 : at1);
            sums[at0] += head;
            sums[at1] += tail;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&bsums);
    PyBuffer_Release(&bbase);
    PyBuffer_Release(&blo);
    PyBuffer_Release(&bhi);
    PyBuffer_Release(&bg);
    return result;
}

/* ---- Summaries: where a track's small slices are cut into groups ------------------- */

/* A time's bucket as `buckets._Buckets.clipped` counts it: the time clipped to [t0, t1],
 * floor((t - t0) / theta), then at most the last bucket (r - 1) and at least 0. */
static inline int64_t bucket_clipped(double t, double t0, double t1, double theta, int64_t r) {
    double c = t < t0 ? t0 : (t > t1 ? t1 : t);
    double b = floor((c - t0) / theta);
    if (b < 0) b = 0;
    if (b > (double)(r - 1)) b = (double)(r - 1);
    return (int64_t)b;
}

/* Whether every value is finite and, with `sorted`, none below the one before. */
static int finite_run(const double *v, Py_ssize_t n, int sorted) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) return 0;
        if (sorted && i && v[i] < v[i - 1]) return 0;
    }
    return 1;
}

PyDoc_STRVAR(name_counts_doc,
"name_counts(group, name, nn, out_group, out_name, out_count) -> int\n\n"
"The distinct (group, name) pairs of int64 `group` (ascending) and `name` (each in [0, nn)),\n"
"in order, with how many times each occurs: `reduce.fold_steps.name_counts`'s twin, written\n"
"into the int64 outputs (room for len(group) pairs); returns how many. Each group's names are\n"
"counted in a table of nn slots (only the slots it touched are read and cleared), then put in\n"
"order. -1, changing nothing the caller reads, when a group goes back, a name is outside\n"
"[0, nn) or nn is past 2^24 (the caller takes the numpy path).");

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static PyObject *name_counts(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bg, bn, og, on, oc;
    long long nn;
    if (!PyArg_ParseTuple(args, "y*y*Lw*w*w*", &bg, &bn, &nn, &og, &on, &oc)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bg.len / 8;
    if (bg.len % 8 || bn.len != bg.len || og.len < bg.len || on.len < bg.len || oc.len < bg.len) {
        PyErr_SetString(PyExc_ValueError, "name_counts: arrays do not match");
        goto done;
    }
    Py_ssize_t k = -1;
    if (nn >= 1 && nn <= (1LL << 24)) {
        const int64_t *g = bg.buf, *nm = bn.buf;
        int64_t *out_g = og.buf, *out_n = on.buf, *out_c = oc.buf;
        int64_t *count = calloc((size_t)nn, sizeof(int64_t));
        int64_t *touched = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        if (!count || !touched) {
            free(count);
            free(touched);
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        k = 0;
        Py_ssize_t i = 0;
        while (i < n) {
            Py_ssize_t used = 0;
            int64_t group = g[i];
            for (; i < n && g[i] == group; i++) {
                int64_t x = nm[i];
                if (x < 0 || x >= nn) break;
                if (!count[x]++) touched[used++] = x;
            }
            if (i < n && g[i] == group) {  /* a name out of range */
                for (Py_ssize_t j = 0; j < used; j++) count[touched[j]] = 0;
                k = -1;
                break;
            }
            if (i < n && g[i] < group) {  /* groups must not go back */
                k = -1;
                break;
            }
            qsort(touched, (size_t)used, sizeof(int64_t), cmp_i64);
            for (Py_ssize_t j = 0; j < used; j++) {
                out_g[k] = group;
                out_n[k] = touched[j];
                out_c[k] = count[touched[j]];
                count[touched[j]] = 0;
                k++;
            }
        }
        Py_END_ALLOW_THREADS
        free(count);
        free(touched);
    }
    result = PyLong_FromSsize_t(k);
done:
    PyBuffer_Release(&bg);
    PyBuffer_Release(&bn);
    PyBuffer_Release(&og);
    PyBuffer_Release(&on);
    PyBuffer_Release(&oc);
    return result;
}

PyDoc_STRVAR(fold_cuts_doc,
"fold_cuts(start, end, bounds, t0, t1, theta, buckets, run_end, new, part) -> float | None\n\n"
"One chunk of a track's small slices (float64 `start`, `end`, by start) as the fold cuts\n"
"them (`reduce.fold_steps.fold_cuts`, its numpy twin): with `prev`, the latest end\n"
"before each slice (`run_end` carried from the chunk before, NaN for none: then slice 0\n"
"opens a group), `new[i]` (uint8) says slice i opens a group: it starts at or after\n"
"`prev` and an idle bucket (`_Buckets.clipped`) or a value of sorted `bounds` within\n"
"[prev, start] lies between; `part[i]` (float64) is max(start, prev), where its busy time\n"
"begins. Returns the latest end after the chunk, or None, changing nothing, when a time is\n"
"not finite or `bounds` is not sorted (the caller takes the numpy path). Equal to numpy's\n"
"bits but for the sign of a zero where two zeros meet (numpy's own maximum picks either\n"
"by CPU); no bucket or busy sum it feeds can tell them apart.");

static PyObject *fold_cuts(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bs, be, bb, bnew, bpart;
    double t0, t1, theta, run_end;
    long long r;
    if (!PyArg_ParseTuple(args, "y*y*y*dddLdw*w*", &bs, &be, &bb, &t0, &t1, &theta, &r, &run_end, &bnew, &bpart))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bs.len / 8, m = bb.len / 8;
    if (bs.len % 8 || bb.len % 8 || be.len != bs.len || bnew.len != n || bpart.len != bs.len || !(theta > 0) ||
        !isfinite(t0) || !isfinite(t1) || r < 1 || n == 0) {
        PyErr_SetString(PyExc_ValueError, "fold_cuts: arrays or window do not match");
        goto done;
    }
    const double *ss = bs.buf, *se = be.buf, *bounds = bb.buf;
    uint8_t *isnew = bnew.buf;
    double *part = bpart.buf;
    int has_run = !isnan(run_end), ok;
    double pe = run_end;
    Py_BEGIN_ALLOW_THREADS
    ok = finite_run(ss, n, 0) && finite_run(se, n, 0) && finite_run(bounds, m, 1) && (!has_run || isfinite(run_end));
    if (ok) {
        Py_ssize_t j = 0, i = 0;  /* j: the first bound at or after `pe` (pe never decreases) */
        if (!has_run) {
            isnew[0] = 1;
            part[0] = ss[0];
            pe = se[0];
            i = 1;
        }
        for (; i < n; i++) {
            double c = ss[i];
            int cut = 0;
            if (c >= pe) {
                if (bucket_clipped(c, t0, t1, theta, r) > bucket_clipped(pe, t0, t1, theta, r) + 1) {
                    cut = 1;  /* an idle bucket between */
                } else {
                    while (j < m && bounds[j] < pe) j++;
                    cut = j < m && bounds[j] <= c;  /* a kept boundary in [pe, c] */
                }
            }
            isnew[i] = (uint8_t)cut;
            part[i] = c > pe ? c : pe;  /* np.maximum(start, prev) */
            if (!(pe > se[i])) pe = se[i];  /* np.maximum.accumulate */
        }
    }
    Py_END_ALLOW_THREADS
    if (ok) {
        result = PyFloat_FromDouble(pe);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
done:
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&bnew);
    PyBuffer_Release(&bpart);
    return result;
}

PyDoc_STRVAR(bounds_within_doc,
"bounds_within(bounds, lo, hi, open, out) -> bool\n\n"
"out[i] (uint8) = whether a value of sorted float64 `bounds` lies in (lo[i], hi[i]) (open)\n"
"or [lo[i], hi[i]] (closed): `reduce.fold_steps.bound_between`'s numpy twin, to the bit. A\n"
"search from where the one before ended while `lo` does not decrease (a track's slices by\n"
"start), a binary search where it does. False, changing nothing, when a time is not finite\n"
"or `bounds` is not sorted (the caller takes the numpy path).");

static PyObject *bounds_within(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bb, blo, bhi, bout;
    int open_interval, ok;
    if (!PyArg_ParseTuple(args, "y*y*y*pw*", &bb, &blo, &bhi, &open_interval, &bout)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t m = bb.len / 8, n = blo.len / 8;
    if (bb.len % 8 || blo.len % 8 || bhi.len != blo.len || bout.len != n) {
        PyErr_SetString(PyExc_ValueError, "bounds_within: arrays do not match");
        goto done;
    }
    const double *bounds = bb.buf, *lo = blo.buf, *hi = bhi.buf;
    uint8_t *out = bout.buf;
    Py_BEGIN_ALLOW_THREADS
    ok = finite_run(bounds, m, 1) && finite_run(lo, n, 0) && finite_run(hi, n, 0);
    if (ok) {
        Py_ssize_t at = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            double x = lo[i];
            if (i && x < lo[i - 1]) {  /* back: search again from the start */
                Py_ssize_t a = 0, b = m;
                while (a < b) {
                    Py_ssize_t mid = a + (b - a) / 2;
                    if (open_interval ? bounds[mid] <= x : bounds[mid] < x) a = mid + 1;
                    else b = mid;
                }
                at = a;
            } else {
                while (at < m && (open_interval ? bounds[at] <= x : bounds[at] < x)) at++;
            }
            out[i] = (uint8_t)(at < m && (open_interval ? bounds[at] < hi[i] : bounds[at] <= hi[i]));
        }
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    PyBuffer_Release(&bb);
    PyBuffer_Release(&blo);
    PyBuffer_Release(&bhi);
    PyBuffer_Release(&bout);
    return result;
}

/* ---- A chunk of a track's slices: which the fold reads, and its groups ------------- */

PyDoc_STRVAR(select_slices_doc,
"select_slices(order, order_width, overlaps, kept, want, start, end, name, name_width,\n"
"              out_row, out_start, out_end, out_name) -> int\n\n"
"The rows of `order` (int32 or int64 by `order_width`: a run of the slice order) whose\n"
"`overlaps` flag is set (empty `overlaps`: every row overlaps, a window's own slices) and\n"
"whose `kept` flag equals `want` (uint8 flags, one a slice),\n"
"in order: each row (int64), its start and end (float64 `start`, `end`) and, with\n"
"`name_width` 2, 4 or 8, its name (int16/32/64 `name`, written as int64; 0: `name` and\n"
"`out_name` are not read). What `summaries._reduce_slices` reads of a chunk, in one pass\n"
"instead of a boolean gather, a mask and three gathers; its numpy twin is\n"
"`fold_steps.select_slices`. Returns how many, or -1, with the outputs not to be read,\n"
"when a row lies outside the slices (the caller takes the numpy path, which raises).");

static PyObject *select_slices(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bo, bov, bk, bs, be, bn, oi, os, oe, on;
    int ow, want, nw;
    if (!PyArg_ParseTuple(args, "y*iy*y*py*y*y*iw*w*w*w*", &bo, &ow, &bov, &bk, &want, &bs, &be, &bn, &nw, &oi, &os,
                          &oe, &on))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nsl = bk.len, n = (ow == 4 || ow == 8) ? bo.len / ow : 0;
    int every = bov.len == 0; /* no overlap flags: every row of `order` overlaps */
    if ((ow != 4 && ow != 8) || bo.len % ow || (!every && bov.len != nsl) || bs.len != 8 * nsl || be.len != 8 * nsl ||
        (nw != 0 && nw != 2 && nw != 4 && nw != 8) || (nw && bn.len != nw * nsl) || oi.len < 8 * n || os.len < 8 * n ||
        oe.len < 8 * n || (nw && on.len < 8 * n)) {
        PyErr_SetString(PyExc_ValueError, "select_slices: arrays do not match");
        goto done;
    }
    const int32_t *o32 = bo.buf;
    const int64_t *o64 = bo.buf;
    const uint8_t *ov = bov.buf, *kept = bk.buf;
    const double *start = bs.buf, *end = be.buf;
    const int16_t *n16 = bn.buf;
    const int32_t *n32 = bn.buf;
    const int64_t *n64 = bn.buf;
    int64_t *out_row = oi.buf, *out_name = on.buf;
    double *out_s = os.buf, *out_e = oe.buf;
    Py_ssize_t k = 0;
    uint8_t w = want ? 1 : 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t row = ow == 4 ? (int64_t)o32[i] : o64[i];
        if (row < 0 || row >= nsl) {
            k = -1;
            break;
        }
        if ((!every && !ov[row]) || (kept[row] != 0) != w) continue;
        out_row[k] = row;
        out_s[k] = start[row];
        out_e[k] = end[row];
        if (nw) out_name[k] = nw == 2 ? (int64_t)n16[row] : (nw == 4 ? (int64_t)n32[row] : n64[row]);
        k++;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(k);
done:
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bov);
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bn);
    PyBuffer_Release(&oi);
    PyBuffer_Release(&os);
    PyBuffer_Release(&oe);
    PyBuffer_Release(&on);
    return result;
}

PyDoc_STRVAR(search_through_doc,
"search_through(keys, order, order_width, lo, hi, x, right, nan_as_inf, steps) -> int\n\n"
"At most `steps` steps of `sorting.search_by`'s bisection of each query through an order:\n"
"query q looks for float64 x[q] among keys[order[lo[q]:hi[q]]] (float64 `keys`, `order` of\n"
"int32 or int64 per `order_width`, sorted by key through it, NaN last), from the right where\n"
"uint8 right[q] is set, and narrows int64 lo[q], hi[q] in place. A key that is NaN reads as\n"
"inf where `nan_as_inf`. Returns how many queries are still open (lo < hi). Every lo, hi\n"
"and row read is checked (ValueError, with lo and hi then not to be read).");

static PyObject *search_through(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bk, bo, bl, bh, bx, br;
    int ow, nan_inf;
    long long steps;
    if (!PyArg_ParseTuple(args, "y*y*iw*w*y*y*pL", &bk, &bo, &ow, &bl, &bh, &bx, &br, &nan_inf, &steps)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t nk = bk.len / 8, no = (ow == 4 || ow == 8) ? bo.len / ow : 0, nq = bx.len / 8;
    if ((ow != 4 && ow != 8) || bo.len % ow || bk.len % 8 || bx.len % 8 || bl.len != 8 * nq || bh.len != 8 * nq ||
        br.len != nq || steps < 0) {
        PyErr_SetString(PyExc_ValueError, "search_through: arrays do not match");
        goto done;
    }
    const double *keys = bk.buf, *xs = bx.buf;
    const int32_t *o32 = bo.buf;
    const int64_t *o64 = bo.buf;
    const uint8_t *right = br.buf;
    int64_t *lo = bl.buf, *hi = bh.buf;
    Py_ssize_t open = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t q = 0; q < nq && !bad; q++) {
        int64_t a = lo[q], b = hi[q];
        if (a < 0 || b > (int64_t)no || a > b) {
            bad = 1;
            break;
        }
        double x = xs[q];
        int x_nan = isnan(x), r = right[q] != 0;
        for (long long s = 0; s < steps && a < b; s++) {
            int64_t mid = a + ((b - a) >> 1);
            int64_t row = ow == 4 ? (int64_t)o32[mid] : o64[mid];
            if (row < 0 || row >= (int64_t)nk) {
                bad = 1;
                break;
            }
            double k = keys[row];
            if (nan_inf && isnan(k)) k = INFINITY;
            int below = r ? (x_nan || k <= x) : (x_nan ? !isnan(k) : k < x);
            if (below)
                a = mid + 1;
            else
                b = mid;
        }
        lo[q] = a;
        hi[q] = b;
        open += a < b;
    }
    Py_END_ALLOW_THREADS
    if (bad)
        PyErr_SetString(PyExc_ValueError, "search_through: a span or a row lies outside its array");
    else
        result = PyLong_FromSsize_t(open);
done:
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bh);
    PyBuffer_Release(&bx);
    PyBuffer_Release(&br);
    return result;
}

PyDoc_STRVAR(fold_groups_doc,
"fold_groups(new, end, group, seg, seg_end) -> int\n\n"
"The groups of one chunk of the fold from its cuts (uint8 `new`, slice 0 always opening\n"
"one) and float64 `end`: each slice's group (int64 `group`, from 0), each group's first\n"
"slice (int64 `seg`) and latest end (float64 `seg_end`): `np.cumsum(first) - 1`,\n"
"`np.flatnonzero(first)` and `np.maximum.reduceat(end, seg)`, `fold_steps.fold_groups`'s\n"
"numpy twin, in one pass. Returns the number of groups, or -1, changing nothing the\n"
"caller reads, when an end is not finite (the caller takes the numpy path).");

static PyObject *fold_groups(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bnew, be, bg, bseg, bse;
    if (!PyArg_ParseTuple(args, "y*y*w*w*w*", &bnew, &be, &bg, &bseg, &bse)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bnew.len;
    if (be.len != 8 * n || bg.len < 8 * n || bseg.len < 8 * n || bse.len < 8 * n) {
        PyErr_SetString(PyExc_ValueError, "fold_groups: arrays do not match");
        goto done;
    }
    const uint8_t *isnew = bnew.buf;
    const double *end = be.buf;
    int64_t *group = bg.buf, *seg = bseg.buf;
    double *seg_end = bse.buf;
    Py_ssize_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    if (!finite_run(end, n, 0)) {
        k = -1;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i == 0 || isnew[i]) {
                seg[k] = i;
                seg_end[k] = end[i];
                k++;
            } else if (end[i] > seg_end[k - 1]) {
                seg_end[k - 1] = end[i];
            }
            group[i] = k - 1;
        }
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(k);
done:
    PyBuffer_Release(&bnew);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bg);
    PyBuffer_Release(&bseg);
    PyBuffer_Release(&bse);
    return result;
}

PyDoc_STRVAR(firsts_by_key_doc,
"firsts_by_key(key, bucket, nkeys, out) -> int\n\n"
"Of rows in time order (int64 `key` in [0, nkeys), int64 `bucket` never decreasing within\n"
"a key), the positions of the first row of each (key, bucket), in order, into int64 `out`\n"
"(room for len(key)); returns how many. One pass with the last bucket seen per key: the\n"
"first instant of each scope and bucket (`reduce.points`), without sorting them. -1,\n"
"changing nothing the caller reads, when a key lies outside [0, nkeys) (nkeys at most\n"
"2^26) or a bucket goes back within its key (the caller sorts).");

static PyObject *firsts_by_key(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bk, bb, bo;
    long long nkeys;
    if (!PyArg_ParseTuple(args, "y*y*Lw*", &bk, &bb, &nkeys, &bo)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bk.len / 8;
    if (bk.len % 8 || bb.len != bk.len || bo.len < bk.len) {
        PyErr_SetString(PyExc_ValueError, "firsts_by_key: arrays do not match");
        goto done;
    }
    Py_ssize_t k = -1;
    if (nkeys >= 1 && nkeys <= (1LL << 26)) {
        const int64_t *key = bk.buf, *bucket = bb.buf;
        int64_t *out = bo.buf;
        int64_t *last = malloc((size_t)nkeys * sizeof(int64_t));
        if (!last) {
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (long long j = 0; j < nkeys; j++) last[j] = INT64_MIN;
        k = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t x = key[i], b = bucket[i];
            if (x < 0 || x >= nkeys || b < last[x] || b == INT64_MIN) {
                k = -1;
                break;
            }
            if (b != last[x]) {
                out[k++] = i;
                last[x] = b;
            }
        }
        Py_END_ALLOW_THREADS
        free(last);
    }
    result = PyLong_FromSsize_t(k);
done:
    PyBuffer_Release(&bk);
    PyBuffer_Release(&bb);
    PyBuffer_Release(&bo);
    return result;
}

PyDoc_STRVAR(window_keep_doc,
"window_keep(ts, ph, handled, sampled, t0, t1, keep)\n\n"
"keep[i] = 1 (uint8, set only) for each event in [t0, t1] (float64 `ts`; NaN is in no\n"
"window) whose phase has no rule of its own (`handled[i]` 0) or that is a counter (`ph[i]`\n"
"'C') without samples (`sampled[i]` 0): the last per-event pass of a whole-table plan\n"
"(`reduce.plan._plan_table`), one pass over five columns instead of seven numpy passes\n"
"and their temporaries. The flags and phases are uint8, one an event.");

static PyObject *window_keep(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer bts, bph, bh, bs, bk;
    double t0, t1;
    if (!PyArg_ParseTuple(args, "y*y*y*y*ddw*", &bts, &bph, &bh, &bs, &t0, &t1, &bk)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bph.len;
    if (bts.len != 8 * n || bh.len != n || bs.len != n || bk.len != n) {
        PyErr_SetString(PyExc_ValueError, "window_keep: arrays do not match");
        goto done;
    }
    const double *ts = bts.buf;
    const uint8_t *ph = bph.buf, *handled = bh.buf, *sampled = bs.buf;
    uint8_t *keep = bk.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ts[i] >= t0 && ts[i] <= t1 && (!handled[i] || (ph[i] == 'C' && !sampled[i]))) keep[i] = 1;
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
done:
    PyBuffer_Release(&bts);
    PyBuffer_Release(&bph);
    PyBuffer_Release(&bh);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bk);
    return result;
}

/* ---- XSpace: the fields of one message, without upb's tree ------------------------ */

PyDoc_STRVAR(pb_fields_doc,
"pb_fields(buf, start, end, number, mask, at, stop) -> int\n\n"
"Walks the protobuf message buf[start:end] field by field. number > 0: the fields\n"
"`number` of wire type 2 (a line's events), each as its value's [at, stop); number 0:\n"
"the fields whose number is below 64 with its bit set in `mask`, each as [its tag, its\n"
"end) (what upb is given to parse of the rest). `at`, `stop`: int64 arrays to fill, or\n"
"None to count only. Returns the count, or -1 when the message is not plainly well\n"
"formed (a bad varint, a field past the end, a group, a field number upb refuses) or\n"
"the arrays are too small: the caller then lets upb read it (the pure path), whose\n"
"verdict and results stand.");

static PyObject *pb_fields(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer b, ba = {0}, bs = {0};
    Py_ssize_t start, end;
    long long number;
    unsigned long long mask;
    PyObject *oa, *os;
    if (!PyArg_ParseTuple(args, "y*nnLKOO", &b, &start, &end, &number, &mask, &oa, &os)) return NULL;
    int fill = oa != Py_None && os != Py_None;
    Py_ssize_t cap = 0;
    if (fill) {
        if (PyObject_GetBuffer(oa, &ba, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) goto fail;
        if (PyObject_GetBuffer(os, &bs, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) goto fail;
        if (ba.itemsize != 8 || bs.itemsize != 8 || !ba.format || !bs.format ||
            (strcmp(ba.format, "q") && strcmp(ba.format, "l")) || (strcmp(bs.format, "q") && strcmp(bs.format, "l"))) {
            PyErr_SetString(PyExc_TypeError, "pb_fields: at and stop must be int64 arrays");
            goto fail;
        }
        cap = ba.len / 8 < bs.len / 8 ? ba.len / 8 : bs.len / 8;
    }
    if (start < 0 || end < start || end > b.len) {
        PyErr_SetString(PyExc_ValueError, "pb_fields: [start, end) outside the buffer");
        goto fail;
    }
    const uint8_t *base = b.buf, *p = base + start, *stop_at = base + end;
    int64_t *at = fill ? ba.buf : NULL, *st = fill ? bs.buf : NULL;
    Py_ssize_t k = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    while (p < stop_at) {
        const uint8_t *field = p;
        uint64_t tag, len;
        if (read_varint(&p, stop_at, &tag) < 0 || tag > 0xFFFFFFFFULL || (tag >> 3) == 0 ||
            (tag >> 3) > 536870911ULL) {
            bad = 1;
            break;
        }
        unsigned wt = (unsigned)(tag & 7);
        uint64_t fn = tag >> 3;
        int hit = number > 0 ? ((long long)fn == number && wt == 2) : (fn < 64 && ((mask >> fn) & 1));
        const uint8_t *value = p;
        if (wt == 2) {
            if (read_varint(&p, stop_at, &len) < 0 || len > (uint64_t)(stop_at - p)) {
                bad = 1;
                break;
            }
            value = p;
            p += len;
        } else if (skip_field(&p, stop_at, wt) < 0) {
            bad = 1;
            break;
        }
        if (hit) {
            if (fill) {
                if (k >= cap) {
                    bad = 1;
                    break;
                }
                at[k] = (number > 0 ? value : field) - base;
                st[k] = p - base;
            }
            k++;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    if (fill) {
        PyBuffer_Release(&ba);
        PyBuffer_Release(&bs);
    }
    return PyLong_FromSsize_t(bad ? -1 : k);
fail:
    PyBuffer_Release(&b);
    if (ba.obj) PyBuffer_Release(&ba);
    if (bs.obj) PyBuffer_Release(&bs);
    return NULL;
}

/* ---- XSpace: the scalar fields of many events at once ----------------------------- */

PyDoc_STRVAR(pb_event_columns_doc,
"pb_event_columns(buf, starts, ends, metadata_id, offset_ps, duration_ps) -> int\n\n"
"For each XEvent buf[starts[k]:ends[k]] (int64 arrays), the last varint value of its fields\n"
"1, 2 and 3 (0 where absent; an event with starts[k] >= ends[k] has none), written as\n"
"int64 into the three arrays: xspace.decode_event_columns's numpy rounds, one event at a\n"
"time. Returns 0, or -1, the arrays then partly written, when any event is not plainly\n"
"well formed (a bad varint or tag, a group, a field past its event, more than 64 fields: the\n"
"rounds would switch to upb) or lies outside `buf`: the caller then runs the rounds, whose\n"
"verdict and results stand.");

#define PB_EVENT_MAX_FIELDS 64

static PyObject *pb_event_columns(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer b, bs, be, bm, bo, bd;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*", &b, &bs, &be, &bm, &bo, &bd)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = bs.len / 8;
    if (bs.len % 8 || be.len != bs.len || bm.len != bs.len || bo.len != bs.len || bd.len != bs.len) {
        PyErr_SetString(PyExc_ValueError, "pb_event_columns: column sizes do not match");
        goto done;
    }
    const uint8_t *base = b.buf;
    const int64_t *starts = bs.buf, *ends = be.buf;
    int64_t *out[4] = {NULL, bm.buf, bo.buf, bd.buf};
    Py_ssize_t len = b.len;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n && !bad; k++) {
        int64_t value[4] = {0, 0, 0, 0};
        if (starts[k] < ends[k]) {
            if (starts[k] < 0 || ends[k] > len) {
                bad = 1;
                break;
            }
            const uint8_t *p = base + starts[k], *end = base + ends[k];
            int fields = 0;
            while (p < end) {
                uint64_t tag, v;
                if (++fields > PB_EVENT_MAX_FIELDS || read_varint(&p, end, &tag) < 0 || (tag >> 3) == 0) {
                    bad = 1;
                    break;
                }
                unsigned wt = (unsigned)(tag & 7);
                if (wt == 0) {
                    if (read_varint(&p, end, &v) < 0) {
                        bad = 1;
                        break;
                    }
                    if ((tag >> 3) <= 3) value[tag >> 3] = (int64_t)v;
                } else if (skip_field(&p, end, wt) < 0) {  /* 1, 2, 5 in the event; groups refused */
                    bad = 1;
                    break;
                }
            }
        }
        out[1][k] = value[1];
        out[2][k] = value[2];
        out[3][k] = value[3];
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(bad ? -1 : 0);
done:
    PyBuffer_Release(&b);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bm);
    PyBuffer_Release(&bo);
    PyBuffer_Release(&bd);
    return result;
}

/* ---- level 2's args: may any of an event's args need a cut? ------------------------ */

/* Python's length of a checked JSON string's value (code points): a UTF-8 sequence, an
 * escape, or a surrogate pair's two escapes each make one. */
static Py_ssize_t string_chars(const uint8_t *s, const uint8_t *e, int escaped) {
    Py_ssize_t n = 0;
    if (!escaped) {
        for (const uint8_t *p = s; p < e; p++) n += (*p & 0xC0) != 0x80;
        return n;
    }
    const uint8_t *p = s;
    while (p < e) {  /* already checked by scan_string: every escape is complete, pairs paired */
        if (*p == '\\') {
            unsigned u = 0;
            if (p[1] == 'u') read_hex4(p + 2, e, &u);
            p += p[1] != 'u' ? 2 : (u >= 0xD800 && u <= 0xDBFF) ? 12 : 6;
            n++;
        } else {
            n += (*p & 0xC0) != 0x80;
            p++;
        }
    }
    return n;
}

/* 1 when the value at c->p holds, at any depth, a string value longer than `slim`
 * characters or a list of more than `llim` items; 0 when not; -1 when it is not the
 * plain case (the caller's Python decides). Object keys are never cut: not counted. */
static int over_limits(Cursor *c, int depth, Py_ssize_t slim, Py_ssize_t llim) {
    const uint8_t *s, *e;
    int esc, more;
    if (depth > MAX_DEPTH || c->p >= c->end) return -1;
    switch (*c->p) {
    case '"':
        if (scan_string(c, &s, &e, &esc) < 0) return -1;
        return e - s > slim && string_chars(s, e, esc) > slim;
    case '[': {
        Py_ssize_t n = 0;
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == ']') {
            c->p++;
            return 0;
        }
        for (;;) {
            int r = over_limits(c, depth + 1, slim, llim);
            if (r) return r;
            if (++n > llim) return 1;
            if ((more = next_member(c, ']')) < 0) return -1;
            if (!more) return 0;
        }
    }
    case '{':
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            return 0;
        }
        for (;;) {
            if (member_key(c, &s, &e, &esc) < 0) return -1;
            int r = over_limits(c, depth + 1, slim, llim);
            if (r) return r;
            if ((more = next_member(c, '}')) < 0) return -1;
            if (!more) return 0;
        }
    default:
        return skip_value(c, depth) < 0 ? -1 : 0;
    }
}

PyDoc_STRVAR(args_may_need_cut_doc,
"args_may_need_cut(event, string_limit, list_limit) -> bool\n\n"
"False only when the event's JSON object is the plain case and its `args` (one member,\n"
"if any; only an object or a list is cut) holds no string value longer than\n"
"`string_limit` characters and no list of more than `list_limit` items, at any depth:\n"
"level 2 then writes the event unchanged without decoding it. True otherwise (the\n"
"caller decodes it and decides).");

/* The check of `args_may_need_cut` on `len` bytes at `buf`: 1 (may need a cut, or not the
 * plain case: Python decides) or 0. */
static int may_need_cut(const uint8_t *buf, Py_ssize_t len, Py_ssize_t slim, Py_ssize_t llim) {
    Cursor c = {buf, buf + len};
    int may = 1, seen = 0;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '{') {
        c.p++;
        skip_ws(&c);
        int more = 1;
        if (c.p < c.end && *c.p == '}') {
            c.p++;
            more = 0;
        }
        while (more > 0) {
            const uint8_t *s, *e;
            int esc;
            if (member_key(&c, &s, &e, &esc) < 0 || esc) break;  /* an escaped key may spell "args" */
            if (e - s == 4 && memcmp(s, "args", 4) == 0 && c.p < c.end && (*c.p == '{' || *c.p == '[')) {
                if (seen++ || over_limits(&c, 1, slim, llim) != 0) break;
            } else if (e - s == 4 && memcmp(s, "args", 4) == 0 && seen++) {
                break;  /* args given twice: the last one counts (Python's), left to Python */
            } else if (skip_value(&c, 1) < 0) {
                break;
            }
            more = next_member(&c, '}');
        }
        if (more == 0) {
            skip_ws(&c);
            may = c.p != c.end;
        }
    }
    return may;
}

static PyObject *args_may_need_cut(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer raw;
    Py_ssize_t slim, llim;
    if (!PyArg_ParseTuple(args, "y*nn", &raw, &slim, &llim)) return NULL;
    int may = may_need_cut(raw.buf, raw.len, slim, llim);
    PyBuffer_Release(&raw);
    return PyBool_FromLong(may);
}

PyDoc_STRVAR(events_may_need_cut_doc,
"events_may_need_cut(events, string_limit, list_limit) -> list[int]\n\n"
"The positions in the list `events` of those for which `args_may_need_cut` is true, in\n"
"order: level 2's check of a window's kept events in one call, not one call each (a\n"
"Python call per event was most of the check). An item that is not `bytes` is listed\n"
"(the caller decides).");

static PyObject *events_may_need_cut(PyObject *mod, PyObject *args) {
    (void)mod;
    PyObject *events;
    Py_ssize_t slim, llim;
    if (!PyArg_ParseTuple(args, "O!nn", &PyList_Type, &events, &slim, &llim)) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {  /* the size is read each turn: nothing here runs Python */
        PyObject *ev = PyList_GET_ITEM(events, i);
        int may = !PyBytes_Check(ev) ||
                  may_need_cut((const uint8_t *)PyBytes_AS_STRING(ev), PyBytes_GET_SIZE(ev), slim, llim);
        if (!may) continue;
        PyObject *at = PyLong_FromSsize_t(i);
        if (!at || PyList_Append(out, at) < 0) {
            Py_XDECREF(at);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(at);
    }
    return out;
}

/* ---- summaries as JSON (`writer.summary_text`) ------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    int fixed; /* p is a bytes object's buffer of cap bytes, sized beforehand: never grown */
} OutText;

static int out_put(OutText *o, const char *s, size_t n) {
    if (n > o->cap - o->n) {
        if (o->fixed) return -1;
        size_t cap = o->cap ? o->cap : 4096;
        while (n > cap - o->n) {
            if (cap > PY_SSIZE_T_MAX / 2) return -1;
            cap *= 2;
        }
        char *p = realloc(o->p, cap);
        if (!p) return -1;
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    return 0;
}

#define OUT_LIT(o, lit) out_put((o), (lit), sizeof(lit) - 1)

/* The decimal digits of u at out, at least `width` of them (zeros before): their count. */
static int put_digits(char *out, unsigned long long u, int width) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n < width) tmp[n++] = '0';
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

static int out_int(OutText *o, long long v) {
    char tmp[24];
    int n = 0;
    if (v < 0) tmp[n++] = '-';
    n += put_digits(tmp + n, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v, 1);
    return out_put(o, tmp, (size_t)n);
}

/* `repr` of a float in fixed notation without dtoa's bignums, for the usual cases: a
 * trace's times in µs to the ns (three decimals) and their differences (exact multiples of
 * a power of two: up to ~15 decimals). The first k from 0 on for which a whole m with
 * m / 10^k == v exists (one correctly rounded division of two exact doubles: what reading
 * the text back does) gives the shortest text; where 10^-k is more than v's spacing, at
 * most one m at that k reads back as v, so it is repr's (the shortest, then the closest).
 * Its length, or 0 (dtoa then): NaN, inf, below 1e-4 (repr's exponent form) or a number
 * whose m would pass 2^53, and where the spacing is not below 10^-k. */
static int short_repr(double v, char *out) {
    static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    static const double tenth[] = {1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12,
                                   1e-13, 1e-14, 1e-15};
    const double exact = 9007199254740992.0;  /* 2^53: every whole number below is a double */
    if (v == 0.0) {
        int neg = signbit(v) != 0;
        memcpy(out, neg ? "-0.0" : "0.0", neg ? 4 : 3);
        return neg ? 4 : 3;
    }
    double a = fabs(v);
    if (!(a >= 1e-4 && a < exact)) return 0;  /* NaN too */
    double spacing = nextafter(a, INFINITY) - a;
    for (int k = 0; k < 16 && a * pow10[k] < exact; k++) {
        long long r = llround(v * pow10[k]);
        for (long long m = r - 1; m <= r + 1; m++) {
            if ((double)m / pow10[k] != v) continue;
            if (!(tenth[k] > spacing)) return 0;
            unsigned long long u = m < 0 ? (unsigned long long)(-m) : (unsigned long long)m;
            unsigned long long p = (unsigned long long)pow10[k];
            int n = 0;
            if (m < 0) out[n++] = '-';
            n += put_digits(out + n, u / p, 1);
            out[n++] = '.';
            n += k ? put_digits(out + n, u % p, k) : put_digits(out + n, 0, 1);
            return n;
        }
    }
    return 0;
}

/* A float as `repr` writes it (the shortest text that reads back as the number). */
static int out_double(OutText *o, double v) {
    char quick[48];
    int n = short_repr(v, quick);
    if (n) return out_put(o, quick, (size_t)n);
    char *s = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s) return -1;
    int rc = out_put(o, s, strlen(s));
    PyMem_Free(s);
    return rc;
}

/* Item `i` of a list of bytes, checked: its text and length, or -1 (ValueError set). */
static int bytes_item(PyObject *list, long long i, const char **s, Py_ssize_t *n) {
    if (i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_ValueError, "summary_json: a code is out of its list");
        return -1;
    }
    PyObject *b = PyList_GET_ITEM(list, (Py_ssize_t)i);
    if (!PyBytes_Check(b)) {
        PyErr_SetString(PyExc_TypeError, "summary_json: texts must be bytes");
        return -1;
    }
    *s = PyBytes_AS_STRING(b);
    *n = PyBytes_GET_SIZE(b);
    return 0;
}

/* Offsets of n items into m values: n + 1 of them, from 0 on, never decreasing, at most m. */
static int offsets_ok(const int64_t *off, Py_ssize_t n, Py_ssize_t m) {
    if (off[0] < 0) return 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (off[k + 1] < off[k]) return 0;
    return off[n] <= m;
}

PyDoc_STRVAR(summary_json_doc,
"summary_json(head, tracks, track_code, labels, label_code, names, top_code, top_count, top_offsets,\n"
"             start, end, count, busy, busy_offsets) -> bytes\n\n"
"The summary slices of a plan as JSON, joined by ',\\n': `writer.summary_events`'s twin, to\n"
"the byte (floats as `repr` writes them). Summary k is `head`, labels[label_code[k]] (its\n"
"label's JSON without the closing quote), the `(+N more)` of its count, tracks[track_code[k]]\n"
"(its pid and tid members), its ts and dur, its count and top names (names[top_code[j]],\n"
"top_count[j] for j in top_offsets[k]:top_offsets[k + 1]) and its busy digits\n"
"(busy[busy_offsets[k]:busy_offsets[k + 1]], none when busy is None). Codes int32, counts\n"
"and offsets int64, times float64; every code and offset is checked (ValueError).");

static PyObject *summary_json(PyObject *mod, PyObject *args) {
    (void)mod;
    Py_buffer head, btc, blc, bcode, bcount, boff, bstart, bend, bn, bbusy = {0}, bboff = {0};
    PyObject *tracks, *labels, *names, *busy, *busy_off;
    if (!PyArg_ParseTuple(args, "y*O!y*O!y*O!y*y*y*y*y*y*OO", &head, &PyList_Type, &tracks, &btc, &PyList_Type,
                          &labels, &blc, &PyList_Type, &names, &bcode, &bcount, &boff, &bstart, &bend, &bn, &busy,
                          &busy_off))
        return NULL;
    PyObject *result = NULL;
    OutText o = {NULL, 0, 0, 0};
    int has_busy = busy != Py_None;
    if (has_busy && (PyObject_GetBuffer(busy, &bbusy, PyBUF_SIMPLE) < 0 ||
                     PyObject_GetBuffer(busy_off, &bboff, PyBUF_SIMPLE) < 0))
        goto done;
    Py_ssize_t n = bstart.len / 8, m = bcode.len / 4;
    if (bstart.len % 8 || bend.len != bstart.len || bn.len != bstart.len || btc.len != 4 * n || blc.len != 4 * n ||
        bcode.len % 4 || bcount.len != 8 * m || boff.len != 8 * (n + 1) ||
        (has_busy && bboff.len != 8 * (n + 1)) || !offsets_ok(boff.buf, n, m) ||
        (has_busy && !offsets_ok(bboff.buf, n, bbusy.len))) {
        PyErr_SetString(PyExc_ValueError, "summary_json: arrays do not match");
        goto done;
    }
    const int32_t *tc = btc.buf, *lc = blc.buf, *code = bcode.buf;
    const int64_t *cnt = bcount.buf, *off = boff.buf, *num = bn.buf, *boffs = has_busy ? bboff.buf : NULL;
    const double *st = bstart.buf, *en = bend.buf;
    const char *bz = has_busy ? bbusy.buf : NULL;
    /* The text's size at most, every code checked on the way: written then into one bytes
     * object, cut to its length (a window's summaries of long kernel names are ~6 MB: grown
     * by doubling and copied into bytes at the end, they spent ~2x their size in copies and
     * fresh pages). A number takes at most 40 characters, a count 20. */
    size_t cap = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *s;
        Py_ssize_t len, lab, trk;
        if (bytes_item(labels, lc[k], &s, &lab) < 0 || bytes_item(tracks, tc[k], &s, &trk) < 0) goto done;
        size_t one = 2 + (size_t)head.len + (size_t)lab + 30 + 1 + (size_t)trk + 6 + 40 + 7 + 40 + 17 + 20 + 8 + 1 + 2;
        for (int64_t j = off[k]; j < off[k + 1]; j++) {
            if (bytes_item(names, code[j], &s, &len) < 0) goto done;
            one += (size_t)len + 24;
        }
        if (has_busy) one += 10 + (size_t)(boffs[k + 1] - boffs[k]);
        if (one > (size_t)PY_SSIZE_T_MAX - cap) goto nomem;
        cap += one;
    }
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    if (!result) goto done;
    o.p = PyBytes_AS_STRING(result);
    o.cap = cap;
    o.fixed = 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        const char *s;
        Py_ssize_t len;
        if (k && OUT_LIT(&o, ",\n") < 0) goto nomem;
        if (out_put(&o, head.buf, (size_t)head.len) < 0) goto nomem;
        if (bytes_item(labels, lc[k], &s, &len) < 0) goto done;
        if (out_put(&o, s, (size_t)len) < 0) goto nomem;
        if (num[k] > 1) {
            if (OUT_LIT(&o, " (+") < 0 || out_int(&o, (long long)num[k] - 1) < 0 || OUT_LIT(&o, " more)\"") < 0)
                goto nomem;
        } else if (OUT_LIT(&o, "\"") < 0) {
            goto nomem;
        }
        if (bytes_item(tracks, tc[k], &s, &len) < 0) goto done;
        if (OUT_LIT(&o, ",") < 0 || out_put(&o, s, (size_t)len) < 0 || OUT_LIT(&o, ",\"ts\":") < 0) goto nomem;
        if (out_double(&o, st[k]) < 0 || OUT_LIT(&o, ",\"dur\":") < 0 || out_double(&o, en[k] - st[k]) < 0) goto nomem;
        if (OUT_LIT(&o, ",\"args\":{\"count\":") < 0 || out_int(&o, (long long)num[k]) < 0 || OUT_LIT(&o, ",\"top\":[") < 0)
            goto nomem;
        for (int64_t j = off[k]; j < off[k + 1]; j++) {
            if (bytes_item(names, code[j], &s, &len) < 0) goto done;
            if ((j > off[k] && OUT_LIT(&o, ",") < 0) || OUT_LIT(&o, "[") < 0 || out_put(&o, s, (size_t)len) < 0 ||
                OUT_LIT(&o, ",") < 0 || out_int(&o, (long long)cnt[j]) < 0 || OUT_LIT(&o, "]") < 0)
                goto nomem;
        }
        if (OUT_LIT(&o, "]") < 0) goto nomem;
        if (has_busy && boffs[k + 1] > boffs[k]) {
            if (OUT_LIT(&o, ",\"busy\":\"") < 0 || out_put(&o, bz + boffs[k], (size_t)(boffs[k + 1] - boffs[k])) < 0 ||
                OUT_LIT(&o, "\"") < 0)
                goto nomem;
        }
        if (OUT_LIT(&o, "}}") < 0) goto nomem;
    }
    if (_PyBytes_Resize(&result, (Py_ssize_t)o.n) < 0) result = NULL; /* freed by it */
    goto done;
nomem:
    if (!PyErr_Occurred()) {
        if (o.fixed) /* the size was misjudged: a bug, never a cut text */
            PyErr_SetString(PyExc_SystemError, "summary_json: the text outgrew its size");
        else
            PyErr_NoMemory();
    }
    Py_CLEAR(result);
done:
    if (result && PyErr_Occurred()) Py_CLEAR(result); /* a check failed while writing */
    PyBuffer_Release(&head);
    PyBuffer_Release(&btc);
    PyBuffer_Release(&blc);
    PyBuffer_Release(&bcode);
    PyBuffer_Release(&bcount);
    PyBuffer_Release(&boff);
    PyBuffer_Release(&bstart);
    PyBuffer_Release(&bend);
    PyBuffer_Release(&bn);
    if (bbusy.obj) PyBuffer_Release(&bbusy);
    if (bboff.obj) PyBuffer_Release(&bboff);
    return result;
}

static PyMethodDef module_methods[] = {
    {"spans", spans, METH_VARARGS, spans_doc},
    {"busy_parts", busy_parts, METH_VARARGS, busy_parts_doc},
    {"fold_cuts", fold_cuts, METH_VARARGS, fold_cuts_doc},
    {"name_counts", name_counts, METH_VARARGS, name_counts_doc},
    {"bounds_within", bounds_within, METH_VARARGS, bounds_within_doc},
    {"select_slices", select_slices, METH_VARARGS, select_slices_doc},
    {"search_through", search_through, METH_VARARGS, search_through_doc},
    {"fold_groups", fold_groups, METH_VARARGS, fold_groups_doc},
    {"firsts_by_key", firsts_by_key, METH_VARARGS, firsts_by_key_doc},
    {"window_keep", window_keep, METH_VARARGS, window_keep_doc},
    {"step_values", step_values, METH_VARARGS, step_values_doc},
    {"pb_fields", pb_fields, METH_VARARGS, pb_fields_doc},
    {"pb_event_columns", pb_event_columns, METH_VARARGS, pb_event_columns_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"args_may_need_cut", args_may_need_cut, METH_VARARGS, args_may_need_cut_doc},
    {"events_may_need_cut", events_may_need_cut, METH_VARARGS, events_may_need_cut_doc},
    {"summary_json", summary_json, METH_VARARGS, summary_json_doc},
    {"braces", braces, METH_O, "braces(text) -> int: how many '{' bytes `text` holds (rows a block may need)."},
    {"count_byte", count_byte, METH_VARARGS, count_byte_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_scan",
    "Native Chrome trace JSON scanning: columns and byte spans without a Python object per event.",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    init_cpu();
#ifdef HAVE_STRTOD_L
    if (c_numeric == (locale_t)0) c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
#endif
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
