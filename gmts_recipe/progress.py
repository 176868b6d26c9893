"""What the console shows of an arm's training, and a checkpoint every few minutes: the recipe's transformers
callbacks. A module of their own so that recipe.py imports transformers only once a run starts: a typo in `--arm` or
the config file's name is refused in a fraction of a second, not after the libraries' seconds of imports."""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"


class ArmConsole(TrainerCallback):
    """What the console shows of an arm's training: one line as it starts (its place among the arms, its steps and,
    after a first arm, how long it should take), then one short line per logged step (reward, kept fraction, the
    step's seconds, when training should end). Every step's full metrics go to the arm's train_log.jsonl as they come,
    not to the console: build_trainer removes transformers' own printer, which prints the whole dict every step."""

    def __init__(self, arm: str, log_path: Path, position: tuple[int, int] | None = None,
                 pace: dict | None = None):
        self.arm, self.log_path, self.position = arm, log_path, position
        self.pace = {} if pace is None else pace  # shared by a process's arms: what the last one took
        self.began = self.step_began = time.time()
        self.first_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.time()
        self.first_step = state.global_step
        if not state.is_world_process_zero:
            return
        place = f" ({self.position[0]} of {self.position[1]})" if self.position else ""
        steps = state.max_steps - state.global_step
        guess = ""
        if self.pace.get("step_s") is not None:
            guess = f", ~{_duration(steps * self.pace['step_s'] + self.pace.get('eval_s', 0.0))} with its evaluation"
        print(f"[recipe] training {self.arm}{place}: {steps} steps{guess}; every step's metrics: {self.log_path}",
              flush=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if state.global_step == 0:  # a fresh arm: its log starts empty (a resumed one keeps the steps it has)
            self.log_path.write_text("")

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_began = time.time()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        with self.log_path.open("a") as f:
            f.write(json.dumps({**logs, "step": state.global_step}) + "\n")
        if "reward" not in logs:  # the run's closing summary (train_runtime, ...): in the log only
            return
        seconds = logs.get("step_time") or time.time() - self.step_began
        kept = logs.get("selection/kept_fraction")
        left = (state.max_steps - state.global_step) * seconds
        end = f"; training done ~{time.strftime('%H:%M', time.localtime(time.time() + left))}" if left > 0 else ""
        print(f"[recipe] {self.arm} step {state.global_step}/{state.max_steps}: reward {logs['reward']:.2f}, kept "
              f"{'-' if kept is None else f'{kept:.3f}'}, {seconds:.1f} s{end}", flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        steps = state.global_step - (self.first_step or 0)
        if steps > 0:
            self.pace["step_s"] = (time.time() - self.began) / steps


def quiet_console(trainer) -> None:
    """Remove transformers' console printer (the progress bar, and the whole metrics dict of every step, printed
    again): ArmConsole prints one line per step instead and writes the full metrics to the arm's log file."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)


class SaveEveryMinutes(TrainerCallback):
    """A checkpoint when `minutes` passed since the last one (besides save_steps): an interrupted slow run resumes
    with --resume losing at most that much. Every process takes the main process's decision (a checkpoint is a
    collective step under data parallelism)."""

    def __init__(self, minutes: float, partial_state):
        self.minutes, self.partial_state, self.last = minutes, partial_state, time.time()

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        if self.minutes <= 0:
            return
        due = [time.time() - self.last >= 60 * self.minutes]
        if self.partial_state.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            broadcast_object_list(due, from_process=0)
        if due[0]:
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        self.last = time.time()
