"""Kernel schedules: dense/matmul variants, conv2d, packed weights, and the generic rules for the rest."""

# The version of the schedule code: bump it when a change here or in tune/trial.py changes the kernel that a
# tuning config builds (another loop nest, another weight layout), so that tuning databases measure again
# instead of serving times of the old kernels. 2: dense weights packed in column panels.
SCHEDULE_VERSION = 2
