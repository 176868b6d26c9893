"""Selection is global across GPUs: the kept tokens chosen by 2 processes (NCCL, one GPU each) equal those one process
chooses on the concatenated generation batch, for every rule and scope. The GPU twin of tests/test_distributed.py.

    python bench/distributed_selection.py --out bench/distributed-selection-h200.json   # launches 2 processes itself

Each rank builds the tiny test trainer on its GPU, selects on its own rows (batch and group scope: one generation
batch; microbatch scope: one training step), and saves what it saw and kept; the parent then recomputes the
single-process selection on the concatenation and compares.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = ("entropy", "gmts", "entropy_nonzero_omega")  # ETS, GMTS, the control arm ets_nz
SCOPES = ("batch", "group", "microbatch")


def worker(out_dir: Path) -> None:
    import torch

    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    from test_trainer import generation_batch, make_trainer

    for rule in RULES:
        for scope in SCOPES:
            trainer = make_trainer(out_dir / "run", selection_scope=scope, token_selection=rule, use_cpu=False)
            rank = trainer.accelerator.process_index
            record: dict = {}
            original = trainer._select_across_processes

            def spy(entropy, omega, mask, advantages, group_index, group_size, *args, **kwargs):
                keep, kept = original(entropy, omega, mask, advantages, group_index, group_size, *args, **kwargs)
                record.update(entropy=entropy.float().cpu(), omega=omega.float().cpu(), mask=mask.bool().cpu(),
                              keep=keep.cpu(), kept_global=int(kept), group_size=group_size,
                              device=str(entropy.device))
                return keep, kept

            trainer._select_across_processes = spy
            if scope == "microbatch":
                trainer.train()
            else:
                generation_batch(trainer, seed=rank)
            torch.save(record, out_dir / f"{rule}-{scope}-rank{rank}.pt")


def compare(out_dir: Path) -> list[dict]:
    import torch

    sys.path[:0] = [str(ROOT)]
    from gmts_trainer import RULE_SCORES
    from selection import select_top_fraction

    rows = []
    for rule in RULES:
        for scope in SCOPES:
            parts = [torch.load(out_dir / f"{rule}-{scope}-rank{r}.pt") for r in (0, 1)]
            width = max(p["mask"].size(1) for p in parts)
            cat = {k: torch.cat([torch.nn.functional.pad(p[k], (0, width - p[k].size(1))) for p in parts])
                   for k in ("entropy", "omega", "mask", "keep")}
            scores = RULE_SCORES[rule](cat["entropy"], cat["omega"])
            single = select_top_fraction(scores, cat["mask"], 0.2, group_size=parts[0]["group_size"])
            rows.append({"rule": rule, "scope": scope, "devices": [p["device"] for p in parts],
                         "valid_tokens": int(cat["mask"].sum()), "kept_by_2_processes": int(cat["keep"].sum()),
                         "kept_by_1_process": int(single.sum()),
                         "identical": bool(torch.equal(cat["keep"], single)),
                         "kept_global_agrees": parts[0]["kept_global"] == parts[1]["kept_global"] == int(cat["keep"].sum())})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/distributed-selection.json")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(Path(args.worker))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29541",
               __file__, "--worker", tmp]
        env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
               "NVSHMEM_DISABLE_NVLS": "1"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-6000:], file=sys.stderr)
            return 1
        rows = compare(Path(tmp))
    import torch

    result = {"gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
              "backend": "nccl" if torch.cuda.is_available() else "gloo", "rows": rows,
              "all_identical": all(r["identical"] and r["kept_global_agrees"] for r in rows)}
    Path(args.out).write_text(json.dumps(result, indent=1))
    for r in rows:
        print(f"{r['rule']:21s} {r['scope']:10s} kept {r['kept_by_2_processes']} / {r['valid_tokens']} "
              f"identical={r['identical']} on {r['devices']}")
    print("all identical:", result["all_identical"])
    return 0 if result["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
