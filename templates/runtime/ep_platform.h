/* The platform layer: what the runtime core needs from an OS or a bare-metal board.
 * ep_platform_posix.c (Linux boards, pthreads) and ep_platform_single.c (one thread, any board). */
#ifndef EP_PLATFORM_H_
#define EP_PLATFORM_H_

#include <stdint.h>

#include "ep_tvm_abi.h"

int ep_platform_pool_start(int num_threads); /* 0 on success */
int ep_platform_pool_threads(void);
void ep_platform_pool_stop(void);
int ep_platform_worker_id(void); /* 0 for the calling thread, 1.. for pool workers */
int ep_platform_parallel_launch(FTVMParallelLambda f, void* cdata, int num_task);
int ep_platform_parallel_barrier(int task_id, TVMParallelGroupEnv* penv);
uint64_t ep_platform_time_ns(void);

#endif /* EP_PLATFORM_H_ */
