# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""yamltext's YAML and orjson's JSON, written in C: `render -o` writes each cluster's file as it is rendered.

The text is yamltext.documents' (or emit.json_text's), byte for byte (tests/render/test_emit.py: every
bundled environment, the generated fleet, random awkward values), for manifests of exact JSON
types: dicts with str keys, lists, str, int within 64 bits, bool, None. For anything else (a
float, a tuple, a str subclass, a lone surrogate, a bigger int, nesting deeper than MAX_DEPTH) it
writes nothing and says so (None): yamltext (or orjson) writes that file.

Why C: 0.3 s of CPU less than yamltext for the large fleet's files, `render -o` 1.15x the render's
CPU instead of 1.8x (benchmarks/README.md, "What pays"). It is a plain call from Python, GIL held, as
render finishes each cluster: nothing changes the manifests while it reads them.
"""

from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy, memset

# nogil: the key order below (`before`) reads strs through these, and qsort takes only a nogil comparator.
cdef extern from "Python.h" nogil:
    ctypedef struct PyObj "PyObject":
        pass
    ctypedef struct PyType "PyTypeObject":
        pass
    ctypedef unsigned int UCS4 "Py_UCS4"
    PyType* TYPE_OF "Py_TYPE"(PyObj*)
    PyType DictType "PyDict_Type"
    PyType ListType "PyList_Type"
    PyType StrType "PyUnicode_Type"
    PyType IntType "PyLong_Type"
    PyType BoolType "PyBool_Type"
    PyObj* NONE "Py_None"
    PyObj* TRUE "Py_True"
    int DictNext "PyDict_Next"(PyObj*, Py_ssize_t*, PyObj**, PyObj**)
    Py_ssize_t DictSize "PyDict_GET_SIZE"(PyObj*)
    Py_ssize_t ListSize "PyList_GET_SIZE"(PyObj*)
    PyObj* ListItem "PyList_GET_ITEM"(PyObj*, Py_ssize_t)
    bint StrReady "PyUnicode_IS_READY"(PyObj*)
    bint StrAscii "PyUnicode_IS_COMPACT_ASCII"(PyObj*)
    const unsigned char* StrBytes "PyUnicode_1BYTE_DATA"(PyObj*)
    int StrKind "PyUnicode_KIND"(PyObj*)
    void* StrData "PyUnicode_DATA"(PyObj*)
    Py_ssize_t StrLen "PyUnicode_GET_LENGTH"(PyObj*)
    UCS4 StrRead "PyUnicode_READ"(int, void*, Py_ssize_t)
    long long AsLongLong "PyLong_AsLongLongAndOverflow"(PyObj*, int*)
    object DecodeUTF8 "PyUnicode_DecodeUTF8"(const char*, Py_ssize_t, const char*)

cdef inline PyType* TYPE(PyObj* v) noexcept:
    """v's type; NULL, no type taken, for a str of the old C API whose characters are not ready to read."""
    cdef PyType* t = TYPE_OF(v)
    return NULL if t == &StrType and not StrReady(v) else t


DEF C_UNUSUAL = -1
DEF C_NOMEM = -2
DEF MAX_DEPTH = 200  # yamltext (Python recursion) takes the rare deeper manifest
DEF SMALL = 32  # keys sorted on the stack; a bigger mapping's on the heap, by qsort


cdef struct Out:
    char* buf
    Py_ssize_t n
    Py_ssize_t cap
    bint skip  # the next line's indentation is written already: a "- " of a sequence stands there


cdef int grow(Out* o, Py_ssize_t more) noexcept:
    cdef Py_ssize_t cap = o.cap
    cdef char* bigger
    while o.n + more > cap:
        cap *= 2
    bigger = <char*>realloc(o.buf, cap)
    if bigger == NULL:
        return C_NOMEM
    o.buf, o.cap = bigger, cap
    return 0


cdef inline int put(Out* o, const char* s, Py_ssize_t k) noexcept:
    if o.n + k > o.cap and grow(o, k) < 0:
        return C_NOMEM
    memcpy(o.buf + o.n, s, k)
    o.n += k
    return 0


