"""A board's default Schedules, from its facts alone (vector width, cores, target): what a package gets
without tuning."""

from __future__ import annotations

from ..board import Board


def schedules_for(board: Board):
    from .variants import Schedules

    if board.target.kind == "c":  # no vectorize (docs/tvm-facts.md#c-target-cannot-vectorize), no thread pool here
        import tvm

        # DLight's CPU rules only act under an LLVM CPU target; their vectorized or parallel results are
        # refused for C (generic_schedule), so a plain single-core one is enough
        rules = tvm.target.Target({"kind": "llvm", "num-cores": 1})
        return Schedules(vector_lanes=board.vector_lanes_f32, vector_registers=board.vector_registers, cores=1,
                         target=rules, vectorize=False, parallel=False, pack=False,
                         int8_dot=board.int8_dot)
    return Schedules(vector_lanes=board.vector_lanes_f32, vector_registers=board.vector_registers,
                     cores=board.target.cores, target=board.tvm_target(), int8_dot=board.int8_dot)
