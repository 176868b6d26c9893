"""Autograd through TRL's loss, for the tests that check omega against it: what each token's log-prob receives, and
what the trainer selected on the way (tests/test_trainer.py, tests/test_vllm_selection.py)."""

from __future__ import annotations

import torch


def loss_coefficients(trainer, batch: dict, normalizer) -> tuple[torch.Tensor, torch.Tensor, list, list]:
    """Back-propagate `trainer.compute_loss` on `batch`, spying on the scoring forward, the selection hook and
    `_select_across_processes`. Returns (coefficient = -d loss / d log pi_t x `normalizer`, the live log-probs, the
    masks the selection hook returned, the omegas selection was given), each (B, T) where a tensor."""
    held, masks, omegas = {}, [], []
    forward, hook, select = (trainer._get_per_token_logps_and_entropies, trainer.get_high_entropy_mask,
                             trainer._select_across_processes)

    def spy_forward(*args, **kwargs):
        result = forward(*args, **kwargs)
        if torch.is_grad_enabled():  # the loss's own forward, not a scoring pass under no_grad
            result[0].retain_grad()
            held["logps"] = result[0]
        return result

    def spy_select(entropy, omega, *args, **kwargs):
        omegas.append(omega)
        return select(entropy, omega, *args, **kwargs)

    trainer._get_per_token_logps_and_entropies = spy_forward
    trainer.get_high_entropy_mask = lambda e, m, t: masks.append(hook(e, m, t)) or masks[-1]
    trainer._select_across_processes = spy_select
    trainer.current_gradient_accumulation_steps = 1
    trainer.compute_loss(trainer.model, batch).backward()
    return -held["logps"].grad * normalizer, held["logps"].detach(), masks, omegas
