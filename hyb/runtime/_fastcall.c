/* The fast path of a warm kernel call, in C.
 *
 * hyb/runtime/fastcall.py describes the design; in short: `call(table, values_of, args)` makes
 * the same signature key as fastcall.fast_key, looks it up in the kernel's table and runs the
 * Entry found there: it checks every argument, allocates the outputs and temporaries, fills
 * the runtime block and calls the native function with the GIL released.  Whatever it does not
 * handle it hands, unchanged, to the plan's `run` (the Python path), which does the copies and
 * raises the errors; a key that is not in the table gives back `MISS`.
 *
 * Only Python.h: arrays are read through the buffer protocol and their `shape` and `dtype`
 * attributes, and outputs are made by the allocator the plan names (numpy.empty or numpy.zeros).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BUFFERS 32 /* a native function with more buffer arguments takes the Python path */
#define SMALL_BLOCK 32 /* runtime blocks of up to this many int64 are kept on the stack */

/* How a scalar argument becomes the bytes the native code reads. */
enum { SC_BOOL, SC_I8, SC_I16, SC_I32, SC_I64, SC_U8, SC_U16, SC_U32, SC_U64, SC_F32, SC_F64, SC_OTHER };

static PyTypeObject *ndarray_type; /* numpy.ndarray */
static PyTypeObject *generic_type; /* numpy.generic */
static PyObject *MISS;             /* what `call` returns when the table has no entry for the key */
static PyObject *str_shape, *str_dtype, *str_run;

/* ------------------------------------------------------------------ threads on a busy machine */

/* hyb/runtime/busy.py in C (its module doc says why and how): the threads a call given `wanted`
 * runs on, from the runnable tasks of the system less this process's own.  The state is touched
 * with the GIL held only. */
#define CHECK_NS 2000000LL /* busy.CHECK_SECONDS */
#define SPIN_NS 5000000LL  /* busy.SPIN_SECONDS */
#define READINGS 3         /* busy.READINGS */
static char loadavg_path[256] = "/proc/loadavg";
static int adapt_threads = 1;
static int64_t checked_ns = INT64_MIN / 2, ended_ns = INT64_MIN / 2, free_cpus = -1;
static int64_t last_threads = 1;
static int64_t seen[READINGS]; /* other processes' runnable tasks in the last reads, newest at seen_next - 1 */
static int seen_count = 0, seen_next = 0;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int64_t runnable_tasks(void)
{
    char buf[256];
    int fd = open(loadavg_path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = buf;
    for (int field = 0; field < 3; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return -1;
        p++;
    }
    char *end;
    long v = strtol(p, &end, 10);
    return end == p || *end != '/' ? -1 : v;
}

static int64_t threads_now(int64_t wanted)
{
    if (wanted <= 1 || !adapt_threads)
        return wanted;
    int64_t t = now_ns();
    if (t - checked_ns >= CHECK_NS) {
        int64_t running = runnable_tasks();
        int64_t mine = 1 + (t - ended_ns < SPIN_NS ? last_threads - 1 : 0);
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (running < 0) {
            free_cpus = -1;
            seen_count = seen_next = 0;
        } else {
            seen[seen_next] = running - mine > 0 ? running - mine : 0;
            seen_next = (seen_next + 1) % READINGS;
            if (seen_count < READINGS)
                seen_count++;
            int64_t fewest = seen[0];
            for (int k = 1; k < seen_count; k++)
                fewest = seen[k] < fewest ? seen[k] : fewest;
            int64_t left = (cpus > 0 ? cpus : 1) - fewest;
            free_cpus = left > 0 ? left : 0;
        }
        checked_ns = t;
    }
    if (free_cpus < 0)
        return wanted;
    return free_cpus < 1 ? 1 : (free_cpus < wanted ? free_cpus : wanted);
}

static void ran(int64_t threads)
{
    if (threads > 1) {
        ended_ns = now_ns();
        last_threads = threads;
    }
}

static PyObject *fc_threads_now(PyObject *module, PyObject *arg)
{
    long long wanted = PyLong_AsLongLong(arg);
    if (wanted == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(threads_now(wanted));
}

/* configure(enabled, path): turn the check on or off and read the runnable tasks from `path`
 * (for tests); the previous state is forgotten. */
static PyObject *fc_configure(PyObject *module, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "configure(enabled, loadavg path)");
        return NULL;
    }
    int enabled = PyObject_IsTrue(argv[0]);
    const char *path = PyUnicode_AsUTF8(argv[1]);
    if (enabled < 0 || path == NULL)
        return NULL;
    if (strlen(path) >= sizeof(loadavg_path)) {
        PyErr_SetString(PyExc_ValueError, "path too long");
        return NULL;
    }
    strcpy(loadavg_path, path);
    adapt_threads = enabled;
    checked_ns = ended_ns = INT64_MIN / 2;
    last_threads = 1;
    seen_count = seen_next = 0;
    Py_RETURN_NONE;
}

