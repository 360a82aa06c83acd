/* One launcher for every Triton kernel signature (Triton 3.6 and earlier
 * ABI), so that a pool worker never runs the C compiler to launch a kernel.
 *
 * Triton up to 3.6 generates and compiles one small C extension per kernel
 * signature (the "launcher", triton/backends/nvidia/driver.py:make_launcher);
 * in a forked pool worker that compile was 0.26-0.8 s of a small candidate's
 * 1.4 s evaluation on the H200. This module does the same work driven by a
 * code string instead of generated C: the zygote compiles it once (with
 * Triton's own cuda.h) before it forks, and every child launches through it.
 * Triton 3.7 and later launch through a generic launcher of their own; there
 * this module is not used.
 *
 * launch(codes, gridX, gridY, gridZ, stream, function, cooperative, pdl,
 *        global_scratch, profile_scratch, kernel_metadata, launch_metadata,
 *        enter_hook, exit_hook, *args)
 *   takes exactly the arguments of Triton 3.6's generated launch() after the
 *   code string, converts each argument as PyArg_ParseTuple would with that
 *   launcher's format, and launches with cuLaunchKernelEx as it does.
 * pack(codes, *args) -> bytes
 *   the kernel parameters as launch() would pass them (8 bytes a slot; a
 *   pointer is its integer or data_ptr(), unchecked): for tests on any host.
 *
 * Codes, one per argument of the flattened signature: P pointer, C constexpr
 * (skipped), b i1/i8, h i16, i i32, L i64, B u1/u8, H u16, I u32, K u64,
 * e fp16, E bf16, f fp32, d fp64; "(...)" a tuple argument.
 *
 * libcuda is opened at the first launch (dlopen), not linked, so the module
 * also loads on a host without a GPU.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cuda.h"

#define MAX_SLOTS 256

typedef CUresult (*ctx_get_current_t)(CUcontext *);
typedef CUresult (*device_get_t)(CUdevice *, int);
typedef CUresult (*primary_ctx_retain_t)(CUcontext *, CUdevice);
typedef CUresult (*ctx_set_current_t)(CUcontext);
typedef CUresult (*pointer_get_attribute_t)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*get_error_string_t)(CUresult, const char **);
typedef CUresult (*func_set_attribute_t)(CUfunction, CUfunction_attribute, int);
typedef CUresult (*launch_kernel_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);

static struct {
  int loaded;
  ctx_get_current_t ctx_get_current;
  device_get_t device_get;
  primary_ctx_retain_t primary_ctx_retain;
  ctx_set_current_t ctx_set_current;
  pointer_get_attribute_t pointer_get_attribute;
  get_error_string_t get_error_string;
  func_set_attribute_t func_set_attribute;
  launch_kernel_ex_t launch_kernel_ex;
} cu;

static PyObject *data_ptr_str = NULL;

static int load_cuda(void) {
  if (cu.loaded)
    return 0;
  void *handle = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!handle) {
    PyErr_SetString(PyExc_RuntimeError, "Failed to open libcuda.so.1");
    return -1;
  }
#define KS_SYM(field, name)                                                                \
  cu.field = (__typeof__(cu.field))dlsym(handle, name);                                    \
  if (!cu.field) {                                                                          \
    PyErr_SetString(PyExc_RuntimeError, "Failed to retrieve " name " from libcuda.so.1"); \
    return -1;                                                                              \
  }
  KS_SYM(ctx_get_current, "cuCtxGetCurrent")
  KS_SYM(device_get, "cuDeviceGet")
  KS_SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain")
  KS_SYM(ctx_set_current, "cuCtxSetCurrent")
  KS_SYM(pointer_get_attribute, "cuPointerGetAttribute")
  KS_SYM(get_error_string, "cuGetErrorString")
  KS_SYM(func_set_attribute, "cuFuncSetAttribute")
  KS_SYM(launch_kernel_ex, "cuLaunchKernelEx")
#undef KS_SYM
  cu.loaded = 1;
  return 0;
}

/* as Triton's gpuAssert: a RuntimeError, taking the GIL when it is not held */
static void cuda_error(CUresult code) {
  if (code == CUDA_SUCCESS)
    return;
  const char *str = "unknown error";
  if (cu.get_error_string)
    cu.get_error_string(code, &str);
  char err[1024] = {0};
  snprintf(err, sizeof(err), "Triton Error [CUDA]: %s", str ? str : "unknown error");
  PyGILState_STATE gil = PyGILState_Ensure();
  PyErr_SetString(PyExc_RuntimeError, err);
  PyGILState_Release(gil);
}

