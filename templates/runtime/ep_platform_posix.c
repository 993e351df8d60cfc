/* POSIX platform: monotonic clock and a small pthread pool for TVM's parallel loops.
 * Tasks are claimed, not assigned: the caller and the workers take task ids from one counter, so a worker
 * the OS has not scheduled yet (a loaded machine, more threads than free cores) delays nothing: the others
 * run its share. Workers wait on a condition variable between launches, after a short spin. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "ep_platform.h"

#ifndef EP_MAX_THREADS
#define EP_MAX_THREADS 16
#endif

static _Thread_local int ep_worker = 0;

/* Workers spin this many rounds for the next launch before sleeping: kernels come in quick succession
 * within a run, and a condition-variable wake-up costs more than a small kernel. */
#ifndef EP_SPIN_ROUNDS
#define EP_SPIN_ROUNDS 20000
#endif

static struct {
  pthread_t threads[EP_MAX_THREADS];
  pthread_mutex_t lock;
  pthread_cond_t wake, done_cv;
  int n;                   /* threads including the caller */
  atomic_uint_fast64_t epoch; /* bumped per launch */
  uint64_t start_epoch;       /* the epoch workers were started at: launches after it are theirs */
  atomic_int stopping;
  atomic_uint_fast64_t claim; /* (launch epoch << 32) | next task id: claiming checks the launch too */
  atomic_int done;            /* tasks of the current launch finished */
  FTVMParallelLambda fn;
  void* cdata;
  int num_task;
  atomic_int failed;
  atomic_int barrier_count;
  atomic_int barrier_sense;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
          .done_cv = PTHREAD_COND_INITIALIZER, .n = 1};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  __asm__ __volatile__("yield");
#endif
}

uint64_t ep_platform_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ep_platform_worker_id(void) { return ep_worker; }
int ep_platform_pool_threads(void) { return pool.n; }

/* Claim and run tasks of launch `epoch` until none is left. A claim succeeds only while that launch still
 * has tasks, so the launch cannot finish (and its fn/cdata cannot change) before a claimed task is done. */
static void run_tasks(uint64_t epoch) {
  for (;;) {
    uint_fast64_t c = atomic_load_explicit(&pool.claim, memory_order_acquire);
    int task = (int)(c & 0xffffffffu);
    if ((c >> 32) != (epoch & 0xffffffffu) || task >= pool.num_task) return;
    if (!atomic_compare_exchange_weak_explicit(&pool.claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire)) continue;
    TVMParallelGroupEnv env = {NULL, pool.num_task};
    if (pool.fn(task, &env, pool.cdata) != 0) atomic_store(&pool.failed, 1);
    if (atomic_fetch_add_explicit(&pool.done, 1, memory_order_acq_rel) + 1 == pool.num_task) {
      pthread_mutex_lock(&pool.lock);
      pthread_cond_signal(&pool.done_cv);
      pthread_mutex_unlock(&pool.lock);
    }
  }
}

static uint64_t wait_for_launch(uint64_t seen) {
  uint64_t e;
  for (int spins = 0; spins < EP_SPIN_ROUNDS; ++spins) {
    e = atomic_load_explicit(&pool.epoch, memory_order_acquire);
    if (e != seen || atomic_load(&pool.stopping)) return e;
    cpu_relax();
  }
  pthread_mutex_lock(&pool.lock);
  while ((e = atomic_load(&pool.epoch)) == seen && !atomic_load(&pool.stopping)) pthread_cond_wait(&pool.wake, &pool.lock);
  pthread_mutex_unlock(&pool.lock);
  return e;
}

static void* worker_main(void* arg) {
  ep_worker = (int)(intptr_t)arg;
  uint64_t seen = pool.start_epoch; /* not the current epoch: a launch may come before this thread runs */
  for (;;) {
    seen = wait_for_launch(seen);
    if (atomic_load(&pool.stopping)) break;
    run_tasks(seen);
  }
  return NULL;
}

int ep_platform_pool_start(int num_threads) {
  if (num_threads < 1) num_threads = 1;
  if (num_threads > EP_MAX_THREADS) num_threads = EP_MAX_THREADS;
  if (pool.n == num_threads) return 0;
  ep_platform_pool_stop();
  pool.start_epoch = atomic_load(&pool.epoch);
  for (int i = 1; i < num_threads; ++i) {
    if (pthread_create(&pool.threads[i], NULL, worker_main, (void*)(intptr_t)i) != 0) {
      pool.n = i;
      ep_platform_pool_stop();
      return -1;
    }
    pool.n = i + 1;
  }
  return 0;
}

void ep_platform_pool_stop(void) {
  pthread_mutex_lock(&pool.lock);
  atomic_store(&pool.stopping, 1);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  for (int i = 1; i < pool.n; ++i) pthread_join(pool.threads[i], NULL);
  pool.n = 1;
  atomic_store(&pool.stopping, 0);
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
  pool.fn = f;
  pool.cdata = cdata;
  pool.num_task = num_task;
  atomic_store(&pool.done, 0);
  atomic_store(&pool.barrier_count, 0);
  const uint64_t epoch = atomic_load(&pool.epoch) + 1;
  atomic_store_explicit(&pool.claim, (uint_fast64_t)(epoch & 0xffffffffu) << 32, memory_order_release);
  pthread_mutex_lock(&pool.lock);
  atomic_store_explicit(&pool.epoch, epoch, memory_order_release);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.lock);
  run_tasks(epoch);
  for (int spins = 0; spins < EP_SPIN_ROUNDS && atomic_load(&pool.done) < num_task; ++spins) cpu_relax();
  if (atomic_load(&pool.done) < num_task) {
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.done) < num_task) pthread_cond_wait(&pool.done_cv, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
  }
  return atomic_load(&pool.failed) ? -1 : 0;
}

/* Needs all num_task tasks running at once, which claiming does not promise when a thread runs two tasks in
 * turn; edgepack's schedules never emit a barrier (TVM only does for explicit parallel-barrier TIR). */
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
