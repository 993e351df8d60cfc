/* Single-threaded platform for boards without threads: parallel loops run inline, in order, and a pool
 * holds nothing. The current context is a plain static (one thread; run restores the previous context on
 * return, so a run from an interrupt handler does not disturb the run it interrupted).
 * The board provides ep_board_time_ns() (a timer counter scaled to ns). */
#include "ep_platform.h"

uint64_t ep_board_time_ns(void);

static void* ep_current;

uint64_t ep_platform_time_ns(void) { return ep_board_time_ns(); }
int ep_platform_pool_start(void* pool, int num_threads, void* owner) { return (void)pool, (void)num_threads, (void)owner, 1; }
void ep_platform_pool_stop(void* pool) { (void)pool; }
void ep_platform_pool_lock(void* pool) { (void)pool; }
void ep_platform_pool_unlock(void* pool) { (void)pool; }
int ep_platform_worker_id(void) { return 0; }
void* ep_platform_current(void) { return ep_current; }
void ep_platform_set_current(void* owner) { ep_current = owner; }

int ep_platform_parallel_launch(void* pool, FTVMParallelLambda f, void* cdata, int num_task) {
  TVMParallelGroupEnv env = {0, 1};
  (void)pool, (void)num_task;
  return f(0, &env, cdata);
}

int ep_platform_parallel_barrier(void* pool, int task_id, TVMParallelGroupEnv* penv) {
  (void)pool, (void)task_id, (void)penv;
  return 0;
}
