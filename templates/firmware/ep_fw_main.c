/* The device side of the edgepack serial protocol (edgepack/mcu/protocol.py is the host side).
 *
 * Frame, both ways: 0xEB, cmd, status, len (u16 LE), payload[len], crc32 (u32 LE, zlib's CRC-32 of cmd..payload).
 * Requests carry status 0; every request gets exactly one reply with the request's cmd. All integers LE.
 *   INFO       ()                                 -> text lines: board, package, id, dims, inputs, outputs
 *   SET_INPUT  (u8 index, u8[3], u32 offset, data) -> ()
 *   RUN        (i64 dims[n])                      -> (u64 ticks, u32 output bytes[m])
 *   GET_OUTPUT (u8 index, u8[3], u32 offset, u32 len) -> data
 *   BENCH      (i64 dims[n], u32 warmup, u32 repeat) -> (u64 ticks[repeat])
 * An error reply has a nonzero status and a one-line message; the device then waits for the next frame. */
#include <string.h>

#include "ep_fw.h"
#include "ep_package.h"

enum { SYNC = 0xEB, HEADER = 4, CRC = 4 };
enum { CMD_INFO = 1, CMD_SET_INPUT = 2, CMD_RUN = 3, CMD_GET_OUTPUT = 4, CMD_BENCH = 5 };
enum {
  ST_OK = 0, ST_BAD_CRC = 1, ST_TRUNCATED = 2, ST_UNKNOWN_CMD = 3, ST_BAD_ARG = 4,
  ST_OVERSIZE = 5, ST_SHAPE = 6, ST_RUN_FAILED = 7, ST_NO_OUTPUT = 8, ST_TOO_LONG = 9,
};
#define MAX_IO 16
#define MAX_DIMS 8

static const ep_package_t* const pkg = &EP_PACKAGE;
static _Alignas(EP_ALIGN) uint8_t arena[EP_PACKAGE_ARENA_BYTES];
static _Alignas(EP_ALIGN) uint8_t io[EP_PACKAGE_IO_BYTES];
static EP_PACKAGE_CTX ctx;
static ep_buffer_t in_buf[MAX_IO], out_buf[MAX_IO];
static size_t out_bytes[MAX_IO]; /* at the last successful run's dims; 0: nothing to read */
static uint8_t frame[HEADER + EP_FW_MAX_PAYLOAD + CRC];
static ep_msg_t text;

/* --- CRC-32 (IEEE, reflected; equal to zlib.crc32), 16-entry table ----------------------------------- */
static uint32_t crc_update(uint32_t c, const uint8_t* p, size_t n) {
  static const uint32_t t[16] = {0x00000000, 0x1DB71064, 0x3B6E20C8, 0x26D930AC, 0x76DC4190, 0x6B6B51F4,
                                 0x4DB26158, 0x5005713C, 0xEDB88320, 0xF00F9344, 0xD6D6A3E8, 0xCB61B38C,
                                 0x9B64C2B0, 0x86D3D2D4, 0xA00AE278, 0xBDBDF21C};
  while (n--) {
    c ^= *p++;
    c = (c >> 4) ^ t[c & 15];
    c = (c >> 4) ^ t[c & 15];
  }
  return c;
}

