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
  new MutationObserver(() => {
    for (const target of targets) {
      document.querySelectorAll(`${target.plot} .js-plotly-plot`).forEach((plot) => plot.on && wireClick(plot, target));
    }
  }).observe(document.body, { childList: true, subtree: true });
}