cdef inline int putc(Out* o, char c) noexcept:
    if o.n + 1 > o.cap and grow(o, 1) < 0:
        return C_NOMEM
    o.buf[o.n] = c
    o.n += 1
    return 0


cdef inline int indent(Out* o, Py_ssize_t pad) noexcept:
    if o.skip:
        o.skip = False
        return 0
    if o.n + pad > o.cap and grow(o, pad) < 0:
        return C_NOMEM
    memset(o.buf + o.n, 32, pad)
    o.n += pad
    return 0


cdef int utf8(Out* o, UCS4 c) noexcept:
    cdef char b[4]
    if c < 0x80:
        return putc(o, <char>c)
    if c < 0x800:
        b[0] = <char>(0xC0 | (c >> 6))
        b[1] = <char>(0x80 | (c & 0x3F))
        return put(o, b, 2)
    if 0xD800 <= c <= 0xDFFF:  # a lone surrogate: no UTF-8 holds it, and yamltext's file says so
        return C_UNUSUAL
    if c < 0x10000:
        b[0] = <char>(0xE0 | (c >> 12))
        b[1] = <char>(0x80 | ((c >> 6) & 0x3F))
        b[2] = <char>(0x80 | (c & 0x3F))
        return put(o, b, 3)
    b[0] = <char>(0xF0 | (c >> 18))
    b[1] = <char>(0x80 | ((c >> 12) & 0x3F))
    b[2] = <char>(0x80 | ((c >> 6) & 0x3F))
    b[3] = <char>(0x80 | (c & 0x3F))
    return put(o, b, 4)


# yamltext's _PLAIN ([A-Za-z][A-Za-z0-9_./-]*) and _WORDS, json.dumps's escapes, _BLOCKABLE's refusals.
cdef unsigned char PLAIN_HEAD[256]
cdef unsigned char PLAIN_TAIL[256]
cdef unsigned char ESCAPED[256]
cdef unsigned char UNBLOCKABLE[256]
for _c in range(256):
    PLAIN_HEAD[_c] = 65 <= _c <= 90 or 97 <= _c <= 122
    PLAIN_TAIL[_c] = PLAIN_HEAD[_c] or 48 <= _c <= 57 or _c in b"_./-"
    ESCAPED[_c] = _c < 0x20 or _c in b'"\\'
    UNBLOCKABLE[_c] = (_c < 0x20 and _c not in b"\t\n") or _c == 0x7f
cdef const char* WORDS[9]
WORDS[:] = [b"y", b"n", b"yes", b"no", b"on", b"off", b"true", b"false", b"null"]
cdef const char* HEX = b"0123456789abcdef"


cdef bint is_word(const unsigned char* s, Py_ssize_t n) noexcept:
    """s.lower() is one of the words YAML 1.1 reads as a boolean or null."""
    cdef char low[5]
    cdef Py_ssize_t i, j
    for i in range(n):
        low[i] = <char>(s[i] + 32 if 65 <= s[i] <= 90 else s[i])
    for j in range(9):
        i = 0
        while i < n and WORDS[j][i] == low[i]:
            i += 1
        if i == n and WORDS[j][n] == 0:
            return True
    return False


cdef bint plain(const unsigned char* s, Py_ssize_t n) noexcept:
    cdef Py_ssize_t i
    if n == 0 or not PLAIN_HEAD[s[0]]:
        return False
    for i in range(1, n):
        if not PLAIN_TAIL[s[i]]:
            return False
    return n > 5 or not is_word(s, n)


cdef int escape(Out* o, UCS4 c) noexcept:
    """One character json.dumps escapes: a quote, a backslash, a control character."""
    cdef char e[6]
    e[0] = 92
    if c == 34 or c == 92:
        e[1] = <char>c
        return put(o, e, 2)
    if c == 10 or c == 13 or c == 9 or c == 8 or c == 12:
        e[1] = 110 if c == 10 else 114 if c == 13 else 116 if c == 9 else 98 if c == 8 else 102  # n r t b f
        return put(o, e, 2)
    e[1], e[2], e[3], e[4], e[5] = 117, 48, 48, HEX[c >> 4], HEX[c & 15]
    return put(o, e, 6)


