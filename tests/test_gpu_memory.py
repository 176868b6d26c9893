"""GPU memory between a run's phases, on a CPU: the peak each phase records (a stand-in CUDA counter), check.py's line
for it, and the vLLM engine an arm leaves behind, freed before the next arm's trainer is built (a stand-in engine)."""

import gc
import json
import types
import weakref

import pytest
import torch

import check
from gmts_recipe import gpu_memory
from gmts_recipe.gpu_memory import peak_memory, release_vllm_engine
from test_check import fake_results, run_dir


class FakeCounter:
    """torch.cuda's peak counter as the phases see it: `allocate` raises the peak, `reset_peak_memory_stats` lowers
    it to what is held now."""

    def __init__(self):
        self.held, self.peak, self.resets = 0, 0, 0

    def allocate(self, gib: float, keep: bool = False) -> None:
        self.peak = max(self.peak, self.held + int(gib * 2**30))
        if keep:
            self.held += int(gib * 2**30)

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: self.peak)
        monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

        def reset(*a):
            self.resets += 1
            self.peak = self.held

        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)


def test_each_phase_records_its_own_peak_not_the_process_peak(monkeypatch):
    counter = FakeCounter()
    counter.install(monkeypatch)
    peaks: dict = {}
    with peak_memory(peaks, "train", "cuda"):
        counter.allocate(2.0, keep=True)  # the model, held after the phase
        counter.allocate(30.0)  # activations, freed
    with peak_memory(peaks, "eval", "cuda"):
        counter.allocate(5.0)
    assert peaks == {"train": pytest.approx(32.0), "eval": pytest.approx(7.0)}  # 2 held + 5, not the 32 before
    assert counter.resets == 2


def test_a_cpu_run_records_no_peak(monkeypatch):
    counter = FakeCounter()
    counter.install(monkeypatch)  # even where CUDA is there: a run on the CPU (use_cpu) measures nothing
    peaks: dict = {}
    with peak_memory(peaks, "train", "cpu"):
        counter.allocate(3.0)
    assert peaks == {} and counter.resets == 0


class StandInEngine:
    """vllm.LLM as TRL's VLLMGeneration holds it: its engine core is shut down by release_vllm_engine."""

    def __init__(self):
        self.llm_engine = types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=self.shutdown))
        self.shut = False

    def shutdown(self):
        self.shut = True


class StandInTrainer:
    """What Run.train_arm uses of a GMTSTrainer, with TRL's colocate engine at `vllm_generation.llm`."""

    def __init__(self, holders: list):
        self.vllm_generation = types.SimpleNamespace(llm=StandInEngine())
        self.state = types.SimpleNamespace(log_history=[])
        self.trained = False
        holders.append(self)  # something outside keeps the finished trainer alive, as in the run that ran out of memory

    def train(self, resume_from_checkpoint=None):
        self.trained = True


def test_release_drops_the_engine_even_while_the_trainer_is_held():
    trainer = StandInTrainer([])
    engine = trainer.vllm_generation.llm
    alive = weakref.ref(engine)
    del engine
    assert release_vllm_engine(trainer) is True
    gc.collect()
    assert alive() is None and trainer.vllm_generation is None
    assert not release_vllm_engine(trainer)  # nothing left to free
    assert not release_vllm_engine(types.SimpleNamespace())  # TRL's own generation (no vLLM): nothing


def test_release_shuts_the_engine_core_down():
    trainer = StandInTrainer([])
    engine = trainer.vllm_generation.llm
    release_vllm_engine(trainer)
    assert engine.shut


def test_train_arm_frees_the_first_arms_engine_before_the_second_arms_trainer_is_built(tmp_path, monkeypatch):
    import recipe

    held: list = []  # keeps every trainer alive: only an explicit release frees an engine
    engines: list = []
    dead_when_built: list = []

    def build_trainer(self, arm, train_tasks):
        gc.collect()
        dead_when_built.append([ref() is None for ref in engines])
        trainer = StandInTrainer(held)
        engines.append(weakref.ref(trainer.vllm_generation.llm))
        return trainer, types.SimpleNamespace(learning_rate=1e-4)

    evaluated = []
    monkeypatch.setattr(recipe.Run, "build_trainer", build_trainer)
    monkeypatch.setattr(recipe.Run, "_evaluate_arm", lambda self, arm, trainer, *a: evaluated.append(arm))
    run = recipe.Run.__new__(recipe.Run)
    run.recipe = types.SimpleNamespace(resume=False, overwrite=False, keep_adapter=False)
    run.dir, run.peaks, run.apart = tmp_path, {}, []
    run.state = types.SimpleNamespace(is_main_process=True, wait_for_everyone=lambda: None)
    for arm in ("ets", "gmts"):
        run.train_arm(arm, [], [], "cpu")
    assert dead_when_built == [[], [True]]  # arm 1's engine was gone when arm 2's trainer was built
    assert evaluated == ["ets", "gmts"] and all(t.trained for t in held)
    gc.collect()
    assert engines[1]() is None


