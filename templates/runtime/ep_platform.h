/* The platform layer: what the runtime core needs from an OS or a bare-metal board.
 * ep_platform_posix.c (Linux boards, pthreads) and ep_platform_single.c (one thread, any board).
 * A pool lives in caller-provided storage (a context's ep_rt_t), so every context has its own. */
#ifndef EP_PLATFORM_H_
#define EP_PLATFORM_H_

#include <stddef.h>
#include <stdint.h>

#include "ep_tvm_abi.h"

/* Starts up to num_threads - 1 workers in `pool` (EP_POOL_BYTES of storage); each worker's current context
 * is `owner` (ep_platform_current). Returns the threads the pool runs with, the caller's included, or -1
 * (then nothing runs and stop is not needed). */
int ep_platform_pool_start(void* pool, int num_threads, void* owner);
void ep_platform_pool_stop(void* pool);
int ep_platform_parallel_launch(void* pool, FTVMParallelLambda f, void* cdata, int num_task);
int ep_platform_parallel_barrier(void* pool, int task_id, TVMParallelGroupEnv* penv);
/* Serialises error recording between a pool's threads. */
void ep_platform_pool_lock(void* pool);
void ep_platform_pool_unlock(void* pool);

int ep_platform_worker_id(void); /* 0 for a calling thread, 1.. for a pool's workers */
void* ep_platform_current(void); /* the calling thread's current context (NULL: none) */
void ep_platform_set_current(void* owner);
uint64_t ep_platform_time_ns(void);

#endif /* EP_PLATFORM_H_ */