cdef int quoted(Out* o, PyObj* s) noexcept:
    """A str as json.dumps(ensure_ascii=False) and orjson write it."""
    cdef Py_ssize_t n = StrLen(s), i, run = 0
    cdef const unsigned char* b
    cdef int kind, r
    cdef void* data
    cdef UCS4 c
    if putc(o, 34) < 0:
        return C_NOMEM
    if StrAscii(s):
        b = StrBytes(s)
        for i in range(n):
            if ESCAPED[b[i]]:
                r = put(o, <const char*>b + run, i - run) or escape(o, b[i])
                if r < 0:
                    return r
                run = i + 1
        if put(o, <const char*>b + run, n - run) < 0:
            return C_NOMEM
        return putc(o, 34)
    kind, data = StrKind(s), StrData(s)
    for i in range(n):
        c = StrRead(kind, data, i)
        r = escape(o, c) if c < 0x20 or c == 34 or c == 92 else utf8(o, c)
        if r < 0:
            return r
    return putc(o, 34)


cdef int string(Out* o, PyObj* s) noexcept:
    """yamltext._scalar of a str: plain (ASCII only), or quoted as JSON."""
    if StrAscii(s) and plain(StrBytes(s), StrLen(s)):
        return put(o, <const char*>StrBytes(s), StrLen(s))
    return quoted(o, s)


cdef int literal(Out* o, PyObj* s, Py_ssize_t pad) noexcept:
    """yamltext._literal, after a head: 1 written, 0 when a literal block cannot hold the string."""
    cdef Py_ssize_t n = StrLen(s), i, start, end
    cdef int kind = StrKind(s), r = 0
    cdef void* data = StrData(s)
    cdef const unsigned char* b = StrBytes(s) if StrAscii(s) else NULL
    cdef bint lines = False
    cdef UCS4 c
    for i in range(n):
        c = b[i] if b != NULL else StrRead(kind, data, i)
        if c == 10:
            lines = True
        elif c < 256 and UNBLOCKABLE[c] or c == 0x85 or c == 0x2028 or c == 0x2029 or c == 0xFEFF:
            return 0
    if not lines or StrRead(kind, data, 0) in (10, 32):
        return 0
    end = n
    if StrRead(kind, data, n - 1) == 10:
        end = n - 1
        if StrRead(kind, data, end - 1) == 10:  # trailing blank lines: yamltext writes a JSON string
            return 0
        r = put(o, b" |", 2)
    else:
        r = put(o, b" |-", 3)
    start = 0
    while r == 0 and start < end:  # each line of the body: none is last and empty
        i = start
        while i < end and StrRead(kind, data, i) != 10:
            i += 1
        r = putc(o, 10)
        if r == 0 and i > start:
            r = indent(o, pad)
            if r == 0 and b != NULL:
                r = put(o, <const char*>b + start, i - start)
            while r == 0 and b == NULL and start < i:
                r = utf8(o, StrRead(kind, data, start))
                start += 1
        start = i + 1
    if r == 0:
        r = putc(o, 10)
    return 1 if r == 0 else r


cdef int integer(Out* o, PyObj* v) noexcept:
    cdef int overflow = 0
    cdef long long x = AsLongLong(v, &overflow)
    cdef unsigned long long u = <unsigned long long>x
    cdef char digits[24]
    cdef int k = 24
    if overflow:
        return C_UNUSUAL
    if x < 0:
        u = 0 - u
    while True:
        k -= 1
        digits[k] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if x < 0:
        k -= 1
        digits[k] = 45
    return put(o, digits + k, 24 - k)


