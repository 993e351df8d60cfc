/* edgepack shim: see tvm/ffi/c_api.h. */
#include "tvm/ffi/c_api.h"
