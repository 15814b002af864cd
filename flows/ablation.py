"""Stage ``ablation@<model>``: attention-zone ablation of a span-extraction model
(Cui et al. 2022, iScience; :mod:`tasks.interpretability.ablation`).

The model is fine-tuned on ``ablation.task`` exactly as ``finetune`` does with its first
seed, then evaluated on ``ablation.split`` with each zone blocked in all layers at
once, in each layer alone, and (for ``ablation.per_head_zones``) in each head of each
layer alone. Scores are the official CMRC 2018 EM/F1 (percentages).
"""

import sys
import time

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.model_dir import load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import fit_seed
from tasks.interpretability.ablation import ZONES, ZoneAblation
from tasks.training.device import resolve_device


@stage_task(task_run_name="{granularity}")
def ablate(granularity: str, score, ablation: ZoneAblation, zones: list[str], layers: int, heads: int) -> dict:
    """EM/F1 with each zone blocked: ``all_layers`` -> {zone: scores};
    ``per_layer`` -> {zone: {layer_k: scores}}; ``per_head`` -> {zone: {layer_k: {head_h: scores}}}."""
    result = {}
    for zone in zones:
        if granularity == "all_layers":
            with ablation.block(zone):
                result[zone] = score()
        elif granularity == "per_layer":
            result[zone] = {}
            for layer in range(layers):
                with ablation.block(zone, layers={layer}):
                    result[zone][f"layer_{layer}"] = score()
        else:
            result[zone] = {}
            for layer in range(layers):
                result[zone][f"layer_{layer}"] = {}
                for head in range(heads):
                    with ablation.block(zone, layers={layer}, heads={head}):
                        result[zone][f"layer_{layer}"][f"head_{head}"] = score()
    get_run_logger().info(f"{granularity}: {len(zones)} zone(s) done")
    return result


@flow(name="ablation")
def ablation(model_name: str) -> None:
    params = load_params()
    cfg = params.ablation
    spec = params.task(cfg.task)
    training, family = params.finetune.for_task(spec), FAMILIES["mrc"]
    model_dir = paths.MODELS / model_name
    tokenizer = load_tokenizer(model_dir)
    tables, _, data = load_task_data(cfg.task, family, ("train", cfg.split), tokenizer, training)
    device = resolve_device(params.finetune.device)
    seed = params.finetune.seeds[0]
    model, train = stage_task(fit_seed, name="fine_tune")(family, model_dir, None, data["train"], training, seed,
                                                          device, get_run_logger().info)

    def score() -> dict:
        scores, _ = family.evaluate(model, data[cfg.split], tables[cfg.split], training, None, spec.metrics, device)
        return scores

    t0 = time.perf_counter()
    config = model.config
    zone_ablation = ZoneAblation(model, tokenizer.sep_token_id)
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    metrics = {"model": model_name, "task": cfg.task, "split": cfg.split, "seed": seed, "layers": layers,
               "heads": heads, "training": training.model_dump(), "train": train, "baseline": score()}
    for granularity, zones in (("all_layers", ZONES), ("per_layer", ZONES), ("per_head", cfg.per_head_zones)):
        metrics[granularity] = ablate(granularity, score, zone_ablation, list(zones), layers, heads)
    evaluations = 1 + len(ZONES) * (1 + layers) + len(cfg.per_head_zones) * layers * heads
    metrics["evaluation"] = {"evaluations": evaluations, "wall_sec": round(time.perf_counter() - t0, 2),
                             "features": len(data[cfg.split])}
    get_run_logger().info(f"{model_name}: baseline {metrics['baseline']}, {evaluations} evaluations "
                          f"in {metrics['evaluation']['wall_sec']} s")
    with atomic_outputs(paths.stage_metrics("ablation", model_name)) as (out,):
        write_json(out, metrics)


if __name__ == "__main__":
    run_stage(ablation, *sys.argv[1:])
