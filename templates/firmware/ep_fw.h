/* edgepack firmware: the board layer (UART, timer) and the serial protocol shared by every Cortex-M board.
 * Board specifics come from ep_fw_config.h, generated from the board file. */
#ifndef EP_FW_H_
#define EP_FW_H_

#include <stddef.h>
#include <stdint.h>

#include "ep_fw_config.h"

#define EP_FW_REG(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

void ep_fw_uart_init(void);
void ep_fw_uart_put(uint8_t c);
int ep_fw_uart_get(void); /* a received byte, or -1 if none is waiting */

void ep_fw_timer_init(void);
uint64_t ep_fw_ticks(void); /* core clock cycles since boot (EP_FW_CLOCK_HZ per second) */
uint64_t ep_board_time_ns(void);

void ep_fw_serve(void); /* the protocol loop; never returns */

#endif /* EP_FW_H_ */
