"""Tune the offline arithmetic task: base pass@1 of the offline model for each difficulty and system prompt.

GRPO learns nothing from a task the model always or never solves, so the offline config uses a (difficulty, prompt)
whose base pass@1 lies in 10-60%. Writes results/offline-task-tuning.json.

    python bench/task_difficulty.py [--n 64] [--max-new-tokens 128] [--device cpu]
    python bench/task_difficulty.py --table results/offline-task-tuning.json   # the README table
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))



def table(results: dict) -> str:
    """README table of a tuning results file."""
    lines = [f"Base pass@1 of {results['model']} on the generated task ({results['rows'][0]['n']} tasks, 1 sample each, "
             f"{results['max_new_tokens']} new tokens, device {results['device']}):", "",
             "| difficulty | system prompt | temperature | pass@1 | mean length (chars) |", "|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['difficulty']} | {r['prompt']} | {r.get('temperature', 1.0)} | {100 * r['pass@1']:.1f}% | "
                     f"{r['mean_length']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--table"]:
        print(table(json.loads(Path(sys.argv[2]).read_text())))
        return
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from gmts_recipe.data import SYSTEM_PROMPTS as PROMPTS
    from gmts_recipe.data import arithmetic_task
    from eval import evaluate_pass_at_1
    from gmts_recipe.models import OFFLINE_MODEL, resolve_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--difficulties", default="0,1,2")
    ap.add_argument("--prompts", default="steps,example,two_examples")
    ap.add_argument("--temperatures", default="1.0")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default="results/offline-task-tuning.json")
    a = ap.parse_args()
    path = resolve_model(OFFLINE_MODEL)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).to(a.device)
    rows = []
    for difficulty in map(int, a.difficulties.split(",")):
        tasks = [dict(t, index=i) for i, t in enumerate(arithmetic_task(a.n, seed=1234, difficulty=difficulty))]
        for name, temperature in [(p, float(t)) for p in a.prompts.split(",") for t in a.temperatures.split(",")]:
            prompt = PROMPTS[name]
            t0 = time.time()
            res = evaluate_pass_at_1(model, tok, tasks, k=1, seed=0, max_new_tokens=a.max_new_tokens,
                                     temperature=temperature, batch_size=a.batch_size, system_prompt=prompt, progress=False)
            rows.append({"difficulty": difficulty, "prompt": name, "temperature": temperature,
                         "pass@1": res["pass@1"], "n": a.n,
                         "mean_length": res["hack_scan"]["mean_length"], "seconds": round(time.time() - t0, 1)})
            print(json.dumps(rows[-1]), flush=True)
    out = {"model": OFFLINE_MODEL, "device": a.device, "max_new_tokens": a.max_new_tokens,
           "prompts": PROMPTS, "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