typedef union {
  uint64_t u64;
  int64_t i64;
  uint32_t u32;
  int32_t i32;
  uint16_t u16;
  int16_t i16;
  uint8_t u8;
  int8_t i8;
} Slot;

typedef struct {
  PyObject *obj; /* a new reference: released by unpack() */
  int slot;
  int index; /* position in the flattened signature (Triton's error text) */
} PendingPointer;

typedef struct {
  Slot slots[MAX_SLOTS];
  int nslots;
  PendingPointer ptrs[MAX_SLOTS];
  int nptrs;
  int index;
} Packed;

/* PyArg_ParseTuple's range checks for "b", "h" and "i" (it reads a C long
 * first, and so do we: the same error past a long's range) */
static int signed_in(PyObject *obj, long long lo, long long hi, const char *what, long long *out) {
  long v = PyLong_AsLong(obj);
  if (v == -1 && PyErr_Occurred())
    return -1;
  if (v < lo) {
    PyErr_Format(PyExc_OverflowError, "%s is less than minimum", what);
    return -1;
  }
  if (v > hi) {
    PyErr_Format(PyExc_OverflowError, "%s is greater than maximum", what);
    return -1;
  }
  *out = v;
  return 0;
}

static uint16_t pack_fp16(double f) {
  uint16_t result;
#if 0x030600B1 <= PY_VERSION_HEX && PY_VERSION_HEX <= 0x030B00A1 && !defined(PYPY_VERSION)
  _PyFloat_Pack2(f, (unsigned char *)&result, 1);
#else
  PyFloat_Pack2(f, (char *)&result, 1);
#endif
  return result;
}

static uint16_t pack_bf16(double f) {
  float f32 = (float)f;
  uint32_t u32;
  memcpy(&u32, &f32, sizeof(u32));
  return (uint16_t)(u32 >> 16);
}

static uint32_t pack_fp32(double f) {
  float f32 = (float)f;
  uint32_t u32;
  memcpy(&u32, &f32, sizeof(u32));
  return u32;
}

/* Converts args[0..n) along codes (advanced past what it used); a tuple
 * code recurses into the argument as PyArg_ParseTuple's "(...)" does. */