static uint32_t get_u32(const uint8_t* p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get_u64(const uint8_t* p) { return get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t* p, uint64_t v) {
  put_u32(p, (uint32_t)v);
  put_u32(p + 4, (uint32_t)(v >> 32));
}

/* --- framing ------------------------------------------------------------------------------------------- */
static void send(uint8_t cmd, uint8_t status, const uint8_t* payload, size_t n) {
  uint8_t head[HEADER] = {cmd, status, (uint8_t)n, (uint8_t)(n >> 8)}, tail[CRC];
  put_u32(tail, ~crc_update(crc_update(0xFFFFFFFFu, head, HEADER), payload, n));
  ep_fw_uart_put(SYNC);
  for (int i = 0; i < HEADER; ++i) ep_fw_uart_put(head[i]);
  for (size_t i = 0; i < n; ++i) ep_fw_uart_put(payload[i]);
  for (int i = 0; i < CRC; ++i) ep_fw_uart_put(tail[i]);
}

static void send_error(uint8_t cmd, uint8_t status, const char* a, const char* b) {
  ep_msg_set(&text, a, b, "");
  send(cmd, status, (const uint8_t*)text.text, strlen(text.text));
}

/* Read n bytes; 0 if the line goes quiet for EP_FW_FRAME_TIMEOUT_MS first. NULL dst: read and drop. */
static int read_bytes(uint8_t* dst, size_t n) {
  const uint64_t quiet = (uint64_t)EP_FW_CLOCK_HZ / 1000u * EP_FW_FRAME_TIMEOUT_MS;
  uint64_t last = ep_fw_ticks();
  for (size_t i = 0; i < n;) {
    int c = ep_fw_uart_get();
    if (c >= 0) {
      if (dst) dst[i] = (uint8_t)c;
      ++i;
      last = ep_fw_ticks();
    } else if (ep_fw_ticks() - last > quiet) {
      return 0;
    }
  }
  return 1;
}

/* --- package I/O ----------------------------------------------------------------------------------- */
static size_t io_bytes(const ep_io_desc_t* d, const int64_t* dims) {
  size_t n = (size_t)d->itemsize;
  for (int a = 0; a < d->rank; ++a) n *= (size_t)(d->shape[a] >= 0 ? d->shape[a] : dims[-d->shape[a] - 1]);
  return n;
}

static void layout_io(void) {
  int64_t hi[MAX_DIMS];
  for (int d = 0; d < pkg->num_dims; ++d) hi[d] = pkg->dims[d].hi;
  size_t off = 0;
  for (int i = 0; i < pkg->num_inputs + pkg->num_outputs; ++i) {
    int is_in = i < pkg->num_inputs;
    const ep_io_desc_t* d = is_in ? &pkg->inputs[i] : &pkg->outputs[i - pkg->num_inputs];
    ep_buffer_t* b = is_in ? &in_buf[i] : &out_buf[i - pkg->num_inputs];
    b->data = io + off;
    b->bytes = io_bytes(d, hi);
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
  send_error(cmd, st == EP_ERR_SHAPE ? ST_SHAPE : ST_RUN_FAILED, pkg->message(&ctx), "");
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

static int dims_arg(const uint8_t* p, int64_t* dims) {
  for (int d = 0; d < pkg->num_dims; ++d) dims[d] = (int64_t)get_u64(p + 8 * d);
  return 8 * pkg->num_dims;
}

static void handle(uint8_t cmd, uint8_t* p, size_t n) {
  uint8_t* out = frame + HEADER; /* replies are built in place: the request is consumed first */
  int64_t dims[MAX_DIMS];
  size_t nd = 8u * (size_t)pkg->num_dims;
  uint64_t ticks;
  ep_status_t st;
  switch (cmd) {
    case CMD_INFO: {
      size_t len;
      cmd_info(out, &len);
      send(cmd, ST_OK, out, len);
      return;
    }
    case CMD_SET_INPUT: {
      if (n < 8 || p[0] >= pkg->num_inputs) { send_error(cmd, ST_BAD_ARG, "set_input: bad length or input index", ""); return; }
      uint32_t off = get_u32(p + 4);
      if ((size_t)off + (n - 8) > in_buf[p[0]].bytes)
        { send_error(cmd, ST_OVERSIZE, "set_input: data beyond the input's size at the upper bounds of ", "its dims"); return; }
      memcpy((uint8_t*)in_buf[p[0]].data + off, p + 8, n - 8);
      send(cmd, ST_OK, out, 0);
      return;
    }
    case CMD_RUN: {
      if (n != nd) { send_error(cmd, ST_BAD_ARG, "run: expected one i64 per dim", ""); return; }
      dims_arg(p, dims);
      memset(out_bytes, 0, sizeof out_bytes);
      if ((st = run_once(dims, &ticks)) != EP_OK) {
        reply_run_error(cmd, st);
        return;
      }
      put_u64(out, ticks);
      for (int i = 0; i < pkg->num_outputs; ++i) {
        out_bytes[i] = io_bytes(&pkg->outputs[i], dims);
        put_u32(out + 8 + 4 * i, (uint32_t)out_bytes[i]);
      }
      send(cmd, ST_OK, out, 8 + 4 * (size_t)pkg->num_outputs);
      return;
    }
    case CMD_GET_OUTPUT: {
      if (n != 12 || p[0] >= pkg->num_outputs) { send_error(cmd, ST_BAD_ARG, "get_output: bad length or output index", ""); return; }
      uint32_t off = get_u32(p + 4), len = get_u32(p + 8);
      if (!out_bytes[p[0]]) { send_error(cmd, ST_NO_OUTPUT, "get_output: no successful run yet", ""); return; }
      if (len > EP_FW_MAX_PAYLOAD || (size_t)off + len > out_bytes[p[0]])
        { send_error(cmd, ST_BAD_ARG, "get_output: range beyond the output or the frame size", ""); return; }
      memcpy(out, (uint8_t*)out_buf[p[0]].data + off, len);
      send(cmd, ST_OK, out, len);
      return;
    }
    case CMD_BENCH: {
      if (n != nd + 8) { send_error(cmd, ST_BAD_ARG, "bench: expected dims, warmup, repeat", ""); return; }
      dims_arg(p, dims);
      uint32_t warmup = get_u32(p + nd), repeat = get_u32(p + nd + 4);
      if (repeat < 1 || repeat > EP_FW_MAX_PAYLOAD / 8)
        { send_error(cmd, ST_BAD_ARG, "bench: repeat must be 1..max_payload/8", ""); return; }
      memset(out_bytes, 0, sizeof out_bytes);
      for (uint32_t i = 0; i < warmup + repeat; ++i) {
        if ((st = run_once(dims, &ticks)) != EP_OK) {
          reply_run_error(cmd, st);
          return;
        }
        if (i >= warmup) put_u64(out + 8 * (i - warmup), ticks);
      }
      send(cmd, ST_OK, out, 8 * (size_t)repeat);
      return;
    }
    default:
      send_error(cmd, ST_UNKNOWN_CMD, "unknown command", "");
  }
}

void ep_fw_serve(void) {
  for (;;) {
    int c = ep_fw_uart_get();
    if (c != SYNC) continue; /* resynchronise on the next frame start */
    if (!read_bytes(frame, HEADER)) {
      send_error(0, ST_TRUNCATED, "truncated frame header", "");
      continue;
    }
    uint8_t cmd = frame[0];
    size_t n = frame[2] | (size_t)frame[3] << 8;
    if (n > EP_FW_MAX_PAYLOAD) {
      int whole = read_bytes(NULL, n + CRC);
      send_error(cmd, whole ? ST_TOO_LONG : ST_TRUNCATED, whole ? "frame longer than max_payload" : "truncated frame", "");
      continue;
    }
    if (!read_bytes(frame + HEADER, n + CRC)) {
      send_error(cmd, ST_TRUNCATED, "truncated frame", "");
      continue;
    }
    if (~crc_update(0xFFFFFFFFu, frame, HEADER + n) != get_u32(frame + HEADER + n)) {
      send_error(cmd, ST_BAD_CRC, "bad CRC", "");
      continue;
    }
    handle(cmd, frame + HEADER, n);
  }
}

int main(void) {
  ep_fw_timer_init();
  ep_fw_uart_init();
  layout_io();
  ep_options_t opts = {1};
  pkg->init(&ctx, arena, sizeof arena, &opts); /* cannot fail: the arena is sized by the package; if it
                                                  did, every run answers with the package's message */
  ep_fw_serve();
}
