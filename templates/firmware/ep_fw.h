/* edgepack firmware: the board layer (UART, timer) and the serial protocol shared by every Cortex-M board.
 * Board specifics come from ep_fw_config.h, generated from the board file. */
#ifndef EP_FW_H_
#define EP_FW_H_

#include <stddef.h>
#include <stdint.h>

#include "ep_fw_config.h"
#include "ep_internal.h"

#define EP_FW_REG(addr) (*(volatile uint32_t*)(uintptr_t)(addr))

void ep_fw_uart_init(void);
void ep_fw_uart_put(uint8_t c);
int ep_fw_uart_get(void); /* a received byte, or -1 if none is waiting */
/* Sleep until a byte may have arrived or the timer ticks, where the board file names the UART's receive
 * interrupt ([uart] rx_irq): under QEMU -icount idle time then passes at real speed, and an idle stand-in
 * does not spin a host core. Elsewhere it returns at once (polling). */
void ep_fw_uart_idle(void);
void ep_fw_uart_irq(void);

void ep_fw_timer_init(void);
uint64_t ep_fw_ticks(void); /* core clock cycles since boot (EP_FW_CLOCK_HZ per second) */
uint64_t ep_board_time_ns(void);

/* Serial protocol framing (ep_fw_proto.c). Status codes of replies: */
enum {
  EP_FW_OK = 0, EP_FW_BAD_CRC = 1, EP_FW_TRUNCATED = 2, EP_FW_UNKNOWN_CMD = 3, EP_FW_BAD_ARG = 4,
  EP_FW_OVERSIZE = 5, EP_FW_SHAPE = 6, EP_FW_RUN_FAILED = 7, EP_FW_NO_OUTPUT = 8, EP_FW_TOO_LONG = 9,
};

/* A command handler: the request's payload (n bytes), and where to build the reply (EP_FW_MAX_PAYLOAD
 * bytes, the same memory: read the request first). It answers with exactly one ep_fw_send*. */
typedef void (*ep_fw_handler_t)(uint8_t cmd, uint8_t* payload, size_t n, uint8_t* reply);

void ep_fw_send(uint8_t cmd, uint8_t status, const uint8_t* payload, size_t n);
void ep_fw_send_error(uint8_t cmd, uint8_t status, const char* a, const char* b);
void ep_fw_serve(ep_fw_handler_t handle); /* the protocol loop; never returns */

uint32_t ep_fw_get_u32(const uint8_t* p);
uint64_t ep_fw_get_u64(const uint8_t* p);
void ep_fw_put_u32(uint8_t* p, uint32_t v);
void ep_fw_put_u64(uint8_t* p, uint64_t v);

#endif /* EP_FW_H_ */