static int pack_args(const char **codes, PyObject *const *args, Py_ssize_t n, Packed *p, int depth) {
  Py_ssize_t used = 0;
  for (;;) {
    char c = **codes;
    if (c == '\0' || c == ')')
      break;
    (*codes)++;
    if (used >= n) {
      if (depth == 0)
        PyErr_Format(PyExc_TypeError, "launch() takes more arguments than the %zd given", n);
      else
        PyErr_Format(PyExc_TypeError, "must be sequence of length more than %zd", n);
      return -1;
    }
    PyObject *obj = args[used++];
    if (c == '(') {
      if (depth > 8) {
        PyErr_SetString(PyExc_ValueError, "launch: tuple arguments nested too deeply");
        return -1;
      }
      if (!PySequence_Check(obj) || PyUnicode_Check(obj) || PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "must be sequence, not %.50s", Py_TYPE(obj)->tp_name);
        return -1;
      }
      PyObject *seq = PySequence_Fast(obj, "must be sequence");
      if (!seq)
        return -1;
      Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
      int rc = pack_args(codes, PySequence_Fast_ITEMS(seq), len, p, depth + 1);
      /* items stay alive through the caller's reference to the tuple */
      Py_DECREF(seq);
      if (rc < 0)
        return -1;
      if (**codes != ')') {
        PyErr_SetString(PyExc_ValueError, "launch: unbalanced tuple in the code string");
        return -1;
      }
      (*codes)++;
      continue;
    }
    int index = p->index++;
    if (c == 'C')
      continue;
    if (p->nslots >= MAX_SLOTS) {
      PyErr_SetString(PyExc_ValueError, "launch: too many kernel arguments");
      return -1;
    }
    Slot *s = &p->slots[p->nslots];
    s->u64 = 0;
    long long v;
    double d;
    switch (c) {
    case 'P':
      Py_INCREF(obj); /* a data_ptr() call may change a list it came from */
      p->ptrs[p->nptrs].obj = obj;
      p->ptrs[p->nptrs].slot = p->nslots;
      p->ptrs[p->nptrs].index = index;
      p->nptrs++;
      break;
    case 'b':
      if (signed_in(obj, 0, 255, "unsigned byte integer", &v) < 0)
        return -1;
      s->u8 = (uint8_t)v;
      break;
    case 'h':
      if (signed_in(obj, -32768, 32767, "signed short integer", &v) < 0)
        return -1;
      s->i16 = (int16_t)v;
      break;
    case 'i':
      if (signed_in(obj, INT32_MIN, INT32_MAX, "signed integer", &v) < 0)
        return -1;
      s->i32 = (int32_t)v;
      break;
    case 'L':
      v = PyLong_AsLongLong(obj);
      if (v == -1 && PyErr_Occurred())
        return -1;
      s->i64 = (int64_t)v;
      break;
    case 'B':
    case 'H':
    case 'I':
    case 'K': { /* PyArg_ParseTuple's unsigned formats: no overflow check; "K" takes ints only */
      if (c == 'K' && !PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "argument must be int, not %.50s", Py_TYPE(obj)->tp_name);
        return -1;
      }
      unsigned long long u = PyLong_AsUnsignedLongLongMask(obj);
      if (u == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
      if (c == 'B')
        s->u8 = (uint8_t)u;
      else if (c == 'H')
        s->u16 = (uint16_t)u;
      else if (c == 'I')
        s->u32 = (uint32_t)u;
      else
        s->u64 = (uint64_t)u;
      break;
    }
    case 'e':
    case 'E':
    case 'f':
    case 'd':
      d = PyFloat_AsDouble(obj);
      if (d == -1.0 && PyErr_Occurred())
        return -1;
      if (c == 'e')
        s->u16 = pack_fp16(d);
      else if (c == 'E')
        s->u16 = pack_bf16(d);
      else if (c == 'f')
        s->u32 = pack_fp32(d);
      else
        memcpy(&s->u64, &d, sizeof(d));
      break;
    default:
      PyErr_Format(PyExc_ValueError, "launch: unknown argument code '%c'", c);
      return -1;
    }
    p->nslots++;
  }
  if (used != n) {
    if (depth == 0)
      PyErr_Format(PyExc_TypeError, "launch() takes %zd kernel arguments (%zd given)", used, n);
    else
      PyErr_Format(PyExc_TypeError, "must be sequence of length %zd, not %zd", used, n);
    return -1;
  }
  return 0;
}

static const char *codes_of(PyObject *obj) {
  if (!PyBytes_Check(obj)) {
    PyErr_SetString(PyExc_TypeError, "launch: the code string must be bytes");
    return NULL;
  }
  return PyBytes_AS_STRING(obj);
}

static int pack_all(PyObject *codes_obj, PyObject *const *args, Py_ssize_t n, Packed *p) {
  p->nslots = p->nptrs = p->index = 0;
  const char *codes = codes_of(codes_obj);
  if (!codes)
    return -1;
  if (pack_args(&codes, args, n, p, 0) < 0)
    return -1;
  if (*codes != '\0') {
    PyErr_SetString(PyExc_ValueError, "launch: unbalanced tuple in the code string");
    return -1;
  }
  return 0;
}

static void unpack(Packed *p) {
  for (int k = 0; k < p->nptrs; k++)
    Py_CLEAR(p->ptrs[k].obj);
  p->nptrs = 0;
}

/* Triton's getPointer: an int, None (a null pointer), or an object with
 * data_ptr(); a non-null pointer must be device memory. check = 0 (pack()):
 * no CUDA call. */
