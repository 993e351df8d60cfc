/* Minimal .npy (format 1.0/2.0) reading and writing for the run and bench programs. */
#ifndef EP_NPY_H_
#define EP_NPY_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EP_NPY_MAX_RANK 8

typedef struct {
  char dtype[16]; /* numpy name: float32, int64, ... */
  int rank;
  int64_t shape[EP_NPY_MAX_RANK];
  size_t bytes;
} ep_npy_info_t;

/* Reads the header, leaving `f` at the data. Returns NULL on success or a message. */
const char* ep_npy_read_header(FILE* f, ep_npy_info_t* info);
int ep_npy_write(const char* path, const char* dtype, const int64_t* shape, int rank, const void* data, size_t bytes);

#endif /* EP_NPY_H_ */
