"""A config says what its fields do, one line each; what they measured lives in bench/README.md, where it points."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted(p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("configs/*.yaml"), *ROOT.glob("configs/sweeps/*.yaml")])
# a speedup (1.08x), a duration (1.61 s, 40-65 s, ~40 s), GPU-minutes, a pass@1: measurements, not descriptions
MEASUREMENT = re.compile(r"\d(?:\.\d+)?x\b|\d s\b|GPU-min|pass@1 \d")


@pytest.mark.parametrize("config", CONFIGS)
def test_config_comments_are_single_lines_without_measurements(config):
    lines = (ROOT / config).read_text().splitlines()
    quoted = [f"{config}:{i}: {line.strip()}" for i, line in enumerate(lines, 1)
              if "#" in line and MEASUREMENT.search(line.split("#", 1)[1])]
    assert not quoted, "measurements belong in bench/README.md:\n" + "\n".join(quoted)
    # a comment paragraph (three or more comment lines in a row) is a measurement report, not a field's note;
    # only the header (the config's first lines) may take two
    run, longest = 0, 0
    for line in lines[2:]:
        run = run + 1 if line.lstrip().startswith("#") else 0
        longest = max(longest, run)
    assert longest <= 2, f"{config}: a comment of {longest} lines"
