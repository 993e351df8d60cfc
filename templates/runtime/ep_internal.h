/* What generated code, the runtime core, the programs and the firmware share; not part of a package's API.
 * C11, no malloc. */
#ifndef EP_INTERNAL_H_
#define EP_INTERNAL_H_

#include "ep_runtime.h"
#include "ep_tvm_abi.h"

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

/* A view of rows [begin, end) of `t` whose first `lead` axes are folded into one row axis (row-major, the
 * same bytes): shape [end - begin, t->shape[lead], ...]. row_bytes: bytes of one row. */
void ep_rows_view(DLTensor* view, int64_t* shape, const DLTensor* t, int lead, int64_t begin, int64_t end,
                  int64_t row_bytes);

void ep_tensor_init(DLTensor* t, void* data, int64_t* shape, int ndim, uint8_t code, uint8_t bits);

/* A caller's buffer is usable for a tensor of `need` bytes: non-NULL, long enough, EP_ALIGN-aligned. */
static inline int ep_buffer_ok(const ep_buffer_t* b, size_t need) {
  return b->data != NULL && b->bytes >= need && ((uintptr_t)b->data % EP_ALIGN) == 0;
}

static inline int64_t ep_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ep_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

/* --- a context's runtime state ------------------------------------------------------------------- */
/* Workspace: `threads` LIFO regions of `per_thread` bytes from `workspace`; a pool of `threads` threads
 * (the caller and threads - 1 workers). A running rt is stopped first: init may run again on a context. */
ep_status_t ep_rt_init(ep_rt_t* rt, uint8_t* workspace, size_t per_thread, int threads, ep_msg_t* msg);
void ep_rt_deinit(ep_rt_t* rt); /* stops the pool's workers; safe on a zeroed or stopped rt */
int ep_rt_threads(const ep_rt_t* rt);

/* Kernels reach the runtime through global callbacks without a context: run makes its context the calling
 * thread's current one for the run (pool workers have theirs for good). Returns the previous one. */
ep_rt_t* ep_rt_enter(ep_rt_t* rt);
void ep_rt_leave(ep_rt_t* prev);

/* A kernel call failed: "kernel NAME failed", with the error the kernel or the runtime raised, into msg. */
void ep_rt_kernel_failed(ep_rt_t* rt, ep_msg_t* msg, const char* kernel);

/* Platform layer (ep_platform_<os>.c). */
uint64_t ep_platform_time_ns(void);

#endif /* EP_INTERNAL_H_ */
