"""CITATION.cff names this repository as pyproject.toml does and cites the two papers it implements."""

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_citation_matches_the_package_and_cites_both_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["message"] and cff["authors"]
    assert cff["version"] == project["version"] and cff["license"] == project["license"] == "Apache-2.0"
    cited = {ref["identifiers"][0]["value"]: ref for ref in cff["references"]}
    assert set(cited) == {"arXiv:2608.30632", "arXiv:2506.01939"}
    assert cited["arXiv:2608.30632"]["title"] == "Gradient-Magnitude Token Selection"
    assert [a["family-names"] for a in cited["arXiv:2608.30632"]["authors"]] == ["Lv", "Zhang", "Zhang"]
    assert cited["arXiv:2506.01939"]["title"].startswith("Beyond the 80/20 Rule: High-Entropy Minority Tokens")
    assert cited["arXiv:2506.01939"]["authors"][0]["family-names"] == "Wang"
    for value, ref in cited.items():
        assert ref["url"] == f"https://arxiv.org/abs/{value.removeprefix('arXiv:')}"
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text and license_text.count("\n") > 190  # the full text
