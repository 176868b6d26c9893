"""The evaluation's progress bar moves while a batch generates (on a CPU one batch can hold every sample for minutes),
and moving it changes no sample."""

import pytest
import tqdm.auto

import eval as evaluation


class RecordingBar:
    """Stands in for tqdm: records every update and where the bar stood."""

    instances: list = []

    def __init__(self, total=None, disable=False, **kwargs):
        self.total, self.disable, self.n, self.updates = total, disable, 0, []
        RecordingBar.instances.append(self)

    def update(self, k=1):
        self.n += k
        self.updates.append(k)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _tiny():
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    return tiny_model(tok, seed=0), tok


PROMPTS = [[{"role": "user", "content": "1+1"}], [{"role": "user", "content": "12+30"}],
           [{"role": "user", "content": "7+5"}]]


@pytest.mark.parametrize("batch_size", [6, 2])  # every sample in one batch (the Quick start's case), and three batches
def test_bar_ticks_inside_generation_and_samples_are_unchanged(monkeypatch, batch_size):
    model, tok = _tiny()
    quiet = evaluation.generate_samples(model, tok, PROMPTS, k=2, seed=5, max_new_tokens=12, batch_size=batch_size,
                                        progress=False)
    RecordingBar.instances = []
    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    shown = evaluation.generate_samples(model, tok, PROMPTS, k=2, seed=5, max_new_tokens=12, batch_size=batch_size,
                                        progress=True)
    assert shown == quiet  # the bar draws no random number and reads no token
    bar = RecordingBar.instances[-1]
    batches = -(-6 // batch_size)
    assert bar.total == batches * 12 and bar.n == bar.total  # token steps: full at the end
    assert len(bar.updates) > batches  # it moved inside generate, not only once per batch
    assert all(k >= 0 for k in bar.updates)