/* The native function, called with its n buffer pointers and the runtime block. */
/* T<n>: n `void *` parameter types; P<n>(k): the n arguments p[k], ..., p[k + n - 1]. */
#define T1 void *
#define T2 T1, void *
#define T3 T2, void *
#define T4 T3, void *
#define T8 T4, T4
#define T16 T8, T8
#define P4(k) p[k], p[k + 1], p[k + 2], p[k + 3]
#define P8(k) P4(k), P4(k + 4)
#define P16(k) P8(k), P8(k + 8)

static int32_t invoke(uintptr_t f, Py_ssize_t n, void **p, int64_t *b)
{
    switch (n) {
    case 0: return ((int32_t (*)(int64_t *))f)(b);
    case 1: return ((int32_t (*)(T1, int64_t *))f)(p[0], b);
    case 2: return ((int32_t (*)(T2, int64_t *))f)(p[0], p[1], b);
    case 3: return ((int32_t (*)(T3, int64_t *))f)(p[0], p[1], p[2], b);
    case 4: return ((int32_t (*)(T4, int64_t *))f)(P4(0), b);
    case 5: return ((int32_t (*)(T4, T1, int64_t *))f)(P4(0), p[4], b);
    case 6: return ((int32_t (*)(T4, T2, int64_t *))f)(P4(0), p[4], p[5], b);
    case 7: return ((int32_t (*)(T4, T3, int64_t *))f)(P4(0), p[4], p[5], p[6], b);
    case 8: return ((int32_t (*)(T8, int64_t *))f)(P8(0), b);
    case 9: return ((int32_t (*)(T8, T1, int64_t *))f)(P8(0), p[8], b);
    case 10: return ((int32_t (*)(T8, T2, int64_t *))f)(P8(0), p[8], p[9], b);
    case 11: return ((int32_t (*)(T8, T3, int64_t *))f)(P8(0), p[8], p[9], p[10], b);
    case 12: return ((int32_t (*)(T8, T4, int64_t *))f)(P8(0), P4(8), b);
    case 13: return ((int32_t (*)(T8, T4, T1, int64_t *))f)(P8(0), P4(8), p[12], b);
    case 14: return ((int32_t (*)(T8, T4, T2, int64_t *))f)(P8(0), P4(8), p[12], p[13], b);
    case 15: return ((int32_t (*)(T8, T4, T3, int64_t *))f)(P8(0), P4(8), p[12], p[13], p[14], b);
    case 16: return ((int32_t (*)(T16, int64_t *))f)(P16(0), b);
    case 17: return ((int32_t (*)(T16, T1, int64_t *))f)(P16(0), p[16], b);
    case 18: return ((int32_t (*)(T16, T2, int64_t *))f)(P16(0), p[16], p[17], b);
    case 19: return ((int32_t (*)(T16, T3, int64_t *))f)(P16(0), p[16], p[17], p[18], b);
    case 20: return ((int32_t (*)(T16, T4, int64_t *))f)(P16(0), P4(16), b);
    case 21: return ((int32_t (*)(T16, T4, T1, int64_t *))f)(P16(0), P4(16), p[20], b);
    case 22: return ((int32_t (*)(T16, T4, T2, int64_t *))f)(P16(0), P4(16), p[20], p[21], b);
    case 23: return ((int32_t (*)(T16, T4, T3, int64_t *))f)(P16(0), P4(16), p[20], p[21], p[22], b);
    case 24: return ((int32_t (*)(T16, T8, int64_t *))f)(P16(0), P8(16), b);
    case 25: return ((int32_t (*)(T16, T8, T1, int64_t *))f)(P16(0), P8(16), p[24], b);
    case 26: return ((int32_t (*)(T16, T8, T2, int64_t *))f)(P16(0), P8(16), p[24], p[25], b);
    case 27: return ((int32_t (*)(T16, T8, T3, int64_t *))f)(P16(0), P8(16), p[24], p[25], p[26], b);
    case 28: return ((int32_t (*)(T16, T8, T4, int64_t *))f)(P16(0), P8(16), P4(24), b);
    case 29: return ((int32_t (*)(T16, T8, T4, T1, int64_t *))f)(P16(0), P8(16), P4(24), p[28], b);
    case 30: return ((int32_t (*)(T16, T8, T4, T2, int64_t *))f)(P16(0), P8(16), P4(24), p[28], p[29], b);
    case 31: return ((int32_t (*)(T16, T8, T4, T3, int64_t *))f)(P16(0), P8(16), P4(24), p[28], p[29], p[30], b);
    case 32: return ((int32_t (*)(T16, T16, int64_t *))f)(P16(0), P16(16), b);
    default: return -1; /* not reached: such plans take the Python path */
    }
}

