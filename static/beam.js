() => {
  // Beam search tab (playground/plots/beam.py draws the tree, playground/ui/beam_tab.py serves it).
  // - A click on a node chooses it; a click on a grey "+N pruned" marker unfolds (or folds) its
  //   candidates. Plotly's click is not a Gradio event: "id:time" or "fold-id:time" goes into a
  //   hidden textbox whose input event runs the handler.
  // - After a zoom, pan or resize, the view (axis ranges, plot size, whether the page is dark)
  //   goes into another hidden textbox, and the server redraws the tree at that view with the
  //   labels and marker sizes that fit there (also when presenter mode or the theme switches:
  //   text sizes and the figure's height change); a double click asks for the whole tree. The
  //   figure's layout.meta.beam_view says which view it was drawn for (and which view fits the
  //   whole tree), so the redraw itself asks nothing.
  // - The mouse wheel scrolls the page unless the plot has focus: a click in it gives focus (the
  //   wheel then zooms), Escape or a click outside takes it away.
  const FOCUSED = "beam-plot-focused";
  const send = window.playgroundSend; // static/plotclick.js
  // A click on a node chooses it; on a grey "+N pruned" marker (data[6] "fold") unfolds it.
  window.playgroundOnPlotClick("#beam-plot", "beam-clicked-node", (point) => {
    const data = point.customdata;
    if (!data || data[5] === undefined || data[5] === null) return null;
    return data[6] === "fold" ? `fold-${data[5]}` : `${data[5]}`;
  });
  const near = (a, b, tolerance) =>
    Array.isArray(a) && Array.isArray(b) && a.length === b.length &&
    a.every((v, i) => Math.abs(v - b[i]) <= tolerance[i]);

  // "x0,x1,y0,y1,area_w,area_h,fig_w,fig_h,fit,dark,presenter,room": what
  // playground/ui/beam_tab.py parse_view reads. On stage (presenter mode, static/theme.js) the
  // server draws larger text and ends the figure above the window's bottom: room is the px from
  // the figure's top to there (static/theme.js fitHeight's rule).
  const dark = () => document.body.classList.contains("dark"); // Gradio marks a dark page so
  const presenter = () => document.body.classList.contains("presenter");
  const room = (plot) => {
    const top = plot.getBoundingClientRect().top + window.scrollY;
    return presenter() ? Math.max(0, Math.round(window.innerHeight - top - 12)) : 0;
  };
  const viewText = (plot, range, fit) => {
    const full = plot._fullLayout;
    const size = [full._size.w, full._size.h, full.width, full.height];
    const page = [fit ? 1 : 0, dark() ? 1 : 0, presenter() ? 1 : 0, room(plot)];
    return [...range, ...size, ...page].join(",");
  };
  const metaOf = (plot) => plot.layout && plot.layout.meta && plot.layout.meta.beam_view;

  const reportView = (plot) => {
    const full = plot._fullLayout;
    const meta = metaOf(plot);
    if (!full || !meta || full._size.w < 20 || full._size.h < 20) return; // not drawn, or a hidden tab
    // Gradio mounts each new figure at plotly's default 700 px width, then resizes it to its box:
    // a view reported in between would be redrawn for the wrong size (and that redraw mounts again).
    if (Math.abs(full.width - plot.getBoundingClientRect().width) > 2) return;
    const range = [...full.xaxis.range, ...full.yaxis.range].map(Number);
    const dx = Math.abs(range[1] - range[0]) * 1e-3;
    const dy = Math.abs(range[3] - range[2]) * 1e-3;
    const tolerance = [dx, dx, dy, dy];
    const area = [full._size.w, full._size.h];
    const sameView = near(range, meta.window, tolerance) && near(area, meta.area, [1.5, 1.5]);
    const samePage = dark() === meta.dark && presenter() === meta.presenter &&
      (!presenter() || Math.abs(room(plot) - meta.room) <= 4);
    if (sameView && samePage) return;
    send("beam-view", viewText(plot, range, near(range, meta.fit, tolerance)));
  };
  const reportAll = () =>
    document.querySelectorAll("#beam-plot .js-plotly-plot").forEach((plot) => reportView(plot));

  const wire = (plot) => {
    if (plot.dataset.viewWired) return;
    plot.dataset.viewWired = "1";
    // Each server redraw mounts a new plot (Gradio 6 re-creates it), drawn at the view the
    // server knows; a double click asks for the whole tree again.
    plot.on("plotly_doubleclick", () => {
      const meta = metaOf(plot);
      if (meta && plot._fullLayout) send("beam-view", viewText(plot, meta.fit, true));
    });
    let timer = null;
    let resized = null;
    const later = () => {
      clearTimeout(timer);
      if (!plot.isConnected) return resized && resized.disconnect(); // a redraw mounted a new plot
      timer = setTimeout(() => reportView(plot), 250);
    };
    // Plotly's autosize (a window resize) drops layout.height and the plot collapses to 0 px:
    // put back the height the tree was laid out for.
    const keepHeight = () => {
      const meta = metaOf(plot);
      if (meta && meta.height && plot.layout.height !== meta.height && window.Plotly) {
        window.Plotly.relayout(plot, { height: meta.height });
      }
    };
    plot.on("plotly_afterplot", keepHeight);
    plot.on("plotly_afterplot", later);
    // A tab shown again (its plot was hidden, 0 px, when the page or its theme changed) or a
    // resized box: report the view it now has.
    // It also reports once now: the first draw may be over before this wiring.
    resized = new ResizeObserver(later);
    resized.observe(plot);
  };
  new MutationObserver(() => {
    document.querySelectorAll("#beam-plot .js-plotly-plot").forEach((plot) => plot.on && wire(plot));
  }).observe(document.body, { childList: true, subtree: true });
  // Presenter mode or the theme switched: the tree is drawn again for the new page.
  new MutationObserver(() => setTimeout(reportAll, 250)).observe(document.body, {
    attributes: true,
    attributeFilter: ["class"],
  });

  const setFocus = (root, on) => {
    root.classList.toggle(FOCUSED, on);
    root.style.outline = on ? "2px solid #2a7de1" : "";
    root.style.outlineOffset = on ? "2px" : "";
  };
  document.addEventListener("mousedown", (event) => {
    const root = document.querySelector("#beam-plot");
    if (root) setFocus(root, root.contains(event.target));
  }, true);
  document.addEventListener("keydown", (event) => {
    const root = document.querySelector("#beam-plot");
    if (event.key === "Escape" && root) setFocus(root, false);
  });
  // Capture phase, before plotly's own listener: unless the plot has focus, the wheel event never
  // reaches plotly, and the browser scrolls the page as usual (nothing calls preventDefault).
  window.addEventListener("wheel", (event) => {
    const root = document.querySelector("#beam-plot");
    if (root && root.contains(event.target) && !root.classList.contains(FOCUSED)) event.stopPropagation();
  }, { capture: true, passive: true });
}
