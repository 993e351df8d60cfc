/* edgepack runtime core: portable C11, no malloc, no stdio. */
#include <string.h>

#include "ep_internal.h"
#include "ep_platform.h"

const char* ep_status_str(ep_status_t s) {
  switch (s) {
    case EP_OK: return "ok";
    case EP_ERR_ARG: return "bad argument";
    case EP_ERR_SHAPE: return "shape out of range";
    case EP_ERR_KERNEL: return "kernel failed";
    case EP_ERR_MEMORY: return "out of memory";
    case EP_ERR_THREAD: return "thread pool failed";
  }
  return "unknown status";
}

/* --- messages (no printf: this also runs on microcontrollers) ------------------------------------ */
void ep_msg_append(ep_msg_t* m, const char* s) {
  size_t n = strlen(m->text);
  while (s && *s && n + 1 < sizeof m->text) m->text[n++] = *s++;
  m->text[n] = '\0';
}

void ep_msg_set(ep_msg_t* m, const char* a, const char* b, const char* c) {
  m->text[0] = '\0';
  ep_msg_append(m, a);
  ep_msg_append(m, b);
  ep_msg_append(m, c);
}

void ep_msg_append_i64(ep_msg_t* m, int64_t v) {
  char buf[24];
  int i = (int)sizeof buf - 1;
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  buf[i] = '\0';
  do {
    buf[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u && i > 1);
  if (v < 0) buf[--i] = '-';
  ep_msg_append(m, buf + i);
}

/* --- dims from input shapes ---------------------------------------------------------------------- */
ep_status_t ep_dims_from_shapes(const ep_package_t* pkg, const int64_t* const* shapes, const int* ranks,
                                int64_t* dims, ep_msg_t* msg) {
  for (int d = 0; d < pkg->num_dims; ++d) dims[d] = -1;
  for (int i = 0; i < pkg->num_inputs; ++i) {
    const ep_io_desc_t* io = &pkg->inputs[i];
    if (ranks[i] != io->rank) {
      ep_msg_set(msg, "input '", io->name, "' has rank ");
      ep_msg_append_i64(msg, ranks[i]);
      ep_msg_append(msg, ", expected ");
      ep_msg_append_i64(msg, io->rank);
      return EP_ERR_SHAPE;
    }
    for (int a = 0; a < io->rank; ++a) {
      int64_t want = io->shape[a], got = shapes[i][a];
      if (want >= 0 && got != want) {
        ep_msg_set(msg, "input '", io->name, "' axis ");
        ep_msg_append_i64(msg, a);
        ep_msg_append(msg, " is ");
        ep_msg_append_i64(msg, got);
        ep_msg_append(msg, ", expected ");
        ep_msg_append_i64(msg, want);
        return EP_ERR_SHAPE;
      }
      if (want < 0) {
        int d = (int)(-want - 1);
        if (dims[d] >= 0 && dims[d] != got) {
          ep_msg_set(msg, "dim ", pkg->dims[d].name, " is ");
          ep_msg_append_i64(msg, dims[d]);
          ep_msg_append(msg, " in one input and ");
          ep_msg_append_i64(msg, got);
          ep_msg_append(msg, " in input '");
          ep_msg_append(msg, io->name);
          ep_msg_append(msg, "'");
          return EP_ERR_SHAPE;
        }
        dims[d] = got;
      }
    }
  }
  for (int d = 0; d < pkg->num_dims; ++d) {
    if (dims[d] < pkg->dims[d].lo || dims[d] > pkg->dims[d].hi) {
      ep_msg_set(msg, "dim ", pkg->dims[d].name, " = ");
      ep_msg_append_i64(msg, dims[d]);
      ep_msg_append(msg, " is outside its declared range ");
      ep_msg_append_i64(msg, pkg->dims[d].lo);
      ep_msg_append(msg, "..");
      ep_msg_append_i64(msg, pkg->dims[d].hi);
      return EP_ERR_SHAPE;
    }
  }
  return EP_OK;
}

/* --- tensors and kernel calls -------------------------------------------------------------------- */
void ep_tensor_init(DLTensor* t, void* data, int64_t* shape, int ndim, uint8_t code, uint8_t bits) {
  t->data = data;
  t->device.device_type = 1; /* kDLCPU */
  t->device.device_id = 0;
  t->ndim = ndim;
  t->dtype.code = code;
  t->dtype.bits = bits;
  t->dtype.lanes = 1;
  t->shape = shape;
  t->strides = NULL;
  t->byte_offset = 0;
}

void ep_rows_view(DLTensor* view, int64_t* shape, const DLTensor* t, int lead, int64_t begin, int64_t end,
                  int64_t row_bytes) {
  *view = *t;
  view->ndim = t->ndim - lead + 1;
  shape[0] = end - begin;
  for (int i = lead; i < t->ndim; ++i) shape[i - lead + 1] = t->shape[i];
  view->shape = shape;
  view->data = (uint8_t*)t->data + begin * row_bytes;
}

ep_status_t ep_call(ep_packed_fn_t fn, const TVMFFIAny* args, int nargs) {
  TVMFFIAny ret;
  ret.type_index = kTVMFFINone;
  ret.zero_padding = 0;
  ret.v_int64 = 0;
  return fn(NULL, args, nargs, &ret) == 0 ? EP_OK : EP_ERR_KERNEL;
}

/* --- a context's runtime state --------------------------------------------------------------------- */
static int rt_running(const ep_rt_t* rt) { return rt->self == rt; }

ep_status_t ep_rt_init(ep_rt_t* rt, uint8_t* workspace, size_t per_thread, int threads, ep_msg_t* msg) {
  ep_rt_deinit(rt);
  memset(rt, 0, sizeof *rt);
  int n = ep_platform_pool_start(rt->pool.bytes, threads, rt);
  if (n < 1) {
    ep_msg_set(msg, "could not start ", "the thread pool", "");
    return EP_ERR_THREAD;
  }
  rt->ws_base = workspace;
  rt->ws_per_thread = per_thread;
  rt->threads = n;
  rt->self = rt;
  return EP_OK;
}

void ep_rt_deinit(ep_rt_t* rt) {
  if (!rt_running(rt)) return;
  ep_platform_pool_stop(rt->pool.bytes);
  rt->self = NULL;
}

int ep_rt_threads(const ep_rt_t* rt) { return rt->threads; }

ep_rt_t* ep_rt_enter(ep_rt_t* rt) {
  ep_rt_t* prev = ep_platform_current();
  for (int i = 0; i < rt->threads; ++i) rt->ws_top[i] = 0; /* a failed run may not have freed its workspace */
  rt->error.text[0] = '\0';
  ep_platform_set_current(rt);
  return prev;
}

void ep_rt_leave(ep_rt_t* prev) { ep_platform_set_current(prev); }

/* The first error of a run wins: later ones are usually its consequences. */
static void rt_error(const char* a, const char* b, const char* c, int64_t n) {
  ep_rt_t* rt = ep_platform_current();
  if (!rt) return;
  ep_platform_pool_lock(rt->pool.bytes);
  if (!rt->error.text[0]) {
    ep_msg_set(&rt->error, a, b, c);
    if (n >= 0) ep_msg_append_i64(&rt->error, n);
  }
  ep_platform_pool_unlock(rt->pool.bytes);
}

void ep_rt_kernel_failed(ep_rt_t* rt, ep_msg_t* msg, const char* kernel) {
  ep_msg_set(msg, "kernel ", kernel, " failed");
  if (rt->error.text[0]) {
    ep_msg_append(msg, ": ");
    ep_msg_append(msg, rt->error.text);
  }
}

/* --- kernel workspace: LIFO per thread, in the current context's arena -------------------------------- */
void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int dtype_code_hint,
                               int dtype_bits_hint) {
  (void)device_type, (void)device_id, (void)dtype_code_hint, (void)dtype_bits_hint;
  ep_rt_t* rt = ep_platform_current();
  int w = ep_platform_worker_id();
  if (!rt || w < 0 || w >= rt->threads) return NULL; /* a kernel called outside run: nothing to report to */
  size_t need = ((size_t)nbytes + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN + EP_ALIGN; /* + a size header */
  if (rt->ws_top[w] + need > rt->ws_per_thread) {
    rt_error("kernel workspace exhausted", "; bytes asked for: ", "", (int64_t)nbytes);
    return NULL;
  }
  uint8_t* p = rt->ws_base + (size_t)w * rt->ws_per_thread + rt->ws_top[w];
  *(size_t*)p = need;
  rt->ws_top[w] += need;
  return p + EP_ALIGN;
}

int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  (void)device_type, (void)device_id;
  ep_rt_t* rt = ep_platform_current();
  int w = ep_platform_worker_id();
  if (!rt || w < 0 || w >= rt->threads || !ptr) return -1;
  uint8_t* p = (uint8_t*)ptr - EP_ALIGN;
  size_t need = *(size_t*)p;
  /* Frees come in reverse order of allocation within a thread. */
  if (p + need != rt->ws_base + (size_t)w * rt->ws_per_thread + rt->ws_top[w]) {
    rt_error("kernel workspace freed out of order", "", "", -1);
    return -1;
  }
  rt->ws_top[w] -= need;
  return 0;
}

int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  ep_rt_t* rt = ep_platform_current();
  if (!rt) return -1;
  return ep_platform_parallel_launch(rt->pool.bytes, flambda, cdata, num_task);
}

int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  ep_rt_t* rt = ep_platform_current();
  if (!rt) return -1;
  return ep_platform_parallel_barrier(rt->pool.bytes, task_id, penv);
}

void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message) { rt_error(kind, ": ", message, -1); }

/* LLVM-generated kernels reach the runtime through these weak data pointers, NULL unless defined. */
void* (*__TVMBackendAllocWorkspace)(int, int, uint64_t, int, int) = TVMBackendAllocWorkspace;
int (*__TVMBackendFreeWorkspace)(int, int, void*) = TVMBackendFreeWorkspace;
int (*__TVMBackendParallelLaunch)(FTVMParallelLambda, void*, int) = TVMBackendParallelLaunch;
int (*__TVMBackendParallelBarrier)(int, TVMParallelGroupEnv*) = TVMBackendParallelBarrier;
void (*__TVMFFIErrorSetRaisedFromCStr)(const char*, const char*) = TVMFFIErrorSetRaisedFromCStr;