static int get_pointer(PyObject *obj, int idx, int check, CUdeviceptr *out) {
  *out = 0;
  if (PyLong_Check(obj)) {
    *out = PyLong_AsUnsignedLongLong(obj);
    return (*out == (CUdeviceptr)-1 && PyErr_Occurred()) ? -1 : 0;
  }
  if (obj == Py_None)
    return 0;
  PyObject *ret = PyObject_CallMethodNoArgs(obj, data_ptr_str);
  if (!ret) {
    PyErr_SetString(PyExc_TypeError, "Pointer argument must be either uint64 or have data_ptr method");
    return -1;
  }
  if (!PyLong_Check(ret)) {
    Py_DECREF(ret);
    PyErr_SetString(PyExc_TypeError, "data_ptr method of Pointer object must return 64-bit int");
    return -1;
  }
  CUdeviceptr ptr = PyLong_AsUnsignedLongLong(ret);
  Py_DECREF(ret);
  if (ptr == (CUdeviceptr)-1 && PyErr_Occurred())
    return -1;
  *out = ptr;
  if (!ptr || !check)
    return 0;
  uint64_t dev_ptr = 0;
  CUresult status = cu.pointer_get_attribute(&dev_ptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ptr);
  if (status == CUDA_ERROR_INVALID_VALUE) {
    PyErr_Format(PyExc_ValueError, "Pointer argument (at %d) cannot be accessed from Triton (cpu tensor?)", idx);
    return -1;
  } else if (status != CUDA_SUCCESS) {
    cuda_error(status);
    return -1;
  }
  *out = dev_ptr;
  return 0;
}

static int ensure_context(void) {
  CUcontext ctx;
  CUresult rc = cu.ctx_get_current(&ctx);
  if (rc != CUDA_SUCCESS) {
    cuda_error(rc);
    return PyErr_Occurred() ? -1 : 0;
  }
  if (!ctx) {
    CUdevice device;
    cuda_error(cu.device_get(&device, 0));
    cuda_error(cu.primary_ctx_retain(&ctx, device));
    cuda_error(cu.ctx_set_current(ctx));
  }
  return 0;
}

static int as_int(PyObject *obj, int *out) {
  long long v;
  if (signed_in(obj, INT32_MIN, INT32_MAX, "signed integer", &v) < 0)
    return -1;
  *out = (int)v;
  return 0;
}