cdef int scalar(Out* o, PyObj* v) noexcept:
    """An int, null or a boolean, as yamltext and orjson both write it."""
    cdef PyType* t = TYPE(v)
    if t == &IntType:
        return integer(o, v)
    if v == NONE:
        return put(o, b"null", 4)
    if t == &BoolType:
        return put(o, b"true", 4) if v == TRUE else put(o, b"false", 5)
    return C_UNUSUAL


cdef int entry(Out* o, PyObj* v, Py_ssize_t pad, int depth) noexcept:
    """After a head (`key:` or `-`), what yamltext._entry writes; a mapping's lines go at pad + 2."""
    cdef PyType* t = TYPE(v)
    cdef int r
    if t == &DictType:
        if DictSize(v) == 0:
            return put(o, b" {}\n", 4)
        return putc(o, 10) or mapping(o, v, pad + 2, depth)
    if t == &ListType:
        if ListSize(v) == 0:
            return put(o, b" []\n", 4)
        return putc(o, 10) or sequence(o, v, pad, depth)  # a sequence under a key sits at the key's indentation
    if t == &StrType:
        r = literal(o, v, pad + 2)
        if r != 0:
            return 0 if r == 1 else r
        r = putc(o, 32) or string(o, v)
    else:
        r = putc(o, 32) or scalar(o, v)
    return r or putc(o, 10)


cdef bint before(PyObj* a, PyObj* b) noexcept nogil:
    """a < b, as Python orders str: by code point."""
    cdef Py_ssize_t na = StrLen(a), nb = StrLen(b), i
    cdef int ka = StrKind(a), kb = StrKind(b)
    cdef void* da = StrData(a)
    cdef void* db = StrData(b)
    cdef const unsigned char* ba = <const unsigned char*>da
    cdef const unsigned char* bb = <const unsigned char*>db
    cdef UCS4 ca, cb
    for i in range(na if na < nb else nb):
        if ka == 1 and kb == 1:
            ca, cb = ba[i], bb[i]
        else:
            ca, cb = StrRead(ka, da, i), StrRead(kb, db, i)
        if ca != cb:
            return ca < cb
    return na < nb


cdef struct Item:
    PyObj* key
    PyObj* value


# nogil as libc.stdlib's qsort declares its comparator; it runs, like all here, with the GIL held.
cdef int compare(const void* a, const void* b) noexcept nogil:
    return -1 if before((<Item*>a).key, (<Item*>b).key) else 1  # keys differ: no two are equal


cdef int mapping(Out* o, PyObj* d, Py_ssize_t pad, int depth) noexcept:
    """A non-empty mapping's lines at `pad`, keys sorted."""
    cdef Py_ssize_t n = DictSize(d), i = 0
    cdef Item on_stack[SMALL]
    cdef Item* items = on_stack
    cdef int r
    if depth >= MAX_DEPTH:
        return C_UNUSUAL
    r = sorted_items(d, on_stack, &items)
    while r == 0 and i < n:
        r = indent(o, pad) or string(o, items[i].key) or putc(o, 58) or entry(o, items[i].value, pad, depth + 1)
        i += 1
    if items != on_stack:
        free(items)
    return r


cdef int sequence(Out* o, PyObj* items, Py_ssize_t pad, int depth) noexcept:
    """A non-empty sequence's lines at `pad`: a nested mapping or sequence starts on its dash's line."""
    cdef Py_ssize_t i
    cdef PyObj* item
    cdef int r = 0
    if depth >= MAX_DEPTH:
        return C_UNUSUAL
    for i in range(ListSize(items)):
        item = ListItem(items, i)
        r = indent(o, pad)
        if r == 0 and TYPE(item) == &DictType and DictSize(item):
            r = put(o, b"- ", 2)
            o.skip = True
            r = r or mapping(o, item, pad + 2, depth + 1)
        elif r == 0 and TYPE(item) == &ListType and ListSize(item):
            r = put(o, b"- ", 2)
            o.skip = True
            r = r or sequence(o, item, pad + 2, depth + 1)
        elif r == 0:
            r = putc(o, 45) or entry(o, item, pad, depth + 1)
        if r < 0:
            return r
    return 0


