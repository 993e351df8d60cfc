/* The package server: the device side of the edgepack serial protocol's commands (edgepack/mcu/protocol.py
 * is the host side; framing in ep_fw_proto.c). All integers LE.
 *   INFO       ()                                 -> text lines: board, package, id, dims, inputs, outputs
 *   SET_INPUT  (u8 index, u8[3], u32 offset, data) -> ()
 *   RUN        (i64 dims[n])                      -> (u64 ticks, u32 output bytes[m])
 *   GET_OUTPUT (u8 index, u8[3], u32 offset, u32 len) -> data
 *   BENCH      (i64 dims[n], u32 warmup, u32 repeat) -> (u64 ticks[repeat])
 * An error reply has a nonzero status and a one-line message; the device then waits for the next frame. */
#include <string.h>

#include "ep_fw.h"
#include "ep_package.h"

enum { CMD_INFO = 1, CMD_SET_INPUT = 2, CMD_RUN = 3, CMD_GET_OUTPUT = 4, CMD_BENCH = 5 };
#define MAX_IO 16
#define MAX_DIMS 8
_Static_assert(EP_PACKAGE_NUM_INPUTS + EP_PACKAGE_NUM_OUTPUTS <= MAX_IO && EP_PACKAGE_NUM_DIMS <= MAX_DIMS,
               "the firmware serves up to MAX_IO inputs+outputs and MAX_DIMS dims");

static const ep_package_t* const pkg = &EP_PACKAGE;
static _Alignas(EP_ALIGN) uint8_t arena[EP_PACKAGE_ARENA_BYTES];
static _Alignas(EP_ALIGN) uint8_t io[EP_PACKAGE_IO_BYTES];
static EP_PACKAGE_CTX ctx;
static ep_buffer_t in_buf[MAX_IO], out_buf[MAX_IO];
static size_t out_bytes[MAX_IO]; /* at the last successful run's dims; 0: nothing to read */
static ep_msg_t text;

/* --- package I/O ----------------------------------------------------------------------------------- */
static size_t shape_bytes(const ep_io_desc_t* d, const int64_t* shape) {
  size_t n = (size_t)d->itemsize;
  for (int a = 0; a < d->rank; ++a) n *= (size_t)shape[a];
  return n;
}

static size_t input_bytes(int i, const int64_t* dims) {
  const ep_io_desc_t* d = &pkg->inputs[i];
  int64_t shape[EP_PACKAGE_MAX_IO_RANK];
  for (int a = 0; a < d->rank; ++a) shape[a] = d->shape[a] >= 0 ? d->shape[a] : dims[-d->shape[a] - 1];
  return shape_bytes(d, shape);
}

/* An output's extents may be expressions of dims (batch*seq): the package computes them. 0 if the dims
 * are outside their ranges. */
static size_t output_bytes(int i, const int64_t* dims) {
  int64_t shape[EP_PACKAGE_MAX_IO_RANK];
  return pkg->output_shape(dims, i, shape) == EP_OK ? shape_bytes(&pkg->outputs[i], shape) : 0;
}

