/* Single-threaded platform for boards without threads: parallel loops run inline, in order.
 * The board provides ep_board_time_ns() (a timer counter scaled to ns). */
#include "ep_platform.h"

uint64_t ep_board_time_ns(void);

uint64_t ep_platform_time_ns(void) { return ep_board_time_ns(); }
int ep_platform_pool_start(int num_threads) { return num_threads <= 1 ? 0 : 0; }
int ep_platform_pool_threads(void) { return 1; }
void ep_platform_pool_stop(void) {}
int ep_platform_worker_id(void) { return 0; }

int ep_platform_parallel_launch(FTVMParallelLambda f, void* cdata, int num_task) {
  TVMParallelGroupEnv env = {0, 1};
  (void)num_task;
  return f(0, &env, cdata);
}

int ep_platform_parallel_barrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id, (void)penv;
  return 0;
}
