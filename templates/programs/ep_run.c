/* The `run` program: reads .npy inputs (model order), takes dims from their shapes, runs the package once,
 * writes <k>_<name>.npy per output into OUT_DIR. Static buffers only: the package's arena and I/O pool.
 *   run [--threads N] OUT_DIR INPUT0.npy [INPUT1.npy ...]
 * Exit codes: 0 ok, 2 bad input (usage, file, dtype, count), 3 shape out of range, 4 run failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep_npy.h"
#include "ep_package.h" /* generated: EP_PACKAGE, EP_PACKAGE_CTX, EP_PACKAGE_ARENA_BYTES, ..._NUM_INPUTS, ... */

/* Array sizes from the package, checked when this is compiled (+ 1: C has no empty arrays). */
#define N_IN (EP_PACKAGE_NUM_INPUTS + 1)
#define N_OUT (EP_PACKAGE_NUM_OUTPUTS + 1)
#define N_DIMS (EP_PACKAGE_NUM_DIMS + 1)
_Static_assert(EP_PACKAGE_MAX_IO_RANK <= EP_NPY_MAX_RANK, "a tensor of the package has a rank .npy I/O cannot hold");

static _Alignas(EP_ALIGN) uint8_t arena[EP_PACKAGE_ARENA_BYTES];
static _Alignas(EP_ALIGN) uint8_t io_pool[EP_PACKAGE_IO_BYTES + EP_ALIGN * (N_IN + N_OUT)];
static EP_PACKAGE_CTX ctx;

static int fail(int code, const char* what, const char* detail) {
  fprintf(stderr, "error: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  return code;
}

/* The file-name rule of edgepack/deploy/io.py output_file: per UTF-8 byte, at most 64 bytes. */
#define FILE_NAME_MAX 64
static void file_safe(char* out, size_t n, const char* name) {
  size_t i = 0;
  for (; name[i] && i + 1 < n && i < FILE_NAME_MAX; ++i) {
    char c = name[i];
    out[i] = ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.') ? c : '_';
  }
  out[i] = '\0';
}

int main(int argc, char** argv) {
  const ep_package_t* pkg = &EP_PACKAGE;
  ep_options_t opts = {0};
  int a = 1;
  if (a + 1 < argc && strcmp(argv[a], "--threads") == 0) {
    opts.num_threads = atoi(argv[a + 1]);
    a += 2;
  }
  if (argc - a < 1) return fail(2, "usage", "run [--threads N] OUT_DIR INPUT.npy ...");
  const char* out_dir = argv[a++];
  int n_in = argc - a;
  if (n_in != pkg->num_inputs) {
    fprintf(stderr, "error: %s takes %d input(s), got %d\n", pkg->name, pkg->num_inputs, n_in);
    return 2;
  }
  ep_buffer_t in[N_IN], out[N_OUT];
  int64_t shapes[N_IN][EP_NPY_MAX_RANK];
  const int64_t* shape_ptrs[N_IN];
  int ranks[N_IN];
  size_t used = 0;
  for (int i = 0; i < n_in; ++i) {
    const ep_io_desc_t* io = &pkg->inputs[i];
    FILE* f = fopen(argv[a + i], "rb");
    if (!f) return fail(2, "cannot open input", argv[a + i]);
    ep_npy_info_t info;
    const char* err = ep_npy_read_header(f, &info);
    if (err) {
      fclose(f);
      return fail(2, err, argv[a + i]);
    }
    if (strcmp(info.dtype, io->dtype) != 0) {
      fclose(f);
      fprintf(stderr, "error: input %d '%s' must be %s, %s is %s\n", i, io->name, io->dtype, argv[a + i], info.dtype);
      return 2;
    }
    if (used + info.bytes > sizeof io_pool) {
      fclose(f);
      return fail(3, "input larger than the declared dim ranges allow", argv[a + i]);
    }
    in[i].data = io_pool + used;
    in[i].bytes = info.bytes;
    used += (info.bytes + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN;
    size_t got = fread(in[i].data, 1, info.bytes, f);
    fclose(f);
    if (got != info.bytes) return fail(2, "truncated .npy data", argv[a + i]);
    memcpy(shapes[i], info.shape, sizeof info.shape);
    shape_ptrs[i] = shapes[i];
    ranks[i] = info.rank;
  }
  int64_t dims[N_DIMS];
  ep_msg_t msg;
  ep_status_t st;
  if (ep_dims_from_shapes(pkg, shape_ptrs, ranks, dims, &msg) != EP_OK) return fail(3, msg.text, NULL);

  int64_t out_shape[N_OUT][EP_NPY_MAX_RANK];
  for (int i = 0; i < pkg->num_outputs; ++i) {
    const ep_io_desc_t* io = &pkg->outputs[i];
    if ((st = pkg->output_shape(dims, i, out_shape[i])) != EP_OK) return fail(4, "output_shape", ep_status_str(st));
    size_t bytes = (size_t)io->itemsize;
    for (int k = 0; k < io->rank; ++k) bytes *= (size_t)out_shape[i][k];
    if (used + bytes > sizeof io_pool) return fail(4, "internal: output pool too small", NULL);
    out[i].data = io_pool + used;
    out[i].bytes = bytes;
    used += (bytes + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN;
  }

  st = pkg->init(&ctx, arena, sizeof arena, &opts);
  if (st != EP_OK) return fail(4, "init failed", pkg->message(&ctx));
  st = pkg->run(&ctx, in, out, dims);
  if (st != EP_OK) return fail(st == EP_ERR_SHAPE ? 3 : 4, ep_status_str(st), pkg->message(&ctx));

  for (int i = 0; i < pkg->num_outputs; ++i) {
    const ep_io_desc_t* io = &pkg->outputs[i];
    char safe[FILE_NAME_MAX + 1], path[4096];
    file_safe(safe, sizeof safe, io->name);
    snprintf(path, sizeof path, "%s/%d_%s.npy", out_dir, i, safe);
    if (ep_npy_write(path, io->dtype, out_shape[i], io->rank, out[i].data, out[i].bytes) != 0)
      return fail(2, "cannot write output", path);
  }
  pkg->deinit(&ctx);
  return 0;
}
