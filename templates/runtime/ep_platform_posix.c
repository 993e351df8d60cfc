/* POSIX platform: monotonic clock and a small pthread pool for TVM's parallel loops.
 * The calling thread runs task 0 itself; workers 1..n-1 wait on a condition variable between launches. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "ep_platform.h"

#ifndef EP_MAX_THREADS
#define EP_MAX_THREADS 16
#endif

static _Thread_local int ep_worker = 0;

static struct {
  pthread_t threads[EP_MAX_THREADS];
  pthread_mutex_t lock;
  pthread_cond_t wake, done;
  int n;            /* threads including the caller */
  uint64_t epoch;   /* bumped per launch */
  int stopping;
  int pending;      /* workers still running the current launch */
  FTVMParallelLambda fn;
  void* cdata;
  int num_task;
  atomic_int failed;
  atomic_int barrier_count;
  atomic_int barrier_sense;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER, .n = 1};

uint64_t ep_platform_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ep_platform_worker_id(void) { return ep_worker; }
int ep_platform_pool_threads(void) { return pool.n; }

static void run_task(int task) {
  TVMParallelGroupEnv env = {NULL, pool.num_task};
  if (task < pool.num_task && pool.fn(task, &env, pool.cdata) != 0) atomic_store(&pool.failed, 1);
}

static void* worker_main(void* arg) {
  ep_worker = (int)(intptr_t)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.lock);
  for (;;) {
    while (pool.epoch == seen && !pool.stopping) pthread_cond_wait(&pool.wake, &pool.lock);
    if (pool.stopping) break;
    seen = pool.epoch;
    pthread_mutex_unlock(&pool.lock);
    run_task(ep_worker);
    pthread_mutex_lock(&pool.lock);
    if (--pool.pending == 0) pthread_cond_signal(&pool.done);
  }
  pthread_mutex_unlock(&pool.lock);
  return NULL;
}

int ep_platform_pool_start(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  if (num_threads > EP_MAX_THREADS) num_threads = EP_MAX_THREADS;
  if (pool.n == num_threads) return 0;
  ep_platform_pool_stop();
  pool.stopping = 0;
  for (int i = 1; i < num_threads; ++i) {
    if (pthread_create(&pool.threads[i], NULL, worker_main, (void*)(intptr_t)i) != 0) {
      pool.n = i;
      ep_platform_pool_stop();
      return -1;
    }
    pool.n = i + 1;
  }
  pool.n = num_threads;
  return 0;
}

void ep_platform_pool_stop(void) {
  pthread_mutex_lock(&pool.lock);
  pool.stopping = 1;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 1; i < pool.n; ++i) pthread_join(pool.threads[i], NULL);
  pool.n = 1;
  pool.stopping = 0;
}

int ep_platform_parallel_launch(FTVMParallelLambda f, void* cdata, int num_task) {
  int n = pool.n;
  if (num_task <= 0 || num_task > n) num_task = n;
  atomic_store(&pool.failed, 0);
  if (num_task == 1 || n == 1) {
    TVMParallelGroupEnv env = {NULL, num_task};
    int rc = 0;
    for (int t = 0; t < num_task; ++t) rc |= f(t, &env, cdata);
    return rc;
  }
  pthread_mutex_lock(&pool.lock);
  pool.fn = f;
  pool.cdata = cdata;
  pool.num_task = num_task;
  pool.pending = n - 1;
  atomic_store(&pool.barrier_count, 0);
  pool.epoch++;
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  run_task(0);
  pthread_mutex_lock(&pool.lock);
  while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  return atomic_load(&pool.failed) ? -1 : 0;
}

int ep_platform_parallel_barrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  int sense = atomic_load(&pool.barrier_sense);
  if (atomic_fetch_add(&pool.barrier_count, 1) + 1 == penv->num_task) {
    atomic_store(&pool.barrier_count, 0);
    atomic_store(&pool.barrier_sense, !sense);
  } else {
    while (atomic_load(&pool.barrier_sense) == sense) {
    }
  }
  return 0;
}
