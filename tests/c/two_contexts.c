/* Contexts run at once, each on its own thread: every context runs ITERS times and compares its outputs bit
 * for bit with its own reference run, made before any thread started. Package a (pkg_a.h) is required,
 * package b (pkg_b.h, -DHAVE_PKG_B) optional: two packages in one program.
 *   two_contexts OUT_DIR ITERS JOB...     JOB = a|b:THREADS:DIM (the first dim; any others at their minimum)
 * The reference run's inputs and outputs go to OUT_DIR/job<j>_in<i>.npy, job<j>_out<k>.npy, for the caller
 * to check against onnxruntime. Exit 0 when every run matched its reference, 1 if not, 2 on bad usage. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_npy.h"
#include "pkg_a.h"
#ifdef HAVE_PKG_B
#include "pkg_b.h"
#endif

#define MAX_JOBS 2 /* per package */
#define MAX_IO 8
#define MAX_DIMS 8

typedef struct {
  const ep_package_t* pkg;
  void* ctx;
  uint8_t *arena, *io, *ref;
  size_t arena_bytes, io_bytes;
  int threads;
  int64_t dims[MAX_DIMS];
  ep_buffer_t in[MAX_IO], out[MAX_IO];
  long iters, failed, differ;
  char first_error[EP_MSG_BYTES];
} job_t;

/* Storage for up to MAX_JOBS contexts of a package: context, arena, I/O buffers, reference outputs. */
#define PKG_STORAGE(P)                                              \
  static P##_CTX P##_ctx[MAX_JOBS];                                 \
  static _Alignas(EP_ALIGN) uint8_t P##_arena[MAX_JOBS][P##_ARENA]; \
  static _Alignas(EP_ALIGN) uint8_t P##_io[MAX_JOBS][P##_IO + EP_ALIGN * 2 * MAX_IO]; \
  static uint8_t P##_ref[MAX_JOBS][P##_IO];
PKG_STORAGE(PKG_A)
#ifdef HAVE_PKG_B
PKG_STORAGE(PKG_B)
#endif

