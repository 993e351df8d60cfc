/* edgepack shim: the runtime core (ep_runtime.c) defines these for generated kernels. */
#ifndef EP_SHIM_TVM_C_BACKEND_API_H_
#define EP_SHIM_TVM_C_BACKEND_API_H_
#include "tvm/ffi/c_api.h"
#include "ep_dsp.h" /* the int8 dot products of the "dsp" intrinsic */

void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int dtype_code_hint,
                               int dtype_bits_hint);
int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr);
int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task);
int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv);
void TVMFFIErrorSetRaisedFromCStr(const char* kind, const char* message);
#endif
