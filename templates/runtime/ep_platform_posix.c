/* POSIX platform: monotonic clock and small pthread pools for TVM's parallel loops, one per context.
 * Tasks are claimed, not assigned: the caller and the workers take task ids from one counter, so a worker
 * the OS has not scheduled yet (a loaded machine, more threads than free cores) delays nothing: the others
 * run its share. Workers wait on a condition variable between launches, after a short spin. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "ep_platform.h"

static _Thread_local int ep_worker = 0;
static _Thread_local void* ep_current = NULL;

/* Workers spin this many rounds for the next launch before sleeping: kernels come in quick succession
 * within a run, and a condition-variable wake-up costs more than a small kernel. */
#ifndef EP_SPIN_ROUNDS
#define EP_SPIN_ROUNDS 20000
#endif

typedef struct {
  pthread_t threads[EP_MAX_THREADS];
  pthread_mutex_t lock;
  pthread_cond_t wake, done_cv;
  int n;                      /* threads including the caller */
  void* owner;                /* the workers' current context */
  atomic_int next_id;         /* worker ids, handed out as workers start */
  atomic_uint_fast64_t epoch; /* bumped per launch */
  atomic_int stopping;
  atomic_uint_fast64_t claim; /* (launch epoch << 32) | next task id: claiming checks the launch too */
  atomic_int num_task;        /* read by workers still looking at the previous launch: atomic */
  atomic_int done;            /* tasks of the current launch finished */
  FTVMParallelLambda fn;
  void* cdata;
  atomic_int failed;
  atomic_int barrier_count;
  atomic_int barrier_sense;
} ep_pool_t;

_Static_assert(sizeof(ep_pool_t) <= EP_POOL_BYTES, "EP_POOL_BYTES is too small for this platform's pool");

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
void* ep_platform_current(void) { return ep_current; }
void ep_platform_set_current(void* owner) { ep_current = owner; }

/* Claim and run tasks of launch `epoch` until none is left. A claim succeeds only while that launch still
 * has tasks, so the launch cannot finish (and its fn/cdata cannot change) before a claimed task is done. */
static void run_tasks(ep_pool_t* p, uint64_t epoch) {
  for (;;) {
    uint_fast64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    int task = (int)(c & 0xffffffffu), num_task = atomic_load_explicit(&p->num_task, memory_order_relaxed);
    if ((c >> 32) != (epoch & 0xffffffffu) || task >= num_task) return;
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel, memory_order_acquire)) continue;
    TVMParallelGroupEnv env = {p, num_task};
    if (p->fn(task, &env, p->cdata) != 0) atomic_store(&p->failed, 1);
    if (atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel) + 1 == num_task) {
      pthread_mutex_lock(&p->lock);
      pthread_cond_signal(&p->done_cv);
      pthread_mutex_unlock(&p->lock);
    }
  }
}

static uint64_t wait_for_launch(ep_pool_t* p, uint64_t seen) {
  uint64_t e;
  for (int spins = 0; spins < EP_SPIN_ROUNDS; ++spins) {
    e = atomic_load_explicit(&p->epoch, memory_order_acquire);
    if (e != seen || atomic_load(&p->stopping)) return e;
    cpu_relax();
  }
  pthread_mutex_lock(&p->lock);
  while ((e = atomic_load(&p->epoch)) == seen && !atomic_load(&p->stopping)) pthread_cond_wait(&p->wake, &p->lock);
  pthread_mutex_unlock(&p->lock);
  return e;
}

static void* worker_main(void* arg) {
  ep_pool_t* p = arg;
  ep_worker = atomic_fetch_add(&p->next_id, 1);
  ep_current = p->owner;
  uint64_t seen = 0; /* the pool's first epoch, not the current one: a launch may come before this runs */
  for (;;) {
    seen = wait_for_launch(p, seen);
    if (atomic_load(&p->stopping)) break;
    run_tasks(p, seen);
  }
  return NULL;
}

static void stop_workers(ep_pool_t* p, int started) {
  pthread_mutex_lock(&p->lock);
  atomic_store(&p->stopping, 1);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  for (int i = 1; i < started; ++i) pthread_join(p->threads[i], NULL);
  pthread_cond_destroy(&p->done_cv);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->lock);
}

int ep_platform_pool_start(void* pool, int num_threads, void* owner) {
  ep_pool_t* p = pool;
  memset(p, 0, sizeof *p);
  p->n = num_threads < 1 ? 1 : num_threads > EP_MAX_THREADS ? EP_MAX_THREADS : num_threads;
  p->owner = owner;
  atomic_init(&p->next_id, 1);
  if (pthread_mutex_init(&p->lock, NULL) != 0) return -1;
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done_cv, NULL);
  for (int i = 1; i < p->n; ++i) {
    if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
      stop_workers(p, i);
      return -1;
    }
  }
  return p->n;
}

void ep_platform_pool_stop(void* pool) {
  ep_pool_t* p = pool;
  stop_workers(p, p->n);
}

void ep_platform_pool_lock(void* pool) { pthread_mutex_lock(&((ep_pool_t*)pool)->lock); }
void ep_platform_pool_unlock(void* pool) { pthread_mutex_unlock(&((ep_pool_t*)pool)->lock); }

static int run_inline(FTVMParallelLambda f, void* cdata, int num_task) {
  TVMParallelGroupEnv env = {NULL, num_task};
  int rc = 0;
  for (int t = 0; t < num_task; ++t) rc |= f(t, &env, cdata);
  return rc;
}

int ep_platform_parallel_launch(void* pool, FTVMParallelLambda f, void* cdata, int num_task) {
  ep_pool_t* p = pool;
  const int n = p->n;
  if (num_task <= 0 || num_task > n) num_task = n;
  if (num_task == 1 || n == 1) return run_inline(f, cdata, num_task);
  atomic_store(&p->failed, 0);
  p->fn = f;
  p->cdata = cdata;
  atomic_store(&p->num_task, num_task);
  atomic_store(&p->done, 0);
  atomic_store(&p->barrier_count, 0);
  const uint64_t epoch = atomic_load(&p->epoch) + 1;
  atomic_store_explicit(&p->claim, (uint_fast64_t)(epoch & 0xffffffffu) << 32, memory_order_release);
  pthread_mutex_lock(&p->lock);
  atomic_store_explicit(&p->epoch, epoch, memory_order_release);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->lock);
  run_tasks(p, epoch);
  for (int spins = 0; spins < EP_SPIN_ROUNDS && atomic_load(&p->done) < num_task; ++spins) cpu_relax();
  if (atomic_load(&p->done) < num_task) {
    pthread_mutex_lock(&p->lock);
    while (atomic_load(&p->done) < num_task) pthread_cond_wait(&p->done_cv, &p->lock);
    pthread_mutex_unlock(&p->lock);
  }
  return atomic_load(&p->failed) ? -1 : 0;
}

/* Needs all num_task tasks running at once, which claiming does not promise when a thread runs two tasks in
 * turn; edgepack's schedules never emit a barrier (TVM only does for explicit parallel-barrier TIR). */
int ep_platform_parallel_barrier(void* pool, int task_id, TVMParallelGroupEnv* penv) {
  ep_pool_t* p = pool;
  (void)task_id;
  int sense = atomic_load(&p->barrier_sense);
  if (atomic_fetch_add(&p->barrier_count, 1) + 1 == penv->num_task) {
    atomic_store(&p->barrier_count, 0);
    atomic_store(&p->barrier_sense, !sense);
  } else {
    while (atomic_load(&p->barrier_sense) == sense) {
    }
  }
  return 0;
}
