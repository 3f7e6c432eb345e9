"""The beam tree figure at any size: level of detail, fit-to-view, labels that fit, folds, the
tab's view handlers. Real searches on the tiny random model (layout does not need a real one);
tests/test_browser_beam.py checks the same in Chromium with the embedded model."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import plotly.graph_objects as go
import pytest

from playground.beam import FINISHED, KEPT, PRUNED, BeamTree, beam_search
from playground.errors import PlaygroundError
from playground.plots.beam import DARK_TEXT, beam_tree_data, beam_tree_figure, figure_config, node_focus
from playground.plots.beam_layout import FOLD_MIN_ROW_PX, PlotFrame
from playground.plots.labels import Area, Label, label_box, place_labels, text_width
from playground.ui.beam_tab import BeamHandlers, parse_view
from playground.workspace import Workspaces

PROMPT = "The best thing about beam search is"
TAB = SimpleNamespace(session_hash="beam-figure")


@pytest.fixture(scope="module")
def small_tree(tiny_lm) -> BeamTree:
    return beam_search(tiny_lm, PROMPT, 4, 12, include_greedy=True)


@pytest.fixture(scope="module")
def big_tree(tiny_lm) -> BeamTree:
    return beam_search(tiny_lm, PROMPT, 16, 64, include_greedy=True)


# --- what the figure's data says about the screen --------------------------------------------


def traces(data: dict) -> dict[str, dict]:
    return {trace["name"]: trace for trace in data["data"]}


def plot_area(data: dict, frame: PlotFrame | None = None) -> Area:
    """The plot area the figure is drawn for (its axis ranges on frame's px)."""
    frame = frame or PlotFrame()
    layout = data["layout"]
    width, height = frame.width - frame.margin_x, layout["height"] - frame.margin_y
    return Area(*layout["xaxis"]["range"], *layout["yaxis"]["range"], width, height)


def each_point(data: dict):
    """(trace, index, x, y, marker px) of every drawn point (line traces: their vertices)."""
    for trace in data["data"]:
        size = trace.get("marker", {}).get("size", 0)
        for i, (x, y) in enumerate(zip(trace["x"], trace["y"], strict=True)):
            if x is not None:
                yield trace, i, x, y, size[i] if isinstance(size, list) else size


def label_boxes(
    data: dict, frame: PlotFrame | None = None
) -> list[tuple[str, tuple[float, float, float, float]]]:
    """(text, box px) of every label the figure draws, at the font size its trace says."""
    area, boxes = plot_area(data, frame), []
    for trace in data["data"]:
        for i, text in enumerate(trace.get("text") or []):
            if text:
                x, y, position = trace["x"][i], trace["y"][i], trace["textposition"][i]
                size = trace["marker"]["size"]
                label = Label(i, i, text, x, y, size, trace["textfont"]["size"], [position])
                boxes.append((text, label_box(label, position, area)))
    return boxes


def assert_everything_inside(data: dict, frame: PlotFrame | None = None) -> None:
    area = plot_area(data, frame)
    for trace, _, x, y, size in each_point(data):
        left, top = area.to_px(x, y)
        assert size / 2 <= left <= area.width - size / 2, (trace["name"], x)
        assert size / 2 <= top <= area.height - size / 2, (trace["name"], y)
    boxes = label_boxes(data, frame)
    assert boxes, "no label at all"
    for text, (left, top, right, bottom) in boxes:
        assert left >= 0 and right <= area.width and top >= 0 and bottom <= area.height, text
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        apart = box_a[2] <= box_b[0] or box_b[2] <= box_a[0] or box_a[3] <= box_b[1] or box_b[3] <= box_a[1]
        assert apart, (a, b)


# --- fit to view, labels that fit -------------------------------------------------------------


@pytest.mark.parametrize("size", ["small", "big"])
def test_the_default_view_shows_every_mark_and_label_inside_the_plot_area(size, small_tree, big_tree):
    tree = small_tree if size == "small" else big_tree
    data = beam_tree_data(tree)
    assert_everything_inside(data)
    assert data["layout"]["height"] <= 600  # fits a 720 px high window
    meta = data["layout"]["meta"]["beam_view"]
    assert (
        meta["fit"]
        == meta["window"]
        == [*data["layout"]["xaxis"]["range"], *data["layout"]["yaxis"]["range"]]
    )


@pytest.mark.parametrize("room", [0, 300, 460])
def test_on_stage_the_text_is_larger_and_the_figure_ends_above_the_window_bottom(room, big_tree, small_tree):
    frame = PlotFrame(presenter=True, room=room, dark=True)
    for tree in (small_tree, big_tree):
        data = beam_tree_data(tree, frame=frame)
        assert_everything_inside(data, frame)  # no overlap, nothing clipped at the larger size
        if room:
            assert data["layout"]["height"] <= room
        live = traces(data)["kept (circle) / finished (square)"]
        assert live["textfont"]["size"] == round(12 * 1.4) and data["layout"]["font"]["size"] >= 16
        assert len(label_boxes(data, frame)) >= 8  # still a readable tree, not bare markers
        meta = data["layout"]["meta"]
        assert meta["stage_sized"] is True  # static/theme.js leaves its text and height alone
        assert meta["beam_view"]["presenter"] is True and meta["beam_view"]["room"] == room


def test_unfolded_candidates_and_zoomed_windows_stay_inside_too(small_tree, big_tree):
    parents = sorted({n.parent for n in small_tree.nodes if n.fate == PRUNED})[:5]
    assert_everything_inside(beam_tree_data(small_tree, 2, unfolded=parents))
    fit = beam_tree_data(big_tree)["layout"]["meta"]["beam_view"]["fit"]
    window = [20, 32, (fit[2] + fit[3]) / 2 - 20, (fit[2] + fit[3]) / 2]
    zoomed = beam_tree_data(big_tree, window=window)
    assert [*zoomed["layout"]["xaxis"]["range"], *zoomed["layout"]["yaxis"]["range"]] == window
    area = plot_area(zoomed)
    inside = [
        (x, y) for _, _, x, y, _ in each_point(zoomed) if area.x0 <= x <= area.x1 and area.y0 <= y <= area.y1
    ]
    assert inside  # plotly clips the rest; labels are only placed for what is inside:
    for text, (left, top, right, bottom) in label_boxes(zoomed):
        assert left >= 0 and right <= area.width and top >= 0 and bottom <= area.height, text


def test_the_prompt_is_labelled_whole_left_of_the_root(big_tree):
    data = beam_tree_data(big_tree)
    root = traces(data)["prompt"]
    assert root["text"] == ["prompt"] and root["textposition"] == ["middle left"]
    left, _, right, _ = dict(label_boxes(data))["prompt"]
    root_x, _ = plot_area(data).to_px(0, root["y"][0])
    assert left >= 0 and right < root_x  # whole, inside the plot area, left of the root


def test_only_what_fits_is_labelled_and_every_node_keeps_its_hover(big_tree):
    data = beam_tree_data(big_tree)
    live = traces(data)["kept (circle) / finished (square)"]
    expected = {n.id: n for n in big_tree.nodes if n.fate in (KEPT, FINISHED)}
    assert sorted(row[5] for row in live["customdata"]) == sorted(expected)
    for row, text in zip(live["customdata"], live["text"], strict=True):
        assert row[0] == expected[row[5]].label  # the hover names every node
        assert text in ("", expected[row[5]].label)  # the label, where it fits
    labelled = sum(bool(t) for t in live["text"])
    assert 20 < labelled < len(expected) / 2  # a 16 x 64 tree has far more nodes than room
    assert "%{customdata[0]}" in live["hovertemplate"] and "%{text}" not in live["hovertemplate"]


def test_the_best_beam_and_the_hypotheses_are_labelled_first(small_tree):
    data = beam_tree_data(small_tree)
    hyps = traces(data)["returned hypotheses"]
    best = small_tree.hypotheses[0]
    assert hyps["text"][0] == f"#1 {best.score:.3f}"
    live = traces(data)["kept (circle) / finished (square)"]
    texts = {row[5]: text for row, text in zip(live["customdata"], live["text"], strict=True)}
    on_best_path = [n.id for n in small_tree.path(best.node_id) if n.id in texts]
    assert sum(bool(texts[i]) for i in on_best_path) >= len(on_best_path) * 0.6


def test_a_zoomed_window_labels_more_of_what_it_shows_with_bigger_markers(big_tree):
    fit_data = beam_tree_data(big_tree)
    fit = fit_data["layout"]["meta"]["beam_view"]["fit"]
    window = [10, 22, fit[2] + (fit[3] - fit[2]) * 0.6, fit[3]]
    zoomed = beam_tree_data(big_tree, window=window)

    def labelled_in_window(data: dict) -> int:
        live = traces(data)["kept (circle) / finished (square)"]
        return sum(
            bool(t) and window[0] <= x <= window[1] and window[2] <= y <= window[3]
            for x, y, t in zip(live["x"], live["y"], live["text"], strict=True)
        )

    assert labelled_in_window(zoomed) > 2 * labelled_in_window(fit_data)
    size = traces(fit_data)["kept (circle) / finished (square)"]["marker"]["size"]
    assert traces(zoomed)["kept (circle) / finished (square)"]["marker"]["size"] > size


# --- folds -------------------------------------------------------------------------------------


def pruned_children(tree: BeamTree, parent: int) -> list[int]:
    return [c for c in tree.children(parent) if tree.nodes[c].fate == PRUNED]


@pytest.mark.parametrize("per_parent", [0, 1, 2])
def test_each_fold_counts_the_pruned_candidates_it_hides(small_tree, per_parent):
    fit = beam_tree_data(small_tree, per_parent)["layout"]["meta"]["beam_view"]["fit"]
    window = [fit[0], fit[1], fit[3] - 12, fit[3]]  # rows far enough apart for every fold mark
    data = traces(beam_tree_data(small_tree, per_parent, window=window))
    drawn = {row[5] for row in data["pruned"]["customdata"]}
    greedy = {t.node_id for t in small_tree.greedy or []}
    folds = data["pruned, folded (click)"]
    by_parent = {row[5]: row for row in folds["customdata"]}
    for parent in {n.parent for n in small_tree.nodes if n.fate == PRUNED}:
        pruned = [c for c in pruned_children(small_tree, parent) if c not in greedy]  # greedy: on its path
        shown = [c for c in pruned if c in drawn]
        assert shown == pruned[:per_parent]  # the best ones, one by one
        hidden = len(pruned) - len(shown)
        if hidden:
            assert by_parent[parent][1] == hidden and by_parent[parent][0] == f"+{hidden} pruned"
        else:
            assert parent not in by_parent
    for row, text in zip(folds["customdata"], folds["text"], strict=True):
        assert text in ("", row[0], f"+{row[1]}")  # long or short label, or none where it won't fit
        assert row[6] == "fold" and "click to unfold" in row[4]


def test_a_fold_lists_the_true_numbers_of_what_it_hides(small_tree):
    row = traces(beam_tree_data(small_tree))["pruned, folded (click)"]["customdata"][0]
    hidden = [small_tree.nodes[c] for c in pruned_children(small_tree, row[5])]
    for node in hidden:
        assert f"{node.label}: log-prob {node.logprob:.4f}, cum log-prob {node.cum_logprob:.4f}" in row[4]


def test_unfolding_draws_every_candidate_of_that_node_and_a_mark_to_fold_them(small_tree):
    parent = next(n.parent for n in small_tree.nodes if n.fate == PRUNED)
    data = traces(beam_tree_data(small_tree, unfolded=[parent]))
    drawn = {row[5] for row in data["pruned"]["customdata"]}
    assert set(pruned_children(small_tree, parent)) <= drawn
    fold = next(row for row in data["pruned, folded (click)"]["customdata"] if row[5] == parent)
    assert fold[0] == "fold" and "click to fold" in fold[4]


def test_folds_are_left_out_where_rows_are_too_dense_and_come_back_when_zoomed(big_tree):
    data = beam_tree_data(big_tree)
    area = plot_area(data)
    assert area.px_per_y < FOLD_MIN_ROW_PX and traces(data)["pruned, folded (click)"]["x"] == []
    fit = data["layout"]["meta"]["beam_view"]["fit"]
    zoomed = beam_tree_data(big_tree, window=[30, 40, fit[3] - 25, fit[3]])
    assert len(traces(zoomed)["pruned, folded (click)"]["x"]) > 10


# --- chosen node, dark page, config -----------------------------------------------------------


def subtree_labels(data: dict, tree: BeamTree, top: int) -> tuple[int, int]:
    """(labelled, all) live nodes of top's subtree."""
    inside = set(_subtree(tree, top))
    rows = traces(data)["kept (circle) / finished (square)"]
    texts = [t for row, t in zip(rows["customdata"], rows["text"], strict=True) if row[5] in inside]
    return sum(bool(t) for t in texts), len(texts)


def test_a_click_on_a_crowded_node_zooms_to_its_subtree_where_its_labels_fit(big_tree):
    node = next(
        n for n in big_tree.nodes if n.fate == KEPT and n.step == 24 and len(_subtree(big_tree, n.id)) > 10
    )
    before = beam_tree_data(big_tree, chosen=node.id)
    window = node_focus(big_tree, node.id)
    assert window is not None
    zoomed = beam_tree_data(big_tree, chosen=node.id, window=window)
    labelled, total = subtree_labels(zoomed, big_tree, node.id)
    assert labelled > subtree_labels(before, big_tree, node.id)[0] and labelled >= total / 3
    assert window[0] <= node.step <= window[1]
    ring = traces(zoomed)["chosen node"]
    assert ring["x"] == [node.step] and "chosen node" not in traces(beam_tree_data(big_tree))


def test_a_click_where_the_labels_fit_already_keeps_the_view(small_tree):
    best = small_tree.hypotheses[0].node_id
    assert node_focus(small_tree, best) is None
    assert node_focus(small_tree, 10**6) is None  # not a drawn node


def _subtree(tree: BeamTree, top: int) -> list[int]:
    found, queue = [], [top]
    while queue:
        found += queue
        queue = [c for i in queue for c in tree.nodes[i].children]
    return found


def test_backgrounds_are_transparent_and_a_dark_page_gets_light_text(small_tree):
    light = beam_tree_data(small_tree)["layout"]
    dark = beam_tree_data(small_tree, frame=PlotFrame(dark=True))["layout"]
    for layout in (light, dark):
        assert layout["paper_bgcolor"] == layout["plot_bgcolor"] == "rgba(0, 0, 0, 0)"
        assert "white" not in json.dumps(layout).lower() and "#fff" not in json.dumps(layout).lower()
    assert "color" not in light["font"] and dark["font"]["color"] == DARK_TEXT
    assert dark["meta"]["beam_view"]["dark"] is True


def test_the_figure_is_valid_plotly_and_exports_at_presentation_resolution(small_tree):
    fig = beam_tree_figure(small_tree, 1, unfolded=[0], chosen=small_tree.hypotheses[0].node_id)
    assert isinstance(fig, go.Figure) and fig.layout.dragmode == "pan"
    config = figure_config("svg")
    assert config["toImageButtonOptions"]["scale"] >= 2 and config["toImageButtonOptions"]["format"] == "svg"
    assert config["scrollZoom"] is True and config["doubleClick"] is False  # static/beam.js gates and fits


# --- label placement (pure geometry) -----------------------------------------------------------


def test_text_width_uses_arial_metrics_and_is_generous_elsewhere():
    assert text_width("prompt", 12) == pytest.approx(12 * (556 + 333 + 556 + 833 + 556 + 278) / 1000)
    assert text_width("␣", 10) == 10  # Chromium draws it 6.4 px wide: never underestimated


def test_place_labels_keeps_the_first_of_two_that_overlap_and_tries_other_positions():
    area = Area(0, 10, 0, 10, 500, 500)
    first = Label("a", "a", "first", 5, 5, 10, 12, ["top center"])
    second = Label("b", "b", "second", 5, 5.1, 10, 12, ["top center", "bottom center"])
    assert place_labels([first, second], area) == {
        "a": ("top center", "first"),
        "b": ("bottom center", "second"),
    }
    edge = Label("c", "c", "clipped", 0, 10, 10, 12, ["top center", "middle right", "bottom right"])
    assert place_labels([edge], area) == {"c": ("bottom right", "clipped")}  # nothing outside the area
    blocked = Label("d", "d", "blocked", 5, 5, 10, 12, ["top center"])
    marker_above = [("other", 5, 5.4, 10.0)]
    assert place_labels([blocked], area, marker_above) == {}
    assert place_labels([blocked], area, [("d", 5, 5.4, 10.0)]) == {"d": ("top center", "blocked")}


# --- the tab's view handlers --------------------------------------------------------------------


def test_parse_view_reads_the_browser_report_and_refuses_junk():
    frame, window = parse_view("1,9,-20,2,1100,480,1216,600,0,1,0,0:1712")
    assert window == (1, 9, -20, 2)
    assert frame == PlotFrame(1216, 116, 120, True)
    assert parse_view("1,9,-20,2,1100,480,1216,600,1,0,0,0:1")[1] is None  # the whole tree
    stage, _ = parse_view("1,9,-20,2,1100,480,1216,600,1,0,1,455:1")
    assert stage.presenter and stage.room == 455 and stage.font_px > 12
    junk_views = (
        "",
        "1,2,3",
        "1,9,-20,2,1100,480,1216,600,0,1:1712",  # the old report, without presenter and room
        "1,9,-20,2,1100,480,1216,600,0,nan,0,0:1",
        "9,1,-20,2,1100,480,1216,600,0,0,0,0:1",
        "1,9,-20,2,1100,480,1216,600,0,0,1,-5:1",
    )
    for junk in junk_views:
        with pytest.raises(PlaygroundError, match="Not a view of the tree"):
            parse_view(junk)


@pytest.fixture(scope="module")
def handlers(tiny_lm):
    h = BeamHandlers(tiny_lm, Workspaces(tiny_lm))
    h.beam_run(PROMPT, False, 4, 12, 1.0, "off", 0, True, "png", TAB, progress=lambda *a, **k: None)
    return h


def test_a_reported_view_is_drawn_and_kept_for_later_redraws(handlers):
    figure = json.loads(
        handlers.beam_view("2,8,-9,-1,900,400,1000,600,0,0,0,0:5", 0, True, "png", TAB)["plot"].plot
    )
    assert figure["layout"]["xaxis"]["range"] == [2, 8] and figure["layout"]["yaxis"]["range"] == [-9, -1]
    area = [900, figure["layout"]["height"] - 200]  # the margins the browser reported, not MARGIN's
    assert figure["layout"]["meta"]["beam_view"]["area"] == area
    redrawn = json.loads(handlers.beam_redraw(1, True, "png", TAB)["plot"].plot)
    assert redrawn["layout"]["xaxis"]["range"] == [2, 8]
    fitted = json.loads(
        handlers.beam_view("2,8,-9,-1,900,400,1000,600,1,0,0,0:6", 0, True, "png", TAB)["plot"].plot
    )
    assert fitted["layout"]["meta"]["beam_view"]["window"] == fitted["layout"]["meta"]["beam_view"]["fit"]
    assert handlers.beam_view("", 0, True, "png", TAB) == {}


def test_a_click_on_a_fold_unfolds_it_and_a_second_folds_it_again(handlers):
    ws = handlers.workspaces.get(TAB.session_hash)
    parent = next(n.parent for n in ws.beam.nodes if n.fate == PRUNED)

    def pruned_drawn(result: dict) -> set[int]:
        figure = json.loads(result["plot"].plot)
        return {row[5] for row in traces(figure)["pruned"]["customdata"]}

    unfolded = handlers.beam_click_node(f"fold-{parent}:1", 0, True, "png", TAB)
    assert set(pruned_children(ws.beam, parent)) <= pruned_drawn(unfolded) and "node" not in unfolded
    folded = handlers.beam_click_node(f"fold-{parent}:2", 0, True, "png", TAB)
    assert not set(pruned_children(ws.beam, parent)) & pruned_drawn(folded)
    assert handlers.beam_click_node("fold-x:3", 0, True, "png", TAB) == {}


def test_a_click_on_a_node_chooses_it_and_rings_it(handlers):
    ws = handlers.workspaces.get(TAB.session_hash)
    node = next(n for n in ws.beam.nodes if n.fate == KEPT and n.step == 3)
    result = handlers.beam_click_node(f"{node.id}:4", 0, True, "png", TAB)
    assert result["node"] == node.id == ws.beam_node and result["prefix_text"].startswith(PROMPT)
    ring = traces(json.loads(result["plot"].plot))["chosen node"]
    assert ring["x"] == [3]
