"""Run under 2 processes (torch.distributed.run, gloo on CPU) by test_distributed.py: each rank builds a GMTSTrainer,
makes one generation batch per scope, and saves the local inputs and the mask it selected."""

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parent.parent)]
from test_trainer import generation_batch, make_trainer  # noqa: E402

out_dir = Path(sys.argv[1])
# GMTS in every scope; the control rule (ETS over omega != 0) in the batch scope: its dense entropy ranks are only
# comparable across processes if they are taken after the gather, which this checks
for scope, rule in (("batch", "gmts"), ("group", "gmts"), ("microbatch", "gmts"), ("batch", "entropy_nonzero_omega")):
    trainer = make_trainer(out_dir / "run", selection_scope=scope, token_selection=rule)
    rank = trainer.accelerator.process_index
    assert trainer.accelerator.num_processes == 2
    record = {}
    original = trainer._select_across_processes

    def spy(entropy, omega, mask, advantages, group_index, group_size):
        keep, kept = original(entropy, omega, mask, advantages, group_index, group_size)
        record.update(entropy=entropy.float(), omega=omega.float(), mask=mask.bool(), keep=keep,
                      kept_global=int(kept), group_size=group_size)
        return keep, kept

    trainer._select_across_processes = spy
    if scope == "microbatch":
        trainer.train()  # the hook ranks the first microbatch ... the spy keeps the last call
    else:
        generation_batch(trainer, seed=rank)
    torch.save(record, out_dir / f"{scope}-{rule}-rank{rank}.pt")

# A clean shutdown: a process group left to the interpreter's exit can abort in its C++ teardown ("terminate called
# without an active exception", seen once in CI on the loaded 2-core machine).
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
