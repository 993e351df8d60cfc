/* edgepack shim for TVM-generated C kernels: the TVM-FFI types they use come from the runtime's own ABI
 * header (layouts match tvm/ffi/c_api.h, docs/tvm-facts.md#packed-func-abi), so a package needs no TVM headers. */
#ifndef EP_SHIM_TVM_FFI_C_API_H_
#define EP_SHIM_TVM_FFI_C_API_H_
#include <stddef.h>
#include <stdint.h>

#include "ep_tvm_abi.h"

#ifndef TVM_DLL
#define TVM_DLL
#endif
#endif
