/* The slice of the DLPack and TVM-FFI C ABIs that TVM-generated kernels use (docs/tvm-facts.md#packed-func-abi).
 * Kernels are `int32_t __tvm_ffi_<name>(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* ret)`;
 * each tensor argument is a DLTensor* tagged kTVMFFIDLTensorPtr, each scalar an int64 tagged kTVMFFIInt.
 * Layouts match dlpack.h and tvm/ffi/c_api.h (checked against TVM's headers by
 * tests/test_runtime_c.py::test_abi_layout_matches_tvm_headers, through tests/c/abi_layout.c). */
#ifndef EP_TVM_ABI_H_
#define EP_TVM_ABI_H_

#include <stdint.h>

#include "ep_runtime.h"

/* DLPack's names for ep_runtime.h's tensor types: kernels and generated code use them. Internal: a package's
 * public header does not include this file, so a user's dlpack.h does not collide with it. */
typedef ep_dl_device_t DLDevice;
typedef ep_dl_dtype_t DLDataType;
typedef ep_dl_tensor_t DLTensor;

typedef struct {
  int32_t type_index;
  uint32_t zero_padding;
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
  };
} TVMFFIAny;

enum { kTVMFFINone = 0, kTVMFFIInt = 1, kTVMFFIDLTensorPtr = 7 };

typedef int32_t (*ep_packed_fn_t)(void* self, const TVMFFIAny* args, int32_t nargs, TVMFFIAny* ret);

typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;

typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

#endif /* EP_TVM_ABI_H_ */
