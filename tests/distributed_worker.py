"""One pretraining run of the DDP tests (tests/test_distributed.py), as a program: under
``torchrun`` every rank runs it; rank 0 writes the log rows and the final weights."""

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from transformers import BertConfig, BertForTokenClassification, BertModel

from tasks.downstream.mean_pool import MeanPoolForSequenceClassification
from tasks.downstream.finetune import fit
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.examples import DynamicMasker, PretrainingExamples
from tasks.pretraining.pretrain import train
from tasks.training.distributed import Ranks, join_process_group
from tasks.core.params import load_params
from tasks.pretraining.objectives.sentence import SentenceTask
from tests.test_pretrain import pair_data, tiny_data, tiny_model


def data_and_model(case: str):
    if case == "static":
        return tiny_data(n=64), tiny_model()
    # dynamic whole-word masking with SOP, or PerLM (positions) with SOP
    perlm = case == "perlm_sop"
    config = MaskingConfig(scheme="wwm", masked_lm_prob=0.3, **({"mask": 0, "random": 0, "permute": 0.9} if perlm
                                                                 else {}))
    masker = DynamicMasker(config, seed=5, objective=case, mask_token_id=3,
                           random_token_ids=np.arange(5, 60, dtype=np.int32))
    return PretrainingExamples.from_table(pair_data(n=64), masker), tiny_model(predicts_positions=perlm,
                                                                               sentence_task=True)


class TokenLabels:
    """Token classification batches (``labels [B, L]``, -100 on padding) for :func:`fit`."""

    def __init__(self, n=64, seed=0):
        rng = np.random.default_rng(seed)
        self.lengths = rng.integers(4, 16, n)
        self.ids = [rng.integers(5, 60, k) for k in self.lengths]

    def __len__(self):
        return len(self.lengths)

    def batch(self, index):
        width = int(self.lengths[index].max())
        ids = torch.zeros(len(index), width, dtype=torch.long)
        for row, i in enumerate(index):
            ids[row, :self.lengths[i]] = torch.from_numpy(self.ids[i])
        valid = (ids > 0).long()
        return {"input_ids": ids, "attention_mask": valid, "labels": torch.where(valid.bool(), ids % 3, -100)}


class SequenceLabels(TokenLabels):
    """Sequence classification batches (``labels [B]``) for :func:`fit`."""

    def batch(self, index):
        out = super().batch(index)
        out["labels"] = out["input_ids"][:, 0] % 2
        return out


def finetune(out: str, ranks: Ranks = Ranks(), device: torch.device = torch.device("cpu"),
             head: str = "token") -> dict:
    """Fine-tune a tiny token classifier, or (``head="mean_pool"``) the mean-pooling sequence
    classifier, whose encoder's pooler gets no gradient, without dropout with :func:`fit` (global batch 8)."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if head == "mean_pool":
        config.num_labels = 2
        model, data = MeanPoolForSequenceClassification(config, BertModel(config)), SequenceLabels()
    else:
        model, data = BertForTokenClassification(config), TokenLabels()
    summary = fit(model, data, epochs=8, batch_size=8, lr=1e-3, warmup_fraction=0.1, weight_decay=0.01,
                  max_grad_norm=1.0, seed=1, device=device, log=lambda _: None, ranks=ranks)
    result = {"train_loss": summary["train_loss"], "steps": summary["steps"], "model": model.state_dict(),
              "world": ranks.world}
    if ranks.is_main:
        torch.save(result, out)
    return result


def run(out: str, case: str = "static", accumulation: int = 1, checkpoint: str | None = None, kill_at: int = 0,
        ranks: Ranks = Ranks(), device: torch.device = torch.device("cpu")) -> dict:
    """Train the ``case`` model; returns (and on rank 0 saves to ``out``) the log rows and weights."""
    data, model = data_and_model(case)
    for module in model.modules():  # pretraining runs without dropout (params.yaml): no random draws
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0

    def log(message: str) -> None:
        if kill_at and message.startswith(f"step {kill_at}/"):
            os.kill(os.getpid(), 9)

    cfg = load_params().pretrain.model_copy(update=dict(  # the repo's pretrain params, scaled down
        token_budget=7000, batch_size=8, accumulation_steps=accumulation, learning_rate=1e-3,
        log_every=5, checkpoint_every=10, device="cpu", threads=1))  # one thread per rank
    summary = train.fn(model, data, cfg, seed=1, device=device, checkpoint=Path(checkpoint or f"{out}.ckpt"),
                       fingerprint="f", log=log, ranks=ranks, logged=SentenceTask.logged)
    result = {"rows": summary["rows"], "model": model.state_dict(), "world": ranks.world}
    if ranks.is_main:
        torch.save(result, out)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--case", default="static")
    ap.add_argument("--accumulation", type=int, default=1)
    ap.add_argument("--checkpoint", help="the rolling checkpoint (default: beside OUT)")
    ap.add_argument("--kill-at", type=int, default=0, help="SIGKILL rank 0 when it logs this step")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ranks, device = join_process_group("cpu")
    if args.case == "sleep":  # a rank that waits to be killed (the fault tests), its pid in OUT.<rank>
        Path(f"{args.out}.{ranks.rank}").write_text(str(os.getpid()))
        time.sleep(120)
        return None
    if args.case in ("finetune", "finetune_mean_pool"):
        return finetune(args.out, ranks, device, head=args.case.removeprefix("finetune").lstrip("_") or "token")
    run(args.out, args.case, args.accumulation, args.checkpoint, args.kill_at, ranks, device)


if __name__ == "__main__":
    main()
