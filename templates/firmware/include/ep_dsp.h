/* int8 dot products on the Armv7E-M DSP extension, for TVM-generated C kernels (edgepack/schedule/int8_dot.py:
 * the "dsp" tensor intrinsic calls these). Static inline, so gcc keeps the caller's accumulators in registers.
 *
 * ep_dsp_dot_<L>(acc, acc_stride, x, x_stride, w, w_stride, k): acc[i * acc_stride] += sum over j < k of
 * x[j * x_stride] * w[i * w_stride + j], for i < L: a pointwise kernel's reduction for one pixel (its k input
 * channels any stride apart, k a multiple of 4) and L output channels, whose weights are rows of the model's
 * [F, C] matrix, read 4 at a time as one (possibly unaligned) word.
 * SXTB16 sign-extends bytes 0 and 2 of a word into two int16 halves; SMLAD multiplies two pairs of halves and
 * adds both products to an int32: so a word of weights is 2 SXTB16 + 2 SMLAD against the activations packed
 * once as (x0, x2) and (x1, x3). Exact: every product and sum fits int32 for int8 operands.
 *
 * The signatures are the ones TVM declares for an extern call (void* and int64_t arguments, an int32_t result):
 * its later declaration then refers to these definitions. */
#ifndef EP_DSP_H_
#define EP_DSP_H_

#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#include <stdint.h>
#include <string.h>

/* (int16) a | (int16) b << 16 */
static inline uint32_t ep_dsp_pack_halves(int8_t a, int8_t b) {
  return (uint32_t)(uint16_t)a | ((uint32_t)(uint16_t)b << 16);
}

/* bytes 1 and 3 of a word, sign-extended into two int16 halves: one instruction (gcc's __sxtb16 of a shifted
 * word is two) */
static inline uint32_t ep_dsp_odd_bytes(uint32_t word) {
  uint32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(word));
  return r;
}

#define EP_DSP_DOT(lanes)                                                                                   \
  static inline int32_t ep_dsp_dot_##lanes(void* acc, int64_t acc_stride, void* x, int64_t x_stride, void* w, \
                                           int64_t w_stride, int64_t k) {                                    \
    int32_t* out = (int32_t*)acc;                                                                           \
    const int8_t* xs = (const int8_t*)x;                                                                    \
    const int8_t* ws = (const int8_t*)w;                                                                    \
    int32_t sum[lanes];                                                                                     \
    _Pragma("GCC unroll 8") for (int i = 0; i < lanes; ++i) sum[i] = out[i * acc_stride];                   \
    for (int64_t j = 0; j < k; j += 4, xs += 4 * x_stride) {                                                \
      uint32_t x02 = ep_dsp_pack_halves(xs[0], xs[2 * x_stride]);                                           \
      uint32_t x13 = ep_dsp_pack_halves(xs[x_stride], xs[3 * x_stride]);                                    \
      _Pragma("GCC unroll 8") for (int i = 0; i < lanes; ++i) {                                             \
        uint32_t word;                                                                                      \
        __asm__ volatile("" ::: "memory"); /* one weight word live at a time: no spilled sums */           \
        memcpy(&word, ws + i * w_stride + j, sizeof word);                                                  \
        sum[i] = __smlad((int16x2_t)__sxtb16((int8x4_t)word), (int16x2_t)x02, sum[i]);                      \
        sum[i] = __smlad((int16x2_t)ep_dsp_odd_bytes(word), (int16x2_t)x13, sum[i]);                        \
      }                                                                                                     \
    }                                                                                                       \
    _Pragma("GCC unroll 8") for (int i = 0; i < lanes; ++i) out[i * acc_stride] = sum[i];                   \
    return 0;                                                                                               \
  }
EP_DSP_DOT(4)
EP_DSP_DOT(8)
#undef EP_DSP_DOT
#endif /* __ARM_FEATURE_DSP */

#endif /* EP_DSP_H_ */
