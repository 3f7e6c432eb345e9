() => {
  // Presenter mode and figures that follow the page: dark backgrounds in dark mode, larger text on
  // stage, and PNG (3x) and SVG downloads on every plot. Figures come from the server light and at
  // desk size; each plot is restyled here after it draws, so every view gets the same treatment.
  const params = new URLSearchParams(location.search);
  if (params.get("presenter") === "1") document.body.classList.add("presenter");
  const dark = () => document.body.classList.contains("dark");
  const presenter = () => document.body.classList.contains("presenter");
  const FG = "#e5e7eb";
  const GRID = "rgba(229, 231, 235, 0.18)";
  const STAGE_SCALE = 1.4;

  // What the server sent, captured once per figure, so that leaving presenter mode restores it.
  const base = (gd) => {
    if (gd._playgroundFigure !== gd.data) {
      gd._playgroundFigure = gd.data;
      gd._playgroundBase = {
        font: gd.layout?.font?.size || 12,
        text: (gd.data || []).map((trace) => trace.textfont?.size || 12),
        height: gd.layout?.height,
        frame: (gd._fullLayout?._size?.t || 0) + (gd._fullLayout?._size?.b || 0),
        yaxis: { autorange: gd.layout?.yaxis?.autorange ?? true, range: gd.layout?.yaxis?.range ?? null },
      };
    }
    return gd._playgroundBase;
  };

  // On stage a figure's plot area keeps its desk height: the figure grows by what its larger text
  // takes from the margins (sizes.frame: the margins as the server drew it). It never runs past the
  // bottom of the window: one that starts in the first screen keeps the room below its top, one that
  // starts lower (the speaker scrolls to it) fits the whole window. Never lower than its margins and
  // a readable plot area: none is plotly's "Something went wrong with axis scaling".
  const STAGE_MIN_HEIGHT = 200;
  const fitHeight = (gd, sizes) => {
    const size = gd._fullLayout?._size;
    const margins = size ? size.t + size.b : 0;
    const height = sizes.height + Math.max(0, margins - sizes.frame);
    const top = gd.getBoundingClientRect().top + window.scrollY;
    const below = window.innerHeight - top - 12;
    const room = below >= Math.min(height, STAGE_MIN_HEIGHT) ? below : window.innerHeight - 24;
    const least = Math.max(STAGE_MIN_HEIGHT, margins + 120);
    return Math.round(Math.min(height, Math.max(least, room)));
  };

  // A figure that sizes its own text and height for the stage (the beam tree places its labels
  // for them, see static/beam.js) only gets the dark colours here.
  const stageSized = (gd) => gd.layout?.meta?.stage_sized === true;

  const layoutPatch = (gd, sizes) => {
    const patch = {};
    const want = (key, value, current) => {
      if (current !== value) patch[key] = value;
    };
    const layout = gd.layout || {};
    for (const name of Object.keys(gd._fullLayout || {}).filter((k) => /^[xy]axis\d*$/.test(k))) {
      want(`${name}.automargin`, true, layout[name]?.automargin);  // tick labels never clipped
    }
    if (dark()) {
      want("paper_bgcolor", "rgba(0,0,0,0)", layout.paper_bgcolor);
      want("plot_bgcolor", "rgba(0,0,0,0)", layout.plot_bgcolor);
      want("font.color", FG, layout.font?.color);
      want("legend.bgcolor", "rgba(0,0,0,0)", layout.legend?.bgcolor);
      for (const name of Object.keys(gd._fullLayout || {}).filter((k) => /^[xy]axis\d*$/.test(k))) {
        want(`${name}.gridcolor`, GRID, layout[name]?.gridcolor);
        want(`${name}.zerolinecolor`, GRID, layout[name]?.zerolinecolor);
        want(`${name}.linecolor`, GRID, layout[name]?.linecolor);
      }
    }
    if (stageSized(gd)) return patch;  // static/beam.js keeps its height
    want("font.size", presenter() ? Math.round(sizes.font * STAGE_SCALE) : sizes.font, layout.font?.size || 12);
    if (sizes.height) want("height", presenter() ? fitHeight(gd, sizes) : sizes.height, layout.height);
    Object.assign(patch, stageRowsPatch(gd, sizes));
    return patch;
  };

  // A chart of category rows (layout.meta.stage_rows = n, e.g. the step candidates) shows only its
  // first n rows on stage, where its height is fitted to the window: every row keeps its label.
  const stageRowsPatch = (gd, sizes) => {
    const rows = gd.layout?.meta?.stage_rows;
    const axis = gd.layout?.yaxis || {};
    if (!rows) return {};
    const count = Math.max(...(gd.data || []).map((trace) => (trace.y || []).length), 0);
    const cut = presenter() && count > rows;
    // plotly turns autorange "reversed" (the most likely row on top) into a reversed range
    const saved = sizes.yaxis.range;
    const reversed = sizes.yaxis.autorange === "reversed" || (Array.isArray(saved) && saved[0] > saved[1]);
    const range = cut ? (reversed ? [rows - 0.5, -0.5] : [-0.5, rows - 0.5]) : sizes.yaxis.range;
    const autorange = cut ? false : sizes.yaxis.autorange;
    if (axis.autorange === autorange && JSON.stringify(axis.range ?? null) === JSON.stringify(range)) return {};
    return { "yaxis.autorange": autorange, "yaxis.range": range };
  };

  const textPatch = (gd, sizes) => {
    if (stageSized(gd)) return null;
    const wanted = sizes.text.map((size) => (presenter() ? Math.round(size * STAGE_SCALE) : size));
    const current = (gd.data || []).map((trace) => trace.textfont?.size || 12);
    return wanted.some((size, i) => size !== current[i]) ? { "textfont.size": wanted } : null;
  };

  const addExports = (gd) => {
    // The camera button saves a PNG at 3x; an added button saves an SVG (vector, for slides).
    const context = gd._context;
    if (!context || context.playgroundExports) return false;
    const name = (gd.closest("[id]")?.id || "figure").replace(/[^\w-]/g, "") || "figure";
    context.playgroundExports = true;
    context.toImageButtonOptions = { format: "png", scale: 3, filename: name };
    context.modeBarButtonsToAdd = [
      {
        name: window.playgroundT("js.svg"),
        icon: window.Plotly.Icons.disk,
        click: (plot) => window.Plotly.downloadImage(plot, { format: "svg", filename: name }),
      },
    ];
    return true;
  };

  const style = async (gd) => {
    if (!window.Plotly || !gd._fullLayout || gd._playgroundStyling) return;
    gd._playgroundStyling = true;
    try {
      const sizes = base(gd);
      if (addExports(gd)) await window.Plotly.react(gd, gd.data, gd.layout, gd._context);
      const patch = layoutPatch(gd, sizes);
      if (Object.keys(patch).length) await window.Plotly.relayout(gd, patch);
      const text = textPatch(gd, sizes);
      if (text) await window.Plotly.restyle(gd, text);
    } finally {
      gd._playgroundStyling = false;
    }
  };

  const watch = (gd) => {
    if (gd._playgroundWired || !gd.on) return;
    gd._playgroundWired = true;
    gd.on("plotly_afterplot", () => style(gd));  // a new figure from the server: style it again
    style(gd);
  };
  // A figure that arrives while its tab is hidden is drawn at plotly's default 700 px, and plotly's
  // own resize skips a figure whose layout has a width and a height: once its box shows or changes
  // width, it is drawn again at that width (and, on stage, for the room below it).
  const shown = new ResizeObserver((entries) => {
    for (const { target } of entries) {
      const gd = target.querySelector(":scope > .js-plotly-plot");
      const width = Math.round(gd?.getBoundingClientRect().width || 0);
      if (!gd?._fullLayout || !window.Plotly || width < 20 || Math.abs(gd._fullLayout.width - width) < 2) continue;
      window.Plotly.relayout(gd, { width }).then(() => style(gd));
    }
  });
  const watchSize = (gd) => {
    if (gd._playgroundSized || !gd.parentElement) return;
    gd._playgroundSized = true;
    shown.observe(gd.parentElement);
  };
  // The toolbar's presenter button says whether presenter mode is on (aria-pressed).
  const markToggle = () => {
    const button = document.getElementById("presenter-toggle");
    if (button && button.getAttribute("aria-pressed") !== String(presenter())) {
      button.setAttribute("aria-pressed", String(presenter()));
    }
    const tip = window.playgroundT("js.presenter.tip");
    if (button && button.title !== tip) button.title = tip;
  };
  // On stage a figure's fitted height depends on what lies above it, which may change after it was
  // styled (a figure or a text drawn above it later): once per frame after the page changes, a
  // shown figure whose height no longer fits is styled again.
  let refitQueued = false;
  const refit = () => {
    if (refitQueued || !presenter()) return;
    refitQueued = true;
    requestAnimationFrame(() => {
      refitQueued = false;
      document.querySelectorAll(".js-plotly-plot").forEach((gd) => {
        const sizes = gd._playgroundBase;
        if (!sizes?.height || !gd._fullLayout || !gd.offsetParent || stageSized(gd)) return;
        if (Math.abs(fitHeight(gd, sizes) - (gd.layout?.height || 0)) > 2) style(gd);
      });
    });
  };
  const scan = () => {
    document.querySelectorAll(".js-plotly-plot").forEach((gd) => {
      watch(gd);
      watchSize(gd);
    });
    markToggle();
    refit();
  };
  new MutationObserver(scan).observe(document.body, { childList: true, subtree: true });

  window.playgroundTogglePresenter = (on) => {
    document.body.classList.toggle("presenter", on ?? !presenter());
    document.querySelectorAll(".js-plotly-plot").forEach(style);
    const url = new URL(location.href);
    if (presenter()) url.searchParams.set("presenter", "1");
    else url.searchParams.delete("presenter");
    history.replaceState(null, "", url);
    markToggle();
    return presenter();
  };
}