/* ------------------------------------------------------------------ the entry of one signature */

typedef struct {
    char scalar;         /* a scalar parameter (else an array) */
    char written;        /* arrays: the kernel writes it in place */
    char code;           /* scalars: SC_* */
    Py_ssize_t align;    /* arrays: the alignment of its dtype */
    Py_ssize_t itemsize; /* scalars: bytes of the parameter's dtype */
    PyObject *dtype;     /* the dtype the native code takes */
    PyObject *type;      /* scalars: the NumPy scalar type of that dtype */
} Slot;

typedef struct {
    PyObject *allocate; /* numpy.empty or numpy.zeros */
    PyObject *shape;
    PyObject *dtype;
} Made;

typedef struct {
    PyObject_HEAD
    uintptr_t address; /* of the native function */
    int python_only;
    int used; /* called since the kernel last cleared it (which variants to keep) */
    Py_ssize_t n_in, n_made, n_block, n_out;
    Slot *in;
    Made *made;
    int64_t *block; /* the runtime block's first values; its layout is hyb/codegen/abi.py's
                       RT_* (0: index, 1: axis of a failed check; 4 slots at least) */
    Py_ssize_t *out;
    PyObject *failed; /* failed(code, index, axis) raises the error of a failed run-time check */
    PyObject *run;    /* run(args): the Python path */
    PyObject *plan;
} Entry;

static PyTypeObject EntryType;

static int entry_traverse(Entry *e, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; e->in && i < e->n_in; i++) {
        Py_VISIT(e->in[i].dtype);
        Py_VISIT(e->in[i].type);
    }
    for (Py_ssize_t i = 0; e->made && i < e->n_made; i++) {
        Py_VISIT(e->made[i].allocate);
        Py_VISIT(e->made[i].shape);
        Py_VISIT(e->made[i].dtype);
    }
    Py_VISIT(e->failed);
    Py_VISIT(e->run);
    Py_VISIT(e->plan);
    return 0;
}

static int entry_clear(Entry *e)
{
    for (Py_ssize_t i = 0; e->in && i < e->n_in; i++) {
        Py_CLEAR(e->in[i].dtype);
        Py_CLEAR(e->in[i].type);
    }
    for (Py_ssize_t i = 0; e->made && i < e->n_made; i++) {
        Py_CLEAR(e->made[i].allocate);
        Py_CLEAR(e->made[i].shape);
        Py_CLEAR(e->made[i].dtype);
    }
    Py_CLEAR(e->failed);
    Py_CLEAR(e->run);
    Py_CLEAR(e->plan);
    return 0;
}

