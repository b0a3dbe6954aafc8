"""charts.py, the one plotting helper: every text it draws lies inside the image and no two texts
intersect, for long labels and titles too (checked on the boxes it reports, with no image analysis);
and each of the four charts that use it writes a PNG whose texts keep that property."""

import itertools
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from verdict_lab import charts
from verdict_lab.charts import font
from verdict_lab.harness import tables
from verdict_lab.perf import overhead, simulation_report
from verdict_lab.perf import simulation as simulate

WORDS = (
    "a",
    "judge",
    "consensus",
    "verdict+zoom+revise",
    "3DSRBench",
    "accuracy (%)",
    "s-bar*",
    "x" * 40,
)


def check(c: charts.Canvas) -> None:
    """Every text box inside the image, and no two of them intersecting."""
    W, H = c.img.size
    for text, (x0, y0, x1, y1) in c.texts:
        assert 0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H, (text, (x0, y0, x1, y1), (W, H))
    for (s, a), (t, b) in itertools.combinations(c.texts, 2):
        assert not charts.intersects(a, b), (s, a, t, b)


def phrase(rng, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.mark.parametrize("seed", range(8))
def test_long_labels_and_titles_stay_inside_and_apart(seed):
    rng = np.random.default_rng(seed)
    W, H = (int(v) for v in rng.integers(120, 700, size=2))
    c = charts.Canvas((W, H))
    title = c.text(
        (10, 4), phrase(rng, 30), 13, lines=2
    )  # far wider than the image: wrapped, maybe shrunk
    assert title is not None and title[2] - title[0] <= W
    for _ in range(60):
        anchor = rng.choice(list("lmr")) + rng.choice(list("tmb"))
        xy = tuple(rng.uniform(-50, max(W, H) + 50, size=2))  # some past the edges: moved inside
        width = None if rng.random() < 0.3 else float(rng.uniform(20, W))
        c.text(
            xy,
            phrase(rng, int(rng.integers(1, 8))),
            int(rng.integers(8, 16)),
            anchor=anchor,
            width=width,
            moves=((0, 0), (0, -14), (0, 14)),
        )
    assert len(c.texts) >= 2
    check(c)


def test_wrap_keeps_every_word_and_fits_the_width():
    fnt = font(11)
    text = (
        "Accuracy (%) per method and benchmark, ± sample std over seeds "
        "verdict+premises+gate+zoom+revise"
    )
    lines = charts.wrap(text, fnt, 120)
    assert " ".join(lines) == text and len(lines) > 1
    # a line is wider than 120 pixels only when it is one word that alone is
    assert all(fnt.getlength(line) <= 120 or " " not in line for line in lines)


def test_a_title_too_long_for_its_lines_shrinks_and_a_later_overlapping_text_gives_way():
    c = charts.Canvas((300, 100))
    b = c.text(
        (4, 4), "Accuracy (%) per method and benchmark, ± sample std over seeds", 13, lines=1
    )
    assert b is not None and b[2] <= 300 and b[3] - b[1] < 20  # one line, at a smaller size
    assert c.text((10, 6), "overlaps the title") is None  # left out: the first text drawn wins
    moved = c.text((10, 6), "moves below", moves=((0, 0), (0, 30)))
    assert moved is not None and moved[1] >= b[3]
    check(c)


def test_avoid_keeps_texts_off_a_shape():
    c = charts.Canvas((200, 100))
    c.avoid((0, 0, 100, 100))
    assert c.text((10, 10), "under the shape") is None
    assert c.text((10, 10), "beside it", moves=((0, 0), (110, 0)))[0] >= 100


@pytest.mark.parametrize("across", [False, True])
def test_legend_items_stay_inside_and_apart(across):
    c = charts.Canvas((260, 200))
    items = [
        (f"method {k} " + "verdict+zoom+revise" * (k % 2), charts.PALETTE[k]) for k in range(6)
    ]
    items = [("heading", None)] + items
    bottom = charts.legend(c, (10, 10), items, width=240, across=across, frame=not across)
    assert (
        len(c.texts) == len(items) and bottom <= 200
    )  # every label drawn: rows wrap rather than collide
    check(c)


def test_tint():
    assert charts.tint(charts.RED, 0) == charts.RED and charts.tint(charts.RED, 1) == (
        255,
        255,
        255,
    )


# ----------------------------------------------------------------------------- the four charts


@pytest.fixture
def canvases(monkeypatch):
    """The canvases the charts save, each checked for the property as it is saved."""
    saved, save = [], charts.Canvas.save

    def checked(c, path):
        check(c)
        saved.append(c)
        save(c, path)

    monkeypatch.setattr(charts.Canvas, "save", checked)
    return saved


def png(path):
    with Image.open(path) as img:
        assert img.format == "PNG"
        img.load()
        return img.size


def test_simulate_plot(tmp_path, canvases):
    simulation_report.plot(simulate.run(30, 2, 0), tmp_path / "s.png")
    assert png(tmp_path / "s.png")[0] == simulation_report.W * simulation_report.COLS
    drawn = {t for t, _ in canvases[0].texts}
    assert set(simulate.ALL_RULES) <= drawn
    assert all(f"{sw.name}: accuracy (%)" in drawn for sw in simulate.SWEEPS)


def test_tables_picture_wraps_a_title_too_wide_for_a_narrow_picture(tmp_path, canvases):
    cols, methods = ["MMStar"], ["base", "verdict+premises+gate+zoom+revise, with a long name"]
    cell = {"mean": 55.0, "std": 3.0}
    accuracy = {m: {c: cell for c in cols + ["Avg"]} for m in methods}
    s = {"columns": cols, "methods": methods, "accuracy": accuracy}
    tables.picture(s, str(tmp_path / "summary.png"))
    width, _ = png(tmp_path / "summary.png")
    title = next(b for t, b in canvases[0].texts if t.startswith("Accuracy (%)"))
    assert (
        width < 400 and title[2] <= width
    )  # the title's one line would be 395 pixels: wrapped, not cut
    assert set(methods) <= {t for t, _ in canvases[0].texts}


def test_overhead_picture_labels_every_mode_and_the_paper(tmp_path, canvases):
    # the numbers of docs/bench_overhead.png, where the x labels and "paper: 3.80x" overlapped
    ratios = [(1.0, 1.0, 1.0), (20.6, 20.5, 20.4), (4.8, 4.8, 4.7)]  # per mode, a ratio per layout
    ratios += [(3.5, 3.4, 3.3), (1.7, 1.7, 1.6), (1.6, 1.6, 1.5)]
    modes = (overhead.BASE,) + overhead.MODES
    result = {
        replace(m, layout=lay): SimpleNamespace(ratio=v)
        for m, vs in zip(modes, ratios)
        for lay, v in zip(overhead.ORDER, vs)
    }
    panels = [("simulated server (2a)", result), ("real llama-server (2b)", result)]
    overhead.picture(panels, str(tmp_path / "o.png"))
    assert png(tmp_path / "o.png") == (880, 360)
    drawn = [t for t, _ in canvases[0].texts]
    assert drawn.count("seq., short judges") == drawn.count("conc., short judges") == 2
    assert "paper: 3.80x" in drawn and all(lay in drawn for lay in overhead.ORDER)
