"""gmts_recipe.markdown: wrapped prose reads the same rendered (its words in order, no line that markdown would read as
a block of its own), and table rows pass through."""

from hypothesis import given, strategies as st

from gmts_recipe.markdown import fill, fill_lines, item

WORDS = st.lists(st.sampled_from(["GMTS", "-", "ETS", "+1.3", "2.", "a", "longer-word", "#", "*", "x" * 30, "(1)"]),
                 min_size=1, max_size=80)


@given(WORDS, st.integers(20, 120))
def test_fill_keeps_the_words_and_starts_no_block(words, width):
    text = " ".join(words)
    out = fill(text, width)
    assert out.replace("\n", " ") == text
    for line in out.splitlines()[1:]:
        assert not line.startswith(("- ", "+ ", "* ", "# ")) and not line.split(" ")[0].rstrip(".").isdigit()


@given(WORDS, st.integers(20, 120))
def test_item_indents_its_later_lines(words, width):
    out = item(" ".join(words), width).splitlines()
    assert out[0].startswith("- ") and all(line.startswith("  ") and line[2] != " " for line in out[1:])
    assert " ".join(line.strip() for line in out)[2:] == " ".join(words)


def test_a_line_breaks_before_a_word_not_inside_it():
    assert fill("GMTS - ETS +0.9 points", 8).splitlines() == ["GMTS -", "ETS +0.9", "points"]  # never "- ETS"
    assert max(map(len, fill("a " * 100, 50).splitlines())) <= 50


def test_fill_lines_wraps_prose_and_items_and_leaves_tables():
    row = "| " + " | ".join(["cell"] * 40) + " |"
    text = "\n".join(["word " * 40, "", "- " + "item " * 40, row, "short"])
    out = fill_lines(text, 60).splitlines()
    assert row in out and "short" in out and "" in out
    assert all(len(line) <= 60 for line in out if not line.startswith("|"))
    assert sum(line.startswith("- ") for line in out) == 1