static void entry_dealloc(Entry *e)
{
    PyObject_GC_UnTrack(e);
    entry_clear(e);
    PyMem_Free(e->in);
    PyMem_Free(e->made);
    PyMem_Free(e->block);
    PyMem_Free(e->out);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* An attribute as a Py_ssize_t (-1 with an error set on failure). */
static Py_ssize_t ssize_attr(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        return -1;
    Py_ssize_t x = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return x;
}

static int scalar_code(PyObject *dtype, Py_ssize_t itemsize)
{
    PyObject *kind = PyObject_GetAttrString(dtype, "kind");
    if (kind == NULL)
        return -1;
    const char *k = PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
    int code = SC_OTHER;
    if (k != NULL && k[0] && !k[1]) {
        int log2 = itemsize == 1 ? 0 : itemsize == 2 ? 1 : itemsize == 4 ? 2 : itemsize == 8 ? 3 : -1;
        if (k[0] == 'b' && itemsize == 1)
            code = SC_BOOL;
        else if (k[0] == 'i' && log2 >= 0)
            code = SC_I8 + log2;
        else if (k[0] == 'u' && log2 >= 0)
            code = SC_U8 + log2;
        else if (k[0] == 'f' && itemsize == 4)
            code = SC_F32;
        else if (k[0] == 'f' && itemsize == 8)
            code = SC_F64;
    }
    Py_DECREF(kind);
    if (k == NULL) {
        PyErr_Clear();
        return SC_OTHER;
    }
    return code;
}

static int read_slot(Slot *s, PyObject *spec)
{
    PyObject *v = PyObject_GetAttrString(spec, "scalar");
    if (v == NULL)
        return -1;
    int scalar = PyObject_IsTrue(v);
    Py_DECREF(v);
    if ((v = PyObject_GetAttrString(spec, "written")) == NULL)
        return -1;
    int written = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (scalar < 0 || written < 0)
        return -1;
    s->scalar = (char)scalar;
    s->written = (char)written;
    if ((s->dtype = PyObject_GetAttrString(spec, "dtype")) == NULL)
        return -1;
    if ((s->align = ssize_attr(s->dtype, "alignment")) < 1 ||
        (s->itemsize = ssize_attr(s->dtype, "itemsize")) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a dtype with a bad alignment");
        return -1;
    }
    if (scalar) {
        int code = scalar_code(s->dtype, s->itemsize);
        if (code < 0)
            return -1;
        s->code = (char)code;
        if (s->itemsize > 16)
            s->code = SC_OTHER;
        if ((s->type = PyObject_GetAttrString(s->dtype, "type")) == NULL)
            return -1;
    }
    return 0;
}

/* The items of an attribute that is a sequence, as a new list. */
static PyObject *list_attr(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        return NULL;
    PyObject *l = PySequence_List(v);
    Py_DECREF(v);
    return l;
}

static PyObject *entry_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *plan;
    static char *kwlist[] = {"plan", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Entry", kwlist, &plan))
        return NULL;
    Entry *e = (Entry *)type->tp_alloc(type, 0);
    if (e == NULL)
        return NULL;
    PyObject *inputs = NULL, *made = NULL, *block = NULL, *outs = NULL, *v = NULL;
    e->plan = Py_NewRef(plan);
    e->used = 1;
    if ((e->failed = PyObject_GetAttrString(plan, "failed")) == NULL ||
        (e->run = PyObject_GetAttrString(plan, "run")) == NULL)
        goto fail;
    if ((v = PyObject_GetAttrString(plan, "address")) == NULL)
        goto fail;
    e->address = (uintptr_t)PyLong_AsUnsignedLongLong(v);
    Py_CLEAR(v);
    if (e->address == (uintptr_t)-1 && PyErr_Occurred())
        goto fail;
    if ((v = PyObject_GetAttrString(plan, "python_only")) == NULL)
        goto fail;
    e->python_only = PyObject_IsTrue(v);
    Py_CLEAR(v);
    if (e->python_only < 0)
        goto fail;
    if ((inputs = list_attr(plan, "inputs")) == NULL || (made = list_attr(plan, "made")) == NULL ||
        (block = list_attr(plan, "block")) == NULL || (outs = list_attr(plan, "outputs")) == NULL)
        goto fail;
    e->n_in = PyList_GET_SIZE(inputs);
    e->n_made = PyList_GET_SIZE(made);
    e->n_block = PyList_GET_SIZE(block);
    e->n_out = PyList_GET_SIZE(outs);
    e->in = PyMem_Calloc(e->n_in + 1, sizeof(Slot));
    e->made = PyMem_Calloc(e->n_made + 1, sizeof(Made));
    e->block = PyMem_Calloc(e->n_block + 1, sizeof(int64_t));
    e->out = PyMem_Calloc(e->n_out + 1, sizeof(Py_ssize_t));
    if (!e->in || !e->made || !e->block || !e->out) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < e->n_in; i++)
        if (read_slot(&e->in[i], PyList_GET_ITEM(inputs, i)) < 0)
            goto fail;
    for (Py_ssize_t i = 0; i < e->n_made; i++) {
        PyObject *m = PyList_GET_ITEM(made, i);
        Made *d = &e->made[i];
        if ((d->allocate = PyObject_GetAttrString(m, "allocate")) == NULL ||
            (d->shape = PyObject_GetAttrString(m, "shape")) == NULL ||
            (d->dtype = PyObject_GetAttrString(m, "dtype")) == NULL)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < e->n_block; i++) {
        e->block[i] = PyLong_AsLongLong(PyList_GET_ITEM(block, i));
        if (e->block[i] == -1 && PyErr_Occurred())
            goto fail;
    }
    for (Py_ssize_t i = 0; i < e->n_out; i++) {
        Py_ssize_t k = PyLong_AsSsize_t(PyList_GET_ITEM(outs, i));
        if (k == -1 && PyErr_Occurred())
            goto fail;
        if (k >= e->n_in || k < -e->n_made) {
            PyErr_Format(PyExc_ValueError, "output index %zd is neither an input nor a made buffer", k);
            goto fail;
        }
        e->out[i] = k;
    }
    if (e->n_in + e->n_made > MAX_BUFFERS || e->n_block < 4 || e->n_out < 1 || e->address == 0)
        e->python_only = 1;
    Py_DECREF(inputs);
    Py_DECREF(made);
    Py_DECREF(block);
    Py_DECREF(outs);
    return (PyObject *)e;
fail:
    Py_XDECREF(inputs);
    Py_XDECREF(made);
    Py_XDECREF(block);
    Py_XDECREF(outs);
    Py_DECREF(e);
    return NULL;
}

