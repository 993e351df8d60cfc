/* The tuner's trial image: the table of candidate kernels the host generates (trials.c). */
#ifndef EP_FW_TRIALS_H_
#define EP_FW_TRIALS_H_

#include "ep_internal.h"

typedef struct {
  int64_t scalar; /* ndim 0: an int64 scalar argument with this value */
  uint8_t code, bits;
  int ndim;
  int64_t* shape;
  size_t bytes;
} ep_fw_arg_t;

typedef struct {
  ep_packed_fn_t fn;
  int nargs;
  const ep_fw_arg_t* args;
} ep_fw_trial_t;

#define EP_FW_TRIAL_MAX_ARGS 16

extern const ep_fw_trial_t ep_fw_trials[];
extern const int ep_fw_num_trials;

#endif /* EP_FW_TRIALS_H_ */
