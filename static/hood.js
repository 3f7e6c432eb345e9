() => {
  // Under the hood: a click on a plotly chart is not a Gradio event, so the clicked cell goes into
  // a hidden textbox whose change event runs the handler (as in the beam tab).
  const targets = [
    // attention grid: x = layer + a fraction, y = head + a fraction -> "layer,head"
    { plot: "#hood-attn-grid", box: "#hood-attn-cell", value: (p) => `${Math.round(p.x)},${Math.round(p.y)}` },
    // logit lens top tokens: customdata [token id, piece] -> "id"
    { plot: "#hood-lens-top", box: "#hood-lens-pick", value: (p) => p.customdata && `${p.customdata[0]}` },
  ];
  const wireClick = (plot, target) => {
    if (plot.dataset.hoodClickWired) return;
    plot.dataset.hoodClickWired = "1";
    plot.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      const box = document.querySelector(`${target.box} textarea, ${target.box} input`);
      const value = point && target.value(point);
      if (!value || !box) return;
      box.value = `${value}:${Date.now()}`;  // always new: a second click counts
      box.dispatchEvent(new Event("input", { bubbles: true }));
    });
  };
  // The figures set no font colour (transparent backgrounds, grey grids): take the page's text
  // colour, so that they read in the light and the dark theme alike.
  const followTheme = (plot) => {
    const apply = () => {
      const color = getComputedStyle(plot).getPropertyValue("--body-text-color").trim();
      if (color && window.Plotly && plot._fullLayout && plot._fullLayout.font.color !== color) {
        window.Plotly.relayout(plot, { "font.color": color });
      }
    };
    if (!plot.dataset.hoodThemed) {
      plot.dataset.hoodThemed = "1";
      plot.on("plotly_afterplot", apply);
    }
    apply();
  };
  new MutationObserver(() => {
    for (const target of targets) {
      document.querySelectorAll(`${target.plot} .js-plotly-plot`).forEach((plot) => plot.on && wireClick(plot, target));
    }
    document.querySelectorAll("#hood-views .js-plotly-plot").forEach((plot) => plot.on && followTheme(plot));
  }).observe(document.body, { childList: true, subtree: true });
}