static PyObject *entry_get_plan(Entry *e, void *closure)
{
    return Py_NewRef(e->plan);
}

static PyObject *entry_get_run(Entry *e, void *closure)
{
    return Py_NewRef(e->run);
}

static PyObject *entry_get_python_only(Entry *e, void *closure)
{
    return PyBool_FromLong(e->python_only);
}

static PyObject *entry_get_used(Entry *e, void *closure)
{
    return PyBool_FromLong(e->used);
}

static int entry_set_used(Entry *e, PyObject *value, void *closure)
{
    int v = value == NULL ? 0 : PyObject_IsTrue(value);
    if (v < 0)
        return -1;
    e->used = v;
    return 0;
}

static PyGetSetDef entry_getset[] = {
    {"plan", (getter)entry_get_plan, NULL, "the CallPlan this entry was made from", NULL},
    {"run", (getter)entry_get_run, NULL, "the Python path: run(args)", NULL},
    {"python_only", (getter)entry_get_python_only, NULL, "every call takes the Python path", NULL},
    {"used", (getter)entry_get_used, (setter)entry_set_used, "called since it was last set false", NULL},
    {NULL},
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hyb.runtime._fastcall.Entry",
    .tp_doc = "Entry(plan): a CallPlan read once into the form the dispatcher runs.",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = entry_new,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_getset = entry_getset,
};

/* ------------------------------------------------------------------ scalars */

/* Writes scalar `a` as parameter `s` into `slot`: 1 when done, 0 when the Python path must
 * convert it (a value out of the dtype's range, a type this does not convert; no error set). */
