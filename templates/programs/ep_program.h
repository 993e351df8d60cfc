/* What the device program's commands share: the package's static memory (its arena and an I/O pool at the
 * upper bounds of its dims) and the array sizes it implies. One program, `ep`, holds the package once:
 *   ep run [--threads N] OUT_DIR INPUT0.npy [INPUT1.npy ...]
 *   ep bench [--threads N] [--warmup W] [--repeat R] [--min-time-ms M] [--profile] DIM0 [DIM1 ...]
 * Exit codes: 0 ok, 2 bad input (usage, file, dtype, count), 3 shape out of range, 4 run failed. */
#ifndef EP_PROGRAM_H_
#define EP_PROGRAM_H_

#include <stddef.h>
#include <stdint.h>

#include "ep_package.h" /* generated: EP_PACKAGE, EP_PACKAGE_CTX, EP_PACKAGE_ARENA_BYTES, ..._NUM_INPUTS, ... */

/* Array sizes from the package, checked when this is compiled (+ 1: C has no empty arrays). */
#define N_IN (EP_PACKAGE_NUM_INPUTS + 1)
#define N_OUT (EP_PACKAGE_NUM_OUTPUTS + 1)
#define N_DIMS (EP_PACKAGE_NUM_DIMS + 1)
#define EP_PROGRAM_IO_POOL_BYTES (EP_PACKAGE_IO_BYTES + EP_ALIGN * (N_IN + N_OUT))

extern uint8_t ep_program_arena[EP_PACKAGE_ARENA_BYTES];
extern uint8_t ep_program_io_pool[EP_PROGRAM_IO_POOL_BYTES];
extern EP_PACKAGE_CTX ep_program_ctx;

int ep_program_run(int argc, char** argv);   /* argv[0] is "run" */
int ep_program_bench(int argc, char** argv); /* argv[0] is "bench" */

#endif /* EP_PROGRAM_H_ */