cdef int sorted_items(PyObj* d, Item* on_stack, Item** found) noexcept:
    """A mapping's items, keys sorted, into `on_stack` (SMALL of them) or, for more, into memory
    `found` then points at (the caller frees it): insertion sort, most mappings having a handful
    of keys; qsort for more than SMALL."""
    cdef Py_ssize_t n = DictSize(d), pos = 0, count = 0, j
    cdef Item* items = on_stack
    cdef PyObj* k
    cdef PyObj* v
    if n > SMALL:
        items = <Item*>malloc(n * sizeof(Item))
        if items == NULL:
            return C_NOMEM
        found[0] = items
    while DictNext(d, &pos, &k, &v):
        if TYPE(k) != &StrType:
            return C_UNUSUAL
        j = count
        while n <= SMALL and j > 0 and before(k, items[j - 1].key):
            items[j] = items[j - 1]
            j -= 1
        items[j].key, items[j].value = k, v
        count += 1
    if n > SMALL:
        qsort(items, count, sizeof(Item), compare)
    return 0


cdef int json(Out* o, PyObj* v, Py_ssize_t pad, int depth) noexcept:
    """A value as orjson writes it with OPT_INDENT_2 | OPT_SORT_KEYS, its first line already begun."""
    cdef PyType* t = TYPE(v)
    cdef Py_ssize_t n, i
    cdef Item on_stack[SMALL]
    cdef Item* items = on_stack
    cdef int r = 0
    if depth >= MAX_DEPTH:
        return C_UNUSUAL
    if t == &DictType:
        n = DictSize(v)
        if n == 0:
            return put(o, b"{}", 2)
        r = sorted_items(v, on_stack, &items) or putc(o, 123)
        i = 0
        while r == 0 and i < n:
            r = put(o, b",\n" if i else b"\n", 2 if i else 1) or indent(o, pad + 2) or quoted(o, items[i].key) \
                or put(o, b": ", 2) or json(o, items[i].value, pad + 2, depth + 1)
            i += 1
        if items != on_stack:
            free(items)
        return r or putc(o, 10) or indent(o, pad) or putc(o, 125)
    if t == &ListType:
        n = ListSize(v)
        if n == 0:
            return put(o, b"[]", 2)
        r = putc(o, 91)
        i = 0
        while r == 0 and i < ListSize(v):
            r = put(o, b",\n" if i else b"\n", 2 if i else 1) or indent(o, pad + 2) or json(o, ListItem(v, i), pad + 2, depth + 1)
            i += 1
        return r or putc(o, 10) or indent(o, pad) or putc(o, 93)
    if t == &StrType:
        return quoted(o, v)
    return scalar(o, v)


cdef int stream(Out* o, PyObj* manifests, bint as_json) noexcept:
    """yamltext.documents: one `---` document per manifest; or, as_json, emit.json_text: the list."""
    cdef Py_ssize_t i
    cdef PyObj* m
    cdef int r
    if as_json:
        return json(o, manifests, 0, 0) or putc(o, 10)
    for i in range(ListSize(manifests)):
        m = ListItem(manifests, i)
        if TYPE(m) != &DictType:
            return C_UNUSUAL
        r = put(o, b"---\n", 4) or (mapping(o, m, 0, 0) if DictSize(m) else put(o, b"{}\n", 3))
        if r < 0:
            return r
    return 0


cdef int start(Out* o) noexcept:
    o.n, o.cap, o.skip = 0, 1 << 16, False
    o.buf = <char*>malloc(o.cap)
    return 0 if o.buf != NULL else C_NOMEM


def documents(list manifests not None, bint as_json=False):
    """yamltext.documents(manifests) (as_json: emit.json_text's), or None when a value is one it
    leaves to them."""
    cdef Out o
    cdef int r = start(&o) or stream(&o, <PyObj*>manifests, as_json)
    try:
        if r == C_NOMEM:
            raise MemoryError()
        return None if r == C_UNUSUAL else DecodeUTF8(o.buf, o.n, NULL)
    finally:
        free(o.buf)
