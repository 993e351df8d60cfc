/* Prints the layout of the ABI structs; compiled once against edgepack's ep_tvm_abi.h and once against
 * the real dlpack.h / tvm/ffi/c_api.h from the installed wheels. The two outputs must be identical. */
#include <stddef.h>
#include <stdio.h>

#ifdef USE_TVM_HEADERS
#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>
#else
#include "ep_tvm_abi.h"
#endif

#define F(T, f) printf(#T "." #f " %zu %zu\n", offsetof(T, f), sizeof(((T*)0)->f))

int main(void) {
  printf("DLTensor %zu\nTVMFFIAny %zu\nDLDataType %zu\n", sizeof(DLTensor), sizeof(TVMFFIAny), sizeof(DLDataType));
  F(DLTensor, data); F(DLTensor, device); F(DLTensor, ndim); F(DLTensor, dtype); F(DLTensor, shape);
  F(DLTensor, strides); F(DLTensor, byte_offset); F(DLDataType, code); F(DLDataType, bits); F(DLDataType, lanes);
  F(TVMFFIAny, type_index); F(TVMFFIAny, v_int64); F(TVMFFIAny, v_ptr);
  printf("kTVMFFIInt %d kTVMFFIDLTensorPtr %d kTVMFFINone %d\n", (int)kTVMFFIInt, (int)kTVMFFIDLTensorPtr, (int)kTVMFFINone);
  return 0;
}