def test_check_prints_the_recorded_peaks_and_nothing_without_them(tmp_path, capsys):
    results = fake_results()
    assert check.memory_lines(results) == []
    results["base"]["gpu_peak_memory_gib"] = {"base_eval": 6.25}
    results["arms"]["ets"]["gpu_peak_memory_gib"] = {"train": 41.0, "eval": 7.5}
    results["arms"]["gmts"]["gpu_peak_memory_gib"] = {"train": 40.94}
    line = ("Peak GPU memory allocated by torch, GiB (the main process's card): base evaluation 6.2; ETS training 41.0; "
            "ETS evaluation 7.5; GMTS training 40.9.")
    assert check.memory_lines(results) == [line]
    path = run_dir(tmp_path, results)  # with samples: the peaks came after evaluations kept them
    assert check.main([str(path)]) == 0
    assert line in capsys.readouterr().out
    assert json.loads(path.read_text())["arms"]["ets"]["gpu_peak_memory_gib"]["eval"] == 7.5


def test_the_module_names_the_engine_where_trl_keeps_it():
    """TRL 1.16 keeps the colocate engine at GRPOTrainer.vllm_generation (VLLMGeneration) in `.llm`: if a TRL release
    moves it, release_vllm_engine would silently free nothing."""
    import inspect

    from trl.generation.vllm_generation import VLLMGeneration
    from trl.trainer import grpo_trainer

    assert "self.vllm_generation = VLLMGeneration(" in inspect.getsource(grpo_trainer.GRPOTrainer.__init__)
    assert "self.llm = LLM(" in inspect.getsource(VLLMGeneration._init_vllm)
    assert gpu_memory.GIB == 2**30


# ---------------------------------------------------------------------------- gpu_memory_cap_gib
@pytest.mark.parametrize("bad", [0, -4, float("nan"), float("inf"), True, "44"])
def test_a_cap_no_card_could_honour_is_refused(bad):
    with pytest.raises(ValueError, match="gpu_memory_cap_gib=.*positive number of GiB"):
        gpu_memory.check_cap(bad)


def test_the_cap_is_its_share_of_the_card_and_never_more_than_the_card():
    card = 80 * 2**30
    assert gpu_memory.memory_fraction(44, card) == pytest.approx(0.55)
    assert gpu_memory.memory_fraction(80, card) == 1.0
    with pytest.raises(ValueError, match="more than NVIDIA H100 has \\(80.0 GiB\\)"):
        gpu_memory.memory_fraction(81, card, "NVIDIA H100")


class StandInCard:
    """torch.cuda as cap_memory sees one card: its properties, and the fraction set on it."""

    def __init__(self, monkeypatch, total_gib: float = 80):
        self.set: list = []
        props = types.SimpleNamespace(total_memory=int(total_gib * 2**30), name="NVIDIA H100 80GB HBM3")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                            lambda fraction, device=None: self.set.append((fraction, device)))


def test_cap_memory_sets_the_fraction_on_a_card(monkeypatch):
    card = StandInCard(monkeypatch)
    line = gpu_memory.cap_memory(44)
    assert card.set == [(pytest.approx(0.55), 0)]
    assert line == ("[gpu memory] torch may allocate at most 44 GiB of NVIDIA H100 80GB HBM3's 80.0 GiB "
                    "(gpu_memory_cap_gib)")
    assert gpu_memory.cap_memory(None) is None and card.set == [(pytest.approx(0.55), 0)]  # unset: the whole card


def test_cap_memory_is_a_no_op_without_cuda(monkeypatch):
    """On a CPU there is no allocator to cap: nothing is set and nothing printed, but a bad value is still refused."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda *a, **k: pytest.fail("no CUDA: nothing to cap"))
    assert gpu_memory.cap_memory(44) is None
    with pytest.raises(ValueError):
        gpu_memory.cap_memory(-1)


def test_the_recipe_parses_the_cap_and_refuses_bad_values_in_one_line(tmp_path):
    from gmts_recipe.recipe_config import NOT_HASHED, RecipeError, parse

    recipe, train, _, _ = parse(["--config", "configs/smoke.yaml", "--gpu_memory_cap_gib", "44"])
    assert recipe.gpu_memory_cap_gib == 44.0 and "gpu_memory_cap_gib" in NOT_HASHED  # how, not what: outside the hash
    assert parse(["--config", "configs/smoke.yaml"])[0].gpu_memory_cap_gib is None
    for bad in ("0", "-2", "nan", "inf"):
        with pytest.raises(RecipeError, match="gpu_memory_cap_gib=.*positive number of GiB"):
            parse(["--config", "configs/smoke.yaml", "--gpu_memory_cap_gib", bad])
    with pytest.raises(RecipeError, match="gpu_memory_cap_gib"):
        parse(["--config", "configs/smoke.yaml", "--gpu_memory_cap_gib", "lots"])


def test_a_cap_larger_than_the_card_stops_the_run_in_one_line(monkeypatch):
    from gmts_recipe.recipe_config import RecipeError
    from gmts_recipe.run_setup import cap_gpu_memory

    StandInCard(monkeypatch, total_gib=48)
    recipe, train = types.SimpleNamespace(gpu_memory_cap_gib=60.0), types.SimpleNamespace(use_cpu=False)
    with pytest.raises(RecipeError, match="more than NVIDIA H100 80GB HBM3 has \\(48.0 GiB\\)"):
        cap_gpu_memory(recipe, train)
    train.use_cpu = True  # a run on the CPU of a GPU machine: nothing to cap
    cap_gpu_memory(recipe, train)
