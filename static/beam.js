() => {
  // Beam search tab: a click on a tree node chooses it. Plotly's click is not a Gradio event,
  // so the node id goes into a hidden textbox whose input event runs the handler.
  const wire = (plot) => {
    if (plot.dataset.clickWired) return;
    plot.dataset.clickWired = "1";
    plot.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      const nodeId = point && point.customdata && point.customdata[5];
      const box = document.querySelector("#beam-clicked-node textarea, #beam-clicked-node input");
      if (nodeId === undefined || nodeId === null || !box) return;
      box.value = `${nodeId}:${Date.now()}`;  // always a new value, so a second click counts
      box.dispatchEvent(new Event("input", { bubbles: true }));
    });
  };
  new MutationObserver(() => {
    document.querySelectorAll("#beam-plot .js-plotly-plot").forEach((plot) => plot.on && wire(plot));
  }).observe(document.body, { childList: true, subtree: true });
}
