/* rocketstore._facade: the compiled base of the MessageStore facade (pure twin: _facade_py.py).
 *
 * MessageStore's hot calls (put, put_pipelined, the point reads, receive, ack, commit_offset) are methods of this type, fixed
 * on the class. Each passes its arguments, as the caller gave them (vectorcall: no tuple, no
 * dict), to the store's role's callable of that name (rocketstore.roles), which setting
 * ``_role`` copies into this object's table: a call costs one C call more than calling the
 * role's callable itself, and no Python frame. Public C API only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

enum { C_PUT, C_PUT_PIPELINED, C_READ, C_MSG_ID, C_QUEUE_OFFSET, C_KEY, C_UNIQUE_KEY, C_GET_MESSAGE, C_RECEIVE, C_ACK, C_COMMIT_OFFSET, N_CALLS };

static const char *const CALL_NAMES[N_CALLS] = {
    "put", "put_pipelined", "read", "get_by_msg_id", "get_by_queue_offset", "query_by_key",
    "query_by_unique_key", "get_message", "receive", "ack", "commit_offset",
};
static PyObject *call_names[N_CALLS]; /* interned */

typedef struct {
    PyObject_HEAD
    PyObject *role;
    PyObject *calls[N_CALLS];
} FacadeObject;

static int facade_traverse(FacadeObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->role);
    for (int i = 0; i < N_CALLS; i++) Py_VISIT(self->calls[i]);
    return 0;
}

static int facade_clear(FacadeObject *self) {
    Py_CLEAR(self->role);
    for (int i = 0; i < N_CALLS; i++) Py_CLEAR(self->calls[i]);
    return 0;
}

static void facade_dealloc(FacadeObject *self) {
    PyObject_GC_UnTrack(self);
    facade_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *facade_get_role(FacadeObject *self, void *closure) {
    (void)closure;
    if (self->role == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_role");
        return NULL;
    }
    Py_INCREF(self->role);
    return self->role;
}

static int facade_set_role(FacadeObject *self, PyObject *role, void *closure) {
    (void)closure;
    PyObject *calls[N_CALLS] = {NULL};
    if (role != NULL) {
        for (int i = 0; i < N_CALLS; i++) {
            calls[i] = PyObject_GetAttr(role, call_names[i]);
            if (calls[i] == NULL) {
                for (int j = 0; j < i; j++) Py_DECREF(calls[j]);
                return -1;
            }
        }
        Py_INCREF(role);
    }
    /* swap in, then drop the old ones (a call in progress holds its own reference) */
    PyObject *old_role = self->role;
    PyObject *old[N_CALLS];
    self->role = role;
    for (int i = 0; i < N_CALLS; i++) {
        old[i] = self->calls[i];
        self->calls[i] = calls[i];
    }
    Py_XDECREF(old_role);
    for (int i = 0; i < N_CALLS; i++) Py_XDECREF(old[i]);
    return 0;
}

static PyObject *forward(FacadeObject *self, int i, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *call = self->calls[i];
    if (call == NULL) {
        PyErr_Format(PyExc_AttributeError, "the store has no role for %s() (its __init__ did not run)",
                     CALL_NAMES[i]);
        return NULL;
    }
    Py_INCREF(call); /* the role may be replaced during the call (a takeover, a close) */
    PyObject *result = PyObject_Vectorcall(call, args, PyVectorcall_NARGS(nargsf), kwnames);
    Py_DECREF(call);
    return result;
}

#define FORWARD(NAME, I)                                                                            \
    static PyObject *facade_##NAME(PyObject *self, PyObject *const *args, Py_ssize_t nargs,         \
                                   PyObject *kwnames) {                                             \
        return forward((FacadeObject *)self, I, args, (size_t)nargs, kwnames);                      \
    }
FORWARD(put, C_PUT)
FORWARD(put_pipelined, C_PUT_PIPELINED)
FORWARD(read, C_READ)
FORWARD(get_by_msg_id, C_MSG_ID)
FORWARD(get_by_queue_offset, C_QUEUE_OFFSET)
FORWARD(query_by_key, C_KEY)
FORWARD(query_by_unique_key, C_UNIQUE_KEY)
FORWARD(get_message, C_GET_MESSAGE)
FORWARD(receive, C_RECEIVE)
FORWARD(ack, C_ACK)
FORWARD(commit_offset, C_COMMIT_OFFSET)

#define METHOD(NAME)                                                                                \
    { #NAME, (PyCFunction)(void (*)(void))facade_##NAME, METH_FASTCALL | METH_KEYWORDS, NULL }

static PyMethodDef facade_methods[] = {
    METHOD(put), METHOD(put_pipelined), METHOD(read), METHOD(get_by_msg_id), METHOD(get_by_queue_offset), METHOD(query_by_key),
    METHOD(query_by_unique_key), METHOD(get_message), METHOD(receive), METHOD(ack), METHOD(commit_offset),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef facade_getset[] = {
    {"_role", (getter)facade_get_role, (setter)facade_set_role,
     "The store's role (rocketstore.roles): the callables the hot methods call.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FacadeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rocketstore._facade.FacadeBase",
    .tp_doc = "The compiled base of MessageStore: its hot calls, each the role's callable of that name.",
    .tp_basicsize = sizeof(FacadeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)facade_dealloc,
    .tp_traverse = (traverseproc)facade_traverse,
    .tp_clear = (inquiry)facade_clear,
    .tp_methods = facade_methods,
    .tp_getset = facade_getset,
};

/* set_docs({name: doc}): each method's docstring (with its __text_signature__ line), taken from
 * the pure twin's methods at import. A method's __doc__ reads its ml_doc each time; the copies
 * live as long as the process (set once: a second call changes nothing). */
static PyObject *set_docs(PyObject *module, PyObject *docs) {
    (void)module;
    static int done = 0;
    if (!PyDict_Check(docs)) {
        PyErr_SetString(PyExc_TypeError, "set_docs takes a dict");
        return NULL;
    }
    if (done) Py_RETURN_NONE;
    for (int i = 0; i < N_CALLS; i++) {
        PyObject *doc = PyDict_GetItemWithError(docs, call_names[i]);
        if (doc == NULL) {
            if (PyErr_Occurred()) return NULL;
            continue;
        }
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(doc, &size);
        if (text == NULL) return NULL;
        char *copy = PyMem_RawMalloc((size_t)size + 1);
        if (copy == NULL) return PyErr_NoMemory();
        memcpy(copy, text, (size_t)size + 1);
        facade_methods[i].ml_doc = copy;
    }
    done = 1;
    PyType_Modified(&FacadeType);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_docs", (PyCFunction)set_docs, METH_O, "Give the hot methods their docstrings."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef facade_module = {
    PyModuleDef_HEAD_INIT, "rocketstore._facade",
    "The compiled base of the MessageStore facade (pure twin: rocketstore._facade_py).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__facade(void) {
    for (int i = 0; i < N_CALLS; i++) {
        call_names[i] = PyUnicode_InternFromString(CALL_NAMES[i]);
        if (call_names[i] == NULL) return NULL;
    }
    if (PyType_Ready(&FacadeType) < 0) return NULL;
    PyObject *module = PyModule_Create(&facade_module);
    if (module == NULL) return NULL;
    Py_INCREF(&FacadeType);
    if (PyModule_AddObject(module, "FacadeBase", (PyObject *)&FacadeType) < 0) {
        Py_DECREF(&FacadeType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
