/* Reset and vector table for any Cortex-M (ARMv7-M): copy .data, zero .bss, enable the FPU if built for
 * one, run main. Symbols come from the generated linker script (firmware.ld). */
#include <stdint.h>
#include <string.h>

#include "ep_fw_config.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _estack[];
int main(void);
void SysTick_Handler(void);

void Reset_Handler(void) {
  memcpy(_sdata, _sidata, (size_t)((uintptr_t)_edata - (uintptr_t)_sdata));
  memset(_sbss, 0, (size_t)((uintptr_t)_ebss - (uintptr_t)_sbss));
#if defined(__ARM_FP)
  *(volatile uint32_t*)0xE000ED88 |= 0xFu << 20; /* CPACR: CP10, CP11 full access */
  __asm volatile("dsb\n isb");
#endif
  main();
  for (;;) {
  }
}

/* Faults stop the board where a debugger can see it; the host reports a device that does not answer. */
void Default_Handler(void) {
  for (;;) {
  }
}

typedef void (*ep_vector_t)(void);

void ep_fw_uart_irq(void);

/* The 16 system vectors, then external interrupts: only the UART's receive interrupt is ever enabled. */
__attribute__((section(".isr_vector"), used)) const ep_vector_t ep_fw_vectors[48] = {
    (ep_vector_t)(uintptr_t)_estack, Reset_Handler,   Default_Handler, Default_Handler, Default_Handler,
    Default_Handler,                 Default_Handler, 0,               0,               0,
    0,                               Default_Handler, Default_Handler, 0,               Default_Handler,
    SysTick_Handler,
#if defined(EP_FW_UART_RX_IRQ)
    [16 + EP_FW_UART_RX_IRQ] = ep_fw_uart_irq,
#endif
};
