# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""yamltext's YAML and orjson's JSON, written in C by a thread that holds no GIL: `render -o` writes its files while it renders.

The text is yamltext.documents' (or emit.json_text's), byte for byte (tests/test_emit.py: every
bundled environment, the generated fleet, random awkward values), for manifests of exact JSON
types: dicts with str keys, lists, str, int within 64 bits, bool, None. For anything else (a
float, a tuple, a str subclass, a lone surrogate, a bigger int, nesting deeper than MAX_DEPTH) it
writes nothing and says so (UNUSUAL): yamltext (or orjson) writes that file.

Why C, and why no GIL: yamltext compiled as Python was 0.1 s for the large fleet, and handing the
manifests to another process cost as much as the render could hide (benchmarks/README.md). Here a
thread reads the render's dicts and lists in place, with no copy and no lock, beside the render.
That is sound while what it reads is neither changed nor freed: `Writer` keeps a reference to
every list it is given (the caller promises not to change them until `finish`), and reads them
with borrowed pointers only. It calls no CPython function that allocates, raises or touches a
reference count: PyDict_Next and PyLong_AsLongLongAndOverflow on exact types read and compute.
"""

from libc.errno cimport EINTR, ETIMEDOUT, errno
from libc.stdlib cimport free, malloc, qsort, realloc
from libc.string cimport memcpy, memset
from posix.fcntl cimport O_CLOEXEC, O_CREAT, O_TRUNC, O_WRONLY
from posix.fcntl cimport open as c_open
from posix.unistd cimport close as c_close
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec
from posix.unistd cimport write as c_write

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

cdef inline PyType* TYPE(PyObj* v) noexcept nogil:
    """v's type; NULL, no type taken, for a str of the old C API whose characters are not ready to read."""
    cdef PyType* t = TYPE_OF(v)
    return NULL if t == &StrType and not StrReady(v) else t


cdef extern from "pthread.h" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t*, void*)
    int pthread_mutex_destroy(pthread_mutex_t*)
    int pthread_mutex_lock(pthread_mutex_t*)
    int pthread_mutex_unlock(pthread_mutex_t*)
    int pthread_cond_init(pthread_cond_t*, void*)
    int pthread_cond_destroy(pthread_cond_t*)
    int pthread_cond_signal(pthread_cond_t*)
    int pthread_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const timespec*)

UNUSUAL = -1  # a value left to yamltext
DEF C_UNUSUAL = -1
DEF C_NOMEM = -2
DEF MAX_DEPTH = 200  # yamltext (Python recursion) takes the rare deeper manifest
DEF IDLE_NS = 100_000_000  # a thread with no file to take for 0.1 s ends; render hands a cluster over every few ms
DEF SMALL = 32  # keys sorted on the stack; a bigger mapping's on the heap, by qsort


cdef struct Out:
    char* buf
    Py_ssize_t n
    Py_ssize_t cap
    bint skip  # the next line's indentation is written already: a "- " of a sequence stands there


cdef int grow(Out* o, Py_ssize_t more) noexcept nogil:
    cdef Py_ssize_t cap = o.cap
    cdef char* bigger
    while o.n + more > cap:
        cap *= 2
    bigger = <char*>realloc(o.buf, cap)
    if bigger == NULL:
        return C_NOMEM
    o.buf, o.cap = bigger, cap
    return 0


cdef inline int put(Out* o, const char* s, Py_ssize_t k) noexcept nogil:
    if o.n + k > o.cap and grow(o, k) < 0:
        return C_NOMEM
    memcpy(o.buf + o.n, s, k)
    o.n += k
    return 0


cdef inline int putc(Out* o, char c) noexcept nogil:
    if o.n + 1 > o.cap and grow(o, 1) < 0:
        return C_NOMEM
    o.buf[o.n] = c
    o.n += 1
    return 0


cdef inline int indent(Out* o, Py_ssize_t pad) noexcept nogil:
    if o.skip:
        o.skip = False
        return 0
    if o.n + pad > o.cap and grow(o, pad) < 0:
        return C_NOMEM
    memset(o.buf + o.n, 32, pad)
    o.n += pad
    return 0


cdef int utf8(Out* o, UCS4 c) noexcept nogil:
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


cdef bint is_word(const unsigned char* s, Py_ssize_t n) noexcept nogil:
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


