() => {
  // Escape closes a pinned token card (a click focuses a token to pin its card).
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.activeElement?.classList.contains("tok")) {
      document.activeElement.blur();
    }
  });
  // One-line tooltips for buttons (Gradio buttons take no title): what the button teaches.
  const tips = {
    "step-open-lens": "This step's next token after every layer: the logit lens (Under the hood)",
    "step-continue-chat": "Continue this path as a chat answer with the same settings",
  };
  const addTips = () => {
    for (const [id, tip] of Object.entries(tips)) {
      const el = document.getElementById(id);
      if (el && !el.title) el.title = tip;
    }
  };
  // On stage the step text is a short scrolling box (static/stage.css): each new text (a new
  // element on every update) opens at its end; a hand scroll afterwards stays where it is.
  const showNewestTokens = () => {
    const stream = document.querySelector("body.presenter #step-text .token-stream:not([data-scrolled])");
    if (stream) {
      stream.dataset.scrolled = "end";
      stream.scrollTop = stream.scrollHeight;
    }
  };
  new MutationObserver(() => {
    addTips();
    showNewestTokens();
  }).observe(document.body, { childList: true, subtree: true });
}
