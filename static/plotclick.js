() => {
  // Plotly clicks into Gradio events, for every tab: a click on a plotly chart is not a Gradio
  // event, so the clicked value goes into a hidden textbox whose input event runs the handler.
  // - playgroundSend(boxId, value): "value:time" into the box (always new, so a repeat counts).
  // - playgroundOnPlotClick(plotSelector, boxId, valueOf): every plotly chart inside plotSelector,
  //   now and after each redraw (Gradio mounts a new chart each time), sends valueOf(point) on click
  //   (nothing when it returns a falsy value).
  window.playgroundSend = (id, value) => {
    const box = document.querySelector(`#${id} textarea, #${id} input`);
    if (!box) return;
    box.value = `${value}:${Date.now()}`;
    box.dispatchEvent(new Event("input", { bubbles: true }));
  };
  const targets = [];
  const wire = (plot, target) => {
    const flag = `click${target.index}`;
    if (!plot.on || plot.dataset[flag]) return;
    plot.dataset[flag] = "1";
    plot.on("plotly_click", (event) => {
      const point = event.points && event.points[0];
      const value = point && target.valueOf(point);
      if (value) window.playgroundSend(target.boxId, value);
    });
  };
  const wireAll = () => {
    for (const target of targets) {
      document.querySelectorAll(`${target.selector} .js-plotly-plot`).forEach((plot) => wire(plot, target));
    }
  };
  window.playgroundOnPlotClick = (selector, boxId, valueOf) => {
    targets.push({ selector, boxId, valueOf, index: targets.length });
    wireAll();
  };
  new MutationObserver(wireAll).observe(document.body, { childList: true, subtree: true });
}