static int convert_scalar(const Slot *s, PyObject *a, unsigned char *slot)
{
    PyTypeObject *t = Py_TYPE(a);
    if ((PyObject *)t == s->type && t != &PyFloat_Type && t != &PyLong_Type && t != &PyBool_Type) {
        /* a NumPy scalar of the parameter's own dtype: its bytes, as they are */
        Py_buffer view;
        if (PyObject_GetBuffer(a, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            return 0;
        }
        int ok = view.len == s->itemsize;
        if (ok)
            memcpy(slot, view.buf, (size_t)s->itemsize);
        PyBuffer_Release(&view);
        return ok;
    }
    long long x = 0;
    unsigned long long ux = 0;
    int negative = 0;
    if (t == &PyBool_Type) {
        x = a == Py_True;
        ux = (unsigned long long)x;
    }
    else if (t == &PyLong_Type) {
        int overflow = 0;
        x = PyLong_AsLongLongAndOverflow(a, &overflow);
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (overflow < 0)
            return 0;
        if (overflow > 0) { /* past int64: only a uint64 parameter can hold it */
            if (s->code != SC_U64)
                return 0;
            ux = PyLong_AsUnsignedLongLong(a);
            if (ux == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            memcpy(slot, &ux, 8);
            return 1;
        }
        negative = x < 0;
        ux = (unsigned long long)x;
    }
    else if (t == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(a);
        if (s->code == SC_F64) {
            memcpy(slot, &d, 8);
            return 1;
        }
        if (s->code == SC_F32 && !(isfinite(d) && fabs(d) > FLT_MAX)) {
            float f = (float)d;
            memcpy(slot, &f, 4);
            return 1;
        }
        return 0;
    }
    else
        return 0;
    /* a bool or an int that fits int64, in x */
    switch (s->code) {
#define SIGNED(ty, lo, hi)                                                                             \
    if (x < (lo) || x > (hi))                                                                          \
        return 0;                                                                                      \
    {                                                                                                  \
        ty v = (ty)x;                                                                                  \
        memcpy(slot, &v, sizeof v);                                                                    \
    }                                                                                                  \
    return 1;
#define UNSIGNED(ty, hi)                                                                               \
    if (negative || ux > (hi))                                                                         \
        return 0;                                                                                      \
    {                                                                                                  \
        ty v = (ty)ux;                                                                                 \
        memcpy(slot, &v, sizeof v);                                                                    \
    }                                                                                                  \
    return 1;
    case SC_I8: SIGNED(int8_t, INT8_MIN, INT8_MAX)
    case SC_I16: SIGNED(int16_t, INT16_MIN, INT16_MAX)
    case SC_I32: SIGNED(int32_t, INT32_MIN, INT32_MAX)
    case SC_I64: SIGNED(int64_t, INT64_MIN, INT64_MAX)
    case SC_U8: UNSIGNED(uint8_t, UINT8_MAX)
    case SC_U16: UNSIGNED(uint16_t, UINT16_MAX)
    case SC_U32: UNSIGNED(uint32_t, UINT32_MAX)
    case SC_U64: UNSIGNED(uint64_t, UINT64_MAX)
#undef SIGNED
#undef UNSIGNED
    case SC_BOOL:
        if (t != &PyBool_Type)
            return 0; /* NumPy's own truth rule for other values: the Python path */
        slot[0] = (unsigned char)x;
        return 1;
    case SC_F64:
    case SC_F32:
        if (x > (1LL << 53) || x < -(1LL << 53))
            return 0; /* not exact in a double: the Python path rounds it */
        if (s->code == SC_F64) {
            double d = (double)x;
            memcpy(slot, &d, 8);
        }
        else {
            float f = (float)(double)x;
            memcpy(slot, &f, 4);
        }
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------------ running an entry */

static int overlap(const Py_buffer *a, const Py_buffer *b)
{
    if (a->len == 0 || b->len == 0)
        return 0;
    const char *a0 = a->buf, *b0 = b->buf;
    return a0 < b0 + b->len && b0 < a0 + a->len;
}

/* The array of a key item made for an ndarray: (shape, dtype) -> dtype. */
static PyObject *key_dtype(PyObject *key, Py_ssize_t i)
{
    PyObject *item = PyTuple_GET_ITEM(key, i);
    return PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 2 ? PyTuple_GET_ITEM(item, 1) : NULL;
}

static PyObject *run_entry(Entry *e, PyObject *args, PyObject *key)
{
    Py_buffer views[MAX_BUFFERS];
    char held[MAX_BUFFERS];
    void *ptr[MAX_BUFFERS + 1];
    int64_t slot[MAX_BUFFERS][2]; /* scalar arguments, 16 bytes each, 8-aligned */
    PyObject *made[MAX_BUFFERS];
    int64_t small[SMALL_BLOCK], *block = small;
    Py_ssize_t n_in = e->n_in, n_made = e->n_made, n_made_done = 0;
    PyObject *result = NULL;
    int fallback = 1;

    e->used = 1;
    if (e->python_only || PyTuple_GET_SIZE(args) != n_in || PyTuple_GET_SIZE(key) != n_in)
        return PyObject_CallOneArg(e->run, args);
    memset(held, 0, sizeof held);

    for (Py_ssize_t i = 0; i < n_in; i++) {
        const Slot *s = &e->in[i];
        PyObject *a = PyTuple_GET_ITEM(args, i);
        if (s->scalar) {
            if (Py_IS_TYPE(a, ndarray_type) || !convert_scalar(s, a, (unsigned char *)slot[i]))
                goto done;
            ptr[i] = slot[i];
            continue;
        }
        if (!Py_IS_TYPE(a, ndarray_type))
            goto done;
        PyObject *dtype = key_dtype(key, i);
        if (dtype == NULL)
            goto done;
        if (dtype != s->dtype) { /* an equal dtype object: native byte order; '>f4' is not 'float32' */
            int same = PyObject_RichCompareBool(dtype, s->dtype, Py_EQ);
            if (same <= 0) {
                PyErr_Clear();
                goto done;
            }
        }
        /* numpy refuses a C-contiguous buffer of an array that is not */
        if (PyObject_GetBuffer(a, &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            goto done;
        }
        held[i] = 1;
        if ((s->written && views[i].readonly) || (uintptr_t)views[i].buf % (uintptr_t)s->align)
            goto done;
        ptr[i] = views[i].buf;
    }
    /* An array written in place must not overlap another argument: the native code assumes no
     * aliasing.  Any overlap of byte ranges (sharing memory or not) goes to the Python path,
     * which asks np.shares_memory and copies or refuses. */
    for (Py_ssize_t i = 0; i < n_in; i++) {
        if (e->in[i].scalar || !e->in[i].written)
            continue;
        for (Py_ssize_t j = 0; j < n_in; j++)
            if (j != i && !e->in[j].scalar && overlap(&views[i], &views[j]))
                goto done;
    }
    for (Py_ssize_t k = 0; k < n_made; k++) {
        Made *m = &e->made[k];
        PyObject *argv[2] = {m->shape, m->dtype};
        PyObject *b = PyObject_Vectorcall(m->allocate, argv, 2, NULL);
        if (b == NULL) { /* the Python path raises its own error for this */
            PyErr_Clear();
            goto done;
        }
        made[n_made_done++] = b;
        Py_ssize_t at = n_in + k;
        if (!Py_IS_TYPE(b, ndarray_type) || PyObject_GetBuffer(b, &views[at], PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();
            goto done;
        }
        held[at] = 1;
        if (views[at].readonly)
            goto done;
        ptr[at] = views[at].buf;
    }
    if (e->n_block > SMALL_BLOCK) {
        block = PyMem_Malloc(sizeof(int64_t) * (size_t)e->n_block);
        if (block == NULL) {
            PyErr_NoMemory();
            fallback = 0;
            goto done;
        }
    }
    memcpy(block, e->block, sizeof(int64_t) * (size_t)e->n_block);
    block[3] = threads_now(block[3]); /* abi.RT_THREADS */

    int32_t code;
    Py_ssize_t n_buffers = n_in + n_made;
    uintptr_t address = e->address;
    Py_BEGIN_ALLOW_THREADS
    code = invoke(address, n_buffers, ptr, block);
    Py_END_ALLOW_THREADS
    ran(block[3]);

    fallback = 0;
    if (code != 0) {
        PyObject *r = PyObject_CallFunction(e->failed, "iLL", (int)code, (long long)block[0], (long long)block[1]);
        if (r != NULL) {
            Py_DECREF(r);
            PyErr_Format(PyExc_RuntimeError, "kernel failed with code %d", (int)code);
        }
        goto done;
    }
    if (e->n_out == 1) {
        Py_ssize_t k = e->out[0];
        result = Py_NewRef(k >= 0 ? PyTuple_GET_ITEM(args, k) : made[-k - 1]);
    }
    else {
        result = PyTuple_New(e->n_out);
        if (result == NULL)
            goto done;
        for (Py_ssize_t o = 0; o < e->n_out; o++) {
            Py_ssize_t k = e->out[o];
            PyTuple_SET_ITEM(result, o, Py_NewRef(k >= 0 ? PyTuple_GET_ITEM(args, k) : made[-k - 1]));
        }
    }
done:
    for (Py_ssize_t i = 0; i < n_in + n_made; i++)
        if (held[i])
            PyBuffer_Release(&views[i]);
    for (Py_ssize_t k = 0; k < n_made_done; k++)
        Py_DECREF(made[k]);
    if (block != small)
        PyMem_Free(block);
    if (fallback)
        return PyObject_CallOneArg(e->run, args);
    return result;
}

/* ------------------------------------------------------------------ the dispatcher */

/* The signature key of a call, as fastcall.fast_key makes it; Py_None when an argument is
 * neither an ndarray nor a plain Python or NumPy scalar. */
static PyObject *make_key(PyObject *args, PyObject *values_of)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    int by_value = !(PyAnySet_Check(values_of) && PySet_GET_SIZE(values_of) == 0);
    PyObject *key = PyTuple_New(n);
    if (key == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *a = PyTuple_GET_ITEM(args, k), *item;
        PyTypeObject *t = Py_TYPE(a);
        if (t == ndarray_type) {
            PyObject *shape = PyObject_GetAttr(a, str_shape);
            PyObject *dtype = shape ? PyObject_GetAttr(a, str_dtype) : NULL;
            item = dtype ? PyTuple_New(2) : NULL;
            if (item == NULL) {
                Py_XDECREF(shape);
                Py_XDECREF(dtype);
                Py_DECREF(key);
                return NULL;
            }
            PyTuple_SET_ITEM(item, 0, shape);
            PyTuple_SET_ITEM(item, 1, dtype);
        }
        else if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type || PyType_IsSubtype(t, generic_type)) {
            int with_value = 0;
            if (by_value) {
                PyObject *pos = PyLong_FromSsize_t(k);
                with_value = pos ? PySequence_Contains(values_of, pos) : -1;
                Py_XDECREF(pos);
                if (with_value < 0) {
                    Py_DECREF(key);
                    return NULL;
                }
            }
            item = with_value ? PyTuple_Pack(2, (PyObject *)t, a) : Py_NewRef((PyObject *)t);
            if (item == NULL) {
                Py_DECREF(key);
                return NULL;
            }
        }
        else {
            Py_DECREF(key);
            return Py_NewRef(Py_None);
        }
        PyTuple_SET_ITEM(key, k, item);
    }
    return key;
}

static PyObject *fc_call(PyObject *module, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "call(table, values_of, args) takes 3 arguments");
        return NULL;
    }
    PyObject *table = argv[0], *values_of = argv[1], *args = argv[2];
    if (!PyDict_Check(table) || !PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "call(table, values_of, args): a dict and a tuple");
        return NULL;
    }
    PyObject *key = make_key(args, values_of);
    if (key == NULL)
        return NULL;
    if (key == Py_None) {
        Py_DECREF(key);
        return Py_NewRef(MISS);
    }
    PyObject *entry;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyDict_GetItemRef(table, key, &entry) < 0) {
        Py_DECREF(key);
        return NULL;
    }
#else
    entry = PyDict_GetItemWithError(table, key);
    if (entry == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    Py_XINCREF(entry);
#endif
    if (entry == NULL) {
        Py_DECREF(key);
        return Py_NewRef(MISS);
    }
    PyObject *result = Py_IS_TYPE(entry, &EntryType) ? run_entry((Entry *)entry, args, key)
                                                     : PyObject_CallMethodOneArg(entry, str_run, args);
    Py_DECREF(entry);
    Py_DECREF(key);
    return result;
}

static PyObject *fc_key(PyObject *module, PyObject *const *argv, Py_ssize_t argc)
{
    if (argc != 2 || !PyTuple_Check(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "key(args, values_of): a tuple and a set");
        return NULL;
    }
    return make_key(argv[0], argv[1]);
}

static PyMethodDef fc_methods[] = {
    {"call", (PyCFunction)(void (*)(void))fc_call, METH_FASTCALL,
     "call(table, values_of, args): run the entry of the call's signature, or return MISS"},
    {"key", (PyCFunction)(void (*)(void))fc_key, METH_FASTCALL,
     "key(args, values_of): the signature key `call` looks up (None for a foreign argument)"},
    {"threads_now", (PyCFunction)fc_threads_now, METH_O,
     "threads_now(wanted): the threads a call given `wanted` runs on now (hyb.runtime.busy)"},
    {"configure", (PyCFunction)(void (*)(void))fc_configure, METH_FASTCALL,
     "configure(enabled, loadavg path): the busy-machine check on or off, and where it reads"},
    {NULL},
};

static struct PyModuleDef fc_module = {
    PyModuleDef_HEAD_INIT, "_fastcall", "The C dispatcher of warm kernel calls (see hyb.runtime.fastcall).", -1,
    fc_methods,
};

PyMODINIT_FUNC PyInit__fastcall(void)
{
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    ndarray_type = (PyTypeObject *)PyObject_GetAttrString(numpy, "ndarray");
    generic_type = (PyTypeObject *)PyObject_GetAttrString(numpy, "generic");
    Py_DECREF(numpy);
    if (ndarray_type == NULL || generic_type == NULL)
        return NULL;
    if (!PyType_Check(ndarray_type) || !PyType_Check(generic_type)) {
        PyErr_SetString(PyExc_ImportError, "numpy.ndarray or numpy.generic is not a type");
        return NULL;
    }
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_run = PyUnicode_InternFromString("run");
    MISS = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (!str_shape || !str_dtype || !str_run || !MISS)
        return NULL;
    if (PyType_Ready(&EntryType) < 0)
        return NULL;
    const char *adapt = getenv("HYB_ADAPT_THREADS");
    adapt_threads = !(adapt != NULL && strcmp(adapt, "0") == 0);
    PyObject *m = PyModule_Create(&fc_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Entry", (PyObject *)&EntryType) < 0 ||
        PyModule_AddObjectRef(m, "MISS", MISS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BUFFERS", MAX_BUFFERS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
