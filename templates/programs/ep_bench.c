/* The `bench` program: times the package at given dims on the device's monotonic clock.
 *   bench [--threads N] [--warmup W] [--repeat R] [--min-time-ms M] DIM0 [DIM1 ...]
 * Inputs are zero-filled (latency does not depend on values here). After W warm-up runs it times R runs
 * (more while the total is under M ms) and prints one JSON object: {"dims": [...], "threads": n,
 * "samples_ns": [...]}. Exit codes as for `run`: 2 usage, 3 dims out of range, 4 run failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_internal.h" /* ep_platform_time_ns, ep_rt_threads */
#include "ep_package.h"

/* Array sizes from the package, checked when this is compiled (+ 1: C has no empty arrays). */
#define N_IN (EP_PACKAGE_NUM_INPUTS + 1)
#define N_OUT (EP_PACKAGE_NUM_OUTPUTS + 1)
#define N_DIMS (EP_PACKAGE_NUM_DIMS + 1)
#define MAX_SAMPLES 100000

static _Alignas(EP_ALIGN) uint8_t arena[EP_PACKAGE_ARENA_BYTES];
static _Alignas(EP_ALIGN) uint8_t io_pool[EP_PACKAGE_IO_BYTES + EP_ALIGN * (N_IN + N_OUT)];
static EP_PACKAGE_CTX ctx;
static uint64_t samples[MAX_SAMPLES];

static size_t io_bytes(const ep_io_desc_t* io, const int64_t* shape) {
  size_t n = (size_t)io->itemsize;
  for (int k = 0; k < io->rank; ++k) n *= (size_t)shape[k];
  return n;
}

int main(int argc, char** argv) {
  const ep_package_t* pkg = &EP_PACKAGE;
  ep_options_t opts = {0};
  long warmup = 3, repeat = 20, min_ms = 0;
  int a = 1;
  for (; a + 1 < argc && strncmp(argv[a], "--", 2) == 0; a += 2) {
    long v = atol(argv[a + 1]);
    if (!strcmp(argv[a], "--threads")) opts.num_threads = (int)v;
    else if (!strcmp(argv[a], "--warmup")) warmup = v;
    else if (!strcmp(argv[a], "--repeat")) repeat = v;
    else if (!strcmp(argv[a], "--min-time-ms")) min_ms = v;
    else {
      fprintf(stderr, "error: unknown option %s\n", argv[a]);
      return 2;
    }
  }
  if (argc - a != pkg->num_dims || repeat < 1 || repeat > MAX_SAMPLES) {
    fprintf(stderr, "error: usage: bench [--threads N] [--warmup W] [--repeat R<=%d] [--min-time-ms M] (%d dims)\n",
            MAX_SAMPLES, pkg->num_dims);
    return 2;
  }
  int64_t dims[N_DIMS];
  for (int d = 0; d < pkg->num_dims; ++d) {
    dims[d] = atoll(argv[a + d]);
    if (dims[d] < pkg->dims[d].lo || dims[d] > pkg->dims[d].hi) {
      fprintf(stderr, "error: dim %s = %lld is outside its declared range %lld..%lld\n", pkg->dims[d].name,
              (long long)dims[d], (long long)pkg->dims[d].lo, (long long)pkg->dims[d].hi);
      return 3;
    }
  }

  /* Input shapes follow from the dims: static extents, or the dim an axis names. */
  ep_buffer_t in[N_IN], out[N_OUT];
  int64_t shape[EP_PACKAGE_MAX_IO_RANK];
  size_t used = 0;
  for (int i = 0; i < pkg->num_inputs; ++i) {
    const ep_io_desc_t* io = &pkg->inputs[i];
    for (int k = 0; k < io->rank; ++k) shape[k] = io->shape[k] >= 0 ? io->shape[k] : dims[-io->shape[k] - 1];
    size_t n = io_bytes(io, shape);
    if (used + n > sizeof io_pool) {
      fprintf(stderr, "error: dims are outside the package's declared ranges\n");
      return 3;
    }
    in[i] = (ep_buffer_t){io_pool + used, n};
    used += (n + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN;
  }
  for (int i = 0; i < pkg->num_outputs; ++i) {
    if (pkg->output_shape(dims, i, shape) != EP_OK) {
      fprintf(stderr, "error: output_shape failed for output %d\n", i);
      return 4;
    }
    size_t n = io_bytes(&pkg->outputs[i], shape);
    if (used + n > sizeof io_pool) {
      fprintf(stderr, "error: dims are outside the package's declared ranges\n");
      return 3;
    }
    out[i] = (ep_buffer_t){io_pool + used, n};
    used += (n + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN;
  }
  memset(io_pool, 0, used);

  ep_status_t st = pkg->init(&ctx, arena, sizeof arena, &opts);
  for (long w = 0; st == EP_OK && w < warmup; ++w) st = pkg->run(&ctx, in, out, dims);
  long n = 0;
  uint64_t total = 0;
  while (st == EP_OK && n < MAX_SAMPLES && (n < repeat || total < (uint64_t)min_ms * 1000000u)) {
    uint64_t t0 = ep_platform_time_ns();
    st = pkg->run(&ctx, in, out, dims);
    samples[n] = ep_platform_time_ns() - t0;
    total += samples[n++];
  }
  if (st != EP_OK) {
    fprintf(stderr, "error: %s: %s\n", ep_status_str(st), pkg->message(&ctx));
    return st == EP_ERR_SHAPE ? 3 : 4;
  }
  printf("{\"package\": \"%s\", \"dims\": [", pkg->name);
  for (int d = 0; d < pkg->num_dims; ++d) printf("%s%lld", d ? ", " : "", (long long)dims[d]);
  printf("], \"threads\": %d, \"samples_ns\": [", ep_rt_threads(&ctx.rt));
  for (long i = 0; i < n; ++i) printf("%s%llu", i ? ", " : "", (unsigned long long)samples[i]);
  printf("]");
  const uint64_t* calls = pkg->call_ns(&ctx);
  uint64_t any = 0;
  for (int i = 0; i < pkg->num_calls; ++i) any |= calls[i];
  if (any) { /* built with -DEP_PROFILE: mean ns per call over the timed and warm-up runs */
    printf(", \"calls\": [");
    for (int i = 0; i < pkg->num_calls; ++i)
      printf("%s{\"kernel\": \"%s\", \"mean_ns\": %llu}", i ? ", " : "", pkg->call_names[i],
             (unsigned long long)(calls[i] / (uint64_t)(n + warmup)));
    printf("]");
  }
  printf("}\n");
  pkg->deinit(&ctx);
  return 0;
}
