/* edgepack C runtime core: status codes, tensor references, kernel calls, workspace and thread pool.
 * Generated packages include this through their one public header, <model>.h. C11, no malloc. */
#ifndef EP_RUNTIME_H_
#define EP_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "ep_tvm_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  EP_OK = 0,
  EP_ERR_ARG = 1,    /* NULL pointer, short or misaligned buffer, wrong count */
  EP_ERR_SHAPE = 2,  /* a dim outside its declared range, or inconsistent between inputs */
  EP_ERR_KERNEL = 3, /* a kernel returned an error */
  EP_ERR_MEMORY = 4, /* arena too small, or kernel workspace exhausted */
  EP_ERR_THREAD = 5, /* the thread pool could not start */
} ep_status_t;

#define EP_ALIGN 64 /* every buffer handed to a package must start on this boundary */
#define EP_MSG_BYTES 160

/* A caller's buffer: its bytes must cover the tensor at the run's dims. */
typedef struct {
  void* data;
  size_t bytes;
} ep_buffer_t;

typedef struct {
  int num_threads; /* 0: the board's core count (EP_DEFAULT_THREADS) */
} ep_options_t;

typedef struct {
  char text[EP_MSG_BYTES];
} ep_msg_t;

/* Static description of a package, for generic programs (run, bench, firmware). */
typedef struct {
  const char* name;
  int64_t lo, hi;
} ep_dim_desc_t;

typedef struct {
  const char* name;
  const char* dtype; /* numpy name: "float32", "int64", ... */
  int itemsize;
  int rank;
  const int64_t* shape; /* >= 0: static extent; < 0: -(1 + index of a dim) */
} ep_io_desc_t;

/* What a generic program (run, bench, firmware) needs to drive any package. */
typedef struct {
  const char* name;
  int num_dims, num_inputs, num_outputs;
  const ep_dim_desc_t* dims;
  const ep_io_desc_t* inputs;
  const ep_io_desc_t* outputs; /* output shapes may be expressions: use output_shape() */
  size_t arena_bytes, ctx_bytes, io_bytes; /* io_bytes: all inputs and outputs at the upper bounds */
  ep_status_t (*init)(void* ctx, void* arena, size_t arena_bytes, const ep_options_t* opts);
  ep_status_t (*run)(void* ctx, const ep_buffer_t* inputs, const ep_buffer_t* outputs, const int64_t* dims);
  void (*output_shape)(const int64_t* dims, int index, int64_t* shape);
  const char* (*message)(const void* ctx);
  int num_calls; /* kernel calls per run, for per-call profiles */
  const char* const* call_names;
  const uint64_t* (*call_ns)(const void* ctx); /* summed ns per call; all zero unless built with EP_PROFILE */
} ep_package_t;

const char* ep_status_str(ep_status_t s);

/* Dims from the inputs' shapes; EP_ERR_SHAPE (with a message) if a rank or static extent is wrong, two
 * inputs disagree on a dim, or a dim is outside its range. */
ep_status_t ep_dims_from_shapes(const ep_package_t* pkg, const int64_t* const* shapes, const int* ranks,
                                int64_t* dims, ep_msg_t* msg);

/* --- for generated code ------------------------------------------------------------------------- */

void ep_msg_set(ep_msg_t* m, const char* a, const char* b, const char* c);
void ep_msg_append_i64(ep_msg_t* m, int64_t v);
void ep_msg_append(ep_msg_t* m, const char* s);

/* Kernel arguments in TVM-FFI form, and a call of a packed kernel with them. */
static inline TVMFFIAny ep_arg_tensor(DLTensor* t) {
  TVMFFIAny a;
  a.type_index = kTVMFFIDLTensorPtr;
  a.zero_padding = 0;
  a.v_ptr = t;
  return a;
}

static inline TVMFFIAny ep_arg_int(int64_t v) {
  TVMFFIAny a;
  a.type_index = kTVMFFIInt;
  a.zero_padding = 0;
  a.v_int64 = v;
  return a;
}

ep_status_t ep_call(ep_packed_fn_t fn, const TVMFFIAny* args, int nargs);

/* A view of rows [begin, end) of `t` along `axis` (all axes before it have extent 1). */
void ep_row_view(DLTensor* view, int64_t* shape, const DLTensor* t, int axis, int64_t begin, int64_t end,
                 int64_t row_bytes);

void ep_tensor_init(DLTensor* t, void* data, int64_t* shape, int ndim, uint8_t code, uint8_t bits);

/* Kernel workspace: one LIFO region per thread, carved from the package arena. */
void ep_workspace_bind(uint8_t* base, size_t per_thread, int threads);

/* Thread pool (POSIX: pthreads; single-threaded platforms run every task inline). */
ep_status_t ep_pool_start(int num_threads);
int ep_pool_threads(void);
void ep_pool_stop(void);

/* A caller's buffer is usable for a tensor of `need` bytes: non-NULL, long enough, EP_ALIGN-aligned. */
static inline int ep_buffer_ok(const ep_buffer_t* b, size_t need) {
  return b->data != NULL && b->bytes >= need && ((uintptr_t)b->data % EP_ALIGN) == 0;
}

static inline int64_t ep_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ep_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Platform layer (ep_platform_<os>.c). */
uint64_t ep_platform_time_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* EP_RUNTIME_H_ */
