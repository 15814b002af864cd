"""ELMo scalar mix: softmax-normalised layer weights, a frozen encoder, trainable mix and head."""

import torch
from transformers import BertConfig, BertModel

from tasks.interpretability.scalar_mix import ScalarMix, ScalarMixClassifier, ScalarMixTagger


def encoder():
    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=16, max_position_embeddings=16, hidden_dropout_prob=0.5))


def test_scalar_mix_is_gamma_times_the_softmax_weighted_sum():
    layers = tuple(torch.randn(2, 3, 4) for _ in range(3))
    mix = ScalarMix(3)
    assert torch.allclose(mix(layers), sum(layers) / 3)  # starts at equal weights, γ = 1
    with torch.no_grad():
        mix.scalars.copy_(torch.tensor([0.0, 2.0, -1.0]))
        mix.gamma.fill_(0.5)
    w = torch.softmax(torch.tensor([0.0, 2.0, -1.0]), 0)
    assert torch.allclose(mix(layers), 0.5 * (w[0] * layers[0] + w[1] * layers[1] + w[2] * layers[2]))
    assert abs(sum(mix.layer_weights) - 1) < 1e-6 and mix.layer_weights[1] == max(mix.layer_weights)


def test_only_the_mix_and_head_learn_and_the_encoder_stays_in_eval_mode():
    ids, mask = torch.randint(5, 20, (4, 6)), torch.ones(4, 6, dtype=torch.long)
    for model, labels in ((ScalarMixClassifier(encoder(), 3, 0.1), torch.tensor([0, 1, 2, 1])),
                          (ScalarMixTagger(encoder(), 3, 0.1), torch.randint(3, (4, 6)))):
        before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
        model.train()
        assert not model.encoder.training  # dropout off: fixed features
        opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        assert all(p.grad is None for p in model.encoder.parameters())
        assert model.mix.scalars.grad is not None and model.classifier.weight.grad is not None
        opt.step()
        assert all(torch.equal(before[k], v) for k, v in model.encoder.state_dict().items())
        assert out.logits.shape[-1] == 3
