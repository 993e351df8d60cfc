/* UART drivers, polled, 8N1. One is compiled in: EP_FW_UART_<KIND> from the board file's [uart] kind. */
#include "ep_fw.h"

#if defined(EP_FW_UART_CMSDK)
/* CMSDK APB UART (Arm MPS2): DATA, STATE (bit0 TX full, bit1 RX full), CTRL (bit0 TX en, bit1 RX en, bit3 RX
 * interrupt), INTCLEAR, BAUDDIV. */
#define UART_DATA EP_FW_REG(EP_FW_UART_BASE + 0x00)
#define UART_STATE EP_FW_REG(EP_FW_UART_BASE + 0x04)
#define UART_CTRL EP_FW_REG(EP_FW_UART_BASE + 0x08)
#define UART_INTCLEAR EP_FW_REG(EP_FW_UART_BASE + 0x0C)
#define UART_BAUDDIV EP_FW_REG(EP_FW_UART_BASE + 0x10)

static uint64_t last_rx; /* when the last byte came: a line busy within the last ms is polled, not slept on */

void ep_fw_uart_init(void) {
  uint32_t div = EP_FW_CLOCK_HZ / EP_FW_UART_BAUD;
  UART_BAUDDIV = div < 16 ? 16 : div; /* below 16 the UART (and QEMU's model) drops bytes */
#if defined(EP_FW_UART_RX_IRQ)
  UART_CTRL = 0x3 | 0x8;                           /* TX, RX, RX interrupt: wakes ep_fw_uart_idle */
  EP_FW_REG(0xE000E100) = 1u << EP_FW_UART_RX_IRQ; /* NVIC_ISER0 */
#else
  UART_CTRL = 0x3;
#endif
}
void ep_fw_uart_irq(void) { UART_INTCLEAR = 0x2; } /* the byte stays in DATA for ep_fw_uart_get */
void ep_fw_uart_idle(void) {
#if defined(EP_FW_UART_RX_IRQ)
  if (ep_fw_ticks() - last_rx < EP_FW_CLOCK_HZ / 1000u) return;
  __asm volatile("cpsid i" ::: "memory"); /* no byte may slip in between the check and the sleep */
  if (!(UART_STATE & 0x2)) __asm volatile("wfi");
  __asm volatile("cpsie i" ::: "memory");
#endif
}
void ep_fw_uart_put(uint8_t c) {
  while (UART_STATE & 0x1) {
  }
  UART_DATA = c;
}
int ep_fw_uart_get(void) {
  if (!(UART_STATE & 0x2)) return -1;
  last_rx = ep_fw_ticks();
  return (int)(UART_DATA & 0xff);
}

#elif defined(EP_FW_UART_STM32F4) || defined(EP_FW_UART_STM32F7)
/* STM32 USART, pins in alternate function EP_FW_UART_AF. F4 (USARTv1): SR/DR; F7 (USARTv2): ISR/RDR/TDR. */
#if defined(EP_FW_UART_STM32F4)
#define USART_STATUS EP_FW_REG(EP_FW_UART_BASE + 0x00)
#define USART_RX EP_FW_REG(EP_FW_UART_BASE + 0x04)
#define USART_TX EP_FW_REG(EP_FW_UART_BASE + 0x04)
#define USART_BRR EP_FW_REG(EP_FW_UART_BASE + 0x08)
#define USART_CR1 EP_FW_REG(EP_FW_UART_BASE + 0x0C)
#define USART_UE (1u << 13)
#else
#define USART_CR1 EP_FW_REG(EP_FW_UART_BASE + 0x00)
#define USART_BRR EP_FW_REG(EP_FW_UART_BASE + 0x0C)
#define USART_STATUS EP_FW_REG(EP_FW_UART_BASE + 0x1C)
#define USART_ICR EP_FW_REG(EP_FW_UART_BASE + 0x20)
#define USART_RX EP_FW_REG(EP_FW_UART_BASE + 0x24)
#define USART_TX EP_FW_REG(EP_FW_UART_BASE + 0x28)
#define USART_UE (1u << 0)
#endif
#define RCC_AHB1ENR EP_FW_REG(0x40023830)

static void gpio_af(uint32_t pin) {
  uint32_t gpio = EP_FW_UART_GPIO_BASE;
  EP_FW_REG(gpio + 0x00) = (EP_FW_REG(gpio + 0x00) & ~(3u << (2 * pin))) | (2u << (2 * pin)); /* MODER: AF */
  uint32_t afr = gpio + (pin < 8 ? 0x20 : 0x24), sh = 4 * (pin % 8);
  EP_FW_REG(afr) = (EP_FW_REG(afr) & ~(0xfu << sh)) | ((uint32_t)EP_FW_UART_AF << sh);
}

void ep_fw_uart_init(void) {
  RCC_AHB1ENR |= 1u << EP_FW_UART_GPIO_PORT;
  EP_FW_REG(EP_FW_UART_RCC_REG) |= 1u << EP_FW_UART_RCC_BIT;
  gpio_af(EP_FW_UART_TX_PIN);
  gpio_af(EP_FW_UART_RX_PIN);
  USART_BRR = (EP_FW_CLOCK_HZ + EP_FW_UART_BAUD / 2) / EP_FW_UART_BAUD;
  USART_CR1 = USART_UE | (1u << 3) | (1u << 2); /* enable, TX, RX */
}
void ep_fw_uart_put(uint8_t c) {
  while (!(USART_STATUS & (1u << 7))) {
  }
  USART_TX = c;
}
int ep_fw_uart_get(void) {
  uint32_t s = USART_STATUS;
#if defined(EP_FW_UART_STM32F7)
  if (s & (1u << 3)) USART_ICR = 1u << 3; /* clear an overrun so reception goes on */
#endif
  return (s & (1u << 5)) ? (int)(USART_RX & 0xff) : -1;
}

#elif defined(EP_FW_UART_NRF)
/* nRF52 UART (legacy, non-DMA) peripheral: tasks, events, PSEL, BAUDRATE. */
#define NRF(off) EP_FW_REG(EP_FW_UART_BASE + (off))

void ep_fw_uart_init(void) {
  NRF(0x50C) = EP_FW_UART_TX_PIN;
  NRF(0x514) = EP_FW_UART_RX_PIN;
  NRF(0x524) = EP_FW_UART_NRF_BAUD; /* BAUDRATE register value for the board's baud */
  NRF(0x500) = 4;                   /* ENABLE */
  NRF(0x000) = 1;                   /* STARTRX */
  NRF(0x008) = 1;                   /* STARTTX */
}
void ep_fw_uart_put(uint8_t c) {
  NRF(0x11C) = 0;
  NRF(0x51C) = c;
  while (!NRF(0x11C)) {
  }
}
int ep_fw_uart_get(void) {
  if (!NRF(0x108)) return -1;
  NRF(0x108) = 0;
  return (int)(NRF(0x518) & 0xff);
}

#else
#error "no UART driver: set [uart] kind in the board file to cmsdk, stm32f4, stm32f7 or nrf"
#endif

#if !defined(EP_FW_UART_CMSDK)
void ep_fw_uart_idle(void) {} /* polling: on a real board the line's timeouts are real time anyway */
void ep_fw_uart_irq(void) {}
#endif
