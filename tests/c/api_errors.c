/* Drives a package through its C API with bad arguments; prints one line per check and exits non-zero on
 * the first unexpected status. Built against any package through programs/ep_package.h. Assumes the
 * package's first dim appears in its first input (true for the examples). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ep_package.h"

static _Alignas(EP_ALIGN) uint8_t arena[EP_PACKAGE_ARENA_BYTES];
static _Alignas(EP_ALIGN) uint8_t pool[EP_PACKAGE_IO_BYTES + 64 * EP_ALIGN];
static EP_PACKAGE_CTX ctx;

static int expect(const char* what, ep_status_t got, ep_status_t want) {
  printf("%-28s %s (%s)\n", what, ep_status_str(got), got == want ? "ok" : "UNEXPECTED");
  if (got != want) printf("  message: %s\n", EP_PACKAGE.message(&ctx));
  return got == want ? 0 : 1;
}

/* A kernel that runs out of workspace fails the run with the runtime's reason in the context's message (the
 * workspace is shrunk behind the API's back: a package sizes it for its dims' upper bounds). */
static int workspace_exhausted(const ep_buffer_t* in, const ep_buffer_t* out, const int64_t* dims) {
  size_t keep = ctx.rt.ws_per_thread;
  ctx.rt.ws_per_thread = 0;
  int bad = expect("run: workspace exhausted", EP_PACKAGE.run(&ctx, in, out, dims), EP_ERR_KERNEL);
  printf("  message: %s\n", EP_PACKAGE.message(&ctx));
  ctx.rt.ws_per_thread = keep;
  return bad | expect("run with its workspace back", EP_PACKAGE.run(&ctx, in, out, dims), EP_OK);
}

/* output_shape: bad arguments are refused, and the shape at good dims agrees with the I/O descriptor. */
static int output_shapes(int64_t* dims) {
  const ep_package_t* p = &EP_PACKAGE;
  int64_t shape[EP_PACKAGE_MAX_IO_RANK];
  int bad = expect("output_shape: NULL dims", p->output_shape(NULL, 0, shape), p->num_dims ? EP_ERR_ARG : EP_OK);
  bad |= expect("output_shape: NULL shape", p->output_shape(dims, 0, NULL), EP_ERR_ARG);
  bad |= expect("output_shape: index -1", p->output_shape(dims, -1, shape), EP_ERR_ARG);
  bad |= expect("output_shape: index past the end", p->output_shape(dims, p->num_outputs, shape), EP_ERR_ARG);
  if (p->num_dims > 0) {
    dims[0] = p->dims[0].hi + 1;
    bad |= expect("output_shape: dim above its range", p->output_shape(dims, 0, shape), EP_ERR_SHAPE);
    dims[0] = p->dims[0].lo;
  }
  for (int k = 0; k < p->num_outputs; ++k) {
    bad |= expect("output_shape", p->output_shape(dims, k, shape), EP_OK);
    for (int a = 0; a < p->outputs[k].rank; ++a) {
      int64_t want = p->outputs[k].shape[a];
      if (want == EP_EXTENT_EXPR) continue;
      if (shape[a] != (want >= 0 ? want : dims[-want - 1])) bad |= expect("output_shape: extent", EP_ERR_SHAPE, EP_OK);
    }
  }
  return bad;
}

int main(void) {
  const ep_package_t* p = &EP_PACKAGE;
  int bad = 0;
  int64_t dims[16];
  for (int d = 0; d < p->num_dims; ++d) dims[d] = p->dims[d].lo;
  /* At the minimum dims every tensor fits in an equal share of the I/O pool. */
  ep_buffer_t in[16], out[16];
  const size_t slot = EP_PACKAGE_IO_BYTES / (size_t)(p->num_inputs + p->num_outputs) / EP_ALIGN * EP_ALIGN;
  memset(pool, 0, sizeof pool);
  for (int i = 0; i < p->num_inputs; ++i) in[i] = (ep_buffer_t){pool + (size_t)i * slot, slot};
  for (int i = 0; i < p->num_outputs; ++i) out[i] = (ep_buffer_t){pool + (size_t)(p->num_inputs + i) * slot, slot};

  bad |= expect("init: NULL arena", p->init(&ctx, NULL, sizeof arena, NULL), EP_ERR_ARG);
  bad |= expect("init: misaligned arena", p->init(&ctx, arena + 1, sizeof arena - 1, NULL), EP_ERR_ARG);
  bad |= expect("init: arena too small", p->init(&ctx, arena, 64, NULL), EP_ERR_MEMORY);
  bad |= expect("init", p->init(&ctx, arena, sizeof arena, NULL), EP_OK);
  bad |= expect("run at the minimum dims", p->run(&ctx, in, out, dims), EP_OK);
  if (p->num_dims > 0) {
    dims[0] = p->dims[0].hi + 1;
    bad |= expect("run: dim above its range", p->run(&ctx, in, out, dims), EP_ERR_SHAPE);
    printf("  message: %s\n", p->message(&ctx));
    dims[0] = p->dims[0].lo - 1;
    bad |= expect("run: dim below its range", p->run(&ctx, in, out, dims), EP_ERR_SHAPE);
    dims[0] = p->dims[0].lo;
    bad |= expect("run: NULL dims", p->run(&ctx, in, out, NULL), EP_ERR_ARG);
  }
  bad |= expect("run: NULL inputs", p->run(&ctx, NULL, out, dims), EP_ERR_ARG);
  bad |= expect("run: NULL outputs", p->run(&ctx, in, NULL, dims), EP_ERR_ARG);
  size_t keep = in[0].bytes;
  in[0].bytes = 1;
  bad |= expect("run: short input buffer", p->run(&ctx, in, out, dims), EP_ERR_ARG);
  in[0].bytes = keep;
  in[0].data = (uint8_t*)in[0].data + 4;
  bad |= expect("run: misaligned input", p->run(&ctx, in, out, dims), EP_ERR_ARG);
  in[0].data = (uint8_t*)in[0].data - 4;
  keep = out[0].bytes;
  out[0].bytes = 0;
  bad |= expect("run: short output buffer", p->run(&ctx, in, out, dims), EP_ERR_ARG);
  out[0].bytes = keep;
  bad |= expect("run again after errors", p->run(&ctx, in, out, dims), EP_OK);
  bad |= workspace_exhausted(in, out, dims);
  bad |= output_shapes(dims);
  bad |= expect("init again, without deinit", p->init(&ctx, arena, sizeof arena, NULL), EP_OK);
  p->deinit(&ctx);
  bad |= expect("run after deinit", p->run(&ctx, in, out, dims), EP_ERR_ARG);
  bad |= expect("init after deinit", p->init(&ctx, arena, sizeof arena, NULL), EP_OK);
  bad |= expect("run after init again", p->run(&ctx, in, out, dims), EP_OK);
  p->deinit(&ctx);
  return bad;
}