cdef bint plain(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    if n == 0 or not PLAIN_HEAD[s[0]]:
        return False
    for i in range(1, n):
        if not PLAIN_TAIL[s[i]]:
            return False
    return n > 5 or not is_word(s, n)


cdef int escape(Out* o, UCS4 c) noexcept nogil:
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


cdef int quoted(Out* o, PyObj* s) noexcept nogil:
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


cdef int string(Out* o, PyObj* s) noexcept nogil:
    """yamltext._scalar of a str: plain (ASCII only), or quoted as JSON."""
    if StrAscii(s) and plain(StrBytes(s), StrLen(s)):
        return put(o, <const char*>StrBytes(s), StrLen(s))
    return quoted(o, s)


cdef int literal(Out* o, PyObj* s, Py_ssize_t pad) noexcept nogil:
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


cdef int integer(Out* o, PyObj* v) noexcept nogil:
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


cdef int scalar(Out* o, PyObj* v) noexcept nogil:
    """An int, null or a boolean, as yamltext and orjson both write it."""
    cdef PyType* t = TYPE(v)
    if t == &IntType:
        return integer(o, v)
    if v == NONE:
        return put(o, b"null", 4)
    if t == &BoolType:
        return put(o, b"true", 4) if v == TRUE else put(o, b"false", 5)
    return C_UNUSUAL


cdef int entry(Out* o, PyObj* v, Py_ssize_t pad, int depth) noexcept nogil:
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


cdef int compare(const void* a, const void* b) noexcept nogil:
    return -1 if before((<Item*>a).key, (<Item*>b).key) else 1  # keys differ: no two are equal


cdef int mapping(Out* o, PyObj* d, Py_ssize_t pad, int depth) noexcept nogil:
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


cdef int sequence(Out* o, PyObj* items, Py_ssize_t pad, int depth) noexcept nogil:
    """A non-empty sequence's lines at `pad`: a nested mapping or sequence starts on its dash's line."""
    cdef Py_ssize_t i = -1
    cdef PyObj* item
    cdef int r = 0
    if depth >= MAX_DEPTH:
        return C_UNUSUAL
    while i + 1 < ListSize(items):  # its size read again at each item, should it shrink under the writer
        i += 1
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


cdef int sorted_items(PyObj* d, Item* on_stack, Item** found) noexcept nogil:
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
        if TYPE(k) != &StrType or count == n:  # more keys than it had: changed under the writer, left alone
            return C_UNUSUAL
        j = count
        while n <= SMALL and j > 0 and before(k, items[j - 1].key):
            items[j] = items[j - 1]
            j -= 1
        items[j].key, items[j].value = k, v
        count += 1
    if count != n:
        return C_UNUSUAL
    if n > SMALL:
        qsort(items, count, sizeof(Item), compare)
    return 0


cdef int json(Out* o, PyObj* v, Py_ssize_t pad, int depth) noexcept nogil:
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


cdef int stream(Out* o, PyObj* manifests, bint as_json) noexcept nogil:
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


cdef int start(Out* o) noexcept nogil:
    o.n, o.cap, o.skip = 0, 1 << 16, False
    o.buf = <char*>malloc(o.cap)
    return 0 if o.buf != NULL else C_NOMEM


cdef int write_file(PyObj* manifests, const char* path, bint as_json) noexcept nogil:
    """The stream's text into the file at `path`: 0, an errno, C_UNUSUAL or C_NOMEM."""
    cdef Out o
    cdef Py_ssize_t done = 0, k
    cdef int fd
    cdef int r = start(&o) or stream(&o, manifests, as_json)
    if r == 0:  # a signal may land on this thread: open and write are tried again, as Python does (PEP 475)
        fd = -1
        while fd < 0 and r == 0:
            fd = c_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o666)
            if fd < 0 and errno != EINTR:
                r = errno
        while r == 0 and done < o.n:
            k = c_write(fd, o.buf + done, o.n - done)
            if k >= 0:
                done += k
            elif errno != EINTR:
                r = errno
        if fd >= 0 and c_close(fd) < 0 and r == 0 and errno != EINTR:  # close is never tried again: the fd is gone
            r = errno
    free(o.buf)
    return r


def documents(list manifests not None, bint as_json=False):
    """yamltext.documents(manifests) (as_json: emit.json_text's), or None when a value is one it
    leaves to them. The GIL is held: no other thread changes the manifests meanwhile."""
    cdef Out o
    cdef int r = start(&o) or stream(&o, <PyObj*>manifests, as_json)
    try:
        if r == C_NOMEM:
            raise MemoryError()
        return None if r == C_UNUSUAL else DecodeUTF8(o.buf, o.n, NULL)
    finally:
        free(o.buf)


