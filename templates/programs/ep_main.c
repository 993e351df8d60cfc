/* The package's device program: `ep run ...` and `ep bench ...` (usage in ep_program.h). One binary for both,
 * so that what goes to a board holds the weights once. */
#include <stdio.h>
#include <string.h>

#include "ep_program.h"

_Alignas(EP_ALIGN) uint8_t ep_program_arena[EP_PACKAGE_ARENA_BYTES];
_Alignas(EP_ALIGN) uint8_t ep_program_io_pool[EP_PROGRAM_IO_POOL_BYTES];
EP_PACKAGE_CTX ep_program_ctx;

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "run") == 0) return ep_program_run(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "bench") == 0) return ep_program_bench(argc - 1, argv + 1);
  fprintf(stderr, "error: usage: ep run OUT_DIR INPUT.npy ... | ep bench [options] DIM ...\n");
  return 2;
}