static size_t align_up(size_t n) { return (n + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN; }

static size_t tensor_bytes(const ep_io_desc_t* io, const int64_t* shape) {
  size_t n = (size_t)io->itemsize;
  for (int a = 0; a < io->rank; ++a) n *= (size_t)shape[a];
  return n;
}

static void input_shape(const ep_io_desc_t* io, const int64_t* dims, int64_t* shape) {
  for (int a = 0; a < io->rank; ++a) shape[a] = io->shape[a] >= 0 ? io->shape[a] : dims[-io->shape[a] - 1];
}

/* Inputs at the job's dims, float32 ones filled with pseudo-random values in [-1, 1), others with zeros. */
static int setup_io(job_t* j, unsigned seed) {
  size_t used = 0;
  int64_t shape[EP_NPY_MAX_RANK];
  for (int i = 0; i < j->pkg->num_inputs; ++i) {
    const ep_io_desc_t* io = &j->pkg->inputs[i];
    input_shape(io, j->dims, shape);
    j->in[i] = (ep_buffer_t){j->io + used, tensor_bytes(io, shape)};
    used += align_up(j->in[i].bytes);
    memset(j->in[i].data, 0, j->in[i].bytes);
    if (strcmp(io->dtype, "float32") != 0) continue;
    for (size_t k = 0; k < j->in[i].bytes / 4; ++k) {
      seed = seed * 1664525u + 1013904223u;
      ((float*)j->in[i].data)[k] = (float)(seed >> 8) * (2.0f / 16777216.0f) - 1.0f;
    }
  }
  for (int k = 0; k < j->pkg->num_outputs; ++k) {
    if (j->pkg->output_shape(j->dims, k, shape) != EP_OK) return -1;
    j->out[k] = (ep_buffer_t){j->io + used, tensor_bytes(&j->pkg->outputs[k], shape)};
    used += align_up(j->out[k].bytes);
  }
  return used <= j->io_bytes ? 0 : -1;
}

static int parse_job(job_t* j, const char* spec, int* used_a, int* used_b) {
  char which = 0;
  int threads = 0;
  long long dim = 0;
  if (sscanf(spec, "%c:%d:%lld", &which, &threads, &dim) != 3) return -1;
  memset(j, 0, sizeof *j);
  if (which == 'a' && *used_a < MAX_JOBS) {
    int s = (*used_a)++;
    *j = (job_t){.pkg = &PKG_A, .ctx = &PKG_A_ctx[s], .arena = PKG_A_arena[s], .io = PKG_A_io[s], .ref = PKG_A_ref[s],
                 .arena_bytes = PKG_A_ARENA, .io_bytes = sizeof PKG_A_io[s]};
#ifdef HAVE_PKG_B
  } else if (which == 'b' && *used_b < MAX_JOBS) {
    int s = (*used_b)++;
    *j = (job_t){.pkg = &PKG_B, .ctx = &PKG_B_ctx[s], .arena = PKG_B_arena[s], .io = PKG_B_io[s], .ref = PKG_B_ref[s],
                 .arena_bytes = PKG_B_ARENA, .io_bytes = sizeof PKG_B_io[s]};
#endif
  } else {
    return -1;
  }
  (void)used_b;
  if (j->pkg->num_dims > MAX_DIMS || j->pkg->num_inputs + j->pkg->num_outputs > MAX_IO) return -1;
  j->threads = threads;
  for (int d = 0; d < j->pkg->num_dims; ++d) j->dims[d] = d == 0 ? dim : j->pkg->dims[d].lo;
  return 0;
}

static int outputs_match(const job_t* j) {
  size_t off = 0;
  for (int k = 0; k < j->pkg->num_outputs; off += j->out[k].bytes, ++k)
    if (memcmp(j->out[k].data, j->ref + off, j->out[k].bytes) != 0) return 0;
  return 1;
}

static ep_status_t run_once(job_t* j) {
  for (int k = 0; k < j->pkg->num_outputs; ++k) memset(j->out[k].data, 0xff, j->out[k].bytes); /* NaN */
  ep_status_t st = j->pkg->run(j->ctx, j->in, j->out, j->dims);
  if (st != EP_OK && !j->first_error[0])
    snprintf(j->first_error, sizeof j->first_error, "%s: %s", ep_status_str(st), j->pkg->message(j->ctx));
  return st;
}

static void* loop(void* arg) {
  job_t* j = arg;
  for (long i = 0; i < j->iters; ++i) {
    if (run_once(j) != EP_OK) ++j->failed;
    else if (!outputs_match(j)) ++j->differ;
  }
  return NULL;
}

/* The reference run, alone in the process; its inputs and outputs written as .npy. */
static int reference(job_t* j, int n, const char* dir) {
  ep_options_t opts = {j->threads};
  ep_status_t st = j->pkg->init(j->ctx, j->arena, j->arena_bytes, &opts);
  if (st != EP_OK || setup_io(j, 1234u + (unsigned)n) != 0 || run_once(j) != EP_OK) {
    fprintf(stderr, "job %d: init or reference run failed: %s\n", n, j->first_error);
    return -1;
  }
  char path[4096];
  int64_t shape[EP_NPY_MAX_RANK];
  size_t off = 0;
  for (int i = 0; i < j->pkg->num_inputs; ++i) {
    input_shape(&j->pkg->inputs[i], j->dims, shape);
    snprintf(path, sizeof path, "%s/job%d_in%d.npy", dir, n, i);
    if (ep_npy_write(path, j->pkg->inputs[i].dtype, shape, j->pkg->inputs[i].rank, j->in[i].data, j->in[i].bytes)) return -1;
  }
  for (int k = 0; k < j->pkg->num_outputs; off += j->out[k].bytes, ++k) {
    memcpy(j->ref + off, j->out[k].data, j->out[k].bytes);
    (void)j->pkg->output_shape(j->dims, k, shape);
    snprintf(path, sizeof path, "%s/job%d_out%d.npy", dir, n, k);
    if (ep_npy_write(path, j->pkg->outputs[k].dtype, shape, j->pkg->outputs[k].rank, j->out[k].data, j->out[k].bytes)) return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  static job_t jobs[2 * MAX_JOBS];
  pthread_t tid[2 * MAX_JOBS];
  int n = argc - 3, used_a = 0, used_b = 0, bad = 0;
  if (n < 1 || n > 2 * MAX_JOBS) return fprintf(stderr, "usage: two_contexts OUT_DIR ITERS JOB...\n"), 2;
  for (int i = 0; i < n; ++i) {
    if (parse_job(&jobs[i], argv[3 + i], &used_a, &used_b) != 0) return fprintf(stderr, "bad job %s\n", argv[3 + i]), 2;
    jobs[i].iters = atol(argv[2]);
    if (reference(&jobs[i], i, argv[1]) != 0) return 1;
  }
  for (int i = 0; i < n; ++i) pthread_create(&tid[i], NULL, loop, &jobs[i]);
  for (int i = 0; i < n; ++i) pthread_join(tid[i], NULL);
  for (int i = 0; i < n; ++i) {
    const job_t* j = &jobs[i];
    printf("job %d (%s, %d threads, dim %lld): %ld runs, %ld failed, %ld differ %s\n", i, j->pkg->name, j->threads,
           (long long)j->dims[0], j->iters, j->failed, j->differ, j->first_error);
    bad |= j->failed || j->differ;
    j->pkg->deinit(j->ctx);
  }
  return bad;
}
