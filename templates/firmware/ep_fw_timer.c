/* Time: SysTick on the core clock, extended to 64 bits by its wrap interrupt (every Cortex-M has it). With
 * EP_FW_TIMER_DWT the cycle counter is enabled too; it is not used for time because QEMU reads it as 0. */
#include "ep_fw.h"

#define SYST_CSR EP_FW_REG(0xE000E010)
#define SYST_RVR EP_FW_REG(0xE000E014)
#define SYST_CVR EP_FW_REG(0xE000E018)
#define SCB_ICSR EP_FW_REG(0xE000ED04)
#define RELOAD 0xFFFFFFu

static volatile uint32_t ep_fw_wraps;

void SysTick_Handler(void) { ep_fw_wraps++; }

void ep_fw_timer_init(void) {
  SYST_RVR = RELOAD;
  SYST_CVR = 0;
  SYST_CSR = 0x7; /* core clock, interrupt, enable */
#if defined(EP_FW_TIMER_DWT)
  EP_FW_REG(0xE000EDFC) |= 1u << 24; /* DEMCR.TRCENA */
  EP_FW_REG(0xE0001004) = 0;         /* DWT_CYCCNT */
  EP_FW_REG(0xE0001000) |= 1u;       /* DWT_CTRL.CYCCNTENA */
#endif
}

uint64_t ep_fw_ticks(void) {
  uint32_t wraps, v, pending;
  do {
    wraps = ep_fw_wraps;
    v = SYST_CVR;
    pending = SCB_ICSR & (1u << 26); /* PENDSTSET: wrapped, handler not run yet */
  } while (wraps != ep_fw_wraps);
  if (pending && v > RELOAD / 2) wraps++;
  return (uint64_t)wraps * (RELOAD + 1u) + (RELOAD - v);
}

uint64_t ep_board_time_ns(void) {
  uint64_t t = ep_fw_ticks();
  return t / EP_FW_CLOCK_HZ * 1000000000u + t % EP_FW_CLOCK_HZ * 1000000000u / EP_FW_CLOCK_HZ;
}
