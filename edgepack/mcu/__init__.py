"""Microcontroller packages: the board's MCU settings, firmware sources and linker script, the memory
report, and the host side of the serial protocol (the device side is templates/firmware/ep_fw_main.c)."""
