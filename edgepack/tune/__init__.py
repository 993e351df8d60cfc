"""Shape-generic tuning (docs/tuning.md): micro-kernels tuned once for a whole range of shapes.

tuner.py          tune a model: split the trial budget, run the joint searches, verify, record the choices
tasks.py          the model's tunable kernels (dense rows, conv batch) as TuneTasks
space.py          the micro-kernel spaces, their analytic adaptation to shapes, cost-model features
samples.py        shape samples with weights (--samples)
search.py         the joint search of one task over all its samples
cost_model.py     the shared XGBoost cost model f(k) x a(S, k)
cover.py          greedy weighted set cover of kernels over sampled shapes
dispatch_tree.py  the table + decision-tree shape dispatcher, in Python and as C
trial.py          a configuration as a measurable kernel on one shape
measure.py        the Measurer protocol and MeasureInput/MeasureResult, shared by the two measurers:
rpc_measurer.py   RPCMeasurer: on-device timing over TVM RPC (Linux boards, this machine)
mcu_trials.py     McuMeasurer: on-device timing on a microcontroller (a firmware image per batch)
tracker.py        a client of TVM's RPC tracker (its JSON protocol, no `import tvm`)
farm.py           LocalRPC: a tracker and RPC servers on loopback, process groups, guardian, watchdog
export.py         a kernel built for a board and linked on the host into a shared object
db.py             the tuning database (SQLite)
apply.py          a tuning database applied to a build (tuned schedules and dispatchers)
"""