#define BASE_ARGS 14 /* codes + the 13 of Triton's _BASE_ARGS_FORMAT "iiiKKppOOOOOO" */

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < BASE_ARGS) {
    PyErr_Format(PyExc_TypeError, "launch() takes at least %d arguments (%zd given)", BASE_ARGS, nargs);
    return NULL;
  }
  if (load_cuda() < 0)
    return NULL;
  /* as Triton's launcher: a current context before any pointer is checked */
  if (ensure_context() < 0)
    return NULL;
  int gridX, gridY, gridZ;
  if (as_int(args[1], &gridX) < 0 || as_int(args[2], &gridY) < 0 || as_int(args[3], &gridZ) < 0)
    return NULL;
  unsigned long long stream = PyLong_AsUnsignedLongLongMask(args[4]);
  if (stream == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  unsigned long long function = PyLong_AsUnsignedLongLongMask(args[5]);
  if (function == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  int cooperative = PyObject_IsTrue(args[6]);
  int pdl = PyObject_IsTrue(args[7]);
  if (cooperative < 0 || pdl < 0)
    return NULL;
  PyObject *global_scratch_obj = args[8], *profile_scratch_obj = args[9];
  PyObject *kernel_metadata = args[10], *launch_metadata = args[11];
  PyObject *enter_hook = args[12], *exit_hook = args[13];

  /* on the stack: the hooks and data_ptr() run Python code, and the GIL
   * is released for the launch, so another launch may come in between */
  Packed p;
  PyObject *result = NULL;
  if (pack_all(args[0], args + BASE_ARGS, nargs - BASE_ARGS, &p) < 0)
    goto done;

  int num_warps, num_ctas, shared_memory;
  if (!PyArg_ParseTuple(kernel_metadata, "iii", &num_warps, &num_ctas, &shared_memory)) {
    PyErr_SetString(PyExc_TypeError, "kernel_metadata must be a tuple");
    goto done;
  }
  if (enter_hook != Py_None) {
    PyObject *ret = PyObject_CallOneArg(enter_hook, launch_metadata);
    if (!ret)
      goto done;
    Py_DECREF(ret);
  }
  CUdeviceptr global_scratch = 0, profile_scratch = 0;
  if (global_scratch_obj != Py_None && get_pointer(global_scratch_obj, -1, 1, &global_scratch) < 0)
    goto done;
  if (profile_scratch_obj != Py_None && get_pointer(profile_scratch_obj, -1, 1, &profile_scratch) < 0)
    goto done;
  for (int k = 0; k < p.nptrs; k++) {
    CUdeviceptr ptr;
    if (get_pointer(p.ptrs[k].obj, p.ptrs[k].index, 1, &ptr) < 0)
      goto done;
    p.slots[p.ptrs[k].slot].u64 = (uint64_t)ptr;
  }
  void *params[MAX_SLOTS + 2];
  for (int k = 0; k < p.nslots; k++)
    params[k] = &p.slots[k];
  params[p.nslots] = &global_scratch;
  params[p.nslots + 1] = &profile_scratch;

  Py_BEGIN_ALLOW_THREADS;
  if (gridX * gridY * gridZ > 0) {
    CUlaunchAttribute attrs[4];
    CUlaunchConfig config;
    memset(&config, 0, sizeof(config));
    config.gridDimX = gridX * num_ctas;
    config.gridDimY = gridY;
    config.gridDimZ = gridZ;
    config.blockDimX = 32 * num_warps;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = shared_memory;
    config.hStream = (CUstream)stream;
    config.attrs = attrs;
    int n = 0;
    if (pdl != 0) {
      memset(&attrs[n], 0, sizeof(attrs[n]));
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n].value.programmaticStreamSerializationAllowed = 1;
      n++;
    }
    if (cooperative != 0) {
      memset(&attrs[n], 0, sizeof(attrs[n]));
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n].value.cooperative = 1;
      n++;
    }
    if (num_ctas != 1) {
      memset(&attrs[n], 0, sizeof(attrs[n]));
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = num_ctas;
      attrs[n].value.clusterDim.y = 1;
      attrs[n].value.clusterDim.z = 1;
      n++;
      memset(&attrs[n], 0, sizeof(attrs[n]));
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
      attrs[n].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
      n++;
    }
    config.numAttrs = n;
    if (num_ctas == 16)
      cuda_error(cu.func_set_attribute((CUfunction)function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    cuda_error(cu.launch_kernel_ex(&config, (CUfunction)function, params, 0));
  }
  Py_END_ALLOW_THREADS;
  if (PyErr_Occurred())
    goto done;
  if (exit_hook != Py_None) {
    PyObject *ret = PyObject_CallOneArg(exit_hook, launch_metadata);
    if (!ret)
      goto done;
    Py_DECREF(ret);
  }
  result = Py_NewRef(Py_None);
done:
  unpack(&p);
  return result;
}

static PyObject *pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "pack() takes the code string and the kernel's arguments");
    return NULL;
  }
  Packed p;
  PyObject *result = NULL;
  if (pack_all(args[0], args + 1, nargs - 1, &p) < 0)
    goto done;
  for (int k = 0; k < p.nptrs; k++) {
    CUdeviceptr ptr;
    if (get_pointer(p.ptrs[k].obj, p.ptrs[k].index, 0, &ptr) < 0)
      goto done;
    p.slots[p.ptrs[k].slot].u64 = (uint64_t)ptr;
  }
  result = PyBytes_FromStringAndSize((const char *)p.slots, (Py_ssize_t)p.nslots * (Py_ssize_t)sizeof(Slot));
done:
  unpack(&p);
  return result;
}

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "Launch a Triton kernel of any signature"},
    {"pack", (PyCFunction)(void (*)(void))pack, METH_FASTCALL, "The kernel parameters launch() would pass"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "kernelsmith_triton_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit_kernelsmith_triton_launch(void) {
  data_ptr_str = PyUnicode_InternFromString("data_ptr");
  if (!data_ptr_str)
    return NULL;
  return PyModule_Create(&module_def);
}
