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
rpc.py            on-device measurement through TVM RPC (tracker client, local farm, export, Measurer)
mcu_trials.py     on-device measurement on a microcontroller (a firmware image per batch)
db.py             the tuning database (SQLite)
apply.py          a tuning database applied to a build (tuned schedules and dispatchers)
"""