cdef class Writer:
    """Files written in the order they are added, by `run` in a thread, and at `finish` by the
    caller too, from the last back: each file is written once, by whoever takes it first.

    A thread runs only while there are files to take, or may soon be: `add` says when one must be
    started (none is running), and `run` ends once it has found none for 0.1 s (IDLE_NS). So no
    thread is left waiting for work: a caller that never finishes still ends (its files are
    written, none is renamed).
    `results`: per file, 0 when written, UNUSUAL when left to yamltext or orjson, else an errno.
    """

    cdef pthread_mutex_t lock
    cdef pthread_cond_t wake  # a file added, or no more to come
    cdef PyObj** items
    cdef char** paths
    cdef int* outcomes
    cdef Py_ssize_t cap, added, front, back  # the thread takes `front`, `finish` takes `back - 1`
    cdef bint running, closed, as_json
    cdef list keep  # what every pointer points into: alive and unchanged until `finish`

    def __cinit__(self, bint as_json=False):
        self.as_json = as_json
        pthread_mutex_init(&self.lock, NULL)
        pthread_cond_init(&self.wake, NULL)
        self.keep = []

    def __dealloc__(self):
        pthread_mutex_destroy(&self.lock)
        pthread_cond_destroy(&self.wake)
        free(self.items)
        free(self.paths)
        free(self.outcomes)

    def add(self, list manifests not None, bytes path not None):
        """One more file: True when a thread must be started to `run`. The manifests must not
        change until `finish` (a thread reads them in place); they and the path are kept till then."""
        cdef Py_ssize_t cap
        cdef void* grown
        if b"\0" in path:
            raise ValueError("embedded null byte")  # as open() says: C would stop at it, at another file
        with nogil:
            pthread_mutex_lock(&self.lock)
        try:
            if self.closed:
                raise RuntimeError("no file is added once the writer has finished")
            if self.added == self.cap:  # each array grown in turn: a failure leaves them all valid
                cap = self.cap * 2 if self.cap else 16
                grown = realloc(self.items, cap * sizeof(PyObj*))
                if grown == NULL:
                    raise MemoryError()
                self.items = <PyObj**>grown
                grown = realloc(self.paths, cap * sizeof(char*))
                if grown == NULL:
                    raise MemoryError()
                self.paths = <char**>grown
                grown = realloc(self.outcomes, cap * sizeof(int))
                if grown == NULL:
                    raise MemoryError()
                self.outcomes, self.cap = <int*>grown, cap
            self.keep.append((manifests, path))
            self.items[self.added] = <PyObj*>manifests
            self.paths[self.added] = <char*>path
            self.outcomes[self.added] = 0
            self.added += 1
            self.back = self.added
            if self.running:
                pthread_cond_signal(&self.wake)
                return False
            self.running = True
            return True
        finally:
            pthread_mutex_unlock(&self.lock)

    def not_running(self):
        """A thread `add` asked for could not be started: the next `add` asks again."""
        with nogil:
            pthread_mutex_lock(&self.lock)
            self.running = False
            pthread_mutex_unlock(&self.lock)

    cdef void write_locked(self, Py_ssize_t i) noexcept nogil:
        """Write the `i`th file: called and returning with the lock held, which the writing is not."""
        cdef PyObj* manifests = self.items[i]
        cdef char* path = self.paths[i]
        cdef int r
        pthread_mutex_unlock(&self.lock)
        r = write_file(manifests, path, self.as_json)
        pthread_mutex_lock(&self.lock)
        self.outcomes[i] = r

    def run(self):
        """A thread's work: each file in order, until none has come for IDLE_NS, or none will."""
        cdef timespec until
        cdef bint idle = False
        with nogil:
            pthread_mutex_lock(&self.lock)
            while True:
                if self.front < self.back:
                    self.front += 1
                    self.write_locked(self.front - 1)
                    idle = False
                    continue
                if self.closed or idle:
                    break
                clock_gettime(CLOCK_REALTIME, &until)  # the clock pthread_cond_timedwait reads by default
                until.tv_nsec += IDLE_NS
                if until.tv_nsec >= 1_000_000_000:
                    until.tv_sec += 1
                    until.tv_nsec -= 1_000_000_000
                idle = pthread_cond_timedwait(&self.wake, &self.lock, &until) == ETIMEDOUT
            self.running = False
            pthread_mutex_unlock(&self.lock)

    def finish(self):
        """No more files: write the ones no thread has begun, from the last back, while a thread
        finishes its own. Join the threads before reading `results`."""
        with nogil:
            pthread_mutex_lock(&self.lock)
            self.closed = True
            pthread_cond_signal(&self.wake)
            while self.front < self.back:
                self.back -= 1
                self.write_locked(self.back)
            pthread_mutex_unlock(&self.lock)

    def abandon(self):
        """Stop: no file is begun after this (join the threads: one may still be writing its file)."""
        with nogil:
            pthread_mutex_lock(&self.lock)
            self.closed = True
            self.back = self.front
            pthread_cond_signal(&self.wake)
            pthread_mutex_unlock(&self.lock)

    def results(self):
        """Each file's result, once the threads have ended."""
        results = [self.outcomes[i] for i in range(self.added)]
        if C_NOMEM in results:
            raise MemoryError()
        return results
