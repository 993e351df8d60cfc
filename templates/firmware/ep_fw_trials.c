/* The tuner's trial image: a batch of candidate kernels in one firmware (one flash per batch, not per
 * candidate), each run on its own arguments in a static arena and timed with the board's clock.
 *   INFO  ()                                    -> text: board, id, trials, clock_hz, max_payload
 *   TRIAL (u32 index, u32 warmup, u32 repeat)   -> (u64 ticks[repeat])
 * Host side: edgepack/mcu/trials.py. Framing and error replies: ep_fw_proto.c. */
#include <string.h>

#include "ep_fw.h"
#include "ep_fw_trials.h"

enum { CMD_INFO = 1, CMD_TRIAL = 16 };

static _Alignas(EP_ALIGN) uint8_t arena[EP_FW_TRIAL_ARENA + EP_FW_TRIAL_WORKSPACE];
static ep_msg_t text;
static ep_rt_t rt; /* the trials' runtime state: one thread, workspace after the arguments */

/* Arguments of trial t in the arena, tensors filled with small pseudo-random values (no denormals). */
static void setup(const ep_fw_trial_t* t, DLTensor* dl, TVMFFIAny* a) {
  uint32_t seed = 12345u;
  size_t off = 0;
  for (int i = 0; i < t->nargs; ++i) {
    const ep_fw_arg_t* g = &t->args[i];
    if (g->ndim == 0) {
      a[i] = ep_arg_int(g->scalar);
      continue;
    }
    uint8_t* p = arena + off;
    ep_tensor_init(&dl[i], p, g->shape, g->ndim, g->code, g->bits);
    if (g->code == 2 && g->bits == 32) {
      for (size_t k = 0; k < g->bytes / 4; ++k) {
        seed = seed * 1664525u + 1013904223u;
        ((float*)p)[k] = (float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
      }
    } else {
      memset(p, 0, g->bytes);
    }
    a[i] = ep_arg_tensor(&dl[i]);
    off += (g->bytes + EP_ALIGN - 1) / EP_ALIGN * EP_ALIGN;
  }
}

static void trial(uint8_t cmd, const uint8_t* p, size_t n, uint8_t* out) {
  if (n != 12) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "trial: expected index, warmup, repeat", "");
    return;
  }
  uint32_t idx = ep_fw_get_u32(p), warmup = ep_fw_get_u32(p + 4), repeat = ep_fw_get_u32(p + 8);
  if (idx >= (uint32_t)ep_fw_num_trials || repeat < 1 || repeat > EP_FW_MAX_PAYLOAD / 8) {
    ep_fw_send_error(cmd, EP_FW_BAD_ARG, "trial: index out of range or repeat not in 1..max_payload/8", "");
    return;
  }
  const ep_fw_trial_t* t = &ep_fw_trials[idx];
  DLTensor dl[EP_FW_TRIAL_MAX_ARGS];
  TVMFFIAny a[EP_FW_TRIAL_MAX_ARGS];
  setup(t, dl, a);
  ep_rt_enter(&rt); /* no run to return to: the trials' state stays current */
  for (uint32_t i = 0; i < warmup + repeat; ++i) {
    uint64_t t0 = ep_fw_ticks();
    if (ep_call(t->fn, a, t->nargs) != EP_OK) {
      ep_rt_kernel_failed(&rt, &text, "trial");
      ep_fw_send_error(cmd, EP_FW_RUN_FAILED, text.text, "");
      return;
    }
    if (i >= warmup) ep_fw_put_u64(out + 8 * (i - warmup), ep_fw_ticks() - t0);
  }
  ep_fw_send(cmd, EP_FW_OK, out, 8 * (size_t)repeat);
}

static void handle(uint8_t cmd, uint8_t* p, size_t n, uint8_t* out) {
  if (cmd == CMD_TRIAL) {
    trial(cmd, p, n, out);
  } else if (cmd == CMD_INFO) {
    ep_msg_set(&text, "edgepack-trials 1\nboard " EP_FW_BOARD "\nid " EP_FW_PACKAGE_ID "\ntrials ", "", "");
    ep_msg_append_i64(&text, ep_fw_num_trials);
    ep_msg_append(&text, "\nclock_hz ");
    ep_msg_append_i64(&text, EP_FW_CLOCK_HZ);
    ep_msg_append(&text, "\nmax_payload ");
    ep_msg_append_i64(&text, EP_FW_MAX_PAYLOAD);
    ep_msg_append(&text, "\n");
    ep_fw_send(cmd, EP_FW_OK, (const uint8_t*)text.text, strlen(text.text));
  } else {
    ep_fw_send_error(cmd, EP_FW_UNKNOWN_CMD, "unknown command", "");
  }
}

int main(void) {
  ep_fw_timer_init();
  ep_fw_uart_init();
  ep_rt_init(&rt, arena + EP_FW_TRIAL_ARENA, EP_FW_TRIAL_WORKSPACE, 1, &text); /* one thread: cannot fail */
  ep_fw_serve(handle);
}
