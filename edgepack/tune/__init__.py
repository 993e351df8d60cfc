"""Shape-generic tuning (DIETCODE.md): the tuning database (db.py), on-device measurement through TVM RPC
(rpc.py), the dense micro-kernel space and its adaptation to shapes (space.py), the XGBoost cost model with adaptation (cost_model.py), greedy weighted set cover of kernels over sampled shapes (cover.py) and the table + decision-tree
shape dispatcher emitted as C (dispatch_tree.py)."""
