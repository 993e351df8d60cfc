/* The serial protocol's framing, shared by every firmware image (ep_fw_main.c: the package server;
 * ep_fw_trials.c: the tuner's trial images): CRC, frames in and out, error replies for broken frames.
 * Commands are the handler's.
 *
 * Frame, both ways: 0xEB, cmd, status, len (u16 LE), payload[len], crc32 (u32 LE, zlib's CRC-32 of
 * cmd..payload). Requests carry status 0; every request gets exactly one reply with the request's cmd. */
#include <string.h>

#include "ep_fw.h"

enum { SYNC = 0xEB, HEADER = 4, CRC = 4 };

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

uint32_t ep_fw_get_u32(const uint8_t* p) {
  return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
uint64_t ep_fw_get_u64(const uint8_t* p) { return ep_fw_get_u32(p) | (uint64_t)ep_fw_get_u32(p + 4) << 32; }
void ep_fw_put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}
void ep_fw_put_u64(uint8_t* p, uint64_t v) {
  ep_fw_put_u32(p, (uint32_t)v);
  ep_fw_put_u32(p + 4, (uint32_t)(v >> 32));
}

/* --- framing ------------------------------------------------------------------------------------------- */
void ep_fw_send(uint8_t cmd, uint8_t status, const uint8_t* payload, size_t n) {
  uint8_t head[HEADER] = {cmd, status, (uint8_t)n, (uint8_t)(n >> 8)}, tail[CRC];
  ep_fw_put_u32(tail, ~crc_update(crc_update(0xFFFFFFFFu, head, HEADER), payload, n));
  ep_fw_uart_put(SYNC);
  for (int i = 0; i < HEADER; ++i) ep_fw_uart_put(head[i]);
  for (size_t i = 0; i < n; ++i) ep_fw_uart_put(payload[i]);
  for (int i = 0; i < CRC; ++i) ep_fw_uart_put(tail[i]);
}

void ep_fw_send_error(uint8_t cmd, uint8_t status, const char* a, const char* b) {
  ep_msg_set(&text, a, b, "");
  ep_fw_send(cmd, status, (const uint8_t*)text.text, strlen(text.text));
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
    } else {
      ep_fw_uart_idle();
    }
  }
  return 1;
}

void ep_fw_serve(ep_fw_handler_t handle) {
  for (;;) {
    int c = ep_fw_uart_get();
    if (c < 0) ep_fw_uart_idle();
    if (c != SYNC) continue; /* resynchronise on the next frame start */
    if (!read_bytes(frame, HEADER)) {
      ep_fw_send_error(0, EP_FW_TRUNCATED, "truncated frame header", "");
      continue;
    }
    uint8_t cmd = frame[0];
    size_t n = frame[2] | (size_t)frame[3] << 8;
    if (n > EP_FW_MAX_PAYLOAD) {
      int whole = read_bytes(NULL, n + CRC);
      ep_fw_send_error(cmd, whole ? EP_FW_TOO_LONG : EP_FW_TRUNCATED,
                       whole ? "frame longer than max_payload" : "truncated frame", "");
      continue;
    }
    if (!read_bytes(frame + HEADER, n + CRC)) {
      ep_fw_send_error(cmd, EP_FW_TRUNCATED, "truncated frame", "");
      continue;
    }
    if (~crc_update(0xFFFFFFFFu, frame, HEADER + n) != ep_fw_get_u32(frame + HEADER + n)) {
      ep_fw_send_error(cmd, EP_FW_BAD_CRC, "bad CRC", "");
      continue;
    }
    handle(cmd, frame + HEADER, n, frame + HEADER);
  }
}

