() => {
  // Under the hood: a click on a plotly chart is not a Gradio event, so the clicked cell goes into
  // a hidden textbox whose input event runs the handler (as in the beam tab).
  const targets = [
    // attention grid: customdata [layer, head, sink share] -> "layer,head"
    { plot: "#hood-attn-grid", box: "#hood-attn-cell", value: (c) => `${c[0]},${c[1]}` },
    // logit lens top tokens: customdata [token id, piece] -> "id"
    { plot: "#hood-lens-top", box: "#hood-lens-pick", value: (c) => `${c[0]}` },
  ];
  const wire = (plot, target) => {
    if (plot.dataset.hoodClickWired) return;
    plot.dataset.hoodClickWired = "1";
    plot.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      const box = document.querySelector(`${target.box} textarea, ${target.box} input`);
      if (!point || !point.customdata || !box) return;
      box.value = `${target.value(point.customdata)}:${Date.now()}`;  // always new: a second click counts
      box.dispatchEvent(new Event("input", { bubbles: true }));
    });
  };
  new MutationObserver(() => {
    for (const target of targets) {
      document.querySelectorAll(`${target.plot} .js-plotly-plot`).forEach((plot) => plot.on && wire(plot, target));
    }
  }).observe(document.body, { childList: true, subtree: true });
}
