"""Where a benchmark's time goes: ``torch.profiler``'s self CPU time of the operators run by a
function, by operator group (the profile behind a ratio that misses its target)."""

from __future__ import annotations

from typing import Callable

# First group whose pattern is in an operator's name; anything else is "other".
GROUPS = {"matmul": ("aten::mm", "aten::addmm", "aten::bmm"),
          "attention": ("scaled_dot_product", "aten::_softmax"),
          "dropout": ("bernoulli", "dropout"), "gelu": ("gelu",), "layer_norm": ("layer_norm",),
          "loss": ("log_softmax", "nll_loss"), "adamw": ("adamw",), "clip_norm": ("linalg_vector_norm",)}


def op_profile(fn: Callable[[], object], steps: int) -> dict:
    """Run ``fn`` (``steps`` training steps) under the profiler.

    Returns:
        ``op_ms_per_step``: self CPU time of all operators a step (ms; the rest of the wall time
        is Python, data and framework code); ``shares``: each group's part of that time;
        ``top_ops``: the 8 largest operators' parts.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    ops = [(e.key, e.self_cpu_time_total) for e in prof.key_averages()]
    total = sum(t for _, t in ops)
    shares = dict.fromkeys([*GROUPS, "other"], 0.0)
    for name, t in ops:
        shares[next((g for g, patterns in GROUPS.items() if any(q in name for q in patterns)), "other")] += t / total
    return {"op_ms_per_step": round(total / 1e3 / steps, 2), "shares": {k: round(v, 3) for k, v in shares.items()},
            "top_ops": {name: round(t / total, 3) for name, t in sorted(ops, key=lambda o: -o[1])[:8]}}
