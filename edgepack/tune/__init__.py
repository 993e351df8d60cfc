"""Shape-generic tuning (DIETCODE.md).

db.py: the tuning database (SQLite). rpc.py: on-device measurement through TVM RPC. space.py: the dense
micro-kernel space and its analytic adaptation to shapes. cost_model.py: the XGBoost cost model.
trial.py: a configuration as a measurable kernel. cover.py: greedy weighted set cover of kernels over
sampled shapes. dispatch_tree.py: the table + decision-tree shape dispatcher emitted as C.
"""
