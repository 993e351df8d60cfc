/* edgepack C runtime: the types of a package's API. Generated packages include this through their one
 * public header, <model>.h. C11, no malloc. What generated code and the runtime share is in ep_internal.h. */
#ifndef EP_RUNTIME_H_
#define EP_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

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

/* DLPack's tensor under edgepack's names, so that a user's dlpack.h can sit beside this header. The layout
 * is DLPack's (checked by tests/test_runtime_c.py): an ep_dl_tensor_t* converts to a DLTensor*. */
typedef struct {
  int32_t device_type; /* kDLCPU = 1 */
  int32_t device_id;
} ep_dl_device_t;

typedef struct {
  uint8_t code; /* kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 */
  uint8_t bits;
  uint16_t lanes;
} ep_dl_dtype_t;

typedef struct {
  void* data;
  ep_dl_device_t device;
  int32_t ndim;
  ep_dl_dtype_t dtype;
  int64_t* shape;
  int64_t* strides; /* NULL: compact row-major */
  uint64_t byte_offset;
} ep_dl_tensor_t;

#define EP_MAX_THREADS 16 /* per context, the calling thread included */
#define EP_POOL_BYTES 512 /* the platform's thread pool state (ep_platform_posix.c checks it fits) */

/* Private: a context's runtime state, inside every package context (the caller's memory, no malloc): its
 * thread pool, its kernel workspace, and the first error a kernel or the runtime raised in a run. */
typedef struct ep_rt {
  union {
    unsigned char bytes[EP_POOL_BYTES];
    void* align_p;
    uint64_t align_u;
    double align_d;
  } pool;
  uint8_t* ws_base;
  size_t ws_per_thread;
  size_t ws_top[EP_MAX_THREADS];
  int threads;
  const struct ep_rt* self; /* == this while its pool runs: how init knows to stop it before reuse */
  ep_msg_t error;
} ep_rt_t;

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
  const int64_t* shape; /* >= 0: static extent; EP_EXTENT_EXPR: see output_shape(); else -(1 + index of a dim) */
} ep_io_desc_t;

#define EP_EXTENT_EXPR INT64_MIN /* an output extent that is an expression of dims (batch*seq) */

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
  ep_status_t (*output_shape)(const int64_t* dims, int index, int64_t* shape);
  const char* (*message)(const void* ctx);
  int num_calls; /* kernel calls per run, for per-call profiles */
  const char* const* call_names;
  const uint64_t* (*call_ns)(const void* ctx); /* summed ns per call; all zero unless built with EP_PROFILE */
  void (*deinit)(void* ctx);
} ep_package_t;

const char* ep_status_str(ep_status_t s);

/* Dims from the inputs' shapes; EP_ERR_SHAPE (with a message) if a rank or static extent is wrong, two
 * inputs disagree on a dim, or a dim is outside its range. */
ep_status_t ep_dims_from_shapes(const ep_package_t* pkg, const int64_t* const* shapes, const int* ranks,
                                int64_t* dims, ep_msg_t* msg);

#ifdef __cplusplus
}
#endif
#endif /* EP_RUNTIME_H_ */
