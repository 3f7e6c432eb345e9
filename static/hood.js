() => {
  // Under the hood: clicks on its charts (static/plotclick.js carries them to the server).
  // attention grid: x = layer + a fraction, y = head + a fraction -> "layer,head"
  window.playgroundOnPlotClick("#hood-attn-grid", "hood-attn-cell", (p) => `${Math.round(p.x)},${Math.round(p.y)}`);
  // logit lens top tokens: customdata [token id, piece] -> "id"
  window.playgroundOnPlotClick("#hood-lens-top", "hood-lens-pick", (p) => p.customdata && `${p.customdata[0]}`);
}