/* Every input and output gets its size at the dims' upper bounds, one after the other in `io`. */
static void layout_io(void) {
  int64_t hi[MAX_DIMS];
  for (int d = 0; d < pkg->num_dims; ++d) hi[d] = pkg->dims[d].hi;
  size_t off = 0;
  for (int i = 0; i < pkg->num_inputs + pkg->num_outputs; ++i) {
    int is_in = i < pkg->num_inputs;
    ep_buffer_t* b = is_in ? &in_buf[i] : &out_buf[i - pkg->num_inputs];
    b->data = io + off;
    b->bytes = is_in ? input_bytes(i, hi) : output_bytes(i - pkg->num_inputs, hi);
    off += (b->bytes + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN;
  }
}

/* Run once at dims (checked by the package); ticks of the run in *ticks. */
static ep_status_t run_once(const int64_t* dims, uint64_t* ticks) {
  uint64_t t0 = ep_fw_ticks();
  ep_status_t st = pkg->run(&ctx, in_buf, out_buf, dims);
  *ticks = ep_fw_ticks() - t0;
  return st;
}

static void reply_run_error(uint8_t cmd, ep_status_t st) {
  ep_fw_send_error(cmd, st == EP_ERR_SHAPE ? EP_FW_SHAPE : EP_FW_RUN_FAILED, pkg->message(&ctx), "");
}

/* --- commands -------------------------------------------------------------------------------------- */
static void append_line(const char* a, const char* b) {
  ep_msg_append(&text, a);
  ep_msg_append(&text, b);
}

static void cmd_info(uint8_t* out, size_t* n) {
  static const char* const kind[2] = {"input ", "output "};
  size_t len = 0;
  /* Built in pieces through the 160-byte message buffer (no printf), each piece appended to out. */
#define EMIT()                                        \
  do {                                                \
    size_t k = strlen(text.text);                     \
    if (len + k <= EP_FW_MAX_PAYLOAD) {               \
      memcpy(out + len, text.text, k);                \
      len += k;                                       \
    }                                                 \
    text.text[0] = '\0';                              \
  } while (0)
  text.text[0] = '\0';
  append_line("edgepack-fw 1\nboard " EP_FW_BOARD "\npackage ", pkg->name);
  append_line("\nid " EP_FW_PACKAGE_ID "\nclock_hz ", "");
  ep_msg_append_i64(&text, EP_FW_CLOCK_HZ);
  EMIT();
  append_line("\nmax_payload ", "");
  ep_msg_append_i64(&text, EP_FW_MAX_PAYLOAD);
  append_line("\narena ", "");
  ep_msg_append_i64(&text, (int64_t)pkg->arena_bytes);
  append_line("\nio ", "");
  ep_msg_append_i64(&text, (int64_t)pkg->io_bytes);
  EMIT();
  for (int d = 0; d < pkg->num_dims; ++d) {
    append_line("\ndim ", pkg->dims[d].name);
    append_line(" ", "");
    ep_msg_append_i64(&text, pkg->dims[d].lo);
    append_line(" ", "");
    ep_msg_append_i64(&text, pkg->dims[d].hi);
    EMIT();
  }
  for (int i = 0; i < pkg->num_inputs + pkg->num_outputs; ++i) {
    int is_in = i < pkg->num_inputs;
    const ep_io_desc_t* d = is_in ? &pkg->inputs[i] : &pkg->outputs[i - pkg->num_inputs];
    append_line("\n", kind[!is_in]);
    append_line(d->name, " ");
    append_line(d->dtype, "");
    EMIT();
  }
  append_line("\n", "");
  EMIT();
#undef EMIT
  *n = len;
}

static void dims_arg(const uint8_t* p, int64_t* dims) {
  for (int d = 0; d < pkg->num_dims; ++d) dims[d] = (int64_t)ep_fw_get_u64(p + 8 * d);
}

static void cmd_set_input(uint8_t cmd, const uint8_t* p, size_t n, uint8_t* out) {
  if (n < 8 || p[0] >= pkg->num_inputs) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "set_input: bad length or input index", "");
  } else if ((size_t)ep_fw_get_u32(p + 4) + (n - 8) > in_buf[p[0]].bytes) {
    ep_fw_send_error(cmd, EP_FW_OVERSIZE, "set_input: data beyond the input's size at the dims' upper bounds", "");
  } else {
    memcpy((uint8_t*)in_buf[p[0]].data + ep_fw_get_u32(p + 4), p + 8, n - 8);
    ep_fw_send(cmd, EP_FW_OK, out, 0);
  }
}

static void cmd_run(uint8_t cmd, const uint8_t* p, size_t n, uint8_t* out) {
  int64_t dims[MAX_DIMS];
  uint64_t ticks;
  ep_status_t st;
  if (n != 8u * (size_t)pkg->num_dims) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "run: expected one i64 per dim", "");
    return;
  }
  dims_arg(p, dims);
  memset(out_bytes, 0, sizeof out_bytes);
  if ((st = run_once(dims, &ticks)) != EP_OK) {
    reply_run_error(cmd, st);
    return;
  }
  ep_fw_put_u64(out, ticks);
  for (int i = 0; i < pkg->num_outputs; ++i) {
    out_bytes[i] = output_bytes(i, dims);
    ep_fw_put_u32(out + 8 + 4 * i, (uint32_t)out_bytes[i]);
  }
  ep_fw_send(cmd, EP_FW_OK, out, 8 + 4 * (size_t)pkg->num_outputs);
}

static void cmd_get_output(uint8_t cmd, const uint8_t* p, size_t n, uint8_t* out) {
  if (n != 12 || p[0] >= pkg->num_outputs) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "get_output: bad length or output index", "");
    return;
  }
  uint8_t k = p[0];
  uint32_t off = ep_fw_get_u32(p + 4), len = ep_fw_get_u32(p + 8);
  if (!out_bytes[k]) {
    ep_fw_send_error(cmd, EP_FW_NO_OUTPUT, "get_output: no successful run yet", "");
  } else if (len > EP_FW_MAX_PAYLOAD || (size_t)off + len > out_bytes[k]) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "get_output: range beyond the output or the frame size", "");
  } else {
    memcpy(out, (uint8_t*)out_buf[k].data + off, len);
    ep_fw_send(cmd, EP_FW_OK, out, len);
  }
}

static void cmd_bench(uint8_t cmd, const uint8_t* p, size_t n, uint8_t* out) {
  int64_t dims[MAX_DIMS];
  uint64_t ticks;
  ep_status_t st;
  size_t nd = 8u * (size_t)pkg->num_dims;
  if (n != nd + 8) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "bench: expected dims, warmup, repeat", "");
    return;
  }
  dims_arg(p, dims);
  uint32_t warmup = ep_fw_get_u32(p + nd), repeat = ep_fw_get_u32(p + nd + 4);
  if (repeat < 1 || repeat > EP_FW_MAX_PAYLOAD / 8) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "bench: repeat must be 1..max_payload/8", "");
    return;
  }
  memset(out_bytes, 0, sizeof out_bytes);
  for (uint32_t i = 0; i < warmup + repeat; ++i) {
    if ((st = run_once(dims, &ticks)) != EP_OK) {
      reply_run_error(cmd, st);
      return;
    }
    if (i >= warmup) ep_fw_put_u64(out + 8 * (i - warmup), ticks); /* the request is read: reuse its bytes */
  }
  ep_fw_send(cmd, EP_FW_OK, out, 8 * (size_t)repeat);
}

static void handle(uint8_t cmd, uint8_t* p, size_t n, uint8_t* out) {
  size_t len;
  switch (cmd) {
    case CMD_INFO:
      cmd_info(out, &len);
      ep_fw_send(cmd, EP_FW_OK, out, len);
      break;
    case CMD_SET_INPUT: cmd_set_input(cmd, p, n, out); break;
    case CMD_RUN: cmd_run(cmd, p, n, out); break;
    case CMD_GET_OUTPUT: cmd_get_output(cmd, p, n, out); break;
    case CMD_BENCH: cmd_bench(cmd, p, n, out); break;
    default: ep_fw_send_error(cmd, EP_FW_UNKNOWN_CMD, "unknown command", "");
  }
}

int main(void) {
  ep_fw_timer_init();
  ep_fw_uart_init();
  layout_io();
  ep_options_t opts = {1};
  pkg->init(&ctx, arena, sizeof arena, &opts); /* cannot fail: the arena is sized by the package; if it
                                                  did, every run answers with the package's message */
  ep_fw_serve(handle);
}
